//! The planner: from an [`Expr`], the conjunction of index constraints that
//! every match must satisfy ([`Plan`]). Pure, no I/O.
//!
//! Soundness is the only hard requirement: if an entry (one path of an
//! inode) matches the expression, its inode matches [`Plan::query`] — with
//! the entry's own link name satisfying the name constraints — and its depth
//! lies in `[min_depth, max_depth]`. The filters and the K-D tree then only
//! prune; the executor re-checks every candidate with the full expression.
//!
//! Rules (`implied(e)` is what `e` implies; negation is pushed down):
//! - a predicate implies its own constraint where the index has one (ranges,
//!   types, exact permission, all-bits permission, SOID, xattr key, names);
//!   `-perm /m`, xattr values and `-path` (except its tail, below) imply only
//!   what is implied trivially;
//! - `a AND b`: the intersection (both sets of constraints);
//! - `a OR b`: the *hull* — per dimension the smallest range covering both,
//!   the union of type sets, the permission bits both require, and the name /
//!   xattr constraints present on both sides; a side that can match nothing
//!   contributes nothing;
//! - `NOT a`: De Morgan through AND/OR; a negated predicate implies its
//!   complement only where that is one box (a type set, a range open on one
//!   side, a depth range), otherwise nothing.
//!
//! Globs: the literal runs of ≥ 3 bytes become substrings (trigram filter);
//! a pattern without metacharacters is an exact name; a final literal run
//! containing `.` gives the extension. For `-path`, the pattern's final
//! literal run is a suffix of the path: the part after its last `/` is the
//! exact name, and without `/` it is a suffix of the name (substring and
//! extension as for `-name`).

use super::query::{parse_glob, Expr, PermMatch, Pred, Tok};
use crate::table::index::{type_bit, Dim, IndexQuery, ALL_TYPES, DIMS};
use sextant_types::{FileType, SoidRange};

/// What every match satisfies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub query: IndexQuery,
    pub min_depth: u32,
    pub max_depth: u32,
}

impl Plan {
    /// The plan nothing can match.
    pub fn nothing() -> Plan {
        let mut query = IndexQuery::new();
        query.types = 0;
        Plan {
            query,
            min_depth: 1,
            max_depth: 0,
        }
    }

    /// The plan everything matches.
    pub fn everything() -> Plan {
        Plan {
            query: IndexQuery::new(),
            min_depth: 0,
            max_depth: u32::MAX,
        }
    }

    /// True when provably nothing matches.
    pub fn is_empty(&self) -> bool {
        self.query.is_empty() || self.min_depth > self.max_depth
    }

    fn and(mut self, o: Plan) -> Plan {
        let q = &mut self.query;
        for d in 0..DIMS {
            q.lo[d] = q.lo[d].max(o.query.lo[d]);
            q.hi[d] = q.hi[d].min(o.query.hi[d]);
        }
        q.types &= o.query.types;
        q.perm_all |= o.query.perm_all;
        union_into(&mut q.names, o.query.names);
        union_into(&mut q.names_ci, o.query.names_ci);
        union_into(&mut q.extensions, o.query.extensions);
        union_into(&mut q.substrings, o.query.substrings);
        union_into(&mut q.substrings_ci, o.query.substrings_ci);
        union_into(&mut q.xattr_keys, o.query.xattr_keys);
        if let Some(r) = o.query.soids {
            *q = std::mem::take(q).soid_range(r);
        }
        self.min_depth = self.min_depth.max(o.min_depth);
        self.max_depth = self.max_depth.min(o.max_depth);
        self
    }

    fn or(self, o: Plan) -> Plan {
        if self.is_empty() {
            return o;
        }
        if o.is_empty() {
            return self;
        }
        let (mut a, b) = (self.query, o.query);
        for d in 0..DIMS {
            a.lo[d] = a.lo[d].min(b.lo[d]);
            a.hi[d] = a.hi[d].max(b.hi[d]);
        }
        a.types |= b.types;
        a.perm_all &= b.perm_all;
        common(&mut a.names, &b.names);
        common(&mut a.names_ci, &b.names_ci);
        common(&mut a.extensions, &b.extensions);
        common(&mut a.substrings, &b.substrings);
        common(&mut a.substrings_ci, &b.substrings_ci);
        common(&mut a.xattr_keys, &b.xattr_keys);
        a.soids = match (a.soids, b.soids) {
            (Some(x), Some(y)) => SoidRange::new(x.first.min(y.first), x.last.max(y.last)),
            _ => None,
        };
        Plan {
            query: a,
            min_depth: self.min_depth.min(o.min_depth),
            max_depth: self.max_depth.max(o.max_depth),
        }
    }
}

