//! The engine's side of log-less durability ([`crate::logless`] has the
//! format and the rules): the server's redo key, the stamps and the ARL
//! (both changed only under the journal's LSN lock, so in LSN order), the
//! written-back watermark clients drop their backups by, and the state
//! file that tells a restart whether the last run ended cleanly.
//!
//! Files in the store (both written with `put_blob`, which replaces
//! atomically):
//! - `logless.key`: 32 random bytes, the key that seals (encrypts and
//!   authenticates) redo entries. Made on the first log-less start; never
//!   changes.
//! - `logless.state`: `SXTLL1 <clean 0|1> <incarnation>` — the incarnation
//!   (a random id per start) of the last log-less run and whether it shut
//!   down cleanly (everything written back). A run that did not must be
//!   recovered from the clients' backups before anything else.
//! - `logless.acked`: `SXTACK1 <incarnation> <lsn>` — the highest LSN that
//!   run had sent to a client in a reply, as of the last time the server
//!   persisted it (every 100 ms while it grows). Recovery compares what
//!   the clients hand back with it: acknowledged operations at the *tail*
//!   that no client returned would otherwise go unnoticed.
//!
//! Invariants:
//! - `written_back` is `replay_from - 1` of the newest durable manifest:
//!   every operation with an LSN at or below it is in a table snapshot.
//! - [`Stamps`] holds the last writer of every key written at or above that
//!   manifest's `replay_from` ([`crate::logless::Stamps`]).
//! - The [`Quarantine`] holds every SOID freed above `written_back` (a
//!   recovery may bring its inode back, so it is not handed out again).

use crate::error::EngineError;
use crate::journal::Lsn;
use crate::logless::{Arl, Redo, RedoKey, Stamps, KEY_LEN};
use crate::quarantine::Quarantine;
use crate::store::Store;
use parking_lot::Mutex;
use sextant_types::Soid;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const KEY_FILE: &str = "logless.key";
const STATE_FILE: &str = "logless.state";
const STATE_MAGIC: &str = "SXTLL1";
const ACKED_FILE: &str = "logless.acked";
const ACKED_MAGIC: &str = "SXTACK1";

/// Log-less settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoglessConfig {
    /// Size K of the Active Request List: each reply carries the entries
    /// among the server's last K operations that its client has not seen.
    pub arl_size: usize,
    /// Write everything back once this many redo bytes were handed out
    /// since the last full checkpoint; with the dirty-age limit it bounds
    /// what clients must hold.
    pub max_backup_bytes: u64,
}

impl Default for LoglessConfig {
    fn default() -> Self {
        LoglessConfig {
            arl_size: 4,
            max_backup_bytes: 64 << 20,
        }
    }
}

/// What the last log-less run left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunState {
    pub clean: bool,
    pub incarnation: u64,
}

impl RunState {
    fn encode(&self) -> Vec<u8> {
        format!(
            "{STATE_MAGIC} {} {}\n",
            u8::from(self.clean),
            self.incarnation
        )
        .into_bytes()
    }

    fn decode(b: &[u8]) -> Result<RunState, String> {
        let text = std::str::from_utf8(b).map_err(|_| "not text".to_string())?;
        let mut parts = text.split_whitespace();
        if parts.next() != Some(STATE_MAGIC) {
            return Err("bad magic".into());
        }
        let clean = match parts.next() {
            Some("0") => false,
            Some("1") => true,
            _ => return Err("bad clean flag".into()),
        };
        let incarnation = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or("bad incarnation")?;
        Ok(RunState { clean, incarnation })
    }
}

/// Reads the last log-less run's state, if any. Errors: unreadable or corrupt.
pub(crate) fn read_run_state(store: &dyn Store) -> Result<Option<RunState>, EngineError> {
    let Some(b) = store
        .get_blob(STATE_FILE)
        .map_err(|source| EngineError::Io {
            file: store.describe(STATE_FILE),
            source,
        })?
    else {
        return Ok(None);
    };
    RunState::decode(&b)
        .map(Some)
        .map_err(|what| EngineError::Corrupt {
            file: store.describe(STATE_FILE),
            what,
        })
}

