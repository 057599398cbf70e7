//! The delegation map: a cache of the cluster's keys in etcd — members,
//! tables and their SOID ranges, owners (with the owner key's revision,
//! the fence of R2), pending moves, draining servers, the coordinator —
//! built from one prefix get and kept current by a watch from the next
//! revision.
//!
//! Invariants:
//! - A published [`ClusterState`] is etcd's state *at* its `revision`:
//!   the events of one revision (one transaction) arrive in one watch
//!   response and are applied together before anything is published.
//! - No change is missed: when the watch stream breaks (etcd restarted,
//!   connection lost — the HTTP/2 keep-alive notices a silent one), it is
//!   re-created from `revision + 1`; when etcd has compacted that
//!   revision away the whole prefix is read again.
//! - The cache never goes backwards: a full reload replaces the state
//!   only with a newer one.
//!
//! Subscribers get each new state through a `tokio::sync::watch`
//! channel ([`DelegationMap::subscribe`]).

use crate::etcd::{bounded, connect, EtcdConfig};
use crate::keys::{self, Key, OwnerValue};
use crate::CoordError;
use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use sextant_cluster::coordinator::ClusterView;
use sextant_cluster::ids::{Epoch, Revision, ServerId, TableId};
use sextant_cluster::server::Owner;
use sextant_types::{Soid, SoidRange};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A live member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Where clients reach it.
    pub address: String,
    /// Its membership lease.
    pub lease: i64,
}

/// A table's owner, as etcd says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerEntry {
    pub server: String,
    pub epoch: Epoch,
    /// `mod_revision` of `owner/<table>`: the fence of R2.
    pub rev: Revision,
}

/// A pending move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveEntry {
    pub to: String,
    pub rev: Revision,
}

/// The cluster's keys at one etcd revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterState {
    /// The etcd revision this state is at (every change up to it is in).
    pub revision: i64,
    pub members: BTreeMap<String, Member>,
    /// Per server, its last join: `joined/<name>`'s mod revision (R3).
    pub joins: BTreeMap<String, Revision>,
    /// The coordinator's name, and the lease its key lives on.
    pub coordinator: Option<(String, i64)>,
    /// Every table and its SOID range.
    pub tables: BTreeMap<TableId, SoidRange>,
    pub owners: BTreeMap<TableId, OwnerEntry>,
    pub moves: BTreeMap<TableId, MoveEntry>,
    pub draining: BTreeSet<String>,
    pub bootstrapped: bool,
    /// Per server, the load (request rate, inodes) of each table it last
    /// published.
    pub loads: BTreeMap<String, PublishedLoad>,
    /// Per server, its borrow: the tables its operations need together,
    /// and the borrow key's mod revision (its place in the queue).
    pub borrows: BTreeMap<String, (BTreeSet<TableId>, Revision)>,
    /// Where each lent table goes back to.
    pub homes: BTreeMap<TableId, String>,
    /// Client keys' records by name (`clientkey/<name>`), as stored: the
    /// server decodes them (`sextant_server::clientkeys`).
    pub client_keys: BTreeMap<String, String>,
}

/// A server's `load/<name>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublishedLoad {
    /// The key's `mod_revision`: a table's figures count only when newer
    /// than its owner key, i.e. published by its owner since it became
    /// the owner (a table that left a server and came back must not be
    /// weighed by what that server published before it left).
    pub rev: Revision,
    pub tables: BTreeMap<TableId, keys::TableLoad>,
}

/// One routing entry: a table, its range, its owner and where to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub table: TableId,
    pub range: SoidRange,
    pub owner: Option<OwnerEntry>,
    /// The owner's address, when the owner is a live member.
    pub address: Option<String>,
}

