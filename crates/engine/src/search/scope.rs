//! Scope membership for one search: which directories lie below the scope
//! root `S` (at what depth, with what path, listable all the way down), and
//! which tables can hold anything below `S` at all.
//!
//! - [`Memo`]: each directory's [`Status`], computed once per search from
//!   its parent chain and memoised (every directory on the way too).
//! - [`status_remote`] walks a chain with single-table engine reads (no lock
//!   held by the caller); [`status_local`] walks it inside one locked table
//!   and stops, without an answer, where the chain leaves that table at a
//!   directory not memoised yet.
//! - [`decide`]: a table is visited only if it contains `S` or one of its
//!   exits ([`crate::table::exits`]) is a listable directory at or below `S`
//!   from which entries within the depth limit can hang. Exits not yet
//!   memoised are returned for resolution first, so that, once they are
//!   resolved, every chain of the table's inodes ends in the memo and the
//!   whole table can be evaluated under its one lock ([`status_local`]).
//! - [`relative`]: a directory's status from its absolute path remembered
//!   across searches ([`crate::dir_cache`]) alone, when that does not
//!   depend on who the caller is.
//!
//! Exactness: a table is skipped only when every exit is memoised as out of
//! scope, invisible, or too deep; by the exit-set argument
//! ([`crate::table::exits`]) such a table holds no visible entry below `S`
//! within the depth limit, as of the moment its lock is held. Each memoised
//! status is as of one read of each directory during the search, which is
//! the per-entry consistency the search promises (module docs of
//! [`crate::search`]).

use super::spread::{DirRecord, Spread};
use super::{join, may_list};
use crate::dir_cache::{at_or_below, components, Place};
use crate::engine::{Engine, Held};
use crate::hash::SoidHasher;
use crate::perm::{class_allows, MAY_EXEC, MAY_READ};
use crate::table::Table;
use sextant_types::{Credentials, FsError, Soid};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

pub(super) use crate::perm::open_to_all;

/// A directory's place relative to the scope.
#[derive(Clone, Debug)]
pub(super) enum Status {
    Out,
    In {
        depth: u32,
        /// Entries of this directory are visible to the caller.
        visible: bool,
        path: Arc<[u8]>,
    },
}

/// Directory statuses of one search.
pub(super) type Memo = HashMap<Soid, Status, BuildHasherDefault<SoidHasher>>;

/// A directory's (parent, name, listable by the caller, listable by
/// everyone ([`open_to_all`])).
pub(super) type DirInfo = (Soid, Box<[u8]>, bool, bool);

/// Longest parent chain followed before giving up (a chain that long, or
/// a cycle, can only be an artefact of concurrent renames).
pub(crate) const MAX_CHAIN: usize = 1 << 16;

/// The status of a child directory named `name` (listable: `ok`) of a
/// directory with status `base`.
fn below(base: &Status, name: &[u8], ok: bool) -> Status {
    match base {
        Status::Out => Status::Out,
        Status::In {
            depth,
            visible,
            path,
        } => Status::In {
            depth: depth.saturating_add(1),
            visible: *visible && ok,
            path: joined(path, name),
        },
    }
}

/// `join(dir, name)` built in its shared allocation directly (one
/// allocation, not a vector and a copy).
fn joined(dir: &[u8], name: &[u8]) -> Arc<[u8]> {
    let slash: &[u8] = if dir == b"/" { b"" } else { b"/" };
    dir.iter()
        .chain(slash)
        .chain(name)
        .copied()
        .collect::<Arc<[u8]>>()
}

/// Memoises `chain` (child last) below `base`; returns the last status.
fn unwind<N: AsRef<[u8]>>(
    memo: &mut Memo,
    mut base: Status,
    mut chain: Vec<(Soid, N, bool)>,
) -> Status {
    while let Some((soid, name, ok)) = chain.pop() {
        base = below(&base, name.as_ref(), ok);
        memo.insert(soid, base.clone());
    }
    base
}

