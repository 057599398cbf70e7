//! The `fuser::Filesystem` implementation: each operation resolves node ids
//! to SOIDs, makes its client call(s) as the caller, and hands a `Result` to
//! [`Respond::send`] — the only errno conversion point.

use crate::data::{Data, Dirty};
use crate::dirattrs::{Change, DirAttrs};
use crate::dirs::{DirHandles, Listed, BATCH, PLUS_REPLY_MAX};
use crate::groups::GroupCache;
use crate::interrupts::{InFlight, Interrupts};
use crate::lane::Lanes;
use crate::nodes::{Nodes, Reference};
use crate::perms;
use crate::reply::{DirItem, Entry, Fail, OpResult, PlusItem, Respond, Statfs, Xattr};
use crate::ReaddirPlus;
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags as FuseRenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, RequestId, TimeOrNow, WriteFlags,
};
use sextant_client::Client;
use sextant_engine::{RenameFlags, XattrFlags};
use sextant_types::{Attr, Credentials, FileType, FsError, Nanos, SetAttr, Soid, TimeSet};
use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct SextantFs {
    /// Per-thread connections (and the shared one).
    pub(crate) lanes: Lanes,
    pub(crate) groups: GroupCache,
    pub(crate) dirs: DirHandles,
    pub(crate) nodes: Arc<Nodes>,
    pub(crate) data: Arc<Data>,
    pub(crate) attr_ttl: Duration,
    pub(crate) entry_ttl: Duration,
    /// The kernel's caches are kept coherent by [`crate::watch`]: absent
    /// names and directory listings may be cached too, and directory
    /// attributes from the replies to our own changes ([`DirAttrs`]).
    pub(crate) coherent: bool,
    /// Every change stream the watcher follows is open (see
    /// [`crate::watch`]): the last attributes seen of a file answer opens
    /// and GETATTRs only then ([`crate::dirattrs`]).
    pub(crate) watching: Arc<std::sync::atomic::AtomicBool>,
    pub(crate) dir_attrs: DirAttrs,
    /// Moved by the watcher before it applies other clients' changes.
    pub(crate) cache_epoch: Arc<AtomicU64>,
    /// Moved by this mount's own changes that may change what it cannot
    /// name (a rename: the moved directory's `..`; an xattr set):
    /// part of [`SextantFs::epoch`], not of
    /// [`SextantFs::elsewhere_epoch`].
    pub(crate) own_epoch: AtomicU64,
    /// The file handles open for writing, and who opened each
    /// ([`crate::writers`]).
    pub(crate) write_handles: parking_lot::Mutex<crate::writers::WriteHandles>,
    /// The requests in flight, for the kernel's interrupts.
    pub(crate) interrupts: Interrupts,
    /// Files known to have no xattrs, or no `security.capability`
    /// ([`crate::nocaps`]).
    pub(crate) no_xattrs: crate::nocaps::NoXattrs,
    /// Directories made here and the names put there ([`crate::fresh`]).
    pub(crate) fresh: crate::fresh::FreshDirs,
    /// The names answered "no such name" with a timeout, for the
    /// watcher's resets ([`crate::absent`]).
    pub(crate) absent: Arc<crate::absent::Absent>,
    /// Attribute changes of files open for writing here, sent with their
    /// size ([`crate::held`]); `hold` off: every change is sent at once.
    pub(crate) held: crate::held::HeldChanges,
    pub(crate) hold: bool,
    /// Whether (and how) the kernel is asked for READDIRPLUS (see
    /// [`ReaddirPlus`]); only on a coherent mount.
    pub(crate) readdirplus: ReaddirPlus,
    /// Drops a moved directory's old names ([`crate::unalias`]).
    pub(crate) unalias: crate::unalias::Unalias,
}

/// Moves the cache epoch now and again when dropped: nothing kept before
/// or during the operation is used after it.
struct EpochBump<'a>(&'a AtomicU64);

impl<'a> EpochBump<'a> {
    fn new(epoch: &'a AtomicU64) -> Self {
        epoch.fetch_add(1, Ordering::AcqRel);
        EpochBump(epoch)
    }
}

impl Drop for EpochBump<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// Ends a [`DirAttrs`] change however the operation ends (a failed one
/// keeps nothing).
struct DirChange<'a> {
    fs: &'a SextantFs,
    change: Option<Change>,
}

impl DirChange<'_> {
    fn end(mut self, dir: Option<Attr>) {
        if let Some(c) = self.change.take() {
            self.fs.dir_attrs.end(c, dir, self.fs.epoch());
        }
    }
}

impl Drop for DirChange<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.change.take() {
            self.fs.dir_attrs.end(c, None, self.fs.epoch());
        }
    }
}

/// What gives up the making of a lane for a request (see
/// [`Lanes::block_on_unless`]): its interrupt, or its caller killed.
fn stopper<'a>(
    flight: &'a InFlight<'_>,
    tid: u32,
) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + 'a>> + 'a {
    move || {
        Box::pin(async move {
            tokio::select! {
                _ = flight.interrupted() => {}
                _ = crate::killed::killed(tid) => {}
            }
        })
    }
}

/// `op`, a change, for a request in flight: abandoned with EINTR when
/// interrupted (or its caller killed) before any of its requests went to
/// the server — nothing ran — and waited for once one did (see
/// [`SextantFs::run`]).
async fn whole_once_sent<T>(
    flight: &InFlight<'_>,
    tid: u32,
    op: impl Future<Output = OpResult<T>>,
) -> OpResult<T> {
    // Interrupted before it started: nothing is sent.
    if flight.is_interrupted() {
        return Err(Fail(libc::EINTR));
    }
    let sent = Arc::new(AtomicBool::new(false));
    let op = sextant_client::track_sending(Arc::clone(&sent), op);
    tokio::pin!(op);
    tokio::select! {
        biased;
        r = &mut op => return r,
        _ = flight.interrupted() => {}
        _ = crate::killed::killed(tid) => {}
    }
    if !sent.load(Ordering::Acquire) {
        return Err(Fail(libc::EINTR));
    }
    op.await
}

/// `op`, which changes nothing on the server, for a request in flight:
/// abandoned with EINTR as soon as it is interrupted or its caller killed.
async fn unless_interrupted<T>(
    flight: &InFlight<'_>,
    tid: u32,
    op: impl Future<Output = OpResult<T>>,
) -> OpResult<T> {
    tokio::select! {
        biased;
        r = op => r,
        _ = flight.interrupted() => Err(Fail(libc::EINTR)),
        _ = crate::killed::killed(tid) => Err(Fail(libc::EINTR)),
    }
}

