//! Child-closest SOID assignment (Ursa Minor §3.3). Pure logic, no I/O.
//!
//! STUB — being written. Interface contract:
//!
//! ```ignore
//! pub struct SoidLayout { .. }               // bit widths; Default = documented defaults
//! impl SoidLayout {
//!     pub fn validate(&self) -> Result<(), LayoutError>;
//!     pub fn region(&self, s: Soid) -> Region;           // Primary | TooDeep | TooWide | CatchAll
//!     pub fn subtree_range(&self, dir: Soid) -> Option<SoidRange>;
//! }
//! pub trait SoidSpace { type Error; fn max_used(&mut self, r: SoidRange) -> Result<Option<Soid>, Self::Error>;
//!                       fn min_free(&mut self, r: SoidRange) -> Result<Option<Soid>, Self::Error>; }
//! pub struct GlobalHighWater { .. }           // serde; journaled by the engine
//! pub struct DirExtents { pub ranges: Vec<SoidRange> }  // serde; kept in the directory inode
//! pub enum ChildKind { Directory, File }
//! pub struct Allocation { pub soid: Soid, pub region: Region, pub new_extent: Option<SoidRange>, pub high_water_changed: bool }
//! pub fn allocate<S: SoidSpace>(layout, parent: Soid, parent_extents: &DirExtents, kind: ChildKind,
//!                               space: &mut S, hw: &mut GlobalHighWater) -> Result<Allocation, AllocError<S::Error>>;
//! ```
