//! Bloom filters and the per-table attribute filter set (Magellan §4.3). Pure logic, no I/O.
//!
//! STUB — being written. Interface contract:
//!
//! ```ignore
//! pub struct BloomFilter { .. }   // insert_hash / may_contain_hash / encode / decode
//! pub struct FilterInput<'a> { pub name: &'a [u8], pub uid: u32, pub gid: u32, pub ftype: FileType,
//!                              pub size: u64, pub atime: Nanos, pub mtime: Nanos, pub ctime: Nanos,
//!                              pub xattr_keys: &'a [&'a [u8]] }
//! pub struct AttrFilters { .. }
//! impl AttrFilters {
//!     pub fn build<'a>(items: impl Iterator<Item = FilterInput<'a>>) -> AttrFilters;
//!     pub fn may_match_name(&self, name: &[u8]) -> bool; // exact name
//!     pub fn may_match_extension(&self, ext: &[u8]) -> bool;
//!     pub fn may_contain_substring(&self, needle: &[u8]) -> bool; // trigram filter
//!     pub fn may_match_uid(&self, uid: u32) -> bool; pub fn may_match_gid(&self, gid: u32) -> bool;
//!     pub fn may_match_type(&self, t: FileType) -> bool;
//!     pub fn may_match_xattr_key(&self, key: &[u8]) -> bool;
//!     pub fn may_match_size(&self, lo: u64, hi: u64) -> bool;            // inclusive
//!     pub fn may_match_time(&self, which: TimeAttr, lo: Nanos, hi: Nanos) -> bool; // inclusive
//!     pub fn encode(&self, out: &mut Vec<u8>); pub fn decode(b: &[u8]) -> Result<AttrFilters, BloomDecodeError>;
//!     pub fn memory_bytes(&self) -> usize;
//! }
//! ```
