//! Log-less durability on a cluster, the engine's side (issue 21, item 6;
//! `sextant_engine::member_logless`): a log-less member's power loss cuts
//! its journal's unsynced tail; its clients' backups complete the journal
//! once; the members that take its tables over see every acknowledged
//! operation some backup holds, and never half of an operation.

use sextant_engine::logless::Redo;
use sextant_engine::member_logless::{
    complete_member_journal, complete_member_run, current_completion, keep_backups, unclean_run,
    Handed,
};
use sextant_engine::store::{MemStore, Store};
use sextant_engine::{
    Engine, EngineConfig, JournalConfig, MemCatalog, MemberConfig, RenameFlags, SyncMode,
    TableCatalog,
};
use sextant_types::{Attr, Credentials, FsError, Soid};
use std::sync::Arc;
use std::time::Duration;

fn config(logless: bool) -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        table_dir_limit: 3,
        table_inode_limit: 12,
        logless: logless.then(Default::default),
        journal: JournalConfig {
            // Synced only before a write-back: everything after the last
            // one is the unsynced tail a power loss cuts.
            mode: SyncMode::Background(Duration::from_secs(3600)),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn open(store: &MemStore, catalog: &Arc<MemCatalog>, name: &str, logless: bool) -> Engine {
    Engine::open_member(
        Arc::new(store.clone()) as Arc<dyn Store>,
        config(logless),
        MemberConfig {
            name: name.into(),
            catalog: Arc::clone(catalog) as _,
        },
    )
    .unwrap()
}

fn root() -> Credentials {
    Credentials::root()
}

/// A log-less member "a" with ten directories of four files each, written
/// back (durable in snapshots), and an idle member "b".
fn cluster() -> (MemStore, Arc<MemCatalog>, Engine, Engine, Vec<Attr>) {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let a = open(&store, &catalog, "a", true);
    assert!(a.is_member_logless());
    let b = open(&store, &catalog, "b", false);
    let mut dirs = Vec::new();
    for i in 0..10 {
        let d = a
            .mkdir(&root(), Soid::ROOT, format!("d{i}").as_bytes(), 0o755)
            .unwrap()
            .wait(&a)
            .unwrap();
        for j in 0..4 {
            a.create(&root(), d.soid, format!("f{j}").as_bytes(), 0o644, true)
                .unwrap()
                .wait(&a)
                .unwrap();
        }
        dirs.push(d);
    }
    a.sync().unwrap();
    (store, catalog, a, b, dirs)
}

/// The tail: per directory an xattr, a rename of `f0` into the next
/// directory (often another table) and a new file. Returns each
/// operation's redo entry, as its client got it with the reply.
fn tail(a: &Engine, dirs: &[Attr]) -> Vec<Redo> {
    let mut redo = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let c = a
            .setxattr(&root(), d.soid, b"user.k", b"acked", Default::default())
            .unwrap();
        redo.push(c.redo.clone().unwrap());
        c.wait(a).unwrap();
        let next = &dirs[(i + 1) % dirs.len()];
        let c = a
            .rename(
                &root(),
                d.soid,
                b"f0",
                next.soid,
                format!("g{i}").as_bytes(),
                RenameFlags::default(),
            )
            .unwrap();
        redo.push(c.redo.clone().unwrap());
        c.wait(a).unwrap();
        let c = a.create(&root(), d.soid, b"new", 0o600, true).unwrap();
        redo.push(c.redo.clone().unwrap());
        c.wait(a).unwrap();
    }
    redo
}

/// "a"'s machine loses power; the coordinator hands all of a's tables to
/// "b", which loads them.
fn fail_over(store: &MemStore, catalog: &Arc<MemCatalog>, a: Engine, b: &Engine) {
    drop(a);
    store.crash(None);
    for (id, owner, _) in catalog.all() {
        assert_eq!(owner, "a");
        catalog.assign(id, "b");
    }
    let taken = catalog.tables("b").unwrap();
    assert!(taken.len() > 1, "the tail spans several tables");
    b.add_tables(&taken).unwrap();
}

fn names(e: &Engine, dir: Soid) -> Vec<String> {
    let mut n: Vec<String> = e
        .readdir(&root(), dir, 0, 1000)
        .unwrap()
        .into_iter()
        .map(|d| String::from_utf8_lossy(&d.name).into_owned())
        .collect();
    n.sort();
    n
}

fn backups(redo: &[Redo]) -> Vec<Vec<u8>> {
    redo.iter().map(|r| r.bytes.to_vec()).collect()
}

