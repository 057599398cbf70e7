//! [`EtcdCatalog`]: the engine's [`TableCatalog`] on etcd.
//!
//! The engine in member mode commits its tables' manifests (after a
//! checkpoint, an ADD, a DROP, a split) through this seam. Each commit is
//! one etcd transaction (`sextant_coordinator::catalog::commit_tables`),
//! or several when it is bigger than etcd takes in one
//! (`TablesChange::pieces`: a split's halves together, each piece leaving
//! the catalogue's ranges consistent):
//! a put of a table the delegation map says this server owns is fenced by
//! that owner key's revision (R2: if another server owns it now, nothing
//! is written and the engine is told `NotOwner`); a put of a table the map
//! does not know is a new table of a split, created as this server's.
//! Every commit also requires `member/<name>` to be on the membership
//! lease it was planned under (from the map; read from etcd when the map
//! has no member key for this server yet): a transaction etcd applies
//! late — its answer was lost — writes nothing once the server lost its
//! lease and rejoined, when it may have loaded its tables again from the
//! catalogue (issue 20). The engine's side of the same interleaving: a
//! table forgotten on a lease loss takes the tables split off it since its
//! last commit with it (`Engine::revoke_table`).
//! The map is a watch of its own and may lag behind etcd (and behind the
//! shell's map): a refused commit is checked against etcd's owner keys,
//! and one refused only because the map is behind is `Stale`, not
//! `NotOwner` — the engine must not stop serving a table that is still
//! this server's.
//!
//! The engine is synchronous and calls from any thread (a tokio worker
//! included, where blocking on a runtime would panic), so the calls are
//! carried out by a thread of their own with its own runtime; the caller
//! waits for the answer. Splits and checkpoints are rare next to
//! operations, so one thread is enough.
//!
//! A merge is its own transaction (`commit_merge`): both owner
//! revisions as the map has them, and no move, lend or borrow naming
//! either table; see `TableCatalog::merge` for why that keeps a merge from
//! racing a move, DROP, BORROW or failover.
//!
//! A manifest never goes back: every updated table's transaction also
//! requires the table's `manifest/` mod revision to be the one this
//! server last saw (`TablesChange::manifest_revs`) — from its own last
//! applied commit of the table under the same owner revision (`seen`),
//! else read from etcd just before (one keys-only read). A transaction
//! applied moves that revision past every one read before it, so a
//! commit whose answer was lost can never apply after a later commit of
//! the same table (issue 20: it moved the manifest back to an older
//! snapshot and journal position — the owner revision and the lease, the
//! other fences, do not change between two commits). A refused or
//! read-back commit forgets what it saw of its tables; one whose outcome
//! is unknown keeps it (the next commit compares the same revision: at
//! most one of the two applies).
//!
//! A commit whose transaction got no answer (a timeout, a broken
//! connection) reads back whether etcd applied it
//! ([`tables_change_applied`]): applied, it is `Ok` (the engine records
//! it committed); not, `Unavailable` (unknown: it may still apply), and
//! the transaction is kept as a *doubt*.
//!
//! For the engine's sweep of snapshots nothing names
//! (`TableCatalog::referenced_files`, `last_commit_fence`, `fence_void`,
//! `earlier_runs_void`): every `manifest/` key's snapshot at one
//! revision; the fence of a commit is a number naming its doubt (or
//! [`NOTHING_SENT`]). A doubt is settled — it can never apply — once a
//! later commit of this catalogue applied that put a manifest it compares
//! or removed a table it touches (`settles`, no etcd read), or once etcd
//! shows one of its conditions false for good (`tables_change_settled`,
//! read only when the sweep asks about a doubt not settled in memory).
//! Earlier runs' commits: see [`TableCatalog::earlier_runs_void`] below.
//!
//! Log-less failover's fence (`TableCatalog::claim_completion`): the
//! claim on completing a dead member's journal is
//! `logless-claim/<member>`, put on this server's membership lease by a
//! transaction that requires `member/<member>` absent at that moment and
//! `member/<me>` on that lease; the member reads it (linearizably, not
//! from the map) before every ADD. The release deletes exactly the put
//! this server made (compared by its mod revision, so never a later
//! claim of another server's) and, when etcd does not answer it, is sent
//! again until etcd does: a claim left standing keeps the member it
//! names from every table for as long as the claimer lives (found by the
//! simulation). The claimer completes the run it read before claiming,
//! never a later one (`sextant_engine`'s `complete_member_run`).
//!
//! Table numbers: the engine's are `u64`, the cluster's `u32`; a number
//! that does not fit is refused (the counter starts at 1 and grows by
//! one per split).

