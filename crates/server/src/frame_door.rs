//! The frame door: a second Unix socket beside the server's
//! (`sextant.sock` -> `sextant.frames`, [`sextant_proto::frames`]) where a
//! client on this machine sends one request at a time as a length-prefixed
//! protobuf frame and reads its response the same way — no HTTP/2, no
//! gRPC, no task hand-offs. For the mount's FUSE threads (one connection
//! each): a request through the Session stream costs the server ~60 µs of
//! CPU in the RPC around ~29 µs of handling (docs/BENCHMARKS.md, issue 23).
//!
//! Each connection is served by a thread of its own: it reads a request,
//! runs it with `Handle::block_on` on that thread ([`Shared::frame_request`]:
//! the session loop's handling — a point read or a mutation that waits for
//! nothing is answered without leaving the thread; whatever waits, a
//! journal sync, another server, parks the thread until the runtime wakes
//! it), writes the response, and reads the next.
//!
//! Invariants (those of the socket's gRPC door, issue 22):
//! - the caller is who the socket's interceptor would say it is, by the
//!   same code ([`crate::auth::frame_caller`]): the kernel's `SO_PEERCRED`
//!   of the connection, trusted with the right secret or as root, refused
//!   with a wrong secret, else [`crate::auth::Caller::Kernel`] — whose
//!   requests run as the kernel's identity whatever they claim;
//! - every request is admitted (`Caller::admit_op`) and handled as a
//!   Session stream's ([`Shared::frame_request`]);
//! - a frame over the 1 MiB limit, or one that does not decode, ends its
//!   connection (nothing of it runs); no input panics the reader
//!   (`sextant_proto::frames`' property tests);
//! - a request read is run to its end and answered, even when the server
//!   is stopping; no request is read once it is stopping (every
//!   connection's reading side is shut down then);
//! - a log-less server refuses the door (its replies' backups and notices
//!   travel on the Session stream), and so does a server at
//!   [`MAX_CONNECTIONS`]: the client uses the Session stream then.
//!
//! `SEXTANT_FRAME_DOOR=off` in the server's environment: no door.

use crate::auth::GroupDb;
use crate::service::Shared;
use parking_lot::Mutex;
use sextant_proto::frames::{encode_frame, FrameError, FrameReader, FRAME_VERSION};
use sextant_proto::pb;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use tokio::net::UnixListener;
use tokio::sync::watch;

/// Connections served at once; past it the door refuses (the client
/// takes the Session stream).
pub const MAX_CONNECTIONS: usize = 512;

/// The stack of a connection's thread.
const THREAD_STACK: usize = 2 << 20;

/// Whether the environment turns the door off (`SEXTANT_FRAME_DOOR=off`).
pub fn turned_off() -> bool {
    std::env::var("SEXTANT_FRAME_DOOR").is_ok_and(|v| v == "off")
}

/// What every connection of a door shares.
pub(crate) struct Door {
    pub shared: Arc<Shared>,
    pub secret: Arc<Vec<u8>>,
    pub groups: Arc<GroupDb>,
    pub runtime: tokio::runtime::Handle,
}

