//! Test-only fault points, named in the environment variable
//! `SEXTANT_FAULT` (unset in production: then nothing here does anything).
//!
//! - `exit-after-commit:N` — the process exits at once (`_exit(86)`, no
//!   cleanup, like `kill -9`) right after the N-th exactly-once mutation
//!   (a first attempt with a client id, not a retry) is committed and
//!   durable, *before* its reply is sent. Used by the process-level test
//!   of exactly-once across a restart (crates/cli/tests/server.rs).
//!
//! - `exit-at:NAME` — the process exits the same way when it reaches the
//!   named step of a table's migration (the cluster's table host,
//!   `cluster/host.rs`): `drop-before` (asked to DROP, nothing written
//!   yet), `drop-after` (the table written back and its final manifest
//!   committed, the handover not yet done), `add-before` (asked to ADD a
//!   moved table, nothing loaded), `add-after` (loaded and its manifest
//!   committed, the shell not yet told); and of a BORROW
//!   (`cluster/placement.rs`): `borrow-granted` (every table an operation
//!   borrowed serves here, the operation not yet run again),
//!   `borrow-return` (the borrow is about to be RETURNed). Used by the
//!   migration and BORROW fault tests (crates/cli/tests/cluster.rs).
//!
//! - `stop-at:NAME` — at the same named steps, the process stops itself
//!   (SIGSTOP, the whole process, every thread) the first time it gets
//!   there, and carries on from there when it is sent SIGCONT: a server
//!   paused at an exact step for as long as the test likes (past its
//!   lease). Used by the BORROW pause tests (crates/cli/tests/cluster.rs).
//!   Also `completion-claimed` (`cluster/catalog.rs`): the claim on a dead
//!   log-less member's journal completion is made, the completion not yet
//!   decided (crates/cli/tests/logless_exit.rs); and `completion-write`
//!   (`cluster/catalog.rs`): the claimer found its claim still standing
//!   right before it writes the completion, and writes it when it carries
//!   on, checking nothing again (crates/cli/tests/logless_exit.rs).
//!
//!   And three steps of a search that is one server's part of a spread
//!   search (`SearchRequest.ranges` set, below its scope: not the scope
//!   root alone), for the tests of a part whose server stops mid-search
//!   (crates/cli/tests/search_silent.rs): `search-listing` (a listing,
//!   its stream open, nothing found yet), `search-hits` (a listing, right
//!   after its first batch of hits was sent), `search-totals` (a count or
//!   an aggregation, its stream open). The process stops half a second
//!   after it gets there, so that what it sent reaches the asker first.
//!
//! - `stale-drop-commit:N` — the engine's catalogue on etcd refuses the
//!   first N commits of a DROP's final manifest as `Stale`, sending
//!   nothing (what it answers when its map lags behind etcd). Used by the
//!   test of a DROP whose commit is refused (crates/cli/tests/cluster.rs).
//!
//! - `lose-release:N` — the first N attempts to release a claim on a
//!   log-less journal completion (`cluster/catalog.rs`) are lost, as when
//!   etcd does not answer them; the release is sent again until one gets
//!   through. Used by crates/cli/tests/logless_exit.rs.
//!
//! - `ticket-lifetime:SECS` — identity tickets this server issues
//!   (`auth::issue_ticket`) are good for SECS seconds instead of
//!   `auth::TICKET_LIFETIME` (300 s): only ever shorter — a larger SECS is
//!   300 s, 0 is 1 s. It changes nothing but the expiry written in the
//!   tickets it issues (so also when their sessions end). Used by the
//!   test of a long-lived client across several ticket lifetimes
//!   (crates/cli/tests/cluster.rs).
//!
//! - `refuse-tickets:N` — the first N identity-ticket proofs that pass
//!   every check on this server are refused all the same
//!   (UNAUTHENTICATED, counted as `ticket-fault`), as a holder refuses a
//!   ticket it cannot check; nothing else is refused. Used by the test of
//!   a client's fallback to its socket's server
//!   (crates/cli/tests/cluster.rs).
//!
//! - `add-no-space` — every ADD of a moved table fails as the engine
//!   fails it on a full disk (`JournalStopped { cause: NoSpace }`, what a
//!   log-less rejoin's new run meets), so that the server's leave on a
//!   disk failure at an ADD is seen on its own, without a real disk
//!   filling at the right moment. Used by
//!   `a_server_whose_add_meets_a_full_disk_leaves_and_the_table_stays_served`
//!   (crates/cli/tests/cluster.rs).
//!
//! - `search-rendezvous:N` — every search (the `Search` RPC) waits,
//!   before it runs, until N searches have arrived (itself included: the
//!   1st to Nth go on together, then the N+1st to 2Nth, ...); one that
//!   waits [`RENDEZVOUS_WAIT`] in vain fails with EIO. A test of the
//!   searches a command asks at once: `sextant du` and `stats` ask the
//!   starting point and the totals below it together
//!   (crates/cli/tests/stats_at_once.rs); asked one after the other, the
//!   first waits in vain.
//!
//! Read once, at first use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable naming a fault point.
pub const ENV: &str = "SEXTANT_FAULT";

