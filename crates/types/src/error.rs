//! Errors a caller is expected to handle, each mapped to exactly one errno.
//!
//! Fatal conditions (a failed journal write, detected corruption) are not
//! here: they stop the engine (see `sextant_engine::EngineError`). Requests
//! that reach a stopped engine get [`FsError::NoSpace`] if it stopped on a
//! full disk, else [`FsError::Io`] (`sextant_engine::stop`).

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
}

impl FsError {
    /// The Linux errno for this error.
    pub fn errno(self) -> i32 {
        match self {
            FsError::NotFound => 2,      // ENOENT
            FsError::Exists => 17,       // EEXIST
            FsError::NotDir => 20,       // ENOTDIR
            FsError::IsDir => 21,        // EISDIR
            FsError::NotEmpty => 39,     // ENOTEMPTY
            FsError::Invalid => 22,      // EINVAL
            FsError::NameTooLong => 36,  // ENAMETOOLONG
            FsError::Access => 13,       // EACCES
            FsError::Perm => 1,          // EPERM
            FsError::Loop => 40,         // ELOOP
            FsError::NoData => 61,       // ENODATA
            FsError::Range => 34,        // ERANGE
            FsError::NoSpace => 28,      // ENOSPC
            FsError::TooManyLinks => 31, // EMLINK
            FsError::FileTooBig => 27,   // EFBIG
            FsError::Io => 5,            // EIO
            FsError::NotSupported => 95, // EOPNOTSUPP
            FsError::Stale => 116,       // ESTALE
            FsError::Busy => 16,         // EBUSY
            FsError::TooBig => 7,        // E2BIG
        }
    }

    /// The error for a Linux errno, if it is one of ours.
    pub fn from_errno(errno: i32) -> Option<FsError> {
        ALL.into_iter().find(|e| e.errno() == errno)
    }
}

const ALL: [FsError; 20] = [
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
}
