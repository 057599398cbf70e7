//! The engine: tables, the operations on them, durability and recovery.
//!
//! # Structure
//! - A *table map* (SOID range start → slot) partitions the SOID space.
//!   Operations hold it shared; splits and merges hold it exclusively.
//! - A slot holds its table either loaded or only on disk (a manifest entry);
//!   tables load lazily on first touch and clean ones are evicted when the
//!   cache is over its memory budget (Magellan: tables are paged whole).
//! - Operations run as transactions ([`crate::txn`]) and return
//!   [`Committed`] values; the caller acknowledges after
//!   [`Engine::wait`] (or awaits [`Engine::durable`]), so operations in
//!   flight share journal syncs.
//! - *Checkpoints* write dirty tables back as snapshots, then the manifest,
//!   then trim the journal (Magellan §4.4). A background flusher runs them
//!   when a table has been dirty too long, the journal is too long, or the
//!   cache is over budget; [`Engine::sync`] and [`Engine::close`] run them
//!   on demand.
//!
//! # Invariants
//! - WAL rule: a snapshot holding records up to LSN L is written only after
//!   the journal is durable through L, so recovered state is always a
//!   prefix of the journal.
//! - The manifest's `replay_from` is ≤ the first dirty LSN of every table;
//!   the journal is trimmed only below it.
//! - Recovery replays a record into a table only if its LSN is above the
//!   table's snapshot LSN.

use crate::changes::Changes;
use crate::durability::{Logless, LoglessConfig};
pub use crate::error::EngineError;
use crate::inode::Inode;
use crate::journal::{self, Durable, Journal, JournalConfig, Lsn, SyncMode};
use crate::logless::{self, Decision, Redo};
use crate::manifest::{Manifest, TableEntry, MANIFEST_NAME};
use crate::namespace::{self, DirEntry, NodeKind, PlusPage, RenameFlags, XattrFlags};
use crate::perm::check_access;
use crate::record::{decode_tagged_record, Mutation};
use crate::requests::{
    AsReply, CarriedSink, Ledger, Recovered, RequestId, RequestTag, LEDGER_NAME,
};
use crate::soid::{GlobalHighWater, SoidLayout};
use crate::stop::{Cause, StopState};
use crate::store::{LocalDirStore, Store};
use crate::table::index::TableIndex;
use crate::table::{decode_snapshot, Table};
use crate::txn::{OpError, OpResult, Txn};

mod member;
pub use member::TableCounters;
use parking_lot::{Mutex, MutexGuard, RwLock};
use sextant_types::{Attr, Credentials, FileType, FsError, Nanos, SetAttr, Soid, SoidRange};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// A source of "now" for timestamps (tests pin it).
pub type Clock = Arc<dyn Fn() -> Nanos + Send + Sync>;

/// Engine settings. `Default` is what `sextant serve` uses.
#[derive(Clone)]
pub struct EngineConfig {
    pub journal: JournalConfig,
    /// SOID bit layout for a *new* store (an existing store keeps its own).
    pub layout: SoidLayout,
    /// Split a table with more directories than this (Magellan: 2,000).
    pub table_dir_limit: usize,
    /// Split a table with more inodes than this at a directory boundary,
    /// when one exists (Magellan: 20,000).
    pub table_inode_limit: usize,
    /// Resident bytes of loaded tables above which clean tables are evicted.
    pub cache_bytes: usize,
    /// Write a table back once it has been dirty this long.
    pub max_dirty_age: Duration,
    /// Checkpoint everything once this many journal bytes were written
    /// since the last full checkpoint.
    pub max_journal_bytes: u64,
    /// How often the background flusher wakes (`None`: no flusher thread;
    /// checkpoints happen only on `sync`/`close`).
    pub flush_interval: Option<Duration>,
    /// Owner and permissions of the root directory of a new store.
    pub root_uid: u32,
    pub root_gid: u32,
    pub root_perm: u32,
    /// Timestamp source; `None` is the system clock.
    pub clock: Option<Clock>,
    /// Log-less durability ([`crate::logless`]): no journal is written;
    /// each commit yields a redo entry ([`Committed::redo`]) for the
    /// clients to keep, and a restart after a crash must be given their
    /// backups ([`Engine::recover_logless`]). `None`: the journal.
    pub logless: Option<LoglessConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            journal: JournalConfig::default(),
            layout: SoidLayout::default(),
            table_dir_limit: 2_000,
            table_inode_limit: 20_000,
            cache_bytes: 4 << 30,
            max_dirty_age: Duration::from_secs(30),
            max_journal_bytes: 512 << 20,
            flush_interval: Some(Duration::from_secs(1)),
            root_uid: 0,
            root_gid: 0,
            root_perm: 0o755,
            clock: None,
            logless: None,
        }
    }
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("journal", &self.journal)
            .field("layout", &self.layout)
            .field("table_dir_limit", &self.table_dir_limit)
            .field("table_inode_limit", &self.table_inode_limit)
            .field("cache_bytes", &self.cache_bytes)
            .field("max_dirty_age", &self.max_dirty_age)
            .field("flush_interval", &self.flush_interval)
            .field("logless", &self.logless)
            .finish_non_exhaustive()
    }
}

/// The value of a mutation that has been applied; it is durable (may be
/// acknowledged) once [`Engine::wait`] on it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a mutation is durable only after waiting for it"]
pub struct Committed<T> {
    pub value: T,
    /// Journal record of the mutation (0: nothing was written).
    pub lsn: Lsn,
    /// With log-less durability: the operation's redo entry, which must
    /// reach the client with the reply (it is durable only there).
    pub redo: Option<Redo>,
    /// With change tracking on ([`Engine::track_changes`]): the keys the
    /// operation changed (`None` when off, or when nothing was written).
    pub changes: Option<Changes>,
}

impl<T> Committed<T> {
    /// Blocks until durable, then returns the value.
    pub fn wait(self, engine: &Engine) -> Result<T, FsError> {
        engine.wait(self.lsn)?;
        Ok(self.value)
    }
}

/// What log-less recovery found and did ([`Engine::recover_logless`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoglessRecovery {
    /// Backups received (with duplicates: several clients hold each).
    pub received: usize,
    /// Distinct, authentic entries among them.
    pub distinct: usize,
    /// Entries replayed.
    pub applied: usize,
    /// Entries whose every part was already written back.
    pub durable: usize,
    /// Entries thrown away by the stamp rule (a predecessor on some inode
    /// is missing), by LSN.
    pub discarded: Vec<Lsn>,
    /// Of those, the ones some of whose parts were already written back.
    pub partial: Vec<Lsn>,
    /// LSN ranges at or above the last manifest's `replay_from` that no
    /// client sent back: operations whose every holder is gone, or whose
    /// reply was never sent (not acknowledged).
    pub missing: Vec<(Lsn, Lsn)>,
    /// Entries not issued by this store's key, and undecodable ones.
    pub forged: usize,
    pub malformed: usize,
    /// The crashed run's persisted acknowledged mark (`logless.acked`; 0:
    /// none) and, when the entries handed back (and the snapshots) stop
    /// short of it, the LSNs it acknowledged that nobody returned — a loss
    /// at the tail, which `missing` cannot show.
    pub acked_mark: Lsn,
    pub unreturned: Option<(Lsn, Lsn)>,
}

impl LoglessRecovery {
    /// Could an acknowledged operation have been lost? (Entries missing in
    /// the middle of what was collected, or thrown away.)
    pub fn maybe_lost(&self) -> bool {
        !self.discarded.is_empty() || !self.missing.is_empty() || self.unreturned.is_some()
    }
}

/// File-system-wide numbers for statfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatFs {
    pub inodes: u64,
    pub tables: usize,
    pub loaded_tables: usize,
}

/// Counters for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct EngineStats {
    pub inodes: u64,
    pub tables: usize,
    pub loaded_tables: usize,
    pub resident_bytes: usize,
    pub journal_syncs: u64,
    /// Time the journal's syncs took, in total.
    pub journal_sync_time: std::time::Duration,
    pub journal_bytes: u64,
    pub durable_lsn: Lsn,
    pub checkpoints: u64,
    pub snapshots_written: u64,
    pub tables_loaded_total: u64,
    pub tables_evicted_total: u64,
    pub splits: u64,
    pub merges: u64,
    pub retries: u64,
    /// Directory paths remembered across searches, and their approximate
    /// heap bytes (`crate::dir_cache`).
    pub dir_cache_paths: usize,
    pub dir_cache_bytes: usize,
    /// `Some` once the engine stopped after a failed write: what every
    /// request fails with until a restart ([`crate::stop`]).
    pub stopped: Option<FsError>,
}

/// What a slot holds.
pub(crate) enum Slot {
    Loaded(Box<Table>),
    OnDisk(TableEntry),
    /// Absorbed by its lower neighbour; the slot is being removed from the
    /// map (only a holder of an old `Arc` to it can still see this).
    Merged,
    /// Member mode: a SOID range whose table another member owns (the map
    /// still partitions the SOID space; operations touching it are
    /// refused with `WrongServer` or `NeedsTable`).
    Foreign(SoidRange),
}

/// The table at a key, or the range of another member's table there
/// (member mode).
pub(crate) enum Held<T> {
    Table(T),
    Foreign(SoidRange),
}

/// A table's place in the table map.
pub(crate) struct TableSlot {
    pub(crate) state: Mutex<Slot>,
    last_used: AtomicU64,
    /// Operations that touched the table since the slot was made (the
    /// cluster's balancer weighs tables by their rate: `Engine::table_ops`).
    ops: AtomicU64,
    /// When the slot was made (its `ops` count from then): a rate is
    /// measured over time the table spent here (`Engine::table_counters`).
    made: std::time::Instant,
}

impl TableSlot {
    fn new(slot: Slot) -> Arc<TableSlot> {
        Arc::new(TableSlot {
            state: Mutex::new(slot),
            last_used: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            made: std::time::Instant::now(),
        })
    }

    pub(crate) fn touch(&self, epoch: u64) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.used(epoch);
    }

    /// [`TableSlot::touch`] without counting an operation: a search's
    /// visits and directory reads keep a table loaded but are not load
    /// the cluster's balancer should move tables for (they made it move
    /// tables hundreds of times under a search benchmark).
    pub(crate) fn used(&self, epoch: u64) {
        if self.last_used.load(Ordering::Relaxed) != epoch {
            self.last_used.store(epoch, Ordering::Relaxed);
        }
    }
}

type TableMap = BTreeMap<Soid, Arc<TableSlot>>;

