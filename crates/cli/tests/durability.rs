//! The cells of the README's durability table that no other test kills
//! exactly: kill -9 of a `--journal-sync nosync` server, and kill -9 of
//! the client process that holds state (the mount: its programs'
//! operations and, log-less, their backups) in every mode. (A power loss
//! is simulated in the engine's `tests/power_loss.rs`.)

use sextant_client::Client;
use sextant_types::{Credentials, Soid};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{spawn_server_with, KillOnDrop};

fn root() -> Credentials {
    Credentials::root()
}

/// kill -9 of a `nosync` server under load from several writers: the
/// journal was written (not synced) before each reply, so the kernel
/// keeps it and the restarted server has every acknowledged create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nosync_keeps_every_acknowledged_operation_across_a_server_kill_9() {
    unsynced_journal_keeps_every_acknowledged_operation_across_a_server_kill_9("nosync").await;
}

/// The same for `background` (the journal synced every 5 ms, behind the
/// replies): a process crash loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_keeps_every_acknowledged_operation_across_a_server_kill_9() {
    unsynced_journal_keeps_every_acknowledged_operation_across_a_server_kill_9("background").await;
}

async fn unsynced_journal_keeps_every_acknowledged_operation_across_a_server_kill_9(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let args = ["--journal-sync", mode];
    let (child, addr) = spawn_server_with(&data, "127.0.0.1:0", &args, Stdio::inherit());
    let mut server = KillOnDrop(child);
    let c = common::connect(&addr, &data).await;
    let dir = c
        .mkdir(&root(), Soid::ROOT, b"w", 0o755)
        .await
        .unwrap()
        .soid;
    const WRITERS: usize = 4;
    const OPS: usize = 150;
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (c, acked): (Client, _) = (c.clone(), Arc::clone(&acked));
        tasks.push(tokio::spawn(async move {
            for i in 0..OPS {
                let name = format!("f{w}-{i}");
                // Non-exclusive: a create in flight at the kill is retried
                // on the restarted server, which may already have it.
                c.create(&root(), dir, name.as_bytes(), 0o644, false)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                acked.lock().unwrap().push(name);
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < WRITERS * OPS / 3 {
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    common::kill9(&mut server.0);
    let at_kill = acked.lock().unwrap().clone();
    let (child, again) = spawn_server_with(&data, &addr, &args, Stdio::inherit());
    let _server = KillOnDrop(child);
    assert_eq!(again, addr);
    let check = common::connect(&addr, &data).await;
    for name in &at_kill {
        check
            .lookup(&root(), dir, name.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("acknowledged {name} lost: {e}"));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        at_kill.len() < WRITERS * OPS,
        "the kill happened mid-run ({} of {})",
        at_kill.len(),
        WRITERS * OPS
    );
}

/// `sextant ls -l DIR` through the server: name → (mode string, size).
fn long_listing(addr: &str, data: &Path, dir: &str) -> BTreeMap<String, (String, u64)> {
    common::cli_ok(addr, data, &["ls", "-l", dir])
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // A symlink ends in `NAME -> TARGET`.
            let at = match f.len() {
                n if n >= 3 && f[n - 2] == "->" => n - 3,
                n => n - 1,
            };
            let name = f[at].to_string();
            (name, (f[0].to_string(), f[4].parse().unwrap()))
        })
        .collect()
}

/// What the programs did through the mount, as the server must show it.
fn expected() -> BTreeMap<String, (String, u64)> {
    let mut want = BTreeMap::new();
    for i in 3..=100u64 {
        let mode = if i == 4 { "-rw-------" } else { "-rw-r--r--" };
        // `echo $i`: the digits and a newline.
        want.insert(
            format!("f{i}"),
            (mode.to_string(), i.to_string().len() as u64 + 1),
        );
    }
    want
}

fn check(addr: &str, data: &Path, what: &str) {
    let got = long_listing(addr, data, "/w");
    let files: BTreeMap<String, (String, u64)> = got
        .iter()
        .filter(|(n, _)| n.starts_with('f'))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    assert_eq!(files, expected(), "{what}: files, modes and sizes in /w");
    let names: BTreeSet<&str> = got.keys().map(String::as_str).collect();
    assert!(
        names.contains("d") && names.contains("link"),
        "{what}: {names:?}"
    );
    let sub = long_listing(addr, data, "/w/d");
    assert_eq!(sub.get("g1").map(|v| v.1), Some(2), "{what}: /w/d/g1");
}

/// A server started with `args` and a foreground `sextant mount -f` on
/// it, both killable at will.
struct Lab {
    tmp: tempfile::TempDir,
    args: Vec<String>,
    server: KillOnDrop,
    addr: String,
    mount: KillOnDrop,
}

impl Lab {
    fn start(args: &[&str]) -> Lab {
        let tmp = tempfile::tempdir().unwrap();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (server, addr) = Lab::serve(&tmp, &args, "127.0.0.1:0");
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mount = Command::new(common::BIN)
            .args(["--server", &addr, "--data"])
            .arg(tmp.path().join("data"))
            .args(["mount", "-f"])
            .arg(&mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lab = Lab {
            tmp,
            args,
            server,
            addr,
            mount: KillOnDrop(mount),
        };
        let t = Instant::now();
        while !common::is_mounted(&lab.mnt()) {
            assert!(t.elapsed() < Duration::from_secs(30), "no mount");
            std::thread::sleep(Duration::from_millis(20));
        }
        lab
    }

    /// The server, its stderr to `server.log` (a restart's replaces it).
    fn serve(tmp: &tempfile::TempDir, args: &[String], listen: &str) -> (KillOnDrop, String) {
        let log = std::fs::File::create(tmp.path().join("server.log")).unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (child, addr) =
            spawn_server_with(&tmp.path().join("data"), listen, &args, Stdio::from(log));
        (KillOnDrop(child), addr)
    }

    fn restart_server(&mut self) {
        let (server, addr) = Lab::serve(&self.tmp, &self.args, &self.addr);
        assert_eq!(addr, self.addr);
        self.server = server;
    }

    fn data(&self) -> std::path::PathBuf {
        self.tmp.path().join("data")
    }

    fn mnt(&self) -> std::path::PathBuf {
        self.tmp.path().join("mnt")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("server.log")).unwrap_or_default()
    }

    /// The programs' work through the mount; each call returned.
    fn programs(&self) {
        common::sh(
            &self.mnt(),
            "mkdir w && for i in $(seq 1 100); do echo $i > w/f$i; done && mkdir w/d && \
             mv w/f1 w/d/g1 && rm w/f2 && ln -s f3 w/link && chmod 600 w/f4",
        );
    }

    /// Log-less: are there operations not written back yet, whose only
    /// backups are in the mount (no other client is connected)?
    fn mount_holds_backups(&self) -> bool {
        let status = common::cli_ok(&self.addr, &self.data(), &["status"]);
        let (back, issued) = written_back_and_issued(&status);
        back < issued
    }

    fn kill9_mount(&mut self) {
        let mnt = self.mnt();
        kill9_mount(&mut self.mount.0, &mnt);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        common::kill9(&mut self.mount.0);
        if common::is_mounted(&self.mnt()) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(self.mnt())
                .status();
        }
    }
}

/// kill -9 of the mount — the client process holding state: its
/// programs' operations, their dirty sizes until close, and log-less the
/// only backups of their operations (no other client is connected) —
/// right after the programs' calls returned. In every mode the server has
/// every acknowledged operation, serves it at once, and keeps it across a
/// restart (log-less: it writes back what the dead client's backups held).
#[test]
fn a_mount_killed_9_loses_nothing_acknowledged_in_any_mode() {
    if !common::fuse_available() {
        return;
    }
    let modes: [(&str, &[&str]); 4] = [
        ("journal fsync", &["--journal-sync", "fsync"]),
        ("journal background", &["--journal-sync", "background"]),
        ("journal nosync", &["--journal-sync", "nosync"]),
        (
            "logless K=4",
            &["--durability", "logless", "--arl-size", "4"],
        ),
    ];
    for (mode, args) in modes {
        let mut lab = Lab::start(args);
        lab.programs();
        if mode.starts_with("logless") {
            // The test's point: operations not written back yet, whose
            // only backups are in the mount about to die.
            assert!(lab.mount_holds_backups(), "{mode}: nothing held");
        }
        lab.kill9_mount();
        let (addr, data) = (lab.addr.clone(), lab.data());
        check(&addr, &data, &format!("{mode}, after kill -9 of the mount"));
        // Clean stop (SIGTERM) and restart: on disk, not only in memory.
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(lab.server.0.id() as i32, libc::SIGTERM) };
        let status = lab.server.0.wait().unwrap();
        assert!(status.success(), "{mode}: server exit {status}");
        lab.restart_server();
        check(&addr, &data, &format!("{mode}, after a restart"));
        let log = lab.log();
        assert!(
            !log.contains("MISSING") && !log.contains("GAP"),
            "{mode}:\n{log}"
        );
    }
}

/// The log-less caveat of the same cell: after the mount's kill -9 the
/// server alone has its programs' operations until it writes them back
/// (≤ ~30 s); a server kill -9 in that window loses them — and the
/// restarted server reports it (the persisted acknowledged mark).
#[test]
fn logless_a_server_kill_before_write_back_after_a_mount_kill_is_reported() {
    if !common::fuse_available() {
        return;
    }
    let mut lab = Lab::start(&[
        "--durability",
        "logless",
        "--arl-size",
        "4",
        "--recovery-grace",
        "1s",
    ]);
    lab.programs();
    assert!(lab.mount_holds_backups());
    lab.kill9_mount();
    // Past the acknowledged mark's next persist (every 100 ms).
    std::thread::sleep(Duration::from_millis(400));
    assert!(lab.mount_holds_backups(), "written back already: no window");
    common::kill9(&mut lab.server.0);
    lab.restart_server();
    let (addr, data) = (lab.addr.clone(), lab.data());
    let status = common::cli_ok(&addr, &data, &["status"]);
    let log = lab.log();
    assert!(log.contains("GAP") && !log.contains("no gap"), "{log}");
    assert!(status.contains("RECOVERY GAP"), "{status}");
    let top = common::cli_ok(&addr, &data, &["ls", "/"]);
    assert!(!top.lines().any(|l| l == "w"), "lost, as reported: {top}");
}

fn kill9_mount(mount: &mut Child, mnt: &Path) {
    common::kill9(mount);
    let _ = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(mnt)
        .status();
    let t = Instant::now();
    while common::is_mounted(mnt) {
        assert!(t.elapsed() < Duration::from_secs(10), "still mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `sextant status`'s log-less line: (written back through, issued) LSNs.
fn written_back_and_issued(status: &str) -> (u64, u64) {
    let line = status
        .lines()
        .find(|l| l.contains("written back through lsn"))
        .unwrap_or_else(|| panic!("no log-less line in:\n{status}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // "log-less (ARL 4), written back through lsn X, lsn Y issued"
    (nums[nums.len() - 2], nums[nums.len() - 1])
}
