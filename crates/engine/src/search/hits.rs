//! One table's hits as the collect step makes them ([`HitBatch`]) and
//! hands them on ([`Hits`]): every path in one buffer per table, every
//! hit's attributes in one vector, reported in SOID order by reference
//! ([`HitRef`]).
//!
//! A hit's path used to be a heap object of its own, then a
//! reference-counted slice of its table's buffer (`Bytes`): one atomic
//! increment to make it and one decrement to drop it, the decrement on
//! the caller's thread while the worker that made the buffer touched the
//! same counter — at 10⁵ – 10⁶ hits a query about a third of a broad name
//! query (docs/BENCHMARKS.md, "Hits reported by reference"). Now the
//! caller is handed [`HitRef`]s, which borrow path and attributes from
//! the table's [`Hits`]: nothing is counted, copied or freed per hit, and
//! the table's two buffers go when its last hit was reported. A consumer
//! that keeps a hit takes a [`SearchHit`] of it ([`HitRef::to_hit`]: one
//! counted slice of the same buffer, as before).
//!
//! Invariants:
//! - `paths[row.start..row.end]` is the path of `row`; bytes past the
//!   last row's end are a staged path not (yet) kept.
//! - [`Hits`] reports its rows in SOID order (`order`, when the rows were
//!   found in another order), links of one inode in the order found.
//!
//! Cost: a consumer that keeps one [`SearchHit`] keeps its table's whole
//! path buffer alive; one that keeps a few hits of many tables for long
//! (a top-N) should give them paths of their own ([`SearchHit::detach`]).

use super::SearchHit;
use bytes::Bytes;
use sextant_types::{Attr, Soid};

/// One hit as kept: attributes (with the SOID), depth, and where its path
/// lies in the table's path buffer.
#[derive(Debug)]
struct Row {
    attr: Attr,
    depth: u32,
    start: usize,
    end: usize,
}

/// Hits of one table being made (see the module docs).
#[derive(Default)]
pub(crate) struct HitBatch {
    rows: Vec<Row>,
    paths: Vec<u8>,
    /// Hits the table is expected to give at most (its inodes: more only
    /// through hard links, and then the vector grows as usual; 0:
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
        self.rows.len()
    }

    /// Where the next staged path starts: after the last kept one.
    fn kept_end(&self) -> usize {
        self.rows.last().map_or(0, |r| r.end)
    }

    /// Writes `dir`/`name` after the kept paths (replacing any path staged
    /// before) and returns it: the path a hit would have, for the checks
    /// that need it before the hit is kept.
    pub(crate) fn stage(&mut self, dir: &[u8], name: &[u8]) -> &[u8] {
        let start = self.kept_end();
        self.paths.truncate(start);
        self.paths.extend_from_slice(dir);
        if dir != b"/" {
            self.paths.push(b'/');
        }
        self.paths.extend_from_slice(name);
        &self.paths[start..]
    }

    /// Keeps the staged path as the path of a hit with `attr` (whose
    /// `soid` is the hit's).
    ///
    /// Growth: doubling while small, then (a table with many hits) once
    /// to the table's bound, with path room at the average path so far —
    /// instead of a dozen reallocations that copy every hit of a large
    /// table (a tenth of a broad name query). A large reservation costs
    /// little beyond what it holds: the allocator maps it and the pages
    /// no hit reaches are never touched.
    pub(crate) fn keep(&mut self, attr: Attr, depth: u32) {
        let n = self.rows.len();
        if n == self.rows.capacity() && n >= SMALL && self.bound > n {
            let more = self.bound - n;
            self.rows.reserve_exact(more);
            let average = self.paths.len() / n.max(1) + 1;
            self.paths.reserve(more.saturating_mul(average));
        }
        let start = self.kept_end();
        self.rows.push(Row {
            attr,
            depth,
            start,
            end: self.paths.len(),
        });
    }

    /// Stages `path` whole and keeps it (the fallback path, which built
    /// its paths itself).
    pub(crate) fn push(&mut self, path: &[u8], attr: Attr, depth: u32) {
        let start = self.kept_end();
        self.paths.truncate(start);
        self.paths.extend_from_slice(path);
        self.keep(attr, depth);
    }

    /// The hits, to be reported in SOID order.
    pub(crate) fn finish(self) -> Hits {
        let HitBatch {
            mut rows,
            mut paths,
            ..
        } = self;
        if rows.is_empty() {
            return Hits::default();
        }
        paths.truncate(rows.last().map_or(0, |r| r.end));
        // A table that gave far fewer hits than its bound: give back the
        // room rather than hold it while the hits wait to be reported.
        if rows.capacity() > 2 * rows.len() + SMALL {
            rows.shrink_to_fit();
        }
        if paths.capacity() > 2 * paths.len() + SMALL {
            paths.shrink_to_fit();
        }
        let order = soid_order(&rows);
        Hits {
            rows,
            order,
            paths: Bytes::from(paths),
        }
    }
}

