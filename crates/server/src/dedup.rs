//! Exactly-once: the replies of recent mutations, per client.
//!
//! A client numbers its mutations (`seq`, increasing) under a random
//! `client_id`. The first request for a (client, seq) creates a cell and
//! runs; a retry of it finds the cell and waits for (or returns) the same
//! reply, so the mutation runs once however often it is sent.
//!
//! When a reply may be forgotten: each request also carries the client's
//! `acked_below` — every seq of that client below it was answered or
//! abandoned and is never sent again (TCP's cumulative acknowledgement).
//! The client's *floor* is the highest `acked_below` seen; replies below it
//! are dropped, and a request below it is a stale duplicate nobody waits
//! for: `ESTALE`, never run. Nothing else moves the floor (except the hard
//! cap below), so a first attempt is never refused, however many requests
//! are in flight or however out of order they arrive.
//!
//! Invariants and bounds:
//! - `acked_below <= seq` for every request (the client's own request is
//!   outstanding); a request claiming more is `EINVAL`.
//! - A client keeps at most [`HARD_CAP`] replies, far above the client
//!   library's in-flight limit (512): only a misbehaving client (one that
//!   never advances `acked_below`, or one request stuck while tens of
//!   thousands after it finish) reaches it; then its oldest replies are
//!   dropped and the floor moves above them (those retries get `ESTALE`).
//! - A client that sends `acked_below = 0` (an older client) is windowed
//!   by count instead: its last `window` replies (`dedup_window`), the
//!   older ones dropped and refused with `ESTALE`.
//! - At most `max_clients` clients are remembered; the least recently
//!   active one is forgotten first, leaving a tombstone (the highest seq it
//!   ever began): when it comes back, anything at or below that is refused
//!   with `ESTALE` — it may have run — and only newer numbers run.
//!   Tombstones are 16 bytes; at most `16 × max_clients` are kept (oldest
//!   dropped first).
//!
//! Each remembered request keeps a digest of its operation and
//! credentials: a (client, seq) reused for a different request (two
//! clients sharing an id, a restarted client reusing numbers) gets
//! `EINVAL` instead of another request's reply.
//!
//! In a cluster, a reply made here is trusted only under the membership
//! lease it was made under ([`Dedup::set_generation`]; the rule is
//! `sextant_cluster::exactly_once::decide`). A server that
//! lost its lease (paused past it, say) lost every table with it, and a
//! mutation it ran meanwhile — refused by R1, never acknowledged — may be
//! in no table's contents: the next owner loaded the table before the
//! record was written. Its retry must run afresh, not be answered
//! "done" by the server that lost it. Replies a table carries (seeded when
//! it is added here) are kept across generations: they are in its
//! contents.
//!
//! A (client, seq) may be in flight in two places at once — an attempt
//! waiting here (for a BORROW) while the client's retry runs on the
//! table's next holder — and the table may come back carrying that reply,
//! seeded over the waiting attempt's cell. So an attempt runs only while
//! its number is still its own ([`Dedup::is_current`], asked right before
//! the engine runs again after a wait), and forgets its number only if it
//! is ([`Dedup::abandon`]): a seeded reply is never dropped by an attempt
//! that began before it, and never run over.
//!
//! The table lives in memory. With the journal, a restarted server seeds
//! it ([`Dedup::seed`]) from what recovery found: the replies of the
//! mutations whose records were replayed, and the numbers whose records
//! were written back earlier (refused with `ESTALE`: they ran, and their
//! reply is gone). See `sextant_engine::requests`.

use sextant_cluster::exactly_once::{decide, Decision, Remembered};
use sextant_proto::pb;
use sextant_types::FsError;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// Refusals (ESTALE) logged per second at most: a client that keeps
/// sending stale numbers must not fill the log (the count of those held
/// back goes with the next line).
static REFUSALS_LOGGED: crate::log_budget::LineBudget = crate::log_budget::LineBudget::new(10);

/// The reply of one mutation, filled in once.
pub type ReplyCell = Arc<OnceCell<pb::Response>>;

/// Most replies remembered for one client that acknowledges (see the
/// module docs): 32 × the client library's in-flight limit.
pub const HARD_CAP: usize = 16_384;

