//! Log-less on a cluster (issue 21, item 6): a client that ends on purpose
//! leaves nothing acknowledged depending on it — for every server it did
//! operations on, not only the one it connected to. Real processes on a
//! real etcd: log-less servers a (`/d`'s table), b (`/e`'s) and c, and
//! clients whose home is c, so every operation in `/d` and `/e` goes to a
//! or b and its redo entries are held as backups of those servers (a and
//! b sync their journals every 10 s here: the entries stay unsynced).
//!
//! - A library client's `release_backups` has a and b write back what its
//!   backups hold (nothing held for either afterwards), and its
//!   `spool_backups` keeps a's and b's backups on disk, each under its
//!   server's address (where the next client of that server reads them).
//! - A `sextant` command run against c that creates a file on a and one on
//!   b exits cleanly; then a's and b's machines lose power (kill -9, the
//!   unsynced journal tail cut): c completes their journals and takes
//!   their tables, and both files are there — the command's exit released
//!   its backups of both servers. Before the fix only c's (the home
//!   server's) were released, so the exit counted as a client death and
//!   both files were lost.
//! - A client whose home is a spools its backups of a and of b; the next
//!   client started on the machine, again one of a, hands b's spool back
//!   to b (which writes it back) and removes it; b then loses power and
//!   the file only that spool held survives its failover. Before the fix
//!   b's spool was read back only by a client whose home is b.
//! - The server completing a dead server's journal is paused (SIGSTOP,
//!   at the test-only fault point `completion-claimed`) while it holds the
//!   claim on that completion: the claim lives on its lease, so it ends
//!   with it, and another server completes the journal and takes the
//!   tables; nothing acknowledged is lost, also once the paused server
//!   carries on.
//! - The server completing a paused server's journal checks its claim
//!   and stops right before the write (`stop-at:completion-write`); the
//!   paused server carries on, joins again (a new run) and serves, and
//!   the late completion names its old run: nothing it acknowledged
//!   afterwards is lost when it dies.
//! - The coordinator's release of its claim is lost (the test-only fault
//!   `lose-release:N`, as when etcd does not answer): it is sent again
//!   until it gets through, so the claim ends while the coordinator
//!   lives.
//!
//! Skipped, and said so, without an `etcd` binary.

mod common;

use common::{cut_journal, etcd_keys, journal_lengths, walk_files};
use common::{
    dir_and_etcd, sextant_ok, spawn_server_env, status_on, tables_by_server, wait_for,
    wait_for_every, KillOnDrop,
};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A 10 s background sync (the tail stays unsynced) and a grace of 4 s
/// from a dead server's death (the lease is 2 s).
const FLAGS: [&str; 6] = [
    "--durability",
    "logless",
    "--journal-sync",
    "background:10s",
    "--recovery-grace",
    "4s",
];

/// `sextant serve` as log-less member `name`, its data in `dir/name`, the
/// shared store `dir/store`.
fn start(dir: &Path, etcd: &str, name: &str) -> (KillOnDrop, String) {
    start_with(dir, etcd, name, &[], &[])
}

/// [`start`] with more `serve` flags and environment (a test-only
/// `SEXTANT_FAULT`).
fn start_with(
    dir: &Path,
    etcd: &str,
    name: &str,
    more: &[&str],
    env: &[(&str, &str)],
) -> (KillOnDrop, String) {
    let store = dir.join("store");
    let mut args = FLAGS.to_vec();
    args.extend_from_slice(more);
    args.extend(["--etcd", etcd, "--name", name, "--cluster-store"]);
    args.push(store.to_str().unwrap());
    let (child, addr) = spawn_server_env(
        &dir.join(name),
        "127.0.0.1:0",
        &args,
        Stdio::inherit(),
        &[&[("SEXTANT_LEASE_TTL", "2s")], env].concat(),
    );
    (KillOnDrop(child), addr)
}

/// Three log-less members: c first (the coordinator, holding the root
/// table) with the test-only fault `fault`, then a and b, all members.
struct CFirst {
    c: KillOnDrop,
    c_addr: String,
    /// The directory holding the cluster secret (c's).
    secret: PathBuf,
    a: KillOnDrop,
    b: KillOnDrop,
    b_addr: String,
}

fn c_first_then_a_and_b(dir: &Path, etcd: &str, fault: &str) -> CFirst {
    let (c, c_addr) = start_with(dir, etcd, "c", &[], &[("SEXTANT_FAULT", fault)]);
    let secret = dir.join("c");
    wait_for("the root table on c", Duration::from_secs(30), || {
        tables_of(etcd, &secret, "c") > 0
    });
    let (a, _a_addr) = start(dir, etcd, "a");
    let (b, b_addr) = start(dir, etcd, "b");
    wait_for("a and b members", Duration::from_secs(30), || {
        tables_by_server(&status_on(etcd, &secret)).len() == 3
    });
    CFirst {
        c,
        c_addr,
        secret,
        a,
        b,
        b_addr,
    }
}

fn tables_of(etcd: &str, secret: &Path, server: &str) -> u64 {
    tables_by_server(&status_on(etcd, secret))
        .iter()
        .find(|t| t.0 == server)
        .map_or(0, |t| t.1)
}

struct Trio {
    a: KillOnDrop,
    b: KillOnDrop,
    _c: KillOnDrop,
    a_addr: String,
    b_addr: String,
    c_addr: String,
    secret: PathBuf,
}

