//! The server's Unix socket: where it is, and binding it.
//!
//! Every local user may connect (mode 0666) and is served as the identity
//! the kernel gives the connection (see [`crate::auth`]), so the socket is
//! on by default, at a path the CLI of any local user finds without being
//! told:
//!
//! - a server on the default address (127.0.0.1:7411) uses
//!   [`DEFAULT_PATH`] (`/run/sextant/sextant.sock`) when it may create it
//!   (root, or an administrator made `/run/sextant` writable for the
//!   server's user, e.g. systemd's `RuntimeDirectory=sextant`) — a fixed
//!   path, because a non-root user's CLI cannot read the server's own
//!   record (in the server user's home);
//! - otherwise, and for servers on other addresses, `<data>/sextant.sock`
//!   (unique per data directory, so servers of tests or of several stores
//!   never collide). The server records it where its own user's CLI looks
//!   (the server record); other users name it (`--server unix:PATH`, or
//!   `server = "unix:PATH"` in `/etc/sextant/config.toml`).
//!
//! `--socket PATH` chooses the path, `--socket off` turns it off. A default
//! socket that cannot be bound is reported and the server serves TCP only;
//! one asked for by path that cannot be bound stops the start.

use anyhow::{Context, Result};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::UnixListener;

/// The directory of the default socket.
pub const DEFAULT_DIR: &str = "/run/sextant";
/// The socket of the server on the default address, when it may create it.
pub const DEFAULT_PATH: &str = "/run/sextant/sextant.sock";
/// The socket's name in the data directory otherwise.
pub const IN_DATA: &str = "sextant.sock";

/// Where a server's Unix socket is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketSetting {
    /// Chosen by [`default_path`].
    Default,
    /// No socket.
    Off,
    /// This path (an error if it cannot be bound).
    At(PathBuf),
}

impl SocketSetting {
    /// `off` (or `none`) turns the socket off; anything else is a path.
    pub fn parse(s: &Path) -> Result<SocketSetting> {
        match s.to_str() {
            Some("off" | "none") => Ok(SocketSetting::Off),
            _ if s.as_os_str().is_empty() => anyhow::bail!("the socket path is empty"),
            _ => Ok(SocketSetting::At(s.to_path_buf())),
        }
    }
}

/// The default socket of a server listening on `listen` with data
/// directory `data` (see the module doc). Creates [`DEFAULT_DIR`] (mode
/// 0755) when it is to be used and missing.
pub fn default_path(listen: &str, data: &Path) -> PathBuf {
    let in_data = std::path::absolute(data)
        .unwrap_or_else(|_| data.to_path_buf())
        .join(IN_DATA);
    if listen != sextant_proto::DEFAULT_LISTEN {
        return in_data;
    }
    let dir = Path::new(DEFAULT_DIR);
    if !dir.is_dir() {
        use std::os::unix::fs::DirBuilderExt;
        if std::fs::DirBuilder::new().mode(0o755).create(dir).is_err() {
            return in_data;
        }
        // Whatever the umask: every user must reach the socket.
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    }
    if may_write(dir) {
        PathBuf::from(DEFAULT_PATH)
    } else {
        in_data
    }
}

/// May this process create files in `dir` (access(2), W_OK | X_OK)?
fn may_write(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string for the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// A socket file this server made; removed when dropped.
pub struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Listens on the Unix socket `path`, mode 0666 (every local user may
/// connect; each is served as themselves). A socket file left by a server
/// that is gone is replaced; one a live server answers on, or a file that
/// is not a socket, is an error (nothing is removed).
/// REQUIRES: a tokio runtime is entered.
pub fn bind(path: &Path) -> Result<(UnixListener, SocketFile)> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            anyhow::bail!(
                "cannot listen on {}: the file exists and is not a socket",
                path.display()
            );
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "cannot listen on {}: another server answers there",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("cannot replace the stale socket {}", path.display()))?;
    }
    let listener = UnixListener::bind(path)
        .with_context(|| format!("cannot listen on the socket {}", path.display()))?;
    let file = SocketFile(path.to_path_buf());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    tracing::info!(
        socket = %path.display(),
        "serving local users on a Unix socket too (each as the identity the kernel gives)"
    );
    Ok((listener, file))
}

/// Binds what `setting` asks for: `Ok(None)` when off, or when the default
/// socket cannot be bound (reported; the server serves TCP only).
/// REQUIRES: a tokio runtime is entered.
pub fn bind_setting(
    setting: &SocketSetting,
    listen: &str,
    data: &Path,
) -> Result<Option<(UnixListener, SocketFile)>> {
    match setting {
        SocketSetting::Off => Ok(None),
        SocketSetting::At(p) => bind(p).map(Some),
        SocketSetting::Default => {
            let path = default_path(listen, data);
            match bind(&path) {
                Ok(bound) => Ok(Some(bound)),
                Err(e) => {
                    tracing::warn!(
                        error = %format!("{e:#}"),
                        "no Unix socket for local users (give --socket PATH, or --socket off)"
                    );
                    Ok(None)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse() {
        assert_eq!(
            SocketSetting::parse(Path::new("off")).unwrap(),
            SocketSetting::Off
        );
        assert_eq!(
            SocketSetting::parse(Path::new("/s.sock")).unwrap(),
            SocketSetting::At("/s.sock".into())
        );
        assert!(SocketSetting::parse(Path::new("")).is_err());
    }

    #[test]
    fn a_server_off_the_default_address_uses_its_data_directory() {
        let p = default_path("127.0.0.1:0", Path::new("/srv/d"));
        assert_eq!(p, PathBuf::from("/srv/d/sextant.sock"));
        let rel = default_path("127.0.0.1:9", Path::new("d"));
        assert!(rel.is_absolute() && rel.ends_with("d/sextant.sock"));
    }

    #[tokio::test]
    async fn the_socket_lets_every_user_connect_and_is_removed_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let (_l, file) = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o666);
        // A live server's socket is not taken over.
        assert!(bind(&path).is_err());
        drop(file);
        assert!(!path.exists());
    }
}
