//! `sextant find` command lines → a [`Command`]: starting points, global
//! options and the expression tree, with GNU find's grammar and
//! semantics. Pure: the clock and the user/group database come in through
//! [`Env`], reference files (`-newer F`, `-samefile F`) stay unresolved
//! ([`Test::Newer`], [`Test::Samefile`]) for the caller to look up, and
//! `-inum` ([`Test::Inum`]) for the caller to resolve per starting point.
//!
//! Grammar (GNU find): `expr := or (',' or)*`, `or := and (-o and)*`,
//! `and := unary ([-a] unary)*` (adjacent primaries are joined by an
//! implicit `-a`), `unary := ! unary | ( expr ) | primary`. Global options
//! (`-maxdepth`, `-mindepth`, `-depth`, `-xdev`, ...) may appear anywhere
//! and are true where they stand. Without an action other than `-prune`
//! the expression becomes `( expr ) -a -print`.
//!
//! Numeric rounding follows find:
//! - `-size n[u]` compares the size rounded *up* to units `u` (`b` = 512
//!   bytes by default, `c` bytes, `w` 2, `k` KiB, `M` MiB, `G` GiB): `n`
//!   means `ceil(size/u) == n`, `+n` more, `-n` less (so `-size -1k`
//!   matches only empty files).
//! - `-mtime n` means `floor(age / 24 h) == n` with age = start time −
//!   mtime; `+n` older, `-n` younger (`-mmin` the same in minutes).
//! - every numeric test becomes an inclusive range; an empty one becomes
//!   `-false` (the wire refuses inverted ranges).
//!
//! Anything this module does not implement is refused by name, never
//! ignored.

use sextant_engine::bloom::TimeAttr;
use sextant_engine::search::{PermMatch, Pred};
use sextant_types::{FileType, Nanos};
use std::fmt;

/// A find command-line error (shown as `sextant find: ...`, exit 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

fn err<T>(s: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(s.into()))
}

/// What parsing needs from the outside world.
pub trait Env {
    /// The start time every relative time test is measured from.
    fn now(&self) -> Nanos;
    /// The beginning of today (local time), for `-daystart`.
    fn day_start(&self) -> Nanos;
    fn uid_of(&self, user: &str) -> Option<u32>;
    fn gid_of(&self, group: &str) -> Option<u32>;
    /// Seconds since the epoch of a local civil time (for `-newerXt`);
    /// `None` when it does not exist there. The default reads it as UTC.
    fn local_seconds(&self, c: &super::date::Civil) -> Option<i64> {
        Some(c.utc_seconds())
    }
}

/// A test that is not yet a wire predicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    Pred(Pred),
    /// `-newer F` (`Mtime`), `-anewer F` (`Atime`), `-cnewer F` (`Ctime`),
    /// `-newerXY F`: the entry's `which` time is after F's `of` time.
    Newer {
        which: TimeAttr,
        of: TimeAttr,
        file: String,
    },
    /// `-samefile F`.
    Samefile(String),
    /// `-inum N`: the entry's inode number is N — the SOID for a
    /// namespace path, the number the mount shows (`st_ino`) under a
    /// mount; resolved per starting point.
    Inum(u128),
    /// `-true`, `-false`, and global options (true).
    Const(bool),
    /// `-regex`, `-iregex`: the whole printed path matches (decided by
    /// the client, like the other tests of the printed path).
    Regex(super::regex::PathRegex),
    /// Decided by the client only (the server's filter relaxes it).
    Client(ClientTest),
}

/// Tests the client decides from a hit's attributes, the local user
/// database, the caller's credentials or a symlink's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientTest {
    /// `-lname`, `-ilname`: a symlink whose target matches the glob.
    LinkName { pattern: Box<[u8]>, ci: bool },
    /// `-nouser`: no user has the file's uid.
    NoUser,
    /// `-nogroup`: no group has the file's gid.
    NoGroup,
    /// `-readable` (4), `-writable` (2), `-executable` (1): the caller's
    /// access by the permission bits, as access(2) decides it.
    Access(u32),
    /// `-xtype`: the type a symlink leads to (`l` when it leads nowhere);
    /// for anything else, its own type.
    XType(Vec<FileType>),
    /// `-fstype TYPE`: the starting point's file system is of this type
    /// (its mount's, as the kernel records it; `sextant` for a namespace
    /// path).
    FsType(String),
    /// `-inum N` under a mount: the inode number the mount shows for the
    /// entry (its node id, which the mount assigns; not the SOID).
    Inode(u128),
    /// Beside `-samefile F`'s SOID test: the entry's attributes are known
    /// (true for every hit). find `stat`s the entry for `-samefile`, so
    /// for one known from a listing alone it fails ([`super::plan::Blind`]).
    Stat,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Print,
    Print0,
    Printf(super::printf::Format),
    Ls,
    Prune,
    /// `-exec`, `-execdir`, `-ok`, `-okdir`.
    Exec(Exec),
    /// `-delete` (turns on `-depth`).
    Delete,
    /// `-quit`: stop at the first entry that reaches it (the first in the
    /// server's order, which stands for find's traversal order).
    Quit,
    /// `-fprint FILE`, `-fprint0`, `-fprintf`, `-fls`: what the inner
    /// action (`Print`, `Print0`, `Printf`, `Ls`) prints goes to FILE
    /// (created or truncated before the search, as find does).
    ToFile {
        file: String,
        what: Box<Action>,
    },
}

impl Action {
    /// It writes to the output (`-print`, `-print0`, `-printf`, `-ls`).
    pub fn prints(&self) -> bool {
        matches!(
            self,
            Action::Print | Action::Print0 | Action::Printf(_) | Action::Ls
        )
    }

    /// Its value is not always true (the command's exit status, whether
    /// the deletion worked): the server's filter must not assume it.
    pub fn may_be_false(&self) -> bool {
        match self {
            Action::Exec(e) => !e.batch,
            Action::Delete => true,
            _ => false,
        }
    }
}

/// A command to run per entry (`-exec CMD ... ;`) or for many entries at
/// once (`-exec CMD ... {} +`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exec {
    /// The command and its arguments; `{}` stands for the entry's path
    /// (anywhere in an argument with `;`, the last argument with `+`).
    pub argv: Vec<String>,
    /// The `+` form: the paths are appended in batches, and the action is
    /// always true.
    pub batch: bool,
    /// `-execdir`/`-okdir`: run in the entry's directory, on `./NAME`.
    pub in_dir: bool,
    /// `-ok`/`-okdir`: ask on stderr first, run only on a yes from stdin.
    pub ask: bool,
    /// Which `-exec` of the expression this is (numbered from 0 as
    /// parsed), to keep the batches of two `+` actions apart.
    pub id: usize,
}

/// The expression tree (binary operators, as find evaluates them: left
/// first, short-circuit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Test(Test),
    Action(Action),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// `a , b`: both evaluated, the value is b's.
    Comma(Box<Node>, Box<Node>),
}

