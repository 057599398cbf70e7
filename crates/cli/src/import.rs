//! `sextant import`: copy a local tree's metadata into Sextant, and with
//! an object directory the regular files' contents too (where `sextant
//! mount` reads them: [`sextant_fuse::data::object_path`]). A file's
//! content is copied before its size is recorded, so a file never shows a
//! size its object does not have.
//!
//! The tree is walked a level at a time; the entries of a level are created
//! with up to [`IN_FLIGHT`] operations in flight, so they share journal
//! syncs (embedded) or round trips and syncs (over the network).
//!
//! What comes over is what `cp -a` brings: type, mode, times, owner (as
//! root), symlink targets, contents (with an object directory), extended
//! attributes ([`xattrs`]) and hard links — a non-directory with more
//! than one link is created under the first of its names met (same device
//! and inode number), and its other names in the tree are linked to that
//! inode once the tree is made, so an inode comes over once. A directory
//! gets its mode and times last (deepest first), once its contents no
//! longer change them; until then it is the owner's (0700), so that a
//! caller other than root can fill a read-only directory.
//!
//! Accounting is exact: every operation that fails is counted by its step
//! ([`Failed`]) and named on stderr. A failure that concerns one entry (a
//! name the server refuses, an unreadable source file) lets the import go
//! on; a fatal one — the server unreachable or stopped, the secret
//! refused, a protocol error, the server out of space or failing I/O, the
//! object directory unwritable — stops it at once ([`ImportReport::stopped`]).
//! Either way [`ImportReport::complete`] is false and the command exits
//! non-zero. Entries whose operations were in flight when it stopped are
//! counted neither as imported nor as failed.

mod xattrs;

use crate::session::{fs_err, OpResult, Session};
use anyhow::{Context, Result};
use futures::stream::{self, StreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use sextant_client::Error;
use sextant_types::{Attr, FileType, FsError, Nanos, SetAttr, Soid, TimeSet};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xattrs::{Choice, Xattr};

/// Operations that failed, by step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Failed {
    /// Source entries that could not be read (listed, stat'ed, a symlink's
    /// target, a directory's entries, the extended attributes): those
    /// entries are not imported, nor the contents of such a directory.
    pub read: u64,
    /// Entries the destination refused to create (not imported; for a
    /// directory, nor its contents).
    pub create: u64,
    /// Files whose contents could not be copied (made, with size 0).
    pub data: u64,
    /// Entries made whose mode, owner, times or size could not be set.
    pub setattr: u64,
    /// Extended attributes not set (or, for ACLs, not kept by Sextant).
    pub xattr: u64,
    /// Names of hard-linked files that could not be linked.
    pub link: u64,
}

impl Failed {
    pub fn total(&self) -> u64 {
        self.read + self.create + self.data + self.setattr + self.xattr + self.link
    }

    fn count(&mut self, step: Step) {
        match step {
            Step::Read => self.read += 1,
            Step::Create => self.create += 1,
            Step::Data => self.data += 1,
            Step::Setattr => self.setattr += 1,
            Step::Xattr => self.xattr += 1,
            Step::Link => self.link += 1,
        }
    }
}

/// What an import did.
#[derive(Debug, Default, serde::Serialize)]
pub struct ImportReport {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// Further names of hard-linked inodes, linked to the inode imported
    /// under the first name (not counted in `files`).
    pub hard_links: u64,
    /// Extended attributes set.
    pub xattrs: u64,
    /// Extended attributes left out as `cp -a` leaves them out
    /// ([`xattrs::Choice::LeaveOut`]: e.g. `security.*` for a caller other
    /// than root); not failures.
    pub xattrs_left_out: u64,
    /// Content bytes copied (with an object directory).
    pub data_bytes: u64,
    pub failed: Failed,
    /// Why the import stopped before the end, if it did.
    pub stopped: Option<String>,
    pub seconds: f64,
    pub per_second: f64,
}

impl ImportReport {
    /// Everything came over and nothing failed.
    pub fn complete(&self) -> bool {
        self.failed.total() == 0 && self.stopped.is_none()
    }

    /// Entries made (files, directories, symlinks and hard links).
    pub fn imported(&self) -> u64 {
        self.files + self.directories + self.symlinks + self.hard_links
    }
}

/// Operations in flight at once.
const IN_FLIGHT: usize = 512;

