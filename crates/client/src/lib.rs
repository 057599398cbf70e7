//! Sextant's client library.
//!
//! A [`Client`] keeps one `Session` stream to a server and multiplexes every
//! call on it (many requests in flight on one connection; it is cheap to
//! clone and safe to use from many tasks). When the connection breaks, calls
//! in flight reconnect and are sent again — a mutation with the same
//! (client id, seq), so the server runs it once and returns the original
//! reply. Mutations return only once durable on the server.
//!
//! The API mirrors `sextant_engine::Engine`; errors are [`Error`], whose
//! [`Error::Fs`] is the engine's `FsError` (one errno each).
//!
//! With a log-less server the client also keeps the redo backups that
//! replies carry, hands them back when it reconnects to a restarted server
//! (by itself, even when idle), and drops them once written back: see
//! [`backup`] and [`Client::backup_stats`].

pub mod backup;
mod frames;
mod route;
mod search;
pub mod spool;
mod spread;
mod target;
mod ticket;
pub mod timing;
mod watch;

/// How old a route map [`Client::recent_route_map`] reuses may be.
pub const RECENT_MAP: Duration = Duration::from_secs(1);
pub use backup::BackupStats;
pub use search::SearchStream;
pub use target::{unix_path, UNIX_PREFIX};
pub use watch::{new_origin, AllChanges, ChangeBatch, ChangeStream, Watched, MAP_POLL};

use parking_lot::Mutex;
use sextant_engine::{DirEntry, EngineStats, PlusPage, RenameFlags, StatFs, XattrFlags};
use sextant_proto::keyauth;
use sextant_proto::pb::{self, request::Op, response::Result as Res};
use sextant_proto::*;
use sextant_types::{Attr, Credentials, FileType, FsError, SetAttr, Soid};
use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use target::{Target, Tls};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// What a call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The operation failed on the server (one errno each).
    #[error("{0}")]
    Fs(#[from] FsError),
    /// The server refused the call: a wrong cluster secret, or none over
    /// TCP.
    #[error("authentication failed: wrong cluster secret")]
    Auth,
    /// No server answered within the retry time.
    #[error("cannot reach the Sextant server at {addr}: {reason}")]
    Unavailable { addr: String, reason: String },
    /// The server and client disagree (a bug, or an incompatible version).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server refused a search query (`EINVAL`); the message names the
    /// field.
    #[error("{0}")]
    BadQuery(String),
}

impl Error {
    /// The errno a file system would return for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Fs(e) => e.errno(),
            Error::Auth => FsError::Access.errno(),
            Error::Unavailable { .. } => 107, // ENOTCONN
            Error::Protocol(_) => 71,         // EPROTO
            Error::BadQuery(_) => FsError::Invalid.errno(),
        }
    }

    /// The engine error, if the server answered with one.
    pub fn fs(&self) -> Option<FsError> {
        match self {
            Error::Fs(e) => Some(*e),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Connection settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Give up on a call after retrying this long without an answer.
    pub retry_for: Duration,
    pub connect_timeout: Duration,
    /// Client id for exactly-once (default: random). 0 disables it.
    pub client_id: Option<u64>,
    /// Cache-watch origin sent with every request: a [`Client::watch`]
    /// stream of a client with the same origin leaves out the changes of
    /// these requests (0: none; siblings keep it).
    pub origin: u64,
    /// TLS: the PEM certificate of the authority that signed the server's
    /// certificate (`None`: plain TCP). The name checked is the host part
    /// of the address unless [`Options::tls_domain`] says otherwise.
    pub tls_ca: Option<Vec<u8>>,
    pub tls_domain: Option<String>,
    /// Log-less: where backups this client could not hand back are kept
    /// on local disk when it ends ([`Client::spool_backups`]), and read
    /// back (and handed back) when a client connects ([`spool`]); `None`:
    /// nowhere.
    pub backup_dir: Option<std::path::PathBuf>,
    /// A local user on a cluster server's Unix socket (no secret, no key)
    /// asks for an identity ticket and reaches the other servers with it
    /// ([`ticket`]); `false`: it never does, its server forwards for it.
    pub tickets: bool,
    /// A client with the cluster secret fetches the route map when it
    /// connects, so that its requests go to their tables' servers from the
    /// first one on (and it knows every server should its own die).
    /// `false`: only once one is needed — a WRONG_SERVER reply, a spread
    /// search, [`Client::fetch_route_map`] — as a client with a key always
    /// does (should its home server die before then, it knows no other
    /// server to ask where the tables went). For a short-lived command
    /// that changes nothing: the map has a route per table
    /// (thousands on a big cluster), and fetching it on every connect made
    /// each command's start grow with the tables (issue 21). A local user
    /// on the Unix socket still asks at connect (whether to take a
    /// ticket), and so does a client that finds backups spooled for
    /// another server (it needs the map to hand them back).
    pub routes_at_connect: bool,
    /// The server's frame door (`sextant_proto::frames`: the socket
    /// beside its Unix socket), for requests to this client's own server:
    /// when it answers, and admits this client (not with a client key; not
    /// a log-less server), each call writes its request and reads its
    /// response on the calling thread — no HTTP/2, no tasks; else the
    /// Session stream. Only for a client whose calls run on a
    /// calling-thread runtime of their own (a call blocks its thread for
    /// the round trip): see [`Client::sibling_with_frame_door`]. Reached
    /// over TCP, the door must name the same address.
    pub frame_door: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            retry_for: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            client_id: None,
            origin: 0,
            tls_ca: None,
            tls_domain: None,
            backup_dir: None,
            tickets: true,
            routes_at_connect: true,
            frame_door: None,
        }
    }
}

type Waiter = oneshot::Sender<std::result::Result<pb::Response, Status>>;

/// Requests of one session awaiting their response.
///
/// Invariant: once `closed` is set (by the reader task, under the lock,
/// before it fails every waiter) no waiter is added, so none can be left
/// behind to wait forever.
#[derive(Default)]
struct Pending {
    waiters: HashMap<u64, Waiter>,
    closed: bool,
}

/// One session with a server: a Session stream, or a frame door
/// connection ([`frames`]).
struct Conn {
    wire: Wire,
    dead: Arc<AtomicBool>,
}

/// How a [`Conn`]'s requests travel.
enum Wire {
    /// Multiplexed on a Session stream: sent to its task, replies matched
    /// by id.
    Session {
        tx: mpsc::Sender<pb::Request>,
        pending: Arc<Mutex<Pending>>,
    },
    /// One at a time on the frame door, on the calling thread (an async
    /// lock: two calls of one client on its runtime take turns).
    Frames(tokio::sync::Mutex<frames::FrameLane>),
}

/// Mutations in flight per client. The server remembers a reply until
/// this client acknowledges it (`acked_below`, see [`Outstanding`]), so
/// this is not what keeps retries answerable; it bounds what one client
/// makes the server hold (its hard cap per client is far above this).
const MAX_MUTATIONS_IN_FLIGHT: usize = 512;

/// WRONG_SERVER replies a call follows to the new owner at once before its
/// retries back off (a table changing hands again and again).
const MAX_QUICK_REDIRECTS: u32 = 8;

/// The sequence numbers of this client's mutations that are not finished
/// for good: each request tells the server the lowest of them
/// (`acked_below`), below which it may forget replies.
///
/// Invariant: a seq is taken and inserted under one lock, so the minimum
/// any request reports is never above a number already handed out and
/// still running.
#[derive(Default)]
struct Outstanding {
    seqs: std::collections::BTreeSet<u64>,
    next: u64,
}

impl Outstanding {
    /// A fresh sequence number, outstanding until [`Outstanding::done`].
    fn take(&mut self) -> u64 {
        self.next = self.next.max(1);
        let seq = self.next;
        self.next += 1;
        self.seqs.insert(seq);
        seq
    }

    /// Every number below this is finished (0 when none is outstanding,
    /// which no request of this client reports: its own is outstanding).
    fn acked_below(&self) -> u64 {
        self.seqs.first().copied().unwrap_or(0)
    }

    fn done(&mut self, seq: u64) {
        self.seqs.remove(&seq);
    }
}

/// Removes a mutation's seq from [`Outstanding`] when its call ends for
/// good — a reply, a final failure, or the caller dropping the call.
struct SeqGuard<'a> {
    outstanding: &'a Mutex<Outstanding>,
    seq: u64,
}

impl Drop for SeqGuard<'_> {
    fn drop(&mut self) {
        self.outstanding.lock().done(self.seq);
    }
}

struct Inner {
    addr: String,
    target: Target,
    /// The cluster secret (`None`: a local user on the server's Unix
    /// socket, served as the identity the kernel gives it, or a client
    /// key's holder).
    secret: Option<MetadataValue<tonic::metadata::Ascii>>,
    /// A client key: each call carries a proof of it (see
    /// `sextant_proto::keyauth`), never the key.
    key: Option<Arc<keyauth::ClientKey>>,
    /// A local user's identity ticket (without secret or key, on a
    /// cluster): proved on calls to the other servers (see [`ticket`]).
    tickets: Arc<ticket::Tickets>,
    client_id: u64,
    /// Exactly-once sequence numbers (see [`Outstanding`]).
    outstanding: Mutex<Outstanding>,
    next_id: AtomicU64,
    options: Options,
    /// The server this client was given (its session lives here).
    home: Arc<route::Link>,
    /// The cluster's route map and links to its other servers.
    router: route::Router,
    /// See [`MAX_MUTATIONS_IN_FLIGHT`].
    mutations: tokio::sync::Semaphore,
    /// The channel the server-streaming calls (`Search`, `Watch`) use
    /// (connected lazily, reconnects by itself); see [`search`], [`watch`].
    stream_channel: Mutex<Option<Channel>>,
    /// Log-less redo backups (empty with a journaling server).
    backups: Arc<Mutex<backup::Backups>>,
    /// Log-less on a cluster: the backups of the other servers' runs, per
    /// server address ([`keep_peer_backups`]).
    peer_backups: Arc<Mutex<PeerBackups>>,
    /// Woken when a session breaks while backups are held (see
    /// [`keep_backups`]).
    session_broke: Arc<tokio::sync::Notify>,
    /// When a failed attempt is the last (shared by a client and its
    /// siblings, the mount's lanes).
    retries: Arc<Retries>,
    /// WRONG_SERVER replies received ([`Client::wrong_server_replies`]).
    wrong_server: AtomicU64,
    /// Pauses between attempts of a call ([`Client::retry_pauses`]).
    retry_pauses: AtomicU64,
}

/// Whether failed attempts are retried; see [`Client::call_with`].
#[derive(Default)]
struct Retries {
    /// Set by [`Client::stop_retrying`]: a failed attempt is the last.
    stopping: tokio::sync::watch::Sender<bool>,
    /// Set when a call gave up after retrying for [`Options::retry_for`]
    /// because the server could not be reached; cleared by the next
    /// answer. While set, a call that cannot reach the server fails after
    /// its first attempt: a server that is down costs each call one
    /// connection attempt, not the whole retry budget — `ls` on a mount
    /// whose server is gone answers "not connected" at once instead of
    /// after 30 s per operation.
    unreachable: AtomicBool,
}

/// What a client shares with its siblings ([`Client::sibling`]).
#[derive(Default)]
struct Family {
    backups: Arc<Mutex<backup::Backups>>,
    peer_backups: Arc<Mutex<PeerBackups>>,
    session_broke: Arc<tokio::sync::Notify>,
    retries: Arc<Retries>,
    router: route::Router,
    tickets: Arc<ticket::Tickets>,
}

impl Inner {
    fn new(
        addr: String,
        target: Target,
        secret: Option<MetadataValue<tonic::metadata::Ascii>>,
        key: Option<Arc<keyauth::ClientKey>>,
        options: Options,
        family: Family,
    ) -> Inner {
        let Family {
            backups,
            peer_backups,
            session_broke,
            retries,
            router,
            tickets,
        } = family;
        Inner {
            home: Arc::new(route::Link::new(addr.clone(), target.clone())),
            router,
            addr,
            target,
            secret,
            key,
            tickets,
            client_id: options.client_id.unwrap_or_else(random_u64),
            outstanding: Mutex::new(Outstanding::default()),
            next_id: AtomicU64::new(1),
            options,
            mutations: tokio::sync::Semaphore::new(MAX_MUTATIONS_IN_FLIGHT),
            stream_channel: Mutex::new(None),
            backups,
            peer_backups,
            session_broke,
            retries,
            wrong_server: AtomicU64::new(0),
            retry_pauses: AtomicU64::new(0),
        }
    }
}

