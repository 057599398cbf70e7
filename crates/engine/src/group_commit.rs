//! When the journal's syncer starts its next sync: the group-commit policy.
//!
//! Pure logic (no clock, no I/O): the syncer tells it what each sync did
//! and asks it, with the time since the last sync ended, how long to hold
//! the open batch before syncing.
//!
//! # Why hold at all
//!
//! Committers that wait for their record to be durable come back with
//! their next record a round trip after the sync that acknowledged them.
//! A syncer that starts a sync as soon as *anything* is pending takes the
//! first of them alone, and the rest wait a whole sync for the next one:
//! with P closed-loop committers and a sync of S, batches alternate
//! between ~1 and ~P−1 and throughput is half of P per S. Holding the
//! batch briefly right after a sync — until the committers it
//! acknowledged are back beside those already waiting, for at most half a
//! sync — lets them share one (PostgreSQL's `commit_delay` and MySQL's
//! `binlog_group_commit_sync_delay` are the fixed-delay versions of this).
//! Waiting only for as many as the last batch is not enough: with 4
//! committers it settles at 3 a sync, one always left for the next.
//!
//! Syncs shorter than [`MIN_SYNC_TO_HOLD`] are never held: a committer's
//! round trip is then as long as the sync it would share, and holding
//! measured slower (0.88× the creates/s with 4 clients on a 0.3 ms disk,
//! docs/BENCHMARKS.md) where it doubles them on a 7 ms one.
//!
//! # Invariants
//!
//! - A lone committer never waits: with a last batch of one record, the
//!   hold is zero.
//! - The hold ends no later than `min(S / 2, MAX_HOLD)` after the last
//!   sync ended, S being the recent sync time, so a record waits at most
//!   that long beyond what it would have waited anyway; a record that
//!   arrives after the window is synced at once.
//! - It adapts in one sync: the next hold compares with the batch just
//!   synced, so a burst does not make later, smaller batches wait long.

use std::time::Duration;

/// The longest the syncer holds a batch, however slow the disk.
pub const MAX_HOLD: Duration = Duration::from_millis(5);

/// Syncs faster than this (on average) are not held at all.
pub const MIN_SYNC_TO_HOLD: Duration = Duration::from_millis(1);

/// See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct GroupCommit {
    /// Records expected for the next sync: the last sync's, plus those
    /// already pending when it ended.
    expected: u32,
    /// Moving average of the time a batch took to write and sync.
    sync_time: Duration,
}

impl GroupCommit {
    /// How much longer to hold `pending` records, `since_sync` after the
    /// last sync ended. Zero: sync now.
    pub fn hold(&self, pending: u32, since_sync: Duration) -> Duration {
        if pending >= self.expected || self.sync_time < MIN_SYNC_TO_HOLD {
            return Duration::ZERO;
        }
        (self.sync_time / 2)
            .min(MAX_HOLD)
            .saturating_sub(since_sync)
    }

    /// A sync of `batch` records took `took` (write and sync); when it
    /// ended, `pending` records were waiting for the next.
    pub fn synced(&mut self, batch: u32, took: Duration, pending: u32) {
        self.expected = batch.saturating_add(pending);
        // 1/4 weight to the newest: steady, but a slower disk shows within
        // a few syncs.
        self.sync_time = if self.sync_time.is_zero() {
            took
        } else {
            (self.sync_time * 3 + took) / 4
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn after(batch: u32, took: Duration) -> GroupCommit {
        let mut g = GroupCommit::default();
        g.synced(batch, took, 0);
        g
    }

    #[test]
    fn the_first_sync_and_a_lone_committer_never_wait() {
        assert_eq!(
            GroupCommit::default().hold(1, Duration::ZERO),
            Duration::ZERO
        );
        assert_eq!(after(1, 7 * MS).hold(1, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn holds_for_the_rest_of_the_last_batch_for_half_a_sync() {
        let g = after(16, 6 * MS);
        assert_eq!(g.hold(3, Duration::ZERO), 3 * MS);
        assert_eq!(g.hold(3, 2 * MS), MS);
        assert_eq!(g.hold(3, 4 * MS), Duration::ZERO, "window over");
        assert_eq!(g.hold(16, Duration::ZERO), Duration::ZERO, "all back");
        assert_eq!(g.hold(40, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn fast_syncs_are_never_held() {
        assert_eq!(after(16, MS / 2).hold(1, Duration::ZERO), Duration::ZERO);
        assert_eq!(after(16, 2 * MS).hold(1, Duration::ZERO), MS);
    }

    #[test]
    fn the_hold_is_capped_however_slow_the_disk() {
        assert_eq!(after(8, 100 * MS).hold(1, Duration::ZERO), MAX_HOLD);
    }

    #[test]
    fn adapts_to_the_batch_just_synced() {
        let mut g = after(1000, 4 * MS);
        assert_eq!(g.hold(16, Duration::ZERO), 2 * MS);
        g.synced(16, 4 * MS, 0);
        assert_eq!(g.hold(16, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn waits_for_the_acknowledged_beside_those_already_pending() {
        // A sync of 3 ended with 1 record waiting: 4 committers in all.
        let mut g = GroupCommit::default();
        g.synced(3, 6 * MS, 1);
        assert_eq!(g.hold(3, Duration::ZERO), 3 * MS);
        assert_eq!(g.hold(4, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn the_sync_time_is_a_moving_average() {
        let mut g = after(2, 8 * MS);
        g.synced(2, Duration::ZERO, 0);
        // (3 × 8 + 0) / 4 = 6 ms: holds 3 ms.
        assert_eq!(g.hold(1, Duration::ZERO), 3 * MS);
    }
}
