//! The journal: an append-only, checksummed log of committed records with
//! group commit (Magellan §4.4, cluster-based journaling).
//!
//! # Format (docs/formats/journal.md has the same in prose)
//!
//! The journal is a sequence of segment files `journal/<seq:020>.log`. Each
//! segment opens with a header, then holds *batches*; one batch is what one
//! `fdatasync` made durable:
//!
//! ```text
//! segment header (32 bytes)
//!   magic "SXTJSEG1" | seq u64 | first_lsn u64 | reserved u32 | crc32c u32 (of the 28 bytes before)
//! batch
//!   magic u32 0x534a_4231 | payload_len u32 | first_lsn u64 | count u32 | crc32c u32 | payload
//!   crc covers first_lsn, count, payload_len and the payload
//!   payload = count × ( record_len u32 | record bytes ); record i has lsn first_lsn + i
//! ```
//! All integers little-endian. LSNs are dense: batch n+1 starts where batch n ended.
//!
//! # Recovery rule
//!
//! A bad batch (wrong magic, length past the end, checksum mismatch, LSN gap)
//! at the end of the *last* segment, with no valid batch anywhere after it,
//! is a torn write of a batch that was never acknowledged (acknowledgement
//! waits for the batch's sync): it is cut off. Any other bad batch is
//! corruption of acknowledged data and stops recovery with
//! [`JournalError::Corrupt`] naming the file and offset.
//!
//! The one other cut: [`truncate_after`] removes every record after a
//! given LSN at a batch boundary, when a decision taken elsewhere fixed
//! the journal's end there (a log-less member's completed run).
//!
//! # Group commit
//!
//! With [`SyncMode::Fsync`], [`Journal::append`] only copies a record into
//! the open batch and returns its LSN; a syncer thread repeatedly takes the
//! whole open batch, writes it and syncs it, then publishes the durable
//! LSN. While one sync runs, new records gather in the next batch, so N
//! concurrent committers share one sync. Callers wait with
//! [`Journal::wait_durable`] (blocking) or [`Journal::durable`] (a
//! `Future`). Right after a sync the syncer may
//! hold the open batch briefly, until the committers of the last batch are
//! back ([`crate::group_commit`]: at most half a sync, never for a lone
//! committer), so that closed-loop committers share syncs.
//!
//! With [`SyncMode::Background`] (and `NoSync`) a batch is acknowledged
//! once written, and nothing waits for a sync: the committer writes its
//! record itself, on its own thread, before [`Journal::append`] returns
//! (whoever holds the writer takes every pending record, in LSN order, so
//! concurrent committers still share writes). There is no syncer thread
//! to hand the record to and to be woken by: on a loaded host each such
//! hand-off waited for a core (docs/BENCHMARKS.md, "Where a mutation's
//! server time goes"). The background thread syncs within the interval
//! of the oldest unsynced write, and a table write-back's
//! [`Journal::wait_synced`] syncs at once: a torn or missing tail after a
//! power loss is then acknowledged batches, cut by the same rule — a
//! whole batch or none, never half an operation.
//!
//! A failed write or sync is fatal: the journal stops, every waiter gets
//! the error of [`crate::stop`] (`FsError::NoSpace` for a full disk, else
//! `FsError::Io`), and nothing after it is acknowledged.

use crate::group_commit::GroupCommit;
use crate::stop::{Cause, StopState};
use crate::store::{LogWriter, Store};
use parking_lot::{Condvar, Mutex};
use sextant_types::FsError;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Log sequence number of a journal record. Dense, starting at 1.
pub type Lsn = u64;

const SEGMENT_MAGIC: &[u8; 8] = b"SXTJSEG1";
const SEGMENT_HEADER_LEN: usize = 32;
const BATCH_MAGIC: u32 = 0x534a_4231;
const BATCH_HEADER_LEN: usize = 24;
/// Largest record accepted (a record holds one operation's mutations; 16
/// MiB is far above any real one). Enforced when a record is appended, so
/// nothing is ever acknowledged that recovery would refuse to read back.
pub const MAX_RECORD_LEN: usize = 16 << 20;
/// Records are written in batches of at most this many payload bytes (the
/// batch header holds a u32 length).
const MAX_BATCH_PAYLOAD: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal I/O error on {file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("journal corrupt in {file} at offset {offset}: {what}")]
    Corrupt {
        file: String,
        offset: u64,
        what: String,
    },
}

fn segment_name(seq: u64) -> String {
    format!("journal/{seq:020}.log")
}

fn segment_header(seq: u64, first_lsn: Lsn) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

fn batch_crc(first_lsn: Lsn, count: u32, payload: &[u8]) -> u32 {
    let mut meta = [0u8; 16];
    meta[..8].copy_from_slice(&first_lsn.to_le_bytes());
    meta[8..12].copy_from_slice(&count.to_le_bytes());
    meta[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&meta), payload)
}

/// Encodes one batch (header + payload) into `out`.
pub fn encode_batch(first_lsn: Lsn, count: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&BATCH_MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&first_lsn.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&batch_crc(first_lsn, count, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8).map(|s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_le_bytes(a)
    })
}

/// One decoded batch: its first LSN and its records.
#[derive(Debug, PartialEq, Eq)]
pub struct Batch<'a> {
    pub first_lsn: Lsn,
    pub records: Vec<&'a [u8]>,
    /// Bytes the batch occupies (header + payload).
    pub len: usize,
}

/// Decodes the batch at the start of `b`. Never panics; `Err` says why it is
/// not a valid batch.
pub fn decode_batch(b: &[u8]) -> Result<Batch<'_>, String> {
    let magic = le_u32(b, 0).ok_or("truncated batch header")?;
    if magic != BATCH_MAGIC {
        return Err(format!("bad batch magic {magic:#x}"));
    }
    let (Some(len), Some(first_lsn), Some(count), Some(crc)) =
        (le_u32(b, 4), le_u64(b, 8), le_u32(b, 16), le_u32(b, 20))
    else {
        return Err("truncated batch header".into());
    };
    let len = len as usize;
    let payload = b
        .get(BATCH_HEADER_LEN..BATCH_HEADER_LEN + len)
        .ok_or("batch runs past the end of the file")?;
    if batch_crc(first_lsn, count, payload) != crc {
        return Err("batch checksum mismatch".into());
    }
    let mut records = Vec::new();
    let mut at = 0usize;
    for _ in 0..count {
        let rlen = le_u32(payload, at).ok_or("record header past batch end")? as usize;
        if rlen > MAX_RECORD_LEN {
            return Err(format!("record length {rlen} too large"));
        }
        let rec = payload
            .get(at + 4..at + 4 + rlen)
            .ok_or("record runs past batch end")?;
        records.push(rec);
        at += 4 + rlen;
    }
    if at != payload.len() {
        return Err("batch has trailing bytes".into());
    }
    Ok(Batch {
        first_lsn,
        records,
        len: BATCH_HEADER_LEN + len,
    })
}

/// What replay found.
#[derive(Debug, Default, Clone)]
pub struct ReplayOutcome {
    /// The LSN the next record will get.
    pub next_lsn: Lsn,
    /// Records handed to the callback.
    pub records: u64,
    /// Bytes cut off as a torn tail, and where.
    pub torn_tail: Option<(String, u64, u64)>,
    /// Segments still on disk that hold records: (seq, first_lsn).
    pub segments: Vec<(u64, Lsn)>,
}