/// Small tables (a directory past the fourth gets a table of its own),
/// so that `/d` and `/e` can live on different servers.
const SMALL_TABLES: &str = "table_dir_limit = 4\ntable_inode_limit = 32\n";

/// `/d` (holding `f0` … `f3`) on a, `/e` (the same) on b, in tables of
/// their own; the clients' home is c.
fn trio(dir: &Path, etcd: &str) -> Trio {
    let config = dir.join("small-tables.toml");
    std::fs::write(&config, SMALL_TABLES).unwrap();
    let more = ["--config", config.to_str().unwrap()];
    let (a, a_addr) = start_with(dir, etcd, "a", &more, &[]);
    let secret = dir.join("a");
    wait_for("the root table on a", Duration::from_secs(30), || {
        tables_of(etcd, &secret, "a") > 0
    });
    for d in ["d", "e", "r", "s"] {
        sextant_ok(&a_addr, &secret, &["mkdir", &format!("/{d}")]);
        let files: Vec<String> = (0..4).map(|f| format!("/{d}/f{f}")).collect();
        let mut touch = vec!["touch"];
        touch.extend(files.iter().map(String::as_str));
        sextant_ok(&a_addr, &secret, &touch);
    }
    let (b, b_addr) = start_with(dir, etcd, "b", &more, &[]);
    let (c, c_addr) = start_with(dir, etcd, "c", &more, &[]);
    wait_for("b and c members", Duration::from_secs(30), || {
        tables_by_server(&status_on(etcd, &secret)).len() == 3
    });
    let td = common::move_table(etcd, &secret, "/d", "a");
    let te = common::move_table(etcd, &secret, "/e", "b");
    assert_ne!(td, te, "/d and /e share a table: the test needs them apart");
    Trio {
        a,
        b,
        _c: c,
        a_addr,
        b_addr,
        c_addr,
        secret,
    }
}

/// What `client` holds for the server at `addr` (0 once dropped).
fn held_for(client: &sextant_client::Client, addr: &str) -> usize {
    client.peer_backup_stats(addr).map_or(0, |s| s.entries)
}

/// `ls DIR` through the server at `addr`, sorted.
fn ls(addr: &str, secret: &Path, dir: &str) -> Vec<String> {
    let listing = sextant_ok(addr, secret, &["ls", dir]);
    let mut names: Vec<String> = listing.split_whitespace().map(String::from).collect();
    names.sort_unstable();
    names
}

/// A library client of the server at `addr` (the cluster's secret found
/// in `secret_dir`) that spools its log-less backups into `spool`.
fn spooling_client(
    rt: &tokio::runtime::Runtime,
    secret_dir: &Path,
    addr: &str,
    spool: &Path,
) -> sextant_client::Client {
    let text = std::fs::read_to_string(secret_dir.join("secret")).unwrap();
    rt.block_on(sextant_client::Client::connect(
        addr,
        &text,
        sextant_client::Options {
            backup_dir: Some(spool.to_path_buf()),
            ..Default::default()
        },
    ))
    .unwrap()
}

/// A library client (home c) that made files on a and on b holds
/// backups of both; `spool_backups` keeps each server's on disk under
/// that server's address, and `release_backups` has both write back what
/// they hold: nothing is held for either afterwards.
#[test]
fn release_and_spool_cover_every_server_the_client_holds_backups_of() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let t = trio(dir.path(), &etcd.url);
    let spool = dir.path().join("spool");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = spooling_client(&rt, t.secret.as_path(), &t.c_addr, &spool);
    let root = sextant_types::Credentials::root();
    rt.block_on(async {
        for d in ["/d", "/e"] {
            let parent = client.resolve(&root, d.as_bytes(), true).await.unwrap();
            for i in 0..5 {
                let name = format!("g{i}");
                client
                    .create(&root, parent.soid, name.as_bytes(), 0o644, true)
                    .await
                    .unwrap();
            }
        }
    });
    let (on_a, on_b) = (held_for(&client, &t.a_addr), held_for(&client, &t.b_addr));
    assert!(on_a >= 5 && on_b >= 5, "held for a: {on_a}, for b: {on_b}");

    // Spooled: a file under each server's address.
    let first = client.spool_backups().unwrap();
    assert!(first.is_some(), "something written");
    for addr in [&t.a_addr, &t.b_addr] {
        let files = walk_files(&sextant_client::spool::server_dir(&spool, addr));
        assert_eq!(files.len(), 1, "one spool file for {addr}: {files:?}");
        let back = sextant_client::spool::load(&spool, addr).unwrap();
        assert!(back.entries.len() >= 5, "{addr}: {back:?}");
    }

    // Released: a and b wrote back; nothing is held for either.
    let started = Instant::now();
    let left = rt.block_on(client.release_backups(&root)).unwrap();
    eprintln!("released in {:?}", started.elapsed());
    assert_eq!(
        (held_for(&client, &t.a_addr), held_for(&client, &t.b_addr)),
        (0, 0),
        "backups of a and b still held after release_backups"
    );
    assert_eq!(left, 0);
    assert_eq!(client.backup_stats().entries, 0);
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// A `sextant` command (home c) creates `/d/x` (on a) and `/e/y` (on b)
/// and exits cleanly; then a and b lose power together, their unsynced
/// journal tails cut. c completes both journals and takes every table:
/// both files are there, because the command's exit had a and b write
/// back what its backups held.
#[test]
fn a_command_that_exits_cleanly_leaves_nothing_on_its_backups_of_other_servers() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let mut t = trio(dir.path(), &etcd.url);
    let store = dir.path().join("store/members");
    let (ja, jb) = (store.join("a/journal"), store.join("b/journal"));
    let (kept_a, kept_b) = (journal_lengths(&ja), journal_lengths(&jb));
    sextant_ok(&t.c_addr, &t.secret, &["touch", "/d/x", "/e/y"]);
    common::kill9(&mut t.a.0);
    common::kill9(&mut t.b.0);
    cut_journal(&ja, &kept_a);
    cut_journal(&jb, &kept_b);
    let died = Instant::now();
    wait_for("c took every table", Duration::from_secs(30), || {
        let s = tables_by_server(&status_on(&etcd.url, &t.secret));
        s.iter().all(|(n, k)| n == "c" || *k == 0) && s.iter().any(|(n, k)| n == "c" && *k > 0)
    });
    eprintln!("c took a's and b's tables {:?} after", died.elapsed());
    let four = ["f0", "f1", "f2", "f3"];
    assert_eq!(
        ls(&t.c_addr, &t.secret, "/d"),
        [&four[..], &["x"]].concat(),
        "a's part"
    );
    assert_eq!(
        ls(&t.c_addr, &t.secret, "/e"),
        [&four[..], &["y"]].concat(),
        "b's part"
    );
    drop(etcd.child);
}

