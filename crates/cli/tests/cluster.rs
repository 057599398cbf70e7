//! A cluster of real `sextant serve` processes on a real etcd (Debian's
//! `etcd-server`): `sextant cluster up` starts one and stops it cleanly;
//! `status` names every server with its tables and inodes; a table moved
//! by `cluster move` is still reached through any server (WRONG_SERVER
//! and the route map); a server killed with SIGKILL loses nothing it
//! acknowledged — its tables move to a live server, which recovers them
//! from the shared store; a FUSE mount through one server keeps its
//! kernel caches exact for changes made through any other. Skipped, and
//! said so, without an `etcd` binary (scripts/ensure-deps.sh installs it).

mod common;

use common::{cut_journal, cut_journal_above, etcd_keys, journal_lengths, ls_d, walk_files};
use common::{
    dir_and_etcd, free_ports, have_etcd, move_table, serve, serve_env, serve_with, sextant,
    sextant_ok, signal, start_etcd, status_on, tables_by_server, try_status_on, wait_for,
    wait_for_every, wait_root_assigned, wait_tables_on_both, Etcd, KillOnDrop, BIN,
};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn status(data: &Path) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["--json", "--data"])
        .arg(data)
        .args(["cluster", "status"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn cluster_up_serves_one_namespace_from_several_processes() {
    if !have_etcd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("c");
    let port = free_ports(2);
    let mut up = KillOnDrop(
        Command::new(BIN)
            .args(["--json", "--data"])
            .arg(&data)
            .args([
                "cluster",
                "up",
                "--servers",
                "2",
                "--journal-sync",
                "nosync",
            ])
            .args(["--base-port", &port.to_string(), "--lease-ttl", "2s"])
            .env_remove("SEXTANT_ETCD")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(up.0.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line from cluster up").unwrap();
    let started: serde_json::Value = serde_json::from_str(&first).expect(&first);
    let servers = started["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    let s1 = servers[0]["address"].as_str().unwrap().to_string();
    let s2 = servers[1]["address"].as_str().unwrap().to_string();
    assert_eq!(s1, format!("127.0.0.1:{port}"));
    let s1_data = PathBuf::from(servers[0]["data"].as_str().unwrap());
    // The root table is assigned to one of them.
    wait_for("the root table assigned", Duration::from_secs(30), || {
        tables_by_server(&status(&data))
            .iter()
            .map(|t| t.1)
            .sum::<u64>()
            >= 1
    });
    let st = status(&data);
    for s in st["servers"].as_array().unwrap() {
        for key in ["name", "address", "tables", "inodes"] {
            assert!(!s[key].is_null(), "{key} missing in {s}");
        }
    }
    assert!(st["coordinator"].is_string(), "{st}");
    // One namespace, reached through either server.
    sextant_ok(&s1, &s1_data, &["mkdir", "/a"]);
    sextant_ok(&s2, &s1_data, &["touch", "/a/f"]);
    assert_eq!(sextant_ok(&s2, &s1_data, &["ls", "/a"]).trim(), "f");
    // `--data` of the whole `up` directory finds the servers' secret.
    for addr in [&s1, &s2] {
        let out = Command::new(BIN)
            .args(["--server", addr, "--data"])
            .arg(&data)
            .args(["ls", "/a"])
            .env_remove("SEXTANT_SECRET_FILE")
            .env_remove("SEXTANT_SECRET")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "--data {}: {said}", data.display());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "f");
    }
    // Move the table holding /a to whichever server does not own it.
    let owner = |st: &serde_json::Value| {
        tables_by_server(st)
            .into_iter()
            .find(|t| t.1 > 0)
            .map(|t| t.0)
            .unwrap()
    };
    let from = owner(&status(&data));
    let to = if from == "s1" { "s2" } else { "s1" };
    let out = Command::new(BIN)
        .args(["--data"])
        .arg(&data)
        .args(["cluster", "move", "/a", to])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster move: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(owner(&status(&data)), to);
    // Still one namespace, through both servers.
    for addr in [&s1, &s2] {
        assert_eq!(sextant_ok(addr, &s1_data, &["ls", "/a"]).trim(), "f");
    }
    sextant_ok(&s1, &s1_data, &["touch", "/a/g"]);
    // Ctrl-C stops everything cleanly.
    let pid = i32::try_from(up.0.id()).unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = up.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "cluster up did not stop");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "cluster up exited with {status}");
    assert!(
        std::net::TcpStream::connect(&s1).is_err(),
        "s1 still listens after cluster up stopped"
    );
}

/// Moves /p's table to a and /q's to b (tables apart, or the test
/// fails): their tables.
fn p_on_a_q_on_b(etcd: &str, secret: &Path) -> (u64, u64) {
    let tp = move_table(etcd, secret, "/p", "a");
    let tq = move_table(etcd, secret, "/q", "b");
    assert_ne!(tp, tq, "/p and /q share a table: the test needs them apart");
    (tp, tq)
}

/// Does `server` alone hold tables (false while etcd does not answer)?
fn only_one_serves(etcd: &str, secret: &Path, server: &str) -> bool {
    let Ok(st) = try_status_on(etcd, secret) else {
        return false;
    };
    tables_by_server(&st)
        .iter()
        .all(|x| x.0 == server || x.1 == 0)
}

/// Does b hold tables, and a none?
fn b_took_as_tables(etcd: &str, secret: &Path) -> bool {
    let t = tables_by_server(&status_on(etcd, secret));
    t.iter().all(|x| x.0 != "a" || x.1 == 0) && t.iter().any(|x| x.0 == "b" && x.1 > 0)
}

/// `sextant --server ADDR --data SECRET_DIR ARGS` started, its output
/// piped.
fn sextant_child(addr: &str, secret_dir: &Path, args: &[&str]) -> Child {
    Command::new(BIN)
        .args(["--server", addr, "--data"])
        .arg(secret_dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs `mount` (a `sextant ... mount ... MNT` command), which must
/// succeed: MNT unmounted (lazily) when the guard drops.
fn mount_ok(mount: &mut Command, mnt: &Path) -> common::Unmount {
    let out = mount.output().unwrap();
    assert!(
        out.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::Unmount(mnt.to_path_buf())
}

/// The permission bits of `p` (`None`: no such file).
fn mode(p: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map(|md| md.mode() & 0o7777).ok()
}

/// Is the process whose `/proc/PID/stat` is `stat` stopped (SIGSTOP)?
fn stopped(stat: &str) -> bool {
    // The state is the field after the parenthesised command name.
    std::fs::read_to_string(stat)
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| r.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Waits (60 s at most) for `leaving` (server `leaver`, sent SIGTERM) to
/// exit, which it must do cleanly (`during`: when, for the failure).
fn left_cleanly(leaving: &mut KillOnDrop, leaver: &str, during: &str) {
    let mut left = None;
    wait_for(
        &format!("{leaver}'s clean leave"),
        Duration::from_secs(60),
        || {
            left = leaving.0.try_wait().unwrap();
            left.is_some()
        },
    );
    assert!(
        left.is_some_and(|s| s.success()),
        "{leaver} left {during}: {left:?}"
    );
}

/// `auth add NAME --uids 1000` through `addr`: the client key file
/// `dir/NAME.key`, readable by all (mode 0644).
fn user_key(dir: &Path, addr: &str, secret: &Path, name: &str) -> PathBuf {
    let key = dir.join(format!("{name}.key"));
    sextant_ok(
        addr,
        secret,
        &[
            "auth",
            "add",
            name,
            "--uids",
            "1000",
            "--out",
            key.to_str().unwrap(),
        ],
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    key
}

/// Small tables: a split every four directories or 32 inodes.
const SMALL_TABLES: &str = "table_dir_limit = 4\ntable_inode_limit = 32\n";

/// The servers' inodes in a status, all added up.
fn inodes(st: &serde_json::Value) -> u64 {
    st["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["inodes"].as_u64().unwrap_or(0))
        .sum()
}

/// Does a hold tables?
fn a_holds_tables(etcd: &str, secret: &Path) -> bool {
    tables_by_server(&status_on(etcd, secret))
        .iter()
        .any(|t| t.0 == "a" && t.1 > 0)
}

/// Tiny tables: a split at every directory, or four inodes.
const TINY_TABLES: &str = "table_dir_limit = 1\ntable_inode_limit = 4\n";

/// Server a of a new cluster (default settings), once the root table is
/// assigned (to a): a, its address, the directory holding the secret.
fn first_plain_server(dir: &Path, etcd: &str) -> (KillOnDrop, String, PathBuf) {
    let (a, a_addr) = serve(dir, etcd, "a");
    let a = KillOnDrop(a);
    let secret = dir.join("a");
    wait_root_assigned(etcd, &secret);
    (a, a_addr, secret)
}

/// Is `server` a member of the cluster (in its status)?
fn is_member(etcd: &str, secret: &Path, server: &str) -> bool {
    tables_by_server(&status_on(etcd, secret))
        .iter()
        .any(|t| t.0 == server)
}

/// [`dir_and_etcd`] for a test that runs the CLI as other users
/// (`setpriv`; without it `None`, said so): the directory is open (0755)
/// for them to reach what is in it.
fn dir_and_etcd_for_users() -> Option<(tempfile::TempDir, Etcd)> {
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs setpriv");
        return None;
    }
    let (dir, etcd) = dir_and_etcd()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some((dir, etcd))
}

/// Server a of a new cluster whose tables split early (`limits`: the text
/// of its config file), once it holds the root table: the server, its
/// address, the directory holding the secret, and the config file for
/// the servers that join later.
fn first_server(dir: &Path, etcd: &str, limits: &str) -> (KillOnDrop, String, PathBuf, String) {
    first_server_env(dir, etcd, limits, &[])
}

/// [`first_server`] with more environment for a (a fault point).
fn first_server_env(
    dir: &Path,
    etcd: &str,
    limits: &str,
    env: &[(&str, &str)],
) -> (KillOnDrop, String, PathBuf, String) {
    first_server_with(dir, etcd, limits, env, &[])
}

/// [`first_server_env`] with more flags for a.
fn first_server_with(
    dir: &Path,
    etcd: &str,
    limits: &str,
    env: &[(&str, &str)],
    flags: &[&str],
) -> (KillOnDrop, String, PathBuf, String) {
    let config = dir.join("small-tables.toml");
    std::fs::write(&config, limits).unwrap();
    let config = config.to_str().unwrap().to_string();
    let args = [&["--config", config.as_str()][..], flags].concat();
    let (a, a_addr) = serve_env(dir, etcd, "a", &args, env);
    let a = KillOnDrop(a);
    let secret = dir.join("a");
    wait_root_assigned(etcd, &secret);
    (a, a_addr, secret, config)
}

/// [`first_server_env`] with a's Unix socket at `dir/a.sock` (and more
/// environment `env`): also the socket's path.
fn first_server_on_socket(
    dir: &Path,
    etcd: &str,
    limits: &str,
    env: &[(&str, &str)],
) -> (KillOnDrop, String, PathBuf, String, PathBuf) {
    let sock = dir.join("a.sock");
    let sock_env = [&[("SEXTANT_SOCKET", sock.to_str().unwrap())], env].concat();
    let (a, a_addr, secret, config) = first_server_env(dir, etcd, limits, &sock_env);
    (a, a_addr, secret, config, sock)
}

/// Servers a and b with small tables, `/p /q /r /s` (four files each)
/// made on a before b joins, once both hold tables: a, b, their
/// addresses and the secret's directory.
fn pqrs_on_two_servers(
    dir: &Path,
    etcd: &str,
) -> (KillOnDrop, KillOnDrop, String, String, PathBuf) {
    pqrs_on_two_servers_env(dir, etcd, &[])
}

/// [`pqrs_on_two_servers`] with more environment for a (a fault point).
fn pqrs_on_two_servers_env(
    dir: &Path,
    etcd: &str,
    a_env: &[(&str, &str)],
) -> (KillOnDrop, KillOnDrop, String, String, PathBuf) {
    pqrs_on_two_servers_with(dir, etcd, a_env, &[])
}

/// [`pqrs_on_two_servers_env`] with more flags for both servers.
fn pqrs_on_two_servers_with(
    dir: &Path,
    etcd: &str,
    a_env: &[(&str, &str)],
    flags: &[&str],
) -> (KillOnDrop, KillOnDrop, String, String, PathBuf) {
    let (a, a_addr, secret, config) = first_server_with(dir, etcd, SMALL_TABLES, a_env, flags);
    for d in ["p", "q", "r", "s"] {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/{d}")]);
        for f in 0..4 {
            sextant_ok(&a_addr, &secret, &["touch", &format!("/{d}/f{f}")]);
        }
    }
    let args = [&["--config", config.as_str()][..], flags].concat();
    let (b, b_addr) = serve_with(dir, etcd, "b", &args);
    let b = KillOnDrop(b);
    wait_tables_on_both(etcd, &secret);
    (a, b, a_addr, b_addr, secret)
}

/// Starts servers a and b and makes sure a holds the root table.
fn two_servers_a_holding_the_root(
    dir: &Path,
    etcd: &str,
    a_env: &[(&str, &str)],
) -> (KillOnDrop, KillOnDrop, String, PathBuf) {
    let (a, _) = serve_env(dir, etcd, "a", &[], a_env);
    let a = KillOnDrop(a);
    let (b, b_addr) = serve(dir, etcd, "b");
    let b = KillOnDrop(b);
    let secret = dir.join("a");
    wait_root_assigned(etcd, &secret);
    if tables_by_server(&status_on(etcd, &secret))
        .iter()
        .any(|t| t.0 == "b" && t.1 > 0)
    {
        let out = Command::new(BIN)
            .args(["cluster", "move", "0", "a", "--etcd", etcd])
            .env("SEXTANT_SECRET_FILE", secret.join("secret"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (a, b, b_addr, secret)
}

/// Exactly-once across a failover: server a commits a mutation and dies
/// before it answers (a test-only fault point); the client's retry
/// reaches b once b took a's tables, and b answers it from the reply the
/// table carried over (the replayed journal record's tag) instead of
/// running it again — which would fail the `mkdir` with "File exists".
#[test]
fn a_retry_after_failover_is_answered_not_run_again() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (mut a, _b, b_addr, secret) = two_servers_a_holding_the_root(
        dir.path(),
        &etcd.url,
        &[("SEXTANT_FAULT", "exit-after-commit:2")],
    );
    sextant_ok(&b_addr, &secret, &["mkdir", "/d"]);
    // The second mutation on a: committed, then a exits unanswered.
    let out = sextant(&b_addr, &secret, &["mkdir", "/e"]);
    assert!(
        out.status.success(),
        "the retry after failover must be answered with the first reply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        a.0.wait().unwrap().code(),
        Some(86),
        "a died at the fault point"
    );
    let listing = sextant_ok(&b_addr, &secret, &["ls", "/"]);
    let mut names: Vec<&str> = listing.split_whitespace().collect();
    names.sort_unstable();
    assert_eq!(names, ["d", "e"]);
    drop(etcd.child);
}

#[test]
fn a_killed_server_loses_nothing_it_acknowledged() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (a, a_addr) = serve(dir.path(), &etcd.url, "a");
    let mut a = KillOnDrop(a);
    let (b, b_addr) = serve(dir.path(), &etcd.url, "b");
    let _b = KillOnDrop(b);
    let secret = dir.path().join("a");
    let status_of = || status_on(&etcd.url, &secret);
    wait_root_assigned(&etcd.url, &secret);
    // Make sure a owns it (move it there if b got it).
    if tables_by_server(&status_of())
        .iter()
        .any(|t| t.0 == "b" && t.1 > 0)
    {
        let out = Command::new(BIN)
            .args(["cluster", "move", "0", "a", "--etcd", &etcd.url])
            .env("SEXTANT_SECRET_FILE", secret.join("secret"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Acknowledged through b (routed to a), then a dies.
    sextant_ok(&b_addr, &secret, &["mkdir", "/d"]);
    for i in 0..20 {
        sextant_ok(&b_addr, &secret, &["touch", &format!("/d/f{i}")]);
    }
    common::kill9(&mut a.0);
    let _ = a_addr;
    wait_for("b took a's tables", Duration::from_secs(30), || {
        let st = status_of();
        let t = tables_by_server(&st);
        t.iter().all(|x| x.0 != "a") && t.iter().any(|x| x.0 == "b" && x.1 > 0)
    });
    let listing = sextant_ok(&b_addr, &secret, &["ls", "/d"]);
    let mut names: Vec<&str> = listing.split_whitespace().collect();
    names.sort_unstable();
    let mut want: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    want.sort_unstable();
    assert_eq!(names, want.iter().map(String::as_str).collect::<Vec<_>>());
    drop(etcd.child);
}

/// Tables split as the namespace grows (small limits here), the new
/// tables are the splitting server's, and the coordinator spreads them
/// over the servers; every name stays reachable through any server.
#[test]
fn tables_split_and_spread_over_the_servers() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let config = dir.path().join("small-tables.toml");
    std::fs::write(&config, SMALL_TABLES).unwrap();
    let c = config.to_str().unwrap();
    let (a, a_addr) = serve_with(dir.path(), &etcd.url, "a", &["--config", c]);
    let _a = KillOnDrop(a);
    let secret = dir.path().join("a");
    let status_of = || status_on(&etcd.url, &secret);
    wait_root_assigned(&etcd.url, &secret);
    // The tree is made on one server (its tables split as it grows), then
    // a second one joins and the tables spread.
    let tree: String = (0..12)
        .map(|d| {
            let files: Vec<String> = (0..6).map(|f| format!("/d{d}/f{f}")).collect();
            format!("mkdir /d{d}\n")
                + &files
                    .iter()
                    .map(|f| format!("touch {f}\n"))
                    .collect::<String>()
        })
        .collect();
    let script = dir.path().join("tree.txt");
    std::fs::write(&script, tree).unwrap();
    for line in std::fs::read_to_string(&script).unwrap().lines() {
        let (cmd, path) = line.split_once(' ').unwrap();
        sextant_ok(&a_addr, &secret, &[cmd, path]);
    }
    // A second server joins: the coordinator gives it tables.
    let (b, b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", c]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    let st = status_of();
    assert!(st["tables"].as_array().unwrap().len() >= 3, "{st}");
    // Search across the servers: `find`, `du` and `stats` through either
    // server see the whole namespace, each entry once.
    let all_paths: Vec<String> = std::iter::once("/".to_string())
        .chain((0..12).flat_map(|d| {
            std::iter::once(format!("/d{d}")).chain((0..6).map(move |f| format!("/d{d}/f{f}")))
        }))
        .collect();
    let mut want = all_paths.clone();
    want.sort();
    for addr in [&a_addr, &b_addr] {
        let out = sextant_ok(addr, &secret, &["find", "/"]);
        let mut got: Vec<String> = out.lines().map(str::to_string).collect();
        got.sort();
        assert_eq!(got, want, "find / at {addr}");
        let out = sextant_ok(addr, &secret, &["find", "/d3", "-name", "f*"]);
        assert_eq!(out.lines().count(), 6, "find /d3 at {addr}: {out}");
        let stats = sextant_ok(addr, &secret, &["stats", "--json", "/"]);
        assert!(
            stats.contains(&(1 + 12 + 72).to_string()),
            "stats at {addr}: {stats}"
        );
        sextant_ok(addr, &secret, &["du", "/"]);
    }
    // Every name, through either server.
    for addr in [&a_addr, &b_addr] {
        for d in 0..12 {
            let listing = sextant_ok(addr, &secret, &["ls", &format!("/d{d}")]);
            assert_eq!(
                listing.split_whitespace().count(),
                6,
                "/d{d} at {addr}: {listing}"
            );
        }
    }
    // Every inode counted once over the servers (once no move is under
    // way: a table being handed over may be counted by neither or both).
    wait_for("every inode counted once", Duration::from_secs(30), || {
        inodes(&status_of()) == 1 + 12 + 72
    });
    // Paths with `..` and symlinks, resolved across the servers' tables
    // (walked name by name where one server cannot finish them).
    sextant_ok(&a_addr, &secret, &["ln", "-s", "/d5", "/d0/to-d5"]);
    sextant_ok(&a_addr, &secret, &["ln", "-s", "../d6", "/d1/up-d6"]);
    for addr in [&a_addr, &b_addr] {
        for (path, first) in [
            ("/d3/../d4", "f0"),
            ("/d0/to-d5", "f0"),
            ("/d1/up-d6/", "f0"),
            ("/d0/to-d5/../d7", "f0"),
        ] {
            let listing = sextant_ok(addr, &secret, &["ls", path]);
            assert_eq!(
                listing.split_whitespace().next(),
                Some(first),
                "{path} at {addr}: {listing}"
            );
            assert_eq!(
                listing.split_whitespace().count(),
                6,
                "{path} at {addr}: {listing}"
            );
        }
    }
    // New names once the tables are spread, through either server: a
    // create whose new SOID falls in the other server's table, a mkdir
    // under the root, a rename and a hard link between directories held
    // by different servers — the server pulls the tables it needs and
    // runs them locally; none fails with EXDEV.
    for d in 0..12 {
        let addr = if d % 2 == 0 { &a_addr } else { &b_addr };
        sextant_ok(addr, &secret, &["touch", &format!("/d{d}/new")]);
        sextant_ok(addr, &secret, &["mkdir", &format!("/top{d}")]);
    }
    for d in 0..6 {
        let (from, to) = (format!("/d{d}/f1"), format!("/d{}/moved{d}", 11 - d));
        sextant_ok(&b_addr, &secret, &["mv", &from, &to]);
        sextant_ok(
            &a_addr,
            &secret,
            &["ln", &format!("/d{d}/f2"), &format!("/top{}/link", 11 - d)],
        );
    }
    let root: Vec<String> = sextant_ok(&a_addr, &secret, &["ls", "/"])
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(root.len(), 24, "{root:?}");
    for d in 0..12 {
        let listing = sextant_ok(&b_addr, &secret, &["ls", &format!("/d{d}")]);
        let n = listing.split_whitespace().count();
        // 6 files and `new`, minus f1 moved out (d < 6) or plus one moved
        // in, plus the symlinks made above in /d0 and /d1.
        let want = 7 + usize::from(d >= 6) - usize::from(d < 6) + usize::from(d < 2);
        assert_eq!(n, want, "/d{d}: {listing}");
    }
    let linked = sextant_ok(&b_addr, &secret, &["stat", "/d0/f2"]);
    assert!(linked.contains("Links: 2"), "{linked}");
}

/// Fencing on real processes (R1), under an mdtest-like load: a `sextant
/// bench` (create, stat, lookup, readdir, remove of 8,000 files; it
/// fails on any missing, doubled or lost operation) runs through server
/// a, which is paused (SIGSTOP) for longer than its lease mid-run, with
/// requests waiting in its socket. b takes a's tables; when a wakes
/// (SIGCONT) its lease timer has run out, so it acknowledges nothing for
/// the tables it lost and the waiting requests are redirected to b. The
/// bench must finish cleanly, every name made before the pause must be
/// there, and a must serve again once it has rejoined.
#[test]
fn a_paused_server_that_wakes_late_acknowledges_nothing() {
    paused_past_its_lease(false);
}

/// The same with etcd killed (-9) and restarted while the server is
/// paused: the lease then outlives its TTL by the restart (etcd extends
/// every lease), b takes the tables later, and still only one server
/// acknowledges for a table.
#[test]
fn a_paused_server_wakes_late_across_an_etcd_restart() {
    paused_past_its_lease(true);
}

fn paused_past_its_lease(restart_etcd: bool) {
    let Some((dir, mut etcd)) = dir_and_etcd() else {
        return;
    };
    let (a, _b, b_addr, secret) = two_servers_a_holding_the_root(dir.path(), &etcd.url, &[]);
    let a_addr = {
        let st = status_on(&etcd.url, &secret);
        st["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "a")
            .and_then(|s| s["address"].as_str())
            .unwrap()
            .to_string()
    };
    sextant_ok(&b_addr, &secret, &["mkdir", "/d", "/load"]);
    for i in 0..10 {
        sextant_ok(&b_addr, &secret, &["touch", &format!("/d/f{i}")]);
    }
    let bench = sextant_child(
        &a_addr,
        &secret,
        &["bench", "-F", "-n", "4", "-i", "2000", "--under", "/load"],
    );
    std::thread::sleep(Duration::from_millis(700));
    signal(&a.0, "-STOP");
    if restart_etcd {
        std::thread::sleep(Duration::from_millis(500));
        etcd.restart();
    }
    wait_for("b took a's tables", Duration::from_secs(40), || {
        let Ok(st) = try_status_on(&etcd.url, &secret) else {
            return false;
        };
        let t = tables_by_server(&st);
        t.iter().all(|x| x.0 != "a" || x.1 == 0) && t.iter().any(|x| x.0 == "b" && x.1 > 0)
    });
    for i in 0..10 {
        sextant_ok(&b_addr, &secret, &["touch", &format!("/d/g{i}")]);
    }
    signal(&a.0, "-CONT");
    let out = bench.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the bench through a must finish with every operation done once: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = sextant_ok(&b_addr, &secret, &["ls", "/d"]);
    let mut names: Vec<&str> = listing.split_whitespace().collect();
    names.sort_unstable();
    let mut want: Vec<String> = (0..10)
        .flat_map(|i| [format!("f{i}"), format!("g{i}")])
        .collect();
    want.sort_unstable();
    assert_eq!(names, want.iter().map(String::as_str).collect::<Vec<_>>());
    // a rejoins with a new lease and serves the namespace again.
    wait_for("a serves again", Duration::from_secs(30), || {
        sextant(&a_addr, &secret, &["ls", "/d"]).status.success()
    });
    drop(etcd.child);
}

/// Kill -9 at a named step of a migration (the test-only `exit-at:`
/// fault points in the table host): the root table holding /d moves
/// from a to b, and a (at a DROP step) or b (at an ADD step) dies there.
/// The survivor ends up serving every table, with every acknowledged
/// name, and takes new writes.
fn killed_mid_migration(step: &str) {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let fault = [("SEXTANT_FAULT", format!("exit-at:{step}"))];
    let fault: Vec<(&str, &str)> = fault.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let dropping = step.starts_with("drop");
    let (a, a_addr) = serve_env(
        dir.path(),
        &etcd.url,
        "a",
        &[],
        if dropping { &fault } else { &[] },
    );
    let mut a = KillOnDrop(a);
    let secret = dir.path().join("a");
    wait_for("a holds the root table", Duration::from_secs(30), || {
        a_holds_tables(&etcd.url, &secret)
    });
    sextant_ok(&a_addr, &secret, &["mkdir", "/d"]);
    for i in 0..20 {
        sextant_ok(&a_addr, &secret, &["touch", &format!("/d/f{i}")]);
    }
    let (b, b_addr) = serve_env(
        dir.path(),
        &etcd.url,
        "b",
        &[],
        if dropping { &[] } else { &fault },
    );
    let mut b = KillOnDrop(b);
    wait_for("b is a member", Duration::from_secs(30), || {
        is_member(&etcd.url, &secret, "b")
    });
    // The move; it cannot finish as asked when a side dies.
    let mover = Command::new(BIN)
        .args(["cluster", "move", "/d", "b", "--etcd", &etcd.url])
        .env("SEXTANT_SECRET_FILE", secret.join("secret"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _mover = KillOnDrop(mover);
    let (victim, survivor, survivor_addr) = if dropping {
        (&mut a, "b", &b_addr)
    } else {
        (&mut b, "a", &a_addr)
    };
    let mut code = None;
    wait_for(
        "the victim reached the fault point",
        Duration::from_secs(30),
        || {
            code = victim.0.try_wait().unwrap().map(|s| s.code());
            code.is_some()
        },
    );
    assert_eq!(code, Some(Some(86)), "{step}: died at the fault point");
    wait_for(
        "the survivor serves every table",
        Duration::from_secs(40),
        || {
            let Ok(st) = try_status_on(&etcd.url, &secret) else {
                return false;
            };
            let t = tables_by_server(&st);
            t.iter().all(|x| x.0 == survivor || x.1 == 0)
                && t.iter().any(|x| x.0 == survivor && x.1 > 0)
        },
    );
    let listing = sextant_ok(survivor_addr, &secret, &["ls", "/d"]);
    assert_eq!(listing.split_whitespace().count(), 20, "{step}: {listing}");
    sextant_ok(survivor_addr, &secret, &["touch", "/d/after"]);
    sextant_ok(survivor_addr, &secret, &["mkdir", "/e"]);
    drop(etcd.child);
}

#[test]
fn killed_before_a_drop_writes_anything() {
    killed_mid_migration("drop-before");
}

#[test]
fn killed_after_a_drop_committed_its_final_manifest() {
    killed_mid_migration("drop-after");
}

#[test]
fn killed_before_an_add_loads_the_table() {
    killed_mid_migration("add-before");
}

#[test]
fn killed_after_an_add_committed_before_the_shell_knew() {
    killed_mid_migration("add-after");
}

/// A three-member etcd cluster for one test.
struct Etcd3 {
    members: Vec<Option<KillOnDrop>>,
    clients: Vec<u16>,
}

impl Etcd3 {
    /// Three members that all run and agree on one leader. A member can
    /// fail to start when another test took one of its ports between
    /// [`free_ports`] and etcd's bind (ephemeral ports are also the
    /// source ports of every outgoing connection); a cluster left with two
    /// of three would lose its quorum when the test kills the leader, so
    /// such a start is retried on fresh ports.
    fn start(dir: &Path) -> Etcd3 {
        for attempt in 0..5 {
            let mut e = Etcd3::spawn(&dir.join(format!("try{attempt}")));
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                if e.all_agree() {
                    return e;
                }
                if e.any_exited() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!("etcd: three members did not come up agreeing (attempt {attempt}); again on fresh ports");
        }
        panic!("etcd: three members did not come up in five attempts");
    }

    fn spawn(dir: &Path) -> Etcd3 {
        let clients: Vec<u16> = (0..3).map(|_| free_ports(1)).collect();
        let peers: Vec<u16> = (0..3).map(|_| free_ports(1)).collect();
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{i}=http://127.0.0.1:{p}"))
            .collect();
        let initial = initial.join(",");
        let members = (0..3)
            .map(|i| {
                let c = format!("http://127.0.0.1:{}", clients[i]);
                let p = format!("http://127.0.0.1:{}", peers[i]);
                let child = Command::new("etcd")
                    .args(["--name", &format!("e{i}"), "--data-dir"])
                    .arg(dir.join(format!("etcd{i}")))
                    .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
                    .args([
                        "--listen-peer-urls",
                        &p,
                        "--initial-advertise-peer-urls",
                        &p,
                    ])
                    .args([
                        "--initial-cluster",
                        &initial,
                        "--initial-cluster-state",
                        "new",
                    ])
                    .arg("--unsafe-no-fsync")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                Some(KillOnDrop(child))
            })
            .collect();
        Etcd3 { members, clients }
    }

    /// Every member answers and names the same leader.
    fn all_agree(&self) -> bool {
        let leaders: Option<Vec<String>> = (0..3).map(|i| Some(self.status(i)?.1)).collect();
        leaders.is_some_and(|l| l.iter().all(|x| *x == l[0]))
    }

    /// Has a member's process exited (a port it could not bind)?
    fn any_exited(&mut self) -> bool {
        self.members
            .iter_mut()
            .flatten()
            .any(|m| !matches!(m.0.try_wait(), Ok(None)))
    }

    fn urls(&self) -> String {
        let urls: Vec<String> = self
            .clients
            .iter()
            .map(|c| format!("http://127.0.0.1:{c}"))
            .collect();
        urls.join(",")
    }

    /// Member `i`'s `/v3/maintenance/status` (etcd's JSON gateway):
    /// (its member id, the leader's id).
    fn status(&self, i: usize) -> Option<(String, String)> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.clients[i])).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let body = "{}";
        write!(
            s,
            "POST /v3/maintenance/status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let json = &out[out.find("\r\n\r\n")? + 4..];
        let v: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
        let me = v["header"]["member_id"].as_str()?.to_string();
        let leader = v["leader"].as_str()?.to_string();
        (leader != "0").then_some((me, leader))
    }

    /// The index of the member that leads now.
    fn leader(&self) -> Option<usize> {
        (0..3).find(|i| {
            self.members[*i].is_some() && self.status(*i).is_some_and(|(me, leader)| me == leader)
        })
    }
}

/// etcd's leader killed (-9) under a cluster of two servers using all
/// three etcd members: the servers keep their membership (their etcd
/// calls and keep-alive streams move to the live members), nothing
/// acknowledged is lost, writes go on through either server, and every
/// table keeps one live owner.
#[test]
fn the_etcd_leader_killed_under_a_cluster() {
    if !have_etcd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = Etcd3::start(dir.path());
    let urls = etcd.urls();
    let (a, a_addr) = serve(dir.path(), &urls, "a");
    let _a = KillOnDrop(a);
    let secret = dir.path().join("a");
    wait_root_assigned(&urls, &secret);
    let (b, b_addr) = serve(dir.path(), &urls, "b");
    let _b = KillOnDrop(b);
    sextant_ok(&b_addr, &secret, &["mkdir", "/d"]);
    for i in 0..20 {
        sextant_ok(&b_addr, &secret, &["touch", &format!("/d/f{i}")]);
    }
    let leader = etcd.leader().expect("a leader");
    if let Some(mut m) = etcd.members[leader].take() {
        common::kill9(&mut m.0);
    }
    for i in 0..20 {
        let addr = if i % 2 == 0 { &a_addr } else { &b_addr };
        sextant_ok(addr, &secret, &["touch", &format!("/d/g{i}")]);
    }
    wait_for("a new etcd leader", Duration::from_secs(30), || {
        etcd.leader().is_some()
    });
    wait_for(
        "every table has a live owner",
        Duration::from_secs(40),
        || {
            let Ok(st) = try_status_on(&urls, &secret) else {
                return false;
            };
            let names: Vec<String> = st["servers"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s["name"].as_str().map(String::from))
                .collect();
            names.len() == 2
                && st["tables"].as_array().unwrap().iter().all(|t| {
                    t["owner"]
                        .as_str()
                        .is_some_and(|o| names.iter().any(|n| n == o))
                })
        },
    );
    for addr in [&a_addr, &b_addr] {
        let listing = sextant_ok(addr, &secret, &["ls", "/d"]);
        assert_eq!(listing.split_whitespace().count(), 40, "{addr}: {listing}");
    }
}

/// The FUSE mount on a cluster, with tools that were not written for it:
/// `cp -a` of a tree onto a mount of server a while the tables split
/// (small limits), then server b joins and the tables spread; through
/// the mount, `mv` between directories on different servers, new
/// directories and files, `rm -r`, and a table moved under the mount;
/// the same done on a local copy; `diff -r` and a listing with modes and
/// sizes must then agree.
#[test]
fn tools_on_a_mount_of_a_cluster_see_one_file_system() {
    if !have_etcd() || !common::fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(dir.path());
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = Command::new(BIN)
        .args(["--server", &a_addr, "--data"])
        .arg(&secret)
        .arg("mount")
        .arg("--log")
        .arg(dir.path().join("mount.log"))
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("fusermount3").arg("-u").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    // The reference tree.
    let reference = dir.path().join("ref");
    common::sh(
        dir.path(),
        "mkdir ref && cd ref && for d in 0 1 2 3 4 5 6 7; do mkdir -p d$d/sub; \
         for f in 0 1 2 3 4 5; do echo \"$d/$f\" > d$d/f$f; done; \
         echo deep > d$d/sub/x; chmod 640 d$d/f1; done; ln -s d1/f0 link",
    );
    common::sh(dir.path(), "cp -a ref/. mnt/");
    // b joins; the coordinator spreads the tables over both.
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    // The same changes on both trees.
    for root in [&mnt, &reference] {
        common::sh(
            root,
            "for d in 0 1 2 3; do mv d$d/f2 d$((7 - d))/moved$d; done; \
             mkdir -p top/a/b && echo new > top/a/b/file && mv d5/sub top/a/sub5 && \
             rm -r d6 && ln d0/f3 d7/hard",
        );
    }
    // A table moved under the mount.
    let moved = Command::new(BIN)
        .args(["cluster", "move", "/d3", "b", "--etcd", &etcd.url])
        .env("SEXTANT_SECRET_FILE", secret.join("secret"))
        .output()
        .unwrap();
    let _ = moved;
    common::sh(&mnt, "echo after >> d3/f0");
    common::sh(&reference, "echo after >> d3/f0");
    let diff = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(&reference)
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        diff.status.success(),
        "the mount differs from the local copy:\n{}{}",
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );
    // (A directory's size is the file system's own: not compared.)
    let listing = |root: &Path| {
        common::sh(
            root,
            "(find . -type d -printf '%p %y %m %n\\n'; \
             find . ! -type d -printf '%p %y %m %s %n\\n') | sort",
        )
    };
    assert_eq!(listing(&mnt), listing(&reference));
}

/// Hundreds of requests in flight while their table moves back and forth
/// and a server then leaves: a `sextant bench` with 256 workers (every
/// one of its operations checked: created once, found, listed, removed
/// once) runs through server a while the table holding its directory is
/// moved between a and b, then a is drained and stopped (SIGTERM: a
/// clean leave). The bench must finish without a single error.
#[test]
fn moves_and_a_leave_under_hundreds_of_requests_in_flight() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (a, b, b_addr, secret) = two_servers_a_holding_the_root(dir.path(), &etcd.url, &[]);
    let mut a = a;
    let _b = b;
    sextant_ok(&b_addr, &secret, &["mkdir", "/load"]);
    // Through b, so the bench outlives a.
    let bench = sextant_child(
        &b_addr,
        &secret,
        &["bench", "-F", "-n", "256", "-i", "30", "--under", "/load"],
    );
    let started = Instant::now();
    let mut moves = 0;
    for to in ["b", "a", "b", "a"] {
        let out = Command::new(BIN)
            .args(["cluster", "move", "/load", to, "--etcd", &etcd.url])
            .env("SEXTANT_SECRET_FILE", secret.join("secret"))
            .output()
            .unwrap();
        if out.status.success() {
            moves += 1;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    // a leaves cleanly: its tables go to b first.
    signal(&a.0, "-TERM");
    let left = a.0.wait().unwrap();
    assert!(left.success(), "a's clean stop: {left:?}");
    let out = bench.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "bench across {moves} moves and a leave ({:?}): {}\n{}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(moves >= 2, "the table moved under the load ({moves} moves)");
    let st = status_on(&etcd.url, &secret);
    assert!(tables_by_server(&st).iter().all(|t| t.0 == "b"), "{st}");
    drop(etcd.child);
}

/// Balancing by request rate: tables spread over two servers; then one
/// table (holding /hot, moved to a) takes all the requests. Its server's rates say it is
/// the busy one, so the coordinator moves its other tables away until it
/// keeps only the hot one — which it never moves (that would only move
/// the load). Counting tables alone would leave the servers as they were.
#[test]
fn a_busy_server_gives_its_idle_tables_away() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    for d in ["hot", "c1", "c2", "c3", "c4", "c5"] {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/{d}")]);
        for f in 0..8 {
            sextant_ok(&a_addr, &secret, &["touch", &format!("/{d}/f{f}")]);
        }
    }
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    // a holds /hot's table and the last directory's (two tables; one
    // more than b at most, which counting tables would leave alone).
    for path in ["/hot", "/c5"] {
        let _ = Command::new(BIN)
            .args(["cluster", "move", path, "a", "--etcd", &etcd.url])
            .env("SEXTANT_SECRET_FILE", secret.join("secret"))
            .output()
            .unwrap();
    }
    let before = tables_by_server(&status_on(&etcd.url, &secret));
    assert!(
        before.iter().any(|x| x.0 == "a" && x.1 >= 2),
        "a holds two tables: {before:?}"
    );
    // Requests on /hot only, until a keeps just that table.
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut last;
    loop {
        for _ in 0..10 {
            sextant_ok(&a_addr, &secret, &["ls", "/hot"]);
        }
        last = status_on(&etcd.url, &secret);
        let t = tables_by_server(&last);
        let a_tables = t.iter().find(|x| x.0 == "a").map_or(0, |x| x.1);
        let b_tables = t.iter().find(|x| x.0 == "b").map_or(0, |x| x.1);
        if a_tables == 1 && b_tables >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a still holds idle tables next to the hot one: {last}"
        );
    }
    // The hot table stayed where it is.
    let listing = sextant_ok(&a_addr, &secret, &["ls", "/hot"]);
    assert_eq!(listing.split_whitespace().count(), 8, "{last}");
    drop(etcd.child);
}

/// Issue 21, spreading: a holds 40 tables (a split at every directory)
/// and publishes its load, then b and c join. The coordinator keeps
/// several moves in flight (`balance_moves`, default 16): the three hold
/// even shares (one table apart at most, no move pending) within 60 s of
/// the joins (~20 s here), and every directory is still there. One move
/// at a time, each move waited for the one before and for its target's
/// first load figures (~10 s): two moves per 10 s, 27 moves, over two
/// minutes (fails so with `SEXTANT_BALANCE_MOVES=1` given to the three
/// servers). (Before any server publishes a load, no figures are awaited
/// and even one at a time the moves follow each other at once.)
#[test]
fn servers_joining_get_their_share_of_many_tables_within_seconds() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, TINY_TABLES);
    let (_, n) = forty_directories_in_thirty_tables(&etcd.url, &a_addr, &secret, None);
    let joined = Instant::now();
    let (b, _) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    let (c, _) = serve_with(dir.path(), &etcd.url, "c", &["--config", &config]);
    let _c = KillOnDrop(c);
    let last = wait_for_even_shares(&etcd.url, &secret, 3, Duration::from_secs(60));
    eprintln!(
        "{n} tables spread over a, b, c {:?} after the joins: {:?}",
        joined.elapsed(),
        tables_by_server(&last)
    );
    let listing = sextant_ok(&a_addr, &secret, &["ls", "/"]);
    assert_eq!(listing.split_whitespace().count(), 40, "{listing}");
    drop(etcd.child);
}

/// `/m0` … `/m39` made through `a_addr` (each with a file `file` if
/// given), once the first server split them into at least 30 tables and
/// published its load: the directories, and the number of tables.
fn forty_directories_in_thirty_tables(
    etcd: &str,
    a_addr: &str,
    secret: &Path,
    file: Option<&str>,
) -> (Vec<String>, usize) {
    let dirs: Vec<String> = (0..40).map(|d| format!("/m{d}")).collect();
    let mut mkdir = vec!["mkdir"];
    mkdir.extend(dirs.iter().map(String::as_str));
    sextant_ok(a_addr, secret, &mkdir);
    if let Some(file) = file {
        let files: Vec<String> = dirs.iter().map(|d| format!("{d}/{file}")).collect();
        let mut touch = vec!["touch"];
        touch.extend(files.iter().map(String::as_str));
        sextant_ok(a_addr, secret, &touch);
    }
    let tables = || {
        status_on(etcd, secret)["tables"]
            .as_array()
            .map_or(0, Vec::len)
    };
    wait_for("a splits into 30 tables", Duration::from_secs(60), || {
        tables() >= 30
    });
    wait_for("a publishes its load", Duration::from_secs(30), || {
        etcd_keys(etcd, "/sextant/load/")
            .iter()
            .any(|k| k.ends_with("/a"))
    });
    (dirs, tables())
}

/// Waits until `servers` servers hold the tables in shares at most one
/// apart, none moving; the last `cluster status` seen.
fn wait_for_even_shares(
    etcd: &str,
    secret: &Path,
    servers: usize,
    within: Duration,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    wait_for_every(
        "even shares of the tables",
        within,
        Duration::from_millis(250),
        || {
            last = status_on(etcd, secret);
            let t = tables_by_server(&last);
            let moving = last["tables"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|t| !t["moving_to"].is_null()));
            let (lo, hi) = (t.iter().map(|x| x.1).min(), t.iter().map(|x| x.1).max());
            t.len() == servers && !moving && hi.zip(lo).is_some_and(|(h, l)| h - l <= 1)
        },
    );
    last
}

/// A receiver paused past its lease while many balancing moves are in
/// flight (issue 21, spreading; the simulation covers this over 200
/// seeds, here on real processes): b and c join a that holds ~30 tables,
/// the coordinator sends them several at once, and b is stopped (SIGSTOP)
/// for 5 s — more than twice its 2 s lease — once it holds some and more
/// are on their way. The moves to b that were in flight end (at a or c),
/// b's tables are taken over while it sleeps, and writes made meanwhile
/// are served; b wakes without a lease, acknowledges nothing stale,
/// rejoins and gets its share again. Nothing acknowledged is lost: every
/// directory, its file from before and its file from the pause.
#[test]
fn a_receiver_paused_past_its_lease_with_many_moves_in_flight_loses_nothing() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, TINY_TABLES);
    let (dirs, _) = forty_directories_in_thirty_tables(&etcd.url, &a_addr, &secret, Some("before"));
    let (b, _) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let b = KillOnDrop(b);
    let (c, _) = serve_with(dir.path(), &etcd.url, "c", &["--config", &config]);
    let _c = KillOnDrop(c);
    // b holds some and more are on their way to it (or, on a slow
    // machine, it holds its share already: paused all the same).
    wait_for_every(
        "b receives tables",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            let st = status_on(&etcd.url, &secret);
            tables_by_server(&st)
                .iter()
                .any(|(name, n)| name == "b" && *n > 0)
        },
    );
    let st = status_on(&etcd.url, &secret);
    let in_flight = st["tables"].as_array().map_or(0, |ts| {
        ts.iter().filter(|t| !t["moving_to"].is_null()).count()
    });
    signal(&b.0, "-STOP");
    std::thread::sleep(Duration::from_secs(5));
    // Served meanwhile: b's tables went to a and c.
    let during: Vec<String> = dirs.iter().map(|d| format!("{d}/during")).collect();
    let mut touch = vec!["touch"];
    touch.extend(during.iter().map(String::as_str));
    sextant_ok(&a_addr, &secret, &touch);
    signal(&b.0, "-CONT");
    let last = wait_for_even_shares(&etcd.url, &secret, 3, Duration::from_secs(90));
    eprintln!(
        "{in_flight} moves in flight when b was stopped; after: {:?}",
        tables_by_server(&last)
    );
    for d in &dirs {
        let listing = sextant_ok(&a_addr, &secret, &["ls", d]);
        let mut names: Vec<&str> = listing.split_whitespace().collect();
        names.sort_unstable();
        assert_eq!(names, ["before", "during"], "{d}");
    }
    let listing = sextant_ok(&a_addr, &secret, &["ls", "/"]);
    assert_eq!(listing.split_whitespace().count(), 40, "{listing}");
    drop(etcd.child);
}

/// Operations that pull a table and the coordinator's balancing must not
/// fight: with two servers and tiny tables, new directories under /c0
/// land in a table the other server holds; the server making them pulls
/// it, and balancing then leaves its tables together for a while (it
/// used to move one straight back, table after table, until the mkdir
/// failed — found by scripts/cluster-bench.sh pingpong).
#[test]
fn pulled_tables_are_not_balanced_straight_back() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(
        dir.path(),
        &etcd.url,
        "table_dir_limit = 8\ntable_inode_limit = 200\n",
    );
    let (b, _) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    sextant_ok(&a_addr, &secret, &["mkdir", "/c0", "/c1"]);
    let started = Instant::now();
    let dirs: Vec<String> = (0..30).map(|i| format!("/c0/d{i}")).collect();
    let mut args = vec!["mkdir"];
    args.extend(dirs.iter().map(String::as_str));
    sextant_ok(&a_addr, &secret, &args);
    let listing = sextant_ok(&a_addr, &secret, &["ls", "/c0"]);
    assert_eq!(listing.split_whitespace().count(), 30);
    // Each change of hands raises a table's epoch: a few, not dozens.
    let st = status_on(&etcd.url, &secret);
    let moves: u64 = st["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["epoch"].as_u64().unwrap_or(1) - 1)
        .sum();
    assert!(
        moves <= 8,
        "{moves} changes of hands for 30 mkdirs in {:?}: {st}",
        started.elapsed()
    );
    drop(etcd.child);
}

/// Found by the cluster benchmarks: `cluster status --data DIR` (a
/// server's data directory, holding the cluster secret) reaches every
/// server without SEXTANT_SECRET_FILE; and every server of a cluster
/// stopped at once (SIGTERM) leaves promptly — each used to wait its
/// whole drain timeout (30 s) for another server to take its tables.
#[test]
fn status_with_data_and_all_servers_stopped_at_once() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (a, b, b_addr, secret) = two_servers_a_holding_the_root(dir.path(), &etcd.url, &[]);
    for d in ["/a", "/b", "/c"] {
        sextant_ok(&b_addr, &secret, &["mkdir", d]);
    }
    let out = Command::new(BIN)
        .args(["--json", "--data"])
        .arg(&secret)
        .args(["cluster", "status", "--etcd", &etcd.url])
        .env_remove("SEXTANT_SECRET_FILE")
        .env_remove("SEXTANT_SECRET")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for s in st["servers"].as_array().unwrap() {
        assert!(s["error"].is_null() && s["inodes"].is_u64(), "{s}");
    }
    let (mut a, mut b) = (a, b);
    let stopped = Instant::now();
    signal(&a.0, "-TERM");
    signal(&b.0, "-TERM");
    let (ra, rb) = (a.0.wait().unwrap(), b.0.wait().unwrap());
    assert!(ra.success() && rb.success(), "{ra:?} {rb:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(15),
        "both stopped after {:?} (the drain timeout is 30 s)",
        stopped.elapsed()
    );
    drop(etcd.child);
}

/// A search goes to the server holding its starting point's table: with
/// every table drained to b, `find` asked of a (which holds nothing)
/// answers in full, as through b (it used to fail with EIO: a searched
/// only its own tables).
#[test]
fn find_through_a_server_holding_nothing_goes_to_the_owner() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, _b, b_addr, secret) = two_servers_a_holding_the_root(dir.path(), &etcd.url, &[]);
    let a_addr = status_on(&etcd.url, &secret)["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "a")
        .and_then(|s| s["address"].as_str())
        .unwrap()
        .to_string();
    sextant_ok(&b_addr, &secret, &["mkdir", "/d", "/d/e"]);
    for f in ["/d/f1", "/d/e/f2", "/top"] {
        sextant_ok(&b_addr, &secret, &["touch", f]);
    }
    let out = Command::new(BIN)
        .args(["cluster", "drain", "a", "--etcd", &etcd.url])
        .env("SEXTANT_SECRET_FILE", secret.join("secret"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("a holds no table", Duration::from_secs(30), || {
        tables_by_server(&status_on(&etcd.url, &secret))
            .iter()
            .all(|t| t.0 != "a" || t.1 == 0)
    });
    let through_b = sextant_ok(&b_addr, &secret, &["find", "/"]);
    let through_a = sextant_ok(&a_addr, &secret, &["find", "/"]);
    assert_eq!(through_a, through_b);
    assert_eq!(through_a.lines().count(), 6, "{through_a}");
    drop(etcd.child);
}

/// Polls `f` every 20 ms until it holds; fails after `within`.
fn seen_within(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < within,
            "{what}: not seen within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The owner and epoch of table `table` in the cluster's status.
fn owner_of(etcd: &str, secret: &Path, table: u64) -> (String, u64) {
    let s = status_on(etcd, secret);
    let t = s["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"].as_u64() == Some(table))
        .unwrap_or_else(|| panic!("no table {table} in {s}"));
    (
        t["owner"].as_str().unwrap_or_default().to_string(),
        t["epoch"].as_u64().unwrap_or_default(),
    )
}

/// A mount of a cluster keeps its kernel caches (60 s here) exact for
/// changes made through *other* servers: a server streams only the
/// changes it ran, so the mount (through a) watches every server of the
/// route map. /w's table is moved to b; a CLI given b's address chmods,
/// creates, renames and removes in /w, and the mount sees each change
/// within seconds. Then server c joins after the mount started and takes
/// /w's table: changes made through c are seen too (the mount follows
/// the map). Before, the mount watched a alone and kept every one of
/// these stale for the whole timeout.
#[test]
fn a_fuse_mount_of_a_cluster_sees_changes_made_through_every_server() {
    if !common::fuse_available() {
        return;
    }
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    let c = config.as_str();
    // A few tables (the limits are small), then b joins and takes some.
    for d in ["d0", "d1", "d2", "d3", "w", "w/sub"] {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/{d}")]);
        sextant_ok(&a_addr, &secret, &["touch", &format!("/{d}/f")]);
    }
    sextant_ok(&a_addr, &secret, &["touch", "/w/g"]);
    let (b, b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", c]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    let table = move_table(&etcd.url, &secret, "/w", "b");
    let on_b = owner_of(&etcd.url, &secret, table);
    assert_eq!(on_b.0, "b");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _unmount = mount_ok(
        Command::new(BIN)
            .args(["--server", &a_addr, "--data"])
            .arg(&secret)
            .args(["mount", "--attr-timeout", "60", "--entry-timeout", "60"])
            .arg("--log")
            .arg(dir.path().join("mount.log"))
            .arg(&mnt),
        &mnt,
    );
    let w = mnt.join("w");
    // The kernel caches these (and the absent names) for 60 s.
    assert_eq!(mode(&w.join("f")), Some(0o644));
    assert!(w.join("g").exists());
    assert!(!w.join("new").exists());
    assert!(!w.join("h").exists());
    let soon = Duration::from_secs(3);

    sextant_ok(&b_addr, &secret, &["chmod", "600", "/w/f"]);
    seen_within("a chmod through b", soon, || {
        mode(&w.join("f")) == Some(0o600)
    });
    sextant_ok(&b_addr, &secret, &["touch", "/w/new"]);
    seen_within("a create through b", soon, || w.join("new").exists());
    sextant_ok(&b_addr, &secret, &["mv", "/w/g", "/w/h"]);
    seen_within("a rename through b", soon, || {
        !w.join("g").exists() && w.join("h").exists()
    });
    sextant_ok(&b_addr, &secret, &["rm", "/w/new"]);
    seen_within("a removal through b", soon, || !w.join("new").exists());
    assert_eq!(
        owner_of(&etcd.url, &secret, table),
        on_b,
        "the test's premise: /w's table stayed on b throughout"
    );

    // Server c joins after the mount started and takes /w's table.
    assert!(!w.join("late").exists());
    assert_eq!(mode(&w.join("h")), Some(0o644));
    let (c3, c_addr) = serve_with(dir.path(), &etcd.url, "c", &["--config", c]);
    let _c = KillOnDrop(c3);
    wait_for("c is a member", Duration::from_secs(30), || {
        is_member(&etcd.url, &secret, "c")
    });
    move_table(&etcd.url, &secret, "/w", "c");
    let on_c = owner_of(&etcd.url, &secret, table);
    assert_eq!(on_c.0, "c");
    sextant_ok(&c_addr, &secret, &["touch", "/w/late"]);
    sextant_ok(&c_addr, &secret, &["chmod", "640", "/w/h"]);
    // Within the map's poll (1 s) and a connect.
    let later = Duration::from_secs(5);
    seen_within("a create through c", later, || w.join("late").exists());
    seen_within("a chmod through c", later, || {
        mode(&w.join("h")) == Some(0o640)
    });
    // And from now on at once.
    sextant_ok(&c_addr, &secret, &["rm", "/w/late"]);
    seen_within("a removal through c", soon, || !w.join("late").exists());
    assert_eq!(
        owner_of(&etcd.url, &secret, table),
        on_c,
        "the test's premise: /w's table stayed on c"
    );
    drop(etcd.child);
}

/// A mount with a client key limited to /home/alice (`--subdir
/// /home/alice`) on a cluster keeps its kernel caches (60 s) exact for
/// changes in the subtree made through a server that holds part of the
/// subtree but not the directories above it: /home/alice is a's,
/// /home/alice/d b's. b places d's changes in the key's subtree by reading
/// a's directories (the key's watch filter across servers); before, it
/// passed on only what it could place by itself — nothing here — and the
/// mount kept these stale for the whole timeout.
#[test]
fn a_keyed_mount_of_a_cluster_sees_changes_whose_ancestors_another_server_holds() {
    if !common::fuse_available() {
        return;
    }
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, TINY_TABLES);
    for d in ["/home", "/home/alice", "/home/alice/d", "/home/bob"] {
        sextant_ok(&a_addr, &secret, &["mkdir", d]);
    }
    for f in ["/home/alice/g", "/home/bob/secret", "/home/alice/d/f"] {
        sextant_ok(&a_addr, &secret, &["touch", f]);
    }
    let (b, b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", config.as_str()]);
    let _b = KillOnDrop(b);
    wait_for("b is a member", Duration::from_secs(60), || {
        is_member(&etcd.url, &secret, "b")
    });
    let d_table = move_table(&etcd.url, &secret, "/home/alice/d", "b");
    let alice_table = move_table(&etcd.url, &secret, "/home/alice", "a");
    assert_ne!(
        d_table, alice_table,
        "the test's premise: d's table is not /home/alice's"
    );
    let key = dir.path().join("alice.key");
    sextant_ok(
        &a_addr,
        &secret,
        &[
            "auth",
            "add",
            "alice",
            "--path",
            "/home/alice",
            "--out",
            key.to_str().unwrap(),
        ],
    );
    let mnt = dir.path().join("keyed");
    std::fs::create_dir(&mnt).unwrap();
    let _unmount = mount_ok(
        Command::new(BIN)
            .args(["--server", &a_addr, "--data"])
            .arg(dir.path().join("keyed-data"))
            .arg("--key-file")
            .arg(&key)
            .env_remove("SEXTANT_SECRET_FILE")
            .args(["mount", "--subdir", "/home/alice"])
            .args(["--attr-timeout", "60", "--entry-timeout", "60", "--log"])
            .arg(dir.path().join("keyed-mount.log"))
            .arg(&mnt),
        &mnt,
    );
    let d = mnt.join("d");
    // The kernel caches these (and the absent name) for 60 s.
    assert_eq!(mode(&d.join("f")), Some(0o644));
    assert!(!d.join("new").exists());
    let soon = Duration::from_secs(5);
    sextant_ok(&b_addr, &secret, &["chmod", "600", "/home/alice/d/f"]);
    seen_within("a chmod in d through b", soon, || {
        mode(&d.join("f")) == Some(0o600)
    });
    sextant_ok(&b_addr, &secret, &["touch", "/home/alice/d/new"]);
    seen_within("a create in d through b", soon, || d.join("new").exists());
    assert_eq!(
        (
            owner_of(&etcd.url, &secret, d_table).0,
            owner_of(&etcd.url, &secret, alice_table).0
        ),
        ("b".to_string(), "a".to_string()),
        "the test's premise: the tables stayed where they were put"
    );
    drop(etcd.child);
}

/// Concurrent renames across servers that together would form a cycle
/// (issue 21 item 2): `/p` held by a, `/q` by b; each round a client of a
/// runs `mv /p/xN /q/yN/xN` while a client of b runs `mv /q/yN
/// /p/xN/yN`. Done one after the other, the second must fail (ENOENT,
/// or EINVAL as ext4 gives for a directory moved under itself); at the
/// same time, exactly one may win — never both (a cycle, with both
/// directories cut off from the root), never neither (EXDEV or a stuck
/// pull). Afterwards every directory is reachable from the root exactly
/// once.
#[test]
fn cycle_forming_renames_across_servers_never_make_a_cycle() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, _b, a_addr, b_addr, secret) = pqrs_on_two_servers(dir.path(), &etcd.url);
    let rounds = 12;
    let mut outcomes = Vec::new();
    for n in 0..rounds {
        let (x, y) = (format!("/p/x{n}"), format!("/q/y{n}"));
        sextant_ok(&a_addr, &secret, &["mkdir", &x]);
        sextant_ok(&a_addr, &secret, &["mkdir", &y]);
        p_on_a_q_on_b(&etcd.url, &secret);
        let start = |addr: &str, from: &str, to: &str| {
            Command::new(BIN)
                .args(["--server", addr, "--data"])
                .arg(&secret)
                .args(["mv", from, to])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        // Started in either order, so that either may reach its server
        // first.
        let (one, two) = if n % 2 == 0 {
            let one = start(&a_addr, &x, &format!("{y}/x{n}"));
            (one, start(&b_addr, &y, &format!("{x}/y{n}")))
        } else {
            let two = start(&b_addr, &y, &format!("{x}/y{n}"));
            (start(&a_addr, &x, &format!("{y}/x{n}")), two)
        };
        let (one, two) = (
            one.wait_with_output().unwrap(),
            two.wait_with_output().unwrap(),
        );
        let said = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).trim().to_string();
        let won = [&one, &two].iter().filter(|o| o.status.success()).count();
        assert_eq!(
            won,
            1,
            "round {n}: exactly one of the pair wins: a: {:?} {}; b: {:?} {}",
            one.status.code(),
            said(&one),
            two.status.code(),
            said(&two)
        );
        let loser = if one.status.success() { &two } else { &one };
        let why = said(loser).to_lowercase();
        assert!(
            why.contains("no such file") || why.contains("invalid argument"),
            "round {n}: the loser fails as on ext4, not with {why:?}"
        );
        outcomes.push(if one.status.success() { 'a' } else { 'b' });
    }
    eprintln!("winners: {}", outcomes.iter().collect::<String>());
    // Every directory reachable from the root exactly once; the walk ends.
    for addr in [&a_addr, &b_addr] {
        let out = sextant_ok(addr, &secret, &["find", "/", "-type", "d"]);
        let dirs: Vec<&str> = out.lines().collect();
        let unique: std::collections::BTreeSet<&str> = dirs.iter().copied().collect();
        assert_eq!(dirs.len(), unique.len(), "a directory listed twice: {out}");
        assert_eq!(dirs.len(), 1 + 4 + 2 * rounds, "{out}");
        for n in 0..rounds {
            for name in [format!("x{n}"), format!("y{n}")] {
                assert_eq!(
                    dirs.iter()
                        .filter(|d| d.ends_with(&format!("/{name}")))
                        .count(),
                    1,
                    "{name} reachable once: {out}"
                );
            }
        }
        let stats = sextant_ok(addr, &secret, &["stats", "--json", "/", "-type", "d"]);
        assert!(
            stats.contains(&format!("\"count\":{}", 1 + 4 + 2 * rounds)),
            "{stats}"
        );
    }
}

/// A local user without the secret (the server's Unix socket, identity
/// from the kernel) searches a cluster whose namespace is spread: every
/// part of the search goes through the socket's server, which runs it on
/// the part's holder as that user. `find /` as nobody prints exactly what
/// root's prints minus what nobody may not list (a 0700 directory's
/// entries), says why, and exits 1 — as GNU find does; `ls`, `find` of a
/// directory and `touch` work wherever the tables are (the server
/// forwards what another server holds). Before, the other server refused
/// for want of the secret.
#[test]
fn a_local_user_searches_a_spread_cluster_through_the_socket() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let (_a, a_addr, secret, config, sock) =
        first_server_on_socket(dir.path(), &etcd.url, SMALL_TABLES, &[]);
    let sock_env = sock.to_str().unwrap();
    for d in 0..8 {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/d{d}")]);
        for f in 0..6 {
            sextant_ok(&a_addr, &secret, &["touch", &format!("/d{d}/f{f}")]);
        }
    }
    sextant_ok(&a_addr, &secret, &["chmod", "700", "/d3"]);
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    let sorted = |out: &str| {
        let mut v: Vec<String> = out.lines().map(str::to_string).collect();
        v.sort();
        v
    };
    let everything = sorted(&sextant_ok(&a_addr, &secret, &["find", "/"]));
    assert_eq!(everything.len(), 1 + 8 + 48);
    let want: Vec<String> = everything
        .iter()
        .filter(|p| !p.starts_with("/d3/"))
        .cloned()
        .collect();
    let nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                BIN,
            ])
            .args(["--server", &format!("unix:{sock_env}")])
            .args(args)
            .env_remove("SEXTANT_SECRET")
            .env_remove("SEXTANT_SECRET_FILE")
            .output()
            .unwrap()
    };
    let out = nobody(&["find", "/"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        sorted(&String::from_utf8_lossy(&out.stdout)),
        want,
        "find / as nobody: {err}"
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("'/d3': Permission denied"), "{err}");
    // Other operations through the socket, wherever the tables are: the
    // server forwards what another server holds, as nobody.
    for d in (0..8).filter(|d| *d != 3) {
        let ls = nobody(&["ls", &format!("/d{d}")]);
        assert_eq!(
            String::from_utf8_lossy(&ls.stdout)
                .split_whitespace()
                .count(),
            6,
            "ls /d{d} as nobody: {}",
            String::from_utf8_lossy(&ls.stderr)
        );
        let find = nobody(&["find", &format!("/d{d}"), "-name", "f1"]);
        assert_eq!(
            String::from_utf8_lossy(&find.stdout).trim(),
            format!("/d{d}/f1"),
            "{}",
            String::from_utf8_lossy(&find.stderr)
        );
    }
    let denied = nobody(&["ls", "/d3"]);
    assert!(!denied.status.success());
    sextant_ok(&a_addr, &secret, &["chmod", "777", "/d6"]);
    let made = nobody(&["touch", "/d6/by-nobody"]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let st = sextant_ok(&a_addr, &secret, &["--json", "stat", "/d6/by-nobody"]);
    assert!(st.contains("\"uid\":65534"), "{st}");
    sextant_ok(&a_addr, &secret, &["rm", "/d6/by-nobody"]);
    let stats = nobody(&["--json", "stats", "/"]);
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap_or_default();
    assert_eq!(
        v["total"]["count"].as_u64(),
        Some(want.len() as u64),
        "stats as nobody: {}",
        String::from_utf8_lossy(&stats.stderr)
    );
}

/// `/d0` … `/d7`, each with `f0` … `f5` (one `touch` per directory).
fn eight_dirs_of_six_files(addr: &str, secret: &Path) {
    for d in 0..8 {
        sextant_ok(addr, secret, &["mkdir", &format!("/d{d}")]);
        let files: Vec<String> = (0..6).map(|f| format!("/d{d}/f{f}")).collect();
        let mut args = vec!["touch"];
        args.extend(files.iter().map(String::as_str));
        sextant_ok(addr, secret, &args);
    }
}

/// `find`, `stats` and `du` of a directory on a cluster whose namespace
/// is spread resolve the starting point's path once (the depth-0 search
/// that finds it), not again for the search below it: on a cluster every
/// resolution is a walk across the servers, the larger part of what a
/// small query's scope below `/` cost more than on one server
/// (BENCHMARKS, "Search across servers: one resolution per starting
/// point"). Counted by the client's phase marks (`SEXTANT_SEARCH_TIMING`);
/// the answers are checked too.
#[test]
fn a_spread_search_resolves_its_starting_point_once() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    eight_dirs_of_six_files(&a_addr, &secret);
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    // (output, resolutions of a scope path)
    let timed = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["--server", &a_addr, "--data"])
            .arg(&secret)
            .args(args)
            .env("SEXTANT_SEARCH_TIMING", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{args:?}: {err}");
        // (By a spread search, or by `stats` and `du` themselves, which
        // then ask the starting point and the totals below it at once.)
        let resolved = err
            .lines()
            .filter(|l| {
                l.contains("resolving the scope's path")
                    || l.contains("resolving the starting point's path")
            })
            .count();
        (String::from_utf8(out.stdout).unwrap(), resolved, err)
    };
    for d in ["/d2", "/d5"] {
        // (Once: by the server asked, which gathers the depth-0 search of
        // the starting point; the search below starts at its SOID.)
        let (out, n, err) = timed(&["find", d, "-name", "f1"]);
        assert_eq!(out.trim(), format!("{d}/f1"), "{err}");
        assert_eq!(n, 0, "find {d}: the path resolved {n} times here: {err}");
        // (`stats` and `du`: none here — the server asked resolves it
        // once per search it gathers, `totals_on_a_spread_cluster_…`.)
        let (out, n, err) = timed(&["--json", "stats", d]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["total"]["count"].as_u64(), Some(7), "{out}");
        assert_eq!(n, 0, "stats {d}: the path resolved {n} times here: {err}");
        let (out, n, err) = timed(&["du", d]);
        assert!(out.contains("7 entries"), "{out}");
        assert_eq!(n, 0, "du {d}: the path resolved {n} times here: {err}");
    }
}

