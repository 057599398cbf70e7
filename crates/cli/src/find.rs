//! `sextant find` and `sextant stats`: GNU find's command line, answered by
//! Sextant's search instead of a crawl.
//!
//! - [`parse`]: the command line (pure, unit-tested);
//! - [`plan`]: server filters and the exact client-side evaluation;
//! - [`printf`]: `-printf` and `-ls` output;
//! - [`mounts`]: paths under a `sextant mount` → namespace paths;
//! - [`names`]: users, groups, the clock; [`sink`]: output;
//! - [`stats`]: `sextant stats`.
//!
//! Per starting point: (1) the starting point itself (depth 0) is fetched
//! and evaluated here, as find names it as typed; (2) the truth of opaque
//! tests (`-empty` on directories, xattrs) is fetched by extra queries;
//! (3) when the expression can `-prune`, the directories where it would
//! prune are fetched and evaluated, and nothing below them is reported (a
//! pruned directory stops descent in find, so its descendants are never
//! evaluated: dropping every hit with a pruned ancestor is exactly that);
//! (4) the main query streams the entries that may print, and the
//! expression runs on each, actions in order; (5) for a non-root caller,
//! the visible directories it cannot list are reported `Permission
//! denied` (exit status 1), as find reports the directories it fails to
//! open. Output order is the server's, not find's traversal order: compare
//! sorted.
//!
//! Invariants: nothing is printed for an entry GNU find would not print
//! (the client decides every test exactly; the server's filters only
//! over-approximate), and every entry find would print reaches the client
//! (the filters are implied by "some output action runs").

mod date;
mod exec;
pub(crate) mod mounts;
pub(crate) mod names;
pub mod parse;
mod plan;
pub mod printf;
mod regex;
mod sink;
mod stats;

pub use stats::{du, stats, StatsArgs, STATS_HELP};

use crate::session::{Session, Target};
use crate::Cli;
use anyhow::{bail, Context, Result};
use futures::StreamExt;
use names::{now, Names, RealEnv, Seen};
use parse::{Action, ClientTest, Command, Node, Test};
use plan::{Blind, Filters, Opaque, Subject, Tree};
use sextant_client::Error;
use sextant_engine::bloom::TimeAttr;
use sextant_engine::search::{Expr, Pred, SearchHit};
use sextant_proto::search::{SearchScope, SearchSpec};
use sextant_types::{Attr, FileType, FsError, Nanos};
use sink::{needs_inode, needs_link, needs_target, Output, Sink};
use std::collections::{HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Shown by `sextant find --help`.
pub const FIND_HELP: &str = "\
GNU find's syntax and semantics, answered from Sextant's indexes: the same
expression prints the same set of lines as GNU find on the mounted tree
(order aside: results come in the server's order, not traversal order).

PATH is a path under a `sextant mount` mount point (results carry the prefix
you typed, as with find) or an absolute path in the namespace. Global flags
(--json, --server, ...) go before PATH.

Tests:     -name -iname -path -ipath -wholename -iwholename GLOB
           -type f,d,l,b,c,p,s   -user U  -group G  -uid N  -gid N
           -size N[bcwkMG]  -empty  -links N  -inum N  -samefile F
           -perm MODE|-MODE|/MODE (octal or symbolic, e.g. u+x,g=w)
           -mtime -atime -ctime N (days)   -mmin -amin -cmin N (minutes)
           -newer F  -anewer F  -cnewer F  -newerXY F (X, Y in a, c, m)
           -newerXt DATE (X in a, c, m; DATE: YYYY-MM-DD[ HH:MM[:SS[.F]]]
           local time, or with Z / UTC / +HH:MM, or @SECONDS)
           -true  -false  -nouser  -nogroup
           -readable  -writable  -executable (by permission bits)
           -lname GLOB  -ilname GLOB  -xtype C (the type a symlink leads to)
           -fstype TYPE (a mount's type as the kernel records it: fuse.sextant,
           or fuse for root's own mount; sextant for a namespace path)
           -regex RE  -iregex RE (the whole path; -regextype emacs (default),
           posix-basic, posix-extended, egrep, ...; a path that is not UTF-8
           is matched byte by byte, as find does in the C locale; decided by
           the client: the server narrows only by the literal text a -regex
           ends with, as in '.*\\.c', so add -name where it does not)
           N is n (exactly), +n (more than) or -n (less than), with find's
           rounding: -size rounds up to the unit (-size -1k: empty files),
           -mtime n means n whole days old (-mtime +1: at least 2 days).
Options:   -maxdepth N  -mindepth N  -depth  -daystart (-xdev -mount -noleaf:
           no-ops)
Operators: ( EXPR )  ! EXPR  -not EXPR  EXPR -a EXPR (or just adjacent)
           EXPR -o EXPR  EXPR , EXPR
Actions:   -print  -print0  -ls  -prune
           -printf FORMAT  (%p %f %h %P %H %s %m %M %u %g %U %G %n %i %y %Y %d
           %l %b %k %F %a %c %t %A@ %C@ %T@ %Ak %Ck %Tk (strftime k), width
           and precision like %-10p %.3f; escapes \\n \\t \\0 \\\\ \\NNN \\c)
           -exec CMD {} ;   -exec CMD {} +   -ok CMD {} ;
           -execdir / -okdir (the same, in the entry's directory on ./NAME:
           starting points under a mount only)
           -delete (turns on -depth; entries are removed deepest first,
           under a mount through the mount, else by requests to the server)
           -quit (stop at the first entry that reaches it, in the server's
           order)
           -fprint FILE  -fprint0 FILE  -fprintf FILE FORMAT  -fls FILE
Sextant extensions (not in GNU find):
           -xattr KEY        has the extended attribute KEY
           -xattr KEY=VALUE  ... with exactly that value
Refused (with a message, never ignored): -L -H -follow,
back-references in -regex, dates other than the forms above (\"2 days
ago\"), and a -prune that depends on the exit status of -exec ... ; or -ok
(the pruned directories are found before the commands run).
Inode numbers (-inum, %i, the first column of -ls): under a mount, the
numbers the mount shows (st_ino, read from the mount: node ids it assigns
as it meets files, its own, not kept across mounts); on a namespace path,
the SOID (a 128-bit number), the only number a file has there.
Differences: %b/%k are derived from the size; -ls columns have fixed
widths; output comes in the server's order, not find's traversal order (so
-quit stops at another first entry, and -exec ... + batches hold the same
paths in another order).
Permissions, as find run by the caller: a directory it cannot read is
reported 'Permission denied' (exit status 1). One it may read but not
search (r without x) is listed by name, as find lists it: the names, and
for what is not a directory its type and inode number; a directory in it
is reported (it cannot be entered), and tests or -printf directives that
need more (size, owner, times, -ls, ...) are false and report the entry,
as find's failed stat does.
Reference files (-newer F, -samefile F) are resolved like PATH; a -newer
file that is in neither the namespace nor a mount is read locally.

Examples:
  sextant find /mnt/sextant/proj -name '*.c' -size +100k
  sextant find /proj -user alice -mtime -7 -printf '%s %p\\n'
  sextant find /mnt/sextant -path '*/.git' -prune -o -type f -print0 | xargs -0 ls
  sextant --json find /proj -newer /proj/stamp -type f
  sextant find /proj -xattr user.project=apollo
  sextant find /mnt/sextant/src -name '*.c' -exec grep -l TODO {} +
  sextant find /proj/build -name '*.o' -mtime +30 -delete
Exit status: 0 if all went well, 1 after any error (e.g. a missing PATH).";

#[derive(clap::Args, Debug)]
pub struct FindArgs {
    /// Starting points, then the expression (see below).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PATH... EXPRESSION"
    )]
    pub args: Vec<String>,
}

/// `No such file or directory` (find's capitalisation).
fn describe(e: &Error) -> String {
    let s = match e {
        Error::Fs(f) => f.to_string(),
        other => other.to_string(),
    };
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => s,
    }
}

// ---- one run ---------------------------------------------------------------------

/// Everything a run shares.
struct Run<'a> {
    s: &'a Session,
    cwd: PathBuf,
    mounts: Vec<mounts::Mount>,
    cmd: &'a Command,
    /// Shared, so that an entry's evaluation can hold it while actions
    /// change the rest of the run.
    tree: std::rc::Rc<Tree>,
    filters: Filters,
    /// The tree and filters for a starting point under a mount, when they
    /// differ from [`Run::tree`]'s (`-inum` compares the mount's inode
    /// numbers there, not SOIDs); swapped in for such starting points.
    local_variant: Option<(std::rc::Rc<Tree>, Filters)>,
    /// Inode numbers are printed or tested (`%i`, `-ls`, `-inum`): under a
    /// mount each entry's is read from the mount (`lstat`).
    needs_ino: bool,
    names: Names,
    now: Nanos,
    /// Some error was reported (exit status 1).
    failed: bool,
    /// The expression has -readable/-writable/-executable or -xtype
    /// (symlink hits then need their targets).
    follows_links: bool,
    /// The expression has -lname/-ilname (symlink hits then need their
    /// contents).
    uses_lname: bool,
    /// `-exec` and its kin: their batches and failures.
    commands: exec::Commands,
    /// The expression has `-execdir` or `-okdir` (local paths only).
    runs_in_dirs: bool,
    /// The expression has `-delete`: entries are visited deepest first.
    deletes: bool,
    /// The current starting point is under a mount: printed paths are
    /// local paths.
    local: bool,
    /// Namespace directories by path, for `-delete` of hard-linked files
    /// (whose primary parent may be another directory).
    parents: HashMap<Vec<u8>, sextant_types::Soid>,
    /// Namespace directories `-delete` removed something from, not yet
    /// visited: `-empty` is decided afresh for them.
    emptied: HashSet<Vec<u8>>,
    /// No action follows `-delete` (its value is never used), so removals
    /// in the namespace may be in flight together, [`DELETES_IN_FLIGHT`]
    /// at most (one at a time each waits for its own journal sync).
    pipelined: bool,
    /// Removals in flight: (printed path, namespace parent, outcome).
    removing: futures::stream::FuturesUnordered<Removing<'a>>,
    /// `-quit` ran: nothing more is visited.
    quit: bool,
    /// The current starting point's file system type (`-fstype`, `%F`):
    /// its mount's, else `sextant`.
    fstype: std::rc::Rc<str>,
    /// The last starting point's SOID, as its depth-0 search (step (1) of
    /// [`Run::start_at`]) found it (`None`: clamped to a client key's
    /// subtree, or not found): the later searches of that starting point
    /// start there, so its path is resolved once per starting point, not
    /// once per search (on a cluster each resolution is a walk across the
    /// servers, BENCHMARKS "Search across servers: one resolution").
    scope_root: Option<sextant_types::Soid>,
    /// The next starting point's SOID when the caller resolved its path
    /// already (`sextant stats` and `du` on a cluster): its depth-0 search
    /// starts there instead of resolving the path again. Taken by
    /// [`Run::start_at`].
    known_root: Option<sextant_types::Soid>,
}

