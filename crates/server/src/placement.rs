//! Placement: which SOIDs this server serves, checked before a request
//! runs, and the route map it hands clients (`Map`).
//!
//! A single server serves everything ([`Everything`]). In a cluster the
//! delegation map decides; the cluster shell implements [`Placement`] over
//! its cached view of it. A request whose routing SOID
//! (`Op::route_soid`) this server does not serve gets WRONG_SERVER and is
//! not run (and not remembered for exactly-once: its retry belongs to the
//! owner). This check routes clients; it is not the fence — the engine
//! refuses tables it does not own, and acknowledgements are fenced by the
//! lease (DESIGN.md R1–R3).

use sextant_proto::pb;
use sextant_proto::route::{route_to_pb, RouteTable};
use sextant_proto::soid_to_pb;
use sextant_types::Soid;

/// Which SOIDs this server serves, and the map clients route by.
pub trait Placement: Send + Sync + std::fmt::Debug + 'static {
    /// `Ok` when this server serves `soid` now; else WRONG_SERVER with what
    /// it knows of the owner.
    fn check(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>>;
    /// R1 (DESIGN.md): may an operation on `soid` that ran here be
    /// acknowledged now? Asked once it is durable, right before the reply.
    /// A single server always may.
    fn may_ack(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        self.check(soid)
    }
    /// The route map for clients.
    fn map(&self) -> pb::RouteMap;
    /// [`Placement::map`] with each run of adjacent routes of one server
    /// as one route (`MapRequest.merged`; [`RouteTable::merged`]).
    fn merged_map(&self) -> pb::RouteMap {
        let map = self.map();
        match RouteTable::from_pb(&map) {
            Ok(t) => t.merged().to_pb(),
            Err(_) => map,
        }
    }
    /// The revision of [`Placement::map`] (0: none kept), named in a
    /// WRONG_SERVER so that a client whose map is as new fetches none.
    fn revision(&self) -> u64 {
        0
    }
    /// The membership generation (see `Coordination::generation`): the
    /// exactly-once table answers only from replies made under the
    /// current one, or carried by the tables (`crate::dedup`). A single
    /// server: always 0.
    fn generation(&self) -> u64 {
        0
    }
    /// Whether [`Placement::borrow`] can ever bring a table here (a
    /// single server holds everything: no).
    fn can_borrow(&self) -> bool {
        false
    }
    /// An operation here needs the tables holding `soids` together, and
    /// another server holds some: BORROW them (moves through the
    /// coordinator) and say whether they now all serve here. A single
    /// server holds everything: `false`.
    fn borrow<'a>(
        &'a self,
        soids: &'a [Soid],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        let _ = soids;
        Box::pin(std::future::ready(false))
    }
    /// An operation that borrowed tables ([`Placement::borrow`]) ended:
    /// its borrow may be due to go home now rather than at the next look.
    fn borrowed_op_done(&self) {}
}

/// A single server: every SOID is here. Its map is one route to
/// `address` (the address it listens on, as clients reach it).
#[derive(Debug)]
pub struct Everything {
    pub name: String,
    pub address: String,
}

impl Placement for Everything {
    fn check(&self, _: Soid) -> Result<(), Box<pb::WrongServer>> {
        Ok(())
    }

    fn map(&self) -> pb::RouteMap {
        RouteTable::whole(&self.name, &self.address).to_pb()
    }

    fn merged_map(&self) -> pb::RouteMap {
        self.map()
    }
}

/// A fixed map, this server being `me` in it: it serves the routes that
/// name it. For tests of routing, and the shape the cluster shell's
/// placement takes over its live view of the delegation map.
#[derive(Debug)]
pub struct Fixed {
    pub me: String,
    pub table: RouteTable,
}

impl Placement for Fixed {
    fn check(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        match self.table.route(soid) {
            Some(r) if r.server == self.me => Ok(()),
            hint => Err(Box::new(pb::WrongServer {
                soid: Some(soid_to_pb(soid)),
                hint: hint.map(route_to_pb),
                revision: self.table.revision(),
                ran: false,
            })),
        }
    }

    fn map(&self) -> pb::RouteMap {
        self.table.to_pb()
    }

    fn revision(&self) -> u64 {
        self.table.revision()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_proto::route::Route;
    use sextant_types::SoidRange;

    #[test]
    fn fixed_serves_only_its_own_routes_and_hints_the_owner() {
        let s = Soid::from_u128;
        let route = |first, last, who: &str| Route {
            range: SoidRange {
                first: s(first),
                last: s(last),
            },
            table: first as u64,
            server: who.into(),
            address: format!("{who}:1"),
            epoch: 3,
        };
        let table = RouteTable::new(9, vec![route(0, 99, "a"), route(200, 299, "b")]).unwrap();
        let a = Fixed {
            me: "a".into(),
            table,
        };
        assert_eq!(a.check(s(5)), Ok(()));
        let wrong = a.check(s(250)).unwrap_err();
        assert_eq!(wrong.hint.map(|h| h.address), Some("b:1".to_string()));
        assert_eq!(wrong.revision, 9);
        // A gap: no owner known.
        assert_eq!(a.check(s(150)).unwrap_err().hint, None);
        assert_eq!(
            Everything {
                name: "x".into(),
                address: "x:1".into()
            }
            .check(s(250)),
            Ok(())
        );
    }
}
