//! What each durability mode keeps across a power loss of the whole
//! machine: server and clients die at once and every byte not yet synced
//! is gone (`MemStore::crash`, which keeps exactly what `sync`/`put_blob`
//! made durable). The README's durability table cites these tests.
//!
//! - journal, `fsync`: every acknowledged operation survives;
//! - journal, `background`: operations acknowledged more than one
//!   interval (and one sync) before the power loss survive, and every
//!   one acknowledged before a `sync_journal` (fsync) returned;
//! - journal, `nosync`: what was written back survives; operations
//!   acknowledged since can be lost (the journal is synced only when a
//!   write-back needs it), never half of one;
//! - log-less: what was written back survives; operations acknowledged
//!   since are lost when their clients died too (single node), and the
//!   recovery reports the loss (the persisted acknowledged mark).

use sextant_engine::store::MemStore;
use sextant_engine::{Engine, EngineConfig, JournalConfig, LoglessConfig, RenameFlags, SyncMode};
use sextant_types::{Credentials, FsError, Soid};
use std::sync::Arc;

const BEFORE: usize = 40;
const AFTER: usize = 40;

fn config(mode: SyncMode) -> EngineConfig {
    EngineConfig {
        journal: JournalConfig {
            mode,
            ..Default::default()
        },
        flush_interval: None,
        ..Default::default()
    }
}

fn logless_config() -> EngineConfig {
    EngineConfig {
        logless: Some(LoglessConfig {
            arl_size: 4,
            ..Default::default()
        }),
        ..config(SyncMode::Fsync)
    }
}

/// `/w`, then `b0..` written back (`sync`), then `a0..` acknowledged
/// (waited for) only. Returns `/w`'s SOID.
fn history(e: &Engine, logless: bool) -> Soid {
    let root = Credentials::root();
    let w = e.mkdir(&root, Soid::ROOT, b"w", 0o755).unwrap();
    let w = if logless { w.value } else { w.wait(e).unwrap() }.soid;
    let mut newest = 0;
    for (prefix, n) in [("b", BEFORE), ("a", AFTER)] {
        for i in 0..n {
            let c = e
                .create(&root, w, format!("{prefix}{i}").as_bytes(), 0o644, true)
                .unwrap();
            newest = c.lsn;
            if !logless {
                c.wait(e).unwrap();
            }
        }
        if prefix == "b" {
            e.sync().unwrap();
        }
    }
    if logless {
        // What the server does every 100 ms while replies go out.
        e.note_acked(newest);
        assert!(e.persist_acked().unwrap());
    }
    w
}

/// How many of `prefix0..` exist in `w`.
fn count(e: &Engine, w: Soid, prefix: &str, n: usize) -> usize {
    let root = Credentials::root();
    (0..n)
        .filter(
            |i| match e.lookup(&root, w, format!("{prefix}{i}").as_bytes()) {
                Ok(_) => true,
                Err(FsError::NotFound) => false,
                Err(err) => panic!("lookup: {err:?}"),
            },
        )
        .count()
}

#[test]
fn journal_fsync_keeps_every_acknowledged_operation_across_a_power_loss() {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config(SyncMode::Fsync)).unwrap();
    let w = history(&e, false);
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store), config(SyncMode::Fsync)).unwrap();
    assert_eq!(count(&e, w, "b", BEFORE), BEFORE);
    assert_eq!(count(&e, w, "a", AFTER), AFTER, "acknowledged, synced");
}

/// `nosync` writes the journal but never syncs it: a process crash keeps
/// it (the kernel has the bytes), a power loss may not. The written-back
/// state survives; in the worst case (nothing of the journal reached the
/// disk) every operation acknowledged since is lost. The server starts.
#[test]
fn journal_nosync_loses_what_was_not_written_back_on_a_power_loss() {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config(SyncMode::NoSync)).unwrap();
    let w = history(&e, false);
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store), config(SyncMode::NoSync))
        .expect("a nosync store opens after a power loss");
    assert_eq!(count(&e, w, "b", BEFORE), BEFORE, "written back");
    assert_eq!(
        count(&e, w, "a", AFTER),
        0,
        "acknowledged but never synced: lost"
    );
    // And it goes on: new operations work, and survive a clean restart.
    let root = Credentials::root();
    e.create(&root, w, b"new", 0o644, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    e.close().unwrap();
}

