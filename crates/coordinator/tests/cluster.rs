//! The cluster's coordination against a real etcd: the delegation map's
//! watch across an etcd kill -9 and a compaction, manifest commits fenced
//! after a reassignment (R2), the coordinator's election moving on with a
//! half-done move, a drain, failover of a dead server's tables within
//! TTL + margin, and a move of a table the owner's host no longer has.
//! Servers are `EtcdCluster`s in this process over a fake
//! `TableHost` that records what it is asked.

mod common;

use common::{dir_and_etcd, logs, within, Etcd, SIGCONT, SIGSTOP};
use etcd_client::{Client, CompactionOptions, GetOptions};
use sextant_cluster::ids::TableId;
use sextant_coordinator::keys::{self, OwnerValue};
use sextant_coordinator::map::{load, ClusterState};
use sextant_coordinator::ownership::commit_fenced;
use sextant_coordinator::{
    admin, ClusterConfig, CommitError, Coordination, DelegationMap, EtcdCluster, EtcdConfig, Grant,
    HostError, MembershipConfig, NotHeld, TableHost,
};
use sextant_types::{Soid, SoidRange};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(2);

fn etcd_config(e: &Etcd) -> EtcdConfig {
    EtcdConfig {
        request_timeout: Duration::from_millis(1_000),
        prefix: "/t/".into(),
        ..EtcdConfig::new(vec![e.endpoint()])
    }
}

/// What the fake host was asked, and what it holds.
#[derive(Default)]
struct Fake {
    name: String,
    loaded: Mutex<BTreeMap<TableId, Option<Vec<u8>>>>,
    log: Mutex<Vec<String>>,
    /// While true, `drop_table` waits.
    gate: (Mutex<bool>, Condvar),
    /// Tables given up behind the shell's back (as an engine does after a
    /// fenced commit): `drop_table` answers [`NotHeld`].
    lost: Mutex<BTreeSet<TableId>>,
    /// While true, `forget_table` waits (an engine busy giving a table up).
    forget_gate: (Mutex<bool>, Condvar),
    /// Tables given up on the host's own (as an engine does after a merge
    /// whose outcome stayed unknown), not yet told to the shell.
    given_up: Mutex<Vec<TableId>>,
    /// `ready_for_failover`'s answer per dead server (absent: yes).
    failover_ready: Mutex<BTreeMap<String, bool>>,
    /// While true, `ready_for_failover` waits once it has decided its
    /// answer (a coordinator slow in the middle of a round: its view ages).
    failover_gate: (Mutex<bool>, Condvar),
    /// While true, `add_table` fails (as a full disk fails it).
    failing_adds: Mutex<bool>,
}

impl Fake {
    fn new(name: &str) -> Arc<Fake> {
        Arc::new(Fake {
            name: name.into(),
            ..Fake::default()
        })
    }

    fn holds(&self) -> Vec<TableId> {
        self.loaded.lock().unwrap().keys().copied().collect()
    }

    fn close_gate(&self, closed: bool) {
        *self.gate.0.lock().unwrap() = closed;
        self.gate.1.notify_all();
    }

    fn close_failover_gate(&self, closed: bool) {
        *self.failover_gate.0.lock().unwrap() = closed;
        self.failover_gate.1.notify_all();
    }

    fn set_failover_ready(&self, dead: &str, ready: bool) {
        self.failover_ready
            .lock()
            .unwrap()
            .insert(dead.to_string(), ready);
    }

    fn close_forget_gate(&self, closed: bool) {
        *self.forget_gate.0.lock().unwrap() = closed;
        self.forget_gate.1.notify_all();
    }

    fn logged(&self, what: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l == what)
    }

    fn lose(&self, table: TableId) {
        self.lost.lock().unwrap().insert(table);
        self.loaded.lock().unwrap().remove(&table);
    }

    fn give_up(&self, table: TableId) {
        self.loaded.lock().unwrap().remove(&table);
        self.given_up.lock().unwrap().push(table);
    }

    fn adds(&self, table: TableId) -> usize {
        let add = format!("add {table} ");
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(&add))
            .count()
    }
}