/// A removal in flight: (printed path, namespace parent path, outcome).
type Removing<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = (Vec<u8>, Vec<u8>, Result<(), String>)> + 'a>,
>;

/// One entry of a listing ([`Run::list`]).
struct Listed {
    name: Vec<u8>,
    ftype: FileType,
    /// From the server's listing.
    soid: Option<sextant_types::Soid>,
    /// From the mount's (`d_ino`).
    ino: Option<u64>,
}

/// Entries asked for per readdir request of [`Run::list`].
const LIST_BATCH: usize = 1024;

/// Namespace removals of one `find -delete` in flight at most (as `sextant
/// rm -r`'s: enough to fill the server's group commits).
const DELETES_IN_FLIGHT: usize = 64;

/// The command whose messages these are (`find`, `stats` or `du`; set
/// once by the command that runs).
static COMMAND: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

fn report(msg: impl std::fmt::Display) {
    let command = COMMAND.get().copied().unwrap_or("find");
    eprintln!("sextant {command}: {msg}");
}

/// True (and reported) when `typed` is under a mount the caller may not
/// enter (made without allow_other, by another user): GNU find on it is
/// refused at the starting point, so `sextant find`, `stats` and `du` are
/// too — the server would answer by namespace permissions alone.
fn refused_by_mount(typed: &str, loc: &mounts::Located) -> bool {
    if loc.mount.is_none() {
        return false;
    }
    match std::fs::symlink_metadata(typed) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            report(format_args!("'{typed}': Permission denied"));
            true
        }
        _ => false,
    }
}

/// Collects every hit of `expr` under `scope`.
async fn collect(
    s: &Session,
    scope: SearchScope,
    expr: Expr,
    limit: u64,
) -> Result<Vec<SearchHit>, Error> {
    if expr == Expr::False {
        return Ok(Vec::new());
    }
    let mut spec = SearchSpec::new(scope, expr);
    spec.limit = limit;
    let mut h = s.search(&spec).await?;
    let mut all = Vec::new();
    while let Some(b) = h.next_batch().await? {
        all.extend(b);
    }
    Ok(all)
}

fn depth(min: u32, max: u32) -> Expr {
    if min > max {
        Expr::False
    } else {
        Expr::Pred(Pred::Depth { min, max })
    }
}

