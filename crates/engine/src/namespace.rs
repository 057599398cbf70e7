//! Namespace operations with the semantics of a Linux local file system
//! (ext4 is the reference), written once over a [`Txn`].
//!
//! Each function checks in the order Linux's VFS does (so the errno a
//! program sees matches ext4 when several things are wrong at once), then
//! writes whole inodes and entries into the transaction. Nothing here locks
//! or does I/O; the transaction does.
//!
//! Time: every change uses `txn.now`, one timestamp per operation.

use crate::inode::{Dentry, Inode};
use crate::perm::{check_access, check_owner, check_sticky, MAY_EXEC, MAY_READ, MAY_WRITE};
use crate::soid::{allocate, AllocError, ChildKind};
use crate::txn::{OpError, OpResult, Txn};
use serde::{Deserialize, Serialize};
use sextant_types::{
    validate_name, Attr, Credentials, FileType, FsError, Nanos, SetAttr, Soid, LINK_MAX,
    SYMLINK_MAX, S_ISGID, XATTR_NAME_MAX, XATTR_SIZE_MAX,
};

/// Largest file size accepted (ext4's limit with 4 KiB blocks is 16 TiB;
/// we accept up to `i64::MAX` as the kernel's `loff_t` does).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;
/// Most bytes of extended attributes (names + values) one inode may hold.
pub const XATTR_TOTAL_MAX: usize = 64 * 1024;
/// How many symlinks path resolution follows before `ELOOP` (Linux: 40).
pub const MAX_SYMLINK_FOLLOWS: usize = sextant_types::walk::MAX_SYMLINK_FOLLOWS;
/// Most bytes an inode's secondary hard links (names + directory ids) may
/// take. Every operation on the inode journals its whole link list, so an
/// unbounded list makes each link O(n) and the total O(n²). 256 KiB is
/// ~7,000 links with 20-byte names (~960 with 255-byte ones), `EMLINK`
/// beyond: below ext4's 65,000. A per-table link index would lift it.
pub const LINKS_BYTES_MAX: usize = 256 << 10;

/// `renameat2` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenameFlags {
    /// `RENAME_NOREPLACE`: fail with `EEXIST` if the target exists.
    pub noreplace: bool,
    /// `RENAME_EXCHANGE`: swap source and target atomically.
    pub exchange: bool,
}

/// `setxattr` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrFlags {
    /// Create or replace.
    #[default]
    Any,
    /// `XATTR_CREATE`: fail with `EEXIST` if it exists.
    Create,
    /// `XATTR_REPLACE`: fail with `ENODATA` if it does not.
    Replace,
}

/// One directory entry returned by readdir.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// Pass this back to continue after this entry.
    pub cookie: u64,
    pub name: Box<[u8]>,
    pub soid: Soid,
    pub ftype: FileType,
}

fn dir_inode(txn: &mut Txn, soid: Soid) -> OpResult<Inode> {
    let ino = txn.inode_or(soid, FsError::NotFound)?;
    if !ino.is_dir() {
        return Err(FsError::NotDir.into());
    }
    Ok(ino)
}

/// The parent directory after the search-permission check every lookup does.
fn searchable_dir(txn: &mut Txn, cred: &Credentials, soid: Soid) -> OpResult<Inode> {
    let dir = dir_inode(txn, soid)?;
    check_access(&dir, cred, MAY_EXEC)?;
    Ok(dir)
}

pub fn lookup(txn: &mut Txn, cred: &Credentials, parent: Soid, name: &[u8]) -> OpResult<Attr> {
    searchable_dir(txn, cred, parent)?;
    validate_lookup_name(name)?;
    let d = txn
        .dentry(parent, name)?
        .ok_or(OpError::Fs(FsError::NotFound))?;
    let child = txn.inode_or(d.child, FsError::NotFound)?;
    Ok(child.attr(d.child))
}

/// The entry `name` of `parent` — the child's SOID and type — reading only
/// the parent's table (member mode: the child may be another member's).
pub fn lookup_entry(
    txn: &mut Txn,
    cred: &Credentials,
    parent: Soid,
    name: &[u8],
) -> OpResult<(Soid, FileType)> {
    searchable_dir(txn, cred, parent)?;
    validate_lookup_name(name)?;
    let d = txn
        .dentry(parent, name)?
        .ok_or(OpError::Fs(FsError::NotFound))?;
    Ok((d.child, d.ftype))
}

