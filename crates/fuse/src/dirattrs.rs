//! Directory (and file) attributes learned from this mount's own changes.
//!
//! Files too: a write makes the kernel drop a file's attributes, and its
//! next chown (set-ID check) or stat asks again; the reply to this
//! mount's last change of the file (a setattr, the size sent at flush or
//! release, a link) answers it, under the same rules (`fs` ends a change
//! of the file's node id with that reply).
//!
//! Each create or removal changes its directory's times (and, for
//! directories, its link count), so the kernel drops the directory's cached
//! attributes, and needs them again for its next permission check in the
//! directory (`default_permissions`): one GETATTR per create or removal.
//! The server's reply to a create, mkdir, unlink or rmdir carries the
//! directory's attributes right after the operation; this module keeps
//! them so that the GETATTR that follows is answered without the server.
//!
//! Invariants (what keeps a kept value from being stale):
//! - A value is used only while the cache epoch is the one it was stored
//!   under. The watcher ([`crate::watch`]) bumps the epoch for every batch
//!   of other clients' changes it applies, so a value can never outlive a
//!   change made elsewhere; and a value is stored only if the epoch did not
//!   move while its request was out (a change elsewhere may have come
//!   between the operation and the read of the directory).
//! - Values are stored only for a directory with one change of this mount
//!   in flight from start to end: when two overlap, the later reply may
//!   carry the older value, so neither is stored and the kept one is
//!   dropped.
//! - A value is used once (the kernel caches it from then on), and at most
//!   [`MAX_KEPT`] directories have state: past that, kept values are
//!   dropped (the kernel then asks the server, as without this module).
//!   The bound holds Postmark in Magellan's setting (20,000 directories,
//!   ~55,000 files, changed at random): at 4,096 everything kept was
//!   dropped every few thousand changes (docs/BENCHMARKS.md, issue 23
//!   Postmark).
//! - Pure bookkeeping: no I/O.
//!
//! Opens: the mount's own check of each open ([`crate::perms`]) and its
//! data layer need a file's attributes, which the open fetched from the
//! server every time. The last attributes seen of a file (from an open's
//! fetch, a create, a kept reply) are kept for the next opens too
//! ([`DirAttrs::last_seen`], used many times) under the rules above: only
//! while the cache epoch is the one they were stored under (no change made
//! elsewhere since: the watcher bumps it), dropped by any change of the
//! file through this mount ([`DirAttrs::begin`], [`DirAttrs::forget`]),
//! not stored or used while a change of it is in flight — and used only
//! while every change stream the watcher follows is open (`fs` asks
//! `watching`: a broken stream bumps the epoch once, and changes made
//! elsewhere until it reopens would not move it again).

use parking_lot::Mutex;
use sextant_types::Attr;
use std::collections::HashMap;

/// Most directories (and files) with state at once, and most files'
/// last seen attributes (each ~150 bytes with its map entry: ≤ ~20 MB
/// each when full).
pub const MAX_KEPT: usize = 1 << 17;

#[derive(Default)]
struct Dir {
    in_flight: u32,
    /// Another change of this directory started while one was in flight.
    overlapped: bool,
    /// Attributes and the epoch they belong to.
    kept: Option<(Attr, u64)>,
}

/// See the module docs.
#[derive(Default)]
pub struct DirAttrs {
    dirs: Mutex<HashMap<u64, Dir>>,
    /// Files' last seen attributes and their epoch, for opens.
    opens: Mutex<HashMap<u64, (Attr, u64)>>,
}

/// One change of a directory in flight (from [`DirAttrs::begin`]).
#[must_use = "end the change with DirAttrs::end"]
pub struct Change {
    ino: u64,
    epoch: u64,
}

impl DirAttrs {
    /// A change of directory `ino` is about to be sent; `epoch` is the
    /// cache epoch now.
    pub fn begin(&self, ino: u64, epoch: u64) -> Change {
        let mut dirs = self.dirs.lock();
        let d = dirs.entry(ino).or_default();
        if d.in_flight > 0 {
            d.overlapped = true;
        }
        d.in_flight += 1;
        d.kept = None;
        drop(dirs);
        self.opens.lock().remove(&ino);
        Change { ino, epoch }
    }

