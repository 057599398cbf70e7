//! Kernel cache coherence: the kernel's cached names and attributes are
//! dropped when another client changes them. And leftover data: the
//! object file of a file another client removed is dropped
//! ([`drop_leftovers`]; and [`sweep_store`] checks the whole store each
//! time a stream opens or a server leaves), since only this mount knows
//! it holds it.
//!
//! The kernel caches what entry and attribute replies carry, for
//! `--entry-timeout` / `--attr-timeout`. Without more, a change made by
//! another client (a CLI, another mount) is invisible here until then. So
//! the mount watches the server (`Client::watch_all`): after each mutation
//! of another origin is durable, the server that ran it names the inodes
//! and entries it changed, and a thread of this module tells the kernel to
//! drop them (FUSE_NOTIFY_INVAL_INODE / _ENTRY). The mount's own requests
//! carry its origin and are left out: the kernel updates its cache from
//! their replies, as for any local file system.
//!
//! On a cluster a server streams only the mutations it ran itself, so the
//! mount watches every server of the route map, following the map as
//! servers join, leave and take tables over (one stream each; why table
//! moves and failovers need nothing more: `sextant_client`'s `watch`
//! module). A single server is one stream, as it always was.
//!
//! Why this is exact, and not only "usually quick": a reply read before a
//! change but handed to the kernel after its invalidation cannot stay
//! cached. For attributes the kernel itself discards a reply to a request
//! sent before the inode's last invalidation (`fuse_inode.attr_version`);
//! for names, an invalidation takes the directory's lock, which a lookup
//! in flight holds until its reply is in, so the invalidation lands after
//! the reply. What remains is the notice's own delay (microseconds on one
//! machine).
//!
//! Invariants:
//! - Every stream the watcher opens (to any server) starts with a reset
//!   (every cached attribute and every remembered name invalidated, the
//!   names given as absent too, [`crate::absent`]):
//!   changes made through that server while its stream was not open are
//!   unknown. The same on a batch marked `lost`, and when a server leaves
//!   the map (its stream closed with notices perhaps on their way).
//! - Only nodes the kernel may hold are invalidated (a SOID without a
//!   node id was never given to the kernel).
//! - The cache epoch moves before each batch and each reset is applied:
//!   what the mount keeps itself ([`crate::dirattrs`]) is good only
//!   within one epoch.
//! - The watcher never blocks a FUSE thread: it has its own thread, and
//!   invalidating a name waits only for requests in flight to finish.

use crate::absent::Absent;
use crate::data::{Data, Seen};
use crate::nodes::Nodes;
use fuser::{INodeNo, Notifier};
use sextant_client::{ChangeBatch, Client, Error, Watched};
use sextant_types::{Credentials, FsError, Soid};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Tells the kernel to drop what it caches of these changes, after moving
/// the cache epoch (see [`crate::dirattrs`]).
pub(crate) fn apply(caches: &Caches, notifier: &Notifier, batch: &ChangeBatch) {
    let Caches { nodes, epoch, .. } = caches;
    epoch.fetch_add(1, Ordering::AcqRel);
    if batch.lost {
        reset(caches, notifier);
    }
    let inos = batch.inodes.iter().filter_map(|s| nodes.find(*s));
    let names = batch
        .entries
        .iter()
        .filter_map(|(parent, name)| Some((nodes.find(*parent)?, &name[..])));
    invalidate(notifier, inos, names);
}

/// Tells the kernel to drop these nodes' attributes and cached pages and
/// these names. A node or name it does not hold is no error.
fn invalidate<'a>(
    notifier: &Notifier,
    inos: impl Iterator<Item = u64>,
    names: impl Iterator<Item = (u64, &'a [u8])>,
) {
    for ino in inos {
        // Offset 0, length 0: attributes and all cached pages.
        let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
    }
    for (parent, name) in names {
        let _ = notifier.inval_entry(INodeNo(parent), OsStr::from_bytes(name));
    }
}

/// What the mount keeps of the kernel's caches, which the watcher drops.
pub(crate) struct Caches {
    /// The nodes the kernel may hold, and their names.
    pub nodes: Arc<Nodes>,
    /// The names the kernel may hold as absent.
    pub absent: Arc<Absent>,
    /// The cache epoch (see [`crate::dirattrs`]).
    pub epoch: Arc<AtomicU64>,
}

/// Drops every attribute and every name the kernel may cache, the names
/// it holds as absent too (taken first: see [`crate::absent`]).
fn reset(caches: &Caches, notifier: &Notifier) {
    caches.epoch.fetch_add(1, Ordering::AcqRel);
    let absent = caches.absent.reset();
    let (inos, names) = caches.nodes.cached();
    invalidate(
        notifier,
        inos.into_iter(),
        names
            .iter()
            .chain(absent.iter())
            .map(|(parent, name)| (*parent, &name[..])),
    );
}