/// Names a lookup may be asked for: `.`/`..` are resolved by the caller
/// (the kernel, the client); here they simply do not exist.
fn validate_lookup_name(name: &[u8]) -> Result<(), FsError> {
    match validate_name(name) {
        Err(FsError::Invalid) => Err(FsError::NotFound),
        other => other,
    }
}

/// What kind of node `make_node` creates.
pub enum NodeKind<'a> {
    File { exclusive: bool },
    Dir,
    Symlink { target: &'a [u8] },
    Special { ftype: FileType, rdev: u32 },
}

/// create / mknod / mkdir / symlink. `perm` has the caller's umask applied.
/// Returns the new (or, for a non-exclusive create, existing) inode.
pub fn make_node(
    txn: &mut Txn,
    cred: &Credentials,
    parent: Soid,
    name: &[u8],
    perm: u32,
    kind: NodeKind,
) -> OpResult<Attr> {
    // do_symlinkat copies the target in (getname) before any lookup.
    if let NodeKind::Symlink { target } = kind {
        if target.is_empty() {
            return Err(FsError::NotFound.into());
        }
        if target.len() > SYMLINK_MAX {
            return Err(FsError::NameTooLong.into());
        }
    }
    let mut dir = searchable_dir(txn, cred, parent)?;
    validate_name(name)?;
    if let Some(existing) = txn.dentry(parent, name)? {
        return match kind {
            NodeKind::File { exclusive: false } => {
                let ino = txn.inode_or(existing.child, FsError::NotFound)?;
                if ino.is_dir() {
                    return Err(FsError::IsDir.into());
                }
                Ok(ino.attr(existing.child))
            }
            _ => Err(FsError::Exists.into()),
        };
    }
    check_access(&dir, cred, MAY_WRITE | MAY_EXEC)?;
    let (ftype, rdev) = match kind {
        NodeKind::File { .. } => (FileType::Regular, 0),
        NodeKind::Dir => (FileType::Directory, 0),
        NodeKind::Symlink { .. } => (FileType::Symlink, 0),
        NodeKind::Special { ftype, rdev } => {
            if matches!(ftype, FileType::Directory | FileType::Symlink) {
                return Err(FsError::Invalid.into());
            }
            (ftype, rdev)
        }
    };
    // vfs_mknod: device nodes need CAP_MKNOD, except the whiteout (char 0:0).
    let is_whiteout = ftype == FileType::CharDevice && rdev == 0;
    if matches!(ftype, FileType::CharDevice | FileType::BlockDevice)
        && !is_whiteout
        && !cred.is_root()
    {
        return Err(FsError::Perm.into());
    }
    if ftype == FileType::Directory && dir.nlink >= LINK_MAX {
        return Err(FsError::TooManyLinks.into());
    }
    // Owner and group as Linux's inode_init_owner (BSD group semantics
    // under a setgid directory).
    let perm = initial_mode(&dir, cred, ftype, perm);
    let gid = if dir.perm as u32 & S_ISGID != 0 {
        dir.gid
    } else {
        cred.gid
    };
    let soid = allocate_soid(txn, parent, &dir, ftype)?;
    let now = txn.now;
    let mut inode = Inode {
        ftype,
        perm: perm as u16,
        uid: cred.uid,
        gid,
        nlink: if ftype == FileType::Directory { 2 } else { 1 },
        size: 0,
        atime: now,
        mtime: now,
        ctime: now,
        parent,
        name: name.into(),
        extra: None,
    };
    inode.set_rdev(rdev);
    if let NodeKind::Symlink { target } = kind {
        inode.size = target.len() as u64;
        inode.extra_mut().symlink = Some(Box::from(target));
    }
    // Re-read the parent: allocation may have recorded a new extent in it.
    dir = txn.inode_or(parent, FsError::NotFound)?;
    if ftype == FileType::Directory {
        dir.nlink += 1;
    }
    dir.mtime = now;
    dir.ctime = now;
    txn.put_inode(parent, dir)?;
    let attr = inode.attr(soid);
    txn.put_inode(soid, inode)?;
    txn.put_dentry(
        parent,
        Dentry {
            child: soid,
            ftype,
            name: name.into(),
        },
    )?;
    Ok(attr)
}

