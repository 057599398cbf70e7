//! One table's hits as the collect step makes them: every path in one
//! buffer per table, handed out as slices of it ([`Bytes`]).
//!
//! A hit's path used to be a heap object of its own: allocated by the
//! thread that visited the table and freed by whoever dropped the hit —
//! in a parallel search the caller's thread, so glibc's `free` took the
//! worker's arena lock and the two threads queued on it. With result
//! volumes of 10⁵ – 10⁶ paths a query that was the largest single cost
//! (docs/BENCHMARKS.md, "One path buffer per table"). A [`HitBatch`]
//! allocates a few buffers per table instead, and a hit's path is a
//! reference-counted slice: cloning and dropping it are one atomic each,
//! and the buffer goes when the last hit of its table is dropped.
//!
//! Invariants:
//! - `paths[ends[i-1]..ends[i]]` (from 0 for the first) is the path of
//!   `hits[i]`; bytes past the last end are a staged path not (yet) kept.
//! - Until [`HitBatch::finish`] every hit's `path` is empty; after it each
//!   is its slice of the frozen buffer, and the hits are in SOID order.
//!
//! Cost: a consumer that keeps one hit keeps its table's whole buffer
//! alive; one that keeps a few hits of many tables for long (a top-N)
//! should give them paths of their own ([`SearchHit::detach`]).

use super::SearchHit;
use bytes::Bytes;
use sextant_types::{Attr, Soid};

/// Hits of one table being made (see the module docs).
#[derive(Default)]
pub(crate) struct HitBatch {
    hits: Vec<SearchHit>,
    paths: Vec<u8>,
    ends: Vec<usize>,
    /// Hits the table is expected to give at most (its inodes: more only
    /// through hard links, and then the vectors grow as usual; 0:
    /// unknown), for [`HitBatch::keep`]'s growth.
    bound: usize,
}

/// Hits kept before a batch grows straight to its bound.
const SMALL: usize = 64;

