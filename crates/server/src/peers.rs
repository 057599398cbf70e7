//! The other servers of a cluster, as one server's search reads them
//! (issue 21 item 3): the directories whose tables another server holds,
//! through its `DirChain` RPC.
//!
//! A spread search ([`sextant_engine::search::Spread`]) follows a parent
//! chain out of this server's tables; [`PeerDirs`] reads the rest of the
//! chain from the server the route map names for the directory, as that
//! server holds it. A search reads the directories it needs in batches
//! ([`ForeignDirs::chains`]): one `DirChain` call per holder (and per
//! [`BATCH`] directories), all holders at once. A table that moves while
//! it is read is asked again of its new holder (for up to [`READ_FOR`],
//! as long as the client chases moving ranges: a table in transit — its
//! old holder answers "not held", its new one has not loaded it — is
//! waited for); a directory that cannot be read in that time (still in
//! transit, or its holder does not answer) fails the search — never a
//! silently shorter answer — with the reason ([`PeerDirs::gave_up`]: the
//! server ends the search's stream with it, `ABORTED`), not a bare EIO.
//!
//! A confinement check (`crate::confine::across`) reads through it too,
//! never the kept records: the directories of an inode's links
//! ([`PeerDirs::links`], `DirChain` with `links`) — a file another server
//! holds is placed by all of them.
//!
//! It also forwards a search for a caller without the secret (a local
//! user on the Unix socket, `SearchRequest.forward_to`): the part runs on
//! its holder as the caller this server admitted, and the batches pass
//! back through; and that caller's other requests, on one stream per
//! peer ([`crate::forward`]).
//!
//! Across searches, a server keeps the other servers' directory records
//! it has read ([`ForeignCache`]), valid while every server's directory
//! epoch and incarnation (`DirChainReply.dir_epoch`, `incarnation`; its
//! own included) stay what they were when the records were read. The
//! epoch advances with every change of a directory held there (rename,
//! removal, mode, owner), not when tables move: a directory's record does
//! not depend on who holds it, and wherever it is changed, that server's
//! epoch advances. Each
//! search first asks every other server of the route map for both (one
//! small call each, all at once: [`Peers::check_epochs`]); when any
//! differs, or a server is new, gone, or does not answer, the kept
//! records are dropped and the engine forgets the directory paths it
//! remembered ([`sextant_engine::Engine::forget_remembered_dirs`]), which
//! may run through those directories. So a directory renamed, removed,
//! chmod-ed or chown-ed on another server, or a table that came or went
//! there, acknowledged before a search starts, is never seen by that
//! search as it was before.
//!
//! A path-limited key's check across the servers (`crate::confine::across`)
//! checks the epochs the same way ([`Peers::check_epochs`], or without
//! a call where every lease is live: [`Peers::check_epochs_kept`]), and
//! keeps the subtree its key's path names per generation
//! ([`ForeignCache::keep_confine`]), dropped with the records — and the
//! directories already proven inside each such subtree
//! ([`ForeignCache::note_inside`]), dropped with them too: a directory's
//! place changes only by a rename or removal of it or of an ancestor,
//! which moves the epoch of the server holding that directory.
//!
//! Invariants:
//! - A record is kept only from a reply whose server's epoch and
//!   incarnation equal the ones the current generation of the cache was
//!   checked at, and only into that generation.
//! - Peers are reached with the cluster secret (every server of a cluster
//!   shares it) over TCP, with TLS when this server serves TLS (its own
//!   certificate is the trust root: one certificate for the cluster, or
//!   a CA in its chain).
//! - The engine's search calls [`PeerDirs::chain`] on a blocking thread
//!   (never a runtime worker), which waits on the runtime's handle.

use crate::dir_leases::DirLeases;
use crate::placement::Placement;
use sextant_engine::confine::Confine;
use sextant_engine::search::{DirRecord, ForeignDirs};
use sextant_engine::Engine;
use sextant_proto::pb::sextant_client::SextantClient;
use sextant_proto::route::RouteTable;
use sextant_proto::{pb, soid_from_pb, soid_to_pb, SECRET_METADATA};
use sextant_types::{FsError, Soid};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Streams a peer channel reset itself that it remembers (for h2's second).
const REMEMBERED_RESETS: usize = 4096;

/// How long one directory is asked for before the search fails: as long
/// as a spread search chases the ranges of tables that keep moving
/// ([`sextant_proto::search::CHASE_FOR`]), so that a directory whose
/// table is in transit (dropped by its old holder, not yet loaded by its
/// new one: seconds each when many moves are in flight) is waited for,
/// not a failed query. (It was 10 s: while the coordinator spread ~1,000
/// tables onto servers that had joined, `find /` failed with a bare EIO.)
pub const READ_FOR: Duration = sextant_proto::search::CHASE_FOR;
/// One call's limit.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// A forwarded request's limit (a mutation may wait for a sync and a
/// table's pull there).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// An epoch check's limit ([`Peers::check_epochs`]): a server that does
/// not answer within it costs a search its kept directories, not its
/// answer.
const EPOCH_TIMEOUT: Duration = Duration::from_secs(1);
/// Between attempts while a table is moving.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Directories asked in one `DirChain` call at most.
pub const BATCH: usize = 4096;

/// Records kept across searches at most (then no more are kept until
/// the next generation).
const MAX_KEPT: usize = 1 << 18;

/// This process's incarnation (`DirChainReply.incarnation`): never 0, new
/// at every start (so a restarted server's epochs, which start again, are
/// never taken for the old ones).
pub fn incarnation() -> u64 {
    static INCARNATION: OnceLock<u64> = OnceLock::new();
    *INCARNATION.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        (nanos ^ (u64::from(std::process::id()) << 40)).max(1)
    })
}

/// Whether searches keep other servers' directories across searches (and
/// remember paths through them): yes, unless `SEXTANT_SEARCH_KEEP_FOREIGN=0`
/// (benchmarks compare both in one run; read once).
pub fn keeping() -> bool {
    static KEEPING: OnceLock<bool> = OnceLock::new();
    *KEEPING.get_or_init(|| std::env::var("SEXTANT_SEARCH_KEEP_FOREIGN").map_or(true, |v| v != "0"))
}

/// Keys' subtrees kept per generation at most.
const MAX_CONFINES: usize = 4096;

/// Directories proven inside keys' subtrees kept per generation at most
/// (all subtrees together; then no more are noted until the next
/// generation).
const MAX_INSIDE: usize = 1 << 18;

/// Every other server's (incarnation, directory epoch), by address.
type Epochs = BTreeMap<String, (u64, u64)>;

/// The servers of the route map ([`Peers::servers_of`]).
#[derive(Debug)]
struct Servers {
    /// The others' addresses, sorted.
    others: Vec<String>,
    /// This server's (empty when the map does not name it).
    me: String,
}

/// The other servers' directory records kept across searches (see the
/// module docs).
#[derive(Default)]
pub struct ForeignCache {
    state: parking_lot::Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    /// What `records` are valid for.
    epochs: Arc<Epochs>,
    /// Advanced whenever `records` are dropped.
    generation: u64,
    records: HashMap<Soid, DirRecord>,
    /// `records` by (parent, name): which directory is at a name.
    children: HashMap<(Soid, Box<[u8]>), Soid>,
    /// Path-limited keys' subtrees, by the key's path, found across the
    /// servers in this generation (`crate::confine::across`): dropped
    /// with `records`, as they are read from them, from this server's
    /// own directories (its epoch is one of `epochs`) and from other
    /// servers' replies during the generation.
    confines: HashMap<Box<str>, Arc<Confine>>,
    /// By a subtree's root: the directories a check of this generation
    /// proved to be that root or below it (`crate::confine`'s memo).
    /// Dropped with `records`: a directory's place changes only by a
    /// rename or removal (of it or an ancestor), which moves the epoch of
    /// the server that holds the directory changed — this one's included.
    inside: HashMap<Soid, HashSet<Soid>>,
    /// Directories in `inside`, all roots together.
    inside_count: usize,
}

