//! Leases on a server's directory records, between the servers of a
//! cluster (issue 21's search, `/work/notes`' foreign-dirs design, cut down
//! to what a search needs).
//!
//! A search on server A keeps the directory records it read from the other
//! servers (`crate::peers::ForeignCache`), valid while every server's
//! directory epoch is what it was when they were read. Without leases, A
//! asks every other server for its epoch before each search: one small call
//! per server per search, most of what a spread search with a scope below
//! `/` costs more than one server's. With them:
//!
//! - **Grant.** A server S answering an epoch check that names the asker
//!   (`DirChainRequest.lease_for`) grants it a lease of [`LEASE`] on its
//!   directory records ([`Granted::grant`], recorded *before* S reads the
//!   epoch it replies with).
//! - **Hold.** A counts the lease from when it *sent* the check, [`MARGIN`]
//!   shorter ([`Held::install`]); while it is live, A takes S's epoch as the
//!   one the lease was granted at, without asking.
//! - **Revoke before acknowledging.** A mutation on S that advanced S's
//!   directory epoch (a directory renamed, removed, chmod-ed or chown-ed
//!   there, or a table's journal replayed) is acknowledged only once every
//!   lease S granted that was live when the change committed is revoked
//!   (`RevokeDirs`, answered) or has run out ([`DirLeases::settle`]); a
//!   holder that does not answer costs that change at most one [`LEASE`].
//! - **Renew in use.** A lease that checks are using is asked again
//!   before it runs out: a check that finds one with less than
//!   [`RENEW_WITHIN`] left (or none live) starts a renewal in the
//!   background (`Peers::renew_soon`: the same epoch check, on a task of
//!   its own — never a call on the request's path) and goes on under the
//!   lease it has. The renewal is an ordinary check: the grantor records
//!   the grant before it reads its epoch, and the holder installs it only
//!   as [`Held::install`] allows (no revocation since it was sent), so a
//!   lease is never extended but by its grantor, and a revocation fences a
//!   renewal in flight as it fences any check. Without it, a lease in
//!   continuous use lapsed every [`LEASE`] − [`MARGIN`] wherever the checks
//!   found what they needed in the kept records and this server's tables
//!   (no call, so no renewal), and each check then walked without them
//!   (BENCHMARKS, "a path-limited key's leases renewed in use").
//! - **Drop.** A revocation makes A drop every lease it holds, whoever
//!   granted it ([`Held::revoke_all`]; directory changes are rare next to
//!   searches), and no check sent before it may install one.
//! - **Restarts.** A new incarnation does not know what its predecessor
//!   granted: its first round within [`LEASE`] of its start also revokes at
//!   every server of the route map (or waits until [`LEASE`] after the
//!   start for those that do not answer).
//!
//! So, as with the per-search check: a directory change acknowledged before
//! a search starts is never seen by that search as it was before. (Between
//! a change's commit and its acknowledgement, a search elsewhere may still
//! see the old record — the change is not acknowledged yet — as it could
//! before.) A table that moves keeps this: the server that changes one of
//! its directories revokes, and a holder's cache is valid only with a live
//! lease from every server of its map. Changes on a server the holder's map
//! does not name yet are as uncovered as they were with the per-search
//! check.
//!
//! [`Granted`] and [`Held`] are pure (explicit instants), tested
//! exhaustively below; [`DirLeases`] adds the locks and the calls.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a lease lasts, by the grantor's clock from when it recorded
/// the grant.
pub const LEASE: Duration = Duration::from_secs(2);
/// A holder counts its lease this much shorter (clocks run at slightly
/// different rates; the grant is recorded after the request was sent).
pub const MARGIN: Duration = Duration::from_millis(250);
/// A lease in use is renewed when less than this is left of it: half of
/// what a holder counts ([`LEASE`] − [`MARGIN`]), so a renewal has that
/// long to be answered before the lease lapses.
pub const RENEW_WITHIN: Duration =
    Duration::from_millis((LEASE.as_millis() as u64 - MARGIN.as_millis() as u64) / 2);
