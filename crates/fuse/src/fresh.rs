//! Directories this mount made, and every name it has put in them since:
//! a lookup of any other name there is "no such name" without a server
//! call.
//!
//! Before each create the kernel looks the new name up (a LOOKUP that
//! fails): for tar x or cp -a into a new tree, one failing server call per
//! entry (docs/BENCHMARKS.md, issue 23). A directory made by this mount
//! starts empty, and while no other client changes anything every name in
//! it came from this mount.
//!
//! Invariants (the epoch rules of [`crate::dirattrs`]):
//! - A directory is known only within the epoch of changes made
//!   elsewhere in which it was made (`SextantFs::elsewhere_epoch`): the
//!   watcher moves it before it applies any other client's change. A
//!   mkdir whose request saw it move teaches nothing. (This mount's own
//!   renames do not move it: they record the names they put.)
//! - Every name this mount may add to a known directory (create, mknod,
//!   mkdir, symlink, link, a rename's new name) is recorded before its
//!   request is sent; a name
//!   recorded is never answered from here (removals are not tracked: the
//!   server answers those names).
//! - Only when the kernel's caches are coherent and every change stream
//!   is open (`SextantFs::live`): before the first stream opens, or while
//!   one is broken, nothing would move the epoch for a change elsewhere.
//! - Bounded: at most [`MAX_DIRS`] directories, [`MAX_NAMES`] names
//!   each and [`MAX_TOTAL_NAMES`] in all; past that a directory (or all)
//!   is forgotten. The bounds hold a whole Postmark run in Magellan's
//!   setting (20,000 directories, ~55,000 files): with 4,096 directories
//!   all were forgotten every 4,096 mkdirs, and most of its creates paid
//!   a failing server lookup (docs/BENCHMARKS.md, issue 23 Postmark).
//! - A name is also known to hold a non-directory (and which) once the
//!   reply to the request that put it there came ([`FreshDirs::put_file`]),
//!   until the next request that may change what it holds
//!   ([`FreshDirs::naming`]): a rename of it then changes no directory's
//!   `..` (`SextantFs::rename`).
//! - Pure bookkeeping: no I/O.

use parking_lot::Mutex;
use sextant_types::Soid;
use std::collections::HashMap;

/// Most directories known at once (~70 bytes each when empty).
pub const MAX_DIRS: usize = 65536;
/// Most names recorded in one directory.
pub const MAX_NAMES: usize = 65536;
/// Most names recorded in all directories together (~70 bytes each).
pub const MAX_TOTAL_NAMES: usize = 1 << 18;

struct Dir {
    epoch: u64,
    /// Names put here; `Some`: the non-directory it holds.
    names: HashMap<Box<[u8]>, Option<Soid>>,
}

#[derive(Default)]
struct Known {
    dirs: HashMap<u64, Dir>,
    /// The names of all `dirs` together.
    names: usize,
}

impl Known {
    fn remove(&mut self, dir: u64) {
        if let Some(d) = self.dirs.remove(&dir) {
            self.names -= d.names.len();
        }
    }

    fn clear(&mut self) {
        self.dirs.clear();
        self.names = 0;
    }
}

/// See the module docs.
#[derive(Default)]
pub struct FreshDirs {
    known: Mutex<Known>,
}

impl FreshDirs {
    /// Directory `ino` was made by a mkdir sent at epoch `sent`; `now` is
    /// the epoch when its reply came.
    pub fn made(&self, ino: u64, sent: u64, now: u64) {
        if sent != now {
            return;
        }
        let mut known = self.known.lock();
        // A node id reused: its old names go.
        known.remove(ino);
        if known.dirs.len() >= MAX_DIRS {
            known.clear();
        }
        known.dirs.insert(
            ino,
            Dir {
                epoch: now,
                names: HashMap::new(),
            },
        );
    }

    /// `name` may exist in `dir` from now on (called before the request
    /// that may make it is sent).
    pub fn naming(&self, dir: u64, name: &[u8]) {
        let mut known = self.known.lock();
        let total = known.names;
        let Some(d) = known.dirs.get_mut(&dir) else {
            return;
        };
        if d.names.len() >= MAX_NAMES {
            known.remove(dir);
        } else if d.names.insert(Box::from(name), None).is_none() {
            known.names += 1;
            if total + 1 > MAX_TOTAL_NAMES {
                known.clear();
            }
        }
    }

    /// The request that put `name` in `dir` (after [`FreshDirs::naming`])
    /// made it a non-directory, `soid`.
    pub fn put_file(&self, dir: u64, name: &[u8], soid: Soid) {
        if let Some(d) = self.known.lock().dirs.get_mut(&dir) {
            if let Some(held) = d.names.get_mut(name) {
                *held = Some(soid);
            }
        }
    }