/// What a search checked ([`Peers::check_epochs`]): it may use and fill
/// the kept records of this generation.
#[derive(Clone, Debug)]
pub struct Checked {
    generation: u64,
    epochs: Arc<Epochs>,
}

/// Channels to the other servers, one per address.
pub struct Peers {
    secret: MetadataValue<tonic::metadata::Ascii>,
    /// TLS trust root (`None`: plain TCP).
    ca: Option<Vec<u8>>,
    channels: parking_lot::Mutex<HashMap<String, Channel>>,
    /// The other servers' directories, kept across searches.
    pub cache: ForeignCache,
    /// Leases on directory records, granted and held
    /// ([`crate::dir_leases`]).
    pub leases: DirLeases,
    /// [`Peers::servers_of`] at a map revision.
    servers: parking_lot::Mutex<Option<(u64, Arc<Servers>)>>,
    /// Requests forwarded for local users: a stream per peer.
    pub forwarder: crate::forward::Forwarder,
}

impl Peers {
    /// Peers reached with `secret`, over TLS trusting `ca` when given, of
    /// a server whose directory epoch is `dir_epoch` now.
    pub fn new(secret: &str, ca: Option<Vec<u8>>, dir_epoch: u64) -> Option<Peers> {
        Some(Peers {
            secret: secret.parse().ok()?,
            ca,
            channels: parking_lot::Mutex::new(HashMap::new()),
            cache: ForeignCache::default(),
            leases: DirLeases::new(dir_epoch),
            servers: parking_lot::Mutex::new(None),
            forwarder: crate::forward::Forwarder::default(),
        })
    }

    /// The other servers' addresses in the route map, sorted, and this
    /// server's (empty when the map does not name it); `None` when the
    /// map cannot be read. Kept per map revision: built from the
    /// placement's map at every check, the route table took a large share
    /// of a path-limited key's checks (`perf`: `route_table` 6.8 % of the
    /// servers' CPU, with allocations; BENCHMARKS "Leases on directory
    /// records"). Also the servers a restarted server's first revocation
    /// round asks (`service::Shared::settle_dir_leases`).
    pub fn servers_of(
        &self,
        engine: &Engine,
        placement: &dyn Placement,
    ) -> Option<(Vec<String>, String)> {
        self.servers(engine, placement)
            .map(|s| (s.others.clone(), s.me.clone()))
    }

    /// [`Peers::servers_of`], shared (no copy per check).
    fn servers(&self, engine: &Engine, placement: &dyn Placement) -> Option<Arc<Servers>> {
        let revision = placement.revision();
        if revision != 0 {
            if let Some((r, servers)) = &*self.servers.lock() {
                if *r == revision {
                    return Some(Arc::clone(servers));
                }
            }
        }
        let map = RouteTable::from_pb(&placement.map()).ok()?;
        let me = engine.member_name();
        let mut others: Vec<String> = map
            .routes()
            .iter()
            .filter(|r| Some(r.server.as_str()) != me && !r.address.is_empty())
            .map(|r| r.address.clone())
            .collect();
        others.sort_unstable();
        others.dedup();
        let mine = map
            .routes()
            .iter()
            .find(|r| Some(r.server.as_str()) == me)
            .map(|r| r.address.clone())
            .unwrap_or_default();
        let servers = Arc::new(Servers { others, me: mine });
        if revision != 0 {
            *self.servers.lock() = Some((revision, Arc::clone(&servers)));
        }
        Some(servers)
    }

    /// Before a search on `engine` (or a path-limited key's check across
    /// servers): asks every other server of the route map whose lease on
    /// its directory records is not live ([`crate::dir_leases`]; the
    /// answer grants a new one) for its directory epoch and incarnation,
    /// all at once, and takes the others' as their leases say; when any
    /// differs from what the kept records are valid for (or a server is
    /// new or gone), drops them and makes `engine` forget the directory
    /// paths it remembered. `None` when some server did not answer (then
    /// both are dropped too, and the search keeps nothing).
    /// REQUIRES: not on a runtime worker (waits on `runtime`).
    pub fn check_epochs(
        self: &Arc<Self>,
        engine: &Engine,
        placement: &dyn Placement,
        runtime: &tokio::runtime::Handle,
    ) -> Option<Checked> {
        let Some(servers) = self.servers(engine, placement) else {
            self.cache.drop_all(engine, Epochs::new());
            return None;
        };
        self.check_with(engine, &servers, runtime)
    }

    /// [`Peers::check_epochs`] for the route map's `servers`.
    fn check_with(
        self: &Arc<Self>,
        engine: &Engine,
        servers: &Arc<Servers>,
        runtime: &tokio::runtime::Handle,
    ) -> Option<Checked> {
        let (unchanged, due) = self.unchanged_due(engine, servers);
        if let Some(checked) = unchanged {
            if due {
                // (One not live is asked below, on this thread.)
                self.renew_soon(servers);
            }
            return Some(checked);
        }
        let (mut epochs, ask) = self.live_epochs(servers);
        if !ask.is_empty() {
            metrics::counter!("sextant_dir_epoch_asks_total", "by" => "check")
                .increment(ask.len() as u64);
            let peers = Arc::clone(self);
            let me = servers.me.clone();
            let asked = runtime.block_on(async move {
                let mut set = tokio::task::JoinSet::new();
                for address in ask {
                    let peers = Arc::clone(&peers);
                    let me = me.clone();
                    set.spawn(async move {
                        let got = peers.epoch_of(&address, &me).await;
                        (address, got)
                    });
                }
                let mut epochs = Epochs::new();
                let mut all = true;
                while let Some(done) = set.join_next().await {
                    match done {
                        Ok((address, Some(e))) => {
                            epochs.insert(address, e);
                        }
                        _ => all = false,
                    }
                }
                all.then_some(epochs)
            });
            let Some(asked) = asked else {
                self.cache.drop_all(engine, Epochs::new());
                return None;
            };
            epochs.extend(asked);
        }
        self.settle_epochs(engine, epochs)
    }

    /// [`Peers::check_epochs`] where it needs no call: every other
    /// server's lease is live (`None`: some server must be asked, or the
    /// map cannot be read — run [`Peers::check_epochs`] on a blocking
    /// thread). Never waits: for a runtime worker. A lease that is not
    /// live, or has less than half left, is renewed in the background
    /// ([`Peers::renew_soon`]), so that checks in continuous use keep
    /// finding every lease live.
    pub fn check_epochs_kept(
        self: &Arc<Self>,
        engine: &Engine,
        placement: &dyn Placement,
    ) -> Option<Checked> {
        let servers = self.servers(engine, placement)?;
        self.check_kept(engine, &servers)
    }

    /// [`Peers::check_epochs_kept`] for the route map's `servers`.
    fn check_kept(self: &Arc<Self>, engine: &Engine, servers: &Arc<Servers>) -> Option<Checked> {
        let (unchanged, due) = self.unchanged_due(engine, servers);
        if due {
            self.renew_soon(servers);
        }
        if let Some(checked) = unchanged {
            return Some(checked);
        }
        let (epochs, ask) = self.live_epochs(servers);
        if !ask.is_empty() {
            return None;
        }
        self.settle_epochs(engine, epochs)
    }

