//! Workload generation: engine configurations, store directories,
//! synthetic balanced trees and a window of operations in flight.

use clap::ValueEnum;
use sextant_engine::{Engine, EngineConfig, Lsn, SyncMode};
use sextant_types::{Credentials, FsError, Soid};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Journal mode as given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Journal {
    Fsync,
    Nosync,
    Off,
}

impl Journal {
    pub fn mode(self) -> SyncMode {
        match self {
            Journal::Fsync => SyncMode::Fsync,
            Journal::Nosync => SyncMode::NoSync,
            Journal::Off => SyncMode::Off,
        }
    }
}

/// The configuration `sextant serve` uses, with another journal mode.
pub fn serve_config(journal: Journal) -> EngineConfig {
    let mut c = EngineConfig::default();
    c.journal.mode = journal.mode();
    c
}

/// For building and measuring namespaces: no background flusher (nothing
/// is written back or evicted behind the benchmark's back) and no cache
/// limit.
pub fn build_config(journal: Journal) -> EngineConfig {
    let mut c = serve_config(journal);
    c.flush_interval = None;
    c.cache_bytes = usize::MAX;
    c.max_journal_bytes = u64::MAX;
    c
}

/// A fresh, empty store directory `base/name`.
pub fn fresh_dir(base: &Path, name: &str) -> PathBuf {
    let dir = base.join(name);
    remove_dir(&dir);
    std::fs::create_dir_all(&dir).expect("create store directory");
    dir
}

pub fn remove_dir(dir: &Path) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).expect("remove old store directory");
    }
}

pub fn root() -> Credentials {
    Credentials::root()
}

pub fn file_name(i: usize) -> Vec<u8> {
    format!("f{i:07}").into_bytes()
}

pub fn dir_name(i: usize) -> Vec<u8> {
    format!("d{i:06}").into_bytes()
}

/// Keeps up to `k` journal records outstanding: pushing the k+1-th waits
/// for the oldest, as a server acknowledging in order would.
pub struct Window {
    k: usize,
    pending: VecDeque<Lsn>,
}

impl Window {
    pub fn new(k: usize) -> Window {
        Window {
            k: k.max(1),
            pending: VecDeque::with_capacity(k.max(1)),
        }
    }

    pub fn push(&mut self, engine: &Engine, lsn: Lsn) -> Result<(), FsError> {
        self.pending.push_back(lsn);
        while self.pending.len() >= self.k {
            let oldest = self.pending.pop_front().expect("non-empty");
            engine.wait(oldest)?;
        }
        Ok(())
    }

    /// Waits for everything outstanding (only the newest matters: the
    /// journal is durable in LSN order).
    pub fn drain(&mut self, engine: &Engine) -> Result<(), FsError> {
        if let Some(&last) = self.pending.back() {
            engine.wait(last)?;
        }
        self.pending.clear();
        Ok(())
    }
}

/// A balanced synthetic tree: `groups` top-level directories
/// (`/g000000`), each holding up to `dir_fanout` leaf directories, each of
/// which will hold `files_per_dir` files.
pub struct Tree {
    /// Leaf directories, in creation order.
    pub leaves: Vec<Soid>,
    /// Paths of the leaves (for resolve).
    pub leaf_paths: Vec<String>,
    /// Inodes created for the directories (not counting the root).
    pub dir_inodes: usize,
}

/// Creates the directories of a balanced tree for `files` files.
pub fn make_dirs(
    engine: &Engine,
    files: usize,
    files_per_dir: usize,
    dir_fanout: usize,
) -> Result<Tree, FsError> {
    let cred = root();
    let leaves_wanted = files.div_ceil(files_per_dir.max(1)).max(1);
    let groups = leaves_wanted.div_ceil(dir_fanout.max(1));
    let mut window = Window::new(1024);
    let mut tree = Tree {
        leaves: Vec::with_capacity(leaves_wanted),
        leaf_paths: Vec::with_capacity(leaves_wanted),
        dir_inodes: 0,
    };
    for g in 0..groups {
        let gname = format!("g{g:06}");
        let c = engine.mkdir(&cred, Soid::ROOT, gname.as_bytes(), 0o755)?;
        window.push(engine, c.lsn)?;
        let gsoid = c.value.soid;
        tree.dir_inodes += 1;
        for d in 0..dir_fanout {
            let i = g * dir_fanout + d;
            if i >= leaves_wanted {
                break;
            }
            let c = engine.mkdir(&cred, gsoid, &dir_name(i), 0o755)?;
            window.push(engine, c.lsn)?;
            tree.leaves.push(c.value.soid);
            tree.leaf_paths.push(format!("/{gname}/d{i:06}"));
            tree.dir_inodes += 1;
        }
    }
    window.drain(engine)?;
    Ok(tree)
}

/// Where file `i` of a tree goes: leaf `i / files_per_dir`.
pub fn leaf_of(tree: &Tree, i: usize, files_per_dir: usize) -> Soid {
    tree.leaves[(i / files_per_dir.max(1)).min(tree.leaves.len() - 1)]
}

/// Fills a tree with `files` regular files, keeping `in_flight` in flight.
/// Returns the (parent, name, soid) of every file.
pub fn fill_files(
    engine: &Engine,
    tree: &Tree,
    files: usize,
    files_per_dir: usize,
    in_flight: usize,
) -> Result<Vec<(Soid, Soid)>, FsError> {
    let cred = root();
    let mut window = Window::new(in_flight);
    let mut out = Vec::with_capacity(files);
    for i in 0..files {
        let parent = leaf_of(tree, i, files_per_dir);
        let c = engine.create(&cred, parent, &file_name(i), 0o644, true)?;
        window.push(engine, c.lsn)?;
        out.push((parent, c.value.soid));
    }
    window.drain(engine)?;
    Ok(out)
}

/// Builds a whole synthetic namespace of about `inodes` inodes.
pub fn synthetic(
    engine: &Engine,
    inodes: usize,
    files_per_dir: usize,
    dir_fanout: usize,
) -> Result<(Tree, Vec<(Soid, Soid)>), FsError> {
    // Directories are about 1/files_per_dir of the inodes.
    let files = inodes.saturating_sub(1) * files_per_dir / (files_per_dir + 1);
    let tree = make_dirs(engine, files, files_per_dir, dir_fanout)?;
    let files = inodes.saturating_sub(1 + tree.dir_inodes);
    let list = fill_files(engine, &tree, files, files_per_dir, 1024)?;
    Ok((tree, list))
}
