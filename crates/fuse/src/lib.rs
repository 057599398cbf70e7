//! Sextant's FUSE mount.
//!
//! A thin adapter on `fuser` over the client library: every metadata
//! operation is a client call made with the calling process's credentials,
//! and every result becomes a reply in one place (`reply::Respond`).
//!
//! Permissions are checked by the kernel (`default_permissions`, from the
//! attributes it caches, which the mount keeps exact), by the server on
//! every call with the caller's uid, gid and groups, and by the mount once
//! more on each open of a file (its data is local): see [`perms`]. File
//! data lives in a local object directory, one file per SOID (`data`).
//!
//! - [`lane`]: a server connection per FUSE thread, driven by that thread
//!   (a request is answered without hopping threads).
//! - [`groups`]: the caller's supplementary groups, cached 1 s per pid.
//! - [`dirs`]: open directory handles and the entries read ahead for them.
//! - [`nodes`]: FUSE node ids ↔ 128-bit SOIDs, with kernel reference counts.
//! - [`perms`]: who checks permissions, and the mount's own checks.
//! - [`interrupts`]: the requests in flight, for the kernel's interrupts
//!   (FUSE_INTERRUPT, delivered by the vendored fuser): an interrupted
//!   request that never changed the server is abandoned at once (EINTR).
//! - [`killed`]: the same for a killed program when no FUSE thread is free
//!   to read its interrupt.
//! - `watch`: drops the kernel's cached names and attributes when another
//!   client changes them (so long cache timeouts stay exact).
//! - [`dirattrs`]: a directory's (or file's) attributes from the replies
//!   to this mount's own changes, for the GETATTR the kernel sends next.
//! - [`absent`]: the names answered "no such name" with a timeout, for
//!   the watcher's resets.
//! - [`fresh`]: directories this mount made and the names it put there,
//!   for the failing LOOKUP before each create.
//! - [`nocaps`]: files known to have no xattrs (or no
//!   `security.capability`), for the kernel's check before each write and
//!   `ls -l`'s read of `security.selinux`.
//! - [`data`]: object files, open handles, size updates sent to the server.
//! - [`held`]: attribute changes of files open for writing here, sent
//!   with their size at close (tar's chown, chmod and utimes: one request).
//! - [`writers`]: the handles open for writing and who opened each,
//!   indexed by file.
//! - [`unalias`]: a directory moved elsewhere has its old name dropped
//!   from the kernel before it is given under its new one (else `ESTALE`).
//! - `reply`: results → replies, errors → errno.
//! - `fs`: the `fuser::Filesystem` implementation.

pub mod absent;
pub mod data;
pub mod dirattrs;
pub mod dirs;
pub mod fresh;
mod fs;
pub mod groups;
pub mod held;
pub mod interrupts;
pub mod killed;
pub mod lane;
pub mod nocaps;
pub mod nodes;
pub mod perms;
mod reply;
pub mod unalias;
mod watch;
pub mod writers;

use fuser::{Config, MountOption, SessionACL};
use sextant_client::Client;
use sextant_types::Soid;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountConfig {
    pub mountpoint: PathBuf,
    /// Where file data lives (one object file per SOID).
    pub data_dir: PathBuf,
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
    /// Let other users (not only the mounting one) use the mount. Also
    /// turns on `auto_unmount` (fusermount3 unmounts if the process dies).
    pub allow_other: bool,
    /// Threads reading requests from the kernel.
    pub threads: usize,
    /// Shown as the mount's source (e.g. `sextant:127.0.0.1:7411`).
    pub fsname: String,
    /// Watch the server for other clients' changes and drop them from the
    /// kernel's caches (see `watch`). The client given to [`mount`] should
    /// have an origin (`Options::origin`), or the mount also drops what
    /// its own requests changed.
    pub watch: bool,
    /// The directory shown at the mount point: `/`, or a subtree
    /// (`sextant mount --subdir`; a path-limited client key can mount
    /// only its subtree or below).
    pub root: Soid,
    /// READDIRPLUS (listings that carry each entry's attributes, so `ls
    /// -l`, `du` and `find` need no lookup per entry); only on a coherent
    /// mount (watching, nonzero timeouts).
    pub readdirplus: ReaddirPlus,
    /// The server's frame door (`sextant_proto::frames`), when the server
    /// is on this machine: each FUSE thread's lane sends its requests
    /// there, on the thread itself, if it answers (else over a Session
    /// stream of its own). `None`: Session streams.
    pub frame_door: Option<PathBuf>,
}

