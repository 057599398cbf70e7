//! End-to-end basics of the engine API, and recovery after a clean close
//! and after a crash that loses everything not synced.

use sextant_engine::store::{MemStore, Store};
use sextant_engine::{Engine, EngineConfig, JournalConfig, RenameFlags, SyncMode};
use sextant_types::{Credentials, FileType, FsError, Soid};
use std::sync::Arc;

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        ..Default::default()
    }
}

#[test]
fn create_lookup_rename_unlink() {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    let root = Credentials::root();
    let d = e
        .mkdir(&root, Soid::ROOT, b"d", 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
    assert_eq!(d.ftype, FileType::Directory);
    let f = e
        .create(&root, d.soid, b"f", 0o644, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    assert_eq!(e.lookup(&root, d.soid, b"f").unwrap().soid, f.soid);
    assert_eq!(e.getattr(Soid::ROOT).unwrap().nlink, 3);
    assert_eq!(
        e.create(&root, d.soid, b"f", 0o644, true).unwrap_err(),
        FsError::Exists
    );
    e.rename(
        &root,
        d.soid,
        b"f",
        Soid::ROOT,
        b"g",
        RenameFlags::default(),
    )
    .unwrap()
    .wait(&e)
    .unwrap();
    assert_eq!(
        e.lookup(&root, d.soid, b"f").unwrap_err(),
        FsError::NotFound
    );
    assert_eq!(e.lookup(&root, Soid::ROOT, b"g").unwrap().soid, f.soid);
    assert_eq!(
        e.rmdir(&root, Soid::ROOT, b"g").unwrap_err(),
        FsError::NotDir
    );
    e.rmdir(&root, Soid::ROOT, b"d").unwrap().wait(&e).unwrap();
    assert_eq!(e.getattr(Soid::ROOT).unwrap().nlink, 2);
    let names: Vec<_> = e
        .readdir(&root, Soid::ROOT, 0, 100)
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, vec![Box::from(&b"g"[..])]);
    e.unlink(&root, Soid::ROOT, b"g").unwrap().wait(&e).unwrap();
    assert_eq!(e.getattr(f.soid).unwrap_err(), FsError::NotFound);
    assert_eq!(e.statfs().inodes, 1);
}

fn populate(e: &Engine, n: usize) -> Vec<(Soid, Box<[u8]>)> {
    let root = Credentials::root();
    let mut made = Vec::new();
    let mut dirs = vec![Soid::ROOT];
    for i in 0..n {
        let parent = dirs[i % dirs.len()];
        let name: Box<[u8]> = format!("n{i}").into_bytes().into();
        let attr = if i % 7 == 0 {
            let a = e
                .mkdir(&root, parent, &name, 0o755)
                .unwrap()
                .wait(e)
                .unwrap();
            dirs.push(a.soid);
            a
        } else {
            e.create(&root, parent, &name, 0o644, true)
                .unwrap()
                .wait(e)
                .unwrap()
        };
        made.push((parent, name));
        let _ = attr;
    }
    made
}

#[test]
fn recovers_after_clean_close_and_after_crash() {
    let store = MemStore::new();
    let cfg = EngineConfig {
        table_inode_limit: 50,
        table_dir_limit: 10,
        ..config()
    };
    let e = Engine::open(Arc::new(store.clone()), cfg.clone()).unwrap();
    let made = populate(&e, 300);
    assert!(e.stats().splits > 0, "small limits must split tables");
    e.sync().unwrap();
    // More work after the checkpoint lives only in the journal.
    let root = Credentials::root();
    e.mkdir(&root, Soid::ROOT, b"after", 0o700)
        .unwrap()
        .wait(&e)
        .unwrap();
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store.clone()), cfg.clone()).unwrap();
    for (parent, name) in &made {
        e.lookup(&root, *parent, name).unwrap();
    }
    e.lookup(&root, Soid::ROOT, b"after").unwrap();
    assert_eq!(e.statfs().inodes, 302);
    e.close().unwrap();
    let e = Engine::open(Arc::new(store.clone()), cfg).unwrap();
    assert_eq!(e.statfs().inodes, 302);
    assert!(e.statfs().tables > 1);
    assert!(store.list("journal/").unwrap().len() <= 2);
}

