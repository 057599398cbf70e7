//! From a find expression (with actions and side effects) to server
//! queries, and the exact client-side evaluation of each hit.
//!
//! find evaluates its expression per entry, left to right with
//! short-circuit, running actions as it reaches them. The server only
//! filters. So for an expression `e` we derive, as boolean formulas over
//! its tests:
//! - `T(e)`: `e` evaluates to true;
//! - `Out(e)`: some output action (`-print`, `-printf`, ...) runs;
//! - `Prune(e)`: `-prune` runs.
//!
//! (`T(a -a b) = T(a)∧T(b)`, `Out(a -a b) = Out(a) ∨ (T(a) ∧ Out(b))`,
//! `Out(a -o b) = Out(a) ∨ (¬T(a) ∧ Out(b))`, `Out(! a) = Out(a)`,
//! `Out(a , b) = Out(a) ∨ Out(b)`, the same for `Prune`.)
//!
//! The server is asked for the entries satisfying `Out` — only they can
//! print — and the client then runs the real expression on each, in order.
//! Tests the server cannot decide the way find does are *relaxed* in the
//! server filter (true where they occur positively, false under a
//! negation), so the filter over-approximates and the client decides
//! exactly: `-path` (find matches the path as printed, with the prefix the
//! user typed; the server knows canonical namespace paths — the two agree,
//! and `-path` goes to the server, only for a namespace starting point
//! typed canonically) and anything
//! about the starting point itself (find names it as typed), which is
//! therefore evaluated apart (depth 0).
//!
//! Client-side, every test is decided from the hit's attributes and paths
//! except `-empty` on directories and the xattr tests: those are *opaque*,
//! and their truth comes from extra queries (`P ∧ filter`) whose hits are
//! remembered by path.

use super::parse::{Action, ClientTest, Node, Test};
use sextant_engine::search::{glob_match, Expr, PermMatch, Pred, SearchHit};
use sextant_types::FileType;
use std::collections::HashSet;

/// A resolved expression: every test a wire predicate or a constant.
pub type Tree = Node;

fn fold_and(a: Expr, b: Expr) -> Expr {
    match (a, b) {
        (Expr::False, _) | (_, Expr::False) => Expr::False,
        (Expr::True, x) | (x, Expr::True) => x,
        (Expr::And(mut xs), Expr::And(ys)) => {
            xs.extend(ys);
            Expr::And(xs)
        }
        (Expr::And(mut xs), y) => {
            xs.push(y);
            Expr::And(xs)
        }
        (x, y) => Expr::And(vec![x, y]),
    }
}

fn fold_or(a: Expr, b: Expr) -> Expr {
    match (a, b) {
        (Expr::True, _) | (_, Expr::True) => Expr::True,
        (Expr::False, x) | (x, Expr::False) => x,
        (Expr::Or(mut xs), Expr::Or(ys)) => {
            xs.extend(ys);
            Expr::Or(xs)
        }
        (Expr::Or(mut xs), y) => {
            xs.push(y);
            Expr::Or(xs)
        }
        (x, y) => Expr::Or(vec![x, y]),
    }
}

fn fold_not(a: Expr) -> Expr {
    match a {
        Expr::True => Expr::False,
        Expr::False => Expr::True,
        Expr::Not(x) => *x,
        x => Expr::Not(Box::new(x)),
    }
}

/// Does the server decide this predicate the way find does (at depth ≥ 1)?
/// `-path` only when printed paths are the namespace paths (`paths`).
fn server_exact(p: &Pred, paths: bool) -> bool {
    paths || !matches!(p, Pred::Path { .. })
}

/// `T(e)` with non-exact tests relaxed toward `positive`.
fn truth(n: &Node, positive: bool, paths: bool) -> Expr {
    match n {
        Node::Test(Test::Const(b)) => {
            if *b {
                Expr::True
            } else {
                Expr::False
            }
        }
        Node::Test(Test::Pred(p)) => {
            if server_exact(p, paths) {
                Expr::Pred(p.clone())
            } else if positive {
                Expr::True
            } else {
                Expr::False
            }
        }
        // A matching -lname is at least a symlink.
        Node::Test(Test::Client(ClientTest::LinkName { .. })) if positive => {
            Expr::Pred(Pred::Type(vec![FileType::Symlink]))
        }
        // Client-only tests, and unresolved reference tests (which never
        // reach here: they are resolved first).
        Node::Test(_) => {
            if positive {
                Expr::True
            } else {
                Expr::False
            }
        }
        Node::Action(_) => Expr::True,
        Node::And(a, b) => fold_and(truth(a, positive, paths), truth(b, positive, paths)),
        Node::Or(a, b) => fold_or(truth(a, positive, paths), truth(b, positive, paths)),
        Node::Not(a) => fold_not(truth(a, !positive, paths)),
        Node::Comma(_, b) => truth(b, positive, paths),
    }
}