    /// The change ended; `dir` is the directory's attributes from the reply
    /// (`None`: it failed, or the reply had none), `epoch` the epoch now.
    pub fn end(&self, change: Change, dir: Option<Attr>, epoch: u64) {
        let mut dirs = self.dirs.lock();
        let Some(d) = dirs.get_mut(&change.ino) else {
            return;
        };
        d.in_flight = d.in_flight.saturating_sub(1);
        d.kept = match dir {
            Some(a) if !d.overlapped && epoch == change.epoch => Some((a, epoch)),
            _ => None,
        };
        if let (Some((a, e)), 0) = (&d.kept, d.in_flight) {
            self.keep_last_seen(change.ino, a.clone(), *e);
        }
        if d.in_flight == 0 {
            d.overlapped = false;
            if d.kept.is_none() {
                dirs.remove(&change.ino);
            }
        }
        if dirs.len() > MAX_KEPT {
            dirs.retain(|_, d| d.in_flight > 0);
        }
    }

    /// Keeps `attr`, the reply to the request that made the file `ino`
    /// (a create), sent at epoch `sent`; `now` is the epoch now. The
    /// kernel learns the node id from that reply, so no other change of
    /// it can have been in flight; a change started since (an
    /// overlapping [`DirAttrs::begin`]) or an epoch that moved keeps
    /// nothing. Its first write makes the kernel drop the attributes and
    /// ask again (git's fstat before close): the server would answer the
    /// same, as the data written is this mount's (its size is shown from
    /// here) and the server hears of it only at close.
    pub fn keep_made(&self, ino: u64, attr: Attr, sent: u64, now: u64) {
        if sent != now {
            return;
        }
        let mut dirs = self.dirs.lock();
        let d = dirs.entry(ino).or_default();
        if d.in_flight > 0 {
            return;
        }
        d.kept = Some((attr.clone(), now));
        if dirs.len() > MAX_KEPT {
            dirs.retain(|_, d| d.in_flight > 0);
        }
        drop(dirs);
        self.keep_last_seen(ino, attr, now);
    }

    /// File `ino`'s attributes as an open fetched them, the fetch sent at
    /// epoch `sent`; `now` is the epoch now. Kept for the next opens
    /// unless the epoch moved or a change of it is in flight.
    pub fn saw(&self, ino: u64, attr: Attr, sent: u64, now: u64) {
        if sent != now {
            return;
        }
        let in_flight = self.dirs.lock().get(&ino).is_some_and(|d| d.in_flight > 0);
        if !in_flight {
            self.keep_last_seen(ino, attr, now);
        }
    }

    fn keep_last_seen(&self, ino: u64, attr: Attr, epoch: u64) {
        let mut opens = self.opens.lock();
        if opens.len() >= MAX_KEPT && !opens.contains_key(&ino) {
            opens.clear();
        }
        opens.insert(ino, (attr, epoch));
    }

    /// The last attributes seen of file `ino`, for an open, if still good
    /// at `epoch` (no change of it in flight). Used any number of times.
    pub fn last_seen(&self, ino: u64, epoch: u64) -> Option<Attr> {
        if self.dirs.lock().get(&ino).is_some_and(|d| d.in_flight > 0) {
            return None;
        }
        let mut opens = self.opens.lock();
        match opens.get(&ino) {
            Some((a, e)) if *e == epoch => Some(a.clone()),
            Some(_) => {
                opens.remove(&ino);
                None
            }
            None => None,
        }
    }

    /// Directory `ino` is gone (or changed in a way not announced with
    /// [`DirAttrs::begin`]): drop what is kept for it.
    pub fn forget(&self, ino: u64) {
        self.opens.lock().remove(&ino);
        let mut dirs = self.dirs.lock();
        if let Some(d) = dirs.get_mut(&ino) {
            d.kept = None;
            if d.in_flight == 0 {
                dirs.remove(&ino);
            }
        }
    }

    /// The kept attributes of directory `ino`, if still good at `epoch`
    /// (used once).
    pub fn take(&self, ino: u64, epoch: u64) -> Option<Attr> {
        let mut dirs = self.dirs.lock();
        let d = dirs.get_mut(&ino)?;
        let kept = d.kept.take();
        if d.in_flight == 0 {
            dirs.remove(&ino);
        }
        kept.filter(|(_, e)| *e == epoch).map(|(a, _)| a)
    }

