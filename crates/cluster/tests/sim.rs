//! The deterministic simulation of the cluster protocol over many seeds.
//! `SEXTANT_SIM_SEEDS=N` runs N seeds (default 1,000; tens of thousands in the
//! extended mode), `SEXTANT_SIM_SEED=S` replays one.

use sextant_cluster::sim::{run, Config, Logless};

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("SEXTANT_SIM_SEED") {
        return vec![s.parse().expect("SEXTANT_SIM_SEED is a number")];
    }
    let n: u64 = std::env::var("SEXTANT_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    (1..=n).collect()
}

#[test]
fn at_most_one_acknowledger_and_nothing_acknowledged_is_lost_under_faults() {
    let cfg = Config::default();
    let mut totals = sextant_cluster::sim::Report::default();
    let seeds = seeds();
    let many = seeds.len() >= 50;
    for seed in seeds {
        match run(seed, &cfg) {
            Ok(r) => {
                totals.acknowledged += r.acknowledged;
                totals.moves += r.moves;
                totals.reassignments += r.reassignments;
                totals.crashes += r.crashes;
                totals.pauses += r.pauses;
                totals.etcd_restarts += r.etcd_restarts;
                totals.borrows += r.borrows;
                totals.lends += r.lends;
                totals.retries += r.retries;
                totals.answered_retries += r.answered_retries;
                totals.reruns_after_lost_lease += r.reruns_after_lost_lease;
                totals.logless += r.logless;
                totals.machine_crashes += r.machine_crashes;
                totals.records_cut += r.records_cut;
                totals.completions += r.completions;
                totals.records_restored += r.records_restored;
                totals.acknowledged_restored += r.acknowledged_restored;
                totals.backups_lost += r.backups_lost;
                totals.acknowledged_in_gaps += r.acknowledged_in_gaps;
                totals.gaps_in_ranges += r.gaps_in_ranges;
                totals.splits += r.splits;
                totals.merges += r.merges;
                totals.reshapes_refused += r.reshapes_refused;
                totals.checkpoints += r.checkpoints;
                totals.checkpoints_refused += r.checkpoints_refused;
                totals.checkpoints_held += r.checkpoints_held;
                totals.handovers_held += r.handovers_held;
                totals.handovers_refused_stale += r.handovers_refused_stale;
            }
            Err(e) => panic!(
                "{e}\nreplay: SEXTANT_SIM_SEED={seed} cargo test -p sextant-cluster --test sim"
            ),
        }
    }
    eprintln!("{totals:?}");
    // The faults and the protocol's paths were exercised, not skipped
    // (over many seeds; one replayed seed may lack some).
    if !many {
        return;
    }
    assert!(totals.acknowledged > 0 && totals.reassignments > 0 && totals.moves > 0);
    assert!(totals.crashes > 0 && totals.pauses > 0 && totals.etcd_restarts > 0);
    assert!(
        totals.borrows > 0 && totals.lends > 0,
        "BORROW was exercised"
    );
    // Tables were split and merged, and some of those raced a move, a
    // borrow or a failover and were refused.
    assert!(totals.splits > 0 && totals.merges > 0 && totals.reshapes_refused > 0);
    // Checkpoints were committed, some held on the way to etcd (applied
    // late), and some refused.
    assert!(totals.checkpoints > 0 && totals.checkpoints_held > 0);
    assert!(totals.checkpoints_refused > 0);
    assert!(totals.handovers_held > 0, "handovers were applied late");
    // Log-less: machine crashes cut acknowledged records, and completions
    // brought them back from the clients' backups.
    assert!(totals.logless > 0 && totals.machine_crashes > 0 && totals.records_cut > 0);
    assert!(totals.completions > 0 && totals.acknowledged_restored > 0);
    assert!(totals.backups_lost > 0, "clients lost backups");
    assert!(
        totals.acknowledged_in_gaps > 0,
        "a lost backup's record was cut: a GAP"
    );
}

#[test]
fn without_faults_every_table_is_served_and_balanced() {
    let cfg = Config {
        faults: false,
        ..Config::default()
    };
    let mut inode_moves = 0;
    let mut balance_moves = 0;
    // `SEXTANT_SIM_NOFAULT_SEEDS=N`: seeds 1..=N (default 100).
    let n: u64 = std::env::var("SEXTANT_SIM_NOFAULT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    for seed in 1..=n {
        let r = run(seed, &cfg).unwrap_or_else(|e| panic!("{e}"));
        inode_moves += r.inode_moves;
        balance_moves += r.balance_moves.values().map(Vec::len).sum::<usize>();
        // The figures are steady and nothing fails: balance never takes a
        // table back where it took it from, nor moves one again and again.
        for (t, moves) in &r.balance_moves {
            assert!(
                moves.len() <= 2,
                "seed {seed}: {t:?} moved {} times for balance: {moves:?}",
                moves.len()
            );
            for (i, (from, to)) in moves.iter().enumerate() {
                assert!(
                    !moves[i + 1..].contains(&(*to, *from)),
                    "seed {seed}: {t:?} moved back and forth: {moves:?}"
                );
            }
        }
    }
    // Seeds 2 and 3 modulo 4 give tables inode counts (2: without
    // rates): the coordinator balanced by them, and converged (`run`
    // checks it wants no move at the end).
    eprintln!("{n} seeds without faults: {balance_moves} balancing moves, {inode_moves} of them for inodes");
    assert!(inode_moves > 0, "no move for inodes in {n} seeds");
}

