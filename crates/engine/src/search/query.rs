//! The query model: a `find`-like expression tree and its exact evaluator.
//! Pure data and pure functions; no I/O.
//!
//! An [`Expr`] is evaluated against one [`Entry`]: one *path* of an inode
//! (a hard-linked file has one entry per link), with the name that path ends
//! in, its depth below the scope root and the inode itself. Predicates that
//! depend on the path ([`Pred::Name`], [`Pred::Path`], [`Pred::Depth`]) can
//! also be evaluated with the path or depth unknown ([`Expr::eval`] returns
//! `None` then, Kleene logic), which the executor uses to drop candidates
//! before it resolves their ancestry.
//!
//! Semantics follow GNU find (`-P`, no symlinks followed):
//! - globs are `fnmatch` without flags: `*`, `?`, `[...]` (ranges, `!`/`^`
//!   negation, a leading `]` is literal, POSIX classes like `[:digit:]`),
//!   `\` escapes; `*` and `?` match `/` and a leading `.`. Case-insensitive
//!   variants fold ASCII only.
//! - `-perm mode` is exact, `-perm -mode` all bits, `-perm /mode` any bit
//!   (`/000` matches everything, as in findutils ≥ 4.5).
//! - `-empty`: a regular file of size 0 or a directory without entries.
//! - ranges (uid, gid, size, nlink, times, depth) are inclusive; the CLI
//!   maps find's units and `+n`/`-n` onto them.

use crate::bloom::TimeAttr;
use crate::inode::Inode;
use sextant_types::{FileType, Nanos, Soid};

/// `-perm` flavours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermMatch {
    /// `-perm mode`: the permission bits (`07777`) equal `mode`.
    Exact(u16),
    /// `-perm -mode`: every bit of `mode` is set.
    All(u16),
    /// `-perm /mode`: some bit of `mode` is set (`0` matches everything).
    Any(u16),
}

/// One predicate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pred {
    /// The entry's name (last path component): a glob, or an exact name
    /// when `glob` is false; `ci`: ASCII case-insensitive (`-iname`).
    Name {
        pattern: Box<[u8]>,
        glob: bool,
        ci: bool,
    },
    /// The entry's full path against a glob (`-path`, `-ipath`).
    Path {
        pattern: Box<[u8]>,
        ci: bool,
    },
    /// The type is one of these.
    Type(Vec<FileType>),
    Uid {
        lo: u32,
        hi: u32,
    },
    Gid {
        lo: u32,
        hi: u32,
    },
    /// Size in bytes, inclusive.
    Size {
        lo: u64,
        hi: u64,
    },
    Time {
        which: TimeAttr,
        lo: Nanos,
        hi: Nanos,
    },
    Perm(PermMatch),
    /// Link count, inclusive (`-links`).
    Links {
        lo: u32,
        hi: u32,
    },
    /// Empty regular file or directory without entries (`-empty`).
    Empty,
    /// This very inode (`-inum`, `-samefile`).
    Soid(Soid),
    /// Has the extended attribute `key`.
    XattrExists(Box<[u8]>),
    /// Has the extended attribute `key` with exactly `value`.
    XattrEq(Box<[u8]>, Box<[u8]>),
    /// Depth below the scope root, inclusive (`-mindepth`/`-maxdepth`;
    /// the scope root is depth 0).
    Depth {
        min: u32,
        max: u32,
    },
}

/// An expression: predicates under and/or/not, nested arbitrarily.
/// `And(vec![])` is true and `Or(vec![])` is false.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    True,
    False,
    Pred(Pred),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
}

/// What an expression is evaluated against: one path of one inode.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// Full path, if known.
    pub path: Option<&'a [u8]>,
    /// The last component of the path (`/` for the file-system root).
    pub name: &'a [u8],
    /// Depth below the scope root, if known.
    pub depth: Option<u32>,
    pub soid: Soid,
    pub inode: &'a Inode,
    /// For a directory: whether it has any entry (for `-empty`).
    pub dir_has_entries: bool,
}

