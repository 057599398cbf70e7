//! Who a call comes from, and which identity its requests run as.
//!
//! Two ways in, each with its own interceptor ([`tcp`], [`unix`]):
//!
//! - **TCP** (and TLS): the cluster secret (`x-sextant-secret`) or a
//!   client key's proof (`x-sextant-key`..., see [`crate::clientkeys`])
//!   must come with every call. The secret's holder is
//!   [`Caller::Trusted`]: the credentials its requests carry are used as
//!   claimed (it is the admin key). A key's holder is [`Caller::Key`]:
//!   the credentials its requests carry are used if the key's limits
//!   allow them (uids, gids, after root squash), else the request fails
//!   with EPERM (counted, logged); a read-only key's mutations fail with
//!   EROFS; it may not read directories raw nor manage keys. A key with a
//!   path limit is confined to that subtree ([`Caller::confined_to`],
//!   enforced by [`crate::confine`]: requests, searches, its watch).
//! - **The local Unix socket**: the kernel tells who the peer is
//!   (`SO_PEERCRED`, taken when it connected). A peer that presents the
//!   secret, or whose uid is 0 (root can read the secret anyway), is
//!   trusted as above. Any other peer is [`Caller::Kernel`]: every request
//!   runs as its uid and gid, with the supplementary groups the system's
//!   database gives that user ([`GroupDb`], `getgrouplist`, as NFS's
//!   `manage-gids`) — whatever the request claims. A claim other than that
//!   identity is counted and logged (target `audit`), and ignored.
//!   The socket's frame door (`crate::frame_door`, a second socket beside
//!   it) admits its connections by the same rule, in the same code
//!   ([`frame_caller`]), from the secret of the connection's first frame
//!   (no client keys there).
//! - **Identity tickets** (on a cluster, so that a local user's client
//!   reaches every server directly, not through its own server's
//!   forwarding): a [`Caller::Kernel`] peer of the Unix socket may ask for
//!   a ticket ([`issue_ticket`], the `Ticket` RPC): a body naming its
//!   uid, gid, groups, an expiry ([`TICKET_LIFETIME`]), a nonce and this
//!   server, and the body's key, `HMAC-SHA256(ticket master, body)`, the
//!   master derived from the cluster secret (`keyauth::ticket_master`).
//!   The key travels on the Unix socket only. The client proves it to any
//!   server over TCP as a client key's, under the name `t1.` +
//!   base64url(body) (`sextant_types::ticket`); the server re-derives the
//!   key from the body, checks the proof as a key's (MAC, time window,
//!   audience, nonce), and the expiry — the caller is then
//!   [`Caller::Kernel`] with the ticket's identity, as on the socket.
//!   Nothing is revoked: a change to the user's groups reaches other
//!   servers within the ticket's lifetime.
//!
//! Invariants:
//! - every call that reaches the service carries a [`Caller`] in its
//!   extensions: the interceptors put one there or refuse the call, and
//!   the service refuses a call without one ([`caller_of`]);
//! - a [`Caller::Kernel`] request never runs as uid 0 (its uid is the
//!   kernel's, and a root peer is never `Kernel`);
//! - a wrong secret is refused on either transport (never "downgraded" to
//!   a kernel identity), so a client that means to be trusted learns it is
//!   not; so is a proof that fails (unknown key, wrong MAC, time outside
//!   the window, nonce used before);
//! - a [`Caller::Key`] request never runs with an identity its limits do
//!   not allow, and never mutates with a read-only key;
//! - a ticket is issued only to a [`Caller::Kernel`] peer of the Unix
//!   socket ([`LocalPeer`]), never over TCP (a ticket's holder cannot
//!   renew it there: its identity ages out) and never for uid 0; a ticket
//!   for uid 0 is refused whoever made it.

use crate::clientkeys::{Grant, KeyBook, NOBODY};
use crate::secret;
use parking_lot::Mutex;
use sextant_proto::keyauth;
use sextant_proto::pb;
use sextant_proto::pb::request::Op;
use sextant_proto::SECRET_METADATA;
use sextant_types::{Credentials, FsError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Request, Status};

