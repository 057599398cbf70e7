//! Log-less durability on a cluster, the member's side (issue 21, item 6):
//! a member's redo entries, and the *completion* of a dead member's
//! journal from the backups its clients kept.
//!
//! # How a log-less member differs from a journaling one
//! - It still writes every operation to its journal before the reply, but
//!   syncs the journal only in the background ([`crate::journal::SyncMode::Background`]):
//!   the reply does not wait for a disk flush. A *process* crash loses
//!   nothing (the kernel holds what was written, and failover replays the
//!   journal from the shared store as for any member).
//! - Each commit also yields a sealed redo entry ([`crate::logless`]): the
//!   operation's write set with each stamp key's previous stamp, sealed
//!   with the member's key (`members/<name>/logless.key`, the servers'
//!   trust domain; clients never read it). Replies carry the entries of the
//!   member's last K operations (the ARL), and clients keep those above the
//!   journal's *synced* LSN, the watermark ([`MemberRedo`]).
//! - A *machine* crash may cut the journal's unsynced tail. That tail is
//!   exactly what the clients hold.
//!
//! # One floor for every key
//! A snapshot is written only after the journal is synced through
//! everything it holds (the WAL rule, `Journal::wait_synced` before every
//! write-back and a DROP's final snapshot). So after a crash that keeps
//! the journal's valid prefix up to LSN P — P at or above the synced LSN —
//! every snapshot and manifest reflects records at or below P only: every
//! key's floor for the stamp rule is P, and the entries to decide are the
//! backups above P.
//!
//! # One decision, written once ([`complete_member_journal`])
//! The stamp rule discards whole entries, and one entry may span tables
//! that go to different new owners; so the tail is decided once, before the
//! dead member's tables are handed out, and written as
//! `members/<name>/logless.completion` ([`Completion`]: P and the entries
//! to replay above it). A separate object, not an append to the journal: a
//! member that is only cut off may still write to its own journal, and
//! nothing it writes after P was acknowledged under a valid lease.
//! Completing is idempotent: a completion that exists is the decision, and
//! a second call (another coordinator, a retry) returns it unchanged.
//! Every reader ([`Engine::add_tables`]) replays the dead member's journal
//! up to P and then the completion's entries.
//!
//! # A new run at every rejoin
//! A member cut off (SIGSTOP, a partition) past its lease joins the
//! cluster again in the same process under a new membership generation.
//! Before it takes or serves any table it begins a *new run*
//! ([`MemberRedo::begin_new_run`], `Engine::begin_serving`): its journal
//! synced through everything written so far, a new run id in
//! `logless.state`. Every reader takes the completion of the run the
//! state file names, and a claimer completes only the run it read before
//! claiming ([`complete_member_run`]); so a completion of the old run
//! written late — by a claimer paused between its last check of its
//! claim and its write, past its lease — names a run nobody reads, and
//! cannot fix the end of the journal below what the member acknowledges
//! in its new run. The old run is whole (synced): nothing of it is needed
//! from the clients, who learn the new run from the next reply and drop
//! the old run's backups (one handed in later is answered "too late").
//!
//! # A member let back in after its journal was completed
//! A member only cut off (not dead) past its lease and the grace may have
//! its current run completed behind its back (before it joined again).
//! Before it takes a table again (every ADD), it *retires* that
//! completion: once no manifest replays its journal from at or below the
//! completion's P, it syncs its journal, begins a new run (the new run
//! waits for this: a reader still replaying from at or below P needs the
//! completion, which it finds only while the state file names that run),
//! deletes the completion and the backups kept for the run, and only
//! then serves (refusing the ADD until then). The run's next completion
//! (its next death) is that of the new run, decided at the journal's new
//! end. The argument is on `retire_stale_completion` in
//! `crate::engine::member`.
//!
//! # A member restarted after its journal was completed
//! Restarted (rather than woken) while the completion of its crashed run
//! exists, a member first cuts its journal back to the completion's P
//! (`cut_after_completion` in `crate::engine::member`,
//! [`crate::journal::truncate_after`]): what it wrote after P, cut off,
//! was never acknowledged (R1), and no reader ever took it; then
//! [`crate::engine::Engine::recover_logless`] appends the decided entries
//! right after P as for any crashed run. No operator is needed.
//!
//! # Completions are claimed
//! Another server decides a member's completion only under a claim made
//! while that member is not a member at that moment
//! (`TableCatalog::claim_completion`: the caller's view of the membership
//! may be older than the member's rejoin), and a log-less member takes no
//! table while a claim on its journal stands: so no completion is ever
//! written behind the back of a member that serves again (see
//! `refuse_while_claimed` in `crate::engine::member`).
//!
//! What survives: every acknowledged operation some live client still
//! holds, and every later one that builds on it; an operation no holder
//! returned is reported missing, and every later operation on the same
//! keys is discarded with it (never half of an operation).
//!
//! [`Engine::add_tables`]: crate::engine::Engine::add_tables

