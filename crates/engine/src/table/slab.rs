//! The row slab of a table: inodes by row id, in fixed-size chunks.
//!
//! Hand-written because it is the bulk of the engine's memory: a plain
//! `Vec` doubles its capacity as it grows (a quarter of it unused on
//! average, and twice the table at the moment it grows), while chunks of
//! [`CHUNK`] rows waste at most part of one chunk per table. A slab built
//! at once ([`RowSlab::from_rows`]) allocates exactly.
//!
//! Invariant: every chunk but the last holds exactly [`CHUNK`] rows; row id
//! `r` is `chunks[r / CHUNK][r % CHUNK]`.

use crate::inode::Inode;
use sextant_types::Soid;

/// Rows per chunk (256 × 112 bytes ≈ 28 KiB: well under malloc's mmap
/// threshold, so freed chunks are reused rather than returned and mapped).
pub const CHUNK: usize = 256;

/// A live row: the inode's SOID and the inode. `None` marks a free row.
pub type Row = Option<(Soid, Inode)>;

#[derive(Debug, Default)]
pub struct RowSlab {
    chunks: Vec<Vec<Row>>,
    len: usize,
}

impl RowSlab {
    /// A slab holding exactly `rows`, row id = position.
    pub fn from_rows(rows: impl ExactSizeIterator<Item = (Soid, Inode)>) -> RowSlab {
        let len = rows.len();
        let mut chunks: Vec<Vec<Row>> = Vec::with_capacity(len.div_ceil(CHUNK));
        for row in rows {
            match chunks.last_mut() {
                Some(c) if c.len() < CHUNK => c.push(Some(row)),
                _ => {
                    let left = len - chunks.len() * CHUNK;
                    let mut c = Vec::with_capacity(left.min(CHUNK));
                    c.push(Some(row));
                    chunks.push(c);
                }
            }
        }
        RowSlab { chunks, len }
    }

    /// Number of rows, live or free.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, row: u32) -> Option<&(Soid, Inode)> {
        let r = row as usize;
        self.chunks.get(r / CHUNK)?.get(r % CHUNK)?.as_ref()
    }

    /// The slot of an existing row id (live or free).
    pub fn slot_mut(&mut self, row: u32) -> Option<&mut Row> {
        let r = row as usize;
        self.chunks.get_mut(r / CHUNK)?.get_mut(r % CHUNK)
    }

    /// Appends a row and returns its id.
    pub fn push(&mut self, row: (Soid, Inode)) -> u32 {
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => {
                if c.len() == c.capacity() {
                    // An exactly sized last chunk grows once, to a full one.
                    c.reserve_exact(CHUNK - c.len());
                }
                c.push(Some(row));
            }
            _ => {
                let mut c = Vec::with_capacity(CHUNK);
                c.push(Some(row));
                self.chunks.push(c);
            }
        }
        self.len += 1;
        (self.len - 1) as u32
    }

    /// Live rows with their ids, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &(Soid, Inode))> + '_ {
        self.chunks
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i as u32, r)))
    }

    /// Takes every live row out with its id, in id order, leaving the
    /// slab empty.
    pub fn drain_with_ids(&mut self) -> impl Iterator<Item = (u32, Soid, Inode)> {
        self.len = 0;
        std::mem::take(&mut self.chunks)
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, r)| r.map(|(s, ino)| (i as u32, s, ino)))
    }

    /// Bytes allocated for rows.
    pub fn allocated_bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.capacity()).sum::<usize>() * std::mem::size_of::<Row>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inode::Name;
    use sextant_types::{FileType, Nanos};

    fn inode(n: u8) -> Inode {
        Inode {
            ftype: FileType::Regular,
            perm: 0o644,
            uid: n as u32,
            gid: 0,
            nlink: 1,
            size: 0,
            atime: Nanos(0),
            mtime: Nanos(0),
            ctime: Nanos(0),
            parent: Soid::ROOT,
            name: Name::new(&[b'a' + n % 26]),
            extra: None,
        }
    }

    #[test]
    fn exact_build_then_push_keeps_ids() {
        for n in [0usize, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7] {
            let rows = (0..n).map(|i| (Soid::from_u128(i as u128), inode(i as u8)));
            let mut s = RowSlab::from_rows(rows);
            assert_eq!(s.len(), n);
            assert_eq!(s.allocated_bytes(), n * std::mem::size_of::<Row>());
            for i in 0..n {
                assert_eq!(
                    s.get(i as u32).map(|r| r.0),
                    Some(Soid::from_u128(i as u128))
                );
            }
            for i in n..n + CHUNK + 3 {
                let id = s.push((Soid::from_u128(i as u128), inode(1)));
                assert_eq!(id as usize, i);
            }
            assert_eq!(s.iter().count(), n + CHUNK + 3);
            assert!(s.get((n + CHUNK + 3) as u32).is_none());
            *s.slot_mut(0).unwrap() = None;
            assert!(s.get(0).is_none());
            let drained: Vec<u32> = s.drain_with_ids().map(|(r, _, _)| r).collect();
            assert_eq!(drained, (1..(n + CHUNK + 3) as u32).collect::<Vec<_>>());
            assert_eq!(s.len(), 0);
        }
    }
}
