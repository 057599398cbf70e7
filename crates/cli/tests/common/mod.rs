//! What the CLI's integration tests share: the binary, and starting a real
//! `sextant serve`; for the cluster tests (`cluster.rs`, `dir_leases.rs`)
//! an etcd of the test's own, servers joining it, `sextant` run against
//! one of them, and `cluster status --json` read back. Every child
//! process a helper starts is killed when the test ends, however it ends
//! ([`KillOnDrop`], or the caller's to wrap).

#![allow(dead_code)] // each test file uses a different part

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sextant");

/// Starts `sextant serve` on `data` (metrics off, so parallel tests do not
/// compete for its port); returns it and the address it says it listens on.
pub fn spawn_server(data: &Path, journal_sync: &str, listen: &str) -> (Child, String) {
    spawn_server_with(
        data,
        listen,
        &["--journal-sync", journal_sync],
        Stdio::inherit(),
    )
}

/// [`spawn_server`] with more `serve` arguments and stderr going to
/// `stderr`.
pub fn spawn_server_with(
    data: &Path,
    listen: &str,
    args: &[&str],
    stderr: Stdio,
) -> (Child, String) {
    spawn_server_env(data, listen, args, stderr, &[])
}

/// [`spawn_server_with`] with more environment variables (e.g. a
/// test-only `SEXTANT_FAULT`).
pub fn spawn_server_env(
    data: &Path,
    listen: &str,
    args: &[&str],
    stderr: Stdio,
    env: &[(&str, &str)],
) -> (Child, String) {
    let mut server = Command::new(BIN)
        .args(["serve", "--listen", listen])
        .args(args)
        .arg("--data")
        .arg(data)
        .env("SEXTANT_METRICS", "off")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn sextant serve");
    let stdout = server.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the server did not say where it listens");
    let addr = line
        .strip_prefix("listening on ")
        .expect("a 'listening on' line")
        .to_string();
    (server, addr)
}