/// `background` acknowledges once the journal is written and syncs it
/// within the interval (5 ms here): a power loss after the interval keeps
/// every acknowledged operation — with no write-back in between, which
/// `nosync` needs (the test fails with it: the `a`s never reach the
/// disk). The power cut is taken while the engine runs: a clean drop
/// would sync the rest.
#[test]
fn journal_background_keeps_what_was_acknowledged_one_interval_before_a_power_loss() {
    let mode = SyncMode::Background(std::time::Duration::from_millis(5));
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config(mode)).unwrap();
    let w = history(&e, false);
    // Not a timing assertion: the interval is 5 ms, the bound 20 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let after = loop {
        let cut = Engine::open(Arc::new(store.power_cut_copy()), config(mode))
            .expect("a background store opens after a power loss");
        assert_eq!(count(&cut, w, "b", BEFORE), BEFORE, "written back");
        let a = count(&cut, w, "a", AFTER);
        if a == AFTER || std::time::Instant::now() > deadline {
            break a;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(after, AFTER, "acknowledged, synced in the background");
    drop(e);
}

/// What a power cut taken now keeps of `history`'s files in `w`: the
/// written-back `b…` files and the acknowledged `a…` ones.
fn after_power_cut(store: &MemStore, mode: SyncMode, w: Soid) -> (usize, usize) {
    let cut = Engine::open(Arc::new(store.power_cut_copy()), config(mode)).unwrap();
    (count(&cut, w, "b", BEFORE), count(&cut, w, "a", AFTER))
}

/// fsync's promise in the modes that reply before syncing: once
/// `sync_journal` returned, every operation acknowledged before it survives
/// a power loss (taken while the engine runs: a clean drop would sync the
/// rest) — `nosync`, which never syncs on its own, and a `background`
/// whose interval (10 s) has not come; before it, a power loss loses them.
#[test]
fn sync_journal_keeps_everything_acknowledged_before_it_across_a_power_loss() {
    for mode in [
        SyncMode::NoSync,
        SyncMode::Background(std::time::Duration::from_secs(10)),
    ] {
        let store = MemStore::new();
        let e = Engine::open(Arc::new(store.clone()), config(mode)).unwrap();
        let w = history(&e, false);
        assert_eq!(
            after_power_cut(&store, mode, w),
            (BEFORE, 0),
            "{mode:?}: written back; acknowledged, not yet synced"
        );
        assert!(!e.journal_synced(), "{mode:?}");
        e.sync_journal().unwrap();
        assert!(e.journal_synced(), "{mode:?}");
        assert_eq!(
            after_power_cut(&store, mode, w),
            (BEFORE, AFTER),
            "{mode:?}: written back; acknowledged before sync_journal returned"
        );
        drop(e);
    }
    // `fsync`: nothing to wait for; log-less on one server: no journal,
    // at once (a power loss keeps only what was written back, above).
    let e = Engine::open(Arc::new(MemStore::new()), config(SyncMode::Fsync)).unwrap();
    history(&e, false);
    assert!(e.journal_synced());
    e.sync_journal().unwrap();
    let e = Engine::open(Arc::new(MemStore::new()), logless_config()).unwrap();
    history(&e, true);
    assert!(e.journal_synced());
    e.sync_journal().unwrap();
}

/// Log-less on one machine: the clients holding the backups die with the
/// server, so nothing is handed back. The written-back state survives;
/// the operations acknowledged since are lost — and reported: the
/// persisted acknowledged mark shows the unreturned range.
#[test]
fn logless_loses_what_was_not_written_back_on_a_power_loss_and_reports_it() {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), logless_config()).unwrap();
    let w = history(&e, true);
    let written_back = e.written_back_lsn();
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store), logless_config()).unwrap();
    assert!(e.crashed_incarnation().is_some());
    let rep = e.recover_logless(Vec::new()).unwrap();
    assert!(rep.maybe_lost(), "{rep:?}");
    let (from, to) = rep.unreturned.expect("the loss is reported");
    assert_eq!(from, written_back + 1, "{rep:?}");
    assert_eq!(to, rep.acked_mark);
    assert_eq!(to - from + 1, AFTER as u64, "exactly the unsynced creates");
    assert_eq!(count(&e, w, "b", BEFORE), BEFORE, "written back");
    assert_eq!(count(&e, w, "a", AFTER), 0, "nobody handed them back");
}