impl ClusterState {
    /// Applies a put (`Some((value, mod_revision, lease))`) or a delete of
    /// `key` (prefix removed). Keys and values it does not understand are
    /// ignored (and logged): they are not this protocol's.
    fn apply(&mut self, key: &str, put: Option<(&[u8], i64, i64)>) {
        let text = put.map(|(v, rev, lease)| (std::str::from_utf8(v).ok(), rev, lease));
        match (keys::parse_key(key), text) {
            (Key::Member(n), Some((Some(addr), _, lease))) => {
                self.members.insert(
                    n,
                    Member {
                        address: addr.to_string(),
                        lease,
                    },
                );
            }
            (Key::Member(n), None) => {
                self.members.remove(&n);
            }
            (Key::Joined(n), Some((_, rev, _))) => {
                self.joins.insert(n, Revision(rev as u64));
            }
            (Key::Joined(n), None) => {
                self.joins.remove(&n);
            }
            (Key::Drain(n), Some(_)) => {
                self.draining.insert(n);
            }
            (Key::Drain(n), None) => {
                self.draining.remove(&n);
            }
            (Key::Table(t), Some((Some(v), _, _))) => match keys::decode_range(v) {
                Some(r) => {
                    self.tables.insert(t, r);
                }
                None => tracing::warn!(key, value = v, "etcd: not a SOID range; ignored"),
            },
            (Key::Table(t), None) => {
                self.tables.remove(&t);
            }
            (Key::Owner(t), Some((Some(v), rev, _))) => match OwnerValue::decode(v) {
                Some(o) => {
                    self.owners.insert(
                        t,
                        OwnerEntry {
                            server: o.server,
                            epoch: o.epoch,
                            rev: Revision(rev as u64),
                        },
                    );
                }
                None => tracing::warn!(key, value = v, "etcd: not an owner; ignored"),
            },
            (Key::Owner(t), None) => {
                self.owners.remove(&t);
            }
            (Key::Move(t), Some((Some(v), rev, _))) if keys::valid_name(v) => {
                self.moves.insert(
                    t,
                    MoveEntry {
                        to: v.to_string(),
                        rev: Revision(rev as u64),
                    },
                );
            }
            (Key::Move(t), None) => {
                self.moves.remove(&t);
            }
            (Key::Coordinator, Some((Some(v), _, lease))) => {
                self.coordinator = Some((v.to_string(), lease));
            }
            (Key::Coordinator, None) => self.coordinator = None,
            (Key::Bootstrapped, p) => self.bootstrapped = p.is_some(),
            (Key::Load(n), Some((Some(v), rev, _))) => {
                self.loads.insert(
                    n,
                    PublishedLoad {
                        rev: Revision(rev as u64),
                        tables: keys::decode_load(v),
                    },
                );
            }
            (Key::Load(n), None) => {
                self.loads.remove(&n);
            }
            (Key::Borrow(n), Some((Some(v), rev, _))) => match keys::decode_tables(v) {
                Some(tables) => {
                    self.borrows.insert(n, (tables, Revision(rev as u64)));
                }
                None => tracing::warn!(key, value = v, "etcd: not a list of tables; ignored"),
            },
            (Key::Borrow(n), None) => {
                self.borrows.remove(&n);
            }
            (Key::Home(t), Some((Some(v), _, _))) if keys::valid_name(v) => {
                self.homes.insert(t, v.to_string());
            }
            (Key::Home(t), None) => {
                self.homes.remove(&t);
            }
            (Key::ClientKey(n), Some((Some(v), _, _))) => {
                self.client_keys.insert(n, v.to_string());
            }
            (Key::ClientKey(n), None) => {
                self.client_keys.remove(&n);
            }
            // Manifests are read when a table is loaded, not cached.
            (Key::Manifest(_), _) => {}
            (k, _) => tracing::debug!(key, kind = ?k, "etcd: key ignored by the map"),
        }
    }

    /// The owner of `table`.
    pub fn owner(&self, table: TableId) -> Option<&OwnerEntry> {
        self.owners.get(&table)
    }

    /// The table whose range holds `soid`.
    pub fn table_of(&self, soid: Soid) -> Option<TableId> {
        // Ranges do not overlap; few tables per cluster (a scan is fine
        // next to an RPC).
        self.tables
            .iter()
            .find(|(_, r)| r.contains(soid))
            .map(|(t, _)| *t)
    }

    /// Where to send an operation on `soid`.
    pub fn route(&self, soid: Soid) -> Option<Route> {
        let table = self.table_of(soid)?;
        self.route_table(table)
    }

    pub fn route_table(&self, table: TableId) -> Option<Route> {
        let range = *self.tables.get(&table)?;
        let owner = self.owners.get(&table).cloned();
        let address = owner
            .as_ref()
            .and_then(|o| self.members.get(&o.server))
            .map(|m| m.address.clone());
        Some(Route {
            table,
            range,
            owner,
            address,
        })
    }

    /// Every table, in SOID order of its range.
    pub fn routes(&self) -> Vec<Route> {
        let mut r: Vec<Route> = self
            .tables
            .keys()
            .filter_map(|t| self.route_table(*t))
            .collect();
        r.sort_by_key(|r| r.range.first);
        r
    }