pub(crate) struct Inner {
    pub(crate) config: EngineConfig,
    store: Arc<dyn Store>,
    tables: RwLock<TableMap>,
    pub(crate) journal: Journal,
    pub(crate) high_water: Mutex<GlobalHighWater>,
    next_table_id: AtomicU64,
    /// Next snapshot file sequence number (see [`snapshot_name`]).
    next_snapshot_seq: AtomicU64,
    inode_count: AtomicI64,
    checkpoint_lock: Mutex<()>,
    /// Coarse clock for dirty ages and LRU: incremented by the flusher.
    epoch: AtomicU64,
    journal_bytes_at_checkpoint: AtomicU64,
    /// Set when a write-back fails (the journal keeps its own, for failed
    /// journal writes): see [`crate::stop`].
    stop: StopState,
    stats: Counters,
    /// Log-less durability's state (`None`: journal).
    pub(crate) logless: Option<Logless>,
    /// Whether commits report their [`Changes`].
    pub(crate) track_changes: AtomicBool,
    /// Advanced by every transaction that moves, removes or changes the
    /// mode or owner of a directory, after its writes are applied, and
    /// when a table comes or goes ([`crate::dir_cache`]).
    pub(crate) dir_epoch: AtomicU64,
    /// Advanced with `dir_epoch` by the transactions and the recovery that
    /// change directories, but not when a table comes or goes (a
    /// directory's record does not depend on who holds it): other members
    /// read it ([`Engine::dir_epoch`]) to know whether the directories
    /// they read from here may have changed.
    pub(crate) dir_changes: AtomicU64,
    /// Advanced by [`Engine::forget_remembered_dirs`]: directories of
    /// other members may have changed. The remembered paths are tagged
    /// with `dir_epoch + dir_forgets` (both only grow, so any advance of
    /// either changes the tag); kept apart from `dir_epoch` so that a
    /// member forgetting does not tell the others its directories changed.
    pub(crate) dir_forgets: AtomicU64,
    /// Directory paths searches resolved, valid at one directory epoch. A
    /// leaf lock: nothing else is locked while it is held. Read-locked by
    /// lookups, so the threads of a search (and concurrent searches) do
    /// not queue behind each other.
    pub(crate) dir_cache: RwLock<crate::dir_cache::DirCache>,
    /// The last sum of every table's summary (root's whole-namespace
    /// totals), valid while `table::summary::changes()` equals its own.
    /// A leaf lock, held only to take or replace it.
    pub(crate) summed: Mutex<Option<Arc<crate::table::summary::Sum>>>,
    /// Committed client requests ([`crate::requests`]); written with every
    /// checkpoint, before the manifest.
    pub(crate) requests: Mutex<Ledger>,
    /// What recovery found about client requests, until the server takes
    /// it; also what added tables carried while no sink was set.
    recovered: Mutex<Option<Recovered>>,
    /// Where the replies carried by tables this member adds go (the
    /// server's exactly-once table), before the table serves.
    carried_sink: Mutex<Option<CarriedSink>>,
    /// Member mode (`None`: a single server owning every table).
    pub(crate) member: Option<member::MemberRun>,
}

#[derive(Default)]
struct Counters {
    checkpoints: AtomicU64,
    snapshots_written: AtomicU64,
    tables_loaded: AtomicU64,
    tables_evicted: AtomicU64,
    splits: AtomicU64,
    merges: AtomicU64,
    retries: AtomicU64,
}

/// The metadata engine. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    /// Shared by user handles only: when the last one goes, the flusher
    /// thread is stopped and joined (it holds only a weak reference).
    flusher: Arc<Flusher>,
    /// The client request this handle's mutations answer
    /// ([`Engine::for_request`]); `None` on the engine itself.
    request: Option<RequestId>,
}