/// The permission bits of a new inode, as Linux computes them: mkdir keeps
/// only rwx and sticky (`vfs_mkdir`) and inherits S_ISGID from a setgid
/// parent (`inode_init_owner`); symlinks are 0777; other nodes keep what
/// was asked, minus S_ISGID when `mode_strip_sgid` says so.
fn initial_mode(dir: &Inode, cred: &Credentials, ftype: FileType, perm: u32) -> u32 {
    let parent_sgid = dir.perm as u32 & S_ISGID != 0;
    match ftype {
        FileType::Symlink => 0o777,
        FileType::Directory => {
            let mode = perm & (0o777 | sextant_types::S_ISVTX);
            if parent_sgid {
                mode | S_ISGID
            } else {
                mode
            }
        }
        _ => {
            let mode = perm & 0o7777;
            let strip = mode & (S_ISGID | 0o010) == (S_ISGID | 0o010)
                && parent_sgid
                && !cred.is_root()
                && !cred.in_group(dir.gid);
            if strip {
                mode & !S_ISGID
            } else {
                mode
            }
        }
    }
}

fn allocate_soid(txn: &mut Txn, parent: Soid, dir: &Inode, ftype: FileType) -> OpResult<Soid> {
    let kind = if ftype == FileType::Directory {
        ChildKind::Directory
    } else {
        ChildKind::File
    };
    let layout = *txn.layout();
    let mut hw = txn.high_water();
    let extents = dir.extents();
    let alloc = allocate(&layout, parent, &extents, kind, txn, &mut hw).map_err(|e| match e {
        AllocError::Exhausted => OpError::Fs(FsError::NoSpace),
        AllocError::Space(inner) => inner,
    })?;
    if alloc.high_water_changed {
        txn.set_high_water(hw);
    }
    if alloc.new_extent.is_some() || alloc.slots_now_full {
        let mut d = txn.inode_or(parent, FsError::NotFound)?;
        let extents = &mut d.extra_mut().extents;
        extents.ranges.extend(alloc.new_extent);
        extents.slots_full |= alloc.slots_now_full;
        txn.put_inode(parent, d)?;
    }
    Ok(alloc.soid)
}

/// Checks Linux's `may_delete` for removing entry `name` → `victim` from
/// `dir`: write+search on the directory, then the sticky bit.
fn may_delete(dir: &Inode, victim: &Inode, cred: &Credentials) -> Result<(), FsError> {
    check_access(dir, cred, MAY_WRITE | MAY_EXEC)?;
    check_sticky(dir, victim, cred)
}

/// Removes the link `(parent, name)` from `inode`'s link list; the caller
/// updates nlink. Returns the updated inode.
fn drop_link(mut inode: Inode, parent: Soid, name: &[u8]) -> Inode {
    if inode.parent == parent && &*inode.name == name {
        // Promote a secondary link, if any, to primary.
        if let Some(extra) = inode.extra.as_mut() {
            if !extra.links.is_empty() {
                let (p, n) = extra.links.remove(0);
                inode.parent = p;
                inode.name = n;
            }
        }
    } else if let Some(extra) = inode.extra.as_mut() {
        if let Some(i) = extra
            .links
            .iter()
            .position(|(p, n)| *p == parent && &**n == name)
        {
            extra.links.remove(i);
        }
    }
    inode
}

/// Renames the link `(old_parent, old_name)` of `inode` to `(new_parent, new_name)`.
fn move_link(mut inode: Inode, old: (Soid, &[u8]), new: (Soid, &[u8])) -> Inode {
    if inode.parent == old.0 && &*inode.name == old.1 {
        inode.parent = new.0;
        inode.name = new.1.into();
    } else if let Some(extra) = inode.extra.as_mut() {
        if let Some(l) = extra
            .links
            .iter_mut()
            .find(|(p, n)| *p == old.0 && &**n == old.1)
        {
            *l = (new.0, new.1.into());
        }
    }
    inode
}

/// Drops one link of `soid` (already removed from its directory): deletes
/// the inode at nlink 0, else updates its link list and ctime.
fn unlink_inode(
    txn: &mut Txn,
    soid: Soid,
    inode: Inode,
    parent: Soid,
    name: &[u8],
) -> OpResult<()> {
    if inode.is_dir() || inode.nlink <= 1 {
        return txn.delete_inode(soid);
    }
    let mut inode = drop_link(inode, parent, name);
    inode.nlink -= 1;
    inode.ctime = txn.now;
    txn.put_inode(soid, inode)
}