/// `Some(n)`: exit after the n-th committed mutation.
fn exit_after_commit() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let n = v.strip_prefix("exit-after-commit:")?.parse().ok()?;
        tracing::warn!(fault = %v, "a test-only fault point is armed");
        Some(n)
    })
}

/// Called after an exactly-once mutation is durable, before its reply.
pub fn after_commit() {
    static COMMITTED: AtomicU64 = AtomicU64::new(0);
    let Some(n) = exit_after_commit() else {
        return;
    };
    if COMMITTED.fetch_add(1, Ordering::SeqCst) + 1 == n {
        eprintln!("{ENV}: exiting after commit {n} (test-only fault point)");
        // SAFETY: _exit(2) ends the process; nothing of ours runs after.
        unsafe { libc::_exit(86) };
    }
}

/// The step named after `prefix` in [`ENV`], if that fault is armed.
fn armed_step(prefix: &str) -> Option<String> {
    let v = std::env::var(ENV).ok()?;
    let name = v.strip_prefix(prefix)?.to_string();
    tracing::warn!(fault = %v, "a test-only fault point is armed");
    Some(name)
}

/// The migration step `exit-at:` names, if any.
fn exit_at() -> Option<&'static str> {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    AT.get_or_init(|| armed_step("exit-at:")).as_deref()
}

/// The step `stop-at:` names, if any.
fn stop_at() -> Option<&'static str> {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    AT.get_or_init(|| armed_step("stop-at:")).as_deref()
}

/// Called at the named step of a migration or BORROW; exits there, or
/// stops there the first time, if armed.
pub fn step(name: &str) {
    if exit_at() == Some(name) {
        eprintln!("{ENV}: exiting at {name} (test-only fault point)");
        // SAFETY: _exit(2) ends the process; nothing of ours runs after.
        unsafe { libc::_exit(86) };
    }
    static STOPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if stop_at() == Some(name) && !STOPPED.swap(true, Ordering::SeqCst) {
        eprintln!("{ENV}: stopping at {name} until SIGCONT (test-only fault point)");
        // SAFETY: raise(3) with a valid signal; SIGSTOP stops the whole
        // process until SIGCONT, then this call returns.
        unsafe { libc::raise(libc::SIGSTOP) };
        eprintln!("{ENV}: carrying on after {name}");
    }
}

/// Called by a search as it starts (`hits_sent` false) and after each
/// batch of hits it sent (`hits_sent` true): the search steps of
/// `stop-at:` (see the module docs), for a spread search's part only.
pub fn search_part(spec: &sextant_proto::search::SearchSpec, hits_sent: bool) {
    let Some(armed) = stop_at() else {
        return;
    };
    if spec.ranges.is_empty() || sextant_engine::search::plan(&spec.expr).max_depth == 0 {
        return;
    }
    let totals = spec.count_only || spec.group_by.is_some();
    let name = match (totals, hits_sent) {
        (true, false) => "search-totals",
        (false, false) => "search-listing",
        (false, true) => "search-hits",
        (true, true) => return,
    };
    if armed == name {
        std::thread::sleep(Duration::from_millis(500));
        step(name);
    }
}

/// `Some(n)`: refuse the first n DROP commits as stale.
fn stale_drop_commits() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let n = v.strip_prefix("stale-drop-commit:")?.parse().ok()?;
        tracing::warn!(fault = %v, "a test-only fault point is armed");
        Some(n)
    })
}

/// `Some(n)`: lose the first n releases of a completion claim.
fn lost_releases() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let n = v.strip_prefix("lose-release:")?.parse().ok()?;
        tracing::warn!(fault = %v, "a test-only fault point is armed");
        Some(n)
    })
}

/// Called by the catalogue before each attempt to release a completion
/// claim: `true` if armed and fewer than N were lost so far (lose it).
pub fn lose_release() -> bool {
    static LOST: AtomicU64 = AtomicU64::new(0);
    let Some(n) = lost_releases() else {
        return false;
    };
    LOST.fetch_add(1, Ordering::SeqCst) < n
}

