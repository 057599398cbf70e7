//! Routing a request to the server that serves it (a cluster), and the
//! links to those servers.
//!
//! A client starts with one link, to the server it was given (*home*),
//! and no map: everything goes home, which is all a single server ever
//! needs. The first WRONG_SERVER reply makes it fetch the route map
//! (`Map`) from the server that answered; from then on each request goes
//! to the server whose route covers its routing SOID
//! (`Op::route_soid`), over a link opened on first use. Every further
//! WRONG_SERVER fetches the map again. A map replaces the cached one only
//! if its revision is not lower (maps from different servers can race).
//!
//! Invariants:
//! - at most one link per address, kept for the client's life (a cluster
//!   has few servers);
//! - a request whose SOID no route covers (a table between owners, or no
//!   map yet) goes home;
//! - map fetches of a client and its siblings run one at a time
//!   ([`MapFetches`]); a caller that waited while a fetch begun after it
//!   asked succeeded, or whose refusal named a revision the map now held
//!   has reached, routes by that map instead of fetching again, so
//!   hundreds of requests refused by one move cost one `Map` call (each is
//!   ~60 B per table: 125 kB at 2,000 tables), not one each.

use crate::target::{Target, Tls};
use crate::Conn;
use parking_lot::{Mutex, RwLock};
use sextant_proto::route::RouteTable;
use sextant_types::Soid;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::transport::Channel;

/// One server this client talks to: its session and a channel for unary
/// calls (`Map`).
pub(crate) struct Link {
    pub(crate) addr: String,
    pub(crate) target: Target,
    pub(crate) conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    unary: Mutex<Option<Channel>>,
}

impl Link {
    pub(crate) fn new(addr: String, target: Target) -> Link {
        Link {
            addr,
            target,
            conn: tokio::sync::Mutex::new(None),
            unary: Mutex::new(None),
        }
    }

    /// A channel for unary calls, connected lazily.
    pub(crate) fn channel(&self) -> Channel {
        self.unary
            .lock()
            .get_or_insert_with(|| self.target.connect_lazy())
            .clone()
    }
}

/// The cached route map and the links to the servers it names.
#[derive(Default)]
pub(crate) struct Router {
    /// Shared with the client's siblings (each has its own links: a link
    /// holds a session, and a sibling's sessions are its own).
    map: Arc<RwLock<Option<Arc<RouteTable>>>>,
    links: Mutex<HashMap<String, Arc<Link>>>,
    /// Every server address a map has named (shared like the map): when
    /// the servers of the current map do not answer — all its tables were
    /// on one server that died — the others may know the new owners.
    known: Arc<Mutex<Vec<String>>>,
    /// The last map the home server handed out, and when
    /// ([`Router::recent_map`]).
    recent: Mutex<Option<(std::time::Instant, Arc<RouteTable>)>>,
    /// Map fetches in turn (shared like the map).
    pub(crate) fetches: Arc<MapFetches>,
}

/// Map fetches one at a time, and whether a waiter still needs its own.
///
/// `begun` counts fetches begun; it only changes under `turn`, so a caller
/// that saw `begun == n` before it queued and finds `begun > n` once its
/// turn comes knows that a fetch begun after it asked has ended — its map
/// is as new as the server's state when the caller was refused, or newer
/// (from that server; another server's may lag a little, which costs one
/// more refusal and fetch, never a wrong route: every server checks its own
/// tables). `turn` holds whether the last fetch succeeded: after a failure
/// each waiter tries for itself.
#[derive(Default)]
pub(crate) struct MapFetches {
    begun: std::sync::atomic::AtomicU64,
    turn: tokio::sync::Mutex<bool>,
}

/// What [`MapFetches::turn`] decided.
pub(crate) enum Turn<'a> {
    /// A fetch begun after the caller asked succeeded: route by it.
    Fetched,
    /// The caller fetches; it reports the outcome by [`Fetching::done`].
    Fetch(Fetching<'a>),
}

/// The turn of a caller that fetches (the others wait until it is done).
pub(crate) struct Fetching<'a> {
    last_ok: tokio::sync::MutexGuard<'a, bool>,
}

impl Fetching<'_> {
    /// Records whether the fetch succeeded, and ends the turn.
    pub(crate) fn done(mut self, ok: bool) {
        *self.last_ok = ok;
    }
}

