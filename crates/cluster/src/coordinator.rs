//! The coordinator's decisions: from what etcd holds now — members,
//! owners, pending moves — the writes that bring the map where it should
//! be. The coordinator keeps no state of its own (Ursa Minor §3.7): a
//! newly elected one reads the same keys and decides the same, and every
//! write it makes is a transaction conditional on what it read, so a
//! deposed coordinator that wakes up late changes nothing.
//!
//! Rules, in order:
//! 1. A table with no owner goes to the least loaded member.
//! 2. R3: a table whose owner is not a member — its lease is gone from
//!    etcd — goes to the least loaded member, at the next epoch; the
//!    write checks that the owner's member key is *still* absent (the view
//!    may be old: the owner may have joined again since and loaded the
//!    table under its old assignment — found by the simulation, seed
//!    1065) *and* that the owner has not joined since the view at all:
//!    `joined/<owner>`, written (without a lease) by every join, is still
//!    at the revision the view read ([`ClusterView::joins`]). The member
//!    key alone cannot tell: an owner that joined again, began a new
//!    log-less run and lost its lease again meanwhile is absent again,
//!    and its new run is not completed (found by the simulation, seed 49
//!    under `stop_before_completion_write`). (A table
//!    whose owner is alive moves only by its owner's acknowledged DROP:
//!    rule 3 asks for one. A move is never cancelled: an owner that
//!    started dropping must not serve again before it knows its
//!    handover's outcome; a handover to a server that died meanwhile is
//!    then reassigned by this rule.)
//!    A log-less owner's tables wait until its journals are completed
//!    (`uncompleted`, [`completions_due`]): the one decision point of the
//!    unsynced tail comes before any reassignment.
//! 3. Balance, with hysteresis: a table weighs [`table_weight`] — 1 plus
//!    its request rate (operations per second) plus one per
//!    [`INODES_PER_UNIT`] inodes, both as its owner last published them
//!    (0 when nobody publishes any) — and a server the sum of its tables.
//!    When the heaviest member outweighs the lightest by at least `spread`
//!    (and, once rates or inode counts weigh in, by at least a quarter of
//!    its own weight, so noise in them moves nothing), a move is asked
//!    for: the heaviest server's table whose weight is
//!    closest to half the difference, among those weighing at most three
//!    quarters of it (each move at least halves the difference, so moves
//!    never undo each other), the one in place longest first (lowest
//!    owner revision: a table an operation just borrowed somewhere is the
//!    last to go). A new, empty server so receives tables, and a draining
//!    one gives all of its away. Without rates and with small tables this
//!    is balancing by table count. While a table's figures are `unknown`
//!    (its owner has not published a full measurement of it since it got
//!    it: just moved or split off), its server neither gives nor receives
//!    for balance (its weight is incomplete); the others go on. Tables
//!    borrows name, and lent tables until they are home, are not moved
//!    for balance (rule 4), and a server with a standing borrow gives
//!    nothing away for balance: its operations need its tables together
//!    (the ones its splits make among them).
//!    Moves are per table and independent (each its own `move/<table>`,
//!    DROP and handover), so several may be in flight: while fewer than
//!    `max_moves` are pending ([`decide_moves`]), a round plans as many
//!    more as that leaves, each on the weights the pending and the
//!    earlier planned ones leave (their tables counted at their targets).
//!    (One at a time, the spreading of 1,059 tables over three new
//!    servers took 37 minutes: each move waited for the one before and
//!    for its target's first load figures, 5–10 s.)
//! 4. BORROW/RETURN (Ursa Minor §3.5): a server whose operation needs
//!    tables held by others publishes one *borrow* — the set of tables,
//!    queued in etcd by the revision it was last written at. Borrows are
//!    served in queue order: a borrow none of whose tables an earlier
//!    borrow names is *granted* — each of its tables that is elsewhere is
//!    moved to the borrower (a `Lend`, which also notes the table's home,
//!    where it was before any borrow took it); a borrow that shares a
//!    table with an earlier one waits, and locks its own tables for later
//!    ones (so it is not starved). The earliest borrow is always granted,
//!    so borrows never deadlock, and a granted borrow's tables are never
//!    moved away — not by another borrow, not by balance — until its
//!    borrower RETURNs (deletes the borrow; it lives on the borrower's
//!    lease, so a dead borrower returns by dying). A table no borrow names
//!    goes home (or, when another borrow is waiting for it, straight to
//!    that borrower: the home stays noted until the table is back).

use crate::ids::{Epoch, Revision, ServerId, TableId};
use crate::server::Owner;
use std::collections::{BTreeMap, BTreeSet};

/// How many inodes weigh like one request per second in the balance.
///
/// A table's requests cost its server CPU while they last; its inodes
/// cost memory for as long as it is loaded and time at every failover
/// (the new owner reads them all), busy or not. A full table (the
/// engine's split limit, 20,000 inodes) so weighs like 20 requests/s: a
/// busy cluster is balanced by its rates as before (a few hundred
/// requests/s outweigh any one table's inodes), and an idle one — or two
/// servers of equal traffic — by inodes, not by table count alone (one
/// server holding 100,000 inodes and another a few empty tables is
/// imbalanced by 100). Below 1,000 inodes a table weighs as an empty
/// one, so small tables growing move nothing.
pub const INODES_PER_UNIT: u64 = 1_000;

/// The weight of a table that serves `rate` requests/s and holds
/// `inodes` inodes (saturating: the figures come from etcd).
pub fn table_weight(rate: u64, inodes: u64) -> u64 {
    1u64.saturating_add(rate)
        .saturating_add(inodes / INODES_PER_UNIT)
}

/// What etcd holds, as the coordinator reads it.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    pub members: BTreeSet<ServerId>,
    /// Members that are being drained: they receive nothing and give
    /// everything away.
    pub draining: BTreeSet<ServerId>,
    /// Every table, with its owner and the owner key's revision.
    pub owners: BTreeMap<TableId, Option<(Owner, Revision)>>,
    /// Pending moves: table → target.
    pub moves: BTreeMap<TableId, ServerId>,
    /// Request rate per table (operations per second) as its owner last
    /// published it; a table not here counts 0.
    pub rates: BTreeMap<TableId, u64>,
    /// Inodes per table as its owner last published them; a table not
    /// here counts 0.
    pub inodes: BTreeMap<TableId, u64>,
    /// Tables whose owner has not published their figures since it got
    /// them (just moved or split off): their servers are left out of
    /// balancing until they come — weighed as empty, a big or busy table
    /// just moved would make its new server look light and draw a second
    /// one, which moves back once the figures come. Empty when no server
    /// publishes loads.
    pub unknown: BTreeSet<TableId>,
    /// Borrows in queue order: the borrower and the tables it needs
    /// together (rule 4).
    pub borrows: Vec<(ServerId, BTreeSet<TableId>)>,
    /// Where each lent table goes back to once no borrow names it.
    pub homes: BTreeMap<TableId, ServerId>,
    /// Log-less servers with a journal of a dead generation (its lease
    /// gone) not completed yet ([`crate::logless`]): their tables are not
    /// reassigned before (rule 2). Empty when no server is log-less.
    pub uncompleted: BTreeSet<ServerId>,
    /// Each server's last join: the `mod_revision` of `joined/<server>`,
    /// which every join writes in the transaction that creates its member
    /// key (a server not here has not joined since the key was
    /// introduced: `Revision(0)`, what etcd compares an absent key as).
    pub joins: BTreeMap<ServerId, Revision>,
}