/// The first steps of unlink and rmdir, in Linux's order: the directory
/// (search permission), the name, the entry, then `may_delete`.
fn removal(
    txn: &mut Txn,
    cred: &Credentials,
    parent: Soid,
    name: &[u8],
) -> OpResult<(Inode, Dentry, Inode)> {
    let dir = searchable_dir(txn, cred, parent)?;
    validate_lookup_name(name)?;
    let d = txn
        .dentry(parent, name)?
        .ok_or(OpError::Fs(FsError::NotFound))?;
    let victim = txn.inode_or(d.child, FsError::NotFound)?;
    may_delete(&dir, &victim, cred)?;
    Ok((dir, d, victim))
}

/// Removes a link to a non-directory; returns what was removed: the
/// inode's attributes as they were (`nlink` 1: it is gone).
pub fn unlink(txn: &mut Txn, cred: &Credentials, parent: Soid, name: &[u8]) -> OpResult<Attr> {
    let (mut dir, d, victim) = removal(txn, cred, parent, name)?;
    if victim.is_dir() {
        return Err(FsError::IsDir.into());
    }
    let removed = victim.attr(d.child);
    txn.delete_dentry(parent, name)?;
    unlink_inode(txn, d.child, victim, parent, name)?;
    dir.mtime = txn.now;
    dir.ctime = txn.now;
    txn.put_inode(parent, dir)?;
    Ok(removed)
}

/// Removes an empty directory; returns its attributes as they were.
pub fn rmdir(txn: &mut Txn, cred: &Credentials, parent: Soid, name: &[u8]) -> OpResult<Attr> {
    let (mut dir, d, victim) = removal(txn, cred, parent, name)?;
    let removed = victim.attr(d.child);
    if !victim.is_dir() {
        return Err(FsError::NotDir.into());
    }
    if txn.has_entries(d.child)? {
        return Err(FsError::NotEmpty.into());
    }
    txn.delete_dentry(parent, name)?;
    txn.delete_inode(d.child)?;
    // A subdirectory slot is free again: let the allocator look for it.
    if let Some(extra) = dir.extra.as_mut() {
        extra.extents.slots_full = false;
    }
    dir.nlink = dir.nlink.saturating_sub(1);
    dir.mtime = txn.now;
    dir.ctime = txn.now;
    txn.put_inode(parent, dir)?;
    Ok(removed)
}

pub fn link(
    txn: &mut Txn,
    cred: &Credentials,
    soid: Soid,
    new_parent: Soid,
    new_name: &[u8],
) -> OpResult<Attr> {
    let mut inode = txn.inode_or(soid, FsError::NotFound)?;
    let mut dir = searchable_dir(txn, cred, new_parent)?;
    validate_name(new_name)?;
    if txn.dentry(new_parent, new_name)?.is_some() {
        return Err(FsError::Exists.into());
    }
    check_access(&dir, cred, MAY_WRITE | MAY_EXEC)?;
    if inode.is_dir() {
        return Err(FsError::Perm.into());
    }
    if inode.nlink == 0 {
        return Err(FsError::NotFound.into());
    }
    if inode.nlink >= LINK_MAX {
        return Err(FsError::TooManyLinks.into());
    }
    let links_bytes: usize = inode
        .extra
        .as_ref()
        .map_or(0, |e| e.links.iter().map(|(_, n)| n.len() + 16).sum());
    if links_bytes + new_name.len() + 16 > LINKS_BYTES_MAX {
        return Err(FsError::TooManyLinks.into());
    }
    let now = txn.now;
    inode.nlink += 1;
    inode.ctime = now;
    inode.extra_mut().links.push((new_parent, new_name.into()));
    let attr = inode.attr(soid);
    let ftype = inode.ftype;
    txn.put_inode(soid, inode)?;
    // The directory may be the inode itself only for directories, refused above.
    dir.mtime = now;
    dir.ctime = now;
    txn.put_inode(new_parent, dir)?;
    txn.put_dentry(
        new_parent,
        Dentry {
            child: soid,
            ftype,
            name: new_name.into(),
        },
    )?;
    Ok(attr)
}

