//! A table's search index (Magellan §4.2–4.3): a K-D tree over the numeric
//! attributes of the table's inodes, the table's Bloom filters
//! ([`AttrFilters`]) and trigram posting lists of its link names
//! ([`TrigramPostings`]), all rebuilt on write-back, plus the set of rows
//! changed since that rebuild, which queries scan directly. Pure logic, no
//! I/O; the caller holds the table's lock.
//!
//! # Invariant
//!
//! Every live row of the table is either **in the tree** — and then unchanged
//! since the build, so its current coordinates are the ones the tree was
//! built from — or **marked changed**. The filters and the name lists
//! describe exactly the rows in the tree (one filter item per `(inode, link
//! name)`; each row in the list of every trigram of its names).
//!
//! It holds because [`TableIndex::rebuild`] puts every live row in the tree
//! and clears the changed set, and every mutation of a row (put, delete,
//! reuse of a freed row) calls [`TableIndex::row_changed`]. An index that was
//! never built ([`TableIndex::default`]) treats *every* row as changed, so a
//! table that replaced its index by the default one (split, merge) stays
//! correct, merely unindexed, until the next rebuild.
//!
//! # Dimensions
//!
//! The tree indexes [`DIMS`] dimensions, see [`Dim`]: uid, gid, file type
//! (`FileType as u8`), permission bits, size, atime, mtime, ctime, nlink.
//! Times are mapped to `u64` order-preservingly by flipping the sign bit
//! ([`time_coord`]); everything else is the plain unsigned value.
//!
//! # Stale coordinates
//!
//! The tree stores no coordinates: it reads them from the table. A changed
//! row may sit at an inner node of the tree, where its (now different)
//! coordinate is a split key that steers the traversal. The accessor handed
//! to the tree therefore answers, for a changed or freed row, the query's
//! lower bound `lo[d]`: a key inside `[lo[d], hi[d]]` makes the traversal
//! descend into *both* subtrees, so no unchanged row below it is lost (the
//! tree may then also mark a bound as implied below that node, which can
//! only add rows outside the box — extra candidates, never missing ones).
//! Changed rows themselves are never reported from the tree; they are
//! reported once each from the changed set.
//!
//! # Queries
//!
//! An [`IndexQuery`] is a conjunction of constraints; see its docs for how a
//! search layer should translate a `find`-like expression into one.
//! [`TableIndex::candidates`] reports a superset of the matching live rows,
//! each at most once — from the tree's box, or, for a query with name
//! needles of 3 bytes or more, from the intersection of the two shortest
//! posting lists of their trigrams when that narrows more (always when the
//! box constrains nothing, else when the shortest list holds under a
//! quarter of the rows); the caller re-checks every candidate with
//! [`IndexQuery::matches`] (plus its own residual predicate), so the Bloom
//! filters and the tree only prune, never decide.

use super::summary::{self, ByExit};
use super::Table;
use crate::bloom::{AttrFilters, FilterInput, TimeAttr};
use crate::inode::Inode;
use crate::kdtree::KdTree;
use crate::postings::TrigramPostings;
use sextant_types::{FileType, Nanos, Soid, SoidRange};
use std::sync::OnceLock;

/// Number of indexed dimensions.
pub const DIMS: usize = 9;

/// The indexed numeric dimensions, in coordinate order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Uid = 0,
    Gid = 1,
    /// `FileType as u8` (1..=7).
    Type = 2,
    /// Permission bits (`07777`).
    Perm = 3,
    Size = 4,
    /// [`time_coord`] of the time.
    Atime = 5,
    Mtime = 6,
    Ctime = 7,
    Nlink = 8,
}

impl Dim {
    pub const ALL: [Dim; DIMS] = [
        Dim::Uid,
        Dim::Gid,
        Dim::Type,
        Dim::Perm,
        Dim::Size,
        Dim::Atime,
        Dim::Mtime,
        Dim::Ctime,
        Dim::Nlink,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    /// The time dimension of `which`.
    pub fn time(which: TimeAttr) -> Dim {
        match which {
            TimeAttr::Atime => Dim::Atime,
            TimeAttr::Mtime => Dim::Mtime,
            TimeAttr::Ctime => Dim::Ctime,
        }
    }
}

const SIGN: u64 = 1 << 63;

/// Order-preserving map of a (signed) time to a coordinate.
pub fn time_coord(t: Nanos) -> u64 {
    (t.0 as u64) ^ SIGN
}

/// Inverse of [`time_coord`].
pub fn coord_time(c: u64) -> Nanos {
    Nanos((c ^ SIGN) as i64)
}

/// Coordinate `d` (a [`Dim`] index) of `inode`; 0 for `d >= DIMS`.
pub fn coord(inode: &Inode, d: usize) -> u64 {
    match d {
        0 => u64::from(inode.uid),
        1 => u64::from(inode.gid),
        2 => u64::from(inode.ftype as u8),
        3 => u64::from(inode.perm),
        4 => inode.size,
        5 => time_coord(inode.atime),
        6 => time_coord(inode.mtime),
        7 => time_coord(inode.ctime),
        8 => u64::from(inode.nlink),
        _ => 0,
    }
}

/// Bit of `t` in a type mask (`FileType` discriminants are 1..=7).
pub fn type_bit(t: FileType) -> u8 {
    1u8.checked_shl(u32::from(t as u8)).unwrap_or(0)
}

/// A type mask allowing every file type.
pub const ALL_TYPES: u8 = 0xFE;

/// The extension of a name as [`AttrFilters`] defines it: the bytes after
/// the last `.`, empty for a name without `.`.
fn extension_of(name: &[u8]) -> &[u8] {
    match name.iter().rposition(|&c| c == b'.') {
        Some(i) => &name[i + 1..],
        None => &[],
    }
}

/// Does `hay` (a name: tens of bytes) contain `needle`? The first byte is
/// compared inline and the rest only where it matches: a comparison call
/// at every position was a seventh of a broad glob query's time.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    hay.windows(needle.len())
        .any(|w| w[0] == first && w[1..] == *rest)
}

