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
//! 3. Balance, with hysteresis: when the busiest member holds at least
//!    `spread` more tables than the idlest, one move is asked for (one at
//!    a time); a new, empty server so receives tables, and a draining
//!    one gives all of its away.
//!
//! Load is counted in tables here; the real balancer weighs request rate
//! and inodes the same way (a number per server).

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
    let (from, n) = load
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))?;
    if n.saturating_sub(load[&to]) < spread.max(2) {
        return None;
    }
    // The table that has been in place longest (lowest owner revision):
    // one just moved — a table an operation pulled to its server, or the
    // last balancing move — is the last to go again (hysteresis).
    let (table, expect) = owned(*from).min_by_key(|(t, rev)| (*rev, *t))?;
    Some(Action::Move {
        table,
        expect,
        to,
        reason: "balancing: its server holds more tables",
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
}