/// The background flusher thread and its stop signal.
#[derive(Default)]
struct Flusher {
    stop: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Flusher {
    fn stop(&self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Every snapshot write gets a fresh name (`seq` never repeats), so a write
/// can never overwrite a snapshot that the manifest on disk still names,
/// whatever happened to the table's id and LSN since (merges keep ids).
fn snapshot_name(seq: u64) -> String {
    format!("tables/{seq:016x}.snap")
}

impl Inner {
    /// A log-less member's redo state ([`crate::member_logless`]).
    pub(crate) fn member_redo(&self) -> Option<&crate::member_logless::MemberRedo> {
        self.member.as_ref().and_then(|m| m.redo.as_ref())
    }
}

impl Inner {
    /// The tag of the directory paths remembered across searches: any
    /// advance of `dir_epoch` or `dir_forgets` changes it.
    pub(crate) fn dir_tag(&self) -> u64 {
        self.dir_epoch
            .load(Ordering::Acquire)
            .wrapping_add(self.dir_forgets.load(Ordering::Acquire))
    }

    /// [`snapshot_name`]; in member mode the full shared-store name under
    /// the member's prefix (`members/<name>/tables/…`), which other
    /// members read as is.
    fn snapshot_name(&self, seq: u64) -> String {
        match &self.member {
            None => snapshot_name(seq),
            Some(m) => format!("{}{}", m.prefix, snapshot_name(seq)),
        }
    }
}

/// The sequence number in a snapshot name, if it is one.
fn snapshot_seq(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("tables/")?.strip_suffix(".snap")?;
    u64::from_str_radix(hex, 16).ok()
}

/// The one file `initialize` writes before the first manifest.
const INITIAL_SNAPSHOT_SEQ: u64 = 1;

fn system_now() -> Nanos {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Nanos(d.as_nanos().min(i64::MAX as u128) as i64)
}

impl Inner {
    fn io(&self, name: &str) -> impl FnOnce(std::io::Error) -> EngineError {
        io_error(&*self.store, name)
    }

    pub(crate) fn now(&self) -> Nanos {
        match &self.config.clock {
            Some(c) => c(),
            None => system_now(),
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    pub(crate) fn note_inode_delta(&self, delta: i64) {
        if delta != 0 {
            self.inode_count.fetch_add(delta, Ordering::Relaxed);
        }
    }

    fn load_table(&self, entry: &TableEntry) -> Result<Table, EngineError> {
        // The index is rebuilt at write-back (Magellan), not here: loading
        // sits on the path of the first lookup after a restart.
        let mut table = load_table(&*self.store, entry)?;
        if let Some(m) = &self.member {
            m.place_loaded(&mut table);
        }
        self.stats.tables_loaded.fetch_add(1, Ordering::Relaxed);
        Ok(table)
    }

    /// Runs `f` on the table holding `key` (loading it if needed), holding
    /// the table map shared and that one table's lock. The one place that
    /// goes from a key to a locked, loaded table outside transactions.
    fn with_table<T>(&self, key: Soid, f: impl FnOnce(&mut Table) -> T) -> Result<T, FsError> {
        self.check_alive()?;
        let map = self.tables.read();
        let (_, slot) = map.range(..=key).next_back().ok_or(FsError::Io)?;
        slot.touch(self.epoch());
        let mut guard = slot.state.lock();
        if let Slot::Foreign(_) = &*guard {
            return Err(FsError::WrongServer { soid: key });
        }
        Ok(f(self.ensure_loaded(&mut guard)?))
    }

    /// [`Inner::with_table`], but a range another member owns is an empty
    /// table of that range (member mode's searches skip it).
    fn with_owned_or_empty<T>(
        &self,
        key: Soid,
        f: impl FnOnce(&mut Table) -> T,
    ) -> Result<T, FsError> {
        self.check_alive()?;
        let map = self.tables.read();
        let (_, slot) = map.range(..=key).next_back().ok_or(FsError::Io)?;
        let mut guard = slot.state.lock();
        if let Slot::Foreign(range) = &*guard {
            return Ok(f(&mut Table::new(0, *range)));
        }
        slot.used(self.epoch());
        Ok(f(self.ensure_loaded(&mut guard)?))
    }

    /// [`Inner::with_table`], telling a range another member owns apart
    /// (member mode) instead of refusing it.
    fn with_held<T>(&self, key: Soid, f: impl FnOnce(&mut Table) -> T) -> Result<Held<T>, FsError> {
        self.check_alive()?;
        let map = self.tables.read();
        let (_, slot) = map.range(..=key).next_back().ok_or(FsError::Io)?;
        let mut guard = slot.state.lock();
        if let Slot::Foreign(range) = &*guard {
            return Ok(Held::Foreign(*range));
        }
        slot.used(self.epoch());
        Ok(Held::Table(f(self.ensure_loaded(&mut guard)?)))
    }

    /// Loads the slot's table if it is only on disk.
    pub(crate) fn ensure_loaded<'g>(
        &self,
        guard: &'g mut MutexGuard<'_, Slot>,
    ) -> Result<&'g mut Table, FsError> {
        if let Slot::OnDisk(entry) = &**guard {
            match self.load_table(entry) {
                Ok(t) => **guard = Slot::Loaded(Box::new(t)),
                Err(e) => {
                    tracing::error!(error = %e, table = entry.id, "cannot load a table");
                    return Err(FsError::Io);
                }
            }
        }
        match &mut **guard {
            Slot::Loaded(t) => Ok(t),
            Slot::OnDisk(_) | Slot::Merged | Slot::Foreign(_) => Err(FsError::Io),
        }
    }

    /// The engine's own stop is set only while the journal has not failed
    /// (see [`Inner::stop_after`]), so whichever is set came first.
    fn check_alive(&self) -> Result<(), FsError> {
        match self.stop.error().or_else(|| self.journal.failure()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Stops the engine after the failed write-back `e` (see
    /// [`crate::stop`]) — unless the journal failed first (a write-back
    /// waiting for it then fails too): its cause is the one clients get.
    fn stop_after(&self, e: &EngineError, what: &str) {
        if self.journal.failure().is_some() {
            tracing::error!(error = %e, "{what} failed after the journal did");
            return;
        }
        let cause = Cause::of_chain(e);
        tracing::error!(
            error = %e,
            "{what} failed; the engine stops (nothing acknowledged is lost: restart the \
             server{} to recover it)",
            if cause == Cause::NoSpace { " after freeing space" } else { "" }
        );
        self.stop.stop(cause);
    }

    /// Runs `op` as a transaction, retrying with a larger lock set when
    /// it asks to (see [`crate::txn`]).
    fn run<T>(&self, op: impl Fn(&mut Txn) -> OpResult<T>) -> Result<Committed<T>, FsError> {
        self.run_tagged(None::<fn(&T) -> RequestTag>, op)
    }

    /// [`Inner::run`] for a mutation answering client request `request`:
    /// its record carries the request and the value as the reply.
    fn run_for<T: AsReply>(
        &self,
        request: Option<RequestId>,
        op: impl Fn(&mut Txn) -> OpResult<T>,
    ) -> Result<Committed<T>, FsError> {
        self.run_tagged(
            request.map(|id| {
                move |v: &T| RequestTag {
                    id,
                    reply: v.as_reply(),
                }
            }),
            op,
        )
    }

    fn run_tagged<T, F: Fn(&T) -> RequestTag>(
        &self,
        tag: Option<F>,
        op: impl Fn(&mut Txn) -> OpResult<T>,
    ) -> Result<Committed<T>, FsError> {
        self.check_alive()?;
        let mut prelock: Vec<Soid> = Vec::new();
        let now = self.now();
        loop {
            let map = self.tables.read();
            let mut txn = Txn::new(self, &map, now);
            let mut result = Ok(());
            for key in &prelock {
                if let Err(e) = txn.table_for(*key) {
                    result = Err(e);
                    break;
                }
            }
            let outcome = result.and_then(|()| op(&mut txn));
            match outcome {
                Ok(value) => {
                    let tag = tag.as_ref().map(|f| f(&value));
                    let (c, oversized) = match txn.commit(tag) {
                        Ok(r) => r,
                        Err(OpError::Fs(e)) => return Err(e),
                        Err(OpError::Retry(_)) => return Err(FsError::Io),
                    };
                    drop(map);
                    for start in oversized {
                        self.split(start);
                    }
                    return Ok(Committed {
                        value,
                        lsn: c.lsn,
                        redo: c.redo,
                        changes: c.changes,
                    });
                }
                Err(OpError::Fs(e)) => return Err(e),
                Err(OpError::Retry(key)) => {
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    prelock = txn.locked_keys();
                    drop(txn);
                    prelock.push(key);
                    prelock.sort();
                    prelock.dedup();
                }
            }
        }
    }

    /// Is this table past Magellan's limits (and worth trying to split)?
    pub(crate) fn oversized(&self, t: &Table) -> bool {
        t.dir_count() > self.config.table_dir_limit
            || (t.inode_count() > self.config.table_inode_limit
                && t.inode_count() >= t.next_split_check)
    }

    /// Splits the table starting at `start` at a directory boundary near
    /// its middle, if it is still oversized.
    fn split(&self, start: Soid) {
        let mut map = self.tables.write();
        let Some(slot) = map.get(&start).cloned() else {
            return;
        };
        let mut guard = slot.state.lock();
        let Ok(table) = self.ensure_loaded(&mut guard) else {
            return;
        };
        if !self.oversized(table) {
            return;
        }
        if self.member.as_ref().is_some_and(|m| m.merging(table.id)) {
            // Being merged through the catalogue: its shape must stay the
            // one the merge commits. The next operation that finds it
            // oversized splits it (or the merged table).
            return;
        }
        if self
            .member
            .as_ref()
            .is_some_and(|m| m.split_since_commit(table.id, table.range))
        {
            // Split (or made) since the catalogue last took it — its
            // split's checkpoint failed: it splits again only once a
            // checkpoint has committed its present shape. Otherwise a
            // chain of splits builds up between two commits, which no
            // single etcd transaction takes (`TablesChange::pieces` keeps
            // a table and the one split off it together, and cuts no
            // chain: committed in steps, one is not recoverable between
            // them).
            return;
        }
        let at = match table.split_point() {
            Some(at) if at > table.range.first => at,
            _ => {
                table.next_split_check = table.inode_count() * 2;
                return;
            }
        };
        let id = match &self.member {
            None => self.next_table_id.fetch_add(1, Ordering::Relaxed),
            Some(m) => match m.catalog.next_table_id() {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(error = %e, "no table id for a split; it waits");
                    return;
                }
            },
        };
        // Both halves start with every row "changed" (queries scan them);
        // the background write-back rebuilds their indexes off this path.
        let parent = table.id;
        let upper = table.split_off(at, id);
        drop(guard);
        map.insert(at, TableSlot::new(Slot::Loaded(Box::new(upper))));
        self.stats.splits.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.member {
            // The new table shares its parent's history in the journal.
            m.split(parent, id);
            drop(map);
            // Both halves' snapshots and manifests, committed through the
            // catalogue in one change: the split is then the cluster's.
            if let Err(e) = self.checkpoint(&|_| false) {
                tracing::warn!(error = %e, "a split's checkpoint failed; the next one retries");
            }
        }
    }

    /// Splits every loaded table past its limits until none is (or none
    /// can be cut at a directory boundary). Recovery calls it: splits are
    /// persisted only by checkpoints, so a crash before the first one
    /// brings every table back as the single table it started as.
    fn split_oversized(&self) {
        loop {
            let oversized: Vec<Soid> = {
                let map = self.tables.read();
                map.iter()
                    .filter(|(_, slot)| match &*slot.state.lock() {
                        Slot::Loaded(t) => self.oversized(t),
                        Slot::OnDisk(_) | Slot::Merged | Slot::Foreign(_) => false,
                    })
                    .map(|(start, _)| *start)
                    .collect()
            };
            let before = self.stats.splits.load(Ordering::Relaxed);
            for start in &oversized {
                self.split(*start);
            }
            if oversized.is_empty() || self.stats.splits.load(Ordering::Relaxed) == before {
                return;
            }
        }
    }

    /// Merges one pair of neighbouring tables that are both small, loaded
    /// or not (cold small tables are the usual case: they were emptied and
    /// then evicted). One merge per call keeps the exclusive map lock
    /// short; the flusher calls again on its next tick.
    fn merge_small_neighbours(&self) -> bool {
        if let Some(m) = &self.member {
            // Through the catalogue, and only after it said yes: see
            // `member`'s module doc.
            return m.merge_small(self);
        }
        let mut map = self.tables.write();
        let starts: Vec<Soid> = map.keys().copied().collect();
        for pair in starts.windows(2) {
            let (Some(sa), Some(sb)) = (map.get(&pair[0]).cloned(), map.get(&pair[1]).cloned())
            else {
                continue;
            };
            let mut ga = sa.state.lock();
            let mut gb = sb.state.lock();
            let (na, nb) = (slot_size(&ga), slot_size(&gb));
            if !self.mergeable(na, nb) {
                continue;
            }
            if self.ensure_loaded(&mut ga).is_err() || self.ensure_loaded(&mut gb).is_err() {
                continue;
            }
            let upper = std::mem::replace(&mut *gb, Slot::Merged);
            if let (Slot::Loaded(lower), Slot::Loaded(upper)) = (&mut *ga, upper) {
                lower.merge(*upper);
            }
            drop(gb);
            drop(ga);
            map.remove(&pair[1]);
            self.stats.merges.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Two neighbouring tables of these sizes ([`slot_size`]) are small
    /// enough to merge.
    fn mergeable(&self, a: (usize, usize), b: (usize, usize)) -> bool {
        let inode_small = self.config.table_inode_limit / 8;
        let dir_small = self.config.table_dir_limit / 8;
        let small = |(inodes, dirs): (usize, usize)| inodes < inode_small && dirs < dir_small;
        small(a) && small(b) && a.0 + b.0 < self.config.table_inode_limit / 4
    }

    /// Writes back tables chosen by `pick` (and every table that has no
    /// snapshot in its current shape), then the manifest, then trims the
    /// journal.
    ///
    /// The table map is only held briefly: snapshots are written while
    /// operations (and splits) go on, then the manifest is built from the
    /// map as it is at the end. A table split off meanwhile has no snapshot
    /// yet, so the pass repeats for it.
    fn checkpoint(&self, pick: &dyn Fn(&Table) -> bool) -> Result<(), EngineError> {
        let _one_at_a_time = self.checkpoint_lock.lock();
        self.checkpoint_locked(pick)
    }

    /// [`Inner::checkpoint`], the checkpoint lock already held.
    fn checkpoint_locked(&self, pick: &dyn Fn(&Table) -> bool) -> Result<(), EngineError> {
        if self
            .logless
            .as_ref()
            .is_some_and(|ll| ll.crashed().is_some())
        {
            // A crashed log-less run is not recovered yet: the manifest
            // must keep describing what its clients' backups build on (a
            // new one would move `replay_from` past entries they hold).
            return Ok(());
        }
        let journal_bytes = self.journal.stats().bytes_written;
        // Tables dirtied after this point have first_dirty_lsn >= fallback.
        let fallback = self.journal.next_lsn();
        let (entries, replay_from) = loop {
            let slots: Vec<Arc<TableSlot>> = self.tables.read().values().cloned().collect();
            for slot in &slots {
                let job = match &*slot.state.lock() {
                    Slot::Loaded(t) if t.snapshot_file.is_none() || (t.is_dirty() && pick(t)) => {
                        Some(SnapshotJob {
                            id: t.id,
                            range: t.range,
                            lsn: t.last_lsn,
                            bytes: t.encode_snapshot(),
                        })
                    }
                    _ => None,
                };
                if let Some(job) = job {
                    self.write_back(slot, job)?;
                }
            }
            if let Some(done) = self.manifest_entries(fallback) {
                break done;
            }
        };
        if let Some(m) = &self.member {
            // Member mode: the floors, not `replay_from`, bound the journal.
            let result = m.checkpoint_commit(self, entries, fallback);
            if result.is_ok() {
                self.journal_bytes_at_checkpoint
                    .store(journal_bytes, Ordering::Relaxed);
                self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            return result;
        }
        if self.logless.is_none() {
            // Before the manifest that lets the journal (and the tags in
            // it) be trimmed: see crate::requests.
            let ledger = {
                let mut l = self.requests.lock();
                l.dirty().then(|| l.encode())
            };
            if let Some(bytes) = ledger {
                self.store
                    .put_blob(LEDGER_NAME, &bytes)
                    .map_err(self.io(LEDGER_NAME))?;
            }
        }
        let manifest = Manifest {
            layout: self.config.layout,
            tables: entries,
            replay_from,
            high_water: self.high_water.lock().clone(),
            next_table_id: self.next_table_id.load(Ordering::Relaxed),
        };
        self.store
            .put_blob(MANIFEST_NAME, &manifest.encode())
            .map_err(self.io(MANIFEST_NAME))?;
        let live: BTreeSet<&str> = manifest.tables.iter().map(|t| t.file.as_str()).collect();
        for name in self.store.list("tables/").map_err(self.io("tables/"))? {
            if !live.contains(name.as_str()) {
                self.store.delete(&name).map_err(self.io(&name))?;
            }
        }
        self.journal.trim_below(replay_from)?;
        if let Some(ll) = &self.logless {
            ll.manifest_written(replay_from);
        }
        self.journal_bytes_at_checkpoint
            .store(journal_bytes, Ordering::Relaxed);
        self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes a snapshot taken under the table's lock — without holding
    /// the lock, so operations on the table go on during the WAL wait and
    /// the fsync — then records it in the table if the table still has the
    /// shape it was taken in (a split or merge meanwhile makes it useless:
    /// the next pass writes the new shape; the file is deleted as
    /// unreferenced).
    fn write_back(&self, slot: &TableSlot, job: SnapshotJob) -> Result<(), EngineError> {
        // WAL rule: the journal must hold everything the snapshot holds.
        self.journal
            .wait_synced(job.lsn)
            .map_err(|_| EngineError::Stopped)?;
        let file = self.snapshot_name(self.next_snapshot_seq.fetch_add(1, Ordering::Relaxed));
        self.store
            .put_blob(&file, &job.bytes)
            .map_err(self.io(&file))?;
        self.stats.snapshots_written.fetch_add(1, Ordering::Relaxed);
        let mut guard = slot.state.lock();
        let Slot::Loaded(table) = &mut *guard else {
            return Ok(());
        };
        if table.id != job.id || table.range != job.range {
            return Ok(());
        }
        table.snapshot_file = Some(file);
        table.snapshot_lsn = job.lsn;
        if let Some(m) = &self.member {
            m.snapshot_written(table.id, job.lsn);
        }
        if table.last_lsn == job.lsn {
            table.first_dirty_lsn = None;
            table.dirty_epoch = None;
        } else {
            // Changed while the snapshot was written: everything after it
            // is still only in the journal (conservatively from lsn + 1).
            table.first_dirty_lsn = Some(job.lsn + 1);
            table.dirty_epoch = Some(self.epoch());
        }
        if !table.index.is_built() || table.index.changed_count() > 0 {
            // Off the operations' path: pack the structures grown by
            // inserts (they drop the index), then index the table.
            table.compact_if_fragmented();
            table.index = TableIndex::rebuild(table);
        }
        Ok(())
    }

    /// The manifest entries for the current table map and the LSN replay
    /// must start from, or `None` if some table has no snapshot yet.
    fn manifest_entries(&self, fallback: Lsn) -> Option<(Vec<TableEntry>, Lsn)> {
        let map = self.tables.read();
        let mut replay_from = fallback;
        let mut entries = Vec::with_capacity(map.len());
        for slot in map.values() {
            match &*slot.state.lock() {
                Slot::OnDisk(e) => entries.push(e.clone()),
                Slot::Loaded(t) => {
                    if let Some(f) = t.first_dirty_lsn {
                        replay_from = replay_from.min(f);
                    }
                    entries.push(t.manifest_entry()?);
                }
                Slot::Merged | Slot::Foreign(_) => {}
            }
        }
        Some((entries, replay_from))
    }

    /// Evicts least recently used clean tables while over the budget.
    /// Returns whether the loaded tables are still over the budget (only
    /// dirty ones remain to evict: they must be written back first).
    fn evict_to_budget(&self) -> bool {
        let map = self.tables.read();
        let mut resident = 0usize;
        let mut clean: Vec<(u64, Soid, usize)> = Vec::new();
        for (start, slot) in map.iter() {
            let guard = slot.state.lock();
            if let Slot::Loaded(t) = &*guard {
                let bytes = t.approx_bytes();
                resident += bytes;
                if !t.is_dirty() && t.snapshot_file.is_some() {
                    clean.push((slot.last_used.load(Ordering::Relaxed), *start, bytes));
                }
            }
        }
        if resident <= self.config.cache_bytes {
            return false;
        }
        clean.sort();
        for (_, start, bytes) in clean {
            if resident <= self.config.cache_bytes {
                break;
            }
            let Some(slot) = map.get(&start) else {
                continue;
            };
            let mut guard = slot.state.lock();
            let entry = match &*guard {
                Slot::Loaded(t) if !t.is_dirty() => t.manifest_entry(),
                _ => None,
            };
            let Some(entry) = entry else { continue };
            *guard = Slot::OnDisk(entry);
            resident = resident.saturating_sub(bytes);
            self.stats.tables_evicted.fetch_add(1, Ordering::Relaxed);
        }
        resident > self.config.cache_bytes
    }

    fn resident_bytes(&self) -> usize {
        let map = self.tables.read();
        map.values()
            .map(|s| match &*s.state.lock() {
                Slot::Loaded(t) => t.approx_bytes(),
                Slot::OnDisk(_) | Slot::Merged | Slot::Foreign(_) => 0,
            })
            .sum()
    }

    /// One tick of the background flusher.
    fn flush_tick(&self) -> Result<(), EngineError> {
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let interval = self.config.flush_interval.unwrap_or(Duration::from_secs(1));
        let max_age_ticks =
            (self.config.max_dirty_age.as_millis() / interval.as_millis().max(1)).max(1) as u64;
        let journal_long = self.journal.stats().bytes_written
            - self.journal_bytes_at_checkpoint.load(Ordering::Relaxed)
            > self.config.max_journal_bytes
            || self.logless.as_ref().is_some_and(Logless::backlog_long);
        // Evict clean tables first; only if that is not enough, write
        // everything back so the rest become evictable.
        let over_budget = self.evict_to_budget();
        if journal_long || over_budget {
            if let Some(ll) = &self.logless {
                ll.checkpoint_started();
            }
            self.checkpoint(&|_| true)?;
        } else {
            self.checkpoint(&|t| {
                t.dirty_epoch
                    .is_some_and(|e| epoch.saturating_sub(e) >= max_age_ticks)
            })?;
        }
        self.merge_small_neighbours();
        if over_budget {
            self.evict_to_budget();
        }
        Ok(())
    }
}

fn io_error(store: &dyn Store, name: &str) -> impl FnOnce(std::io::Error) -> EngineError {
    let file = store.describe(name);
    move |source| EngineError::Io { file, source }
}

/// Recovery step 1: the manifest — or a new store's first one. With no
/// manifest and no journal nothing was ever acknowledged (`initialize`
/// writes the first snapshot, then the manifest, and the journal starts
/// only after that), so a lone first snapshot is an interrupted
/// initialization: start over. Anything else without a manifest is damage.
fn read_manifest(store: &dyn Store, config: &EngineConfig) -> Result<Manifest, EngineError> {
    if let Some(bytes) = store
        .get_blob(MANIFEST_NAME)
        .map_err(io_error(store, MANIFEST_NAME))?
    {
        return Manifest::decode(&bytes).map_err(|what| EngineError::Corrupt {
            file: store.describe(MANIFEST_NAME),
            what,
        });
    }
    let journal = store
        .list("journal/")
        .map_err(io_error(store, "journal/"))?;
    let tables = store.list("tables/").map_err(io_error(store, "tables/"))?;
    let interrupted_init = journal.is_empty()
        && tables.len() == 1
        && snapshot_seq(&tables[0]) == Some(INITIAL_SNAPSHOT_SEQ);
    if interrupted_init {
        store
            .delete(&tables[0])
            .map_err(io_error(store, &tables[0]))?;
    } else if !journal.is_empty() || !tables.is_empty() {
        return Err(EngineError::Corrupt {
            file: store.describe(MANIFEST_NAME),
            what: "the manifest is missing but tables or journal files exist".into(),
        });
    }
    Engine::initialize(store, config)
}

/// The request ledger the last checkpoint wrote ([`crate::requests`]);
/// empty if there is none (a new store, or one an older server wrote).
fn read_ledger(store: &dyn Store) -> Result<Ledger, EngineError> {
    match store
        .get_blob(LEDGER_NAME)
        .map_err(io_error(store, LEDGER_NAME))?
    {
        Some(b) => Ledger::decode(&b).map_err(|what| EngineError::Corrupt {
            file: store.describe(LEDGER_NAME),
            what,
        }),
        None => Ok(Ledger::default()),
    }
}

/// Recovery step 2: every snapshot the manifest names exists (tables load
/// lazily, so a missing one would otherwise surface much later). Returns
/// the next snapshot sequence number.
fn check_snapshots(store: &dyn Store, manifest: &Manifest) -> Result<u64, EngineError> {
    let on_disk: BTreeSet<String> = store
        .list("tables/")
        .map_err(io_error(store, "tables/"))?
        .into_iter()
        .collect();
    if let Some(t) = manifest.tables.iter().find(|t| !on_disk.contains(&t.file)) {
        return Err(EngineError::Corrupt {
            file: store.describe(&t.file),
            what: format!("snapshot of table {} is missing", t.id),
        });
    }
    Ok(on_disk
        .iter()
        .filter_map(|n| snapshot_seq(n))
        .max()
        .unwrap_or(0)
        + 1)
}

/// Recovery step 3: replays the journal from the manifest's `replay_from`
/// into the tables it touches (loading only those), applying a record to a
/// table only above the table's snapshot LSN.
///
/// The request tags of the records replayed go to `tags`.
fn replay_journal(
    store: &dyn Store,
    manifest: &Manifest,
    map: &TableMap,
    high_water: &mut GlobalHighWater,
    tags: &mut Vec<RequestTag>,
) -> Result<journal::ReplayOutcome, EngineError> {
    replay_journal_from(store, manifest.replay_from, None, map, high_water, tags)
}

/// [`replay_journal`] from `from`. With `floors` (member mode) a record
/// applies to a table iff its LSN is at least the table's floor (tables
/// without one get nothing), and a table loaded for it starts at
/// `last_lsn = floor - 1`; without, iff it is above the table's snapshot
/// LSN.
fn replay_journal_from(
    store: &dyn Store,
    from: Lsn,
    floors: Option<&BTreeMap<crate::table::TableId, Lsn>>,
    map: &TableMap,
    high_water: &mut GlobalHighWater,
    tags: &mut Vec<RequestTag>,
) -> Result<journal::ReplayOutcome, EngineError> {
    let load_err: Mutex<Option<EngineError>> = Mutex::new(None);
    let place = |t: &mut Table| {
        if let Some(f) = floors.and_then(|f| f.get(&t.id)) {
            t.last_lsn = f.saturating_sub(1);
        }
    };
    let outcome = journal::replay(store, from, |lsn, rec| {
        let (tag, mutations) = decode_tagged_record(rec)?;
        tags.extend(tag);
        for m in mutations {
            let Some(key) = m.table_key() else {
                if let Mutation::HighWater(hw) = &m {
                    high_water.merge_max(hw);
                }
                continue;
            };
            let mut guard = match lock_loaded(store, map, key, &place) {
                Ok(g) => g,
                Err(e) => {
                    let what = e.to_string();
                    *load_err.lock() = Some(e);
                    return Err(what);
                }
            };
            if let Slot::Loaded(t) = &mut *guard {
                let applies = match floors {
                    None => lsn > t.snapshot_lsn,
                    Some(f) => f.get(&t.id).is_some_and(|floor| lsn >= *floor),
                };
                if applies {
                    t.apply(m).map_err(|e| e.to_string())?;
                    t.mark_applied(lsn, 0);
                }
            }
        }
        Ok(())
    });
    if let Some(e) = load_err.into_inner() {
        return Err(e);
    }
    let outcome = outcome?;
    if let Some((file, at, len)) = &outcome.torn_tail {
        tracing::warn!(
            file = %file,
            offset = at,
            bytes = len,
            "discarded a torn journal tail (never acknowledged)"
        );
    }
    Ok(outcome)
}

/// Locks the table holding `key`, loading it from its snapshot if it is
/// only on disk. Recovery's way to a table (journal replay and log-less
/// recovery), before or outside the engine's own cache policy.
fn lock_loaded<'m>(
    store: &dyn Store,
    map: &'m TableMap,
    key: Soid,
    place: &dyn Fn(&mut Table),
) -> Result<MutexGuard<'m, Slot>, EngineError> {
    let (_, slot) = map
        .range(..=key)
        .next_back()
        .ok_or_else(|| EngineError::Corrupt {
            file: store.describe(MANIFEST_NAME),
            what: "the table map does not cover a key".into(),
        })?;
    let mut guard = slot.state.lock();
    if let Slot::OnDisk(entry) = &*guard {
        let mut table = load_table(store, entry)?;
        place(&mut table);
        *guard = Slot::Loaded(Box::new(table));
    }
    Ok(guard)
}

/// Inodes in all tables (loaded ones counted, the rest from the manifest).
fn count_inodes(map: &TableMap) -> i64 {
    map.values()
        .map(|slot| match &*slot.state.lock() {
            Slot::Loaded(t) => t.inode_count() as i64,
            Slot::OnDisk(e) => e.inodes as i64,
            Slot::Merged | Slot::Foreign(_) => 0,
        })
        .sum()
}

/// Reads and checks the snapshot a manifest entry names.
fn load_table(store: &dyn Store, entry: &TableEntry) -> Result<Table, EngineError> {
    let corrupt = |what: String| EngineError::Corrupt {
        file: store.describe(&entry.file),
        what,
    };
    let bytes = store
        .get_blob(&entry.file)
        .map_err(|source| EngineError::Io {
            file: store.describe(&entry.file),
            source,
        })?
        .ok_or_else(|| corrupt("table snapshot is missing".into()))?;
    let snap = decode_snapshot(&bytes).map_err(corrupt)?;
    if snap.id != entry.id || snap.range != entry.range || snap.lsn != entry.lsn {
        return Err(corrupt(format!(
            "snapshot is table {} {:?} at lsn {}, the manifest expects table {} {:?} at lsn {}",
            snap.id, snap.range, snap.lsn, entry.id, entry.range, entry.lsn
        )));
    }
    let mut table = Table::from_snapshot(snap).map_err(|e| corrupt(e.to_string()))?;
    table.snapshot_file = Some(entry.file.clone());
    Ok(table)
}

/// A table's (inodes, directories), as far as merging cares; an on-disk
/// table's directory count is not known without loading it, but it is at
/// most its inode count.
fn slot_size(slot: &Slot) -> (usize, usize) {
    match slot {
        Slot::Loaded(t) => (t.inode_count(), t.dir_count()),
        Slot::OnDisk(e) => (e.inodes as usize, e.inodes as usize),
        Slot::Merged | Slot::Foreign(_) => (usize::MAX, usize::MAX),
    }
}

/// A snapshot encoded under a table's lock, to be written without it.
struct SnapshotJob {
    id: u64,
    range: SoidRange,
    lsn: Lsn,
    bytes: Vec<u8>,
}

impl Engine {
    /// Does directory `path` hold a store ([`Engine::open_dir`] would open
    /// one, not make one)? A store is made once its first manifest exists.
    pub fn dir_holds_store(path: impl AsRef<Path>) -> bool {
        path.as_ref().join(MANIFEST_NAME).exists()
    }

    /// Opens the engine on a local directory (created if missing).
    pub fn open_dir(path: impl AsRef<Path>, config: EngineConfig) -> Result<Engine, EngineError> {
        let path = path.as_ref();
        let store = LocalDirStore::open(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::WouldBlock {
                EngineError::InUse {
                    dir: path.display().to_string(),
                }
            } else {
                EngineError::Io {
                    file: path.display().to_string(),
                    source,
                }
            }
        })?;
        Engine::open(Arc::new(store), config)
    }

    /// Opens the engine on `store`: a new store gets a root directory; an
    /// existing one is recovered (manifest, then journal replay).
    pub fn open(store: Arc<dyn Store>, mut config: EngineConfig) -> Result<Engine, EngineError> {
        config.layout.validate()?;
        if config.logless.is_some() {
            // Log-less: nothing is journaled; the clients keep the redo.
            config.journal.mode = SyncMode::Off;
        } else if crate::durability::read_run_state(&*store)?.is_some_and(|s| !s.clean) {
            return Err(EngineError::LoglessNotRecovered);
        }
        let manifest = read_manifest(&*store, &config)?;
        config.layout = manifest.layout;
        let next_snapshot_seq = check_snapshots(&*store, &manifest)?;
        let map: TableMap = manifest
            .tables
            .iter()
            .map(|e| (e.range.first, TableSlot::new(Slot::OnDisk(e.clone()))))
            .collect();
        let mut high_water = manifest.high_water.clone();
        let mut tags = Vec::new();
        let outcome = replay_journal(&*store, &manifest, &map, &mut high_water, &mut tags)?;
        let mut ledger = read_ledger(&*store)?;
        for t in &tags {
            ledger.note(&t.id);
        }
        let recovered = Recovered::from_ledger(&ledger, tags);
        // LSNs never go back below a snapshot's: with the journal off they
        // advance without segments, and a record numbered below a table's
        // snapshot LSN would be skipped by the next replay.
        let lsn_floor = manifest.tables.iter().map(|t| t.lsn + 1).max().unwrap_or(1);
        let journal = Journal::start(
            Arc::clone(&store),
            config.journal.clone(),
            outcome.next_lsn.max(lsn_floor).max(manifest.replay_from),
            outcome.segments.clone(),
        )?;
        let logless = match &config.logless {
            Some(c) => {
                // Everything below replay_from is in the snapshots, and the
                // journal just replayed (if the last run journaled) holds
                // everything up to its end.
                let base = (manifest.replay_from.max(outcome.next_lsn)).saturating_sub(1);
                let floors = manifest
                    .tables
                    .iter()
                    .map(|t| (t.range.first, t.lsn.max(base)))
                    .collect();
                Some(Logless::open(
                    &*store,
                    c.clone(),
                    floors,
                    manifest.replay_from,
                    manifest.replay_from.saturating_sub(1),
                )?)
            }
            None => None,
        };
        let flush_interval = config.flush_interval;
        let inner = Arc::new(Inner {
            config,
            store,
            inode_count: AtomicI64::new(count_inodes(&map)),
            tables: RwLock::new(map),
            journal,
            high_water: Mutex::new(high_water),
            next_table_id: AtomicU64::new(manifest.next_table_id),
            next_snapshot_seq: AtomicU64::new(next_snapshot_seq),
            checkpoint_lock: Mutex::new(()),
            epoch: AtomicU64::new(1),
            journal_bytes_at_checkpoint: AtomicU64::new(0),
            stop: StopState::default(),
            stats: Counters::default(),
            logless,
            track_changes: AtomicBool::new(false),
            dir_epoch: AtomicU64::new(1),
            dir_changes: AtomicU64::new(1),
            dir_forgets: AtomicU64::new(0),
            dir_cache: RwLock::new(Default::default()),
            summed: Mutex::new(None),
            requests: Mutex::new(ledger),
            recovered: Mutex::new(Some(recovered)),
            carried_sink: Mutex::new(None),
            member: None,
        });
        inner.split_oversized();
        let engine = Engine {
            inner: Arc::clone(&inner),
            flusher: Arc::new(Flusher::default()),
            request: None,
        };
        if let Some(interval) = flush_interval {
            engine.start_flusher(interval)?;
        }
        Ok(engine)
    }

    fn start_flusher(&self, interval: Duration) -> Result<(), EngineError> {
        let weak = Arc::downgrade(&self.inner);
        let stop = Arc::clone(&self.flusher.stop);
        let handle = std::thread::Builder::new()
            .name("sextant-flusher".into())
            .spawn(move || flusher_loop(weak, stop, interval))
            .map_err(|source| EngineError::Io {
                file: "flusher thread".into(),
                source,
            })?;
        *self.flusher.thread.lock() = Some(handle);
        Ok(())
    }

    fn initialize(store: &dyn Store, config: &EngineConfig) -> Result<Manifest, EngineError> {
        let table = root_table(config);
        let file = snapshot_name(INITIAL_SNAPSHOT_SEQ);
        let io = |name: &str| io_error(store, name);
        store
            .put_blob(&file, &table.encode_snapshot())
            .map_err(io(&file))?;
        let manifest = Manifest {
            layout: config.layout,
            tables: vec![TableEntry {
                id: 1,
                range: SoidRange::ALL,
                file,
                lsn: 0,
                inodes: 1,
            }],
            replay_from: 1,
            high_water: GlobalHighWater::default(),
            next_table_id: 2,
        };
        store
            .put_blob(MANIFEST_NAME, &manifest.encode())
            .map_err(io(MANIFEST_NAME))?;
        Ok(manifest)
    }
}

/// A new namespace's one table (id 1, every SOID): the root directory.
fn root_table(config: &EngineConfig) -> Table {
    {
        let now = config.clock.as_ref().map_or_else(system_now, |c| c());
        let mut table = Table::new(1, SoidRange::ALL);
        table.put_inode(
            Soid::ROOT,
            Inode {
                ftype: FileType::Directory,
                perm: (config.root_perm & 0o7777) as u16,
                uid: config.root_uid,
                gid: config.root_gid,
                nlink: 2,
                size: 0,
                atime: now,
                mtime: now,
                ctime: now,
                parent: Soid::ROOT,
                name: crate::inode::Name::new(b""),
                extra: None,
            },
        );
        table
    }
}

impl Engine {
    // ---- reads ----------------------------------------------------------

    /// Runs a read-only operation.
    fn read<T>(&self, op: impl Fn(&mut Txn) -> OpResult<T>) -> Result<T, FsError> {
        self.inner.run(op).map(|c| c.value)
    }

    pub fn lookup(&self, cred: &Credentials, parent: Soid, name: &[u8]) -> Result<Attr, FsError> {
        self.read(|t| namespace::lookup(t, cred, parent, name))
    }

    /// The SOID and type `name` in `parent` names, reading only the
    /// parent's table. Member mode: where [`Engine::lookup`] is
    /// `NeedsTable` because the child is in another member's table, this
    /// answers here, and the child's owner answers `getattr`.
    pub fn lookup_entry(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
    ) -> Result<(Soid, FileType), FsError> {
        self.read(|t| namespace::lookup_entry(t, cred, parent, name))
    }

    pub fn getattr(&self, soid: Soid) -> Result<Attr, FsError> {
        self.inner
            .with_table(soid, |t| t.inode(soid).map(|i| i.attr(soid)))?
            .ok_or(FsError::NotFound)
    }

    /// Resolves an absolute path (symlinks followed in all components but
    /// the last, and in the last too when `follow_last`).
    pub fn resolve(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
    ) -> Result<Attr, FsError> {
        self.read(|t| namespace::resolve_path(t, cred, path, follow_last, None))
    }

    /// [`Engine::resolve`] confined to a subtree: every lookup on the way
    /// must be one the confinement allows and the result must be in the
    /// subtree or an ancestor of its root, else `EACCES` (see
    /// [`crate::confine`]). With `true` when the result is in the subtree.
    pub fn resolve_confined(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
        confine: &crate::confine::Confine,
    ) -> Result<(Attr, bool), FsError> {
        self.read(|t| {
            let a = namespace::resolve_path(t, cred, path, follow_last, Some(confine))?;
            let inside = crate::confine::within(t, a.soid, confine)?;
            Ok((a, inside))
        })
    }

    /// The confinement to the directory at `path` (resolved as root,
    /// symlinks not followed); `None` if no directory is there.
    pub fn confine(&self, path: &[u8]) -> Result<Option<crate::confine::Confine>, FsError> {
        self.read(|t| crate::confine::confine_of(t, path))
    }

    /// Whether `soid` is a directory, and the directories holding its
    /// links (a directory: its parent; any other inode: every link's),
    /// read from its own table alone (`WRONG_SERVER` when another server
    /// holds it; `None`: no such inode). For the confinement walk across
    /// servers (`sextant_server::confine`).
    pub fn links_of(&self, soid: Soid) -> Result<Option<(bool, Vec<Soid>)>, FsError> {
        self.inner.with_table(soid, |t| {
            t.inode(soid).map(|i| {
                let dirs = if i.is_dir() {
                    vec![i.parent]
                } else {
                    i.all_links().map(|(d, _)| d).collect()
                };
                (i.is_dir(), dirs)
            })
        })
    }

    /// Is `soid` in the subtree of `confine` (its root, a directory below
    /// it, or an inode with a link in one)? See [`crate::confine`].
    pub fn within(&self, soid: Soid, confine: &crate::confine::Confine) -> Result<bool, FsError> {
        self.read(|t| crate::confine::within(t, soid, confine))
    }

    pub fn readlink(&self, soid: Soid) -> Result<Box<[u8]>, FsError> {
        self.read(|t| namespace::readlink(t, soid))
    }

    /// Up to `limit` entries of `dir` after cookie `after` (0: from the
    /// start), in cookie order. `.` and `..` are not included.
    pub fn readdir(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DirEntry>, FsError> {
        Ok(self.readdir_page(cred, dir, after, limit)?.0)
    }

    /// [`Engine::readdir`], and whether the directory ends with these
    /// entries (none after the last one), read together.
    pub fn readdir_page(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<DirEntry>, bool), FsError> {
        self.read(|t| namespace::readdir(t, cred, dir, after, limit))
    }

    /// [`Engine::readdir`] with each entry's attributes where a lookup
    /// would give them from this table (see [`namespace::readdir_plus`]).
    pub fn readdir_plus(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(DirEntry, Option<Attr>)>, FsError> {
        Ok(self.readdir_plus_page(cred, dir, after, limit)?.0)
    }

    /// [`Engine::readdir_plus`], and whether the directory ends with these
    /// entries (see [`Engine::readdir_page`]).
    pub fn readdir_plus_page(
        &self,
        cred: &Credentials,
        dir: Soid,
        after: u64,
        limit: usize,
    ) -> Result<PlusPage, FsError> {
        self.read(|t| namespace::readdir_plus(t, cred, dir, after, limit))
    }

    pub fn getxattr(
        &self,
        cred: &Credentials,
        soid: Soid,
        name: &[u8],
    ) -> Result<Box<[u8]>, FsError> {
        self.read(|t| namespace::getxattr(t, cred, soid, name))
    }

    pub fn listxattr(&self, cred: &Credentials, soid: Soid) -> Result<Vec<Box<[u8]>>, FsError> {
        self.read(|t| namespace::listxattr(t, cred, soid))
    }

    /// `access(2)`: may the caller `mask` (`perm::MAY_*`) this inode?
    pub fn access(&self, cred: &Credentials, soid: Soid, mask: u32) -> Result<(), FsError> {
        self.read(|t| {
            let inode = t.inode_or(soid, FsError::NotFound)?;
            check_access(&inode, cred, mask).map_err(OpError::Fs)
        })
    }

    pub fn statfs(&self) -> StatFs {
        let map = self.inner.tables.read();
        let loaded = map
            .values()
            .filter(|s| matches!(&*s.state.lock(), Slot::Loaded(_)))
            .count();
        let foreign = map
            .values()
            .filter(|s| matches!(&*s.state.lock(), Slot::Foreign(_)))
            .count();
        StatFs {
            inodes: self.inner.inode_count.load(Ordering::Relaxed).max(0) as u64,
            tables: map.len() - foreign,
            loaded_tables: loaded,
        }
    }

    // ---- mutations --------------------------------------------------------

    /// Creates a regular file. With `exclusive` an existing name is
    /// `EEXIST`; without, an existing non-directory is returned as is.
    pub fn create(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        perm: u32,
        exclusive: bool,
    ) -> Result<Committed<Attr>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::make_node(t, cred, parent, name, perm, NodeKind::File { exclusive })
        })
    }

    /// Creates a device, FIFO, socket or regular file node.
    pub fn mknod(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        ftype: FileType,
        perm: u32,
        rdev: u32,
    ) -> Result<Committed<Attr>, FsError> {
        let kind = |ftype| match ftype {
            FileType::Regular => NodeKind::File { exclusive: true },
            other => NodeKind::Special { ftype: other, rdev },
        };
        self.inner.run_for(self.request, |t| {
            namespace::make_node(t, cred, parent, name, perm, kind(ftype))
        })
    }

    pub fn mkdir(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        perm: u32,
    ) -> Result<Committed<Attr>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::make_node(t, cred, parent, name, perm, NodeKind::Dir)
        })
    }

    pub fn symlink(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
        target: &[u8],
    ) -> Result<Committed<Attr>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::make_node(t, cred, parent, name, 0o777, NodeKind::Symlink { target })
        })
    }

    /// Removes a link; the value is the inode's attributes as they were.
    pub fn unlink(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
    ) -> Result<Committed<Attr>, FsError> {
        self.inner
            .run_for(self.request, |t| namespace::unlink(t, cred, parent, name))
    }

    /// Removes an empty directory; the value is its attributes as they were.
    pub fn rmdir(
        &self,
        cred: &Credentials,
        parent: Soid,
        name: &[u8],
    ) -> Result<Committed<Attr>, FsError> {
        self.inner
            .run_for(self.request, |t| namespace::rmdir(t, cred, parent, name))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &self,
        cred: &Credentials,
        old_parent: Soid,
        old_name: &[u8],
        new_parent: Soid,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<Committed<Option<Attr>>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::rename(t, cred, old_parent, old_name, new_parent, new_name, flags)
        })
    }

    pub fn link(
        &self,
        cred: &Credentials,
        soid: Soid,
        new_parent: Soid,
        new_name: &[u8],
    ) -> Result<Committed<Attr>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::link(t, cred, soid, new_parent, new_name)
        })
    }

    pub fn setattr(
        &self,
        cred: &Credentials,
        soid: Soid,
        set: &SetAttr,
    ) -> Result<Committed<Attr>, FsError> {
        self.setattr_with(cred, soid, set, false)
    }

    /// [`Engine::setattr`]; with `write_handle` the caller changes the size
    /// through a file it holds open for writing (`ftruncate`), which needs
    /// no write permission now: it was granted at the open.
    pub fn setattr_with(
        &self,
        cred: &Credentials,
        soid: Soid,
        set: &SetAttr,
        write_handle: bool,
    ) -> Result<Committed<Attr>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::setattr(t, cred, soid, set, write_handle)
        })
    }

    pub fn setxattr(
        &self,
        cred: &Credentials,
        soid: Soid,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> Result<Committed<()>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::setxattr(t, cred, soid, name, value, flags)
        })
    }

    pub fn removexattr(
        &self,
        cred: &Credentials,
        soid: Soid,
        name: &[u8],
    ) -> Result<Committed<()>, FsError> {
        self.inner.run_for(self.request, |t| {
            namespace::removexattr(t, cred, soid, name)
        })
    }

    // ---- client requests (exactly-once across a restart) -----------------

    /// This engine, whose mutations answer client request `id`: with the
    /// journal, their records carry it and their reply, so a restarted
    /// server can answer a retry ([`crate::requests`]). Cheap (two
    /// reference counts). Log-less ignores it.
    pub fn for_request(&self, id: RequestId) -> Engine {
        Engine {
            request: Some(id),
            ..self.clone()
        }
    }

    /// What recovery found about client requests (once; `None` after).
    pub fn take_recovered_requests(&self) -> Option<Recovered> {
        self.inner.recovered.lock().take()
    }

    /// Member mode: from now on, the replies carried by every table this
    /// member adds go to `sink` before the table serves (see
    /// `table::carried`). What arrived before, and what recovery found
    /// and was not taken yet, goes to it at once.
    pub fn set_carried_sink(&self, sink: CarriedSink) {
        let mut slot = self.inner.carried_sink.lock();
        if let Some(pending) = self.inner.recovered.lock().take() {
            sink(pending);
        }
        *slot = Some(sink);
    }

    /// Hands replies carried by an added table to the sink, or keeps them
    /// for it.
    pub(crate) fn deliver_carried(inner: &Inner, found: Recovered) {
        if found.replies.is_empty() && found.floors.is_empty() && found.gone.is_empty() {
            return;
        }
        let slot = inner.carried_sink.lock();
        match &*slot {
            Some(sink) => sink(found),
            None => {
                let mut pending = inner.recovered.lock();
                match &mut *pending {
                    Some(p) => p.absorb(found),
                    None => *pending = Some(found),
                }
            }
        }
    }

    // ---- durability -----------------------------------------------------

    /// Blocks until journal record `lsn` is durable.
    pub fn wait(&self, lsn: Lsn) -> Result<(), FsError> {
        if lsn == 0 {
            return Ok(());
        }
        self.inner.journal.wait_durable(lsn)
    }

    /// A future that resolves when `lsn` is durable (for async servers).
    pub fn durable(&self, lsn: Lsn) -> Durable {
        self.inner.journal.durable(lsn)
    }

    /// Does [`Engine::sync_journal`] have nothing to wait for: is every
    /// operation acknowledged so far already on the disk itself? (Always
    /// with the journal's `fsync`, and with no journal; a server answers
    /// at once then.)
    pub fn journal_synced(&self) -> bool {
        self.inner.logless.is_some()
            || self.inner.journal.synced_lsn() >= self.inner.journal.durable_lsn()
    }

    /// Blocks until every journal record written before the call — every
    /// operation acknowledged before it — is on the disk itself, so it
    /// survives a power loss (fsync's promise): one sync, shared by the
    /// calls and write-backs waiting meanwhile; at once with
    /// [`SyncMode::Fsync`] (every reply waited for its sync). A log-less
    /// member's journal too. Log-less on one server there is no journal:
    /// it returns at once, and what was acknowledged survives a power loss
    /// only once written back (≤ ~30 s; the clients' backups keep it
    /// across process deaths, [`crate::logless`]).
    pub fn sync_journal(&self) -> Result<(), FsError> {
        self.inner.check_alive()?;
        if self.inner.logless.is_some() {
            return Ok(());
        }
        self.inner
            .journal
            .wait_synced(self.inner.journal.durable_lsn())
    }

    /// Writes every dirty table back and trims the journal.
    pub fn sync(&self) -> Result<(), EngineError> {
        if self.inner.stop.stopped() {
            return Err(EngineError::Stopped);
        }
        if let Some(ll) = &self.inner.logless {
            ll.checkpoint_started();
        }
        self.inner
            .checkpoint(&|_| true)
            .inspect_err(|e| self.inner.stop_after(e, "writing every table back"))
    }

    // ---- log-less durability ---------------------------------------------

    /// Is this engine in log-less mode?
    pub fn is_logless(&self) -> bool {
        self.inner.logless.is_some()
    }

    /// Is a committed operation acknowledgeable as soon as its commit
    /// returns — [`Engine::durable`] ready at once, nothing to wait for?
    /// Log-less, and with a journal that replies once written
    /// ([`SyncMode::Background`], `NoSync`: the committer writes its
    /// record itself) or writes nothing (`Off`); not with `Fsync`.
    pub fn acks_at_commit(&self) -> bool {
        self.inner.logless.is_some() || self.inner.journal.acks_at_append()
    }

    /// Log-less: the ARL entries with an LSN above `lsn`, oldest first
    /// (empty with the journal).
    pub fn arl_since(&self, lsn: Lsn) -> Vec<Redo> {
        if let Some(r) = self.inner.member_redo() {
            return r.arl_since(lsn);
        }
        self.inner
            .logless
            .as_ref()
            .map_or_else(Vec::new, |ll| ll.arl_since(lsn))
    }

    /// A log-less member ([`crate::member_logless`]): its journal is synced
    /// only in the background and its commits yield redo entries.
    pub fn is_member_logless(&self) -> bool {
        self.inner.member_redo().is_some()
    }

    /// Turns on (or off) change reports: from now on every commit that
    /// writes something carries its [`Changes`] in
    /// [`Committed::changes`]. Off by default (it costs an allocation per
    /// commit); a server turns it on for its cache watchers.
    pub fn track_changes(&self, on: bool) {
        self.inner.track_changes.store(on, Ordering::Relaxed);
    }

    /// Log-less: every operation with an LSN at or below this is written
    /// back (clients may drop those backups). 0 with the journal.
    /// A log-less member: the journal's synced LSN (what a power loss
    /// keeps; [`crate::member_logless`]).
    pub fn written_back_lsn(&self) -> Lsn {
        if self.inner.member_redo().is_some() {
            return self.inner.journal.synced_lsn();
        }
        self.inner.logless.as_ref().map_or(0, Logless::written_back)
    }

    /// Log-less: a reply carried the redo entries up to `lsn` to a client
    /// (the server calls this; see [`Engine::persist_acked`]).
    pub fn note_acked(&self, lsn: Lsn) {
        if let Some(r) = self.inner.member_redo() {
            r.note_acked(lsn);
        }
        if let Some(ll) = &self.inner.logless {
            ll.note_acked(lsn);
        }
    }

    /// Log-less: persists (synced) the highest LSN noted by
    /// [`Engine::note_acked`], if it grew; a recovery compares the entries
    /// handed back with it. Returns whether it wrote.
    pub fn persist_acked(&self) -> Result<bool, EngineError> {
        if let Some(r) = self.inner.member_redo() {
            return r.persist_acked(&*self.inner.store);
        }
        match &self.inner.logless {
            Some(ll) => ll.persist_acked(&*self.inner.store),
            None => Ok(false),
        }
    }

    /// Log-less: this run's id (0 with the journal).
    pub fn incarnation(&self) -> u64 {
        if let Some(r) = self.inner.member_redo() {
            return r.incarnation();
        }
        self.inner.logless.as_ref().map_or(0, |ll| ll.incarnation)
    }

    /// Log-less: the id of the crashed run whose clients' backups must be
    /// given to [`Engine::recover_logless`] before anything else is done.
    pub fn crashed_incarnation(&self) -> Option<u64> {
        if let Some(r) = self.inner.member_redo() {
            return r.crashed();
        }
        self.inner.logless.as_ref().and_then(Logless::crashed)
    }

    /// Log-less: (stamped keys, redo bytes handed out so far, ARL size).
    pub fn logless_stats(&self) -> Option<(usize, u64, usize)> {
        if let Some(r) = self.inner.member_redo() {
            return Some((r.stamps_len(), r.handed_out_bytes(), r.arl_size()));
        }
        self.inner
            .logless
            .as_ref()
            .map(|ll| (ll.stamps_len(), ll.handed_out_bytes(), ll.config.arl_size))
    }

    /// Log-less recovery: replays the redo entries the crashed run's
    /// clients sent back (any order, duplicates welcome) by the stamp rule
    /// ([`crate::logless`]), writes everything back, and marks the crash
    /// recovered. Entries not authenticated by this store's key are
    /// refused (counted in the report). Call it before serving anything.
    pub fn recover_logless(
        &self,
        backups: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<LoglessRecovery, EngineError> {
        let inner = &*self.inner;
        if inner.member_redo().is_some() {
            return self.recover_member_logless(backups.into_iter().collect());
        }
        let Some(ll) = &inner.logless else {
            return Ok(LoglessRecovery::default());
        };
        let mut report = LoglessRecovery::default();
        let mut entries: BTreeMap<Lsn, logless::RedoEntry> = BTreeMap::new();
        for b in backups {
            report.received += 1;
            match ll.key().open(&b) {
                Ok(e) => {
                    entries.entry(e.lsn).or_insert(e);
                }
                Err(logless::RedoError::Forged) => report.forged += 1,
                Err(_) => report.malformed += 1,
            }
        }
        let lsns: Vec<Lsn> = entries.keys().copied().collect();
        report.distinct = lsns.len();
        report.missing = logless::missing_ranges(&lsns, ll.recovery_from);
        report.acked_mark = ll.crashed_acked;
        let reached = lsns
            .last()
            .copied()
            .unwrap_or(0)
            .max(ll.recovery_from.saturating_sub(1));
        if ll.crashed_acked > reached {
            report.unreturned = Some((reached + 1, ll.crashed_acked));
        }
        if let Some(max) = lsns.last() {
            inner.journal.advance_to(max + 1);
        }
        let list: Vec<(Lsn, &[(Soid, Lsn)])> =
            entries.values().map(|e| (e.lsn, &e.prev[..])).collect();
        let decisions = logless::plan_recovery(&list, |k| ll.floor(k));
        // The replies of the operations kept, for their retries: answered,
        // not run again (an entry of an older server has none).
        let mut replies = Vec::new();
        {
            let _no_checkpoint = inner.checkpoint_lock.lock();
            let map = inner.tables.read();
            let epoch = inner.epoch();
            for (e, d) in entries.values().zip(&decisions) {
                if !matches!(d, Decision::Discard { .. }) {
                    replies.extend(e.tag.clone());
                    // The SOID counters only grow: merged for every entry
                    // that is not thrown away (durable ones included).
                    for m in &e.mutations {
                        if let Mutation::HighWater(hw) = m {
                            inner.high_water.lock().merge_max(hw);
                        }
                    }
                }
                match d {
                    Decision::Durable => report.durable += 1,
                    Decision::Discard { partial, .. } => {
                        report.discarded.push(e.lsn);
                        if *partial {
                            report.partial.push(e.lsn);
                        }
                    }
                    Decision::Apply => {
                        report.applied += 1;
                        for m in &e.mutations {
                            let Some(key) = m.table_key() else {
                                continue; // HighWater: merged above
                            };
                            if e.lsn <= ll.floor(key) {
                                continue;
                            }
                            let mut guard = lock_loaded(&*inner.store, &map, key, &|_| {})?;
                            if let Slot::Loaded(table) = &mut *guard {
                                table.apply(m.clone()).map_err(|e| EngineError::Corrupt {
                                    file: "log-less recovery".into(),
                                    what: format!("a redo entry does not apply: {e}"),
                                })?;
                                table.mark_applied(e.lsn, epoch);
                            }
                        }
                    }
                }
            }
            inner
                .inode_count
                .store(count_inodes(&map), Ordering::Relaxed);
        }
        inner.split_oversized();
        // Replayed renames, removals and mode changes bypass transactions:
        // no directory path remembered before recovery is trusted after it.
        inner.dir_epoch.fetch_add(1, Ordering::AcqRel);
        inner.dir_changes.fetch_add(1, Ordering::AcqRel);
        // Checkpoints are allowed again (see `checkpoint`); if this one
        // fails, the state file still names the crashed run, so the next
        // start recovers from the same backups over whatever got written.
        ll.recovery_applied();
        self.sync()?;
        ll.recovered(&*inner.store)?;
        Engine::deliver_carried(
            inner,
            Recovered {
                floors: Vec::new(),
                gone: Vec::new(),
                replies,
            },
        );
        Ok(report)
    }

    /// Merges one pair of neighbouring small tables, as the background
    /// flusher does after each write-back; `true` if it merged two. In
    /// member mode only two tables both this member's, through the
    /// catalogue (see the member module's doc).
    pub fn merge_small_tables(&self) -> bool {
        self.inner.merge_small_neighbours()
    }

    /// Runs one background-flusher tick now (tests and benchmarks).
    pub fn flush_tick(&self) -> Result<(), EngineError> {
        self.inner.flush_tick()
    }

    /// Stops the background flusher (for every clone of this handle) and
    /// writes every table back; the journal is then trimmed and closes when
    /// the last handle goes.
    pub fn close(self) -> Result<(), EngineError> {
        self.flusher.stop();
        self.sync()?;
        if let Some(r) = self.inner.member_redo() {
            if let Some(why) = member::unclean_at_close(&self.inner) {
                tracing::warn!(
                    "log-less: this server's run stays marked unfinished at its clean stop ({why}): \
                     readers of its journal go on taking the completion, and its restart cuts \
                     its journal there"
                );
                return Ok(());
            }
            return r.closed_cleanly(&*self.inner.store);
        }
        match &self.inner.logless {
            // A crashed run not yet recovered stays marked as such.
            Some(ll) if ll.crashed().is_none() => ll.closed_cleanly(&*self.inner.store),
            _ => Ok(()),
        }
    }

    /// Why the engine stopped after a failed write (`None`: it serves):
    /// [`EngineStats::stopped`] without the rest of the figures, cheap
    /// enough to poll.
    pub fn stopped(&self) -> Option<FsError> {
        self.inner.check_alive().err()
    }

    pub fn stats(&self) -> EngineStats {
        let fs = self.statfs();
        let js = self.inner.journal.stats();
        let c = &self.inner.stats;
        let (dir_cache_paths, dir_cache_bytes) = {
            let cache = self.inner.dir_cache.read();
            (cache.len(), cache.memory_bytes())
        };
        EngineStats {
            inodes: fs.inodes,
            tables: fs.tables,
            loaded_tables: fs.loaded_tables,
            resident_bytes: self.inner.resident_bytes(),
            journal_syncs: js.syncs,
            journal_sync_time: js.sync_time,
            journal_bytes: js.bytes_written,
            durable_lsn: js.durable_lsn,
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            snapshots_written: c.snapshots_written.load(Ordering::Relaxed),
            tables_loaded_total: c.tables_loaded.load(Ordering::Relaxed),
            tables_evicted_total: c.tables_evicted.load(Ordering::Relaxed),
            splits: c.splits.load(Ordering::Relaxed),
            merges: c.merges.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            dir_cache_paths,
            dir_cache_bytes,
            stopped: self.inner.check_alive().err(),
        }
    }

    /// Calls `f` on every table, loading those on disk (search, scrubbing).
    /// The sum of every table's summary: the one kept if no summary
    /// changed since it was made, else made now (every table read) and
    /// kept. See [`crate::table::summary::Sum`].
    pub(crate) fn summed_summaries(&self) -> Result<Arc<crate::table::summary::Sum>, FsError> {
        use crate::table::summary;
        let now = summary::changes();
        if let Some(kept) = self.inner.summed.lock().as_ref() {
            if kept.changes == now {
                return Ok(Arc::clone(kept));
            }
        }
        let mut sum = summary::Sum::new(now);
        self.for_each_table(|t| sum.add(t.summary()))?;
        let sum = Arc::new(sum);
        *self.inner.summed.lock() = Some(Arc::clone(&sum));
        Ok(sum)
    }

    pub fn for_each_table(&self, mut f: impl FnMut(&Table)) -> Result<(), FsError> {
        let map = self.inner.tables.read();
        for slot in map.values() {
            let mut guard = slot.state.lock();
            if let Slot::Foreign(_) = &*guard {
                continue; // member mode: only this member's tables
            }
            let table = self.inner.ensure_loaded(&mut guard)?;
            f(table);
        }
        Ok(())
    }
}

