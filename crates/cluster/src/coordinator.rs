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
//!    1065). (A table
//!    whose owner is alive moves only by its owner's acknowledged DROP:
//!    rule 3 asks for one. A move is never cancelled: an owner that
//!    started dropping must not serve again before it knows its
//!    handover's outcome; a handover to a server that died meanwhile is
//!    then reassigned by this rule.)
//! 3. Balance, with hysteresis: a table weighs 1 plus its request rate
//!    (operations per second, as its owner last published it; 0 when
//!    unknown), a server the sum of its tables. When the heaviest member
//!    outweighs the lightest by at least `spread` (and, once rates are
//!    known, by at least a quarter of its own weight, so noise in the
//!    rates moves nothing), one move is asked for (one at a time): the
//!    heaviest server's table whose weight is closest to half the
//!    difference, among those weighing at most three quarters of it (each
//!    move at least halves the difference, so moves never undo each
//!    other), the one in place longest first (lowest owner revision: a
//!    table an operation just pulled somewhere is the last to go). A new,
//!    empty server so receives tables, and a draining one gives all of
//!    its away. Without rates this is balancing by table count. A server
//!    that recently pulled a table for an operation (`quiet`) gives
//!    nothing away for balance: its operations need those tables together.

use crate::ids::{Epoch, Revision, ServerId, TableId};
use crate::server::Owner;
use std::collections::{BTreeMap, BTreeSet};

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
    /// Servers that recently pulled a table for an operation that needed
    /// it (until BORROW/RETURN): the balancer takes nothing from them, or
    /// it would separate again what their operations keep together.
    pub quiet: BTreeSet<ServerId>,
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
        /// still be absent — a server that joined again meanwhile (and may
        /// have loaded the table under the old assignment) keeps it.
        gone: Option<ServerId>,
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
}

/// The writes that bring `view` where it should be.
pub fn decide(view: &ClusterView, spread: usize) -> Vec<Action> {
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
            Some((o, rev)) if !view.members.contains(&o.server) => (
                *rev,
                Some(o.server),
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
    if view.moves.is_empty() && actions.is_empty() {
        if let Some(a) = balance(view, &load, spread) {
            actions.push(a);
        }
    }
    actions
}

/// One move from the busiest server (a draining one first) to the idlest.
fn balance(view: &ClusterView, load: &BTreeMap<ServerId, usize>, spread: usize) -> Option<Action> {
    let to = load
        .iter()
        .min_by_key(|(s, n)| (**n, **s))
        .map(|(s, _)| *s)?;
    let owned = |s: ServerId| {
        view.owners
            .iter()
            .filter_map(move |(t, o)| o.filter(|(o, _)| o.server == s).map(|(_, rev)| (*t, rev)))
    };
    for d in &view.draining {
        if let Some((table, expect)) = owned(*d).next() {
            return Some(Action::Move {
                table,
                expect,
                to,
                reason: "its server is draining",
            });
        }
    }
    let weight = |t: &TableId| 1 + view.rates.get(t).copied().unwrap_or(0);
    let mut weights: BTreeMap<ServerId, u64> = load.keys().map(|s| (*s, 0)).collect();
    for (t, o) in &view.owners {
        if let Some(w) = o.and_then(|(o, _)| weights.get_mut(&o.server)) {
            *w += weight(t);
        }
    }
    let (to, light) = weights.iter().min_by_key(|(s, w)| (**w, **s))?;
    let (from, heavy) = weights
        .iter()
        .filter(|(s, _)| !view.quiet.contains(s))
        .max_by_key(|(s, w)| (**w, std::cmp::Reverse(**s)))?;
    let diff = heavy.saturating_sub(*light);
    if diff < spread.max(2) as u64 {
        return None;
    }
    let rated = view.rates.values().any(|r| *r > 0);
    if rated && diff * 4 < *heavy {
        return None;
    }
    let (table, expect) = owned(*from)
        .filter(|(t, _)| weight(t) * 4 <= diff * 3)
        .min_by_key(|(t, rev)| ((weight(t) * 2).abs_diff(diff), *rev, *t))?;
    Some(Action::Move {
        table,
        expect,
        to: *to,
        reason: if rated {
            "balancing: its server carries more requests"
        } else {
            "balancing: its server holds more tables"
        },
    })
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
            ..Default::default()
        };
        assert!(decide(&view, 2).is_empty());
        view.members.remove(&ServerId(1));
        assert_eq!(
            decide(&view, 2),
            vec![Action::Assign {
                table: TableId(0),
                expect: Revision(30),
                gone: Some(ServerId(1)),
                owner: Owner {
                    server: ServerId(2),
                    epoch: Epoch(4)
                },
                reason: "its owner's lease is gone",
            }]
        );
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

    #[test]
    fn a_server_that_pulled_a_table_keeps_its_tables() {
        let mut view = ClusterView {
            members: [ServerId(1), ServerId(2)].into(),
            ..rated(&[(0, 1), (1, 1), (2, 1)], &[])
        };
        assert!(moved(&decide(&view, 2)).is_some(), "3 vs 0 balances");
        view.quiet.insert(ServerId(1));
        assert_eq!(moved(&decide(&view, 2)), None);
        // Draining still empties it.
        view.draining.insert(ServerId(1));
        assert!(moved(&decide(&view, 2)).is_some());
    }
}
