//! Search across members (issue 21 item 3): a namespace whose tables are
//! spread over two member engines answers, as the union of each member's
//! spread search, exactly what one engine holding every table answers —
//! paths, depths, and for a caller other than root exactly what that
//! caller may list, even where the ancestors of a table live on the other
//! member. Ranges a member does not hold are reported, never searched.

mod common;

use common::{create, member, mkdir, store_and_catalog};
use sextant_engine::search::{DirRecord, Expr, ForeignDirs, Pred, SearchOptions, Spread};
use sextant_engine::store::MemStore;
use sextant_engine::{Engine, MemCatalog, TableManifest};
use sextant_types::{Credentials, FsError, SetAttr, Soid, SoidRange};
use std::collections::{BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Members a and b on one store and catalogue, nothing moved yet.
fn two_members() -> (MemStore, Arc<MemCatalog>, Engine, Engine) {
    let (store, catalog) = store_and_catalog();
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    (store, catalog, a, b)
}

/// Moves `table` from a to b (DROP, the catalogue's new owner, ADD): its
/// manifest.
fn move_to_b(catalog: &MemCatalog, a: &Engine, b: &Engine, table: u64) -> TableManifest {
    let m = a.drop_table(table).unwrap();
    assert!(catalog.assign(table, "b"));
    b.add_table(&m).unwrap();
    m
}

/// Every other table of `tables` (the second, the fourth, ...: the root's
/// table stays on a) moves from a to b.
fn every_other_to_b(catalog: &MemCatalog, a: &Engine, b: &Engine, tables: &[u64]) {
    for (n, t) in tables.iter().enumerate() {
        if n % 2 == 1 {
            move_to_b(catalog, a, b, *t);
        }
    }
}

/// The other member, read as a server reads it for a peer.
struct Peer<'a>(&'a Engine);

impl ForeignDirs for Peer<'_> {
    fn chain(&self, dir: Soid) -> Result<Vec<DirRecord>, FsError> {
        self.0.dir_chain(dir)
    }

    fn chains(&self, dirs: &[Soid]) -> Result<Vec<DirRecord>, FsError> {
        let got = self.0.dir_chains(dirs, usize::MAX)?;
        assert_eq!(got.answered, dirs.len(), "no budget: all answered");
        match got.not_held.first() {
            Some(&soid) => Err(FsError::WrongServer { soid }),
            None => Ok(got.records),
        }
    }
}

/// [`Peer`], counting what is asked: calls, and each directory asked.
#[derive(Default)]
struct Counting<'a> {
    peer: Option<Peer<'a>>,
    calls: AtomicUsize,
    asked: Mutex<HashMap<Soid, usize>>,
}

impl<'a> Counting<'a> {
    fn new(e: &'a Engine) -> Counting<'a> {
        Counting {
            peer: Some(Peer(e)),
            ..Default::default()
        }
    }

    fn count(&self, dirs: &[Soid]) -> &Peer<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut asked = self.asked.lock().unwrap();
        for d in dirs {
            *asked.entry(*d).or_default() += 1;
        }
        self.peer.as_ref().unwrap()
    }
}

impl ForeignDirs for Counting<'_> {
    fn chain(&self, dir: Soid) -> Result<Vec<DirRecord>, FsError> {
        self.count(&[dir]).chain(dir)
    }

    fn chains(&self, dirs: &[Soid]) -> Result<Vec<DirRecord>, FsError> {
        self.count(dirs).chains(dirs)
    }
}

fn user() -> Credentials {
    Credentials {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    }
}