/// The message a client gets for a missing or wrong secret.
pub const AUTH_FAILED: &str = "authentication failed: wrong cluster secret";

/// How long an identity ticket is good for: also how long a change to a
/// user's groups in the system's database may take to reach the other
/// servers of a cluster (the issuing server's own [`GroupDb`] follows it
/// within [`GROUPS_TTL`]).
pub const TICKET_LIFETIME: Duration = Duration::from_secs(300);

/// Put in a call's extensions by the Unix socket's interceptor: the call
/// came from a peer on this machine (only such a call gets a ticket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalPeer;

/// Put in a call's extensions when it was admitted with an identity
/// ticket: when the ticket expires (Unix seconds). A stream admitted so
/// ends then (the client opens a new one with its renewed ticket), so
/// that no session outlives the identity it was admitted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketExpiry(pub u64);

/// Who a call comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The secret's holder, or root on this machine: requests run with the
    /// credentials they carry.
    Trusted(Trust),
    /// A local user on the Unix socket: every request runs as this.
    Kernel(Credentials),
    /// A client key's holder: requests run as claimed within its limits.
    Key(Grant),
}

/// Why a caller is trusted (for metrics and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// It presented the cluster secret.
    Secret,
    /// A Unix-socket peer with uid 0, without the secret.
    RootPeer,
}

impl Caller {
    fn label(&self) -> &'static str {
        match self {
            Caller::Trusted(Trust::Secret) => "secret",
            Caller::Trusted(Trust::RootPeer) => "root",
            Caller::Kernel(_) => "kernel",
            Caller::Key(_) => "key",
        }
    }

    /// Runs `req` as this caller: its credentials admitted, or the errno
    /// the request fails with (a key's limits).
    pub fn admit_op(&self, mut req: pb::Request) -> Result<pb::Request, FsError> {
        match self {
            Caller::Trusted(_) => Ok(req),
            Caller::Kernel(_) => Ok(self.admitted(req)),
            Caller::Key(g) => {
                let what = req.op.as_ref().map_or("none", |op| op.name());
                let mutation = req.op.as_ref().is_some_and(is_mutation);
                req.cred = admit_key(g, req.cred.take(), what, mutation)?;
                Ok(req)
            }
        }
    }

    /// The subtree this caller is confined to: a client key's `--path`
    /// (see [`crate::confine`]); `None` for every other caller.
    pub fn confined_to(&self) -> Option<&str> {
        match self {
            Caller::Key(g) => g.limits.path.as_deref(),
            _ => None,
        }
    }

    /// Notes (counts, audit-logs) that a confined caller's `what` was
    /// refused for naming something outside its subtree.
    pub fn refused_outside(&self, what: &str) {
        if let Caller::Key(g) = self {
            refused_key(
                g,
                "key-path",
                &format!("{what}: outside the key's subtree (EACCES)"),
            );
        }
    }

    /// May this caller manage client keys (`Keys`)? The cluster secret's
    /// holder (or root on this machine) only.
    pub fn may_manage_keys(&self) -> bool {
        match self {
            Caller::Trusted(_) => true,
            Caller::Kernel(k) => {
                refused(
                    "keys",
                    k.uid,
                    "managing client keys needs the cluster secret",
                );
                false
            }
            Caller::Key(g) => {
                refused_key(g, "keys", "managing client keys needs the cluster secret");
                false
            }
        }
    }

    /// The credentials a request runs with, given what it claims (`what`
    /// names the request in the audit line of a refused claim).
    /// (A [`Caller::Key`]'s claim is checked by [`Caller::admit_op`] and
    /// [`Caller::admit_search`], which can refuse; here it passes as is.)
    pub fn admit(&self, claim: Option<pb::Credentials>, what: &str) -> Option<pb::Credentials> {
        match self {
            Caller::Trusted(_) | Caller::Key(_) => claim,
            Caller::Kernel(k) => {
                if let Some(c) = &claim {
                    if claims_more(c, k) {
                        refused_claim(k, c, what);
                    }
                }
                Some(sextant_proto::cred_to_pb(k))
            }
        }
    }

    /// Runs `req` as this caller ([`Caller::admit`] on its credentials).
    pub fn admit_request(&self, req: &mut pb::Request) {
        if matches!(self, Caller::Kernel(_)) {
            let what = req.op.as_ref().map_or("none", |op| op.name());
            req.cred = self.admit(req.cred.take(), what);
        }
    }

    /// [`Caller::admit_request`], by value.
    pub fn admitted(&self, mut req: pb::Request) -> pb::Request {
        self.admit_request(&mut req);
        req
    }

    /// Runs a search as this caller; a key's claim outside its limits
    /// fails (EPERM).
    pub fn admit_search(&self, req: &mut pb::SearchRequest) -> Result<(), FsError> {
        match self {
            Caller::Trusted(_) => {}
            Caller::Kernel(_) => req.cred = self.admit(req.cred.take(), "search"),
            Caller::Key(g) => req.cred = admit_key(g, req.cred.take(), "search", false)?,
        }
        Ok(())
    }

    /// May this caller read directories raw (`DirChain`: names and modes
    /// whoever may see them, for another server's search)? The trusted
    /// only.
    pub fn may_read_directories(&self) -> bool {
        match self {
            Caller::Trusted(_) => true,
            Caller::Kernel(k) => {
                refused(
                    "dir-chain",
                    k.uid,
                    "reading directories raw needs the cluster secret",
                );
                false
            }
            Caller::Key(g) => {
                refused_key(
                    g,
                    "dir-chain",
                    "reading directories raw needs the cluster secret",
                );
                false
            }
        }
    }

    /// May this caller watch every change (`Watch`, what a mount's caches
    /// follow)? The stream names every changed inode and entry, whoever
    /// may see them: the trusted, and a key's holder (a mount on a client
    /// node; its stream ends when the key is revoked; a key confined to a
    /// subtree gets that subtree's changes only, see [`crate::confine`]).
    pub fn may_watch(&self) -> bool {
        match self {
            Caller::Trusted(_) | Caller::Key(_) => true,
            Caller::Kernel(k) => {
                refused("watch", k.uid, "watching changes needs the cluster secret");
                false
            }
        }
    }
}