/// Reads every segment in order and calls `apply(lsn, record)` for each
/// record with `lsn >= from_lsn`. Cuts a torn tail (see the module docs).
pub fn replay(
    store: &dyn Store,
    from_lsn: Lsn,
    mut apply: impl FnMut(Lsn, &[u8]) -> Result<(), String>,
) -> Result<ReplayOutcome, JournalError> {
    let names = store.list("journal/").map_err(|source| JournalError::Io {
        file: store.describe("journal/"),
        source,
    })?;
    let segments: Vec<(u64, String)> = names
        .into_iter()
        .filter_map(|n| {
            let seq = n
                .strip_prefix("journal/")?
                .strip_suffix(".log")?
                .parse()
                .ok()?;
            Some((seq, n))
        })
        .collect();
    let mut out = ReplayOutcome {
        next_lsn: 1,
        ..Default::default()
    };
    let mut expected_lsn: Option<Lsn> = None;
    for (i, (seq, name)) in segments.iter().enumerate() {
        let is_last = i + 1 == segments.len();
        let file = store.describe(name);
        let corrupt = |offset: u64, what: String| JournalError::Corrupt {
            file: file.clone(),
            offset,
            what,
        };
        let bytes = store.read_log(name).map_err(|source| JournalError::Io {
            file: file.clone(),
            source,
        })?;
        if bytes.len() < SEGMENT_HEADER_LEN {
            if is_last {
                // Crashed while creating the segment: nothing in it was acknowledged.
                store
                    .truncate_log(name, 0)
                    .map_err(|source| JournalError::Io {
                        file: file.clone(),
                        source,
                    })?;
                out.torn_tail = Some((file.clone(), 0, bytes.len() as u64));
                break;
            }
            return Err(corrupt(0, "segment header truncated".into()));
        }
        let header = &bytes[..SEGMENT_HEADER_LEN];
        if &header[..8] != SEGMENT_MAGIC
            || le_u32(header, 28) != Some(crc32c::crc32c(&header[..28]))
            || le_u64(header, 8) != Some(*seq)
        {
            return Err(corrupt(0, "bad segment header".into()));
        }
        let seg_first = le_u64(header, 16).unwrap_or(0);
        if seg_first == 0 {
            return Err(corrupt(0, "segment starts at lsn 0".into()));
        }
        // Records below `from_lsn` are covered by snapshots, so a gap there
        // is harmless (LSNs may jump when the journal was off). A segment
        // starting above both the previous one's end and `from_lsn` means
        // records recovery needs are missing, e.g. a deleted segment.
        let continues = expected_lsn.map_or(seg_first <= from_lsn, |exp| seg_first == exp);
        if !continues && seg_first > from_lsn {
            return Err(corrupt(
                0,
                format!(
                    "segment starts at lsn {seg_first} but recovery needs records from lsn {}",
                    expected_lsn.map_or(from_lsn, |e| e.max(from_lsn))
                ),
            ));
        }
        expected_lsn = Some(seg_first);
        out.segments.push((*seq, seg_first));
        let mut at = SEGMENT_HEADER_LEN;
        while at < bytes.len() {
            let batch = decode_batch(&bytes[at..]).and_then(|b| {
                if Some(b.first_lsn) != expected_lsn {
                    Err(format!("batch lsn {} out of sequence", b.first_lsn))
                } else if b.first_lsn.checked_add(b.records.len() as u64).is_none() {
                    Err(format!("batch lsn {} overflows", b.first_lsn))
                } else {
                    Ok(b)
                }
            });
            match batch {
                Ok(batch) => {
                    for (k, rec) in batch.records.iter().enumerate() {
                        // Cannot overflow: checked above.
                        let lsn = batch.first_lsn + k as u64;
                        if lsn >= from_lsn {
                            apply(lsn, rec).map_err(|what| {
                                corrupt(at as u64, format!("record lsn {lsn}: {what}"))
                            })?;
                            out.records += 1;
                        }
                    }
                    expected_lsn = Some(batch.first_lsn + batch.records.len() as u64);
                    at += batch.len;
                }
                Err(what) => {
                    if is_last && !any_valid_batch_after(&bytes, at + 1) {
                        store
                            .truncate_log(name, at as u64)
                            .map_err(|source| JournalError::Io {
                                file: file.clone(),
                                source,
                            })?;
                        out.torn_tail = Some((file.clone(), at as u64, (bytes.len() - at) as u64));
                        break;
                    }
                    return Err(corrupt(at as u64, what));
                }
            }
        }
    }
    out.next_lsn = expected_lsn.unwrap_or(1).max(from_lsn);
    Ok(out)
}

/// Cuts every record after LSN `last` off the journal in `store`: the
/// segments that start after it are deleted (the last first, so what is
/// left is always a prefix of the journal) and the one holding `last` is
/// cut right after the batch that ends with it. Returns how many records
/// were cut. Used when a decision taken elsewhere fixed the journal's end
/// at `last` and nothing after it was ever acknowledged (a log-less
/// member's completed run, `crate::member_logless`). Errors: `last` falls
/// inside a batch (a batch is all or nothing: not cut), I/O.
pub fn truncate_after(store: &dyn Store, last: Lsn) -> Result<u64, JournalError> {
    let io = |file: String| move |source| JournalError::Io { file, source };
    let mut segments: Vec<(u64, String)> = store
        .list("journal/")
        .map_err(io(store.describe("journal/")))?
        .into_iter()
        .filter_map(|n| {
            let seq = n
                .strip_prefix("journal/")?
                .strip_suffix(".log")?
                .parse()
                .ok()?;
            Some((seq, n))
        })
        .collect();
    segments.sort();
    let mut cut = 0u64;
    for (_, name) in segments.iter().rev() {
        let file = store.describe(name);
        let bytes = store.read_log(name).map_err(io(file.clone()))?;
        let first = bytes
            .get(..SEGMENT_HEADER_LEN)
            .filter(|h| &h[..8] == SEGMENT_MAGIC)
            .and_then(|h| le_u64(h, 16));
        let mut at = SEGMENT_HEADER_LEN;
        let mut records = Vec::new();
        while let Ok(b) = bytes.get(at..).map_or(Err(String::new()), decode_batch) {
            records.push((at, b.first_lsn, b.records.len() as u64, b.len));
            at += b.len;
        }
        match first {
            // Wholly after `last` (or a header a crash left torn).
            None => {
                store.delete(name).map_err(io(file))?;
            }
            Some(f) if f > last => {
                cut += records.iter().map(|r| r.2).sum::<u64>();
                store.delete(name).map_err(io(file))?;
            }
            Some(_) => {
                let mut keep = SEGMENT_HEADER_LEN;
                for (off, first_lsn, n, len) in records {
                    if first_lsn > last {
                        cut += n;
                        continue;
                    }
                    if n > 0 && first_lsn + n - 1 > last {
                        return Err(JournalError::Corrupt {
                            file,
                            offset: off as u64,
                            what: format!(
                                "LSN {last} is inside the batch of LSNs {first_lsn}..{}: \
                                 a batch is not cut",
                                first_lsn + n - 1
                            ),
                        });
                    }
                    keep = off + len;
                }
                if keep < bytes.len() {
                    store.truncate_log(name, keep as u64).map_err(io(file))?;
                }
                break;
            }
        }
    }
    Ok(cut)
}

/// Is there a valid batch anywhere at or after `from`? Checksumming every
/// candidate could be quadratic on a hostile file, so the work is bounded;
/// when the budget runs out the answer is "yes" — the bad batch is then
/// reported as corruption, never silently cut.
fn any_valid_batch_after(bytes: &[u8], from: usize) -> bool {
    const BUDGET_BYTES: usize = 1 << 30;
    let magic = BATCH_MAGIC.to_le_bytes();
    let mut spent = 0usize;
    for i in from..bytes.len().saturating_sub(BATCH_HEADER_LEN - 1) {
        if !bytes[i..].starts_with(&magic) {
            continue;
        }
        let claimed = le_u32(bytes, i + 4).unwrap_or(0) as usize;
        spent = spent.saturating_add(claimed.min(bytes.len() - i));
        if spent > BUDGET_BYTES {
            return true;
        }
        if decode_batch(&bytes[i..]).is_ok() {
            return true;
        }
    }
    false
}