impl Node {
    fn and(a: Node, b: Node) -> Node {
        Node::And(Box::new(a), Box::new(b))
    }

    /// Visits every leaf.
    pub fn for_each_leaf<'a>(&'a self, f: &mut impl FnMut(&'a Node)) {
        match self {
            Node::Test(_) | Node::Action(_) => f(self),
            Node::And(a, b) | Node::Or(a, b) | Node::Comma(a, b) => {
                a.for_each_leaf(f);
                b.for_each_leaf(f);
            }
            Node::Not(a) => a.for_each_leaf(f),
        }
    }

    /// Maps every test (e.g. resolving reference files).
    pub fn map_tests<E>(self, f: &mut impl FnMut(Test) -> Result<Test, E>) -> Result<Node, E> {
        Ok(match self {
            Node::Test(t) => Node::Test(f(t)?),
            Node::Action(a) => Node::Action(a),
            Node::And(a, b) => Node::And(Box::new(a.map_tests(f)?), Box::new(b.map_tests(f)?)),
            Node::Or(a, b) => Node::Or(Box::new(a.map_tests(f)?), Box::new(b.map_tests(f)?)),
            Node::Comma(a, b) => Node::Comma(Box::new(a.map_tests(f)?), Box::new(b.map_tests(f)?)),
            Node::Not(a) => Node::Not(Box::new(a.map_tests(f)?)),
        })
    }
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Starting points as typed (`.` when none).
    pub paths: Vec<String>,
    pub expr: Node,
    pub min_depth: u32,
    pub max_depth: u32,
    /// `-depth`: contents before the directory. Output order is not find's
    /// anyway; what it changes is that `-prune` no longer prunes.
    pub depth_first: bool,
}

/// Predicates, actions and options refused, with the reason shown.
const REFUSED: &[(&str, &str)] = &[
    ("-follow", "following symlinks is not supported"),
    (
        "-nouser",
        "not supported (would need every uid of the password database)",
    ),
    (
        "-nogroup",
        "not supported (would need every gid of the group database)",
    ),
    ("-used", "not supported"),
    ("-context", "SELinux contexts are not supported"),
];

/// Options GNU find takes before the starting points.
fn leading_option(a: &str) -> Result<bool, ParseError> {
    match a {
        "-P" => Ok(true),
        "-H" | "-L" => err(format!(
            "option '{a}' is not supported: symlinks are never followed (find -P)"
        )),
        "-D" | "-O" => err(format!("option '{a}' is not supported")),
        _ if a.starts_with("-O") && a.len() > 2 => Ok(true),
        _ => Ok(false),
    }
}

/// Parses a whole `find` argument list (everything after `find`).
pub fn parse(args: &[String], env: &dyn Env) -> Result<Command, ParseError> {
    let mut i = 0;
    while i < args.len() && leading_option(&args[i])? {
        i += 1;
    }
    let mut paths = Vec::new();
    while i < args.len() {
        let a = &args[i];
        if (a.starts_with('-') && a.len() > 1) || a == "(" || a == "!" || a == ")" || a == "," {
            break;
        }
        paths.push(a.clone());
        i += 1;
    }
    if paths.is_empty() {
        paths.push(".".to_string());
    }
    let mut p = Parser {
        args: &args[i..],
        pos: 0,
        env,
        min_depth: 0,
        max_depth: u32::MAX,
        depth_first: false,
        has_action: false,
        execs: 0,
        regex_syntax: super::regex::Syntax::Emacs,
        prunes: false,
        deletes: false,
        origin: env.now(),
    };
    let expr = if p.args.is_empty() {
        None
    } else {
        let e = p.comma()?;
        if let Some(t) = p.peek() {
            return match t {
                ")" => err("invalid expression: ')' without a matching '('"),
                _ => err(format!("unexpected '{t}'")),
            };
        }
        Some(e)
    };
    if p.deletes && p.prunes && !p.depth_first {
        // As find: -delete would silently turn -prune off.
        return err(
            "the -delete action turns on -depth, but -prune does nothing when -depth is in \
             effect; to carry on anyway, give -depth explicitly",
        );
    }
    let expr = match (expr, p.has_action) {
        (None, _) => Node::Action(Action::Print),
        (Some(e), true) => e,
        (Some(e), false) => Node::and(e, Node::Action(Action::Print)),
    };
    Ok(Command {
        paths,
        expr,
        min_depth: p.min_depth,
        max_depth: p.max_depth,
        depth_first: p.depth_first || p.deletes,
    })
}

struct Parser<'a> {
    args: &'a [String],
    pos: usize,
    env: &'a dyn Env,
    min_depth: u32,
    max_depth: u32,
    depth_first: bool,
    has_action: bool,
    /// `-exec`s and the like so far.
    execs: usize,
    /// The syntax of later `-regex`es (`-regextype`).
    regex_syntax: super::regex::Syntax,
    prunes: bool,
    deletes: bool,
    /// What `-Xtime`/`-Xmin` measure ages from: the start time, or after
    /// `-daystart` the end of today (so `-mtime 0` is "today").
    origin: Nanos,
}

/// `+n`, `-n`, `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Gt,
    Lt,
    Eq,
}

fn split_cmp(s: &str) -> (Cmp, &str) {
    if let Some(r) = s.strip_prefix('+') {
        (Cmp::Gt, r)
    } else if let Some(r) = s.strip_prefix('-') {
        (Cmp::Lt, r)
    } else {
        (Cmp::Eq, s)
    }
}

fn digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// An inclusive `u64` range for `n`, `+n`, `-n` (None: empty).
fn int_range(cmp: Cmp, n: u64, max: u64) -> Option<(u64, u64)> {
    match cmp {
        Cmp::Eq => (n <= max).then_some((n, n)),
        Cmp::Gt => (n < max).then(|| (n + 1, max)),
        Cmp::Lt => (n > 0).then(|| (0, (n - 1).min(max))),
    }
}

/// `-size` with find's round-up-to-units semantics (None: empty).
pub fn size_range(arg: &str) -> Result<Option<(u64, u64)>, ParseError> {
    let bad = || ParseError(format!("invalid argument '{arg}' to -size"));
    let (cmp, rest) = split_cmp(arg);
    let (num, unit) = match rest.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&rest[..i], c),
        _ => (rest, 'b'),
    };
    let u: u64 = match unit {
        'b' => 512,
        'c' => 1,
        'w' => 2,
        'k' => 1024,
        'M' => 1 << 20,
        'G' => 1 << 30,
        _ => return Err(bad()),
    };
    let n: u64 = digits(num).ok_or_else(bad)?;
    Ok(match cmp {
        Cmp::Eq if n == 0 => Some((0, 0)),
        Cmp::Eq => (n - 1)
            .checked_mul(u)
            .map(|lo| (lo + 1, n.saturating_mul(u))),
        Cmp::Gt => n
            .checked_mul(u)
            .and_then(|lo| lo.checked_add(1))
            .map(|lo| (lo, u64::MAX)),
        Cmp::Lt if n == 0 => None,
        Cmp::Lt => Some((0, (n - 1).saturating_mul(u))),
    })
}