/// Does `claim` ask for more than `kernel` gives: another uid or gid, or a
/// group the user is not in? (Fewer groups is no more power: not a refused
/// claim, though the kernel identity is used all the same.)
pub fn claims_more(claim: &pb::Credentials, kernel: &Credentials) -> bool {
    claim.uid != kernel.uid
        || claim.gid != kernel.gid
        || claim.groups.iter().any(|g| !kernel.in_group(*g))
}

/// Does `op` change the namespace (refused to a read-only key)? Every
/// exactly-once mutation but `Sync`, which changes nothing: a read-only
/// key may ask for durability.
pub fn is_mutation(op: &Op) -> bool {
    op.is_mutation() && !matches!(op, Op::Sync(_))
}

/// A key holder's claim, as its limits let it run: root squashed first
/// (uid, gid and group 0 become [`NOBODY`], which the key then always
/// allows), then every id must be in the key's ranges — else EPERM, and an
/// audit line. A read-only key's mutation is EROFS. A missing claim stays
/// missing (the request fails with EINVAL).
pub fn admit_key(
    g: &Grant,
    claim: Option<pb::Credentials>,
    what: &str,
    mutation: bool,
) -> Result<Option<pb::Credentials>, FsError> {
    let l = &g.limits;
    if mutation && l.read_only {
        refused_key(g, "key-read-only", &format!("{what}: the key is read-only"));
        return Err(FsError::ReadOnly);
    }
    let Some(mut c) = claim else {
        return Ok(None);
    };
    // An id passes squashed (root, with root squash: then NOBODY, which
    // the key always allows) or in the key's ranges. Judged on the claim
    // as sent (kept for the audit line), squashed only once allowed: no
    // copy of the claim per request.
    let squashed = |id: u32| l.root_squash && id == 0;
    let ok = (squashed(c.uid) || l.allows_uid(c.uid))
        && (squashed(c.gid) || l.allows_gid(c.gid))
        && c.groups
            .iter()
            .all(|&grp| squashed(grp) || l.allows_gid(grp));
    if !ok {
        refused_key_claim(g, &c, what);
        return Err(FsError::Perm);
    }
    for id in std::iter::once(&mut c.uid)
        .chain(std::iter::once(&mut c.gid))
        .chain(c.groups.iter_mut())
    {
        if squashed(*id) {
            *id = NOBODY;
        }
    }
    Ok(Some(c))
}

