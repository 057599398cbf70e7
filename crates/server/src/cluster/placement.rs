//! [`ClusterPlacement`]: the [`Placement`] of a server of a cluster, over
//! its live view of the delegation map.
//!
//! A SOID is served here when the map names this server as its table's
//! owner *and* the shell serves the table now (loaded, granted, not
//! dropping: [`Coordination::serving`]). Either alone is not enough: the
//! map may name this server before the ADD has loaded the table, and a
//! table being dropped is still this server's in the map until the
//! handover commits. Everything else gets WRONG_SERVER with the owner the
//! map names (if any), so the client retries there.
//!
//! Invariant: the route map handed to clients is built from one
//! [`ClusterState`] (one etcd revision), never from pieces of two.

use crate::placement::Placement;
use sextant_cluster::ids::TableId;
use sextant_coordinator::{ClusterState, Coordination, EtcdCluster};
use sextant_proto::pb;
use sextant_proto::route::{route_to_pb, Route, RouteTable};
use sextant_proto::soid_to_pb;
use sextant_types::Soid;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How long [`Placement::borrow`] waits for its tables to come here
/// (behind other borrows of the same tables, in the coordinator's queue).
const BORROW_WAIT: Duration = Duration::from_secs(30);

/// A granted borrow is RETURNed once its tables have gone this long
/// without an operation here: the operations of a burst (an `mv` of many
/// files, a `cp` across servers) share one BORROW.
pub const RETURN_AFTER: Duration = Duration::from_secs(2);

/// [`RETURN_AFTER`], or what `SEXTANT_BENCH_RETURN_AFTER` says (a
/// benchmark's knob, like `SEXTANT_BENCH_SYNC_FLOOR`: `0ms` measures
/// BORROW+RETURN pairs without the idle wait; not a setting, so nobody
/// finds it in `--help`). Read once; a value that does not parse is
/// ignored with a warning.
fn return_after() -> Duration {
    static AFTER: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *AFTER.get_or_init(|| {
        let Ok(v) = std::env::var("SEXTANT_BENCH_RETURN_AFTER") else {
            return RETURN_AFTER;
        };
        match crate::config::parse_duration(&v) {
            Ok(d) => {
                tracing::warn!(after = ?d, "SEXTANT_BENCH_RETURN_AFTER: borrows are RETURNed after this idle time (a benchmark's setting)");
                d
            }
            Err(e) => {
                tracing::warn!(value = %v, error = %e, "SEXTANT_BENCH_RETURN_AFTER ignored");
                RETURN_AFTER
            }
        }
    })
}

/// A granted borrow in constant use is RETURNed after this long all the
/// same (the balancer's placement wins over one busy borrower).
pub const RETURN_AT_MOST: Duration = Duration::from_secs(30);

/// A granted borrow another server waits for is RETURNed once an
/// operation here used it, or after this long.
const YIELD_AFTER: Duration = Duration::from_millis(500);

/// How often a waiting BORROW looks again without being woken (it is
/// woken by the map and by tables beginning to serve here).
const BORROW_POLL: Duration = Duration::from_millis(50);

/// How often the returner looks at this server's borrow.
const RETURN_TICK: Duration = Duration::from_millis(50);

/// Which SOIDs a cluster server serves.
pub struct ClusterPlacement {
    coordination: Arc<dyn Coordination>,
    /// Where borrows are published (`None`: this server cannot borrow).
    node: Option<Arc<EtcdCluster>>,
    /// This server's borrow (at most one: its operations' tables, merged).
    borrow: Arc<tokio::sync::Mutex<Borrow>>,
    /// Operations waiting in [`Placement::borrow`].
    waiting: Arc<std::sync::atomic::AtomicUsize>,
    /// The returner task, started with the first borrow.
    returner: std::sync::OnceLock<tokio::task::JoinHandle<()>>,
    /// Wakes the returner before its tick: an operation that borrowed
    /// ended (see [`Placement::borrowed_op_done`]).
    returner_wake: Arc<tokio::sync::Notify>,
    /// The engine, whose per-table operation counts say whether a
    /// borrow is still in use.
    engine: Option<sextant_engine::Engine>,
    /// The route map last handed out and the state it was built from:
    /// built again only when the state changed (a map has a route per
    /// table; every command of a client used to have it built anew).
    map_cache: parking_lot::Mutex<Option<MapCache>>,
}