use crate::durability::{
    begin_run, read_acked, read_run_state, write_acked, write_run_state, LoglessConfig, RunState,
};
use crate::error::EngineError;
use crate::journal::{self, Lsn};
use crate::logless::{self, Arl, Decision, Redo, RedoEntry, RedoKey, Stamps, KEY_LEN};
use crate::member::{member_prefix, MemberState, PrefixStore, MEMBER_STATE_NAME};
use crate::record::Mutation;
use crate::requests::RequestTag;
use crate::store::Store;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sextant_types::Soid;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The member's redo key, in its own part of the shared store.
pub const KEY_FILE: &str = "logless.key";
/// The completion of one crashed run of the member's journal, in its own
/// part of the store: `logless.completion-<run id, 16 hex digits>` (the
/// run `logless.state` names). Per run, so a completion is never taken
/// for a later crash.
pub fn completion_file(incarnation: u64) -> String {
    format!("logless.completion-{incarnation:016x}")
}
const COMPLETION_MAGIC: &[u8; 8] = b"SXTCMP1\n";

/// Stamps are forgotten at or below the synced LSN every this many
/// commits (a stamp at or below P matches any floor; see the module doc).
const FORGET_EVERY: u64 = 1024;

/// A log-less member's redo state: key, stamps, ARL (changed only inside
/// `Journal::append_with`, in LSN order), and its run: like a single
/// log-less server it records in `logless.state` whether its last run
/// ended cleanly; one that did not must first complete its own journal
/// from its clients' backups ([`crate::engine::Engine::recover_logless`]).
pub struct MemberRedo {
    key: RedoKey,
    ordered: Mutex<Ordered>,
    /// This run's id: replies carry it, so a client knows which run of
    /// which member its backups belong to. Changes when the member joins
    /// the cluster again in the same process ([`MemberRedo::begin_new_run`]).
    incarnation: std::sync::atomic::AtomicU64,
    /// The membership generation this run began under, at most (1: the
    /// process's first, which it joins before the engine opens), and the
    /// newest one an ADD came under ([`MemberRedo::joined`]): when that
    /// is newer, the member was cut off and joined again, and begins a
    /// new run before it serves (see `begin_serving` in
    /// `crate::engine::member`).
    run_generation: std::sync::atomic::AtomicU64,
    joined_generation: std::sync::atomic::AtomicU64,
    /// The crashed run to complete before serving (`None`: none, or done).
    crashed: Mutex<Option<u64>>,
    /// The end of the journal's valid prefix when the engine opened.
    pub(crate) opened_through: std::sync::atomic::AtomicU64,
    /// The highest LSN a reply carried to a client, and the highest
    /// persisted (`logless.acked`, as a single log-less server keeps it): a
    /// completion compares what came back with it, so a lost tail whose
    /// every holder is gone is reported, not silent.
    acked: std::sync::atomic::AtomicU64,
    acked_persisted: Mutex<Lsn>,
    /// Redo bytes sealed so far (`sextant status`, metrics).
    handed_out: std::sync::atomic::AtomicU64,
}

struct Ordered {
    stamps: Stamps,
    arl: Arl,
}