    /// Renews, on a task of its own, every lease of the other `servers`
    /// that is not live or has less than [`crate::dir_leases::RENEW_WITHIN`]
    /// left: the epoch check [`Peers::check_epochs`] makes, whose answer
    /// installs the lease its grantor granted unless a revocation came
    /// meanwhile ([`crate::dir_leases::Held::install`]). Nothing when one
    /// is in flight or began within [`crate::dir_leases::RENEW_GAP`], when
    /// the map does not name this server (no grantor would grant it),
    /// outside a runtime, or with `SEXTANT_DIR_LEASE_RENEW=0`. Never waits: a check calls it and goes on.
    fn renew_soon(self: &Arc<Self>, servers: &Arc<Servers>) {
        if servers.me.is_empty() || !crate::dir_leases::renewing_in_use() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.leases.begin_renewal(Instant::now()) {
            return;
        }
        /// Ends the renewal however its task ends.
        struct Renewing(Arc<Peers>);
        impl Drop for Renewing {
            fn drop(&mut self) {
                self.0.leases.end_renewal();
            }
        }
        let renewing = Renewing(Arc::clone(self));
        let servers = Arc::clone(servers);
        runtime.spawn(async move {
            let peers = &renewing.0;
            let due: Vec<String> = {
                let held = peers.leases.held.lock();
                let now = Instant::now();
                servers
                    .others
                    .iter()
                    .filter(|a| held.due(a, now))
                    .cloned()
                    .collect()
            };
            metrics::counter!("sextant_dir_epoch_asks_total", "by" => "renewal")
                .increment(due.len() as u64);
            let mut set = tokio::task::JoinSet::new();
            for address in due {
                let (peers, me) = (Arc::clone(peers), servers.me.clone());
                set.spawn(async move { peers.epoch_of(&address, &me).await });
            }
            while set.join_next().await.is_some() {}
            drop(renewing);
        });
    }

    /// The common case of a check, without a copy: every other server's
    /// lease live at the stamp the kept records are valid for, and this
    /// server's epoch unchanged — the current generation as it is.
    #[cfg(test)]
    fn unchanged(&self, engine: &Engine, servers: &Servers) -> Option<Checked> {
        self.unchanged_due(engine, servers).0
    }

    /// [`Peers::unchanged`], and whether some other server's lease is due
    /// for renewal ([`crate::dir_leases::Held::due`]: not live, or less
    /// than half left).
    fn unchanged_due(&self, engine: &Engine, servers: &Servers) -> (Option<Checked>, bool) {
        // (Lock order: `held`, then the cache's state; nothing takes them
        // the other way round.)
        let held = self.leases.held.lock();
        let now = Instant::now();
        let due = servers.others.iter().any(|a| held.due(a, now));
        let st = self.cache.state.lock();
        if st.epochs.len() != servers.others.len() + 1
            || st.epochs.get("") != Some(&(incarnation(), engine.dir_epoch()))
        {
            return (None, due);
        }
        for address in &servers.others {
            let same = held
                .live(address, now)
                .is_some_and(|stamp| st.epochs.get(address).is_some_and(|kept| *kept == stamp));
            if !same {
                return (None, due);
            }
        }
        metrics::counter!("sextant_search_epoch_checks_skipped_total")
            .increment(servers.others.len() as u64);
        (
            Some(Checked {
                generation: st.generation,
                epochs: Arc::clone(&st.epochs),
            }),
            due,
        )
    }

    /// The other servers' epochs as their live leases say, and the
    /// servers without a live lease (to be asked). Servers whose lease is
    /// live need not be asked: they revoke it before acknowledging a
    /// directory change (crate::dir_leases).
    fn live_epochs(&self, servers: &Servers) -> (Epochs, Vec<String>) {
        let mut epochs = Epochs::new();
        let mut ask = Vec::new();
        {
            let held = self.leases.held.lock();
            let now = Instant::now();
            for address in &servers.others {
                match held.live(address, now) {
                    Some(stamp) => {
                        epochs.insert(address.clone(), stamp);
                    }
                    None => ask.push(address.clone()),
                }
            }
        }
        metrics::counter!("sextant_search_epoch_checks_skipped_total")
            .increment(epochs.len() as u64);
        (epochs, ask)
    }

    /// The generation valid for the other servers' `epochs` and this
    /// server's own now (the kept records dropped first when they were
    /// valid for others).
    fn settle_epochs(&self, engine: &Engine, mut epochs: Epochs) -> Option<Checked> {
        // This server's own too (under no address): a table may come
        // here, have a directory changed, and go back.
        epochs.insert(String::new(), (incarnation(), engine.dir_epoch()));
        let mut st = self.cache.state.lock();
        if *st.epochs != epochs {
            drop(st);
            self.cache.drop_all(engine, epochs.clone());
            st = self.cache.state.lock();
            if *st.epochs != epochs {
                // Another search checked meanwhile and saw other values.
                return None;
            }
        }
        Some(Checked {
            generation: st.generation,
            epochs: Arc::clone(&st.epochs),
        })
    }

    /// The incarnation and directory epoch of the server at `address`
    /// (`None`: no answer, or a server that predates them); asked with
    /// `me` (this server's address, when known), it grants a lease, which
    /// is installed unless a revocation came meanwhile.
    async fn epoch_of(&self, address: &str, me: &str) -> Option<(u64, u64)> {
        let ask = pb::DirChainRequest {
            lease_for: me.to_string(),
            ..Default::default()
        };
        let (mut grpc, request) = self.client(address, ask).ok()?;
        let ticket = self.leases.held.lock().ticket();
        let sent = Instant::now();
        let reply = tokio::time::timeout(EPOCH_TIMEOUT, grpc.dir_chain(request))
            .await
            .ok()?
            .ok()?
            .into_inner();
        if reply.error.is_some() || reply.incarnation == 0 {
            return None;
        }
        let stamp = (reply.incarnation, reply.dir_epoch);
        if reply.lease_ms > 0 {
            let lease = Duration::from_millis(u64::from(reply.lease_ms));
            self.leases
                .held
                .lock()
                .install(address, stamp, sent, lease, ticket);
        }
        Some(stamp)
    }

    /// Asks the server at `address` to drop the leases it holds on this
    /// server's directory records (this server's directory epoch is
    /// `dir_epoch`): whether it answered.
    pub async fn revoke(&self, address: &str, dir_epoch: u64) -> bool {
        let ask = pb::RevokeDirsRequest {
            incarnation: incarnation(),
            dir_epoch,
        };
        let Ok((mut grpc, request)) = self.client(address, ask) else {
            return false;
        };
        matches!(
            tokio::time::timeout(CALL_TIMEOUT, grpc.revoke_dirs(request)).await,
            Ok(Ok(_))
        )
    }

