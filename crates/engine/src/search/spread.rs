//! A search on one member of a cluster whose namespace is spread over
//! several servers (issue 21 item 3, Magellan's routing): what the member
//! searches, and how it reads the directories other members hold.
//!
//! The asker (the client library) splits the SOID space among the servers
//! by the route map and asks each to search its parts ([`Spread::ranges`])
//! at once. A member visits a table only while it holds it: a range it
//! meets as another member's ([`crate::engine`]'s foreign slots) is not
//! searched but reported back ([`Spread::take_not_held`]), and the asker
//! gives it to its new owner. Since the asker gives each part of the space
//! to one member at a time and a member searches a part only under the
//! lock of a table it holds, a table that moves during the query is
//! searched exactly once: neither skipped nor counted twice.
//!
//! Ancestry (scope membership, paths, the caller's permission to list every
//! directory on the way) is decided as on one server, from each directory's
//! parent chain; where a chain leaves this member's tables it continues
//! through [`ForeignDirs`], which reads the directories another member
//! holds (the server asks that member). So a caller sees exactly what GNU
//! find run by that caller would list, whoever holds the ancestors.
//!
//! Reading another member's directory is a round trip, so a search reads
//! each at most once and many at a time: the directory records it has
//! read are kept for the search ([`Spread::record`], shared by its
//! threads), and before tables are visited the directories their exits
//! lead to are fetched together, a batch per round
//! ([`ForeignDirs::chains`], `scope::prefetch`): a query costs a few
//! round trips per member, not one per foreign directory (issue 21's
//! benchmark measured ~2,700 per query).
//!
//! Invariants:
//! - `ranges` are sorted and disjoint; nothing outside them is visited and
//!   the scope root is reported only by the member whose ranges hold it.
//! - Directory paths remembered across searches ([`crate::dir_cache`]) are
//!   neither used nor filled by a spread search unless its caller vouches
//!   for them ([`Spread::remembering`]): the local epoch does not see
//!   renames on other members, so the caller must make the engine forget
//!   them whenever another member's directories may have changed.
//! - The records kept live as long as the search: each directory is read
//!   once during it, which is the per-entry consistency every search
//!   promises (its statuses are memoised the same way); nothing read by
//!   one search is used by another.

use crate::hash::SoidHasher;
use sextant_types::{FsError, Soid, SoidRange};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// One directory as its owner holds it: what another member's search
/// needs to continue a parent chain through it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirRecord {
    pub soid: Soid,
    pub parent: Soid,
    pub name: Box<[u8]>,
    /// Permission bits (07777).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
}

/// Reads the directories other members hold.
pub trait ForeignDirs {
    /// The directory `dir` and its ancestors, child first, as far up as
    /// the member holding `dir` holds them (at least `dir` itself); empty
    /// when `dir` is gone or not a directory. An error ends the search.
    fn chain(&self, dir: Soid) -> Result<Vec<DirRecord>, FsError>;

    /// [`ForeignDirs::chain`] of each of `dirs` at once (one round trip
    /// per holder): the records of every directory of `dirs` and of its
    /// ancestors as far up as the member holding it holds them, shared
    /// ancestors once, in any order. A directory of `dirs` without a
    /// record is gone or not a directory. An error ends the search.
    fn chains(&self, dirs: &[Soid]) -> Result<Vec<DirRecord>, FsError> {
        let mut out = Vec::new();
        for &d in dirs {
            out.extend(self.chain(d)?);
        }
        Ok(out)
    }
}

/// What a member answers for several directories at once
/// ([`crate::Engine::dir_chains`]; [`ForeignDirs::chains`] on the asking
/// side).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirChains {
    /// The answered directories and their ancestors as far as this member
    /// holds them, each directory once; an answered directory without a
    /// record (and not in `not_held`) is gone or not a directory.
    pub records: Vec<DirRecord>,
    /// Answered directories whose table is not held here: to be asked of
    /// their holder (never taken for gone).
    pub not_held: Vec<Soid>,
    /// How many of the directories asked, in order, are answered (at least
    /// one): the others did not fit and are to be asked again.
    pub answered: usize,
}

/// Foreign directories read by one search: a record, or `None` when the
/// directory was gone (or not a directory).
type Kept = HashMap<Soid, Option<DirRecord>, BuildHasherDefault<SoidHasher>>;

