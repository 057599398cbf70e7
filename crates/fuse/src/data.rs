//! File data: one object file per regular file's SOID in a local directory
//! (`<dir>/<soid as 32 hex digits>`), read and written with pread/pwrite.
//!
//! The metadata server stays the authority on a file's size and mtime. While
//! a file is open here, writes extend a local size and mark the file dirty;
//! the size (and with it mtime) is sent to the server with one setattr on
//! flush/fsync/release, or before any other setattr, and getattr replies show
//! the local size meanwhile. On the first open in this mount the object is
//! cut or extended to the server's size, so stale bytes past EOF (a crash
//! between write and flush, a SOID reused) never show.
//!
//! A file the server says is empty gets no object file until its first
//! write or growth by truncate (a create through the mount makes no local
//! file: an ext4 create costs ~0.4 ms on our disks, more than the metadata
//! create). Until then the object is *unmaterialized*: its content is
//! zeros up to its size. Invariants: materializing creates the object file
//! truncated, then extends it to the size, so stale bytes of an old object
//! file with the same name never show; a file that grows here is
//! materialized (or its object cut to the size it had) before the server
//! hears of the new size, since a later first open takes an existing
//! object file as the file's content up to the server's size.
//!
//! Removing an object file is off the reply paths: under the lock, at the
//! moment an unlink would have run, the object file is renamed into
//! `<dir>/.trash` ([`TRASH`]) under a name used once, and a remover thread
//! unlinks it there (an ext4 unlink of a file whose data blocks were
//! written back frees them inside the call: 0.15 – 1.7 ms, against
//! 20 – 150 µs for the rename; docs/BENCHMARKS.md, "removes off the
//! UNLINK's path"). Invariants: the object's name is gone from `<dir>` at
//! the same moment as before, under the same lock and the same checks
//! (durable removal, [`ObjectStamp`]), so a later open, materialization or
//! truncate of the SOID can never meet the removed object, nor the
//! remover's unlink a new one (it names only the trash name, which nothing
//! else uses); at most [`REMOVER_QUEUE`] removals wait (when full, the
//! caller unlinks its own at once); [`Data::drain`] (at unmount) returns
//! once every queued one is done; whatever a killed mount left in the
//! trash is only garbage, and the next [`Data::open_dir`] of the directory
//! removes it. `SEXTANT_INLINE_OBJECT_REMOVAL=1` on a mount
//! ([`Data::with_inline_removal`]) unlinks in place, as before, for
//! comparisons.

use parking_lot::Mutex;
use sextant_types::{Attr, Soid};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;

#[derive(Debug)]
struct Object {
    /// `None` until materialized (see the module documentation).
    file: Option<Arc<File>>,
    /// Open handles on it.
    handles: u32,
    /// The size as this mount sees it (≥ the server's while dirty).
    size: u64,
    /// Written since the server last heard of size/mtime.
    dirty: bool,
    /// Its last link is gone: remove the object file on the last release.
    doomed: bool,
    /// Its attributes when first opened here (shown once it is doomed).
    attr: Attr,
    /// Tells this opening of the file from a later one (after its last
    /// release) with the same SOID ([`Seen`]).
    generation: u64,
}

#[derive(Debug, Default)]
struct Inner {
    objects: HashMap<Soid, Object>,
    handles: HashMap<u64, Soid>,
    next_fh: u64,
    next_generation: u64,
    /// Objects whose file is gone by a removal not yet durable.
    pending: HashMap<Soid, Pending>,
}

/// An object to remove once the removal of its file is written back.
#[derive(Debug, Clone, Copy)]
struct Pending {
    incarnation: u64,
    /// Durable once the server's watermark reaches this.
    mark: u64,
    /// The object file when its removal was decided (a different one at
    /// that path is not this file's).
    stamp: ObjectStamp,
}

/// What the client knows of the server's durability: its run (0: a
/// journaling server, where an acknowledged operation is durable), its
/// written-back watermark, and the newest operation any reply showed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Durability {
    pub incarnation: u64,
    pub written_back: u64,
    pub newest_seen: u64,
}

/// Asked when a removal is decided and when pending ones are reaped.
pub type DurabilitySource = Arc<dyn Fn() -> Durability + Send + Sync>;

pub struct Data {
    dir: PathBuf,
    inner: Mutex<Inner>,
    /// `None`: every removal is durable when acknowledged.
    durability: Option<DurabilitySource>,
    /// `<dir>/.trash`: removed object files wait there for the remover.
    trash: PathBuf,
    /// This opening's part of the trash names (process id and the time
    /// it opened), with [`Data::next_trash`] a name used once.
    trash_tag: String,
    next_trash: AtomicU64,
    /// The remover thread's queue; `None` once drained.
    remover: Mutex<Option<Remover>>,
    /// Unlink object files in place (for comparisons).
    inline: bool,
}

/// The directory under the data directory where removed object files
/// wait for the remover (not an object name: [`Data::stored`] skips it).
pub const TRASH: &str = ".trash";

/// How many removed object files may wait for the remover; a removal
/// that finds the queue full unlinks its object itself.
pub const REMOVER_QUEUE: usize = 4096;