fn union_into(a: &mut Vec<Box<[u8]>>, b: Vec<Box<[u8]>>) {
    for x in b {
        if !a.contains(&x) {
            a.push(x);
        }
    }
}

fn common(a: &mut Vec<Box<[u8]>>, b: &[Box<[u8]>]) {
    a.retain(|x| b.contains(x));
}

/// Plans `expr`. See the module docs.
pub fn plan(expr: &Expr) -> Plan {
    implied(expr, false)
}

fn implied(e: &Expr, neg: bool) -> Plan {
    match (e, neg) {
        (Expr::True, false) | (Expr::False, true) => Plan::everything(),
        (Expr::True, true) | (Expr::False, false) => Plan::nothing(),
        (Expr::Pred(p), _) => pred(p, neg),
        (Expr::Not(x), _) => implied(x, !neg),
        (Expr::And(xs), false) | (Expr::Or(xs), true) => xs
            .iter()
            .fold(Plan::everything(), |acc, x| acc.and(implied(x, neg))),
        (Expr::Or(xs), false) | (Expr::And(xs), true) => xs
            .iter()
            .fold(Plan::nothing(), |acc, x| acc.or(implied(x, neg))),
    }
}

fn with_query(query: IndexQuery) -> Plan {
    Plan {
        query,
        ..Plan::everything()
    }
}

/// The complement of `[lo, hi]` within `[0, max]`.
enum Complement {
    Empty,
    /// One range.
    Range(u64, u64),
    /// Two pieces (or everything): no useful single box.
    Unconstrained,
}

fn complement(lo: u64, hi: u64, max: u64) -> Complement {
    if lo > hi {
        return Complement::Unconstrained;
    }
    match (lo == 0, hi >= max) {
        (true, true) => Complement::Empty,
        (true, false) => Complement::Range(hi + 1, max),
        (false, true) => Complement::Range(0, lo - 1),
        (false, false) => Complement::Unconstrained,
    }
}

fn range_plan(d: Dim, lo: u64, hi: u64, max: u64, neg: bool) -> Plan {
    if !neg {
        return with_query(IndexQuery::new().range(d, lo, hi));
    }
    match complement(lo, hi, max) {
        Complement::Range(l, h) => with_query(IndexQuery::new().range(d, l, h)),
        Complement::Empty => Plan::nothing(),
        Complement::Unconstrained => Plan::everything(),
    }
}

fn pred(p: &Pred, neg: bool) -> Plan {
    use crate::table::index::time_coord;
    let q = IndexQuery::new();
    let u32max = u64::from(u32::MAX);
    match p {
        Pred::Uid { lo, hi } => range_plan(Dim::Uid, (*lo).into(), (*hi).into(), u32max, neg),
        Pred::Gid { lo, hi } => range_plan(Dim::Gid, (*lo).into(), (*hi).into(), u32max, neg),
        Pred::Size { lo, hi } => range_plan(Dim::Size, *lo, *hi, u64::MAX, neg),
        Pred::Links { lo, hi } => range_plan(Dim::Nlink, (*lo).into(), (*hi).into(), u32max, neg),
        Pred::Time { which, lo, hi } => range_plan(
            Dim::time(*which),
            time_coord(*lo),
            time_coord(*hi),
            u64::MAX,
            neg,
        ),
        Pred::Type(ts) => {
            let mask = ts.iter().fold(0u8, |m, &t| m | type_bit(t));
            let mut q = q;
            q.types = if neg { ALL_TYPES & !mask } else { mask };
            with_query(q)
        }
        Pred::Depth { min, max } => {
            let (lo, hi) = if neg {
                match complement((*min).into(), (*max).into(), u32::MAX.into()) {
                    Complement::Range(l, h) => (l as u32, h as u32),
                    Complement::Empty => return Plan::nothing(),
                    Complement::Unconstrained => return Plan::everything(),
                }
            } else {
                (*min, *max)
            };
            Plan {
                min_depth: lo,
                max_depth: hi,
                ..Plan::everything()
            }
        }
        _ if neg => Plan::everything(),
        Pred::Perm(PermMatch::Exact(m)) => with_query(q.perm(*m & 0o7777)),
        Pred::Perm(PermMatch::All(m)) => with_query(q.perm_all(*m & 0o7777)),
        Pred::Perm(PermMatch::Any(_)) => Plan::everything(),
        Pred::Empty => with_query(q.types(&[FileType::Regular, FileType::Directory])),
        Pred::Soid(s) => with_query(q.soid_range(SoidRange {
            first: *s,
            last: *s,
        })),
        Pred::XattrExists(k) | Pred::XattrEq(k, _) => with_query(q.xattr_key(k)),
        Pred::Name { pattern, glob, ci } => {
            let toks: Vec<Tok> = if *glob {
                parse_glob(pattern)
            } else {
                pattern.iter().map(|&c| Tok::Lit(c)).collect()
            };
            with_query(name_constraints(&toks, *ci))
        }
        Pred::Path { pattern, ci } => with_query(path_constraints(&parse_glob(pattern), *ci)),
    }
}

