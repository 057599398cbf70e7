//! The catalogue's writes against a real etcd: table numbers are never
//! handed out twice, even to servers asking at once; a split is one
//! transaction, fenced by the owner revision (R2), that writes nothing
//! when a fence fails. Skipped where no `etcd` binary is installed.

mod common;

use common::Etcd;
use sextant_cluster::ids::{Revision, TableId};
use sextant_coordinator::catalog::{commit_tables, next_table_id, TableState, TablesChange};
use sextant_coordinator::{keys, map, EtcdConfig};
use sextant_types::{Soid, SoidRange};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_numbers_are_unique_and_splits_are_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = Etcd::start(dir.path()) else {
        return;
    };
    let (mut client, cfg) = common::connected(&etcd, "/catalog-test/").await;
    // Eight askers at once, eight numbers each: 64 distinct numbers from 1.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (mut c, cfg) = (client.clone(), cfg.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..8 {
                got.push(next_table_id(&mut c, &cfg).await.unwrap().0);
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (1..=64).collect::<Vec<u32>>());

    // s1 owns table 0 over everything (as a bootstrap and an ADD leave it).
    let root = TableId(0);
    client
        .put(
            cfg.key(&keys::table_key(root)),
            keys::encode_range(&SoidRange::ALL),
            None,
        )
        .await
        .unwrap();
    let put = client
        .put(cfg.key(&keys::owner_key(root)), "1 s1", None)
        .await
        .unwrap();
    let granted = Revision(put.header().unwrap().revision() as u64);
    let half = Soid::from_u128(1 << 127);
    let split = |rev: Revision, new: TableId| TablesChange {
        updated: vec![(
            TableState {
                table: root,
                range: SoidRange::new(Soid::MIN, Soid::from_u128((1 << 127) - 1)).unwrap(),
                manifest: b"left".to_vec(),
            },
            rev,
        )],
        created: vec![TableState {
            table: new,
            range: SoidRange::new(half, Soid::MAX).unwrap(),
            manifest: b"right".to_vec(),
        }],
        removed: vec![],
        member_lease: None,
        manifest_revs: Default::default(),
    };
    // A stale grant (another owner since): nothing written.
    assert!(
        !commit_tables(&mut client, &cfg, "s1", &split(Revision(1), TableId(100)))
            .await
            .unwrap()
    );
    let state = map::load(&mut client, &cfg).await.unwrap();
    assert_eq!(state.tables.len(), 1);
    // The grant as given: both tables, the new one s1's at epoch 1.
    assert!(
        commit_tables(&mut client, &cfg, "s1", &split(granted, TableId(100)))
            .await
            .unwrap()
    );
    let state = map::load(&mut client, &cfg).await.unwrap();
    assert_eq!(state.table_of(half), Some(TableId(100)));
    assert_eq!(state.table_of(Soid::MIN), Some(root));
    let owner = state.owner(TableId(100)).unwrap();
    assert_eq!((owner.server.as_str(), owner.epoch.0), ("s1", 1));
    // The split did not move the root's owner revision (the fence).
    assert_eq!(state.owner(root).unwrap().rev, granted);
    // A number in use is not created again.
    assert!(
        !commit_tables(&mut client, &cfg, "s1", &split(granted, TableId(100)))
            .await
            .unwrap()
    );
    // A merge removes the table, fenced like the rest.
    let merge = TablesChange {
        updated: vec![(
            TableState {
                table: root,
                range: SoidRange::ALL,
                manifest: b"whole".to_vec(),
            },
            granted,
        )],
        created: vec![],
        removed: vec![(TableId(100), state.owner(TableId(100)).unwrap().rev)],
        member_lease: None,
        manifest_revs: Default::default(),
    };
    assert!(commit_tables(&mut client, &cfg, "s1", &merge)
        .await
        .unwrap());
    let state = map::load(&mut client, &cfg).await.unwrap();
    assert_eq!(state.tables.len(), 1);
    assert!(state.owner(TableId(100)).is_none());
}