/// How the journal makes records durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SyncMode {
    /// Write and fdatasync every batch (the default).
    Fsync,
    /// Write every batch and acknowledge it at once, and fdatasync within
    /// the given interval of the first write not yet synced (and before
    /// a table write-back, as `NoSync`), on a thread of its own so the
    /// writer goes on meanwhile. A process crash loses nothing (the
    /// kernel holds what was written); a power loss loses at most the
    /// operations acknowledged in the last interval plus one sync — never
    /// half of one (batches are checksummed, a torn tail is cut). What
    /// CephFS's early replies and ext4's periodic commit trade.
    Background(Duration),
    /// Write batches without syncing them (survives a process crash; a
    /// power loss loses what was not written back). Synced only before a
    /// table write-back, so a power loss never keeps a snapshot without
    /// the records before it. For benchmarks.
    NoSync,
    /// Write nothing: every record is "durable" at once. Durability comes
    /// only from snapshots; used to measure the price of journaling.
    Off,
}

/// Journal tuning.
#[derive(Clone, Debug)]
pub struct JournalConfig {
    pub mode: SyncMode,
    /// A new segment starts once the current one passes this size.
    pub segment_bytes: u64,
    /// Benchmarks only: every journal sync takes at least this long, as on
    /// a slower disk. The issues' targets assume a 6 – 8 ms fdatasync, and
    /// the disk of the machine they are measured on syncs in ~0.3 ms; this
    /// lets a benchmark show how group commit and log-less durability
    /// behave under the premise, beside the real disk. `None`: as fast as
    /// the disk. The syncs of [`SyncMode::Fsync`] and of the background
    /// syncer of [`SyncMode::Background`] are slowed (`NoSync`'s
    /// write-back syncs are not).
    pub sync_floor: Option<Duration>,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            mode: SyncMode::Fsync,
            segment_bytes: 64 << 20,
            sync_floor: None,
        }
    }
}

struct OpenBatch {
    first_lsn: Lsn,
    count: u32,
    payload: Vec<u8>,
}

struct State {
    next_lsn: Lsn,
    open: OpenBatch,
    shutdown: bool,
    waiters: Vec<(Lsn, Waker)>,
    /// Background: the background syncer waits for a first unsynced
    /// record (only then does a write wake it).
    background_idle: bool,
}

struct Segment {
    seq: u64,
    first_lsn: Lsn,
}

/// The open segment and what writing to it needs.
struct Writer {
    log: Box<dyn LogWriter>,
    /// Bytes in the open segment (a new one starts past
    /// [`JournalConfig::segment_bytes`]).
    segment_len: u64,
    /// The batch being encoded (reused).
    buf: Vec<u8>,
}

struct Shared {
    store: Arc<dyn Store>,
    config: JournalConfig,
    state: Mutex<State>,
    syncer_wake: Condvar,
    /// Wakes the background syncer ([`run_background`]) when a record is
    /// written, and at shutdown.
    background_wake: Condvar,
    /// Background, NoSync: the writer, used by each committer in turn
    /// ([`Shared::write_through`]). Lock order: `writer`, then `state`.
    /// (Fsync: the syncer thread owns its writer; `None` here.)
    writer: Mutex<Option<Writer>>,
    /// Background, NoSync: a handle syncing the current segment, beside
    /// the writer (the background thread's and a write-back's syncs).
    sync_handle: Mutex<Option<Box<dyn crate::store::LogSync>>>,
    durable_cv: Condvar,
    durable_lsn: AtomicU64,
    /// Records up to here are synced to the disk (with [`SyncMode::Fsync`]
    /// the same as `durable_lsn`; with `NoSync` what the last requested
    /// sync covered).
    synced_lsn: AtomicU64,
    stop: StopState,
    /// Segments on disk, oldest first; the last is being appended to.
    segments: Mutex<Vec<Segment>>,
    syncs: AtomicU64,
    /// Nanoseconds the counted syncs took (the fdatasync, and the
    /// benchmarks' sync floor when set).
    sync_nanos: AtomicU64,
    bytes_written: AtomicU64,
}

/// Counters for benchmarks and metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct JournalStats {
    pub syncs: u64,
    /// Time spent in those syncs, in total.
    pub sync_time: Duration,
    pub bytes_written: u64,
    pub durable_lsn: Lsn,
    pub segments: usize,
}

/// The writing side of the journal. See the module docs.
pub struct Journal {
    shared: Arc<Shared>,
    syncer: Option<JoinHandle<()>>,
    /// [`SyncMode::Background`]'s syncing thread.
    background: Option<JoinHandle<()>>,
}

impl Journal {
    /// Starts a journal whose next record gets `next_lsn`, in a new segment
    /// after `last_segment`. `existing` lists segments already on disk that
    /// recovery still needs (seq, first_lsn).
    pub fn start(
        store: Arc<dyn Store>,
        config: JournalConfig,
        next_lsn: Lsn,
        existing: Vec<(u64, Lsn)>,
    ) -> Result<Journal, JournalError> {
        let segments: Vec<Segment> = existing
            .into_iter()
            .map(|(seq, first_lsn)| Segment { seq, first_lsn })
            .collect();
        let shared = Arc::new(Shared {
            store,
            config,
            state: Mutex::new(State {
                next_lsn,
                open: OpenBatch {
                    first_lsn: next_lsn,
                    count: 0,
                    payload: Vec::new(),
                },
                shutdown: false,
                waiters: Vec::new(),
                background_idle: false,
            }),
            syncer_wake: Condvar::new(),
            background_wake: Condvar::new(),
            writer: Mutex::new(None),
            sync_handle: Mutex::new(None),
            durable_cv: Condvar::new(),
            durable_lsn: AtomicU64::new(next_lsn - 1),
            // (NoSync: records recovered at start are taken as synced; a
            // power loss right after a process crash and restart can still
            // lose them — NoSync never promised power-loss durability.)
            synced_lsn: AtomicU64::new(next_lsn - 1),
            stop: StopState::default(),
            segments: Mutex::new(segments),
            syncs: AtomicU64::new(0),
            sync_nanos: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        });
        if shared.config.mode.background().is_some() {
            // A crashed run's records (still in the kernel's cache, maybe)
            // are on the disk before this run acknowledges anything.
            for seg in shared.segments.lock().iter() {
                let name = segment_name(seg.seq);
                shared
                    .store
                    .open_log(&name)
                    .and_then(|mut w| w.sync())
                    .map_err(|source| JournalError::Io {
                        file: shared.store.describe(&name),
                        source,
                    })?;
            }
        }
        if shared.config.mode.acks_unsynced() {
            let log = Syncer::open_segment(&shared, next_lsn)?;
            *shared.writer.lock() = Some(Writer {
                log,
                segment_len: SEGMENT_HEADER_LEN as u64,
                buf: Vec::new(),
            });
        }
        let syncer = if shared.config.mode == SyncMode::Fsync {
            let writer = Syncer::open_segment(&shared, next_lsn)?;
            let s = Arc::clone(&shared);
            Some(
                std::thread::Builder::new()
                    .name("sextant-journal".into())
                    .spawn(move || Syncer { shared: s, writer }.run())
                    .map_err(|source| JournalError::Io {
                        file: "journal syncer thread".into(),
                        source,
                    })?,
            )
        } else {
            None
        };
        let background = match shared.config.mode.background() {
            Some(every) => {
                let s = Arc::clone(&shared);
                let opened = Instant::now();
                Some(
                    std::thread::Builder::new()
                        .name("sextant-journal-sync".into())
                        .spawn(move || run_background(s, every, opened))
                        .map_err(|source| JournalError::Io {
                            file: "journal background sync thread".into(),
                            source,
                        })?,
                )
            }
            None => None,
        };
        Ok(Journal {
            shared,
            syncer,
            background,
        })
    }

    /// Adds a record to the open batch and returns its LSN (with
    /// `Background` and `NoSync`, the record is written by then: see the
    /// module docs). Call it while holding the locks that ordered the
    /// operation, so LSN order agrees with the order in which conflicting
    /// operations applied.
    pub fn append(&self, record: &[u8]) -> Result<Lsn, FsError> {
        self.append_with(record, |_| ()).map(|(lsn, ())| lsn)
    }

