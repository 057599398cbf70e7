//! The client's backups for a log-less server (see the protocol header in
//! `sextant.proto` and `sextant_engine::logless`): redo entries received
//! with replies, kept until the server reports them written back, and
//! handed back with `Recover` after the server restarts.
//!
//! Invariants:
//! - every entry held has an LSN above `written_back` and belongs to run
//!   `incarnation`;
//! - a reply of another run (non-zero incarnation) means that run's
//!   recovery is over — a restarted server answers nothing but `Recover`
//!   until then — or, on a cluster, that the server joined again and
//!   synced the old run's journal whole before it began a new one; so
//!   the old run's entries are dropped when it arrives;
//! - a reply of a run left that way (one that arrives late, after a
//!   reply of the newer run) is ignored: its run needs nothing from the
//!   clients, and taking it as a new run would drop the newer run's
//!   entries.
//!
//! Entries are kept in a deque sorted by LSN: sorted per reply, they
//! arrive in increasing order (an append) and leave from the front (the
//! watermark), where a search tree paid a descent per entry — 4.0 % of a
//! 16-client benchmark's client CPU, 1.3 % now (perf; docs/BENCHMARKS.md,
//! "What keeping backups costs the client"). Out-of-order arrivals (after
//! a reconnect) are inserted in place; duplicates are ignored.
//!
//! Memory: what a client holds is bounded by what the server hands out
//! between write-backs (`LoglessConfig::max_backup_bytes`, 64 MiB by
//! default, and the 30 s dirty age), times the share of the ARL this
//! client sees; [`BackupStats`] reports it.

use sextant_proto::pb;
use std::collections::VecDeque;

#[derive(Debug)]
struct Spooled {
    files: Vec<std::path::PathBuf>,
    incarnation: u64,
    newest: u64,
}

/// What a client holds for recovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackupStats {
    /// The server run the backups belong to (0: none seen; a journaling
    /// server).
    pub incarnation: u64,
    pub entries: usize,
    pub bytes: usize,
    /// The most bytes held at once.
    pub peak_bytes: usize,
    /// Entries received in all (with duplicates).
    pub received: u64,
    /// The server's written-back watermark, as last reported.
    pub written_back: u64,
    /// The highest LSN any reply of this run carried: every operation the
    /// server had acknowledged when it last answered is at or below it
    /// (each reply carries the newest ARL entries). An effect of such an
    /// operation is durable once `written_back` reaches this.
    pub newest_seen: u64,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Backups {
    /// Sorted by LSN, no duplicates.
    entries: VecDeque<(u64, Vec<u8>)>,
    /// Everything but `entries`, which [`Backups::stats`] reads off the map.
    stats: BackupStats,
    /// Entries read back from the local spool (`crate::spool`): their
    /// files, their run and the highest LSN among them.
    spooled: Option<Spooled>,
    /// The last few runs these backups moved on from (newest last).
    left: VecDeque<u64>,
}

/// How many runs left behind [`Backups`] remembers.
const LEFT_RUNS: usize = 4;

/// Largest payload of one `Recover` message (the limit is 1 MiB).
pub const RECOVER_CHUNK_BYTES: usize = 512 << 10;