impl HitBatch {
    /// A batch for a table of `inodes` inodes.
    pub(crate) fn for_table(inodes: usize) -> Self {
        HitBatch {
            bound: inodes,
            ..HitBatch::default()
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.hits.len()
    }

    /// Writes `dir`/`name` after the kept paths (replacing any path staged
    /// before) and returns it: the path a hit would have, for the checks
    /// that need it before the hit is kept.
    pub(crate) fn stage(&mut self, dir: &[u8], name: &[u8]) -> &[u8] {
        let start = self.ends.last().copied().unwrap_or(0);
        self.paths.truncate(start);
        self.paths.extend_from_slice(dir);
        if dir != b"/" {
            self.paths.push(b'/');
        }
        self.paths.extend_from_slice(name);
        &self.paths[start..]
    }

    /// Keeps the staged path as the path of a hit for `soid`.
    ///
    /// Growth: doubling while small, then (a table with many hits) once
    /// to the table's bound, with path room at the average path so far —
    /// instead of a dozen reallocations that copy every hit of a large
    /// table (a tenth of a broad name query). A large reservation costs
    /// little beyond what it holds: the allocator maps it and the pages
    /// no hit reaches are never touched.
    pub(crate) fn keep(&mut self, soid: Soid, attr: Attr, depth: u32) {
        let n = self.hits.len();
        if n == self.hits.capacity() && n >= SMALL && self.bound > n {
            let more = self.bound - n;
            self.hits.reserve_exact(more);
            self.ends.reserve_exact(more);
            let average = self.paths.len() / n.max(1) + 1;
            self.paths.reserve(more.saturating_mul(average));
        }
        self.ends.push(self.paths.len());
        self.hits.push(SearchHit {
            path: Bytes::new(),
            soid,
            attr,
            depth,
        });
    }

    /// The hits, each with its path, in SOID order.
    pub(crate) fn finish(self) -> Vec<SearchHit> {
        let HitBatch {
            mut hits,
            mut paths,
            ends,
            ..
        } = self;
        if hits.is_empty() {
            return hits;
        }
        paths.truncate(ends.last().copied().unwrap_or(0));
        // A table that gave far fewer hits than its bound: give back the
        // room (a copy of the few hits) rather than hold it while the
        // hits wait to be reported.
        if hits.capacity() > 2 * hits.len() + SMALL {
            hits.shrink_to_fit();
        }
        if paths.capacity() > 2 * paths.len() + SMALL {
            paths.shrink_to_fit();
        }
        let buffer = Bytes::from(paths);
        let mut start = 0;
        for (hit, end) in hits.iter_mut().zip(ends) {
            hit.path = buffer.slice(start..end);
            start = end;
        }
        in_soid_order(hits)
    }
}

/// `hits` of one table in SOID order (the K-D tree's order is arbitrary),
/// links of one inode in the order they were found. Sorts keys, then
/// permutes the hits in place, one cycle at a time: hits are large, a
/// comparison sort moves each of them many times, and building a second
/// vector of them cost two allocations of the whole batch (with set 3's
/// 50k hits a query, large enough for glibc to map and unmap them).
pub(crate) fn in_soid_order(mut hits: Vec<SearchHit>) -> Vec<SearchHit> {
    if hits.is_sorted_by_key(|h| h.soid) {
        return hits;
    }
    // order[k] = the index of the hit that belongs at position k.
    let mut order: Vec<(Soid, usize)> = hits.iter().map(|h| h.soid).zip(0..).collect();
    order.sort_unstable();
    let mut from: Vec<usize> = order.into_iter().map(|(_, i)| i).collect();
    for start in 0..from.len() {
        // Follow the cycle through `start`, swapping each position's hit
        // into place; a placed position points at itself.
        let mut at = start;
        while from[at] != start {
            let next = from[at];
            hits.swap(at, next);
            from[at] = at;
            at = next;
        }
        from[at] = at;
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig};
    use crate::store::MemStore;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn any_attr() -> Attr {
        let engine = Engine::open(Arc::new(MemStore::new()), EngineConfig::default()).unwrap();
        let attr = engine.getattr(Soid::ROOT).unwrap();
        engine.close().unwrap();
        attr
    }

    /// The in-place permutation is a stable sort by SOID (links of one
    /// inode stay in the order found).
    #[test]
    fn in_soid_order_is_a_stable_sort_by_soid() {
        let attr = any_attr();
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&proptest::collection::vec(0u8..12, 0..80), |keys| {
                let hits: Vec<SearchHit> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| SearchHit {
                        path: i.to_string().into_bytes().into(),
                        soid: Soid::from_u128(u128::from(*k)),
                        attr: attr.clone(),
                        depth: 0,
                    })
                    .collect();
                let mut want = hits.clone();
                want.sort_by_key(|h| h.soid);
                prop_assert_eq!(in_soid_order(hits), want);
                Ok(())
            })
            .unwrap();
    }

    /// Past the small size a batch grows to its bound at once, and on
    /// past it as usual (hard links); a batch far below its bound gives
    /// the room back. Either way every hit keeps its own path.
    #[test]
    fn batches_grow_past_their_bound_and_shrink_below_it() {
        let attr = any_attr();
        for (bound, kept) in [(100, 150), (10_000, 70), (0, 300), (64, 64)] {
            let mut batch = HitBatch::for_table(bound);
            for i in 0..kept {
                batch.stage(b"/d", format!("f{i}").as_bytes());
                batch.keep(Soid::from_u128(i as u128), attr.clone(), 1);
            }
            let hits = batch.finish();
            assert_eq!(hits.len(), kept);
            assert!(hits.capacity() <= 2 * kept + SMALL, "{bound} {kept}");
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(&h.path[..], format!("/d/f{i}").as_bytes());
            }
        }
    }

    /// A batch gives each kept hit the path staged last before it (staged
    /// paths not kept leave no trace), sorted by SOID as `in_soid_order`.
    #[test]
    fn kept_hits_have_the_paths_staged_for_them() {
        let attr = any_attr();
        let mut runner = proptest::test_runner::TestRunner::default();
        let step = (
            "[a-z]{0,3}",
            "[a-z]{1,4}",
            proptest::bool::ANY,
            0u8..6,
            proptest::bool::ANY,
        );
        runner
            .run(&proptest::collection::vec(step, 0..40), |steps| {
                let mut batch = HitBatch::default();
                let mut want = Vec::new();
                for (dir, name, root, soid, keep) in steps {
                    let dir = if root {
                        "/".to_string()
                    } else {
                        format!("/{dir}")
                    };
                    let staged = batch.stage(dir.as_bytes(), name.as_bytes()).to_vec();
                    let expected = if dir == "/" {
                        format!("/{name}")
                    } else {
                        format!("{dir}/{name}")
                    };
                    prop_assert_eq!(&staged, expected.as_bytes());
                    if keep {
                        let soid = Soid::from_u128(u128::from(soid));
                        batch.keep(soid, attr.clone(), 1);
                        want.push(SearchHit {
                            path: Bytes::from(staged),
                            soid,
                            attr: attr.clone(),
                            depth: 1,
                        });
                    }
                }
                prop_assert_eq!(batch.len(), want.len());
                want.sort_by_key(|h| h.soid);
                prop_assert_eq!(batch.finish(), want);
                Ok(())
            })
            .unwrap();
    }
}
