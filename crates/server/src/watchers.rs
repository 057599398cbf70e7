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
//! - A watcher is not woken for changes of its own origin: they are
//!   filtered when published, not when forwarded.
//! - Change tracking in the engine costs an allocation per commit, so it
//!   is turned on only when the first watcher subscribes (and stays on).
//!   A watcher cannot have cached anything from before its stream opened
//!   that it would not also re-check: its client treats every new stream
//!   as `lost`.
//!
//! Who may watch: any client holding the cluster secret. Such a client can
//! already act as any user (requests carry their credentials), so the
//! names of changed entries tell it nothing it could not read. A client
//! key too (a mount on a client node); one confined to a subtree gets only
//! the changes in it (a filter, see [`crate::confine`]).

use parking_lot::Mutex;
use sextant_engine::{Changes, Engine};
use sextant_proto::pb;
use sextant_proto::soid_to_pb;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tonic::Status;

/// Changes a watcher may fall behind by before it is told it lost some.
pub const WATCH_QUEUE: usize = 65_536;

/// Bytes of changes per batch (well under the 1 MiB message limit).
const BATCH_BYTES: usize = 256 * 1024;

/// Batches queued for a slow stream before the forwarding task waits.
const STREAM_QUEUE: usize = 16;

/// One watcher as the publishers see it.
struct Subscriber {
    origin: u64,
    tx: mpsc::Sender<Arc<Changes>>,
    /// Set when a change could not be queued (the watcher is behind).
    lost: Arc<AtomicBool>,
}

pub struct Watchers {
    queue: usize,
    subscribers: Mutex<Vec<Subscriber>>,
    /// `subscribers.len()`, read without the lock on every mutation.
    count: AtomicUsize,
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
            queue: queue.max(1),
            subscribers: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
        }
    }

    /// Publishes one mutation's changes to every watcher of another origin
    /// (nothing is woken for its own changes; dropped when nobody watches).
    pub fn publish(&self, origin: u64, changes: Changes) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let event = Arc::new(changes);
        let mut subs = self.subscribers.lock();
        subs.retain(|s| {
            if s.origin != 0 && s.origin == origin {
                return true;
            }
            match s.tx.try_send(Arc::clone(&event)) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    s.lost.store(true, Ordering::Release);
                    metrics::counter!("sextant_watch_lost_total").increment(1);
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        self.count.store(subs.len(), Ordering::Release);
    }

    /// A stream of batches for the `Watch` RPC: every change from now on
    /// whose origin is not `origin` (0: all), until the client goes away
    /// or the server shuts down.
    ///
    /// With `filter`, each change is passed on as the filter makes it, or
    /// not at all (`None`): a client key confined to a subtree gets only
    /// what is in it ([`crate::confine::watch_filter`]).
    pub fn watch(
        &self,
        engine: &Engine,
        origin: u64,
        mut shutdown: watch::Receiver<bool>,
        filter: Option<crate::confine::Filter>,
    ) -> mpsc::Receiver<Result<pb::WatchBatch, Status>> {
        let (events, mut rx) = mpsc::channel(self.queue);
        let lost = Arc::new(AtomicBool::new(false));
        {
            let mut subs = self.subscribers.lock();
            subs.push(Subscriber {
                origin,
                tx: events,
                lost: Arc::clone(&lost),
            });
            self.count.store(subs.len(), Ordering::Release);
        }
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
                let Some(first) = first else { break };
                let mut batch = pb::WatchBatch::default();
                match &filter {
                    None => {
                        let mut bytes = 0;
                        let mut next = Some(first);
                        while let Some(event) = next {
                            let c = changed_to_pb(&event);
                            bytes += prost::Message::encoded_len(&c);
                            batch.changes.push(c);
                            if bytes >= BATCH_BYTES {
                                break;
                            }
                            next = rx.try_recv().ok();
                        }
                    }
                    Some(f) => {
                        // What is queued (up to a batch's bytes before
                        // filtering), judged together on a blocking thread
                        // (the filter may ask other servers).
                        let mut events = vec![first];
                        let mut bytes = approx_bytes(&events[0]);
                        while bytes < BATCH_BYTES {
                            let Ok(event) = rx.try_recv() else { break };
                            bytes += approx_bytes(&event);
                            events.push(event);
                        }
                        let f = Arc::clone(f);
                        let Ok(kept) = tokio::task::spawn_blocking(move || f(&events)).await else {
                            break;
                        };
                        batch.changes = kept.iter().map(changed_to_pb).collect();
                    }
                }
                // Read after draining: a change dropped for want of room
                // came after everything queued, so it is reported with (or
                // before) the batch that follows it.
                batch.lost = lost.swap(false, Ordering::AcqRel);
                if batch.changes.is_empty() && !batch.lost {
                    // Everything was filtered out.
                    continue;
                }
                if tx.send(Ok(batch)).await.is_err() {
                    break;
                }
            }
            // The publishers drop this watcher at their next send.
            rx.close();
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

/// About what `c` takes encoded (a SOID: 16 bytes and framing; an entry:
/// its parent and name).
fn approx_bytes(c: &Changes) -> usize {
    c.inodes.len() * 20 + c.entries.iter().map(|(_, n)| 22 + n.len()).sum::<usize>()
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
    use crate::test_engine::engine;
    use sextant_types::Soid;

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
        let mut rx = w.watch(&e, 7, stopped, None);
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
        let mut rx = w.watch(&e, 0, stopped, None);
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
        let mut rx = w.watch(&e, 0, stopped, None);
        stop.send(true).unwrap();
        assert!(rx.recv().await.is_none());
    }
}
