//! Sextant's shared vocabulary.
//!
//! Everything here is plain data that every layer (engine, server, client,
//! FUSE, CLI) speaks: object ids ([`Soid`]), attributes ([`Attr`],
//! [`FileType`], [`Nanos`]), the caller's identity ([`Credentials`]) and the
//! errors a caller is expected to handle ([`FsError`], mapped one-to-one to
//! errno). This crate depends on no other Sextant crate and does no I/O.

mod attr;
mod cred;
mod error;
mod soid;
pub mod ticket;
pub mod walk;

pub use attr::{
    Attr, FileType, Nanos, SetAttr, TimeSet, MODE_PERM_MASK, S_ISGID, S_ISUID, S_ISVTX,
};
pub use cred::Credentials;
pub use error::FsError;
pub use soid::{Soid, SoidRange};

/// Longest file name component in bytes (as on ext4).
pub const NAME_MAX: usize = 255;
/// Longest symlink target in bytes (as PATH_MAX on Linux).
pub const SYMLINK_MAX: usize = 4095;
/// Longest extended attribute name in bytes (XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value in bytes (XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 65536;
/// Most hard links one inode may have (ext4's EXT4_LINK_MAX).
pub const LINK_MAX: u32 = 65000;

/// Checks a single path component the way the kernel does before it reaches
/// a file system: not empty, not `.`/`..`, no `/` or NUL, at most [`NAME_MAX`].
pub fn validate_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0)
    {
        return Err(FsError::Invalid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_like_the_kernel() {
        assert_eq!(validate_name(b"a"), Ok(()));
        assert_eq!(validate_name(&[b'x'; 255]), Ok(()));
        assert_eq!(validate_name(&[b'x'; 256]), Err(FsError::NameTooLong));
        assert_eq!(validate_name(b""), Err(FsError::Invalid));
        assert_eq!(validate_name(b"."), Err(FsError::Invalid));
        assert_eq!(validate_name(b".."), Err(FsError::Invalid));
        assert_eq!(validate_name(b"a/b"), Err(FsError::Invalid));
        assert_eq!(validate_name(b"a\0b"), Err(FsError::Invalid));
        assert_eq!(validate_name(b"..."), Ok(()));
    }
}