pub(crate) fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// A conjunction of constraints on one inode, answerable by the index.
///
/// An inode matches when **all** of these hold:
/// - for every dimension `d`: `lo[d] <= coord(inode, d) <= hi[d]` (inclusive;
///   `lo[d] > hi[d]` matches nothing; times in [`time_coord`] space);
/// - its type's bit is set in `types` ([`type_bit`]; default [`ALL_TYPES`]);
/// - all bits of `perm_all` are set in its permission bits;
/// - it has every key of `xattr_keys` among its extended attributes;
/// - its SOID lies in `soids`, if set;
/// - **some single link name** of it ([`Inode::all_links`]) satisfies all
///   name constraints together: equals every entry of `names`, equals every
///   entry of `names_ci` ignoring ASCII case, has every entry of `extensions`
///   as its extension (bytes after the last `.`, ASCII case-insensitive, so
///   an extension containing `.` never matches), contains every entry of
///   `substrings` (case-sensitive) and of `substrings_ci` (ASCII
///   case-insensitive). With no name constraint any inode passes this item.
///
/// # Use by a search layer
///
/// Translate a `find`-like expression into the conjunction of the
/// constraints it *implies*, then re-check each candidate with the exact
/// expression (the residual): e.g. `-user 3704 -size +1G -mtime -7` is a
/// pure conjunction (`uid`, `size`, `time`); `-name '*.tar.gz'` implies
/// `extension("gz")` and `substring(".tar.gz")`; `-name 'core.*'` implies
/// `substring("core.")`; `-iname 'Makefile'` is `name_ci`; `-perm -o+w` is
/// `perm_all(0o002)`; `-type f -o -type d` is `types(&[Regular, Directory])`.
/// A disjunction that cannot be narrowed is either split into several
/// queries (results unioned by SOID) or left unconstrained here and handled
/// by the residual. Use [`IndexQuery::matching_links`] to report only the
/// paths whose names satisfy the name constraints.
///
/// The builder methods intersect with what is already there, so they can
/// be applied in any order and repeatedly. No value makes any method panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexQuery {
    pub lo: [u64; DIMS],
    pub hi: [u64; DIMS],
    pub types: u8,
    pub perm_all: u16,
    pub names: Vec<Box<[u8]>>,
    pub names_ci: Vec<Box<[u8]>>,
    pub extensions: Vec<Box<[u8]>>,
    pub substrings: Vec<Box<[u8]>>,
    pub substrings_ci: Vec<Box<[u8]>>,
    pub xattr_keys: Vec<Box<[u8]>>,
    pub soids: Option<SoidRange>,
}

impl Default for IndexQuery {
    /// The query matching every inode.
    fn default() -> IndexQuery {
        IndexQuery {
            lo: [0; DIMS],
            hi: [u64::MAX; DIMS],
            types: ALL_TYPES,
            perm_all: 0,
            names: Vec::new(),
            names_ci: Vec::new(),
            extensions: Vec::new(),
            substrings: Vec::new(),
            substrings_ci: Vec::new(),
            xattr_keys: Vec::new(),
            soids: None,
        }
    }
}

impl IndexQuery {
    /// The query matching every inode.
    pub fn new() -> IndexQuery {
        IndexQuery::default()
    }

    /// Intersects dimension `d` with `lo..=hi`.
    pub fn range(mut self, d: Dim, lo: u64, hi: u64) -> Self {
        let i = d.index();
        self.lo[i] = self.lo[i].max(lo);
        self.hi[i] = self.hi[i].min(hi);
        self
    }

    pub fn uid(self, uid: u32) -> Self {
        self.range(Dim::Uid, uid.into(), uid.into())
    }

    pub fn gid(self, gid: u32) -> Self {
        self.range(Dim::Gid, gid.into(), gid.into())
    }

    pub fn size(self, lo: u64, hi: u64) -> Self {
        self.range(Dim::Size, lo, hi)
    }

    pub fn nlink(self, lo: u32, hi: u32) -> Self {
        self.range(Dim::Nlink, lo.into(), hi.into())
    }

    /// Exact permission bits.
    pub fn perm(self, perm: u16) -> Self {
        self.range(Dim::Perm, perm.into(), perm.into())
    }

    /// All of these permission bits set (`find -perm -mode`).
    pub fn perm_all(mut self, bits: u16) -> Self {
        self.perm_all |= bits;
        self
    }

    pub fn time(self, which: TimeAttr, lo: Nanos, hi: Nanos) -> Self {
        self.range(Dim::time(which), time_coord(lo), time_coord(hi))
    }

    /// The type is one of `types`.
    pub fn types(mut self, types: &[FileType]) -> Self {
        self.types &= types.iter().fold(0, |m, &t| m | type_bit(t));
        self
    }

    pub fn name(mut self, name: &[u8]) -> Self {
        self.names.push(name.into());
        self
    }

    pub fn name_ci(mut self, name: &[u8]) -> Self {
        self.names_ci.push(name.into());
        self
    }

    pub fn extension(mut self, ext: &[u8]) -> Self {
        self.extensions.push(ext.into());
        self
    }

    pub fn substring(mut self, needle: &[u8]) -> Self {
        self.substrings.push(needle.into());
        self
    }

    pub fn substring_ci(mut self, needle: &[u8]) -> Self {
        self.substrings_ci.push(needle.into());
        self
    }

    pub fn xattr_key(mut self, key: &[u8]) -> Self {
        self.xattr_keys.push(key.into());
        self
    }

