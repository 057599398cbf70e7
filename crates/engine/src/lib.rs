//! Sextant's metadata engine. No network code; no async runtime.

pub mod bloom;
pub mod index;
pub mod inode;
pub mod journal;
pub mod kdtree;
pub mod perm;
pub mod record;
pub mod soid;
pub mod store;
pub mod table;