/// The route maps handed out for one published cluster state: route per
/// table, and merged ([`Placement::merged_map`]).
struct MapCache {
    built_from: Arc<ClusterState>,
    whole: pb::RouteMap,
    merged: pb::RouteMap,
}

/// This server's borrow, as it published it in `borrow/<name>`.
#[derive(Debug, Default)]
struct Borrow {
    /// The tables (empty: no borrow).
    tables: BTreeSet<TableId>,
    /// When the tables last changed (a new borrow, or one grown).
    since: Option<tokio::time::Instant>,
    /// When every table was first seen served here.
    granted: Option<tokio::time::Instant>,
    /// The tables' operation count when granted, and when it last changed.
    ops_at_grant: u64,
    ops_seen: (u64, Option<tokio::time::Instant>),
}

impl Drop for ClusterPlacement {
    fn drop(&mut self) {
        if let Some(t) = self.returner.get() {
            t.abort();
        }
    }
}

impl std::fmt::Debug for ClusterPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPlacement")
            .field("name", &self.coordination.name())
            .finish()
    }
}

impl ClusterPlacement {
    /// `take` of the maps built for the current published cluster state
    /// (built now if the state changed since they were).
    fn cached_map(&self, take: impl FnOnce(&MapCache) -> pb::RouteMap) -> pb::RouteMap {
        let state = self.coordination.map().borrow().clone();
        let mut cache = self.map_cache.lock();
        match &*cache {
            Some(c) if Arc::ptr_eq(&c.built_from, &state) => take(c),
            _ => {
                let table = route_table(&state);
                let c = MapCache {
                    whole: table.to_pb(),
                    merged: table.merged().to_pb(),
                    built_from: state,
                };
                let map = take(&c);
                *cache = Some(c);
                map
            }
        }
    }

    pub fn new(coordination: Arc<dyn Coordination>) -> ClusterPlacement {
        ClusterPlacement {
            coordination,
            node: None,
            borrow: Arc::default(),
            waiting: Arc::default(),
            returner: std::sync::OnceLock::new(),
            returner_wake: Arc::default(),
            engine: None,
            map_cache: parking_lot::Mutex::default(),
        }
    }

    /// Keeps a borrow while `engine` uses its tables (see
    /// [`RETURN_AFTER`]).
    pub fn with_engine(mut self, engine: sextant_engine::Engine) -> ClusterPlacement {
        self.engine = Some(engine);
        self
    }

    /// Lets the server borrow tables it needs (see [`Placement::borrow`]).
    pub fn with_etcd(mut self, node: Arc<EtcdCluster>) -> ClusterPlacement {
        self.node = Some(node);
        self
    }

    /// Starts the returner (once): it decides whether this server's
    /// borrow ends ([`return_due`]) and, if so, RETURNs it — when the map
    /// changes (another server's borrow wants a table), when an operation
    /// that borrowed ends, and every [`RETURN_TICK`] (the idle rules).
    fn start_returner(&self, node: &Arc<EtcdCluster>) {
        let (coordination, borrow, node, waiting, wake) = (
            Arc::clone(&self.coordination),
            Arc::clone(&self.borrow),
            Arc::clone(node),
            Arc::clone(&self.waiting),
            Arc::clone(&self.returner_wake),
        );
        let engine = self.engine.clone();
        self.returner.get_or_init(|| {
            tokio::spawn(async move {
                let mut map = coordination.map();
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(RETURN_TICK) => {}
                        _ = wake.notified() => {}
                        r = map.changed() => {
                            if r.is_err() {
                                // The cluster is shutting down: ticks only.
                                tokio::time::sleep(RETURN_TICK).await;
                            }
                        }
                    }
                    let mut b = borrow.lock().await;
                    if b.tables.is_empty() {
                        continue;
                    }
                    let ops = borrowed_ops(engine.as_ref(), &b.tables);
                    let state = coordination.map().borrow().clone();
                    let here = b
                        .tables
                        .iter()
                        .all(|t| coordination.serving(*t).is_some());
                    let waited_for = state.borrows.iter().any(|(server, (tables, _))| {
                        server != coordination.name() && !tables.is_disjoint(&b.tables)
                    });
                    let now = tokio::time::Instant::now();
                    let waiting = waiting.load(std::sync::atomic::Ordering::SeqCst);
                    if !return_due(&mut b, waiting, here, ops, waited_for, now) {
                        continue;
                    }
                    crate::fault::step("borrow-return");
                    tracing::info!(tables = ?b.tables, "RETURN: borrowed tables are free to go home");
                    metrics::counter!("sextant_table_returns_total").increment(1);
                    match node.end_borrow().await {
                        Ok(()) => *b = Borrow::default(),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot RETURN borrowed tables; again in a second");
                            drop(b);
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            })
        });
    }
}