/// The [`Caller`] the interceptor attached to `request`; a call without
/// one is refused (it did not come through [`tcp`] or [`unix`]).
pub fn caller_of<T>(request: &Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("no caller identity"))
}

/// What the secret metadata of a call says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SecretGiven {
    Right,
    Wrong,
    Absent,
}

fn secret_given(req: &Request<()>, secret: &[u8]) -> SecretGiven {
    secret_in(
        req.metadata().get(SECRET_METADATA).map(|v| v.as_bytes()),
        secret,
    )
}

/// What a secret presented (`None`: none) says.
fn secret_in(given: Option<&[u8]>, secret: &[u8]) -> SecretGiven {
    match given {
        None => SecretGiven::Absent,
        Some(v) if secret::equal(v, secret) => SecretGiven::Right,
        Some(_) => SecretGiven::Wrong,
    }
}

/// The gRPC path of a call (`/sextant.v1.Sextant/Call`), put in its
/// extensions by [`WithCallPath`] before the interceptor runs (a key's
/// proof covers it).
#[derive(Debug, Clone)]
pub struct CallPath(pub String);

/// Wraps a service so that each call's extensions carry its [`CallPath`].
#[derive(Debug, Clone)]
pub struct WithCallPath<S>(pub S);

impl<S, B> tonic::codegen::Service<tonic::codegen::http::Request<B>> for WithCallPath<S>
where
    S: tonic::codegen::Service<tonic::codegen::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut req: tonic::codegen::http::Request<B>) -> Self::Future {
        let path = CallPath(req.uri().path().to_string());
        req.extensions_mut().insert(path);
        self.0.call(req)
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for WithCallPath<S> {
    const NAME: &'static str = S::NAME;
}

/// The key proof a call carries: `None` without one, `Some(Err)` for a
/// malformed one.
fn proof_of(req: &Request<()>) -> Option<Result<keyauth::Proof, ()>> {
    let m = req.metadata();
    let name = m.get(keyauth::KEY_METADATA)?;
    let text = |k: &str| m.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    Some((|| {
        Ok(keyauth::Proof {
            name: name.to_str().map_err(|_| ())?.to_string(),
            time: text(keyauth::TIME_METADATA)
                .and_then(|t| t.parse().ok())
                .ok_or(())?,
            nonce: text(keyauth::NONCE_METADATA).ok_or(())?,
            mac: text(keyauth::MAC_METADATA).ok_or(())?,
            audience: text(keyauth::AUDIENCE_METADATA).unwrap_or_default(),
        })
    })())
}

/// The caller of a call with a key proof: [`Caller::Key`], or the status
/// it is refused with (counted, audit-logged).
fn key_caller(
    req: &Request<()>,
    proof: Result<keyauth::Proof, ()>,
    keys: &KeyBook,
    master: &[u8; keyauth::KEY_BYTES],
    peer: &str,
) -> Result<(Caller, Option<TicketExpiry>), Status> {
    let path = req
        .extensions()
        .get::<CallPath>()
        .map_or("", |p| p.0.as_str());
    if let Ok(p) = &proof {
        if sextant_types::ticket::is_ticket_name(&p.name) {
            return ticket_caller(p, path, keys, master, peer)
                .map(|(c, expires)| (c, Some(TicketExpiry(expires))));
        }
    }
    let checked = proof
        .map_err(|()| crate::clientkeys::Refusal::Malformed)
        .and_then(|p| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            keys.check(&p, path, now)
                .map_err(|r| (r, p.name))
                .map_err(|(r, name)| {
                    refused_proof(r, &name, peer);
                    r
                })
        });
    match checked {
        Ok(grant) => {
            if keys.first_use_from(&grant.name, peer) {
                tracing::info!(target: "audit", key = grant.name, peer, "client key used from a new address");
            }
            Ok((Caller::Key(grant), None))
        }
        Err(crate::clientkeys::Refusal::Busy) => Err(Status::unavailable(
            "too many calls with client keys; retry",
        )),
        Err(r) => {
            if r == crate::clientkeys::Refusal::Malformed {
                refused_proof(r, "?", peer);
            }
            let hint = match (r, keys.audiences()) {
                (crate::clientkeys::Refusal::WrongServer, Some(ours)) => format!(
                    ": the proof must be made for this server's address ({}); dial it as the route map names it",
                    ours.first().map_or("", String::as_str)
                ),
                _ => String::new(),
            };
            Err(Status::unauthenticated(format!(
                "authentication failed: client key refused ({}){hint}",
                r.label()
            )))
        }
    }
}