    /// The non-directory this mount put at `name` in `dir`, if known at
    /// epoch `now`.
    pub fn file_at(&self, dir: u64, name: &[u8], now: u64) -> Option<Soid> {
        let known = self.known.lock();
        let d = known.dirs.get(&dir).filter(|d| d.epoch == now)?;
        d.names.get(name).copied().flatten()
    }

    /// Is `name` known not to exist in `dir` at epoch `now`?
    pub fn absent(&self, dir: u64, name: &[u8], now: u64) -> bool {
        let mut known = self.known.lock();
        match known.dirs.get(&dir) {
            Some(d) if d.epoch == now => !d.names.contains_key(name),
            Some(_) => {
                known.remove(dir);
                false
            }
            None => false,
        }
    }

    /// Directories known (for tests).
    pub fn len(&self) -> usize {
        self.known.lock().dirs.len()
    }

    /// Names recorded in all directories (for tests).
    pub fn names(&self) -> usize {
        self.known.lock().names
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_made_here_are_never_answered_absent() {
        let f = FreshDirs::default();
        f.made(9, 1, 1);
        assert!(f.absent(9, b"a", 1));
        f.naming(9, b"a");
        assert!(!f.absent(9, b"a", 1));
        assert!(f.absent(9, b"b", 1));
        assert!(!f.absent(8, b"b", 1), "a directory not made here");
    }

    #[test]
    fn a_file_put_here_is_known_until_its_name_may_change() {
        let f = FreshDirs::default();
        let s = Soid::from_u128(5);
        f.made(9, 1, 1);
        f.put_file(9, b"a", s);
        assert_eq!(f.file_at(9, b"a", 1), None, "not named first: not taken");
        f.naming(9, b"a");
        assert_eq!(f.file_at(9, b"a", 1), None, "no reply yet");
        f.put_file(9, b"a", s);
        assert_eq!(f.file_at(9, b"a", 1), Some(s));
        assert_eq!(f.file_at(9, b"a", 2), None, "the epoch moved");
        f.naming(9, b"a");
        assert_eq!(f.file_at(9, b"a", 1), None, "a request may change it");
        f.put_file(8, b"a", s);
        assert_eq!(f.file_at(8, b"a", 1), None, "a directory not made here");
    }

    #[test]
    fn only_within_the_epoch_of_the_mkdir() {
        let f = FreshDirs::default();
        f.made(9, 1, 2);
        assert!(!f.absent(9, b"a", 2), "the epoch moved during the mkdir");
        f.made(9, 2, 2);
        assert!(!f.absent(9, b"a", 3), "the epoch moved after");
        assert!(f.is_empty());
    }

    /// Postmark in Magellan's setting makes 20,000 directories, then
    /// creates files in them at random: each create's failing lookup is
    /// answered here only if its directory is still known.
    #[test]
    fn twenty_thousand_directories_stay_known() {
        let f = FreshDirs::default();
        for i in 0..20_000u64 {
            f.made(i, 1, 1);
        }
        for i in 0..55_000u64 {
            let dir = (i * 7919) % 20_000;
            let n = format!("f{i}");
            assert!(f.absent(dir, n.as_bytes(), 1), "directory {dir}");
            f.naming(dir, n.as_bytes());
        }
        assert_eq!(f.len(), 20_000);
        assert_eq!(f.names(), 55_000);
    }

    #[test]
    fn all_names_together_bounded() {
        let f = FreshDirs::default();
        let per_dir = MAX_TOTAL_NAMES / 8;
        for d in 0..9u64 {
            f.made(d, 1, 1);
            for i in 0..per_dir {
                f.naming(d, format!("{i}").as_bytes());
            }
            assert!(f.names() <= MAX_TOTAL_NAMES);
        }
        // Past the bound everything was forgotten (the last directory
        // too: its later names are not recorded).
        assert_eq!(f.names(), 0);
        assert!(f.is_empty());
        assert!(!f.absent(0, b"x", 1), "forgotten: the server answers");
        // Re-recording a name counts it once; a removed directory's names
        // leave the count.
        f.made(100, 1, 1);
        let before = f.names();
        f.naming(100, b"a");
        f.naming(100, b"a");
        assert_eq!(f.names(), before + 1);
        f.made(100, 1, 1);
        assert_eq!(f.names(), before, "remade: its old names went");
        assert!(f.absent(100, b"a", 1));
    }

    #[test]
    fn bounded() {
        let f = FreshDirs::default();
        for i in 0..(MAX_DIRS as u64 + 10) {
            f.made(i, 1, 1);
        }
        assert!(f.len() <= MAX_DIRS);
        f.made(1, 1, 1);
        for i in 0..(MAX_NAMES + 1) {
            f.naming(1, format!("{i}").as_bytes());
        }
        assert!(!f.absent(1, b"x", 1), "too many names: forgotten");
    }
}