impl std::fmt::Debug for MemberRedo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberRedo").finish_non_exhaustive()
    }
}

impl MemberRedo {
    /// Reads the member's key from `view` (its part of the shared store),
    /// or makes one on its first log-less start.
    pub fn open(view: &dyn Store, config: &LoglessConfig) -> Result<MemberRedo, EngineError> {
        let key = match read_key(view)? {
            Some(k) => k,
            None => {
                let k = random_bytes::<KEY_LEN>()?;
                view.put_blob(KEY_FILE, &k)
                    .map_err(|source| EngineError::Io {
                        file: view.describe(KEY_FILE),
                        source,
                    })?;
                k
            }
        };
        let (crashed, incarnation) = begin_run(view)?;
        Ok(MemberRedo {
            key: RedoKey::new(&key, random_bytes::<16>()?),
            ordered: Mutex::new(Ordered {
                stamps: Stamps::default(),
                arl: Arl::new(config.arl_size),
            }),
            incarnation: std::sync::atomic::AtomicU64::new(incarnation),
            run_generation: std::sync::atomic::AtomicU64::new(1),
            joined_generation: std::sync::atomic::AtomicU64::new(1),
            crashed: Mutex::new(crashed),
            opened_through: std::sync::atomic::AtomicU64::new(0),
            acked: std::sync::atomic::AtomicU64::new(0),
            acked_persisted: Mutex::new(0),
            handed_out: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// A reply carried the entries up to `lsn` to a client.
    pub fn note_acked(&self, lsn: Lsn) {
        self.acked
            .fetch_max(lsn, std::sync::atomic::Ordering::AcqRel);
    }

    /// Persists the acknowledged mark if it grew (never while a crashed
    /// run is being completed: the file still describes that run).
    pub(crate) fn persist_acked(&self, view: &dyn Store) -> Result<bool, EngineError> {
        if self.crashed().is_some() {
            return Ok(false);
        }
        let mut persisted = self.acked_persisted.lock();
        let acked = self.acked.load(std::sync::atomic::Ordering::Acquire);
        if acked <= *persisted {
            return Ok(false);
        }
        write_acked(view, self.incarnation(), acked)?;
        *persisted = acked;
        Ok(true)
    }

    /// This run's id.
    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// An ADD comes under membership generation `generation`. Returns
    /// whether the member joined again since its run began (a new run is
    /// due before it serves).
    pub(crate) fn joined(&self, generation: u64) -> bool {
        use std::sync::atomic::Ordering;
        self.joined_generation
            .fetch_max(generation, Ordering::AcqRel);
        self.rejoined()
    }

    /// Has the member joined again since its run began?
    pub(crate) fn rejoined(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.joined_generation.load(Ordering::Acquire) > self.run_generation.load(Ordering::Acquire)
    }

    /// Begins a new run in the same process (the member joined the
    /// cluster again after being cut off, or retires a completion of its
    /// run written behind its back): a new random id, named in the state
    /// file, so that a completion of the old run written late — by a
    /// claimer paused between its last check and its write — names a run
    /// no reader takes (every reader takes the completion of the run the
    /// state file names). The caller has synced the journal through
    /// everything written so far: the old run is whole, nothing of it is
    /// needed from the clients. Returns the old run's id.
    pub(crate) fn begin_new_run(&self, view: &dyn Store) -> Result<u64, EngineError> {
        use std::sync::atomic::Ordering;
        let old = self.incarnation();
        let new = crate::durability::new_run_id(Some(old))?;
        // The generation first: an ADD of a newer one that comes meanwhile
        // finds the run older than it and begins another.
        let joined = self.joined_generation.load(Ordering::Acquire);
        write_run_state(
            view,
            RunState {
                clean: false,
                incarnation: new,
            },
        )?;
        self.incarnation.store(new, Ordering::Release);
        self.run_generation.fetch_max(joined, Ordering::AcqRel);
        Ok(old)
    }

    /// The crashed run this member must complete before it serves.
    pub fn crashed(&self) -> Option<u64> {
        *self.crashed.lock()
    }

    /// The crashed run is completed and its entries are in the journal:
    /// the state file names this run.
    pub(crate) fn recovered(&self, view: &dyn Store) -> Result<(), EngineError> {
        *self.crashed.lock() = None;
        write_run_state(
            view,
            RunState {
                clean: false,
                incarnation: self.incarnation(),
            },
        )
    }

    /// A clean shutdown: everything is written back, nothing to complete.
    pub(crate) fn closed_cleanly(&self, view: &dyn Store) -> Result<(), EngineError> {
        if self.crashed().is_some() {
            return Ok(());
        }
        write_run_state(
            view,
            RunState {
                clean: true,
                incarnation: self.incarnation(),
            },
        )
    }

    /// Called with the LSN just taken for an operation (under the journal's
    /// LSN lock): stamps its keys, seals its redo entry, pushes it on the
    /// ARL. `synced` is the journal's synced LSN, below which stamps may
    /// be forgotten.
    pub fn commit(
        &self,
        lsn: Lsn,
        keys: &[Soid],
        tag: Option<&RequestTag>,
        mutations: &[u8],
        synced: Lsn,
    ) -> Redo {
        let mut o = self.ordered.lock();
        if lsn.is_multiple_of(FORGET_EVERY) {
            o.stamps.forget_below(synced.saturating_add(1));
        }
        let prev = o.stamps.stamp(lsn, keys);
        let redo = Redo {
            lsn,
            bytes: Arc::from(self.key.encode_tagged(lsn, &prev, tag, mutations)),
        };
        o.arl.push(redo.clone());
        drop(o);
        self.handed_out.fetch_add(
            redo.bytes.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        redo
    }

    pub fn handed_out_bytes(&self) -> u64 {
        self.handed_out.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The ARL's entries above `lsn`, oldest first.
    pub fn arl_since(&self, lsn: Lsn) -> Vec<Redo> {
        self.ordered.lock().arl.since(lsn)
    }

    pub fn arl_size(&self) -> usize {
        self.ordered.lock().arl.capacity()
    }

    pub fn stamps_len(&self) -> usize {
        self.ordered.lock().stamps.len()
    }
}

fn read_key(store: &dyn Store) -> Result<Option<[u8; KEY_LEN]>, EngineError> {
    let Some(b) = store.get_blob(KEY_FILE).map_err(|source| EngineError::Io {
        file: store.describe(KEY_FILE),
        source,
    })?
    else {
        return Ok(None);
    };
    b.as_slice()
        .try_into()
        .map(Some)
        .map_err(|_| EngineError::Corrupt {
            file: store.describe(KEY_FILE),
            what: format!("the redo key is {} bytes, not {KEY_LEN}", b.len()),
        })
}

fn random_bytes<const N: usize>() -> Result<[u8; N], EngineError> {
    crate::durability::random_bytes().map_err(|source| EngineError::Io {
        file: "/dev/urandom".into(),
        source,
    })
}

/// The decided end of a dead member's journal: replay its records up to
/// `through`, then `entries` (in LSN order), and nothing else of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub through: Lsn,
    /// (LSN, the request it answered and its reply, the write set).
    pub entries: Vec<CompletedEntry>,
}

/// One decided entry of a [`Completion`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedEntry {
    pub lsn: Lsn,
    /// Carried to the tables' next owners, so a retry is answered, not run
    /// again (`None`: no request identity, or an older server's entry).
    pub tag: Option<RequestTag>,
    pub mutations: Vec<Mutation>,
}

impl Completion {
    /// `magic | crc32c(body) | body`, body = postcard.
    pub fn encode(&self) -> Vec<u8> {
        let body = postcard::to_stdvec(self).expect("serializing to a Vec cannot fail");
        let mut out = Vec::with_capacity(body.len() + 12);
        out.extend_from_slice(COMPLETION_MAGIC);
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Never panics; a damaged object is an error, never a shorter completion.
    pub fn decode(b: &[u8]) -> Result<Completion, String> {
        let rest = b
            .strip_prefix(COMPLETION_MAGIC.as_slice())
            .ok_or("not a journal completion (bad magic)")?;
        if rest.len() < 4 {
            return Err("truncated".into());
        }
        let (crc, body) = rest.split_at(4);
        let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if crc32c::crc32c(body) != crc {
            return Err("checksum mismatch".into());
        }
        let c: Completion = postcard::from_bytes(body).map_err(|e| e.to_string())?;
        if c.entries.windows(2).any(|w| w[0].lsn >= w[1].lsn)
            || c.entries.first().is_some_and(|e| e.lsn <= c.through)
        {
            return Err("entries out of order".into());
        }
        Ok(c)
    }
}

/// The run of member `view` (its part of the store) whose journal a
/// reader must take completed: the run `logless.state` names if it did
/// not end cleanly (`None`: it did, or the member never ran log-less).
pub fn unclean_run(view: &dyn Store) -> Result<Option<u64>, EngineError> {
    Ok(read_run_state(view)?
        .filter(|s| !s.clean)
        .map(|s| s.incarnation))
}

/// Reads the completion of run `incarnation` from a member's part of the
/// store (`view`).
pub fn read_completion(
    view: &dyn Store,
    incarnation: u64,
) -> Result<Option<Completion>, EngineError> {
    let file = completion_file(incarnation);
    let Some(b) = view.get_blob(&file).map_err(|source| EngineError::Io {
        file: view.describe(&file),
        source,
    })?
    else {
        return Ok(None);
    };
    Completion::decode(&b)
        .map(Some)
        .map_err(|what| EngineError::Corrupt {
            file: view.describe(&file),
            what,
        })
}

/// The completion a reader of member `view`'s journal must honour now:
/// that of its unclean run, if decided.
pub fn current_completion(view: &dyn Store) -> Result<Option<Completion>, EngineError> {
    match unclean_run(view)? {
        Some(run) => read_completion(view, run),
        None => Ok(None),
    }
}

/// Where clients' backups of run `incarnation` of a member wait for its
/// completion: `members/<name>/backups/<run, 16 hex digits>/`.
fn backups_prefix(member: &str, incarnation: u64) -> String {
    format!("{}backups/{incarnation:016x}/", member_prefix(member))
}

/// What became of backups handed in for another member's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handed {
    /// Kept in the shared store for whoever completes that member's journal.
    Kept,
    /// That run's journal is completed already: of no more use.
    TooLate,
    /// No member has that run unfinished (it shut down cleanly, was
    /// completed and restarted, or never existed): of no more use.
    Unknown,
}

/// A client hands in its backups of run `incarnation` of some log-less
/// member (dead, or restarting) through any server: they are kept in the
/// shared store, where [`complete_member_journal`] reads them. Finds the
/// member by its state file (a rare path: a scan of the members).
pub fn keep_backups(
    shared: &Arc<dyn Store>,
    incarnation: u64,
    client_id: u64,
    backups: Vec<Vec<u8>>,
) -> Result<Handed, EngineError> {
    let io = |file: String| move |source| EngineError::Io { file, source };
    // The members: the first name under `members/` (a store lists one
    // directory level, or every name under the prefix).
    let mut members: Vec<String> = shared
        .list(crate::member::SHARED_ROOT)
        .map_err(io(shared.describe(crate::member::SHARED_ROOT)))?
        .iter()
        .filter_map(|n| {
            let rest = n.strip_prefix(crate::member::SHARED_ROOT)?;
            let m = rest.split('/').next()?;
            (!m.is_empty()).then(|| m.to_string())
        })
        .collect();
    members.dedup();
    for member in &members {
        let view = PrefixStore::read_only(Arc::clone(shared), member_prefix(member));
        if unclean_run(&view)? != Some(incarnation) {
            continue;
        }
        if read_completion(&view, incarnation)?.is_some() {
            return Ok(Handed::TooLate);
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            "{}{client_id:016x}-{nanos}",
            backups_prefix(member, incarnation)
        );
        let bytes = postcard::to_stdvec(&backups).expect("serializing to a Vec cannot fail");
        shared
            .put_blob(&name, &bytes)
            .map_err(io(shared.describe(&name)))?;
        return Ok(Handed::Kept);
    }
    Ok(Handed::Unknown)
}

/// The backups kept for run `incarnation` of `member` (an unreadable blob
/// is skipped: the entries are checked one by one anyway).
fn kept_backups(
    shared: &dyn Store,
    member: &str,
    incarnation: u64,
) -> Result<Vec<Vec<u8>>, EngineError> {
    let prefix = backups_prefix(member, incarnation);
    let names = shared.list(&prefix).map_err(|source| EngineError::Io {
        file: shared.describe(&prefix),
        source,
    })?;
    let mut out = Vec::new();
    for name in names {
        let blob = shared.get_blob(&name).map_err(|source| EngineError::Io {
            file: shared.describe(&name),
            source,
        })?;
        match blob.map(|b| postcard::from_bytes::<Vec<Vec<u8>>>(&b)) {
            Some(Ok(entries)) => out.extend(entries),
            Some(Err(e)) => {
                tracing::warn!(file = %shared.describe(&name), error = %e, "skipping damaged kept backups")
            }
            None => {}
        }
    }
    Ok(out)
}

/// Deletes the backups kept for run `incarnation` of `member` (its journal
/// is completed and the completion applied or handed out).
pub fn forget_kept_backups(shared: &dyn Store, member: &str, incarnation: u64) {
    let prefix = backups_prefix(member, incarnation);
    if let Ok(names) = shared.list(&prefix) {
        for name in names {
            if let Err(e) = shared.delete(&name) {
                tracing::warn!(file = %shared.describe(&name), error = %e, "cannot delete kept backups");
            }
        }
    }
}

/// What completing a member's journal found and decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompletionReport {
    /// The end of the journal's valid prefix (P).
    pub through: Lsn,
    /// Backups handed in, and of them: not sealed by the member's key,
    /// undecodable.
    pub received: usize,
    pub forged: usize,
    pub malformed: usize,
    /// Distinct entries above P, and of them: replayed, thrown away (a
    /// predecessor missing); the highest LSN of P and of them.
    pub above: usize,
    pub newest: Lsn,
    pub applied: usize,
    pub discarded: Vec<Lsn>,
    /// LSN ranges above P that no backup held (inclusive).
    pub missing: Vec<(Lsn, Lsn)>,
    /// The run's persisted acknowledged mark (0: none) and, when P and
    /// the entries handed back stop short of it, the acknowledged LSNs
    /// nobody returned — a loss at the tail `missing` cannot show.
    pub acked_mark: Lsn,
    pub unreturned: Option<(Lsn, Lsn)>,
    /// `false`: a completion existed already and is the decision (the
    /// counts above describe it, not these backups).
    pub written: bool,
}

impl CompletionReport {
    /// Could an acknowledged operation have been lost?
    pub fn maybe_lost(&self) -> bool {
        !self.discarded.is_empty() || !self.missing.is_empty() || self.unreturned.is_some()
    }
}

/// Pure: the completion of a journal whose valid prefix ends at `through`,
/// from the opened backups `entries` (any order, duplicates allowed).
pub fn plan_completion(
    through: Lsn,
    entries: impl IntoIterator<Item = RedoEntry>,
) -> (Completion, CompletionReport) {
    let mut above: BTreeMap<Lsn, RedoEntry> = BTreeMap::new();
    for e in entries {
        if e.lsn > through {
            above.entry(e.lsn).or_insert(e);
        }
    }
    let lsns: Vec<Lsn> = above.keys().copied().collect();
    let list: Vec<(Lsn, &[(Soid, Lsn)])> = above.values().map(|e| (e.lsn, &e.prev[..])).collect();
    let decisions = logless::plan_recovery(&list, |_| through);
    let mut report = CompletionReport {
        through,
        above: lsns.len(),
        newest: lsns.last().copied().unwrap_or(through).max(through),
        missing: logless::missing_ranges(&lsns, through + 1),
        ..Default::default()
    };
    let mut completion = Completion {
        through,
        entries: Vec::new(),
    };
    for (e, d) in above.into_values().zip(decisions) {
        match d {
            Decision::Apply => {
                report.applied += 1;
                completion.entries.push(CompletedEntry {
                    lsn: e.lsn,
                    tag: e.tag,
                    mutations: e.mutations,
                });
            }
            // Above P nothing is durable; kept for completeness.
            Decision::Durable => {}
            Decision::Discard { .. } => report.discarded.push(e.lsn),
        }
    }
    (completion, report)
}

/// Decides the end of dead member `member`'s journal from the backups its
/// clients handed in (sealed redo entries) and writes it as the member's
/// completion, unless one exists already (then that one is the decision).
/// Call it after the member's lease is gone and before any of its tables
/// is handed to another member. Errors: the member never ran log-less (no
/// key), an unreadable or damaged journal or completion.
pub fn complete_member_journal(
    shared: Arc<dyn Store>,
    member: &str,
    backups: impl IntoIterator<Item = Vec<u8>>,
) -> Result<CompletionReport, EngineError> {
    let view = PrefixStore::read_only(Arc::clone(&shared), member_prefix(member));
    let run = unclean_run(&view)?;
    complete_member_run(shared, member, run, backups, || Ok(()))
}

/// [`complete_member_journal`] of run `run` only — the run the caller
/// read as the one to complete when it claimed the completion (`None`:
/// the member had shut down cleanly, nothing to complete). If the
/// member's state file names another run now (it restarted meanwhile),
/// nothing is written: [`EngineError::RunMovedOn`].
///
/// Why the run is pinned (issue 21 item 6; the simulation's seed 3746):
/// a claimer paused after its claim past its own lease loses the claim;
/// the dead member restarts, completes its crashed run itself, begins a
/// new one and serves it; the claimer wakes. Reading the run again here
/// it would complete the *live* run — and the member's next restart
/// would cut its journal after that completion's end, or its next
/// failover stop there, losing what it acknowledged since. Pinned, a
/// late write can only be the completion of the run that died, which
/// nobody reads once the state file names a newer run (and which the
/// member's own recovery, first writer wins, has written already or
/// takes). The check below and the write are not atomic; a completion of
/// `run` written after the member moved on is such an unread one.
///
/// `before_write` runs right before the completion is written (after the
/// journal and the backups are read); an error from it writes nothing
/// (a claimer checks there that its claim still stands).
pub fn complete_member_run(
    shared: Arc<dyn Store>,
    member: &str,
    run: Option<u64>,
    backups: impl IntoIterator<Item = Vec<u8>>,
    before_write: impl FnOnce() -> Result<(), EngineError>,
) -> Result<CompletionReport, EngineError> {
    let view = PrefixStore::read_only(Arc::clone(&shared), member_prefix(member));
    let Some(key) = read_key(&view)? else {
        return Err(EngineError::Member(format!(
            "member {member} never ran with log-less durability: it has no redo key to complete its journal with"
        )));
    };
    let Some(run) = run else {
        // Shut down cleanly: its journal is whole.
        return Ok(CompletionReport::default());
    };
    if unclean_run(&view)? != Some(run) {
        return Err(EngineError::RunMovedOn {
            member: member.to_string(),
            run,
        });
    }
    let existing = |c: Completion| CompletionReport {
        through: c.through,
        applied: c.entries.len(),
        above: c.entries.len(),
        written: false,
        ..Default::default()
    };
    if let Some(c) = read_completion(&view, run)? {
        return Ok(existing(c));
    }
    let key = RedoKey::new(&key, [0; 16]);
    // The journal from the position the member's last checkpoint recorded
    // (everything below is trimmed or in snapshots); the read-only view
    // leaves a torn tail in place.
    let from = match view
        .get_blob(MEMBER_STATE_NAME)
        .map_err(|source| EngineError::Io {
            file: view.describe(MEMBER_STATE_NAME),
            source,
        })? {
        Some(b) => {
            MemberState::decode(&b)
                .map_err(|what| EngineError::Corrupt {
                    file: view.describe(MEMBER_STATE_NAME),
                    what,
                })?
                .next_lsn
        }
        None => 1,
    }
    .max(1);
    let outcome = journal::replay(&view, from, |_, _| Ok(()))?;
    let through = outcome.next_lsn.saturating_sub(1);
    let mut received = 0;
    let mut forged = 0;
    let mut malformed = 0;
    let mut opened = Vec::new();
    let kept = kept_backups(&*shared, member, run)?;
    for b in backups.into_iter().chain(kept) {
        received += 1;
        match key.open(&b) {
            Ok(e) => opened.push(e),
            Err(logless::RedoError::Forged) => forged += 1,
            Err(_) => malformed += 1,
        }
    }
    let (completion, mut report) = plan_completion(through, opened);
    // The last moment to find the claim gone (a claimer paused past its
    // lease since it read the run): nothing is written then.
    before_write()?;
    if let Some((inc, mark)) = read_acked(&view)? {
        if inc == run {
            report.acked_mark = mark;
            if mark > report.newest {
                report.unreturned = Some((report.newest + 1, mark));
            }
        }
    }
    report.received = received;
    report.forged = forged;
    report.malformed = malformed;
    let name = format!("{}{}", member_prefix(member), completion_file(run));
    let won = shared
        .put_blob_new(&name, &completion.encode())
        .map_err(|source| EngineError::Io {
            file: shared.describe(&name),
            source,
        })?;
    if !won {
        // Another decider (the member's own restart, another coordinator)
        // got there first: its decision stands.
        let c = read_completion(&view, run)?.ok_or_else(|| {
            EngineError::Member(format!("member {member}'s journal completion vanished"))
        })?;
        return Ok(existing(c));
    }
    report.written = true;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logless::RedoKey;

    fn entry(key: &RedoKey, lsn: Lsn, prev: &[(Soid, Lsn)]) -> RedoEntry {
        key.open(&key.encode(lsn, prev, &logless::encode_mutations(&[])))
            .unwrap()
    }

    #[test]
    fn completion_round_trips_and_damage_is_an_error() {
        let entry = |lsn| CompletedEntry {
            lsn,
            tag: None,
            mutations: vec![],
        };
        let c = Completion {
            through: 7,
            entries: vec![entry(8), entry(10)],
        };
        let b = c.encode();
        assert_eq!(Completion::decode(&b).unwrap(), c);
        for cut in 0..b.len() {
            assert!(Completion::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = b.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(Completion::decode(&flipped).is_err());
        let disordered = Completion {
            through: 9,
            entries: vec![entry(8)],
        };
        assert!(Completion::decode(&disordered.encode()).is_err());
    }

    #[test]
    fn entries_above_the_prefix_chain_on_their_stamps_and_a_gap_discards_its_followers() {
        let key = RedoKey::new(&[3; KEY_LEN], [1; 16]);
        let a = Soid::from_u128(100);
        let b = Soid::from_u128(200);
        // 11 and 12 build on 10 (in the prefix) and on each other; 13 on
        // 12; 14 is missing; 15 builds on 14 (discarded), 16 on 11's b.
        let entries = vec![
            entry(&key, 9, &[(a, 0)]),
            entry(&key, 11, &[(a, 10)]),
            entry(&key, 12, &[(a, 11), (b, 0)]),
            entry(&key, 13, &[(b, 12)]),
            entry(&key, 15, &[(a, 14)]),
            entry(&key, 16, &[(b, 13)]),
            entry(&key, 12, &[(a, 11), (b, 0)]),
        ];
        let (c, r) = plan_completion(10, entries);
        assert_eq!(c.through, 10);
        let lsns: Vec<Lsn> = c.entries.iter().map(|e| e.lsn).collect();
        assert_eq!(lsns, vec![11, 12, 13, 16]);
        assert_eq!(r.discarded, vec![15]);
        assert_eq!(r.missing, vec![(14, 14)]);
        assert_eq!(r.above, 5);
    }
}