/// The caller of a call with an identity ticket's proof:
/// [`Caller::Kernel`] as the ticket names, or the status it is refused
/// with (counted, audit-logged with its reason).
fn ticket_caller(
    proof: &keyauth::Proof,
    path: &str,
    keys: &KeyBook,
    master: &[u8; keyauth::KEY_BYTES],
    peer: &str,
) -> Result<(Caller, u64), Status> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    match keys.check_ticket(proof, path, now, master) {
        Ok((cred, _)) if crate::fault::refuse_ticket() => {
            refused(
                "ticket-fault",
                cred.uid,
                "identity ticket refused (test-only fault point refuse-tickets)",
            );
            Err(Status::unauthenticated(
                "authentication failed: identity ticket refused (ticket-fault)",
            ))
        }
        Ok((cred, expires)) => Ok((Caller::Kernel(cred), expires)),
        Err(crate::clientkeys::Refusal::Busy) => Err(Status::unavailable(
            "too many calls with client keys; retry",
        )),
        Err(r) => {
            // The audit line names the identity the ticket claims (the
            // name itself is long, and says nothing more to a reader).
            let who = sextant_types::ticket::TicketBody::from_name(&proof.name).map_or_else(
                |_| "ticket (malformed)".to_string(),
                |(b, _)| format!("ticket of uid {} from {}", b.uid, b.issuer),
            );
            refused_proof(r, &who, peer);
            Err(Status::unauthenticated(format!(
                "authentication failed: identity ticket refused ({})",
                r.label()
            )))
        }
    }
}

/// An identity ticket for `caller` (see the module doc), issued at `now`
/// (Unix seconds) by the server `issuer` with the cluster's `master`:
/// only for a [`Caller::Kernel`] peer of the Unix socket (`local`), never
/// for uid 0 — else PERMISSION_DENIED (counted, audit-logged).
pub fn issue_ticket(
    caller: &Caller,
    local: bool,
    master: &[u8; keyauth::KEY_BYTES],
    issuer: &str,
    now: u64,
) -> Result<pb::TicketReply, Status> {
    let denied = |why: &str| {
        let uid = match caller {
            Caller::Kernel(k) => k.uid,
            _ => u32::MAX,
        };
        refused("ticket", uid, why);
        Err(Status::permission_denied(why.to_string()))
    };
    let Caller::Kernel(k) = caller else {
        return denied(
            "identity tickets are for local users on the server's Unix socket (this caller \
             has the secret or a key: it needs none)",
        );
    };
    if !local {
        return denied("identity tickets are issued on the server's Unix socket only");
    }
    if k.uid == 0 {
        return denied("no identity ticket for uid 0");
    }
    if k.groups.len() > sextant_types::ticket::MAX_GROUPS {
        return Err(Status::failed_precondition(format!(
            "the user is in {} groups; a ticket carries at most {} (its server forwards for it)",
            k.groups.len(),
            sextant_types::ticket::MAX_GROUPS
        )));
    }
    let mut nonce = [0u8; sextant_types::ticket::NONCE_BYTES];
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut nonce))
            .map_err(|e| Status::internal(format!("cannot read /dev/urandom: {e}")))?;
    }
    let body = sextant_types::ticket::TicketBody {
        uid: k.uid,
        gid: k.gid,
        groups: k.groups.clone(),
        // (Shorter only under a test-only fault point, see crate::fault.)
        expires: now + crate::fault::ticket_lifetime(TICKET_LIFETIME).as_secs(),
        nonce,
        issuer: issuer.chars().take(64).collect(),
    };
    let key = keyauth::ticket_secret(master, &body.encode());
    metrics::counter!("sextant_auth_tickets_issued_total").increment(1);
    Ok(pb::TicketReply {
        name: body.name(),
        key: keyauth::hex(&key),
        expires: body.expires,
    })
}

