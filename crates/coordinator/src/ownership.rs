//! One server's tables: the I/O shell around `sextant_cluster::server::
//! Server` (the pure ownership state machine, the same one the
//! simulation drives).
//!
//! It follows the delegation map for this server's assignments and
//! carries out what the state machine asks:
//! - **ADD** (a table etcd names this server for): read the table's
//!   manifest, let the [`TableHost`] load it (replaying the journal the
//!   manifest points into), then commit the manifest the host answers —
//!   pointing at this server's own journal — in one etcd transaction
//!   conditional on the owner key's revision (R2) *and* the manifest's
//!   revision as read (a retried load never moves the journal position
//!   past what the first one acknowledged). Only then does the table
//!   serve.
//! - **DROP** (a `move/<table>` to another server): no acknowledgement
//!   from then on; the host lets running operations finish and writes the
//!   table back; one transaction ([`handover_txn`]) conditional on the
//!   owner revision *and* on `member/<server>` being on the lease of the
//!   membership generation the DROP began in writes the final manifest,
//!   the new owner (epoch + 1) and deletes the move — the acknowledged
//!   DROP of R3. (The owner revision alone does not change when this
//!   server loses its lease and, joined again before anyone reassigned
//!   the table, loads it again: a DROP transaction of the earlier
//!   generation that etcd applies late would then hand over that
//!   generation's stale final manifest, losing what the table
//!   acknowledged since.) Its outcome unknown (etcd did not
//!   answer), the same manifest is committed again; the table never
//!   serves again here before the outcome is known.
//! - A **failed DROP** (the host could not write the table back or commit
//!   its final manifest) is settled by etcd, read then: the owner key
//!   moved past the grant — the table is not this server's any more, the
//!   host forgets it; still the grant's — the DROP is tried again after
//!   [`DROP_RETRY`], and if the host no longer has the table at all
//!   ([`NotHeld`]) the table is handed over as etcd last has it (its
//!   manifest points into this server's journal, which the next owner
//!   replays), so a retried DROP never loops for ever.
//! - After a handover the map lags behind the transaction for a moment
//!   and still names this server at the old owner revision: that entry
//!   starts no ADD (etcd would refuse its commits anyway).
//! - A table etcd no longer names this server for, and every table when
//!   the membership lease was lost (a new generation), is forgotten at
//!   once.
//!
//! R1 is [`Ownership::may_ack`]: the membership's lease timer, of the
//! generation the table was loaded under, and the table serving.
//! [`Ownership::served`] counts the tables that began serving, so that
//! a waiter (a BORROW) wakes when its table does instead of polling.
//!
//! Invariant: at most one load or handover per table is in flight; the
//! host is never asked to forget a table while it is loading or dropping
//! it (the task forgets it when it finishes, if the table went away).

use crate::etcd::{bounded, EtcdConfig};
use crate::keys::{self, OwnerValue};
use crate::map::{ClusterState, Names};
use crate::membership::Membership;
use crate::CoordError;
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use sextant_cluster::etcd::LeaseId;
use sextant_cluster::ids::{Epoch, Millis, Revision, TableId};
use sextant_cluster::server::{Contents, Out, Owner, Server, TableView};
use sextant_types::SoidRange;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// What a host's table operation can fail with.
pub type HostError = Box<dyn std::error::Error + Send + Sync>;

/// A table given to this server: what the host loads, and what every
/// manifest commit for it is fenced with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub table: TableId,
    /// Its SOID range (as the map said when it was given).
    pub range: SoidRange,
    pub epoch: Epoch,
    /// `mod_revision` of `owner/<table>` when it was given: R2's fence.
    pub owner_rev: Revision,
    /// The membership generation it was given under: a grant of an
    /// earlier generation commits nothing.
    pub generation: u64,
}