#[test]
fn a_power_loss_loses_nothing_a_client_holds() {
    let (store, catalog, a, b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let report = complete_after_power_loss(&store, &redo);
    // The tail really was cut: every one of its operations came back from
    // a backup, none from the journal.
    assert!(report.through < redo[0].lsn, "{report:?}");
    assert_eq!(report.applied, redo.len());
    assert!(report.missing.is_empty() && report.discarded.is_empty());
    fail_over(&store, &catalog, a, &b);
    for (i, d) in dirs.iter().enumerate() {
        assert_eq!(
            b.getxattr(&root(), d.soid, b"user.k").unwrap().to_vec(),
            b"acked"
        );
        let prev = (i + dirs.len() - 1) % dirs.len();
        let want = ["f1", "f2", "f3", &format!("g{prev}"), "new"];
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(names(&b, d.soid), want, "d{i}");
    }
}

/// Completes a's journal as the coordinator would once a's lease is gone,
/// on what a power cut now would leave of the store; the decision is then
/// put into the store the members share (`a` runs on).
fn complete_after_power_loss(
    store: &MemStore,
    redo: &[Redo],
) -> sextant_engine::member_logless::CompletionReport {
    let cut = store.power_cut_copy();
    let report = complete_member_journal(Arc::new(cut.clone()) as _, "a", backups(redo)).unwrap();
    for name in cut.list("members/a/logless.completion").unwrap() {
        let bytes = cut.get_blob(&name).unwrap().unwrap();
        store.put_blob(&name, &bytes).unwrap();
    }
    report
}

#[test]
fn an_operation_no_client_handed_back_is_gone() {
    // The control: the same history, no backups handed in.
    let (store, catalog, a, b, dirs) = cluster();
    let _redo = tail(&a, &dirs);
    let report = complete_after_power_loss(&store, &[]);
    assert_eq!((report.applied, report.above), (0, 0));
    fail_over(&store, &catalog, a, &b);
    for d in &dirs {
        assert_eq!(
            b.getxattr(&root(), d.soid, b"user.k"),
            Err(FsError::NoData),
            "an operation no client handed back is gone"
        );
    }
}

#[test]
fn a_lost_backup_takes_its_followers_on_the_same_keys_and_never_half_an_operation() {
    let (store, catalog, a, b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    // The rename of d3/f0 to d4/g3 (index 3*3+1) reached no surviving client.
    let lost = redo[10].lsn;
    let kept: Vec<Redo> = redo.iter().filter(|r| r.lsn != lost).cloned().collect();
    let report = complete_after_power_loss(&store, &kept);
    assert_eq!(report.missing, vec![(lost, lost)]);
    assert!(
        !report.discarded.is_empty(),
        "later operations on d3 or d4 built on it"
    );
    fail_over(&store, &catalog, a, &b);
    // Not half of it: f0 is still in d3 and g3 not in d4, and the inode's
    // parent is d3.
    let in_d3 = names(&b, dirs[3].soid);
    let in_d4 = names(&b, dirs[4].soid);
    assert!(in_d3.contains(&"f0".to_string()), "{in_d3:?}");
    assert!(!in_d4.contains(&"g3".to_string()), "{in_d4:?}");
    // Everything before it came back; every later operation is chained to
    // it (each rename links a directory to the next) and is thrown away.
    assert_eq!(report.applied, 10);
    assert_eq!(report.discarded.len(), redo.len() - 11);
    assert_eq!(
        b.getxattr(&root(), dirs[2].soid, b"user.k")
            .unwrap()
            .to_vec(),
        b"acked"
    );
    assert_eq!(
        b.getxattr(&root(), dirs[4].soid, b"user.k"),
        Err(FsError::NoData)
    );
}

#[test]
fn the_first_completion_is_the_decision_and_forged_backups_are_counted() {
    let (store, _catalog, a, _b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let other = {
        // Entries sealed by another member's key.
        let (_s, _c, x, _y, xdirs) = cluster();
        tail(&x, &xdirs)
    };
    let mut handed = backups(&redo[..3]);
    handed.extend(backups(&other[..2]));
    handed.push(vec![9, 9, 9]);
    let cut = store.power_cut_copy();
    let first = complete_member_journal(Arc::new(cut.clone()) as _, "a", handed).unwrap();
    assert!(first.written);
    assert_eq!((first.forged, first.malformed, first.applied), (2, 1, 3));
    let again = complete_member_journal(Arc::new(cut.clone()) as _, "a", backups(&redo)).unwrap();
    assert!(!again.written);
    assert_eq!(again.applied, 3, "the first decision stands");
    let view = sextant_engine::member::PrefixStore::read_only(Arc::new(cut) as _, "members/a/");
    assert_eq!(current_completion(&view).unwrap().unwrap().entries.len(), 3);
}

#[test]
fn a_member_that_never_ran_log_less_cannot_be_completed() {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let _b = open(&store, &catalog, "b", false);
    let r = complete_member_journal(Arc::new(store) as _, "b", Vec::new());
    assert!(matches!(r, Err(sextant_engine::EngineError::Member(_))));
}

/// The machine of the member running `e` on `store` loses power: what it
/// had not synced is gone (the store as it is left; `e` is dropped after
/// the cut, so its shutdown cannot sync anything into it).
fn power_loss(store: &MemStore, e: Engine) -> MemStore {
    let cut = store.power_cut_copy();
    drop(e);
    cut
}

#[test]
fn a_restarted_member_completes_its_own_journal_before_serving() {
    let (store, catalog, a, _b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let store = power_loss(&store, a);
    let a = open(&store, &catalog, "a", true);
    assert!(a.crashed_incarnation().is_some());
    // Before recovery the tail is not there.
    assert_eq!(
        a.getxattr(&root(), dirs[0].soid, b"user.k"),
        Err(FsError::NoData)
    );
    let report = a.recover_logless(backups(&redo)).unwrap();
    assert_eq!(report.applied, redo.len());
    assert!(!report.maybe_lost());
    assert_eq!(a.crashed_incarnation(), None);
    let check = |e: &Engine| {
        for d in &dirs {
            assert_eq!(
                e.getxattr(&root(), d.soid, b"user.k").unwrap().to_vec(),
                b"acked"
            );
            assert!(names(e, d.soid).contains(&"new".to_string()));
        }
    };
    check(&a);
    // The entries are journal records now: a second power loss right after
    // keeps them, and nothing is left to complete.
    a.create(&root(), dirs[0].soid, b"later", 0o600, true)
        .unwrap()
        .wait(&a)
        .unwrap();
    let store = power_loss(&store, a);
    let a = open(&store, &catalog, "a", true);
    let again = a.recover_logless(Vec::new()).unwrap();
    assert_eq!(again.applied, 0);
    check(&a);
    // A clean shutdown leaves nothing to recover.
    a.close().unwrap();
    let a = open(&store, &catalog, "a", true);
    assert_eq!(a.crashed_incarnation(), None);
    check(&a);
}

#[test]
fn a_restart_takes_the_decision_the_coordinator_already_wrote() {
    let (store, catalog, a, _b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let store = power_loss(&store, a);
    // The coordinator decided with the first six backups only.
    let first =
        complete_member_journal(Arc::new(store.clone()) as _, "a", backups(&redo[..6])).unwrap();
    assert_eq!(first.applied, 6);
    let a = open(&store, &catalog, "a", true);
    let report = a.recover_logless(backups(&redo)).unwrap();
    assert_eq!(report.applied, 6, "one decision, whoever applies it");
    assert_eq!(
        a.getxattr(&root(), dirs[1].soid, b"user.k")
            .unwrap()
            .to_vec(),
        b"acked"
    );
    assert_eq!(
        a.getxattr(&root(), dirs[2].soid, b"user.k"),
        Err(FsError::NoData)
    );
}

/// A claimer that read run R as the one to complete, then was paused past
/// its lease while the member restarted (completing R itself) and served
/// a new run: its late completion of R writes nothing (`RunMovedOn`), and
/// no completion of the live run exists. Reading the run again when it
/// writes — as `complete_member_journal` does, which the claimer used
/// before — it completes the live run, and the member's next restart
/// would cut what it acknowledged since (the simulation's seed 3746).
#[test]
fn a_late_claimer_completes_only_the_run_it_read_never_the_live_one() {
    let (store, catalog, a, _b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let store = power_loss(&store, a);
    let view = |s: &MemStore| {
        sextant_engine::member::PrefixStore::read_only(Arc::new(s.clone()) as _, "members/a/")
    };
    let pinned = unclean_run(&view(&store)).unwrap();
    assert!(pinned.is_some(), "the crashed run is the one to complete");
    // The member restarts meanwhile, completes that run itself and serves
    // a new one.
    let a = open(&store, &catalog, "a", true);
    a.recover_logless(backups(&redo)).unwrap();
    a.create(&root(), dirs[0].soid, b"later", 0o600, true)
        .unwrap()
        .wait(&a)
        .unwrap();
    let live = unclean_run(&view(&store)).unwrap();
    assert!(live.is_some() && live != pinned, "a new run: {live:?}");
    // The claimer wakes.
    let late = complete_member_run(
        Arc::new(store.clone()) as _,
        "a",
        pinned,
        Vec::new(),
        || Ok(()),
    );
    assert!(
        matches!(late, Err(sextant_engine::EngineError::RunMovedOn { .. })),
        "{late:?}"
    );
    assert!(
        current_completion(&view(&store)).unwrap().is_none(),
        "no completion of the live run"
    );
    // What the claimer did before: the run read again is the live one,
    // and it is completed behind the back of the member serving it.
    let before = store.power_cut_copy();
    let r = complete_member_journal(Arc::new(before.clone()) as _, "a", Vec::new()).unwrap();
    assert!(r.written, "the old way completes the live run");
    assert!(current_completion(&view(&before)).unwrap().is_some());
    drop(a);
}

/// A claimer whose claim ran out with its lease while it read the
/// journal and the backups (it was paused) writes nothing: the check right
/// before the write (`claim_held`, here the hook) fails it with
/// `ClaimLost`, and the run stays uncompleted for the next claim.
#[test]
fn a_claimer_whose_claim_is_gone_before_the_write_writes_nothing() {
    let (store, _catalog, a, _b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let store = power_loss(&store, a);
    let view =
        sextant_engine::member::PrefixStore::read_only(Arc::new(store.clone()) as _, "members/a/");
    let run = unclean_run(&view).unwrap();
    let r = complete_member_run(
        Arc::new(store.clone()) as _,
        "a",
        run,
        backups(&redo),
        || Err(sextant_engine::EngineError::ClaimLost { member: "a".into() }),
    );
    assert!(
        matches!(r, Err(sextant_engine::EngineError::ClaimLost { .. })),
        "{r:?}"
    );
    assert!(
        current_completion(&view).unwrap().is_none(),
        "nothing written"
    );
    // The next claim completes it.
    let r = complete_member_run(Arc::new(store) as _, "a", run, backups(&redo), || Ok(())).unwrap();
    assert!(r.written);
}

#[test]
fn backups_handed_in_through_another_server_are_kept_for_the_completion() {
    let (store, _catalog, a, _b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let run = a.incarnation();
    // The replies carried everything to clients; the mark is persisted.
    a.note_acked(redo.last().unwrap().lsn);
    assert!(a.persist_acked().unwrap());
    let cut = power_loss(&store, a);
    let shared: Arc<dyn Store> = Arc::new(cut);
    // Only the first ten come back, through another server.
    assert_eq!(
        keep_backups(&shared, run, 7, backups(&redo[..10])).unwrap(),
        Handed::Kept
    );
    assert_eq!(
        keep_backups(&shared, run ^ 1, 7, backups(&redo)).unwrap(),
        Handed::Unknown
    );
    let r = complete_member_journal(Arc::clone(&shared), "a", Vec::new()).unwrap();
    assert_eq!((r.received, r.applied), (10, 10));
    // The tail no one returned is reported, not silent.
    let last = redo.last().unwrap().lsn;
    assert_eq!(r.unreturned, Some((redo[9].lsn + 1, last)));
    assert!(r.maybe_lost());
    assert_eq!(
        keep_backups(&shared, run, 7, backups(&redo)).unwrap(),
        Handed::TooLate
    );
}

fn carried_into(e: &Engine) -> Arc<parking_lot::Mutex<Vec<sextant_engine::requests::RequestTag>>> {
    let got = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let into = Arc::clone(&got);
    e.set_carried_sink(Box::new(move |found| into.lock().extend(found.replies)));
    got
}

fn request(client: u64, seq: u64) -> sextant_engine::requests::RequestId {
    sextant_engine::requests::RequestId {
        client,
        seq,
        acked_below: 1,
        digest: 1000 + seq,
    }
}

/// Exactly-once across a power loss: a client's operation whose reply it
/// never got (so it retries) comes back from another client's backup with
/// its request's identity and reply, and whoever applies it — a failover's
/// new owner, or the member itself restarting — is told, so the retry is
/// answered, not run again.
#[test]
fn a_recovered_operations_reply_goes_with_it() {
    for restart in [false, true] {
        let (store, catalog, a, b, dirs) = cluster();
        let redo = a
            .for_request(request(77, 5))
            .create(&root(), dirs[0].soid, b"once", 0o644, true)
            .unwrap()
            .redo
            .unwrap();
        if restart {
            let cut = power_loss(&store, a);
            let a = open(&cut, &catalog, "a", true);
            let got = carried_into(&a);
            a.recover_logless(backups(&[redo])).unwrap();
            let seen = got.lock().clone();
            assert_eq!(seen.len(), 1, "{seen:?}");
            assert_eq!((seen[0].id.client, seen[0].id.seq), (77, 5));
            assert!(names(&a, dirs[0].soid).contains(&"once".to_string()));
        } else {
            complete_after_power_loss(&store, &[redo]);
            let got = carried_into(&b);
            fail_over(&store, &catalog, a, &b);
            let seen: Vec<_> = got
                .lock()
                .iter()
                .filter(|t| t.id.client == 77)
                .cloned()
                .collect();
            assert_eq!(seen.len(), 1, "{seen:?}");
            assert_eq!(seen[0].id.seq, 5);
        }
    }
}

/// The error is the disk's: an I/O error carrying `ENOSPC`.
fn is_enospc<T: std::fmt::Debug>(r: &Result<T, sextant_engine::EngineError>) -> bool {
    matches!(r, Err(sextant_engine::EngineError::Io { source, .. }) if source.raw_os_error() == Some(28))
}

/// A full disk under the failover of a log-less member (issue 21, item 6):
/// a's machine loses power; b keeps the backups a client hands in for
/// a's run, then completes a's journal — and the shared store is full
/// for both. Each fails with a typed error (an I/O error carrying
/// `ENOSPC`), and nothing is decided on what was half written: no
/// backups are kept, no completion exists, a's tables are not ready to
/// fail over. Once there is space again the client's retry is kept, the
/// completion is decided from it (every entry applied) and b serves
/// every acknowledged operation.
#[test]
fn a_full_disk_while_keeping_backups_or_completing_decides_nothing_and_a_retry_succeeds() {
    let (store, catalog, a, _b, dirs) = cluster();
    let redo = tail(&a, &dirs);
    let run = a.incarnation();
    let cut = power_loss(&store, a);
    // b, on what a's power loss left of the shared store.
    let b = open(&cut, &catalog, "b", false);
    let shared: Arc<dyn Store> = Arc::new(cut.clone());
    let view = sextant_engine::member::PrefixStore::read_only(Arc::clone(&shared), "members/a/");
    cut.fail_after_with_errno(0, 28);
    let kept = keep_backups(&shared, run, 7, backups(&redo));
    assert!(is_enospc(&kept), "{kept:?}");
    assert_eq!(
        cut.list("members/a/backups/").unwrap(),
        Vec::<String>::new()
    );
    let completed = b.complete_dead_member("a");
    assert!(is_enospc(&completed), "{completed:?}");
    assert_eq!(current_completion(&view).unwrap(), None, "nothing decided");
    assert!(!b.failover_ready("a").unwrap());
    // Space again (no write fails any more); the client hands them in again.
    cut.fail_after(u64::MAX);
    assert_eq!(
        keep_backups(&shared, run, 7, backups(&redo)).unwrap(),
        Handed::Kept
    );
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written, "{report:?}");
    assert_eq!(report.applied, redo.len(), "{report:?}");
    assert!(!report.maybe_lost(), "{report:?}");
    assert!(b.failover_ready("a").unwrap());
    assert_eq!(
        cut.list("members/a/backups/").unwrap(),
        Vec::<String>::new()
    );
    for (id, _, _) in catalog.all() {
        catalog.assign(id, "b");
    }
    b.add_tables(&catalog.tables("b").unwrap()).unwrap();
    for d in &dirs {
        assert_eq!(
            b.getxattr(&root(), d.soid, b"user.k").unwrap().to_vec(),
            b"acked"
        );
        assert!(names(&b, d.soid).contains(&"new".to_string()));
    }
}

/// A full disk while a restarted log-less member completes its own
/// journal (writes the completion, appends its entries to the journal,
/// notes the run recovered): for every point at which the disk fills up,
/// the recovery fails with an error and the member serves nothing; after
/// a restart with space again, recovery succeeds and every acknowledged
/// operation is there once.
#[test]
fn a_full_disk_during_a_members_own_recovery_is_an_error_and_a_restart_recovers() {
    let mut failed_at = Vec::new();
    for n in 0.. {
        let (store, catalog, a, _b, dirs) = cluster();
        let redo = tail(&a, &dirs);
        let store = power_loss(&store, a);
        let a = open(&store, &catalog, "a", true);
        assert!(a.crashed_incarnation().is_some());
        store.fail_after_with_errno(n, 28);
        let r = a.recover_logless(backups(&redo));
        if let Ok(report) = r {
            assert_eq!(report.applied, redo.len(), "{report:?}");
            break;
        }
        failed_at.push(format!("{n}: {}", r.unwrap_err()));
        // The process ends; it restarts with space again.
        drop(a);
        store.fail_after(u64::MAX);
        let a = open(&store, &catalog, "a", true);
        let report = a
            .recover_logless(backups(&redo))
            .unwrap_or_else(|e| panic!("disk full after {n} writes, then restarted: {e}"));
        assert_eq!(a.crashed_incarnation(), None);
        assert!(!report.maybe_lost(), "{report:?}");
        for d in &dirs {
            assert_eq!(
                a.getxattr(&root(), d.soid, b"user.k").unwrap().to_vec(),
                b"acked",
                "disk full after {n} writes"
            );
            let new = names(&a, d.soid).iter().filter(|x| *x == "new").count();
            assert_eq!(new, 1, "disk full after {n} writes");
        }
        assert!(n < 1000, "recovery never got through");
    }
    eprintln!("recovery failed with the disk full after: {failed_at:#?}");
}

/// a is cut off (SIGSTOP, a partition: its process and whole journal go
/// on) past its lease and the grace: the coordinator completes its run
/// (through P) and b takes all its tables. Before a notices, one more
/// operation lands in its journal after P, never acknowledged. Returns P
/// and the table holding `dirs[0]`.
fn cut_off_and_taken_over(
    catalog: &Arc<MemCatalog>,
    a: &Engine,
    b: &Engine,
    dirs: &[Attr],
) -> (u64, u64) {
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written && !report.maybe_lost(), "{report:?}");
    let _unacked = a
        .setxattr(
            &root(),
            dirs[1].soid,
            b"user.cut",
            b"late",
            Default::default(),
        )
        .unwrap();
    let t = a.table_holding(dirs[0].soid).unwrap();
    for (id, owner, _) in catalog.all() {
        assert_eq!(owner, "a");
        a.revoke_table(id);
        catalog.assign(id, "b");
    }
    b.add_tables(&catalog.tables("b").unwrap()).unwrap();
    (report.through, t)
}

/// a's tables go to b again (its second death); b loads them.
fn take_over_again(catalog: &Arc<MemCatalog>, b: &Engine) {
    let held = b.owned_tables();
    for (id, owner, _) in catalog.all() {
        if owner == "a" {
            catalog.assign(id, "b");
        }
    }
    let taken: Vec<_> = catalog
        .tables("b")
        .unwrap()
        .into_iter()
        .filter(|m| !held.contains(&m.entry.id))
        .collect();
    assert!(!taken.is_empty());
    b.add_tables(&taken).unwrap();
}

/// a's process dies (the journal it wrote stays whole); b completes a's
/// run, once, and takes every table a held. The names b then lists in
/// `dir`.
fn a_dies_and_b_takes_over(
    catalog: &Arc<MemCatalog>,
    a: Engine,
    b: &Engine,
    dir: Soid,
) -> Vec<String> {
    drop(a);
    catalog.set_member("a", false);
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written && !report.maybe_lost(), "{report:?}");
    take_over_again(catalog, b);
    names(b, dir)
}

/// The names of `cluster()`'s first directory (f0 – f3) and `later`, sorted.
fn with_f0_to_f3(later: Vec<String>) -> Vec<String> {
    let mut want: Vec<String> = ["f0", "f1", "f2", "f3"]
        .iter()
        .map(|s| s.to_string())
        .chain(later)
        .collect();
    want.sort();
    want
}

/// The defect found 2026-12-06: a woken member let back in (same
/// process, same run) is given a table again and acknowledges operations;
/// the completion decided while it was cut off must not be taken as its
/// journal's end at its next death — a process crash (journal whole) or a
/// power loss (the unsynced tail cut, its client's backups handed in).
fn let_back_in_then_die(power_loss: bool) {
    let (store, catalog, a, b, dirs) = cluster();
    let (through, t) = cut_off_and_taken_over(&catalog, &a, &b, &dirs);
    // Woken, a joins again and is given dirs[0]'s table back.
    let back = b.drop_table(t).unwrap();
    assert!(catalog.assign(t, "a"));
    a.add_table(&back).unwrap();
    let mut redo = Vec::new();
    let later: Vec<String> = (0..3).map(|i| format!("later{i}")).collect();
    for name in &later {
        let c = a
            .create(&root(), dirs[0].soid, name.as_bytes(), 0o600, true)
            .unwrap();
        redo.push(c.redo.clone().unwrap());
        c.wait(&a).unwrap();
    }
    assert!(redo[0].lsn > through + 1);
    if power_loss {
        let report = complete_after_power_loss(&store, &redo);
        assert!(
            report.written,
            "a decision of its own, not the one taken while a was cut off: {report:?}"
        );
        assert_eq!(report.applied, redo.len(), "{report:?}");
        assert!(!report.maybe_lost(), "{report:?}");
        drop(a);
        store.crash(None);
    } else {
        drop(a);
        let report = b.complete_dead_member("a").unwrap();
        assert!(report.written && !report.maybe_lost(), "{report:?}");
    }
    take_over_again(&catalog, &b);
    assert_eq!(
        names(&b, dirs[0].soid),
        with_f0_to_f3(later),
        "what a acknowledged again"
    );
    // The operation a ran after P, cut off, was never acknowledged: gone.
    assert_eq!(
        b.getxattr(&root(), dirs[1].soid, b"user.cut"),
        Err(FsError::NoData)
    );
}

#[test]
fn a_member_let_back_in_after_its_journal_was_completed_keeps_what_it_acknowledges_through_a_crash()
{
    let_back_in_then_die(false);
}

#[test]
fn a_member_let_back_in_after_its_journal_was_completed_keeps_what_it_acknowledges_through_a_power_loss(
) {
    let_back_in_then_die(true);
}

/// While a table another member was given still replays the woken
/// member's journal from at or below the completed end (that member has
/// not loaded it yet), the woken member serves no table: that reader
/// needs the completion, which must go before the member acknowledges
/// anything again.
#[test]
fn a_woken_member_takes_no_table_while_its_completed_journal_is_still_read() {
    let (_store, catalog, a, b, dirs) = cluster();
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written);
    let t = a.table_holding(dirs[0].soid).unwrap();
    let all = catalog.all();
    for (id, _, _) in &all {
        a.revoke_table(*id);
    }
    // Every other table handed to b, not loaded there yet; a joins again
    // and is given its own old table: refused, nothing served.
    for (id, _, _) in &all {
        if *id != t {
            catalog.assign(*id, "b");
        }
    }
    let old = catalog.tables("a").unwrap();
    assert_eq!(old.len(), 1);
    assert!(a.add_tables(&old).is_err());
    assert!(a.owned_tables().is_empty());
    // b has loaded its tables: a may take one again.
    b.add_tables(&catalog.tables("b").unwrap()).unwrap();
    a.add_tables(&catalog.tables("a").unwrap()).unwrap();
    assert!(names(&a, dirs[0].soid).contains(&"f0".to_string()));
}

/// Item 2 of the same: the woken member joined again before its tables
/// were handed out, so the catalogue keeps them its own (R3: nobody may
/// take a live member's tables). Its ADDs of them must not be refused for
/// ever (they were, while any manifest replayed its journal from at or
/// below P — its own old ones): each ADD loads a table as another member
/// would (the journal up to P and the decided entries: what it wrote
/// after P, never acknowledged, is not applied) and commits its manifest
/// past P; once all were ADDed the completion is retired. One ADD at a
/// time (as the shell does), at most one refusal per table.
#[test]
fn a_woken_member_given_its_own_old_tables_back_takes_them_and_keeps_what_it_acknowledges() {
    let (_store, catalog, a, b, dirs) = cluster();
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written && !report.maybe_lost(), "{report:?}");
    let _unacked = a
        .setxattr(
            &root(),
            dirs[1].soid,
            b"user.cut",
            b"late",
            Default::default(),
        )
        .unwrap();
    for (id, _, _) in catalog.all() {
        a.revoke_table(id);
    }
    let mine = catalog.tables("a").unwrap();
    assert!(mine.len() > 1);
    let mut refused = 0;
    for round in 0..2 {
        for man in catalog.tables("a").unwrap() {
            if a.owned_tables().contains(&man.entry.id) {
                continue;
            }
            if a.add_table(&man).is_err() {
                refused += 1;
            }
        }
        if a.owned_tables().len() == mine.len() {
            break;
        }
        assert_eq!(round, 0, "the second round takes every table");
    }
    assert_eq!(a.owned_tables().len(), mine.len());
    assert!(refused < mine.len(), "{refused} refusals");
    assert_eq!(
        a.getxattr(&root(), dirs[1].soid, b"user.cut"),
        Err(FsError::NoData),
        "never acknowledged: not applied"
    );
    let later: Vec<String> = (0..3).map(|i| format!("later{i}")).collect();
    for name in &later {
        a.create(&root(), dirs[0].soid, name.as_bytes(), 0o600, true)
            .unwrap()
            .wait(&a)
            .unwrap();
    }
    let n = a_dies_and_b_takes_over(&catalog, a, &b, dirs[0].soid);
    assert_eq!(n, with_f0_to_f3(later));
    assert_eq!(
        b.getxattr(&root(), dirs[1].soid, b"user.cut"),
        Err(FsError::NoData)
    );
}

/// Issue 21 item 6, left over from the fix above: a member *restarted*
/// (its process crashed, not woken) after its journal was completed while
/// it was cut off, having written a record after the completed end P that
/// was never acknowledged. It recovers on its own (no operator): the
/// records after P are discarded, the decided entries take their place,
/// and what it acknowledges afterwards survives its next death. With
/// `taken_over`, b took its tables meanwhile and gives one back; without,
/// it restarted before any was handed out and still owns them all.
fn restarted_after_completion(taken_over: bool) {
    let (store, catalog, a, b, dirs) = cluster();
    let t = if taken_over {
        cut_off_and_taken_over(&catalog, &a, &b, &dirs).1
    } else {
        let report = b.complete_dead_member("a").unwrap();
        assert!(report.written && !report.maybe_lost(), "{report:?}");
        let _unacked = a
            .setxattr(
                &root(),
                dirs[1].soid,
                b"user.cut",
                b"late",
                Default::default(),
            )
            .unwrap();
        a.table_holding(dirs[0].soid).unwrap()
    };
    // The process dies (its journal whole, the record after P in it).
    drop(a);
    let a = open(&store, &catalog, "a", true);
    assert!(a.crashed_incarnation().is_some());
    let report = a.recover_logless(Vec::new()).unwrap();
    assert!(!report.maybe_lost(), "{report:?}");
    assert_eq!(a.crashed_incarnation(), None);
    if taken_over {
        assert!(a.owned_tables().is_empty());
        assert_eq!(
            b.getxattr(&root(), dirs[1].soid, b"user.cut"),
            Err(FsError::NoData)
        );
        let back = b.drop_table(t).unwrap();
        assert!(catalog.assign(t, "a"));
        a.add_table(&back).unwrap();
    } else {
        assert_eq!(
            a.getxattr(&root(), dirs[1].soid, b"user.cut"),
            Err(FsError::NoData),
            "never acknowledged: not replayed"
        );
    }
    let later: Vec<String> = (0..3).map(|i| format!("later{i}")).collect();
    for name in &later {
        a.create(&root(), dirs[0].soid, name.as_bytes(), 0o600, true)
            .unwrap()
            .wait(&a)
            .unwrap();
    }
    // Its next death: a process crash; b completes the new run and takes
    // everything of a's.
    let n = a_dies_and_b_takes_over(&catalog, a, &b, dirs[0].soid);
    assert_eq!(
        n,
        with_f0_to_f3(later),
        "what a acknowledged after its restart"
    );
    assert_eq!(
        b.getxattr(&root(), dirs[1].soid, b"user.cut"),
        Err(FsError::NoData)
    );
}

#[test]
fn a_member_restarted_after_its_journal_was_completed_recovers_without_an_operator() {
    restarted_after_completion(true);
}

#[test]
fn a_member_restarted_before_its_completed_tables_were_handed_out_discards_what_it_wrote_after() {
    restarted_after_completion(false);
}

/// Item 3, the coordinator-view race: the coordinator decides that a is
/// dead from a view taken before a joined again. Were the completion then
/// written after a re-added its own tables (no completion existed then)
/// and while it acknowledges, it would fix the journal's end below what a
/// acknowledged, lost at a's next death. The fence: a completion is
/// decided only under a claim made while a is not a member *at that
/// moment* (`TableCatalog::claim_completion`); here a is one, so the
/// late completion is refused and nothing is lost.
#[test]
fn a_completion_from_a_view_older_than_the_members_rejoin_is_refused_and_nothing_is_lost() {
    let (_store, catalog, a, b, dirs) = cluster();
    for (id, _, _) in catalog.all() {
        a.revoke_table(id);
    }
    // a joins again and takes its own tables back (no completion yet).
    catalog.set_member("a", true);
    a.add_tables(&catalog.tables("a").unwrap()).unwrap();
    a.create(&root(), dirs[0].soid, b"before", 0o600, true)
        .unwrap()
        .wait(&a)
        .unwrap();
    // The coordinator, on its old view, would complete a's run now.
    assert!(b.complete_dead_member("a").is_err());
    assert!(b.failover_ready("a").map_or(true, |r| !r));
    a.create(&root(), dirs[0].soid, b"after", 0o600, true)
        .unwrap()
        .wait(&a)
        .unwrap();
    // a's process dies; its tables go to b.
    let n = a_dies_and_b_takes_over(&catalog, a, &b, dirs[0].soid);
    assert!(n.contains(&"before".to_string()), "{n:?}");
    assert!(n.contains(&"after".to_string()), "acknowledged: {n:?}");
}

/// The other order of the same race: the coordinator claimed the
/// completion while a was not a member, and a joins again before the
/// completion is written. a takes no table while the claim stands; once
/// it is released the completion is there and a's ADD takes it as stale
/// (its own old tables loaded up to the completed end, the completion
/// retired before they serve): what a acknowledges afterwards survives.
#[test]
fn a_member_that_joins_again_while_its_completion_is_claimed_waits_for_it() {
    let (store, catalog, a, b, dirs) = cluster();
    for (id, _, _) in catalog.all() {
        a.revoke_table(id);
    }
    assert!(catalog.claim_completion("a").unwrap());
    catalog.set_member("a", true);
    assert!(
        !catalog.claim_completion("a").unwrap(),
        "a is a member again: no new claim"
    );
    let mine = catalog.tables("a").unwrap();
    assert!(a.add_tables(&mine).is_err(), "claimed: refused");
    assert!(a.owned_tables().is_empty());
    // The claimer decides and lets go.
    let report = complete_member_journal(Arc::new(store.clone()) as _, "a", Vec::new()).unwrap();
    assert!(report.written);
    catalog.release_completion_claim("a").unwrap();
    a.add_tables(&mine).unwrap();
    a.create(&root(), dirs[0].soid, b"after", 0o600, true)
        .unwrap()
        .wait(&a)
        .unwrap();
    assert!(a_dies_and_b_takes_over(&catalog, a, &b, dirs[0].soid).contains(&"after".to_string()));
}

/// The same race after a restart: a restarts (its run crashed), opens
/// with its tables and recovers; a claim made while it was not a member
/// yet decides the journal of its *new* run after that recovery. The
/// tables a opened with are not ADDed again (the host has them), so the
/// check comes when each begins serving (`check_before_serving`): a lets
/// them go, loads them again from the completed journal and retires the
/// completion before any serves; what it acknowledges afterwards
/// survives its next death.
#[test]
fn a_restarted_member_whose_new_run_was_completed_before_it_joined_reloads_before_serving() {
    let (store, catalog, a, b, dirs) = cluster();
    drop(a);
    let a = open(&store, &catalog, "a", true);
    a.recover_logless(Vec::new()).unwrap();
    let held = a.owned_tables();
    assert!(!held.is_empty());
    // A coordinator that saw a dead claims and completes its new run.
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written);
    catalog.set_member("a", true);
    // The shell's ADD of each table the host has: let go, then loaded.
    if a.check_before_serving().is_err() {
        assert!(a.owned_tables().is_empty());
        a.add_tables(&catalog.tables("a").unwrap()).unwrap();
    }
    a.check_before_serving().unwrap();
    assert_eq!(a.owned_tables().len(), held.len());
    a.create(&root(), dirs[0].soid, b"after", 0o600, true)
        .unwrap()
        .wait(&a)
        .unwrap();
    let n = a_dies_and_b_takes_over(&catalog, a, &b, dirs[0].soid);
    assert!(n.contains(&"after".to_string()), "acknowledged: {n:?}");
    assert!(n.contains(&"f0".to_string()), "{n:?}");
}

/// The last hole of log-less durability on a cluster (issue 21 item 6):
/// a claimer reads its claim again right before it writes the
/// completion (`TableCatalog::claim_held`), but that check and the write
/// are not atomic. Here b, the claimer, passes the check and is paused
/// before the write past its lease, so its claim goes; a, cut off
/// meanwhile (paused past its own lease), wakes and joins again under a
/// new membership generation, finds no claim and no completion, takes its
/// tables back and acknowledges more; then b wakes and writes the
/// completion of the run it pinned. Because a began a new run when it
/// joined again (`Engine::begin_serving`), that completion names a run
/// no reader takes, and what a acknowledged after joining again survives
/// its next death — a process crash (the journal whole) or a power loss
/// (the unsynced tail cut, its client's backups handed in).
fn a_late_completion_after_a_rejoin(power_loss: bool) {
    let (store, catalog, a, b, dirs) = cluster();
    // a is cut off past its lease: its tables are let go, it is no member.
    for (id, _, _) in catalog.all() {
        a.revoke_table(id);
    }
    catalog.set_member("a", false);
    // b reads the run to complete and claims it.
    let view =
        sextant_engine::member::PrefixStore::read_only(Arc::new(store.clone()) as _, "members/a/");
    let pinned = unclean_run(&view).unwrap();
    assert_eq!(pinned, Some(a.incarnation()));
    assert!(catalog.claim_completion("a").unwrap());
    let later: Vec<String> = (0..3).map(|i| format!("later{i}")).collect();
    let mut redo = Vec::new();
    let report = complete_member_run(
        Arc::new(store.clone()) as _,
        "a",
        pinned,
        Vec::new(),
        || {
            // The claim is still b's: the check passes.
            assert!(catalog.claim_held("a").unwrap());
            // b is paused here past its lease: the claim goes with it.
            catalog.release_completion_claim("a").unwrap();
            // a wakes, joins again (its second membership) and takes its
            // tables back: no claim, no completion.
            catalog.set_member("a", true);
            a.begin_serving(2).unwrap();
            a.add_tables(&catalog.tables("a").unwrap()).unwrap();
            for name in &later {
                let c = a
                    .create(&root(), dirs[0].soid, name.as_bytes(), 0o600, true)
                    .unwrap();
                redo.push(c.redo.clone().unwrap());
                c.wait(&a).unwrap();
            }
            // b wakes and writes.
            Ok(())
        },
    )
    .unwrap();
    assert!(report.written, "the late completion is written: {report:?}");
    assert_ne!(
        unclean_run(&view).unwrap(),
        pinned,
        "a began a new run when it joined again"
    );
    assert!(
        current_completion(&view).unwrap().is_none(),
        "the late completion is of a run no reader takes"
    );
    if power_loss {
        let report = complete_after_power_loss(&store, &redo);
        assert!(report.written, "{report:?}");
        assert_eq!(report.applied, redo.len(), "{report:?}");
        assert!(!report.maybe_lost(), "{report:?}");
        drop(a);
        store.crash(None);
        catalog.set_member("a", false);
    } else {
        drop(a);
        catalog.set_member("a", false);
        let report = b.complete_dead_member("a").unwrap();
        assert!(report.written && !report.maybe_lost(), "{report:?}");
    }
    for (id, owner, _) in catalog.all() {
        assert_eq!(owner, "a");
        catalog.assign(id, "b");
    }
    b.add_tables(&catalog.tables("b").unwrap()).unwrap();
    assert_eq!(
        names(&b, dirs[0].soid),
        with_f0_to_f3(later),
        "what a acknowledged after joining again"
    );
}

#[test]
fn a_completion_written_late_after_the_member_joined_again_loses_nothing_through_a_crash() {
    a_late_completion_after_a_rejoin(false);
}

#[test]
fn a_completion_written_late_after_the_member_joined_again_loses_nothing_through_a_power_loss() {
    a_late_completion_after_a_rejoin(true);
}

/// A member paused but not past its lease joins nothing again: its run
/// goes on (`begin_serving` with the same generation begins none).
#[test]
fn a_member_that_did_not_join_again_keeps_its_run() {
    let (_store, _catalog, a, _b, _dirs) = cluster();
    let run = a.incarnation();
    a.begin_serving(1).unwrap();
    assert_eq!(a.incarnation(), run);
    a.begin_serving(2).unwrap();
    assert_ne!(a.incarnation(), run, "joined again: a new run");
    let second = a.incarnation();
    a.begin_serving(2).unwrap();
    a.begin_serving(1).unwrap();
    assert_eq!(a.incarnation(), second, "one new run per new membership");
}

/// Which way [`a_full_disk_while_a_member_begins_its_new_run_at_a_rejoin`]
/// failed: the journal's sync (the engine stops) or the state file's write.
#[derive(Debug, PartialEq)]
enum FullAt {
    JournalSync,
    RunState,
}

/// A full disk while a log-less member begins its new run at a rejoin
/// (issue 21 item 6; `Engine::begin_serving` syncs the journal through
/// everything written, then names a new run in `logless.state`). a has
/// an acknowledged, unsynced tail its client holds; it is cut off past
/// its lease and joins again; the disk fills after `n` more writes, for
/// every `n` until the new run begins. Each failure is a typed error
/// carrying the disk's cause — `JournalStopped { NoSpace }` for the sync
/// (the journal stops: the policy for any failed sync), an I/O error
/// with `ENOSPC` for the state file — and nothing is begun: the run is
/// the old one in memory and in the state file, and an ADD while the
/// disk is full is refused too and serves nothing (before, `add_tables`
/// served under the old run when the host's `begin_serving` had failed
/// and was not called again). Once there is space: a stopped engine is
/// restarted — after a power loss, the worst case — and recovers the
/// tail from the client's backups; otherwise the next ADD begins the new
/// run and serves, with every acknowledged operation, and what it
/// acknowledges under the new run survives a power loss.
#[test]
fn a_full_disk_while_a_member_begins_its_new_run_at_a_rejoin() {
    let mut seen = Vec::new();
    for n in 0.. {
        assert!(n < 100, "the new run never began");
        let (store, catalog, a, b, dirs) = cluster();
        let redo = tail(&a, &dirs);
        let run = a.incarnation();
        // Cut off past its lease (its tables let go), then a member again.
        for (id, _, _) in catalog.all() {
            a.revoke_table(id);
        }
        catalog.set_member("a", false);
        catalog.set_member("a", true);
        let view = sextant_engine::member::PrefixStore::read_only(
            Arc::new(store.clone()) as _,
            "members/a/",
        );
        let tables = catalog.tables("a").unwrap();
        store.fail_after_with_errno(n, 28);
        let begun = a.begin_serving(2);
        if begun.is_ok() {
            store.fail_after(u64::MAX);
            assert_ne!(a.incarnation(), run);
            assert_eq!(unclean_run(&view).unwrap(), Some(a.incarnation()));
            break;
        }
        let at = match &begun {
            Err(sextant_engine::EngineError::JournalStopped {
                cause: FsError::NoSpace,
            }) => FullAt::JournalSync,
            r if is_enospc(r) => FullAt::RunState,
            other => panic!("disk full after {n} writes: not the disk's error: {other:?}"),
        };
        eprintln!("disk full after {n} writes: {}", begun.unwrap_err());
        seen.push(at);
        // Nothing begun, in memory or on disk; nothing served.
        assert_eq!(a.incarnation(), run, "disk full after {n} writes");
        assert_eq!(unclean_run(&view).unwrap(), Some(run));
        assert!(a.add_tables(&tables).is_err(), "an ADD on a full disk");
        assert!(a.owned_tables().is_empty(), "disk full after {n} writes");
        assert_eq!(a.incarnation(), run);
        store.fail_after(u64::MAX);
        let (served, store, b) = match seen.last() {
            Some(FullAt::JournalSync) => {
                // Stopped: restarted after freeing space (and a power
                // loss: the unsynced tail is gone from the journal).
                let cut = power_loss(&store, a);
                let a = open(&cut, &catalog, "a", true);
                assert_eq!(a.crashed_incarnation(), Some(run));
                let report = a.recover_logless(backups(&redo)).unwrap();
                assert_eq!(report.applied, redo.len(), "{report:?}");
                assert!(!report.maybe_lost(), "{report:?}");
                // b goes on, on what the power loss left.
                drop(b);
                let b = open(&cut, &catalog, "b", false);
                (a, cut, b)
            }
            _ => {
                // The next ADD (here without `begin_serving` again: the
                // engine begins the run itself before anything serves).
                a.add_tables(&tables).unwrap();
                assert_ne!(a.incarnation(), run, "served under a new run");
                assert_eq!(unclean_run(&view).unwrap(), Some(a.incarnation()));
                (a, store, b)
            }
        };
        for d in &dirs {
            assert_eq!(
                served
                    .getxattr(&root(), d.soid, b"user.k")
                    .unwrap()
                    .to_vec(),
                b"acked",
                "disk full after {n} writes"
            );
            assert!(names(&served, d.soid).contains(&"new".to_string()));
        }
        // Acknowledged under the new run, then a power loss: b completes
        // the new run from the client's backups and has everything.
        let c = served
            .create(&root(), dirs[0].soid, b"after", 0o600, true)
            .unwrap();
        let after = vec![c.redo.clone().unwrap()];
        c.wait(&served).unwrap();
        let report = complete_after_power_loss(&store, &after);
        assert_eq!(report.applied, 1, "{report:?}");
        assert!(!report.maybe_lost(), "{report:?}");
        fail_over(&store, &catalog, served, &b);
        let got = names(&b, dirs[0].soid);
        assert!(got.contains(&"after".to_string()), "{got:?}");
        assert!(got.contains(&"new".to_string()), "{got:?}");
    }
    assert_eq!(
        seen,
        [FullAt::JournalSync, FullAt::RunState],
        "both writes were covered"
    );
}

/// A log-less member stopped cleanly (SIGTERM) while a completion of its
/// current run stands — it was cut off past its lease, b completed its
/// run through P and took one of its tables; before it noticed, it wrote
/// an (unacknowledged) rename after P from that table into another one
/// still in its name — must leave its run unfinished: readers go on
/// taking the completion. Marked clean (as it was), the next reader of
/// the other table replayed the whole journal, rename included: half of
/// it, the entry without the removal, one inode under two names.
#[test]
fn a_member_stopped_cleanly_while_its_run_stands_completed_leaves_it_unfinished() {
    let (store, catalog, a, b, dirs) = cluster();
    let run = a.incarnation();
    let (from, to) = (0..dirs.len())
        .flat_map(|i| (0..dirs.len()).map(move |j| (i, j)))
        .find(|&(i, j)| a.table_holding(dirs[i].soid) != a.table_holding(dirs[j].soid))
        .expect("two directories in different tables");
    let (t_from, t_to) = (
        a.table_holding(dirs[from].soid).unwrap(),
        a.table_holding(dirs[to].soid).unwrap(),
    );
    catalog.set_member("a", false);
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written && !report.maybe_lost(), "{report:?}");
    // After P, never acknowledged (a's lease is gone).
    let _unacked = a
        .rename(
            &root(),
            dirs[from].soid,
            b"f0",
            dirs[to].soid,
            b"moved",
            RenameFlags::default(),
        )
        .unwrap();
    for (id, _, _) in catalog.all() {
        a.revoke_table(id);
    }
    // b takes the source table, from the journal up to P.
    assert!(catalog.assign(t_from, "b"));
    b.add_tables(&[catalog.manifest(t_from).unwrap()]).unwrap();
    // a stops cleanly: every table written back, the state file written.
    a.close().unwrap();
    let view =
        sextant_engine::member::PrefixStore::read_only(Arc::new(store.clone()) as _, "members/a/");
    assert_eq!(
        unclean_run(&view).unwrap(),
        Some(run),
        "the completed run stays unfinished"
    );
    assert!(b.failover_ready("a").unwrap(), "its completion is there");
    // b takes the rest, the destination table among them.
    for (id, owner, _) in catalog.all() {
        if owner == "a" {
            catalog.assign(id, "b");
        }
    }
    let rest: Vec<_> = catalog
        .tables("b")
        .unwrap()
        .into_iter()
        .filter(|m| m.entry.id != t_from)
        .collect();
    assert!(rest.iter().any(|m| m.entry.id == t_to));
    b.add_tables(&rest).unwrap();
    assert!(names(&b, dirs[from].soid).contains(&"f0".to_string()));
    assert!(
        !names(&b, dirs[to].soid).contains(&"moved".to_string()),
        "half of an unacknowledged rename: {:?}",
        names(&b, dirs[to].soid)
    );
    // a restarts: its journal is cut after P, and a new run begins.
    let a = open(&store, &catalog, "a", true);
    assert_eq!(a.crashed_incarnation(), Some(run));
    let report = a.recover_logless(Vec::new()).unwrap();
    assert!(!report.maybe_lost(), "{report:?}");
    assert_ne!(a.incarnation(), run);
}

/// A log-less member stopped cleanly after its membership lease is gone
/// — cut off, nobody has claimed its completion yet — leaves its run
/// unfinished: a claim may come between its reads and its clean mark
/// (the race left open by the two checks alone). Another server then
/// completes the run as after a crash, and the restart recovers it.
#[test]
fn a_member_stopped_cleanly_after_its_lease_is_gone_leaves_its_run_unfinished() {
    let (store, catalog, a, b, dirs) = cluster();
    let run = a.incarnation();
    catalog.set_member("a", false);
    a.close().unwrap();
    let view =
        sextant_engine::member::PrefixStore::read_only(Arc::new(store.clone()) as _, "members/a/");
    assert_eq!(
        unclean_run(&view).unwrap(),
        Some(run),
        "a run closed without its membership stays unfinished"
    );
    assert!(!b.failover_ready("a").unwrap(), "no completion yet");
    let report = b.complete_dead_member("a").unwrap();
    assert!(report.written && !report.maybe_lost(), "{report:?}");
    assert!(b.failover_ready("a").unwrap());
    for (id, owner, _) in catalog.all() {
        if owner == "a" {
            catalog.assign(id, "b");
        }
    }
    b.add_tables(&catalog.tables("b").unwrap()).unwrap();
    for d in &dirs {
        assert_eq!(names(&b, d.soid).len(), 4, "every file of a's run");
    }
    catalog.set_member("a", true);
    let a = open(&store, &catalog, "a", true);
    assert_eq!(a.crashed_incarnation(), Some(run));
    let report = a.recover_logless(Vec::new()).unwrap();
    assert!(!report.maybe_lost(), "{report:?}");
    assert_ne!(a.incarnation(), run);
}
