//! R1: a server's own view of its membership lease.
//!
//! etcd's TTL is not a time bound for the *server*: etcd counts a lease's
//! time from when *it* received the last keep-alive, and after an etcd
//! restart or leader change it grants a whole TTL again (measured: a 6 s
//! lease lived 11.6 s across a restart). Neither ever makes a lease end
//! *earlier* than `receive time + TTL`. So a server that measures from the
//! time it *sent* the keep-alive etcd acknowledged — always before etcd
//! received it — and subtracts a margin for clock-rate drift, stops
//! believing in its lease before etcd lets it go, and before anyone can be
//! given its tables (R3). A keep-alive that is lost, or acknowledged late,
//! never extends the timer past what was acknowledged.
//!
//! Invariant: `valid_until` only grows, and never exceeds
//! `send time of an acknowledged keep-alive + TTL − margin`.

use crate::ids::Millis;

#[derive(Clone, Debug)]
pub struct LeaseTimer {
    margin_ms: u64,
    valid_until: Option<Millis>,
}

impl LeaseTimer {
    pub fn new(margin_ms: u64) -> LeaseTimer {
        LeaseTimer {
            margin_ms,
            valid_until: None,
        }
    }

    /// etcd acknowledged a keep-alive (or the grant) that was *sent* at
    /// `sent_at`, with `ttl_ms` left.
    pub fn acknowledged(&mut self, sent_at: Millis, ttl_ms: u64) {
        let until = Millis(
            sent_at
                .0
                .saturating_add(ttl_ms)
                .saturating_sub(self.margin_ms),
        );
        if self.valid_until.is_none_or(|v| until > v) {
            self.valid_until = Some(until);
        }
    }

    /// May the server act as the lease's holder at `now`?
    pub fn valid(&self, now: Millis) -> bool {
        self.valid_until.is_some_and(|v| now < v)
    }

    /// Milliseconds of validity left at `now` (0 when expired): the
    /// metric `sextant_lease_margin`.
    pub fn remaining(&self, now: Millis) -> u64 {
        self.valid_until.map_or(0, |v| v.0.saturating_sub(now.0))
    }

    /// Forgets the lease (a new one must be granted).
    pub fn reset(&mut self) {
        self.valid_until = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_from_the_send_time_minus_the_margin() {
        let mut t = LeaseTimer::new(500);
        assert!(!t.valid(Millis(0)));
        t.acknowledged(Millis(1_000), 6_000);
        assert!(t.valid(Millis(6_499)));
        assert!(!t.valid(Millis(6_500)));
        assert_eq!(t.remaining(Millis(6_000)), 500);
    }

    #[test]
    fn a_late_acknowledgement_of_an_old_keepalive_never_shortens_or_stretches() {
        let mut t = LeaseTimer::new(0);
        t.acknowledged(Millis(5_000), 6_000);
        // An older keep-alive acknowledged after a newer one.
        t.acknowledged(Millis(2_000), 6_000);
        assert!(t.valid(Millis(10_999)) && !t.valid(Millis(11_000)));
    }
}