/// A library client whose home is a makes `/d/x` (on a) and `/e/y` (on
/// b), spools its backups into `spool` (each server's under its address)
/// and is gone; b's spool directory.
fn spool_x_and_y(t: &Trio, spool: &Path) -> PathBuf {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = spooling_client(&rt, t.secret.as_path(), &t.a_addr, spool);
    let root = sextant_types::Credentials::root();
    rt.block_on(async {
        for (d, name) in [("/d", "x"), ("/e", "y")] {
            let parent = client.resolve(&root, d.as_bytes(), true).await.unwrap();
            let made = client.create(&root, parent.soid, name.as_bytes(), 0o644, true);
            made.await.unwrap();
        }
    });
    assert!(held_for(&client, &t.b_addr) >= 1, "/e/y's entry held for b");
    client.spool_backups().unwrap();
    let b_spool = sextant_client::spool::server_dir(spool, &t.b_addr);
    assert_eq!(walk_files(&b_spool).len(), 1, "b's backups spooled");
    b_spool
}

/// Waits until b holds no table (its lease gone, its journal completed,
/// its tables failed over); then `/e` must hold `y`.
fn b_failed_over_with_y(t: &Trio, etcd: &str, died: Instant) {
    wait_for("b's tables taken", Duration::from_secs(30), || {
        let s = tables_by_server(&status_on(etcd, &t.secret));
        s.iter().all(|(n, k)| n != "b" || *k == 0)
    });
    eprintln!("b's tables taken {:?} after its death", died.elapsed());
    let four = ["f0", "f1", "f2", "f3"];
    assert_eq!(
        ls(&t.a_addr, &t.secret, "/e"),
        [&four[..], &["y"]].concat(),
        "b's part, held only by b's spool"
    );
}

/// A client whose home is a makes `/d/x` (on a) and `/e/y` (on b) and
/// ends having spooled its backups (what a command or a mount does when
/// the servers do not take them at its end): a's under a's address, b's
/// under b's. The next client on this machine is again one of a (a
/// `sextant ls /d`): it reads b's spool back too, hands it to b, has b
/// write it back, and removes it. Then b loses power (kill -9, the
/// unsynced journal tail cut) and its tables fail over: `/e/y` is there.
/// Before the fix only a client whose home is b read b's spool back, and
/// `/e/y`, which only that spool held, was lost.
#[test]
fn the_next_client_of_the_home_server_hands_back_a_spool_of_another_server() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let started = Instant::now();
    let mut t = trio(dir.path(), &etcd.url);
    // Where `sextant --data <a's directory>` keeps its spool.
    let spool = t.secret.join("backups");
    let jb = dir.path().join("store/members/b/journal");
    let kept_b = journal_lengths(&jb);
    let b_spool = spool_x_and_y(&t, &spool);
    sextant_ok(&t.a_addr, &t.secret, &["ls", "/d"]);
    let left = walk_files(&b_spool);
    common::kill9(&mut t.b.0);
    cut_journal(&jb, &kept_b);
    b_failed_over_with_y(&t, &etcd.url, Instant::now());
    assert_eq!(
        left,
        Vec::<PathBuf>::new(),
        "b's spool removed once written back"
    );
    eprintln!("whole test {:?}", started.elapsed());
    drop(etcd.child);
}

