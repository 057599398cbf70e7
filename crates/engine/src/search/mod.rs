//! Metadata search: `find`-like queries answered from the tables' indexes
//! (DESIGN.md: "which files under /proj does uid 3704 own that are over
//! 1 GB and changed this week?").
//!
//! - [`query`]: the expression tree ([`Expr`], [`Pred`]) and its exact
//!   evaluator.
//! - [`mod@plan`]: the constraints every match satisfies ([`Plan`]), handed to
//!   the per-table index ([`crate::table::index::IndexQuery`]) to prune.
//! - this module: execution, hits, aggregations, and the engine's search
//!   API ([`Engine::search`] and the other `search_*` methods: an
//!   `impl Engine` block here, since the search sits above the engine and
//!   the engine names nothing of it).
//!
//! # Results
//!
//! A search from scope root `S` reports one hit per *path* below
//! `S` (and `S` itself, at depth 0) whose entry matches the expression —
//! exactly the paths `find S ...` would print, run by the caller, except for
//! order (table order, not directory order). Hard-linked files appear once
//! per link inside the scope. Paths are absolute, built from the parent
//! chain (directory `name`/`parent` fields and each link's name), so they are
//! canonical even when the scope was given through a symlink. The scope
//! root's own name is the last component of that path (`/` for the root).
//! A hit is lent to the caller's visitor ([`HitRef`]: path and attributes
//! borrowed from its table's batch of hits, `hits.rs`); `to_hit` makes a
//! [`SearchHit`] to keep.
//!
//! # Scope: exact ancestry, never locality
//!
//! Child-closest SOIDs put a subtree in [`SoidLayout::subtree_range`] of its
//! root, but that is not a guarantee: a directory renamed into the scope
//! keeps its SOID (and its whole subtree keeps theirs), a file moved in
//! keeps its SOID, hard links put one inode under several directories, and
//! overflow (too-deep roots, too-wide buckets, the catch-all region) puts
//! children of a directory far from it. Conversely, things moved *out* of a
//! directory still have SOIDs inside its range. So membership is decided
//! only by ancestry: a candidate's link `(parent, name)` is in scope iff
//! walking `parent`, `parent.parent`, ... (directories have exactly one
//! parent) reaches `S`. Each directory's status (out of scope, or in scope
//! at depth d with its path and visibility) is computed once per search and
//! memoised, so the walks cost O(directories touched), not O(depth × hits).
//!
//! Table pruning by SOID range alone would need a guarantee the layout
//! does not give (see above). What the engine maintains instead is each
//! table's *exit set* ([`crate::table::exits`]): the directories outside
//! the table that links of its inodes name as their parent. Any chain from
//! an inode of a table to a scope root outside it leaves the table at an
//! exit, so a table that does not contain `S` and none of whose exits is a
//! listable directory at or below `S` (within the depth limit) holds
//! nothing the search could report, and is skipped without touching a row
//! (`scope::decide`, [`SearchStats::tables_out_of_scope`]). Exits only
//! prune; every candidate's ancestry is still decided by its parent chain.
//! Tables that survive are then pruned by their Bloom filters
//! ([`crate::table::index::TableIndex::may_match`]) and K-D trees (only rows in
//! the query box are read).
//!
//! Why exit sets and not recursive per-directory sums (file count and size
//! per subtree, updated on every mutation): a sum kept per directory
//! changes on every create, unlink, size change and rename in *every*
//! ancestor, so a transaction would have to lock the tables of all
//! ancestors — tables above the ones it mutates, against the ascending
//! SOID lock order of [`crate::txn`], on a hot path (the root's sum would
//! be written by every mutation), and across servers once tables are
//! distributed. It would also answer only root's unfiltered totals: any
//! other caller must not see counts under directories it cannot list, and
//! any predicate needs the rows. An exit set depends only on the table's
//! own inodes and range, is kept by the table's inode writes under the lock
//! the mutation already holds, and serves every caller and predicate (the
//! pruned tables' rows are still evaluated exactly). Its cost: reading each
//! table's exits (a few per table) once per search, and resolving each
//! exit's ancestry once (memoised).
//!
//! Recursive statistics are kept per *table* instead
//! ([`crate::table::summary`]: paths and bytes per owner, group and type,
//! updated by the table's inode writes like the exits). Whole-namespace
//! totals for root are their sum, kept until a table's summary changes
//! (`table::summary::Sum`); a subtree's totals for root add up every
//! table whose exits all lie in the scope (`scope::whole`: then every
//! path in it is below the scope root) from its summary without reading a
//! row; a table the scope covers partly (not holding the scope root) is
//! added up from its totals per exit ([`crate::table::summary::by_exit`],
//! kept by its index while no row changed since it was made), the exits
//! in scope only, and searched otherwise — when the
//! expression depends only on owner, group and type, with no depth limit
//! ([`Expr::is_group_only`], [`SearchStats::tables_summarized`]). Another
//! caller's totals are added up the same way from the tables that hold no
//! directory closed to anyone (each summary counts those, [`crate::perm::open_to_all`])
//! and whose exits that caller may list, and from the totals per exit of
//! a table whose closed directories that caller may list none of (then
//! it sees exactly the links whose chain inside the table is open, which
//! the totals per exit count apart); every other table is visited.
//! Other predicates visit every table, as above.
//!
//! # Permissions
//!
//! The caller sees what GNU find run by the caller would list: `S` itself,
//! and an entry below it only if the caller has read *and* search
//! permission ([`check_access`] with `MAY_READ | MAY_EXEC`) on every
//! directory from `S` down to the entry's parent (root passes on
//! directories). The rule is applied before an entry is evaluated, counted
//! or aggregated, so nothing under a directory the caller cannot list leaks:
//! not names, not counts, not sizes. Resolving a path scope checks search
//! permission on its components like any lookup; a SOID scope is taken as
//! given (like an open directory handle). Attributes and extended attributes
//! of visible entries are matched as metadata (the index reads them as the
//! server, as `find`'s `stat` would).
//!
//! # Execution, locks and consistency
//!
//! First, below a scope root other than `/`, the directories that can
//! hold a reportable entry are listed top-down through their entries
//! (`scope::walk_down`, listable ones within the depth limit, at most
//! `scope::WALK_BUDGET` entries, one table lock at a time). When the
//! walk finishes the memo is *complete*: a directory not in it is out of
//! scope (or invisible, or too deep), so every exit and every row's parent
//! is decided by a hash lookup. For `/` (where nothing is out of scope)
//! and scopes too large to list, exits are resolved bottom-up instead,
//! each once, and only for tables the Bloom filters keep.
//!
//! Tables are then visited by a SOID cursor. For each table: under the
//! table map's shared lock and that table's lock only, read its exits and
//! decide (`scope::decide`) — skip; or, if its Bloom filters allow a
//! match, visit, or first resolve exits whose ancestry is not memoised yet
//! (with single-table reads of directories, no lock held, then decide
//! again). A visited table is then locked once more and evaluated entirely
//! under that lock: index pruning, then [`IndexQuery::matches`], each
//! link's ancestry from the memo plus the table's own directories
//! (`scope::status_local`; every chain leaves the table at a resolved
//! exit), the exact expression; paths are built only for hits, and counts
//! (tallies, [`Engine::search_tally`]) build none and clone nothing. Only
//! if an exit appeared concurrently, links whose chains leave through it
//! are cloned and resolved afterwards with fresh reads and re-checked
//! against a fresh read of their table (`fall_back`); if that table moved
//! to another member meanwhile, they are kept as the collect step read
//! them (the rest of its hits were delivered, so its new holder must not
//! search it again, and an empty read must not drop them). Hits are
//! handed to the caller's callback after the lock is released (the
//! callback may call back into the engine). At most one table lock is
//! held at any time, so there is no lock-order question with transactions
//! (which lock in SOID order), and the table map is never held across a
//! callback (its lock is not reentrant).
//!
//! Exits are resolved through the directory paths remembered across
//! searches (`crate::dir_cache`): a directory's absolute path, read by an
//! earlier search and valid until a directory is moved, removed or
//! changes mode (the directory epoch), gives its status for any scope
//! without a read — for root always, for other callers when the directory
//! and its ancestors are open to all (r-x for every class). The exits of
//! one table are looked up under one read lock of the remembered paths.
//! Below a directory, a table whose exits' remembered *place* (the deepest
//! directory all of them lie at or below, kept per version of the table's
//! exit set) lies outside the scope is skipped, and one whose place lies
//! inside is added up from its summary (totals), each with one
//! comparison instead of one per exit.
//!
//! Because the map always partitions the SOID space, the cursor visits every
//! SOID exactly once even while tables split or merge under it: a visited
//! table is searched for the rows from the cursor on, and summed up whole
//! only when it lies wholly ahead of the cursor (a table that merged with
//! one the cursor passed holds rows already reported).
//!
//! Freshness: a mutation applies its writes to the tables *before* its
//! transaction releases the table locks and returns ([`crate::txn`]), and the
//! search takes each table's lock after it started; so every mutation whose
//! call returned before the search started is seen (acknowledged ones a
//! fortiori).
//!
//! Consistency under concurrent mutation is per entry, like `find`'s (which
//! also reads each directory at a different moment): each hit's attributes
//! and link are as of one read of its inode during the search (the same
//! read that decided it matches), each
//! directory on its path as of one read during the search (memoised, so one
//! per directory per search). An entry whose inode and ancestors are not
//! changed during the search is reported iff it matches; an entry changed
//! concurrently may be reported in its old or new state or (when it moves
//! between tables or directories while the search runs) missed or reported
//! twice. It is not a snapshot of the namespace.
//!
//! Parallelism (`parallel.rs`): an unlimited search cuts the SOID space at
//! the tables' first SOIDs as the map was when it started and visits the
//! pieces on [`SearchOptions::threads`] threads (the caller's and
//! workers), each with its own copy of the memo; every piece is visited by the same cursor loop as a
//! sequential search (`visit_range`), restricted to the rows of its
//! piece (the index query's SOID bound), so tables splitting or merging
//! meanwhile are neither missed nor reported twice. Hits reach the caller
//! in the sequential order; counts and tallies ([`Engine::search_tally`])
//! are summed. A limited search runs on one cursor (its answer is the
//! first hits in table order).
//!
//! Cancellation: [`SearchOptions::stop`] is asked before every table (by
//! every worker); a true answer ends the search with what it reported so
//! far.
//!
//! [`SoidLayout::subtree_range`]: crate::soid::SoidLayout::subtree_range
//! [`check_access`]: crate::perm::check_access
//! [`IndexQuery::matches`]: crate::table::index::IndexQuery::matches

