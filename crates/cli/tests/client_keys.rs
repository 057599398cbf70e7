//! Client keys end to end: `sextant auth add` makes a key file, a client
//! node uses it with `--key-file` over TCP, and the server holds every
//! request to the key's limits — uids, read-only, root squash — and ends
//! its access within seconds of `sextant auth revoke`. The refusals are
//! audit-logged and counted.
//!
//! The client "nodes" are CLI processes run as other uids through
//! `setpriv` (no secret readable: only the key file, copied 0644 for the
//! test).

mod common;

use common::{cli_ok, spawn_server_env, KillOnDrop, BIN};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

struct World {
    _server: KillOnDrop,
    addr: String,
    data: PathBuf,
    dir: tempfile::TempDir,
    log: PathBuf,
    metrics_port: u16,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let (server, addr) = spawn_server_env(
        &data,
        "127.0.0.1:0",
        &["--journal-sync", "nosync", "--socket", "none"],
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[
            ("SEXTANT_METRICS", metrics.as_str()),
            ("SEXTANT_LOG_FORMAT", "json"),
        ],
    );
    let w = World {
        _server: KillOnDrop(server),
        addr,
        data,
        dir,
        log,
        metrics_port,
    };
    w.admin(&["mkdir", "/pub"]);
    w.admin(&["chmod", "777", "/pub"]);
    w
}

impl World {
    /// The admin (the secret in the data directory): must succeed.
    fn admin(&self, args: &[&str]) -> String {
        cli_ok(&self.addr, &self.data, args)
    }

    /// `sextant auth add NAME LIMITS...`: the key file, readable by the
    /// test's other uids.
    fn add_key(&self, name: &str, limits: &[&str]) -> PathBuf {
        let file = self.dir.path().join(format!("{name}.key"));
        let mut args = vec!["auth", "add", name, "--out", file.to_str().unwrap()];
        args.extend_from_slice(limits);
        self.admin(&args);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is private");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        file
    }

    /// The CLI with `key` as `uid` (gid the same, no other groups), from
    /// `/`, with no data directory of its own.
    fn as_key(&self, key: &Path, uid: u32, args: &[&str]) -> Output {
        common::cli_with_key(&self.addr, key, uid, self.dir.path())
            .args(args)
            .output()
            .unwrap()
    }

    /// The owner uid of `path`, as the admin sees it.
    fn owner(&self, path: &str) -> u32 {
        let out = self.admin(&["--json", "stat", path]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["uid"].as_u64().unwrap() as u32
    }

    fn audit(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"target\":\"audit\""))
            .map(str::to_string)
            .collect()
    }
}

fn setpriv_missing() -> bool {
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs setpriv");
        return true;
    }
    false
}

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut body = String::new();
            if s.read_to_string(&mut body).is_ok() && body.contains("sextant_") {
                return body;
            }
        }
        assert!(Instant::now() < deadline, "no metrics");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A key with `--uids 1000` acts as uid 1000 and as nobody else: root
/// and 1001 are refused (EPERM), logged and counted; the key cannot
/// manage keys.
#[test]
fn a_key_acts_only_as_the_uids_it_allows() {
    if setpriv_missing() {
        return;
    }
    let w = world();
    let key = w.add_key("node1", &["--uids", "1000"]);
    let ok = w.as_key(&key, 1000, &["touch", "/pub/mine"]);
    assert!(ok.status.success(), "uid 1000: {}", said(&ok));
    assert_eq!(w.owner("/pub/mine"), 1000);
    for uid in [0, 1001] {
        let name = format!("/pub/as-{uid}");
        let o = w.as_key(&key, uid, &["touch", &name]);
        assert!(!o.status.success(), "uid {uid} was let through");
        assert!(
            said(&o).contains("not permitted"),
            "uid {uid}: {}",
            said(&o)
        );
        let o = w.as_key(&key, uid, &["ls", "/pub"]);
        assert!(!o.status.success(), "uid {uid} may not read either");
        let gone = Command::new(BIN)
            .args(["--server", &w.addr, "--data"])
            .arg(&w.data)
            .args(["stat", &name])
            .output()
            .unwrap();
        assert!(!gone.status.success(), "{name} was made");
    }
    // Admin calls: the cluster secret only.
    let o = w.as_key(&key, 1000, &["auth", "ls"]);
    assert!(!o.status.success(), "a key listed the keys");
    assert!(said(&o).contains("cluster secret"), "{}", said(&o));
    let ls = w.admin(&["auth", "ls"]);
    assert!(ls.contains("node1") && ls.contains("1000"), "{ls}");

    let audit = w.audit();
    assert!(
        audit.iter().any(|l| l.contains("refused claim")
            && l.contains("\"key\":\"node1\"")
            && l.contains("\"claimed_uid\":1001")),
        "no audit line for the refused claim: {audit:#?}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l.contains("client key used from a new address")),
        "no audit line for the first use: {audit:#?}"
    );
    let body = scrape(w.metrics_port);
    assert!(
        body.lines().any(
            |l| l.starts_with("sextant_auth_refused_total{reason=\"key-claim\"}")
                && !l.ends_with(" 0")
        ),
        "no refusal counted: {body}"
    );
}

