//! Child-closest SOID assignment (Ursa Minor §3.3). Pure logic, no I/O.
//!
//! The SOID of an inode decides which table (and so which server) holds it.
//! Giving the children of a directory SOIDs numerically close to the
//! directory's own keeps a subtree in one table: `ls -al` walks adjacent
//! B-tree keys and CREATE/LINK usually touch a single table. This module
//! picks those SOIDs; everything else treats a SOID as an opaque number.
//!
//! # Bit layout
//!
//! Bit 127 is the most significant. The two prefix bits select a region.
//! The widths are configuration ([`SoidLayout`]); the defaults are shown.
//!
//! ```text
//! primary (00) and too-deep (01):
//!  127 126 125                                               16 15          0
//! +-------+--------+--------+--------+-- ... --+---------+----+--------------+
//! |prefix |  (pad) | slot 0 | slot 1 |         | slot 10 |    | file segment |
//! +-------+--------+--------+--------+-- ... --+---------+----+--------------+
//!          ^ zero    10 bits  10 bits             10 bits        16 bits
//!          (2 + 11*10 + 16 = 128: no pad with the defaults)
//!
//! too-deep (01): the first `deep_root_slots` (default 2) slots together hold
//! a 20-bit root id, handed out from a global counter; the remaining 9 slots
//! are filled child-closest below that root exactly as in the primary region.
//!
//! too-wide (10):
//! +-------+--------------------+-------------------------------------------+
//! |  10   | bucket id (30 bit) |          file number (96 bits)            |
//! +-------+--------------------+-------------------------------------------+
//!
//! catch-all (11):
//! +-------+----------------------------------------------------------------+
//! |  11   |           sequence number (126 bits, from a counter)           |
//! +-------+----------------------------------------------------------------+
//! ```
//!
//! If the configured widths use fewer than 126 bits, the unused ("pad") bits
//! sit right below the prefix and are zero in every SOID this module builds
//! in the primary and too-deep regions; a SOID read from disk with non-zero
//! pad bits is treated like a catch-all SOID (it has no subtree).
//!
//! # The child-closest policy
//!
//! * The root directory is `Soid 0`: primary region, every slot empty.
//! * A slot value of 0 means "empty"; slot values are `1..=2^slot_bits-1`.
//! * A new subdirectory copies its parent's directory segment and writes a
//!   fresh value into the most significant empty slot; its file segment is 0.
//! * A new file gets its parent's directory segment and a file segment value
//!   `1..=2^file_bits-1`.
//!
//! This lays the namespace out in pre-order: a directory, then its files,
//! then its subdirectories (each with everything beneath it). The subtree of
//! a directory that has filled slots `0..k` is the contiguous range
//! `[dir, dir | (all bits below slot k-1 set)]` ([`SoidLayout::subtree_range`]).
//!
//! Why the defaults: the requirement is "no overflow for ~4,000 files and
//! ~1,000 subdirectories per directory, ~12 levels deep". 10-bit slots give
//! 1,023 subdirectories per directory; 11 slots give 11 directory levels
//! below the root, i.e. paths of 12 components (11 directories and a file)
//! stay in the primary region; 16 file bits give 65,535 files per directory
//! (the 4,000 target with a wide margin, since large directories are far
//! more common than deep ones). `2 + 11*10 + 16 = 128`. The too-wide region
//! uses 30 bucket bits (~10^9 overflowing directories) and 96 file bits (no
//! practical limit per bucket). Too-deep roots use 2 slots (~10^6 roots,
//! each with 9 further levels) because one 10-bit slot (1,023 roots) would
//! be exhausted quickly by a few deep trees.
//!
//! # Choosing a value, and reuse
//!
//! All decisions are made through the [`SoidSpace`] queries, so the engine
//! needs O(log n) per query. The next value in a range is `max_used + 1`;
//! only when that passes the end of the range is a free value searched for:
//! [`SoidSpace::min_free`] for file numbers, and for directory slots a slot
//! whose whole subtree range is free (`max_used(subtree) == None`, scanning
//! at most [`MAX_SLOT_SCAN`] slots). So SOIDs freed by deletions are reused
//! once a range has been filled up once.
//!
//! # Overflow (degrades locality, never correctness)
//!
//! * **Directory, too deep or too wide** (no empty slot left, or no free
//!   subdirectory slot): the directory becomes a new root in the too-deep
//!   region (next root id from [`GlobalHighWater::too_deep_roots`]); its own
//!   children are placed child-closest beneath it again.
//! * **File, too many files**: first the parent's [`DirExtents`] are tried in
//!   order. Then, if the directory's next sibling slot (the slot after its
//!   own value, or after the last sibling range it already took over) has a
//!   completely free subtree range, the directory takes that range over: the
//!   file gets a SOID in it (one "that would be used by its nonexistent
//!   cousin") and the range is returned in [`Allocation::new_extent`] for the
//!   engine to store in the directory's [`DirExtents`]. Because those SOIDs
//!   are then in use, a later subdirectory of the grandparent will not get
//!   that slot (slots are chosen by `max_used`). The root directories (the
//!   primary root and too-deep roots) have no sibling slots. Otherwise the
//!   file opens a new too-wide bucket (next id from
//!   [`GlobalHighWater::too_wide_buckets`]), also returned as a new extent.
//! * **Region overflow**: if the too-deep root ids or the too-wide bucket ids
//!   run out, the catch-all region is used, sequentially from
//!   [`GlobalHighWater::catch_all`].
//! * **Parents without a subtree** (directories in the too-wide or catch-all
//!   region, or malformed SOIDs read from disk): subdirectories become new
//!   too-deep roots (else catch-all); files use the parent's extents, then a
//!   new too-wide bucket (else catch-all).
//! * When all of that fails, [`AllocError::Exhausted`].
//!
//! The global counters are high-water marks: ids are never handed out
//! twice by a counter. Each counter step is still checked against the
//! [`SoidSpace`] (`max_used` over the rest of the region), so a lost or
//! stale high-water mark cannot cause a SOID to be reused while in use.
//!
//! # Invariants
//!
//! * Every SOID returned by [`allocate`] was free according to the
//!   [`SoidSpace`] at the time of the call, and every returned new extent was
//!   entirely free.
//! * In the primary and too-deep regions, when no overflow happened, a
//!   child's SOID is greater than its parent's and lies inside the parent's
//!   [`SoidLayout::subtree_range`]; a subdirectory's subtree range is nested
//!   in its parent's.
//! * No function here panics, whatever SOID, extents or layout it is given.
//!   [`allocate`] with a layout that fails [`SoidLayout::validate`] returns
//!   [`AllocError::Exhausted`].

use serde::{Deserialize, Serialize};
use sextant_types::{Soid, SoidRange};

/// Bits of a SOID below the region prefix.
const BODY_BITS: u32 = 126;

/// Upper bound on the number of subdirectory slots examined when looking for
/// a reusable slot after `max_used + 1` ran past the end. Bounds the cost of
/// a `mkdir` in a directory that has (had) very many subdirectories; missing
/// a free slot beyond the bound only costs locality (the directory then
/// becomes a too-deep root).
pub const MAX_SLOT_SCAN: u128 = 4096;

