//! The table catalogue's writes that are not moves: new table numbers,
//! and a server's own change of its tables' ranges (an engine split or
//! merge) committed as one etcd transaction.
//!
//! A split creates a table that belongs to the splitting server at once:
//! `table/<new>` (its range), `owner/<new>` (`1 <server>`) and
//! `manifest/<new>` are written together with the shrunk range and new
//! manifest of the table it came from, conditional on every touched
//! table's `owner/<id>` revision being the one this server was granted
//! (R2) and on the new table number being unused. The shell then sees a
//! table of its own it never loaded and ADDs it (the host answers with
//! the table it already has).
//!
//! Table numbers come from `meta/next_table`, a counter advanced by
//! compare-and-swap; the root table is 0, so the first number handed out
//! is 1.

use crate::etcd::{bounded, EtcdConfig};
use crate::keys::{self, OwnerValue};
use crate::CoordError;
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use sextant_cluster::ids::{Epoch, Revision, TableId};
use sextant_types::SoidRange;

/// The key of the table-number counter.
pub const NEXT_TABLE_KEY: &str = "meta/next_table";

/// A fresh table number, never handed out before in this cluster.
pub async fn next_table_id(client: &mut Client, cfg: &EtcdConfig) -> Result<TableId, CoordError> {
    let key = cfg.key(NEXT_TABLE_KEY);
    for _ in 0..64 {
        let resp = bounded(cfg, client.get(key.as_bytes(), None)).await?;
        let (current, rev) = match resp.kvs().first() {
            Some(kv) => (
                std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|v| v.parse::<u32>().ok())
                    .unwrap_or(1),
                kv.mod_revision(),
            ),
            None => (1, 0),
        };
        let next = current
            .checked_add(1)
            .ok_or_else(|| CoordError::Exhausted {
                what: "table numbers".into(),
            })?;
        let cond = if rev == 0 {
            Compare::create_revision(key.clone(), CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key.clone(), CompareOp::Equal, rev)
        };
        let txn = Txn::new().when(vec![cond]).and_then(vec![TxnOp::put(
            key.clone(),
            next.to_string(),
            None,
        )]);
        if bounded(cfg, client.txn(txn)).await?.succeeded() {
            return Ok(TableId(current));
        }
    }
    Err(CoordError::Contended {
        what: "the table-number counter".into(),
    })
}

/// One table's new state in a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableState {
    pub table: TableId,
    pub range: SoidRange,
    pub manifest: Vec<u8>,
}

/// A server's change of its own tables, all or nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablesChange {
    /// Tables it owns, with the owner revision it was granted them under
    /// (the fence), and their new range and manifest.
    pub updated: Vec<(TableState, Revision)>,
    /// New tables (fresh numbers), owned by it from now on.
    pub created: Vec<TableState>,
    /// Tables it owns (fenced likewise) that no longer exist (a merge).
    pub removed: Vec<(TableId, Revision)>,
}

/// Commits `change` for server `me`. `Ok(false)`: a fence failed (a table
/// is no longer this server's, or a number was taken): nothing written.
pub async fn commit_tables(
    client: &mut Client,
    cfg: &EtcdConfig,
    me: &str,
    change: &TablesChange,
) -> Result<bool, CoordError> {
    let mut when = Vec::new();
    let mut then = Vec::new();
    let fence = |t: TableId, rev: Revision| {
        Compare::mod_revision(
            cfg.key(&keys::owner_key(t)),
            CompareOp::Equal,
            i64::try_from(rev.0).unwrap_or(i64::MAX),
        )
    };
    for (t, rev) in &change.updated {
        when.push(fence(t.table, *rev));
        then.push(TxnOp::put(
            cfg.key(&keys::table_key(t.table)),
            keys::encode_range(&t.range),
            None,
        ));
        then.push(TxnOp::put(
            cfg.key(&keys::manifest_key(t.table)),
            t.manifest.clone(),
            None,
        ));
    }
    for t in &change.created {
        when.push(Compare::create_revision(
            cfg.key(&keys::table_key(t.table)),
            CompareOp::Equal,
            0,
        ));
        then.push(TxnOp::put(
            cfg.key(&keys::table_key(t.table)),
            keys::encode_range(&t.range),
            None,
        ));
        let owner = OwnerValue {
            epoch: Epoch(1),
            server: me.to_string(),
        };
        then.push(TxnOp::put(
            cfg.key(&keys::owner_key(t.table)),
            owner.encode(),
            None,
        ));
        then.push(TxnOp::put(
            cfg.key(&keys::manifest_key(t.table)),
            t.manifest.clone(),
            None,
        ));
    }
    if !change.created.is_empty() {
        // The first table of a cluster (the root, made by a server's
        // engine) bootstraps it; later ones leave the key as it is.
        then.push(TxnOp::put(cfg.key(keys::BOOTSTRAPPED_KEY), "1", None));
    }
    for (t, rev) in &change.removed {
        when.push(fence(*t, *rev));
        for key in [
            keys::table_key(*t),
            keys::owner_key(*t),
            keys::manifest_key(*t),
            keys::move_key(*t),
            keys::home_key(*t),
        ] {
            then.push(TxnOp::delete(cfg.key(&key), None));
        }
    }
    if then.is_empty() {
        return Ok(true);
    }
    let txn = Txn::new().when(when).and_then(then);
    Ok(bounded(cfg, client.txn(txn)).await?.succeeded())
}