impl TableHost for Fake {
    fn add_table(
        &self,
        grant: &Grant,
        manifest: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, HostError> {
        if *self.failing_adds.lock().unwrap() {
            self.log
                .lock()
                .unwrap()
                .push(format!("add {} failed", grant.table));
            return Err("no space left on device".into());
        }
        self.loaded
            .lock()
            .unwrap()
            .insert(grant.table, manifest.map(<[u8]>::to_vec));
        let from = manifest.map(String::from_utf8_lossy);
        self.log
            .lock()
            .unwrap()
            .push(format!("add {} from {from:?}", grant.table));
        Ok(Some(
            format!("{} loaded {} e{}", self.name, grant.table, grant.epoch.0).into_bytes(),
        ))
    }

    fn drop_table(&self, table: TableId) -> Result<Vec<u8>, HostError> {
        self.log.lock().unwrap().push(format!("dropping {table}"));
        let mut closed = self.gate.0.lock().unwrap();
        while *closed {
            closed = self.gate.1.wait(closed).unwrap();
        }
        if self.lost.lock().unwrap().contains(&table) {
            return Err(Box::new(NotHeld(table)));
        }
        self.loaded.lock().unwrap().remove(&table);
        Ok(format!("{} dropped {table}", self.name).into_bytes())
    }

    fn forget_table(&self, table: TableId) {
        let mut closed = self.forget_gate.0.lock().unwrap();
        while *closed {
            closed = self.forget_gate.1.wait(closed).unwrap();
        }
        self.log.lock().unwrap().push(format!("forget {table}"));
        self.loaded.lock().unwrap().remove(&table);
    }

    fn take_given_up(&self) -> Vec<TableId> {
        std::mem::take(&mut *self.given_up.lock().unwrap())
    }

    fn ready_for_failover(&self, dead: &str) -> bool {
        let ready = self
            .failover_ready
            .lock()
            .unwrap()
            .get(dead)
            .copied()
            .unwrap_or(true);
        self.log
            .lock()
            .unwrap()
            .push(format!("ready for failover {dead}? {ready}"));
        let mut closed = self.failover_gate.0.lock().unwrap();
        while *closed {
            closed = self.failover_gate.1.wait(closed).unwrap();
        }
        ready
    }
}

async fn server(e: &Etcd, name: &str) -> (EtcdCluster, Arc<Fake>) {
    let m = MembershipConfig {
        ttl: TTL,
        margin: Duration::from_millis(300),
        ..MembershipConfig::new(etcd_config(e), name, &format!("{name}.addr:1"))
    };
    let host = Fake::new(name);
    let c = EtcdCluster::start(ClusterConfig::new(m), host.clone())
        .await
        .unwrap_or_else(|err| panic!("start {name}: {err}"));
    (c, host)
}

/// Cuts the SOID space into `n` tables (as splits would) before any
/// server starts: `table/<i>` for i in 1..n, the root (0) the first piece
/// once the coordinator bootstraps... here all written directly, with the
/// bootstrap mark, so the coordinator assigns them.
async fn tables(c: &mut Client, cfg: &EtcdConfig, n: u32) {
    let step = u128::MAX / n as u128;
    for i in 0..n {
        let first = Soid::from_u128(step * i as u128 + if i == 0 { 0 } else { 1 });
        let last = if i + 1 == n {
            Soid::MAX
        } else {
            Soid::from_u128(step * (i as u128 + 1))
        };
        let r = SoidRange::new(first, last).unwrap();
        c.put(
            cfg.key(&keys::table_key(TableId(i))),
            keys::encode_range(&r),
            None,
        )
        .await
        .unwrap();
    }
    c.put(cfg.key(keys::BOOTSTRAPPED_KEY), "1", None)
        .await
        .unwrap();
}

/// A scratch directory, a test's etcd in it, the servers' etcd settings
/// for it and a client it answers; `None` (said why) without an etcd
/// binary: the test is skipped.
async fn setup() -> Option<(tempfile::TempDir, Etcd, EtcdConfig, Client)> {
    let (dir, etcd) = dir_and_etcd()?;
    let cfg = etcd_config(&etcd);
    let c = etcd.client().await;
    Some((dir, etcd, cfg, c))
}

/// `n` tables cut before any server starts, then server a, and a map
/// once a serves them all (`what`: the failure's words).
async fn served_by_a(
    etcd: &Etcd,
    cfg: &EtcdConfig,
    c: &mut Client,
    n: u32,
    what: &str,
) -> (EtcdCluster, Arc<Fake>, DelegationMap) {
    tables(c, cfg, n).await;
    let (a, ha) = server(etcd, "a").await;
    let map = DelegationMap::start(cfg.clone()).await.unwrap();
    map.until(Duration::from_secs(15), |s| settled(s, &[(&a, &ha)]))
        .await
        .expect(what);
    (a, ha, map)
}

/// `server`'s manifest of `table` (which it serves) committed as
/// `manifest`: the grant it was committed under.
async fn committed(server: &EtcdCluster, table: TableId, manifest: &[u8]) -> Grant {
    let grant = server.serving(table).unwrap();
    server
        .commit_manifest(&grant, manifest.to_vec())
        .await
        .unwrap();
    grant
}

fn owners(s: &ClusterState) -> BTreeMap<TableId, String> {
    s.owners
        .iter()
        .map(|(t, o)| (*t, o.server.clone()))
        .collect()
}

/// Every table owned, by a member that serves it (per its own shell).
fn settled(s: &ClusterState, servers: &[(&EtcdCluster, &Arc<Fake>)]) -> bool {
    !s.tables.is_empty()
        && s.tables.keys().all(|t| {
            s.owner(*t).is_some_and(|o| {
                servers
                    .iter()
                    .any(|(c, h)| c.name() == o.server && c.may_ack(*t) && h.holds().contains(t))
            })
        })
        && s.moves.is_empty()
}

/// Polls the map (its predicate may also ask the servers, whose state
/// changes without a map change) until `f` holds, up to `timeout`.
trait Until {
    async fn until(
        &self,
        timeout: Duration,
        f: impl FnMut(&Arc<ClusterState>) -> bool,
    ) -> Option<Arc<ClusterState>>;
}

impl Until for DelegationMap {
    async fn until(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&Arc<ClusterState>) -> bool,
    ) -> Option<Arc<ClusterState>> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.current();
            if f(&s) {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The state as the map holds it, but for the revision (a progress
/// notification may have moved it past a fresh read's).
fn same(a: &ClusterState, b: &ClusterState) -> bool {
    ClusterState {
        revision: 0,
        ..a.clone()
    } == ClusterState {
        revision: 0,
        ..b.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_map_misses_nothing_across_an_etcd_kill_and_a_compaction() {
    logs();
    let Some((_dir, mut etcd, cfg, mut c)) = setup().await else {
        return;
    };
    tables(&mut c, &cfg, 3).await;
    let map = DelegationMap::start(cfg.clone()).await.unwrap();
    assert_eq!(map.current().tables.len(), 3);
    let early = (*map.current()).clone();
    let owner = |s: &str, e: u64| {
        OwnerValue {
            epoch: sextant_cluster::ids::Epoch(e),
            server: s.into(),
        }
        .encode()
    };
    c.put(cfg.key(&keys::owner_key(TableId(0))), owner("a", 1), None)
        .await
        .unwrap();
    assert!(map
        .until(Duration::from_secs(5), |s| s.owners.len() == 1)
        .await
        .is_some());

    // kill -9 and restart; changes made as soon as it is back, before
    // the map has watched again, must all arrive.
    etcd.kill_and_restart();
    let mut c = etcd.client().await;
    c.put(cfg.key(&keys::owner_key(TableId(1))), owner("b", 1), None)
        .await
        .unwrap();
    c.put(cfg.key(&keys::move_key(TableId(1))), "a", None)
        .await
        .unwrap();
    c.delete(cfg.key(&keys::table_key(TableId(2))), None)
        .await
        .unwrap();
    c.put(cfg.key(&keys::owner_key(TableId(0))), owner("b", 2), None)
        .await
        .unwrap();
    let fresh = load(&mut c, &cfg).await.unwrap();
    let caught_up = map
        .until(Duration::from_secs(15), |s| same(s, &fresh))
        .await;
    assert!(
        caught_up.is_some(),
        "after the restart the map is {:?}, etcd holds {fresh:?}",
        map.current()
    );

    // A map resumed from an old copy whose revision etcd has compacted
    // away reads everything again.
    let rev = fresh.revision;
    c.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    let resumed = DelegationMap::resume(cfg.clone(), early.clone())
        .await
        .unwrap();
    assert!(
        resumed
            .until(Duration::from_secs(10), |s| same(s, &fresh))
            .await
            .is_some(),
        "resumed from revision {} after a compaction at {rev}: {:?}",
        early.revision,
        resumed.current()
    );
    // Routing from the map: table 1 holds the second third of the SOID
    // space, owned by b (no member: no address); table 2 is gone.
    assert!(map.current().route(Soid::MAX).is_none());
    let r = map
        .current()
        .route(Soid::from_u128(u128::MAX / 3 + 5))
        .unwrap();
    assert_eq!(r.table, TableId(1));
    assert_eq!(r.owner.map(|o| o.server).as_deref(), Some("b"));
    assert!(r.address.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_then_a_reassigned_table_fences_its_old_owner() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    // An empty cluster: the first coordinator creates the root table and
    // gives it to a member.
    let (a, ha) = server(&etcd, "a").await;
    let m = a.delegation_map();
    let s = m
        .until(Duration::from_secs(10), |s| settled(s, &[(&a, &ha)]))
        .await
        .expect("the root table is created and served");
    assert_eq!(s.tables[&keys::ROOT_TABLE], SoidRange::ALL);
    // R1: etcd paused, a stops acknowledging within the TTL by its own
    // timer, though nothing told it the table is gone; etcd back, it
    // serves again (the same lease extended, or a new generation that
    // loads the table again).
    etcd.signal(SIGSTOP);
    let stopped = within(
        "a stops acknowledging",
        TTL + Duration::from_secs(2),
        || !a.may_ack(keys::ROOT_TABLE),
    )
    .await;
    assert!(a.serving(keys::ROOT_TABLE).is_some(), "still holds it");
    etcd.signal(SIGCONT);
    eprintln!("etcd paused: a stopped acknowledging after {stopped:?}");
    within("a serves again", Duration::from_secs(15), || {
        a.may_ack(keys::ROOT_TABLE)
    })
    .await;
    let grant = committed(&a, keys::ROOT_TABLE, b"a's snapshot").await;

    let (b, hb) = server(&etcd, "b").await;
    // a's lease revoked (as if it expired): R3 lets the coordinator give
    // the table to b at the next epoch.
    let lease = a.membership().lease();
    c.lease_revoke(lease).await.unwrap();
    let s = m
        .until(Duration::from_secs(10), |s| {
            s.owner(keys::ROOT_TABLE)
                .is_some_and(|o| o.server == "b" && o.epoch.0 == grant.epoch.0 + 1)
        })
        .await
        .expect("reassigned to b");
    let new_rev = s.owner(keys::ROOT_TABLE).unwrap().rev;
    within("b serves the table", Duration::from_secs(10), || {
        b.may_ack(keys::ROOT_TABLE)
    })
    .await;
    // b loaded it from a's last manifest.
    assert_eq!(
        hb.loaded.lock().unwrap()[&keys::ROOT_TABLE].as_deref(),
        Some(&b"a's snapshot"[..])
    );
    // a, a zombie under its old grant: no acknowledgement, and etcd
    // refuses its manifest (R2) — also straight at etcd, past a's own
    // bookkeeping.
    assert!(!a.may_ack(keys::ROOT_TABLE));
    assert!(matches!(
        a.commit_manifest(&grant, b"zombie".to_vec()).await,
        Err(CommitError::Fenced { .. })
    ));
    assert!(matches!(
        commit_fenced(&mut c, &cfg, &grant, b"zombie".to_vec()).await,
        Err(CommitError::Fenced { .. })
    ));
    let mkey = cfg.key(&keys::manifest_key(keys::ROOT_TABLE));
    let v = c.get(mkey.as_bytes(), None).await.unwrap();
    assert_eq!(v.kvs()[0].value(), b"b loaded t0 e2");
    // The new owner's grant commits.
    let g = b.serving(keys::ROOT_TABLE).unwrap();
    assert_eq!(g.owner_rev, new_rev);
    b.commit_manifest(&g, b"b's snapshot".to_vec())
        .await
        .unwrap();
    // a joined again (a new generation) and holds nothing.
    within("a forgets the table", Duration::from_secs(10), || {
        ha.holds().is_empty()
    })
    .await;
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_coordinator_lets_a_half_done_move_finish_and_a_drain_empties_a_server() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    tables(&mut c, &cfg, 6).await;
    let mut servers = BTreeMap::new();
    for n in ["a", "b", "c"] {
        servers.insert(n.to_string(), server(&etcd, n).await);
    }
    let map = DelegationMap::start(cfg.clone()).await.unwrap();
    let all = |servers: &BTreeMap<String, (EtcdCluster, Arc<Fake>)>, s: &ClusterState| {
        let v: Vec<_> = servers.values().map(|(c, h)| (c, h)).collect();
        settled(s, &v)
    };
    let s = map
        .until(Duration::from_secs(15), |s| {
            all(&servers, s) && {
                let o = owners(s);
                servers
                    .keys()
                    .all(|n| o.values().filter(|x| *x == n).count() == 2)
            }
        })
        .await
        .unwrap_or_else(|| panic!("not spread 2/2/2: {:?}", owners(&map.current())));
    let coordinator = s.coordinator.clone().unwrap().0;
    // A table owned by someone else, to move to the third server.
    let (table, from) = owners(&s)
        .into_iter()
        .find(|(_, o)| *o != coordinator)
        .unwrap();
    let to = servers
        .keys()
        .find(|n| **n != coordinator && **n != from)
        .unwrap()
        .clone();
    servers[&from].1.close_gate(true);
    assert!(admin::request_move(&mut c, &cfg, table, &to).await.unwrap());
    // A move to the table's own owner is refused (it would never finish).
    assert!(!admin::request_move(&mut c, &cfg, table, &from)
        .await
        .unwrap());
    within("the owner starts dropping", Duration::from_secs(10), || {
        servers[&from].1.logged(&format!("dropping {table}"))
    })
    .await;
    assert!(!servers[&from].0.may_ack(table), "dropping: no acks");

    // The coordinator dies (its process gone, its lease revoked).
    let (k, _) = servers.remove(&coordinator).unwrap();
    let lease = k.membership().lease();
    drop(k);
    c.lease_revoke(lease).await.unwrap();
    let s = map
        .until(Duration::from_secs(10), |s| {
            s.coordinator
                .as_ref()
                .is_some_and(|(n, _)| *n != coordinator)
        })
        .await
        .expect("another server is elected");
    eprintln!("coordinator {coordinator} -> {:?}", s.coordinator);
    // The move finishes once the owner has written the table back; the
    // dead coordinator's tables go to the live servers (R3).
    servers[&from].1.close_gate(false);
    let s = map
        .until(Duration::from_secs(15), |s| all(&servers, s))
        .await
        .unwrap_or_else(|| panic!("not settled: {:?}", map.current()));
    // `to` loaded it from the final manifest of `from`'s DROP (the
    // balancer may have moved it on since).
    assert!(servers[&to].1.logged(&format!(
        "add {table} from Some(\"{from} dropped {table}\")"
    )));
    assert!(owners(&s).values().all(|o| *o != coordinator));

    // Drain `to`: every table ends on the other server.
    let other = servers.keys().find(|n| **n != to).unwrap().clone();
    admin::set_draining(&mut c, &cfg, &to, true).await.unwrap();
    let s = map
        .until(Duration::from_secs(20), |s| {
            all(&servers, s) && owners(s).values().all(|o| *o == other)
        })
        .await
        .unwrap_or_else(|| panic!("not drained: {:?}", owners(&map.current())));
    assert_eq!(s.tables.len(), 6);
    within(
        "the drained server holds nothing",
        Duration::from_secs(5),
        || servers[&to].1.holds().is_empty() && servers[&to].0.tables().is_empty(),
    )
    .await;

    // `to` takes tables again; `other` leaves cleanly: its tables move to
    // `to` by DROP/ADD and its member key is gone at once, not after a TTL.
    admin::set_draining(&mut c, &cfg, &to, false).await.unwrap();
    let (o, ho) = servers.remove(&other).unwrap();
    let left = Instant::now();
    o.leave(Duration::from_secs(20)).await.unwrap();
    eprintln!("{other} left in {:?}", left.elapsed());
    // The member key goes with the lease, then leave clears the draining
    // mark (two etcd writes: wait for both).
    let s = map
        .until(Duration::from_secs(5), |s| {
            !s.members.contains_key(&other) && !s.draining.contains(&other)
        })
        .await
        .expect("the member key and the draining mark are gone");
    assert!(owners(&s).values().all(|o| *o == to), "{:?}", owners(&s));
    assert!(ho.holds().is_empty());
    assert!(!s.draining.contains(&other));
    let s = map
        .until(Duration::from_secs(10), |s| all(&servers, s))
        .await
        .unwrap_or_else(|| panic!("not settled: {:?}", map.current()));
    assert_eq!(s.tables.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_servers_tables_are_served_again_within_ttl_and_a_margin() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    tables(&mut c, &cfg, 4).await;
    let (a, ha) = server(&etcd, "a").await;
    let (b, hb) = server(&etcd, "b").await;
    let map = DelegationMap::start(cfg.clone()).await.unwrap();
    let s = map
        .until(Duration::from_secs(15), |s| {
            settled(s, &[(&a, &ha), (&b, &hb)])
                && owners(s).values().filter(|o| *o == "a").count() == 2
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "not spread: {:?}; a serves {:?} holds {:?}; b serves {:?} holds {:?}",
                map.current(),
                a.tables(),
                ha.holds(),
                b.tables(),
                hb.holds()
            )
        });
    let of_a: Vec<TableId> = s.owned_by("a").collect();
    // kill -9 of a: nothing revoked, its lease runs out by itself.
    let killed = Instant::now();
    drop(a);
    let took = within("b serves a's tables", TTL + Duration::from_secs(6), || {
        of_a.iter().all(|t| b.may_ack(*t))
    })
    .await;
    eprintln!("failover: {took:?} (TTL {TTL:?})");
    // TTL + 2 s, with 1 s of slack for a loaded 2-core machine.
    assert!(
        killed.elapsed() <= TTL + Duration::from_secs(3),
        "failover took {took:?}"
    );
    let all = c
        .get(cfg.key("owner/"), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(all.kvs().len(), 4);
    drop(b);
}

/// Issue 20: an owner asked to move a table its host had already given up
/// (an engine whose commit was refused) answered every retried DROP with
/// "not held here" while etcd still named it: the table was served by no
/// one. The shell now asks etcd: still this server's, the table is handed
/// over as etcd has it, and the new owner loads the last manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_of_a_table_the_host_lost_hands_it_over_as_etcd_has_it() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    // One table: the balancer moves nothing (1 against 0 is within its
    // spread), so the only move is the one asked for below.
    let (a, ha, map) = served_by_a(&etcd, &cfg, &mut c, 1, "a serves the table").await;
    let table = TableId(0);
    committed(&a, table, b"a's last commit").await;
    ha.lose(table);
    let (b, hb) = server(&etcd, "b").await;
    assert!(admin::request_move(&mut c, &cfg, table, "b").await.unwrap());
    let moved = map
        .until(Duration::from_secs(15), |s| {
            s.owner(table).is_some_and(|o| o.server == "b")
                && s.moves.is_empty()
                && b.may_ack(table)
        })
        .await;
    if moved.is_none() {
        let log = ha.log.lock().unwrap().clone();
        panic!(
            "not moved: {:?}; a serves {:?}, a's host was asked {log:?}",
            map.current(),
            a.tables()
        );
    }
    assert!(ha.logged(&format!("dropping {table}")));
    assert_eq!(
        hb.loaded.lock().unwrap()[&table].as_deref(),
        Some(&b"a's last commit"[..]),
        "b loads what etcd had"
    );
    within("a no longer holds it", Duration::from_secs(5), || {
        a.serving(table).is_none() && !ha.holds().contains(&table)
    })
    .await;
}

/// An admin's move ends a BORROW's home for the table: the coordinator
/// keeps a home while a move is on its way (a lend whose borrow ended
/// before it landed must still go home), so a home left in place would
/// send an admin-moved table back (a RETURN) once it landed — seen in CI,
/// a mount test's table moved by `cluster move` went back to its old
/// server. No coordinator runs here: the keys are written by hand.
#[tokio::test]
async fn an_admin_move_ends_the_tables_borrow_home() {
    let Some((_dir, _etcd, cfg, mut c)) = setup().await else {
        return;
    };
    let table = TableId(7);
    let owner = OwnerValue {
        epoch: sextant_cluster::ids::Epoch(2),
        server: "a".into(),
    };
    c.put(cfg.key(&keys::owner_key(table)), owner.encode(), None)
        .await
        .unwrap();
    c.put(cfg.key(&keys::member_key("b")), "b.addr:1", None)
        .await
        .unwrap();
    let home = cfg.key(&keys::home_key(table));
    c.put(home.clone(), "a", None).await.unwrap();
    assert!(admin::request_move(&mut c, &cfg, table, "b").await.unwrap());
    assert!(
        c.get(home, None).await.unwrap().kvs().is_empty(),
        "the home is gone with the move"
    );
    let moving = c.get(cfg.key(&keys::move_key(table)), None).await.unwrap();
    assert_eq!(moving.kvs().first().map(|kv| kv.value()), Some(&b"b"[..]));
}

/// A table the host gave up on its own (an engine merge whose outcome
/// stayed unknown) while etcd still names this server is loaded again,
/// from the manifest etcd holds — it used to stay unserved until the
/// server lost its lease or restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_the_host_gave_up_is_loaded_again_from_etcd() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    let (a, ha, map) = served_by_a(&etcd, &cfg, &mut c, 1, "a serves the table").await;
    let table = TableId(0);
    committed(&a, table, b"the catalogue's").await;
    let before = ha.adds(table);
    ha.give_up(table);
    within("a loads it again", Duration::from_secs(10), || {
        ha.adds(table) > before && ha.holds().contains(&table) && a.may_ack(table)
    })
    .await;
    assert_eq!(
        ha.loaded.lock().unwrap()[&table].as_deref(),
        Some(&b"the catalogue's"[..]),
        "loaded from what etcd holds"
    );
    assert_eq!(
        map.current().owner(table).map(|o| o.server.clone()),
        Some("a".to_string())
    );
}

/// A host whose ADD fails (a full disk) is asked again after a wait that
/// grows, not at once: before, the shell retried hundreds of times a
/// second, each time after a read from etcd. Once the host can load
/// again, the table is served within the longest wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_add_is_tried_again_after_a_growing_wait() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    let (a, ha, _map) = served_by_a(&etcd, &cfg, &mut c, 1, "a serves the table").await;
    let table = TableId(0);
    committed(&a, table, b"the catalogue's").await;
    *ha.failing_adds.lock().unwrap() = true;
    let before = ha.adds(table);
    ha.give_up(table);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let failed = ha.adds(table) - before;
    // 100 ms, 200, 400, 800, 1.6 s: six tries in 3 s at most.
    assert!(
        (1..=8).contains(&failed),
        "{failed} ADDs in 3 s: retried without a wait, or never"
    );
    *ha.failing_adds.lock().unwrap() = false;
    within("a loads it again", Duration::from_secs(10), || {
        ha.holds().contains(&table) && a.may_ack(table)
    })
    .await;
}

/// A moved table wakes its new owner's `served()` as it begins serving
/// (a BORROW waits on that: the ADD changes no key of the map, and a
/// poll of the map cost a cold rename 50 ms), and its old owner, whose
/// map lags behind its own handover for a moment, starts no ADD of the
/// table it just gave away (it used to, every time: a load etcd refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_table_wakes_its_new_owner_and_its_old_owner_adds_nothing() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    let (a, ha, _map) = served_by_a(&etcd, &cfg, &mut c, 1, "a serves the table").await;
    let table = TableId(0);
    let (b, hb) = server(&etcd, "b").await;
    for round in 0..6 {
        let (from, hfrom, to) = if round % 2 == 0 {
            (&a, &ha, &b)
        } else {
            (&b, &hb, &a)
        };
        let mut served = to
            .served()
            .expect("a cluster server says when tables serve");
        served.borrow_and_update();
        assert!(to.serving(table).is_none());
        assert!(admin::request_move(&mut c, &cfg, table, to.name())
            .await
            .unwrap());
        // Woken by the ADD itself, not by a poll: serving at once.
        while to.serving(table).is_none() {
            tokio::time::timeout(Duration::from_secs(15), served.changed())
                .await
                .unwrap_or_else(|_| panic!("round {round}: served() did not change"))
                .unwrap();
        }
        within("the old owner let go", Duration::from_secs(5), || {
            from.serving(table).is_none() && !hfrom.holds().contains(&table)
        })
        .await;
        // What the old owner's host was asked after its DROP: nothing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let log = hfrom.log.lock().unwrap().clone();
        let dropped = log
            .iter()
            .rposition(|l| *l == format!("dropping {table}"))
            .expect("a DROP");
        assert!(
            log[dropped..].iter().all(|l| !l.starts_with("add ")),
            "round {round}: {} added the table it handed over: {log:?}",
            from.name()
        );
    }
}

/// etcd takes at most 128 operations in a transaction: a catalogue commit
/// of many tables (a checkpoint after an import: hundreds) used to be one
/// transaction and was refused every time, leaving the tables made
/// meanwhile served by nobody (found by the search benchmark). Cut into
/// `pieces`, every table is committed.
#[tokio::test]
async fn a_commit_of_hundreds_of_tables_is_cut_into_transactions_etcd_takes() {
    use sextant_coordinator::catalog::{commit_tables, TableState, TablesChange, TXN_OPS};
    let Some((_dir, _etcd, cfg, mut c)) = setup().await else {
        return;
    };
    // (Tables apart from each other: new tables contiguous with the one
    // before them are a split's, kept in one transaction.)
    let change = TablesChange {
        created: (1..=200u32)
            .map(|t| TableState {
                table: TableId(t),
                range: SoidRange::new(
                    Soid::from_u128(u128::from(t) * 100),
                    Soid::from_u128(u128::from(t) * 100 + 49),
                )
                .unwrap(),
                manifest: vec![1, 2, 3],
            })
            .collect(),
        ..TablesChange::default()
    };
    let whole = commit_tables(&mut c, &cfg, "a", &change).await;
    assert!(
        whole.is_err(),
        "one transaction of 600 writes is refused by etcd: {whole:?}"
    );
    for piece in change.pieces(TXN_OPS) {
        assert!(commit_tables(&mut c, &cfg, "a", &piece).await.unwrap());
    }
    let s = load(&mut c, &cfg).await.unwrap();
    assert_eq!(s.tables.len(), 200);
    assert!(s.owners.values().all(|o| o.server == "a"));
}

/// Found by the BORROW pause test (crates/cli/tests/cluster.rs): a server
/// whose lease was lost gives up every table, but its host forgot them in
/// the background; given a table back at once (here: still named its
/// owner when it rejoins; there: the balancer filled the empty server),
/// the shell's load raced the forget — the engine
/// still had the old copy, took it as its own, and the late forget then
/// stopped it serving while etcd named the server its owner: clients got
/// WRONG_SERVER for 30 s. A table now stays busy until its forget is done,
/// so its load comes after. Here the forget is held back (a slow engine):
/// the tables must end served *and* held by the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_given_back_after_a_lease_loss_is_loaded_after_its_forget() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    let (a, ha, map) = served_by_a(&etcd, &cfg, &mut c, 2, "a serves both tables").await;
    /// Opens the gate however the test ends (a blocked forget would
    /// otherwise hold the runtime's shutdown, and the test, forever).
    struct Open(Arc<Fake>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.close_forget_gate(false);
        }
    }
    let _open = Open(ha.clone());
    ha.close_forget_gate(true);
    let old = a.membership().lease();
    c.lease_revoke(old).await.unwrap();
    // a rejoins under a new lease and, still named the tables' owner,
    // loads them again while its host has not forgotten the old ones.
    within("a rejoined", Duration::from_secs(15), || {
        a.membership().lease() != old
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    ha.close_forget_gate(false);
    map.until(Duration::from_secs(15), |s| settled(s, &[(&a, &ha)]))
        .await
        .unwrap_or_else(|| {
            panic!(
                "a's shell serves {:?} but its host holds {:?} (log {:?})",
                a.tables(),
                ha.holds(),
                ha.log.lock().unwrap()
            )
        });
    drop(a);
}

/// Clusters share an etcd under prefixes that do not nest: a server whose
/// prefix lies inside a set-up cluster's, or encloses one, does not start
/// (a typed settings error naming the other prefix); a sibling prefix
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_prefix_inside_or_around_another_clusters_is_refused() {
    logs();
    let Some((_dir, etcd, _, _)) = setup().await else {
        return;
    };
    let start = |prefix: &str, name: &str| {
        let m = MembershipConfig {
            ttl: TTL,
            margin: Duration::from_millis(300),
            ..MembershipConfig::new(
                EtcdConfig {
                    prefix: prefix.into(),
                    ..etcd_config(&etcd)
                },
                name,
                &format!("{name}.addr:1"),
            )
        };
        EtcdCluster::start(ClusterConfig::new(m), Fake::new(name))
    };
    let a = start("/a/", "a").await.expect("the first cluster starts");
    a.delegation_map()
        .until(Duration::from_secs(10), |s| s.bootstrapped)
        .await
        .expect("the first cluster is set up");
    let refused = |r: Result<EtcdCluster, sextant_coordinator::CoordError>, other: &str| match r {
        Err(e @ sextant_coordinator::CoordError::NestedPrefix { .. }) => {
            assert!(e.is_settings(), "{e}");
            assert!(e.to_string().contains(other), "{e}");
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a nested prefix was accepted"),
    };
    refused(start("/a/b/", "inner").await, "\"/a/\"");
    refused(start("/", "outer").await, "\"/a/\"");
    start("/ab/", "sibling")
        .await
        .expect("a sibling prefix is its own cluster");
}

/// R3 on a stale view (issue 21; the simulation's seed 49 under
/// `stop_before_completion_write`): the coordinator is slow in the middle
/// of a round — here its host's `ready_for_failover` for the dead server
/// x answers yes (x's crashed run completed) and then waits. Meanwhile x
/// restarts, joins, loads its table again (its new run begins) and dies
/// again, so `member/x` is absent again, and the host now says x's tables
/// must wait (the new run is not completed). The round carries on with
/// its old view: its reassignment must fail, because x joined since the
/// view (`joined/x` moved on), and later rounds must wait. Comparing
/// `member/x` absent alone, the stale round reassigns the table at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_view_does_not_reassign_the_table_of_a_server_that_joined_since() {
    logs();
    let Some((_dir, etcd, cfg, mut c)) = setup().await else {
        return;
    };
    let (a, ha, map) = served_by_a(&etcd, &cfg, &mut c, 2, "a serves both tables").await;
    let (x, hx) = server(&etcd, "x").await;
    let s = map
        .until(Duration::from_secs(15), |s| {
            settled(s, &[(&a, &ha), (&x, &hx)]) && owners(s).values().any(|o| o == "x")
        })
        .await
        .unwrap_or_else(|| panic!("x got no table: {:?}", owners(&map.current())));
    assert_eq!(s.coordinator.as_ref().map(|c| c.0.as_str()), Some("a"));
    let table = owners(&s)
        .into_iter()
        .find(|(_, o)| o == "x")
        .map(|(t, _)| t)
        .unwrap();

    ha.close_failover_gate(true);
    let lease = x.membership().lease();
    drop(x);
    c.lease_revoke(lease).await.unwrap();
    within(
        "the coordinator asks whether x's tables may go",
        Duration::from_secs(10),
        || ha.logged("ready for failover x? true"),
    )
    .await;
    // The yes waits at the gate. x comes back, takes its table again (a
    // new run), and dies again; its new run is not completed.
    ha.set_failover_ready("x", false);
    let (x, hx) = server(&etcd, "x").await;
    within("x loads its table again", Duration::from_secs(10), || {
        hx.holds().contains(&table)
    })
    .await;
    let lease = x.membership().lease();
    drop(x);
    c.lease_revoke(lease).await.unwrap();
    map.until(Duration::from_secs(5), |s| !s.members.contains_key("x"))
        .await
        .expect("x is gone again");
    ha.close_failover_gate(false);

    // The round on the old view, and a few more, change nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        owners(&map.current()).get(&table).map(String::as_str),
        Some("x"),
        "{table} reassigned on a view from before x joined again"
    );
    // Once x's new run is completed, the table goes to a.
    ha.set_failover_ready("x", true);
    map.until(Duration::from_secs(15), |s| {
        owners(s).get(&table).is_some_and(|o| o == "a")
    })
    .await
    .unwrap_or_else(|| panic!("{table} never reassigned: {:?}", owners(&map.current())));
}
