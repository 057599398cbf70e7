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
                totals.claims += r.claims;
                totals.claims_refused += r.claims_refused;
                totals.completions_by_restart += r.completions_by_restart;
                totals.completions_taken += r.completions_taken;
                totals.loads_refused_claimed += r.loads_refused_claimed;
                totals.completions_retired += r.completions_retired;
                totals.runs_begun_at_rejoin += r.runs_begun_at_rejoin;
                totals.completions_of_left_runs += r.completions_of_left_runs;
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
    // The claim: granted, and some refused (the server was back); runs
    // completed by their own restarting server, and completers that took
    // the completion already written; loads refused while a claim stood,
    // and completions written while a server was cut off retired by it.
    assert!(totals.claims > 0 && totals.completions_by_restart > 0);
    assert!(totals.completions_taken > 0 && totals.loads_refused_claimed > 0);
    assert!(totals.completions_retired > 0);
    // Servers that joined again began new runs.
    assert!(totals.runs_begun_at_rejoin > 0);
}

/// Two holes the simulation found in the real log-less claim protocol
/// (issue 21 item 6), on the seeds that showed them; both fixed, and each
/// seed fails with the protocol as it was (check by reverting the fix in
/// `sim.rs`, `Event::Complete` and `Call::Release`'s failure):
/// - a lost release (seeds 26, 131, 374, 408, 411, 632 of the first
///   test): `release_completion_claim` was sent once, so when etcd did not
///   answer it (etcd down, the claimer cut off) `logless-claim/<server>`
///   lived on with the claimer's lease, and the server it names, back as a
///   member, was refused every table (`refuse_while_claimed`): "unserved".
///   Now the release is sent again until etcd answers, and deletes only
///   the claimer's own put (compared by revision).
/// - a claimer paused right after its claim (`stop-at:completion-claimed`)
///   past its lease (seed 3746, `SEXTANT_SIM_TRACE=1`: s0 killed at 6,189
///   ms; s1 claims at 7,047 and is paused at 7,068 for 2,950 ms; s0
///   restarts at 7,956 (run 3), completes its run 1 itself, joins, is
///   refused while the claim stands and served once s1's lease took it;
///   s1 woke at 10,018 and completed s0's run 3 — the live one — since it
///   read the run again when writing). The real code would then cut s0's
///   journal after that completion's end at its next restart
///   (`cut_after_completion`) or stop there at its next failover: what s0
///   acknowledged since was lost. Now the claimer completes the run it
///   read before claiming (`complete_member_run`), and nothing if the
///   server's state names another run.
#[test]
fn the_claim_holes_the_simulation_found_stay_closed() {
    for seed in [26, 131, 374, 408, 411, 632, 3746] {
        run(seed, &Config::default()).unwrap_or_else(|e| {
            panic!("{e}\nreplay: SEXTANT_SIM_SEED={seed} cargo test -p sextant-cluster --test sim")
        });
    }
}

