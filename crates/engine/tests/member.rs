//! Member mode (issue 20): engines that each own some of the namespace's
//! tables, on one shared store, with an in-memory table catalogue.
//!
//! - operations on the owning member work; on another they fail with
//!   `WrongServer` and change nothing;
//! - DROP on one member + ADD on another moves a table without copying it,
//!   and the new owner sees every acknowledged change;
//! - splits allocate table ids from the catalogue and commit the new
//!   tables' manifests; they are owned and catalogued;
//! - a member recovers its tables from its own journal after a crash, and
//!   a live member takes over a dead one's tables by replaying the dead
//!   one's journal (failover);
//! - bad manifest bytes are a typed error;
//! - a DROP whose final commit is refused without fencing leaves the table
//!   served as it was, and a retry moves it; one the catalogue fences
//!   leaves it to its new owner.

mod common;

use common::{config, create, member, member_of, mkdir, store_and_catalog};
use sextant_engine::member::{ManifestDecodeError, ROOT_TABLE_ID};
use sextant_engine::store::{MemStore, Store};
use sextant_engine::{
    CatalogChange, CatalogError, Engine, EngineConfig, EngineError, MemCatalog, MemberConfig,
    TableCatalog, TableManifest,
};
use sextant_types::{Attr, Credentials, FsError, Soid};
use std::sync::{Arc, Mutex};

/// Sets the xattr `user.k` of `soid` to `value` as root on `e`, durable.
fn set_k(e: &Engine, soid: Soid, value: &[u8]) {
    e.setxattr(
        &Credentials::root(),
        soid,
        b"user.k",
        value,
        Default::default(),
    )
    .unwrap()
    .wait(e)
    .unwrap();
}

fn names(e: &Engine, dir: Soid) -> Vec<Vec<u8>> {
    let mut n: Vec<Vec<u8>> = e
        .readdir(&Credentials::root(), dir, 0, 1000)
        .unwrap()
        .into_iter()
        .map(|d| d.name.to_vec())
        .collect();
    n.sort();
    n
}

/// Ten directories under the root, each with four files: enough to split
/// the root table several times with the small limits of `config`.
fn populate(e: &Engine) -> Vec<Attr> {
    let mut dirs = Vec::new();
    for i in 0..10 {
        let d = mkdir(e, Soid::ROOT, format!("d{i}").as_bytes());
        for j in 0..4 {
            create(e, d.soid, format!("f{j}").as_bytes());
        }
        dirs.push(d);
    }
    dirs
}

#[test]
fn first_member_creates_the_root_and_the_others_get_wrong_server() {
    let (store, catalog) = store_and_catalog();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    assert_eq!(a.owned_tables(), vec![ROOT_TABLE_ID]);
    assert!(b.owned_tables().is_empty());
    assert_eq!(a.table_holding(Soid::ROOT), Some(ROOT_TABLE_ID));
    assert_eq!(b.table_holding(Soid::ROOT), None);
    let root = Credentials::root();
    let wrong = FsError::WrongServer { soid: Soid::ROOT };
    assert_eq!(b.mkdir(&root, Soid::ROOT, b"x", 0o755).unwrap_err(), wrong);
    assert_eq!(b.getattr(Soid::ROOT).unwrap_err(), wrong);
    assert_eq!(b.lookup(&root, Soid::ROOT, b"x").unwrap_err(), wrong);
    assert!(names(&a, Soid::ROOT).is_empty(), "b changed nothing");
    mkdir(&a, Soid::ROOT, b"x");
    assert_eq!(names(&a, Soid::ROOT), vec![b"x".to_vec()]);
    assert_eq!(catalog.owner(ROOT_TABLE_ID).as_deref(), Some("a"));
}

#[test]
fn splits_make_owned_catalogued_tables() {
    let (store, catalog) = store_and_catalog();
    let a = member(&store, &catalog, "a");
    let dirs = populate(&a);
    let owned = a.owned_tables();
    assert!(owned.len() > 1, "the root table split: {owned:?}");
    let mut catalogued: Vec<u64> = catalog
        .tables("a")
        .unwrap()
        .iter()
        .map(|m| m.entry.id)
        .collect();
    catalogued.sort();
    let mut sorted = owned.clone();
    sorted.sort();
    assert_eq!(sorted, catalogued, "every table is in the catalogue");
    for d in &dirs {
        assert!(a.table_holding(d.soid).is_some());
    }
    // Every served table's counters: their inode counts together are
    // every inode (the root, 10 directories, 40 files), and each count of
    // operations started no later than now.
    let counters = a.table_counters();
    let mut counted: Vec<u64> = counters.iter().map(|c| c.table).collect();
    counted.sort();
    assert_eq!(counted, sorted);
    assert_eq!(
        counters.iter().map(|c| c.inodes).sum::<u64>(),
        51,
        "{counters:?}"
    );
    assert!(counters.iter().all(|c| c.inodes > 0), "{counters:?}");
    assert!(counters.iter().any(|c| c.ops > 0), "{counters:?}");
    assert!(counters
        .iter()
        .all(|c| c.since <= std::time::Instant::now()));
    // The catalogued ranges partition the SOID space.
    let mut ms = catalog.tables("a").unwrap();
    ms.sort_by_key(|m| m.entry.range.first);
    let mut next = Some(Soid::MIN);
    for m in &ms {
        assert_eq!(Some(m.entry.range.first), next);
        next = m.entry.range.last.checked_next();
    }
    assert_eq!(next, None);
}