/// What the server implements over its engine: loading a table given to
/// it, writing one back to hand it on, forgetting one lost. Called on a
/// blocking thread (they read and write the shared store).
pub trait TableHost: Send + Sync + 'static {
    /// ADD: load the table from `manifest` (`None`: a new, empty table),
    /// replaying the journal it points into, and answer the manifest to
    /// commit — the same state, pointing at the end of this server's own
    /// journal. Serve nothing yet. May be called again for the same table
    /// (a retried ADD): start over.
    ///
    /// `Ok(None)`: the host committed the table's manifest itself, fenced
    /// by the owner key's revision (an engine that commits through its own
    /// catalogue), so the shell commits nothing — it only checks that the
    /// table is still this server's under the grant.
    fn add_table(
        &self,
        grant: &Grant,
        manifest: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, HostError>;
    /// DROP: let running operations finish, answer later ones
    /// WRONG_SERVER, write the table back, and answer its final manifest.
    /// On a failure that is not fencing, keep the table as it was (the
    /// shell tries again); for a table it does not have, fail with
    /// [`NotHeld`].
    fn drop_table(&self, table: TableId) -> Result<Vec<u8>, HostError>;
    /// The table is no longer this server's (handed over, reassigned, or
    /// the lease was lost): discard it without writing anything. Also
    /// called for tables the host does not have.
    fn forget_table(&self, table: TableId);
    /// Tables the host stopped serving on its own since the last call
    /// although etcd may still name this server for them (an engine merge
    /// whose outcome stayed unknown). The shell loads again each that etcd
    /// still names this server for, from the manifest etcd holds then.
    fn take_given_up(&self) -> Vec<TableId> {
        Vec::new()
    }
    /// Failover (R3): may the tables of `dead`, a server whose lease is
    /// gone, be given to others now? The coordinator asks (on a blocking
    /// thread) before every reassignment of a dead server's table; `false`:
    /// not yet, asked again next round. A log-less server's journal must
    /// first be completed from its clients' backups.
    fn ready_for_failover(&self, dead: &str) -> bool {
        let _ = dead;
        true
    }
}

/// What [`TableHost::drop_table`] fails with for a table the host does
/// not have (never loaded, or already given up): the shell then hands the
/// table over as etcd has it, if it is still this server's.
#[derive(Debug, thiserror::Error)]
#[error("{0} is not held here")]
pub struct NotHeld(pub TableId);

/// How long the shell waits before it tries a failed DROP again.
pub const DROP_RETRY: Duration = Duration::from_millis(100);

/// Why a manifest commit failed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// R2: the table is no longer this server's under that grant (another
    /// owner, or a later generation): nothing was written.
    #[error("{table} is no longer this server's (fenced at owner revision {})", owner_rev.0)]
    Fenced { table: TableId, owner_rev: Revision },
    /// etcd did not answer: the commit may or may not have happened (a
    /// retry with the same grant and manifest is safe).
    #[error(transparent)]
    Etcd(#[from] CoordError),
}

/// Settings of the shell.
#[derive(Clone, Debug)]
pub struct OwnershipConfig {
    pub etcd: EtcdConfig,
    /// This server's name.
    pub name: String,
    /// How often the assignments are looked at without a map change.
    pub tick: Duration,
}

struct St {
    server: Server,
    generation: u64,
    /// The lease `member/<name>` is on in `generation`.
    lease: i64,
    grants: BTreeMap<TableId, Grant>,
    /// Tables with a load or handover in flight.
    busy: BTreeSet<TableId>,
    /// Final manifests of dropped tables whose handover is not known to
    /// have committed.
    dropped: BTreeMap<TableId, Vec<u8>>,
    /// Tables handed over (or found reassigned) by this server, at the
    /// owner revision they were held under: until the map shows the owner
    /// key past it, the map's entry is older than what this server knows,
    /// and is not acted on (it would start an ADD of a table just given
    /// away, which etcd would refuse).
    handed: BTreeMap<TableId, Revision>,
    /// Tables whose last load failed (the host's error, or etcd's): not
    /// loaded again before the instant, the wait doubling with every
    /// failure up to [`LOAD_RETRY_MAX`]. Before, a host that failed every
    /// ADD (a full disk) was asked again at once, hundreds of times a
    /// second, each time after a read from etcd.
    retry: BTreeMap<TableId, (Instant, Duration)>,
}

/// The first wait before a failed load is tried again.
const LOAD_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait before a failed load is tried again.
const LOAD_RETRY_MAX: Duration = Duration::from_secs(5);