/// Attaches `caller` to an admitted call and counts it.
fn admitted(
    mut req: Request<()>,
    caller: Caller,
    transport: &'static str,
) -> Result<Request<()>, Status> {
    count_admitted(&caller, transport);
    req.extensions_mut().insert(caller);
    Ok(req)
}

/// Counts a call (or a frame door connection) admitted as `caller`.
fn count_admitted(caller: &Caller, transport: &'static str) {
    metrics::counter!("sextant_auth_calls_total", "transport" => transport, "caller" => caller.label())
        .increment(1);
}

/// The interceptor of TCP (and TLS) connections: the secret, or nothing.
pub fn tcp(
    secret: Arc<Vec<u8>>,
    keys: Arc<KeyBook>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static {
    let master = keyauth::ticket_master(&secret);
    move |req: Request<()>| match secret_given(&req, &secret) {
        SecretGiven::Right => admitted(req, Caller::Trusted(Trust::Secret), "tcp"),
        SecretGiven::Absent if req.metadata().contains_key(keyauth::KEY_METADATA) => {
            let peer = req
                .remote_addr()
                .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string());
            let proof = proof_of(&req).unwrap_or(Err(()));
            let (caller, expiry) = key_caller(&req, proof, &keys, &master, &peer)?;
            let mut req = req;
            if let Some(e) = expiry {
                req.extensions_mut().insert(e);
            }
            admitted(req, caller, "tcp")
        }
        given => {
            let peer = req
                .remote_addr()
                .map_or_else(|| "unknown".to_string(), |a| a.to_string());
            let why = if given == SecretGiven::Absent {
                "no cluster secret"
            } else {
                "wrong cluster secret"
            };
            refused_secret("tcp", &peer, why);
            Err(Status::unauthenticated(AUTH_FAILED))
        }
    }
}

