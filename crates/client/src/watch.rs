//! Cache invalidation over the wire: [`Client::watch`] (one server's
//! stream) and [`Client::watch_all`] (every server of a cluster).
//!
//! A client that caches names or attributes (the FUSE mount) watches and
//! drops what it cached for each key a stream names. Requests of every
//! client with the same [`crate::Options::origin`] are left out of the
//! streams: their effects are known to the client already.
//!
//! A stream does not resume: when it breaks (server restart, network),
//! changes made meanwhile are unknown, so the caller must treat a new
//! stream like a batch with `lost` set and forget everything it cached.
//!
//! **A cluster.** A server streams only the changes of the mutations it
//! ran itself, and a mutation runs only on the server serving its table
//! then. So [`AllChanges`] watches every server the route map names (one
//! stream per distinct address) and follows the map: it fetches it when
//! it starts, every [`MAP_POLL`] after that and at once when a stream
//! breaks; a server new in the map gets a stream, a server gone from it
//! loses its stream. A single server (its map is one route covering
//! everything, [`RouteTable::whole`]) is watched as before: one stream to
//! the address the client was given, no polling.
//!
//! Why that misses nothing, table moves and failovers included: take any
//! mutation, acknowledged by server S. Either S's stream was open from
//! before the mutation was published until its notice arrived (the
//! notice arrives: a server publishes before it replies and marks a
//! stream `lost` rather than drop a notice); or S's stream opened after
//! it ([`Watched::Opened`]: forget everything, which covers it); or S's
//! stream ended before the notice arrived — it broke and was reopened
//! (`Opened` again) or S left the map and its stream was closed
//! ([`Watched::Left`]: forget everything, since a notice may still have
//! been on its way). A table that moves from S to T needs nothing more:
//! its mutations before the move are S's, after it T's, and each is
//! covered on its own server's account. What a move can cost is time: a
//! server that was in no map the watcher fetched (it held no table) runs
//! the moved table's mutations unseen until the next poll finds it in the
//! map and its stream opens (within about [`MAP_POLL`] plus a connect),
//! and a stream that cannot be (re)opened leaves that server's changes to
//! the cache timeouts, as on a single server.
//!
//! Invariants of [`AllChanges`]:
//! - At most one stream per address, and one only to addresses of the
//!   newest map fetched (maps of a lower revision, from a server that has
//!   not heard yet, are ignored), or to the client's own address on a
//!   single server.
//! - Every stream that opens yields `Opened` before any of its batches;
//!   every stream that breaks yields `Broke`, then `Opened` once reopened
//!   (or `Left`); every stream closed because its server left the map
//!   yields `Left`.
//! - Nothing is spawned: all of it runs inside [`AllChanges::next`], and
//!   dropping the [`AllChanges`] closes every stream.
//! - The map it fetches is not the one the client routes by: routing
//!   still learns maps from WRONG_SERVER only (a single server's map
//!   names its listening address, which may not be the one given).

use crate::{bad_reply, Client, Error, Result};
use sextant_proto::pb;
use sextant_proto::route::RouteTable;
use sextant_proto::{soid_from_pb, MAX_MESSAGE_BYTES};
use sextant_types::Soid;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::transport::Channel;
use tonic::Code;

/// How often [`AllChanges`] fetches a cluster's route map.
pub const MAP_POLL: Duration = Duration::from_secs(1);

/// First and longest wait between attempts to (re)open a stream, or to
/// fetch the first map.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// One batch of changes (see [`ChangeStream::next_batch`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ChangeBatch {
    /// Inodes whose attributes changed (or that are gone).
    pub inodes: Vec<Soid>,
    /// Directory entries `(parent, name)` that were added, replaced or
    /// removed.
    pub entries: Vec<(Soid, Box<[u8]>)>,
    /// Changes were dropped before these: forget everything cached.
    pub lost: bool,
}

/// The changes other clients make, batch by batch.
pub struct ChangeStream {
    inner: tonic::Streaming<pb::WatchBatch>,
}

