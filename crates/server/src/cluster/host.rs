//! [`EngineHost`]: the coordinator shell's [`TableHost`] over the engine
//! in member mode — ADD loads a table (replaying a dead owner's journal
//! when its manifest points into one), DROP writes it back and answers its
//! final manifest (a DROP that fails without being fenced leaves the table
//! served as it was; one of a table the engine does not have is
//! [`NotHeld`]), a forgotten table stops serving at once.
//!
//! The engine commits the manifests itself through its catalogue
//! ([`super::catalog::EtcdCatalog`], fenced like the shell's own commits),
//! so ADD answers `None`: the shell only checks the grant still holds.
//!
//! The shell starts before the engine is open (the engine opens with the
//! tables etcd says are this server's, which needs the membership and the
//! map running): until then an ADD fails and the shell retries it.

use sextant_cluster::ids::TableId;
use sextant_coordinator::{Grant, HostError, NotHeld, TableHost};
use sextant_engine::{Engine, TableManifest};
use std::sync::OnceLock;

/// How long an ADD waits for the engine to open (it replays journals).
const OPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The table host of a cluster server.
#[derive(Default)]
pub struct EngineHost {
    engine: OnceLock<Engine>,
    /// How long clients get to hand in a dead log-less server's backups,
    /// counted from its death — of which the coordinator learns a lease
    /// TTL later at the earliest (its lease is gone): so the wait from
    /// the first time the coordinator here asks is the grace less the TTL.
    failover_grace: OnceLock<std::time::Duration>,
    /// When each dead log-less server was first asked about.
    first_asked: parking_lot::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// The disk's failure when an ADD could not write (a log-less member's
    /// new run at a rejoin, a completion's retirement, on a full disk):
    /// the server leaves the cluster then, as when its engine stopped
    /// (`cluster::run`), so that its tables are not given to it again and
    /// again, unserved.
    disk_failure: parking_lot::Mutex<Option<sextant_types::FsError>>,
}

/// The disk's failure behind `e`, if it is one this server cannot serve
/// past: a full disk (or quota), or a journal that stopped. (Another I/O
/// error — a manifest that cannot be read — refuses only this ADD.)
fn disk_cause(e: &sextant_engine::EngineError) -> Option<sextant_types::FsError> {
    use sextant_engine::EngineError;
    use sextant_types::FsError;
    match e {
        EngineError::JournalStopped { cause } => Some(*cause),
        EngineError::Io { source, .. }
            if matches!(
                source.raw_os_error(),
                Some(libc::ENOSPC) | Some(libc::EDQUOT)
            ) =>
        {
            Some(FsError::NoSpace)
        }
        _ => None,
    }
}

impl EngineHost {
    /// The disk's error that kept a new run from beginning here, if any
    /// (see `disk_failure`).
    pub fn disk_failure(&self) -> Option<sextant_types::FsError> {
        *self.disk_failure.lock()
    }

    /// `r`, noting its disk failure (see `disk_failure`): an ADD — the new
    /// run of a rejoin begun before it, the retirement of a completion —
    /// that cannot write for a full disk makes this server leave.
    fn noting_disk<T>(
        &self,
        r: Result<T, sextant_engine::EngineError>,
    ) -> Result<T, sextant_engine::EngineError> {
        if let Err(e) = &r {
            if let Some(cause) = disk_cause(e) {
                tracing::error!(error = %e, "an ADD could not write to this server's disk");
                *self.disk_failure.lock() = Some(cause);
            }
        }
        r
    }

    /// See `failover_grace`: the `--recovery-grace` less the lease TTL
    /// (default: none).
    pub fn set_failover_grace(&self, grace: std::time::Duration, lease_ttl: std::time::Duration) {
        let _ = self.failover_grace.set(grace.saturating_sub(lease_ttl));
    }

    /// The engine is open: ADDs may begin.
    pub fn set_engine(&self, engine: Engine) {
        let _ = self.engine.set(engine);
    }