/// The literal runs of a token list (maximal sequences of `Lit`).
fn literal_runs(toks: &[Tok]) -> Vec<Vec<u8>> {
    let mut runs = vec![Vec::new()];
    for t in toks {
        match t {
            Tok::Lit(c) => runs.last_mut().into_iter().for_each(|r| r.push(*c)),
            _ => runs.push(Vec::new()),
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

/// Constraints on the name implied by a name glob.
fn name_constraints(toks: &[Tok], ci: bool) -> IndexQuery {
    let mut q = IndexQuery::new();
    if toks.iter().all(|t| matches!(t, Tok::Lit(_))) {
        let name: Vec<u8> = toks
            .iter()
            .filter_map(|t| match t {
                Tok::Lit(c) => Some(*c),
                _ => None,
            })
            .collect();
        q = if ci { q.name_ci(&name) } else { q.name(&name) };
        return tail_constraints(q, &name, ci);
    }
    for run in literal_runs(toks) {
        if run.len() >= 3 {
            q = if ci {
                q.substring_ci(&run)
            } else {
                q.substring(&run)
            };
        }
    }
    if let Some(Tok::Lit(_)) = toks.last() {
        let tail = literal_runs(toks).pop().unwrap_or_default();
        q = extension_from_suffix(q, &tail);
    }
    q
}

/// Adds the extension of a name that ends with `suffix` (if `suffix`
/// contains `.`, the bytes after its last `.` are the extension).
fn extension_from_suffix(q: IndexQuery, suffix: &[u8]) -> IndexQuery {
    match suffix.iter().rposition(|&c| c == b'.') {
        Some(i) => q.extension(&suffix[i + 1..]),
        None => q,
    }
}

/// Constraints of a name known to end with `suffix` (beyond what the caller
/// already added).
fn tail_constraints(q: IndexQuery, suffix: &[u8], _ci: bool) -> IndexQuery {
    extension_from_suffix(q, suffix)
}

/// Constraints on the name implied by a path glob.
fn path_constraints(toks: &[Tok], ci: bool) -> IndexQuery {
    let q = IndexQuery::new();
    if !matches!(toks.last(), Some(Tok::Lit(_))) {
        return q;
    }
    let tail = literal_runs(toks).pop().unwrap_or_default();
    match tail.iter().rposition(|&c| c == b'/') {
        Some(i) => {
            // The path ends with ".../name": `name` is the whole name (a
            // path ending in `/` only for the root, which is not planned).
            let name = &tail[i + 1..];
            let q = if ci { q.name_ci(name) } else { q.name(name) };
            tail_constraints(q, name, ci)
        }
        None => {
            let q = if tail.len() >= 3 {
                if ci {
                    q.substring_ci(&tail)
                } else {
                    q.substring(&tail)
                }
            } else {
                q
            };
            extension_from_suffix(q, &tail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::query::Entry;
    use super::*;
    use crate::bloom::TimeAttr;
    use crate::inode::Inode;
    use crate::table::index::time_coord;
    use proptest::prelude::*;
    use sextant_types::{Nanos, Soid};

    fn b(s: &str) -> Box<[u8]> {
        s.as_bytes().into()
    }

    fn p(x: Pred) -> Expr {
        Expr::Pred(x)
    }

    #[test]
    fn conjunctions_and_hulls() {
        // a AND (b OR c): a's constraints plus the hull of b | c.
        let e = Expr::and(
            p(Pred::Uid { lo: 7, hi: 7 }),
            Expr::or(
                p(Pred::Size { lo: 10, hi: 20 }),
                p(Pred::Size { lo: 100, hi: 200 }),
            ),
        );
        let pl = plan(&e);
        assert_eq!(pl.query.lo[Dim::Uid.index()], 7);
        assert_eq!(pl.query.hi[Dim::Uid.index()], 7);
        assert_eq!(pl.query.lo[Dim::Size.index()], 10);
        assert_eq!(pl.query.hi[Dim::Size.index()], 200);
        // OR with an unconstrained side: nothing on that dimension.
        let e = Expr::or(p(Pred::Uid { lo: 7, hi: 7 }), p(Pred::Gid { lo: 1, hi: 1 }));
        assert_eq!(plan(&e).query, IndexQuery::new());
        // OR with False keeps the other side.
        let e = Expr::or(Expr::False, p(Pred::Uid { lo: 7, hi: 7 }));
        assert_eq!(plan(&e).query, IndexQuery::new().uid(7));
        // Types union; negated type complement.
        let e = Expr::or(
            p(Pred::Type(vec![FileType::Regular])),
            p(Pred::Type(vec![FileType::Directory])),
        );
        assert_eq!(
            plan(&e).query.types,
            type_bit(FileType::Regular) | type_bit(FileType::Directory)
        );
        let e = Expr::not(p(Pred::Type(vec![FileType::Regular])));
        assert_eq!(
            plan(&e).query.types,
            ALL_TYPES & !type_bit(FileType::Regular)
        );
        // NOT of a non-box predicate implies nothing; NOT NOT is identity.
        assert_eq!(
            plan(&Expr::not(Expr::name(b"*.c"))).query,
            IndexQuery::new()
        );
        let e = Expr::not(Expr::not(p(Pred::Uid { lo: 3, hi: 3 })));
        assert_eq!(plan(&e).query, IndexQuery::new().uid(3));
        // NOT (uid <= 9) is uid >= 10; NOT of a middle range is nothing.
        let e = Expr::not(p(Pred::Uid { lo: 0, hi: 9 }));
        assert_eq!(plan(&e).query.lo[0], 10);
        let e = Expr::not(p(Pred::Uid { lo: 5, hi: 9 }));
        assert_eq!(plan(&e).query, IndexQuery::new());
        // NOT (a OR b) = NOT a AND NOT b.
        let e = Expr::not(Expr::or(
            p(Pred::Uid { lo: 0, hi: 9 }),
            p(Pred::Type(vec![FileType::Symlink])),
        ));
        let q = plan(&e).query;
        assert_eq!(q.lo[0], 10);
        assert_eq!(q.types & type_bit(FileType::Symlink), 0);
        // NOT True is empty; empty AND anything is empty.
        assert!(plan(&Expr::not(Expr::True)).is_empty());
        assert!(plan(&Expr::and(Expr::False, Expr::True)).is_empty());
        assert!(plan(&Expr::Or(vec![])).is_empty());
        // Depth.
        let e = Expr::and(
            p(Pred::Depth { min: 1, max: 9 }),
            p(Pred::Depth { min: 3, max: 4 }),
        );
        let pl = plan(&e);
        assert_eq!((pl.min_depth, pl.max_depth), (3, 4));
        let pl = plan(&Expr::not(p(Pred::Depth { min: 0, max: 2 })));
        assert_eq!((pl.min_depth, pl.max_depth), (3, u32::MAX));
        // Times.
        let e = p(Pred::Time {
            which: TimeAttr::Mtime,
            lo: Nanos(-5),
            hi: Nanos(5),
        });
        let q = plan(&e).query;
        assert_eq!(q.lo[Dim::Mtime.index()], time_coord(Nanos(-5)));
    }

    #[test]
    fn globs_give_names_substrings_extensions() {
        let q = plan(&Expr::name(b"*.tar.gz")).query;
        assert_eq!(q.extensions, vec![b("gz")]);
        assert_eq!(q.substrings, vec![b(".tar.gz")]);
        let q = plan(&Expr::name(b"core.*")).query;
        assert_eq!(q.substrings, vec![b("core.")]);
        assert!(q.extensions.is_empty());
        let q = plan(&Expr::name(b"Makefile")).query;
        assert_eq!(q.names, vec![b("Makefile")]);
        let q = plan(&Expr::iname(b"READ*.MD")).query;
        assert_eq!(q.substrings_ci, vec![b("READ"), b(".MD")]);
        assert_eq!(q.extensions, vec![b("MD")]);
        let q = plan(&Expr::iname(b"a.TXT")).query;
        assert_eq!(q.names_ci, vec![b("a.TXT")]);
        assert_eq!(q.extensions, vec![b("TXT")]);
        // Short runs give nothing; escapes are literals.
        assert_eq!(plan(&Expr::name(b"a*b?c")).query, IndexQuery::new());
        assert_eq!(plan(&Expr::name(b"\\*ab")).query.names, vec![b("*ab")]);
        // Paths: the tail after the last '/' is the name.
        let q = plan(&Expr::path(b"/src/*/main.rs")).query;
        assert_eq!(q.names, vec![b("main.rs")]);
        assert_eq!(q.extensions, vec![b("rs")]);
        let q = plan(&Expr::path(b"/src/*.rs")).query;
        assert_eq!(q.substrings, vec![b(".rs")]);
        assert_eq!(q.extensions, vec![b("rs")]);
        assert_eq!(plan(&Expr::path(b"/src/*")).query, IndexQuery::new());
        // OR keeps what both sides share.
        let e = Expr::or(Expr::name(b"*.txt"), Expr::name(b"a.txt"));
        assert_eq!(plan(&e).query.extensions, vec![b("txt")]);
        assert!(plan(&e).query.names.is_empty());
        let e = Expr::or(Expr::name(b"*.txt"), Expr::name(b"*.c"));
        assert_eq!(plan(&e).query, IndexQuery::new());
        // Other predicates.
        let s = Soid::from_u128(42);
        assert_eq!(
            plan(&p(Pred::Soid(s))).query.soids,
            Some(SoidRange { first: s, last: s })
        );
        assert_eq!(
            plan(&p(Pred::Perm(PermMatch::All(0o002)))).query.perm_all,
            0o002
        );
        assert_eq!(
            plan(&p(Pred::Perm(PermMatch::Any(0o002)))).query,
            IndexQuery::new()
        );
        assert_eq!(
            plan(&p(Pred::XattrEq(b("user.a"), b("1"))))
                .query
                .xattr_keys,
            vec![b("user.a")]
        );
    }

    // ---- soundness, by property ------------------------------------------

    const NAMES: &[&str] = &[
        "a",
        "b.txt",
        "c.TXT",
        "data.tar.gz",
        "core.1",
        "Makefile",
        "x.c",
        ".hidden",
        "ab.c.d",
        "AB",
    ];
    const GLOBS: &[&str] = &[
        "*", "*.txt", "*.TXT", "?", "[a-c]*", "core.*", "*a*", "*.tar.gz", "Makefile", "*.", "x.c",
        "[!a]*", "a\\*", "*.c.d", "AB",
    ];
    const PATHS: &[&str] = &[
        "/*",
        "*/b.txt",
        "/d*/*",
        "*.txt",
        "*/*/*",
        "/",
        "*c.d",
        "*/Makefile",
    ];
    const TYPES: [FileType; 3] = [FileType::Regular, FileType::Directory, FileType::Symlink];

    fn arb_pred() -> impl Strategy<Value = Pred> {
        let r = |n: u64| (0..n, 0..n).prop_map(|(a, b)| (a.min(b), a.max(b)));
        prop_oneof![
            (0..GLOBS.len(), any::<bool>(), any::<bool>()).prop_map(|(g, glob, ci)| Pred::Name {
                pattern: b(GLOBS[g]),
                glob,
                ci
            }),
            (0..PATHS.len(), any::<bool>()).prop_map(|(g, ci)| Pred::Path {
                pattern: b(PATHS[g]),
                ci
            }),
            prop::collection::vec(0..3usize, 0..3)
                .prop_map(|v| Pred::Type(v.into_iter().map(|i| TYPES[i]).collect())),
            r(4).prop_map(|(lo, hi)| Pred::Uid {
                lo: lo as u32,
                hi: hi as u32
            }),
            r(4).prop_map(|(lo, hi)| Pred::Gid {
                lo: lo as u32,
                hi: hi as u32
            }),
            r(5).prop_map(|(lo, hi)| Pred::Size {
                lo: lo * 50,
                hi: hi * 50
            }),
            (0..3usize, r(5)).prop_map(|(w, (lo, hi))| Pred::Time {
                which: [TimeAttr::Atime, TimeAttr::Mtime, TimeAttr::Ctime][w],
                lo: Nanos(lo as i64 * 10 - 20),
                hi: Nanos(hi as i64 * 10 - 20)
            }),
            (
                0..3usize,
                prop::sample::select(vec![0u16, 0o644, 0o755, 0o002, 0o100, 0o4000])
            )
                .prop_map(|(k, m)| Pred::Perm(match k {
                    0 => PermMatch::Exact(m),
                    1 => PermMatch::All(m),
                    _ => PermMatch::Any(m),
                })),
            r(4).prop_map(|(lo, hi)| Pred::Links {
                lo: lo as u32,
                hi: hi as u32
            }),
            Just(Pred::Empty),
            (0u128..4).prop_map(|s| Pred::Soid(Soid::from_u128(s))),
            (0..2usize).prop_map(|k| Pred::XattrExists(b(["user.a", "user.b"][k]))),
            (0..2usize, 0..2usize)
                .prop_map(|(k, v)| Pred::XattrEq(b(["user.a", "user.b"][k]), b(["1", "2"][v]))),
            r(5).prop_map(|(lo, hi)| Pred::Depth {
                min: lo as u32,
                max: hi as u32
            }),
        ]
    }

    fn arb_expr() -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            20 => arb_pred().prop_map(Expr::Pred),
            1 => Just(Expr::True),
            1 => Just(Expr::False),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Expr::And),
                prop::collection::vec(inner.clone(), 0..4).prop_map(Expr::Or),
                inner.prop_map(|e| Expr::Not(Box::new(e))),
            ]
        })
    }

    fn arb_entry() -> impl Strategy<Value = (Inode, u128, usize, usize, u32, bool)> {
        (
            (
                0..3usize,
                prop::sample::select(vec![0u16, 0o644, 0o755, 0o002, 0o4755, 0o777]),
                0u32..4,
                0u32..4,
                0u64..5,
            ),
            (0i64..5, 0i64..5, 0i64..5, 1u32..4),
            prop::collection::vec((0..2usize, 0..2usize), 0..2),
            (0u128..4, 0..NAMES.len(), 0..4usize, 0u32..5, any::<bool>()),
        )
            .prop_map(
                |(
                    (t, perm, uid, gid, size),
                    (a, m, c, nlink),
                    xs,
                    (soid, name, dir, depth, has),
                )| {
                    let mut i = Inode {
                        ftype: TYPES[t],
                        perm,
                        uid,
                        gid,
                        nlink,
                        size: size * 50,
                        atime: Nanos(a * 10 - 20),
                        mtime: Nanos(m * 10 - 20),
                        ctime: Nanos(c * 10 - 20),
                        parent: Soid::ROOT,
                        name: NAMES[name].as_bytes().into(),
                        extra: None,
                    };
                    for (k, v) in xs {
                        i.extra_mut()
                            .xattrs
                            .insert(b(["user.a", "user.b"][k]), b(["1", "2"][v]));
                    }
                    (i, soid, name, dir, depth, has)
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every matching entry satisfies the plan (with its own link name).
        #[test]
        fn plan_is_sound(e in arb_expr(), (inode, soid, name, dir, depth, has) in arb_entry()) {
            let dirs = ["", "/d", "/d/e", "/x/Makefile"];
            let nm = NAMES[name].as_bytes();
            let path = [dirs[dir].as_bytes(), b"/", nm].concat();
            let soid = Soid::from_u128(soid);
            let entry = Entry {
                path: Some(&path),
                name: nm,
                depth: Some(depth),
                soid,
                inode: &inode,
                dir_has_entries: has,
            };
            let pl = plan(&e);
            if e.matches(&entry) {
                prop_assert!(!pl.is_empty(), "{:?}", pl);
                prop_assert!(pl.query.matches_attrs(soid, &inode), "{:?}", pl.query);
                prop_assert!(pl.query.matches_name(nm), "{:?}", pl.query);
                prop_assert!(pl.min_depth <= depth && depth <= pl.max_depth);
            }
            // Three-valued evaluation never contradicts the exact answer.
            let partial = Entry { path: None, depth: None, ..entry };
            if let Some(v) = e.eval(&partial) {
                prop_assert_eq!(v, e.matches(&entry));
            }
        }
    }
}