    /// The SOID lies in `range` (an empty intersection matches nothing).
    pub fn soid_range(mut self, range: SoidRange) -> Self {
        self.soids = match self.soids {
            None => Some(range),
            Some(r) => match SoidRange::new(r.first.max(range.first), r.last.min(range.last)) {
                Some(x) => Some(x),
                None => {
                    self.types = 0;
                    Some(r)
                }
            },
        };
        self
    }

    /// True when the query provably matches nothing (an empty range or
    /// type set). `false` does not promise a match.
    pub fn is_empty(&self) -> bool {
        self.types & ALL_TYPES == 0 || (0..DIMS).any(|d| self.lo[d] > self.hi[d])
    }

    /// True when some name constraint is present.
    pub fn has_name_constraints(&self) -> bool {
        !(self.names.is_empty()
            && self.names_ci.is_empty()
            && self.extensions.is_empty()
            && self.substrings.is_empty()
            && self.substrings_ci.is_empty())
    }

    /// The box the K-D tree is queried with: `lo`/`hi` narrowed by what
    /// `types` and `perm_all` imply (a type mask bounds the type coordinate
    /// by its lowest and highest type; a permission with all bits of
    /// `perm_all` set is numerically at least `perm_all`).
    pub fn tree_box(&self) -> ([u64; DIMS], [u64; DIMS]) {
        let (mut lo, mut hi) = (self.lo, self.hi);
        let mask = self.types & ALL_TYPES;
        if mask != 0 {
            let t = Dim::Type.index();
            lo[t] = lo[t].max(u64::from(mask.trailing_zeros()));
            hi[t] = hi[t].min(u64::from(7 - mask.leading_zeros()));
        }
        let p = Dim::Perm.index();
        lo[p] = lo[p].max(u64::from(self.perm_all));
        (lo, hi)
    }

    /// The non-name constraints (ranges, types, permission bits, xattr keys,
    /// SOID range).
    pub fn matches_attrs(&self, soid: Soid, inode: &Inode) -> bool {
        (0..DIMS).all(|d| {
            let c = coord(inode, d);
            self.lo[d] <= c && c <= self.hi[d]
        }) && self.types & type_bit(inode.ftype) != 0
            && inode.perm & self.perm_all == self.perm_all
            && self.soids.is_none_or(|r| r.contains(soid))
            && (self.xattr_keys.is_empty()
                || inode
                    .xattrs()
                    .is_some_and(|x| self.xattr_keys.iter().all(|k| x.contains_key(k))))
    }

    /// Whether the link name `name` satisfies all name constraints.
    pub fn matches_name(&self, name: &[u8]) -> bool {
        self.names.iter().all(|n| **n == *name)
            && self.names_ci.iter().all(|n| n.eq_ignore_ascii_case(name))
            && self
                .extensions
                .iter()
                .all(|e| extension_of(name).eq_ignore_ascii_case(e))
            && self.substrings.iter().all(|s| contains(name, s))
            && self.substrings_ci.iter().all(|s| contains_ci(name, s))
    }

    /// The exact check for one inode: [`IndexQuery::matches_attrs`] and some
    /// link name satisfying [`IndexQuery::matches_name`].
    pub fn matches(&self, soid: Soid, inode: &Inode) -> bool {
        self.matches_attrs(soid, inode)
            && (!self.has_name_constraints()
                || inode.all_links().any(|(_, n)| self.matches_name(n)))
    }

    /// The links `(directory, name)` of `inode` whose names satisfy the name
    /// constraints (all links when there are none). Does not check
    /// attributes.
    pub fn matching_links<'a>(
        &'a self,
        inode: &'a Inode,
    ) -> impl Iterator<Item = (Soid, &'a [u8])> + 'a {
        inode.all_links().filter(move |(_, n)| self.matches_name(n))
    }
}

/// May some filter item satisfy every constraint of `q`? (Each constraint
/// is tested on its own, so `true` is necessary for a match, not
/// sufficient.)
fn filters_may_match(f: &AttrFilters, q: &IndexQuery) -> bool {
    if q.is_empty() || f.is_empty() {
        return false;
    }
    let (lo, hi) = q.tree_box();
    // Small uid/gid ranges are enumerated against the filter.
    let ids = |d: Dim, probe: &dyn Fn(u32) -> bool| -> bool {
        let (l, h) = (lo[d.index()], hi[d.index()].min(u64::from(u32::MAX)));
        if l > h {
            return false;
        }
        if h - l >= 16 {
            return true;
        }
        (l..=h).any(|v| probe(v as u32))
    };
    if !ids(Dim::Uid, &|u| f.may_match_uid(u)) || !ids(Dim::Gid, &|g| f.may_match_gid(g)) {
        return false;
    }
    if !FileType::ALL
        .into_iter()
        .any(|t| q.types & type_bit(t) != 0 && f.may_match_type(t))
    {
        return false;
    }
    let s = Dim::Size.index();
    if !f.may_match_size(lo[s], hi[s]) {
        return false;
    }
    for which in [TimeAttr::Atime, TimeAttr::Mtime, TimeAttr::Ctime] {
        let d = Dim::time(which).index();
        if (lo[d], hi[d]) != (0, u64::MAX)
            && !f.may_match_time(which, coord_time(lo[d]), coord_time(hi[d]))
        {
            return false;
        }
    }
    q.names.iter().all(|n| f.may_match_name(n))
        && q.names_ci.iter().all(|n| f.may_match_name_ci(n))
        && q.extensions.iter().all(|e| f.may_match_extension(e))
        && q.substrings.iter().all(|s| f.may_contain_substring(s))
        && q.substrings_ci.iter().all(|s| f.may_contain_substring(s))
        && q.xattr_keys.iter().all(|k| f.may_match_xattr_key(k))
}