pub(crate) fn write_run_state(store: &dyn Store, state: RunState) -> Result<(), EngineError> {
    store
        .put_blob(STATE_FILE, &state.encode())
        .map_err(|source| EngineError::Io {
            file: store.describe(STATE_FILE),
            source,
        })
}

/// `(incarnation, lsn)` of `logless.acked`, if it exists and parses (a
/// damaged one counts as absent: the mark is a check, not data).
pub(crate) fn read_acked(store: &dyn Store) -> Result<Option<(u64, Lsn)>, EngineError> {
    let Some(b) = store
        .get_blob(ACKED_FILE)
        .map_err(|source| EngineError::Io {
            file: store.describe(ACKED_FILE),
            source,
        })?
    else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&b);
    let mut parts = text.split_whitespace();
    if parts.next() != Some(ACKED_MAGIC) {
        return Ok(None);
    }
    let incarnation = parts.next().and_then(|p| p.parse().ok());
    let lsn = parts.next().and_then(|p| p.parse().ok());
    Ok(incarnation.zip(lsn))
}

/// Starts a log-less run on `store` (a single server's, or a cluster
/// member's part of the shared store): the crashed run to recover, if the
/// last one did not end cleanly, and this run's new id. Records this run
/// as not clean — while the crashed run is not recovered its id stays in
/// the file, so a second crash during recovery still asks for the same
/// backups.
pub(crate) fn begin_run(store: &dyn Store) -> Result<(Option<u64>, u64), EngineError> {
    let crashed = read_run_state(store)?
        .filter(|s| !s.clean)
        .map(|s| s.incarnation);
    let incarnation = new_run_id(crashed)?;
    write_run_state(
        store,
        RunState {
            clean: false,
            incarnation: crashed.unwrap_or(incarnation),
        },
    )?;
    Ok((crashed, incarnation))
}

/// A new run id: random, never 0 (no run), never `other_than` (the run
/// it follows).
pub(crate) fn new_run_id(other_than: Option<u64>) -> Result<u64, EngineError> {
    loop {
        let i = u64::from_le_bytes(random_bytes::<8>().map_err(|source| EngineError::Io {
            file: "/dev/urandom".into(),
            source,
        })?);
        if i != 0 && Some(i) != other_than {
            return Ok(i);
        }
    }
}

/// Persists run `incarnation`'s acknowledged mark (`logless.acked`).
pub(crate) fn write_acked(
    store: &dyn Store,
    incarnation: u64,
    acked: Lsn,
) -> Result<(), EngineError> {
    let text = format!("{ACKED_MAGIC} {incarnation} {acked}\n");
    store
        .put_blob(ACKED_FILE, text.as_bytes())
        .map_err(|source| EngineError::Io {
            file: store.describe(ACKED_FILE),
            source,
        })
}

/// Random bytes from the kernel.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], std::io::Error> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// The engine's log-less state. See the module docs.
pub(crate) struct Logless {
    pub config: LoglessConfig,
    key: RedoKey,
    /// Changed only inside `Journal::assign_lsn` (LSN order).
    ordered: Mutex<Ordered>,
    written_back: AtomicU64,
    /// SOIDs freed by operations not yet written back.
    quarantine: Mutex<Quarantine>,
    handed_out_bytes: AtomicU64,
    bytes_at_checkpoint: AtomicU64,
    pub incarnation: u64,
    /// The incarnation that crashed and must be recovered (`None`: the
    /// last run ended cleanly, or recovery is done).
    crashed: Mutex<Option<u64>>,
    /// Per table of the manifest read at open: (first SOID, LSN up to which
    /// its snapshot, or the journal replayed at open, holds everything).
    floors: Vec<(Soid, Lsn)>,
    /// `replay_from` of the manifest read at open.
    pub recovery_from: Lsn,
    /// The highest LSN sent to a client in a reply ([`Logless::note_acked`]),
    /// and the highest persisted to `logless.acked`.
    acked: AtomicU64,
    acked_persisted: Mutex<Lsn>,
    /// The crashed run's persisted mark (0: none known).
    pub crashed_acked: Lsn,
}

