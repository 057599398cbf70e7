//! Log-less durability (Liao et al., `logless-metadata-management.txt`):
//! the server writes no journal; every committed operation travels, as a
//! *redo entry*, with its reply and the next replies of the server, and the
//! clients that received it keep it until its tables are written back.
//! After a crash the server collects those backups and replays them with
//! the paper's stamp rule. This module owns the pure parts:
//!
//! - [`RedoKey`]: the redo entry, sealed (encrypted and authenticated) with
//!   the server's key, so a client can only hand back what the server gave
//!   it (clients are untrusted; replaying a forged entry would be a write
//!   with no permission check) and cannot read the other clients'
//!   operations it keeps;
//! - [`Stamps`]: each inode's *stamp*, the LSN of the last operation that
//!   wrote it, for the inodes written since the last durable manifest;
//! - [`Arl`]: the Active Request List, the last K redo entries;
//! - [`plan_recovery`]: which collected entries to replay.
//!
//! # Choices (where the paper is silent or the brief decides)
//!
//! - **Physical redo, not the request.** The paper's clients keep the
//!   original request and the server re-executes it. Sextant already
//!   journals each operation as its write set (whole inodes and entries
//!   after the operation, [`crate::record`]), so a redo entry is that write
//!   set: replay is deterministic (no SOID allocation, clock or permission
//!   check to re-run) and idempotent.
//! - **Stamps are LSNs.** The paper stamps an inode with (client id, log
//!   id) of the last request that changed it; Sextant's server sequence
//!   number (the LSN) names that request just as well, in 8 bytes, and
//!   orders the merge.
//! - **Stamp keys.** An operation's stamp keys are the SOIDs its mutations
//!   belong to ([`Mutation::table_key`]): an inode's own SOID, and for an
//!   entry its parent directory's (a directory's stamp covers its entries;
//!   every entry change also changes the directory's times anyway).
//! - **Stamps are not kept in every inode.** Only inodes written since the
//!   last *durable manifest* (whose `replay_from` is R) carry an explicit
//!   stamp, in [`Stamps`]; every other inode's last writer is below R and so
//!   already in its table's snapshot. A redo entry records such a
//!   predecessor as 0 ("in the snapshot"). This keeps the 8 bytes out of
//!   the 10M in-memory inodes (the memory target of the engine issue).
//!
//! # The recovery rule ([`plan_recovery`])
//!
//! Each stamp key k lives in a table whose snapshot (as the manifest at
//! recovery names it) holds every operation up to `floor(k)` that touched
//! it. Entries are taken in LSN order; for entry e and each key k:
//! - `e.lsn <= floor(k)`: that part is already durable, skipped;
//! - otherwise the key's current stamp must equal e's previous stamp for k:
//!   the current stamp is the LSN of the last entry replayed on k, or, if
//!   none was, "something at or below `floor(k)`", which matches any
//!   previous stamp `<= floor(k)` (0 included).
//!
//! An entry whose keys all match is applied (its non-durable parts); one
//! with any mismatch is discarded whole, and because its keys keep their
//! old stamps every later entry that built on it mismatches too: the
//! paper's "all collected requests associated with the same inode are
//! thrown away". Without losses every entry matches (the test
//! `model_check` below checks this and the converse over random histories).

use crate::journal::Lsn;
use crate::record::Mutation;
use sextant_types::Soid;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Version byte of an entry sealed with XChaCha20-Poly1305 that carries
/// its request's tag (what the server writes): a retry of an operation
/// recovered from backups is answered with its reply, not run again.
const REDO_SEALED_TAGGED: u8 = 3;
/// Version byte of a sealed entry without a request tag (servers before
/// 2026-12-06): still opened.
const REDO_SEALED: u8 = 2;
/// Version byte of an entry of servers before sealing: plain text and a
/// keyed hash. Still opened, so an upgrade across a crash loses nothing;
/// never written.
const REDO_MACED: u8 = 1;
/// Length of the keyed hash that ends a version-1 entry.
pub const MAC_LEN: usize = 32;
/// Length of the server's redo key.
pub const KEY_LEN: usize = 32;
/// Length of a sealed entry's nonce and of its tag.
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Domain separation of the cipher key from the stored redo key (which
/// also keys version-1 hashes).
const SEAL_CONTEXT: &str = "sextant 2026-12 log-less redo entry sealing";

/// One committed operation as the server hands it to clients: LSN plus the
/// encoded, authenticated entry. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redo {
    pub lsn: Lsn,
    pub bytes: Arc<[u8]>,
}

