//! Large namespaces: build (synthetic or shaped like a real tree), memory
//! per inode, and the first lookup after a restart.

use crate::import;
use crate::measure::{rss_bytes, timed};
use crate::report::Report;
use crate::workload::{self, Journal};
use clap::ValueEnum;
use sextant_engine::Engine;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Shape {
    /// Balanced: `files_per_dir` files per leaf directory.
    Synthetic,
    /// Imported from local trees (`--roots`) and copied until N inodes.
    Real,
    /// The synthetic tree with names, owners, sizes, times and modes drawn
    /// from fixed distributions (`workload::varied_file`): the synthetic
    /// namespace of the search benchmark.
    Varied,
}

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct BuildArgs {
    #[arg(long, default_value_t = 1_000_000)]
    pub inodes: usize,
    #[arg(long, value_enum, default_value_t = Shape::Synthetic)]
    pub shape: Shape,
    #[arg(long, default_value_t = 1000)]
    pub files_per_dir: usize,
    /// Leaf directories per top-level directory (synthetic shape).
    #[arg(long, default_value_t = 100)]
    pub dir_fanout: usize,
    /// Trees to import for the real shape (default: /usr and ~/.rustup).
    #[arg(long, value_delimiter = ',')]
    pub roots: Vec<PathBuf>,
    /// Store directory (kept for `memory` and `restart`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Do not measure memory in a fresh process after the build.
    #[arg(long)]
    pub no_memory: bool,
}

/// What `build` leaves beside the store for later commands.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    pub inodes: u64,
    pub shape: String,
    pub deep_path: String,
}

fn meta_path(dir: &Path) -> PathBuf {
    let mut p = dir.as_os_str().to_owned();
    p.push(".meta.json");
    PathBuf::from(p)
}

fn default_roots() -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("/usr")];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(Path::new(&home).join(".rustup"));
    }
    roots
}

pub fn build(a: &BuildArgs) -> Report {
    let mut report = Report::new("build", a);
    let rss_start = rss_bytes();
    let template = match a.shape {
        Shape::Synthetic | Shape::Varied => None,
        Shape::Real => {
            let roots = if a.roots.is_empty() {
                default_roots()
            } else {
                a.roots.clone()
            };
            let names: Vec<String> = roots
                .iter()
                .map(|r| {
                    r.file_name()
                        .map(|n| n.to_string_lossy().trim_start_matches('.').to_string())
                        .unwrap_or_else(|| "root".into())
                })
                .collect();
            let pairs: Vec<(&Path, &str)> = roots
                .iter()
                .map(PathBuf::as_path)
                .zip(names.iter().map(String::as_str))
                .collect();
            let (s, t) = timed(|| import::walk(&pairs));
            eprintln!(
                "walked {} entries in {s:.1} s ({} skipped)",
                t.entries.len(),
                t.skipped
            );
            report.info("template_inodes", t.entries.len());
            report.info("template_walk_seconds", s);
            Some(t)
        }
    };
    workload::remove_dir(&a.dir);
    std::fs::create_dir_all(&a.dir).expect("create store dir");
    let engine = Engine::open_dir(&a.dir, workload::build_config(Journal::Off)).expect("open");
    let rss_base = rss_bytes();
    // The path of the last file of a synthetic tree (the deepest SOID).
    let last_path = |tree: &workload::Tree, files: usize, name: &[u8]| {
        let last = files.saturating_sub(1);
        let leaf = (last / a.files_per_dir.max(1)).min(tree.leaf_paths.len() - 1);
        format!(
            "{}/{}",
            tree.leaf_paths[leaf],
            String::from_utf8_lossy(name)
        )
    };
    let (seconds, deep_path) = match (&template, a.shape) {
        (None, Shape::Varied) => timed(|| {
            let (tree, files) =
                workload::varied(&engine, a.inodes, a.files_per_dir, a.dir_fanout).expect("build");
            let name = workload::varied_file(files.saturating_sub(1)).name;
            last_path(&tree, files, &name)
        }),
        (None, _) => timed(|| {
            let (tree, files) =
                workload::synthetic(&engine, a.inodes, a.files_per_dir, a.dir_fanout)
                    .expect("build");
            let last = files.len().saturating_sub(1);
            last_path(&tree, files.len(), &workload::file_name(last))
        }),
        (Some(t), _) => timed(|| {
            let copies = import::import(&engine, t, a.inodes).expect("import");
            eprintln!("imported {copies} copies");
            t.path_of(t.deepest, &format!("/{}", import::copy_dir_name(0)))
        }),
    };
    let rss_built = rss_bytes();
    let st = engine.stats();
    let n = st.inodes as f64;
    report.metric("build rate (journal off)", "inodes/s", &[n / seconds]);
    report.metric(
        "RSS growth during build / inode (all included)",
        "bytes",
        &[(rss_built - rss_base) as f64 / n],
    );
    report.metric(
        "engine resident_bytes / inode after build",
        "bytes",
        &[st.resident_bytes as f64 / n],
    );
    report.info("inodes", st.inodes);
    report.info("tables", st.tables);
    report.info("splits", st.splits);
    report.info("rss_start", rss_start);
    report.info("rss_base", rss_base);
    report.info("rss_built", rss_built);
    report.info("deep_path", &deep_path);
    let (close_s, r) = timed(|| engine.close());
    r.expect("close");
    report.metric("close (write all snapshots)", "s", &[close_s]);
    let meta = Meta {
        inodes: st.inodes,
        shape: format!("{:?}", a.shape),
        deep_path,
    };
    std::fs::write(
        meta_path(&a.dir),
        serde_json::to_vec_pretty(&meta).expect("meta"),
    )
    .expect("write meta");
    let du = dir_bytes(&a.dir);
    report.metric("on-disk bytes / inode", "bytes", &[du as f64 / n]);
    if !a.no_memory {
        // A fresh process: nothing left over from building.
        let exe = std::env::current_exe().expect("current exe");
        let out = std::process::Command::new(exe)
            .args(["--json", "memory", "--dir"])
            .arg(&a.dir)
            .output()
            .expect("run memory child");
        match serde_json::from_slice::<Report>(&out.stdout) {
            Ok(child) => report.metrics.extend(child.metrics),
            Err(e) => eprintln!(
                "memory child failed: {e}\n{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
    report
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                stack.push(e.path());
            } else {
                total += md.len();
            }
        }
    }
    total
}

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct DirArgs {
    /// A store made by `build`.
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
}