/// Bit widths of the SOID fields. See the module documentation for the
/// picture and for why the defaults were chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoidLayout {
    /// Width of one directory slot. A directory can have `2^slot_bits - 1`
    /// subdirectories before overflowing.
    pub slot_bits: u32,
    /// Number of directory slots, i.e. directory levels below the root.
    pub slots: u32,
    /// Width of the file segment. A directory can have `2^file_bits - 1`
    /// files before overflowing.
    pub file_bits: u32,
    /// How many of the most significant slots form the root id of a
    /// too-deep root (`1..=slots`).
    pub deep_root_slots: u32,
    /// Width of the bucket id in the too-wide region; the file number gets
    /// the other `126 - wide_bucket_bits` bits.
    pub wide_bucket_bits: u32,
}

impl Default for SoidLayout {
    fn default() -> Self {
        SoidLayout {
            slot_bits: 10,
            slots: 11,
            file_bits: 16,
            deep_root_slots: 2,
            wide_bucket_bits: 30,
        }
    }
}

/// Why a [`SoidLayout`] is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("SOID layout field `{0}` must be at least 1")]
    Zero(&'static str),
    #[error("SOID layout needs {bits} bits below the prefix, only 126 are available")]
    TooManyBits { bits: u64 },
    #[error("deep_root_slots ({deep_root_slots}) must be between 1 and slots ({slots})")]
    DeepRootSlots { deep_root_slots: u32, slots: u32 },
    #[error("wide_bucket_bits ({0}) must be between 1 and 125")]
    WideBucketBits(u32),
}

/// The four regions selected by the two prefix bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Region {
    Primary,
    TooDeep,
    TooWide,
    CatchAll,
}

/// What the allocator may ask about which SOIDs are in use. Implemented by
/// the engine over its tables. Errors are passed through (the engine uses
/// them to say "lock more tables and retry").
pub trait SoidSpace {
    type Error;
    /// The largest SOID in `range` that is in use.
    fn max_used(&mut self, range: SoidRange) -> Result<Option<Soid>, Self::Error>;
    /// The smallest SOID in `range` that is not in use.
    fn min_free(&mut self, range: SoidRange) -> Result<Option<Soid>, Self::Error>;
}

/// High-water marks of the global counters: the largest id handed out so
/// far (0 = none; ids start at 1). Journaled by the engine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalHighWater {
    /// Root ids in the too-deep region.
    pub too_deep_roots: u128,
    /// Bucket ids in the too-wide region.
    pub too_wide_buckets: u128,
    /// Sequence numbers in the catch-all region.
    pub catch_all: u128,
}

impl GlobalHighWater {
    /// Component-wise maximum (used by recovery).
    pub fn merge_max(&mut self, other: &GlobalHighWater) {
        self.too_deep_roots = self.too_deep_roots.max(other.too_deep_roots);
        self.too_wide_buckets = self.too_wide_buckets.max(other.too_wide_buckets);
        self.catch_all = self.catch_all.max(other.catch_all);
    }
}

/// Extra SOID ranges a directory allocates its files from (taken-over
/// sibling ranges, too-wide buckets). Stored in the directory inode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirExtents {
    pub ranges: Vec<SoidRange>,
    /// Every subdirectory slot was found in use once: later subdirectories
    /// go straight to overflow instead of searching the slots again (which
    /// would cost a scan per mkdir in a directory with >1,023 of them).
    /// The engine clears it on rmdir in the directory, so freed slots are
    /// searched for again; slots freed indirectly (the last inode of an old
    /// slot's subtree removed elsewhere) wait for that: locality degrades,
    /// never correctness.
    pub slots_full: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildKind {
    Directory,
    File,
}

/// The result of [`allocate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The new child's SOID (free per the [`SoidSpace`]).
    pub soid: Soid,
    /// The region `soid` lies in.
    pub region: Region,
    /// A range the parent directory took over for its files; the engine must
    /// append it to the parent's [`DirExtents`]. `soid` lies inside it.
    pub new_extent: Option<SoidRange>,
    /// Whether `hw` was modified (and must be journaled).
    pub high_water_changed: bool,
    /// The parent's subdirectory slots turned out to be all in use; the
    /// engine must set [`DirExtents::slots_full`] in the parent.
    pub slots_now_full: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum AllocError<E> {
    #[error("SOID space exhausted")]
    Exhausted,
    #[error("soid space query failed")]
    Space(E),
}

// ---------------------------------------------------------------------------
// Bit helpers that never panic.