mod hits;
mod parallel;
pub mod plan;
pub mod query;
pub(crate) mod scope;
mod spread;

pub use hits::HitRef;
pub use plan::{plan, Plan};
pub use query::{glob_match, Entry, Expr, PermMatch, Pred};
pub(crate) use scope::MAX_CHAIN as MAX_CHAIN_LEN;
pub use spread::{intersection, DirChains, DirRecord, ForeignDirs, ForeignReadCounts, Spread};
// Count and total size: a table summary's unit, defined with it.
pub use crate::table::summary::Totals;

use crate::dir_cache::{self, ExitPlace, Relation};
use crate::engine::{Engine, Held};
use crate::hash::FastHash;
use crate::inode::Inode;
use crate::perm::{check_access, class_allows, MAY_EXEC, MAY_READ};
use crate::table::summary::Summary;
use crate::table::Table;
use bytes::Bytes;
use hits::{HitBatch, Hits};
use scope::{Decision, Memo, Status, MAX_CHAIN};
use sextant_types::{Attr, Credentials, FileType, FsError, Soid, SoidRange};
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

/// Where a search starts.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    /// An absolute path, resolved by the caller (symlinks followed except in
    /// the last component, as `find -P` treats its starting point).
    Path(&'a [u8]),
    /// A directory (or any inode) by SOID.
    Soid(Soid),
}

/// One matching path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchHit {
    /// Absolute path: a slice of its table's path buffer (`search::hits`), so
    /// a hit costs no allocation of its own.
    pub path: Bytes,
    pub soid: Soid,
    pub attr: Attr,
    /// Depth below the scope root (0: the root itself).
    pub depth: u32,
}

impl SearchHit {
    /// Gives the hit a path of its own, so that keeping it does not keep
    /// its table's path buffer alive (for consumers that keep a few hits
    /// long, as a top-N or a sample).
    pub fn detach(&mut self) {
        self.path = Bytes::copy_from_slice(&self.path);
    }

    /// The last component (`/` for the root).
    pub fn name(&self) -> &[u8] {
        hits::name_of(&self.path)
    }

    /// The directory part of the path (`/` for entries of the root and for
    /// the root itself).
    pub fn dir(&self) -> &[u8] {
        hits::dir_of(&self.path)
    }

    /// The hit by reference, as a search reports it.
    pub fn as_ref(&self) -> HitRef<'_> {
        HitRef::new(&self.path, &self.attr, self.depth)
    }
}

/// What a search did, for tests, benchmarks and `EXPLAIN`-like output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Tables visited by the cursor.
    pub tables: usize,
    /// Tables skipped by their Bloom filters without reading a row.
    pub tables_pruned: usize,
    /// Tables added up from their maintained summaries without reading a
    /// row (every path in them is in scope, `scope::whole`); counted in
    /// `tables` too.
    pub tables_summarized: usize,
    /// Of `tables_summarized`, the tables the scope covers partly, added
    /// up from their totals per exit ([`crate::table::summary::by_exit`]).
    pub tables_summarized_by_exit: usize,
    /// Tables skipped because their exit sets show they hold nothing
    /// visible below the scope root ([`crate::table::exits`]); counted in
    /// `tables` too.
    pub tables_out_of_scope: usize,
    /// Rows the K-D trees (and changed-row sets) reported.
    pub candidates: usize,
    /// Links that passed the index query and the path-free evaluation.
    pub links_checked: usize,
    /// Directory inodes read to resolve ancestry.
    pub dir_reads: usize,
    pub hits: usize,
}

/// Grouping for [`Engine::search_aggregate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    Uid,
    Gid,
    Type,
    /// Bytes after the last `.` of the name (empty without `.`).
    Extension,
    /// The directory part of the path.
    Directory,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupKey {
    Uid(u32),
    Gid(u32),
    Type(FileType),
    Extension(Box<[u8]>),
    Directory(Box<[u8]>),
}

/// Matches grouped. Counted per path, like `find ... | wc -l` (a file with
/// two links in scope counts twice).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregation {
    pub groups: BTreeMap<GroupKey, Totals>,
    pub total: Totals,
}

impl GroupBy {
    pub fn key(self, hit: HitRef<'_>) -> GroupKey {
        match self {
            GroupBy::Uid => GroupKey::Uid(hit.attr.uid),
            GroupBy::Gid => GroupKey::Gid(hit.attr.gid),
            GroupBy::Type => GroupKey::Type(hit.attr.ftype),
            GroupBy::Extension => GroupKey::Extension(extension(hit.name()).into()),
            GroupBy::Directory => GroupKey::Directory(hit.dir().into()),
        }
    }
}

/// Bytes after the last `.` of a name (empty without `.`).
fn extension(name: &[u8]) -> &[u8] {
    match name.iter().rposition(|&c| c == b'.') {
        Some(i) => &name[i + 1..],
        None => &[],
    }
}

impl Aggregation {
    pub fn add(&mut self, by: GroupBy, hit: HitRef<'_>) {
        self.add_key(by.key(hit), hit.attr.size);
    }

    /// Counts `hit` in its group by `by`, or only in the total (`None`).
    pub fn add_hit(&mut self, by: Option<GroupBy>, hit: HitRef<'_>) {
        match by {
            Some(by) => self.add(by, hit),
            None => self.total.add(hit.attr.size),
        }
    }

    /// Adds `t` to group `key`.
    pub fn add_totals(&mut self, key: GroupKey, t: Totals) {
        let g = self.groups.entry(key).or_default();
        g.count += t.count;
        g.size += t.size;
        self.total.count += t.count;
        self.total.size += t.size;
    }

    /// Adds every group and the total of `other`.
    pub fn merge(&mut self, other: Aggregation) {
        for (key, t) in other.groups {
            let g = self.groups.entry(key).or_default();
            g.count += t.count;
            g.size = g.size.saturating_add(t.size);
        }
        self.total.count += other.total.count;
        self.total.size = self.total.size.saturating_add(other.total.size);
    }

    /// Counts one path of `size` bytes in group `key`.
    pub fn add_key(&mut self, key: GroupKey, size: u64) {
        let t = self.groups.entry(key).or_default();
        t.count += 1;
        t.size += size;
        self.total.count += 1;
        self.total.size += size;
    }
}

/// A candidate inode whose link's ancestry could not be decided under its
/// table's lock (the chain left the table at a directory not yet memoised:
/// only when exits changed concurrently). Resolved with engine reads and
/// re-checked, as every hit was before exit sets.
struct Cand {
    soid: Soid,
    inode: Inode,
    dir_has_entries: bool,
    parent: Soid,
    name: Box<[u8]>,
}

/// A link confirmed in scope and visible, matching as of the collect step.
struct Pending {
    soid: Soid,
    /// The inode as the collect step read it: the hit if its table moved
    /// to another member before the re-check ([`fall_back`]).
    inode: Inode,
    parent: Soid,
    name: Box<[u8]>,
    path: Vec<u8>,
    depth: u32,
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if dir != b"/" {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn may_list(inode: &Inode, cred: &Credentials) -> bool {
    inode.is_dir() && check_access(inode, cred, MAY_READ | MAY_EXEC).is_ok()
}

/// What one search carries from table to table.
struct Search<'a> {
    engine: &'a Engine,
    cred: &'a Credentials,
    memo: Memo,
    stats: SearchStats,
    /// The directory epoch the search began at and the scope root's
    /// absolute path ([`dir_cache`], [`scope::status_remote`]).
    dir_cache: Option<(u64, Arc<[u8]>)>,
    /// Directories other members hold ([`Spread`]).
    foreign: scope::Foreign<'a>,
}

impl Search<'_> {
    fn status(&mut self, d: Soid) -> Result<Status, FsError> {
        let remembered = self.dir_cache.as_ref().map(|(e, p)| (*e, &p[..]));
        let reads = &mut self.stats.dir_reads;
        let at = scope::Reader {
            engine: self.engine,
            foreign: self.foreign,
        };
        scope::status_remote(at, self.cred, &mut self.memo, remembered, d, reads)
    }

