//! Merges of small tables in member mode (issue 20, item 6), with the
//! in-memory catalogue standing in for etcd:
//!
//! - tables that shrink are merged, through the catalogue: afterwards the
//!   catalogue's ranges still partition the SOID space, each table is held
//!   by exactly its owner, and nothing was lost (also across a restart);
//! - a merge never races a move: while a move (or lend, or borrow) names a
//!   table, no merge touches it; a table merged away cannot be moved;
//! - a failover that took the tables first wins: the merge is refused,
//!   and the new owner serves every row;
//! - merges racing DROPs and ADDs in threads: each table is either moved
//!   or merged, never both, and every SOID is served by exactly one member;
//! - a merge whose answer was lost is settled by asking again; one whose
//!   outcome stays unknown serves neither half, and a failover recovers
//!   every row.

use sextant_engine::store::{MemStore, Store};
use sextant_engine::{
    CatalogChange, CatalogError, Engine, EngineConfig, MemCatalog, MemberConfig, TableCatalog,
    TableManifest,
};
use sextant_types::{Credentials, Soid, SoidRange};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Small limits: a table splits past 24 inodes, and two neighbours merge
/// when each has fewer than 3 inodes and 2 directories, 6 together.
fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        table_dir_limit: 16,
        table_inode_limit: 24,
        ..Default::default()
    }
}

fn member(store: &MemStore, catalog: &Arc<MemCatalog>, name: &str) -> Engine {
    Engine::open_member(
        Arc::new(store.clone()) as Arc<dyn Store>,
        config(),
        MemberConfig {
            name: name.into(),
            catalog: Arc::clone(catalog) as _,
        },
    )
    .unwrap()
}

/// Directories kept (each with its `f0`) after [`grow_and_shrink`].
const KEPT: [usize; 3] = [0, 6, 11];

/// Twelve directories of five files (the root table splits several
/// times), then everything removed but `f0` in the [`KEPT`] directories:
/// most tables are now empty. Returns the kept directories' names.
fn grow_and_shrink(e: &Engine) -> Vec<String> {
    let root = Credentials::root();
    for i in 0..12 {
        let d = e
            .mkdir(&root, Soid::ROOT, format!("d{i}").as_bytes(), 0o755)
            .unwrap()
            .wait(e)
            .unwrap();
        for j in 0..5 {
            e.create(&root, d.soid, format!("f{j}").as_bytes(), 0o644, true)
                .unwrap()
                .wait(e)
                .unwrap();
        }
    }
    let n = e.owned_tables().len();
    assert!(n > 3, "the root table split: {n} tables");
    for i in 0..12 {
        let d = e
            .lookup(&root, Soid::ROOT, format!("d{i}").as_bytes())
            .unwrap();
        for j in 0..5 {
            if KEPT.contains(&i) && j == 0 {
                continue;
            }
            e.unlink(&root, d.soid, format!("f{j}").as_bytes())
                .unwrap()
                .wait(e)
                .unwrap();
        }
        if !KEPT.contains(&i) {
            e.rmdir(&root, Soid::ROOT, format!("d{i}").as_bytes())
                .unwrap()
                .wait(e)
                .unwrap();
        }
    }
    e.sync().unwrap();
    KEPT.iter().map(|i| format!("d{i}")).collect()
}

/// Merges until none is left to do; returns how many.
fn merge_all(e: &Engine) -> usize {
    let mut n = 0;
    while e.merge_small_tables() {
        n += 1;
        assert!(n < 100, "merges never end");
    }
    n
}

/// The engine of `engines` holding `soid`; exactly one must.
fn holder<'a>(engines: &[&'a Engine], soid: Soid) -> &'a Engine {
    let holding: Vec<&Engine> = engines
        .iter()
        .copied()
        .filter(|e| e.table_holding(soid).is_some())
        .collect();
    assert_eq!(
        holding.len(),
        1,
        "{soid:?} is held by {} members",
        holding.len()
    );
    holding[0]
}