/// Where an import writes: a [`Session`]; the tests wrap one to make
/// chosen operations fail.
pub(crate) trait Dest {
    fn is_root(&self) -> bool;
    async fn mkdir(&self, parent: Soid, name: &[u8], perm: u32) -> OpResult<Attr>;
    async fn mknod(
        &self,
        parent: Soid,
        name: &[u8],
        ftype: FileType,
        perm: u32,
        rdev: u32,
    ) -> OpResult<Attr>;
    async fn symlink(&self, parent: Soid, name: &[u8], target: &[u8]) -> OpResult<Attr>;
    async fn link(&self, soid: Soid, parent: Soid, name: &[u8]) -> OpResult<Attr>;
    async fn setattr(&self, soid: Soid, set: &SetAttr) -> OpResult<Attr>;
    async fn setxattr(&self, soid: Soid, name: &[u8], value: &[u8]) -> OpResult<()>;
}

impl Dest for Session {
    fn is_root(&self) -> bool {
        self.cred.is_root()
    }
    async fn mkdir(&self, parent: Soid, name: &[u8], perm: u32) -> OpResult<Attr> {
        Session::mkdir(self, parent, name, perm).await
    }
    async fn mknod(
        &self,
        parent: Soid,
        name: &[u8],
        ftype: FileType,
        perm: u32,
        rdev: u32,
    ) -> OpResult<Attr> {
        Session::mknod(self, parent, name, ftype, perm, rdev).await
    }
    async fn symlink(&self, parent: Soid, name: &[u8], target: &[u8]) -> OpResult<Attr> {
        Session::symlink(self, parent, name, target).await
    }
    async fn link(&self, soid: Soid, parent: Soid, name: &[u8]) -> OpResult<Attr> {
        Session::link(self, soid, parent, name).await
    }
    async fn setattr(&self, soid: Soid, set: &SetAttr) -> OpResult<Attr> {
        Session::setattr(self, soid, set).await
    }
    async fn setxattr(&self, soid: Soid, name: &[u8], value: &[u8]) -> OpResult<()> {
        Session::setxattr(self, soid, name, value).await
    }
}

/// The step of an import an operation belongs to (see [`Failed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read,
    Create,
    Data,
    Setattr,
    Xattr,
    Link,
}

/// A failed operation.
#[derive(Debug)]
enum Failure {
    /// This entry only: counted, and the import goes on.
    Entry(Step, String),
    /// The import cannot go on.
    Fatal(String),
}

/// Is `e` the end of the import rather than one entry's failure? The
/// server cannot be reached or stopped answering, refused the secret or
/// the protocol, or is out of space or failing its I/O.
fn fatal(e: &Error) -> bool {
    match e {
        Error::Fs(f) => matches!(f, FsError::NoSpace | FsError::Io),
        Error::Auth | Error::Unavailable { .. } | Error::Protocol(_) => true,
        Error::BadQuery(_) => false,
    }
}

/// A failure of `step` on `path` from the destination's error.
fn failure(step: Step, e: Error, path: &Path) -> Failure {
    let fatal = fatal(&e);
    let msg = fs_err(e, &path.display().to_string()).to_string();
    if fatal {
        Failure::Fatal(msg)
    } else {
        Failure::Entry(step, msg)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    Symlink,
    Other,
}

/// A source entry to create.
struct Item {
    path: PathBuf,
    parent: Soid,
    name: Vec<u8>,
    meta: std::fs::Metadata,
    /// Its extended attributes, or why they could not be read.
    xattrs: Result<Vec<Xattr>, String>,
}

/// Another name of a hard-linked inode, linked once the tree is made.
struct LaterLink {
    path: PathBuf,
    parent: Soid,
    name: Vec<u8>,
    inode: (u64, u64),
}

/// What creating one entry did. The entry exists; `failed` are the steps
/// that failed after it was made.
struct Created {
    kind: Kind,
    soid: Soid,
    /// A directory's mode, owner and times, set once its contents are in.
    later: Option<SetAttr>,
    data_bytes: u64,
    xattrs: u64,
    xattrs_left_out: u64,
    failed: Vec<(Step, String)>,
}

fn nanos(sec: i64, nsec: i64) -> Nanos {
    Nanos::from_parts(sec, nsec.clamp(0, 999_999_999) as u32).unwrap_or(Nanos(0))
}

/// The local I/O error `e` of `what`: fatal when it says the object
/// directory cannot take more (full, over quota, read-only, failing).
fn local_failure(e: std::io::Error, what: String, writing: bool) -> Failure {
    let full = matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EIO)
    );
    if writing && full {
        Failure::Fatal(format!("{what}: {e}"))
    } else {
        Failure::Entry(Step::Data, format!("{what}: {e}"))
    }
}

