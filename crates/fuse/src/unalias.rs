//! A directory another client moved: its old name is dropped from the
//! kernel before the kernel is given the directory under its new one.
//!
//! A directory has one dentry in the kernel. When a lookup (or a
//! READDIRPLUS entry) answers a directory node the kernel still holds
//! under another name — another client moved it, and the watcher's
//! invalidation of the old name has not come yet — the kernel moves that
//! dentry (`d_splice_alias` → `__d_unalias`, fs/dcache.c). Into another
//! directory it may do so only by trylock, of the superblock's rename
//! mutex and of the old parent's lock, and answers `ESTALE` when either is
//! taken. A rename on this mount holds the rename mutex while it looks its
//! names up, so `rename(new name, elsewhere)` failed every time (its
//! retry too) until something else looked the name up; any call failed
//! while the old parent was locked (by the watcher's own invalidation, or
//! a call in it waiting for the server). ext4 has no such case: nothing
//! moves its directories behind the kernel's back.
//!
//! So the mount drops the old names first (FUSE_NOTIFY_INVAL_ENTRY): the
//! dentry goes (unless a process holds it, as its working directory or an
//! open descriptor), and the reply makes a new one, taking no lock. The
//! names come from [`crate::nodes`], which follows where the kernel may
//! hold each directory's dentry.
//!
//! Why from another thread, waiting only [`WAIT`]: the kernel's
//! invalidation of a name takes its parent's lock (`inode_lock`, in
//! `fuse_reverse_inval_entry`). If the call now waiting for our reply
//! holds that lock — a rename out of or into the old parent (lock_rename
//! holds both parents) — an invalidation sent from the request's own
//! thread would wait forever for the reply it holds up. So each is sent
//! from a thread of its own, and the reply goes once all are done or
//! after [`WAIT`], whichever is first. When the wait ends first the reply
//! likely meets `ESTALE` as before (the lock is held, and the rename mutex
//! too), the syscall's one retry (`retry_estale`) comes after the lock is
//! released and the invalidation has run — or, if it loses that race, the
//! program sees `ESTALE`. A name whose invalidation did not finish in time
//! stays listed, to be dropped again next time.

use crate::nodes::NodeName;
use fuser::{INodeNo, Notifier};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a reply waits for the old names' invalidations: they take
/// microseconds unless their directory is locked, by a call in it that
/// waits for the server (worth waiting for) or by the very call the
/// reply is for (never ends first: the wait is lost).
pub const WAIT: Duration = Duration::from_millis(10);

/// The kernel's notification channel, once the session is made (the file
/// system is made first, so it is set afterwards).
#[derive(Default, Clone)]
pub struct Unalias {
    notifier: Arc<OnceLock<Notifier>>,
}

impl Unalias {
    /// The session's notifier; before it is set nothing is invalidated.
    pub fn set(&self, notifier: Notifier) {
        let _ = self.notifier.set(notifier);
    }

    /// Drops `names` from the kernel's dentries, waiting at most [`WAIT`];
    /// returns those dropped (or not held: either way the kernel holds no
    /// dentry under them now).
    pub fn invalidate(&self, names: Vec<NodeName>) -> Vec<NodeName> {
        let Some(notifier) = self.notifier.get() else {
            return Vec::new();
        };
        let notifier = notifier.clone();
        let asked = names.len();
        let done = invalidate_within(names, WAIT, move |parent, name| {
            match notifier.inval_entry(INodeNo(parent), OsStr::from_bytes(name)) {
                Ok(()) => tracing::debug!(
                    parent,
                    name = %String::from_utf8_lossy(name),
                    "a moved directory's old name was still held: dropped"
                ),
                // Not held (the watcher or an expiry dropped it).
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => tracing::debug!(
                    parent,
                    error = %e,
                    "invalidating a moved directory's old name"
                ),
            }
        });
        if done.len() < asked {
            tracing::debug!(
                late = asked - done.len(),
                "a moved directory's old name not dropped in time (its directory locked)"
            );
        }
        done
    }
}

/// Runs `inval` on each of `names`, each on a thread of its own (see the
/// module docs), and returns those done within `wait`.
pub(crate) fn invalidate_within(
    names: Vec<NodeName>,
    wait: Duration,
    inval: impl Fn(u64, &[u8]) + Clone + Send + 'static,
) -> Vec<NodeName> {
    if names.is_empty() {
        return names;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let mut started = 0;
    for name in names {
        let (tx, inval) = (tx.clone(), inval.clone());
        let spawned = std::thread::Builder::new()
            .name("sextant-unalias".into())
            .spawn(move || {
                inval(name.0, &name.1[..]);
                let _ = tx.send(name);
            });
        match spawned {
            Ok(_) => started += 1,
            Err(e) => tracing::warn!(error = %e, "cannot start a thread to invalidate a name"),
        }
    }
    drop(tx);
    let until = Instant::now() + wait;
    let mut done = Vec::with_capacity(started);
    while done.len() < started {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(name) => done.push(name),
            Err(_) => break,
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn nm(parent: u64, name: &[u8]) -> NodeName {
        (parent, name.into())
    }

    #[test]
    fn every_name_is_invalidated_and_those_done_in_time_returned() {
        let got = invalidate_within(
            vec![nm(2, b"a"), nm(3, b"b")],
            Duration::from_secs(10),
            |_, _| {},
        );
        assert_eq!(got.len(), 2);
        assert!(got.contains(&nm(2, b"a")) && got.contains(&nm(3, b"b")));
        assert!(invalidate_within(Vec::new(), Duration::ZERO, |_, _| {}).is_empty());
    }

    /// An invalidation that waits for a lock the caller's reply holds up
    /// (see the module docs) delays the reply by the bound only, and still
    /// runs once the lock is free.
    #[test]
    fn a_blocked_invalidation_is_waited_for_only_so_long() {
        let (release, blocked) = mpsc::channel::<()>();
        let blocked = Arc::new(parking_lot::Mutex::new(blocked));
        let (ran, finished) = mpsc::channel();
        let start = Instant::now();
        let got = invalidate_within(
            vec![nm(2, b"held"), nm(3, b"free")],
            Duration::from_millis(50),
            move |parent, _| {
                if parent == 2 {
                    let _ = blocked.lock().recv();
                }
                let _ = ran.send(parent);
            },
        );
        let waited = start.elapsed();
        assert_eq!(got, [nm(3, b"free")], "only the free one in time");
        assert!(waited >= Duration::from_millis(50) && waited < Duration::from_secs(5));
        assert_eq!(finished.recv().ok(), Some(3));
        release.send(()).unwrap();
        assert_eq!(
            finished.recv_timeout(Duration::from_secs(5)).ok(),
            Some(2),
            "the blocked one runs once its lock is free"
        );
    }
}
