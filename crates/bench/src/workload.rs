//! Workload generation: engine configurations, store directories,
//! synthetic balanced trees and a window of operations in flight.

use crate::measure::Rng;
use clap::ValueEnum;
use sextant_engine::{Engine, EngineConfig, Lsn, SyncMode};
use sextant_types::{Credentials, FsError, Nanos, SetAttr, Soid, TimeSet};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Journal mode as given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Journal {
    Fsync,
    /// `fsync` in the background every 5 ms (`serve --journal-sync background`).
    Background,
    Nosync,
    Off,
}

impl Journal {
    pub fn mode(self) -> SyncMode {
        match self {
            Journal::Fsync => SyncMode::Fsync,
            Journal::Background => SyncMode::Background(std::time::Duration::from_millis(5)),
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
    let (tree, files) = balanced_tree(engine, inodes, files_per_dir, dir_fanout)?;
    let list = fill_files(engine, &tree, files, files_per_dir, 1024)?;
    Ok((tree, list))
}

/// The directories of a balanced tree for a namespace of about `inodes`
/// inodes, and how many files fill it to that size.
fn balanced_tree(
    engine: &Engine,
    inodes: usize,
    files_per_dir: usize,
    dir_fanout: usize,
) -> Result<(Tree, usize), FsError> {
    // Directories are about 1/files_per_dir of the inodes.
    let files = inodes.saturating_sub(1) * files_per_dir / (files_per_dir + 1);
    let tree = make_dirs(engine, files, files_per_dir, dir_fanout)?;
    let files = inodes.saturating_sub(1 + tree.dir_inodes);
    Ok((tree, files))
}

/// One file of the varied synthetic shape ([`varied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariedFile {
    pub name: Vec<u8>,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: Nanos,
    pub mtime: Nanos,
}

/// Name stems of the varied shape (what an HPC project directory holds).
const STEMS: [&str; 24] = [
    "checkpoint",
    "restart",
    "output",
    "input",
    "mesh",
    "frame",
    "sample",
    "trace",
    "report",
    "analysis",
    "config",
    "params",
    "results",
    "snapshot",
    "particles",
    "density",
    "velocity",
    "spectrum",
    "histogram",
    "catalog",
    "model",
    "weights",
    "summary",
    "debug",
];

/// Extensions of the varied shape.
const EXTENSIONS: [&str; 16] = [
    "h5", "nc", "dat", "bin", "txt", "log", "csv", "json", "yaml", "out", "err", "tar", "gz", "py",
    "c", "sh",
];

/// The varied shape's clock: times fall in the two years before this
/// instant (2026-01-01T00:00:00Z).
const VARIED_NOW_S: i64 = 1_767_225_600;

/// File `i` of the varied shape: a pure function of `i`, so a build is the
/// same every time. Distributions (documented in docs/BENCHMARKS.md, §8):
/// names `{stem}_{i:07}.{ext}` (24 stems, 16 extensions); 1,000 owners,
/// skewed (uid 1000 + ⌊1000·u³⌋: a few own most files), group = 100 +
/// uid mod 50; size 0 for 8%, else log-uniform from 1 B to 64 GiB; mtime
/// uniform over two years, atime up to 30 days later; mode 0644 (80%),
/// 0640 (10%), 0755 (7%), 0600 (3%).
pub fn varied_file(i: usize) -> VariedFile {
    let mut rng = Rng::new((i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
    let unit = |rng: &mut Rng| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let stem = STEMS[rng.below(STEMS.len())];
    let ext = EXTENSIONS[rng.below(EXTENSIONS.len())];
    let u = unit(&mut rng);
    let uid = 1000 + (1000.0 * u * u * u) as u32;
    let size = if rng.below(100) < 8 {
        0
    } else {
        (unit(&mut rng) * 36.0 * std::f64::consts::LN_2).exp() as u64
    };
    const DAY_NS: i64 = 86_400 * 1_000_000_000;
    let mtime = VARIED_NOW_S * 1_000_000_000 - (unit(&mut rng) * 730.0 * DAY_NS as f64) as i64;
    let atime = mtime + (unit(&mut rng) * 30.0 * DAY_NS as f64) as i64;
    let perm = match rng.below(100) {
        0..80 => 0o644,
        80..90 => 0o640,
        90..97 => 0o755,
        _ => 0o600,
    };
    VariedFile {
        name: format!("{stem}_{i:07}.{ext}").into_bytes(),
        perm,
        uid,
        gid: 100 + uid % 50,
        size,
        atime: Nanos(atime),
        mtime: Nanos(mtime.max(0)),
    }
}

/// Builds the varied synthetic namespace of about `inodes` inodes: the
/// tree of [`synthetic`], each file made by a create and a setattr as
/// [`varied_file`] says (as the real shape is imported).
pub fn varied(
    engine: &Engine,
    inodes: usize,
    files_per_dir: usize,
    dir_fanout: usize,
) -> Result<(Tree, usize), FsError> {
    let cred = root();
    let (tree, files) = balanced_tree(engine, inodes, files_per_dir, dir_fanout)?;
    let mut window = Window::new(1024);
    for i in 0..files {
        let f = varied_file(i);
        let parent = leaf_of(&tree, i, files_per_dir);
        let c = engine.create(&cred, parent, &f.name, f.perm, true)?;
        window.push(engine, c.lsn)?;
        let set = SetAttr {
            uid: Some(f.uid),
            gid: Some(f.gid),
            size: Some(f.size),
            atime: Some(TimeSet::At(f.atime)),
            mtime: Some(TimeSet::At(f.mtime)),
            ..SetAttr::default()
        };
        let c = engine.setattr(&cred, c.value.soid, &set)?;
        window.push(engine, c.lsn)?;
    }
    window.drain(engine)?;
    Ok((tree, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The varied shape is a pure function of the index, and its
    /// distributions stay within what docs/BENCHMARKS.md says.
    #[test]
    fn varied_files_are_reproducible_and_within_their_distributions() {
        let n = 20_000;
        let files: Vec<VariedFile> = (0..n).map(varied_file).collect();
        assert_eq!(files[123], varied_file(123));
        let names: std::collections::HashSet<&[u8]> = files.iter().map(|f| &f.name[..]).collect();
        assert_eq!(names.len(), n, "names are unique");
        let empty = files.iter().filter(|f| f.size == 0).count();
        assert!(
            (n * 6 / 100..n * 10 / 100).contains(&empty),
            "{empty} empty"
        );
        let two_years_ns = 730 * 86_400 * 1_000_000_000i64;
        for f in &files {
            assert!((1000..2000).contains(&f.uid) && f.gid == 100 + f.uid % 50);
            assert!(f.size <= 1 << 36);
            let age = VARIED_NOW_S * 1_000_000_000 - f.mtime.0;
            assert!((0..=two_years_ns).contains(&age));
            assert!(f.atime.0 >= f.mtime.0);
            assert!([0o644, 0o640, 0o755, 0o600].contains(&f.perm));
            assert!(f.name.len() >= 10, "long enough for the name queries");
        }
        // Skewed owners: the lowest tenth of the uids owns ~46% of the
        // files (1000·u³ < 100 for u < 0.464), not a tenth.
        let heavy = files.iter().filter(|f| f.uid < 1100).count();
        assert!((n * 2 / 5..n / 2).contains(&heavy), "{heavy}");
    }
}