/// The low `bits` bits set (all bits for `bits >= 128`).
fn mask(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// `v << by`, 0 when `by >= 128`.
fn shl(v: u128, by: u32) -> u128 {
    v.checked_shl(by).unwrap_or(0)
}

/// `v >> by`, 0 when `by >= 128`.
fn shr(v: u128, by: u32) -> u128 {
    v.checked_shr(by).unwrap_or(0)
}

fn prefix(region: Region) -> u128 {
    let p: u128 = match region {
        Region::Primary => 0,
        Region::TooDeep => 1,
        Region::TooWide => 2,
        Region::CatchAll => 3,
    };
    p << BODY_BITS
}

fn range(first: u128, last: u128) -> Option<SoidRange> {
    SoidRange::new(Soid::from_u128(first), Soid::from_u128(last))
}

/// Region of a raw SOID value (independent of the layout).
fn region_of(s: u128) -> Region {
    match s >> BODY_BITS {
        0 => Region::Primary,
        1 => Region::TooDeep,
        2 => Region::TooWide,
        _ => Region::CatchAll,
    }
}

// ---------------------------------------------------------------------------
// Layout arithmetic.

impl SoidLayout {
    /// Checks that the widths are non-zero and fit in the 126 bits below the
    /// prefix.
    pub fn validate(&self) -> Result<(), LayoutError> {
        for (name, v) in [
            ("slot_bits", self.slot_bits),
            ("slots", self.slots),
            ("file_bits", self.file_bits),
        ] {
            if v == 0 {
                return Err(LayoutError::Zero(name));
            }
        }
        let bits = u64::from(self.slots) * u64::from(self.slot_bits) + u64::from(self.file_bits);
        if bits > u64::from(BODY_BITS) {
            return Err(LayoutError::TooManyBits { bits });
        }
        if self.deep_root_slots == 0 || self.deep_root_slots > self.slots {
            return Err(LayoutError::DeepRootSlots {
                deep_root_slots: self.deep_root_slots,
                slots: self.slots,
            });
        }
        if self.wide_bucket_bits == 0 || self.wide_bucket_bits >= BODY_BITS {
            return Err(LayoutError::WideBucketBits(self.wide_bucket_bits));
        }
        Ok(())
    }

    /// The region of `s` (its two prefix bits).
    pub fn region(&self, s: Soid) -> Region {
        region_of(s.as_u128())
    }

    /// The contiguous range holding `dir` and everything that child-closest
    /// would place beneath it (for a directory in the primary/too-deep
    /// regions); `None` for SOIDs that cannot have a subtree (files,
    /// too-wide, catch-all, malformed values) or when the layout is invalid.
    pub fn subtree_range(&self, dir: Soid) -> Option<SoidRange> {
        let g = Geom::new(self)?;
        let s = dir.as_u128();
        g.subtree(s, g.tree_pos(s)?)
    }

    /// Depth of a directory below its region root: 0 for the primary root
    /// (`Soid 0`) and for too-deep roots, 1 for their children, and so on.
    /// `None` for SOIDs that cannot be child-closest directories.
    pub fn depth(&self, s: Soid) -> Option<u32> {
        let g = Geom::new(self)?;
        let v = s.as_u128();
        let k = g.tree_pos(v)?;
        Some(k - g.start(v))
    }

    /// The range a directory's own files are numbered in
    /// (`dir + 1 ..= dir + 2^file_bits - 1`), for a child-closest directory.
    pub fn file_range(&self, dir: Soid) -> Option<SoidRange> {
        let g = Geom::new(self)?;
        let s = dir.as_u128();
        g.tree_pos(s)?;
        range(s + 1, s | mask(g.l.file_bits))
    }
}

/// A layout that passed validation; all shift amounts below are < 128.
#[derive(Clone, Copy)]
struct Geom {
    l: SoidLayout,
}

impl Geom {
    fn new(l: &SoidLayout) -> Option<Geom> {
        l.validate().ok().map(|()| Geom { l: *l })
    }

    fn slot_max(&self) -> u128 {
        mask(self.l.slot_bits)
    }

    /// Number of bits below slot `k - 1`, i.e. of slots `k..` plus the file
    /// segment (`k <= slots`).
    fn low_bits(&self, k: u32) -> u32 {
        self.l.slots.saturating_sub(k) * self.l.slot_bits + self.l.file_bits
    }

    /// Shift of slot `i` (`i < slots`).
    fn slot_shift(&self, i: u32) -> u32 {
        self.low_bits(i + 1)
    }

    fn slot(&self, s: u128, i: u32) -> u128 {
        shr(s, self.slot_shift(i)) & self.slot_max()
    }

    fn with_slot(&self, s: u128, i: u32, v: u128) -> u128 {
        let sh = self.slot_shift(i);
        (s & !shl(self.slot_max(), sh)) | shl(v & self.slot_max(), sh)
    }

    fn used_bits(&self) -> u32 {
        self.low_bits(0)
    }

    /// Index of the first slot filled child-closest (after the root id).
    fn start(&self, s: u128) -> u32 {
        match region_of(s) {
            Region::TooDeep => self.l.deep_root_slots,
            _ => 0,
        }
    }

    fn root_bits(&self) -> u32 {
        self.l.deep_root_slots * self.l.slot_bits
    }

    fn root_shift(&self) -> u32 {
        self.slot_shift(self.l.deep_root_slots - 1)
    }

    fn root_id(&self, s: u128) -> u128 {
        shr(s, self.root_shift()) & mask(self.root_bits())
    }

    /// For a well-formed child-closest directory, the number of filled slots
    /// (the root id of a too-deep SOID counts as `deep_root_slots` slots).
    fn tree_pos(&self, s: u128) -> Option<u32> {
        let region = region_of(s);
        if !matches!(region, Region::Primary | Region::TooDeep) {
            return None;
        }
        let pad = s & mask(BODY_BITS) & !mask(self.used_bits());
        if pad != 0 || s & mask(self.l.file_bits) != 0 {
            return None;
        }
        if region == Region::TooDeep && self.root_id(s) == 0 {
            return None;
        }
        let mut k = self.start(s);
        while k < self.l.slots && self.slot(s, k) != 0 {
            k += 1;
        }
        // Everything below the first empty slot must be empty too.
        (s & mask(self.low_bits(k)) == 0).then_some(k)
    }

    fn subtree(&self, dir: u128, k: u32) -> Option<SoidRange> {
        range(dir, dir | mask(self.low_bits(k)))
    }

    /// Subtree range of `dir` (with `k` filled slots) with slot `k - 1`
    /// replaced by `v`: a sibling of `dir` (or, via `k + 1`, a child).
    fn slot_subtree(&self, dir: u128, k: u32, v: u128) -> Option<SoidRange> {
        self.subtree(self.with_slot(dir, k - 1, v), k)
    }

    fn deep_root(&self, id: u128) -> u128 {
        prefix(Region::TooDeep) | shl(id, self.root_shift())
    }

    fn wide_file_bits(&self) -> u32 {
        BODY_BITS - self.l.wide_bucket_bits
    }

    fn bucket(&self, id: u128) -> Option<SoidRange> {
        let first = prefix(Region::TooWide) | shl(id, self.wide_file_bits());
        range(first, first | mask(self.wide_file_bits()))
    }
}

// ---------------------------------------------------------------------------
// Allocation.

/// Picks a SOID for a new child of `parent`. See the module documentation
/// for the policy. `parent_extents` are the extra ranges stored in the
/// parent's inode; `hw` is updated in place when a global counter moves.
pub fn allocate<S: SoidSpace>(
    layout: &SoidLayout,
    parent: Soid,
    parent_extents: &DirExtents,
    kind: ChildKind,
    space: &mut S,
    hw: &mut GlobalHighWater,
) -> Result<Allocation, AllocError<S::Error>> {
    let Some(g) = Geom::new(layout) else {
        return Err(AllocError::Exhausted);
    };
    let mut a = Allocator {
        g,
        space,
        hw,
        hw_changed: false,
        slots_now_full: false,
    };
    let found = match kind {
        ChildKind::Directory => a.directory(parent.as_u128(), parent_extents.slots_full)?,
        ChildKind::File => a.file(parent.as_u128(), parent_extents)?,
    };
    let (soid, new_extent) = found.ok_or(AllocError::Exhausted)?;
    Ok(Allocation {
        soid,
        region: layout.region(soid),
        new_extent,
        high_water_changed: a.hw_changed,
        slots_now_full: a.slots_now_full,
    })
}

type Found = Option<(Soid, Option<SoidRange>)>;

struct Allocator<'a, S: SoidSpace> {
    g: Geom,
    space: &'a mut S,
    hw: &'a mut GlobalHighWater,
    hw_changed: bool,
    slots_now_full: bool,
}

