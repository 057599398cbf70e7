//! The reference model: a tiny in-memory POSIX namespace written from
//! Linux/ext4 semantics, independent of the engine's code.
//!
//! Nodes are keyed by a model id (creation order). Link counts are not
//! stored: a directory has `2 + subdirectories`, anything else has the
//! number of entries naming it — the definition, not a counter that could
//! drift. Every operation uses one timestamp, `self.now`.
//!
//! Check order follows Linux's VFS (fs/namei.c, fs/attr.c, fs/xattr.c,
//! fs/open.c, fs/utimes.c) and ext4. Names that can never be a path
//! component (empty, `.`, `..`, containing `/` or NUL) are an API-level
//! error of the engine: `EINVAL` for operations that create or rename,
//! `ENOENT` for operations that only look a name up (lookup, unlink,
//! rmdir) — the kernel never passes such names to a file system.

use sextant_types::{Credentials, FileType, FsError};
use std::collections::{BTreeMap, BTreeSet};

pub type Id = usize;
pub type Res<T> = Result<T, FsError>;

pub const ROOT: Id = 0;
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;
const S_IXGRP: u32 = 0o010;
const MAY_READ: u32 = 4;
const MAY_WRITE: u32 = 2;
const MAY_EXEC: u32 = 1;
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
const MAXSYMLINKS: usize = 40;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir {
        entries: BTreeMap<Vec<u8>, Id>,
        parent: Id,
    },
    File,
    Symlink(Vec<u8>),
    Special,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub ftype: FileType,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub rdev: u32,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub kind: Kind,
}