/// The catalogue's tables partition the SOID space; each is held by its
/// owner (named in `engines`) at the catalogued range, by no one else;
/// and no member holds a table the catalogue does not give it.
fn check_catalogue(catalog: &MemCatalog, engines: &[(&str, &Engine)]) {
    for (_, e) in engines {
        e.sync().unwrap();
    }
    let mut all = catalog.all();
    all.sort_by_key(|(_, _, m)| m.entry.range.first);
    let mut next = Some(SoidRange::ALL.first);
    for (id, owner, m) in &all {
        assert_eq!(
            Some(m.entry.range.first),
            next,
            "gap or overlap before {id}"
        );
        next = m.entry.range.last.checked_next();
        for (name, e) in engines {
            let held = e.owned_tables().contains(id);
            assert_eq!(held, owner == name, "table {id} (owner {owner}) on {name}");
            if held {
                assert_eq!(e.table_holding(m.entry.range.first), Some(*id));
                assert_eq!(e.table_holding(m.entry.range.last), Some(*id));
            }
        }
    }
    assert_eq!(next, None, "the last table ends at the last SOID");
    for (name, e) in engines {
        let given: BTreeSet<u64> = all
            .iter()
            .filter(|(_, o, _)| o == name)
            .map(|(id, _, _)| *id)
            .collect();
        let held: BTreeSet<u64> = e.owned_tables().into_iter().collect();
        assert_eq!(held, given, "{name} holds what the catalogue gives it");
    }
}

/// Every kept directory and its `f0` are there, each SOID served by
/// exactly one of `engines`.
fn check_rows(engines: &[&Engine], kept: &[String]) {
    let root = Credentials::root();
    let at_root = holder(engines, Soid::ROOT);
    let mut names: Vec<String> = at_root
        .readdir(&root, Soid::ROOT, 0, 1000)
        .unwrap()
        .into_iter()
        .map(|d| String::from_utf8(d.name.to_vec()).unwrap())
        .collect();
    names.sort();
    let mut want = kept.to_vec();
    want.sort();
    assert_eq!(names, want);
    for d in kept {
        let (dir, _) = at_root
            .lookup_entry(&root, Soid::ROOT, d.as_bytes())
            .unwrap();
        let e = holder(engines, dir);
        assert_eq!(e.getattr(dir).unwrap().soid, dir);
        let f = e.lookup_entry(&root, dir, b"f0");
        let (f, _) = match f {
            Ok(f) => f,
            Err(err) => panic!("{d}/f0: {err:?}"),
        };
        holder(engines, f).getattr(f).unwrap();
    }
}

#[test]
fn tables_that_shrink_are_merged_through_the_catalogue() {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let a = member(&store, &catalog, "a");
    let kept = grow_and_shrink(&a);
    let before = a.owned_tables();
    let merged = merge_all(&a);
    assert!(merged > 0, "small tables merge in member mode");
    assert_eq!(a.stats().merges as usize, merged);
    let after = a.owned_tables();
    assert_eq!(after.len(), before.len() - merged);
    check_catalogue(&catalog, &[("a", &a)]);
    check_rows(&[&a], &kept);
    // A table merged away is gone for good: no move of it can be asked.
    let gone: Vec<u64> = before
        .iter()
        .filter(|t| !after.contains(t))
        .copied()
        .collect();
    assert!(!gone.is_empty());
    for t in &gone {
        assert!(!catalog.set_moving(*t, true), "table {t} was merged away");
        assert!(!catalog.assign(*t, "b"), "table {t} was merged away");
        assert!(!a.revoke_table(*t), "nothing to revoke for {t}");
    }
    // Across a restart (the catalogue and the journal agree).
    a.close().unwrap();
    let a = member(&store, &catalog, "a");
    assert_eq!(a.owned_tables(), after);
    check_catalogue(&catalog, &[("a", &a)]);
    check_rows(&[&a], &kept);
    // The merged tables move like any other.
    let b = member(&store, &catalog, "b");
    for t in a.owned_tables() {
        let m = a.drop_table(t).unwrap();
        assert!(catalog.assign(t, "b"));
        b.add_table(&m).unwrap();
    }
    check_catalogue(&catalog, &[("a", &a), ("b", &b)]);
    check_rows(&[&a, &b], &kept);
}