    /// [`Self::status`] of each of `dirs`, memoised.
    fn resolve(&mut self, dirs: &[Soid]) -> Result<(), FsError> {
        let remembered = self.dir_cache.as_ref().map(|(e, p)| (*e, &p[..]));
        let reads = &mut self.stats.dir_reads;
        let at = scope::Reader {
            engine: self.engine,
            foreign: self.foreign,
        };
        scope::statuses(at, self.cred, &mut self.memo, remembered, dirs, reads)
    }

    fn read_dir(&mut self, d: Soid) -> Result<Option<scope::DirInfo>, FsError> {
        let at = scope::Reader {
            engine: self.engine,
            foreign: self.foreign,
        };
        scope::read_dir(at, self.cred, d, &mut self.stats.dir_reads)
    }
}

/// Everything the collect step of one table needs besides the table.
struct Collect<'a> {
    job: &'a Job<'a>,
    /// The job's plan, narrowed to the work item's SOID range.
    plan: &'a Plan,
    memo: &'a mut Memo,
    stats: &'a mut SearchStats,
    /// Matches are added up here instead of becoming hits.
    lean: Option<&'a mut Tallies>,
    /// Hits wanted at most (the rest of the limit).
    want: usize,
    hits: HitBatch,
    fallback: Vec<Cand>,
}

impl Collect<'_> {
    /// Evaluates the table's candidates under its lock: index pruning,
    /// [`IndexQuery::matches`], ancestry from the memo and the table's own
    /// directories ([`scope::status_local`]), the exact expression. Hits
    /// go to `hits` (paths built only for these) or the tallies; links
    /// whose ancestry needs other tables go to `fallback`. No inode is
    /// cloned except for a fallback.
    fn table(&mut self, t: &Table) {
        let plan = self.plan;
        let q = &plan.query;
        if !t.index.may_match(q) {
            self.stats.tables_pruned += 1;
            return;
        }
        self.hits = HitBatch::for_table(t.inode_count());
        // The last parent found in the memo and what it said (its depth,
        // its path in `last_path`; `None`: out of scope or not visible): a
        // directory's files are neighbouring rows, so most candidates of a
        // broad query need no hash lookup. The path is copied, not shared:
        // memoised paths are shared by the threads of a search, and
        // counting references to them from both cores cost more than the
        // lookups saved.
        let mut last: Option<(Soid, Option<u32>)> = None;
        let mut last_path: Vec<u8> = Vec::new();
        t.index.candidates(t, q, |row| {
            if self.hits.len() >= self.want {
                return;
            }
            let Some((soid, inode)) = t.row(row) else {
                return;
            };
            self.stats.candidates += 1;
            // With a complete memo, scope first: one lookup per link
            // rejects a row outside the scope before anything else.
            if self.job.complete
                && !inode.all_links().any(|(p, _)| {
                    matches!(self.memo.get(&p), Some(Status::In { visible: true, .. }))
                })
            {
                return;
            }
            // The names are checked link by link below by the expression
            // itself: the index's name constraints only restate what it
            // requires (checking both cost a tenth of a name query). Only
            // where the expression needs the path do they go first, so
            // that no path is built for a name they rule out.
            if *soid == self.job.root || !q.matches_attrs(*soid, inode) {
                return;
            }
            let has = inode.is_dir() && t.has_entries(*soid);
            let links = inode
                .all_links()
                .filter(|(_, n)| !self.job.uses_path || q.matches_name(n));
            for (parent, name) in links {
                let e = Entry {
                    path: None,
                    name,
                    // Every link here is below the scope root; with
                    // everything visible the depth tests pass at any depth
                    // ≥ 1 (`Job::everything_visible`), so 1 decides them.
                    depth: self.job.everything_visible.then_some(1),
                    soid: *soid,
                    inode,
                    dir_has_entries: has,
                };
                let decided = self.job.expr.eval(&e);
                if decided == Some(false) {
                    continue;
                }
                self.stats.links_checked += 1;
                if let (true, Some(tallies)) =
                    (self.job.everything_visible, self.lean.as_deref_mut())
                {
                    if decided == Some(true) {
                        self.stats.hits += 1;
                        tallies.add(inode, name);
                    }
                    continue;
                }
                // A memoised parent (the last one again, or by one hash
                // lookup); with a complete memo, one not in it is out;
                // else read up the chain within the table.
                if last.as_ref().is_none_or(|(p, _)| *p != parent) {
                    match self.memo.get(&parent) {
                        Some(Status::In {
                            depth,
                            visible: true,
                            path,
                        }) => {
                            last_path.clear();
                            last_path.extend_from_slice(path);
                            last = Some((parent, Some(*depth)));
                        }
                        Some(_) => last = Some((parent, None)),
                        None if self.job.complete => continue,
                        None => {}
                    }
                }
                match &last {
                    Some((p, Some(depth))) if *p == parent => {
                        let out = Out {
                            expr: self.job.expr,
                            stats: self.stats,
                            lean: self.lean.as_deref_mut(),
                            hits: &mut self.hits,
                        };
                        out.emit(plan, e, decided, depth.saturating_add(1), &last_path);
                        continue;
                    }
                    Some((p, None)) if *p == parent => continue,
                    _ => {}
                }
                let Some(st) = scope::status_local(t, self.job.cred, self.memo, false, parent)
                else {
                    self.fallback.push(Cand {
                        soid: *soid,
                        inode: inode.clone(),
                        dir_has_entries: has,
                        parent,
                        name: name.into(),
                    });
                    continue;
                };
                let Status::In {
                    depth,
                    visible: true,
                    path,
                } = st
                else {
                    continue;
                };
                let out = Out {
                    expr: self.job.expr,
                    stats: self.stats,
                    lean: self.lean.as_deref_mut(),
                    hits: &mut self.hits,
                };
                out.emit(plan, e, decided, depth.saturating_add(1), &path);
            }
        });
    }
}

/// Where [`Collect`] puts a link known to be in scope and visible.
struct Out<'a, 'c> {
    expr: &'a Expr,
    stats: &'a mut SearchStats,
    lean: Option<&'a mut Tallies>,
    hits: &'c mut HitBatch,
}

impl Out<'_, '_> {
    /// The link `e` at `depth` below the scope root, its directory at
    /// `dir_path`: checked exactly, then counted or made a hit (the path
    /// built only then).
    ///
    /// `decided` is the expression's value without path and depth (from
    /// the collect step): `Some(true)` needs no second evaluation.
    fn emit(
        self,
        plan: &Plan,
        mut e: Entry<'_>,
        decided: Option<bool>,
        depth: u32,
        dir_path: &[u8],
    ) {
        if depth < plan.min_depth || depth > plan.max_depth {
            return;
        }
        e.depth = Some(depth);
        // Decided without the path (the common case: no -path/-wholename
        // test): no second evaluation, and no path built for a miss.
        let decided = match decided {
            Some(true) => Some(true),
            _ => self.expr.eval(&e),
        };
        if let Some(tallies) = self.lean {
            if decided == Some(true) {
                self.stats.hits += 1;
                tallies.add(e.inode, e.name);
            }
            return;
        }
        if decided == Some(false) {
            return;
        }
        let (inode, soid) = (e.inode, e.soid);
        let full = self.hits.stage(dir_path, e.name);
        let with_path = Entry {
            path: Some(full),
            ..e
        };
        if decided == Some(true) || self.expr.matches(&with_path) {
            self.hits.keep(inode.attr(soid), depth);
        }
    }
}

/// How a search runs, besides what it asks for.
#[derive(Clone, Copy)]
pub struct SearchOptions<'a> {
    /// Hits reported at most (`usize::MAX`: all).
    pub limit: usize,
    /// Threads visiting tables at once (1: the caller's thread only).
    /// Only unlimited searches run in parallel: a limited one reports the
    /// first hits in table order, which needs one cursor.
    pub threads: usize,
    /// Asked between tables: `true` stops the search (the call returns
    /// what it reported so far, `Ok`). A cancelled client costs at most one
    /// more table visit per thread.
    pub stop: Option<&'a (dyn Fn() -> bool + Sync)>,
    /// Hits a parallel search holds for the caller at most before its
    /// workers pause (they wait while the caller's `visit` is slow).
    pub buffered_hits: usize,
    /// A parallel search starts its worker threads only once it has run
    /// this long on the caller's thread alone (zero: at once; default 2
    /// ms). Until then it reports hits as a sequential search does. A
    /// worker started at once cost set 1 at 10M files 0.83 ms against 0.27
    /// ms on one thread (thread start, memo copy, the shared map per
    /// table); started lazily it is 0.37 – 0.39 ms (docs/BENCHMARKS.md).
    pub spawn_after: std::time::Duration,
    /// Tallies over a subtree may add up tables that lie wholly in it (and,
    /// for a caller other than root, hold no directory closed to anyone)
    /// from their maintained summaries (default true; false visits every
    /// such table, for benchmarks to compare).
    pub summaries: bool,
    /// The search may use and fill the directory paths remembered across
    /// searches (`dir_cache`; default true; false resolves every
    /// directory afresh, for benchmarks to compare).
    pub dir_cache: bool,
    /// Entries a search below a directory other than `/` lists top-down
    /// to find the directories in scope before it resolves the tables'
    /// exits bottom-up instead (default `scope::WALK_BUDGET`).
    pub walk_budget: usize,
    /// A member of a cluster whose namespace is spread: the ranges it
    /// searches and how it reads other members' directories
    /// ([`Spread`]); `None`: the tables held here, as on one server.
    pub spread: Option<&'a Spread<'a>>,
}

