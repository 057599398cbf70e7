//! Issue 20: a table split begun before a membership-lease loss, on the
//! real pieces — a real etcd, the delegation map, the engine's catalogue
//! on etcd ([`EtcdCatalog`]), the engine in member mode and the shell's
//! table host ([`EngineHost`]). The shell's reactions (forget every table
//! when the lease is lost, load a table again when etcd still names this
//! server for it) are driven by hand, exactly as the ownership shell calls
//! the host; the lease itself is not consulted by the catalogue (its fence
//! is the owner key's revision, which a lease loss without a reassignment
//! leaves as it was — the case the simulation found, seed 175 — and the
//! member key's lease, lost and taken again here as the membership does).
//!
//! The interleaving: the split's commit fails (etcd unreachable — why the
//! lease runs out); the lease is lost (the host forgets the table); then
//! either the server rejoins and loads the table again from etcd, or the
//! table is failed over to another server; writes are acknowledged; then
//! the next checkpoint — the old split's commit — runs. Checked: the
//! catalogue's ranges still partition the SOID space, the reload works,
//! and every acknowledged operation is found after a crash and restart
//! (or by the server the table was failed over to).
//!
//! The late apply for real: the split's transaction applied by etcd and
//! its answer lost (the server told the outcome is unknown), with the
//! lease kept (the server serves on and commits both halves once) or lost
//! (both halves fail over whole). And the shared store's hygiene: the
//! snapshots a failed split wrote are swept once nothing can name them,
//! never one a manifest in etcd names.