struct Ordered {
    stamps: Stamps,
    arl: Arl,
}

impl Logless {
    /// Opens log-less state on `store`: reads or makes the key, learns
    /// whether the last run crashed, and records this run as not clean.
    pub fn open(
        store: &dyn Store,
        config: LoglessConfig,
        floors: Vec<(Soid, Lsn)>,
        recovery_from: Lsn,
        written_back: Lsn,
    ) -> Result<Logless, EngineError> {
        let io = |file: &str| {
            let file = store.describe(file);
            move |source| EngineError::Io { file, source }
        };
        let key: [u8; KEY_LEN] = match store.get_blob(KEY_FILE).map_err(io(KEY_FILE))? {
            Some(b) => b.as_slice().try_into().map_err(|_| EngineError::Corrupt {
                file: store.describe(KEY_FILE),
                what: format!("the redo key is {} bytes, not {KEY_LEN}", b.len()),
            })?,
            None => {
                let k = random_bytes::<KEY_LEN>().map_err(io("/dev/urandom"))?;
                store.put_blob(KEY_FILE, &k).map_err(io(KEY_FILE))?;
                k
            }
        };
        let (crashed, incarnation) = begin_run(store)?;
        let crashed_acked = match (crashed, read_acked(store)?) {
            (Some(c), Some((i, lsn))) if i == c => lsn,
            _ => 0,
        };
        Ok(Logless {
            ordered: Mutex::new(Ordered {
                stamps: Stamps::default(),
                arl: Arl::new(config.arl_size),
            }),
            config,
            key: RedoKey::new(&key, random_bytes::<16>().map_err(io("/dev/urandom"))?),
            written_back: AtomicU64::new(written_back),
            quarantine: Mutex::new(Quarantine::default()),
            handed_out_bytes: AtomicU64::new(0),
            bytes_at_checkpoint: AtomicU64::new(0),
            incarnation,
            crashed: Mutex::new(crashed),
            floors,
            recovery_from,
            acked: AtomicU64::new(0),
            acked_persisted: Mutex::new(0),
            crashed_acked,
        })
    }

    /// A reply carried the entries up to `lsn` to a client.
    pub fn note_acked(&self, lsn: Lsn) {
        self.acked.fetch_max(lsn, Ordering::AcqRel);
    }

    /// Persists the acknowledged mark if it grew since the last time.
    /// Returns whether it wrote. Never during a recovery (the file still
    /// describes the crashed run, which a second crash must find).
    pub fn persist_acked(&self, store: &dyn Store) -> Result<bool, EngineError> {
        if self.crashed().is_some() {
            return Ok(false);
        }
        let mut persisted = self.acked_persisted.lock();
        let acked = self.acked.load(Ordering::Acquire);
        if acked <= *persisted {
            return Ok(false);
        }
        write_acked(store, self.incarnation, acked)?;
        *persisted = acked;
        Ok(true)
    }

    pub fn key(&self) -> &RedoKey {
        &self.key
    }

    /// Called with the LSN just taken for an operation: stamps its keys,
    /// builds its redo entry, pushes it on the ARL.
    pub fn commit(
        &self,
        lsn: Lsn,
        keys: &[Soid],
        tag: Option<&crate::requests::RequestTag>,
        mutations: &[u8],
    ) -> Redo {
        let mut o = self.ordered.lock();
        let prev = o.stamps.stamp(lsn, keys);
        let redo = Redo {
            lsn,
            bytes: Arc::from(self.key.encode_tagged(lsn, &prev, tag, mutations)),
        };
        o.arl.push(redo.clone());
        drop(o);
        self.handed_out_bytes
            .fetch_add(redo.bytes.len() as u64, Ordering::Relaxed);
        redo
    }