/// A decoded redo entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedoEntry {
    pub lsn: Lsn,
    /// The client request the operation answered, with its reply (`None`:
    /// no request identity, or an entry of an older server).
    pub tag: Option<crate::requests::RequestTag>,
    /// (stamp key, the key's stamp before this operation; 0: in a snapshot).
    pub prev: Vec<(Soid, Lsn)>,
    pub mutations: Vec<Mutation>,
}

/// Encodes the write set of an entry (outside the LSN lock: this is the
/// bulk of the work, and its size is checked before an LSN is taken).
pub fn encode_mutations(mutations: &[Mutation]) -> Vec<u8> {
    postcard::to_stdvec(mutations).expect("serializing to a Vec cannot fail")
}

/// The plain text of an entry: `postcard(lsn, prev) | mutations`.
pub fn redo_plaintext(lsn: Lsn, prev: &[(Soid, Lsn)], mutations: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(mutations.len() + 24 + prev.len() * 20);
    append_plaintext(&mut out, lsn, prev, mutations);
    out
}

/// The plain text of a version-3 entry: `postcard(lsn, prev, tag) | mutations`.
pub fn redo_plaintext_tagged(
    lsn: Lsn,
    prev: &[(Soid, Lsn)],
    tag: Option<&crate::requests::RequestTag>,
    mutations: &[u8],
) -> Vec<u8> {
    let mut out = postcard::to_stdvec(&(lsn, prev, tag)).expect("serializing to a Vec cannot fail");
    out.extend_from_slice(mutations);
    out
}

fn append_plaintext(out: &mut Vec<u8>, lsn: Lsn, prev: &[(Soid, Lsn)], mutations: &[u8]) {
    postcard::to_io(&(lsn, prev), &mut *out).expect("serializing to a Vec cannot fail");
    out.extend_from_slice(mutations);
}

/// The server's redo key, ready to seal and open entries.
///
/// Why sealed, not only authenticated: the paper's backups travel with
/// *every* client's next replies, so a client holds other clients'
/// operations — names, owners, modes of files it may not be allowed to
/// see (a local user over the Unix socket, a path-limited key). Sealed
/// with XChaCha20-Poly1305 (a standard AEAD; `chacha20poly1305` crate)
/// an entry is opaque to every client and still cannot be forged.
///
/// Nonces: a random 16-byte prefix per `RedoKey` (per server run, from
/// the kernel) and a 64-bit counter, so no nonce repeats under one key
/// across runs (the prefixes of two runs collide with probability
/// 2^-128 per pair) without a system call per entry.
pub struct RedoKey {
    /// The stored key: opens version-1 entries.
    secret: [u8; KEY_LEN],
    cipher: chacha20poly1305::XChaCha20Poly1305,
    nonce_prefix: [u8; 16],
    counter: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RedoKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedoKey(..)")
    }
}

