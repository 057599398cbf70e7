//! Where a command-line path points: into a Sextant FUSE mount (then the
//! namespace path is what follows the mount point) or directly into the
//! namespace (an absolute path not under a mount).
//!
//! Mounts come from `/proc/self/mountinfo`: a `sextant mount` has source
//! `sextant:ADDR` (the server it talks to) and file system type
//! `fuse.sextant` when `fusermount3` mounted it (a user, or `-o
//! allow_other`), plain `fuse` when root's mount called mount(2) itself
//! (the kernel records a subtype only from `fusermount3`); a `fuse` mount
//! counts only with that source. A `--subdir` mount's source is
//! `sextant:ADDR#/SUBDIR` ([`SUBDIR_MARK`]): a path under it is that
//! directory's. Paths are made absolute against the
//! working directory and normalised lexically (`.`, `..`, repeated
//! slashes) only to find the mount and the namespace path; what is printed
//! keeps the prefix as typed.

use std::path::{Component, Path, PathBuf};

/// Between the server address and the namespace directory a `--subdir`
/// mount shows, in its source (`sextant:ADDR#/SUBDIR`). No server address
/// holds it (a host:port, or `unix:PATH` of a socket).
pub const SUBDIR_MARK: &str = "#";

/// One Sextant mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    /// The server address from the source `sextant:ADDR`, if given.
    pub server: Option<String>,
    /// The namespace directory shown at the mount point (`/` unless
    /// mounted with `--subdir`), absolute, no trailing slash but for `/`.
    pub subdir: Vec<u8>,
    /// The file system type the kernel records (`fuse.sextant` through
    /// fusermount3, `fuse` for root's own mount): find's `-fstype`, `%F`.
    pub fstype: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The Sextant mounts in a mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (mine, theirs) = l.split_once(" - ")?;
            let point = mine.split(' ').nth(4)?;
            let mut t = theirs.split(' ');
            let fstype = t.next()?;
            let source = t.next().unwrap_or("");
            let ours = match fstype {
                "fuse.sextant" => true,
                "fuse" => source == "sextant" || source.starts_with("sextant:"),
                _ => false,
            };
            if !ours {
                return None;
            }
            let source = unescape(source);
            let rest = source.strip_prefix("sextant:").unwrap_or("");
            let (server, subdir) = match rest.split_once(SUBDIR_MARK) {
                Some((a, sub)) if sub.starts_with('/') => (a, sub),
                _ => (rest, "/"),
            };
            Some(Mount {
                point: PathBuf::from(unescape(point)),
                server: (!server.is_empty()).then(|| server.to_string()),
                subdir: subdir.as_bytes().to_vec(),
                fstype: fstype.to_string(),
            })
        })
        .collect()
}