/// Issue 21 (totals across servers): `stats` and `du` on a cluster whose
/// namespace is spread are answered by the server asked, which gathers
/// every server's part itself (`SearchRequest.gather`): the command
/// fetches no route map, resolves no path itself and asks no other server
/// (the client's timing marks: no `Map`, no part, a gathered answer) —
/// before, each command fetched the map, resolved its path and opened a
/// connection to every server. The totals stay exact: as root, for a
/// caller who may not list a 0700 directory, for a key limited to a
/// subtree, and while tables move between the servers.
#[test]
fn totals_on_a_spread_cluster_are_gathered_by_the_server_asked() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    eight_dirs_of_six_files(&a_addr, &secret);
    sextant_ok(&a_addr, &secret, &["chmod", "700", "/d3"]);
    sextant_ok(&a_addr, &secret, &["chmod", "777", "/d4"]);
    sextant_ok(&a_addr, &secret, &["chown", "1000", "/d4/f0", "/d4/f1"]);
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    // (stdout, route maps fetched, parts asked by the client, gathered
    // answers, stderr)
    let timed = |cmd: &mut Command| {
        let out = cmd.env("SEXTANT_SEARCH_TIMING", "1").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let count = |what: &dyn Fn(&str) -> bool| err.lines().filter(|l| what(l)).count();
        let maps = count(&|l| l.contains("Map from") && l.ends_with("answered"));
        let parts = count(&|l| l.contains("part ") && l.ends_with(": asked"));
        let gathered = count(&|l| l.contains("gathered answer in"));
        (
            String::from_utf8(out.stdout).unwrap(),
            maps,
            parts,
            gathered,
            err,
        )
    };
    let as_root = |args: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(["--server", &a_addr, "--data"])
            .arg(&secret)
            .args(args);
        timed(&mut c)
    };
    let json_count = |out: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        v["total"]["count"].as_u64().unwrap()
    };
    // (scope, entries at and below it as root)
    for (scope, want) in [("/", 1 + 8 + 48), ("/d2", 7), ("/d3", 7), ("/d5", 7)] {
        let (out, maps, parts, gathered, err) = as_root(&["--json", "stats", scope]);
        assert_eq!(json_count(&out), want, "stats {scope}: {err}");
        let (out, m, p, g, err) = as_root(&["du", scope]);
        assert!(
            out.contains(&format!("\t{want} entries")),
            "du {scope}: {out} {err}"
        );
        let (out, m2, p2, g2, err2) = as_root(&["--json", "stats", "--by", "user", scope]);
        assert_eq!(json_count(&out), want, "stats --by user {scope}: {err2}");
        for (what, maps, parts, gathered, err) in [
            ("stats", maps, parts, gathered, &err),
            ("du", m, p, g, &err),
            ("stats --by user", m2, p2, g2, &err2),
        ] {
            assert_eq!(
                (maps, parts),
                (0, 0),
                "{what} {scope}: route maps fetched, parts asked by the client: {err}"
            );
            // (The totals below; the starting point too, asked at once.)
            assert!(gathered >= 1, "{what} {scope}: nothing gathered: {err}");
        }
    }
    // Owners: two files of /d4 are uid 1000's.
    let (out, ..) = as_root(&["--json", "stats", "--by", "user", "/d4"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let of_1000 = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["uid"].as_u64() == Some(1000))
        .map(|g| g["count"].as_u64().unwrap());
    assert_eq!(of_1000, Some(2), "{out}");
    // A user who may not list /d3: its entries are not counted.
    let key = user_key(dir.path(), &a_addr, &secret, "u1000");
    let user = |args: &[&str]| {
        let mut c = common::cli_with_key(&a_addr, &key, 1000, dir.path());
        c.args(args);
        timed(&mut c)
    };
    let (out, maps, parts, _, err) = user(&["--json", "stats", "/"]);
    assert_eq!(
        json_count(&out),
        1 + 8 + 48 - 6,
        "stats / as uid 1000: {err}"
    );
    assert_eq!((maps, parts), (0, 0), "{err}");
    let (out, ..) = user(&["--json", "stats", "/d4"]);
    assert_eq!(json_count(&out), 7, "{out}");
    // A key limited to /d5: `stats /` counts its subtree only.
    let k5 = dir.path().join("d5.key");
    sextant_ok(
        &a_addr,
        &secret,
        &[
            "auth",
            "add",
            "d5",
            "--path",
            "/d5",
            "--out",
            k5.to_str().unwrap(),
        ],
    );
    std::fs::set_permissions(&k5, std::fs::Permissions::from_mode(0o644)).unwrap();
    let limited = |args: &[&str]| {
        let mut c = common::cli_with_key(&a_addr, &k5, 0, dir.path());
        c.args(args);
        timed(&mut c)
    };
    let (out, _, parts, _, err) = limited(&["--json", "stats", "/"]);
    assert_eq!(
        json_count(&out),
        7,
        "stats / with a key limited to /d5: {err}"
    );
    assert_eq!(parts, 0, "{err}");
    let (out, ..) = limited(&["du", "/d5"]);
    assert!(out.contains("\t7 entries"), "{out}");
    // While tables move between the servers: every answer exact.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = {
        let (stop, url, secret_file) = (
            std::sync::Arc::clone(&stop),
            etcd.url.clone(),
            secret.join("secret"),
        );
        std::thread::spawn(move || {
            let mut moves = 0;
            for round in 0.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                for d in [1, 2, 5, 6] {
                    let to = if (round + d) % 2 == 0 { "a" } else { "b" };
                    let out = Command::new(BIN)
                        .args(["cluster", "move", &format!("/d{d}"), to, "--etcd", &url])
                        .env("SEXTANT_SECRET_FILE", &secret_file)
                        .output()
                        .unwrap();
                    moves += usize::from(out.status.success());
                }
            }
            moves
        })
    };
    let until = std::time::Instant::now() + Duration::from_secs(8);
    let mut asked = 0;
    while std::time::Instant::now() < until {
        for (scope, want) in [("/", 1 + 8 + 48), ("/d2", 7), ("/d5", 7)] {
            let (out, _, _, _, err) = as_root(&["--json", "stats", scope]);
            assert_eq!(json_count(&out), want, "stats {scope} during moves: {err}");
            asked += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let moves = mover.join().unwrap();
    assert!(moves > 0 && asked > 0, "{moves} moves, {asked} queries");
}

/// Issue 21: a command fetches the route map only when it needs it. The
/// map has a route per table, and a command that fetched it at connect
/// started ~10 ms slower on 1,059 tables than on one server. `stat` of
/// any path needs none (the server asked resolves the path across the
/// servers); `ls` of a directory another server holds fetches it once
/// (its first WRONG_SERVER); a spread `find` once or twice. Counted by the
/// client's timing marks (`SEXTANT_SEARCH_TIMING`), one per `Map` answer.
#[test]
fn a_command_fetches_the_route_map_only_when_it_needs_it() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    for d in 0..8 {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/d{d}")]);
        sextant_ok(&a_addr, &secret, &["touch", &format!("/d{d}/f{d}")]);
    }
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    // (output, route maps fetched, stderr)
    let timed = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["--server", &a_addr, "--data"])
            .arg(&secret)
            .args(args)
            .env("SEXTANT_SEARCH_TIMING", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{args:?}: {err}");
        let maps = err
            .lines()
            .filter(|l| l.contains("Map from") && l.ends_with("answered"))
            .count();
        (String::from_utf8(out.stdout).unwrap(), maps, err)
    };
    for p in ["/", "/d0", "/d7/f7"] {
        let (_, maps, err) = timed(&["stat", p]);
        assert_eq!(
            maps, 0,
            "stat {p} fetched the route map {maps} times: {err}"
        );
    }
    for d in 0..8 {
        let (out, maps, err) = timed(&["ls", &format!("/d{d}")]);
        assert_eq!(out.trim(), format!("f{d}"), "{err}");
        assert!(
            maps <= 1,
            "ls /d{d} fetched the route map {maps} times: {err}"
        );
    }
    let (out, maps, err) = timed(&["find", "/", "-name", "f3"]);
    assert_eq!(out.trim(), "/d3/f3", "{err}");
    // (Twice if the search came over a second after the first:
    // `Client::recent_route_map`.)
    assert!(maps <= 2, "find fetched the route map {maps} times: {err}");
}

