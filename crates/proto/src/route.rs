//! Routing: which server serves which SOID range (the delegation map as
//! clients see it), and which SOID a request is routed by.
//!
//! A [`RouteTable`] is what the `Map` RPC returns, validated: routes sorted
//! by their first SOID and never overlapping. Gaps are allowed (a table
//! between owners): a SOID in a gap has no route, and the client asks
//! again. Pure logic, no I/O, so the client's cache and the server's
//! placement check share it and it is tested exhaustively here.
//!
//! Invariants of a [`RouteTable`] (checked by [`RouteTable::new`], the only
//! way to build one):
//! - `routes[i].range.first <= routes[i].range.last`;
//! - `routes[i].range.last < routes[i + 1].range.first` (sorted, disjoint);
//! - every route names a non-empty address.

use crate::convert::{soid_from_pb, soid_to_pb};
use crate::pb;
use sextant_types::{Soid, SoidRange};

/// One table's route: its SOID range and the server serving it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub range: SoidRange,
    pub table: u64,
    /// The server's name (for people) and address (for clients).
    pub server: String,
    pub address: String,
    /// Grows every time the table changes hands.
    pub epoch: u64,
}

/// A malformed route map (from a server: a bug or a version mismatch).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("route {index} has no SOID range")]
    MissingRange { index: usize },
    #[error("route {index} has an inverted range")]
    Inverted { index: usize },
    #[error("route {index} overlaps or precedes the route before it")]
    Unsorted { index: usize },
    #[error("route {index} has no address")]
    NoAddress { index: usize },
}

/// A validated route map (see the module doc for its invariants).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTable {
    revision: u64,
    routes: Vec<Route>,
}

/// One server's share of a query split by the route map
/// ([`RouteTable::split`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    pub server: String,
    pub address: String,
    /// The parts of the ranges asked that its routes cover.
    pub ranges: Vec<SoidRange>,
}

/// A query's ranges split by the route map ([`RouteTable::split`]).
///
/// Invariant: the ranges of `shares` and `gaps` together are exactly the
/// ranges asked, each SOID in one of them once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "the gaps are to be asked again: dropped, their SOIDs go uncounted"]
pub struct Split {
    /// Each server with the parts its routes cover, in address order.
    pub shares: Vec<Share>,
    /// The parts no route covers (a table between owners, or whose owner
    /// left the cluster and is not yet replaced): no server is asked for
    /// them now; the asker asks again with a fresh map, like for the
    /// ranges a server did not hold.
    pub gaps: Vec<SoidRange>,
}

impl RouteTable {
    /// Checks the invariants.
    pub fn new(revision: u64, routes: Vec<Route>) -> Result<RouteTable, RouteError> {
        for (index, r) in routes.iter().enumerate() {
            if r.range.first > r.range.last {
                return Err(RouteError::Inverted { index });
            }
            if r.address.is_empty() {
                return Err(RouteError::NoAddress { index });
            }
            if index > 0 && routes[index - 1].range.last >= r.range.first {
                return Err(RouteError::Unsorted { index });
            }
        }
        Ok(RouteTable { revision, routes })
    }