/// Is the namespace path `path` strictly below `dir` (component-wise;
/// `false` when `dir` has `.` or `..` components)?
fn strictly_below(path: &[u8], dir: &[u8]) -> bool {
    let comps = |p: &[u8]| -> Vec<Vec<u8>> {
        p.split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let (p, d) = (comps(path), comps(dir));
    if d.iter().any(|c| c == b"." || c == b"..") {
        return false;
    }
    p.len() > d.len() && p.starts_with(&d)
}

/// The name `-name` sees for a typed starting point: its last component,
/// trailing slashes removed (`/` stays `/`).
fn typed_name(typed: &[u8]) -> &[u8] {
    let b = printf::base_name(typed);
    let mut end = b.len();
    while end > 1 && b[end - 1] == b'/' {
        end -= 1;
    }
    &b[..end]
}

/// The path find would print for `hit` under starting point `typed`
/// (namespace path `root`).
fn printed(typed: &[u8], root: &[u8], hit: &SearchHit) -> Vec<u8> {
    if hit.depth == 0 {
        return typed.to_vec();
    }
    let rel: &[u8] = if root == b"/" {
        &hit.path
    } else {
        hit.path.strip_prefix(root).unwrap_or(&hit.path)
    };
    let mut p = typed.to_vec();
    if p.ends_with(b"/") {
        p.extend_from_slice(rel.strip_prefix(b"/").unwrap_or(rel));
    } else {
        p.extend_from_slice(rel);
    }
    p
}

/// Directories `cred` (not root) may not list (read and search), in
/// `check_access`'s terms: exactly one class applies (owner, else group,
/// else other) and it must have r and x.
fn fold_not_listable(cred: &sextant_types::Credentials) -> Expr {
    use sextant_engine::search::PermMatch;
    let owner = Expr::Pred(Pred::Uid {
        lo: cred.uid,
        hi: cred.uid,
    });
    let mut gids: Vec<u32> = cred.groups.clone();
    gids.push(cred.gid);
    gids.sort_unstable();
    gids.dedup();
    let group = Expr::Or(
        gids.into_iter()
            .map(|g| Expr::Pred(Pred::Gid { lo: g, hi: g }))
            .collect(),
    );
    let all = |m: u16| Expr::Pred(Pred::Perm(PermMatch::All(m)));
    let listable = Expr::Or(vec![
        Expr::And(vec![owner.clone(), all(0o500)]),
        Expr::And(vec![Expr::not(owner.clone()), group.clone(), all(0o050)]),
        Expr::And(vec![Expr::not(owner), Expr::not(group), all(0o005)]),
    ]);
    Expr::not(listable)
}

fn has_pruned_ancestor(path: &[u8], root: &[u8], pruned: &HashSet<Vec<u8>>) -> bool {
    if path.len() <= 1 {
        return false;
    }
    let mut end = path.len();
    while let Some(i) = path[..end].iter().rposition(|&c| c == b'/') {
        let prefix: &[u8] = if i == 0 { b"/" } else { &path[..i] };
        if prefix.len() < root.len() {
            return false;
        }
        if pruned.contains(prefix) {
            return true;
        }
        if i == 0 {
            return false;
        }
        end = i;
    }
    false
}

impl<'a> Run<'a> {
    /// A run of `cmd` with nothing resolved yet (the expression as parsed,
    /// no filters): what the expression needs is read off it here.
    fn new(
        s: &'a Session,
        cwd: PathBuf,
        mounts: Vec<mounts::Mount>,
        cmd: &'a Command,
        now: Nanos,
    ) -> Run<'a> {
        let mut run = Run {
            s,
            cwd,
            mounts,
            cmd,
            tree: std::rc::Rc::new(cmd.expr.clone()),
            filters: Filters {
                out: Expr::False,
                prune: Expr::False,
                opaque: Vec::new(),
            },
            local_variant: None,
            needs_ino: needs_inode(&cmd.expr),
            names: Names::default(),
            now,
            failed: false,
            follows_links: false,
            uses_lname: false,
            commands: exec::Commands::default(),
            runs_in_dirs: false,
            deletes: false,
            local: false,
            parents: HashMap::new(),
            emptied: HashSet::new(),
            quit: false,
            fstype: "sextant".into(),
            pipelined: false,
            removing: Default::default(),
            scope_root: None,
            known_root: None,
        };
        cmd.expr.for_each_leaf(&mut |n| match n {
            Node::Test(Test::Client(ClientTest::Access(_) | ClientTest::XType(_))) => {
                run.follows_links = true
            }
            Node::Test(Test::Client(ClientTest::LinkName { .. })) => run.uses_lname = true,
            Node::Action(Action::Exec(e)) if e.in_dir => run.runs_in_dirs = true,
            Node::Action(Action::Delete) => run.deletes = true,
            Node::Test(Test::Inum(_)) => run.needs_ino = true,
            _ => {}
        });
        run.pipelined = run.deletes && plan::nothing_follows_delete(&cmd.expr);
        run
    }

    /// Resolves `-newer F` and `-samefile F` as find does: F is located
    /// like a starting point; a `-newer` file outside Sextant is read
    /// locally.
    async fn resolve_ref(&self, file: &str, local_ok: bool) -> Result<Attr> {
        let loc = mounts::locate(file, &self.cwd, &self.mounts);
        if let Ok(l) = &loc {
            match self.s.resolve_raw(&l.ns, false).await {
                Ok(a) => return Ok(a),
                Err(e) if e.fs() == Some(FsError::NotFound) && l.mount.is_none() && local_ok => {}
                Err(e) => bail!("'{file}': {}", describe(&e)),
            }
        }
        if local_ok {
            let m = std::fs::symlink_metadata(file)
                .map_err(|e| anyhow::anyhow!("'{file}': {}", describe_io(&e)))?;
            return Ok(local_attr(&m));
        }
        match loc {
            Ok(_) => bail!("'{file}': No such file or directory"),
            Err(e) => bail!("'{file}': {e}"),
        }
    }

    /// What a symlink hit resolves to, when access tests, -xtype or `%Y`
    /// need it: under a mount as the kernel follows it from the printed
    /// path `shown` (an absolute target may leave the mount, as for
    /// find), else in the namespace.
    async fn link_target(
        &self,
        hit: &SearchHit,
        shown: &[u8],
        for_printf: bool,
    ) -> Option<Result<Attr, Error>> {
        if !(self.follows_links || for_printf) || hit.attr.ftype != FileType::Symlink {
            return None;
        }
        if self.local {
            let followed = std::fs::metadata(std::ffi::OsStr::from_bytes(shown));
            return Some(followed.map(|m| local_attr(&m)).map_err(|e| {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                Error::Fs(FsError::from_errno(errno).unwrap_or(FsError::Io))
            }));
        }
        Some(self.s.resolve_raw(&hit.path, true).await)
    }

    /// The inode number the mount shows for the local path `shown`
    /// (`lstat`), when the expression needs one (else `None`: the SOID
    /// serves). A failure is reported as find reports an entry it cannot
    /// `stat` (exit status 1), and the entry is skipped (`Err`).
    fn local_ino(&mut self, shown: &[u8]) -> Result<Option<u128>, ()> {
        if !(self.local && self.needs_ino) {
            return Ok(None);
        }
        use std::os::unix::fs::MetadataExt;
        match std::fs::symlink_metadata(std::ffi::OsStr::from_bytes(shown)) {
            Ok(m) => Ok(Some(u128::from(m.ino()))),
            Err(e) => {
                report(format_args!(
                    "'{}': {}",
                    String::from_utf8_lossy(shown),
                    describe_io(&e)
                ));
                self.failed = true;
                Err(())
            }
        }
    }

    /// Runs the expression on one entry and writes what its actions print.
    /// `blind`: the entry is known from its directory's listing only (see
    /// [`Blind`]).
    async fn visit(
        &mut self,
        typed: &[u8],
        root: &[u8],
        hit: &SearchHit,
        opaque: &mut Opaque,
        sink: &mut dyn Sink,
        blind: Option<&Blind>,
    ) {
        // Visited after its contents: emptied by -delete, it is empty now.
        if self.deletes
            && self.emptied.remove(&hit.path[..])
            && opaque.tests_empty()
            && matches!(self.s.readdir(hit.soid, 0, 1).await, Ok(v) if v.is_empty())
        {
            opaque.mark_empty(&hit.path);
        }
        let opaque = &*opaque;
        let shown = printed(typed, root, hit);
        let name: &[u8] = if hit.depth == 0 {
            typed_name(typed)
        } else {
            hit.name()
        };
        let ino = match blind {
            Some(b) => b.ino.map(u128::from),
            None => match self.local_ino(&shown) {
                Ok(i) => i,
                Err(()) => return,
            },
        };
        let wants_link = sink.needs_link() || self.uses_lname;
        let link = if blind.is_none() && wants_link && hit.attr.ftype == FileType::Symlink {
            match self.s.readlink(hit.soid).await {
                Ok(t) => Some(t),
                Err(e) => {
                    report(format_args!(
                        "'{}': {}",
                        String::from_utf8_lossy(&shown),
                        describe(&e)
                    ));
                    self.failed = true;
                    None
                }
            }
        } else {
            None
        };
        let subject = Subject {
            hit,
            printed: &shown,
            name,
            blind,
        };
        let target = match blind {
            Some(_) => None,
            None => self.link_target(hit, &shown, sink.needs_target()).await,
        };
        let follow_type = target.as_ref().map(|t| match t {
            Ok(a) => printf::type_letter(a.ftype),
            Err(e) if e.fs() == Some(FsError::NotFound) => b'N',
            Err(e) if e.fs() == Some(FsError::Loop) => b'L',
            Err(_) => b'?',
        });
        let user = self.names.user(hit.attr.uid);
        let group = self.names.group(hit.attr.gid);
        let fstype = std::rc::Rc::clone(&self.fstype);
        let facts = printf::Facts {
            path: &shown,
            start: typed,
            depth: hit.depth,
            attr: &hit.attr,
            ino: ino.unwrap_or_else(|| hit.soid.as_u128()),
            link: link.as_deref(),
            follow_type,
            user: &user,
            group: &group,
            fstype: &fstype,
        };
        let now = self.now;
        let seen = Seen {
            target: followed(target.as_ref()),
            link: link.as_deref(),
            fstype: &fstype,
            ino,
        };
        let tree = std::rc::Rc::clone(&self.tree);
        let mut eval = plan::Eval::new(&tree);
        loop {
            let (names, cred) = (&mut self.names, &self.s.cred);
            let Some(a) = eval.next_action(&subject, opaque, &mut |t, h| {
                names.decide(t, h, cred, &seen)
            }) else {
                break;
            };
            let value = match a {
                // What find cannot print without stat: nothing, false.
                _ if blind.is_some_and(|b| sink.needs_stat(a, b.typed)) => {
                    blind.is_some_and(Blind::stat_needed)
                }
                // find's -prune looks at the type with stat, unless -depth
                // makes it a no-op.
                Action::Prune if blind.is_some() && !self.cmd.depth_first => {
                    blind.is_some_and(Blind::stat_needed)
                }
                Action::Exec(e) => {
                    sink.flush();
                    self.commands.run(e, &shown, &|m| report(m))
                }
                Action::Delete => self.delete(hit, &shown).await,
                Action::Quit => {
                    self.quit = true;
                    break;
                }
                _ => {
                    sink.action(a, &facts, hit, now);
                    true
                }
            };
            eval.resume(value);
        }
        if self.names.take_loop() {
            sink.flush();
            report(format_args!(
                "'{}': Too many levels of symbolic links",
                String::from_utf8_lossy(&shown)
            ));
            self.failed = true;
        }
        // A directory's failure was reported when it was listed.
        if blind.is_some_and(|b| b.typed && b.stat_failed()) {
            sink.flush();
            report(format_args!(
                "'{}': Permission denied",
                String::from_utf8_lossy(&shown)
            ));
            self.failed = true;
        }
        sink.end_entry();
    }

    /// `-delete` of `hit`, printed as `shown`: through the local path
    /// under a mount, else by a request to the server — in flight beside
    /// others when its value is not used ([`Run::pipelined`]; then it
    /// counts as true, and a failure is reported when it ends). Failures
    /// are reported as find reports them (exit status 1).
    async fn delete(&mut self, hit: &SearchHit, shown: &[u8]) -> bool {
        // As find: the starting point `.` is never removed.
        if shown == b"." {
            return true;
        }
        let parent_path = hit.dir().to_vec();
        let dir = hit.attr.ftype == FileType::Directory;
        let removal: std::pin::Pin<Box<dyn std::future::Future<Output = _> + 'a>> = if self.local {
            // Through the mount (which also removes a file's data), on a
            // blocking thread when in flight beside others.
            let p = PathBuf::from(std::ffi::OsStr::from_bytes(shown));
            let remove = move || {
                let r = if dir {
                    std::fs::remove_dir(&p)
                } else {
                    std::fs::remove_file(&p)
                };
                r.map_err(|e| describe_io(&e))
            };
            if !self.pipelined {
                return self.deleted(shown, parent_path, remove());
            }
            Box::pin(async move {
                match tokio::task::spawn_blocking(remove).await {
                    Ok(r) => r,
                    Err(e) => Err(e.to_string()),
                }
            })
        } else if hit.soid == sextant_types::Soid::ROOT {
            return self.deleted(shown, parent_path, Err("Device or resource busy".into()));
        } else {
            // The primary link's directory is this path's unless the file
            // has other links.
            let parent = if dir || hit.attr.nlink <= 1 {
                hit.attr.parent
            } else if let Some(&p) = self.parents.get(&parent_path) {
                p
            } else {
                match self.s.resolve_raw(&parent_path, false).await {
                    Ok(a) => {
                        self.parents.insert(parent_path.clone(), a.soid);
                        a.soid
                    }
                    Err(e) => return self.deleted(shown, parent_path, Err(describe(&e))),
                }
            };
            let (s, name) = (self.s, hit.name().to_vec());
            Box::pin(async move {
                let r = if dir {
                    s.rmdir(parent, &name).await
                } else {
                    s.unlink(parent, &name).await
                };
                r.map(|_| ()).map_err(|e| describe(&e))
            })
        };
        if !self.pipelined {
            let r = removal.await;
            return self.deleted(shown, parent_path, r);
        }
        let shown = shown.to_vec();
        self.removing
            .push(Box::pin(async move { (shown, parent_path, removal.await) }));
        while self.removing.len() >= DELETES_IN_FLIGHT {
            self.settle_one().await;
        }
        true
    }

    /// The outcome of a removal of the entry printed as `shown` from the
    /// namespace directory `parent_path`; the action's value.
    fn deleted(&mut self, shown: &[u8], parent_path: Vec<u8>, r: Result<(), String>) -> bool {
        match r {
            Ok(()) => {
                self.emptied.insert(parent_path);
                true
            }
            Err(why) => {
                report(format_args!(
                    "cannot delete '{}': {why}",
                    String::from_utf8_lossy(shown)
                ));
                self.failed = true;
                false
            }
        }
    }

    /// Waits for one removal in flight.
    async fn settle_one(&mut self) {
        if let Some((shown, parent_path, r)) = self.removing.next().await {
            self.deleted(&shown, parent_path, r);
        }
    }

    /// Waits for every removal in flight (before a directory above them
    /// is visited).
    async fn settle_all(&mut self) {
        while !self.removing.is_empty() {
            self.settle_one().await;
        }
    }

    /// One starting point: under a mount with [`Run::local_variant`]
    /// swapped in, if any.
    async fn start(&mut self, typed: &str, sink: &mut dyn Sink) -> Result<(), Error> {
        let local = matches!(
            mounts::locate(typed, &self.cwd, &self.mounts),
            Ok(mounts::Located { mount: Some(_), .. })
        );
        let swap = local && self.local_variant.is_some();
        if swap {
            self.swap_variant();
        }
        let r = self.start_at(typed, sink).await;
        if swap {
            self.swap_variant();
        }
        r
    }

    fn swap_variant(&mut self) {
        if let Some((tree, filters)) = &mut self.local_variant {
            std::mem::swap(&mut self.tree, tree);
            std::mem::swap(&mut self.filters, filters);
        }
    }

    async fn start_at(&mut self, typed: &str, sink: &mut dyn Sink) -> Result<(), Error> {
        let loc = match mounts::locate(typed, &self.cwd, &self.mounts) {
            Ok(l) => l,
            Err(e) => {
                report(format_args!("'{typed}': {e}"));
                self.failed = true;
                return Ok(());
            }
        };
        if refused_by_mount(typed, &loc) {
            self.failed = true;
            return Ok(());
        }
        self.local = loc.mount.is_some();
        self.fstype = loc
            .mount
            .as_ref()
            .map_or_else(|| "sextant".into(), |m| m.fstype.as_str().into());
        if self.runs_in_dirs && !self.local {
            report(format_args!(
                "'{typed}': -execdir and -okdir need a starting point under a Sextant \
                 mount (they run the command in the entry's directory)"
            ));
            self.failed = true;
            return Ok(());
        }
        let (min, max) = (self.cmd.min_depth, self.cmd.max_depth);
        let ns = loc.ns.clone();
        // (1) The starting point.
        self.scope_root = None;
        let first = match self.known_root.take() {
            Some(soid) => SearchScope::Soid(soid),
            None => SearchScope::Path(ns.clone()),
        };
        let root_hit = match collect(self.s, first, depth(0, 0), 1).await?.pop() {
            Some(h) => h,
            None => return Err(Error::Fs(FsError::NotFound)),
        };
        let root = root_hit.path.to_vec();
        // A client key limited to a subtree: the server searches a
        // starting point above it as the subtree itself. Say so, and
        // print the subtree's own paths (not paths under `typed` that do
        // not exist).
        let clamped = loc.mount.is_none() && strictly_below(&root, &ns);
        if clamped {
            report(format_args!(
                "'{typed}': searched {} only (the client key is limited to it)",
                String::from_utf8_lossy(&root)
            ));
        }
        let tb: &[u8] = if clamped { &root } else { typed.as_bytes() };
        // The later searches start at the object (1) found, as find goes
        // on in the directory it opened: its path is not resolved again.
        // (Clamped: the server clamps the path again, as it did.)
        let scope = if clamped {
            SearchScope::Path(ns.clone())
        } else {
            self.scope_root = Some(root_hit.soid);
            SearchScope::Soid(root_hit.soid)
        };
        // Printed paths are namespace paths: the server may decide -path.
        let same = |t: &[u8]| t == root.as_slice();
        let filters =
            if loc.mount.is_none() && (same(tb) || tb.strip_suffix(b"/").is_some_and(same)) {
                plan::filters(
                    &self.tree,
                    self.cmd.depth_first,
                    plan::Exact {
                        paths: true,
                        empty: !self.deletes,
                    },
                )
            } else {
                self.filters.clone()
            };
        // (2) Opaque tests.
        let relevant = plan::or(filters.out.clone(), filters.prune.clone());
        let mut opaque = Opaque::default();
        for p in filters.opaque.clone() {
            let q = plan::and(
                depth(min, max),
                plan::opaque_query(&p, &plan::or(depth(0, 0), relevant.clone())),
            );
            let paths = collect(self.s, scope.clone(), q, 0)
                .await?
                .into_iter()
                .map(|h| h.path.to_vec())
                .collect();
            opaque.sets.push((p, paths));
        }
        // (3) Where -prune fires (only directories find would descend into).
        let mut pruned: HashSet<Vec<u8>> = HashSet::new();
        if filters.prune != Expr::False && max > 0 {
            let q = plan::and(
                plan::and(
                    depth(min, max - 1),
                    Expr::Pred(Pred::Type(vec![FileType::Directory])),
                ),
                plan::or(depth(0, 0), filters.prune.clone()),
            );
            for hit in collect(self.s, scope.clone(), q, 0).await? {
                let shown = printed(tb, &root, &hit);
                let name: &[u8] = if hit.depth == 0 {
                    typed_name(tb)
                } else {
                    hit.name()
                };
                let subject = Subject {
                    hit: &hit,
                    printed: &shown,
                    name,
                    blind: None,
                };
                let mut fired = false;
                let Ok(ino) = self.local_ino(&shown) else {
                    continue;
                };
                let target = self.link_target(&hit, &shown, false).await;
                let seen = Seen {
                    target: followed(target.as_ref()),
                    link: None,
                    fstype: &self.fstype,
                    ino,
                };
                let (names, cred) = (&mut self.names, &self.s.cred);
                plan::run(
                    &self.tree,
                    &subject,
                    &opaque,
                    &mut |t, h| names.decide(t, h, cred, &seen),
                    &mut |a| {
                        fired |= matches!(a, Action::Prune);
                        true
                    },
                );
                // Reported when the entry is visited.
                self.names.take_loop();
                if fired {
                    pruned.insert(hit.path.to_vec());
                }
            }
        }
        // (4) The starting point, then everything below it; with -delete,
        // directories after everything else, deepest first, and the
        // starting point last (a directory is removed after its contents,
        // as find's -depth does; only directories wait, in memory).
        if min == 0 && !self.deletes {
            self.visit(tb, &root, &root_hit, &mut opaque, sink, None)
                .await;
        }
        if self.quit {
            return Ok(());
        }
        let descend =
            max > 0 && !pruned.contains(&root) && root_hit.attr.ftype == FileType::Directory;
        let q = plan::and(depth(min.max(1), max), filters.out.clone());
        let mut dirs = Vec::new();
        if descend && q != Expr::False {
            let spec = SearchSpec::new(scope.clone(), q);
            let mut hits = self.s.search(&spec).await?;
            while let Some(batch) = hits.next_batch().await? {
                for hit in batch {
                    if !pruned.is_empty() && has_pruned_ancestor(&hit.path, &root, &pruned) {
                        continue;
                    }
                    if self.deletes && hit.attr.ftype == FileType::Directory {
                        dirs.push(hit);
                        continue;
                    }
                    self.visit(tb, &root, &hit, &mut opaque, sink, None).await;
                    if self.quit {
                        return Ok(());
                    }
                }
                sink.flush();
                if sink.stopped() {
                    // The reader is gone (e.g. `| head`): dropping the
                    // stream cancels the search.
                    return Ok(());
                }
            }
        }
        dirs.sort_by_key(|h| std::cmp::Reverse(h.depth));
        let mut level = None;
        for hit in dirs {
            // A directory's contents are all deeper: gone before it.
            if level != Some(hit.depth) {
                self.settle_all().await;
                level = Some(hit.depth);
            }
            self.visit(tb, &root, &hit, &mut opaque, sink, None).await;
            if sink.stopped() || self.quit {
                self.settle_all().await;
                return Ok(());
            }
        }
        self.settle_all().await;
        if min == 0 && self.deletes {
            self.visit(tb, &root, &root_hit, &mut opaque, sink, None)
                .await;
            self.settle_all().await;
        }
        if !descend || self.quit {
            return Ok(());
        }
        // (5) Directories the caller cannot list (visible, not pruned):
        // find fails to open one it may not read (it reports each and
        // exits 1), and knows the contents of one it may read but not
        // search from the listing alone (see [`Blind`]).
        let cred = self.s.cred.clone();
        if !cred.is_root() {
            let q = plan::and(
                plan::and(
                    depth(0, max - 1),
                    Expr::Pred(Pred::Type(vec![FileType::Directory])),
                ),
                fold_not_listable(&cred),
            );
            for hit in collect(self.s, scope.clone(), q, 0).await? {
                if self.quit || sink.stopped() {
                    break;
                }
                if pruned.contains(&hit.path[..]) || has_pruned_ancestor(&hit.path, &root, &pruned)
                {
                    continue;
                }
                if plan::access(&hit.attr, &cred, 4) && !plan::access(&hit.attr, &cred, 1) {
                    self.visit_unsearchable(tb, &root, &hit, &mut opaque, sink)
                        .await;
                    continue;
                }
                sink.flush();
                report(format_args!(
                    "'{}': Permission denied",
                    String::from_utf8_lossy(&printed(tb, &root, &hit))
                ));
                self.failed = true;
            }
        }
        Ok(())
    }

    /// The entries of `dir`, a directory the caller may read but not
    /// search, as find sees them: each by its name and, unless it is a
    /// directory, its type and inode number (readdir's); a directory in it
    /// is reported (find cannot `stat` it to descend) and its contents are
    /// never seen. The listing is the caller's: through the mount under a
    /// mount (the inode numbers are the mount's), else a readdir request
    /// with the caller's credentials (which needs read permission only).
    async fn visit_unsearchable(
        &mut self,
        typed: &[u8],
        root: &[u8],
        dir: &SearchHit,
        opaque: &mut Opaque,
        sink: &mut dyn Sink,
    ) {
        let dir_shown = printed(typed, root, dir);
        let entries = match self.list(dir, &dir_shown).await {
            Ok(v) => v,
            Err(why) => {
                sink.flush();
                report(format_args!(
                    "'{}': {why}",
                    String::from_utf8_lossy(&dir_shown)
                ));
                self.failed = true;
                return;
            }
        };
        let depth = dir.depth.saturating_add(1);
        for e in entries {
            if self.quit || sink.stopped() {
                return;
            }
            let mut path = dir.path.to_vec();
            if path != b"/" {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name);
            let hit = SearchHit {
                path: path.into(),
                soid: e.soid.unwrap_or(sextant_types::Soid::ROOT),
                attr: Attr {
                    soid: e.soid.unwrap_or(sextant_types::Soid::ROOT),
                    ftype: e.ftype,
                    perm: 0,
                    uid: 0,
                    gid: 0,
                    nlink: 1,
                    size: 0,
                    rdev: 0,
                    atime: Nanos(0),
                    mtime: Nanos(0),
                    ctime: Nanos(0),
                    parent: dir.soid,
                    no_xattrs: false,
                },
                depth,
            };
            let typed_entry = e.ftype != FileType::Directory;
            if !typed_entry {
                sink.flush();
                report(format_args!(
                    "'{}': Permission denied",
                    String::from_utf8_lossy(&printed(typed, root, &hit))
                ));
                self.failed = true;
            }
            if depth < self.cmd.min_depth {
                continue;
            }
            let blind = Blind::new(typed_entry, e.ino, e.soid.is_some());
            self.visit(typed, root, &hit, opaque, sink, Some(&blind))
                .await;
        }
    }

    /// The entries of directory `dir` (printed as `shown`) as the caller
    /// lists them: through the mount under a mount, else from the server.
    async fn list(&self, dir: &SearchHit, shown: &[u8]) -> Result<Vec<Listed>, String> {
        let mut out = Vec::new();
        if self.local {
            use std::os::unix::fs::DirEntryExt;
            let rd = std::fs::read_dir(std::ffi::OsStr::from_bytes(shown))
                .map_err(|e| describe_io(&e))?;
            for e in rd {
                let e = e.map_err(|e| describe_io(&e))?;
                let ftype = e.file_type().map_err(|e| describe_io(&e))?;
                out.push(Listed {
                    name: e.file_name().as_bytes().to_vec(),
                    ftype: FileType::of_local(ftype),
                    soid: None,
                    ino: Some(e.ino()),
                });
            }
            return Ok(out);
        }
        let mut after = 0;
        loop {
            let batch = self
                .s
                .readdir(dir.soid, after, LIST_BATCH)
                .await
                .map_err(|e| describe(&e))?;
            let Some(last) = batch.last() else {
                return Ok(out);
            };
            after = last.cookie;
            out.extend(batch.into_iter().map(|e| Listed {
                name: e.name.into_vec(),
                ftype: e.ftype,
                soid: Some(e.soid),
                ino: None,
            }));
        }
    }
}