/// Issue 21 (a search's fixed cost on a cluster): a spread search fetches
/// the route map merged, a route per run of adjacent tables one server
/// holds rather than a route per table (~125 kB per command at 2,003
/// tables, ~1,000 routes to assign to the servers' parts). The maps the
/// client's timing marks show (`Map from …: N routes`) have as many routes
/// as the runs of the layout `cluster status` shows just before and after
/// (asked again if the balancer moved a table between), fewer than the
/// tables; the answers are checked too.
#[test]
fn a_spread_search_fetches_a_route_per_run_of_one_servers_tables() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    for d in 0..8 {
        let dirs: Vec<String> = std::iter::once(format!("/d{d}"))
            .chain((0..4).map(|s| format!("/d{d}/s{s}")))
            .collect();
        let files: Vec<String> = (0..4).map(|s| format!("/d{d}/s{s}/f{d}{s}")).collect();
        for (verb, paths) in [("mkdir", dirs), ("touch", files)] {
            let mut args = vec![verb];
            args.extend(paths.iter().map(String::as_str));
            sextant_ok(&a_addr, &secret, &args);
        }
    }
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    // (tables with an owner, runs of adjacent ones of one owner)
    let layout = || {
        let st = status_on(&etcd.url, &secret);
        let mut spans: Vec<(u128, u128, String)> = st["tables"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| {
                let hex = |k: &str| u128::from_str_radix(t[k].as_str()?, 16).ok();
                Some((
                    hex("first")?,
                    hex("last")?,
                    t["owner"].as_str()?.to_string(),
                ))
            })
            .collect();
        spans.sort();
        let mut runs = 0;
        for (i, (first, _, owner)) in spans.iter().enumerate() {
            let joined = i > 0 && {
                let (_, last, before) = &spans[i - 1];
                before == owner && last.checked_add(1) == Some(*first)
            };
            if !joined {
                runs += 1;
            }
        }
        (spans.len(), runs)
    };
    for attempt in 0.. {
        let before = layout();
        let out = Command::new(BIN)
            .args(["--server", &a_addr, "--data"])
            .arg(&secret)
            .args(["find", "/", "-name", "f32"])
            .env("SEXTANT_SEARCH_TIMING", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "find: {err}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "/d3/s2/f32",
            "{err}"
        );
        if layout() != before && attempt < 10 {
            continue;
        }
        let (tables, runs) = before;
        assert!(
            runs < tables,
            "no two adjacent tables of one server to merge ({tables} tables): {err}"
        );
        let routes: Vec<usize> = err
            .lines()
            .filter_map(|l| {
                let (_, n) = l.split_once("Map from ")?.1.split_once(": ")?;
                n.split_once(" routes")?.0.parse().ok()
            })
            .collect();
        assert!(!routes.is_empty(), "find fetched no route map: {err}");
        for n in routes {
            assert_eq!(
                n, runs,
                "find fetched a map of {n} routes; {tables} tables in {runs} runs of one \
                 server: {err}"
            );
        }
        break;
    }
}

/// RETURN (issue 21 item 1): a table an operation pulled goes back to the
/// server it came from once nothing uses it there. `/q`'s table is b's;
/// `mv /p/f0 /q/moved` through a pulls it to a (one local transaction
/// there), and a little later it is b's again — with the file in it.
#[test]
fn a_pulled_table_goes_home_once_unused() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, _b, a_addr, b_addr, secret) = pqrs_on_two_servers(dir.path(), &etcd.url);
    let (_, tq) = p_on_a_q_on_b(&etcd.url, &secret);
    let (_, epoch) = owner_of(&etcd.url, &secret, tq);
    sextant_ok(&a_addr, &secret, &["mv", "/p/f0", "/q/moved"]);
    let (owner, pulled) = owner_of(&etcd.url, &secret, tq);
    assert!(
        owner == "a" || pulled >= epoch + 2,
        "the mv through a pulled /q's table there: {owner} at epoch {pulled} (was {epoch})"
    );
    wait_for("/q's table back on b", Duration::from_secs(20), || {
        let (owner, now) = owner_of(&etcd.url, &secret, tq);
        owner == "b" && now > epoch
    });
    for addr in [&a_addr, &b_addr] {
        let ls = sextant_ok(addr, &secret, &["ls", "/q"]);
        assert!(ls.split_whitespace().any(|n| n == "moved"), "{ls}");
        let ls = sextant_ok(addr, &secret, &["ls", "/p"]);
        assert!(!ls.split_whitespace().any(|n| n == "f0"), "{ls}");
    }
}