#[derive(Debug)]
struct Remover {
    queue: SyncSender<PathBuf>,
    /// Tests: the remover starts only once this is dropped.
    gate: Option<std::sync::mpsc::Sender<()>>,
    thread: std::thread::JoinHandle<()>,
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Data")
            .field("dir", &self.dir)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// What a caller must tell the server after a release or flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dirty {
    pub soid: Soid,
    pub size: u64,
}

/// Where the content of the file `soid` lives in the data directory `dir`
/// (`sextant import --with-data` writes there too).
pub fn object_path(dir: &Path, soid: Soid) -> PathBuf {
    dir.join(soid.to_string())
}

impl Data {
    /// The data directory `dir` (made if missing), with its remover
    /// thread, which first removes what a killed mount left in the trash.
    pub fn open_dir(dir: &Path) -> io::Result<Data> {
        Data::open_dir_gated(dir, false)
    }

    /// [`Data::open_dir`]; with `gated`, the remover waits until
    /// [`Data::drain`] (or the drop) before it removes anything (tests).
    fn open_dir_gated(dir: &Path, gated: bool) -> io::Result<Data> {
        let trash = dir.join(TRASH);
        std::fs::create_dir_all(&trash)?;
        let (queue, queued) = std::sync::mpsc::sync_channel(REMOVER_QUEUE);
        let (gate, gate_rx) = match gated {
            true => {
                let (tx, rx) = std::sync::mpsc::channel();
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let swept = trash.clone();
        let thread = std::thread::Builder::new()
            .name("sextant-remove".into())
            .spawn(move || run_remover(&swept, queued, gate_rx))?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(Data {
            dir: dir.to_path_buf(),
            inner: Mutex::default(),
            durability: None,
            trash,
            trash_tag: format!(".{}.{started}.", std::process::id()),
            next_trash: AtomicU64::new(0),
            remover: Mutex::new(Some(Remover {
                queue,
                gate,
                thread,
            })),
            inline: false,
        })
    }

    /// With `inline`, object files are unlinked in place, inside the
    /// request that removes them, as before the remover (comparisons).
    pub fn with_inline_removal(mut self, inline: bool) -> Data {
        self.inline = inline;
        self
    }

    /// Waits until every removed object file queued for the remover is
    /// unlinked, and stops the remover (at unmount); later removals
    /// unlink their object themselves.
    pub fn drain(&self) {
        let Some(Remover {
            queue,
            gate,
            thread,
        }) = self.remover.lock().take()
        else {
            return;
        };
        drop(gate);
        drop(queue);
        if thread.join().is_err() {
            tracing::warn!("the object remover panicked");
        }
    }

    /// Removes `soid`'s object file, if there is one, now as far as this
    /// directory is concerned: renamed into the trash for the remover
    /// (see the module documentation). Called under the lock.
    fn discard(&self, soid: Soid) -> io::Result<()> {
        let path = self.path(soid);
        if self.inline {
            return remove_quietly(&path);
        }
        // A file never written has no object file: one lstat says so,
        // instead of a rename into the trash that fails (a rename across
        // directories takes the file system's rename lock before it looks
        // the name up) and a check that the trash is there. Whatever
        // creates an object meanwhile raced the rename just the same.
        if let Err(e) = std::fs::symlink_metadata(&path) {
            if e.kind() == io::ErrorKind::NotFound {
                return Ok(());
            }
        }
        let n = self.next_trash.fetch_add(1, Ordering::Relaxed);
        let to = self.trash.join(format!("{soid}{}{n}", self.trash_tag));
        match std::fs::rename(&path, &to) {
            Ok(()) => {}
            // No object file (a file never written), or no trash any more
            // (removed by hand): then in place.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return match self.trash.is_dir() {
                    true => Ok(()),
                    false => remove_quietly(&path),
                };
            }
            Err(e) => return Err(e),
        }
        let left = match &*self.remover.lock() {
            Some(r) => match r.queue.try_send(to) {
                Ok(()) => None,
                Err(TrySendError::Full(p) | TrySendError::Disconnected(p)) => Some(p),
            },
            None => Some(to),
        };
        match left {
            Some(p) => remove_quietly(&p),
            None => Ok(()),
        }
    }

    /// Removals wait until `source` says they are durable (see the module
    /// documentation).
    pub fn with_durability(mut self, source: DurabilitySource) -> Data {
        self.durability = Some(source);
        self
    }

    /// Removes `soid`'s object now if its removal is durable, else makes
    /// it pending. Called under the lock, with the file not open here.
    fn remove_when_durable(&self, inner: &mut Inner, soid: Soid) -> io::Result<()> {
        let path = self.path(soid);
        let d = match &self.durability {
            Some(source) => source(),
            None => Durability::default(),
        };
        if d.incarnation == 0 || d.newest_seen <= d.written_back {
            inner.pending.remove(&soid);
            return self.discard(soid);
        }
        match stamp(&path) {
            Some(stamp) => {
                inner.pending.insert(
                    soid,
                    Pending {
                        incarnation: d.incarnation,
                        mark: d.newest_seen,
                        stamp,
                    },
                );
            }
            None => {
                inner.pending.remove(&soid);
            }
        }
        Ok(())
    }

