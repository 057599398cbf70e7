//! The cluster secret: 32 random bytes, hex, in `<data>/secret` (0600).

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "secret";

pub fn path(data: &Path) -> PathBuf {
    data.join(FILE_NAME)
}

/// Reads a secret file (surrounding whitespace ignored).
pub fn read(file: &Path) -> Result<String> {
    let s = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the cluster secret {}", file.display()))?;
    let s = s.trim().to_string();
    if s.is_empty() {
        bail!("the cluster secret file {} is empty", file.display());
    }
    Ok(s)
}

/// The secret of the data directory, created on first start.
pub fn load_or_create(data: &Path) -> Result<String> {
    let file = path(data);
    if file.exists() {
        let mode = std::fs::metadata(&file)?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %file.display(),
                mode = format!("{:o}", mode & 0o777),
                "the cluster secret is readable by others; chmod 600 it"
            );
        }
        return read(&file);
    }
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom")?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = write_private_tmp(data, &hex)?;
    // A concurrent first start must not end with two secrets: link fails
    // if another process won.
    match std::fs::hard_link(&tmp, &file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", file.display())),
    }
    let _ = std::fs::remove_file(&tmp);
    tracing::info!(file = %file.display(), "created the cluster secret");
    read(&file)
}

/// Makes `secret` (the cluster's, from the shared store) the secret of
/// the data directory too, where the CLI on this machine looks for it.
pub fn adopt(data: &Path, secret: &str) -> Result<()> {
    let file = path(data);
    if read(&file).is_ok_and(|s| s == secret) {
        return Ok(());
    }
    let tmp = write_private_tmp(data, secret)?;
    std::fs::rename(&tmp, &file).with_context(|| format!("cannot write {}", file.display()))
}

/// Writes `secret` to a new file of mode 0600 in `dir`, synced; its name is
/// per process (servers of a cluster may create the shared secret at the
/// same moment). The caller links or renames it into place.
fn write_private_tmp(dir: &Path, secret: &str) -> Result<PathBuf> {
    private_tmp(dir, "secret", format!("{secret}\n").as_bytes())
}

/// Writes `bytes` to a new file `.<stem>.<pid>.tmp` of mode 0600 in `dir`
/// (one left by a dead process of that pid is replaced), synced.
fn private_tmp(dir: &Path, stem: &str, bytes: &[u8]) -> Result<PathBuf> {
    let tmp = dir.join(format!(".{stem}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(tmp)
}

/// Replaces `file` with `bytes` atomically (a synced private temporary
/// file renamed over it), mode 0600: a key file, the client-key book.
pub fn write_private(file: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let stem = file
        .file_name()
        .map_or_else(|| "private".into(), |n| n.to_string_lossy().into_owned());
    let tmp = private_tmp(dir, &stem, bytes)?;
    std::fs::rename(&tmp, file).with_context(|| format!("cannot write {}", file.display()))
}

/// Constant-time comparison.
pub fn equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_secret_is_adopted_private_and_replaces_another() {
        let dir = tempfile::tempdir().unwrap();
        let own = load_or_create(dir.path()).unwrap();
        adopt(dir.path(), "cluster-secret").unwrap();
        assert_eq!(read(&path(dir.path())).unwrap(), "cluster-secret");
        assert_ne!(own, "cluster-secret");
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        adopt(dir.path(), "cluster-secret").unwrap();
        assert_eq!(load_or_create(dir.path()).unwrap(), "cluster-secret");
    }

    #[test]
    fn created_once_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create(dir.path()).unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        let mode = std::fs::metadata(path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(dir.path()).unwrap(), a);
    }

    #[test]
    fn comparison() {
        assert!(equal(b"abc", b"abc"));
        assert!(!equal(b"abc", b"abd"));
        assert!(!equal(b"abc", b"ab"));
    }
}
