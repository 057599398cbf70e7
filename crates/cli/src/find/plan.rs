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

/// Which predicates the server decides the way find does, beside those it
/// always does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exact {
    /// `-path`: the printed paths are the namespace paths (a namespace
    /// starting point typed canonically).
    pub paths: bool,
    /// `-empty`: not when `-delete` runs, since a directory emptied by it
    /// is empty when find reaches it, after its contents.
    pub empty: bool,
}

/// Does the server decide this predicate the way find does (at depth ≥ 1)?
fn server_exact(p: &Pred, exact: Exact) -> bool {
    match p {
        Pred::Path { .. } => exact.paths,
        Pred::Empty => exact.empty,
        _ => true,
    }
}

/// `T(e)` with non-exact tests relaxed toward `positive`.
fn truth(n: &Node, positive: bool, exact: Exact) -> Expr {
    match n {
        Node::Test(Test::Const(b)) => {
            if *b {
                Expr::True
            } else {
                Expr::False
            }
        }
        Node::Test(Test::Pred(p)) => {
            if server_exact(p, exact) {
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
        // A matching -regex ends its name with the text the expression
        // requires there, if any: the server narrows by name.
        Node::Test(Test::Regex(r)) if positive => match r.name_suffix() {
            Some(suffix) => {
                let mut glob = b"*".to_vec();
                for &c in suffix.as_bytes() {
                    if matches!(c, b'*' | b'?' | b'[' | b']' | b'\\') {
                        glob.push(b'\\');
                    }
                    glob.push(c);
                }
                Expr::Pred(Pred::Name {
                    pattern: glob.into(),
                    glob: true,
                    ci: false,
                })
            }
            None => Expr::True,
        },
        // A matching -xtype is of one of its types, or a symlink.
        Node::Test(Test::Client(ClientTest::XType(ts))) if positive => {
            let mut ts = ts.clone();
            if !ts.contains(&FileType::Symlink) {
                ts.push(FileType::Symlink);
            }
            Expr::Pred(Pred::Type(ts))
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
        // A command's exit status, a deletion's success: unknown here.
        Node::Action(a) if a.may_be_false() => {
            if positive {
                Expr::True
            } else {
                Expr::False
            }
        }
        Node::Action(_) => Expr::True,
        Node::And(a, b) => fold_and(truth(a, positive, exact), truth(b, positive, exact)),
        Node::Or(a, b) => fold_or(truth(a, positive, exact), truth(b, positive, exact)),
        Node::Not(a) => fold_not(truth(a, !positive, exact)),
        Node::Comma(_, b) => truth(b, positive, exact),
    }
}

/// The condition (relaxed upward) under which an action matching `is`
/// runs.
fn runs(n: &Node, is: &dyn Fn(&Action) -> bool, exact: Exact) -> Expr {
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
            runs(a, is, exact),
            fold_and(truth(a, true, exact), runs(b, is, exact)),
        ),
        Node::Or(a, b) => fold_or(
            runs(a, is, exact),
            fold_and(fold_not(truth(a, false, exact)), runs(b, is, exact)),
        ),
        Node::Not(a) => runs(a, is, exact),
        Node::Comma(a, b) => fold_or(runs(a, is, exact), runs(b, is, exact)),
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

/// `exact`: what the server may decide besides what it always does.
pub fn filters(tree: &Tree, depth_first: bool, exact: Exact) -> Filters {
    let out = runs(tree, &|a| !matches!(a, Action::Prune), exact);
    let prune = if depth_first {
        Expr::False
    } else {
        runs(tree, &|a| matches!(a, Action::Prune), exact)
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
    /// An entry known only from its directory's listing ([`Blind`]);
    /// `None` for a search hit, whose attributes are known.
    pub blind: Option<&'a Blind>,
}

/// An entry of a directory the caller may read but not search, known
/// from the directory's listing alone, as find knows it: find reads such a
/// directory (readdir needs only `r`) but cannot `stat` what is in it
/// (that needs `x`). So it has the entry's name, and from readdir its
/// type (`d_type`) and inode number (`d_ino`) — except for a directory,
/// which find must `stat` to descend: that fails, find reports it, and
/// its type and number are unknown too. Tests and directives that need
/// anything else are false, as a failed `stat` makes them in find; find
/// reports that failure (once per entry; for a directory, it was reported
/// already).
#[derive(Debug)]
pub struct Blind {
    /// Not a directory: its type (the hit's `ftype`) and inode number are
    /// known.
    pub typed: bool,
    /// Its inode number as the mount's readdir showed it (under a mount;
    /// `None` for a namespace path, where it is the hit's SOID).
    pub ino: Option<u64>,
    /// The hit's SOID is the entry's (a namespace listing), so `-inum`
    /// compares with it; under a mount `Pred::Soid` can only come from
    /// `-samefile`, which needs `stat`.
    pub soid_known: bool,
    /// Something needed `stat` (see [`Blind::stat_needed`]).
    stat_failed: std::cell::Cell<bool>,
}

impl Blind {
    pub fn new(typed: bool, ino: Option<u64>, soid_known: bool) -> Blind {
        Blind {
            typed,
            ino,
            soid_known,
            stat_failed: Default::default(),
        }
    }

    /// Notes that a test or action needed what `stat` tells; returns the
    /// test's value (false).
    pub fn stat_needed(&self) -> bool {
        self.stat_failed.set(true);
        false
    }

    /// Did the evaluation need `stat` (so that find would report the
    /// entry)?
    pub fn stat_failed(&self) -> bool {
        self.stat_failed.get()
    }

    /// Decides a client-only test: access(2) fails for everyone below a
    /// directory they cannot search (false, reported by no one); the
    /// inode number of a non-directory comes from readdir; the rest need
    /// `stat`.
    pub fn decide(&self, t: &ClientTest) -> bool {
        match t {
            ClientTest::Access(_) => false,
            ClientTest::Inode(n) if self.typed => self.ino.is_some_and(|i| u128::from(i) == *n),
            _ => self.stat_needed(),
        }
    }

    /// Decides a predicate: names, paths and depth as usual; the type and
    /// inode number when known; anything else needs `stat`.
    fn eval(&self, p: &Pred, s: &Subject<'_>, opaque: &Opaque) -> bool {
        match p {
            Pred::Name { .. } | Pred::Path { .. } | Pred::Depth { .. } => eval_known(p, s, opaque),
            Pred::Type(ts) if self.typed => ts.contains(&s.hit.attr.ftype),
            Pred::Soid(x) if self.typed && self.soid_known => s.hit.soid == *x,
            _ => self.stat_needed(),
        }
    }
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

    /// The directory at `path` is empty now (`-delete` emptied it after
    /// the opaque queries ran; find, visiting it after its contents,
    /// would find it empty).
    pub fn mark_empty(&mut self, path: &[u8]) {
        for (q, s) in &mut self.sets {
            if *q == Pred::Empty {
                s.insert(path.to_vec());
            }
        }
    }

    /// Does the expression test `-empty` (on directories: opaque)?
    pub fn tests_empty(&self) -> bool {
        self.sets.iter().any(|(q, _)| *q == Pred::Empty)
    }
}

/// Decides one predicate exactly, as find would, for `s`.
pub fn eval_pred(p: &Pred, s: &Subject<'_>, opaque: &Opaque) -> bool {
    match s.blind {
        Some(b) => b.eval(p, s, opaque),
        None => eval_known(p, s, opaque),
    }
}

/// [`eval_pred`] from the hit's attributes.
fn eval_known(p: &Pred, s: &Subject<'_>, opaque: &Opaque) -> bool {
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
/// reached, in order, and returns the action's value. Returns the
/// expression's value. `client` decides the client-only tests.
pub fn run(
    n: &Tree,
    s: &Subject<'_>,
    opaque: &Opaque,
    client: &mut dyn FnMut(&ClientTest, &SearchHit) -> bool,
    act: &mut dyn FnMut(&Action) -> bool,
) -> bool {
    let mut e = Eval::new(n);
    while let Some(a) = e.next_action(s, opaque, client) {
        e.resume(act(a));
    }
    e.value()
}

/// One evaluation of an expression on one entry, stopped at each action,
/// so that the caller may perform it however it must (a deletion is a
/// request to the server) and pass its value on: find's left-to-right
/// short-circuit order, with an explicit stack instead of recursion.
pub struct Eval<'t> {
    todo: Vec<Step<'t>>,
    value: bool,
}

enum Step<'t> {
    Node(&'t Node),
    /// The right side of `-a`, if the left one was true.
    AndThen(&'t Node),
    /// The right side of `-o`, if the left one was false.
    OrElse(&'t Node),
    Negate,
}

impl<'t> Eval<'t> {
    pub fn new(tree: &'t Tree) -> Self {
        Eval {
            todo: vec![Step::Node(tree)],
            value: false,
        }
    }

    /// Evaluates up to the next action and returns it (perform it, then
    /// [`Eval::resume`] with its value), or `None` at the end.
    pub fn next_action(
        &mut self,
        s: &Subject<'_>,
        opaque: &Opaque,
        client: &mut dyn FnMut(&ClientTest, &SearchHit) -> bool,
    ) -> Option<&'t Action> {
        while let Some(step) = self.todo.pop() {
            match step {
                Step::Node(n) => match n {
                    Node::Test(Test::Const(b)) => self.value = *b,
                    Node::Test(Test::Pred(p)) => self.value = eval_pred(p, s, opaque),
                    Node::Test(Test::Client(t)) => {
                        self.value = match s.blind {
                            Some(b) => b.decide(t),
                            None => client(t, s.hit),
                        }
                    }
                    Node::Test(Test::Regex(r)) => self.value = r.matches(s.printed),
                    Node::Test(_) => self.value = false,
                    Node::Action(a) => return Some(a),
                    Node::And(a, b) => {
                        self.todo.push(Step::AndThen(b));
                        self.todo.push(Step::Node(a));
                    }
                    Node::Or(a, b) => {
                        self.todo.push(Step::OrElse(b));
                        self.todo.push(Step::Node(a));
                    }
                    Node::Not(a) => {
                        self.todo.push(Step::Negate);
                        self.todo.push(Step::Node(a));
                    }
                    // Both sides, in order; the value is the right one's.
                    Node::Comma(a, b) => {
                        self.todo.push(Step::Node(b));
                        self.todo.push(Step::Node(a));
                    }
                },
                Step::AndThen(b) if self.value => self.todo.push(Step::Node(b)),
                Step::OrElse(b) if !self.value => self.todo.push(Step::Node(b)),
                Step::AndThen(_) | Step::OrElse(_) => {}
                Step::Negate => self.value = !self.value,
            }
        }
        None
    }

    /// The value of the action [`Eval::next_action`] returned.
    pub fn resume(&mut self, value: bool) {
        self.value = value;
    }

    /// The expression's value, once [`Eval::next_action`] returned `None`.
    pub fn value(&self) -> bool {
        self.value
    }
}

/// No action comes after a `-delete` (in find's left-to-right order), so
/// no deletion's value decides whether anything else runs.
pub fn nothing_follows_delete(tree: &Tree) -> bool {
    let mut seen_delete = false;
    let mut after = false;
    tree.for_each_leaf(&mut |n| {
        if let Node::Action(a) = n {
            after |= seen_delete;
            seen_delete |= matches!(a, Action::Delete);
        }
    });
    !after
}

/// Does whether `-prune` runs depend on a command's exit status (`-exec
/// ... ;` or `-ok` before it)? Then finding the pruned directories would
/// mean running commands twice, once ahead: refused.
pub fn prune_needs_command(tree: &Tree) -> bool {
    fn fixed(n: &Node, value: bool) -> Node {
        match n {
            Node::Action(Action::Exec(e)) if !e.batch => Node::Test(Test::Const(value)),
            Node::And(a, b) => Node::And(Box::new(fixed(a, value)), Box::new(fixed(b, value))),
            Node::Or(a, b) => Node::Or(Box::new(fixed(a, value)), Box::new(fixed(b, value))),
            Node::Comma(a, b) => Node::Comma(Box::new(fixed(a, value)), Box::new(fixed(b, value))),
            Node::Not(a) => Node::Not(Box::new(fixed(a, value))),
            other => other.clone(),
        }
    }
    let exact = Exact {
        paths: true,
        empty: true,
    };
    let prunes = |t: &Tree| runs(t, &|a| matches!(a, Action::Prune), exact);
    prunes(&fixed(tree, true)) != prunes(&fixed(tree, false))
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

    /// The server decides -empty, and -path when `paths`.
    fn exact(paths: bool) -> Exact {
        Exact { paths, empty: true }
    }
    use sextant_types::{Nanos, Soid};

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
        let f = filters(&t, d, exact(false));
        assert_eq!(f.out, Expr::And(vec![Expr::not(name("a")), name("b")]));
        assert_eq!(f.prune, name("a"));
        // -depth disables pruning.
        let (t, _) = tree(". -name a -prune -o -print");
        assert_eq!(filters(&t, true, exact(false)).prune, Expr::False);
        // Implicit print after everything.
        let (t, d) = tree(". -name a -o -name b");
        assert_eq!(
            filters(&t, d, exact(false)).out,
            Expr::Or(vec![name("a"), name("b")])
        );
        // -path is relaxed: true positively, false under !.
        let (t, d) = tree(". -path x -name a");
        assert_eq!(filters(&t, d, exact(false)).out, name("a"));
        let (t, d) = tree(". ! -path x -name a");
        assert_eq!(filters(&t, d, exact(false)).out, name("a"));
        let (t, d) = tree(". -path x -o -name a");
        assert_eq!(filters(&t, d, exact(false)).out, Expr::True);
        // ... unless printed paths are namespace paths.
        assert_eq!(
            filters(&t, d, exact(true)).out,
            Expr::Or(vec![Expr::path(b"x"), name("a")])
        );
        // Actions in both branches of a comma.
        let (t, d) = tree(". -name a -print , -name b -print");
        assert_eq!(
            filters(&t, d, exact(false)).out,
            Expr::Or(vec![name("a"), name("b")])
        );
        // -lname is decided by the client; the server is told "a symlink".
        let (t, d) = tree(". -lname x -o -name a");
        assert_eq!(
            filters(&t, d, exact(false)).out,
            Expr::Or(vec![
                Expr::Pred(Pred::Type(vec![FileType::Symlink])),
                name("a")
            ])
        );
        let (t, d) = tree(". ! -lname x -name a");
        assert_eq!(filters(&t, d, exact(false)).out, name("a"));
        // Opaque tests are collected once each.
        let (t, d) = tree(". -empty -o -xattr k -o -empty");
        assert_eq!(
            filters(&t, d, exact(false)).opaque,
            vec![Pred::Empty, Pred::XattrExists(b"k".as_slice().into())]
        );
    }

    #[test]
    fn client_evaluation_runs_actions_in_order() {
        let (t, _) = tree(". -name a -printf A -o -printf B -false -o -print");
        // A directory, /x/a.
        let mut hit = crate::find::test_hit("/x/a", 1);
        hit.soid = Soid::from_u128(5);
        hit.attr.soid = hit.soid;
        hit.attr.ftype = FileType::Directory;
        hit.attr.perm = 0o755;
        hit.attr.nlink = 2;
        let mut log = Vec::new();
        let mut run_on = |name: &[u8]| {
            log.clear();
            let s = Subject {
                hit: &hit,
                printed: b"m/a",
                name,
                blind: None,
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
            blind: None,
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

    #[test]
    fn entries_known_from_a_listing_only_decide_what_readdir_tells() {
        // A file and a directory in a directory the caller may read but
        // not search: names, depth, the file's type and number are known;
        // everything else needs stat, is false, and is noted.
        let mut file = crate::find::test_hit("/r/f", 1);
        file.soid = Soid::from_u128(9);
        let mut dir = crate::find::test_hit("/r/d", 1);
        dir.attr.ftype = FileType::Directory;
        let eval = |expr: &str, hit: &SearchHit, b: &Blind| {
            // -inum as on a namespace path.
            let t = tree(expr)
                .0
                .map_tests(&mut |t| -> Result<Test, ()> {
                    Ok(match t {
                        Test::Inum(n) => Test::Pred(Pred::Soid(Soid::from_u128(n))),
                        other => other,
                    })
                })
                .unwrap();
            let s = Subject {
                hit,
                printed: &hit.path,
                name: hit.name(),
                blind: Some(b),
            };
            let mut client = |_: &ClientTest, _: &SearchHit| panic!("decided by the listing");
            run(&t, &s, &Opaque::default(), &mut client, &mut |_| true)
        };
        let cases: &[(&str, bool, bool, bool, bool)] = &[
            // (expression, value for the file, stat needed, for the
            // directory, stat needed)
            (". -name f -o -name d", true, false, true, false),
            (". -path /r/* -mindepth 1", true, false, true, false),
            (". -type f", true, false, false, true),
            (". ! -type d", true, false, true, true),
            (". -inum 9", true, false, false, true),
            (". -size -1k", false, true, false, true),
            (". ! -newermt @0", true, true, true, true),
            (". -empty -o -true", true, true, true, true),
            (". -readable", false, false, false, false),
            (". -lname x", false, true, false, true),
            (". -xtype f", false, true, false, true),
            (". -inum 9 -inum 9", true, false, false, true),
        ];
        for &(expr, file_value, file_stat, dir_value, dir_stat) in cases {
            // The namespace: the SOID is the inode number.
            let b = Blind::new(true, None, true);
            assert_eq!(eval(expr, &file, &b), file_value, "{expr} on the file");
            assert_eq!(b.stat_failed(), file_stat, "{expr} on the file");
            let b = Blind::new(false, None, true);
            assert_eq!(eval(expr, &dir, &b), dir_value, "{expr} on the directory");
            assert_eq!(b.stat_failed(), dir_stat, "{expr} on the directory");
        }
        // Under a mount, -inum is the mount's number (d_ino), and a SOID
        // test (-samefile) needs stat.
        let b = Blind::new(true, Some(42), false);
        assert!(b.decide(&ClientTest::Inode(42)));
        assert!(!b.decide(&ClientTest::Inode(9)));
        assert!(!b.stat_failed());
        assert!(!eval(". -inum 9", &file, &b));
        assert!(b.stat_failed());
        // -samefile's stat fails (its SOID alone would decide it).
        let b = Blind::new(true, None, true);
        assert!(!b.decide(&ClientTest::Stat));
        assert!(b.stat_failed());
        // A directory's number is not known.
        let b = Blind::new(false, Some(42), false);
        assert!(!b.decide(&ClientTest::Inode(42)));
        assert!(b.stat_failed());
    }

    /// find's evaluation, written the obvious recursive way: the reference
    /// for [`Eval`]. Leaves `Const(v)` are tests; actions are numbered by
    /// their `Exec::id`, and the `k`-th action reached gets `values[k]`.
    fn reference(n: &Node, values: &[bool], reached: &mut Vec<usize>) -> bool {
        match n {
            Node::Test(Test::Const(b)) => *b,
            Node::Action(Action::Exec(e)) => {
                reached.push(e.id);
                values.get(reached.len() - 1).copied().unwrap_or(true)
            }
            Node::And(a, b) => reference(a, values, reached) && reference(b, values, reached),
            Node::Or(a, b) => reference(a, values, reached) || reference(b, values, reached),
            Node::Not(a) => !reference(a, values, reached),
            Node::Comma(a, b) => {
                reference(a, values, reached);
                reference(b, values, reached)
            }
            _ => unreachable!("generated trees hold constants and commands only"),
        }
    }

    fn arb_tree() -> impl proptest::strategy::Strategy<Value = Node> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            any::<bool>().prop_map(|b| Node::Test(Test::Const(b))),
            (0usize..1000).prop_map(|id| Node::Action(Action::Exec(crate::find::parse::Exec {
                argv: vec!["true".into()],
                batch: false,
                in_dir: false,
                ask: false,
                id,
            }))),
        ];
        leaf.prop_recursive(6, 64, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| Node::And(Box::new(a), Box::new(b))),
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| Node::Or(Box::new(a), Box::new(b))),
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| Node::Comma(Box::new(a), Box::new(b))),
                inner.prop_map(|a| Node::Not(Box::new(a))),
            ]
        })
    }

    proptest::proptest! {
        /// The stepwise evaluation reaches the same actions in the same
        /// order, and gives the same value, as the recursive one, whatever
        /// the actions answer.
        #[test]
        fn stepwise_evaluation_is_finds_evaluation(
            t in arb_tree(),
            values in proptest::collection::vec(proptest::prelude::any::<bool>(), 0..40),
        ) {
            let mut want_reached = Vec::new();
            let want = reference(&t, &values, &mut want_reached);
            let hit = crate::find::test_hit("/a", 1);
            let s = Subject { hit: &hit, printed: b"/a", name: b"a", blind: None };
            let mut reached = Vec::new();
            let got = run(&t, &s, &Opaque::default(), &mut |_, _| false, &mut |a| {
                let Action::Exec(e) = a else { return true };
                reached.push(e.id);
                values.get(reached.len() - 1).copied().unwrap_or(true)
            });
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(reached, want_reached);
        }
    }

    #[test]
    fn actions_after_delete_are_found() {
        let free = |s: &str| nothing_follows_delete(&tree(s).0);
        assert!(free(". -name a -delete"));
        assert!(free(". -print -type f -delete"));
        assert!(free(". -name a -prune -o -depth -delete"));
        assert!(!free(". -delete -print"));
        assert!(!free(". -name a -delete -o -print"));
        assert!(!free(". -delete , -exec echo {} ;"));
        assert!(!free(". -delete -delete"));
    }

    #[test]
    fn prune_depending_on_a_commands_status_is_found() {
        let needs = |s: &str| prune_needs_command(&tree(s).0);
        assert!(needs(". -exec test -d {} ; -prune"));
        assert!(needs(". ! -exec test {} ; -prune -o -print"));
        assert!(!needs(". -name .git -prune -o -exec echo {} ;"));
        assert!(!needs(". -exec echo {} + -prune"));
        assert!(!needs(". -exec echo {} ;"));
    }

    #[test]
    fn a_regex_narrows_by_the_name_it_requires() {
        let (t, d) = tree(". -regex .*\\.c");
        assert_eq!(filters(&t, d, exact(false)).out, Expr::name(b"*.c"));
        let (t, d) = tree(". -regex .*a[*]");
        assert_eq!(filters(&t, d, exact(false)).out, Expr::True);
        let (t, d) = tree(". -regex .*x\\* -o -print");
        assert_eq!(filters(&t, d, exact(false)).out, Expr::True);
        let (t, d) = tree(". ! -regex .*\\.c");
        assert_eq!(filters(&t, d, exact(false)).out, Expr::True);
    }

    #[test]
    fn commands_and_deletions_are_not_assumed_true_by_the_filter() {
        // `-exec ... ; -o -print`: whatever the command says, an entry
        // may print, so the server may not drop any.
        let (t, d) = tree(". -name a -exec false ; -o -print");
        assert_eq!(filters(&t, d, exact(false)).out, Expr::True);
        // With -delete, -empty is decided when the directory is reached.
        let (t, d) = tree(". -empty -delete");
        let deleting = Exact {
            paths: false,
            empty: false,
        };
        assert_eq!(filters(&t, d, deleting).out, Expr::True);
        assert_eq!(filters(&t, d, exact(false)).out, Expr::Pred(Pred::Empty));
    }
}
