//! The first hour of a new user: what the CLI does when no server answers,
//! from another directory, with relative paths, with a server that is down
//! or stopped, and how its logs look in a file. Each test runs the real
//! binary.

mod common;

use common::BIN;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `sextant ARGS` in `cwd`, with no config file or server record of the
/// machine's user in the way (HOME and the XDG directories point into
/// `home`).
fn sextant_in(cwd: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env_remove("SEXTANT_CONFIG")
        .env_remove("SEXTANT_DATA")
        .env_remove("SEXTANT_SERVER")
        .env_remove("SEXTANT_SECRET")
        .env_remove("SEXTANT_SECRET_FILE")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Nothing answers at the default address on the test machine (the other
/// CLI tests assume it too); a server found there would make these tests
/// meaningless, so they say so.
fn default_address_is_free() -> bool {
    std::net::TcpStream::connect_timeout(
        &sextant_proto::DEFAULT_LISTEN.parse().unwrap(),
        Duration::from_millis(300),
    )
    .is_err()
}

#[test]
fn no_command_makes_a_second_namespace_by_itself() {
    assert!(
        default_address_is_free(),
        "a server answers at 127.0.0.1:7411"
    );
    let dir = tempfile::tempdir().unwrap();
    let (cwd, home) = (dir.path(), dir.path().join("home"));
    // No server, no store: a write fails and leaves nothing behind.
    let out = sextant_in(cwd, &home, &["mkdir", "/x"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("sextant init"), "{}", stderr(&out));
    assert!(!cwd.join("sextant-data").exists());
    // --local with a command that only reads does not make one either.
    let out = sextant_in(cwd, &home, &["--local", "ls", "/"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(!cwd.join("sextant-data").exists());
    // Asked for: `init` makes one (and says so when run again), and
    // commands then use it.
    let out = sextant_in(cwd, &home, &["init"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains("made a new store"),
        "{}",
        stdout(&out)
    );
    let out = sextant_in(cwd, &home, &["init"]);
    assert!(stdout(&out).contains("already holds a store"), "{out:?}");
    let out = sextant_in(cwd, &home, &["mkdir", "/x"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&sextant_in(cwd, &home, &["ls", "/"])).contains('x'));
}

#[test]
fn settings_come_from_a_config_file_from_any_directory() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let conf_dir = home.join("config").join("sextant");
    std::fs::create_dir_all(&conf_dir).unwrap();
    // A relative path in the file is relative to the file.
    std::fs::write(conf_dir.join("config.toml"), "data = \"store\"\n").unwrap();
    let store = conf_dir.join("store");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let out = sextant_in(&elsewhere, &home, &["--local", "mkdir", "/from-anywhere"]);
    assert!(out.status.success(), "{out:?}");
    assert!(store.join("secret").exists() || store.is_dir());
    let out = sextant_in(dir.path(), &home, &["--local", "status"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("data directory  {}", store.display()))
            && text.contains("(config file "),
        "{text}"
    );
    let out = sextant_in(dir.path(), &home, &["--local", "--json", "status"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["settings"]["data"]["source"]
        .as_str()
        .unwrap()
        .starts_with("config file"));
    // A flag beats the file; a broken file is an error, not ignored.
    let out = sextant_in(
        dir.path(),
        &home,
        &["--local", "--data", "other", "mkdir", "/o"],
    );
    assert!(out.status.success() && dir.path().join("other").is_dir());
    std::fs::write(conf_dir.join("config.toml"), "dta = 1\n").unwrap();
    let out = sextant_in(dir.path(), &home, &["--local", "status"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("bad config file"), "{}", stderr(&out));
}

#[test]
fn relative_paths_outside_a_mount_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    assert!(sextant_in(dir.path(), &home, &["--data", data, "init"])
        .status
        .success());
    let out = sextant_in(
        dir.path(),
        &home,
        &["--local", "--data", data, "mkdir", "relative"],
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr(&out).contains("relative path is understood only inside a Sextant mount"),
        "{}",
        stderr(&out)
    );
    let ls = sextant_in(dir.path(), &home, &["--local", "--data", data, "ls", "/"]);
    assert!(!stdout(&ls).contains("relative"), "{ls:?}");
}

#[test]
fn a_server_that_is_not_there_fails_at_once_and_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    // A port nothing listens on: refused, said so, no TLS hint.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    let started = Instant::now();
    let out = sextant_in(
        dir.path(),
        &home,
        &["--server", &addr, "--secret", "00", "ls", "/"],
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains(&format!("cannot connect to {addr}: connection refused")),
        "{said}"
    );
    assert!(!said.contains("TLS"), "{said}");
}

#[test]
fn a_stopped_server_does_not_hang_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, addr) = common::spawn_server_with(
        &data,
        "127.0.0.1:0",
        &["--journal-sync", "nosync"],
        Stdio::null(),
    );
    let mut server = common::KillOnDrop(server);
    common::cli_ok(&addr, &data, &["mkdir", "/before"]);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGSTOP) };
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["--server", &addr, "--data"])
        .arg(&data)
        .args(["ls", "/"])
        .output()
        .unwrap();
    let took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGCONT) };
    assert!(!out.status.success(), "{out:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let said = stderr(&out);
    assert!(said.contains("no answer within"), "{said}");
    common::kill9(&mut server.0);
}

