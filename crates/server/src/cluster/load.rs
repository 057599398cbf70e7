//! This server's load as the coordinator balances by it: per table it
//! serves, the request rate (deltas of the engine's operation counters,
//! `Engine::table_counters`) and the inode count, published as
//! `load/<name>` (format in `sextant_coordinator::keys`).
//!
//! Invariants:
//! - A rate is measured over time the table spent here, whole: a table is
//!   published only from the first sample that finds the same slot (same
//!   `since`) it found in the sample before — its rate is then the
//!   counter's delta over the time between the two. A table that just
//!   arrived (ADD), split off or was merged (a new slot, its counter from
//!   0) is left out until then: the coordinator holds it unknown and does
//!   not balance meanwhile. (Sampled at once after a move, as the reverted
//!   first version did, its few operations since the ADD were divided by
//!   the whole time since the previous sample, and a counter started
//!   again below its previous value read as 0: a busy table just moved
//!   weighed as idle at its new server, which so looked light and drew
//!   more tables, until the next sample showed its rate and a table went
//!   back.)
//! - Writes are rare. A sample is published only when the set of
//!   measured tables changed, after the map named this server owner of a
//!   table since its last publication (the coordinator counts only
//!   figures newer than a table's owner key), or one of its figures
//!   changed by more than
//!   [`LOAD_CHANGE`] — a rate also from or to 0; an inode count only once
//!   the larger side weighs in the balance (`INODES_PER_UNIT`) — so an
//!   idle cluster writes nothing, and a growing table about ten times per
//!   tenfold growth (at most once per [`LOAD_EVERY`] seconds); the report
//!   task also republishes once a minute, as the key goes with a lost
//!   lease.

use sextant_cluster::coordinator::{table_weight, INODES_PER_UNIT};
use sextant_cluster::ids::TableId;
use sextant_coordinator::keys::TableLoad;
use sextant_engine::TableCounters;
use std::collections::BTreeMap;
use std::time::Instant;

/// Every how many ticks (seconds) of the report task a sample is taken.
pub const LOAD_EVERY: u32 = 5;

/// A figure is published again only when it changed by more than this
/// fraction.
pub const LOAD_CHANGE: f64 = 0.2;

/// Successive samples of the engine's counters.
#[derive(Debug, Default)]
pub struct Sampler {
    /// The previous sample.
    last: Option<Sample>,
}

/// One sample: when it was taken, and per engine table number its slot's
/// start and operation counter.
#[derive(Debug)]
struct Sample {
    at: Instant,
    counters: BTreeMap<u64, (Instant, u64)>,
}

impl Sampler {
    /// The loads of the tables measured here between the previous sample
    /// and this one (`counters`, taken at `now`): those whose slot both
    /// samples saw. The first sample measures nothing. A table number
    /// that is not a cluster table number is left out.
    pub fn sample(
        &mut self,
        counters: &[TableCounters],
        now: Instant,
    ) -> BTreeMap<TableId, TableLoad> {
        let mut loads = BTreeMap::new();
        if let Some(Sample {
            at,
            counters: before,
        }) = &self.last
        {
            let secs = now.saturating_duration_since(*at).as_secs_f64().max(0.001);
            for c in counters {
                let Some((since, ops)) = before.get(&c.table) else {
                    continue; // new here
                };
                let Ok(t) = u32::try_from(c.table) else {
                    continue;
                };
                if *since != c.since {
                    continue; // a new slot: its counter started again
                }
                let done = c.ops.saturating_sub(*ops);
                loads.insert(
                    TableId(t),
                    TableLoad {
                        rate: (done as f64 / secs).round() as u64,
                        inodes: c.inodes,
                    },
                );
            }
        }
        self.last = Some(Sample {
            at: now,
            counters: counters
                .iter()
                .map(|c| (c.table, (c.since, c.ops)))
                .collect(),
        });
        loads
    }
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
    use std::time::Duration;

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

    fn counters(at: Instant, c: &[(u64, u64, u64, u64)]) -> Vec<TableCounters> {
        c.iter()
            .map(|(table, ops, since, inodes)| TableCounters {
                table: *table,
                ops: *ops,
                since: at + Duration::from_secs(*since),
                inodes: *inodes,
            })
            .collect()
    }