#[test]
fn no_merge_touches_a_table_a_move_names() {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    let kept = grow_and_shrink(&a);
    let tables = a.owned_tables();
    // A move (or a lend, or a borrow) is asked for every table: the
    // coordinator's `move/` keys are in etcd, the DROPs not begun yet.
    for t in &tables {
        assert!(catalog.set_moving(*t, true));
    }
    assert!(!a.merge_small_tables(), "a merge must wait for the moves");
    assert_eq!(a.owned_tables(), tables);
    check_catalogue(&catalog, &[("a", &a)]);
    // The moves go ahead: every table is b's, whole.
    for t in &tables {
        let m = a.drop_table(*t).unwrap();
        assert!(catalog.assign(*t, "b"));
        b.add_table(&m).unwrap();
    }
    check_catalogue(&catalog, &[("a", &a), ("b", &b)]);
    check_rows(&[&a, &b], &kept);
    // b merges them now (no move names them any more).
    assert!(merge_all(&b) > 0);
    check_catalogue(&catalog, &[("a", &a), ("b", &b)]);
    check_rows(&[&a, &b], &kept);
}

#[test]
fn a_failover_that_took_the_tables_first_wins_over_a_merge() {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let a = member(&store, &catalog, "a");
    let kept = grow_and_shrink(&a);
    // a's lease ran out: the coordinator gave every table to b, which has
    // not loaded them yet; a does not know.
    for (t, _, _) in catalog.all() {
        assert!(catalog.assign(t, "b"));
    }
    assert!(!a.merge_small_tables(), "the catalogue refuses a's merge");
    let b = member(&store, &catalog, "b");
    // b replays a's journal for each (failover): nothing lost, and a holds
    // nothing the catalogue gives b (a fenced table stops serving).
    for t in a.owned_tables() {
        a.revoke_table(t);
    }
    check_catalogue(&catalog, &[("a", &a), ("b", &b)]);
    check_rows(&[&a, &b], &kept);
}

