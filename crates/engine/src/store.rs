//! Where bytes live. The engine's only I/O seam.
//!
//! A [`Store`] holds named *blobs* (table snapshots, the manifest), written
//! whole and atomically, and named append-only *logs* (journal segments).
//! Names are relative paths such as `tables/00000007.snap`.
//!
//! Implementations:
//! - [`LocalDirStore`]: a local directory (the default).
//! - [`MemStore`]: memory, with separate *live* and *durable* images so tests
//!   can simulate a crash that loses everything not yet synced (LevelDB's
//!   fault-injection test, redb's crash-consistency backend), and inject
//!   write failures.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Storage for blobs and logs.
///
/// To ensure correctness, implementations must guarantee:
/// - `put_blob` is atomic and durable: once it returns, a crash leaves the
///   new content; if it fails or a crash interrupts it, the old content (or
///   absence) remains — never a mix.
/// - `LogWriter::sync` makes every byte appended before it durable; bytes
///   appended but not synced may be lost, wholly or partly, in a crash.
/// - `delete_*` and `truncate_log` are durable when they return.
pub trait Store: Send + Sync + 'static {
    fn put_blob(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Writes blob `name` only if it does not exist, atomically: of
    /// callers racing (other processes on a shared store included) exactly
    /// one writes. Returns whether this one did. Durable as `put_blob`.
    /// For decisions that must be taken once (a log-less member's journal
    /// completion).
    fn put_blob_new(&self, name: &str, bytes: &[u8]) -> io::Result<bool>;
    fn get_blob(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    fn delete(&self, name: &str) -> io::Result<()>;
    /// Names starting with `prefix`, sorted.
    fn list(&self, prefix: &str) -> io::Result<Vec<String>>;
    /// Opens log `name` for appending, creating it if absent.
    fn open_log(&self, name: &str) -> io::Result<Box<dyn LogWriter>>;
    /// The whole content of log `name` (journal segments are bounded in size).
    fn read_log(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Cuts log `name` to `len` bytes (recovery discards a torn tail).
    fn truncate_log(&self, name: &str, len: u64) -> io::Result<()>;
    /// A human-readable location for error messages (`/data/journal/x.log`).
    fn describe(&self, name: &str) -> String;
}

/// The writing end of an append-only log.
pub trait LogWriter: Send {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes all appended bytes durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// A handle that syncs this log from another thread while appends go
    /// on (the journal's background sync).
    fn sync_handle(&self) -> io::Result<Box<dyn LogSync>>;
}

/// Syncs a log concurrently with its writer: a [`LogSync::sync`] makes
/// durable at least every byte appended before it was called.
pub trait LogSync: Send {
    fn sync(&self) -> io::Result<()>;
}

/// A store in a local directory. Holds an exclusive `flock` on `LOCK` so two
/// engines never open the same directory.
pub struct LocalDirStore {
    root: PathBuf,
    /// The held `LOCK` (of a member's directory when opened shared).
    _lock: Option<File>,
}

impl LocalDirStore {
    /// Opens (creating) the directory `root` and locks it.
    pub fn open(root: impl AsRef<Path>) -> io::Result<LocalDirStore> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(&root)?;
        let lock = lock_dir(&root)?;
        Ok(LocalDirStore {
            root,
            _lock: Some(lock),
        })
    }

    /// Opens (creating) the directory `root` shared: several cluster
    /// members use it, each writing only under its own `members/<name>/`
    /// (see `crate::member`). `member`'s directory is locked (two engines
    /// never run as one member); `root` is not.
    pub fn open_shared(root: impl AsRef<Path>, member: &str) -> io::Result<LocalDirStore> {
        let root = root.as_ref().to_path_buf();
        let mine = root.join("members").join(member);
        fs::create_dir_all(&mine)?;
        let lock = lock_dir(&mine)?;
        Ok(LocalDirStore {
            root,
            _lock: Some(lock),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, name: &str) -> io::Result<PathBuf> {
        if name.is_empty()
            || name.starts_with('/')
            || name
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad store name {name:?}"),
            ));
        }
        Ok(self.root.join(name))
    }

    fn sync_parent(path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    fn ensure_parent(path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            if !dir.exists() {
                fs::create_dir_all(dir)?;
                if let Some(up) = dir.parent() {
                    File::open(up)?.sync_all()?;
                }
            }
        }
        Ok(())
    }
}

