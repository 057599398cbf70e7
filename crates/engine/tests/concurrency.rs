//! Many threads at once: random creates, unlinks, mkdirs, rmdirs and
//! renames — including cross-directory directory renames, the classic
//! deadlock and cycle case — over several tables. The test must finish (no
//! deadlock), and afterwards the namespace must be a tree with consistent
//! link counts, before and after recovery from the journal.
//!
//! Named invariants (STYLE.md: one checker per invariant):
//! - `tree_is_connected`: every inode is reachable from the root exactly
//!   through its entries, no directory is its own ancestor;
//! - `link_counts_match`: a directory's nlink is 2 + subdirectories, a
//!   file's nlink is the number of entries naming it;
//! - `inode_count_conserved`: statfs counts exactly the reachable inodes.

use sextant_engine::store::MemStore;
use sextant_engine::{Engine, EngineConfig, RenameFlags};
use sextant_types::{Credentials, FileType, FsError, Soid};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const THREADS: usize = 4;
const OPS_PER_THREAD: usize = 1500;
const NAMES: [&[u8]; 6] = [b"a", b"b", b"c", b"d", b"e", b"f"];

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        // Small limits: splits happen, and tables emptied again merge
        // (a table is "small" below 1/8 of each limit).
        table_inode_limit: 48,
        table_dir_limit: 16,
        // Evict and reload tables while operations run.
        cache_bytes: 96 << 10,
        max_dirty_age: std::time::Duration::ZERO,
        ..Default::default()
    }
}

/// xorshift; deterministic per thread.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

/// A random existing directory, found by a short random walk from the root.
fn random_dir(e: &Engine, rng: &mut Rng) -> Soid {
    let root = Credentials::root();
    let mut cur = Soid::ROOT;
    for _ in 0..(rng.next() % 4) {
        match e.lookup(&root, cur, rng.pick(&NAMES)) {
            Ok(a) if a.ftype == FileType::Directory => cur = a.soid,
            _ => break,
        }
    }
    cur
}

/// Returns how many operations succeeded.
fn worker(e: Engine, seed: u64) -> usize {
    let root = Credentials::root();
    let mut rng = Rng(seed);
    let mut ok = 0;
    for _ in 0..OPS_PER_THREAD {
        let dir = random_dir(&e, &mut rng);
        let name = rng.pick(&NAMES);
        let r = match rng.next() % 6 {
            0 => e.mkdir(&root, dir, name, 0o755).map(|c| c.lsn),
            1 => e.create(&root, dir, name, 0o644, true).map(|c| c.lsn),
            2 => e.unlink(&root, dir, name).map(|c| c.lsn),
            3 => e.rmdir(&root, dir, name).map(|c| c.lsn),
            _ => {
                let to = random_dir(&e, &mut rng);
                let flags = RenameFlags {
                    exchange: rng.next().is_multiple_of(5),
                    ..Default::default()
                };
                e.rename(&root, dir, name, to, rng.pick(&NAMES), flags)
                    .map(|c| c.lsn)
            }
        };
        match r {
            Ok(lsn) => {
                e.wait(lsn).expect("durable");
                ok += 1;
            }
            Err(FsError::Io) => panic!("engine failed"),
            Err(_) => {}
        }
    }
    ok
}