/// The tree, filters and name lists of a built index.
#[derive(Debug, Clone)]
struct Built {
    tree: KdTree,
    filters: AttrFilters,
    names: TrigramPostings,
    /// The table's totals per exit ([`summary::by_exit`]), made by the
    /// first search that asks ([`TableIndex::summaries_by_exit`]) rather
    /// than with the index: most tables are never covered partly by a
    /// tally, and the index is rebuilt at every write-back. `None` for a
    /// table with fewer than two exits and no directory closed to anyone
    /// (its whole summary says as much).
    by_exit: OnceLock<Option<Box<ByExit>>>,
}

/// The name needles of `q` the trigram lists can use (every name, exact
/// or not, and every substring: a matching name contains each of them,
/// ignoring case; shorter than 3 bytes they say nothing).
fn name_needles(q: &IndexQuery) -> Vec<&[u8]> {
    q.names
        .iter()
        .chain(&q.names_ci)
        .chain(&q.substrings)
        .chain(&q.substrings_ci)
        .map(|n| &**n)
        .filter(|n| n.len() >= 3)
        .collect()
}

/// Whether `q`'s box constrains the K-D tree at all (besides file types).
fn box_constrains(q: &IndexQuery) -> bool {
    q.perm_all != 0 || q.lo.iter().any(|&v| v != 0) || q.hi.iter().any(|&v| v != u64::MAX)
}

/// Sizes of an index, for benchmarks and the cache budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// False for an index never built (every row is treated as changed).
    pub built: bool,
    pub tree_rows: usize,
    /// Rows marked changed since the build (live or freed).
    pub changed_rows: usize,
    /// Items the filters were built from (one per (inode, link name)).
    pub filter_items: usize,
    pub tree_bytes: usize,
    pub filter_bytes: usize,
    /// The trigram posting lists ([`TrigramPostings`]).
    pub name_list_bytes: usize,
    /// The totals per exit ([`TableIndex::summaries_by_exit`]), once made.
    pub by_exit_bytes: usize,
    pub changed_bytes: usize,
}

/// See the module docs.
#[derive(Debug, Default, Clone)]
pub struct TableIndex {
    /// `None`: never built, every row counts as changed.
    built: Option<Box<Built>>,
    /// One bit per slab row: changed since the last rebuild.
    changed: Vec<u64>,
    changed_count: usize,
}

impl TableIndex {
    /// Builds the tree and filters over every live row of `table`; nothing
    /// is marked changed afterwards.
    pub fn rebuild(table: &Table) -> TableIndex {
        let cap = u32::try_from(table.row_capacity()).unwrap_or(u32::MAX);
        let mut rows: Vec<u32> = (0..cap).filter(|&r| table.row(r).is_some()).collect();
        rows.shrink_to_fit();
        let xkeys: Vec<Vec<&[u8]>> = rows
            .iter()
            .map(|&r| {
                table
                    .row(r)
                    .and_then(|(_, i)| i.xattrs())
                    .map(|x| x.keys().map(|k| &**k).collect())
                    .unwrap_or_default()
            })
            .collect();
        let items = rows
            .iter()
            .zip(&xkeys)
            .filter_map(|(&r, xk)| table.row(r).map(|(_, i)| (i, xk)))
            .flat_map(|(ino, xk)| {
                ino.all_links().map(move |(_, name)| FilterInput {
                    name,
                    uid: ino.uid,
                    gid: ino.gid,
                    ftype: ino.ftype,
                    size: ino.size,
                    atime: ino.atime,
                    mtime: ino.mtime,
                    ctime: ino.ctime,
                    xattr_keys: xk,
                })
            });
        let filters = AttrFilters::build(items);
        drop(xkeys);
        let names = TrigramPostings::build(rows.iter().flat_map(|&r| {
            table
                .row(r)
                .into_iter()
                .flat_map(move |(_, i)| i.all_links().map(move |(_, name)| (r, name)))
        }));
        let tree = KdTree::build(rows, DIMS, |r, d| {
            table.row(r).map_or(0, |(_, i)| coord(i, d))
        });
        TableIndex {
            built: Some(Box::new(Built {
                tree,
                filters,
                names,
                by_exit: OnceLock::new(),
            })),
            changed: Vec::new(),
            changed_count: 0,
        }
    }

    /// Marks `row` as changed since the last rebuild.
    pub fn row_changed(&mut self, row: u32) {
        let (w, b) = ((row / 64) as usize, row % 64);
        if self.changed.len() <= w {
            self.changed.resize(w + 1, 0);
        }
        if self.changed[w] & (1 << b) == 0 {
            self.changed[w] |= 1 << b;
            self.changed_count += 1;
        }
    }

    /// Whether `row` is treated as changed (always, for an index never
    /// built).
    pub fn is_changed(&self, row: u32) -> bool {
        self.built.is_none() || self.marked(row)
    }

    fn marked(&self, row: u32) -> bool {
        let (w, b) = ((row / 64) as usize, row % 64);
        self.changed.get(w).is_some_and(|x| x & (1 << b) != 0)
    }

    /// Rows marked changed since the last rebuild (live or freed).
    pub fn changed_count(&self) -> usize {
        self.changed_count
    }

    /// The totals per exit ([`summary::by_exit`]) of `table`, whose index
    /// this is, made on the first call after a rebuild; `None` once a row
    /// has changed since the rebuild (they would be of other rows than the
    /// rest of the index), for an index never built, and for a table with
    /// fewer than two exits and no directory closed to anyone.
    pub fn summaries_by_exit(&self, table: &Table) -> Option<&ByExit> {
        let b = self.built.as_ref()?;
        if self.changed_count > 0 {
            return None;
        }
        b.by_exit
            .get_or_init(|| {
                let exits = table.exits().len();
                (exits >= 2 || (exits == 1 && table.summary().closed_dirs() > 0))
                    .then(|| Box::new(summary::by_exit(table)))
            })
            .as_deref()
    }

    /// False for an index never built.
    pub fn is_built(&self) -> bool {
        self.built.is_some()
    }

