//! Cache watchers: the `Watch` RPC's fan-out of what mutations changed.
//!
//! A FUSE mount lets the kernel cache names and attributes. So that a
//! change made by another client does not stay invisible there until a
//! cache timeout, every durable mutation's changed keys
//! ([`sextant_engine::Changes`]) are published here, and each `Watch`
//! stream forwards them, minus those of its own origin, in batches.
//!
//! Invariants:
//! - A change is published after the mutation is durable and before its
//!   reply is sent, so a watcher that re-reads on a change sees the new
//!   state.
//! - Nothing is dropped silently: a watcher that falls more than
//!   [`WATCH_QUEUE`] changes behind gets a batch with `lost` set, and must
//!   forget everything it cached.
//! - Change tracking in the engine costs an allocation per commit, so it
//!   is turned on only when the first watcher subscribes (and stays on).
//!   A watcher cannot have cached anything from before its stream opened
//!   that it would not also re-check: its client treats every new stream
//!   as `lost`.
//!
//! Who may watch: any client holding the cluster secret. Such a client can
//! already act as any user (requests carry their credentials), so the
//! names of changed entries tell it nothing it could not read.

use sextant_engine::{Changes, Engine};
use sextant_proto::pb;
use sextant_proto::soid_to_pb;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, watch};
use tonic::Status;

/// Changes a watcher may fall behind by before it is told it lost some.
pub const WATCH_QUEUE: usize = 65_536;

/// Bytes of changes per batch (well under the 1 MiB message limit).
const BATCH_BYTES: usize = 256 * 1024;

/// Batches queued for a slow stream before the forwarding task waits.
const STREAM_QUEUE: usize = 16;

struct Event {
    origin: u64,
    changes: Changes,
}

pub struct Watchers {
    tx: broadcast::Sender<Arc<Event>>,
}

impl Default for Watchers {
    fn default() -> Self {
        Watchers::with_queue(WATCH_QUEUE)
    }
}

impl Watchers {
    /// Watchers that may fall `queue` changes behind.
    pub fn with_queue(queue: usize) -> Watchers {
        Watchers {
            tx: broadcast::channel(queue.max(1)).0,
        }
    }

    /// Publishes one mutation's changes (dropped when nobody watches).
    pub fn publish(&self, origin: u64, changes: Changes) {
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(Arc::new(Event { origin, changes }));
        }
    }

    /// A stream of batches for the `Watch` RPC: every change from now on
    /// whose origin is not `origin` (0: all), until the client goes away
    /// or the server shuts down.
    pub fn watch(
        &self,
        engine: &Engine,
        origin: u64,
        mut shutdown: watch::Receiver<bool>,
    ) -> mpsc::Receiver<Result<pb::WatchBatch, Status>> {
        let mut rx = self.tx.subscribe();
        engine.track_changes(true);
        let (tx, out) = mpsc::channel(STREAM_QUEUE);
        metrics::gauge!("sextant_watchers").increment(1.0);
        tokio::spawn(async move {
            let _gone = Gone;
            loop {
                let first = tokio::select! {
                    r = rx.recv() => r,
                    _ = shutdown.wait_for(|stop| *stop) => break,
                    _ = tx.closed() => break,
                };
                let mut batch = pb::WatchBatch::default();
                let mut bytes = 0;
                let mut next = first;
                loop {
                    match next {
                        Ok(event) => {
                            if origin == 0 || event.origin != origin {
                                let c = changed_to_pb(&event.changes);
                                bytes += prost::Message::encoded_len(&c);
                                batch.changes.push(c);
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            metrics::counter!("sextant_watch_lost_total").increment(n);
                            batch.lost = true;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                    if bytes >= BATCH_BYTES {
                        break;
                    }
                    next = match rx.try_recv() {
                        Ok(e) => Ok(e),
                        Err(broadcast::error::TryRecvError::Lagged(n)) => {
                            Err(broadcast::error::RecvError::Lagged(n))
                        }
                        Err(_) => break,
                    };
                }
                if (batch.lost || !batch.changes.is_empty()) && tx.send(Ok(batch)).await.is_err() {
                    break;
                }
            }
        });
        out
    }
}

/// Counts a watcher out when its forwarding task ends, however it ends.
struct Gone;

impl Drop for Gone {
    fn drop(&mut self) {
        metrics::gauge!("sextant_watchers").decrement(1.0);
    }
}

fn changed_to_pb(c: &Changes) -> pb::Changed {
    pb::Changed {
        inodes: c.inodes.iter().map(|s| soid_to_pb(*s)).collect(),
        entries: c
            .entries
            .iter()
            .map(|(parent, name)| pb::EntryKey {
                parent: Some(soid_to_pb(*parent)),
                name: name.to_vec(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_engine::store::MemStore;
    use sextant_engine::EngineConfig;
    use sextant_types::Soid;

    fn engine() -> Engine {
        let config = EngineConfig {
            flush_interval: None,
            ..Default::default()
        };
        Engine::open(Arc::new(MemStore::new()), config).unwrap()
    }

    fn change(n: u128) -> Changes {
        Changes {
            inodes: vec![Soid::from_u128(n)],
            entries: vec![(Soid::ROOT, format!("f{n}").into_bytes().into())],
        }
    }

    #[tokio::test]
    async fn a_watcher_gets_other_origins_changes_in_order_and_turns_tracking_on() {
        let (e, w) = (engine(), Watchers::default());
        w.publish(7, change(1)); // nobody watches yet: dropped
        let (_stop, stopped) = watch::channel(false);
        let mut rx = w.watch(&e, 7, stopped);
        let mkdir = e.mkdir(&sextant_types::Credentials::root(), Soid::ROOT, b"d", 0o755);
        assert!(mkdir.unwrap().changes.is_some(), "tracking is on");
        w.publish(7, change(2)); // its own origin: left out
        w.publish(8, change(3));
        w.publish(0, change(4));
        let mut got = Vec::new();
        while got.len() < 2 {
            let batch = rx.recv().await.unwrap().unwrap();
            assert!(!batch.lost);
            got.extend(batch.changes);
        }
        assert_eq!(
            got,
            vec![changed_to_pb(&change(3)), changed_to_pb(&change(4))]
        );
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_is_told_it_lost_changes() {
        let (e, w) = (engine(), Watchers::with_queue(4));
        let (_stop, stopped) = watch::channel(false);
        // Subscribed, but the forwarding task cannot run before all are
        // published (one thread, no await in between).
        let mut rx = w.watch(&e, 0, stopped);
        for n in 0..10 {
            w.publish(1, change(n));
        }
        let batch = rx.recv().await.unwrap().unwrap();
        assert!(batch.lost, "overflow is reported, never silent");
        assert!(batch.changes.len() <= 4);
    }

    #[tokio::test]
    async fn shutdown_ends_the_stream() {
        let (e, w) = (engine(), Watchers::default());
        let (stop, stopped) = watch::channel(false);
        let mut rx = w.watch(&e, 0, stopped);
        stop.send(true).unwrap();
        assert!(rx.recv().await.is_none());
    }
}