/// The wait after a load failed, given the wait before the last try
/// (`None`: it had not failed).
fn next_load_wait(last: Option<Duration>) -> Duration {
    last.map_or(LOAD_RETRY_FIRST, |w| (w * 2).min(LOAD_RETRY_MAX))
}

struct Inner {
    cfg: OwnershipConfig,
    client: Client,
    membership: Arc<Membership>,
    map: watch::Receiver<Arc<ClusterState>>,
    host: Arc<dyn TableHost>,
    st: Mutex<St>,
    wake: Notify,
    /// Bumped each time a table begins serving here (see
    /// [`Ownership::served`]).
    served: watch::Sender<u64>,
}

/// The shell; dropping it stops it (the host keeps what it has).
pub struct Ownership {
    inner: Arc<Inner>,
    task: JoinHandle<()>,
}

impl Drop for Ownership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The pure server's own id: names are numbered per decision, this
/// server first.
const ME: sextant_cluster::ids::ServerId = sextant_cluster::ids::ServerId(0);

impl Ownership {
    pub fn start(
        cfg: OwnershipConfig,
        client: Client,
        membership: Arc<Membership>,
        map: watch::Receiver<Arc<ClusterState>>,
        host: Arc<dyn TableHost>,
    ) -> Ownership {
        let (generation, lease) = membership.generation_and_lease();
        let mut server = Server::new(ME, 0);
        // The pure server's own timer is not used: R1 is the
        // membership's timer (see `may_ack`).
        server.joined(LeaseId(generation), Millis(0), u64::MAX / 4);
        let inner = Arc::new(Inner {
            cfg,
            client,
            membership,
            map,
            host,
            st: Mutex::new(St {
                server,
                generation,
                lease,
                grants: BTreeMap::new(),
                busy: BTreeSet::new(),
                dropped: BTreeMap::new(),
                handed: BTreeMap::new(),
                retry: BTreeMap::new(),
            }),
            wake: Notify::new(),
            served: watch::Sender::new(0),
        });
        let task = tokio::spawn(drive(Arc::clone(&inner)));
        Ownership { inner, task }
    }

    /// R1: may this server acknowledge an operation on `table` now?
    /// Check it after the operation is durable, right before the reply.
    pub fn may_ack(&self, table: TableId) -> bool {
        let m = &self.inner.membership;
        let st = self.inner.lock();
        st.generation == m.generation() && st.server.is_serving(table) && m.valid()
    }

    /// The grant of `table` if it serves here now (an operation may
    /// begin; its acknowledgement still asks [`Ownership::may_ack`]).
    pub fn serving(&self, table: TableId) -> Option<Grant> {
        let st = self.inner.lock();
        if !st.server.is_serving(table) {
            return None;
        }
        st.grants.get(&table).cloned()
    }

    /// Changes each time a table begins serving here (an ADD done): wait
    /// on it to see [`Ownership::serving`] change without polling. The
    /// value is a count, of no meaning beyond that.
    pub fn served(&self) -> watch::Receiver<u64> {
        self.inner.served.subscribe()
    }

    /// The tables this server serves.
    pub fn tables(&self) -> Vec<Grant> {
        let st = self.inner.lock();
        st.server
            .serving()
            .filter_map(|t| st.grants.get(&t).cloned())
            .collect()
    }

    /// R2: commits `manifest` as `grant.table`'s, in one etcd transaction
    /// conditional on the owner key's revision of the grant.
    pub async fn commit_manifest(
        &self,
        grant: &Grant,
        manifest: Vec<u8>,
    ) -> Result<(), CommitError> {
        let fenced = || CommitError::Fenced {
            table: grant.table,
            owner_rev: grant.owner_rev,
        };
        {
            let st = self.inner.lock();
            if st.generation != grant.generation
                || st.grants.get(&grant.table) != Some(grant)
                || !st.server.holds(grant.table)
            {
                return Err(fenced());
            }
        }
        let mut client = self.inner.client.clone();
        commit_fenced(&mut client, &self.inner.cfg.etcd, grant, manifest).await
    }
}