impl RedoKey {
    /// The key for `secret` (the server's stored redo key), with this
    /// run's random `nonce_prefix`.
    pub fn new(secret: &[u8; KEY_LEN], nonce_prefix: [u8; 16]) -> RedoKey {
        use chacha20poly1305::KeyInit;
        let derived = blake3::derive_key(SEAL_CONTEXT, secret);
        RedoKey {
            secret: *secret,
            cipher: chacha20poly1305::XChaCha20Poly1305::new(&derived.into()),
            nonce_prefix,
            counter: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Builds and seals one entry without a request tag.
    pub fn encode(&self, lsn: Lsn, prev: &[(Soid, Lsn)], mutations: &[u8]) -> Vec<u8> {
        self.encode_tagged(lsn, prev, None, mutations)
    }

    /// Builds and seals one entry:
    /// `3 | nonce | sealed(postcard(lsn, prev, tag) | mutations) | tag`.
    pub fn encode_tagged(
        &self,
        lsn: Lsn,
        prev: &[(Soid, Lsn)],
        tag: Option<&crate::requests::RequestTag>,
        mutations: &[u8],
    ) -> Vec<u8> {
        let mut out = self.header(mutations.len() + 24 + prev.len() * 20 + TAG_LEN);
        postcard::to_io(&(lsn, prev, tag), &mut out).expect("serializing to a Vec cannot fail");
        out.extend_from_slice(mutations);
        self.finish(out)
    }

    /// Seals `plaintext` as an entry (what [`RedoKey::open`] opens; the
    /// decoder tests use it to reach the parser behind the tag).
    pub fn seal(&self, plaintext: &[u8]) -> Vec<u8> {
        let mut out = self.header(plaintext.len() + TAG_LEN);
        out[0] = REDO_SEALED;
        out.extend_from_slice(plaintext);
        self.finish(out)
    }

    /// [`RedoKey::seal`] as a version-3 entry (its plain text starts with
    /// `postcard(lsn, prev, tag)`, [`redo_plaintext_tagged`]).
    pub fn seal_tagged(&self, plaintext: &[u8]) -> Vec<u8> {
        let mut out = self.header(plaintext.len() + TAG_LEN);
        out.extend_from_slice(plaintext);
        self.finish(out)
    }

    /// The version byte and a fresh nonce, with room for `more` bytes.
    fn header(&self, more: usize) -> Vec<u8> {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut out = Vec::with_capacity(1 + NONCE_LEN + more);
        out.push(REDO_SEALED_TAGGED);
        out.extend_from_slice(&self.nonce_prefix);
        out.extend_from_slice(&n.to_le_bytes());
        out
    }

    /// Encrypts in place what follows the header and appends the tag.
    fn finish(&self, mut out: Vec<u8>) -> Vec<u8> {
        use chacha20poly1305::AeadInPlace;
        let (head, plain) = out.split_at_mut(1 + NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = head[1..].try_into().expect("the header holds a nonce");
        let version = head[0];
        let tag = self
            .cipher
            .encrypt_in_place_detached(&nonce.into(), &[version], plain)
            .expect("XChaCha20-Poly1305 seals any length a Vec holds");
        out.extend_from_slice(&tag);
        out
    }

    /// Checks, opens and decodes one entry. Never panics.
    pub fn open(&self, b: &[u8]) -> Result<RedoEntry, RedoError> {
        match b.first() {
            Some(&version @ (REDO_SEALED | REDO_SEALED_TAGGED)) => {
                use chacha20poly1305::AeadInPlace;
                if b.len() < 1 + NONCE_LEN + TAG_LEN {
                    return Err(RedoError::Truncated);
                }
                let (nonce, rest) = b[1..].split_at(NONCE_LEN);
                let (sealed, tag) = rest.split_at(rest.len() - TAG_LEN);
                let mut plain = sealed.to_vec();
                let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| RedoError::Truncated)?;
                let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| RedoError::Truncated)?;
                self.cipher
                    .decrypt_in_place_detached(&nonce.into(), &[version], &mut plain, &tag.into())
                    .map_err(|_| RedoError::Forged)?;
                if version == REDO_SEALED_TAGGED {
                    parse_tagged_plaintext(&plain)
                } else {
                    parse_plaintext(&plain)
                }
            }
            Some(&REDO_MACED) => {
                if b.len() < 1 + MAC_LEN {
                    return Err(RedoError::Truncated);
                }
                let (body, mac) = b.split_at(b.len() - MAC_LEN);
                let expected = blake3::keyed_hash(&self.secret, body);
                // blake3::Hash's equality is constant-time.
                let given =
                    blake3::Hash::from_bytes(mac.try_into().map_err(|_| RedoError::Truncated)?);
                if given != expected {
                    return Err(RedoError::Forged);
                }
                parse_plaintext(&body[1..])
            }
            Some(v) => Err(RedoError::Malformed(format!("unknown version {v}"))),
            None => Err(RedoError::Truncated),
        }
    }
}

/// A version-1 entry (plain text and keyed hash), as servers before
/// sealing wrote them: only for the tests of the upgrade path.
pub fn encode_redo_v1(
    secret: &[u8; KEY_LEN],
    lsn: Lsn,
    prev: &[(Soid, Lsn)],
    mutations: &[u8],
) -> Vec<u8> {
    let mut body = vec![REDO_MACED];
    body.extend_from_slice(&redo_plaintext(lsn, prev, mutations));
    let mac = blake3::keyed_hash(secret, &body);
    body.extend_from_slice(mac.as_bytes());
    body
}

/// Why a collected entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedoError {
    #[error("redo entry too short")]
    Truncated,
    #[error("redo entry fails authentication (not issued by this server's key)")]
    Forged,
    #[error("bad redo entry: {0}")]
    Malformed(String),
}

