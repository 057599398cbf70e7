//! Sextant's coordination on etcd: the I/O shell around the pure protocol
//! of `sextant-cluster` (docs/ARCHITECTURE.md, "The cluster protocol").
//!
//! A server uses it through one trait, [`Coordination`], implemented by
//! [`EtcdCluster`] (a cluster on etcd) and [`InProcess`] (the
//! single-server default: no other service), so the server is written
//! once. The server implements [`TableHost`] over its engine.
//!
//! Modules:
//! - [`etcd`]: the connection — HTTP/2 keep-alive and a timeout on every
//!   call (a paused etcd otherwise hangs them).
//! - [`keys`]: the key layout (below) and value encodings, pure.
//! - [`membership`]: `member/<name>` on a lease kept alive with the R1
//!   timer; the keep-alive stream re-created after an etcd restart; a
//!   lease lost → a new generation.
//! - [`map`]: the delegation map — a cache of every key of the cluster
//!   (prefix get + watch from the next revision, re-created from the last
//!   revision seen; a compacted revision → read again); routes a SOID to
//!   its table, owner and address; notifies subscribers.
//! - [`ownership`]: one server's tables — ADD/DROP through [`TableHost`],
//!   manifest commits fenced by the owner revision, `may_ack`.
//! - [`coordinate`]: the election and the coordinator's loop around
//!   `sextant_cluster::coordinator::decide`, and the bootstrap.
//! - [`admin`]: a requested move, a drain.
//! - [`catalog`]: new table numbers, and a server's split or merge of its
//!   own tables as one fenced transaction.
//! - [`node`]: the [`Coordination`] trait and its two implementations.
//!
//! # Key layout (under the cluster's prefix, default `/sextant/`)
//!
//! | key                 | value                                  | lease |
//! |---------------------|----------------------------------------|-------|
//! | `member/<name>`     | the server's client address            | its membership lease |
//! | `coordinator`       | the coordinator's name                 | the coordinator's membership lease |
//! | `table/<id>`        | the table's SOID range `first-last` (hex) | — |
//! | `owner/<id>`        | `<epoch> <name>`; its `mod_revision` is R2's fence | — |
//! | `manifest/<id>`     | the engine's manifest (opaque bytes)   | — |
//! | `move/<id>`         | the server a move goes to              | — |
//! | `drain/<name>`      | empty: the server gives its tables away | — |
//! | `meta/bootstrapped` | `1` once the root table exists         | — |
//! | `meta/next_table`   | the next table number to hand out      | — |
//!
//! `<id>` is the table's number in 6 digits. Ranges are kept apart from
//! owners so that a split or merge does not move the owner key's revision
//! (the fence) and a move does not touch the range.
//!
//! # The rules
//! - **R1** ([`Ownership::may_ack`]): acknowledge for a table only while
//!   the membership lease timer — from the *send* time of the last
//!   acknowledged keep-alive, plus the TTL, minus a margin — is valid, in
//!   the membership generation the table was loaded under, and the table
//!   serves (loaded, not dropping). Checked after the operation is
//!   durable, right before the reply. etcd's TTL is never used as a time
//!   bound.
//! - **R2** ([`Ownership::commit_manifest`], the loads and handovers):
//!   every write of `manifest/<id>` is a transaction comparing
//!   `owner/<id>`'s `mod_revision` with the one the table was granted
//!   under (a load also compares the manifest's revision as read).
//! - **R3** ([`coordinate`]): a table changes owner only by its owner's
//!   acknowledged DROP (the handover transaction: final manifest + new
//!   owner at epoch + 1 + the move deleted) or, when the owner's
//!   `member/<name>` is gone (its lease expired or was revoked), by the
//!   coordinator — comparing in the same transaction that the member key
//!   is still absent.
//! - The coordinator keeps no state: it decides from the map alone, and
//!   each of its writes also compares that `coordinator` still lives on
//!   its lease.

pub mod admin;
pub mod catalog;
pub mod coordinate;
pub mod etcd;
pub mod keys;
pub mod map;
pub mod membership;
pub mod node;
pub mod ownership;

pub use etcd::{normalize_prefix, EtcdConfig, EtcdTls, EtcdUser, DEFAULT_PREFIX};
/// The etcd client this crate speaks through (for callers that run their own
/// calls next to the shell's, e.g. a catalogue).
pub use etcd_client;
/// The etcd client type the admin calls take.
pub use etcd_client::Client as EtcdClient;
pub use map::{ClusterState, DelegationMap, Route};
pub use membership::{Membership, MembershipConfig};
pub use node::{ClusterConfig, Coordination, EtcdCluster, InProcess};
pub use ownership::{CommitError, Grant, HostError, NotHeld, Ownership, TableHost};

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
    /// A counter ran out.
    #[error("no more {what}")]
    Exhausted { what: String },
    /// A compare-and-swap kept losing to other writers.
    #[error("{what} kept changing under this server; try again")]
    Contended { what: String },
    /// Not a server name (1–64 of `[A-Za-z0-9._-]`).
    #[error("{name:?} is not a server name (1-64 of A-Z a-z 0-9 . _ -)")]
    BadName { name: String },
    /// etcd refused this client's credentials, or wants some and got none.
    /// Not worth retrying: the settings must change.
    #[error("etcd at {endpoints} refused {who}: {reason}")]
    EtcdAuth {
        endpoints: String,
        /// `the user "NAME"`, `a client without a user name`, or a
        /// certificate (TLS).
        who: String,
        reason: String,
    },
    /// Not a key prefix a cluster can live under (see
    /// [`etcd::normalize_prefix`]).
    #[error("etcd key prefix {prefix:?}: {reason}")]
    BadPrefix {
        prefix: String,
        reason: &'static str,
    },
    /// Another cluster lives under a prefix that encloses this one's, or
    /// inside it (its bootstrap mark is there): each would read and watch
    /// the other's keys.
    #[error(
        "etcd key prefix {prefix:?}: another cluster was set up under {other:?}, \
         {relation}; clusters sharing an etcd need prefixes neither of which \
         starts with the other, e.g. /a/ and /b/"
    )]
    NestedPrefix {
        prefix: String,
        other: String,
        /// `which encloses it` or `inside it`.
        relation: &'static str,
    },
    /// A credential or certificate file cannot be read or used.
    #[error("etcd {what} {path}: {reason}")]
    EtcdFile {
        what: &'static str,
        path: String,
        reason: String,
    },
}

impl CoordError {
    /// Will trying again not help (the settings are wrong, not etcd down)?
    pub fn is_settings(&self) -> bool {
        matches!(
            self,
            CoordError::EtcdAuth { .. }
                | CoordError::EtcdFile { .. }
                | CoordError::BadPrefix { .. }
                | CoordError::NestedPrefix { .. }
        )
    }
}