/// R2 at etcd: puts `manifest/<table>` only if `owner/<table>`'s
/// revision is still the grant's. ([`Ownership::commit_manifest`] checks
/// the grant locally first; this is the part a zombie cannot get past.)
pub async fn commit_fenced(
    client: &mut Client,
    cfg: &EtcdConfig,
    grant: &Grant,
    manifest: Vec<u8>,
) -> Result<(), CommitError> {
    let txn = Txn::new()
        .when(vec![Compare::mod_revision(
            cfg.key(&keys::owner_key(grant.table)),
            CompareOp::Equal,
            grant.owner_rev.0 as i64,
        )])
        .and_then(vec![TxnOp::put(
            cfg.key(&keys::manifest_key(grant.table)),
            manifest,
            None,
        )]);
    if bounded(cfg, client.txn(txn)).await?.succeeded() {
        Ok(())
    } else {
        Err(CommitError::Fenced {
            table: grant.table,
            owner_rev: grant.owner_rev,
        })
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, St> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Makes the host forget `tables`, each kept busy until its forget is
/// done (the caller marked them, under the lock): no load of a table
/// starts while the host may still hold an old copy of it. Such a load
/// would find the table in the host, take it as its own (a restart's or a
/// split's), and the late forget would then stop it serving while etcd
/// names this server its owner — seen when a server paused past its lease
/// rejoined and was given a table back at once.
async fn forget_busy_owned(inner: Arc<Inner>, tables: Vec<TableId>) {
    forget_busy(&inner, tables).await;
}

/// See [`forget_busy_owned`].
async fn forget_busy(inner: &Arc<Inner>, tables: Vec<TableId>) {
    let i = Arc::clone(inner);
    let forgotten = tables.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for t in forgotten {
            i.host.forget_table(t);
        }
    })
    .await;
    {
        let mut st = inner.lock();
        for t in &tables {
            st.busy.remove(t);
        }
    }
    inner.wake.notify_one();
}

async fn drive(inner: Arc<Inner>) {
    let mut map = inner.map.clone();
    let tick = inner.cfg.tick;
    loop {
        round(&inner);
        tokio::select! {
            r = map.changed() => if r.is_err() { return },
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep(tick) => {}
        }
    }
}

