//! Directory paths remembered across searches.
//!
//! Resolving a table's exits (`search::scope`) reads each directory on
//! their parent chains, one table lookup each: at 10M files a root search
//! by name reads 15 – 40 thousand directories, most of its time. A
//! directory's absolute path changes only when it or an ancestor is renamed
//! or removed, which is rare next to searches; so the paths the searches
//! resolve are kept here, tagged with the engine's *directory epoch*, which
//! every transaction that moves, removes or changes the mode of a
//! directory advances after its writes are applied and before it returns
//! ([`crate::txn`]).
//!
//! Invariant (freshness): every path held was read while the epoch had the
//! value the cache is tagged with. A search takes the epoch when it starts
//! ([`DirCache::begin`], which empties a cache of an older epoch) and
//! offers and looks up paths under that epoch only; an offer is refused
//! unless the engine's epoch still equals it. A directory moved or removed
//! by a transaction acknowledged before a search started has advanced the
//! epoch, so that search never sees the paths from before the move.
//! Searches running while a directory moves may see its old or new path,
//! as they may without the cache (the per-entry consistency of
//! [`crate::search`]).
//!
//! Each path comes with whether the directory and every ancestor is open
//! to all callers (r-x for owner, group and other): then any caller may
//! list it and everything above it, and its status relative to any scope
//! follows from its absolute path alone (`search::scope::relative`); for
//! root, every directory is so. Another caller's status under a directory
//! that is not open to all depends on who it is, and is read as without
//! the cache. Changing a directory's mode therefore advances the epoch too
//! (and its owner or group: other members keep those of the directories
//! they read from here to decide who may list them).
//!
//! On a member of a cluster, paths may run through directories other
//! members hold, which this epoch does not see change. Such paths are
//! remembered only by spread searches whose caller vouches for them
//! (`search::Spread::remembering`): the caller compares the other members'
//! epochs before each search and, when one moved, makes the engine forget
//! (`Engine::forget_remembered_dirs`). The cache is then tagged with the
//! sum of the two counters, so either advance empties it; the epoch other
//! members see stays that of this member's own directories.
//!
//! Bounded: at most [`MAX_ENTRIES`] paths (then offers are dropped until
//! the next epoch).
//!
//! Beside the paths, the *place* of each table's exits ([`ExitPlace`]):
//! the deepest directory all of them lie at or below, from their
//! remembered paths, keyed by the version of the table's exit set
//! ([`crate::table::exits::Exits::version`], which names one set of
//! directories). It holds as long as the paths it came from, so it is kept
//! under the same epoch; a search below a directory then skips a table
//! whose exits all lie elsewhere, or adds up the summary of one whose
//! exits all lie inside, with one comparison instead of one per exit.
//!
//! The engine holds the cache (its `dir_cache`, behind `Engine::dir_cache_*`
//! and the epoch it advances); searches fill it and read it. Pure data and
//! path arithmetic: it names neither the engine nor the search.

use crate::hash::SoidHasher;
use sextant_types::Soid;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

/// A directory's absolute path, and whether it and its ancestors are open
/// to all ([`crate::perm::open_to_all`]).
pub(crate) type Place = (Arc<[u8]>, bool);

/// Paths kept at most (~130 bytes each with a 100-byte path: ~34 MB).
pub(crate) const MAX_ENTRIES: usize = 1 << 18;

/// Exit places kept at most (one per table: far more than tables exist).
pub(crate) const MAX_PLACES: usize = 1 << 16;

#[derive(Default)]
pub(crate) struct DirCache {
    epoch: u64,
    /// Absolute path, and whether it and all its ancestors are open to
    /// all; with the path's number of components (its depth below `/`),
    /// so that a status relative to `/` needs no read of the path (each
    /// its own allocation: a cache miss).
    paths: HashMap<Soid, (Place, u32), BuildHasherDefault<SoidHasher>>,
    /// Bytes of the paths held.
    path_bytes: usize,
    /// Exit places by exit-set version.
    places: HashMap<u64, ExitPlace>,
}

