//! Sextant's wire protocol.
//!
//! The schema is `proto/sextant.proto` (published for clients in other
//! languages); this crate holds the code generated from it ([`pb`]) and the
//! conversions between the wire messages and `sextant_types`.

#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("sextant.v1");
}

mod convert;
pub mod frames;
pub mod keyauth;
pub mod route;
pub mod search;
pub use convert::*;

/// gRPC metadata key that carries the cluster secret.
pub const SECRET_METADATA: &str = "x-sextant-secret";
/// The default listen port of `sextant serve`.
pub const DEFAULT_PORT: u16 = 7411;
/// The default listen address of `sextant serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7411";
/// Largest encoded message either side accepts.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Longest path `resolve` accepts (PATH_MAX).
pub const PATH_MAX: usize = 4096;
/// Most supplementary groups a request may carry (NGROUPS_MAX).
pub const GROUPS_MAX: usize = 65536;
/// Most entries one readdir returns.
pub const READDIR_MAX: u32 = 1024;
/// Exactly-once replies remembered per client that does not send
/// `acked_below` (an older client; see the protocol header). Clients that
/// acknowledge are remembered until they acknowledge, up to a hard cap.
pub const DEDUP_WINDOW: usize = 1024;