/// The owner a reassignment takes a table from (R3), as the view saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone {
    pub server: ServerId,
    /// `joined/<server>`'s revision in the view: the write requires it
    /// unchanged, so a server that joined (and perhaps left) again since
    /// keeps its tables until a newer view decides.
    pub last_join: Revision,
}

/// A write the coordinator asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Compare `owner/<table>`'s revision with `expect` (0: absent), then
    /// put `owner`, and delete any pending move.
    Assign {
        table: TableId,
        expect: Revision,
        /// R3 at commit time: the previous owner, whose member key must
        /// still be absent and which must not have joined since the view
        /// — a server that joined again meanwhile (and may have loaded the
        /// table under the old assignment, or begun a new log-less run
        /// not completed yet) keeps it.
        gone: Option<Gone>,
        owner: Owner,
        reason: &'static str,
    },
    /// Ask the owner to hand `table` to `to` (its DROP, then the ADD):
    /// put `move/<table>` if there is no pending move and
    /// `owner/<table>`'s revision is still `expect` (a view that is old —
    /// the table moved meanwhile, perhaps to `to` itself — asks nothing;
    /// otherwise a move to its own owner would stay pending for ever and
    /// block every later one).
    Move {
        table: TableId,
        expect: Revision,
        to: ServerId,
        reason: &'static str,
    },
    /// BORROW: a [`Action::Move`] of `table` to the borrower `to`, which
    /// also puts `home/<table>` = `home` when `home` is `Some` (the
    /// table's first lend: `home/<table>` must still be absent; with
    /// `None` it must still be present).
    Lend {
        table: TableId,
        expect: Revision,
        to: ServerId,
        home: Option<ServerId>,
    },
    /// The table is home (or its home is gone): delete `home/<table>` —
    /// if `owner/<table>`'s revision is still `expect` (`None`: the table
    /// is gone), so that a view older than a new lend forgets nothing.
    ForgetHome {
        table: TableId,
        expect: Option<Revision>,
    },
}

/// The log-less servers whose dead journals the coordinator completes
/// now: all in `uncompleted`, owners of tables or not — before it
/// reassigns their tables if they are gone; before they load their tables
/// again if they joined again meanwhile; and before anyone loads a table
/// whose manifest a server handed over and then died still points into
/// its journal (a load cannot tell what the unsynced tail of a dead
/// journal held: it waits for the completion of any dead journal it
/// replays — the simulation's seed 1734 waited for ever when only
/// owners' journals were completed).
pub fn completions_due(view: &ClusterView) -> BTreeSet<ServerId> {
    view.uncompleted.clone()
}

/// How many moves the real coordinator keeps in flight at most by
/// default (the servers' `balance_moves`): balancing and draining moves
/// are decided several per round, up to this many pending at once
/// (lends and RETURNs count too).
pub const MAX_MOVES: usize = 16;

/// The writes that bring `view` where it should be, with one move in
/// flight at most ([`decide_moves`] with 1).
pub fn decide(view: &ClusterView, spread: usize) -> Vec<Action> {
    decide_moves(view, spread, 1)
}

/// The writes that bring `view` where it should be; balancing and
/// draining moves only while fewer than `max_moves` moves are pending
/// (`move/<table>` keys), and at most as many more as that leaves.
pub fn decide_moves(view: &ClusterView, spread: usize, max_moves: usize) -> Vec<Action> {
    let mut actions = Vec::new();
    let receivers: BTreeSet<ServerId> = view.members.difference(&view.draining).copied().collect();
    let mut load: BTreeMap<ServerId, usize> = receivers.iter().map(|s| (*s, 0)).collect();
    for (owner, _) in view.owners.values().flatten() {
        if let Some(n) = load.get_mut(&owner.server) {
            *n += 1;
        }
    }
    let least_loaded = |load: &BTreeMap<ServerId, usize>| {
        load.iter().min_by_key(|(s, n)| (**n, **s)).map(|(s, _)| *s)
    };
    for (table, owner) in &view.owners {
        let (expect, gone, epoch, reason) = match owner {
            None => (Revision(0), None, Epoch(1), "no owner yet"),
            // Log-less: not before its journals are completed.
            Some((o, _)) if view.uncompleted.contains(&o.server) => continue,
            Some((o, rev)) if !view.members.contains(&o.server) => (
                *rev,
                Some(Gone {
                    server: o.server,
                    last_join: view.joins.get(&o.server).copied().unwrap_or(Revision(0)),
                }),
                Epoch(o.epoch.0 + 1),
                "its owner's lease is gone",
            ),
            Some(_) => continue,
        };
        let Some(to) = least_loaded(&load) else {
            break; // no member to give it to
        };
        *load.entry(to).or_default() += 1;
        actions.push(Action::Assign {
            table: *table,
            expect,
            gone,
            owner: Owner { server: to, epoch },
            reason,
        });
    }
    let locked = borrow(view, &mut actions);
    let budget = max_moves.saturating_sub(view.moves.len());
    if budget > 0 && actions.is_empty() {
        actions.extend(balance(view, &load, spread, &locked, budget));
    }
    actions
}

/// Rule 4: lends for granted borrows and returns of tables no borrow
/// names. Answers the tables borrows name or that are away from home:
/// balance leaves them alone.
fn borrow(view: &ClusterView, actions: &mut Vec<Action>) -> BTreeSet<TableId> {
    let mut locked: BTreeSet<TableId> = BTreeSet::new();
    for (borrower, tables) in &view.borrows {
        if !view.members.contains(borrower) {
            continue; // its borrow goes with its lease
        }
        let granted = tables.is_disjoint(&locked);
        locked.extend(tables.iter().copied());
        if !granted {
            continue;
        }
        for table in tables {
            let Some(Some((owner, expect))) = view.owners.get(table) else {
                continue; // no such table, or no owner yet (rule 1)
            };
            if owner.server == *borrower
                || !view.members.contains(&owner.server)
                || view.moves.contains_key(table)
            {
                continue; // here already; rule 2's; or moving
            }
            actions.push(Action::Lend {
                table: *table,
                expect: *expect,
                to: *borrower,
                home: (!view.homes.contains_key(table)).then_some(owner.server),
            });
        }
    }
    for (table, home) in &view.homes {
        if locked.contains(table) {
            continue;
        }
        let owner = view.owners.get(table).copied().flatten();
        let receives = view.members.contains(home) && !view.draining.contains(home);
        match owner {
            // The table is gone (merged), home, or its home is gone.
            _ if !view.owners.contains_key(table) => {
                actions.push(Action::ForgetHome {
                    table: *table,
                    expect: None,
                });
            }
            None => {} // rule 1 first
            // Home — unless a lend is still on its way (its borrow ended
            // before the table arrived): forgotten now, the home would be
            // lost once the lend lands, and the next lend would note the
            // borrower as the table's home (the simulation's seed 42
            // without faults: tables drifted to their borrowers and
            // balance moved them back).
            Some((o, expect))
                if (o.server == *home && !view.moves.contains_key(table)) || !receives =>
            {
                actions.push(Action::ForgetHome {
                    table: *table,
                    expect: Some(expect),
                });
            }
            Some((o, expect))
                if view.members.contains(&o.server) && !view.moves.contains_key(table) =>
            {
                actions.push(Action::Move {
                    table: *table,
                    expect,
                    to: *home,
                    reason: "RETURN: no borrow needs it any more",
                });
            }
            _ => {} // moving, or rule 2's
        }
        locked.insert(*table);
    }
    locked
}

