//! A table's *exit set* (issue 4, per-subtree queries): the directories
//! outside the table that links of its inodes name as their parent, each
//! with the number of such links.
//!
//! Why it answers "can this table hold anything under directory `S`?"
//! exactly: take an inode `i` of table `T` with a link whose parent chain
//! (`parent`, `parent.parent`, ...) reaches `S`, and `S` outside `T`. The
//! chain starts in `i`'s link and leaves `T` at a first SOID `e` outside
//! `T`; the step before it is either that link itself or the parent link of
//! a directory inside `T`, so `e` is the parent of a link of an inode of
//! `T`, i.e. `e` is in the exit set; and `e` lies on the chain, so `e` is
//! `S` or below `S`. Hence: if `S` is not in `T` and no exit of `T` is `S`
//! or below `S`, then `T` holds nothing below `S`. The search
//! ([`crate::search`]) uses this to skip tables, never to decide a match.
//!
//! The set depends only on the table's own inodes and range (no parent
//! chain is walked to maintain it), so it is kept by the table's inode
//! writes under the table's own lock, like [`super::summary`]: no other
//! table is touched, so no lock-order question arises with transactions.
//!
//! Invariant: `links` maps every SOID `p` outside the table's range to the
//! number of links `(p, name)` of the table's inodes
//! ([`Inode::all_links`]), and holds no zero count (checked by the table's
//! tests).

use crate::inode::Inode;
use sextant_types::{Soid, SoidRange};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Source of [`Exits::version`]s: unique across every table of the process.
static NEXT_VERSION: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Default, Clone)]
pub struct Exits {
    links: HashMap<Soid, u32>,
    /// Names the set of exit directories (the keys of `links`): taken
    /// afresh from [`NEXT_VERSION`] whenever a directory joins or leaves
    /// the set, so two sets with one version — in any tables — hold the
    /// same directories (a clone shares its original's). 0: empty since
    /// made. Lets what is derived from the directories alone be kept
    /// across searches ([`crate::dir_cache`]).
    version: u64,
}

/// Equal when they count the same links (whatever their versions).
impl PartialEq for Exits {
    fn eq(&self, other: &Self) -> bool {
        self.links == other.links
    }
}

impl Eq for Exits {}

impl Exits {
    /// Counts the links of `inode` that leave `range`.
    pub fn add(&mut self, range: SoidRange, inode: &Inode) {
        for (p, _) in inode.all_links() {
            if !range.contains(p) {
                let n = self.links.entry(p).or_insert_with(|| {
                    self.version = NEXT_VERSION.fetch_add(1, Ordering::Relaxed);
                    0
                });
                *n = n.saturating_add(1);
            }
        }
    }

    /// Uncounts the links of `inode` that leave `range` (the inverse of
    /// [`Exits::add`] with the same inode).
    pub fn remove(&mut self, range: SoidRange, inode: &Inode) {
        for (p, _) in inode.all_links() {
            if range.contains(p) {
                continue;
            }
            if let Some(n) = self.links.get_mut(&p) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.links.remove(&p);
                    self.version = NEXT_VERSION.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The exit directories (each once, in no particular order).
    pub fn dirs(&self) -> impl Iterator<Item = Soid> + '_ {
        self.links.keys().copied()
    }

    /// The version of the set of exit directories (see the field).
    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Approximate heap bytes.
    pub fn memory_bytes(&self) -> usize {
        self.links.capacity() * (std::mem::size_of::<(Soid, u32)>() + 8)
    }
}
