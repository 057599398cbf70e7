//! The frame door's wire (see `proto/sextant.proto`, "the frame door"):
//! length-prefixed protobuf messages on a Unix socket, one request and
//! its response at a time. Shared by the server (which reads requests)
//! and the client (which reads responses).
//!
//! A frame is the message's encoded length as 4 bytes little-endian, then
//! the encoding. Invariants:
//! - a frame longer than [`MAX_FRAME_BYTES`] is refused from its header
//!   alone ([`FrameError::TooLong`]): nothing beyond the header is read
//!   or allocated for it;
//! - no input panics a decoder; a reader never holds more than one frame
//!   plus what the last `read` brought past it;
//! - a reader interrupted by a timeout (`WouldBlock`, `TimedOut`) keeps
//!   what it had read, and the next call goes on from there.

use crate::MAX_MESSAGE_BYTES;
use prost::Message;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The version a [`crate::pb::FrameHello`] names.
pub const FRAME_VERSION: u32 = 1;
/// Bytes of a frame's length prefix.
pub const FRAME_HEADER: usize = 4;
/// Longest frame body either side accepts (the gRPC message limit).
pub const MAX_FRAME_BYTES: usize = MAX_MESSAGE_BYTES;
/// The frame door's file name extension, beside the server's socket.
pub const DOOR_EXTENSION: &str = "frames";

/// What reading or writing a frame can fail with.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("the connection closed")]
    Closed,
    /// The peer closed the connection inside a frame.
    #[error("the connection ended inside a frame")]
    Truncated,
    /// A frame's length is over the limit.
    #[error("a frame of {0} bytes is over the limit of {MAX_FRAME_BYTES}")]
    TooLong(usize),
    /// A frame's body is not the message expected.
    #[error("a frame does not decode: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// A read that timed out (the socket's receive timeout): nothing is
    /// lost, the next read goes on.
    pub fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e)
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// The frame door beside the server socket `socket`: the same name with
/// the extension [`DOOR_EXTENSION`] (`/run/sextant/sextant.sock` ->
/// `/run/sextant/sextant.frames`).
pub fn door_path(socket: &Path) -> PathBuf {
    socket.with_extension(DOOR_EXTENSION)
}

/// `m` as one frame in `out` (cleared first).
pub fn encode_frame<M: Message>(m: &M, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let len = m.encoded_len();
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLong(len));
    }
    out.clear();
    out.reserve(FRAME_HEADER + len);
    // (len <= MAX_FRAME_BYTES < 2^32.)
    out.extend_from_slice(&(len as u32).to_le_bytes());
    m.encode(out)
        .map_err(|e| FrameError::Io(io::Error::other(e)))?;
    Ok(())
}

/// The first frame of `buf`: its body and the bytes it takes, `None`
/// while `buf` holds less than a whole frame.
pub fn split_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, FrameError> {
    let Some(header) = buf.first_chunk::<FRAME_HEADER>() else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(*header) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLong(len));
    }
    match buf.get(FRAME_HEADER..FRAME_HEADER + len) {
        Some(body) => Ok(Some((body, FRAME_HEADER + len))),
        None => Ok(None),
    }
}

/// The first frame of `buf` decoded as `M`, and the bytes it takes.
pub fn decode_frame<M: Message + Default>(buf: &[u8]) -> Result<Option<(M, usize)>, FrameError> {
    match split_frame(buf)? {
        Some((body, used)) => Ok(Some((M::decode(body)?, used))),
        None => Ok(None),
    }
}