/// A table other than the root's, holding directory `d` and its files.
fn movable(e: &Engine, dirs: &[Attr]) -> (u64, Attr) {
    dirs.iter()
        .find_map(|d| {
            let t = e.table_holding(d.soid)?;
            let files_too = (0..4).all(|j| {
                let f = e
                    .lookup(&Credentials::root(), d.soid, format!("f{j}").as_bytes())
                    .unwrap();
                e.table_holding(f.soid) == Some(t)
            });
            (t != ROOT_TABLE_ID && files_too).then(|| (t, d.clone()))
        })
        .expect("some directory is in a table of its own")
}

/// Members a and b on one store (with its catalogue), the tree of
/// [`populate`] made through a, and a table of a's to move with a
/// directory in it ([`movable`]).
type Pair = (
    MemStore,
    Arc<MemCatalog>,
    Engine,
    Engine,
    Vec<Attr>,
    u64,
    Attr,
);

fn pair_with_a_movable_table() -> Pair {
    let (store, catalog) = store_and_catalog();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let dirs = populate(&a);
    let (t, d) = movable(&a, &dirs);
    (store, catalog, a, b, dirs, t, d)
}

#[test]
fn drop_and_add_move_a_table_with_every_acknowledged_change() {
    let (store, catalog, a, b, _, t, d) = pair_with_a_movable_table();
    let root = Credentials::root();
    // An acknowledged change not yet written back.
    set_k(&a, d.soid, b"v1");
    let before = names(&a, d.soid);
    let snapshots_before = store.list("").unwrap().len();

    let dropped = a.drop_table(t).unwrap();
    assert_eq!(dropped.replay, None, "a clean drop needs no replay");
    assert_eq!(
        a.getattr(d.soid).unwrap_err(),
        FsError::WrongServer { soid: d.soid }
    );
    assert!(!a.owned_tables().contains(&t));
    // The manifest travels as bytes (etcd holds it).
    let bytes = dropped.to_bytes();
    let manifest = TableManifest::from_bytes(&bytes).unwrap();
    assert!(catalog.assign(t, "b"));
    let added = b.add_table(&manifest).unwrap();
    assert_eq!(
        added.entry.file, dropped.entry.file,
        "no copy: same snapshot"
    );
    assert_eq!(added.replay.as_ref().unwrap().member, "b");
    assert_eq!(catalog.manifest(t), Some(added));
    assert!(store.list("").unwrap().len() <= snapshots_before + 2);

    assert_eq!(names(&b, d.soid), before);
    assert_eq!(
        b.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
        b"v1"
    );
    assert_eq!(b.table_holding(d.soid), Some(t));
    // b changes it; then it goes back to a, which sees the change.
    set_k(&b, d.soid, b"v2");
    b.unlink(&root, d.soid, b"f0").unwrap().wait(&b).unwrap();
    let back = b.drop_table(t).unwrap();
    assert!(catalog.assign(t, "a"));
    a.add_table(&back).unwrap();
    assert_eq!(
        a.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
        b"v2"
    );
    assert_eq!(names(&a, d.soid).len(), before.len() - 1);
    assert_eq!(
        b.getattr(d.soid).unwrap_err(),
        FsError::WrongServer { soid: d.soid }
    );
}

#[test]
fn an_add_without_ownership_is_refused_and_changes_nothing() {
    let (_, _, a, b, _, t, d) = pair_with_a_movable_table();
    let m = a.drop_table(t).unwrap();
    // Not assigned to b: the catalogue refuses b's commit.
    assert!(b.add_table(&m).is_err());
    assert!(b.owned_tables().is_empty());
    assert_eq!(
        b.getattr(d.soid).unwrap_err(),
        FsError::WrongServer { soid: d.soid }
    );
    // a may take it back.
    a.add_table(&m).unwrap();
    assert!(a.getattr(d.soid).is_ok());
}

#[test]
fn operations_spanning_members_are_cross_server_and_change_nothing() {
    let (_, catalog, a, b, dirs, t, d) = pair_with_a_movable_table();
    let root = Credentials::root();
    let m = a.drop_table(t).unwrap();
    catalog.assign(t, "b");
    b.add_table(&m).unwrap();
    let other = dirs
        .iter()
        .find(|o| a.table_holding(o.soid).is_some())
        .unwrap();
    let root_names = names(&a, Soid::ROOT);
    // A rename from a's directory into b's: starts on a, needs b's table.
    let r = a.rename(
        &root,
        other.soid,
        b"f1",
        d.soid,
        b"moved",
        Default::default(),
    );
    assert!(
        matches!(r.unwrap_err(), FsError::NeedsTable { .. }),
        "the rename needs b's table"
    );
    assert_eq!(names(&a, Soid::ROOT), root_names);
    assert!(a.lookup(&root, other.soid, b"f1").is_ok());
    assert_eq!(names(&b, d.soid).len(), 4);
}