/// What a symlink resolved to, for [`Names::decide`]: its attributes, or
/// why it does not resolve.
fn followed(target: Option<&Result<Attr, Error>>) -> Option<Result<&Attr, FsError>> {
    target.map(|t| match t {
        Ok(a) => Ok(a),
        Err(e) => Err(e.fs().unwrap_or(FsError::Io)),
    })
}

/// The attributes of a local file (a reference file, or the target of a
/// symlink under a mount, followed by the kernel).
fn local_attr(m: &std::fs::Metadata) -> Attr {
    use std::os::unix::fs::MetadataExt;
    let t =
        |s: i64, n: i64| Nanos::from_parts(s, n.clamp(0, 999_999_999) as u32).unwrap_or(Nanos(0));
    let ftype = FileType::of_local(m.file_type());
    Attr {
        soid: sextant_types::Soid::ROOT,
        ftype,
        perm: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        nlink: m.nlink() as u32,
        size: m.size(),
        rdev: 0,
        atime: t(m.atime(), m.atime_nsec()),
        mtime: t(m.mtime(), m.mtime_nsec()),
        ctime: t(m.ctime(), m.ctime_nsec()),
        parent: sextant_types::Soid::ROOT,
        no_xattrs: false,
    }
}

fn describe_io(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Opens the session: `--server`, else the server of the mount the first
/// mounted PATH is under, else the usual default.
async fn open_session(
    cli: &Cli,
    paths: &[String],
    mounts: &[mounts::Mount],
    cwd: &std::path::Path,
) -> Result<Session> {
    open_session_with(cli, paths, mounts, cwd, true).await
}

/// [`open_session`]; `follow_owner` false: the session stays with the
/// server asked even where another holds every table — for searches that
/// server gathers from the others (`SearchSpec::gatherable`, asked as
/// such by the client library), which need no route map here (finding
/// the owner fetches the whole map: a route per run of one server's
/// tables, per command).
async fn open_session_with(
    cli: &Cli,
    paths: &[String],
    mounts: &[mounts::Mount],
    cwd: &std::path::Path,
    follow_owner: bool,
) -> Result<Session> {
    let mut server = cli.server.clone();
    if server.is_none() && !cli.local {
        let mut found: Option<String> = None;
        for p in paths {
            if let Ok(mounts::Located {
                mount:
                    Some(mounts::Mount {
                        server: Some(addr), ..
                    }),
                ..
            }) = mounts::locate(p, cwd, mounts)
            {
                match &found {
                    Some(f) if *f != addr => {
                        bail!("the paths are under mounts of different servers ({f} and {addr}); run one sextant find per server")
                    }
                    _ => found = Some(addr),
                }
            }
        }
        server = found;
    }
    let data = cli
        .data
        .clone()
        .unwrap_or_else(crate::session::default_data);
    let mut session = Session::open(search_target(cli, &data, server.as_deref())).await?;
    if !follow_owner {
        return Ok(session);
    }
    // On a cluster where one server holds everything and the one given
    // holds nothing, talk to the holder: the path is resolved there, with
    // no hop. (A cluster's search is spread by SOID ranges over whichever
    // servers hold them, so this is not needed for a right answer.)
    if let Some(owner) = owner_elsewhere(&session, paths, mounts, cwd).await {
        // (If the owner cannot be reached this way, the search stays
        // where it was sent.)
        if let Ok(there) = Session::open(search_target(cli, &data, Some(&owner))).await {
            std::mem::replace(&mut session, there).close().await?;
        }
    }
    Ok(session)
}

fn search_target<'a>(
    cli: &'a Cli,
    data: &'a std::path::Path,
    server: Option<&'a str>,
) -> Target<'a> {
    Target {
        data,
        server,
        secret: cli.secret.as_deref(),
        secret_file: cli.secret_file.as_deref(),
        key_file: cli.key_file.as_deref(),
        tls_ca: cli.tls_ca.as_deref(),
        socket: cli.socket.as_deref(),
        local: cli.local,
        writes: false,
    }
}