/// One look at the map: forget what is gone, start loads and handovers.
fn round(inner: &Arc<Inner>) {
    let state = inner.map.borrow().clone();
    let (generation, lease) = inner.membership.generation_and_lease();
    let given_up = inner.host.take_given_up();
    let mut forget = Vec::new();
    let mut start = Vec::new();
    let now = Instant::now();
    let mut retry_soon = false;
    {
        let mut st = inner.lock();
        for t in given_up {
            // Loaded again below if etcd still names this server (a load
            // or handover in flight decides for itself).
            if !st.busy.contains(&t) {
                tracing::warn!(table = %t, "the host gave the table up; loading it again if it is still this server's");
                st.server.given_up(t);
                st.grants.remove(&t);
            }
        }
        if st.generation != generation {
            tracing::warn!(
                old = st.generation,
                new = generation,
                "the membership lease was lost: every table is given up"
            );
            let old = st.generation;
            st.server.lease_lost(LeaseId(old));
            st.server
                .joined(LeaseId(generation), Millis(0), u64::MAX / 4);
            st.generation = generation;
            st.lease = lease;
            // The earlier generation's handovers say nothing about this
            // one: a handover refused because the lease was gone left the
            // owner key where it was, and an entry kept for it would keep
            // this generation from loading the table while the map shows
            // that revision.
            st.handed.clear();
            st.retry.clear();
            let held: Vec<TableId> = st.grants.keys().copied().collect();
            for t in held {
                st.grants.remove(&t);
                st.dropped.remove(&t);
                if st.busy.insert(t) {
                    forget.push(t);
                }
            }
        }
        let mut names = Names::default();
        names.id(&inner.cfg.name); // ME
        st.handed
            .retain(|t, rev| state.owners.get(t).is_some_and(|o| o.rev == *rev));
        let handed = st.handed.clone();
        let views: Vec<TableView> = state
            .owners
            .iter()
            .filter(|(t, _)| state.tables.contains_key(t))
            .filter(|(t, o)| handed.get(t) != Some(&o.rev))
            .map(|(t, o)| TableView {
                table: *t,
                owner: Owner {
                    server: names.id(&o.server),
                    epoch: o.epoch,
                },
                owner_rev: o.rev,
                move_to: state.moves.get(t).map(|m| names.id(&m.to)),
            })
            .collect();
        let outs = st.server.observe(&views);
        let gone: Vec<TableId> = st
            .grants
            .keys()
            .filter(|t| !st.server.holds(**t))
            .copied()
            .collect();
        for t in gone {
            st.grants.remove(&t);
            st.dropped.remove(&t);
            if st.busy.insert(t) {
                forget.push(t);
            }
        }
        for o in outs {
            match o {
                Out::Load { table, owner_rev } => {
                    let (Some(range), Some(owner)) =
                        (state.tables.get(&table), state.owners.get(&table))
                    else {
                        continue;
                    };
                    if st.retry.get(&table).is_some_and(|(at, _)| *at > now) {
                        // Failed lately: the round after the wait tries.
                        retry_soon = true;
                        continue;
                    }
                    if !st.busy.insert(table) {
                        continue;
                    }
                    let grant = Grant {
                        table,
                        range: *range,
                        epoch: owner.epoch,
                        owner_rev,
                        generation,
                    };
                    st.grants.insert(table, grant.clone());
                    start.push(Task::Load(grant));
                }
                Out::Handover {
                    table,
                    owner_rev,
                    to,
                    epoch,
                    ..
                } => {
                    let Some(to) = names.name(to).map(str::to_string) else {
                        continue;
                    };
                    if !st.busy.insert(table) {
                        continue;
                    }
                    let dropped = st.dropped.get(&table).cloned();
                    start.push(Task::Handover {
                        table,
                        owner_rev,
                        to,
                        epoch,
                        dropped,
                        generation,
                        lease: st.lease,
                    });
                }
                Out::Join | Out::KeepAlive { .. } => {} // the membership's
            }
        }
    }
    if !forget.is_empty() {
        tokio::spawn(forget_busy_owned(Arc::clone(inner), forget));
    }
    if retry_soon {
        // A round when the soonest wait still running ends (the tick may
        // be longer). Only those: an entry whose wait is over (its table
        // gone meanwhile) would wake a round at once, again and again.
        let soonest = inner
            .lock()
            .retry
            .values()
            .map(|(at, _)| *at)
            .filter(|at| *at > now)
            .min();
        if let Some(at) = soonest {
            let i = Arc::clone(inner);
            tokio::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                i.wake.notify_one();
            });
        }
    }
    for t in start {
        match &t {
            Task::Load(g) => {
                tracing::debug!(target: "borrow_trace", table = %g.table, revision = state.revision, "ownership: ADD starts")
            }
            Task::Handover { table, to, .. } => {
                tracing::debug!(target: "borrow_trace", table = %table, to, revision = state.revision, "ownership: DROP starts")
            }
        }
        tokio::spawn(run(Arc::clone(inner), t));
    }
}

enum Task {
    Load(Grant),
    Handover {
        table: TableId,
        owner_rev: Revision,
        to: String,
        epoch: Epoch,
        dropped: Option<Vec<u8>>,
        generation: u64,
        /// The membership lease of `generation`.
        lease: i64,
    },
}

async fn run(inner: Arc<Inner>, task: Task) {
    match task {
        Task::Load(grant) => load(&inner, grant).await,
        Task::Handover {
            table,
            owner_rev,
            to,
            epoch,
            dropped,
            generation,
            lease,
        } => {
            let fence = HandoverFence {
                owner_rev,
                generation,
                lease,
            };
            handover(&inner, table, fence, &to, epoch, dropped).await
        }
    }
    inner.wake.notify_one();
}

/// Is `table` still held here under this grant's assignment?
fn current(st: &St, table: TableId, owner_rev: Revision, generation: u64) -> bool {
    st.generation == generation
        && st.server.holds(table)
        && st
            .grants
            .get(&table)
            .is_some_and(|g| g.owner_rev == owner_rev)
}