/// Where the exits of one table lie: every one of them is `dir` or below
/// it (`dir` the deepest such directory); `all_open`: every exit and all
/// its ancestors are open to all. Pure: made from remembered places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExitPlace {
    dir: Arc<[u8]>,
    pub(crate) all_open: bool,
}

/// How a table's exits lie relative to a scope ([`ExitPlace::relation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    /// Every exit is the scope root or below it.
    AllIn,
    /// No exit is.
    AllOut,
    /// Some may be: each must be looked at.
    Mixed,
}

/// Whether absolute path `p` is `dir` or below it.
pub(crate) fn at_or_below(p: &[u8], dir: &[u8]) -> bool {
    dir == b"/" || (p.starts_with(dir) && (p.len() == dir.len() || p.get(dir.len()) == Some(&b'/')))
}

impl ExitPlace {
    /// The place of the exits at `places` (absolute path, whether it and
    /// its ancestors are open to all); `None` when there are none.
    pub(crate) fn of<'a>(places: impl IntoIterator<Item = &'a Place>) -> Option<ExitPlace> {
        let mut places = places.into_iter();
        let (first, mut all_open) = places.next()?;
        let mut dir: Arc<[u8]> = Arc::clone(first);
        for (p, open) in places {
            all_open &= open;
            if at_or_below(p, &dir) {
                continue;
            }
            if at_or_below(&dir, p) {
                dir = Arc::clone(p);
                continue;
            }
            // Neither below the other: cut at the last `/` of the common
            // prefix (both have one there, the root's at the latest).
            let common = dir.iter().zip(p.iter()).take_while(|(a, b)| a == b).count();
            let cut = dir[..common].iter().rposition(|&c| c == b'/').unwrap_or(0);
            dir = if cut == 0 {
                Arc::from(&b"/"[..])
            } else {
                Arc::from(&dir[..cut])
            };
        }
        Some(ExitPlace { dir, all_open })
    }

    /// How the exits lie relative to the scope root at absolute path
    /// `scope_path`. All out when neither `dir` nor the scope root is at or
    /// below the other: an exit below both would make them comparable.
    pub(crate) fn relation(&self, scope_path: &[u8]) -> Relation {
        if at_or_below(&self.dir, scope_path) {
            Relation::AllIn
        } else if at_or_below(scope_path, &self.dir) {
            Relation::Mixed
        } else {
            Relation::AllOut
        }
    }
}

impl DirCache {
    /// A search starts at directory epoch `current`: a cache of an older
    /// epoch is emptied and retagged.
    pub(crate) fn begin(&mut self, current: u64) {
        if self.epoch != current {
            self.paths = HashMap::default();
            self.path_bytes = 0;
            self.places = HashMap::default();
            self.epoch = current;
        }
    }

    /// The epoch the paths held were read at.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The absolute path of directory `d` and whether it and all its
    /// ancestors are open to all, with the path's number of components, if
    /// held at `epoch`.
    pub(crate) fn get(&self, epoch: u64, d: Soid) -> Option<(Place, u32)> {
        self.peek(epoch, d)
            .map(|(place, depth)| (place.clone(), depth))
    }

    /// [`Self::get`] by reference, with the path's number of components.
    pub(crate) fn peek(&self, epoch: u64, d: Soid) -> Option<(&Place, u32)> {
        if self.epoch != epoch {
            return None;
        }
        self.paths.get(&d).map(|(place, depth)| (place, *depth))
    }

    /// Keeps `paths`, read by a search that started at `epoch`, if the
    /// engine is still at that epoch (`current`) and the cache too.
    pub(crate) fn offer(
        &mut self,
        epoch: u64,
        current: u64,
        paths: impl IntoIterator<Item = (Soid, Arc<[u8]>, bool)>,
    ) {
        if self.epoch != epoch || current != epoch {
            return;
        }
        for (d, p, open) in paths {
            if self.paths.len() >= MAX_ENTRIES {
                return;
            }
            self.path_bytes += p.len();
            let depth = components(&p);
            if let Some(((old, _), _)) = self.paths.insert(d, ((p, open), depth)) {
                self.path_bytes -= old.len();
            }
        }
    }