#[test]
fn a_member_recovers_its_tables_after_a_crash() {
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let (dirs, t, d) = {
        let a = member(&store, &catalog, "a");
        let b = member(&store, &catalog, "b");
        let dirs = populate(&a);
        let (t, d) = movable(&a, &dirs);
        let m = a.drop_table(t).unwrap();
        catalog.assign(t, "b");
        b.add_table(&m).unwrap();
        create(&b, d.soid, b"new");
        create(&a, Soid::ROOT, b"top");
        (dirs, t, d)
    };
    store.crash(None);
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    assert!(b.owned_tables().contains(&t));
    assert!(b.lookup(&root, d.soid, b"new").is_ok());
    assert!(a.lookup(&root, Soid::ROOT, b"top").is_ok());
    for x in &dirs {
        let owner = if a.table_holding(x.soid).is_some() {
            &a
        } else {
            &b
        };
        assert_eq!(owner.getattr(x.soid).unwrap().soid, x.soid);
    }
}

#[test]
fn failover_replays_the_dead_members_journal() {
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let dirs = {
        let dirs = populate(&a);
        // Acknowledged, never written back: only in a's journal.
        for d in &dirs {
            set_k(&a, d.soid, b"acked");
        }
        drop(a); // a dies (no close): what was not synced is lost below
        dirs
    };
    store.crash(None);
    for (id, owner, _) in catalog.all() {
        assert_eq!(owner, "a");
        catalog.assign(id, "b");
    }
    let taken = catalog.tables("b").unwrap();
    assert!(taken.len() > 1);
    for m in &taken {
        assert_eq!(m.replay.as_ref().unwrap().member, "a");
    }
    // One batch: a's journal is read once for all of them.
    for added in b.add_tables(&taken).unwrap() {
        assert_eq!(added.replay.unwrap().member, "b");
    }
    for d in &dirs {
        assert_eq!(
            b.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
            b"acked"
        );
        assert_eq!(names(&b, d.soid).len(), 4);
    }
    assert_eq!(names(&b, Soid::ROOT).len(), dirs.len());
    // b's own restart keeps them (they now replay from b's journal).
    drop(b);
    store.crash(None);
    let b = member(&store, &catalog, "b");
    for d in &dirs {
        assert_eq!(
            b.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
            b"acked"
        );
    }
}

#[test]
fn bad_manifest_bytes_are_a_typed_error() {
    assert_eq!(
        TableManifest::from_bytes(b"not a manifest at all"),
        Err(ManifestDecodeError::BadHeader)
    );
    let (store, catalog) = store_and_catalog();
    let _a = member(&store, &catalog, "a");
    let mut bytes = catalog.manifest(ROOT_TABLE_ID).unwrap().to_bytes();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    assert_eq!(
        TableManifest::from_bytes(&bytes),
        Err(ManifestDecodeError::Checksum)
    );
}

#[test]
fn revoke_stops_serving_at_once_and_keeps_the_records_for_failover() {
    let (_, catalog, a, b, _, t, d) = pair_with_a_movable_table();
    let root = Credentials::root();
    a.setxattr(
        &root,
        d.soid,
        b"user.k",
        b"only-in-a's-journal",
        Default::default(),
    )
    .unwrap()
    .wait(&a)
    .unwrap();
    assert!(a.revoke_table(t));
    assert_eq!(
        a.getattr(d.soid).unwrap_err(),
        FsError::WrongServer { soid: d.soid }
    );
    // a checkpoints: it must not trim what b needs.
    a.sync().unwrap();
    catalog.assign(t, "b");
    let m = catalog.manifest(t).unwrap();
    assert_eq!(m.replay.as_ref().unwrap().member, "a");
    b.add_table(&m).unwrap();
    assert_eq!(
        b.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
        b"only-in-a's-journal"
    );
}

#[test]
fn a_new_table_from_the_coordinator_can_be_the_root() {
    let (store, catalog) = store_and_catalog();
    // The coordinator bootstraps: id 1 is taken before any member opens.
    assert_eq!(catalog.next_table_id().unwrap(), ROOT_TABLE_ID);
    let a = member(&store, &catalog, "a");
    assert!(a.owned_tables().is_empty());
    let m = a
        .add_new_table(ROOT_TABLE_ID, sextant_types::SoidRange::ALL)
        .unwrap();
    assert_eq!(catalog.manifest(ROOT_TABLE_ID), Some(m));
    mkdir(&a, Soid::ROOT, b"d");
    drop(a);
    store.crash(None);
    let a = member(&store, &catalog, "a");
    assert_eq!(names(&a, Soid::ROOT), vec![b"d".to_vec()]);
}

#[test]
fn search_sees_only_the_members_own_tables() {
    use sextant_engine::search::{Expr, Scope};
    let (store, catalog) = store_and_catalog();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let root = Credentials::root();
    let dirs = populate(&a);
    let all = |e: &Engine| {
        e.search_collect(&root, Scope::Soid(Soid::ROOT), &Expr::True, usize::MAX)
            .map(|h| h.len())
    };
    let before = all(&a).unwrap();
    let (t, _) = movable(&a, &dirs);
    let moved = catalog.manifest(t).unwrap();
    let m = a.drop_table(t).unwrap();
    catalog.assign(t, "b");
    b.add_table(&m).unwrap();
    let on_a = all(&a).unwrap();
    assert!(
        on_a < before,
        "a no longer sees table {t}: {on_a} < {before}"
    );
    assert!(on_a + moved.entry.inodes as usize >= before);
    // b holds no root: its search from the root goes to the root's owner.
    assert_eq!(all(&b), Err(FsError::WrongServer { soid: Soid::ROOT }));
}

