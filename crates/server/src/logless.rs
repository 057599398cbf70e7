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
}

impl LoglessServer {
    /// `None` for a journaling engine.
    pub fn new(engine: &Engine) -> Option<LoglessServer> {
        if !engine.is_logless() {
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
        })
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
            return Ok(answer(pb::RecoverOutcome::RecoverTooLate));
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

    /// Collects backups for `grace`, recovers, then lets requests through.
    /// Returns only on failure (the server must not serve then); pending
    /// forever after success.
    pub async fn run_recovery(&self, engine: Engine, grace: Duration) -> anyhow::Error {
        if self.crashed.is_none() {
            return std::future::pending().await;
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
        let result = tokio::task::spawn_blocking(move || engine.recover_logless(c.backups)).await;
        let report = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return anyhow::Error::new(e).context("log-less recovery failed"),
            Err(e) => return anyhow::anyhow!("log-less recovery panicked: {e}"),
        };
        let took = started.elapsed();
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
        std::future::pending().await
    }
}
