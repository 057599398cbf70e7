//! A table: a contiguous SOID range and everything Sextant keeps for it
//! (DESIGN.md, "the table is the cluster").
//!
//! A table owns
//! - the inodes whose SOIDs fall in its range, in a slab with stable row ids
//!   (so the K-D tree can refer to rows by a `u32`) and a SOID → row map;
//! - the directory entries whose *parent* SOID falls in its range, keyed by
//!   `(parent, cookie)`, where the cookie is a 55-bit hash of the name
//!   followed by an 8-bit disambiguator for names whose hashes collide
//!   ([`entry_cookie`]); readdir walks a directory in cookie order, so a
//!   cursor survives changes;
//! - maintained summaries of its inodes: totals per (owner, group, type)
//!   ([`summary`]) and the directories outside the table its inodes' links
//!   name ([`exits`], which lets a subtree search skip the table);
//! - its search index ([`index`]: a K-D tree, Bloom filters and trigram
//!   posting lists over its rows, rebuilt on write-back), which reads the
//!   rows it indexes from the table;
//! - write-back bookkeeping (which journal records it holds that are not in
//!   its snapshot yet).
//!
//! Memory layout (the bulk of the engine's memory, hence hand-made): an
//! entry is a `u32` in the entry map. Most entries are their child's
//! *primary link* and the child lives in the same table (child-closest
//! SOIDs put a directory's files next to it), so the entry is just the
//! child's row: name, SOID and type are read from the inode. Every other
//! entry (a child in another table, a secondary hard link) is a *foreign*
//! entry holding a whole [`Dentry`] in a side slab.
//!
//! Invariants:
//! - every inode key and every entry's parent lies inside `range`;
//! - canonical entries: an entry `(parent, name) → child` is stored as the
//!   child's row iff the child's inode is in this table and its primary link
//!   is exactly `(parent, name)` with the entry's type; otherwise foreign.
//!   Every change to an inode's primary link or to the set of inodes keeps
//!   this ([`Table::check_invariants`], exercised by the tests below);
//! - at most 256 names of one directory share a 55-bit hash (a larger
//!   bucket is refused with ENOSPC before the mutation is journaled);
//! - `first_dirty_lsn.is_some()` iff some applied record is newer than the
//!   table's snapshot; then every record the table reflects with LSN >
//!   `snapshot_lsn` is still in the journal;
//! - a table holds no I/O handle: the engine reads and writes snapshots.

pub mod carried;
pub mod exits;
pub mod index;
mod slab;
mod snapshot;
pub mod summary;

pub use snapshot::{
    decode_snapshot, encode_snapshot, encode_snapshot_carrying, Snapshot, SnapshotBody,
};

use crate::inode::{Dentry, Inode, Name};
use crate::journal::Lsn;
use crate::record::Mutation;
use index::TableIndex;
use sextant_types::{FileType, Soid, SoidRange};
use slab::RowSlab;
use std::collections::BTreeMap;

pub type TableId = u64;

/// `(parent, cookie)`.
type EntryKey = (Soid, u64);

/// An entry taken out of a table to be rebuilt.
enum Held {
    /// Stored as the child's row (this row id in the table taken from).
    Row(u32),
    /// Stored whole.
    Whole(Dentry),
}

/// A table's contents, taken out to be rebuilt: inodes as (row id in the
/// table taken from, SOID, inode), sorted by SOID; entries in key order.
struct Contents {
    inodes: Vec<(u32, Soid, Inode)>,
    entries: Vec<(EntryKey, Held)>,
}

/// Entry values at or above this are foreign-entry slots (`v - FOREIGN`);
/// below it they are row ids.
const FOREIGN: u32 = 1 << 31;

/// Names of one directory that may share a hash (the cookie's low byte).
pub const BUCKET: u64 = 256;

/// The first cookie of `name`'s bucket: a stable 55-bit hash shifted past
/// the 8-bit disambiguator. Never below 256, so FUSE can use cookies 1 and 2
/// for `.` and `..` and 0 for "from the start", and below 2^63, so it fits
/// the kernel's signed directory offsets.
pub fn entry_cookie(name: &[u8]) -> u64 {
    let h = (xxhash_rust::xxh3::xxh3_64(name) >> 9).max(1);
    // Unit tests keep 2 bits of the hash, so buckets collide all the time.
    #[cfg(test)]
    let h = 1 + (h & 3);
    h << 8
}