    /// The tables `server` owns.
    pub fn owned_by<'a>(&'a self, server: &'a str) -> impl Iterator<Item = TableId> + 'a {
        self.owners
            .iter()
            .filter(move |(_, o)| o.server == server)
            .map(|(t, _)| *t)
    }

    /// The view the pure coordinator decides on, with server names
    /// numbered for this one decision (`names[id]` is `ServerId(id)`'s).
    /// Only tables with a range are the coordinator's; an owner key
    /// without a table key is left alone.
    pub fn cluster_view(&self) -> (ClusterView, Names) {
        let mut names = Names::default();
        let mut view = ClusterView::default();
        for m in self.members.keys() {
            view.members.insert(names.id(m));
        }
        for d in &self.draining {
            view.draining.insert(names.id(d));
        }
        for (n, rev) in &self.joins {
            view.joins.insert(names.id(n), *rev);
        }
        for t in self.tables.keys() {
            let o = self.owners.get(t).map(|o| {
                (
                    Owner {
                        server: names.id(&o.server),
                        epoch: o.epoch,
                    },
                    o.rev,
                )
            });
            view.owners.insert(*t, o);
        }
        for (t, m) in &self.moves {
            view.moves.insert(*t, names.id(&m.to));
        }
        let mut queue: Vec<(&Revision, &String, &BTreeSet<TableId>)> = self
            .borrows
            .iter()
            .map(|(server, (tables, rev))| (rev, server, tables))
            .collect();
        queue.sort();
        for (_, server, tables) in queue {
            view.borrows.push((names.id(server), tables.clone()));
        }
        for (t, home) in &self.homes {
            view.homes.insert(*t, names.id(home));
        }
        // A table's rate and inodes as its current owner published them
        // since it became the owner; once servers publish loads, a table
        // of a member without such figures (just moved or split off, and
        // not measured there yet) is unknown, and its server sits balancing
        // out until they come (see `sextant_cluster::coordinator`).
        for (t, o) in &self.owners {
            let published = self
                .loads
                .get(&o.server)
                .filter(|l| l.rev > o.rev)
                .and_then(|l| l.tables.get(t));
            match published {
                Some(l) => {
                    view.rates.insert(*t, l.rate);
                    view.inodes.insert(*t, l.inodes);
                }
                None if !self.loads.is_empty()
                    && self.tables.contains_key(t)
                    && self.members.contains_key(&o.server) =>
                {
                    view.unknown.insert(*t);
                }
                None => {}
            }
        }
        (view, names)
    }
}

/// Server names numbered for the pure state machines, which know servers
/// by number.
#[derive(Clone, Debug, Default)]
pub struct Names {
    ids: BTreeMap<String, ServerId>,
    names: Vec<String>,
}