/// `-mtime`/`-mmin` style: inclusive range of times (None: empty).
pub fn time_range(arg: &str, unit_ns: i128, now: Nanos) -> Option<(Nanos, Nanos)> {
    let (cmp, rest) = split_cmp(arg);
    let n: i128 = digits::<u64>(rest)? as i128;
    let now = now.0 as i128;
    let (lo, hi) = match cmp {
        // floor(age/unit) == n  ⇔  now-(n+1)u < t <= now-nu
        Cmp::Eq => (now - (n + 1) * unit_ns + 1, now - n * unit_ns),
        // older: t < now-(n+1)u
        Cmp::Gt => (i64::MIN as i128, now - (n + 1) * unit_ns - 1),
        // younger: t > now-nu
        Cmp::Lt => (now - n * unit_ns + 1, i64::MAX as i128),
    };
    let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    let (lo, hi) = (clamp(lo), clamp(hi));
    (lo <= hi).then_some((Nanos(lo), Nanos(hi)))
}

/// `-perm` argument: octal or symbolic, with `-` (all) or `/` (any).
/// Returns the mode for non-directories and for directories (they differ
/// only with `X`).
pub fn perm_arg(arg: &str) -> Result<(char, u16, u16), ParseError> {
    let (how, m) = match arg.chars().next() {
        Some('-') => ('-', &arg[1..]),
        Some('/') => ('/', &arg[1..]),
        Some('+') if arg[1..].bytes().all(|c| c.is_ascii_digit()) && arg.len() > 1 => {
            return err(format!(
                "invalid mode '{arg}' to -perm: '+MODE' is obsolete, use '/MODE'"
            ))
        }
        _ => ('=', arg),
    };
    if !m.is_empty() && m.bytes().all(|c| (b'0'..=b'7').contains(&c)) {
        let v = u32::from_str_radix(m, 8)
            .ok()
            .filter(|v| *v <= 0o7777)
            .ok_or_else(|| ParseError(format!("invalid mode '{arg}' to -perm")))?;
        return Ok((how, v as u16, v as u16));
    }
    let file = symbolic_mode(m, false)
        .map_err(|e| ParseError(format!("invalid mode '{arg}' to -perm: {e}")))?;
    let dir = symbolic_mode(m, true)
        .map_err(|e| ParseError(format!("invalid mode '{arg}' to -perm: {e}")))?;
    Ok((how, file, dir))
}

/// A symbolic mode (`u+x,g=rw,o-w,a+X`, like chmod) applied to mode 0
/// with umask 0, as find does.
fn symbolic_mode(s: &str, is_dir: bool) -> Result<u16, String> {
    if s.is_empty() {
        return Err("empty mode".into());
    }
    let mut mode: u16 = 0;
    for clause in s.split(',') {
        let b = clause.as_bytes();
        let mut i = 0;
        let mut who: u16 = 0;
        while i < b.len() && b"ugoa".contains(&b[i]) {
            who |= match b[i] {
                b'u' => 0o4700,
                b'g' => 0o2070,
                b'o' => 0o1007,
                _ => 0o7777,
            };
            i += 1;
        }
        if who == 0 {
            who = 0o7777;
        }
        if i == b.len() {
            return Err(format!("'{clause}' has no operator (+, - or =)"));
        }
        while i < b.len() {
            let op = b[i];
            if !b"+-=".contains(&op) {
                return Err(format!("unexpected '{}' in '{clause}'", b[i] as char));
            }
            i += 1;
            let mut value: u16 = 0;
            while i < b.len() && !b"+-=".contains(&b[i]) {
                value |= match b[i] {
                    b'r' => 0o444,
                    b'w' => 0o222,
                    b'x' => 0o111,
                    b'X' => {
                        if is_dir || mode & 0o111 != 0 {
                            0o111
                        } else {
                            0
                        }
                    }
                    b's' => 0o6000,
                    b't' => 0o1000,
                    b'u' | b'g' | b'o' => {
                        return Err("copying permissions (e.g. g=u) is not supported".into())
                    }
                    c => return Err(format!("unknown permission '{}'", c as char)),
                };
                i += 1;
            }
            let value = value & who;
            match op {
                b'+' => mode |= value,
                b'-' => mode &= !value,
                _ => mode = (mode & !who) | value,
            }
        }
    }
    Ok(mode)
}

fn range_pred(r: Option<(u64, u64)>, f: impl FnOnce(u64, u64) -> Pred) -> Test {
    match r {
        Some((lo, hi)) => Test::Pred(f(lo, hi)),
        None => Test::Const(false),
    }
}