/// What a request's (client, seq) maps to.
enum Known {
    /// Ran (or is running) here: the request digest, the reply, and the
    /// generation it ran under (`None`: seeded, from a table's contents or
    /// the journal).
    Reply(u64, ReplyCell, Option<u64>),
    /// Ran before a restart and its reply is gone: refused with `ESTALE`.
    Gone,
}

struct ClientWindow {
    replies: BTreeMap<u64, Known>,
    /// Every seq below this is refused (acknowledged, or dropped).
    floor: u64,
    /// Whether the client sends `acked_below` (then no count window).
    acknowledges: bool,
    last_used: u64,
}

impl ClientWindow {
    fn new(floor: u64) -> ClientWindow {
        ClientWindow {
            replies: BTreeMap::new(),
            floor,
            acknowledges: false,
            last_used: 0,
        }
    }

    fn highest_seq(&self) -> u64 {
        self.replies
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
            .max(self.floor.saturating_sub(1))
    }

    /// Raises the floor to `to`, dropping the replies below it.
    fn raise_floor(&mut self, to: u64) {
        if to > self.floor {
            self.floor = to;
            self.replies = self.replies.split_off(&to);
        }
    }

    /// Drops the oldest replies while more than `cap` are kept.
    fn cap(&mut self, cap: usize) {
        while self.replies.len() > cap {
            if let Some((dropped, _)) = self.replies.pop_first() {
                self.floor = self.floor.max(dropped + 1);
            }
        }
    }
}