async fn load(inner: &Arc<Inner>, grant: Grant) {
    let t = grant.table;
    let result = load_and_commit(inner, &grant).await;
    let forget = {
        let mut st = inner.lock();
        let here = current(&st, t, grant.owner_rev, grant.generation);
        match (&result, here) {
            (Ok(true), true) => {
                st.busy.remove(&t);
                st.retry.remove(&t);
                st.server.loaded(t, grant.owner_rev, Ok(Contents::new()));
                tracing::info!(table = %t, epoch = grant.epoch.0, "table added: serving");
                false
            }
            (_, false) => true, // went away meanwhile
            (Ok(false), true) | (Err(_), true) => {
                // Refused (the owner or manifest moved on) or unknown:
                // given up; the next look at the map loads it again if
                // it is still this server's.
                st.server.loaded(t, grant.owner_rev, Err(()));
                st.grants.remove(&t);
                true
            }
        }
    };
    if matches!((&result, forget), (Ok(true), false)) {
        // After the lock: a waiter woken now sees the table serving.
        inner.served.send_modify(|n| *n = n.wrapping_add(1));
    }
    if let Err(e) = &result {
        let wait = {
            let mut st = inner.lock();
            let wait = next_load_wait(st.retry.get(&t).map(|(_, w)| *w));
            // Kept until a load of the table succeeds or the lease is
            // lost (a few entries: tables whose loads failed).
            st.retry.insert(t, (Instant::now() + wait, wait));
            wait
        };
        tracing::warn!(table = %t, error = %e, retry_in = ?wait, "loading a table failed; retrying");
    }
    if forget {
        forget_busy(inner, vec![t]).await;
    }
}

