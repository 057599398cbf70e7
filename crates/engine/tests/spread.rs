//! Search across members (issue 21 item 3): a namespace whose tables are
//! spread over two member engines answers, as the union of each member's
//! spread search, exactly what one engine holding every table answers —
//! paths, depths, and for a caller other than root exactly what that
//! caller may list, even where the ancestors of a table live on the other
//! member. Ranges a member does not hold are reported, never searched.

use sextant_engine::search::{DirRecord, Expr, ForeignDirs, Pred, SearchOptions, Spread};
use sextant_engine::store::{MemStore, Store};
use sextant_engine::{Engine, EngineConfig, MemCatalog, MemberConfig};
use sextant_types::{Credentials, FsError, SetAttr, Soid, SoidRange};
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::Arc;

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        table_dir_limit: 3,
        table_inode_limit: 12,
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

/// The other member, read as a server reads it for a peer.
struct Peer<'a>(&'a Engine);

impl ForeignDirs for Peer<'_> {
    fn chain(&self, dir: Soid) -> Result<Vec<DirRecord>, FsError> {
        self.0.dir_chain(dir)
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
        let d = e
            .mkdir(&root, Soid::ROOT, format!("d{i}").as_bytes(), 0o755)
            .unwrap()
            .wait(e)
            .unwrap();
        for j in 0..3 {
            let s = e
                .mkdir(&root, d.soid, format!("s{j}").as_bytes(), 0o755)
                .unwrap()
                .wait(e)
                .unwrap();
            for k in 0..3 {
                e.create(&root, s.soid, format!("f{k}").as_bytes(), 0o644, true)
                    .unwrap()
                    .wait(e)
                    .unwrap();
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
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
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
    for (n, t) in tables.iter().enumerate() {
        if n % 2 == 1 {
            let m = a.drop_table(*t).unwrap();
            assert!(catalog.assign(*t, "b"));
            b.add_table(&m).unwrap();
        }
    }
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
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    populate(&a);
    let tables = a.owned_tables();
    let moved = tables[tables.len() - 1];
    let m = a.drop_table(moved).unwrap();
    assert!(catalog.assign(moved, "b"));
    b.add_table(&m).unwrap();
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
        let store = MemStore::new();
        let catalog = Arc::new(MemCatalog::new());
        let a = member(&store, &catalog, "a");
        let b = member(&store, &catalog, "b");
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
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let a = member(&store, &catalog, "a");
    let b = member(&store, &catalog, "b");
    populate(&a);
    let root = Credentials::root();
    let d4 = a.lookup(&root, Soid::ROOT, b"d4").unwrap().soid;
    let table = a.table_holding(d4).unwrap();
    let m = a.drop_table(table).unwrap();
    assert!(catalog.assign(table, "b"));
    b.add_table(&m).unwrap();
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