/// The same spool of b, but b loses power before the next client of a
/// starts: that client finds b unreachable and hands b's spool to another
/// server, which keeps it in the shared store for the completion of b's
/// journal; `/e/y` survives b's failover, and the spool is removed once
/// kept. Before the fix nobody read b's spool, and `/e/y` was lost.
#[test]
fn a_spool_of_a_server_that_died_goes_to_the_completion_of_its_journal() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let started = Instant::now();
    let mut t = trio(dir.path(), &etcd.url);
    let spool = t.secret.join("backups");
    let jb = dir.path().join("store/members/b/journal");
    let kept_b = journal_lengths(&jb);
    let b_spool = spool_x_and_y(&t, &spool);
    common::kill9(&mut t.b.0);
    cut_journal(&jb, &kept_b);
    let died = Instant::now();
    sextant_ok(&t.a_addr, &t.secret, &["ls", "/d"]);
    eprintln!(
        "the next command ended {:?} after b's death",
        died.elapsed()
    );
    let left = walk_files(&b_spool);
    b_failed_over_with_y(&t, &etcd.url, died);
    assert_eq!(
        left,
        Vec::<PathBuf>::new(),
        "b's spool removed once kept elsewhere"
    );
    eprintln!("whole test {:?}", started.elapsed());
    drop(etcd.child);
}

/// Whether process `pid` is stopped (SIGSTOP).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// c (started first: the coordinator, the root's holder) stops itself
/// right after it claimed the completion of a's journal (a killed with
/// its unsynced tail cut, `/d` and ten files a client of b made on it).
/// The claim is on c's lease: once that ends, b (coordinator now)
/// completes a's journal — and c's — and takes every table, with every
/// file. When c carries on (its claim and lease long gone) nothing
/// acknowledged is undone.
#[test]
fn a_server_paused_while_it_holds_a_completion_claim_is_completed_past() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let started = Instant::now();
    let CFirst {
        c,
        c_addr,
        secret,
        mut a,
        b: _b,
        b_addr,
    } = c_first_then_a_and_b(dir.path(), &etcd.url, "stop-at:completion-claimed");
    let coordinator = status_on(&etcd.url, &secret)["coordinator"].clone();
    assert_eq!(coordinator, "c", "the first server coordinates");
    sextant_ok(&c_addr, &secret, &["mkdir", "/d"]);
    common::move_table(&etcd.url, &secret, "/d", "a");
    let journal = dir.path().join("store/members/a/journal");
    let kept = journal_lengths(&journal);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &b_addr, &secret);
    let root = sextant_types::Credentials::root();
    let mut want: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
    rt.block_on(async {
        let d = client.resolve(&root, b"/d", true).await.unwrap();
        for n in &want {
            let made = client.create(&root, d.soid, n.as_bytes(), 0o644, true);
            made.await.unwrap();
        }
    });
    want.sort_unstable();
    common::kill9(&mut a.0);
    cut_journal(&journal, &kept);
    let died = Instant::now();
    wait_for(
        "c paused holding the claim",
        Duration::from_secs(20),
        || stopped(c.0.id()),
    );
    eprintln!("c paused at its claim {:?} after a's death", died.elapsed());
    wait_for("b took every table", Duration::from_secs(30), || {
        let s = tables_by_server(&status_on(&etcd.url, &secret));
        s.iter().all(|(n, k)| n == "b" || *k == 0) && s.iter().any(|(n, k)| n == "b" && *k > 0)
    });
    eprintln!("b took every table {:?} after a's death", died.elapsed());
    assert_eq!(ls(&b_addr, &secret, "/d"), want, "completed past c's claim");
    common::signal(&c.0, "-CONT");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ls(&b_addr, &secret, "/d"), want, "after c carried on");
    eprintln!("whole test {:?}", started.elapsed());
    drop(client);
    drop(rt);
    drop(c);
    drop(etcd.child);
}

/// c (the coordinator) completes the journal of a, killed, and its first
/// six attempts to release the claim are lost (`lose-release:6`, as when
/// etcd does not answer them). The claim is seen standing, then gone
/// within seconds while c lives: the release is sent again until it gets
/// through. Sent once, as before, it stood for as long as c lived, and a
/// — back as a member — was refused every table (`refuse_while_claimed`;
/// the simulation's seeds 26, 131, …).
#[test]
fn a_lost_release_of_a_completion_claim_is_sent_again() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let fault = [("SEXTANT_FAULT", "lose-release:6")];
    let (mut c, c_addr) = start_with(dir.path(), &etcd.url, "c", &[], &fault);
    let secret = dir.path().join("c");
    wait_for("the root table on c", Duration::from_secs(30), || {
        tables_of(&etcd.url, &secret, "c") > 0
    });
    let (mut a, _a_addr) = start(dir.path(), &etcd.url, "a");
    let (_b, _b_addr) = start(dir.path(), &etcd.url, "b");
    wait_for("a and b members", Duration::from_secs(30), || {
        tables_by_server(&status_on(&etcd.url, &secret)).len() == 3
    });
    sextant_ok(&c_addr, &secret, &["mkdir", "/d"]);
    common::move_table(&etcd.url, &secret, "/d", "a");
    common::kill9(&mut a.0);
    let claims = "/sextant/logless-claim/";
    wait_for("c's claim on a's journal", Duration::from_secs(30), || {
        !etcd_keys(&etcd.url, claims).is_empty()
    });
    let seen = Instant::now();
    wait_for("the claim released", Duration::from_secs(15), || {
        etcd_keys(&etcd.url, claims).is_empty()
    });
    eprintln!("claim released {:?} after it was seen", seen.elapsed());
    assert!(
        c.0.try_wait().unwrap().is_none(),
        "c still runs: its lease did not take the claim"
    );
    drop(etcd.child);
}