/// Regression (found by the benchmarks): dropping the last handle without
/// `close()` must stop the flusher at once, releasing the directory lock,
/// so the store can be opened again right away.
#[test]
fn dropping_the_last_handle_releases_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = EngineConfig {
        flush_interval: Some(std::time::Duration::from_secs(3600)),
        ..Default::default()
    };
    let e = Engine::open_dir(dir.path(), cfg.clone()).unwrap();
    let e2 = e.clone();
    e.mkdir(&Credentials::root(), Soid::ROOT, b"d", 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
    // While held, a second open is refused as "in use", not an I/O error.
    match Engine::open_dir(dir.path(), cfg.clone()) {
        Err(sextant_engine::EngineError::InUse { dir: d }) => {
            assert_eq!(d, dir.path().display().to_string())
        }
        Err(other) => panic!("a held store must be InUse, got {other}"),
        Ok(_) => panic!("a held store opened twice"),
    }
    drop(e);
    drop(e2);
    let e = Engine::open_dir(dir.path(), cfg).expect("lock released");
    e.lookup(&Credentials::root(), Soid::ROOT, b"d").unwrap();
}

/// Found by the benchmarks: splits are persisted only by checkpoints, so a
/// crash before the first one recovered everything as one huge table, and
/// the next writes paid for splitting it. Recovery splits it at once.
#[test]
fn recovery_splits_tables_that_never_reached_a_checkpoint() {
    let store = MemStore::new();
    let cfg = EngineConfig {
        table_inode_limit: 50,
        table_dir_limit: 10,
        ..config()
    };
    let e = Engine::open(Arc::new(store.clone()), cfg.clone()).unwrap();
    populate(&e, 300);
    let tables = e.stats().tables;
    assert!(tables > 2);
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store), cfg).unwrap();
    let after = e.stats().tables;
    assert!(
        after > 1 && after >= tables / 2,
        "{after} tables after recovery, {tables} before"
    );
    assert_eq!(e.statfs().inodes, 301);
}

/// Found in review: every operation journals an inode's whole link list,
/// and a record over the journal's limit was acknowledged and then lost.
/// Links stop at a byte budget with EMLINK, and the inode stays usable.
#[test]
fn hard_links_stop_at_the_link_list_budget() {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    let root = Credentials::root();
    let f = e
        .create(&root, Soid::ROOT, b"f", 0o644, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    let name = |i: usize| format!("{i:0>255}").into_bytes();
    let mut made = 0;
    loop {
        match e.link(&root, f.soid, Soid::ROOT, &name(made)) {
            Ok(c) => {
                e.wait(c.lsn).unwrap();
                made += 1;
            }
            Err(FsError::TooManyLinks) => break,
            Err(other) => panic!("{other:?} after {made} links"),
        }
        assert!(made < 2000, "no limit reached");
    }
    assert!(made > 900, "only {made} links");
    e.unlink(&root, Soid::ROOT, &name(0))
        .unwrap()
        .wait(&e)
        .unwrap();
    assert_eq!(e.getattr(f.soid).unwrap().nlink as usize, made);
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store), config()).unwrap();
    assert_eq!(e.getattr(f.soid).unwrap().nlink as usize, made);
}

