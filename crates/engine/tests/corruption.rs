//! Corruption on disk stops start-up with a message naming the file (and,
//! for the journal, the offset); it never silently drops acknowledged data.
//! A torn journal tail — a batch that was never acknowledged — is discarded.

use sextant_engine::store::{MemStore, Store};
use sextant_engine::{Engine, EngineConfig, EngineError};
use sextant_types::{Credentials, FsError, Soid};
use std::sync::Arc;

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        ..Default::default()
    }
}

/// A store with a checkpoint (snapshots + manifest) and journal records after it.
fn populated() -> MemStore {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    let root = Credentials::root();
    for i in 0..20 {
        e.create(
            &root,
            Soid::ROOT,
            format!("before{i}").as_bytes(),
            0o644,
            true,
        )
        .unwrap()
        .wait(&e)
        .unwrap();
    }
    e.sync().unwrap();
    for i in 0..20 {
        e.create(
            &root,
            Soid::ROOT,
            format!("after{i}").as_bytes(),
            0o644,
            true,
        )
        .unwrap()
        .wait(&e)
        .unwrap();
    }
    drop(e);
    store.crash(None);
    store
}

fn open_err(store: &MemStore) -> String {
    match Engine::open(Arc::new(store.clone()), config()) {
        Ok(_) => panic!("open must fail"),
        Err(e) => e.to_string(),
    }
}