/// `--read-only`: reads work, every change is EROFS. `--root-squash`:
/// root's create is owned by 65534.
#[test]
fn read_only_and_root_squash() {
    if setpriv_missing() {
        return;
    }
    let w = world();
    w.admin(&["touch", "/pub/there"]);
    let ro = w.add_key("ro", &["--read-only"]);
    let o = w.as_key(&ro, 0, &["touch", "/pub/new"]);
    assert!(!o.status.success(), "a read-only key made a file");
    assert!(said(&o).contains("read-only file system"), "{}", said(&o));
    let o = w.as_key(&ro, 0, &["rm", "/pub/there"]);
    assert!(!o.status.success(), "a read-only key removed a file");
    let o = w.as_key(&ro, 0, &["ls", "/pub"]);
    assert!(o.status.success(), "{}", said(&o));
    assert!(said(&o).contains("there"), "{}", said(&o));

    let sq = w.add_key("sq", &["--root-squash"]);
    let o = w.as_key(&sq, 0, &["touch", "/pub/by-root"]);
    assert!(o.status.success(), "{}", said(&o));
    assert_eq!(w.owner("/pub/by-root"), 65534, "root was not squashed");
    // Squashed root may not write where only root may.
    w.admin(&["mkdir", "/root-only"]);
    w.admin(&["chmod", "755", "/root-only"]);
    let o = w.as_key(&sq, 0, &["touch", "/root-only/x"]);
    assert!(!o.status.success(), "squashed root wrote into /root-only");
    // Without the squash, root stays root.
    let plain = w.add_key("plain", &[]);
    let o = w.as_key(&plain, 0, &["touch", "/root-only/y"]);
    assert!(o.status.success(), "{}", said(&o));
    assert_eq!(w.owner("/root-only/y"), 0);
}