/// Decodes an entry's plain text. Never panics.
fn parse_plaintext(plain: &[u8]) -> Result<RedoEntry, RedoError> {
    let ((lsn, prev), rest) =
        postcard::take_from_bytes::<(Lsn, Vec<(Soid, Lsn)>)>(plain).map_err(malformed)?;
    let mutations = parse_write_set(rest)?;
    Ok(RedoEntry {
        lsn,
        tag: None,
        prev,
        mutations,
    })
}

fn malformed(e: postcard::Error) -> RedoError {
    RedoError::Malformed(e.to_string())
}

/// The write set that ends every entry's plain text, and nothing after it.
fn parse_write_set(rest: &[u8]) -> Result<Vec<Mutation>, RedoError> {
    let (mutations, extra) = postcard::take_from_bytes::<Vec<Mutation>>(rest).map_err(malformed)?;
    if !extra.is_empty() {
        return Err(RedoError::Malformed(format!(
            "{} trailing bytes",
            extra.len()
        )));
    }
    Ok(mutations)
}

/// A version-3 entry's plain text: `postcard(lsn, prev, tag) | mutations`.
fn parse_tagged_plaintext(plain: &[u8]) -> Result<RedoEntry, RedoError> {
    type Head = (Lsn, Vec<(Soid, Lsn)>, Option<crate::requests::RequestTag>);
    let ((lsn, prev, tag), rest) = postcard::take_from_bytes::<Head>(plain).map_err(malformed)?;
    let mutations = parse_write_set(rest)?;
    Ok(RedoEntry {
        lsn,
        tag,
        prev,
        mutations,
    })
}