impl ChangeStream {
    /// The next batch; an error when the stream broke (then open a new
    /// one and forget everything cached).
    pub async fn next_batch(&mut self) -> Result<ChangeBatch> {
        let msg = match self.inner.message().await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(Error::Protocol("the server ended the watch".into())),
            Err(s) if s.code() == Code::Unauthenticated => return Err(Error::Auth),
            Err(s) => {
                return Err(Error::Protocol(format!(
                    "the watch failed: {}",
                    s.message()
                )))
            }
        };
        let mut batch = ChangeBatch {
            lost: msg.lost,
            ..Default::default()
        };
        for c in msg.changes {
            for s in &c.inodes {
                batch
                    .inodes
                    .push(soid_from_pb(Some(s)).map_err(|_| bad_reply("a bad SOID"))?);
            }
            for e in c.entries {
                let parent =
                    soid_from_pb(e.parent.as_ref()).map_err(|_| bad_reply("a bad SOID"))?;
                batch.entries.push((parent, e.name.into_boxed_slice()));
            }
        }
        Ok(batch)
    }
}

/// A fresh random origin for [`crate::Options::origin`] (never 0).
pub fn new_origin() -> u64 {
    crate::random_u64()
}

impl Client {
    /// Opens a stream of the changes made by clients of another origin
    /// than this one's ([`crate::Options::origin`]; 0 watches all) on the
    /// server this client was given. Fails at once when the server cannot
    /// be reached (no retries: the caller decides how to wait).
    pub async fn watch(&self) -> Result<ChangeStream> {
        self.open_watch(self.stream_client(), &self.inner.addr)
            .await
    }

    /// The changes made through every server of a cluster (or the one
    /// server), merged: see [`AllChanges`]. Nothing is opened before the
    /// first [`AllChanges::next`].
    pub fn watch_all(&self) -> AllChanges {
        AllChanges {
            client: self.clone(),
            mode: Mode::Unknown,
            feeds: Vec::new(),
            revision: 0,
            fetch: None,
            fetch_due: true,
            timer: None,
            map_backoff: BACKOFF_MIN,
            ready: VecDeque::new(),
            fatal: None,
        }
    }

    /// [`Client::watch`] on the server at `addr` (this client's own
    /// address: the same as `watch`).
    async fn watch_at(&self, addr: &str) -> Result<ChangeStream> {
        if addr == self.inner.addr {
            return self.watch().await;
        }
        let link = self.link_at(addr)?;
        let grpc = pb::sextant_client::SextantClient::new(link.channel())
            .max_decoding_message_size(4 * MAX_MESSAGE_BYTES);
        self.open_watch(grpc, addr).await
    }

    /// The link to `addr` (the home link for this client's own address).
    fn link_at(&self, addr: &str) -> Result<std::sync::Arc<crate::route::Link>> {
        if addr == self.inner.addr {
            return Ok(std::sync::Arc::clone(&self.inner.home));
        }
        let o = &self.inner.options;
        self.inner
            .router
            .link(
                addr,
                o.connect_timeout,
                o.tls_ca.as_deref(),
                o.tls_domain.as_deref(),
            )
            .map_err(|reason| Error::Unavailable {
                addr: addr.to_string(),
                reason,
            })
    }

    async fn open_watch(
        &self,
        mut grpc: pb::sextant_client::SextantClient<Channel>,
        addr: &str,
    ) -> Result<ChangeStream> {
        let mut request = tonic::Request::new(pb::WatchRequest {
            origin: self.inner.options.origin,
        });
        self.inner.authorize(&mut request, "Watch", addr);
        match grpc.watch(request).await {
            Ok(r) => Ok(ChangeStream {
                inner: r.into_inner(),
            }),
            Err(s) if s.code() == Code::Unauthenticated => Err(Error::Auth),
            // A local user without the secret (the stream names every
            // change, whoever may see it).
            Err(s) if s.code() == Code::PermissionDenied => {
                Err(Error::Fs(sextant_types::FsError::Perm))
            }
            Err(s) if s.code() == Code::Unimplemented => Err(Error::Protocol(
                "the server does not stream changes (an older version)".into(),
            )),
            Err(s) => Err(Error::Unavailable {
                addr: addr.to_string(),
                reason: s.message().to_string(),
            }),
        }
    }