pub fn readlink(txn: &mut Txn, soid: Soid) -> OpResult<Box<[u8]>> {
    let inode = txn.inode_or(soid, FsError::NotFound)?;
    inode
        .symlink()
        .map(Box::from)
        .ok_or(OpError::Fs(FsError::Invalid))
}

/// A READDIRPLUS page: entries with their attributes where read (see
/// [`readdir_plus`]), and whether the directory ends with them.
pub type PlusPage = (Vec<(DirEntry, Option<Attr>)>, bool);

/// Up to `limit` entries of `dir` after cookie `after`, and whether the
/// directory ends with them (no entry after the last one).
pub fn readdir(
    txn: &mut Txn,
    cred: &Credentials,
    dir: Soid,
    after: u64,
    limit: usize,
) -> OpResult<(Vec<DirEntry>, bool)> {
    let d = dir_inode(txn, dir)?;
    check_access(&d, cred, MAY_READ)?;
    let table = txn.table_for(dir)?;
    let (page, end) = table.readdir_page(dir, after, limit.max(1));
    let entries = page
        .into_iter()
        .map(|(cookie, e)| DirEntry {
            cookie,
            name: Box::from(&*e.name),
            soid: e.child,
            ftype: e.ftype,
        })
        .collect();
    Ok((entries, end))
}

/// [`readdir`] with each entry's attributes, read in the same transaction
/// (READDIRPLUS). An entry gets them only when `cred` may also search
/// `dir` — a lookup of it would be refused otherwise — and its inode is in
/// `dir`'s own table (a hard link or a moved subtree may have it in another
/// table, or on another server: that entry is left for a lookup, so a
/// listing never locks more than one table).
pub fn readdir_plus(
    txn: &mut Txn,
    cred: &Credentials,
    dir: Soid,
    after: u64,
    limit: usize,
) -> OpResult<PlusPage> {
    let d = dir_inode(txn, dir)?;
    check_access(&d, cred, MAY_READ)?;
    let searchable = check_access(&d, cred, MAY_EXEC).is_ok();
    let table = txn.table_for(dir)?;
    let (page, end) = table.readdir_page(dir, after, limit.max(1));
    let entries = page
        .into_iter()
        .map(|(cookie, e)| {
            let attr = searchable
                .then(|| table.inode(e.child).map(|i| i.attr(e.child)))
                .flatten();
            let entry = DirEntry {
                cookie,
                name: Box::from(&*e.name),
                soid: e.child,
                ftype: e.ftype,
            };
            (entry, attr)
        })
        .collect();
    Ok((entries, end))
}

/// `write_handle`: the size changes through a file the caller holds open
/// for writing (`ftruncate`), so it needs no write permission now.
pub fn setattr(
    txn: &mut Txn,
    cred: &Credentials,
    soid: Soid,
    set: &SetAttr,
    write_handle: bool,
) -> OpResult<Attr> {
    let mut inode = txn.inode_or(soid, FsError::NotFound)?;
    let mut attr = inode.attr(soid);
    crate::setattr::apply(&mut attr, cred, set, write_handle, txn.now)?;
    inode.perm = attr.perm as u16;
    inode.uid = attr.uid;
    inode.gid = attr.gid;
    inode.size = attr.size;
    inode.atime = attr.atime;
    inode.mtime = attr.mtime;
    inode.ctime = attr.ctime;
    txn.put_inode(soid, inode)?;
    Ok(attr)
}

/// Is `ancestor` on the `..` chain of `dir` (including `dir` itself)?
fn is_ancestor(txn: &mut Txn, ancestor: Soid, mut dir: Soid) -> OpResult<bool> {
    // The chain is at most as long as the number of directories; a bound
    // protects against a corrupt cycle.
    for _ in 0..1_000_000 {
        if dir == ancestor {
            return Ok(true);
        }
        if dir == Soid::ROOT {
            return Ok(false);
        }
        dir = txn.inode_or(dir, FsError::NotFound)?.parent;
    }
    Err(FsError::Loop.into())
}