    /// One server serving everything: a single server's map.
    pub fn whole(server: &str, address: &str) -> RouteTable {
        RouteTable {
            revision: 1,
            routes: vec![Route {
                range: SoidRange::ALL,
                table: 1,
                server: server.to_string(),
                address: address.to_string(),
                epoch: 1,
            }],
        }
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether this is a single server's map: one route covering
    /// everything, as [`RouteTable::whole`] makes it. A cluster's map never
    /// is, even when one server holds every table: its revision is etcd's,
    /// never 1 once a server registered. (Tables can move on a cluster, so
    /// a search there is spread by SOID ranges even when its map names one
    /// server: a table moving away during the search is then asked of its
    /// new holder instead of being skipped.)
    pub fn is_single_server(&self) -> bool {
        match self.routes.as_slice() {
            [r] => *self == RouteTable::whole(&r.server, &r.address),
            _ => false,
        }
    }

    /// `wanted` split by server: each server (by address, in address
    /// order) with the parts of `wanted` its routes cover, and the parts in
    /// gaps of the map (its table is between owners: the caller asks them
    /// again with a fresh map — dropped, a spread search would silently
    /// leave them out). Shared by the client's spread search and a server
    /// gathering one.
    pub fn split(&self, wanted: &[SoidRange]) -> Split {
        let mut by: std::collections::BTreeMap<&str, Share> = std::collections::BTreeMap::new();
        let mut gaps = Vec::new();
        for w in wanted {
            // The first SOID of `w` not yet given to a share or a gap
            // (`None`: past the end of the SOID space).
            let mut next = Some(w.first);
            for r in self.overlapping(*w) {
                let Some(part) = sextant_engine::search::intersection(&r.range, w) else {
                    continue;
                };
                if let Some(gap) = next.and_then(|n| SoidRange::new(n, part.first.checked_prev()?))
                {
                    gaps.push(gap);
                }
                next = part.last.checked_next();
                by.entry(&r.address)
                    .or_insert_with(|| Share {
                        server: r.server.clone(),
                        address: r.address.clone(),
                        ranges: Vec::new(),
                    })
                    .ranges
                    .push(part);
            }
            if let Some(gap) = next.and_then(|n| SoidRange::new(n, w.last)) {
                gaps.push(gap);
            }
        }
        Split {
            shares: by.into_values().collect(),
            gaps,
        }
    }

    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// The route covering `soid`, if any (binary search).
    pub fn route(&self, soid: Soid) -> Option<&Route> {
        let i = self.routes.partition_point(|r| r.range.last < soid);
        self.routes.get(i).filter(|r| r.range.contains(soid))
    }

    /// The routes overlapping `range`, in order.
    pub fn overlapping(&self, range: SoidRange) -> &[Route] {
        let start = self.routes.partition_point(|r| r.range.last < range.first);
        let end = self.routes.partition_point(|r| r.range.first <= range.last);
        &self.routes[start..end.max(start)]
    }

    /// The same map with each run of adjacent routes of one server (one
    /// ending right before the next begins, same server and address) as
    /// one route, keeping the first's `table` and `epoch`: every SOID is
    /// routed to the same address as by `self` (gaps stay gaps), in a map
    /// of a route per run of one server's tables rather than per table
    /// (`MapRequest.merged`).
    pub fn merged(&self) -> RouteTable {
        let mut routes: Vec<Route> = Vec::new();
        for r in &self.routes {
            match routes.last_mut() {
                Some(m)
                    if m.server == r.server
                        && m.address == r.address
                        && m.range.last.checked_next() == Some(r.range.first) =>
                {
                    m.range.last = r.range.last;
                }
                _ => routes.push(r.clone()),
            }
        }
        RouteTable {
            revision: self.revision,
            routes,
        }
    }

    /// The distinct addresses of all servers in the map, in route order.
    pub fn addresses(&self) -> Vec<&str> {
        let mut seen = Vec::new();
        for r in &self.routes {
            if !seen.contains(&r.address.as_str()) {
                seen.push(r.address.as_str());
            }
        }
        seen
    }

    pub fn to_pb(&self) -> pb::RouteMap {
        pb::RouteMap {
            revision: self.revision,
            routes: self.routes.iter().map(route_to_pb).collect(),
        }
    }

    pub fn from_pb(m: &pb::RouteMap) -> Result<RouteTable, RouteError> {
        let routes = m
            .routes
            .iter()
            .enumerate()
            .map(|(index, r)| route_from_pb(r).ok_or(RouteError::MissingRange { index }))
            .collect::<Result<Vec<_>, _>>()?;
        RouteTable::new(m.revision, routes)
    }
}

pub fn route_to_pb(r: &Route) -> pb::Route {
    pb::Route {
        first: Some(soid_to_pb(r.range.first)),
        last: Some(soid_to_pb(r.range.last)),
        table: r.table,
        server: r.server.clone(),
        address: r.address.clone(),
        epoch: r.epoch,
    }
}

/// `None` when a bound is missing (the range is checked by [`RouteTable::new`]).
pub fn route_from_pb(r: &pb::Route) -> Option<Route> {
    Some(Route {
        range: SoidRange {
            first: soid_from_pb(r.first.as_ref()).ok()?,
            last: soid_from_pb(r.last.as_ref()).ok()?,
        },
        table: r.table,
        server: r.server.clone(),
        address: r.address.clone(),
        epoch: r.epoch,
    })
}

impl pb::request::Op {
    /// The SOID this operation is routed by (see the protocol's "routing"):
    /// `None` for operations any server answers, and for a malformed
    /// request (its server then refuses it with EINVAL).
    pub fn route_soid(&self) -> Option<Soid> {
        use pb::request::Op::*;
        let s = match self {
            Lookup(r) => &r.parent,
            Getattr(r) => &r.soid,
            Readlink(r) => &r.soid,
            Readdir(r) => &r.dir,
            Getxattr(r) => &r.soid,
            Listxattr(r) => &r.soid,
            Access(r) => &r.soid,
            Create(r) => &r.parent,
            Mknod(r) => &r.parent,
            Mkdir(r) => &r.parent,
            Symlink(r) => &r.parent,
            Unlink(r) => &r.parent,
            Rmdir(r) => &r.parent,
            Rename(r) => &r.old_parent,
            Link(r) => &r.new_parent,
            Setattr(r) => &r.soid,
            Setxattr(r) => &r.soid,
            Removexattr(r) => &r.soid,
            // fsync's journal sync goes to the server of the file's table.
            Sync(r) if r.journal => &r.soid,
            Resolve(_) | Statfs(_) | Status(_) | Sync(_) => return None,
        };
        soid_from_pb(s.as_ref()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: u128) -> Soid {
        Soid::from_u128(v)
    }

    fn route(first: u128, last: u128, addr: &str) -> Route {
        Route {
            range: SoidRange {
                first: s(first),
                last: s(last),
            },
            table: first as u64,
            server: addr.into(),
            address: addr.into(),
            epoch: 1,
        }
    }

    /// Only [`RouteTable::whole`]'s map is a single server's: a cluster
    /// of one server holding one table that covers everything is not (its
    /// tables can move), nor is an empty map or one of several routes.
    #[test]
    fn only_a_whole_map_of_revision_one_is_a_single_server() {
        assert!(RouteTable::whole("one", "h:1").is_single_server());
        let all = RouteTable::new(7, vec![route(0, u128::MAX, "h:1")]).unwrap();
        assert!(!all.is_single_server());
        let two = RouteTable::new(1, vec![route(0, 9, "h:1"), route(10, u128::MAX, "h:1")]);
        assert!(!two.unwrap().is_single_server());
        assert!(!RouteTable::new(1, Vec::new()).unwrap().is_single_server());
    }

    /// A query's ranges split by server: each server's parts in route
    /// order, a gap of the map in no share, servers in address order.
    #[test]
    fn split_gives_each_server_the_parts_its_routes_cover() {
        let map = RouteTable::new(
            1,
            vec![route(0, 9, "b"), route(10, 19, "a"), route(30, 39, "b")],
        )
        .unwrap();
        let r = |first, last| SoidRange {
            first: s(first),
            last: s(last),
        };
        let split = map.split(&[r(5, 34), r(38, 50)]);
        let got: Vec<(&str, &[SoidRange])> = split
            .shares
            .iter()
            .map(|sh| (sh.address.as_str(), sh.ranges.as_slice()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", &[r(10, 19)][..]),
                ("b", &[r(5, 9), r(30, 34), r(38, 39)][..]),
            ]
        );
        // The gaps are given back to be asked again, not dropped.
        assert_eq!(split.gaps, vec![r(20, 29), r(40, 50)]);
        let gap = map.split(&[r(20, 29)]);
        assert!(gap.shares.is_empty(), "a gap: no share");
        assert_eq!(gap.gaps, vec![r(20, 29)]);
        // Gaps at both ends of the SOID space, and none.
        let all = map.split(&[SoidRange::ALL]);
        assert_eq!(
            all.gaps,
            vec![
                r(20, 29),
                SoidRange {
                    first: s(40),
                    last: Soid::MAX
                }
            ]
        );
        let whole = RouteTable::whole("a", "a");
        assert!(whole.split(&[SoidRange::ALL]).gaps.is_empty());
        let up = RouteTable::new(1, vec![route(5, u128::MAX, "a")]).unwrap();
        assert_eq!(up.split(&[SoidRange::ALL]).gaps, vec![r(0, 4)]);
    }

    proptest! {
        /// Shares and gaps together are exactly the ranges asked, each
        /// SOID once, whatever the map's gaps.
        #[test]
        fn split_covers_every_soid_asked_exactly_once(
            cuts in proptest::collection::btree_set(0u128..200, 0..12),
            held in proptest::collection::vec(any::<bool>(), 12),
            asked in proptest::collection::vec((0u128..220, 0u128..30), 1..4),
        ) {
            // Routes on the pieces between the cuts that `held` keeps.
            let mut bounds: Vec<u128> = vec![0];
            bounds.extend(cuts.iter().copied().filter(|c| *c > 0));
            bounds.push(220);
            let routes: Vec<Route> = bounds
                .windows(2)
                .enumerate()
                .filter(|(i, _)| held[*i % held.len()])
                .map(|(i, w)| route(w[0], w[1] - 1, if i % 2 == 0 { "a" } else { "b" }))
                .collect();
            let map = RouteTable::new(1, routes).unwrap();
            // Disjoint ranges asked (as a search's rounds ask).
            let mut wanted: Vec<SoidRange> = Vec::new();
            let mut from = 0u128;
            for (skip, len) in asked {
                let first = from + skip % 20;
                wanted.push(SoidRange { first: s(first), last: s(first + len) });
                from = first + len + 1;
            }
            let split = map.split(&wanted);
            let mut count = std::collections::BTreeMap::<u128, u32>::new();
            for r in split.shares.iter().flat_map(|sh| &sh.ranges).chain(&split.gaps) {
                for v in r.first.as_u128()..=r.last.as_u128() {
                    *count.entry(v).or_default() += 1;
                }
            }
            let mut want = std::collections::BTreeMap::<u128, u32>::new();
            for r in &wanted {
                for v in r.first.as_u128()..=r.last.as_u128() {
                    want.insert(v, 1);
                }
            }
            prop_assert_eq!(count, want);
            for g in &split.gaps {
                prop_assert!(map.overlapping(*g).is_empty(), "a gap {:?} with a route", g);
            }
        }
    }

    #[test]
    fn new_refuses_overlaps_inversions_and_empty_addresses() {
        assert_eq!(
            RouteTable::new(1, vec![route(0, 10, "a"), route(10, 20, "b")]),
            Err(RouteError::Unsorted { index: 1 })
        );
        assert_eq!(
            RouteTable::new(1, vec![route(11, 20, "b"), route(0, 10, "a")]),
            Err(RouteError::Unsorted { index: 1 })
        );
        assert_eq!(
            RouteTable::new(1, vec![route(5, 4, "a")]),
            Err(RouteError::Inverted { index: 0 })
        );
        assert_eq!(
            RouteTable::new(1, vec![route(0, 4, "")]),
            Err(RouteError::NoAddress { index: 0 })
        );
        assert!(RouteTable::new(1, vec![route(0, 10, "a"), route(11, 20, "b")]).is_ok());
    }

    #[test]
    fn from_pb_refuses_a_route_without_bounds() {
        let mut m = RouteTable::whole("a", "a:1").to_pb();
        m.routes[0].last = None;
        assert_eq!(
            RouteTable::from_pb(&m),
            Err(RouteError::MissingRange { index: 0 })
        );
    }

    #[test]
    fn whole_routes_everything_to_one_address() {
        let t = RouteTable::whole("one", "h:7411");
        for v in [0, 1, u64::MAX as u128, u128::MAX] {
            assert_eq!(t.route(s(v)).map(|r| r.address.as_str()), Some("h:7411"));
        }
        assert_eq!(t.addresses(), vec!["h:7411"]);
        assert_eq!(RouteTable::from_pb(&t.to_pb()), Ok(t));
    }

    fn tables() -> impl Strategy<Value = RouteTable> {
        // Sorted distinct cut points; every other interval is a gap.
        (
            prop::collection::btree_set(0u128..200, 0..12),
            prop::collection::vec(any::<bool>(), 12),
        )
            .prop_map(|(cuts, gaps)| {
                let cuts: Vec<u128> = cuts.into_iter().collect();
                let mut routes = Vec::new();
                for (i, w) in cuts.windows(2).enumerate() {
                    if !gaps[i] {
                        let addr = format!("s{}", i % 3);
                        routes.push(route(w[0], w[1] - 1, &addr));
                    }
                }
                RouteTable::new(7, routes).expect("built sorted")
            })
    }

    proptest! {
        /// `route` and `overlapping` agree with a linear scan.
        #[test]
        fn lookups_match_a_linear_scan(t in tables(), v in 0u128..210, w in 0u128..210) {
            let linear = t.routes().iter().find(|r| r.range.contains(s(v)));
            prop_assert_eq!(t.route(s(v)), linear);
            let q = SoidRange { first: s(v.min(w)), last: s(v.max(w)) };
            let linear: Vec<&Route> =
                t.routes().iter().filter(|r| r.range.overlaps(&q)).collect();
            let fast: Vec<&Route> = t.overlapping(q).iter().collect();
            prop_assert_eq!(fast, linear);
            prop_assert_eq!(RouteTable::from_pb(&t.to_pb()), Ok(t.clone()));
        }

        /// A merged map routes every SOID as the map it was made from,
        /// is a valid map, and has no two adjacent routes of one server
        /// left.
        #[test]
        fn a_merged_map_routes_as_the_whole_one(t in tables(), v in 0u128..210) {
            let m = t.merged();
            prop_assert_eq!(
                m.route(s(v)).map(|r| &r.address),
                t.route(s(v)).map(|r| &r.address)
            );
            prop_assert_eq!(m.revision(), t.revision());
            prop_assert_eq!(RouteTable::from_pb(&m.to_pb()), Ok(m.clone()));
            for w in m.routes().windows(2) {
                prop_assert!(
                    w[0].address != w[1].address
                        || w[0].range.last.checked_next() != Some(w[1].range.first)
                );
            }
            prop_assert_eq!(m.merged(), m.clone());
        }
    }

    #[test]
    fn merging_joins_adjacent_routes_of_one_server_only() {
        let t = RouteTable::new(
            3,
            vec![
                route(0, 9, "a"),
                route(10, 19, "a"),
                route(20, 29, "b"),
                route(30, 39, "a"),
                // a gap (a table between owners) stays one
                route(41, 50, "a"),
                route(51, u128::MAX, "a"),
            ],
        )
        .unwrap();
        let m = t.merged();
        let spans: Vec<(u128, u128, &str)> = m
            .routes()
            .iter()
            .map(|r| {
                (
                    r.range.first.as_u128(),
                    r.range.last.as_u128(),
                    r.address.as_str(),
                )
            })
            .collect();
        assert_eq!(
            spans,
            [
                (0, 19, "a"),
                (20, 29, "b"),
                (30, 39, "a"),
                (41, u128::MAX, "a")
            ]
        );
        assert_eq!(m.routes()[0].table, 0);
        assert_eq!(m.revision(), 3);
    }
}