/// The checks see a completion that leaves the clients' backups out (new
/// owners replay the synced prefix alone): an acknowledged operation whose
/// record a machine crash cut is lost. (Over the 1,000 seeds of the test
/// above, 71 of the 484 log-less ones fail so, the first ones 11, 29, 41.)
#[test]
fn a_completion_without_the_clients_backups_loses_acknowledged_operations() {
    let cfg = Config {
        logless: Logless::Always,
        complete_from_backups: false,
        ..Config::default()
    };
    let failure = (1..=100).find_map(|seed| run(seed, &cfg).err());
    let e = failure.expect("one of 100 seeds loses an acknowledged operation");
    assert!(e.contains("was acknowledged and is lost"), "{e}");
    eprintln!("as expected: {e}");
}

/// A split or merge left unfenced, three ways; each is caught. (Over the
/// 1,000 seeds of the first test: without the compare on the server's
/// membership generation 1 fails — 432: a split begun before the server
/// lost its lease and loaded the table again commits its stale contents.
/// It was 5 — 175, 178, 225, 729, 896 — before splits and merges also
/// compared the manifests' revisions (and handovers were held): a reload
/// commits the table's manifest, so that compare refuses most such
/// splits too, but not one whose table's manifest revision the server
/// did not know when it began. Without the `move/`, `home/` and borrow checks 355
/// — a merge deletes a lent table, whose `home/` key stays; with the
/// halves' manifests swapped 764. Without a merge's owner key compares
/// none: a failover needs the lease gone, which the generation compare
/// catches, and a move needs the server's own handover, which waits for
/// the merge's outcome.)
#[test]
fn splits_and_merges_left_unfenced_are_caught() {
    use sextant_cluster::sim::ReshapeFault;
    let with = |fault| Config {
        reshape_fault: Some(fault),
        ..Config::default()
    };
    let cases = [
        (ReshapeFault::AnyGeneration, vec![432]),
        (ReshapeFault::NoMoveCompare, (1..=20).collect()),
        (ReshapeFault::SwappedManifests, (1..=20).collect()),
    ];
    for (fault, seeds) in cases {
        let cfg = with(fault);
        let e = seeds.iter().find_map(|seed| run(*seed, &cfg).err());
        let e = e.unwrap_or_else(|| panic!("{fault:?}: no seed of {seeds:?} fails"));
        eprintln!("as expected, {fault:?}: {e}");
    }
}

/// A manifest commit that etcd applies late — held on the way, its answer
/// lost, after the server gave it up and committed a later checkpoint of
/// the same table — moves the table's manifest back to an older snapshot
/// and journal position unless the commit compares the `manifest/` key's
/// revision the server last saw (as the real `commit_tables_at` does,
/// `TablesChange::manifest_revs`). The checks catch it. (Without the
/// compare 184 of the 1,000 seeds of the first test fail so, the first
/// ones 7, 29, 30; with it, none.)
#[test]
fn a_manifest_commit_applied_late_is_refused_only_with_the_manifest_compare() {
    let cfg = Config {
        manifest_compare: false,
        ..Config::default()
    };
    let failure = (1..=30).find_map(|seed| run(seed, &cfg).err());
    let e = failure.expect("one of 30 seeds moves a manifest back");
    assert!(e.contains("went back"), "{e}");
    eprintln!("as expected: {e}");
}

/// A handover etcd applies late — held on the way while its server lost
/// its lease, joined again and loaded the table again under the same
/// owner revision (a load does not write the owner key) — hands over the
/// earlier generation's stale snapshot unless it compares the server's
/// membership generation (as the real `handover_txn` compares
/// `member/<server>`'s lease). The checks catch it. (Without the compare,
/// seeds 79 and 80 of the first test's fail: a second acknowledger, and
/// an acknowledged operation lost.)
#[test]
fn a_handover_of_an_ended_generation_is_refused_only_with_the_member_compare() {
    let cfg = Config {
        handover_member_compare: false,
        ..Config::default()
    };
    let e = [79, 80].iter().find_map(|seed| run(*seed, &cfg).err());
    let e = e.expect("seed 79 or 80 fails without the compare");
    eprintln!("as expected: {e}");
    for seed in [79, 80] {
        run(seed, &Config::default()).unwrap_or_else(|e| panic!("with the compare: {e}"));
    }
}
