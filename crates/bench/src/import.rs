//! A namespace shaped like a real tree: the metadata of local directory
//! trees (e.g. /usr and ~/.rustup), imported and then scaled up by copying
//! the whole template under new owners (uid+k, gid+k) with shifted times.

use crate::workload::Window;
use sextant_engine::Engine;
use sextant_types::{Credentials, FileType, FsError, Nanos, SetAttr, Soid, TimeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// What kind of node a template entry is.
#[derive(Debug, Clone)]
pub enum Kind {
    Dir,
    File,
    Symlink(Box<[u8]>),
    Special(FileType, u32),
}

/// One inode of the template, in pre-order (parents before children).
#[derive(Debug, Clone)]
pub struct Entry {
    /// Index of the parent entry; `None` for a top-level directory.
    pub parent: Option<u32>,
    pub name: Box<[u8]>,
    pub kind: Kind,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: Nanos,
    pub mtime: Nanos,
}

/// The imported metadata of some local trees.
#[derive(Debug, Default)]
pub struct Template {
    pub entries: Vec<Entry>,
    /// Index of the deepest entry.
    pub deepest: usize,
    pub skipped: usize,
}

fn nanos(sec: i64, nsec: i64) -> Nanos {
    Nanos(sec.saturating_mul(1_000_000_000).saturating_add(nsec))
}

fn entry_of(parent: Option<u32>, name: &[u8], path: &Path, md: &std::fs::Metadata) -> Entry {
    let ft = md.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        let target = std::fs::read_link(path)
            .map(|t| t.as_os_str().as_bytes().to_vec())
            .unwrap_or_else(|_| b"?".to_vec());
        let target = if target.is_empty() {
            b"?".to_vec()
        } else {
            target
        };
        Kind::Symlink(target.into_boxed_slice())
    } else if ft.is_char_device() {
        Kind::Special(FileType::CharDevice, md.rdev() as u32)
    } else if ft.is_block_device() {
        Kind::Special(FileType::BlockDevice, md.rdev() as u32)
    } else if ft.is_fifo() {
        Kind::Special(FileType::Fifo, 0)
    } else {
        Kind::Special(FileType::Socket, 0)
    };
    Entry {
        parent,
        name: name.into(),
        kind,
        perm: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: md.size(),
        atime: nanos(md.atime(), md.atime_nsec()),
        mtime: nanos(md.mtime(), md.mtime_nsec()),
    }
}

/// Walks `roots` (not following symlinks, staying on each root's device),
/// each imported as a top-level directory named `top_names[i]`.
pub fn walk(roots: &[(&Path, &str)]) -> Template {
    let mut t = Template::default();
    let mut depth: Vec<u16> = Vec::new();
    for (root, top) in roots {
        let Ok(md) = std::fs::symlink_metadata(root) else {
            t.skipped += 1;
            continue;
        };
        if !md.is_dir() {
            t.skipped += 1;
            continue;
        }
        let dev = md.dev();
        t.entries.push(entry_of(None, top.as_bytes(), root, &md));
        depth.push(1);
        // Depth-first with an explicit stack: (path, entry index).
        let mut stack = vec![(root.to_path_buf(), (t.entries.len() - 1) as u32)];
        while let Some((dir, idx)) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                t.skipped += 1;
                continue;
            };
            let mut names: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            names.sort();
            for path in names {
                let Ok(md) = std::fs::symlink_metadata(&path) else {
                    t.skipped += 1;
                    continue;
                };
                let name = path.file_name().map(|n| n.as_bytes()).unwrap_or(b"?");
                t.entries.push(entry_of(Some(idx), name, &path, &md));
                let d = depth[idx as usize] + 1;
                depth.push(d);
                if d > depth[t.deepest] {
                    t.deepest = t.entries.len() - 1;
                }
                if md.is_dir() && md.dev() == dev {
                    stack.push((path, (t.entries.len() - 1) as u32));
                }
            }
        }
    }
    t
}

impl Template {
    /// The path of entry `i` below `prefix` (e.g. `/copy-0003`).
    pub fn path_of(&self, i: usize, prefix: &str) -> String {
        let mut parts = Vec::new();
        let mut cur = Some(i as u32);
        while let Some(c) = cur {
            let e = &self.entries[c as usize];
            parts.push(String::from_utf8_lossy(&e.name).into_owned());
            cur = e.parent;
        }
        parts.reverse();
        format!("{prefix}/{}", parts.join("/"))
    }
}

/// Name of the directory holding copy `k` of the template.
pub fn copy_dir_name(k: usize) -> String {
    format!("copy-{k:04}")
}

/// Imports copies of the template (copy `k` under `/copy-kkkk`, owners
/// +k, times +k days) until `inodes` inodes exist (counting the root).
/// Returns the number of copies started.
pub fn import(engine: &Engine, t: &Template, inodes: usize) -> Result<usize, FsError> {
    let cred = Credentials::root();
    let mut window = Window::new(1024);
    let mut made = 1usize; // the root
    let mut soids: Vec<Soid> = vec![Soid::ROOT; t.entries.len()];
    let mut k = 0usize;
    const DAY: i64 = 86_400 * 1_000_000_000;
    'copies: while made < inodes && !t.entries.is_empty() {
        let top = engine.mkdir(&cred, Soid::ROOT, copy_dir_name(k).as_bytes(), 0o755)?;
        window.push(engine, top.lsn)?;
        made += 1;
        let shift = k as i64 * DAY;
        for (i, e) in t.entries.iter().enumerate() {
            if made >= inodes {
                k += 1;
                break 'copies;
            }
            let parent = e.parent.map_or(top.value.soid, |p| soids[p as usize]);
            let c = match &e.kind {
                Kind::Dir => engine.mkdir(&cred, parent, &e.name, e.perm),
                Kind::File => engine.create(&cred, parent, &e.name, e.perm, true),
                Kind::Symlink(target) => engine.symlink(&cred, parent, &e.name, target),
                Kind::Special(ft, rdev) => engine.mknod(&cred, parent, &e.name, *ft, e.perm, *rdev),
            };
            let c = match c {
                Ok(c) => c,
                Err(FsError::Exists) => continue,
                Err(err) => return Err(err),
            };
            window.push(engine, c.lsn)?;
            let soid = c.value.soid;
            soids[i] = soid;
            made += 1;
            let set = SetAttr {
                perm: (!matches!(e.kind, Kind::Symlink(_))).then_some(e.perm),
                uid: Some(e.uid.wrapping_add(k as u32)),
                gid: Some(e.gid.wrapping_add(k as u32)),
                size: matches!(e.kind, Kind::File).then_some(e.size),
                atime: Some(TimeSet::At(Nanos(e.atime.0.saturating_add(shift)))),
                mtime: Some(TimeSet::At(Nanos(e.mtime.0.saturating_add(shift)))),
            };
            let c = engine.setattr(&cred, soid, &set)?;
            window.push(engine, c.lsn)?;
        }
        k += 1;
    }
    window.drain(engine)?;
    Ok(k)
}
