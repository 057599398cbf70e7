//! Opening the embedded engine as the invoking user.

use anyhow::{Context, Result};
use sextant_engine::{Engine, EngineConfig};
use sextant_types::{Attr, Credentials, FsError, Soid};
use std::path::Path;

/// The engine plus who is asking.
pub struct Session {
    pub engine: Engine,
    pub cred: Credentials,
}

/// The calling process's uid, gid and supplementary groups.
pub fn caller() -> Credentials {
    // SAFETY: getuid/getgid/getgroups have no preconditions; the buffer is
    // sized by the first getgroups call.
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut());
        let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
        let n = libc::getgroups(groups.len() as i32, groups.as_mut_ptr());
        groups.truncate(n.max(0) as usize);
        Credentials {
            uid: libc::getuid(),
            gid: libc::getgid(),
            groups,
        }
    }
}

impl Session {
    pub fn open(data: &Path) -> Result<Session> {
        let cred = caller();
        let config = EngineConfig {
            // A new store's root belongs to whoever creates it.
            root_uid: cred.uid,
            root_gid: cred.gid,
            ..Default::default()
        };
        let engine = Engine::open_dir(data, config)
            .with_context(|| format!("cannot open the data directory {}", data.display()))?;
        Ok(Session { engine, cred })
    }

    /// Resolves `path` (following symlinks except, unless `follow`, the last).
    pub fn resolve(&self, path: &str, follow: bool) -> Result<Attr> {
        self.engine
            .resolve(&self.cred, path.as_bytes(), follow)
            .map_err(|e| fs_err(e, path))
    }

    /// The directory that would hold `path`, and the last component.
    pub fn parent_of<'p>(&self, path: &'p str) -> Result<(Soid, &'p str)> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rsplit_once('/') {
            Some((d, n)) => (if d.is_empty() { "/" } else { d }, n),
            None => ("/", trimmed),
        };
        if name.is_empty() {
            anyhow::bail!("{path}: not a path to an entry");
        }
        let dir_attr = self.resolve(dir, true)?;
        Ok((dir_attr.soid, name))
    }

    pub fn close(self) -> Result<()> {
        self.engine.close().context("writing tables back")
    }
}

/// An `FsError` as a message in the style of coreutils: `path: No such file…`.
pub fn fs_err(e: FsError, path: &str) -> anyhow::Error {
    anyhow::anyhow!("{path}: {e} (errno {})", e.errno())
}
