//! Per-table trigram posting lists: for every lowercase trigram of some
//! link name in a table, the rows whose names contain it. Pure logic, no
//! I/O; in memory only (rebuilt with the rest of a table's index).
//!
//! Why: the trigram *Bloom filter* of a table ([`crate::bloom`]) can only
//! say whether the whole table may hold a name; a table it keeps is then
//! read row by row. For a glob or substring query that is most of the work
//! (issue 4: name search "must not be a scan of all names"). The lists
//! answer which rows may hold the name: a query decodes the two shortest
//! lists among its needles' trigrams and visits their intersection, every
//! row of which is still checked exactly.
//!
//! Hand-written on purpose: it is a few dozen lines of the index's own
//! layout (sorted keys, delta-coded row lists), and its memory per file is
//! one of issue 4's targets.
//!
//! # Layout and invariants
//!
//! - `keys` is strictly increasing; a key is a trigram packed as
//!   `b0 << 16 | b1 << 8 | b2` of its ASCII-lowercased bytes.
//! - List `i` is `bytes[offsets[i]..offsets[i + 1]]`: its rows in strictly
//!   increasing order, each as the LEB128 varint of its difference from the
//!   previous row (the first from 0). `lens[i]` is its number of rows.
//! - No false negatives: every row given to [`TrigramPostings::build`]
//!   with a name containing needle `n` (ignoring ASCII case, `n` at least
//!   3 bytes) is in [`TrigramPostings::rows_containing`]`(&[n])`.

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct TrigramPostings {
    keys: Vec<u32>,
    offsets: Vec<u32>,
    lens: Vec<u32>,
    bytes: Vec<u8>,
}

fn pack(t: &[u8]) -> u32 {
    let l = |i: usize| u32::from(t.get(i).map_or(0, u8::to_ascii_lowercase));
    l(0) << 16 | l(1) << 8 | l(2)
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl TrigramPostings {
    /// Builds the lists from `(row, name)` pairs (a row may come several
    /// times, once per link name; any order).
    pub fn build<'a>(names: impl IntoIterator<Item = (u32, &'a [u8])>) -> TrigramPostings {
        let mut pairs: Vec<u64> = Vec::new();
        for (row, name) in names {
            pairs.extend(
                name.windows(3)
                    .map(|w| u64::from(pack(w)) << 32 | u64::from(row)),
            );
        }
        pairs.sort_unstable();
        pairs.dedup();
        let mut p = TrigramPostings::default();
        let mut prev: Option<(u32, u32)> = None;
        for pair in pairs {
            let (key, row) = ((pair >> 32) as u32, pair as u32);
            let base = match prev {
                Some((k, r)) if k == key => r,
                _ => {
                    p.keys.push(key);
                    p.offsets.push(p.bytes.len() as u32);
                    p.lens.push(0);
                    0
                }
            };
            put_varint(&mut p.bytes, row - base);
            if let Some(n) = p.lens.last_mut() {
                *n += 1;
            }
            prev = Some((key, row));
        }
        p.offsets.push(p.bytes.len() as u32);
        p.keys.shrink_to_fit();
        p.offsets.shrink_to_fit();
        p.lens.shrink_to_fit();
        p.bytes.shrink_to_fit();
        p
    }

    /// The lists of the needles' trigrams (looked up once, then measured
    /// with [`Lists::shortest`] and read with [`Lists::rows`]): the
    /// shortest list of each needle first, shortest of them first, then
    /// the others. So the two lists intersected come from two needles when
    /// there are two: a glob `velo*.err`'s `vel` and `elo` hold nearly the
    /// same rows (intersecting them left 409 of a table's 10,000 rows),
    /// while `vel` and `.er` are independent (32, every one a match).
    /// `None` when no needle has 3 bytes (the lists cannot narrow
    /// anything: read every row).
    pub fn lists(&self, needles: &[&[u8]]) -> Option<Lists<'_>> {
        let len = |i: &usize| (self.lens[*i], *i);
        let (mut heads, mut rest): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut any = false;
        for n in needles {
            let mut own: Vec<usize> = Vec::new();
            for w in n.windows(3) {
                any = true;
                match self.keys.binary_search(&pack(w)) {
                    Ok(i) => own.push(i),
                    // A trigram no name has: nothing can match.
                    Err(_) => {
                        return Some(Lists {
                            postings: self,
                            ids: Vec::new(),
                        })
                    }
                }
            }
            own.sort_unstable_by_key(len);
            if let Some((&head, others)) = own.split_first() {
                heads.push(head);
                rest.extend_from_slice(others);
            }
        }
        if !any {
            return None;
        }
        heads.sort_unstable_by_key(len);
        heads.dedup();
        rest.sort_unstable_by_key(len);
        rest.dedup();
        rest.retain(|i| !heads.contains(i));
        heads.extend(rest);
        Some(Lists {
            postings: self,
            ids: heads,
        })
    }

    /// The rows whose names may contain every needle (ignoring ASCII case),
    /// in increasing order; `None` when no needle has 3 bytes.
    pub fn rows_containing(&self, needles: &[&[u8]]) -> Option<Vec<u32>> {
        self.lists(needles).map(|l| l.rows())
    }

    fn decode(&self, i: usize) -> Vec<u32> {
        let (start, end) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        let mut out = Vec::with_capacity(self.lens[i] as usize);
        let (mut row, mut v, mut shift) = (0u32, 0u32, 0u32);
        for &b in &self.bytes[start..end] {
            v |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                row = row.wrapping_add(v);
                out.push(row);
                (v, shift) = (0, 0);
            } else {
                shift += 7;
            }
        }
        out
    }

    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.keys.capacity() * 4
            + self.offsets.capacity() * 4
            + self.lens.capacity() * 4
            + self.bytes.capacity()
    }
}