/// The condition (relaxed upward) under which an action matching `is`
/// runs.
fn runs(n: &Node, is: &dyn Fn(&Action) -> bool, paths: bool) -> Expr {
    match n {
        Node::Test(_) => Expr::False,
        Node::Action(a) => {
            if is(a) {
                Expr::True
            } else {
                Expr::False
            }
        }
        Node::And(a, b) => fold_or(
            runs(a, is, paths),
            fold_and(truth(a, true, paths), runs(b, is, paths)),
        ),
        Node::Or(a, b) => fold_or(
            runs(a, is, paths),
            fold_and(fold_not(truth(a, false, paths)), runs(b, is, paths)),
        ),
        Node::Not(a) => runs(a, is, paths),
        Node::Comma(a, b) => fold_or(runs(a, is, paths), runs(b, is, paths)),
    }
}

/// The server-side filters of an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filters {
    /// Entries on which an output action may run.
    pub out: Expr,
    /// Entries on which `-prune` may run (`False` when nothing prunes).
    pub prune: Expr,
    /// Opaque tests (`-empty`, xattrs) whose truth the client needs.
    pub opaque: Vec<Pred>,
}

/// `paths`: the printed paths are the namespace paths (a namespace
/// starting point typed canonically), so the server may decide `-path`.
pub fn filters(tree: &Tree, depth_first: bool, paths: bool) -> Filters {
    let out = runs(tree, &|a| !matches!(a, Action::Prune), paths);
    let prune = if depth_first {
        Expr::False
    } else {
        runs(tree, &|a| matches!(a, Action::Prune), paths)
    };
    let mut opaque = Vec::new();
    tree.for_each_leaf(&mut |n| {
        if let Node::Test(Test::Pred(p)) = n {
            if is_opaque(p) && !opaque.contains(p) {
                opaque.push(p.clone());
            }
        }
    });
    Filters { out, prune, opaque }
}

fn is_opaque(p: &Pred) -> bool {
    matches!(p, Pred::Empty | Pred::XattrExists(_) | Pred::XattrEq(..))
}

/// The server query for opaque test `p`: entries where it holds and that
/// may matter (`filter`); for `-empty` only directories (files are decided
/// by size).
pub fn opaque_query(p: &Pred, filter: &Expr) -> Expr {
    let base = match p {
        Pred::Empty => fold_and(
            Expr::Pred(Pred::Empty),
            Expr::Pred(Pred::Type(vec![FileType::Directory])),
        ),
        other => Expr::Pred(other.clone()),
    };
    fold_and(filter.clone(), base)
}

pub fn and(a: Expr, b: Expr) -> Expr {
    fold_and(a, b)
}

pub fn or(a: Expr, b: Expr) -> Expr {
    fold_or(a, b)
}

/// One entry as the client evaluates it.
pub struct Subject<'a> {
    pub hit: &'a SearchHit,
    /// The path as printed (find's `pathname`).
    pub printed: &'a [u8],
    /// The name `-name` sees: the last component of the printed path,
    /// trailing slashes removed.
    pub name: &'a [u8],
}

/// Truth of opaque tests: for each, the namespace paths where it holds.
#[derive(Default)]
pub struct Opaque {
    pub sets: Vec<(Pred, HashSet<Vec<u8>>)>,
}

impl Opaque {
    fn holds(&self, p: &Pred, path: &[u8]) -> bool {
        self.sets.iter().any(|(q, s)| q == p && s.contains(path))
    }
}