/// The address of the server holding the table of the first starting
/// point (a namespace path, not under a mount), when the server this
/// session talks to holds no table at all (a server of a cluster whose
/// tables all moved away).
async fn owner_elsewhere(
    s: &Session,
    paths: &[String],
    mounts: &[mounts::Mount],
    cwd: &std::path::Path,
) -> Option<String> {
    let crate::session::Backend::Remote(c) = &s.backend else {
        return None;
    };
    let first = paths.first()?;
    if !first.starts_with('/') {
        return None;
    }
    if mounts::locate(first, cwd, mounts).is_ok_and(|l| l.mount.is_some()) {
        return None;
    }
    // (Not routed by: a local user on the Unix socket keeps to it.)
    let map = c.recent_route_map().await.ok()?;
    if map.routes().iter().any(|r| r.address == c.addr()) {
        return None;
    }
    let attr = s.resolve_raw(first.as_bytes(), true).await.ok()?;
    let route = map.routes().iter().find(|r| r.range.contains(attr.soid))?;
    (route.address != c.addr() && !route.address.is_empty()).then(|| route.address.clone())
}

/// Parses the command line and resolves its reference files.
async fn prepare<'a>(
    s: &'a Session,
    cmd: &'a Command,
    cwd: PathBuf,
    mounts: Vec<mounts::Mount>,
    now: Nanos,
) -> Result<Run<'a>> {
    let mut run = Run::new(s, cwd, mounts, cmd, now);
    if plan::prune_needs_command(&cmd.expr) {
        bail!(
            "-prune whose outcome depends on the exit status of -exec ... ; or -ok is not \
             supported (the pruned directories are found before the commands run)"
        );
    }
    if run.runs_in_dirs {
        exec::check_path_env(std::env::var_os("PATH").as_deref()).map_err(anyhow::Error::msg)?;
    }
    // Reference files, resolved once each (find stats them at parse time).
    let mut refs: Vec<(String, bool)> = Vec::new();
    cmd.expr.for_each_leaf(&mut |n| match n {
        Node::Test(Test::Newer { file, .. }) => refs.push((file.clone(), true)),
        Node::Test(Test::Samefile(file)) => refs.push((file.clone(), false)),
        _ => {}
    });
    let mut resolved: HashMap<(String, bool), Attr> = HashMap::new();
    for r in refs {
        if let std::collections::hash_map::Entry::Vacant(v) = resolved.entry(r) {
            let a = run.resolve_ref(&v.key().0, v.key().1).await?;
            v.insert(a);
        }
    }
    let tree = cmd.expr.clone().map_tests(&mut |t| -> Result<Test> {
        Ok(match t {
            Test::Newer { which, of, file } => {
                let a = resolved
                    .get(&(file.clone(), true))
                    .with_context(|| format!("'{file}' was not resolved"))?;
                let t = match of {
                    TimeAttr::Atime => a.atime,
                    TimeAttr::Mtime => a.mtime,
                    TimeAttr::Ctime => a.ctime,
                };
                match t.0.checked_add(1) {
                    Some(lo) => Test::Pred(Pred::Time {
                        which,
                        lo: Nanos(lo),
                        hi: Nanos(i64::MAX),
                    }),
                    None => Test::Const(false),
                }
            }
            Test::Samefile(file) => {
                let a = resolved
                    .get(&(file.clone(), false))
                    .with_context(|| format!("'{file}' was not resolved"))?;
                Test::Pred(Pred::Soid(a.soid))
            }
            other => other,
        })
    })?;
    // -samefile F needs the entry's stat in find (its SOID test alone
    // would decide an entry known from a listing only).
    let tree = stat_before_samefile(tree);
    // -inum: the SOID on a namespace path, the mount's number under a
    // mount (a test the client decides: the server knows no node ids).
    let mut has_inum = false;
    let for_local = tree.clone().map_tests(&mut |t| -> Result<Test> {
        Ok(match t {
            Test::Inum(n) => {
                has_inum = true;
                Test::Client(ClientTest::Inode(n))
            }
            other => other,
        })
    })?;
    let tree = tree.map_tests(&mut |t| -> Result<Test> {
        Ok(match t {
            Test::Inum(n) => Test::Pred(Pred::Soid(sextant_types::Soid::from_u128(n))),
            other => other,
        })
    })?;
    let exact = plan::Exact {
        paths: false,
        empty: !run.deletes,
    };
    if has_inum {
        let filters = plan::filters(&for_local, cmd.depth_first, exact);
        run.local_variant = Some((std::rc::Rc::new(for_local), filters));
    }
    run.filters = plan::filters(&tree, cmd.depth_first, exact);
    run.tree = std::rc::Rc::new(tree);
    Ok(run)
}