/// The status, for a caller searching below the directory at
/// `scope_path`, of a directory whose absolute path is `abs` of
/// `abs_depth` components ([`components`]; `open`: it and all its
/// ancestors are open to all; `root`: the caller is root):
/// out when `abs` is not `scope_path` or below it; in scope at the
/// difference of depths, visible, when the caller may list every
/// directory on the way (root, or all open); `None` when that depends on
/// the caller (it must be read).
pub(super) fn relative(
    abs: &Arc<[u8]>,
    abs_depth: u32,
    open: bool,
    root: bool,
    scope_path: &[u8],
) -> Option<Status> {
    if !at_or_below(abs, scope_path) {
        return Some(Status::Out);
    }
    (root || open).then(|| Status::In {
        depth: abs_depth.saturating_sub(components(scope_path)),
        visible: true,
        path: Arc::clone(abs),
    })
}

/// Directories other members hold, read through the search's
/// [`Spread`] (each once per search); `None` on one server (another
/// member's range then reads as empty).
pub(super) type Foreign<'a> = Option<&'a Spread<'a>>;

/// Where directories are read: this engine's tables, and through
/// `foreign` the ones other members hold.
#[derive(Clone, Copy)]
pub(super) struct Reader<'a> {
    pub(super) engine: &'a Engine,
    pub(super) foreign: Foreign<'a>,
}

/// Whether the caller may list a directory held by another member.
fn may_list_record(r: &DirRecord, cred: &Credentials) -> bool {
    cred.is_root() || class_allows(r.uid, r.gid, r.perm, cred, MAY_READ | MAY_EXEC)
}

/// Reads one directory's [`DirInfo`], `None` if it is gone or not a
/// directory.
pub(super) fn read_dir(
    at: Reader<'_>,
    cred: &Credentials,
    d: Soid,
    reads: &mut usize,
) -> Result<Option<DirInfo>, FsError> {
    *reads += 1;
    let info = |i: &crate::inode::Inode| {
        let open = open_to_all(i.perm);
        (i.parent, Box::from(&i.name), may_list(i, cred), open)
    };
    match at
        .engine
        .with_held_table(d, |t| t.inode(d).filter(|i| i.is_dir()).map(info))?
    {
        Held::Table((_, info)) => Ok(info),
        Held::Foreign(_) => {
            let Some(foreign) = at.foreign else {
                return Ok(None);
            };
            Ok(foreign.record(d)?.map(|r| {
                let ok = may_list_record(&r, cred);
                (r.parent, r.name, ok, open_to_all(r.perm))
            }))
        }
    }
}

/// A parent chain being read, its names in one buffer.
#[derive(Default)]
struct Chain {
    /// (directory, where its name ends in `names`, listable by the
    /// caller, listable by everyone ([`open_to_all`])), child first.
    dirs: Vec<(Soid, usize, bool, bool)>,
    names: Vec<u8>,
    /// Every directory read, to stop at a cycle (which only concurrent
    /// renames can make).
    seen: HashSet<Soid>,
}

impl Chain {
    /// Whether the walk must stop at `cur` (too long, or a cycle).
    fn stop_at(&mut self, cur: Soid) -> bool {
        self.dirs.len() >= MAX_CHAIN || !self.seen.insert(cur)
    }