use sextant_cluster::ids::Revision;
use sextant_cluster::ids::TableId as ClusterTable;
use sextant_coordinator::catalog::{
    commit_merge, commit_tables_at, next_table_id, settles, tables_change_applied,
    tables_change_settled, MergeOutcome, TableState, TablesChange, TXN_OPS,
};
use sextant_coordinator::{keys, ClusterState, EtcdConfig};
use sextant_engine::{CatalogChange, CatalogError, TableCatalog, TableManifest};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::watch;

type Job =
    Box<dyn FnOnce(&tokio::runtime::Runtime, &mut sextant_coordinator::etcd_client::Client) + Send>;

/// The catalogue on etcd, for the engine of server `name`.
pub struct EtcdCatalog {
    name: String,
    etcd: EtcdConfig,
    map: watch::Receiver<Arc<ClusterState>>,
    jobs: std::sync::Mutex<mpsc::Sender<Job>>,
    /// The fence of the last commit ([`TableCatalog::last_commit_fence`]):
    /// its doubt's number, or [`NOTHING_SENT`].
    last_fence: Arc<std::sync::Mutex<Option<u64>>>,
    /// Per table: the owner revision and the `manifest/` mod revision of
    /// this catalogue's last applied commit of it (what the next commit
    /// under the same owner revision compares).
    seen: Arc<std::sync::Mutex<BTreeMap<ClusterTable, (Revision, i64)>>>,
    /// Commits whose transaction may still apply (`Some`) or is settled
    /// (`None`), by fence number.
    doubts: Arc<std::sync::Mutex<Doubts>>,
    /// The membership lease of this catalogue's last applied commit.
    applied_lease: Arc<std::sync::Mutex<Option<i64>>>,
    /// A test's fault point: the next commit's transaction is sent and
    /// applied, and its answer treated as lost ([`Self::lose_next_reply`]).
    lose_reply: Arc<AtomicBool>,
    /// A test's fault point: the next commit's transaction is held back
    /// (as by the network) and its answer lost ([`Self::hold_next`]).
    hold: Arc<AtomicBool>,
    held: Arc<std::sync::Mutex<Option<TablesChange>>>,
    /// The claims this server holds on completing dead members' journals:
    /// member → the mod revision of its `logless-claim/` put, so a release
    /// deletes that claim and no later one (module doc).
    claims: Arc<std::sync::Mutex<BTreeMap<String, i64>>>,
}

/// How often a release of a claim that etcd did not take is sent again.
const RELEASE_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// The fence of a commit of which nothing can apply: nothing was sent.
pub const NOTHING_SENT: u64 = 0;

/// Commits whose outcome was not known when they returned.
#[derive(Default)]
struct Doubts {
    /// The last number handed out ([`NOTHING_SENT`] is never one).
    last: u64,
    /// Fence number → the transaction that may still apply (`None`:
    /// settled, it never will).
    open: BTreeMap<u64, Option<TablesChange>>,
}

impl Doubts {
    fn add(&mut self, change: TablesChange) -> u64 {
        self.last += 1;
        self.open.insert(self.last, Some(change));
        self.last
    }

    /// `applied` was applied after every open doubt was sent.
    fn settle_by(&mut self, applied: &TablesChange) {
        for d in self.open.values_mut() {
            if d.as_ref().is_some_and(|earlier| settles(applied, earlier)) {
                *d = None;
            }
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The claim on completing `member`'s journal (module doc).
fn claim_key(member: &str) -> String {
    format!("logless-claim/{member}")
}

/// What [`run_on`] answers once the catalogue's thread is gone.
const CATALOGUE_STOPPED: &str = "the catalogue thread stopped";

/// Runs `f` on the catalogue's thread (through its job queue `jobs`) and
/// waits for its answer.
fn run_on<T: Send + 'static>(
    jobs: &mpsc::Sender<Job>,
    f: impl FnOnce(
            &tokio::runtime::Runtime,
            &mut sextant_coordinator::etcd_client::Client,
        ) -> Result<T, CatalogError>
        + Send
        + 'static,
) -> Result<T, CatalogError> {
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move |rt, c| {
        let _ = tx.send(f(rt, c));
    });
    jobs.send(job).map_err(|_| unavailable(CATALOGUE_STOPPED))?;
    rx.recv()
        .map_err(|_| unavailable("etcd could not be reached"))?
}

/// Deletes `logless-claim/<member>` if it is still the put of mod
/// revision `rev` (this server's claim, not a later one of another
/// server or of this one). `Ok` once etcd answered, whether or not it
/// was still there.
fn delete_claim(
    jobs: &mpsc::Sender<Job>,
    cfg: &EtcdConfig,
    member: &str,
    rev: i64,
) -> Result<(), CatalogError> {
    use sextant_coordinator::etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let key = cfg.key(&claim_key(member));
    run_on(jobs, move |rt, client| {
        let txn = Txn::new()
            .when(vec![Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                rev,
            )])
            .and_then(vec![TxnOp::delete(key, None)]);
        rt.block_on(client.txn(txn)).map_err(unavailable)?;
        Ok(())
    })
}

