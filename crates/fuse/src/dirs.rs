//! Open directory handles and the entries read ahead for each.
//!
//! A kernel READDIR buffer holds ~100 names (4 KiB), so a listing is many
//! READDIR requests. Each handle keeps the last batch it fetched from the
//! server (up to [`BATCH`] entries, one round trip), and answers the
//! following READDIRs from it while the kernel asks for the offsets it
//! holds.
//!
//! A READDIRPLUS batch keeps each entry's attributes too, with the cache
//! epoch they were read at: a later reply from the buffer hands them to
//! the kernel only if no change elsewhere came since (else the names
//! alone, which the kernel looks up).
//!
//! Invariants:
//! - A buffer holds the entries after cookie `after`, in cookie order, as
//!   the server returned them, and whether the server said the directory
//!   ends with them (`DirEntries.end`). Past its last entry the buffer
//!   answers "no more" (an empty reply) only if the server said so; else
//!   the server is asked again (an empty answer is the end), so a server
//!   that predates the flag, or returns short batches mid-directory, is
//!   still read whole. A listing that fits one batch is one server request.
//! - Cookies 1 and 2 are `.` and `..`, never a name's (the engine's start
//!   at 256): after cookie 2 is where after 0 is.
//! - Offset 0 (a fresh listing or `rewinddir`) is never answered from the
//!   buffer, so every listing starts with what the server has now. Later
//!   offsets may be answered from entries read earlier in the same listing:
//!   POSIX leaves unspecified whether names added or removed since
//!   `opendir`/`rewinddir` are seen.

use parking_lot::Mutex;
use sextant_engine::DirEntry;
use sextant_types::Attr;
use std::collections::HashMap;

/// Entries asked of the server per round trip (the protocol's maximum,
/// `READDIR_MAX`; a server may return fewer).
pub const BATCH: usize = 1024;

/// Entries handed to one READDIR reply at most (a reply stops when the
/// kernel's buffer is full; this bounds the copying).
pub const REPLY_MAX: usize = 512;

/// Entries handed to one READDIRPLUS reply at most: each takes a node
/// reference, released again if it does not fit (an entry with its
/// attributes is ~150 bytes; the kernel's buffer is 4 KiB to 128 KiB).
pub const PLUS_REPLY_MAX: usize = 256;

/// An entry as listed, with its attributes if they came with it.
pub type Listed = (DirEntry, Option<Attr>);

#[derive(Debug)]
struct Buffer {
    after: u64,
    entries: Vec<Listed>,
    /// The server said no entry follows the last of `entries`.
    end: bool,
    /// The cache epoch the attributes were read at (see the module docs).
    epoch: u64,
}

#[derive(Debug, Default)]
struct Inner {
    next_fh: u64,
    open: HashMap<u64, Option<Buffer>>,
}

/// The open directory handles of a mount.
#[derive(Debug, Default)]
pub struct DirHandles {
    inner: Mutex<Inner>,
}

impl DirHandles {
    /// A new handle (never 0, never reused).
    pub fn open(&self) -> u64 {
        let mut g = self.inner.lock();
        g.next_fh += 1;
        let fh = g.next_fh;
        g.open.insert(fh, None);
        fh
    }

    pub fn release(&self, fh: u64) {
        self.inner.lock().open.remove(&fh);
    }

    /// The entries after `offset` from `fh`'s buffer (at most
    /// [`REPLY_MAX`]; none when `offset` is the buffer's last and the
    /// directory ends there), or `None` when the buffer cannot say what
    /// follows `offset` and the server must be asked. Attributes are kept only if
    /// they were read at cache epoch `epoch` (see the module docs).
    pub fn cached(&self, fh: u64, offset: u64, epoch: u64) -> Option<Vec<Listed>> {
        if offset == 0 {
            return None;
        }
        let g = self.inner.lock();
        let b = g.open.get(&fh)?.as_ref()?;
        let start = if offset == b.after || (offset == 2 && b.after == 0) {
            0
        } else {
            b.entries.iter().position(|(e, _)| e.cookie == offset)? + 1
        };
        if start == b.entries.len() && !b.end {
            return None;
        }
        let end = b.entries.len().min(start + REPLY_MAX);
        let fresh = b.epoch == epoch;
        Some(
            b.entries[start..end]
                .iter()
                .map(|(e, a)| (e.clone(), a.clone().filter(|_| fresh)))
                .collect(),
        )
    }

    /// Keeps a batch fetched for `fh` (the entries after `after`, their
    /// attributes read at cache epoch `epoch`; `end`: the server said the
    /// directory ends with them) and returns the part for one reply.
    pub fn fill(
        &self,
        fh: u64,
        after: u64,
        entries: Vec<Listed>,
        end: bool,
        epoch: u64,
    ) -> Vec<Listed> {
        let reply = entries[..entries.len().min(REPLY_MAX)].to_vec();
        let mut g = self.inner.lock();
        if let Some(slot) = g.open.get_mut(&fh) {
            *slot = Some(Buffer {
                after,
                entries,
                end,
                epoch,
            });
        }
        reply
    }