/// Runs flusher ticks until stopped. Holds the engine only during a tick,
/// so dropping the last handle is never delayed by a sleeping flusher.
fn flusher_loop(
    inner: Weak<Inner>,
    stop: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    interval: Duration,
) {
    loop {
        {
            let mut stopped = stop.0.lock();
            if !*stopped {
                stop.1.wait_for(&mut stopped, interval);
            }
            if *stopped {
                return;
            }
        }
        let Some(engine) = inner.upgrade() else {
            return;
        };
        if let Err(e) = engine.flush_tick() {
            engine.stop_after(&e, "background write-back");
            return;
        }
    }
}

// ---- what searches read -----------------------------------------------------
// The search API itself (`Engine::search` and the other `search_*` methods)
// is an `impl Engine` block in `crate::search`, which sits above the
// engine: the engine names nothing of it.

impl Engine {
    /// The first SOID of every table, in order (a parallel search cuts its
    /// work items there).
    pub(crate) fn table_starts(&self) -> Vec<Soid> {
        self.inner.tables.read().keys().copied().collect()
    }

    /// This member's directory epoch: it changes whenever a directory held
    /// here moves, goes, or changes mode or owner (it has changed by the
    /// time the change is acknowledged), and at recovery; not when a table
    /// comes or goes (a directory's record does not depend on who holds
    /// it). A member that read directories from others, and holds some
    /// itself, may keep the records as long as the epochs of every member
    /// (its own included: a table may come here, change, and go back) have
    /// the values they had when it read them (`sextant-server`'s cache of
    /// other servers' directories).
    pub fn dir_epoch(&self) -> u64 {
        self.inner.dir_changes.load(Ordering::Acquire)
    }

