//! The one place where results become FUSE replies and errors become errnos.
//!
//! Every operation computes a `Result<R::Ok, Fail>`; [`Respond::send`] turns
//! it into the kernel reply. Nothing else in the crate calls a reply's
//! `error` method.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr,
};
use sextant_types::FsError;
use std::ffi::OsString;
use std::io;
use std::time::{Duration, UNIX_EPOCH};

/// Why an operation failed, as an errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fail(pub i32);

impl From<sextant_client::Error> for Fail {
    fn from(e: sextant_client::Error) -> Fail {
        Fail(e.errno())
    }
}

impl From<FsError> for Fail {
    fn from(e: FsError) -> Fail {
        Fail(e.errno())
    }
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Fail {
        Fail(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

pub type OpResult<T> = Result<T, Fail>;

/// An entry reply: a node the kernel now holds one more reference to.
#[derive(Debug, Clone)]
pub struct Entry {
    pub attr: FileAttr,
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
}

/// `statfs` numbers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

/// The xattr size-probe protocol: size 0 asks for the length.
#[derive(Debug, Clone)]
pub enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

impl Xattr {
    /// The reply for a value (or NUL-separated name list) and the caller's
    /// buffer size.
    pub fn fit(value: Vec<u8>, size: u32) -> OpResult<Xattr> {
        let len = u32::try_from(value.len()).map_err(|_| Fail(libc::E2BIG))?;
        match size {
            0 => Ok(Xattr::Size(len)),
            s if s < len => Err(Fail(libc::ERANGE)),
            _ => Ok(Xattr::Data(value)),
        }
    }
}

/// One readdir item: node id, offset (the cookie to resume after it), type,
/// name.
pub type DirItem = (u64, u64, FileType, OsString);

pub trait Respond: Sized {
    type Ok;
    fn ok(self, v: Self::Ok);
    fn error(self, e: Errno);

    fn send(self, r: OpResult<Self::Ok>) {
        match r {
            Ok(v) => self.ok(v),
            Err(Fail(errno)) => self.error(Errno::from_i32(errno)),
        }
    }
}

macro_rules! respond {
    ($reply:ty, $ok:ty, |$r:ident, $v:pat_param| $body:expr) => {
        impl Respond for $reply {
            type Ok = $ok;
            fn ok(self, $v: $ok) {
                let $r = self;
                $body
            }
            fn error(self, e: Errno) {
                <$reply>::error(self, e)
            }
        }
    };
}

respond!(ReplyEmpty, (), |r, _v| r.ok());
respond!(ReplyData, Vec<u8>, |r, v| r.data(&v));
respond!(ReplyWrite, u32, |r, v| r.written(v));
respond!(ReplyOpen, (u64, FopenFlags), |r, v| r
    .opened(FileHandle(v.0), v.1));
respond!(ReplyAttr, (FileAttr, Duration), |r, v| r.attr(&v.1, &v.0));
respond!(ReplyEntry, Entry, |r, e| r.entry_with_ttls(
    &e.attr_ttl,
    &e.entry_ttl,
    &e.attr,
    Generation(0)
));
// One timeout for the name and the attributes: the shorter (a name that
// may not be cached is not, see `SextantFs::entry`).
respond!(ReplyCreate, (Entry, u64), |r, v| r.created(
    &v.0.attr_ttl.min(v.0.entry_ttl),
    &v.0.attr,
    Generation(0),
    FileHandle(v.1),
    FopenFlags::empty()
));
respond!(ReplyStatfs, Statfs, |r, s| r.statfs(
    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize
));
respond!(ReplyXattr, Xattr, |r, v| match v {
    Xattr::Size(n) => r.size(n),
    Xattr::Data(d) => r.data(&d),
});
// (result, data out)
respond!(ReplyIoctl, (i32, Vec<u8>), |r, v| r.ioctl(v.0, &v.1));
respond!(ReplyDirectory, Vec<DirItem>, |r, items| {
    let mut r = r;
    for (ino, off, kind, name) in items {
        if r.add(INodeNo(ino), off, kind, name) {
            break; // full: the kernel asks again from the last offset sent
        }
    }
    r.ok()
});

/// One READDIRPLUS item: a [`DirItem`] and, when the kernel is given the
/// node too, its entry and the reference taken for it — kept if the item
/// fits in the reply, released if not. Without an entry only the name goes
/// (node id 0): the kernel looks it up when it needs it.
pub struct PlusItem {
    pub item: DirItem,
    pub entry: Option<(Entry, crate::nodes::Reference)>,
}

/// The attributes sent with a name only: its `d_ino` and type, nothing
/// the kernel keeps (node id 0 with a negative entry too).
pub(crate) fn name_only(ino: u64, kind: FileType) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Respond for ReplyDirectoryPlus {
    type Ok = Vec<PlusItem>;

    fn ok(mut self, items: Vec<PlusItem>) {
        for PlusItem { item, entry } in items {
            let (ino, off, kind, name) = item;
            let full = match &entry {
                Some((e, _)) => self.add_entry(
                    true,
                    off,
                    &name,
                    &e.entry_ttl,
                    &e.attr_ttl,
                    &e.attr,
                    Generation(0),
                ),
                None => {
                    let zero = Duration::ZERO;
                    let attr = name_only(ino, kind);
                    self.add_entry(false, off, &name, &zero, &zero, &attr, Generation(0))
                }
            };
            if full {
                // The kernel asks again from the last offset sent; this
                // item's reference and the rest's are dropped (released).
                break;
            }
            if let Some((_, reference)) = entry {
                reference.given();
            }
        }
        ReplyDirectoryPlus::ok(self)
    }

    fn error(self, e: Errno) {
        ReplyDirectoryPlus::error(self, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xattr_size_probe() {
        assert!(matches!(Xattr::fit(b"abc".to_vec(), 0), Ok(Xattr::Size(3))));
        assert_eq!(
            Xattr::fit(b"abc".to_vec(), 2).unwrap_err(),
            Fail(libc::ERANGE)
        );
        assert!(matches!(Xattr::fit(b"abc".to_vec(), 3), Ok(Xattr::Data(d)) if d == b"abc"));
    }

    #[test]
    fn errors_map_to_their_errno() {
        assert_eq!(Fail::from(FsError::NotEmpty), Fail(libc::ENOTEMPTY));
        assert_eq!(
            Fail::from(sextant_client::Error::Fs(FsError::NameTooLong)),
            Fail(libc::ENAMETOOLONG)
        );
        assert_eq!(
            Fail::from(io::Error::from_raw_os_error(libc::ENOSPC)),
            Fail(libc::ENOSPC)
        );
    }
}
