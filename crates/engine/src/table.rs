//! A table: a contiguous SOID range and everything Sextant keeps for it
//! (DESIGN.md, "the table is the cluster").
//!
//! A table owns
//! - the inodes whose SOIDs fall in its range, in a slab with stable row ids
//!   (so the K-D tree can refer to rows by a `u32`) and a SOID → row map;
//! - the directory entries whose *parent* SOID falls in its range, keyed by
//!   `(parent, cookie, n)` where `cookie` is [`name_cookie`] of the name and
//!   `n` disambiguates the (astronomically rare) cookie collisions, so
//!   readdir walks a directory in cookie order and a cursor survives changes;
//! - write-back bookkeeping (which journal records it holds that are not in
//!   its snapshot yet).
//!
//! Invariants:
//! - every inode key and every entry's parent lies inside `range`;
//! - `first_dirty_lsn.is_some()` iff some applied record is newer than the
//!   table's snapshot; then every record the table reflects with LSN >
//!   `snapshot_lsn` is still in the journal;
//! - a table holds no I/O handle: the engine reads and writes snapshots.

use crate::index::TableIndex;
use crate::inode::{name_cookie, Dentry, Inode};
use crate::journal::Lsn;
use crate::record::Mutation;
use serde::{Deserialize, Serialize};
use sextant_types::{Soid, SoidRange};
use std::collections::BTreeMap;

pub type TableId = u64;

/// `(parent, cookie, disambiguator)`.
type DentryKey = (Soid, u64, u32);

/// One table. See the module docs.
#[derive(Debug)]
pub struct Table {
    pub id: TableId,
    pub range: SoidRange,
    rows: Vec<Option<(Soid, Inode)>>,
    free_rows: Vec<u32>,
    by_soid: BTreeMap<Soid, u32>,
    dentries: BTreeMap<DentryKey, Dentry>,
    dirs: usize,
    /// Heap bytes of names that do not fit inline (for the memory budget).
    name_bytes: usize,
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
}

impl Table {
    pub fn new(id: TableId, range: SoidRange) -> Table {
        Table {
            id,
            range,
            rows: Vec::new(),
            free_rows: Vec::new(),
            by_soid: BTreeMap::new(),
            dentries: BTreeMap::new(),
            dirs: 0,
            name_bytes: 0,
            last_lsn: 0,
            snapshot_lsn: 0,
            first_dirty_lsn: None,
            dirty_epoch: None,
            snapshot_file: None,
            next_split_check: 0,
            index: TableIndex::default(),
        }
    }

    pub fn inode_count(&self) -> usize {
        self.by_soid.len()
    }

    pub fn dir_count(&self) -> usize {
        self.dirs
    }

    pub fn dentry_count(&self) -> usize {
        self.dentries.len()
    }

    pub fn is_dirty(&self) -> bool {
        self.first_dirty_lsn.is_some()
    }

    /// Rough resident bytes, for the cache budget.
    pub fn approx_bytes(&self) -> usize {
        const INODE_ROW: usize = std::mem::size_of::<Option<(Soid, Inode)>>() + 40;
        const DENTRY: usize = std::mem::size_of::<(DentryKey, Dentry)>() + 24;
        self.rows.len() * INODE_ROW
            + self.dentries.len() * DENTRY
            + self.name_bytes
            + self.index.memory_bytes()
    }

    pub fn inode(&self, soid: Soid) -> Option<&Inode> {
        let row = *self.by_soid.get(&soid)?;
        self.row(row).map(|(_, i)| i)
    }

    /// The inode in slab row `row`, if live.
    pub fn row(&self, row: u32) -> Option<&(Soid, Inode)> {
        self.rows.get(row as usize).and_then(|r| r.as_ref())
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
        if let Some(&row) = self.by_soid.get(&soid) {
            if let Some((_, old)) = self.rows[row as usize].replace((soid, inode)) {
                self.name_bytes -= old.name.heap_bytes();
                self.dirs -= old.is_dir() as usize;
            }
            self.dirs += is_dir as usize;
            self.index.row_changed(row);
            return;
        }
        let row = match self.free_rows.pop() {
            Some(r) => {
                self.rows[r as usize] = Some((soid, inode));
                r
            }
            None => {
                self.rows.push(Some((soid, inode)));
                (self.rows.len() - 1) as u32
            }
        };
        self.dirs += is_dir as usize;
        self.by_soid.insert(soid, row);
        self.index.row_changed(row);
    }

    pub fn delete_inode(&mut self, soid: Soid) {
        if let Some(row) = self.by_soid.remove(&soid) {
            if let Some((_, old)) = self.rows[row as usize].take() {
                self.name_bytes -= old.name.heap_bytes();
                self.dirs -= old.is_dir() as usize;
            }
            self.free_rows.push(row);
            self.index.row_changed(row);
        }
    }