/// Issue 20 (the simulation's seed 175, on real etcd): a split planned
/// under membership lease L1 whose transaction etcd applies only after
/// the server lost L1, rejoined under L2 and loaded its table again (its
/// reload's commit put the table's whole range and a new manifest). No
/// owner key changed — nobody took the table — so the owner revision the
/// split is fenced by is still the granted one; only the compare on
/// `member/<server>`'s lease refuses it. (Without it the late split
/// landed: the reloaded table's range overlapped the new table's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_planned_under_a_lost_lease_is_refused_after_the_rejoin() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = Etcd::start(dir.path()) else {
        return;
    };
    let (mut client, cfg) = common::connected(&etcd, "/catalog-test/").await;
    let member = cfg.key(&keys::member_key("s1"));
    let join = |mut c: etcd_client::Client| {
        let member = member.clone();
        async move {
            let lease = c.lease_grant(60, None).await.unwrap().id();
            c.put(
                member,
                "127.0.0.1:1",
                Some(etcd_client::PutOptions::new().with_lease(lease)),
            )
            .await
            .unwrap();
            lease
        }
    };
    let l1 = join(client.clone()).await;
    let root = TableId(0);
    client
        .put(
            cfg.key(&keys::table_key(root)),
            keys::encode_range(&SoidRange::ALL),
            None,
        )
        .await
        .unwrap();
    let put = client
        .put(cfg.key(&keys::owner_key(root)), "1 s1", None)
        .await
        .unwrap();
    let granted = Revision(put.header().unwrap().revision() as u64);
    let half = Soid::from_u128(1 << 127);
    // Planned under L1; its answer lost, etcd applies it later.
    let late_split = TablesChange {
        updated: vec![(
            TableState {
                table: root,
                range: SoidRange::new(Soid::MIN, Soid::from_u128((1 << 127) - 1)).unwrap(),
                manifest: b"left, as of L1".to_vec(),
            },
            granted,
        )],
        created: vec![TableState {
            table: TableId(100),
            range: SoidRange::new(half, Soid::MAX).unwrap(),
            manifest: b"right, as of L1".to_vec(),
        }],
        removed: vec![],
        member_lease: Some(l1),
        manifest_revs: Default::default(),
    };
    // L1 is lost (its member key goes with it); s1 rejoins under L2 and,
    // etcd still naming it, loads the table again: its commit, planned
    // under L2, puts the whole range.
    client.lease_revoke(l1).await.unwrap();
    let l2 = join(client.clone()).await;
    assert_ne!(l1, l2);
    let reload = TablesChange {
        updated: vec![(
            TableState {
                table: root,
                range: SoidRange::ALL,
                manifest: b"reloaded under L2".to_vec(),
            },
            granted,
        )],
        member_lease: Some(l2),
        manifest_revs: Default::default(),
        ..TablesChange::default()
    };
    assert!(commit_tables(&mut client, &cfg, "s1", &reload)
        .await
        .unwrap());
    // The late split: refused, nothing written.
    assert!(
        !commit_tables(&mut client, &cfg, "s1", &late_split)
            .await
            .unwrap(),
        "a split planned under a lost lease landed after the rejoin"
    );
    let state = map::load(&mut client, &cfg).await.unwrap();
    assert_eq!(state.tables.len(), 1, "{:?}", state.tables);
    assert_eq!(state.tables[&root], SoidRange::ALL);
    let manifest = client
        .get(cfg.key(&keys::manifest_key(root)), None)
        .await
        .unwrap();
    assert_eq!(manifest.kvs()[0].value(), b"reloaded under L2");
    // Between the loss and the rejoin (no member key at all) it is
    // refused too.
    client.lease_revoke(l2).await.unwrap();
    let mut again = reload.clone();
    again.member_lease = Some(l2);
    assert!(!commit_tables(&mut client, &cfg, "s1", &again)
        .await
        .unwrap());
}