    /// Forgets every directory path remembered across searches
    /// ([`crate::dir_cache`]): the caller learned that directories held by
    /// another member, which the paths may run through, may have changed.
    /// A search that starts once this returns sees none of them. Does not
    /// change [`Engine::dir_epoch`].
    pub fn forget_remembered_dirs(&self) {
        self.inner.dir_forgets.fetch_add(1, Ordering::AcqRel);
    }

    /// A search starts: the directory epoch it remembers paths under
    /// ([`crate::dir_cache`]).
    pub(crate) fn dir_cache_begin(&self) -> u64 {
        let epoch = self.inner.dir_tag();
        if self.inner.dir_cache.read().epoch() != epoch {
            self.inner.dir_cache.write().begin(epoch);
        }
        epoch
    }

    /// The remembered absolute path of directory `d` at `epoch`, whether it
    /// and its ancestors are open to all, and the path's number of
    /// components.
    pub(crate) fn dir_cache_get(
        &self,
        epoch: u64,
        d: Soid,
    ) -> Option<(crate::dir_cache::Place, u32)> {
        self.inner.dir_cache.read().get(epoch, d)
    }

    /// Calls `f` with the remembered directory paths read-locked (many
    /// lookups for one lock; `f` must not lock anything else).
    pub(crate) fn dir_cache_read<T>(&self, f: impl FnOnce(&crate::dir_cache::DirCache) -> T) -> T {
        f(&self.inner.dir_cache.read())
    }