    /// After a manifest with `replay_from` is durable.
    pub fn manifest_written(&self, replay_from: Lsn) {
        self.ordered.lock().stamps.forget_below(replay_from);
        let before = self
            .written_back
            .fetch_max(replay_from.saturating_sub(1), Ordering::AcqRel);
        self.quarantine
            .lock()
            .release_through(before.max(replay_from.saturating_sub(1)));
    }

    /// The SOIDs the operation `lsn` deleted (called while their tables
    /// are locked, before the deletes are applied).
    pub fn quarantine(&self, lsn: Lsn, freed: impl Iterator<Item = Soid>) {
        let mut q = self.quarantine.lock();
        for soid in freed {
            q.add(soid, lsn);
        }
    }

    /// The quarantine, for the SOID allocator (see [`Quarantine`]).
    pub fn quarantined(&self) -> parking_lot::MutexGuard<'_, Quarantine> {
        self.quarantine.lock()
    }

    /// A full checkpoint is starting: what was handed out so far will be
    /// written back.
    pub fn checkpoint_started(&self) {
        self.bytes_at_checkpoint.store(
            self.handed_out_bytes.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }

    /// Have clients been handed enough since the last full checkpoint that
    /// everything should be written back?
    pub fn backlog_long(&self) -> bool {
        self.handed_out_bytes.load(Ordering::Relaxed)
            - self.bytes_at_checkpoint.load(Ordering::Relaxed)
            > self.config.max_backup_bytes
    }

    pub fn written_back(&self) -> Lsn {
        self.written_back.load(Ordering::Acquire)
    }

    pub fn arl_since(&self, lsn: Lsn) -> Vec<Redo> {
        self.ordered.lock().arl.since(lsn)
    }

    pub fn stamps_len(&self) -> usize {
        self.ordered.lock().stamps.len()
    }

    pub fn handed_out_bytes(&self) -> u64 {
        self.handed_out_bytes.load(Ordering::Relaxed)
    }

    pub fn crashed(&self) -> Option<u64> {
        *self.crashed.lock()
    }

    /// The crashed run's backups are applied in memory: checkpoints may
    /// run again.
    pub fn recovery_applied(&self) {
        *self.crashed.lock() = None;
    }

    /// Recovery is over and written back: this run's own id goes into the
    /// state file.
    pub fn recovered(&self, store: &dyn Store) -> Result<(), EngineError> {
        write_run_state(
            store,
            RunState {
                clean: false,
                incarnation: self.incarnation,
            },
        )
    }

    /// A clean shutdown: everything is written back.
    pub fn closed_cleanly(&self, store: &dyn Store) -> Result<(), EngineError> {
        write_run_state(
            store,
            RunState {
                clean: true,
                incarnation: self.incarnation,
            },
        )
    }

    /// The LSN up to which `key`'s table (in the manifest read at open)
    /// holds every operation.
    pub fn floor(&self, key: Soid) -> Lsn {
        let i = self.floors.partition_point(|(start, _)| *start <= key);
        i.checked_sub(1).map_or(0, |i| self.floors[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_state_round_trip() {
        for s in [
            RunState {
                clean: true,
                incarnation: 7,
            },
            RunState {
                clean: false,
                incarnation: u64::MAX,
            },
        ] {
            assert_eq!(RunState::decode(&s.encode()), Ok(s));
        }
        assert!(RunState::decode(b"SXTLL1 2 5").is_err());
        assert!(RunState::decode(b"junk").is_err());
        assert!(RunState::decode(&[0xff, 0xfe]).is_err());
    }
}