/// `sextant --server ADDR --data DATA ARGS` (the secret found in DATA),
/// which must succeed; its stdout.
pub fn cli_ok(addr: &str, data: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(["--server", addr, "--data"])
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sextant {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `sextant --local --data DATA ARGS`: the embedded engine, no server.
pub fn local(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["--local", "--data"])
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

/// [`local`], which must succeed; its stdout.
pub fn local_ok(data: &Path, args: &[&str]) -> String {
    let out = local(data, args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The cluster secret a server made in `data`.
pub fn secret_of(data: &Path) -> String {
    std::fs::read_to_string(data.join("secret"))
        .unwrap()
        .trim()
        .to_string()
}

/// A client of the server at `addr` whose data directory is `data`.
pub async fn connect(addr: &str, data: &Path) -> sextant_client::Client {
    sextant_client::Client::connect(addr, &secret_of(data), Default::default())
        .await
        .expect("connect")
}

/// SIGKILL and reap (a no-op for a process already gone).
pub fn kill9(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A child process killed (SIGKILL) and reaped when dropped, however the
/// test ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Can this machine mount FUSE file systems? Says why not when it cannot.
pub fn fuse_available() -> bool {
    let dev = Path::new("/dev/fuse").exists();
    let fm = Command::new("fusermount3")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(dev && fm) {
        eprintln!(
            "SKIPPED: FUSE mount tests need /dev/fuse and fusermount3 (Debian package fuse3; \
             scripts/ensure-deps.sh installs it)"
        );
    }
    dev && fm
}

/// Is a FUSE file system mounted at `mp`?
pub fn is_mounted(mp: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mp = mp.to_str().unwrap();
    info.lines().any(|l| {
        let (mine, theirs) = l.split_once(" - ").unwrap_or((l, ""));
        mine.split(' ').nth(4) == Some(mp) && theirs.starts_with("fuse")
    })
}

/// Runs a shell command line; panics with its output when it fails.
pub fn sh(cwd: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{script}` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A server and a mount on it; unmounted and killed when dropped, even when
/// a test fails.
pub struct Mounted {
    pub server: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
    pub mnt: PathBuf,
}

impl Mounted {
    pub fn start() -> Mounted {
        Mounted::start_with("nosync")
    }

    pub fn start_with(journal_sync: &str) -> Mounted {
        Mounted::start_args(&["--journal-sync", journal_sync], Stdio::inherit())
    }

    /// A mount on a server started with `args`, its stderr to `stderr`.
    pub fn start_args(args: &[&str], stderr: Stdio) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (server, addr) = spawn_server_with(&data, "127.0.0.1:0", args, stderr);
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let m = Mounted {
            server,
            addr,
            dir,
            mnt,
        };
        m.mount();
        m
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `sextant ARGS` in the test directory with the cluster secret.
    pub fn sextant(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.dir.path())
            .env("SEXTANT_SECRET", self.secret())
            .output()
            .unwrap()
    }

    /// `sextant --server ADDR ARGS`, which must succeed; its stdout.
    pub fn sextant_ok(&self, args: &[&str]) -> String {
        let out = self.sextant(&[&["--server", &self.addr], args].concat());
        assert!(
            out.status.success(),
            "sextant {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The cluster secret the server created.
    pub fn secret(&self) -> String {
        secret_of(&self.data())
    }

    pub fn mount(&self) {
        self.mount_at(&self.mnt, &[]);
    }

    /// [`Mounted::mount`] with `env` set for the mount's process.
    #[allow(dead_code)]
    pub fn mount_env(&self, env: &[(&str, &str)]) {
        self.mount_from_with_env(&self.addr, &self.mnt, &["-o", "allow_other"], &[], env);
    }

    /// Another mount of the same server on `mp` (a directory under the
    /// test directory, unmounted by the caller), with extra `mount` args.
    pub fn mount_at(&self, mp: &Path, args: &[&str]) {
        self.mount_with(mp, &["-o", "allow_other"], args);
    }

    /// Like [`Mounted::mount_at`], but without `-o allow_other`: as root,
    /// the mount then calls mount(2) itself instead of `fusermount3`
    /// (file system type `fuse`, not `fuse.sextant`), and nothing unmounts
    /// it if the test dies.
    pub fn mount_private_at(&self, mp: &Path) {
        self.mount_with(mp, &[], &[]);
    }

    /// Another mount of the same server on `mp`, reaching it at `addr`
    /// (e.g. its Unix socket), with `-o allow_other`.
    pub fn mount_from(&self, addr: &str, mp: &Path) {
        self.mount_from_with(addr, mp, &["-o", "allow_other"], &[]);
    }

    fn mount_with(&self, mp: &Path, options: &[&str], args: &[&str]) {
        self.mount_from_with(&self.addr, mp, options, args);
    }

    fn mount_from_with(&self, addr: &str, mp: &Path, options: &[&str], args: &[&str]) {
        self.mount_from_with_env(addr, mp, options, args, &[]);
    }

    fn mount_from_with_env(
        &self,
        addr: &str,
        mp: &Path,
        options: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
    ) {
        let log = format!("mount-{}.log", mp.file_name().unwrap().to_string_lossy());
        let out = Command::new(BIN)
            .envs(env.iter().copied())
            .args(["--server", addr, "--data"])
            .arg(self.data())
            .arg("mount")
            .args(options)
            .arg("--log")
            .arg(self.dir.path().join(log))
            .args(args)
            .arg(mp)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(is_mounted(mp), "mounted once `sextant mount` returns");
    }

    pub fn umount(&self) {
        let out = Command::new(BIN)
            .arg("umount")
            .arg(&self.mnt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "umount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t = Instant::now();
        while is_mounted(&self.mnt) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!is_mounted(&self.mnt));
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // A failed test shows what its mounts logged: a mount that died
        // leaves nothing else behind.
        if std::thread::panicking() {
            if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
                for entry in entries.flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with("mount-") && name.ends_with(".log") {
                        let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
                        eprintln!("---- {name} ----\n{log}");
                    }
                }
            }
        }
        // Lazy: detached at once, so removing the temp dir never walks
        // into a mount whose server is gone.
        if is_mounted(&self.mnt) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.mnt)
                .status();
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// Polls `f` until it returns true or 10 s pass (changes made elsewhere
/// reach a mount's caches in milliseconds; a reconnect within 2 s).
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "never: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Unmounts a mount point (lazily) when dropped, however the test ends.
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.0)
            .status();
    }
}

/// `n` consecutive free ports (held briefly to check), below the kernel's
/// ephemeral range (`ip_local_port_range`, 32768 and up by default): a
/// port the kernel hands to another test's `bind(:0)` between this check
/// and its use cannot be one of them (seen in CI: `cluster up`'s third
/// server, "Address already in use"). Picked at random (by process and
/// time), so two tests picking at once are unlikely to meet. Where that
/// range leaves too little room below it, any free ports.
pub fn free_ports(n: u16) -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const LOWEST: u16 = 10_000;
    let room = ephemeral_low.saturating_sub(LOWEST).saturating_sub(n);
    let mut seed = (u64::from(std::process::id()) << 32)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..500 {
        let first = if room >= 1_000 {
            // (A 64-bit LCG: enough to spread the picks.)
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            LOWEST + (seed >> 33) as u16 % room
        } else {
            let any = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            if any > 65000 {
                continue;
            }
            any
        };
        let held: Vec<_> = (0..n)
            .map_while(|i| std::net::TcpListener::bind(("127.0.0.1", first + i)).ok())
            .collect();
        if held.len() == usize::from(n) {
            return first;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// The CLI as `uid` (gid the same, no other groups: `setpriv`) through
/// `addr` with the client key file `key`, from `/`, with `home` for HOME
/// and no data directory, config or secret it could find: add the
/// command's arguments and run it.
pub fn cli_with_key(addr: &str, key: &Path, uid: u32, home: &Path) -> Command {
    let id = uid.to_string();
    let mut c = Command::new("setpriv");
    c.args(["--reuid", &id, "--regid", &id, "--clear-groups", BIN])
        .args(["--server", addr, "--data", "/nonexistent", "--key-file"])
        .arg(key)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("SEXTANT_SECRET")
        .env_remove("SEXTANT_SECRET_FILE")
        .current_dir("/");
    c
}

// ---- clusters on a real etcd ----------------------------------------------

/// Is there an `etcd` binary? Says so when not (the test is skipped).
pub fn have_etcd() -> bool {
    let ok = Command::new("etcd").arg("--version").output().is_ok();
    if !ok {
        eprintln!("SKIPPED: no etcd binary (apt-get install etcd-server)");
    }
    ok
}

/// Polls `f` every 100 ms until it holds; fails after `within`.
pub fn wait_for(what: &str, within: Duration, f: impl FnMut() -> bool) {
    wait_for_every(what, within, Duration::from_millis(100), f);
}

/// [`wait_for`], polling every `every`.
pub fn wait_for_every(what: &str, within: Duration, every: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(every);
    }
}

/// `kill SIG PID` of `child` (`-STOP`, `-CONT`, `-TERM`...), which must
/// succeed.
pub fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

/// `sextant --server ADDR --data SECRET_DIR ARGS`: the cluster's secret
/// found in `secret_dir`.
pub fn sextant(addr: &str, secret_dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["--server", addr, "--data"])
        .arg(secret_dir)
        .args(args)
        .output()
        .unwrap()
}

/// [`sextant`], which must succeed; its stdout.
pub fn sextant_ok(addr: &str, secret_dir: &Path, args: &[&str]) -> String {
    let out = sextant(addr, secret_dir, args);
    assert!(
        out.status.success(),
        "sextant {args:?} at {addr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The servers of a `cluster status --json`, with how many tables each
/// holds.
pub fn tables_by_server(s: &serde_json::Value) -> Vec<(String, u64)> {
    s["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["name"].as_str().unwrap().to_string(),
                x["tables"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `sextant cluster status --json` of the cluster on `etcd`, with the
/// secret in `secret_dir`.
pub fn status_on(etcd: &str, secret_dir: &Path) -> serde_json::Value {
    try_status_on(etcd, secret_dir).unwrap_or_else(|e| panic!("cluster status: {e}"))
}

/// [`status_on`], or why it failed (etcd restarting).
pub fn try_status_on(etcd: &str, secret_dir: &Path) -> Result<serde_json::Value, String> {
    let out = Command::new(BIN)
        .args(["--json", "cluster", "status", "--etcd", etcd])
        .env("SEXTANT_SECRET_FILE", secret_dir.join("secret"))
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Waits (30 s at most) until some server of the cluster on `etcd`
/// holds a table: the root table is assigned.
pub fn wait_root_assigned(etcd: &str, secret_dir: &Path) {
    wait_for("the root table assigned", Duration::from_secs(30), || {
        tables_by_server(&status_on(etcd, secret_dir))
            .iter()
            .any(|t| t.1 > 0)
    });
}

/// Waits (60 s at most) until the cluster on `etcd` has two servers,
/// each holding tables.
pub fn wait_tables_on_both(etcd: &str, secret_dir: &Path) {
    wait_for("tables on both servers", Duration::from_secs(60), || {
        let t = tables_by_server(&status_on(etcd, secret_dir));
        t.len() == 2 && t.iter().all(|x| x.1 > 0)
    });
}

/// `cmd` run, which must succeed (else fails with "WHAT: its stderr"):
/// its output.
pub fn output_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `sextant --json cluster move WHAT SERVER` (WHAT a path or a table's
/// number) on the cluster on `etcd`, not run yet.
pub fn cluster_move(etcd: &str, secret_dir: &Path, what: &str, server: &str) -> Command {
    let mut mv = Command::new(BIN);
    mv.args(["--json", "cluster", "move", what, server, "--etcd", etcd])
        .env("SEXTANT_SECRET_FILE", secret_dir.join("secret"));
    mv
}

/// `cluster move PATH SERVER` on the cluster on `etcd`: the table moved
/// (once done).
pub fn move_table(etcd: &str, secret_dir: &Path, path: &str, server: &str) -> u64 {
    let mut mv = cluster_move(etcd, secret_dir, path, server);
    let out = output_ok(&mut mv, &format!("cluster move {path} {server}"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["table"].as_u64().unwrap()
}

/// etcd for one test (one member, no fsync), killed when dropped.
pub struct Etcd {
    pub child: KillOnDrop,
    /// Its client URL.
    pub url: String,
    dir: PathBuf,
    client: u16,
    peer: u16,
}

impl Etcd {
    /// kill -9, then the same etcd (data, ports) again.
    pub fn restart(&mut self) {
        kill9(&mut self.child.0);
        self.child = spawn_etcd(&self.dir, self.client, self.peer);
    }
}

/// A scratch directory and an etcd of its own for one test (`None`: no
/// etcd on this machine, the test is skipped).
pub fn dir_and_etcd() -> Option<(tempfile::TempDir, Etcd)> {
    if !have_etcd() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(dir.path());
    Some((dir, etcd))
}

/// An etcd with its data in `dir/etcd`, on free ports, once it listens.
pub fn start_etcd(dir: &Path) -> Etcd {
    let client = free_ports(1);
    let peer = free_ports(1);
    let child = spawn_etcd(dir, client, peer);
    Etcd {
        child,
        url: format!("http://127.0.0.1:{client}"),
        dir: dir.to_path_buf(),
        client,
        peer,
    }
}

fn spawn_etcd(dir: &Path, client: u16, peer: u16) -> KillOnDrop {
    let c = format!("http://127.0.0.1:{client}");
    let p = format!("http://127.0.0.1:{peer}");
    let child = etcd_command(dir, &c, &p)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = KillOnDrop(child);
    wait_for("etcd listens", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", client)).is_ok()
    });
    child
}

/// `etcd` as the one member (`t`) of its cluster, with its data in
/// `dir/etcd`, clients at `client_url`, peers at `peer_url`, no fsync and
/// its stdout discarded: add flags, then spawn.
pub fn etcd_command(dir: &Path, client_url: &str, peer_url: &str) -> Command {
    let mut etcd = Command::new("etcd");
    etcd.args(["--name", "t", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", client_url])
        .args(["--advertise-client-urls", client_url])
        .args(["--listen-peer-urls", peer_url])
        .args(["--initial-advertise-peer-urls", peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .arg("--unsafe-no-fsync")
        .stdout(Stdio::null());
    etcd
}

/// `sextant serve` as cluster member `name` of the cluster on `etcd`:
/// data in `dir/name`, the shared store `dir/store`, journal synced, an
/// etcd lease of 2 s; the process and its address.
pub fn serve(dir: &Path, etcd: &str, name: &str) -> (Child, String) {
    serve_with(dir, etcd, name, &[])
}

/// [`serve`] with more `serve` flags (`--journal-sync` among them
/// replaces fsync).
pub fn serve_with(dir: &Path, etcd: &str, name: &str, more: &[&str]) -> (Child, String) {
    serve_env(dir, etcd, name, more, &[])
}

/// [`serve_with`] with more environment (a later `SEXTANT_LEASE_TTL`
/// replaces 2 s).
pub fn serve_env(
    dir: &Path,
    etcd: &str,
    name: &str,
    more: &[&str],
    env: &[(&str, &str)],
) -> (Child, String) {
    let mut args = Vec::new();
    if !more.contains(&"--journal-sync") {
        args.extend(["--journal-sync", "fsync"]);
    }
    args.extend(["--etcd", etcd, "--name", name, "--cluster-store"]);
    let store = dir.join("store");
    args.push(store.to_str().unwrap());
    args.extend_from_slice(more);
    spawn_server_env(
        &dir.join(name),
        "127.0.0.1:0",
        &args,
        Stdio::inherit(),
        &[&[("SEXTANT_LEASE_TTL", "2s")], env].concat(),
    )
}

pub fn journal_lengths(journal: &Path) -> Vec<(PathBuf, u64)> {
    std::fs::read_dir(journal)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect()
}

/// A power loss of a server's machine after SIGKILL: its newest journal
/// segment is cut back to its length in `kept` (emptied if made since).
/// Older segments stay whole: the journal syncs a segment whole when it
/// leaves it for the next, so a power loss keeps them.
pub fn cut_journal(journal: &Path, kept: &[(PathBuf, u64)]) {
    cut_journal_above(journal, kept, 0);
}

/// [`cut_journal`], keeping at least the records up to `synced` (the
/// watermark the server last told its clients: they dropped their
/// backups of those, and a power loss keeps what was synced).
pub fn cut_journal_above(journal: &Path, kept: &[(PathBuf, u64)], synced: u64) {
    let Some(newest) = std::fs::read_dir(journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
    else {
        return;
    };
    let keep = kept
        .iter()
        .find(|(q, _)| *q == newest)
        .map_or(0, |(_, l)| *l)
        .max(segment_bytes_through(&newest, synced));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    f.set_len(keep).unwrap();
}

/// Every file under `dir` (none if it does not exist).
pub fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `ls /d` through the server at `addr`, sorted.
pub fn ls_d(addr: &str, secret: &Path) -> Vec<String> {
    let listing = sextant_ok(addr, secret, &["ls", "/d"]);
    let mut names: Vec<String> = listing.split_whitespace().map(String::from).collect();
    names.sort_unstable();
    names
}

/// How many bytes of journal segment `segment` hold its records up to
/// `lsn` (its header and whole batches; 0 if it holds none).
pub fn segment_bytes_through(segment: &Path, lsn: u64) -> u64 {
    const SEGMENT_HEADER_LEN: usize = 32;
    let bytes = std::fs::read(segment).unwrap();
    let mut at = SEGMENT_HEADER_LEN;
    let mut through = 0;
    while let Ok(batch) = sextant_engine::journal::decode_batch(&bytes[at.min(bytes.len())..]) {
        if batch.first_lsn > lsn {
            break;
        }
        at += batch.len;
        through = at;
    }
    through as u64
}

/// The keys under `prefix` in etcd.
pub fn etcd_keys(url: &str, prefix: &str) -> Vec<String> {
    use sextant_coordinator::etcd_client::{Client, GetOptions};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = Client::connect([url], None).await.unwrap();
        let r = c
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .unwrap();
        r.kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
            .collect()
    })
}

/// A library client (default options, no spool) of the server at `addr`,
/// proving the cluster secret kept in `secret_dir/secret`.
pub fn library_client(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    secret_dir: &Path,
) -> sextant_client::Client {
    let text = std::fs::read_to_string(secret_dir.join("secret")).unwrap();
    rt.block_on(sextant_client::Client::connect(
        addr,
        &text,
        sextant_client::Options::default(),
    ))
    .unwrap()
}

/// The owner of `table` in a `cluster status --json` (empty: none).
pub fn owner_in(s: &serde_json::Value, table: u64) -> String {
    s["tables"]
        .as_array()
        .and_then(|v| v.iter().find(|t| t["table"].as_u64() == Some(table)))
        .and_then(|t| t["owner"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The table whose SOID range holds `soid` in a `cluster status --json`.
pub fn table_of(s: &serde_json::Value, soid: u128) -> Option<u64> {
    let hex = |v: &serde_json::Value| u128::from_str_radix(v.as_str()?, 16).ok();
    s["tables"].as_array()?.iter().find_map(|t| {
        let (first, last) = (hex(&t["first"])?, hex(&t["last"])?);
        (first <= soid && soid <= last)
            .then(|| t["table"].as_u64())
            .flatten()
    })
}
