//! Conversions between wire messages and `sextant_types`.
//!
//! Decoding a message from the wire is fallible (a field may be missing or
//! out of range): those conversions return `FsError::Invalid`, which the
//! server sends back as `EINVAL`.

use crate::pb;
use sextant_engine::{DirEntry, EngineStats, RenameFlags, StatFs, XattrFlags};
use sextant_types::{Attr, Credentials, FileType, FsError, Nanos, SetAttr, Soid, TimeSet};

pub fn soid_to_pb(s: Soid) -> pb::Soid {
    let v = s.as_u128();
    pb::Soid {
        hi: (v >> 64) as u64,
        lo: v as u64,
    }
}

pub fn soid_from_pb(s: Option<&pb::Soid>) -> Result<Soid, FsError> {
    let s = s.ok_or(FsError::Invalid)?;
    Ok(Soid::from_u128(((s.hi as u128) << 64) | s.lo as u128))
}

pub fn ftype_to_pb(t: FileType) -> pb::FileType {
    match t {
        FileType::Regular => pb::FileType::Regular,
        FileType::Directory => pb::FileType::Directory,
        FileType::Symlink => pb::FileType::Symlink,
        FileType::CharDevice => pb::FileType::CharDevice,
        FileType::BlockDevice => pb::FileType::BlockDevice,
        FileType::Fifo => pb::FileType::Fifo,
        FileType::Socket => pb::FileType::Socket,
    }
}

/// The wire's `FileType` number (as prost stores it) as a `FileType`.
pub fn ftype_from_pb(v: i32) -> Result<FileType, FsError> {
    u8::try_from(v)
        .ok()
        .and_then(FileType::from_u8)
        .ok_or(FsError::Invalid)
}

pub fn attr_to_pb(a: &Attr) -> pb::Attr {
    pb::Attr {
        soid: Some(soid_to_pb(a.soid)),
        ftype: ftype_to_pb(a.ftype) as i32,
        perm: a.perm,
        uid: a.uid,
        gid: a.gid,
        nlink: a.nlink,
        size: a.size,
        rdev: a.rdev,
        atime_ns: a.atime.0,
        mtime_ns: a.mtime.0,
        ctime_ns: a.ctime.0,
        parent: Some(soid_to_pb(a.parent)),
        no_xattrs: a.no_xattrs,
    }
}

pub fn attr_from_pb(a: &pb::Attr) -> Result<Attr, FsError> {
    Ok(Attr {
        soid: soid_from_pb(a.soid.as_ref())?,
        ftype: ftype_from_pb(a.ftype)?,
        perm: a.perm,
        uid: a.uid,
        gid: a.gid,
        nlink: a.nlink,
        size: a.size,
        rdev: a.rdev,
        atime: Nanos(a.atime_ns),
        mtime: Nanos(a.mtime_ns),
        ctime: Nanos(a.ctime_ns),
        parent: soid_from_pb(a.parent.as_ref())?,
        no_xattrs: a.no_xattrs,
    })
}

pub fn cred_to_pb(c: &Credentials) -> pb::Credentials {
    pb::Credentials {
        uid: c.uid,
        gid: c.gid,
        groups: c.groups.clone(),
    }
}

pub fn cred_from_pb(c: Option<pb::Credentials>) -> Result<Credentials, FsError> {
    let c = c.ok_or(FsError::Invalid)?;
    if c.groups.len() > crate::GROUPS_MAX {
        return Err(FsError::Invalid);
    }
    Ok(Credentials {
        uid: c.uid,
        gid: c.gid,
        groups: c.groups,
    })
}

pub fn error_to_pb(e: FsError) -> pb::Error {
    pb::Error {
        errno: e.errno(),
        message: e.to_string(),
    }
}

/// An errno from the wire. One the client does not know becomes `EIO`.
pub fn error_from_pb(e: &pb::Error) -> FsError {
    FsError::from_errno(e.errno).unwrap_or(FsError::Io)
}

pub fn dirent_to_pb(e: &DirEntry) -> pb::DirEntry {
    pb::DirEntry {
        cookie: e.cookie,
        name: e.name.to_vec(),
        soid: Some(soid_to_pb(e.soid)),
        ftype: ftype_to_pb(e.ftype) as i32,
        attr: None,
    }
}

/// A READDIRPLUS entry: the entry, and its attributes if read with it.
pub fn dirent_plus_to_pb(e: &DirEntry, attr: Option<&Attr>) -> pb::DirEntry {
    pb::DirEntry {
        attr: attr.map(attr_to_pb),
        ..dirent_to_pb(e)
    }
}