impl Default for SearchOptions<'_> {
    fn default() -> Self {
        SearchOptions {
            limit: usize::MAX,
            threads: default_threads(),
            stop: None,
            buffered_hits: parallel::MAX_BUFFERED_HITS,
            spawn_after: parallel::SPAWN_AFTER,
            summaries: true,
            dir_cache: true,
            walk_budget: scope::WALK_BUDGET,
            spread: None,
        }
    }
}

impl SearchOptions<'_> {
    /// At most `limit` hits.
    pub fn limit(limit: usize) -> Self {
        SearchOptions {
            limit,
            ..SearchOptions::default()
        }
    }

    fn stopped(&self) -> bool {
        self.stop.is_some_and(|f| f())
    }
}

/// The machine's cores, at most `parallel::MAX_THREADS` (16). Asked once
/// per process: on Linux the standard library reads cgroup files to
/// answer, which is not for every search.
pub fn default_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, parallel::MAX_THREADS)
    })
}

// ---- the engine's search API ---------------------------------------------
// An `impl Engine` block here rather than in `crate::engine`: the search
// sits above the engine (it reads tables through the engine's
// `with_held_indexed_table`, `dir_cache_*` and `table_starts`), and the engine
// names nothing of it.

impl Engine {
    /// Runs a `find`-like search from `scope` as `cred`, calling `visit` with
    /// each hit (outside every engine lock) until it breaks or `limit` hits
    /// were reported (`usize::MAX`: no limit), on the default number of
    /// threads. A hit is lent to `visit` ([`HitRef`]); `to_hit` makes one
    /// to keep. See [`crate::search`] for semantics, permissions and
    /// consistency.
    pub fn search(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        limit: usize,
        visit: impl FnMut(HitRef<'_>) -> ControlFlow<()>,
    ) -> Result<SearchStats, FsError> {
        let opts = SearchOptions::limit(limit);
        run(self, cred, scope, expr, &opts, visit)
    }

    /// [`Engine::search`] with its limit, threads and stop check given.
    pub fn search_with(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        opts: &SearchOptions<'_>,
        visit: impl FnMut(HitRef<'_>) -> ControlFlow<()>,
    ) -> Result<SearchStats, FsError> {
        run(self, cred, scope, expr, opts, visit)
    }

    /// [`Engine::search`] without the indexes: every table visited, every
    /// row read and checked exactly. Same results, for benchmarks (the
    /// brute-force baseline over the same in-memory data) and tests.
    pub fn search_scan(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        limit: usize,
        visit: impl FnMut(HitRef<'_>) -> ControlFlow<()>,
    ) -> Result<SearchStats, FsError> {
        let opts = SearchOptions::limit(limit);
        self.search_scan_with(cred, scope, expr, &opts, visit)
    }

    /// [`Engine::search_scan`] with its limit, threads and stop check given
    /// (a benchmark compares index and scan on the same threads).
    pub fn search_scan_with(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        opts: &SearchOptions<'_>,
        mut visit: impl FnMut(HitRef<'_>) -> ControlFlow<()>,
    ) -> Result<SearchStats, FsError> {
        run_with(self, cred, scope, expr, opts, false, None, &mut visit)
    }

    /// Count and total size of the matches of a search (`by`: grouped;
    /// `None`: the total only), added up without building paths unless the
    /// expression or the grouping needs them. For `find -count`, `du`,
    /// `stats`. Never from the maintained summaries (see
    /// [`Engine::search_aggregate`]).
    pub fn search_tally(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        by: Option<GroupBy>,
        opts: &SearchOptions<'_>,
    ) -> Result<(Aggregation, SearchStats), FsError> {
        tally(self, cred, scope, expr, by, opts)
    }

    /// [`Engine::search`], collecting up to `limit` hits.
    pub fn search_collect(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        limit: usize,
    ) -> Result<Vec<SearchHit>, FsError> {
        let mut hits = Vec::new();
        self.search(cred, scope, expr, limit, |h| {
            hits.push(h.to_hit());
            ControlFlow::Continue(())
        })?;
        Ok(hits)
    }

    /// Count and total size of the matches of a search, grouped by `by`.
    pub fn search_aggregate(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        by: GroupBy,
    ) -> Result<Aggregation, FsError> {
        aggregate(self, cred, scope, expr, by)
    }

    /// [`Engine::search_aggregate`]'s answer from the tables' maintained
    /// summaries, when they give exactly what the search would (the whole
    /// namespace, for root or — with no directory closed to anyone — any
    /// caller; an expression of owner, group and type; grouped by uid, gid
    /// or type, or — `by` `None` — the total only); `None` when a search
    /// is needed.
    pub fn aggregate_from_summaries(
        &self,
        cred: &Credentials,
        scope: Scope<'_>,
        expr: &Expr,
        by: impl Into<Option<GroupBy>>,
    ) -> Result<Option<Aggregation>, FsError> {
        from_summaries(self, cred, scope, expr, by.into())
    }
}

/// Whether a tally (a count, or totals grouped by something other than
/// the directory) by `cred` of `expr` below `root` counts every link below
/// `/` without ancestry (`Job::tally_without_ancestry`): root, from `/`, no
/// path test, depth tests that every depth ≥ 1 passes. A spread search of
/// it then reads no other member's directory but the scope root's record,
/// so a server need not check what it kept of the others' directories
/// first.
pub fn tally_needs_no_ancestry(
    cred: &Credentials,
    root: Soid,
    expr: &Expr,
    by: Option<GroupBy>,
) -> bool {
    by != Some(GroupBy::Directory) && everything_visible(cred, root, expr, &plan::plan(expr))
}

/// See [`Job::everything_visible`].
fn everything_visible(cred: &Credentials, root: Soid, expr: &Expr, plan: &Plan) -> bool {
    root == Soid::ROOT
        && cred.is_root()
        && plan.min_depth <= 1
        && plan.max_depth == u32::MAX
        && expr.depth_tests_pass_below_root()
        && !expr.uses_path()
}

/// See [`Engine::search`].
pub(crate) fn run(
    engine: &Engine,
    cred: &Credentials,
    scope: Scope<'_>,
    expr: &Expr,
    opts: &SearchOptions<'_>,
    mut visit: impl FnMut(HitRef<'_>) -> ControlFlow<()>,
) -> Result<SearchStats, FsError> {
    run_with(engine, cred, scope, expr, opts, true, None, &mut visit)
}

/// Attempts at deciding one table before it is visited regardless of
/// exits that keep appearing (concurrent renames); links whose ancestry
/// is then unknown take the fallback path.
const DECIDE_ATTEMPTS: usize = 4;

/// What every table visit of one search shares (read-only, so the
/// workers of a parallel search share it too).
struct Job<'a> {
    engine: &'a Engine,
    cred: &'a Credentials,
    plan: &'a Plan,
    expr: &'a Expr,
    root: Soid,
    /// The memo holds every directory that matters ([`scope::walk_down`]).
    complete: bool,
    /// Root searching from `/` with no depth limit and an expression that
    /// needs no path and whose depth tests pass at every depth ≥ 1
    /// ([`Expr::depth_tests_pass_below_root`]): every link below `/` is in scope
    /// (every directory's chain reaches `/`) and visible (root may list
    /// every directory), so a tally needs no ancestry at all — as the
    /// maintained summaries, which answer the same caller without a search.
    everything_visible: bool,
    /// [`Job::everything_visible`] while tallying: no table's exits need
    /// resolving — a table that could be whole ([`scope::could_be_whole`]:
    /// every link's chain leaves it at an exit, and every exit, a
    /// directory of the namespace, is below `/` and listable by root) is
    /// added up from its summary when summaries are taken, any other is
    /// visited, its links tallied without ancestry. On a spread namespace
    /// this is what keeps `stats /` and `du /` as root from reading the
    /// other members' directories at all.
    tally_without_ancestry: bool,
    /// Tallying with a group-only expression ([`Expr::is_group_only`])
    /// and no depth limit, into tallies that take summaries: a table whose
    /// every path is below the scope root and visible ([`scope::whole`];
    /// for a caller other than root, only a table without directories
    /// closed to anyone) is added up from its maintained summary instead of
    /// being visited — the per-subtree recursive statistics of issue 4,
    /// kept per table.
    summarize: bool,
    use_index: bool,
    /// The expression tests the path ([`Expr::uses_path`]).
    uses_path: bool,
    /// This member's part of a spread namespace ([`Spread`]).
    spread: Option<&'a Spread<'a>>,
}

/// Where one table's hits go (sorted by SOID), with the stats of the
/// search visiting it: to the caller (a sequential search, which counts
/// them and stops at the limit) or into a worker's batch.
type Deliver<'a> = &'a mut dyn FnMut(&mut SearchStats, Hits) -> ControlFlow<()>;

/// Where a search's hits go, one by reference at a time (see
/// [`HitRef`]).
pub(crate) type Visit<'a> = &'a mut dyn FnMut(HitRef<'_>) -> ControlFlow<()>;

/// [`run`], or with `use_index` false a brute-force scan: no table pruned,
/// every row read and checked exactly (the baseline benchmarks compare the
/// index with; same results).
///
/// With `lean` tallies (only for expressions that do not use the path, and
/// no limit), matches below the scope root are added up as of the collect
/// step — no path: a concurrently changed entry is counted in its old or
/// new state, as the module docs allow. The scope root itself still goes
/// to `visit`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_with(
    engine: &Engine,
    cred: &Credentials,
    scope: Scope<'_>,
    expr: &Expr,
    opts: &SearchOptions<'_>,
    use_index: bool,
    mut lean: Option<&mut Tallies>,
    visit: Visit<'_>,
) -> Result<SearchStats, FsError> {
    let limit = opts.limit;
    if expr.uses_path() || limit != usize::MAX {
        lean = None;
    }
    let spread = opts.spread;
    // Phase times of a spread search (debug log `sextant::search_timing`).
    let t0 = std::time::Instant::now();
    let root = match scope {
        Scope::Path(p) => engine.resolve(cred, p, false)?.soid,
        Scope::Soid(s) => s,
    };
    // Directory paths are remembered across searches: the epoch is taken
    // first, before any directory is read. Not by a spread search unless
    // its caller vouches for them (the epoch does not see renames on
    // other members: [`Spread::remembering`]).
    let epoch = (use_index && opts.dir_cache && spread.is_none_or(Spread::remembers))
        .then(|| engine.dir_cache_begin());
    let mut s = Search {
        engine,
        cred,
        memo: Memo::default(),
        stats: SearchStats::default(),
        dir_cache: None,
        foreign: spread,
    };
    if limit == 0 {
        return Ok(s.stats);
    }
    // Member mode: the scope root must be in one of this member's tables
    // (tables of other members look empty to a search here) — unless the
    // namespace is searched spread, where another member may hold it.
    if spread.is_none() && engine.member_name().is_some() && engine.table_holding(root).is_none() {
        return Err(FsError::WrongServer { soid: root });
    }
    // The scope root: its inode (or, held by another member, its directory
    // record: only its holder reports it), then its canonical path.
    let held = engine.with_held_table(root, |t| (t.inode(root).cloned(), t.has_entries(root)))?;
    if let Some(sp) = spread {
        sp.set_root(root);
    }
    let (root_inode, root_has, root_held) = match (held, spread) {
        (Held::Table((_, (inode, has))), _) => (inode.ok_or(FsError::NotFound)?, has, true),
        (Held::Foreign(_), Some(sp)) => {
            // Its holder reports it (the asker gives it the root).
            if sp.covers(root) {
                sp.note_root_not_held();
            }
            // `/` searched by root, nothing remembered (`epoch`: its
            // openness would be offered to later searches): its record
            // decides nothing — `/` always exists, is a directory, has no
            // ancestors, and root may list it whatever its mode — so it is
            // not read from its holder (a round trip per part of every
            // `stats /`, each server's before its tables).
            if root == Soid::ROOT && cred.is_root() && epoch.is_none() {
                let record = DirRecord {
                    soid: root,
                    parent: root,
                    name: Box::default(),
                    perm: 0o755,
                    uid: 0,
                    gid: 0,
                };
                (dir_of_record(&record), false, false)
            } else {
                match sp.record(root)? {
                    Some(r) => (dir_of_record(&r), false, false),
                    // Not a directory, or gone: its holder answers.
                    None => return Ok(s.stats),
                }
            }
        }
        (Held::Foreign(_), None) => return Err(FsError::WrongServer { soid: root }),
    };
    // The scope root is reported by the member whose ranges hold it and
    // that holds its table as the search starts; the rows the cursor
    // reports never include it, and a spread search's ranges met as
    // another member's leave it out ([`Spread`]).
    let report_root = root_held && spread.is_none_or(|sp| sp.covers(root));
    let mut names: Vec<Box<[u8]>> = Vec::new();
    let mut cur = root;
    let (mut parent, mut name): (Soid, Box<[u8]>) =
        (root_inode.parent, Box::from(&root_inode.name));
    // Whether the scope root and every ancestor are open to all.
    let mut all_open = scope::open_to_all(root_inode.perm);
    while cur != Soid::ROOT {
        names.push(name);
        if names.len() > MAX_CHAIN {
            return Err(FsError::NotFound);
        }
        cur = parent;
        let Some((p, n, _, open)) = s.read_dir(cur)? else {
            return Err(FsError::NotFound);
        };
        (parent, name) = (p, n);
        all_open &= open;
    }
    let mut root_path: Vec<u8> = b"/".to_vec();
    for n in names.iter().rev() {
        root_path = join(&root_path, n);
    }
    let root_name: Box<[u8]> = if root == Soid::ROOT {
        b"/"[..].into()
    } else {
        names.first().cloned().unwrap_or_default()
    };
    let root_path_shared: Arc<[u8]> = root_path.clone().into();
    s.dir_cache = epoch.map(|e| (e, Arc::clone(&root_path_shared)));
    if let (Some(e), true) = (epoch, root_inode.is_dir()) {
        // The scope root is memoised, so chains read up to it learn their
        // openness from its remembered entry.
        let entry = (root, Arc::clone(&root_path_shared), all_open);
        engine.dir_cache_offer(e, vec![entry]);
    }
    s.memo.insert(
        root,
        Status::In {
            depth: 0,
            visible: may_list(&root_inode, cred),
            path: root_path_shared,
        },
    );
    let root_entry = Entry {
        path: Some(&root_path),
        name: &root_name,
        depth: Some(0),
        soid: root,
        inode: &root_inode,
        dir_has_entries: root_has,
    };
    if report_root && expr.matches(&root_entry) {
        s.stats.hits += 1;
        let (path, attr) = (Bytes::from(root_path.clone()), root_inode.attr(root));
        if visit(HitRef::new(&path, &attr, 0)).is_break() || s.stats.hits >= limit {
            return Ok(s.stats);
        }
    }
    let mut plan = plan::plan(expr);
    if !may_list(&root_inode, cred) || plan.is_empty() || plan.max_depth == 0 {
        return Ok(s.stats);
    }
    if !use_index {
        plan.query = Plan::everything().query;
    }

    // Below a directory other than the root, list the directories that
    // matter top-down when there are not too many: then every table's
    // exits are decided from the memo without a read.
    let complete = use_index
        && spread.is_none()
        && root != Soid::ROOT
        && scope::walk_down(
            engine,
            cred,
            &mut s.memo,
            root,
            plan.max_depth,
            opts.walk_budget,
            &mut s.stats.dir_reads,
        )?;
    let everything_visible = everything_visible(cred, root, expr, &plan);
    let job = Job {
        engine,
        cred,
        plan: &plan,
        expr,
        root,
        complete,
        everything_visible,
        tally_without_ancestry: everything_visible && lean.is_some(),
        summarize: use_index
            && opts.summaries
            && lean.as_deref().is_some_and(Tallies::takes_summaries)
            && expr.is_group_only()
            && plan.min_depth <= 1
            && plan.max_depth == u32::MAX,
        use_index,
        uses_path: expr.uses_path(),
        spread,
    };

    let t_root = t0.elapsed();
    if let (Some(sp), usize::MAX, false) = (spread, limit, job.tally_without_ancestry) {
        prefetch_exits(&s, sp, &plan, use_index)?;
    }
    let t_prefetch = t0.elapsed();
    let timing = |s: &Search<'_>| {
        if let Some(sp) = spread {
            let r = sp.reads();
            tracing::debug!(
                target: "sextant::search_timing",
                root_us = t_root.as_micros() as u64,
                prefetch_us = (t_prefetch - t_root).as_micros() as u64,
                visit_us = (t0.elapsed() - t_prefetch).as_micros() as u64,
                rounds = r.rounds,
                asked = r.asked,
                records = r.records,
                waited_us = r.waited_us,
                dir_reads = s.stats.dir_reads,
                tables = s.stats.tables,
                summarized = s.stats.tables_summarized,
                "spread search phases"
            );
        }
    };
    let ranges = spread.map_or_else(|| vec![SoidRange::ALL], |sp| sp.ranges().to_vec());
    if opts.threads > 1 && limit == usize::MAX {
        let mut items = parallel::work_items(&engine.table_starts());
        if let Some(sp) = spread {
            items = sp.restrict(&items);
        }
        if items.len() > 1 {
            parallel::run(&job, &mut s, items, opts, lean, visit)?;
            timing(&s);
            return Ok(s.stats);
        }
    }
    let halted = || opts.stopped();
    for range in ranges {
        let flow = visit_range(
            &job,
            &mut s,
            range,
            lean.as_deref_mut(),
            limit,
            &halted,
            &mut |stats, hits| report(stats, hits, limit, visit),
        )?;
        // Stopped (or at the limit): the stats so far are the answer.
        if flow.is_break() {
            break;
        }
    }
    timing(&s);
    Ok(s.stats)
}

/// Reads ahead the other members' directories that the exits of every
/// table a spread search will decide lead to ([`scope::prefetch`]): a few
/// round trips for the whole search instead of one or more per table.
/// The tables the filters rule out are left out (their exits are never
/// resolved). Only reads: each table is still decided under its lock
/// when the cursor comes, from these records or from new reads.
fn prefetch_exits(
    s: &Search<'_>,
    sp: &Spread<'_>,
    plan: &Plan,
    use_index: bool,
) -> Result<(), FsError> {
    let mut exits = Vec::new();
    for item in sp.restrict(&parallel::work_items(&s.engine.table_starts())) {
        s.engine.with_held_table(item.first, |t| {
            if use_index && !t.index.may_match(&plan.query) {
                return;
            }
            exits.extend(t.exits().dirs().filter(|e| !s.memo.contains_key(e)));
        })?;
    }
    // Exits whose remembered paths decide them need no read (most of
    // them, once the searches have remembered the paths).
    if let Some((epoch, scope_path)) = &s.dir_cache {
        let root = s.cred.is_root();
        s.engine.dir_cache_read(|c| {
            exits.retain(|e| {
                c.peek(*epoch, *e).is_none_or(|((path, open), depth)| {
                    scope::relative(path, depth, *open, root, scope_path).is_none()
                })
            });
        });
    }
    exits.sort_unstable();
    exits.dedup();
    let at = scope::Reader {
        engine: s.engine,
        foreign: s.foreign,
    };
    scope::prefetch(at, &s.memo, &exits)
}

/// A directory held by another member as the search needs it of a scope
/// root: its name, parent and permission (the rest unknown: such a root
/// is never reported, only searched below).
fn dir_of_record(r: &DirRecord) -> Inode {
    Inode {
        ftype: FileType::Directory,
        perm: r.perm,
        uid: r.uid,
        gid: r.gid,
        nlink: 2,
        size: 0,
        atime: Default::default(),
        mtime: Default::default(),
        ctime: Default::default(),
        parent: r.parent,
        name: r.name[..].into(),
        extra: None,
    }
}

/// Hands `hits` to `visit` in order, counting them in `stats`; breaks when
/// `visit` does or the count reaches `limit`.
fn report(stats: &mut SearchStats, hits: Hits, limit: usize, visit: Visit<'_>) -> ControlFlow<()> {
    for hit in hits.iter() {
        stats.hits += 1;
        if visit(hit).is_break() || stats.hits >= limit {
            return ControlFlow::Break(());
        }
    }
    ControlFlow::Continue(())
}

/// Visits the tables overlapping `range` by a SOID cursor, for the rows of
/// `range` only (so that work items of a parallel search never report a
/// row twice, even when tables merged since the items were cut), and hands
/// each table's hits to `deliver`. Returns `Break` when `deliver` or
/// `halted` stopped it.
fn visit_range(
    job: &Job<'_>,
    s: &mut Search<'_>,
    range: SoidRange,
    mut lean: Option<&mut Tallies>,
    limit: usize,
    halted: &dyn Fn() -> bool,
    deliver: Deliver<'_>,
) -> Result<ControlFlow<()>, FsError> {
    // Deciding a table needs no narrowing (filters and scope do not look
    // at SOIDs, and a table holding the cursor overlaps the range); the
    // plan narrowed to the range is made only for a table that is visited
    // — a parallel search has one item per table, most of them pruned.
    //
    // A visited table is searched for the rows from the cursor on only:
    // a table that merged with one the cursor already passed covers that
    // one's rows too, reported already (a parallel search's pieces are
    // cut so anyway). The plan narrowed so is made again only when the
    // cursor moved.
    let plan = job.plan;
    let mut narrowed: Option<(Soid, Plan)> = None;
    let (engine, use_index, complete) = (job.engine, job.use_index, job.complete);
    // Exit places ([`dir_cache::ExitPlace`]) decide most tables of a
    // subtree search whose memo is not complete with one comparison each.
    let places = match &s.dir_cache {
        Some((epoch, scope_path)) if use_index && !complete && job.root != Soid::ROOT => {
            Some((*epoch, Arc::clone(scope_path)))
        }
        _ => None,
    };
    let mut cursor = range.first;
    let mut attempts = 0;
    loop {
        if halted() {
            return Ok(ControlFlow::Break(()));
        }
        // Decide from the filters and exits (cheap, no index rebuild);
        // resolve unknown exits outside every lock and decide again.
        let held = engine.with_held_table(cursor, |t| {
            // With a complete memo exits are a few lookups that rule out
            // most tables of a small scope: first. Otherwise the filters
            // first, so exits are resolved only for tables they keep.
            let filtered = |t: &Table| use_index && !t.index.may_match(&plan.query);
            if !complete && filtered(t) {
                return None;
            }
            // Only a table inside this piece of the SOID space, and
            // wholly ahead of the cursor: one merged since a parallel
            // search cut its pieces, or with a table the cursor passed, is
            // visited (row by row, from the cursor on), so that no summary
            // adds rows another piece, or this one, also counts.
            let in_item =
                |t: &Table| job.summarize && cursor <= t.range.first && t.range.last <= range.last;
            // The whole summary: for a caller other than root, only of a
            // table whose directories every caller may list (then what may
            // be listed in it depends only on its exits, as for root). The
            // totals per exit judge closed directories themselves
            // (`exits_in_scope`).
            let summarizable =
                |t: &Table| in_item(t) && (job.cred.is_root() || t.summary().closed_dirs() == 0);
            // Under the same lock as the decision: the summary and the
            // exits are of one state of the table.
            let mut add_up = |parts: &mut dyn Iterator<Item = &Summary>| {
                if let Some(tallies) = lean.as_deref_mut() {
                    for part in parts {
                        let added = tallies.add_summary(part, job.expr);
                        s.stats.hits = s.stats.hits.saturating_add(added as usize);
                    }
                }
            };
            let mut summarize = |t: &Table| {
                add_up(&mut std::iter::once(t.summary()));
                Some(Decision::Summarized)
            };
            if job.tally_without_ancestry {
                return if summarizable(t) && scope::could_be_whole(t) {
                    summarize(t)
                } else {
                    Some(Decision::Visit)
                };
            }
            let version = t.exits().version();
            let mut place_known = false;
            if let Some((epoch, scope_path)) = &places {
                // (With whether every exit is visible to the caller, for
                // the summaries: root, or every exit open to all.)
                let relation = engine.dir_cache_read(|c| {
                    c.place(*epoch, version)
                        .map(|p| (p.relation(scope_path), job.cred.is_root() || p.all_open))
                });
                place_known = relation.is_some();
                match relation {
                    // No exit at or below the scope root: nothing in the
                    // table is below it unless it holds the root itself.
                    Some((Relation::AllOut, _)) if !t.range.contains(job.root) => {
                        return Some(Decision::Skip)
                    }
                    // Every exit in scope and visible: what `whole`
                    // decides from the memo (see there).
                    Some((Relation::AllIn, true))
                        if summarizable(t) && scope::could_be_whole(t) =>
                    {
                        return summarize(t)
                    }
                    _ => {}
                }
            }
            let decision = scope::decide(t, job.root, plan.max_depth, &s.memo, use_index, complete);
            if let (Some((epoch, _)), false, false) = (
                &places,
                place_known,
                matches!(decision, Decision::Resolve(_)),
            ) {
                // Every exit has been resolved: their paths are remembered
                // (unless the cache was full or moved on).
                let place = engine.dir_cache_read(|c| {
                    let paths: Option<Vec<&dir_cache::Place>> = t
                        .exits()
                        .dirs()
                        .map(|e| c.peek(*epoch, e).map(|(p, _)| p))
                        .collect();
                    paths.and_then(ExitPlace::of)
                });
                if let Some(place) = place {
                    engine.dir_cache_offer_place(*epoch, version, place);
                }
            }
            match decision {
                Decision::Skip => Some(Decision::Skip),
                _ if complete && filtered(t) => None,
                Decision::Visit if summarizable(t) && scope::whole(t, &s.memo) => summarize(t),
                // Covered partly: the exits in scope, when the index has
                // the totals per exit (see `exits_in_scope`) and the table
                // does not hold the scope root (paths below it would leave
                // the table through exits above it).
                Decision::Visit if in_item(t) && !t.range.contains(job.root) => {
                    match exits_in_scope(t, job.cred, &s.memo, complete, plan.max_depth) {
                        Some(parts) => {
                            add_up(&mut parts.into_iter());
                            Some(Decision::SummarizedByExit)
                        }
                        None => Some(Decision::Visit),
                    }
                }
                d => Some(d),
            }
        })?;
        let (table_range, decision) = match held {
            Held::Table(decided) => decided,
            Held::Foreign(table_range) => {
                // Another member's: the asker gives it to its holder.
                if let Some(sp) = job.spread {
                    sp.note_not_held(table_range, range);
                }
                attempts = 0;
                match table_range.last.checked_next().filter(|n| *n <= range.last) {
                    Some(n) => cursor = n,
                    None => return Ok(ControlFlow::Continue(())),
                }
                continue;
            }
        };
        let next = table_range.last.checked_next().filter(|n| *n <= range.last);
        match decision {
            None => {
                s.stats.tables += 1;
                s.stats.tables_pruned += 1;
            }
            Some(Decision::Resolve(exits)) if attempts < DECIDE_ATTEMPTS => {
                attempts += 1;
                s.resolve(&exits)?;
                continue;
            }
            Some(Decision::Skip) => {
                s.stats.tables += 1;
                s.stats.tables_out_of_scope += 1;
            }
            Some(Decision::Summarized) => {
                s.stats.tables += 1;
                s.stats.tables_summarized += 1;
            }
            Some(Decision::SummarizedByExit) => {
                s.stats.tables += 1;
                s.stats.tables_summarized += 1;
                s.stats.tables_summarized_by_exit += 1;
            }
            Some(Decision::Visit | Decision::Resolve(_)) => {
                // Collect under the table's lock (the table at the cursor
                // may have changed since the decision: the collect step
                // needs no decision, only the memo, and falls back where
                // it is incomplete).
                let want = limit.saturating_sub(s.stats.hits);
                let plan: &Plan = if range == SoidRange::ALL && cursor == range.first {
                    job.plan
                } else {
                    if narrowed.as_ref().is_none_or(|(at, _)| *at != cursor) {
                        let mut p = job.plan.clone();
                        p.query = p.query.soid_range(SoidRange {
                            first: cursor,
                            last: range.last,
                        });
                        narrowed = Some((cursor, p));
                    }
                    narrowed.as_ref().map_or(job.plan, |(_, p)| p)
                };
                let mut c = Collect {
                    job,
                    plan,
                    memo: &mut s.memo,
                    stats: &mut s.stats,
                    lean: lean.as_deref_mut(),
                    want,
                    hits: HitBatch::default(),
                    fallback: Vec::new(),
                };
                let visited = match engine.with_held_indexed_table(cursor, |t| c.table(t))? {
                    Held::Table((visited, ())) => visited,
                    Held::Foreign(gone) => {
                        // It moved away since the decision: not searched
                        // here (its new holder searches it).
                        if let Some(sp) = job.spread {
                            sp.note_not_held(gone, range);
                        }
                        gone
                    }
                };
                let (hits, fallback) = (c.hits, c.fallback);
                s.stats.tables += 1;
                let hits = hits.finish();
                if deliver(&mut s.stats, hits).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
                if !fallback.is_empty() {
                    let hits = fall_back(s, fallback, plan, job.expr, lean.as_deref_mut())?;
                    if deliver(&mut s.stats, hits).is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                }
                // The table may have grown since the decision.
                attempts = 0;
                match visited.last.checked_next().filter(|n| *n <= range.last) {
                    Some(n) => cursor = n,
                    None => return Ok(ControlFlow::Continue(())),
                }
                continue;
            }
        }
        attempts = 0;
        match next {
            Some(n) => cursor = n,
            None => return Ok(ControlFlow::Continue(())),
        }
    }
}

/// The totals per exit of `t` ([`TableIndex::summaries_by_exit`]) whose
/// exit is in scope and visible, by the memo: every path under such an
/// exit is below the scope root. For root, or a table of directories open
/// to all, all of them are visible to whoever may list the exit; for
/// another caller, when it may list none of the table's closed
/// directories, exactly those whose chain inside the table is open. `None`
/// when the index has no totals per exit (or rows changed since it was
/// made), an exit is not memoised, or the caller may list a closed
/// directory of the table (then the table is visited).
///
/// [`TableIndex::summaries_by_exit`]: crate::table::index::TableIndex::summaries_by_exit
fn exits_in_scope<'t>(
    t: &'t Table,
    cred: &Credentials,
    memo: &Memo,
    complete: bool,
    max_depth: u32,
) -> Option<Vec<&'t Summary>> {
    let by_exit = t.index.summaries_by_exit(t)?;
    let open_only = !cred.is_root() && t.summary().closed_dirs() > 0;
    if open_only
        && by_exit
            .closed
            .iter()
            .any(|&(uid, gid, perm)| class_allows(uid, gid, perm, cred, MAY_READ | MAY_EXEC))
    {
        return None;
    }
    let mut parts = Vec::new();
    for (exit, all, open) in by_exit.exits.iter() {
        match memo.get(exit) {
            Some(Status::In {
                depth,
                visible: true,
                ..
            }) if *depth < max_depth => parts.push(if open_only { open } else { all }),
            Some(_) => {}
            None if complete => {}
            None => return None,
        }
    }
    Some(parts)
}

/// The links whose ancestry [`Collect`] could not decide: ancestry with
/// engine reads, then a re-check of each against a fresh read of its
/// table. Returns the hits (reported by the caller outside every lock);
/// with `lean` tallies, adds to them instead.
///
/// A table that moved to another member since its collect step (its
/// range now foreign here; the ancestry reads may take long enough) is
/// not re-read: its pending links are hits as the collect step read them.
/// The rest of that table's hits were already delivered, so it is neither
/// reported as not held (its new holder would search it again and double
/// them) nor read as an empty table (its pending hits would be lost).
fn fall_back(
    s: &mut Search<'_>,
    cands: Vec<Cand>,
    plan: &Plan,
    expr: &Expr,
    mut lean: Option<&mut Tallies>,
) -> Result<Hits, FsError> {
    let engine = s.engine;
    let mut pending: Vec<Pending> = Vec::new();
    for c in cands {
        let Status::In {
            depth,
            visible: true,
            path,
        } = s.status(c.parent)?
        else {
            continue;
        };
        let depth = depth.saturating_add(1);
        if depth < plan.min_depth || depth > plan.max_depth {
            continue;
        }
        if let Some(t) = lean.as_deref_mut() {
            let e = Entry {
                path: None,
                name: &c.name,
                depth: Some(depth),
                soid: c.soid,
                inode: &c.inode,
                dir_has_entries: c.dir_has_entries,
            };
            if expr.eval(&e) == Some(true) {
                s.stats.hits += 1;
                t.add(&c.inode, &c.name);
            }
            continue;
        }
        let full = join(&path, &c.name);
        let e = Entry {
            path: Some(&full),
            name: &c.name,
            depth: Some(depth),
            soid: c.soid,
            inode: &c.inode,
            dir_has_entries: c.dir_has_entries,
        };
        if expr.matches(&e) {
            pending.push(Pending {
                soid: c.soid,
                inode: c.inode,
                parent: c.parent,
                name: c.name,
                path: full,
                depth,
            });
        }
    }

    // Re-check against a fresh read, one lock per table.
    pending.sort_by_key(|p| p.soid);
    let mut out = HitBatch::default();
    let mut i = 0;
    while i < pending.len() {
        let held = engine.with_held_table(pending[i].soid, |t| {
            while i < pending.len() && t.range.contains(pending[i].soid) {
                let p = &pending[i];
                i += 1;
                let Some(inode) = t.inode(p.soid) else {
                    continue;
                };
                if !inode
                    .all_links()
                    .any(|(d, n)| d == p.parent && n == &*p.name)
                {
                    continue;
                }
                let e = Entry {
                    path: Some(&p.path),
                    name: &p.name,
                    depth: Some(p.depth),
                    soid: p.soid,
                    inode,
                    dir_has_entries: inode.is_dir() && t.has_entries(p.soid),
                };
                if expr.matches(&e) {
                    out.push(&p.path, inode.attr(p.soid), p.depth);
                }
            }
        })?;
        if let Held::Foreign(gone) = held {
            // Moved away since the collect step: kept as read then.
            while i < pending.len() && gone.contains(pending[i].soid) {
                let p = &pending[i];
                i += 1;
                out.push(&p.path, p.inode.attr(p.soid), p.depth);
            }
        }
    }
    Ok(out.finish())
}

/// See [`Engine::search_tally`]: count and size of the matches, grouped
/// by `by` (or only the total), without building a path where the
/// grouping and the expression need none.
pub(crate) fn tally(
    engine: &Engine,
    cred: &Credentials,
    scope: Scope<'_>,
    expr: &Expr,
    by: Option<GroupBy>,
    opts: &SearchOptions<'_>,
) -> Result<(Aggregation, SearchStats), FsError> {
    let opts = SearchOptions {
        limit: usize::MAX,
        ..*opts
    };
    let mut agg = Aggregation::default();
    if by == Some(GroupBy::Directory) || expr.uses_path() {
        let stats = run(engine, cred, scope, expr, &opts, |hit| {
            agg.add_hit(by, hit);
            ControlFlow::Continue(())
        })?;
        return Ok((agg, stats));
    }
    // Grouped by something of the inode or the link's name: no paths.
    // Only the scope root itself comes as a hit.
    let mut below = Tallies::new(by);
    let stats = run_with(
        engine,
        cred,
        scope,
        expr,
        &opts,
        true,
        Some(&mut below),
        &mut |hit| {
            agg.add_hit(by, hit);
            ControlFlow::Continue(())
        },
    )?;
    agg.merge(below.finish());
    Ok((agg, stats))
}

/// See [`Engine::search_aggregate`].
pub(crate) fn aggregate(
    engine: &Engine,
    cred: &Credentials,
    scope: Scope<'_>,
    expr: &Expr,
    by: GroupBy,
) -> Result<Aggregation, FsError> {
    if let Some(agg) = from_summaries(engine, cred, scope, expr, Some(by))? {
        return Ok(agg);
    }
    let opts = SearchOptions::default();
    Ok(tally(engine, cred, scope, expr, Some(by), &opts)?.0)
}

/// Count and size of matching links, added up per group without a path
/// (one per worker of a parallel search, merged at the end). Runs of
/// equal keys (common: most matches are regular files of a few owners)
/// are summed before they touch the map.
pub(crate) struct Tallies {
    by: Option<GroupBy>,
    agg: Aggregation,
    run: Option<(GroupKey, Totals)>,
    /// The groups added from summaries, moved into `agg` by `finish`: a
    /// namespace where every table holds files of a thousand owners adds
    /// a million summary groups to sum the whole of it, and a hash update
    /// each costs a fraction of an ordered-map insertion (docs/BENCHMARKS.md,
    /// "A synthetic namespace with varied attributes").
    summed: HashMap<GroupKey, Totals, FastHash>,
}

impl Tallies {
    /// `by` must not be [`GroupBy::Directory`] (that needs the path);
    /// `None` keeps only the total.
    pub(crate) fn new(by: Option<GroupBy>) -> Tallies {
        Tallies {
            by,
            agg: Aggregation::default(),
            run: None,
            summed: HashMap::default(),
        }
    }