    /// Directories with state (for tests).
    pub fn len(&self) -> usize {
        self.dirs.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::{FileType, Nanos, Soid};

    fn attr(nlink: u32) -> Attr {
        Attr {
            soid: Soid::ROOT,
            ftype: FileType::Directory,
            perm: 0o755,
            uid: 0,
            gid: 0,
            nlink,
            size: 0,
            rdev: 0,
            atime: Nanos(0),
            mtime: Nanos(0),
            ctime: Nanos(0),
            parent: Soid::ROOT,
            no_xattrs: false,
        }
    }

    #[test]
    fn a_made_file_keeps_its_reply_unless_the_epoch_moved_or_a_change_began() {
        let d = DirAttrs::default();
        d.keep_made(7, attr(1), 3, 3);
        assert_eq!(d.take(7, 3).map(|a| a.nlink), Some(1));
        assert!(d.take(7, 3).is_none(), "used once");
        d.keep_made(7, attr(1), 3, 4);
        assert!(d.take(7, 4).is_none(), "a change elsewhere came between");
        let c = d.begin(7, 4);
        d.keep_made(7, attr(1), 4, 4);
        assert!(d.take(7, 4).is_none(), "a change of it is in flight");
        d.end(c, None, 4);
        d.keep_made(7, attr(1), 4, 4);
        let c = d.begin(7, 4);
        assert!(d.take(7, 4).is_none(), "a change began since");
        d.end(c, None, 4);
        assert!(d.is_empty());
    }

    #[test]
    fn opens_reuse_what_was_seen_until_a_change_or_the_epoch_moves() {
        let d = DirAttrs::default();
        d.saw(9, attr(1), 2, 2);
        assert_eq!(d.last_seen(9, 2).map(|a| a.nlink), Some(1));
        assert_eq!(d.last_seen(9, 2).map(|a| a.nlink), Some(1), "many uses");
        assert!(d.last_seen(9, 3).is_none(), "a change elsewhere");
        assert!(d.last_seen(9, 2).is_none(), "dropped at the mismatch");
        d.saw(9, attr(1), 3, 4);
        assert!(
            d.last_seen(9, 4).is_none(),
            "the epoch moved during the fetch"
        );
        d.saw(9, attr(1), 4, 4);
        let c = d.begin(9, 4);
        assert!(d.last_seen(9, 4).is_none(), "a change of it began");
        d.saw(9, attr(1), 4, 4);
        assert!(
            d.last_seen(9, 4).is_none(),
            "not stored while one is in flight"
        );
        // Its reply is what opens see next.
        d.end(c, Some(attr(2)), 4);
        assert_eq!(d.last_seen(9, 4).map(|a| a.nlink), Some(2));
        d.forget(9);
        assert!(
            d.last_seen(9, 4).is_none(),
            "gone with the file's last name"
        );
        d.keep_made(10, attr(1), 4, 4);
        assert_eq!(
            d.last_seen(10, 4).map(|a| a.nlink),
            Some(1),
            "a create's reply"
        );
    }

    #[test]
    fn a_lone_change_keeps_the_reply_for_one_use() {
        let d = DirAttrs::default();
        let c = d.begin(5, 1);
        d.end(c, Some(attr(3)), 1);
        assert_eq!(d.take(5, 1).map(|a| a.nlink), Some(3));
        assert_eq!(d.take(5, 1), None, "used once");
        assert!(d.is_empty());
    }

    #[test]
    fn a_change_elsewhere_during_or_after_the_request_discards_it() {
        let d = DirAttrs::default();
        let c = d.begin(5, 1);
        d.end(c, Some(attr(3)), 2); // the epoch moved while it was out
        assert_eq!(d.take(5, 2), None);
        let c = d.begin(5, 2);
        d.end(c, Some(attr(3)), 2);
        assert_eq!(d.take(5, 3), None, "the epoch moved after");
        assert!(d.is_empty());
    }

    #[test]
    fn overlapping_changes_keep_nothing_in_either_order() {
        for first_ends_first in [true, false] {
            let d = DirAttrs::default();
            let a = d.begin(5, 1);
            let b = d.begin(5, 1);
            if first_ends_first {
                d.end(a, Some(attr(3)), 1);
                d.end(b, Some(attr(4)), 1);
            } else {
                d.end(b, Some(attr(4)), 1);
                d.end(a, Some(attr(3)), 1);
            }
            assert_eq!(d.take(5, 1), None);
            assert!(d.is_empty());
            // Afterwards a lone change keeps again.
            let c = d.begin(5, 1);
            d.end(c, Some(attr(5)), 1);
            assert_eq!(d.take(5, 1).map(|a| a.nlink), Some(5));
        }
    }

    /// Postmark in Magellan's setting: 20,000 directories changed at
    /// random, then opens of 50,000 files at random.
    #[test]
    fn twenty_thousand_directories_and_fifty_thousand_files_stay_kept() {
        let d = DirAttrs::default();
        for ino in 0..20_000u64 {
            let c = d.begin(ino, 1);
            d.end(c, Some(attr(2)), 1);
        }
        for ino in 100_000..150_000u64 {
            d.keep_made(ino, attr(1), 1, 1);
        }
        for ino in 0..20_000u64 {
            assert!(d.take(ino, 1).is_some(), "directory {ino}");
        }
        for ino in 100_000..150_000u64 {
            assert!(d.last_seen(ino, 1).is_some(), "file {ino}");
        }
    }

    #[test]
    fn state_is_bounded() {
        let d = DirAttrs::default();
        for ino in 0..(MAX_KEPT as u64 + 10) {
            let c = d.begin(ino, 1);
            d.end(c, Some(attr(2)), 1);
        }
        assert!(d.len() <= MAX_KEPT);
        let c = d.begin(1, 1);
        d.forget(1);
        d.end(c, None, 1);
        assert_eq!(d.take(1, 1), None);
    }

    #[test]
    fn a_failed_change_or_a_new_one_drops_what_was_kept() {
        let d = DirAttrs::default();
        let c = d.begin(5, 1);
        d.end(c, Some(attr(3)), 1);
        let c = d.begin(5, 1); // the kept value is now old
        assert_eq!(d.take(5, 1), None);
        d.end(c, None, 1);
        assert!(d.is_empty());
    }

    /// What a random history of concurrent changes, uses and epoch moves
    /// may do: `begin(k)` starts change k (of directory `k % 2`),
    /// `end(k, ok)` ends it, `take(d)` asks for directory d, `bump` moves
    /// the epoch (a change elsewhere).
    #[derive(Debug, Clone)]
    enum Step {
        Begin(usize),
        End(usize, bool),
        Take(u64),
        Bump,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0..6usize).prop_map(Step::Begin),
            (0..6usize, any::<bool>()).prop_map(|(k, ok)| Step::End(k, ok)),
            (0..2u64).prop_map(Step::Take),
            Just(Step::Bump),
        ]
    }

    proptest::proptest! {
        /// Soundness against a reference model: whatever `take` returns
        /// is the value of a change of that directory that ended after
        /// every other change of it began, overlapped none, and saw no
        /// epoch move from its start until now; and it is returned once.
        #[test]
        fn take_returns_only_values_the_model_allows(
            steps in proptest::collection::vec(step(), 0..60)
        ) {
            struct Run {
                dir: u64,
                begun_at: usize,
                epoch: u64,
                change: Option<Change>,
                ended_at: Option<usize>,
            }
            let d = DirAttrs::default();
            let mut epoch = 0u64;
            let mut runs: Vec<Run> = Vec::new();
            let mut used: Vec<usize> = Vec::new();
            for (t, s) in steps.iter().enumerate() {
                match s {
                    Step::Begin(k) => {
                        let dir = (*k % 2) as u64;
                        runs.push(Run {
                            dir,
                            begun_at: t,
                            epoch,
                            change: Some(d.begin(dir, epoch)),
                            ended_at: None,
                        });
                    }
                    Step::End(k, ok) => {
                        let open: Vec<usize> =
                            (0..runs.len()).filter(|i| runs[*i].ended_at.is_none()).collect();
                        if open.is_empty() {
                            continue;
                        }
                        let i = open[k % open.len()];
                        let value = ok.then(|| attr(i as u32));
                        let c = runs[i].change.take().unwrap();
                        d.end(c, value, epoch);
                        runs[i].ended_at = Some(t);
                    }
                    Step::Take(dir) => {
                        let Some(a) = d.take(*dir, epoch) else { continue };
                        let i = a.nlink as usize;
                        let r = &runs[i];
                        let ended = r.ended_at.expect("a value from a change that ended");
                        proptest::prop_assert_eq!(r.dir, *dir, "the value of another directory");
                        proptest::prop_assert_eq!(r.epoch, epoch, "the epoch moved since it began");
                        for (j, o) in runs.iter().enumerate() {
                            if j == i || o.dir != *dir {
                                continue;
                            }
                            let o_end = o.ended_at.unwrap_or(usize::MAX);
                            proptest::prop_assert!(
                                o_end < r.begun_at || o.begun_at > ended,
                                "change {} overlapped change {}", j, i
                            );
                            proptest::prop_assert!(
                                o.begun_at < r.begun_at,
                                "change {} began after change {} ended", j, i
                            );
                        }
                        proptest::prop_assert!(!used.contains(&i), "used twice");
                        used.push(i);
                    }
                    Step::Bump => epoch += 1,
                }
            }
        }
    }
}