/// The last hole of the claim (issue 21 item 6; the simulation's
/// `stop_before_completion_write`). c, the coordinator, claims the
/// completion of a's journal — a is paused (SIGSTOP) past its lease and
/// the grace — finds its claim standing right before the write, and stops
/// there (`stop-at:completion-write`). a carries on and joins again; once
/// c's lease has taken the claim, a takes `/d` back and a client of b
/// creates files in it. Then c carries on and writes its completion, and
/// a's process dies (kill -9): b completes a's journal and takes `/d`
/// with every file. With the run going on across the rejoin, c's late
/// completion was that of a's live run, every reader stopped at its end
/// (read before the files), and the files were lost; now a began a new
/// run when it joined again, and the late completion names a run nobody
/// reads.
#[test]
fn a_completion_written_late_after_the_server_joined_again_loses_nothing() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let started = Instant::now();
    let CFirst {
        c,
        c_addr,
        secret,
        mut a,
        b: _b,
        b_addr,
    } = c_first_then_a_and_b(dir.path(), &etcd.url, "stop-at:completion-write");
    assert_eq!(status_on(&etcd.url, &secret)["coordinator"], "c");
    sextant_ok(&c_addr, &secret, &["mkdir", "/d"]);
    // c only coordinates: the root on b, /d on a.
    common::move_table(&etcd.url, &secret, "/", "b");
    common::move_table(&etcd.url, &secret, "/d", "a");
    wait_for("c holds no table", Duration::from_secs(30), || {
        tables_of(&etcd.url, &secret, "c") == 0
    });
    common::signal(&a.0, "-STOP");
    let paused = Instant::now();
    wait_for(
        "c stopped right before writing a's completion",
        Duration::from_secs(30),
        || stopped(c.0.id()),
    );
    eprintln!(
        "c stopped before its write {:?} after a's pause",
        paused.elapsed()
    );
    common::signal(&a.0, "-CONT");
    let claim = "/sextant/logless-claim/a";
    wait_for(
        "c's claim gone with its lease",
        Duration::from_secs(20),
        || etcd_keys(&etcd.url, claim).is_empty(),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &b_addr, &secret);
    let root = sextant_types::Credentials::root();
    let d = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(d) = client.resolve(&root, b"/d", true).await {
                if client
                    .create(&root, d.soid, b"probe", 0o644, true)
                    .await
                    .is_ok()
                {
                    return d;
                }
            }
            assert!(Instant::now() < deadline, "a never served /d again");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    eprintln!("a serves /d again {:?} after its pause", paused.elapsed());
    let mut want: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
    rt.block_on(async {
        for n in &want {
            client
                .create(&root, d.soid, n.as_bytes(), 0o644, true)
                .await
                .unwrap();
        }
    });
    want.push("probe".into());
    want.sort_unstable();
    // c carries on and writes the completion it checked its claim for.
    let completions = || {
        std::fs::read_dir(dir.path().join("store/members/a"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("logless.completion-")
            })
            .count()
    };
    assert_eq!(completions(), 0);
    common::signal(&c.0, "-CONT");
    wait_for("c's late completion", Duration::from_secs(20), || {
        completions() > 0
    });
    // a's process dies (its journal stays whole; the engine tests cover
    // a power loss, which a real-process cut could not time against a's
    // write-backs).
    common::kill9(&mut a.0);
    let died = Instant::now();
    wait_for("a's tables taken over", Duration::from_secs(60), || {
        tables_of(&etcd.url, &secret, "a") == 0
    });
    eprintln!("a's tables taken over {:?} after its death", died.elapsed());
    let seen = wait_for_ls(&b_addr, &secret, "/d", &want);
    assert_eq!(seen, want, "what a acknowledged after joining again");
    eprintln!("whole test {:?}", started.elapsed());
    drop(client);
    drop(rt);
    drop(c);
    drop(etcd.child);
}

/// `ls dir` through `addr` until it shows `want` (a table just taken over
/// may refuse a moment), at most 30 s; the last listing.
fn wait_for_ls(addr: &str, secret: &Path, dir: &str, want: &[String]) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = ls(addr, secret, dir);
        if got == want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `(clean, run)` of member `name`'s `logless.state` in the shared store.
fn run_state(dir: &Path, name: &str) -> (bool, u64) {
    let file = dir.join(format!("store/members/{name}/logless.state"));
    let text = std::fs::read_to_string(&file).unwrap();
    let parts: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(parts.first(), Some(&"SXTLL1"), "{text}");
    (parts[1] == "1", parts[2].parse().unwrap())
}

/// The completions of member `name`'s runs in the shared store.
fn completion_files(dir: &Path, name: &str) -> Vec<String> {
    std::fs::read_dir(dir.join(format!("store/members/{name}")))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("logless.completion-"))
        .collect()
}

/// Creates `names` in `dir` through `client`, each acknowledged.
fn create_all(
    rt: &tokio::runtime::Runtime,
    client: &sextant_client::Client,
    dir: &str,
    names: &[String],
) {
    let root = sextant_types::Credentials::root();
    rt.block_on(async {
        let d = client.resolve(&root, dir.as_bytes(), true).await.unwrap();
        for n in names {
            let made = client.create(&root, d.soid, n.as_bytes(), 0o644, true);
            made.await.unwrap();
        }
    });
}