/// The interceptor of the Unix socket: the peer's kernel identity (see the
/// module doc).
pub fn unix(
    secret: Arc<Vec<u8>>,
    groups: Arc<GroupDb>,
    keys: Arc<KeyBook>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static {
    let master = keyauth::ticket_master(&secret);
    move |mut req: Request<()>| {
        let peer = req
            .extensions()
            .get::<tonic::transport::server::UdsConnectInfo>()
            .and_then(|i| i.peer_cred);
        let Some(peer) = peer else {
            refused("peer", u32::MAX, "no peer credentials on the Unix socket");
            return Err(Status::unauthenticated(
                "the server cannot tell who is calling on its Unix socket",
            ));
        };
        let caller = match secret_given(&req, &secret) {
            SecretGiven::Absent if req.metadata().contains_key(keyauth::KEY_METADATA) => {
                let proof = proof_of(&req).unwrap_or(Err(()));
                let (caller, expiry) =
                    key_caller(&req, proof, &keys, &master, &format!("uid {}", peer.uid()))?;
                if let Some(e) = expiry {
                    req.extensions_mut().insert(e);
                }
                caller
            }
            given => {
                let caller = peer_caller(peer.uid(), peer.gid(), given, &groups, "unix")?;
                if matches!(caller, Caller::Kernel(_)) {
                    req.extensions_mut().insert(LocalPeer);
                }
                caller
            }
        };
        admitted(req, caller, "unix")
    }
}

/// The caller of a peer on this machine whose kernel identity
/// (`SO_PEERCRED`) is `uid`, `gid`, and which presented `given` (no
/// client key): the secret's holder is trusted, a wrong secret refused,
/// root trusted, anyone else served as the kernel says
/// ([`Caller::Kernel`], groups from `groups`). The rule of both local
/// doors: the socket's gRPC interceptor ([`unix`]) and the frame door
/// ([`frame_caller`]).
fn peer_caller(
    uid: u32,
    gid: u32,
    given: SecretGiven,
    groups: &GroupDb,
    transport: &'static str,
) -> Result<Caller, Status> {
    Ok(match given {
        SecretGiven::Right => Caller::Trusted(Trust::Secret),
        SecretGiven::Wrong => {
            refused_secret(transport, &format!("uid {uid}"), "wrong cluster secret");
            return Err(Status::unauthenticated(AUTH_FAILED));
        }
        SecretGiven::Absent if uid == 0 => Caller::Trusted(Trust::RootPeer),
        SecretGiven::Absent => Caller::Kernel(Credentials {
            uid,
            gid,
            groups: groups.groups(uid, gid),
        }),
    })
}

/// The caller of a frame door connection (`crate::frame_door`) from the
/// peer `uid`, `gid` (its `SO_PEERCRED`) that presented `secret` (empty:
/// none): as the socket's gRPC door admits it ([`peer_caller`]), counted
/// under the transport `frames`. (A client key is not taken there: such
/// a client uses the Session stream.)
pub fn frame_caller(
    uid: u32,
    gid: u32,
    secret: &str,
    cluster_secret: &[u8],
    groups: &GroupDb,
) -> Result<Caller, Status> {
    let given = secret_in(
        (!secret.is_empty()).then_some(secret.as_bytes()),
        cluster_secret,
    );
    let caller = peer_caller(uid, gid, given, groups, "frames")?;
    count_admitted(&caller, "frames");
    Ok(caller)
}

// ---- the audit log ------------------------------------------------------

/// Audit lines written per second at most; the others are counted (their
/// number goes with the next line written), so a client that sends
/// forged claims by the million cannot flood the log.
static AUDIT: crate::log_budget::LineBudget = crate::log_budget::LineBudget::new(20);

/// `Some(suppressed before this one)` if a line may be written now.
fn audit_slot() -> Option<u64> {
    AUDIT.slot()
}

fn refused_claim(kernel: &Credentials, claim: &pb::Credentials, what: &str) {
    metrics::counter!("sextant_auth_refused_total", "reason" => "claim").increment(1);
    if let Some(suppressed) = audit_slot() {
        tracing::warn!(
            target: "audit",
            uid = kernel.uid,
            gid = kernel.gid,
            claimed_uid = claim.uid,
            claimed_gid = claim.gid,
            claimed_groups = ?claim.groups,
            request = what,
            suppressed,
            "refused claim: a local user's request claimed another identity; served as the \
             kernel's"
        );
    }
}

fn refused_secret(transport: &str, peer: &str, why: &str) {
    metrics::counter!("sextant_auth_refused_total", "reason" => "secret").increment(1);
    if let Some(suppressed) = audit_slot() {
        tracing::warn!(target: "audit", transport, peer, suppressed, "refused call: {why}");
    }
}

fn refused_key_claim(g: &Grant, claim: &pb::Credentials, what: &str) {
    metrics::counter!("sextant_auth_refused_total", "reason" => "key-claim").increment(1);
    if let Some(suppressed) = audit_slot() {
        tracing::warn!(
            target: "audit",
            key = g.name,
            claimed_uid = claim.uid,
            claimed_gid = claim.gid,
            claimed_groups = ?claim.groups,
            request = what,
            suppressed,
            "refused claim: a client key's request claimed an identity its limits do not allow \
             (EPERM)"
        );
    }
}

fn refused_key(g: &Grant, reason: &'static str, why: &str) {
    metrics::counter!("sextant_auth_refused_total", "reason" => reason).increment(1);
    if let Some(suppressed) = audit_slot() {
        tracing::warn!(target: "audit", key = g.name, suppressed, "refused call: {why}");
    }
}

fn refused_proof(r: crate::clientkeys::Refusal, key: &str, peer: &str) {
    metrics::counter!("sextant_auth_refused_total", "reason" => r.label()).increment(1);
    if let Some(suppressed) = audit_slot() {
        tracing::warn!(
            target: "audit",
            key,
            peer,
            suppressed,
            "refused call: client key proof failed ({})",
            r.label()
        );
    }
}

fn refused(reason: &'static str, uid: u32, why: &str) {
    metrics::counter!("sextant_auth_refused_total", "reason" => reason).increment(1);
    if let Some(suppressed) = audit_slot() {
        tracing::warn!(target: "audit", uid, suppressed, "refused call: {why}");
    }
}

// ---- supplementary groups -----------------------------------------------

/// How long a user's groups, once read from the system's database, are
/// used: a group added to (or taken from) a user counts for new requests
/// within this time.
pub const GROUPS_TTL: Duration = Duration::from_secs(10);

/// Users whose groups are kept before expired entries are swept.
const GROUPS_MAX_ENTRIES: usize = 4096;

/// Supplementary groups of local users from the system's database
/// (`/etc/group`, or whatever NSS is set up to ask), cached for
/// [`GROUPS_TTL`] per (uid, gid) — a lookup can go to a directory server,
/// and the socket interceptor runs per call.
#[derive(Debug)]
pub struct GroupDb {
    ttl: Duration,
    cache: Mutex<HashMap<(u32, u32), CachedGroups>>,
}

/// A user's groups and when they were read.
type CachedGroups = (Vec<u32>, Instant);

impl Default for GroupDb {
    fn default() -> Self {
        GroupDb::new(GROUPS_TTL)
    }
}

impl GroupDb {
    pub fn new(ttl: Duration) -> GroupDb {
        GroupDb {
            ttl,
            cache: Mutex::default(),
        }
    }

    /// The groups of `uid` (primary group `gid`), the primary one included.
    pub fn groups(&self, uid: u32, gid: u32) -> Vec<u32> {
        let now = Instant::now();
        if let Some((g, at)) = self.cache.lock().get(&(uid, gid)) {
            if now.duration_since(*at) < self.ttl {
                return g.clone();
            }
        }
        let g = lookup_groups(uid, gid);
        let mut cache = self.cache.lock();
        if cache.len() >= GROUPS_MAX_ENTRIES {
            let ttl = self.ttl;
            cache.retain(|_, (_, at)| now.duration_since(*at) < ttl);
            if cache.len() >= GROUPS_MAX_ENTRIES {
                cache.clear();
            }
        }
        cache.insert((uid, gid), (g.clone(), now));
        g
    }
}

/// `getgrouplist` for the user named by `uid`'s passwd entry; a uid with
/// no entry (or a failed lookup) is in its primary group only.
pub fn lookup_groups(uid: u32, gid: u32) -> Vec<u32> {
    use nix::unistd::{getgrouplist, Gid, Uid, User};
    let user = match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(u)) => u,
        Ok(None) => return vec![gid],
        Err(e) => {
            tracing::warn!(uid, error = %e, "cannot read the user database; primary group only");
            return vec![gid];
        }
    };
    let Ok(name) = std::ffi::CString::new(user.name.into_bytes()) else {
        return vec![gid];
    };
    match getgrouplist(&name, Gid::from_raw(gid)) {
        Ok(gs) => {
            let mut v: Vec<u32> = gs.into_iter().map(Gid::as_raw).collect();
            v.sort_unstable();
            v.dedup();
            v
        }
        Err(e) => {
            tracing::warn!(uid, error = %e, "getgrouplist failed; primary group only");
            vec![gid]
        }
    }
}

#[cfg(test)]
mod tests;
