//! The table catalogue's writes that are not moves: new table numbers,
//! and a server's own change of its tables' ranges (an engine split or
//! merge) committed as one etcd transaction — or, when it is bigger than
//! etcd takes in one, as an ordered sequence of them, each leaving the
//! catalogue's ranges consistent ([`TablesChange::pieces`]).
//!
//! A split creates a table that belongs to the splitting server at once:
//! `table/<new>` (its range), `owner/<new>` (`1 <server>`) and
//! `manifest/<new>` are written together with the shrunk range and new
//! manifest of the table it came from, conditional on every touched
//! table's `owner/<id>` revision being the one this server was granted
//! (R2), on the new table number being unused and on `member/<server>`
//! being on the membership lease the change was planned under (a
//! transaction applied late, after a lease loss and a rejoin, writes
//! nothing: [`TablesChange::member_lease`]), and on every updated table's
//! `manifest/` revision being the one the server last saw
//! ([`TablesChange::manifest_revs`]): a manifest never goes back. The
//! shell then sees a
//! table of its own it never loaded and ADDs it (the host answers with
//! the table it already has).
//!
//! A merge ([`commit_merge`]) is the other way round: the upper table's
//! keys go and the lower one's range and manifest take both, in one
//! transaction that also requires that no move, lend or borrow names
//! either table (see there: the rule that keeps merges and moves apart).
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
    /// The membership lease the change was planned under: the commit
    /// requires `member/<server>` to be on it still. A lease loss without
    /// a reassignment leaves every owner key as it was, so the owner
    /// revisions alone let a transaction planned before the loss — whose
    /// answer was lost, and which etcd applies late — land after the
    /// server rejoined and loaded its tables again from the catalogue
    /// (issue 20, the simulation's seed 175: a split's stale halves over
    /// the reloaded table). `None`: not compared.
    pub member_lease: Option<i64>,
    /// For updated tables: the `manifest/` key's mod revision the change
    /// replaces, as the server last saw it (0: no manifest yet); the
    /// commit requires it unchanged. Neither the owner revision nor the
    /// lease changes between two commits of one server, so without this
    /// a commit whose answer was lost, applied late by etcd after a later
    /// commit of the same table, moved the table's manifest back to an
    /// older snapshot and journal position (issue 20). With it, a commit
    /// applied moves the key's revision past every revision read before
    /// it, so no commit prepared earlier can apply after it. A table not
    /// in it: not compared.
    pub manifest_revs: std::collections::BTreeMap<TableId, i64>,
}

/// Commits `change` for server `me`. `Ok(false)`: a fence failed (a table
/// is no longer this server's, or a number was taken, or a manifest
/// changed since it was read): nothing written.
pub async fn commit_tables(
    client: &mut Client,
    cfg: &EtcdConfig,
    me: &str,
    change: &TablesChange,
) -> Result<bool, CoordError> {
    Ok(commit_tables_at(client, cfg, me, change).await?.is_some())
}