/// A size update taken from [`Data`] and not yet answered by the server:
/// put back when dropped unless [`Unsent::sent`].
struct Unsent<'a> {
    data: &'a Data,
    dirty: Option<Dirty>,
}

impl Unsent<'_> {
    fn sent(mut self) {
        self.dirty = None;
    }
}

/// Attribute changes taken from [`crate::held::HeldChanges`] to be sent:
/// held again when dropped unless [`Unheld::sent`] (the request failed
/// or was abandoned).
struct Unheld<'a> {
    held: &'a crate::held::HeldChanges,
    soid: Soid,
    taken: Option<crate::held::Held>,
}

impl Unheld<'_> {
    fn sent(mut self) {
        self.taken = None;
        self.held.sent(self.soid);
    }
}

impl Drop for Unheld<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.taken.take() {
            self.held.put_back(self.soid, h);
        }
    }
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.dirty.take() {
            self.data.restore_dirty(d);
        }
    }
}

fn name(n: &OsStr) -> &[u8] {
    n.as_bytes()
}

fn system_time(n: Nanos) -> SystemTime {
    let d = Duration::new(n.secs().unsigned_abs(), n.subsec_nanos());
    if n.secs() >= 0 {
        UNIX_EPOCH + d
    } else {
        // secs is floored, so subtract whole seconds then add back the nanos.
        UNIX_EPOCH - Duration::from_secs(n.secs().unsigned_abs())
            + Duration::new(0, n.subsec_nanos())
    }
}

fn nanos(t: SystemTime) -> OpResult<Nanos> {
    let n = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).ok(),
        Err(e) => i64::try_from(e.duration().as_nanos()).ok().map(|v| -v),
    };
    n.map(Nanos).ok_or(Fail(libc::EINVAL))
}

/// Now, as the server stores times.
fn nanos_now() -> Nanos {
    nanos(SystemTime::now()).unwrap_or_default()
}

fn time_set(t: TimeOrNow) -> OpResult<TimeSet> {
    Ok(match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(nanos(t)?),
    })
}

fn kind(t: FileType) -> fuser::FileType {
    match t {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
    }
}

fn root() -> Credentials {
    Credentials::root()
}

impl SextantFs {
    /// Runs a local operation (file data in this mount's directory) on this
    /// thread's lane and sends its reply.
    fn run_local<R: Respond>(&self, reply: R, op: impl Future<Output = OpResult<R::Ok>>) {
        reply.send(self.lanes.block_on(op));
    }

    /// Runs one operation on this thread's lane and sends its reply. If the
    /// kernel interrupts it (its caller got a signal, see
    /// [`crate::interrupts`]), or its caller is killed (see
    /// [`crate::killed`]), while no request of it has gone to the server
    /// yet — the server is down and the client is retrying its connection —
    /// it is abandoned with EINTR: nothing ran. Once a request went out the
    /// server may have run it, so it is waited for (its retry keeps the
    /// exactly-once identity, and the mount's bookkeeping follows what the
    /// server did).
    fn run<R: Respond>(&self, req: &Request, reply: R, op: impl Future<Output = OpResult<R::Ok>>) {
        let tid = req.pid();
        let flight = self.interrupts.begin(req.unique().0);
        let stop = stopper(&flight, tid);
        reply.send(
            self.lanes
                .block_on_unless(whole_once_sent(&flight, tid, op), stop),
        );
        drop(flight);
    }

    /// [`SextantFs::run`] for an operation that changes nothing on the
    /// server: abandoned with EINTR as soon as the kernel interrupts it or
    /// its caller has a fatal signal pending, so a program never waits
    /// for a server that is down once it has a signal to handle or to die
    /// of.
    fn run_read<R: Respond>(
        &self,
        req: &Request,
        reply: R,
        op: impl Future<Output = OpResult<R::Ok>>,
    ) {
        let tid = req.pid();
        let flight = self.interrupts.begin(req.unique().0);
        let stop = stopper(&flight, tid);
        reply.send(
            self.lanes
                .block_on_unless(unless_interrupted(&flight, tid, op), stop),
        );
        drop(flight);
    }

    /// `change` as in [`SextantFs::run`], then `read` as in
    /// [`SextantFs::run_read`]: fsync sends the file's held changes (a
    /// mutation, waited for once sent), then waits for the journal sync,
    /// which changes nothing — a caller killed while only that is in
    /// flight (its server stopped) goes at once.
    fn run_change_then_read<R: Respond, F: Future<Output = OpResult<R::Ok>>>(
        &self,
        req: &Request,
        reply: R,
        change: impl Future<Output = OpResult<()>>,
        read: impl FnOnce() -> F,
    ) {
        let tid = req.pid();
        let flight = self.interrupts.begin(req.unique().0);
        let stop = stopper(&flight, tid);
        reply.send(self.lanes.block_on_unless(
            async {
                whole_once_sent(&flight, tid, change).await?;
                unless_interrupted(&flight, tid, read()).await
            },
            stop,
        ));
        drop(flight);
    }

    /// [`SextantFs::run`] for an operation that is never abandoned: its
    /// caller does not wait for it (the kernel sends a release in the
    /// background, and interrupts none).
    fn run_whole<R: Respond>(&self, reply: R, op: impl Future<Output = OpResult<R::Ok>>) {
        reply.send(self.lanes.block_on(op));
    }

    fn epoch(&self) -> u64 {
        self.cache_epoch
            .load(Ordering::Acquire)
            .wrapping_add(self.own_epoch.load(Ordering::Acquire))
    }

    /// The epoch of changes made elsewhere only (the watcher's): what
    /// [`crate::fresh`] goes by, since this mount records every name it
    /// puts in a directory itself (a rename's new name too).
    fn elsewhere_epoch(&self) -> u64 {
        self.cache_epoch.load(Ordering::Acquire)
    }

    /// A change of directory `parent` starts (see [`DirAttrs`]); returns
    /// whether to ask for the directory's attributes.
    fn dir_change(&self, parent: INodeNo) -> (DirChange<'_>, bool) {
        let change = self
            .coherent
            .then(|| self.dir_attrs.begin(parent.0, self.epoch()));
        let want = change.is_some();
        (DirChange { fs: self, change }, want)
    }