/// Merges against a real etcd (issue 20, item 6): refused — nothing
/// written — while a move, a lend (home) or a borrow names either table,
/// or an owner key moved past its grant; done in one transaction
/// otherwise, found done when tried again; and a move asked for the
/// merged-away table after it is refused. A move and a merge racing:
/// exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merges_are_one_fenced_transaction_refused_while_a_move_lend_or_borrow_names_a_table() {
    use sextant_coordinator::admin::request_move;
    use sextant_coordinator::catalog::{commit_merge, MergeOutcome};

    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = Etcd::start(dir.path()) else {
        return;
    };
    let (mut client, cfg) = common::connected(&etcd, "/catalog-test/").await;
    let half = 1u128 << 127;
    let low_range = SoidRange::new(Soid::MIN, Soid::from_u128(half - 1)).unwrap();
    let high_range = SoidRange::new(Soid::from_u128(half), Soid::MAX).unwrap();
    // s2 is a member (moves go to members only).
    client
        .put(cfg.key(&keys::member_key("s2")), "addr", None)
        .await
        .unwrap();
    // s1 owns tables `lower` and `upper` over the two halves.
    async fn setup(
        client: &mut etcd_client::Client,
        cfg: &EtcdConfig,
        lower: TableId,
        upper: TableId,
        ranges: (SoidRange, SoidRange),
    ) -> (Revision, Revision) {
        let mut revs = Vec::new();
        for (t, r) in [(lower, ranges.0), (upper, ranges.1)] {
            client
                .put(cfg.key(&keys::table_key(t)), keys::encode_range(&r), None)
                .await
                .unwrap();
            client
                .put(cfg.key(&keys::manifest_key(t)), format!("m{}", t.0), None)
                .await
                .unwrap();
            let put = client
                .put(cfg.key(&keys::owner_key(t)), "1 s1", None)
                .await
                .unwrap();
            revs.push(Revision(put.header().unwrap().revision() as u64));
        }
        (revs[0], revs[1])
    }
    let (lower, upper) = (TableId(1), TableId(2));
    let (lr, ur) = setup(&mut client, &cfg, lower, upper, (low_range, high_range)).await;
    let merged = TableState {
        table: lower,
        range: SoidRange::ALL,
        manifest: b"merged".to_vec(),
    };
    let untouched = |state: &sextant_coordinator::ClusterState| {
        state.tables.get(&lower) == Some(&low_range)
            && state.tables.get(&upper) == Some(&high_range)
            && state.owner(upper).is_some()
    };
    // Each of these names a table: refused, nothing written.
    let holds = [
        keys::move_key(upper),
        keys::move_key(lower),
        keys::home_key(upper),
        keys::home_key(lower),
        keys::borrow_key("s2"),
    ];
    for k in &holds {
        let value = if k.starts_with("borrow/") {
            format!("7 {}", upper.0)
        } else {
            "s2".to_string()
        };
        client.put(cfg.key(k), value, None).await.unwrap();
        let got = commit_merge(&mut client, &cfg, &merged, lr, upper, ur)
            .await
            .unwrap();
        assert!(matches!(got, MergeOutcome::Busy(_)), "{k}: {got:?}");
        let state = map::load(&mut client, &cfg).await.unwrap();
        assert!(untouched(&state), "{k}: nothing written");
        client.delete(cfg.key(k), None).await.unwrap();
    }
    // A borrow of other tables does not hold the merge back; an owner
    // past its grant does (R2).
    client
        .put(cfg.key(&keys::borrow_key("s2")), "7 8", None)
        .await
        .unwrap();
    let stale = Revision(ur.0 - 1);
    assert_eq!(
        commit_merge(&mut client, &cfg, &merged, lr, upper, stale)
            .await
            .unwrap(),
        MergeOutcome::Fenced
    );
    assert!(untouched(&map::load(&mut client, &cfg).await.unwrap()));
    assert_eq!(
        commit_merge(&mut client, &cfg, &merged, lr, upper, ur)
            .await
            .unwrap(),
        MergeOutcome::Merged
    );
    let state = map::load(&mut client, &cfg).await.unwrap();
    assert_eq!(state.tables.get(&lower), Some(&SoidRange::ALL));
    assert!(!state.tables.contains_key(&upper) && state.owner(upper).is_none());
    assert_eq!(
        state.owner(lower).unwrap().rev,
        lr,
        "the lower's fence stays"
    );
    assert_eq!(state.table_of(Soid::from_u128(half)), Some(lower));
    // Tried again (an answer lost): found done.
    assert_eq!(
        commit_merge(&mut client, &cfg, &merged, lr, upper, ur)
            .await
            .unwrap(),
        MergeOutcome::Merged
    );
    // A move of the merged-away table is refused; of the merged one, fine.
    assert!(!request_move(&mut client, &cfg, upper, "s2").await.unwrap());
    client
        .delete(cfg.key(&keys::borrow_key("s2")), None)
        .await
        .unwrap();

    // A move and a merge racing, many times: exactly one wins.
    let (mut merges, mut moves) = (0, 0);
    for i in 0..20u32 {
        let (lower, upper) = (TableId(10 + 2 * i), TableId(11 + 2 * i));
        // Ranges of their own (the map is not checked for a partition).
        let (lr, ur) = setup(&mut client, &cfg, lower, upper, (low_range, high_range)).await;
        let merged = TableState {
            table: lower,
            range: SoidRange::ALL,
            manifest: format!("merged {i}").into_bytes(),
        };
        let target = if i % 2 == 0 { upper } else { lower };
        let (mut c1, cfg1) = (client.clone(), cfg.clone());
        // Rounds differ in which one starts first.
        let pause = Duration::from_micros(700 * u64::from(i % 5));
        let mover = tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            request_move(&mut c1, &cfg1, target, "s2").await.unwrap()
        });
        let merge = commit_merge(&mut client, &cfg, &merged, lr, upper, ur)
            .await
            .unwrap();
        let moved = mover.await.unwrap();
        let did_merge = merge == MergeOutcome::Merged;
        if target == upper {
            assert!(
                moved != did_merge,
                "round {i}: moved {moved}, merge {merge:?}"
            );
        } else {
            // The lower table may move after the merge (as the whole).
            assert!(moved || did_merge, "round {i}: neither");
            if moved && did_merge {
                let state = map::load(&mut client, &cfg).await.unwrap();
                assert_eq!(state.moves.get(&lower).map(|m| m.to.as_str()), Some("s2"));
            }
        }
        if !did_merge {
            assert!(
                matches!(merge, MergeOutcome::Busy(_)),
                "round {i}: {merge:?}"
            );
            assert!(untouched_at(&mut client, &cfg, lower, upper).await);
        }
        merges += usize::from(did_merge);
        moves += usize::from(moved);
    }
    eprintln!("{merges} merges, {moves} moves");
    assert!(
        merges > 0 && moves > 0,
        "{merges} merges, {moves} moves: no race"
    );
}