    fn channel(&self, address: &str) -> Result<Channel, String> {
        if let Some(c) = self.channels.lock().get(address) {
            return Ok(c.clone());
        }
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| format!("bad peer address {address}: {e}"))?
            .connect_timeout(CALL_TIMEOUT)
            .tcp_nodelay(true)
            // A peer that stops answering (stopped, a partition that
            // resets nothing) while a call is open is noticed within 50 s
            // even if it announced no keep-alives on its search streams
            // (an older server), as the client's channels do.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            // A forwarded search its caller cancels is reset here: remember
            // such streams, so that the batches still on their way for them
            // are ignored rather than counted by h2 until it closes the
            // connection every peer call shares (`GOAWAY(ENHANCE_YOUR_CALM,
            // "too_many_internal_resets")`; see `sextant_client`'s `target`).
            .http2_max_concurrent_reset_streams(REMEMBERED_RESETS);
        if let Some(ca) = &self.ca {
            let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
            let tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name(host.trim_matches(['[', ']']));
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| format!("TLS settings for {address}: {e}"))?;
        }
        let channel = endpoint.connect_lazy();
        self.channels
            .lock()
            .insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    /// A client of the server at `address` and `msg` as a request to it,
    /// with the cluster secret.
    pub(crate) fn client<T>(
        &self,
        address: &str,
        msg: T,
    ) -> Result<(SextantClient<Channel>, tonic::Request<T>), String> {
        let channel = self.channel(address)?;
        let mut request = tonic::Request::new(msg);
        request
            .metadata_mut()
            .insert(SECRET_METADATA, self.secret.clone());
        let grpc = SextantClient::new(channel)
            .max_decoding_message_size(4 * sextant_proto::MAX_MESSAGE_BYTES);
        Ok((grpc, request))
    }

    /// Runs `req` on the server at `address` (a request forwarded for a
    /// local user: `service::Shared::handle_for`) on the stream to it
    /// ([`crate::forward`]).
    pub async fn forward(&self, address: &str, req: pb::Request) -> Result<pb::Response, String> {
        self.forwarder
            .call(self, address, req, FORWARD_TIMEOUT)
            .await
    }

    /// Runs `req` on the server at `address` by a unary call of its own (a
    /// confinement check's lookup; a forward too large for the stream).
    pub async fn call(&self, address: &str, req: pb::Request) -> Result<pb::Response, String> {
        let (mut grpc, request) = self.client(address, req)?;
        match tokio::time::timeout(FORWARD_TIMEOUT, grpc.call(request)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(format!("{address}: {}", s.message())),
            Err(_) => Err(format!("{address}: no answer within {FORWARD_TIMEOUT:?}")),
        }
    }

    /// Starts `req` on the server at `address` (a search forwarded for a
    /// caller without the secret, `SearchRequest.forward_to`; a part of a
    /// search this server gathers), asking it for keep-alives: the stream,
    /// and how long it may stay silent before its server is taken for
    /// stopped (`None`: that server announced no keep-alives, an older
    /// one; see `sextant_proto::search::silence_bound`).
    pub async fn search(
        &self,
        address: &str,
        mut req: pb::SearchRequest,
    ) -> Result<(tonic::Streaming<pb::SearchBatch>, Option<Duration>), tonic::Status> {
        req.keep_alive = true;
        let (mut grpc, request) = self
            .client(address, req)
            .map_err(tonic::Status::invalid_argument)?;
        let started = grpc.search(request);
        match tokio::time::timeout(CALL_TIMEOUT, started).await {
            Ok(r) => {
                let r = r?;
                let silent_for = sextant_proto::search::silence_bound_of(r.metadata());
                Ok((r.into_inner(), silent_for))
            }
            Err(_) => Err(tonic::Status::unavailable(format!(
                "{address} did not answer"
            ))),
        }
    }

    /// One `DirChain` call for `dir` alone: the chain, or the error the
    /// peer gave.
    async fn dir_chain(&self, address: &str, dir: Soid) -> Result<Vec<DirRecord>, Attempt> {
        let got = self.dir_chains(address, &[dir]).await?;
        if got.not_held.contains(&dir) {
            // It moved: ask its holder by a newer map (never take it for
            // gone, which would drop every entry below it).
            return Attempt::again(format!("{address}: not held there"));
        }
        Ok(got.records)
    }
}

impl ForeignCache {
    /// Drops every kept record (a new generation, valid for `epochs`) and
    /// makes `engine` forget its remembered paths, in that order under the
    /// lock: a search that checks after this returns sees neither.
    fn drop_all(&self, engine: &Engine, epochs: Epochs) {
        let mut st = self.state.lock();
        engine.forget_remembered_dirs();
        st.records.clear();
        st.children.clear();
        st.confines.clear();
        st.inside.clear();
        st.inside_count = 0;
        st.generation += 1;
        st.epochs = Arc::new(epochs);
    }

    /// The kept chains of those of `dirs` kept in generation `checked`
    /// (each record once; a chain stops at the first ancestor not kept),
    /// and the directories not kept.
    pub fn lookup(&self, checked: &Checked, dirs: &[Soid]) -> (Vec<DirRecord>, Vec<Soid>) {
        let st = self.state.lock();
        if st.generation != checked.generation {
            return (Vec::new(), dirs.to_vec());
        }
        let (mut found, mut rest) = (Vec::new(), Vec::new());
        let mut sent: HashSet<Soid> = HashSet::new();
        for &d in dirs {
            if !st.records.contains_key(&d) {
                rest.push(d);
                continue;
            }
            let mut cur = d;
            while let Some(r) = st.records.get(&cur) {
                if !sent.insert(cur) {
                    break;
                }
                found.push(r.clone());
                if cur == Soid::ROOT {
                    break;
                }
                cur = r.parent;
            }
        }
        (found, rest)
    }

    /// Keeps `records`, read from the server at `address` when it was at
    /// `stamp` (incarnation, epoch), if that is what generation `checked`
    /// is valid for.
    fn keep(&self, checked: &Checked, address: &str, stamp: (u64, u64), records: &[DirRecord]) {
        if stamp.0 == 0 || checked.epochs.get(address) != Some(&stamp) {
            return;
        }
        let mut st = self.state.lock();
        if st.generation != checked.generation {
            return;
        }
        for r in records {
            if st.records.len() >= MAX_KEPT {
                return;
            }
            st.children.insert((r.parent, r.name.clone()), r.soid);
            st.records.insert(r.soid, r.clone());
        }
    }

    /// The directory kept at `name` in `parent` in generation `checked`
    /// (`None`: none kept there — which says nothing about what is).
    pub fn child(&self, checked: &Checked, parent: Soid, name: &[u8]) -> Option<Soid> {
        let st = self.state.lock();
        if st.generation != checked.generation {
            return None;
        }
        let soid = *st.children.get(&(parent, Box::from(name)))?;
        // A record kept again with another place would leave its old
        // name behind: only a name the record still has counts.
        st.records
            .get(&soid)
            .filter(|r| r.parent == parent && &*r.name == name)
            .map(|r| r.soid)
    }

    /// The subtree of a key limited to `path`, found across the servers
    /// in generation `checked` ([`ForeignCache::keep_confine`]; `None`:
    /// not found in it).
    pub fn confine(&self, checked: &Checked, path: &str) -> Option<Arc<Confine>> {
        let st = self.state.lock();
        if st.generation != checked.generation {
            return None;
        }
        st.confines.get(path).cloned()
    }

    /// Keeps `confine`, the subtree at `path` as a check of generation
    /// `checked` found it — from records valid in that generation, this
    /// server's own directories, and what other servers answered during
    /// it — for the next checks of that generation (none once it is
    /// dropped: a directory changed anywhere).
    pub fn keep_confine(&self, checked: &Checked, path: &str, confine: Arc<Confine>) {
        let mut st = self.state.lock();
        if st.generation != checked.generation || st.confines.len() >= MAX_CONFINES {
            return;
        }
        st.confines.insert(Box::from(path), confine);
    }

    /// Whether a check of generation `checked` proved one of `dirs`
    /// (directories) to be `root` or below it ([`ForeignCache::note_inside`]).
    /// `false` says nothing: not proven yet, or another generation.
    pub fn known_inside(&self, checked: &Checked, root: Soid, dirs: &[Soid]) -> bool {
        let st = self.state.lock();
        if st.generation != checked.generation {
            return false;
        }
        st.inside
            .get(&root)
            .is_some_and(|set| dirs.iter().any(|d| set.contains(d)))
    }