impl<S: SoidSpace> Allocator<'_, S> {
    fn max_used(&mut self, r: SoidRange) -> Result<Option<u128>, AllocError<S::Error>> {
        let m = self.space.max_used(r).map_err(AllocError::Space)?;
        Ok(m.map(Soid::as_u128))
    }

    fn min_free(&mut self, r: SoidRange) -> Result<Option<u128>, AllocError<S::Error>> {
        let m = self.space.min_free(r).map_err(AllocError::Space)?;
        Ok(m.map(Soid::as_u128))
    }

    fn is_free(&mut self, r: SoidRange) -> Result<bool, AllocError<S::Error>> {
        Ok(self.max_used(r)?.is_none())
    }

    fn directory(&mut self, parent: u128, slots_full: bool) -> Result<Found, AllocError<S::Error>> {
        if let Some(k) = self.g.tree_pos(parent) {
            if let Some(s) = self.child_slot(parent, k, slots_full)? {
                return Ok(Some((Soid::from_u128(s), None)));
            }
        }
        if let Some(s) = self.new_deep_root()? {
            return Ok(Some((Soid::from_u128(s), None)));
        }
        self.catch_all()
    }

    /// A free subdirectory slot of `parent` (which has `k` filled slots).
    fn child_slot(
        &mut self,
        parent: u128,
        k: u32,
        slots_full: bool,
    ) -> Result<Option<u128>, AllocError<S::Error>> {
        let g = self.g;
        if k >= g.l.slots {
            return Ok(None);
        }
        let first_child = g.with_slot(parent, k, 1);
        let Some(children) = range(first_child, parent | mask(g.low_bits(k))) else {
            return Ok(None);
        };
        let next = match self.max_used(children)? {
            None => 1,
            Some(m) => g.slot(m, k) + 1,
        };
        if next <= g.slot_max() {
            return Ok(Some(g.with_slot(parent, k, next)));
        }
        if slots_full {
            return Ok(None);
        }
        for v in 1..=g.slot_max().min(MAX_SLOT_SCAN) {
            let Some(sub) = g.slot_subtree(parent, k + 1, v) else {
                continue;
            };
            if self.is_free(sub)? {
                return Ok(Some(sub.first.as_u128()));
            }
        }
        self.slots_now_full = true;
        Ok(None)
    }

    /// A file's SOID: `max_used + 1` in the directory's own file segment or
    /// any of its extents first (O(log n) each); only when all of them are
    /// full at the top, a search for a freed one (O(n), so it must not run
    /// on every create into a big directory); then a new extent.
    fn file(&mut self, parent: u128, extents: &DirExtents) -> Result<Found, AllocError<S::Error>> {
        let pos = self.g.tree_pos(parent);
        let own = pos.and_then(|_| range(parent + 1, parent | mask(self.g.l.file_bits)));
        let ranges: Vec<SoidRange> = own
            .into_iter()
            .chain(extents.ranges.iter().copied().filter(|r| r.first <= r.last))
            .collect();
        for r in &ranges {
            if let Some(s) = self.after_max(*r)? {
                return Ok(Some((s, None)));
            }
        }
        for r in &ranges {
            if let Some(s) = self.min_free(*r)? {
                return Ok(Some((Soid::from_u128(s), None)));
            }
        }
        if let Some(k) = pos {
            if let Some(r) = self.take_over_sibling(parent, k, extents)? {
                return Ok(Some((r.first, Some(r))));
            }
        }
        if let Some(r) = self.new_bucket()? {
            return Ok(Some((r.first, Some(r))));
        }
        self.catch_all()
    }

    /// `max_used + 1` in `r` (its first SOID if it is empty), if that is
    /// still inside `r`.
    fn after_max(&mut self, r: SoidRange) -> Result<Option<Soid>, AllocError<S::Error>> {
        Ok(match self.max_used(r)? {
            None => Some(r.first),
            Some(m) => m
                .checked_add(1)
                .filter(|n| *n <= r.last.as_u128())
                .map(Soid::from_u128),
        })
    }

    /// The subtree range of the directory's next sibling slot, if entirely
    /// free. "Next" is after the directory's own slot value and after every
    /// sibling range it already took over. Region roots have no siblings.
    fn take_over_sibling(
        &mut self,
        dir: u128,
        k: u32,
        extents: &DirExtents,
    ) -> Result<Option<SoidRange>, AllocError<S::Error>> {
        let g = self.g;
        if k <= g.start(dir) {
            return Ok(None);
        }
        let own = g.slot(dir, k - 1);
        let taken = extents
            .ranges
            .iter()
            .filter_map(|r| {
                let w = g.slot(r.first.as_u128(), k - 1);
                (w != 0 && g.slot_subtree(dir, k, w) == Some(*r)).then_some(w)
            })
            .max()
            .unwrap_or(0);
        let next = own.max(taken) + 1;
        if next > g.slot_max() {
            return Ok(None);
        }
        let Some(r) = g.slot_subtree(dir, k, next) else {
            return Ok(None);
        };
        Ok(self.is_free(r)?.then_some(r))
    }

    /// Next id of a global counter: `hw + 1`, moved past anything in use in
    /// the rest of the region (`tail(c)` is the range from id `c` to the end
    /// of the counter's ids; `id_of` maps a SOID in it back to its id).
    fn next_id(
        &mut self,
        hw: u128,
        max_id: u128,
        tail: impl Fn(u128) -> Option<SoidRange>,
        id_of: impl Fn(u128) -> u128,
    ) -> Result<Option<u128>, AllocError<S::Error>> {
        let Some(c) = hw.checked_add(1).filter(|c| *c <= max_id) else {
            return Ok(None);
        };
        let Some(t) = tail(c) else {
            return Ok(None);
        };
        let c = match self.max_used(t)? {
            None => c,
            Some(m) => id_of(m).saturating_add(1).max(c),
        };
        Ok((c <= max_id).then_some(c))
    }

    fn new_deep_root(&mut self) -> Result<Option<u128>, AllocError<S::Error>> {
        let g = self.g;
        let max_id = mask(g.root_bits());
        let end = g.deep_root(max_id) | mask(g.low_bits(g.l.deep_root_slots));
        let tail = |c: u128| range(g.deep_root(c), end);
        let id = self.next_id(self.hw.too_deep_roots, max_id, tail, |m: u128| g.root_id(m))?;
        Ok(id.map(|id| {
            self.hw.too_deep_roots = id;
            self.hw_changed = true;
            g.deep_root(id)
        }))
    }

    fn new_bucket(&mut self) -> Result<Option<SoidRange>, AllocError<S::Error>> {
        let g = self.g;
        let max_id = mask(g.l.wide_bucket_bits);
        let end = prefix(Region::TooWide) | mask(BODY_BITS);
        let tail = |c: u128| range(g.bucket(c)?.first.as_u128(), end);
        let id_of = |m: u128| shr(m, g.wide_file_bits()) & max_id;
        let id = self.next_id(self.hw.too_wide_buckets, max_id, tail, id_of)?;
        Ok(id.and_then(|id| {
            self.hw.too_wide_buckets = id;
            self.hw_changed = true;
            g.bucket(id)
        }))
    }

    fn catch_all(&mut self) -> Result<Found, AllocError<S::Error>> {
        let base = prefix(Region::CatchAll);
        let max_id = mask(BODY_BITS);
        let tail = |c: u128| range(base | c, base | max_id);
        let id = self.next_id(self.hw.catch_all, max_id, tail, |m: u128| m & max_id)?;
        Ok(id.map(|id| {
            self.hw.catch_all = id;
            self.hw_changed = true;
            (Soid::from_u128(base | id), None)
        }))
    }
}