fn type_letter(c: char) -> Option<FileType> {
    Some(match c {
        'f' => FileType::Regular,
        'd' => FileType::Directory,
        'l' => FileType::Symlink,
        'b' => FileType::BlockDevice,
        'c' => FileType::CharDevice,
        'p' => FileType::Fifo,
        's' => FileType::Socket,
        _ => return None,
    })
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.args.get(self.pos).map(String::as_str)
    }

    fn next(&mut self) -> Option<&'a str> {
        let t = self.peek();
        self.pos += 1;
        t
    }

    fn arg(&mut self, pred: &str) -> Result<&'a str, ParseError> {
        match self.next() {
            Some(a) => Ok(a),
            None => err(format!("missing argument to '{pred}'")),
        }
    }

    fn comma(&mut self) -> Result<Node, ParseError> {
        let mut left = self.or()?;
        while self.peek() == Some(",") {
            self.pos += 1;
            if self.peek().is_none() {
                return err("expected an expression after ','");
            }
            let right = self.or()?;
            left = Node::Comma(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn or(&mut self) -> Result<Node, ParseError> {
        let mut left = self.and()?;
        while matches!(self.peek(), Some("-o" | "-or")) {
            let op = self.next().unwrap_or("-o");
            if matches!(self.peek(), None | Some(")" | ",")) {
                return err(format!("expected an expression after '{op}'"));
            }
            let right = self.and()?;
            left = Node::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, ParseError> {
        let mut left = self.unary()?;
        loop {
            match self.peek() {
                None | Some(")" | "," | "-o" | "-or") => return Ok(left),
                Some("-a" | "-and") => {
                    let op = self.next().unwrap_or("-a");
                    if matches!(self.peek(), None | Some(")" | "," | "-o" | "-or")) {
                        return err(format!("expected an expression after '{op}'"));
                    }
                }
                Some(_) => {}
            }
            let right = self.unary()?;
            left = Node::and(left, right);
        }
    }

    fn unary(&mut self) -> Result<Node, ParseError> {
        match self.peek() {
            None => err("expected an expression"),
            Some("!" | "-not") => {
                let op = self.next().unwrap_or("!");
                if matches!(
                    self.peek(),
                    None | Some(")" | "," | "-o" | "-or" | "-a" | "-and")
                ) {
                    return err(format!("expected an expression after '{op}'"));
                }
                Ok(Node::Not(Box::new(self.unary()?)))
            }
            Some("(") => {
                self.pos += 1;
                if self.peek() == Some(")") {
                    return err("invalid expression: empty parentheses are not allowed");
                }
                let e = self.comma()?;
                match self.next() {
                    Some(")") => Ok(e),
                    _ => err("invalid expression: '(' without a matching ')'"),
                }
            }
            Some(")") => err("invalid expression: ')' without a matching '('"),
            Some(op @ ("-o" | "-or" | "-a" | "-and" | ",")) => {
                err(format!("invalid expression: '{op}' with nothing before it"))
            }
            Some(_) => self.primary(),
        }
    }

    fn depth_arg(&mut self, name: &str) -> Result<u32, ParseError> {
        let a = self.arg(name)?;
        digits(a).ok_or_else(|| {
            ParseError(format!(
                "invalid argument '{a}' to '{name}': expected a non-negative integer"
            ))
        })
    }

    fn num_test(
        &mut self,
        name: &str,
        max: u64,
        f: impl FnOnce(u64, u64) -> Pred,
    ) -> Result<Test, ParseError> {
        let a = self.arg(name)?;
        let (cmp, rest) = split_cmp(a);
        let n: u64 = digits(rest)
            .ok_or_else(|| ParseError(format!("invalid argument '{a}' to '{name}'")))?;
        Ok(range_pred(int_range(cmp, n, max), f))
    }

    fn time_test(
        &mut self,
        name: &str,
        which: TimeAttr,
        unit_ns: i128,
    ) -> Result<Test, ParseError> {
        let a = self.arg(name)?;
        let (_, rest) = split_cmp(a);
        if digits::<u64>(rest).is_none() {
            return err(format!(
                "invalid argument '{a}' to '{name}' (whole numbers only, e.g. 3, +3, -3)"
            ));
        }
        Ok(match time_range(a, unit_ns, self.origin) {
            Some((lo, hi)) => Test::Pred(Pred::Time { which, lo, hi }),
            None => Test::Const(false),
        })
    }

    fn primary(&mut self) -> Result<Node, ParseError> {
        let Some(tok) = self.next() else {
            return err("expected an expression");
        };
        let pred = |p: Pred| Ok(Node::Test(Test::Pred(p)));
        const DAY: i128 = 86_400 * 1_000_000_000;
        const MIN: i128 = 60 * 1_000_000_000;
        match tok {
            "-name" | "-iname" => {
                let p = self.arg(tok)?;
                pred(Pred::Name {
                    pattern: p.as_bytes().into(),
                    glob: true,
                    ci: tok == "-iname",
                })
            }
            "-path" | "-wholename" | "-ipath" | "-iwholename" => {
                let p = self.arg(tok)?;
                pred(Pred::Path {
                    pattern: p.as_bytes().into(),
                    ci: tok.starts_with("-i"),
                })
            }
            "-type" => pred(Pred::Type(self.types(tok)?)),
            "-xtype" => Ok(Node::Test(Test::Client(ClientTest::XType(
                self.types(tok)?,
            )))),
            "-user" | "-group" => {
                let a = self.arg(tok)?;
                let id = if tok == "-user" {
                    self.env.uid_of(a)
                } else {
                    self.env.gid_of(a)
                };
                let id = match id.or_else(|| digits(a)) {
                    Some(id) => id,
                    None if tok == "-user" => {
                        return err(format!("'{a}' is not the name of a known user"))
                    }
                    None => return err(format!("'{a}' is not the name of an existing group")),
                };
                if tok == "-user" {
                    pred(Pred::Uid { lo: id, hi: id })
                } else {
                    pred(Pred::Gid { lo: id, hi: id })
                }
            }
            "-uid" => Ok(Node::Test(self.num_test(
                tok,
                u32::MAX as u64,
                |lo, hi| Pred::Uid {
                    lo: lo as u32,
                    hi: hi as u32,
                },
            )?)),
            "-gid" => Ok(Node::Test(self.num_test(
                tok,
                u32::MAX as u64,
                |lo, hi| Pred::Gid {
                    lo: lo as u32,
                    hi: hi as u32,
                },
            )?)),
            "-links" => Ok(Node::Test(self.num_test(
                tok,
                u32::MAX as u64,
                |lo, hi| Pred::Links {
                    lo: lo as u32,
                    hi: hi as u32,
                },
            )?)),
            "-size" => {
                let a = self.arg(tok)?;
                Ok(Node::Test(range_pred(size_range(a)?, |lo, hi| {
                    Pred::Size { lo, hi }
                })))
            }
            "-empty" => pred(Pred::Empty),
            "-perm" => {
                let a = self.arg(tok)?;
                let (how, file, dir) = perm_arg(a)?;
                let mk = |m: u16| {
                    Node::Test(Test::Pred(Pred::Perm(match how {
                        '-' => PermMatch::All(m),
                        '/' => PermMatch::Any(m),
                        _ => PermMatch::Exact(m),
                    })))
                };
                if file == dir {
                    return Ok(mk(file));
                }
                let is_dir = || Node::Test(Test::Pred(Pred::Type(vec![FileType::Directory])));
                Ok(Node::Or(
                    Box::new(Node::and(is_dir(), mk(dir))),
                    Box::new(Node::and(Node::Not(Box::new(is_dir())), mk(file))),
                ))
            }
            "-inum" => {
                let a = self.arg(tok)?;
                match a.parse::<u128>() {
                    Ok(n) if digits::<u128>(a).is_some() => Ok(Node::Test(Test::Inum(n))),
                    _ => err(format!(
                        "invalid argument '{a}' to -inum (an exact inode number; +n/-n are not supported)"
                    )),
                }
            }
            "-samefile" => Ok(Node::Test(Test::Samefile(self.arg(tok)?.to_string()))),
            "-newer" | "-anewer" | "-cnewer" => {
                let file = self.arg(tok)?.to_string();
                let which = match tok {
                    "-anewer" => TimeAttr::Atime,
                    "-cnewer" => TimeAttr::Ctime,
                    _ => TimeAttr::Mtime,
                };
                Ok(Node::Test(Test::Newer {
                    which,
                    of: TimeAttr::Mtime,
                    file,
                }))
            }
            _ if tok.len() == 8 && tok.starts_with("-newer") => {
                let letter = |c: u8| match c {
                    b'a' => Ok(TimeAttr::Atime),
                    b'c' => Ok(TimeAttr::Ctime),
                    b'm' => Ok(TimeAttr::Mtime),
                    b'B' => err("birth times (-newerB*, -newer*B) are not recorded by Sextant"),
                    _ => err(format!("unknown predicate '{tok}'")),
                };
                let b = tok.as_bytes();
                let which = letter(b[6])?;
                if b[7] == b't' {
                    // -newerXt DATE: X newer than the date itself.
                    let date = self.arg(tok)?;
                    let at = self.date(tok, date)?;
                    return Ok(match at.0.checked_add(1) {
                        Some(lo) => Node::Test(Test::Pred(Pred::Time {
                            which,
                            lo: Nanos(lo),
                            hi: Nanos(i64::MAX),
                        })),
                        None => Node::Test(Test::Const(false)),
                    });
                }
                let of = letter(b[7])?;
                let file = self.arg(tok)?.to_string();
                Ok(Node::Test(Test::Newer { which, of, file }))
            }
            "-quit" => self.action(Action::Quit),
            "-fstype" => Ok(Node::Test(Test::Client(ClientTest::FsType(
                self.arg(tok)?.to_string(),
            )))),
            "-regextype" => {
                self.regex_syntax =
                    super::regex::Syntax::named(self.arg(tok)?).map_err(ParseError)?;
                Ok(Node::Test(Test::Const(true)))
            }
            "-regex" | "-iregex" => {
                let pattern = self.arg(tok)?;
                let re = super::regex::PathRegex::new(pattern, self.regex_syntax, tok == "-iregex")
                    .map_err(ParseError)?;
                Ok(Node::Test(Test::Regex(re)))
            }
            "-mtime" => Ok(Node::Test(self.time_test(tok, TimeAttr::Mtime, DAY)?)),
            "-atime" => Ok(Node::Test(self.time_test(tok, TimeAttr::Atime, DAY)?)),
            "-ctime" => Ok(Node::Test(self.time_test(tok, TimeAttr::Ctime, DAY)?)),
            "-mmin" => Ok(Node::Test(self.time_test(tok, TimeAttr::Mtime, MIN)?)),
            "-amin" => Ok(Node::Test(self.time_test(tok, TimeAttr::Atime, MIN)?)),
            "-cmin" => Ok(Node::Test(self.time_test(tok, TimeAttr::Ctime, MIN)?)),
            "-xattr" => {
                let a = self.arg(tok)?;
                if a.is_empty() {
                    return err("missing argument to '-xattr'");
                }
                match a.split_once('=') {
                    Some((k, v)) => pred(Pred::XattrEq(k.as_bytes().into(), v.as_bytes().into())),
                    None => pred(Pred::XattrExists(a.as_bytes().into())),
                }
            }
            "-lname" | "-ilname" => {
                let p = self.arg(tok)?;
                Ok(Node::Test(Test::Client(ClientTest::LinkName {
                    pattern: p.as_bytes().into(),
                    ci: tok == "-ilname",
                })))
            }
            "-nouser" => Ok(Node::Test(Test::Client(ClientTest::NoUser))),
            "-nogroup" => Ok(Node::Test(Test::Client(ClientTest::NoGroup))),
            "-readable" => Ok(Node::Test(Test::Client(ClientTest::Access(4)))),
            "-writable" => Ok(Node::Test(Test::Client(ClientTest::Access(2)))),
            "-executable" => Ok(Node::Test(Test::Client(ClientTest::Access(1)))),
            "-true" => Ok(Node::Test(Test::Const(true))),
            "-false" => Ok(Node::Test(Test::Const(false))),
            "-maxdepth" => {
                self.max_depth = self.depth_arg(tok)?;
                Ok(Node::Test(Test::Const(true)))
            }
            "-mindepth" => {
                self.min_depth = self.depth_arg(tok)?;
                Ok(Node::Test(Test::Const(true)))
            }
            "-daystart" => {
                const DAY_NS: i64 = 86_400 * 1_000_000_000;
                self.origin = Nanos(self.env.day_start().0.saturating_add(DAY_NS));
                Ok(Node::Test(Test::Const(true)))
            }
            "-depth" | "-d" => {
                self.depth_first = true;
                Ok(Node::Test(Test::Const(true)))
            }
            "-xdev"
            | "-mount"
            | "-noleaf"
            | "-ignore_readdir_race"
            | "-noignore_readdir_race"
            | "-nowarn"
            | "-warn" => Ok(Node::Test(Test::Const(true))),
            "-print" => self.action(Action::Print),
            "-print0" => self.action(Action::Print0),
            "-ls" => self.action(Action::Ls),
            "-printf" => {
                let f = self.arg(tok)?;
                let fmt = super::printf::parse(f.as_bytes()).map_err(ParseError)?;
                self.action(Action::Printf(fmt))
            }
            "-fprint" | "-fprint0" | "-fls" | "-fprintf" => {
                let file = self.arg(tok)?.to_string();
                let what = match tok {
                    "-fprint" => Action::Print,
                    "-fprint0" => Action::Print0,
                    "-fls" => Action::Ls,
                    _ => {
                        let f = self.arg(tok)?;
                        Action::Printf(super::printf::parse(f.as_bytes()).map_err(ParseError)?)
                    }
                };
                self.action(Action::ToFile {
                    file,
                    what: Box::new(what),
                })
            }
            "-prune" => {
                self.prunes = true;
                Ok(Node::Action(Action::Prune))
            }
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let e = self.exec(tok)?;
                self.action(Action::Exec(e))
            }
            "-delete" => {
                self.deletes = true;
                self.action(Action::Delete)
            }
            _ => {
                if let Some((_, why)) = REFUSED.iter().find(|(n, _)| *n == tok) {
                    return err(format!("'{tok}' is not supported: {why}"));
                }
                if tok.starts_with('-') {
                    return err(format!("unknown predicate '{tok}'"));
                }
                // `-name *.h` unquoted: the shell expanded the pattern into
                // several names, and the second one lands here.
                let before = self.pos.checked_sub(3).and_then(|i| self.args.get(i));
                match before.map(String::as_str) {
                    Some(
                        p @ ("-name" | "-iname" | "-path" | "-ipath" | "-wholename" | "-iwholename"
                        | "-lname" | "-ilname"),
                    ) => err(format!(
                        "paths must precede expression: '{tok}' (possible unquoted pattern \
                         after '{p}'?)"
                    )),
                    _ => err(format!("paths must precede expression: '{tok}'")),
                }
            }
        }
    }

    /// The type letters of `-type`/`-xtype` (`f,d,l`).
    fn types(&mut self, tok: &str) -> Result<Vec<FileType>, ParseError> {
        let a = self.arg(tok)?;
        let mut ts = Vec::new();
        for part in a.split(',') {
            let mut cs = part.chars();
            match (cs.next(), cs.next()) {
                (Some(c), None) => match type_letter(c) {
                    Some(t) => {
                        if !ts.contains(&t) {
                            ts.push(t)
                        }
                    }
                    None if c == 'D' => {
                        return err(format!("{tok} D (door) does not exist in Sextant"))
                    }
                    None => return err(format!("unknown argument to {tok}: {c}")),
                },
                _ => {
                    return err(format!(
                        "invalid argument '{a}' to {tok}: use letters f,d,l,b,c,p,s separated by commas"
                    ))
                }
            }
        }
        Ok(ts)
    }

    /// The instant DATE names (`-newerXt DATE`; see [`super::date`]).
    fn date(&self, pred: &str, date: &str) -> Result<Nanos, ParseError> {
        use super::date::Date;
        match super::date::parse(date) {
            Ok(Date::At(n)) => Ok(n),
            Ok(Date::Local(c, nanos)) => self
                .env
                .local_seconds(&c)
                .and_then(|s| Nanos::from_parts(s, nanos))
                .ok_or_else(|| ParseError(format!("{pred}: '{date}' is not a local time here"))),
            Err(e) => err(format!("{pred}: {e}")),
        }
    }

    /// The command of `-exec` and its kin, up to `;` or `{} +`.
    fn exec(&mut self, pred: &str) -> Result<Exec, ParseError> {
        let mut argv: Vec<String> = Vec::new();
        let batch = loop {
            let Some(a) = self.next() else {
                return err(format!("missing argument to '{pred}'"));
            };
            match a {
                ";" => break false,
                // `+` ends the command only right after a lone `{}`.
                "+" if argv.last().is_some_and(|l| l == "{}") => break true,
                _ => argv.push(a.to_string()),
            }
        };
        if argv.is_empty() || (batch && argv.len() == 1) {
            return err(format!("missing argument to '{pred}'"));
        }
        if batch && argv[..argv.len() - 1].iter().any(|a| a.contains("{}")) {
            return err(format!(
                "only one instance of {{}} is supported with {pred} ... +"
            ));
        }
        let (in_dir, ask) = (pred.ends_with("dir"), pred.starts_with("-ok"));
        if ask && batch {
            return err(format!(
                "{pred} ... + is not supported (find has only {pred} ... ;)"
            ));
        }
        let id = self.execs;
        self.execs += 1;
        Ok(Exec {
            argv,
            batch,
            in_dir,
            ask,
            id,
        })
    }

    fn action(&mut self, a: Action) -> Result<Node, ParseError> {
        self.has_action = true;
        Ok(Node::Action(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeEnv;
    impl Env for FakeEnv {
        fn now(&self) -> Nanos {
            Nanos(1_000_000 * 1_000_000_000)
        }
        fn day_start(&self) -> Nanos {
            Nanos(999_000 * 1_000_000_000)
        }
        fn uid_of(&self, user: &str) -> Option<u32> {
            (user == "alice").then_some(1000)
        }
        fn gid_of(&self, group: &str) -> Option<u32> {
            (group == "staff").then_some(50)
        }
    }

    fn p(s: &str) -> Result<Command, ParseError> {
        let args: Vec<String> = s.split_whitespace().map(String::from).collect();
        parse(&args, &FakeEnv)
    }

    fn name(n: &str) -> Node {
        Node::Test(Test::Pred(Pred::Name {
            pattern: n.as_bytes().into(),
            glob: true,
            ci: false,
        }))
    }

    fn and(a: Node, b: Node) -> Node {
        Node::And(Box::new(a), Box::new(b))
    }

    fn or(a: Node, b: Node) -> Node {
        Node::Or(Box::new(a), Box::new(b))
    }

    fn not(a: Node) -> Node {
        Node::Not(Box::new(a))
    }

    fn print() -> Node {
        Node::Action(Action::Print)
    }

    #[test]
    fn paths_then_expression_with_implicit_print() {
        let c = p("a b -name x").unwrap();
        assert_eq!(c.paths, vec!["a", "b"]);
        assert_eq!(c.expr, and(name("x"), print()));
        let c = p("").unwrap();
        assert_eq!(c.paths, vec!["."]);
        assert_eq!(c.expr, print());
        let c = p("-P d").unwrap();
        assert_eq!(c.paths, vec!["d"]);
    }

    #[test]
    fn precedence_and_binds_tighter_than_or() {
        // a -o b c  ==  a -o (b -a c)
        let c = p(". -name a -o -name b -name c").unwrap();
        assert_eq!(
            c.expr,
            and(or(name("a"), and(name("b"), name("c"))), print())
        );
        // ! binds tightest; explicit -a same as implicit.
        let c = p(". ! -name a -a -name b").unwrap();
        assert_eq!(c.expr, and(and(not(name("a")), name("b")), print()));
        let c = p(". -not ( -name a -or -name b )").unwrap();
        assert_eq!(c.expr, and(not(or(name("a"), name("b"))), print()));
        // Actions suppress the implicit -print; -prune does not.
        let c = p(". -name a -prune -o -print").unwrap();
        assert_eq!(
            c.expr,
            or(and(name("a"), Node::Action(Action::Prune)), print())
        );
        let c = p(". -name a -prune").unwrap();
        assert_eq!(
            c.expr,
            and(and(name("a"), Node::Action(Action::Prune)), print())
        );
        let c = p(". -name a , -name b").unwrap();
        assert_eq!(
            c.expr,
            and(
                Node::Comma(Box::new(name("a")), Box::new(name("b"))),
                print()
            )
        );
    }

    #[test]
    fn global_options() {
        let c = p(". -maxdepth 2 -name a -mindepth 1 -depth").unwrap();
        assert_eq!((c.min_depth, c.max_depth, c.depth_first), (1, 2, true));
        assert!(p(". -maxdepth -1").is_err());
        assert!(p(". -maxdepth").is_err());
    }

    #[test]
    fn size_units_round_up() {
        assert_eq!(size_range("0").unwrap(), Some((0, 0)));
        assert_eq!(size_range("1").unwrap(), Some((1, 512)));
        assert_eq!(size_range("2").unwrap(), Some((513, 1024)));
        assert_eq!(size_range("10c").unwrap(), Some((10, 10)));
        assert_eq!(size_range("+10c").unwrap(), Some((11, u64::MAX)));
        assert_eq!(size_range("-10c").unwrap(), Some((0, 9)));
        assert_eq!(size_range("-1k").unwrap(), Some((0, 0)));
        assert_eq!(size_range("1k").unwrap(), Some((1, 1024)));
        assert_eq!(size_range("+1M").unwrap(), Some((1_048_577, u64::MAX)));
        assert_eq!(size_range("-2G").unwrap(), Some((0, 1 << 30)));
        assert_eq!(size_range("3w").unwrap(), Some((5, 6)));
        assert_eq!(size_range("-0").unwrap(), None);
        assert!(size_range("1x").is_err());
        assert!(size_range("k").is_err());
        assert!(size_range("").is_err());
        assert!(size_range("+-1").is_err());
        // Overflow: nothing is that large.
        assert_eq!(size_range("+18446744073709551615G").unwrap(), None);
        assert!(p(". -size -0").unwrap().expr == and(Node::Test(Test::Const(false)), print()));
    }

    #[test]
    fn times_round_down_to_whole_units() {
        const D: i128 = 86_400 * 1_000_000_000;
        let now = Nanos(1_000_000 * 1_000_000_000);
        let age = |t: Nanos| (now.0 - t.0) as f64 / D as f64;
        let (lo, hi) = time_range("0", D, now).unwrap();
        assert_eq!(hi, now);
        assert!(age(lo) < 1.0 && age(Nanos(lo.0 - 1)) >= 1.0);
        let (lo, hi) = time_range("2", D, now).unwrap();
        assert!(age(hi) == 2.0 && age(lo) < 3.0 && age(Nanos(lo.0 - 1)) >= 3.0);
        let (lo, hi) = time_range("+1", D, now).unwrap();
        assert_eq!(lo, Nanos(i64::MIN));
        assert!(age(hi) > 2.0 && age(Nanos(hi.0 + 1)) <= 2.0);
        let (lo, hi) = time_range("-1", D, now).unwrap();
        assert_eq!(hi, Nanos(i64::MAX));
        assert!(age(lo) < 1.0 && age(Nanos(lo.0 - 1)) >= 1.0);
        // Younger than 0 days: only the future.
        assert_eq!(
            time_range("-0", D, now),
            Some((Nanos(now.0 + 1), Nanos(i64::MAX)))
        );
        assert!(p(". -mtime 1.5").is_err());
        // -daystart: ages from the end of today, for the tests after it.
        let t = |s: &str| match p(s).unwrap().expr {
            Node::And(a, _) => *a,
            other => other,
        };
        let today = Nanos(999_000 * 1_000_000_000);
        let end = Nanos(today.0 + D as i64);
        assert_eq!(
            t(". -daystart -mtime 0"),
            Node::and(
                Node::Test(Test::Const(true)),
                Node::Test(Test::Pred(Pred::Time {
                    which: TimeAttr::Mtime,
                    lo: Nanos(today.0 + 1),
                    hi: end
                }))
            )
        );
        let (lo, _) = time_range("0", D, now).unwrap();
        assert_eq!(
            t(". -mtime 0 -daystart"),
            Node::and(
                Node::Test(Test::Pred(Pred::Time {
                    which: TimeAttr::Mtime,
                    lo,
                    hi: now
                })),
                Node::Test(Test::Const(true))
            )
        );
        assert!(p(". -mmin x").is_err());
    }

    #[test]
    fn perm_forms() {
        assert_eq!(perm_arg("644").unwrap(), ('=', 0o644, 0o644));
        assert_eq!(perm_arg("-4000").unwrap(), ('-', 0o4000, 0o4000));
        assert_eq!(perm_arg("/111").unwrap(), ('/', 0o111, 0o111));
        assert_eq!(perm_arg("u+x").unwrap(), ('=', 0o100, 0o100));
        assert_eq!(perm_arg("-g=w,o=r").unwrap(), ('-', 0o024, 0o024));
        assert_eq!(perm_arg("/u=rwx,go=rx").unwrap(), ('/', 0o755, 0o755));
        assert_eq!(perm_arg("a+r").unwrap(), ('=', 0o444, 0o444));
        assert_eq!(perm_arg("+r").unwrap(), ('=', 0o444, 0o444));
        assert_eq!(perm_arg("u+s,o+t").unwrap(), ('=', 0o5000, 0o5000));
        assert_eq!(perm_arg("a+X").unwrap(), ('=', 0, 0o111));
        assert_eq!(perm_arg("u+x,a+X").unwrap(), ('=', 0o111, 0o111));
        assert_eq!(perm_arg("a=rwx,g-w").unwrap(), ('=', 0o757, 0o757));
        assert!(perm_arg("+644").is_err());
        assert!(perm_arg("8").is_err());
        assert!(perm_arg("17777").is_err());
        assert!(perm_arg("u+q").is_err());
        assert!(perm_arg("g=u").is_err());
        assert!(perm_arg("u").is_err());
    }

    #[test]
    fn numbers_users_types() {
        let t = |s: &str| match p(s).unwrap().expr {
            Node::And(a, _) => *a,
            other => other,
        };
        let pr = |x: Pred| Node::Test(Test::Pred(x));
        assert_eq!(
            t(". -links +1"),
            pr(Pred::Links {
                lo: 2,
                hi: u32::MAX
            })
        );
        assert_eq!(t(". -links -2"), pr(Pred::Links { lo: 0, hi: 1 }));
        assert_eq!(t(". -uid 5"), pr(Pred::Uid { lo: 5, hi: 5 }));
        assert_eq!(t(". -gid -0"), Node::Test(Test::Const(false)));
        assert_eq!(t(". -user alice"), pr(Pred::Uid { lo: 1000, hi: 1000 }));
        assert_eq!(t(". -user 77"), pr(Pred::Uid { lo: 77, hi: 77 }));
        assert_eq!(t(". -group staff"), pr(Pred::Gid { lo: 50, hi: 50 }));
        assert!(p(". -user bob").unwrap_err().0.contains("known user"));
        assert!(p(". -group nope").unwrap_err().0.contains("group"));
        assert_eq!(
            t(". -type f,d"),
            pr(Pred::Type(vec![FileType::Regular, FileType::Directory]))
        );
        assert!(p(". -type x").is_err());
        assert!(p(". -type fd").is_err());
        assert_eq!(
            t(". -xattr user.k=v=w"),
            pr(Pred::XattrEq(
                b"user.k".as_slice().into(),
                b"v=w".as_slice().into()
            ))
        );
        assert_eq!(
            t(". -newer ref"),
            Node::Test(Test::Newer {
                which: TimeAttr::Mtime,
                of: TimeAttr::Mtime,
                file: "ref".into()
            })
        );
        assert_eq!(
            t(". -newerca ref"),
            Node::Test(Test::Newer {
                which: TimeAttr::Ctime,
                of: TimeAttr::Atime,
                file: "ref".into()
            })
        );
        assert!(p(". -newerBm ref").unwrap_err().0.contains("birth"));
        assert!(p(". -newermx ref")
            .unwrap_err()
            .0
            .contains("unknown predicate"));
        assert_eq!(t(". -inum 42"), Node::Test(Test::Inum(42)));
        assert!(p(". -inum +42").is_err());
    }

    fn exec(argv: &[&str], batch: bool, in_dir: bool, ask: bool, id: usize) -> Node {
        Node::Action(Action::Exec(Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            batch,
            in_dir,
            ask,
            id,
        }))
    }

    #[test]
    fn commands_end_at_a_semicolon_or_at_braces_plus() {
        let c = p(". -exec echo a{}b ;").unwrap();
        assert_eq!(c.expr, exec(&["echo", "a{}b"], false, false, false, 0));
        // `+` ends the command only right after `{}`; an action: no -print.
        let c = p(". -name x -exec ls + {} + -execdir wc {} ;").unwrap();
        assert_eq!(
            c.expr,
            and(
                and(name("x"), exec(&["ls", "+", "{}"], true, false, false, 0)),
                exec(&["wc", "{}"], false, true, false, 1)
            )
        );
        let c = p(". -ok rm {} ; -o -okdir rm {} ;").unwrap();
        assert_eq!(
            c.expr,
            or(
                exec(&["rm", "{}"], false, false, true, 0),
                exec(&["rm", "{}"], false, true, true, 1)
            )
        );
        let e = |s: &str| p(s).unwrap_err().0;
        assert!(e(". -exec echo {}").contains("missing argument to '-exec'"));
        assert!(e(". -exec ;").contains("missing argument to '-exec'"));
        assert!(e(". -execdir {} +").contains("missing argument to '-execdir'"));
        assert!(e(". -exec echo {} {} +").contains("only one instance of {}"));
        assert!(e(". -ok echo {} +").contains("not supported"));
    }

    #[test]
    fn dates_and_quit() {
        let c = p(". -newerat @10").unwrap();
        assert_eq!(
            c.expr,
            and(
                Node::Test(Test::Pred(Pred::Time {
                    which: TimeAttr::Atime,
                    lo: Nanos(10_000_000_001),
                    hi: Nanos(i64::MAX),
                })),
                print()
            )
        );
        // FakeEnv reads local times as UTC.
        let c = p(". -newermt 1970-01-02").unwrap();
        assert_eq!(
            c.expr,
            and(
                Node::Test(Test::Pred(Pred::Time {
                    which: TimeAttr::Mtime,
                    lo: Nanos(86_400_000_000_001),
                    hi: Nanos(i64::MAX),
                })),
                print()
            )
        );
        let e = p(". -newermt yesterday").unwrap_err().0;
        assert!(
            e.starts_with("-newermt: unrecognised date 'yesterday'"),
            "{e}"
        );
        // -quit is an action: no implicit -print.
        let c = p(". -name a -quit").unwrap();
        assert_eq!(c.expr, and(name("a"), Node::Action(Action::Quit)));
    }

    #[test]
    fn delete_turns_on_depth_and_refuses_prune_without_it() {
        let c = p(". -name x -delete").unwrap();
        assert!(c.depth_first);
        assert_eq!(c.expr, and(name("x"), Node::Action(Action::Delete)));
        let e = p(". -name x -prune -o -delete").unwrap_err().0;
        assert!(e.contains("-prune does nothing"), "{e}");
        assert!(p(". -depth -name x -prune -o -delete").is_ok());
    }

    #[test]
    fn errors_name_the_culprit() {
        let e = |s: &str| p(s).unwrap_err().0;
        assert_eq!(e(". -foo"), "unknown predicate '-foo'");
        assert!(e(". -fprint").contains("missing argument to '-fprint'"));
        assert!(e(". -fprintf f").contains("missing argument to '-fprintf'"));
        assert!(e(". -regextype perl").contains("unknown regular expression type 'perl'"));
        assert!(e(". -regex \\(a\\)\\1").contains("back-references"));
        assert!(e(". -newermt 2020").contains("unrecognised date '2020'"));
        assert!(e(". -newertm f").contains("unknown predicate '-newertm'"));
        assert!(e(". -newermm").contains("missing argument"));
        assert!(e(". -readable x").contains("paths must precede"));
        assert!(e(". -name").contains("missing argument to '-name'"));
        assert!(e(". ( -name a").contains("without a matching ')'"));
        assert!(e(". -name a )").contains("without a matching '('"));
        assert!(e(". ( )").contains("empty parentheses"));
        assert!(e(". -o -name a").contains("'-o' with nothing before it"));
        assert!(e(". -name a -o").contains("after '-o'"));
        assert!(e(". !").contains("after '!'"));
        assert_eq!(
            e(". -name a b"),
            "paths must precede expression: 'b' (possible unquoted pattern after '-name'?)"
        );
        assert_eq!(e(". -type f b"), "paths must precede expression: 'b'");
        assert!(e("-L .").contains("'-L' is not supported"));
        assert!(e(". -printf %Q").contains("%Q"));
    }

    /// Tokens find command lines are made of, with values that sit at the
    /// edges of what the numeric and mode parsers accept.
    const VOCABULARY: &[&str] = &[
        ".",
        "/",
        "(",
        ")",
        "!",
        ",",
        "-a",
        "-o",
        "-and",
        "-or",
        "-not",
        "-name",
        "-iname",
        "-path",
        "-ipath",
        "-regex",
        "-iregex",
        "-type",
        "-xtype",
        "-size",
        "-mtime",
        "-mmin",
        "-atime",
        "-amin",
        "-ctime",
        "-cmin",
        "-newer",
        "-newermt",
        "-newerat",
        "-newercm",
        "-user",
        "-group",
        "-uid",
        "-gid",
        "-nouser",
        "-nogroup",
        "-perm",
        "-links",
        "-inum",
        "-samefile",
        "-empty",
        "-true",
        "-false",
        "-prune",
        "-quit",
        "-print",
        "-print0",
        "-printf",
        "-fprintf",
        "-ls",
        "-fls",
        "-delete",
        "-exec",
        "-execdir",
        "-ok",
        ";",
        "+",
        "{}",
        "-maxdepth",
        "-mindepth",
        "-depth",
        "-xdev",
        "-mount",
        "-daystart",
        "-fstype",
        "f,d",
        "f,",
        "x",
        "0",
        "-0",
        "+0",
        "1k",
        "-1k",
        "+18446744073709551615",
        "99999999999999999999",
        "-9223372036854775808",
        "1e",
        "u+s",
        "g=rwx,o-w",
        "-4000",
        "/222",
        "%p\\n",
        "%Tq",
        "%",
        "\\",
        "alice",
        "staff",
        "2026-11-25 12:00",
        "@1700000000",
        "1970-01-01T00:00:00Z",
        "*",
        "[",
        "[!a-",
        "\\",
    ];

    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => proptest::sample::select(VOCABULARY).prop_map(String::from),
            1 => "[-+]?[0-9]{0,21}[bcwkMG]?",
            1 => "\\PC{0,6}",
        ]
    }

    use proptest::prelude::*;

    proptest! {
        /// Any command line parses or is refused with an error: never a
        /// panic (overflowing numbers, empty types, unbalanced
        /// parentheses, actions missing their arguments).
        #[test]
        fn any_command_line_parses_or_errs(args in proptest::collection::vec(token(), 0..12)) {
            let _ = parse(&args, &FakeEnv);
        }
    }
}