#[test]
fn logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .env("SEXTANT_METRICS", "off")
        .env_remove("SEXTANT_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = server.stderr.take().unwrap();
    let mut first = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 4096];
    use std::io::Read;
    while !String::from_utf8_lossy(&first).contains("serving") && Instant::now() < deadline {
        match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => first.extend_from_slice(&buf[..n]),
        }
    }
    common::kill9(&mut server);
    let text = String::from_utf8_lossy(&first);
    assert!(text.contains("serving"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "ANSI escape in a piped log: {text:?}"
    );
}

/// The example config files in deploy/ name every key (commented out where
/// there is no default) and parse: a key added to the server or the client
/// without its line in the example fails here.
#[test]
fn the_example_config_files_name_every_key_and_parse() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let uncommented = |file: &str| -> String {
        let text = std::fs::read_to_string(deploy.join(file)).unwrap();
        text.lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("server.toml");
    std::fs::write(&server, uncommented("server.toml.example")).unwrap();
    let parsed = sextant_server::config::FileConfig::load(&server).unwrap();
    let shown = format!("{parsed:?}");
    assert!(!shown.contains("None"), "a server key is missing: {shown}");
    // As it stands (keys without a default commented out) it parses too.
    sextant_server::config::FileConfig::load(&deploy.join("server.toml.example")).unwrap();

    let client = dir.path().join("config.toml");
    std::fs::write(&client, uncommented("config.toml.example")).unwrap();
    let home = dir.path().join("home");
    let out = Command::new(BIN)
        .args(["--local", "status"])
        .env("SEXTANT_CONFIG", &client)
        .env("HOME", &home)
        .env_remove("SEXTANT_DATA")
        .output()
        .unwrap();
    // The file names a data directory that does not exist here: the
    // command fails on that, not on the file.
    assert!(
        !stderr(&out).contains("bad config file"),
        "{}",
        stderr(&out)
    );
    for key in ["server", "data", "secret_file", "tls_ca"] {
        assert!(
            uncommented("config.toml.example").contains(&format!("{key} = ")),
            "client key {key} missing"
        );
    }
}

/// The certificate a plain `openssl req -x509` makes is a CA; TLS refuses
/// it as a server's own certificate. The user is told so, with a recipe —
/// and the recipe's certificate works.
#[test]
fn a_ca_certificate_as_the_servers_own_is_explained() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: no openssl");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str, extra: &[&str]| {
        let ok = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
            ])
            .args([
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .args(extra)
            .arg("-keyout")
            .arg(dir.path().join(format!("{name}.key")))
            .arg("-out")
            .arg(dir.path().join(format!("{name}.pem")))
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "openssl req failed");
        (
            dir.path().join(format!("{name}.pem")),
            dir.path().join(format!("{name}.key")),
        )
    };
    let ca = make("ca", &[]);
    let leaf = make("leaf", &["-addext", "basicConstraints=critical,CA:FALSE"]);
    for ((cert, key), works) in [(ca, false), (leaf, true)] {
        let data = dir.path().join(if works { "d1" } else { "d2" });
        let (server, addr) = common::spawn_server_with(
            &data,
            "127.0.0.1:0",
            &[
                "--tls-cert",
                cert.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
            ],
            Stdio::null(),
        );
        let _server = common::KillOnDrop(server);
        let out = Command::new(BIN)
            .args(["--server", &addr, "--data"])
            .arg(&data)
            .arg("--tls-ca")
            .arg(&cert)
            .args(["ls", "/"])
            .output()
            .unwrap();
        assert_eq!(out.status.success(), works, "{out:?}");
        if !works {
            let said = stderr(&out);
            assert!(
                said.contains("marked as a certificate authority") && said.contains("CA:FALSE"),
                "{said}"
            );
        }
    }
}