    /// Reads up from `cur` within the table holding it (one lock), to the
    /// first directory that is outside the table or memoised: returns it,
    /// or `None` when the chain ended at the root (pushed) or at a gone
    /// directory (not pushed).
    fn read_up(
        &mut self,
        at: Reader<'_>,
        cred: &Credentials,
        cur: Soid,
        memo: &Memo,
        reads: &mut usize,
    ) -> Result<Option<Soid>, FsError> {
        let start = self.dirs.len();
        let held = at.engine.with_held_table(cur, |t| {
            let mut at = cur;
            loop {
                let i = t.inode(at).filter(|i| i.is_dir())?;
                self.names.extend_from_slice(&i.name);
                let open = open_to_all(i.perm);
                self.dirs
                    .push((at, self.names.len(), may_list(i, cred), open));
                if at == Soid::ROOT {
                    return None;
                }
                at = i.parent;
                if !t.range.contains(at)
                    || memo.contains_key(&at)
                    || self.dirs.len() - start > t.dir_count()
                {
                    return Some(at);
                }
            }
        })?;
        let next = match (held, at.foreign) {
            (Held::Table((_, next)), _) => next,
            // Another member's range without a way to read it: a dead end
            // (one server's view: that range reads as empty).
            (Held::Foreign(_), None) => None,
            (Held::Foreign(_), Some(foreign)) => self.follow(foreign, cred, cur, memo)?,
        };
        *reads += (self.dirs.len() - start).max(1);
        // (`cur` itself was inserted by `stop_at`.)
        let above = self.dirs[start..].iter().skip(1).map(|(d, ..)| *d);
        self.seen.extend(above);
        Ok(next)
    }

    /// [`Chain::read_up`] through another member: pushes `cur` and the
    /// directories above it this search has read from other members
    /// ([`Spread::record`]; `cur` is read if it was not), to the first
    /// directory memoised, not read yet, or past it.
    fn follow(
        &mut self,
        foreign: &Spread<'_>,
        cred: &Credentials,
        cur: Soid,
        memo: &Memo,
    ) -> Result<Option<Soid>, FsError> {
        // Gone, or no longer a directory: a dead end.
        let Some(mut r) = foreign.record(cur)? else {
            return Ok(None);
        };
        // The directories pushed here, to stop at a cycle (records read at
        // different times, across concurrent renames).
        let mut here = HashSet::from([cur]);
        loop {
            self.names.extend_from_slice(&r.name);
            let ok = may_list_record(&r, cred);
            self.dirs
                .push((r.soid, self.names.len(), ok, open_to_all(r.perm)));
            if r.soid == Soid::ROOT {
                return Ok(None);
            }
            let up = r.parent;
            if memo.contains_key(&up) || self.dirs.len() >= MAX_CHAIN || !here.insert(up) {
                return Ok(Some(up));
            }
            // Not read yet (or gone): the caller goes on from there.
            match foreign.kept(up) {
                Some(Some(next)) => r = next,
                _ => return Ok(Some(up)),
            }
        }
    }

    /// Pops the topmost directory with its name, listable by the caller,
    /// listable by everyone.
    fn pop(&mut self) -> Option<(Soid, &[u8], bool, bool)> {
        let (d, end, ok, open) = self.dirs.pop()?;
        let begin = self.dirs.last().map_or(0, |(_, e, ..)| *e);
        Some((d, &self.names[begin..end], ok, open))
    }
}

/// The directory paths remembered across searches a search may use: the
/// epoch it began at and its scope root's absolute path ([`crate::dir_cache`]);
/// `None`: every directory is read.
pub(super) type Remembered<'a> = Option<(u64, &'a [u8])>;