fn read_meta(dir: &Path) -> Meta {
    let bytes = std::fs::read(meta_path(dir)).expect("read meta (run `build` first)");
    serde_json::from_slice(&bytes).expect("parse meta")
}

/// Opens the store in this (fresh) process, loads every table and
/// measures resident memory.
pub fn memory(a: &DirArgs) -> Report {
    let mut report = Report::new("memory", a);
    let rss0 = rss_bytes();
    let engine = Engine::open_dir(&a.dir, workload::build_config(Journal::Fsync)).expect("open");
    let rss_open = rss_bytes();
    let (load_s, r) = timed(|| engine.for_each_table(|_| ()));
    r.expect("load all tables");
    let rss_loaded = rss_bytes();
    let st = engine.stats();
    let n = st.inodes as f64;
    report
        .metric(
            "RSS / inode, all tables loaded (fresh process, all included)",
            "bytes",
            &[(rss_loaded - rss0) as f64 / n],
        )
        .target("<= 200 bytes/inode at 10M", 200.0, false);
    report.metric(
        "engine resident_bytes / inode, all loaded",
        "bytes",
        &[st.resident_bytes as f64 / n],
    );
    report.metric("load every table", "s", &[load_s]);
    report.info("inodes", st.inodes);
    report.info("tables", st.tables);
    report.info("rss_process_start", rss0);
    report.info("rss_after_open", rss_open);
    report.info("rss_all_loaded", rss_loaded);
    report
}

/// Opens a cleanly closed store and resolves one deep path, `reps` times.
pub fn restart(a: &DirArgs) -> Report {
    let mut report = Report::new("restart", a);
    let meta = read_meta(&a.dir);
    let cred = workload::root();
    let (mut open_s, mut first_s, mut total_s, mut warm_s) = (vec![], vec![], vec![], vec![]);
    let mut loaded = 0;
    for rep in 0..a.reps {
        let (o, engine) =
            timed(|| Engine::open_dir(&a.dir, workload::serve_config(Journal::Fsync)));
        let engine = engine.expect("open");
        let (f, attr) = timed(|| engine.resolve(&cred, meta.deep_path.as_bytes(), false));
        attr.expect("resolve deep path");
        let (w, attr) = timed(|| engine.resolve(&cred, meta.deep_path.as_bytes(), false));
        attr.expect("resolve deep path");
        loaded = engine.stats().tables_loaded_total;
        eprintln!("restart rep {rep}: open {o:.4} s, first resolve {f:.4} s, again {w:.6} s");
        open_s.push(o);
        first_s.push(f);
        total_s.push(o + f);
        warm_s.push(w * 1e6);
        // close, not drop: a dropped engine's flusher keeps the store
        // locked until its next tick (see docs/BENCHMARKS.md).
        engine.close().expect("close");
    }
    report.metric("open_dir", "s", &open_s);
    report.metric("first resolve of the deep path", "s", &first_s);
    report
        .metric("open + first resolve", "s", &total_s)
        .target("<= 1 s", 1.0, false);
    report.metric("second resolve (warm)", "us", &warm_s);
    report.info("inodes", meta.inodes);
    report.info("deep_path", &meta.deep_path);
    report.info("tables_loaded_for_first_resolve", loaded);
    report.info("page_cache", "warm (not dropped)");
    report
}