/// The positions of `rows` in SOID order, stably (links of one inode in
/// the order found); empty when they are in that order already (the K-D
/// tree's order is arbitrary, a name query's posting lists are in row
/// order). Rows are large: they are not moved, only visited in this order.
fn soid_order(rows: &[Row]) -> Vec<u32> {
    if rows.is_sorted_by_key(|r| r.attr.soid) {
        return Vec::new();
    }
    let mut keys: Vec<(Soid, u32)> = rows.iter().map(|r| r.attr.soid).zip(0..).collect();
    keys.sort_unstable();
    keys.into_iter().map(|(_, i)| i).collect()
}

/// One table's finished hits (see the module docs). Dropping it frees
/// every hit's path and attributes at once.
#[derive(Default)]
pub(crate) struct Hits {
    rows: Vec<Row>,
    /// Positions of `rows` in SOID order; empty: `rows` is in that order.
    order: Vec<u32>,
    paths: Bytes,
}

impl Hits {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The hits in SOID order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = HitRef<'_>> {
        let sorted = self.order.is_empty();
        let positions =
            (0..self.rows.len()).map(move |k| if sorted { k } else { self.order[k] as usize });
        positions.map(move |i| {
            let row = &self.rows[i];
            HitRef {
                path: &self.paths[row.start..row.end],
                attr: &row.attr,
                depth: row.depth,
                buffer: &self.paths,
            }
        })
    }
}

/// One matching path, borrowed from its table's hits for as long as the
/// search's visitor holds it: the path, the attributes as of the read
/// that matched them, the depth below the scope root (0: the root
/// itself). [`HitRef::to_hit`] makes a [`SearchHit`] to keep.
#[derive(Clone, Copy, Debug)]
pub struct HitRef<'a> {
    /// Absolute path.
    pub path: &'a [u8],
    pub attr: &'a Attr,
    pub depth: u32,
    /// The buffer `path` lies in, for [`HitRef::to_hit`].
    buffer: &'a Bytes,
}

impl<'a> HitRef<'a> {
    /// A hit whose path is the whole of `buffer` (a [`SearchHit`]'s own path,
    /// or the scope root's).
    pub(crate) fn new(buffer: &'a Bytes, attr: &'a Attr, depth: u32) -> Self {
        HitRef {
            path: buffer,
            attr,
            depth,
            buffer,
        }
    }

    pub fn soid(&self) -> Soid {
        self.attr.soid
    }

    /// The last component (`/` for the root).
    pub fn name(&self) -> &'a [u8] {
        name_of(self.path)
    }

    /// The directory part of the path (`/` for entries of the root and for
    /// the root itself).
    pub fn dir(&self) -> &'a [u8] {
        dir_of(self.path)
    }

    /// The hit to keep: its path a counted slice of the table's buffer
    /// (no copy; see the module docs for what keeping it holds).
    pub fn to_hit(&self) -> SearchHit {
        SearchHit {
            path: self.buffer.slice_ref(self.path),
            soid: self.attr.soid,
            attr: self.attr.clone(),
            depth: self.depth,
        }
    }
}

