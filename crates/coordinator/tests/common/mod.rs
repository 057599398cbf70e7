//! A real etcd for the tests (Debian's `etcd-server`, 3.4, with
//! `--unsafe-no-fsync`): started per test on free ports, killed (-9) and
//! restarted on the same data, paused. Tests skip, and say so, where no
//! `etcd` binary is installed (scripts/ensure-deps.sh installs it).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
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
    pub fn start(dir: &Path) -> Option<Etcd> {
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

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.client)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    /// A connected client, once etcd answers (it listens before it has
    /// elected itself leader).
    pub async fn client(&self) -> etcd_client::Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let c = etcd_client::Client::connect([self.endpoint()], None).await;
            if let Ok(mut c) = c {
                if c.get("x", None).await.is_ok() {
                    return c;
                }
            }
            assert!(Instant::now() < deadline, "etcd does not answer");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        unsafe { libc_kill(self.child.id() as i32, sig) };
    }

    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Etcd::spawn(&self.dir, self.client, self.peer);
        self.wait_ready();
    }
}

/// A scratch directory and an etcd of the test's own in it (`None`,
/// said why, without an etcd binary: the test is skipped).
pub fn dir_and_etcd() -> Option<(tempfile::TempDir, Etcd)> {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(dir.path())?;
    Some((dir, etcd))
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.signal(SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub const SIGSTOP: i32 = 19;
pub const SIGCONT: i32 = 18;

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// Waits up to `within` for `f`; the time it took.
pub async fn within(what: &str, within: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

/// Logs to the test's output (`RUST_LOG` picks what).
pub fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A client of `e` and the config of a cluster under `prefix`, once etcd
/// answers (within 30 s).
pub async fn connected(
    e: &Etcd,
    prefix: &str,
) -> (etcd_client::Client, sextant_coordinator::EtcdConfig) {
    let cfg = sextant_coordinator::EtcdConfig {
        prefix: prefix.into(),
        request_timeout: Duration::from_secs(2),
        ..sextant_coordinator::EtcdConfig::new(vec![e.endpoint()])
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = sextant_coordinator::etcd::connect(&cfg).await {
            if c.get("x", None).await.is_ok() {
                return (c, cfg);
            }
        }
        assert!(Instant::now() < deadline, "etcd did not answer");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
