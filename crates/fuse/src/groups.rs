//! The caller's supplementary groups, cached briefly per process.
//!
//! FUSE tells the mount a request's uid, gid and pid but not the caller's
//! supplementary groups; the server needs them for its permission checks.
//! They are read from `Groups:` in `/proc/<pid>/status` — a file read per
//! request without this cache.
//!
//! Correctness: a process can change its groups (`setgroups`). An entry is
//! used only for the same (pid, uid, gid) and for at most the cache's TTL
//! ([`DEFAULT_TTL`], 1 s) after it was read, so:
//! - a process that drops or gains groups *and* changes uid or gid (the
//!   usual privilege drop: `setgroups` then `setgid`/`setuid`) is seen with
//!   its new groups at once;
//! - one that changes only its groups is seen with its old ones for at most
//!   the TTL — the same staleness the kernel already allows for attributes
//!   it caches (`attr_timeout`, 1 s by default);
//! - a reused pid within the TTL with the same uid and gid inherits the
//!   entry; its groups are then those of a process of the same user and
//!   group read under a second ago.
//!
//! Invariant: at most [`MAX_ENTRIES`] live entries are kept beyond one
//! sweep; expired ones are swept when the map reaches that size.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long groups read for a process are reused.
pub const DEFAULT_TTL: Duration = Duration::from_secs(1);

/// Entries kept before expired ones are swept.
pub const MAX_ENTRIES: usize = 4096;

#[derive(Debug, Clone)]
struct Cached {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    read_at: Instant,
}

/// Groups by pid; see the module documentation for what may be stale.
#[derive(Debug)]
pub struct GroupCache {
    ttl: Duration,
    by_pid: Mutex<HashMap<u32, Cached>>,
}

impl GroupCache {
    /// A TTL of zero turns the cache off (every request reads /proc).
    pub fn new(ttl: Duration) -> GroupCache {
        GroupCache {
            ttl,
            by_pid: Mutex::default(),
        }
    }

    /// The groups of `pid` (running as `uid`/`gid`), read from /proc when
    /// not cached. No pid (0) or an unreadable status gives no groups.
    pub fn groups(&self, pid: u32, uid: u32, gid: u32) -> Vec<u32> {
        if pid == 0 {
            return Vec::new();
        }
        self.groups_at(pid, uid, gid, Instant::now(), || read_groups(pid))
    }

    /// [`GroupCache::groups`] at `now`, reading with `read` on a miss (the
    /// clock and /proc are parameters so tests can drive them).
    pub fn groups_at(
        &self,
        pid: u32,
        uid: u32,
        gid: u32,
        now: Instant,
        read: impl FnOnce() -> Option<Vec<u32>>,
    ) -> Vec<u32> {
        let fresh = |c: &Cached| {
            c.uid == uid && c.gid == gid && now.saturating_duration_since(c.read_at) < self.ttl
        };
        if let Some(c) = self.by_pid.lock().get(&pid).filter(|c| fresh(c)) {
            return c.groups.clone();
        }
        // Read outside the lock: /proc can be slow.
        let Some(groups) = read() else {
            return Vec::new();
        };
        if self.ttl.is_zero() {
            return groups;
        }
        let mut map = self.by_pid.lock();
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, c| now.saturating_duration_since(c.read_at) < self.ttl);
        }
        map.insert(
            pid,
            Cached {
                uid,
                gid,
                groups: groups.clone(),
                read_at: now,
            },
        );
        groups
    }

    /// Entries held (for tests).
    pub fn len(&self) -> usize {
        self.by_pid.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `Groups:` of /proc/<pid>/status; `None` when it cannot be read (the
/// process is gone).
fn read_groups(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(parse_groups(&status))
}

pub(crate) fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn groups_from_proc_status() {
        let status = "Name:\tbash\nGid:\t5\t5\t5\t5\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups(status), vec![4, 24, 27]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name:\tx\n"), Vec::<u32>::new());
    }

    /// A reader that counts its calls and returns `groups`.
    fn reader<'a>(
        reads: &'a Cell<u32>,
        groups: &'a [u32],
    ) -> impl FnOnce() -> Option<Vec<u32>> + 'a {
        move || {
            reads.set(reads.get() + 1);
            Some(groups.to_vec())
        }
    }

    #[test]
    fn entries_are_reused_within_the_ttl_and_reread_after() {
        let cache = GroupCache::new(Duration::from_millis(1000));
        let reads = Cell::new(0);
        let t0 = Instant::now();
        assert_eq!(
            cache.groups_at(7, 1000, 1000, t0, reader(&reads, &[4, 24])),
            vec![4, 24]
        );
        let later = t0 + Duration::from_millis(999);
        assert_eq!(
            cache.groups_at(7, 1000, 1000, later, reader(&reads, &[5])),
            vec![4, 24]
        );
        assert_eq!(reads.get(), 1, "second call within the TTL is cached");
        let expired = t0 + Duration::from_millis(1000);
        assert_eq!(
            cache.groups_at(7, 1000, 1000, expired, reader(&reads, &[5])),
            vec![5]
        );
        assert_eq!(reads.get(), 2, "re-read once the TTL has passed");
    }

    #[test]
    fn a_changed_uid_or_gid_rereads_at_once() {
        let cache = GroupCache::new(Duration::from_secs(60));
        let reads = Cell::new(0);
        let t = Instant::now();
        cache.groups_at(7, 0, 0, t, reader(&reads, &[0, 1, 2]));
        assert_eq!(
            cache.groups_at(7, 1000, 0, t, reader(&reads, &[])),
            Vec::<u32>::new()
        );
        assert_eq!(
            cache.groups_at(7, 1000, 100, t, reader(&reads, &[100])),
            vec![100]
        );
        assert_eq!(reads.get(), 3);
        assert_eq!(
            cache.groups_at(8, 1000, 100, t, reader(&reads, &[9])),
            vec![9],
            "per pid"
        );
        assert_eq!(reads.get(), 4);
    }

    #[test]
    fn zero_ttl_and_unreadable_status_are_not_cached() {
        let cache = GroupCache::new(Duration::ZERO);
        let reads = Cell::new(0);
        let t = Instant::now();
        cache.groups_at(7, 0, 0, t, reader(&reads, &[1]));
        cache.groups_at(7, 0, 0, t, reader(&reads, &[1]));
        assert_eq!(reads.get(), 2);
        assert!(cache.is_empty());
        let cache = GroupCache::new(DEFAULT_TTL);
        assert_eq!(cache.groups_at(7, 0, 0, t, || None), Vec::<u32>::new());
        assert!(cache.is_empty(), "a gone process leaves no entry");
    }

    #[test]
    fn expired_entries_are_swept_at_the_bound() {
        let cache = GroupCache::new(Duration::from_secs(1));
        let t0 = Instant::now();
        for pid in 1..=MAX_ENTRIES as u32 {
            cache.groups_at(pid, 0, 0, t0, || Some(vec![]));
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        let t1 = t0 + Duration::from_secs(2);
        cache.groups_at(1_000_000, 0, 0, t1, || Some(vec![]));
        assert_eq!(cache.len(), 1, "only the new entry is live");
    }

    #[test]
    fn reads_this_process() {
        let cache = GroupCache::new(DEFAULT_TTL);
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let want = read_groups(std::process::id()).expect("own status");
        assert_eq!(cache.groups(std::process::id(), uid, gid), want);
        assert_eq!(
            cache.groups(0, uid, gid),
            Vec::<u32>::new(),
            "no pid, no groups"
        );
    }
}
