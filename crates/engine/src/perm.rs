//! POSIX permission checks. Pure functions of an inode and the caller's
//! credentials; the namespace operations call them at the points Linux does.

use crate::inode::Inode;
use sextant_types::{Credentials, FsError};

pub const MAY_READ: u32 = 4;
pub const MAY_WRITE: u32 = 2;
pub const MAY_EXEC: u32 = 1;

/// `access(2)`-style check of `mask` (a combination of `MAY_*`) on `inode`.
///
/// Root may read and write anything, and may execute anything that has at
/// least one execute bit or is a directory. Everyone else gets exactly one
/// class: owner, else group (primary or supplementary), else other.
pub fn check_access(inode: &Inode, cred: &Credentials, mask: u32) -> Result<(), FsError> {
    if mask == 0 {
        return Ok(());
    }
    let perm = inode.perm as u32;
    if cred.is_root() {
        if mask & MAY_EXEC != 0 && !inode.is_dir() && perm & 0o111 == 0 {
            return Err(FsError::Access);
        }
        return Ok(());
    }
    if class_allows(inode.uid, inode.gid, inode.perm, cred, mask) {
        Ok(())
    } else {
        Err(FsError::Access)
    }
}

/// Whether the class of `cred` (owner, group or other of an inode owned by
/// `uid`:`gid` with mode `perm`) has every bit of `mask` — the check of
/// [`check_access`] for a caller other than root.
pub fn class_allows(uid: u32, gid: u32, perm: u16, cred: &Credentials, mask: u32) -> bool {
    let perm = u32::from(perm);
    let class_bits = if cred.uid == uid {
        (perm >> 6) & 7
    } else if cred.in_group(gid) {
        (perm >> 3) & 7
    } else {
        perm & 7
    };
    class_bits & mask == mask
}

/// Whether a directory with mode `perm` may be listed (read and searched)
/// by every caller: owner, group and other classes all have r-x (the
/// class that applies to a caller is the only one checked, so all three
/// must allow it). Root may list every directory anyway.
pub fn open_to_all(perm: u16) -> bool {
    u32::from(perm) & 0o555 == 0o555
}

/// May the caller remove or rename away `victim` from directory `dir`?
/// (The caller already holds write+search permission on `dir`.) With the
/// sticky bit set only the owner of the victim or of the directory, or root,
/// may (Linux `check_sticky`).
pub fn check_sticky(dir: &Inode, victim: &Inode, cred: &Credentials) -> Result<(), FsError> {
    if dir.perm as u32 & sextant_types::S_ISVTX == 0
        || cred.is_root()
        || cred.uid == victim.uid
        || cred.uid == dir.uid
    {
        Ok(())
    } else {
        Err(FsError::Perm)
    }
}

/// Does changing mode `old` to `new` only clear set-user-ID and/or
/// set-group-ID (at least one of them, every other bit unchanged)? That is
/// what the kernel sends a FUSE file system, as a chmod with the writer's
/// credentials, when someone other than the owner writes to or truncates a
/// set-ID file (without FUSE's killpriv): Linux lets the write through and
/// clears the bits, so [`may_chmod`] allows it to anyone who may write the
/// file.
pub fn only_clears_set_id(old: u16, new: u32) -> bool {
    let (old, new) = (u32::from(old) & 0o7777, new & 0o7777);
    let set_id = sextant_types::S_ISUID | sextant_types::S_ISGID;
    new != old && (old ^ new) & !set_id == 0 && new & !old == 0
}

/// May the caller change `inode`'s mode to `new`? The owner and root may
/// set any mode; anyone who may write the file may clear its set-ID bits
/// ([`only_clears_set_id`]). Else `EPERM`, as chmod(2).
pub fn may_chmod(inode: &Inode, cred: &Credentials, new: u32) -> Result<(), FsError> {
    if check_owner(inode, cred).is_ok() {
        return Ok(());
    }
    let writer = !inode.is_dir() && check_access(inode, cred, MAY_WRITE).is_ok();
    if writer && only_clears_set_id(inode.perm, new) {
        Ok(())
    } else {
        Err(FsError::Perm)
    }
}