use sextant_cluster::ids::{Epoch, TableId};
use sextant_coordinator::etcd_client::PutOptions;
use sextant_coordinator::keys::{member_key, owner_key, OwnerValue};
use sextant_coordinator::{DelegationMap, EtcdConfig, Grant, TableHost};
use sextant_engine::member::ROOT_TABLE_ID;
use sextant_engine::store::{MemStore, Store};
use sextant_engine::{
    CatalogChange, CatalogError, Engine, EngineConfig, MemberConfig, TableCatalog, TableManifest,
};
use sextant_server::cluster::catalog::EtcdCatalog;
use sextant_server::cluster::host::EngineHost;
use sextant_types::{Credentials, Soid};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A one-node etcd on free ports, killed when dropped.
struct Etcd {
    child: Child,
    client: u16,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Etcd {
    fn start(dir: &Path) -> Option<Etcd> {
        if Command::new("etcd").arg("--version").output().is_err() {
            eprintln!("skipped: no etcd binary (apt-get install etcd-server)");
            return None;
        }
        let (client, peer) = (free_port(), free_port());
        let c = format!("http://127.0.0.1:{client}");
        let p = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
            .args([
                "--listen-peer-urls",
                &p,
                "--initial-advertise-peer-urls",
                &p,
            ])
            .args(["--initial-cluster", &format!("t={p}"), "--unsafe-no-fsync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn etcd");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Etcd { child, client })
    }

    fn config(&self) -> EtcdConfig {
        EtcdConfig::new(vec![format!("http://127.0.0.1:{}", self.client)])
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts etcd and the runtime for a test (`None`: no etcd here), and
/// waits until etcd answers requests (its port opens before it has a
/// leader: a first request then failed under load).
fn setup(dir: &Path) -> Option<(Etcd, tokio::runtime::Runtime)> {
    let etcd = Etcd::start(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let cfg = etcd.config();
    let deadline = Instant::now() + Duration::from_secs(20);
    rt.block_on(async {
        loop {
            if let Ok(mut c) = sextant_coordinator::etcd::connect(&cfg).await {
                if c.lease_grant(5, None).await.is_ok() && c.get("x", None).await.is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "etcd does not answer");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    Some((etcd, rt))
}

/// The catalogue on etcd, whose next commit can be made to fail (etcd
/// unreachable) once. (A lost answer is the catalogue's own fault point,
/// [`EtcdCatalog::lose_next_reply`]: etcd applies the transaction, the
/// answer is dropped after it was sent.)
struct Flaky {
    inner: EtcdCatalog,
    fail_next: Mutex<Option<CatalogError>>,
}

impl TableCatalog for Flaky {
    fn commit(&self, member: &str, change: CatalogChange) -> Result<(), CatalogError> {
        if let Some(e) = self.fail_next.lock().unwrap().take() {
            return Err(e);
        }
        self.inner.commit(member, change)
    }
    fn referenced_files(&self) -> Result<std::collections::BTreeSet<String>, CatalogError> {
        self.inner.referenced_files()
    }
    fn last_commit_fence(&self, member: &str) -> Option<u64> {
        self.inner.last_commit_fence(member)
    }
    fn fence_void(&self, member: &str, fence: u64) -> Result<bool, CatalogError> {
        self.inner.fence_void(member, fence)
    }
    fn earlier_runs_void(&self, member: &str) -> Result<bool, CatalogError> {
        self.inner.earlier_runs_void(member)
    }
    fn merge(&self, member: &str, merged: TableManifest, gone: u64) -> Result<(), CatalogError> {
        self.inner.merge(member, merged, gone)
    }
    fn next_table_id(&self) -> Result<u64, CatalogError> {
        self.inner.next_table_id()
    }
    fn tables(&self, member: &str) -> Result<Vec<TableManifest>, CatalogError> {
        self.inner.tables(member)
    }
    fn journal_floor(&self, member: &str) -> Result<Option<u64>, CatalogError> {
        self.inner.journal_floor(member)
    }
}

/// A crash of server `a` (the store loses what was not synced) and its
/// engine opened again on the same catalogue and map.
fn crash_and_reopen(a: Server, store: &MemStore) -> (Engine, DelegationMap) {
    let Server {
        name,
        map,
        catalog,
        engine,
        host,
    } = a;
    drop(host);
    drop(engine);
    store.crash(None);
    let engine = Engine::open_member(
        Arc::new(store.clone()) as Arc<dyn Store>,
        engine_config(),
        MemberConfig {
            name,
            catalog: catalog as _,
        },
    )
    .unwrap();
    (engine, map)
}

/// The root table, as the cluster numbers it.
const ROOT: TableId = TableId(1);

fn engine_config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        table_dir_limit: 3,
        table_inode_limit: 12,
        ..Default::default()
    }
}

/// One server's pieces: the map, its catalogue, its engine, its host.
struct Server {
    name: String,
    map: DelegationMap,
    catalog: Arc<Flaky>,
    engine: Engine,
    host: EngineHost,
}

fn server(rt: &tokio::runtime::Runtime, cfg: &EtcdConfig, store: &MemStore, name: &str) -> Server {
    let map = rt.block_on(DelegationMap::start(cfg.clone())).unwrap();
    let catalog = Arc::new(Flaky {
        inner: EtcdCatalog::start(name, cfg.clone(), map.subscribe()).unwrap(),
        fail_next: Mutex::new(None),
    });
    let engine = Engine::open_member(
        Arc::new(store.clone()) as Arc<dyn Store>,
        engine_config(),
        MemberConfig {
            name: name.into(),
            catalog: Arc::clone(&catalog) as _,
        },
    )
    .unwrap();
    let host = EngineHost::default();
    host.set_engine(engine.clone());
    Server {
        name: name.into(),
        map,
        catalog,
        engine,
        host,
    }
}

impl Server {
    /// Checkpoints until the map names this server for every table its
    /// engine holds (a commit planned on a map that lags is `Stale`).
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.engine.sync().unwrap();
            let state = self.map.current();
            let held = self.engine.owned_tables();
            let known = held.iter().all(|t| {
                let t = TableId(u32::try_from(*t).unwrap());
                state.owner(t).is_some_and(|o| o.server == self.name)
            });
            if known {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the map never named {} for {held:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The grant the shell makes for `table` as etcd has it now, under
    /// membership generation `generation`, and the manifest it loads.
    fn grant(&self, table: u64, generation: u64) -> (Grant, Vec<u8>) {
        let t = TableId(u32::try_from(table).unwrap());
        let state = self.map.current();
        let owner = state.owner(t).expect("an owner").clone();
        let range = *state.tables.get(&t).expect("a range");
        let manifest = self
            .catalog
            .tables(&self.name)
            .unwrap()
            .into_iter()
            .find(|m| m.entry.id == table)
            .expect("its manifest");
        (
            Grant {
                table: t,
                range,
                epoch: owner.epoch,
                owner_rev: owner.rev,
                generation,
            },
            manifest.to_bytes(),
        )
    }
}

/// Joins as `name`: a lease and `member/<name>` on it, as the
/// membership does. Returns the lease.
fn join(rt: &tokio::runtime::Runtime, cfg: &EtcdConfig, name: &str) -> i64 {
    rt.block_on(async {
        let mut c = sextant_coordinator::etcd::connect(cfg).await.unwrap();
        let lease = c.lease_grant(60, None).await.unwrap().id();
        c.put(
            cfg.key(&member_key(name)),
            "127.0.0.1:1",
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
        lease
    })
}

/// The lease is gone (as when it expired while etcd was unreachable).
fn lose(rt: &tokio::runtime::Runtime, cfg: &EtcdConfig, lease: i64) {
    rt.block_on(async {
        let mut c = sextant_coordinator::etcd::connect(cfg).await.unwrap();
        c.lease_revoke(lease).await.unwrap();
    });
}

/// Until `map` has `name` on `lease`.
fn until_member(map: &DelegationMap, name: &str, lease: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while map.current().members.get(name).map(|m| m.lease) != Some(lease) {
        assert!(
            Instant::now() < deadline,
            "the map never saw {name} on {lease}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The catalogue's ranges (from etcd, through the map once it caught up
/// with `min_revision`): no two overlap and together they cover every
/// SOID.
fn check_partition(map: &DelegationMap, min_revision: i64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let state = loop {
        let s = map.current();
        if s.revision >= min_revision || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut ranges: Vec<(Soid, Soid, TableId)> = state
        .tables
        .iter()
        .map(|(t, r)| (r.first, r.last, *t))
        .collect();
    ranges.sort();
    let mut next = Some(Soid::MIN);
    for (first, last, t) in &ranges {
        if Some(*first) != next {
            return Err(format!(
                "a gap or an overlap before table {t} in the catalogue: {ranges:?}"
            ));
        }
        next = last.checked_next();
    }
    if next.is_some() {
        return Err(format!("the catalogue ends early: {ranges:?}"));
    }
    Ok(())
}

/// The etcd revision now (a put of a scratch key).
fn revision_now(rt: &tokio::runtime::Runtime, cfg: &EtcdConfig) -> i64 {
    rt.block_on(async {
        let mut c = sextant_coordinator::etcd::connect(cfg).await.unwrap();
        let r = c.put(cfg.key("test/scratch"), "x", None).await.unwrap();
        r.header().unwrap().revision()
    })
}

/// Snapshots of member `name` in the shared store that no manifest in
/// etcd names (left behind: nothing will ever read them).
fn unreferenced(store: &MemStore, catalog: &Flaky, name: &str) -> Vec<String> {
    let named = catalog.referenced_files().unwrap();
    store
        .list(&format!("members/{name}/tables/"))
        .unwrap()
        .into_iter()
        .filter(|f| !named.contains(f))
        .collect()
}

/// Snapshots a manifest in etcd names that the shared store lacks (a
/// table nobody can load).
fn missing(store: &MemStore, catalog: &Flaky) -> Vec<String> {
    let held: std::collections::BTreeSet<String> =
        store.list("members/").unwrap().into_iter().collect();
    catalog
        .referenced_files()
        .unwrap()
        .into_iter()
        .filter(|f| !held.contains(f))
        .collect()
}

/// The root table split while etcd did not answer: the split's commit
/// failed, the new table is only in the engine. Returns it, with the
/// directories made (each holding a file `f`), acknowledged.
fn split_uncommitted(a: &Server) -> (u64, Vec<Soid>) {
    split_failing(a, false)
}

/// [`split_uncommitted`], or (`lost_reply`) the split's commit applied by
/// etcd and its answer lost: the engine was told `Unavailable`.
fn split_failing(a: &Server, lost_reply: bool) -> (u64, Vec<Soid>) {
    let root = Credentials::root();
    a.settle();
    assert_eq!(a.engine.owned_tables(), vec![ROOT_TABLE_ID]);
    if lost_reply {
        a.catalog.inner.lose_next_reply();
    } else {
        *a.catalog.fail_next.lock().unwrap() = Some(CatalogError::Unavailable(
            "etcd unreachable (the lease is running out)".into(),
        ));
    }
    let mut dirs = Vec::new();
    for i in 0..40 {
        let d = a
            .engine
            .mkdir(&root, Soid::ROOT, format!("d{i}").as_bytes(), 0o755)
            .unwrap()
            .wait(&a.engine)
            .unwrap();
        a.engine
            .create(&root, d.soid, b"f", 0o644, true)
            .unwrap()
            .wait(&a.engine)
            .unwrap();
        dirs.push(d.soid);
        if a.engine.owned_tables().len() > 1 {
            break;
        }
    }
    let held = a.engine.owned_tables();
    assert_eq!(held.len(), 2, "the root table split once: {held:?}");
    assert!(
        a.catalog.fail_next.lock().unwrap().is_none(),
        "the split's commit was the one refused"
    );
    let n = held.into_iter().find(|t| *t != ROOT_TABLE_ID).unwrap();
    if lost_reply {
        // In etcd, owned by a: the map shows it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while a
            .map
            .current()
            .owner(TableId(u32::try_from(n).unwrap()))
            .is_none_or(|o| o.server != a.name)
        {
            assert!(Instant::now() < deadline, "the split is not in etcd");
            std::thread::sleep(Duration::from_millis(20));
        }
    } else {
        assert!(
            a.map.current().tables.keys().all(|t| u64::from(t.0) != n),
            "the split is not in etcd"
        );
    }
    // Acknowledged under the old lease, after the split: in both halves.
    for d in &dirs {
        a.engine
            .create(&root, *d, b"after-split", 0o644, true)
            .unwrap()
            .wait(&a.engine)
            .unwrap();
    }
    assert!(dirs.iter().any(|d| a.engine.table_holding(*d) == Some(n)));
    assert!(dirs
        .iter()
        .any(|d| a.engine.table_holding(*d) == Some(ROOT_TABLE_ID)));
    (n, dirs)
}

/// The lease lost and the server back under a new one before anybody
/// took its table (the owner key unchanged): it loads the table again
/// from etcd, acknowledges writes, and then checkpoints — the old split's
/// commit. Before the fix the table split off stayed in the engine when
/// the shell forgot its parent: the reload was refused ("overlaps table
/// N this member holds"), and the checkpoint committed N alone, over a
/// range etcd still gave the root table (the catalogue's ranges
/// overlapped; the root table was served by nobody).
#[test]
fn a_split_from_before_a_lost_lease_does_not_commit_after_the_reload() {
    let dir = tempfile::tempdir().unwrap();
    let Some((etcd, rt)) = setup(dir.path()) else {
        return;
    };
    let cfg = etcd.config();
    let store = MemStore::new();
    let root = Credentials::root();
    let l1 = join(&rt, &cfg, "a");
    let a = server(&rt, &cfg, &store, "a");
    until_member(&a.map, "a", l1);
    let (n, dirs) = split_uncommitted(&a);

    // The lease is lost: the shell forgets every table etcd names it for.
    lose(&rt, &cfg, l1);
    a.host.forget_table(ROOT);
    let held_after_forget = a.engine.owned_tables();
    // Back under a new lease, etcd still naming it: the shell loads the
    // table again from the manifest etcd holds.
    let l2 = join(&rt, &cfg, "a");
    until_member(&a.map, "a", l2);
    let (grant, manifest) = a.grant(ROOT_TABLE_ID, 2);
    let reload = a.host.add_table(&grant, Some(&manifest));
    if reload.is_ok() {
        for d in &dirs {
            a.engine
                .create(&root, *d, b"after-reload", 0o644, true)
                .unwrap()
                .wait(&a.engine)
                .unwrap();
        }
    }
    // The next checkpoint: whatever the engine still has of the old split.
    a.engine.sync().unwrap();
    let rev = revision_now(&rt, &cfg);
    check_partition(&a.map, rev).unwrap();
    reload.expect("the table loads again after the rejoin");
    assert!(
        held_after_forget.is_empty(),
        "a table split off a forgotten one is forgotten too: {held_after_forget:?} still held"
    );
    a.settle();
    check_partition(&a.map, revision_now(&rt, &cfg)).unwrap();
    // Table numbers are never handed out twice: the old split's table
    // is in the catalogue only if its commit landed.
    assert!(
        a.map.current().tables.keys().all(|t| u64::from(t.0) != n),
        "the split from before the lease loss was committed"
    );
    // The snapshots the failed split wrote (and the one the reload
    // replaced) are gone from the shared store; every one etcd names is
    // there.
    a.engine.sync().unwrap();
    assert_eq!(missing(&store, &a.catalog), Vec::<String>::new());
    assert_eq!(
        unreferenced(&store, &a.catalog, "a"),
        Vec::<String>::new(),
        "snapshots nothing names are left in the shared store"
    );

    // A crash and a restart: every acknowledged operation is there.
    let (engine, map) = crash_and_reopen(a, &store);
    for d in &dirs {
        for name in [&b"f"[..], b"after-split", b"after-reload"] {
            engine
                .lookup(&root, *d, name)
                .unwrap_or_else(|e| panic!("{} in {d:?} lost: {e}", String::from_utf8_lossy(name)));
        }
    }
    drop(engine);
    drop(map);
}

/// The lease lost and the root table failed over to server b before a
/// comes back (its owner key rewritten). a's next checkpoint must not
/// commit the table split off it — before the fix it did (a new table is
/// fenced only by its number being unused), and the catalogue then gave
/// the split-off range both to b (inside the root table) and to a (the
/// new table), which a served again as soon as the map named it. b, loading
/// the root table, replays a's journal: every write a acknowledged before
/// the lease was lost is there.
#[test]
fn a_split_from_before_a_lost_lease_does_not_commit_after_a_failover() {
    let dir = tempfile::tempdir().unwrap();
    let Some((etcd, rt)) = setup(dir.path()) else {
        return;
    };
    let cfg = etcd.config();
    let store = MemStore::new();
    let root = Credentials::root();
    let l1 = join(&rt, &cfg, "a");
    let a = server(&rt, &cfg, &store, "a");
    until_member(&a.map, "a", l1);
    let lb = join(&rt, &cfg, "b");
    let b = server(&rt, &cfg, &store, "b");
    until_member(&b.map, "b", lb);
    let (n, dirs) = split_uncommitted(&a);

    // The lease is lost; the coordinator gives the root table to b, and a
    // rejoins.
    lose(&rt, &cfg, l1);
    a.host.forget_table(ROOT);
    rt.block_on(async {
        let mut c = sextant_coordinator::etcd::connect(&cfg).await.unwrap();
        let owner = OwnerValue {
            epoch: Epoch(2),
            server: "b".into(),
        };
        c.put(cfg.key(&owner_key(ROOT)), owner.encode(), None)
            .await
            .unwrap();
    });
    let l2 = join(&rt, &cfg, "a");
    until_member(&a.map, "a", l2);
    // a checkpoints (what it still holds), then b loads the table.
    a.engine.sync().unwrap();
    let rev = revision_now(&rt, &cfg);
    check_partition(&a.map, rev).unwrap();
    assert!(
        a.engine.owned_tables().is_empty(),
        "a serves nothing: {:?}",
        a.engine.owned_tables()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while b.map.current().owner(ROOT).is_none_or(|o| o.server != "b") {
        assert!(Instant::now() < deadline, "b's map never names it");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (grant, manifest) = b.grant(ROOT_TABLE_ID, 1);
    b.host.add_table(&grant, Some(&manifest)).unwrap();
    for d in &dirs {
        for name in [&b"f"[..], b"after-split"] {
            b.engine
                .lookup(&root, *d, name)
                .unwrap_or_else(|e| panic!("{} in {d:?} lost: {e}", String::from_utf8_lossy(name)));
        }
    }
    b.settle();
    check_partition(&b.map, revision_now(&rt, &cfg)).unwrap();
    assert!(
        b.map.current().tables.keys().all(|t| u64::from(t.0) != n),
        "the split from before the lease loss was committed"
    );
    // a's next checkpoint sweeps what it wrote that nothing names now:
    // the failed split's snapshots, and the root table's b replaced.
    a.engine.sync().unwrap();
    assert_eq!(missing(&store, &a.catalog), Vec::<String>::new());
    assert_eq!(
        unreferenced(&store, &a.catalog, "a"),
        Vec::<String>::new(),
        "snapshots nothing names are left in the shared store"
    );
}

/// Until `map` names `server` for `table`.
fn until_owner(map: &DelegationMap, table: u64, server: &str) {
    let t = TableId(u32::try_from(table).unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while map.current().owner(t).is_none_or(|o| o.server != server) {
        assert!(
            Instant::now() < deadline,
            "the map never named {server} for {t}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The split's transaction applied by etcd, its reply lost (the server
/// was told the outcome is unknown), the lease kept: the server serves
/// both halves on, the shell's ADD of the new table (the map names the
/// server for it) finds it held, the next checkpoint commits both again
/// (as updates now), nothing it wrote is deleted while etcd names it, and
/// a crash and restart finds every acknowledged write.
#[test]
fn a_split_whose_reply_was_lost_commits_once_and_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let Some((etcd, rt)) = setup(dir.path()) else {
        return;
    };
    let cfg = etcd.config();
    let store = MemStore::new();
    let root = Credentials::root();
    let l1 = join(&rt, &cfg, "a");
    let a = server(&rt, &cfg, &store, "a");
    until_member(&a.map, "a", l1);
    let (n, dirs) = split_failing(&a, true);
    check_partition(&a.map, revision_now(&rt, &cfg)).unwrap();
    let (grant, manifest) = a.grant(n, 1);
    a.host.add_table(&grant, Some(&manifest)).unwrap();
    let mut held = a.engine.owned_tables();
    held.sort_unstable();
    assert_eq!(held, vec![ROOT_TABLE_ID, n], "both halves serve here");
    for d in &dirs {
        a.engine
            .create(&root, *d, b"after-lost-reply", 0o644, true)
            .unwrap()
            .wait(&a.engine)
            .unwrap();
    }
    a.settle();
    a.engine.sync().unwrap();
    check_partition(&a.map, revision_now(&rt, &cfg)).unwrap();
    assert_eq!(missing(&store, &a.catalog), Vec::<String>::new());
    let state = a.map.current();
    assert_eq!(
        state.tables.len(),
        2,
        "two tables in the catalogue: {:?}",
        state.tables
    );
    // The commit was read back as applied: none of its snapshots is kept
    // in doubt (left in the store once replaced).
    assert_eq!(
        unreferenced(&store, &a.catalog, "a"),
        Vec::<String>::new(),
        "snapshots nothing names are left in the shared store"
    );

    let (engine, map) = crash_and_reopen(a, &store);
    let mut held = engine.owned_tables();
    held.sort_unstable();
    assert_eq!(held, vec![ROOT_TABLE_ID, n]);
    for d in &dirs {
        for name in [&b"f"[..], b"after-split", b"after-lost-reply"] {
            engine
                .lookup(&root, *d, name)
                .unwrap_or_else(|e| panic!("{} in {d:?} lost: {e}", String::from_utf8_lossy(name)));
        }
    }
    drop(engine);
    drop(map);
}

/// The split's transaction applied, its reply lost, then the lease lost
/// too (etcd unreachable: why the reply was lost): the shell forgets the
/// tables, both halves are failed over to b, a rejoins. a must serve
/// nothing and must not delete the snapshots etcd names for them (its
/// sweep of unreferenced snapshots runs meanwhile); b loads both halves
/// and finds every acknowledged write; once b replaced them, a's next
/// checkpoint removes a's snapshots nothing names.
#[test]
fn a_split_whose_reply_was_lost_fails_over_whole() {
    let dir = tempfile::tempdir().unwrap();
    let Some((etcd, rt)) = setup(dir.path()) else {
        return;
    };
    let cfg = etcd.config();
    let store = MemStore::new();
    let root = Credentials::root();
    let l1 = join(&rt, &cfg, "a");
    let a = server(&rt, &cfg, &store, "a");
    until_member(&a.map, "a", l1);
    let lb = join(&rt, &cfg, "b");
    let b = server(&rt, &cfg, &store, "b");
    until_member(&b.map, "b", lb);
    let (n, dirs) = split_failing(&a, true);
    let (grant, manifest) = a.grant(n, 1);
    a.host.add_table(&grant, Some(&manifest)).unwrap();

    lose(&rt, &cfg, l1);
    a.host.forget_table(ROOT);
    a.host.forget_table(TableId(u32::try_from(n).unwrap()));
    assert!(a.engine.owned_tables().is_empty());
    rt.block_on(async {
        let mut c = sextant_coordinator::etcd::connect(&cfg).await.unwrap();
        for t in [ROOT, TableId(u32::try_from(n).unwrap())] {
            let owner = OwnerValue {
                epoch: Epoch(2),
                server: "b".into(),
            };
            c.put(cfg.key(&owner_key(t)), owner.encode(), None)
                .await
                .unwrap();
        }
    });
    let l2 = join(&rt, &cfg, "a");
    until_member(&a.map, "a", l2);
    // a's checkpoint and sweep: what etcd names stays.
    a.engine.sync().unwrap();
    assert_eq!(
        missing(&store, &a.catalog),
        Vec::<String>::new(),
        "a deleted a snapshot etcd names"
    );
    assert!(a.engine.owned_tables().is_empty());
    for t in [ROOT_TABLE_ID, n] {
        until_owner(&b.map, t, "b");
        let (grant, manifest) = b.grant(t, 1);
        b.host.add_table(&grant, Some(&manifest)).unwrap();
    }
    for d in &dirs {
        for name in [&b"f"[..], b"after-split"] {
            b.engine
                .lookup(&root, *d, name)
                .unwrap_or_else(|e| panic!("{} in {d:?} lost: {e}", String::from_utf8_lossy(name)));
        }
    }
    b.settle();
    check_partition(&b.map, revision_now(&rt, &cfg)).unwrap();
    a.engine.sync().unwrap();
    assert_eq!(missing(&store, &a.catalog), Vec::<String>::new());
    assert_eq!(
        unreferenced(&store, &a.catalog, "a"),
        Vec::<String>::new(),
        "snapshots nothing names are left in the shared store"
    );
}

/// Acknowledged creates of `names` in the root directory.
fn create_all(a: &Server, names: &[&str]) {
    let root = Credentials::root();
    for n in names {
        a.engine
            .create(&root, Soid::ROOT, n.as_bytes(), 0o644, true)
            .unwrap()
            .wait(&a.engine)
            .unwrap();
    }
}

/// The root table's manifest as etcd has it now.
fn root_manifest(a: &Server) -> TableManifest {
    a.catalog
        .tables(&a.name)
        .unwrap()
        .into_iter()
        .find(|m| m.entry.id == ROOT_TABLE_ID)
        .expect("the root table's manifest")
}

/// Server a, settled, with a checkpoint of the root table (commit A)
/// whose transaction is held back by the network (the server is told
/// the outcome is unknown), then writes and a later checkpoint (commit
/// B) that applies. Returns A's snapshot (in nobody's manifest) and the
/// manifest B committed.
fn held_then_later(a: &Server, store: &MemStore) -> (String, TableManifest) {
    a.settle();
    assert_eq!(unreferenced(store, &a.catalog, "a"), Vec::<String>::new());
    create_all(a, &["a1", "a2"]);
    a.catalog.inner.hold_next();
    a.engine.sync().unwrap();
    let held = unreferenced(store, &a.catalog, "a");
    assert_eq!(held.len(), 1, "commit A's snapshot: {held:?}");
    create_all(a, &["b1", "b2"]);
    a.engine.sync().unwrap();
    let later = root_manifest(a);
    assert_ne!(later.entry.file, held[0], "commit B applied");
    (held[0].clone(), later)
}

/// Issue 20, a manifest going back: commit A of a table sent and not
/// answered (held in the network), commit B of the same table sent and
/// applied under the same lease and owner revision, then A delivered.
/// Before the fix A applied (its fences — the owner key's revision and
/// the member key's lease — were unchanged by B) and moved the manifest
/// back to A's snapshot and journal position: what B committed was lost
/// to a reload, and the snapshot A names was already swept. Now A
/// compares the manifest revision B moved past: refused.
#[test]
fn a_commit_delivered_after_a_later_one_never_applies() {
    let dir = tempfile::tempdir().unwrap();
    let Some((etcd, rt)) = setup(dir.path()) else {
        return;
    };
    let cfg = etcd.config();
    let store = MemStore::new();
    let l1 = join(&rt, &cfg, "a");
    let a = server(&rt, &cfg, &store, "a");
    until_member(&a.map, "a", l1);
    let (_, later) = held_then_later(&a, &store);
    assert_eq!(
        a.catalog.inner.release_held().unwrap(),
        Some(false),
        "the commit prepared before the applied one applied after it"
    );
    assert_eq!(
        root_manifest(&a),
        later,
        "the root table's manifest went back"
    );
    assert_eq!(missing(&store, &a.catalog), Vec::<String>::new());
    // A restart from the catalogue finds every acknowledged write.
    let (engine, map) = crash_and_reopen(a, &store);
    let root = Credentials::root();
    for name in ["a1", "a2", "b1", "b2"] {
        engine
            .lookup(&root, Soid::ROOT, name.as_bytes())
            .unwrap_or_else(|e| panic!("{name} lost: {e}"));
    }
    drop(engine);
    drop(map);
}

/// Issue 20, a commit in doubt while the lease is kept: A's answer lost
/// and A not found applied, so its snapshot may still be named — until
/// commit B of the same table applied, after which A can never apply
/// (it compares the manifest revision B moved past). The sweep after B
/// deletes A's snapshot; before, it stayed in doubt (its only fence was
/// the membership lease, which was kept) until the server restarted.
#[test]
fn a_commit_in_doubt_is_void_once_a_later_one_applied_and_its_snapshot_swept() {
    let dir = tempfile::tempdir().unwrap();
    let Some((etcd, rt)) = setup(dir.path()) else {
        return;
    };
    let cfg = etcd.config();
    let store = MemStore::new();
    let l1 = join(&rt, &cfg, "a");
    let a = server(&rt, &cfg, &store, "a");
    until_member(&a.map, "a", l1);
    let (held, _) = held_then_later(&a, &store);
    assert_eq!(
        unreferenced(&store, &a.catalog, "a"),
        Vec::<String>::new(),
        "the snapshot of the commit in doubt ({held}) is left although a later commit applied"
    );
    assert_eq!(missing(&store, &a.catalog), Vec::<String>::new());
    // And indeed it can never apply.
    assert_eq!(a.catalog.inner.release_held().unwrap(), Some(false));
    assert_eq!(missing(&store, &a.catalog), Vec::<String>::new());
}

/// Issue 20, earlier runs' snapshots: run 1 of server a leaves a snapshot
/// nothing names (a checkpoint whose transaction is held in the network)
/// and dies. Run 2 (a new process: a new lease, a new catalogue) holds
/// the root table again without its owner key rewritten — a restart
/// without any failover — and sweeps run 1's leftover: nothing of run 1
/// can apply any more (its commits and its DROP handovers all compare the
/// member key's lease), and run 1's held commit, delivered then, is
/// refused. (Run 2 used to keep it: handovers compared the owner revision
/// only, so the sweep waited for the owner key to be rewritten, and a
/// single server never swept.) Run 3, after a failover re-granted the
/// table, sweeps too.
#[test]
fn earlier_runs_snapshots_are_swept_once_nothing_of_theirs_can_apply() {
    let dir = tempfile::tempdir().unwrap();
    let Some((etcd, rt)) = setup(dir.path()) else {
        return;
    };
    let cfg = etcd.config();
    let store = MemStore::new();
    let open = |name: &str, lease: i64| {
        let s = server(&rt, &cfg, &store, name);
        until_member(&s.map, name, lease);
        s.settle();
        s
    };
    // Run 1: a checkpoint held back, then the process dies.
    let l1 = join(&rt, &cfg, "a");
    let run1 = open("a", l1);
    create_all(&run1, &["r1a", "r1b"]);
    run1.catalog.inner.hold_next();
    run1.engine.sync().unwrap();
    let leftover = unreferenced(&store, &run1.catalog, "a");
    assert_eq!(leftover.len(), 1, "run 1's held snapshot: {leftover:?}");
    let Server {
        engine,
        host,
        catalog: run1_catalog,
        map: run1_map,
        ..
    } = run1;
    drop(host);
    drop(engine);
    lose(&rt, &cfg, l1);

    // Run 2: the owner key as run 1 left it.
    let l2 = join(&rt, &cfg, "a");
    let run2 = open("a", l2);
    create_all(&run2, &["r2"]);
    run2.engine.sync().unwrap();
    assert!(
        run2.catalog.earlier_runs_void("a").unwrap(),
        "nothing of run 1 can apply, owner key rewritten or not"
    );
    assert_eq!(
        unreferenced(&store, &run2.catalog, "a"),
        Vec::<String>::new(),
        "a restart without failover left earlier runs' snapshots nothing names"
    );
    assert_eq!(
        run1_catalog.inner.release_held().unwrap(),
        Some(false),
        "run 1's commit applied after run 2's"
    );
    assert_eq!(missing(&store, &run2.catalog), Vec::<String>::new());
    let Server {
        engine, host, map, ..
    } = run2;
    drop(host);
    drop(engine);
    drop(map);
    lose(&rt, &cfg, l2);

    // Run 3, after a failover re-granted the root table to a.
    let l3 = join(&rt, &cfg, "a");
    rt.block_on(async {
        let mut c = sextant_coordinator::etcd::connect(&cfg).await.unwrap();
        let owner = OwnerValue {
            epoch: Epoch(2),
            server: "a".into(),
        };
        c.put(cfg.key(&owner_key(ROOT)), owner.encode(), None)
            .await
            .unwrap();
    });
    let rev = revision_now(&rt, &cfg);
    let run3 = server(&rt, &cfg, &store, "a");
    until_member(&run3.map, "a", l3);
    while run3.map.current().revision < rev {
        std::thread::sleep(Duration::from_millis(20));
    }
    run3.settle();
    create_all(&run3, &["r3"]);
    run3.engine.sync().unwrap();
    assert_eq!(missing(&store, &run3.catalog), Vec::<String>::new());
    assert_eq!(
        unreferenced(&store, &run3.catalog, "a"),
        Vec::<String>::new(),
        "earlier runs' snapshots nothing names are left in the shared store"
    );
    let root = Credentials::root();
    for name in ["r1a", "r1b", "r2", "r3"] {
        run3.engine
            .lookup(&root, Soid::ROOT, name.as_bytes())
            .unwrap_or_else(|e| panic!("{name} lost: {e}"));
    }
    drop(run1_map);
}
