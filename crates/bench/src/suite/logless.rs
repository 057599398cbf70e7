//! Log-less recovery: N operations acknowledged with log-less durability
//! and nothing written back, then a "crash"; recovery is given every redo
//! entry (what the clients would hand back) and replays them by the stamp
//! rule, then writes everything back. The comparison is `recovery` (the
//! journal's replay of the same workload), run beside it.

use crate::measure::{rss_bytes, timed};
use crate::report::Report;
use crate::suite::recovery::RecoveryArgs;
use crate::workload::{self, Journal};
use sextant_engine::{Engine, EngineConfig, EngineStats, LoglessConfig};
use std::io::{Read, Write};
use std::path::Path;

fn config() -> EngineConfig {
    let mut c = workload::build_config(Journal::Off);
    c.logless = Some(LoglessConfig {
        // Keep every entry in the ARL, so the benchmark can hand them all
        // back (a real client keeps those its replies carried).
        arl_size: usize::MAX / 2,
        max_backup_bytes: u64::MAX,
    });
    c
}

/// Builds the store and the backups file, then exits without close.
pub fn prepare(a: &RecoveryArgs) -> ! {
    let dir = workload::fresh_dir(&a.dir, "logless-src");
    let engine = Engine::open_dir(&dir, config()).expect("open");
    let tree = workload::make_dirs(&engine, a.records, a.files_per_dir, 100).expect("mkdirs");
    workload::fill_files(&engine, &tree, a.records, a.files_per_dir, 1024).expect("fill");
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(a.dir.join("logless-backups")).expect("backups file"),
    );
    for r in engine.arl_since(0) {
        out.write_all(&(r.bytes.len() as u32).to_le_bytes())
            .and_then(|()| out.write_all(&r.bytes))
            .expect("write backups");
    }
    out.flush().expect("flush backups");
    let st = engine.stats();
    println!("{}", serde_json::to_string(&st).expect("stats"));
    std::process::exit(0)
}

fn read_backups(path: &Path) -> Vec<Vec<u8>> {
    let mut b = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut b))
        .expect("read backups");
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= b.len() {
        let n = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
        out.push(b[at + 4..at + 4 + n].to_vec());
        at += 4 + n;
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    workload::remove_dir(to);
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

pub fn recovery(a: &RecoveryArgs) -> Report {
    let mut report = Report::new("logless-recovery", a);
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe)
        .arg("logless-recovery-prepare")
        .args(["--records", &a.records.to_string()])
        .args(["--files-per-dir", &a.files_per_dir.to_string()])
        .arg("--dir")
        .arg(&a.dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the crashing child");
    assert!(out.status.success(), "logless-recovery-prepare failed");
    let built: EngineStats = serde_json::from_slice(&out.stdout).expect("child stats");
    let src = a.dir.join("logless-src");
    let run = a.dir.join("logless-run");
    let backups_path = a.dir.join("logless-backups");
    report.info("redo_entries", built.durable_lsn);
    report.info(
        "backup_bytes",
        std::fs::metadata(&backups_path).map_or(0, |m| m.len()),
    );
    let (mut total_s, mut rss) = (vec![], vec![]);
    for rep in 0..a.reps {
        // Each repetition recovers a fresh copy of the crashed store.
        copy_dir(&src, &run);
        let backups = read_backups(&backups_path);
        let before = rss_bytes();
        let (s, recovered) = timed(|| {
            let e = Engine::open_dir(&run, config()).expect("open");
            let report = e.recover_logless(backups).expect("recover");
            (e, report)
        });
        let (engine, r) = recovered;
        assert!(!r.maybe_lost(), "nothing is missing: {r:?}");
        let st = engine.stats();
        assert_eq!(st.inodes, built.inodes, "recovered every inode");
        eprintln!(
            "log-less recovery rep {rep}: {s:.2} s, {} entries applied, {} inodes",
            r.applied, st.inodes
        );
        total_s.push(s);
        rss.push(rss_bytes().saturating_sub(before) as f64 / (1 << 20) as f64);
        drop(engine);
    }
    report.metric(
        format!(
            "recover {} backed-up operations (open + replay + write-back)",
            built.durable_lsn
        ),
        "s",
        &total_s,
    );
    report.metric("replay rate", "operations/s", &{
        total_s
            .iter()
            .map(|s| built.durable_lsn as f64 / s)
            .collect::<Vec<_>>()
    });
    report.metric("RSS growth during recovery", "MiB", &rss);
    workload::remove_dir(&src);
    workload::remove_dir(&run);
    let _ = std::fs::remove_file(&backups_path);
    report
}
