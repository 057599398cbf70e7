//! A table's search index: a K-D tree over inode attributes and the Bloom
//! filters (Magellan §4.2–4.3), rebuilt on write-back, plus the rows changed
//! since the rebuild, which queries scan directly.
//!
//! Invariant: every live row is either in the tree (and then unchanged since
//! the build, so its coordinates are the ones the tree was built from) or
//! marked changed. Filters describe exactly the rows in the tree.

/// See the module docs.
#[derive(Debug, Default, Clone)]
pub struct TableIndex {
    /// One bit per slab row: changed since the last rebuild.
    changed: Vec<u64>,
    changed_count: usize,
}

impl TableIndex {
    /// Stand-in until the real index lands: an index with every row
    /// "changed", so queries scan everything (correct, not fast).
    pub fn rebuild(table: &crate::table::Table) -> TableIndex {
        let mut idx = TableIndex::default();
        for row in 0..table.row_capacity() as u32 {
            idx.row_changed(row);
        }
        idx
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

    pub fn is_changed(&self, row: u32) -> bool {
        let (w, b) = ((row / 64) as usize, row % 64);
        self.changed.get(w).is_some_and(|x| x & (1 << b) != 0)
    }

    pub fn changed_count(&self) -> usize {
        self.changed_count
    }

    pub fn memory_bytes(&self) -> usize {
        self.changed.capacity() * 8
    }
}