fn unavailable(e: impl std::fmt::Display) -> CatalogError {
    CatalogError::Unavailable(e.to_string())
}

fn cluster_id(id: u64) -> Result<ClusterTable, CatalogError> {
    u32::try_from(id)
        .map(ClusterTable)
        .map_err(|_| CatalogError::Unavailable(format!("table number {id} is out of range")))
}

impl EtcdCatalog {
    /// Starts the catalogue's thread with its own etcd connection;
    /// `map` is the delegation map the fences are read from.
    pub fn start(
        name: &str,
        etcd: EtcdConfig,
        map: watch::Receiver<Arc<ClusterState>>,
    ) -> std::io::Result<EtcdCatalog> {
        let (tx, rx) = mpsc::channel::<Job>();
        let cfg = etcd.clone();
        std::thread::Builder::new()
            .name("sextant-catalog".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "the catalogue thread has no runtime");
                        return;
                    }
                };
                let mut client = None;
                while let Ok(job) = rx.recv() {
                    if client.is_none() {
                        client = rt.block_on(sextant_coordinator::etcd::connect(&cfg)).ok();
                    }
                    match &mut client {
                        Some(c) => job(&rt, c),
                        // Dropping the job drops its answer channel: the
                        // caller sees the catalogue unavailable.
                        None => drop(job),
                    }
                }
            })?;
        Ok(EtcdCatalog {
            name: name.to_string(),
            etcd,
            map,
            jobs: std::sync::Mutex::new(tx),
            last_fence: Arc::new(std::sync::Mutex::new(None)),
            seen: Arc::default(),
            doubts: Arc::default(),
            applied_lease: Arc::default(),
            lose_reply: Arc::new(AtomicBool::new(false)),
            hold: Arc::new(AtomicBool::new(false)),
            held: Arc::default(),
            claims: Arc::default(),
        })
    }

    /// A fault point for tests: the next commit's (first) transaction is
    /// not sent but held back, as by a slow network or etcd's queue, and
    /// its answer treated as lost (the commit reads back that it was not
    /// applied: `Unavailable`, in doubt). [`Self::release_held`] delivers
    /// it later; this catalogue never learns its outcome.
    pub fn hold_next(&self) {
        self.hold.store(true, Ordering::SeqCst);
    }

    /// Sends the transaction [`Self::hold_next`] held back, now: whether
    /// etcd applied it (`None`: none held).
    pub fn release_held(&self) -> Result<Option<bool>, CatalogError> {
        let Some(piece) = lock(&self.held).take() else {
            return Ok(None);
        };
        let (cfg, me) = (self.etcd.clone(), self.name.clone());
        self.run(move |rt, client| {
            rt.block_on(commit_tables_at(client, &cfg, &me, &piece))
                .map(|r| Some(r.is_some()))
                .map_err(unavailable)
        })
    }

    /// A fault point for tests: the next commit's transaction is sent
    /// (and applied by etcd, if its conditions hold) and its answer then
    /// treated as lost, as when it does not come back within the request
    /// timeout. The commit then reads back whether it was applied.
    pub fn lose_next_reply(&self) {
        self.lose_reply.store(true, Ordering::SeqCst);
    }

    /// Runs `f` on the catalogue's thread and waits for its answer.
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(
                &tokio::runtime::Runtime,
                &mut sextant_coordinator::etcd_client::Client,
            ) -> Result<T, CatalogError>
            + Send
            + 'static,
    ) -> Result<T, CatalogError> {
        run_on(&self.jobs_sender(), f)
    }

    fn jobs_sender(&self) -> mpsc::Sender<Job> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every table's manifest, read with one prefix get (one revision).
    fn manifests(&self) -> Result<Vec<(ClusterTable, TableManifest)>, CatalogError> {
        let cfg = self.etcd.clone();
        self.run(move |rt, client| {
            let prefix = cfg.key("manifest/");
            let resp = rt
                .block_on(client.get(
                    prefix.clone(),
                    Some(sextant_coordinator::etcd_client::GetOptions::new().with_prefix()),
                ))
                .map_err(unavailable)?;
            let mut out = Vec::new();
            for kv in resp.kvs() {
                let key = String::from_utf8_lossy(kv.key());
                let table =
                    key.strip_prefix(&cfg.prefix)
                        .map(keys::parse_key)
                        .and_then(|k| match k {
                            keys::Key::Manifest(t) => Some(t),
                            _ => None,
                        });
                let Some(table) = table else { continue };
                let m = TableManifest::from_bytes(kv.value())
                    .map_err(|e| CatalogError::Unavailable(format!("{key}: {e}")))?;
                out.push((table, m));
            }
            Ok(out)
        })
    }

    /// What etcd's transaction needs for `change`, from the map as seen
    /// now: the owner revision of every touched table this server owns.
    fn plan(&self, change: &CatalogChange) -> Result<TablesChange, CatalogError> {
        let state = self.map.borrow().clone();
        let mut plan = TablesChange {
            member_lease: state.members.get(&self.name).map(|m| m.lease),
            ..TablesChange::default()
        };
        for m in &change.put {
            let table = cluster_id(m.entry.id)?;
            let t = TableState {
                table,
                range: m.entry.range,
                manifest: m.to_bytes(),
            };
            match state.owner(table) {
                Some(o) if o.server == self.name => plan.updated.push((t, o.rev)),
                Some(_) => {
                    return Err(CatalogError::NotOwner {
                        table: m.entry.id,
                        member: self.name.clone(),
                    })
                }
                // A table the map has no owner for: a new one (a split's,
                // or the root the first server makes).
                None => plan.created.push(t),
            }
        }
        for id in &change.remove {
            let table = cluster_id(*id)?;
            match state.owner(table) {
                Some(o) if o.server == self.name => plan.removed.push((table, o.rev)),
                _ => {
                    return Err(CatalogError::NotOwner {
                        table: *id,
                        member: self.name.clone(),
                    })
                }
            }
        }
        Ok(plan)
    }

    /// Why a commit of `change` was refused (by the plan, or by etcd's
    /// fences), from etcd's owner keys read now at one revision — not
    /// from the map, which is a separate watch and may lag behind what
    /// this server's shell already acted on:
    /// - a touched table etcd names another server for (or a table to
    ///   remove that has no owner): `NotOwner` naming it — fencing, R2;
    /// - every touched table this server's (or, for a put, not in etcd
    ///   yet: a split's new table): the map is behind (or the change was
    ///   planned under a membership lease that is gone: a rejoin the map
    ///   does not show yet), nothing was written, `Stale` — the engine
    ///   keeps serving and commits again later. (Issue 20: a DROP refused on a map that had not yet seen
    ///   this server's own root table took the table out for good.)
    ///
    /// etcd not answering: `Unavailable`.
    fn why_refused(&self, change: &CatalogChange) -> CatalogError {
        let cfg = self.etcd.clone();
        let owners = self.run(move |rt, client| {
            let prefix = cfg.key("owner/");
            let resp = rt
                .block_on(client.get(
                    prefix,
                    Some(sextant_coordinator::etcd_client::GetOptions::new().with_prefix()),
                ))
                .map_err(unavailable)?;
            let mut owners = std::collections::BTreeMap::new();
            for kv in resp.kvs() {
                let key = String::from_utf8_lossy(kv.key());
                let Some(keys::Key::Owner(t)) = key.strip_prefix(&cfg.prefix).map(keys::parse_key)
                else {
                    continue;
                };
                let server = std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(keys::OwnerValue::decode)
                    .map(|o| o.server);
                owners.insert(t, server);
            }
            Ok(owners)
        });
        let owners = match owners {
            Ok(o) => o,
            Err(e) => return e,
        };
        let not_owner = |table: u64| CatalogError::NotOwner {
            table,
            member: self.name.clone(),
        };
        let mine = |id: u64, new_allowed: bool| -> Result<bool, CatalogError> {
            let t = cluster_id(id)?;
            Ok(match owners.get(&t) {
                Some(Some(server)) => *server == self.name,
                // An owner key that does not decode: not this server's.
                Some(None) => false,
                None => new_allowed,
            })
        };
        let touched = change
            .put
            .iter()
            .map(|m| (m.entry.id, true))
            .chain(change.remove.iter().map(|id| (*id, false)));
        for (id, new_allowed) in touched {
            match mine(id, new_allowed) {
                Ok(true) => {}
                Ok(false) => return not_owner(id),
                Err(e) => return e,
            }
        }
        CatalogError::Stale(format!(
            "refused while etcd still names {1} for every table of the change: the delegation map (revision {0}) is behind etcd, or {1}'s membership lease it was planned under is gone",
            self.map.borrow().revision,
            self.name
        ))
    }
}