/// How a member searches its part of a spread namespace (see the module
/// docs); given in [`super::SearchOptions::spread`].
pub struct Spread<'a> {
    ranges: Vec<SoidRange>,
    pub(super) foreign: &'a (dyn ForeignDirs + Sync),
    not_held: Mutex<Vec<SoidRange>>,
    /// The scope root: reported on its own (by the member holding its
    /// table as the search starts), so ranges met as another member's
    /// leave it out — it must not be reported again by their holder.
    root: OnceLock<Soid>,
    /// The other members' directories this search has read (see the
    /// module docs).
    kept: parking_lot::Mutex<Kept>,
    /// What reading other members' directories cost this search
    /// ([`Spread::reads`]).
    reads: ForeignReads,
    /// The search may use and fill the directory paths remembered across
    /// searches ([`Spread::remembering`]).
    remembers: bool,
}

/// What reading other members' directories cost one search: rounds of
/// [`ForeignDirs::chains`], directories asked, records received, and the
/// wall time spent waiting for them (µs; threads of a search may wait at
/// once, so it can exceed the search's time).
#[derive(Default)]
struct ForeignReads {
    rounds: AtomicU64,
    asked: AtomicU64,
    records: AtomicU64,
    waited_us: AtomicU64,
}

/// [`ForeignReads`] as numbers (for the server's search timing log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForeignReadCounts {
    pub rounds: u64,
    pub asked: u64,
    pub records: u64,
    pub waited_us: u64,
}