/// One table. See the module docs.
#[derive(Debug)]
pub struct Table {
    pub id: TableId,
    pub range: SoidRange,
    rows: RowSlab,
    free_rows: Vec<u32>,
    by_soid: BTreeMap<Soid, u32>,
    entries: BTreeMap<EntryKey, u32>,
    foreign: Vec<Option<Dentry>>,
    free_foreign: Vec<u32>,
    dirs: usize,
    /// Heap bytes of names that do not fit inline (for the memory budget).
    name_bytes: usize,
    /// Paths and bytes per (owner, group, type), kept by every inode write.
    summary: summary::Summary,
    /// Directories outside `range` that links of the table's inodes name,
    /// kept by every inode write ([`exits`]).
    exits: exits::Exits,
    /// Inserts and deletes since the structures were last built compactly.
    churn: usize,
    /// Newest record applied.
    pub last_lsn: Lsn,
    /// Records up to this LSN are in the snapshot on disk (0: no snapshot).
    pub snapshot_lsn: Lsn,
    /// Oldest record applied since the last snapshot, if any.
    pub first_dirty_lsn: Option<Lsn>,
    /// Engine epoch (coarse clock tick) at which the table became dirty.
    pub dirty_epoch: Option<u64>,
    /// Blob name of the snapshot that holds this table *in its current
    /// shape*; `None` for a table born from a split or merge that has not
    /// been written yet (the next checkpoint must write it).
    pub snapshot_file: Option<String>,
    /// Don't try to split again until the table has this many inodes (set
    /// after a split found no directory boundary to cut at).
    pub next_split_check: usize,
    /// The search index: K-D tree and Bloom filters as of the last rebuild,
    /// plus the rows changed since.
    pub index: TableIndex,
    /// Replies of recent client mutations on this table, which move with
    /// it (member engines only; see [`carried`]).
    pub carried: carried::CarriedReplies,
}

/// Why a table cannot be built from a list of inodes and entries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("inode {0} outside the table range")]
    InodeOutside(Soid),
    #[error("entry of {0} outside the table range")]
    EntryOutside(Soid),
    #[error("more than {BUCKET} names of directory {0} share one hash")]
    BucketFull(Soid),
}

impl Table {
    pub fn new(id: TableId, range: SoidRange) -> Table {
        Table {
            id,
            range,
            rows: RowSlab::default(),
            free_rows: Vec::new(),
            by_soid: BTreeMap::new(),
            entries: BTreeMap::new(),
            foreign: Vec::new(),
            free_foreign: Vec::new(),
            dirs: 0,
            name_bytes: 0,
            summary: summary::Summary::default(),
            exits: exits::Exits::default(),
            churn: 0,
            last_lsn: 0,
            snapshot_lsn: 0,
            first_dirty_lsn: None,
            dirty_epoch: None,
            snapshot_file: None,
            next_split_check: 0,
            index: TableIndex::default(),
            carried: carried::CarriedReplies::default(),
        }
    }

    /// A table holding `inodes` and `entries` (later duplicates of a SOID
    /// or of a (parent, name) win, as if applied in order), with every
    /// structure allocated exactly and its B-trees fully packed.
    pub fn build(
        id: TableId,
        range: SoidRange,
        inodes: Vec<(Soid, Inode)>,
        entries: Vec<(Soid, Dentry)>,
    ) -> Result<Table, BuildError> {
        let mut t = Table::new(id, range);
        if let Some((s, _)) = inodes.iter().find(|(s, _)| !range.contains(*s)) {
            return Err(BuildError::InodeOutside(*s));
        }
        if let Some((p, _)) = entries.iter().find(|(p, _)| !range.contains(*p)) {
            return Err(BuildError::EntryOutside(*p));
        }
        // Stable sort, then keep the last of equal SOIDs.
        let mut inodes = inodes;
        inodes.sort_by_key(|(s, _)| *s);
        let mut deduped: Vec<(u32, Soid, Inode)> = Vec::with_capacity(inodes.len());
        for (s, i) in inodes {
            match deduped.last_mut() {
                Some(last) if last.1 == s => last.2 = i,
                _ => deduped.push((deduped.len() as u32, s, i)),
            }
        }
        let entries = assign_cookies(entries)?
            .into_iter()
            .map(|(k, d)| (k, Held::Whole(d)))
            .collect();
        t.fill(Contents {
            inodes: deduped,
            entries,
        });
        Ok(t)
    }