impl Backups {
    /// Takes in the log-less fields of a reply or notice.
    pub fn absorb(&mut self, resp: &mut pb::Response) {
        if resp.incarnation == 0 {
            return;
        }
        if self.left.contains(&resp.incarnation) {
            // A late reply of a run the server moved on from.
            resp.backups.clear();
            return;
        }
        if resp.incarnation != self.stats.incarnation {
            if self.stats.incarnation != 0 {
                if self.left.len() == LEFT_RUNS {
                    self.left.pop_front();
                }
                self.left.push_back(self.stats.incarnation);
            }
            self.entries.clear();
            self.stats.bytes = 0;
            self.stats.incarnation = resp.incarnation;
            self.stats.written_back = 0;
            self.stats.newest_seen = 0;
        }
        if resp.written_back > self.stats.written_back {
            self.stats.written_back = resp.written_back;
            // Drop what is written back; each entry is counted out once.
            while let Some((lsn, entry)) = self.entries.front() {
                if *lsn > self.stats.written_back {
                    break;
                }
                self.stats.bytes -= entry.len();
                self.entries.pop_front();
            }
        }
        // A reply lists its own entry first, then the older ones its client
        // had not been sent: in LSN order, every one is an append.
        let mut received = std::mem::take(&mut resp.backups);
        received.sort_unstable_by_key(|b| b.lsn);
        for b in received {
            self.stats.received += 1;
            self.stats.newest_seen = self.stats.newest_seen.max(b.lsn);
            if b.lsn > self.stats.written_back {
                self.insert(b.lsn, b.entry);
            }
        }
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.bytes);
    }

    /// Keeps `entry` at its place by LSN, unless that LSN is held.
    fn insert(&mut self, lsn: u64, entry: Vec<u8>) {
        let at = match self.entries.back() {
            None => 0,
            Some((last, _)) if *last < lsn => self.entries.len(),
            Some(_) => match self.entries.binary_search_by_key(&lsn, |(l, _)| *l) {
                Ok(_) => return,
                Err(i) => i,
            },
        };
        self.stats.bytes += entry.len();
        if at == self.entries.len() {
            self.entries.push_back((lsn, entry));
        } else {
            self.entries.insert(at, (lsn, entry));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The highest LSN held.
    pub fn newest(&self) -> Option<u64> {
        self.entries.back().map(|(lsn, _)| *lsn)
    }

    pub fn stats(&self) -> BackupStats {
        BackupStats {
            entries: self.entries.len(),
            ..self.stats
        }
    }

    /// The `Recover` messages that hand everything back, each under the
    /// message limit.
    pub fn recover_requests(&self, client_id: u64) -> Vec<pb::RecoverRequest> {
        let mut out: Vec<pb::RecoverRequest> = Vec::new();
        let mut bytes = 0;
        for (lsn, entry) in &self.entries {
            if out.is_empty() || bytes + entry.len() > RECOVER_CHUNK_BYTES {
                out.push(pb::RecoverRequest {
                    client_id,
                    incarnation: self.stats.incarnation,
                    backups: Vec::new(),
                });
                bytes = 0;
            }
            bytes += entry.len() + 16;
            if let Some(last) = out.last_mut() {
                last.backups.push(pb::RedoBackup {
                    lsn: *lsn,
                    entry: entry.clone(),
                });
            }
        }
        out
    }

    /// Takes in entries of run `incarnation` read back from the spool
    /// (`files`), unless entries of another run are held. Returns how many
    /// were new.
    pub fn restore(
        &mut self,
        incarnation: u64,
        entries: Vec<(u64, Vec<u8>)>,
        files: Vec<std::path::PathBuf>,
    ) -> usize {
        if incarnation == 0
            || (self.stats.incarnation != 0 && self.stats.incarnation != incarnation)
        {
            return 0;
        }
        self.stats.incarnation = incarnation;
        let before = self.entries.len();
        let mut newest = 0;
        for (lsn, entry) in entries {
            newest = newest.max(lsn);
            if lsn > self.stats.written_back {
                self.insert(lsn, entry);
            }
        }
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.bytes);
        let mut all = files;
        if let Some(old) = self.spooled.take() {
            all.extend(old.files);
            newest = newest.max(old.newest);
        }
        self.spooled = Some(Spooled {
            files: all,
            incarnation,
            newest,
        });
        self.entries.len() - before
    }

    /// The spool files whose entries are of no more use (written back,
    /// handed back too late, or a new run's recovery is over: none held at
    /// or below their newest LSN); the caller removes them.
    pub fn finished_spool(&mut self) -> Option<Vec<std::path::PathBuf>> {
        let s = self.spooled.as_ref()?;
        let needed = s.incarnation == self.stats.incarnation
            && self
                .entries
                .front()
                .is_some_and(|(lsn, _)| *lsn <= s.newest);
        if needed {
            return None;
        }
        self.spooled.take().map(|s| s.files)
    }

    /// The spool files restored (they hold nothing memory does not).
    pub fn take_spool_files(&mut self) -> Vec<std::path::PathBuf> {
        self.spooled.take().map(|s| s.files).unwrap_or_default()
    }

    /// Every entry held, in LSN order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.entries.iter().map(|(lsn, e)| (*lsn, e.as_slice()))
    }

    /// The server said these backups are of no more use.
    pub fn drop_run(&mut self, incarnation: u64) {
        if self.stats.incarnation == incarnation {
            self.entries.clear();
            self.stats.bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(incarnation: u64, written_back: u64, lsns: &[u64]) -> pb::Response {
        pb::Response {
            incarnation,
            written_back,
            backups: lsns
                .iter()
                .map(|l| pb::RedoBackup {
                    lsn: *l,
                    entry: vec![*l as u8; 100],
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn keeps_until_written_back_and_drops_on_a_new_run() {
        let mut b = Backups::default();
        b.absorb(&mut resp(0, 0, &[1]));
        assert!(b.is_empty(), "a journaling server sends nothing to keep");
        b.absorb(&mut resp(7, 0, &[1, 2]));
        b.absorb(&mut resp(7, 1, &[2, 3]));
        assert_eq!(b.stats().entries, 2);
        assert_eq!(b.stats().received, 4);
        assert_eq!(b.stats().bytes, 200);
        assert_eq!(b.stats().newest_seen, 3);
        let reqs = b.recover_requests(9);
        assert_eq!(reqs.len(), 1);
        assert_eq!(
            reqs[0].backups.iter().map(|x| x.lsn).collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(reqs[0].incarnation, 7);
        b.absorb(&mut resp(7, 3, &[]));
        assert!(b.is_empty());
        b.absorb(&mut resp(7, 3, &[4]));
        b.absorb(&mut resp(8, 0, &[]));
        assert!(b.is_empty(), "the old run's recovery is over");
        assert_eq!(b.stats().peak_bytes, 200);
    }

    /// A server that joined the cluster again began a new run; a reply of
    /// the old run arriving after one of the new run changes nothing (it
    /// would have dropped the new run's entries).
    #[test]
    fn a_late_reply_of_a_run_left_behind_is_ignored() {
        let mut b = Backups::default();
        b.absorb(&mut resp(7, 0, &[1, 2]));
        b.absorb(&mut resp(8, 2, &[3]));
        assert_eq!(b.stats().incarnation, 8);
        b.absorb(&mut resp(7, 0, &[4]));
        assert_eq!(b.stats().incarnation, 8);
        assert_eq!(b.entries().map(|(l, _)| l).collect::<Vec<_>>(), [3]);
        b.absorb(&mut resp(8, 2, &[4]));
        assert_eq!(b.entries().map(|(l, _)| l).collect::<Vec<_>>(), [3, 4]);
    }

    proptest::proptest! {
        /// Against a map model: whatever order entries and watermarks
        /// arrive in, the held entries are those above the watermark, once
        /// each, in LSN order, and the byte count is theirs.
        #[test]
        fn holds_what_a_map_model_holds(
            steps in proptest::collection::vec(
                (proptest::collection::vec(1u64..60, 0..6), 0u64..8), 1..40)
        ) {
            let mut b = Backups::default();
            let mut model = std::collections::BTreeMap::new();
            let mut wb = 0;
            for (lsns, advance) in steps {
                wb += advance / 6; // watermark moves now and then
                let mut r = resp(1, wb, &[]);
                for l in lsns {
                    r.backups.push(pb::RedoBackup { lsn: l, entry: vec![0; l as usize] });
                    if l > wb {
                        model.entry(l).or_insert(l as usize);
                    }
                }
                model.retain(|l, _| *l > wb);
                b.absorb(&mut r);
                let held: Vec<u64> = b.entries.iter().map(|(l, _)| *l).collect();
                proptest::prop_assert_eq!(&held, &model.keys().copied().collect::<Vec<_>>());
                proptest::prop_assert_eq!(b.stats().bytes, model.values().sum::<usize>());
                proptest::prop_assert_eq!(b.newest(), model.keys().next_back().copied());
            }
        }
    }

    #[test]
    fn restored_entries_are_held_like_received_ones_and_their_files_released() {
        let mut b = Backups::default();
        let files = vec![std::path::PathBuf::from("/x/a.bak")];
        let got = b.restore(
            7,
            vec![(5, vec![1]), (6, vec![2]), (5, vec![1])],
            files.clone(),
        );
        assert_eq!(got, 2);
        assert_eq!(b.stats().incarnation, 7);
        assert_eq!(b.finished_spool(), None, "still held");
        assert_eq!(b.recover_requests(1)[0].backups.len(), 2);
        // New entries of the same run arrive; the spooled ones go.
        b.absorb(&mut resp(7, 6, &[9]));
        assert_eq!(b.finished_spool(), Some(files.clone()));
        assert_eq!(b.finished_spool(), None);
        // Of another run than what is held: ignored.
        assert_eq!(b.restore(8, vec![(1, vec![0])], files.clone()), 0);
        // Dropped as too late: released.
        let mut b = Backups::default();
        b.restore(3, vec![(2, vec![0])], files.clone());
        b.drop_run(3);
        assert_eq!(b.finished_spool(), Some(files.clone()));
        // A reply of the new run (its recovery is over): released.
        let mut b = Backups::default();
        b.restore(3, vec![(2, vec![0])], files.clone());
        b.absorb(&mut resp(4, 0, &[]));
        assert_eq!(b.finished_spool(), Some(files));
    }

    #[test]
    fn recover_requests_stay_under_the_message_limit() {
        let mut b = Backups::default();
        let mut r = resp(1, 0, &[]);
        for lsn in 1..=100 {
            r.backups.push(pb::RedoBackup {
                lsn,
                entry: vec![0; 20_000],
            });
        }
        b.absorb(&mut r);
        let reqs = b.recover_requests(1);
        assert!(reqs.len() > 1);
        let total: usize = reqs.iter().map(|q| q.backups.len()).sum();
        assert_eq!(total, 100);
        for q in reqs {
            assert!(prost::Message::encoded_len(&q) < sextant_proto::MAX_MESSAGE_BYTES);
        }
        b.drop_run(1);
        assert!(b.is_empty());
    }
}
