//! Exactly-once across a restart: which client requests the journal says
//! were committed (Lustre's `last_rcvd`, kept in the records themselves).
//!
//! A server runs a client's mutation (client id, seq) at most once by
//! remembering its reply in memory. That memory dies with the process: a
//! mutation committed and synced, the server killed before its reply went
//! out, and the client's retry on the restarted server would run it again
//! (`EEXIST`, `ENOENT`). So:
//!
//! - A mutation may carry a [`RequestId`] (the engine handle of
//!   [`crate::Engine::for_request`]: an explicit context, not a
//!   thread-local). Its journal record then carries a [`RequestTag`]: the
//!   id plus the operation's reply (its attributes, or done) — a few dozen
//!   bytes, next to the whole inodes the record holds anyway. Storing the
//!   reply itself, not just the result's SOID, is what lets a retried
//!   `unlink`/`rmdir` get the attributes "as they were" (the mount decides
//!   from their `nlink` whether the file's data goes) although the inode is
//!   gone by now. Records without a tag keep the old format.
//! - Recovery reports the tags of the records it replays
//!   ([`Recovered::replies`]): the server answers a retry of them with the
//!   stored reply.
//! - A record written back into a snapshot is trimmed from the journal, and
//!   its tag with it; a retry of it after a restart can no longer be
//!   answered, but must not run again either. So the engine also keeps a
//!   small [`Ledger`] — per client, its floor (the highest `acked_below`:
//!   nothing below is ever retried) and the committed seqs at or above it —
//!   and writes it (file `requests`) with every checkpoint, *before* the
//!   manifest that lets the journal be trimmed. After a restart a retry of
//!   a ledger seq without a replayed tag is refused (`ESTALE`), never run.
//!   A seq is noted in the ledger before its record is appended, so the
//!   ledger a checkpoint writes covers every record the checkpoint may
//!   trim. (If the append then fails, the engine has stopped: the retry of
//!   that one mutation after the restart gets `ESTALE`, an error either
//!   way.)
//! - Bounds: [`MAX_SEQS_PER_CLIENT`] seqs per client (beyond, the floor
//!   rises over the oldest: their retries get `ESTALE`) and
//!   [`MAX_CLIENTS`] clients (the least recently committing one is
//!   dropped: a retry of its old mutations after a restart would run
//!   again — it has committed nothing while 4,096 others did).
//!
//! File format (`requests`, replaced whole, atomically):
//! `magic "SXTREQS1" | postcard Vec<ClientLedger> | crc32c u32 of everything before`.

use serde::{Deserialize, Serialize};
use sextant_types::Attr;
use std::collections::{BTreeSet, HashMap};

/// The file the ledger lives in.
pub const LEDGER_NAME: &str = "requests";
const MAGIC: &[u8; 8] = b"SXTREQS1";

/// Most committed seqs kept per client (far above a well-behaved
/// client's in-flight limit).
pub const MAX_SEQS_PER_CLIENT: usize = 16_384;
/// Most clients kept.
pub const MAX_CLIENTS: usize = 4_096;

/// Who asked for a mutation, and how to tell a retry from another request.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct RequestId {
    pub client: u64,
    pub seq: u64,
    /// Every seq of the client below this is answered or abandoned.
    pub acked_below: u64,
    /// The server's digest of the request (operation and credentials).
    pub digest: u64,
}

/// What a committed mutation answered.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Reply {
    Done,
    Attr(Attr),
}

/// A value a mutation returns that can be stored as its reply.
pub trait AsReply {
    fn as_reply(&self) -> Reply;
}

impl AsReply for () {
    fn as_reply(&self) -> Reply {
        Reply::Done
    }
}

impl AsReply for Attr {
    fn as_reply(&self) -> Reply {
        Reply::Attr(self.clone())
    }
}

/// A rename's: the attributes of the inode whose name it replaced, if any.
impl AsReply for Option<Attr> {
    fn as_reply(&self) -> Reply {
        match self {
            Some(a) => Reply::Attr(a.clone()),
            None => Reply::Done,
        }
    }
}

/// A journal record's request identity and reply.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct RequestTag {
    pub id: RequestId,
    pub reply: Reply,
}

/// One client's part of the ledger.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ClientLedger {
    pub client: u64,
    /// Seqs below this are never retried (or were dropped by the cap).
    pub floor: u64,
    /// Committed seqs at or above `floor`, ascending.
    pub seqs: Vec<u64>,
}

#[derive(Default)]
struct Entry {
    floor: u64,
    seqs: BTreeSet<u64>,
    last_used: u64,
}

/// Committed requests per client; see the module docs.
#[derive(Default)]
pub struct Ledger {
    clients: HashMap<u64, Entry>,
    tick: u64,
    /// Changed since last encoded.
    dirty: bool,
}