/// BORROW/RETURN under contention: three servers each hold one of /p,
/// /q, /r, and renames go round at once — /p → /q through a, /q → /r
/// through b, /r → /p through c. Every rename needs a table of another
/// server, and each server's tables are wanted by another; the
/// coordinator serves their borrows in turn, so every rename succeeds.
/// Afterwards every file is where its rename put it, every borrow has
/// been RETURNed and every lent table is home.
#[test]
fn renames_round_three_servers_at_once_all_succeed() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, _b, a_addr, b_addr, secret) = pqrs_on_two_servers(dir.path(), &etcd.url);
    let config = dir.path().join("small-tables.toml");
    let config = config.to_str().unwrap();
    let (c, c_addr) = serve_with(dir.path(), &etcd.url, "c", &["--config", config]);
    let _c = KillOnDrop(c);
    let per_side = 30;
    let mut touch = vec!["touch".to_string()];
    for (d, prefix) in [("/p", "a"), ("/q", "b"), ("/r", "c")] {
        for i in 0..per_side {
            touch.push(format!("{d}/{prefix}{i}"));
        }
    }
    let touch: Vec<&str> = touch.iter().map(String::as_str).collect();
    sextant_ok(&a_addr, &secret, &touch);
    let tables = [
        move_table(&etcd.url, &secret, "/p", "a"),
        move_table(&etcd.url, &secret, "/q", "b"),
        move_table(&etcd.url, &secret, "/r", "c"),
    ];
    let distinct: std::collections::BTreeSet<u64> = tables.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        3,
        "/p /q /r share a table: the test needs them apart"
    );
    // Three clients per server, each renaming every third file.
    let started = Instant::now();
    let mut threads = Vec::new();
    for (addr, from, to, prefix) in [
        (&a_addr, "/p", "/q", "a"),
        (&b_addr, "/q", "/r", "b"),
        (&c_addr, "/r", "/p", "c"),
    ] {
        for k in 0..3 {
            let (secret, addr) = (secret.clone(), addr.to_string());
            threads.push(std::thread::spawn(move || {
                (0..per_side)
                    .filter(|i| i % 3 == k)
                    .map(|i| {
                        let src = format!("{from}/{prefix}{i}");
                        let dst = format!("{to}/{prefix}{i}");
                        let out = sextant(&addr, &secret, &["mv", &src, &dst]);
                        (src, out)
                    })
                    .collect::<Vec<_>>()
            }));
        }
    }
    let mut failed = Vec::new();
    for t in threads {
        for (src, out) in t.join().unwrap() {
            if !out.status.success() {
                failed.push(format!(
                    "{src}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    let moves: u64 = tables
        .iter()
        .map(|t| owner_of(&etcd.url, &secret, *t).1)
        .sum();
    eprintln!(
        "{} renames in {:?}, epochs now {moves}",
        3 * per_side,
        started.elapsed()
    );
    assert!(failed.is_empty(), "renames failed: {failed:#?}");
    for addr in [&a_addr, &b_addr, &c_addr] {
        for (d, want) in [("/p", "c"), ("/q", "a"), ("/r", "b")] {
            let ls = sextant_ok(addr, &secret, &["ls", d]);
            let names: Vec<&str> = ls
                .split_whitespace()
                .filter(|n| !n.starts_with('f'))
                .collect();
            let expected: Vec<String> = (0..per_side).map(|i| format!("{want}{i}")).collect();
            let mut names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            names.sort();
            let mut expected = expected;
            expected.sort();
            assert_eq!(names, expected, "{d} through {addr}");
        }
    }
    // Every borrow RETURNed, every lent table home and its home forgotten.
    wait_for("no borrow or home left", Duration::from_secs(60), || {
        etcd_keys(&etcd.url, "/sextant/borrow/").is_empty()
            && etcd_keys(&etcd.url, "/sextant/home/").is_empty()
    });
    // `cluster status` says so too.
    let st = status_on(&etcd.url, &secret);
    assert_eq!(st["borrows"], serde_json::json!([]), "{st}");
    for t in st["tables"].as_array().unwrap() {
        assert!(t["home"].is_null(), "{t}");
    }
}

/// After `mv /p/f0 /q/moved` through a BORROW and the fault `what`,
/// seen through `addr`: the acknowledged rename happened exactly once,
/// the tree holds `files` files in its five directories, and no borrow
/// or home is left noted in etcd. Returns the listings of /p and /q.
fn the_borrowed_rename_happened_once(
    what: &str,
    addr: &str,
    secret: &Path,
    etcd: &str,
    files: usize,
) -> (String, String) {
    let p = sextant_ok(addr, secret, &["ls", "/p"]);
    let q = sextant_ok(addr, secret, &["ls", "/q"]);
    let in_p = p.split_whitespace().any(|n| n == "f0");
    let in_q = q.split_whitespace().any(|n| n == "moved");
    assert!(
        !in_p && in_q,
        "{what}: the acknowledged rename happened exactly once: /p {p:?} /q {q:?}"
    );
    let found = sextant_ok(addr, secret, &["find", "/", "-type", "f"]);
    assert_eq!(found.lines().count(), files, "{what}: {found}");
    let dirs = sextant_ok(addr, secret, &["find", "/", "-type", "d"]);
    assert_eq!(dirs.lines().count(), 5, "{what}: {dirs}");
    wait_for("no borrow or home left", Duration::from_secs(30), || {
        etcd_keys(etcd, "/sextant/borrow/").is_empty()
            && etcd_keys(etcd, "/sextant/home/").is_empty()
    });
    (p, q)
}

/// kill -9 of a borrower at a step of BORROW/RETURN (named fault
/// points): `borrow-granted` — /q's table lent to a for an `mv /p/f0
/// /q/moved`, the rename not yet run; `borrow-return` — the rename done
/// and acknowledged, the borrow about to be RETURNed. After b takes
/// everything over: `mv` succeeded (its client, whose server died, asked
/// b — known from the route map it took when it connected — and followed
/// the tables there) and the rename happened exactly once, every other
/// file is where it was, the dead server's borrow went with its lease, no
/// home is left noted, and b takes new operations.
fn killed_at_a_borrow_step(step: &str) {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let fault = format!("exit-at:{step}");
    let (mut a, _b, a_addr, b_addr, secret) =
        pqrs_on_two_servers_env(dir.path(), &etcd.url, &[("SEXTANT_FAULT", &fault)]);
    p_on_a_q_on_b(&etcd.url, &secret);
    let mv_started = Instant::now();
    let mv = sextant_child(&a_addr, &secret, &["mv", "/p/f0", "/q/moved"]);
    let mut code = None;
    wait_for("a reached the fault point", Duration::from_secs(30), || {
        code = a.0.try_wait().unwrap().map(|s| s.code());
        code.is_some()
    });
    assert_eq!(code, Some(Some(86)), "{step}: a died at the fault point");
    let mv = mv.wait_with_output().unwrap();
    eprintln!(
        "{step}: mv exited {:?} after {:?}: {}",
        mv.status.code(),
        mv_started.elapsed(),
        String::from_utf8_lossy(&mv.stderr).trim()
    );
    wait_for("b serves every table", Duration::from_secs(40), || {
        only_one_serves(&etcd.url, &secret, "b")
    });
    // The client follows the tables to b (it knows b from the route map
    // it took when it connected), where the rename runs once.
    assert!(
        mv.status.success(),
        "{step}: mv: {}",
        String::from_utf8_lossy(&mv.stderr)
    );
    the_borrowed_rename_happened_once(step, &b_addr, &secret, &etcd.url, 16);
    sextant_ok(&b_addr, &secret, &["mv", "/q/f1", "/p/after"]);
    sextant_ok(&b_addr, &secret, &["mkdir", "/e"]);
}

#[test]
fn a_borrower_killed_with_its_tables_lent_loses_nothing() {
    killed_at_a_borrow_step("borrow-granted");
}

#[test]
fn a_borrower_killed_before_its_return_loses_nothing() {
    killed_at_a_borrow_step("borrow-return");
}

/// A server that leaves cleanly (SIGTERM) while a BORROW is granted:
/// a, holding /p, borrows /q's table from b for `mv /p/f0 /q/moved`
/// (and keeps it 5 s: `SEXTANT_BENCH_RETURN_AFTER`), then `leaver` stops
/// — the lender b, whose table is away on a, or the borrower a, holding
/// a table whose home is b. The leave ends cleanly, the other server
/// ends up serving every table, the rename happened exactly once, no
/// borrow or home is left noted, and the namespace takes new renames
/// across the tables. (The coordinator's pure rules cover a leave during
/// a borrow; this is the process-level check.)
fn a_server_leaving_cleanly_during_a_borrow(leaver: &str) {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (a, b, a_addr, b_addr, secret) = pqrs_on_two_servers_env(
        dir.path(),
        &etcd.url,
        &[("SEXTANT_BENCH_RETURN_AFTER", "5s")],
    );
    p_on_a_q_on_b(&etcd.url, &secret);
    sextant_ok(&a_addr, &secret, &["mv", "/p/f0", "/q/moved"]);
    let (mut leaving, stays, stays_addr, _kept) = match leaver {
        "a" => (a, "b", b_addr, b),
        _ => (b, "a", a_addr, a),
    };
    signal(&leaving.0, "-TERM");
    left_cleanly(&mut leaving, leaver, "during a borrow");
    wait_for(
        &format!("{stays} serves every table"),
        Duration::from_secs(40),
        || only_one_serves(&etcd.url, &secret, stays),
    );
    the_borrowed_rename_happened_once(
        &format!("{leaver} left"),
        &stays_addr,
        &secret,
        &etcd.url,
        16,
    );
    sextant_ok(&stays_addr, &secret, &["mv", "/q/f1", "/p/after"]);
    sextant_ok(&stays_addr, &secret, &["mv", "/p/f2", "/r/after"]);
    sextant_ok(&stays_addr, &secret, &["mkdir", "/e"]);
}

#[test]
fn a_lender_leaving_cleanly_while_its_table_is_lent_loses_nothing() {
    a_server_leaving_cleanly_during_a_borrow("b");
}

#[test]
fn a_borrower_leaving_cleanly_with_a_table_borrowed_loses_nothing() {
    a_server_leaving_cleanly_during_a_borrow("a");
}

/// SIGSTOP at a named BORROW step (the test-only `stop-at:` fault
/// point) for longer than the borrower's lease, under the same rename as
/// [`killed_at_a_borrow_step`]: a, holding /p, borrows /q's table from b
/// and stops itself there. b takes every table when a's lease is gone
/// (a's borrow goes with it), serves new writes, and a, woken, must
/// acknowledge nothing for the tables it lost: the rename happens exactly
/// once (on b when a stopped before running it, replayed from a's journal
/// when a stopped before its RETURN), `mv` succeeds, nothing else is lost
/// or doubled, no borrow or home is left over, and a serves again once it
/// has rejoined.
fn paused_at_a_borrow_step(step: &str) {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let fault = format!("stop-at:{step}");
    let (a, _b, a_addr, b_addr, secret) =
        pqrs_on_two_servers_env(dir.path(), &etcd.url, &[("SEXTANT_FAULT", &fault)]);
    p_on_a_q_on_b(&etcd.url, &secret);
    let mv = sextant_child(&a_addr, &secret, &["mv", "/p/f0", "/q/moved"]);
    let stat = format!("/proc/{}/stat", a.0.id());
    wait_for(
        "a stopped at the fault point",
        Duration::from_secs(30),
        || stopped(&stat),
    );
    wait_for("b serves every table", Duration::from_secs(40), || {
        only_one_serves(&etcd.url, &secret, "b")
    });
    sextant_ok(
        &b_addr,
        &secret,
        &["touch", "/p/while-a-slept", "/q/while-a-slept"],
    );
    signal(&a.0, "-CONT");
    let mv = mv.wait_with_output().unwrap();
    assert!(
        mv.status.success(),
        "{step}: mv: {}",
        String::from_utf8_lossy(&mv.stderr)
    );
    let (p, q) = the_borrowed_rename_happened_once(step, &b_addr, &secret, &etcd.url, 18);
    for (d, listing) in [("/p", &p), ("/q", &q)] {
        assert!(
            listing.split_whitespace().any(|n| n == "while-a-slept"),
            "{step}: b's write in {d} while a slept is lost: {listing:?}"
        );
    }
    // a rejoins with a new lease and serves the namespace again, and a
    // cross-server rename still works.
    wait_for("a serves again", Duration::from_secs(30), || {
        sextant(&a_addr, &secret, &["ls", "/p"]).status.success()
    });
    sextant_ok(&a_addr, &secret, &["mv", "/q/f1", "/p/after"]);
}

#[test]
fn a_borrower_paused_with_its_tables_lent_acknowledges_nothing_late() {
    paused_at_a_borrow_step("borrow-granted");
}

#[test]
fn a_borrower_paused_before_its_return_acknowledges_nothing_late() {
    paused_at_a_borrow_step("borrow-return");
}

/// The fault [`renames_under_load_through`] injects mid-load.
#[derive(Clone, Copy, Debug)]
enum LoadFault {
    /// kill -9 of b (the lender of /q's table), restarted 3 s later: its
    /// tables fail over to a, and come back to b by balance under load.
    KillLender,
    /// SIGSTOP of a (the borrower) past its lease, then SIGCONT.
    StopBorrower,
}

/// Issue 21's real-process test: a rename-heavy load across two servers'
/// tables from three clients at once, every rename a BORROW (each client
/// moves its own files back and forth between /p, held by a, and /q,
/// held by b), while `fault` strikes. An oracle of acknowledged renames:
/// every `mv` must succeed (clients ride through failover), each file
/// must end exactly where its last rename put it, and the namespace must
/// hold every file once, no borrow or home left over.
fn renames_under_load_through(fault: LoadFault) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (a, mut b, a_addr, b_addr, secret) = pqrs_on_two_servers(dir.path(), &etcd.url);
    p_on_a_q_on_b(&etcd.url, &secret);
    const CLIENTS: usize = 3;
    const FILES: usize = 3;
    const ROUNDS: usize = 6;
    for k in 0..CLIENTS {
        for i in 0..FILES {
            sextant_ok(&a_addr, &secret, &["touch", &format!("/p/c{k}-{i}")]);
        }
    }
    // The clients go through the server the fault leaves alive.
    let via = match fault {
        LoadFault::KillLender => a_addr.clone(),
        LoadFault::StopBorrower => b_addr.clone(),
    };
    let started = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| {
            let (via, secret, started) = (via.clone(), secret.clone(), Arc::clone(&started));
            std::thread::spawn(move || {
                let mut at = vec!["/p"; FILES];
                for round in 0..ROUNDS {
                    for (i, from) in at.iter_mut().enumerate() {
                        let to = if *from == "/p" { "/q" } else { "/p" };
                        let name = format!("c{k}-{i}");
                        let out = Command::new(BIN)
                            .args(["--server", &via, "--data"])
                            .arg(&secret)
                            .args(["mv", &format!("{from}/{name}"), &format!("{to}/{name}")])
                            .output()
                            .unwrap();
                        assert!(
                            out.status.success(),
                            "client {k}, round {round}: mv {from}/{name} {to}/{name}: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        *from = to;
                        started.store(true, Ordering::SeqCst);
                    }
                }
                at
            })
        })
        .collect();
    wait_for("the load started", Duration::from_secs(30), || {
        started.load(Ordering::SeqCst)
    });
    std::thread::sleep(Duration::from_millis(800));
    let _restarted = match fault {
        LoadFault::KillLender => {
            signal(&b.0, "-KILL");
            let _ = b.0.wait();
            std::thread::sleep(Duration::from_secs(3));
            Some(KillOnDrop(serve_with(dir.path(), &etcd.url, "b", &[]).0))
        }
        LoadFault::StopBorrower => {
            signal(&a.0, "-STOP");
            std::thread::sleep(Duration::from_secs(4));
            signal(&a.0, "-CONT");
            None
        }
    };
    let ends: Vec<Vec<&str>> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let p = sextant_ok(&via, &secret, &["ls", "/p"]);
    let q = sextant_ok(&via, &secret, &["ls", "/q"]);
    for (k, at) in ends.iter().enumerate() {
        for (i, want) in at.iter().enumerate() {
            let name = format!("c{k}-{i}");
            let in_p = p.split_whitespace().any(|n| n == name);
            let in_q = q.split_whitespace().any(|n| n == name);
            assert!(
                in_p != in_q && in_p == (*want == "/p"),
                "{fault:?}: {name} acknowledged in {want}: /p {p:?} /q {q:?}"
            );
        }
    }
    let files = sextant_ok(&via, &secret, &["find", "/", "-type", "f"]);
    assert_eq!(files.lines().count(), 16 + CLIENTS * FILES, "{files}");
    let dirs = sextant_ok(&via, &secret, &["find", "/", "-type", "d"]);
    assert_eq!(dirs.lines().count(), 5, "{dirs}");
    wait_for("no borrow or home left", Duration::from_secs(30), || {
        etcd_keys(&etcd.url, "/sextant/borrow/").is_empty()
            && etcd_keys(&etcd.url, "/sextant/home/").is_empty()
    });
}

#[test]
fn renames_under_load_survive_a_killed_lender() {
    renames_under_load_through(LoadFault::KillLender);
}

#[test]
fn renames_under_load_survive_a_stalled_borrower() {
    renames_under_load_through(LoadFault::StopBorrower);
}

/// Turns etcd's authentication on (through the etcd client, as etcdctl
/// would): user root with `password`, holding the root role.
fn enable_etcd_auth(url: &str, password: &str) {
    use sextant_coordinator::etcd_client::Client;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = Client::connect([url], None).await.unwrap();
        c.user_add("root", password, None).await.unwrap();
        c.user_grant_role("root", "root").await.unwrap();
        c.auth_enable().await.unwrap();
    });
}

/// `sextant cluster status` on `etcd` with `env` (the credentials); its
/// output.
fn status_with(etcd: &str, secret_dir: &Path, env: &[(&str, &Path)]) -> std::process::Output {
    Command::new(BIN)
        .args(["--json", "cluster", "status", "--etcd", etcd])
        .env("SEXTANT_SECRET_FILE", secret_dir.join("secret"))
        .env_remove("SEXTANT_ETCD_USER")
        .env_remove("SEXTANT_ETCD_PASSWORD_FILE")
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap()
}

/// `sextant serve` of a cluster on `etcd` that must not start: its stderr.
fn serve_refused(dir: &Path, etcd: &str, name: &str, config: &Path) -> String {
    let log = dir.join(format!("{name}.err"));
    let mut server = KillOnDrop(
        Command::new(BIN)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--etcd",
                etcd,
                "--name",
                name,
            ])
            .arg("--cluster-store")
            .arg(dir.join("store"))
            .arg("--data")
            .arg(dir.join(name))
            .arg("--config")
            .arg(config)
            .env("SEXTANT_METRICS", "off")
            .env_remove("SEXTANT_ETCD_USER")
            .env_remove("SEXTANT_ETCD_PASSWORD_FILE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    // Refused at once, not after the 30 s it waits for an etcd not up yet.
    let mut status = None;
    wait_for("the server to give up", Duration::from_secs(15), || {
        status = server.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(!status.unwrap().success());
    std::fs::read_to_string(&log).unwrap()
}

/// Issue 22 item 4: a cluster on an etcd with authentication on. A server
/// given etcd's user and password file in its config file joins and
/// serves, and `cluster status` with them works; without them, or with a
/// wrong password, the server refuses to start and the CLI fails, each
/// saying etcd refused which user and why.
#[test]
fn an_etcd_with_authentication_takes_the_servers_credentials() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let dir = dir.path();
    enable_etcd_auth(&etcd.url, "s3cret-etcd");
    let pass = dir.join("etcd.pass");
    std::fs::write(&pass, "s3cret-etcd\n").unwrap();
    let wrong = dir.join("wrong.pass");
    std::fs::write(&wrong, "guess\n").unwrap();
    let config = |file: &str, lines: &str| {
        let path = dir.join(file);
        std::fs::write(&path, lines).unwrap();
        path
    };
    let good = config(
        "good.toml",
        &format!(
            "etcd_user = \"root\"\netcd_password_file = {:?}\n",
            pass.to_str().unwrap()
        ),
    );
    let (a, a_addr) = serve_with(dir, &etcd.url, "a", &["--config", good.to_str().unwrap()]);
    let _a = KillOnDrop(a);
    let secret = dir.join("a");
    let creds = [
        ("SEXTANT_ETCD_USER", Path::new("root")),
        ("SEXTANT_ETCD_PASSWORD_FILE", pass.as_path()),
    ];
    wait_for("the root table assigned", Duration::from_secs(30), || {
        let out = status_with(&etcd.url, &secret, &creds);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        tables_by_server(&st).iter().any(|t| t.0 == "a" && t.1 > 0)
    });
    sextant_ok(&a_addr, &secret, &["mkdir", "/p"]);
    assert_eq!(sextant_ok(&a_addr, &secret, &["ls", "/"]).trim(), "p");

    // The CLI without credentials, and with a wrong password.
    let out = status_with(&etcd.url, &secret, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("etcd at {} refused", etcd.url))
            && err.contains("gave no user name")
            && err.contains("--etcd-user"),
        "{err}"
    );
    let bad = [
        ("SEXTANT_ETCD_USER", Path::new("root")),
        ("SEXTANT_ETCD_PASSWORD_FILE", wrong.as_path()),
    ];
    let out = status_with(&etcd.url, &secret, &bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("refused the user \"root\"") && err.contains("wrong user name or password"),
        "{err}"
    );

    // Servers without credentials, and with a wrong password.
    let none = config("none.toml", "");
    let err = serve_refused(dir, &etcd.url, "b", &none);
    eprintln!("server without credentials: {err}");
    assert!(
        err.contains(&format!("etcd at {} refused", etcd.url)) && err.contains("gave no user name"),
        "{err}"
    );
    let bad = config(
        "bad.toml",
        &format!(
            "etcd_user = \"root\"\netcd_password_file = {:?}\n",
            wrong.to_str().unwrap()
        ),
    );
    let err = serve_refused(dir, &etcd.url, "c", &bad);
    assert!(
        err.contains("refused the user \"root\"") && err.contains("wrong user name or password"),
        "{err}"
    );
    // The server with the credentials still serves.
    assert_eq!(sextant_ok(&a_addr, &secret, &["ls", "/"]).trim(), "p");
    drop(etcd.child);
}

/// etcd serving TLS only and asking each client for a certificate (the
/// CA of each side is the other's self-signed certificate): a server with
/// etcd_ca, etcd_cert and etcd_key in its config file joins and serves,
/// `cluster status` with --etcd-ca, --etcd-cert, --etcd-key works, and a
/// status without the client certificate does not.
#[test]
fn an_etcd_over_tls_with_client_certificates() {
    if !have_etcd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let etcd_cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let client_cert = rcgen::generate_simple_self_signed(vec!["sextant".into()]).unwrap();
    let ca = write("etcd.pem", etcd_cert.cert.pem());
    let etcd_key = write("etcd.key", etcd_cert.signing_key.serialize_pem());
    let cert = write("client.pem", client_cert.cert.pem());
    let key = write("client.key", client_cert.signing_key.serialize_pem());
    let (client, peer) = (free_ports(1), free_ports(1));
    let c = format!("https://127.0.0.1:{client}");
    let p = format!("http://127.0.0.1:{peer}");
    let _etcd = KillOnDrop(
        common::etcd_command(dir, &c, &p)
            .args(["--cert-file", &ca, "--key-file", &etcd_key])
            .args(["--client-cert-auth", "--trusted-ca-file", &cert])
            .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for("etcd listens", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", client)).is_ok()
    });
    let config = write(
        "tls.toml",
        format!("etcd_ca = {ca:?}\netcd_cert = {cert:?}\netcd_key = {key:?}\n"),
    );
    // A bare HOST:PORT is https:// once a CA is given.
    let bare = format!("127.0.0.1:{client}");
    let (a, a_addr) = serve_with(dir, &bare, "a", &["--config", &config]);
    let _a = KillOnDrop(a);
    let secret = dir.join("a");
    let status = |tls: &[&str]| {
        Command::new(BIN)
            .args(["--json", "cluster", "status", "--etcd", &c])
            .args(tls)
            .env("SEXTANT_SECRET_FILE", secret.join("secret"))
            .output()
            .unwrap()
    };
    let with_cert = ["--etcd-ca", &ca, "--etcd-cert", &cert, "--etcd-key", &key];
    wait_for("the root table assigned", Duration::from_secs(30), || {
        let out = status(&with_cert);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        tables_by_server(&st).iter().any(|t| t.0 == "a" && t.1 > 0)
    });
    sextant_ok(&a_addr, &secret, &["mkdir", "/p"]);
    assert_eq!(sextant_ok(&a_addr, &secret, &["ls", "/"]).trim(), "p");
    for (tls, what) in [
        // TLS 1.3: the client learns of the refusal after its handshake,
        // by etcd's alert (named) or, as often, a closed connection.
        (&["--etcd-ca", ca.as_str()][..], ""),
        (
            &[][..],
            "refused its certificate: this client does not trust it",
        ),
    ] {
        let out = status(tls);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "served: {tls:?}");
        assert!(err.contains(&format!("etcd at {c}")), "{err}");
        assert!(err.contains(what), "{err}");
    }
}

/// Issue 20: the engine's catalogue on etcd plans its fences from a map
/// of its own (a watch that may lag behind etcd, and behind the shell's
/// map). A commit refused only because that map is behind — etcd still
/// names this server — is `Stale` (the engine keeps the table); only one
/// etcd backs, another server owning the table, is `NotOwner` (fencing).
/// Before, both were `NotOwner`: a DROP refused on a map that had not yet
/// seen the server's own root table left that table served by no one.
#[test]
fn the_catalogue_tells_a_map_behind_etcd_from_fencing() {
    use sextant_coordinator::keys::{self, OwnerValue};
    use sextant_engine::member::ROOT_TABLE_ID;
    use sextant_engine::store::{MemStore, Store};
    use sextant_engine::{
        CatalogChange, CatalogError, Engine, EngineConfig, MemCatalog, MemberConfig, TableCatalog,
    };
    use sextant_server::cluster::catalog::EtcdCatalog;
    use std::sync::Arc;
    let Some((_dir, etcd)) = dir_and_etcd() else {
        return;
    };
    // A real manifest of the root table (table 1, the whole SOID space).
    let mem = Arc::new(MemCatalog::new());
    let _engine = Engine::open_member(
        Arc::new(MemStore::new()) as Arc<dyn Store>,
        EngineConfig {
            flush_interval: None,
            ..Default::default()
        },
        MemberConfig {
            name: "a".into(),
            catalog: Arc::clone(&mem) as _,
        },
    )
    .unwrap();
    let manifest = mem.manifest(ROOT_TABLE_ID).unwrap();
    let change = || CatalogChange {
        put: vec![manifest.clone()],
        remove: Vec::new(),
    };
    let cfg = sextant_coordinator::EtcdConfig::new(vec![etcd.url.clone()]);
    // A map that never catches up: it has seen nothing.
    let (_map, behind) =
        tokio::sync::watch::channel(Arc::new(sextant_coordinator::ClusterState::default()));
    let catalog = EtcdCatalog::start("a", cfg.clone(), behind).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // a is a member (its commits require `member/a` on the lease they
    // were planned under: the map has none, so the catalogue reads it).
    // etcd may still be electing itself.
    let deadline = Instant::now() + Duration::from_secs(20);
    rt.block_on(async {
        loop {
            let joined = async {
                let mut c = sextant_coordinator::etcd::connect(&cfg).await.ok()?;
                let lease = c.lease_grant(60, None).await.ok()?.id();
                let on_lease =
                    sextant_coordinator::etcd_client::PutOptions::new().with_lease(lease);
                c.put(
                    cfg.key(&keys::member_key("a")),
                    "127.0.0.1:1",
                    Some(on_lease),
                )
                .await
                .ok()
            };
            if joined.await.is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "etcd did not answer");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    // Unknown to the map and to etcd: created as a's (as the first
    // server's engine makes the root).
    loop {
        match catalog.commit("a", change()) {
            Ok(()) => break,
            Err(CatalogError::Unavailable(e)) if Instant::now() < deadline => {
                eprintln!("etcd not ready: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("the first commit: {e}"),
        }
    }
    // The same commit on the same map: refused (the map does not know
    // the table is a's), but etcd says a owns it: not fencing.
    let r = catalog.commit("a", change());
    assert!(matches!(r, Err(CatalogError::Stale(_))), "{r:?}");
    // etcd gives the table to b: now it is.
    rt.block_on(async {
        let mut c = sextant_coordinator::etcd::connect(&cfg).await.unwrap();
        let owner = OwnerValue {
            epoch: sextant_cluster::ids::Epoch(2),
            server: "b".into(),
        };
        c.put(
            cfg.key(&keys::owner_key(sextant_cluster::ids::TableId(1))),
            owner.encode(),
            None,
        )
        .await
        .unwrap();
    });
    let r = catalog.commit("a", change());
    assert!(
        matches!(r, Err(CatalogError::NotOwner { table: 1, .. })),
        "{r:?}"
    );
}

/// Issue 20, end to end: server a's DROP of the table holding /d has its
/// final commit refused (`stale-drop-commit:1`: what the catalogue
/// answers when its map lags behind etcd) while a lives. Before, the
/// table had already left a's engine: every retried DROP answered "not
/// held here" and the table was served by no one. Now the move finishes
/// and nothing acknowledged is lost.
#[test]
fn a_drop_whose_commit_is_refused_still_moves_the_table() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (a, a_addr) = serve_env(
        dir.path(),
        &etcd.url,
        "a",
        &[],
        &[("SEXTANT_FAULT", "stale-drop-commit:1")],
    );
    let _a = KillOnDrop(a);
    let secret = dir.path().join("a");
    wait_for("a holds the root table", Duration::from_secs(30), || {
        a_holds_tables(&etcd.url, &secret)
    });
    sextant_ok(&a_addr, &secret, &["mkdir", "/d"]);
    for i in 0..20 {
        sextant_ok(&a_addr, &secret, &["touch", &format!("/d/f{i}")]);
    }
    let (b, b_addr) = serve(dir.path(), &etcd.url, "b");
    let _b = KillOnDrop(b);
    wait_for("b is a member", Duration::from_secs(30), || {
        is_member(&etcd.url, &secret, "b")
    });
    let moved = Command::new(BIN)
        .args(["cluster", "move", "/d", "b", "--etcd", &etcd.url])
        .env("SEXTANT_SECRET_FILE", secret.join("secret"))
        .output()
        .unwrap();
    assert!(
        moved.status.success(),
        "the move: {}",
        String::from_utf8_lossy(&moved.stderr)
    );
    wait_for("b serves every table", Duration::from_secs(30), || {
        let Ok(st) = try_status_on(&etcd.url, &secret) else {
            return false;
        };
        let t = tables_by_server(&st);
        t.iter().all(|x| x.0 == "b" || x.1 == 0) && t.iter().any(|x| x.0 == "b" && x.1 > 0)
    });
    for addr in [&a_addr, &b_addr] {
        let listing = sextant_ok(addr, &secret, &["ls", "/d"]);
        assert_eq!(listing.split_whitespace().count(), 20, "{addr}: {listing}");
    }
    sextant_ok(&a_addr, &secret, &["touch", "/d/after"]);
}

/// A server whose ADD cannot write for a full disk (`add-no-space`: the
/// engine's error for a log-less rejoin's new run on a full disk, or a
/// completion's retirement) leaves the cluster with an error exit
/// (`EngineHost::disk_failure`) instead of staying a member that is given
/// the table again and again and serves it to nobody; the table stays
/// served where it was, with every file, and takes writes.
#[test]
fn a_server_whose_add_meets_a_full_disk_leaves_and_the_table_stays_served() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret) = first_plain_server(dir.path(), &etcd.url);
    sextant_ok(&a_addr, &secret, &["mkdir", "/d"]);
    for i in 0..10 {
        sextant_ok(&a_addr, &secret, &["touch", &format!("/d/f{i}")]);
    }
    let (b, _) = serve_env(
        dir.path(),
        &etcd.url,
        "b",
        &[],
        &[("SEXTANT_FAULT", "add-no-space")],
    );
    let mut b = KillOnDrop(b);
    wait_for("b is a member", Duration::from_secs(30), || {
        is_member(&etcd.url, &secret, "b")
    });
    // Refused: b's ADD fails (the move says so, or b is gone first).
    let _ = Command::new(BIN)
        .args(["cluster", "move", "/d", "b", "--etcd", &etcd.url])
        .env("SEXTANT_SECRET_FILE", secret.join("secret"))
        .output()
        .unwrap();
    let mut status = None;
    wait_for(
        "b leaves on its disk failure",
        Duration::from_secs(30),
        || {
            status = b.0.try_wait().unwrap();
            status.is_some()
        },
    );
    let status = status.unwrap();
    assert!(!status.success(), "an error exit: {status}");
    wait_for("b is no member", Duration::from_secs(30), || {
        !is_member(&etcd.url, &secret, "b")
    });
    wait_for("a serves /d", Duration::from_secs(30), || {
        let out = common::sextant(&a_addr, &secret, &["ls", "/d"]);
        out.status.success()
            && String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .count()
                == 10
    });
    sextant_ok(&a_addr, &secret, &["touch", "/d/after"]);
}

/// A directory moved below a path twenty tables deep (every directory a
/// table of its own, spread over three servers): the loop check walks the
/// new parent's ancestors up to `/`, a table per level — it succeeds, and
/// so does the move back. Before, a mutation borrowed at most 8 tables
/// and then failed with EXDEV, which users must never see (found by
/// `cluster_random_ops.rs`). And it takes one BORROW round, not one per
/// table: the server reads the chain ahead and BORROWs every table the
/// rename will read at once (`sextant_server::read_ahead`; it took ~20
/// rounds — borrow key writes, `sextant_table_pulls_total` — before).
#[test]
fn a_directory_moves_below_a_path_twenty_tables_deep() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let metrics = free_ports(3);
    let metrics_of = |i: u16| format!("127.0.0.1:{}", metrics + i);
    let (_a, a_addr, secret, config) = first_server_env(
        dir.path(),
        &etcd.url,
        TINY_TABLES,
        &[("SEXTANT_METRICS", &metrics_of(0))],
    );
    let deep: String = (0..20).map(|i| format!("/l{i}")).collect();
    sextant_ok(&a_addr, &secret, &["mkdir", "-p", &deep]);
    sextant_ok(&a_addr, &secret, &["mkdir", "/x"]);
    sextant_ok(&a_addr, &secret, &["touch", "/x/f"]);
    let mut joined = Vec::new();
    for (i, name) in [(1, "b"), (2, "c")] {
        let (s, _) = serve_env(
            dir.path(),
            &etcd.url,
            name,
            &["--config", &config],
            &[("SEXTANT_METRICS", &metrics_of(i))],
        );
        joined.push(KillOnDrop(s));
    }
    wait_for(
        "the tables spread over three servers",
        Duration::from_secs(120),
        || {
            let t = tables_by_server(&status_on(&etcd.url, &secret));
            t.len() == 3 && t.iter().all(|x| x.1 >= 5)
        },
    );
    // Over the three servers: borrow key writes, BORROW rounds.
    let counted = || -> (f64, f64) {
        let mut sum = (0.0, 0.0);
        for i in 0..3 {
            let body = scrape_metrics(metrics + i);
            let value = |name: &str| -> f64 {
                body.lines()
                    .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                    .unwrap_or(0.0)
            };
            sum.0 += value("sextant_table_pulls_total");
            sum.1 += value("sextant_borrow_rounds_total");
        }
        sum
    };
    let before = counted();
    let moved = format!("{deep}/x");
    sextant_ok(&a_addr, &secret, &["mv", "/x", &moved]);
    let after = counted();
    let (pulls, rounds) = (after.0 - before.0, after.1 - before.1);
    // One round; two where a table moved (the balancer) between the
    // read-ahead and the BORROW's grant. Table by table it was ~20.
    assert!(
        (1.0..=2.0).contains(&pulls) && (1.0..=2.0).contains(&rounds),
        "{pulls} borrow key writes, {rounds} BORROW rounds for a move 20 tables deep"
    );
    let listing = sextant_ok(&a_addr, &secret, &["ls", &moved]);
    assert_eq!(listing.trim(), "f");
    // Into its own subtree: EINVAL, as ext4 answers (not EXDEV).
    let out = sextant(&a_addr, &secret, &["mv", "/l0", &format!("{moved}/in")]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !said.contains("cross-device") && !said.contains("EXDEV"),
        "{said}"
    );
    sextant_ok(&a_addr, &secret, &["mv", &moved, "/back"]);
    assert_eq!(sextant_ok(&a_addr, &secret, &["ls", "/back"]).trim(), "f");
}

