//! Sextant's metadata engine. No network code; no async runtime.

pub mod bloom;
pub mod kdtree;
pub mod soid;
