//! The coordinator: elected among the servers, it keeps no state of its
//! own (Ursa Minor §3.7) — every round it reads the delegation map (the
//! cache of etcd's keys), runs the pure `sextant_cluster::coordinator::
//! decide`, and writes what that asks as etcd transactions conditional on
//! what it read.
//!
//! **Election**: a create-if-absent of `coordinator` on the candidate's
//! *membership* lease. Chosen over etcd's election API (`Campaign`, a
//! call that blocks until elected, on a lease of its own): the
//! coordinator is one of the servers and must stop being one exactly when
//! it stops being a member, which one lease gives for free; the
//! create-if-absent is the protocol the simulation verified; and it is
//! one bounded call per round, where a blocking `Campaign` would need its
//! own timeout and re-campaign logic across etcd restarts. Safety does
//! not rest on the election: every write also compares that
//! `coordinator` still lives on this server's lease, and each write's own
//! conditions (owner revision, R3's absent member key) make a stale one
//! change nothing.
//!
//! **Bootstrap**: the first coordinator of an empty cluster creates the
//! root table — `table/000000` over the whole SOID space — and
//! `meta/bootstrapped`, once (conditional on the latter's absence); the
//! next round assigns it like any unowned table. A server that opens an
//! existing single-server data directory as the root table gets it
//! through the same ADD ([`crate::keys::ROOT_TABLE`]).
//!
//! Rules (each decided in `decide`, written here):
//! - an unowned table goes to the least loaded live, non-draining member;
//! - R3: a table whose owner's member key is gone goes to another member
//!   at the next epoch — the write compares that the member key is
//!   *still* absent and the owner revision unchanged;
//! - a requested or balancing move (`move/<table>`) is written if no move
//!   is pending and the owner revision is the one seen; the owner carries
//!   it out (DROP, then one transaction naming the new owner); a new
//!   coordinator finds a half-done move in etcd and lets it finish;
//! - a draining server (`drain/<name>`) receives nothing and gives all
//!   its tables away;
//! - balancing and draining moves are decided several per round, while
//!   fewer than `max_moves` are pending;
//! - BORROW (`borrow/<name>`, queued by revision): a granted borrow's
//!   tables are moved to the borrower, the first lend of a table noting
//!   its home (`home/<id>`); a table no borrow names goes home, and its
//!   home is forgotten once it is there.

use crate::etcd::{bounded, EtcdConfig};
use crate::keys::{self, OwnerValue};
use crate::map::ClusterState;
use crate::membership::Membership;
use crate::CoordError;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use sextant_cluster::coordinator::{decide_moves, Action};
use sextant_types::SoidRange;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of the coordinator loop.
#[derive(Clone)]
pub struct CoordinatorConfig {
    pub etcd: EtcdConfig,
    /// This server's name.
    pub name: String,
    /// Balancing hysteresis: a move only when the busiest server holds at
    /// least this many tables more than the idlest (at least 2).
    pub spread: usize,
    /// How many moves may be pending at once (`move/<table>` keys):
    /// balancing and draining moves are decided several per round up to
    /// it ([`sextant_cluster::coordinator::decide_moves`]; at least 1).
    pub max_moves: usize,
    /// Whether the coordinator of an empty cluster creates the root table
    /// (`table/000000` over every SOID, assigned like any other). `false`:
    /// a server's engine makes it (the first to get table number 1 from
    /// `meta/next_table`) and commits it with `meta/bootstrapped`
    /// ([`crate::catalog`]); the coordinator waits for that.
    pub bootstrap: bool,
    /// How often to look without a map change.
    pub tick: Duration,
    /// Asked before a dead server's table is reassigned
    /// ([`crate::TableHost::ready_for_failover`]).
    pub host: Option<Arc<dyn crate::TableHost>>,
}

/// The loop, on every server; it acts only while this server holds the
/// election. Dropping it stops it.
pub struct CoordinatorLoop {
    task: JoinHandle<()>,
}

