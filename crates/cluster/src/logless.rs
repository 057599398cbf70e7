//! Log-less durability on a cluster: the decisions about a journal whose
//! tail is synced only later (issue 21 item 6, /work/notes/item6-design.md).
//!
//! A log-less server writes each record to its journal before the reply
//! but syncs it in the background: the reply carries the journal's
//! *synced watermark* (how many records are on disk), and the client keeps
//! a [`Backups`] copy of every acknowledged record at or above it, until a
//! later reply's watermark passes it. A process crash loses nothing (the
//! machine syncs the rest); a machine crash cuts the unsynced tail at some
//! point (a prefix of it survives).
//!
//! The one decision point: once a log-less member's lease is gone, and
//! before any of its tables is reassigned, each of its dead journals is
//! *completed* ([`complete`]): the synced prefix (what any reader of the
//! store sees for good) plus every backup clients hand in that lies past
//! it, in record (LSN) order, each once. The completion is a separate
//! object (the member may be only partitioned and still write its
//! journal); it is decided once and never changed, and every new owner
//! replays the journal's prefix and the completion ([`replay`]), never
//! what the journal grew after.
//!
//! Invariants: a completion's tail holds LSNs at or past its prefix,
//! strictly increasing; two backups of one LSN hold the same record (an
//! LSN names one record of one journal), and so does a backup of an LSN
//! inside the prefix, which is then not added again.

use crate::ids::TableId;
use crate::server::JournalId;
use std::collections::BTreeMap;
use std::fmt;

/// One record of a journal: an operation on a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub table: TableId,
    pub op: u64,
}

/// A dead journal's completion: its valid prefix (records `0..prefix`)
/// and, past it, the records clients' backups restored, with their LSNs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub prefix: usize,
    pub tail: Vec<(usize, Record)>,
}

impl Completion {
    /// The GAP report: the LSN ranges (inclusive) past the prefix that no
    /// backup restored, below the last one that did. Records there — and
    /// any past the last restored one, which nobody can see — were lost
    /// with the machine: unacknowledged ones (their clients retry), or
    /// acknowledged ones whose every holder lost its backup.
    pub fn gaps(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut next = self.prefix;
        for (lsn, _) in &self.tail {
            if *lsn > next {
                out.push((next, lsn - 1));
            }
            next = lsn + 1;
        }
        out
    }
}

/// Backups that contradict the journal or each other: two different
/// records under one LSN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub lsn: usize,
    pub one: Record,
    pub other: Record,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LSN {} holds {:?} and {:?}",
            self.lsn, self.one, self.other
        )
    }
}

impl std::error::Error for Conflict {}

/// Completes a journal whose valid prefix is `prefix` with the backups
/// handed in for it (any order, duplicates allowed).
pub fn complete(
    prefix: &[Record],
    backups: impl IntoIterator<Item = (usize, Record)>,
) -> Result<Completion, Conflict> {
    let mut tail: BTreeMap<usize, Record> = BTreeMap::new();
    for (lsn, r) in backups {
        let known = if lsn < prefix.len() {
            Some(prefix[lsn])
        } else {
            tail.get(&lsn).copied()
        };
        match known {
            Some(k) if k != r => {
                return Err(Conflict {
                    lsn,
                    one: k,
                    other: r,
                })
            }
            Some(_) => {}
            None => {
                tail.insert(lsn, r);
            }
        }
    }
    Ok(Completion {
        prefix: prefix.len(),
        tail: tail.into_iter().collect(),
    })
}

/// The operations on `table` a new owner replays from a journal, from LSN
/// `from` on: with a completion, the journal's prefix and the completion's
/// tail; without one, the first `readable` records (what is synced: a
/// reader of the store sees no more).
pub fn replay<'a>(
    journal: &'a [Record],
    readable: usize,
    completion: Option<&'a Completion>,
    from: usize,
    table: TableId,
) -> impl Iterator<Item = u64> + 'a {
    let end = completion.map_or(readable, |c| c.prefix).min(journal.len());
    let tail = completion
        .map(|c| &c.tail[..])
        .unwrap_or(&[])
        .iter()
        .filter(move |(lsn, _)| *lsn >= from)
        .map(|(_, r)| r);
    journal
        .get(from.min(end)..end)
        .unwrap_or(&[])
        .iter()
        .chain(tail)
        .filter(move |r| r.table == table)
        .map(|r| r.op)
}