    /// [`Journal::append`], running `f` with the record's LSN under the lock
    /// that orders LSNs: whatever `f` records (a log-less member's stamps
    /// and ARL, [`crate::member_logless`]) is in LSN order.
    pub fn append_with<T>(
        &self,
        record: &[u8],
        f: impl FnOnce(Lsn) -> T,
    ) -> Result<(Lsn, T), FsError> {
        if let Some(e) = self.shared.stop.error() {
            return Err(e);
        }
        if record.len() > MAX_RECORD_LEN {
            // Refused before anything is applied: the operation fails whole.
            return Err(FsError::TooBig);
        }
        let mut st = self.shared.state.lock();
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        let out = f(lsn);
        if !config_writes(&self.shared.config) {
            self.shared.durable_lsn.store(lsn, Ordering::Release);
            return Ok((lsn, out));
        }
        if st.open.count == 0 {
            st.open.first_lsn = lsn;
        }
        st.open.count += 1;
        st.open
            .payload
            .extend_from_slice(&(record.len() as u32).to_le_bytes());
        st.open.payload.extend_from_slice(record);
        drop(st);
        if self.shared.config.mode.acks_unsynced() {
            // Written (and so acknowledged) before this returns; a failed
            // write stops the journal, and the record's wait reports it.
            self.shared.write_through(lsn);
        } else {
            self.shared.syncer_wake.notify_one();
        }
        Ok((lsn, out))
    }

    /// Is every record durable (acknowledgeable) once [`Journal::append`]
    /// returns? With `Background` and `NoSync` (written on the caller's
    /// thread) and `Off` (nothing written); not with `Fsync`.
    pub fn acks_at_append(&self) -> bool {
        self.shared.config.mode != SyncMode::Fsync
    }

    /// Records up to here are on the disk itself (fdatasync), not only
    /// written: what survives a power loss.
    pub fn synced_lsn(&self) -> Lsn {
        self.shared.synced_lsn.load(Ordering::Acquire)
    }

    /// With the journal [`SyncMode::Off`] (log-less durability): takes the
    /// next LSN and runs `f` with it under the lock that orders LSNs, so
    /// whatever `f` records (the log-less stamps and ARL) is in LSN order.
    /// Nothing is written; the LSN is "durable" at once.
    pub fn assign_lsn<T>(&self, f: impl FnOnce(Lsn) -> T) -> Result<(Lsn, T), FsError> {
        if config_writes(&self.shared.config) {
            return Err(FsError::Io);
        }
        if let Some(e) = self.shared.stop.error() {
            return Err(e);
        }
        let mut st = self.shared.state.lock();
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        let out = f(lsn);
        self.shared.durable_lsn.store(lsn, Ordering::Release);
        Ok((lsn, out))
    }

    /// With the journal off: makes the next LSN at least `next` (log-less
    /// recovery learns of LSNs the clients hold).
    pub fn advance_to(&self, next: Lsn) {
        let mut st = self.shared.state.lock();
        if !config_writes(&self.shared.config) && next > st.next_lsn {
            st.next_lsn = next;
            st.open.first_lsn = next;
            self.shared.durable_lsn.store(next - 1, Ordering::Release);
        }
    }

    /// The LSN the next record will get.
    pub fn next_lsn(&self) -> Lsn {
        self.shared.state.lock().next_lsn
    }

    pub fn durable_lsn(&self) -> Lsn {
        self.shared.durable_lsn.load(Ordering::Acquire)
    }