/// Renewals start at most this often (a grantor that answers without a
/// lease, or not at all, is not asked in a loop).
pub const RENEW_GAP: Duration = Duration::from_millis(100);

/// Whether this server grants leases: yes, unless `SEXTANT_DIR_LEASES=0`
/// (then every search asks every other server for its epoch, as before
/// leases; benchmarks compare both in one run; read once).
pub fn granting() -> bool {
    static GRANTING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GRANTING.get_or_init(|| std::env::var("SEXTANT_DIR_LEASES").map_or(true, |v| v != "0"))
}

/// Whether this server renews the leases its checks use before they
/// lapse (see the module docs): yes, unless `SEXTANT_DIR_LEASE_RENEW=0`
/// (then a lease is asked again only by a check that found it out, as
/// before; benchmarks compare both; read once).
pub fn renewing_in_use() -> bool {
    static RENEWING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RENEWING.get_or_init(|| std::env::var("SEXTANT_DIR_LEASE_RENEW").map_or(true, |v| v != "0"))
}

/// Leases a server granted, by the holder's address.
#[derive(Debug, Default)]
pub struct Granted {
    until: HashMap<String, Instant>,
}

impl Granted {
    /// Grants `to` a lease from `now`: what the reply says it lasts.
    pub fn grant(&mut self, to: &str, now: Instant) -> Duration {
        let until = now + LEASE;
        let slot = self.until.entry(to.to_string()).or_insert(until);
        *slot = (*slot).max(until);
        LEASE
    }

    /// The leases live at `now`, with their ends; run-out ones are
    /// forgotten.
    pub fn live(&mut self, now: Instant) -> Vec<(String, Instant)> {
        self.until.retain(|_, until| *until > now);
        let mut v: Vec<(String, Instant)> =
            self.until.iter().map(|(a, u)| (a.clone(), *u)).collect();
        v.sort();
        v
    }

    /// The lease of `to` that ended at `until` is answered for: forgotten,
    /// unless it was granted again since (a later end).
    pub fn answered(&mut self, to: &str, until: Instant) {
        if self.until.get(to).is_some_and(|u| *u <= until) {
            self.until.remove(to);
        }
    }
}

/// Leases a server holds on other servers' directory records, by the
/// grantor's address.
#[derive(Debug, Default)]
pub struct Held {
    leases: HashMap<String, HeldLease>,
    /// Revocations received: a check sent before one installs nothing.
    revocations: u64,
}

#[derive(Debug, Clone, Copy)]
struct HeldLease {
    valid_until: Instant,
    /// The grantor's (incarnation, directory epoch) at the grant.
    stamp: (u64, u64),
}

impl Held {
    /// What a check takes before it is sent ([`Held::install`]).
    pub fn ticket(&self) -> u64 {
        self.revocations
    }

    /// The stamp of a lease from `from` live at `now`.
    pub fn live(&self, from: &str, now: Instant) -> Option<(u64, u64)> {
        self.leases
            .get(from)
            .filter(|l| l.valid_until > now)
            .map(|l| l.stamp)
    }

    /// Whether the lease from `from` should be renewed at `now`: none is
    /// live, or less than [`RENEW_WITHIN`] is left of it.
    pub fn due(&self, from: &str, now: Instant) -> bool {
        self.leases
            .get(from)
            .is_none_or(|l| l.valid_until <= now + RENEW_WITHIN)
    }

    /// Installs the lease of `lease` that `from` granted at `stamp` in
    /// reply to a check sent at `sent` with `ticket`: not when a
    /// revocation came since the check was sent, nor one too short to
    /// outlast [`MARGIN`]. Whether it was installed.
    pub fn install(
        &mut self,
        from: &str,
        stamp: (u64, u64),
        sent: Instant,
        lease: Duration,
        ticket: u64,
    ) -> bool {
        if ticket != self.revocations || lease <= MARGIN || stamp.0 == 0 {
            return false;
        }
        let valid_until = sent + (lease - MARGIN);
        self.leases
            .insert(from.to_string(), HeldLease { valid_until, stamp });
        true
    }

    /// A revocation: every lease held is dropped, and checks in flight
    /// install none.
    pub fn revoke_all(&mut self) {
        self.revocations += 1;
        self.leases.clear();
    }
}