/// The last component of an absolute path (`/` for the root).
pub(crate) fn name_of(path: &[u8]) -> &[u8] {
    if path == b"/" {
        return b"/";
    }
    match path.iter().rposition(|&c| c == b'/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// The directory part of an absolute path (`/` for entries of the root
/// and for the root itself).
pub(crate) fn dir_of(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&c| c == b'/') {
        Some(0) | None => b"/",
        Some(i) => &path[..i],
    }
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

    fn attr_of(base: &Attr, soid: u128) -> Attr {
        Attr {
            soid: Soid::from_u128(soid),
            ..base.clone()
        }
    }

    /// What a batch reports: (path, soid, depth) in report order.
    fn reported(hits: &Hits) -> Vec<(Vec<u8>, Soid, u32)> {
        hits.iter()
            .map(|h| (h.path.to_vec(), h.soid(), h.depth))
            .collect()
    }

    /// Hits are reported as a stable sort by SOID (links of one inode in
    /// the order found), each with its own path, and `to_hit` keeps them.
    #[test]
    fn hits_are_reported_as_a_stable_sort_by_soid() {
        let attr = any_attr();
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&proptest::collection::vec(0u8..12, 0..80), |keys| {
                let mut batch = HitBatch::default();
                let mut want = Vec::new();
                for (i, k) in keys.iter().enumerate() {
                    let name = i.to_string();
                    let path = batch.stage(b"/d", name.as_bytes()).to_vec();
                    batch.keep(attr_of(&attr, u128::from(*k)), 1);
                    want.push((path, Soid::from_u128(u128::from(*k)), 1));
                }
                want.sort_by_key(|w| w.1);
                let hits = batch.finish();
                prop_assert_eq!(reported(&hits), want.clone());
                let kept: Vec<(Vec<u8>, Soid, u32)> = hits
                    .iter()
                    .map(|h| h.to_hit())
                    .map(|h| (h.path.to_vec(), h.soid, h.depth))
                    .collect();
                prop_assert_eq!(kept, want);
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
                batch.keep(attr_of(&attr, i as u128), 1);
            }
            let hits = batch.finish();
            assert_eq!(hits.len(), kept);
            assert!(hits.rows.capacity() <= 2 * kept + SMALL, "{bound} {kept}");
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(h.path, format!("/d/f{i}").as_bytes());
            }
        }
    }

    /// A batch gives each kept hit the path staged last before it (staged
    /// paths not kept leave no trace), or the path pushed whole.
    #[test]
    fn kept_hits_have_the_paths_staged_for_them() {
        let attr = any_attr();
        let mut runner = proptest::test_runner::TestRunner::default();
        let step = (
            "[a-z]{0,3}",
            "[a-z]{1,4}",
            proptest::bool::ANY,
            0u8..6,
            0u8..3,
        );
        runner
            .run(&proptest::collection::vec(step, 0..40), |steps| {
                let mut batch = HitBatch::default();
                let mut want = Vec::new();
                for (dir, name, root, soid, how) in steps {
                    let dir = if root {
                        "/".to_string()
                    } else {
                        format!("/{dir}")
                    };
                    let expected = if dir == "/" {
                        format!("/{name}")
                    } else {
                        format!("{dir}/{name}")
                    };
                    let soid = u128::from(soid);
                    match how {
                        // Staged and dropped.
                        0 => {
                            batch.stage(dir.as_bytes(), name.as_bytes());
                        }
                        1 => {
                            let staged = batch.stage(dir.as_bytes(), name.as_bytes()).to_vec();
                            prop_assert_eq!(&staged, expected.as_bytes());
                            batch.keep(attr_of(&attr, soid), 2);
                            want.push((staged, Soid::from_u128(soid), 2));
                        }
                        _ => {
                            batch.push(expected.as_bytes(), attr_of(&attr, soid), 3);
                            want.push((expected.into_bytes(), Soid::from_u128(soid), 3));
                        }
                    }
                }
                prop_assert_eq!(batch.len(), want.len());
                want.sort_by_key(|w| w.1);
                prop_assert_eq!(reported(&batch.finish()), want);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn names_and_directories_of_paths() {
        assert_eq!(name_of(b"/"), b"/");
        assert_eq!(dir_of(b"/"), b"/");
        assert_eq!(name_of(b"/a"), b"a");
        assert_eq!(dir_of(b"/a"), b"/");
        assert_eq!(name_of(b"/a/b.c"), b"b.c");
        assert_eq!(dir_of(b"/a/b.c"), b"/a");
    }
}
