//! The names this mount told the kernel do not exist, with a timeout (its
//! negative dentries), so that the watcher's reset can drop them too.
//!
//! A negative entry has no node (node id 0): [`crate::nodes`] records the
//! names of nodes only, and a reset ([`crate::watch`]: a stream opened or
//! reopened, notices lost, a server left) invalidates what it records.
//! A name created elsewhere while no stream reported it (before the first
//! stream opened, while one was broken) would otherwise stay "no such
//! name" here for the whole entry timeout.
//!
//! Invariants:
//! - A negative entry is given a nonzero timeout only if [`Absent::record`]
//!   said so: it is then recorded until the kernel's dentry has expired
//!   (its timeout plus [`SLACK`]), or until a reset takes it.
//! - [`Absent::reset`] moves the reset generation and takes every record
//!   under one lock; [`Absent::record`] checks the generation read before
//!   the lookup's request was sent under the same lock. So a reply read
//!   before a reset is either recorded before it (and invalidated by it)
//!   or answered with timeout 0 — never cached unrecorded.
//! - The same generation guards the names of nodes (`SextantFs::entry`):
//!   one recorded on its node after a reset looked at the nodes is given
//!   timeout 0 ([`Absent::generation`] read before the request, compared
//!   after the name is recorded; a reset moves it before it looks).
//! - Bounded: at most [`MAX_NAMES`] records (expired ones go first); when
//!   full, negatives are not cached (timeout 0).
//! - Pure bookkeeping: no I/O.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Most names recorded at once.
pub const MAX_NAMES: usize = 65536;

/// How long past its timeout a record is kept: the kernel starts the
/// timeout when the reply reaches it, after the record is made.
pub const SLACK: Duration = Duration::from_secs(1);

/// A name recorded: its parent's node id, the name, and until when the
/// kernel may hold it.
type Record = (Instant, u64, Box<[u8]>);

/// See the module docs.
#[derive(Default)]
pub struct Absent {
    /// In the order recorded (so in order of expiry: one timeout for all).
    names: Mutex<VecDeque<Record>>,
    /// Moved by each reset, under `names`' lock.
    resets: AtomicU64,
}

impl Absent {
    /// The reset generation: read before a lookup's request is sent.
    pub fn generation(&self) -> u64 {
        self.resets.load(Ordering::Acquire)
    }

    /// May `name` in `parent` be answered "no such name" for `ttl`, the
    /// lookup's request sent at reset generation `sent`? If so, it is
    /// recorded (at time `now`) for the next reset to drop.
    pub fn record(&self, parent: u64, name: &[u8], sent: u64, ttl: Duration, now: Instant) -> bool {
        let mut names = self.names.lock();
        if self.resets.load(Ordering::Acquire) != sent {
            return false;
        }
        while names.front().is_some_and(|(until, _, _)| *until <= now) {
            names.pop_front();
        }
        if names.len() >= MAX_NAMES {
            return false;
        }
        names.push_back((now + ttl + SLACK, parent, Box::from(name)));
        true
    }

    /// A reset: moves the generation and takes every name recorded (the
    /// kernel may hold each; some have expired there, which is harmless).
    pub fn reset(&self) -> Vec<(u64, Box<[u8]>)> {
        let mut names = self.names.lock();
        self.resets.fetch_add(1, Ordering::AcqRel);
        names.drain(..).map(|(_, p, n)| (p, n)).collect()
    }

    /// Names recorded (for tests).
    pub fn len(&self) -> usize {
        self.names.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn a_reset_takes_every_name_and_refuses_replies_read_before_it() {
        let a = Absent::default();
        let now = Instant::now();
        let sent = a.generation();
        assert!(a.record(1, b"x", sent, TTL, now));
        assert!(a.record(1, b"y", sent, TTL, now));
        let late = a.generation();
        let taken = a.reset();
        assert_eq!(
            taken,
            vec![(1, Box::from(&b"x"[..])), (1, Box::from(&b"y"[..]))]
        );
        assert!(a.is_empty());
        assert!(
            !a.record(1, b"z", late, TTL, now),
            "a lookup sent before the reset is not cached"
        );
        assert!(a.is_empty());
        assert!(
            a.record(1, b"z", a.generation(), TTL, now),
            "one sent after"
        );
    }

    #[test]
    fn expired_names_go_and_the_bound_holds() {
        let a = Absent::default();
        let t0 = Instant::now();
        let g = a.generation();
        for i in 0..MAX_NAMES as u64 {
            assert!(a.record(i, b"n", g, TTL, t0));
        }
        assert!(!a.record(0, b"m", g, TTL, t0), "full: not cached");
        assert_eq!(a.len(), MAX_NAMES);
        assert!(
            !a.record(0, b"m", g, TTL, t0 + TTL),
            "not yet expired: the slack"
        );
        assert!(a.record(0, b"m", g, TTL, t0 + TTL + SLACK), "expired: room");
        assert_eq!(a.len(), 1);
    }
}
