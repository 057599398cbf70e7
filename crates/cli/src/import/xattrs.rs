//! The extended attributes `sextant import` copies: read from a local
//! file without following a symlink (`llistxattr`/`lgetxattr`, as
//! `cp -a` reads them), and which of them an import may bring over.
//!
//! Pure choice ([`choose`]) apart from the two system calls ([`read`]).

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One attribute: name and value.
pub type Xattr = (Vec<u8>, Vec<u8>);

/// What an import does with one attribute of a source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Set it on the imported inode.
    Copy,
    /// Leave it out, as `cp -a` does: names `/etc/xattr.conf` marks
    /// `skip` (kernel-written, or other file systems' private data), and
    /// `security.*`/`trusted.*` for a caller other than root (only root may
    /// set them, and `cp -a` run by that user cannot either).
    LeaveOut,
    /// Sextant cannot keep it (POSIX and NFSv4 ACLs, which `cp -a` copies
    /// with the mode): its loss is a failure of the import.
    Unsupported,
}

/// Names `cp -a` never copies (`/etc/xattr.conf`, `skip`): a trailing `*`
/// matches any rest.
const SKIP: [&[u8]; 8] = [
    b"trusted.SGI_ACL_DEFAULT",
    b"trusted.SGI_ACL_FILE",
    b"trusted.SGI_CAP_FILE",
    b"trusted.SGI_DMI_*",
    b"trusted.SGI_MAC_FILE",
    b"xfsroot.*",
    b"user.Beagle.*",
    b"security.evm",
];

/// What to do with the attribute `name` when the importing caller is
/// `root` or not.
pub fn choose(name: &[u8], root: bool) -> Choice {
    let skipped = SKIP.iter().any(|p| match p.strip_suffix(b"*") {
        Some(prefix) => name.starts_with(prefix),
        None => name == *p,
    }) || name.starts_with(b"afs.");
    if skipped {
        Choice::LeaveOut
    } else if name.starts_with(b"user.") {
        Choice::Copy
    } else if name.starts_with(b"security.") || name.starts_with(b"trusted.") {
        if root {
            Choice::Copy
        } else {
            Choice::LeaveOut
        }
    } else {
        // system.posix_acl_*, system.nfs4_acl and anything else: the
        // server keeps only user., trusted. and security. names.
        Choice::Unsupported
    }
}

/// Every extended attribute of `path` (of a symlink itself), in the order
/// the file system lists them; none where the file system keeps none.
pub fn read(path: &Path) -> io::Result<Vec<Xattr>> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let names = match sized(|buf| {
        // SAFETY: `c` is NUL-terminated; `buf` is valid for its length
        // (a null pointer with length 0 asks for the size).
        unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }
    }) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        r => r?,
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        // A listed name holds no NUL (the list separates them with it).
        let Ok(cname) = CString::new(name) else {
            continue;
        };
        match value(&c, &cname) {
            Ok(v) => out.push((name.to_vec(), v)),
            // Removed since it was listed.
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn value(path: &CStr, name: &CStr) -> io::Result<Vec<u8>> {
    sized(|buf| {
        // SAFETY: both strings are NUL-terminated; `buf` is valid for its
        // length.
        unsafe {
            libc::lgetxattr(
                path.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        }
    })
}

/// Calls `f` first with an empty buffer for the size, then with one that
/// size, again if the value grew in between (`ERANGE`).
fn sized(f: impl Fn(&mut [u8]) -> libc::ssize_t) -> io::Result<Vec<u8>> {
    loop {
        let n = f(&mut []);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; n as usize];
        if n == 0 {
            return Ok(buf);
        }
        let m = f(&mut buf);
        if m < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue;
            }
            return Err(e);
        }
        buf.truncate(m as usize);
        return Ok(buf);
    }
}

/// Tests only: sets `name`=`value` on `path` (not following a symlink);
/// false where the file system keeps no such attributes.
#[cfg(test)]
pub(crate) fn set_for_test(path: &Path, name: &str, value: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(p), Ok(n)) = (
        std::ffi::CString::new(path.as_os_str().as_bytes()),
        std::ffi::CString::new(name),
    ) else {
        return false;
    };
    // SAFETY: NUL-terminated strings and a valid buffer.
    unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_follow_cp_a() {
        for (name, root, want) in [
            (&b"user.k"[..], false, Choice::Copy),
            (b"user.k", true, Choice::Copy),
            (b"security.selinux", true, Choice::Copy),
            (b"security.selinux", false, Choice::LeaveOut),
            (b"trusted.t", true, Choice::Copy),
            (b"trusted.t", false, Choice::LeaveOut),
            (b"security.evm", true, Choice::LeaveOut),
            (b"trusted.SGI_DMI_x", true, Choice::LeaveOut),
            (b"user.Beagle.x", false, Choice::LeaveOut),
            (b"system.posix_acl_access", true, Choice::Unsupported),
            (b"system.nfs4_acl", false, Choice::Unsupported),
        ] {
            assert_eq!(
                choose(name, root),
                want,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn reads_a_files_attributes_and_not_a_symlinks_target() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"").unwrap();
        let set = |name: &str, value: &[u8]| set_for_test(&f, name, value);
        if !set("user.a", b"1") {
            eprintln!("SKIPPED: the temporary directory keeps no user xattrs");
            return;
        }
        assert!(set("user.empty", b""));
        let mut got = read(&f).unwrap();
        got.sort();
        assert_eq!(
            got,
            vec![
                (b"user.a".to_vec(), b"1".to_vec()),
                (b"user.empty".to_vec(), Vec::new())
            ]
        );
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(read(&link)
            .unwrap()
            .iter()
            .all(|(n, _)| !n.starts_with(b"user.")));
        assert!(read(&dir.path().join("missing")).is_err());
    }
}
