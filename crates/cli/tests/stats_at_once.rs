//! `sextant du` and `sextant stats` ask the starting point (depth 0) and
//! the totals below it at once, not one after the other (on a cluster the
//! wait between them was a whole round of calls: a resolve, the root's
//! holder, then the servers' parts).
//!
//! Shown with the server's test-only fault point `search-rendezvous:2`
//! (`sextant_server::fault`): every search waits until a second one has
//! arrived. Asked one after the other, the first would wait in vain and
//! fail (EIO); asked at once, both run. The totals stay those of the tree,
//! a missing starting point is reported once, and a starting point that
//! is a file counts itself only.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sextant(addr: &str, data: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["--server", addr, "--data"])
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn du_and_stats_ask_the_starting_point_and_the_totals_below_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::create_dir_all(src.join("b/c")).unwrap();
    std::fs::write(src.join("a/f1"), vec![b'x'; 10]).unwrap();
    std::fs::write(src.join("a/f2"), vec![b'x'; 20]).unwrap();
    std::fs::write(src.join("b/c/f3"), vec![b'x'; 5]).unwrap();
    let data = dir.path().join("data");
    let (server, addr) = spawn_server_env(
        &data,
        "127.0.0.1:0",
        &["--journal-sync", "background", "--socket", "off"],
        Stdio::inherit(),
        &[("SEXTANT_FAULT", "search-rendezvous:2")],
    );
    let _server = KillOnDrop(server);
    cli_ok(&addr, &data, &["import", src.to_str().unwrap(), "/d"]);

    let started = Instant::now();
    // /d, a, f1, f2, b, c, f3; directories have size 0.
    assert_eq!(cli_ok(&addr, &data, &["du", "/d"]), "35\t7 entries\t/d\n");
    assert_eq!(
        cli_ok(&addr, &data, &["du", "/d/b"]),
        "5\t3 entries\t/d/b\n"
    );
    // Two starting points: two pairs of searches, each pair at once.
    assert_eq!(
        cli_ok(&addr, &data, &["du", "/d/a", "/d/b/c"]),
        "30\t3 entries\t/d/a\n5\t2 entries\t/d/b/c\n"
    );
    let stats = cli_ok(&addr, &data, &["stats", "/d", "-type", "f"]);
    assert!(
        stats.split_whitespace().collect::<Vec<_>>() == ["3", "35", "total"],
        "{stats}"
    );
    let by = cli_ok(
        &addr,
        &data,
        &["--json", "stats", "--by", "user", "/d", "-type", "f"],
    );
    let by: serde_json::Value = serde_json::from_str(&by).unwrap();
    assert_eq!(by["groups"].as_array().map(Vec::len), Some(1), "{by}");
    assert_eq!(by["groups"][0]["count"], 3, "{by}");
    assert_eq!(by["groups"][0]["size"], 35, "{by}");
    // A file as the starting point: itself only.
    assert_eq!(
        cli_ok(&addr, &data, &["du", "/d/a/f1"]),
        "10\t1 entries\t/d/a/f1\n"
    );
    // Each pair went on together: no search waited for a partner that
    // never came (10 s each).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // A missing starting point: reported once (not once per search),
    // exit 1, nothing printed for it.
    let out = sextant(&addr, &data, &["du", "/d/nope"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/d/nope"), "{err}");
}