/// A READDIRPLUS entry from the wire: the entry and, if sent, its
/// attributes (which must name the entry's SOID).
pub fn dirent_plus_from_pb(mut e: pb::DirEntry) -> Result<(DirEntry, Option<Attr>), FsError> {
    let attr = e.attr.take().map(|a| attr_from_pb(&a)).transpose()?;
    let entry = dirent_from_pb(e)?;
    if attr.as_ref().is_some_and(|a| a.soid != entry.soid) {
        return Err(FsError::Invalid);
    }
    Ok((entry, attr))
}

pub fn dirent_from_pb(e: pb::DirEntry) -> Result<DirEntry, FsError> {
    Ok(DirEntry {
        cookie: e.cookie,
        soid: soid_from_pb(e.soid.as_ref())?,
        ftype: ftype_from_pb(e.ftype)?,
        name: e.name.into_boxed_slice(),
    })
}

fn timeset_to_pb(t: Option<TimeSet>) -> Option<pb::TimeSet> {
    t.map(|t| pb::TimeSet {
        how: Some(match t {
            TimeSet::Now => pb::time_set::How::Now(true),
            TimeSet::At(n) => pb::time_set::How::AtNs(n.0),
        }),
    })
}

fn timeset_from_pb(t: Option<&pb::TimeSet>) -> Result<Option<TimeSet>, FsError> {
    match t {
        None => Ok(None),
        Some(pb::TimeSet { how: None }) => Err(FsError::Invalid),
        Some(pb::TimeSet {
            how: Some(pb::time_set::How::Now(_)),
        }) => Ok(Some(TimeSet::Now)),
        Some(pb::TimeSet {
            how: Some(pb::time_set::How::AtNs(n)),
        }) => Ok(Some(TimeSet::At(Nanos(*n)))),
    }
}

pub fn setattr_to_pb(soid: Soid, s: &SetAttr) -> pb::SetattrRequest {
    pb::SetattrRequest {
        soid: Some(soid_to_pb(soid)),
        perm: s.perm,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: timeset_to_pb(s.atime),
        mtime: timeset_to_pb(s.mtime),
        write_handle: false,
    }
}

pub fn setattr_from_pb(r: &pb::SetattrRequest) -> Result<(Soid, SetAttr), FsError> {
    Ok((
        soid_from_pb(r.soid.as_ref())?,
        SetAttr {
            perm: r.perm,
            uid: r.uid,
            gid: r.gid,
            size: r.size,
            atime: timeset_from_pb(r.atime.as_ref())?,
            mtime: timeset_from_pb(r.mtime.as_ref())?,
        },
    ))
}

pub fn rename_flags(r: &pb::RenameRequest) -> RenameFlags {
    RenameFlags {
        noreplace: r.noreplace,
        exchange: r.exchange,
    }
}

pub fn xattr_flags_to_pb(f: XattrFlags) -> pb::XattrFlags {
    match f {
        XattrFlags::Any => pb::XattrFlags::Any,
        XattrFlags::Create => pb::XattrFlags::Create,
        XattrFlags::Replace => pb::XattrFlags::Replace,
    }
}

pub fn xattr_flags_from_pb(v: i32) -> Result<XattrFlags, FsError> {
    match pb::XattrFlags::try_from(v) {
        Ok(pb::XattrFlags::Any) => Ok(XattrFlags::Any),
        Ok(pb::XattrFlags::Create) => Ok(XattrFlags::Create),
        Ok(pb::XattrFlags::Replace) => Ok(XattrFlags::Replace),
        Err(_) => Err(FsError::Invalid),
    }
}

pub fn statfs_to_pb(s: &StatFs) -> pb::StatFs {
    pb::StatFs {
        inodes: s.inodes,
        tables: s.tables as u64,
        loaded_tables: s.loaded_tables as u64,
    }
}

pub fn statfs_from_pb(s: &pb::StatFs) -> StatFs {
    StatFs {
        inodes: s.inodes,
        tables: s.tables as usize,
        loaded_tables: s.loaded_tables as usize,
    }
}

pub fn stats_to_pb(s: &EngineStats) -> pb::Stats {
    pb::Stats {
        inodes: s.inodes,
        tables: s.tables as u64,
        loaded_tables: s.loaded_tables as u64,
        resident_bytes: s.resident_bytes as u64,
        journal_syncs: s.journal_syncs,
        journal_bytes: s.journal_bytes,
        durable_lsn: s.durable_lsn,
        checkpoints: s.checkpoints,
        snapshots_written: s.snapshots_written,
        tables_loaded_total: s.tables_loaded_total,
        tables_evicted_total: s.tables_evicted_total,
        splits: s.splits,
        merges: s.merges,
        retries: s.retries,
        dir_cache_paths: s.dir_cache_paths as u64,
        dir_cache_bytes: s.dir_cache_bytes as u64,
        stopped_errno: s.stopped.map_or(0, |e| e.errno() as u32),
        ..Default::default()
    }
}

