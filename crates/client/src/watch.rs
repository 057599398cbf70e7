//! Cache invalidation over the wire ([`Client::watch`]).
//!
//! A client that caches names or attributes (the FUSE mount) opens one
//! `Watch` stream and drops what it cached for each key the stream names.
//! Requests of every client with the same [`crate::Options::origin`] are
//! left out of the stream: their effects are known to the client already.
//!
//! The stream does not resume: when it breaks (server restart, network),
//! changes made meanwhile are unknown, so the caller must treat a new
//! stream like a batch with `lost` set and forget everything it cached.

use crate::{bad_reply, Client, Error, Result};
use sextant_proto::pb;
use sextant_proto::soid_from_pb;
use sextant_types::Soid;
use tonic::Code;

/// One batch of changes (see [`ChangeStream::next_batch`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ChangeBatch {
    /// Inodes whose attributes changed (or that are gone).
    pub inodes: Vec<Soid>,
    /// Directory entries `(parent, name)` that were added, replaced or
    /// removed.
    pub entries: Vec<(Soid, Box<[u8]>)>,
    /// Changes were dropped before these: forget everything cached.
    pub lost: bool,
}

/// The changes other clients make, batch by batch.
pub struct ChangeStream {
    inner: tonic::Streaming<pb::WatchBatch>,
}

impl ChangeStream {
    /// The next batch; an error when the stream broke (then open a new
    /// one and forget everything cached).
    pub async fn next_batch(&mut self) -> Result<ChangeBatch> {
        let msg = match self.inner.message().await {
            Ok(Some(m)) => m,
            Ok(None) => return Err(Error::Protocol("the server ended the watch".into())),
            Err(s) if s.code() == Code::Unauthenticated => return Err(Error::Auth),
            Err(s) => {
                return Err(Error::Protocol(format!(
                    "the watch failed: {}",
                    s.message()
                )))
            }
        };
        let mut batch = ChangeBatch {
            lost: msg.lost,
            ..Default::default()
        };
        for c in msg.changes {
            for s in &c.inodes {
                batch
                    .inodes
                    .push(soid_from_pb(Some(s)).map_err(|_| bad_reply("a bad SOID"))?);
            }
            for e in c.entries {
                let parent =
                    soid_from_pb(e.parent.as_ref()).map_err(|_| bad_reply("a bad SOID"))?;
                batch.entries.push((parent, e.name.into_boxed_slice()));
            }
        }
        Ok(batch)
    }
}

/// A fresh random origin for [`crate::Options::origin`] (never 0).
pub fn new_origin() -> u64 {
    crate::random_u64()
}

impl Client {
    /// Opens a stream of the changes made by clients of another origin
    /// than this one's ([`crate::Options::origin`]; 0 watches all).
    /// Fails at once when the server cannot be reached (no retries: the
    /// caller decides how to wait).
    pub async fn watch(&self) -> Result<ChangeStream> {
        let mut grpc = self.stream_client();
        let mut request = tonic::Request::new(pb::WatchRequest {
            origin: self.inner.options.origin,
        });
        self.inner.authorize(&mut request);
        match grpc.watch(request).await {
            Ok(r) => Ok(ChangeStream {
                inner: r.into_inner(),
            }),
            Err(s) if s.code() == Code::Unauthenticated => Err(Error::Auth),
            // A local user without the secret (the stream names every
            // change, whoever may see it).
            Err(s) if s.code() == Code::PermissionDenied => {
                Err(Error::Fs(sextant_types::FsError::Perm))
            }
            Err(s) if s.code() == Code::Unimplemented => Err(Error::Protocol(
                "the server does not stream changes (an older version)".into(),
            )),
            Err(s) => Err(Error::Unavailable {
                addr: self.inner.addr.clone(),
                reason: s.message().to_string(),
            }),
        }
    }
}
