//! Log-less: SOIDs freed by operations that are not written back yet. Pure
//! logic, no I/O.
//!
//! With the journal, a removal is durable when it is acknowledged, so its
//! SOID may be handed out again at once. Log-less, an acknowledged removal
//! lives only in the clients' backups until it is written back: a crash
//! with every holder of that entry gone rolls it back, and the removed
//! inode — name, SOID and all — comes back. Whatever a client keeps keyed
//! by SOID (the mount's data objects) must then still be the old inode's,
//! so no other inode may have taken the SOID meanwhile. The engine's SOID
//! allocator therefore counts a quarantined SOID as used
//! (`Txn`'s `SoidSpace`), and an entry leaves the quarantine once the
//! written-back watermark reaches the LSN that freed it.
//!
//! Invariants: every SOID deleted by a log-less commit with an LSN above
//! the written-back watermark is here (it is added under the same table
//! locks as the delete is applied, so no allocation sees it free in the
//! table and absent here); `by_soid` and `by_lsn` hold the same pairs.
//!
//! Memory: one entry per removal between write-backs (30 s, or 64 MiB of
//! redo), ~64 bytes each.

use crate::journal::Lsn;
use sextant_types::{Soid, SoidRange};
use std::collections::BTreeMap;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Quarantine {
    by_soid: BTreeMap<Soid, Lsn>,
    by_lsn: BTreeMap<Lsn, Vec<Soid>>,
}

impl Quarantine {
    /// `soid` was freed by the operation `lsn`.
    pub fn add(&mut self, soid: Soid, lsn: Lsn) {
        if let Some(old) = self.by_soid.insert(soid, lsn) {
            // Freed twice before a write-back (not expected): the later
            // LSN rules, the earlier pair goes.
            if let Some(v) = self.by_lsn.get_mut(&old) {
                v.retain(|s| *s != soid);
                if v.is_empty() {
                    self.by_lsn.remove(&old);
                }
            }
            if old > lsn {
                self.by_soid.insert(soid, old);
                self.by_lsn.entry(old).or_default().push(soid);
                return;
            }
        }
        self.by_lsn.entry(lsn).or_default().push(soid);
    }

    /// Everything freed at or below `written_back` is durable: released.
    pub fn release_through(&mut self, written_back: Lsn) {
        while let Some(entry) = self.by_lsn.first_entry() {
            if *entry.key() > written_back {
                break;
            }
            for s in entry.remove() {
                self.by_soid.remove(&s);
            }
        }
    }

    pub fn contains(&self, soid: Soid) -> bool {
        self.by_soid.contains_key(&soid)
    }

    /// The highest quarantined SOID in `range`.
    pub fn max_in(&self, range: SoidRange) -> Option<Soid> {
        if range.first > range.last {
            return None;
        }
        self.by_soid
            .range(range.first..=range.last)
            .next_back()
            .map(|(s, _)| *s)
    }

    pub fn len(&self) -> usize {
        self.by_soid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_soid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u128) -> Soid {
        Soid::from_u128(v)
    }

    #[test]
    fn held_until_written_back() {
        let mut q = Quarantine::default();
        q.add(s(5), 10);
        q.add(s(9), 12);
        q.add(s(7), 12);
        let all = SoidRange {
            first: s(0),
            last: s(100),
        };
        assert_eq!(q.max_in(all), Some(s(9)));
        assert_eq!(
            q.max_in(SoidRange {
                first: s(6),
                last: s(8)
            }),
            Some(s(7))
        );
        assert!(q.contains(s(5)));
        q.release_through(11);
        assert!(!q.contains(s(5)));
        assert_eq!(q.len(), 2);
        q.release_through(12);
        assert!(q.is_empty());
        assert_eq!(q.max_in(all), None);
        assert!(q.by_lsn.is_empty());
    }

    #[test]
    fn freed_twice_keeps_the_later_lsn() {
        let mut q = Quarantine::default();
        q.add(s(1), 20);
        q.add(s(1), 10);
        q.release_through(15);
        assert!(q.contains(s(1)), "held until 20");
        q.add(s(2), 30);
        q.add(s(2), 40);
        q.release_through(30);
        assert!(q.contains(s(2)));
        q.release_through(40);
        assert!(q.is_empty());
        assert!(q.by_lsn.is_empty());
    }
}