impl Expr {
    pub fn pred(p: Pred) -> Expr {
        Expr::Pred(p)
    }

    pub fn and(a: Expr, b: Expr) -> Expr {
        Expr::And(vec![a, b])
    }

    pub fn or(a: Expr, b: Expr) -> Expr {
        Expr::Or(vec![a, b])
    }

    #[allow(clippy::should_implement_trait)]
    pub fn not(a: Expr) -> Expr {
        Expr::Not(Box::new(a))
    }

    /// `-name pattern` (a glob).
    pub fn name(pattern: &[u8]) -> Expr {
        Expr::Pred(Pred::Name {
            pattern: pattern.into(),
            glob: true,
            ci: false,
        })
    }

    /// `-iname pattern`.
    pub fn iname(pattern: &[u8]) -> Expr {
        Expr::Pred(Pred::Name {
            pattern: pattern.into(),
            glob: true,
            ci: true,
        })
    }

    /// `-path pattern`.
    pub fn path(pattern: &[u8]) -> Expr {
        Expr::Pred(Pred::Path {
            pattern: pattern.into(),
            ci: false,
        })
    }

    /// The exact answer for a fully known entry.
    pub fn matches(&self, e: &Entry<'_>) -> bool {
        self.eval(e) == Some(true)
    }

    /// Three-valued evaluation: `None` when the answer depends on an unknown
    /// path or depth.
    pub fn eval(&self, e: &Entry<'_>) -> Option<bool> {
        match self {
            Expr::True => Some(true),
            Expr::False => Some(false),
            Expr::Pred(p) => p.eval(e),
            Expr::And(xs) => {
                let mut unknown = false;
                for x in xs {
                    match x.eval(e) {
                        Some(false) => return Some(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                (!unknown).then_some(true)
            }
            Expr::Or(xs) => {
                let mut unknown = false;
                for x in xs {
                    match x.eval(e) {
                        Some(true) => return Some(true),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                (!unknown).then_some(false)
            }
            Expr::Not(x) => x.eval(e).map(|b| !b),
        }
    }

    /// Whether some predicate of the tree satisfies `f`.
    pub fn any_pred(&self, f: &impl Fn(&Pred) -> bool) -> bool {
        match self {
            Expr::True | Expr::False => false,
            Expr::Pred(p) => f(p),
            Expr::And(xs) | Expr::Or(xs) => xs.iter().any(|x| x.any_pred(f)),
            Expr::Not(x) => x.any_pred(f),
        }
    }

    /// Whether some predicate needs the depth (`-mindepth`, `-maxdepth`).
    pub fn uses_depth(&self) -> bool {
        self.any_pred(&|p| matches!(p, Pred::Depth { .. }))
    }

    /// Whether every depth test of the expression passes at every depth
    /// ≥ 1 (`-mindepth 1` and the like, or none at all): then, for an
    /// entry below the scope root, any depth ≥ 1 decides them as its own
    /// would (what `stats` asks: the starting point apart, everything).
    pub fn depth_tests_pass_below_root(&self) -> bool {
        !self.any_pred(&|p| matches!(p, Pred::Depth { min, max } if *min > 1 || *max != u32::MAX))
    }

    /// Whether some predicate needs the full path (`-path`).
    pub fn uses_path(&self) -> bool {
        self.any_pred(&|p| matches!(p, Pred::Path { .. }))
    }

    /// Whether the expression's value, for every entry at depth ≥ 1, is a
    /// function of the inode's owner, group and type alone: its predicates
    /// are type, uid and gid tests, and depth limits that every depth ≥ 1
    /// satisfies. Such an expression can be answered from a table's
    /// maintained summary ([`crate::table::summary`]) with
    /// [`Expr::eval_group`].
    pub fn is_group_only(&self) -> bool {
        !self.any_pred(&|p| {
            !matches!(
                p,
                Pred::Type(_)
                    | Pred::Uid { .. }
                    | Pred::Gid { .. }
                    | Pred::Depth {
                        min: 0 | 1,
                        max: u32::MAX
                    }
            )
        })
    }

    /// The value for an entry at depth ≥ 1 of an inode with this owner,
    /// group and type. REQUIRES: [`Expr::is_group_only`] (other predicates
    /// count as false).
    pub fn eval_group(&self, uid: u32, gid: u32, ftype: FileType) -> bool {
        match self {
            Expr::True => true,
            Expr::False => false,
            Expr::Pred(p) => match p {
                Pred::Type(ts) => ts.contains(&ftype),
                Pred::Uid { lo, hi } => (*lo..=*hi).contains(&uid),
                Pred::Gid { lo, hi } => (*lo..=*hi).contains(&gid),
                Pred::Depth { min, max } => *min <= 1 && *max == u32::MAX,
                _ => false,
            },
            Expr::And(xs) => xs.iter().all(|x| x.eval_group(uid, gid, ftype)),
            Expr::Or(xs) => xs.iter().any(|x| x.eval_group(uid, gid, ftype)),
            Expr::Not(x) => !x.eval_group(uid, gid, ftype),
        }
    }
}

impl Pred {
    fn eval(&self, e: &Entry<'_>) -> Option<bool> {
        let i = e.inode;
        Some(match self {
            Pred::Name { pattern, glob, ci } => match (glob, ci) {
                (true, _) => glob_match(pattern, e.name, *ci),
                (false, false) => **pattern == *e.name,
                (false, true) => pattern.eq_ignore_ascii_case(e.name),
            },
            Pred::Path { pattern, ci } => glob_match(pattern, e.path?, *ci),
            Pred::Type(ts) => ts.contains(&i.ftype),
            Pred::Uid { lo, hi } => (*lo..=*hi).contains(&i.uid),
            Pred::Gid { lo, hi } => (*lo..=*hi).contains(&i.gid),
            Pred::Size { lo, hi } => (*lo..=*hi).contains(&i.size),
            Pred::Time { which, lo, hi } => {
                let t = match which {
                    TimeAttr::Atime => i.atime,
                    TimeAttr::Mtime => i.mtime,
                    TimeAttr::Ctime => i.ctime,
                };
                *lo <= t && t <= *hi
            }
            Pred::Perm(PermMatch::Exact(m)) => i.perm & 0o7777 == *m & 0o7777,
            Pred::Perm(PermMatch::All(m)) => i.perm & m == *m,
            Pred::Perm(PermMatch::Any(m)) => *m & 0o7777 == 0 || i.perm & m != 0,
            Pred::Links { lo, hi } => (*lo..=*hi).contains(&i.nlink),
            Pred::Empty => match i.ftype {
                FileType::Regular => i.size == 0,
                FileType::Directory => !e.dir_has_entries,
                _ => false,
            },
            Pred::Soid(s) => e.soid == *s,
            Pred::XattrExists(k) => i.xattrs().is_some_and(|x| x.contains_key(k)),
            Pred::XattrEq(k, v) => i.xattrs().and_then(|x| x.get(k)).is_some_and(|x| x == v),
            Pred::Depth { min, max } => {
                let d = e.depth?;
                *min <= d && d <= *max
            }
        })
    }
}

// ---- globs -------------------------------------------------------------------

/// A POSIX character class inside brackets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    Alpha,
    Digit,
    Alnum,
    Upper,
    Lower,
    Space,
    Punct,
    Xdigit,
    Blank,
    Cntrl,
    Print,
    Graph,
}

impl Named {
    fn parse(s: &[u8]) -> Option<Named> {
        Some(match s {
            b"alpha" => Named::Alpha,
            b"digit" => Named::Digit,
            b"alnum" => Named::Alnum,
            b"upper" => Named::Upper,
            b"lower" => Named::Lower,
            b"space" => Named::Space,
            b"punct" => Named::Punct,
            b"xdigit" => Named::Xdigit,
            b"blank" => Named::Blank,
            b"cntrl" => Named::Cntrl,
            b"print" => Named::Print,
            b"graph" => Named::Graph,
            _ => return None,
        })
    }

    fn test(self, c: u8) -> bool {
        match self {
            Named::Alpha => c.is_ascii_alphabetic(),
            Named::Digit => c.is_ascii_digit(),
            Named::Alnum => c.is_ascii_alphanumeric(),
            Named::Upper => c.is_ascii_uppercase(),
            Named::Lower => c.is_ascii_lowercase(),
            Named::Space => c.is_ascii_whitespace() || c == 0x0b,
            Named::Punct => c.is_ascii_punctuation(),
            Named::Xdigit => c.is_ascii_hexdigit(),
            Named::Blank => c == b' ' || c == b'\t',
            Named::Cntrl => c.is_ascii_control(),
            Named::Print => (0x20..0x7f).contains(&c),
            Named::Graph => c.is_ascii_graphic(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClassItem {
    Range(u8, u8),
    Named(Named),
}

/// One token of a glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    Lit(u8),
    /// `?`
    One,
    /// `*`
    Star,
    Class {
        neg: bool,
        items: Vec<ClassItem>,
    },
}

/// One token as it lies in the pattern: a bracket expression is the
/// index range of its items, so that matching needs no allocation.
#[derive(Clone, Copy)]
enum RawTok {
    Lit(u8),
    One,
    Star,
    Class { neg: bool, items: (usize, usize) },
}

/// The token of `p` starting at `i` (`i < p.len()`) and the index after
/// it. Never fails: anything malformed is literal (an unterminated `[` is
/// a `[`, a trailing `\` is a `\`).
fn raw_tok(p: &[u8], i: usize) -> (RawTok, usize) {
    match p[i] {
        b'\\' => match p.get(i + 1) {
            Some(&c) => (RawTok::Lit(c), i + 2),
            None => (RawTok::Lit(b'\\'), i + 1),
        },
        b'*' => (RawTok::Star, i + 1),
        b'?' => (RawTok::One, i + 1),
        b'[' => match class_at(p, i + 1) {
            Some((neg, items, next)) => (RawTok::Class { neg, items }, next),
            None => (RawTok::Lit(b'['), i + 1),
        },
        c => (RawTok::Lit(c), i + 1),
    }
}

/// A bracket expression starting right after `[`: whether it is negated,
/// the index range of its items, and the index after `]`; `None` if there
/// is no closing `]` (a `]` first is an item).
fn class_at(p: &[u8], i: usize) -> Option<(bool, (usize, usize), usize)> {
    let neg = matches!(p.get(i), Some(b'!' | b'^'));
    let start = i + usize::from(neg);
    let mut at = start;
    loop {
        if *p.get(at)? == b']' && at > start {
            return Some((neg, (start, at), at + 1));
        }
        (_, at) = class_item(p, at)?;
    }
}

/// The bracket-expression item of `p` at `i` (`[:name:]`, a range `a-z`,
/// or one character, `\` escaping) and the index after it.
fn class_item(p: &[u8], i: usize) -> Option<(ClassItem, usize)> {
    if p.get(i) == Some(&b'[') && p.get(i + 1) == Some(&b':') {
        if let Some(end) = p[i + 2..].windows(2).position(|w| w == b":]") {
            if let Some(n) = Named::parse(&p[i + 2..i + 2 + end]) {
                return Some((ClassItem::Named(n), i + 2 + end + 2));
            }
        }
    }
    let (lo, next) = class_char(p, i)?;
    if p.get(next) == Some(&b'-') && p.get(next + 1).is_some_and(|&c| c != b']') {
        let (hi, next) = class_char(p, next + 1)?;
        Some((ClassItem::Range(lo, hi), next))
    } else {
        Some((ClassItem::Range(lo, lo), next))
    }
}

fn class_char(p: &[u8], i: usize) -> Option<(u8, usize)> {
    match *p.get(i)? {
        b'\\' => Some((*p.get(i + 1)?, i + 2)),
        c => Some((c, i + 1)),
    }
}

/// The items of a bracket expression whose range [`class_at`] gave.
fn class_items(p: &[u8], (start, end): (usize, usize)) -> impl Iterator<Item = ClassItem> + '_ {
    let mut at = start;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let (item, next) = class_item(p, at)?;
        at = next;
        Some(item)
    })
}

impl ClassItem {
    fn test(&self, c: u8) -> bool {
        match self {
            ClassItem::Range(lo, hi) => *lo <= c && c <= *hi,
            ClassItem::Named(n) => n.test(c),
        }
    }
}

/// Does the bracket expression match `c`? Folded (`ci`), the items
/// (without negation) match either case of `c`.
fn class_matches(hit: impl Fn(u8) -> bool, neg: bool, c: u8, ci: bool) -> bool {
    let hit = if ci {
        hit(c) || hit(c.to_ascii_lowercase()) || hit(c.to_ascii_uppercase())
    } else {
        hit(c)
    };
    hit != neg
}

/// Parses a glob into tokens (for the planner, which reads literal runs
/// out of it); consecutive stars are one. Never fails (see [`raw_tok`]).
pub(crate) fn parse_glob(p: &[u8]) -> Vec<Tok> {
    let mut out = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        let (tok, next) = raw_tok(p, i);
        i = next;
        out.push(match tok {
            RawTok::Star if out.last() == Some(&Tok::Star) => continue,
            RawTok::Star => Tok::Star,
            RawTok::One => Tok::One,
            RawTok::Lit(c) => Tok::Lit(c),
            RawTok::Class { neg, items } => Tok::Class {
                neg,
                items: class_items(p, items).collect(),
            },
        });
    }
    out
}

/// `fnmatch(pattern, s, ci ? FNM_CASEFOLD : 0)` on bytes. It runs once
/// per candidate name, so it allocates nothing (parsing the pattern into
/// a vector per call was a tenth of a broad glob query's time): patterns
/// of literals and stars take `stars_match`, the others the iterative
/// matcher over tokens read straight from the pattern (`tokens_match`).
/// The pattern is read once to tell which (and where its stars are).
pub fn glob_match(pattern: &[u8], s: &[u8], ci: bool) -> bool {
    let mut stars: Option<(usize, usize)> = None;
    for (i, &c) in pattern.iter().enumerate() {
        match c {
            b'?' | b'[' | b'\\' => return tokens_match(pattern, s, ci),
            b'*' => stars = Some(stars.map_or((i, i), |(first, _)| (first, i))),
            _ => {}
        }
    }
    stars_match(pattern, stars, s, ci)
}

/// `a == b` for the short literals of a glob, inline: a call to the C
/// library's `memcmp` for four bytes cost more than the comparison.
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// [`glob_match`] for any pattern: back to the last star on a mismatch.
fn tokens_match(pattern: &[u8], s: &[u8], ci: bool) -> bool {
    let one = |tok: RawTok, c: u8| match tok {
        RawTok::Lit(l) if ci => l.eq_ignore_ascii_case(&c),
        RawTok::Lit(l) => l == c,
        RawTok::One | RawTok::Star => true,
        RawTok::Class { neg, items } => class_matches(
            |c| class_items(pattern, items).any(|it| it.test(c)),
            neg,
            c,
            ci,
        ),
    };
    let (mut p, mut i) = (0usize, 0usize);
    // The pattern index after the last star, and where in `s` it resumes.
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() {
            let (tok, next) = raw_tok(pattern, p);
            if let RawTok::Star = tok {
                star = Some((next, i));
                p = next;
                continue;
            }
            if one(tok, s[i]) {
                p = next;
                i += 1;
                continue;
            }
        }
        let Some((after, from)) = star else {
            return false;
        };
        p = after;
        i = from + 1;
        star = Some((after, from + 1));
    }
    while p < pattern.len() {
        let (tok, next) = raw_tok(pattern, p);
        if !matches!(tok, RawTok::Star) {
            return false;
        }
        p = next;
    }
    true
}

/// [`glob_match`] for a pattern of literal bytes and `*` only (most
/// globs people type: `abc*`, `*.rs`, `lib*.so*`): the part before the
/// first star is a prefix, the part after the last a suffix, and the
/// parts between are found leftmost in order — no token is read twice.
/// `stars`: the positions of the first and the last star, if any.
fn stars_match(pattern: &[u8], stars: Option<(usize, usize)>, s: &[u8], ci: bool) -> bool {
    let eq = |a: &[u8], b: &[u8]| {
        if ci {
            a.eq_ignore_ascii_case(b)
        } else {
            short_eq(a, b)
        }
    };
    let Some((first_star, last_star)) = stars else {
        return eq(pattern, s);
    };
    let (prefix, suffix) = (&pattern[..first_star], &pattern[last_star + 1..]);
    if s.len() < prefix.len() + suffix.len()
        || !eq(&s[..prefix.len()], prefix)
        || !eq(&s[s.len() - suffix.len()..], suffix)
    {
        return false;
    }
    let mut rest = &s[prefix.len()..s.len() - suffix.len()];
    for part in pattern[first_star + 1..last_star.max(first_star + 1)].split(|&c| c == b'*') {
        if part.is_empty() {
            continue;
        }
        match rest.windows(part.len()).position(|w| eq(w, part)) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_like_fnmatch() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", ".hidden"),
            ("*.txt", "a.txt"),
            ("*.txt", ".txt"),
            ("a*b*c", "aXbYbZc"),
            ("?", "x"),
            ("[abc]", "b"),
            ("[a-c]x", "cx"),
            ("[!a-c]", "d"),
            ("[^a-c]", "d"),
            ("[]]", "]"),
            ("[]a]", "a"),
            ("[a-]", "-"),
            ("\\*", "*"),
            ("a\\?", "a?"),
            ("[", "["),
            ("x[", "x["),
            ("[[:digit:]]*", "7up"),
            ("[![:alpha:]]", "1"),
            ("*/b/*", "/a/b/c/d"),
            ("a**b", "ab"),
            ("\\", "\\"),
        ];
        for (p, s) in yes {
            assert!(glob_match(p.as_bytes(), s.as_bytes(), false), "{p} {s}");
        }
        let no: &[(&str, &str)] = &[
            ("*.txt", "a.txt.gz"),
            ("?", ""),
            ("?", "ab"),
            ("[abc]", "d"),
            ("[!a-c]", "b"),
            ("\\*", "a"),
            ("a*b", "a"),
            ("[[:digit:]]", "x"),
            ("A", "a"),
        ];
        for (p, s) in no {
            assert!(!glob_match(p.as_bytes(), s.as_bytes(), false), "{p} {s}");
        }
        assert!(glob_match(b"*.TXT", b"a.txt", true));
        assert!(glob_match(b"[A-C]x", b"bX", true));
        assert!(glob_match(b"[!A-C]", b"d", true));
        assert!(!glob_match(b"[!A-C]", b"b", true));
        assert!(!glob_match(b"[!a-c]", b"B", true));
    }

    /// Reference: one token against one character, from the parsed
    /// tokens.
    fn tok_matches(t: &Tok, c: u8, ci: bool) -> bool {
        match t {
            Tok::Lit(l) if ci => l.eq_ignore_ascii_case(&c),
            Tok::Lit(l) => *l == c,
            Tok::One | Tok::Star => true,
            Tok::Class { neg, items } => {
                class_matches(|c| items.iter().any(|it| it.test(c)), *neg, c, ci)
            }
        }
    }

    /// Reference: exponential recursive matcher over the parsed tokens.
    fn slow(t: &[Tok], s: &[u8], ci: bool) -> bool {
        match t.first() {
            None => s.is_empty(),
            Some(Tok::Star) => (0..=s.len()).any(|k| slow(&t[1..], &s[k..], ci)),
            Some(tok) => !s.is_empty() && tok_matches(tok, s[0], ci) && slow(&t[1..], &s[1..], ci),
        }
    }

    /// A linear congruential generator: the random patterns and names of
    /// the matcher tests, the same on every run.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n
        }
    }

    /// `matcher` agrees with the reference on `p` against `s`, with and
    /// without case folding.
    fn agrees(matcher: fn(&[u8], &[u8], bool) -> bool, p: &[u8], s: &[u8]) {
        let toks = parse_glob(p);
        for ci in [false, true] {
            assert_eq!(
                matcher(p, s, ci),
                slow(&toks, s, ci),
                "{:?} {:?} ci {ci}",
                String::from_utf8_lossy(p),
                String::from_utf8_lossy(s)
            );
        }
    }

    /// The allocation-free matcher (tokens read from the pattern as it
    /// goes) against the reference over the parsed tokens: random
    /// patterns of fragments that make every token kind, malformed
    /// brackets and escapes included.
    #[test]
    fn matcher_agrees_with_recursive_reference() {
        let fragments: &[&[u8]] = &[
            b"a",
            b"b",
            b"A",
            b"1",
            b".",
            b"*",
            b"?",
            b"[",
            b"]",
            b"!",
            b"^",
            b"-",
            b"\\",
            b":",
            b"[:digit:]",
            b"[:alpha:]",
            b"[:upper:]",
            b"[:bogus:]",
        ];
        let strs = b"abA1.-:[]";
        let mut rng = Lcg(1);
        for _ in 0..40_000 {
            let p: Vec<u8> = (0..rng.below(8))
                .flat_map(|_| fragments[rng.below(fragments.len())].iter().copied())
                .collect();
            let s: Vec<u8> = (0..rng.below(6))
                .map(|_| strs[rng.below(strs.len())])
                .collect();
            agrees(tokens_match, &p, &s);
        }
    }

    /// The fast path for literal-and-star patterns against the reference
    /// (and so against the general matcher).
    #[test]
    fn stars_only_patterns_agree_with_reference() {
        let alphabet = b"abA.*";
        let mut rng = Lcg(3);
        for _ in 0..40_000 {
            let p: Vec<u8> = (0..rng.below(8))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect();
            let s: Vec<u8> = (0..rng.below(9)).map(|_| alphabet[rng.below(4)]).collect();
            agrees(glob_match, &p, &s);
        }
    }

    fn ino(ftype: FileType, perm: u16, size: u64) -> Inode {
        Inode {
            ftype,
            perm,
            uid: 5,
            gid: 6,
            nlink: 1,
            size,
            atime: Nanos(10),
            mtime: Nanos(20),
            ctime: Nanos(30),
            parent: Soid::ROOT,
            name: b"f".as_slice().into(),
            extra: None,
        }
    }

    #[test]
    fn predicates_and_three_valued_logic() {
        let mut i = ino(FileType::Regular, 0o644, 0);
        i.extra_mut()
            .xattrs
            .insert(b"user.k"[..].into(), b"v"[..].into());
        let e = Entry {
            path: Some(b"/d/f.txt"),
            name: b"f.txt",
            depth: Some(2),
            soid: Soid::from_u128(9),
            inode: &i,
            dir_has_entries: false,
        };
        let p = |p: Pred| Expr::Pred(p);
        assert!(p(Pred::Perm(PermMatch::Exact(0o644))).matches(&e));
        assert!(p(Pred::Perm(PermMatch::All(0o604))).matches(&e));
        assert!(!p(Pred::Perm(PermMatch::All(0o001))).matches(&e));
        assert!(p(Pred::Perm(PermMatch::Any(0o111 | 0o040))).matches(&e));
        assert!(!p(Pred::Perm(PermMatch::Any(0o111))).matches(&e));
        assert!(p(Pred::Perm(PermMatch::Any(0))).matches(&e));
        assert!(p(Pred::Empty).matches(&e));
        assert!(p(Pred::XattrExists(b"user.k"[..].into())).matches(&e));
        assert!(p(Pred::XattrEq(b"user.k"[..].into(), b"v"[..].into())).matches(&e));
        assert!(!p(Pred::XattrEq(b"user.k"[..].into(), b"w"[..].into())).matches(&e));
        assert!(p(Pred::Time {
            which: TimeAttr::Mtime,
            lo: Nanos(20),
            hi: Nanos(20)
        })
        .matches(&e));
        assert!(Expr::path(b"/d/*").matches(&e));
        assert!(p(Pred::Depth { min: 2, max: 2 }).matches(&e));
        let unknown = Entry {
            path: None,
            depth: None,
            ..e
        };
        assert_eq!(Expr::path(b"/d/*").eval(&unknown), None);
        assert_eq!(
            Expr::and(Expr::path(b"/d/*"), Expr::name(b"*.c")).eval(&unknown),
            Some(false)
        );
        assert_eq!(
            Expr::or(Expr::path(b"/x"), Expr::name(b"*.txt")).eval(&unknown),
            Some(true)
        );
        assert_eq!(Expr::not(Expr::path(b"/x")).eval(&unknown), None);
        assert!(Expr::And(vec![]).matches(&e));
        assert!(!Expr::Or(vec![]).matches(&e));
        let d = ino(FileType::Directory, 0o755, 4096);
        let de = Entry {
            inode: &d,
            dir_has_entries: true,
            ..e
        };
        assert!(!p(Pred::Empty).matches(&de));
        let de = Entry {
            dir_has_entries: false,
            ..de
        };
        assert!(p(Pred::Empty).matches(&de));
    }

    /// A group-only expression evaluated from (uid, gid, type) equals the
    /// exact evaluation of any entry at depth ≥ 1 with them; other
    /// predicates make an expression not group-only.
    #[test]
    fn group_only_expressions_depend_on_owner_group_and_type_alone() {
        use proptest::prelude::*;
        let types = [FileType::Regular, FileType::Directory, FileType::Symlink];
        let leaf = prop_oneof![
            prop::collection::vec(0..3usize, 1..3)
                .prop_map(move |v| Pred::Type(v.into_iter().map(|i| types[i]).collect())),
            (0..4u32, 0..4u32).prop_map(|(a, b)| Pred::Uid {
                lo: a.min(b),
                hi: a.max(b)
            }),
            (0..4u32, 0..4u32).prop_map(|(a, b)| Pred::Gid {
                lo: a.min(b),
                hi: a.max(b)
            }),
            (0..3u32, prop::sample::select(vec![2, 5, u32::MAX]))
                .prop_map(|(min, max)| Pred::Depth { min, max }),
            Just(Pred::Size { lo: 1, hi: 9 }),
        ]
        .prop_map(Expr::Pred);
        let expr = leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Expr::And),
                prop::collection::vec(inner.clone(), 0..3).prop_map(Expr::Or),
                inner.prop_map(|e| Expr::Not(Box::new(e))),
            ]
        });
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(
                &(expr, 0..4u32, 0..4u32, 0..3usize, 1..9u32, 0..20u64),
                |(expr, uid, gid, t, depth, size)| {
                    let only = expr.is_group_only();
                    let has_other = expr.any_pred(&|p| match p {
                        Pred::Size { .. } => true,
                        Pred::Depth { min, max } => *min > 1 || *max != u32::MAX,
                        _ => false,
                    });
                    prop_assert_eq!(only, !has_other);
                    if !only {
                        return Ok(());
                    }
                    let mut i = ino(types[t], 0o644, size);
                    (i.uid, i.gid) = (uid, gid);
                    let e = Entry {
                        path: Some(b"/d/f"),
                        name: b"f",
                        depth: Some(depth),
                        soid: Soid::from_u128(9),
                        inode: &i,
                        dir_has_entries: true,
                    };
                    prop_assert_eq!(expr.eval(&e), Some(expr.eval_group(uid, gid, types[t])));
                    Ok(())
                },
            )
            .unwrap();
    }
}