impl Store for LocalDirStore {
    fn put_blob(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.path(name)?;
        Self::ensure_parent(&path)?;
        let tmp = path.with_extension("tmp");
        write_whole(&tmp, bytes)?;
        fs::rename(&tmp, &path)?;
        Self::sync_parent(&path)
    }

    fn put_blob_new(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        let path = self.path(name)?;
        Self::ensure_parent(&path)?;
        // A name of this writer's own, then a hard link to the final name:
        // link(2) fails with EEXIST if the name exists, atomically (on NFS
        // too), where a check then rename would let two writers both win.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let tmp = path.with_extension(format!("new.{}.{nanos}", std::process::id()));
        write_whole(&tmp, bytes)?;
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                Self::sync_parent(&path)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn get_blob(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path(name)?) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        let path = self.path(name)?;
        match fs::remove_file(&path) {
            Ok(()) => Self::sync_parent(&path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        // Prefixes are "dir/" or "dir/stem": list that directory.
        let (dir, _) = prefix.rsplit_once('/').unwrap_or(("", prefix));
        let dir_path = if dir.is_empty() {
            self.root.clone()
        } else {
            self.path(dir)?
        };
        let mut out = Vec::new();
        let entries = match fs::read_dir(&dir_path) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let Some(file) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let name = if dir.is_empty() {
                file
            } else {
                format!("{dir}/{file}")
            };
            if name.starts_with(prefix) && !name.ends_with(".tmp") {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    fn open_log(&self, name: &str) -> io::Result<Box<dyn LogWriter>> {
        let path = self.path(name)?;
        Self::ensure_parent(&path)?;
        let existed = path.exists();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        if !existed {
            Self::sync_parent(&path)?;
        }
        Ok(Box::new(LocalLog { file }))
    }

    fn read_log(&self, name: &str) -> io::Result<Vec<u8>> {
        fs::read(self.path(name)?)
    }

    fn truncate_log(&self, name: &str, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(self.path(name)?)?;
        f.set_len(len)?;
        f.sync_all()
    }

    fn describe(&self, name: &str) -> String {
        self.root.join(name).display().to_string()
    }
}

/// Takes an exclusive `flock` on `dir/LOCK` (held while the file is open).
/// Writes `bytes` to a new file at `path` and syncs it; on failure (a full
/// disk) removes what it wrote, so no partial file stays behind to fill
/// the disk further or to be listed.
fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let written = File::create(path).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_data()
    });
    if written.is_err() {
        let _ = fs::remove_file(path);
    }
    written
}

fn lock_dir(dir: &Path) -> io::Result<File> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))?;
    // SAFETY: flock on a valid, owned file descriptor.
    let rc = unsafe {
        libc::flock(
            std::os::unix::io::AsRawFd::as_raw_fd(&lock),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    if rc != 0 {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "{} is in use by another Sextant process (its LOCK file is held): stop \
                 that process, or use another data directory",
                dir.display()
            ),
        ));
    }
    Ok(lock)
}

struct LocalLog {
    file: File,
}

impl LogWriter for LocalLog {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_handle(&self) -> io::Result<Box<dyn LogSync>> {
        Ok(Box::new(LocalLogSync(self.file.try_clone()?)))
    }
}

/// fdatasync through a duplicate of the log's descriptor (it syncs the
/// same open file).
struct LocalLogSync(File);

impl LogSync for LocalLogSync {
    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

/// An in-memory store for tests: a *live* image (what reads see) and a
/// *durable* image (what survives [`MemStore::crash`]).
#[derive(Clone, Default)]
pub struct MemStore {
    inner: Arc<Mutex<MemInner>>,
}

#[derive(Default)]
struct MemInner {
    blobs: BTreeMap<String, Vec<u8>>,
    /// name → (durable length, live bytes)
    logs: BTreeMap<String, (usize, Vec<u8>)>,
    /// Fail every write once this many more writes have happened.
    writes_until_failure: Option<u64>,
    /// The errno injected failures carry (`None`: an error without one).
    failure_errno: Option<i32>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// Simulates a power cut: every log loses its unsynced bytes, except that
    /// `keep_torn` of them survive (a torn write) when given.
    pub fn crash(&self, keep_torn: Option<usize>) {
        let mut inner = self.inner.lock();
        for (durable, live) in inner.logs.values_mut() {
            let keep = keep_torn.map_or(0, |k| k.min(live.len() - *durable));
            live.truncate(*durable + keep);
            *durable = live.len();
        }
        inner.writes_until_failure = None;
    }