impl Names {
    pub fn id(&mut self, name: &str) -> ServerId {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = ServerId(self.names.len() as u32);
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    pub fn name(&self, id: ServerId) -> Option<&str> {
        self.names.get(id.0 as usize).map(String::as_str)
    }
}

/// The map: a task keeping a [`ClusterState`] current. Dropping it stops
/// the task.
pub struct DelegationMap {
    rx: watch::Receiver<Arc<ClusterState>>,
    task: JoinHandle<()>,
}

impl Drop for DelegationMap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads every key of the cluster at one revision.
pub async fn load(client: &mut Client, cfg: &EtcdConfig) -> Result<ClusterState, CoordError> {
    let resp = bounded(
        cfg,
        client.get(cfg.prefix.as_bytes(), Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let mut state = ClusterState {
        revision: resp.header().map_or(0, |h| h.revision()),
        ..ClusterState::default()
    };
    for kv in resp.kvs() {
        if let Some(k) = kv.key().strip_prefix(cfg.prefix.as_bytes()) {
            if let Ok(k) = std::str::from_utf8(k) {
                state.apply(k, Some((kv.value(), kv.mod_revision(), kv.lease())));
            }
        }
    }
    Ok(state)
}

impl DelegationMap {
    /// Reads the map and starts following it; fails if etcd does not
    /// answer the first read.
    pub async fn start(cfg: EtcdConfig) -> Result<DelegationMap, CoordError> {
        let mut client = connect(&cfg).await?;
        let state = load(&mut client, &cfg).await?;
        Ok(DelegationMap::follow(cfg, client, state))
    }

    /// Follows the map from `state` (a copy obtained earlier, e.g. a
    /// client's cached map): the watch starts at its revision + 1, or, if
    /// etcd compacted that away, the map is read again.
    pub async fn resume(cfg: EtcdConfig, state: ClusterState) -> Result<DelegationMap, CoordError> {
        let client = connect(&cfg).await?;
        Ok(DelegationMap::follow(cfg, client, state))
    }

    fn follow(cfg: EtcdConfig, client: Client, state: ClusterState) -> DelegationMap {
        let (tx, rx) = watch::channel(Arc::new(state));
        let task = tokio::spawn(follow(cfg, client, tx));
        DelegationMap { rx, task }
    }

    /// The map as last seen.
    pub fn current(&self) -> Arc<ClusterState> {
        self.rx.borrow().clone()
    }

    /// Every new state, as it comes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.rx.clone()
    }

    /// Waits up to `timeout` for a state satisfying `f`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        f: impl FnMut(&Arc<ClusterState>) -> bool,
    ) -> Option<Arc<ClusterState>> {
        let mut rx = self.subscribe();
        let found = tokio::time::timeout(timeout, async {
            rx.wait_for(f).await.map(|s| Arc::clone(&s)).ok()
        })
        .await;
        found.ok().flatten()
    }
}

/// How the watch of one stream ended.
enum Ended {
    /// Broken or silent: watch again from the last revision.
    Broken,
    /// etcd compacted the revision we need: read everything again.
    Compacted,
}

async fn follow(cfg: EtcdConfig, mut client: Client, tx: watch::Sender<Arc<ClusterState>>) {
    let mut state = (**tx.borrow()).clone();
    let mut reload = false;
    loop {
        if reload {
            match load(&mut client, &cfg).await {
                Ok(s) if s.revision >= state.revision => {
                    tracing::info!(revision = s.revision, "etcd: map read again");
                    state = s;
                    tx.send_replace(Arc::new(state.clone()));
                    reload = false;
                }
                Ok(_) => reload = false,
                Err(e) => {
                    tracing::warn!(error = %e, "etcd: cannot read the map; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        match watch_once(&cfg, &mut client, &mut state, &tx).await {
            Ended::Broken => tokio::time::sleep(Duration::from_millis(100)).await,
            Ended::Compacted => reload = true,
        }
    }
}

/// One watch stream from `state.revision + 1`, applied to `state` until
/// it ends.
async fn watch_once(
    cfg: &EtcdConfig,
    client: &mut Client,
    state: &mut ClusterState,
    tx: &watch::Sender<Arc<ClusterState>>,
) -> Ended {
    let options = WatchOptions::new()
        .with_prefix()
        .with_progress_notify()
        .with_start_revision(state.revision + 1);
    let mut stream = match bounded(cfg, client.watch(cfg.prefix.as_bytes(), Some(options))).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "etcd: cannot watch the map; retrying");
            return Ended::Broken;
        }
    };
    loop {
        let msg = match stream.message().await {
            Ok(Some(m)) => m,
            Ok(None) => return Ended::Broken,
            Err(e) => {
                tracing::info!(error = %e, "etcd: the map's watch broke; watching again");
                return Ended::Broken;
            }
        };
        if msg.compact_revision() > 0 {
            tracing::info!(
                compacted = msg.compact_revision(),
                from = state.revision + 1,
                "etcd: the map's revision was compacted; reading it again"
            );
            return Ended::Compacted;
        }
        if msg.canceled() {
            tracing::info!(
                reason = msg.cancel_reason(),
                "etcd: the map's watch was cancelled"
            );
            return Ended::Broken;
        }
        let mut changed = false;
        for ev in msg.events() {
            let Some(kv) = ev.kv() else { continue };
            let Some(k) = kv.key().strip_prefix(cfg.prefix.as_bytes()) else {
                continue;
            };
            let Ok(k) = std::str::from_utf8(k) else {
                continue;
            };
            let put = match ev.event_type() {
                EventType::Put => Some((kv.value(), kv.mod_revision(), kv.lease())),
                EventType::Delete => None,
            };
            tracing::debug!(target: "borrow_trace", key = k, rev = kv.mod_revision(), put = put.is_some(), "map: watch event");
            state.apply(k, put);
            state.revision = state.revision.max(kv.mod_revision());
            changed = true;
        }
        if let Some(h) = msg.header() {
            // Every event of the prefix up to the header's revision has
            // been sent (etcd's guarantee for progress notifications and
            // event batches alike).
            state.revision = state.revision.max(h.revision());
        }
        if changed {
            tx.send_replace(Arc::new(state.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_rates_reach_the_coordinators_view_for_the_current_owner() {
        let mut s = ClusterState::default();
        s.apply("member/a", Some((b"a:1", 5, 77)));
        s.apply("member/b", Some((b"b:1", 5, 78)));
        for t in ["000001", "000002"] {
            s.apply(
                &format!("table/{t}"),
                Some((keys::encode_range(&SoidRange::ALL).as_bytes(), 6, 0)),
            );
        }
        s.apply("owner/000001", Some((b"1 a", 7, 0)));
        s.apply("owner/000002", Some((b"1 b", 7, 0)));
        // a still reports table 2 (it moved to b): b's figures count.
        s.apply(
            "load/a",
            Some((b"1=250 i1=50000 2=999 i2=70000 junk 3=x", 8, 77)),
        );
        s.apply("load/b", Some((b"2=40 i2=1200", 8, 78)));
        let (view, _) = s.cluster_view();
        assert_eq!(view.rates.get(&TableId(1)), Some(&250));
        assert_eq!(view.rates.get(&TableId(2)), Some(&40));
        assert_eq!(view.inodes.get(&TableId(1)), Some(&50_000));
        assert_eq!(view.inodes.get(&TableId(2)), Some(&1_200));
        // An older server's value (rates only): inodes unknown, 0.
        s.apply("load/b", Some((b"2=40", 9, 78)));
        let (view, _) = s.cluster_view();
        assert_eq!(view.inodes.get(&TableId(2)).copied().unwrap_or(0), 0);
        assert!(view.unknown.is_empty());
        s.apply("load/a", None);
        let (view, _) = s.cluster_view();
        assert_eq!(view.rates.get(&TableId(1)), None);
        assert_eq!(view.inodes.get(&TableId(1)), None);
        // b publishes loads, a (a member) has not published table 1's.
        assert_eq!(view.unknown, [TableId(1)].into());
        s.apply("member/a", None);
        let (view, _) = s.cluster_view();
        assert!(view.unknown.is_empty(), "R3's business, not balance's");
    }

    #[test]
    fn figures_published_before_the_owner_got_the_table_do_not_count() {
        let mut s = ClusterState::default();
        s.apply("member/a", Some((b"a:1", 5, 77)));
        s.apply(
            "table/000001",
            Some((keys::encode_range(&SoidRange::ALL).as_bytes(), 6, 0)),
        );
        s.apply("owner/000001", Some((b"1 a", 7, 0)));
        s.apply("load/a", Some((b"1=900 i1=50000", 8, 77)));
        let (view, _) = s.cluster_view();
        assert_eq!(view.inodes.get(&TableId(1)), Some(&50_000));
        // The table went to b and came back to a (rev 10): what a
        // published at rev 8 is not its figure now.
        s.apply("owner/000001", Some((b"3 a", 10, 0)));
        let (view, _) = s.cluster_view();
        assert_eq!(view.rates.get(&TableId(1)), None);
        assert_eq!(view.unknown, [TableId(1)].into());
        s.apply("load/a", Some((b"1=3 i1=50000", 11, 77)));
        let (view, _) = s.cluster_view();
        assert_eq!(view.rates.get(&TableId(1)), Some(&3));
        assert!(view.unknown.is_empty());
    }

    #[test]
    fn equal_table_counts_with_unequal_inodes_are_balanced() {
        // Two servers, two tables each, no requests: a's hold 50,000
        // inodes each, b's a few. One of a's goes to b, and then the
        // coordinator wants nothing more.
        let mut s = ClusterState::default();
        s.apply("member/a", Some((b"a:1", 5, 77)));
        s.apply("member/b", Some((b"b:1", 5, 78)));
        for t in ["000001", "000002", "000003", "000004"] {
            s.apply(
                &format!("table/{t}"),
                Some((keys::encode_range(&SoidRange::ALL).as_bytes(), 6, 0)),
            );
        }
        for (t, o) in [(1, "a"), (2, "a"), (3, "b"), (4, "b")] {
            s.apply(
                &format!("owner/{t:06}"),
                Some((format!("1 {o}").as_bytes(), 7 + t, 0)),
            );
        }
        s.apply("load/a", Some((b"1=0 i1=50000 2=0 i2=50000", 12, 77)));
        s.apply("load/b", Some((b"3=0 i3=12 4=0 i4=40", 12, 78)));
        let (view, names) = s.cluster_view();
        let actions = sextant_cluster::coordinator::decide(&view, 2);
        let [sextant_cluster::coordinator::Action::Move { table, to, .. }] = actions[..] else {
            panic!("one move expected: {actions:?}");
        };
        assert_eq!((table, names.name(to)), (TableId(1), Some("b")));
        // The move done, before b published the table's figures: they
        // are unknown (not 0), and nothing more moves meanwhile.
        s.apply("owner/000001", Some((b"2 b", 13, 0)));
        s.apply("load/a", Some((b"2=0 i2=50000", 14, 77)));
        let (view, _) = s.cluster_view();
        assert_eq!(view.unknown, [TableId(1)].into());
        let actions = sextant_cluster::coordinator::decide(&view, 2);
        assert!(actions.is_empty(), "{actions:?}");
        // b publishes them.
        s.apply(
            "load/b",
            Some((b"1=0 i1=50000 3=0 i3=12 4=0 i4=40", 14, 78)),
        );
        let (view, _) = s.cluster_view();
        let actions = sextant_cluster::coordinator::decide(&view, 2);
        assert!(actions.is_empty(), "no ping-pong: {actions:?}");
    }

    #[test]
    fn applies_puts_and_deletes_and_routes() {
        let mut s = ClusterState::default();
        let half = Soid::from_u128(1 << 127);
        let lo = SoidRange::new(Soid::MIN, half.checked_prev().unwrap()).unwrap();
        let hi = SoidRange::new(half, Soid::MAX).unwrap();
        s.apply("member/a", Some((b"10.0.0.1:7000", 5, 77)));
        s.apply(
            "table/000000",
            Some((keys::encode_range(&lo).as_bytes(), 6, 0)),
        );
        s.apply(
            "table/000001",
            Some((keys::encode_range(&hi).as_bytes(), 6, 0)),
        );
        s.apply("owner/000001", Some((b"3 a", 8, 0)));
        s.apply("move/000001", Some((b"b", 9, 0)));
        s.apply("drain/a", Some((b"", 9, 0)));
        s.apply("coordinator", Some((b"a", 9, 77)));
        s.apply("manifest/000001", Some((b"\xff\x00", 10, 0)));
        s.apply("owner/000002", Some((b"garbage", 10, 0)));
        let r = s.route(Soid::MAX).unwrap();
        assert_eq!(r.table, TableId(1));
        assert_eq!(r.address.as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(
            r.owner,
            Some(OwnerEntry {
                server: "a".into(),
                epoch: Epoch(3),
                rev: Revision(8)
            })
        );
        let r0 = s.route(Soid::MIN).unwrap();
        assert_eq!((r0.table, r0.owner), (TableId(0), None));
        assert_eq!(s.moves[&TableId(1)].to, "b");
        assert_eq!(s.coordinator, Some(("a".into(), 77)));
        assert!(s.draining.contains("a"));
        let (view, names) = s.cluster_view();
        assert_eq!(view.owners.len(), 2, "only tables with a range");
        let a = view.owners[&TableId(1)].unwrap().0.server;
        assert_eq!(names.name(a), Some("a"));
        assert!(view.members.contains(&a) && view.draining.contains(&a));
        s.apply("member/a", None);
        s.apply("move/000001", None);
        s.apply("coordinator", None);
        assert!(s.route(Soid::MAX).unwrap().address.is_none());
        assert!(s.moves.is_empty() && s.coordinator.is_none());
    }

    #[test]
    fn borrows_queue_by_revision_and_homes_are_kept() {
        let mut s = ClusterState::default();
        for (n, rev) in [("a", 20), ("b", 9), ("c", 15)] {
            s.apply(&format!("member/{n}"), Some((b"x:1", 1, 1)));
            s.apply(&format!("borrow/{n}"), Some((b"1 2", rev, 1)));
        }
        s.apply("borrow/c", Some((b"1 x", 30, 1)));
        s.apply("home/000002", Some((b"a", 5, 0)));
        let (view, names) = s.cluster_view();
        let order: Vec<&str> = view
            .borrows
            .iter()
            .map(|(id, _)| names.name(*id).unwrap())
            .collect();
        assert_eq!(order, ["b", "c", "a"], "by revision; a bad value ignored");
        assert_eq!(names.name(view.homes[&TableId(2)]), Some("a"));
        s.apply("borrow/b", None);
        s.apply("home/000002", None);
        assert!(!s.borrows.contains_key("b") && s.homes.is_empty());
    }
}