// Binary literals in the tests are grouped by SOID field (slot, slot, slot,
// file segment), not by nibble.
#[cfg(test)]
#[allow(clippy::unusual_byte_groupings)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::convert::Infallible;

    /// In-memory SOID space.
    #[derive(Default)]
    struct MemSpace {
        used: BTreeSet<Soid>,
        queries: usize,
        /// `min_free` calls: O(n) searches in a real table.
        scans: usize,
    }

    impl SoidSpace for MemSpace {
        type Error = Infallible;
        fn max_used(&mut self, r: SoidRange) -> Result<Option<Soid>, Infallible> {
            self.queries += 1;
            Ok(self.used.range(r.first..=r.last).next_back().copied())
        }
        fn min_free(&mut self, r: SoidRange) -> Result<Option<Soid>, Infallible> {
            self.queries += 1;
            self.scans += 1;
            let mut cur = r.first;
            for s in self.used.range(r.first..=r.last) {
                if *s != cur {
                    break;
                }
                match cur.checked_next() {
                    Some(n) => cur = n,
                    None => return Ok(None),
                }
            }
            Ok((cur <= r.last).then_some(cur))
        }
    }

    /// A space whose queries fail.
    struct FailSpace;
    impl SoidSpace for FailSpace {
        type Error = &'static str;
        fn max_used(&mut self, _: SoidRange) -> Result<Option<Soid>, &'static str> {
            Err("locked")
        }
        fn min_free(&mut self, _: SoidRange) -> Result<Option<Soid>, &'static str> {
            Err("locked")
        }
    }

    /// 3 slots of 2 bits (3 subdirectories per directory, 3 levels), 3 file
    /// bits (7 files), too-deep roots of 1 slot (3 roots), 124-bit buckets
    /// (4 files per bucket).
    fn tiny() -> SoidLayout {
        SoidLayout {
            slot_bits: 2,
            slots: 3,
            file_bits: 3,
            deep_root_slots: 1,
            wide_bucket_bits: 124,
        }
    }

    fn s(v: u128) -> Soid {
        Soid::from_u128(v)
    }

    /// A file-system model: the in-use set plus each directory's extents.
    struct Fs {
        layout: SoidLayout,
        space: MemSpace,
        hw: GlobalHighWater,
        extents: std::collections::BTreeMap<Soid, DirExtents>,
    }

    impl Fs {
        fn new(layout: SoidLayout) -> Fs {
            let mut space = MemSpace::default();
            space.used.insert(Soid::ROOT);
            Fs {
                layout,
                space,
                hw: GlobalHighWater::default(),
                extents: Default::default(),
            }
        }

        fn try_add(
            &mut self,
            parent: Soid,
            kind: ChildKind,
        ) -> Result<Allocation, AllocError<Infallible>> {
            let ext = self.extents.get(&parent).cloned().unwrap_or_default();
            let before = self.hw.clone();
            let a = allocate(
                &self.layout,
                parent,
                &ext,
                kind,
                &mut self.space,
                &mut self.hw,
            )?;
            assert!(self.space.used.insert(a.soid), "{a:?} handed out twice");
            assert_eq!(a.region, self.layout.region(a.soid));
            assert_eq!(a.high_water_changed, before != self.hw);
            let mut merged = before.clone();
            merged.merge_max(&self.hw);
            assert_eq!(merged, self.hw, "high-water marks only grow");
            if let Some(r) = a.new_extent {
                assert!(r.contains(a.soid));
                for e in &ext.ranges {
                    assert!(!e.overlaps(&r));
                }
                self.extents.entry(parent).or_default().ranges.push(r);
            }
            if a.slots_now_full {
                assert_eq!(kind, ChildKind::Directory);
                self.extents.entry(parent).or_default().slots_full = true;
            }
            Ok(a)
        }

        fn add(&mut self, parent: Soid, kind: ChildKind) -> Allocation {
            self.try_add(parent, kind).expect("allocation failed")
        }

        fn mkdir(&mut self, parent: Soid) -> Allocation {
            self.add(parent, ChildKind::Directory)
        }

        fn create(&mut self, parent: Soid) -> Allocation {
            self.add(parent, ChildKind::File)
        }
    }

    #[test]
    fn default_layout_is_valid_and_uses_128_bits() {
        let l = SoidLayout::default();
        assert_eq!(l.validate(), Ok(()));
        assert_eq!(2 + l.slots * l.slot_bits + l.file_bits, 128);
        assert_eq!(l.depth(Soid::ROOT), Some(0));
        assert_eq!(
            l.subtree_range(Soid::ROOT),
            Some(range(0, mask(126)).unwrap())
        );
    }

    #[test]
    fn validate_rejects_bad_layouts() {
        let ok = SoidLayout::default();
        let bad = [
            SoidLayout { slot_bits: 0, ..ok },
            SoidLayout { slots: 0, ..ok },
            SoidLayout { file_bits: 0, ..ok },
            SoidLayout {
                file_bits: 17,
                ..ok
            },
            SoidLayout {
                slots: u32::MAX,
                slot_bits: u32::MAX,
                ..ok
            },
            SoidLayout {
                deep_root_slots: 0,
                ..ok
            },
            SoidLayout {
                deep_root_slots: 12,
                ..ok
            },
            SoidLayout {
                wide_bucket_bits: 0,
                ..ok
            },
            SoidLayout {
                wide_bucket_bits: 126,
                ..ok
            },
        ];
        for l in bad {
            assert!(l.validate().is_err(), "{l:?}");
            let mut fs = Fs::new(l);
            assert!(matches!(
                fs.try_add(Soid::ROOT, ChildKind::File),
                Err(AllocError::Exhausted)
            ));
            assert_eq!(l.subtree_range(Soid::ROOT), None);
        }
        assert!(SoidLayout {
            file_bits: 15,
            ..ok
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn layout_serde_round_trip() {
        let l = tiny();
        let bytes = postcard::to_allocvec(&l).unwrap();
        assert_eq!(postcard::from_bytes::<SoidLayout>(&bytes).unwrap(), l);
        let hw = GlobalHighWater {
            too_deep_roots: 3,
            too_wide_buckets: u128::MAX,
            catch_all: 7,
        };
        let bytes = postcard::to_allocvec(&hw).unwrap();
        assert_eq!(postcard::from_bytes::<GlobalHighWater>(&bytes).unwrap(), hw);
    }

    #[test]
    fn merge_max_is_componentwise() {
        let mut a = GlobalHighWater {
            too_deep_roots: 5,
            too_wide_buckets: 1,
            catch_all: 9,
        };
        a.merge_max(&GlobalHighWater {
            too_deep_roots: 2,
            too_wide_buckets: 4,
            catch_all: 9,
        });
        assert_eq!(
            a,
            GlobalHighWater {
                too_deep_roots: 5,
                too_wide_buckets: 4,
                catch_all: 9
            }
        );
    }

    #[test]
    fn tiny_layout_child_closest_values() {
        // Tiny layout: [pad][s0:2][s1:2][s2:2][file:3] = 9 bits.
        let mut fs = Fs::new(tiny());
        let a = fs.mkdir(Soid::ROOT);
        assert_eq!(a.soid, s(0b01_00_00_000));
        assert_eq!(a.region, Region::Primary);
        let f = fs.create(a.soid);
        assert_eq!(f.soid, s(0b01_00_00_001));
        let b = fs.mkdir(a.soid);
        assert_eq!(b.soid, s(0b01_01_00_000));
        let c = fs.mkdir(Soid::ROOT);
        assert_eq!(c.soid, s(0b10_00_00_000));
        assert_eq!(fs.create(Soid::ROOT).soid, s(1));
        let l = tiny();
        assert_eq!(l.depth(b.soid), Some(2));
        assert_eq!(
            l.subtree_range(a.soid),
            range(0b01_00_00_000, 0b01_11_11_111)
        );
        assert_eq!(l.subtree_range(f.soid), None, "files have no subtree");
        assert_eq!(l.file_range(b.soid), range(0b01_01_00_001, 0b01_01_00_111));
        // Malformed directory segments (a gap in the slots) have no subtree.
        assert_eq!(l.subtree_range(s(0b01_00_01_000)), None);
        assert_eq!(l.subtree_range(s(1 << 20)), None, "non-zero pad bits");
    }

    #[test]
    fn too_deep_chain_starts_a_new_root() {
        let mut fs = Fs::new(tiny());
        let mut d = Soid::ROOT;
        for level in 1..=3 {
            let a = fs.mkdir(d);
            assert_eq!(a.region, Region::Primary);
            assert_eq!(tiny().depth(a.soid), Some(level));
            d = a.soid;
        }
        let deep = fs.mkdir(d);
        assert_eq!(deep.region, Region::TooDeep);
        assert!(deep.high_water_changed);
        assert_eq!(fs.hw.too_deep_roots, 1);
        assert_eq!(deep.soid, s((1 << 126) | (1 << 7)));
        assert_eq!(tiny().depth(deep.soid), Some(0));
        // Its children follow child-closest beneath it (2 more levels).
        let sub = tiny().subtree_range(deep.soid).unwrap();
        let c1 = fs.mkdir(deep.soid);
        let c2 = fs.mkdir(c1.soid);
        let f = fs.create(c2.soid);
        for x in [&c1, &c2, &f] {
            assert_eq!(x.region, Region::TooDeep);
            assert!(sub.contains(x.soid) && x.soid > deep.soid);
        }
        // Next level overflows again, to root 2.
        let again = fs.mkdir(c2.soid);
        assert_eq!(again.soid, s((1 << 126) | (2 << 7)));
    }

    #[test]
    fn too_many_subdirectories_start_a_new_root() {
        let mut fs = Fs::new(tiny());
        for v in 1..=3u128 {
            assert_eq!(fs.mkdir(Soid::ROOT).soid, s(v << 7));
        }
        let a = fs.mkdir(Soid::ROOT);
        assert_eq!(a.region, Region::TooDeep);
    }

    #[test]
    fn sibling_take_over() {
        let mut fs = Fs::new(tiny());
        let a = fs.mkdir(Soid::ROOT).soid; // slot 0 = 1
        for n in 1..=7 {
            assert_eq!(fs.create(a).soid, s(a.as_u128() + n));
        }
        // File 8: sibling slot 2 is unused, so `a` takes over its range.
        let f = fs.create(a);
        let sibling = range(0b10_00_00_000, 0b10_11_11_111).unwrap();
        assert_eq!(f.new_extent, Some(sibling));
        assert_eq!(f.region, Region::Primary);
        assert!(sibling.contains(f.soid));
        // Later files use the extent, without a new one.
        let g = fs.create(a);
        assert_eq!(g.new_extent, None);
        assert!(sibling.contains(g.soid));
        // A new subdirectory of the root skips the taken-over slot.
        assert_eq!(fs.mkdir(Soid::ROOT).soid, s(0b11_00_00_000));
        // Fill the extent (128 SOIDs); then slot 3 is in use: too-wide bucket.
        for _ in 0..126 {
            let x = fs.create(a);
            assert!(sibling.contains(x.soid));
        }
        let w = fs.create(a);
        assert_eq!(w.region, Region::TooWide);
        assert_eq!(w.new_extent, tiny().layout_bucket(1));
        assert_eq!(fs.hw.too_wide_buckets, 1);
    }

    impl SoidLayout {
        fn layout_bucket(&self, id: u128) -> Option<SoidRange> {
            Geom::new(self)?.bucket(id)
        }
    }

    #[test]
    fn chained_take_over_uses_next_free_sibling() {
        let mut fs = Fs::new(tiny());
        let root = Soid::ROOT;
        let a = fs.mkdir(root).soid;
        let b = fs.mkdir(a).soid; // 01 01 00 000, sibling 01 10 / 01 11
        for _ in 0..7 {
            fs.create(b);
        }
        let f = fs.create(b);
        assert_eq!(f.new_extent, range(0b01_10_00_000, 0b01_10_11_111));
        for _ in 0..31 {
            assert_eq!(fs.create(b).new_extent, None);
        }
        let g = fs.create(b);
        assert_eq!(g.new_extent, range(0b01_11_00_000, 0b01_11_11_111));
        // Now `a` is full of subdirectory slots.
        assert_eq!(fs.mkdir(a).region, Region::TooDeep);
    }

    #[test]
    fn root_directory_overflows_to_too_wide() {
        let mut fs = Fs::new(tiny());
        for _ in 0..7 {
            assert_eq!(fs.create(Soid::ROOT).region, Region::Primary);
        }
        let f = fs.create(Soid::ROOT);
        assert_eq!(f.region, Region::TooWide);
        assert_eq!(f.new_extent, tiny().layout_bucket(1));
        // 4 files per bucket with 124 bucket bits.
        for _ in 0..3 {
            assert_eq!(fs.create(Soid::ROOT).new_extent, None);
        }
        assert_eq!(fs.create(Soid::ROOT).new_extent, tiny().layout_bucket(2));
    }

    #[test]
    fn sibling_in_use_goes_to_too_wide() {
        let mut fs = Fs::new(tiny());
        let a = fs.mkdir(Soid::ROOT).soid;
        let _b = fs.mkdir(Soid::ROOT).soid; // occupies the sibling slot
        for _ in 0..7 {
            fs.create(a);
        }
        let f = fs.create(a);
        assert_eq!(f.region, Region::TooWide);
        assert!(f.new_extent.is_some());
    }

    #[test]
    fn catch_all_when_regions_overflow() {
        let mut fs = Fs::new(tiny());
        fs.hw.too_deep_roots = 3; // all 3 too-deep roots used
        fs.hw.too_wide_buckets = mask(124); // all buckets used
        let mut d = Soid::ROOT;
        for _ in 0..3 {
            d = fs.mkdir(d).soid;
        }
        let x = fs.mkdir(d);
        assert_eq!(x.region, Region::CatchAll);
        assert_eq!(x.soid, s((3 << 126) | 1));
        for _ in 0..7 {
            fs.create(Soid::ROOT);
        }
        let f = fs.create(Soid::ROOT);
        assert_eq!(f.region, Region::CatchAll);
        assert_eq!(f.soid, s((3 << 126) | 2));
        assert_eq!(f.new_extent, None);
        // Children of a catch-all directory: subdirectory -> too-deep root if
        // possible, file -> bucket if possible, else catch-all.
        assert_eq!(fs.mkdir(x.soid).region, Region::CatchAll);
        fs.hw.too_deep_roots = 0;
        fs.hw.too_wide_buckets = 0;
        assert_eq!(fs.mkdir(x.soid).region, Region::TooDeep);
        let f = fs.create(x.soid);
        assert_eq!(f.region, Region::TooWide);
        // ... and the next file reuses that bucket via the extents.
        let g = fs.create(x.soid);
        assert_eq!(g.new_extent, None);
        assert_eq!(g.soid.as_u128(), f.soid.as_u128() + 1);
    }

    #[test]
    fn exhaustion() {
        let mut fs = Fs::new(tiny());
        fs.hw = GlobalHighWater {
            too_deep_roots: 3,
            too_wide_buckets: mask(124),
            catch_all: mask(126),
        };
        for _ in 0..3 {
            fs.mkdir(Soid::ROOT);
        }
        assert!(matches!(
            fs.try_add(Soid::ROOT, ChildKind::Directory),
            Err(AllocError::Exhausted)
        ));
        for _ in 0..7 {
            fs.create(Soid::ROOT);
        }
        assert!(matches!(
            fs.try_add(Soid::ROOT, ChildKind::File),
            Err(AllocError::Exhausted)
        ));
        // With a low high-water mark, the SOID space itself says "full".
        fs.hw.catch_all = 0;
        fs.space.used.insert(Soid::MAX);
        assert!(matches!(
            fs.try_add(Soid::ROOT, ChildKind::File),
            Err(AllocError::Exhausted)
        ));
    }

    #[test]
    fn counters_skip_ids_in_use_despite_stale_high_water() {
        let mut fs = Fs::new(tiny());
        let root2 = (1u128 << 126) | (2 << 7);
        fs.space.used.insert(s(root2 | 0b01_00_011)); // something under root 2
        fs.space.used.insert(s((3 << 126) | 41));
        let mut d = Soid::ROOT;
        for _ in 0..3 {
            d = fs.mkdir(d).soid;
        }
        assert_eq!(fs.mkdir(d).soid, s((1 << 126) | (3 << 7)));
        assert_eq!(fs.hw.too_deep_roots, 3);
        assert_eq!(fs.mkdir(d).soid, s((3 << 126) | 42));
    }

    #[test]
    fn freed_file_soids_are_reused() {
        let mut fs = Fs::new(tiny());
        let d = fs.mkdir(Soid::ROOT).soid;
        let files: Vec<Soid> = (0..7).map(|_| fs.create(d).soid).collect();
        fs.space.used.remove(&files[2]);
        fs.space.used.remove(&files[4]);
        let mut got = vec![fs.create(d).soid, fs.create(d).soid];
        got.sort();
        assert_eq!(got, vec![files[2], files[4]]);
        // Freeing the last one: max_used + 1 hands it out again.
        fs.space.used.remove(&files[6]);
        assert_eq!(fs.create(d).soid, files[6]);
        // Full again: overflow.
        assert!(fs.create(d).new_extent.is_some());
    }

    #[test]
    fn freed_directory_slots_are_reused() {
        let mut fs = Fs::new(tiny());
        let dirs: Vec<Soid> = (0..3).map(|_| fs.mkdir(Soid::ROOT).soid).collect();
        let f = fs.create(dirs[0]).soid;
        // Delete dirs[0] but keep its file (as if renamed elsewhere): slot 1
        // is not reusable. Delete dirs[1] entirely: slot 2 is.
        fs.space.used.remove(&dirs[0]);
        fs.space.used.remove(&dirs[1]);
        assert!(fs.space.used.contains(&f));
        assert_eq!(fs.mkdir(Soid::ROOT).soid, dirs[1]);
        let deep = fs.mkdir(Soid::ROOT);
        assert_eq!(deep.region, Region::TooDeep);
        assert!(deep.slots_now_full);
        fs.space.used.remove(&f);
        // Known to be full: no search, so the freed slot waits...
        assert_eq!(fs.mkdir(Soid::ROOT).region, Region::TooDeep);
        // ...until an rmdir in the directory clears the mark (the engine
        // does that in rmdir, which rewrites the parent anyway).
        fs.extents.entry(Soid::ROOT).or_default().slots_full = false;
        assert_eq!(fs.mkdir(Soid::ROOT).soid, dirs[0]);
    }

    #[test]
    fn space_errors_are_passed_through() {
        let mut hw = GlobalHighWater::default();
        let r = allocate(
            &tiny(),
            Soid::ROOT,
            &DirExtents::default(),
            ChildKind::File,
            &mut FailSpace,
            &mut hw,
        );
        assert!(matches!(r, Err(AllocError::Space("locked"))));
    }

    #[test]
    fn default_layout_big_directory_and_deep_chain_stay_primary() {
        let mut fs = Fs::new(SoidLayout::default());
        let mut last = Soid::ROOT;
        for _ in 0..4_000 {
            let a = fs.create(Soid::ROOT);
            assert_eq!(a.region, Region::Primary);
            assert!(a.soid > last);
            last = a.soid;
        }
        let root_range = fs.layout.subtree_range(Soid::ROOT).unwrap();
        let mut dirs = Vec::new();
        for _ in 0..1_000 {
            let a = fs.mkdir(Soid::ROOT);
            assert_eq!(a.region, Region::Primary);
            assert!(root_range.contains(a.soid) && a.soid > last);
            last = a.soid;
            dirs.push(a.soid);
        }
        // A chain of 11 directory levels, each with files.
        let mut d = dirs[500];
        for level in 2..=11 {
            let a = fs.mkdir(d);
            assert_eq!(a.region, Region::Primary);
            assert_eq!(fs.layout.depth(a.soid), Some(level));
            let f = fs.create(a.soid);
            assert_eq!(f.region, Region::Primary);
            assert!(fs.layout.subtree_range(d).unwrap().contains(a.soid));
            d = a.soid;
        }
        assert_eq!(fs.mkdir(d).region, Region::TooDeep);
        assert_eq!(fs.hw.too_deep_roots, 1);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Mkdir(usize),
        Create(usize),
        Delete(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<usize>().prop_map(Op::Mkdir),
            4 => any::<usize>().prop_map(Op::Create),
            1 => any::<usize>().prop_map(Op::Delete),
        ]
    }

    fn small_layout() -> impl Strategy<Value = SoidLayout> {
        (
            1u32..=3,
            1u32..=4,
            1u32..=3,
            0u32..4,
            prop_oneof![Just(1u32), 123u32..=125],
        )
            .prop_map(
                |(slot_bits, slots, file_bits, drs, wide_bucket_bits)| SoidLayout {
                    slot_bits,
                    slots,
                    file_bits,
                    deep_root_slots: 1 + drs % slots,
                    wide_bucket_bits,
                },
            )
    }

    fn start_hw() -> impl Strategy<Value = GlobalHighWater> {
        let near = |max: u128| prop_oneof![Just(0u128), Just(max.saturating_sub(2))];
        (near(u128::MAX), near(u128::MAX), near(mask(126))).prop_map(|(d, w, c)| GlobalHighWater {
            // Out-of-range high-water marks must be handled too.
            too_deep_roots: if d == 0 { 0 } else { d % 8 },
            too_wide_buckets: if w == 0 { 0 } else { w },
            catch_all: c,
        })
    }

    /// Checks the placement of one allocation relative to its parent.
    fn check_placement(
        l: &SoidLayout,
        parent: Soid,
        ext: &DirExtents,
        kind: ChildKind,
        a: &Allocation,
    ) {
        let in_old_extent = ext.ranges.iter().any(|r| r.contains(a.soid));
        let new_root = kind == ChildKind::Directory && l.depth(a.soid) == Some(0);
        let overflow =
            a.new_extent.is_some() || in_old_extent || new_root || a.region != l.region(parent);
        if kind == ChildKind::Directory {
            assert_ne!(a.region, Region::TooWide, "directories never go to buckets");
            if a.region == Region::TooDeep {
                assert!(
                    l.depth(a.soid).is_some(),
                    "too-deep directories have a subtree"
                );
            }
        }
        if overflow || l.subtree_range(parent).is_none() {
            return;
        }
        let sub = l.subtree_range(parent).unwrap();
        assert!(
            sub.contains(a.soid) && a.soid > parent,
            "{a:?} outside {sub:?}"
        );
        if kind == ChildKind::Directory {
            let child = l
                .subtree_range(a.soid)
                .expect("child directory has a subtree");
            assert!(sub.first < child.first && child.last <= sub.last);
            assert_eq!(l.depth(a.soid), l.depth(parent).map(|d| d + 1));
        } else {
            assert_eq!(l.subtree_range(a.soid), None);
            assert!(l.file_range(parent).unwrap().contains(a.soid));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn random_trees_never_reuse_a_soid_in_use(
            layout in small_layout(),
            hw in start_hw(),
            ops in proptest::collection::vec(op(), 1..150),
        ) {
            prop_assert!(layout.validate().is_ok());
            let mut fs = Fs::new(layout);
            fs.hw = hw;
            let mut dirs = vec![Soid::ROOT];
            let mut all = vec![Soid::ROOT];
            for op in ops {
                let (parent, kind) = match op {
                    Op::Mkdir(i) => (dirs[i % dirs.len()], ChildKind::Directory),
                    Op::Create(i) => (dirs[i % dirs.len()], ChildKind::File),
                    Op::Delete(i) => {
                        let victim = all[i % all.len()];
                        if victim != Soid::ROOT {
                            fs.space.used.remove(&victim);
                            fs.extents.remove(&victim);
                            dirs.retain(|d| *d != victim);
                            all.retain(|d| *d != victim);
                        }
                        continue;
                    }
                };
                let ext = fs.extents.get(&parent).cloned().unwrap_or_default();
                match fs.try_add(parent, kind) {
                    Ok(a) => {
                        check_placement(&layout, parent, &ext, kind, &a);
                        all.push(a.soid);
                        if kind == ChildKind::Directory {
                            dirs.push(a.soid);
                        }
                    }
                    Err(AllocError::Exhausted) => {}
                    Err(AllocError::Space(e)) => match e {},
                }
            }
        }

        #[test]
        fn arbitrary_inputs_never_panic(
            slot_bits in 0u32..140,
            slots in 0u32..140,
            file_bits in 0u32..140,
            deep_root_slots in 0u32..140,
            wide_bucket_bits in 0u32..140,
            parent in any::<u128>(),
            used in proptest::collection::vec(any::<u128>(), 0..4),
            ext in proptest::collection::vec((any::<u128>(), any::<u128>()), 0..3),
            hw in (any::<u128>(), any::<u128>(), any::<u128>()),
            dir in any::<bool>(),
        ) {
            let layout = SoidLayout { slot_bits, slots, file_bits, deep_root_slots, wide_bucket_bits };
            let p = Soid::from_u128(parent);
            let _ = (layout.validate(), layout.region(p), layout.depth(p), layout.subtree_range(p), layout.file_range(p));
            for l in [layout, SoidLayout::default(), tiny()] {
                let mut space = MemSpace::default();
                space.used.extend(used.iter().map(|u| Soid::from_u128(*u)));
                space.used.insert(p);
                let extents = DirExtents {
                    ranges: ext.iter().map(|(a, b)| SoidRange { first: s(*a), last: s(*b) }).collect(),
                    slots_full: parent % 2 == 1,
                };
                let mut hw = GlobalHighWater { too_deep_roots: hw.0, too_wide_buckets: hw.1, catch_all: hw.2 };
                let kind = if dir { ChildKind::Directory } else { ChildKind::File };
                if let Ok(a) = allocate(&l, p, &extents, kind, &mut space, &mut hw) {
                    prop_assert!(!space.used.contains(&a.soid));
                }
            }
        }
    }

    /// Regression (found by the server's benchmark): once a directory's own
    /// file segment was full, every create searched the whole segment for a
    /// freed SOID before looking at the directory's extents — O(65,535)
    /// per create. Extents with room must be used without any search.
    #[test]
    fn full_file_segment_with_room_in_an_extent_needs_no_search() {
        let l = tiny();
        let mut space = MemSpace::default();
        let dir = Soid::ROOT;
        let own = l.file_range(dir).unwrap();
        let mut cur = own.first;
        loop {
            space.used.insert(cur);
            if cur == own.last {
                break;
            }
            cur = cur.checked_next().unwrap();
        }
        let bucket = l.layout_bucket(1).unwrap();
        space.used.insert(bucket.first);
        let extents = DirExtents {
            ranges: vec![bucket],
            slots_full: false,
        };
        let mut hw = GlobalHighWater::default();
        let a = allocate(&l, dir, &extents, ChildKind::File, &mut space, &mut hw).unwrap();
        assert!(bucket.contains(a.soid));
        assert_eq!(space.scans, 0, "no O(n) search while an extent has room");
    }

    /// Regression: a directory whose subdirectory slots are all in use
    /// searched every slot again on each mkdir; once it knows, it must not.
    #[test]
    fn full_subdirectory_slots_are_searched_once() {
        let mut fs = Fs::new(tiny());
        // tiny(): 2-bit slots, so 3 subdirectories fill the root.
        for _ in 0..3 {
            fs.mkdir(Soid::ROOT);
        }
        let first = fs.mkdir(Soid::ROOT);
        assert!(first.slots_now_full, "the first overflow records it");
        let before = fs.space.queries;
        let second = fs.mkdir(Soid::ROOT);
        assert!(!second.slots_now_full);
        assert!(
            fs.space.queries - before < 8,
            "no slot search once the directory is known to be full ({} queries)",
            fs.space.queries - before
        );
    }
}