/// The stamp keys of a write set, each once, in first-seen order.
pub fn stamp_keys(mutations: &[Mutation]) -> Vec<Soid> {
    let mut keys: Vec<Soid> = Vec::new();
    for k in mutations.iter().filter_map(Mutation::table_key) {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// Explicit stamps of the inodes written since the last durable manifest.
///
/// Invariant: for every key written by an operation with LSN >= R (the
/// `replay_from` of the newest durable manifest), the map holds the LSN of
/// the last such operation. Keys absent have their last writer below R.
#[derive(Default, Debug)]
pub struct Stamps {
    last_writer: HashMap<Soid, Lsn>,
}

impl Stamps {
    /// Stamps `keys` with `lsn` and returns each key's previous stamp (0:
    /// below the durable manifest, i.e. in a snapshot).
    pub fn stamp(&mut self, lsn: Lsn, keys: &[Soid]) -> Vec<(Soid, Lsn)> {
        keys.iter()
            .map(|k| (*k, self.last_writer.insert(*k, lsn).unwrap_or(0)))
            .collect()
    }

    /// Forgets stamps below `replay_from` once a manifest with that value
    /// is durable.
    pub fn forget_below(&mut self, replay_from: Lsn) {
        self.last_writer.retain(|_, lsn| *lsn >= replay_from);
    }

    pub fn len(&self) -> usize {
        self.last_writer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last_writer.is_empty()
    }
}

/// The Active Request List: the last `capacity` redo entries, in LSN
/// order (they are pushed under the lock that assigns LSNs).
#[derive(Debug)]
pub struct Arl {
    capacity: usize,
    entries: VecDeque<Redo>,
}

impl Arl {
    pub fn new(capacity: usize) -> Arl {
        Arl {
            capacity: capacity.max(1),
            entries: VecDeque::new(),
        }
    }

    pub fn push(&mut self, redo: Redo) {
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
        }
        self.entries.push_back(redo);
    }

    /// Entries with an LSN above `lsn`, oldest first.
    pub fn since(&self, lsn: Lsn) -> Vec<Redo> {
        let start = self.entries.partition_point(|r| r.lsn <= lsn);
        self.entries.range(start..).cloned().collect()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// What recovery does with one collected entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Replay the parts above their key's floor.
    Apply,
    /// Every part is already in a snapshot.
    Durable,
    /// A key's stamp does not match (its predecessor is missing or was
    /// discarded): thrown away whole. `partial` is set when some of its
    /// parts were already durable (the operation survives only in part).
    Discard { key: Soid, partial: bool },
}

/// Decides, in LSN order, which of `entries` (sorted by LSN, one per LSN:
/// the stamp keys and previous stamps of each) to replay. `floor(k)` is
/// the LSN up to which k's table snapshot holds every operation. Pure: see
/// the module docs for the rule.
pub fn plan_recovery(
    entries: &[(Lsn, &[(Soid, Lsn)])],
    floor: impl Fn(Soid) -> Lsn,
) -> Vec<Decision> {
    let mut replayed: HashMap<Soid, Lsn> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for (lsn, prev) in entries {
        let mut live: Vec<Soid> = Vec::new();
        let mut mismatch = None;
        let mut some_durable = false;
        for (key, prev_stamp) in prev.iter() {
            let f = floor(*key);
            if *lsn <= f {
                some_durable = true;
                continue;
            }
            let matches = match replayed.get(key) {
                Some(current) => current == prev_stamp,
                None => *prev_stamp <= f,
            };
            if !matches && mismatch.is_none() {
                mismatch = Some(*key);
            }
            live.push(*key);
        }
        out.push(match mismatch {
            Some(key) => Decision::Discard {
                key,
                partial: some_durable,
            },
            None if live.is_empty() => Decision::Durable,
            None => {
                for k in live {
                    replayed.insert(k, *lsn);
                }
                Decision::Apply
            }
        });
    }
    out
}

/// Inclusive ranges of LSNs in `from..=max(lsns)` that are not in `lsns`
/// (sorted, deduplicated).
pub fn missing_ranges(lsns: &[Lsn], from: Lsn) -> Vec<(Lsn, Lsn)> {
    let mut out = Vec::new();
    let mut next = from;
    for &l in lsns.iter().filter(|l| **l >= from) {
        if l > next {
            out.push((next, l - 1));
        }
        next = next.max(l + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inode::Inode;
    use proptest::prelude::*;
    use sextant_types::FileType;
    use std::collections::BTreeSet;

    fn soid(n: u64) -> Soid {
        Soid::from_u128(n as u128 + 100)
    }

    #[test]
    fn redo_round_trip_and_forgery() {
        let secret = [7u8; KEY_LEN];
        let m = vec![
            Mutation::DeleteInode { soid: soid(1) },
            Mutation::PutInode {
                soid: soid(2),
                inode: Inode {
                    ftype: FileType::Regular,
                    perm: 0o644,
                    uid: 1,
                    gid: 2,
                    nlink: 1,
                    size: 3,
                    atime: Default::default(),
                    mtime: Default::default(),
                    ctime: Default::default(),
                    parent: soid(3),
                    name: crate::inode::Name::new(b"x"),
                    extra: None,
                },
            },
        ];
        let prev = vec![(soid(1), 4), (soid(2), 0)];
        let key = RedoKey::new(&secret, [1; 16]);
        let b = key.encode(9, &prev, &encode_mutations(&m));
        let e = key.open(&b).unwrap();
        assert_eq!((e.lsn, &e.prev, &e.mutations), (9, &prev, &m));
        // Another server's key (or another prefix's: the same key) opens
        // it or refuses it as forged, never as something else.
        let other = RedoKey::new(&[8u8; KEY_LEN], [1; 16]);
        assert_eq!(other.open(&b), Err(RedoError::Forged));
        assert_eq!(
            RedoKey::new(&secret, [2; 16]).open(&b).map(|e| e.lsn),
            Ok(9)
        );
        let mut flipped = b.clone();
        for at in [3, 30, b.len() - 1] {
            flipped[at] ^= 1;
            assert_eq!(key.open(&flipped), Err(RedoError::Forged), "byte {at}");
            flipped[at] ^= 1;
        }
        assert_eq!(key.open(&b[..10]), Err(RedoError::Truncated));
        // Version-1 entries (before sealing) still open, with the key's
        // hash; a forged one does not.
        let v1 = encode_redo_v1(&secret, 9, &prev, &encode_mutations(&m));
        assert_eq!(key.open(&v1).map(|e| e.mutations), Ok(m.clone()));
        assert_eq!(other.open(&v1), Err(RedoError::Forged));
    }

    #[test]
    fn sealed_entries_hide_names_and_never_repeat_a_nonce() {
        let key = RedoKey::new(&[7u8; KEY_LEN], [9; 16]);
        let name = b"secret-payroll-2027.xlsx";
        let m = vec![Mutation::DeleteDentry {
            parent: soid(1),
            name: name.to_vec().into(),
        }];
        let plain = redo_plaintext(5, &[], &encode_mutations(&m));
        assert!(plain.windows(name.len()).any(|w| w == name));
        let a = key.encode(5, &[], &encode_mutations(&m));
        let b = key.encode(5, &[], &encode_mutations(&m));
        for e in [&a, &b] {
            assert!(
                !e.windows(name.len()).any(|w| w == name),
                "the name is visible"
            );
            assert!(
                !e.windows(8).any(|w| w == &plain[..8]),
                "the plain text is visible"
            );
        }
        assert_ne!(
            a[1..1 + NONCE_LEN],
            b[1..1 + NONCE_LEN],
            "a nonce was used twice"
        );
        assert_ne!(a, b);
        assert_eq!(key.open(&a), key.open(&b));
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = RedoKey::new(&[0u8; KEY_LEN], [0; 16]).open(&b);
        }
    }

    #[test]
    fn arl_keeps_the_last_k() {
        let mut a = Arl::new(3);
        for lsn in 1..=5 {
            a.push(Redo {
                lsn,
                bytes: Arc::from(vec![lsn as u8]),
            });
        }
        let lsns = |v: Vec<Redo>| v.iter().map(|r| r.lsn).collect::<Vec<_>>();
        assert_eq!(lsns(a.since(0)), vec![3, 4, 5]);
        assert_eq!(lsns(a.since(4)), vec![5]);
        assert_eq!(lsns(a.since(5)), Vec::<Lsn>::new());
    }

    #[test]
    fn missing_ranges_finds_gaps() {
        assert_eq!(
            missing_ranges(&[3, 4, 7, 9], 1),
            vec![(1, 2), (5, 6), (8, 8)]
        );
        assert_eq!(missing_ranges(&[3, 4], 4), vec![]);
        assert_eq!(missing_ranges(&[], 4), vec![]);
    }

    #[test]
    fn the_papers_mismatch_cases() {
        // Snapshot holds everything up to 10 (floor). Key a: 11 → 12 → 13.
        let a = soid(1);
        let b = soid(2);
        let e11 = [(a, 0)];
        let e12 = [(a, 11), (b, 0)];
        let e13 = [(a, 12)];
        let e14 = [(b, 12)];
        let floor = |_| 10;
        // All there: all applied.
        let all = plan_recovery(&[(11, &e11), (12, &e12), (13, &e13), (14, &e14)], floor);
        assert!(all.iter().all(|d| *d == Decision::Apply));
        // 11 lost: 12 mismatches on a, and 13 (built on 12) and 14 (on b, last
        // written by the discarded 12) are discarded with it.
        let lost = plan_recovery(&[(12, &e12), (13, &e13), (14, &e14)], floor);
        assert!(lost
            .iter()
            .all(|d| matches!(d, Decision::Discard { partial: false, .. })));
        // A snapshot that already holds 12 on b's table: 12 is partly
        // durable, and 14 builds on b's snapshot, so it applies.
        let floor_b = |k| if k == b { 12 } else { 10 };
        let partial = plan_recovery(&[(12, &e12), (13, &e13), (14, &e14)], floor_b);
        assert_eq!(
            partial[0],
            Decision::Discard {
                key: a,
                partial: true
            }
        );
        assert_eq!(partial[2], Decision::Apply);
        // Everything on b's table at or below its snapshot: durable.
        assert_eq!(
            plan_recovery(&[(12, &[(b, 0)])], floor_b),
            vec![Decision::Durable]
        );
    }

    /// A random history of operations over a few keys in a few tables, a
    /// crash with per-table snapshots, stamps pruned at durable manifests,
    /// entries held by random subsets of clients, and random dead clients.
    #[derive(Debug, Clone)]
    struct Scenario {
        /// Each operation's keys (indices < KEYS).
        ops: Vec<Vec<u8>>,
        /// Snapshot LSN per table, as a fraction of the history.
        snap: Vec<u8>,
        /// How far manifests got (fraction of min snapshot).
        manifest: Vec<u8>,
        /// Which clients hold each entry (bit set; the owner always).
        holders: Vec<u8>,
        dead: u8,
    }

    const KEYS: u8 = 6;
    const TABLES: u8 = 3;

    fn scenario() -> impl Strategy<Value = Scenario> {
        (1usize..40).prop_flat_map(|n| {
            (
                proptest::collection::vec(
                    proptest::collection::btree_set(0..KEYS, 1..4)
                        .prop_map(|s| s.into_iter().collect::<Vec<_>>()),
                    n,
                ),
                proptest::collection::vec(any::<u8>(), TABLES as usize),
                proptest::collection::vec(any::<u8>(), n),
                proptest::collection::vec(1u8..=255, n),
                any::<u8>(),
            )
                .prop_map(|(ops, snap, manifest, holders, dead)| Scenario {
                    ops,
                    snap,
                    manifest,
                    holders,
                    dead,
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn model_check(s in scenario()) {
            let n = s.ops.len() as u64;
            let table = |k: u8| k % TABLES;
            let key = |k: u8| soid(k as u64);
            // Snapshot LSN per table, and the durable manifest's replay_from
            // at crash: every operation below it is in every snapshot.
            let snap: Vec<Lsn> = s.snap.iter().map(|f| *f as u64 * n / 255).collect();
            let r_crash = snap.iter().copied().min().unwrap_or(0) + 1;
            let floor = |k: Soid| -> Lsn {
                let i = (0..KEYS).find(|i| key(*i) == k).unwrap();
                snap[table(i) as usize]
            };
            // Commit: exact previous writers, and the previous stamps the
            // server recorded (pruned below the manifest durable then; the
            // manifests' replay_from only grows, up to r_crash).
            let mut stamps = Stamps::default();
            let mut exact_last: HashMap<u8, Lsn> = HashMap::new();
            let mut exact_prev: Vec<Vec<(u8, Lsn)>> = Vec::new();
            let mut recorded: Vec<Vec<(Soid, Lsn)>> = Vec::new();
            let mut r_now = 1;
            for (i, ks) in s.ops.iter().enumerate() {
                let lsn = i as u64 + 1;
                let r_here = (s.manifest[i] as u64 * r_crash / 255).max(1).min(lsn);
                if r_here > r_now {
                    r_now = r_here;
                    stamps.forget_below(r_now);
                }
                let keys: Vec<Soid> = ks.iter().map(|k| key(*k)).collect();
                recorded.push(stamps.stamp(lsn, &keys));
                exact_prev.push(ks.iter().map(|k| (*k, exact_last.insert(*k, lsn).unwrap_or(0))).collect());
            }
            // Collected: entries at or above r_crash held by a live client.
            let mut collected: Vec<(Lsn, &[(Soid, Lsn)])> = Vec::new();
            let mut lost = BTreeSet::new();
            for (i, prev) in recorded.iter().enumerate() {
                let lsn = i as u64 + 1;
                if lsn < r_crash {
                    continue;
                }
                if s.holders[i] & !s.dead != 0 {
                    collected.push((lsn, prev));
                } else {
                    lost.insert(lsn);
                }
            }
            let decisions = plan_recovery(&collected, floor);
            let applied: BTreeSet<Lsn> = collected
                .iter()
                .zip(&decisions)
                .filter(|(_, d)| **d == Decision::Apply)
                .map(|(e, _)| e.0)
                .collect();
            // Soundness: an applied entry's exact predecessor on each of its
            // live keys is in the snapshot or was applied.
            for lsn in &applied {
                for (k, p) in &exact_prev[*lsn as usize - 1] {
                    if *lsn <= floor(key(*k)) {
                        continue;
                    }
                    prop_assert!(*p <= floor(key(*k)) || applied.contains(p),
                        "entry {} applied over missing predecessor {} on key {}", lsn, p, k);
                }
            }
            // Completeness: an entry is thrown away only if some predecessor
            // on a live key is neither in the snapshot nor applied.
            for ((lsn, _), d) in collected.iter().zip(&decisions) {
                if let Decision::Discard { .. } = d {
                    let justified = exact_prev[*lsn as usize - 1].iter().any(|(k, p)| {
                        *lsn > floor(key(*k)) && *p > floor(key(*k)) && !applied.contains(p)
                    });
                    prop_assert!(justified, "entry {} discarded without cause", lsn);
                }
            }
            // Nothing lost: everything above the floors is applied.
            if lost.is_empty() {
                for (lsn, prev) in &collected {
                    let live = prev.iter().any(|(k, _)| *lsn > floor(*k));
                    prop_assert_eq!(applied.contains(lsn), live);
                }
            }
        }
    }
}