fn named(prefix: &str) -> Vec<String> {
    (0..5).map(|i| format!("{prefix}{i}")).collect()
}

/// Waits for `child` to exit (a clean stop), at most `within`; it must
/// have succeeded.
fn exits_cleanly(child: &mut KillOnDrop, what: &str, within: Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            assert!(status.success(), "{what}: {status}");
            eprintln!("{what} {:?} after SIGTERM", start.elapsed());
            return;
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// a serves `/d` (a client's create there succeeds: `probe`, whose
/// record is synced by a's next write-back or kept by the test's cut),
/// under a run other than `run`, named in its state file.
fn serves_d_under_a_new_run(
    rt: &tokio::runtime::Runtime,
    client: &sextant_client::Client,
    dir: &Path,
    run: u64,
    d: &str,
) {
    wait_for("a's new run", Duration::from_secs(60), || {
        run_state(dir, "a") != (false, run)
    });
    let (clean, again) = run_state(dir, "a");
    assert!(!clean && again != run, "a new run: {again:x} after {run:x}");
    let root = sextant_types::Credentials::root();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(d) = client.resolve(&root, d.as_bytes(), true).await {
                if client
                    .create(&root, d.soid, b"probe", 0o644, true)
                    .await
                    .is_ok()
                {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "a never served {d} again");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    assert_eq!(run_state(dir, "a"), (false, again), "one new run");
}

/// a's machine loses power (kill -9, its journal cut to `kept`): its
/// tables are taken over once its journal is completed from the
/// clients' backups, and `d` shows `want` through `addr` (the cluster's
/// secret in c's data directory).
fn a_loses_power_and_d_holds(
    a: &mut KillOnDrop,
    dir: &Path,
    etcd: &str,
    addr: &str,
    kept: &[(PathBuf, u64)],
    d: &str,
    want: &[String],
) {
    // The cluster's secret, in c's data directory.
    let secret = dir.join("c");
    let secret = secret.as_path();
    common::kill9(&mut a.0);
    cut_journal(&dir.join("store/members/a/journal"), kept);
    let died = Instant::now();
    wait_for("a's lease gone", Duration::from_secs(30), || {
        etcd_keys(etcd, "/sextant/member/a").is_empty()
    });
    wait_for("a's tables taken over", Duration::from_secs(90), || {
        tables_of(etcd, secret, "a") == 0
    });
    eprintln!("a's tables taken over {:?} after its death", died.elapsed());
    let seen = wait_for_ls(addr, secret, d, want);
    assert_eq!(seen, want, "what a acknowledged");
}

/// A log-less server stopped cleanly (SIGTERM) and started again (issue
/// 21 item 6). a holds `/d`, where a client of b made five files (a's
/// journal tail unsynced: their entries are the client's backups). a
/// stops: it drains `/d` to another server, writes everything back,
/// marks its run clean and leaves — no completion, no claim, its lease
/// revoked (not left to run out), the files there. Started again it
/// begins a new run, takes `/d` back, and five more files of the same
/// client survive its power loss (the client holds the new run's
/// entries).
#[test]
fn a_server_stopped_cleanly_and_started_again_begins_a_new_run_and_loses_nothing() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    const D: &str = "/d";
    let started = Instant::now();
    let CFirst {
        c: _c,
        c_addr,
        secret,
        mut a,
        b: _b,
        b_addr,
    } = c_first_then_a_and_b(dir.path(), &etcd.url, "none");
    sextant_ok(&c_addr, &secret, &["mkdir", "/d"]);
    common::move_table(&etcd.url, &secret, "/d", "a");
    let (clean, run) = run_state(dir.path(), "a");
    assert!(!clean, "a serves");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &b_addr, &secret);
    let first = named("f");
    create_all(&rt, &client, "/d", &first);

    common::signal(&a.0, "-TERM");
    exits_cleanly(&mut a, "a stopped", Duration::from_secs(90));
    assert_eq!(run_state(dir.path(), "a"), (true, run), "marked clean");
    assert_eq!(completion_files(dir.path(), "a"), Vec::<String>::new());
    assert!(etcd_keys(&etcd.url, "/sextant/member/a").is_empty(), "left");
    assert!(etcd_keys(&etcd.url, "/sextant/logless-claim/").is_empty());
    wait_for("a's tables elsewhere", Duration::from_secs(30), || {
        tables_of(&etcd.url, &secret, "a") == 0
    });
    assert_eq!(wait_for_ls(&b_addr, &secret, "/d", &first), first);

    let (mut a, _) = start(dir.path(), &etcd.url, "a");
    wait_for("a a member again", Duration::from_secs(60), || {
        tables_by_server(&status_on(&etcd.url, &secret)).len() == 3
    });
    common::move_table(&etcd.url, &secret, "/d", "a");
    serves_d_under_a_new_run(&rt, &client, dir.path(), run, D);
    let kept = journal_lengths(&dir.path().join("store/members/a/journal"));
    let second = named("g");
    create_all(&rt, &client, "/d", &second);
    let mut want = [first, second, vec!["probe".to_string()]].concat();
    want.sort_unstable();
    a_loses_power_and_d_holds(&mut a, dir.path(), &etcd.url, &b_addr, &kept, D, &want);
    eprintln!("whole test {:?}", started.elapsed());
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// A server leaves cleanly while another joins again (issue 21 item 6).
/// a holds a directory `/d` (or another one apart from the root's table)
/// with five files of a client of b; a is paused (SIGSTOP)
/// past its lease and the grace: c, the coordinator, completes a's run
/// and `/d` is taken over. Then, at once, c is stopped (SIGTERM: it
/// drains the root's table to a or b, writes back, leaves) and a carries on and joins again. c
/// exits, a or b coordinates, every table is served (none waits for a
/// completion nobody writes), `/d` holds the files; a takes `/d` back
/// under a new run (its completed one retired), and five more files
/// survive a's power loss.
#[test]
fn a_server_leaving_cleanly_while_another_joins_again_loses_nothing() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let started = Instant::now();
    // Small tables: `/d` gets a table of its own (a's), the root's
    // stays c's, so c's leaving moves a table while a joins again.
    let config = dir.path().join("small-tables.toml");
    std::fs::write(&config, SMALL_TABLES).unwrap();
    let more = ["--config", config.to_str().unwrap()];
    let (mut c, c_addr) = start_with(dir.path(), &etcd.url, "c", &more, &[]);
    let secret = dir.path().join("c");
    wait_for("the root table on c", Duration::from_secs(30), || {
        tables_of(&etcd.url, &secret, "c") > 0
    });
    for d in ["d", "e", "r", "s"] {
        sextant_ok(&c_addr, &secret, &["mkdir", &format!("/{d}")]);
        let files: Vec<String> = (0..4).map(|f| format!("/{d}/h{f}")).collect();
        let mut touch = vec!["touch"];
        touch.extend(files.iter().map(String::as_str));
        sextant_ok(&c_addr, &secret, &touch);
    }
    let (mut a, _) = start_with(dir.path(), &etcd.url, "a", &more, &[]);
    let (_b, b_addr) = start_with(dir.path(), &etcd.url, "b", &more, &[]);
    wait_for("a and b members", Duration::from_secs(30), || {
        tables_by_server(&status_on(&etcd.url, &secret)).len() == 3
    });
    assert_eq!(status_on(&etcd.url, &secret)["coordinator"], "c");
    // The root's table on c, a directory of another table on a.
    let tr = common::move_table(&etcd.url, &secret, "/", "c");
    let mut dd = None;
    for x in ["/d", "/e", "/r", "/s"] {
        if common::move_table(&etcd.url, &secret, x, "a") != tr {
            dd = Some(x);
            break;
        }
        common::move_table(&etcd.url, &secret, "/", "c");
    }
    let dd = dd.expect("a directory in a table apart from the root's");
    let (_, run) = run_state(dir.path(), "a");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &b_addr, &secret);
    let mut first = named("f");
    create_all(&rt, &client, dd, &first);
    first.extend(named("h").into_iter().take(4));
    first.sort_unstable();

    common::signal(&a.0, "-STOP");
    let paused = Instant::now();
    wait_for("a's run completed", Duration::from_secs(60), || {
        !completion_files(dir.path(), "a").is_empty()
    });
    assert_eq!(wait_for_ls(&b_addr, &secret, dd, &first), first);
    eprintln!("{dd} taken over {:?} after a's pause", paused.elapsed());

    assert!(tables_of(&etcd.url, &secret, "c") > 0, "c holds the root");
    common::signal(&c.0, "-TERM");
    common::signal(&a.0, "-CONT");
    exits_cleanly(&mut c, "c stopped", Duration::from_secs(90));
    assert!(
        etcd_keys(&etcd.url, "/sextant/member/c").is_empty(),
        "c left"
    );
    let mut last = None;
    wait_for_every(
        "a or b coordinates, a a member again, c gone",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || {
            let s = status_on(&etcd.url, &secret);
            let mut servers: Vec<String> =
                tables_by_server(&s).into_iter().map(|(n, _)| n).collect();
            servers.sort_unstable();
            let done =
                (s["coordinator"] == "a" || s["coordinator"] == "b") && servers == ["a", "b"];
            if last.as_ref() != Some(&s) {
                eprintln!("cluster: {s}");
                last = Some(s);
            }
            done
        },
    );
    assert_eq!(wait_for_ls(&b_addr, &secret, dd, &first), first);
    sextant_ok(&b_addr, &secret, &["ls", "/"]);
    eprintln!("served again {:?} after a's pause", paused.elapsed());

    common::move_table(&etcd.url, &secret, dd, "a");
    serves_d_under_a_new_run(&rt, &client, dir.path(), run, dd);
    let kept = journal_lengths(&dir.path().join("store/members/a/journal"));
    let second = named("g");
    create_all(&rt, &client, dd, &second);
    let mut want = [first, second, vec!["probe".to_string()]].concat();
    want.sort_unstable();
    a_loses_power_and_d_holds(&mut a, dir.path(), &etcd.url, &b_addr, &kept, dd, &want);
    eprintln!("whole test {:?}", started.elapsed());
    drop(client);
    drop(rt);
    drop(etcd.child);
}

