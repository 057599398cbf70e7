//! The permission checks the mount makes itself, instead of the kernel's
//! `default_permissions`.
//!
//! Why not the kernel's: with `default_permissions` every create or removal
//! costs a GETATTR of its directory (the kernel drops the directory's
//! attributes after the change and needs its mode for the next check), a
//! wake-up of the daemon each time. Without it file removes through the
//! mount ran 32% faster here with 4 threads (docs/BENCHMARKS.md, "File
//! removes through the mount: the kernel's permission checks"). ceph-fuse
//! made the same choice (`fuse_default_permissions = false`).
//!
//! Who checks what, then:
//! - The server checks every namespace operation with the caller's
//!   credentials (lookup, create, remove, rename, link, setattr, xattrs,
//!   readdir, `access`), as it does for every client.
//! - The mount checks what never reaches the server: the open mode of a
//!   file or directory against its attributes ([`open_mask`], [`check`]),
//!   and Linux's `protected_hardlinks` rule ([`may_hardlink`]).
//! - The kernel checks nothing on a path walk through names it caches. So
//!   names are cached only under directories every caller may search
//!   ([`crate::nodes`]); under any other directory each lookup goes to the
//!   server, which checks the caller's search permission.
//!
//! Pure functions of attributes and credentials: no I/O.

use sextant_engine::perm::{class_allows, MAY_EXEC, MAY_READ, MAY_WRITE};
use sextant_types::{Attr, Credentials, FileType, FsError, S_ISGID, S_ISUID};

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

/// What a permission check reads of an inode: its permission bits, owner
/// and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
}

impl Mode {
    pub fn of(a: &Attr) -> Mode {
        Mode {
            perm: a.perm as u16,
            uid: a.uid,
            gid: a.gid,
        }
    }
}

/// May `cred` read, write and/or execute (`mask`) the file or directory
/// `a`? See [`check_mode`].
pub fn check(a: &Attr, cred: &Credentials, mask: u32) -> Result<(), FsError> {
    check_mode(&Mode::of(a), cred, mask)
}

/// May `cred` read, write and/or execute (`mask`) an inode with `mode`?
/// Root may read and write anything, and execute what has some execute
/// bit (the kernel checks that before the open); anyone else by their
/// class's bits.
pub fn check_mode(mode: &Mode, cred: &Credentials, mask: u32) -> Result<(), FsError> {
    if cred.is_root() || class_allows(mode.uid, mode.gid, mode.perm, cred, mask) {
        Ok(())
    } else {
        Err(FsError::Access)
    }
}

/// May `cred` make a hard link to `a`? Linux with `protected_hardlinks`
/// (every distribution's default): the owner and root may; anyone else
/// only to a regular file that is not set-user-ID, not set-group-ID and
/// group-executable, and that they may read and write. Else `EPERM`.
pub fn may_hardlink(a: &Attr, cred: &Credentials) -> Result<(), FsError> {
    if cred.is_root() || cred.uid == a.uid {
        return Ok(());
    }
    let perm = a.perm;
    let setuid = perm & S_ISUID != 0;
    let setgid_exec = perm & S_ISGID != 0 && perm & 0o010 != 0;
    let safe = a.ftype == FileType::Regular
        && !setuid
        && !setgid_exec
        && class_allows(a.uid, a.gid, perm as u16, cred, MAY_READ | MAY_WRITE);
    if safe {
        Ok(())
    } else {
        Err(FsError::Perm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn hard_links_follow_protected_hardlinks() {
        let other = user(11, 30);
        let rw_all = attr(FileType::Regular, 0o666, 10, 20);
        assert!(may_hardlink(&rw_all, &other).is_ok());
        let ro = attr(FileType::Regular, 0o644, 10, 20);
        assert_eq!(may_hardlink(&ro, &other), Err(FsError::Perm));
        assert!(may_hardlink(&ro, &user(10, 30)).is_ok(), "the owner");
        assert!(may_hardlink(&ro, &Credentials::root()).is_ok());
        let suid = attr(FileType::Regular, 0o4666, 10, 20);
        assert_eq!(may_hardlink(&suid, &other), Err(FsError::Perm));
        let sgid_x = attr(FileType::Regular, 0o2676, 10, 20);
        assert_eq!(may_hardlink(&sgid_x, &other), Err(FsError::Perm));
        let sgid_only = attr(FileType::Regular, 0o2666, 10, 20);
        assert!(
            may_hardlink(&sgid_only, &other).is_ok(),
            "mandatory locking bit"
        );
        let fifo = attr(FileType::Fifo, 0o666, 10, 20);
        assert_eq!(may_hardlink(&fifo, &other), Err(FsError::Perm));
    }
}