    /// Counts the link `name` of `inode`.
    fn add(&mut self, inode: &Inode, name: &[u8]) {
        let key = match self.by {
            None => {
                self.agg.total.add(inode.size);
                return;
            }
            Some(GroupBy::Uid) => GroupKey::Uid(inode.uid),
            Some(GroupBy::Gid) => GroupKey::Gid(inode.gid),
            Some(GroupBy::Type) => GroupKey::Type(inode.ftype),
            Some(GroupBy::Extension | GroupBy::Directory) => {
                GroupKey::Extension(extension(name).into())
            }
        };
        match &mut self.run {
            Some((k, t)) if *k == key => t.add(inode.size),
            _ => {
                if let Some((k, t)) = self.run.take() {
                    self.agg.add_totals(k, t);
                }
                self.run = Some((
                    key,
                    Totals {
                        count: 1,
                        size: inode.size,
                    },
                ));
            }
        }
    }

    /// Whether [`Tallies::add_summary`] can add to these (the grouping is
    /// one the summaries keep).
    fn takes_summaries(&self) -> bool {
        matches!(
            self.by,
            None | Some(GroupBy::Uid | GroupBy::Gid | GroupBy::Type)
        )
    }

    /// Adds the groups of a whole table's maintained summary for which the
    /// group-only `expr` holds ([`Expr::eval_group`]); returns the paths
    /// added. REQUIRES: [`Tallies::takes_summaries`].
    fn add_summary(&mut self, summary: &crate::table::summary::Summary, expr: &Expr) -> u64 {
        self.add_groups(summary.groups(), expr)
    }