impl Ledger {
    /// Notes a committed (or about to be committed) request.
    pub fn note(&mut self, id: &RequestId) {
        self.tick += 1;
        self.dirty = true;
        if !self.clients.contains_key(&id.client) && self.clients.len() >= MAX_CLIENTS {
            if let Some(oldest) = self
                .clients
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(c, _)| *c)
            {
                self.clients.remove(&oldest);
            }
        }
        let e = self.clients.entry(id.client).or_default();
        e.last_used = self.tick;
        if id.acked_below > e.floor {
            e.floor = id.acked_below;
            e.seqs = e.seqs.split_off(&id.acked_below);
        }
        if id.seq >= e.floor {
            e.seqs.insert(id.seq);
        }
        while e.seqs.len() > MAX_SEQS_PER_CLIENT {
            if let Some(s) = e.seqs.pop_first() {
                e.floor = e.floor.max(s + 1);
            }
        }
    }

    /// Has it changed since [`Ledger::encode`] last ran?
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Every client's part, by client id.
    pub fn clients(&self) -> Vec<ClientLedger> {
        let mut v: Vec<ClientLedger> = self
            .clients
            .iter()
            .map(|(client, e)| ClientLedger {
                client: *client,
                floor: e.floor,
                seqs: e.seqs.iter().copied().collect(),
            })
            .collect();
        v.sort_by_key(|c| c.client);
        v
    }

    pub fn encode(&mut self) -> Vec<u8> {
        self.dirty = false;
        let body = postcard::to_stdvec(&self.clients()).expect("serializing to a Vec cannot fail");
        let mut out = Vec::with_capacity(body.len() + 12);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a ledger file. Never panics.
    pub fn decode(b: &[u8]) -> Result<Ledger, String> {
        if b.len() < MAGIC.len() + 4 || &b[..MAGIC.len()] != MAGIC {
            return Err("bad request ledger header".into());
        }
        let (content, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(content) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err("request ledger checksum mismatch".into());
        }
        let parts: Vec<ClientLedger> = match postcard::take_from_bytes(&content[MAGIC.len()..]) {
            Ok((p, [])) => p,
            Ok((_, extra)) => {
                return Err(format!("request ledger has {} trailing bytes", extra.len()))
            }
            Err(e) => return Err(format!("request ledger body: {e}")),
        };
        let mut ledger = Ledger::default();
        for p in parts {
            ledger.tick += 1;
            let e = ledger.clients.entry(p.client).or_default();
            e.last_used = ledger.tick;
            e.floor = e.floor.max(p.floor);
            e.seqs.extend(p.seqs);
            // Below the floor (a client listed twice merges to the higher).
            e.seqs = e.seqs.split_off(&e.floor);
            while e.seqs.len() > MAX_SEQS_PER_CLIENT {
                if let Some(s) = e.seqs.pop_first() {
                    e.floor = e.floor.max(s + 1);
                }
            }
        }
        Ok(ledger)
    }
}

/// What recovery found about client requests, for the server's
/// exactly-once table ([`crate::Engine::take_recovered_requests`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Per client: (client, floor) — seqs below are never retried.
    pub floors: Vec<(u64, u64)>,
    /// (client, seq) committed, reply unknown (written back): refuse.
    pub gone: Vec<(u64, u64)>,
    /// Tags of the records replayed from the journal: answer with these.
    pub replies: Vec<RequestTag>,
}

/// Where [`crate::Engine::set_carried_sink`] sends what added tables carry.
pub type CarriedSink = Box<dyn Fn(Recovered) + Send + Sync>;

impl Recovered {
    /// Adds what `other` found.
    pub fn absorb(&mut self, other: Recovered) {
        self.floors.extend(other.floors);
        self.gone.extend(other.gone);
        self.replies.extend(other.replies);
    }

    pub(crate) fn from_ledger(ledger: &Ledger, replies: Vec<RequestTag>) -> Recovered {
        let mut r = Recovered {
            replies,
            ..Recovered::default()
        };
        for c in ledger.clients() {
            r.floors.push((c.client, c.floor));
            r.gone.extend(c.seqs.iter().map(|s| (c.client, *s)));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(client: u64, seq: u64, acked_below: u64) -> RequestId {
        RequestId {
            client,
            seq,
            acked_below,
            digest: 0,
        }
    }

    #[test]
    fn the_floor_drops_acknowledged_seqs() {
        let mut l = Ledger::default();
        for s in 1..=10 {
            l.note(&id(1, s, 1));
        }
        l.note(&id(1, 11, 8));
        l.note(&id(2, 5, 5));
        assert_eq!(
            l.clients(),
            vec![
                ClientLedger {
                    client: 1,
                    floor: 8,
                    seqs: vec![8, 9, 10, 11]
                },
                ClientLedger {
                    client: 2,
                    floor: 5,
                    seqs: vec![5]
                }
            ]
        );
    }

    #[test]
    fn round_trip_and_corruption() {
        let mut l = Ledger::default();
        l.note(&id(3, 4, 2));
        l.note(&id(9, 1, 0));
        assert!(l.dirty());
        let b = l.encode();
        assert!(!l.dirty());
        assert_eq!(Ledger::decode(&b).unwrap().clients(), l.clients());
        let mut bad = b.clone();
        let n = bad.len();
        bad[n / 2] ^= 1;
        assert!(Ledger::decode(&bad).is_err());
        assert!(Ledger::decode(&b[..5]).is_err());
        assert!(Ledger::decode(&[]).is_err());
    }

    #[test]
    fn bounded_per_client_and_in_clients() {
        let mut l = Ledger::default();
        for s in 1..=(MAX_SEQS_PER_CLIENT as u64 + 5) {
            l.note(&id(1, s, 1));
        }
        let c = &l.clients()[0];
        assert_eq!(c.seqs.len(), MAX_SEQS_PER_CLIENT);
        assert_eq!(c.floor, 6);
        for client in 2..=(MAX_CLIENTS as u64 + 1) {
            l.note(&id(client, 1, 1));
        }
        assert_eq!(l.clients().len(), MAX_CLIENTS);
        assert!(
            l.clients().iter().all(|c| c.client != 1),
            "the least recent client went"
        );
    }
}