    /// Removes the pending objects whose removal is now written back;
    /// forgets those of an earlier server run (its recovery may have
    /// brought their files back: the sweep of leftovers asks the server).
    /// Returns how many objects were removed.
    pub fn reap(&self) -> io::Result<usize> {
        let Some(source) = &self.durability else {
            return Ok(0);
        };
        let mut g = self.inner.lock();
        if g.pending.is_empty() {
            return Ok(0);
        }
        let d = source();
        let inner = &mut *g;
        let mut removed = 0;
        let mut first_error = None;
        inner.pending.retain(|soid, p| {
            if p.incarnation != d.incarnation {
                return false;
            }
            if p.mark > d.written_back {
                return true;
            }
            let path = object_path(&self.dir, *soid);
            if !inner.objects.contains_key(soid) && stamp(&path) == Some(p.stamp) {
                match self.discard(*soid) {
                    Ok(()) => removed += 1,
                    Err(e) => {
                        first_error.get_or_insert(e);
                        return true;
                    }
                }
            }
            false
        });
        match first_error {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    /// Objects waiting for their removal to be written back.
    pub fn pending_removals(&self) -> usize {
        self.inner.lock().pending.len()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, soid: Soid) -> PathBuf {
        object_path(&self.dir, soid)
    }

    fn open_object(&self, soid: Soid) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.path(soid))
    }

