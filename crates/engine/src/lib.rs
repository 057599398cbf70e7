//! Sextant's metadata engine. No network code; no async runtime.
//!
//! Module map (dependencies point down the list):
//! - [`search`]: `find`-like queries over the tables' indexes, and the
//!   engine's search API (`Engine::search` and the other `search_*`
//!   methods, an `impl Engine` block in [`search`]).
//! - [`engine`]: the [`Engine`] handle — table map, recovery, checkpoints,
//!   cache budget; the API the server, the FUSE mount and benchmarks call.
//! - [`namespace`]: POSIX operations written once over a transaction.
//! - [`txn`]: transactions — ordered table locking, write sets, commit.
//! - `durability`: log-less durability's engine side (redo key, stamps,
//!   ARL, run state); `error`: the engine's error type ([`EngineError`]).
//! - [`table`] (with its search index, [`table::index`], also at
//!   [`index`]), [`inode`]: what a table holds and how it is searched;
//!   `dir_cache`: directory paths remembered across searches (held by the
//!   engine, filled and read by searches).
//! - [`soid`], [`kdtree`], [`bloom`], [`perm`], `hash`: pure algorithms.
//! - [`journal`], [`record`], [`manifest`]: the on-disk formats;
//!   [`requests`]: which client requests were committed (exactly-once
//!   across a restart).
//! - [`logless`]: log-less durability (redo entries, stamps, the ARL,
//!   the recovery rule).
//! - [`store`]: the I/O seam (local directory, or memory for tests).
//! - [`member`]: cluster member mode's vocabulary (the table catalogue
//!   seam, table manifests); the engine side is `engine::member`.
//!
//! Where new code goes: pure logic in its own module with tests beside it;
//! anything that touches the disk goes through [`store::Store`].

pub mod bloom;
pub mod changes;
pub mod confine;
mod dir_cache;
mod durability;
pub mod engine;
mod error;
pub mod group_commit;
mod hash;
pub mod inode;
pub mod journal;
pub mod kdtree;
pub mod logless;
pub mod manifest;
pub mod member;
pub mod member_logless;
pub mod name;
pub mod namespace;
pub mod perm;
pub mod postings;
pub mod quarantine;
pub mod record;
pub mod requests;
pub mod search;
pub mod setattr;
pub mod soid;
pub mod stop;
pub mod store;
pub mod table;
pub mod txn;

// The table's search index lives under `table` (it reads the table's
// rows); kept at its former path too.
pub use table::index;

pub use changes::Changes;
pub use durability::LoglessConfig;
pub use engine::{
    Committed, Engine, EngineConfig, EngineError, EngineStats, LoglessRecovery, StatFs,
    TableCounters,
};
pub use journal::{JournalConfig, Lsn, SyncMode};
pub use member::{
    CatalogChange, CatalogError, JournalPos, ManifestDecodeError, MemCatalog, MemberConfig,
    PrefixStore, TableCatalog, TableManifest,
};
pub use namespace::{DirEntry, PlusPage, RenameFlags, XattrFlags};