impl TableCatalog for EtcdCatalog {
    fn commit(&self, member: &str, change: CatalogChange) -> Result<(), CatalogError> {
        if member != self.name {
            return Err(CatalogError::NotOwner {
                table: change.put.first().map_or(0, |m| m.entry.id),
                member: member.to_string(),
            });
        }
        // A DROP's final manifest is the one put without a replay.
        if change.put.iter().any(|m| m.replay.is_none()) && crate::fault::refuse_drop_commit() {
            return Err(CatalogError::Stale(
                "a test-only fault point refused a DROP's commit".into(),
            ));
        }
        let plan = match self.plan(&change) {
            Ok(plan) => plan,
            Err(CatalogError::NotOwner { .. }) => return Err(self.why_refused(&change)),
            Err(e) => return Err(e),
        };
        let (cfg, me) = (self.etcd.clone(), self.name.clone());
        let last_fence = Arc::clone(&self.last_fence);
        let lose_reply = Arc::clone(&self.lose_reply);
        let (hold, held) = (Arc::clone(&self.hold), Arc::clone(&self.held));
        let seen = Arc::clone(&self.seen);
        let doubts = Arc::clone(&self.doubts);
        let applied_lease = Arc::clone(&self.applied_lease);
        *lock(&last_fence) = Some(NOTHING_SENT);
        // In pieces etcd accepts, in order (each consistent on its own);
        // the first refused stops the rest. Pieces
        // already written stay: committing them again is harmless.
        let committed = self.run(move |rt, client| {
            let mut plan = plan;
            if plan.member_lease.is_none() {
                // The map has not seen this server's member key (yet): the
                // lease it is on now, or no commit at all without one.
                let resp = rt
                    .block_on(client.get(cfg.key(&keys::member_key(&me)), None))
                    .map_err(unavailable)?;
                match resp.kvs().first() {
                    Some(kv) => plan.member_lease = Some(kv.lease()),
                    None => return Ok(false),
                }
            }
            // The manifest revisions the change replaces: as this
            // catalogue's last commit of the table left them, else read.
            let known = lock(&seen).clone();
            let mut unread = Vec::new();
            for (t, owner_rev) in &plan.updated {
                match known.get(&t.table) {
                    Some((r, m)) if r == owner_rev => {
                        plan.manifest_revs.insert(t.table, *m);
                    }
                    _ => unread.push(t.table),
                }
            }
            if !unread.is_empty() {
                let resp = rt
                    .block_on(client.get(
                        cfg.key("manifest/"),
                        Some(
                            sextant_coordinator::etcd_client::GetOptions::new()
                                .with_prefix()
                                .with_keys_only(),
                        ),
                    ))
                    .map_err(unavailable)?;
                let mut revs = BTreeMap::new();
                for kv in resp.kvs() {
                    let key = String::from_utf8_lossy(kv.key());
                    if let Some(keys::Key::Manifest(t)) =
                        key.strip_prefix(&cfg.prefix).map(keys::parse_key)
                    {
                        revs.insert(t, kv.mod_revision());
                    }
                }
                for t in unread {
                    // No manifest yet: compared as absent (0).
                    plan.manifest_revs
                        .insert(t, revs.get(&t).copied().unwrap_or(0));
                }
            }
            let owner_revs: BTreeMap<ClusterTable, Revision> = plan
                .updated
                .iter()
                .map(|(t, r)| (t.table, *r))
                .collect();
            let forget = |piece: &TablesChange| {
                let mut seen = lock(&seen);
                for (t, _) in &piece.updated {
                    seen.remove(&t.table);
                }
                for t in &piece.created {
                    seen.remove(&t.table);
                }
                for (t, _) in &piece.removed {
                    seen.remove(t);
                }
            };
            for piece in plan.pieces(TXN_OPS) {
                let answer = if hold.swap(false, Ordering::SeqCst) {
                    *lock(&held) = Some(piece.clone());
                    Err("it was held back (a test's fault point)".to_string())
                } else {
                    match rt.block_on(commit_tables_at(client, &cfg, &me, &piece)) {
                        Ok(Some(_)) if lose_reply.swap(false, Ordering::SeqCst) => {
                            Err("its reply was lost (a test's fault point)".to_string())
                        }
                        Ok(done) => Ok(done),
                        Err(e) => Err(e.to_string()),
                    }
                };
                match answer {
                    Ok(Some(rev)) => {
                        let mut s = lock(&seen);
                        for (t, _) in &piece.removed {
                            s.remove(t);
                        }
                        for (t, _) in &piece.updated {
                            let owner = owner_revs.get(&t.table).copied().unwrap_or_default();
                            s.insert(t.table, (owner, rev));
                        }
                        // A created table's owner key is put by the same
                        // transaction.
                        let at = Revision(u64::try_from(rev).unwrap_or(0));
                        for t in &piece.created {
                            s.insert(t.table, (at, rev));
                        }
                        drop(s);
                        lock(&doubts).settle_by(&piece);
                        *lock(&applied_lease) = piece.member_lease;
                    }
                    Ok(None) => {
                        forget(&piece);
                        return Ok(false);
                    }
                    Err(why) => {
                        // No answer: read back whether etcd applied it.
                        match rt.block_on(tables_change_applied(client, &cfg, &piece)) {
                            Ok(true) => {
                                tracing::info!(error = %why, "a commit's answer was lost; read back: it was applied");
                                // Its revision is unknown: read next time.
                                forget(&piece);
                                lock(&doubts).settle_by(&piece);
                                *lock(&applied_lease) = piece.member_lease;
                            }
                            _ => {
                                // It may still apply: a doubt. What was
                                // seen of its tables stays, so that the
                                // next commit and this one cannot both
                                // apply.
                                let fence = lock(&doubts).add(piece);
                                *lock(&last_fence) = Some(fence);
                                return Err(unavailable(why));
                            }
                        }
                    }
                }
            }
            Ok(true)
        })?;
        if committed {
            return Ok(());
        }
        // A fence failed: the map we planned from was old, or a table is
        // another server's now.
        Err(self.why_refused(&change))
    }