/// A live session and a watch using a key end within seconds of
/// `sextant auth revoke`; new calls are refused; a rotated key's old
/// secret stops working and the new file works.
#[test]
fn revoking_a_key_ends_its_sessions_within_seconds() {
    use sextant_client::{Client, Error, Options};
    use sextant_proto::keyauth::ClientKey;
    use sextant_types::Credentials;
    let w = world();
    let file = w.add_key("node9", &[]);
    let key = ClientKey::parse_file(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = Credentials::root();
    rt.block_on(async {
        let options = Options {
            retry_for: Duration::from_secs(3),
            ..Options::default()
        };
        let c = Client::connect(&w.addr, &key.credential(), options.clone())
            .await
            .unwrap();
        let pub_ = c.resolve(&root, b"/pub", true).await.unwrap().soid;
        let mut changes = c.watch().await.unwrap();
        // The key holds: a change is seen by the watch.
        c.create(&root, pub_, b"before", 0o644, true).await.unwrap();

        // Rotate: the old secret's session and watch end.
        let new_file = w.dir.path().join("node9.new.key");
        w.admin(&[
            "auth",
            "rotate",
            "node9",
            "--out",
            new_file.to_str().unwrap(),
        ]);
        let started = Instant::now();
        let cut = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if changes.next_batch().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(cut.is_ok(), "the watch outlived the rotation");
        let e = c.getattr(&root, pub_).await.unwrap_err();
        assert_eq!(e, Error::Auth, "the old session still works");
        assert!(started.elapsed() < Duration::from_secs(5));

        let fresh = ClientKey::parse_file(&std::fs::read_to_string(&new_file).unwrap()).unwrap();
        assert_ne!(fresh.key, key.key);
        let c = Client::connect(&w.addr, &fresh.credential(), options.clone())
            .await
            .unwrap();
        c.getattr(&root, pub_).await.unwrap();
        let mut changes = c.watch().await.unwrap();

        // Revoke: the same, and no new connection.
        w.admin(&["auth", "revoke", "node9"]);
        let started = Instant::now();
        let cut = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if changes.next_batch().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(cut.is_ok(), "the watch outlived the revocation");
        let e = c.getattr(&root, pub_).await.unwrap_err();
        assert_eq!(e, Error::Auth, "the session outlived the revocation");
        assert!(started.elapsed() < Duration::from_secs(5));
        let again = Client::connect(&w.addr, &fresh.credential(), options).await;
        assert!(matches!(again, Err(Error::Auth)), "a revoked key connected");
    });
    let ls = w.admin(&["auth", "ls"]);
    assert!(!ls.contains("node9"), "{ls}");
    assert!(
        w.audit().iter().any(|l| l.contains("client key revoked")),
        "no audit line for the revocation"
    );
}

/// `--path /home/alice`: the key (acting as root, so that only the limit
/// can refuse) stats, creates and moves inside; outside it can stat
/// nothing (a missing name and a present one both EACCES), create
/// nothing, move nothing out; `find`, `stats` and `du` of `/` give
/// exactly the subtree (a hard link by its name inside only), of
/// `/home/bob` nothing; its watch carries no change made outside, where
/// a key without a path sees it.
#[test]
fn a_path_limited_key_sees_and_touches_only_its_subtree() {
    if setpriv_missing() {
        return;
    }
    use sextant_client::{Client, Options};
    use sextant_proto::keyauth::ClientKey;
    use sextant_types::Soid;
    let w = world();
    w.admin(&["mkdir", "-p", "/home/alice/sub", "/home/bob"]);
    w.admin(&[
        "touch",
        "/home/alice/a",
        "/home/alice/sub/b",
        "/home/bob/secret",
    ]);
    w.admin(&["ln", "/home/bob/secret", "/home/alice/hl"]);
    let key = w.add_key("alice", &["--path", "/home/alice/"]);
    let ls = w.admin(&["auth", "ls"]);
    assert!(ls.contains("/home/alice"), "the path is listed: {ls}");
    let denied = |o: &Output, what: &str| {
        assert!(!o.status.success(), "{what} was let through: {}", said(o));
        assert!(
            said(o).to_lowercase().contains("permission denied"),
            "{what}: {}",
            said(o)
        );
    };
    let ok = |o: Output, what: &str| {
        assert!(o.status.success(), "{what}: {}", said(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };

    ok(w.as_key(&key, 0, &["stat", "/home/alice/a"]), "stat inside");
    ok(
        w.as_key(&key, 0, &["touch", "/home/alice/new"]),
        "create inside",
    );
    ok(
        w.as_key(&key, 0, &["mv", "/home/alice/new", "/home/alice/sub/new"]),
        "mv inside",
    );
    for path in ["/home/bob/secret", "/home/bob/nothing", "/home", "/"] {
        denied(&w.as_key(&key, 0, &["stat", path]), &format!("stat {path}"));
    }
    denied(
        &w.as_key(&key, 0, &["touch", "/home/bob/new"]),
        "create outside",
    );
    assert!(!w.admin(&["ls", "/home/bob"]).contains("new"));
    denied(
        &w.as_key(&key, 0, &["mv", "/home/alice/a", "/home/bob/a"]),
        "mv out",
    );
    denied(
        &w.as_key(&key, 0, &["mv", "/home/bob/secret", "/home/alice/s"]),
        "mv in",
    );
    denied(
        &w.as_key(&key, 0, &["rm", "/home/bob/secret"]),
        "rm outside",
    );
    denied(
        &w.as_key(&key, 0, &["mv", "/home/alice", "/home/alice2"]),
        "mv of the subtree's root",
    );
    assert_eq!(
        w.admin(&["ls", "/home/bob"]).trim(),
        "secret",
        "bob's is unchanged"
    );
    w.admin(&["stat", "/home/alice/a"]);

    // Search: exactly the subtree, by its real paths.
    let subtree = "/home/alice\n/home/alice/a\n/home/alice/hl\n/home/alice/sub\n\
                   /home/alice/sub/b\n/home/alice/sub/new";
    for start in ["/", "/home", "/home/alice"] {
        let out = ok(w.as_key(&key, 0, &["find", start]), "find");
        let mut lines: Vec<&str> = out.lines().collect();
        lines.sort_unstable();
        assert_eq!(lines.join("\n"), subtree, "find {start}");
    }
    let all = w.admin(&["find", "/"]);
    assert!(
        all.contains("/home/bob/secret"),
        "the admin sees more: {all}"
    );
    for cmd in ["find", "du", "stats"] {
        denied(
            &w.as_key(&key, 0, &[cmd, "/home/bob"]),
            &format!("{cmd} /home/bob"),
        );
    }
    let du = ok(w.as_key(&key, 0, &["--json", "du", "/"]), "du /");
    let v: serde_json::Value = serde_json::from_str(du.trim()).unwrap();
    assert_eq!(v["entries"], 6, "du / counts the subtree only: {du}");
    let stats = ok(w.as_key(&key, 0, &["stats", "/"]), "stats /");
    let total = stats.lines().find(|l| l.contains("total")).unwrap();
    assert_eq!(
        total.split_whitespace().next(),
        Some("6"),
        "stats / counts the subtree only: {stats}"
    );
    let audit = w.audit();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("outside the key's subtree")),
        "no audit line for a refusal: {audit:#?}"
    );

    // The watch: a change outside never reaches the confined key's.
    let hex = |path: &str| {
        let out = w.admin(&["--json", "stat", path]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        Soid::from_u128(u128::from_str_radix(v["soid"].as_str().unwrap(), 16).unwrap())
    };
    let (bob, alice) = (hex("/home/bob"), hex("/home/alice"));
    let plain = w.add_key("plain", &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let addr = w.addr.clone();
        let connect = |file: PathBuf| {
            let addr = addr.clone();
            async move {
                let k = ClientKey::parse_file(&std::fs::read_to_string(file).unwrap()).unwrap();
                Client::connect(&addr, &k.credential(), Options::default())
                    .await
                    .unwrap()
            }
        };
        let confined = connect(key.clone()).await;
        let unconfined = connect(plain).await;
        let mut watches = [
            confined.watch().await.unwrap(),
            unconfined.watch().await.unwrap(),
        ];
        w.admin(&["touch", "/home/bob/outside-x"]);
        w.admin(&["chmod", "600", "/home/bob/secret"]);
        w.admin(&["touch", "/home/alice/inside-y"]);
        let mut seen = [Vec::new(), Vec::new()];
        for (i, watch) in watches.iter_mut().enumerate() {
            while !seen[i]
                .iter()
                .any(|(_, n): &(Soid, Box<[u8]>)| &**n == b"inside-y")
            {
                let b = tokio::time::timeout(Duration::from_secs(10), watch.next_batch())
                    .await
                    .expect("the inside change never came")
                    .unwrap();
                seen[i].extend(b.entries);
            }
        }
        let outside = |s: &[(Soid, Box<[u8]>)]| {
            s.iter()
                .filter(|(p, n)| *p == bob || &**n == b"outside-x")
                .count()
        };
        assert!(
            outside(&seen[1]) > 0,
            "a key without a path sees bob's change"
        );
        assert_eq!(
            outside(&seen[0]),
            0,
            "the confined watch carried {:?}",
            seen[0]
        );
        assert!(seen[0].iter().all(|(p, _)| *p == alice), "{:?}", seen[0]);
    });
}