/// Each SOID test (after the reference files are resolved, only
/// `-samefile`'s) preceded by [`ClientTest::Stat`], true where the
/// attributes are known: the server's filter is unchanged (a client test
/// relaxes to true), and an entry known from a listing only fails it as
/// find's `stat` would.
fn stat_before_samefile(n: Node) -> Node {
    let b = |n: Box<Node>| Box::new(stat_before_samefile(*n));
    match n {
        Node::Test(Test::Pred(Pred::Soid(x))) => Node::And(
            Box::new(Node::Test(Test::Client(ClientTest::Stat))),
            Box::new(Node::Test(Test::Pred(Pred::Soid(x)))),
        ),
        Node::And(l, r) => Node::And(b(l), b(r)),
        Node::Or(l, r) => Node::Or(b(l), b(r)),
        Node::Comma(l, r) => Node::Comma(b(l), b(r)),
        Node::Not(a) => Node::Not(b(a)),
        other => other,
    }
}

/// `sextant find ARGS`; returns whether everything went well.
pub async fn find(cli: &Cli, args: &[String]) -> Result<bool> {
    let now = now();
    let cmd = match parse::parse(args, &RealEnv { now }) {
        Ok(c) => c,
        Err(e) => {
            report(e);
            return Ok(false);
        }
    };
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let mounts = mounts::current();
    let s = open_session(cli, &cmd.paths, &mounts, &cwd).await?;
    let mut run = match prepare(&s, &cmd, cwd, mounts, now).await {
        Ok(r) => r,
        Err(e) => {
            report(crate::error_chain(&e));
            return Ok(false);
        }
    };
    let files = match sink::open_files(&run.tree) {
        Ok(f) => f,
        Err(e) => {
            report(e);
            return Ok(false);
        }
    };
    let mut out = Output {
        out: std::io::BufWriter::new(std::io::stdout()),
        files,
        file_failed: false,
        json: cli.json,
        needs_link: needs_link(&run.tree),
        needs_target: needs_target(&run.tree),
        printed: false,
        broken: false,
    };
    for p in &cmd.paths {
        if run.quit {
            break;
        }
        if let Err(e) = run.start(p, &mut out).await {
            out.flush();
            report(format_args!("'{p}': {}", describe(&e)));
            run.failed = true;
        }
    }
    run.settle_all().await;
    out.flush();
    run.commands.finish(&|m| report(m));
    out.flush();
    let ok = !run.failed && !run.commands.failed && !out.file_failed;
    drop(run);
    s.close().await?;
    Ok(ok)
}