/// A tree three levels deep: `/dN/sM/fK`, some directories closed to
/// others (0700, 0711 — searchable but not readable — and 0744).
fn populate(e: &Engine) {
    let root = Credentials::root();
    for i in 0..6 {
        let d = mkdir(e, Soid::ROOT, format!("d{i}").as_bytes());
        for j in 0..3 {
            let s = mkdir(e, d.soid, format!("s{j}").as_bytes());
            for k in 0..3 {
                create(e, s.soid, format!("f{k}").as_bytes());
            }
        }
        let mode = [0o700, 0o711, 0o744, 0o755, 0o755, 0o755][i];
        let chmod = SetAttr {
            perm: Some(mode),
            ..Default::default()
        };
        e.setattr(&root, d.soid, &chmod).unwrap().wait(e).unwrap();
    }
}

/// What a search answers: (path, depth) of every hit.
type Answer = BTreeSet<(Vec<u8>, u32)>;

/// The answer of one search, the same on one thread and on several
/// (the parallel search's work items cut to the spread's ranges).
fn search(
    e: &Engine,
    cred: &Credentials,
    scope: Soid,
    expr: &Expr,
    spread: Option<&Spread<'_>>,
) -> Answer {
    let mut answers = [1, 4].map(|threads| {
        let opts = SearchOptions {
            spread,
            threads,
            spawn_after: std::time::Duration::ZERO,
            ..SearchOptions::default()
        };
        let mut out = Answer::new();
        let scope = sextant_engine::search::Scope::Soid(scope);
        e.search_with(cred, scope, expr, &opts, |h| {
            let hit = h.to_hit();
            assert!(
                out.insert((hit.path.to_vec(), hit.depth)),
                "reported twice: {}",
                String::from_utf8_lossy(&hit.path)
            );
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    });
    assert_eq!(answers[0], answers[1], "one thread and four");
    std::mem::take(&mut answers[0])
}

#[test]
fn spread_searches_add_up_to_one_engines_answer() {
    let (_store, catalog, a, b) = two_members();
    populate(&a);
    let tables = a.owned_tables();
    assert!(
        tables.len() >= 6,
        "the tree is spread over many tables: {tables:?}"
    );
    let d1 = a
        .lookup(&Credentials::root(), Soid::ROOT, b"d1")
        .unwrap()
        .soid;
    let d4 = a
        .lookup(&Credentials::root(), Soid::ROOT, b"d4")
        .unwrap()
        .soid;
    let expressions = [
        Expr::True,
        Expr::pred(Pred::Name {
            pattern: b"f1".to_vec().into(),
            glob: false,
            ci: false,
        }),
        Expr::pred(Pred::Depth { min: 2, max: 2 }),
    ];
    let callers = [Credentials::root(), user()];
    let scopes = [Soid::ROOT, d1, d4];
    // The truth: one engine holding every table.
    let mut truth = Vec::new();
    for cred in &callers {
        for &scope in &scopes {
            for expr in &expressions {
                truth.push(search(&a, cred, scope, expr, None));
            }
        }
    }
    assert!(truth.iter().any(|t| t.len() > 50));
    // Every other table (the root's table stays on a) moves to b: chains
    // cross members at every level.
    every_other_to_b(&catalog, &a, &b, &tables);
    assert!(!b.owned_tables().is_empty());
    let (from_a, from_b) = (Peer(&b), Peer(&a));
    let mut k = 0;
    for cred in &callers {
        for &scope in &scopes {
            for expr in &expressions {
                let on_a = Spread::new(vec![SoidRange::ALL], &from_a);
                let on_b = Spread::new(vec![SoidRange::ALL], &from_b);
                let part_a = search(&a, cred, scope, expr, Some(&on_a));
                let part_b = search(&b, cred, scope, expr, Some(&on_b));
                let both: Answer = part_a.union(&part_b).cloned().collect();
                assert_eq!(
                    part_a.len() + part_b.len(),
                    both.len(),
                    "uid {} scope {scope:?}: nothing reported by both",
                    cred.uid
                );
                assert_eq!(both, truth[k], "uid {} scope {scope:?} {expr:?}", cred.uid);
                // What a did not hold is exactly what b answers from.
                // (Nothing when the search ended before any table: a scope
                // root the caller may not list, reported by its holder.)
                let not_held = on_a.take_not_held();
                if not_held.is_empty() {
                    assert!(part_b.iter().all(|(_, depth)| *depth == 0), "k={k}");
                } else {
                    let asked = Spread::new(not_held, &from_b);
                    assert_eq!(search(&b, cred, scope, expr, Some(&asked)), part_b);
                    assert!(asked.take_not_held().is_empty(), "b held all of it");
                }
                k += 1;
            }
        }
    }
}

#[test]
fn without_a_reader_the_other_members_tables_are_only_reported() {
    let (_store, catalog, a, b) = two_members();
    populate(&a);
    let tables = a.owned_tables();
    let moved = tables[tables.len() - 1];
    let m = move_to_b(&catalog, &a, &b, moved);
    let range = m.entry.range;
    let peer = Peer(&b);
    let on_a = Spread::new(vec![SoidRange::ALL], &peer);
    search(
        &a,
        &Credentials::root(),
        Soid::ROOT,
        &Expr::True,
        Some(&on_a),
    );
    assert_eq!(on_a.take_not_held(), vec![range]);
    // Asked for only that range, a reports it back and visits nothing.
    let only = Spread::new(vec![range], &peer);
    let got = search(
        &a,
        &Credentials::root(),
        Soid::ROOT,
        &Expr::True,
        Some(&only),
    );
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(only.take_not_held(), vec![range]);
}

/// A table that moves to the other member while a's search runs is
/// either searched by a (it still held it when the cursor came) or
/// reported back and searched by b — never both, never neither: the
/// rounds the client runs add up to one engine's answer.
#[test]
fn a_table_moving_during_the_query_is_searched_exactly_once() {
    for moved_at_hit in [1, 5, 20, 60] {
        let (_store, catalog, a, b) = two_members();
        populate(&a);
        let truth = search(&a, &Credentials::root(), Soid::ROOT, &Expr::True, None);
        let tables = a.owned_tables();
        let (from_a, from_b) = (Peer(&b), Peer(&a));
        let on_a = Spread::new(vec![SoidRange::ALL], &from_a);
        let opts = SearchOptions {
            spread: Some(&on_a),
            threads: 1,
            ..SearchOptions::default()
        };
        let mut part_a = Answer::new();
        let mut moved = false;
        let scope = sextant_engine::search::Scope::Soid(Soid::ROOT);
        a.search_with(&Credentials::root(), scope, &Expr::True, &opts, |h| {
            let hit = h.to_hit();
            part_a.insert((hit.path.to_vec(), hit.depth));
            if part_a.len() == moved_at_hit && !moved {
                // The last table (the cursor has not reached it yet) and
                // the first (already searched) go to b.
                moved = true;
                for t in [tables[tables.len() - 1], tables[0]] {
                    if let Ok(m) = a.drop_table(t) {
                        assert!(catalog.assign(t, "b"));
                        b.add_table(&m).unwrap();
                    }
                }
            }
            ControlFlow::Continue(())
        })
        .unwrap();
        assert!(moved);
        // Round 2: what a did not hold, asked of b.
        let not_held = on_a.take_not_held();
        let on_b = Spread::new(not_held, &from_b);
        let part_b = search(
            &b,
            &Credentials::root(),
            Soid::ROOT,
            &Expr::True,
            Some(&on_b),
        );
        assert!(on_b.take_not_held().is_empty());
        let overlap: Vec<_> = part_a.intersection(&part_b).collect();
        assert!(overlap.is_empty(), "searched twice: {overlap:?}");
        let both: Answer = part_a.union(&part_b).cloned().collect();
        assert_eq!(both, truth, "moved at hit {moved_at_hit}");
    }
}

/// A member asked for a directory whose table it does not hold (it moved
/// away) says so — the asker then asks the holder — instead of answering
/// as for a gone directory, which made the asker drop every entry below
/// it (found by the search benchmark while tables moved). And searching
/// counts no operation on the tables it reads (search load made the
/// balancer move tables back and forth).
#[test]
fn a_directory_held_elsewhere_is_not_taken_for_gone_and_searches_are_not_load() {
    let (_store, catalog, a, b) = two_members();
    populate(&a);
    let root = Credentials::root();
    let d4 = a.lookup(&root, Soid::ROOT, b"d4").unwrap().soid;
    let table = a.table_holding(d4).unwrap();
    move_to_b(&catalog, &a, &b, table);
    assert_eq!(
        a.dir_chain(d4).unwrap_err(),
        FsError::WrongServer { soid: d4 }
    );
    let chain = b.dir_chain(d4).unwrap();
    assert_eq!(chain.first().map(|r| r.soid), Some(d4));
    let ops = |e: &Engine| e.table_ops().into_iter().map(|(_, n)| n).sum::<u64>();
    let before = (ops(&a), ops(&b));
    let peer = Peer(&a);
    let on_b = Spread::new(vec![SoidRange::ALL], &peer);
    assert!(!search(&b, &root, Soid::ROOT, &Expr::True, Some(&on_b)).is_empty());
    search(&a, &user(), Soid::ROOT, &Expr::True, None);
    let _ = b.dir_chain(d4);
    assert_eq!((ops(&a), ops(&b)), before, "searches counted as operations");
}

/// A deeper tree, like the benchmark's copies: `/u/cI/dJ/eK/fL`.
fn populate_deep(e: &Engine) {
    let dir = |p: Soid, n: String| mkdir(e, p, n.as_bytes()).soid;
    let u = dir(Soid::ROOT, "u".into());
    for i in 0..3 {
        let c = dir(u, format!("c{i}"));
        for j in 0..4 {
            let d = dir(c, format!("d{j}"));
            for k in 0..3 {
                let x = dir(d, format!("e{k}"));
                for l in 0..2 {
                    create(e, x, format!("f{l}").as_bytes());
                }
            }
        }
    }
}

/// Reading the other member's directories is a round trip each time: a
/// search reads each foreign directory at most once (its threads share
/// what they read) and many at a time — a few batches per search, one per
/// member hop of the deepest chain, not one call per foreign directory
/// (issue 21's benchmark: ~2,700 calls per query at 0.25 ms each). The
/// answers stay exactly one engine's.
#[test]
fn a_search_reads_each_foreign_directory_once_in_a_few_batches() {
    let (_store, catalog, a, b) = two_members();
    populate_deep(&a);
    let root = Credentials::root();
    let u = a.lookup(&root, Soid::ROOT, b"u").unwrap().soid;
    let c1 = a.lookup(&root, u, b"c1").unwrap().soid;
    let callers = [root.clone(), user()];
    let scopes = [Soid::ROOT, c1];
    let mut truth = Vec::new();
    for cred in &callers {
        for &scope in &scopes {
            truth.push(search(&a, cred, scope, &Expr::True, None));
        }
    }
    let tables = a.owned_tables();
    assert!(tables.len() >= 20, "{tables:?}");
    every_other_to_b(&catalog, &a, &b, &tables);
    let mut k = 0;
    for cred in &callers {
        for &scope in &scopes {
            let mut parts = Vec::new();
            for (here, there) in [(&a, &b), (&b, &a)] {
                for threads in [1, 4] {
                    let peer = Counting::new(there);
                    let sp = Spread::new(vec![SoidRange::ALL], &peer);
                    let opts = SearchOptions {
                        spread: Some(&sp),
                        threads,
                        spawn_after: std::time::Duration::ZERO,
                        ..SearchOptions::default()
                    };
                    let mut got = Answer::new();
                    let at = sextant_engine::search::Scope::Soid(scope);
                    here.search_with(cred, at, &Expr::True, &opts, |h| {
                        let hit = h.to_hit();
                        got.insert((hit.path.to_vec(), hit.depth));
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                    let asked = peer.asked.lock().unwrap();
                    let calls = peer.calls.load(Ordering::Relaxed);
                    eprintln!(
                        "uid {} scope {scope:?}, {threads} threads: {calls} calls for {} directories",
                        cred.uid,
                        asked.len()
                    );
                    let twice: Vec<_> = asked.iter().filter(|(_, n)| **n > 1).collect();
                    assert!(twice.is_empty(), "asked more than once: {twice:?}");
                    assert!(
                        calls <= 4 && asked.len() >= 2 * calls,
                        "uid {} scope {scope:?}, {threads} threads: {calls} calls for {} directories",
                        cred.uid,
                        asked.len()
                    );
                    if threads == 1 {
                        parts.push(got);
                    }
                }
            }
            let both: Answer = parts[0].union(&parts[1]).cloned().collect();
            assert_eq!(both, truth[k], "uid {} scope {scope:?}", cred.uid);
            k += 1;
        }
    }
}

/// A member answers many directories in one reply (`DirChain` with
/// `more`): each directory's chain as [`Engine::dir_chain`] gives it, each
/// record once, the directories whose table it does not hold listed as
/// such (never as gone), and no more than fits in the budget.
#[test]
fn a_member_answers_many_directories_at_once() {
    let (_store, catalog, a, b) = two_members();
    populate_deep(&a);
    let root = Credentials::root();
    let at = |path: &[&str]| {
        path.iter().fold(Soid::ROOT, |d, n| {
            a.lookup(&root, d, n.as_bytes()).unwrap().soid
        })
    };
    let e1 = at(&["u", "c1", "d2", "e0"]);
    let e2 = at(&["u", "c1", "d2", "e1"]);
    let e3 = at(&["u", "c2", "d0", "e2"]);
    let file = at(&["u", "c2", "d0", "e2", "f1"]);
    let moved = at(&["u", "c0", "d3", "e1"]);
    let table = a.table_holding(moved).unwrap();
    assert!(![e1, e2, e3]
        .iter()
        .any(|d| a.table_holding(*d) == Some(table)));
    move_to_b(&catalog, &a, &b, table);

    let asked = [e1, e2, moved, file, e3, e1];
    let got = a.dir_chains(&asked, usize::MAX).unwrap();
    assert_eq!(got.answered, asked.len());
    assert_eq!(got.not_held, vec![moved], "held elsewhere, not gone");
    let by_soid: HashMap<Soid, &DirRecord> = got.records.iter().map(|r| (r.soid, r)).collect();
    assert_eq!(by_soid.len(), got.records.len(), "each directory once");
    assert!(!by_soid.contains_key(&file), "not a directory: no record");
    for d in [e1, e2, e3] {
        // The reply holds the whole chain dir_chain gives.
        for r in a.dir_chain(d).unwrap() {
            assert_eq!(by_soid.get(&r.soid), Some(&&r));
        }
    }
    // Shared ancestors once: /u/c1/d2 is e1's and e2's.
    let d2 = at(&["u", "c1", "d2"]);
    assert!(by_soid.contains_key(&d2));
    // A budget of one record answers the first directory only (at least one).
    let first = a.dir_chains(&asked, 1).unwrap();
    assert_eq!(first.answered, 1);
    assert_eq!(
        first.records.iter().map(|r| r.soid).collect::<Vec<_>>(),
        a.dir_chain(e1)
            .unwrap()
            .iter()
            .map(|r| r.soid)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        b.dir_chains(&[e1, moved], usize::MAX).unwrap().not_held,
        vec![e1]
    );
}

/// Paths remembered through another member's directories (a spread search
/// whose caller vouches for them, [`Spread::remembering`]): that member's
/// [`Engine::dir_epoch`] advances with every rename, chmod and chown of a
/// directory it holds, and once the caller has seen it advance and made
/// the engine forget ([`Engine::forget_remembered_dirs`]), no search
/// answers with a path or a permission from before — the remembered
/// answer is again what reading every directory gives.
#[test]
fn remembered_paths_through_another_member_follow_its_changes_once_forgotten() {
    let (_store, catalog, a, b) = two_members();
    populate(&a);
    let root = Credentials::root();
    let lookup = |name: &[u8]| a.lookup(&root, Soid::ROOT, name).unwrap().soid;
    let (d2, d4) = (lookup(b"d2"), lookup(b"d4"));
    let open_dirs = [(lookup(b"d3"), "d3"), (lookup(b"d5"), "d5")];
    every_other_to_b(&catalog, &a, &b, &a.owned_tables());
    let callers = [root.clone(), user()];
    let (from_a, from_b) = (Peer(&b), Peer(&a));
    let answer = |cred: &Credentials, remembering: bool| -> Answer {
        let mut both = Answer::new();
        for (e, foreign) in [(&a, &from_a), (&b, &from_b)] {
            let mut sp = Spread::new(vec![SoidRange::ALL], foreign);
            if remembering {
                sp = sp.remembering();
            }
            both.extend(search(e, cred, Soid::ROOT, &Expr::True, Some(&sp)));
        }
        both
    };
    let check = |what: &str| {
        for cred in &callers {
            let fresh = answer(cred, false);
            for pass in 0..2 {
                assert_eq!(
                    answer(cred, true),
                    fresh,
                    "{what}: uid {} pass {pass}: remembered paths differ from the directories",
                    cred.uid
                );
            }
        }
    };
    let forget = || {
        a.forget_remembered_dirs();
        b.forget_remembered_dirs();
    };
    check("before any change");
    // Runs `op` on whichever member can (the one holding what it
    // changes); that member's directory epoch must advance.
    let try_on_holder = |what: &str, op: &dyn Fn(&Engine) -> Result<(), FsError>| {
        for e in [&a, &b] {
            let before = e.dir_epoch();
            if op(e).is_ok() {
                assert!(
                    e.dir_epoch() > before,
                    "{what}: the directory epoch did not advance"
                );
                return true;
            }
        }
        false
    };
    let on_holder = |what: &str, op: &dyn Fn(&Engine) -> Result<(), FsError>| {
        assert!(try_on_holder(what, op), "{what}: neither member could");
    };
    // A rename inside /d3 or /d5 (one a member can make alone): every
    // path below the renamed directory changes.
    let renamed = open_dirs
        .iter()
        .flat_map(|d| (0..3).map(move |j| (d, j)))
        .find(|((dir, _), j)| {
            try_on_holder("rename", &|e| {
                let (from, to) = (format!("s{j}"), format!("t{j}"));
                e.rename(
                    &root,
                    *dir,
                    from.as_bytes(),
                    *dir,
                    to.as_bytes(),
                    Default::default(),
                )?
                .wait(e)
                .map(|_| ())
            })
        });
    let ((_, name), j) = renamed.expect("a rename one member can make");
    forget();
    check("after a rename");
    let new = format!("/{name}/t{j}/");
    assert!(answer(&root, true)
        .iter()
        .any(|(p, _)| p.starts_with(new.as_bytes())));
    // chmod: /d4 closed to others.
    let chmod = SetAttr {
        perm: Some(0o700),
        ..Default::default()
    };
    on_holder("chmod", &|e| {
        e.setattr(&root, d4, &chmod)?.wait(e).map(|_| ())
    });
    forget();
    check("after a chmod");
    assert!(!answer(&user(), true)
        .iter()
        .any(|(p, _)| p.starts_with(b"/d4/")));
    // chown: /d2 (0744: others may not search it) given to the user.
    let chown = SetAttr {
        uid: Some(user().uid),
        ..Default::default()
    };
    on_holder("chown", &|e| {
        e.setattr(&root, d2, &chown)?.wait(e).map(|_| ())
    });
    forget();
    check("after a chown");
    assert!(answer(&user(), true)
        .iter()
        .any(|(p, _)| p.starts_with(b"/d2/s0/")));
}

/// Root's totals from `/` (`stats /`, `du /`: no depth limit, no path)
/// need no other member's directory: every link below `/` is in scope and
/// visible to root, so each member adds up its own tables — from their
/// summaries, or row by row — without resolving a single exit, and
/// without the scope root's record (`/` is a directory without ancestors
/// that root may list). The parts add up to one
/// engine's answer; before, each member read the other's directories up
/// every exit's chain (and its server asked every other server for their
/// epochs first).
#[test]
fn roots_totals_from_the_top_read_no_other_members_directory() {
    use sextant_engine::search::{GroupBy, Pred};
    use sextant_types::FileType;
    let (_store, catalog, a, b) = two_members();
    populate(&a);
    let tables = a.owned_tables();
    let below_top = || {
        Expr::pred(Pred::Depth {
            min: 1,
            max: u32::MAX,
        })
    };
    let expressions = [
        Expr::True,
        below_top(),
        Expr::and(below_top(), Expr::pred(Pred::Type(vec![FileType::Regular]))),
        Expr::and(
            below_top(),
            Expr::not(Expr::pred(Pred::Type(vec![FileType::Directory]))),
        ),
        Expr::pred(Pred::Name {
            pattern: b"f*".to_vec().into(),
            glob: true,
            ci: false,
        }),
    ];
    let groupings = [None, Some(GroupBy::Uid), Some(GroupBy::Type)];
    let root = Credentials::root();
    let scope = || sextant_engine::search::Scope::Soid(Soid::ROOT);
    let mut truth = Vec::new();
    for expr in &expressions {
        for by in groupings {
            let (agg, _) = a
                .search_tally(&root, scope(), expr, by, &SearchOptions::default())
                .unwrap();
            assert!(agg.total.count > 0, "{expr:?}");
            truth.push(agg);
        }
    }
    every_other_to_b(&catalog, &a, &b, &tables);
    assert!(!b.owned_tables().is_empty());
    let (from_a, from_b) = (Counting::new(&b), Counting::new(&a));
    let mut k = 0;
    for expr in &expressions {
        for by in groupings {
            for summaries in [false, true] {
                for threads in [1, 4] {
                    let mut sum = sextant_engine::search::Aggregation::default();
                    for (e, reader) in [(&a, &from_a), (&b, &from_b)] {
                        let sp = Spread::new(vec![SoidRange::ALL], reader);
                        let opts = SearchOptions {
                            spread: Some(&sp),
                            threads,
                            spawn_after: std::time::Duration::ZERO,
                            summaries,
                            ..SearchOptions::default()
                        };
                        let (part, _) = e.search_tally(&root, scope(), expr, by, &opts).unwrap();
                        sum.merge(part);
                    }
                    assert_eq!(
                        sum, truth[k],
                        "{expr:?} by {by:?} summaries {summaries} threads {threads}"
                    );
                }
            }
            k += 1;
        }
    }
    // a holds `/`; b reads nothing of a, not even the scope root's record
    // (`/` searched by root decides nothing by its record: each part's
    // server read it from the root's holder before, a round trip per
    // part of every `stats /`).
    assert_eq!(
        from_a.calls.load(Ordering::Relaxed),
        0,
        "a read nothing of b"
    );
    let asked = from_b.asked.lock().unwrap().clone();
    assert!(asked.is_empty(), "b read nothing of a: {asked:?}");
    assert_eq!(from_b.calls.load(Ordering::Relaxed), 0);
    // A caller other than root depends on `/`'s mode: b reads its record.
    let sp = Spread::new(vec![SoidRange::ALL], &from_b);
    let opts = SearchOptions {
        spread: Some(&sp),
        ..SearchOptions::default()
    };
    b.search_tally(&user(), scope(), &Expr::True, None, &opts)
        .unwrap();
    assert!(from_b.asked.lock().unwrap().contains_key(&Soid::ROOT));
}
