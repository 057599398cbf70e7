//! Durable creates with K operations in flight, against the same workload
//! with the journal off ("price of durability").

use crate::measure::{ratios, secs};
use crate::report::Report;
use crate::workload::{self, file_name, Journal, Window};
use sextant_engine::Engine;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct CreateArgs {
    /// Files to create per run.
    #[arg(long, default_value_t = 1_000_000)]
    pub inodes: usize,
    /// Operations in flight per issuing thread (wait for the oldest LSN
    /// before issuing more).
    #[arg(long, default_value_t = 1024)]
    pub in_flight: usize,
    /// Issuing threads, each with its own directories and window.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[arg(long, value_enum, default_value_t = Journal::Fsync)]
    pub journal: Journal,
    #[arg(long, default_value_t = 1000)]
    pub files_per_dir: usize,
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Skip the journal-off comparison run.
    #[arg(long)]
    pub no_compare: bool,
    /// Parent directory for scratch stores.
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
}

struct Run {
    ops_per_sec: f64,
    syncs: u64,
    ops: usize,
}

fn run_once(a: &CreateArgs, journal: Journal, rep: usize) -> Run {
    let dir = workload::fresh_dir(&a.dir, &format!("create-{journal:?}-{rep}"));
    let engine = Engine::open_dir(&dir, workload::serve_config(journal)).expect("open engine");
    let tree = workload::make_dirs(&engine, a.inodes, a.files_per_dir, 100).expect("mkdirs");
    let before = engine.stats();
    let threads = a.threads.max(1);
    let fpd = a.files_per_dir.max(1);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let engine = engine.clone();
            let tree = &tree;
            s.spawn(move || {
                let cred = workload::root();
                let mut window = Window::new(a.in_flight);
                for l in (t..tree.leaves.len()).step_by(threads) {
                    for i in l * fpd..((l + 1) * fpd).min(a.inodes) {
                        let c = engine
                            .create(&cred, tree.leaves[l], &file_name(i), 0o644, true)
                            .expect("create");
                        window.push(&engine, c.lsn).expect("wait");
                    }
                }
                window.drain(&engine).expect("drain");
            });
        }
    });
    let elapsed = secs(start);
    let after = engine.stats();
    assert_eq!(
        after.inodes - before.inodes,
        a.inodes as u64,
        "every create landed"
    );
    // close, not drop: a dropped engine's flusher lives on until its next
    // tick and would write into the next repetition (docs/BENCHMARKS.md).
    engine.close().expect("close");
    workload::remove_dir(&dir);
    Run {
        ops_per_sec: a.inodes as f64 / elapsed,
        syncs: after.journal_syncs - before.journal_syncs,
        ops: a.inodes,
    }
}

pub fn run(a: &CreateArgs) -> Report {
    let mut report = Report::new("create", a);
    let compare = !a.no_compare && a.journal != Journal::Off;
    let (mut rate, mut off_rate, mut per_sync) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..a.reps {
        let r = run_once(a, a.journal, rep);
        eprintln!(
            "create rep {rep}: {:?} {:.0} ops/s, {} syncs",
            a.journal, r.ops_per_sec, r.syncs
        );
        rate.push(r.ops_per_sec);
        per_sync.push(if r.syncs == 0 {
            f64::NAN
        } else {
            r.ops as f64 / r.syncs as f64
        });
        if compare {
            let off = run_once(a, Journal::Off, rep);
            eprintln!("create rep {rep}: Off {:.0} ops/s", off.ops_per_sec);
            off_rate.push(off.ops_per_sec);
        }
    }
    let label = format!(
        "creates/s journal={:?} in_flight={} threads={}",
        a.journal, a.in_flight, a.threads
    );
    let m = report.metric(label, "ops/s", &rate);
    if a.journal != Journal::Off && a.in_flight * a.threads >= 1024 {
        m.target(">= 100,000 durable creates/s", 100_000.0, true);
    }
    if a.journal != Journal::Off {
        report.metric("operations per journal sync", "ops/sync", &per_sync);
    }
    if compare {
        report.metric("creates/s journal=Off (same run)", "ops/s", &off_rate);
        report.metric(
            "durable / journal-off throughput",
            "ratio",
            &ratios(&rate, &off_rate),
        );
    }
    report
}