/// The operation count of `tables` here (0 without an engine).
fn borrowed_ops(engine: Option<&sextant_engine::Engine>, tables: &BTreeSet<TableId>) -> u64 {
    engine.map_or(0, |e| {
        let ops = e.table_ops();
        tables
            .iter()
            .map(|t| {
                let id = u64::from(t.0);
                ops.iter().find(|(x, _)| *x == id).map_or(0, |(_, n)| *n)
            })
            .sum()
    })
}

/// Whether a borrow ends now (pure: the returner's rule). `waiting`:
/// operations here waiting for tables; `here`: every table is served
/// here; `ops`: the tables' operation count; `waited_for`: another
/// server's borrow names one of them.
fn return_due(
    b: &mut Borrow,
    waiting: usize,
    here: bool,
    ops: u64,
    waited_for: bool,
    now: tokio::time::Instant,
) -> bool {
    if ops != b.ops_seen.0 || b.ops_seen.1.is_none() {
        b.ops_seen = (ops, Some(now));
    }
    let Some(granted) = b.granted.filter(|_| here) else {
        b.granted = None;
        if here {
            b.granted = Some(now);
            b.ops_at_grant = ops;
            return false;
        }
        // Not granted (yet): given up when no operation waits for it.
        return waiting == 0 && b.since.is_some_and(|s| now - s >= Duration::from_secs(1));
    };
    let idle_since = b.ops_seen.1.unwrap_or(granted).max(granted);
    let used = ops != b.ops_at_grant;
    (waiting == 0 && now - idle_since >= return_after())
        || now - granted >= RETURN_AT_MOST
        || (waited_for && (used || now - granted >= YIELD_AFTER))
}

/// The client's route map of one view of the cluster: every table whose
/// owner is a live member (a table without one has no route: a client
/// asking for it waits and asks again).
pub fn route_table(state: &ClusterState) -> RouteTable {
    let routes: Vec<Route> = state
        .routes()
        .into_iter()
        .filter_map(|r| {
            let owner = r.owner?;
            Some(Route {
                range: r.range,
                table: u64::from(r.table.0),
                server: owner.server,
                address: r.address?,
                epoch: owner.epoch.0,
            })
        })
        .collect();
    let revision = u64::try_from(state.revision).unwrap_or(0);
    // Ranges come from etcd's `table/<id>` keys; overlapping ones would be
    // a bug of the writer. A client then gets an empty map and asks again.
    let shown: Vec<String> = routes
        .iter()
        .take(8)
        .map(|r| {
            format!(
                "t{} {:x}-{:x} {}",
                r.table,
                r.range.first.as_u128(),
                r.range.last.as_u128(),
                r.server
            )
        })
        .collect();
    RouteTable::new(revision, routes).unwrap_or_else(|e| {
        tracing::error!(error = %e, revision, routes = ?shown, "the delegation map's ranges do not form a route map");
        RouteTable::new(revision, Vec::new()).unwrap_or_else(|_| RouteTable::whole("", ""))
    })
}

impl Placement for ClusterPlacement {
    fn check(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        let state = self.coordination.map().borrow().clone();
        let route = state.route(soid);
        let mine = route.as_ref().is_some_and(|r| {
            r.owner
                .as_ref()
                .is_some_and(|o| o.server == self.coordination.name())
                && self.coordination.serving(r.table).is_some()
        });
        if mine {
            return Ok(());
        }
        let hint = route.and_then(|r| {
            let owner = r.owner?;
            // Not a hint to ourselves: we just said we do not serve it.
            (owner.server != self.coordination.name()).then(|| {
                route_to_pb(&Route {
                    range: r.range,
                    table: u64::from(r.table.0),
                    server: owner.server,
                    address: r.address.unwrap_or_default(),
                    epoch: owner.epoch.0,
                })
            })
        });
        Err(Box::new(pb::WrongServer {
            soid: Some(soid_to_pb(soid)),
            hint: hint.filter(|h| !h.address.is_empty()),
            revision: u64::try_from(state.revision).unwrap_or(0),
            ran: false,
        }))
    }