/// Decides one predicate exactly, as find would, for `s`.
pub fn eval_pred(p: &Pred, s: &Subject<'_>, opaque: &Opaque) -> bool {
    let a = &s.hit.attr;
    match p {
        Pred::Name { pattern, glob, ci } => match (glob, ci) {
            (true, _) => glob_match(pattern, s.name, *ci),
            (false, false) => **pattern == *s.name,
            (false, true) => pattern.eq_ignore_ascii_case(s.name),
        },
        Pred::Path { pattern, ci } => glob_match(pattern, s.printed, *ci),
        Pred::Type(ts) => ts.contains(&a.ftype),
        Pred::Uid { lo, hi } => (*lo..=*hi).contains(&a.uid),
        Pred::Gid { lo, hi } => (*lo..=*hi).contains(&a.gid),
        Pred::Size { lo, hi } => (*lo..=*hi).contains(&a.size),
        Pred::Time { which, lo, hi } => {
            let t = match which {
                sextant_engine::bloom::TimeAttr::Atime => a.atime,
                sextant_engine::bloom::TimeAttr::Mtime => a.mtime,
                sextant_engine::bloom::TimeAttr::Ctime => a.ctime,
            };
            *lo <= t && t <= *hi
        }
        Pred::Perm(PermMatch::Exact(m)) => a.perm & 0o7777 == u32::from(*m) & 0o7777,
        Pred::Perm(PermMatch::All(m)) => a.perm & u32::from(*m) == u32::from(*m),
        Pred::Perm(PermMatch::Any(m)) => *m & 0o7777 == 0 || a.perm & u32::from(*m) != 0,
        Pred::Links { lo, hi } => (*lo..=*hi).contains(&a.nlink),
        Pred::Empty => match a.ftype {
            FileType::Regular => a.size == 0,
            FileType::Directory => opaque.holds(p, &s.hit.path),
            _ => false,
        },
        Pred::Soid(x) => s.hit.soid == *x,
        Pred::XattrExists(_) | Pred::XattrEq(..) => opaque.holds(p, &s.hit.path),
        Pred::Depth { min, max } => (*min..=*max).contains(&s.hit.depth),
    }
}

/// Runs the expression on one entry: `act` is called for each action
/// reached, in order, and returns the action's value (always true for
/// find's actions). Returns the expression's value.
/// `client` decides the client-only tests.
pub fn run(
    n: &Tree,
    s: &Subject<'_>,
    opaque: &Opaque,
    client: &mut dyn FnMut(&ClientTest, &SearchHit) -> bool,
    act: &mut dyn FnMut(&Action) -> bool,
) -> bool {
    match n {
        Node::Test(Test::Const(b)) => *b,
        Node::Test(Test::Pred(p)) => eval_pred(p, s, opaque),
        Node::Test(Test::Client(t)) => client(t, s.hit),
        Node::Test(_) => false,
        Node::Action(a) => act(a),
        Node::And(a, b) => run(a, s, opaque, client, act) && run(b, s, opaque, client, act),
        Node::Or(a, b) => run(a, s, opaque, client, act) || run(b, s, opaque, client, act),
        Node::Not(a) => !run(a, s, opaque, client, act),
        Node::Comma(a, b) => {
            run(a, s, opaque, client, act);
            run(b, s, opaque, client, act)
        }
    }
}

/// access(2) by permission bits: root may read and write anything and
/// execute what has an execute bit or is a directory; anyone else gets
/// exactly one class (owner, else group, else other).
pub fn access(a: &sextant_types::Attr, cred: &sextant_types::Credentials, mask: u32) -> bool {
    if cred.is_root() {
        return mask & 1 == 0 || a.ftype == FileType::Directory || a.perm & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        (a.perm >> 6) & 7
    } else if cred.in_group(a.gid) {
        (a.perm >> 3) & 7
    } else {
        a.perm & 7
    };
    bits & mask == mask
}

#[cfg(test)]
mod tests {
    use super::super::parse::{parse, Env};
    use super::*;
    use sextant_types::{Attr, Nanos, Soid};

    struct E;
    impl Env for E {
        fn now(&self) -> Nanos {
            Nanos(0)
        }
        fn day_start(&self) -> Nanos {
            Nanos(0)
        }
        fn uid_of(&self, _: &str) -> Option<u32> {
            None
        }
        fn gid_of(&self, _: &str) -> Option<u32> {
            None
        }
    }

    fn tree(s: &str) -> (Tree, bool) {
        let args: Vec<String> = s.split_whitespace().map(String::from).collect();
        let c = parse(&args, &E).unwrap();
        (c.expr, c.depth_first)
    }

