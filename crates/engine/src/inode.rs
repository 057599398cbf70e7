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

/// One inode. Kept small (96 bytes): it is the bulk of the engine's memory.
/// The device number of the rare device files lives in `extra`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Inode {
    pub ftype: FileType,
    /// Permission bits (`07777`).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
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
    /// Device number of a device file. Serialized in the inode's place
    /// (see [`Inode`]'s `Serialize`), not here.
    #[serde(skip)]
    pub rdev: u32,
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
        self.rdev == 0 && self.is_empty_on_disk()
    }

    /// Empty apart from `rdev` (which is stored in the inode's place).
    fn is_empty_on_disk(&self) -> bool {
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
            rdev: self.rdev(),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            parent: self.parent,
            no_xattrs: self.xattrs().is_none_or(|x| x.is_empty()),
        }
    }

    /// Device number (0 unless a device file).
    pub fn rdev(&self) -> u32 {
        self.extra.as_ref().map_or(0, |e| e.rdev)
    }

    pub fn set_rdev(&mut self, rdev: u32) {
        if rdev != 0 || self.extra.is_some() {
            self.extra_mut().rdev = rdev;
            self.normalize();
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

/// The serialized inode (snapshots and journal records): the fields in
/// this order, `rdev` among them, and `extra` only when it holds more than
/// `rdev` — the layout from before `rdev` moved into `extra`, so the
/// formats did not change (docs/formats/journal.md).
///
/// One struct for both directions: serialized borrowing (`N = &Name`,
/// `X = &InodeExtra`), decoded owning (`Name`, `Box<InodeExtra>`).
#[derive(Serialize, Deserialize)]
struct InodeOnDisk<N, X> {
    ftype: FileType,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    rdev: u32,
    size: u64,
    atime: Nanos,
    mtime: Nanos,
    ctime: Nanos,
    parent: Soid,
    name: N,
    extra: Option<X>,
}

impl Serialize for Inode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        InodeOnDisk {
            ftype: self.ftype,
            perm: self.perm,
            uid: self.uid,
            gid: self.gid,
            nlink: self.nlink,
            rdev: self.rdev(),
            size: self.size,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            parent: self.parent,
            name: &self.name,
            // An `extra` that only carries `rdev` is not written.
            extra: self
                .extra
                .as_deref()
                .filter(|e| !(e.rdev != 0 && e.is_empty_on_disk())),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Inode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Inode, D::Error> {
        let o = InodeOnDisk::<Name, Box<InodeExtra>>::deserialize(d)?;
        let mut inode = Inode {
            ftype: o.ftype,
            perm: o.perm,
            uid: o.uid,
            gid: o.gid,
            nlink: o.nlink,
            size: o.size,
            atime: o.atime,
            mtime: o.mtime,
            ctime: o.ctime,
            parent: o.parent,
            name: o.name,
            extra: o.extra,
        };
        if o.rdev != 0 {
            inode.extra_mut().rdev = o.rdev;
        }
        Ok(inode)
    }
}

/// A directory entry: `name` in directory `parent` refers to `child`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Dentry {
    pub child: Soid,
    pub ftype: FileType,
    pub name: Name,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inode as it was serialized before `rdev` moved into `extra`.
    #[derive(Serialize)]
    struct Legacy {
        ftype: FileType,
        perm: u16,
        uid: u32,
        gid: u32,
        nlink: u32,
        rdev: u32,
        size: u64,
        atime: Nanos,
        mtime: Nanos,
        ctime: Nanos,
        parent: Soid,
        name: Box<[u8]>,
        extra: Option<Box<InodeExtra>>,
    }

    fn legacy(i: &Inode, rdev: u32, extra: Option<InodeExtra>) -> Vec<u8> {
        postcard::to_stdvec(&Legacy {
            ftype: i.ftype,
            perm: i.perm,
            uid: i.uid,
            gid: i.gid,
            nlink: i.nlink,
            rdev,
            size: i.size,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            parent: i.parent,
            name: Box::from(&*i.name),
            extra: extra.map(Box::new),
        })
        .unwrap()
    }

    #[test]
    fn serialized_form_is_the_legacy_one() {
        let mut dev = Inode {
            ftype: FileType::CharDevice,
            perm: 0o600,
            uid: 1,
            gid: 2,
            nlink: 1,
            size: 0,
            atime: Nanos(5),
            mtime: Nanos(6),
            ctime: Nanos(7),
            parent: Soid::ROOT,
            name: Name::new(b"tty0"),
            extra: None,
        };
        dev.set_rdev(0x0401);
        assert_eq!(std::mem::size_of::<Inode>(), 96);
        let bytes = postcard::to_stdvec(&dev).unwrap();
        assert_eq!(bytes, legacy(&dev, 0x0401, None));
        assert_eq!(postcard::from_bytes::<Inode>(&bytes).unwrap(), dev);

        // With xattrs too: `extra` is written, without `rdev`.
        dev.extra_mut()
            .xattrs
            .insert(Box::from(&b"user.k"[..]), Box::from(&b"v"[..]));
        let mut on_disk = (**dev.extra.as_ref().unwrap()).clone();
        on_disk.rdev = 0;
        let bytes = postcard::to_stdvec(&dev).unwrap();
        assert_eq!(bytes, legacy(&dev, 0x0401, Some(on_disk)));
        assert_eq!(postcard::from_bytes::<Inode>(&bytes).unwrap(), dev);

        // Back to a plain inode.
        dev.extra_mut().xattrs.clear();
        dev.set_rdev(0);
        assert!(dev.extra.is_none());
        assert_eq!(postcard::to_stdvec(&dev).unwrap(), legacy(&dev, 0, None));
    }
}
