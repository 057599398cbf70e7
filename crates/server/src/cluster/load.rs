//! This server's load as the coordinator balances by it: per table it
//! serves, the request rate (deltas of the engine's operation counters,
//! `Engine::table_ops`) and the inode count (`Engine::table_inodes`),
//! published as `load/<name>` (format in `sextant_coordinator::keys`).
//!
//! Invariant: writes are rare. A sample is published only when a table
//! came or went or the map gave this server a table since its last
//! publication (then at once: the coordinator does not balance while a
//! table's figures are unknown, and counts only figures newer than the
//! table's owner key), or one of its figures changed by more than
//! [`LOAD_CHANGE`] — a rate also from or to 0; an inode count only once
//! the larger side weighs in the balance (`INODES_PER_UNIT`) — so an idle
//! cluster writes nothing, and a growing table about ten times per
//! tenfold growth (at most once per [`LOAD_EVERY`] seconds); the report
//! task also republishes once a minute, as the key goes with a lost
//! lease.

use sextant_cluster::coordinator::{table_weight, INODES_PER_UNIT};
use sextant_cluster::ids::TableId;
use sextant_coordinator::keys::TableLoad;
use std::collections::BTreeMap;

/// Every how many ticks (seconds) of the report task a sample is taken.
pub const LOAD_EVERY: u32 = 5;

/// A figure is published again only when it changed by more than this
/// fraction.
pub const LOAD_CHANGE: f64 = 0.2;

/// The loads of the tables served now: `ops` and `inodes` from the engine
/// (per engine table number), `before` the operation counters of the
/// previous sample, `secs` the time since. A table new here (or re-made
/// by a split) starts its counter from 0; a table number that is not a
/// cluster table number is left out.
pub fn sample(
    ops: &BTreeMap<u64, u64>,
    before: &BTreeMap<u64, u64>,
    inodes: &BTreeMap<u64, u64>,
    secs: f64,
) -> BTreeMap<TableId, TableLoad> {
    let secs = secs.max(0.001);
    ops.iter()
        .filter_map(|(t, n)| {
            let done = n.saturating_sub(before.get(t).copied().unwrap_or(0));
            let load = TableLoad {
                rate: (done as f64 / secs).round() as u64,
                inodes: inodes.get(t).copied().unwrap_or(0),
            };
            Some((TableId(u32::try_from(*t).ok()?), load))
        })
        .collect()
}

/// Whether `now` differs enough from what was `published` to publish it.
pub fn changed(
    published: &BTreeMap<TableId, TableLoad>,
    now: &BTreeMap<TableId, TableLoad>,
) -> bool {
    if published.keys().ne(now.keys()) {
        return true;
    }
    published
        .values()
        .zip(now.values())
        .any(|(a, b)| differs(a.rate, b.rate, 0) || differs(a.inodes, b.inodes, INODES_PER_UNIT))
}

/// Whether `published` names exactly the tables `served` (engine table
/// numbers, any order; those [`sample`] leaves out do not count).
pub fn same_tables(published: &BTreeMap<TableId, TableLoad>, served: &[u64]) -> bool {
    let served: std::collections::BTreeSet<u64> = served
        .iter()
        .copied()
        .filter(|t| u32::try_from(*t).is_ok())
        .collect();
    published.keys().map(|t| u64::from(t.0)).eq(served)
}

/// `a` and `b` differ by more than [`LOAD_CHANGE`] of the larger, or one
/// is 0 and not the other — when the larger is at least `floor`.
fn differs(a: u64, b: u64, floor: u64) -> bool {
    if a.max(b) < floor {
        return false;
    }
    let (a, b) = (a as f64, b as f64);
    (a == 0.0) != (b == 0.0) || (a - b).abs() > LOAD_CHANGE * a.max(b)
}

/// The weight the coordinator gives this server for `loads`: the sum of
/// its tables' (for /metrics).
pub fn weight(loads: &BTreeMap<TableId, TableLoad>) -> u64 {
    loads.values().fold(0u64, |w, l| {
        w.saturating_add(table_weight(l.rate, l.inodes))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(l: &[(u32, u64, u64)]) -> BTreeMap<TableId, TableLoad> {
        l.iter()
            .map(|(t, rate, inodes)| {
                (
                    TableId(*t),
                    TableLoad {
                        rate: *rate,
                        inodes: *inodes,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_sample_has_each_tables_rate_and_inodes() {
        let ops = [(1, 1_000), (2, 50), (1 << 40, 7)].into();
        let before = [(1, 500), (3, 9)].into();
        let inodes = [(1, 20_000), (2, 3)].into();
        assert_eq!(
            sample(&ops, &before, &inodes, 5.0),
            loads(&[(1, 100, 20_000), (2, 10, 3)])
        );
    }

    #[test]
    fn inode_counts_are_published_when_they_change_by_a_fifth() {
        let was = loads(&[(1, 100, 20_000), (2, 0, 0)]);
        assert!(!changed(&was, &was));
        // Small changes of either figure: nothing to write.
        assert!(!changed(&was, &loads(&[(1, 110, 23_000), (2, 0, 0)])));
        // Over a fifth more inodes, or a table growing past one unit.
        assert!(changed(&was, &loads(&[(1, 100, 26_000), (2, 0, 0)])));
        assert!(changed(&was, &loads(&[(1, 100, 20_000), (2, 0, 1_000)])));
        // Small tables growing write nothing.
        assert!(!changed(&was, &loads(&[(1, 100, 20_000), (2, 0, 999)])));
        // Rates as before: from or to 0, or a fifth.
        assert!(changed(&was, &loads(&[(1, 0, 20_000), (2, 0, 0)])));
        assert!(changed(&was, &loads(&[(1, 100, 20_000), (2, 1, 0)])));
        assert!(changed(&was, &loads(&[(1, 130, 20_000), (2, 0, 0)])));
        // A table came or went.
        assert!(changed(&was, &loads(&[(1, 100, 20_000)])));
    }

    #[test]
    fn a_table_coming_or_going_is_noticed() {
        let was = loads(&[(1, 100, 20_000), (2, 0, 0)]);
        assert!(same_tables(&was, &[2, 1]));
        assert!(!same_tables(&was, &[1]));
        assert!(!same_tables(&was, &[1, 2, 3]));
        assert!(same_tables(&BTreeMap::new(), &[]));
        assert!(same_tables(&was, &[1, 2, 1 << 40]), "never published");
    }

    #[test]
    fn the_servers_weight_is_the_coordinators() {
        assert_eq!(weight(&loads(&[(1, 100, 20_000), (2, 0, 999)])), 121 + 1);
        assert_eq!(weight(&loads(&[(1, u64::MAX, u64::MAX)])), u64::MAX);
    }
}