#[test]
fn merges_racing_moves_lose_nothing_and_never_both_win() {
    let (mut merges, mut moves) = (0, 0);
    for round in 0..8 {
        let store = MemStore::new();
        let catalog = Arc::new(MemCatalog::new());
        let a = member(&store, &catalog, "a");
        let b = member(&store, &catalog, "b");
        let kept = grow_and_shrink(&a);
        let tables = a.owned_tables();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The merger goes first (one merge), then both race.
        let started = Arc::new(std::sync::Barrier::new(2));
        let merger = {
            let (a, done, started) = (a.clone(), Arc::clone(&done), Arc::clone(&started));
            std::thread::spawn(move || {
                let mut merged = usize::from(a.merge_small_tables());
                started.wait();
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    if a.merge_small_tables() {
                        merged += 1;
                    }
                    std::thread::yield_now();
                }
                merged
            })
        };
        // The shell's side: ask a move (the `move/` key), then DROP, hand
        // over, ADD — every third table, from the top or the bottom (the
        // others keep neighbours to merge with).
        started.wait();
        let mut moved = Vec::new();
        let order: Vec<u64> = if round % 2 == 0 {
            tables.iter().rev().step_by(3).copied().collect()
        } else {
            tables.iter().skip(1).step_by(3).copied().collect()
        };
        for t in order {
            // Rounds differ in how far the merges get between moves.
            std::thread::sleep(std::time::Duration::from_micros(50 * round));
            if !catalog.set_moving(t, true) {
                continue; // merged away first: no move of it
            }
            match a.drop_table(t) {
                Ok(m) => {
                    assert!(catalog.assign(t, "b"), "a moving table {t} was merged away");
                    b.add_table(&m).unwrap();
                    moved.push(t);
                }
                Err(e) => panic!("DROP of {t} (still a's, moving): {e}"),
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let merged = merger.join().unwrap();
        let now: BTreeSet<u64> = catalog.all().into_iter().map(|(t, _, _)| t).collect();
        for t in &moved {
            assert!(now.contains(t), "table {t} was moved and merged away");
            assert_eq!(catalog.owner(*t).as_deref(), Some("b"));
        }
        assert_eq!(
            now.len(),
            tables.len() - merged,
            "each merge removed one table"
        );
        check_catalogue(&catalog, &[("a", &a), ("b", &b)]);
        check_rows(&[&a, &b], &kept);
        merges += merged;
        moves += moved.len();
    }
    eprintln!("{merges} merges, {moves} moves raced");
    assert!(merges > 0 && moves > 0, "{merges} merges, {moves} moves");
}

/// The in-memory catalogue, but a merge's answer is lost: `applied`
/// merges go through and answer `Unavailable` anyway (the first `lose`
/// times); otherwise every merge is `Unavailable` without being applied.
struct LostAnswers {
    inner: Arc<MemCatalog>,
    applied: bool,
    lose: std::sync::atomic::AtomicUsize,
}

impl TableCatalog for LostAnswers {
    fn commit(&self, member: &str, change: CatalogChange) -> Result<(), CatalogError> {
        self.inner.commit(member, change)
    }
    fn merge(&self, member: &str, merged: TableManifest, gone: u64) -> Result<(), CatalogError> {
        use std::sync::atomic::Ordering;
        if self.lose.load(Ordering::SeqCst) == 0 {
            return self.inner.merge(member, merged, gone);
        }
        self.lose.fetch_sub(1, Ordering::SeqCst);
        if self.applied {
            self.inner.merge(member, merged, gone)?;
        }
        Err(CatalogError::Unavailable("the answer was lost".into()))
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

fn member_on(store: &MemStore, catalog: Arc<dyn TableCatalog>, name: &str) -> Engine {
    Engine::open_member(
        Arc::new(store.clone()) as Arc<dyn Store>,
        config(),
        MemberConfig {
            name: name.into(),
            catalog,
        },
    )
    .unwrap()
}

#[test]
fn a_merge_whose_answer_was_lost_is_settled_by_asking_again() {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let lossy = Arc::new(LostAnswers {
        inner: Arc::clone(&catalog),
        applied: true,
        lose: 0.into(),
    });
    let a = member_on(&store, Arc::clone(&lossy) as _, "a");
    let kept = grow_and_shrink(&a);
    let before = a.owned_tables().len();
    lossy.lose.store(1, std::sync::atomic::Ordering::SeqCst);
    assert!(
        a.merge_small_tables(),
        "merged: the catalogue did, the retry says so"
    );
    assert_eq!(a.owned_tables().len(), before - 1);
    check_catalogue(&catalog, &[("a", &a)]);
    check_rows(&[&a], &kept);
}

#[test]
fn a_merge_whose_outcome_stays_unknown_serves_neither_table_and_loses_nothing() {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let lossy = Arc::new(LostAnswers {
        inner: Arc::clone(&catalog),
        applied: false,
        lose: 0.into(),
    });
    let a = member_on(&store, Arc::clone(&lossy) as _, "a");
    let kept = grow_and_shrink(&a);
    let before = a.owned_tables();
    lossy
        .lose
        .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
    assert!(!a.merge_small_tables());
    let after = a.owned_tables();
    assert_eq!(after.len(), before.len() - 2, "both halves stopped serving");
    // The catalogue still has both (it never merged them): a failover
    // gives them to b, which replays a's journal — nothing is lost.
    let b = member(&store, &catalog, "b");
    let stopped: Vec<u64> = before
        .iter()
        .filter(|t| !after.contains(t))
        .copied()
        .collect();
    let manifests: Vec<TableManifest> = stopped
        .iter()
        .map(|t| {
            assert!(catalog.assign(*t, "b"));
            catalog.manifest(*t).unwrap()
        })
        .collect();
    b.add_tables(&manifests).unwrap();
    check_catalogue(&catalog, &[("a", &a), ("b", &b)]);
    check_rows(&[&a, &b], &kept);
}

/// After a merge whose outcome stayed unknown, the engine names both
/// tables as given up, and loading them again on the same member from
/// whatever the catalogue holds once it answers — both tables (never
/// merged) or the merged one (merged, the answer lost) — replays its own
/// journal and loses nothing: what the cluster shell does instead of
/// leaving them unserved until the lease is lost.
#[test]
fn tables_given_up_after_an_unknown_merge_load_again_here_from_the_catalogue() {
    for applied in [false, true] {
        let store = MemStore::new();
        let catalog = Arc::new(MemCatalog::new());
        let lossy = Arc::new(LostAnswers {
            inner: Arc::clone(&catalog),
            applied,
            lose: 0.into(),
        });
        let a = member_on(&store, Arc::clone(&lossy) as _, "a");
        let kept = grow_and_shrink(&a);
        let before = a.owned_tables();
        lossy
            .lose
            .store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
        assert!(!a.merge_small_tables());
        let mut given_up = a.take_given_up();
        given_up.sort_unstable();
        let mut stopped: Vec<u64> = before
            .iter()
            .filter(|t| !a.owned_tables().contains(t))
            .copied()
            .collect();
        stopped.sort_unstable();
        assert_eq!(given_up, stopped, "applied {applied}: both halves named");
        assert!(a.take_given_up().is_empty(), "named once");
        lossy.lose.store(0, std::sync::atomic::Ordering::SeqCst);
        let manifests: Vec<TableManifest> = given_up
            .iter()
            .filter_map(|t| catalog.manifest(*t))
            .collect();
        assert_eq!(
            manifests.len(),
            if applied { 1 } else { 2 },
            "applied {applied}: the catalogue's tables"
        );
        a.add_tables(&manifests).unwrap();
        check_catalogue(&catalog, &[("a", &a)]);
        check_rows(&[&a], &kept);
    }
}

/// The in-memory catalogue, with commits refused as unavailable while
/// `down` (etcd not answering).
struct CommitsDown {
    inner: Arc<MemCatalog>,
    down: std::sync::atomic::AtomicBool,
}

impl TableCatalog for CommitsDown {
    fn commit(&self, member: &str, change: CatalogChange) -> Result<(), CatalogError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(CatalogError::Unavailable("etcd does not answer".into()));
        }
        self.inner.commit(member, change)
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

/// While the catalogue does not take commits, a table split since its
/// last commit does not split again: no chain of splits builds up between
/// two commits (no etcd transaction takes a long one, and committed in
/// steps one is not recoverable between them — `TablesChange::pieces`
/// relies on this). Once commits go through, the
/// splits go on, and nothing is lost.
#[test]
fn splits_wait_for_their_commit_so_no_chain_builds_up() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let down = Arc::new(CommitsDown {
        inner: Arc::clone(&catalog),
        down: false.into(),
    });
    let a = member_on(&store, Arc::clone(&down) as _, "a");
    let root = Credentials::root();
    let before = a.owned_tables().len();
    down.down.store(true, SeqCst);
    let fill = |from: usize, to: usize| {
        for i in from..to {
            let d = a
                .mkdir(&root, Soid::ROOT, format!("d{i}").as_bytes(), 0o755)
                .unwrap()
                .wait(&a)
                .unwrap();
            for j in 0..5 {
                a.create(&root, d.soid, format!("f{j}").as_bytes(), 0o644, true)
                    .unwrap()
                    .wait(&a)
                    .unwrap();
            }
        }
    };
    fill(0, 12);
    let while_down = a.owned_tables().len();
    assert!(
        while_down <= before + 1,
        "one split while commits fail, not a chain: {before} -> {while_down} tables"
    );
    down.down.store(false, SeqCst);
    a.flush_tick().unwrap();
    fill(12, 16);
    assert!(
        a.owned_tables().len() > while_down + 1,
        "splitting goes on once commits do: {} tables",
        a.owned_tables().len()
    );
    a.sync().unwrap();
    check_catalogue(&catalog, &[("a", &a)]);
    for i in 0..16 {
        let d = a
            .lookup(&root, Soid::ROOT, format!("d{i}").as_bytes())
            .unwrap();
        for j in 0..5 {
            a.lookup(&root, d.soid, format!("f{j}").as_bytes()).unwrap();
        }
    }
}
