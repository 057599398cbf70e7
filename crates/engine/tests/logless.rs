//! Log-less durability through the engine's API: what recovery does when
//! backups are complete, missing, forged, or the mode is switched. (The
//! kill -9 test under load is `crash.rs`'s `crash_recovery_logless`; the
//! recovery rule's model check is in `src/logless.rs`.)

use sextant_engine::logless::Redo;
use sextant_engine::{Engine, EngineConfig, EngineError, LoglessConfig};
use sextant_types::{Credentials, FsError, SetAttr, Soid};
use std::path::Path;

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        logless: Some(LoglessConfig::default()),
        ..Default::default()
    }
}

fn open(dir: &Path) -> Engine {
    Engine::open_dir(dir, config()).unwrap()
}

/// A directory /a, then r1: create /a/f1, r2: create /a/f2, r3: truncate
/// /a/f1 to 7 bytes. The engine is dropped without `close` (a crash).
fn history(dir: &Path) -> (Soid, [Redo; 3]) {
    let e = open(dir);
    let root = Credentials::root();
    let a = e.mkdir(&root, Soid::ROOT, b"a", 0o755).unwrap().value.soid;
    // Everything so far written back: the history below lives only in redo.
    e.sync().unwrap();
    let c1 = e.create(&root, a, b"f1", 0o644, true).unwrap();
    let c2 = e.create(&root, a, b"f2", 0o644, true).unwrap();
    let set = SetAttr {
        size: Some(7),
        ..Default::default()
    };
    let c3 = e.setattr(&root, c1.value.soid, &set).unwrap();
    assert!(e.written_back_lsn() < c1.lsn);
    let redo = [c1.redo.unwrap(), c2.redo.unwrap(), c3.redo.unwrap()];
    drop(e);
    (a, redo)
}

/// Sorted names in `dir` (readdir's order is the hash order).
fn names(e: &Engine, dir: Soid) -> Vec<String> {
    let mut v: Vec<String> = e
        .readdir(&Credentials::root(), dir, 0, 100)
        .unwrap()
        .iter()
        .map(|d| String::from_utf8_lossy(&d.name).into_owned())
        .collect();
    v.sort();
    v
}

fn bytes(r: &Redo) -> Vec<u8> {
    r.bytes.to_vec()
}

#[test]
fn complete_backups_restore_everything_in_any_order_with_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let (a, [r1, r2, r3]) = history(dir.path());
    let e = open(dir.path());
    assert!(e.crashed_incarnation().is_some());
    let rep = e
        .recover_logless([&r3, &r1, &r2, &r1].map(bytes).to_vec())
        .unwrap();
    assert_eq!((rep.received, rep.distinct, rep.applied), (4, 3, 3));
    assert!(!rep.maybe_lost(), "{rep:?}");
    assert_eq!(names(&e, a), ["f1", "f2"]);
    let f1 = e.lookup(&Credentials::root(), a, b"f1").unwrap();
    assert_eq!(f1.size, 7);
    assert_eq!(e.crashed_incarnation(), None);
    // New operations get LSNs above everything the clients held.
    let c = e.mkdir(&Credentials::root(), a, b"d", 0o755).unwrap();
    assert!(c.lsn > r3.lsn);
    e.close().unwrap();
    // A clean close needs no recovery.
    let e = open(dir.path());
    assert_eq!(e.crashed_incarnation(), None);
    assert_eq!(names(&e, a), ["d", "f1", "f2"]);
}

#[test]
fn a_lost_entry_discards_what_built_on_it_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (a, [r1, r2, r3]) = history(dir.path());
    let e = open(dir.path());
    // r1 lost: r2 changed /a after r1 did, r3 changed f1 after r1 made it.
    let rep = e.recover_logless(vec![bytes(&r2), bytes(&r3)]).unwrap();
    assert!(rep.maybe_lost());
    assert_eq!(rep.discarded, vec![r2.lsn, r3.lsn]);
    assert_eq!(rep.missing, vec![(r1.lsn, r1.lsn)]);
    assert!(names(&e, a).is_empty(), "a clean, older state");
}

#[test]
fn an_independent_entry_survives_a_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (a, [r1, r2, r3]) = history(dir.path());
    let e = open(dir.path());
    // r2 lost: r3 touches only f1, whose last writer r1 is here.
    let rep = e.recover_logless(vec![bytes(&r1), bytes(&r3)]).unwrap();
    assert_eq!(rep.applied, 2);
    assert!(rep.discarded.is_empty());
    assert_eq!(rep.missing, vec![(r2.lsn, r2.lsn)]);
    assert_eq!(names(&e, a), ["f1"]);
    let f1 = e.lookup(&Credentials::root(), a, b"f1").unwrap();
    assert_eq!(f1.size, 7);
}

#[test]
fn forged_and_garbage_entries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, [r1, r2, r3]) = history(dir.path());
    let e = open(dir.path());
    let mut forged = bytes(&r2);
    let mid = forged.len() / 2;
    forged[mid] ^= 0x40;
    let rep = e
        .recover_logless(vec![
            bytes(&r1),
            forged,
            vec![1, 2, 3],
            Vec::new(),
            bytes(&r3),
        ])
        .unwrap();
    assert_eq!((rep.forged, rep.malformed), (1, 2));
    assert_eq!(rep.missing, vec![(r2.lsn, r2.lsn)]);
    assert_eq!(names(&e, a), ["f1"]);
}

