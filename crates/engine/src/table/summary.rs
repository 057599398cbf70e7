//! A table's maintained totals (issue 4, "maintained summaries"): paths
//! and bytes per (owner, group, type) of the inodes the table holds,
//! updated by every inode write, so per-owner totals of the whole
//! namespace are a sum over tables instead of a scan, and a subtree's
//! totals add up the tables that lie wholly inside it without reading
//! their rows ([`crate::search`], `scope::whole`): recursive statistics
//! kept per table rather than per directory, so a mutation updates one
//! summary (its inode's table) and never its ancestors' — no write to the
//! root directory on every create, and no cross-table or cross-server
//! propagation (Ceph propagates its per-directory rstats lazily for the
//! same reason). The tables a subtree only partly covers are searched.
//!
//! Counted like a search counts: per *path*. A non-directory is counted
//! once per link (`nlink`, its size each time); a directory once (it has
//! one path). Every link of an inode is attributed to the inode's table,
//! wherever its entries live, so summing every table counts every path of
//! the namespace exactly once.
//!
//! Beside the totals, the number of the table's directories that are not
//! open to all ([`crate::perm::open_to_all`]): when it is zero, any
//! caller who may list the directories through which the table is
//! reached may list every directory in it, so the totals answer that
//! caller too ([`crate::search`]).
//!
//! Invariant: `groups` equals the sum of [`contribution`] over the table's
//! inodes, and holds no zero group; `closed_dirs` counts its directories
//! not open to all (checked by the table's tests).
//!
//! The sum over every table (`Sum`) answers root's whole-namespace
//! totals. It is kept once made, valid while no table's summary changed
//! since (`changes`): summing a namespace whose every table holds files
//! of a thousand owners is a million groups, tens of milliseconds, and
//! those totals are asked for all the time.

use super::Table;
use crate::hash::FastHash;
use crate::inode::Inode;
use sextant_types::{FileType, Soid};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

/// Content changes of table summaries in this process: advanced by every
/// inode write of a table ([`Table::put_inode`], [`Table::delete_inode`]),
/// under the table's lock, after its summary changed. Loading, splitting
/// and merging tables do not change the sum over all tables (splits and
/// merges hold the table map exclusively, a [`Sum`] is made under its
/// shared lock) and do not advance it. One counter for every engine of the
/// process: another engine's writes only make a kept sum be made again.
static CHANGES: AtomicU64 = AtomicU64::new(0);

/// Records that a table's summary changed (see [`CHANGES`]).
pub(crate) fn changed() {
    CHANGES.fetch_add(1, Ordering::SeqCst);
}

/// The count of summary changes so far (see [`CHANGES`]).
pub(crate) fn changes() -> u64 {
    CHANGES.load(Ordering::SeqCst)
}

/// The summaries of every table added up, as of [`Sum::changes`].
///
/// Invariant: made from every table under the table map's shared lock,
/// with `changes` read before the first table: if no summary changed
/// since (`changes()` still equals it), it is the sum of the summaries now.
/// A mutation changes its table's summary before it is acknowledged, so a
/// query that starts after the acknowledgement finds the counter moved.
#[derive(Debug, Default)]
pub(crate) struct Sum {
    pub(crate) changes: u64,
    pub(crate) groups: HashMap<GroupKey, Totals, FastHash>,
    pub(crate) closed_dirs: u64,
}

impl Sum {
    pub(crate) fn new(changes: u64) -> Sum {
        Sum {
            changes,
            ..Sum::default()
        }
    }

    pub(crate) fn add(&mut self, s: &Summary) {
        self.closed_dirs = self.closed_dirs.saturating_add(s.closed_dirs);
        for (k, t) in &s.groups {
            let g = self.groups.entry(*k).or_default();
            g.count = g.count.saturating_add(t.count);
            g.size = g.size.saturating_add(t.size);
        }
    }
}

/// Count and total size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: u64,
    pub size: u64,
}

impl Totals {
    /// Counts one path of `size` bytes.
    pub fn add(&mut self, size: u64) {
        self.count += 1;
        self.size = self.size.saturating_add(size);
    }
}

/// (uid, gid, type).
pub type GroupKey = (u32, u32, FileType);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    groups: BTreeMap<GroupKey, Totals>,
    closed_dirs: u64,
}

/// Whether `inode` is a directory some caller may not list.
fn closed(inode: &Inode) -> bool {
    inode.is_dir() && !crate::perm::open_to_all(inode.perm)
}

/// What one inode adds: (paths, bytes).
pub fn contribution(inode: &Inode) -> (u64, u64) {
    let paths = if inode.is_dir() {
        1
    } else {
        u64::from(inode.nlink)
    };
    (paths, inode.size.saturating_mul(paths))
}

impl Summary {
    pub fn add(&mut self, inode: &Inode) {
        if closed(inode) {
            self.closed_dirs = self.closed_dirs.saturating_add(1);
        }
        let (paths, bytes) = contribution(inode);
        if paths == 0 {
            return;
        }
        let t = self
            .groups
            .entry((inode.uid, inode.gid, inode.ftype))
            .or_default();
        t.count = t.count.saturating_add(paths);
        t.size = t.size.saturating_add(bytes);
    }

