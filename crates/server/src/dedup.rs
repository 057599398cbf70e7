//! Exactly-once: the replies of recent mutations, per client.
//!
//! A client numbers its mutations (`seq`, increasing) under a random
//! `client_id`. The first request for a (client, seq) creates a cell and
//! runs; a retry of it finds the cell and waits for (or returns) the same
//! reply, so the mutation runs once however often it is sent.
//!
//! Bounds: each client keeps its last `window` sequence numbers (oldest
//! dropped first); a request for a number below the dropped ones cannot be
//! told apart from a retry of something already run, so it is refused with
//! `ESTALE` and never run. At most `max_clients` clients are remembered;
//! the least recently active one is forgotten first, leaving a tombstone
//! (the highest seq it ever began): when it comes back, anything at or
//! below that is refused with `ESTALE` — it may have run — and only newer
//! numbers run. Tombstones are 16 bytes; at most `16 × max_clients` are
//! kept (oldest dropped first).
//!
//! Each remembered request keeps a digest of its operation and
//! credentials: a (client, seq) reused for a different request (two
//! clients sharing an id, a restarted client reusing numbers) gets
//! `EINVAL` instead of another request's reply.
//!
//! The table lives in memory: a retry that reaches a *restarted* server
//! runs again (see the crate docs).

use sextant_proto::pb;
use sextant_types::FsError;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// The reply of one mutation, filled in once.
pub type ReplyCell = Arc<OnceCell<pb::Response>>;

struct ClientWindow {
    /// seq → (request digest, reply)
    replies: BTreeMap<u64, (u64, ReplyCell)>,
    /// Every seq below this was dropped from the window.
    floor: u64,
    last_used: u64,
}

impl ClientWindow {
    fn highest_seq(&self) -> u64 {
        self.replies
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
            .max(self.floor.saturating_sub(1))
    }
}

pub struct Dedup {
    clients: HashMap<u64, ClientWindow>,
    /// last_used → client, to find the least recently active in O(log n).
    by_use: BTreeMap<u64, u64>,
    /// Forgotten clients: id → highest seq they began (see module docs).
    tombstones: HashMap<u64, u64>,
    tombstone_order: VecDeque<u64>,
    tick: u64,
    window: usize,
    max_clients: usize,
}

impl Dedup {
    pub fn new(window: usize, max_clients: usize) -> Dedup {
        Dedup {
            clients: HashMap::new(),
            by_use: BTreeMap::new(),
            tombstones: HashMap::new(),
            tombstone_order: VecDeque::new(),
            tick: 0,
            window: window.max(1),
            max_clients: max_clients.max(1),
        }
    }

    /// The cell for (client, seq): a fresh one if this is the first time,
    /// the existing one for a retry of the same request (`digest`),
    /// `EINVAL` for a different request under the same numbers, `ESTALE`
    /// when it fell out of the window.
    pub fn begin(
        &mut self,
        client: u64,
        seq: u64,
        digest: u64,
    ) -> Result<(ReplyCell, bool), FsError> {
        self.tick += 1;
        if !self.clients.contains_key(&client) && self.clients.len() >= self.max_clients {
            self.forget_least_recent();
        }
        let tombstone = self.tombstones.remove(&client);
        let w = self.clients.entry(client).or_insert_with(|| ClientWindow {
            replies: BTreeMap::new(),
            // A returning forgotten client: what it began before may have
            // run, so those numbers are refused.
            floor: tombstone.map_or(0, |t| t + 1),
            last_used: 0,
        });
        self.by_use.remove(&w.last_used);
        w.last_used = self.tick;
        self.by_use.insert(self.tick, client);
        if let Some((known, cell)) = w.replies.get(&seq) {
            if *known != digest {
                return Err(FsError::Invalid);
            }
            return Ok((Arc::clone(cell), true));
        }
        if seq < w.floor {
            return Err(FsError::Stale);
        }
        let cell: ReplyCell = Arc::new(OnceCell::new());
        w.replies.insert(seq, (digest, Arc::clone(&cell)));
        while w.replies.len() > self.window {
            if let Some((dropped, _)) = w.replies.pop_first() {
                w.floor = w.floor.max(dropped + 1);
            }
        }
        Ok((cell, false))
    }

    fn forget_least_recent(&mut self) {
        let Some((_, oldest)) = self.by_use.pop_first() else {
            return;
        };
        if let Some(w) = self.clients.remove(&oldest) {
            self.tombstones.insert(oldest, w.highest_seq());
            self.tombstone_order.push_back(oldest);
            while self.tombstone_order.len() > 16 * self.max_clients {
                if let Some(old) = self.tombstone_order.pop_front() {
                    self.tombstones.remove(&old);
                }
            }
        }
    }

    pub fn clients(&self) -> usize {
        self.clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_finds_the_same_cell() {
        let mut d = Dedup::new(4, 2);
        let (a, retry) = d.begin(1, 10, 0).unwrap();
        assert!(!retry);
        let (b, retry) = d.begin(1, 10, 0).unwrap();
        assert!(retry && Arc::ptr_eq(&a, &b));
        let (c, retry) = d.begin(2, 10, 0).unwrap();
        assert!(!retry && !Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn window_drops_oldest_and_refuses_below_it() {
        let mut d = Dedup::new(4, 2);
        for seq in 1..=6 {
            d.begin(1, seq, 0).unwrap();
        }
        // 1 and 2 were dropped: a retry of them must not run again.
        assert_eq!(d.begin(1, 1, 0).err(), Some(FsError::Stale));
        assert_eq!(d.begin(1, 2, 0).err(), Some(FsError::Stale));
        assert!(d.begin(1, 3, 0).unwrap().1, "3 is still remembered");
        assert!(!d.begin(1, 7, 0).unwrap().1);
    }

    #[test]
    fn least_recently_used_client_is_forgotten() {
        let mut d = Dedup::new(4, 2);
        d.begin(1, 1, 0).unwrap();
        d.begin(2, 1, 0).unwrap();
        d.begin(1, 2, 0).unwrap(); // client 1 is now the more recent
        d.begin(3, 1, 0).unwrap(); // evicts client 2
        assert_eq!(d.clients(), 2);
        assert!(d.begin(1, 1, 0).unwrap().1);
        // Client 2 was forgotten: its old number may have run, so it is
        // refused rather than run again; newer numbers run.
        assert_eq!(d.begin(2, 1, 0).err(), Some(FsError::Stale));
        assert!(!d.begin(2, 2, 0).unwrap().1);
    }

    /// Found in review: a (client, seq) reused for a different request got
    /// the first request's reply and the second never ran.
    #[test]
    fn a_different_request_under_the_same_numbers_is_refused() {
        let mut d = Dedup::new(4, 2);
        d.begin(1, 5, 111).unwrap();
        assert!(d.begin(1, 5, 111).unwrap().1, "a true retry");
        assert_eq!(d.begin(1, 5, 222).err(), Some(FsError::Invalid));
    }
}