    fn dentry_key(&self, parent: Soid, name: &[u8]) -> Option<DentryKey> {
        let cookie = name_cookie(name);
        self.dentries
            .range((parent, cookie, 0)..=(parent, cookie, u32::MAX))
            .find(|(_, d)| &*d.name == name)
            .map(|(k, _)| *k)
    }

    pub fn dentry(&self, parent: Soid, name: &[u8]) -> Option<&Dentry> {
        self.dentry_key(parent, name)
            .and_then(|k| self.dentries.get(&k))
    }

    /// Inserts or replaces the entry `dentry.name` in `parent`.
    pub fn put_dentry(&mut self, parent: Soid, dentry: Dentry) {
        if let Some(k) = self.dentry_key(parent, &dentry.name) {
            self.dentries.insert(k, dentry);
            return;
        }
        let cookie = name_cookie(&dentry.name);
        let n = self
            .dentries
            .range((parent, cookie, 0)..=(parent, cookie, u32::MAX))
            .next_back()
            .map_or(0, |((_, _, n), _)| n + 1);
        self.name_bytes += dentry.name.heap_bytes();
        self.dentries.insert((parent, cookie, n), dentry);
    }

    pub fn delete_dentry(&mut self, parent: Soid, name: &[u8]) {
        if let Some(k) = self.dentry_key(parent, name) {
            if let Some(d) = self.dentries.remove(&k) {
                self.name_bytes -= d.name.heap_bytes();
            }
        }
    }

    /// Does directory `parent` have any entries here?
    pub fn has_entries(&self, parent: Soid) -> bool {
        self.dentries
            .range((parent, 0, 0)..=(parent, u64::MAX, u32::MAX))
            .next()
            .is_some()
    }

    /// Entries of `parent` with cookie > `after`, in cookie order, at most
    /// `limit` of them but never splitting a group of equal cookies.
    pub fn readdir(&self, parent: Soid, after: u64, limit: usize) -> Vec<(u64, &Dentry)> {
        let mut out: Vec<(u64, &Dentry)> = Vec::new();
        let start = match after.checked_add(1) {
            Some(s) => s,
            None => return out,
        };
        for ((_, cookie, _), d) in self
            .dentries
            .range((parent, start, 0)..=(parent, u64::MAX, u32::MAX))
        {
            if out.len() >= limit && out.last().is_some_and(|(c, _)| c != cookie) {
                break;
            }
            out.push((*cookie, d));
        }
        out
    }

    /// All entries, as `(parent, dentry)`.
    pub fn dentries(&self) -> impl Iterator<Item = (Soid, &Dentry)> + '_ {
        self.dentries.iter().map(|((p, _, _), d)| (*p, d))
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

    /// Applies one journaled mutation (also used by recovery).
    pub fn apply(&mut self, m: Mutation) {
        match m {
            Mutation::PutInode { soid, inode } => self.put_inode(soid, inode),
            Mutation::DeleteInode { soid } => self.delete_inode(soid),
            Mutation::PutDentry { parent, dentry } => self.put_dentry(parent, dentry),
            Mutation::DeleteDentry { parent, name } => self.delete_dentry(parent, &name),
            Mutation::HighWater(_) => {}
        }
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

    /// Moves every inode with SOID ≥ `at` and every entry whose parent is ≥
    /// `at` into a new table `new_id` covering `[at, range.last]`.
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
        let moved: Vec<Soid> = self.by_soid.range(at..).map(|(s, _)| *s).collect();
        for soid in moved {
            if let Some(row) = self.by_soid.get(&soid).copied() {
                if let Some((_, inode)) = self.rows[row as usize].clone() {
                    self.delete_inode(soid);
                    upper.put_inode(soid, inode);
                }
            }
        }
        let upper_dentries = self.dentries.split_off(&(at, 0, 0));
        for d in upper_dentries.values() {
            self.name_bytes -= d.name.heap_bytes();
            upper.name_bytes += d.name.heap_bytes();
        }
        upper.dentries = upper_dentries;
        upper.last_lsn = self.last_lsn;
        upper.snapshot_lsn = 0;
        upper.first_dirty_lsn = self.first_dirty_lsn;
        upper.dirty_epoch = self.dirty_epoch;
        self.snapshot_file = None;
        self.compact_rows();
        self.index = TableIndex::default();
        upper.index = TableIndex::default();
        upper
    }