    /// The route map of the first of `addrs` that hands one out.
    async fn map_from_any(&self, addrs: Vec<String>) -> Result<Arc<RouteTable>> {
        let mut last = Error::Protocol("no server to ask for the route map".into());
        for addr in addrs {
            let got = match self.link_at(&addr) {
                Ok(link) => self.map_from(&link).await,
                Err(e) => Err(e),
            };
            match got {
                Ok(map) => return Ok(map),
                Err(Error::Auth) => return Err(Error::Auth),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// What [`AllChanges::next`] yields. `server` is the address watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    /// A stream to `server` opened (the first one, or again after it
    /// broke): changes made through it before are unknown — forget
    /// everything cached.
    Opened { server: String },
    /// Changes made through one server (`lost`: forget everything cached).
    Changes(ChangeBatch),
    /// The stream to `server` broke and is being reopened (`Opened`
    /// follows, or `Left`); changes made through it meanwhile are unseen.
    Broke { server: String, error: Error },
    /// `server` left the route map and is no longer watched: notices it
    /// sent may have been lost with its stream — forget everything cached.
    Left { server: String },
}

/// A route map on its way (see [`Client::map_from_any`]).
type MapFetch = Pin<Box<dyn Future<Output = Result<Arc<RouteTable>>> + Send>>;

/// The changes made through every server of a cluster, merged
/// ([`Client::watch_all`]; see the module doc). Each server's stream is
/// (re)opened by itself, with a backoff of up to 2 s.
pub struct AllChanges {
    client: Client,
    mode: Mode,
    feeds: Vec<Watching>,
    /// Of the map the feeds follow.
    revision: u64,
    fetch: Option<MapFetch>,
    /// Fetch the map as soon as no fetch is in flight.
    fetch_due: bool,
    /// When `fetch_due` turns true next (none: a single server).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Before the first map: the wait after a failed fetch.
    map_backoff: Duration,
    ready: VecDeque<Watched>,
    /// Once set, every `next` returns it (nothing is watched any more).
    fatal: Option<Error>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No map yet.
    Unknown,
    /// One stream to the client's own address, no polling.
    Single,
    /// The servers of the newest map.
    Cluster,
}

/// One server's stream, or the attempts to open it.
struct Feed {
    addr: String,
    stream: Option<ChangeStream>,
    /// Set when the last attempt to open failed: the wait before the next.
    retry: Option<Duration>,
}

enum Event {
    Opened,
    Changes(ChangeBatch),
    Broke(Error),
    /// The server refused the stream for good (the secret, a version
    /// without `Watch`).
    Fatal(Error),
}

/// A feed and its next event, in progress.
struct Watching {
    addr: String,
    step: Pin<Box<dyn Future<Output = (Feed, Event)> + Send>>,
}

impl Watching {
    fn new(client: &Client, addr: String) -> Watching {
        let feed = Feed {
            addr: addr.clone(),
            stream: None,
            retry: None,
        };
        Watching {
            addr,
            step: Box::pin(step(client.clone(), feed)),
        }
    }
}

/// The feed's next event: its next batch, or (with no stream) the stream
/// opened after as many attempts as it takes.
async fn step(client: Client, mut feed: Feed) -> (Feed, Event) {
    if let Some(stream) = feed.stream.as_mut() {
        let event = match stream.next_batch().await {
            Ok(batch) => Event::Changes(batch),
            Err(e) => {
                feed.stream = None;
                Event::Broke(e)
            }
        };
        return (feed, event);
    }
    loop {
        if let Some(wait) = feed.retry {
            tokio::time::sleep(wait).await;
        }
        match client.watch_at(&feed.addr).await {
            Ok(stream) => {
                feed.stream = Some(stream);
                feed.retry = None;
                return (feed, Event::Opened);
            }
            Err(e @ (Error::Auth | Error::Protocol(_))) => return (feed, Event::Fatal(e)),
            Err(e) => {
                tracing::debug!(server = %feed.addr, error = %e, "cannot open the change stream yet");
                feed.retry = Some(feed.retry.map_or(BACKOFF_MIN, |w| (w * 2).min(BACKOFF_MAX)));
            }
        }
    }
}

impl AllChanges {
    /// The next event of any server watched. An error is for good (the
    /// secret refused, a server without `Watch`): nothing is watched any
    /// more. Cancel-safe: nothing is lost when the future is dropped.
    pub async fn next(&mut self) -> Result<Watched> {
        loop {
            if let Some(e) = &self.fatal {
                return Err(e.clone());
            }
            if let Some(w) = self.ready.pop_front() {
                return Ok(w);
            }
            if self.fetch_due && self.fetch.is_none() {
                self.fetch_due = false;
                let client = self.client.clone();
                // Its own server first, then those of the last map.
                let home = client.inner.addr.clone();
                let others = self.feeds.iter().map(|f| &f.addr).filter(|a| **a != home);
                let ask: Vec<String> = others.cloned().collect();
                let ask = std::iter::once(home).chain(ask).collect();
                self.fetch = Some(Box::pin(async move { client.map_from_any(ask).await }));
            }
            std::future::poll_fn(|cx| self.poll_once(cx)).await;
        }
    }

    /// The addresses watched now.
    pub fn servers(&self) -> Vec<String> {
        self.feeds.iter().map(|f| f.addr.clone()).collect()
    }

    /// Polls every feed, the map fetch and the timer once; ready when any
    /// of them moved (its outcome is in `ready`, `fetch_due` or `fatal`).
    fn poll_once(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut moved = false;
        for i in 0..self.feeds.len() {
            let Poll::Ready((feed, event)) = self.feeds[i].step.as_mut().poll(cx) else {
                continue;
            };
            moved = true;
            let server = feed.addr.clone();
            match event {
                Event::Opened => self.ready.push_back(Watched::Opened { server }),
                Event::Changes(batch) => self.ready.push_back(Watched::Changes(batch)),
                Event::Broke(error) => {
                    // Perhaps it left the cluster: ask now.
                    self.fetch_due |= self.mode == Mode::Cluster;
                    self.ready.push_back(Watched::Broke { server, error });
                }
                Event::Fatal(e) => {
                    tracing::debug!(%server, error = %e, "a server refuses the change stream");
                    self.fatal = Some(e);
                    self.feeds.clear();
                    self.fetch = None;
                    return Poll::Ready(());
                }
            }
            self.feeds[i].step = Box::pin(step(self.client.clone(), feed));
        }
        if let Some(fetch) = self.fetch.as_mut() {
            if let Poll::Ready(r) = fetch.as_mut().poll(cx) {
                self.fetch = None;
                self.took(r);
                moved = true;
            }
        }
        if let Some(timer) = self.timer.as_mut() {
            if timer.as_mut().poll(cx).is_ready() {
                self.timer = None;
                self.fetch_due = true;
                moved = true;
            }
        }
        if moved {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// A fetched map (or why none came): follows it and sets the timer.
    fn took(&mut self, fetched: Result<Arc<RouteTable>>) {
        let wait = match (fetched, self.mode) {
            (_, Mode::Single) => return,
            (Ok(map), Mode::Unknown) if map.is_single_server() => {
                self.mode = Mode::Single;
                self.watch_only(vec![self.client.inner.addr.clone()]);
                return;
            }
            (Ok(map), _) => {
                if self.mode == Mode::Unknown || map.revision() > self.revision {
                    self.mode = Mode::Cluster;
                    self.revision = map.revision();
                    let addrs = map.addresses().into_iter().map(str::to_string).collect();
                    self.watch_only(addrs);
                }
                MAP_POLL
            }
            (Err(Error::Auth), _) => {
                self.fatal = Some(Error::Auth);
                self.feeds.clear();
                return;
            }
            // An older server, without maps: a single server.
            (Err(Error::Protocol(reason)), Mode::Unknown) => {
                tracing::debug!(%reason, "no route map: watching one server");
                self.mode = Mode::Single;
                self.watch_only(vec![self.client.inner.addr.clone()]);
                return;
            }
            (Err(e), Mode::Unknown) => {
                tracing::debug!(error = %e, "cannot fetch the route map yet");
                let wait = self.map_backoff;
                self.map_backoff = (wait * 2).min(BACKOFF_MAX);
                wait
            }
            (Err(e), Mode::Cluster) => {
                tracing::debug!(error = %e, "cannot fetch the route map; watching the servers of the last one");
                MAP_POLL
            }
        };
        self.timer = Some(Box::pin(tokio::time::sleep(wait)));
    }

    /// Watches exactly `addrs`: streams to others are closed (`Left`),
    /// new ones start opening.
    fn watch_only(&mut self, addrs: Vec<String>) {
        let ready = &mut self.ready;
        self.feeds.retain(|f| {
            let keep = addrs.contains(&f.addr);
            if !keep {
                ready.push_back(Watched::Left {
                    server: f.addr.clone(),
                });
            }
            keep
        });
        for addr in addrs {
            if !self.feeds.iter().any(|f| f.addr == addr) {
                self.feeds.push(Watching::new(&self.client, addr));
            }
        }
    }
}