/// What a creating operation makes.
#[derive(Clone, Debug)]
pub enum Make {
    File { exclusive: bool },
    Dir,
    Symlink(Vec<u8>),
    Special(FileType, u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Time {
    Now,
    At(i64),
}

/// One setattr call, shaped like the system call that would issue it.
#[derive(Clone, Debug)]
pub enum SetOp {
    Chmod(u32),
    Chown(Option<u32>, Option<u32>),
    Truncate(u64),
    /// utimensat: `None` is UTIME_OMIT. Never both `None`.
    Times(Option<Time>, Option<Time>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XFlags {
    Any,
    Create,
    Replace,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub nodes: BTreeMap<Id, Node>,
    pub next_id: Id,
    pub now: i64,
}

fn name_too_long(name: &[u8]) -> bool {
    name.len() > NAME_MAX
}

/// Not a possible directory entry name (checked after the length).
fn name_invalid(name: &[u8]) -> bool {
    name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
}

/// Name check of operations that create or rename an entry.
fn check_new_name(name: &[u8]) -> Res<()> {
    if name_too_long(name) {
        return Err(FsError::NameTooLong);
    }
    if name_invalid(name) {
        return Err(FsError::Invalid);
    }
    Ok(())
}

/// Name check of operations that only look an entry up.
fn check_lookup_name(name: &[u8]) -> Res<()> {
    if name_too_long(name) {
        return Err(FsError::NameTooLong);
    }
    if name_invalid(name) {
        return Err(FsError::NotFound);
    }
    Ok(())
}

fn in_group(cred: &Credentials, gid: u32) -> bool {
    cred.gid == gid || cred.groups.contains(&gid)
}

/// Clears set-user-id, and set-group-id when group-execute is set
/// (`should_remove_suid` / `ATTR_KILL_S*`).
fn kill_suid(perm: u32) -> u32 {
    let mut p = perm & !S_ISUID;
    if p & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP) {
        p &= !S_ISGID;
    }
    p
}

impl Model {
    pub fn new(now: i64, root_perm: u32, root_uid: u32, root_gid: u32) -> Model {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            ROOT,
            Node {
                ftype: FileType::Directory,
                perm: root_perm & 0o7777,
                uid: root_uid,
                gid: root_gid,
                size: 0,
                rdev: 0,
                atime: now,
                mtime: now,
                ctime: now,
                xattrs: BTreeMap::new(),
                kind: Kind::Dir {
                    entries: BTreeMap::new(),
                    parent: ROOT,
                },
            },
        );
        Model {
            nodes,
            next_id: 1,
            now,
        }
    }

    pub fn node(&self, id: Id) -> &Node {
        &self.nodes[&id]
    }

    fn node_mut(&mut self, id: Id) -> &mut Node {
        self.nodes.get_mut(&id).expect("live node")
    }

    pub fn is_dir(&self, id: Id) -> bool {
        matches!(self.node(id).kind, Kind::Dir { .. })
    }

    pub fn entries(&self, dir: Id) -> &BTreeMap<Vec<u8>, Id> {
        match &self.node(dir).kind {
            Kind::Dir { entries, .. } => entries,
            _ => panic!("not a directory"),
        }
    }

    /// The node `name` names in `dir`, if `dir` is a directory and has it.
    pub fn entries_opt(&self, dir: Id, name: &[u8]) -> Option<Id> {
        match &self.node(dir).kind {
            Kind::Dir { entries, .. } => entries.get(name).copied(),
            _ => None,
        }
    }

    fn entries_mut(&mut self, dir: Id) -> &mut BTreeMap<Vec<u8>, Id> {
        match &mut self.node_mut(dir).kind {
            Kind::Dir { entries, .. } => entries,
            _ => panic!("not a directory"),
        }
    }

    pub fn parent_of(&self, dir: Id) -> Id {
        match &self.node(dir).kind {
            Kind::Dir { parent, .. } => *parent,
            _ => panic!("not a directory"),
        }
    }

    /// Link count by definition.
    pub fn nlink(&self, id: Id) -> u32 {
        match &self.node(id).kind {
            Kind::Dir { entries, .. } => {
                2 + entries.values().filter(|c| self.is_dir(**c)).count() as u32
            }
            _ => self.links_to(id),
        }
    }

    fn links_to(&self, id: Id) -> u32 {
        self.nodes
            .values()
            .map(|n| match &n.kind {
                Kind::Dir { entries, .. } => entries.values().filter(|c| **c == id).count() as u32,
                _ => 0,
            })
            .sum()
    }

    pub fn dirs(&self) -> Vec<Id> {
        self.nodes
            .iter()
            .filter(|(_, n)| matches!(n.kind, Kind::Dir { .. }))
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn ids(&self) -> Vec<Id> {
        self.nodes.keys().copied().collect()
    }

    // ---- permissions (generic_permission without ACLs) -------------------

    pub fn may(&self, id: Id, cred: &Credentials, mask: u32) -> bool {
        let n = self.node(id);
        if cred.uid == 0 {
            // CAP_DAC_OVERRIDE: everything but executing a file with no x bit.
            return mask & MAY_EXEC == 0
                || matches!(n.kind, Kind::Dir { .. })
                || n.perm & 0o111 != 0;
        }
        let bits = if cred.uid == n.uid {
            (n.perm >> 6) & 7
        } else if in_group(cred, n.gid) {
            (n.perm >> 3) & 7
        } else {
            n.perm & 7
        };
        bits & mask == mask
    }

    fn need(&self, id: Id, cred: &Credentials, mask: u32) -> Res<()> {
        if self.may(id, cred, mask) {
            Ok(())
        } else {
            Err(FsError::Access)
        }
    }

    fn owner_or_root(&self, id: Id, cred: &Credentials) -> bool {
        cred.uid == 0 || cred.uid == self.node(id).uid
    }

    /// Walking into `dir`: it must be a directory we may search.
    fn searchable(&self, cred: &Credentials, dir: Id) -> Res<()> {
        if !self.is_dir(dir) {
            return Err(FsError::NotDir);
        }
        self.need(dir, cred, MAY_EXEC)
    }

    /// `may_delete` up to (not including) the type checks.
    fn may_delete(&self, cred: &Credentials, dir: Id, victim: Id) -> Res<()> {
        self.need(dir, cred, MAY_WRITE | MAY_EXEC)?;
        let d = self.node(dir);
        if d.perm & S_ISVTX != 0
            && cred.uid != 0
            && cred.uid != self.node(victim).uid
            && cred.uid != d.uid
        {
            return Err(FsError::Perm);
        }
        Ok(())
    }

    fn is_ancestor_or_self(&self, ancestor: Id, mut dir: Id) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            if dir == ROOT {
                return false;
            }
            dir = self.parent_of(dir);
        }
    }

    fn touch_dir(&mut self, dir: Id) {
        let now = self.now;
        let d = self.node_mut(dir);
        d.mtime = now;
        d.ctime = now;
    }

    /// After an entry naming `id` went away: drop the node at zero links,
    /// else update its ctime.
    fn unlinked(&mut self, id: Id) {
        if self.is_dir(id) || self.links_to(id) == 0 {
            self.nodes.remove(&id);
        } else {
            let now = self.now;
            self.node_mut(id).ctime = now;
        }
    }

    // ---- operations -------------------------------------------------------

    pub fn lookup(&self, cred: &Credentials, dir: Id, name: &[u8]) -> Res<Id> {
        self.searchable(cred, dir)?;
        check_lookup_name(name)?;
        self.entries(dir)
            .get(name)
            .copied()
            .ok_or(FsError::NotFound)
    }

    /// create / mknod / mkdir / symlink. Returns the new node (or, for a
    /// non-exclusive create of an existing non-directory, that node).
    pub fn make(
        &mut self,
        cred: &Credentials,
        dir: Id,
        name: &[u8],
        perm: u32,
        what: Make,
    ) -> Res<Id> {
        // symlinkat copies its target from user space before anything else.
        if let Make::Symlink(target) = &what {
            if target.is_empty() {
                return Err(FsError::NotFound);
            }
            if target.len() >= PATH_MAX {
                return Err(FsError::NameTooLong);
            }
        }
        self.searchable(cred, dir)?;
        check_new_name(name)?;
        if let Some(&existing) = self.entries(dir).get(name) {
            return match what {
                Make::File { exclusive: false } => {
                    if self.is_dir(existing) {
                        Err(FsError::IsDir)
                    } else {
                        Ok(existing)
                    }
                }
                _ => Err(FsError::Exists),
            };
        }
        self.need(dir, cred, MAY_WRITE | MAY_EXEC)?;
        // vfs_mknod: device nodes need CAP_MKNOD (a char device 0/0 is a
        // whiteout, which does not).
        if let Make::Special(ft, rdev) = &what {
            let device = match ft {
                FileType::CharDevice => *rdev != 0,
                FileType::BlockDevice => true,
                _ => false,
            };
            if device && cred.uid != 0 {
                return Err(FsError::Perm);
            }
        }
        let (ftype, mut mode, kind, size, rdev) = match what {
            Make::File { .. } => (FileType::Regular, perm & 0o7777, Kind::File, 0, 0),
            Make::Special(FileType::Regular, _) => {
                (FileType::Regular, perm & 0o7777, Kind::File, 0, 0)
            }
            Make::Special(ft, rdev) => (ft, perm & 0o7777, Kind::Special, 0, rdev),
            // vfs_mkdir keeps only rwx and sticky of the requested mode.
            Make::Dir => (
                FileType::Directory,
                perm & 0o1777,
                Kind::Dir {
                    entries: BTreeMap::new(),
                    parent: dir,
                },
                0,
                0,
            ),
            Make::Symlink(t) => (
                FileType::Symlink,
                0o777,
                Kind::Symlink(t.clone()),
                t.len() as u64,
                0,
            ),
        };
        // inode_init_owner + mode_strip_sgid.
        let d = self.node(dir);
        let gid = if d.perm & S_ISGID != 0 {
            if ftype == FileType::Directory {
                mode |= S_ISGID;
            } else if mode & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP)
                && cred.uid != 0
                && !in_group(cred, d.gid)
            {
                mode &= !S_ISGID;
            }
            d.gid
        } else {
            cred.gid
        };
        let now = self.now;
        let id = self.next_id;
        self.next_id += 1;
        self.nodes.insert(
            id,
            Node {
                ftype,
                perm: mode,
                uid: cred.uid,
                gid,
                size,
                rdev,
                atime: now,
                mtime: now,
                ctime: now,
                xattrs: BTreeMap::new(),
                kind,
            },
        );
        self.entries_mut(dir).insert(name.to_vec(), id);
        self.touch_dir(dir);
        Ok(id)
    }