    /// `.` and `..` of directory `ino`, those of them a listing from
    /// `offset` still has to give (cookies 1 and 2: never a name's, the
    /// engine's start at 256).
    async fn dots(&self, req: &Request, ino: INodeNo, offset: u64) -> OpResult<Vec<DirItem>> {
        let mut items: Vec<DirItem> = Vec::new();
        let dir = fuser::FileType::Directory;
        if offset < 1 {
            items.push((ino.0, 1, dir, ".".into()));
        }
        if offset < 2 {
            let parent = match self.nodes.parent(ino.0) {
                Some(p) => p,
                None => {
                    let soid = self.soid(ino)?;
                    self.client().getattr(&self.cred(req), soid).await?.parent
                }
            };
            items.push((self.nodes.ino(parent, false), 2, dir, "..".into()));
        }
        Ok(items)
    }

    /// The entries of a listing of `ino` after `offset` for one reply:
    /// from `fh`'s buffer, else a batch from the server (with attributes
    /// when `plus`). Attributes are kept only if no change elsewhere came
    /// since they were read, and from the buffer only while changes reach
    /// this mount ([`SextantFs::live`]), as for the last-seen attributes of
    /// [`crate::dirattrs`].
    async fn listing(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        plus: bool,
    ) -> OpResult<Vec<Listed>> {
        let soid = self.soid(ino)?;
        let after = if offset < 2 { 0 } else { offset };
        let mut entries = match self.dirs.cached(fh.0, after, self.epoch()) {
            Some(e) if self.live() || !plus => e,
            Some(e) => e.into_iter().map(|(e, _)| (e, None)).collect(),
            None => {
                let (c, sent) = (self.cred(req), self.epoch());
                let (batch, end) = if plus {
                    self.client()
                        .readdir_plus_page(&c, soid, after, BATCH)
                        .await?
                } else {
                    let (batch, end) = self.client().readdir_page(&c, soid, after, BATCH).await?;
                    (batch.into_iter().map(|e| (e, None)).collect(), end)
                };
                let mut part = self.dirs.fill(fh.0, after, batch, end, sent);
                if sent != self.epoch() {
                    part.iter_mut().for_each(|(_, a)| *a = None);
                }
                part
            }
        };
        if !plus {
            entries.iter_mut().for_each(|(_, a)| *a = None);
        }
        Ok(entries)
    }

    /// Changes made elsewhere reach this mount now (see
    /// [`SextantFs::watching`]).
    fn live(&self) -> bool {
        self.coherent && self.watching.load(Ordering::Acquire)
    }

    /// The client to call: this thread's lane inside [`SextantFs::run`].
    fn client(&self) -> Client {
        self.lanes.client()
    }

    /// The caller's uid, gid and supplementary groups (cached briefly per
    /// pid, see [`crate::groups`]; none when the kernel sends no pid).
    fn cred(&self, req: &Request) -> Credentials {
        let mut c = Credentials::user(req.uid(), req.gid());
        c.groups = self.groups.groups(req.pid(), req.uid(), req.gid());
        c
    }

    fn soid(&self, ino: INodeNo) -> OpResult<Soid> {
        self.nodes.soid(ino.0).ok_or(Fail(libc::ESTALE))
    }