/// Unmounts a mount point (lazily) when dropped.
struct UmountOnDrop(PathBuf);

impl Drop for UmountOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system of `dir` with `dir/filler` until a write fails
/// with `ENOSPC`.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0u8; 64 << 10];
    loop {
        if let Err(e) = f.write_all(&chunk).and_then(|()| f.sync_all()) {
            assert_eq!(e.raw_os_error(), Some(28), "{e}");
            return;
        }
    }
}

/// A full disk when a log-less server joins again (issue 21 item 6), on
/// real processes: a's part of the shared store (`store/members/a`) is a
/// small tmpfs (skipped, and said so, where it cannot be mounted). a
/// holds `/d`, where a client of b made five files; a is paused past its
/// lease and the grace, c completes its run and `/d` is taken over; then
/// a's disk fills up and a carries on. Its engine stops at its first
/// write (a write-back or the acknowledged mark), or the rejoin's new run
/// cannot be written at the ADD of `/d`, which the test asks back to it
/// (the engine refuses the ADD: the engine test
/// `a_full_disk_while_a_member_begins_its_new_run_at_a_rejoin` covers that
/// one alone; the server then leaves, `EngineHost::disk_failure`); either
/// way a leaves the cluster with an error, its run unfinished, naming no new run; `/d` stays served
/// elsewhere with every file. Restarted once there is space, a takes `/d`
/// under a new run, and five more files survive its power loss. Before,
/// a member whose engine stopped at a write-back stayed one (only a
/// failed acknowledged mark ended the process): it joined again and was
/// given `/d`'s table, which answered ENOSPC for as long as it ran.
#[test]
fn a_full_disk_when_a_server_wakes_makes_it_leave_and_a_restart_loses_nothing() {
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let started = Instant::now();
    let mnt = dir.path().join("store/members/a");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32m", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIPPED: cannot mount a tmpfs (needs root)");
        return;
    }
    let _umount = UmountOnDrop(mnt.clone());
    let CFirst {
        c: _c,
        c_addr,
        secret,
        mut a,
        b: _b,
        b_addr,
    } = c_first_then_a_and_b(dir.path(), &etcd.url, "none");
    sextant_ok(&c_addr, &secret, &["mkdir", "/d"]);
    common::move_table(&etcd.url, &secret, "/d", "a");
    let (_, run) = run_state(dir.path(), "a");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = common::library_client(&rt, &b_addr, &secret);
    let first = named("f");
    create_all(&rt, &client, "/d", &first);
    // Written back (a's clean tables give its flusher nothing to write
    // on the full disk: the rejoin's new run is the write that fails).
    let root = sextant_types::Credentials::root();
    assert_eq!(rt.block_on(client.release_backups(&root)).unwrap(), 0);
    // ... and its acknowledged mark persisted (every 100 ms while it
    // grows): a woken a has nothing to write but a write-back's state.
    std::thread::sleep(Duration::from_secs(1));

    common::signal(&a.0, "-STOP");
    wait_for("a's run completed", Duration::from_secs(60), || {
        !completion_files(dir.path(), "a").is_empty()
    });
    assert_eq!(wait_for_ls(&b_addr, &secret, "/d", &first), first);
    fill(&mnt);
    common::signal(&a.0, "-CONT");
    let woken = Instant::now();
    // a's engine stops at its first write on the full disk (a write-back,
    // the acknowledged mark, the rejoin's new run): a stopped member
    // leaves the cluster, its run unfinished, so nothing waits for it.
    // Whether a write fails before a is given a table depends on timing
    // (what its flusher still had to write): once it is a member again,
    // `/d` is asked back to it every 2 s, so that the rejoin's new run —
    // begun before the ADD — is written at the latest then. A member that
    // cannot begin it for its disk leaves as a stopped one does.
    let deadline = woken + Duration::from_secs(60);
    let mut asked = woken;
    let status = loop {
        if let Some(s) = a.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "a, stopped on a full disk, never left (its tables would wait for it)"
        );
        if asked.elapsed() > Duration::from_secs(2) {
            asked = Instant::now();
            let _ = std::process::Command::new(common::BIN)
                .args(["--json", "cluster", "move", "/d", "a", "--etcd", &etcd.url])
                .env("SEXTANT_SECRET_FILE", secret.join("secret"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("a left {:?} after waking on the full disk", woken.elapsed());
    assert!(!status.success(), "an error: {status}");
    assert_eq!(
        run_state(dir.path(), "a"),
        (false, run),
        "no new run on a full disk, the old one unfinished"
    );
    assert_eq!(wait_for_ls(&b_addr, &secret, "/d", &first), first);
    // Space again; a is restarted.
    std::fs::remove_file(mnt.join("filler")).unwrap();
    let freed = Instant::now();
    let (restarted, _) = start(dir.path(), &etcd.url, "a");
    a = restarted;
    wait_for("a a member again", Duration::from_secs(60), || {
        tables_by_server(&status_on(&etcd.url, &secret))
            .iter()
            .any(|(n, _)| n == "a")
    });
    common::move_table(&etcd.url, &secret, "/d", "a");
    serves_d_under_a_new_run(&rt, &client, dir.path(), run, "/d");
    eprintln!("a serves /d {:?} after space came back", freed.elapsed());
    let kept = journal_lengths(&mnt.join("journal"));
    let second = named("g");
    create_all(&rt, &client, "/d", &second);
    let mut want = [first, second, vec!["probe".to_string()]].concat();
    want.sort_unstable();
    a_loses_power_and_d_holds(&mut a, dir.path(), &etcd.url, &b_addr, &kept, "/d", &want);
    eprintln!("whole test {:?}", started.elapsed());
    drop(client);
    drop(rt);
    drop(etcd.child);
}
