//! Inode attributes as every layer sees them.

use crate::Soid;
use serde::{Deserialize, Serialize};

/// Permission bits a caller may set with chmod (`07777`).
pub const MODE_PERM_MASK: u32 = 0o7777;
pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;
pub const S_ISVTX: u32 = 0o1000;

/// Nanoseconds since the Unix epoch. An `i64` covers 1677–2262, which is what
/// Sextant stores (8 bytes per timestamp instead of 16); times outside that
/// are refused with `EINVAL` at the boundary that receives them.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize,
)]
pub struct Nanos(pub i64);

impl Nanos {
    pub const NSEC_PER_SEC: i64 = 1_000_000_000;

    /// From seconds and nanoseconds; `None` when out of range or `nsec` ≥ 1e9.
    pub fn from_parts(sec: i64, nsec: u32) -> Option<Nanos> {
        if nsec as i64 >= Self::NSEC_PER_SEC {
            return None;
        }
        sec.checked_mul(Self::NSEC_PER_SEC)
            .and_then(|n| n.checked_add(nsec as i64))
            .map(Nanos)
    }

    pub fn secs(self) -> i64 {
        self.0.div_euclid(Self::NSEC_PER_SEC)
    }

    pub fn subsec_nanos(self) -> u32 {
        self.0.rem_euclid(Self::NSEC_PER_SEC) as u32
    }
}

/// The kind of an inode (the `S_IFMT` part of a mode).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[repr(u8)]
pub enum FileType {
    Regular = 1,
    Directory = 2,
    Symlink = 3,
    CharDevice = 4,
    BlockDevice = 5,
    Fifo = 6,
    Socket = 7,
}

impl FileType {
    pub const ALL: [FileType; 7] = [
        FileType::Regular,
        FileType::Directory,
        FileType::Symlink,
        FileType::CharDevice,
        FileType::BlockDevice,
        FileType::Fifo,
        FileType::Socket,
    ];

    /// The type of a local file, as the standard library reports it.
    pub fn of_local(ft: std::fs::FileType) -> FileType {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_dir() {
            FileType::Directory
        } else if ft.is_symlink() {
            FileType::Symlink
        } else if ft.is_fifo() {
            FileType::Fifo
        } else if ft.is_socket() {
            FileType::Socket
        } else if ft.is_block_device() {
            FileType::BlockDevice
        } else if ft.is_char_device() {
            FileType::CharDevice
        } else {
            FileType::Regular
        }
    }

    /// The `S_IFMT` bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => 0o100000,
            FileType::Directory => 0o040000,
            FileType::Symlink => 0o120000,
            FileType::CharDevice => 0o020000,
            FileType::BlockDevice => 0o060000,
            FileType::Fifo => 0o010000,
            FileType::Socket => 0o140000,
        }
    }

    /// The type encoded in the `S_IFMT` bits of `mode`, if any.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        FileType::ALL
            .into_iter()
            .find(|t| t.mode_bits() == mode & 0o170000)
    }

    pub fn from_u8(v: u8) -> Option<FileType> {
        FileType::ALL.into_iter().find(|t| *t as u8 == v)
    }

    /// GNU find's `-type` letter.
    pub fn find_letter(self) -> char {
        match self {
            FileType::Regular => 'f',
            FileType::Directory => 'd',
            FileType::Symlink => 'l',
            FileType::CharDevice => 'c',
            FileType::BlockDevice => 'b',
            FileType::Fifo => 'p',
            FileType::Socket => 's',
        }
    }
}

/// The attributes of one inode, as returned by lookup/getattr.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Attr {
    pub soid: Soid,
    pub ftype: FileType,
    /// Permission bits only (`07777`); the type is in `ftype`.
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub rdev: u32,
    pub atime: Nanos,
    pub mtime: Nanos,
    pub ctime: Nanos,
    /// The directory this inode was last linked into (for a directory: its
    /// only parent, i.e. `..`; the root is its own parent).
    pub parent: Soid,
    /// The inode has no extended attributes at all, as its server said
    /// with these attributes (a hint for a mount, which then answers
    /// getxattr itself). `false` means "not known": ask. Not serialized
    /// (a replayed reply says `false`, which is always safe).
    #[serde(skip, default)]
    pub no_xattrs: bool,
}

impl Attr {
    /// `st_mode`: type bits plus permission bits.
    pub fn mode(&self) -> u32 {
        self.ftype.mode_bits() | self.perm
    }
}

/// How setattr changes a timestamp.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum TimeSet {
    /// The server's current time (`UTIME_NOW`); needs write permission only.
    Now,
    /// An explicit time; needs ownership.
    At(Nanos),
}

/// The changes of one setattr call; `None` leaves a field alone.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct SetAttr {
    /// New permission bits (`07777`); type bits are ignored.
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

impl SetAttr {
    pub fn is_empty(&self) -> bool {
        *self == SetAttr::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_type_mode_round_trip() {
        for t in FileType::ALL {
            assert_eq!(FileType::from_mode(t.mode_bits() | 0o755), Some(t));
            assert_eq!(FileType::from_u8(t as u8), Some(t));
        }
        assert_eq!(FileType::from_mode(0o755), None);
    }

    #[test]
    fn nanos_parts() {
        let n = Nanos::from_parts(-1, 500).unwrap();
        assert_eq!((n.secs(), n.subsec_nanos()), (-1, 500));
        assert!(Nanos::from_parts(i64::MAX, 0).is_none());
        assert!(Nanos::from_parts(0, 1_000_000_000).is_none());
    }
}