    /// The engine, once open. The shell calls on a blocking thread, so
    /// an ADD that comes while the engine still opens waits for it (a
    /// failed ADD would make the shell forget the table — and forgetting
    /// one the engine opened with would stop it serving).
    fn engine(&self) -> Result<&Engine, HostError> {
        let deadline = std::time::Instant::now() + OPEN_WAIT;
        loop {
            if let Some(e) = self.engine.get() {
                return Ok(e);
            }
            if std::time::Instant::now() >= deadline {
                return Err("the engine is still opening".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl TableHost for EngineHost {
    fn add_table(
        &self,
        grant: &Grant,
        manifest: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, HostError> {
        let engine = self.engine()?;
        let id = u64::from(grant.table.0);
        // Log-less: joined again in this process (a newer membership
        // generation than the run began under): a new run first.
        self.noting_disk(engine.begin_serving(grant.generation))?;
        if engine.owned_tables().contains(&id) {
            // Opened with it (a restart), or made here (a split): serves
            // unless a log-less journal completion stands in the way (the
            // engine lets its tables go, and the next ADD loads them).
            self.noting_disk(engine.check_before_serving())?;
            return Ok(None);
        }
        let Some(bytes) = manifest else {
            // A table the coordinator made (it has no contents yet).
            let range = grant.range;
            self.noting_disk(engine.add_new_table(id, range))?;
            return Ok(None);
        };
        let m = TableManifest::from_bytes(bytes)?;
        if m.entry.id != id {
            return Err(format!("the manifest of table {id} names table {}", m.entry.id).into());
        }
        crate::fault::step("add-before");
        if crate::fault::add_without_space() {
            let full: Result<(), _> = Err(sextant_engine::EngineError::JournalStopped {
                cause: sextant_types::FsError::NoSpace,
            });
            self.noting_disk(full)?;
        }
        self.noting_disk(engine.add_table(&m))?;
        crate::fault::step("add-after");
        Ok(None)
    }

    fn drop_table(&self, table: TableId) -> Result<Vec<u8>, HostError> {
        let engine = self.engine()?;
        let id = u64::from(table.0);
        if !engine.owned_tables().contains(&id) {
            // Given up already (a fenced checkpoint): the shell settles it
            // with etcd.
            return Err(Box::new(NotHeld(table)));
        }
        crate::fault::step("drop-before");
        // A failure that is not fencing leaves the table in the engine as
        // it was: the shell tries again.
        let m = engine.drop_table(id)?;
        crate::fault::step("drop-after");
        Ok(m.to_bytes())
    }

    fn take_given_up(&self) -> Vec<TableId> {
        let Some(engine) = self.engine.get() else {
            return Vec::new();
        };
        engine
            .take_given_up()
            .into_iter()
            .filter_map(|id| u32::try_from(id).ok().map(TableId))
            .collect()
    }

    /// A dead log-less server's journal is completed from its clients'
    /// backups (kept in the shared store by whichever server they reached)
    /// once the grace has passed; until then, and while it fails, `false`.
    fn ready_for_failover(&self, dead: &str) -> bool {
        let Some(engine) = self.engine.get() else {
            return false;
        };
        match engine.failover_ready(dead) {
            Ok(true) => {
                self.first_asked.lock().remove(dead);
                return true;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(server = dead, error = %e, "cannot tell whether a dead server's journal needs completing");
                return false;
            }
        }
        let first = *self
            .first_asked
            .lock()
            .entry(dead.to_string())
            .or_insert_with(std::time::Instant::now);
        let grace = self.failover_grace.get().copied().unwrap_or_default();
        if first.elapsed() < grace {
            return false;
        }
        match engine.complete_dead_member(dead) {
            Ok(r) => {
                self.first_asked.lock().remove(dead);
                if !r.maybe_lost() {
                    tracing::info!(
                        server = dead,
                        through = r.through,
                        replayed = r.applied,
                        backups = r.received,
                        decided_here = r.written,
                        "log-less failover: the dead server's journal is completed from its clients' backups"
                    );
                } else {
                    tracing::error!(
                        server = dead,
                        through = r.through,
                        replayed = r.applied,
                        missing = ?r.missing,
                        discarded = ?r.discarded,
                        acknowledged_through = r.acked_mark,
                        unreturned = ?r.unreturned,
                        forged = r.forged,
                        "log-less failover: operations are MISSING (every client that held them is gone); \
                         later operations that built on them were discarded, leaving an older but consistent state"
                    );
                }
                true
            }
            // A view older than the server's return: refused (the claim
            // fences it), harmless and rare.
            // The run read before the claim is no longer the one to
            // complete: the server restarted meanwhile (its own recovery
            // decides that run). The next round asks about the run its
            // state names now, if it is still away.
            Err(sextant_engine::EngineError::RunMovedOn { run, .. }) => {
                tracing::info!(
                    server = dead,
                    run = format_args!("{run:x}"),
                    "not completing a log-less server's run: it restarted since it was found                      dead; nothing written"
                );
                false
            }
            Err(sextant_engine::EngineError::ClaimLost { .. }) => {
                tracing::info!(
                    server = dead,
                    "not completing a log-less server's journal: this server's claim ran out                      with its lease meanwhile (it was paused); nothing written"
                );
                false
            }
            Err(sextant_engine::EngineError::CompletionRefused { .. }) => {
                tracing::info!(
                    server = dead,
                    "not completing the journal of a log-less server thought dead: it is a \
                     member again (it came back after the view that found it dead) and serves \
                     its own journal; nothing to do"
                );
                false
            }
            Err(e) => {
                tracing::error!(server = dead, error = %e, "cannot complete a dead log-less server's journal; its tables wait");
                false
            }
        }
    }

    fn forget_table(&self, table: TableId) {
        if let Some(e) = self.engine.get() {
            if e.revoke_table(u64::from(table.0)) {
                tracing::warn!(table = %table, "table no longer this server's: stopped serving it");
            }
        }
    }
}
