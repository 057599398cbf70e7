//! The server's part of log-less durability (`--durability logless`; the
//! rules and formats are in `sextant_engine::logless`).
//!
//! - **Replies carry backups.** A mutation's reply carries its own redo
//!   entry and every entry of the engine's Active Request List (the last K
//!   operations) not yet sent to that client; [`LoglessServer::attach`]
//!   remembers per client id the highest LSN sent. The own entry is put in
//!   the reply inside the exactly-once cell, so a retried request gets it
//!   again.
//! - **Watermark.** Every reply, and a notice on each Session stream when
//!   it moves, carries `written_back`: the LSN up to which everything is in
//!   table snapshots, below which clients drop their backups.
//! - **Recovery.** When the engine reports a crashed run, the server
//!   listens at once but answers nothing except `Recover` for the grace
//!   period, collecting every client's backups of that run; then the
//!   engine replays them ([`sextant_engine::Engine::recover_logless`]),
//!   the outcome is logged (loudly if an acknowledged operation may be
//!   lost), and requests are let through. Backups of any other run are
//!   refused as too late (that run's recovery is over).
//!
//! - **Acknowledged mark.** Every reply notes the highest LSN it carries
//!   ([`sextant_engine::Engine::note_acked`]) and [`LoglessServer::run_recovery`]
//!   persists that mark every [`ACKED_PERSIST_INTERVAL`] while it grows
//!   (one small synced file write, off the requests' path). A recovery
//!   whose handed-back entries stop short of the crashed run's mark says so
//!   as loudly as a gap in the middle: error log, the metric
//!   `sextant_logless_unreturned_lsns`, and `sextant status`. Operations
//!   acknowledged in the last interval before the crash are not covered.
//!
//! Invariant: no request is executed while `ready` is false.

use parking_lot::Mutex;
use sextant_engine::logless::Redo;
use sextant_engine::{Engine, Lsn};
use sextant_proto::pb;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::watch;
use tonic::Status;

/// Clients whose last sent LSN is remembered; past it the map starts over
/// (a forgotten client is sent the whole ARL again: harmless).
const MAX_CLIENTS: usize = 65_536;
/// Backups one recovery accepts in total (bytes), so clients cannot make
/// the server hold unbounded memory.
const MAX_RECOVERY_BYTES: usize = 4 << 30;
/// How often the acknowledged mark is persisted while it grows.
pub const ACKED_PERSIST_INTERVAL: Duration = Duration::from_millis(100);

pub fn backup_to_pb(r: &Redo) -> pb::RedoBackup {
    pb::RedoBackup {
        lsn: r.lsn,
        entry: r.bytes.to_vec(),
    }
}

struct Collecting {
    backups: Vec<Vec<u8>>,
    bytes: usize,
    /// `Recover` messages taken (a client sends one per 512 KiB).
    uploads: usize,
}

pub struct LoglessServer {
    last_sent: Mutex<HashMap<u64, Lsn>>,
    /// `Some` while a recovery collects backups.
    collecting: Mutex<Option<Collecting>>,
    /// The crashed run being recovered.
    crashed: Option<u64>,
    ready: watch::Sender<bool>,
    /// Acknowledged LSNs the last recovery found nobody returned (0: none).
    unreturned: std::sync::atomic::AtomicU64,
}