/// A second mount on a mount point that already carries one is refused
/// (they would stack, and one umount would remove both); the first keeps
/// working.
#[test]
fn a_mount_on_a_sextant_mount_is_refused() {
    if !common::fuse_available() {
        return;
    }
    let m = common::Mounted::start();
    std::fs::write(m.p("f"), b"x").unwrap();
    let out = m.sextant(&["--server", &m.addr, "mount", m.mnt.to_str().unwrap()]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr(&out).contains("already carries a Sextant mount"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"x");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let point = format!(" {} ", m.mnt.display());
    assert_eq!(mounts.matches(&point).count(), 1, "{mounts}");
}

/// Stopping a server with a mount attached does not wait out the grace
/// period for connections the mount keeps open, and ends with "stopped".
#[test]
fn a_server_with_a_mount_stops_promptly_and_says_so() {
    if !common::fuse_available() {
        return;
    }
    let mut m = common::Mounted::start_args(&["--journal-sync", "nosync"], Stdio::piped());
    std::fs::write(m.p("f"), b"x").unwrap();
    let started = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(m.server.id() as i32, libc::SIGTERM) };
    let status = m.server.wait().unwrap();
    let took = started.elapsed();
    let mut log = String::new();
    use std::io::Read;
    m.server
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(status.success(), "{log}");
    assert!(
        took < Duration::from_secs(5),
        "stopping took {took:?}\n{log}"
    );
    assert!(
        log.lines().last().is_some_and(|l| l.contains("stopped")),
        "{log}"
    );
}

/// A config file the caller may not read (another user's home, kept in
/// HOME by sudo or setpriv) is passed over, not an error.
#[test]
fn an_unreadable_config_file_is_passed_over() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let conf_dir = home.join("config").join("sextant");
    std::fs::create_dir_all(&conf_dir).unwrap();
    std::fs::write(conf_dir.join("config.toml"), "data = \"store\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&conf_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let data = dir.path().join("data");
    assert!(sextant_in(
        dir.path(),
        &home,
        &["--data", data.to_str().unwrap(), "init"]
    )
    .status
    .success());
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(BIN)
        .args(["--local", "--data", data.to_str().unwrap(), "find", "/"])
        .current_dir("/")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .output()
        .unwrap();
    assert!(!stderr(&out).contains("config file"), "{}", stderr(&out));
}

/// A file whose data never reached the mount's data directory (imported
/// without --with-data) does not read as zeros of the right size: the open
/// fails with EIO (and the mount logs why).
#[test]
fn a_file_without_its_data_is_an_error_not_zeros() {
    if !common::fuse_available() {
        return;
    }
    let m = common::Mounted::start();
    let src = m.dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"real content").unwrap();
    std::fs::write(src.join("empty"), b"").unwrap();
    m.sextant_ok(&["import", src.to_str().unwrap(), "/imp"]);
    let meta = std::fs::metadata(m.p("imp/f")).unwrap();
    assert_eq!(meta.len(), 12, "the size is the source's");
    let err = std::fs::read(m.p("imp/f")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // An empty file has no data to miss; a file written here reads back.
    assert_eq!(std::fs::read(m.p("imp/empty")).unwrap(), b"");
    std::fs::write(m.p("imp/g"), b"written here").unwrap();
    assert_eq!(std::fs::read(m.p("imp/g")).unwrap(), b"written here");
}

/// `ls -la` (and -A) as GNU ls: dot names only when asked, `.` and `..`
/// with -a; `stat` of a symlink shows its target.
#[test]
fn ls_shows_dot_names_as_gnu_ls_and_stat_shows_a_link_target() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = sextant_in(
            dir.path(),
            &home,
            &[&["--local", "--data", d], args].concat(),
        );
        assert!(out.status.success(), "{args:?}: {out:?}");
        stdout(&out)
    };
    assert!(sextant_in(dir.path(), &home, &["--data", d, "init"])
        .status
        .success());
    run(&["mkdir", "/p"]);
    run(&["touch", "/p/.hidden", "/p/shown"]);
    run(&["ln", "-s", "shown", "/p/link"]);
    assert_eq!(run(&["ls", "/p"]), "link\nshown\n");
    assert_eq!(run(&["ls", "-A", "/p"]), ".hidden\nlink\nshown\n");
    assert_eq!(run(&["ls", "-a", "/p"]), ".\n..\n.hidden\nlink\nshown\n");
    let long = run(&["ls", "-la", "/p"]);
    let names: Vec<&str> = long
        .lines()
        .map(|l| l.split_whitespace().nth(7).unwrap_or(""))
        .collect();
    assert_eq!(names, [".", "..", ".hidden", "link", "shown"], "{long}");
    assert!(long.contains("link -> shown"), "{long}");
    let stat = run(&["stat", "/p/link"]);
    assert!(stat.contains("File: /p/link -> shown"), "{stat}");
}

/// scripts/ensure-deps.sh stops, and says why, on a Rust older than the
/// code needs (Debian 12's own rustc is 1.63).
#[test]
fn an_old_toolchain_is_refused_early_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("rustc");
    std::fs::write(&fake, "#!/bin/sh\necho 'rustc 1.63.0 (debian)'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-c", ". scripts/ensure-deps.sh && echo continued"])
        .current_dir(&root)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(!stdout(&out).contains("continued"));
    assert!(
        stderr(&out).contains("Rust 1.63.0 is too old: Sextant needs Rust >= 1.88"),
        "{}",
        stderr(&out)
    );
}
