//! The records a table holds: inodes and directory entries.
//!
//! An inode lives in the table that owns its SOID; a directory entry lives in
//! the table that owns its *parent's* SOID (Ursa Minor: a renamed file keeps
//! its SOID, so its inode stays where it was while the entry moves).
//!
//! Invariants (checked by the namespace model tests):
//! - every directory has exactly one entry naming it (except the root, which
//!   has none) and `inode.parent` is that entry's parent;
//! - a non-directory's `nlink` equals the number of entries naming it, and
//!   `inode.parent`/`inode.name` is one of those entries (its primary link);
//! - a directory's `nlink` is 2 + its number of subdirectories.

pub use crate::name::Name;
use crate::soid::DirExtents;
use serde::{Deserialize, Serialize};
use sextant_types::{Attr, FileType, Nanos, Soid};
use std::collections::BTreeMap;

/// One inode. Kept small: it is the bulk of the engine's memory.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Inode {
    pub ftype: FileType,
    /// Permission bits (`07777`).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u32,
    pub size: u64,
    pub atime: Nanos,
    pub mtime: Nanos,
    pub ctime: Nanos,
    /// Primary link: the directory and name this inode was last linked under.
    pub parent: Soid,
    pub name: Name,
    /// Rarely used fields, boxed so that plain files pay 8 bytes for them.
    pub extra: Option<Box<InodeExtra>>,
}

/// Extended attributes of one inode, name → value.
pub type Xattrs = BTreeMap<Box<[u8]>, Box<[u8]>>;

/// Fields most inodes do not have.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct InodeExtra {
    /// Target of a symlink.
    pub symlink: Option<Box<[u8]>>,
    /// Extended attributes, name → value.
    pub xattrs: Xattrs,
    /// For a directory: extra SOID ranges its files are allocated from.
    pub extents: DirExtents,
    /// Hard links other than the primary one: (directory, name). Kept in the
    /// inode so search can report every path of a file from its own table.
    pub links: Vec<(Soid, Name)>,
}

impl InodeExtra {
    fn is_empty(&self) -> bool {
        self.symlink.is_none()
            && self.xattrs.is_empty()
            && self.extents == DirExtents::default()
            && self.links.is_empty()
    }
}

impl Inode {
    pub fn is_dir(&self) -> bool {
        self.ftype == FileType::Directory
    }

    pub fn attr(&self, soid: Soid) -> Attr {
        Attr {
            soid,
            ftype: self.ftype,
            perm: self.perm as u32,
            uid: self.uid,
            gid: self.gid,
            nlink: self.nlink,
            size: self.size,
            rdev: self.rdev,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            parent: self.parent,
        }
    }

    pub fn symlink(&self) -> Option<&[u8]> {
        self.extra.as_ref().and_then(|e| e.symlink.as_deref())
    }

    pub fn xattrs(&self) -> Option<&Xattrs> {
        self.extra.as_ref().map(|e| &e.xattrs)
    }

    /// Every (directory, name) this inode is linked under, primary first.
    pub fn all_links(&self) -> impl Iterator<Item = (Soid, &[u8])> + '_ {
        std::iter::once((self.parent, &*self.name)).chain(
            self.extra
                .iter()
                .flat_map(|e| e.links.iter().map(|(p, n)| (*p, &**n))),
        )
    }

    pub fn extents(&self) -> DirExtents {
        self.extra
            .as_ref()
            .map(|e| e.extents.clone())
            .unwrap_or_default()
    }

    /// Mutable access to the extra fields, creating them if absent.
    pub fn extra_mut(&mut self) -> &mut InodeExtra {
        self.extra.get_or_insert_with(Default::default)
    }

    /// Drops an empty `extra` so equal inodes compare equal.
    pub fn normalize(&mut self) {
        if self.extra.as_ref().is_some_and(|e| e.is_empty()) {
            self.extra = None;
        }
    }
}

/// A directory entry: `name` in directory `parent` refers to `child`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Dentry {
    pub child: Soid,
    pub ftype: FileType,
    pub name: Name,
}

/// The readdir cookie of a name: a stable 62-bit hash, never 0, 1 or 2, so
/// FUSE can use cookies 1 and 2 for `.` and `..` and 0 for "from the start".
/// Entries are listed in cookie order, so a cursor stays valid while the
/// directory changes (the ext4 htree approach).
pub fn name_cookie(name: &[u8]) -> u64 {
    let h = xxhash_rust::xxh3::xxh3_64(name) >> 2;
    h.max(3)
}
