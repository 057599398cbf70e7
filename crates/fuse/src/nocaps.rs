//! Files known to have no `security.capability`, so that the kernel's
//! check before each write is answered without a server call.
//!
//! Before every write(2) to a file the kernel asks whether the write must
//! drop privileges (`file_remove_privs` → `cap_inode_need_killpriv`): a
//! FUSE GETXATTR of `security.capability`, which the mount would send to
//! the server. For tar x of /usr/include that was 3.1 server requests per
//! entry (a third of them all; docs/BENCHMARKS.md, issue 23). The answer
//! is almost always "none", and the mount usually knows it: it created the
//! file (a new inode has no xattrs), or the server said so before.
//!
//! Invariants (the same rules as [`crate::dirattrs`]):
//! - Knowledge is used only while the cache epoch is the one it was
//!   learned under. The watcher moves the epoch before it applies any other
//!   client's changes, and this mount's own setxattr and removexattr of the
//!   name move it before and after they run, so a capability set anywhere
//!   ends every earlier "none".
//! - Knowledge is learned only if the epoch did not move while its request
//!   was out (a change elsewhere may have come in between).
//! - Only kept when the kernel's caches are kept coherent (the watcher
//!   runs); otherwise every check goes to the server, as before.
//! - At most [`MAX_KEPT`] files: past that, everything is forgotten.
//! - A local "none" is ENODATA whatever the caller's permissions, as Linux
//!   gives it: the VFS checks no permission for `security.*` reads.
//! - Pure bookkeeping: no I/O.
//!
//! And names no server keeps ([`unsupported`]): only the `user.`,
//! `trusted.` and `security.` namespaces are stored, so any other name
//! (cp -a's `system.posix_acl_access` on every file it copies) is refused
//! with EOPNOTSUPP by the mount itself, whoever asks: what Linux answers
//! for a file system without that handler (the VFS checks no permission
//! for `system.*`).

use parking_lot::Mutex;
use sextant_types::Soid;
use std::collections::HashMap;

/// The one xattr name this module answers for.
pub const NAME: &[u8] = b"security.capability";

/// Most files known at once.
pub const MAX_KEPT: usize = 65536;

/// Is `name` outside the namespaces a server keeps (`user.`, `trusted.`,
/// `security.`; a bare prefix is the server's EINVAL)? Then any xattr
/// call on it is EOPNOTSUPP.
pub fn unsupported(name: &[u8]) -> bool {
    ![&b"user."[..], b"trusted.", b"security."]
        .iter()
        .any(|p| name.starts_with(p))
}

/// See the module docs.
#[derive(Default)]
pub struct NoCaps {
    /// File → the cache epoch under which it was known to have none.
    known: Mutex<HashMap<Soid, u64>>,
}

impl NoCaps {
    /// `soid` has no `security.capability` per a reply to a request sent
    /// at epoch `sent`; `now` is the epoch when the reply came.
    pub fn learned(&self, soid: Soid, sent: u64, now: u64) {
        if sent != now {
            return;
        }
        let mut known = self.known.lock();
        if known.len() >= MAX_KEPT {
            known.clear();
        }
        known.insert(soid, now);
    }

    /// Is `soid` known to have no `security.capability` at epoch `now`?
    pub fn has_none(&self, soid: Soid, now: u64) -> bool {
        let mut known = self.known.lock();
        match known.get(&soid) {
            Some(&e) if e == now => true,
            Some(_) => {
                known.remove(&soid);
                false
            }
            None => false,
        }
    }

    /// Files known (for tests).
    pub fn len(&self) -> usize {
        self.known.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u128) -> Soid {
        Soid::from_u128(n)
    }

    #[test]
    fn known_only_within_the_epoch_it_was_learned_in() {
        let n = NoCaps::default();
        n.learned(s(7), 3, 3);
        assert!(n.has_none(s(7), 3));
        assert!(!n.has_none(s(8), 3));
        // Another client's change (or our own setxattr) moved the epoch.
        assert!(!n.has_none(s(7), 4));
        assert!(n.is_empty(), "a stale entry is dropped");
    }

    #[test]
    fn a_reply_that_raced_a_change_teaches_nothing() {
        let n = NoCaps::default();
        n.learned(s(7), 3, 4);
        assert!(!n.has_none(s(7), 4));
        assert!(!n.has_none(s(7), 3));
    }

    #[test]
    fn namespaces_no_server_keeps() {
        assert!(unsupported(b"system.posix_acl_access"));
        assert!(unsupported(b"system.nfs4_acl"));
        assert!(unsupported(b"os2.x"));
        assert!(!unsupported(b"user.x"));
        assert!(!unsupported(b"user."));
        assert!(!unsupported(b"trusted.x"));
        assert!(!unsupported(NAME));
    }

    #[test]
    fn bounded() {
        let n = NoCaps::default();
        for i in 0..(MAX_KEPT as u128 + 10) {
            n.learned(s(i), 1, 1);
        }
        assert!(n.len() <= MAX_KEPT);
    }
}
