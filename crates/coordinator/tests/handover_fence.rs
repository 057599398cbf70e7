//! The DROP's handover transaction against a real etcd (issue 20, R2/R3):
//! one prepared under a membership lease that was lost since — its answer
//! lost, applied late by etcd — never applies after the server joined
//! again and loaded the table once more, although the owner key's
//! revision it compares is unchanged (a reload does not write the owner
//! key). Skipped where no `etcd` binary is installed.

mod common;

use common::Etcd;
use sextant_cluster::ids::{Epoch, Revision, TableId};
use sextant_coordinator::catalog::{commit_tables, TableState, TablesChange};
use sextant_coordinator::keys;
use sextant_coordinator::ownership::handover_txn;
use sextant_types::SoidRange;

async fn value(client: &mut etcd_client::Client, key: String) -> Vec<u8> {
    let r = client.get(key, None).await.unwrap();
    r.kvs()
        .first()
        .map(|kv| kv.value().to_vec())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_prepared_under_a_lost_lease_never_applies_after_the_rejoin() {
    let dir = tempfile::tempdir().unwrap();
    let Some(etcd) = Etcd::start(dir.path()) else {
        return;
    };
    let (mut client, cfg) = common::connected(&etcd, "/handover-test/").await;
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
    let t = TableId(7);
    client
        .put(
            cfg.key(&keys::table_key(t)),
            keys::encode_range(&SoidRange::ALL),
            None,
        )
        .await
        .unwrap();
    let put = client
        .put(cfg.key(&keys::owner_key(t)), "1 s1", None)
        .await
        .unwrap();
    let granted = Revision(put.header().unwrap().revision() as u64);
    // The coordinator asks to move the table to s2; s1 (under L1) drops
    // it and sends its handover — whose answer is lost: etcd applies it
    // later.
    client
        .put(cfg.key(&keys::move_key(t)), "s2", None)
        .await
        .unwrap();
    let late = handover_txn(
        &cfg,
        "s1",
        l1,
        t,
        granted,
        "s2",
        Epoch(1),
        Some(b"final, as of L1".to_vec()),
    );
    // L1 is lost (its member key goes with it); s1 joins again under L2
    // before the coordinator reassigned anything, so etcd still names it
    // at the same owner revision, and it loads the table again: the load
    // commits a manifest, not the owner key, and the table acknowledges
    // operations from then on.
    client.lease_revoke(l1).await.unwrap();
    let l2 = join(client.clone()).await;
    assert_ne!(l1, l2);
    let reload = TablesChange {
        updated: vec![(
            TableState {
                table: t,
                range: SoidRange::ALL,
                manifest: b"reloaded under L2, with what it acknowledged".to_vec(),
            },
            granted,
        )],
        member_lease: Some(l2),
        ..TablesChange::default()
    };
    assert!(commit_tables(&mut client, &cfg, "s1", &reload)
        .await
        .unwrap());
    let owner_rev = client
        .get(cfg.key(&keys::owner_key(t)), None)
        .await
        .unwrap()
        .kvs()[0]
        .mod_revision();
    assert_eq!(owner_rev as u64, granted.0, "the reload left the owner key");
    // The late handover of L1: refused, nothing written — the manifest
    // stays the reload's, the table s1's, the move pending.
    let r = client.txn(late).await.unwrap();
    assert!(
        !r.succeeded(),
        "a handover prepared under a lost lease applied after the rejoin"
    );
    assert_eq!(
        value(&mut client, cfg.key(&keys::manifest_key(t))).await,
        b"reloaded under L2, with what it acknowledged"
    );
    assert_eq!(
        value(&mut client, cfg.key(&keys::owner_key(t))).await,
        b"1 s1"
    );
    assert_eq!(value(&mut client, cfg.key(&keys::move_key(t))).await, b"s2");
    // The handover of L2's DROP goes through: the new owner at epoch 2,
    // the final manifest of L2, the move gone.
    let now = handover_txn(
        &cfg,
        "s1",
        l2,
        t,
        granted,
        "s2",
        Epoch(1),
        Some(b"final, as of L2".to_vec()),
    );
    assert!(client.txn(now).await.unwrap().succeeded());
    assert_eq!(
        value(&mut client, cfg.key(&keys::manifest_key(t))).await,
        b"final, as of L2"
    );
    assert_eq!(
        value(&mut client, cfg.key(&keys::owner_key(t))).await,
        b"2 s2"
    );
    assert!(value(&mut client, cfg.key(&keys::move_key(t)))
        .await
        .is_empty());
}
