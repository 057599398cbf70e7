//! Reads on cached tables: getattr, lookup by name, readdir.

use crate::measure::{cpu_seconds, ratios, secs, Rng};
use crate::report::Report;
use crate::workload::{self, file_name, Journal};
use sextant_engine::Engine;
use sextant_types::Soid;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct StatArgs {
    /// Size of the namespace (synthetic, all tables loaded).
    #[arg(long, default_value_t = 1_000_000)]
    pub inodes: usize,
    /// Operations per measurement (split over the threads).
    #[arg(long, default_value_t = 4_000_000)]
    pub ops: usize,
    /// Threads for the multi-threaded measurement (compared with 1).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    #[arg(long, default_value_t = 1000)]
    pub files_per_dir: usize,
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
}

/// Runs `op(i)` for `ops` random indices below `n` on `threads` threads;
/// returns operations per second and the CPU cores the process used on
/// average meanwhile (below `threads`: the machine was busy).
fn parallel(
    threads: usize,
    ops: usize,
    n: usize,
    seed: u64,
    op: impl Fn(usize) + Sync,
) -> (f64, f64) {
    let per = ops / threads.max(1);
    let cpu = cpu_seconds();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads.max(1) {
            let op = &op;
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((t as u64 + 1) * 0x1234_5678));
                for _ in 0..per {
                    op(rng.below(n));
                }
            });
        }
    });
    let wall = secs(start);
    (
        (per * threads.max(1)) as f64 / wall,
        (cpu_seconds() - cpu) / wall,
    )
}

pub fn stat(a: &StatArgs) -> Report {
    let mut report = Report::new("stat", a);
    let dir = workload::fresh_dir(&a.dir, "stat");
    let engine = Engine::open_dir(&dir, workload::build_config(Journal::Off)).expect("open");
    let (_tree, files) =
        workload::synthetic(&engine, a.inodes, a.files_per_dir, 100).expect("build namespace");
    let names: Vec<Vec<u8>> = (0..files.len()).map(file_name).collect();
    let cred = workload::root();
    let n = files.len();
    let getattr = |i: usize| {
        let attr = engine.getattr(files[i].1).expect("getattr");
        std::hint::black_box(attr);
    };
    let lookup = |i: usize| {
        let attr = engine.lookup(&cred, files[i].0, &names[i]).expect("lookup");
        debug_assert_eq!(attr.soid, files[i].1);
        std::hint::black_box(attr);
    };
    let t = a.threads.max(1);
    let (mut g1, mut gt, mut l1, mut lt) = (vec![], vec![], vec![], vec![]);
    let (mut g_cpu, mut l_cpu) = (vec![], vec![]);
    for rep in 0..a.reps {
        let seed = rep as u64;
        g1.push(parallel(1, a.ops / 2, n, seed, getattr).0);
        let (rate, cpu) = parallel(t, a.ops, n, seed, getattr);
        gt.push(rate);
        g_cpu.push(cpu);
        l1.push(parallel(1, a.ops / 2, n, seed, lookup).0);
        let (rate, cpu) = parallel(t, a.ops, n, seed, lookup);
        lt.push(rate);
        l_cpu.push(cpu);
        eprintln!(
            "stat rep {rep}: getattr {:.0}/{:.0}, lookup {:.0}/{:.0} ops/s (1/{t} threads), \
             cores used {:.2}/{:.2}",
            g1[rep], gt[rep], l1[rep], lt[rep], g_cpu[rep], l_cpu[rep]
        );
    }
    report.metric("getattr/s, 1 thread", "ops/s", &g1);
    report
        .metric(format!("getattr/s, {t} threads"), "ops/s", &gt)
        .target(">= 1,000,000 getattr/s (2 threads)", 1e6, true);
    report.metric(
        format!("getattr scaling {t} vs 1"),
        "ratio",
        &ratios(&gt, &g1),
    );
    report.metric(
        format!("CPU cores used, getattr {t} threads"),
        "cores",
        &g_cpu,
    );
    report.metric("lookup/s, 1 thread", "ops/s", &l1);
    report.metric(format!("lookup/s, {t} threads"), "ops/s", &lt);
    report.metric(
        format!("lookup scaling {t} vs 1"),
        "ratio",
        &ratios(&lt, &l1),
    );
    report.metric(
        format!("CPU cores used, lookup {t} threads"),
        "cores",
        &l_cpu,
    );
    report.metric("lookup / getattr cost", "ratio", &ratios(&gt, &lt));
    let st = engine.stats();
    report.info("inodes", st.inodes);
    report.info("tables", st.tables);
    report.info("resident_bytes", st.resident_bytes);
    drop(engine);
    workload::remove_dir(&dir);
    report
}

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct ReaddirArgs {
    /// Directories to list.
    #[arg(long, default_value_t = 1000)]
    pub dirs: usize,
    /// Entries per directory.
    #[arg(long, default_value_t = 1000)]
    pub entries: usize,
    /// Entries asked for per readdir call.
    #[arg(long, default_value_t = 1024)]
    pub page: usize,
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
}

fn list_all(engine: &Engine, dirs: &[Soid], threads: usize, page: usize) -> (f64, usize) {
    let start = Instant::now();
    let total: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|t| {
                s.spawn(move || {
                    let cred = workload::root();
                    let mut count = 0usize;
                    for d in dirs.iter().skip(t).step_by(threads.max(1)) {
                        let mut after = 0;
                        loop {
                            let page = engine.readdir(&cred, *d, after, page).expect("readdir");
                            let Some(last) = page.last() else { break };
                            after = last.cookie;
                            count += page.len();
                        }
                    }
                    count
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    (secs(start), total)
}

pub fn readdir(a: &ReaddirArgs) -> Report {
    let mut report = Report::new("readdir", a);
    let dir = workload::fresh_dir(&a.dir, "readdir");
    let engine = Engine::open_dir(&dir, workload::build_config(Journal::Off)).expect("open");
    let files = a.dirs * a.entries;
    let tree = workload::make_dirs(&engine, files, a.entries, 100).expect("mkdirs");
    workload::fill_files(&engine, &tree, files, a.entries, 1024).expect("fill");
    let t = a.threads.max(1);
    let (mut e1, mut d1, mut et, mut dt) = (vec![], vec![], vec![], vec![]);
    for rep in 0..a.reps {
        let (s1, n1) = list_all(&engine, &tree.leaves, 1, a.page);
        let (st, nt) = list_all(&engine, &tree.leaves, t, a.page);
        assert_eq!(n1, files, "every entry listed");
        assert_eq!(nt, files, "every entry listed");
        e1.push(n1 as f64 / s1);
        d1.push(a.dirs as f64 / s1);
        et.push(nt as f64 / st);
        dt.push(a.dirs as f64 / st);
        eprintln!(
            "readdir rep {rep}: {:.0} entries/s (1 thread), {:.0} ({t} threads)",
            e1[rep], et[rep]
        );
    }
    report.metric("readdir entries/s, 1 thread", "entries/s", &e1);
    report.metric(
        format!("readdir dirs/s ({} entries), 1 thread", a.entries),
        "dirs/s",
        &d1,
    );
    report.metric(format!("readdir entries/s, {t} threads"), "entries/s", &et);
    report.metric(
        format!("readdir dirs/s ({} entries), {t} threads", a.entries),
        "dirs/s",
        &dt,
    );
    report.metric(
        format!("readdir scaling {t} vs 1"),
        "ratio",
        &ratios(&et, &e1),
    );
    drop(engine);
    workload::remove_dir(&dir);
    report
}