fn only(store: &MemStore, prefix: &str) -> String {
    let names = store.list(prefix).unwrap();
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

#[test]
fn intact_store_recovers_everything() {
    let store = populated();
    let e = Engine::open(Arc::new(store), config()).unwrap();
    assert_eq!(e.statfs().inodes, 41);
}

#[test]
fn flipped_byte_in_snapshot_names_the_file() {
    let store = populated();
    let snap = only(&store, "tables/");
    store.with_bytes(&snap, |b| {
        let mid = b.len() / 2;
        b[mid] ^= 0x40
    });
    let err = open_err(&store);
    assert!(err.contains(&snap) && err.contains("checksum"), "{err}");
}

#[test]
fn truncated_snapshot_names_the_file() {
    let store = populated();
    let snap = only(&store, "tables/");
    store.with_bytes(&snap, |b| b.truncate(b.len() - 10));
    let err = open_err(&store);
    assert!(err.contains(&snap), "{err}");
}

#[test]
fn missing_snapshot_names_the_file() {
    let store = populated();
    let snap = only(&store, "tables/");
    store.delete(&snap).unwrap();
    let err = open_err(&store);
    assert!(err.contains(&snap) && err.contains("missing"), "{err}");
}

#[test]
fn corrupt_or_missing_manifest_stops_start_up() {
    let store = populated();
    store.with_bytes("MANIFEST", |b| b[12] ^= 1);
    assert!(open_err(&store).contains("MANIFEST"));
    let store = populated();
    store.delete("MANIFEST").unwrap();
    let err = open_err(&store);
    assert!(err.contains("MANIFEST") && err.contains("missing"), "{err}");
}

#[test]
fn flipped_byte_inside_the_journal_names_file_and_offset() {
    let store = populated();
    let seg = store.list("journal/").unwrap().pop().unwrap();
    // Corrupt the first batch after the segment header; valid batches follow.
    store.with_bytes(&seg, |b| b[32 + 30] ^= 0xff);
    let err = Engine::open(Arc::new(store.clone()), config())
        .err()
        .expect("open must fail");
    assert!(matches!(err, EngineError::Journal(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&seg) && msg.contains("offset 32"), "{msg}");
}

#[test]
fn torn_tail_is_discarded_and_everything_acknowledged_survives() {
    let store = populated();
    let seg = store.list("journal/").unwrap().pop().unwrap();
    // A crash in the middle of writing the next batch leaves a partial one.
    store.with_bytes(&seg, |b| {
        b.extend_from_slice(&[0x31, 0x42, 0x4a, 0x53, 200, 0, 0])
    });
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    assert_eq!(e.statfs().inodes, 41);
    let root = Credentials::root();
    e.lookup(&root, Soid::ROOT, b"after19").unwrap();
}

#[test]
fn truncating_the_journal_mid_batch_keeps_a_prefix() {
    let store = populated();
    let seg = store.list("journal/").unwrap().pop().unwrap();
    store.with_bytes(&seg, |b| {
        let len = b.len();
        b.truncate(len - 5)
    });
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    // The last batch is torn away; everything before it is there.
    let n = e.statfs().inodes;
    assert!((21..41).contains(&n), "{n}");
    let root = Credentials::root();
    for i in 0..(n - 21) {
        e.lookup(&root, Soid::ROOT, format!("after{i}").as_bytes())
            .unwrap();
    }
}

#[test]
fn write_failure_stops_the_engine_without_acknowledging() {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    let root = Credentials::root();
    e.mkdir(&root, Soid::ROOT, b"ok", 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
    store.fail_after(0);
    let r = e
        .mkdir(&root, Soid::ROOT, b"lost", 0o755)
        .and_then(|c| c.wait(&e));
    assert!(
        r.is_err(),
        "a mutation whose journal write failed must not be acknowledged"
    );
    // The engine refuses further work instead of guessing.
    assert!(e.getattr(Soid::ROOT).is_err());
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store), config()).unwrap();
    e.lookup(&root, Soid::ROOT, b"ok").unwrap();
}

/// A fresh engine on a memory store, with directory `/name` made.
fn store_with_dir(name: &[u8]) -> (MemStore, Engine) {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    e.mkdir(&Credentials::root(), Soid::ROOT, name, 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
    (store, e)
}

/// A full disk stops the engine like any failed write, but says so:
/// everything after it fails with `ENOSPC` (what programs and users know
/// what to do about), not `EIO`, whether the journal write or a write-back
/// hit it; and a restart (space freed) has everything acknowledged.
#[test]
fn a_full_disk_stops_the_engine_with_no_space() {
    let root = Credentials::root();
    for (errno, want) in [
        (28, FsError::NoSpace),
        (122, FsError::NoSpace),
        (5, FsError::Io),
    ] {
        // The journal write fails.
        let (store, e) = store_with_dir(b"ok");
        store.fail_after_with_errno(0, errno);
        let r = e
            .mkdir(&root, Soid::ROOT, b"lost", 0o755)
            .and_then(|c| c.wait(&e));
        assert_eq!(r.err(), Some(want), "errno {errno}: the failed mutation");
        assert_eq!(
            e.getattr(Soid::ROOT).err(),
            Some(want),
            "errno {errno}: later reads"
        );
        assert_eq!(
            e.create(&root, Soid::ROOT, b"later", 0o644, true).err(),
            Some(want),
            "errno {errno}: later mutations"
        );
        // A write-back after it fails too, and must not hide the cause.
        assert!(e.sync().is_err());
        assert_eq!(
            e.getattr(Soid::ROOT).err(),
            Some(want),
            "errno {errno}: after sync"
        );
        drop(e);
        store.crash(None);
        let e = Engine::open(Arc::new(store), config()).unwrap();
        e.lookup(&root, Soid::ROOT, b"ok").unwrap();
        assert_eq!(
            e.lookup(&root, Soid::ROOT, b"lost").err(),
            Some(FsError::NotFound)
        );

        // A write-back fails (the journal write before it went through).
        let (store, e) = store_with_dir(b"kept");
        store.fail_after_with_errno(0, errno);
        assert!(e.sync().is_err());
        assert_eq!(
            e.getattr(Soid::ROOT).err(),
            Some(want),
            "errno {errno}: after write-back"
        );
        drop(e);
        store.crash(None);
        let e = Engine::open(Arc::new(store), config()).unwrap();
        e.lookup(&root, Soid::ROOT, b"kept").unwrap();
    }
}

/// Regression (found by the crash test): a kill between the first snapshot
/// and the first manifest left a store that never opened again. Nothing
/// can have been acknowledged then, so open starts over.
#[test]
fn crash_during_initialization_is_recoverable() {
    let full = MemStore::new();
    drop(Engine::open(Arc::new(full.clone()), config()).unwrap());
    let snap = only(&full, "tables/");
    let bytes = full.get_blob(&snap).unwrap().unwrap();
    let partial = MemStore::new();
    partial.put_blob(&snap, &bytes).unwrap();
    let e = Engine::open(Arc::new(partial), config()).unwrap();
    e.mkdir(&Credentials::root(), Soid::ROOT, b"d", 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
}

/// Regression (found by the crash test): after a merge, a checkpoint could
/// write a snapshot under the very name the manifest on disk still used,
/// with a different range, so a crash before the new manifest left a store
/// whose table could not load. Interrupt a checkpoint at every write, after
/// splits and merges, and require a clean recovery each time.
#[test]
fn checkpoint_interrupted_at_every_write_recovers() {
    let root = Credentials::root();
    let cfg = EngineConfig {
        table_inode_limit: 16,
        table_dir_limit: 16,
        ..config()
    };
    for k in 0..80 {
        let store = MemStore::new();
        let e = Engine::open(Arc::new(store.clone()), cfg.clone()).unwrap();
        let mut dirs = Vec::new();
        for d in 0..12 {
            let dir = e
                .mkdir(&root, Soid::ROOT, format!("d{d}").as_bytes(), 0o755)
                .unwrap()
                .wait(&e)
                .unwrap();
            for f in 0..5 {
                e.create(&root, dir.soid, format!("f{f}").as_bytes(), 0o644, true)
                    .unwrap()
                    .wait(&e)
                    .unwrap();
            }
            dirs.push(dir.soid);
        }
        e.sync().unwrap();
        // Highest directories first, so a merged table's lower half is the
        // more recently written one (that is what reused a snapshot name).
        for dir in dirs[1..].iter().rev() {
            for f in 0..5 {
                e.unlink(&root, *dir, format!("f{f}").as_bytes())
                    .unwrap()
                    .wait(&e)
                    .unwrap();
            }
        }
        // Write everything back, then merge two now small neighbours: the
        // merged table has no snapshot in its new shape yet.
        e.sync().unwrap();
        e.flush_tick().unwrap();
        assert!(e.stats().merges > 0, "the scenario needs a merge");
        e.create(&root, Soid::ROOT, b"last", 0o644, true)
            .unwrap()
            .wait(&e)
            .unwrap();
        store.fail_after(k);
        let interrupted = e.sync().is_err();
        drop(e);
        store.crash(None);
        let e = Engine::open(Arc::new(store.clone()), cfg.clone())
            .unwrap_or_else(|err| panic!("k={k}: {err}"));
        e.lookup(&root, Soid::ROOT, b"last").unwrap();
        e.for_each_table(|_| {})
            .unwrap_or_else(|err| panic!("k={k}: a table does not load: {err}"));
        for f in 0..5 {
            e.lookup(&root, dirs[0], format!("f{f}").as_bytes())
                .unwrap_or_else(|err| panic!("k={k} f{f}: {err}"));
        }
        assert_eq!(e.statfs().inodes, 1 + 12 + 5 + 1, "k={k}");
        if !interrupted {
            break;
        }
    }
}