/// Operations run on two members from several threads while tables move
/// between them and checkpoints run: every acknowledged create is there
/// at the end, on the table's owner, and every refused one is not.
#[test]
fn moves_under_load_lose_nothing_acknowledged() {
    let (store, catalog) = store_and_catalog();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let root = Credentials::root();
    let dirs = populate(&a);
    let members = [a, b];
    let stop = std::sync::atomic::AtomicBool::new(false);
    let route = |soid: Soid| members.iter().find(|e| e.table_holding(soid).is_some());
    let results: Vec<Vec<(Soid, Vec<u8>, bool)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|w| {
                let (dirs, route, root) = (&dirs, &route, &root);
                s.spawn(move || {
                    let mut done = Vec::new();
                    for i in 0..60 {
                        let d = dirs[(w * 7 + i) % dirs.len()].soid;
                        let name = format!("w{w}-{i}").into_bytes();
                        let mut ok = false;
                        for _ in 0..200 {
                            let Some(e) = route(d) else {
                                std::thread::yield_now();
                                continue;
                            };
                            match e
                                .create(root, d, &name, 0o644, true)
                                .and_then(|c| c.wait(e))
                            {
                                Ok(_) => {
                                    ok = true;
                                    break;
                                }
                                Err(FsError::WrongServer { .. } | FsError::NeedsTable { .. }) => {
                                    std::thread::sleep(std::time::Duration::from_micros(200))
                                }
                                Err(e) => panic!("create: {e}"),
                            }
                        }
                        done.push((d, name, ok));
                    }
                    done
                })
            })
            .collect();
        let mover = s.spawn(|| {
            let mut x = 0x9e3779b97f4a7c15u64;
            let mut moves = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let all = catalog.all();
                let (id, owner, _) = &all[(x as usize) % all.len()];
                let (from, to) = if owner == "a" { (0, 1) } else { (1, 0) };
                if x.is_multiple_of(5) {
                    members[from].sync().unwrap();
                }
                let m = members[from].drop_table(*id).unwrap();
                assert!(catalog.assign(*id, ["a", "b"][to]));
                members[to].add_table(&m).unwrap();
                moves += 1;
            }
            moves
        });
        let results = workers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let moves = mover.join().unwrap();
        eprintln!("{moves} moves");
        assert!(moves > 0);
        results
    });
    let mut acked = 0;
    for (d, name, ok) in results.into_iter().flatten() {
        let e = route(d).expect("every table is served once the mover stops");
        let found = e.lookup(&root, d, &name);
        match (ok, found) {
            (true, Ok(_)) => acked += 1,
            (false, Err(FsError::NotFound)) => {}
            // A refused create may reach the table's owner only by a
            // NeedsTable retry; otherwise a refusal changes nothing.
            (ok, other) => panic!(
                "{}: acked {ok}, lookup {other:?}",
                String::from_utf8_lossy(&name)
            ),
        }
    }
    eprintln!("{acked} of 180 creates acknowledged");
    assert!(acked > 0);
}

#[test]
fn lookup_across_members_is_cross_server_but_lookup_entry_answers() {
    let (_, catalog, a, b, dirs, t, d) = pair_with_a_movable_table();
    let root = Credentials::root();
    let name = dirs
        .iter()
        .position(|x| x.soid == d.soid)
        .map(|i| format!("d{i}").into_bytes())
        .unwrap();
    let m = a.drop_table(t).unwrap();
    catalog.assign(t, "b");
    b.add_table(&m).unwrap();
    // The entry is in a's root table, the inode in b's table.
    assert_eq!(
        a.lookup(&root, Soid::ROOT, &name).unwrap_err(),
        FsError::NeedsTable { soid: d.soid }
    );
    let (soid, ftype) = a.lookup_entry(&root, Soid::ROOT, &name).unwrap();
    assert_eq!((soid, ftype), (d.soid, sextant_types::FileType::Directory));
    assert_eq!(b.getattr(soid).unwrap().soid, d.soid);
    assert_eq!(
        b.lookup_entry(&root, Soid::ROOT, &name).unwrap_err(),
        FsError::WrongServer { soid: Soid::ROOT }
    );
}

/// A table taken from a member (its lease ran out) is replayed from that
/// member's journal by the new owner — even if the old member restarted
/// and checkpointed in between: it trims nothing a catalogued manifest
/// still points at (`TableCatalog::journal_floor`).
#[test]
fn a_restarted_member_keeps_the_records_of_a_table_taken_from_it() {
    let (store, catalog, a, b, _, t, d) = pair_with_a_movable_table();
    let root = Credentials::root();
    for id in a.owned_tables() {
        if id != t {
            let m = a.drop_table(id).unwrap();
            catalog.assign(id, "b");
            b.add_table(&m).unwrap();
        }
    }
    set_k(&a, d.soid, b"acked");
    // The lease ran out: a is fenced, the coordinator gives t to b.
    assert!(a.revoke_table(t));
    catalog.assign(t, "b");
    drop(a);
    store.crash(None);
    let a = member(&store, &catalog, "a");
    assert!(a.owned_tables().is_empty());
    a.sync().unwrap();
    let m = catalog.manifest(t).unwrap();
    assert_eq!(m.replay.as_ref().unwrap().member, "a");
    b.add_table(&m).unwrap();
    assert_eq!(
        b.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
        b"acked"
    );
}