impl MapFetches {
    /// Waits for this caller's turn to fetch a map. `enough` says, once
    /// it is the caller's turn, whether the map held now already serves it
    /// (one at least as new as the revision its refusal named).
    pub(crate) async fn turn(&self, enough: impl FnOnce() -> bool) -> Turn<'_> {
        use std::sync::atomic::Ordering;
        let asked = self.begun.load(Ordering::Acquire);
        let last_ok = self.turn.lock().await;
        if (*last_ok && self.begun.load(Ordering::Acquire) != asked) || enough() {
            return Turn::Fetched;
        }
        self.begun.fetch_add(1, Ordering::AcqRel);
        Turn::Fetch(Fetching { last_ok })
    }

    /// Fetches begun (tests, metrics).
    pub(crate) fn begun(&self) -> u64 {
        self.begun.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Router {
    /// Notes `map`, just handed out by the home server.
    pub(crate) fn note_home_map(&self, map: Arc<RouteTable>) {
        *self.recent.lock() = Some((std::time::Instant::now(), map));
    }

    /// The last map the home server handed out, if that was within
    /// `within`.
    pub(crate) fn recent_map(&self, within: std::time::Duration) -> Option<Arc<RouteTable>> {
        let recent = self.recent.lock();
        let (at, map) = recent.as_ref()?;
        (at.elapsed() <= within).then(|| Arc::clone(map))
    }

    /// A router with no links that shares this one's map.
    pub(crate) fn sharing_map(&self) -> Router {
        Router {
            map: Arc::clone(&self.map),
            links: Mutex::default(),
            known: Arc::clone(&self.known),
            recent: Mutex::default(),
            fetches: Arc::clone(&self.fetches),
        }
    }

    /// The address serving `soid` by the cached map (`None`: home).
    pub(crate) fn address_for(&self, soid: Soid) -> Option<String> {
        let map = self.map.read();
        map.as_ref()?.route(soid).map(|r| r.address.clone())
    }

    /// Takes `table` unless the cached map is newer. True if taken.
    pub(crate) fn adopt(&self, table: Arc<RouteTable>) -> bool {
        let mut map = self.map.write();
        if map
            .as_ref()
            .is_some_and(|m| m.revision() > table.revision())
        {
            return false;
        }
        {
            let mut known = self.known.lock();
            for a in table.addresses() {
                if !known.iter().any(|k| k == a) {
                    known.push(a.to_string());
                }
            }
        }
        *map = Some(table);
        true
    }

    /// Every server address any adopted map named, oldest first.
    pub(crate) fn known(&self) -> Vec<String> {
        self.known.lock().clone()
    }

    /// The cached map, if any.
    pub(crate) fn map(&self) -> Option<Arc<RouteTable>> {
        self.map.read().clone()
    }

    /// The link to `addr`, made on first use with the client's TLS
    /// settings (`tls_ca`, and `tls_domain` or the address's host).
    pub(crate) fn link(
        &self,
        addr: &str,
        connect_timeout: std::time::Duration,
        tls_ca: Option<&[u8]>,
        tls_domain: Option<&str>,
    ) -> Result<Arc<Link>, String> {
        let mut links = self.links.lock();
        if let Some(l) = links.get(addr) {
            return Ok(Arc::clone(l));
        }
        let tls = tls_ca.map(|ca| Tls {
            ca,
            domain: tls_domain.map_or_else(|| crate::host_of(addr), str::to_string),
        });
        let link = Arc::new(Link::new(
            addr.to_string(),
            Target::new(addr, connect_timeout, tls)?,
        ));
        links.insert(addr.to_string(), Arc::clone(&link));
        Ok(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_proto::route::Route;
    use sextant_types::SoidRange;

    fn table(revision: u64, split: u128) -> Arc<RouteTable> {
        let s = Soid::from_u128;
        let route = |first, last, addr: &str| Route {
            range: SoidRange {
                first: s(first),
                last: s(last),
            },
            table: first as u64,
            server: addr.into(),
            address: addr.into(),
            epoch: 1,
        };
        Arc::new(
            RouteTable::new(
                revision,
                vec![route(0, split, "a:1"), route(split + 1, u128::MAX, "b:1")],
            )
            .unwrap(),
        )
    }

    #[test]
    fn routes_by_the_newest_map_and_goes_home_without_one() {
        let r = Router::default();
        assert_eq!(r.address_for(Soid::from_u128(5)), None);
        assert!(r.adopt(table(2, 10)));
        assert_eq!(r.address_for(Soid::from_u128(5)).as_deref(), Some("a:1"));
        assert_eq!(r.address_for(Soid::from_u128(50)).as_deref(), Some("b:1"));
        // An older map (from a server that has not heard yet) is ignored.
        assert!(!r.adopt(table(1, 100)));
        assert_eq!(r.address_for(Soid::from_u128(50)).as_deref(), Some("b:1"));
        let sibling = r.sharing_map();
        assert!(r.adopt(table(3, 100)));
        assert_eq!(r.address_for(Soid::from_u128(50)).as_deref(), Some("a:1"));
        assert_eq!(
            sibling.address_for(Soid::from_u128(50)).as_deref(),
            Some("a:1")
        );
    }

    #[tokio::test]
    async fn one_link_per_address() {
        let r = Router::default();
        let t = std::time::Duration::from_secs(1);
        let a = r.link("127.0.0.1:1", t, None, None).unwrap();
        let b = r.link("127.0.0.1:1", t, None, None).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(r.link("unix:", t, None, None).is_err());
    }
}