    /// One transaction ([`commit_merge`]) fenced by both tables' owner
    /// revisions as the map has them and refused while a move, lend or
    /// borrow names either. A table the map does not name this server
    /// for: the merge may be done already (a retry: the map caught up
    /// with it), else it is refused like a commit (`NotOwner`, or `Stale`
    /// when only the map is behind).
    fn merge(&self, member: &str, merged: TableManifest, gone: u64) -> Result<(), CatalogError> {
        let change = CatalogChange {
            put: vec![merged.clone()],
            remove: vec![gone],
        };
        if member != self.name {
            return Err(CatalogError::NotOwner {
                table: merged.entry.id,
                member: member.to_string(),
            });
        }
        let (lower, upper) = (cluster_id(merged.entry.id)?, cluster_id(gone)?);
        let state = self.map.borrow().clone();
        let rev = |t| {
            state
                .owner(t)
                .filter(|o| o.server == self.name)
                .map(|o| o.rev)
        };
        let revs = rev(lower).zip(rev(upper));
        let cfg = self.etcd.clone();
        let bytes = merged.to_bytes();
        let Some((lower_rev, upper_rev)) = revs else {
            let done = self.run(move |rt, client| {
                let resp = rt
                    .block_on(client.get(cfg.key(&keys::manifest_key(lower)), None))
                    .map_err(unavailable)?;
                Ok(resp.kvs().first().is_some_and(|kv| kv.value() == bytes))
            })?;
            return if done {
                Ok(())
            } else {
                Err(self.why_refused(&change))
            };
        };
        let state = TableState {
            table: lower,
            range: merged.entry.range,
            manifest: bytes,
        };
        {
            // The merge changes both tables' keys: read again next time.
            let mut seen = lock(&self.seen);
            seen.remove(&lower);
            seen.remove(&upper);
        }
        let outcome = self.run(move |rt, client| {
            rt.block_on(commit_merge(
                client, &cfg, &state, lower_rev, upper, upper_rev,
            ))
            .map_err(unavailable)
        })?;
        match outcome {
            MergeOutcome::Merged => Ok(()),
            MergeOutcome::Busy(why) => Err(CatalogError::Busy(why)),
            MergeOutcome::Fenced => Err(self.why_refused(&change)),
        }
    }