    /// What a power cut now would leave, as a new store (this one goes on
    /// unchanged): every log cut to its synced bytes. For a power loss
    /// while the engine still runs (its background threads cannot then
    /// write into the "crashed" image).
    pub fn power_cut_copy(&self) -> MemStore {
        let inner = self.inner.lock();
        let copy = MemInner {
            blobs: inner.blobs.clone(),
            logs: inner
                .logs
                .iter()
                .map(|(name, (durable, live))| {
                    (name.clone(), (*durable, live[..*durable].to_vec()))
                })
                .collect(),
            writes_until_failure: None,
            failure_errno: None,
        };
        MemStore {
            inner: Arc::new(Mutex::new(copy)),
        }
    }

    /// After `n` more successful writes (appends, syncs, puts), every write fails.
    pub fn fail_after(&self, n: u64) {
        self.inner.lock().writes_until_failure = Some(n);
    }

    /// [`MemStore::fail_after`] with failures that carry `errno` (e.g. 28,
    /// `ENOSPC`: a full disk).
    pub fn fail_after_with_errno(&self, n: u64, errno: i32) {
        let mut inner = self.inner.lock();
        inner.writes_until_failure = Some(n);
        inner.failure_errno = Some(errno);
    }

    /// Direct access for corruption tests.
    pub fn with_bytes<R>(&self, name: &str, f: impl FnOnce(&mut Vec<u8>) -> R) -> Option<R> {
        let mut inner = self.inner.lock();
        if let Some(b) = inner.blobs.get_mut(name) {
            return Some(f(b));
        }
        inner.logs.get_mut(name).map(|(d, live)| {
            let r = f(live);
            *d = live.len();
            r
        })
    }