/// Both sides, with their locks, for one server.
pub struct DirLeases {
    granted: parking_lot::Mutex<Granted>,
    /// The leases this server holds.
    pub held: parking_lot::Mutex<Held>,
    /// Every lease granted before the directory epoch reached this is
    /// answered for.
    revoked_through: AtomicU64,
    /// One revocation round at a time.
    round: tokio::sync::Mutex<()>,
    started: Instant,
    /// Whether the round after a start revoked at every server of the map.
    predecessor_revoked: std::sync::atomic::AtomicBool,
    /// A renewal in flight ([`DirLeases::begin_renewal`]).
    renewing: std::sync::atomic::AtomicBool,
    /// When the last renewal began, in µs after `started` (+1; 0: none).
    renewed_at: AtomicU64,
}

/// Revocations sent ([`DirLeases::settle`]) and received.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RoundStats {
    pub asked: usize,
    pub answered: usize,
}

impl DirLeases {
    /// For a server whose directory epoch is `epoch` now.
    pub fn new(epoch: u64) -> DirLeases {
        DirLeases {
            granted: parking_lot::Mutex::new(Granted::default()),
            held: parking_lot::Mutex::new(Held::default()),
            revoked_through: AtomicU64::new(epoch),
            round: tokio::sync::Mutex::new(()),
            started: Instant::now(),
            predecessor_revoked: std::sync::atomic::AtomicBool::new(false),
            renewing: std::sync::atomic::AtomicBool::new(false),
            renewed_at: AtomicU64::new(0),
        }
    }

    /// Whether a renewal of leases in use may begin at `now`: none is in
    /// flight and none began within [`RENEW_GAP`]. `true` makes this
    /// caller the renewal, which ends it with [`DirLeases::end_renewal`].
    pub fn begin_renewal(&self, now: Instant) -> bool {
        if self.renewing.swap(true, Ordering::AcqRel) {
            return false;
        }
        let at = u64::try_from(now.saturating_duration_since(self.started).as_micros())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.renewed_at.load(Ordering::Acquire);
        if last != 0 && at.saturating_sub(last) < RENEW_GAP.as_micros() as u64 {
            self.renewing.store(false, Ordering::Release);
            return false;
        }
        self.renewed_at.store(at, Ordering::Release);
        true
    }

    /// The renewal [`DirLeases::begin_renewal`] began is over (answered
    /// or not): the next may begin.
    pub fn end_renewal(&self) {
        self.renewing.store(false, Ordering::Release);
    }

    /// Grants `to` a lease: call before reading the epoch the reply
    /// carries.
    pub fn grant(&self, to: &str) -> Duration {
        metrics::counter!("sextant_dir_leases_granted_total").increment(1);
        self.granted.lock().grant(to, Instant::now())
    }

    /// Whether a mutation that left the directory epoch at `epoch` must
    /// wait for [`DirLeases::settle`].
    pub fn unsettled(&self, epoch: u64) -> bool {
        epoch > self.revoked_through.load(Ordering::Acquire)
    }