/// Renames; returns the attributes, as they were, of the inode whose name
/// the rename replaced (`None`: no name was replaced — a new name, an
/// exchange, or the same file), so a client can let go of what it kept
/// of it without asking first.
pub fn rename(
    txn: &mut Txn,
    cred: &Credentials,
    old_parent: Soid,
    old_name: &[u8],
    new_parent: Soid,
    new_name: &[u8],
    flags: RenameFlags,
) -> OpResult<Option<Attr>> {
    if flags.noreplace && flags.exchange {
        return Err(FsError::Invalid.into());
    }
    let old_dir = searchable_dir(txn, cred, old_parent)?;
    let new_dir = searchable_dir(txn, cred, new_parent)?;
    validate_name(old_name)?;
    validate_name(new_name)?;
    // Order as Linux's do_renameat2/vfs_rename: lookups and the "trap"
    // (ancestry) checks first, then permissions, then types and emptiness.
    let src = txn
        .dentry(old_parent, old_name)?
        .ok_or(OpError::Fs(FsError::NotFound))?;
    let src_inode = txn.inode_or(src.child, FsError::NotFound)?;
    let target = txn.dentry(new_parent, new_name)?;
    if flags.noreplace && target.is_some() {
        return Err(FsError::Exists.into());
    }
    if flags.exchange && target.is_none() {
        return Err(FsError::NotFound.into());
    }
    // No directory may move beneath itself.
    if src_inode.is_dir() && is_ancestor(txn, src.child, new_parent)? {
        return Err(FsError::Invalid.into());
    }
    let target_inode = match &target {
        Some(t) => Some(txn.inode_or(t.child, FsError::NotFound)?),
        None => None,
    };
    if let (Some(t), Some(ti)) = (&target, &target_inode) {
        if ti.is_dir() && is_ancestor(txn, t.child, old_parent)? {
            return Err(if flags.exchange {
                FsError::Invalid
            } else {
                FsError::NotEmpty
            }
            .into());
        }
        if t.child == src.child {
            // Same file (two links to one inode, or the same entry): POSIX
            // says do nothing and succeed.
            return Ok(None);
        }
    }
    may_delete(&old_dir, &src_inode, cred)?;
    match &target_inode {
        Some(ti) => {
            may_delete(&new_dir, ti, cred)?;
            if !flags.exchange {
                if src_inode.is_dir() && !ti.is_dir() {
                    return Err(FsError::NotDir.into());
                }
                if !src_inode.is_dir() && ti.is_dir() {
                    return Err(FsError::IsDir.into());
                }
            }
        }
        None => check_access(&new_dir, cred, MAY_WRITE | MAY_EXEC)?,
    }
    let cross = old_parent != new_parent;
    if cross {
        if src_inode.is_dir() {
            check_access(&src_inode, cred, MAY_WRITE)?;
        }
        if flags.exchange {
            if let Some(ti) = &target_inode {
                if ti.is_dir() {
                    check_access(ti, cred, MAY_WRITE)?;
                }
            }
        }
    }
    if let (Some(t), Some(ti)) = (&target, &target_inode) {
        if !flags.exchange && ti.is_dir() && txn.has_entries(t.child)? {
            return Err(FsError::NotEmpty.into());
        }
    }
    // vfs_rename: a directory moving into another directory adds a link
    // to it (in an exchange, possibly in either direction).
    if cross {
        let target_is_dir = target_inode.as_ref().is_some_and(|t| t.is_dir());
        if src_inode.is_dir() && !target_is_dir && new_dir.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks.into());
        }
        if flags.exchange && !src_inode.is_dir() && target_is_dir && old_dir.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks.into());
        }
    }

    let now = txn.now;
    if flags.exchange {
        let (t, ti) = match (target, target_inode) {
            (Some(t), Some(ti)) => (t, ti),
            _ => return Err(FsError::NotFound.into()),
        };
        let mut a = move_link(src_inode, (old_parent, old_name), (new_parent, new_name));
        let mut b = move_link(ti, (new_parent, new_name), (old_parent, old_name));
        a.ctime = now;
        b.ctime = now;
        let (a_dir, b_dir) = (a.is_dir(), b.is_dir());
        txn.put_inode(src.child, a)?;
        txn.put_inode(t.child, b)?;
        txn.put_dentry(
            new_parent,
            Dentry {
                child: src.child,
                ftype: src.ftype,
                name: new_name.into(),
            },
        )?;
        txn.put_dentry(
            old_parent,
            Dentry {
                child: t.child,
                ftype: t.ftype,
                name: old_name.into(),
            },
        )?;
        // Subdirectories moving from old_parent to new_parent.
        let delta = if cross {
            a_dir as i64 - b_dir as i64
        } else {
            0
        };
        touch_dir(txn, old_parent, -delta, now)?;
        if cross {
            touch_dir(txn, new_parent, delta, now)?;
        }
        return Ok(None);
    }

    let src_is_dir = src_inode.is_dir();
    let mut replaced = None;
    if let (Some(t), Some(ti)) = (&target, target_inode) {
        replaced = Some(ti.attr(t.child));
        let target_was_dir = ti.is_dir();
        unlink_inode(txn, t.child, ti, new_parent, new_name)?;
        if target_was_dir {
            // The replaced directory's `..` link to new_parent goes away.
            touch_dir(txn, new_parent, -1, now)?;
        }
    }
    let mut moved = move_link(src_inode, (old_parent, old_name), (new_parent, new_name));
    moved.ctime = now;
    txn.put_inode(src.child, moved)?;
    txn.delete_dentry(old_parent, old_name)?;
    txn.put_dentry(
        new_parent,
        Dentry {
            child: src.child,
            ftype: src.ftype,
            name: new_name.into(),
        },
    )?;
    let delta = if src_is_dir && cross { 1 } else { 0 };
    touch_dir(txn, old_parent, -delta, now)?;
    if cross {
        touch_dir(txn, new_parent, delta, now)?;
    }
    Ok(replaced)
}

