//! A server of a cluster on etcd: the engine in member mode, the shell of
//! `sextant-coordinator` (membership, delegation map, this server's
//! tables, the coordinator's loop) and the service, put together.
//!
//! - [`placement`]: which SOIDs this server serves (the delegation map and
//!   the shell's grants) and the route map clients get.

pub mod placement;
