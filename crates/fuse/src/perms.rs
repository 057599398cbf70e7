//! The permission checks the mount makes on top of the kernel's.
//!
//! Who checks what:
//! - The kernel checks every access from the attributes it caches
//!   (`default_permissions`, always on): path walks, opens of every file
//!   type (the kernel never sends the mount an open of a FIFO, socket or
//!   device node), `access(2)`, hard links (`protected_hardlinks`). The
//!   attributes it caches are exact: a change through this mount updates
//!   them from its reply before the call returns, and one made elsewhere
//!   is invalidated by the watcher ([`crate::watch`]).
//! - The server checks every namespace operation with the caller's
//!   credentials (lookup, create, remove, rename, link, setattr, xattrs,
//!   readdir, `access`), as it does for every client.
//! - The mount checks the open of a file once more ([`open_mask`],
//!   [`check`]) against the attributes its open fetches anyway (from the
//!   server, so fresher than the kernel's), and an existing file that a
//!   create opens (the kernel checks no file that FUSE_CREATE opens).
//!
//! Why not the mount's checks alone: the kernel sends no open of a FIFO,
//! socket or device node, and walks cached names without asking; checking
//! those in the mount took names uncached under every directory not all
//! users may search, and a chmod took effect only once a thread of its own
//! had dropped the names under it (a race). See docs/ARCHITECTURE.md, "The
//! mount", *Permissions*.
//!
//! Pure functions of attributes and credentials: no I/O.

use sextant_engine::perm::{class_allows, MAY_EXEC, MAY_READ, MAY_WRITE};
use sextant_types::{Attr, Credentials, FsError};

/// The kernel's `__FMODE_EXEC` in an open's flags: the open of a program
/// by `execve`, which needs execute permission and not read (a 0711
/// program runs for everyone). The kernel itself only checks that some
/// execute bit is set.
pub const FMODE_EXEC: i32 = 0x20;

/// What an `open(2)` with `flags` needs: read and/or write by the access
/// mode, and write for `O_TRUNC` (as Linux's `build_open_flags`); execute
/// alone for a program's open by `execve`.
pub fn open_mask(flags: i32) -> u32 {
    if flags & FMODE_EXEC != 0 {
        return MAY_EXEC;
    }
    let mut mask = match flags & libc::O_ACCMODE {
        libc::O_WRONLY => MAY_WRITE,
        libc::O_RDWR => MAY_READ | MAY_WRITE,
        _ => MAY_READ,
    };
    if flags & libc::O_TRUNC != 0 {
        mask |= MAY_WRITE;
    }
    mask
}

/// May `cred` read, write and/or execute (`mask`) the file or directory
/// `a`? Root may read and write anything, and execute what has some
/// execute bit (the kernel checks that before the open); anyone else by
/// their class's bits.
pub fn check(a: &Attr, cred: &Credentials, mask: u32) -> Result<(), FsError> {
    if cred.is_root() || class_allows(a.uid, a.gid, a.perm as u16, cred, mask) {
        Ok(())
    } else {
        Err(FsError::Access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::FileType;

    fn attr(ftype: FileType, perm: u32, uid: u32, gid: u32) -> Attr {
        Attr {
            soid: sextant_types::Soid::from_u128(9),
            ftype,
            perm,
            uid,
            gid,
            nlink: 1,
            size: 0,
            rdev: 0,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
            parent: sextant_types::Soid::ROOT,
            no_xattrs: false,
        }
    }

    fn user(uid: u32, gid: u32) -> Credentials {
        Credentials::user(uid, gid)
    }

    #[test]
    fn open_modes_ask_for_what_they_do() {
        assert_eq!(open_mask(libc::O_RDONLY), MAY_READ);
        assert_eq!(open_mask(libc::O_WRONLY | libc::O_APPEND), MAY_WRITE);
        assert_eq!(open_mask(libc::O_RDWR), MAY_READ | MAY_WRITE);
        assert_eq!(
            open_mask(libc::O_RDONLY | libc::O_TRUNC),
            MAY_READ | MAY_WRITE
        );
        assert_eq!(open_mask(libc::O_RDONLY | libc::O_DIRECTORY), MAY_READ);
        assert_eq!(
            open_mask(libc::O_RDONLY | libc::O_LARGEFILE | FMODE_EXEC),
            MAY_EXEC
        );
        // FMODE_EXEC is a bit no O_ flag uses.
        for f in [
            libc::O_CREAT,
            libc::O_EXCL,
            libc::O_NOCTTY,
            libc::O_TRUNC,
            libc::O_APPEND,
        ] {
            assert_eq!(f & FMODE_EXEC, 0);
        }
    }

    #[test]
    fn each_caller_gets_one_class_and_root_gets_all() {
        let f = attr(FileType::Regular, 0o640, 10, 20);
        assert!(check(&f, &user(10, 99), MAY_READ | MAY_WRITE).is_ok());
        assert!(check(&f, &user(11, 20), MAY_READ).is_ok());
        assert_eq!(check(&f, &user(11, 20), MAY_WRITE), Err(FsError::Access));
        assert_eq!(check(&f, &user(12, 30), MAY_READ), Err(FsError::Access));
        let mut grouped = user(12, 30);
        grouped.groups = vec![20];
        assert!(check(&f, &grouped, MAY_READ).is_ok(), "supplementary group");
        // The owner class alone applies to the owner, even when "other"
        // would allow more.
        let odd = attr(FileType::Regular, 0o044, 10, 20);
        assert_eq!(check(&odd, &user(10, 20), MAY_READ), Err(FsError::Access));
        let program = attr(FileType::Regular, 0o711, 10, 20);
        assert!(check(&program, &user(12, 30), MAY_EXEC).is_ok());
        assert_eq!(
            check(&program, &user(12, 30), MAY_READ),
            Err(FsError::Access)
        );
        let readable = attr(FileType::Regular, 0o744, 10, 20);
        assert_eq!(
            check(&readable, &user(12, 30), MAY_EXEC),
            Err(FsError::Access)
        );
        let none = attr(FileType::Directory, 0o000, 10, 20);
        assert!(check(&none, &Credentials::root(), MAY_READ | MAY_WRITE).is_ok());
    }
}