    #[test]
    fn a_sample_has_each_tables_rate_and_inodes() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut s = Sampler::default();
        // The first sample measures nothing.
        let first = counters(t0, &[(1, 500, 0, 20_000), (2, 0, 0, 3), (1 << 40, 7, 0, 1)]);
        assert_eq!(s.sample(&first, at(10)), loads(&[]));
        let second = counters(
            t0,
            &[(1, 1_000, 0, 20_000), (2, 50, 0, 3), (1 << 40, 9, 0, 1)],
        );
        assert_eq!(
            s.sample(&second, at(15)),
            loads(&[(1, 100, 20_000), (2, 10, 3)])
        );
    }

    /// The churn of the reverted first version: a busy table arrives
    /// here (a new slot, its counter from 0) shortly before a sample.
    /// Measured at once it weighed as idle — 40 operations in its first
    /// 0.4 s divided by the 5 s since the previous sample, or 0 when its
    /// counter started again below the one the previous sample saw (it
    /// was here before) — and made this server look light. It is left out
    /// (unknown to the coordinator) until a whole window was measured.
    #[test]
    fn a_table_new_here_is_published_only_once_measured_over_a_whole_window() {
        let t0 = Instant::now();
        let ms = |m| t0 + Duration::from_millis(m);
        let mut s = Sampler::default();
        let c = |ops_1: u64, since_1: u64, ops_2: u64| {
            vec![
                TableCounters {
                    table: 1,
                    ops: ops_1,
                    since: ms(since_1),
                    inodes: 5_000,
                },
                TableCounters {
                    table: 2,
                    ops: ops_2,
                    since: t0,
                    inodes: 10,
                },
            ]
        };
        s.sample(&c(9_000, 0, 0), ms(1_000));
        assert_eq!(
            s.sample(&c(10_000, 0, 0), ms(6_000)),
            loads(&[(1, 200, 5_000), (2, 0, 10)])
        );
        // Table 1 left and came back 0.4 s before this sample (a new
        // slot): not measured, not published.
        assert_eq!(
            s.sample(&c(40, 10_600, 0), ms(11_000)),
            loads(&[(2, 0, 10)])
        );
        // Measured over the next whole window: its rate again.
        assert_eq!(
            s.sample(&c(1_040, 10_600, 5), ms(16_000)),
            loads(&[(1, 200, 5_000), (2, 1, 10)])
        );
        // A split (a new slot) likewise, even when its counter passed the
        // old one meanwhile.
        assert_eq!(
            s.sample(&c(1_500, 20_000, 5), ms(21_000)),
            loads(&[(2, 0, 10)])
        );
        assert_eq!(
            s.sample(&c(2_500, 20_000, 5), ms(26_000)),
            loads(&[(1, 200, 5_000), (2, 0, 10)])
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
    fn the_servers_weight_is_the_coordinators() {
        assert_eq!(weight(&loads(&[(1, 100, 20_000), (2, 0, 999)])), 121 + 1);
        assert_eq!(weight(&loads(&[(1, u64::MAX, u64::MAX)])), u64::MAX);
    }

    /// The churn the first version of inode weighing showed in the
    /// process tests ("move t1 to b … (table 140, servers a 218, b 0)",
    /// then 0.2 s later "move t1 to a … (table 33, servers a 43, b 90)"),
    /// replayed with this module's sampler and the coordinator's rule:
    /// two servers sampling every 5 s (out of phase), tables of steady
    /// rates, the coordinator deciding every 100 ms on the figures
    /// published since each table's owner got it (a table without them is
    /// unknown, as `ClusterState::cluster_view` makes it), moves done at
    /// once. A table measured over part of a window at its new server
    /// weighed less than it does, and went back; measured whole, nothing
    /// ever goes back.
    #[test]
    fn tables_just_moved_are_not_weighed_by_part_of_a_window() {
        use sextant_cluster::coordinator::{decide, Action, ClusterView};
        use sextant_cluster::ids::{Epoch, Revision, ServerId};
        use sextant_cluster::server::Owner;
        let t0 = Instant::now();
        let rates: [u64; 4] = [140, 78, 40, 30];
        // Per table: owner, owner revision, slot start (ms), operations.
        let mut tables: Vec<(u32, u64, u64, f64)> = vec![(1, 1, 0, 0.0); rates.len()];
        let mut rev = 10;
        let mut samplers = [Sampler::default(), Sampler::default()];
        // Per server: the revision and figures it last published.
        let mut published: [Option<(u64, BTreeMap<TableId, TableLoad>)>; 2] = [None, None];
        let mut moves: Vec<(usize, u32, u32)> = Vec::new();
        for ms in (0..120_000u64).step_by(100) {
            for (t, (_, _, _, ops)) in tables.iter_mut().enumerate() {
                *ops += rates[t] as f64 / 10.0;
            }
            for s in 0..2u32 {
                if (ms + u64::from(s) * 2_500) % 5_000 != 0 {
                    continue;
                }
                let counters: Vec<TableCounters> = tables
                    .iter()
                    .enumerate()
                    .filter(|(_, (o, ..))| *o == s + 1)
                    .map(|(t, (_, _, since, ops))| TableCounters {
                        table: t as u64,
                        ops: *ops as u64,
                        since: t0 + Duration::from_millis(*since),
                        inodes: 0,
                    })
                    .collect();
                let loads = samplers[s as usize].sample(&counters, t0 + Duration::from_millis(ms));
                rev += 1;
                published[s as usize] = Some((rev, loads));
            }
            let mut view = ClusterView {
                members: [ServerId(1), ServerId(2)].into(),
                ..ClusterView::default()
            };
            for (t, (o, orev, ..)) in tables.iter().enumerate() {
                let id = TableId(t as u32);
                let owner = Owner {
                    server: ServerId(*o),
                    epoch: Epoch(1),
                };
                view.owners.insert(id, Some((owner, Revision(*orev))));
                let figures = published[*o as usize - 1]
                    .as_ref()
                    .filter(|(prev, _)| *prev > *orev)
                    .and_then(|(_, l)| l.get(&id));
                match figures {
                    Some(l) => {
                        view.rates.insert(id, l.rate);
                    }
                    None if published.iter().any(Option::is_some) => {
                        view.unknown.insert(id);
                    }
                    None => {}
                }
            }
            for a in decide(&view, 2) {
                if let Action::Move { table, to, .. } = a {
                    let t = &mut tables[table.0 as usize];
                    moves.push((table.0 as usize, t.0, to.0));
                    rev += 1;
                    *t = (to.0, rev, ms, 0.0);
                }
            }
        }
        assert!(!moves.is_empty());
        for (i, (t, from, to)) in moves.iter().enumerate() {
            assert!(
                !moves[i + 1..].contains(&(*t, *to, *from)),
                "table {t} moved back and forth: {moves:?}"
            );
        }
    }
}