    fn next_table_id(&self) -> Result<u64, CatalogError> {
        let cfg = self.etcd.clone();
        self.run(move |rt, client| {
            rt.block_on(next_table_id(client, &cfg))
                .map(|t| u64::from(t.0))
                .map_err(unavailable)
        })
    }

    /// Every table's lowest replay position into `member`'s journal, from
    /// all `manifest/` keys at one revision; a manifest that does not
    /// decode makes it unknown (an error: the engine then trims nothing).
    fn journal_floor(&self, member: &str) -> Result<Option<u64>, CatalogError> {
        Ok(self
            .manifests()?
            .into_iter()
            .filter_map(|(_, m)| m.replay.filter(|p| p.member == member))
            .map(|p| p.from)
            .min())
    }

    /// Every `manifest/` key's snapshot, at one revision.
    fn referenced_files(&self) -> Result<std::collections::BTreeSet<String>, CatalogError> {
        Ok(self
            .manifests()?
            .into_iter()
            .map(|(_, m)| m.entry.file)
            .collect())
    }

    /// The last commit's fence: the number of its doubt when its outcome
    /// was not known, else [`NOTHING_SENT`].
    fn last_commit_fence(&self, member: &str) -> Option<u64> {
        if member != self.name {
            return None;
        }
        *lock(&self.last_fence)
    }