/// The status of directory `d`, walking up with engine reads until a
/// memoised directory, the root, or a dead end. Each read takes one
/// table's lock and follows the chain as far as it stays in that table
/// (child-closest SOIDs keep most of a chain in few tables), so a chain
/// costs one lock per table it crosses, not one per directory; `reads`
/// counts directories read.
///
/// With `remembered` paths, a remembered directory answers without a read
/// when its remembered place decides the caller's status ([`relative`]:
/// out of scope, or in scope and root or open to all the way from `/`):
/// the chain stops there too; every directory read is then remembered
/// with its absolute path and whether it and all its ancestors are open to
/// all (independent of the caller). Either way every directory on the
/// chain is memoised with the caller's status, computed level by level.
/// REQUIRES: no engine lock held by the caller.
pub(super) fn status_remote(
    at: Reader<'_>,
    cred: &Credentials,
    memo: &mut Memo,
    remembered: Remembered<'_>,
    d: Soid,
    reads: &mut usize,
) -> Result<Status, FsError> {
    let root = cred.is_root();
    let mut chain = Chain::default();
    let mut cur = d;
    // The top of the chain: the caller's status there, and (with
    // remembered paths) its absolute path and openness when known.
    let (mut status, mut place): (Status, Option<Place>) = loop {
        let kept = remembered.and_then(|(epoch, _)| at.engine.dir_cache_get(epoch, cur));
        if let Some(st) = memo.get(&cur) {
            let place = match (st, kept) {
                (_, Some((r, _))) => Some(r),
                // In scope (the path is absolute) but openness unknown:
                // what is read below is remembered as not open.
                (Status::In { path, .. }, None) if remembered.is_some() => {
                    Some((path.clone(), false))
                }
                _ => None,
            };
            break (st.clone(), place);
        }
        if let (Some(((path, open), depth)), Some((_, scope_path))) = (kept, remembered) {
            if let Some(st) = relative(&path, depth, open, root, scope_path) {
                memo.insert(cur, st.clone());
                break (st, Some((path, open)));
            }
        }
        if chain.stop_at(cur) {
            break (Status::Out, None);
        }
        match chain.read_up(at, cred, cur, memo, reads)? {
            Some(n) => cur = n,
            None if chain.dirs.last().is_some_and(|(s, ..)| *s == Soid::ROOT) => {
                // The root is in scope only as the scope (memoised).
                let open = chain.pop().is_some_and(|(.., open)| open);
                memo.insert(Soid::ROOT, Status::Out);
                let Some((epoch, _)) = remembered else {
                    break (Status::Out, None);
                };
                let path: Arc<[u8]> = Arc::from(&b"/"[..]);
                at.engine
                    .dir_cache_offer(epoch, vec![(Soid::ROOT, path.clone(), open)]);
                break (Status::Out, Some((path, open)));
            }
            // A gone directory, or a cycle: out, and nothing remembered.
            None => break (Status::Out, None),
        }
    };
    let mut learned = Vec::new();
    while let Some((soid, name, ok, open)) = chain.pop() {
        status = below(&status, name, ok);
        memo.insert(soid, status.clone());
        if let Some((path, all_open)) = &mut place {
            *path = joined(path, name);
            *all_open &= open;
            learned.push((soid, path.clone(), *all_open));
        }
    }
    if let Some((epoch, _)) = remembered {
        at.engine.dir_cache_offer(epoch, learned);
    }
    Ok(status)
}

/// [`status_remote`] for several directories (a table's unknown exits).
/// With `remembered` paths, those whose remembered place decides the
/// caller's status are memoised under one read lock of the remembered
/// paths first. REQUIRES: no engine lock held.
pub(super) fn statuses(
    at: Reader<'_>,
    cred: &Credentials,
    memo: &mut Memo,
    remembered: Remembered<'_>,
    dirs: &[Soid],
    reads: &mut usize,
) -> Result<(), FsError> {
    if at.foreign.is_some() {
        prefetch(at, memo, dirs)?;
    }
    let Some((epoch, scope_path)) = remembered else {
        for &d in dirs {
            status_remote(at, cred, memo, None, d, reads)?;
        }
        return Ok(());
    };
    let root = cred.is_root();
    let mut rest = Vec::new();
    memo.reserve(dirs.len());
    at.engine.dir_cache_read(|cache| {
        // Two passes: the lookups first, then the paths, so that the
        // memory reads of different directories overlap (each path is its
        // own allocation: reading it is a cache miss, the larger part of
        // a decision).
        let mut found = Vec::with_capacity(dirs.len());
        for &d in dirs {
            if memo.contains_key(&d) {
                continue;
            }
            match cache.peek(epoch, d) {
                Some(place) => found.push((d, place)),
                None => rest.push(d),
            }
        }
        for (d, ((path, open), depth)) in found {
            match relative(path, depth, *open, root, scope_path) {
                Some(st) => {
                    memo.insert(d, st);
                }
                None => rest.push(d),
            }
        }
    });
    for d in rest {
        status_remote(at, cred, memo, remembered, d, reads)?;
    }
    Ok(())
}