/// When the kernel asks for READDIRPLUS instead of READDIR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReaddirPlus {
    /// Never.
    Off,
    /// The kernel chooses (FUSE_READDIRPLUS_AUTO): a listing's first
    /// batch, and later batches of a directory whose entries were looked
    /// up since.
    Auto,
    /// Every batch.
    #[default]
    Always,
}

impl MountConfig {
    pub fn new(mountpoint: &Path, data_dir: &Path) -> MountConfig {
        MountConfig {
            mountpoint: mountpoint.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            attr_ttl: Duration::from_secs(1),
            entry_ttl: Duration::from_secs(1),
            allow_other: false,
            threads: 4,
            fsname: "sextant".into(),
            watch: true,
            root: Soid::ROOT,
            readdirplus: ReaddirPlus::default(),
            frame_door: None,
        }
    }
}

/// Mounts, calls `ready` once the mount is in place, and serves requests
/// until the file system is unmounted (`fusermount3 -u`, or SIGINT/SIGTERM
/// to this process). Each FUSE thread makes its own connection from
/// `client` (see [`lane`]); `rt` (a multi-thread runtime, which `client`
/// runs on) handles signals and serves threads that could not connect.
pub fn mount(
    client: Client,
    rt: tokio::runtime::Handle,
    cfg: &MountConfig,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let nodes = Arc::new(nodes::Nodes::with_root(cfg.root));
    let epoch = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Set by the watcher while every change stream it follows is open.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let absent = Arc::new(absent::Absent::default());
    let watcher_client = client.clone();
    let durability_of = client.clone();
    let data = Arc::new(
        data::Data::open_dir(&cfg.data_dir)?
            .with_durability(Arc::new(move || {
                let b = durability_of.backup_stats();
                data::Durability {
                    incarnation: b.incarnation,
                    written_back: b.written_back,
                    newest_seen: b.newest_seen,
                }
            }))
            // SEXTANT_INLINE_OBJECT_REMOVAL=1: object files unlinked inside
            // the request, not by the remover (for comparisons; see
            // crate::data).
            .with_inline_removal(
                std::env::var("SEXTANT_INLINE_OBJECT_REMOVAL").is_ok_and(|v| v == "1"),
            ),
    );
    let reaper = start_reaper(Arc::clone(&data))?;
    let reaped = Arc::clone(&data);
    let stopper = client.clone();
    let unalias = unalias::Unalias::default();
    let fs = fs::SextantFs {
        lanes: lane::Lanes::new(client, rt.clone(), cfg.frame_door.clone()),
        groups: groups::GroupCache::new(groups::DEFAULT_TTL),
        dirs: dirs::DirHandles::default(),
        nodes: Arc::clone(&nodes),
        data: Arc::clone(&data),
        attr_ttl: cfg.attr_ttl,
        entry_ttl: cfg.entry_ttl,
        coherent: cfg.watch && !cfg.attr_ttl.is_zero() && !cfg.entry_ttl.is_zero(),
        dir_attrs: dirattrs::DirAttrs::default(),
        cache_epoch: Arc::clone(&epoch),
        own_epoch: Default::default(),
        watching: Arc::clone(&watching),
        write_handles: Default::default(),
        interrupts: Default::default(),
        no_xattrs: Default::default(),
        fresh: Default::default(),
        absent: Arc::clone(&absent),
        held: Default::default(),
        // SEXTANT_HOLD_ATTRS=0: every attribute change is sent at once
        // (for comparisons; see crate::held).
        hold: std::env::var("SEXTANT_HOLD_ATTRS").map_or(true, |v| v != "0"),
        readdirplus: cfg.readdirplus,
        unalias: unalias.clone(),
    };
    // The kernel checks permissions: it alone sees every open (of FIFOs,
    // sockets and devices too) and every walk through a cached name.
    let mut options = vec![
        MountOption::FSName(cfg.fsname.clone()),
        MountOption::Subtype("sextant".into()),
        MountOption::DefaultPermissions,
    ];
    let mut config = Config::default();
    if cfg.allow_other {
        config.acl = SessionACL::All;
        options.push(MountOption::AutoUnmount);
    }
    config.mount_options = options;
    config.n_threads = Some(cfg.threads.max(1));
    let mut session = fuser::Session::new(fs, &cfg.mountpoint, &config)?;
    unalias.set(session.notifier());
    let (stop_watch, stopped) = tokio::sync::watch::channel(false);
    // For tests: SEXTANT_WATCH_DELAY_MS delays the watcher's first stream
    // (the window before it, when nothing reports changes elsewhere).
    let start_delay = std::env::var("SEXTANT_WATCH_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    let caching = !(cfg.attr_ttl.is_zero() && cfg.entry_ttl.is_zero());
    let watcher = if cfg.watch && caching {
        let (notifier, rt) = (session.notifier(), rt.clone());
        Some(
            std::thread::Builder::new()
                .name("sextant-watch".into())
                .spawn(move || {
                    watch::run(
                        watcher_client,
                        rt,
                        watch::Caches {
                            nodes,
                            absent,
                            epoch,
                        },
                        data,
                        notifier,
                        watching,
                        start_delay,
                        stopped,
                    )
                })?,
        )
    } else {
        None
    };
    let mut unmounter = session.unmount_callable();
    let mountpoint = cfg.mountpoint.clone();
    rt.spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        // Requests in flight to a server that is gone fail now instead of
        // retrying for the client's whole budget (which would keep the
        // FUSE threads, and so this process, busy after the unmount).
        stopper.stop_retrying();
        let done = tokio::task::spawn_blocking(move || {
            if unmounter.unmount().is_err() {
                // Busy: detach it (it goes away when the last user leaves).
                lazy_unmount(&mountpoint);
            }
        });
        let _ = done.await;
    });
    ready();
    let served = session.run();
    let _ = stop_watch.send(true);
    // The watcher runs on `rt`, which our caller may shut down once this
    // returns: a watcher still reopening its stream then panicked ("A
    // Tokio 1.x context was found, but it is being shutdown"). It returns
    // at its next await once told to stop.
    if let Some(w) = watcher {
        if !joined_within(w, WATCHER_STOP_WAIT) {
            tracing::warn!("the change watcher did not stop in time");
        }
    }
    drop(reaper);
    if let Err(e) = reaped.reap() {
        tracing::warn!(error = %e, "removing the objects of removed files");
    }
    // The object files the remover still holds go before the mount ends.
    reaped.drain();
    served
}

/// Every 250 ms, removes the objects whose files' removal the server has
/// written back since ([`data::Data::reap`]). Stops when the returned
/// sender is dropped.
fn start_reaper(data: Arc<data::Data>) -> io::Result<std::sync::mpsc::Sender<()>> {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("sextant-reap".into())
        .spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(250))
            {
                if let Err(e) = data.reap() {
                    tracing::warn!(error = %e, "removing the objects of removed files");
                }
            }
        })?;
    Ok(stop)
}

/// How long an unmounting mount waits for its watcher to stop (it stops
/// at its next await; a kernel notification in progress may take a while
/// when the mount is already gone).
const WATCHER_STOP_WAIT: Duration = Duration::from_secs(5);

/// Joins `t` if it finishes within `wait`; false if it did not (it is
/// then left running, detached).
fn joined_within(t: std::thread::JoinHandle<()>, wait: Duration) -> bool {
    let start = std::time::Instant::now();
    while !t.is_finished() {
        if start.elapsed() >= wait {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    t.join().is_ok()
}

/// `fusermount3 -u [-z] MOUNTPOINT`.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(mountpoint).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

fn lazy_unmount(mountpoint: &Path) {
    let _ = unmount(mountpoint, true);
}
