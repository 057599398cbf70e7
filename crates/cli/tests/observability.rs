//! Observability of `sextant serve`: Prometheus metrics (request counts and
//! latency by operation, the engine's counters) and structured logs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{KillOnDrop, BIN};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET /metrics, or `None` while nothing answers yet.
fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn metrics_count_requests_by_operation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let metrics_port = free_port();
    let mut server = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(&data)
            // Each mkdir's reply waits for its sync (not the default's
            // background sync, which may not have run when scraped).
            .args(["--journal-sync", "fsync"])
            .env("SEXTANT_METRICS", format!("127.0.0.1:{metrics_port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    for path in ["/m1", "/m2"] {
        let status = Command::new(BIN)
            .args(["--server", &addr, "--data"])
            .arg(&data)
            .args(["mkdir", path])
            .status()
            .unwrap();
        assert!(status.success());
    }
    // The engine gauges refresh every second.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        if let Some(b) = scrape(metrics_port) {
            if b.contains("sextant_inodes 3") {
                break b;
            }
        }
        assert!(Instant::now() < deadline, "no metrics with 3 inodes");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        body.lines().any(|l| l.starts_with("sextant_requests_total")
            && l.contains("op=\"mkdir\"")
            && l.contains("outcome=\"ok\"")
            && l.ends_with(" 2")),
        "{body}"
    );
    assert!(body.contains("sextant_request_seconds"), "{body}");
    assert!(body.contains("sextant_journal_syncs_total"), "{body}");
    // Two mkdirs synced: their syncs took some time, and it is shown.
    let sync_us = body
        .lines()
        .find_map(|l| l.strip_prefix("sextant_journal_sync_microseconds_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(sync_us.is_some_and(|us| us > 0.0), "{body}");
}

#[test]
fn serve_logs_one_json_object_per_line_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = KillOnDrop(
        Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("data"))
            .env("SEXTANT_METRICS", "off")
            .env("SEXTANT_LOG_FORMAT", "json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on"), "{line}");
    // SIGINT: a clean shutdown logs and exits.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGINT) };
    let _ = server.0.wait();
    let mut logs = String::new();
    server
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    let records: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let messages: Vec<&str> = records
        .iter()
        .filter_map(|r| r["fields"]["message"].as_str())
        .collect();
    for expected in [
        "created the cluster secret",
        "serving",
        "writing tables back",
    ] {
        assert!(
            messages.contains(&expected),
            "{expected:?} missing in {messages:?}"
        );
    }
    assert!(records.iter().all(|r| r["level"].is_string()), "{logs}");
}
