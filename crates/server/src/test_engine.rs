//! What the server's unit tests share (compiled only for tests): an
//! engine in memory, flushed only when a test asks. No invariants beyond
//! the engine's own.

use sextant_engine::store::MemStore;
use sextant_engine::{Engine, EngineConfig};
use std::sync::Arc;

/// An engine on a fresh [`MemStore`], with no background flush.
pub(crate) fn engine() -> Engine {
    let config = EngineConfig {
        flush_interval: None,
        ..Default::default()
    };
    Engine::open(Arc::new(MemStore::new()), config).unwrap()
}