    /// [`Tallies::add_summary`] for any (owner, group, type) groups.
    fn add_groups<'g>(
        &mut self,
        groups: impl Iterator<Item = (&'g crate::table::summary::GroupKey, &'g Totals)>,
        expr: &Expr,
    ) -> u64 {
        let mut added = 0u64;
        for (&(uid, gid, ftype), totals) in groups {
            if !expr.eval_group(uid, gid, ftype) {
                continue;
            }
            added = added.saturating_add(totals.count);
            let key = match self.by {
                None => {
                    self.agg.total.count = self.agg.total.count.saturating_add(totals.count);
                    self.agg.total.size = self.agg.total.size.saturating_add(totals.size);
                    continue;
                }
                Some(GroupBy::Uid) => GroupKey::Uid(uid),
                Some(GroupBy::Gid) => GroupKey::Gid(gid),
                Some(_) => GroupKey::Type(ftype),
            };
            let t = self.summed.entry(key).or_default();
            t.count = t.count.saturating_add(totals.count);
            t.size = t.size.saturating_add(totals.size);
        }
        added
    }

    pub(crate) fn finish(mut self) -> Aggregation {
        if let Some((k, t)) = self.run.take() {
            self.agg.add_totals(k, t);
        }
        for (k, t) in self.summed.drain() {
            self.agg.add_totals(k, t);
        }
        self.agg
    }
}