    /// Offers absolute directory paths read by a search that began at
    /// `epoch` (kept only if no directory moved, went or changed mode
    /// since).
    pub(crate) fn dir_cache_offer(&self, epoch: u64, paths: Vec<(Soid, Arc<[u8]>, bool)>) {
        if paths.is_empty() {
            return;
        }
        let mut cache = self.inner.dir_cache.write();
        let current = self.inner.dir_tag();
        cache.offer(epoch, current, paths);
    }

    /// Offers the place of the exits of version `version`, made from paths
    /// remembered at `epoch` ([`crate::dir_cache::ExitPlace`]).
    pub(crate) fn dir_cache_offer_place(
        &self,
        epoch: u64,
        version: u64,
        place: crate::dir_cache::ExitPlace,
    ) {
        let mut cache = self.inner.dir_cache.write();
        let current = self.inner.dir_tag();
        cache.offer_place(epoch, current, version, place);
    }

    /// Calls `f` on the table holding `key` (loading it), holding the table
    /// map shared and that one table's lock, and returns the table's range
    /// with `f`'s result.
    ///
    /// Member mode: a range another member owns is shown as an empty
    /// table (searches see only this member's tables).
    pub(crate) fn with_table_holding<T>(
        &self,
        key: Soid,
        f: impl FnOnce(&Table) -> T,
    ) -> Result<(SoidRange, T), FsError> {
        self.inner
            .with_owned_or_empty(key, |table| (table.range, f(table)))
    }