impl Inner {
    /// Puts the secret, or the proof of the key, if this client has one,
    /// on a call to the rpc `method` (e.g. `Session`) of the server at
    /// `addr` (the address dialled: the proof is for that server only).
    fn authorize<T>(&self, request: &mut tonic::Request<T>, method: &str, addr: &str) {
        if let Some(secret) = &self.secret {
            request
                .metadata_mut()
                .insert(SECRET_METADATA, secret.clone());
        }
        // A local user's ticket, for any server but its socket's (where
        // the kernel says who it is).
        let ticket = (self.secret.is_none() && self.key.is_none() && addr != self.home.addr)
            .then(|| self.tickets.key())
            .flatten();
        if let Some(key) = self.key.as_ref().or(ticket.as_ref()) {
            let time = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let nonce = format!("{:016x}{:016x}", random_u64(), random_u64());
            let proof = key.prove_for(&format!("/sextant.v1.Sextant/{method}"), addr, time, &nonce);
            let m = request.metadata_mut();
            // Names and hex are ASCII (valid_name, the proof's own fields).
            let mut put = |k: &'static str, v: String| {
                if let Ok(v) = MetadataValue::try_from(v) {
                    m.insert(k, v);
                }
            };
            // (A ticket's name is `t1.` + base64url: ASCII too.)
            put(keyauth::KEY_METADATA, proof.name);
            put(keyauth::TIME_METADATA, proof.time.to_string());
            put(keyauth::NONCE_METADATA, proof.nonce);
            put(keyauth::MAC_METADATA, proof.mac);
            put(keyauth::AUDIENCE_METADATA, proof.audience);
        }
    }
}

/// A mutation's value and, when asked for, its directory's attributes
/// right after it (read after the operation, not atomically with it: a
/// cache of them must be dropped when a change elsewhere may have come
/// between, see the mount's `dirattrs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithDir<T> {
    pub value: T,
    pub dir: Option<Attr>,
}

tokio::task_local! {
    /// Set by [`track_sending`]: turns true once a call inside it has put a
    /// request on a connection (from then on the server may run it).
    static SENT: Arc<AtomicBool>;
}

/// Runs `call`, setting `sent` once any request it makes has gone out on a
/// connection. A caller that gives up on a mutation (its program was
/// killed) may drop the call only while `sent` is false: the server never
/// saw it, so nothing ran and nothing needs its retry. Once sent, the call
/// must be waited for — the server may have run it, and its retry keeps the
/// exactly-once identity.
pub async fn track_sending<F: std::future::Future>(sent: Arc<AtomicBool>, call: F) -> F::Output {
    SENT.scope(sent, call).await
}

/// A connection to one Sextant server. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// One per client: whenever a session broke while log-less backups are
/// held, reconnect (which hands them back) even if nobody calls, until
/// that worked or the backups are gone. Ends when the client is dropped.
async fn keep_backups(client: Weak<Inner>, broke: Arc<tokio::sync::Notify>) {
    loop {
        broke.notified().await;
        let mut backoff = Duration::from_millis(50);
        let broken = std::time::Instant::now();
        loop {
            tokio::time::sleep(backoff).await;
            let Some(inner) = client.upgrade() else {
                return;
            };
            if inner.backups.lock().is_empty() {
                break;
            }
            let client = Client { inner };
            match client.conn().await {
                Ok(_) | Err(Error::Auth) => break,
                Err(_) => backoff = (backoff * 2).min(Duration::from_millis(500)),
            }
            // On a cluster the home server may be gone for good (its
            // tables failed over): its backups go to another server, which
            // keeps them for the completion of its journal.
            let home = &client.inner.home.addr;
            let elsewhere = client.inner.router.known().iter().any(|k| k != home);
            if elsewhere && broken.elapsed() >= UPLOAD_ELSEWHERE_AFTER {
                let requests = client
                    .inner
                    .backups
                    .lock()
                    .recover_requests(client.inner.client_id);
                let home = client.inner.home.addr.clone();
                if let Some((incarnation, _)) = client.hand_back_elsewhere(&home, &requests).await {
                    client.drop_home_run(incarnation);
                    break;
                }
            }
        }
    }
}

/// Backups read back from the spool for cluster server `addr` (not the
/// home server, [`Client::restore_peer_spools`]): handed back to it with
/// `Recover` first (a restarted server collects its crashed run's
/// backups and answers nothing else meanwhile); if it holds that run
/// (or collects it) it is asked, on its own session, to write back
/// through their newest entry, whose reply (its watermark, or its new
/// run) ends them and their files; if it says they are of no more use
/// they are dropped with their files; if it does not answer, they are
/// kept and handed on as after a broken session ([`keep_peer_backups`]:
/// to another server for the completion of its journal, else kept, their
/// files with them).
async fn settle_spooled_peer(client: Weak<Inner>, addr: String) {
    let Some(inner) = client.upgrade() else {
        return;
    };
    let client = Client { inner };
    let (requests, newest) = {
        let peers = client.inner.peer_backups.lock();
        match peers.by_server.get(&addr) {
            Some(b) if !b.is_empty() => (b.recover_requests(client.inner.client_id), b.newest()),
            _ => return,
        }
    };
    let incarnation = requests.first().map_or(0, |r| r.incarnation);
    match client
        .hand_back_to(&addr, &requests, HAND_BACK_TIMEOUT)
        .await
    {
        Ok(pb::RecoverOutcome::RecoverNotNeeded | pb::RecoverOutcome::RecoverAccepted) => {
            let Some(through) = newest else {
                return;
            };
            // Releasing backups is every caller's right: no identity needed.
            let nobody = Credentials::user(65534, 65534);
            if let Err(e) = client.release_on(&nobody, &addr, through).await {
                tracing::info!(
                    server = %addr,
                    error = %e,
                    "spooled log-less backups handed back but not yet written back; kept"
                );
            }
        }
        Ok(_) => client.drop_peer_run(&addr, incarnation),
        Err(_) => {
            let mut peers = client.inner.peer_backups.lock();
            if peers.handing.insert(addr.clone()) {
                tokio::spawn(keep_peer_backups(Arc::downgrade(&client.inner), addr));
            }
        }
    }
}

/// One server's backups copied out for [`Client::spool_backups`], with
/// the spool files they were read back from (removed once written anew).
struct Held {
    incarnation: u64,
    entries: Vec<(u64, Vec<u8>)>,
    old: Vec<std::path::PathBuf>,
}

impl Held {
    fn copy(b: &mut backup::Backups) -> Held {
        Held {
            incarnation: b.stats().incarnation,
            entries: b.entries().map(|(l, e)| (l, e.to_vec())).collect(),
            old: b.take_spool_files(),
        }
    }

    /// Writes them to the spool of `addr` under `dir`; the file.
    fn write(
        self,
        dir: &std::path::Path,
        addr: &str,
        client_id: u64,
    ) -> Result<std::path::PathBuf, spool::SpoolError> {
        let view: Vec<(u64, &[u8])> = self
            .entries
            .iter()
            .map(|(l, e)| (*l, e.as_slice()))
            .collect();
        let path = spool::write(dir, addr, self.incarnation, client_id, &view)?;
        spool::remove(&self.old);
        Ok(path)
    }
}

/// How long a client tries to hand a server's log-less backups back to
/// that server before it gives them to another server of the cluster.
/// Well within a lease (the dead server's tables are failed over only
/// once its lease is gone and its journal completed with them).
const UPLOAD_ELSEWHERE_AFTER: Duration = Duration::from_secs(1);

/// Log-less on a cluster: what a client holds for servers other than its
/// home, per server address (each server's runs are its own; one
/// [`backup::Backups`] per server, so replies of several servers do not
/// take each other for a new run).
#[derive(Default)]
struct PeerBackups {
    by_server: std::collections::BTreeMap<String, backup::Backups>,
    /// Servers whose broken session a [`keep_peer_backups`] task serves.
    handing: std::collections::HashSet<String>,
    /// When each server (the home server under "") last answered or sent
    /// a notice ([`watch_silent_servers`]).
    heard: std::collections::HashMap<String, std::time::Instant>,
}

/// A server the client holds backups of that has sent nothing for this
/// long is asked whether it is there: a server that holds a client's
/// backups syncs its journal within milliseconds and says so in its next
/// notice (every second), so silence means it is stopped, cut off, or its
/// machine is dead — which closes no connection, and HTTP/2's keep-alive
/// would take ~50 s to notice, longer than a failover waits for backups.
const SILENT_FOR: Duration = Duration::from_secs(2);

/// How long a hand-back to the server the backups are of may take before
/// that server counts as unreachable: a live server answers `Recover` in
/// milliseconds, and one that is stopped or whose machine died accepts
/// the connection (the kernel does) but never answers.
const HAND_BACK_TIMEOUT: Duration = Duration::from_secs(1);

/// One per client: every second, the servers it holds log-less backups of
/// that have been silent for [`SILENT_FOR`] get their backups handed back
/// or, if they do not answer, handed to another server
/// ([`keep_peer_backups`]; the home server's through [`keep_backups`]'s
/// path). Ends when the client is dropped.
async fn watch_silent_servers(client: Weak<Inner>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = client.upgrade() else {
            return;
        };
        let silent =
            |heard: Option<&std::time::Instant>| heard.is_some_and(|t| t.elapsed() >= SILENT_FOR);
        let mut peers = inner.peer_backups.lock();
        let due: Vec<String> = peers
            .by_server
            .iter()
            .filter(|(addr, b)| !b.is_empty() && silent(peers.heard.get(*addr)))
            .map(|(addr, _)| addr.clone())
            .filter(|addr| !peers.handing.contains(addr))
            .collect();
        for addr in due {
            peers.handing.insert(addr.clone());
            tokio::spawn(keep_peer_backups(Weak::clone(&client), addr));
        }
        // Only on a cluster: a single log-less server keeps its clients'
        // backups until a write-back, up to ~30 s of silence by design.
        let home = &inner.home.addr;
        let cluster = inner.router.known().iter().any(|k| k != home);
        let home_due = cluster && silent(peers.heard.get("")) && !inner.backups.lock().is_empty();
        if home_due {
            // Not again before it is heard from or SILENT_FOR passes anew.
            peers.heard.insert(String::new(), std::time::Instant::now());
            drop(peers);
            tokio::spawn(hand_home_backups_elsewhere_if_gone(Weak::clone(&client)));
        }
    }
}

/// The home server has been silent: if it does not answer `Recover`
/// either, its backups go to another server of the cluster (as after a
/// broken session, [`keep_backups`]).
async fn hand_home_backups_elsewhere_if_gone(client: Weak<Inner>) {
    let Some(inner) = client.upgrade() else {
        return;
    };
    let client = Client { inner };
    let requests = client
        .inner
        .backups
        .lock()
        .recover_requests(client.inner.client_id);
    let home = client.inner.home.addr.clone();
    if requests.is_empty()
        || client
            .hand_back_to(&home, &requests, HAND_BACK_TIMEOUT)
            .await
            .is_ok()
    {
        return;
    }
    tokio::time::sleep(UPLOAD_ELSEWHERE_AFTER).await;
    if client
        .hand_back_to(&home, &requests, HAND_BACK_TIMEOUT)
        .await
        .is_ok()
    {
        return;
    }
    if let Some((incarnation, _)) = client.hand_back_elsewhere(&home, &requests).await {
        client.drop_home_run(incarnation);
    }
}

