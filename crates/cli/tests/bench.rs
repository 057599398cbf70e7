//! `sextant bench` end to end with tiny sizes, so it does not rot: over the
//! client library against a real `sextant serve`, and with `--dir` on a
//! `sextant mount` from two worker processes (skipped without FUSE).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{fuse_available, is_mounted, spawn_server, spawn_server_with, KillOnDrop, BIN};

/// Runs `sextant <args> --json` and returns the report.
fn bench_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(BIN).args(args).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "sextant {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

fn phases(report: &serde_json::Value) -> Vec<(String, u64)> {
    report["median"]
        .as_array()
        .expect("median phases")
        .iter()
        .map(|p| {
            assert!(p["ops_per_sec"].as_f64().unwrap() > 0.0, "{p}");
            assert!(p["p99_us"].as_f64().unwrap() >= p["p50_us"].as_f64().unwrap());
            (
                p["phase"].as_str().unwrap().to_string(),
                p["ops"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn bench_over_the_client_library() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, addr) = spawn_server(&data, "fsync", "127.0.0.1:0");
    let _server = KillOnDrop(server);
    let data = data.to_str().unwrap();
    let common = ["--server", &addr, "--data", data, "bench", "-q"];

    let r = bench_json(
        &[
            &common[..],
            &["--tasks", "3", "--items", "7", "--reps", "2"],
        ]
        .concat(),
    );
    let p = phases(&r);
    let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "file-create",
            "file-stat",
            "file-lookup",
            "file-readdir",
            "file-remove",
            "dir-create",
            "dir-stat",
            "dir-lookup",
            "dir-readdir",
            "dir-remove"
        ]
    );
    assert_eq!(p[0].1, 21);
    assert_eq!(p[3].1, 30, "3 workers × 10 listings");
    assert_eq!(r["runs"].as_array().unwrap().len(), 2);
    // Durable creates were journaled: the server's syncs are reported.
    assert!(r["median"][0]["journal_syncs"].as_u64().unwrap() > 0);

    // Shared directory, files only, one phase timed.
    let r = bench_json(
        &[
            &common[..],
            &[
                "--tasks", "4", "--items", "5", "--shared", "-F", "--phases", "stat",
            ],
        ]
        .concat(),
    );
    assert_eq!(phases(&r), [("file-stat".to_string(), 20)]);
    // A journaling server hands out no backups: none reported.
    assert!(r.get("backups").is_none(), "{r}");

    // Nothing left behind.
    let out = Command::new(BIN)
        .args(["--server", &addr, "--data", data, "ls", "/"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");
}

/// Against a log-less server the report says what the client held for
/// the server's recovery when the run ended.
#[test]
fn bench_reports_the_backups_a_client_holds_for_a_log_less_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, addr) = spawn_server_with(
        &data,
        "127.0.0.1:0",
        &["--durability", "logless"],
        std::process::Stdio::inherit(),
    );
    let _server = KillOnDrop(server);
    let data = data.to_str().unwrap();
    let r = bench_json(&[
        "--server", &addr, "--data", data, "bench", "-q", "--tasks", "2", "--items", "10", "-F",
        "--phases", "create",
    ]);
    assert_eq!(phases(&r), [("file-create".to_string(), 20)]);
    let b = &r["backups"];
    // every create (and the run's mkdirs, the cleanup's removes) came
    // back with at least its own entry
    assert!(b["received"].as_u64().unwrap() >= 20, "{r}");
    assert!(
        b["peak_bytes"].as_u64().unwrap() >= b["bytes"].as_u64().unwrap(),
        "{r}"
    );
    assert!(b["peak_bytes"].as_u64().unwrap() > 0, "{r}");
}

/// Unmounts (lazily) when dropped, however the test ends.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(self.0)
            .status();
        let t = Instant::now();
        while is_mounted(self.0) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn bench_on_a_mount_from_two_processes() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, addr) = spawn_server(&data, "fsync", "127.0.0.1:0");
    let _server = KillOnDrop(server);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(BIN)
        .args(["--server", &addr, "--data"])
        .arg(&data)
        .arg("mount")
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _unmount = Unmount(&mnt);

    let data = data.to_str().unwrap();
    let mnt_s = mnt.to_str().unwrap();
    let r = bench_json(&[
        "--server", &addr, "--data", data, "bench", "-q", "--dir", mnt_s, "-P", "2", "--tasks",
        "2", "--items", "5",
    ]);
    let p = phases(&r);
    assert_eq!(p.len(), 10);
    assert_eq!(
        p[0],
        ("file-create".to_string(), 20),
        "2 processes × 2 threads × 5"
    );
    assert!(r["median"][0]["journal_syncs"].as_u64().unwrap() > 0);
    assert_eq!(
        std::fs::read_dir(&mnt).unwrap().count(),
        0,
        "nothing left behind"
    );
}