/// Eight directories in tables of two, three files each, written back;
/// then renames between them, each acknowledged, with flusher ticks that
/// write back the tables dirty for two ticks (as the 30 s dirty age does).
/// Returns the directories.
fn renames_with_partial_write_backs(e: &Engine, seed: u64) -> Vec<Soid> {
    let root = Credentials::root();
    let mut dirs = Vec::new();
    for d in 0..8 {
        let s = e
            .mkdir(&root, Soid::ROOT, format!("d{d}").as_bytes(), 0o755)
            .unwrap()
            .wait(e)
            .unwrap()
            .soid;
        dirs.push(s);
        for f in 0..3 {
            e.create(&root, s, format!("f{d}-{f}").as_bytes(), 0o644, true)
                .unwrap()
                .wait(e)
                .unwrap();
        }
    }
    e.sync().unwrap();
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n.max(1)
    };
    for i in 0..60 {
        let from = dirs[rnd(8) as usize];
        let to = dirs[rnd(8) as usize];
        let names = e.readdir(&root, from, 0, 100).unwrap();
        if let Some(n) = names.get(rnd(names.len() as u64) as usize) {
            let to_name = format!("r{i}");
            let c = e
                .rename(
                    &root,
                    from,
                    &n.name,
                    to,
                    to_name.as_bytes(),
                    RenameFlags::default(),
                )
                .unwrap();
            c.wait(e).unwrap();
        }
        if rnd(3) == 0 {
            e.flush_tick().unwrap();
        }
    }
    dirs
}

/// Whether the tree is whole: every entry names a live inode with one
/// link, and the inode count is the root, the directories and the entries.
fn consistent(e: &Engine, dirs: &[Soid]) -> Result<(), String> {
    let root = Credentials::root();
    let mut entries = 0u64;
    for d in dirs {
        for ent in e.readdir(&root, *d, 0, 1000).unwrap() {
            entries += 1;
            match e.getattr(ent.soid) {
                Ok(a) if a.nlink == 1 => {}
                Ok(a) => return Err(format!("{:?} has nlink {}", ent.name, a.nlink)),
                Err(err) => return Err(format!("{:?} dangles: {err:?}", ent.name)),
            }
        }
    }
    let (inodes, walked) = (e.statfs().inodes, 1 + dirs.len() as u64 + entries);
    if inodes != walked {
        return Err(format!("{inodes} inodes, {walked} reachable"));
    }
    Ok(())
}

/// Tables are written back one by one as they age. Before a snapshot
/// replaces journal records, the journal is on the disk up to it — with
/// `fsync` always, with `nosync` by one sync per write-back
/// (`Journal::wait_synced`, and `background` also by its own syncs) — so
/// a power loss recovers a whole tree in every mode: `nosync` and
/// `background` may lose the last operations, never half of one.
/// (Without that sync, 9 of these 20 seeds left a rename between two
/// tables half done under `nosync`: the file in two directories, or in
/// none.)
#[test]
fn a_power_loss_never_leaves_a_rename_between_tables_half_done() {
    let background = SyncMode::Background(std::time::Duration::from_millis(1));
    for mode in [SyncMode::Fsync, SyncMode::NoSync, background] {
        for seed in 0..20u64 {
            let store = MemStore::new();
            let cfg = EngineConfig {
                table_dir_limit: 2,
                table_inode_limit: 6,
                max_dirty_age: std::time::Duration::from_secs(2),
                ..config(mode)
            };
            let e = Engine::open(Arc::new(store.clone()), cfg.clone()).unwrap();
            let dirs = renames_with_partial_write_backs(&e, seed);
            assert!(e.statfs().tables > 2, "the directories span tables");
            consistent(&e, &dirs).unwrap();
            // Cut while the engine runs (dropping it would sync a
            // background journal's tail).
            let cut = store.power_cut_copy();
            drop(e);
            let e = Engine::open(Arc::new(cut), cfg).unwrap();
            if let Err(what) = consistent(&e, &dirs) {
                panic!("{mode:?}, seed {seed}: a power loss broke the tree: {what}");
            }
        }
    }
}