#[test]
fn members_share_a_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Arc::new(MemCatalog::new());
    let root = Credentials::root();
    let open = |name: &str| {
        Engine::open_member_dir(
            dir.path(),
            config(),
            MemberConfig {
                name: name.into(),
                catalog: Arc::clone(&catalog) as _,
            },
        )
    };
    let a = open("a").unwrap();
    let b = open("b").unwrap();
    assert!(matches!(
        open("a"),
        Err(sextant_engine::EngineError::InUse { .. })
    ));
    assert!(open("../x").is_err());
    let dirs = populate(&a);
    let (t, d) = movable(&a, &dirs);
    let m = a.drop_table(t).unwrap();
    assert!(dir.path().join(&m.entry.file).exists());
    catalog.assign(t, "b");
    b.add_table(&m).unwrap();
    create(&b, d.soid, b"on-b");
    a.close().unwrap();
    b.close().unwrap();
    let a = open("a").unwrap();
    let b = open("b").unwrap();
    assert!(b.lookup(&root, d.soid, b"on-b").is_ok());
    assert_eq!(names(&a, Soid::ROOT).len(), dirs.len());
}

/// A table nobody writes to must not hold the journal back: checkpoints
/// move a clean table's replay position forward (committing its
/// manifest), so the journal is trimmed while another table takes writes.
#[test]
fn a_clean_table_does_not_hold_the_journal_back() {
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let a = Engine::open_member(
        Arc::new(store.clone()) as Arc<dyn Store>,
        EngineConfig {
            journal: sextant_engine::JournalConfig {
                segment_bytes: 4096,
                ..Default::default()
            },
            ..config()
        },
        MemberConfig {
            name: "a".into(),
            catalog: Arc::clone(&catalog) as _,
        },
    )
    .unwrap();
    let dirs = populate(&a);
    a.sync().unwrap();
    let (_, busy) = movable(&a, &dirs);
    let segments = || store.list("members/a/journal/").unwrap().len();
    for i in 0..400 {
        a.setxattr(
            &root,
            busy.soid,
            b"user.k",
            format!("value {i:0100}").as_bytes(),
            Default::default(),
        )
        .unwrap()
        .wait(&a)
        .unwrap();
        if i % 50 == 49 {
            a.sync().unwrap();
        }
    }
    a.sync().unwrap();
    assert!(segments() <= 3, "{} journal segments kept", segments());
}

/// Measurement, not a check (`--ignored`, see docs/BENCHMARKS.md): creates
/// per second in member mode against a single server in the same run,
/// and how long DROP + ADD of one 20,000-inode table takes (changed since
/// its last snapshot, and clean), medians of five.
#[test]
#[ignore]
fn measure_member_mode() {
    use std::time::Instant;
    let root = Credentials::root();
    let big = || EngineConfig {
        flush_interval: None,
        ..Default::default()
    };
    let fill = |e: &Engine, n: usize| {
        let d = e
            .mkdir(&root, Soid::ROOT, b"d", 0o755)
            .unwrap()
            .wait(e)
            .unwrap();
        let t = Instant::now();
        for i in 0..n {
            e.create(&root, d.soid, format!("f{i}").as_bytes(), 0o644, true)
                .unwrap()
                .wait(e)
                .unwrap();
        }
        (d, t.elapsed())
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let n = 19_000;
    let (mut single, mut member_rate) = (Vec::new(), Vec::new());
    let (mut dirty_ms, mut clean_ms) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let s = Engine::open(Arc::new(MemStore::new()), big()).unwrap();
        let (_, t) = fill(&s, n);
        single.push(n as f64 / t.as_secs_f64());

        let (store, catalog) = store_and_catalog();
        let open = |name: &str| {
            Engine::open_member(
                Arc::new(store.clone()) as Arc<dyn Store>,
                big(),
                MemberConfig {
                    name: name.into(),
                    catalog: Arc::clone(&catalog) as _,
                },
            )
            .unwrap()
        };
        let a = open("a");
        let b = open("b");
        let (d, t) = fill(&a, n);
        member_rate.push(n as f64 / t.as_secs_f64());
        let id = a.table_holding(d.soid).unwrap();
        // Changed since its last snapshot: DROP writes it.
        let t = Instant::now();
        let m = a.drop_table(id).unwrap();
        catalog.assign(id, "b");
        b.add_table(&m).unwrap();
        dirty_ms.push(t.elapsed().as_secs_f64() * 1e3);
        // Clean: DROP writes nothing; ADD loads the snapshot.
        let t = Instant::now();
        let m = b.drop_table(id).unwrap();
        catalog.assign(id, "a");
        a.add_table(&m).unwrap();
        clean_ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(a.statfs().inodes as usize, n + 2);
    }
    let (s, m) = (median(single), median(member_rate));
    println!(
        "creates/s: single {s:.0}, member {m:.0} (member/single {:.3}); \
         move of a {n}-file table: dirty {:.1} ms, clean {:.1} ms",
        m / s,
        median(dirty_ms),
        median(clean_ms)
    );
}