/// The mounts of this process (none if mountinfo cannot be read).
pub fn current() -> Vec<Mount> {
    parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// `cwd/path`, with `.`, `..` and repeated slashes removed lexically.
pub fn absolute(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Where a typed path points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Absolute path in the namespace.
    pub ns: Vec<u8>,
    /// The mount it is under, if any.
    pub mount: Option<Mount>,
}

/// Locates `typed` (see the module doc): under the deepest mount that
/// contains it, else an absolute namespace path; a relative path outside
/// every mount is an error.
pub fn locate(typed: &str, cwd: &Path, mounts: &[Mount]) -> Result<Located, String> {
    use std::os::unix::ffi::OsStrExt;
    let abs = absolute(Path::new(typed), cwd);
    let best = mounts
        .iter()
        .filter(|m| abs.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count());
    if let Some(m) = best {
        let rest = abs.strip_prefix(&m.point).unwrap_or(Path::new(""));
        let mut ns = m.subdir.clone();
        let rest = rest.as_os_str().as_bytes();
        if !rest.is_empty() {
            if ns.last() != Some(&b'/') {
                ns.push(b'/');
            }
            ns.extend_from_slice(rest);
        }
        return Ok(Located {
            ns,
            mount: Some(m.clone()),
        });
    }
    if Path::new(typed).is_absolute() {
        return Ok(Located {
            ns: abs.as_os_str().as_bytes().to_vec(),
            mount: None,
        });
    }
    Err(
        "not under a Sextant mount: give an absolute path in the namespace, or a path under a \
         `sextant mount` mount point"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
80 25 0:45 / /tmp/a\\040b/mnt rw,nosuid,nodev,relatime - fuse.sextant sextant:127.0.0.1:7411 rw,user_id=0,group_id=0
81 25 0:46 / /srv/other rw - fuse.sshfs host:/x rw
82 80 0:47 / /tmp/a\\040b/mnt/inner rw - fuse.sextant sextant:10.0.0.1:1 rw
83 25 0:48 / /mnt/root rw,nosuid,nodev,relatime - fuse sextant:127.0.0.1:7461 rw,user_id=0
84 25 0:49 / /mnt/other rw - fuse otherfs rw
85 25 0:50 / /mnt/lookalike rw - fuse sextantish:1 rw
";

    #[test]
    fn finds_sextant_mounts() {
        let m = parse_mountinfo(INFO);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].point, PathBuf::from("/tmp/a b/mnt"));
        assert_eq!(m[0].server.as_deref(), Some("127.0.0.1:7411"));
        // Mounted by root through mount(2): type `fuse`, known by its source.
        assert_eq!(m[2].point, PathBuf::from("/mnt/root"));
        assert_eq!(m[2].server.as_deref(), Some("127.0.0.1:7461"));
        assert_eq!(
            (m[0].fstype.as_str(), m[2].fstype.as_str()),
            ("fuse.sextant", "fuse")
        );
    }

    #[test]
    fn a_subdir_mount_maps_paths_into_its_directory() {
        let info = "84 25 0:49 / /mnt/alice rw - fuse.sextant \
                    sextant:unix:/run/s.sock#/home/al\\040ice rw\n\
                    85 25 0:50 / /mnt/top rw - fuse.sextant sextant:10.0.0.1:7411 rw\n";
        let m = parse_mountinfo(info);
        assert_eq!(m[0].server.as_deref(), Some("unix:/run/s.sock"));
        assert_eq!(m[0].subdir, b"/home/al ice");
        assert_eq!(m[1].subdir, b"/");
        let cwd = Path::new("/");
        assert_eq!(locate("/mnt/alice", cwd, &m).unwrap().ns, b"/home/al ice");
        assert_eq!(
            locate("/mnt/alice/d/../f", cwd, &m).unwrap().ns,
            b"/home/al ice/f"
        );
        assert_eq!(locate("/mnt/top/x", cwd, &m).unwrap().ns, b"/x");
    }

    #[test]
    fn maps_paths_to_the_namespace() {
        let m = parse_mountinfo(INFO);
        let cwd = Path::new("/tmp/a b");
        let l = locate("mnt/x/../y/", cwd, &m).unwrap();
        assert_eq!(l.ns, b"/y");
        assert_eq!(l.mount.unwrap().server.as_deref(), Some("127.0.0.1:7411"));
        assert_eq!(locate("mnt", cwd, &m).unwrap().ns, b"/");
        assert_eq!(
            locate(".", Path::new("/tmp/a b/mnt/d"), &m).unwrap().ns,
            b"/d"
        );
        // The deepest mount wins.
        let l = locate("/tmp/a b/mnt/inner/z", cwd, &m).unwrap();
        assert_eq!(
            (l.ns.as_slice(), l.mount.unwrap().server),
            (b"/z".as_slice(), Some("10.0.0.1:1".into()))
        );
        // Not a prefix by components.
        let l = locate("/tmp/a b/mntx", cwd, &m).unwrap();
        assert_eq!(
            (l.ns.as_slice(), l.mount),
            (b"/tmp/a b/mntx".as_slice(), None)
        );
        assert!(locate("rel", Path::new("/home"), &m).is_err());
        assert_eq!(locate("/proj//a/./b", cwd, &[]).unwrap().ns, b"/proj/a/b");
    }
}