async fn untouched_at(
    client: &mut etcd_client::Client,
    cfg: &EtcdConfig,
    lower: TableId,
    upper: TableId,
) -> bool {
    let state = map::load(client, cfg).await.unwrap();
    state.tables.contains_key(&lower)
        && state.tables.contains_key(&upper)
        && state.owner(upper).is_some()
}

/// Issue 20: two commits of one table by its owner under the same owner
/// revision (and lease): A prepared first and delivered last (its answer
/// was lost, it sat in the network), B applied in between. A compares the
/// manifest revision it replaced, which B moved past: refused, and known
/// settled (by B's put alone, and read from etcd). Without the manifest
/// compare A applied and the manifest went back to A's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_prepared_before_an_applied_one_never_applies() {
    use sextant_coordinator::catalog::{
        commit_tables_at, settles, tables_change_applied, tables_change_settled,
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = Etcd::start(dir.path()) else {
        return;
    };
    let (mut client, cfg) = common::connected(&etcd, "/catalog-test/").await;
    let t = TableId(3);
    client
        .put(
            cfg.key(&keys::table_key(t)),
            keys::encode_range(&SoidRange::ALL),
            None,
        )
        .await
        .unwrap();
    let owner = client
        .put(cfg.key(&keys::owner_key(t)), "1 s1", None)
        .await
        .unwrap();
    let owner_rev = Revision(owner.header().unwrap().revision() as u64);
    let first = client
        .put(cfg.key(&keys::manifest_key(t)), "m0", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let change = |manifest: &str, seen: i64| TablesChange {
        updated: vec![(
            TableState {
                table: t,
                range: SoidRange::ALL,
                manifest: manifest.as_bytes().to_vec(),
            },
            owner_rev,
        )],
        manifest_revs: [(t, seen)].into_iter().collect(),
        ..TablesChange::default()
    };
    let a = change("mA", first);
    let b = change("mB", first);
    assert!(!tables_change_settled(&mut client, &cfg, "s1", &a)
        .await
        .unwrap());
    let applied = commit_tables_at(&mut client, &cfg, "s1", &b).await.unwrap();
    assert!(applied.is_some_and(|r| r > first));
    assert!(settles(&b, &a));
    assert!(tables_change_settled(&mut client, &cfg, "s1", &a)
        .await
        .unwrap());
    // A delivered now.
    assert!(!commit_tables(&mut client, &cfg, "s1", &a).await.unwrap());
    let now = client
        .get(cfg.key(&keys::manifest_key(t)), None)
        .await
        .unwrap();
    assert_eq!(now.kvs()[0].value(), b"mB", "the manifest went back");
    assert!(!tables_change_applied(&mut client, &cfg, &a).await.unwrap());
    // The next commit compares what B left: applies.
    let c = change("mC", applied.unwrap());
    assert!(commit_tables(&mut client, &cfg, "s1", &c).await.unwrap());
}