/// Collects what [`Engine::set_carried_sink`] delivers.
fn carried_into(e: &Engine) -> Arc<parking_lot::Mutex<Vec<sextant_engine::requests::RequestTag>>> {
    let got = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let into = Arc::clone(&got);
    e.set_carried_sink(Box::new(move |found| into.lock().extend(found.replies)));
    got
}

fn request(client: u64, seq: u64) -> sextant_engine::requests::RequestId {
    sextant_engine::requests::RequestId {
        client,
        seq,
        acked_below: 1,
        digest: 1000 + seq,
    }
}

/// Exactly-once follows the table: a client's mutation acknowledged by
/// the old owner (its reply perhaps lost) is known to the new owner, by
/// a planned move (the snapshot carries it) and by failover (the dead
/// owner's journal record carries it). Without the carried replies the
/// new owner would run the retry again (`EEXIST`).
#[test]
fn the_replies_of_a_tables_mutations_move_with_it() {
    use sextant_engine::requests::Reply;
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let got_b = carried_into(&b);
    let dirs = populate(&a);
    let (t, d) = movable(&a, &dirs);
    let tagged = a.for_request(request(77, 5));
    let made = tagged
        .create(&root, d.soid, b"once", 0o644, true)
        .unwrap()
        .wait(&a)
        .unwrap();
    // Planned move: DROP writes the snapshot with the reply in it.
    let dropped = a.drop_table(t).unwrap();
    assert!(catalog.assign(t, "b"));
    b.add_table(&TableManifest::from_bytes(&dropped.to_bytes()).unwrap())
        .unwrap();
    let seen: Vec<_> = got_b
        .lock()
        .iter()
        .filter(|g| g.id.client == 77)
        .cloned()
        .collect();
    assert_eq!(seen.len(), 1, "the move carried the reply: {seen:?}");
    assert_eq!(seen[0].id.seq, 5);
    assert_eq!(seen[0].id.digest, 1005);
    // The no-xattrs hint is not carried: a carried reply says "not known".
    let unknown = sextant_types::Attr {
        no_xattrs: false,
        ..made.clone()
    };
    assert_eq!(seen[0].reply, Reply::Attr(unknown));

    // Failover: b acknowledges another, then dies before writing back; c
    // replays b's journal and knows it too (and still the first).
    let tagged = b.for_request(request(77, 6));
    tagged
        .unlink(&root, d.soid, b"f1")
        .unwrap()
        .wait(&b)
        .unwrap();
    drop(b);
    store.crash(None);
    let c = member(&store, &catalog, "c");
    let got_c = carried_into(&c);
    assert!(catalog.assign(t, "c"));
    let m = catalog.manifest(t).unwrap();
    assert_eq!(m.replay.as_ref().unwrap().member, "b");
    c.add_table(&m).unwrap();
    let mut seqs: Vec<u64> = got_c
        .lock()
        .iter()
        .filter(|g| g.id.client == 77)
        .map(|g| g.id.seq)
        .collect();
    seqs.sort();
    assert_eq!(seqs, vec![5, 6], "snapshot's and replayed record's replies");
}

/// Replies noted before the server set its sink wait for it.
#[test]
fn carried_replies_wait_for_the_sink() {
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let _ = b.take_recovered_requests();
    let dirs = populate(&a);
    let (t, d) = movable(&a, &dirs);
    a.for_request(request(9, 3))
        .mkdir(&root, d.soid, b"sub", 0o755)
        .unwrap()
        .wait(&a)
        .unwrap();
    let dropped = a.drop_table(t).unwrap();
    assert!(catalog.assign(t, "b"));
    b.add_table(&dropped).unwrap();
    let got = carried_into(&b);
    assert!(got.lock().iter().any(|g| g.id.client == 9 && g.id.seq == 3));
}

/// A [`MemCatalog`] whose next commit fails as told, once.
struct Flaky {
    inner: Arc<MemCatalog>,
    fail_next: Mutex<Option<CatalogError>>,
}

/// A member named `name` on `store` whose catalogue is `catalog` behind a
/// [`Flaky`]: the member, and the [`Flaky`] that fails its next commit.
fn flaky_member(store: &MemStore, catalog: &Arc<MemCatalog>, name: &str) -> (Engine, Arc<Flaky>) {
    let flaky = Arc::new(Flaky {
        inner: Arc::clone(catalog),
        fail_next: Mutex::new(None),
    });
    (member_of(store, Arc::clone(&flaky) as _, name), flaky)
}

impl Flaky {
    fn fail_next_commit(&self, e: CatalogError) {
        *self.fail_next.lock().unwrap() = Some(e);
    }
}