/// Sets a directory's mtime/ctime and adjusts its link count.
fn touch_dir(txn: &mut Txn, dir: Soid, nlink_delta: i64, now: Nanos) -> OpResult<()> {
    let mut d = txn.inode_or(dir, FsError::NotFound)?;
    d.nlink = (d.nlink as i64 + nlink_delta).clamp(0, u32::MAX as i64) as u32;
    d.mtime = now;
    d.ctime = now;
    txn.put_inode(dir, d)
}

/// The syscall-level check of an xattr name (`setxattr`/`getxattr` copy it
/// in first): empty or longer than 255 bytes is `ERANGE`.
fn check_xattr_name(name: &[u8]) -> Result<(), FsError> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        Err(FsError::Range)
    } else {
        Ok(())
    }
}

/// Linux `xattr_permission`, then the handler lookup (`xattr_resolve_name`):
/// namespace rules, then ordinary permission, then unknown namespaces
/// (`EOPNOTSUPP`) and bare prefixes (`EINVAL`).
fn xattr_permission(inode: &Inode, cred: &Credentials, name: &[u8], write: bool) -> OpResult<()> {
    let denied_ns = || -> OpError {
        if write {
            FsError::Perm
        } else {
            FsError::NoData
        }
        .into()
    };
    if name.starts_with(b"trusted.") {
        if !cred.is_root() {
            return Err(denied_ns());
        }
    } else {
        if name.starts_with(b"user.") {
            if !matches!(inode.ftype, FileType::Regular | FileType::Directory) {
                return Err(denied_ns());
            }
            if write
                && inode.is_dir()
                && inode.perm as u32 & sextant_types::S_ISVTX != 0
                && check_owner(inode, cred).is_err()
            {
                return Err(FsError::Perm.into());
            }
        }
        check_access(inode, cred, if write { MAY_WRITE } else { MAY_READ })?;
    }
    let suffix = [&b"user."[..], b"trusted.", b"security."]
        .iter()
        .find_map(|p| name.strip_prefix(*p));
    match suffix {
        None => Err(FsError::NotSupported.into()),
        Some([]) => Err(FsError::Invalid.into()),
        // The capability hook (cap_inode_setxattr/removexattr): writing
        // security.* needs CAP_SYS_ADMIN.
        Some(_) if write && name.starts_with(b"security.") && !cred.is_root() => {
            Err(FsError::Perm.into())
        }
        Some(_) => Ok(()),
    }
}

pub fn getxattr(txn: &mut Txn, cred: &Credentials, soid: Soid, name: &[u8]) -> OpResult<Box<[u8]>> {
    let inode = txn.inode_or(soid, FsError::NotFound)?;
    check_xattr_name(name)?;
    xattr_permission(&inode, cred, name, false)?;
    inode
        .xattrs()
        .and_then(|x| x.get(name))
        .cloned()
        .ok_or(OpError::Fs(FsError::NoData))
}