    pub fn unlink(&mut self, cred: &Credentials, dir: Id, name: &[u8]) -> Res<()> {
        self.searchable(cred, dir)?;
        check_lookup_name(name)?;
        let victim = *self.entries(dir).get(name).ok_or(FsError::NotFound)?;
        self.may_delete(cred, dir, victim)?;
        if self.is_dir(victim) {
            return Err(FsError::IsDir);
        }
        self.entries_mut(dir).remove(name);
        self.unlinked(victim);
        self.touch_dir(dir);
        Ok(())
    }

    pub fn rmdir(&mut self, cred: &Credentials, dir: Id, name: &[u8]) -> Res<()> {
        self.searchable(cred, dir)?;
        check_lookup_name(name)?;
        let victim = *self.entries(dir).get(name).ok_or(FsError::NotFound)?;
        self.may_delete(cred, dir, victim)?;
        if !self.is_dir(victim) {
            return Err(FsError::NotDir);
        }
        if !self.entries(victim).is_empty() {
            return Err(FsError::NotEmpty);
        }
        self.entries_mut(dir).remove(name);
        self.nodes.remove(&victim);
        self.touch_dir(dir);
        Ok(())
    }

    pub fn link(&mut self, cred: &Credentials, id: Id, dir: Id, name: &[u8]) -> Res<Id> {
        self.searchable(cred, dir)?;
        check_new_name(name)?;
        if self.entries(dir).contains_key(name) {
            return Err(FsError::Exists);
        }
        self.need(dir, cred, MAY_WRITE | MAY_EXEC)?;
        if self.is_dir(id) {
            return Err(FsError::Perm);
        }
        self.entries_mut(dir).insert(name.to_vec(), id);
        let now = self.now;
        self.node_mut(id).ctime = now;
        self.touch_dir(dir);
        Ok(id)
    }

