//! Membership against a real etcd (Debian's `etcd-server`, 3.4): joining,
//! keeping the lease alive, a paused etcd (the timer runs out, nothing
//! hangs), an etcd killed and restarted (the keep-alive stream is made
//! again), a name in use. Skipped, and said so, where no `etcd` binary is
//! installed (scripts/ensure-deps.sh installs it for the test suite).

mod common;

use common::{within, Etcd, SIGCONT, SIGSTOP};
use sextant_coordinator::{CoordError, EtcdConfig, Membership, MembershipConfig};
use std::time::{Duration, Instant};

fn config(e: &Etcd, name: &str) -> MembershipConfig {
    let etcd = EtcdConfig {
        request_timeout: Duration::from_millis(1_000),
        ..EtcdConfig::new(vec![e.endpoint()])
    };
    MembershipConfig {
        ttl: Duration::from_secs(3),
        margin: Duration::from_millis(300),
        ..MembershipConfig::new(etcd, name, "127.0.0.1:1")
    }
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