pub fn listxattr(txn: &mut Txn, cred: &Credentials, soid: Soid) -> OpResult<Vec<Box<[u8]>>> {
    let inode = txn.inode_or(soid, FsError::NotFound)?;
    Ok(inode
        .xattrs()
        .map(|x| {
            x.keys()
                .filter(|k| cred.is_root() || !k.starts_with(b"trusted."))
                .cloned()
                .collect()
        })
        .unwrap_or_default())
}

pub fn setxattr(
    txn: &mut Txn,
    cred: &Credentials,
    soid: Soid,
    name: &[u8],
    value: &[u8],
    flags: XattrFlags,
) -> OpResult<()> {
    let mut inode = txn.inode_or(soid, FsError::NotFound)?;
    check_xattr_name(name)?;
    if value.len() > XATTR_SIZE_MAX {
        return Err(FsError::TooBig.into());
    }
    xattr_permission(&inode, cred, name, true)?;
    let exists = inode.xattrs().is_some_and(|x| x.contains_key(name));
    match flags {
        XattrFlags::Create if exists => return Err(FsError::Exists.into()),
        XattrFlags::Replace if !exists => return Err(FsError::NoData.into()),
        _ => {}
    }
    let used: usize = inode
        .xattrs()
        .map(|x| {
            x.iter()
                .filter(|(k, _)| &***k != name)
                .map(|(k, v)| k.len() + v.len())
                .sum()
        })
        .unwrap_or(0);
    if used + name.len() + value.len() > XATTR_TOTAL_MAX {
        return Err(FsError::NoSpace.into());
    }
    inode
        .extra_mut()
        .xattrs
        .insert(Box::from(name), Box::from(value));
    inode.ctime = txn.now;
    txn.put_inode(soid, inode)
}

pub fn removexattr(txn: &mut Txn, cred: &Credentials, soid: Soid, name: &[u8]) -> OpResult<()> {
    let mut inode = txn.inode_or(soid, FsError::NotFound)?;
    check_xattr_name(name)?;
    xattr_permission(&inode, cred, name, true)?;
    let removed = inode
        .extra
        .as_mut()
        .and_then(|e| e.xattrs.remove(name))
        .is_some();
    if !removed {
        return Err(FsError::NoData.into());
    }
    inode.ctime = txn.now;
    txn.put_inode(soid, inode)
}

/// Resolves an absolute path, following symlinks in every component but
/// the last (and the last too when `follow_last`), as `stat`/`lstat` do.
/// `confine`d, every lookup must be a step the confinement allows
/// ([`crate::confine::may_step`]) and the result must be in its subtree
/// or one of its root's ancestors, else `EACCES` — before anything
/// outside is read.
pub fn resolve_path(
    txn: &mut Txn,
    cred: &Credentials,
    path: &[u8],
    follow_last: bool,
    confine: Option<&crate::confine::Confine>,
) -> OpResult<Attr> {
    use sextant_types::walk::{PathWalk, Step};
    let root = txn
        .inode_or(Soid::ROOT, FsError::NotFound)?
        .attr(Soid::ROOT);
    let mut walk = PathWalk::new(path, follow_last, root);
    loop {
        match walk.step()? {
            Step::Search { dir, up } => {
                searchable_dir(txn, cred, dir.soid)?;
                if up {
                    let parent = match walk.walked_parent() {
                        Some(p) => p.clone(),
                        None => txn
                            .inode_or(dir.parent, FsError::NotFound)?
                            .attr(dir.parent),
                    };
                    walk.up(parent);
                }
            }
            Step::Lookup { dir, name, .. } => {
                if let Some(c) = confine {
                    crate::confine::may_step(txn, dir, &name, c)?;
                }
                walk.found(lookup(txn, cred, dir, &name)?)?;
            }
            Step::Readlink { link } => walk.target(&readlink(txn, link)?),
            Step::Root => walk.at_root(
                txn.inode_or(Soid::ROOT, FsError::NotFound)?
                    .attr(Soid::ROOT),
            ),
            Step::Done(attr) => {
                if let Some(c) = confine {
                    // An ancestor of the subtree's root passes (the caller
                    // decides: a search clamps it); anything else outside
                    // is EACCES.
                    if !c.is_ancestor(attr.soid) {
                        crate::confine::require_within(txn, attr.soid, c)?;
                    }
                }
                return Ok(attr);
            }
        }
    }
}
