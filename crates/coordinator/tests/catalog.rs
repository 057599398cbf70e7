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
use std::time::{Duration, Instant};

async fn connected(e: &Etcd) -> (etcd_client::Client, EtcdConfig) {
    let cfg = EtcdConfig {
        prefix: "/catalog-test/".into(),
        request_timeout: Duration::from_secs(2),
        ..EtcdConfig::new(vec![e.endpoint()])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_numbers_are_unique_and_splits_are_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = Etcd::start(dir.path()) else {
        return;
    };
    let (mut client, cfg) = connected(&etcd).await;
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
    };
    assert!(commit_tables(&mut client, &cfg, "s1", &merge)
        .await
        .unwrap());
    let state = map::load(&mut client, &cfg).await.unwrap();
    assert_eq!(state.tables.len(), 1);
    assert!(state.owner(TableId(100)).is_none());
}