    pub fn remove(&mut self, inode: &Inode) {
        if closed(inode) {
            self.closed_dirs = self.closed_dirs.saturating_sub(1);
        }
        let (paths, bytes) = contribution(inode);
        let key = (inode.uid, inode.gid, inode.ftype);
        if let Some(t) = self.groups.get_mut(&key) {
            t.count = t.count.saturating_sub(paths);
            t.size = t.size.saturating_sub(bytes);
            if t.count == 0 {
                self.groups.remove(&key);
            }
        }
    }

    /// Adds one path of `inode` (a link of it: its size once).
    pub(crate) fn add_path(&mut self, inode: &Inode) {
        let t = self
            .groups
            .entry((inode.uid, inode.gid, inode.ftype))
            .or_default();
        t.count = t.count.saturating_add(1);
        t.size = t.size.saturating_add(inode.size);
    }

    /// Heap and inline bytes, roughly (B-tree nodes hold their entries
    /// with some slack).
    pub fn memory_bytes(&self) -> usize {
        let entry = std::mem::size_of::<GroupKey>() + std::mem::size_of::<Totals>();
        std::mem::size_of::<Self>() + self.groups.len() * entry * 3 / 2
    }

    /// Directories of the table not open to all.
    pub fn closed_dirs(&self) -> u64 {
        self.closed_dirs
    }

    pub fn groups(&self) -> impl Iterator<Item = (&GroupKey, &Totals)> + '_ {
        self.groups.iter()
    }
}

/// A table's paths split by the exit they leave it through
/// ([`by_exit`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ByExit {
    /// Per exit, sorted by exit: the totals of the links leaving the table
    /// through it, and of those whose parent and every directory above it
    /// inside the table are open to all ([`crate::perm::open_to_all`]).
    pub exits: Box<[(Soid, Summary, Summary)]>,
    /// (owner, group, mode) of the table's directories not open to all,
    /// without repeats: a caller who may list none of them sees exactly
    /// the open links below the exits it may list.
    pub closed: Box<[(u32, u32, u16)]>,
}

impl ByExit {
    pub fn memory_bytes(&self) -> usize {
        let closed = self.closed.len() * std::mem::size_of::<(u32, u32, u16)>();
        let exits: usize = self
            .exits
            .iter()
            .map(|(_, all, open)| 16 + all.memory_bytes() + open.memory_bytes())
            .sum();
        std::mem::size_of::<Self>() + exits + closed
    }
}

/// The table's paths split by the exit they leave it through: for each
/// directory outside the table that is the first ancestor outside it of
/// some link (an exit, `crate::table::exits`), the totals of those links,
/// counted per link as a search counts them — all of them, and those
/// whose chain inside the table is open to all. A search below a
/// directory that covers a table partly adds up the exits in its scope
/// instead of reading the rows (`crate::search`). Paths whose chain ends
/// inside the table (at `/`, or at a broken chain) are under no exit.
/// `closed_dirs` of each summary is left at zero (the table's own count
/// applies).
///
/// Pure function of the rows: the table's index keeps it, made on first
/// use after a rebuild and used only while no row has changed since.
pub fn by_exit(table: &Table) -> ByExit {
    // The exit of each directory of the table met on a chain, and whether
    // it and every directory above it inside the table are open to all
    // (memoised, so a chain is read once).
    let mut exit_of: HashMap<Soid, Option<(Soid, bool)>> = HashMap::new();
    let mut chain: Vec<(Soid, bool)> = Vec::new();
    let mut out: BTreeMap<Soid, (Summary, Summary)> = BTreeMap::new();
    let mut closed_modes = std::collections::BTreeSet::new();
    let cap = u32::try_from(table.row_capacity()).unwrap_or(u32::MAX);
    for (_, inode) in (0..cap).filter_map(|r| table.row(r)) {
        if closed(inode) {
            closed_modes.insert((inode.uid, inode.gid, inode.perm));
        }
        for (parent, _) in inode.all_links() {
            chain.clear();
            let mut cur = parent;
            let base = loop {
                if let Some(&e) = exit_of.get(&cur) {
                    break e;
                }
                let Some(dir) = table.inode(cur) else {
                    // Left the table: `cur` is the exit; the chain above
                    // it is the search's to judge.
                    break Some((cur, true));
                };
                // `/` has no exit; a chain longer than the table's
                // directories has a cycle (not made by consistent rows).
                if !dir.is_dir() || cur == Soid::ROOT || chain.len() > table.dir_count() {
                    break None;
                }
                chain.push((cur, crate::perm::open_to_all(dir.perm)));
                cur = dir.parent;
            };
            // Unwind from the top: a directory is open when it and all
            // above it (inside the table) are.
            let mut found = base;
            for &(d, open) in chain.iter().rev() {
                found = found.map(|(e, above)| (e, above && open));
                exit_of.insert(d, found);
            }
            if let Some((e, open)) = found {
                let (all, open_only) = out.entry(e).or_default();
                all.add_path(inode);
                if open {
                    open_only.add_path(inode);
                }
            }
        }
    }
    ByExit {
        exits: out
            .into_iter()
            .map(|(e, (all, open))| (e, all, open))
            .collect(),
        closed: closed_modes.into_iter().collect(),
    }
}
