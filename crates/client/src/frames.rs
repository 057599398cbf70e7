//! A session over the server's frame door (`sextant_proto::frames`): one
//! request written as a frame, its response read as one, on the calling
//! thread — for a client whose calls run on a calling-thread runtime of
//! its own (the mount's lanes, [`crate::Client::sibling_with_frame_door`]),
//! where a round trip through HTTP/2 and tokio's tasks cost several
//! wake-ups per request.
//!
//! [`crate::Client::call_at`] uses it as it uses a Session stream: the same
//! numbering, exactly-once retries, WRONG_SERVER handling and back-off; a
//! broken door is a broken session (retried on a new one, the door again
//! if it is there, else the Session stream).
//!
//! Invariants:
//! - the calling thread blocks in `read` only for [`READ_SLICE`] at a
//!   time, then yields to its runtime: a future waiting for a reply can be
//!   given up (an interrupted read in the mount) within a slice;
//! - a round trip given up before its reply leaves that reply to be read
//!   and dropped by the next round trip (replies are matched by id), so
//!   one connection is never out of step;
//! - a request is written whole or the connection is counted broken.

use sextant_proto::frames::{encode_frame, FrameError, FrameReader, FRAME_VERSION};
use sextant_proto::pb;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Longest a read blocks the thread before the future yields.
pub(crate) const READ_SLICE: Duration = Duration::from_millis(10);

/// One frame door connection.
pub(crate) struct FrameLane {
    stream: UnixStream,
    reader: FrameReader<UnixStream>,
    buf: Vec<u8>,
}

/// Why a round trip has no reply.
pub(crate) enum Failed {
    /// No reply within the time given; the connection stays usable.
    TimedOut,
    /// The connection broke (the request may have run).
    Broken(String),
}

impl FrameLane {
    /// Connects to the door at `path` with `secret` (empty: none, served
    /// as the kernel says this process is). `expect` (a TCP address this
    /// client was given): the server must name itself so, else this is
    /// not the server meant. `Err` says why the door is not used.
    pub(crate) async fn open(
        path: &Path,
        secret: &str,
        expect: Option<&str>,
        timeout: Duration,
    ) -> Result<FrameLane, String> {
        let stream = UnixStream::connect(path).map_err(|e| format!("{}: {e}", path.display()))?;
        stream
            .set_read_timeout(Some(READ_SLICE))
            .map_err(|e| e.to_string())?;
        let reader = FrameReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        let mut lane = FrameLane {
            stream,
            reader,
            buf: Vec::new(),
        };
        let hello = pb::FrameHello {
            version: FRAME_VERSION,
            secret: secret.to_string(),
        };
        lane.write(&hello).map_err(|e| e.to_string())?;
        let welcome: pb::FrameWelcome = match lane.read(Instant::now() + timeout).await {
            Ok(w) => w,
            Err(Failed::TimedOut) => return Err(format!("no welcome within {timeout:?}")),
            Err(Failed::Broken(e)) => return Err(e),
        };
        if !welcome.refused.is_empty() {
            return Err(welcome.refused);
        }
        if let Some(addr) = expect {
            let bare = |a: &str| {
                a.trim_start_matches("http://")
                    .trim_start_matches("https://")
                    .to_string()
            };
            if bare(addr) != bare(&welcome.server) {
                return Err(format!(
                    "the door is of the server at {}, not {addr}",
                    welcome.server
                ));
            }
        }
        Ok(lane)
    }

    fn write<M: prost::Message>(&mut self, m: &M) -> Result<(), FrameError> {
        encode_frame(m, &mut self.buf)?;
        self.stream.write_all(&self.buf)?;
        Ok(())
    }

    /// The next frame, by `deadline`.
    async fn read<M: prost::Message + Default>(&mut self, deadline: Instant) -> Result<M, Failed> {
        loop {
            match self.reader.read_frame::<M>() {
                Ok(m) => return Ok(m),
                Err(e) if e.is_timeout() => {
                    if Instant::now() >= deadline {
                        return Err(Failed::TimedOut);
                    }
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(Failed::Broken(e.to_string())),
            }
        }
    }

    /// Sends `req` and waits (up to `timeout`) for its response; replies
    /// to requests given up before are dropped.
    pub(crate) async fn round_trip(
        &mut self,
        req: &pb::Request,
        timeout: Duration,
    ) -> Result<pb::Response, Failed> {
        let deadline = Instant::now() + timeout;
        self.write(req).map_err(|e| Failed::Broken(e.to_string()))?;
        loop {
            let resp: pb::Response = self.read(deadline).await?;
            if resp.id == req.id {
                return Ok(resp);
            }
        }
    }
}