pub fn stats_from_pb(s: &pb::Stats) -> EngineStats {
    EngineStats {
        inodes: s.inodes,
        tables: s.tables as usize,
        loaded_tables: s.loaded_tables as usize,
        resident_bytes: s.resident_bytes as usize,
        journal_syncs: s.journal_syncs,
        // Not carried by pb::Stats (the server's /metrics shows it).
        journal_sync_time: std::time::Duration::ZERO,
        journal_bytes: s.journal_bytes,
        durable_lsn: s.durable_lsn,
        checkpoints: s.checkpoints,
        snapshots_written: s.snapshots_written,
        tables_loaded_total: s.tables_loaded_total,
        tables_evicted_total: s.tables_evicted_total,
        splits: s.splits,
        merges: s.merges,
        retries: s.retries,
        dir_cache_paths: s.dir_cache_paths as usize,
        dir_cache_bytes: s.dir_cache_bytes as usize,
        stopped: match s.stopped_errno {
            0 => None,
            errno => Some(FsError::from_errno(errno as i32).unwrap_or(FsError::Io)),
        },
    }
}

impl pb::request::Op {
    /// Does this operation change state (and so take part in exactly-once)?
    pub fn is_mutation(&self) -> bool {
        use pb::request::Op::*;
        matches!(
            self,
            Create(_)
                | Mknod(_)
                | Mkdir(_)
                | Symlink(_)
                | Unlink(_)
                | Rmdir(_)
                | Rename(_)
                | Link(_)
                | Setattr(_)
                | Setxattr(_)
                | Removexattr(_)
                | Sync(_)
        )
    }

    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        use pb::request::Op::*;
        match self {
            Lookup(_) => "lookup",
            Getattr(_) => "getattr",
            Resolve(_) => "resolve",
            Readlink(_) => "readlink",
            Readdir(_) => "readdir",
            Getxattr(_) => "getxattr",
            Listxattr(_) => "listxattr",
            Access(_) => "access",
            Statfs(_) => "statfs",
            Status(_) => "status",
            Create(_) => "create",
            Mknod(_) => "mknod",
            Mkdir(_) => "mkdir",
            Symlink(_) => "symlink",
            Unlink(_) => "unlink",
            Rmdir(_) => "rmdir",
            Rename(_) => "rename",
            Link(_) => "link",
            Setattr(_) => "setattr",
            Setxattr(_) => "setxattr",
            Removexattr(_) => "removexattr",
            Sync(_) => "sync",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soid_round_trip() {
        for v in [0u128, 1, u64::MAX as u128, 1 << 64, u128::MAX] {
            let s = Soid::from_u128(v);
            assert_eq!(soid_from_pb(Some(&soid_to_pb(s))), Ok(s));
        }
        assert_eq!(soid_from_pb(None), Err(FsError::Invalid));
    }

    #[test]
    fn file_types_match_the_schema() {
        for t in FileType::ALL {
            assert_eq!(ftype_to_pb(t) as i32, t as i32);
            assert_eq!(ftype_from_pb(ftype_to_pb(t) as i32), Ok(t));
        }
        assert_eq!(ftype_from_pb(0), Err(FsError::Invalid));
        assert_eq!(ftype_from_pb(99), Err(FsError::Invalid));
    }

    #[test]
    fn errors_round_trip_by_errno() {
        for errno in 0..200 {
            if let Some(e) = FsError::from_errno(errno) {
                assert_eq!(error_from_pb(&error_to_pb(e)), e);
            }
        }
        assert_eq!(
            error_from_pb(&pb::Error {
                errno: 9999,
                message: String::new()
            }),
            FsError::Io
        );
    }

    #[test]
    fn setattr_round_trip() {
        let set = SetAttr {
            perm: Some(0o640),
            uid: None,
            gid: Some(7),
            size: Some(10),
            atime: Some(TimeSet::Now),
            mtime: Some(TimeSet::At(Nanos(-5))),
        };
        let s = Soid::from_u128(42);
        assert_eq!(setattr_from_pb(&setattr_to_pb(s, &set)), Ok((s, set)));
    }
}