/// The aggregation from the tables' maintained summaries
/// ([`crate::table::summary`]) when that gives exactly what the search
/// would: the whole namespace asked about by root, or by another caller
/// when no directory is closed to anyone (either sees every path, so
/// nothing can leak), an expression of owner, group and type only
/// ([`Expr::is_group_only`]), grouped by owner, group or type, or not
/// grouped (`by` `None`: the total only, `du`). `None` otherwise (the
/// caller searches).
pub(crate) fn from_summaries(
    engine: &Engine,
    cred: &Credentials,
    scope: Scope<'_>,
    expr: &Expr,
    by: Option<GroupBy>,
) -> Result<Option<Aggregation>, FsError> {
    if !matches!(by, None | Some(GroupBy::Uid | GroupBy::Gid | GroupBy::Type)) {
        return Ok(None);
    }
    if !expr.is_group_only() {
        return Ok(None);
    }
    let whole = match scope {
        Scope::Soid(s) => s == Soid::ROOT,
        Scope::Path(p) => engine.resolve(cred, p, false)?.soid == Soid::ROOT,
    };
    if !whole {
        return Ok(None);
    }
    // Another caller sees every path only where no directory is closed to
    // anyone (the root directory among them); else it searches.
    let sum = engine.summed_summaries()?;
    if sum.closed_dirs > 0 && !cred.is_root() {
        return Ok(None);
    }
    let mut tallies = Tallies::new(by);
    tallies.add_groups(sum.groups.iter(), expr);
    let mut agg = tallies.finish();
    // The summaries count the root directory as any entry below the scope
    // ([`Expr::eval_group`]); the search evaluates it at depth 0.
    let (_, root) = engine.with_table_holding(Soid::ROOT, |t| t.inode(Soid::ROOT).cloned())?;
    let root = root.ok_or(FsError::NotFound)?;
    let entry = Entry {
        path: Some(b"/"),
        name: b"/",
        depth: Some(0),
        soid: Soid::ROOT,
        inode: &root,
        dir_has_entries: false,
    };
    let (counted, wanted) = (
        expr.eval_group(root.uid, root.gid, root.ftype),
        expr.matches(&entry),
    );
    if counted != wanted {
        let key = match by {
            Some(GroupBy::Uid) => Some(GroupKey::Uid(root.uid)),
            Some(GroupBy::Gid) => Some(GroupKey::Gid(root.gid)),
            Some(_) => Some(GroupKey::Type(root.ftype)),
            None => None,
        };
        if wanted {
            match key {
                Some(key) => agg.add_key(key, root.size),
                None => agg.total.add(root.size),
            }
        } else {
            if let Some(key) = key {
                if let Some(g) = agg.groups.get_mut(&key) {
                    g.count = g.count.saturating_sub(1);
                    g.size = g.size.saturating_sub(root.size);
                    if g.count == 0 {
                        agg.groups.remove(&key);
                    }
                }
            }
            agg.total.count = agg.total.count.saturating_sub(1);
            agg.total.size = agg.total.size.saturating_sub(root.size);
        }
    }
    Ok(Some(agg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemStore, Store};
    use crate::{EngineConfig, MemCatalog, MemberConfig};

    /// Issue 21: a table that moves to another member between its collect
    /// step and `fall_back` keeps its pending hits as the collect step read
    /// them (an empty read of the foreign range dropped them, and no member
    /// searched the range again).
    #[test]
    fn a_fallback_hit_in_a_table_moved_away_is_kept() {
        let store = Arc::new(MemStore::new()) as Arc<dyn Store>;
        let catalog = Arc::new(MemCatalog::new());
        let member = MemberConfig {
            name: "a".into(),
            catalog: catalog as _,
        };
        let config = EngineConfig {
            flush_interval: None,
            ..Default::default()
        };
        let e = Engine::open_member(store, config, member).unwrap();
        let root = Credentials::root();
        let d = e.mkdir(&root, Soid::ROOT, b"d", 0o755).unwrap();
        let d = d.wait(&e).unwrap().soid;
        let f = e.create(&root, d, b"f", 0o644, true).unwrap();
        let f = f.wait(&e).unwrap().soid;
        // What the collect step would have cloned for a fallback.
        let held = e.with_held_table(f, |t| t.inode(f).cloned()).unwrap();
        let Held::Table((_, Some(inode))) = held else {
            panic!("f is held here");
        };
        let cand = Cand {
            soid: f,
            inode,
            dir_has_entries: false,
            parent: d,
            name: b"f".as_slice().into(),
        };
        let mut s = Search {
            engine: &e,
            cred: &root,
            memo: Memo::default(),
            stats: SearchStats::default(),
            dir_cache: None,
            foreign: None,
        };
        let path: Arc<[u8]> = b"/d".as_slice().into();
        s.memo.insert(
            d,
            Status::In {
                depth: 1,
                visible: true,
                path,
            },
        );
        // The table moves away before the re-check.
        let table = e.table_holding(f).unwrap();
        e.drop_table(table).unwrap();
        assert!(matches!(e.with_held_table(f, |_| ()), Ok(Held::Foreign(_))));
        let plan = plan::plan(&Expr::True);
        let hits = fall_back(&mut s, vec![cand], &plan, &Expr::True, None).unwrap();
        let got: Vec<_> = hits.iter().map(|h| h.to_hit()).collect();
        assert_eq!(got.len(), 1, "the pending hit is kept");
        assert_eq!(&got[0].path[..], b"/d/f");
        assert_eq!(got[0].depth, 2);
        assert_eq!(got[0].attr.soid, f);
    }
}
