//! Requests forwarded for a local user (`service::Shared::handle_for`):
//! one `Session` stream per peer, opened once and shared by every
//! forward to that peer, many requests in flight on it — not a unary
//! `Call` (a new HTTP/2 stream, its headers, the secret checked, a task
//! on each side) per request.
//!
//! A forwarded request goes with an id unique on its stream (a Session's
//! `id` only matches a response to its request; the exactly-once identity
//! is `client_id` and `seq`, sent unchanged), and its answer comes back
//! with the caller's id. Everything else goes as this server admitted it:
//! the credentials are the caller's (the kernel's identity), the stream
//! is opened with the cluster secret as a `Call` was.
//!
//! Invariants:
//! - at most one stream in use per peer address: a stream that ended (the
//!   peer restarted, a transport error) fails every forward waiting on it
//!   (as a failed `Call` did: the caller gets the WRONG_SERVER) and the
//!   next forward opens a new one; a stream where a forward got no answer
//!   in time takes no new ones (it ends once those on it are done);
//! - a request is answered only by the response with its stream id;
//!   responses nobody waits for (log-less notices, answers after a
//!   timeout) are dropped;
//! - a request that might not fit the peer's message limit goes by a
//!   unary `Call`: a frame the peer refuses ends a Session stream, and
//!   with it every other user's forwards on it.

use crate::peers::Peers;
use parking_lot::Mutex;
use prost::Message;
use sextant_proto::pb;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

/// Requests queued for a stream before a forward waits to queue its own.
const QUEUE: usize = 1024;
/// Room left under the peer's message limit for what a Session frame
/// adds (the id, rewritten; the frame's header).
const MARGIN: usize = 64;

/// The streams to the other servers (one per address) and how many were
/// opened.
#[derive(Default)]
pub struct Forwarder {
    streams: Mutex<HashMap<String, Arc<Stream>>>,
    opened: AtomicU64,
}

/// One Session stream to a peer.
struct Stream {
    requests: mpsc::Sender<pb::Request>,
    waiting: Arc<Waiting>,
}

/// The forwards waiting on one stream, by stream id.
#[derive(Default)]
struct Waiting {
    /// `None` once the stream ended (nothing is registered then).
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<pb::Response>>>>,
    next_id: AtomicU64,
    /// A forward on it got no answer in time: no new ones.
    retired: std::sync::atomic::AtomicBool,
}

impl Waiting {
    fn live(&self) -> bool {
        !self.retired.load(Ordering::Relaxed) && self.pending.lock().is_some()
    }

    /// A new stream id with its waiter; `None` when the stream ended.
    fn register(&self) -> Option<(u64, oneshot::Receiver<pb::Response>)> {
        let mut pending = self.pending.lock();
        let map = pending.as_mut()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        map.insert(id, tx);
        Some((id, rx))
    }

    fn forget(&self, id: u64) {
        if let Some(map) = self.pending.lock().as_mut() {
            map.remove(&id);
        }
    }

    fn answer(&self, resp: pb::Response) {
        let waiter = self
            .pending
            .lock()
            .as_mut()
            .and_then(|m| m.remove(&resp.id));
        if let Some(w) = waiter {
            let _ = w.send(resp);
        }
    }

    /// The stream ended: every waiter fails (its sender dropped).
    fn end(&self) {
        self.pending.lock().take();
    }
}

impl Forwarder {
    /// Streams opened so far (tests, and `sextant_forward_streams_opened_total`).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Runs `req` on the server at `address` through its stream (opened
    /// when there is none in use), within `limit`; the answer carries
    /// `req`'s id.
    pub async fn call(
        &self,
        peers: &Peers,
        address: &str,
        mut req: pb::Request,
        limit: Duration,
    ) -> Result<pb::Response, String> {
        if req.encoded_len() + MARGIN > sextant_proto::MAX_MESSAGE_BYTES {
            return peers.call(address, req).await;
        }
        let id = req.id;
        // A stream that ended before the request was queued is replaced
        // once (nothing was sent on it).
        for _ in 0..2 {
            let stream = self.stream(peers, address)?;
            let Some((sid, answer)) = stream.waiting.register() else {
                continue;
            };
            req.id = sid;
            if let Err(mpsc::error::SendError(back)) = stream.requests.send(req).await {
                stream.waiting.forget(sid);
                req = back;
                req.id = id;
                continue;
            }
            let waiting = Arc::clone(&stream.waiting);
            drop(stream);
            return match tokio::time::timeout(limit, answer).await {
                Ok(Ok(mut resp)) => {
                    resp.id = id;
                    Ok(resp)
                }
                Ok(Err(_)) => Err(format!("{address}: the forwarding stream ended")),
                Err(_) => {
                    waiting.forget(sid);
                    waiting.retired.store(true, Ordering::Relaxed);
                    Err(format!("{address}: no answer within {limit:?}"))
                }
            };
        }
        Err(format!("{address}: the forwarding stream ended"))
    }

    /// The stream in use to `address`, opened if there is none.
    fn stream(&self, peers: &Peers, address: &str) -> Result<Arc<Stream>, String> {
        let mut streams = self.streams.lock();
        if let Some(s) = streams.get(address) {
            if s.waiting.live() {
                return Ok(Arc::clone(s));
            }
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let (mut grpc, request) = peers.client(address, ReceiverStream::new(rx))?;
        let waiting = Arc::new(Waiting {
            pending: Mutex::new(Some(HashMap::new())),
            ..Default::default()
        });
        let stream = Arc::new(Stream {
            requests: tx,
            waiting: Arc::clone(&waiting),
        });
        streams.insert(address.to_string(), Arc::clone(&stream));
        drop(streams);
        self.opened.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("sextant_forward_streams_opened_total").increment(1);
        let address = address.to_string();
        // Reads the answers until the stream ends (the request side ends
        // once no forward holds the stream: retired or replaced).
        tokio::spawn(async move {
            match grpc.session(request).await {
                Ok(answers) => {
                    let mut answers = answers.into_inner();
                    loop {
                        match answers.message().await {
                            Ok(Some(resp)) => waiting.answer(resp),
                            Ok(None) => break,
                            Err(e) => {
                                tracing::warn!(%address, error = %e.message(), "a forwarding stream ended");
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(%address, error = %e.message(), "cannot open a forwarding stream");
                }
            }
            waiting.end();
        });
        Ok(stream)
    }
}