    /// Replaces the contents (not the bookkeeping) with `c`, built
    /// compactly: rows exactly sized in SOID order, B-trees packed. Entries
    /// keep their keys, so readdir cursors stay valid across a rebuild.
    /// Drops the index (row ids change).
    ///
    /// REQUIRES: everything lies in `range`; SOIDs are unique; a
    /// [`Held::Row`] names a row among `c.inodes`.
    fn fill(&mut self, c: Contents) {
        let old_rows = c.inodes.iter().map(|(r, _, _)| *r as usize + 1).max();
        let mut new_row = vec![u32::MAX; old_rows.unwrap_or(0)];
        for (new, (old, _, _)) in c.inodes.iter().enumerate() {
            new_row[*old as usize] = new as u32;
        }
        self.dirs = c.inodes.iter().filter(|(_, _, i)| i.is_dir()).count();
        self.name_bytes = c.inodes.iter().map(|(_, _, i)| i.name.heap_bytes()).sum();
        self.summary = summary::Summary::default();
        self.exits = exits::Exits::default();
        for (_, _, i) in &c.inodes {
            self.summary.add(i);
            self.exits.add(self.range, i);
        }
        self.by_soid = c
            .inodes
            .iter()
            .enumerate()
            .map(|(r, (_, s, _))| (*s, r as u32))
            .collect();
        self.rows = RowSlab::from_rows(c.inodes.into_iter().map(|(_, s, i)| (s, i)));
        self.free_rows = Vec::new();
        self.foreign = Vec::new();
        self.free_foreign = Vec::new();
        let mut values: Vec<(EntryKey, u32)> = Vec::with_capacity(c.entries.len());
        for (key, held) in c.entries {
            let value = match held {
                Held::Row(old) => match new_row.get(old as usize) {
                    Some(&new) if new != u32::MAX => new,
                    _ => {
                        debug_assert!(false, "a held row is not among the inodes");
                        continue;
                    }
                },
                Held::Whole(d) => self.value_for(key.0, d),
            };
            values.push((key, value));
        }
        self.entries = values.into_iter().collect();
        self.foreign.shrink_to_fit();
        self.churn = 0;
        self.index = TableIndex::default();
    }

    pub fn inode_count(&self) -> usize {
        self.by_soid.len()
    }

    pub fn dir_count(&self) -> usize {
        self.dirs
    }

    pub fn dentry_count(&self) -> usize {
        self.entries.len()
    }

    /// The maintained totals of this table's inodes ([`summary`]).
    pub fn summary(&self) -> &summary::Summary {
        &self.summary
    }

    /// The directories outside the table its inodes' links name
    /// ([`exits`]).
    pub fn exits(&self) -> &exits::Exits {
        &self.exits
    }

    pub fn is_dirty(&self) -> bool {
        self.first_dirty_lsn.is_some()
    }

    /// Rough resident bytes, for the cache budget.
    pub fn approx_bytes(&self) -> usize {
        // A B-tree leaf holds 11 keys; built compactly it is nearly full,
        // grown by inserts about two thirds full.
        const TREE_SLACK: usize = 3;
        let soid_map = self.by_soid.len() * (20 + 20 / TREE_SLACK);
        let entry_map = self.entries.len() * (28 + 28 / TREE_SLACK);
        self.rows.allocated_bytes()
            + soid_map
            + entry_map
            + self.foreign.capacity() * std::mem::size_of::<Option<Dentry>>()
            + self.name_bytes
            + self.index.memory_bytes()
            + self.exits.memory_bytes()
    }

    pub fn inode(&self, soid: Soid) -> Option<&Inode> {
        let row = *self.by_soid.get(&soid)?;
        self.row(row).map(|(_, i)| i)
    }

    /// The inode in slab row `row`, if live.
    pub fn row(&self, row: u32) -> Option<&(Soid, Inode)> {
        self.rows.get(row)
    }

    /// Number of slab rows (live or free); row ids are below this.
    pub fn row_capacity(&self) -> usize {
        self.rows.len()
    }