    /// [`Engine::with_table_holding`], telling a range another member
    /// holds apart (a spread search reports it instead of skipping it).
    pub(crate) fn with_held_table<T>(
        &self,
        key: Soid,
        f: impl FnOnce(&Table) -> T,
    ) -> Result<Held<(SoidRange, T)>, FsError> {
        self.inner.with_held(key, |table| (table.range, f(table)))
    }

    /// [`Engine::with_held_table`], for a search visiting the table:
    /// first rebuilds its index if it was never built (a table loaded from
    /// disk) or too many rows changed since (they are scanned one by one).
    /// The rebuild's cost lands on the search that needs it, never on
    /// lookups or the first access after a restart.
    pub(crate) fn with_held_indexed_table<T>(
        &self,
        key: Soid,
        f: impl FnOnce(&Table) -> T,
    ) -> Result<Held<(SoidRange, T)>, FsError> {
        self.inner.with_held(key, |table| {
            let stale = table.index.changed_count() > (table.inode_count() / 4).max(64);
            if !table.index.is_built() || stale {
                table.index = TableIndex::rebuild(table);
            }
            (table.range, f(table))
        })
    }

    /// The directory `dir` and its ancestors as this server holds them,
    /// child first, up to the first directory in a table it does not hold
    /// (or the root): what another member's search reads to continue a
    /// parent chain ([`crate::search::ForeignDirs`]). Empty when `dir` is
    /// gone or not a directory; `WrongServer` when its table is not held
    /// here.
    pub fn dir_chain(&self, dir: Soid) -> Result<Vec<crate::search::DirRecord>, FsError> {
        let got = self.dir_chains(&[dir], usize::MAX)?;
        if got.not_held.contains(&dir) {
            // Not held here (any more): the asker must ask the holder,
            // not take the directory for gone.
            return Err(FsError::WrongServer { soid: dir });
        }
        Ok(got.records)
    }