    /// Notes that a check of generation `checked` proved the directory
    /// `dir` to be `root` or below it — from records valid in that
    /// generation, this server's own directories and what other servers
    /// answered during it — for the next checks of that generation (none
    /// once it is dropped: a directory changed anywhere).
    pub fn note_inside(&self, checked: &Checked, root: Soid, dir: Soid) {
        let mut st = self.state.lock();
        if st.generation != checked.generation || st.inside_count >= MAX_INSIDE {
            return;
        }
        if st.inside.entry(root).or_default().insert(dir) {
            st.inside_count += 1;
        }
    }

    /// How many records are kept (tests).
    pub fn len(&self) -> usize {
        self.state.lock().records.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one batched `DirChain` call answered.
struct Answered {
    records: Vec<DirRecord>,
    /// Answered directories whose table the peer does not hold.
    not_held: Vec<Soid>,
    /// How many of the directories asked (in order) were answered.
    answered: usize,
    /// The peer's (incarnation, directory epoch) as it answered.
    stamp: (u64, u64),
}

impl Peers {
    /// One `DirChain` call for `dirs` (at least one) at once.
    async fn dir_chains(&self, address: &str, dirs: &[Soid]) -> Result<Answered, Attempt> {
        let Some((&first, more)) = dirs.split_first() else {
            return Err(Attempt::Fatal("no directory asked".into()));
        };
        let ask = pb::DirChainRequest {
            dir: Some(soid_to_pb(first)),
            more: more.iter().map(|d| soid_to_pb(*d)).collect(),
            links: false,
            lease_for: String::new(),
        };
        let reply = self.ask_dir_chain(address, ask).await?;
        let malformed = || Attempt::Fatal(format!("{address}: a malformed directory record"));
        let mut not_held = reply
            .not_held_dirs
            .iter()
            .map(|d| soid_from_pb(Some(d)).ok())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(malformed)?;
        if reply.not_held && !not_held.contains(&first) {
            not_held.push(first);
        }
        let records = reply
            .dirs
            .into_iter()
            .map(record_from_pb)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(malformed)?;
        Ok(Answered {
            records,
            not_held,
            // 0: a server that predates batches answered `first` alone.
            answered: usize::try_from(reply.answered)
                .unwrap_or(usize::MAX)
                .clamp(1, dirs.len()),
            stamp: (reply.incarnation, reply.dir_epoch),
        })
    }
}

/// Why one attempt failed.
enum Attempt {
    /// Ask again (the table moved, the peer is restarting).
    Again(String),
    Fatal(String),
}

impl Attempt {
    fn again<T>(why: String) -> Result<T, Attempt> {
        Err(Attempt::Again(why))
    }
}

/// A directory record as `DirChain` sends it.
pub fn record_to_pb(r: &DirRecord) -> pb::DirRecord {
    pb::DirRecord {
        soid: Some(soid_to_pb(r.soid)),
        parent: Some(soid_to_pb(r.parent)),
        name: r.name.to_vec(),
        perm: u32::from(r.perm),
        uid: r.uid,
        gid: r.gid,
    }
}

/// The reply to `DirChain` with `links` for the inode `soid`: where it
/// has links (every link's directory), with the chains of those
/// directories this server holds; `not_held` when its table is not held
/// here.
pub fn links_reply(engine: &Engine, soid: Soid) -> pb::DirChainReply {
    let mut reply = pb::DirChainReply {
        dir_epoch: engine.dir_epoch(),
        incarnation: incarnation(),
        ..Default::default()
    };
    let (is_dir, dirs) = match engine.links_of(soid) {
        Ok(Some(links)) => links,
        Ok(None) => return reply,
        Err(FsError::WrongServer { .. } | FsError::NeedsTable { .. } | FsError::CrossServer) => {
            reply.not_held = true;
            return reply;
        }
        Err(e) => {
            reply.error = Some(sextant_proto::error_to_pb(e));
            return reply;
        }
    };
    // The chains too (those held here; the asker reads the rest): one
    // call places a file whose directories are held with it.
    if let Ok(chains) = engine.dir_chains(&dirs, sextant_proto::MAX_MESSAGE_BYTES / 2) {
        reply.dirs = chains.records.iter().map(record_to_pb).collect();
    }
    reply.links_of = Some(pb::InodeLinks {
        is_dir,
        dirs: dirs.into_iter().map(soid_to_pb).collect(),
    });
    reply
}

/// Where an inode another server holds has links (`DirChain` with
/// `links`): what a confinement check places it by.
#[derive(Debug)]
pub struct Links {
    pub is_dir: bool,
    /// The directories of its links (a directory's: its parent).
    pub dirs: Vec<Soid>,
    /// Chains of those directories, as far as the holder holds them.
    pub records: Vec<DirRecord>,
}

impl Peers {
    /// One `DirChain` call to `address`: its reply, or why not (no answer
    /// in time, a transport error: again; an error the server gave:
    /// fatal).
    async fn ask_dir_chain(
        &self,
        address: &str,
        ask: pb::DirChainRequest,
    ) -> Result<pb::DirChainReply, Attempt> {
        let (mut grpc, request) = self.client(address, ask).map_err(Attempt::Fatal)?;
        let reply = tokio::time::timeout(CALL_TIMEOUT, grpc.dir_chain(request))
            .await
            .map_err(|_| Attempt::Again(format!("{address}: no answer")))?
            .map_err(|s| Attempt::Again(format!("{address}: {}", s.message())))?
            .into_inner();
        if let Some(e) = reply.error {
            let e = sextant_proto::error_from_pb(&e);
            return Err(Attempt::Fatal(format!("{address}: {e}")));
        }
        Ok(reply)
    }

    /// One `DirChain` call with `links` for `soid` (`None`: it is gone).
    async fn inode_links(&self, address: &str, soid: Soid) -> Result<Option<Links>, Attempt> {
        let ask = pb::DirChainRequest {
            dir: Some(soid_to_pb(soid)),
            more: Vec::new(),
            links: true,
            lease_for: String::new(),
        };
        let reply = self.ask_dir_chain(address, ask).await?;
        if reply.not_held {
            return Attempt::again(format!("{address}: not held there"));
        }
        let malformed = || Attempt::Fatal(format!("{address}: a malformed links reply"));
        let records = reply
            .dirs
            .into_iter()
            .map(record_from_pb)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(malformed)?;
        let Some(links) = reply.links_of else {
            // Gone; or a server that predates `links` answered `soid` as
            // a directory: its record, if it is one.
            return Ok(records
                .iter()
                .find(|r| r.soid == soid)
                .map(|r| r.parent)
                .map(|parent| Links {
                    is_dir: true,
                    dirs: vec![parent],
                    records,
                }));
        };
        let dirs = links
            .dirs
            .iter()
            .map(|d| soid_from_pb(Some(d)).ok())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(malformed)?;
        Ok(Some(Links {
            is_dir: links.is_dir,
            dirs,
            records,
        }))
    }
}

fn record_from_pb(r: pb::DirRecord) -> Option<DirRecord> {
    Some(DirRecord {
        soid: soid_from_pb(r.soid.as_ref()).ok()?,
        parent: soid_from_pb(r.parent.as_ref()).ok()?,
        name: r.name.into(),
        perm: u16::try_from(r.perm).ok().filter(|p| *p <= 0o7777)?,
        uid: r.uid,
        gid: r.gid,
    })
}

/// [`ForeignDirs`] over the peers: the route map names who holds a
/// directory. See the module docs.
pub struct PeerDirs {
    pub peers: Arc<Peers>,
    pub placement: Arc<dyn Placement>,
    pub runtime: tokio::runtime::Handle,
    /// The records kept across searches this search may use and fill
    /// (`None`: none).
    pub checked: Option<Checked>,
    /// Why a read gave up (the engine's search sees only `EIO`): the
    /// server ends the search with this reason ([`PeerDirs::gave_up`]).
    why: parking_lot::Mutex<Option<String>>,
}

impl ForeignDirs for PeerDirs {
    fn chain(&self, dir: Soid) -> Result<Vec<DirRecord>, FsError> {
        self.at_holder(dir, "a directory", |address| async move {
            self.peers.dir_chain(&address, dir).await
        })
    }

    /// Every holder's directories in one call per holder (and [`BATCH`]),
    /// all at once; a directory not held where the map said is asked
    /// again of its holder by a newer map, as [`PeerDirs::chain`] does.
    fn chains(&self, dirs: &[Soid]) -> Result<Vec<DirRecord>, FsError> {
        let deadline = Instant::now() + READ_FOR;
        let (mut records, mut pending) = match &self.checked {
            Some(c) => self.peers.cache.lookup(c, dirs),
            None => (Vec::new(), dirs.to_vec()),
        };
        while !pending.is_empty() {
            let mut by_holder: HashMap<String, Vec<Soid>> = HashMap::new();
            let mut retry = Vec::new();
            let mut last = String::new();
            let map = self.route_map();
            for d in pending.drain(..) {
                match Self::holder(map.as_ref(), d) {
                    Some(address) => by_holder.entry(address).or_default().push(d),
                    None => {
                        last = "no server holds it in the route map".into();
                        retry.push(d);
                    }
                }
            }
            let calls: Vec<(String, Vec<Soid>)> = by_holder
                .into_iter()
                .flat_map(|(a, ds)| {
                    let chunks: Vec<Vec<Soid>> = ds.chunks(BATCH).map(<[Soid]>::to_vec).collect();
                    chunks.into_iter().map(move |c| (a.clone(), c))
                })
                .collect();
            let peers = Arc::clone(&self.peers);
            let answers = self.runtime.block_on(async move {
                let mut set = tokio::task::JoinSet::new();
                for (address, ds) in calls {
                    let peers = Arc::clone(&peers);
                    set.spawn(async move {
                        let got = peers.dir_chains(&address, &ds).await;
                        (address, ds, got)
                    });
                }
                let mut answers = Vec::new();
                while let Some(done) = set.join_next().await {
                    answers.push(done);
                }
                answers
            });
            for done in answers {
                let Ok((address, ds, got)) = done else {
                    tracing::warn!("a search's directory read did not finish");
                    return Err(
                        self.give_up("a directory read of another server did not finish".into())
                    );
                };
                match got {
                    Ok(a) => {
                        if let Some(c) = &self.checked {
                            self.peers.cache.keep(c, &address, a.stamp, &a.records);
                        }
                        records.extend(a.records);
                        if !a.not_held.is_empty() {
                            last = "not held there".into();
                            retry.extend(a.not_held);
                        }
                        // Past what fitted in the reply: asked again now.
                        pending.extend_from_slice(ds.get(a.answered..).unwrap_or_default());
                    }
                    Err(Attempt::Fatal(why)) => {
                        tracing::warn!(%why, "a search cannot read directories of another server");
                        return Err(self
                            .give_up(format!("cannot read directories of another server: {why}")));
                    }
                    Err(Attempt::Again(why)) => {
                        last = why;
                        retry.extend(ds);
                    }
                }
            }
            if retry.is_empty() {
                continue;
            }
            if Instant::now() >= deadline {
                tracing::warn!(why = %last, dirs = retry.len(), "a search gave up reading directories of another server");
                return Err(self.give_up(Self::kept_moving(retry.len(), &last)));
            }
            if pending.is_empty() {
                std::thread::sleep(RETRY_PAUSE);
            }
            pending.extend(retry);
        }
        Ok(records)
    }
}

impl PeerDirs {
    /// Where the inode `soid` has links, read from its holder (`None`:
    /// gone); asked again of a new holder while its table moves, as
    /// [`PeerDirs::chain`] does.
    pub fn links(&self, soid: Soid) -> Result<Option<Links>, FsError> {
        self.at_holder(soid, "an inode's links", |address| async move {
            self.peers.inode_links(&address, soid).await
        })
    }

    /// `call` on the server holding `soid` by the current route map,
    /// asked again (a newer map, a pause) while it answers that it is not
    /// the holder or cannot answer now, for up to [`READ_FOR`]; `what` is
    /// read, for the log.
    fn at_holder<T, F, Fut>(&self, soid: Soid, what: &str, call: F) -> Result<T, FsError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, Attempt>>,
    {
        let deadline = Instant::now() + READ_FOR;
        loop {
            let last = match Self::holder(self.route_map().as_ref(), soid) {
                None => "no server holds it in the route map".to_string(),
                Some(address) => match self.runtime.block_on(call(address)) {
                    Ok(got) => return Ok(got),
                    Err(Attempt::Fatal(why)) => {
                        tracing::warn!(%why, "cannot read {what} on another server");
                        return Err(
                            self.give_up(format!("cannot read {what} on another server: {why}"))
                        );
                    }
                    Err(Attempt::Again(why)) => why,
                },
            };
            if Instant::now() >= deadline {
                tracing::warn!(why = %last, ?soid, "gave up reading {what} on another server");
                return Err(self.give_up(Self::kept_moving(1, &last)));
            }
            std::thread::sleep(RETRY_PAUSE);
        }
    }

    /// A [`PeerDirs`] with nothing kept and no failure yet.
    pub fn new(
        peers: Arc<Peers>,
        placement: Arc<dyn Placement>,
        runtime: tokio::runtime::Handle,
        checked: Option<Checked>,
    ) -> PeerDirs {
        PeerDirs {
            peers,
            placement,
            runtime,
            checked,
            why: parking_lot::Mutex::new(None),
        }
    }

    /// Why a read of this search gave up (the first reason), if one did:
    /// what the search's error says instead of a bare EIO.
    pub fn gave_up(&self) -> Option<String> {
        self.why.lock().clone()
    }

    /// Notes `why` (the first reason is kept) and returns the engine's
    /// error for it.
    fn give_up(&self, why: String) -> FsError {
        self.why.lock().get_or_insert(why);
        FsError::Io
    }

    /// The reason of a read given up after [`READ_FOR`]; `last`: why its
    /// last attempt failed.
    fn kept_moving(dirs: usize, last: &str) -> String {
        format!(
            "{dirs} directories of another server could not be read for {} s: their tables \
             kept moving or their holder did not answer (last: {last})",
            READ_FOR.as_secs()
        )
    }

    /// The current route map (built from the placement's: once per
    /// batch, not per directory — it costs as much as the batch's reads).
    fn route_map(&self) -> Option<RouteTable> {
        RouteTable::from_pb(&self.placement.map()).ok()
    }

    /// The address of `dir`'s holder by `map`.
    fn holder(map: Option<&RouteTable>, dir: Soid) -> Option<String> {
        map.and_then(|t| t.route(dir).map(|r| r.address.clone()))
            .filter(|a| !a.is_empty())
    }
}

/// The search of a server that has no peers (one server): nothing is
/// held elsewhere.
pub struct NoPeers;

impl ForeignDirs for NoPeers {
    fn chain(&self, _: Soid) -> Result<Vec<DirRecord>, FsError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_engine::engine;
    use sextant_types::Credentials;

    const B: &str = "127.0.0.1:2";

    /// `b`'s lease live, granted at `stamp`.
    fn lease(peers: &Peers, stamp: (u64, u64)) {
        let mut held = peers.leases.held.lock();
        let ticket = held.ticket();
        assert!(held.install(B, stamp, Instant::now(), crate::dir_leases::LEASE, ticket));
    }

    /// The subtree a key's path names, kept across requests
    /// (`ForeignCache::keep_confine`), is read only in the generation it
    /// was found in: another server's epoch moved (a directory renamed
    /// there), this server's own, or a lease revoked or run out, and the
    /// next check finds none kept — it resolves the path again. Fails
    /// when a kept subtree outlives its generation.
    #[test]
    fn a_kept_subtree_is_dropped_when_a_directory_changes_anywhere() {
        let engine = engine();
        let peers = Peers::new("secret", None, 0).unwrap();
        let servers = Servers {
            others: vec![B.to_string()],
            me: "127.0.0.1:1".into(),
        };
        let sub = Arc::new(Confine {
            root: Soid::from_u128(0x5b),
            steps: vec![(Soid::ROOT, Box::from(&b"sub"[..]))],
        });
        // Nothing checked yet: a check must ask.
        assert!(peers.unchanged(&engine, &servers).is_none());
        lease(&peers, (7, 1));
        let (epochs, ask) = peers.live_epochs(&servers);
        assert!(ask.is_empty());
        let first = peers.settle_epochs(&engine, epochs).unwrap();
        peers.cache.keep_confine(&first, "/sub", Arc::clone(&sub));
        // The next check, nothing changed: the same generation, kept.
        let next = peers.unchanged(&engine, &servers).unwrap();
        assert_eq!(next.generation, first.generation);
        assert_eq!(peers.cache.confine(&next, "/sub"), Some(Arc::clone(&sub)));
        assert_eq!(peers.cache.confine(&next, "/other"), None);

        // b changed a directory: it revoked the lease; the next check
        // asks b, whose epoch moved.
        peers.leases.held.lock().revoke_all();
        assert!(peers.unchanged(&engine, &servers).is_none());
        let (_, ask) = peers.live_epochs(&servers);
        assert_eq!(ask, [B.to_string()]);
        lease(&peers, (7, 2));
        let (epochs, _) = peers.live_epochs(&servers);
        let moved = peers.settle_epochs(&engine, epochs).unwrap();
        assert_ne!(moved.generation, first.generation);
        assert_eq!(peers.cache.confine(&moved, "/sub"), None);
        // A check of the old generation keeps nothing into the new one.
        peers.cache.keep_confine(&first, "/sub", Arc::clone(&sub));
        assert_eq!(peers.cache.confine(&moved, "/sub"), None);
        peers.cache.keep_confine(&moved, "/sub", Arc::clone(&sub));
        assert!(peers.cache.confine(&moved, "/sub").is_some());

        // This server renamed a directory of its own: its epoch moved.
        let r = Credentials::root();
        let _ = engine.mkdir(&r, Soid::ROOT, b"d", 0o755).unwrap();
        assert!(peers.unchanged(&engine, &servers).is_some());
        let _ = engine
            .rename(&r, Soid::ROOT, b"d", Soid::ROOT, b"e", Default::default())
            .unwrap();
        assert!(peers.unchanged(&engine, &servers).is_none());
        let (epochs, _) = peers.live_epochs(&servers);
        let renamed = peers.settle_epochs(&engine, epochs).unwrap();
        assert_ne!(renamed.generation, moved.generation);
        assert_eq!(peers.cache.confine(&renamed, "/sub"), None);

        // A lease that runs out: the check must ask again (never taken
        // as unchanged).
        peers.cache.keep_confine(&renamed, "/sub", sub);
        {
            let mut held = peers.leases.held.lock();
            let ticket = held.ticket();
            let long_ago = Instant::now() - Duration::from_secs(10);
            held.install(B, (7, 2), long_ago, crate::dir_leases::LEASE, ticket);
        }
        assert!(peers.unchanged(&engine, &servers).is_none());
        assert!(!peers.live_epochs(&servers).1.is_empty());
    }
    /// The directories proven inside a key's subtree
    /// (`ForeignCache::note_inside`) are known only in the generation
    /// they were proven in: another server's epoch moved (a directory
    /// renamed there), this server's own, or a lease ran out, and the
    /// next check knows none — it walks again. A check of an old
    /// generation notes nothing into the new one. Fails when the memo
    /// outlives its generation.
    #[test]
    fn directories_known_inside_are_forgotten_when_a_directory_changes_anywhere() {
        let engine = engine();
        let peers = Peers::new("secret", None, 0).unwrap();
        let servers = Servers {
            others: vec![B.to_string()],
            me: "127.0.0.1:1".into(),
        };
        let root = Soid::from_u128(0x5b);
        let (d, e, f) = (
            Soid::from_u128(0x60),
            Soid::from_u128(0x61),
            Soid::from_u128(0x62),
        );
        let generation = |peers: &Peers| {
            let (epochs, ask) = peers.live_epochs(&servers);
            assert!(ask.is_empty());
            peers.settle_epochs(&engine, epochs).unwrap()
        };
        lease(&peers, (7, 1));
        let first = generation(&peers);
        peers.cache.note_inside(&first, root, d);
        let next = peers.unchanged(&engine, &servers).unwrap();
        assert!(peers.cache.known_inside(&next, root, &[d]));
        assert!(peers.cache.known_inside(&next, root, &[f, d]));
        // Per subtree: not known under another root, nor another dir.
        assert!(!peers.cache.known_inside(&next, d, &[d]));
        assert!(!peers.cache.known_inside(&next, root, &[e]));

        // b changed a directory: the lease revoked, b's epoch moved.
        peers.leases.held.lock().revoke_all();
        assert!(peers.unchanged(&engine, &servers).is_none());
        lease(&peers, (7, 2));
        let moved = generation(&peers);
        assert_ne!(moved.generation, first.generation);
        assert!(!peers.cache.known_inside(&moved, root, &[d]));
        // An old generation's check notes nothing into the new one.
        peers.cache.note_inside(&first, root, e);
        assert!(!peers.cache.known_inside(&moved, root, &[e]));
        peers.cache.note_inside(&moved, root, e);
        assert!(peers.cache.known_inside(&moved, root, &[e]));

        // This server renamed a directory of its own: its epoch moved.
        let r = Credentials::root();
        let _ = engine.mkdir(&r, Soid::ROOT, b"d", 0o755).unwrap();
        assert!(peers.unchanged(&engine, &servers).is_some());
        let _ = engine
            .rename(&r, Soid::ROOT, b"d", Soid::ROOT, b"e", Default::default())
            .unwrap();
        assert!(peers.unchanged(&engine, &servers).is_none());
        let renamed = generation(&peers);
        assert_ne!(renamed.generation, moved.generation);
        assert!(!peers.cache.known_inside(&renamed, root, &[e]));

        // A lease that runs out: never taken as unchanged (the check asks
        // b again), and b answered at a moved epoch: forgotten.
        peers.cache.note_inside(&renamed, root, f);
        {
            let mut held = peers.leases.held.lock();
            let ticket = held.ticket();
            let long_ago = Instant::now() - Duration::from_secs(10);
            held.install(B, (7, 2), long_ago, crate::dir_leases::LEASE, ticket);
        }
        assert!(peers.unchanged(&engine, &servers).is_none());
        assert!(!peers.live_epochs(&servers).1.is_empty());
        lease(&peers, (7, 3));
        let asked = generation(&peers);
        assert_ne!(asked.generation, renamed.generation);
        assert!(!peers.cache.known_inside(&asked, root, &[f]));
    }

    /// A grantor that answers epoch checks alone (`DirChain` with
    /// `lease_for`), each after `delay`, at epoch 1 of incarnation 9,
    /// granting `lease_ms`; it counts them.
    #[derive(Clone)]
    struct Grantor {
        asks: Arc<std::sync::atomic::AtomicUsize>,
        delay: Duration,
        lease_ms: u32,
    }

    type Boxed<T> =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send>>;

    #[tonic::async_trait]
    impl pb::sextant_server::Sextant for Grantor {
        type SessionStream = Boxed<pb::Response>;
        type SearchStream = Boxed<pb::SearchBatch>;
        type WatchStream = Boxed<pb::WatchBatch>;

        async fn dir_chain(
            &self,
            request: tonic::Request<pb::DirChainRequest>,
        ) -> Result<tonic::Response<pb::DirChainReply>, tonic::Status> {
            assert!(!request.get_ref().lease_for.is_empty());
            self.asks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            Ok(tonic::Response::new(pb::DirChainReply {
                dir_epoch: 1,
                incarnation: 9,
                lease_ms: self.lease_ms,
                ..Default::default()
            }))
        }
        async fn session(
            &self,
            _: tonic::Request<tonic::Streaming<pb::Request>>,
        ) -> Result<tonic::Response<Self::SessionStream>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn call(
            &self,
            _: tonic::Request<pb::Request>,
        ) -> Result<tonic::Response<pb::Response>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn search(
            &self,
            _: tonic::Request<pb::SearchRequest>,
        ) -> Result<tonic::Response<Self::SearchStream>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn recover(
            &self,
            _: tonic::Request<pb::RecoverRequest>,
        ) -> Result<tonic::Response<pb::RecoverReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn watch(
            &self,
            _: tonic::Request<pb::WatchRequest>,
        ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn map(
            &self,
            _: tonic::Request<pb::MapRequest>,
        ) -> Result<tonic::Response<pb::RouteMap>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn revoke_dirs(
            &self,
            _: tonic::Request<pb::RevokeDirsRequest>,
        ) -> Result<tonic::Response<pb::RevokeDirsReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn keys(
            &self,
            _: tonic::Request<pb::KeysRequest>,
        ) -> Result<tonic::Response<pb::KeysReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
        async fn ticket(
            &self,
            _: tonic::Request<pb::TicketRequest>,
        ) -> Result<tonic::Response<pb::TicketReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("grantor"))
        }
    }

    impl Grantor {
        fn new(delay: Duration, lease_ms: u32) -> Grantor {
            Grantor {
                asks: Arc::default(),
                delay,
                lease_ms,
            }
        }

        fn asks(&self) -> usize {
            self.asks.load(std::sync::atomic::Ordering::SeqCst)
        }

        /// Serves on a free port of this runtime: its address.
        async fn serve(&self) -> String {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap().to_string();
            let service = pb::sextant_server::SextantServer::new(self.clone());
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
            );
            address
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Polls `f` every 10 ms for up to `within`: whether it came true.
    async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if f() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        f()
    }

    /// A path-limited key's checks in continuous use (one every 20 ms,
    /// for more than two leases): after the first check's call, every
    /// check finds the other server's lease live — it is renewed in the
    /// background before it lapses — and none needs a call on its own
    /// path. Fails without the renewal: the lease lapses `LEASE − MARGIN`
    /// after that call, and every check then needs one.
    #[test]
    fn a_lease_in_continuous_use_never_lapses() {
        let rt = runtime();
        let grantor = Grantor::new(Duration::ZERO, 2000);
        let b = rt.block_on(grantor.serve());
        let engine = engine();
        let peers = Arc::new(Peers::new("secret", None, 0).unwrap());
        let servers = Arc::new(Servers {
            others: vec![b.clone()],
            me: "127.0.0.1:1".into(),
        });
        // The first check: no lease yet, so it asks (on a blocking
        // thread, as `Across::new` does).
        let first = {
            let (peers, servers, engine) =
                (Arc::clone(&peers), Arc::clone(&servers), engine.clone());
            let handle = rt.handle().clone();
            rt.block_on(rt.spawn_blocking(move || peers.check_with(&engine, &servers, &handle)))
                .unwrap()
                .expect("the first check asked b")
        };
        assert_eq!(grantor.asks(), 1);
        let (misses, checks) = rt.block_on(async {
            let until = Instant::now() + 2 * crate::dir_leases::LEASE + Duration::from_millis(500);
            let (mut misses, mut checks) = (0, 0);
            while Instant::now() < until {
                match peers.check_kept(&engine, &servers) {
                    Some(c) => assert_eq!(c.generation, first.generation),
                    None => misses += 1,
                }
                checks += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (misses, checks)
        });
        // Without the renewal 109 of 180 miss; a few are allowed for a
        // runtime starved for most of a half-lease on a loaded machine.
        assert!(
            misses <= checks / 20,
            "{misses} of {checks} checks found no lease live"
        );
        // Renewed about once per half lease (~5 here), not at every check
        // (a loaded machine may delay one; without the renewal: 1).
        let asks = grantor.asks();
        assert!((2..=12).contains(&asks), "{asks} epoch checks");
    }

    /// A renewal is an ordinary epoch check: a revocation received while
    /// it is in flight makes its answer install nothing (the lease stays
    /// dropped, the next check needs a call), and a grantor that grants
    /// no lease is not asked at every check.
    #[test]
    fn a_revocation_fences_a_renewal_in_flight() {
        let rt = runtime();
        let grantor = Grantor::new(Duration::from_millis(300), 2000);
        let b = rt.block_on(grantor.serve());
        let engine = engine();
        let peers = Arc::new(Peers::new("secret", None, 0).unwrap());
        let servers = Arc::new(Servers {
            others: vec![b.clone()],
            me: "127.0.0.1:1".into(),
        });
        // A lease with less than half left, at the stamp the grantor
        // answers: the check passes and starts a renewal.
        {
            let mut held = peers.leases.held.lock();
            let ticket = held.ticket();
            let sent = Instant::now() - Duration::from_millis(1200);
            assert!(held.install(&b, (9, 1), sent, crate::dir_leases::LEASE, ticket));
        }
        let (epochs, _) = peers.live_epochs(&servers);
        peers.settle_epochs(&engine, epochs).unwrap();
        rt.block_on(async {
            assert!(peers.check_kept(&engine, &servers).is_some());
            assert!(eventually(Duration::from_secs(2), || grantor.asks() == 1).await);
            // b revokes while the renewal waits for its answer.
            peers.leases.held.lock().revoke_all();
            assert!(peers.check_kept(&engine, &servers).is_none());
            tokio::time::sleep(Duration::from_millis(600)).await;
            assert_eq!(peers.leases.held.lock().live(&b, Instant::now()), None);
            // The check after it starts a renewal of its own, which installs.
            assert!(peers.check_kept(&engine, &servers).is_none());
            assert!(
                eventually(Duration::from_secs(2), || {
                    peers.leases.held.lock().live(&b, Instant::now()).is_some()
                })
                .await
            );
            assert!(peers.check_kept(&engine, &servers).is_some());
        });

        // A grantor that answers without a lease: nothing installed, and
        // asked at most once per `RENEW_GAP` however often checks run.
        let stingy = Grantor::new(Duration::ZERO, 0);
        let c = rt.block_on(stingy.serve());
        let peers = Arc::new(Peers::new("secret", None, 0).unwrap());
        let servers = Arc::new(Servers {
            others: vec![c.clone()],
            me: "127.0.0.1:1".into(),
        });
        rt.block_on(async {
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                assert!(peers.check_kept(&engine, &servers).is_none());
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        assert!(peers.leases.held.lock().live(&c, Instant::now()).is_none());
        let asks = stingy.asks();
        assert!((1..=6).contains(&asks), "{asks} epoch checks in 500 ms");
    }
}