/// Is the caller the owner (or root), as chmod and explicit utimes require?
pub fn check_owner(inode: &Inode, cred: &Credentials) -> Result<(), FsError> {
    if cred.is_root() || cred.uid == inode.uid {
        Ok(())
    } else {
        Err(FsError::Perm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::{FileType, Nanos, Soid};

    fn inode(ftype: FileType, perm: u16, uid: u32, gid: u32) -> Inode {
        Inode {
            ftype,
            perm,
            uid,
            gid,
            nlink: 1,
            size: 0,
            atime: Nanos(0),
            mtime: Nanos(0),
            ctime: Nanos(0),
            parent: Soid::ROOT,
            name: b"x".as_slice().into(),
            extra: None,
        }
    }

    #[test]
    fn owner_group_other_classes_are_exclusive() {
        // Owner has no read although "other" has: owner is denied (POSIX).
        let f = inode(FileType::Regular, 0o044, 10, 20);
        assert_eq!(
            check_access(&f, &Credentials::user(10, 99), MAY_READ),
            Err(FsError::Access)
        );
        assert_eq!(
            check_access(&f, &Credentials::user(11, 20), MAY_READ),
            Ok(())
        );
        let mut c = Credentials::user(12, 99);
        assert_eq!(check_access(&f, &c, MAY_READ), Ok(()));
        c.groups.push(20);
        assert_eq!(
            check_access(&f, &c, MAY_READ | MAY_WRITE),
            Err(FsError::Access)
        );
    }

    #[test]
    fn root_bypasses_rw_but_not_exec_without_any_x_bit() {
        let f = inode(FileType::Regular, 0o000, 10, 20);
        let root = Credentials::root();
        assert_eq!(check_access(&f, &root, MAY_READ | MAY_WRITE), Ok(()));
        assert_eq!(check_access(&f, &root, MAY_EXEC), Err(FsError::Access));
        let d = inode(FileType::Directory, 0o000, 10, 20);
        assert_eq!(check_access(&d, &root, MAY_EXEC), Ok(()));
        let x = inode(FileType::Regular, 0o001, 10, 20);
        assert_eq!(check_access(&x, &root, MAY_EXEC), Ok(()));
    }

    #[test]
    fn a_writer_may_only_clear_set_id_bits() {
        let writer = Credentials::user(11, 11);
        for (old, new) in [(0o4777, 0o777), (0o2777, 0o777), (0o6777, 0o777)] {
            let f = inode(FileType::Regular, old, 10, 20);
            assert_eq!(may_chmod(&f, &writer, new), Ok(()), "{old:o} -> {new:o}");
        }
        let f = inode(FileType::Regular, 0o6777, 10, 20);
        assert_eq!(may_chmod(&f, &writer, 0o2777), Ok(()), "set-user-ID alone");
        assert_eq!(may_chmod(&f, &writer, 0o4777), Ok(()), "set-group-ID alone");
        for new in [0o6777, 0o6775, 0o777 & !0o2, 0o7777, 0o1777, 0o6776] {
            assert_eq!(
                may_chmod(&f, &writer, new),
                Err(FsError::Perm),
                "{new:o}: not only a clearing"
            );
        }
        let plain = inode(FileType::Regular, 0o666, 10, 20);
        assert_eq!(
            may_chmod(&plain, &writer, 0o666),
            Err(FsError::Perm),
            "nothing to clear"
        );
        // Only one who may write the file.
        let ro = inode(FileType::Regular, 0o4755, 10, 20);
        assert_eq!(may_chmod(&ro, &writer, 0o755), Err(FsError::Perm));
        let dir = inode(FileType::Directory, 0o2777, 10, 20);
        assert_eq!(may_chmod(&dir, &writer, 0o777), Err(FsError::Perm));
        // The owner and root may set anything.
        assert_eq!(may_chmod(&ro, &Credentials::user(10, 1), 0o7000), Ok(()));
        assert_eq!(may_chmod(&ro, &Credentials::root(), 0o1), Ok(()));
    }

    #[test]
    fn sticky_directory_protects_other_users_files() {
        let dir = inode(FileType::Directory, 0o1777, 0, 0);
        let victim = inode(FileType::Regular, 0o644, 10, 10);
        assert_eq!(
            check_sticky(&dir, &victim, &Credentials::user(11, 11)),
            Err(FsError::Perm)
        );
        assert_eq!(
            check_sticky(&dir, &victim, &Credentials::user(10, 11)),
            Ok(())
        );
        assert_eq!(check_sticky(&dir, &victim, &Credentials::root()), Ok(()));
        let plain = inode(FileType::Directory, 0o777, 0, 0);
        assert_eq!(
            check_sticky(&plain, &victim, &Credentials::user(11, 11)),
            Ok(())
        );
    }
}
