//! The gRPC service: decode, validate, run on the engine, reply after the
//! mutation is durable.

mod gather;
mod keep_alive;
#[cfg(test)]
mod moves;

use crate::auth::{caller_of, Caller};
use crate::confine::{CheckError, Walk};
use crate::dedup::{Dedup, ReplyCell, Seeded};
use crate::logless::{backup_to_pb, LoglessServer};
use crate::placement::Placement;
use crate::search;
use crate::watchers::Watchers;
use parking_lot::Mutex;
use sextant_engine::logless::Redo;
use sextant_engine::requests::RequestId;
use sextant_engine::Changes;
use sextant_engine::Engine;
use sextant_proto::pb::{self, request::Op, response::Result as Res};
use sextant_proto::*;
use sextant_types::{
    Attr, Credentials, FsError, Soid, NAME_MAX, SYMLINK_MAX, XATTR_NAME_MAX, XATTR_SIZE_MAX,
};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// Requests one Session stream may have running at once; beyond that the
/// server stops reading the stream (back-pressure).
pub const SESSION_IN_FLIGHT: usize = 4096;
/// Requests in flight over all connections: a request is read only with a
/// permit, so what clients can make the server hold is bounded (× the 1 MiB
/// message limit), however many connections and streams they open.
pub const SERVER_IN_FLIGHT: usize = 8192;

/// Most tables one mutation brings here before it gives up with EXDEV. A
/// rename touches its two directories, the moved inode and the one it
/// replaces — and, moving a directory, the tables of every ancestor of
/// the new parent up to `/` for the loop check: one table per level where
/// every directory has a table of its own. (It was 8: a directory moved
/// below a path more than a few tables deep failed with EXDEV, which users
/// must never see; found by `cluster_random_ops.rs`.) The bound is only
/// against a chain that does not end (a damaged `..`).
const MAX_BORROWED: usize = 4096;

/// How long a BORROW's read-ahead (`crate::read_ahead`) may take; past
/// that the operation BORROWs the tables it is refused, one by one.
const READ_AHEAD_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// WRONG_SERVERs a request forwarded for a local user follows at most
/// ([`Shared::handle_for`]); then the client gets the last one.
const FORWARD_HOPS: usize = 3;

/// What [`Shared::handle_here`] did with a request.
enum Handled {
    Answered(pb::Response),
    /// Not held here, for a caller this server forwards for (see
    /// [`Shared::handle_for`]): the request, and the WRONG_SERVER it got.
    Forward(pb::Request, pb::Response),
    /// A request of a caller confined to this path, whose check needs
    /// directories other servers hold ([`Shared::confine_across`]).
    Across(String, pb::Request),
}

/// An exactly-once attempt running here: its request identity and the
/// cell it began in the exactly-once table ([`Dedup::begin`]).
struct Attempt {
    id: RequestId,
    cell: ReplyCell,
}

/// What a walk over the records kept under live leases made of a check
/// ([`Shared::kept_walk`]).
enum Kept<T> {
    /// Decided without a call: its errno.
    Decided(Result<T, FsError>),
    /// It would have needed a call: run the check on a blocking thread.
    NeedsCall,
    /// None made: no peers, or some lease not live.
    Unavailable,
}

/// What every connection shares.
pub struct Shared {
    pub engine: Engine,
    pub dedup: Mutex<Dedup>,
    pub shutdown: watch::Receiver<bool>,
    pub requests: AtomicU64,
    pub replayed: AtomicU64,
    /// See [`SERVER_IN_FLIGHT`].
    pub in_flight: Arc<Semaphore>,
    /// Log-less durability (`None`: the journal).
    pub logless: Option<LoglessServer>,
    /// Cache watchers (the `Watch` RPC).
    pub watchers: Watchers,
    /// Which SOIDs this server serves ([`crate::placement`]).
    pub placement: Arc<dyn Placement>,
    /// WRONG_SERVER replies sent.
    pub wrong_server: AtomicU64,
    /// The other servers, for spread searches ([`crate::peers`]); `None`
    /// where the secret cannot be sent (a server without one).
    pub peers: Option<Arc<crate::peers::Peers>>,
    /// The client keys ([`crate::clientkeys`]): the `Keys` RPC changes
    /// them; a key's streams end when it is revoked.
    pub keys: Arc<crate::clientkeys::KeyBook>,
    /// The key identity tickets are made and checked with (derived from
    /// the cluster secret, see [`crate::auth`]).
    pub ticket_master: [u8; sextant_proto::keyauth::KEY_BYTES],
    /// This server's id in the tickets it issues.
    pub issuer: String,
}

/// The status a stream admitted with a key ends with once the key is
/// revoked or rotated.
fn key_revoked() -> Status {
    Status::unauthenticated("authentication failed: the client key was revoked")
}

/// `rx`, passed on until the key of `grant` is revoked or rotated: then
/// [`key_revoked`], and the end (the stream's producer sees it closed).
fn cut_on_revocation<T: Send + 'static>(
    mut rx: mpsc::Receiver<Result<T, Status>>,
    keys: Arc<crate::clientkeys::KeyBook>,
    grant: crate::clientkeys::Grant,
) -> mpsc::Receiver<Result<T, Status>> {
    let (tx, out) = mpsc::channel(16);
    let mut changed = keys.subscribe();
    tokio::spawn(async move {
        // A revocation between the call's admission and the subscription.
        if !keys.is_live(&grant) {
            let _ = tx.send(Err(key_revoked())).await;
            return;
        }
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => {
                        if tx.send(m).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
                c = changed.changed() => {
                    if c.is_err() || !keys.is_live(&grant) {
                        metrics::counter!("sextant_auth_streams_cut_total").increment(1);
                        let _ = tx.send(Err(key_revoked())).await;
                        break;
                    }
                }
                () = tx.closed() => break,
            }
        }
    });
    out
}

/// What a mutation leaves besides its reply.
#[derive(Default)]
struct Effects {
    /// Log-less: the operation's redo entry.
    redo: Option<Redo>,
    /// The keys it changed, for the cache watchers.
    changes: Option<Changes>,
}

/// The directory whose attributes `Response.dir` reports for `op`.
fn changed_dir(op: &Op) -> Option<Soid> {
    match op {
        Op::Create(pb::CreateRequest { parent, .. })
        | Op::Mkdir(pb::MkdirRequest { parent, .. })
        | Op::Unlink(pb::UnlinkRequest { parent, .. })
        | Op::Rmdir(pb::RmdirRequest { parent, .. }) => soid(parent).ok(),
        // Within one directory (rsync's temporary name to the final one).
        Op::Rename(pb::RenameRequest {
            old_parent,
            new_parent,
            ..
        }) if old_parent == new_parent => soid(old_parent).ok(),
        _ => None,
    }
}

#[derive(Clone)]
pub struct Service {
    pub shared: Arc<Shared>,
}

/// The inodes the rename `r` as `cred` will read (see
/// [`crate::read_ahead`]), found across the servers by `across`: the
/// moved entry and the one at the new name, then the parents of the
/// directories the loop checks walk — a chain at a time, each parent
/// from this server's tables, the records kept under other servers'
/// leases, else a `DirChain` call to its holder (which answers as far up
/// as it holds).
fn read_rename_ahead(
    across: &crate::confine::across::Across,
    cred: &Credentials,
    r: &pb::RenameRequest,
) -> Result<Vec<Soid>, FsError> {
    use crate::read_ahead::{rename_reads, Entry, Parent, Plan, Rename, MAX_WALK};
    let (old_parent, new_parent) = (soid(&r.old_parent)?, soid(&r.new_parent)?);
    let entry = |e: Option<(Soid, bool)>| e.map(|(child, is_dir)| Entry { child, is_dir });
    let src = entry(across.entry(cred, old_parent, &r.old_name)?);
    let target = match src {
        Some(_) => entry(across.entry(cred, new_parent, &r.new_name)?),
        None => None,
    };
    let rename = Rename {
        old_parent,
        new_parent,
        src,
        target,
        noreplace: r.noreplace,
        exchange: r.exchange,
    };
    let mut parents: std::collections::HashMap<Soid, Parent> = Default::default();
    // Each round reads a chain up to `/` (or a parent already known):
    // two walks, so a few rounds.
    for _ in 0..8 {
        let known = |d: Soid| parents.get(&d).copied().unwrap_or(Parent::Unknown);
        let mut dir = match rename_reads(&rename, known) {
            Plan::Reads(reads) => return Ok(reads),
            Plan::NeedsParent(dir) => dir,
        };
        for _ in 0..MAX_WALK {
            if dir == Soid::ROOT || parents.contains_key(&dir) {
                break;
            }
            let parent = across.parent_of(dir)?;
            parents.insert(dir, parent.map_or(Parent::Missing, Parent::Of));
            match parent {
                Some(p) => dir = p,
                None => break,
            }
        }
    }
    Err(FsError::Loop)
}

