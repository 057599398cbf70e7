//! Static K-D tree over row ids (Magellan §4.2). Pure logic, no I/O.
//!
//! STUB — being written. Interface contract:
//!
//! ```ignore
//! pub struct KdTree { .. }
//! impl KdTree {
//!     pub fn build(rows: Vec<u32>, dims: usize, coord: impl Fn(u32, usize) -> u64) -> KdTree;
//!     pub fn len(&self) -> usize;
//!     pub fn query(&self, lo: &[u64], hi: &[u64], coord: impl Fn(u32, usize) -> u64, visit: impl FnMut(u32));
//!     pub fn memory_bytes(&self) -> usize;
//! }
//! ```