/// The posting lists one query needs, in the order of
/// [`TrigramPostings::lists`] (the shortest of all first); empty when some
/// trigram is in no name.
pub struct Lists<'a> {
    postings: &'a TrigramPostings,
    ids: Vec<usize>,
}

impl Lists<'_> {
    /// Rows in the shortest list: an upper bound on the rows matched.
    pub fn shortest(&self) -> usize {
        self.ids
            .first()
            .map_or(0, |&i| self.postings.lens[i] as usize)
    }

    /// The intersection of the first two lists (the shortest lists of two
    /// needles, or of one needle the two shortest: they narrow the most for
    /// the least decoding), in increasing order.
    pub fn rows(&self) -> Vec<u32> {
        let Some((&first, rest)) = self.ids.split_first() else {
            return Vec::new();
        };
        let mut rows = self.postings.decode(first);
        if let Some(&second) = rest.first() {
            let other = self.postings.decode(second);
            let mut j = 0;
            rows.retain(|r| {
                while j < other.len() && other[j] < *r {
                    j += 1;
                }
                other.get(j) == Some(r)
            });
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::index::contains_ci;
    use proptest::prelude::*;

    proptest! {
        /// Every row whose name holds every needle is returned, in order,
        /// without duplicates; absent trigrams give nothing.
        #[test]
        fn no_false_negatives(
            names in prop::collection::vec(
                (0u32..300, prop::collection::vec(prop::sample::select(b"abcAB.x_".to_vec()), 0..12)),
                0..80,
            ),
            needles in prop::collection::vec(
                prop::collection::vec(prop::sample::select(b"abcAB.x_z".to_vec()), 0..5),
                1..3,
            ),
        ) {
            let p = TrigramPostings::build(names.iter().map(|(r, n)| (*r, &n[..])));
            let needles: Vec<&[u8]> = needles.iter().map(|n| &n[..]).collect();
            let got = p.rows_containing(&needles);
            if needles.iter().all(|n| n.len() < 3) {
                prop_assert!(got.is_none());
                return Ok(());
            }
            let got = got.unwrap();
            prop_assert!(got.windows(2).all(|w| w[0] < w[1]));
            for (row, name) in &names {
                if needles.iter().all(|n| contains_ci(name, n)) {
                    prop_assert!(got.contains(row), "row {} {:?}", row, name);
                }
            }
            // Every returned row has a name with the rarest trigrams.
            for r in &got {
                prop_assert!(names.iter().any(|(row, _)| row == r));
            }
            let est = p.lists(&needles).unwrap().shortest();
            prop_assert!(got.len() <= est);
        }
    }

    #[test]
    fn large_row_numbers_and_case() {
        let p = TrigramPostings::build([
            (5u32, &b"Makefile"[..]),
            (70_000, b"makefile.am"),
            (u32::MAX, b"MAKE"),
        ]);
        assert_eq!(p.rows_containing(&[b"makef"]), Some(vec![5, 70_000]));
        assert_eq!(
            p.rows_containing(&[b"MAK"]),
            Some(vec![5, 70_000, u32::MAX])
        );
        assert_eq!(p.rows_containing(&[b"zzz"]), Some(vec![]));
        assert_eq!(p.rows_containing(&[b"ma"]), None);
        assert!(p.memory_bytes() > 0);
    }

    /// With two needles, the lists read first are one of each: the
    /// shortest list of each needle (its own other lists overlap it).
    #[test]
    fn the_first_two_lists_come_from_two_needles() {
        // "vel" and "elo" are in the same 40 names, ".er" in 30 others and
        // in 3 of them; "err" everywhere ".er" is.
        let mut names: Vec<(u32, Vec<u8>)> = Vec::new();
        for r in 0..40u32 {
            let ext = if r < 3 { "err" } else { "dat" };
            names.push((r, format!("velo{r}.{ext}").into_bytes()));
        }
        for r in 40..70u32 {
            names.push((r, format!("mesh{r}.err").into_bytes()));
        }
        let p = TrigramPostings::build(names.iter().map(|(r, n)| (*r, &n[..])));
        let lists = p.lists(&[b"velo", b".err"]).unwrap();
        assert_eq!(lists.shortest(), 33);
        assert_eq!(lists.rows(), vec![0, 1, 2]);
        assert_eq!(p.lists(&[b"velo"]).unwrap().rows().len(), 40);
    }
}
