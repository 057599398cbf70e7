//! `sextant import`: copy a local tree's metadata into Sextant, and with
//! an object directory the regular files' contents too (where `sextant
//! mount` reads them: [`sextant_fuse::data::object_path`]). A file's
//! content is copied before its size is recorded, so a file never shows a
//! size its object does not have.
//!
//! The tree is walked a level at a time; the entries of a level are created
//! with up to [`IN_FLIGHT`] operations in flight, so they share journal
//! syncs (embedded) or round trips and syncs (over the network).

use crate::session::{fs_err, Session};
use anyhow::{Context, Result};
use futures::stream::{self, StreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use sextant_types::{Attr, FileType, Nanos, SetAttr, Soid, TimeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What an import did.
#[derive(Default, serde::Serialize)]
pub struct ImportReport {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub skipped: u64,
    /// Content bytes copied (with an object directory).
    pub data_bytes: u64,
    pub seconds: f64,
    pub per_second: f64,
}

/// Operations in flight at once.
const IN_FLIGHT: usize = 512;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    Symlink,
    Other,
}

struct Item {
    path: PathBuf,
    parent: Soid,
    name: Vec<u8>,
    meta: std::fs::Metadata,
}

fn nanos(sec: i64, nsec: i64) -> Nanos {
    Nanos::from_parts(sec, nsec.clamp(0, 999_999_999) as u32).unwrap_or(Nanos(0))
}

/// Creates one entry; for a file also copies its content into `objects`
/// (when given) and sets its size, owner and times.
async fn create_one(
    s: &Session,
    it: &Item,
    objects: Option<&Path>,
) -> Result<(Kind, Attr, SetAttr), String> {
    let ft = it.meta.file_type();
    let perm = it.meta.mode() & 0o7777;
    let show = |e| fs_err(e, &it.path.display().to_string()).to_string();
    let (kind, created) = if ft.is_dir() {
        (Kind::Dir, s.mkdir(it.parent, &it.name, perm).await)
    } else if ft.is_symlink() {
        let target = std::fs::read_link(&it.path).map_err(|e| e.to_string())?;
        let target = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec();
        (Kind::Symlink, s.symlink(it.parent, &it.name, &target).await)
    } else {
        let ftype = FileType::of_local(ft);
        let rdev = match ftype {
            FileType::CharDevice | FileType::BlockDevice => it.meta.rdev() as u32,
            _ => 0,
        };
        (
            Kind::Other,
            s.mknod(it.parent, &it.name, ftype, perm, rdev).await,
        )
    };
    let attr = created.map_err(show)?;
    // Size, owner (when we may) and times as in the source.
    let m = &it.meta;
    let set = SetAttr {
        size: ft.is_file().then_some(m.len()),
        uid: (s.cred.is_root()).then_some(m.uid()),
        gid: (s.cred.is_root()).then_some(m.gid()),
        atime: Some(TimeSet::At(nanos(m.atime(), m.atime_nsec()))),
        mtime: Some(TimeSet::At(nanos(m.mtime(), m.mtime_nsec()))),
        // Set with owner and size: both clear set-id bits (as chown and
        // truncate do), and setattr applies the mode last, so 4755 stays 4755.
        perm: Some(m.mode() & 0o7777),
    };
    if kind == Kind::Symlink {
        // A symlink's own owner and times (lchown, lutimes), as cp -a
        // keeps them; its mode is always 0777.
        let own = SetAttr {
            size: None,
            perm: None,
            ..set
        };
        s.setattr(attr.soid, &own).await.map_err(show)?;
        return Ok((kind, attr, own));
    }
    if kind != Kind::Other {
        return Ok((kind, attr, set));
    }
    let set = match objects {
        Some(dir) if ft.is_file() => {
            let (from, to) = (
                it.path.clone(),
                sextant_fuse::data::object_path(dir, attr.soid),
            );
            let copied = tokio::task::spawn_blocking(move || std::fs::copy(&from, &to))
                .await
                .map_err(|e| e.to_string())?;
            let bytes = copied.map_err(|e| format!("copying {}: {e}", it.path.display()))?;
            // The size recorded is what was copied (the source may have
            // changed since it was listed).
            SetAttr {
                size: Some(bytes),
                ..set
            }
        }
        _ => set,
    };
    s.setattr(attr.soid, &set).await.map_err(show)?;
    Ok((kind, attr, set))
}

pub async fn import(
    s: &Session,
    source: &Path,
    dest: &str,
    objects: Option<&Path>,
    quiet: bool,
) -> Result<ImportReport> {
    let started = Instant::now();
    if let Some(dir) = objects {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the data directory {}", dir.display()))?;
    }
    let dest_dir = s.resolve(dest, true).await?;
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{spinner} {pos} entries imported ({per_sec}) {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b
    };
    let mut report = ImportReport::default();
    // Directory times change while entries are created: set them last, as
    // cp -a does.
    let mut dir_times: Vec<(Soid, SetAttr, PathBuf)> = Vec::new();
    let mut level: Vec<(PathBuf, Soid)> = vec![(source.to_path_buf(), dest_dir.soid)];
    while !level.is_empty() {
        let mut items = Vec::new();
        for (dir, parent) in &level {
            let entries =
                std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
            for entry in entries {
                let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
                let path = entry.path();
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    report.skipped += 1;
                    continue;
                };
                let name =
                    std::os::unix::ffi::OsStrExt::as_bytes(entry.file_name().as_os_str()).to_vec();
                items.push(Item {
                    path,
                    parent: *parent,
                    name,
                    meta,
                });
            }
        }
        let mut results = stream::iter(
            items
                .iter()
                .map(|it| async move { (it, create_one(s, it, objects).await) }),
        )
        .buffer_unordered(IN_FLIGHT);
        let mut next = Vec::new();
        while let Some((it, r)) = results.next().await {
            match r {
                Ok((kind, attr, set)) => {
                    match kind {
                        Kind::Dir => {
                            report.directories += 1;
                            dir_times.push((attr.soid, set, it.path.clone()));
                            next.push((it.path.clone(), attr.soid));
                        }
                        Kind::Symlink => report.symlinks += 1,
                        Kind::Other => {
                            report.files += 1;
                            if objects.is_some() {
                                report.data_bytes += set.size.unwrap_or(0);
                            }
                        }
                    }
                    bar.inc(1);
                }
                Err(msg) => {
                    bar.suspend(|| eprintln!("{msg}"));
                    report.skipped += 1;
                }
            }
        }
        level = next;
    }
    let mut times = stream::iter(
        dir_times
            .iter()
            .rev()
            .map(|(soid, set, path)| async move { (path, s.setattr(*soid, set).await) }),
    )
    .buffer_unordered(IN_FLIGHT);
    while let Some((path, r)) = times.next().await {
        if let Err(e) = r {
            bar.suspend(|| eprintln!("{}", fs_err(e, &path.display().to_string())));
        }
    }
    bar.finish_and_clear();
    report.seconds = started.elapsed().as_secs_f64();
    let total = report.files + report.directories + report.symlinks;
    report.per_second = total as f64 / report.seconds.max(1e-9);
    Ok(report)
}