fn reply(id: u64, r: Result<Res, FsError>) -> pb::Response {
    match r {
        Ok(result) => pb::Response {
            id,
            result: Some(result),
            ..Default::default()
        },
        // The engine does not hold that SOID's table (a cluster member):
        // WRONG_SERVER, never an errno (the run's caller adds the hint).
        Err(FsError::WrongServer { soid }) => pb::Response {
            id,
            wrong_server: Some(pb::WrongServer {
                soid: Some(soid_to_pb(soid)),
                hint: None,
                revision: 0,
                ran: false,
            }),
            ..Default::default()
        },
        Err(e) => {
            if let FsError::CrossServer | FsError::NeedsTable { .. } = e {
                // The tables it needs could not all be brought here:
                // refused with EXDEV (see `execute_borrowing`).
                metrics::counter!("sextant_cross_server_total").increment(1);
            }
            let e = match e {
                FsError::NeedsTable { .. } => FsError::CrossServer,
                e => e,
            };
            pb::Response {
                id,
                error: Some(error_to_pb(e)),
                ..Default::default()
            }
        }
    }
}

fn name(n: &[u8]) -> Result<&[u8], FsError> {
    if n.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(n)
}

fn xattr_name(n: &[u8]) -> Result<&[u8], FsError> {
    if n.len() > XATTR_NAME_MAX {
        return Err(FsError::Range);
    }
    Ok(n)
}

fn soid(s: &Option<pb::Soid>) -> Result<Soid, FsError> {
    soid_from_pb(s.as_ref())
}

fn attr(a: sextant_types::Attr) -> Res {
    Res::Attr(attr_to_pb(&a))
}

/// A rename's reply: done, or the replaced inode's attributes.
fn replaced(a: Option<sextant_types::Attr>) -> Res {
    match a {
        Some(a) => attr(a),
        None => Res::Done(pb::Empty {}),
    }
}

/// A digest of a request's operation and credentials (not its id or its
/// `acked_below`, which change per attempt), so a (client, seq) reused for
/// a different request is told apart from a retry. Stable across server
/// runs and builds (FNV-1a over the encoded request): journaled with the
/// mutation, it is compared again after a restart.
pub(crate) fn request_digest(r: &pb::Request) -> u64 {
    let same = pb::Request {
        id: 0,
        acked_below: 0,
        ..r.clone()
    };
    fnv1a(&prost::Message::encode_to_vec(&same))
}

/// Seeds a new server's exactly-once table with what the engine's recovery
/// found (see `sextant_engine::requests`): replies rebuilt from the
/// replayed records' tags, numbers whose records were written back.
pub(crate) fn seed_dedup(dedup: &mut Dedup, found: sextant_engine::requests::Recovered) {
    let replies = found.replies.len();
    let gone = found.gone.len();
    seed_dedup_silently(dedup, found);
    if replies + gone > 0 {
        tracing::info!(
            replies,
            committed = gone,
            clients = dedup.clients(),
            "exactly-once table rebuilt from the journal"
        );
    }
}

/// Seeds the exactly-once table with the replies a table added here
/// carried from its previous owner (see `sextant_engine::table::carried`).
pub(crate) fn seed_carried(dedup: &mut Dedup, found: sextant_engine::requests::Recovered) {
    let replies = found.replies.len();
    seed_dedup_silently(dedup, found);
    tracing::debug!(replies, "exactly-once: replies a table carried here");
}

fn seed_dedup_silently(dedup: &mut Dedup, found: sextant_engine::requests::Recovered) {
    use sextant_engine::requests::Reply;
    let seeded = found.replies.into_iter().map(|t| Seeded {
        client: t.id.client,
        seq: t.id.seq,
        digest: t.id.digest,
        reply: reply(
            0,
            Ok(match t.reply {
                Reply::Done => Res::Done(pb::Empty {}),
                Reply::Attr(a) => attr(a),
            }),
        ),
    });
    dedup.seed(found.floors, found.gone, seeded);
}