    /// The object file of a file the server says has content. None here
    /// means this data directory never received it (a metadata-only
    /// import, a file written through a mount on another machine): the
    /// open fails with EIO, logged — never zeros of the right size, which
    /// `grep` would search and `cp` would copy as if they were the file.
    fn existing_object(&self, soid: Soid) -> io::Result<File> {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path(soid))
        {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::error!(
                    soid = %soid,
                    dir = %self.dir.display(),
                    "a file has a size but its data never reached this data directory \
                     (imported without --with-data, or written elsewhere): EIO"
                );
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            other => other,
        }
    }

    /// The object file of an unmaterialized object: created empty (stale
    /// content dropped), then extended to `size` (zeros).
    fn materialize(&self, soid: Soid, size: u64) -> io::Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.path(soid))?;
        if size > 0 {
            file.set_len(size)?;
        }
        Ok(file)
    }

    /// A new handle on `attr`'s file; `attr` is the server's view (its
    /// size is used on the first open only).
    pub fn open(&self, attr: &Attr) -> io::Result<u64> {
        let (soid, server_size) = (attr.soid, attr.size);
        let mut g = self.inner.lock();
        let inner = &mut *g;
        // Alive again (a recovery brought it back, or the SOID is reused
        // after the removal was written back): not to be removed.
        inner.pending.remove(&soid);
        let obj = match inner.objects.entry(soid) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                inner.next_generation += 1;
                let file = if server_size == 0 {
                    None
                } else {
                    let file = self.existing_object(soid)?;
                    if file.metadata()?.len() != server_size {
                        file.set_len(server_size)?;
                    }
                    Some(Arc::new(file))
                };
                v.insert(Object {
                    file,
                    handles: 0,
                    size: server_size,
                    dirty: false,
                    doomed: false,
                    attr: attr.clone(),
                    generation: inner.next_generation,
                })
            }
        };
        obj.handles += 1;
        inner.next_fh += 1;
        let fh = inner.next_fh;
        inner.handles.insert(fh, soid);
        Ok(fh)
    }

    fn object(&self, fh: u64) -> io::Result<(Soid, Option<Arc<File>>, u64)> {
        let g = self.inner.lock();
        let soid = *g.handles.get(&fh).ok_or_else(bad_handle)?;
        let obj = g.objects.get(&soid).ok_or_else(bad_handle)?;
        Ok((soid, obj.file.clone(), obj.size))
    }

    /// The object file of `fh`, materialized if it was not.
    fn materialized(&self, fh: u64) -> io::Result<(Soid, Arc<File>)> {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let soid = *inner.handles.get(&fh).ok_or_else(bad_handle)?;
        let obj = inner.objects.get_mut(&soid).ok_or_else(bad_handle)?;
        let file = match &obj.file {
            Some(f) => Arc::clone(f),
            None => {
                // Under the lock, so the size cannot change meanwhile.
                let f = Arc::new(self.materialize(soid, obj.size)?);
                obj.file = Some(Arc::clone(&f));
                f
            }
        };
        Ok((soid, file))
    }

    /// Up to `len` bytes at `offset`; holes and a short object read as zeros
    /// up to the file's size.
    pub fn read(&self, fh: u64, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let (_, file, size) = self.object(fh)?;
        let want = (len as u64).min(size.saturating_sub(offset)) as usize;
        let mut buf = vec![0u8; want];
        let Some(file) = file else {
            return Ok(buf); // unmaterialized: zeros
        };
        let mut got = 0;
        while got < want {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break, // zeros from here to the size
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(buf)
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> io::Result<u32> {
        let (soid, file) = self.materialized(fh)?;
        file.write_all_at(data, offset)?;
        let end = offset + data.len() as u64;
        let mut g = self.inner.lock();
        if let Some(obj) = g.objects.get_mut(&soid) {
            obj.size = obj.size.max(end);
            obj.dirty = true;
        }
        Ok(data.len() as u32)
    }

    /// The local size while it is ahead of the server's.
    pub fn dirty_size(&self, soid: Soid) -> Option<u64> {
        let g = self.inner.lock();
        g.objects.get(&soid).and_then(|o| o.dirty.then_some(o.size))
    }

    /// The attributes of an open file whose last link is gone (the server
    /// no longer knows it; the kernel still asks while it is open).
    pub fn orphan(&self, soid: Soid) -> Option<Attr> {
        let g = self.inner.lock();
        let obj = g.objects.get(&soid).filter(|o| o.doomed)?;
        Some(Attr {
            nlink: 0,
            size: obj.size,
            ..obj.attr.clone()
        })
    }

    /// Takes the pending size update of `soid`, if any (the caller sends it).
    pub fn take_dirty(&self, soid: Soid) -> Option<Dirty> {
        let mut g = self.inner.lock();
        let obj = g.objects.get_mut(&soid)?;
        std::mem::take(&mut obj.dirty).then_some(Dirty {
            soid,
            size: obj.size,
        })
    }

    /// Puts back an update that could not be sent.
    pub fn restore_dirty(&self, d: Dirty) {
        if let Some(obj) = self.inner.lock().objects.get_mut(&d.soid) {
            obj.dirty = true;
        }
    }

    pub fn soid_of(&self, fh: u64) -> io::Result<Soid> {
        self.inner
            .lock()
            .handles
            .get(&fh)
            .copied()
            .ok_or_else(bad_handle)
    }

    pub fn sync(&self, fh: u64) -> io::Result<()> {
        match self.object(fh)?.1 {
            Some(f) => f.sync_data(),
            None => Ok(()), // no bytes written
        }
    }

    /// What this mount holds of `soid`'s data — its object file, if there
    /// is one, and whether the file is open here — when another client's
    /// change names it: a leftover candidate ([`Data::remove_leftover`]).
    /// `None`: nothing (no object file, not open).
    pub fn leftover(&self, soid: Soid) -> Option<Seen> {
        let g = self.inner.lock();
        let open = g.objects.get(&soid).map(|o| o.generation);
        let stamp = stamp(&self.path(soid));
        (open.is_some() || stamp.is_some()).then_some(Seen { stamp, open })
    }

    /// The server said `soid`'s inode is gone (removed by another client),
    /// and `seen` is what [`Data::leftover`] found before it asked. If the
    /// file was open here then and still is (the same opening: a RELEASE
    /// may come after the removal's notice), its data goes at its last
    /// release, as after a removal made here. Else the object file is
    /// removed if the file is not open here and the object file is the one
    /// `seen` saw (a new file with the SOID, created and written here
    /// meanwhile, changed it). Under the lock, so no open can slip in.
    /// Returns whether it was removed or doomed.
    ///
    /// Log-less, the removal waits until the server's watermark passes
    /// what this client has seen acknowledged (see the module docs).
    pub fn remove_leftover(&self, soid: Soid, seen: Seen) -> io::Result<bool> {
        let mut g = self.inner.lock();
        if let Some(obj) = g.objects.get_mut(&soid) {
            if seen.open != Some(obj.generation) {
                // Opened since: perhaps a new file with the SOID.
                return Ok(false);
            }
            obj.doomed = true;
            return Ok(true);
        }
        let path = self.path(soid);
        if seen.stamp.is_none() || stamp(&path) != seen.stamp {
            return Ok(false);
        }
        self.remove_when_durable(&mut g, soid)?;
        Ok(true)
    }

    /// The SOIDs of the object files in the store (names that are not 32
    /// hex digits are not objects, and are left alone).
    pub fn stored(&self) -> io::Result<Vec<Soid>> {
        let mut soids = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() != 32 {
                continue;
            }
            if let Ok(v) = u128::from_str_radix(name, 16) {
                soids.push(Soid::from_u128(v));
            }
        }
        Ok(soids)
    }

    /// Is the file open here (its size then is this mount's)?
    pub fn is_open(&self, soid: Soid) -> bool {
        self.inner.lock().objects.contains_key(&soid)
    }

    /// The server accepted a new size (truncate): cut or extend the object.
    /// `before` is the server's size before the truncate, for a file not
    /// open here (`None` when unknown: it is open). The object's bytes past
    /// `before` are not the file's — an object left by a file that another
    /// client removed, whose SOID was then reused, or a tail another
    /// client truncated away — and must read as zeros when the file grows.
    pub fn truncate(&self, soid: Soid, before: Option<u64>, size: u64) -> io::Result<()> {
        let mut g = self.inner.lock();
        if let Some(obj) = g.objects.get_mut(&soid) {
            match &obj.file {
                Some(f) => f.set_len(size)?,
                // Unmaterialized and growing: materialize now (an object
                // file left from an earlier life of the SOID would
                // otherwise be taken as this file's by its next open).
                None if size > 0 => obj.file = Some(Arc::new(self.materialize(soid, size)?)),
                None => {}
            }
            obj.size = size;
            return Ok(());
        }
        drop(g);
        let valid = before.unwrap_or(0);
        if size == 0 || valid == 0 {
            // Nothing of the object is the file's: start afresh.
            self.discard(soid)?;
            return match size {
                0 => Ok(()),
                _ => self.materialize(soid, size).map(drop),
            };
        }
        let f = self.open_object(soid)?;
        let len = f.metadata()?.len();
        f.set_len(len.min(valid))?;
        f.set_len(size)
    }

    /// Closes a handle; returns a pending size update to send first.
    pub fn release(&self, fh: u64) -> io::Result<Option<Dirty>> {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let soid = inner.handles.remove(&fh).ok_or_else(bad_handle)?;
        let obj = inner.objects.get_mut(&soid).ok_or_else(bad_handle)?;
        obj.handles = obj.handles.saturating_sub(1);
        if obj.handles > 0 {
            return Ok(None);
        }
        let obj = inner.objects.remove(&soid).ok_or_else(bad_handle)?;
        if obj.doomed {
            self.remove_when_durable(inner, soid)?;
            return Ok(None);
        }
        Ok(obj.dirty.then_some(Dirty {
            soid,
            size: obj.size,
        }))
    }

    /// The inode is gone: drop its data on its last release, or now — or,
    /// with a log-less server, once the removal is written back.
    pub fn remove(&self, soid: Soid) -> io::Result<()> {
        let mut g = self.inner.lock();
        if let Some(obj) = g.objects.get_mut(&soid) {
            obj.doomed = true;
            return Ok(());
        }
        self.remove_when_durable(&mut g, soid)
    }
}