    fn charge_write(inner: &mut MemInner) -> io::Result<()> {
        match &mut inner.writes_until_failure {
            Some(0) => Err(match inner.failure_errno {
                Some(errno) => io::Error::from_raw_os_error(errno),
                None => io::Error::other("injected write failure"),
            }),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl Store for MemStore {
    fn put_blob(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mut inner = self.inner.lock();
        Self::charge_write(&mut inner)?;
        inner.blobs.insert(name.to_owned(), bytes.to_vec());
        Ok(())
    }

    fn put_blob_new(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        let mut inner = self.inner.lock();
        if inner.blobs.contains_key(name) {
            return Ok(false);
        }
        Self::charge_write(&mut inner)?;
        inner.blobs.insert(name.to_owned(), bytes.to_vec());
        Ok(true)
    }

    fn get_blob(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.inner.lock().blobs.get(name).cloned())
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        let mut inner = self.inner.lock();
        inner.blobs.remove(name);
        inner.logs.remove(name);
        Ok(())
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        let inner = self.inner.lock();
        let mut out: Vec<String> = inner
            .blobs
            .keys()
            .chain(inner.logs.keys())
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect();
        out.sort();
        Ok(out)
    }

    fn open_log(&self, name: &str) -> io::Result<Box<dyn LogWriter>> {
        self.inner
            .lock()
            .logs
            .entry(name.to_owned())
            .or_insert((0, Vec::new()));
        Ok(Box::new(MemLog {
            store: self.clone(),
            name: name.to_owned(),
        }))
    }

    fn read_log(&self, name: &str) -> io::Result<Vec<u8>> {
        self.inner
            .lock()
            .logs
            .get(name)
            .map(|(_, live)| live.clone())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
    }

    fn truncate_log(&self, name: &str, len: u64) -> io::Result<()> {
        let mut inner = self.inner.lock();
        if let Some((d, live)) = inner.logs.get_mut(name) {
            live.truncate(len as usize);
            *d = (*d).min(live.len());
        }
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("mem:{name}")
    }
}

struct MemLog {
    store: MemStore,
    name: String,
}

impl LogWriter for MemLog {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut inner = self.store.inner.lock();
        MemStore::charge_write(&mut inner)?;
        match inner.logs.get_mut(&self.name) {
            Some((_, live)) => {
                live.extend_from_slice(bytes);
                Ok(())
            }
            None => Err(io::Error::new(io::ErrorKind::NotFound, self.name.clone())),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        MemLog::sync_now(&self.store, &self.name)
    }

    fn sync_handle(&self) -> io::Result<Box<dyn LogSync>> {
        Ok(Box::new(MemLog {
            store: self.store.clone(),
            name: self.name.clone(),
        }))
    }
}

impl MemLog {
    fn sync_now(store: &MemStore, name: &str) -> io::Result<()> {
        let mut inner = store.inner.lock();
        MemStore::charge_write(&mut inner)?;
        if let Some((d, live)) = inner.logs.get_mut(name) {
            *d = live.len();
        }
        Ok(())
    }
}

impl LogSync for MemLog {
    fn sync(&self) -> io::Result<()> {
        MemLog::sync_now(&self.store, &self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(store: &dyn Store) {
        assert!(store.put_blob_new("decided", b"first").unwrap());
        assert!(!store.put_blob_new("decided", b"second").unwrap());
        assert_eq!(store.get_blob("decided").unwrap().unwrap(), b"first");
        assert_eq!(
            store.list("decid").unwrap(),
            vec!["decided".to_string()],
            "no temporary file is left"
        );
        store.put_blob("tables/a.snap", b"one").unwrap();
        store.put_blob("tables/a.snap", b"two").unwrap();
        assert_eq!(store.get_blob("tables/a.snap").unwrap().unwrap(), b"two");
        assert_eq!(store.get_blob("tables/none").unwrap(), None);
        let mut log = store.open_log("journal/1.log").unwrap();
        log.append(b"abc").unwrap();
        log.sync().unwrap();
        assert_eq!(store.read_log("journal/1.log").unwrap(), b"abc");
        store.truncate_log("journal/1.log", 1).unwrap();
        assert_eq!(store.read_log("journal/1.log").unwrap(), b"a");
        assert_eq!(store.list("tables/").unwrap(), vec!["tables/a.snap"]);
        store.delete("tables/a.snap").unwrap();
        assert!(store.list("tables/").unwrap().is_empty());
    }

    #[test]
    fn local_dir_store_basics_and_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::open(dir.path()).unwrap();
        exercise(&store);
        assert!(
            LocalDirStore::open(dir.path()).is_err(),
            "second open must fail"
        );
        assert!(store.put_blob("../escape", b"x").is_err());
    }

    /// A put that fails part-way (the disk is full: its temporary file is
    /// `/dev/full` here) returns the disk's error, leaves neither the blob
    /// nor a partial temporary file, and succeeds once retried with space.
    #[test]
    fn a_put_on_a_full_disk_leaves_no_partial_file() {
        if !Path::new("/dev/full").exists() {
            eprintln!("skipped: no /dev/full");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDirStore::open(dir.path()).unwrap();
        let tmp = dir.path().join("blob.tmp");
        std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
        let e = store.put_blob("blob", b"bytes").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28), "{e}");
        assert!(tmp.symlink_metadata().is_err(), "the partial file stays");
        assert_eq!(store.get_blob("blob").unwrap(), None);
        store.put_blob("blob", b"bytes").unwrap();
        assert_eq!(store.get_blob("blob").unwrap().unwrap(), b"bytes");
    }

    #[test]
    fn mem_store_crash_drops_unsynced_bytes() {
        let store = MemStore::new();
        exercise(&store);
        let mut log = store.open_log("j").unwrap();
        log.append(b"durable").unwrap();
        log.sync().unwrap();
        log.append(b"lost").unwrap();
        store.crash(None);
        assert_eq!(store.read_log("j").unwrap(), b"durable");
        let mut log = store.open_log("j").unwrap();
        log.append(b"torn").unwrap();
        store.crash(Some(2));
        assert_eq!(store.read_log("j").unwrap(), b"durableto");
    }
}