/// Balancing by inodes: a holds every table — small directories' and,
/// made last, two of 4,000 files each — when b joins, with no requests
/// going on. Counting tables alone gives b the tables in place longest,
/// the small ones, and leaves both big ones on a; weighing inodes too, b
/// gets a big one first (the table nearest half the difference), and
/// then nothing moves back and forth.
#[test]
fn big_tables_are_spread_by_their_inodes() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    for d in ["c1", "c2", "c3", "c4", "c5"] {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/{d}")]);
        let files: Vec<String> = (0..4).map(|f| format!("/{d}/f{f}")).collect();
        let mut args = vec!["touch"];
        args.extend(files.iter().map(String::as_str));
        sextant_ok(&a_addr, &secret, &args);
    }
    const BIG: u64 = 4_000;
    let local = dir.path().join("big");
    std::fs::create_dir(&local).unwrap();
    for f in 0..BIG {
        std::fs::write(local.join(format!("f{f}")), b"").unwrap();
    }
    for d in ["/big1", "/big2"] {
        sextant_ok(&a_addr, &secret, &["import", local.to_str().unwrap(), d]);
    }
    // a publishes its tables' inodes, and rates of 0 once the import's
    // requests are over (so the rates weigh nothing).
    let tables = |st: &serde_json::Value| st["tables"].as_array().unwrap().clone();
    wait_for(
        "a publishes its idle big tables",
        Duration::from_secs(30),
        || {
            let t = tables(&status_on(&etcd.url, &secret));
            let big = t
                .iter()
                .filter(|t| t["inodes"].as_u64() >= Some(BIG))
                .count();
            big == 2 && t.iter().all(|t| t["rate"].as_u64() == Some(0))
        },
    );
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    let inodes = |st: &serde_json::Value, name: &str| {
        st["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["inodes"].as_u64())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let settled = loop {
        let st = status_on(&etcd.url, &secret);
        if inodes(&st, "a") >= BIG && inodes(&st, "b") >= BIG {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "both big tables stay on one server: {st}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    // No ping-pong: over two more rounds of published loads the big
    // tables stay apart, and in all a big table and a small one or two
    // changed hands. (A big table moved while its figures were not
    // published yet, weighed as empty, drew the other big one after it,
    // which then moved back: four.)
    std::thread::sleep(Duration::from_secs(11));
    let st = status_on(&etcd.url, &secret);
    assert!(inodes(&st, "a") >= BIG && inodes(&st, "b") >= BIG, "{st}");
    let moves: u64 = tables(&st)
        .iter()
        .map(|t| t["epoch"].as_u64().unwrap_or(1) - 1)
        .sum();
    assert!(moves <= 3, "{moves} moves: {settled} then {st}");
    drop(etcd.child);
}

/// Search across servers keeps the other servers' directories between
/// searches (issue 21 item 3: the records read from them, and the paths
/// remembered through them): a chmod or a rename of a directory on the
/// server holding it, acknowledged before a search starts, must be seen
/// by that search on every server — no permission answer, and no path,
/// from before survives. `/top` with sixteen subdirectories, each holding
/// a file, over a and b with small tables (so subdirectories sit in other
/// tables than `/top`, some on the other server); searches as root and as
/// nobody warm every cache first.
#[test]
fn no_path_or_permission_from_before_a_rename_or_chmod_on_another_server_survives() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, SMALL_TABLES);
    sextant_ok(&a_addr, &secret, &["mkdir", "/top"]);
    for k in 0..16 {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/top/s{k}")]);
        sextant_ok(&a_addr, &secret, &["touch", &format!("/top/s{k}/f1")]);
    }
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    let key = std::fs::read_to_string(secret.join("secret")).unwrap();
    let find = |nobody: bool| -> Vec<String> {
        let mut cmd = if nobody {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                BIN,
            ]);
            c
        } else {
            Command::new(BIN)
        };
        let out = cmd
            .args(["--server", &a_addr, "--data"])
            .arg(dir.path())
            .args(["find", "/", "-name", "f1"])
            .env("SEXTANT_SECRET", key.trim())
            .env_remove("SEXTANT_SECRET_FILE")
            .output()
            .unwrap();
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "find as {}: {}",
            if nobody { "nobody" } else { "root" },
            String::from_utf8_lossy(&out.stderr)
        );
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    let under = |top: &str| -> Vec<String> {
        let mut v: Vec<String> = (0..16).map(|k| format!("/{top}/s{k}/f1")).collect();
        v.sort();
        v
    };
    for _ in 0..2 {
        assert_eq!(find(false), under("top"));
        assert_eq!(find(true), under("top"));
    }
    sextant_ok(&a_addr, &secret, &["chmod", "700", "/top"]);
    assert_eq!(
        find(true),
        Vec::<String>::new(),
        "listed below a directory closed to nobody"
    );
    assert_eq!(find(false), under("top"));
    sextant_ok(&a_addr, &secret, &["chmod", "755", "/top"]);
    assert_eq!(
        find(true),
        under("top"),
        "not listed below a reopened directory"
    );
    assert_eq!(find(false), under("top"));
    sextant_ok(&a_addr, &secret, &["mv", "/top", "/moved"]);
    assert_eq!(find(false), under("moved"), "paths from before the rename");
    assert_eq!(find(true), under("moved"), "paths from before the rename");
}

/// The CLI with the client key file `key`, as `uid` (gid the same, no
/// other groups: `setpriv`), through `addr`, with no secret it could read.
fn as_key(addr: &str, key: &Path, uid: u32, args: &[&str]) -> std::process::Output {
    common::cli_with_key(addr, key, uid, Path::new("/nonexistent"))
        .args(args)
        .output()
        .unwrap()
}

fn said(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Client keys on a cluster (issue 22): the book lives in etcd, so a key
/// added through server a works through b — its uid limits held there
/// too — and a revocation through b refuses the key on a within seconds.
/// The calls through b that a's table must answer go to a by the route
/// map (WRONG_SERVER): the key's proof is made for each server dialled.
#[test]
fn a_client_key_added_through_one_server_works_and_is_revoked_on_all() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let (_a, a_addr, secret) = first_plain_server(dir.path(), &etcd.url);
    let (b, b_addr) = serve(dir.path(), &etcd.url, "b");
    let _b = KillOnDrop(b);
    sextant_ok(&a_addr, &secret, &["mkdir", "/pub"]);
    sextant_ok(&a_addr, &secret, &["chmod", "777", "/pub"]);

    let key = user_key(dir.path(), &a_addr, &secret, "node1");
    let ls = sextant_ok(&b_addr, &secret, &["auth", "ls"]);
    assert!(
        ls.contains("node1"),
        "b lists the key added through a: {ls}"
    );

    // Through b: the key works (b knows it), as the uids it allows only.
    wait_for("the key works through b", Duration::from_secs(10), || {
        as_key(&b_addr, &key, 1000, &["touch", "/pub/from-b"])
            .status
            .success()
    });
    let o = as_key(&b_addr, &key, 1000, &["ls", "/pub"]);
    assert!(o.status.success(), "ls through b: {}", said(&o));
    assert!(said(&o).contains("from-b"), "{}", said(&o));
    let o = as_key(&b_addr, &key, 1001, &["touch", "/pub/not-mine"]);
    assert!(!o.status.success(), "uid 1001 was let through b");
    assert!(said(&o).contains("not permitted"), "{}", said(&o));
    let o = as_key(&a_addr, &key, 1000, &["ls", "/pub"]);
    assert!(o.status.success(), "ls through a: {}", said(&o));

    // Revoked through b: refused on a within seconds (10: under a load of
    // 13 from parallel builds one CLI call alone took seconds, and a 5 s
    // wait once ran out).
    sextant_ok(&b_addr, &secret, &["auth", "revoke", "node1"]);
    wait_for("the key refused on a", Duration::from_secs(10), || {
        let o = as_key(&a_addr, &key, 1000, &["ls", "/pub"]);
        !o.status.success() && said(&o).contains("authentication failed")
    });
    let ls = sextant_ok(&a_addr, &secret, &["auth", "ls"]);
    assert!(!ls.contains("node1"), "a still lists the revoked key: {ls}");
}

/// Client keys across an etcd restart (issue 22): the key book lives in
/// etcd (`clientkey/<name>`) and every server follows it through a watch,
/// which etcd does not resume by itself. After etcd is killed and
/// restarted under the servers, a key added before still works through
/// both servers, a key added through a afterwards works through b, and a
/// revocation through a reaches b — b's follow stream was re-created.
#[test]
fn client_keys_are_followed_across_an_etcd_restart() {
    let Some((dir, mut etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let (_a, a_addr, secret) = first_plain_server(dir.path(), &etcd.url);
    let (b, b_addr) = serve(dir.path(), &etcd.url, "b");
    let _b = KillOnDrop(b);
    sextant_ok(&a_addr, &secret, &["mkdir", "/pub"]);
    sextant_ok(&a_addr, &secret, &["chmod", "777", "/pub"]);
    let add = |name: &str| user_key(dir.path(), &a_addr, &secret, name);
    let works = |addr: &str, key: &Path, file: &str| {
        as_key(addr, key, 1000, &["touch", &format!("/pub/{file}")])
            .status
            .success()
    };
    let before = add("before");
    wait_for("the key works through b", Duration::from_secs(10), || {
        works(&b_addr, &before, "b0")
    });

    etcd.restart();

    wait_for(
        "the old key through a and b",
        Duration::from_secs(40),
        || works(&a_addr, &before, "a1") && works(&b_addr, &before, "b1"),
    );
    let after = add("after");
    wait_for(
        "a key added after the restart works through b",
        Duration::from_secs(20),
        || works(&b_addr, &after, "b2"),
    );
    sextant_ok(&a_addr, &secret, &["auth", "revoke", "before"]);
    wait_for("the revocation reaches b", Duration::from_secs(20), || {
        let o = as_key(&b_addr, &before, 1000, &["ls", "/pub"]);
        !o.status.success() && said(&o).contains("authentication failed")
    });
    let o = as_key(&b_addr, &after, 1000, &["ls", "/pub"]);
    assert!(
        o.status.success(),
        "the other key still works: {}",
        said(&o)
    );
    for f in ["b0", "a1", "b1", "b2"] {
        assert!(said(&o).contains(f), "{f} missing: {}", said(&o));
    }
}

/// `sextant auth --etcd URL ARGS…`: client keys managed in the cluster's
/// etcd directly, with no server (no secret, no `--server`).
fn auth_on_etcd(etcd: &str, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["--data", "/nonexistent", "auth", "--etcd", etcd])
        .args(args)
        .env_remove("SEXTANT_SERVER")
        .env_remove("SEXTANT_SECRET")
        .env_remove("SEXTANT_SECRET_FILE")
        .output()
        .unwrap()
}

fn auth_on_etcd_ok(etcd: &str, args: &[&str]) -> String {
    let o = auth_on_etcd(etcd, args);
    assert!(o.status.success(), "auth --etcd {args:?}: {}", said(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// `sextant auth --etcd` (issue 22) before any server exists: a key made
/// in etcd alone (the cluster has never run) is listed there, and the
/// first server to start takes it — the key works through it, as the
/// uids it allows only, and the server lists it.
#[test]
fn a_client_key_made_in_etcd_before_any_server_works_once_one_starts() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let key = dir.path().join("node1.key");
    let made = auth_on_etcd_ok(
        &etcd.url,
        &[
            "add",
            "node1",
            "--uids",
            "1000",
            "--out",
            key.to_str().unwrap(),
        ],
    );
    assert!(made.contains("wrote the key node1"), "{made}");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key file's mode");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ls = auth_on_etcd_ok(&etcd.url, &["ls"]);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("node1 ") && l.contains("1000")),
        "etcd lists the key: {ls}"
    );
    // A second add of the name is refused, as through a server.
    let again = auth_on_etcd(&etcd.url, &["add", "node1", "--out", "/dev/null"]);
    assert!(!again.status.success(), "a second node1 was added");
    assert!(said(&again).contains("exists"), "{}", said(&again));

    let (_a, a_addr, secret) = first_plain_server(dir.path(), &etcd.url);
    sextant_ok(&a_addr, &secret, &["mkdir", "/pub"]);
    sextant_ok(&a_addr, &secret, &["chmod", "777", "/pub"]);
    let o = as_key(&a_addr, &key, 1000, &["touch", "/pub/from-node1"]);
    assert!(o.status.success(), "the key made in etcd: {}", said(&o));
    let o = as_key(&a_addr, &key, 1000, &["ls", "/pub"]);
    assert!(said(&o).contains("from-node1"), "{}", said(&o));
    let o = as_key(&a_addr, &key, 1001, &["touch", "/pub/not-mine"]);
    assert!(!o.status.success(), "uid 1001 was let through");
    assert!(said(&o).contains("not permitted"), "{}", said(&o));
    let ls = sextant_ok(&a_addr, &secret, &["auth", "ls"]);
    assert!(ls.contains("node1"), "the server lists the key: {ls}");
}

/// `sextant auth --etcd` beside a running server (issue 22): `ls` there
/// lists a key the server added, a key added there works through the
/// server within seconds, and its revocation there ends a live session
/// and watch using it within seconds (as `auth revoke` through a server
/// does), refuses new calls, and leaves the other key working.
#[test]
fn client_keys_revoked_in_etcd_end_a_running_servers_sessions() {
    use sextant_client::{Client, Error, Options};
    use sextant_proto::keyauth::ClientKey;
    use sextant_types::Credentials;
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    // Its log, for the audit lines of changes made in etcd alone.
    let log = dir.path().join("a.log");
    let store = dir.path().join("store");
    let (a, a_addr) = common::spawn_server_env(
        &dir.path().join("a"),
        "127.0.0.1:0",
        &[
            "--journal-sync",
            "fsync",
            "--etcd",
            &etcd.url,
            "--name",
            "a",
            "--cluster-store",
            store.to_str().unwrap(),
        ],
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[("SEXTANT_LEASE_TTL", "2s"), ("SEXTANT_LOG_FORMAT", "json")],
    );
    let _a = KillOnDrop(a);
    let secret = dir.path().join("a");
    wait_root_assigned(&etcd.url, &secret);
    sextant_ok(&a_addr, &secret, &["mkdir", "/pub"]);
    let by_server = dir.path().join("by-server.key");
    sextant_ok(
        &a_addr,
        &secret,
        &[
            "auth",
            "add",
            "by-server",
            "--out",
            by_server.to_str().unwrap(),
        ],
    );
    let in_etcd = dir.path().join("in-etcd.key");
    auth_on_etcd_ok(
        &etcd.url,
        &["add", "in-etcd", "--out", in_etcd.to_str().unwrap()],
    );
    let ls = auth_on_etcd_ok(&etcd.url, &["ls"]);
    assert!(
        ls.contains("by-server") && ls.contains("in-etcd"),
        "etcd's list: {ls}"
    );
    let read = |f: &Path| ClientKey::parse_file(&std::fs::read_to_string(f).unwrap()).unwrap();
    let (key, other) = (read(&in_etcd), read(&by_server));
    let root = Credentials::root();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let options = Options {
            retry_for: Duration::from_secs(3),
            ..Options::default()
        };
        // The server follows etcd: the key works within seconds.
        let started = Instant::now();
        let c = loop {
            match Client::connect(&a_addr, &key.credential(), options.clone()).await {
                Ok(c) => break c,
                Err(e) => assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "the key made in etcd does not work: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let pub_ = c.resolve(&root, b"/pub", true).await.unwrap().soid;
        let mut changes = c.watch().await.unwrap();
        c.create(&root, pub_, b"before", 0o644, true).await.unwrap();

        let out = auth_on_etcd_ok(&etcd.url, &["revoke", "in-etcd"]);
        assert!(out.contains("revoked the key in-etcd"), "{out}");
        let started = Instant::now();
        let cut = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if changes.next_batch().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(cut.is_ok(), "the watch outlived the revocation in etcd");
        let e = c.getattr(&root, pub_).await.unwrap_err();
        assert_eq!(e, Error::Auth, "the session outlived the revocation");
        assert!(started.elapsed() < Duration::from_secs(5));
        let again = Client::connect(&a_addr, &key.credential(), options.clone()).await;
        assert!(matches!(again, Err(Error::Auth)), "a revoked key connected");
        let c = Client::connect(&a_addr, &other.credential(), options)
            .await
            .unwrap();
        c.getattr(&root, pub_).await.unwrap();
    });
    let ls = sextant_ok(&a_addr, &secret, &["auth", "ls"]);
    assert!(!ls.contains("in-etcd"), "the server lists it still: {ls}");
    assert!(ls.contains("by-server"), "{ls}");
    let ls = auth_on_etcd_ok(&etcd.url, &["ls"]);
    assert!(!ls.contains("in-etcd") && ls.contains("by-server"), "{ls}");
    let gone = auth_on_etcd(&etcd.url, &["revoke", "in-etcd"]);
    assert!(!gone.status.success(), "a second revocation succeeded");
    assert!(said(&gone).contains("no key named"), "{}", said(&gone));
    // The server's audit log says what it enforces now.
    let audit = std::fs::read_to_string(&log).unwrap();
    let revoked = audit
        .lines()
        .filter(|l| l.contains("\"target\":\"audit\"") && l.contains("in-etcd"))
        .any(|l| l.contains("client key revoked"));
    assert!(revoked, "no audit line for the revocation made in etcd");
}

/// A client key used over a cluster server's Unix socket (issue 22): the
/// proof names the address dialled (`unix:PATH`), which the server must
/// take as its own; a user the key allows works through the socket, on
/// tables of either server, and the CLI's commands see one namespace; a
/// user it does not allow is refused there as over TCP.
#[test]
fn a_client_key_works_over_a_cluster_servers_unix_socket() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let sock = dir.path().join("a.sock");
    let (a, a_addr) = serve_env(
        dir.path(),
        &etcd.url,
        "a",
        &[],
        &[("SEXTANT_SOCKET", sock.to_str().unwrap())],
    );
    let _a = KillOnDrop(a);
    let secret = dir.path().join("a");
    wait_root_assigned(&etcd.url, &secret);
    let (b, _b_addr) = serve(dir.path(), &etcd.url, "b");
    let _b = KillOnDrop(b);
    for d in ["/pub", "/other"] {
        sextant_ok(&a_addr, &secret, &["mkdir", d]);
        sextant_ok(&a_addr, &secret, &["chmod", "777", d]);
    }
    // /other's table on b, so the socket's server forwards for it.
    let tp = move_table(&etcd.url, &secret, "/pub", "a");
    let to = move_table(&etcd.url, &secret, "/other", "b");
    let key = user_key(dir.path(), &a_addr, &secret, "node1");
    let unix = format!("unix:{}", sock.display());
    for d in ["/pub", "/other"] {
        let o = as_key(&unix, &key, 1000, &["touch", &format!("{d}/by-1000")]);
        assert!(
            o.status.success(),
            "touch in {d} over the socket: {}",
            said(&o)
        );
    }
    let o = as_key(&unix, &key, 1000, &["find", "/", "-name", "by-1000"]);
    assert!(o.status.success(), "find over the socket: {}", said(&o));
    let mut found: Vec<&str> = std::str::from_utf8(&o.stdout).unwrap().lines().collect();
    found.sort_unstable();
    assert_eq!(
        found,
        ["/other/by-1000", "/pub/by-1000"],
        "tables {tp} and {to}"
    );
    let ls = sextant_ok(&a_addr, &secret, &["ls", "-l", "/other"]);
    assert!(ls.contains("1000"), "made as uid 1000: {ls}");
    // The key's limits hold over the socket too: a uid it does not allow
    // is refused (EPERM), not served as its kernel identity.
    let o = as_key(&unix, &key, 1001, &["touch", "/pub/by-1001"]);
    assert!(!o.status.success(), "uid 1001 was let through the socket");
    assert!(said(&o).contains("not permitted"), "{}", said(&o));
}

/// The environment variables that make [`socket_forwards_overlap_child`]
/// run: the socket's path, and /other's SOID (hex).
const OVERLAP_SOCKET: &str = "SEXTANT_TEST_OVERLAP_SOCKET";
const OVERLAP_DIR: &str = "SEXTANT_TEST_OVERLAP_DIR";

/// The half of `the_socket_forwards_without_waiting_on_one_another` that
/// runs as `nobody` (the test binary re-executed through setpriv). While
/// b runs: 64 lookups in /other (b's table, so a forwards them) in flight
/// at once on two Session streams through a's socket, and a create there
/// claiming root, made as nobody. Then it says `ready` and waits for
/// `go` (b stopped): on one stream, a lookup in /other (a forwards it; b
/// does not answer), then a getattr of / (a's): the second is answered
/// first. A no-op when run as a test of its own.
#[test]
fn socket_forwards_overlap_child() {
    let Ok(socket) = std::env::var(OVERLAP_SOCKET) else {
        return;
    };
    use sextant_proto::pb::{self, request::Op};
    use sextant_types::{Credentials, Soid};
    assert_ne!(nix::unistd::getuid().as_raw(), 0, "runs as a user");
    let other = soid_from_env(OVERLAP_DIR);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let connect = || async {
            let socket = socket.clone();
            let channel = tonic::transport::Endpoint::from_static("http://localhost")
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = socket.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                    }
                }))
                .await
                .unwrap();
            let mut raw = pb::sextant_client::SextantClient::new(channel);
            let (tx, rx) = tokio::sync::mpsc::channel(128);
            let answers = raw
                .session(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .unwrap()
                .into_inner();
            (tx, answers)
        };
        let lookup = |id, parent: Soid, name: &str| pb::Request {
            id,
            op: Some(Op::Lookup(pb::LookupRequest {
                parent: Some(sextant_proto::soid_to_pb(parent)),
                name: name.as_bytes().to_vec(),
            })),
            ..Default::default()
        };
        let attr = |r: pb::Response| match r.result {
            Some(pb::response::Result::Attr(a)) => a,
            other => panic!("{other:?} {:?} {:?}", r.error, r.wrong_server),
        };
        // Many forwards in flight at once, from two connections.
        let (mut streams, mut all) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let (tx, answers) = connect().await;
            for i in 0..32u64 {
                let name = format!("f{}", i % 8);
                tx.send(lookup(i + 1, other, &name)).await.unwrap();
            }
            streams.push(tx);
            all.push(answers);
        }
        for answers in &mut all {
            let mut ids = Vec::new();
            for _ in 0..32 {
                let r = answers.message().await.unwrap().unwrap();
                ids.push(r.id);
                attr(r);
            }
            ids.sort_unstable();
            assert_eq!(ids, (1..=32).collect::<Vec<u64>>());
        }
        // A create in /other claiming root: made as nobody.
        let (tx, mut answers) = (streams.pop().unwrap(), all.pop().unwrap());
        tx.send(pb::Request {
            id: 100,
            cred: Some(sextant_proto::cred_to_pb(&Credentials::root())),
            op: Some(Op::Create(pb::CreateRequest {
                parent: Some(sextant_proto::soid_to_pb(other)),
                name: b"by-nobody".to_vec(),
                perm: 0o644,
                exclusive: true,
            })),
            ..Default::default()
        })
        .await
        .unwrap();
        let made = attr(answers.message().await.unwrap().unwrap());
        assert_eq!((made.uid, made.gid), (65534, 65534), "made as nobody");
        // The parent stops b, then says go.
        println!("ready");
        let mut go = String::new();
        tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut go))
            .await
            .unwrap()
            .unwrap();
        // Forwarded to b, which is stopped: no answer until it wakes.
        tx.send(lookup(200, other, "f0")).await.unwrap();
        // Answered by a itself (/ is a's): must not wait for the forward.
        tx.send(pb::Request {
            id: 201,
            op: Some(Op::Getattr(pb::GetattrRequest {
                soid: Some(sextant_proto::soid_to_pb(Soid::ROOT)),
            })),
            ..Default::default()
        })
        .await
        .unwrap();
        let first = answers.message().await.unwrap().unwrap();
        assert_eq!(
            first.id, 201,
            "the session waited for a forward before a's own answer: {first:?}"
        );
        attr(first);
        println!("overlapped");
    });
}

/// Issue 22: a local user's requests that another server holds are
/// forwarded without holding up the user's other requests (a stopped
/// holder does not stop the requests of the same session that a's own
/// tables answer), all on one stream to the holder however many are in
/// flight and from however many connections (a's
/// `sextant_forward_streams_opened_total` is 1), still as that user
/// (a create claiming root is made as nobody).
#[test]
fn the_socket_forwards_without_waiting_on_one_another() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    // Split tables at 2 directories: /other's table is not /'s.
    let metrics_port = free_ports(1);
    let metrics = format!("127.0.0.1:{metrics_port}");
    let (_a, a_addr, secret, config, sock) = first_server_on_socket(
        dir.path(),
        &etcd.url,
        "table_dir_limit = 2\n",
        &[("SEXTANT_METRICS", &metrics)],
    );
    let sock_env = sock.to_str().unwrap();
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let b_pid = b.id() as i32;
    let _b = KillOnDrop(b);
    for d in ["/pub", "/other"] {
        sextant_ok(&a_addr, &secret, &["mkdir", d]);
        sextant_ok(&a_addr, &secret, &["chmod", "777", d]);
    }
    for f in 0..8 {
        sextant_ok(&a_addr, &secret, &["touch", &format!("/other/f{f}")]);
    }
    let placed = RootOnAOtherOnB::place(&etcd.url, &secret, &a_addr);
    let other = placed.other.clone();
    let settled = || placed.still_placed(&etcd.url, &secret);
    let mut child = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "socket_forwards_overlap_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env_remove("SEXTANT_SECRET")
        .env_remove("SEXTANT_SECRET_FILE")
        .env(OVERLAP_SOCKET, sock_env)
        .env(OVERLAP_DIR, &other)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut said_ready = String::new();
    while out.read_line(&mut said_ready).unwrap() > 0 && !said_ready.contains("ready") {}
    // b stopped: a forward to it waits (up to the forward's limit).
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(b_pid, libc::SIGSTOP) };
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(b"go\n");
    }
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let child = child.wait_with_output().unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(b_pid, libc::SIGCONT) };
    assert!(
        child.status.success() && rest.contains("overlapped"),
        "the child failed: {said_ready}{rest}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    assert!(
        settled(),
        "a table moved during the test: its answer says nothing"
    );
    let ls = sextant_ok(&a_addr, &secret, &["ls", "-l", "/other"]);
    let line = ls
        .lines()
        .find(|l| l.contains("by-nobody"))
        .unwrap_or_default();
    assert!(line.contains("nobody"), "made as nobody: {ls}");
    let body = scrape_metrics(metrics_port);
    let value = |name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let forwarded = value("sextant_requests_forwarded_total");
    assert!(forwarded >= 65.0, "{forwarded} forwarded:\n{body}");
    assert_eq!(
        value("sextant_forward_streams_opened_total"),
        1.0,
        "{forwarded} forwards opened other than one stream:\n{body}"
    );
}