    /// The doubt `fence` is settled: in memory (a later commit of this
    /// catalogue applied that settles it), else read from etcd
    /// ([`tables_change_settled`]: a condition of its transaction is false
    /// for good). A number this catalogue never handed out: `false`.
    fn fence_void(&self, member: &str, fence: u64) -> Result<bool, CatalogError> {
        if member != self.name {
            return Ok(false);
        }
        if fence == NOTHING_SENT {
            return Ok(true);
        }
        let change = match lock(&self.doubts).open.get(&fence) {
            None => return Ok(false),
            Some(None) => return Ok(true),
            Some(Some(c)) => c.clone(),
        };
        let (cfg, me) = (self.etcd.clone(), self.name.clone());
        let settled = self.run(move |rt, client| {
            rt.block_on(tables_change_settled(client, &cfg, &me, &change))
                .map_err(unavailable)
        })?;
        if settled {
            lock(&self.doubts).open.insert(fence, None);
        }
        Ok(settled)
    }

    /// No commit or handover an earlier run of this member sent can apply
    /// any more. Read from etcd (the engine asks rarely: at its first
    /// committed checkpoint, then with a growing pause until it is so):
    /// - every doubt of this catalogue is settled (an earlier engine run
    ///   on this catalogue, in this process);
    /// - a commit of this catalogue applied under lease L, and
    ///   `member/<me>` is on L now: every commit of another process of
    ///   this member requires the key on a lease of its own (L is this
    ///   process's: the server joins before it opens its engine —
    ///   `cluster::join` — and a join creates the key only when absent,
    ///   on a lease granted for it; the key never goes back to an earlier
    ///   lease, so those commits can never apply); the same holds for the
    ///   shell's DROP handovers, which compare `member/<me>` on the lease
    ///   of the generation they began in
    ///   (`sextant_coordinator::ownership::handover_txn`), and the shell's
    ///   ADD commits nothing for this server's engine (`EngineHost::
    ///   add_table` answers `None`: the engine commits through this
    ///   catalogue). So a server restarted without any failover — its
    ///   tables' owner keys as the earlier run left them — sweeps too. (It
    ///   used to also require every `owner/` key naming this member to be
    ///   rewritten since the join, while handovers compared the owner
    ///   revision only: a single server that restarted never swept its
    ///   earlier runs' snapshots.)
    fn earlier_runs_void(&self, member: &str) -> Result<bool, CatalogError> {
        if member != self.name {
            return Ok(false);
        }
        let open: Vec<u64> = lock(&self.doubts)
            .open
            .iter()
            .filter(|(_, d)| d.is_some())
            .map(|(f, _)| *f)
            .collect();
        for fence in open {
            if !self.fence_void(member, fence)? {
                return Ok(false);
            }
        }
        let Some(lease) = *lock(&self.applied_lease) else {
            return Ok(false);
        };
        let (cfg, me) = (self.etcd.clone(), self.name.clone());
        self.run(move |rt, client| {
            let resp = rt
                .block_on(client.get(cfg.key(&keys::member_key(&me)), None))
                .map_err(unavailable)?;
            Ok(resp.kvs().first().is_some_and(|kv| kv.lease() == lease))
        })
    }