    fn generation(&self) -> u64 {
        self.coordination.generation()
    }

    fn may_ack(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        self.check(soid)?;
        let state = self.coordination.map().borrow().clone();
        match state.table_of(soid) {
            Some(table) if self.coordination.may_ack(table) => Ok(()),
            _ => {
                tracing::warn!(
                    ?soid,
                    "not acknowledged: the lease timer or the table's grant ran out (R1)"
                );
                metrics::counter!("sextant_r1_refusals_total").increment(1);
                Err(Box::new(pb::WrongServer {
                    soid: Some(soid_to_pb(soid)),
                    hint: None,
                    revision: u64::try_from(state.revision).unwrap_or(0),
                    ran: false,
                }))
            }
        }
    }

    fn map(&self) -> pb::RouteMap {
        self.cached_map(|c| c.whole.clone())
    }

    fn merged_map(&self) -> pb::RouteMap {
        self.cached_map(|c| c.merged.clone())
    }

    fn revision(&self) -> u64 {
        u64::try_from(self.coordination.map().borrow().revision).unwrap_or(0)
    }

    fn can_borrow(&self) -> bool {
        self.node.is_some()
    }

    fn borrowed_op_done(&self) {
        self.returner_wake.notify_one();
    }

    /// BORROW (Ursa Minor §3.5): an operation here needs the tables
    /// holding `soids` together. They join this server's borrow
    /// (`borrow/<name>`), the coordinator moves them here in its queue's
    /// order, and the operation then runs as an ordinary local
    /// transaction; the returner RETURNs them once they are not used (see
    /// [`return_due`]). Waits up to [`BORROW_WAIT`] for every one to serve
    /// here.
    fn borrow<'a>(
        &'a self,
        soids: &'a [Soid],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            let Some(node) = &self.node else {
                return false;
            };
            self.start_returner(node);
            let deadline = tokio::time::Instant::now() + BORROW_WAIT;
            let mut map = self.coordination.map();
            // Woken when a table begins serving here: the last step of a
            // grant (the ADD) changes no key of the map.
            let mut served = self.coordination.served();
            self.waiting
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _waiting = Waiting(Arc::clone(&self.waiting));
            let mut asked_at: Option<tokio::time::Instant> = None;
            loop {
                // Marked seen before looking: a change after the look wakes
                // the wait below.
                if let Some(s) = served.as_mut() {
                    s.borrow_and_update();
                }
                let state = map.borrow_and_update().clone();
                if soids.iter().all(|s| self.check(*s).is_ok()) {
                    tracing::debug!(target: "borrow_trace", asked = asked_at.is_some(), "BORROW: every table serves here");
                    if asked_at.is_some() {
                        crate::fault::step("borrow-granted");
                        // Granted now, before the operation runs: its end
                        // then counts as a use, and wakes the returner
                        // (`borrowed_op_done`) with nothing left to mark.
                        let mut b = self.borrow.lock().await;
                        if b.granted.is_none() && !b.tables.is_empty() {
                            let now = tokio::time::Instant::now();
                            let ops = borrowed_ops(self.engine.as_ref(), &b.tables);
                            b.granted = Some(now);
                            b.ops_at_grant = ops;
                            b.ops_seen = (ops, Some(now));
                        }
                    }
                    return true;
                }
                let Some(tables) = soids
                    .iter()
                    .map(|s| state.table_of(*s))
                    .collect::<Option<BTreeSet<TableId>>>()
                else {
                    return false;
                };
                {
                    let mut b = self.borrow.lock().await;
                    let published = state
                        .borrows
                        .get(self.coordination.name())
                        .is_some_and(|(t, _)| *t == b.tables);
                    let grows = !tables.is_subset(&b.tables);
                    // Written when it grows, and again (every second) when
                    // the map does not show it: a RETURN took it meanwhile,
                    // or the write was lost.
                    if grows
                        || (!published
                            && asked_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)))
                    {
                        b.tables.extend(tables.iter().copied());
                        b.since = Some(tokio::time::Instant::now());
                        b.granted = None;
                        asked_at = Some(tokio::time::Instant::now());
                        tracing::debug!(target: "borrow_trace", tables = ?b.tables, "BORROW: writing the borrow key");
                        if let Err(e) = node.borrow(&b.tables).await {
                            tracing::warn!(error = %e, "cannot ask to BORROW the tables an operation needs");
                            return false;
                        }
                        tracing::info!(tables = ?b.tables, "BORROW: asked for the tables an operation needs");
                        metrics::counter!("sextant_table_pulls_total").increment(1);
                    }
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return false;
                }
                // The map changes when a table's owner does; the ADD
                // here follows and wakes `served`. A look every
                // BORROW_POLL all the same (a borrow key lost, a RETURN
                // meanwhile).
                let wait = (deadline - now).min(BORROW_POLL);
                let served_changed = async {
                    let alive = match served.as_mut() {
                        Some(s) => s.changed().await.is_ok(),
                        None => false,
                    };
                    if !alive {
                        std::future::pending::<()>().await;
                    }
                };
                let woke = tokio::select! {
                    r = map.changed() => {
                        if r.is_err() {
                            return false; // the cluster is shutting down
                        }
                        "map"
                    }
                    _ = served_changed => "served",
                    _ = tokio::time::sleep(wait) => "poll",
                };
                tracing::debug!(target: "borrow_trace", woke, revision = map.borrow().revision, "BORROW: looking again");
            }
        })
    }
}