impl Drop for CoordinatorLoop {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CoordinatorLoop {
    pub fn start(
        cfg: CoordinatorConfig,
        client: Client,
        membership: Arc<Membership>,
        map: watch::Receiver<Arc<ClusterState>>,
    ) -> CoordinatorLoop {
        CoordinatorLoop {
            task: tokio::spawn(run(cfg, client, membership, map)),
        }
    }
}

async fn run(
    cfg: CoordinatorConfig,
    mut client: Client,
    membership: Arc<Membership>,
    mut map: watch::Receiver<Arc<ClusterState>>,
) {
    loop {
        let state = map.borrow_and_update().clone();
        if let Err(e) = round(&cfg, &mut client, &membership, &state).await {
            tracing::warn!(error = %e, "coordinator: etcd did not answer; next round");
        }
        tokio::select! {
            r = map.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(cfg.tick) => {}
        }
    }
}

async fn round(
    cfg: &CoordinatorConfig,
    client: &mut Client,
    membership: &Membership,
    state: &ClusterState,
) -> Result<(), CoordError> {
    if !membership.valid() {
        return Ok(());
    }
    let lease = membership.lease();
    let ckey = cfg.etcd.key(keys::COORDINATOR_KEY);
    match &state.coordinator {
        None => {
            let txn = Txn::new()
                .when(vec![Compare::create_revision(
                    ckey.clone(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then(vec![TxnOp::put(
                    ckey,
                    cfg.name.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            if bounded(&cfg.etcd, client.txn(txn)).await?.succeeded() {
                tracing::info!(name = %cfg.name, "elected coordinator");
            }
            // Acts from the next round, on a map that shows it.
            Ok(())
        }
        Some((n, l)) if *n == cfg.name && *l == lease => act(cfg, client, lease, state).await,
        Some(_) => Ok(()),
    }
}

/// Every write of the coordinator also requires that it still is one.
fn still_coordinator(cfg: &CoordinatorConfig, lease: i64) -> Compare {
    Compare::lease(cfg.etcd.key(keys::COORDINATOR_KEY), CompareOp::Equal, lease)
}

async fn act(
    cfg: &CoordinatorConfig,
    client: &mut Client,
    lease: i64,
    state: &ClusterState,
) -> Result<(), CoordError> {
    let e = &cfg.etcd;
    if !state.bootstrapped && !cfg.bootstrap {
        return Ok(());
    }
    if !state.bootstrapped {
        let bkey = e.key(keys::BOOTSTRAPPED_KEY);
        let txn = Txn::new()
            .when(vec![
                Compare::version(bkey.clone(), CompareOp::Equal, 0),
                still_coordinator(cfg, lease),
            ])
            .and_then(vec![
                TxnOp::put(bkey, "1", None),
                TxnOp::put(
                    e.key(&keys::table_key(keys::ROOT_TABLE)),
                    keys::encode_range(&SoidRange::ALL),
                    None,
                ),
            ]);
        if bounded(e, client.txn(txn)).await?.succeeded() {
            tracing::info!("bootstrap: created the root table over the whole SOID space");
        }
        return Ok(());
    }
    let (mut view, names) = state.cluster_view();
    // R3 for log-less servers (sextant_cluster::coordinator rule 2): a dead
    // server's tables wait until the host has completed its journal from
    // its clients' backups ([`crate::TableHost::ready_for_failover`]).
    if let Some(host) = &cfg.host {
        let dead: std::collections::BTreeSet<_> = view
            .owners
            .values()
            .flatten()
            .map(|(o, _)| o.server)
            .filter(|s| !view.members.contains(s))
            .collect();
        for id in dead {
            let Some(name) = names.name(id) else { continue };
            let (h, name) = (Arc::clone(host), name.to_string());
            let ready = tokio::task::spawn_blocking(move || h.ready_for_failover(&name))
                .await
                .unwrap_or(false);
            if !ready {
                view.uncompleted.insert(id);
            }
        }
    }
    let actions = decide_moves(&view, cfg.spread, cfg.max_moves.max(1));
    tracing::debug!(target: "borrow_trace", revision = state.revision, actions = actions.len(), "coordinator: decided");
    for action in actions {
        let (txn, what) = match &action {
            Action::Assign {
                table,
                expect,
                gone,
                owner,
                reason,
            } => {
                let Some(server) = names.name(owner.server) else {
                    continue;
                };
                let mut when = vec![
                    Compare::mod_revision(
                        e.key(&keys::owner_key(*table)),
                        CompareOp::Equal,
                        expect.0 as i64,
                    ),
                    still_coordinator(cfg, lease),
                ];
                if let Some(g) = gone {
                    let Some(old) = names.name(g.server) else {
                        continue;
                    };
                    // R3 at commit time: the old owner is still not a
                    // member, and has not joined since the view (a join
                    // and a lease lost again meanwhile — a new log-less
                    // run begun, not completed — leave the member key
                    // absent again; `joined/<old>` moved on).
                    when.push(Compare::create_revision(
                        e.key(&keys::member_key(old)),
                        CompareOp::Equal,
                        0,
                    ));
                    when.push(Compare::mod_revision(
                        e.key(&keys::joined_key(old)),
                        CompareOp::Equal,
                        g.last_join.0 as i64,
                    ));
                }
                let value = OwnerValue {
                    epoch: owner.epoch,
                    server: server.to_string(),
                };
                let txn = Txn::new().when(when).and_then(vec![
                    TxnOp::put(e.key(&keys::owner_key(*table)), value.encode(), None),
                    TxnOp::delete(e.key(&keys::move_key(*table)), None),
                ]);
                (
                    txn,
                    format!(
                        "assign {table} to {server} (epoch {}): {reason}",
                        owner.epoch.0
                    ),
                )
            }
            Action::Move {
                table,
                expect,
                to,
                reason,
            } => {
                let Some(to) = names.name(*to) else { continue };
                let txn = Txn::new()
                    .when(vec![
                        Compare::create_revision(
                            e.key(&keys::move_key(*table)),
                            CompareOp::Equal,
                            0,
                        ),
                        Compare::mod_revision(
                            e.key(&keys::owner_key(*table)),
                            CompareOp::Equal,
                            expect.0 as i64,
                        ),
                        still_coordinator(cfg, lease),
                    ])
                    .and_then(vec![TxnOp::put(e.key(&keys::move_key(*table)), to, None)]);
                let mut what = format!("move {table} to {to}: {reason}");
                if reason.starts_with("balancing") {
                    // Why: each server's weight as the balancer saw it.
                    let weights = sextant_cluster::coordinator::weights(
                        &view,
                        view.members.difference(&view.draining).copied(),
                    );
                    let weights: Vec<String> = weights
                        .iter()
                        .map(|(s, w)| format!("{} {w}", names.name(*s).unwrap_or("?")))
                        .collect();
                    what.push_str(&format!(
                        " (table {}, servers {})",
                        sextant_cluster::coordinator::weight_in(&view, table),
                        weights.join(", ")
                    ));
                }
                (txn, what)
            }
            Action::Lend {
                table,
                expect,
                to,
                home,
            } => {
                let Some(to) = names.name(*to) else { continue };
                let mut when = vec![
                    Compare::create_revision(e.key(&keys::move_key(*table)), CompareOp::Equal, 0),
                    Compare::mod_revision(
                        e.key(&keys::owner_key(*table)),
                        CompareOp::Equal,
                        expect.0 as i64,
                    ),
                    still_coordinator(cfg, lease),
                ];
                let mut then = vec![TxnOp::put(e.key(&keys::move_key(*table)), to, None)];
                let hkey = e.key(&keys::home_key(*table));
                match home {
                    Some(home) => {
                        let Some(home) = names.name(*home) else {
                            continue;
                        };
                        // The first lend notes where the table lives.
                        when.push(Compare::create_revision(hkey.clone(), CompareOp::Equal, 0));
                        then.push(TxnOp::put(hkey, home, None));
                    }
                    // (A view from before the home was forgotten lends
                    // nothing: the next round notes the home anew.)
                    None => when.push(Compare::create_revision(hkey, CompareOp::Greater, 0)),
                }
                let txn = Txn::new().when(when).and_then(then);
                (
                    txn,
                    format!("move {table} to {to}: BORROW for an operation"),
                )
            }
            Action::ForgetHome { table, expect } => {
                let okey = e.key(&keys::owner_key(*table));
                let owner_is = match expect {
                    Some(rev) => Compare::mod_revision(okey, CompareOp::Equal, rev.0 as i64),
                    None => Compare::create_revision(okey, CompareOp::Equal, 0),
                };
                // No lend or move written since the view (a home
                // forgotten under a lend on its way is lost).
                let no_move =
                    Compare::create_revision(e.key(&keys::move_key(*table)), CompareOp::Equal, 0);
                let txn = Txn::new()
                    .when(vec![owner_is, no_move, still_coordinator(cfg, lease)])
                    .and_then(vec![TxnOp::delete(e.key(&keys::home_key(*table)), None)]);
                (txn, format!("{table} is home (or its home is gone)"))
            }
        };
        tracing::debug!(target: "borrow_trace", "coordinator: txn sent: {what}");
        if bounded(e, client.txn(txn)).await?.succeeded() {
            tracing::info!("coordinator: {what}");
        } else {
            tracing::debug!("coordinator: not done (etcd changed meanwhile): {what}");
        }
    }
    Ok(())
}
