//! Sextant's coordination on etcd: the I/O shell around the pure protocol
//! of `sextant-cluster`.
//!
//! Built so far: [`membership`] — a server's membership lease in etcd,
//! kept alive with the R1 timer (`sextant_cluster::lease`), over an etcd
//! client with HTTP/2 keep-alive and a timeout on every call, whose
//! keep-alive stream is re-created after an etcd restart. The delegation
//! map, manifests, the coordinator's election and the table manager come
//! next, on the same shell (docs/ARCHITECTURE.md, "The cluster protocol").

pub mod membership;

pub use membership::{Membership, MembershipConfig};

/// What coordination on etcd can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// etcd did not answer, or answered with an error.
    #[error("etcd at {endpoints}: {source}")]
    Etcd {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// etcd did not answer within the request timeout.
    #[error("etcd at {endpoints}: no answer within {timeout:?}")]
    Timeout {
        endpoints: String,
        timeout: std::time::Duration,
    },
    /// Another live server is a member under the same name.
    #[error("a server named {name:?} is already a member (its lease is alive)")]
    NameTaken { name: String },
}