/// A mutation recovery found in the journal, with its reply.
pub struct Seeded {
    pub client: u64,
    pub seq: u64,
    pub digest: u64,
    pub reply: pb::Response,
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
    /// The membership generation requests run under now.
    generation: u64,
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
            generation: 0,
        }
    }

    /// The membership generation requests run under from now on (it only
    /// grows): replies made under an older one are no longer answered —
    /// their mutations run again, unless a table added here carried them.
    pub fn set_generation(&mut self, generation: u64) {
        self.generation = self.generation.max(generation);
    }

    /// The window of `client`, made (and marked most recently used) if
    /// needed.
    fn window_of(&mut self, client: u64) -> &mut ClientWindow {
        self.tick += 1;
        if !self.clients.contains_key(&client) && self.clients.len() >= self.max_clients {
            self.forget_least_recent();
        }
        let tombstone = self.tombstones.remove(&client);
        let w = self.clients.entry(client).or_insert_with(|| {
            // A returning forgotten client: what it began before may have
            // run, so those numbers are refused.
            ClientWindow::new(tombstone.map_or(0, |t| t + 1))
        });
        self.by_use.remove(&w.last_used);
        w.last_used = self.tick;
        self.by_use.insert(self.tick, client);
        w
    }

    /// The cell for (client, seq): a fresh one if this is the first time,
    /// the existing one for a retry of the same request (`digest`),
    /// `EINVAL` for a different request under the same numbers (or an
    /// `acked_below` above `seq`), `ESTALE` below the client's floor.
    pub fn begin(
        &mut self,
        client: u64,
        seq: u64,
        acked_below: u64,
        digest: u64,
    ) -> Result<(ReplyCell, bool), FsError> {
        if acked_below > seq {
            return Err(FsError::Invalid);
        }
        let window = self.window;
        let generation = self.generation;
        let w = self.window_of(client);
        if acked_below > 0 {
            w.acknowledges = true;
            w.raise_floor(acked_below);
        }
        match w.replies.get(&seq) {
            Some(Known::Reply(known, cell, made)) => {
                let remembered = made.map_or(Remembered::Carried, Remembered::MadeUnder);
                // Made under a lost lease: as if never run here (see the
                // module docs).
                if decide(Some(remembered), generation) == Decision::Answer {
                    if *known != digest {
                        return Err(FsError::Invalid);
                    }
                    return Ok((Arc::clone(cell), true));
                }
            }
            Some(Known::Gone) => {
                let Some(suppressed) = REFUSALS_LOGGED.slot() else {
                    return Err(FsError::Stale);
                };
                tracing::warn!(
                    client = format_args!("{client:016x}"),
                    seq,
                    suppressed,
                    "exactly-once: a retry of a mutation that ran here and whose reply is gone is refused (ESTALE)"
                );
                return Err(FsError::Stale);
            }
            None => {}
        }
        if seq < w.floor {
            let Some(suppressed) = REFUSALS_LOGGED.slot() else {
                return Err(FsError::Stale);
            };
            tracing::warn!(
                client = format_args!("{client:016x}"),
                seq,
                suppressed,
                floor = w.floor,
                acked_below,
                "exactly-once: a request below its client's floor is refused (ESTALE)"
            );
            return Err(FsError::Stale);
        }
        let cell: ReplyCell = Arc::new(OnceCell::new());
        w.replies.insert(
            seq,
            Known::Reply(digest, Arc::clone(&cell), Some(generation)),
        );
        w.cap(if w.acknowledges { HARD_CAP } else { window });
        Ok((cell, false))
    }

    /// Forgets (client, seq) begun in `cell` but refused before it ran
    /// (its table was not here): a later attempt runs afresh. Only while
    /// the number is still that cell's: a reply seeded over it meanwhile
    /// (a table that came here carrying it) stays.
    pub fn abandon(&mut self, client: u64, seq: u64, cell: &ReplyCell) {
        if let Some(w) = self.clients.get_mut(&client) {
            if matches!(w.replies.get(&seq), Some(Known::Reply(_, c, _)) if Arc::ptr_eq(c, cell)) {
                w.replies.remove(&seq);
            }
        }
    }

    /// Is (client, seq) still the attempt begun in `cell`? Not once a
    /// table's reply for it was seeded over it, a newer attempt (under a
    /// newer generation) replaced it, or the client's floor passed it.
    pub fn is_current(&self, client: u64, seq: u64, cell: &ReplyCell) -> bool {
        self.clients.get(&client).is_some_and(|w| {
            matches!(w.replies.get(&seq), Some(Known::Reply(_, c, Some(_))) if Arc::ptr_eq(c, cell))
        })
    }

    /// After a restart: what recovery found. `floors`: per client, every
    /// seq below the floor was acknowledged before the crash (refused);
    /// `gone`: numbers that ran but whose reply is lost (refused);
    /// `replies`: mutations whose reply was rebuilt (answered with it).
    /// Call before serving.
    pub fn seed(
        &mut self,
        floors: impl IntoIterator<Item = (u64, u64)>,
        gone: impl IntoIterator<Item = (u64, u64)>,
        replies: impl IntoIterator<Item = Seeded>,
    ) {
        for (client, floor) in floors {
            self.window_of(client).raise_floor(floor);
        }
        for (client, seq) in gone {
            let w = self.window_of(client);
            if seq >= w.floor {
                w.replies.insert(seq, Known::Gone);
            }
        }
        for s in replies {
            let w = self.window_of(s.client);
            if s.seq >= w.floor {
                let cell = Arc::new(OnceCell::new_with(Some(s.reply)));
                w.replies.insert(s.seq, Known::Reply(s.digest, cell, None));
            }
        }
        for w in self.clients.values_mut() {
            w.cap(HARD_CAP);
        }
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

    /// Replies remembered for `client` (tests, metrics).
    pub fn remembered(&self, client: u64) -> usize {
        self.clients.get(&client).map_or(0, |w| w.replies.len())
    }

    /// Seqs remembered for `client`, in order (tests).
    pub fn remembered_seqs(&self, client: u64) -> BTreeSet<u64> {
        self.clients
            .get(&client)
            .map(|w| w.replies.keys().copied().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_finds_the_same_cell() {
        let mut d = Dedup::new(4, 2);
        let (a, retry) = d.begin(1, 10, 0, 0).unwrap();
        assert!(!retry);
        let (b, retry) = d.begin(1, 10, 0, 0).unwrap();
        assert!(retry && Arc::ptr_eq(&a, &b));
        let (c, retry) = d.begin(2, 10, 0, 0).unwrap();
        assert!(!retry && !Arc::ptr_eq(&a, &c));
    }

    /// Issue 21: an attempt that began here, then waited while the
    /// client's retry ran elsewhere and the table came back carrying that
    /// reply, is no longer current (it must not run) and its abandon does
    /// not drop the seeded reply (a later retry must still get it).
    #[test]
    fn a_reply_seeded_over_a_waiting_attempt_supersedes_it() {
        let mut d = Dedup::new(4, 2);
        let (mine, retry) = d.begin(1, 10, 10, 7).unwrap();
        assert!(!retry && d.is_current(1, 10, &mine));
        let carried = pb::Response {
            id: 99,
            ..Default::default()
        };
        d.seed(
            [],
            [],
            [Seeded {
                client: 1,
                seq: 10,
                digest: 7,
                reply: carried.clone(),
            }],
        );
        assert!(
            !d.is_current(1, 10, &mine),
            "superseded by the table's reply"
        );
        d.abandon(1, 10, &mine);
        let (cell, retry) = d.begin(1, 10, 10, 7).unwrap();
        assert!(retry, "the seeded reply answers the retry");
        assert_eq!(cell.get(), Some(&carried));
        // Its own number, not superseded: abandoned, the next attempt runs.
        let (other, _) = d.begin(1, 11, 10, 8).unwrap();
        assert!(d.is_current(1, 11, &other));
        d.abandon(1, 11, &other);
        assert!(!d.is_current(1, 11, &other));
        assert!(!d.begin(1, 11, 10, 8).unwrap().1);
    }

    #[test]
    fn without_acknowledgements_the_window_drops_oldest_and_refuses_below_it() {
        let mut d = Dedup::new(4, 2);
        for seq in 1..=6 {
            d.begin(1, seq, 0, 0).unwrap();
        }
        // 1 and 2 were dropped: a retry of them must not run again.
        assert_eq!(d.begin(1, 1, 0, 0).err(), Some(FsError::Stale));
        assert_eq!(d.begin(1, 2, 0, 0).err(), Some(FsError::Stale));
        assert!(d.begin(1, 3, 0, 0).unwrap().1, "3 is still remembered");
        assert!(!d.begin(1, 7, 0, 0).unwrap().1);
    }

    #[test]
    fn least_recently_used_client_is_forgotten() {
        let mut d = Dedup::new(4, 2);
        d.begin(1, 1, 0, 0).unwrap();
        d.begin(2, 1, 0, 0).unwrap();
        d.begin(1, 2, 0, 0).unwrap(); // client 1 is now the more recent
        d.begin(3, 1, 0, 0).unwrap(); // evicts client 2
        assert_eq!(d.clients(), 2);
        assert!(d.begin(1, 1, 0, 0).unwrap().1);
        // Client 2 was forgotten: its old number may have run, so it is
        // refused rather than run again; newer numbers run.
        assert_eq!(d.begin(2, 1, 0, 0).err(), Some(FsError::Stale));
        assert!(!d.begin(2, 2, 0, 0).unwrap().1);
    }

    /// Found in review: a (client, seq) reused for a different request got
    /// the first request's reply and the second never ran.
    #[test]
    fn a_different_request_under_the_same_numbers_is_refused() {
        let mut d = Dedup::new(4, 2);
        d.begin(1, 5, 1, 111).unwrap();
        assert!(d.begin(1, 5, 1, 111).unwrap().1, "a true retry");
        assert_eq!(d.begin(1, 5, 1, 222).err(), Some(FsError::Invalid));
    }

    /// A small deterministic shuffle (no rand dependency).
    fn shuffled(n: u64, mut state: u64) -> Vec<u64> {
        let mut v: Vec<u64> = (1..=n).collect();
        for i in (1..v.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            v.swap(i, (state % (i as u64 + 1)) as usize);
        }
        v
    }

    /// Issue 25 item 1: thousands in flight arriving in any order, with a
    /// small count window configured: none is refused, each retry finds
    /// its reply. The old window (by count of newer numbers) refused the
    /// late arrivals with ESTALE.
    #[test]
    fn reordered_arrival_of_thousands_is_never_refused() {
        let mut d = Dedup::new(8, 4);
        let order = shuffled(5000, 0x9e37_79b9_7f4a_7c15);
        // The client's acknowledgement is at most the lowest not yet
        // answered; here nothing is answered: acked_below 1 throughout.
        for &seq in &order {
            let (_, retry) = d.begin(1, seq, 1, seq).expect("a first attempt runs");
            assert!(!retry);
        }
        for &seq in order.iter().rev() {
            assert!(d.begin(1, seq, 1, seq).unwrap().1, "retry of {seq}");
        }
    }

    #[test]
    fn the_floor_advances_with_acknowledgements_and_refuses_stale_duplicates() {
        let mut d = Dedup::new(8, 4);
        for seq in 1..=100 {
            d.begin(1, seq, 1, seq).unwrap();
        }
        assert_eq!(d.remembered(1), 100);
        // 1..=59 answered: the client says so with its next request.
        d.begin(1, 101, 60, 101).unwrap();
        assert_eq!(d.remembered(1), 42, "60..=101");
        assert_eq!(*d.remembered_seqs(1).first().unwrap(), 60);
        // A stale duplicate below the floor: refused, never run.
        assert_eq!(d.begin(1, 59, 1, 59).err(), Some(FsError::Stale));
        assert_eq!(d.begin(1, 3, 1, 3).err(), Some(FsError::Stale));
        // At or above it: a retry still gets its reply.
        assert!(d.begin(1, 60, 60, 60).unwrap().1);
        // An old acknowledgement does not lower the floor.
        assert!(d.begin(1, 80, 2, 80).unwrap().1);
        assert_eq!(d.begin(1, 50, 50, 50).err(), Some(FsError::Stale));
        // A request cannot acknowledge itself.
        assert_eq!(d.begin(1, 200, 201, 200).err(), Some(FsError::Invalid));
    }

    #[test]
    fn a_client_that_never_acknowledges_more_is_capped() {
        let mut d = Dedup::new(8, 4);
        let n = HARD_CAP as u64 + 10;
        for seq in 1..=n {
            d.begin(1, seq, 1, 0).unwrap();
        }
        assert_eq!(d.remembered(1), HARD_CAP);
        assert_eq!(d.begin(1, 10, 1, 0).err(), Some(FsError::Stale));
        assert!(d.begin(1, 11, 1, 0).unwrap().1);
    }

    #[test]
    fn seeded_replies_answer_and_gone_numbers_are_refused() {
        let mut d = Dedup::new(8, 4);
        let reply = pb::Response {
            id: 5,
            ..Default::default()
        };
        d.seed(
            [(1, 10)],
            [(1, 12), (1, 3)],
            [Seeded {
                client: 1,
                seq: 11,
                digest: 7,
                reply: reply.clone(),
            }],
        );
        let (cell, retry) = d.begin(1, 11, 10, 7).unwrap();
        assert!(retry);
        assert_eq!(cell.get(), Some(&reply));
        assert_eq!(d.begin(1, 11, 10, 8).err(), Some(FsError::Invalid));
        assert_eq!(d.begin(1, 12, 10, 7).err(), Some(FsError::Stale));
        assert_eq!(d.begin(1, 9, 9, 7).err(), Some(FsError::Stale));
        // Numbers recovery knows nothing of run.
        assert!(!d.begin(1, 13, 10, 7).unwrap().1);
        assert!(!d.begin(2, 1, 1, 7).unwrap().1);
    }

    #[test]
    fn replies_made_under_a_lost_lease_are_not_answered_but_carried_ones_are() {
        let mut d = Dedup::new(64, 16);
        d.set_generation(1);
        let (first, retry) = d.begin(1, 10, 0, 7).unwrap();
        assert!(!retry);
        assert!(first.set(pb::Response::default()).is_ok());
        assert!(d.begin(1, 10, 0, 7).unwrap().1, "same lease: a retry");
        d.set_generation(2);
        let (again, retry) = d.begin(1, 10, 0, 7).unwrap();
        assert!(!retry, "a reply made under a lost lease must not answer");
        assert!(
            again.get().is_none(),
            "a fresh cell: the mutation runs again"
        );
        // Carried by a table added under the new lease: answered, and
        // still after the next loss.
        d.seed(
            [],
            [],
            [Seeded {
                client: 1,
                seq: 11,
                digest: 9,
                reply: pb::Response::default(),
            }],
        );
        d.set_generation(3);
        assert!(d.begin(1, 11, 0, 9).unwrap().1);
        // Generations only grow.
        d.set_generation(1);
        let (_, retry) = d.begin(1, 12, 0, 1).unwrap();
        d.set_generation(3);
        assert!(!retry && d.begin(1, 12, 0, 1).unwrap().1);
    }
}