/// A plain file's hit at `path`, for tests.
#[cfg(test)]
fn test_hit(path: &str, depth: u32) -> SearchHit {
    use sextant_types::Soid;
    SearchHit {
        path: path.as_bytes().to_vec().into(),
        soid: Soid::ROOT,
        attr: Attr {
            soid: Soid::ROOT,
            ftype: FileType::Regular,
            perm: 0,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            rdev: 0,
            atime: Nanos(0),
            mtime: Nanos(0),
            ctime: Nanos(0),
            parent: Soid::ROOT,
            no_xattrs: false,
        },
        depth,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(path: &str, depth: u32) -> SearchHit {
        test_hit(path, depth)
    }

    /// A search clamped by a path-limited client key: the root the
    /// server reports is below the starting point.
    #[test]
    fn a_root_below_the_starting_point_is_told() {
        assert!(strictly_below(b"/home/alice", b"/"));
        assert!(strictly_below(b"/home/alice", b"/home/"));
        assert!(!strictly_below(b"/home/alice", b"/home/alice"));
        assert!(!strictly_below(b"/home/alicex", b"/home/alice"));
        assert!(!strictly_below(b"/home", b"/home/alice"));
        assert!(!strictly_below(b"/home/alice", b"/home/alice/.."));
    }

    #[test]
    fn printed_paths_keep_the_typed_prefix() {
        assert_eq!(printed(b"mnt", b"/", &hit("/a/b", 2)), b"mnt/a/b");
        assert_eq!(printed(b"mnt/", b"/", &hit("/a/b", 2)), b"mnt/a/b");
        assert_eq!(printed(b"./", b"/p", &hit("/p/x", 1)), b"./x");
        assert_eq!(printed(b".", b"/p", &hit("/p/x", 1)), b"./x");
        assert_eq!(printed(b".", b"/p", &hit("/p", 0)), b".");
        assert_eq!(printed(b"/", b"/", &hit("/a", 1)), b"/a");
        assert_eq!(typed_name(b"mnt/d/"), b"d");
        assert_eq!(typed_name(b"/"), b"/");
        assert_eq!(typed_name(b"."), b".");
    }

    #[test]
    fn pruned_ancestors() {
        let pruned: HashSet<Vec<u8>> = [b"/r/a".to_vec()].into_iter().collect();
        assert!(has_pruned_ancestor(b"/r/a/b", b"/r", &pruned));
        assert!(has_pruned_ancestor(b"/r/a/b/c", b"/r", &pruned));
        assert!(!has_pruned_ancestor(b"/r/a", b"/r", &pruned));
        assert!(!has_pruned_ancestor(b"/r/ab/c", b"/r", &pruned));
        let root: HashSet<Vec<u8>> = [b"/".to_vec()].into_iter().collect();
        assert!(has_pruned_ancestor(b"/x", b"/", &root));
        assert!(!has_pruned_ancestor(b"/", b"/", &root));
    }
}