/// `rm -r` of everything under `dir`, racing other threads doing the same
/// (their ENOENT/ENOTEMPTY are expected); empties tables so they merge.
fn remove_tree(e: &Engine, dir: Soid, rng: &mut Rng) {
    let root = Credentials::root();
    let Ok(mut entries) = e.readdir(&root, dir, 0, 1024) else {
        return;
    };
    // Different threads walk in different orders.
    for i in (1..entries.len()).rev() {
        entries.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    for entry in entries {
        let r = if entry.ftype == FileType::Directory {
            remove_tree(e, entry.soid, rng);
            e.rmdir(&root, dir, &entry.name)
        } else {
            e.unlink(&root, dir, &entry.name)
        };
        match r {
            Ok(c) => e.wait(c.lsn).expect("durable"),
            Err(FsError::Io) => panic!("engine failed"),
            Err(_) => {}
        }
    }
}

/// Walks the tree; checks `tree_is_connected` and returns, per inode, the
/// number of entries naming it and (for directories) its subdirectories.
fn walk(e: &Engine) -> BTreeMap<Soid, (usize, u32)> {
    let root = Credentials::root();
    let mut seen: BTreeMap<Soid, (usize, u32)> = BTreeMap::new();
    seen.insert(Soid::ROOT, (0, 0));
    let mut stack = vec![(Soid::ROOT, BTreeSet::from([Soid::ROOT]))];
    while let Some((dir, ancestors)) = stack.pop() {
        let mut cookie = 0;
        loop {
            let batch = e.readdir(&root, dir, cookie, 64).unwrap();
            let Some(last) = batch.last() else { break };
            cookie = last.cookie;
            for entry in batch {
                let attr = e
                    .getattr(entry.soid)
                    .unwrap_or_else(|err| panic!("tree_is_connected: dangling entry: {err}"));
                assert_eq!(attr.ftype, entry.ftype, "entry type matches inode");
                let links = seen.entry(entry.soid).or_insert((0, 0));
                links.0 += 1;
                if attr.ftype == FileType::Directory {
                    assert_eq!(links.0, 1, "tree_is_connected: directory linked twice");
                    assert_eq!(attr.parent, dir, "tree_is_connected: `..` is the parent");
                    assert!(!ancestors.contains(&entry.soid), "tree_is_connected: cycle");
                    seen.get_mut(&dir).unwrap().1 += 1;
                    let mut a = ancestors.clone();
                    a.insert(entry.soid);
                    stack.push((entry.soid, a));
                }
            }
        }
    }
    seen
}

fn check_invariants(e: &Engine) {
    let seen = walk(e);
    for (soid, (entries, subdirs)) in &seen {
        let attr = e.getattr(*soid).unwrap();
        if attr.ftype == FileType::Directory {
            assert_eq!(attr.nlink, 2 + subdirs, "link_counts_match: dir {soid}");
        } else {
            assert_eq!(
                attr.nlink as usize, *entries,
                "link_counts_match: file {soid}"
            );
        }
    }
    assert_eq!(
        e.statfs().inodes,
        seen.len() as u64,
        "inode_count_conserved: no orphans, nothing counted twice"
    );
}

#[test]
fn concurrent_renames_keep_a_tree() {
    let store = MemStore::new();
    let e = Engine::open(Arc::new(store.clone()), config()).unwrap();
    // Phase 1 builds a tree, the main thread checks it, phase 2 removes it.
    let phase = Arc::new(std::sync::Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (e, phase) = (e.clone(), Arc::clone(&phase));
            std::thread::spawn(move || {
                let seed = 0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1);
                let ok = worker(e.clone(), seed);
                phase.wait();
                phase.wait();
                remove_tree(&e, Soid::ROOT, &mut Rng(seed));
                ok
            })
        })
        .collect();
    // Checkpoints, merges and evictions race the operations.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (e, done) = (e.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                e.flush_tick().expect("background write-back");
            }
        })
    };
    phase.wait();
    check_invariants(&e);
    let built = walk(&e).len();
    phase.wait();
    let succeeded: usize = threads
        .into_iter()
        .map(|t| t.join().expect("worker panicked"))
        .sum();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    flusher.join().expect("flusher panicked");
    // Whatever the race left unmerged merges now (one merge per tick).
    for _ in 0..64 {
        e.flush_tick().unwrap();
    }
    let stats = e.stats();
    assert_eq!(stats.inodes, 1, "everything was removed");
    eprintln!(
        "{succeeded} operations succeeded; {} tables, {} splits, {} merges, {} lock retries, \
         {} checkpoints, {} evictions",
        stats.tables,
        stats.splits,
        stats.merges,
        stats.retries,
        stats.checkpoints,
        stats.tables_evicted_total
    );
    assert!(
        succeeded > THREADS * OPS_PER_THREAD / 5,
        "the workload must do work"
    );
    assert!(
        built > 50,
        "phase 1 must build a real tree ({built} inodes)"
    );
    assert!(stats.merges > 0, "tables emptied again must merge");
    assert!(stats.splits > 0, "the workload must span tables");
    check_invariants(&e);
    // Recovery (snapshots + journal) reproduces a consistent tree.
    let before = walk(&e).len();
    drop(e);
    store.crash(None);
    let e = Engine::open(Arc::new(store), config()).unwrap();
    check_invariants(&e);
    assert_eq!(walk(&e).len(), before);
}
