//! [`CarriedReplies`]: the replies of recent client mutations that touched
//! one table, kept with the table so they move with it. Pure logic, no I/O.
//!
//! Why: a server answers a retried mutation from its exactly-once table
//! (the server's `dedup`), which lives in its memory. In a cluster the
//! table a mutation touched can move to another server between the first
//! attempt and the retry (a planned move, a drain, a failover); the retry
//! then reaches a server that never saw the first attempt, and would run
//! it again (`EEXIST` for a create that happened, `ENOENT` for an unlink).
//! So the table carries the replies itself: a member engine notes every
//! tagged mutation in each table it touched, writes them into the
//! table's snapshot (the `SXTSNAP2` trailer), adds the tags of journal
//! records it replays at failover, and the next owner seeds its
//! exactly-once table from them before it serves the table.
//!
//! Per client the set keeps a *floor* (the highest `acked_below` seen —
//! every seq below was answered or abandoned and is never retried — or,
//! past the per-client cap, the seq above the oldest reply dropped) and
//! the replies at or above it.
//!
//! Bounds (a table's snapshot and memory stay small):
//! - replies below a client's floor are dropped (a well-behaved client
//!   keeps at most its in-flight limit, 512, above it);
//! - at most [`MAX_PER_CLIENT`] replies per client, the oldest dropped and
//!   the floor raised over them (their retries are refused, never run —
//!   as the server's own exactly-once table does past its hard cap);
//! - replies older than [`MAX_AGE_SECS`] are dropped (a client stops
//!   retrying long before: 30 s by default);
//! - at most [`MAX_CLIENTS`] clients, the one noted least recently
//!   dropped first.

use crate::requests::{Reply, RequestId, RequestTag};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most replies kept per client (see the module docs).
pub const MAX_PER_CLIENT: usize = 4_096;
/// Most clients kept per table.
pub const MAX_CLIENTS: usize = 1_024;
/// Replies older than this (seconds) are dropped.
pub const MAX_AGE_SECS: u64 = 3_600;

/// Wall-clock seconds now (0 if the clock is before 1970).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One remembered reply.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct CarriedReply {
    pub seq: u64,
    pub digest: u64,
    pub reply: Reply,
    /// Wall-clock seconds when it was noted.
    pub noted_at: u64,
}

/// One client's replies.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct CarriedClient {
    pub client: u64,
    /// Seqs below this are never retried, or were dropped by the cap.
    pub floor: u64,
    /// At or above `floor`, ascending by seq.
    pub replies: Vec<CarriedReply>,
}

/// The replies a table carries; see the module docs.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct CarriedReplies {
    clients: BTreeMap<u64, ClientState>,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct ClientState {
    floor: u64,
    replies: BTreeMap<u64, (u64, Reply, u64)>,
    /// Newest `noted_at` (for dropping the least recent client).
    last_noted: u64,
}

impl ClientState {
    fn raise_floor(&mut self, to: u64) {
        if to > self.floor {
            self.floor = to;
            self.replies = self.replies.split_off(&to);
        }
    }

    fn cap(&mut self) {
        while self.replies.len() > MAX_PER_CLIENT {
            if let Some((dropped, _)) = self.replies.pop_first() {
                self.floor = self.floor.max(dropped.saturating_add(1));
            }
        }
    }

    fn expire(&mut self, now: u64) {
        self.replies
            .retain(|_, (_, _, at)| now.saturating_sub(*at) <= MAX_AGE_SECS);
    }
}

impl CarriedReplies {
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Replies kept, over all clients.
    pub fn len(&self) -> usize {
        self.clients.values().map(|c| c.replies.len()).sum()
    }

    /// Notes a committed mutation's reply at wall-clock second `now`.
    pub fn note(&mut self, tag: &RequestTag, now: u64) {
        let id = tag.id;
        if id.client == 0 {
            return;
        }
        if !self.clients.contains_key(&id.client) && self.clients.len() >= MAX_CLIENTS {
            self.drop_least_recent();
        }
        let c = self.clients.entry(id.client).or_default();
        c.raise_floor(id.acked_below);
        c.expire(now);
        c.last_noted = c.last_noted.max(now);
        if id.seq >= c.floor {
            c.replies
                .insert(id.seq, (id.digest, tag.reply.clone(), now));
            c.cap();
        }
    }

    /// Drops replies older than [`MAX_AGE_SECS`] at `now`, and clients
    /// left with nothing to say (no replies: their floor only refuses
    /// seqs no retry can carry any more).
    pub fn expire(&mut self, now: u64) {
        for c in self.clients.values_mut() {
            c.expire(now);
        }
        self.clients.retain(|_, c| !c.replies.is_empty());
    }

    /// Adds everything `other` holds (a merge of two tables; a split
    /// gives each half a clone).
    pub fn absorb(&mut self, other: CarriedReplies) {
        for (client, o) in other.clients {
            let c = self.clients.entry(client).or_default();
            c.raise_floor(o.floor);
            c.last_noted = c.last_noted.max(o.last_noted);
            for (seq, v) in o.replies {
                if seq >= c.floor {
                    c.replies.insert(seq, v);
                }
            }
            c.cap();
        }
        while self.clients.len() > MAX_CLIENTS {
            self.drop_least_recent();
        }
    }