impl TableCatalog for Flaky {
    fn commit(&self, member: &str, change: CatalogChange) -> Result<(), CatalogError> {
        if let Some(e) = self.fail_next.lock().unwrap().take() {
            return Err(e);
        }
        self.inner.commit(member, change)
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

/// The catalogue's tables as (first SOID, last SOID, table), sorted.
fn catalogued_ranges(catalog: &MemCatalog) -> Vec<(Soid, Soid, u64)> {
    let mut ranges: Vec<(Soid, Soid, u64)> = catalog
        .all()
        .into_iter()
        .map(|(id, _, m)| (m.entry.range.first, m.entry.range.last, id))
        .collect();
    ranges.sort();
    ranges
}

/// The snapshot files in the shared store.
fn snapshots(store: &MemStore) -> Vec<String> {
    let mut v: Vec<String> = store
        .list("")
        .unwrap()
        .into_iter()
        .filter(|n| n.contains("/tables/"))
        .collect();
    v.sort();
    v
}

/// Issue 20: a DROP whose final commit the catalogue refused because its
/// view was out of date (the server still owns the table) took the table
/// out for good — every retry answered "not held here" while the map
/// still named the server. Now the table serves on as it was, with every
/// acknowledged change, and a retried DROP moves it.
#[test]
fn a_drop_whose_commit_is_refused_serves_on_and_a_retry_moves_the_table() {
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let (a, flaky) = flaky_member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let dirs = populate(&a);
    let (t, d) = movable(&a, &dirs);
    a.sync().unwrap();
    // Acknowledged, not written back: the DROP writes a snapshot for it.
    set_k(&a, d.soid, b"v1");
    let files = snapshots(&store);
    let listing = names(&a, d.soid);

    flaky.fail_next_commit(CatalogError::Stale("the map is behind".into()));
    let err = a.drop_table(t).unwrap_err();
    assert!(
        matches!(err, EngineError::Catalog(CatalogError::Stale(_))),
        "{err}"
    );
    // Still served here, as it was.
    assert!(a.owned_tables().contains(&t));
    assert_eq!(a.table_holding(d.soid), Some(t));
    assert_eq!(
        a.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
        b"v1"
    );
    assert_eq!(names(&a, d.soid), listing);
    assert_eq!(catalog.owner(t).as_deref(), Some("a"));
    assert_eq!(snapshots(&store), files, "the uncommitted snapshot is gone");
    // And it takes changes.
    set_k(&a, d.soid, b"v2");
    create(&a, d.soid, b"after");

    // The retry commits; the next owner sees everything.
    let m = a.drop_table(t).unwrap();
    assert!(!a.owned_tables().contains(&t));
    assert_eq!(catalog.manifest(t), Some(m.clone()));
    assert!(catalog.assign(t, "b"));
    b.add_table(&m).unwrap();
    assert_eq!(
        b.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
        b"v2"
    );
    assert_eq!(names(&b, d.soid).len(), listing.len() + 1);
    assert!(b.lookup(&root, d.soid, b"after").is_ok());
}

/// A DROP the catalogue fences (another member owns the table now: R2)
/// stops serving it and keeps its records for the new owner.
#[test]
fn a_drop_the_catalogue_fences_leaves_the_table_to_its_new_owner() {
    let (_, catalog, a, b, _, t, d) = pair_with_a_movable_table();
    let root = Credentials::root();
    set_k(&a, d.soid, b"acked");
    // a's lease ran out meanwhile: the table is b's.
    assert!(catalog.assign(t, "b"));
    let err = a.drop_table(t).unwrap_err();
    assert!(
        matches!(err, EngineError::Catalog(CatalogError::NotOwner { .. })),
        "{err}"
    );
    assert!(!a.owned_tables().contains(&t));
    assert_eq!(
        a.getattr(d.soid).unwrap_err(),
        FsError::WrongServer { soid: d.soid }
    );
    // a checkpoints: it must not trim what b replays.
    a.sync().unwrap();
    let m = catalog.manifest(t).unwrap();
    assert_eq!(m.replay.as_ref().unwrap().member, "a");
    b.add_table(&m).unwrap();
    assert_eq!(
        b.getxattr(&root, d.soid, b"user.k").unwrap().to_vec(),
        b"acked"
    );
}

/// A split commits both halves in one checkpoint. When the catalogue
/// fences the parent there (the table became another member's while it
/// split here), the half split off it must not be committed alone: the
/// new owner loads the parent's whole committed range, and the child
/// would overlap it in the cluster's map (seen importing into a
/// four-server cluster: "route overlaps", clients without a route).
#[test]
fn a_table_split_off_a_fenced_one_is_not_committed_alone() {
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let a = member(&store, &catalog, "a");
    let dirs = populate(&a);
    let (t, d) = movable(&a, &dirs);
    a.sync().unwrap();
    // The table is b's now; a does not know yet and keeps filling it
    // until it splits.
    assert!(catalog.assign(t, "b"));
    let before = a.owned_tables();
    for i in 0..40 {
        let sub = a
            .mkdir(&root, d.soid, format!("s{i}").as_bytes(), 0o755)
            .unwrap()
            .wait(&a);
        if sub.is_err() || !a.owned_tables().contains(&t) {
            break;
        }
    }
    assert!(
        !a.owned_tables().contains(&t),
        "the split's checkpoint met the fence: {before:?} -> {:?}",
        a.owned_tables()
    );
    // No table a made from it is in the catalogue, and the catalogue's
    // ranges do not overlap.
    let ranges = catalogued_ranges(&catalog);
    for w in ranges.windows(2) {
        assert!(
            w[0].1 < w[1].0,
            "tables {} and {} overlap in the catalogue",
            w[0].2,
            w[1].2
        );
    }
    for id in a.owned_tables() {
        assert!(
            before.contains(&id),
            "table {id}, split off the fenced one, is still served"
        );
    }
}

/// A DROP skips the checkpoint it used to begin with (it cost a cold
/// BORROW several milliseconds) only when every table here is in the
/// catalogue as it is: a table split off since the last commit (the
/// split's own commit failed) is committed first, so the dropped
/// table's final manifest, with its smaller range, leaves no SOID
/// uncatalogued.
#[test]
fn a_drop_after_an_uncommitted_split_commits_the_split_off_table_first() {
    let (store, catalog) = store_and_catalog();
    let (a, flaky) = flaky_member(&store, &catalog, "a");
    let dirs = populate(&a);
    let (t, d) = movable(&a, &dirs);
    a.sync().unwrap();
    let before = a.owned_tables();
    // The split's commit fails: the table split off is not catalogued.
    flaky.fail_next_commit(CatalogError::Unavailable("etcd paused".into()));
    for i in 0..40 {
        mkdir(&a, d.soid, format!("s{i}").as_bytes());
        if a.owned_tables().len() > before.len() {
            break;
        }
    }
    let new: Vec<u64> = a
        .owned_tables()
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(!new.is_empty(), "a table split: {before:?}");
    assert!(
        new.iter().all(|id| catalog.manifest(*id).is_none()),
        "the split was not committed"
    );
    a.drop_table(t).unwrap();
    // The catalogue's ranges still cover every SOID, once.
    let ranges = catalogued_ranges(&catalog);
    let mut next = Some(Soid::MIN);
    for (first, last, id) in &ranges {
        assert_eq!(
            Some(*first),
            next,
            "a gap or an overlap before table {id}: {ranges:?}"
        );
        next = last.checked_next();
    }
    assert_eq!(next, None, "the catalogue ends before the last SOID");
}

/// READDIRPLUS reads the directory's table only: an entry whose inode a
/// split put in another table (on a cluster: maybe another server's) gets
/// no attributes — the client looks it up — and the others exactly what a
/// lookup gives.
#[test]
fn readdir_plus_leaves_entries_of_other_tables_without_attributes() {
    let (store, catalog) = store_and_catalog();
    let a = member(&store, &catalog, "a");
    populate(&a);
    let root = Credentials::root();
    let home = a.table_holding(Soid::ROOT);
    let listed = a.readdir_plus(&root, Soid::ROOT, 0, 100).unwrap();
    assert_eq!(listed.len(), 10);
    let (mut here, mut elsewhere) = (0, 0);
    for (entry, attr) in listed {
        if a.table_holding(entry.soid) == home {
            here += 1;
            let looked_up = a.lookup(&root, Soid::ROOT, &entry.name).unwrap();
            assert_eq!(attr, Some(looked_up), "{:?}", entry.name);
        } else {
            elsewhere += 1;
            assert_eq!(attr, None, "{:?} is in another table", entry.name);
        }
    }
    assert!(
        here > 0 && elsewhere > 0,
        "{here} here, {elsewhere} elsewhere"
    );
}

/// Issue 20: a table split while the catalogue did not answer (the
/// split's commit failed), then revoked — the shell forgets every table
/// when the membership lease is lost. The table split off it, which the
/// catalogue knows only as part of it, goes too: kept, it blocked the
/// table's reload ("overlaps table N this member holds") and the next
/// checkpoint committed it alone, over a range the catalogue still gave
/// its parent. Loaded again from the catalogue, the table has every
/// acknowledged change (replayed from the journal). (With a real etcd:
/// crates/server/tests/split_fence.rs.)
#[test]
fn a_table_split_off_a_revoked_one_is_revoked_too() {
    let (store, catalog) = store_and_catalog();
    let root = Credentials::root();
    let (a, flaky) = flaky_member(&store, &catalog, "a");
    flaky.fail_next_commit(CatalogError::Unavailable("etcd unreachable".into()));
    let mut dirs = Vec::new();
    while a.owned_tables().len() == 1 {
        assert!(dirs.len() < 40, "the root table never split");
        let d = mkdir(&a, Soid::ROOT, format!("d{}", dirs.len()).as_bytes());
        create(&a, d.soid, b"f");
        dirs.push(d.soid);
    }
    let child = a
        .owned_tables()
        .into_iter()
        .find(|t| *t != ROOT_TABLE_ID)
        .unwrap();
    assert!(
        catalog.manifest(child).is_none(),
        "the split's commit failed"
    );
    assert!(a.revoke_table(ROOT_TABLE_ID));
    assert!(
        a.owned_tables().is_empty(),
        "{:?} still held",
        a.owned_tables()
    );
    a.sync().unwrap();
    assert!(catalog.manifest(child).is_none(), "committed alone");
    // Still a's in the catalogue (nobody took it): loaded again.
    let m = catalog.manifest(ROOT_TABLE_ID).unwrap();
    a.add_table(&m).unwrap();
    for d in &dirs {
        assert!(a.lookup(&root, *d, b"f").is_ok());
    }
}