/// What [`Data::leftover`] found of a file's data: its object file (none:
/// not materialized), and the opening of the file here it was part of,
/// if it was open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    stamp: Option<ObjectStamp>,
    open: Option<u64>,
}

/// What tells one object file from another at the same path: its inode,
/// length and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectStamp {
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

fn stamp(p: &Path) -> Option<ObjectStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).ok()?;
    Some(ObjectStamp {
        ino: m.ino(),
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
    })
}

/// The remover thread: once `gate` opens (tests; production has none),
/// removes what the trash held when it started (left by a killed mount:
/// garbage only, see the module documentation), then every object file
/// queued, until the queue closes and is empty ([`Data::drain`]).
fn run_remover(trash: &Path, queued: Receiver<PathBuf>, gate: Option<Receiver<()>>) {
    if let Some(gate) = gate {
        let _ = gate.recv();
    }
    match std::fs::read_dir(trash) {
        Ok(entries) => {
            for entry in entries.flatten() {
                if let Err(e) = remove_quietly(&entry.path()) {
                    tracing::warn!(path = %entry.path().display(), error = %e,
                        "cannot remove a removed file's object");
                }
            }
        }
        Err(e) => tracing::warn!(trash = %trash.display(), error = %e, "cannot list the trash"),
    }
    for path in queued {
        if let Err(e) = remove_quietly(&path) {
            tracing::warn!(path = %path.display(), error = %e,
                "cannot remove a removed file's object");
        }
    }
}

