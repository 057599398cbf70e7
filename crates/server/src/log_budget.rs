//! A budget of log lines per second for events a client can cause at will.
//!
//! Some WARN lines are written because of what a client sent (a forged
//! claim, a stale retry): a client that sends such requests by the million
//! must not fill the server's log. A [`LineBudget`] lets through at most
//! `per_second` lines in each one-second window and counts the others; the
//! next line let through carries how many were held back since the last
//! one, so nothing is lost from the count (the metrics count every event).
//!
//! Invariants: in any window that starts at a line let through, at most
//! `per_second` lines are let through; the numbers handed out as
//! "suppressed" add up to every call refused, each counted once. The
//! decision is pure ([`Window::take`], time passed in) so it is tested
//! without a clock.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// A rate limit on log lines, shared by every thread that writes them.
pub struct LineBudget {
    per_second: u32,
    window: Mutex<Window>,
}

impl LineBudget {
    /// A budget of `per_second` lines (usable in a `static`).
    pub const fn new(per_second: u32) -> Self {
        LineBudget {
            per_second,
            window: Mutex::new(Window {
                start: None,
                written: 0,
                suppressed: 0,
            }),
        }
    }

    /// `Some(lines held back before this one)` if a line may be written
    /// now; `None` (counted) if this second's budget is spent.
    pub fn slot(&self) -> Option<u64> {
        self.window.lock().take(Instant::now(), self.per_second)
    }
}

/// One second's account: when it began, lines written in it, and lines
/// held back since the last line written.
#[derive(Debug)]
struct Window {
    start: Option<Instant>,
    written: u32,
    suppressed: u64,
}

impl Window {
    fn take(&mut self, now: Instant, per_second: u32) -> Option<u64> {
        if self
            .start
            .is_none_or(|start| now.saturating_duration_since(start) >= Duration::from_secs(1))
        {
            self.start = Some(now);
            self.written = 0;
        }
        if self.written >= per_second {
            self.suppressed += 1;
            return None;
        }
        self.written += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Window {
        Window {
            start: None,
            written: 0,
            suppressed: 0,
        }
    }

    #[test]
    fn at_most_the_budget_per_second_and_every_refusal_is_counted_once() {
        let t0 = Instant::now();
        let mut w = fresh();
        let mut let_through = 0;
        let mut reported = 0;
        // 10,000 calls in the first 999 ms, then one a second later.
        for i in 0..10_000u64 {
            if let Some(s) = w.take(t0 + Duration::from_micros(i * 99), 20) {
                let_through += 1;
                reported += s;
            }
        }
        assert_eq!(let_through, 20);
        assert_eq!(reported, 0);
        let next = w.take(t0 + Duration::from_millis(1_500), 20);
        assert_eq!(
            next,
            Some(10_000 - 20),
            "the held-back lines go with the next line written"
        );
        assert_eq!(w.take(t0 + Duration::from_millis(1_501), 20), Some(0));
    }

    #[test]
    fn a_clock_that_goes_back_does_not_open_a_new_window() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut w = fresh();
        for _ in 0..3 {
            assert!(w.take(t0, 3).is_some());
        }
        assert_eq!(w.take(t0 - Duration::from_secs(5), 3), None);
    }
}
