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
use sextant_coordinator::{ClusterState, CoordError, Coordination, EtcdCluster, EtcdConfig};
use sextant_proto::pb;
use sextant_proto::route::{route_to_pb, Route, RouteTable};
use sextant_proto::soid_to_pb;
use sextant_types::Soid;
use std::sync::Arc;
use std::time::Duration;

/// How long [`Placement::pull`] waits for a table to come here.
const PULL_WAIT: Duration = Duration::from_secs(10);

/// A table an operation pulled here goes home (RETURN) once no operation
/// here has pulled it for this long: the operations of a burst (an `mv`
/// of many files, a `cp` across servers) share one BORROW, and the
/// balancer's placement is back soon after.
pub const RETURN_AFTER: Duration = Duration::from_secs(2);

/// A pulled table in constant use here goes home after this long all the
/// same (the balancer's placement wins over one busy borrower).
pub const RETURN_AT_MOST: Duration = Duration::from_secs(30);

/// Which SOIDs a cluster server serves.
pub struct ClusterPlacement {
    coordination: Arc<dyn Coordination>,
    /// Where move requests go (`None`: this server cannot pull tables).
    etcd: Option<EtcdConfig>,
    client: Arc<EtcdSlot>,
    /// Tells the coordinator this server pulled a table (so balancing
    /// leaves its tables together for a while).
    node: Option<Arc<EtcdCluster>>,
    /// Tables pulled here: the server each came from and the pull's
    /// number (a later pull of the same table postpones its return).
    borrowed: Arc<parking_lot::Mutex<std::collections::HashMap<TableId, (String, u64)>>>,
    /// Numbers pulls.
    pulls: std::sync::atomic::AtomicU64,
    /// The engine, whose per-table operation counts keep a pulled table
    /// here while it is in use.
    engine: Option<sextant_engine::Engine>,
}

impl std::fmt::Debug for ClusterPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPlacement")
            .field("name", &self.coordination.name())
            .finish()
    }
}

impl ClusterPlacement {
    pub fn new(coordination: Arc<dyn Coordination>) -> ClusterPlacement {
        ClusterPlacement {
            coordination,
            etcd: None,
            client: Arc::default(),
            node: None,
            borrowed: Arc::default(),
            pulls: std::sync::atomic::AtomicU64::new(0),
            engine: None,
        }
    }

    /// Keeps a pulled table here while `engine` uses it (see
    /// [`RETURN_AFTER`]).
    pub fn with_engine(mut self, engine: sextant_engine::Engine) -> ClusterPlacement {
        self.engine = Some(engine);
        self
    }

    /// Lets the server pull tables it needs (see [`Placement::pull`]).
    pub fn with_etcd(mut self, etcd: EtcdConfig, node: Arc<EtcdCluster>) -> ClusterPlacement {
        self.etcd = Some(etcd);
        self.node = Some(node);
        self
    }

    /// Asks the coordinator to move `table` here (once; a move already
    /// pending, or the map already naming this server, is fine).
    async fn request_here(&self, table: TableId) -> Result<(), CoordError> {
        let Some(cfg) = &self.etcd else {
            return Ok(());
        };
        request_move(cfg, &self.client, table, self.coordination.name()).await
    }

    /// RETURN: once `table`, pulled here by pull number `n`, has gone
    /// [`RETURN_AFTER`] without an operation (or [`RETURN_AT_MOST`] in
    /// all), asks the coordinator to move it back to `home` (if that is
    /// still a member that is not draining, and the table is still here).
    /// A later pull of the table takes over its return.
    fn return_later(&self, table: TableId, home: String, n: u64) {
        let Some(cfg) = self.etcd.clone() else {
            return;
        };
        let (coordination, client, borrowed) = (
            Arc::clone(&self.coordination),
            Arc::clone(&self.client),
            Arc::clone(&self.borrowed),
        );
        let engine = self.engine.clone();
        let used = move || {
            let id = u64::from(table.0);
            engine
                .as_ref()
                .and_then(|e| e.table_ops().into_iter().find(|(t, _)| *t == id))
                .map(|(_, ops)| ops)
        };
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut last = used();
            loop {
                tokio::time::sleep(RETURN_AFTER).await;
                if borrowed.lock().get(&table).is_none_or(|(_, at)| *at != n) {
                    return;
                }
                let now = used();
                if now == last || started.elapsed() >= RETURN_AT_MOST {
                    break;
                }
                last = now;
            }
            {
                let mut b = borrowed.lock();
                if b.get(&table).is_none_or(|(_, at)| *at != n) {
                    return;
                }
                b.remove(&table);
            }
            let state = coordination.map().borrow().clone();
            let here = state
                .owner(table)
                .is_some_and(|o| o.server == coordination.name());
            let home_alive = state.members.contains_key(&home) && !state.draining.contains(&home);
            if !here || !home_alive {
                return;
            }
            tracing::info!(%table, to = %home, "returning a pulled table");
            metrics::counter!("sextant_table_returns_total").increment(1);
            if let Err(e) = request_move(&cfg, &client, table, &home).await {
                tracing::warn!(%table, error = %e, "cannot return a pulled table");
            }
        });
    }
}

