//! A server's membership: a lease in etcd and the key `member/<name>` on
//! it, kept alive; and R1 — whether this server may still act as a member
//! *now*, by its own timer (`sextant_cluster::lease::LeaseTimer`: from the
//! send time of the last acknowledged keep-alive, minus a margin), never
//! by etcd's TTL.
//!
//! The keeper task sends one keep-alive at a time and waits for its answer
//! at most the request timeout: a paused or partitioned etcd makes the
//! timer run out instead of hanging anything. A broken keep-alive stream
//! (etcd restarted, connection lost) is re-created by the next round; a
//! lease etcd no longer knows (it expired while we could not reach etcd)
//! is replaced by a new one — a new *generation* of membership, which the
//! server must treat as having lost every table it held.
//!
//! Joining is a create-if-absent of `member/<name>`: a key still held by a
//! live lease (another server with the same name, or our own earlier
//! lease) is not taken over.

use crate::etcd::{bounded, connect, EtcdConfig};
use crate::keys;
use crate::CoordError;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use sextant_cluster::ids::Millis;
use sextant_cluster::lease::LeaseTimer;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Settings of a membership.
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    pub etcd: EtcdConfig,
    /// This server's name (`member/<name>`; [`crate::keys::valid_name`]).
    pub name: String,
    /// Where clients reach this server (the value of `member/<name>`).
    pub address: String,
    /// The lease's TTL (whole seconds; etcd's unit).
    pub ttl: Duration,
    /// Subtracted from the timer for clock-rate differences.
    pub margin: Duration,
}

impl MembershipConfig {
    pub fn new(etcd: EtcdConfig, name: &str, address: &str) -> MembershipConfig {
        MembershipConfig {
            etcd,
            name: name.to_string(),
            address: address.to_string(),
            ttl: Duration::from_secs(6),
            margin: Duration::from_millis(500),
        }
    }

    pub fn member_key(&self) -> String {
        self.etcd.key(&keys::member_key(&self.name))
    }
}

/// What the keeper shares with the server.
struct Shared {
    timer: LeaseTimer,
    lease: i64,
    generation: u64,
}

/// A live membership; dropping it stops the keeper (the lease then ends
/// by itself after its TTL).
pub struct Membership {
    shared: Arc<Mutex<Shared>>,
    start: Instant,
    keeper: JoinHandle<()>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

fn millis(start: Instant, at: Instant) -> Millis {
    Millis(at.saturating_duration_since(start).as_millis() as u64)
}

/// Grants a lease and creates `member/<name>` on it; returns the lease
/// and the time the grant was sent (the timer's start).
async fn join_once(
    client: &mut Client,
    cfg: &MembershipConfig,
) -> Result<(i64, Instant), CoordError> {
    let sent = Instant::now();
    let ttl = cfg.ttl.as_secs().max(1) as i64;
    let lease = bounded(&cfg.etcd, client.lease_grant(ttl, None))
        .await?
        .id();
    let key = cfg.member_key();
    let txn = Txn::new()
        .when(vec![Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            0,
        )])
        .and_then(vec![
            TxnOp::put(
                key,
                cfg.address.clone(),
                Some(PutOptions::new().with_lease(lease)),
            ),
            // R3: a reassignment decided on a view from before this join
            // compares this key's revision and fails (the coordinator
            // decides again on a view that shows this join).
            TxnOp::put(cfg.etcd.key(&keys::joined_key(&cfg.name)), "", None),
        ]);
    let created = bounded(&cfg.etcd, client.txn(txn)).await?.succeeded();
    if !created {
        let _ = bounded(&cfg.etcd, client.lease_revoke(lease)).await;
        return Err(CoordError::NameTaken {
            name: cfg.name.clone(),
        });
    }
    Ok((lease, sent))
}

