//! The file handles open for writing through this mount, and who holds
//! each: the process (the kernel's thread id) that opened it, and whether
//! it closed it (FLUSH) since its last write.
//!
//! A size change through one of them (`ftruncate`) was permitted at its
//! open (`Client::setattr_with`); attribute changes are held
//! ([`crate::held`]) only for the process that opened a handle of the file
//! and only until that close: a change made after it must reach the
//! server before its call returns, even while the kernel's RELEASE of the
//! handle is still on its way. Every close of the file sends what is held
//! (close-to-open): another thread's close of the writer's descriptor
//! while a copy stays open, a child's close of its copy; only the writer's
//! own close ends the holding.
//!
//! Invariant: `by_file` is `handles` indexed by file — every handle is
//! listed once, under its own file, and no list is empty — so asking
//! whether a process writes a file ([`WriteHandles::writing`], every
//! chmod, chown and utimes) costs the handles of that file, not all of
//! this mount's (`tar x` of thousands of files keeps thousands open when
//! its output is piped or the kernel's RELEASE lags). Pure bookkeeping:
//! no I/O.

use sextant_types::Soid;
use std::collections::HashMap;

/// Who holds a write handle (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writer {
    pub soid: Soid,
    pub pid: u32,
    pub flushed: bool,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct WriteHandles {
    handles: HashMap<u64, Writer>,
    by_file: HashMap<Soid, Vec<u64>>,
}

impl WriteHandles {
    /// Handle `fh` of `soid` was opened for writing by process `pid`.
    pub fn opened(&mut self, fh: u64, soid: Soid, pid: u32) {
        let writer = Writer {
            soid,
            pid,
            flushed: false,
        };
        if let Some(old) = self.handles.insert(fh, writer) {
            // A handle number reused before its release was seen.
            self.unindex(fh, old.soid);
        }
        self.by_file.entry(soid).or_default().push(fh);
    }

    /// Whether `fh` is a handle open for writing.
    pub fn contains(&self, fh: u64) -> bool {
        self.handles.contains_key(&fh)
    }

    /// A write through `fh`: its writer has not closed it since.
    pub fn wrote(&mut self, fh: u64) {
        if let Some(w) = self.handles.get_mut(&fh) {
            w.flushed = false;
        }
    }

    /// A close (FLUSH) of `fh` by process `pid`: whether it was its
    /// writer's (who then has closed it).
    pub fn flushed(&mut self, fh: u64, pid: u32) -> bool {
        match self.handles.get_mut(&fh) {
            Some(w) if w.pid == pid => {
                w.flushed = true;
                true
            }
            _ => false,
        }
    }

    /// `fh` is released: no longer open.
    pub fn released(&mut self, fh: u64) {
        if let Some(w) = self.handles.remove(&fh) {
            self.unindex(fh, w.soid);
        }
    }

    /// Is `soid` open for writing by process `pid`, not closed by it since
    /// its last write?
    pub fn writing(&self, soid: Soid, pid: u32) -> bool {
        self.by_file.get(&soid).is_some_and(|fhs| {
            fhs.iter().any(|fh| {
                self.handles
                    .get(fh)
                    .is_some_and(|w| w.pid == pid && !w.flushed)
            })
        })
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    fn unindex(&mut self, fh: u64, soid: Soid) {
        if let Some(fhs) = self.by_file.get_mut(&soid) {
            fhs.retain(|f| *f != fh);
            if fhs.is_empty() {
                self.by_file.remove(&soid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What [`WriteHandles::writing`] answered before the index: a scan of
    /// every handle.
    fn scan(w: &WriteHandles, soid: Soid, pid: u32) -> bool {
        w.handles
            .values()
            .any(|h| h.soid == soid && h.pid == pid && !h.flushed)
    }

    /// The index is the handles grouped by file, each once, no empty list.
    fn consistent(w: &WriteHandles) -> Result<(), TestCaseError> {
        let mut listed = 0;
        for (soid, fhs) in &w.by_file {
            prop_assert!(!fhs.is_empty(), "empty list for {soid:?}");
            for fh in fhs {
                prop_assert_eq!(w.handles.get(fh).map(|h| h.soid), Some(*soid));
            }
            listed += fhs.len();
        }
        prop_assert_eq!(listed, w.handles.len());
        Ok(())
    }

    #[derive(Debug, Clone)]
    enum Op {
        Open { fh: u64, file: u8, pid: u32 },
        Write { fh: u64 },
        Flush { fh: u64, pid: u32 },
        Release { fh: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few handles, files and processes: they collide, handles are
        // reused, closed by others, released twice or never opened.
        prop_oneof![
            (0..8u64, 0..4u8, 0..3u32).prop_map(|(fh, file, pid)| Op::Open { fh, file, pid }),
            (0..8u64).prop_map(|fh| Op::Write { fh }),
            (0..8u64, 0..3u32).prop_map(|(fh, pid)| Op::Flush { fh, pid }),
            (0..8u64).prop_map(|fh| Op::Release { fh }),
        ]
    }

    proptest! {
        /// Opens, writes, closes and releases in any order: the index
        /// stays the handles grouped by file, and `writing` answers what a
        /// scan of every handle answers.
        #[test]
        fn the_index_answers_what_a_scan_answers(ops in prop::collection::vec(op(), 0..60)) {
            let mut w = WriteHandles::default();
            for op in ops {
                match op {
                    Op::Open { fh, file, pid } => {
                        w.opened(fh, Soid::from_u128(file as u128 + 1), pid)
                    }
                    Op::Write { fh } => w.wrote(fh),
                    Op::Flush { fh, pid } => {
                        let writers = w.handles.get(&fh).is_some_and(|h| h.pid == pid);
                        prop_assert_eq!(w.flushed(fh, pid), writers);
                    }
                    Op::Release { fh } => w.released(fh),
                }
                consistent(&w)?;
                for file in 0..5u128 {
                    for pid in 0..4u32 {
                        let soid = Soid::from_u128(file + 1);
                        prop_assert_eq!(w.writing(soid, pid), scan(&w, soid, pid));
                    }
                }
            }
        }
    }

    /// Thousands of files open: a file's question looks at its own
    /// handles only (the others are not even in its list).
    #[test]
    fn thousands_open_each_file_lists_its_own() {
        let mut w = WriteHandles::default();
        for fh in 0..5000u64 {
            w.opened(fh, Soid::from_u128(fh as u128 % 2500 + 1), 7);
        }
        assert_eq!(w.len(), 5000);
        assert_eq!(w.by_file.len(), 2500);
        assert!(w.by_file.values().all(|fhs| fhs.len() == 2));
        assert!(w.writing(Soid::from_u128(1), 7));
        assert!(!w.writing(Soid::from_u128(1), 8));
        assert!(w.flushed(0, 7) && w.flushed(2500, 7));
        assert!(!w.writing(Soid::from_u128(1), 7));
        for fh in 0..5000u64 {
            w.released(fh);
        }
        assert!(w.is_empty() && w.by_file.is_empty());
    }
}