/// Rounds of [`prefetch`] at most (a round trip per holder each); chains
/// that cross members more often are read on as the search meets them.
const PREFETCH_ROUNDS: usize = 32;

/// Reads ahead, in a few round trips, the directories of other members on
/// the parent chains of `dirs` that the search has neither memoised nor
/// read ([`Spread`]): walks each chain up through this member's tables
/// and the records read so far, gathers the foreign directories where the
/// walks stop, reads them all in one [`Spread::fetch`], and goes on from
/// there, until every chain ends (memoised, the root, gone). Only reads:
/// the statuses are then computed as ever ([`status_remote`]), now from
/// the records kept. Nothing to do on one server.
/// REQUIRES: no engine lock held by the caller.
pub(super) fn prefetch(at: Reader<'_>, memo: &Memo, dirs: &[Soid]) -> Result<(), FsError> {
    let Some(foreign) = at.foreign else {
        return Ok(());
    };
    // Directories walked through: each chain is followed once.
    let mut passed: HashSet<Soid, BuildHasherDefault<SoidHasher>> = HashSet::default();
    let mut starts = dirs.to_vec();
    for _ in 0..PREFETCH_ROUNDS {
        let mut ask = Vec::new();
        for &d in &starts {
            let mut cur = d;
            loop {
                if memo.contains_key(&cur) {
                    break;
                }
                match foreign.kept_parent(cur) {
                    Some(Some(parent)) => {
                        if cur == Soid::ROOT || !passed.insert(cur) {
                            break;
                        }
                        cur = parent;
                        continue;
                    }
                    Some(None) => break,
                    None => {}
                }
                let passed = &mut passed;
                let held = at.engine.with_held_table(cur, |t| {
                    let mut at = cur;
                    loop {
                        if !passed.insert(at) {
                            return None;
                        }
                        let i = t.inode(at).filter(|i| i.is_dir())?;
                        if at == Soid::ROOT {
                            return None;
                        }
                        at = i.parent;
                        if !t.range.contains(at) || memo.contains_key(&at) {
                            return Some(at);
                        }
                    }
                })?;
                match held {
                    Held::Table((_, Some(next))) => cur = next,
                    Held::Table((_, None)) => break,
                    Held::Foreign(_) => {
                        ask.push(cur);
                        break;
                    }
                }
            }
        }
        if ask.is_empty() {
            break;
        }
        foreign.fetch(&ask)?;
        starts = ask;
    }
    Ok(())
}

/// The status of directory `d` from table `t` alone (under its lock):
/// `None` when the chain leaves `t` at a directory not in the memo. With a
/// `complete` memo ([`walk_down`]) a directory not in it is out.
pub(super) fn status_local(
    t: &Table,
    cred: &Credentials,
    memo: &mut Memo,
    complete: bool,
    d: Soid,
) -> Option<Status> {
    if let Some(st) = memo.get(&d) {
        return Some(st.clone());
    }
    if complete {
        return Some(Status::Out);
    }
    let mut chain: Vec<(Soid, &[u8], bool)> = Vec::new();
    let mut cur = d;
    let base = loop {
        if let Some(st) = memo.get(&cur) {
            break st.clone();
        }
        if !t.range.contains(cur) {
            return None;
        }
        // A chain inside one locked table is consistent: longer than the
        // table's directories only through a cycle, which cannot exist.
        if chain.len() > t.dir_count() {
            break Status::Out;
        }
        let Some(ino) = t.inode(cur).filter(|i| i.is_dir()) else {
            break Status::Out;
        };
        chain.push((cur, &ino.name, may_list(ino, cred)));
        if cur == Soid::ROOT {
            break Status::Out;
        }
        cur = ino.parent;
    };
    Some(unwind(memo, base, chain))
}

/// What to do with one table.
pub(super) enum Decision {
    /// Every exit is memoised and some lead into the scope (or the table
    /// holds the scope root, or pruning is off): collect.
    Visit,
    /// Nothing below the scope can be in this table.
    Skip,
    /// These exits must be resolved ([`status_remote`]) before deciding.
    Resolve(Vec<Soid>),
    /// Added up from the table's maintained summary (made by the caller
    /// from `Visit` when the table is [`whole`]; never by [`decide`]).
    Summarized,
    /// Added up from the table's totals per exit, the exits in scope only
    /// (made by the caller from `Visit`; never by [`decide`]).
    SummarizedByExit,
}