    pub fn readlink(&self, id: Id) -> Res<Vec<u8>> {
        match &self.node(id).kind {
            Kind::Symlink(t) => Ok(t.clone()),
            _ => Err(FsError::Invalid),
        }
    }

    /// opendir: `O_DIRECTORY` then read permission.
    pub fn opendir(&self, cred: &Credentials, dir: Id) -> Res<()> {
        if !self.is_dir(dir) {
            return Err(FsError::NotDir);
        }
        self.need(dir, cred, MAY_READ)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &mut self,
        cred: &Credentials,
        od: Id,
        on: &[u8],
        nd: Id,
        nn: &[u8],
        noreplace: bool,
        exchange: bool,
    ) -> Res<()> {
        if noreplace && exchange {
            return Err(FsError::Invalid);
        }
        self.searchable(cred, od)?;
        self.searchable(cred, nd)?;
        check_new_name(on)?;
        check_new_name(nn)?;
        let src = *self.entries(od).get(on).ok_or(FsError::NotFound)?;
        let tgt = self.entries(nd).get(nn).copied();
        if noreplace && tgt.is_some() {
            return Err(FsError::Exists);
        }
        if exchange && tgt.is_none() {
            return Err(FsError::NotFound);
        }
        // lock_rename's trap: only when the parents differ.
        if od != nd {
            if self.is_dir(src) && self.is_ancestor_or_self(src, nd) {
                return Err(FsError::Invalid);
            }
            if let Some(t) = tgt {
                if self.is_dir(t) && self.is_ancestor_or_self(t, od) {
                    return Err(if exchange {
                        FsError::Invalid
                    } else {
                        FsError::NotEmpty
                    });
                }
            }
        }
        // vfs_rename
        if tgt == Some(src) {
            return Ok(());
        }
        let src_dir = self.is_dir(src);
        self.may_delete(cred, od, src)?;
        match tgt {
            Some(t) => {
                self.may_delete(cred, nd, t)?;
                if !exchange {
                    if src_dir && !self.is_dir(t) {
                        return Err(FsError::NotDir);
                    }
                    if !src_dir && self.is_dir(t) {
                        return Err(FsError::IsDir);
                    }
                }
            }
            None => self.need(nd, cred, MAY_WRITE | MAY_EXEC)?,
        }
        if od != nd {
            if src_dir {
                self.need(src, cred, MAY_WRITE)?;
            }
            if let Some(t) = tgt {
                if exchange && self.is_dir(t) {
                    self.need(t, cred, MAY_WRITE)?;
                }
            }
        }
        if let Some(t) = tgt {
            if !exchange && self.is_dir(t) && !self.entries(t).is_empty() {
                return Err(FsError::NotEmpty);
            }
        }
        let now = self.now;
        if exchange {
            let t = tgt.expect("exchange target");
            self.entries_mut(od).insert(on.to_vec(), t);
            self.entries_mut(nd).insert(nn.to_vec(), src);
            if let Kind::Dir { parent, .. } = &mut self.node_mut(src).kind {
                *parent = nd;
            }
            if let Kind::Dir { parent, .. } = &mut self.node_mut(t).kind {
                *parent = od;
            }
            self.node_mut(src).ctime = now;
            self.node_mut(t).ctime = now;
        } else {
            self.entries_mut(od).remove(on);
            if let Some(t) = tgt {
                self.entries_mut(nd).remove(nn);
                self.unlinked(t);
            }
            self.entries_mut(nd).insert(nn.to_vec(), src);
            if let Kind::Dir { parent, .. } = &mut self.node_mut(src).kind {
                *parent = nd;
            }
            self.node_mut(src).ctime = now;
        }
        self.touch_dir(od);
        self.touch_dir(nd);
        Ok(())
    }