/// Counts an operation waiting in [`Placement::borrow`] until dropped.
struct Waiting(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_cluster::ids::{Epoch, Revision, TableId};
    use sextant_coordinator::map::{Member, OwnerEntry};
    use sextant_coordinator::node::BoxFuture;
    use sextant_coordinator::{CommitError, Grant, InProcess};
    use sextant_types::SoidRange;
    use std::time::Duration;
    use tokio::sync::watch;

    /// A view of a cluster of `a` (this server) and `b`: table 0 holds
    /// SOIDs 0–99 and is a's, table 1 holds 100–199 and is b's, table 2
    /// holds 200–299 and is a's in the map but not loaded yet.
    struct TwoServers {
        map: watch::Sender<Arc<ClusterState>>,
    }

    fn grant(t: u32, first: u128, last: u128) -> Grant {
        Grant {
            table: TableId(t),
            range: SoidRange {
                first: Soid::from_u128(first),
                last: Soid::from_u128(last),
            },
            epoch: Epoch(1),
            owner_rev: Revision(1),
            generation: 1,
        }
    }

    impl TwoServers {
        fn new() -> TwoServers {
            let mut s = ClusterState {
                revision: 42,
                ..ClusterState::default()
            };
            for (name, address) in [("a", "a:1"), ("b", "b:1")] {
                s.members.insert(
                    name.into(),
                    Member {
                        address: address.into(),
                        lease: 1,
                    },
                );
            }
            for (t, first, owner) in [(0u32, 0u128, "a"), (1, 100, "b"), (2, 200, "a")] {
                let g = grant(t, first, first + 99);
                s.tables.insert(g.table, g.range);
                s.owners.insert(
                    g.table,
                    OwnerEntry {
                        server: owner.into(),
                        epoch: Epoch(3),
                        rev: Revision(1),
                    },
                );
            }
            TwoServers {
                map: watch::Sender::new(Arc::new(s)),
            }
        }
    }

    impl Coordination for TwoServers {
        fn name(&self) -> &str {
            "a"
        }
        fn map(&self) -> watch::Receiver<Arc<ClusterState>> {
            self.map.subscribe()
        }
        fn serving(&self, table: TableId) -> Option<Grant> {
            (table == TableId(0)).then(|| grant(0, 0, 99))
        }
        fn tables(&self) -> Vec<Grant> {
            vec![grant(0, 0, 99)]
        }
        fn may_ack(&self, table: TableId) -> bool {
            table == TableId(0)
        }
        fn commit_manifest<'a>(
            &'a self,
            _: &'a Grant,
            _: Vec<u8>,
        ) -> BoxFuture<'a, Result<(), CommitError>> {
            Box::pin(async { Ok(()) })
        }
        fn lease_remaining(&self) -> Duration {
            Duration::from_secs(5)
        }
    }

    #[test]
    fn serves_only_granted_tables_the_map_gives_it_and_hints_the_owner() {
        let p = ClusterPlacement::new(Arc::new(TwoServers::new()));
        let s = Soid::from_u128;
        assert_eq!(p.check(s(5)), Ok(()));
        // b's table: WRONG_SERVER naming b.
        let w = p.check(s(150)).unwrap_err();
        let hint = w.hint.expect("a hint");
        assert_eq!((hint.server.as_str(), hint.address.as_str()), ("b", "b:1"));
        assert_eq!((hint.table, hint.epoch, w.revision), (1, 3, 42));
        // Mine in the map but not loaded: WRONG_SERVER without a hint to
        // itself (the client waits for the map to move on).
        let w = p.check(s(250)).unwrap_err();
        assert_eq!(w.hint, None);
        // No table at all.
        assert_eq!(p.check(s(1000)).unwrap_err().hint, None);
        assert_eq!(p.may_ack(s(5)), Ok(()));
        assert!(p.may_ack(s(150)).is_err());
        // The map: three routes, by range.
        let map = p.map();
        let servers: Vec<&str> = map.routes.iter().map(|r| r.server.as_str()).collect();
        assert_eq!(servers, ["a", "b", "a"]);
        assert_eq!(map.revision, 42);
    }

    #[test]
    fn a_borrow_is_returned_when_idle_or_wanted_and_used_never_unused() {
        let t0 = tokio::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let fresh = || Borrow {
            tables: [TableId(1), TableId(2)].into(),
            since: Some(t0),
            ..Borrow::default()
        };
        // Not granted yet: kept while an operation waits for it, given up
        // a second after none does.
        let mut b = fresh();
        assert!(!return_due(&mut b, 1, false, 0, false, at(5_000)));
        assert!(!return_due(&mut b, 0, false, 0, false, at(500)));
        assert!(return_due(&mut b, 0, false, 0, false, at(1_000)));
        // Granted at 100 ms, then used until 3 s: returned 2 s after the
        // last use.
        let mut b = fresh();
        assert!(!return_due(&mut b, 1, true, 10, false, at(100)));
        for ms in (200..=3_000).step_by(100) {
            assert!(!return_due(&mut b, 0, true, 10 + ms, false, at(ms)), "{ms}");
        }
        assert!(!return_due(&mut b, 0, true, 3_010, false, at(4_900)));
        assert!(return_due(&mut b, 0, true, 3_010, false, at(5_000)));
        // In constant use: returned after RETURN_AT_MOST all the same.
        let mut b = fresh();
        assert!(!return_due(&mut b, 0, true, 0, false, at(0)));
        let most = RETURN_AT_MOST.as_millis() as u64;
        assert!(!return_due(&mut b, 0, true, 1, false, at(most - 1)));
        assert!(return_due(&mut b, 0, true, 2, false, at(most)));
        // Another server waits: returned once used here, not before (or
        // after YIELD_AFTER: a borrow nobody here uses is not held).
        let mut b = fresh();
        assert!(!return_due(&mut b, 1, true, 7, true, at(0)));
        assert!(!return_due(&mut b, 1, true, 7, true, at(10)));
        assert!(return_due(&mut b, 0, true, 8, true, at(20)));
        let mut b = fresh();
        assert!(!return_due(&mut b, 1, true, 7, true, at(0)));
        assert!(return_due(
            &mut b,
            1,
            true,
            7,
            true,
            at(YIELD_AFTER.as_millis() as u64)
        ));
        // A table taken away (failover) un-grants it.
        let mut b = fresh();
        assert!(!return_due(&mut b, 1, true, 0, false, at(0)));
        assert!(!return_due(&mut b, 1, false, 0, false, at(3_000)));
        assert!(b.granted.is_none());
    }

    #[test]
    fn the_in_process_cluster_serves_everything_and_maps_one_route() {
        let c: Arc<dyn Coordination> = Arc::new(InProcess::new("solo", "127.0.0.1:7000"));
        let p = ClusterPlacement::new(c);
        assert_eq!(p.check(Soid::from_u128(7)), Ok(()));
        let map = p.map();
        assert_eq!(map.routes.len(), 1);
        assert_eq!(map.routes[0].address, "127.0.0.1:7000");
    }
}