/// Removes the object files `held` (see [`leftovers`]) whose inodes the
/// server says are gone (removed by another client: this mount's own
/// removals drop their objects themselves), so they neither take space
/// nor wait for their SOID to come back ([`Data::remove_leftover`] keeps
/// one that was opened or rewritten since it was seen); those of files
/// open here go at their last release (the kernel's RELEASE may come
/// after the removal's notice). One getattr each.
async fn drop_leftovers(client: Client, data: Arc<Data>, held: Vec<(Soid, Seen)>) {
    let root = Credentials::root();
    for (soid, seen) in held {
        // Gone on the server: drop it (still there, or unknown now: keep).
        if let Err(Error::Fs(FsError::NotFound)) = client.getattr(&root, soid).await {
            match data.remove_leftover(soid, seen) {
                Ok(true) => tracing::debug!(%soid, "removed the data of a file removed elsewhere"),
                Ok(false) => {}
                Err(e) => tracing::warn!(%soid, error = %e, "cannot remove a leftover object"),
            }
        }
    }
}

/// Those of `soids` with an object file here or open here, with what
/// was seen of them (see [`Data::remove_leftover`]).
fn leftovers(data: &Data, soids: impl Iterator<Item = Soid>) -> Vec<(Soid, Seen)> {
    soids
        .filter_map(|s| data.leftover(s).map(|seen| (s, seen)))
        .collect()
}

/// Checks every object file of the store against the server, as
/// [`drop_leftovers`] does for changed ones: a file removed while this
/// mount was down or not watching leaves its object behind. Run when the
/// change stream (re)opens, in the background, one SOID at a time.
async fn sweep_store(client: Client, data: Arc<Data>) {
    let soids = match data.stored() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the data store");
            return;
        }
    };
    let held = leftovers(&data, soids.into_iter());
    drop_leftovers(client, data, held).await;
}

/// Runs the watcher until `stop` turns true (on its own thread: the
/// kernel notifications are blocking writes). Once `stop` is true it
/// starts nothing more on `rt` (no connection, no timer, no task: the
/// runtime may be shutting down, and a timer or connection made then
/// panics), and the tasks it started are aborted when it returns (and
/// every stream closed: [`sextant_client::AllChanges`] runs only inside
/// its `next`). The mount waits for it to return before its caller may
/// drop `rt`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    client: Client,
    rt: tokio::runtime::Handle,
    caches: Caches,
    data: Arc<Data>,
    notifier: Notifier,
    watching: Arc<AtomicBool>,
    start_delay: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let epoch = &caches.epoch;
    // Whatever ends the watcher, nothing is watched any more.
    struct NotWatching(Arc<AtomicBool>);
    impl Drop for NotWatching {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    let _not_watching = NotWatching(Arc::clone(&watching));
    // Servers whose stream broke and is not open again.
    let mut broken: std::collections::HashSet<String> = Default::default();
    rt.block_on(async {
        // A test's hook (SEXTANT_WATCH_DELAY_MS): the window before the
        // first stream opens, made long.
        if !start_delay.is_zero() {
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(start_delay) => {}
            }
        }
        // Every server of a cluster (one on a single server); each
        // stream is reopened by itself, with a backoff of up to 2 s.
        let mut all = client.watch_all();
        // Aborted when the watcher returns.
        let mut tasks = tokio::task::JoinSet::new();
        let mut sweeping: Option<tokio::task::AbortHandle> = None;
        loop {
            if *stop.borrow() {
                return;
            }
            let next = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                w = all.next() => w,
            };
            // Finished tasks leave the set.
            while tasks.try_join_next().is_some() {}
            match next {
                Ok(Watched::Changes(batch)) => {
                    if batch.lost {
                        tracing::warn!("change notices were lost; dropped every kernel cache");
                    }
                    apply(&caches, &notifier, &batch);
                    // Beside the stream, so that asking the server
                    // never delays the next batch's invalidations.
                    let held = leftovers(&data, batch.inodes.iter().copied());
                    if !held.is_empty() {
                        tasks.spawn(drop_leftovers(client.clone(), Arc::clone(&data), held));
                    }
                }
                Ok(w @ (Watched::Opened { .. } | Watched::Left { .. })) => {
                    match &w {
                        Watched::Left { server } => tracing::info!(
                            %server,
                            "a server left the route map; dropped every kernel cache"
                        ),
                        _ => tracing::debug!(?w, "watching a server"),
                    }
                    reset(&caches, &notifier);
                    match &w {
                        Watched::Opened { server } | Watched::Left { server } => {
                            broken.remove(server);
                        }
                        _ => {}
                    }
                    watching.store(broken.is_empty(), Ordering::Release);
                    // Changes made while it was not watched are unknown:
                    // removals among them left objects here.
                    if let Some(s) = sweeping.take() {
                        s.abort();
                    }
                    sweeping = Some(tasks.spawn(sweep_store(client.clone(), Arc::clone(&data))));
                }
                Ok(Watched::Broke { server, error }) => {
                    tracing::info!(%server, %error, "a change stream broke; reopening it");
                    watching.store(false, Ordering::Release);
                    broken.insert(server.clone());
                    // What the mount keeps of the server's state is
                    // good only while changes are being watched.
                    epoch.fetch_add(1, Ordering::AcqRel);
                    if let Some(s) = sweeping.take() {
                        s.abort();
                    }
                }
                Err(e @ Error::Auth) => {
                    tracing::error!(error = %e, "cannot watch the server for changes; \
                        the kernel caches expire only by their timeouts");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the server cannot stream changes; \
                        the kernel caches expire only by their timeouts");
                    return;
                }
            }
        }
    });
}
