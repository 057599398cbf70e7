//! fsync's promise with the journal synced in the background (the
//! default, issue 23): a server that replies before its journal is synced
//! must, when a client asks (`Client::sync_journal`; fsync and fsyncdir
//! through a mount), sync it through everything it acknowledged before
//! answering. The servers here sync in the background every 10 s, so a
//! journal sync seen within the test is one the request caused; the
//! server's journal sync counter (`stats`) shows it.

use sextant_client::Client;
use sextant_types::{Credentials, Soid};
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;
use common::{spawn_server_with, KillOnDrop};

/// The background interval: far longer than any step of these tests.
const SLOW: &str = "background:10s";

async fn syncs(c: &Client) -> u64 {
    c.stats(&Credentials::root()).await.unwrap().0.journal_syncs
}

/// The request: in `background` mode it syncs the journal through every
/// acknowledged operation (one sync, well before the interval) for any
/// caller; the admin's write-back keeps its permission rule; in `fsync`
/// mode it answers without another sync (every reply waited for its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_journal_syncs_what_was_acknowledged_for_any_caller() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (child, addr) = spawn_server_with(
        &data,
        "127.0.0.1:0",
        &["--journal-sync", SLOW],
        Stdio::inherit(),
    );
    let _server = KillOnDrop(child);
    let c = common::connect(&addr, &data).await;
    let root = Credentials::root();
    let dir = c.mkdir(&root, Soid::ROOT, b"d", 0o777).await.unwrap().soid;
    // Nothing pending: the next record starts the 10 s timer.
    c.sync_journal(&root, Soid::ROOT).await.unwrap();
    let before = syncs(&c).await;
    let user = Credentials::user(1000, 1000);
    c.create(&user, dir, b"f", 0o644, true).await.unwrap();
    assert_eq!(
        syncs(&c).await,
        before,
        "acknowledged before its sync (the journal syncs every 10 s)"
    );
    let started = Instant::now();
    c.sync_journal(&user, dir).await.unwrap();
    assert!(
        syncs(&c).await > before,
        "a sync_journal returned before the journal was synced through the create"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "it waited for the background interval ({:?})",
        started.elapsed()
    );
    // Nothing new acknowledged: no further sync.
    let now = syncs(&c).await;
    c.sync_journal(&user, dir).await.unwrap();
    assert_eq!(syncs(&c).await, now);
    // The write-back of every table stays the administrator's.
    assert_eq!(
        c.sync(&user).await.unwrap_err().errno(),
        libc::EPERM,
        "a user's write-back"
    );

    // `fsync`: every reply waited for its sync; nothing left to sync.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (child, addr) = spawn_server_with(
        &data,
        "127.0.0.1:0",
        &["--journal-sync", "fsync"],
        Stdio::inherit(),
    );
    let _server = KillOnDrop(child);
    let c = common::connect(&addr, &data).await;
    c.mkdir(&root, Soid::ROOT, b"d", 0o777).await.unwrap();
    let before = syncs(&c).await;
    c.sync_journal(&user, Soid::ROOT).await.unwrap();
    assert_eq!(syncs(&c).await, before, "fsync mode: nothing to sync");
}

/// Through a mount: a create is acknowledged before its journal is
/// synced; fsync of the file, and fsyncdir of the directory after another
/// create in it, return only once the journal is synced through it —
/// without waiting for the background interval.
#[test]
fn fsync_and_fsyncdir_through_the_mount_sync_the_journal() {
    if !common::fuse_available() {
        return;
    }
    let m = common::Mounted::start_with(SLOW);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(common::connect(&m.addr, &m.data()));
    let syncs = || rt.block_on(syncs(&c));
    let d = m.mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    // Everything so far synced (fsyncdir of the mount's root): nothing is
    // pending, and the next record starts the 10 s timer.
    std::fs::File::open(&m.mnt).unwrap().sync_all().unwrap();

    let before = syncs();
    let mut f = std::fs::File::create(d.join("f")).unwrap();
    f.write_all(b"kept\n").unwrap();
    assert_eq!(syncs(), before, "the create was acknowledged unsynced");
    let started = Instant::now();
    f.sync_all().unwrap();
    assert!(
        syncs() > before,
        "fsync of a new file returned before the journal was synced through its create"
    );
    drop(f);

    let before = syncs();
    std::fs::File::create(d.join("g")).unwrap();
    std::fs::rename(d.join("g"), d.join("h")).unwrap();
    assert_eq!(syncs(), before, "the create was acknowledged unsynced");
    std::fs::File::open(&d).unwrap().sync_all().unwrap();
    assert!(
        syncs() > before,
        "fsync of a directory returned before the journal was synced through a create in it"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the syncs waited for the background interval ({:?})",
        started.elapsed()
    );
}
