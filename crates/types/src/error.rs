//! Errors a caller is expected to handle, each mapped to exactly one errno.
//!
//! Fatal conditions (a failed journal write, detected corruption) are not
//! here: they stop the engine (see `sextant_engine::EngineError`). Requests
//! that reach a stopped engine get [`FsError::NoSpace`] if it stopped on a
//! full disk, else [`FsError::Io`] (`sextant_engine::stop`).

use crate::Soid;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, thiserror::Error, Serialize, Deserialize)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument")]
    Invalid,
    #[error("file name too long")]
    NameTooLong,
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("too many levels of symbolic links")]
    Loop,
    #[error("no data available (no such attribute)")]
    NoData,
    #[error("result too large for the buffer")]
    Range,
    #[error("no space left on device")]
    NoSpace,
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    FileTooBig,
    #[error("input/output error")]
    Io,
    #[error("operation not supported")]
    NotSupported,
    #[error("stale file handle")]
    Stale,
    #[error("device or resource busy")]
    Busy,
    #[error("argument list too long (value too large)")]
    TooBig,
    /// A client key with `--read-only` asked for a mutation.
    #[error("read-only file system")]
    ReadOnly,
    /// Cluster member mode: `soid` lies in a table this server does not
    /// own (Ursa Minor's WRONG_SERVER); the client refreshes its
    /// delegation map and retries at the owner. Nothing was changed.
    /// Never made from an errno ([`FsError::from_errno`]): the SOID does
    /// not survive the trip through one.
    #[error("wrong server for {soid} (object is remote)")]
    WrongServer { soid: Soid },
    /// Cluster member mode: the operation needs tables held by different
    /// servers (a stop-gap until BORROW); nothing was changed.
    #[error("operation spans servers (cross-device link)")]
    CrossServer,
    /// Cluster member mode, inside a server: the operation also needs the
    /// table holding `soid`, which another server holds; nothing was
    /// changed. The server brings that table here and runs the operation
    /// again; a client sees [`FsError::CrossServer`] only if it cannot.
    /// Never made from an errno.
    #[error("operation also needs {soid}, held by another server (cross-device link)")]
    NeedsTable { soid: Soid },
}

impl FsError {
    /// The Linux errno for this error.
    pub fn errno(self) -> i32 {
        match self {
            FsError::NotFound => 2,            // ENOENT
            FsError::Exists => 17,             // EEXIST
            FsError::NotDir => 20,             // ENOTDIR
            FsError::IsDir => 21,              // EISDIR
            FsError::NotEmpty => 39,           // ENOTEMPTY
            FsError::Invalid => 22,            // EINVAL
            FsError::NameTooLong => 36,        // ENAMETOOLONG
            FsError::Access => 13,             // EACCES
            FsError::Perm => 1,                // EPERM
            FsError::Loop => 40,               // ELOOP
            FsError::NoData => 61,             // ENODATA
            FsError::Range => 34,              // ERANGE
            FsError::NoSpace => 28,            // ENOSPC
            FsError::TooManyLinks => 31,       // EMLINK
            FsError::FileTooBig => 27,         // EFBIG
            FsError::Io => 5,                  // EIO
            FsError::NotSupported => 95,       // EOPNOTSUPP
            FsError::Stale => 116,             // ESTALE
            FsError::Busy => 16,               // EBUSY
            FsError::TooBig => 7,              // E2BIG
            FsError::ReadOnly => 30,           // EROFS
            FsError::WrongServer { .. } => 66, // EREMOTE
            FsError::CrossServer => 18,        // EXDEV
            FsError::NeedsTable { .. } => 18,  // EXDEV
        }
    }

    /// The error for a Linux errno, if it is one of ours. Never
    /// [`FsError::WrongServer`] (EREMOTE gives `None`) or
    /// [`FsError::NeedsTable`] (EXDEV gives `CrossServer`): they carry a
    /// SOID an errno cannot.
    pub fn from_errno(errno: i32) -> Option<FsError> {
        ALL.into_iter().find(|e| e.errno() == errno)
    }
}

/// Every error [`FsError::from_errno`] can give (not `WrongServer` or
/// `NeedsTable`).
const ALL: [FsError; 22] = [
    FsError::NotFound,
    FsError::Exists,
    FsError::NotDir,
    FsError::IsDir,
    FsError::NotEmpty,
    FsError::Invalid,
    FsError::NameTooLong,
    FsError::Access,
    FsError::Perm,
    FsError::Loop,
    FsError::NoData,
    FsError::Range,
    FsError::NoSpace,
    FsError::TooManyLinks,
    FsError::FileTooBig,
    FsError::Io,
    FsError::NotSupported,
    FsError::Stale,
    FsError::Busy,
    FsError::TooBig,
    FsError::ReadOnly,
    FsError::CrossServer,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping_is_one_to_one() {
        let mut seen = std::collections::HashSet::new();
        for e in ALL {
            assert!(seen.insert(e.errno()), "{e:?} shares an errno");
            assert_eq!(FsError::from_errno(e.errno()), Some(e));
        }
    }

    #[test]
    fn wrong_server_has_its_own_errno_and_is_never_made_from_one() {
        let e = FsError::WrongServer {
            soid: Soid::from_u128(7),
        };
        assert_eq!(e.errno(), 66);
        assert!(ALL.iter().all(|a| a.errno() != 66));
        assert_eq!(FsError::from_errno(66), None);
        assert_eq!(FsError::CrossServer.errno(), 18);
        assert_eq!(FsError::from_errno(18), Some(FsError::CrossServer));
    }
}