    fn drop_least_recent(&mut self) {
        let oldest = self
            .clients
            .iter()
            .min_by_key(|(id, c)| (c.last_noted, **id))
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.clients.remove(&id);
        }
    }

    /// Per client, the floor (seqs below it are refused by the next owner).
    pub fn floors(&self) -> Vec<(u64, u64)> {
        self.clients
            .iter()
            .filter(|(_, c)| c.floor > 0)
            .map(|(id, c)| (*id, c.floor))
            .collect()
    }

    /// The replies as request tags (their `acked_below` is the client's
    /// floor here).
    pub fn tags(&self) -> Vec<RequestTag> {
        let mut out = Vec::with_capacity(self.len());
        for (client, c) in &self.clients {
            for (seq, (digest, reply, _)) in &c.replies {
                out.push(RequestTag {
                    id: RequestId {
                        client: *client,
                        seq: *seq,
                        acked_below: c.floor,
                        digest: *digest,
                    },
                    reply: reply.clone(),
                });
            }
        }
        out
    }

    /// The encodable form (ascending by client, then seq).
    pub fn to_wire(&self) -> Vec<CarriedClient> {
        self.clients
            .iter()
            .map(|(id, c)| CarriedClient {
                client: *id,
                floor: c.floor,
                replies: c
                    .replies
                    .iter()
                    .map(|(seq, (digest, reply, at))| CarriedReply {
                        seq: *seq,
                        digest: *digest,
                        reply: reply.clone(),
                        noted_at: *at,
                    })
                    .collect(),
            })
            .collect()
    }

    /// From the encodable form; whatever it holds (a corrupt or hostile
    /// snapshot) the bounds are restored, nothing panics.
    pub fn from_wire(clients: Vec<CarriedClient>) -> CarriedReplies {
        let mut out = CarriedReplies::default();
        for w in clients {
            if w.client == 0 {
                continue;
            }
            let mut c = ClientState {
                floor: w.floor,
                ..ClientState::default()
            };
            for r in w.replies {
                if r.seq >= c.floor {
                    c.last_noted = c.last_noted.max(r.noted_at);
                    c.replies.insert(r.seq, (r.digest, r.reply, r.noted_at));
                }
            }
            c.cap();
            let mut one = CarriedReplies::default();
            one.clients.insert(w.client, c);
            out.absorb(one);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(client: u64, seq: u64, acked_below: u64) -> RequestTag {
        RequestTag {
            id: RequestId {
                client,
                seq,
                acked_below,
                digest: seq * 7,
            },
            reply: Reply::Done,
        }
    }

    fn seqs(c: &CarriedReplies, client: u64) -> Vec<u64> {
        c.tags()
            .iter()
            .filter(|t| t.id.client == client)
            .map(|t| t.id.seq)
            .collect()
    }

    #[test]
    fn replies_below_the_clients_acknowledgement_are_dropped() {
        let mut c = CarriedReplies::default();
        for seq in 1..=10 {
            c.note(&tag(5, seq, 1), 100);
        }
        assert_eq!(seqs(&c, 5), (1..=10).collect::<Vec<_>>());
        c.note(&tag(5, 11, 8), 100);
        assert_eq!(seqs(&c, 5), vec![8, 9, 10, 11]);
        assert_eq!(c.floors(), vec![(5, 8)]);
        // A late note below the floor is not kept.
        c.note(&tag(5, 3, 1), 100);
        assert_eq!(seqs(&c, 5), vec![8, 9, 10, 11]);
    }

    #[test]
    fn the_cap_raises_the_floor_over_what_it_drops() {
        let mut c = CarriedReplies::default();
        for seq in 0..(MAX_PER_CLIENT as u64 + 10) {
            c.note(&tag(9, seq, 0), 1);
        }
        assert_eq!(c.len(), MAX_PER_CLIENT);
        assert_eq!(c.floors(), vec![(9, 10)]);
        assert_eq!(seqs(&c, 9).first(), Some(&10));
    }

    #[test]
    fn old_replies_expire_and_the_least_recent_client_goes_first() {
        let mut c = CarriedReplies::default();
        c.note(&tag(1, 1, 0), 10);
        c.note(&tag(2, 1, 0), 20 + MAX_AGE_SECS);
        c.expire(20 + MAX_AGE_SECS);
        assert_eq!(seqs(&c, 1), Vec::<u64>::new());
        assert_eq!(seqs(&c, 2), vec![1]);

        let mut c = CarriedReplies::default();
        for client in 1..=(MAX_CLIENTS as u64) {
            c.note(&tag(client, 1, 0), client);
        }
        c.note(&tag(10_000, 1, 0), 10_000);
        assert!(seqs(&c, 1).is_empty(), "the least recent client is dropped");
        assert_eq!(seqs(&c, 2), vec![1]);
        assert_eq!(seqs(&c, 10_000), vec![1]);
    }

    #[test]
    fn wire_round_trip_and_absorb() {
        let mut a = CarriedReplies::default();
        a.note(&tag(1, 4, 2), 5);
        a.note(&tag(2, 7, 0), 6);
        let back = CarriedReplies::from_wire(a.to_wire());
        assert_eq!(back, a);
        let mut b = CarriedReplies::default();
        b.note(&tag(1, 9, 3), 7);
        a.absorb(b);
        assert_eq!(seqs(&a, 1), vec![4, 9]);
        assert_eq!(a.floors(), vec![(1, 3)]);
    }

    #[test]
    fn hostile_wire_input_is_bounded() {
        let many = CarriedClient {
            client: 3,
            floor: 0,
            replies: (0..(MAX_PER_CLIENT as u64 * 2))
                .map(|seq| CarriedReply {
                    seq,
                    digest: 0,
                    reply: Reply::Done,
                    noted_at: 0,
                })
                .collect(),
        };
        let zero = CarriedClient {
            client: 0,
            ..CarriedClient::default()
        };
        let c = CarriedReplies::from_wire(vec![many, zero]);
        assert_eq!(c.len(), MAX_PER_CLIENT);
        assert!(seqs(&c, 0).is_empty());
    }
}