/// One client's backups: per journal, the acknowledged records at or
/// above the synced watermark the last reply from it carried.
#[derive(Clone, Debug, Default)]
pub struct Backups(BTreeMap<JournalId, BTreeMap<usize, Record>>);

impl Backups {
    /// A reply from `journal`'s server with its synced `watermark`: the
    /// backups below it are dropped.
    pub fn synced(&mut self, journal: JournalId, watermark: usize) {
        if let Some(b) = self.0.get_mut(&journal) {
            *b = b.split_off(&watermark);
            if b.is_empty() {
                self.0.remove(&journal);
            }
        }
    }

    /// An acknowledgement of `record`, at `lsn` in `journal`, whose reply
    /// carried `watermark`: kept if not synced yet.
    pub fn acknowledged(
        &mut self,
        journal: JournalId,
        lsn: usize,
        record: Record,
        watermark: usize,
    ) {
        self.synced(journal, watermark);
        if lsn >= watermark {
            self.0.entry(journal).or_default().insert(lsn, record);
        }
    }

    /// What this client hands in for `journal`.
    pub fn of(&self, journal: JournalId) -> impl Iterator<Item = (usize, Record)> + '_ {
        self.0
            .get(&journal)
            .into_iter()
            .flat_map(|b| b.iter().map(|(l, r)| (*l, *r)))
    }

    /// Every backup held: its journal, LSN and record.
    pub fn all(&self) -> impl Iterator<Item = (JournalId, usize, Record)> + '_ {
        self.0
            .iter()
            .flat_map(|(j, b)| b.iter().map(move |(l, r)| (*j, *l, *r)))
    }

    /// How many backups are held.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Loses them all (the client's machine died).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::ServerId;

    fn r(table: u32, op: u64) -> Record {
        Record {
            table: TableId(table),
            op,
        }
    }

    #[test]
    fn a_completion_adds_each_backup_past_the_prefix_once_in_lsn_order() {
        let prefix = [r(0, 1), r(1, 2)];
        let c = complete(
            &prefix,
            [(5, r(0, 9)), (1, r(1, 2)), (3, r(1, 7)), (5, r(0, 9))],
        )
        .expect("no conflict");
        assert_eq!(c.prefix, 2);
        assert_eq!(c.tail, vec![(3, r(1, 7)), (5, r(0, 9))]);
        assert!(
            complete(&prefix, [(1, r(0, 3))]).is_err(),
            "not the prefix's"
        );
        assert!(complete(&prefix, [(4, r(0, 3)), (4, r(0, 5))]).is_err());
        assert_eq!(c.gaps(), vec![(2, 2), (4, 4)], "LSNs 2 and 4: lost");
        assert!(complete(&prefix, []).expect("empty").gaps().is_empty());
    }

    #[test]
    fn a_replay_reads_the_prefix_and_the_completion_never_the_rest() {
        // The journal grew after its completion (a partitioned server).
        let journal = [r(0, 1), r(1, 2), r(0, 3), r(0, 4), r(0, 5)];
        let c = Completion {
            prefix: 2,
            tail: vec![(2, r(0, 3)), (4, r(0, 5))],
        };
        let all: Vec<u64> = replay(&journal, 5, Some(&c), 0, TableId(0)).collect();
        assert_eq!(all, vec![1, 3, 5]);
        let later: Vec<u64> = replay(&journal, 5, Some(&c), 3, TableId(0)).collect();
        assert_eq!(later, vec![5], "only what lies after the position");
        let unsynced: Vec<u64> = replay(&journal, 3, None, 0, TableId(0)).collect();
        assert_eq!(
            unsynced,
            vec![1, 3],
            "without a completion: the readable part"
        );
        assert_eq!(replay(&journal, 3, None, 9, TableId(0)).count(), 0);
    }

    #[test]
    fn backups_are_dropped_once_a_reply_shows_them_synced() {
        let j = JournalId {
            server: ServerId(1),
            generation: 4,
        };
        let mut b = Backups::default();
        b.acknowledged(j, 3, r(0, 1), 2);
        b.acknowledged(j, 4, r(0, 2), 3);
        b.acknowledged(j, 1, r(0, 0), 3);
        assert_eq!(b.of(j).map(|(l, _)| l).collect::<Vec<_>>(), vec![3, 4]);
        b.synced(j, 4);
        assert_eq!(b.of(j).map(|(l, _)| l).collect::<Vec<_>>(), vec![4]);
        b.synced(j, 5);
        assert!(b.is_empty());
    }
}