impl LoglessServer {
    /// `None` for a journaling engine.
    pub fn new(engine: &Engine) -> Option<LoglessServer> {
        if !engine.is_logless() && !engine.is_member_logless() {
            return None;
        }
        let crashed = engine.crashed_incarnation();
        let (ready, _) = watch::channel(crashed.is_none());
        Some(LoglessServer {
            last_sent: Mutex::new(HashMap::new()),
            collecting: Mutex::new(crashed.map(|_| Collecting {
                backups: Vec::new(),
                bytes: 0,
                uploads: 0,
            })),
            crashed,
            ready,
            unreturned: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// How many acknowledged operations the last recovery found no client
    /// returned at the tail (0: none, or no recovery).
    pub fn unreturned(&self) -> u64 {
        self.unreturned.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until recovery (if any) is over. Once it is, this costs one
    /// read of the flag (it is on every request's path).
    pub async fn wait_ready(&self) {
        if *self.ready.borrow() {
            return;
        }
        let mut rx = self.ready.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Fills in the log-less fields of a reply to `client_id` (0: an
    /// anonymous client, which gets only what the reply already holds).
    pub fn attach(&self, engine: &Engine, client_id: u64, resp: &mut pb::Response) {
        resp.incarnation = engine.incarnation();
        resp.written_back = engine.written_back_lsn();
        if client_id == 0 {
            if let Some(newest) = resp.backups.iter().map(|b| b.lsn).max() {
                engine.note_acked(newest);
            }
            return;
        }
        let mut sent = self.last_sent.lock();
        let seen = sent.get(&client_id).copied().unwrap_or(0);
        for r in engine.arl_since(seen) {
            if !resp.backups.iter().any(|b| b.lsn == r.lsn) {
                resp.backups.push(backup_to_pb(&r));
            }
        }
        let newest = resp.backups.iter().map(|b| b.lsn).max().unwrap_or(0);
        engine.note_acked(newest);
        if newest > seen {
            if sent.len() >= MAX_CLIENTS && !sent.contains_key(&client_id) {
                sent.clear();
            }
            sent.insert(client_id, newest);
        }
    }

    /// A notice for a Session stream: the watermark alone. `None` during
    /// recovery (a client that saw the new incarnation would drop the
    /// backups it is about to hand back).
    pub fn notice(&self, engine: &Engine) -> Option<pb::Response> {
        if !*self.ready.borrow() {
            return None;
        }
        Some(pb::Response {
            incarnation: engine.incarnation(),
            written_back: engine.written_back_lsn(),
            ..Default::default()
        })
    }

    /// The `Recover` RPC.
    pub fn recover(
        &self,
        engine: &Engine,
        req: pb::RecoverRequest,
    ) -> Result<pb::RecoverReply, Status> {
        let incarnation = engine.incarnation();
        let answer = |o: pb::RecoverOutcome| pb::RecoverReply {
            outcome: o as i32,
            incarnation,
        };
        if req.incarnation == incarnation {
            return Ok(answer(pb::RecoverOutcome::RecoverNotNeeded));
        }
        let mut collecting = self.collecting.lock();
        let Some(c) = collecting
            .as_mut()
            .filter(|_| Some(req.incarnation) == self.crashed)
        else {
            drop(collecting);
            return self.keep_for_another_member(engine, req).map(answer);
        };
        let bytes: usize = req.backups.iter().map(|b| b.entry.len()).sum();
        if c.bytes + bytes > MAX_RECOVERY_BYTES {
            return Err(Status::resource_exhausted(
                "the recovery holds as many backups as it accepts",
            ));
        }
        c.bytes += bytes;
        c.uploads += 1;
        c.backups.extend(req.backups.into_iter().map(|b| b.entry));
        Ok(answer(pb::RecoverOutcome::RecoverAccepted))
    }

    /// On a cluster: backups of another member's run (dead, or
    /// restarting) are kept in the shared store for whoever completes its
    /// journal (`sextant_engine::member_logless`); the client may drop them
    /// once kept.
    fn keep_for_another_member(
        &self,
        engine: &Engine,
        req: pb::RecoverRequest,
    ) -> Result<pb::RecoverOutcome, Status> {
        use sextant_engine::member_logless::Handed;
        if req.backups.iter().map(|b| b.entry.len()).sum::<usize>() > MAX_RECOVERY_BYTES {
            return Err(Status::resource_exhausted(
                "too many backups in one message",
            ));
        }
        let entries = req.backups.into_iter().map(|b| b.entry).collect();
        match engine.keep_backups_for(req.incarnation, req.client_id, entries) {
            Ok(Handed::Kept) => {
                tracing::info!(
                    incarnation = req.incarnation,
                    client = req.client_id,
                    "kept a client's log-less backups of another member's run for its recovery"
                );
                Ok(pb::RecoverOutcome::RecoverAccepted)
            }
            Ok(Handed::TooLate | Handed::Unknown) => Ok(pb::RecoverOutcome::RecoverTooLate),
            Err(e) => Err(Status::unavailable(format!(
                "cannot keep the backups in the shared store: {e}"
            ))),
        }
    }

    /// Collects backups for `grace`, recovers, then lets requests through.
    /// Returns only on failure (the server must not serve then); pending
    /// forever after success.
    pub async fn run_recovery(&self, engine: Engine, grace: Duration) -> anyhow::Error {
        if self.crashed.is_none() {
            return persist_acked_forever(engine).await;
        }
        tracing::warn!(
            grace = ?grace,
            "the last log-less run did not shut down cleanly: collecting the clients' backups"
        );
        tokio::time::sleep(grace).await;
        let Some(c) = self.collecting.lock().take() else {
            return std::future::pending().await;
        };
        let started = std::time::Instant::now();
        let count = c.backups.len();
        let recovering = engine.clone();
        let result =
            tokio::task::spawn_blocking(move || recovering.recover_logless(c.backups)).await;
        let report = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return anyhow::Error::new(e).context("log-less recovery failed"),
            Err(e) => return anyhow::anyhow!("log-less recovery panicked: {e}"),
        };
        let took = started.elapsed();
        let unreturned = report.unreturned.map_or(0, |(a, b)| b - a + 1);
        self.unreturned
            .store(unreturned, std::sync::atomic::Ordering::Relaxed);
        metrics::gauge!("sextant_logless_unreturned_lsns").set(unreturned as f64);
        if let Some((first, last)) = report.unreturned {
            tracing::error!(
                acknowledged_through = report.acked_mark,
                returned_through = first - 1,
                unreturned,
                "log-less recovery: GAP — the crashed run had acknowledged operations \
                 {first}..={last} and no client handed them back (their clients are gone \
                 and kept no backup on disk); they are LOST"
            );
        }
        if report.maybe_lost() {
            tracing::error!(
                backups = count,
                uploads = c.uploads,
                applied = report.applied,
                already_written_back = report.durable,
                missing = ?report.missing,
                discarded = ?report.discarded,
                partially_written_back = ?report.partial,
                forged = report.forged,
                malformed = report.malformed,
                took = ?took,
                "log-less recovery: operations are MISSING (every client that held them is \
                 gone, or their reply was never sent); later operations that built on them \
                 were discarded, leaving an older but consistent state"
            );
        } else {
            tracing::info!(
                backups = count,
                uploads = c.uploads,
                applied = report.applied,
                already_written_back = report.durable,
                forged = report.forged,
                malformed = report.malformed,
                took = ?took,
                "log-less recovery complete: no gap among the backups handed back (an operation \
                 held only by clients that did not reconnect would not show)"
            );
        }
        self.ready.send_replace(true);
        persist_acked_forever(engine).await
    }
}

/// Persists the acknowledged mark every [`ACKED_PERSIST_INTERVAL`] while
/// it grows; returns only on a failed write (the server must stop then,
/// as for a failed write-back).
async fn persist_acked_forever(engine: Engine) -> anyhow::Error {
    let mut tick = tokio::time::interval(ACKED_PERSIST_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let e = engine.clone();
        match tokio::task::spawn_blocking(move || e.persist_acked()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return anyhow::Error::new(e).context("persisting the log-less acknowledged mark")
            }
            Err(e) => return anyhow::anyhow!("persisting the acknowledged mark panicked: {e}"),
        }
    }
}
