//! What the engine's member-mode tests share: small tables (split after
//! three directories or twelve inodes), members on one in-memory store,
//! and root's mutations made durable in one call.

#![allow(dead_code)] // each test file uses a different part

use sextant_engine::store::{MemStore, Store};
use sextant_engine::{Engine, EngineConfig, MemCatalog, MemberConfig, TableCatalog};
use sextant_types::{Attr, Credentials, Soid};
use std::sync::Arc;

/// No background flush; tables split early.
pub fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        table_dir_limit: 3,
        table_inode_limit: 12,
        ..Default::default()
    }
}

/// An empty shared store and an empty catalogue.
pub fn store_and_catalog() -> (MemStore, Arc<MemCatalog>) {
    (MemStore::new(), Arc::new(MemCatalog::new()))
}

/// A member named `name` on `store`, catalogued in `catalog`.
pub fn member(store: &MemStore, catalog: &Arc<MemCatalog>, name: &str) -> Engine {
    member_of(store, Arc::clone(catalog) as _, name)
}

/// A member named `name` on `store` with the catalogue `catalog`.
pub fn member_of(store: &MemStore, catalog: Arc<dyn TableCatalog>, name: &str) -> Engine {
    let store = Arc::new(store.clone()) as Arc<dyn Store>;
    let name = name.into();
    Engine::open_member(store, config(), MemberConfig { name, catalog }).unwrap()
}

/// `mkdir PARENT/NAME` (mode 0755) by root on `e`, durable: its attributes.
pub fn mkdir(e: &Engine, parent: Soid, name: &[u8]) -> Attr {
    e.mkdir(&Credentials::root(), parent, name, 0o755)
        .unwrap()
        .wait(e)
        .unwrap()
}

/// An exclusive create of the file `PARENT/NAME` (mode 0644) by root on
/// `e`, durable: its attributes.
pub fn create(e: &Engine, parent: Soid, name: &[u8]) -> Attr {
    e.create(&Credentials::root(), parent, name, 0o644, true)
        .unwrap()
        .wait(e)
        .unwrap()
}