/// 64-bit FNV-1a (stable, unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Shared {
    /// Runs one request (in its own task: a dropped connection never
    /// cancels a mutation half-way).
    pub async fn handle(self: Arc<Self>, r: pb::Request) -> pb::Response {
        self.handle_sharing(r, true).await
    }

    /// [`Shared::handle`]; log-less, with `share` false the reply carries
    /// the request's own backup only, never other clients' (their redo
    /// entries name what they changed: not for a key confined to a
    /// subtree).
    async fn handle_sharing(self: Arc<Self>, r: pb::Request, share: bool) -> pb::Response {
        let started = std::time::Instant::now();
        let op_name = r.op.as_ref().map_or("none", |op| op.name());
        let resp = Arc::clone(&self).handle_inner(r, share).await;
        let outcome = if resp.error.is_some() { "error" } else { "ok" };
        metrics::counter!("sextant_requests_total", "op" => op_name, "outcome" => outcome)
            .increment(1);
        metrics::histogram!("sextant_request_seconds", "op" => op_name)
            .record(started.elapsed().as_secs_f64());
        resp
    }

    /// A path-limited key's check that needs directories other servers
    /// hold ([`CheckError::NeedsPeers`]), run again across them on a
    /// blocking thread; `EACCES` where there are no peers.
    async fn confine_across(
        self: &Arc<Self>,
        path: &str,
        r: &pb::Request,
    ) -> Result<Option<pb::response::Result>, FsError> {
        let (path, r) = (path.to_string(), r.clone());
        Arc::clone(self)
            .across(move |walk| crate::confine::check(walk, &path, &r))
            .await
    }

    /// Runs `f` on a [`Walk::across`] the servers (see
    /// [`crate::confine::across`]) on a blocking thread: its errno (where
    /// there are no peers, [`CheckError::decided`]'s refusal).
    async fn across<T: Send + 'static>(
        self: Arc<Self>,
        f: impl FnOnce(&Walk) -> Result<T, CheckError> + Send + 'static,
    ) -> Result<T, FsError> {
        let Some(peers) = self.peers.clone() else {
            return Err(CheckError::NeedsPeers.decided());
        };
        let runtime = tokio::runtime::Handle::current();
        metrics::counter!("sextant_confine_across_total").increment(1);
        tokio::task::spawn_blocking(move || {
            let across = crate::confine::across::Across::new(
                self.engine.clone(),
                peers,
                Arc::clone(&self.placement),
                runtime,
            );
            f(&Walk::across(&self.engine, &across)).map_err(CheckError::decided)
        })
        .await
        .map_err(|_| FsError::Io)?
    }

    /// `f` on a [`Walk::across`] the servers that reads the records kept
    /// under live leases alone, here on the runtime's worker
    /// ([`crate::confine::across::Across::kept`]): its errno; `None` when
    /// that cannot decide without a call to another server (then
    /// [`Shared::across`] runs it again on a blocking thread) or there
    /// are no peers.
    fn across_kept<T>(
        &self,
        f: impl FnOnce(&Walk) -> Result<T, CheckError>,
    ) -> Option<Result<T, FsError>> {
        match self.kept_walk(f) {
            Kept::Decided(d) => Some(d),
            Kept::NeedsCall | Kept::Unavailable => None,
        }
    }

    /// [`Shared::across_kept`], telling a walk that needed a call
    /// ([`Kept::NeedsCall`]) from none made ([`Kept::Unavailable`]: no
    /// peers, or some lease not live).
    fn kept_walk<T>(&self, f: impl FnOnce(&Walk) -> Result<T, CheckError>) -> Kept<T> {
        let Some(peers) = self.peers.as_ref() else {
            return Kept::Unavailable;
        };
        let Some(across) = crate::confine::across::Across::kept(
            self.engine.clone(),
            Arc::clone(peers),
            Arc::clone(&self.placement),
            tokio::runtime::Handle::current(),
        ) else {
            // Some other server's lease not live (a renewal is on its way:
            // `Peers::check_epochs_kept`), or leases off.
            metrics::counter!("sextant_confine_kept_walk_misses_total", "why" => "lease")
                .increment(1);
            return Kept::Unavailable;
        };
        let decided = f(&Walk::across(&self.engine, &across));
        if across.needed_call() {
            metrics::counter!("sextant_confine_kept_walk_misses_total", "why" => "call")
                .increment(1);
            Kept::NeedsCall
        } else {
            Kept::Decided(decided.map_err(CheckError::decided))
        }
    }

    /// [`Shared::handle`] for `caller`: a caller without the secret (a
    /// local user on the Unix socket, served as the kernel says) cannot
    /// reach the other servers of a cluster itself, so what another server
    /// holds is run there for it — forwarded with the secret, as the
    /// identity this server admitted, its exactly-once identity kept.
    pub async fn handle_for(self: Arc<Self>, r: pb::Request, caller: &Caller) -> pb::Response {
        let handled = Arc::clone(&self).handle_here(r, caller).await;
        self.finish(handled, caller).await
    }

    /// The answer to what [`Shared::handle_here`] left: a forward run, a
    /// confinement check across the servers made (and the request run if
    /// it passed).
    async fn finish(self: Arc<Self>, handled: Handled, caller: &Caller) -> pb::Response {
        match handled {
            Handled::Answered(resp) => resp,
            Handled::Forward(r, resp) => self.forward(r, resp).await,
            Handled::Across(path, r) => {
                let checked = self.confine_across(&path, &r).await;
                self.confined(r, caller, checked).await
            }
        }
    }

    /// A confined caller's request `r` once its check said `checked`:
    /// refused or answered by the check, else run here.
    async fn confined(
        self: Arc<Self>,
        r: pb::Request,
        caller: &Caller,
        checked: Result<Option<pb::response::Result>, FsError>,
    ) -> pb::Response {
        let what = r.op.as_ref().map_or("none", |op| op.name());
        let answered = match checked {
            Ok(None) => None,
            Ok(Some(res)) => Some(reply(r.id, Ok(res))),
            Err(e) => {
                if e == FsError::Access {
                    caller.refused_outside(what);
                }
                Some(reply(r.id, Err(e)))
            }
        };
        if let Some(resp) = answered {
            let outcome = if resp.error.is_some() { "error" } else { "ok" };
            metrics::counter!("sextant_requests_total", "op" => what, "outcome" => outcome)
                .increment(1);
            return resp;
        }
        // Keys are single-server (no forwarding); other clients' backups
        // are not for it (see crate::confine).
        self.handle_sharing(r, false).await
    }

    /// [`Shared::handle_for`]'s part on this server: the answer, or what
    /// waits for other servers (a forward, a confinement check across
    /// them: [`Handled`]) — which a session runs on a task of its own
    /// ([`Shared::finish`]), never in its loop.
    async fn handle_here(self: Arc<Self>, r: pb::Request, caller: &Caller) -> Handled {
        if let Some(path) = caller.confined_to() {
            // A key limited to a subtree (see crate::confine), checked on
            // the state requests run on (log-less: once recovered).
            if let Some(ll) = &self.logless {
                ll.wait_ready().await;
            }
            // On a cluster (a route map with a revision) whose leases are
            // live, the walk over the records kept under them comes
            // first: it reads this server's tables as the local walk
            // does, and the subtree and the directories proven inside it
            // are kept per generation (crate::confine::across) — so the
            // common check is a few lookups, with no local walk that
            // fails first. (A single server's map has no revision: its
            // checks are the local walk alone, as before.)
            if self.placement.revision() != 0 {
                match self.kept_walk(|walk| crate::confine::check(walk, path, &r)) {
                    Kept::Decided(c) => {
                        return Handled::Answered(self.confined(r, caller, c).await)
                    }
                    Kept::NeedsCall => return Handled::Across(path.to_string(), r),
                    Kept::Unavailable => {}
                }
            }
            return match crate::confine::check(&Walk::local(&self.engine), path, &r) {
                Err(CheckError::NeedsPeers) => Handled::Across(path.to_string(), r),
                c => Handled::Answered(
                    self.confined(r, caller, c.map_err(CheckError::decided))
                        .await,
                ),
            };
        }
        if !matches!(caller, Caller::Kernel(_))
            || self.peers.is_none()
            || !self.placement.can_borrow()
        {
            // (One server, or a caller that reaches the others itself.)
            return Handled::Answered(self.handle(r).await);
        }
        // A path resolution that leaves this server is walked on here
        // across the servers (`Shared::resolve_across`), or name by name
        // by the client (each lookup forwarded here as needed): forwarded
        // whole, it would stop at the next server again.
        if matches!(r.op, Some(Op::Resolve(_))) {
            return Handled::Answered(self.handle(r).await);
        }
        let resp = Arc::clone(&self).handle(r.clone()).await;
        match resp.wrong_server {
            Some(_) => Handled::Forward(r, resp),
            None => Handled::Answered(resp),
        }
    }

    /// Runs `r` on the server `resp` (a WRONG_SERVER) names, following
    /// further WRONG_SERVERs a few times; the last answer otherwise.
    ///
    /// A lookup refused with a WRONG_SERVER naming another SOID than its
    /// directory was answered by the directory's holder (search permission
    /// checked there): the entry is there, its inode in another server's
    /// table — what follows is a getattr of that inode at its holder, as
    /// `Client::lookup` does. Forwarded as the same lookup, it would go
    /// back to the directory's holder, and round until the hop limit.
    async fn forward(&self, mut r: pb::Request, mut resp: pb::Response) -> pb::Response {
        let Some(peers) = &self.peers else {
            return resp;
        };
        // Whether some hop ran it (R1 refused its reply): the WRONG_SERVER
        // the caller gets says so, whichever hop's it is.
        let mut ran = false;
        for _ in 0..FORWARD_HOPS {
            if let Some(w) = &mut resp.wrong_server {
                ran |= w.ran;
                w.ran = ran;
            }
            let Some(wrong) = &resp.wrong_server else {
                return resp;
            };
            if let Some(Op::Lookup(l)) = &r.op {
                if wrong.soid.is_some() && wrong.soid != l.parent {
                    r.op = Some(Op::Getattr(pb::GetattrRequest { soid: wrong.soid }));
                }
            }
            let address = match wrong.hint.as_ref().map(|h| h.address.clone()) {
                Some(a) if !a.is_empty() => a,
                _ => {
                    // No owner named yet (a table between owners): ask
                    // the map again shortly.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    let soid = soid_from_pb(wrong.soid.as_ref()).ok();
                    let map = sextant_proto::route::RouteTable::from_pb(&self.placement.map()).ok();
                    match (soid, map) {
                        (Some(s), Some(m)) => match m.route(s) {
                            Some(r) if !r.address.is_empty() => r.address.clone(),
                            _ => continue,
                        },
                        _ => return resp,
                    }
                }
            };
            match peers.forward(&address, r.clone()).await {
                Ok(mut there) => {
                    there.id = r.id;
                    metrics::counter!("sextant_requests_forwarded_total").increment(1);
                    resp = there;
                }
                Err(e) => {
                    tracing::warn!(%address, error = %e, "a request forwarded for a local user failed");
                    return resp;
                }
            }
        }
        if let Some(w) = &mut resp.wrong_server {
            w.ran |= ran;
        }
        resp
    }

    /// One request of a frame door connection (`crate::frame_door`), as
    /// a Session stream runs it: with a permit of [`SERVER_IN_FLIGHT`],
    /// admitted for `caller` ([`Caller::admit_op`]: a refusal is answered,
    /// not run), then [`Shared::handle_for`] — the session loop's
    /// [`Shared::handle_here`] and, for what waits for other servers,
    /// [`Shared::finish`]. The door's thread runs it to its end (a
    /// connection gone meanwhile cancels nothing).
    pub(crate) async fn frame_request(
        self: Arc<Self>,
        r: pb::Request,
        caller: &Caller,
    ) -> pb::Response {
        let id = r.id;
        let Ok(_global) = Arc::clone(&self.in_flight).acquire_owned().await else {
            return reply(id, Err(FsError::Io));
        };
        match caller.admit_op(r) {
            Ok(req) => self.handle_for(req, caller).await,
            Err(e) => reply(id, Err(e)),
        }
    }

    async fn handle_inner(self: Arc<Self>, r: pb::Request, share: bool) -> pb::Response {
        if let Some(ll) = &self.logless {
            ll.wait_ready().await;
        }
        // Backups go to mutating clients only (reads carry no client id);
        // 0: the reply's own backup only.
        let client = match &r.op {
            Some(op) if op.is_mutation() && share => r.client_id,
            _ => 0,
        };
        let mut resp = Arc::clone(&self).run_once(r).await;
        if let Some(ll) = &self.logless {
            ll.attach(&self.engine, client, &mut resp);
        }
        resp
    }

    /// Runs a request here if this server serves it, exactly once for a
    /// mutation with a client id; else WRONG_SERVER.
    async fn run_once(self: Arc<Self>, r: pb::Request) -> pb::Response {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let id = r.id;
        let route = r.op.as_ref().and_then(Op::route_soid);
        // Not here: run nothing, remember nothing (the retry is the
        // owner's).
        if let Some(Err(wrong)) = route.map(|s| self.placement.check(s)) {
            return self.wrong_server_reply(id, *wrong);
        }
        let mutation = r.op.as_ref().is_some_and(Op::is_mutation);
        let mut resp = Arc::clone(&self).run_admitted(r).await;
        if mutation {
            // A directory changed here: other servers' leases on the
            // records first (crate::dir_leases).
            self.settle_dir_leases().await;
        }
        if let Some(w) = &mut resp.wrong_server {
            // The engine refused a SOID it does not hold: say who does.
            let soid = soid_from_pb(w.soid.as_ref()).ok();
            match soid.map(|s| self.placement.check(s)) {
                Some(Err(known)) => *w = *known,
                // Held here by the map (a resolution that stopped at
                // another server's table names the root): refused under
                // this map, which the client need not fetch again if its
                // own is as new.
                _ => w.revision = self.placement.revision(),
            }
            self.wrong_server.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("sextant_wrong_server_total").increment(1);
            return resp;
        }
        // R1: acknowledge only while this server may (its lease timer is
        // valid and the table still serves here), checked once the
        // operation is durable, right before the reply — a replayed reply
        // too. Otherwise the client asks the owner again: a mutation that
        // ran here is in this server's journal, which the next owner
        // replays with its exactly-once identity. A mutation that ran
        // says so (`ran`): its retry must never be taken for a request
        // that did not run (the client's renumbering of a refused one).
        if let Some(Err(mut wrong)) = route.map(|s| self.placement.may_ack(s)) {
            wrong.ran = mutation;
            return self.wrong_server_reply(id, *wrong);
        }
        resp
    }

    /// Before a mutation's reply: when the directory epoch advanced, every
    /// live lease on this server's directory records revoked or run out
    /// ([`crate::dir_leases::DirLeases::settle`]).
    async fn settle_dir_leases(&self) {
        let Some(peers) = &self.peers else {
            return;
        };
        if !peers.leases.unsettled(self.engine.dir_epoch()) {
            return;
        }
        let everyone = peers
            .servers_of(&self.engine, self.placement.as_ref())
            .map(|(others, _me)| others)
            .unwrap_or_default();
        let engine = self.engine.clone();
        let revoker = Arc::clone(peers);
        peers
            .leases
            .settle(
                move || engine.dir_epoch(),
                everyone,
                move |address, epoch| {
                    let peers = Arc::clone(&revoker);
                    async move { peers.revoke(&address, epoch).await }
                },
            )
            .await;
    }

    fn wrong_server_reply(&self, id: u64, wrong: pb::WrongServer) -> pb::Response {
        self.wrong_server.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("sextant_wrong_server_total").increment(1);
        pb::Response {
            id,
            wrong_server: Some(wrong),
            ..Default::default()
        }
    }

    /// [`Shared::run_once`] once placement admitted the request.
    async fn run_admitted(self: Arc<Self>, r: pb::Request) -> pb::Response {
        let id = r.id;
        // What a retry must repeat exactly: the operation and credentials.
        let digest = request_digest(&r);
        let Some(op) = r.op else {
            return reply(id, Err(FsError::Invalid));
        };
        let cred = match cred_from_pb(r.cred) {
            Ok(c) => c,
            Err(e) => return reply(id, Err(e)),
        };
        if !op.is_mutation() || r.client_id == 0 {
            return self
                .execute_with_redo(&cred, op, id, r.origin, r.want_dir, None)
                .await;
        }
        let generation = self.placement.generation();
        let begun = {
            let mut dedup = self.dedup.lock();
            dedup.set_generation(generation);
            dedup.begin(r.client_id, r.seq, r.acked_below, digest)
        };
        let (cell, retry) = match begun {
            Ok(c) => c,
            Err(e) => return reply(id, Err(e)),
        };
        if retry {
            self.replayed.fetch_add(1, Ordering::Relaxed);
        }
        // Journaled with its record, so a restarted server can answer a
        // retry of it (see sextant_engine::requests).
        let request = RequestId {
            client: r.client_id,
            seq: r.seq,
            acked_below: r.acked_below,
            digest,
        };
        let own = Attempt {
            id: request,
            cell: Arc::clone(&cell),
        };
        let mut resp = cell
            .get_or_init(|| self.execute_with_redo(&cred, op, 0, r.origin, r.want_dir, Some(&own)))
            .await
            .clone();
        if !retry && resp.error.is_none() {
            crate::fault::after_commit();
        }
        if !retry && resp.wrong_server.is_some() {
            // The engine ran nothing (the table left meanwhile): forget
            // the number, so a retry here once the table is back runs —
            // unless a table brought this number's reply meanwhile (see
            // `Dedup::abandon`).
            self.dedup.lock().abandon(r.client_id, r.seq, &cell);
        }
        resp.id = id;
        if retry {
            // The directory may have changed since the original reply.
            resp.dir = None;
        }
        resp
    }

    /// Runs `op` into a reply with `id`; a log-less mutation's own redo
    /// entry goes into it (it is durable only once the client has it), and
    /// what it changed goes to the cache watchers (see [`crate::watchers`]).
    async fn execute_with_redo(
        &self,
        cred: &Credentials,
        op: Op,
        id: u64,
        origin: u64,
        want_dir: bool,
        attempt: Option<&Attempt>,
    ) -> pb::Response {
        let dir = want_dir.then(|| changed_dir(&op)).flatten();
        let mut fx = Effects::default();
        let mut resp = reply(id, self.execute_borrowing(cred, op, &mut fx, attempt).await);
        if let (Some(dir), None) = (dir, &resp.error) {
            resp.dir = self.engine.getattr(dir).ok().map(|a| attr_to_pb(&a));
        }
        if let Some(r) = fx.redo {
            resp.backups.push(backup_to_pb(&r));
        }
        if let Some(changes) = fx.changes {
            self.watchers.publish(origin, changes);
        }
        resp
    }

    /// [`Shared::execute`], bringing here the tables a mutation also
    /// needs (`NeedsTable`: nothing was changed) and running it again, up
    /// to [`MAX_BORROWED`] tables; EXDEV when one cannot come.
    ///
    /// An exactly-once `attempt` runs again after a BORROW only while its
    /// number is still its own in the exactly-once table: while it waited,
    /// its table may have left, the client's retry run it on the next
    /// holder, and the table come back carrying that reply (seeded over
    /// this attempt's cell) — run now, it would run twice. It stops with
    /// WRONG_SERVER then (nothing ran here; the retry is answered from the
    /// table's reply). The check is right before the engine runs, with no
    /// await between, and a table's replies are seeded before it serves.
    async fn execute_borrowing(
        &self,
        cred: &Credentials,
        op: Op,
        fx: &mut Effects,
        attempt: Option<&Attempt>,
    ) -> Result<Res, FsError> {
        let request = attempt.map(|a| a.id);
        if !op.is_mutation() || !self.placement.can_borrow() {
            return self.execute(cred, op, fx, request).await;
        }
        let route = op.route_soid();
        // The SOIDs whose tables the operation needs here together.
        let mut needs: Vec<Soid> = route.into_iter().collect();
        let mut read_ahead = crate::read_ahead::enabled();
        // BORROW rounds this operation took.
        let mut rounds = 0u32;
        loop {
            let result = match self.execute(cred, op.clone(), fx, request).await {
                // The engine names the first table it touched; when that
                // is not the table the request was routed by (served
                // here), the operation needs another table too.
                Err(FsError::WrongServer { soid })
                    if route.is_some_and(|r| {
                        r != soid
                            && self.placement.check(r).is_ok()
                            && self.placement.check(soid).is_err()
                    }) =>
                {
                    Err(FsError::NeedsTable { soid })
                }
                r => r,
            };
            match result {
                Err(FsError::NeedsTable { soid }) if needs.len() <= MAX_BORROWED => {
                    tracing::debug!(target: "borrow_trace", ?soid, "operation needs another table: BORROW");
                    needs.push(soid);
                    if let (true, Op::Rename(r)) = (read_ahead, &op) {
                        // Every table the rename will read — a directory
                        // moved deep: each ancestor's the loop check
                        // visits — in this one round, not one round per
                        // table (`crate::read_ahead`). Only a guess: the
                        // rename runs again under ownership and checks
                        // everything itself; where the chain changed
                        // meanwhile (a concurrent rename of an ancestor)
                        // the engine answers NeedsTable again, and one
                        // more round (reading ahead again) follows.
                        match self.rename_read_ahead(cred, r).await {
                            Some(reads) => {
                                let room = (MAX_BORROWED + 1).saturating_sub(needs.len());
                                let here = |s| self.placement.check(s).is_ok();
                                let more = crate::read_ahead::to_borrow(&needs, &reads, here, room);
                                tracing::debug!(target: "borrow_trace", read = reads.len(), more = more.len(), "BORROW read ahead");
                                needs.extend(more);
                            }
                            // (Not again for this operation: table by
                            // table, as without it.)
                            None => read_ahead = false,
                        }
                    }
                    rounds += 1;
                    metrics::counter!("sextant_borrow_rounds_total").increment(1);
                    if !self.placement.borrow(&needs).await {
                        return Err(FsError::CrossServer);
                    }
                    if let Some(a) = attempt {
                        if !self.dedup.lock().is_current(a.id.client, a.id.seq, &a.cell) {
                            tracing::debug!(
                                client = format_args!("{:016x}", a.id.client),
                                seq = a.id.seq,
                                "exactly-once: an attempt superseded while it waited for a BORROW does not run"
                            );
                            return Err(FsError::WrongServer {
                                soid: route.unwrap_or(Soid::ROOT),
                            });
                        }
                    }
                    tracing::debug!(target: "borrow_trace", "BORROW granted: running the operation again");
                    *fx = Effects::default();
                }
                r => {
                    if needs.len() > 1 {
                        tracing::debug!(target: "borrow_trace", ok = r.is_ok(), rounds, tables = needs.len(), "operation ran after BORROW");
                        self.placement.borrowed_op_done();
                    }
                    return r;
                }
            }
        }
    }

    /// The inodes the rename `r` will read, wherever they are held
    /// ([`read_rename_ahead`] on a blocking thread): `None` without peers,
    /// or where that failed or took longer than [`READ_AHEAD_FOR`].
    async fn rename_read_ahead(
        &self,
        cred: &Credentials,
        r: &pb::RenameRequest,
    ) -> Option<Vec<Soid>> {
        let (cred, r) = (cred.clone(), r.clone());
        let walked = self.across_blocking(move |across| read_rename_ahead(&across, &cred, &r))?;
        match tokio::time::timeout(READ_AHEAD_FOR, walked).await {
            Ok(Ok(Ok(reads))) => Some(reads),
            Ok(Ok(Err(error))) => {
                tracing::debug!(target: "borrow_trace", %error, "BORROW read-ahead failed: table by table");
                None
            }
            Ok(Err(_)) | Err(_) => {
                tracing::debug!(target: "borrow_trace", "BORROW read-ahead did not finish: table by table");
                None
            }
        }
    }

    async fn durable<T>(
        &self,
        fx: &mut Effects,
        c: Result<sextant_engine::Committed<T>, FsError>,
    ) -> Result<T, FsError> {
        let c = c?;
        self.engine.durable(c.lsn).await?;
        fx.redo = c.redo;
        fx.changes = c.changes;
        Ok(c.value)
    }

    /// A `Resolve` whose path leaves this server's tables, walked on here
    /// across the servers, on a blocking thread
    /// ([`crate::confine::across::Across::resolve`]: the records kept
    /// under other servers' leases, else calls to them); `None` without
    /// peers.
    async fn resolve_across(
        &self,
        cred: &Credentials,
        path: Vec<u8>,
        follow_last: bool,
    ) -> Option<Result<Attr, FsError>> {
        let cred = cred.clone();
        let walked = self
            .across_blocking(move |across| across.resolve(&cred, &path, follow_last))?
            .await;
        Some(walked.unwrap_or(Err(FsError::Io)))
    }

    /// Runs `work` with an [`Across`](crate::confine::across::Across) of
    /// this server on a blocking thread (its calls to other servers
    /// block); `None` without peers.
    fn across_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(crate::confine::across::Across) -> T + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<T>> {
        let peers = Arc::clone(self.peers.as_ref()?);
        let (engine, placement) = (self.engine.clone(), Arc::clone(&self.placement));
        let runtime = tokio::runtime::Handle::current();
        Some(tokio::task::spawn_blocking(move || {
            work(crate::confine::across::Across::new(
                engine, peers, placement, runtime,
            ))
        }))
    }

    async fn execute(
        &self,
        cred: &Credentials,
        op: Op,
        fx: &mut Effects,
        request: Option<RequestId>,
    ) -> Result<Res, FsError> {
        let tagged;
        let e = match request {
            Some(id) if op.is_mutation() => {
                tagged = self.engine.for_request(id);
                &tagged
            }
            _ => &self.engine,
        };
        let done = |()| Res::Done(pb::Empty {});
        Ok(match op {
            Op::Lookup(r) => {
                let (parent, name) = (soid(&r.parent)?, name(&r.name)?);
                match e.lookup(cred, parent, name) {
                    // The entry is here, its inode in another server's
                    // table: WRONG_SERVER naming the child, whose owner
                    // the client asks for its attributes.
                    Err(FsError::NeedsTable { .. }) => {
                        let (child, _) = e.lookup_entry(cred, parent, name)?;
                        return Err(FsError::WrongServer { soid: child });
                    }
                    r => attr(r?),
                }
            }
            Op::Getattr(r) => attr(e.getattr(soid(&r.soid)?)?),
            Op::Resolve(r) => {
                if r.path.len() > PATH_MAX {
                    return Err(FsError::NameTooLong);
                }
                match e.resolve(cred, &r.path, r.follow_last) {
                    // The path crosses into another server's table: walked
                    // on here across the servers (`Across::resolve`), or,
                    // where that cannot answer (no peers, a peer not
                    // reachable now), by the client name by name
                    // (`Client::resolve`), which retries.
                    Err(FsError::NeedsTable { .. } | FsError::WrongServer { .. }) => {
                        match self.resolve_across(cred, r.path, r.follow_last).await {
                            Some(Err(FsError::Io)) | None => {
                                return Err(FsError::WrongServer { soid: Soid::ROOT })
                            }
                            Some(r) => attr(r?),
                        }
                    }
                    r => attr(r?),
                }
            }
            Op::Readlink(r) => Res::Data(pb::Bytes {
                data: e.readlink(soid(&r.soid)?)?.into_vec(),
            }),
            Op::Readdir(r) => {
                let limit = match r.limit {
                    0 => READDIR_MAX,
                    n => n.min(READDIR_MAX),
                };
                let (dir, limit) = (soid(&r.dir)?, limit as usize);
                let (entries, end) = if r.plus {
                    // Attributes from this table only (see
                    // `Engine::readdir_plus`): never a peer's.
                    let (page, end) = e.readdir_plus_page(cred, dir, r.after, limit)?;
                    let entries = page
                        .iter()
                        .map(|(d, a)| dirent_plus_to_pb(d, a.as_ref()))
                        .collect();
                    (entries, end)
                } else {
                    let (page, end) = e.readdir_page(cred, dir, r.after, limit)?;
                    (page.iter().map(dirent_to_pb).collect(), end)
                };
                Res::Entries(pb::DirEntries { entries, end })
            }
            Op::Getxattr(r) => Res::Data(pb::Bytes {
                data: e
                    .getxattr(cred, soid(&r.soid)?, xattr_name(&r.name)?)?
                    .into_vec(),
            }),
            Op::Listxattr(r) => Res::Names(pb::Names {
                names: e
                    .listxattr(cred, soid(&r.soid)?)?
                    .into_iter()
                    .map(|n| n.into_vec())
                    .collect(),
            }),
            Op::Access(r) => {
                if r.mask > 7 {
                    return Err(FsError::Invalid);
                }
                e.access(cred, soid(&r.soid)?, r.mask)?;
                done(())
            }
            Op::Statfs(_) => Res::Statfs(statfs_to_pb(&e.statfs())),
            Op::Status(_) => {
                let mut s = stats_to_pb(&e.stats());
                s.requests = self.requests.load(Ordering::Relaxed);
                s.replayed_replies = self.replayed.load(Ordering::Relaxed);
                s.clients_remembered = self.dedup.lock().clients() as u64;
                s.incarnation = e.incarnation();
                s.written_back_lsn = e.written_back_lsn();
                s.logless_unreturned = self.logless.as_ref().map_or(0, |l| l.unreturned());
                if let Some((stamped, issued, arl)) = e.logless_stats() {
                    s.stamped_inodes = stamped as u64;
                    s.backup_bytes_issued = issued;
                    s.arl_size = arl as u64;
                }
                Res::Stats(s)
            }
            Op::Create(r) => attr(
                self.durable(
                    fx,
                    e.create(cred, soid(&r.parent)?, name(&r.name)?, r.perm, r.exclusive),
                )
                .await?,
            ),
            Op::Mknod(r) => attr(
                self.durable(
                    fx,
                    e.mknod(
                        cred,
                        soid(&r.parent)?,
                        name(&r.name)?,
                        ftype_from_pb(r.ftype)?,
                        r.perm,
                        r.rdev,
                    ),
                )
                .await?,
            ),
            Op::Mkdir(r) => attr(
                self.durable(fx, e.mkdir(cred, soid(&r.parent)?, name(&r.name)?, r.perm))
                    .await?,
            ),
            Op::Symlink(r) => {
                if r.target.len() > SYMLINK_MAX {
                    return Err(FsError::NameTooLong);
                }
                attr(
                    self.durable(
                        fx,
                        e.symlink(cred, soid(&r.parent)?, name(&r.name)?, &r.target),
                    )
                    .await?,
                )
            }
            Op::Unlink(r) => attr(
                self.durable(fx, e.unlink(cred, soid(&r.parent)?, name(&r.name)?))
                    .await?,
            ),
            Op::Rmdir(r) => attr(
                self.durable(fx, e.rmdir(cred, soid(&r.parent)?, name(&r.name)?))
                    .await?,
            ),
            // The replaced inode's attributes as they were, when a name
            // was replaced (the mount drops what it kept of it).
            Op::Rename(r) => replaced(
                self.durable(
                    fx,
                    e.rename(
                        cred,
                        soid(&r.old_parent)?,
                        name(&r.old_name)?,
                        soid(&r.new_parent)?,
                        name(&r.new_name)?,
                        rename_flags(&r),
                    ),
                )
                .await?,
            ),
            Op::Link(r) => attr(
                self.durable(
                    fx,
                    e.link(
                        cred,
                        soid(&r.soid)?,
                        soid(&r.new_parent)?,
                        name(&r.new_name)?,
                    ),
                )
                .await?,
            ),
            Op::Setattr(r) => {
                let (s, set) = setattr_from_pb(&r)?;
                let setattr = e.setattr_with(cred, s, &set, r.write_handle);
                attr(self.durable(fx, setattr).await?)
            }
            Op::Setxattr(r) => {
                if r.value.len() > XATTR_SIZE_MAX {
                    return Err(FsError::TooBig);
                }
                let flags = xattr_flags_from_pb(r.flags)?;
                done(
                    self.durable(
                        fx,
                        e.setxattr(cred, soid(&r.soid)?, xattr_name(&r.name)?, &r.value, flags),
                    )
                    .await?,
                )
            }
            Op::Removexattr(r) => done(
                self.durable(
                    fx,
                    e.removexattr(cred, soid(&r.soid)?, xattr_name(&r.name)?),
                )
                .await?,
            ),
            Op::Sync(r) if r.journal => {
                // fsync's promise (any caller: it reveals nothing): every
                // operation acknowledged before is on the disk itself. At
                // once when it already is (the journal's `fsync`; a
                // log-less single server, which has no journal: see the
                // protocol's SyncRequest), else on a blocking thread: one
                // journal sync, shared by the requests waiting meanwhile.
                if !e.journal_synced() {
                    let engine = e.clone();
                    tokio::task::spawn_blocking(move || engine.sync_journal())
                        .await
                        .map_err(|_| FsError::Io)??;
                }
                done(())
            }
            Op::Sync(r) => {
                let release = r.release_through > 0 && (e.is_logless() || e.is_member_logless());
                if release && e.written_back_lsn() >= r.release_through {
                    return Ok(done(()));
                }
                // Releasing one's backups is every client's right; a sync
                // for its own sake is an administrator's.
                if !release && !cred.is_root() && cred.uid != self.owner_uid() {
                    return Err(FsError::Perm);
                }
                let engine = e.clone();
                tokio::task::spawn_blocking(move || engine.sync())
                    .await
                    .map_err(|_| FsError::Io)?
                    .map_err(|err| {
                        tracing::error!(error = %err, "sync failed");
                        FsError::Io
                    })?;
                done(())
            }
        })
    }

    /// Who may run admin operations besides root: the owner of the root
    /// directory.
    fn owner_uid(&self) -> u32 {
        self.engine.getattr(Soid::ROOT).map(|a| a.uid).unwrap_or(0)
    }
}

