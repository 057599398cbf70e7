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

/// The interpreter the non-root caller runs (the one on PATH may be a
/// shim under root's home, which nobody may read).
const PY: &str = "/usr/bin/python3";

/// fsync and fsyncdir are anyone's: a user who is not root, writing a
/// file of their own through the mount, gets the same journal sync (the
/// request reveals nothing, so the server asks for no power).
#[test]
fn a_user_who_is_not_root_fsyncs_through_the_mount() {
    if !common::fuse_available() {
        return;
    }
    let have_setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok();
    if !have_setpriv || !std::path::Path::new(PY).exists() {
        eprintln!("SKIPPED: needs setpriv and {PY}");
        return;
    }
    let m = common::Mounted::start_with(SLOW);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(common::connect(&m.addr, &m.data()));
    let syncs = || rt.block_on(syncs(&c));
    let d = m.mnt.join("shared");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::File::open(&m.mnt).unwrap().sync_all().unwrap();

    let as_nobody = |script: &str| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .args([PY, "-c", script])
            .arg(&d)
            .current_dir("/")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "as nobody: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let before = syncs();
    as_nobody(
        "import os, sys\n\
         fd = os.open(sys.argv[1] + '/f', os.O_WRONLY | os.O_CREAT, 0o644)\n\
         os.write(fd, b'mine')\n\
         os.fsync(fd)",
    );
    assert!(
        syncs() > before,
        "a non-root fsync returned before the journal was synced through its create"
    );
    let before = syncs();
    as_nobody(
        "import os, sys\n\
         os.close(os.open(sys.argv[1] + '/g', os.O_WRONLY | os.O_CREAT, 0o644))\n\
         fd = os.open(sys.argv[1], os.O_RDONLY)\n\
         os.fsync(fd)",
    );
    assert!(
        syncs() > before,
        "a non-root fsyncdir returned before the journal was synced through a create in it"
    );
    let meta = std::fs::metadata(d.join("f")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534);
}

/// A program in fsync (of a file, then of a directory) while the server
/// is stopped (SIGSTOP) waits for it, goes away at once when killed
/// (nothing was changed: there is nothing to wait for), and once the
/// server runs again an fsync completes.
#[test]
fn an_fsync_waiting_for_a_stopped_server_can_be_killed() {
    if !common::fuse_available() || !std::path::Path::new(PY).exists() {
        return;
    }
    let m = common::Mounted::start_with(SLOW);
    // Written and fsync'd: the fsync below has no held change to send (a
    // change that went out is waited for, as any mutation), only the
    // journal sync to ask for.
    let mut f = std::fs::File::create(m.mnt.join("f")).unwrap();
    f.write_all(b"x").unwrap();
    f.sync_all().unwrap();
    drop(f);
    for what in ["f", "."] {
        common::signal(&m.server, "-STOP");
        let mut program = KillOnDrop(
            std::process::Command::new(PY)
                .args([
                    "-c",
                    "import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nos.fsync(fd)",
                ])
                .arg(m.mnt.join(what))
                .current_dir("/")
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(700));
        let waited = program.0.try_wait().unwrap().is_none();
        let t = Instant::now();
        program.0.kill().unwrap();
        let mut gone = false;
        while t.elapsed() < Duration::from_secs(3) {
            if program.0.try_wait().unwrap().is_some() {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        common::signal(&m.server, "-CONT");
        assert!(
            waited,
            "{what}: the fsync returned while the server was stopped"
        );
        assert!(
            gone,
            "{what}: the fsync's program still there 3 s after SIGKILL"
        );
        std::fs::File::open(m.mnt.join(what))
            .unwrap()
            .sync_all()
            .unwrap();
    }
}