fn remove_quietly(p: &Path) -> io::Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn bad_handle() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(soid: Soid, size: u64) -> Attr {
        Attr {
            soid,
            ftype: sextant_types::FileType::Regular,
            perm: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size,
            rdev: 0,
            atime: Default::default(),
            mtime: Default::default(),
            ctime: Default::default(),
            parent: Soid::ROOT,
            no_xattrs: false,
        }
    }

    /// The entries waiting in `dir`'s trash.
    fn trash_len(dir: &Path) -> usize {
        std::fs::read_dir(dir.join(TRASH)).unwrap().count()
    }

    /// Polls `f` every 5 ms for up to 10 s (the remover runs on its own).
    fn eventually(what: &str, f: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !f() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Writes `bytes` as `s`'s content (a file created empty here).
    fn write_file(d: &Data, s: Soid, bytes: &[u8]) {
        let fh = d.open(&attr(s, 0)).unwrap();
        d.write(fh, 0, bytes).unwrap();
        d.release(fh).unwrap();
    }

    /// A removal takes the object's name away at once, but leaves its
    /// unlink to the remover: the object waits in the trash (while the
    /// remover is held), and is gone soon after (when it is not).
    #[test]
    fn a_removed_object_goes_through_the_trash() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir_gated(dir.path(), true).unwrap();
        let s = Soid::from_u128(21);
        write_file(&d, s, b"some data");
        d.remove(s).unwrap();
        assert!(
            !dir.path().join(s.to_string()).exists(),
            "its name gone now"
        );
        assert_eq!(trash_len(dir.path()), 1, "not unlinked in the request");
        assert_eq!(d.stored().unwrap(), vec![], "the trash holds no objects");
        // Removed (size 0) and never-written files: nothing to move.
        d.remove(Soid::from_u128(22)).unwrap();
        assert_eq!(trash_len(dir.path()), 1);
        d.drain();
        assert_eq!(trash_len(dir.path()), 0);

        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir(dir.path()).unwrap();
        for i in 0..20 {
            write_file(&d, Soid::from_u128(100 + i), b"x");
            d.remove(Soid::from_u128(100 + i)).unwrap();
        }
        // An open file's goes at its last release, the same way.
        let t = Soid::from_u128(200);
        let fh = d.open(&attr(t, 0)).unwrap();
        d.write(fh, 0, b"open").unwrap();
        d.remove(t).unwrap();
        assert_eq!(d.read(fh, 0, 4).unwrap(), b"open");
        d.release(fh).unwrap();
        assert!(!dir.path().join(t.to_string()).exists());
        eventually("the remover empties the trash", || {
            trash_len(dir.path()) == 0
        });
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "only the trash"
        );
    }

    /// A SOID reused right after its removal (the server hands SOIDs out
    /// again) keeps its new object: the queued removal cannot reach it,
    /// whether the new file is written, grown by truncate, or found by
    /// the leftover check.
    #[test]
    fn a_reused_soid_keeps_its_new_data() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir_gated(dir.path(), true).unwrap();
        let (s, t) = (Soid::from_u128(31), Soid::from_u128(32));
        let obj = |s: Soid| dir.path().join(s.to_string());
        write_file(&d, s, b"old bytes");
        d.remove(s).unwrap();
        write_file(&d, s, b"new!");
        // Grown by truncate while closed (an object made afresh).
        write_file(&d, t, b"old bytes of t");
        d.remove(t).unwrap();
        d.truncate(t, Some(0), 3).unwrap();
        let queued = trash_len(dir.path());
        // The queued removals run now.
        d.drain();
        assert_eq!(std::fs::read(obj(s)).unwrap(), b"new!");
        assert_eq!(std::fs::read(obj(t)).unwrap(), b"\0\0\0");
        assert_eq!(queued, 2, "both removals were queued, not done in place");
        assert_eq!(trash_len(dir.path()), 0);
        let fh = d.open(&attr(s, 4)).unwrap();
        assert_eq!(d.read(fh, 0, 100).unwrap(), b"new!");
        d.release(fh).unwrap();
        // After the drain, a removal unlinks in place.
        d.remove(s).unwrap();
        assert!(!obj(s).exists());
    }

    /// The unmount's drain returns once every queued removal is done.
    #[test]
    fn drain_waits_for_the_queued_removals() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir_gated(dir.path(), true).unwrap();
        for i in 0..3 {
            write_file(&d, Soid::from_u128(40 + i), b"data");
            d.remove(Soid::from_u128(40 + i)).unwrap();
        }
        assert_eq!(trash_len(dir.path()), 3);
        d.drain();
        assert_eq!(trash_len(dir.path()), 0, "drained");
        d.drain(); // twice: nothing more
    }

    /// At most REMOVER_QUEUE removals wait: the next ones unlink their
    /// object at once.
    #[test]
    fn a_full_queue_removes_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir_gated(dir.path(), true).unwrap();
        let extra = 3;
        for i in 0..(REMOVER_QUEUE + extra) as u128 {
            let s = Soid::from_u128(1000 + i);
            std::fs::write(dir.path().join(s.to_string()), b"x").unwrap();
            d.remove(s).unwrap();
            assert!(!dir.path().join(s.to_string()).exists());
        }
        assert_eq!(trash_len(dir.path()), REMOVER_QUEUE);
        d.drain();
        assert_eq!(trash_len(dir.path()), 0);
    }

    /// A mount killed with removals queued leaves their objects in the
    /// trash, nothing else: the next opening of the directory removes
    /// them, and no live object.
    #[test]
    fn a_killed_mounts_trash_goes_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let live = Soid::from_u128(51);
        {
            let d = Data::open_dir_gated(dir.path(), true).unwrap();
            write_file(&d, live, b"alive");
            for i in 0..5 {
                write_file(&d, Soid::from_u128(60 + i), b"removed");
                d.remove(Soid::from_u128(60 + i)).unwrap();
            }
            assert_eq!(trash_len(dir.path()), 5);
            // Killed: the remover never ran.
            std::mem::forget(d);
        }
        let d = Data::open_dir(dir.path()).unwrap();
        eventually("the next open empties the trash", || {
            trash_len(dir.path()) == 0
        });
        assert_eq!(d.stored().unwrap(), vec![live]);
        assert_eq!(
            std::fs::read(dir.path().join(live.to_string())).unwrap(),
            b"alive"
        );
    }

    /// SEXTANT_INLINE_OBJECT_REMOVAL=1's mode: unlinked in place.
    #[test]
    fn inline_removal_unlinks_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir_gated(dir.path(), true)
            .unwrap()
            .with_inline_removal(true);
        let s = Soid::from_u128(70);
        write_file(&d, s, b"data");
        d.remove(s).unwrap();
        assert!(!dir.path().join(s.to_string()).exists());
        assert_eq!(trash_len(dir.path()), 0);
    }

    #[test]
    fn write_read_truncate_release() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir(dir.path()).unwrap();
        let s = Soid::from_u128(42);
        let fh = d.open(&attr(s, 0)).unwrap();
        assert_eq!(d.write(fh, 3, b"abc").unwrap(), 3);
        assert_eq!(d.dirty_size(s), Some(6));
        assert_eq!(d.read(fh, 0, 100).unwrap(), b"\0\0\0abc");
        assert_eq!(d.take_dirty(s), Some(Dirty { soid: s, size: 6 }));
        assert_eq!(d.take_dirty(s), None);
        d.truncate(s, None, 4).unwrap();
        assert_eq!(d.read(fh, 2, 100).unwrap(), b"\0a");
        assert_eq!(d.release(fh).unwrap(), None);
        // A second open takes the server's size: a longer server size reads
        // as zeros, a shorter one cuts the object.
        let fh = d.open(&attr(s, 2)).unwrap();
        assert_eq!(d.read(fh, 0, 100).unwrap(), b"\0\0");
        d.release(fh).unwrap();
    }

    #[test]
    fn empty_files_get_an_object_only_when_written() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir(dir.path()).unwrap();
        let s = Soid::from_u128(9);
        let obj = dir.path().join(s.to_string());
        // A stale object file from an earlier life of the SOID.
        std::fs::write(&obj, b"stale bytes").unwrap();
        let fh = d.open(&attr(s, 0)).unwrap();
        assert_eq!(d.read(fh, 0, 100).unwrap(), b"", "server size 0");
        d.sync(fh).unwrap();
        d.truncate(s, None, 4).unwrap();
        assert_eq!(d.read(fh, 0, 100).unwrap(), b"\0\0\0\0", "zeros, not stale");
        assert_eq!(
            std::fs::read(&obj).unwrap(),
            b"\0\0\0\0",
            "grown: materialized, the stale bytes gone (a later open would take the file for its own)"
        );
        d.write(fh, 6, b"x").unwrap();
        assert_eq!(d.read(fh, 0, 100).unwrap(), b"\0\0\0\0\0\0x");
        assert_eq!(std::fs::read(&obj).unwrap(), b"\0\0\0\0\0\0x");
        assert_eq!(d.release(fh).unwrap(), Some(Dirty { soid: s, size: 7 }));
        // Created, never written, released: no object file at all.
        let t = Soid::from_u128(10);
        let fh = d.open(&attr(t, 0)).unwrap();
        assert_eq!(d.release(fh).unwrap(), None);
        assert!(!dir.path().join(t.to_string()).exists());
        d.remove(t).unwrap();
    }

    /// A truncate of a file not open here keeps only the object's bytes
    /// the file had (its server size before): a stale object (its SOID
    /// reused after another client removed the file, or a tail another
    /// client cut) never shows when the file grows.
    #[test]
    fn truncating_a_closed_file_drops_what_was_not_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir(dir.path()).unwrap();
        let s = Soid::from_u128(11);
        let obj = dir.path().join(s.to_string());
        let read_all = |size: u64| {
            let fh = d.open(&attr(s, size)).unwrap();
            let v = d.read(fh, 0, 100).unwrap();
            d.release(fh).unwrap();
            v
        };
        // An empty new file with a stale object: grown to 4, zeros.
        std::fs::write(&obj, b"secret bytes").unwrap();
        d.truncate(s, Some(0), 4).unwrap();
        assert_eq!(read_all(4), b"\0\0\0\0");
        // A 3-byte file whose object still holds 12 (cut elsewhere to 3):
        // grown to 6, its 3 bytes then zeros.
        std::fs::write(&obj, b"abcSTALEXXXX").unwrap();
        d.truncate(s, Some(3), 6).unwrap();
        assert_eq!(read_all(6), b"abc\0\0\0");
        // Cut to 0: no object left.
        d.truncate(s, Some(6), 0).unwrap();
        assert!(!obj.exists());
        // Open (empty, so unmaterialized) and grown by ftruncate: the next
        // open, which takes the server's size, finds no stale object.
        std::fs::write(&obj, b"secret bytes").unwrap();
        let fh = d.open(&attr(s, 0)).unwrap();
        d.truncate(s, None, 5).unwrap();
        d.release(fh).unwrap();
        assert_eq!(read_all(5), b"\0\0\0\0\0");
    }

    #[test]
    fn leftovers_go_only_while_unopened_and_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir(dir.path()).unwrap();
        let s = Soid::from_u128(12);
        let obj = dir.path().join(s.to_string());
        assert_eq!(d.leftover(s), None, "no object file");
        std::fs::write(&obj, b"old").unwrap();
        let seen = d.leftover(s).unwrap();
        // Opened meanwhile (a new file with the SOID): kept.
        let fh = d.open(&attr(s, 0)).unwrap();
        assert!(!d.remove_leftover(s, seen).unwrap());
        // Written and closed meanwhile: a different object, kept.
        d.write(fh, 0, b"new!").unwrap();
        d.release(fh).unwrap();
        assert!(!d.remove_leftover(s, seen).unwrap());
        assert_eq!(std::fs::read(&obj).unwrap(), b"new!");
        // Unchanged and unopened: removed.
        let seen = d.leftover(s).unwrap();
        assert!(d.remove_leftover(s, seen).unwrap());
        assert!(!obj.exists());
        // What the store holds: object names only.
        std::fs::write(&obj, b"x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
        std::fs::write(dir.path().join("z".repeat(32)), b"").unwrap();
        assert_eq!(d.stored().unwrap(), vec![s]);
    }

    #[test]
    fn a_file_open_when_removed_elsewhere_goes_at_its_last_release() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir(dir.path()).unwrap();
        let s = Soid::from_u128(13);
        let obj = dir.path().join(s.to_string());
        let fh = d.open(&attr(s, 0)).unwrap();
        d.write(fh, 0, b"data").unwrap();
        // Seen open (the RELEASE after the removal's notice): doomed, its
        // data readable until the last release, then removed.
        let seen = d.leftover(s).unwrap();
        assert!(d.remove_leftover(s, seen).unwrap());
        assert_eq!(d.read(fh, 0, 4).unwrap(), b"data");
        assert!(obj.exists());
        d.release(fh).unwrap();
        assert!(!obj.exists());
        // Open, not yet written (no object file) when seen: the same.
        let fh = d.open(&attr(s, 0)).unwrap();
        let seen = d.leftover(s).unwrap();
        d.write(fh, 0, b"late").unwrap();
        assert!(d.remove_leftover(s, seen).unwrap());
        d.release(fh).unwrap();
        assert!(!obj.exists());
        // Seen open, released and opened again (a new file with the
        // SOID) before the server answered: kept.
        let fh = d.open(&attr(s, 0)).unwrap();
        d.write(fh, 0, b"old").unwrap();
        let seen = d.leftover(s).unwrap();
        d.release(fh).unwrap();
        let fh = d.open(&attr(s, 3)).unwrap();
        assert!(!d.remove_leftover(s, seen).unwrap());
        d.release(fh).unwrap();
        assert!(obj.exists());
        // Seen open, released since, the object unchanged: removed.
        let fh = d.open(&attr(s, 3)).unwrap();
        let seen = d.leftover(s).unwrap();
        d.release(fh).unwrap();
        assert!(d.remove_leftover(s, seen).unwrap());
        assert!(!obj.exists());
    }

    #[test]
    fn removal_waits_for_the_last_release() {
        let dir = tempfile::tempdir().unwrap();
        let d = Data::open_dir(dir.path()).unwrap();
        let s = Soid::from_u128(7);
        let a = d.open(&attr(s, 0)).unwrap();
        let b = d.open(&attr(s, 0)).unwrap();
        d.write(b, 0, b"x").unwrap();
        assert_eq!(d.orphan(s), None);
        d.remove(s).unwrap();
        assert_eq!(d.orphan(s).map(|a| (a.nlink, a.size)), Some((0, 1)));
        assert!(dir.path().join(s.to_string()).exists());
        assert_eq!(d.release(a).unwrap(), None);
        assert!(
            d.release(b).unwrap().is_none(),
            "nothing to send for a gone file"
        );
        assert!(!dir.path().join(s.to_string()).exists());
        assert!(d.release(b).is_err(), "a released handle is bad");
    }

    /// Log-less: an object whose file's removal is not written back stays
    /// (a recovery may bring the file back with it) until the watermark
    /// passes the removal; a server restart meanwhile leaves it for the
    /// sweep; a journaling server's removals are durable at once.
    #[test]
    fn removal_waits_until_written_back() {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(Mutex::new(Durability {
            incarnation: 7,
            written_back: 10,
            newest_seen: 12,
        }));
        let source = Arc::clone(&state);
        let d = Data::open_dir(dir.path())
            .unwrap()
            .with_durability(Arc::new(move || *source.lock()));
        let write = |s: Soid, bytes: &[u8]| {
            let fh = d.open(&attr(s, 0)).unwrap();
            d.write(fh, 0, bytes).unwrap();
            d.release(fh).unwrap();
        };
        let (f, g, h) = (Soid::from_u128(1), Soid::from_u128(2), Soid::from_u128(3));
        write(f, b"f's bytes");
        write(g, b"g's bytes");
        d.remove(f).unwrap();
        let fh = d.open(&attr(g, 9)).unwrap();
        d.remove(g).unwrap(); // open: doomed, pending at its last release
        d.release(fh).unwrap();
        assert_eq!(d.pending_removals(), 2);
        assert_eq!(d.reap().unwrap(), 0);
        assert_eq!(
            std::fs::read(dir.path().join(f.to_string())).unwrap(),
            b"f's bytes"
        );
        state.lock().written_back = 12;
        assert_eq!(d.reap().unwrap(), 2);
        assert!(!dir.path().join(f.to_string()).exists());
        assert!(!dir.path().join(g.to_string()).exists());
        // Pending across a server restart: forgotten, the object kept.
        write(h, b"h's bytes");
        state.lock().newest_seen = 20;
        d.remove(h).unwrap();
        *state.lock() = Durability {
            incarnation: 8,
            written_back: 30,
            newest_seen: 0,
        };
        assert_eq!(d.reap().unwrap(), 0);
        assert_eq!(d.pending_removals(), 0);
        assert!(dir.path().join(h.to_string()).exists());
        // Durable at once: nothing newer than the watermark was seen.
        d.remove(h).unwrap();
        assert!(!dir.path().join(h.to_string()).exists());
        // Opened again (brought back): no longer pending.
        write(f, b"f again");
        state.lock().newest_seen = 31;
        d.remove(f).unwrap();
        assert_eq!(d.pending_removals(), 1);
        let fh = d.open(&attr(f, 7)).unwrap();
        assert_eq!(d.pending_removals(), 0);
        d.release(fh).unwrap();
        state.lock().written_back = 31;
        d.reap().unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(f.to_string())).unwrap(),
            b"f again"
        );
        // A journaling server (incarnation 0): at once.
        *state.lock() = Durability::default();
        d.remove(f).unwrap();
        assert!(!dir.path().join(f.to_string()).exists());
    }
}