/// Requests the session loop answers itself instead of in a task of their
/// own: point reads, which take microseconds and never wait. This saves a
/// task spawn and a wake-up per request (measured: 1.3 – 1.5× the getattr
/// and lookup throughput of one connection with 256 in flight, see
/// docs/BENCHMARKS.md). Reads that can take long (readdir, resolve,
/// listxattr) keep their task, so they run beside the session's other
/// requests; with the journal's `fsync`, mutations too: they wait for the
/// journal sync, which the session's other mutations must be able to
/// share. Mutations on a single server that wait for nothing
/// (`at_commit`: [`sextant_engine::Engine::acks_at_commit`] — log-less,
/// durable once the client has the reply, or the journal in the
/// background, durable once written, which the commit itself does) are
/// answered inline too (not on a cluster: a mutation there may wait for
/// a BORROW) (`sync` is not: it writes everything back). Inline is safe
/// for a mutation: the session loop is a task of its own, which a dropped
/// connection does not cancel. Only this server's part is inline: a
/// request forwarded for a local user (one another server holds) waits on
/// a task of its own.
fn answers_inline(r: &pb::Request, at_commit: bool) -> bool {
    match &r.op {
        Some(
            Op::Getattr(_)
            | Op::Lookup(_)
            | Op::Access(_)
            | Op::Readlink(_)
            | Op::Getxattr(_)
            | Op::Statfs(_),
        ) => true,
        Some(
            Op::Create(_)
            | Op::Mknod(_)
            | Op::Mkdir(_)
            | Op::Symlink(_)
            | Op::Unlink(_)
            | Op::Rmdir(_)
            | Op::Rename(_)
            | Op::Link(_)
            | Op::Setattr(_)
            | Op::Setxattr(_)
            | Op::Removexattr(_),
        ) => at_commit,
        _ => false,
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<pb::Response, Status>> + Send>>;
type SearchStream = Pin<Box<dyn Stream<Item = Result<pb::SearchBatch, Status>> + Send>>;
type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchBatch, Status>> + Send>>;

/// How often a Session stream checks whether to send a log-less notice.
const NOTICE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Batches a search may have queued for a slow reader before it waits.
const SEARCH_QUEUE: usize = 4;

fn error_batch(error: pb::Error) -> pb::SearchBatch {
    pb::SearchBatch {
        error: Some(error),
        ..Default::default()
    }
}

impl Shared {
    /// The `Search` RPC: decode and validate, then run the engine search on
    /// a blocking thread, streaming batches through a small queue (a slow
    /// reader makes the search wait; a gone reader or shutdown stops it at
    /// the next hit). Holds one global in-flight permit while it runs.
    /// A search the caller asks to run on another server of the cluster
    /// (`SearchRequest.forward_to`), as the caller this server admitted:
    /// sent there with the cluster secret, its batches passed back. Only
    /// to an address of the route map.
    async fn forward_search(&self, mut req: pb::SearchRequest) -> Result<SearchStream, Status> {
        let to = std::mem::take(&mut req.forward_to);
        let known = sextant_proto::route::RouteTable::from_pb(&self.placement.map())
            .is_ok_and(|t| t.routes().iter().any(|r| r.address == to));
        if !known {
            return Err(Status::invalid_argument(format!(
                "forward_to: {to} is no server of this cluster's route map"
            )));
        }
        let Some(peers) = &self.peers else {
            return Err(Status::failed_precondition(
                "this server cannot reach the others",
            ));
        };
        metrics::counter!("sextant_searches_forwarded_total").increment(1);
        let (stream, silent_for) = peers.search(&to, req).await?;
        Ok(keep_alive::bounded(stream, to, silent_for))
    }

    /// `confined`: for a key limited to a subtree, whose `done` then
    /// carries no figure about the store (tables visited, candidates),
    /// only its own hits' count and size. `whole`: the answer is the
    /// whole namespace's (`done.gathered`: one server, asked to gather).
    async fn search(
        self: Arc<Self>,
        req: pb::SearchRequest,
        confined: bool,
        whole: bool,
    ) -> Result<mpsc::Receiver<Result<pb::SearchBatch, Status>>, Status> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let arrived = std::time::Instant::now();
        if let Some(ll) = &self.logless {
            ll.wait_ready().await;
        }
        let permit = Arc::clone(&self.in_flight)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        let (tx, rx) = mpsc::channel(SEARCH_QUEUE);
        let (cred, spec) = match sextant_proto::search::spec_from_pb(req) {
            Ok(x) => x,
            Err(e) => {
                metrics::counter!("sextant_requests_total", "op" => "search", "outcome" => "error")
                    .increment(1);
                let _ = tx.send(Ok(error_batch(e.to_pb()))).await;
                return Ok(rx);
            }
        };
        let shared = Arc::clone(&self);
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let shutdown = shared.shutdown.clone();
            let cancelled = || tx.is_closed() || *shutdown.borrow();
            // What this server kept of the others' directories (and the
            // paths it remembered through them) is checked first.
            // Not for root's totals from `/`, which read none of them.
            let ancestry_free = spec.limit == 0
                && (spec.count_only || spec.group_by.is_some())
                && matches!(spec.scope, sextant_proto::search::SearchScope::Soid(root)
                    if sextant_engine::search::tally_needs_no_ancestry(&cred, root, &spec.expr, spec.group_by));
            let checked = shared
                .peers
                .as_ref()
                .filter(|_| crate::peers::keeping() && !ancestry_free)
                .and_then(|peers| {
                    peers.check_epochs(&shared.engine, shared.placement.as_ref(), &runtime)
                });
            let remembering = checked.is_some();
            let peer_dirs = shared.peers.as_ref().map(|peers| {
                crate::peers::PeerDirs::new(
                    Arc::clone(peers),
                    Arc::clone(&shared.placement),
                    runtime,
                    checked,
                )
            });
            let foreign: &(dyn sextant_engine::search::ForeignDirs + Sync) = match &peer_dirs {
                Some(p) => p,
                None => &crate::peers::NoPeers,
            };
            crate::fault::search_part(&spec, false);
            let result = if crate::fault::search_rendezvous() {
                search::execute(
                    &shared.engine,
                    &cred,
                    &spec,
                    foreign,
                    remembering,
                    cancelled,
                    |hits| {
                        let batch = pb::SearchBatch {
                            hits: hits.iter().map(sextant_proto::search::hit_to_pb).collect(),
                            ..Default::default()
                        };
                        match tx.blocking_send(Ok(batch)) {
                            Ok(()) => {
                                crate::fault::search_part(&spec, true);
                                std::ops::ControlFlow::Continue(())
                            }
                            Err(_) => std::ops::ControlFlow::Break(()),
                        }
                    },
                )
            } else {
                // (A test-only fault point: the searches it waited for
                // did not come.)
                Err(FsError::Io)
            };
            let (last, outcome) = match result {
                Ok(done) => {
                    // Groups first, in batches that fit a message.
                    let mut groups = Vec::new();
                    let mut bytes = 0;
                    for (k, t) in &done.groups {
                        groups.push(sextant_proto::search::group_to_pb(k, t));
                        bytes += 64
                            + match k {
                                sextant_engine::search::GroupKey::Extension(e)
                                | sextant_engine::search::GroupKey::Directory(e) => e.len(),
                                _ => 0,
                            };
                        if bytes >= sextant_proto::search::MAX_BATCH_BYTES {
                            bytes = 0;
                            let _ = tx.blocking_send(Ok(pb::SearchBatch {
                                groups: std::mem::take(&mut groups),
                                ..Default::default()
                            }));
                        }
                    }
                    (
                        pb::SearchBatch {
                            groups,
                            done: Some({
                                let mut d = sextant_proto::search::done_to_pb(&done);
                                if confined {
                                    // The ranges not held here (a spread
                                    // search's, to ask their holders): SOID
                                    // spans, no figure about the store.
                                    d = pb::SearchDone {
                                        count: d.count,
                                        total_size: d.total_size,
                                        not_held: d.not_held,
                                        ..Default::default()
                                    };
                                }
                                d.gathered = whole;
                                d
                            }),
                            ..Default::default()
                        },
                        "ok",
                    )
                }
                Err(e) => (error_batch(error_to_pb(e)), "error"),
            };
            // A read of another server's directories that gave up (a
            // table in transit past `peers::READ_FOR`, a peer that does
            // not answer) ends the search with its reason, not a bare EIO.
            if let Some(why) = peer_dirs.as_ref().and_then(|p| p.gave_up()) {
                let _ = tx.blocking_send(Err(Status::aborted(format!(
                    "the search could not finish on this server: {why}"
                ))));
            } else {
                let _ = tx.blocking_send(Ok(last));
            }
            tracing::debug!(
                target: "sextant::search_timing",
                queued_us = (started - arrived).as_micros() as u64,
                run_us = started.elapsed().as_micros() as u64,
                spread = !spec.ranges.is_empty(),
                "search done"
            );
            metrics::counter!("sextant_requests_total", "op" => "search", "outcome" => outcome)
                .increment(1);
            metrics::histogram!("sextant_request_seconds", "op" => "search")
                .record(started.elapsed().as_secs_f64());
            drop(permit);
        });
        Ok(rx)
    }
}