    /// Before acknowledging a mutation: when the directory epoch (read by
    /// `epoch`, after the mutation committed) advanced past what was
    /// revoked, revokes every live lease with `revoke` (address, epoch →
    /// answered) and waits for each answer or the lease's end. `everyone`:
    /// the other servers' addresses, revoked at as well by this
    /// incarnation's first round within [`LEASE`] of its start.
    pub async fn settle<F, Fut>(&self, epoch: impl Fn() -> u64, everyone: Vec<String>, revoke: F)
    where
        F: Fn(String, u64) -> Fut,
        Fut: Future<Output = bool> + Send + 'static,
    {
        if !self.unsettled(epoch()) {
            return;
        }
        let _round = self.round.lock().await;
        // Read after the lock: a round that ran meanwhile may have
        // covered it, and this one covers every change committed so far.
        let through = epoch();
        if !self.unsettled(through) {
            return;
        }
        let now = Instant::now();
        let mut live = self.granted.lock().live(now);
        let first_after_start =
            now < self.started + LEASE && !self.predecessor_revoked.load(Ordering::Acquire);
        if first_after_start {
            let until = self.started + LEASE;
            for a in everyone {
                if !live.iter().any(|(l, _)| *l == a) {
                    live.push((a, until));
                }
            }
        }
        let asked = live.len();
        let mut waits = tokio::task::JoinSet::new();
        for (address, until) in live {
            let call = revoke(address.clone(), through);
            waits.spawn(async move {
                let left = until.saturating_duration_since(Instant::now());
                let answered = matches!(tokio::time::timeout(left, call).await, Ok(true));
                if !answered {
                    // Unanswered: it holds nothing once the lease is out.
                    tokio::time::sleep_until(until.into()).await;
                }
                (address, until, answered)
            });
        }
        let mut done = Vec::with_capacity(asked);
        while let Some(d) = waits.join_next().await {
            match d {
                Ok(d) => done.push(d),
                // A wait that panicked answered for nothing: the round
                // cannot say the lease is out, so it waits for the
                // longest one to be.
                Err(_) => {
                    tokio::time::sleep_until((now + LEASE).into()).await;
                }
            }
        }
        let answered = done.iter().filter(|d| d.2).count();
        {
            let mut g = self.granted.lock();
            for (address, until, _) in &done {
                g.answered(address, *until);
            }
        }
        if first_after_start {
            self.predecessor_revoked.store(true, Ordering::Release);
            tracing::info!(
                asked,
                answered,
                "the first directory change since this server started revoked at every server"
            );
        }
        if asked > 0 {
            metrics::counter!("sextant_dir_lease_revocations_total").increment(asked as u64);
            if answered < asked {
                tracing::info!(
                    asked,
                    answered,
                    "a directory change waited for leases of servers that did not answer to run out"
                );
            }
        }
        self.revoked_through.fetch_max(through, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_lasts_the_lease_and_a_later_one_extends_it() {
        let t0 = Instant::now();
        let mut g = Granted::default();
        assert_eq!(g.grant("a", t0), LEASE);
        assert_eq!(g.live(t0), vec![("a".to_string(), t0 + LEASE)]);
        g.grant("a", t0 + Duration::from_secs(1));
        assert_eq!(
            g.live(t0 + LEASE),
            vec![("a".to_string(), t0 + Duration::from_secs(3))]
        );
        assert!(g.live(t0 + Duration::from_secs(3)).is_empty());
    }

    #[test]
    fn an_answered_lease_is_forgotten_unless_granted_again_since() {
        let t0 = Instant::now();
        let mut g = Granted::default();
        g.grant("a", t0);
        g.grant("b", t0);
        let live = g.live(t0);
        // b asks again while a round revokes: its new lease stays.
        g.grant("b", t0 + Duration::from_millis(10));
        for (a, u) in live {
            g.answered(&a, u);
        }
        assert_eq!(
            g.live(t0 + Duration::from_millis(20)),
            vec![("b".to_string(), t0 + Duration::from_millis(10) + LEASE)]
        );
    }

    #[test]
    fn a_held_lease_ends_a_margin_before_the_grant_counted_from_the_send() {
        let sent = Instant::now();
        let mut h = Held::default();
        let ticket = h.ticket();
        assert!(h.install("s", (7, 3), sent, LEASE, ticket));
        assert_eq!(
            h.live("s", sent + LEASE - MARGIN - Duration::from_millis(1)),
            Some((7, 3))
        );
        assert_eq!(h.live("s", sent + LEASE - MARGIN), None);
        assert_eq!(h.live("t", sent), None);
    }

    #[test]
    fn a_revocation_drops_every_lease_and_fences_checks_in_flight() {
        let sent = Instant::now();
        let mut h = Held::default();
        let before = h.ticket();
        assert!(h.install("s", (7, 3), sent, LEASE, before));
        assert!(h.install("t", (8, 1), sent, LEASE, before));
        // A check to s is in flight when t revokes.
        let in_flight = h.ticket();
        h.revoke_all();
        assert_eq!(h.live("s", sent), None);
        assert_eq!(h.live("t", sent), None);
        assert!(!h.install("s", (7, 3), sent, LEASE, in_flight));
        assert_eq!(h.live("s", sent), None);
        // One sent after it installs.
        assert!(h.install("s", (7, 4), sent, LEASE, h.ticket()));
        assert_eq!(h.live("s", sent), Some((7, 4)));
    }

    #[test]
    fn a_lease_is_due_for_renewal_with_less_than_half_left_or_none() {
        assert_eq!(RENEW_WITHIN * 2, LEASE - MARGIN);
        let sent = Instant::now();
        let mut h = Held::default();
        assert!(h.due("s", sent));
        assert!(h.install("s", (7, 3), sent, LEASE, h.ticket()));
        assert!(!h.due("s", sent));
        let half = sent + RENEW_WITHIN;
        assert!(!h.due("s", half - Duration::from_millis(1)));
        assert!(h.due("s", half));
        assert!(h.live("s", half).is_some());
        assert!(h.due("s", sent + LEASE));
        h.revoke_all();
        assert!(h.due("s", sent));
    }

    #[test]
    fn one_renewal_at_a_time_and_not_more_often_than_the_gap() {
        let leases = DirLeases::new(1);
        let t0 = leases.started + Duration::from_secs(1);
        assert!(leases.begin_renewal(t0));
        assert!(!leases.begin_renewal(t0 + RENEW_GAP * 3));
        leases.end_renewal();
        assert!(!leases.begin_renewal(t0 + RENEW_GAP / 2));
        assert!(leases.begin_renewal(t0 + RENEW_GAP));
        leases.end_renewal();
    }

    #[test]
    fn no_lease_from_an_old_server_or_a_too_short_grant() {
        let sent = Instant::now();
        let mut h = Held::default();
        assert!(!h.install("s", (0, 3), sent, LEASE, h.ticket()));
        assert!(!h.install("s", (1, 3), sent, MARGIN, h.ticket()));
        assert!(!h.install("s", (1, 3), sent, Duration::ZERO, h.ticket()));
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn a_round_revokes_every_live_grant_and_only_when_the_epoch_moved() {
        runtime().block_on(async {
            let leases = DirLeases::new(5);
            leases.predecessor_revoked.store(true, Ordering::Release);
            leases.grant("a:1");
            leases.grant("b:1");
            let asked = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
            let revoke = |a: String, e: u64| {
                asked.lock().push((a, e));
                async { true }
            };
            // Unmoved: nothing asked.
            leases.settle(|| 5, Vec::new(), revoke).await;
            assert!(asked.lock().is_empty());
            leases.settle(|| 6, Vec::new(), revoke).await;
            assert_eq!(
                *asked.lock(),
                vec![("a:1".to_string(), 6), ("b:1".to_string(), 6)]
            );
            assert!(!leases.unsettled(6));
            // Answered leases are forgotten: the next change asks no one.
            asked.lock().clear();
            leases.settle(|| 7, Vec::new(), revoke).await;
            assert!(asked.lock().is_empty());
        });
    }

    #[test]
    fn an_unanswered_grant_is_waited_out() {
        runtime().block_on(async {
            tokio::time::pause();
            let leases = DirLeases::new(1);
            leases.predecessor_revoked.store(true, Ordering::Release);
            leases.grant("dead:1");
            let t0 = tokio::time::Instant::now();
            leases
                .settle(|| 2, Vec::new(), |_a, _e| async { false })
                .await;
            assert!(tokio::time::Instant::now() - t0 >= LEASE - Duration::from_millis(50));
        });
    }

    #[test]
    fn the_first_round_after_a_start_revokes_at_every_server() {
        runtime().block_on(async {
            let leases = DirLeases::new(1);
            let asked = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
            let revoke = |a: String, _e: u64| {
                asked.lock().push(a);
                async { true }
            };
            let everyone = vec!["x:1".to_string(), "y:1".to_string()];
            leases.settle(|| 2, everyone.clone(), revoke).await;
            assert_eq!(*asked.lock(), everyone);
            asked.lock().clear();
            leases.settle(|| 3, everyone, revoke).await;
            assert!(asked.lock().is_empty());
        });
    }
}