/// The last hole of the claim (issue 21 item 6), found by reasoning and
/// shown here with the test-only fault `stop-before:completion-write`
/// (`Config::stop_before_completion_write`: every claimer whose last
/// check of its claim passed is paused, past its lease, before it writes
/// the completion — the check and the write are separate steps). The
/// claim goes with the claimer's lease; the server it names, cut off
/// (paused or partitioned) past its own lease, joins again, finds no
/// claim and no completion and serves; the claimer wakes and writes. With
/// the run going on across the rejoin (`new_run_at_rejoin: false`, the
/// protocol before 2026-12-07) that is the completion of the live run:
/// seeds 1, 2 and 6 fail so ("completed … while s… serves that run"; with
/// one move at a time it was 3, 22 and 37, and with that check and the one
/// on acknowledgements into a completed run left out, each of those ended
/// with an acknowledged operation lost). A new run at
/// every rejoin (`Engine::begin_serving`) makes it the completion of a run
/// nobody reads, and they pass, as do the first
/// `SEXTANT_SIM_CLAIM_SEEDS` seeds (default 30) under that fault (all of
/// the first 2,000 once R3 compares the last join, 2026-12-07: 6,509 runs
/// begun at a rejoin, 1,488 completions written late for a run left so).
///
/// Seed 49 under the fault showed another race, closed since: see
/// [`a_stale_view_does_not_reassign_from_a_server_that_joined_since`].
#[test]
fn a_claimer_paused_between_its_check_and_its_write_completes_no_live_run() {
    // (Seeds found under the default schedule, many moves in flight; with
    // one move at a time they were 3, 22 and 37.)
    let fault = Config {
        logless: Logless::Always,
        stop_before_completion_write: true,
        ..Config::default()
    };
    let same_run = Config {
        new_run_at_rejoin: false,
        ..fault.clone()
    };
    for seed in [1, 2, 6] {
        let e = run(seed, &same_run)
            .err()
            .unwrap_or_else(|| panic!("seed {seed} passes with the run going on across a rejoin"));
        assert!(
            e.contains("serves that run") || e.contains("which was completed"),
            "{e}"
        );
        eprintln!("as expected, the run going on across a rejoin: {e}");
        run(seed, &fault).unwrap_or_else(|e| {
            panic!("{e}\nreplay: SEXTANT_SIM_SEED={seed} cargo test -p sextant-cluster --test sim")
        });
    }
    let n: u64 = std::env::var("SEXTANT_SIM_CLAIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let mut totals = sextant_cluster::sim::Report::default();
    for seed in 1..=n {
        let r = run(seed, &fault).unwrap_or_else(|e| panic!("{e}"));
        totals.runs_begun_at_rejoin += r.runs_begun_at_rejoin;
        totals.completions_of_left_runs += r.completions_of_left_runs;
    }
    eprintln!(
        "{n} seeds: {} runs begun at a rejoin, {} completions written late for a run left so (read by nobody)",
        totals.runs_begun_at_rejoin, totals.completions_of_left_runs
    );
    assert!(totals.runs_begun_at_rejoin > 0 && totals.completions_of_left_runs > 0);
}

/// A coordinator paused in the middle of a round (seed 49 under the
/// fault above: while it completes another server's run) acts on its view
/// when it wakes. A server that view showed dead, its crashed run
/// completed, had meanwhile restarted, joined, begun a new log-less run
/// and lost its lease again. With R3 comparing only that the old owner's
/// member key is absent — it is, again — the table is reassigned before
/// that new run is completed ("reassigned from … before … was
/// completed"). Every join now also writes `joined/<server>` (no lease),
/// and the reassignment compares its revision with the view's: the stale
/// view's write fails, and a fresh view waits for the completion.
#[test]
fn a_stale_view_does_not_reassign_from_a_server_that_joined_since() {
    let fault = Config {
        logless: Logless::Always,
        stop_before_completion_write: true,
        ..Config::default()
    };
    let member_key_only = Config {
        compare_last_join: false,
        ..fault.clone()
    };
    let Err(e) = run(49, &member_key_only) else {
        panic!("seed 49 passes with R3 comparing the member key alone");
    };
    assert!(e.contains("was reassigned from"), "{e}");
    eprintln!("as expected, R3 on the member key alone: {e}");
    run(49, &fault).unwrap_or_else(|e| {
        panic!("{e}\nreplay: SEXTANT_SIM_SEED=49 cargo test -p sextant-cluster --test sim")
    });
}

/// Two completers of one run that both write (a `put` instead of
/// `put_blob_new`: the restarting server's own decision written over the
/// claimer's, or the other way round): readers of the run replay two
/// different decisions, and the checks catch it. (Without first-writer-
/// wins, 9 of the first 100 seeds fail so — 8, 15, 36, 66, 67, 69, 70,
/// 84, 88; with it, none of them.)
#[test]
fn two_completions_of_one_run_are_caught_without_first_writer_wins() {
    let cfg = Config {
        completion_put_new: false,
        ..Config::default()
    };
    let e = [8, 15].iter().find_map(|seed| run(*seed, &cfg).err());
    let e = e.expect("seed 8 or 15 fails when completers overwrite");
    assert!(e.contains("two completions of one run"), "{e}");
    eprintln!("as expected: {e}");
    for seed in [8, 15] {
        run(seed, &Config::default()).unwrap_or_else(|e| panic!("first writer wins: {e}"));
    }
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
    let start: u64 = std::env::var("START")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in start..=n {
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
/// lost its lease and loaded the table again commits its stale contents;
/// since the simulation models the log-less completion claim (which moves
/// every log-less seed's schedule) it was 395 with one move at a time, and
/// with many moves in flight (the default since 2026-12-07) the first is
/// 172: a key acknowledged in a table etcd's map no longer puts it in.
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
    // (Seed 172 fails so under the default schedule, many moves in
    // flight; with one move at a time it was 395.)
    let with = |fault| Config {
        reshape_fault: Some(fault),
        ..Config::default()
    };
    let cases = [
        (ReshapeFault::AnyGeneration, vec![172]),
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
/// seeds 8 and 10 of the first test's fail (79 and 80 with one move at a
/// time): a second acknowledger, and
/// an acknowledged operation lost.)
#[test]
fn a_handover_of_an_ended_generation_is_refused_only_with_the_member_compare() {
    // (Seeds 8 and 10 fail so under the default schedule, many moves in
    // flight; with one move at a time they were 79 and 80.)
    let cfg = Config {
        handover_member_compare: false,
        ..Config::default()
    };
    let e = [8, 10].iter().find_map(|seed| run(*seed, &cfg).err());
    let e = e.expect("seed 8 or 10 fails without the compare");
    eprintln!("as expected: {e}");
    for seed in [8, 10] {
        run(seed, &Config::default()).unwrap_or_else(|e| panic!("with the compare: {e}"));
    }
}

/// How many seeds the spreading tests run (`SEXTANT_SIM_SPREAD_SEEDS`,
/// default 200).
fn spread_seeds() -> u64 {
    std::env::var("SEXTANT_SIM_SPREAD_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// Issue 21, spreading: server 0 takes all 24 tables, then servers 1–3
/// join and balance spreads the tables with many moves in flight at once
/// (`Config::max_moves`, the real default) — while servers crash (plain
/// and machine crashes), pause past their leases and are cut off from
/// etcd, etcd restarts, tables split and merge and borrows come and go.
/// Every check of `run` holds: at most one acknowledger per table and
/// key, nothing acknowledged lost or applied twice, and after settling
/// every table has exactly one owner, a live member serving it, and no
/// move is left pending (every move ends: carried out, or its table
/// reassigned). Fails without concurrent moves (`max_moves: 1`, the old
/// one at a time): never more than one move pending.
#[test]
fn many_moves_in_flight_under_crashes_keep_one_owner_and_end() {
    let cfg = Config {
        tables: 24,
        late_join_ms: Some(1_500),
        ..Config::default()
    };
    let (mut most, mut crashes, mut moves, mut reassignments) = (0, 0, 0, 0);
    let mut concurrent_runs = 0;
    let n = spread_seeds();
    for seed in 1..=n {
        let r = run(seed, &cfg).unwrap_or_else(|e| {
            panic!("{e}\nreplay: SEXTANT_SIM_SEED={seed} (late joiners) cargo test -p sextant-cluster --test sim")
        });
        most = most.max(r.most_moves_pending);
        concurrent_runs += usize::from(r.most_moves_pending > 1);
        crashes += r.crashes;
        moves += r.moves;
        reassignments += r.reassignments;
    }
    eprintln!(
        "{n} seeds with late joiners: {moves} moves, at most {most} pending at once, \
         {concurrent_runs} runs with several; {crashes} crashes, {reassignments} reassignments"
    );
    assert!(crashes > 0 && reassignments > 0 && moves > 0);
    assert!(most >= 8, "at most {most} moves were pending at once");
    assert!(
        concurrent_runs * 2 > n as usize,
        "only {concurrent_runs} of {n} runs had several moves pending"
    );
}

/// Without faults (and without borrows, to time balancing alone): the
/// tables the three late joiners should get are all asked for within 3 s
/// of their joining (median 1.0 s, at most 1.6 s over seeds 1–50),
/// several moves at a time, and the coordinator then wants nothing more
/// (`run` checks it); no table went back where balance took it from.
/// One move at a time (each a round of the coordinator, the owner's DROP
/// and the handover) took a median of 11 s, up to 17.6 s (fails so with
/// `max_moves: 1`).
#[test]
fn late_joiners_get_their_share_within_seconds() {
    let join = 1_500;
    let cfg = Config {
        tables: 24,
        late_join_ms: Some(join),
        faults: false,
        borrows: false,
        ..Config::default()
    };
    for seed in 1..=spread_seeds().min(50) {
        let r = run(seed, &cfg).unwrap_or_else(|e| panic!("{e}"));
        let took = r.last_balance_move_ms.saturating_sub(join);
        assert!(
            took <= 3_000,
            "seed {seed}: the last balancing move {took} ms after the joins"
        );
        assert!(r.most_moves_pending > 1, "seed {seed}: one move at a time");
        for (t, moves) in &r.balance_moves {
            for (i, (from, to)) in moves.iter().enumerate() {
                assert!(
                    !moves[i + 1..].contains(&(*to, *from)),
                    "seed {seed}: {t:?} moved back and forth: {moves:?}"
                );
            }
        }
    }
}
