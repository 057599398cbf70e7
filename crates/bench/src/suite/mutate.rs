//! rename (within and across directories) and unlink, one at a time and
//! with many in flight.

use crate::measure::{ratios, secs};
use crate::report::Report;
use crate::workload::{self, Journal, Window};
use sextant_engine::{Engine, RenameFlags};
use sextant_types::Soid;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct MutateArgs {
    /// Files in the namespace (and operations per pipelined measurement).
    #[arg(long, default_value_t = 200_000)]
    pub files: usize,
    /// Operations per measurement with one operation in flight.
    #[arg(long, default_value_t = 2_000)]
    pub serial_ops: usize,
    /// Operations in flight for the pipelined measurement.
    #[arg(long, default_value_t = 1024)]
    pub in_flight: usize,
    #[arg(long, value_enum, default_value_t = Journal::Fsync)]
    pub journal: Journal,
    #[arg(long, default_value_t = 1000)]
    pub files_per_dir: usize,
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
}

fn name(i: usize, gen: u32) -> Vec<u8> {
    if gen == 0 {
        workload::file_name(i)
    } else {
        format!("f{i:07}.{gen}").into_bytes()
    }
}

/// Where each file is now: (leaf index, name generation).
struct Files {
    leaves: Vec<Soid>,
    at: Vec<(usize, u32)>,
}

impl Files {
    /// Renames files `0..n`, within their directory or into the next one;
    /// returns operations per second.
    fn rename_pass(&mut self, engine: &Engine, n: usize, across: bool, k: usize) -> f64 {
        let cred = workload::root();
        let mut window = Window::new(k);
        let start = Instant::now();
        for i in 0..n.min(self.at.len()) {
            let (leaf, gen) = self.at[i];
            let to = if across {
                (leaf + 1) % self.leaves.len()
            } else {
                leaf
            };
            let c = engine
                .rename(
                    &cred,
                    self.leaves[leaf],
                    &name(i, gen),
                    self.leaves[to],
                    &name(i, gen + 1),
                    RenameFlags::default(),
                )
                .expect("rename");
            window.push(engine, c.lsn).expect("wait");
            self.at[i] = (to, gen + 1);
        }
        window.drain(engine).expect("drain");
        n.min(self.at.len()) as f64 / secs(start)
    }
}

pub fn rename(a: &MutateArgs) -> Report {
    let mut report = Report::new("rename", a);
    let dir = workload::fresh_dir(&a.dir, "rename");
    let engine = Engine::open_dir(&dir, workload::serve_config(a.journal)).expect("open");
    let tree = workload::make_dirs(&engine, a.files, a.files_per_dir, 100).expect("mkdirs");
    workload::fill_files(&engine, &tree, a.files, a.files_per_dir, 1024).expect("fill");
    let fpd = a.files_per_dir.max(1);
    let mut files = Files {
        at: (0..a.files).map(|i| (i / fpd, 0)).collect(),
        leaves: tree.leaves.clone(),
    };
    let mut results: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    for (label, across) in [("within a directory", false), ("across directories", true)] {
        let (mut one, mut many) = (vec![], vec![]);
        for rep in 0..a.reps {
            one.push(files.rename_pass(&engine, a.serial_ops, across, 1));
            many.push(files.rename_pass(&engine, a.files, across, a.in_flight));
            eprintln!(
                "rename {label} rep {rep}: {:.0} ops/s (1 in flight), {:.0} ({} in flight)",
                one[rep], many[rep], a.in_flight
            );
        }
        results.push((label.to_string(), one, many));
    }
    for (label, one, many) in &results {
        report.metric(format!("rename {label}, 1 in flight"), "ops/s", one);
        report.metric(
            format!("rename {label}, {} in flight", a.in_flight),
            "ops/s",
            many,
        );
        report.metric(
            format!("rename {label}: {} vs 1 in flight", a.in_flight),
            "ratio",
            &ratios(many, one),
        );
    }
    report.info("journal_syncs", engine.stats().journal_syncs);
    engine.close().expect("close");
    workload::remove_dir(&dir);
    report
}

/// Creates `n` files in a new group of directories (untimed), then unlinks
/// them with `k` in flight; returns unlinks per second.
fn unlink_pass(engine: &Engine, n: usize, fpd: usize, k: usize, pass: usize) -> f64 {
    let cred = workload::root();
    let group = engine
        .mkdir(&cred, Soid::ROOT, format!("u{pass:05}").as_bytes(), 0o755)
        .expect("mkdir")
        .wait(engine)
        .expect("wait");
    let mut leaves = Vec::new();
    for d in 0..n.div_ceil(fpd) {
        let c = engine
            .mkdir(&cred, group.soid, &workload::dir_name(d), 0o755)
            .expect("mkdir");
        leaves.push(c.value.soid);
    }
    let mut window = Window::new(1024);
    for i in 0..n {
        let c = engine
            .create(&cred, leaves[i / fpd], &workload::file_name(i), 0o644, true)
            .expect("create");
        window.push(engine, c.lsn).expect("wait");
    }
    window.drain(engine).expect("drain");
    let mut window = Window::new(k);
    let start = Instant::now();
    for i in 0..n {
        let c = engine
            .unlink(&cred, leaves[i / fpd], &workload::file_name(i))
            .expect("unlink");
        window.push(engine, c.lsn).expect("wait");
    }
    window.drain(engine).expect("drain");
    n as f64 / secs(start)
}

pub fn unlink(a: &MutateArgs) -> Report {
    let mut report = Report::new("unlink", a);
    let dir = workload::fresh_dir(&a.dir, "unlink");
    let engine = Engine::open_dir(&dir, workload::serve_config(a.journal)).expect("open");
    let fpd = a.files_per_dir.max(1);
    let (mut one, mut many) = (vec![], vec![]);
    for rep in 0..a.reps {
        one.push(unlink_pass(&engine, a.serial_ops, fpd, 1, 2 * rep));
        many.push(unlink_pass(&engine, a.files, fpd, a.in_flight, 2 * rep + 1));
        eprintln!(
            "unlink rep {rep}: {:.0} ops/s (1 in flight), {:.0} ({} in flight)",
            one[rep], many[rep], a.in_flight
        );
    }
    report.metric("unlink, 1 in flight", "ops/s", &one);
    report.metric(format!("unlink, {} in flight", a.in_flight), "ops/s", &many);
    report.metric(
        format!("unlink: {} vs 1 in flight", a.in_flight),
        "ratio",
        &ratios(&many, &one),
    );
    engine.close().expect("close");
    workload::remove_dir(&dir);
    report
}