    pub fn inodes(&self) -> impl Iterator<Item = (Soid, &Inode)> + '_ {
        self.by_soid
            .iter()
            .filter_map(move |(s, &r)| self.row(r).map(|(_, i)| (*s, i)))
    }

    pub fn put_inode(&mut self, soid: Soid, inode: Inode) {
        let is_dir = inode.is_dir();
        self.name_bytes += inode.name.heap_bytes();
        self.summary.add(&inode);
        self.exits.add(self.range, &inode);
        summary::changed();
        if let Some(&row) = self.by_soid.get(&soid) {
            let same_link = self.row(row).is_some_and(|(_, old)| {
                old.parent == inode.parent && old.name == inode.name && old.ftype == inode.ftype
            });
            if !same_link {
                self.demote_primary_entry(row);
            }
            if let Some(Some((_, old))) = self.rows.slot_mut(row).map(|s| s.replace((soid, inode)))
            {
                self.summary.remove(&old);
                self.exits.remove(self.range, &old);
                self.name_bytes -= old.name.heap_bytes();
                self.dirs -= old.is_dir() as usize;
            }
            self.dirs += is_dir as usize;
            if !same_link {
                self.promote_primary_entry(row);
            }
            self.index.row_changed(row);
            return;
        }
        let row = match self.free_rows.pop() {
            Some(r) => {
                if let Some(slot) = self.rows.slot_mut(r) {
                    *slot = Some((soid, inode));
                }
                r
            }
            None => self.rows.push((soid, inode)),
        };
        debug_assert!(row < FOREIGN, "row ids must stay below the foreign tag");
        self.dirs += is_dir as usize;
        self.churn += 1;
        self.by_soid.insert(soid, row);
        self.promote_primary_entry(row);
        self.index.row_changed(row);
    }

    pub fn delete_inode(&mut self, soid: Soid) {
        if let Some(row) = self.by_soid.remove(&soid) {
            self.demote_primary_entry(row);
            if let Some(Some((_, old))) = self.rows.slot_mut(row).map(Option::take) {
                self.summary.remove(&old);
                summary::changed();
                self.exits.remove(self.range, &old);
                self.name_bytes -= old.name.heap_bytes();
                self.dirs -= old.is_dir() as usize;
            }
            self.free_rows.push(row);
            self.churn += 1;
            self.index.row_changed(row);
        }
    }

    /// Turns the entry that is `row`'s primary link, if stored as the row,
    /// into a foreign entry (the row is about to lose that link).
    fn demote_primary_entry(&mut self, row: u32) {
        let Some((soid, ino)) = self.row(row) else {
            return;
        };
        let (parent, name, ftype, soid) = (ino.parent, ino.name.clone(), ino.ftype, *soid);
        let Some((key, value)) = self.find_entry(parent, &name) else {
            return;
        };
        if value == row {
            let d = Dentry {
                child: soid,
                ftype,
                name,
            };
            let slot = self.alloc_foreign(d);
            self.entries.insert(key, slot);
        }
    }

    /// Turns the foreign entry that is `row`'s primary link, if any, into
    /// the row.
    fn promote_primary_entry(&mut self, row: u32) {
        let Some((soid, ino)) = self.row(row) else {
            return;
        };
        let (parent, soid, ftype) = (ino.parent, *soid, ino.ftype);
        let Some((key, value)) = self.find_entry(parent, &ino.name) else {
            return;
        };
        if value >= FOREIGN
            && self
                .foreign_entry(value)
                .is_some_and(|d| d.child == soid && d.ftype == ftype)
        {
            self.free_foreign(value);
            self.entries.insert(key, row);
        }
    }

    fn alloc_foreign(&mut self, d: Dentry) -> u32 {
        self.name_bytes += d.name.heap_bytes();
        let slot = match self.free_foreign.pop() {
            Some(s) => {
                self.foreign[s as usize] = Some(d);
                s
            }
            None => {
                self.foreign.push(Some(d));
                (self.foreign.len() - 1) as u32
            }
        };
        FOREIGN + slot
    }

    fn free_foreign(&mut self, value: u32) {
        let slot = value - FOREIGN;
        if let Some(d) = self.foreign.get_mut(slot as usize).and_then(Option::take) {
            self.name_bytes -= d.name.heap_bytes();
            self.free_foreign.push(slot);
        }
    }

    fn foreign_entry(&self, value: u32) -> Option<&Dentry> {
        self.foreign.get((value - FOREIGN) as usize)?.as_ref()
    }

    /// The entry an entry-map value stands for: (child, type, name).
    fn resolve(&self, value: u32) -> Option<(Soid, FileType, &Name)> {
        if value >= FOREIGN {
            self.foreign_entry(value)
                .map(|d| (d.child, d.ftype, &d.name))
        } else {
            self.row(value).map(|(s, i)| (*s, i.ftype, &i.name))
        }
    }

    fn to_dentry(&self, value: u32) -> Option<Dentry> {
        self.resolve(value).map(|(child, ftype, name)| Dentry {
            child,
            ftype,
            name: name.clone(),
        })
    }

    /// How `dentry` in `parent` is stored: the child's row when canonical.
    fn value_for(&mut self, parent: Soid, dentry: Dentry) -> u32 {
        if let Some(&row) = self.by_soid.get(&dentry.child) {
            if self.row(row).is_some_and(|(_, i)| {
                i.parent == parent && i.name == dentry.name && i.ftype == dentry.ftype
            }) {
                return row;
            }
        }
        self.alloc_foreign(dentry)
    }

    fn find_entry(&self, parent: Soid, name: &[u8]) -> Option<(EntryKey, u32)> {
        let bucket = entry_cookie(name);
        self.entries
            .range((parent, bucket)..=(parent, bucket | (BUCKET - 1)))
            .find(|(_, &v)| self.resolve(v).is_some_and(|(_, _, n)| **n == *name))
            .map(|(k, v)| (*k, *v))
    }

    pub fn dentry(&self, parent: Soid, name: &[u8]) -> Option<Dentry> {
        self.find_entry(parent, name)
            .and_then(|(_, v)| self.to_dentry(v))
    }

    /// Can `name` be added to `parent` (false only when its hash bucket is
    /// full)?
    pub fn can_add_entry(&self, parent: Soid, name: &[u8]) -> bool {
        let bucket = entry_cookie(name);
        self.find_entry(parent, name).is_some()
            || self
                .entries
                .range((parent, bucket)..=(parent, bucket | (BUCKET - 1)))
                .count()
                < BUCKET as usize
    }

    /// Inserts or replaces the entry `dentry.name` in `parent`. Returns
    /// false (and changes nothing) when the name's hash bucket is full,
    /// which [`Table::can_add_entry`] rules out beforehand.
    pub fn put_dentry(&mut self, parent: Soid, dentry: Dentry) -> bool {
        let existing = self.find_entry(parent, &dentry.name);
        let key = match existing {
            Some((key, old)) => {
                if old >= FOREIGN {
                    self.free_foreign(old);
                }
                key
            }
            None => {
                let bucket = entry_cookie(&dentry.name);
                let mut n = 0;
                for ((_, c), _) in self
                    .entries
                    .range((parent, bucket)..=(parent, bucket | (BUCKET - 1)))
                {
                    if c & (BUCKET - 1) != n {
                        break;
                    }
                    n += 1;
                }
                if n == BUCKET {
                    return false;
                }
                self.churn += 1;
                (parent, bucket | n)
            }
        };
        let value = self.value_for(parent, dentry);
        self.entries.insert(key, value);
        true
    }

    pub fn delete_dentry(&mut self, parent: Soid, name: &[u8]) {
        if let Some((key, value)) = self.find_entry(parent, name) {
            self.entries.remove(&key);
            if value >= FOREIGN {
                self.free_foreign(value);
            }
            self.churn += 1;
        }
    }

    /// Does directory `parent` have any entries here?
    pub fn has_entries(&self, parent: Soid) -> bool {
        self.entries
            .range((parent, 0)..=(parent, u64::MAX))
            .next()
            .is_some()
    }

    /// Up to `limit` entries of `parent` with cookie > `after`, in cookie
    /// order.
    pub fn readdir(&self, parent: Soid, after: u64, limit: usize) -> Vec<(u64, Dentry)> {
        self.readdir_page(parent, after, limit).0
    }

    /// [`Table::readdir`], and whether the directory ends there: no entry
    /// of `parent` after the last one returned (fewer than `limit` were
    /// left).
    pub fn readdir_page(
        &self,
        parent: Soid,
        after: u64,
        limit: usize,
    ) -> (Vec<(u64, Dentry)>, bool) {
        let Some(start) = after.checked_add(1) else {
            return (Vec::new(), true);
        };
        let page: Vec<(u64, u32)> = self
            .entries
            .range((parent, start)..=(parent, u64::MAX))
            .take(limit)
            .map(|((_, cookie), &v)| (*cookie, v))
            .collect();
        // Counted before entries that do not resolve are dropped below, so
        // a short page is the end and never a gap.
        let end = page.len() < limit;
        // Cookie order is random over the rows, which a directory's files
        // fill in creation order: reading the rows in row order instead
        // turns a cache miss per entry into a sequential scan (2-3× faster
        // on a cold 1,000-entry directory).
        let mut by_row: Vec<u32> = (0..page.len() as u32).collect();
        by_row.sort_unstable_by_key(|&i| page[i as usize].1);
        let mut out: Vec<Option<(u64, Dentry)>> = vec![None; page.len()];
        for i in by_row {
            let (cookie, v) = page[i as usize];
            out[i as usize] = self.to_dentry(v).map(|d| (cookie, d));
        }
        (out.into_iter().flatten().collect(), end)
    }

    /// All entries, as `(parent, dentry)`, in key order.
    /// The entries of directory `parent` in this table, as (child, type,
    /// name), in cookie order, without copying names.
    pub fn entries_of(&self, parent: Soid) -> impl Iterator<Item = (Soid, FileType, &[u8])> + '_ {
        self.entries
            .range((parent, 0)..=(parent, u64::MAX))
            .filter_map(|(_, &v)| self.resolve(v).map(|(c, t, n)| (c, t, &**n)))
    }

    pub fn dentries(&self) -> impl Iterator<Item = (Soid, Dentry)> + '_ {
        self.entries
            .iter()
            .filter_map(|((p, _), &v)| self.to_dentry(v).map(|d| (*p, d)))
    }

    /// Highest inode SOID in `range`.
    pub fn max_used(&self, range: SoidRange) -> Option<Soid> {
        self.by_soid
            .range(range.first..=range.last)
            .next_back()
            .map(|(s, _)| *s)
    }

    /// Lowest SOID in `range` (clipped to this table) with no inode.
    pub fn min_free(&self, range: SoidRange) -> Option<Soid> {
        let first = range.first.max(self.range.first);
        let last = range.last.min(self.range.last);
        if first > last {
            return None;
        }
        let mut want = first;
        for (s, _) in self.by_soid.range(first..=last) {
            if *s != want {
                return Some(want);
            }
            want = want.checked_next()?;
            if want > last {
                return None;
            }
        }
        Some(want)
    }

    /// Applies one journaled mutation (also used by recovery). Fails only
    /// when an entry's hash bucket is full, which a transaction checks
    /// before it journals (so only a corrupt journal can fail here).
    pub fn apply(&mut self, m: Mutation) -> Result<(), BuildError> {
        match m {
            Mutation::PutInode { soid, inode } => self.put_inode(soid, inode),
            Mutation::DeleteInode { soid } => self.delete_inode(soid),
            Mutation::PutDentry { parent, dentry } => {
                if !self.put_dentry(parent, dentry) {
                    return Err(BuildError::BucketFull(parent));
                }
            }
            Mutation::DeleteDentry { parent, name } => self.delete_dentry(parent, &name),
            Mutation::HighWater(_) => {}
        }
        Ok(())
    }

    /// Records that the record `lsn` was applied at engine epoch `epoch`.
    pub fn mark_applied(&mut self, lsn: Lsn, epoch: u64) {
        self.last_lsn = self.last_lsn.max(lsn);
        if self.first_dirty_lsn.is_none() {
            self.first_dirty_lsn = Some(lsn);
            self.dirty_epoch = Some(epoch);
        }
    }

    /// A directory SOID near the middle of the table at which it can be
    /// split, or `None` when no directory other than the first inode exists.
    pub fn split_point(&self) -> Option<Soid> {
        let n = self.by_soid.len();
        let mut best: Option<(usize, Soid)> = None;
        for (i, (s, &row)) in self.by_soid.iter().enumerate().skip(1) {
            if self.row(row).is_some_and(|(_, ino)| ino.is_dir()) {
                let dist = i.abs_diff(n / 2);
                if best.is_none_or(|(d, _)| dist < d) {
                    best = Some((dist, *s));
                }
                if i > n / 2 && best.is_some() {
                    break;
                }
            }
        }
        best.map(|(_, s)| s)
    }

    /// Takes every inode and entry out, leaving the table empty. An entry
    /// stays a [`Held::Row`] only if its child will be in the same table
    /// as its parent after a split at `at` (or always, without a split).
    fn take_contents(&mut self, at: Option<Soid>) -> Contents {
        let upper = |s: Soid| at.is_some_and(|a| s >= a);
        let entries: Vec<(EntryKey, Held)> = self
            .entries
            .iter()
            .filter_map(|(k, &v)| {
                let held = match self.row(v) {
                    Some((child, _)) if v < FOREIGN && upper(*child) == upper(k.0) => Held::Row(v),
                    _ => Held::Whole(self.to_dentry(v)?),
                };
                Some((*k, held))
            })
            .collect();
        let mut inodes: Vec<(u32, Soid, Inode)> = self.rows.drain_with_ids().collect();
        inodes.sort_by_key(|(_, s, _)| *s);
        self.by_soid = BTreeMap::new();
        self.entries = BTreeMap::new();
        self.free_rows = Vec::new();
        self.foreign = Vec::new();
        self.free_foreign = Vec::new();
        self.dirs = 0;
        self.name_bytes = 0;
        self.summary = summary::Summary::default();
        self.exits = exits::Exits::default();
        Contents { inodes, entries }
    }

    /// Moves every inode with SOID ≥ `at` and every entry whose parent is ≥
    /// `at` into a new table `new_id` covering `[at, range.last]`. Both
    /// halves are rebuilt compactly, without an index.
    ///
    /// REQUIRES: `self.range.first < at <= self.range.last`.
    pub fn split_off(&mut self, at: Soid, new_id: TableId) -> Table {
        let mut upper = Table::new(
            new_id,
            SoidRange {
                first: at,
                last: self.range.last,
            },
        );
        self.range.last = at.checked_prev().unwrap_or(at);
        let mut lower = self.take_contents(Some(at));
        let upper_inodes = lower
            .inodes
            .split_off(lower.inodes.partition_point(|(_, s, _)| *s < at));
        let upper_entries = lower
            .entries
            .split_off(lower.entries.partition_point(|((p, _), _)| *p < at));
        self.fill(lower);
        upper.fill(Contents {
            inodes: upper_inodes,
            entries: upper_entries,
        });
        upper.last_lsn = self.last_lsn;
        upper.snapshot_lsn = 0;
        upper.first_dirty_lsn = self.first_dirty_lsn;
        upper.dirty_epoch = self.dirty_epoch;
        upper.carried = self.carried.clone();
        self.snapshot_file = None;
        upper
    }

    /// Absorbs `upper`, the table right after this one.
    ///
    /// REQUIRES: `upper.range.first == self.range.last + 1`.
    pub fn merge(&mut self, mut upper: Table) {
        self.range.last = upper.range.last;
        // Upper's row ids follow lower's in the combined old-row space.
        let offset = self.rows.len() as u32;
        let mut lower = self.take_contents(None);
        let higher = upper.take_contents(None);
        lower.inodes.extend(
            higher
                .inodes
                .into_iter()
                .map(|(r, s, i)| (r + offset, s, i)),
        );
        lower
            .entries
            .extend(higher.entries.into_iter().map(|(k, held)| match held {
                Held::Row(r) => (k, Held::Row(r + offset)),
                whole => (k, whole),
            }));
        self.fill(lower);
        self.last_lsn = self.last_lsn.max(upper.last_lsn);
        self.first_dirty_lsn = match (self.first_dirty_lsn, upper.first_dirty_lsn) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.dirty_epoch = match (self.dirty_epoch, upper.dirty_epoch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.carried.absorb(std::mem::take(&mut upper.carried));
        self.snapshot_file = None;
    }

    /// Rebuilds the structures compactly (packed B-trees, exactly sized
    /// slab, no free rows) when enough has changed since the last build to
    /// be worth it. Drops the index then (row ids change); the caller
    /// rebuilds it. Returns whether it compacted.
    pub fn compact_if_fragmented(&mut self) -> bool {
        if self.churn <= self.inode_count() / 8 + 64 {
            return false;
        }
        let contents = self.take_contents(None);
        self.fill(contents);
        true
    }

    /// The manifest entry for this table's snapshot, if it has one in its
    /// current shape.
    pub fn manifest_entry(&self) -> Option<crate::manifest::TableEntry> {
        Some(crate::manifest::TableEntry {
            id: self.id,
            range: self.range,
            file: self.snapshot_file.clone()?,
            lsn: self.snapshot_lsn,
            inodes: self.inode_count() as u64,
        })
    }

    /// Encodes the table as a snapshot (see [`decode_snapshot`]).
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let body = SnapshotBody {
            inodes: self.inodes().map(|(s, i)| (s, i.clone())).collect(),
            dentries: self.dentries().collect(),
        };
        encode_snapshot_carrying(
            self.id,
            self.range,
            self.last_lsn,
            &body,
            &self.carried.to_wire(),
        )
    }

    /// Builds a table from a decoded snapshot.
    pub fn from_snapshot(snap: Snapshot) -> Result<Table, BuildError> {
        let mut t = Table::build(snap.id, snap.range, snap.body.inodes, snap.body.dentries)?;
        t.last_lsn = snap.lsn;
        t.snapshot_lsn = snap.lsn;
        t.carried = carried::CarriedReplies::from_wire(snap.carried);
        Ok(t)
    }

    /// Checks the structural invariants of the module docs; `Err` names
    /// the first one broken. For tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (s, &row) in &self.by_soid {
            match self.row(row) {
                Some((rs, _)) if rs == s => {}
                other => return Err(format!("by_soid {s} → row {row} holds {other:?}")),
            }
        }
        let live = self.rows.iter().count();
        if live != self.by_soid.len() {
            return Err(format!("{live} live rows, {} SOIDs", self.by_soid.len()));
        }
        for (&(parent, cookie), &v) in &self.entries {
            if !self.range.contains(parent) {
                return Err(format!("entry of {parent} outside {:?}", self.range));
            }
            let Some((child, ftype, name)) = self.resolve(v) else {
                return Err(format!("entry ({parent}, {cookie}) → dangling {v}"));
            };
            if entry_cookie(name) != cookie & !(BUCKET - 1) {
                return Err(format!("entry {name:?} of {parent} in the wrong bucket"));
            }
            let canonical = self
                .by_soid
                .get(&child)
                .and_then(|&r| self.row(r).map(|(_, i)| (r, i)))
                .filter(|(_, i)| i.parent == parent && *i.name == **name && i.ftype == ftype)
                .map(|(r, _)| r);
            match (canonical, v < FOREIGN) {
                (Some(r), true) if r == v => {}
                (None, false) => {}
                _ => {
                    return Err(format!(
                    "entry {name:?} of {parent} → {child}: stored as {v}, canonical {canonical:?}"
                ))
                }
            }
        }
        let mut recount = summary::Summary::default();
        for (_, i) in self.inodes() {
            recount.add(i);
        }
        if recount != self.summary {
            return Err(format!(
                "summary {:?} differs from a recount {:?}",
                self.summary, recount
            ));
        }
        let mut exits = exits::Exits::default();
        for (_, i) in self.inodes() {
            exits.add(self.range, i);
        }
        if exits != self.exits {
            return Err(format!(
                "exits {:?} differ from a recount {:?}",
                self.exits, exits
            ));
        }
        let used_foreign = self.entries.values().filter(|&&v| v >= FOREIGN).count();
        let live_foreign = self.foreign.iter().flatten().count();
        if used_foreign != live_foreign {
            return Err(format!(
                "{used_foreign} foreign entries referenced, {live_foreign} stored"
            ));
        }
        Ok(())
    }
}