/// Whenever the session with cluster server `addr` broke while backups of
/// its run are held: hands them back to it (a restarted server collects
/// its crashed run's backups), or, once it stayed unreachable for
/// [`UPLOAD_ELSEWHERE_AFTER`], to another server, which keeps them in the
/// shared store for the completion of its journal before its tables fail
/// over. Dropped once another server kept them or any server says they
/// are of no more use; kept while the server itself answers that they are
/// its current run's (only the session broke) or that it collects them
/// (until a reply of its new run, as with a single server).
async fn keep_peer_backups(client: Weak<Inner>, addr: String) {
    let broken = std::time::Instant::now();
    let mut backoff = Duration::from_millis(50);
    loop {
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
        let Some(inner) = client.upgrade() else {
            return;
        };
        let client = Client { inner };
        let requests = {
            let peers = client.inner.peer_backups.lock();
            match peers.by_server.get(&addr) {
                Some(b) if !b.is_empty() => b.recover_requests(client.inner.client_id),
                _ => Vec::new(),
            }
        };
        if requests.is_empty() {
            break;
        }
        let incarnation = requests.first().map_or(0, |r| r.incarnation);
        let drop_run = |client: &Client| client.drop_peer_run(&addr, incarnation);
        match client
            .hand_back_to(&addr, &requests, HAND_BACK_TIMEOUT)
            .await
        {
            // Alive with that run (only the session broke), or restarted
            // and collecting them (kept here until its new run answers, as
            // with a single server: it may crash again while recovering).
            Ok(pb::RecoverOutcome::RecoverNotNeeded | pb::RecoverOutcome::RecoverAccepted) => break,
            Ok(_) => {
                drop_run(&client);
                break;
            }
            Err(_) => {}
        }
        if broken.elapsed() >= UPLOAD_ELSEWHERE_AFTER {
            // Kept in the shared store by the server that took them.
            if client.hand_back_elsewhere(&addr, &requests).await.is_some() {
                drop_run(&client);
                break;
            }
        }
    }
    if let Some(inner) = client.upgrade() {
        inner.peer_backups.lock().handing.remove(&addr);
    }
}

/// The host part of `host:port` (`[v6]:port` gives `v6`).
/// Renews a local user's identity ticket (see [`ticket`]) from half its
/// life on, for as long as the client lives; a failed renewal is tried
/// again shortly (the client goes through its socket once the ticket
/// expires).
async fn keep_ticket(client: Weak<Inner>) {
    loop {
        let (due, changed) = match client.upgrade() {
            Some(inner) => (inner.tickets.renew_due(), inner.tickets.changed()),
            None => return,
        };
        // Woken early by a refusal (then `due` is the fallback period's
        // end, not the dropped ticket's half life): sleep again until then.
        tokio::select! {
            () = tokio::time::sleep(due.max(Duration::from_millis(100))) => {}
            () = changed.notified() => continue,
        }
        let Some(inner) = client.upgrade() else {
            return;
        };
        let renewed = Client { inner }.fetch_ticket().await;
        if !renewed {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
}

fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

/// A random 64-bit number from the kernel (never 0).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    let ok = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    let mut v = u64::from_le_bytes(b);
    if ok.is_err() || v == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        v = t ^ ((std::process::id() as u64) << 32) | 1;
    }
    v
}

impl Client {
    /// Connects to `addr` (`host:port`, or `unix:PATH` for a Unix socket
    /// on this machine) with the cluster `secret`; fails
    /// at once on a wrong secret or when nothing answers.
    ///
    /// An empty `secret` sends none: on the server's Unix socket every
    /// request then runs as the identity the kernel gives this process
    /// (whatever credentials the calls pass); over TCP the server refuses
    /// it ([`Error::Auth`]). A client key given as `secret` in the form
    /// `key:NAME:HEX` ([`keyauth::ClientKey::credential`]) is used as
    /// that key: each call proves it, and the server enforces its limits.
    pub async fn connect(addr: &str, secret: &str, options: Options) -> Result<Client> {
        let unavailable = |reason: String| Error::Unavailable {
            addr: addr.to_string(),
            reason,
        };
        let tls = options.tls_ca.as_deref().map(|ca| Tls {
            ca,
            domain: options.tls_domain.clone().unwrap_or_else(|| host_of(addr)),
        });
        let target = Target::new(addr, options.connect_timeout, tls).map_err(unavailable)?;
        let key = match keyauth::ClientKey::from_credential(secret.trim()) {
            Some(Ok(k)) => Some(Arc::new(k)),
            Some(Err(e)) => return Err(Error::Protocol(format!("bad client key: {e}"))),
            None => None,
        };
        let secret = match secret.trim() {
            _ if key.is_some() => None,
            "" => None,
            s => Some(
                MetadataValue::try_from(s)
                    .map_err(|_| Error::Protocol("the secret is not printable ASCII".into()))?,
            ),
        };
        let client = Client {
            inner: Arc::new(Inner::new(
                addr.to_string(),
                target,
                secret,
                key,
                options,
                Family::default(),
            )),
        };
        // Before the first session, which hands them back.
        client.restore_spooled();
        tokio::spawn(keep_backups(
            Arc::downgrade(&client.inner),
            Arc::clone(&client.inner.session_broke),
        ));
        tokio::spawn(watch_silent_servers(Arc::downgrade(&client.inner)));
        timing::mark(|| "connecting".into());
        client.conn().await?;
        timing::mark(|| "session open".into());
        if client.routes_wanted_at_connect() {
            client.learn_cluster().await;
        }
        if client.inner.tickets.wanted() {
            tokio::spawn(keep_ticket(Arc::downgrade(&client.inner)));
        }
        // Needs the route map: which other servers there are.
        client.restore_peer_spools();
        Ok(client)
    }

    /// Whether [`Client::connect`] asks for the route map (see
    /// [`Options::routes_at_connect`]).
    fn routes_wanted_at_connect(&self) -> bool {
        if self.inner.options.routes_at_connect || self.secret_is_empty() {
            return true;
        }
        // Backups spooled for a server other than this one: handed back
        // by the map's address ([`Client::restore_peer_spools`]).
        let Some(dir) = &self.inner.options.backup_dir else {
            return false;
        };
        let home = spool::server_dir(dir, &self.inner.addr);
        spool::spooled_dirs(dir).iter().any(|d| *d != home)
    }

    /// A server of a cluster: take its route map now (a single server's
    /// map names one address and is not needed). Then requests go to their
    /// tables' owners at once, and when this server dies the client knows
    /// the others, so it finds its tables' new owners there (see the
    /// retries in [`Client::call_with`]). Best effort: a server that does
    /// not answer leaves the client as it was.
    async fn learn_cluster(&self) {
        if self.secret_is_empty() && self.inner.addr.starts_with("unix:") {
            if !self.inner.options.tickets {
                return;
            }
            // A local user on a server's socket: with a ticket it routes
            // as a keyed client does; without (a single server, an older
            // server), its server forwards for it.
            if let Ok(map) = self.map_from(&self.inner.home).await {
                if map.addresses().len() > 1 && self.fetch_ticket().await {
                    self.inner.router.adopt(map);
                }
            }
            return;
        }
        if self.inner.secret.is_none() {
            return;
        }
        if let Ok(map) = self.map_from(&self.inner.home).await {
            if map.addresses().len() > 1 {
                self.inner.router.adopt(map);
            }
        }
    }

    /// Asks the socket's server for an identity ticket (see [`ticket`]):
    /// whether one is held now. An older server (no `Ticket`), or one that
    /// refuses, leaves the client as it was.
    async fn fetch_ticket(&self) -> bool {
        let mut grpc = pb::sextant_client::SextantClient::new(self.inner.home.channel());
        let mut request = tonic::Request::new(pb::TicketRequest {});
        request.set_timeout(self.inner.options.connect_timeout);
        match grpc.ticket(request).await {
            Ok(r) => {
                let r = r.into_inner();
                let held = self.inner.tickets.hold(&r.name, &r.key, r.expires);
                if !held {
                    tracing::warn!("the server's identity ticket is malformed; not used");
                }
                held
            }
            Err(s) => {
                tracing::debug!(code = ?s.code(), message = s.message(), "no identity ticket");
                false
            }
        }
    }

    /// Whether a call to `link` that was refused (UNAUTHENTICATED) was a
    /// ticket's: then the ticket is dropped (see
    /// [`ticket::Tickets::refused`]) and the call goes through the socket.
    pub(crate) fn ticket_refused(&self, link: &route::Link) -> bool {
        if !self.secret_is_empty() || link.addr == self.inner.home.addr {
            return false;
        }
        self.inner.tickets.refused();
        true
    }

    /// Another connection to the same server, with the same secret and
    /// options but its own session and its own client id (exactly-once
    /// sequences are per client id, so two clients never share one; a
    /// client with exactly-once disabled gives one with it disabled).
    ///
    /// The session's tasks run on the runtime this is awaited on. On a
    /// calling-thread (`current_thread`) runtime, a call made with
    /// `block_on` then never leaves the calling thread — what the FUSE
    /// mount does, one sibling per FUSE thread. Such a session is driven
    /// only while someone is blocked on that runtime: it cannot answer the
    /// server's keep-alive pings while idle, so its owner should replace it
    /// after a long idle spell (the server drops it ~50 s after its last
    /// unanswered ping; a call on a dropped session reconnects and retries,
    /// so this costs time, not correctness).
    pub async fn sibling(&self) -> Result<Client> {
        self.sibling_with_frame_door(self.inner.options.frame_door.clone())
            .await
    }

    /// [`Client::sibling`] whose requests to this server go through its
    /// frame door `door` when it answers ([`Options::frame_door`]).
    /// REQUIRES (with a door): the sibling is called only on a
    /// calling-thread runtime whose thread may block for a round trip (a
    /// mount's lane).
    pub async fn sibling_with_frame_door(
        &self,
        door: Option<std::path::PathBuf>,
    ) -> Result<Client> {
        let options = Options {
            client_id: match self.inner.options.client_id {
                Some(0) => Some(0),
                _ => None,
            },
            frame_door: door,
            ..self.inner.options.clone()
        };
        // Log-less backups are the family's, not the sibling's: a sibling
        // dropped (or replaced) keeps nothing to itself, and the first
        // client to reconnect hands back everything. The original's task
        // (on the runtime it was connected on) reconnects when a session
        // breaks.
        let client = Client {
            inner: Arc::new(Inner::new(
                self.inner.addr.clone(),
                self.inner.target.clone(),
                self.inner.secret.clone(),
                self.inner.key.clone(),
                options,
                Family {
                    backups: Arc::clone(&self.inner.backups),
                    peer_backups: Arc::clone(&self.inner.peer_backups),
                    session_broke: Arc::clone(&self.inner.session_broke),
                    retries: Arc::clone(&self.inner.retries),
                    router: self.inner.router.sharing_map(),
                    tickets: Arc::clone(&self.inner.tickets),
                },
            )),
        };
        client.conn().await?;
        Ok(client)
    }

    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Whether this client's live session with its own server is on the
    /// frame door ([`Options::frame_door`]).
    pub fn on_frame_door(&self) -> bool {
        self.inner.home.conn.try_lock().is_ok_and(|c| {
            c.as_ref().is_some_and(|c| {
                matches!(c.wire, Wire::Frames(_)) && !c.dead.load(Ordering::Acquire)
            })
        })
    }

    pub fn client_id(&self) -> u64 {
        self.inner.client_id
    }

    /// How many WRONG_SERVER replies this client has had (each made it
    /// refresh its route map).
    pub fn wrong_server_replies(&self) -> u64 {
        self.inner.wrong_server.load(Ordering::Relaxed)
    }

    /// How many times a call of this client paused before trying again
    /// (the retry backoff of [`Client::call_with`]).
    pub fn retry_pauses(&self) -> u64 {
        self.inner.retry_pauses.load(Ordering::Relaxed)
    }

    /// A gRPC client on the channel of the server-streaming calls (`Search`,
    /// `Watch`), connected lazily.
    fn stream_client(&self) -> pb::sextant_client::SextantClient<Channel> {
        let channel = {
            let mut slot = self.inner.stream_channel.lock();
            slot.get_or_insert_with(|| self.inner.target.connect_lazy())
                .clone()
        };
        pb::sextant_client::SextantClient::new(channel)
            .max_decoding_message_size(4 * MAX_MESSAGE_BYTES)
    }