    /// The place of the exits of version `version`, if held at `epoch`.
    pub(crate) fn place(&self, epoch: u64, version: u64) -> Option<&ExitPlace> {
        if self.epoch != epoch {
            return None;
        }
        self.places.get(&version)
    }

    /// Keeps `place` of the exits of version `version`, made from paths
    /// held at `epoch`, if the engine (`current`) and the cache are still
    /// at that epoch. At the bound every place is dropped first: versions
    /// of exit sets that have changed since are never asked for again, and
    /// the places still wanted are made again by the next searches.
    pub(crate) fn offer_place(&mut self, epoch: u64, current: u64, version: u64, place: ExitPlace) {
        if self.epoch != epoch || current != epoch {
            return;
        }
        if self.places.len() >= MAX_PLACES {
            self.places.clear();
        }
        self.places.insert(version, place);
    }

    pub(crate) fn len(&self) -> usize {
        self.paths.len()
    }

    /// Approximate heap bytes: the map's slots and the paths (with the
    /// shared allocation's two counters).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.paths.capacity() * (std::mem::size_of::<(Soid, (Place, u32))>() + 1)
            + self.path_bytes
            + self.paths.len() * 16
            + self.places.capacity() * (std::mem::size_of::<(u64, ExitPlace)>() + 1)
    }
}