/// Serves the door on `listener` until `stop` turns true; then shuts the
/// reading side of every connection (their threads end after the request
/// they run, if any, is answered).
pub(crate) async fn serve(
    listener: UnixListener,
    door: Arc<Door>,
    mut stop: watch::Receiver<bool>,
) {
    let open: Arc<Mutex<HashMap<u64, UnixStream>>> = Arc::default();
    let mut next = 0u64;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        // The kernel's identity of the peer (`SO_PEERCRED`, as the gRPC
        // door's connect info takes it), then the stream for the thread.
        let taken = accepted.and_then(|(s, _)| {
            let cred = s.peer_cred();
            Ok((cred, s.into_std()?))
        });
        let (cred, stream) = match taken {
            Ok(t) => t,
            Err(e) => {
                // (Out of descriptors: do not spin.)
                tracing::warn!(error = %e, "the frame door cannot take a connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let Ok(cred) = cred else {
            tracing::warn!("no peer credentials on the frame door; connection closed");
            continue;
        };
        let (uid, gid) = (cred.uid(), cred.gid());
        next += 1;
        let id = next;
        let busy = {
            let mut open = open.lock();
            let busy = open.len() >= MAX_CONNECTIONS;
            if !busy {
                if let Ok(c) = stream.try_clone() {
                    open.insert(id, c);
                }
            }
            busy
        };
        let (door, open2) = (Arc::clone(&door), Arc::clone(&open));
        let spawned = std::thread::Builder::new()
            .name("sextant-frames".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                if busy {
                    refuse(stream, "the frame door is at its connection limit");
                } else {
                    serve_connection(stream, uid, gid, &door);
                    open2.lock().remove(&id);
                }
            });
        if let Err(e) = spawned {
            open.lock().remove(&id);
            tracing::warn!(error = %e, "cannot start a frame door thread");
        }
    }
    for (_, s) in open.lock().drain() {
        let _ = s.shutdown(std::net::Shutdown::Read);
    }
}

/// Reads the hello of `stream` and answers it refused with `why`.
fn refuse(stream: UnixStream, why: &str) {
    let Ok(read) = stream.try_clone() else { return };
    let _ = read.set_read_timeout(Some(std::time::Duration::from_secs(1)));
    let _ = FrameReader::new(read).read_frame::<pb::FrameHello>();
    let _ = send(
        &stream,
        &pb::FrameWelcome {
            refused: why.to_string(),
            server: String::new(),
        },
        &mut Vec::new(),
    );
}

fn send<M: prost::Message>(
    mut to: &UnixStream,
    m: &M,
    buf: &mut Vec<u8>,
) -> Result<(), FrameError> {
    encode_frame(m, buf)?;
    to.write_all(buf)?;
    Ok(())
}

/// Serves one connection from the peer `uid`, `gid` (its `SO_PEERCRED`)
/// until it closes, breaks, sends a bad frame, or the server stops.
pub(crate) fn serve_connection(stream: UnixStream, uid: u32, gid: u32, door: &Door) {
    let Ok(read) = stream.try_clone() else { return };
    let mut reader = FrameReader::new(read);
    let mut buf = Vec::new();
    let Ok(hello) = reader.read_frame::<pb::FrameHello>() else {
        return;
    };
    let shared = &door.shared;
    let admitted = if hello.version != FRAME_VERSION {
        Err(format!(
            "frame door version {} is not served (this server: {FRAME_VERSION})",
            hello.version
        ))
    } else if shared.logless.is_some() {
        Err("a log-less server serves the Session stream only".to_string())
    } else {
        crate::auth::frame_caller(uid, gid, &hello.secret, &door.secret, &door.groups)
            .map_err(|s| s.message().to_string())
    };
    let caller = match admitted {
        Ok(c) => c,
        Err(refused) => {
            let _ = send(
                &stream,
                &pb::FrameWelcome {
                    refused,
                    server: String::new(),
                },
                &mut buf,
            );
            return;
        }
    };
    let welcome = pb::FrameWelcome {
        refused: String::new(),
        server: shared.issuer.clone(),
    };
    if send(&stream, &welcome, &mut buf).is_err() {
        return;
    }
    loop {
        let req = match reader.read_frame::<pb::Request>() {
            Ok(r) => r,
            Err(FrameError::Closed) => return,
            Err(e) => {
                tracing::debug!(error = %e, uid, "a frame door connection ended");
                return;
            }
        };
        if *shared.shutdown.borrow() {
            return;
        }
        let resp = door
            .runtime
            .block_on(Arc::clone(shared).frame_request(req, &caller));
        if let Err(e) = send(&stream, &resp, &mut buf) {
            tracing::debug!(error = %e, uid, "a frame door reply was not sent");
            return;
        }
    }
}