/// See the module docs. `prune` false (brute-force scans) never skips;
/// with a `complete` memo ([`walk_down`]) an exit not in it is out.
pub(super) fn decide(
    t: &Table,
    root: Soid,
    max_depth: u32,
    memo: &Memo,
    prune: bool,
    complete: bool,
) -> Decision {
    let mut unknown = Vec::new();
    let mut relevant = !prune || t.range.contains(root);
    for e in t.exits().dirs() {
        match memo.get(&e) {
            None if complete => {}
            None => unknown.push(e),
            Some(Status::In {
                depth,
                visible: true,
                ..
            }) if *depth < max_depth => relevant = true,
            Some(_) => {}
        }
    }
    if !unknown.is_empty() {
        Decision::Resolve(unknown)
    } else if relevant {
        Decision::Visit
    } else {
        Decision::Skip
    }
}

/// Whether every path of every inode of table `t` lies strictly below the
/// scope root and is visible: then the table's maintained summary
/// ([`crate::table::summary`]) is exactly its share of a tally of the
/// scope, with no row read.
///
/// Why: by the exit-set argument ([`crate::table::exits`]) each link of an
/// inode of `t` has a parent chain that either stays in `t` up to the
/// file-system root or leaves `t` at an exit. If `t` does not hold the
/// file-system root and every exit is memoised in scope with visible
/// entries, every chain passes through the scope: every link is below the
/// scope root, at depth ≥ 1. (Then `t` cannot hold the scope root either:
/// its own chain would leave `t` at an exit above it, never in scope.)
/// Visible means the exit and its ancestors up to the scope root are
/// listable; directories inside `t` are not checked, so the caller must be
/// one who may list every directory (root), or the table must hold no
/// directory closed to anyone ([`crate::table::summary::Summary::closed_dirs`]).
///
/// A table with no exit holds nothing reachable from outside it (it does
/// not hold the root), which a search would also find nothing in: it is
/// not whole (the caller then decides as before).
pub(super) fn whole(t: &Table, memo: &Memo) -> bool {
    could_be_whole(t)
        && t.exits()
            .dirs()
            .all(|e| matches!(memo.get(&e), Some(Status::In { visible: true, .. })))
}

/// What [`whole`] asks of `t` itself, before its exits: it does not hold
/// the file-system root, and it has exits (a remembered exit place that
/// lies in scope stands for the rest, [`crate::dir_cache::ExitPlace`]).
pub(super) fn could_be_whole(t: &Table) -> bool {
    !t.range.contains(Soid::ROOT) && !t.exits().is_empty()
}

/// Entries listed by [`walk_down`] before it gives up (the scope is then
/// too large for a walk to pay off; exits are resolved bottom-up instead).
///
/// Small: the walk lists every entry of the scope, files included, while
/// the remembered directory paths ([`crate::dir_cache`]) and exit places
/// decide a table bottom-up with a lookup or two. Measured at 10M files
/// (BENCHMARKS, "Exit places"), 512 against 8,192 – 65,536 entries: set 2
/// 0.38 – 0.6 ms against 0.7 – 0.94, a top-level directory's totals (walk
/// given up) 4.3 – 6.4 ms against 5.2 – 9.9; a grandparent's totals the
/// same at the median, but a medium scope of ~10 – 60k entries, which a
/// larger budget walks completely, takes 3.3 – 4.4 ms instead of
/// 1.6 – 2.2.
pub(super) const WALK_BUDGET: usize = 1 << 9;