impl<'a> Spread<'a> {
    /// A search of `ranges` (any order; overlaps are merged).
    pub fn new(mut ranges: Vec<SoidRange>, foreign: &'a (dyn ForeignDirs + Sync)) -> Spread<'a> {
        ranges.sort_by_key(|r| r.first);
        let mut merged: Vec<SoidRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(m) if m.last.checked_next().is_none_or(|n| r.first <= n) => {
                    m.last = m.last.max(r.last);
                }
                _ => merged.push(r),
            }
        }
        Spread {
            ranges: merged,
            foreign,
            not_held: Mutex::new(Vec::new()),
            root: OnceLock::new(),
            kept: parking_lot::Mutex::new(Kept::default()),
            reads: ForeignReads::default(),
            remembers: false,
        }
    }

    /// Lets the search use and fill the directory paths remembered across
    /// searches ([`crate::dir_cache`]), which then run through other
    /// members' directories. The caller vouches that the engine forgot
    /// them ([`crate::Engine::forget_remembered_dirs`]) since any
    /// directory of another member last moved, went or changed mode or
    /// owner — e.g. by comparing every other member's
    /// [`crate::Engine::dir_epoch`] with the values it saw last, before
    /// this search starts.
    pub fn remembering(mut self) -> Spread<'a> {
        self.remembers = true;
        self
    }

    /// Whether the search may use the remembered paths
    /// ([`Spread::remembering`]).
    pub fn remembers(&self) -> bool {
        self.remembers
    }

    /// What reading other members' directories has cost this search so far.
    pub fn reads(&self) -> ForeignReadCounts {
        let r = &self.reads;
        ForeignReadCounts {
            rounds: r.rounds.load(Ordering::Relaxed),
            asked: r.asked.load(Ordering::Relaxed),
            records: r.records.load(Ordering::Relaxed),
            waited_us: r.waited_us.load(Ordering::Relaxed),
        }
    }

    /// The record of another member's directory `dir` as this search read
    /// it, `Some(None)` when it was gone; `None` when not read yet.
    pub(super) fn kept(&self, dir: Soid) -> Option<Option<DirRecord>> {
        self.kept.lock().get(&dir).cloned()
    }

    /// The parent of another member's directory `dir` as this search read
    /// it, `Some(None)` when it was gone; `None` when not read yet.
    pub(super) fn kept_parent(&self, dir: Soid) -> Option<Option<Soid>> {
        let k = self.kept.lock();
        k.get(&dir).map(|r| r.as_ref().map(|r| r.parent))
    }

    /// Another member's directory `dir` (`None`: gone, or not a
    /// directory), read once per search.
    pub(super) fn record(&self, dir: Soid) -> Result<Option<DirRecord>, FsError> {
        if let Some(r) = self.kept(dir) {
            return Ok(r);
        }
        self.fetch(&[dir])?;
        Ok(self.kept(dir).flatten())
    }

    /// Reads those of `dirs` not read yet, with the ancestors their holders
    /// hold, in one [`ForeignDirs::chains`]; keeps every record.
    pub(super) fn fetch(&self, dirs: &[Soid]) -> Result<(), FsError> {
        let mut want: Vec<Soid> = {
            let k = self.kept.lock();
            dirs.iter()
                .copied()
                .filter(|d| !k.contains_key(d))
                .collect()
        };
        want.sort_unstable();
        want.dedup();
        if want.is_empty() {
            return Ok(());
        }
        // Outside the lock: the other threads of the search go on.
        let started = Instant::now();
        let got = self.foreign.chains(&want)?;
        let r = &self.reads;
        r.rounds.fetch_add(1, Ordering::Relaxed);
        r.asked.fetch_add(want.len() as u64, Ordering::Relaxed);
        r.records.fetch_add(got.len() as u64, Ordering::Relaxed);
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        r.waited_us.fetch_add(us, Ordering::Relaxed);
        let mut k = self.kept.lock();
        for r in got {
            k.entry(r.soid).or_insert(Some(r));
        }
        for d in want {
            k.entry(d).or_insert(None);
        }
        Ok(())
    }

    /// The search's scope root (set once, before any range is noted).
    pub(super) fn set_root(&self, root: Soid) {
        let _ = self.root.set(root);
    }

    /// The scope root's table was another member's as the search began:
    /// the asker gives the root to its holder, which reports it.
    pub(super) fn note_root_not_held(&self) {
        if let (Some(root), Ok(mut v)) = (self.root.get(), self.not_held.lock()) {
            v.push(SoidRange {
                first: *root,
                last: *root,
            });
        }
    }

    /// The ranges this member searches.
    pub fn ranges(&self) -> &[SoidRange] {
        &self.ranges
    }

    /// Whether `soid` is in one of the ranges.
    pub fn covers(&self, soid: Soid) -> bool {
        self.ranges
            .get(self.first_ending_at_or_after(soid))
            .is_some_and(|r| r.contains(soid))
    }

    /// The index of the first range (sorted, disjoint) whose last SOID is
    /// `soid` or later (`ranges.len()` when none).
    fn first_ending_at_or_after(&self, soid: Soid) -> usize {
        self.ranges.partition_point(|r| r.last < soid)
    }

    /// Pieces of `items` inside the ranges, in order: for each item, the
    /// ranges it overlaps, found by a binary search. (Every range against
    /// every item cost a member of a cluster with a thousand tables, whose
    /// ranges are one per table it holds, ~18 % of its CPU in a subtree's
    /// totals, twice per search: issue 21's "totals across servers".)
    pub(super) fn restrict(&self, items: &[SoidRange]) -> Vec<SoidRange> {
        let mut out = Vec::new();
        for item in items {
            let from = self.first_ending_at_or_after(item.first);
            for r in self.ranges[from..]
                .iter()
                .take_while(|r| r.first <= item.last)
            {
                if let Some(i) = intersection(item, r) {
                    out.push(i);
                }
            }
        }
        out
    }

    /// Notes that the part `within` of `table` was another member's when
    /// the cursor came.
    pub(super) fn note_not_held(&self, table: SoidRange, within: SoidRange) {
        let Some(i) = intersection(&table, &within) else {
            return;
        };
        let Ok(mut v) = self.not_held.lock() else {
            return;
        };
        match self.root.get().filter(|r| i.contains(**r)) {
            // The root without the root (see `root`).
            Some(root) => {
                let below = root.checked_prev().and_then(|p| SoidRange::new(i.first, p));
                let above = root.checked_next().and_then(|n| SoidRange::new(n, i.last));
                v.extend(below.into_iter().chain(above));
            }
            None => v.push(i),
        }
    }

    /// The ranges met as other members' (sorted, merged): the asker gives
    /// them to their owners.
    pub fn take_not_held(&self) -> Vec<SoidRange> {
        let v = match self.not_held.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => Vec::new(),
        };
        Spread::new(v, self.foreign).ranges
    }
}