/// Issue 22: a local user stats and lists, through a's socket, a directory
/// whose entry is in a's table (`/`) and whose inode is in b's (`/other`,
/// `/closed`): a forwarded lookup answered with a WRONG_SERVER naming the
/// inode gets the inode's attributes from its holder, as a client with
/// the secret does (`Client::lookup`). Before, a forwarded the same lookup
/// to b, b (not holding `/`) back to a, until the hop limit: "the server
/// does not serve this table". Permissions still apply: root's 0700
/// `/closed` can be stat'ed but not listed or searched by nobody.
#[test]
fn a_local_user_stats_a_directory_held_elsewhere_through_the_socket() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    // Split tables at 2 directories: /other's table is not /'s.
    let (_a, a_addr, secret, config, sock) =
        first_server_on_socket(dir.path(), &etcd.url, "table_dir_limit = 2\n", &[]);
    let sock_env = sock.to_str().unwrap();
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    for d in ["/pub", "/other", "/closed"] {
        sextant_ok(&a_addr, &secret, &["mkdir", d]);
    }
    sextant_ok(&a_addr, &secret, &["chmod", "700", "/closed"]);
    for f in 0..4 {
        sextant_ok(&a_addr, &secret, &["touch", &format!("/other/f{f}")]);
        sextant_ok(&a_addr, &secret, &["touch", &format!("/closed/f{f}")]);
    }
    let root_table = move_table(&etcd.url, &secret, "/", "a");
    let other_table = move_table(&etcd.url, &secret, "/other", "b");
    let closed_table = move_table(&etcd.url, &secret, "/closed", "b");
    assert_ne!(root_table, other_table, "/other has a table of its own");
    assert_ne!(root_table, closed_table, "/closed has a table of its own");
    let settled = || {
        let s = status_on(&etcd.url, &secret);
        let on = |table, server| {
            s["tables"].as_array().unwrap().iter().any(|t| {
                t["table"].as_u64() == Some(table)
                    && t["owner"].as_str() == Some(server)
                    && t["moving_to"].is_null()
            })
        };
        on(root_table, "a") && on(other_table, "b") && on(closed_table, "b")
    };
    wait_for(
        "/ on a, /other and /closed on b",
        Duration::from_secs(30),
        settled,
    );
    wait_for("/other served", Duration::from_secs(30), || {
        sextant(&a_addr, &secret, &["stat", "/other/f0"])
            .status
            .success()
            && sextant(&a_addr, &secret, &["stat", "/closed/f0"])
                .status
                .success()
    });
    let nobody = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(BIN)
            .args(["--server", &format!("unix:{sock_env}")])
            .args(args)
            .env_remove("SEXTANT_SECRET")
            .env_remove("SEXTANT_SECRET_FILE")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // As nobody, what root sees (the same attributes: same SOID, mode).
    for path in ["/other", "/other/f1", "/closed"] {
        let root = sextant_ok(&a_addr, &secret, &["--json", "stat", path]);
        let (ok, out, err) = nobody(&["--json", "stat", path]);
        assert!(ok, "stat {path} as nobody: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let w: serde_json::Value = serde_json::from_str(&root).unwrap();
        assert_eq!(v["soid"], w["soid"], "stat {path}: {out} vs {root}");
        assert_eq!(v["mode"], w["mode"], "stat {path}: {out} vs {root}");
    }
    let (ok, out, err) = nobody(&["ls", "-l", "/other"]);
    assert!(ok, "ls -l /other as nobody: {err}");
    assert_eq!(out.lines().filter(|l| l.contains(" f")).count(), 4, "{out}");
    let (ok, out, err) = nobody(&["ls", "-l", "/other/f2"]);
    assert!(
        ok && out.contains("f2"),
        "ls -l /other/f2 as nobody: {out}{err}"
    );
    let (ok, out, err) = nobody(&["ls", "-l", "/"]);
    assert!(ok, "ls -l / as nobody: {err}");
    for d in ["pub", "other", "closed"] {
        assert!(out.lines().any(|l| l.ends_with(d)), "no {d} in {out}");
    }
    // Root's 0700 directory stays closed to nobody.
    for args in [
        &["ls", "/closed"][..],
        &["ls", "-l", "/closed"],
        &["stat", "/closed/f1"],
        &["ls", "-l", "/closed/f1"],
    ] {
        let (ok, out, err) = nobody(args);
        assert!(
            !ok && err.contains("permission denied (errno 13)"),
            "{args:?} as nobody: {out}{err}"
        );
    }
    assert!(
        settled(),
        "a table moved during the test: its answer says nothing"
    );
}

/// The environment variables that make [`ticket_child`] run: the socket's
/// path, /other's SOID (hex), and whether to use tickets ("on"/"off").
const TICKET_SOCKET: &str = "SEXTANT_TEST_TICKET_SOCKET";
const TICKET_DIR: &str = "SEXTANT_TEST_TICKET_DIR";
const TICKET_USE: &str = "SEXTANT_TEST_TICKET_USE";

/// The half of `a_local_user_with_a_ticket_reaches_the_holder_itself` that
/// runs as nobody: connects to a's socket (no secret), with tickets or
/// without, and creates 20 files in /other (b's table) claiming root;
/// prints `ticket=BOOL uids=...`. A no-op when run as a test of its own.
#[test]
fn ticket_child() {
    let Ok(socket) = std::env::var(TICKET_SOCKET) else {
        return;
    };
    use sextant_client::{Client, Options};
    use sextant_types::Credentials;
    assert_ne!(nix::unistd::getuid().as_raw(), 0, "runs as a user");
    let other = soid_from_env(TICKET_DIR);
    let tickets = std::env::var(TICKET_USE).unwrap() == "on";
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let options = Options {
            tickets,
            ..Options::default()
        };
        let c = Client::connect(&format!("unix:{socket}"), "", options)
            .await
            .unwrap();
        let root = Credentials::root();
        let mut uids = Vec::new();
        for i in 0..20 {
            let name = format!("t-{tickets}-{i}");
            let a = c
                .create(&root, other, name.as_bytes(), 0o644, true)
                .await
                .unwrap();
            uids.push(a.uid);
        }
        uids.dedup();
        println!("ticket={} uids={uids:?}", c.has_ticket());
    });
}