    /// Filter-only test: `false` only when no row of the tree can match `q`
    /// and no row is changed, so the table can be skipped without touching
    /// its rows. (The SOID range is not tested: the index does not know the
    /// table's range.)
    pub fn may_match(&self, q: &IndexQuery) -> bool {
        if q.is_empty() {
            return false;
        }
        match &self.built {
            None => true,
            Some(b) => self.changed_count > 0 || filters_may_match(&b.filters, q),
        }
    }

    /// Calls `visit` once for each row of a superset of the live rows of
    /// `table` matching `q`: the tree rows inside the query box (skipped
    /// when the filters exclude the query), minus changed rows, plus every
    /// changed live row. Re-check each with [`IndexQuery::matches`].
    pub fn candidates(&self, table: &Table, q: &IndexQuery, mut visit: impl FnMut(u32)) {
        if q.is_empty() || q.soids.is_some_and(|r| !r.overlaps(&table.range)) {
            return;
        }
        let cap = u32::try_from(table.row_capacity()).unwrap_or(u32::MAX);
        let Some(b) = &self.built else {
            for row in 0..cap {
                if table.row(row).is_some() {
                    visit(row);
                }
            }
            return;
        };
        if !b.tree.is_empty() && filters_may_match(&b.filters, q) {
            let any_changed = self.changed_count > 0;
            // By name when the trigram lists narrow more than the box can:
            // always when the box constrains nothing, else when the
            // shortest list is under a quarter of the rows.
            let needles = name_needles(q);
            let by_name = b
                .names
                .lists(&needles)
                .filter(|l| !box_constrains(q) || l.shortest().saturating_mul(4) < b.tree.len())
                .map(|l| l.rows());
            if let Some(rows) = by_name {
                for row in rows {
                    if !(any_changed && self.marked(row)) && table.row(row).is_some() {
                        visit(row);
                    }
                }
            } else {
                self.tree_candidates(b, table, q, &mut visit);
            }
        }
        for (w, &word) in self.changed.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let bit = u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                let Ok(row) = u32::try_from(w as u64 * 64 + bit) else {
                    return;
                };
                if table.row(row).is_some() {
                    visit(row);
                }
            }
        }
    }

    /// The tree rows inside `q`'s box, minus changed rows.
    fn tree_candidates(
        &self,
        b: &Built,
        table: &Table,
        q: &IndexQuery,
        visit: &mut impl FnMut(u32),
    ) {
        let (lo, hi) = q.tree_box();
        let any_changed = self.changed_count > 0;
        b.tree.query(
            &lo,
            &hi,
            |row, d| {
                // See "Stale coordinates" in the module docs.
                let fallback = lo.get(d).copied().unwrap_or(0);
                if any_changed && self.marked(row) {
                    return fallback;
                }
                table.row(row).map_or(fallback, |(_, i)| coord(i, d))
            },
            |row| {
                if !(any_changed && self.marked(row)) && table.row(row).is_some() {
                    visit(row);
                }
            },
        );
    }

    /// Sizes of the parts.
    pub fn stats(&self) -> IndexStats {
        let changed_bytes = self.changed.capacity() * 8;
        match &self.built {
            None => IndexStats {
                changed_rows: self.changed_count,
                changed_bytes,
                ..IndexStats::default()
            },
            Some(b) => IndexStats {
                built: true,
                tree_rows: b.tree.len(),
                changed_rows: self.changed_count,
                filter_items: b.filters.len(),
                tree_bytes: std::mem::size_of::<KdTree>() + b.tree.memory_bytes(),
                filter_bytes: b.filters.memory_bytes(),
                name_list_bytes: b.names.memory_bytes(),
                by_exit_bytes: b
                    .by_exit
                    .get()
                    .and_then(Option::as_ref)
                    .map_or(0, |x| x.memory_bytes()),
                changed_bytes,
            },
        }
    }

    /// Heap bytes: tree, filters, name lists, totals per exit and changed
    /// bitset.
    pub fn memory_bytes(&self) -> usize {
        let s = self.stats();
        s.tree_bytes + s.filter_bytes + s.name_list_bytes + s.by_exit_bytes + s.changed_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inode::InodeExtra;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// `contains` is substring search (against the obvious scan).
        #[test]
        fn contains_finds_substrings(
            hay in proptest::collection::vec(0u8..4, 0..24),
            needle in proptest::collection::vec(0u8..4, 0..5),
        ) {
            let naive = needle.is_empty()
                || (0..hay.len()).any(|i| hay[i..].starts_with(&needle));
            prop_assert_eq!(contains(&hay, &needle), naive);
        }
    }

    fn inode(uid: u32, name: &[u8]) -> Inode {
        Inode {
            ftype: FileType::Regular,
            perm: 0o644,
            uid,
            gid: 100,
            nlink: 1,
            size: 0,
            atime: Nanos(0),
            mtime: Nanos(0),
            ctime: Nanos(0),
            parent: Soid::ROOT,
            name: name.into(),
            extra: None,
        }
    }

    fn soid(i: u64) -> Soid {
        Soid::from_u128(1000 + u128::from(i))
    }

    /// Candidates as a list (duplicates kept), checking liveness.
    fn candidate_list(t: &Table, q: &IndexQuery) -> Vec<u32> {
        let mut out = Vec::new();
        t.index.candidates(t, q, |r| {
            assert!(t.row(r).is_some(), "dead row {r} reported");
            out.push(r);
        });
        out
    }

    /// Checks candidates against brute force; returns the candidate count.
    fn check(t: &Table, q: &IndexQuery) -> usize {
        let cands = candidate_list(t, q);
        let set: BTreeSet<u32> = cands.iter().copied().collect();
        assert_eq!(set.len(), cands.len(), "a row was reported twice");
        let got: BTreeSet<Soid> = set
            .iter()
            .filter_map(|&r| t.row(r))
            .filter(|(s, i)| q.matches(*s, i))
            .map(|(s, _)| *s)
            .collect();
        let want: BTreeSet<Soid> = t
            .inodes()
            .filter(|(s, i)| q.matches(*s, i))
            .map(|(s, _)| s)
            .collect();
        assert_eq!(got, want, "query {q:?}");
        if !want.is_empty() {
            assert!(t.index.may_match(q), "may_match false for a matching query");
        }
        cands.len()
    }

    // ----- proptest -----

    const NAMES: &[&[u8]] = &[
        b"a.txt",
        b"B.TXT",
        b"foo",
        b"foo.c",
        b"bar.tar.gz",
        b"Foo",
        b"readme",
        b"x.Txt",
        b".hidden",
        b"core.123",
    ];
    const EXTS: &[&[u8]] = &[
        b"txt", b"TXT", b"c", b"gz", b"", b"tar.gz", b"hidden", b"zip",
    ];
    const NEEDLES: &[&[u8]] = &[
        b"", b"a", b"foo", b"OO", b"txt", b".t", b"ar.g", b"core.", b"zzz",
    ];
    const XATTRS: &[&[u8]] = &[b"user.a", b"user.b", b"user.c"];
    const SIZES: &[u64] = &[0, 1, 100, 4096, 1 << 20, 1 << 40, u64::MAX];
    const TIMES: &[i64] = &[
        i64::MIN,
        -5_000_000_000,
        0,
        1,
        1_700_000_000_000_000_000,
        1_700_000_100_000_000_000,
        i64::MAX,
    ];
    const PERMS: &[u16] = &[0o644, 0o755, 0o600, 0o4755, 0o777, 0];

    fn arb_inode() -> impl Strategy<Value = Inode> {
        (
            (0u32..4, 0u32..3, 0usize..3, 0..PERMS.len(), 0..SIZES.len()),
            (0..TIMES.len(), 0..TIMES.len(), 0..TIMES.len(), 1u32..4),
            0..NAMES.len(),
            prop::collection::vec(0..NAMES.len(), 0..3),
            prop::collection::vec(0..XATTRS.len(), 0..3),
        )
            .prop_map(
                |((uid, gid, t, p, s), (a, m, c, nlink), name, links, xattrs)| {
                    let mut ino = inode(uid, NAMES[name]);
                    ino.gid = gid;
                    ino.ftype = [FileType::Regular, FileType::Directory, FileType::Symlink][t];
                    ino.perm = PERMS[p];
                    ino.size = SIZES[s];
                    ino.atime = Nanos(TIMES[a]);
                    ino.mtime = Nanos(TIMES[m]);
                    ino.ctime = Nanos(TIMES[c]);
                    ino.nlink = nlink;
                    if !links.is_empty() || !xattrs.is_empty() {
                        let e: &mut InodeExtra = ino.extra_mut();
                        e.links = links
                            .iter()
                            .map(|&l| (soid(99), crate::inode::Name::new(NAMES[l])))
                            .collect();
                        for x in xattrs {
                            e.xattrs.insert(XATTRS[x].into(), b"v"[..].into());
                        }
                    }
                    ino
                },
            )
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u64, Inode),
        Delete(u64),
    }

    fn arb_ops(n: usize) -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                3 => (0u64..30, arb_inode()).prop_map(|(s, i)| Op::Put(s, i)),
                1 => (0u64..30).prop_map(Op::Delete),
            ],
            0..n,
        )
    }

    fn apply(t: &mut Table, ops: &[Op]) {
        for op in ops {
            match op {
                Op::Put(s, i) => t.put_inode(soid(*s), i.clone()),
                Op::Delete(s) => t.delete_inode(soid(*s)),
            }
        }
    }

    /// A dimension bound pair drawn from the attribute domains (sometimes
    /// inverted, sometimes extreme).
    fn arb_bounds(d: usize) -> BoxedStrategy<(u64, u64)> {
        let vals: Vec<u64> = match d {
            0 | 1 => vec![0, 1, 2, 3, 4, u64::from(u32::MAX), u64::MAX],
            2 => vec![0, 1, 2, 3, 7, 8],
            3 => PERMS.iter().map(|&p| u64::from(p)).collect(),
            4 => SIZES.to_vec(),
            5..=7 => TIMES.iter().map(|&t| time_coord(Nanos(t))).collect(),
            _ => vec![0, 1, 2, 3, 4],
        };
        let n = vals.len();
        (0..n, 0..n, prop::bool::ANY)
            .prop_map(move |(a, b, plus)| {
                let (lo, hi) = (vals[a], vals[b]);
                if plus {
                    (lo, hi.saturating_add(1))
                } else {
                    (lo, hi)
                }
            })
            .boxed()
    }

    fn arb_query() -> impl Strategy<Value = IndexQuery> {
        let dims: Vec<BoxedStrategy<Option<(u64, u64)>>> = (0..DIMS)
            .map(|d| prop::option::weighted(0.25, arb_bounds(d)).boxed())
            .collect();
        let pick = |pool: &'static [&'static [u8]]| {
            prop::collection::vec(0..pool.len(), 0..2)
                .prop_map(move |v| v.into_iter().map(|i| pool[i].into()).collect::<Vec<_>>())
        };
        let names = prop::collection::vec(0..NAMES.len(), 0..2).prop_map(|v| {
            v.into_iter()
                .map(|i| Box::<[u8]>::from(NAMES[i]))
                .collect::<Vec<_>>()
        });
        (
            dims,
            prop_oneof![3 => Just(ALL_TYPES), 1 => any::<u8>()],
            prop_oneof![3 => Just(0u16), 1 => prop::sample::select(vec![0o4000u16, 0o100, 0o044, 0o7777])],
            (
                prop::option::weighted(0.15, names.clone()),
                prop::option::weighted(0.15, names),
                prop::option::weighted(0.2, pick(EXTS)),
                prop::option::weighted(0.2, pick(NEEDLES)),
                prop::option::weighted(0.2, pick(NEEDLES)),
                prop::option::weighted(0.15, pick(XATTRS)),
            ),
            prop::option::weighted(0.1, (0u64..35, 0u64..35)),
        )
            .prop_map(|(dims, types, perm_all, names, soids)| {
                let mut q = IndexQuery::new();
                for (d, b) in dims.into_iter().enumerate() {
                    if let Some((lo, hi)) = b {
                        q = q.range(Dim::ALL[d], lo, hi);
                    }
                }
                q.types = types;
                q.perm_all = perm_all;
                let (n, nci, ext, sub, subci, xk) = names;
                q.names = n.unwrap_or_default();
                q.names_ci = nci.unwrap_or_default();
                q.extensions = ext.unwrap_or_default();
                q.substrings = sub.unwrap_or_default();
                q.substrings_ci = subci.unwrap_or_default();
                q.xattr_keys = xk.unwrap_or_default();
                if let Some((a, b)) = soids {
                    if let Some(r) = SoidRange::new(soid(a.min(b)), soid(a.max(b))) {
                        q = q.soid_range(r);
                    }
                }
                q
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn candidates_are_complete(
            before in arb_ops(60),
            after in arb_ops(25),
            rebuild in prop::bool::weighted(0.9),
            queries in prop::collection::vec(arb_query(), 1..12),
        ) {
            let mut t = Table::new(1, SoidRange::ALL);
            apply(&mut t, &before);
            if rebuild {
                t.index = TableIndex::rebuild(&t);
                prop_assert_eq!(t.index.changed_count(), 0);
                prop_assert_eq!(t.index.stats().tree_rows, t.inode_count());
            }
            // Queries on the freshly built index, then after more mutations.
            for q in &queries {
                check(&t, q);
            }
            apply(&mut t, &after);
            for q in &queries {
                check(&t, q);
            }
            // Unconstrained query: every live row exactly once.
            prop_assert_eq!(check(&t, &IndexQuery::new()), t.inode_count());
        }
    }

    // ----- unit tests -----

    #[test]
    fn name_semantics() {
        let mut i = inode(1, b"Report.TXT");
        i.extra_mut().links = vec![(soid(1), b"core.42"[..].into())];
        let s = soid(0);
        assert!(IndexQuery::new().name(b"Report.TXT").matches(s, &i));
        assert!(!IndexQuery::new().name(b"report.txt").matches(s, &i));
        assert!(IndexQuery::new().name_ci(b"report.txt").matches(s, &i));
        assert!(IndexQuery::new().extension(b"txt").matches(s, &i));
        assert!(IndexQuery::new().extension(b"42").matches(s, &i));
        assert!(!IndexQuery::new().extension(b"TXT.x").matches(s, &i));
        assert!(IndexQuery::new().substring(b"port.T").matches(s, &i));
        assert!(!IndexQuery::new().substring(b"port.t").matches(s, &i));
        assert!(IndexQuery::new().substring_ci(b"PORT.t").matches(s, &i));
        // Any link may match, but one link must satisfy all name constraints.
        assert!(IndexQuery::new().substring(b"core").matches(s, &i));
        let both = IndexQuery::new().substring(b"core").extension(b"txt");
        assert!(!both.matches(s, &i));
        let q = IndexQuery::new().substring(b"core");
        let links: Vec<_> = q.matching_links(&i).map(|(_, n)| n.to_vec()).collect();
        assert_eq!(links, vec![b"core.42".to_vec()]);
        // Attributes.
        assert!(IndexQuery::new().perm_all(0o044).matches(s, &i));
        assert!(!IndexQuery::new().perm_all(0o001).matches(s, &i));
        assert!(!IndexQuery::new()
            .types(&[FileType::Directory])
            .matches(s, &i));
        assert!(!IndexQuery::new().xattr_key(b"user.a").matches(s, &i));
    }

    #[test]
    fn unsatisfiable_and_extreme_queries() {
        let mut t = Table::new(1, SoidRange::ALL);
        for k in 0..100 {
            t.put_inode(soid(k), inode(k as u32 % 3, b"f"));
        }
        t.index = TableIndex::rebuild(&t);
        let empty = IndexQuery::new().uid(1).uid(2);
        assert!(empty.is_empty());
        assert!(!t.index.may_match(&empty));
        assert_eq!(candidate_list(&t, &empty).len(), 0);
        let q = IndexQuery::new().range(Dim::Uid, u64::MAX, u64::MAX).time(
            TimeAttr::Mtime,
            Nanos(i64::MAX),
            Nanos(i64::MIN),
        );
        assert_eq!(check(&t, &q), 0);
        let q = IndexQuery::new()
            .time(TimeAttr::Atime, Nanos(i64::MIN), Nanos(i64::MAX))
            .size(0, u64::MAX)
            .range(Dim::Gid, 0, u64::MAX);
        assert_eq!(check(&t, &q), 100);
        // Disjoint SOID ranges intersect to nothing.
        let r = |a, b| SoidRange::new(soid(a), soid(b)).unwrap();
        let q = IndexQuery::new().soid_range(r(0, 5)).soid_range(r(10, 20));
        assert!(q.is_empty());
        // A never-built index reports every live row.
        let mut u = Table::new(2, SoidRange::ALL);
        u.put_inode(soid(1), inode(1, b"x"));
        u.index = TableIndex::default();
        assert!(!u.index.is_built());
        assert_eq!(check(&u, &IndexQuery::new().uid(1)), 1);
    }

    // ----- realistic tables -----

    /// splitmix64.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    const NOW: i64 = 1_750_000_000 * Nanos::NSEC_PER_SEC;
    const DAY: i64 = 86_400 * Nanos::NSEC_PER_SEC;

    /// `n` inodes: "file_12345.txt"-like names, 20 uids, 5 gids, sizes
    /// spread over 1 B–1 TB (log-uniform), mtimes over a year, 5% dirs,
    /// 2% with an xattr, 1% with a second hard link.
    fn realistic(n: u64, seed: u64) -> Table {
        let mut r = Rng(seed);
        let exts: [&str; 7] = ["txt", "c", "h", "o", "log", "dat", "json"];
        let mut t = Table::new(1, SoidRange::ALL);
        for k in 0..n {
            let ext = exts[r.below(7) as usize];
            let name = format!("file_{}.{}", r.below(100_000), ext);
            let mut i = inode(1000 + r.below(20) as u32, name.as_bytes());
            i.gid = 100 + r.below(5) as u32;
            if r.below(20) == 0 {
                i.ftype = FileType::Directory;
                i.perm = 0o755;
                i.nlink = 2 + r.below(5) as u32;
            }
            let bits = r.below(40);
            i.size = (1u64 << bits) + r.below(1 << bits);
            i.mtime = Nanos(NOW - r.below(365 * DAY as u64) as i64);
            i.atime = Nanos(i.mtime.0 + r.below((NOW - i.mtime.0) as u64 + 1) as i64);
            i.ctime = i.mtime;
            if r.below(50) == 0 {
                i.extra_mut()
                    .xattrs
                    .insert(b"user.tag"[..].into(), b"x"[..].into());
            }
            if r.below(100) == 0 {
                i.nlink = 2;
                i.extra_mut()
                    .links
                    .push((soid(1), format!("link_{k}").into_bytes().into()));
            }
            t.put_inode(soid(k), i);
        }
        t
    }

    #[test]
    fn selective_query_prunes() {
        let n = 20_000;
        let mut t = realistic(n, 7);
        t.index = TableIndex::rebuild(&t);
        let q = IndexQuery::new().uid(1007).size(1 << 30, u64::MAX).time(
            TimeAttr::Mtime,
            Nanos(NOW - 30 * DAY),
            Nanos(NOW),
        );
        let cands = check(&t, &q);
        let hits = t.inodes().filter(|(s, i)| q.matches(*s, i)).count();
        eprintln!("selective query: {cands} candidates, {hits} hits, {n} inodes");
        assert!(cands >= hits);
        assert!(cands * 20 < n as usize, "{cands} candidates of {n}");

        // A uid nobody has: filters exclude the table, no candidates.
        let absent = IndexQuery::new().uid(4242);
        assert!(!t.index.may_match(&absent));
        assert_eq!(candidate_list(&t, &absent).len(), 0);
        let absent_name = IndexQuery::new().name(b"no_such_file.xyz");
        assert_eq!(candidate_list(&t, &absent_name).len(), 0);

        // After a change, the changed row is a candidate (and only it, here).
        let mut i = inode(4242, b"new");
        i.size = 5;
        t.put_inode(soid(n + 1), i);
        assert!(t.index.may_match(&absent));
        assert_eq!(check(&t, &absent), 1);
        // Changing rows (some at inner tree nodes) keeps queries exact.
        for k in (0..n).step_by(7) {
            let mut i = t.inode(soid(k)).cloned().unwrap();
            i.uid = 1007;
            i.size = 1 << 31;
            t.put_inode(soid(k), i);
        }
        for k in (3..n).step_by(11) {
            t.delete_inode(soid(k));
        }
        let c2 = check(&t, &q);
        eprintln!(
            "after changes: {c2} candidates, {} changed",
            t.index.changed_count()
        );
    }

    #[test]
    fn link_names_are_in_the_filters() {
        let mut t = realistic(2_000, 3);
        t.index = TableIndex::rebuild(&t);
        let linked: Vec<Box<[u8]>> = t
            .inodes()
            .flat_map(|(_, i)| {
                i.all_links()
                    .skip(1)
                    .map(|(_, n)| n.into())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(!linked.is_empty());
        for name in linked {
            let q = IndexQuery::new().name(&name);
            assert!(t.index.may_match(&q));
            // Names are not tree dimensions: the whole table is scanned.
            check(&t, &q);
            let hits = t.inodes().filter(|(s, i)| q.matches(*s, i)).count();
            assert_eq!(hits, 1);
        }
        // A table without the name is skipped by the filters.
        let q = IndexQuery::new().name(b"link_999999");
        assert!(!t.index.may_match(&q));
        assert_eq!(candidate_list(&t, &q).len(), 0);
    }

    #[test]
    fn memory_per_inode() {
        let n = 20_000;
        let mut t = realistic(n, 11);
        t.index = TableIndex::rebuild(&t);
        let s = t.index.stats();
        let per = t.index.memory_bytes() as f64 / n as f64;
        eprintln!(
            "index memory: {per:.2} bytes/inode (tree {:.2}, filters {:.2}, name lists {:.2}, changed {:.2}); {s:?}",
            s.tree_bytes as f64 / n as f64,
            s.filter_bytes as f64 / n as f64,
            s.name_list_bytes as f64 / n as f64,
            s.changed_bytes as f64 / n as f64,
        );
        assert_eq!(s.tree_rows, n as usize);
        // Issue 4 allows 60 B per file for all search indexes; the
        // trigram lists take most of it (~12 trigrams per name here, about
        // 1.2 B each), the K-D tree's codes 2 B per varying dimension.
        assert!(per <= 50.0, "{per} bytes/inode");
        assert!(s.name_list_bytes as f64 / n as f64 <= 20.0, "{s:?}");
        // Marking every row changed costs one bit per row.
        for k in 0..n {
            t.delete_inode(soid(k));
        }
        assert!(t.index.stats().changed_bytes <= (n as usize).div_ceil(64) * 8 * 2);
    }
}
