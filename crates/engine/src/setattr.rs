//! The rules of `setattr` (chmod, chown, utimes, truncate), pure: who may
//! change what, and what a change clears. The engine applies them to an
//! inode inside a transaction ([`crate::namespace::setattr`]); a mount that
//! holds a change back to send it later (a file it has open for writing:
//! its attribute changes ride with its size at close) computes with the
//! same function the attributes the server will answer, so the two cannot
//! drift apart.
//!
//! Invariant: [`apply`] either returns the error the server would return
//! and leaves `attr` unchanged, or applies the whole change.

use sextant_types::{Attr, Credentials, FileType, FsError, Nanos, SetAttr, TimeSet};
use sextant_types::{S_ISGID, S_ISUID};

use crate::namespace::MAX_FILE_SIZE;
use crate::perm::{class_allows, only_clears_set_id, MAY_WRITE};

/// May `cred` write a file with attributes `a`? (Root always may.)
fn may_write(a: &Attr, cred: &Credentials) -> bool {
    cred.is_root() || class_allows(a.uid, a.gid, a.perm as u16, cred, MAY_WRITE)
}

/// Is the caller the owner (or root), as chmod and explicit utimes require?
fn is_owner(a: &Attr, cred: &Credentials) -> bool {
    cred.is_root() || cred.uid == a.uid
}

/// Clears set-user-id, and set-group-id when group-execute is set (Linux
/// `should_remove_suid`).
fn kill_suid(perm: u32) -> u32 {
    let mut perm = perm & !S_ISUID;
    if perm & S_ISGID != 0 && perm & 0o010 != 0 {
        perm &= !S_ISGID;
    }
    perm
}

/// Checks that `cred` may make change `set` to a file with attributes
/// `attr` and applies it at time `now`. `write_handle`: the size changes
/// through a file the caller holds open for writing (`ftruncate`), so it
/// needs no write permission now. Order of application, as when the parts
/// are sent one after the other in this order: size, owner and group
/// (which clear set-ID bits), mode, times.
pub fn apply(
    attr: &mut Attr,
    cred: &Credentials,
    set: &SetAttr,
    write_handle: bool,
    now: Nanos,
) -> Result<(), FsError> {
    let is_dir = attr.ftype == FileType::Directory;
    if let Some(size) = set.size {
        if is_dir {
            return Err(FsError::IsDir);
        }
        if attr.ftype != FileType::Regular {
            return Err(FsError::Invalid);
        }
        // Through a handle open for writing (ftruncate) the permission was
        // granted at the open, whatever the mode says now.
        if !write_handle && !may_write(attr, cred) {
            return Err(FsError::Access);
        }
        if size > MAX_FILE_SIZE {
            return Err(FsError::FileTooBig);
        }
    }
    // chown_ok: only root may change the owner; the owner may "change" it
    // to itself (a no-op that still clears set-id bits).
    if let Some(uid) = set.uid {
        let owner_keeps_own_uid = cred.uid == attr.uid && uid == attr.uid;
        if !(cred.is_root() || owner_keeps_own_uid) {
            return Err(FsError::Perm);
        }
    }
    if let Some(gid) = set.gid {
        let allowed =
            cred.is_root() || (cred.uid == attr.uid && (gid == attr.gid || cred.in_group(gid)));
        if !allowed {
            return Err(FsError::Perm);
        }
    }
    if let Some(perm) = set.perm {
        // The owner and root may set any mode; anyone who may write the
        // file may clear its set-ID bits. Else EPERM, as chmod(2).
        let writer_clears =
            !is_dir && may_write(attr, cred) && only_clears_set_id(attr.perm as u16, perm);
        if !is_owner(attr, cred) && !writer_clears {
            return Err(FsError::Perm);
        }
    }
    // vfs_utimes: setting both times to "now" (touch) needs ownership or
    // write permission; anything else is an explicit time update
    // (ATTR_TIMES_SET) and needs ownership.
    match (set.atime, set.mtime) {
        (None, None) => {}
        (Some(TimeSet::Now), Some(TimeSet::Now)) => {
            if !is_owner(attr, cred) && !may_write(attr, cred) {
                return Err(FsError::Access);
            }
        }
        _ => {
            if !is_owner(attr, cred) {
                return Err(FsError::Perm);
            }
        }
    }
    // All checks passed: apply.
    if let Some(size) = set.size {
        attr.size = size;
        attr.mtime = now;
        if !cred.is_root() {
            attr.perm = kill_suid(attr.perm);
        }
    }
    if set.uid.is_some() || set.gid.is_some() {
        if let Some(uid) = set.uid {
            attr.uid = uid;
        }
        if let Some(gid) = set.gid {
            attr.gid = gid;
        }
        if !is_dir {
            attr.perm = kill_suid(attr.perm);
        }
    }
    if let Some(perm) = set.perm {
        let mut perm = perm & 0o7777;
        // An owner outside the file's group cannot set set-group-ID (a
        // writer's clearing of set-ID bits keeps the rest as it is).
        if is_owner(attr, cred)
            && perm & S_ISGID != 0
            && !cred.is_root()
            && !cred.in_group(attr.gid)
        {
            perm &= !S_ISGID;
        }
        attr.perm = perm;
    }
    let resolve = |t: TimeSet| match t {
        TimeSet::Now => now,
        TimeSet::At(n) => n,
    };
    if let Some(t) = set.atime {
        attr.atime = resolve(t);
    }
    if let Some(t) = set.mtime {
        attr.mtime = resolve(t);
    }
    attr.ctime = now;
    Ok(())
}