/// Issue 22, identity tickets: a local user on a's socket (nobody, no
/// secret) gets a ticket from a and sends its requests for b's table to b
/// itself over TCP — a forwards none of them
/// (`sextant_requests_forwarded_total` stays 0) — and they still run as
/// nobody though they claim root. The same user without tickets (the
/// client told not to ask) goes through a, which forwards every one.
#[test]
fn a_local_user_with_a_ticket_reaches_the_holder_itself() {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let metrics_port = free_ports(1);
    let metrics = format!("127.0.0.1:{metrics_port}");
    let (_a, a_addr, secret, config, sock) = first_server_on_socket(
        dir.path(),
        &etcd.url,
        "table_dir_limit = 2\n",
        &[("SEXTANT_METRICS", &metrics)],
    );
    let (b, _b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    for d in ["/pub", "/other"] {
        sextant_ok(&a_addr, &secret, &["mkdir", d]);
        sextant_ok(&a_addr, &secret, &["chmod", "777", d]);
    }
    let placed = RootOnAOtherOnB::place(&etcd.url, &secret, &a_addr);
    let other = placed.other.clone();
    let settled = || placed.still_placed(&etcd.url, &secret);
    let forwarded = || {
        let body = scrape_metrics(metrics_port);
        body.lines()
            .find_map(|l| {
                l.strip_prefix("sextant_requests_forwarded_total")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    let run = |tickets: &str| {
        let out = Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "ticket_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env_remove("SEXTANT_SECRET")
            .env_remove("SEXTANT_SECRET_FILE")
            .env(TICKET_SOCKET, &sock)
            .env(TICKET_DIR, &other)
            .env(TICKET_USE, tickets)
            .current_dir("/")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "the child ({tickets}) failed: {said}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        said
    };
    let before = forwarded();
    let said = run("on");
    assert!(said.contains("ticket=true uids=[65534]"), "{said}");
    let with_tickets = forwarded() - before;
    assert!(
        with_tickets < 1.0,
        "{with_tickets} requests forwarded for a ticket's holder"
    );
    let said = run("off");
    assert!(said.contains("ticket=false uids=[65534]"), "{said}");
    let without = forwarded() - before - with_tickets;
    assert!(without >= 20.0, "{without} forwarded without tickets");
    assert!(
        settled(),
        "a table moved during the test: its answer says nothing"
    );
    let ls = sextant_ok(&a_addr, &secret, &["ls", "-l", "/other"]);
    assert_eq!(
        ls.lines().filter(|l| l.contains("nobody")).count(),
        40,
        "every file made as nobody: {ls}"
    );
}

/// A server's /metrics (retried for a few seconds while the exporter
/// starts).
fn scrape_metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut out = String::new();
            if s.read_to_string(&mut out).is_ok() && out.contains("sextant_") {
                return out;
            }
        }
        assert!(Instant::now() < deadline, "no metrics on {port}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How long `ticket_loop_child` keeps its one client working (seconds).
const TICKET_LOOP_SECS: &str = "SEXTANT_TEST_TICKET_LOOP_SECS";

/// The child of the ticket-life tests, run as nobody: one client on a's
/// socket (no secret, tickets on) kept for `TICKET_LOOP_SECS`, which
/// every ~half second creates a file in /other (b's table) and tries to
/// chmod /other/keep (root's), both claiming root. One line per round:
/// `op I t=MS ticket=BOOL uid=UID chmod=ERRNO` (or `err I t=MS ...`), then
/// `done`. A no-op when run as a test of its own.
#[test]
fn ticket_loop_child() {
    let Ok(socket) = std::env::var(TICKET_SOCKET) else {
        return;
    };
    use sextant_client::{Client, Options};
    use sextant_types::{Credentials, SetAttr};
    assert_ne!(nix::unistd::getuid().as_raw(), 0, "runs as a user");
    let other = soid_from_env(TICKET_DIR);
    let secs: u64 = std::env::var(TICKET_LOOP_SECS).unwrap().parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = Client::connect(&format!("unix:{socket}"), "", Options::default())
            .await
            .unwrap();
        let root = Credentials::root();
        let keep = c.lookup(&root, other, b"keep").await.unwrap().soid;
        let chmod = SetAttr {
            perm: Some(0o777),
            ..SetAttr::default()
        };
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed() < Duration::from_secs(secs) {
            let t = start.elapsed().as_millis();
            let name = format!("l-{i}");
            match c.create(&root, other, name.as_bytes(), 0o644, true).await {
                Ok(a) => {
                    let errno = match c.setattr(&root, keep, &chmod).await {
                        Ok(_) => 0,
                        Err(e) => e.errno(),
                    };
                    println!(
                        "op {i} t={t} ticket={} uid={} chmod={errno}",
                        c.has_ticket(),
                        a.uid
                    );
                }
                Err(e) => println!("err {i} t={t} {e}"),
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        println!("done");
    });
}

/// One round of `ticket_loop_child`: when (ms from the start), whether
/// the client held a usable ticket after it, the created file's uid and
/// the chmod's errno.
struct Round {
    t: u64,
    ticket: bool,
    uid: u32,
    chmod: i32,
}

/// The rounds a `ticket_loop_child` printed; panics on a failed one.
fn rounds_of(said: &str) -> Vec<Round> {
    assert!(said.contains("\ndone"), "the child did not finish: {said}");
    assert!(!said.contains("\nerr "), "an operation failed: {said}");
    said.lines()
        .filter_map(|l| l.strip_prefix("op "))
        .map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .unwrap_or_else(|| panic!("no {k} in {l}"))
                    .to_string()
            };
            Round {
                t: field("t=").parse().unwrap(),
                ticket: field("ticket=") == "true",
                uid: field("uid=").parse().unwrap(),
                chmod: field("chmod=").parse().unwrap(),
            }
        })
        .collect()
}

/// The sum of the counters `name` whose labels include every one of
/// `labels` (`reason="x"`) on the server whose metrics are on `port`.
fn counter(port: u16, name: &str, labels: &[&str]) -> f64 {
    scrape_metrics(port)
        .lines()
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let rest = key.strip_prefix(name)?;
            let ok = (rest.is_empty() || rest.starts_with('{'))
                && labels.iter().all(|want| rest.contains(want));
            ok.then(|| value.trim().parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// A cluster for the ticket-life tests: a (on its socket, metrics on
/// `ports`, environment `a_env`) holding /, b (metrics on `ports + 1`,
/// environment `b_env`) holding /other (777) with /other/keep (root's,
/// 0644) in it; then `ticket_loop_child` runs as nobody for `secs`. The
/// rounds, what a forwarded meanwhile, and whether the tables stayed put.
fn ticket_loop_on_a_cluster(
    a_env: &[(&str, &str)],
    b_env: &[(&str, &str)],
    secs: u64,
    check: impl FnOnce(Vec<Round>, f64, u16, u16),
) {
    let secs = secs.to_string();
    tickets_on_a_cluster(
        a_env,
        b_env,
        ("ticket_loop_child", TICKET_LOOP_SECS, &secs),
        check,
    );
}

/// [`ticket_loop_on_a_cluster`] with the child test to run as nobody and
/// one more variable for it: (its name, the variable, its value).
fn tickets_on_a_cluster(
    a_env: &[(&str, &str)],
    b_env: &[(&str, &str)],
    child: (&str, &str, &str),
    check: impl FnOnce(Vec<Round>, f64, u16, u16),
) {
    let Some((dir, etcd)) = dir_and_etcd_for_users() else {
        return;
    };
    let ports = free_ports(2);
    let (a_metrics, b_metrics) = (ports, ports + 1);
    let a_m = format!("127.0.0.1:{a_metrics}");
    let b_m = format!("127.0.0.1:{b_metrics}");
    let a_env = [&[("SEXTANT_METRICS", a_m.as_str())], a_env].concat();
    let (_a, a_addr, secret, config, sock) =
        first_server_on_socket(dir.path(), &etcd.url, "table_dir_limit = 2\n", &a_env);
    let b_env = [&[("SEXTANT_METRICS", b_m.as_str())], b_env].concat();
    let (b, _b_addr) = serve_env(dir.path(), &etcd.url, "b", &["--config", &config], &b_env);
    let _b = KillOnDrop(b);
    for d in ["/pub", "/other"] {
        sextant_ok(&a_addr, &secret, &["mkdir", d]);
        sextant_ok(&a_addr, &secret, &["chmod", "777", d]);
    }
    let placed = RootOnAOtherOnB::place(&etcd.url, &secret, &a_addr);
    sextant_ok(&a_addr, &secret, &["touch", "/other/keep"]);
    let forwarded = || counter(a_metrics, "sextant_requests_forwarded_total", &[]);
    let before = forwarded();
    let out = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", child.0, "--nocapture", "--test-threads", "1"])
        .env_remove("SEXTANT_SECRET")
        .env_remove("SEXTANT_SECRET_FILE")
        .env_remove("SEXTANT_TICKETS")
        .env(TICKET_SOCKET, &sock)
        .env(TICKET_DIR, &placed.other)
        .env(child.1, child.2)
        .current_dir("/")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the child failed: {said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("the child said:\n{said}");
    let rounds = rounds_of(&said);
    assert!(
        placed.still_placed(&etcd.url, &secret),
        "a table moved during the test: its answer says nothing"
    );
    assert!(rounds.len() >= 20, "{} rounds: {said}", rounds.len());
    for r in &rounds {
        assert_eq!(r.uid, 65534, "every file made as nobody: {said}");
        assert_eq!(r.chmod, 1, "chmod of root's file: EPERM as nobody: {said}");
    }
    check(rounds, forwarded() - before, a_metrics, b_metrics);
}

/// How many clients `ticket_crowd_child` opens at once.
const TICKET_CROWD: &str = "SEXTANT_TEST_TICKET_CROWD";

/// The child of the crowd test, run as nobody: `TICKET_CROWD` clients
/// of a's socket (no secret, tickets on) at once, each with its own
/// session on a and — with a ticket of its own — on b; each creates a
/// file in /other (b's table) and tries to chmod /other/keep (root's),
/// both claiming root, and prints `op I t=MS ticket=BOOL uid=UID
/// chmod=ERRNO` (or `err I ...`); then `done`. A no-op when run as a
/// test of its own.
#[test]
fn ticket_crowd_child() {
    let Ok(socket) = std::env::var(TICKET_SOCKET) else {
        return;
    };
    use sextant_client::{Client, Options};
    use sextant_types::{Credentials, SetAttr};
    assert_ne!(nix::unistd::getuid().as_raw(), 0, "runs as a user");
    let other = soid_from_env(TICKET_DIR);
    let n: u64 = std::env::var(TICKET_CROWD).unwrap().parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let start = Instant::now();
    let lines = rt.block_on(async {
        let clients = (0..n).map(|i| {
            let socket = socket.clone();
            tokio::spawn(async move {
                let t = || start.elapsed().as_millis();
                let c = match Client::connect(&format!("unix:{socket}"), "", Options::default())
                    .await
                {
                    Ok(c) => c,
                    Err(e) => return format!("err {i} t={} connect: {e}", t()),
                };
                let root = Credentials::root();
                let keep = match c.lookup(&root, other, b"keep").await {
                    Ok(a) => a.soid,
                    Err(e) => return format!("err {i} t={} lookup: {e}", t()),
                };
                let name = format!("crowd-{i}");
                match c.create(&root, other, name.as_bytes(), 0o644, true).await {
                    Ok(a) => {
                        let chmod = SetAttr {
                            perm: Some(0o777),
                            ..SetAttr::default()
                        };
                        let errno = match c.setattr(&root, keep, &chmod).await {
                            Ok(_) => 0,
                            Err(e) => e.errno(),
                        };
                        format!(
                            "op {i} t={} ticket={} uid={} chmod={errno}",
                            t(),
                            c.has_ticket(),
                            a.uid
                        )
                    }
                    Err(e) => format!("err {i} t={} create: {e}", t()),
                }
            })
        });
        let clients: Vec<_> = clients.collect();
        let mut lines = Vec::new();
        for c in clients {
            lines.push(c.await.unwrap());
        }
        lines
    });
    // A line of its own (libtest's `test NAME ... ` has no newline).
    println!();
    for l in lines {
        println!("{l}");
    }
    println!("done");
}

/// Issue 22, hundreds of ticket sessions at once on real processes: 200
/// clients of one local user (nobody) open sessions on a's socket at
/// once, each takes a ticket from a and opens its own session with b,
/// which holds /other. Every client reaches b itself (b admits each as
/// the kernel's caller over TCP, a forwards almost nothing), none is
/// refused (no proof taken for a replay, no ticket's check failing under
/// the crowd), and each acts as nobody: its file is nobody's, chmod of
/// root's file is EPERM.
#[test]
fn two_hundred_clients_with_tickets_at_once_each_reach_the_holder_as_themselves() {
    const N: usize = 200;
    tickets_on_a_cluster(
        &[],
        &[],
        ("ticket_crowd_child", TICKET_CROWD, &N.to_string()),
        |rounds, forwarded, a_metrics, b_metrics| {
            assert_eq!(rounds.len(), N, "every client made its file");
            let without = rounds.iter().filter(|r| !r.ticket).count();
            assert_eq!(without, 0, "{without} clients without a ticket");
            let issued = counter(a_metrics, "sextant_auth_tickets_issued_total", &[]);
            assert!(issued >= 1.0, "{issued} tickets issued");
            let admitted = counter(
                b_metrics,
                "sextant_auth_calls_total",
                &["transport=\"tcp\"", "caller=\"kernel\""],
            );
            // A session is one call (a stream carrying its requests).
            assert!(
                admitted >= N as f64,
                "b admitted {admitted} sessions of the kernel's caller over TCP for {N} clients"
            );
            assert!(
                forwarded < (N / 10) as f64,
                "{forwarded} requests forwarded through a"
            );
            let refused = counter(b_metrics, "sextant_auth_refused_total", &[])
                - counter(
                    b_metrics,
                    "sextant_auth_refused_total",
                    &["reason=\"claim\""],
                );
            assert!(refused < 1.0, "{refused} refusals of a proof on b");
            eprintln!(
                "{N} clients: {issued} tickets issued, {admitted} calls admitted on b, {forwarded} forwarded"
            );
        },
    );
}

/// Issue 22, identity tickets over several lifetimes: a issues tickets
/// good for 30 s (test-only fault point `ticket-lifetime:30`); a local
/// user's one client works for 100 s against b's table, going to b
/// itself the whole time — renewing its ticket at half life (a issued
/// several), its session with b ended by b at each ticket's expiry
/// (counted) and opened again with the renewed one — and never forwarded
/// through a, never refused, always as nobody with nobody's permissions.
#[test]
fn a_local_users_client_keeps_reaching_the_holder_across_ticket_lifetimes() {
    ticket_loop_on_a_cluster(
        &[("SEXTANT_FAULT", "ticket-lifetime:30")],
        &[],
        100,
        |rounds, forwarded, a_metrics, b_metrics| {
            let without: Vec<u64> = rounds.iter().filter(|r| !r.ticket).map(|r| r.t).collect();
            assert!(
                without.is_empty(),
                "rounds without a ticket at {without:?} ms"
            );
            assert!(
                forwarded < 5.0,
                "{forwarded} requests forwarded through a for a ticket's holder"
            );
            let issued = counter(a_metrics, "sextant_auth_tickets_issued_total", &[]);
            assert!(
                issued >= 5.0,
                "{issued} tickets issued in 100 s of 30 s tickets"
            );
            let expired = counter(b_metrics, "sextant_auth_ticket_sessions_expired_total", &[]);
            assert!(
                expired >= 2.0,
                "{expired} sessions ended by b at their ticket's expiry in 100 s"
            );
            // (Refused claims — the child claims root — are counted too.)
            let refused = counter(b_metrics, "sextant_auth_refused_total", &[])
                - counter(
                    b_metrics,
                    "sextant_auth_refused_total",
                    &["reason=\"claim\""],
                );
            assert!(refused < 1.0, "{refused} refusals of a proof on b");
        },
    );
}

/// Issue 22, a holder that refuses a ticket: b refuses the first ticket
/// proof it gets (test-only fault point `refuse-tickets:1`). The local
/// user's client drops its ticket and goes through its socket, whose
/// server (a) forwards every request — they still succeed, as nobody —
/// for the fallback period (60 s); then it takes a new ticket and reaches
/// b itself again (b admits a `kernel` caller over TCP, a forwards no
/// more).
#[test]
fn a_refused_ticket_falls_back_to_the_socket_then_is_tried_again() {
    ticket_loop_on_a_cluster(
        &[],
        &[("SEXTANT_FAULT", "refuse-tickets:1")],
        90,
        |rounds, forwarded, _a_metrics, b_metrics| {
            let refused = counter(
                b_metrics,
                "sextant_auth_refused_total",
                &["reason=\"ticket-fault\""],
            );
            assert_eq!(refused, 1.0, "b refused one ticket");
            // The fallback: from the refusal (the first round) for 60 s.
            let early: Vec<&Round> = rounds.iter().filter(|r| r.t < 50_000).collect();
            assert!(
                early.iter().all(|r| !r.ticket),
                "a ticket used within the fallback period"
            );
            let late: Vec<&Round> = rounds.iter().filter(|r| r.t > 75_000).collect();
            assert!(late.len() >= 5, "{} rounds after the fallback", late.len());
            assert!(
                late.iter().all(|r| r.ticket),
                "no ticket again after the fallback period"
            );
            let without = rounds.iter().filter(|r| !r.ticket).count() as f64;
            // Two requests a round (create, chmod); the lookup of keep.
            assert!(
                forwarded >= 2.0 * without,
                "{forwarded} forwarded for {without} rounds without a ticket"
            );
            assert!(
                forwarded <= 2.0 * without + 6.0,
                "{forwarded} forwarded for {without} rounds without a ticket: the rounds with \
                 one went through a too"
            );
            let direct = counter(
                b_metrics,
                "sextant_auth_calls_total",
                &["transport=\"tcp\"", "caller=\"kernel\""],
            );
            assert!(direct >= 1.0, "b admitted no ticket after the fallback");
        },
    );
}

/// Issue 20, item 6: tables that shrink are merged on every server of a
/// cluster — each server merges neighbours it owns, through one etcd
/// transaction fenced by both owner keys and refused while a move, lend or
/// borrow names either — while the coordinator balances them: the table
/// count goes down, nothing is lost, every inode is counted once, and
/// every table etcd has is served (the merged-away ones are gone from
/// etcd, not left unserved).
#[test]
fn tables_that_shrink_are_merged_on_every_server() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    // Split past 24 inodes; neighbours of < 3 inodes and < 2 directories
    // merge.
    let limits = "table_dir_limit = 16\ntable_inode_limit = 24\n";
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, limits);
    let status_of = || status_on(&etcd.url, &secret);
    for d in 0..12 {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/d{d}")]);
        let files: Vec<String> = (0..5).map(|f| format!("/d{d}/f{f}")).collect();
        let mut args = vec!["touch"];
        args.extend(files.iter().map(String::as_str));
        sextant_ok(&a_addr, &secret, &args);
    }
    let (b, b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", &config]);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    let before = status_of()["tables"].as_array().unwrap().len();
    assert!(before >= 4, "the tree split: {before} tables");
    // Everything but /d0/f0, /d6/f0 and /d11/f0 goes.
    let kept = [0, 6, 11];
    for d in 0..12 {
        if kept.contains(&d) {
            let files: Vec<String> = (1..5).map(|f| format!("/d{d}/f{f}")).collect();
            let mut args = vec!["rm"];
            args.extend(files.iter().map(String::as_str));
            sextant_ok(&a_addr, &secret, &args);
        } else {
            sextant_ok(&a_addr, &secret, &["rm", "-r", &format!("/d{d}")]);
        }
    }
    wait_for("tables merged", Duration::from_secs(60), || {
        status_of()["tables"].as_array().unwrap().len() < before
    });
    let mut want: Vec<String> = std::iter::once("/".to_string())
        .chain(
            kept.iter()
                .flat_map(|d| [format!("/d{d}"), format!("/d{d}/f0")]),
        )
        .collect();
    want.sort();
    for addr in [&a_addr, &b_addr] {
        let out = sextant_ok(addr, &secret, &["find", "/"]);
        let mut got: Vec<String> = out.lines().map(str::to_string).collect();
        got.sort();
        assert_eq!(got, want, "find / at {addr}");
    }
    wait_for("every inode counted once", Duration::from_secs(30), || {
        inodes(&status_of()) == 1 + 2 * kept.len() as u64
    });
    // etcd's tables still partition the SOID space (the merged-away ones
    // are gone, the lower ones widened), each with an owner.
    let st = status_of();
    let mut ranges: Vec<(String, String)> = st["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert!(t["owner"].is_string(), "{t}");
            (
                t["first"].as_str().unwrap().to_string(),
                t["last"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    ranges.sort();
    let hex = |s: &str| u128::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    assert_eq!(hex(&ranges[0].0), 0, "{ranges:?}");
    assert_eq!(hex(&ranges[ranges.len() - 1].1), u128::MAX, "{ranges:?}");
    for w in ranges.windows(2) {
        assert_eq!(hex(&w[0].1) + 1, hex(&w[1].0), "{ranges:?}");
    }
    let after = status_of()["tables"].as_array().unwrap().len();
    eprintln!("{before} tables, {after} after the merges");
}

/// A client key limited to `/home/alice` on a cluster whose `/`, `/home`
/// and `/home/alice` are held by three different servers: inside, it
/// works as on one server (the confinement walks the parent chains across
/// the servers); outside (`..` out, a rename out, another subtree) is
/// EACCES; a search of `/` is clamped to the subtree; and once an
/// ancestor on another server is renamed so that the subtree is no longer
/// at the key's path, everything is refused at once.
#[test]
fn a_path_limited_key_on_a_cluster_walks_across_servers() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (_a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, TINY_TABLES);
    let admin = |args: &[&str]| sextant_ok(&a_addr, &secret, args);
    for d in ["/home", "/home/alice", "/home/alice/d", "/home/bob"] {
        admin(&["mkdir", d]);
    }
    admin(&["touch", "/home/alice/f"]);
    admin(&["touch", "/home/bob/secret"]);
    let c = config.as_str();
    let (b, _) = serve_with(dir.path(), &etcd.url, "b", &["--config", c]);
    let _b = KillOnDrop(b);
    let (s3, _) = serve_with(dir.path(), &etcd.url, "c", &["--config", c]);
    let _c = KillOnDrop(s3);
    wait_for("three servers", Duration::from_secs(60), || {
        tables_by_server(&status_on(&etcd.url, &secret)).len() == 3
    });
    // (`d` in a table of its own, on another server than `/home/alice`:
    // a rename between them BORROWs.)
    for (path, to) in [
        ("/home/alice/d", "b"),
        ("/home/alice", "c"),
        ("/home", "b"),
        ("/", "a"),
    ] {
        let out = Command::new(BIN)
            .args(["cluster", "move", path, to, "--etcd", &etcd.url])
            .env("SEXTANT_SECRET_FILE", secret.join("secret"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "move {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let key = dir.path().join("alice.key");
    admin(&[
        "auth",
        "add",
        "alice",
        "--path",
        "/home/alice",
        "--out",
        key.to_str().unwrap(),
    ]);
    let run = |args: &[&str]| {
        common::cli_with_key(&a_addr, &key, 0, dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let ok = |args: &[&str]| {
        let o = run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let refused = |args: &[&str]| {
        let o = run(args);
        let said = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{args:?} was allowed");
        assert!(
            said.to_lowercase().contains("permission denied"),
            "{args:?}: {said}"
        );
    };
    // Inside: as on one server.
    ok(&["stat", "/home/alice/f"]);
    ok(&["touch", "/home/alice/g"]);
    ok(&["mkdir", "/home/alice/d/e"]);
    ok(&["mv", "/home/alice/g", "/home/alice/d/g"]);
    let listing = ok(&["ls", "/home/alice"]);
    assert_eq!(listing.split_whitespace().count(), 2, "{listing}");
    let found = ok(&["find", "/home/alice"]);
    assert!(found.contains("/home/alice/d/g"), "{found}");
    // Outside: EACCES.
    refused(&["stat", "/home/bob/secret"]);
    refused(&["stat", "/home/alice/../bob/secret"]);
    refused(&["ls", "/home"]);
    refused(&["mv", "/home/alice/f", "/home/bob/f"]);
    // A search of `/` sees the subtree only.
    let found = ok(&["find", "/"]);
    assert!(!found.contains("bob"), "{found}");
    assert!(found.contains("/home/alice/f"), "{found}");
    // An ancestor renamed on another server: the key follows the path,
    // where nothing is now.
    admin(&["mv", "/home", "/house"]);
    refused(&["stat", "/home/alice/f"]);
    refused(&["stat", "/house/alice/f"]);
}

/// A cluster of three servers (`table_dir_limit = 1`) and a key limited
/// to `/home/alice`, its objects on different servers on purpose:
/// `/home/bob` (with `secret`, also hard-linked as `/home/alice/hl`) on
/// a; `/`, `/home` and `/home/alice/d` on b (a path walk runs on b, the
/// root's holder); `/home/alice` (with `f`) on c.
struct ConfinedCluster {
    // (Dropped in this order: the servers, etcd, the directory.)
    _servers: Vec<KillOnDrop>,
    etcd: Etcd,
    dir: tempfile::TempDir,
    a_addr: String,
    /// Every server's address, by name.
    addrs: std::collections::HashMap<&'static str, String>,
    secret: PathBuf,
    key: PathBuf,
}

/// Where each object is placed (path, server) in [`ConfinedCluster`].
const CONFINED_PLACES: [(&str, &str); 7] = [
    ("/home/alice/d", "b"),
    ("/home/alice", "c"),
    ("/home/alice/f", "c"),
    ("/home/bob", "a"),
    ("/home/bob/secret", "a"),
    ("/home", "b"),
    ("/", "b"),
];

impl ConfinedCluster {
    fn start() -> Option<ConfinedCluster> {
        let (dir, etcd) = dir_and_etcd()?;
        let (a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, TINY_TABLES);
        let admin = |args: &[&str]| sextant_ok(&a_addr, &secret, args);
        // (`e` between `d` and `/home/bob`: a table splits at a
        // directory boundary, never between two directories made one
        // after the other.)
        for d in [
            "/home",
            "/home/alice",
            "/home/alice/d",
            "/home/alice/d/e",
            "/home/bob",
        ] {
            admin(&["mkdir", d]);
        }
        admin(&["touch", "/home/alice/f"]);
        admin(&["touch", "/home/bob/secret"]);
        admin(&["ln", "/home/bob/secret", "/home/alice/hl"]);
        let c = config.as_str();
        let (b, b_addr) = serve_with(dir.path(), &etcd.url, "b", &["--config", c]);
        let (s3, c_addr) = serve_with(dir.path(), &etcd.url, "c", &["--config", c]);
        let servers = vec![a, KillOnDrop(b), KillOnDrop(s3)];
        let addrs = [("a", a_addr.clone()), ("b", b_addr), ("c", c_addr)].into();
        wait_for("three servers", Duration::from_secs(60), || {
            tables_by_server(&status_on(&etcd.url, &secret)).len() == 3
        });
        let key = dir.path().join("alice.key");
        admin(&[
            "auth",
            "add",
            "alice",
            "--path",
            "/home/alice",
            "--out",
            key.to_str().unwrap(),
        ]);
        let cluster = ConfinedCluster {
            dir,
            etcd,
            a_addr,
            addrs,
            secret,
            key,
            _servers: servers,
        };
        cluster.place();
        Some(cluster)
    }

    /// Puts every table of [`CONFINED_PLACES`] where it belongs (again:
    /// a borrow or a balancing move may have taken one elsewhere), and
    /// checks that they are on different servers as planned.
    fn place(&self) {
        // (A table holding objects meant for two servers splits soon,
        // and a table lent to a borrower comes home soon: the first moves
        // may not hold.)
        let start = Instant::now();
        loop {
            let mut tables = Vec::new();
            for (path, to) in CONFINED_PLACES {
                let table = move_table(&self.etcd.url, &self.secret, path, to);
                tables.push((table, path, to));
            }
            let shared = tables
                .iter()
                .any(|(t, _, to)| tables.iter().any(|(u, _, tu)| t == u && to != tu));
            let elsewhere: Vec<_> = tables
                .iter()
                .filter(|(t, _, to)| owner_of(&self.etcd.url, &self.secret, *t).0 != *to)
                .collect();
            if !shared && elsewhere.is_empty() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the tables cannot be placed: {tables:?}, not where moved: {elsewhere:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn admin(&self, args: &[&str]) -> String {
        sextant_ok(&self.a_addr, &self.secret, args)
    }

    /// The SOID of `path`, as the admin sees it.
    fn soid(&self, path: &str) -> sextant_types::Soid {
        let out = self.admin(&["--json", "stat", path]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let hex = v["soid"].as_str().unwrap();
        sextant_types::Soid::from_u128(u128::from_str_radix(hex, 16).unwrap())
    }

    /// The CLI with the key (as uid 0: only the path limit can refuse).
    fn run(&self, args: &[&str]) -> std::process::Output {
        common::cli_with_key(&self.a_addr, &self.key, 0, self.dir.path())
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    fn refused(&self, args: &[&str]) {
        let o = self.run(args);
        let said = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{args:?} was allowed");
        assert!(
            said.to_lowercase().contains("permission denied"),
            "{args:?}: {said}"
        );
    }

    /// A client of the library with the key (raw requests by SOID),
    /// sending them to `server` first (it checks them before it finds
    /// that another server holds what they are routed by).
    fn client(&self, rt: &tokio::runtime::Runtime, server: &str) -> sextant_client::Client {
        use sextant_proto::keyauth::ClientKey;
        let text = std::fs::read_to_string(&self.key).unwrap();
        let key = ClientKey::parse_file(&text).unwrap();
        let options = sextant_client::Options {
            retry_for: Duration::from_secs(10),
            ..sextant_client::Options::default()
        };
        rt.block_on(sextant_client::Client::connect(
            &self.addrs[server],
            &key.credential(),
            options,
        ))
        .unwrap()
    }
}

fn is_eacces<T>(r: &Result<T, sextant_client::Error>) -> bool {
    matches!(
        r,
        Err(sextant_client::Error::Fs(sextant_types::FsError::Access))
    )
}

/// A path-limited key's checks keep other servers' directory records
/// across requests under leases (`server/src/dir_leases.rs`): an ancestor
/// of the key's subtree renamed on its holder must be seen by the very
/// next request checked on another server, though that server read the
/// ancestor's record a moment before. `/` and `/home` are b's, the key's
/// `/home/alice` c's; the key creates in `/home/alice` by its SOID through
/// c, so c resolves the key's path through b's directories; the admin
/// renames `/home` away on b; the next create must be refused (the key's
/// path leads nowhere now). Fails when b acknowledges the rename without
/// revoking c's lease.
#[test]
fn a_path_limited_keys_next_request_sees_an_ancestor_renamed_on_another_server() {
    let Some(w) = ConfinedCluster::start() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = sextant_types::Credentials::root();
    let alice = w.soid("/home/alice");
    let b_addr = w.addrs["b"].clone();
    w.place();
    let client = w.client(&rt, "c");
    // Warm: c reads b's records (and holds a lease on them).
    for k in 0..3 {
        let name = format!("warm{k}");
        rt.block_on(client.create(&root, alice, name.as_bytes(), 0o644, true))
            .unwrap();
    }
    sextant_ok(&b_addr, &w.secret, &["mv", "/home", "/house"]);
    let r = rt.block_on(client.create(&root, alice, b"after", 0o644, true));
    assert!(
        is_eacces(&r),
        "created after the subtree left the key's path: {r:?}"
    );
    assert!(
        w.admin(&["ls", "/house/alice"])
            .lines()
            .all(|l| l != "after"),
        "the refused create left a file"
    );
}

/// The subtree a path-limited key's path names is kept across requests
/// on a server that resolved it through other servers' directories
/// (`server/src/confine/across.rs`, per generation of kept records):
/// the key's directory renamed away and another made at its path, on the
/// servers that hold them, the very next request through c must follow
/// the path — the old directory refused, the new one allowed. `/` and
/// `/home` are b's, `/home/alice` c's. Fails when c keeps the subtree it
/// found before the rename.
#[test]
fn a_path_limited_keys_next_request_follows_its_path_to_a_new_directory() {
    let Some(w) = ConfinedCluster::start() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = sextant_types::Credentials::root();
    let alice = w.soid("/home/alice");
    let b_addr = w.addrs["b"].clone();
    w.place();
    let client = w.client(&rt, "c");
    // Warm: c finds the key's subtree through b's records, and keeps it.
    for k in 0..3 {
        let name = format!("warm{k}");
        rt.block_on(client.create(&root, alice, name.as_bytes(), 0o644, true))
            .unwrap();
    }
    sextant_ok(&b_addr, &w.secret, &["mv", "/home/alice", "/home/old"]);
    sextant_ok(&b_addr, &w.secret, &["mkdir", "/home/alice"]);
    // (The rename borrowed the old directory's table to b: back to c, so
    // that c — which kept the subtree — checks the next request itself.)
    wait_for(
        "the old directory's table on c",
        Duration::from_secs(20),
        || {
            let table = move_table(&w.etcd.url, &w.secret, "/home/old", "c");
            owner_of(&w.etcd.url, &w.secret, table).0 == "c"
        },
    );
    // (Several: a request may reach c before the table is served there,
    // and be checked by another server.)
    for k in 0..5 {
        let name = format!("after{k}");
        let r = rt.block_on(client.create(&root, alice, name.as_bytes(), 0o644, true));
        assert!(
            is_eacces(&r),
            "created in the key's old directory after it left the path: {r:?}"
        );
    }
    let new = w.soid("/home/alice");
    assert_ne!(new, alice);
    let on_b = w.client(&rt, "b");
    rt.block_on(on_b.create(&root, new, b"new", 0o644, true))
        .expect("a create in the directory now at the key's path");
}

/// Hard links of a path-limited key across servers: a file held by
/// another server than the new link's directory is placed by all its
/// links, read from its holder — a file inside links inside (`f` on c
/// into `d` on b; a FIFO on b into `/home/alice` on c), a file whose
/// primary link is outside but which has a link inside (`hl`, held on a)
/// is reached and linked by that link, and a file with no link inside,
/// named by its path or by its SOID, is refused.
#[test]
fn a_path_limited_key_links_files_held_on_other_servers() {
    let Some(w) = ConfinedCluster::start() else {
        return;
    };
    use sextant_types::{Credentials, FileType};
    // Inside, across servers: f (c) into d (b).
    w.ok(&["ln", "/home/alice/f", "/home/alice/d/f2"]);
    let st = w.ok(&["stat", "/home/alice/d/f2"]);
    assert!(st.contains("Links: 2"), "{st}");
    // A file whose primary link is outside, with one inside (hl, its
    // table on a): reached and linked by its link inside.
    w.place();
    w.ok(&["stat", "/home/alice/hl"]);
    w.ok(&["ln", "/home/alice/hl", "/home/alice/d/hl2"]);
    w.ok(&["stat", "/home/alice/d/hl2"]);

    // The same resolved by the server (a `Resolve` runs on b, the root's
    // holder; `hl`'s inode is on a): placed by its link inside.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let on_b = w.client(&rt, "b");
    let root = Credentials::root();
    w.place();
    let hl = rt.block_on(on_b.resolve(&root, b"/home/alice/hl", true));
    assert_eq!(hl.unwrap().soid, w.soid("/home/bob/secret"));
    let r = rt.block_on(on_b.resolve(&root, b"/home/bob/secret", true));
    assert!(is_eacces(&r), "resolved outside: {r:?}");

    // A file with no link inside, by path (the walk) and by SOID (the
    // link's own check, on the new directory's holder: the file is on
    // a): refused.
    w.place();
    w.admin(&["touch", "/home/bob/only"]);
    w.refused(&["ln", "/home/bob/only", "/home/alice/d/only"]);
    let (only, d, alice) = (
        w.soid("/home/bob/only"),
        w.soid("/home/alice/d"),
        w.soid("/home/alice"),
    );
    let on_c = w.client(&rt, "c");
    for (on, parent) in [(&on_b, d), (&on_c, alice)] {
        let r = rt.block_on(on.link(&root, only, parent, b"only"));
        assert!(is_eacces(&r), "linked in: {r:?}");
    }
    // Nor by a link of the whole secret file (its soid, outside only
    // once `hl` and `hl2` are gone).
    w.admin(&["rm", "/home/alice/hl", "/home/alice/d/hl2"]);
    let secret = w.soid("/home/bob/secret");
    let r = rt.block_on(on_b.link(&root, secret, d, b"s"));
    assert!(is_eacces(&r), "linked in: {r:?}");
    let listing = w.admin(&["ls", "/home/alice/d"]);
    let names: Vec<&str> = listing.split_whitespace().collect();
    assert_eq!(names, ["e", "f2"], "{listing}");

    // A FIFO (not a regular file) made in d (b), linked into
    // /home/alice (c); one in /home/bob is refused.
    w.place();
    let fifo = rt
        .block_on(on_b.mknod(&root, d, b"p", FileType::Fifo, 0o644, 0))
        .unwrap();
    assert_eq!(fifo.ftype, FileType::Fifo);
    w.ok(&["ln", "/home/alice/d/p", "/home/alice/p2"]);
    let st = w.ok(&["stat", "/home/alice/p2"]);
    assert!(st.contains("Links: 2"), "{st}");
    let bob = w.soid("/home/bob");
    let r = rt.block_on(on_b.mknod(&root, bob, b"p", FileType::Fifo, 0o644, 0));
    assert!(is_eacces(&r), "made in bob's: {r:?}");
}

/// Symlinks and renames of a path-limited key across servers: a symlink
/// inside pointing outside (absolute, or by `..`) is made and read, but
/// not followed; one pointing inside (to a file another server holds) is
/// followed; a directory cannot be renamed out of the subtree to a
/// directory another server holds.
#[test]
fn a_path_limited_key_follows_symlinks_and_renames_only_inside_across_servers() {
    let Some(w) = ConfinedCluster::start() else {
        return;
    };
    // Pointing outside: made and read (`stat` shows the target), not
    // followed.
    for (link, target) in [
        ("/home/alice/d/out", "/home/bob/secret"),
        ("/home/alice/d/rel", "../../bob/secret"),
        ("/home/alice/d/bobdir", "/home/bob"),
    ] {
        w.ok(&["ln", "-s", target, link]);
        let st = w.ok(&["stat", link]);
        assert!(st.contains(&format!("-> {target}")), "{st}");
        w.refused(&["stat", "-L", link]);
    }
    w.refused(&["stat", "/home/alice/d/bobdir/secret"]);
    w.refused(&["ls", "/home/alice/d/bobdir/"]);
    // Pointing inside: followed (d on b, f on c).
    for (link, target) in [
        ("/home/alice/d/in", "/home/alice/f"),
        ("/home/alice/d/rin", "../f"),
    ] {
        w.ok(&["ln", "-s", target, link]);
        let st = w.ok(&["stat", "-L", link]);
        assert!(st.contains("Type: file"), "{st}");
    }
    // A directory renamed out, across servers: d (b) from /home/alice
    // (c) to /home/bob (a); e from d (b) to /home/bob (a).
    // By path (the client cannot even name `/home/bob`) and by SOID (the
    // rename's own check: its new parent is outside, on a).
    w.place();
    w.refused(&["mv", "/home/alice/d", "/home/bob/d"]);
    w.refused(&["mv", "/home/alice/d/e", "/home/bob/e"]);
    w.refused(&["mv", "/home/alice/d/e", "/home/e"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = sextant_types::Credentials::root();
    let (alice, d, bob) = (
        w.soid("/home/alice"),
        w.soid("/home/alice/d"),
        w.soid("/home/bob"),
    );
    // (Sent to the old directory's holder: bob's is on a.)
    for (on, from, name) in [("c", alice, &b"d"[..]), ("b", d, b"e")] {
        w.place();
        let client = w.client(&rt, on);
        let flags = sextant_engine::RenameFlags::default();
        let r = rt.block_on(client.rename(&root, from, name, bob, name, flags));
        assert!(is_eacces(&r), "renamed out: {r:?}");
    }
    assert_eq!(w.admin(&["ls", "/home/bob"]).trim(), "secret");
    w.admin(&["stat", "/home/alice/d/e"]);
    // Inside, it moves (across servers too).
    w.ok(&["mv", "/home/alice/d/e", "/home/alice/e"]);
    w.admin(&["stat", "/home/alice/e"]);
}

/// Log-less servers a (holding the root) and b, `/d` made on a, and what
/// a's journal holds then (its files and lengths): what a power loss of
/// a's machine keeps ([`cut_journal`]).
struct LoglessPair {
    a: KillOnDrop,
    b: KillOnDrop,
    a_addr: String,
    b_addr: String,
    secret: PathBuf,
    journal: PathBuf,
    kept: Vec<(PathBuf, u64)>,
}

/// The servers' settings: a 10 s background sync (so the tail stays
/// unsynced for the test to cut), and a grace of 4 s counted from a dead
/// server's death (the lease is 2 s here), well past a client's hand-over
/// (1 s after its session breaks).
const LOGLESS_FLAGS: [&str; 6] = [
    "--durability",
    "logless",
    "--journal-sync",
    "background:10s",
    "--recovery-grace",
    "4s",
];

fn logless_pair(dir: &Path, etcd: &str) -> LoglessPair {
    logless_pair_with(dir, etcd, &LOGLESS_FLAGS)
}

fn logless_pair_with(dir: &Path, etcd: &str, flags: &[&str]) -> LoglessPair {
    let (a, a_addr) = serve_env(dir, etcd, "a", flags, &[]);
    let a = KillOnDrop(a);
    let secret = dir.join("a");
    wait_for("the root table assigned", Duration::from_secs(30), || {
        tables_by_server(&status_on(etcd, &secret))
            .iter()
            .any(|t| t.0 == "a" && t.1 > 0)
    });
    let (b, b_addr) = serve_env(dir, etcd, "b", flags, &[]);
    let b = KillOnDrop(b);
    wait_for("b a member", Duration::from_secs(30), || {
        status_on(etcd, &secret)["servers"]
            .as_array()
            .is_some_and(|s| s.len() == 2)
    });
    sextant_ok(&a_addr, &secret, &["mkdir", "/d"]);
    let journal = dir.join("store/members/a/journal");
    let kept = journal_lengths(&journal);
    LoglessPair {
        a,
        b,
        a_addr,
        b_addr,
        secret,
        journal,
        kept,
    }
}

/// Kills a, cuts its journal back, waits for b to hold every table and
/// returns `ls /d` through b, sorted.
fn after_power_loss_of_a(p: &mut LoglessPair, etcd: &str) -> Vec<String> {
    common::kill9(&mut p.a.0);
    cut_journal(&p.journal, &p.kept);
    wait_for("b took a's tables", Duration::from_secs(60), || {
        b_took_as_tables(etcd, &p.secret)
    });
    ls_d(&p.b_addr, &p.secret)
}

/// Creates `/d/<name>` for each of `names` through `client`.
fn create_in_d(rt: &tokio::runtime::Runtime, client: &sextant_client::Client, names: &[String]) {
    let root = sextant_types::Credentials::root();
    rt.block_on(async {
        let d = client.resolve(&root, b"/d", true).await.unwrap();
        for n in names {
            client
                .create(&root, d.soid, n.as_bytes(), 0o644, true)
                .await
                .unwrap();
        }
    });
}

/// Creates `/d/f0` … `/d/f19` through `client`; their names, sorted.
fn twenty_files_in_d(rt: &tokio::runtime::Runtime, client: &sextant_client::Client) -> Vec<String> {
    let mut names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    names.sort_unstable();
    create_in_d(rt, client, &names);
    assert!(
        client.backup_stats().entries >= 20,
        "the client holds the redo entries: {:?}",
        client.backup_stats()
    );
    names
}

/// Log-less durability on a cluster (issue 21, item 6): server a's machine
/// loses power — SIGKILL, then a's journal cut back to what it held before
/// the last operations (a power loss keeps only what was synced; a syncs
/// in the background, here every 10 s). Those operations were
/// acknowledged to a client whose home is b; the client hands their
/// backups to b once a stays unreachable, b completes a's journal with them
/// once a's lease is gone, and only then takes a's tables: nothing the
/// client was told is done is lost.
#[test]
fn a_log_less_servers_power_loss_loses_nothing_its_client_holds() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let mut pair = logless_pair(dir.path(), &etcd.url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &pair.b_addr, &pair.secret);
    let want = twenty_files_in_d(&rt, &client);
    assert_eq!(after_power_loss_of_a(&mut pair, &etcd.url), want);
    assert_eq!(
        client.backup_stats().entries,
        0,
        "handed over, then dropped"
    );
    // The shared store keeps no backups once a's journal is completed.
    let kept = dir.path().join("store/members/a/backups");
    let left: Vec<_> = walk_files(&kept);
    assert!(left.is_empty(), "kept backups left behind: {left:?}");
    let _ = (&pair.a_addr, &pair.b);
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// A log-less server killed (SIGKILL, its machine still up): the kernel
/// kept its whole journal, so the completion finds every backup already in
/// it and adds nothing; the files are there once, after the failover.
#[test]
fn a_killed_log_less_server_loses_nothing_and_adds_nothing_twice() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let mut pair = logless_pair(dir.path(), &etcd.url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &pair.b_addr, &pair.secret);
    let want = twenty_files_in_d(&rt, &client);
    // Nothing is cut: what a process crash leaves.
    pair.kept = journal_lengths(&pair.journal);
    assert_eq!(after_power_loss_of_a(&mut pair, &etcd.url), want);
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// A machine that dies closes no connection: server a stops (SIGSTOP, its
/// sockets open, nothing answered) and its journal is cut back. The
/// client, holding a's backups and hearing nothing from a for a few
/// seconds, asks a, gets no answer, and gives the backups to b — within
/// the grace b's coordinator waits before completing a's journal (8 s
/// here; the defaults are a 6 s lease and 5 s of grace).
#[test]
fn a_silent_log_less_server_is_noticed_and_its_backups_go_elsewhere() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let mut flags = LOGLESS_FLAGS.to_vec();
    flags.truncate(4);
    flags.extend(["--recovery-grace", "8s"]);
    let mut pair = logless_pair_with(dir.path(), &etcd.url, &flags);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &pair.b_addr, &pair.secret);
    let want = twenty_files_in_d(&rt, &client);
    signal(&pair.a.0, "-STOP");
    cut_journal(&pair.journal, &pair.kept);
    wait_for("b took a's tables", Duration::from_secs(60), || {
        b_took_as_tables(&etcd.url, &pair.secret)
    });
    assert_eq!(ls_d(&pair.b_addr, &pair.secret), want);
    common::kill9(&mut pair.a.0);
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// A log-less server that was only paused (a zombie: SIGSTOP past its
/// lease, its journal whole) while the others completed its journal and
/// took its tables, then woken: it joins again with a new lease, is given
/// a table back and acknowledges operations again. Those must survive
/// its next death like any other — a failover must not cut its journal
/// at the first completion's end.
///
/// A defect found 2026-12-06: the woken member went on with the same
/// run, whose completion (`logless.completion-<run>`) every later reader
/// of its journal took as its end, so the ten files it acknowledged after
/// it was let back in were lost at its next death (this test failed at
/// its last assertion). Fixed: the member retires that completion before
/// it takes a table again (ARCHITECTURE, "A member let back in after its
/// journal was completed").
#[test]
fn a_woken_log_less_server_keeps_what_it_acknowledged_after_its_journal_was_completed() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let mut pair = logless_pair(dir.path(), &etcd.url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &pair.b_addr, &pair.secret);
    let mut want = twenty_files_in_d(&rt, &client);
    signal(&pair.a.0, "-STOP");
    wait_for("b took a's tables", Duration::from_secs(60), || {
        b_took_as_tables(&etcd.url, &pair.secret)
    });
    assert_eq!(ls_d(&pair.b_addr, &pair.secret), want);
    signal(&pair.a.0, "-CONT");
    wait_for("a is a member again", Duration::from_secs(30), || {
        is_member(&etcd.url, &pair.secret, "a")
    });
    let moved = Command::new(BIN)
        .args(["cluster", "move", "/d", "a", "--etcd", &etcd.url])
        .env("SEXTANT_SECRET_FILE", pair.secret.join("secret"))
        .output()
        .unwrap();
    assert!(moved.status.success(), "{moved:?}");
    wait_for("a holds /d's table again", Duration::from_secs(30), || {
        tables_by_server(&status_on(&etcd.url, &pair.secret))
            .iter()
            .any(|t| t.0 == "a" && t.1 > 0)
    });
    let later: Vec<String> = (0..10).map(|i| format!("g{i}")).collect();
    create_in_d(&rt, &client, &later);
    want.extend(later);
    want.sort_unstable();
    assert_eq!(ls_d(&pair.a_addr, &pair.secret), want, "acknowledged by a");
    // a's process dies; its machine (and so its whole journal) stays.
    common::kill9(&mut pair.a.0);
    wait_for("b took a's tables again", Duration::from_secs(60), || {
        b_took_as_tables(&etcd.url, &pair.secret)
    });
    assert_eq!(ls_d(&pair.b_addr, &pair.secret), want);
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// As on one server, an operation survives its own client's death through
/// the other clients its server's later replies gave it to (the Active
/// Request List, K = 4): client 1 makes `/d/f0` on a and dies with its
/// backups; client 2's next three operations on a carried f0's entry;
/// after a's power loss all four files are there.
#[test]
fn a_log_less_operation_outlives_its_dead_client_through_another_clients_backups() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let mut pair = logless_pair(dir.path(), &etcd.url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let first = common::library_client(&rt, &pair.b_addr, &pair.secret);
    let second = common::library_client(&rt, &pair.b_addr, &pair.secret);
    create_in_d(&rt, &first, &["f0".to_string()]);
    // The first client dies: what it held is gone with it.
    drop(first);
    let later: Vec<String> = (0..3).map(|i| format!("g{i}")).collect();
    create_in_d(&rt, &second, &later);
    assert!(
        second.backup_stats().entries >= 4,
        "{:?}",
        second.backup_stats()
    );
    assert_eq!(
        after_power_loss_of_a(&mut pair, &etcd.url),
        ["f0", "g0", "g1", "g2"]
    );
    drop(second);
    drop(rt);
    drop(etcd.child);
}

/// Log-less on a cluster, the restart path (issue 21, item 6): the only
/// server of a cluster loses power — SIGKILL, its journal cut back as in
/// [`a_log_less_servers_power_loss_loses_nothing_its_client_holds`] — and
/// comes back on the same address. Nobody else can complete its journal:
/// it collects its client's backups itself (the client hands them back
/// when it reconnects), completes its journal with them, and serves
/// every file the client was told was made.
#[test]
fn a_restarted_log_less_server_completes_its_journal_from_its_clients() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let listen = format!("127.0.0.1:{}", free_ports(1));
    let store = dir.path().join("store");
    let start = || {
        let mut args = LOGLESS_FLAGS.to_vec();
        args.extend(["--etcd", &etcd.url, "--name", "a", "--cluster-store"]);
        args.push(store.to_str().unwrap());
        let (child, addr) = common::spawn_server_env(
            &dir.path().join("a"),
            &listen,
            &args,
            Stdio::inherit(),
            &[("SEXTANT_LEASE_TTL", "2s")],
        );
        (KillOnDrop(child), addr)
    };
    let (mut a, a_addr) = start();
    let secret = dir.path().join("a");
    wait_for("the root table assigned", Duration::from_secs(30), || {
        tables_by_server(&status_on(&etcd.url, &secret))
            .iter()
            .any(|t| t.0 == "a" && t.1 > 0)
    });
    sextant_ok(&a_addr, &secret, &["mkdir", "/d"]);
    let journal = store.join("members/a/journal");
    let kept = journal_lengths(&journal);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &a_addr, &secret);
    let want = twenty_files_in_d(&rt, &client);
    common::kill9(&mut a.0);
    cut_journal(&journal, &kept);
    let (_a, _) = start();
    assert_eq!(ls_d(&a_addr, &secret), want);
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// `sextant --json cluster status` of the cluster under `prefix` on
/// `etcd`, with the secret in `secret_dir`.
fn status_under(etcd: &str, prefix: &str, secret_dir: &Path) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["--json", "cluster", "status", "--etcd", etcd])
        .args(["--etcd-prefix", prefix])
        .env("SEXTANT_SECRET_FILE", secret_dir.join("secret"))
        .env_remove("SEXTANT_ETCD_PREFIX")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster status under {prefix}: {}",
        said(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The members' names in a status, sorted.
fn member_names(s: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = tables_by_server(s).into_iter().map(|t| t.0).collect();
    names.sort();
    names
}

/// Two clusters on one etcd (issues 20 and 22), under the prefixes /a/
/// and /b/ (`--etcd-prefix`, one given without its last '/'): each serves
/// its own namespace — a directory made in one is absent from the other —
/// `cluster status` under each prefix lists that cluster's servers only,
/// every key each writes is under its prefix (none under the default
/// /sextant/), and a client key made with `sextant auth --etcd --prefix
/// /b/` works through cluster b's servers and is refused by cluster a's.
/// Without the servers honouring the prefix, all three servers join one
/// cluster under /sextant/ and see each other's files.
#[test]
fn two_clusters_share_one_etcd_under_their_prefixes() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Each cluster its own directory: its own table store and secret.
    let (ca, cb) = (dir.path().join("ca"), dir.path().join("cb"));
    let (a1, a1_addr) = serve_with(&ca, &etcd.url, "a1", &["--etcd-prefix", "/a"]);
    let _a1 = KillOnDrop(a1);
    let (b1, b1_addr) = serve_with(&cb, &etcd.url, "b1", &["--etcd-prefix", "/b/"]);
    let _b1 = KillOnDrop(b1);
    let (b2, b2_addr) = serve_with(&cb, &etcd.url, "b2", &["--etcd-prefix", "/b/"]);
    let _b2 = KillOnDrop(b2);
    let (a_secret, b_secret) = (ca.join("a1"), cb.join("b1"));
    for (prefix, secret) in [("/a/", &a_secret), ("/b/", &b_secret)] {
        wait_for(
            &format!("the root table of {prefix} assigned"),
            Duration::from_secs(30),
            || {
                tables_by_server(&status_under(&etcd.url, prefix, secret))
                    .iter()
                    .any(|t| t.1 > 0)
            },
        );
    }
    assert_eq!(
        member_names(&status_under(&etcd.url, "/a/", &a_secret)),
        ["a1"]
    );
    assert_eq!(
        member_names(&status_under(&etcd.url, "/b", &b_secret)),
        ["b1", "b2"]
    );
    let s = status_under(&etcd.url, "/b", &b_secret);
    assert_eq!(s["etcd_prefix"], "/b/", "{s}");

    // One namespace per cluster.
    sextant_ok(&a1_addr, &a_secret, &["mkdir", "/only-in-a"]);
    sextant_ok(&b1_addr, &b_secret, &["mkdir", "/only-in-b"]);
    let ls_a = sextant_ok(&a1_addr, &a_secret, &["ls", "/"]);
    assert!(ls_a.contains("only-in-a"), "{ls_a}");
    assert!(
        !ls_a.contains("only-in-b"),
        "cluster a sees b's directory: {ls_a}"
    );
    for addr in [&b1_addr, &b2_addr] {
        let ls_b = sextant_ok(addr, &b_secret, &["ls", "/"]);
        assert!(ls_b.contains("only-in-b"), "{ls_b}");
        assert!(
            !ls_b.contains("only-in-a"),
            "cluster b sees a's directory: {ls_b}"
        );
    }

    // Every key under its cluster's prefix.
    let (keys_a, keys_b) = (etcd_keys(&etcd.url, "/a/"), etcd_keys(&etcd.url, "/b/"));
    assert!(keys_a.iter().any(|k| k.ends_with("/a1")), "{keys_a:?}");
    assert!(
        !keys_a
            .iter()
            .any(|k| k.contains("/b1") || k.contains("/b2")),
        "{keys_a:?}"
    );
    assert!(keys_b.iter().any(|k| k.ends_with("/b2")), "{keys_b:?}");
    assert!(!keys_b.iter().any(|k| k.contains("/a1")), "{keys_b:?}");
    let all = etcd_keys(&etcd.url, "/");
    assert!(
        all.iter()
            .all(|k| k.starts_with("/a/") || k.starts_with("/b/")),
        "keys outside the two prefixes: {all:?}"
    );

    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED the client-key part: needs setpriv");
        return;
    }
    // A key made in cluster b's book in etcd, with no server.
    sextant_ok(&b1_addr, &b_secret, &["mkdir", "/pub"]);
    sextant_ok(&b1_addr, &b_secret, &["chmod", "777", "/pub"]);
    sextant_ok(&a1_addr, &a_secret, &["mkdir", "/pub"]);
    sextant_ok(&a1_addr, &a_secret, &["chmod", "777", "/pub"]);
    let key = dir.path().join("nodeb.key");
    let made = auth_on_etcd_ok(
        &etcd.url,
        &[
            "--prefix",
            "/b/",
            "add",
            "nodeb",
            "--uids",
            "1000",
            "--out",
            key.to_str().unwrap(),
        ],
    );
    assert!(made.contains("wrote the key nodeb"), "{made}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(auth_on_etcd_ok(&etcd.url, &["--prefix", "/b", "ls"]).contains("nodeb"));
    let ls_a = auth_on_etcd_ok(&etcd.url, &["--prefix", "/a/", "ls"]);
    assert!(!ls_a.contains("nodeb"), "a's book holds b's key: {ls_a}");
    wait_for("the key works through b2", Duration::from_secs(10), || {
        as_key(&b2_addr, &key, 1000, &["touch", "/pub/from-nodeb"])
            .status
            .success()
    });
    let o = as_key(&b1_addr, &key, 1000, &["ls", "/pub"]);
    assert!(said(&o).contains("from-nodeb"), "{}", said(&o));
    let o = as_key(&a1_addr, &key, 1000, &["touch", "/pub/from-nodeb"]);
    assert!(!o.status.success(), "cluster a took b's key");
    assert!(said(&o).contains("authentication failed"), "{}", said(&o));
    let ls = sextant_ok(&a1_addr, &a_secret, &["ls", "/pub"]);
    assert!(!ls.contains("from-nodeb"), "{ls}");
}

/// A prefix a server cannot use is refused before it joins, naming the
/// setting; the same prefix given to `cluster status` is refused too.
#[test]
fn a_bad_etcd_prefix_is_refused_with_the_setting_named() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    for bad in ["a/", ""] {
        let out = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("s"))
            .args(["--etcd", &etcd.url, "--name", "s", "--cluster-store"])
            .arg(dir.path().join("store"))
            .args(["--etcd-prefix", bad])
            .env("SEXTANT_METRICS", "off")
            .output()
            .unwrap();
        assert!(!out.status.success(), "serve took the prefix {bad:?}");
        let e = said(&out);
        assert!(
            e.contains("etcd_prefix") && e.contains("etcd key prefix"),
            "{bad:?}: {e}"
        );
        let out = Command::new(BIN)
            .args([
                "cluster",
                "status",
                "--etcd",
                &etcd.url,
                "--etcd-prefix",
                bad,
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "status took the prefix {bad:?}");
        assert!(said(&out).contains("--etcd-prefix"), "{}", said(&out));
    }
    for under in ["/", "a/"] {
        let keys = etcd_keys(&etcd.url, under);
        assert!(keys.is_empty(), "a refused server wrote to etcd: {keys:?}");
    }
}

/// A `sextant cluster up`, stopped as Ctrl-C would (its servers with it)
/// however the test ends.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sextant cluster up --etcd-prefix` hands the prefix to its servers and
/// records it for the other commands: two `up`s on one etcd under /up1/
/// and /up2/ each run a server named s1 (a name is unique only within a
/// cluster), `cluster status --data` of each lists its own s1 only, and
/// each cluster's keys are under its prefix.
#[test]
fn cluster_up_runs_its_servers_under_its_etcd_prefix() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let up = |data: &Path, prefix: &str| -> (Up, String) {
        let port = free_ports(1);
        let mut child = Command::new(BIN)
            .args(["--json", "--data"])
            .arg(data)
            .args([
                "cluster",
                "up",
                "--servers",
                "1",
                "--journal-sync",
                "nosync",
            ])
            .args(["--base-port", &port.to_string(), "--lease-ttl", "2s"])
            .args(["--etcd", &etcd.url, "--etcd-prefix", prefix])
            .env_remove("SEXTANT_ETCD_PREFIX")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a line from cluster up").unwrap();
        std::thread::spawn(move || for _ in lines {});
        let started: serde_json::Value = serde_json::from_str(&first).expect(&first);
        (
            Up(child),
            started["etcd_prefix"].as_str().unwrap().to_string(),
        )
    };
    let (d1, d2) = (dir.path().join("c1"), dir.path().join("c2"));
    let (_up1, p1) = up(&d1, "/up1");
    let (_up2, p2) = up(&d2, "/up2/");
    assert_eq!((p1.as_str(), p2.as_str()), ("/up1/", "/up2/"));
    for (data, prefix) in [(&d1, "/up1/"), (&d2, "/up2/")] {
        wait_for("the root table assigned", Duration::from_secs(30), || {
            tables_by_server(&status(data)).iter().any(|t| t.1 > 0)
        });
        let st = status(data);
        assert_eq!(st["etcd_prefix"], prefix, "{st}");
        assert_eq!(member_names(&st), ["s1"], "{st}");
        let keys = etcd_keys(&etcd.url, prefix);
        assert!(keys.iter().any(|k| k.ends_with("/s1")), "{keys:?}");
    }
    let all = etcd_keys(&etcd.url, "/");
    assert!(
        all.iter()
            .all(|k| k.starts_with("/up1/") || k.starts_with("/up2/")),
        "keys outside the two prefixes: {all:?}"
    );
}

/// What one creating task of
/// [`a_log_less_power_loss_under_concurrent_creates_loses_no_acknowledged_file`]
/// was told: the names whose create was acknowledged, and those whose
/// create returned an error (with it).
#[derive(Default)]
struct Creates {
    acked: Vec<String>,
    failed: Vec<(String, String)>,
}

/// Log-less on a cluster, many operations in flight across a power loss
/// (issue 21, item 6): eight clients (their home b), each creating files
/// in `/d` (on a) one after another, as fast as a answers; a's machine
/// loses power while they run (SIGKILL, its journal cut back to what it
/// held before the load) and the clients go on through the failover —
/// their in-flight creates retried on b once it holds a's tables. Then
/// every file whose create was acknowledged is in `/d` exactly once,
/// every file in `/d` was asked for, and every entry names a whole file
/// (nothing half-done); no create returned an error (an in-flight one
/// that a had run and a backup brought back is answered on b, not run
/// again and refused with EEXIST). The cut keeps what a's journal held
/// once it had synced `mkdir /d`, older segments whole, and every record
/// up to the watermark a last told its clients (a checkpoint or a new
/// segment syncs too): nothing it throws away was synced (a power loss
/// keeps what was), and the load runs well within a's 10 s sync.
#[test]
fn a_log_less_power_loss_under_concurrent_creates_loses_no_acknowledged_file() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let mut pair = logless_pair(dir.path(), &etcd.url);
    // a's journal syncs 10 s after the first record written since its last
    // sync: once `mkdir /d` is synced, the load's first create starts the
    // next 10 s, and the cut must come before they end.
    std::thread::sleep(Duration::from_secs(11));
    pair.kept = journal_lengths(&pair.journal);
    let rt = tokio::runtime::Runtime::new().unwrap();
    const TASKS: usize = 8;
    let clients: Vec<sextant_client::Client> = (0..TASKS)
        .map(|_| common::library_client(&rt, &pair.b_addr, &pair.secret))
        .collect();
    let root = sextant_types::Credentials::root();
    let d = rt
        .block_on(clients[0].resolve(&root, b"/d", true))
        .unwrap()
        .soid;
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let load = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(t, client)| {
            let (client, stop, acked) = (client.clone(), Arc::clone(&stop), Arc::clone(&acked));
            rt.spawn(async move {
                let root = sextant_types::Credentials::root();
                let mut out = Creates::default();
                for n in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let name = format!("t{t}-{n}");
                    match client.create(&root, d, name.as_bytes(), 0o644, true).await {
                        Ok(_) => {
                            out.acked.push(name);
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => out.failed.push((name, e.to_string())),
                    }
                }
                out
            })
        })
        .collect();
    wait_for("creates acknowledged", Duration::from_secs(30), || {
        acked.load(Ordering::Relaxed) >= 400
    });
    let held: usize = clients.iter().map(|c| c.backup_stats().entries).sum();
    let killed_at = acked.load(Ordering::Relaxed);
    common::kill9(&mut pair.a.0);
    // What a told the clients was synced (a checkpoint or a new segment
    // syncs the journal too): the cut keeps it.
    let synced = clients
        .iter()
        .filter_map(|c| c.peer_backup_stats(&pair.a_addr))
        .map(|s| s.written_back)
        .max()
        .unwrap_or(0);
    cut_journal_above(&pair.journal, &pair.kept, synced);
    let loaded_for = load.elapsed();
    assert!(
        loaded_for < Duration::from_secs(8),
        "the load ran {loaded_for:?}: a may have synced part of it, which the cut would drop"
    );
    let failover = Instant::now();
    wait_for("b took a's tables", Duration::from_secs(60), || {
        b_took_as_tables(&etcd.url, &pair.secret)
    });
    let failed_over_after = failover.elapsed();
    // The clients go on, now on b.
    let at_failover = acked.load(Ordering::Relaxed);
    wait_for("creates acknowledged on b", Duration::from_secs(30), || {
        acked.load(Ordering::Relaxed) >= at_failover + 100
    });
    stop.store(true, Ordering::Relaxed);
    let outcomes: Vec<Creates> = tasks.into_iter().map(|t| rt.block_on(t).unwrap()).collect();
    let listed = ls_d(&pair.b_addr, &pair.secret);
    let mut unique = listed.clone();
    unique.dedup();
    assert_eq!(unique.len(), listed.len(), "a name listed twice in /d");
    let listed: std::collections::BTreeSet<String> = unique.into_iter().collect();
    let mut asked = std::collections::BTreeSet::new();
    let mut lost = Vec::new();
    let mut failed = Vec::new();
    let mut total_acked = 0;
    for o in &outcomes {
        total_acked += o.acked.len();
        for name in &o.acked {
            asked.insert(name.clone());
            if !listed.contains(name) {
                lost.push(name.clone());
            }
        }
        for (name, e) in &o.failed {
            asked.insert(name.clone());
            failed.push(format!("{name}: {e}"));
        }
    }
    let unasked: Vec<&String> = listed.difference(&asked).collect();
    eprintln!(
        "{TASKS} clients: {total_acked} creates acknowledged ({killed_at} in {loaded_for:?} \
         before a's power loss, the clients holding {held} backups then, a's journal \
         synced through LSN {synced}), {} failed, \
         {} files in /d; b held every table {failed_over_after:?} after the kill",
        failed.len(),
        listed.len()
    );
    let some = |v: &[String]| v.iter().take(10).cloned().collect::<Vec<_>>().join(" ");
    assert!(
        lost.is_empty(),
        "{} acknowledged, then lost: {} …",
        lost.len(),
        some(&lost)
    );
    assert!(unasked.is_empty(), "in /d, never asked for: {unasked:?}");
    assert!(
        failed.is_empty(),
        "{} creates failed: {} …",
        failed.len(),
        some(&failed)
    );
    // Nothing half-done: every entry names a regular file, found by name.
    let client = common::library_client(&rt, &pair.b_addr, &pair.secret);
    rt.block_on(async {
        for name in &listed {
            let attr = client.lookup(&root, d, name.as_bytes()).await;
            assert!(
                attr.as_ref()
                    .is_ok_and(|a| a.ftype == sextant_types::FileType::Regular
                        && a.nlink == 1
                        && a.parent == d),
                "{name}: {attr:?}"
            );
        }
    });
    drop(client);
    drop(clients);
    drop(rt);
    drop(etcd.child);
}

/// Log-less on a cluster, a clean leave in the middle of a cross-server
/// rename (issue 21, item 6): log-less a (holding /p) and b (holding /q);
/// a client whose home is the server that stays has files made in /p and
/// /q (acknowledged, their backups held by it); `mv /p/f0 /q/moved` is
/// sent to a, which borrows /q's table from b and stops right there (the
/// test-only `stop-at:borrow-granted`: the table lent, the rename not yet
/// run). Then `leaver` is told to leave (SIGTERM) and a carries on: the
/// borrower leaving with the rename in hand, or the lender leaving while
/// its table is away on a. The leave ends cleanly; the other server
/// serves every table; the rename happened exactly once (all of it: f0
/// gone from /p and `moved` in /q, no file doubled or lost); every file
/// the client was told was made is there; and the leaver's run needed no
/// completion from its clients' backups (its journal was whole: no
/// `logless.completion-*` was written for it).
fn a_log_less_server_leaving_cleanly_mid_borrow(leaver: &str) {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let (mut a, mut b, a_addr, b_addr, secret) = pqrs_on_two_servers_with(
        dir.path(),
        &etcd.url,
        &[("SEXTANT_FAULT", "stop-at:borrow-granted")],
        &LOGLESS_FLAGS,
    );
    p_on_a_q_on_b(&etcd.url, &secret);
    let (stays, stays_addr) = match leaver {
        "a" => ("b", b_addr.clone()),
        _ => ("a", a_addr.clone()),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &stays_addr, &secret);
    let root = sextant_types::Credentials::root();
    let acked: Vec<String> = ["p", "q"]
        .iter()
        .flat_map(|d| (0..4).map(move |i| format!("/{d}/acked{i}")))
        .collect();
    rt.block_on(async {
        for path in &acked {
            let (parent, name) = path.rsplit_once('/').unwrap();
            let dir = client
                .resolve(&root, parent.as_bytes(), true)
                .await
                .unwrap();
            client
                .create(&root, dir.soid, name.as_bytes(), 0o644, true)
                .await
                .unwrap();
        }
    });
    assert!(
        client.backup_stats().entries > 0,
        "the client holds log-less backups: {:?}",
        client.backup_stats()
    );
    let mv = sextant_child(&a_addr, &secret, &["mv", "/p/f0", "/q/moved"]);
    let stat = format!("/proc/{}/stat", a.0.id());
    wait_for(
        "a stopped with /q's table borrowed",
        Duration::from_secs(30),
        || stopped(&stat),
    );
    // Within a's lease (2 s): the leave starts with the rename in hand.
    let leaving = if leaver == "a" { &mut a } else { &mut b };
    signal(&leaving.0, "-TERM");
    std::thread::sleep(Duration::from_millis(200));
    signal(&a.0, "-CONT");
    let leaving = if leaver == "a" { &mut a } else { &mut b };
    left_cleanly(leaving, leaver, "mid-rename");
    wait_for(
        &format!("{stays} serves every table"),
        Duration::from_secs(40),
        || only_one_serves(&etcd.url, &secret, stays),
    );
    let mv = mv.wait_with_output().unwrap();
    assert!(
        mv.status.success(),
        "{leaver} left: mv: {}",
        String::from_utf8_lossy(&mv.stderr)
    );
    let what = format!("log-less {leaver} left mid-rename");
    let (p, q) =
        the_borrowed_rename_happened_once(&what, &stays_addr, &secret, &etcd.url, 16 + acked.len());
    for path in &acked {
        let (parent, name) = path.rsplit_once('/').unwrap();
        let listing = if parent == "/p" { &p } else { &q };
        assert!(
            listing.split_whitespace().any(|n| n == name),
            "{what}: acknowledged {path} lost: {listing:?}"
        );
    }
    let completions: Vec<PathBuf> = walk_files(&dir.path().join("store/members"))
        .into_iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("logless.completion"))
        })
        .collect();
    assert!(
        completions.is_empty(),
        "{what}: a clean leave needs no completion: {completions:?}"
    );
    sextant_ok(&stays_addr, &secret, &["mv", "/q/f1", "/p/after"]);
    sextant_ok(&stays_addr, &secret, &["mkdir", "/e"]);
    drop(client);
    drop(rt);
    drop(etcd.child);
}

#[test]
fn a_log_less_borrower_leaving_cleanly_mid_rename_loses_nothing() {
    a_log_less_server_leaving_cleanly_mid_borrow("a");
}

#[test]
fn a_log_less_lender_leaving_cleanly_mid_rename_loses_nothing() {
    a_log_less_server_leaving_cleanly_mid_borrow("b");
}

/// The socket-door tests' layout: `/` on server a, `/other` (a directory
/// with a table of its own) on b, so that a local user on a's socket
/// reaches a table b holds.
struct RootOnAOtherOnB {
    root_table: u64,
    other_table: u64,
    /// `/other`'s SOID, as `sextant stat` prints it.
    other: String,
}

impl RootOnAOtherOnB {
    /// Moves the two tables there, waits until both are served, and reads
    /// `/other`'s SOID.
    fn place(etcd_url: &str, secret: &Path, a_addr: &str) -> RootOnAOtherOnB {
        let root_table = move_table(etcd_url, secret, "/", "a");
        let other_table = move_table(etcd_url, secret, "/other", "b");
        assert_ne!(root_table, other_table, "/other has a table of its own");
        let mut placed = RootOnAOtherOnB {
            root_table,
            other_table,
            other: String::new(),
        };
        wait_for("/ on a, /other on b", Duration::from_secs(30), || {
            placed.still_placed(etcd_url, secret)
        });
        // Both served (the owners have added them), read with the secret.
        let mut stat = String::new();
        wait_for("/other served", Duration::from_secs(30), || {
            let o = sextant(a_addr, secret, &["stat", "/other"]);
            stat = String::from_utf8_lossy(&o.stdout).into_owned();
            o.status.success()
        });
        placed.other = stat
            .lines()
            .find_map(|l| l.trim().strip_prefix("SOID: "))
            .unwrap_or_else(|| panic!("no SOID in {stat}"))
            .to_string();
        placed
    }

    /// Whether both tables are where [`RootOnAOtherOnB::place`] put them,
    /// neither moving (a test whose tables moved proves nothing).
    fn still_placed(&self, etcd_url: &str, secret: &Path) -> bool {
        let s = status_on(etcd_url, secret);
        let on = |table, server| {
            s["tables"].as_array().unwrap().iter().any(|t| {
                t["table"].as_u64() == Some(table)
                    && t["owner"].as_str() == Some(server)
                    && t["moving_to"].is_null()
            })
        };
        on(self.root_table, "a") && on(self.other_table, "b")
    }
}

/// The SOID (hex, as `sextant stat` prints it) a parent test handed its
/// child process in the environment variable `var`.
fn soid_from_env(var: &str) -> sextant_types::Soid {
    let hex = std::env::var(var).unwrap_or_else(|e| panic!("{var}: {e}"));
    let n = u128::from_str_radix(&hex, 16).unwrap_or_else(|e| panic!("{var}={hex}: {e}"));
    sextant_types::Soid::from_be_bytes(n.to_be_bytes())
}

/// Issue 21 item 4, "totals across servers stay exact": root's totals of
/// the whole namespace (`stats /`, and `--by user`) asked again and again
/// through a and b while a third server c joins them and the balancer
/// moves tables onto it, and then through the other two while the
/// coordinator is killed (SIGKILL) holding tables, until they failed over:
/// every answer is the truth or an error, never other totals. (Before:
/// while the killed server's tables had no live owner the route map had
/// a gap there, which the gathering server left out — `stats /` answered
/// low totals, exit status 0. Timing-dependent: this test did not catch
/// it in 7 runs here; scripts/totals-after-join.sh LEAVE=crash, whose
/// etcd syncs to disk, did in 4 of 6 crashes. The deterministic test is
/// the server's `gather::tests`.)
#[test]
fn root_totals_stay_exact_across_a_join_with_moves_and_a_crash() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    // Small tables: c gets several, whose failover takes a few of the
    // coordinator's steps (the longer the gap of the map).
    const LIMITS: &str = "table_dir_limit = 2\ntable_inode_limit = 12\n";
    let (a, a_addr, secret, config) = first_server(dir.path(), &etcd.url, LIMITS);
    let flags = ["--config", config.as_str(), "--journal-sync", "background"];
    // 24 directories of 10 files of known sizes, half of them uid 1001's.
    let src = dir.path().join("src");
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut theirs = Vec::new();
    for d in 0..24 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..10 {
            let size = (d * 131 + f * 17) % 5000;
            let file = std::fs::File::create(src.join(format!("d{d}/f{f}"))).unwrap();
            file.set_len(size).unwrap();
            (files, bytes) = (files + 1, bytes + size);
            if (d + f) % 2 == 0 {
                theirs.push((format!("/t/d{d}/f{f}"), size));
            }
        }
    }
    sextant_ok(&a_addr, &secret, &["import", src.to_str().unwrap(), "/t"]);
    let mut chown = vec!["chown", "1001"];
    chown.extend(theirs.iter().map(|(p, _)| p.as_str()));
    sextant_ok(&a_addr, &secret, &chown);
    let (b, b_addr) = serve_with(dir.path(), &etcd.url, "b", &flags);
    let _b = KillOnDrop(b);
    wait_tables_on_both(&etcd.url, &secret);
    // The truth: `/`, `/t`, 24 directories and the files; uid 1001's files.
    let totals = |addr: &str, by_user: bool| -> Option<serde_json::Value> {
        let mut args = vec!["--json", "stats"];
        if by_user {
            args.extend(["--by", "user"]);
        }
        args.push("/");
        let out = sextant(addr, &secret, &args);
        // An error is no wrong answer (a part's server killed).
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    };
    let truth = totals(&a_addr, true).expect("stats --by user / on two servers");
    assert_eq!(
        (
            truth["total"]["count"].as_u64(),
            truth["total"]["size"].as_u64()
        ),
        (Some(2 + 24 + files), Some(bytes)),
        "{truth}"
    );
    let uid = |v: &serde_json::Value, uid: u64| {
        v["groups"]
            .as_array()
            .and_then(|g| g.iter().find(|g| g["uid"].as_u64() == Some(uid)))
            .map(|g| (g["count"].as_u64(), g["size"].as_u64()))
    };
    let their_bytes: u64 = theirs.iter().map(|(_, s)| s).sum();
    assert_eq!(
        uid(&truth, 1001),
        Some((Some(theirs.len() as u64), Some(their_bytes))),
        "{truth}"
    );
    // Asks both kinds through `through` until `done`; every answer checked.
    let (mut right, mut errors) = (0, 0);
    let mut ask_until = |what: &str, through: &[&str], done: &mut dyn FnMut() -> bool| loop {
        for addr in through {
            for by_user in [false, true] {
                match totals(addr, by_user) {
                    None => errors += 1,
                    Some(got) => {
                        let want = if by_user {
                            truth.clone()
                        } else {
                            serde_json::json!({"groups": [], "total": truth["total"]})
                        };
                        assert_eq!(got, want, "stats / at {addr} {what}");
                        right += 1;
                    }
                }
            }
        }
        if done() {
            break;
        }
    };
    // c joins: the balancer moves tables onto it.
    let (c, c_addr) = serve_with(dir.path(), &etcd.url, "c", &flags);
    let c = KillOnDrop(c);
    let started = Instant::now();
    let holds = |st: &serde_json::Value, who: &str| {
        tables_by_server(st).iter().any(|(s, n)| s == who && *n > 0)
    };
    let mut moved = || {
        let st = status_on(&etcd.url, &secret);
        let moving = st["tables"]
            .as_array()
            .is_some_and(|ts| ts.iter().any(|t| !t["moving_to"].is_null()));
        let settled = holds(&st, "c") && !moving && started.elapsed() > Duration::from_secs(4);
        settled || started.elapsed() > Duration::from_secs(20)
    };
    ask_until("while c joins", &[&a_addr, &b_addr], &mut moved);
    let st = status_on(&etcd.url, &secret);
    assert!(holds(&st, "c"), "c got no table");
    // The coordinator killed (it holds tables): they fail over after its
    // lease (2 s) and a new coordinator's election — a long gap of the
    // route map for the others' gatherings.
    let mut servers = vec![("a", a, a_addr), ("b", _b, b_addr), ("c", c, c_addr)];
    let coordinator = st["coordinator"].as_str().unwrap_or("c").to_string();
    let victim = servers
        .iter()
        .position(|(n, ..)| *n == coordinator)
        .unwrap_or(2);
    let (gone, mut killed_child, _) = servers.remove(victim);
    assert!(holds(&st, gone), "{gone} holds no table: {st}");
    let through: Vec<&str> = servers.iter().map(|(_, _, addr)| addr.as_str()).collect();
    common::kill9(&mut killed_child.0);
    let killed = Instant::now();
    // Every table owned by a live server again.
    let live = |st: &serde_json::Value| {
        st["tables"].as_array().is_some_and(|ts| {
            ts.iter().all(|t| {
                t["owner"]
                    .as_str()
                    .is_some_and(|o| o != gone && !o.is_empty())
            })
        })
    };
    // (Asked from the kill on, across the end of c's lease: a part of c's
    // is asked again until c is out of the map, then its ranges by a map
    // where they may have no route yet.)
    let mut failed_over = || {
        let back =
            live(&status_on(&etcd.url, &secret)) && killed.elapsed() > Duration::from_secs(4);
        back || killed.elapsed() > Duration::from_secs(20)
    };
    ask_until(
        "while the killed server's tables fail over",
        &through,
        &mut failed_over,
    );
    let st = status_on(&etcd.url, &secret);
    assert!(live(&st), "{gone}'s tables did not fail over: {st}");
    // Settled: exact through both.
    for addr in &through {
        assert_eq!(totals(addr, true).as_ref(), Some(&truth), "at {addr}");
    }
    eprintln!("{right} exact answers, {errors} errors");
    assert!(right > 8, "{right} exact answers, {errors} errors");
    drop(etcd.child);
}