    /// What this client holds for a log-less server's recovery.
    /// On a cluster the counts include what is held for the other
    /// servers (the run and watermarks are the home server's).
    pub fn backup_stats(&self) -> BackupStats {
        let mut stats = self.inner.backups.lock().stats();
        for b in self.inner.peer_backups.lock().by_server.values() {
            let p = b.stats();
            stats.entries += p.entries;
            stats.bytes += p.bytes;
            stats.peak_bytes += p.peak_bytes;
            stats.received += p.received;
        }
        stats
    }

    /// What this client holds for the log-less server at `addr` (another
    /// than its home server), with that server's watermark as last
    /// reported (`None`: nothing was ever received from it).
    pub fn peer_backup_stats(&self, addr: &str) -> Option<BackupStats> {
        let peers = self.inner.peer_backups.lock();
        let b = peers.by_server.get(addr).or_else(|| {
            // Keys are as the route map spells them (`http://host:port`).
            peers
                .by_server
                .iter()
                .find(|(k, _)| k.rsplit('/').next() == Some(addr))
                .map(|(_, b)| b)
        })?;
        Some(b.stats())
    }

    /// The live session with the home server, connecting if there is none.
    async fn conn(&self) -> Result<Arc<Conn>> {
        self.link_conn(&self.inner.home).await
    }

    /// The link a request routed by `soid` goes to (see [`route`]).
    fn link_for(&self, soid: Option<Soid>) -> Arc<route::Link> {
        // Without the secret (a local user on a server's Unix socket) the
        // other servers are reached with an identity ticket; without a
        // usable one, that server forwards for us.
        if self.secret_is_empty() && !self.inner.tickets.usable() {
            return Arc::clone(&self.inner.home);
        }
        let Some(addr) = soid.and_then(|s| self.inner.router.address_for(s)) else {
            return Arc::clone(&self.inner.home);
        };
        self.link_to(&addr)
    }

    /// Calls with the cluster secret, not with a client key (whose path
    /// limit the server applies to every scope it is given).
    pub(crate) fn unconfined(&self) -> bool {
        self.inner.secret.is_some() && self.inner.key.is_none()
    }

    /// Whether this client proves a client key (not the secret).
    pub fn has_key(&self) -> bool {
        self.inner.key.is_some()
    }

    /// Whether this client has no cluster secret (a local user on the
    /// server's Unix socket, served as the kernel says it is).
    pub(crate) fn secret_is_empty(&self) -> bool {
        self.inner.secret.is_none() && self.inner.key.is_none()
    }

    /// Whether this client (a local user without secret or key) reaches
    /// the other servers itself now, with an identity ticket.
    pub fn has_ticket(&self) -> bool {
        self.secret_is_empty() && self.inner.tickets.usable()
    }

    /// Whether a request for another server goes through the home server
    /// (which forwards it): a local user without a usable ticket.
    pub(crate) fn forwards(&self) -> bool {
        self.secret_is_empty() && !self.inner.tickets.usable()
    }