impl Shared {
    /// The `Search` RPC once its caller was admitted: the scope clamped to
    /// a confined key's subtree, then forwarded, gathered or run here.
    async fn open_search(
        self: Arc<Self>,
        caller: Caller,
        mut req: pb::SearchRequest,
    ) -> Result<SearchStream, Status> {
        if let Some(path) = caller.confined_to() {
            let engine = &self.engine;
            let scoped = match crate::confine::search_scope(&Walk::local(engine), path, &mut req) {
                Err(CheckError::NeedsPeers) => {
                    let kept = self.across_kept(|walk| {
                        let mut r = req.clone();
                        crate::confine::search_scope(walk, path, &mut r).map(|()| r)
                    });
                    match kept {
                        Some(scoped) => scoped.map(|r| req = r),
                        None => {
                            let shared = Arc::clone(&self);
                            let (path, mut r) = (path.to_string(), req.clone());
                            shared
                                .across(move |walk| {
                                    crate::confine::search_scope(walk, &path, &mut r).map(|()| r)
                                })
                                .await
                                .map(|r| req = r)
                        }
                    }
                }
                c => c.map_err(CheckError::decided),
            };
            if let Err(e) = scoped {
                // Answered as the engine answers a scope it cannot
                // resolve: one batch with the errno.
                if e == FsError::Access {
                    caller.refused_outside("search");
                }
                let batch = error_batch(error_to_pb(e));
                return Ok(Box::pin(tokio_stream::once(Ok(batch))));
            }
        }
        if !req.forward_to.is_empty() {
            return self.forward_search(req).await;
        }
        let confined = caller.confined_to().is_some();
        let rx = if req.gather {
            Arc::clone(&self).gather(req, confined).await?
        } else {
            Arc::clone(&self).search(req, confined, false).await?
        };
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

#[tonic::async_trait]
impl pb::sextant_server::Sextant for Service {
    type SessionStream = ResponseStream;
    type SearchStream = SearchStream;
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let shared = &self.shared;
        if *shared.shutdown.borrow() {
            return Err(Status::unavailable("the server is shutting down"));
        }
        let caller = caller_of(&request)?;
        if !caller.may_watch() {
            return Err(Status::permission_denied(
                "watching changes needs the cluster secret",
            ));
        }
        // A key limited to a subtree sees its subtree's changes only.
        let filter = caller.confined_to().map(|p| {
            let peered = shared.peers.as_ref().map(|peers| crate::confine::Peered {
                peers: Arc::clone(peers),
                placement: Arc::clone(&shared.placement),
                runtime: tokio::runtime::Handle::current(),
            });
            crate::confine::watch_filter(shared.engine.clone(), p.to_string(), peered)
        });
        let mut rx = shared.watchers.watch(
            &shared.engine,
            request.into_inner().origin,
            shared.shutdown.clone(),
            filter,
        );
        if let Caller::Key(grant) = caller {
            rx = cut_on_revocation(rx, Arc::clone(&shared.keys), grant);
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn search(
        &self,
        request: Request<pb::SearchRequest>,
    ) -> Result<Response<Self::SearchStream>, Status> {
        if *self.shared.shutdown.borrow() {
            return Err(Status::unavailable("the server is shutting down"));
        }
        let caller = caller_of(&request)?;
        let mut req = request.into_inner();
        if let Err(e) = caller.admit_search(&mut req) {
            return Err(Status::permission_denied(format!(
                "search refused: {e} (errno {})",
                e.errno()
            )));
        }
        if req.keep_alive {
            // Answered at once, keep-alives announced; the search starts
            // behind them (`service::keep_alive`).
            let opened = Arc::clone(&self.shared).open_search(caller, req);
            let mut response = Response::new(keep_alive::pump(opened));
            let every = sextant_proto::search::KEEP_ALIVE_EVERY
                .as_millis()
                .to_string();
            if let Ok(v) = every.parse() {
                response
                    .metadata_mut()
                    .insert(sextant_proto::search::KEEP_ALIVE_HEADER, v);
            }
            return Ok(response);
        }
        let stream = Arc::clone(&self.shared).open_search(caller, req).await?;
        Ok(Response::new(stream))
    }

    async fn revoke_dirs(
        &self,
        request: Request<pb::RevokeDirsRequest>,
    ) -> Result<Response<pb::RevokeDirsReply>, Status> {
        if !caller_of(&request)?.may_read_directories() {
            return Err(Status::permission_denied(
                "revoking directory leases needs the cluster secret",
            ));
        }
        if let Some(peers) = &self.shared.peers {
            peers.leases.held.lock().revoke_all();
            metrics::counter!("sextant_dir_leases_revoked_total").increment(1);
        }
        Ok(Response::new(pb::RevokeDirsReply {}))
    }

    async fn map(
        &self,
        request: Request<pb::MapRequest>,
    ) -> Result<Response<pb::RouteMap>, Status> {
        let placement = &self.shared.placement;
        Ok(Response::new(if request.get_ref().merged {
            placement.merged_map()
        } else {
            placement.map()
        }))
    }

    async fn dir_chain(
        &self,
        request: Request<pb::DirChainRequest>,
    ) -> Result<Response<pb::DirChainReply>, Status> {
        if !caller_of(&request)?.may_read_directories() {
            return Err(Status::permission_denied(
                "reading directories raw needs the cluster secret",
            ));
        }
        let request = request.into_inner();
        let what = match (
            request.dir.is_none() && request.more.is_empty(),
            request.links,
        ) {
            (true, _) => "epoch",
            (false, true) => "links",
            (false, false) => "chain",
        };
        metrics::counter!("sextant_dir_chain_served_total", "what" => what).increment(1);
        if request.dir.is_none() && request.more.is_empty() {
            // Only the epoch (a search checking what it kept), with a
            // lease granted before the epoch is read (crate::dir_leases).
            let lease = match (&self.shared.peers, request.lease_for.is_empty()) {
                (Some(peers), false) if crate::dir_leases::granting() => {
                    peers.leases.grant(&request.lease_for)
                }
                _ => std::time::Duration::ZERO,
            };
            return Ok(Response::new(pb::DirChainReply {
                dir_epoch: self.shared.engine.dir_epoch(),
                incarnation: crate::peers::incarnation(),
                lease_ms: u32::try_from(lease.as_millis()).unwrap_or(u32::MAX),
                ..Default::default()
            }));
        }
        let dir = soid_from_pb(request.dir.as_ref())
            .map_err(|_| Status::invalid_argument("dir is missing"))?;
        if request.links {
            if !request.more.is_empty() {
                return Err(Status::invalid_argument("links are asked of one inode"));
            }
            let shared = Arc::clone(&self.shared);
            let reply =
                tokio::task::spawn_blocking(move || crate::peers::links_reply(&shared.engine, dir))
                    .await
                    .map_err(|_| Status::internal("the links read failed"))?;
            return Ok(Response::new(reply));
        }
        // Many at once (a search's batch), or `dir` alone.
        let mut dirs = vec![dir];
        for d in &request.more {
            dirs.push(
                soid_from_pb(Some(d))
                    .map_err(|_| Status::invalid_argument("a malformed directory"))?,
            );
        }
        let batch = !request.more.is_empty();
        let shared = Arc::clone(&self.shared);
        let budget = sextant_proto::MAX_MESSAGE_BYTES / 2;
        // The epoch after the reads: if it is the one the asker checked,
        // no directory changed here in between.
        let (chains, dir_epoch) = tokio::task::spawn_blocking(move || {
            let chains = shared.engine.dir_chains(&dirs, budget);
            (chains, shared.engine.dir_epoch())
        })
        .await
        .map_err(|_| Status::internal("the directory read failed"))?;
        let reply = match chains {
            Ok(c) => pb::DirChainReply {
                dir_epoch,
                incarnation: crate::peers::incarnation(),
                not_held: c.not_held.first() == Some(&dir),
                dirs: c.records.iter().map(crate::peers::record_to_pb).collect(),
                // 0 for `dir` alone: as a server that predates batches.
                answered: if batch {
                    u32::try_from(c.answered).unwrap_or(u32::MAX)
                } else {
                    0
                },
                not_held_dirs: if batch {
                    c.not_held.into_iter().map(soid_to_pb).collect()
                } else {
                    Vec::new()
                },
                ..Default::default()
            },
            Err(e) => pb::DirChainReply {
                error: Some(sextant_proto::error_to_pb(e)),
                ..Default::default()
            },
        };
        Ok(Response::new(reply))
    }

    async fn keys(
        &self,
        request: Request<pb::KeysRequest>,
    ) -> Result<Response<pb::KeysReply>, Status> {
        if !caller_of(&request)?.may_manage_keys() {
            return Err(Status::permission_denied(
                "managing client keys needs the cluster secret",
            ));
        }
        let keys = Arc::clone(&self.shared.keys);
        let op = request.into_inner().op;
        let reply = tokio::task::spawn_blocking(move || crate::clientkeys::manage(&keys, op))
            .await
            .map_err(|_| Status::internal("the key book task failed"))??;
        Ok(Response::new(reply))
    }

    async fn ticket(
        &self,
        request: Request<pb::TicketRequest>,
    ) -> Result<Response<pb::TicketReply>, Status> {
        let caller = caller_of(&request)?;
        let local = request
            .extensions()
            .get::<crate::auth::LocalPeer>()
            .is_some();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let reply = crate::auth::issue_ticket(
            &caller,
            local,
            &self.shared.ticket_master,
            &self.shared.issuer,
            now,
        )?;
        Ok(Response::new(reply))
    }

    async fn recover(
        &self,
        request: Request<pb::RecoverRequest>,
    ) -> Result<Response<pb::RecoverReply>, Status> {
        let shared = &self.shared;
        let reply = match &shared.logless {
            // Blocking: backups for another member go to the shared store.
            Some(ll) => {
                tokio::task::block_in_place(|| ll.recover(&shared.engine, request.into_inner()))?
            }
            None => pb::RecoverReply {
                outcome: pb::RecoverOutcome::RecoverNotNeeded as i32,
                incarnation: 0,
            },
        };
        Ok(Response::new(reply))
    }

    async fn session(
        &self,
        request: Request<Streaming<pb::Request>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        // Every request of the stream runs as its caller (see crate::auth).
        let caller = caller_of(&request)?;
        // A session admitted with an identity ticket ends when it expires.
        let expires = request
            .extensions()
            .get::<crate::auth::TicketExpiry>()
            .map(|t| t.0);
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel::<Result<pb::Response, Status>>(1024);
        let shared = Arc::clone(&self.shared);
        let mut shutdown = shared.shutdown.clone();
        // A key's session ends when the key is revoked or rotated.
        let grant = match &caller {
            Caller::Key(g) => Some(g.clone()),
            _ => None,
        };
        let mut key_changes = shared.keys.subscribe();
        tokio::spawn(async move {
            let live = |shared: &Shared| grant.as_ref().is_none_or(|g| shared.keys.is_live(g));
            if !live(&shared) {
                let _ = tx.send(Err(key_revoked())).await;
                return;
            }
            // Ends once the key is revoked or rotated (or the book is
            // gone). One future for the whole stream, not a new
            // `changed()` per message: a request pays no waiter
            // registered and dropped on the book's notifier.
            let revocation = async {
                while key_changes.changed().await.is_ok() {
                    if !live(&shared) {
                        return;
                    }
                }
            };
            tokio::pin!(revocation);
            let expiry = tokio::time::sleep(expires.map_or(std::time::Duration::ZERO, |t| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                std::time::Duration::from_secs(t.saturating_sub(now))
            }));
            tokio::pin!(expiry);
            let slots = Arc::new(Semaphore::new(SESSION_IN_FLIGHT));
            // Log-less: a notice when the written-back watermark moves.
            let mut notices = tokio::time::interval(NOTICE_INTERVAL);
            let mut noticed = 0;
            let mut revoked = false;
            let mut expired = false;
            // Mutations wait for nothing after their commit here: a
            // single server whose engine acknowledges at commit (see
            // answers_inline).
            let at_commit = shared.engine.acks_at_commit()
                && shared.peers.is_none()
                && !shared.placement.can_borrow();
            loop {
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    break;
                };
                let Ok(global) = Arc::clone(&shared.in_flight).acquire_owned().await else {
                    break;
                };
                let next = tokio::select! {
                    m = inbound.message() => Some(m),
                    _ = shutdown.wait_for(|stop| *stop) => break,
                    _ = notices.tick(), if shared.logless.is_some() => None,
                    () = &mut revocation, if grant.is_some() && !revoked => {
                        revoked = true;
                        None
                    }
                    () = &mut expiry, if expires.is_some() && !expired => {
                        expired = true;
                        None
                    }
                };
                if expired {
                    // UNAVAILABLE, not UNAUTHENTICATED: the client
                    // reconnects with its renewed ticket and retries.
                    metrics::counter!("sextant_auth_ticket_sessions_expired_total").increment(1);
                    let _ = tx
                        .send(Err(Status::unavailable(
                            "the identity ticket this session was opened with expired; open a \
                             new one",
                        )))
                        .await;
                    break;
                }
                if revoked {
                    metrics::counter!("sextant_auth_streams_cut_total").increment(1);
                    let _ = tx.send(Err(key_revoked())).await;
                    break;
                }
                let Some(next) = next else {
                    let w = shared.engine.written_back_lsn();
                    let notice = match &shared.logless {
                        Some(ll) if w != noticed => ll.notice(&shared.engine),
                        _ => None,
                    };
                    if notice.is_some() {
                        noticed = w;
                    }
                    if let Some(n) = notice {
                        if tx.send(Ok(n)).await.is_err() {
                            break;
                        }
                    }
                    continue;
                };
                let next = match next.map(|r| r.map(|r| (r.id, caller.admit_op(r)))) {
                    Ok(Some((id, Err(e)))) => {
                        // Refused by the key's limits: answered, not run.
                        drop((permit, global));
                        if tx.send(Ok(reply(id, Err(e)))).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    Ok(Some((_, Ok(req)))) => Ok(Some(req)),
                    Ok(None) => Ok(None),
                    Err(status) => Err(status),
                };
                match next {
                    Ok(Some(req)) if answers_inline(&req, at_commit) => {
                        // See answers_inline: microseconds, no waiting —
                        // but what waits for another server (a forward, a
                        // confined check across them) runs on a task of
                        // its own, so the loop reads on.
                        match Arc::clone(&shared).handle_here(req, &caller).await {
                            Handled::Answered(resp) => {
                                drop((permit, global));
                                if tx.send(Ok(resp)).await.is_err() {
                                    break;
                                }
                            }
                            later => {
                                let tx = tx.clone();
                                let shared = Arc::clone(&shared);
                                let caller = caller.clone();
                                tokio::spawn(async move {
                                    let resp = shared.finish(later, &caller).await;
                                    let _ = tx.send(Ok(resp)).await;
                                    drop((permit, global));
                                });
                            }
                        }
                    }
                    Ok(Some(req)) => {
                        let tx = tx.clone();
                        let shared = Arc::clone(&shared);
                        let caller = caller.clone();
                        tokio::spawn(async move {
                            let resp = shared.handle_for(req, &caller).await;
                            let _ = tx.send(Ok(resp)).await;
                            drop((permit, global));
                        });
                    }
                    Ok(None) => break,
                    Err(status) => {
                        // A bad frame (e.g. over the size limit) ends this
                        // stream only; requests already running still reply.
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn call(&self, request: Request<pb::Request>) -> Result<Response<pb::Response>, Status> {
        if *self.shared.shutdown.borrow() {
            return Err(Status::unavailable("the server is shutting down"));
        }
        let caller = caller_of(&request)?;
        let shared = Arc::clone(&self.shared);
        let _global = Arc::clone(&shared.in_flight)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        let req = request.into_inner();
        let id = req.id;
        let req = match caller.admit_op(req) {
            Ok(req) => req,
            Err(e) => return Ok(Response::new(reply(id, Err(e)))),
        };
        let resp = tokio::spawn(async move { shared.handle_for(req, &caller).await })
            .await
            .map_err(|e| Status::internal(format!("request task failed: {e}")))?;
        Ok(Response::new(resp))
    }
}