/// Reads the manifest, lets the host load the table, commits the
/// manifest it answers (R2 and the manifest's revision as read). `true`:
/// committed.
async fn load_and_commit(inner: &Arc<Inner>, grant: &Grant) -> Result<bool, String> {
    let cfg = &inner.cfg.etcd;
    let mut client = inner.client.clone();
    let mkey = cfg.key(&keys::manifest_key(grant.table));
    let okey = cfg.key(&keys::owner_key(grant.table));
    // The manifest, read only while the owner key is still the grant's: a
    // map that lags behind etcd can start a load of a table that no
    // longer exists (merged away: no manifest, which would otherwise read
    // as a new, empty table) or is another's now.
    let read = Txn::new()
        .when(vec![Compare::mod_revision(
            okey.clone(),
            CompareOp::Equal,
            grant.owner_rev.0 as i64,
        )])
        .and_then(vec![TxnOp::get(mkey.clone(), None)]);
    let resp = bounded(cfg, client.txn(read))
        .await
        .map_err(|e| e.to_string())?;
    if !resp.succeeded() {
        return Ok(false);
    }
    tracing::debug!(target: "borrow_trace", table = %grant.table, "ADD: manifest read");
    let got = resp.op_responses().into_iter().find_map(|r| match r {
        etcd_client::TxnOpResponse::Get(g) => Some(g),
        _ => None,
    });
    let (manifest, read_rev) = match got.as_ref().and_then(|g| g.kvs().first()) {
        Some(kv) => (Some(kv.value().to_vec()), kv.mod_revision()),
        None => (None, 0),
    };
    let host = Arc::clone(&inner.host);
    let g = grant.clone();
    let new = tokio::task::spawn_blocking(move || host.add_table(&g, manifest.as_deref()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the host could not load it: {e}"))?;
    tracing::debug!(target: "borrow_trace", table = %grant.table, "ADD: host loaded");
    let Some(new) = new else {
        // Committed by the host: is the grant still the owner key's?
        let resp = bounded(cfg, client.get(okey.as_bytes(), None))
            .await
            .map_err(|e| e.to_string())?;
        return Ok(resp
            .kvs()
            .first()
            .is_some_and(|kv| kv.mod_revision() == grant.owner_rev.0 as i64));
    };
    let txn = Txn::new()
        .when(vec![
            Compare::mod_revision(
                cfg.key(&keys::owner_key(grant.table)),
                CompareOp::Equal,
                grant.owner_rev.0 as i64,
            ),
            Compare::mod_revision(mkey.clone(), CompareOp::Equal, read_rev),
        ])
        .and_then(vec![TxnOp::put(mkey, new, None)]);
    Ok(bounded(cfg, client.txn(txn))
        .await
        .map_err(|e| e.to_string())?
        .succeeded())
}

/// What a DROP is fenced with: the owner key's revision it was granted
/// the table under, and the membership generation (with its lease) the
/// DROP began in.
#[derive(Clone, Copy, Debug)]
struct HandoverFence {
    owner_rev: Revision,
    generation: u64,
    lease: i64,
}

/// The handover transaction of server `me`: conditional on the table's
/// owner key being at `owner_rev` (R2) and on `member/<me>` being on
/// `member_lease`, the lease of the membership generation the DROP began
/// in; it puts the final manifest (if any), the new owner `to` at `epoch`
/// + 1, and deletes the move.
///
/// Why the lease: a server that lost its lease forgets its tables; if it
/// joins again before the coordinator reassigned them, etcd still names
/// it at the same owner revision and it loads them again (a load commits
/// a manifest but leaves the owner key as it is) and acknowledges
/// operations. A DROP transaction of the earlier generation — sent before
/// the lease was lost, its answer lost, and applied late by etcd — would
/// pass an owner-revision compare alone and hand the table over with the
/// earlier generation's final manifest: the new owner would load that
/// snapshot and replay the earlier journal, and the operations acknowledged
/// since the reload (in the new generation's journal) would be lost. The
/// member key is only ever put by a join, on a lease granted for it, so it
/// never comes back to an earlier lease: such a transaction can never
/// apply once the server joined again. (The same rule as a table change's
/// [`crate::catalog::TablesChange::member_lease`].)
#[allow(clippy::too_many_arguments)]
pub fn handover_txn(
    cfg: &EtcdConfig,
    me: &str,
    member_lease: i64,
    table: TableId,
    owner_rev: Revision,
    to: &str,
    epoch: Epoch,
    manifest: Option<Vec<u8>>,
) -> Txn {
    let owner = OwnerValue {
        epoch: Epoch(epoch.0 + 1),
        server: to.to_string(),
    };
    let mut then = Vec::new();
    if let Some(manifest) = manifest {
        then.push(TxnOp::put(
            cfg.key(&keys::manifest_key(table)),
            manifest,
            None,
        ));
    }
    then.push(TxnOp::put(
        cfg.key(&keys::owner_key(table)),
        owner.encode(),
        None,
    ));
    then.push(TxnOp::delete(cfg.key(&keys::move_key(table)), None));
    Txn::new()
        .when(vec![
            Compare::mod_revision(
                cfg.key(&keys::owner_key(table)),
                CompareOp::Equal,
                i64::try_from(owner_rev.0).unwrap_or(i64::MAX),
            ),
            Compare::lease(
                cfg.key(&keys::member_key(me)),
                CompareOp::Equal,
                member_lease,
            ),
        ])
        .and_then(then)
}

async fn handover(
    inner: &Arc<Inner>,
    table: TableId,
    fence: HandoverFence,
    to: &str,
    epoch: Epoch,
    dropped: Option<Vec<u8>>,
) {
    let HandoverFence {
        owner_rev,
        generation,
        lease,
    } = fence;
    let dropped = match dropped {
        Some(m) => Ok(m),
        None => {
            let host = Arc::clone(&inner.host);
            match tokio::task::spawn_blocking(move || host.drop_table(table)).await {
                Ok(Ok(m)) => {
                    let mut st = inner.lock();
                    if current(&st, table, owner_rev, generation) {
                        st.dropped.insert(table, m.clone());
                    }
                    Ok(m)
                }
                Ok(Err(e)) => Err((e.downcast_ref::<NotHeld>().is_some(), e.to_string())),
                Err(e) => Err((false, e.to_string())),
            }
        }
    };
    tracing::debug!(target: "borrow_trace", table = %table, "DROP: host wrote the table back");
    let manifest = match dropped {
        Ok(m) => Some(m),
        Err((not_held, error)) => {
            tracing::warn!(table = %table, error = %error, "dropping a table failed");
            if !after_failed_drop(inner, table, owner_rev, generation, not_held).await {
                return;
            }
            // Still this server's and not held: handed over as etcd has
            // it (no manifest of ours to put).
            None
        }
    };
    let cfg = &inner.cfg.etcd;
    let txn = handover_txn(
        cfg,
        &inner.cfg.name,
        lease,
        table,
        owner_rev,
        to,
        epoch,
        manifest,
    );
    let mut client = inner.client.clone();
    let result = bounded(cfg, client.txn(txn)).await;
    // Handed over (or reassigned meanwhile): the host forgets the table
    // *before* its grant goes, so that a server with no grants left holds
    // nothing either (what a leaving server waits for).
    if result.is_ok() {
        let i = Arc::clone(inner);
        let _ = tokio::task::spawn_blocking(move || i.host.forget_table(table)).await;
    }
    let forget = {
        let mut st = inner.lock();
        let here = current(&st, table, owner_rev, generation);
        let forget = match &result {
            Ok(r) => {
                if r.succeeded() {
                    tracing::info!(table = %table, to, epoch = epoch.0 + 1, "table handed over (moved)");
                } else {
                    tracing::warn!(table = %table, "handover refused: the table was reassigned meanwhile, or this membership's lease is gone");
                }
                if here {
                    st.server.handed_over(table);
                    st.grants.remove(&table);
                    st.dropped.remove(&table);
                    // The owner key is past `owner_rev` now (written by
                    // this transaction, or by whoever refused it).
                    st.handed.insert(table, owner_rev);
                }
                // Forgotten above.
                false
            }
            Err(e) => {
                // Unknown: the table stays dropping (no acknowledgement)
                // and the same manifest is committed again next round.
                tracing::warn!(table = %table, error = %e, "handover: no answer from etcd; retrying");
                !here
            }
        };
        if !forget {
            st.busy.remove(&table);
        }
        forget
    };
    if forget {
        forget_busy(inner, vec![table]).await;
    }
}

/// A DROP of `table` (granted at `owner_rev`) failed; `not_held`: the host
/// does not have the table. Settled by etcd's owner key, read now:
/// - moved past the grant: the table is not this server's any more, the
///   host forgets it at once (the map, when it catches up, drops it from
///   the shell too);
/// - still the grant's and the host has the table (it kept it as it
///   was), or etcd did not answer: the next look at the map tries the
///   DROP again;
/// - still the grant's and the host does not have it: `true` — hand it
///   over as etcd has it. Its manifest there is this server's last
///   commit for it: it points into this server's journal, which keeps
///   every record from there on (the engine trims only below the lowest
///   replay position etcd's manifests name), so the next owner replays
///   what was acknowledged here, as after a failover.
///
/// Returns `false` after [`DROP_RETRY`] with the table no longer busy
/// (and forgotten if it went away meanwhile), so a DROP that keeps failing
/// is not tried in a tight loop.
async fn after_failed_drop(
    inner: &Arc<Inner>,
    table: TableId,
    owner_rev: Revision,
    generation: u64,
    not_held: bool,
) -> bool {
    let cfg = &inner.cfg.etcd;
    let mut client = inner.client.clone();
    let okey = cfg.key(&keys::owner_key(table));
    let still_ours = match bounded(cfg, client.get(okey.as_bytes(), None)).await {
        Ok(resp) => Some(
            resp.kvs()
                .first()
                .is_some_and(|kv| kv.mod_revision() == owner_rev.0 as i64),
        ),
        Err(e) => {
            tracing::warn!(table = %table, error = %e, "after a failed DROP: no answer from etcd");
            None
        }
    };
    let here = current(&inner.lock(), table, owner_rev, generation);
    if still_ours == Some(true) && not_held && here {
        tracing::warn!(table = %table, "the host no longer has the table it is dropping: handing it over as etcd has it");
        return true;
    }
    let moved = still_ours == Some(false);
    if moved {
        tracing::warn!(table = %table, "after a failed DROP: the table is no longer this server's; forgetting it");
        let i = Arc::clone(inner);
        let _ = tokio::task::spawn_blocking(move || i.host.forget_table(table)).await;
    }
    tokio::time::sleep(DROP_RETRY).await;
    let forget = {
        let mut st = inner.lock();
        let forget = !moved && !current(&st, table, owner_rev, generation);
        if !forget {
            st.busy.remove(&table);
        }
        forget
    };
    if forget {
        forget_busy(inner, vec![table]).await;
    }
    false
}
