//! What an operator asks of a cluster (the `sextant cluster` commands):
//! a move, a drain. Each is one conditional etcd write that the
//! coordinator and the owners then carry out.

use crate::etcd::{bounded, EtcdConfig};
use crate::keys;
use crate::CoordError;
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use sextant_cluster::ids::TableId;

/// Asks that `table` move to `to`: puts `move/<table>` if no move is
/// pending, the table's owner is another server (a move to its own owner
/// would stay pending and block every later one) and still the one read,
/// and `to` is a member. `false`: not asked (one of those does not hold).
pub async fn request_move(
    client: &mut Client,
    cfg: &EtcdConfig,
    table: TableId,
    to: &str,
) -> Result<bool, CoordError> {
    if !keys::valid_name(to) {
        return Err(CoordError::BadName { name: to.into() });
    }
    let okey = cfg.key(&keys::owner_key(table));
    let resp = bounded(cfg, client.get(okey.as_bytes(), None)).await?;
    let Some(kv) = resp.kvs().first() else {
        return Ok(false);
    };
    let owner = std::str::from_utf8(kv.value())
        .ok()
        .and_then(keys::OwnerValue::decode);
    if owner.is_none_or(|o| o.server == to) {
        return Ok(false);
    }
    let txn = Txn::new()
        .when(vec![
            Compare::create_revision(cfg.key(&keys::move_key(table)), CompareOp::Equal, 0),
            Compare::mod_revision(okey, CompareOp::Equal, kv.mod_revision()),
            Compare::create_revision(cfg.key(&keys::member_key(to)), CompareOp::Greater, 0),
        ])
        .and_then(vec![
            TxnOp::put(cfg.key(&keys::move_key(table)), to, None),
            // An admin's move places the table for good: a home a BORROW
            // noted would send it back there (a RETURN) once it lands —
            // the coordinator keeps a home while a move is on its way.
            //
            // Why here and not by the coordinator's ordinary `ForgetHome`
            // (issue 20, decided): the operator's intent lives only in
            // `move/<table>`, and the owner deletes that key when the move
            // lands. A `decide` that forgot the home on seeing an
            // operator's move could be too late: a round, or a newly
            // elected coordinator, that reads after the landing sees the
            // home and no move, and RETURNs the table where the operator
            // moved it from. Telling the two kinds of move apart in the
            // record would not help unless the landing also deleted the
            // home — this same write, moved later. Deleting it here, in
            // the transaction that records the move (conditional on the
            // owner revision read and no move pending), leaves no state
            // in which the move is recorded and the home still noted. A
            // BORROW still waiting re-lends the table from its new place
            // and notes that as its home. The randomized model of
            // `decide` in `sextant_cluster::coordinator`'s tests
            // (`operator_moves_amid_borrows_stay_placed_and_every_borrow_is_served`)
            // writes operator moves exactly so, amid borrows, and checks
            // every table ends where the operator placed it and every
            // borrow is served; it fails if the home is kept.
            TxnOp::delete(cfg.key(&keys::home_key(table)), None),
        ]);
    Ok(bounded(cfg, client.txn(txn)).await?.succeeded())
}

/// Marks `server` draining (it receives nothing and gives every table
/// away) or, with `false`, no longer.
pub async fn set_draining(
    client: &mut Client,
    cfg: &EtcdConfig,
    server: &str,
    draining: bool,
) -> Result<(), CoordError> {
    if !keys::valid_name(server) {
        return Err(CoordError::BadName {
            name: server.into(),
        });
    }
    let key = cfg.key(&keys::drain_key(server));
    if draining {
        bounded(cfg, client.put(key, "", None)).await?;
    } else {
        bounded(cfg, client.delete(key, None)).await?;
    }
    Ok(())
}

/// The record of the client key `name` (`clientkey/<name>`) and its mod
/// revision; `None`: no such key.
pub async fn read_client_key(
    client: &mut Client,
    cfg: &EtcdConfig,
    name: &str,
) -> Result<Option<(String, i64)>, CoordError> {
    if !keys::valid_name(name) {
        return Err(CoordError::BadName { name: name.into() });
    }
    let key = cfg.key(&keys::clientkey_key(name));
    let resp = bounded(cfg, client.get(key.as_bytes(), None)).await?;
    Ok(resp.kvs().first().map(|kv| {
        (
            String::from_utf8_lossy(kv.value()).into_owned(),
            kv.mod_revision(),
        )
    }))
}

/// Puts (`Some`) or deletes (`None`) the client key `name`'s record if
/// its mod revision is still `expect` (0: the key must not exist). The
/// revision of the write; `None`: the record changed meanwhile (nothing
/// written).
pub async fn write_client_key(
    client: &mut Client,
    cfg: &EtcdConfig,
    name: &str,
    record: Option<&str>,
    expect: i64,
) -> Result<Option<i64>, CoordError> {
    if !keys::valid_name(name) {
        return Err(CoordError::BadName { name: name.into() });
    }
    let key = cfg.key(&keys::clientkey_key(name));
    let op = match record {
        Some(r) => TxnOp::put(key.clone(), r, None),
        None => TxnOp::delete(key.clone(), None),
    };
    let txn = Txn::new()
        .when(vec![Compare::mod_revision(key, CompareOp::Equal, expect)])
        .and_then(vec![op]);
    let resp = bounded(cfg, client.txn(txn)).await?;
    Ok(resp
        .succeeded()
        .then(|| resp.header().map_or(0, |h| h.revision())))
}