#[test]
fn the_journal_refuses_a_crashed_logless_store_until_it_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let (_, [r1, r2, r3]) = history(dir.path());
    let journal = EngineConfig {
        flush_interval: None,
        ..Default::default()
    };
    assert!(matches!(
        Engine::open_dir(dir.path(), journal.clone()),
        Err(EngineError::LoglessNotRecovered)
    ));
    // A crash during recovery keeps asking for the same backups, and so
    // does a clean close before recovery (it writes nothing back).
    let crashed = open(dir.path()).crashed_incarnation();
    assert!(crashed.is_some());
    let before = open(dir.path());
    assert_eq!(before.crashed_incarnation(), crashed);
    before.close().unwrap();
    let e = open(dir.path());
    assert_eq!(e.crashed_incarnation(), crashed);
    let rep = e
        .recover_logless([&r1, &r2, &r3].map(bytes).to_vec())
        .unwrap();
    assert!(!rep.maybe_lost());
    e.close().unwrap();
    let e = Engine::open_dir(dir.path(), journal).unwrap();
    assert_eq!(
        e.lookup(&Credentials::root(), Soid::ROOT, b"nope"),
        Err(FsError::NotFound)
    );
}

/// Log-less, a removal that is not written back can be rolled back by a
/// recovery (every holder of its entry gone), bringing the inode back
/// with its SOID: until then no new inode may take that SOID (a client's
/// data kept by SOID would show under the other name). With the journal
/// the removal is durable at once and the SOID is reused at once.
#[test]
fn a_freed_soid_waits_for_its_removal_to_be_written_back() {
    let root = Credentials::root();
    for logless in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = EngineConfig {
            logless: logless.then(LoglessConfig::default),
            ..config()
        };
        let e = Engine::open_dir(dir.path(), cfg).unwrap();
        let a = e.mkdir(&root, Soid::ROOT, b"a", 0o755).unwrap().value.soid;
        let f = e.create(&root, a, b"f", 0o644, true).unwrap().value.soid;
        e.sync().unwrap();
        let _ = e.unlink(&root, a, b"f").unwrap();
        let g = e.create(&root, a, b"g", 0o600, true).unwrap().value.soid;
        if !logless {
            assert_eq!(g, f, "journal: the freed SOID is reused at once");
            continue;
        }
        assert_ne!(g, f, "log-less: f's removal is not written back yet");
        // Directories too (their SOIDs are slots of the parent's range).
        let d = e.mkdir(&root, a, b"d", 0o755).unwrap().value.soid;
        let _ = e.rmdir(&root, a, b"d").unwrap();
        let d2 = e.mkdir(&root, a, b"d2", 0o755).unwrap().value.soid;
        assert_ne!(d2, d);
        let _ = e.unlink(&root, a, b"g").unwrap();
        let _ = e.rmdir(&root, a, b"d2").unwrap();
        e.sync().unwrap();
        // Written back: free for good, and reused.
        let h = e.create(&root, a, b"h", 0o644, true).unwrap().value.soid;
        assert_eq!(h, f, "reused once the removal is written back");
        e.close().unwrap();
    }
}

/// The persisted acknowledged mark shows a loss at the tail, which no
/// gap among the returned entries can: acknowledged operations after the
/// last one returned.
#[test]
fn acknowledged_operations_nobody_returned_are_reported() {
    let root = Credentials::root();
    for returned_all in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        let a = e.mkdir(&root, Soid::ROOT, b"a", 0o755).unwrap().value.soid;
        e.sync().unwrap();
        let c1 = e.create(&root, a, b"f1", 0o644, true).unwrap();
        let c2 = e.create(&root, a, b"f2", 0o644, true).unwrap();
        e.note_acked(c2.lsn);
        assert!(e.persist_acked().unwrap());
        assert!(!e.persist_acked().unwrap(), "unchanged: not written again");
        let (r1, r2) = (c1.redo.unwrap(), c2.redo.unwrap());
        drop(e);
        let e = open(dir.path());
        let back = if returned_all {
            vec![bytes(&r1), bytes(&r2)]
        } else {
            vec![bytes(&r1)]
        };
        let rep = e.recover_logless(back).unwrap();
        assert_eq!(rep.acked_mark, r2.lsn);
        if returned_all {
            assert_eq!(rep.unreturned, None);
            assert!(!rep.maybe_lost(), "{rep:?}");
        } else {
            assert_eq!(rep.unreturned, Some((r2.lsn, r2.lsn)));
            assert!(rep.maybe_lost());
        }
        e.close().unwrap();
    }
}

/// Exactly-once across a recovery: an operation a client made (its reply
/// perhaps lost, so it retries) comes back from a backup with its request's
/// identity and reply, which the engine hands to the server's exactly-once
/// table: the retry is answered, not run again.
#[test]
fn a_recovered_operations_reply_goes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = Credentials::root();
    let redo = {
        let e = open(dir.path());
        e.sync().unwrap();
        let id = sextant_engine::requests::RequestId {
            client: 77,
            seq: 5,
            acked_below: 1,
            digest: 1005,
        };
        let c = e
            .for_request(id)
            .create(&root, Soid::ROOT, b"once", 0o644, true)
            .unwrap();
        c.redo.unwrap()
    };
    let e = open(dir.path());
    let got = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let into = std::sync::Arc::clone(&got);
    e.set_carried_sink(Box::new(move |found| into.lock().extend(found.replies)));
    e.recover_logless([bytes(&redo)]).unwrap();
    let seen = got.lock().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!((seen[0].id.client, seen[0].id.seq), (77, 5));
    assert!(names(&e, Soid::ROOT).contains(&"once".to_string()));
}