    pub fn setattr(&mut self, cred: &Credentials, id: Id, op: &SetOp) -> Res<()> {
        let now = self.now;
        let root = cred.uid == 0;
        let owner = self.owner_or_root(id, cred);
        let is_dir = self.is_dir(id);
        match op {
            SetOp::Chmod(mode) => {
                // Anyone who may write a file may clear its set-ID bits
                // (the kernel's suid-kill on a write, sent as a chmod).
                let (old, new) = (self.node(id).perm & 0o7777, mode & 0o7777);
                let set_id = S_ISUID | S_ISGID;
                let clears_only = new != old && (old ^ new) & !set_id == 0 && new & !old == 0;
                let writer = !is_dir && self.need(id, cred, MAY_WRITE).is_ok();
                if !(owner || (clears_only && writer)) {
                    return Err(FsError::Perm);
                }
                let n = self.node(id);
                let mut m = mode & 0o7777;
                if owner && m & S_ISGID != 0 && !root && !in_group(cred, n.gid) {
                    m &= !S_ISGID;
                }
                let n = self.node_mut(id);
                n.perm = m;
                n.ctime = now;
            }
            SetOp::Chown(uid, gid) => {
                let n = self.node(id);
                if let Some(u) = uid {
                    // chown_ok: the owner may "change" to the same uid; else CAP_CHOWN.
                    if !(root || (cred.uid == n.uid && *u == n.uid)) {
                        return Err(FsError::Perm);
                    }
                }
                if let Some(g) = gid {
                    if !(root || (cred.uid == n.uid && (*g == n.gid || in_group(cred, *g)))) {
                        return Err(FsError::Perm);
                    }
                }
                let n = self.node_mut(id);
                if let Some(u) = uid {
                    n.uid = *u;
                }
                if let Some(g) = gid {
                    n.gid = *g;
                }
                if !is_dir {
                    n.perm = kill_suid(n.perm);
                }
                n.ctime = now;
            }
            SetOp::Truncate(size) => {
                if is_dir {
                    return Err(FsError::IsDir);
                }
                if self.node(id).ftype != FileType::Regular {
                    return Err(FsError::Invalid);
                }
                self.need(id, cred, MAY_WRITE)?;
                let n = self.node_mut(id);
                n.size = *size;
                n.mtime = now;
                n.ctime = now;
                if !root {
                    n.perm = kill_suid(n.perm);
                }
            }
            SetOp::Times(a, m) => {
                let touch = *a == Some(Time::Now) && *m == Some(Time::Now);
                if touch {
                    if !owner {
                        self.need(id, cred, MAY_WRITE)?;
                    }
                } else if !owner {
                    return Err(FsError::Perm);
                }
                let n = self.node_mut(id);
                let resolve = |t: Time| match t {
                    Time::Now => now,
                    Time::At(x) => x,
                };
                if let Some(t) = a {
                    n.atime = resolve(*t);
                }
                if let Some(t) = m {
                    n.mtime = resolve(*t);
                }
                n.ctime = now;
            }
        }
        Ok(())
    }