/// [`commit_tables`], answering the revision of the transaction when it
/// was applied (every key it put has that mod revision), `None` when a
/// fence failed.
pub async fn commit_tables_at(
    client: &mut Client,
    cfg: &EtcdConfig,
    me: &str,
    change: &TablesChange,
) -> Result<Option<i64>, CoordError> {
    let mut when = Vec::new();
    let mut then = Vec::new();
    // A table's catalogue range and manifest, as `t` has them.
    let range_and_manifest = |t: &TableState| {
        [
            TxnOp::put(
                cfg.key(&keys::table_key(t.table)),
                keys::encode_range(&t.range),
                None,
            ),
            TxnOp::put(
                cfg.key(&keys::manifest_key(t.table)),
                t.manifest.clone(),
                None,
            ),
        ]
    };
    // The owner key a table this server creates gets.
    let created = OwnerValue {
        epoch: Epoch(1),
        server: me.to_string(),
    };
    let fence = |t: TableId, rev: Revision| {
        Compare::mod_revision(
            cfg.key(&keys::owner_key(t)),
            CompareOp::Equal,
            i64::try_from(rev.0).unwrap_or(i64::MAX),
        )
    };
    if let Some(lease) = change.member_lease {
        when.push(Compare::lease(
            cfg.key(&keys::member_key(me)),
            CompareOp::Equal,
            lease,
        ));
    }
    for (t, rev) in &change.updated {
        when.push(fence(t.table, *rev));
        if let Some(seen) = change.manifest_revs.get(&t.table) {
            when.push(Compare::mod_revision(
                cfg.key(&keys::manifest_key(t.table)),
                CompareOp::Equal,
                *seen,
            ));
        }
        then.extend(range_and_manifest(t));
    }
    for t in &change.created {
        when.push(Compare::create_revision(
            cfg.key(&keys::table_key(t.table)),
            CompareOp::Equal,
            0,
        ));
        then.extend(range_and_manifest(t));
        then.push(TxnOp::put(
            cfg.key(&keys::owner_key(t.table)),
            created.encode(),
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
        return Ok(Some(0));
    }
    let txn = Txn::new().when(when).and_then(then);
    let resp = bounded(cfg, client.txn(txn)).await?;
    Ok(resp
        .succeeded()
        .then(|| resp.header().map_or(0, |h| h.revision())))
}

/// Whether `change`, sent by server `me` and not known to be applied, can
/// never apply from now on (it may have applied already): one of the
/// conditions [`commit_tables`] puts on it is false now and can never be
/// true again —
/// - `member/<me>` is on another lease than `member_lease`: the key is
///   only ever put by a join, on a lease granted for it, so it never
///   comes back to an earlier one;
/// - an updated or removed table's `owner/` revision is not the one
///   granted, or an updated table's `manifest/` revision is not the one
///   compared (nonzero): a key's mod revision only grows while it exists,
///   a deleted key reads 0, and one put again gets a revision above every
///   earlier one.
///
/// `false`: it may still apply (or this cannot be told now).
pub async fn tables_change_settled(
    client: &mut Client,
    cfg: &EtcdConfig,
    me: &str,
    change: &TablesChange,
) -> Result<bool, CoordError> {
    let mod_rev = |client: &mut Client, key: String| {
        let mut c = client.clone();
        async move {
            let resp = bounded(
                cfg,
                c.get(key, Some(etcd_client::GetOptions::new().with_keys_only())),
            )
            .await?;
            Ok::<_, CoordError>(resp.kvs().first().map_or(0, |kv| kv.mod_revision()))
        }
    };
    if let Some(lease) = change.member_lease {
        let resp = bounded(cfg, client.get(cfg.key(&keys::member_key(me)), None)).await?;
        if resp.kvs().first().is_some_and(|kv| kv.lease() != lease) {
            return Ok(true);
        }
    }
    let granted = |r: Revision| i64::try_from(r.0).unwrap_or(i64::MAX);
    let owners = change
        .updated
        .iter()
        .map(|(t, r)| (t.table, *r))
        .chain(change.removed.iter().copied());
    for (t, r) in owners {
        if mod_rev(client, cfg.key(&keys::owner_key(t))).await? != granted(r) {
            return Ok(true);
        }
    }
    for (t, seen) in &change.manifest_revs {
        if *seen != 0 && mod_rev(client, cfg.key(&keys::manifest_key(*t))).await? != *seen {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `later`, applied, makes `earlier` (sent before it, outcome
/// unknown) unable to apply from then on: `later` put the manifest of a
/// table whose manifest revision `earlier` compares (nonzero — `later`
/// moved it past every revision read before it), or removed a table
/// `earlier` touches (its owner key is gone for good: table numbers are
/// never handed out twice). Pure: no etcd read.
pub fn settles(later: &TablesChange, earlier: &TablesChange) -> bool {
    let compared = |t: TableId| earlier.manifest_revs.get(&t).is_some_and(|r| *r != 0);
    let touched = |t: TableId| {
        earlier.updated.iter().any(|(u, _)| u.table == t)
            || earlier.removed.iter().any(|(r, _)| *r == t)
    };
    later.updated.iter().any(|(t, _)| compared(t.table))
        || later.removed.iter().any(|(t, _)| touched(*t))
}

/// Reads back whether etcd holds `change` as [`commit_tables`] writes it
/// — every updated or created table's `manifest/` key is its manifest,
/// every removed table's `owner/` key is gone — after a transaction
/// whose answer was lost. `true`: it was applied (a manifest names a
/// snapshot written for that commit; only the table's owner writes its
/// manifest), so the outcome is known and that transaction cannot apply
/// again. `false`: not (yet) applied — still unknown.
pub async fn tables_change_applied(
    client: &mut Client,
    cfg: &EtcdConfig,
    change: &TablesChange,
) -> Result<bool, CoordError> {
    let puts = change
        .updated
        .iter()
        .map(|(t, _)| t)
        .chain(change.created.iter());
    for t in puts {
        let key = cfg.key(&keys::manifest_key(t.table));
        let resp = bounded(cfg, client.get(key, None)).await?;
        if resp.kvs().first().map(|kv| kv.value()) != Some(&t.manifest[..]) {
            return Ok(false);
        }
    }
    for (t, _) in &change.removed {
        let key = cfg.key(&keys::owner_key(*t));
        let resp = bounded(cfg, client.get(key, None)).await?;
        if !resp.kvs().is_empty() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What [`commit_merge`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergeOutcome {
    /// The merge is in etcd (done now, or found done: a retry).
    Merged,
    /// An owner key is past the revision given (R2): nothing written.
    Fenced,
    /// Nothing written, both tables still the server's: a move, lend or
    /// borrow names one of them, or the lower table's manifest changed
    /// since it was read.
    Busy(String),
}

/// A merge of two neighbouring tables of server `me`: the lower one
/// (`merged.table`, granted at `lower_rev`) takes `merged.range` — both
/// tables' — and `merged.manifest`; the upper one (`upper`, granted at
/// `upper_rev`) is deleted: `table/`, `owner/`, `manifest/`. One
/// transaction, conditional on
/// - both owner keys' revisions being the grants' (R2: neither was
///   handed over, reassigned by a failover, or merged away meanwhile);
/// - no `move/` and no `home/` key of either (no move or lend pending,
///   neither table away from home: every move the coordinator or an
///   operator asks for is a `move/` put, itself conditional on the owner
///   key's revision — which this transaction deletes for the upper
///   table, so a move asked for later is refused);
/// - no `borrow/` key changed since they were read, and none read names
///   either table (no operation waits for one of them elsewhere);
/// - the lower table's `manifest/` revision as read (so a transaction
///   whose answer was lost can be killed: see below).
///
/// A merge found done (the lower manifest is `merged.manifest`, which
/// names a snapshot no other commit names) is [`MergeOutcome::Merged`],
/// so a retry after an unknown outcome is safe. When etcd does not answer
/// the transaction, the outcome is settled before returning: found done,
/// or the lower manifest is put again unchanged (conditional on its owner
/// revision), which moves its revision past the one the lost transaction
/// compares, so it can never apply later — `Busy`. `Err`: still unknown.
pub async fn commit_merge(
    client: &mut Client,
    cfg: &EtcdConfig,
    merged: &TableState,
    lower_rev: Revision,
    upper: TableId,
    upper_rev: Revision,
) -> Result<MergeOutcome, CoordError> {
    let lower = merged.table;
    let mkey = cfg.key(&keys::manifest_key(lower));
    let read_manifest = |client: &mut Client| {
        let mut c = client.clone();
        let k = mkey.clone();
        async move {
            let resp = bounded(cfg, c.get(k, None)).await?;
            Ok::<_, CoordError>(
                resp.kvs()
                    .first()
                    .map(|kv| (kv.value().to_vec(), kv.mod_revision())),
            )
        }
    };
    let (current, manifest_rev) = match read_manifest(client).await? {
        Some((bytes, rev)) => (Some(bytes), rev),
        None => (None, 0),
    };
    if current.as_deref() == Some(&merged.manifest[..]) {
        return Ok(MergeOutcome::Merged);
    }
    if current.is_none() {
        return Ok(MergeOutcome::Fenced);
    }
    let bprefix = cfg.key("borrow/");
    let borrows = bounded(
        cfg,
        client.get(
            bprefix.clone(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        ),
    )
    .await?;
    let read_at = borrows.header().map_or(0, |h| h.revision());
    for kv in borrows.kvs() {
        let named = std::str::from_utf8(kv.value())
            .ok()
            .and_then(keys::decode_tables);
        match named {
            Some(t) if !t.contains(&lower) && !t.contains(&upper) => {}
            _ => {
                return Ok(MergeOutcome::Busy(format!(
                    "a borrow names {lower} or {upper}"
                )))
            }
        }
    }
    let rev = |r: Revision| i64::try_from(r.0).unwrap_or(i64::MAX);
    let absent = |k: String| Compare::create_revision(cfg.key(&k), CompareOp::Equal, 0);
    let when = vec![
        Compare::mod_revision(
            cfg.key(&keys::owner_key(lower)),
            CompareOp::Equal,
            rev(lower_rev),
        ),
        Compare::mod_revision(
            cfg.key(&keys::owner_key(upper)),
            CompareOp::Equal,
            rev(upper_rev),
        ),
        absent(keys::move_key(lower)),
        absent(keys::move_key(upper)),
        absent(keys::home_key(lower)),
        absent(keys::home_key(upper)),
        Compare::mod_revision(mkey.clone(), CompareOp::Equal, manifest_rev),
        Compare::mod_revision(bprefix, CompareOp::Less, read_at.saturating_add(1)).with_prefix(),
    ];
    let then = vec![
        TxnOp::put(
            cfg.key(&keys::table_key(lower)),
            keys::encode_range(&merged.range),
            None,
        ),
        TxnOp::put(mkey.clone(), merged.manifest.clone(), None),
        TxnOp::delete(cfg.key(&keys::table_key(upper)), None),
        TxnOp::delete(cfg.key(&keys::owner_key(upper)), None),
        TxnOp::delete(cfg.key(&keys::manifest_key(upper)), None),
    ];
    let txn = Txn::new().when(when).and_then(then);
    match bounded(cfg, client.txn(txn)).await {
        Ok(r) if r.succeeded() => return Ok(MergeOutcome::Merged),
        Ok(_) => {}
        Err(e) => {
            // Unknown: settle it (see above).
            tracing::warn!(table = %lower, error = %e, "a merge's transaction got no answer; settling it");
            let Some((bytes, rev_now)) = read_manifest(client).await? else {
                return Ok(MergeOutcome::Fenced);
            };
            if bytes == merged.manifest {
                return Ok(MergeOutcome::Merged);
            }
            let kill = Txn::new()
                .when(vec![
                    Compare::mod_revision(mkey.clone(), CompareOp::Equal, rev_now),
                    Compare::mod_revision(
                        cfg.key(&keys::owner_key(lower)),
                        CompareOp::Equal,
                        rev(lower_rev),
                    ),
                ])
                .and_then(vec![TxnOp::put(mkey.clone(), bytes, None)]);
            if !bounded(cfg, client.txn(kill)).await?.succeeded() {
                // Changed meanwhile: by the lost merge, or by a new owner.
                return match read_manifest(client).await? {
                    Some((b, _)) if b == merged.manifest => Ok(MergeOutcome::Merged),
                    _ => Ok(MergeOutcome::Fenced),
                };
            }
            return Ok(MergeOutcome::Busy(
                "the merge's transaction was lost and is void now".into(),
            ));
        }
    }
    // Refused: done by an earlier try, fenced, or busy.
    if read_manifest(client)
        .await?
        .is_some_and(|(b, _)| b == merged.manifest)
    {
        return Ok(MergeOutcome::Merged);
    }
    let owners = [(lower, lower_rev), (upper, upper_rev)];
    for (t, granted) in owners {
        let resp = bounded(cfg, client.get(cfg.key(&keys::owner_key(t)), None)).await?;
        let still = resp
            .kvs()
            .first()
            .is_some_and(|kv| kv.mod_revision() == rev(granted));
        if !still {
            return Ok(MergeOutcome::Fenced);
        }
    }
    Ok(MergeOutcome::Busy(format!(
        "a move, lend or borrow names {lower} or {upper}"
    )))
}

/// Operations etcd allows in one transaction's branch (and compares), by
/// default (`--max-txn-ops` 128), with room to spare.
pub const TXN_OPS: usize = 120;

impl TablesChange {
    /// Writes and compares this change makes in one transaction.
    fn cost(&self) -> (usize, usize) {
        let writes = 2 * self.updated.len()
            + 3 * self.created.len()
            + usize::from(!self.created.is_empty())
            + 5 * self.removed.len();
        let compares = self.updated.len()
            + self.created.len()
            + self.removed.len()
            + self.manifest_revs.len()
            + usize::from(self.member_lease.is_some());
        (writes, compares)
    }

    fn fits(&self, max: usize) -> bool {
        let (w, c) = self.cost();
        w <= max && c <= max
    }

    /// `next` appended to this change, to be committed in the same
    /// transaction.
    fn merged(&self, next: &TablesChange) -> TablesChange {
        let mut m = self.clone();
        m.manifest_revs
            .extend(next.manifest_revs.iter().map(|(t, r)| (*t, *r)));
        m.updated.extend(next.updated.iter().cloned());
        m.removed.extend(next.removed.iter().cloned());
        m.created.extend(next.created.iter().cloned());
        m
    }

    /// The change cut into pieces of at most `max` writes and compares
    /// each (one piece when it fits), so that etcd accepts every
    /// transaction: a checkpoint after an import can commit hundreds of
    /// tables, and etcd refuses more than 128 operations in one (found by
    /// the search benchmark: every such checkpoint failed, and the tables
    /// made meanwhile were served by nobody).
    ///
    /// The pieces are committed in order, and after each the catalogue's
    /// ranges are consistent on their own — no two overlap, none is
    /// missing:
    /// - a table made by a split goes with the table just before it in
    ///   SOID order when that one is in the change too (the split's other
    ///   half: a new table's range was carved from the one that precedes
    ///   it, so committed apart their ranges would overlap in the map);
    ///   such a group — a table and the new tables contiguous after it —
    ///   is never cut;
    /// - removed tables (merges) go with the first piece.
    ///
    /// A group is a table and at most the one table split off it: the
    /// engine never builds a chain of splits between two commits (a table
    /// split since its last commit does not split again until a commit
    /// takes its present shape: `sextant_engine`'s member mode,
    /// `split_since_commit`), so a group always fits. (A group with more
    /// new tables is planned only from a delegation map that lags behind
    /// etcd — tables committed already look new — and etcd refuses it
    /// whole, cut or not: their `table/` keys exist. An older build cut
    /// such chains into steps, which was not recoverable between them; it
    /// is gone.)
    pub fn pieces(self, max: usize) -> Vec<TablesChange> {
        if self.fits(max) {
            return vec![self];
        }
        let lease = self.member_lease;
        let revs = self.manifest_revs;
        // Groups, in SOID order: a table and the new tables contiguous
        // after it.
        enum Item {
            Updated((TableState, Revision)),
            Created(TableState),
        }
        let range = |i: &Item| match i {
            Item::Updated((t, _)) | Item::Created(t) => t.range,
        };
        let mut items: Vec<Item> = self
            .updated
            .into_iter()
            .map(Item::Updated)
            .chain(self.created.into_iter().map(Item::Created))
            .collect();
        items.sort_by_key(|i| range(i).first);
        let mut groups: Vec<TablesChange> = Vec::new();
        let mut last: Option<SoidRange> = None;
        for item in items {
            let r = range(&item);
            let joins = matches!(item, Item::Created(_))
                && last.is_some_and(|l| l.last.checked_next() == Some(r.first));
            if !joins || groups.is_empty() {
                groups.push(TablesChange::default());
            }
            let g = groups.last_mut().expect("a group was just made");
            match item {
                Item::Updated(u) => {
                    if let Some(r) = revs.get(&u.0.table) {
                        g.manifest_revs.insert(u.0.table, *r);
                    }
                    g.updated.push(u)
                }
                Item::Created(c) => g.created.push(c),
            }
            last = Some(r);
        }
        match groups.first_mut() {
            Some(g) => g.removed = self.removed,
            None => groups.push(TablesChange {
                removed: self.removed,
                ..TablesChange::default()
            }),
        }
        // Each group whole, packed greedily, in order; every piece fenced
        // by the lease.
        let mut pieces: Vec<TablesChange> = Vec::new();
        for mut g in groups {
            g.member_lease = lease;
            let merged = pieces.last().map(|p| p.merged(&g));
            match (pieces.last_mut(), merged) {
                (Some(p), Some(m)) if m.fits(max) => *p = m,
                _ => pieces.push(g),
            }
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::Soid;

    fn state(t: u32, first: u128, last: u128) -> TableState {
        TableState {
            table: TableId(t),
            range: SoidRange::new(Soid::from_u128(first), Soid::from_u128(last)).unwrap(),
            manifest: t.to_le_bytes().to_vec(),
        }
    }

    #[test]
    fn a_big_change_is_cut_into_pieces_etcd_accepts_splits_kept_whole() {
        // 100 tables updated (ranges of 1,000 SOIDs), and every tenth one
        // split in three: two new tables right after it.
        let mut change = TablesChange::default();
        let mut next = 1000;
        for i in 0..100u32 {
            let base = u128::from(i) * 1_000;
            if i % 10 == 0 {
                change
                    .updated
                    .push((state(i, base, base + 99), Revision(u64::from(i))));
                change.created.push(state(next, base + 100, base + 499));
                change.created.push(state(next + 1, base + 500, base + 999));
                next += 2;
            } else {
                change
                    .updated
                    .push((state(i, base, base + 999), Revision(u64::from(i))));
            }
        }
        // Every updated table's manifest revision compared.
        change.manifest_revs = change
            .updated
            .iter()
            .map(|(t, _)| (t.table, i64::from(t.table.0) + 7))
            .collect();
        let pieces = change.clone().pieces(TXN_OPS);
        assert!(pieces.len() > 1);
        for p in &pieces {
            // Each piece compares exactly its own updated tables'.
            let mine: Vec<TableId> = p.updated.iter().map(|(t, _)| t.table).collect();
            let compared: Vec<TableId> = p.manifest_revs.keys().copied().collect();
            let mut sorted = mine.clone();
            sorted.sort();
            assert_eq!(compared, sorted);
            assert!(p
                .manifest_revs
                .iter()
                .all(|(t, r)| *r == i64::from(t.0) + 7));
        }
        let (mut updated, mut created) = (0, 0);
        for p in &pieces {
            let (w, c) = p.cost();
            assert!(w <= TXN_OPS && c <= TXN_OPS, "{w} writes, {c} compares");
            updated += p.updated.len();
            created += p.created.len();
            // Each new table is in the piece of the table it was split off.
            for c in &p.created {
                let parent = u32::try_from(c.range.first.as_u128() / 1_000).unwrap();
                assert!(
                    p.updated.iter().any(|(u, _)| u.table == TableId(parent)),
                    "{:?} apart from table {parent}",
                    c.table
                );
            }
        }
        assert_eq!((updated, created), (100, 20));
        // A small change stays whole.
        let small = TablesChange {
            updated: change.updated[..3].to_vec(),
            ..TablesChange::default()
        };
        assert_eq!(small.clone().pieces(TXN_OPS), vec![small]);
    }
}