    /// Manages client keys (the `Keys` RPC; the cluster secret only). A
    /// refusal comes back as [`Error::Protocol`] with the server's words;
    /// a key store the server cannot reach (etcd) as
    /// [`Error::Unavailable`].
    pub async fn manage_keys(&self, op: pb::keys_request::Op) -> Result<pb::KeysReply> {
        let mut grpc = pb::sextant_client::SextantClient::new(self.inner.home.channel());
        let mut request = tonic::Request::new(pb::KeysRequest { op: Some(op) });
        self.inner
            .authorize(&mut request, "Keys", &self.inner.home.addr);
        match grpc.keys(request).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) if s.code() == Code::Unauthenticated => Err(Error::Auth),
            Err(s) if s.code() == Code::Unavailable => Err(Error::Unavailable {
                addr: self.inner.home.addr.clone(),
                reason: s.message().to_string(),
            }),
            Err(s) => Err(Error::Protocol(s.message().to_string())),
        }
    }

    /// The link to the server at `addr` (the home link for the home
    /// server's address).
    pub(crate) fn link_to(&self, addr: &str) -> Arc<route::Link> {
        if addr == self.inner.home.addr {
            return Arc::clone(&self.inner.home);
        }
        let o = &self.inner.options;
        match self.inner.router.link(
            addr,
            o.connect_timeout,
            o.tls_ca.as_deref(),
            o.tls_domain.as_deref(),
        ) {
            Ok(link) => link,
            Err(e) => {
                // A map naming an unusable address: go home, whose
                // WRONG_SERVER (with a fresh map) ends it.
                tracing::warn!(addr, error = %e, "cannot use a server address from the route map");
                Arc::clone(&self.inner.home)
            }
        }
    }

    /// The live session on `link`, connecting if there is none.
    async fn link_conn(&self, link: &route::Link) -> Result<Arc<Conn>> {
        let mut slot = link.conn.lock().await;
        if let Some(c) = &*slot {
            if !c.dead.load(Ordering::Acquire) {
                return Ok(Arc::clone(c));
            }
        }
        *slot = None;
        let c = Arc::new(self.open_session(link).await?);
        *slot = Some(Arc::clone(&c));
        Ok(c)
    }

    /// Fetches the route map from `link`'s server (after it answered
    /// WRONG_SERVER) and keeps it unless the cached one is newer — or, when
    /// a fetch begun while this caller waited for its turn succeeded, takes
    /// that one (`route::MapFetches`).
    async fn refresh_routes(&self, link: &route::Link) -> Result<()> {
        self.refresh_routes_to(link, None).await
    }

    /// [`Client::refresh_routes`] for a refusal that named the revision of
    /// its server's map (`wanted`): nothing to fetch once the map held has
    /// reached it (another caller's fetch, while this one waited its turn).
    async fn refresh_routes_to(&self, link: &route::Link, wanted: Option<u64>) -> Result<()> {
        let router = &self.inner.router;
        let enough = || wanted.is_some_and(|w| router.map().is_some_and(|m| m.revision() >= w));
        let fetching = match router.fetches.turn(enough).await {
            route::Turn::Fetched => return Ok(()),
            route::Turn::Fetch(f) => f,
        };
        let fetched = self.map_from(link).await;
        fetching.done(fetched.is_ok());
        router.adopt(fetched?);
        Ok(())
    }

    /// Route map fetches begun by this client and its siblings after a
    /// refusal, a dead server or [`Client::fetch_route_map`] (one for
    /// every caller that asked while one ran: see `route::MapFetches`).
    pub fn map_fetches(&self) -> u64 {
        self.inner.router.fetches.begun()
    }

    /// Refreshes the route map from any server a map ever named other
    /// than `dead` (the first that answers). Nothing to do without one, or
    /// without the secret (the other servers cannot be reached then).
    async fn refresh_routes_elsewhere(&self, dead: &str) -> Result<()> {
        if self.inner.secret.is_none() {
            return Ok(());
        }
        let others: Vec<String> = self
            .inner
            .router
            .known()
            .into_iter()
            .filter(|a| a != dead)
            .collect();
        for addr in others {
            match self.refresh_routes(&self.link_to(&addr)).await {
                Ok(()) => return Ok(()),
                Err(Error::Auth) => return Err(Error::Auth),
                Err(_) => continue,
            }
        }
        Ok(())
    }

    /// The route map `link`'s server hands out (not cached: see
    /// [`Client::refresh_routes`]).
    async fn map_from(&self, link: &route::Link) -> Result<Arc<sextant_proto::route::RouteTable>> {
        timing::mark(|| format!("Map from {}", link.addr));
        let mut grpc = pb::sextant_client::SextantClient::new(link.channel());
        // Merged: a route per run of one server's tables, not per table
        // (~125 kB at 2,000 tables, fetched by every spread search); no
        // caller here needs a table's own route.
        let mut request = tonic::Request::new(pb::MapRequest { merged: true });
        self.inner.authorize(&mut request, "Map", &link.addr);
        request.set_timeout(self.inner.options.connect_timeout);
        let map = match grpc.map(request).await {
            Ok(r) => r.into_inner(),
            Err(s) if s.code() == Code::Unauthenticated => return Err(Error::Auth),
            Err(s) if s.code() == Code::Unimplemented => {
                return Err(Error::Protocol(format!(
                    "{} hands out no route map (an older version)",
                    link.addr
                )))
            }
            Err(s) => {
                return Err(Error::Unavailable {
                    addr: link.addr.clone(),
                    reason: format!("fetching the route map: {}", s.message()),
                })
            }
        };
        timing::mark(|| format!("Map from {} answered", link.addr));
        let table = sextant_proto::route::RouteTable::from_pb(&map)
            .map(Arc::new)
            .map_err(|e| Error::Protocol(format!("route map from {}: {e}", link.addr)))?;
        timing::mark(|| {
            format!(
                "Map from {}: {} routes, {} bytes",
                link.addr,
                map.routes.len(),
                prost::Message::encoded_len(&map)
            )
        });
        if std::ptr::eq(link, &*self.inner.home) {
            self.inner.router.note_home_map(Arc::clone(&table));
            // As at connect (`learn_cluster`): a client that did not take
            // the map then (`Options::routes_at_connect`) routes by the
            // first one a search fetched, and knows the other servers.
            if self.inner.secret.is_some() && table.addresses().len() > 1 {
                self.inner.router.adopt(Arc::clone(&table));
            }
        }
        Ok(table)
    }

    /// The route map this client routes by (`None`: it never needed one —
    /// a single server, or no WRONG_SERVER yet).
    pub fn route_map(&self) -> Option<Arc<sextant_proto::route::RouteTable>> {
        self.inner.router.map()
    }

    /// The home server's route map now, without routing by it (a local
    /// user on the Unix socket must keep talking to the socket, whatever
    /// TCP address the map names).
    pub async fn peek_route_map(&self) -> Result<Arc<sextant_proto::route::RouteTable>> {
        self.map_from(&self.inner.home).await
    }

    /// The home server's route map as [`Client::peek_route_map`] gives it,
    /// or the one it handed out within the last [`RECENT_MAP`] (a command
    /// asks for the map at connect and again before a search: one round
    /// trip, not three). Only for callers a slightly older map cannot
    /// mislead: a search spread by a cluster's map asks again, by a fresh
    /// map, for every range a server no longer holds ([`crate::spread`]),
    /// and a single server's map does not change while it runs.
    pub async fn recent_route_map(&self) -> Result<Arc<sextant_proto::route::RouteTable>> {
        if let Some(map) = self.inner.router.recent_map(RECENT_MAP) {
            return Ok(map);
        }
        self.peek_route_map().await
    }

    /// Whether the route map the home server handed out within the last
    /// [`RECENT_MAP`] is a cluster's (a search is then spread by SOID
    /// ranges, and resolves a scope path across the servers before it asks
    /// them; [`RouteTable::is_single_server`]). `false` without such a
    /// map. No call.
    ///
    /// [`RouteTable::is_single_server`]: sextant_proto::route::RouteTable::is_single_server
    pub fn spread_recently(&self) -> bool {
        self.inner
            .router
            .recent_map(RECENT_MAP)
            .is_some_and(|map| !map.is_single_server())
    }

    /// Fetches the route map from the home server now (`sextant cluster
    /// status`, and clients that want to route from the first request).
    pub async fn fetch_route_map(&self) -> Result<Arc<sextant_proto::route::RouteTable>> {
        self.refresh_routes(&self.inner.home).await?;
        self.inner
            .router
            .map()
            .ok_or_else(|| Error::Protocol("the server sent no route map".into()))
    }

    async fn open_session(&self, link: &route::Link) -> Result<Conn> {
        let home = std::ptr::eq(link, &*self.inner.home);
        if let (true, Some(door), None) = (home, &self.inner.options.frame_door, &self.inner.key) {
            let secret = self
                .inner
                .secret
                .as_ref()
                .and_then(|s| s.to_str().ok())
                .unwrap_or("");
            let expect = unix_path(&link.addr)
                .is_none()
                .then_some(link.addr.as_str());
            match frames::FrameLane::open(door, secret, expect, self.inner.options.connect_timeout)
                .await
            {
                Ok(lane) => {
                    return Ok(Conn {
                        wire: Wire::Frames(tokio::sync::Mutex::new(lane)),
                        dead: Arc::default(),
                    })
                }
                Err(why) => {
                    tracing::debug!(door = %door.display(), why, "the frame door is not used");
                }
            }
        }
        let unavailable = |reason: String| Error::Unavailable {
            addr: link.addr.clone(),
            reason,
        };
        let channel: Channel = link
            .target
            .connect()
            .await
            .map_err(|e| unavailable(error_chain(&e)))?;
        let mut grpc = pb::sextant_client::SextantClient::new(channel)
            .max_decoding_message_size(4 * MAX_MESSAGE_BYTES);
        let (tx, rx) = mpsc::channel::<pb::Request>(1024);
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        self.inner.authorize(&mut request, "Session", &link.addr);
        // A server that accepts connections but does not answer (stopped,
        // SIGSTOPped, wedged) must not hang the caller until HTTP/2's
        // keep-alive gives up (~50 s): the session opens within the
        // connect timeout or not at all.
        let opened =
            tokio::time::timeout(self.inner.options.connect_timeout, grpc.session(request));
        let mut stream = match opened.await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) if s.code() == Code::Unauthenticated => return Err(Error::Auth),
            Ok(Err(s)) => return Err(unavailable(s.message().to_string())),
            Err(_) => {
                return Err(unavailable(format!(
                    "no answer within {:?} (is the server stopped or overloaded?)",
                    self.inner.options.connect_timeout
                )))
            }
        };
        // A restarted log-less server first gets back what we hold of its
        // previous run (it answers nothing else until it has recovered).
        // Other servers' backups are handed back by their own tasks
        // ([`keep_peer_backups`], [`settle_spooled_peer`]).
        if home {
            self.hand_back_backups(&mut grpc, &link.addr).await?;
        }
        let pending: Arc<Mutex<Pending>> = Arc::default();
        let dead = Arc::new(AtomicBool::new(false));
        let (p, d) = (Arc::clone(&pending), Arc::clone(&dead));
        let backups = Arc::clone(&self.inner.backups);
        let broke = Arc::clone(&self.inner.session_broke);
        let heard_home = Arc::clone(&self.inner.peer_backups);
        // Another server of a cluster: its backups are kept apart.
        let peer = (!home).then(|| {
            (
                Arc::clone(&self.inner.peer_backups),
                link.addr.clone(),
                Arc::downgrade(&self.inner),
            )
        });
        tokio::spawn(async move {
            let end = loop {
                match stream.message().await {
                    Ok(Some(mut resp)) => {
                        // Kept before the caller sees the reply: an
                        // acknowledged log-less mutation is backed up here.
                        if resp.incarnation != 0 {
                            if let Some((peers, addr, _)) = &peer {
                                let done = {
                                    let mut peers = peers.lock();
                                    peers.heard.insert(addr.clone(), std::time::Instant::now());
                                    let b = peers.by_server.entry(addr.clone()).or_default();
                                    b.absorb(&mut resp);
                                    b.finished_spool()
                                };
                                if let Some(files) = done {
                                    spool::remove(&files);
                                }
                            } else {
                                heard_home
                                    .lock()
                                    .heard
                                    .insert(String::new(), std::time::Instant::now());
                                let done = {
                                    let mut b = backups.lock();
                                    b.absorb(&mut resp);
                                    b.finished_spool()
                                };
                                if let Some(files) = done {
                                    spool::remove(&files);
                                }
                            }
                        }
                        if let Some(w) = p.lock().waiters.remove(&resp.id) {
                            let _ = w.send(Ok(resp));
                        }
                    }
                    Ok(None) => break Status::unavailable("the server closed the session"),
                    Err(s) => break s,
                }
            };
            d.store(true, Ordering::Release);
            let waiters = {
                let mut pending = p.lock();
                pending.closed = true;
                std::mem::take(&mut pending.waiters)
            };
            for (_, w) in waiters {
                let _ = w.send(Err(end.clone()));
            }
            match peer {
                None => {
                    if !backups.lock().is_empty() {
                        broke.notify_one();
                    }
                }
                Some((peers, addr, client)) => {
                    let mut peers = peers.lock();
                    let held = peers.by_server.get(&addr).is_some_and(|b| !b.is_empty());
                    if held && peers.handing.insert(addr.clone()) {
                        tokio::spawn(keep_peer_backups(client, addr));
                    }
                }
            }
        });
        Ok(Conn {
            wire: Wire::Session { tx, pending },
            dead,
        })
    }

    /// The home server's backups of run `incarnation` are of no more use:
    /// dropped, and the spool files that held only them removed.
    fn drop_home_run(&self, incarnation: u64) {
        let done = {
            let mut b = self.inner.backups.lock();
            b.drop_run(incarnation);
            b.finished_spool()
        };
        if let Some(files) = done {
            spool::remove(&files);
        }
    }

    /// The backups of run `incarnation` held for the server at `addr`
    /// (another than the home server) are of no more use: dropped, and
    /// the spool files that held only them removed.
    fn drop_peer_run(&self, addr: &str, incarnation: u64) {
        let done = {
            let mut peers = self.inner.peer_backups.lock();
            peers.by_server.get_mut(addr).and_then(|b| {
                b.drop_run(incarnation);
                b.finished_spool()
            })
        };
        if let Some(files) = done {
            spool::remove(&files);
        }
    }

    /// Sends `requests` (one run's backups) to the server at `addr` with
    /// `Recover`; the outcome of the last message (`Err`: unreachable).
    async fn hand_back_to(
        &self,
        addr: &str,
        requests: &[pb::RecoverRequest],
        timeout: Duration,
    ) -> Result<pb::RecoverOutcome> {
        let link = self.link_to(addr);
        let mut grpc = pb::sextant_client::SextantClient::new(link.channel());
        let mut outcome = pb::RecoverOutcome::RecoverNotNeeded;
        for req in requests {
            let mut request = tonic::Request::new(req.clone());
            self.inner.authorize(&mut request, "Recover", addr);
            let call = tokio::time::timeout(timeout, grpc.recover(request));
            let reply = match call.await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(s)) if s.code() == Code::Unauthenticated => return Err(Error::Auth),
                Ok(Err(s)) => {
                    return Err(Error::Unavailable {
                        addr: addr.to_string(),
                        reason: format!("handing back log-less backups: {}", s.message()),
                    })
                }
                Err(_) => {
                    return Err(Error::Unavailable {
                        addr: addr.to_string(),
                        reason: "handing back log-less backups: no answer".into(),
                    })
                }
            };
            outcome = pb::RecoverOutcome::try_from(reply.outcome)
                .unwrap_or(pb::RecoverOutcome::RecoverNotNeeded);
            if outcome != pb::RecoverOutcome::RecoverAccepted {
                break;
            }
        }
        Ok(outcome)
    }

    /// Hands one run's backups of the server at `gone` to another server of
    /// the cluster (home first, then every server a map named): the first
    /// that keeps them or says they are of no more use. `None`: none could
    /// (or it is a single server).
    async fn hand_back_elsewhere(
        &self,
        gone: &str,
        requests: &[pb::RecoverRequest],
    ) -> Option<(u64, pb::RecoverOutcome)> {
        let incarnation = requests.first()?.incarnation;
        let mut targets = vec![self.inner.home.addr.clone()];
        targets.extend(self.inner.router.known());
        targets.retain(|t| t != gone);
        targets.dedup();
        for t in targets {
            let timeout = self.inner.options.connect_timeout;
            match self.hand_back_to(&t, requests, timeout).await {
                Ok(
                    o @ (pb::RecoverOutcome::RecoverAccepted | pb::RecoverOutcome::RecoverTooLate),
                ) => {
                    tracing::info!(
                        from = gone,
                        to = %t,
                        accepted = o == pb::RecoverOutcome::RecoverAccepted,
                        "handed a server's log-less backups to another server of the cluster"
                    );
                    return Some((incarnation, o));
                }
                _ => continue,
            }
        }
        None
    }

    /// Sends every backup to the server (`Recover`), in messages under the
    /// size limit; drops them if the server says they are of no more use.
    async fn hand_back_backups(
        &self,
        grpc: &mut pb::sextant_client::SextantClient<Channel>,
        addr: &str,
    ) -> Result<()> {
        let requests = self
            .inner
            .backups
            .lock()
            .recover_requests(self.inner.client_id);
        for req in requests {
            let incarnation = req.incarnation;
            let mut request = tonic::Request::new(req);
            self.inner.authorize(&mut request, "Recover", addr);
            let reply = match grpc.recover(request).await {
                Ok(r) => r.into_inner(),
                Err(s) if s.code() == Code::Unauthenticated => return Err(Error::Auth),
                Err(s) => {
                    return Err(Error::Unavailable {
                        addr: self.inner.addr.clone(),
                        reason: format!("handing back log-less backups: {}", s.message()),
                    })
                }
            };
            match pb::RecoverOutcome::try_from(reply.outcome) {
                Ok(pb::RecoverOutcome::RecoverAccepted) => continue,
                Ok(pb::RecoverOutcome::RecoverTooLate) => {
                    tracing::warn!(
                        incarnation,
                        "the server recovered without this client's backups (it came back \
                         after the grace period); dropping them"
                    );
                    self.drop_home_run(incarnation);
                    break;
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// Sends one request (retrying on a new session until `retry_for`).
    async fn call(&self, cred: &Credentials, op: Op) -> Result<Res> {
        Ok(self.call_with(cred, op, false).await?.0)
    }

    /// A mutation whose value is an inode's attributes, with its
    /// directory's attributes when `want_dir`.
    async fn attr_with_dir(
        &self,
        cred: &Credentials,
        op: Op,
        want_dir: bool,
    ) -> Result<WithDir<Attr>> {
        let (r, dir) = self.call_with(cred, op, want_dir).await?;
        Ok(WithDir {
            value: expect_attr(r)?,
            dir,
        })
    }

    /// [`Client::call`], also returning `Response.dir` when `want_dir`.
    async fn call_with(
        &self,
        cred: &Credentials,
        op: Op,
        want_dir: bool,
    ) -> Result<(Res, Option<Attr>)> {
        self.call_at(cred, op, want_dir, None).await
    }

    /// [`Client::call_with`], sent to the server at `pinned` (an address
    /// as the route map spells it) instead of where the request routes:
    /// an operation for one server itself (releasing its log-less
    /// backups), not for a table.
    async fn call_at(
        &self,
        cred: &Credentials,
        op: Op,
        want_dir: bool,
        pinned: Option<&str>,
    ) -> Result<(Res, Option<Attr>)> {
        let mutation = op.is_mutation();
        let exactly_once = mutation && self.inner.client_id != 0;
        let mut req = pb::Request {
            id: 0,
            cred: Some(cred_to_pb(cred)),
            // Numbered below, once it may be sent.
            client_id: 0,
            seq: 0,
            acked_below: 0,
            origin: self.inner.options.origin,
            want_dir,
            op: Some(op),
        };
        if prost::Message::encoded_len(&req) + 3 * 11 > MAX_MESSAGE_BYTES {
            return Err(Error::Fs(FsError::TooBig));
        }
        // Held across retries: bounds what this client makes the server
        // hold (see MAX_MUTATIONS_IN_FLIGHT). Taken *before* the request
        // is numbered, so numbers are handed out in the order requests go.
        let _permit = if mutation {
            Some(
                self.inner
                    .mutations
                    .acquire()
                    .await
                    .map_err(|_| Error::Protocol("client closed".into()))?,
            )
        } else {
            None
        };
        let number = |req: &mut pb::Request| {
            let seq = self.inner.outstanding.lock().take();
            req.client_id = self.inner.client_id;
            req.seq = seq;
            SeqGuard {
                outstanding: &self.inner.outstanding,
                seq,
            }
        };
        let mut _seq = exactly_once.then(|| number(&mut req));
        // Whether an attempt may have run: sent, and no reply said it did
        // not (a WRONG_SERVER says it did not — unless it says `ran`: R1
        // refused the reply of a mutation that ran). See the renumbering
        // below.
        let mut maybe_ran = false;
        let mut renumbered = false;
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        let mut route_soid = req.op.as_ref().and_then(|op| op.route_soid());
        // An operation routed by none of its own SOIDs (a path's
        // resolution) goes where the server that refused it points.
        let unrouted = route_soid.is_none();
        // WRONG_SERVER replies followed at once by a send to the new
        // owner; beyond this many, retries back off (owners in flux).
        let mut redirects = 0;
        loop {
            let link = match pinned {
                Some(addr) => self.link_to(addr),
                None => self.link_for(route_soid),
            };
            let failure = match self.link_conn(&link).await {
                Ok(conn) => {
                    req.id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
                    if exactly_once {
                        // Every attempt says what this client still needs.
                        req.acked_below = self.inner.outstanding.lock().acked_below();
                    }
                    let remaining = self
                        .inner
                        .options
                        .retry_for
                        .saturating_sub(started.elapsed());
                    // A server that never answers must not hang the
                    // caller: give up after the retry budget.
                    let no_reply = || Error::Unavailable {
                        addr: link.addr.clone(),
                        reason: format!("no reply within {:?}", self.inner.options.retry_for),
                    };
                    // `None`: not sent (the session closed).
                    let reply = match &conn.wire {
                        Wire::Frames(lane) => {
                            // On its way (written whole, or the connection
                            // is broken): see `track_sending`.
                            let _ = SENT.try_with(|sent| sent.store(true, Ordering::Release));
                            match lane.lock().await.round_trip(&req, remaining).await {
                                Ok(resp) => Some(Ok(Ok(resp))),
                                Err(frames::Failed::TimedOut) => return Err(no_reply()),
                                Err(frames::Failed::Broken(why)) => {
                                    Some(Ok(Err(Status::unavailable(why))))
                                }
                            }
                        }
                        Wire::Session { tx, pending } => {
                            let (wtx, wrx) = oneshot::channel();
                            let registered = {
                                let mut pending = pending.lock();
                                if !pending.closed {
                                    pending.waiters.insert(req.id, wtx);
                                }
                                !pending.closed
                            };
                            if !registered || tx.send(req.clone()).await.is_err() {
                                pending.lock().waiters.remove(&req.id);
                                conn.dead.store(true, Ordering::Release);
                                None
                            } else {
                                // On its way: see `track_sending`.
                                let _ = SENT.try_with(|sent| sent.store(true, Ordering::Release));
                                match tokio::time::timeout(remaining, wrx).await {
                                    Ok(r) => Some(r),
                                    Err(_) => {
                                        pending.lock().waiters.remove(&req.id);
                                        return Err(no_reply());
                                    }
                                }
                            }
                        }
                    };
                    match reply {
                        None => Error::Unavailable {
                            addr: link.addr.clone(),
                            reason: "the session closed".into(),
                        },
                        Some(reply) => match reply {
                            Ok(Ok(resp)) if resp.wrong_server.is_some() => {
                                self.inner.wrong_server.fetch_add(1, Ordering::Relaxed);
                                // Refused by R1 after it ran (the table is
                                // moving): its retry is answered with its
                                // reply, never sent as a new request.
                                maybe_ran |= resp.wrong_server.as_ref().is_some_and(|w| w.ran);
                                // A new map only when the server's is newer
                                // than ours (or it did not say): a refusal
                                // under the same map (a path leaving the
                                // server's tables, a table in transit) would
                                // fetch the same map again — a `Map` round
                                // trip per step of a path resolved across
                                // servers.
                                let theirs = resp.wrong_server.as_ref().map_or(0, |w| w.revision);
                                let ours = self.inner.router.map().map(|m| m.revision());
                                if theirs == 0 || ours.is_none_or(|r| r < theirs) {
                                    let wanted = (theirs != 0).then_some(theirs);
                                    if let Err(Error::Auth) =
                                        self.refresh_routes_to(&link, wanted).await
                                    {
                                        if self.ticket_refused(&link) {
                                            continue;
                                        }
                                        return Err(Error::Auth);
                                    }
                                }
                                let refused = resp
                                    .wrong_server
                                    .as_ref()
                                    .and_then(|w| soid_from_pb(w.soid.as_ref()).ok());
                                if !unrouted && refused.is_some() && refused != route_soid {
                                    if let Some(Op::Lookup(_)) = &req.op {
                                        // The entry's server named its inode,
                                        // held by another server: the caller
                                        // asks that one (Client::lookup).
                                        return Err(Error::Fs(FsError::WrongServer {
                                            soid: refused.unwrap_or(Soid::ROOT),
                                        }));
                                    }
                                }
                                if unrouted {
                                    // Its owner could not finish it either (a
                                    // path over several servers' tables), or
                                    // the server named is the one that just
                                    // refused (a resolution stopping at another
                                    // server's table names the root): the
                                    // caller walks it name by name, at once —
                                    // asking the same server again after a
                                    // pause would get the same answer.
                                    if route_soid.is_some()
                                        || self.link_for(refused).addr == link.addr
                                    {
                                        return Err(Error::Fs(FsError::WrongServer {
                                            soid: refused.unwrap_or(Soid::ROOT),
                                        }));
                                    }
                                    route_soid = refused;
                                }
                                let owner = self.link_for(route_soid);
                                if owner.addr != link.addr && redirects < MAX_QUICK_REDIRECTS {
                                    redirects += 1;
                                    continue;
                                }
                                Error::Unavailable {
                                    addr: link.addr.clone(),
                                    reason: "the server does not serve this table, and the \
                                             route map names no other owner yet"
                                        .into(),
                                }
                            }
                            Ok(Ok(resp))
                                if exactly_once
                                    && !maybe_ran
                                    && !renumbered
                                    && resp.error.as_ref().map(error_from_pb)
                                        == Some(FsError::Stale) =>
                            {
                                // An exactly-once refusal of a request no
                                // attempt of which can have run (every one
                                // was refused by WRONG_SERVER before it
                                // ran — not by R1 after: `ran`): a server's
                                // floor for this client rose above its number
                                // while it waited — a table that moved here
                                // carried a floor raised over replies it
                                // dropped (`table::carried`, 4,096 per
                                // client), or this server's own cap (16,384)
                                // passed it. It never ran, so it goes again,
                                // once, as a new request (a new number); an
                                // ESTALE that is the operation's own answer
                                // (a stale handle) comes back the same.
                                renumbered = true;
                                tracing::debug!(
                                    seq = req.seq,
                                    "a request refused as stale before it ever ran: sent again under a new number"
                                );
                                _seq = Some(number(&mut req));
                                continue;
                            }
                            Ok(Ok(mut resp)) => {
                                self.inner
                                    .retries
                                    .unreachable
                                    .store(false, Ordering::Release);
                                let dir = resp.dir.take().and_then(|a| attr_from_pb(&a).ok());
                                return Ok((decode(resp)?, dir));
                            }
                            Ok(Err(s)) => {
                                conn.dead.store(true, Ordering::Release);
                                maybe_ran = true;
                                match s.code() {
                                    Code::Unauthenticated if self.ticket_refused(&link) => continue,
                                    Code::Unauthenticated => return Err(Error::Auth),
                                    Code::OutOfRange
                                    | Code::ResourceExhausted
                                    | Code::InvalidArgument => {
                                        // The stream died over some message;
                                        // ours may be innocent: retry.
                                        Error::Protocol(s.message().to_string())
                                    }
                                    _ => Error::Unavailable {
                                        addr: link.addr.clone(),
                                        reason: s.message().to_string(),
                                    },
                                }
                            }
                            Err(_) => {
                                maybe_ran = true;
                                Error::Unavailable {
                                    addr: link.addr.clone(),
                                    reason: "the session closed".into(),
                                }
                            }
                        },
                    }
                }
                Err(Error::Auth) if self.ticket_refused(&link) => continue,
                Err(Error::Auth) => return Err(Error::Auth),
                Err(e) => e,
            };
            if started.elapsed() + backoff > self.inner.options.retry_for {
                if matches!(failure, Error::Unavailable { .. }) {
                    self.inner
                        .retries
                        .unreachable
                        .store(true, Ordering::Release);
                }
                return Err(failure);
            }
            if self.inner.retries.unreachable.load(Ordering::Acquire)
                && matches!(failure, Error::Unavailable { .. })
            {
                return Err(failure);
            }
            self.inner.retry_pauses.fetch_add(1, Ordering::Relaxed);
            let mut stopping = self.inner.retries.stopping.subscribe();
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = stopping.wait_for(|stop| *stop) => return Err(failure),
            }
            backoff = (backoff * 2).min(Duration::from_millis(500));
            if matches!(failure, Error::Unavailable { .. }) {
                // A table's owner that does not answer may be dead: ask
                // where its tables are now (a failover gives them to a
                // live server) — the server this client came to, or, when
                // that is the one not answering, the others of the map.
                let asked_home = link.addr != self.inner.home.addr;
                let home = if asked_home {
                    self.refresh_routes(&self.inner.home).await
                } else {
                    Err(failure.clone())
                };
                match home {
                    Err(Error::Auth) => return Err(Error::Auth),
                    Ok(()) => {}
                    Err(_) => {
                        if let Err(Error::Auth) = self.refresh_routes_elsewhere(&link.addr).await {
                            return Err(Error::Auth);
                        }
                    }
                }
            }
        }
    }

    /// From now on a request that fails (the server is unreachable, its
    /// session broke) is not retried: it returns its error at once, and
    /// requests waiting to retry return theirs now. For a process about to
    /// exit (the mount on SIGTERM), which must not wait out the retry budget
    /// ([`Options::retry_for`]) for a server that is gone. Replies already
    /// on their way are still awaited; a new request still gets one attempt.
    /// Applies to this client's siblings ([`Client::sibling`]) too.
    pub fn stop_retrying(&self) {
        self.inner.retries.stopping.send_replace(true);
    }

    // ---- reads ----------------------------------------------------------

    /// The attributes of `name` in `parent`. In a cluster, a name whose
    /// inode lives in another server's table takes two calls: the entry's
    /// server answers with the inode's SOID (as WRONG_SERVER), its owner
    /// with the attributes.
    pub async fn lookup(&self, cred: &Credentials, parent: Soid, name: &[u8]) -> Result<Attr> {
        let op = Op::Lookup(pb::LookupRequest {
            parent: Some(soid_to_pb(parent)),
            name: name.to_vec(),
        });
        match self.call(cred, op).await {
            Err(Error::Fs(FsError::WrongServer { soid })) => self.getattr(cred, soid).await,
            r => expect_attr(r?),
        }
    }

    pub async fn getattr(&self, cred: &Credentials, soid: Soid) -> Result<Attr> {
        let op = Op::Getattr(pb::GetattrRequest {
            soid: Some(soid_to_pb(soid)),
        });
        expect_attr(self.call(cred, op).await?)
    }

    /// The attributes of `path` (from the root), following symlinks on
    /// the way (and at its end with `follow_last`), as path resolution on
    /// Linux does. One call to one server: on a cluster, a server walks a
    /// path whose names live on several servers on across them itself
    /// (`Across::resolve` in sextant-server); one that refuses it (a
    /// server that predates that, or whose peers do not answer now) has
    /// it walked here name by name.
    pub async fn resolve(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
    ) -> Result<Attr> {
        let op = Op::Resolve(pb::ResolveRequest {
            path: path.to_vec(),
            follow_last,
        });
        match self.call(cred, op).await {
            Err(Error::Fs(FsError::WrongServer { .. })) => {
                self.resolve_by_names(cred, path, follow_last).await
            }
            r => expect_attr(r?),
        }
    }

    /// [`Client::resolve`] one name at a time, each lookup going to the
    /// server of its directory — the engine's `resolve_path`, step by step
    /// (search permission checked by each lookup, and for `.` and `..`,
    /// before a name too long; `..` is the directory walked before, the
    /// root's own parent the root). For a server that refuses a `Resolve`
    /// leaving its tables (see [`Client::resolve`]).
    async fn resolve_by_names(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
    ) -> Result<Attr> {
        use sextant_types::walk::{PathWalk, Step};
        let mut walk = PathWalk::new(path, follow_last, self.getattr(cred, Soid::ROOT).await?);
        loop {
            match walk.step()? {
                Step::Search { dir, up } => {
                    // Search permission on the directory, as for any name.
                    self.access(cred, dir.soid, 1).await?;
                    if up {
                        // `..` is the physical parent, as walked; the
                        // root's parent is the root.
                        let parent = walk.walked_parent().cloned().unwrap_or(dir);
                        walk.up(parent);
                    }
                }
                Step::Lookup { dir, name, .. } => {
                    if name.len() > sextant_types::NAME_MAX {
                        // As the engine's walk: search permission first
                        // (a server's `Lookup` checks the name first).
                        self.access(cred, dir, 1).await?;
                        return Err(Error::Fs(FsError::NameTooLong));
                    }
                    walk.found(self.lookup(cred, dir, &name).await?)?
                }
                Step::Readlink { link } => walk.target(&self.readlink(cred, link).await?),
                Step::Root => walk.at_root(self.getattr(cred, Soid::ROOT).await?),
                Step::Done(attr) => return Ok(attr),
            }
        }
    }

    pub async fn readlink(&self, cred: &Credentials, soid: Soid) -> Result<Box<[u8]>> {
        let op = Op::Readlink(pb::ReadlinkRequest {
            soid: Some(soid_to_pb(soid)),
        });
        expect_data(self.call(cred, op).await?)
    }

    /// Up to `limit` (at most 1024) entries after cookie `after`.
    pub async fn readdir(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        Ok(self.readdir_page(cred, dir, after, limit).await?.0)
    }

    /// [`Client::readdir`], and whether the server said the directory ends
    /// with these entries (none after the last one). `false` does not say
    /// there are more: a server that predates the flag always says it, and
    /// an empty batch is the end either way.
    pub async fn readdir_page(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let (entries, end) = self.readdir_call(cred, dir, after, limit, false).await?;
        let entries = entries
            .into_iter()
            .map(|e| dirent_from_pb(e).map_err(|_| bad_reply("a bad directory entry")))
            .collect::<Result<_>>()?;
        Ok((entries, end))
    }

    /// [`Client::readdir`] with each entry's attributes where the server
    /// read them with the listing (READDIRPLUS): `None` for an entry the
    /// caller may not look up (no search permission on `dir`), whose inode
    /// another table holds, or from a server that predates it — look those
    /// up.
    pub async fn readdir_plus(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(DirEntry, Option<Attr>)>> {
        Ok(self.readdir_plus_page(cred, dir, after, limit).await?.0)
    }

    /// [`Client::readdir_plus`], and whether the directory ends with these
    /// entries (see [`Client::readdir_page`]).
    pub async fn readdir_plus_page(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<PlusPage> {
        let (entries, end) = self.readdir_call(cred, dir, after, limit, true).await?;
        let entries = entries
            .into_iter()
            .map(|e| dirent_plus_from_pb(e).map_err(|_| bad_reply("a bad directory entry")))
            .collect::<Result<_>>()?;
        Ok((entries, end))
    }

    async fn readdir_call(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
        plus: bool,
    ) -> Result<(Vec<pb::DirEntry>, bool)> {
        let op = Op::Readdir(pb::ReaddirRequest {
            dir: Some(soid_to_pb(dir)),
            after,
            limit: limit.min(READDIR_MAX as usize) as u32,
            plus,
        });
        match self.call(cred, op).await? {
            // An empty batch is the end whatever the server says.
            Res::Entries(e) => {
                let end = e.end || e.entries.is_empty();
                Ok((e.entries, end))
            }
            _ => Err(bad_reply("not a readdir reply")),
        }
    }

    pub async fn getxattr(&self, cred: &Credentials, soid: Soid, name: &[u8]) -> Result<Box<[u8]>> {
        let op = Op::Getxattr(pb::GetxattrRequest {
            soid: Some(soid_to_pb(soid)),
            name: name.to_vec(),
        });
        expect_data(self.call(cred, op).await?)
    }

    pub async fn listxattr(&self, cred: &Credentials, soid: Soid) -> Result<Vec<Box<[u8]>>> {
        let op = Op::Listxattr(pb::ListxattrRequest {
            soid: Some(soid_to_pb(soid)),
        });
        match self.call(cred, op).await? {
            Res::Names(n) => Ok(n.names.into_iter().map(Vec::into_boxed_slice).collect()),
            _ => Err(bad_reply("not a listxattr reply")),
        }
    }

    pub async fn access(&self, cred: &Credentials, soid: Soid, mask: u32) -> Result<()> {
        let op = Op::Access(pb::AccessRequest {
            soid: Some(soid_to_pb(soid)),
            mask,
        });
        expect_done(self.call(cred, op).await?)
    }

    pub async fn statfs(&self, cred: &Credentials) -> Result<StatFs> {
        match self.call(cred, Op::Statfs(pb::StatfsRequest {})).await? {
            Res::Statfs(s) => Ok(statfs_from_pb(&s)),
            _ => Err(bad_reply("not a statfs reply")),
        }
    }

    /// The engine's counters plus the server's (requests, replayed replies,
    /// clients remembered).
    pub async fn stats(&self, cred: &Credentials) -> Result<(EngineStats, ServerStats)> {
        match self.call(cred, Op::Status(pb::StatusRequest {})).await? {
            Res::Stats(s) => Ok((
                stats_from_pb(&s),
                ServerStats {
                    requests: s.requests,
                    replayed_replies: s.replayed_replies,
                    clients_remembered: s.clients_remembered,
                    arl_size: s.arl_size,
                    incarnation: s.incarnation,
                    written_back_lsn: s.written_back_lsn,
                    backup_bytes_issued: s.backup_bytes_issued,
                    stamped_inodes: s.stamped_inodes,
                    logless_unreturned: s.logless_unreturned,
                },
            )),
            _ => Err(bad_reply("not a status reply")),
        }
    }

    // ---- mutations (durable when they return) ----------------------------

    pub async fn create(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        perm: u32,
        exclusive: bool,
    ) -> Result<Attr> {
        Ok(self
            .create_with_dir(cred, parent, name, perm, exclusive, false)
            .await?
            .value)
    }

    /// [`Client::create`], with the directory's attributes after it when
    /// `want_dir` (see [`WithDir`]).
    pub async fn create_with_dir(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        perm: u32,
        exclusive: bool,
        want_dir: bool,
    ) -> Result<WithDir<Attr>> {
        let op = Op::Create(pb::CreateRequest {
            parent: Some(soid_to_pb(parent)),
            name: name.to_vec(),
            perm,
            exclusive,
        });
        self.attr_with_dir(cred, op, want_dir).await
    }

    pub async fn mknod(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        ftype: FileType,
        perm: u32,
        rdev: u32,
    ) -> Result<Attr> {
        let op = Op::Mknod(pb::MknodRequest {
            parent: Some(soid_to_pb(parent)),
            name: name.to_vec(),
            ftype: ftype_to_pb(ftype) as i32,
            perm,
            rdev,
        });
        expect_attr(self.call(cred, op).await?)
    }

    pub async fn mkdir(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        perm: u32,
    ) -> Result<Attr> {
        Ok(self
            .mkdir_with_dir(cred, parent, name, perm, false)
            .await?
            .value)
    }

    /// [`Client::mkdir`], with the directory's attributes after it when
    /// `want_dir`.
    pub async fn mkdir_with_dir(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        perm: u32,
        want_dir: bool,
    ) -> Result<WithDir<Attr>> {
        let op = Op::Mkdir(pb::MkdirRequest {
            parent: Some(soid_to_pb(parent)),
            name: name.to_vec(),
            perm,
        });
        self.attr_with_dir(cred, op, want_dir).await
    }

    pub async fn symlink(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        target: &[u8],
    ) -> Result<Attr> {
        let op = Op::Symlink(pb::SymlinkRequest {
            parent: Some(soid_to_pb(parent)),
            name: name.to_vec(),
            target: target.to_vec(),
        });
        expect_attr(self.call(cred, op).await?)
    }

    /// Removes a link; returns the inode's attributes as they were
    /// (`nlink` 1 for a file: it is gone).
    pub async fn unlink(&self, cred: &Credentials, parent: Soid, name: &[u8]) -> Result<Attr> {
        Ok(self.unlink_with_dir(cred, parent, name, false).await?.value)
    }

    /// [`Client::unlink`], with the directory's attributes after it when
    /// `want_dir` (see [`WithDir`]).
    pub async fn unlink_with_dir(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        want_dir: bool,
    ) -> Result<WithDir<Attr>> {
        let op = Op::Unlink(pb::UnlinkRequest {
            parent: Some(soid_to_pb(parent)),
            name: name.to_vec(),
        });
        self.attr_with_dir(cred, op, want_dir).await
    }

    /// Removes an empty directory; returns its attributes as they were.
    pub async fn rmdir(&self, cred: &Credentials, parent: Soid, name: &[u8]) -> Result<Attr> {
        Ok(self.rmdir_with_dir(cred, parent, name, false).await?.value)
    }

    /// [`Client::rmdir`], with the directory's attributes after it when
    /// `want_dir`.
    pub async fn rmdir_with_dir(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        want_dir: bool,
    ) -> Result<WithDir<Attr>> {
        let op = Op::Rmdir(pb::RmdirRequest {
            parent: Some(soid_to_pb(parent)),
            name: name.to_vec(),
        });
        self.attr_with_dir(cred, op, want_dir).await
    }

    pub async fn rename(
        &self,
        cred: &Credentials,
        old_parent: Soid,
        old_name: &[u8],
        new_parent: Soid,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.rename_replacing(cred, old_parent, old_name, new_parent, new_name, flags)
            .await
            .map(drop)
    }

    /// [`Client::rename`], returning the attributes (as they were) of the
    /// inode whose name the rename replaced, if it replaced one — what a
    /// cache of it must let go of (its link count says whether it is
    /// gone), without a lookup first.
    pub async fn rename_replacing(
        &self,
        cred: &Credentials,
        old_parent: Soid,
        old_name: &[u8],
        new_parent: Soid,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<Option<Attr>> {
        let names = (old_parent, old_name, new_parent, new_name);
        Ok(self
            .rename_replacing_with_dir(cred, names, flags, false)
            .await?
            .value)
    }

    /// [`Client::rename_replacing`] of `(old_parent, old_name,
    /// new_parent, new_name)`, with the directory's attributes after it
    /// when `want_dir` and both parents are one (see [`WithDir`]).
    pub async fn rename_replacing_with_dir(
        &self,
        cred: &Credentials,
        (old_parent, old_name, new_parent, new_name): (Soid, &[u8], Soid, &[u8]),
        flags: RenameFlags,
        want_dir: bool,
    ) -> Result<WithDir<Option<Attr>>> {
        let op = Op::Rename(pb::RenameRequest {
            old_parent: Some(soid_to_pb(old_parent)),
            old_name: old_name.to_vec(),
            new_parent: Some(soid_to_pb(new_parent)),
            new_name: new_name.to_vec(),
            noreplace: flags.noreplace,
            exchange: flags.exchange,
        });
        let (r, dir) = self.call_with(cred, op, want_dir).await?;
        let value = match r {
            Res::Done(_) => None,
            r => Some(expect_attr(r)?),
        };
        Ok(WithDir { value, dir })
    }

    pub async fn link(
        &self,
        cred: &Credentials,
        soid: Soid,
        new_parent: Soid,
        new_name: &[u8],
    ) -> Result<Attr> {
        let op = Op::Link(pb::LinkRequest {
            soid: Some(soid_to_pb(soid)),
            new_parent: Some(soid_to_pb(new_parent)),
            new_name: new_name.to_vec(),
        });
        expect_attr(self.call(cred, op).await?)
    }

    pub async fn setattr(&self, cred: &Credentials, soid: Soid, set: &SetAttr) -> Result<Attr> {
        self.setattr_with(cred, soid, set, false).await
    }

    /// [`Client::setattr`]; with `write_handle` the caller changes the size
    /// through a file it holds open for writing (`ftruncate`): the server
    /// then asks for no write permission (it was granted at the open).
    pub async fn setattr_with(
        &self,
        cred: &Credentials,
        soid: Soid,
        set: &SetAttr,
        write_handle: bool,
    ) -> Result<Attr> {
        let op = Op::Setattr(pb::SetattrRequest {
            write_handle,
            ..setattr_to_pb(soid, set)
        });
        expect_attr(self.call(cred, op).await?)
    }

    pub async fn setxattr(
        &self,
        cred: &Credentials,
        soid: Soid,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> Result<()> {
        let op = Op::Setxattr(pb::SetxattrRequest {
            soid: Some(soid_to_pb(soid)),
            name: name.to_vec(),
            value: value.to_vec(),
            flags: xattr_flags_to_pb(flags) as i32,
        });
        expect_done(self.call(cred, op).await?)
    }

    pub async fn removexattr(&self, cred: &Credentials, soid: Soid, name: &[u8]) -> Result<()> {
        let op = Op::Removexattr(pb::RemovexattrRequest {
            soid: Some(soid_to_pb(soid)),
            name: name.to_vec(),
        });
        expect_done(self.call(cred, op).await?)
    }

    /// Writes every dirty table back (root or the root directory's owner).
    pub async fn sync(&self, cred: &Credentials) -> Result<()> {
        expect_done(
            self.call(cred, Op::Sync(pb::SyncRequest::default()))
                .await?,
        )
    }

    /// fsync's promise: returns once every operation the server holding
    /// `soid`'s table acknowledged before (to any client) survives a power
    /// loss — at once with the journal's `fsync`, after one shared journal
    /// sync with `background` or `nosync` (and on a log-less cluster
    /// member). A log-less single server has no journal and answers at
    /// once: there a power loss keeps only what was written back (see the
    /// protocol's `SyncRequest`). Any caller may.
    /// What fsync and fsyncdir through a mount call.
    pub async fn sync_journal(&self, cred: &Credentials, soid: Soid) -> Result<()> {
        let op = Op::Sync(pb::SyncRequest {
            journal: true,
            soid: Some(soid_to_pb(soid)),
            ..Default::default()
        });
        expect_done(self.call(cred, op).await?)
    }

    /// Log-less: before this client goes away on purpose, has every server
    /// it holds backups of write back what they hold, so that nothing
    /// acknowledged to it depends on it any more; then they are dropped.
    /// On a cluster that is its home server and each other server it did
    /// operations on (each asked on its own session, whose reply carries
    /// its watermark). Returns the entries still held (newer ones that
    /// arrived with the replies, which other clients hold too). Any client
    /// may; a no-op without backups. Every server is asked even when one
    /// fails; the first failure is returned (the caller then spools what
    /// is still held, [`Client::spool_backups`]). A server whose backups
    /// this client drops meanwhile (handed to another server after it
    /// died) is not waited for.
    /// A client dropped without this is a client death (which the stamp
    /// rule tolerates only while fewer than K holders of an entry die).
    pub async fn release_backups(&self, cred: &Credentials) -> Result<usize> {
        let mut failed = None;
        // Not in the `if let`: its guard would be held across the call.
        let newest = self.inner.backups.lock().newest();
        if let Some(through) = newest {
            let home = self.inner.home.addr.clone();
            if let Err(e) = self.release_on(cred, &home, through).await {
                failed.get_or_insert(e);
            }
        }
        let peers: Vec<(String, u64)> = {
            let peers = self.inner.peer_backups.lock();
            let held = peers.by_server.iter();
            held.filter_map(|(addr, b)| b.newest().map(|n| (addr.clone(), n)))
                .collect()
        };
        for (addr, through) in peers {
            let release = self.release_on(cred, &addr, through);
            let dropped = self.peer_backups_dropped(&addr);
            tokio::select! {
                r = release => {
                    if let Err(e) = r {
                        failed.get_or_insert(e);
                    }
                }
                () = dropped => {}
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(self.backup_stats().entries),
        }
    }

    /// Asks the server at `addr` to write back its log-less entries up to
    /// LSN `through` (a `Sync` with `release_through`, on its session).
    async fn release_on(&self, cred: &Credentials, addr: &str, through: u64) -> Result<()> {
        let op = Op::Sync(pb::SyncRequest {
            release_through: through,
            ..Default::default()
        });
        expect_done(self.call_at(cred, op, false, Some(addr)).await?.0)
    }

    /// Returns once nothing is held for the server at `addr` (another than
    /// the home server): its backups were written back or handed on.
    async fn peer_backups_dropped(&self, addr: &str) {
        loop {
            let held = {
                let peers = self.inner.peer_backups.lock();
                peers.by_server.get(addr).is_some_and(|b| !b.is_empty())
            };
            if !held {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Log-less: keeps the backups held on local disk under
    /// [`Options::backup_dir`], for the next client of that server on this
    /// machine to hand back ([`spool`]) — what a client that ends without
    /// having released them ([`Client::release_backups`], e.g. while the
    /// server is down) must do, or the acknowledged operations only it
    /// holds are lost with it. On a cluster every server's backups are
    /// kept, each under its own address (the home server's and those of
    /// the other servers it did operations on). Written and synced before
    /// it returns; the files it read back at connect are then removed
    /// (this one holds their entries). Returns the first file written
    /// (the home server's when it has any); `None`: nothing held, or no
    /// directory configured. A failure for one server does not stop the
    /// others; the first is returned.
    pub fn spool_backups(&self) -> Result<Option<std::path::PathBuf>, spool::SpoolError> {
        let Some(dir) = &self.inner.options.backup_dir else {
            return Ok(None);
        };
        let (mut first, mut failed) =
            match self.spool_one(dir, &self.inner.addr, &self.inner.backups) {
                Ok(p) => (p, None),
                Err(e) => (None, Some(e)),
            };
        // Collected first: writing (fsync) is not done under the lock the
        // session readers take.
        let (peers, finished): (Vec<(String, Held)>, Vec<std::path::PathBuf>) = {
            let mut peers = self.inner.peer_backups.lock();
            let mut finished = Vec::new();
            let mut held = Vec::new();
            for (addr, b) in peers.by_server.iter_mut() {
                if b.is_empty() {
                    // Read back, then written back or dropped: done with.
                    finished.extend(b.finished_spool().unwrap_or_default());
                } else {
                    held.push((addr.clone(), Held::copy(b)));
                }
            }
            (held, finished)
        };
        spool::remove(&finished);
        for (addr, held) in peers {
            match held.write(dir, &addr, self.inner.client_id) {
                Ok(path) => {
                    first.get_or_insert(path);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(first),
        }
    }

    /// [`Client::spool_backups`] for the home server's backups.
    fn spool_one(
        &self,
        dir: &std::path::Path,
        addr: &str,
        backups: &Mutex<backup::Backups>,
    ) -> Result<Option<std::path::PathBuf>, spool::SpoolError> {
        let held = {
            let mut b = backups.lock();
            if b.is_empty() {
                return Ok(None);
            }
            Held::copy(&mut b)
        };
        held.write(dir, addr, self.inner.client_id).map(Some)
    }

    /// Reads back what earlier clients of this server on this machine
    /// spooled ([`Options::backup_dir`]), to be handed back with this
    /// client's own.
    fn restore_spooled(&self) {
        let Some(dir) = &self.inner.options.backup_dir else {
            return;
        };
        match spool::load(dir, &self.inner.addr) {
            Ok(s) if s.files.is_empty() => {}
            Ok(s) => {
                let (files, incarnation) = (s.files.len(), s.incarnation);
                let restored = self
                    .inner
                    .backups
                    .lock()
                    .restore(s.incarnation, s.entries, s.files);
                tracing::info!(
                    files,
                    entries = restored,
                    incarnation,
                    "read back log-less backups a client of this server left on this machine"
                );
            }
            // Another user's (a root mount's) spool: not ours to read.
            Err(spool::SpoolError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied => {}
            Err(e) => tracing::error!(
                error = %e,
                "cannot read back the log-less backups earlier clients left on this machine"
            ),
        }
    }

    /// On a cluster: reads back what earlier clients on this machine
    /// spooled for the *other* servers of the route map (a client spools
    /// each server's backups under that server's address, and the next
    /// client is usually one of the same home server), holds them as
    /// backups of those servers, and settles each with its server in the
    /// background ([`settle_spooled_peer`]): its files are removed only
    /// once that server wrote their entries back or says they are of no
    /// more use, or another server kept them for its completion. Files
    /// of servers the map does not name (a server that left, or another
    /// cluster's) are kept, with one warning per process.
    ///
    /// Two clients starting at once may both read the same files: each
    /// holds the entries, and a file goes only once its entries are of
    /// no more use or written anew to another file (a client that ends
    /// holding them), so neither removal loses an entry.
    fn restore_peer_spools(&self) {
        let Some(dir) = &self.inner.options.backup_dir else {
            return;
        };
        let known = self.inner.router.known();
        if known.is_empty() {
            return;
        }
        let home_dir = spool::server_dir(dir, &self.inner.home.addr);
        let mut restored = Vec::new();
        for addr in &known {
            if spool::server_dir(dir, addr) == home_dir {
                continue;
            }
            match spool::load(dir, addr) {
                Ok(s) if s.files.is_empty() => {}
                Ok(s) => {
                    let (files, incarnation) = (s.files.len(), s.incarnation);
                    let entries = self
                        .inner
                        .peer_backups
                        .lock()
                        .by_server
                        .entry(addr.clone())
                        .or_default()
                        .restore(s.incarnation, s.entries, s.files);
                    tracing::info!(
                        server = %addr,
                        files,
                        entries,
                        incarnation,
                        "read back log-less backups a client left on this machine for another \
                         server of the cluster"
                    );
                    restored.push(addr.clone());
                }
                Err(spool::SpoolError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied => {}
                Err(e) => tracing::error!(
                    server = %addr,
                    error = %e,
                    "cannot read back the log-less backups earlier clients left on this machine"
                ),
            }
        }
        static WARNED: std::sync::Once = std::sync::Once::new();
        let named = |d: &std::path::PathBuf| {
            *d == home_dir || known.iter().any(|k| spool::server_dir(dir, k) == *d)
        };
        let unknown: Vec<_> = spool::spooled_dirs(dir)
            .into_iter()
            .filter(|d| !named(d))
            .collect();
        if !unknown.is_empty() {
            WARNED.call_once(|| {
                tracing::warn!(
                    dirs = ?unknown,
                    "log-less backups spooled for servers this cluster's route map does not \
                     name (a server that left it, or another cluster's): kept, not handed back"
                );
            });
        }
        for addr in restored {
            tokio::spawn(settle_spooled_peer(Arc::downgrade(&self.inner), addr));
        }
    }
}

/// Counters of the server itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub requests: u64,
    pub replayed_replies: u64,
    pub clients_remembered: u64,
    /// Log-less durability: the ARL size K (0: the server journals), the
    /// run's id, the written-back watermark, redo bytes handed out so far,
    /// and inodes with an explicit stamp.
    pub arl_size: u64,
    pub incarnation: u64,
    pub written_back_lsn: u64,
    pub backup_bytes_issued: u64,
    pub stamped_inodes: u64,
    /// Operations acknowledged before the last crash that no client handed
    /// back at recovery (lost; 0: none).
    pub logless_unreturned: u64,
}

fn bad_reply(what: &str) -> Error {
    Error::Protocol(format!("the server sent {what}"))
}

fn decode(resp: pb::Response) -> Result<Res> {
    if let Some(e) = &resp.error {
        return Err(Error::Fs(error_from_pb(e)));
    }
    resp.result.ok_or_else(|| bad_reply("an empty reply"))
}

fn expect_attr(r: Res) -> Result<Attr> {
    match r {
        Res::Attr(a) => attr_from_pb(&a).map_err(|_| bad_reply("bad attributes")),
        _ => Err(bad_reply("not an attribute reply")),
    }
}

fn expect_data(r: Res) -> Result<Box<[u8]>> {
    match r {
        Res::Data(d) => Ok(d.data.into_boxed_slice()),
        _ => Err(bad_reply("not a data reply")),
    }
}

fn expect_done(r: Res) -> Result<()> {
    match r {
        Res::Done(_) => Ok(()),
        _ => Err(bad_reply("not a done reply")),
    }
}

/// `e` and its sources, `: `-separated — a source that the text so far
/// already ends with is not repeated (errors that name their cause in
/// their own message and also chain it: the engine's I/O errors, tonic's
/// transport errors).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cur = c.source();
    }
    s
}