    /// The syscall-level name check, then `xattr_permission`, then the
    /// handler lookup and the LSM (capability) hook.
    fn xattr_check(&self, cred: &Credentials, id: Id, name: &[u8], write: bool) -> Res<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(FsError::Range);
        }
        self.xattr_perm(cred, id, name, write)
    }

    fn xattr_perm(&self, cred: &Credentials, id: Id, name: &[u8], write: bool) -> Res<()> {
        let root = cred.uid == 0;
        let mask = if write { MAY_WRITE } else { MAY_READ };
        let n = self.node(id);
        let (prefix_ok, rest) = if let Some(r) = name.strip_prefix(b"security.") {
            // xattr_permission: ordinary permission; then the LSM hook
            // (cap_inode_setxattr / cap_inode_removexattr) wants
            // CAP_SYS_ADMIN for writes.
            self.need(id, cred, mask)?;
            if write && !root && !r.is_empty() {
                return Err(FsError::Perm);
            }
            (true, r)
        } else if let Some(r) = name.strip_prefix(b"trusted.") {
            if !root {
                return Err(if write {
                    FsError::Perm
                } else {
                    FsError::NoData
                });
            }
            (true, r)
        } else if let Some(r) = name.strip_prefix(b"user.") {
            if !matches!(n.kind, Kind::File | Kind::Dir { .. }) {
                return Err(if write {
                    FsError::Perm
                } else {
                    FsError::NoData
                });
            }
            if write
                && matches!(n.kind, Kind::Dir { .. })
                && n.perm & S_ISVTX != 0
                && !self.owner_or_root(id, cred)
            {
                return Err(FsError::Perm);
            }
            self.need(id, cred, mask)?;
            (true, r)
        } else {
            // Unknown namespace: the VFS checks permission, then the file
            // system has no handler.
            self.need(id, cred, mask)?;
            (false, name)
        };
        if !prefix_ok {
            return Err(FsError::NotSupported);
        }
        if rest.is_empty() {
            return Err(FsError::Invalid);
        }
        Ok(())
    }

    pub fn getxattr(&self, cred: &Credentials, id: Id, name: &[u8]) -> Res<Vec<u8>> {
        self.xattr_check(cred, id, name, false)?;
        self.node(id)
            .xattrs
            .get(name)
            .cloned()
            .ok_or(FsError::NoData)
    }

    pub fn setxattr(
        &mut self,
        cred: &Credentials,
        id: Id,
        name: &[u8],
        value: &[u8],
        flags: XFlags,
    ) -> Res<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(FsError::Range);
        }
        if value.len() > XATTR_SIZE_MAX {
            return Err(FsError::TooBig);
        }
        self.xattr_perm(cred, id, name, true)?;
        let exists = self.node(id).xattrs.contains_key(name);
        match flags {
            XFlags::Create if exists => return Err(FsError::Exists),
            XFlags::Replace if !exists => return Err(FsError::NoData),
            _ => {}
        }
        let now = self.now;
        let n = self.node_mut(id);
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.ctime = now;
        Ok(())
    }

    pub fn removexattr(&mut self, cred: &Credentials, id: Id, name: &[u8]) -> Res<()> {
        self.xattr_check(cred, id, name, true)?;
        let now = self.now;
        let n = self.node_mut(id);
        if n.xattrs.remove(name).is_none() {
            return Err(FsError::NoData);
        }
        n.ctime = now;
        Ok(())
    }

    /// listxattr has no permission check; trusted.* is listed only for
    /// CAP_SYS_ADMIN.
    pub fn listxattr(&self, cred: &Credentials, id: Id) -> BTreeSet<Vec<u8>> {
        self.node(id)
            .xattrs
            .keys()
            .filter(|k| cred.uid == 0 || !k.starts_with(b"trusted."))
            .cloned()
            .collect()
    }

    /// Path walk from the root (`link_path_walk` + `lookup_last`): exec
    /// permission on every directory a component is looked up in, symlinks
    /// followed in every component but the last (and the last too with
    /// `follow_last`, or when a slash follows it), at most 40 follows, a
    /// trailing slash demands a directory.
    pub fn resolve(&self, cred: &Credentials, path: &[u8], follow_last: bool) -> Res<Id> {
        self.resolve_with(cred, path, follow_last, true)
    }

    /// `resolve`, optionally ignoring what trailing slashes mean (to
    /// recognise a known engine bug).
    pub fn resolve_with(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
        honor_slash: bool,
    ) -> Res<Id> {
        fn push(pending: &mut Vec<(Vec<u8>, bool)>, path: &[u8], slash_after: bool, honor: bool) {
            let comps: Vec<&[u8]> = path
                .split(|&b| b == b'/')
                .filter(|c| !c.is_empty())
                .collect();
            let trailing = path.ends_with(b"/") && honor;
            for (i, c) in comps.iter().enumerate().rev() {
                let slash = i + 1 < comps.len() || trailing || slash_after;
                pending.push((c.to_vec(), slash));
            }
        }
        let mut pending = Vec::new();
        push(&mut pending, path, false, honor_slash);
        let mut cur = ROOT;
        let mut follows = 0;
        while let Some((comp, slash)) = pending.pop() {
            let is_last = pending.is_empty();
            self.searchable(cred, cur)?;
            if comp == b"." {
                continue;
            }
            if comp == b".." {
                cur = self.parent_of(cur);
                continue;
            }
            if name_too_long(&comp) {
                return Err(FsError::NameTooLong);
            }
            let child = *self.entries(cur).get(&comp).ok_or(FsError::NotFound)?;
            if let Kind::Symlink(target) = &self.node(child).kind {
                if slash || !is_last || follow_last {
                    follows += 1;
                    if follows > MAXSYMLINKS {
                        return Err(FsError::Loop);
                    }
                    if target.starts_with(b"/") {
                        cur = ROOT;
                    }
                    push(&mut pending, target, slash, honor_slash);
                    continue;
                }
            }
            if (slash || !is_last) && !self.is_dir(child) {
                return Err(FsError::NotDir);
            }
            cur = child;
        }
        Ok(cur)
    }

    /// Structural invariants of the model itself.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![ROOT];
        seen.insert(ROOT);
        while let Some(d) = stack.pop() {
            for (name, &c) in self.entries(d) {
                if !self.nodes.contains_key(&c) {
                    return Err(format!("model: dangling entry {name:?} in {d}"));
                }
                if self.is_dir(c) {
                    if self.parent_of(c) != d {
                        return Err(format!("model: bad parent of dir {c}"));
                    }
                    if !seen.insert(c) {
                        return Err(format!("model: dir {c} linked twice"));
                    }
                    stack.push(c);
                } else {
                    seen.insert(c);
                }
            }
        }
        if seen.len() != self.nodes.len() {
            return Err("model: unreachable nodes".into());
        }
        Ok(())
    }
}