/// `Some(secs)` asked by `ticket-lifetime:`.
fn ticket_lifetime_asked() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let n = v.strip_prefix("ticket-lifetime:")?.parse().ok()?;
        tracing::warn!(fault = %v, "a test-only fault point is armed");
        Some(n)
    })
}

/// The lifetime of the identity tickets this server issues: `default`
/// unless `ticket-lifetime:` is armed (then shorter, never longer).
pub fn ticket_lifetime(default: Duration) -> Duration {
    shortened(default, ticket_lifetime_asked())
}

/// `default`, or `asked` seconds if that is shorter (at least 1 s).
fn shortened(default: Duration, asked: Option<u64>) -> Duration {
    asked.map_or(default, |s| Duration::from_secs(s.max(1)).min(default))
}

/// `Some(n)`: refuse the first n identity-ticket proofs.
fn refused_tickets() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let n = v.strip_prefix("refuse-tickets:")?.parse().ok()?;
        tracing::warn!(fault = %v, "a test-only fault point is armed");
        Some(n)
    })
}

/// Called by the TCP interceptor on an identity ticket whose proof
/// passed every check: `true` if armed and fewer than N were refused so
/// far (refuse it).
pub fn refuse_ticket() -> bool {
    static REFUSED: AtomicU64 = AtomicU64::new(0);
    let Some(n) = refused_tickets() else {
        return false;
    };
    REFUSED.fetch_add(1, Ordering::SeqCst) < n
}

/// Called by the catalogue before it commits a DROP's final manifest:
/// `true` if armed and fewer than N were refused so far (refuse it).
pub fn refuse_drop_commit() -> bool {
    static REFUSED: AtomicU64 = AtomicU64::new(0);
    let Some(n) = stale_drop_commits() else {
        return false;
    };
    REFUSED.fetch_add(1, Ordering::SeqCst) < n
}

/// Whether `add-no-space` is armed.
fn adds_without_space() -> bool {
    static AT: OnceLock<bool> = OnceLock::new();
    *AT.get_or_init(|| {
        let armed = std::env::var(ENV).is_ok_and(|v| v == "add-no-space");
        if armed {
            tracing::warn!(fault = "add-no-space", "a test-only fault point is armed");
        }
        armed
    })
}

/// Called by the table host before an ADD loads a table: `true` if
/// `add-no-space` is armed — the ADD then fails as the engine fails it
/// when the disk is full (a log-less rejoin's new run, a completion's
/// retirement): the journal stopped for `NoSpace`.
pub fn add_without_space() -> bool {
    adds_without_space()
}

/// How long a search waits for the others of its rendezvous
/// (`search-rendezvous:N`).
pub const RENDEZVOUS_WAIT: Duration = Duration::from_secs(10);

/// `Some(n)`: `search-rendezvous:N`.
fn rendezvous_of() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let n = v.strip_prefix("search-rendezvous:")?.parse().ok()?;
        tracing::warn!(fault = %v, "a test-only fault point is armed");
        Some(n)
    })
}

/// Called by the `Search` RPC before the search runs (on its blocking
/// thread): with `search-rendezvous:N` armed, waits until this search's
/// group of N has arrived; `false` when it did not within
/// [`RENDEZVOUS_WAIT`] (the search then fails). `true` at once otherwise.
pub fn search_rendezvous() -> bool {
    static ARRIVED: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
    static CAME: std::sync::Condvar = std::sync::Condvar::new();
    let Some(n) = rendezvous_of().filter(|n| *n > 1) else {
        return true;
    };
    let Ok(mut arrived) = ARRIVED.lock() else {
        return false;
    };
    *arrived += 1;
    // This search's group ends at the next multiple of n.
    let group_end = arrived.div_ceil(n) * n;
    CAME.notify_all();
    let deadline = std::time::Instant::now() + RENDEZVOUS_WAIT;
    while *arrived < group_end {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        arrived = match CAME.wait_timeout(arrived, left) {
            Ok((a, _)) => a,
            Err(_) => return false,
        };
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_lifetime_is_only_ever_shortened() {
        let d = Duration::from_secs(300);
        assert_eq!(shortened(d, None), d);
        assert_eq!(shortened(d, Some(30)), Duration::from_secs(30));
        assert_eq!(shortened(d, Some(0)), Duration::from_secs(1));
        assert_eq!(shortened(d, Some(301)), d, "never longer");
        assert_eq!(shortened(d, Some(u64::MAX)), d, "never longer");
    }
}