/// Copies `from` into the object file `to` (made new); the bytes copied.
/// Reading the source fails this file; the object directory failing to
/// take the bytes stops the import.
fn copy_data(from: &Path, to: &Path) -> Result<u64, Failure> {
    let mut src = std::fs::File::open(from)
        .map_err(|e| local_failure(e, format!("reading {}", from.display()), false))?;
    let mut dst = std::fs::File::create(to).map_err(|e| {
        // Every file would fail the same way: the object directory is unusable.
        Failure::Fatal(format!("creating {}: {e}", to.display()))
    })?;
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(local_failure(
                    e,
                    format!("reading {}", from.display()),
                    false,
                ))
            }
        };
        dst.write_all(&buf[..n])
            .map_err(|e| local_failure(e, format!("writing {}", to.display()), true))?;
        total += n as u64;
    }
}

/// Sets the attributes of `it` that the import keeps on `soid`; counts
/// what was set and left out into `c`.
async fn set_xattrs<D: Dest>(d: &D, it: &Item, soid: Soid, c: &mut Created) -> Result<(), Failure> {
    let list = match &it.xattrs {
        Ok(l) => l,
        Err(msg) => {
            c.failed.push((Step::Xattr, msg.clone()));
            return Ok(());
        }
    };
    for (name, value) in list {
        let shown = || format!("{} ({})", it.path.display(), String::from_utf8_lossy(name));
        match xattrs::choose(name, d.is_root()) {
            Choice::LeaveOut => c.xattrs_left_out += 1,
            Choice::Unsupported => c.failed.push((
                Step::Xattr,
                format!("{}: not kept by Sextant (no ACLs)", shown()),
            )),
            Choice::Copy => match d.setxattr(soid, name, value).await {
                Ok(()) => c.xattrs += 1,
                Err(e) => match failure(Step::Xattr, e, Path::new(&shown())) {
                    Failure::Entry(s, m) => c.failed.push((s, m)),
                    f => return Err(f),
                },
            },
        }
    }
    Ok(())
}

/// Creates one entry with its extended attributes; for a file also copies
/// its content into `objects` (when given) and sets its size, mode, owner
/// and times (a directory's are returned, to be set last).
async fn create_one<D: Dest>(d: &D, it: &Item, objects: Option<&Path>) -> Result<Created, Failure> {
    let ft = it.meta.file_type();
    let m = &it.meta;
    // The owner's until the end (see the module doc).
    let (kind, made) = if ft.is_dir() {
        (Kind::Dir, d.mkdir(it.parent, &it.name, 0o700).await)
    } else if ft.is_symlink() {
        let target = std::fs::read_link(&it.path)
            .map_err(|e| Failure::Entry(Step::Read, format!("{}: {e}", it.path.display())))?;
        let target = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec();
        (Kind::Symlink, d.symlink(it.parent, &it.name, &target).await)
    } else {
        let ftype = FileType::of_local(ft);
        let rdev = match ftype {
            FileType::CharDevice | FileType::BlockDevice => m.rdev() as u32,
            _ => 0,
        };
        (
            Kind::Other,
            d.mknod(it.parent, &it.name, ftype, 0o600, rdev).await,
        )
    };
    let attr = made.map_err(|e| failure(Step::Create, e, &it.path))?;
    let mut c = Created {
        kind,
        soid: attr.soid,
        later: None,
        data_bytes: 0,
        xattrs: 0,
        xattrs_left_out: 0,
        failed: Vec::new(),
    };
    set_xattrs(d, it, attr.soid, &mut c).await?;
    // Size, owner (when we may) and times as in the source.
    let root = d.is_root();
    let set = SetAttr {
        size: ft.is_file().then_some(m.len()),
        uid: root.then_some(m.uid()),
        gid: root.then_some(m.gid()),
        atime: Some(TimeSet::At(nanos(m.atime(), m.atime_nsec()))),
        mtime: Some(TimeSet::At(nanos(m.mtime(), m.mtime_nsec()))),
        // Set with owner and size: both clear set-id bits (as chown and
        // truncate do), and setattr applies the mode last, so 4755 stays 4755.
        perm: Some(m.mode() & 0o7777),
    };
    let set = match kind {
        Kind::Dir => {
            c.later = Some(set);
            return Ok(c);
        }
        // A symlink's own owner and times (lchown, lutimes), as cp -a
        // keeps them; its mode is always 0777.
        Kind::Symlink => SetAttr {
            size: None,
            perm: None,
            ..set
        },
        Kind::Other => match objects {
            Some(dir) if ft.is_file() => {
                let (from, to) = (
                    it.path.clone(),
                    sextant_fuse::data::object_path(dir, attr.soid),
                );
                let copied = tokio::task::spawn_blocking(move || copy_data(&from, &to))
                    .await
                    .map_err(|e| Failure::Fatal(format!("copying file data: {e}")))?;
                match copied {
                    // The size recorded is what was copied (the source may
                    // have changed since it was listed).
                    Ok(bytes) => {
                        c.data_bytes = bytes;
                        SetAttr {
                            size: Some(bytes),
                            ..set
                        }
                    }
                    Err(Failure::Entry(s, msg)) => {
                        c.failed.push((s, msg));
                        // Mode, owner and times still; the size stays 0.
                        SetAttr { size: None, ..set }
                    }
                    Err(f) => return Err(f),
                }
            }
            _ => set,
        },
    };
    if let Err(e) = d.setattr(attr.soid, &set).await {
        match failure(Step::Setattr, e, &it.path) {
            Failure::Entry(s, msg) => c.failed.push((s, msg)),
            f => return Err(f),
        }
    }
    Ok(c)
}