/// A table's weight in `view` ([`table_weight`] of its figures).
pub fn weight_in(view: &ClusterView, t: &TableId) -> u64 {
    table_weight(
        view.rates.get(t).copied().unwrap_or(0),
        view.inodes.get(t).copied().unwrap_or(0),
    )
}

/// The weight of each of `servers` in `view`: the sum of its tables'
/// (what rule 3 balances; the coordinator logs it with each balancing
/// move). A table lent away counts for its home, where it goes back:
/// weighed where a BORROW holds it for a moment, it made balance move
/// tables that the RETURN then undid.
pub fn weights(
    view: &ClusterView,
    servers: impl IntoIterator<Item = ServerId>,
) -> BTreeMap<ServerId, u64> {
    let mut weights: BTreeMap<ServerId, u64> = servers.into_iter().map(|s| (s, 0)).collect();
    for (t, o) in &view.owners {
        let at = o.map(|(o, _)| view.homes.get(t).copied().unwrap_or(o.server));
        if let Some(w) = at.and_then(|s| weights.get_mut(&s)) {
            *w = w.saturating_add(weight_in(view, t));
        }
    }
    weights
}

/// Up to `budget` moves from the busiest server (a draining one first)
/// to the idlest; never of a `locked` table nor of one already moving.
///
/// Several moves are planned at once as one would follow the other: each
/// planned move — and each pending one (`view.moves`) — counts its table
/// at its target already, so the next is decided on the weights the
/// earlier ones leave (the same rule as one move per round: each at
/// least halves the difference between its two servers and never makes
/// the target heavier than the source was, so they never undo each
/// other).
fn balance(
    view: &ClusterView,
    load: &BTreeMap<ServerId, usize>,
    spread: usize,
    locked: &BTreeSet<TableId>,
    budget: usize,
) -> Vec<Action> {
    let mut actions = Vec::new();
    if budget == 0 {
        return actions;
    }
    let owned = |s: ServerId| {
        view.owners
            .iter()
            .filter(|(t, _)| !locked.contains(t) && !view.moves.contains_key(t))
            .filter_map(move |(t, o)| o.filter(|(o, _)| o.server == s).map(|(_, rev)| (*t, rev)))
    };
    // Table counts with the pending moves landed (draining's target is
    // the least loaded by count).
    let mut load = load.clone();
    for (t, to) in &view.moves {
        if let Some(Some((o, _))) = view.owners.get(t) {
            if let Some(n) = load.get_mut(&o.server) {
                *n = n.saturating_sub(1);
            }
        }
        if let Some(n) = load.get_mut(to) {
            *n += 1;
        }
    }
    let draining: Vec<ServerId> = view
        .draining
        .iter()
        .copied()
        .filter(|d| {
            owned(*d).next().is_some()
                || view
                    .moves
                    .keys()
                    .any(|t| matches!(view.owners.get(t), Some(Some((o, _))) if o.server == *d))
        })
        .collect();
    if !draining.is_empty() {
        // Draining first: nothing moves for balance while a draining
        // server holds a table it can give away, or one is on its way
        // out (its borrow's tables stay until the RETURN).
        for d in draining {
            for (table, expect) in owned(d) {
                if actions.len() >= budget {
                    return actions;
                }
                let Some(to) = load.iter().min_by_key(|(s, n)| (**n, **s)).map(|(s, _)| *s) else {
                    return actions;
                };
                *load.entry(to).or_default() += 1;
                actions.push(Action::Move {
                    table,
                    expect,
                    to,
                    reason: "its server is draining",
                });
            }
        }
        return actions;
    }
    // A server holding a table whose figures are unknown (just moved or
    // split off) has an incomplete weight: it neither gives nor receives
    // for balance until they come (weighed as empty, a big table just
    // moved would make its new server look light and draw a second one).
    // The other servers balance meanwhile.
    let incomplete: BTreeSet<ServerId> = view
        .unknown
        .iter()
        .filter_map(|t| view.owners.get(t).copied().flatten())
        .map(|(o, _)| o.server)
        .collect();
    let weight = |t: &TableId| weight_in(view, t);
    // While a receiver's weight is incomplete, no other receiver is
    // filled past the mean weight of all (theirs counted low: an unknown
    // table weighs its least, 1), so that the complete ones do not take
    // the share the incomplete ones are due and give it on afterwards
    // (seen with 200 tables onto three new servers: the first to join
    // was filled to 52 while the others waited for their figures, and
    // tables went on, one back where it came from).
    let cap = load.keys().any(|s| incomplete.contains(s)).then(|| {
        let all = weights(view, load.keys().copied());
        let total = all.values().fold(0u64, |a, w| a.saturating_add(*w));
        total.div_ceil(all.len().max(1) as u64)
    });
    let mut weights = weights(
        view,
        load.keys().copied().filter(|s| !incomplete.contains(s)),
    );
    // A pending move's table weighs at its target already (a lent or
    // returning one counts for its home throughout: see `weights`).
    for (t, to) in &view.moves {
        let Some(Some((o, _))) = view.owners.get(t) else {
            continue;
        };
        if view.homes.contains_key(t) {
            continue;
        }
        let w = weight(t);
        if let Some(x) = weights.get_mut(&o.server) {
            *x = x.saturating_sub(w);
        }
        if let Some(x) = weights.get_mut(to) {
            *x = x.saturating_add(w);
        }
    }
    // Measured weights (rates, inode counts) are noisy: a quarter of the
    // heavy side at least, or nothing moves.
    let rated = view.rates.values().any(|r| *r > 0);
    let measured = rated || view.inodes.values().any(|n| *n >= INODES_PER_UNIT);
    // A server with a standing borrow is in the middle of operations
    // over several tables (the tables a split makes for it among them):
    // balance takes nothing from it until it RETURNs.
    let borrowing = |s: &ServerId| view.borrows.iter().any(|(b, _)| b == s);
    let mut planned: BTreeSet<TableId> = BTreeSet::new();
    while actions.len() < budget {
        let Some((to, light)) = weights
            .iter()
            .min_by_key(|(s, w)| (**w, **s))
            .map(|(s, w)| (*s, *w))
        else {
            break;
        };
        let Some((from, heavy)) = weights
            .iter()
            .filter(|(s, _)| !borrowing(s))
            .max_by_key(|(s, w)| (**w, std::cmp::Reverse(**s)))
            .map(|(s, w)| (*s, *w))
        else {
            break;
        };
        let diff = heavy.saturating_sub(light);
        if diff < spread.max(2) as u64 {
            break;
        }
        if measured && diff.saturating_mul(4) < heavy {
            break;
        }
        let Some((table, expect)) = owned(from)
            .filter(|(t, _)| !planned.contains(t))
            .filter(|(t, _)| weight(t).saturating_mul(4) <= diff.saturating_mul(3))
            .filter(|(t, _)| cap.is_none_or(|c| light.saturating_add(weight(t)) <= c))
            .min_by_key(|(t, rev)| (weight(t).saturating_mul(2).abs_diff(diff), *rev, *t))
        else {
            break;
        };
        let w = weight(&table);
        if let Some(x) = weights.get_mut(&from) {
            *x = x.saturating_sub(w);
        }
        if let Some(x) = weights.get_mut(&to) {
            *x = x.saturating_add(w);
        }
        planned.insert(table);
        actions.push(Action::Move {
            table,
            expect,
            to,
            reason: if rated {
                "balancing: its server carries more requests"
            } else if measured {
                "balancing: its server holds more inodes"
            } else {
                "balancing: its server holds more tables"
            },
        });
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(s: u32, e: u64) -> Option<(Owner, Revision)> {
        Some((
            Owner {
                server: ServerId(s),
                epoch: Epoch(e),
            },
            Revision(e * 10),
        ))
    }

    #[test]
    fn unowned_tables_are_spread_over_members() {
        let view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            owners: (0..4).map(|t| (TableId(t), None)).collect(),
            ..Default::default()
        };
        let a = decide(&view, 2);
        let to: Vec<u32> = a
            .iter()
            .map(|a| match a {
                Action::Assign { owner, .. } => owner.server.0,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(to, vec![1, 2, 1, 2]);
    }

    #[test]
    fn a_table_moves_without_its_owner_only_once_the_owners_lease_is_gone() {
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            owners: [(TableId(0), owner(1, 3)), (TableId(1), owner(2, 1))].into(),
            joins: [(ServerId(1), Revision(12))].into(),
            ..Default::default()
        };
        assert!(decide(&view, 2).is_empty());
        view.members.remove(&ServerId(1));
        assert_eq!(
            decide(&view, 2),
            vec![Action::Assign {
                table: TableId(0),
                expect: Revision(30),
                gone: Some(Gone {
                    server: ServerId(1),
                    last_join: Revision(12)
                }),
                owner: Owner {
                    server: ServerId(2),
                    epoch: Epoch(4)
                },
                reason: "its owner's lease is gone",
            }]
        );
    }

    #[test]
    fn a_log_less_owners_tables_wait_for_the_completion_of_its_journals() {
        let mut view = ClusterView {
            members: [ServerId(2)].into(),
            owners: [(TableId(0), owner(1, 3)), (TableId(1), owner(2, 1))].into(),
            uncompleted: [ServerId(1)].into(),
            ..Default::default()
        };
        assert_eq!(completions_due(&view), [ServerId(1)].into());
        assert!(decide(&view, 2).is_empty(), "not reassigned before");
        view.uncompleted.insert(ServerId(3));
        assert_eq!(
            completions_due(&view),
            [ServerId(1), ServerId(3)].into(),
            "owner of no table: completed too"
        );
        view.uncompleted.remove(&ServerId(3));
        view.uncompleted.clear();
        assert!(completions_due(&view).is_empty());
        assert!(matches!(
            decide(&view, 2)[..],
            [Action::Assign {
                gone: Some(Gone {
                    server: ServerId(1),
                    ..
                }),
                ..
            }]
        ));
    }

    #[test]
    fn balancing_has_hysteresis_and_draining_empties_a_server() {
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            owners: [
                (TableId(0), owner(1, 1)),
                (TableId(1), owner(1, 1)),
                (TableId(2), owner(2, 1)),
            ]
            .into(),
            ..Default::default()
        };
        assert!(decide(&view, 2).is_empty(), "2 vs 1 is within the spread");
        view.members.insert(ServerId(3));
        assert!(matches!(
            decide(&view, 2)[..],
            [Action::Move {
                to: ServerId(3),
                ..
            }]
        ));
        view.members.remove(&ServerId(3));
        view.draining.insert(ServerId(2));
        assert!(matches!(
            decide(&view, 2)[..],
            [Action::Move {
                table: TableId(2),
                expect: Revision(10),
                to: ServerId(1),
                ..
            }]
        ));
    }

    fn rated(owners: &[(u32, u32)], rates: &[(u32, u64)]) -> ClusterView {
        let servers: BTreeSet<ServerId> = owners.iter().map(|(_, s)| ServerId(*s)).collect();
        ClusterView {
            members: servers.into_iter().chain([ServerId(9)]).collect(),
            owners: owners
                .iter()
                .map(|(t, s)| (TableId(*t), owner(*s, 1 + u64::from(*t))))
                .collect(),
            rates: rates.iter().map(|(t, r)| (TableId(*t), *r)).collect(),
            ..Default::default()
        }
    }

    fn moved(actions: &[Action]) -> Option<(TableId, ServerId)> {
        actions.iter().find_map(|a| match a {
            Action::Move { table, to, .. } => Some((*table, *to)),
            _ => None,
        })
    }

    /// Where `actions`' moves go: target → how many.
    fn targets(actions: &[Action]) -> BTreeMap<u32, usize> {
        let mut n = BTreeMap::new();
        for a in actions {
            match a {
                Action::Move { to, .. } => *n.entry(to.0).or_default() += 1,
                other => panic!("{other:?}"),
            }
        }
        n
    }

    fn pend(view: &mut ClusterView, actions: &[Action]) {
        for a in actions {
            if let Action::Move { table, to, .. } = a {
                assert!(view.moves.insert(*table, *to).is_none(), "{table:?} twice");
            }
        }
    }

    fn land(view: &mut ClusterView) {
        for (t, to) in std::mem::take(&mut view.moves) {
            let e = view.owners[&t].unwrap().0.epoch.0 + 1;
            view.owners.insert(
                t,
                Some((
                    Owner {
                        server: to,
                        epoch: Epoch(e),
                    },
                    Revision(1000 + u64::from(t.0)),
                )),
            );
        }
    }

    /// Issue 21: two new servers next to one holding 12 tables. With room
    /// for 16 moves one round asks for all 8 that balance them (4 each,
    /// the oldest tables first); pending, they count at their targets, so
    /// the next round asks nothing; landed, nothing either. One at a time
    /// (`decide`) asks for one and nothing more while it is pending.
    #[test]
    fn several_moves_are_planned_at_once_and_count_at_their_targets() {
        let start = ClusterView {
            members: [ServerId(1), ServerId(2), ServerId(3)].into(),
            owners: (0..12)
                .map(|t| (TableId(t), owner(1, 1 + u64::from(t))))
                .collect(),
            ..Default::default()
        };
        let mut view = start.clone();
        let a = decide_moves(&view, 2, 16);
        assert_eq!(targets(&a), [(2, 4), (3, 4)].into(), "{a:?}");
        let tables: BTreeSet<u32> = a
            .iter()
            .filter_map(|a| match a {
                Action::Move { table, .. } => Some(table.0),
                _ => None,
            })
            .collect();
        assert_eq!(tables, (0..8).collect(), "oldest first, each once");
        pend(&mut view, &a);
        assert_eq!(decide_moves(&view, 2, 16), vec![]);
        land(&mut view);
        assert_eq!(decide_moves(&view, 2, 16), vec![]);
        // Bounded: 3 at once, then none while 3 are pending, then one
        // more once one of them landed (a lend pending counts too).
        let mut view = start.clone();
        let a = decide_moves(&view, 2, 3);
        assert_eq!(targets(&a), [(2, 2), (3, 1)].into(), "{a:?}");
        pend(&mut view, &a);
        assert_eq!(decide_moves(&view, 2, 3), vec![]);
        let first = *view.moves.keys().next().unwrap();
        let to = view.moves.remove(&first).unwrap();
        view.owners.insert(
            first,
            Some((
                Owner {
                    server: to,
                    epoch: Epoch(2),
                },
                Revision(999),
            )),
        );
        assert_eq!(decide_moves(&view, 2, 3).len(), 1);
        // Pending moves planned elsewhere (all to 2) are counted: the
        // round sends the rest to 3 until the three are even.
        let mut view = start.clone();
        for t in 0..4 {
            view.moves.insert(TableId(t), ServerId(2));
        }
        assert_eq!(targets(&decide_moves(&view, 2, 16)), [(3, 4)].into());
        // One at a time, as before.
        let mut view = start;
        let a = decide(&view, 2);
        assert_eq!(targets(&a), [(2, 1)].into());
        pend(&mut view, &a);
        assert_eq!(decide(&view, 2), vec![]);
    }

    /// Planned together, moves by weight never undo each other: a server
    /// of big and small tables next to an empty one gives what one round
    /// at a time would have given, and the result needs no further move.
    #[test]
    fn moves_planned_together_by_weight_converge_without_moving_back() {
        use rand::{Rng, SeedableRng};
        for seed in 0..200u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let servers = rng.random_range(2..=5u32);
            let tables = rng.random_range(1..=30u32);
            let mut view = ClusterView {
                members: (1..=servers).map(ServerId).collect(),
                owners: (0..tables)
                    .map(|t| {
                        (
                            TableId(t),
                            owner(rng.random_range(1..=servers), 1 + u64::from(t)),
                        )
                    })
                    .collect(),
                inodes: (0..tables)
                    .map(|t| (TableId(t), rng.random_range(0..40_000)))
                    .collect(),
                ..Default::default()
            };
            let max = rng.random_range(1..=16usize);
            let mut moved: BTreeMap<TableId, Vec<(ServerId, ServerId)>> = BTreeMap::new();
            for round in 0.. {
                assert!(round < 200, "seed {seed}: no end");
                let a = decide_moves(&view, 2, max);
                assert!(view.moves.len() + a.len() <= max, "seed {seed}: over {max}");
                if a.is_empty() && view.moves.is_empty() {
                    break;
                }
                for x in &a {
                    if let Action::Move { table, to, .. } = x {
                        let from = view.owners[table].unwrap().0.server;
                        moved.entry(*table).or_default().push((from, *to));
                    }
                }
                pend(&mut view, &a);
                // Some of the pending moves land (at least one).
                let pending: Vec<TableId> = view.moves.keys().copied().collect();
                for (i, t) in pending.iter().enumerate() {
                    if i == 0 || rng.random_bool(0.5) {
                        let to = view.moves.remove(t).unwrap();
                        let e = view.owners[t].unwrap().0.epoch.0 + 1;
                        view.owners.insert(
                            *t,
                            Some((
                                Owner {
                                    server: to,
                                    epoch: Epoch(e),
                                },
                                Revision(10_000 + 100 * round + u64::from(t.0)),
                            )),
                        );
                    }
                }
            }
            for (t, m) in &moved {
                for (i, (from, to)) in m.iter().enumerate() {
                    assert!(
                        !m[i + 1..].contains(&(*to, *from)),
                        "seed {seed}: {t:?} moved back: {m:?}"
                    );
                }
            }
        }
    }

    /// While two of three new servers wait for their figures, the third
    /// is filled to the mean of all four, not to the giver's level (it
    /// was: 7 of 22 tables, and the surplus went on to others later).
    #[test]
    fn a_complete_receiver_is_not_filled_past_the_mean_while_others_wait() {
        let mut owners: BTreeMap<TableId, Option<(Owner, Revision)>> = BTreeMap::new();
        let mut t = 0;
        for (s, n) in [(1, 12), (2, 2), (3, 4), (4, 4)] {
            for _ in 0..n {
                owners.insert(TableId(t), owner(s, 1 + u64::from(t)));
                t += 1;
            }
        }
        let mut view = ClusterView {
            members: (1..=4).map(ServerId).collect(),
            owners,
            // One table of 3 and of 4 just landed there.
            unknown: [TableId(14), TableId(18)].into(),
            // Servers publish figures (small tables: weight 1 each).
            inodes: (0..22).map(|t| (TableId(t), 10)).collect(),
            ..Default::default()
        };
        for t in [14, 18] {
            view.inodes.remove(&TableId(t));
        }
        let a = decide_moves(&view, 2, 16);
        assert_eq!(targets(&a), [(2, 4)].into(), "{a:?}");
        pend(&mut view, &a);
        land(&mut view);
        view.unknown.clear();
        for t in [14, 18] {
            view.inodes.insert(TableId(t), 10);
        }
        // Figures in: 8, 6, 4, 4 — the rest goes to 3 and 4, nothing
        // leaves 2.
        let a = decide_moves(&view, 2, 16);
        assert_eq!(targets(&a), [(3, 1), (4, 1)].into(), "{a:?}");
    }

    /// A draining server gives up to the room left at once, spread over
    /// the receivers by count.
    #[test]
    fn a_draining_server_gives_several_tables_at_once() {
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2), ServerId(3)].into(),
            draining: [ServerId(1)].into(),
            owners: (0..5)
                .map(|t| (TableId(t), owner(1, 1 + u64::from(t))))
                .collect(),
            ..Default::default()
        };
        let a = decide_moves(&view, 2, 4);
        assert!(
            a.iter().all(
                |a| matches!(a, Action::Move { reason, .. } if *reason == "its server is draining")
            ),
            "{a:?}"
        );
        assert_eq!(targets(&a), [(2, 2), (3, 2)].into());
        pend(&mut view, &a);
        assert_eq!(decide_moves(&view, 2, 4), vec![]);
        assert_eq!(decide_moves(&view, 2, 5).len(), 1);
        land(&mut view);
        assert_eq!(targets(&decide_moves(&view, 2, 4)), [(2, 1)].into());
    }

    #[test]
    fn busy_servers_give_tables_to_idle_ones_by_request_rate() {
        // Server 1 carries 500 + 100 ops/s, server 2 one idle table, and
        // server 9 nothing: the 500 one weighs more than three quarters
        // of the difference (moving it would just move the imbalance), so
        // the 100 one goes to the lightest (9).
        let view = rated(&[(0, 1), (1, 1), (2, 2)], &[(0, 500), (1, 100)]);
        assert_eq!(moved(&decide(&view, 2)), Some((TableId(1), ServerId(9))));
        // A single hot table is not moved (it would only move the load).
        let view = rated(&[(0, 1), (2, 2)], &[(0, 1000)]);
        let view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            ..view
        };
        assert_eq!(moved(&decide(&view, 2)), None);
    }

    #[test]
    fn small_differences_in_rates_move_nothing() {
        // 1,000 vs 900 ops/s: within a quarter of the heavier.
        let view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            ..rated(&[(0, 1), (1, 1), (2, 2)], &[(0, 500), (1, 500), (2, 900)])
        };
        assert_eq!(moved(&decide(&view, 2)), None);
    }

    #[test]
    fn rate_balancing_converges_without_moving_back() {
        // Apply the asked moves until none is asked: each at least halves
        // the difference, so few moves and none undone.
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2), ServerId(3)].into(),
            ..rated(
                &[(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 2)],
                &[(0, 400), (1, 300), (2, 200), (3, 100), (4, 50), (5, 10)],
            )
        };
        let mut seen = BTreeSet::new();
        for round in 1.. {
            assert!(round < 20, "no convergence");
            let Some((t, to)) = moved(&decide(&view, 2)) else {
                break;
            };
            assert!(seen.insert((t, to)), "{t:?} moved to {to:?} twice");
            view.owners.insert(t, owner(to.0, 100 + round));
        }
    }

    /// `view` with these inode counts per table.
    fn with_inodes(view: ClusterView, inodes: &[(u32, u64)]) -> ClusterView {
        ClusterView {
            inodes: inodes.iter().map(|(t, n)| (TableId(*t), *n)).collect(),
            ..view
        }
    }

    /// Applies the asked moves until none is asked; fails on a move
    /// asked twice (ping-pong) or on too many rounds.
    fn settle(view: &mut ClusterView) -> Vec<(TableId, ServerId)> {
        let mut seen = Vec::new();
        for round in 1.. {
            assert!(round < 20, "no convergence: {seen:?}");
            let Some((t, to)) = moved(&decide(view, 2)) else {
                break;
            };
            assert!(!seen.contains(&(t, to)), "{t:?} moved to {to:?} twice");
            seen.push((t, to));
            view.owners.insert(t, owner(to.0, 100 + round));
        }
        seen
    }

    #[test]
    fn an_idle_server_of_big_tables_gives_one_to_a_server_of_small_ones() {
        // Two tables each, no requests: server 1's hold 50,000 inodes
        // each, server 2's a handful. Counting tables sees no imbalance.
        let mut view = with_inodes(
            ClusterView {
                members: [ServerId(1), ServerId(2)].into(),
                ..rated(&[(0, 1), (1, 1), (2, 2), (3, 2)], &[])
            },
            &[(0, 50_000), (1, 50_000), (2, 3), (3, 10)],
        );
        let actions = decide(&view, 2);
        assert!(
            matches!(
                actions[..],
                [Action::Move {
                    to: ServerId(2),
                    reason: "balancing: its server holds more inodes",
                    ..
                }]
            ),
            "{actions:?}"
        );
        // One big table moves (the one in place longest), and then the
        // balancer wants nothing (51 vs 53: no ping-pong).
        assert_eq!(settle(&mut view), vec![(TableId(0), ServerId(2))]);
        assert!(decide(&view, 2).is_empty());
    }

    #[test]
    fn inodes_weigh_next_to_rates_and_small_tables_like_empty_ones() {
        // Under 1,000 inodes a table weighs as an empty one: 2 vs 2.
        let view = with_inodes(
            ClusterView {
                members: [ServerId(1), ServerId(2)].into(),
                ..rated(&[(0, 1), (1, 1), (2, 2), (3, 2)], &[])
            },
            &[(0, 999), (1, 999)],
        );
        assert_eq!(moved(&decide(&view, 2)), None);
        // Server 1 serves 100 ops/s on table 0; server 2 is idle but
        // holds 300,000 inodes in tables 2 to 4 (3 × 101 against 102):
        // server 2 is the heavier, and gives one of its big tables away.
        let view = with_inodes(
            ClusterView {
                members: [ServerId(1), ServerId(2)].into(),
                ..rated(&[(0, 1), (1, 1), (2, 2), (3, 2), (4, 2)], &[(0, 100)])
            },
            &[(2, 100_000), (3, 100_000), (4, 100_000)],
        );
        assert_eq!(moved(&decide(&view, 2)), Some((TableId(2), ServerId(1))));
        // The same inodes next to 1,000 ops/s: the rates decide, server 1
        // is the heavier and gives its idle table away.
        let view = ClusterView {
            rates: [(TableId(0), 1_000)].into(),
            ..view
        };
        assert_eq!(moved(&decide(&view, 2)), Some((TableId(1), ServerId(2))));
    }

    #[test]
    fn balancing_by_rates_and_inodes_converges_without_moving_back() {
        let mut view = with_inodes(
            ClusterView {
                members: [ServerId(1), ServerId(2), ServerId(3)].into(),
                ..rated(
                    &[(0, 1), (1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 3)],
                    &[(0, 40), (1, 30), (3, 10), (6, 5)],
                )
            },
            &[(0, 5_000), (1, 80_000), (2, 60_000), (4, 20_000), (5, 300)],
        );
        assert!(!settle(&mut view).is_empty());
    }

    #[test]
    fn balancing_waits_for_the_figures_of_a_table_just_moved() {
        // Table 0 (50,000 inodes) just moved to server 2, which has not
        // published its figures: weighed as empty it would make server 2
        // look light, and draw table 1 too.
        let mut view = with_inodes(
            ClusterView {
                members: [ServerId(1), ServerId(2)].into(),
                ..rated(&[(0, 2), (1, 1), (2, 1), (3, 1)], &[])
            },
            &[(1, 50_000)],
        );
        view.unknown.insert(TableId(0));
        assert_eq!(decide(&view, 2), vec![]);
        // Its figures published: balanced (51 vs 53).
        view.unknown.clear();
        view.inodes.insert(TableId(0), 50_000);
        assert_eq!(decide(&view, 2), vec![]);
        // A draining server still gives its tables away meanwhile.
        view.unknown.insert(TableId(0));
        view.draining.insert(ServerId(1));
        assert!(moved(&decide(&view, 2)).is_some());
    }

    #[test]
    fn a_table_with_unknown_figures_holds_back_its_server_only() {
        // Server 1 holds four 20,000-inode tables, server 3 none, and
        // server 2 one table just moved there (figures unknown). Before,
        // nothing moved until server 2 published; now 1 gives to 3, and
        // server 2 — light as far as is known — receives nothing.
        let mut view = with_inodes(
            ClusterView {
                members: [ServerId(1), ServerId(2), ServerId(3)].into(),
                ..rated(&[(0, 1), (1, 1), (2, 1), (3, 1), (4, 2)], &[])
            },
            &[(0, 20_000), (1, 20_000), (2, 20_000), (3, 20_000)],
        );
        view.unknown.insert(TableId(4));
        let (t, to) = moved(&decide(&view, 2)).expect("server 1 gives a table away");
        assert_eq!(
            to,
            ServerId(3),
            "table {t} to the server whose weight is known"
        );
        // With only the unknown table's server to receive, nothing moves
        // (it would look empty: the churn of moving twice).
        view.members.remove(&ServerId(3));
        assert_eq!(moved(&decide(&view, 2)), None);
        // Nor does the server holding it give anything away meanwhile.
        view.members.insert(ServerId(3));
        view.unknown.clear();
        view.unknown.insert(TableId(0));
        assert_eq!(
            moved(&decide(&view, 2)),
            None,
            "server 1's weight is incomplete"
        );
    }

    #[test]
    fn absurd_published_figures_do_not_overflow() {
        let view = with_inodes(
            ClusterView {
                members: [ServerId(1), ServerId(2)].into(),
                ..rated(&[(0, 1), (1, 1), (2, 2)], &[(0, u64::MAX), (1, u64::MAX)])
            },
            &[(0, u64::MAX), (2, u64::MAX)],
        );
        let _ = decide(&view, 2);
    }

    fn granted(view: &ClusterView, who: ServerId) -> bool {
        let mut locked = BTreeSet::new();
        for (b, ts) in &view.borrows {
            let free = ts.is_disjoint(&locked);
            if *b == who {
                return free;
            }
            locked.extend(ts.iter().copied());
        }
        false
    }

    #[test]
    fn a_borrow_is_lent_whole_and_goes_home_after_its_return() {
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            owners: [(TableId(0), owner(1, 1)), (TableId(1), owner(2, 1))].into(),
            borrows: vec![(ServerId(1), [TableId(0), TableId(1)].into())],
            ..Default::default()
        };
        assert_eq!(
            decide(&view, 2),
            vec![Action::Lend {
                table: TableId(1),
                expect: Revision(10),
                to: ServerId(1),
                home: Some(ServerId(2)),
            }]
        );
        // Lent: nothing more while the borrow stands (balance would move
        // one of server 1's two tables to the idle server 2 otherwise).
        view.owners.insert(TableId(1), owner(1, 2));
        view.homes.insert(TableId(1), ServerId(2));
        assert_eq!(decide(&view, 1), vec![]);
        // RETURN: it goes home, then its home is forgotten.
        view.borrows.clear();
        assert!(matches!(
            decide(&view, 2)[..],
            [Action::Move {
                table: TableId(1),
                to: ServerId(2),
                ..
            }]
        ));
        view.owners.insert(TableId(1), owner(2, 3));
        assert_eq!(
            decide(&view, 2),
            vec![Action::ForgetHome {
                table: TableId(1),
                expect: Some(Revision(30))
            }]
        );
    }

    #[test]
    fn a_borrowing_server_gives_nothing_away_for_balance() {
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            ..rated(&[(0, 1), (1, 1), (2, 1)], &[])
        };
        assert!(moved(&decide(&view, 2)).is_some(), "3 vs 0 balances");
        view.borrows.push((ServerId(1), [TableId(0)].into()));
        assert_eq!(moved(&decide(&view, 2)), None);
        // Draining still empties it (of what its borrow does not hold).
        view.draining.insert(ServerId(1));
        assert!(matches!(
            moved(&decide(&view, 2)),
            Some((TableId(1) | TableId(2), _))
        ));
    }

    #[test]
    fn a_returned_table_goes_straight_to_the_next_borrower() {
        let view = ClusterView {
            members: [ServerId(1), ServerId(2), ServerId(3)].into(),
            owners: [(TableId(0), owner(1, 1)), (TableId(1), owner(1, 2))].into(),
            homes: [(TableId(1), ServerId(2))].into(),
            borrows: vec![(ServerId(3), [TableId(1)].into())],
            ..Default::default()
        };
        assert_eq!(
            decide(&view, 9),
            vec![Action::Lend {
                table: TableId(1),
                expect: Revision(20),
                to: ServerId(3),
                home: None,
            }]
        );
    }

    #[test]
    fn conflicting_borrows_wait_in_queue_order() {
        // 1 wants {0,1}, then 2 wants {1,2}, then 3 wants {2}: only 1 is
        // granted (2 shares table 1 with it, 3 shares table 2 with 2).
        let view = ClusterView {
            members: [ServerId(1), ServerId(2), ServerId(3), ServerId(4)].into(),
            owners: (0..3).map(|t| (TableId(t), owner(4, 1))).collect(),
            borrows: vec![
                (ServerId(1), [TableId(0), TableId(1)].into()),
                (ServerId(2), [TableId(1), TableId(2)].into()),
                (ServerId(3), [TableId(2)].into()),
            ],
            ..Default::default()
        };
        let lent: Vec<(u32, u32)> = decide(&view, 2)
            .iter()
            .map(|a| match a {
                Action::Lend { table, to, .. } => (table.0, to.0),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(lent, vec![(0, 1), (1, 1)]);
    }

    /// How many seeds the randomized borrow models run
    /// (`SEXTANT_BORROW_SEEDS`, default 300).
    fn borrow_seeds() -> u64 {
        std::env::var("SEXTANT_BORROW_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300)
    }

    /// A model of etcd and the servers around `decide`, driven by seeded
    /// random steps: servers borrow random sets of tables, the coordinator
    /// decides, owners carry out moves (in any order), borrowers whose
    /// tables are all here use them and RETURN. Checked at every step:
    /// no table of a granted borrow is moved away from its borrower by
    /// the coordinator; and once no new borrow comes, every borrow is
    /// served, and every table ends at home with no home left noted.
    #[test]
    fn borrows_are_safe_and_all_served_under_random_schedules() {
        for seed in 0..borrow_seeds() {
            run_borrow_model(seed, false);
        }
    }

    /// The same model with an operator asking for moves
    /// (`sextant cluster move`) at random moments, as
    /// `sextant_coordinator::admin::request_move` writes them: the move,
    /// if none is pending and the table is elsewhere, and the table's
    /// noted home deleted in the same transaction (an operator's move
    /// places the table for good). Moves of tables lent to a granted
    /// borrow included: the borrower waits and is lent the table again
    /// from its new place. Checked as above, and that every table ends
    /// where the operator last placed it (else where it started): the
    /// operator's placement is never undone by a RETURN, and every borrow
    /// is still served. Fails if `request_move` keeps the home (the
    /// RETURN sends the table back where the operator moved it from).
    #[test]
    fn operator_moves_amid_borrows_stay_placed_and_every_borrow_is_served() {
        for seed in 0..borrow_seeds() {
            run_borrow_model(seed, true);
        }
    }

    fn run_borrow_model(seed: u64, operator_moves: bool) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let servers = rng.random_range(2..=4u32);
        let tables = rng.random_range(2..=6u32);
        let mut view = ClusterView {
            members: (1..=servers).map(ServerId).collect(),
            owners: (0..tables)
                .map(|t| (TableId(t), owner(rng.random_range(1..=servers), 1)))
                .collect(),
            ..Default::default()
        };
        // Where each table must end: where it started, or where the
        // operator last placed it.
        let mut placed: BTreeMap<TableId, ServerId> = view
            .owners
            .iter()
            .map(|(t, o)| (*t, o.unwrap().0.server))
            .collect();
        let mut rev = 100;
        let mut served = 0;
        let mut asked = 0;
        for step in 0..4000 {
            let calm = step >= 1500;
            match rng.random_range(0..if operator_moves { 5 } else { 4 }) {
                4 if !calm => {
                    let t = TableId(rng.random_range(0..tables));
                    let to = ServerId(rng.random_range(1..=servers));
                    let at = view.owners[&t].unwrap().0.server;
                    if !view.moves.contains_key(&t) && at != to {
                        view.moves.insert(t, to);
                        view.homes.remove(&t);
                        placed.insert(t, to);
                    }
                }
                0 if !calm => {
                    let b = ServerId(rng.random_range(1..=servers));
                    if view.borrows.iter().all(|(s, _)| *s != b) {
                        let n = rng.random_range(1..=tables.min(3));
                        let set = (0..n).map(|_| TableId(rng.random_range(0..tables)));
                        view.borrows.push((b, set.collect()));
                        asked += 1;
                    }
                }
                1 => {
                    // (No balancing: every table must end where it belongs.)
                    for a in decide(&view, usize::MAX) {
                        match a {
                            Action::Lend {
                                table,
                                expect,
                                to,
                                home,
                            } => {
                                let (o, r) = view.owners[&table].unwrap();
                                assert_eq!(r, expect, "seed {seed}");
                                for (b, ts) in &view.borrows {
                                    assert!(
                                        !(ts.contains(&table)
                                            && o.server == *b
                                            && granted(&view, *b)),
                                        "seed {seed}: {table:?} taken from a granted borrow"
                                    );
                                }
                                if let Some(h) = home {
                                    assert!(view.homes.insert(table, h).is_none());
                                }
                                view.moves.insert(table, to);
                            }
                            Action::Move { table, to, .. } => {
                                let o = view.owners[&table].unwrap().0;
                                for (b, ts) in &view.borrows {
                                    assert!(
                                        !(ts.contains(&table) && o.server == *b),
                                        "seed {seed}: {table:?} moved from its borrower"
                                    );
                                }
                                view.moves.insert(table, to);
                            }
                            Action::ForgetHome { table, .. } => {
                                view.homes.remove(&table);
                            }
                            Action::Assign { .. } => panic!("seed {seed}: all owned"),
                        }
                    }
                }
                2 => {
                    // An owner carries out one pending move.
                    let pending: Vec<TableId> = view.moves.keys().copied().collect();
                    if !pending.is_empty() {
                        let t = pending[rng.random_range(0..pending.len())];
                        let to = view.moves.remove(&t).unwrap();
                        rev += 1;
                        view.owners.insert(
                            t,
                            Some((
                                Owner {
                                    server: to,
                                    epoch: Epoch(rev),
                                },
                                Revision(rev),
                            )),
                        );
                    }
                }
                _ => {
                    // A borrower with every table here runs and returns.
                    let ready = view.borrows.iter().position(|(b, ts)| {
                        ts.iter()
                            .all(|t| view.owners[t].is_some_and(|(o, _)| o.server == *b))
                    });
                    // (Granted or not: all its tables are here, so
                    // its operation runs as one local transaction.)
                    if let Some(i) = ready {
                        view.borrows.remove(i);
                        served += 1;
                    }
                }
            }
        }
        assert_eq!(
            (served, view.borrows.len()),
            (asked, 0),
            "seed {seed}: borrows left waiting: {:?}",
            view.borrows
        );
        assert!(view.homes.is_empty(), "seed {seed}: {:?}", view.homes);
        assert!(view.moves.is_empty(), "seed {seed}");
        let at: BTreeMap<TableId, ServerId> = view
            .owners
            .iter()
            .map(|(t, o)| (*t, o.unwrap().0.server))
            .collect();
        assert_eq!(at, placed, "seed {seed}: not where it belongs");
    }

    /// A lend still on its way when its borrow ends (the table is at
    /// home, a move names the borrower): the home is kept, and once the
    /// lend lands the table goes home. The home used to be forgotten
    /// then, and the next lend noted the borrower as its home (the
    /// simulation's seed 42 without faults).
    #[test]
    fn a_home_is_kept_while_a_lend_is_on_its_way() {
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            owners: [(TableId(0), owner(1, 3))].into(),
            moves: [(TableId(0), ServerId(2))].into(),
            homes: [(TableId(0), ServerId(1))].into(),
            ..Default::default()
        };
        assert!(
            !decide(&view, 2)
                .iter()
                .any(|a| matches!(a, Action::ForgetHome { .. })),
            "{:?}",
            decide(&view, 2)
        );
        // Landed at the borrower: back home.
        view.moves.clear();
        view.owners.insert(TableId(0), owner(2, 4));
        assert_eq!(moved(&decide(&view, 2)), Some((TableId(0), ServerId(1))));
        // Home, no move: forgotten.
        view.owners.insert(TableId(0), owner(1, 5));
        assert!(matches!(
            decide(&view, 2)[..],
            [Action::ForgetHome {
                table: TableId(0),
                ..
            }]
        ));
        // A home that is gone is forgotten even with a move on its way.
        view.moves.insert(TableId(0), ServerId(2));
        view.members.remove(&ServerId(1));
        assert!(decide(&view, 2)
            .iter()
            .any(|a| matches!(a, Action::ForgetHome { .. })));
    }

    /// A table lent away weighs for its home: balance does not move a
    /// table because a BORROW holds another somewhere for a moment.
    #[test]
    fn a_lent_table_weighs_for_its_home() {
        let view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            // Server 1's two tables, one of them lent to 2 right now.
            owners: [(TableId(0), owner(1, 1)), (TableId(1), owner(2, 2))].into(),
            homes: [(TableId(1), ServerId(1))].into(),
            borrows: vec![(ServerId(2), [TableId(1)].into())],
            rates: [(TableId(0), 100), (TableId(1), 100)].into(),
            ..Default::default()
        };
        let w = weights(&view, view.members.iter().copied());
        assert!(w[&ServerId(1)] > 0 && w[&ServerId(2)] == 0, "{w:?}");
    }
}
