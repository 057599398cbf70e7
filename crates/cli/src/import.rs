//! `sextant import`: copy a local tree's metadata into Sextant.

use crate::session::{fs_err, Session};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sextant_engine::Lsn;
use sextant_types::{FileType, Nanos, SetAttr, Soid, TimeSet};
use std::collections::VecDeque;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What an import did.
#[derive(Default, serde::Serialize)]
pub struct ImportReport {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub skipped: u64,
    pub seconds: f64,
    pub per_second: f64,
}

/// Mutations in flight before waiting for durability: imports share syncs.
const IN_FLIGHT: usize = 512;

pub fn import(s: &Session, source: &Path, dest: &str, quiet: bool) -> Result<ImportReport> {
    let started = Instant::now();
    let dest_dir = s.resolve(dest, true)?;
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
    let mut pending: VecDeque<Lsn> = VecDeque::new();
    let mut dir_times: Vec<(Soid, SetAttr, PathBuf)> = Vec::new();
    let mut queue: VecDeque<(PathBuf, Soid)> =
        VecDeque::from([(source.to_path_buf(), dest_dir.soid)]);
    while let Some((dir, parent)) = queue.pop_front() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let path = entry.path();
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(_) => {
                    report.skipped += 1;
                    continue;
                }
            };
            let name = entry.file_name();
            let name = std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str()).to_vec();
            let ft = meta.file_type();
            let perm = meta.mode() & 0o7777;
            let created = if ft.is_dir() {
                report.directories += 1;
                s.engine.mkdir(&s.cred, parent, &name, perm)
            } else if ft.is_symlink() {
                report.symlinks += 1;
                let target = std::fs::read_link(&path)?;
                let target = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec();
                s.engine.symlink(&s.cred, parent, &name, &target)
            } else {
                report.files += 1;
                let (ftype, rdev) = if ft.is_file() {
                    (FileType::Regular, 0)
                } else if ft.is_fifo() {
                    (FileType::Fifo, 0)
                } else if ft.is_socket() {
                    (FileType::Socket, 0)
                } else if ft.is_char_device() {
                    (FileType::CharDevice, meta.rdev() as u32)
                } else {
                    (FileType::BlockDevice, meta.rdev() as u32)
                };
                s.engine.mknod(&s.cred, parent, &name, ftype, perm, rdev)
            };
            let attr = match created {
                Ok(c) => {
                    pending.push_back(c.lsn);
                    c.value
                }
                Err(e) => {
                    bar.suspend(|| eprintln!("{}", fs_err(e, &path.display().to_string())));
                    report.skipped += 1;
                    continue;
                }
            };
            // Size, owner (when we may) and times as in the source.
            let set = SetAttr {
                size: ft.is_file().then_some(meta.len()),
                uid: (s.cred.is_root()).then_some(meta.uid()),
                gid: (s.cred.is_root()).then_some(meta.gid()),
                atime: Some(TimeSet::At(nanos(meta.atime(), meta.atime_nsec()))),
                mtime: Some(TimeSet::At(nanos(meta.mtime(), meta.mtime_nsec()))),
                perm: None,
            };
            if ft.is_dir() {
                // A directory's times change while its entries are created:
                // set them last, as cp -a does.
                dir_times.push((attr.soid, set, path.clone()));
            } else if !ft.is_symlink() {
                match s.engine.setattr(&s.cred, attr.soid, &set) {
                    Ok(c) => pending.push_back(c.lsn),
                    Err(e) => {
                        bar.suspend(|| eprintln!("{}", fs_err(e, &path.display().to_string())))
                    }
                }
            }
            if ft.is_dir() {
                queue.push_back((path, attr.soid));
            }
            while pending.len() > IN_FLIGHT {
                if let Some(lsn) = pending.pop_front() {
                    s.engine.wait(lsn)?;
                }
            }
            bar.inc(1);
        }
    }
    for (soid, set, path) in dir_times.into_iter().rev() {
        match s.engine.setattr(&s.cred, soid, &set) {
            Ok(c) => pending.push_back(c.lsn),
            Err(e) => eprintln!("{}", fs_err(e, &path.display().to_string())),
        }
    }
    if let Some(lsn) = pending.back() {
        s.engine.wait(*lsn)?;
    }
    bar.finish_and_clear();
    report.seconds = started.elapsed().as_secs_f64();
    let total = report.files + report.directories + report.symlinks;
    report.per_second = total as f64 / report.seconds.max(1e-9);
    Ok(report)
}

fn nanos(sec: i64, nsec: i64) -> Nanos {
    Nanos::from_parts(sec, nsec.clamp(0, 999_999_999) as u32).unwrap_or(Nanos(0))
}