/// A connection to etcd for move requests, made on first use.
type EtcdSlot = tokio::sync::Mutex<Option<sextant_coordinator::EtcdClient>>;

/// Asks the coordinator to move `table` to `to` (a move already pending,
/// or the map already naming `to`, is fine).
async fn request_move(
    cfg: &EtcdConfig,
    slot: &EtcdSlot,
    table: TableId,
    to: &str,
) -> Result<(), CoordError> {
    let mut slot = slot.lock().await;
    if slot.is_none() {
        *slot = Some(sextant_coordinator::etcd::connect(cfg).await?);
    }
    let Some(client) = slot.as_mut() else {
        return Ok(());
    };
    let asked = sextant_coordinator::admin::request_move(client, cfg, table, to).await;
    if asked.is_err() {
        // A broken connection is made again next time.
        *slot = None;
    }
    asked.map(|_| ())
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
        }))
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
                }))
            }
        }
    }

    fn map(&self) -> pb::RouteMap {
        route_table(&self.coordination.map().borrow()).to_pb()
    }

    fn can_pull(&self) -> bool {
        self.etcd.is_some()
    }

    /// BORROW, one table at a time: a table an operation needs is moved
    /// here and the operation runs as an ordinary local transaction; the
    /// table goes back where it came from once it has not been used here
    /// for [`RETURN_AFTER`] (RETURN, [`ClusterPlacement::return_later`]).
    /// Waits up to [`PULL_WAIT`] for the table to serve here.
    fn pull(
        &self,
        soid: Soid,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        Box::pin(async move {
            if self.etcd.is_none() {
                return false;
            }
            let deadline = tokio::time::Instant::now() + PULL_WAIT;
            let mut map = self.coordination.map();
            let mut asked_at: Option<tokio::time::Instant> = None;
            // Where the table was: where it goes back to (RETURN).
            let home = {
                let state = map.borrow();
                state
                    .table_of(soid)
                    .and_then(|t| state.owner(t).map(|o| (t, o.server.clone())))
                    .filter(|(_, s)| s != self.coordination.name())
            };
            loop {
                if self.check(soid).is_ok() {
                    if let (Some((table, home)), Some(_)) = (home, asked_at) {
                        let n = self
                            .pulls
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        self.borrowed.lock().insert(table, (home.clone(), n));
                        self.return_later(table, home, n);
                    }
                    return true;
                }
                let table = map.borrow_and_update().table_of(soid);
                let Some(table) = table else { return false };
                // (Again every second: a move refused because another
                // was pending is asked anew.)
                if asked_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    asked_at = Some(tokio::time::Instant::now());
                    if let Err(e) = self.request_here(table).await {
                        tracing::warn!(%table, error = %e, "cannot ask for a table an operation needs");
                        return false;
                    }
                    tracing::info!(%table, "pulling a table an operation needs");
                    metrics::counter!("sextant_table_pulls_total").increment(1);
                    if let Some(node) = &self.node {
                        if let Err(e) = node.note_pull().await {
                            tracing::debug!(error = %e, "cannot note the pull");
                        }
                    }
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return false;
                }
                // The map changes when the table's owner does; the ADD
                // here follows (serving), so look again at least often.
                let wait = (deadline - now).min(Duration::from_millis(50));
                let _ = tokio::time::timeout(wait, map.changed()).await;
            }
        })
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
    fn the_in_process_cluster_serves_everything_and_maps_one_route() {
        let c: Arc<dyn Coordination> = Arc::new(InProcess::new("solo", "127.0.0.1:7000"));
        let p = ClusterPlacement::new(c);
        assert_eq!(p.check(Soid::from_u128(7)), Ok(()));
        let map = p.map();
        assert_eq!(map.routes.len(), 1);
        assert_eq!(map.routes[0].address, "127.0.0.1:7000");
    }
}