/// Keys for entries listed without them (a snapshot): disambiguators in
/// list order within each hash bucket; a later duplicate of a (parent,
/// name) replaces the earlier one's entry, as applying them in order would.
fn assign_cookies(entries: Vec<(Soid, Dentry)>) -> Result<Vec<(EntryKey, Dentry)>, BuildError> {
    let mut keyed: Vec<(Soid, u64, Dentry)> = entries
        .into_iter()
        .map(|(p, d)| (p, entry_cookie(&d.name), d))
        .collect();
    // Stable: list order is kept within a bucket.
    keyed.sort_by_key(|(p, bucket, _)| (*p, *bucket));
    let mut out: Vec<(EntryKey, Dentry)> = Vec::with_capacity(keyed.len());
    let mut group_start = 0;
    for (parent, bucket, d) in keyed {
        if out
            .last()
            .is_none_or(|((p, c), _)| *p != parent || c & !(BUCKET - 1) != bucket)
        {
            group_start = out.len();
        }
        if let Some(same) = out[group_start..]
            .iter_mut()
            .find(|(_, e)| e.name == d.name)
        {
            same.1 = d;
            continue;
        }
        let n = (out.len() - group_start) as u64;
        if n == BUCKET {
            return Err(BuildError::BucketFull(parent));
        }
        out.push(((parent, bucket | n), d));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