/// Lists the entries of one directory into `items` (and the further
/// names of hard-linked inodes into `later`); a source that cannot be
/// read is counted.
fn list_dir(
    dir: &Path,
    parent: Soid,
    first_names: &mut HashMap<(u64, u64), Option<Soid>>,
    items: &mut Vec<Item>,
    later: &mut Vec<LaterLink>,
    report: &mut ImportReport,
    say: &dyn Fn(String),
) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            say(format!("reading {}: {e}", dir.display()));
            report.failed.read += 1;
            return;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                say(format!("reading {}: {e}", dir.display()));
                report.failed.read += 1;
                continue;
            }
        };
        let path = entry.path();
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                say(format!("{}: {e}", path.display()));
                report.failed.read += 1;
                continue;
            }
        };
        let name = std::os::unix::ffi::OsStrExt::as_bytes(entry.file_name().as_os_str()).to_vec();
        if !meta.is_dir() && meta.nlink() > 1 {
            let inode = (meta.dev(), meta.ino());
            if first_names.contains_key(&inode) {
                later.push(LaterLink {
                    path,
                    parent,
                    name,
                    inode,
                });
                continue;
            }
            first_names.insert(inode, None);
        }
        let xattrs = xattrs::read(&path).map_err(|e| format!("{}: {e}", path.display()));
        items.push(Item {
            path,
            parent,
            name,
            meta,
            xattrs,
        });
    }
}

/// `sextant import SOURCE DEST`: imports, prints the summary (JSON with
/// `json`, which also hides the progress spinner) and, when something
/// failed or the import stopped, returns what to exit non-zero with.
pub async fn command(
    s: &Session,
    source: &Path,
    dest: &str,
    objects: Option<&Path>,
    json: bool,
) -> Result<Option<String>> {
    let dest_dir = s.resolve(dest, true).await?;
    let report = import(s, source, dest_dir.soid, objects, json).await?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", summary(&report, objects));
    }
    if report.complete() {
        return Ok(None);
    }
    let failed = report.failed.total();
    Ok(Some(match &report.stopped {
        Some(why) => format!(
            "import stopped after {} entries ({failed} failed operations): {why}",
            report.imported()
        ),
        None => format!("import incomplete: {failed} operations failed (named above)"),
    }))
}

