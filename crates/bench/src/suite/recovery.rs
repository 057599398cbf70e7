//! Recovery: replay a journal of N records left by a "crash" (nothing
//! checkpointed, no close).

use crate::measure::{rss_bytes, timed};
use crate::report::Report;
use crate::workload::{self, Journal};
use sextant_engine::{Engine, EngineStats};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct RecoveryArgs {
    /// Files created before the crash (one journal record each, plus one
    /// per directory).
    #[arg(long, default_value_t = 1_000_000)]
    pub records: usize,
    /// Journal mode while building (the journal's contents are the same;
    /// nosync only makes building faster).
    #[arg(long, value_enum, default_value_t = Journal::Nosync)]
    pub journal: Journal,
    #[arg(long, default_value_t = 1000)]
    pub files_per_dir: usize,
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
}

/// Builds the journal and "crashes": exits the process without close, so
/// nothing is checkpointed and no destructor runs. Prints the engine's
/// counters as JSON. (Run as a child: the store's LOCK is per process.)
pub fn prepare(a: &RecoveryArgs) -> ! {
    let dir = workload::fresh_dir(&a.dir, "recovery");
    let engine = Engine::open_dir(&dir, workload::build_config(a.journal)).expect("open");
    let tree = workload::make_dirs(&engine, a.records, a.files_per_dir, 100).expect("mkdirs");
    workload::fill_files(&engine, &tree, a.records, a.files_per_dir, 1024).expect("fill");
    let st = engine.stats();
    println!("{}", serde_json::to_string(&st).expect("stats"));
    std::process::exit(0)
}

pub fn recovery(a: &RecoveryArgs) -> Report {
    let mut report = Report::new("recovery", a);
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe)
        .arg("recovery-prepare")
        .args(["--records", &a.records.to_string()])
        .args(["--files-per-dir", &a.files_per_dir.to_string()])
        .arg("--journal")
        .arg(format!("{:?}", a.journal).to_lowercase())
        .arg("--dir")
        .arg(&a.dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the crashing child");
    assert!(out.status.success(), "recovery-prepare failed");
    let built: EngineStats = serde_json::from_slice(&out.stdout).expect("child stats");
    let dir = a.dir.join("recovery");
    report.info("journal_bytes", built.journal_bytes);
    report.info("journal_records", built.durable_lsn);
    report.info("checkpoints_before_crash", built.checkpoints);
    report.info("tables_before_crash", built.tables);
    let (mut open_s, mut rss) = (vec![], vec![]);
    for rep in 0..a.reps {
        let before = rss_bytes();
        let (s, engine) = timed(|| Engine::open_dir(&dir, workload::build_config(Journal::Fsync)));
        let engine = engine.expect("recover");
        let st = engine.stats();
        assert_eq!(st.inodes, built.inodes, "recovered every inode");
        report.info("tables_after_recovery", st.tables);
        report.info("loaded_tables_after_recovery", st.loaded_tables);
        eprintln!("recovery rep {rep}: {s:.2} s, {} inodes", st.inodes);
        open_s.push(s);
        rss.push(rss_bytes().saturating_sub(before) as f64 / (1 << 20) as f64);
        // Drop without close: the next repetition replays the same journal.
        drop(engine);
    }
    report
        .metric(
            format!("recover {} journal records (open_dir)", built.durable_lsn),
            "s",
            &open_s,
        )
        .target("<= 5 s", 5.0, false);
    report.metric("replay rate", "records/s", &{
        open_s
            .iter()
            .map(|s| built.durable_lsn as f64 / s)
            .collect::<Vec<_>>()
    });
    report.metric("RSS growth during recovery", "MiB", &rss);
    workload::remove_dir(&dir);
    report
}