/// Found in review: LSNs advance without segments while the journal is
/// off; switching back to fsync must neither reuse LSNs below a snapshot's
/// nor leave a "gap" that a later restart calls corruption.
#[test]
fn switching_the_journal_off_and_on_keeps_recovery_exact() {
    let store = MemStore::new();
    let root = Credentials::root();
    let with = |mode| EngineConfig {
        journal: JournalConfig {
            mode,
            ..Default::default()
        },
        ..config()
    };
    let e = Engine::open(Arc::new(store.clone()), with(SyncMode::Fsync)).unwrap();
    e.mkdir(&root, Soid::ROOT, b"a", 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
    e.close().unwrap();
    let e = Engine::open(Arc::new(store.clone()), with(SyncMode::Off)).unwrap();
    for i in 0..50 {
        e.mkdir(&root, Soid::ROOT, format!("off{i}").as_bytes(), 0o755)
            .unwrap()
            .wait(&e)
            .unwrap();
    }
    e.close().unwrap();
    for round in 0..3 {
        let e = Engine::open(Arc::new(store.clone()), with(SyncMode::Fsync)).unwrap();
        e.mkdir(&root, Soid::ROOT, format!("on{round}").as_bytes(), 0o755)
            .unwrap()
            .wait(&e)
            .unwrap();
        drop(e);
        store.crash(None);
    }
    let e = Engine::open(Arc::new(store), with(SyncMode::Fsync)).unwrap();
    for name in ["a", "off49", "on0", "on1", "on2"] {
        e.lookup(&root, Soid::ROOT, name.as_bytes()).unwrap();
    }
}

/// Change tracking reports exactly the keys an operation wrote: what a
/// mount must drop from its kernel cache when another client changes them.
#[test]
fn commits_report_their_changes_when_tracked() {
    let e = Engine::open(Arc::new(MemStore::new()), config()).unwrap();
    let root = Credentials::root();
    let d = e.mkdir(&root, Soid::ROOT, b"d", 0o755).unwrap();
    assert_eq!(d.changes, None, "off by default");
    let d = d.wait(&e).unwrap();
    e.track_changes(true);
    let f = e.create(&root, d.soid, b"f", 0o644, true).unwrap();
    let changes = f.changes.clone().expect("tracked");
    let f = f.wait(&e).unwrap();
    // The new inode, the parent (mtime, ctime) and the new name.
    assert!(changes.inodes.contains(&f.soid));
    assert!(changes.inodes.contains(&d.soid));
    assert_eq!(changes.entries, vec![(d.soid, b"f".to_vec().into())]);

    let r = e
        .rename(
            &root,
            d.soid,
            b"f",
            Soid::ROOT,
            b"g",
            RenameFlags::default(),
        )
        .unwrap();
    let changes = r.changes.clone().expect("tracked");
    r.wait(&e).unwrap();
    assert!(changes.entries.contains(&(d.soid, b"f".to_vec().into())));
    assert!(changes
        .entries
        .contains(&(Soid::ROOT, b"g".to_vec().into())));
    assert!(changes.inodes.contains(&d.soid));
    assert!(changes.inodes.contains(&Soid::ROOT));

    // A failed operation, and a read, change nothing.
    assert!(e.unlink(&root, d.soid, b"missing").is_err());
    e.track_changes(false);
    let u = e.unlink(&root, Soid::ROOT, b"g").unwrap();
    assert_eq!(u.changes, None);
    u.wait(&e).unwrap();
}

/// unlink and rmdir say what they removed, as it was: a caller (the mount)
/// learns whether the inode is gone without asking again.
#[test]
fn removals_return_what_they_removed() {
    let e = Engine::open(Arc::new(MemStore::new()), config()).unwrap();
    let root = Credentials::root();
    let f = e
        .create(&root, Soid::ROOT, b"f", 0o644, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    e.link(&root, f.soid, Soid::ROOT, b"g")
        .unwrap()
        .wait(&e)
        .unwrap();
    let first = e.unlink(&root, Soid::ROOT, b"f").unwrap().wait(&e).unwrap();
    assert_eq!(
        (first.soid, first.nlink),
        (f.soid, 2),
        "another link is left"
    );
    let last = e.unlink(&root, Soid::ROOT, b"g").unwrap().wait(&e).unwrap();
    assert_eq!((last.soid, last.nlink), (f.soid, 1), "the last link");
    assert_eq!(e.getattr(f.soid).unwrap_err(), FsError::NotFound);
    let d = e
        .mkdir(&root, Soid::ROOT, b"d", 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
    let gone = e.rmdir(&root, Soid::ROOT, b"d").unwrap().wait(&e).unwrap();
    assert_eq!((gone.soid, gone.ftype), (d.soid, FileType::Directory));
}

/// A non-owner who may write a set-ID file may clear its set-ID bits (the
/// kernel's suid-kill of a write, which a FUSE mount forwards as a chmod
/// with the writer's credentials), and nothing else of its mode; the same
/// with a truncate (size and mode in one setattr).
#[test]
fn a_writer_clears_set_id_bits_but_may_not_chmod() {
    use sextant_types::SetAttr;
    let e = Engine::open(Arc::new(MemStore::new()), config()).unwrap();
    let root = Credentials::root();
    let writer = Credentials::user(1001, 1001);
    let chmod = |perm: u32| SetAttr {
        perm: Some(perm),
        ..Default::default()
    };
    for (i, (mode, cleared)) in [(0o4777, 0o777), (0o2777, 0o777), (0o6777, 0o777)]
        .into_iter()
        .enumerate()
    {
        let name = format!("f{i}");
        let f = e
            .create(&root, Soid::ROOT, name.as_bytes(), 0o644, true)
            .unwrap()
            .wait(&e)
            .unwrap();
        e.setattr(&root, f.soid, &chmod(mode))
            .unwrap()
            .wait(&e)
            .unwrap();
        assert_eq!(
            e.setattr(&writer, f.soid, &chmod(0o777 & !0o2))
                .unwrap_err(),
            FsError::Perm,
            "{mode:o}: a writer's chmod that changes more"
        );
        let a = e
            .setattr(&writer, f.soid, &chmod(cleared))
            .unwrap()
            .wait(&e)
            .unwrap();
        assert_eq!(a.perm, cleared, "{mode:o}");
        assert_eq!(
            e.setattr(&writer, f.soid, &chmod(cleared)).unwrap_err(),
            FsError::Perm,
            "nothing left to clear: an ordinary chmod"
        );
    }
    // A truncate by the writer that also clears the bits.
    let g = e
        .create(&root, Soid::ROOT, b"g", 0o644, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    e.setattr(&root, g.soid, &chmod(0o6777))
        .unwrap()
        .wait(&e)
        .unwrap();
    let set = SetAttr {
        size: Some(5),
        perm: Some(0o777),
        ..Default::default()
    };
    let a = e.setattr(&writer, g.soid, &set).unwrap().wait(&e).unwrap();
    assert_eq!((a.size, a.perm), (5, 0o777));
    // One who may not write the file may not clear them.
    let h = e
        .create(&root, Soid::ROOT, b"h", 0o644, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    e.setattr(&root, h.soid, &chmod(0o4755))
        .unwrap()
        .wait(&e)
        .unwrap();
    assert_eq!(
        e.setattr(&writer, h.soid, &chmod(0o755)).unwrap_err(),
        FsError::Perm
    );
}

/// A size change through a file the caller holds open for writing
/// (`ftruncate`, `write_handle`) needs no write permission on the mode now;
/// by name (`truncate`) it does.
#[test]
fn a_writable_handle_truncates_whatever_the_mode() {
    use sextant_types::SetAttr;
    let e = Engine::open(Arc::new(MemStore::new()), config()).unwrap();
    let root = Credentials::root();
    let user = Credentials::user(1001, 1001);
    let d = e
        .mkdir(&root, Soid::ROOT, b"d", 0o777)
        .unwrap()
        .wait(&e)
        .unwrap();
    let f = e
        .create(&user, d.soid, b"f", 0o000, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    let size = SetAttr {
        size: Some(7),
        ..Default::default()
    };
    assert_eq!(
        e.setattr(&user, f.soid, &size).unwrap_err(),
        FsError::Access,
        "by name"
    );
    let a = e
        .setattr_with(&user, f.soid, &size, true)
        .unwrap()
        .wait(&e)
        .unwrap();
    assert_eq!(a.size, 7);
    // Only the size: a chmod through the handle is still the owner's.
    let other = Credentials::user(1002, 1002);
    let chmod = SetAttr {
        perm: Some(0o777),
        ..Default::default()
    };
    assert_eq!(
        e.setattr_with(&other, f.soid, &chmod, true).unwrap_err(),
        FsError::Perm
    );
}

/// READDIRPLUS: every entry comes with the attributes a lookup gives, for
/// a caller who may search the directory; one who may only read it gets
/// the names alone (a lookup would be refused), one who may not read it
/// nothing.
#[test]
fn readdir_plus_gives_attributes_only_to_who_may_look_up() {
    let e = Engine::open(Arc::new(MemStore::new()), config()).unwrap();
    let root = Credentials::root();
    let user = Credentials::user(1001, 1001);
    let d = e
        .mkdir(&root, Soid::ROOT, b"d", 0o755)
        .unwrap()
        .wait(&e)
        .unwrap();
    for name in [&b"a"[..], b"b", b"c"] {
        e.create(&root, d.soid, name, 0o644, true)
            .unwrap()
            .wait(&e)
            .unwrap();
    }
    e.mkdir(&root, d.soid, b"sub", 0o700)
        .unwrap()
        .wait(&e)
        .unwrap();
    let listed = e.readdir_plus(&user, d.soid, 0, 100).unwrap();
    assert_eq!(listed.len(), 4);
    for (entry, attr) in &listed {
        let looked_up = e.lookup(&user, d.soid, &entry.name).unwrap();
        assert_eq!(attr.as_ref(), Some(&looked_up), "{:?}", entry.name);
    }
    let plain: Vec<_> = e.readdir(&user, d.soid, 0, 100).unwrap();
    let names = |v: &[sextant_engine::DirEntry]| -> Vec<(u64, Box<[u8]>)> {
        v.iter().map(|e| (e.cookie, e.name.clone())).collect()
    };
    let plus: Vec<_> = listed.into_iter().map(|(e, _)| e).collect();
    assert_eq!(names(&plus), names(&plain), "the same entries as readdir");
    // Read but not search: the names, no attributes (lookup: EACCES).
    let chmod = |perm: u32| sextant_types::SetAttr {
        perm: Some(perm),
        ..Default::default()
    };
    e.setattr(&root, d.soid, &chmod(0o744))
        .unwrap()
        .wait(&e)
        .unwrap();
    assert_eq!(e.lookup(&user, d.soid, b"a").unwrap_err(), FsError::Access);
    let listed = e.readdir_plus(&user, d.soid, 0, 100).unwrap();
    assert_eq!(listed.len(), 4);
    assert!(listed.iter().all(|(_, a)| a.is_none()), "{listed:?}");
    // Search but not read: no listing at all, as readdir.
    e.setattr(&root, d.soid, &chmod(0o711))
        .unwrap()
        .wait(&e)
        .unwrap();
    assert_eq!(
        e.readdir_plus(&user, d.soid, 0, 100).unwrap_err(),
        FsError::Access
    );
}
