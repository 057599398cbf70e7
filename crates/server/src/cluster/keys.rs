//! The client key book of a cluster server: kept in etcd
//! (`clientkey/<name>`, see `sextant_coordinator::keys`), shared by every
//! server.
//!
//! - [`EtcdBook`]: the book's store — a change is one conditional write
//!   of one key's record (`sextant_coordinator::admin::write_client_key`);
//! - [`open_book`]: the book as a program other than a server holds it
//!   (`sextant auth --etcd`, no server running), its changes the same
//!   writes;
//! - [`follow`]: every state of the delegation map (which watches the
//!   whole cluster prefix, re-created from its last revision when etcd
//!   restarts) replaces this server's copy when its keys changed — so an
//!   add, rotate or revoke made through any server (or written into etcd
//!   by hand) takes effect here within the watch's delay, and a revoked
//!   key's streams here end.
//!
//! Invariant: the book only moves forward (`KeyBook::replace` ignores a
//! state older than the one it holds).

use crate::clientkeys::{KeyBook, SharedBook};
use anyhow::Result;
use sextant_coordinator::{ClusterState, EtcdClient, EtcdConfig};
use std::sync::Arc;
use tokio::runtime::Handle;

/// The book's records in `state`.
pub fn records(state: &ClusterState) -> Vec<(String, String)> {
    state
        .client_keys
        .iter()
        .map(|(n, r)| (n.clone(), r.clone()))
        .collect()
}

/// The etcd store of the book.
pub struct EtcdBook {
    cfg: EtcdConfig,
    runtime: Handle,
    client: tokio::sync::Mutex<Option<EtcdClient>>,
}

impl EtcdBook {
    /// A store on `cfg`'s etcd; its calls run on `runtime` (they are made
    /// from blocking threads).
    pub fn new(cfg: EtcdConfig, runtime: Handle) -> EtcdBook {
        EtcdBook {
            cfg,
            runtime,
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// Runs `f` with a connected client; a failed call drops it and is
    /// tried again on a new connection, up to [`BOOK_TRIES`] times within
    /// [`BOOK_PATIENCE`] — right after an etcd restart the old connection
    /// times out and etcd may still be electing itself (found by
    /// `client_keys_are_followed_across_an_etcd_restart`: `auth add`
    /// failed once). A retried write is safe: it is conditional on the
    /// record's revision, so one that went through before its answer was
    /// lost makes the retry's condition fail instead of applying twice.
    fn with_client<T, F>(&self, f: F) -> Result<T>
    where
        F: for<'a> Fn(
            &'a mut EtcdClient,
            &'a EtcdConfig,
        ) -> std::pin::Pin<
            Box<
                dyn std::future::Future<Output = Result<T, sextant_coordinator::CoordError>>
                    + Send
                    + 'a,
            >,
        >,
    {
        self.runtime.block_on(async {
            let deadline = tokio::time::Instant::now() + BOOK_PATIENCE;
            let mut slot = self.client.lock().await;
            let mut tries = 0;
            loop {
                tries += 1;
                let r = async {
                    if slot.is_none() {
                        *slot = Some(sextant_coordinator::etcd::connect(&self.cfg).await?);
                    }
                    let client = slot
                        .as_mut()
                        .ok_or_else(|| anyhow::anyhow!("no etcd client"))?;
                    Ok::<T, anyhow::Error>(f(client, &self.cfg).await?)
                }
                .await;
                match r {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        *slot = None;
                        if tries >= BOOK_TRIES || tokio::time::Instant::now() >= deadline {
                            return Err(e);
                        }
                        tracing::warn!(error = %format!("{e:#}"), "the key book's etcd call failed; again on a new connection");
                        tokio::time::sleep(BOOK_RETRY_PAUSE).await;
                    }
                }
            }
        })
    }
}

/// Attempts of one key book call ([`EtcdBook::with_client`]).
const BOOK_TRIES: u32 = 4;
/// No new attempt starts after this long.
const BOOK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(15);
/// The pause between attempts.
const BOOK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

impl SharedBook for EtcdBook {
    fn read(&self, name: &str) -> Result<Option<(String, i64)>> {
        self.with_client(move |c, cfg| {
            let name = name.to_string();
            Box::pin(
                async move { sextant_coordinator::admin::read_client_key(c, cfg, &name).await },
            )
        })
    }

    fn write(&self, name: &str, record: Option<&str>, expect: i64) -> Result<Option<i64>> {
        self.with_client(move |c, cfg| {
            let name = name.to_string();
            let record = record.map(str::to_string);
            Box::pin(async move {
                sextant_coordinator::admin::write_client_key(
                    c,
                    cfg,
                    &name,
                    record.as_deref(),
                    expect,
                )
                .await
            })
        })
    }
}

/// The book of the cluster on `cfg`'s etcd as it is now, each change a
/// conditional write there as a server's ([`EtcdBook`]) — for `sextant
/// auth --etcd`, which manages the keys with no server running; the
/// servers follow etcd, so they see its changes as any other. REQUIRES:
/// called off `runtime`'s threads (a blocking thread, or another); its
/// calls, too.
pub fn open_book(cfg: EtcdConfig, runtime: Handle) -> Result<KeyBook> {
    let state = runtime.block_on(async {
        let mut client = sextant_coordinator::etcd::connect(&cfg).await?;
        Ok::<_, anyhow::Error>(sextant_coordinator::map::load(&mut client, &cfg).await?)
    })?;
    Ok(KeyBook::shared(
        Arc::new(EtcdBook::new(cfg, runtime)),
        &records(&state),
        state.revision,
    ))
}

/// Keeps `book` at the map's keys until the map's channel closes.
pub async fn follow(
    book: Arc<KeyBook>,
    mut states: tokio::sync::watch::Receiver<Arc<ClusterState>>,
) {
    let mut seen: Option<std::collections::BTreeMap<String, String>> = None;
    loop {
        let state = Arc::clone(&states.borrow_and_update());
        if seen.as_ref() != Some(&state.client_keys) {
            book.replace(state.revision, &records(&state));
            seen = Some(state.client_keys.clone());
        }
        if states.changed().await.is_err() {
            return;
        }
    }
}