/// Reads frames from `R` through a buffer of its own.
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// What a reader's buffer starts at (grown to a frame's length as needed).
const READ_CHUNK: usize = 16 * 1024;

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader {
            inner,
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
        }
    }

    /// The reader it reads from.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The next frame, decoded as `M`. A timeout of the underlying reader
    /// comes back as [`FrameError::Io`] ([`FrameError::is_timeout`]) with
    /// what was read kept; any other error leaves the stream unusable.
    pub fn read_frame<M: Message + Default>(&mut self) -> Result<M, FrameError> {
        loop {
            let held = &self.buf[self.start..self.end];
            if let Some((m, used)) = decode_frame::<M>(held)? {
                self.start += used;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                return Ok(m);
            }
            // Room for the whole frame (its length is known, and within
            // the limit, once the header is in), or for a header.
            let want = match held.first_chunk::<FRAME_HEADER>() {
                Some(h) => FRAME_HEADER + u32::from_le_bytes(*h) as usize,
                None => FRAME_HEADER,
            };
            if self.buf.len() - self.start < want {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
                if self.buf.len() < want {
                    self.buf.resize(want.max(READ_CHUNK), 0);
                }
            } else if self.end == self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let n = match self.inner.read(&mut self.buf[self.end..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(FrameError::Io(e)),
            };
            if n == 0 {
                return Err(if self.start == self.end {
                    FrameError::Closed
                } else {
                    FrameError::Truncated
                });
            }
            self.end += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;
    use proptest::prelude::*;

    /// Hands out its bytes in the chunk sizes given (cycling), with a
    /// timeout (`WouldBlock`) before every chunk when `stalls`.
    struct Chunked {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        turn: usize,
        stalls: bool,
        stalled: bool,
    }

    impl Read for Chunked {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.stalls && !self.stalled {
                self.stalled = true;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.stalled = false;
            let size = self.sizes[self.turn % self.sizes.len()].max(1);
            self.turn += 1;
            let n = size.min(out.len()).min(self.data.len() - self.at);
            out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn request(id: u64, name: Vec<u8>) -> pb::Request {
        pb::Request {
            id,
            client_id: id.wrapping_mul(7),
            seq: id / 3,
            op: Some(pb::request::Op::Unlink(pb::UnlinkRequest {
                parent: Some(pb::Soid { hi: id, lo: 1 }),
                name,
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_length_over_the_limit_is_refused_from_the_header_alone() {
        let mut buf = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes().to_vec();
        assert!(matches!(split_frame(&buf), Err(FrameError::TooLong(_))));
        // An HTTP/2 client's preface read as a header: far over.
        assert!(matches!(
            split_frame(b"PRI * HTTP/2.0\r\n"),
            Err(FrameError::TooLong(_))
        ));
        buf.extend_from_slice(&[0; 64]);
        let mut r = FrameReader::new(&buf[..]);
        assert!(matches!(
            r.read_frame::<pb::Request>(),
            Err(FrameError::TooLong(_))
        ));
        // Exactly the limit is a frame (of garbage here).
        let ok = (MAX_FRAME_BYTES as u32).to_le_bytes();
        assert!(split_frame(&ok).unwrap().is_none());
    }

    #[test]
    fn the_end_of_the_stream_is_told_apart_from_a_cut_frame() {
        let mut r = FrameReader::new(&[][..]);
        assert!(matches!(
            r.read_frame::<pb::Request>(),
            Err(FrameError::Closed)
        ));
        let mut out = Vec::new();
        encode_frame(&request(1, b"f".to_vec()), &mut out).unwrap();
        let cut = &out[..out.len() - 1];
        let mut r = FrameReader::new(cut);
        assert!(matches!(
            r.read_frame::<pb::Request>(),
            Err(FrameError::Truncated)
        ));
    }

    #[test]
    fn the_door_sits_beside_the_socket() {
        assert_eq!(
            door_path(Path::new("/run/sextant/sextant.sock")),
            PathBuf::from("/run/sextant/sextant.frames")
        );
        assert_eq!(door_path(Path::new("/d/s")), PathBuf::from("/d/s.frames"));
    }

    proptest! {
        /// Garbage: no panic, whatever the chunking; a result is one of
        /// the errors or a message.
        #[test]
        fn garbage_never_panics(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            sizes in proptest::collection::vec(1usize..64, 1..6),
            stalls in any::<bool>(),
        ) {
            let _ = decode_frame::<pb::Request>(&data);
            let _ = decode_frame::<pb::Response>(&data);
            let _ = decode_frame::<pb::FrameHello>(&data);
            let mut r = FrameReader::new(Chunked {
                data: data.clone(), at: 0, sizes, turn: 0, stalls, stalled: false,
            });
            for _ in 0..1000 {
                match r.read_frame::<pb::Request>() {
                    Ok(_) => {}
                    Err(e) if e.is_timeout() => {}
                    Err(_) => break,
                }
            }
        }

        /// A header claiming any length: refused over the limit, else
        /// waited for; never more than the limit held.
        #[test]
        fn any_claimed_length_is_bounded(len in any::<u32>(), tail in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut data = len.to_le_bytes().to_vec();
            data.extend_from_slice(&tail);
            match split_frame(&data) {
                Err(FrameError::TooLong(n)) => prop_assert!(n > MAX_FRAME_BYTES),
                Ok(None) => prop_assert!((len as usize) > tail.len()),
                Ok(Some((body, used))) => {
                    prop_assert_eq!(body.len(), len as usize);
                    prop_assert_eq!(used, FRAME_HEADER + len as usize);
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
            let mut r = FrameReader::new(&data[..]);
            let _ = r.read_frame::<pb::Request>();
            prop_assert!(r.buf.len() <= FRAME_HEADER + MAX_FRAME_BYTES);
        }

        /// Frames written back to back read back the same, however the
        /// bytes arrive (and with timeouts between the pieces).
        #[test]
        fn frames_round_trip_in_any_chunking(
            names in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8),
            sizes in proptest::collection::vec(1usize..5000, 1..6),
            stalls in any::<bool>(),
        ) {
            let sent: Vec<pb::Request> = names
                .into_iter()
                .enumerate()
                .map(|(i, n)| request(i as u64 + 1, n))
                .collect();
            let mut data = Vec::new();
            let mut one = Vec::new();
            for m in &sent {
                encode_frame(m, &mut one).unwrap();
                data.extend_from_slice(&one);
            }
            let mut r = FrameReader::new(Chunked { data, at: 0, sizes, turn: 0, stalls, stalled: false });
            let mut got = Vec::new();
            while got.len() < sent.len() {
                match r.read_frame::<pb::Request>() {
                    Ok(m) => got.push(m),
                    Err(e) if e.is_timeout() => {}
                    Err(e) => prop_assert!(false, "{e}"),
                }
            }
            prop_assert_eq!(got, sent);
            let end = loop {
                match r.read_frame::<pb::Request>() {
                    Err(e) if e.is_timeout() => {}
                    other => break other,
                }
            };
            prop_assert!(matches!(end, Err(FrameError::Closed)));
        }
    }
}