    /// Absorbs `upper`, the table right after this one.
    ///
    /// REQUIRES: `upper.range.first == self.range.last + 1`.
    pub fn merge(&mut self, upper: Table) {
        self.range.last = upper.range.last;
        for (soid, inode) in upper.rows.into_iter().flatten() {
            self.put_inode(soid, inode);
        }
        for ((p, _, _), d) in upper.dentries {
            self.put_dentry(p, d);
        }
        self.last_lsn = self.last_lsn.max(upper.last_lsn);
        self.first_dirty_lsn = match (self.first_dirty_lsn, upper.first_dirty_lsn) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.dirty_epoch = match (self.dirty_epoch, upper.dirty_epoch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.snapshot_file = None;
        self.index = TableIndex::default();
    }

    /// Renumbers slab rows densely (after a split removed many).
    fn compact_rows(&mut self) {
        let live: Vec<(Soid, Inode)> = self.rows.drain(..).flatten().collect();
        self.free_rows.clear();
        self.by_soid.clear();
        self.dirs = 0;
        self.name_bytes = self.dentries.values().map(|d| d.name.heap_bytes()).sum();
        for (s, i) in live {
            self.put_inode(s, i);
        }
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
            dentries: self.dentries().map(|(p, d)| (p, d.clone())).collect(),
        };
        encode_snapshot(self.id, self.range, self.last_lsn, &body)
    }

    /// Builds a table from a decoded snapshot.
    pub fn from_snapshot(snap: Snapshot) -> Table {
        let mut t = Table::new(snap.id, snap.range);
        for (s, i) in snap.body.inodes {
            t.put_inode(s, i);
        }
        for (p, d) in snap.body.dentries {
            t.put_dentry(p, d);
        }
        t.last_lsn = snap.lsn;
        t.snapshot_lsn = snap.lsn;
        t
    }
}

const SNAPSHOT_MAGIC: &[u8; 8] = b"SXTSNAP1";
const SNAPSHOT_HEADER_LEN: usize = 8 + 8 + 16 + 16 + 8 + 8;

#[derive(Serialize, Deserialize, Debug, Default)]
pub struct SnapshotBody {
    pub inodes: Vec<(Soid, Inode)>,
    pub dentries: Vec<(Soid, Dentry)>,
}

/// A decoded snapshot.
#[derive(Debug)]
pub struct Snapshot {
    pub id: TableId,
    pub range: SoidRange,
    pub lsn: Lsn,
    pub body: SnapshotBody,
}

/// Snapshot layout:
///
/// ```text
/// magic "SXTSNAP1" | table id u64 | range.first [16] | range.last [16] | lsn u64 | body_len u64
/// body (postcard: inodes, dentries) | crc32c u32 of everything before
/// ```
/// SOIDs big-endian, integers little-endian.
pub fn encode_snapshot(id: TableId, range: SoidRange, lsn: Lsn, body: &SnapshotBody) -> Vec<u8> {
    let body_bytes = postcard::to_stdvec(body).expect("serializing to a Vec cannot fail");
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body_bytes.len() + 4);
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&range.first.to_be_bytes());
    out.extend_from_slice(&range.last.to_be_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&(body_bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&body_bytes);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a snapshot. Never panics; `Err` says what is wrong.
pub fn decode_snapshot(b: &[u8]) -> Result<Snapshot, String> {
    if b.len() < SNAPSHOT_HEADER_LEN + 4 {
        return Err(format!("snapshot too short ({} bytes)", b.len()));
    }
    if &b[..8] != SNAPSHOT_MAGIC {
        return Err("bad snapshot magic".into());
    }
    let (content, crc_bytes) = b.split_at(b.len() - 4);
    let crc = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    if crc32c::crc32c(content) != crc {
        return Err("snapshot checksum mismatch".into());
    }
    let u64_at = |at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let soid_at = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[at..at + 16]);
        Soid::from_be_bytes(a)
    };
    let id = u64_at(8);
    let range = SoidRange::new(soid_at(16), soid_at(32)).ok_or("snapshot range inverted")?;
    let lsn = u64_at(48);
    let body_len = u64_at(56);
    if body_len != (content.len() - SNAPSHOT_HEADER_LEN) as u64 {
        return Err("snapshot body length mismatch".into());
    }
    let body: SnapshotBody = match postcard::take_from_bytes(&content[SNAPSHOT_HEADER_LEN..]) {
        Ok((body, [])) => body,
        Ok((_, extra)) => return Err(format!("snapshot body has {} trailing bytes", extra.len())),
        Err(e) => return Err(format!("snapshot body: {e}")),
    };
    for (s, _) in &body.inodes {
        if !range.contains(*s) {
            return Err(format!("inode {s} outside the table range"));
        }
    }
    for (p, _) in &body.dentries {
        if !range.contains(*p) {
            return Err(format!("entry of {p} outside the table range"));
        }
    }
    Ok(Snapshot {
        id,
        range,
        lsn,
        body,
    })
}