    /// [`Engine::dir_chain`] of each of `dirs` in one answer, each
    /// directory once (a chain stops where it meets a directory already
    /// answered), in about `budget` bytes: the directories past the
    /// budget are left unanswered (see [`crate::search::DirChains`]).
    /// A directory whose table is not held here is listed as not held.
    pub fn dir_chains(
        &self,
        dirs: &[Soid],
        budget: usize,
    ) -> Result<crate::search::DirChains, FsError> {
        use crate::search::{DirChains, DirRecord, MAX_CHAIN_LEN};
        let mut out = DirChains::default();
        let mut sent: std::collections::HashSet<Soid, crate::hash::FastHash> = Default::default();
        let mut bytes = 0usize;
        for (n, &dir) in dirs.iter().enumerate() {
            if n > 0 && bytes >= budget {
                break;
            }
            out.answered = n + 1;
            let (mut cur, mut len) = (dir, 0usize);
            loop {
                let sent = &mut sent;
                let held = self.inner.with_held(cur, |t| {
                    let mut at = cur;
                    let mut got = Vec::new();
                    loop {
                        if !sent.insert(at) {
                            return (got, None);
                        }
                        let Some(i) = t.inode(at).filter(|i| i.is_dir()) else {
                            sent.remove(&at);
                            return (got, None);
                        };
                        got.push(DirRecord {
                            soid: at,
                            parent: i.parent,
                            name: Box::from(&i.name),
                            perm: i.perm,
                            uid: i.uid,
                            gid: i.gid,
                        });
                        if at == Soid::ROOT || got.len() > t.dir_count() {
                            return (got, None);
                        }
                        at = i.parent;
                        if !t.range.contains(at) {
                            return (got, Some(at));
                        }
                    }
                })?;
                let Held::Table((got, next)) = held else {
                    // Not held here (any more): the asker asks the holder.
                    if cur == dir {
                        out.not_held.push(dir);
                    }
                    break;
                };
                len += got.len();
                bytes += got.iter().map(|r| r.name.len() + 64).sum::<usize>();
                out.records.extend(got);
                match next {
                    Some(n) if len < MAX_CHAIN_LEN => cur = n,
                    _ => break,
                }
            }
        }
        Ok(out)
    }
}