/// Lists the directories below the scope root `root` (whose status is in
/// the memo) top-down, through their entries, and memoises every one that
/// can be the parent of a reportable entry: reached through listable
/// directories, at depth below `max_depth`. Unlistable directories are
/// memoised (not visible) but not entered. Returns whether it finished
/// within `budget` entries: then the memo is *complete* — a
/// directory not in it has no visible entry below the scope within the
/// depth limit, because every directory that has one was listed in its
/// parent's entries during the walk. (A directory moved into the scope
/// after its new parent was listed is missed, like any entry whose
/// ancestors change during the search.) Statuses memoised by an
/// unfinished walk are still exact.
///
/// REQUIRES: no engine lock held by the caller.
pub(super) fn walk_down(
    engine: &Engine,
    cred: &Credentials,
    memo: &mut Memo,
    root: Soid,
    max_depth: u32,
    budget: usize,
    reads: &mut usize,
) -> Result<bool, FsError> {
    let Some(Status::In {
        visible: true,
        path,
        ..
    }) = memo.get(&root).cloned()
    else {
        return Ok(true);
    };
    // Directories at depth ≤ max_depth − 1 can hold reportable entries.
    let last = max_depth.saturating_sub(1);
    let mut stack: Vec<(Soid, Arc<[u8]>, u32)> = vec![(root, path, 0)];
    let mut listed = 0usize;
    while let Some((d, path, depth)) = stack.pop() {
        if depth >= last {
            continue;
        }
        *reads += 1;
        let (_, (local, remote, n)) = engine.with_table_holding(d, |t| {
            let (mut local, mut remote, mut n) = (Vec::new(), Vec::new(), 0usize);
            for (child, ftype, name) in t.entries_of(d) {
                n += 1;
                if ftype != sextant_types::FileType::Directory {
                    continue;
                }
                match t.inode(child) {
                    Some(i) if i.is_dir() && i.parent == d => {
                        local.push((child, Box::<[u8]>::from(name), may_list(i, cred)))
                    }
                    Some(_) => {}
                    None if !t.range.contains(child) => remote.push(child),
                    None => {}
                }
            }
            (local, remote, n)
        })?;
        listed += n;
        if listed > budget {
            return Ok(false);
        }
        let mut subs = local;
        for child in remote {
            let at = Reader {
                engine,
                foreign: None,
            };
            if let Some((parent, name, ok, _)) = read_dir(at, cred, child, reads)? {
                if parent == d {
                    subs.push((child, name, ok));
                }
            }
        }
        for (child, name, ok) in subs {
            let p: Arc<[u8]> = join(&path, &name).into();
            memo.insert(
                child,
                Status::In {
                    depth: depth + 1,
                    visible: ok,
                    path: p.clone(),
                },
            );
            if ok {
                stack.push((child, p, depth + 1));
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Arc<[u8]> {
        s.as_bytes().into()
    }

    /// The depth when in scope, `Some(None)` when out, `None` when unknown.
    fn depth(abs: &str, open: bool, root: bool, scope: &str) -> Option<Option<u32>> {
        let path = p(abs);
        relative(&path, components(&path), open, root, scope.as_bytes()).map(|st| match st {
            Status::In { depth, .. } => Some(depth),
            Status::Out => None,
        })
    }

    #[test]
    fn relative_status_from_absolute_paths() {
        for (open, root) in [(true, false), (false, true), (true, true)] {
            let d = |abs, scope| depth(abs, open, root, scope);
            assert_eq!(d("/", "/"), Some(Some(0)));
            assert_eq!(d("/a/b", "/"), Some(Some(2)));
            assert_eq!(d("/a/b", "/a"), Some(Some(1)));
            assert_eq!(d("/a", "/a"), Some(Some(0)));
            assert_eq!(d("/ab/c", "/a"), Some(None));
            assert_eq!(d("/a", "/a/b"), Some(None));
            assert_eq!(d("/", "/a"), Some(None));
            assert_eq!(d("/x/a/b", "/a"), Some(None));
        }
        // Not open to all, another caller: out is still out, in is unknown.
        assert_eq!(depth("/a/b", false, false, "/a"), None);
        assert_eq!(depth("/x/b", false, false, "/a"), Some(None));
    }
}