impl Membership {
    /// Joins the cluster: fails if etcd cannot be reached or the name is
    /// taken by a live member.
    pub async fn join(cfg: MembershipConfig) -> Result<Membership, CoordError> {
        let start = Instant::now();
        if !keys::valid_name(&cfg.name) {
            return Err(CoordError::BadName {
                name: cfg.name.clone(),
            });
        }
        let mut client = connect(&cfg.etcd).await?;
        let (lease, sent) = join_once(&mut client, &cfg).await?;
        let mut timer = LeaseTimer::new(cfg.margin.as_millis() as u64);
        timer.acknowledged(millis(start, sent), cfg.ttl.as_millis() as u64);
        let shared = Arc::new(Mutex::new(Shared {
            timer,
            lease,
            generation: 1,
        }));
        tracing::info!(name = %cfg.name, lease, "joined the cluster");
        let keeper = tokio::spawn(keep(cfg, client, Arc::clone(&shared), start));
        Ok(Membership {
            shared,
            start,
            keeper,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// R1: may this server act as a member now? Check it right before an
    /// acknowledgement (after the operation is durable).
    pub fn valid(&self) -> bool {
        self.lock().timer.valid(millis(self.start, Instant::now()))
    }

    /// How long the timer has left (the `sextant_lease_margin` metric).
    pub fn remaining(&self) -> Duration {
        Duration::from_millis(
            self.lock()
                .timer
                .remaining(millis(self.start, Instant::now())),
        )
    }

    /// The current lease.
    pub fn lease(&self) -> i64 {
        self.lock().lease
    }

    /// Which membership this is: +1 each time the lease was lost and a new
    /// one taken (every table held before is lost).
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// [`Membership::generation`] and the lease `member/<name>` is on in
    /// it, read together (never a generation with another one's lease).
    pub fn generation_and_lease(&self) -> (u64, i64) {
        let s = self.lock();
        (s.generation, s.lease)
    }
}

/// The keeper: a keep-alive every third of the TTL, one at a time.
async fn keep(
    cfg: MembershipConfig,
    mut client: Client,
    shared: Arc<Mutex<Shared>>,
    start: Instant,
) {
    let interval = cfg.ttl / 3;
    let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
    let mut stream = None;
    loop {
        tokio::time::sleep(interval).await;
        let lease = lock().lease;
        if stream.is_none() {
            match bounded(&cfg.etcd, client.lease_keep_alive(lease)).await {
                Ok(s) => stream = Some(s),
                Err(e) if lease_gone(&e) => {
                    rejoin(&mut client, &cfg, &shared, start, lease).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "etcd: cannot open the keep-alive stream; retrying");
                    continue;
                }
            }
        }
        let Some((keeper, answers)) = stream.as_mut() else {
            continue;
        };
        let sent = Instant::now();
        let answer = async {
            keeper.keep_alive().await?;
            answers.message().await
        };
        match bounded(&cfg.etcd, answer).await {
            Ok(Some(a)) if a.ttl() > 0 => {
                lock()
                    .timer
                    .acknowledged(millis(start, sent), a.ttl() as u64 * 1_000);
            }
            Ok(Some(_)) => {
                stream = None;
                rejoin(&mut client, &cfg, &shared, start, lease).await;
            }
            Err(e) if lease_gone(&e) => {
                stream = None;
                rejoin(&mut client, &cfg, &shared, start, lease).await;
            }
            Ok(None) | Err(_) => {
                // The stream broke (etcd restarted, connection lost) or
                // etcd did not answer in time: a new stream next round.
                stream = None;
            }
        }
    }
}

/// Does `e` say that etcd no longer knows the lease?
fn lease_gone(e: &CoordError) -> bool {
    match e {
        CoordError::Etcd { source, .. } => match source {
            etcd_client::Error::LeaseKeepAliveError(m) => m.contains("not found"),
            etcd_client::Error::GRpcStatus(s) => s.message().contains("lease not found"),
            _ => false,
        },
        _ => false,
    }
}

/// etcd no longer knows the lease: it expired while we could not reach
/// etcd. A new membership — a new generation, without any table.
async fn rejoin(
    client: &mut Client,
    cfg: &MembershipConfig,
    shared: &Mutex<Shared>,
    start: Instant,
    old: i64,
) {
    tracing::warn!(
        lease = old,
        "etcd: the membership lease expired; joining again"
    );
    // Whatever the timer said, the old lease is gone.
    shared
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .timer
        .reset();
    match join_once(client, cfg).await {
        Ok((new, sent)) => {
            let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
            s.lease = new;
            s.generation += 1;
            s.timer
                .acknowledged(millis(start, sent), cfg.ttl.as_millis() as u64);
        }
        Err(e) => tracing::warn!(error = %e, "etcd: joining again failed; retrying"),
    }
}