/// Number of components of an absolute path (`/` has none).
pub(crate) fn components(path: &[u8]) -> u32 {
    if path == b"/" {
        0
    } else {
        path.iter().filter(|&&c| c == b'/').count() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Arc<[u8]> {
        s.as_bytes().into()
    }

    #[test]
    fn paths_are_kept_and_found_only_within_one_epoch() {
        let d = Soid::from_u128(7);
        let mut c = DirCache::default();
        c.begin(3);
        c.offer(3, 3, [(d, p("/a"), true)]);
        assert_eq!(c.get(3, d), Some(((p("/a"), true), 1)));
        // A search of another epoch finds nothing.
        assert_eq!(c.get(2, d), None);
        // An offer after the engine moved on is refused...
        c.offer(3, 4, [(Soid::from_u128(8), p("/b"), true)]);
        assert_eq!(c.len(), 1);
        // ... and so is one from a search that started earlier.
        c.offer(2, 2, [(Soid::from_u128(8), p("/b"), true)]);
        assert_eq!(c.len(), 1);
        // The next search at a newer epoch starts empty.
        c.begin(4);
        assert_eq!(c.get(4, d), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn exit_places_and_their_relation_to_scopes() {
        let place = |ps: &[&str]| {
            let ps: Vec<(Arc<[u8]>, bool)> = ps.iter().map(|s| (p(s), true)).collect();
            ExitPlace::of(&ps).map(|e| String::from_utf8(e.dir.to_vec()).unwrap())
        };
        assert_eq!(place(&[]), None);
        assert_eq!(place(&["/a/b"]).as_deref(), Some("/a/b"));
        assert_eq!(place(&["/a/b", "/a/b/c"]).as_deref(), Some("/a/b"));
        assert_eq!(place(&["/a/b/c", "/a/b"]).as_deref(), Some("/a/b"));
        assert_eq!(place(&["/a/bc", "/a/bd"]).as_deref(), Some("/a"));
        assert_eq!(place(&["/a/b", "/a/bc"]).as_deref(), Some("/a"));
        assert_eq!(place(&["/ab", "/a"]).as_deref(), Some("/"));
        assert_eq!(place(&["/a", "/b"]).as_deref(), Some("/"));
        assert_eq!(place(&["/a", "/"]).as_deref(), Some("/"));
        let rel = |ps: &[&str], scope: &str| {
            let ps: Vec<(Arc<[u8]>, bool)> = ps.iter().map(|s| (p(s), true)).collect();
            ExitPlace::of(&ps).unwrap().relation(scope.as_bytes())
        };
        // Open to all only if every exit is.
        let opens = [(p("/a"), true), (p("/b"), false)];
        assert!(!ExitPlace::of(&opens).unwrap().all_open);
        assert!(ExitPlace::of(&opens[..1]).unwrap().all_open);
        assert_eq!(rel(&["/a/b", "/a/c"], "/a"), Relation::AllIn);
        assert_eq!(rel(&["/a/b", "/a/c"], "/"), Relation::AllIn);
        assert_eq!(rel(&["/a/b", "/a/c"], "/a/b"), Relation::Mixed);
        assert_eq!(rel(&["/a/b", "/a/c"], "/ab"), Relation::AllOut);
        assert_eq!(rel(&["/a/b", "/a/c"], "/x"), Relation::AllOut);
        assert_eq!(rel(&["/a"], "/a"), Relation::AllIn);
    }

    proptest::proptest! {
        /// Against brute force over paths of a small alphabet (so that
        /// names share prefixes): the place is the deepest directory every
        /// path is at or below, and a relation of `AllIn` or `AllOut`
        /// holds for every path.
        #[test]
        fn exit_places_agree_with_brute_force(
            paths in proptest::collection::vec(proptest::collection::vec("[ab]{1,2}", 0..4), 1..6),
            scope in proptest::collection::vec("[ab]{1,2}", 0..4),
        ) {
            let abs = |names: &Vec<String>| -> Arc<[u8]> {
                if names.is_empty() { p("/") } else { p(&format!("/{}", names.join("/"))) }
            };
            let ps: Vec<Arc<[u8]>> = paths.iter().map(abs).collect();
            let with_open: Vec<(Arc<[u8]>, bool)> = ps.iter().map(|q| (q.clone(), true)).collect();
            let place = ExitPlace::of(&with_open).unwrap();
            // Every path at or below the place, and no child of the place
            // (a longer prefix of components) has them all.
            let comps = |a: &Arc<[u8]>| -> Vec<Vec<u8>> {
                a.split(|&c| c == b'/').filter(|c| !c.is_empty()).map(<[u8]>::to_vec).collect()
            };
            let lca = ps.iter().map(comps).reduce(|a, b| {
                a.iter().zip(b.iter()).take_while(|(x, y)| x == y).map(|(x, _)| x.clone()).collect()
            }).unwrap();
            proptest::prop_assert_eq!(comps(&place.dir), lca);
            let scope = abs(&scope);
            let inside: Vec<bool> = ps.iter().map(|q| at_or_below(q, &scope)).collect();
            match place.relation(&scope) {
                Relation::AllIn => proptest::prop_assert!(inside.iter().all(|&x| x)),
                Relation::AllOut => proptest::prop_assert!(inside.iter().all(|&x| !x)),
                Relation::Mixed => {}
            }
        }
    }

    #[test]
    fn places_are_kept_per_epoch_and_start_over_at_the_bound() {
        let mut c = DirCache::default();
        c.begin(1);
        let place = ExitPlace::of(&[(p("/a"), true)]).unwrap();
        c.offer_place(1, 1, 7, place.clone());
        assert_eq!(c.place(1, 7), Some(&place));
        assert_eq!(c.place(2, 7), None);
        // Refused once the engine moved on.
        c.offer_place(1, 2, 8, place.clone());
        assert_eq!(c.place(1, 8), None);
        // Version 7 and MAX_PLACES − 1 more: full.
        for v in 100..100 + MAX_PLACES as u64 - 1 {
            c.offer_place(1, 1, v, place.clone());
        }
        assert_eq!(c.places.len(), MAX_PLACES);
        // One more: the old ones go, the new one stays.
        c.offer_place(1, 1, 1, place.clone());
        assert_eq!(c.places.len(), 1);
        assert_eq!(c.place(1, 1), Some(&place));
        // A new epoch starts with none.
        c.begin(2);
        assert_eq!(c.place(2, 1), None);
    }

    #[test]
    fn offers_stop_at_the_bound() {
        let mut c = DirCache::default();
        c.begin(1);
        c.offer(
            1,
            1,
            (0..MAX_ENTRIES as u128 + 10).map(|i| (Soid::from_u128(i), p("/x"), false)),
        );
        assert_eq!(c.len(), MAX_ENTRIES);
    }
}