    /// Open handles (for tests).
    pub fn len(&self) -> usize {
        self.inner.lock().open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::{FileType, Soid};

    fn entries(cookies: impl IntoIterator<Item = u64>) -> Vec<Listed> {
        cookies
            .into_iter()
            .map(|c| {
                let e = DirEntry {
                    name: format!("f{c}").into_bytes().into_boxed_slice(),
                    soid: Soid::from_u128(c as u128),
                    ftype: FileType::Regular,
                    cookie: c,
                };
                (e, None)
            })
            .collect()
    }

    fn cookies(e: &[Listed]) -> Vec<u64> {
        e.iter().map(|(e, _)| e.cookie).collect()
    }

    #[test]
    fn a_full_batch_is_served_in_pieces_then_refetched() {
        let d = DirHandles::default();
        let fh = d.open();
        assert!(
            d.cached(fh, 0, 0).is_none(),
            "offset 0 always asks the server"
        );
        let batch = entries(256..256 + BATCH as u64);
        let first = d.fill(fh, 0, batch, false, 0);
        assert_eq!(first.len(), REPLY_MAX);
        assert_eq!(cookies(&d.cached(fh, 355, 0).unwrap())[0], 356);
        let last = 256 + BATCH as u64 - 1;
        assert!(
            d.cached(fh, last, 0).is_none(),
            "past the buffer: ask the server"
        );
        assert!(d.cached(fh, 7, 0).is_none(), "an offset not in the buffer");
        let tail = d.fill(fh, last, entries([last + 1, last + 2]), false, 0);
        assert_eq!(cookies(&tail), vec![last + 1, last + 2]);
        assert_eq!(
            cookies(&d.cached(fh, last, 0).unwrap()),
            vec![last + 1, last + 2]
        );
        assert_eq!(cookies(&d.cached(fh, last + 1, 0).unwrap()), vec![last + 2]);
        assert!(
            d.cached(fh, last + 2, 0).is_none(),
            "the end is the server's to say"
        );
    }

    /// Attributes from the buffer only while nothing changed elsewhere
    /// since they were read.
    #[test]
    fn buffered_attributes_go_stale_when_the_epoch_moves() {
        let d = DirHandles::default();
        let fh = d.open();
        let mut batch = entries([256, 257, 258]);
        for (e, a) in batch.iter_mut() {
            *a = Some(Attr {
                soid: e.soid,
                ftype: FileType::Regular,
                perm: 0o644,
                uid: 0,
                gid: 0,
                nlink: 1,
                size: 0,
                rdev: 0,
                atime: sextant_types::Nanos(0),
                mtime: sextant_types::Nanos(0),
                ctime: sextant_types::Nanos(0),
                parent: Soid::ROOT,
                no_xattrs: false,
            });
        }
        let first = d.fill(fh, 0, batch, false, 7);
        assert!(first.iter().all(|(_, a)| a.is_some()));
        let same = d.cached(fh, 256, 7).unwrap();
        assert_eq!(cookies(&same), vec![257, 258]);
        assert!(same.iter().all(|(_, a)| a.is_some()), "same epoch: kept");
        let moved = d.cached(fh, 256, 8).unwrap();
        assert_eq!(cookies(&moved), vec![257, 258], "the names stay");
        assert!(
            moved.iter().all(|(_, a)| a.is_none()),
            "epoch moved: dropped"
        );
    }

    /// A batch the server said ends the directory answers the READDIR past
    /// its last entry with nothing; one that did not (an old server, a
    /// full batch) sends it to the server.
    #[test]
    fn the_end_is_answered_from_the_buffer_only_when_the_server_said_it() {
        let d = DirHandles::default();
        let fh = d.open();
        d.fill(fh, 0, entries([256, 257]), true, 0);
        assert_eq!(cookies(&d.cached(fh, 256, 0).unwrap()), vec![257]);
        assert_eq!(d.cached(fh, 257, 0).unwrap().len(), 0, "the end");
        assert!(
            d.cached(fh, 300, 0).is_none(),
            "an offset not in the buffer"
        );
        assert!(d.cached(fh, 0, 0).is_none(), "offset 0 always asks");
        assert_eq!(
            cookies(&d.cached(fh, 2, 0).unwrap()),
            vec![256, 257],
            "after `..` is after 0"
        );
        let empty = d.open();
        d.fill(empty, 0, Vec::new(), true, 0);
        assert_eq!(
            d.cached(empty, 2, 0).unwrap().len(),
            0,
            "an empty directory"
        );
        let old = d.open();
        d.fill(old, 0, entries([256, 257]), false, 0);
        assert!(d.cached(old, 257, 0).is_none(), "no flag: ask the server");
    }

    #[test]
    fn released_and_unknown_handles_cache_nothing() {
        let d = DirHandles::default();
        let fh = d.open();
        d.fill(fh, 0, entries([256, 257]), false, 0);
        assert_eq!(cookies(&d.cached(fh, 256, 0).unwrap()), vec![257]);
        d.release(fh);
        assert!(d.cached(fh, 256, 0).is_none());
        assert_eq!(cookies(&d.fill(fh, 0, entries([256]), false, 0)), vec![256]);
        assert!(
            d.cached(fh, 256, 0).is_none(),
            "a released handle keeps nothing"
        );
        assert!(d.is_empty());
        assert_ne!(d.open(), fh, "handles are not reused");
    }
}
