//! Files known to have no extended attributes (none at all, or no
//! `security.capability`), so that the kernel's xattr reads are answered
//! without a server call.
//!
//! Before every write(2) to a file the kernel asks whether the write must
//! drop privileges (`file_remove_privs` → `cap_inode_need_killpriv`): a
//! FUSE GETXATTR of `security.capability`, which the mount would send to
//! the server. For tar x of /usr/include that was 3.1 server requests per
//! entry (a third of them all; docs/BENCHMARKS.md, issue 23). And `ls -l`
//! reads `security.selinux` of every entry it lists: 91% of `ls -lR`'s
//! server requests. The answer is almost always "none", and the mount
//! usually knows it: it created the file (a new inode has no xattrs), the
//! attributes the server sent with a lookup, getattr or readdirplus entry
//! said the inode has none (`Attr::no_xattrs`), or a getxattr of
//! `security.capability` said ENODATA (which teaches that name only).
//!
//! Invariants (the same rules as [`crate::dirattrs`]):
//! - Knowledge is used only while the cache epoch is the one it was
//!   learned under. The watcher moves the epoch before it applies any other
//!   client's changes (an xattr set elsewhere writes the inode: a change
//!   the watcher is sent), and this mount's own setxattr and removexattr
//!   (of any name) move it before and after they run, so an xattr set
//!   anywhere ends every earlier "none".
//! - Knowledge is learned only if the epoch did not move while its request
//!   was out (a change elsewhere may have come in between).
//! - "None at all" answers a listxattr (empty: the server checks no
//!   permission for it) and a getxattr (ENODATA) of a `security.*` or
//!   `trusted.*` name ([`answerable`]); "no capability" only a getxattr
//!   of [`NAME`].
//! - Only kept when the kernel's caches are kept coherent (the watcher
//!   runs); otherwise every read goes to the server, as before.
//! - At most [`MAX_KEPT`] files: past that, everything is forgotten.
//! - A local "none" is what the server would answer whoever asks: ENODATA
//!   for a `security.*` read (the VFS checks no permission for it) or a
//!   `trusted.*` one (ENODATA for an unprivileged caller too), an empty
//!   list for a listxattr (no permission checked). A `user.*` read, which
//!   the server answers EACCES without read permission, is always sent.
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

/// The xattr name the kernel reads before each write.
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

/// Is ENODATA the server's answer to a read of `name` from any caller of
/// a file without it? For `security.*` (no permission is checked) and
/// `trusted.*` (ENODATA for an unprivileged caller too), with a name
/// part and not too long. Not for `user.*`: the server checks read
/// permission first (EACCES), which the mount does not know here.
pub fn answerable(name: &[u8]) -> bool {
    name.len() <= sextant_types::XATTR_NAME_MAX
        && [&b"security."[..], b"trusted."]
            .iter()
            .any(|p| name.len() > p.len() && name.starts_with(p))
}

/// What is known of one file, and under which cache epoch.
#[derive(Clone, Copy)]
struct Known {
    epoch: u64,
    /// No xattrs at all (else: no [`NAME`] only).
    all: bool,
}

/// See the module docs.
#[derive(Default)]
pub struct NoXattrs {
    known: Mutex<HashMap<Soid, Known>>,
}

impl NoXattrs {
    /// `soid` has no xattrs at all per a reply to a request sent at epoch
    /// `sent`; `now` is the epoch when the reply came.
    pub fn learned(&self, soid: Soid, sent: u64, now: u64) {
        self.learn(soid, sent, now, true);
    }

    /// `soid` has no [`NAME`] per a reply to a request sent at epoch
    /// `sent`; `now` is the epoch when the reply came.
    pub fn learned_no_caps(&self, soid: Soid, sent: u64, now: u64) {
        self.learn(soid, sent, now, false);
    }

    fn learn(&self, soid: Soid, sent: u64, now: u64, all: bool) {
        if sent != now {
            return;
        }
        let mut known = self.known.lock();
        if known.len() >= MAX_KEPT {
            known.clear();
        }
        let k = known.entry(soid).or_insert(Known { epoch: now, all });
        // Within one epoch nothing changed: what is known only grows.
        k.all = all || (k.all && k.epoch == now);
        k.epoch = now;
    }

    /// What is known of `soid` at epoch `now` (a stale entry is dropped).
    fn get(&self, soid: Soid, now: u64) -> Option<Known> {
        let mut known = self.known.lock();
        match known.get(&soid) {
            Some(&k) if k.epoch == now => Some(k),
            Some(_) => {
                known.remove(&soid);
                None
            }
            None => None,
        }
    }

    /// Is `soid` known to have no xattr `name` at epoch `now`, and is
    /// ENODATA what the server would answer any caller (see
    /// [`answerable`])?
    pub fn has_none(&self, soid: Soid, name: &[u8], now: u64) -> bool {
        answerable(name) && self.get(soid, now).is_some_and(|k| k.all || name == NAME)
    }

    /// Is `soid` known to have no xattrs at all at epoch `now`?
    pub fn has_no_xattrs(&self, soid: Soid, now: u64) -> bool {
        self.get(soid, now).is_some_and(|k| k.all)
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
        let n = NoXattrs::default();
        n.learned(s(7), 3, 3);
        assert!(n.has_none(s(7), NAME, 3));
        assert!(n.has_none(s(7), b"security.selinux", 3));
        assert!(n.has_none(s(7), b"trusted.x", 3));
        // The server checks permission first, or rejects the name.
        assert!(!n.has_none(s(7), b"user.x", 3));
        assert!(!n.has_none(s(7), b"security.", 3));
        let long = [&b"security."[..], &[b'x'; 250]].concat();
        assert!(!n.has_none(s(7), &long, 3));
        assert!(n.has_no_xattrs(s(7), 3));
        assert!(!n.has_none(s(8), NAME, 3));
        // Another client's change (or our own setxattr) moved the epoch.
        assert!(!n.has_none(s(7), NAME, 4));
        assert!(n.is_empty(), "a stale entry is dropped");
    }

    #[test]
    fn a_reply_that_raced_a_change_teaches_nothing() {
        let n = NoXattrs::default();
        n.learned(s(7), 3, 4);
        n.learned_no_caps(s(8), 3, 4);
        assert!(!n.has_none(s(7), NAME, 4));
        assert!(!n.has_none(s(7), NAME, 3));
        assert!(!n.has_none(s(8), NAME, 4));
    }

    #[test]
    fn no_capability_says_nothing_of_other_names() {
        let n = NoXattrs::default();
        n.learned_no_caps(s(7), 3, 3);
        assert!(n.has_none(s(7), NAME, 3));
        assert!(!n.has_none(s(7), b"security.selinux", 3));
        assert!(!n.has_no_xattrs(s(7), 3));
        // Learned in the same epoch: "none at all" stays.
        n.learned(s(7), 3, 3);
        n.learned_no_caps(s(7), 3, 3);
        assert!(n.has_no_xattrs(s(7), 3));
        // In a later one: only what was learned then.
        n.learned_no_caps(s(7), 5, 5);
        assert!(!n.has_no_xattrs(s(7), 5));
        assert!(n.has_none(s(7), NAME, 5));
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
        let n = NoXattrs::default();
        for i in 0..(MAX_KEPT as u128 + 10) {
            n.learned(s(i), 1, 1);
        }
        assert!(n.len() <= MAX_KEPT);
    }
}