    /// Blocks until `lsn` is durable.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), FsError> {
        if self.durable_lsn() >= lsn {
            return Ok(());
        }
        self.wait_on_syncer(self.shared.state.lock(), || self.durable_lsn() >= lsn)
    }

    /// Waits (on the syncer's signal) until `done`, or the journal stopped
    /// or shut down.
    fn wait_on_syncer(
        &self,
        mut st: parking_lot::MutexGuard<'_, State>,
        done: impl Fn() -> bool,
    ) -> Result<(), FsError> {
        loop {
            if done() {
                return Ok(());
            }
            if let Some(e) = self.shared.stop.error() {
                return Err(e);
            }
            if st.shutdown {
                return Err(FsError::Io);
            }
            self.shared.durable_cv.wait(&mut st);
        }
    }

    /// Blocks until records up to `lsn` are on the disk itself, not only
    /// written: what a table write-back needs before its snapshot may
    /// replace them (else a power loss could keep the snapshot and lose
    /// records before it, leaving an operation over two tables half done).
    /// With [`SyncMode::Fsync`] that is [`Journal::wait_durable`]; with
    /// `NoSync` or `Background` it syncs what is written, beside the
    /// writer (one sync per write-back, not per operation; callers
    /// meanwhile share it); with `Off` nothing is written, so nothing to
    /// wait.
    pub fn wait_synced(&self, lsn: Lsn) -> Result<(), FsError> {
        match self.shared.config.mode {
            SyncMode::Fsync => return self.wait_durable(lsn),
            SyncMode::Off => return Ok(()),
            SyncMode::NoSync | SyncMode::Background(_) => {}
        }
        self.wait_durable(lsn)?;
        if self.shared.synced_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        self.shared.sync_written(lsn)
    }

    /// A future that resolves when `lsn` is durable.
    pub fn durable(&self, lsn: Lsn) -> Durable {
        Durable {
            shared: Arc::clone(&self.shared),
            lsn,
        }
    }

    /// `Some` once a write or sync failed (the engine must stop): what
    /// requests fail with from then on.
    pub fn failure(&self) -> Option<FsError> {
        self.shared.stop.error()
    }

    pub fn stats(&self) -> JournalStats {
        JournalStats {
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            sync_time: Duration::from_nanos(self.shared.sync_nanos.load(Ordering::Relaxed)),
            bytes_written: self.shared.bytes_written.load(Ordering::Relaxed),
            durable_lsn: self.durable_lsn(),
            segments: self.shared.segments.lock().len(),
        }
    }

    /// The first LSN of the second-oldest segment: [`Journal::trim_below`]
    /// deletes the oldest segment only for an `lsn` at least this (`None`:
    /// one segment, nothing to trim).
    pub fn second_segment_start(&self) -> Option<Lsn> {
        self.shared.segments.lock().get(1).map(|s| s.first_lsn)
    }

    /// Deletes every segment all of whose records are below `lsn` (they are
    /// covered by table snapshots). Never deletes the segment being written.
    pub fn trim_below(&self, lsn: Lsn) -> Result<usize, JournalError> {
        let mut segs = self.shared.segments.lock();
        let mut removed = 0;
        while segs.len() >= 2 && segs[1].first_lsn <= lsn {
            let name = segment_name(segs[0].seq);
            self.shared
                .store
                .delete(&name)
                .map_err(|source| JournalError::Io {
                    file: self.shared.store.describe(&name),
                    source,
                })?;
            segs.remove(0);
            removed += 1;
        }
        Ok(removed)
    }

    /// Flushes what is pending and stops the syncer; with a background
    /// sync, syncs what was written (a clean shutdown loses nothing).
    pub fn shutdown(&mut self) {
        self.shared.state.lock().shutdown = true;
        self.shared.syncer_wake.notify_all();
        self.shared.background_wake.notify_all();
        if let Some(h) = self.syncer.take() {
            let _ = h.join();
        }
        if let Some(h) = self.background.take() {
            let _ = h.join();
        }
        if self.shared.config.mode.background().is_some() {
            // No write starts after `shutdown` is set; one under way ends
            // before the writer is ours.
            let mut writer = self.shared.writer.lock();
            let tail = self.shared.durable_lsn.load(Ordering::Acquire)
                > self.shared.synced_lsn.load(Ordering::Acquire);
            if let (Some(w), true, None) = (writer.as_mut(), tail, self.shared.stop.error()) {
                if let Err(e) = self.shared.sync_writer(w) {
                    self.shared.fail(&e);
                }
            }
        }
        self.shared.durable_cv.notify_all();
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn config_writes(config: &JournalConfig) -> bool {
    config.mode != SyncMode::Off
}

impl SyncMode {
    /// Acknowledges written batches before they are synced.
    fn acks_unsynced(self) -> bool {
        matches!(self, SyncMode::NoSync | SyncMode::Background(_))
    }

    /// The background sync interval, if any.
    fn background(self) -> Option<Duration> {
        match self {
            SyncMode::Background(every) => Some(every),
            _ => None,
        }
    }
}

/// Resolves when its LSN is durable (or the journal failed: `Err` of
/// [`Journal::failure`]).
pub struct Durable {
    shared: Arc<Shared>,
    lsn: Lsn,
}

impl Future for Durable {
    type Output = Result<(), FsError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let done = |s: &Shared| s.durable_lsn.load(Ordering::Acquire) >= self.lsn;
        if done(&self.shared) {
            return Poll::Ready(Ok(()));
        }
        let mut st = self.shared.state.lock();
        if done(&self.shared) {
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = self.shared.stop.error() {
            return Poll::Ready(Err(e));
        }
        if st.shutdown {
            return Poll::Ready(Err(FsError::Io));
        }
        // Re-polled futures must not pile up wakers.
        let lsn = self.lsn;
        if !st
            .waiters
            .iter()
            .any(|(l, w)| *l == lsn && w.will_wake(cx.waker()))
        {
            st.waiters.push((lsn, cx.waker().clone()));
        }
        Poll::Pending
    }
}

/// Takes the open batch, or — if it is over [`MAX_BATCH_PAYLOAD`] — its
/// first records up to that size, leaving the rest open for the next sync
/// (one batch per sync is what makes a torn tail recognisable).
fn take_batch(open: &mut OpenBatch) -> OpenBatch {
    let empty = OpenBatch {
        first_lsn: 0,
        count: 0,
        payload: Vec::new(),
    };
    if open.payload.len() <= MAX_BATCH_PAYLOAD {
        return std::mem::replace(open, empty);
    }
    // Whole records only; always at least one (each is ≤ MAX_RECORD_LEN).
    let (mut cut, mut n) = (0usize, 0u32);
    while n < open.count {
        let len = le_u32(&open.payload, cut).unwrap_or(0) as usize;
        if n > 0 && cut + 4 + len > MAX_BATCH_PAYLOAD {
            break;
        }
        cut += 4 + len;
        n += 1;
    }
    let rest = open.payload.split_off(cut);
    let taken = OpenBatch {
        first_lsn: open.first_lsn,
        count: n,
        payload: std::mem::replace(&mut open.payload, rest),
    };
    open.first_lsn += n as u64;
    open.count -= n;
    taken
}

/// [`SyncMode::Fsync`]'s writing thread: takes the open batch, writes
/// and syncs it, acknowledges it (group commit, see the module docs).
struct Syncer {
    shared: Arc<Shared>,
    writer: Box<dyn LogWriter>,
}

impl Syncer {
    fn open_segment(shared: &Shared, first_lsn: Lsn) -> Result<Box<dyn LogWriter>, JournalError> {
        let mut segs = shared.segments.lock();
        let seq = segs.last().map_or(1, |s| s.seq + 1);
        let name = segment_name(seq);
        let io = |source| JournalError::Io {
            file: shared.store.describe(&name),
            source,
        };
        let mut w = shared.store.open_log(&name).map_err(io)?;
        w.append(&segment_header(seq, first_lsn)).map_err(io)?;
        if shared.config.mode == SyncMode::Fsync {
            w.sync().map_err(io)?;
        }
        if shared.config.mode.acks_unsynced() {
            // Installed before any record of the segment is published.
            *shared.sync_handle.lock() = Some(w.sync_handle().map_err(io)?);
        }
        segs.push(Segment { seq, first_lsn });
        Ok(w)
    }

    fn run(mut self) {
        let mut segment_len = SEGMENT_HEADER_LEN as u64;
        let mut buf = Vec::new();
        let mut policy = GroupCommit::default();
        let mut last_sync_end = Instant::now();
        loop {
            let batch = {
                let mut st = self.shared.state.lock();
                loop {
                    while st.open.count == 0 && !st.shutdown {
                        self.shared.syncer_wake.wait(&mut st);
                    }
                    if st.open.count == 0 {
                        return;
                    }
                    if st.shutdown {
                        break;
                    }
                    // Every append wakes us: re-decide with the new count.
                    let hold = policy.hold(st.open.count, last_sync_end.elapsed());
                    if hold.is_zero() {
                        break;
                    }
                    self.shared.syncer_wake.wait_for(&mut st, hold);
                }
                take_batch(&mut st.open)
            };
            let started = Instant::now();
            let last_lsn = batch.first_lsn + batch.count as u64 - 1;
            buf.clear();
            encode_batch(batch.first_lsn, batch.count, &batch.payload, &mut buf);
            let result = (|| -> Result<(), JournalError> {
                if segment_len >= self.shared.config.segment_bytes {
                    self.writer = Syncer::open_segment(&self.shared, batch.first_lsn)?;
                    segment_len = SEGMENT_HEADER_LEN as u64;
                }
                let io = |source| JournalError::Io {
                    file: "journal segment".into(),
                    source,
                };
                self.writer.append(&buf).map_err(io)?;
                let syncing = Instant::now();
                self.writer.sync().map_err(io)?;
                if let Some(floor) = self.shared.config.sync_floor {
                    std::thread::sleep(floor.saturating_sub(syncing.elapsed()));
                }
                self.shared.count_sync(syncing.elapsed());
                Ok(())
            })();
            if let Err(e) = result {
                self.shared.fail(&e);
                return;
            }
            segment_len += buf.len() as u64;
            // What was pending when the sync ended, read before its
            // committers are woken: any of them back already would be
            // counted twice (as acknowledged and as pending).
            let pending = self.shared.state.lock().open.count;
            policy.synced(batch.count, started.elapsed(), pending);
            last_sync_end = Instant::now();
            self.shared
                .bytes_written
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
            self.shared.durable_lsn.store(last_lsn, Ordering::Release);
            self.shared.synced_lsn.store(last_lsn, Ordering::Release);
            self.shared.wake(false);
        }
    }
}

impl Shared {
    /// Background, NoSync: makes record `lsn` written (acknowledged), on
    /// the caller's thread. Whoever holds the writer takes every pending
    /// record — batches leave in LSN order, and a committer whose record
    /// another took finds it written once the writer is free. Writes
    /// nothing once the journal shut down or stopped (the record's wait
    /// then fails, as it did with a syncer thread gone).
    fn write_through(&self, lsn: Lsn) {
        let mut writer = self.writer.lock();
        let Some(w) = writer.as_mut() else {
            return;
        };
        while self.durable_lsn.load(Ordering::Acquire) < lsn {
            let batch = {
                let mut st = self.state.lock();
                if st.open.count == 0 || st.shutdown || self.stop.error().is_some() {
                    return;
                }
                take_batch(&mut st.open)
            };
            if let Err(e) = self.write_batch(w, &batch) {
                self.fail(&e);
                return;
            }
        }
    }

    /// Writes one batch into the open segment (a new one first when it is
    /// full, the old synced whole so that what `synced_lsn` covers stays
    /// synced) and publishes it durable (written).
    fn write_batch(&self, w: &mut Writer, batch: &OpenBatch) -> Result<(), JournalError> {
        let last_lsn = batch.first_lsn + batch.count as u64 - 1;
        w.buf.clear();
        encode_batch(batch.first_lsn, batch.count, &batch.payload, &mut w.buf);
        if w.segment_len >= self.config.segment_bytes {
            self.sync_writer(w)?;
            w.log = Syncer::open_segment(self, batch.first_lsn)?;
            w.segment_len = SEGMENT_HEADER_LEN as u64;
        }
        w.log.append(&w.buf).map_err(|source| JournalError::Io {
            file: "journal segment".into(),
            source,
        })?;
        w.segment_len += w.buf.len() as u64;
        self.bytes_written
            .fetch_add(w.buf.len() as u64, Ordering::Relaxed);
        self.durable_lsn.store(last_lsn, Ordering::Release);
        // One look under the state lock: futures of the records just
        // written (a committer's own is never among them: it returns
        // written), and an idle background syncer, which this write
        // gives something to sync — under the lock, since it looks and
        // waits under it.
        let ready: Vec<Waker> = {
            let mut st = self.state.lock();
            if st.background_idle {
                self.background_wake.notify_one();
            }
            if st.waiters.is_empty() {
                Vec::new()
            } else {
                let (ready, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut st.waiters)
                    .into_iter()
                    .partition(|(l, _)| *l <= last_lsn);
                st.waiters = rest;
                ready.into_iter().map(|(_, w)| w).collect()
            }
        };
        self.durable_cv.notify_all();
        for waker in ready {
            waker.wake();
        }
        Ok(())
    }

    /// Syncs everything written (through the writer, which the caller
    /// holds) and publishes it as synced.
    fn sync_writer(&self, w: &mut Writer) -> Result<(), JournalError> {
        let written = self.durable_lsn.load(Ordering::Acquire);
        let started = Instant::now();
        w.log.sync().map_err(|source| JournalError::Io {
            file: "journal segment".into(),
            source,
        })?;
        self.count_sync(started.elapsed());
        self.synced(written);
        Ok(())
    }

    /// Background, NoSync: a write-back's sync of everything written up
    /// to `lsn` at least, through the sync handle, so writes go on
    /// meanwhile. Concurrent callers share a sync: each syncs only if the
    /// one before it did not cover it.
    fn sync_written(&self, lsn: Lsn) -> Result<(), FsError> {
        let handle = self.sync_handle.lock();
        if self.synced_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let target = self.durable_lsn.load(Ordering::Acquire);
        let started = Instant::now();
        let result = match &*handle {
            Some(h) => h.sync(),
            None => Ok(()),
        };
        drop(handle);
        if let Err(source) = result {
            let e = JournalError::Io {
                file: "journal segment (write-back sync)".into(),
                source,
            };
            self.fail(&e);
            return Err(self.stop.error().unwrap_or(FsError::Io));
        }
        self.count_sync(started.elapsed());
        self.synced(target);
        Ok(())
    }

    /// Fatal: stop acknowledging. The engine reports it and stops.
    fn fail(&self, e: &JournalError) {
        let cause = Cause::of_chain(e);
        tracing::error!(
            error = %e,
            "journal write failed; the engine stops (nothing after it is acknowledged; \
             restart the server{} to recover)",
            if cause == Cause::NoSpace { " after freeing space" } else { "" }
        );
        self.stop.stop(cause);
        self.wake(true);
    }

    /// Counts one sync that took `took` (for [`JournalStats`]).
    fn count_sync(&self, took: Duration) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sync_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// A sync covering every record up to `lsn` is done (and counted):
    /// publishes it, wakes [`Journal::wait_synced`].
    fn synced(&self, lsn: Lsn) {
        self.synced_lsn.fetch_max(lsn, Ordering::AcqRel);
        let _held = self.state.lock();
        self.durable_cv.notify_all();
    }

    fn wake(&self, all: bool) {
        let durable = self.durable_lsn.load(Ordering::Acquire);
        let ready: Vec<Waker> = {
            let mut st = self.state.lock();
            let (ready, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut st.waiters)
                .into_iter()
                .partition(|(lsn, _)| all || *lsn <= durable);
            st.waiters = rest;
            ready.into_iter().map(|(_, w)| w).collect()
        };
        self.durable_cv.notify_all();
        for w in ready {
            w.wake();
        }
    }
}

/// [`SyncMode::Background`]: syncs the current segment every `every`
/// while records written since the last sync wait, through a handle of
/// its own ([`crate::store::LogSync`]), so the writer goes on appending
/// (and acknowledging) during the sync — on a disk whose fdatasync takes
/// 7 ms, a sync on the writer's thread would hold every reply behind it.
/// What a sync covers: every record published durable before it began
/// (the writer appends before it publishes; a new segment's handle is
/// installed before its first record is published, and the old segment
/// was synced whole when the writer left it).
///
/// `opened`: when the journal opened, before any record of this run was
/// written. The first sync is due `every` after it, not at the thread's
/// first look: a thread scheduled late (a loaded host) that found records
/// unsynced synced them at once, at a moment that depended on the
/// scheduler — not a loss, but an interval the configuration did not ask
/// for, and a test that cuts the unsynced tail (`member_logless.rs`)
/// found its tail synced now and then once committers stopped handing
/// records to a writer thread (which gave this one the core).
fn run_background(shared: Arc<Shared>, every: Duration, opened: Instant) {
    let mut next_sync = opened + every;
    loop {
        {
            let mut st = shared.state.lock();
            loop {
                if st.shutdown || shared.stop.error().is_some() {
                    // `Journal::shutdown` syncs the tail at a clean shutdown.
                    return;
                }
                let unsynced = shared.durable_lsn.load(Ordering::Acquire)
                    > shared.synced_lsn.load(Ordering::Acquire);
                let now = Instant::now();
                if unsynced && now >= next_sync {
                    break;
                }
                if unsynced {
                    shared.background_wake.wait_for(&mut st, next_sync - now);
                } else {
                    st.background_idle = true;
                    shared.background_wake.wait(&mut st);
                    st.background_idle = false;
                    // The oldest unsynced record was just written: it is
                    // synced `every` from now.
                    next_sync = next_sync.max(Instant::now() + every);
                }
            }
        }
        let started = Instant::now();
        next_sync = started + every;
        let target = shared.durable_lsn.load(Ordering::Acquire);
        let result = match &*shared.sync_handle.lock() {
            Some(h) => h.sync(),
            None => Ok(()),
        };
        if let Err(source) = result {
            shared.fail(&JournalError::Io {
                file: "journal segment (background sync)".into(),
                source,
            });
            return;
        }
        if let Some(floor) = shared.config.sync_floor {
            std::thread::sleep(floor.saturating_sub(started.elapsed()));
        }
        shared.count_sync(started.elapsed());
        shared.synced(target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;

    type Replayed = (Vec<(Lsn, Vec<u8>)>, ReplayOutcome);

    fn collect(store: &dyn Store) -> Result<Replayed, JournalError> {
        let mut recs = Vec::new();
        let out = replay(store, 1, |lsn, r| {
            recs.push((lsn, r.to_vec()));
            Ok(())
        })?;
        Ok((recs, out))
    }

    /// NoSync: written records are lost by a power loss until a write-back
    /// asks for a sync; after `wait_synced` they survive it, and the sync
    /// covers everything written before (also across a segment change).
    #[test]
    fn nosync_records_survive_a_power_loss_once_a_write_back_synced_them() {
        let store = MemStore::new();
        let s: Arc<dyn Store> = Arc::new(store.clone());
        let cfg = JournalConfig {
            mode: SyncMode::NoSync,
            segment_bytes: 200,
            ..JournalConfig::default()
        };
        let j = Journal::start(s, cfg, 1, vec![]).unwrap();
        let mut last = 0;
        for i in 0..30 {
            last = j
                .append(format!("record {i:03} of the test").as_bytes())
                .unwrap();
            j.wait_durable(last).unwrap();
        }
        let syncs = j.stats().syncs;
        j.wait_synced(last).unwrap();
        assert!(j.stats().syncs > syncs, "a sync ran");
        let more = j.append(b"after the sync").unwrap();
        j.wait_durable(more).unwrap();
        store.crash(None);
        let (recs, _) = collect(&store).unwrap();
        let lsns: Vec<Lsn> = recs.iter().map(|(l, _)| *l).collect();
        assert_eq!(lsns, (1..=last).collect::<Vec<_>>(), "synced ones only");
        drop(j);
    }

    /// Background: what was written is synced within the interval with
    /// no write-back asking (`NoSync` would keep it unsynced, so the same
    /// test fails with it), and a clean shutdown syncs the rest.
    #[test]
    fn background_records_survive_a_power_loss_once_the_interval_passed() {
        let store = MemStore::new();
        let s: Arc<dyn Store> = Arc::new(store.clone());
        let cfg = JournalConfig {
            mode: SyncMode::Background(Duration::from_millis(5)),
            segment_bytes: 400,
            ..JournalConfig::default()
        };
        let j = Journal::start(s, cfg, 1, vec![]).unwrap();
        let mut last = 0;
        for i in 0..30 {
            last = j
                .append(format!("record {i:03} of the test").as_bytes())
                .unwrap();
            j.wait_durable(last).unwrap();
        }
        // Not a timing assertion: the interval is 5 ms, the bound 20 s.
        let deadline = Instant::now() + Duration::from_secs(20);
        while j.shared.synced_lsn.load(Ordering::Acquire) < last {
            assert!(Instant::now() < deadline, "no background sync came");
            std::thread::sleep(Duration::from_millis(2));
        }
        store.crash(None);
        let (recs, _) = collect(&store).unwrap();
        let lsns: Vec<Lsn> = recs.iter().map(|(l, _)| *l).collect();
        assert_eq!(lsns, (1..=last).collect::<Vec<_>>());
        drop(j);

        // A clean shutdown leaves nothing unsynced, whatever the interval.
        let store = MemStore::new();
        let s: Arc<dyn Store> = Arc::new(store.clone());
        let cfg = JournalConfig {
            mode: SyncMode::Background(Duration::from_secs(3600)),
            ..JournalConfig::default()
        };
        let mut j = Journal::start(s, cfg, 1, vec![]).unwrap();
        let lsn = j.append(b"just before the shutdown").unwrap();
        j.wait_durable(lsn).unwrap();
        j.shutdown();
        store.crash(None);
        assert_eq!(collect(&store).unwrap().0.len(), 1);
    }

    /// Background: records are written and acknowledged while a
    /// background sync runs (here one lasting 2 s, the sync floor); a
    /// sync on the writer's thread would hold them until it ends.
    #[test]
    fn background_syncs_do_not_hold_the_writer() {
        let store = MemStore::new();
        let s: Arc<dyn Store> = Arc::new(store.clone());
        let cfg = JournalConfig {
            mode: SyncMode::Background(Duration::from_millis(1)),
            sync_floor: Some(Duration::from_secs(2)),
            ..JournalConfig::default()
        };
        let j = Journal::start(s, cfg, 1, vec![]).unwrap();
        let first = j.append(b"first").unwrap();
        j.wait_durable(first).unwrap();
        // The background sync of `first` starts within a millisecond and
        // lasts two seconds.
        std::thread::sleep(Duration::from_millis(50));
        let mut last = first;
        for i in 0..20 {
            last = j.append(format!("during the sync {i}").as_bytes()).unwrap();
            j.wait_durable(last).unwrap();
        }
        assert_eq!(
            j.shared.synced_lsn.load(Ordering::Acquire),
            0,
            "acknowledged only after a sync: the writer waited for it"
        );
        j.wait_synced(last).unwrap();
        drop(j);
        store.crash(None);
        assert_eq!(collect(&store).unwrap().0.len(), 21);
    }

    /// Background and NoSync: a record is written — acknowledged — by
    /// the time `append` returns, on the committer's own thread: nothing
    /// to wait for, no thread to wake (with a syncer thread writing it,
    /// the committer would find it not yet written).
    #[test]
    fn unsynced_modes_write_the_record_before_append_returns() {
        for mode in [
            SyncMode::Background(Duration::from_secs(3600)),
            SyncMode::NoSync,
        ] {
            let store = MemStore::new();
            let s: Arc<dyn Store> = Arc::new(store.clone());
            let cfg = JournalConfig {
                mode,
                segment_bytes: 300,
                ..JournalConfig::default()
            };
            let j = Journal::start(s, cfg, 1, vec![]).unwrap();
            for i in 0..200 {
                let lsn = j.append(format!("record {i:03}").as_bytes()).unwrap();
                assert!(j.durable_lsn() >= lsn, "{mode:?}: record {lsn} not written");
            }
            assert!(j.stats().segments > 1, "segments rotated");
            // Written, so a sync keeps every one of them.
            j.wait_synced(200).unwrap();
            store.crash(None);
            assert_eq!(collect(&store).unwrap().0.len(), 200, "{mode:?}");
        }
    }

    /// Background and NoSync: committers on several threads write in
    /// turn; every record lands once, under its own LSN, in LSN order,
    /// across segment changes.
    #[test]
    fn concurrent_committers_write_every_record_in_lsn_order() {
        for mode in [
            SyncMode::Background(Duration::from_millis(1)),
            SyncMode::NoSync,
        ] {
            let store = MemStore::new();
            let s: Arc<dyn Store> = Arc::new(store.clone());
            let cfg = JournalConfig {
                mode,
                segment_bytes: 1000,
                ..JournalConfig::default()
            };
            let j = Journal::start(s, cfg, 1, vec![]).unwrap();
            let appended: Vec<(Lsn, Vec<u8>)> = std::thread::scope(|sc| {
                let handles: Vec<_> = (0..4)
                    .map(|t| {
                        let j = &j;
                        sc.spawn(move || {
                            (0..100)
                                .map(|i| {
                                    let r = format!("thread {t} record {i}").into_bytes();
                                    let lsn = j.append(&r).unwrap();
                                    assert!(j.durable_lsn() >= lsn);
                                    (lsn, r)
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap())
                    .collect()
            });
            j.wait_synced(400).unwrap();
            store.crash(None);
            let (mut recs, _) = collect(&store).unwrap();
            let mut want = appended;
            want.sort();
            recs.sort();
            assert_eq!(recs, want, "{mode:?}");
        }
    }

    fn write_records(store: &MemStore, n: u64) {
        let s: Arc<dyn Store> = Arc::new(store.clone());
        let mut j = Journal::start(s, JournalConfig::default(), 1, vec![]).unwrap();
        for i in 0..n {
            let lsn = j.append(format!("rec{i}").as_bytes()).unwrap();
            j.wait_durable(lsn).unwrap();
        }
        j.shutdown();
    }

    #[test]
    fn records_round_trip_in_order() {
        let store = MemStore::new();
        write_records(&store, 10);
        let (recs, out) = collect(&store).unwrap();
        assert_eq!(recs.len(), 10);
        for (i, (lsn, r)) in recs.iter().enumerate() {
            assert_eq!(*lsn, i as u64 + 1);
            assert_eq!(r, format!("rec{i}").as_bytes());
        }
        assert_eq!(out.next_lsn, 11);
    }

    #[test]
    fn truncate_after_leaves_exactly_the_prefix_across_segments() {
        let store = MemStore::new();
        write_records(&store, 5);
        let (_, out) = collect(&store).unwrap();
        let s: Arc<dyn Store> = Arc::new(store.clone());
        let mut j = Journal::start(s, JournalConfig::default(), 6, out.segments).unwrap();
        for i in 5..8 {
            let lsn = j.append(format!("rec{i}").as_bytes()).unwrap();
            j.wait_durable(lsn).unwrap();
        }
        j.shutdown();
        assert_eq!(store.list("journal/").unwrap().len(), 2);
        assert_eq!(truncate_after(&store, 3).unwrap(), 5);
        assert_eq!(store.list("journal/").unwrap().len(), 1);
        let (recs, out) = collect(&store).unwrap();
        let lsns: Vec<Lsn> = recs.iter().map(|(l, _)| *l).collect();
        assert_eq!(lsns, vec![1, 2, 3]);
        assert_eq!(out.next_lsn, 4);
        assert!(out.torn_tail.is_none());
        assert_eq!(truncate_after(&store, 3).unwrap(), 0, "idempotent");
        assert_eq!(truncate_after(&store, 9).unwrap(), 0);
        assert_eq!(collect(&store).unwrap().0.len(), 3);
    }

    #[test]
    fn unsynced_tail_is_lost_and_torn_tail_is_cut() {
        let store = MemStore::new();
        write_records(&store, 3);
        // Append a partial batch by hand, as a crash mid-write would leave it.
        let name = store.list("journal/").unwrap().pop().unwrap();
        let mut partial = Vec::new();
        encode_batch(4, 1, b"\x03\0\0\0abc", &mut partial);
        partial.truncate(partial.len() - 2);
        store.with_bytes(&name, |b| b.extend_from_slice(&partial));
        let (recs, out) = collect(&store).unwrap();
        assert_eq!(recs.len(), 3);
        assert!(out.torn_tail.is_some());
        // The cut is durable: a second replay sees a clean journal.
        let (_, out) = collect(&store).unwrap();
        assert!(out.torn_tail.is_none());
    }

    #[test]
    fn corruption_before_valid_data_is_an_error() {
        let store = MemStore::new();
        write_records(&store, 5);
        let name = store.list("journal/").unwrap().pop().unwrap();
        // Flip a byte in the first batch's payload.
        store.with_bytes(&name, |b| {
            b[SEGMENT_HEADER_LEN + BATCH_HEADER_LEN + 5] ^= 0xff
        });
        match collect(&store) {
            Err(JournalError::Corrupt { offset, .. }) => {
                assert_eq!(offset, SEGMENT_HEADER_LEN as u64)
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn concurrent_appends_share_syncs() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let j =
            Arc::new(Journal::start(store.clone(), JournalConfig::default(), 1, vec![]).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let j = Arc::clone(&j);
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let lsn = j.append(format!("{t}-{i}").as_bytes()).unwrap();
                        j.wait_durable(lsn).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let stats = j.stats();
        assert_eq!(stats.durable_lsn, 1600);
        drop(j);
        let (recs, _) = collect(&*store).unwrap();
        assert_eq!(recs.len(), 1600);
    }

    /// A journal with `n` durable records in 200-byte segments (many
    /// segments), still open.
    fn small_segments(n: usize) -> (MemStore, Arc<dyn Store>, Journal) {
        let mem = MemStore::new();
        let store: Arc<dyn Store> = Arc::new(mem.clone());
        let config = JournalConfig {
            segment_bytes: 200,
            ..Default::default()
        };
        let j = Journal::start(store.clone(), config, 1, vec![]).unwrap();
        for i in 0..n {
            let lsn = j.append(format!("record number {i}").as_bytes()).unwrap();
            j.wait_durable(lsn).unwrap();
        }
        (mem, store, j)
    }

    #[test]
    fn a_sync_floor_makes_every_sync_last_at_least_that_long() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let floor = Duration::from_millis(15);
        let config = JournalConfig {
            sync_floor: Some(floor),
            ..Default::default()
        };
        let j = Journal::start(store, config, 1, vec![]).unwrap();
        let started = Instant::now();
        for i in 0..3 {
            let lsn = j.append(format!("record {i}").as_bytes()).unwrap();
            j.wait_durable(lsn).unwrap();
        }
        // Three records waited for one by one: three syncs, each ≥ floor,
        // and the time they took is counted.
        assert!(started.elapsed() >= 3 * floor);
        assert_eq!(j.stats().syncs, 3);
        let took = j.stats().sync_time;
        assert!(
            took >= 3 * floor,
            "{took:?} counted for 3 syncs of ≥ {floor:?}"
        );
        assert!(
            took <= started.elapsed(),
            "{took:?} counted in {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn closed_loop_committers_share_syncs() {
        // 8 threads, each appending and waiting 10 times, syncs of ≥ 20 ms.
        // Syncing as soon as anything is pending alternates batches of ~1
        // and ~7 (about 20 syncs); holding the batch until the last
        // batch's committers are back gives about 10.
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let config = JournalConfig {
            sync_floor: Some(Duration::from_millis(20)),
            ..Default::default()
        };
        let j = Journal::start(store, config, 1, vec![]).unwrap();
        let (threads, rounds) = (8, 10);
        std::thread::scope(|s| {
            for t in 0..threads {
                let j = &j;
                s.spawn(move || {
                    for r in 0..rounds {
                        let lsn = j.append(format!("{t}/{r}").as_bytes()).unwrap();
                        j.wait_durable(lsn).unwrap();
                    }
                });
            }
        });
        let syncs = j.stats().syncs;
        assert!(
            syncs <= 14,
            "{syncs} syncs for {rounds} rounds of {threads}"
        );
    }

    #[test]
    fn segments_rotate_and_trim() {
        let (_, store, j) = small_segments(50);
        assert!(j.stats().segments > 3);
        j.trim_below(40).unwrap();
        let (recs, _) = {
            let mut recs = Vec::new();
            let out = replay(&*store, 40, |lsn, r| {
                recs.push((lsn, r.to_vec()));
                Ok(())
            })
            .unwrap();
            (recs, out)
        };
        assert_eq!(recs.first().map(|r| r.0), Some(40));
        assert_eq!(recs.len(), 11);
    }

    #[test]
    fn decode_batch_never_panics_on_garbage() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = decode_batch(&bytes);
        }
    }

    #[test]
    fn oversized_open_batches_are_taken_in_whole_records() {
        let mut open = OpenBatch {
            first_lsn: 7,
            count: 0,
            payload: Vec::new(),
        };
        let record = vec![0xabu8; 15 << 20];
        for _ in 0..5 {
            open.payload
                .extend_from_slice(&(record.len() as u32).to_le_bytes());
            open.payload.extend_from_slice(&record);
            open.count += 1;
        }
        let first = take_batch(&mut open);
        assert_eq!((first.first_lsn, first.count), (7, 4));
        assert!(first.payload.len() <= MAX_BATCH_PAYLOAD);
        assert_eq!((open.first_lsn, open.count), (11, 1));
        let second = take_batch(&mut open);
        assert_eq!((second.first_lsn, second.count), (11, 1));
        assert_eq!(open.count, 0);
        // Each taken batch decodes whole.
        let mut buf = Vec::new();
        encode_batch(first.first_lsn, first.count, &first.payload, &mut buf);
        assert_eq!(decode_batch(&buf).unwrap().records.len(), 4);
    }

    #[test]
    fn records_over_the_limit_are_refused_before_anything_is_written() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let j = Journal::start(store, JournalConfig::default(), 1, vec![]).unwrap();
        let big = vec![0u8; MAX_RECORD_LEN + 1];
        assert_eq!(j.append(&big), Err(FsError::TooBig));
        assert_eq!(j.next_lsn(), 1);
    }

    /// Regression (found in review): a deleted oldest segment went
    /// unnoticed and recovery silently skipped the records in it.
    #[test]
    fn a_missing_segment_recovery_needs_is_corruption() {
        let (mem, store, j) = small_segments(40);
        drop(j);
        let first = mem.list("journal/").unwrap()[0].clone();
        mem.delete(&first).unwrap();
        assert!(matches!(
            replay(&*store, 1, |_, _| Ok(())),
            Err(JournalError::Corrupt { .. })
        ));
        // Records below `from_lsn` are not needed: the same gap is fine
        // when snapshots cover everything up to the first remaining one.
        let second_first = le_u64(
            &mem.read_log(&mem.list("journal/").unwrap()[0]).unwrap(),
            16,
        )
        .unwrap();
        assert!(replay(&*store, second_first, |_, _| Ok(())).is_ok());
    }
}
