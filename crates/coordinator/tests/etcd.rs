//! Membership against a real etcd (Debian's `etcd-server`, 3.4): joining,
//! keeping the lease alive, a paused etcd (the timer runs out, nothing
//! hangs), an etcd killed and restarted (the keep-alive stream is made
//! again), a name in use. Skipped, and said so, where no `etcd` binary is
//! installed (scripts/ensure-deps.sh installs it for the test suite).

use sextant_coordinator::{CoordError, Membership, MembershipConfig};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Etcd {
    child: Child,
    dir: PathBuf,
    client: u16,
    peer: u16,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Etcd {
    fn start(dir: &Path) -> Option<Etcd> {
        if Command::new("etcd").arg("--version").output().is_err() {
            eprintln!("skipped: no etcd binary (apt-get install etcd-server)");
            return None;
        }
        let (client, peer) = (free_port(), free_port());
        let child = Etcd::spawn(dir, client, peer);
        let e = Etcd {
            child,
            dir: dir.to_path_buf(),
            client,
            peer,
        };
        e.wait_ready();
        Some(e)
    }

    fn spawn(dir: &Path, client: u16, peer: u16) -> Child {
        let c = format!("http://127.0.0.1:{client}");
        let p = format!("http://127.0.0.1:{peer}");
        Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
            .args([
                "--listen-peer-urls",
                &p,
                "--initial-advertise-peer-urls",
                &p,
            ])
            .args(["--initial-cluster", &format!("t={p}"), "--unsafe-no-fsync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn etcd")
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.client)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc_kill(self.child.id() as i32, sig) };
    }

    fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Etcd::spawn(&self.dir, self.client, self.peer);
        self.wait_ready();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.signal(SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SIGSTOP: i32 = 19;
const SIGCONT: i32 = 18;

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

fn config(e: &Etcd, name: &str) -> MembershipConfig {
    MembershipConfig {
        ttl: Duration::from_secs(3),
        margin: Duration::from_millis(300),
        request_timeout: Duration::from_millis(1_000),
        ..MembershipConfig::new(vec![e.endpoint()], name)
    }
}

/// Waits up to `within` for `f`; the time it took.
async fn within(what: &str, within: Duration, f: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_survives_a_paused_and_a_restarted_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut etcd) = Etcd::start(dir.path()) else {
        return;
    };
    // etcd listens before it has elected itself leader: join once it
    // answers (a loaded machine takes seconds).
    let deadline = Instant::now() + Duration::from_secs(30);
    let m = loop {
        match Membership::join(config(&etcd, "s1")).await {
            Ok(m) => break m,
            Err(CoordError::NameTaken { .. }) => panic!("s1 taken on a fresh etcd"),
            Err(e) if Instant::now() < deadline => {
                eprintln!("etcd not ready yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("join: {e}"),
        }
    };
    assert!(m.valid());
    // Kept alive past several TTLs.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(m.valid(), "the keeper keeps the lease alive");
    assert_eq!(m.generation(), 1);

    // A second server under the same name is refused while s1 lives.
    match Membership::join(config(&etcd, "s1")).await {
        Err(CoordError::NameTaken { .. }) => {}
        other => panic!("expected NameTaken, got {:?}", other.map(|m| m.lease())),
    }

    // etcd paused (SIGSTOP): the timer runs out within a TTL, and asking
    // it never hangs.
    etcd.signal(SIGSTOP);
    let ran_out = within(
        "the timer runs out while etcd is paused",
        Duration::from_secs(8),
        || {
            let asked = Instant::now();
            let v = m.valid();
            assert!(asked.elapsed() < Duration::from_millis(200));
            !v
        },
    )
    .await;
    // Within the TTL (3 s), with slack for a loaded machine's polling.
    assert!(
        ran_out <= Duration::from_secs(4),
        "ran out after {ran_out:?}"
    );
    // Paused longer than the TTL, then back: membership again (etcd
    // expires the old lease on waking, or extends it; either way valid).
    tokio::time::sleep(Duration::from_secs(2)).await;
    etcd.signal(SIGCONT);
    within(
        "valid again after etcd woke",
        Duration::from_secs(10),
        || m.valid(),
    )
    .await;

    // etcd killed and restarted on the same data: the keep-alive stream
    // is made again.
    let before = m.lease();
    etcd.kill_and_restart();
    tokio::time::sleep(Duration::from_secs(4)).await;
    within(
        "valid after an etcd restart",
        Duration::from_secs(10),
        || m.valid(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(m.valid(), "still kept alive after the restart");
    eprintln!(
        "lease {before} -> {} (generation {})",
        m.lease(),
        m.generation()
    );
}