/// The text summary of an import.
fn summary(r: &ImportReport, objects: Option<&Path>) -> String {
    let mut out = format!(
        "imported {} files, {} directories, {} symlinks, {} hard links, {} extended \
         attributes in {:.2} s ({:.0}/s)",
        r.files, r.directories, r.symlinks, r.hard_links, r.xattrs, r.seconds, r.per_second
    );
    if let Some(dir) = objects {
        out += &format!(
            "\ncopied {} bytes of file data into {}",
            r.data_bytes,
            dir.display()
        );
    }
    if r.xattrs_left_out > 0 {
        out += &format!(
            "\nleft out {} extended attributes as cp -a does (security.* and trusted.* need root)",
            r.xattrs_left_out
        );
    }
    let f = &r.failed;
    if f.total() == 0 {
        out += "\nfailed: none";
    } else {
        let parts: Vec<String> = [
            (f.read, "unreadable in the source"),
            (f.create, "not created"),
            (f.data, "contents not copied"),
            (f.setattr, "attributes not set"),
            (f.xattr, "extended attributes not set"),
            (f.link, "hard links not made"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        out += &format!("\nfailed: {}", parts.join(", "));
    }
    if let Some(why) = &r.stopped {
        out += &format!("\nstopped early: {why}");
    }
    out
}

/// Imports the tree `source` into the directory `dest_dir` (see the module
/// doc). Only a failure to start is an error; what failed on the way, and
/// a fatal stop, are in the report.
pub(crate) async fn import<D: Dest>(
    d: &D,
    source: &Path,
    dest_dir: Soid,
    objects: Option<&Path>,
    quiet: bool,
) -> Result<ImportReport> {
    let started = Instant::now();
    if let Some(dir) = objects {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the data directory {}", dir.display()))?;
    }
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
    let say = |msg: String| bar.suspend(|| eprintln!("sextant: import: {msg}"));
    let mut report = ImportReport::default();
    let r = run(d, source, dest_dir, objects, &bar, &say, &mut report).await;
    if let Err(msg) = r {
        say(format!("stopped: {msg}"));
        report.stopped = Some(msg);
    }
    bar.finish_and_clear();
    report.seconds = started.elapsed().as_secs_f64();
    report.per_second = report.imported() as f64 / report.seconds.max(1e-9);
    Ok(report)
}

/// The import proper; `Err` is the fatal error that stopped it.
async fn run<D: Dest>(
    d: &D,
    source: &Path,
    dest_dir: Soid,
    objects: Option<&Path>,
    bar: &ProgressBar,
    say: &dyn Fn(String),
    report: &mut ImportReport,
) -> Result<(), String> {
    // Directory modes and times change while entries are created: set them
    // last, as cp -a does.
    let mut dir_attrs: Vec<(Soid, SetAttr, PathBuf)> = Vec::new();
    let mut first_names: HashMap<(u64, u64), Option<Soid>> = HashMap::new();
    let mut later_links = Vec::new();
    let mut level: Vec<(PathBuf, Soid)> = vec![(source.to_path_buf(), dest_dir)];
    while !level.is_empty() {
        let mut items = Vec::new();
        for (dir, parent) in &level {
            list_dir(
                dir,
                *parent,
                &mut first_names,
                &mut items,
                &mut later_links,
                report,
                say,
            );
        }
        let mut results = stream::iter(
            items
                .iter()
                .map(|it| async move { (it, create_one(d, it, objects).await) }),
        )
        .buffer_unordered(IN_FLIGHT);
        let mut next = Vec::new();
        while let Some((it, r)) = results.next().await {
            let c = match r {
                Ok(c) => c,
                Err(Failure::Entry(step, msg)) => {
                    say(msg);
                    report.failed.count(step);
                    continue;
                }
                Err(Failure::Fatal(msg)) => return Err(msg),
            };
            for (step, msg) in c.failed {
                say(msg);
                report.failed.count(step);
            }
            report.xattrs += c.xattrs;
            report.xattrs_left_out += c.xattrs_left_out;
            match c.kind {
                Kind::Dir => {
                    report.directories += 1;
                    if let Some(set) = c.later {
                        dir_attrs.push((c.soid, set, it.path.clone()));
                    }
                    next.push((it.path.clone(), c.soid));
                }
                Kind::Symlink => report.symlinks += 1,
                Kind::Other => {
                    report.files += 1;
                    report.data_bytes += c.data_bytes;
                }
            }
            if !it.meta.is_dir() && it.meta.nlink() > 1 {
                first_names.insert((it.meta.dev(), it.meta.ino()), Some(c.soid));
            }
            bar.inc(1);
        }
        level = next;
    }
    // The further names of hard-linked inodes, now that every first name
    // is made (and before directory times are set: a link changes them).
    let first_names = &first_names;
    let mut links = stream::iter(later_links.iter().map(|l| async move {
        let r = match first_names.get(&l.inode).copied().flatten() {
            Some(soid) => d
                .link(soid, l.parent, &l.name)
                .await
                .map_err(|e| failure(Step::Link, e, &l.path)),
            None => Err(Failure::Entry(
                Step::Link,
                format!(
                    "{}: not linked: the inode's first name was not imported",
                    l.path.display()
                ),
            )),
        };
        (l, r)
    }))
    .buffer_unordered(IN_FLIGHT);
    while let Some((_, r)) = links.next().await {
        match r {
            Ok(_) => {
                report.hard_links += 1;
                bar.inc(1);
            }
            Err(Failure::Entry(step, msg)) => {
                say(msg);
                report.failed.count(step);
            }
            Err(Failure::Fatal(msg)) => return Err(msg),
        }
    }
    drop(links);
    // Deepest first: setting a directory's times does not change its
    // parent's.
    let mut attrs = stream::iter(
        dir_attrs
            .iter()
            .rev()
            .map(|(soid, set, path)| async move { (path, d.setattr(*soid, set).await) }),
    )
    .buffer_unordered(IN_FLIGHT);
    while let Some((path, r)) = attrs.next().await {
        if let Err(e) = r {
            match failure(Step::Setattr, e, path) {
                Failure::Entry(step, msg) => {
                    say(msg);
                    report.failed.count(step);
                }
                Failure::Fatal(msg) => return Err(msg),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{caller, Backend};
    use sextant_engine::{Engine, EngineConfig};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    /// An embedded store in `dir`, used as the caller.
    fn session(dir: &Path) -> Session {
        let cred = caller();
        let config = EngineConfig {
            root_uid: cred.uid,
            root_gid: cred.gid,
            ..Default::default()
        };
        Session {
            backend: Backend::Local(Engine::open_dir(dir, config).unwrap()),
            cred,
        }
    }

    fn engine(s: &Session) -> &Engine {
        match &s.backend {
            Backend::Local(e) => e,
            Backend::Remote(_) => unreachable!("tests use the embedded engine"),
        }
    }

    use super::xattrs::set_for_test as set_xattr;

    /// A session that makes chosen operations fail.
    struct Faulty {
        s: Session,
        /// Directories made; their setattr fails with this error.
        dirs: Mutex<HashSet<Soid>>,
        dir_setattr: Option<FsError>,
        /// Creations that succeed before the server is gone for good.
        creates_ok: Option<u64>,
        creates: AtomicU64,
        /// Operations asked for once the server was gone.
        after_gone: AtomicU64,
        /// A name whose creation is refused (ENAMETOOLONG).
        refused: Option<&'static [u8]>,
    }

    impl Faulty {
        fn new(s: Session) -> Faulty {
            Faulty {
                s,
                dirs: Mutex::default(),
                dir_setattr: None,
                creates_ok: None,
                creates: AtomicU64::new(0),
                after_gone: AtomicU64::new(0),
                refused: None,
            }
        }

        fn gone(&self) -> bool {
            self.creates_ok
                .is_some_and(|n| self.creates.load(Ordering::SeqCst) >= n)
        }

        /// The failure of any operation, if it fails.
        fn check(&self) -> OpResult<()> {
            if self.gone() {
                self.after_gone.fetch_add(1, Ordering::SeqCst);
                return Err(Error::Unavailable {
                    addr: "test".into(),
                    reason: "stopped".into(),
                });
            }
            Ok(())
        }

        /// The failure of a creation, if it fails.
        fn create(&self, name: &[u8]) -> OpResult<()> {
            self.check()?;
            self.creates.fetch_add(1, Ordering::SeqCst);
            if self.refused == Some(name) {
                return Err(Error::Fs(FsError::NameTooLong));
            }
            Ok(())
        }
    }

    impl Dest for Faulty {
        fn is_root(&self) -> bool {
            self.s.cred.is_root()
        }
        async fn mkdir(&self, parent: Soid, name: &[u8], perm: u32) -> OpResult<Attr> {
            self.create(name)?;
            let a = self.s.mkdir(parent, name, perm).await?;
            self.dirs.lock().unwrap().insert(a.soid);
            Ok(a)
        }
        async fn mknod(
            &self,
            parent: Soid,
            name: &[u8],
            ftype: FileType,
            perm: u32,
            rdev: u32,
        ) -> OpResult<Attr> {
            self.create(name)?;
            self.s.mknod(parent, name, ftype, perm, rdev).await
        }
        async fn symlink(&self, parent: Soid, name: &[u8], target: &[u8]) -> OpResult<Attr> {
            self.create(name)?;
            self.s.symlink(parent, name, target).await
        }
        async fn link(&self, soid: Soid, parent: Soid, name: &[u8]) -> OpResult<Attr> {
            self.create(name)?;
            self.s.link(soid, parent, name).await
        }
        async fn setattr(&self, soid: Soid, set: &SetAttr) -> OpResult<Attr> {
            self.check()?;
            if let Some(e) = self.dir_setattr {
                if self.dirs.lock().unwrap().contains(&soid) {
                    return Err(Error::Fs(e));
                }
            }
            self.s.setattr(soid, set).await
        }
        async fn setxattr(&self, soid: Soid, name: &[u8], value: &[u8]) -> OpResult<()> {
            self.check()?;
            self.s.setxattr(soid, name, value).await
        }
    }

    /// `dirs` directories of `files` files each under `root`.
    fn tree(root: &Path, dirs: usize, files: usize) {
        for d in 0..dirs {
            let sub = root.join(format!("d{d}"));
            std::fs::create_dir_all(&sub).unwrap();
            for f in 0..files {
                std::fs::write(sub.join(format!("f{f}")), b"x").unwrap();
            }
        }
    }

    async fn run(d: &impl Dest, src: &Path, objects: Option<&Path>) -> ImportReport {
        import(d, src, Soid::ROOT, objects, true).await.unwrap()
    }

    /// The final setattr of a directory (its mode, owner and times) that
    /// fails is counted as a failure: the import is not complete.
    #[tokio::test]
    async fn a_failed_directory_setattr_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        tree(&src, 3, 2);
        std::fs::create_dir(src.join("d0/deeper")).unwrap();
        let mut d = Faulty::new(session(&dir.path().join("data")));
        d.dir_setattr = Some(FsError::Stale);
        let r = run(&d, &src, None).await;
        assert_eq!((r.directories, r.files), (4, 6), "{r:?}");
        assert_eq!(
            r.failed,
            Failed {
                setattr: 4,
                ..Failed::default()
            }
        );
        assert!(r.stopped.is_none());
        assert!(!r.complete());
        assert!(summary(&r, None).contains("failed: 4 attributes not set"));
    }

    /// A per-entry failure (a name the server refuses) is counted and the
    /// rest is imported; nothing stops.
    #[tokio::test]
    async fn an_entry_failure_is_counted_and_the_rest_imported() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        tree(&src, 2, 3);
        std::fs::create_dir(src.join("bad")).unwrap();
        std::fs::write(src.join("bad/inside"), b"").unwrap();
        let mut d = Faulty::new(session(&dir.path().join("data")));
        d.refused = Some(b"bad");
        let r = run(&d, &src, None).await;
        assert_eq!((r.directories, r.files), (2, 6), "{r:?}");
        assert_eq!(
            r.failed,
            Failed {
                create: 1,
                ..Failed::default()
            }
        );
        assert!(r.stopped.is_none() && !r.complete());
    }

    /// A fatal error (the server gone) stops the import at once: what was
    /// imported is counted, no later step (links, directory times) runs,
    /// and the report says why it stopped.
    #[tokio::test]
    async fn a_fatal_error_stops_the_import() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        tree(&src, 4, 300);
        let mut d = Faulty::new(session(&dir.path().join("data")));
        d.creates_ok = Some(500);
        let r = run(&d, &src, None).await;
        let why = r.stopped.as_deref().unwrap_or_default();
        assert!(why.contains("cannot reach"), "{r:?}");
        assert!(!r.complete());
        assert!(r.imported() > 0 && r.imported() <= 500, "{r:?}");
        assert_eq!(r.failed.total(), 0, "in-flight entries are not failures");
        // Only what was in flight when it stopped asked the gone server.
        assert!(
            d.after_gone.load(Ordering::SeqCst) <= IN_FLIGHT as u64,
            "{}",
            d.after_gone.load(Ordering::SeqCst)
        );
        assert!(summary(&r, None).contains("stopped early: "));
    }

    /// Hard links (within and across directories) come over as links to
    /// one inode, and extended attributes are set, with and without file
    /// data; a file's data is copied once.
    #[tokio::test]
    async fn hard_links_and_xattrs_come_over() {
        for with_data in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let src = dir.path().join("src");
            std::fs::create_dir_all(src.join("a/b")).unwrap();
            std::fs::write(src.join("f"), b"hello").unwrap();
            std::fs::hard_link(src.join("f"), src.join("f2")).unwrap();
            std::fs::hard_link(src.join("f"), src.join("a/b/f3")).unwrap();
            std::fs::write(src.join("a/g"), b"one").unwrap();
            std::fs::hard_link(src.join("a/g"), src.join("g2")).unwrap();
            std::fs::write(src.join("single"), b"").unwrap();
            let xattrs = set_xattr(&src.join("f"), "user.k", b"v")
                && set_xattr(&src.join("a"), "user.dir", b"\x00bin")
                && set_xattr(&src.join("single"), "user.empty", b"");
            if !xattrs {
                eprintln!("the temporary directory keeps no user xattrs: links only");
            }
            let root = caller().is_root();
            if root {
                assert!(set_xattr(&src.join("single"), "trusted.t", b"T"));
                assert!(set_xattr(&src.join("single"), "security.s", b"S"));
            }
            let objects = dir.path().join("objects");
            let s = session(&dir.path().join("data"));
            let r = run(&s, &src, with_data.then_some(objects.as_path())).await;
            assert!(r.complete(), "{r:?}");
            assert_eq!((r.files, r.hard_links), (3, 3), "{r:?}");
            let e = engine(&s);
            let get = |path: &str| e.resolve(&s.cred, path.as_bytes(), false).unwrap();
            let f = get("/f");
            assert_eq!(f.nlink, 3);
            for other in ["/f2", "/a/b/f3"] {
                assert_eq!(get(other).soid, f.soid, "{other}");
            }
            assert_eq!(get("/g2").soid, get("/a/g").soid);
            assert_eq!(get("/a/g").nlink, 2);
            assert_eq!(get("/single").nlink, 1);
            if with_data {
                assert_eq!(r.data_bytes, 5 + 3);
                let obj = sextant_fuse::data::object_path(&objects, f.soid);
                assert_eq!(std::fs::read(obj).unwrap(), b"hello");
                assert_eq!(f.size, 5);
                assert_eq!(std::fs::read_dir(&objects).unwrap().count(), 3);
            }
            if xattrs {
                let x = |path: &str, name: &str| {
                    e.getxattr(&s.cred, get(path).soid, name.as_bytes())
                        .map(|v| v.to_vec())
                };
                assert_eq!(x("/f2", "user.k").unwrap(), b"v");
                assert_eq!(x("/a", "user.dir").unwrap(), b"\x00bin");
                assert_eq!(x("/single", "user.empty").unwrap(), b"");
                if root {
                    assert_eq!(x("/single", "trusted.t").unwrap(), b"T");
                    assert_eq!(x("/single", "security.s").unwrap(), b"S");
                    assert_eq!(r.xattrs, 5);
                } else {
                    assert_eq!(r.xattrs, 3);
                }
            }
        }
    }

    /// The other names of a file whose first name was not created are
    /// failed links, counted.
    #[tokio::test]
    async fn links_to_a_file_not_imported_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("bad"), b"").unwrap();
        std::fs::hard_link(src.join("bad"), src.join("sub/other")).unwrap();
        let mut d = Faulty::new(session(&dir.path().join("data")));
        d.refused = Some(b"bad");
        let r = run(&d, &src, None).await;
        assert_eq!(
            r.failed,
            Failed {
                create: 1,
                link: 1,
                ..Failed::default()
            },
            "{r:?}"
        );
    }

    /// Source entries that cannot be read are counted (a directory that
    /// cannot be listed, for a caller other than root).
    #[tokio::test]
    async fn an_unreadable_source_directory_is_counted() {
        if caller().is_root() {
            eprintln!("SKIPPED: root reads every directory");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        tree(&src, 2, 1);
        std::fs::set_permissions(src.join("d1"), std::fs::Permissions::from_mode(0o000)).unwrap();
        let s = session(&dir.path().join("data"));
        let r = run(&s, &src, None).await;
        std::fs::set_permissions(src.join("d1"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(r.failed.read, 1, "{r:?}");
        assert!(!r.complete());
    }

    /// A read-only source directory is filled by a caller other than root
    /// too (it is the owner's until its contents are in), then gets its
    /// mode.
    #[tokio::test]
    async fn a_read_only_directory_is_filled_then_closed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        tree(&src, 1, 2);
        std::fs::set_permissions(src.join("d0"), std::fs::Permissions::from_mode(0o555)).unwrap();
        std::fs::set_permissions(src.join("d0/f0"), std::fs::Permissions::from_mode(0o444))
            .unwrap();
        let s = session(&dir.path().join("data"));
        let r = run(&s, &src, None).await;
        std::fs::set_permissions(src.join("d0"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(r.complete(), "{r:?}");
        let e = engine(&s);
        let a = e.resolve(&s.cred, b"/d0", false).unwrap();
        assert_eq!(a.perm, 0o555);
        assert_eq!(e.resolve(&s.cred, b"/d0/f0", false).unwrap().perm, 0o444);
    }
}