    fn claim_completion(&self, member: &str) -> Result<bool, CatalogError> {
        use sextant_coordinator::etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
        let (cfg, me, dead) = (self.etcd.clone(), self.name.clone(), member.to_string());
        let claims = Arc::clone(&self.claims);
        self.run(move |rt, client| {
            let mine = cfg.key(&keys::member_key(&me));
            let theirs = cfg.key(&keys::member_key(&dead));
            let resp = rt
                .block_on(client.get(mine.clone(), None))
                .map_err(unavailable)?;
            let Some(lease) = resp.kvs().first().map(|kv| kv.lease()) else {
                return Err(unavailable(
                    "this server is not a member: it claims nothing",
                ));
            };
            let txn = Txn::new()
                .when(vec![
                    Compare::create_revision(theirs.clone(), CompareOp::Equal, 0),
                    Compare::lease(mine, CompareOp::Equal, lease),
                ])
                .and_then(vec![TxnOp::put(
                    cfg.key(&claim_key(&dead)),
                    me.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = rt.block_on(client.txn(txn)).map_err(unavailable)?;
            if resp.succeeded() {
                let rev = resp.header().map_or(0, |h| h.revision());
                claims
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(dead.clone(), rev);
                crate::fault::step("completion-claimed");
                return Ok(true);
            }
            let back = rt.block_on(client.get(theirs, None)).map_err(unavailable)?;
            if back.kvs().is_empty() {
                Err(unavailable("this server's membership lease changed"))
            } else {
                Ok(false)
            }
        })
    }

    /// Deletes this server's claim (the put it made, compared by mod
    /// revision: never a later claim). If etcd does not answer, the
    /// release is sent again every [`RELEASE_RETRY`] by a thread of its
    /// own until etcd answers (or the catalogue stops): sent once, a lost
    /// release left the claim standing for as long as this server lived,
    /// and the member it names — back as a member — was refused every
    /// table (`refuse_while_claimed`) all that time (the simulation's
    /// seeds 26, 131, …: etcd down at the release).
    fn release_completion_claim(&self, member: &str) -> Result<(), CatalogError> {
        let Some(rev) = self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(member)
        else {
            return Ok(()); // no claim of this server's on it
        };
        let (jobs, cfg, dead) = (self.jobs_sender(), self.etcd.clone(), member.to_string());
        let name = dead.clone();
        let attempt = move || {
            if crate::fault::lose_release() {
                return Err(unavailable("a test-only fault lost this release"));
            }
            delete_claim(&jobs, &cfg, &name, rev)
        };
        let first = attempt();
        let Err(e) = first else { return Ok(()) };
        let retry = std::thread::Builder::new()
            .name("sextant-claim-release".into())
            .spawn(move || loop {
                std::thread::sleep(RELEASE_RETRY);
                match attempt() {
                    Ok(()) => {
                        tracing::info!(member = %dead, "the claim on a journal completion is released (retried)");
                        return;
                    }
                    Err(CatalogError::Unavailable(m)) if m == CATALOGUE_STOPPED => return,
                    Err(_) => {}
                }
            });
        if let Err(spawn) = retry {
            tracing::error!(member, error = %spawn, "cannot retry the release of a journal completion claim; it goes with this server's lease");
        }
        Err(e)
    }

    /// This server's claim on `member` is still its put of the revision
    /// it recorded (not gone with a lease that ran out, not another's).
    fn claim_held(&self, member: &str) -> Result<bool, CatalogError> {
        let Some(rev) = self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(member)
            .copied()
        else {
            return Ok(false);
        };
        let (cfg, who) = (self.etcd.clone(), member.to_string());
        let held = self.run(move |rt, client| {
            let resp = rt
                .block_on(client.get(cfg.key(&claim_key(&who)), None))
                .map_err(unavailable)?;
            Ok(resp
                .kvs()
                .first()
                .is_some_and(|kv| kv.mod_revision() == rev))
        })?;
        if held {
            // The completion is written right after this answer: the
            // test-only pause between the check and the write.
            crate::fault::step("completion-write");
        }
        Ok(held)
    }

    fn holds_membership(&self, member: &str) -> Result<bool, CatalogError> {
        let (cfg, who) = (self.etcd.clone(), member.to_string());
        self.run(move |rt, client| {
            let resp = rt
                .block_on(client.get(cfg.key(&keys::member_key(&who)), None))
                .map_err(unavailable)?;
            Ok(!resp.kvs().is_empty())
        })
    }

    fn completion_claimed(&self, member: &str) -> Result<bool, CatalogError> {
        let (cfg, who) = (self.etcd.clone(), member.to_string());
        self.run(move |rt, client| {
            let resp = rt
                .block_on(client.get(cfg.key(&claim_key(&who)), None))
                .map_err(unavailable)?;
            Ok(!resp.kvs().is_empty())
        })
    }

    fn tables(&self, member: &str) -> Result<Vec<TableManifest>, CatalogError> {
        let state = self.map.borrow().clone();
        let mine: std::collections::BTreeSet<ClusterTable> = state.owned_by(member).collect();
        // A table assigned but never written (one the coordinator made)
        // has no manifest: nothing to load.
        Ok(self
            .manifests()?
            .into_iter()
            .filter(|(t, _)| mine.contains(t))
            .map(|(_, m)| m)
            .collect())
    }
}