    fn name(n: &str) -> Expr {
        Expr::name(n.as_bytes())
    }

    #[test]
    fn output_and_prune_conditions() {
        let (t, d) = tree(". -name a -prune -o -name b -print");
        let f = filters(&t, d, false);
        assert_eq!(f.out, Expr::And(vec![Expr::not(name("a")), name("b")]));
        assert_eq!(f.prune, name("a"));
        // -depth disables pruning.
        let (t, _) = tree(". -name a -prune -o -print");
        assert_eq!(filters(&t, true, false).prune, Expr::False);
        // Implicit print after everything.
        let (t, d) = tree(". -name a -o -name b");
        assert_eq!(
            filters(&t, d, false).out,
            Expr::Or(vec![name("a"), name("b")])
        );
        // -path is relaxed: true positively, false under !.
        let (t, d) = tree(". -path x -name a");
        assert_eq!(filters(&t, d, false).out, name("a"));
        let (t, d) = tree(". ! -path x -name a");
        assert_eq!(filters(&t, d, false).out, name("a"));
        let (t, d) = tree(". -path x -o -name a");
        assert_eq!(filters(&t, d, false).out, Expr::True);
        // ... unless printed paths are namespace paths.
        assert_eq!(
            filters(&t, d, true).out,
            Expr::Or(vec![Expr::path(b"x"), name("a")])
        );
        // Actions in both branches of a comma.
        let (t, d) = tree(". -name a -print , -name b -print");
        assert_eq!(
            filters(&t, d, false).out,
            Expr::Or(vec![name("a"), name("b")])
        );
        // -lname is decided by the client; the server is told "a symlink".
        let (t, d) = tree(". -lname x -o -name a");
        assert_eq!(
            filters(&t, d, false).out,
            Expr::Or(vec![
                Expr::Pred(Pred::Type(vec![FileType::Symlink])),
                name("a")
            ])
        );
        let (t, d) = tree(". ! -lname x -name a");
        assert_eq!(filters(&t, d, false).out, name("a"));
        // Opaque tests are collected once each.
        let (t, d) = tree(". -empty -o -xattr k -o -empty");
        assert_eq!(
            filters(&t, d, false).opaque,
            vec![Pred::Empty, Pred::XattrExists(b"k".as_slice().into())]
        );
    }

    #[test]
    fn client_evaluation_runs_actions_in_order() {
        let (t, _) = tree(". -name a -printf A -o -printf B -false -o -print");
        let hit = SearchHit {
            path: b"/x/a".to_vec().into(),
            soid: Soid::from_u128(5),
            attr: Attr {
                soid: Soid::from_u128(5),
                ftype: FileType::Directory,
                perm: 0o755,
                uid: 0,
                gid: 0,
                nlink: 2,
                size: 0,
                rdev: 0,
                atime: Nanos(0),
                mtime: Nanos(0),
                ctime: Nanos(0),
                parent: Soid::ROOT,
            },
            depth: 1,
        };
        let mut log = Vec::new();
        let mut run_on = |name: &[u8]| {
            log.clear();
            let s = Subject {
                hit: &hit,
                printed: b"m/a",
                name,
            };
            run(
                &t,
                &s,
                &Opaque::default(),
                &mut |_: &ClientTest, _: &SearchHit| false,
                &mut |a| {
                    log.push(match a {
                        Action::Printf(_) => "printf",
                        Action::Print => "print",
                        _ => "other",
                    });
                    true
                },
            );
            log.clone()
        };
        assert_eq!(run_on(b"a"), vec!["printf"]);
        assert_eq!(run_on(b"b"), vec!["printf", "print"]);
        // -empty on a directory comes from the opaque set.
        let (t, _) = tree(". -empty");
        let s = Subject {
            hit: &hit,
            printed: b"m/a",
            name: b"a",
        };
        let mut o = Opaque::default();
        assert!(!run(
            &t,
            &s,
            &o,
            &mut |_: &ClientTest, _: &SearchHit| false,
            &mut |_| true
        ));
        o.sets
            .push((Pred::Empty, [b"/x/a".to_vec()].into_iter().collect()));
        assert!(run(
            &t,
            &s,
            &o,
            &mut |_: &ClientTest, _: &SearchHit| false,
            &mut |_| true
        ));
    }
}