    /// The kernel's view of `a` (node `ino`) and how long it may keep it:
    /// with changes held for the file ([`crate::held`]) laid over, not at
    /// all — the server sets the ctime (and a non-owner's "now") when it
    /// takes them, so the kernel asks again and is answered from here
    /// until then, from the server's reply after.
    fn file_attr(&self, a: &Attr, ino: u64) -> (FileAttr, Duration) {
        if a.ftype == FileType::Directory {
            self.nodes.set_parent(ino, a.parent);
        }
        let size = self.data.dirty_size(a.soid).unwrap_or(a.size);
        let held;
        let (a, ttl) = match self.held.over(a) {
            Some(h) => {
                held = h;
                (&held, Duration::ZERO)
            }
            None => (a, self.attr_ttl),
        };
        let attr = FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: system_time(a.atime),
            mtime: system_time(a.mtime),
            ctime: system_time(a.ctime),
            crtime: system_time(a.ctime),
            kind: kind(a.ftype),
            perm: a.perm as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: 4096,
            flags: 0,
        };
        (attr, ttl)
    }

    /// An entry reply for `a`, named `name` in `parent`: the kernel gains a
    /// reference to its node (and may cache the name, see [`crate::watch`]).
    /// `a` came in a reply to a request sent at cache epoch `sent` and
    /// reset generation `resets` ([`crate::absent`]). The name may be
    /// cached only if the node remembers it and no reset came since the
    /// request was sent: a reset that did may have missed it (the name
    /// recorded after the reset looked), and the change it stands for
    /// (one nothing reported) may be this name's removal.
    fn entry(&self, parent: INodeNo, name: &OsStr, a: &Attr, sent: u64, resets: u64) -> Entry {
        self.saw_attr(a, sent);
        let ino = self.nodes.ino(a.soid, true);
        let dir = a.ftype == FileType::Directory;
        if dir {
            // Moved elsewhere by another client, still held by the kernel
            // under its old name: that name goes first, or the kernel may
            // refuse the reply with ESTALE (see crate::unalias).
            let elsewhere = self.nodes.names_elsewhere(ino, parent.0);
            if !elsewhere.is_empty() {
                let done = self.unalias.invalidate(elsewhere);
                self.nodes.unaliased(ino, &done);
            }
        }
        // Named first, then the generation checked (a reset moves it
        // before it looks at the names: see crate::watch's `reset`).
        let remembered = self.nodes.named(ino, parent.0, name.as_bytes(), dir)
            && self.absent.generation() == resets;
        let (attr, attr_ttl) = self.file_attr(a, ino);
        Entry {
            attr,
            attr_ttl,
            entry_ttl: if remembered {
                self.entry_ttl
            } else {
                Duration::ZERO
            },
        }
    }

    /// The mount's own check of an open, on top of the kernel's (see
    /// [`crate::perms`]): may `c` open `a` with `flags`?
    fn check_open(&self, a: &Attr, c: &Credentials, flags: i32) -> OpResult<()> {
        Ok(perms::check(a, c, perms::open_mask(flags))?)
    }

    /// "No such name" for `name` in `parent`, read by a request sent at
    /// reset generation `sent` ([`crate::absent`]). The kernel may cache
    /// it (for as long as a name, node id 0) only while every change
    /// stream is open, so that a creation elsewhere is reported, and only
    /// once it is recorded for the next reset to drop (a creation made
    /// while a stream is down is reported by none).
    fn negative_entry(&self, parent: INodeNo, name: &OsStr, sent: u64) -> Entry {
        let cached = self.live()
            && self.absent.record(
                parent.0,
                name.as_bytes(),
                sent,
                self.entry_ttl,
                std::time::Instant::now(),
            );
        Entry {
            attr: crate::reply::name_only(0, fuser::FileType::RegularFile),
            attr_ttl: Duration::ZERO,
            entry_ttl: if cached {
                self.entry_ttl
            } else {
                Duration::ZERO
            },
        }
    }

    /// Opened with `flags`: handle `fh` is a writer's (see
    /// [`SextantFs::write_handles`]).
    fn opened(&self, fh: u64, soid: Soid, flags: i32, pid: u32) -> u64 {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            self.write_handles.lock().opened(fh, soid, pid);
        }
        fh
    }

    fn attr(&self, a: &Attr, ino: INodeNo) -> (FileAttr, Duration) {
        self.file_attr(a, ino.0)
    }

    /// [`SextantFs::attr`] of attributes computed with changes held
    /// ([`crate::held`]): never kept by the kernel, even if the changes
    /// were sent meanwhile.
    fn held_attr(&self, a: &Attr, ino: INodeNo) -> (FileAttr, Duration) {
        (self.file_attr(a, ino.0).0, Duration::ZERO)
    }

    /// Sends a pending size/mtime update to the server (as the mount: the
    /// writer's permission was checked at open). Put back if it fails, or
    /// if the operation is abandoned before it was sent (a flush or fsync
    /// interrupted while the server is down): a later flush or the release
    /// sends it then.
    async fn send_dirty(&self, d: Option<Dirty>) -> OpResult<()> {
        let Some(d) = d else { return Ok(()) };
        let set = SetAttr {
            size: Some(d.size),
            ..Default::default()
        };
        let unsent = Unsent {
            data: &self.data,
            dirty: Some(d),
        };
        match self.client().setattr(&root(), d.soid, &set).await {
            Ok(_) | Err(sextant_client::Error::Fs(FsError::NotFound)) => {
                unsent.sent();
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// [`SextantFs::send_dirty`] for file `ino` (`soid`), whose
    /// attributes from the reply are kept for the kernel's next GETATTR
    /// (the write made the kernel drop its own; see [`crate::dirattrs`]),
    /// with the attribute changes held for it ([`crate::held`]) in the
    /// same request, as their caller. Put back if the request fails or is
    /// abandoned (an interrupted flush), as [`SextantFs::send_dirty`]
    /// does; held changes the server refuses are dropped and the size is
    /// sent alone at once (the error is the flush's, as a write-back error
    /// is close's on NFS).
    async fn send_dirty_of(&self, ino: INodeNo, soid: Soid, d: Option<Dirty>) -> OpResult<()> {
        let held = Unheld {
            held: &self.held,
            soid,
            taken: self.held.take(soid),
        };
        if d.is_none() && held.taken.is_none() {
            return Ok(());
        }
        let (change, _) = self.dir_change(ino);
        let size = d.map(|d| d.size);
        let (cred, set) = match &held.taken {
            Some(h) => (
                h.cred.clone(),
                SetAttr {
                    size,
                    ..h.set.clone()
                },
            ),
            None => (
                root(),
                SetAttr {
                    size,
                    ..Default::default()
                },
            ),
        };
        let unsent = Unsent {
            data: &self.data,
            dirty: d,
        };
        // The size through the writer's handle (its permission was checked
        // at open); the held changes as their caller.
        let write_handle = held.taken.is_some();
        match self
            .client()
            .setattr_with(&cred, soid, &set, write_handle)
            .await
        {
            Ok(a) => {
                unsent.sent();
                held.sent();
                change.end(Some(a));
                Ok(())
            }
            Err(sextant_client::Error::Fs(FsError::NotFound)) => {
                unsent.sent();
                held.sent();
                Ok(())
            }
            Err(sextant_client::Error::Fs(e)) if held.taken.is_some() => {
                // Refused for good: dropped, and the size goes alone now,
                // so that other clients have it once the close returns
                // (if that fails too it is put back for the release).
                tracing::warn!(%soid, error = %e, "held attribute changes refused at close");
                held.sent();
                drop(unsent);
                let _ = self.send_dirty(self.data.take_dirty(soid)).await;
                Err(sextant_client::Error::Fs(e).into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Holds attribute change `set` of file `ino` (`soid`) by `c`, made by
    /// process `pid`, when [`crate::held`] may: that process has the file
    /// open for writing here and has not closed it since its last write
    /// ([`crate::writers`]), its attributes are known, a change of owner
    /// or group is made without a client key (whose uid and gid limits the
    /// mount does not know). Returns the attributes after it.
    fn try_hold(
        &self,
        ino: INodeNo,
        soid: Soid,
        c: &Credentials,
        set: &SetAttr,
        pid: u32,
    ) -> Option<Attr> {
        if !self.hold || !self.live() || set.size.is_some() {
            return None;
        }
        if (set.uid.is_some() || set.gid.is_some()) && self.client().has_key() {
            return None;
        }
        if !self.writing(soid, pid) {
            return None;
        }
        let known = self.dir_attrs.last_seen(ino.0, self.epoch());
        self.held.hold(soid, c, set, known, nanos_now())
    }

    /// Is `soid` open for writing through this mount by process `pid`,
    /// not closed since its last write?
    fn writing(&self, soid: Soid, pid: u32) -> bool {
        self.write_handles.lock().writing(soid, pid)
    }

    /// `set` (no size) as `c`, with the size of the data written since
    /// the last update, `d`, in the same request: its permission was the
    /// writer's, checked at its open (as for `ftruncate`), so the size
    /// goes with `write_handle`. The server applies the size first, so
    /// explicit times in `set` win, as when sent one after the other. If
    /// the request fails the size is sent later (flush, release).
    async fn setattr_folded(&self, c: &Credentials, d: Dirty, set: SetAttr) -> OpResult<Attr> {
        let folded = SetAttr {
            size: Some(d.size),
            ..set
        };
        // Put back if the request fails or is abandoned (interrupted).
        let unsent = Unsent {
            data: &self.data,
            dirty: Some(d),
        };
        match self.client().setattr_with(c, d.soid, &folded, true).await {
            Ok(a) => {
                unsent.sent();
                Ok(a)
            }
            Err(e) => {
                if e.fs() == Some(FsError::NotFound) {
                    unsent.sent();
                }
                Err(e.into())
            }
        }
    }

    /// A change of an xattr starts: the cache epoch moves now and when the
    /// change ends (see [`crate::nocaps`]).
    fn xattr_change(&self) -> EpochBump<'_> {
        EpochBump::new(&self.own_epoch)
    }

    /// The server sent `a` in a reply to a request sent at cache epoch
    /// `sent`: whether it has no xattrs at all is known (see
    /// [`crate::nocaps`]).
    fn saw_attr(&self, a: &Attr, sent: u64) {
        if self.coherent && a.no_xattrs {
            self.no_xattrs.learned(a.soid, sent, self.epoch());
        }
    }

    /// After the name `victim` was removed or replaced: when that was its
    /// last link, its node id is retired and its data dropped.
    fn unlinked(&self, victim: &Attr) -> OpResult<()> {
        let last = victim.ftype == FileType::Directory || victim.nlink <= 1;
        // Its link count changed (a file's kept attributes too).
        if let Some(ino) = self.nodes.find(victim.soid) {
            self.dir_attrs.forget(ino);
        }
        self.held.links(victim.soid, victim.nlink);
        if last {
            self.held.forget(victim.soid);
            self.nodes.detach(victim.soid);
            if victim.ftype == FileType::Regular {
                self.data.remove(victim.soid)?;
            }
        }
        Ok(())
    }

    /// unlink, or rmdir when `dir`, in one round trip: the reply says what
    /// was removed (and, when asked, the directory's attributes after it).
    fn remove(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty, dir: bool) {
        self.run(req, reply, async {
            let (c, p) = (self.cred(req), self.soid(parent)?);
            let (change, want_dir) = self.dir_change(parent);
            let client = self.client();
            let gone = if dir {
                client.rmdir_with_dir(&c, p, name(n), want_dir).await?
            } else {
                client.unlink_with_dir(&c, p, name(n), want_dir).await?
            };
            change.end(gone.dir);
            if dir {
                // The kernel dropped the dentry (see crate::nodes).
                self.nodes.removed(parent.0, name(n));
            }
            self.unlinked(&gone.value)
        })
    }

    fn statfs_data(&self) -> Statfs {
        let mut s = Statfs {
            bsize: 4096,
            namelen: sextant_types::NAME_MAX as u32,
            ..Default::default()
        };
        let path = std::ffi::CString::new(self.data.dir().as_os_str().as_bytes()).ok();
        // SAFETY: statvfs writes into the zeroed struct we own; the path is
        // a valid NUL-terminated string.
        unsafe {
            let mut v: libc::statvfs = std::mem::zeroed();
            if let Some(p) = path {
                if libc::statvfs(p.as_ptr(), &mut v) == 0 {
                    let scale = v.f_frsize.max(1) / s.bsize as u64;
                    let scale = scale.max(1);
                    s.blocks = v.f_blocks * scale;
                    s.bfree = v.f_bfree * scale;
                    s.bavail = v.f_bavail * scale;
                }
            }
        }
        s
    }
}

impl Filesystem for SextantFs {
    /// READDIRPLUS on a coherent mount only: the attributes it hands the
    /// kernel are cached as a lookup's are, which the watcher keeps exact.
    /// `Auto` lets the kernel choose per listing (its first batch, and the
    /// batches after lookups in the directory); `Always`, every batch.
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let flags = match self.readdirplus {
            _ if !self.coherent => InitFlags::empty(),
            ReaddirPlus::Off => InitFlags::empty(),
            ReaddirPlus::Auto => InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            ReaddirPlus::Always => InitFlags::FUSE_DO_READDIRPLUS,
        };
        // A kernel without it simply never sends READDIRPLUS.
        let _ = config.add_capabilities(flags);
        Ok(())
    }

    /// No reply to the interrupt itself: the request it names is answered
    /// EINTR if it may be abandoned (see [`SextantFs::run`]).
    fn interrupt(&self, _req: &Request, unique: RequestId) -> Result<(), Errno> {
        self.interrupts.interrupt(unique.0);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        self.run_read(req, reply, async {
            let resets = self.absent.generation();
            // In a directory made here: only the names put there exist.
            if self.live() && self.fresh.absent(parent.0, name(n), self.elsewhere_epoch()) {
                return Ok(self.negative_entry(parent, n, resets));
            }
            let sent = self.epoch();
            let found = self
                .client()
                .lookup(&self.cred(req), self.soid(parent)?, name(n))
                .await;
            match found {
                // A name that does not exist may be cached too (a negative
                // entry) when a creation elsewhere will invalidate it.
                Err(e) if e.fs() == Some(FsError::NotFound) && self.coherent => {
                    Ok(self.negative_entry(parent, n, resets))
                }
                found => Ok(self.entry(parent, n, &found?, sent, resets)),
            }
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.nodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.run_read(req, reply, async {
            // A directory or file this mount just changed: the reply told
            // us (see crate::dirattrs).
            let soid = self.soid(ino)?;
            // Changes held for it: what the server will have (crate::held).
            if let Some(a) = self.held.attr(soid) {
                return Ok(self.held_attr(&a, ino));
            }
            if let Some(a) = self.dir_attrs.take(ino.0, self.epoch()) {
                if a.soid == soid {
                    return Ok(self.attr(&a, ino));
                }
            }
            // The last seen, if nothing changed since: what the server
            // would answer (a file's data is this mount's; see
            // crate::dirattrs).
            if self.live() {
                if let Some(a) = self.dir_attrs.last_seen(ino.0, self.epoch()) {
                    if a.soid == soid {
                        return Ok(self.attr(&a, ino));
                    }
                }
            }
            let sent = self.epoch();
            let a = match self.client().getattr(&self.cred(req), soid).await {
                Err(e) if e.fs() == Some(FsError::NotFound) => self.data.orphan(soid).ok_or(e)?,
                r => r?,
            };
            if self.coherent && a.ftype == FileType::Regular {
                self.dir_attrs.saw(ino.0, a.clone(), sent, self.epoch());
            }
            self.saw_attr(&a, sent);
            Ok(self.attr(&a, ino))
        })
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.run(req, reply, async {
            let soid = self.soid(ino)?;
            let set = SetAttr {
                perm: mode.map(|m| m & 0o7777),
                uid,
                gid,
                size,
                atime: atime.map(time_set).transpose()?,
                mtime: mtime.map(time_set).transpose()?,
            };
            let c = self.cred(req);
            // A file open for writing here: sent with its size at close
            // (see crate::held).
            if let Some(a) = self.try_hold(ino, soid, &c, &set, req.pid()) {
                return Ok(self.held_attr(&a, ino));
            }
            // What is held goes first, with the size written so far.
            if self.held.attr(soid).is_some() {
                self.send_dirty_of(ino, soid, self.data.take_dirty(soid))
                    .await?;
            }
            // Any kept attributes of it are old now; the reply's are kept
            // for the kernel's next GETATTR (see crate::dirattrs).
            let (change, _) = self.dir_change(ino);
            // ftruncate: permitted at the open of a writable handle.
            let write_handle =
                size.is_some() && fh.is_some_and(|h| self.write_handles.lock().contains(h.0));
            // Written data first, so explicit times given now win: in
            // this same request when it changes no size itself (one round
            // trip and one journal sync instead of two), else before it.
            let dirty = self.data.take_dirty(soid);
            let fold = match dirty {
                Some(d) if size.is_none() && !set.is_empty() => Some(d),
                d => {
                    self.send_dirty(d).await?;
                    None
                }
            };
            // A file not open here: its size before the truncate tells
            // which bytes of the object are its own (data::Data::truncate).
            let before = match size {
                Some(_) if !self.data.is_open(soid) => {
                    Some(self.client().getattr(&c, soid).await?.size)
                }
                _ => None,
            };
            let a = if let Some(d) = fold {
                self.setattr_folded(&c, d, set).await?
            } else if set.is_empty() {
                self.client().getattr(&c, soid).await?
            } else {
                self.client()
                    .setattr_with(&c, soid, &set, write_handle)
                    .await?
            };
            if let Some(size) = size {
                self.data.truncate(soid, before, size)?;
            }
            change.end(Some(a.clone()));
            Ok(self.attr(&a, ino))
        })
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.run_read(req, reply, async {
            let t = self
                .client()
                .readlink(&self.cred(req), self.soid(ino)?)
                .await?;
            Ok(t.into_vec())
        })
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.run(req, reply, async {
            // Any kept attributes of the directories it changes are old now.
            let _changing0 = self.dir_change(parent).0;
            let ftype = match mode & libc::S_IFMT {
                0 => FileType::Regular,
                m => FileType::from_mode(m).ok_or(Fail(libc::EINVAL))?,
            };
            let perm = mode & !umask & 0o7777;
            let p = self.soid(parent)?;
            self.fresh.naming(parent.0, name(n));
            let sent = self.epoch();
            let resets = self.absent.generation();
            let a = self
                .client()
                .mknod(&self.cred(req), p, name(n), ftype, perm, rdev)
                .await?;
            self.nodes.made(a.soid);
            self.fresh.put_file(parent.0, name(n), a.soid);
            Ok(self.entry(parent, n, &a, sent, resets))
        })
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.run(req, reply, async {
            let perm = mode & !umask & 0o7777;
            let p = self.soid(parent)?;
            let (change, want_dir) = self.dir_change(parent);
            self.fresh.naming(parent.0, name(n));
            let (sent, sent_all) = (self.elsewhere_epoch(), self.epoch());
            let resets = self.absent.generation();
            let made = self
                .client()
                .mkdir_with_dir(&self.cred(req), p, name(n), perm, want_dir)
                .await?;
            change.end(made.dir);
            self.nodes.made(made.value.soid);
            let e = self.entry(parent, n, &made.value, sent_all, resets);
            if self.coherent {
                self.fresh.made(e.attr.ino.0, sent, self.elsewhere_epoch());
            }
            Ok(e)
        })
    }

    fn unlink(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, n, reply, false);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, n, reply, true);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.run(req, reply, async {
            // Any kept attributes of the directories it changes are old now.
            let _changing0 = self.dir_change(parent).0;
            let p = self.soid(parent)?;
            self.fresh.naming(parent.0, name(link_name));
            let t = target.as_os_str().as_bytes();
            let sent = self.epoch();
            let resets = self.absent.generation();
            let a = self
                .client()
                .symlink(&self.cred(req), p, name(link_name), t)
                .await?;
            self.nodes.made(a.soid);
            self.fresh.put_file(parent.0, name(link_name), a.soid);
            Ok(self.entry(parent, link_name, &a, sent, resets))
        })
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRenameFlags,
        reply: ReplyEmpty,
    ) {
        self.run(req, reply, async {
            if flags.contains(FuseRenameFlags::RENAME_WHITEOUT) {
                return Err(Fail(libc::EINVAL));
            }
            let flags = RenameFlags {
                noreplace: flags.contains(FuseRenameFlags::RENAME_NOREPLACE),
                exchange: flags.contains(FuseRenameFlags::RENAME_EXCHANGE),
            };
            let c = self.cred(req);
            let (p, np) = (self.soid(parent)?, self.soid(newparent)?);
            // A rename of a directory also changes it (its `..`), whose
            // node id we may not know: everything kept is old, before and
            // after. A non-directory this mount put at the name (rsync's
            // temporary file; see crate::fresh) changes only the two
            // directories and itself: only what is kept of them is.
            let file = (self.live() && !flags.exchange)
                .then(|| {
                    self.fresh
                        .file_at(parent.0, name(n), self.elsewhere_epoch())
                })
                .flatten();
            let _bump = file.is_none().then(|| EpochBump::new(&self.own_epoch));
            let no_change = || DirChange {
                fs: self,
                change: None,
            };
            let (dir_change, want_dir) = match file {
                Some(_) => self.dir_change(parent),
                None => (no_change(), false),
            };
            let want_dir = want_dir && parent == newparent;
            let _new_dir_change = match file {
                Some(_) if parent != newparent => self.dir_change(newparent).0,
                _ => no_change(),
            };
            let _file_change = match file.and_then(|s| self.nodes.find(s)) {
                Some(ino) => self.dir_change(INodeNo(ino)).0,
                None => no_change(),
            };
            // The names it puts: recorded before it is sent (see
            // crate::fresh; an exchange puts the old name back too).
            self.fresh.naming(newparent.0, name(newname));
            if flags.exchange {
                self.fresh.naming(parent.0, name(n));
            }
            // The reply names the inode whose name was replaced (as it
            // was): no lookup of the target first.
            let names = (p, name(n), np, name(newname));
            let renamed = self
                .client()
                .rename_replacing_with_dir(&c, names, flags, want_dir)
                .await?;
            dir_change.end(renamed.dir);
            // The kernel moves the dentries (a directory's: see
            // crate::nodes).
            self.nodes.renamed(
                (parent.0, name(n)),
                (newparent.0, name(newname)),
                flags.exchange,
            );
            if let Some(soid) = file {
                self.fresh.naming(parent.0, name(n));
                self.fresh.put_file(newparent.0, name(newname), soid);
            }
            match renamed.value {
                Some(v) => self.unlinked(&v),
                None => Ok(()),
            }
        })
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.run(req, reply, async {
            // Any kept attributes of the directories it changes are old now.
            let _changing0 = self.dir_change(newparent).0;
            // The kernel checked protected_hardlinks; the server checks the
            // rest.
            let (s, np) = (self.soid(ino)?, self.soid(newparent)?);
            self.fresh.naming(newparent.0, name(newname));
            // The file's link count changes: what is kept of it is old.
            let (file_change, _) = self.dir_change(ino);
            let sent = self.epoch();
            let resets = self.absent.generation();
            let a = self
                .client()
                .link(&self.cred(req), s, np, name(newname))
                .await?;
            self.held.links(a.soid, a.nlink);
            self.fresh.put_file(newparent.0, name(newname), a.soid);
            file_change.end(Some(a.clone()));
            Ok(self.entry(newparent, newname, &a, sent, resets))
        })
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.run_read(req, reply, async {
            let c = self.cred(req);
            let soid = self.soid(ino)?;
            // The last attributes seen of it, if nothing changed since
            // (see crate::dirattrs); else the server's.
            let a = match self
                .live()
                .then(|| self.dir_attrs.last_seen(ino.0, self.epoch()))
            {
                Some(Some(a)) if a.soid == soid => a,
                _ => {
                    let sent = self.epoch();
                    let a = self.client().getattr(&c, soid).await?;
                    if self.coherent {
                        self.dir_attrs.saw(ino.0, a.clone(), sent, self.epoch());
                    }
                    a
                }
            };
            // Changes held for it count (see crate::held).
            let a = self.held.over(&a).unwrap_or(a);
            self.check_open(&a, &c, flags.0)?;
            Ok((
                self.opened(self.data.open(&a)?, a.soid, flags.0, req.pid()),
                FopenFlags::empty(),
            ))
        })
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.run_local(reply, async { Ok(self.data.read(fh.0, offset, size)?) })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.run_local(reply, async {
            let n = self.data.write(fh.0, offset, data)?;
            self.write_handles.lock().wrote(fh.0);
            if !self.held.is_empty() {
                if let Ok(soid) = self.data.soid_of(fh.0) {
                    self.held.written(soid);
                }
            }
            Ok(n)
        })
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.run(req, reply, async {
            // Any close sends what is held (close-to-open: another thread
            // of the writer may close its descriptor while a copy stays
            // open). The writer's own close also ends the holding: its
            // changes after it are sent at once (crate::writers).
            self.write_handles.lock().flushed(fh.0, req.pid());
            let soid = self.data.soid_of(fh.0)?;
            self.send_dirty_of(ino, soid, self.data.take_dirty(soid))
                .await
        })
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.write_handles.lock().released(fh.0);
        // Not abandoned: the handle is gone once `Data::release` ran, so
        // an update not sent would be lost.
        self.run_whole(reply, async {
            let soid = self.data.soid_of(fh.0);
            let dirty = self.data.release(fh.0)?;
            self.send_dirty_of(ino, soid?, dirty).await
        })
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.run_change_then_read(
            req,
            reply,
            async {
                self.data.sync(fh.0)?;
                let soid = self.data.soid_of(fh.0)?;
                self.send_dirty_of(ino, soid, self.data.take_dirty(soid))
                    .await
            },
            // The server may have acknowledged the file's creation (and
            // the size just sent) before syncing its journal (its
            // `--journal-sync background`): wait for that sync.
            || async {
                let soid = self.data.soid_of(fh.0)?;
                Ok(self.client().sync_journal(&self.cred(req), soid).await?)
            },
        )
    }

    /// A directory's entries (a create, unlink or rename in it) survive a
    /// power loss once this returns: the journal of the server holding
    /// its table synced through everything it acknowledged.
    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Changes nothing: a caller killed while its server is stopped
        // goes at once.
        self.run_read(req, reply, async {
            let soid = self.soid(ino)?;
            Ok(self.client().sync_journal(&self.cred(req), soid).await?)
        })
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.run_local(reply, async {
            // Permission to read it: the kernel checked; the server checks
            // again on every batch.
            let fh = self.dirs.open();
            // The kernel keeps the listing in the directory's page cache
            // across opens; a change to the directory (here: the kernel
            // itself; elsewhere: the watcher's invalidation of the
            // directory's inode) drops it.
            let flags = if self.coherent {
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
            } else {
                FopenFlags::empty()
            };
            Ok((fh, flags))
        })
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.release(fh.0);
        reply.send(Ok(()));
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.run_read(req, reply, async {
            let mut items = self.dots(req, ino, offset).await?;
            let entries = self.listing(req, ino, fh, offset, false).await?;
            items.extend(entries.into_iter().map(|(e, _)| {
                (
                    self.nodes.ino(e.soid, false),
                    e.cookie,
                    kind(e.ftype),
                    OsString::from_vec(e.name.into_vec()),
                )
            }));
            Ok(items)
        })
    }

    /// READDIR with each entry's attributes: an entry the server sent them
    /// for is given to the kernel as a lookup would give it (a reference
    /// taken, the same timeouts, see [`SextantFs::entry`]); the others
    /// (no search permission, the inode in another table, attributes read
    /// before a change elsewhere) and `.`/`..` go as names only, which the
    /// kernel looks up when it needs them.
    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.run_read(req, reply, async {
            let dots = self.dots(req, ino, offset).await?;
            let mut items: Vec<PlusItem> = dots
                .into_iter()
                .map(|item| PlusItem { item, entry: None })
                .collect();
            // Attributes listed are as of this epoch or a later one.
            let sent = self.epoch();
            let resets = self.absent.generation();
            let mut entries = self.listing(req, ino, fh, offset, true).await?;
            entries.truncate(PLUS_REPLY_MAX);
            items.extend(entries.into_iter().map(|(e, attr)| {
                let name = OsString::from_vec(e.name.into_vec());
                let (node, entry) = match attr {
                    Some(a) if a.soid == e.soid && a.ftype == e.ftype => {
                        let entry = self.entry(ino, &name, &a, sent, resets);
                        let node = entry.attr.ino.0;
                        (node, Some((entry, Reference::taken(&self.nodes, node))))
                    }
                    _ => (self.nodes.ino(e.soid, false), None),
                };
                PlusItem {
                    item: (node, e.cookie, kind(e.ftype), name),
                    entry,
                }
            }));
            Ok(items)
        })
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.run_read(req, reply, async {
            let s = self.client().statfs(&self.cred(req)).await?;
            let mut out = self.statfs_data();
            // Inodes are not a scarce resource: report plenty free.
            out.ffree = u64::MAX / 2 - s.inodes;
            out.files = u64::MAX / 2;
            Ok(out)
        })
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        self.run(req, reply, async {
            // A namespace no server keeps (see crate::nocaps).
            if crate::nocaps::unsupported(name(n)) {
                return Err(Fail(libc::EOPNOTSUPP));
            }
            // Any kept attributes of the directories it changes are old now.
            let _changing0 = self.dir_change(ino).0;
            let _xattrs = self.xattr_change();
            let flags = match flags {
                0 if position == 0 => XattrFlags::Any,
                libc::XATTR_CREATE => XattrFlags::Create,
                libc::XATTR_REPLACE => XattrFlags::Replace,
                _ => return Err(Fail(libc::EINVAL)),
            };
            let s = self.soid(ino)?;
            Ok(self
                .client()
                .setxattr(&self.cred(req), s, name(n), value, flags)
                .await?)
        })
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        self.run_read(req, reply, async {
            let s = self.soid(ino)?;
            if crate::nocaps::unsupported(name(n)) {
                return Err(Fail(libc::EOPNOTSUPP));
            }
            // The kernel's check before each write, ls -l's read of
            // security.selinux (see crate::nocaps).
            let sent = self.epoch();
            if self.coherent && self.no_xattrs.has_none(s, name(n), sent) {
                return Err(Fail(libc::ENODATA));
            }
            let caps = self.coherent && name(n) == crate::nocaps::NAME;
            let v = match self.client().getxattr(&self.cred(req), s, name(n)).await {
                Err(e) if caps && e.fs() == Some(FsError::NoData) => {
                    self.no_xattrs.learned_no_caps(s, sent, self.epoch());
                    return Err(e.into());
                }
                v => v?,
            };
            Xattr::fit(v.into_vec(), size)
        })
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.run_read(req, reply, async {
            let s = self.soid(ino)?;
            // Known to have none (see crate::nocaps).
            if self.coherent && self.no_xattrs.has_no_xattrs(s, self.epoch()) {
                return Xattr::fit(Vec::new(), size);
            }
            let names = self.client().listxattr(&self.cred(req), s).await?;
            let mut list = Vec::new();
            for n in names.iter() {
                list.extend_from_slice(n);
                list.push(0);
            }
            Xattr::fit(list, size)
        })
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        self.run(req, reply, async {
            // A namespace no server keeps (see crate::nocaps).
            if crate::nocaps::unsupported(name(n)) {
                return Err(Fail(libc::EOPNOTSUPP));
            }
            // Any kept attributes of the directories it changes are old now.
            let _changing0 = self.dir_change(ino).0;
            let _xattrs = self.xattr_change();
            let s = self.soid(ino)?;
            Ok(self
                .client()
                .removexattr(&self.cred(req), s, name(n))
                .await?)
        })
    }

    /// No ioctl is supported: ENOTTY, which is what a program's `isatty`
    /// probe (TCGETS) expects of a file that is not a terminal, at once
    /// and without a word in the log (fuser's default logs a warning for
    /// each).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.send(Err(Fail(libc::ENOTTY)));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.run_read(req, reply, async {
            let s = self.soid(ino)?;
            Ok(self
                .client()
                .access(&self.cred(req), s, mask.bits() as u32)
                .await?)
        })
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.run(req, reply, async {
            let perm = mode & !umask & 0o7777;
            let c = self.cred(req);
            // A file made by this call is the caller's to open in any mode.
            // One that exists (made elsewhere since the kernel's lookup)
            // is opened only as its mode allows, which the kernel does not
            // check for a FUSE_CREATE: the create is exclusive and an
            // existing file is opened like any other.
            let checked = !c.is_root();
            let exclusive = checked || flags & libc::O_EXCL != 0;
            let p = self.soid(parent)?;
            let (change, want_dir) = self.dir_change(parent);
            self.fresh.naming(parent.0, name(n));
            let sent = self.epoch();
            let resets = self.absent.generation();
            let made = self
                .client()
                .create_with_dir(&c, p, name(n), perm, exclusive, want_dir)
                .await;
            let mut made_here = false;
            let a = match made {
                Ok(made) => {
                    change.end(made.dir);
                    self.nodes.made(made.value.soid);
                    self.fresh.put_file(parent.0, name(n), made.value.soid);
                    // New: no xattrs (see crate::nocaps).
                    if self.coherent {
                        self.no_xattrs.learned(made.value.soid, sent, self.epoch());
                    }
                    made_here = true;
                    made.value
                }
                Err(e)
                    if checked && flags & libc::O_EXCL == 0 && e.fs() == Some(FsError::Exists) =>
                {
                    drop(change);
                    let a = self.client().lookup(&c, p, name(n)).await?;
                    match a.ftype {
                        FileType::Regular => {}
                        FileType::Directory => return Err(Fail(libc::EISDIR)),
                        // What the kernel would follow or open specially
                        // is not ours to open here.
                        _ => return Err(Fail(libc::EEXIST)),
                    }
                    self.check_open(&a, &c, flags)?;
                    a
                }
                Err(e) => return Err(e.into()),
            };
            let fh = self.opened(self.data.open(&a)?, a.soid, flags, req.pid());
            let entry = self.entry(parent, n, &a, sent, resets);
            if made_here && self.coherent {
                // For the GETATTR after its first write (crate::dirattrs).
                self.dir_attrs
                    .keep_made(entry.attr.ino.0, a, sent, self.epoch());
            }
            Ok((entry, fh))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        for n in [0i64, 1, 1_500_000_000_123_456_789, -1, -1_000_000_001] {
            assert_eq!(nanos(system_time(Nanos(n))).unwrap(), Nanos(n), "{n}");
        }
    }
}