/// The SOIDs in both ranges.
pub fn intersection(a: &SoidRange, b: &SoidRange) -> Option<SoidRange> {
    SoidRange::new(a.first.max(b.first), a.last.min(b.last))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoDirs;
    impl ForeignDirs for NoDirs {
        fn chain(&self, _: Soid) -> Result<Vec<DirRecord>, FsError> {
            Ok(Vec::new())
        }
    }

    fn r(a: u128, b: u128) -> SoidRange {
        SoidRange::new(Soid::from_u128(a), Soid::from_u128(b)).unwrap()
    }

    #[test]
    fn ranges_merge_restrict_and_collect_what_was_not_held() {
        let s = Spread::new(vec![r(20, 29), r(0, 9), r(10, 12), r(25, 40)], &NoDirs);
        assert_eq!(s.ranges(), [r(0, 12), r(20, 40)]);
        assert!(
            s.covers(Soid::from_u128(12))
                && !s.covers(Soid::from_u128(13))
                && s.covers(Soid::from_u128(40))
        );
        assert_eq!(
            s.restrict(&[r(5, 22), r(41, 50)]),
            [r(5, 12), r(20, 22)],
            "pieces inside the ranges only"
        );
        s.note_not_held(r(30, 60), r(20, 40));
        s.note_not_held(r(21, 29), r(20, 40));
        s.note_not_held(r(50, 60), r(20, 40));
        assert_eq!(s.take_not_held(), [r(21, 40)]);
        assert!(s.take_not_held().is_empty());
        // The scope root is cut out of ranges met as another member's.
        let cut = Spread::new(vec![r(0, 100)], &NoDirs);
        cut.set_root(Soid::from_u128(50));
        cut.note_not_held(r(40, 60), r(0, 100));
        cut.note_not_held(r(50, 50), r(0, 100));
        assert_eq!(cut.take_not_held(), [r(40, 49), r(51, 60)]);
        cut.note_root_not_held();
        assert_eq!(cut.take_not_held(), [r(50, 50)]);
        let all = Spread::new(vec![SoidRange::ALL, r(3, 4)], &NoDirs);
        assert_eq!(all.ranges(), [SoidRange::ALL]);
    }

    /// Every range against every item, as `restrict` was.
    fn restrict_by_brute_force(s: &Spread<'_>, items: &[SoidRange]) -> Vec<SoidRange> {
        let mut out = Vec::new();
        for item in items {
            for r in s.ranges() {
                out.extend(intersection(item, r));
            }
        }
        out
    }

    /// `restrict` and `covers` agree with every range against every item
    /// on random ranges and items (any sizes, touching, overlapping), and
    /// a member's ranges of a large cluster (one per table it holds) are
    /// restricted in time linear in the items, not items × ranges.
    #[test]
    fn restrict_finds_the_overlapping_ranges_by_search_and_in_linear_time() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u128| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            u128::from(seed) % n
        };
        for _ in 0..300 {
            let span = 1 + next(400);
            let ranges: Vec<SoidRange> = (0..next(12))
                .map(|_| {
                    let a = next(span);
                    r(a, a + next(span / 4 + 1))
                })
                .collect();
            let s = Spread::new(ranges, &NoDirs);
            let mut items = Vec::new();
            let mut at = 0;
            while at < span + 50 {
                let len = next(40);
                items.push(r(at, at + len));
                at += len + 1;
            }
            assert_eq!(s.restrict(&items), restrict_by_brute_force(&s, &items));
            for x in 0..span + 60 {
                let soid = Soid::from_u128(x);
                let brute = s.ranges().iter().any(|r| r.contains(soid));
                assert_eq!(s.covers(soid), brute, "{x}");
            }
        }
        // 100,000 tables, every other one held here: 50,000 ranges. By
        // brute force that is 5 * 10^9 intersections (tens of seconds); by
        // search, milliseconds.
        let items: Vec<SoidRange> = (0..100_000u128).map(|i| r(i * 10, i * 10 + 9)).collect();
        let held: Vec<SoidRange> = items.iter().step_by(2).copied().collect();
        let s = Spread::new(held.clone(), &NoDirs);
        let started = std::time::Instant::now();
        let got = s.restrict(&items);
        let took = started.elapsed();
        assert_eq!(got, held);
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    }
}
