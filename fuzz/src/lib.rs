//! Helpers shared by the fuzz targets: `Arbitrary` mirrors of the engine's
//! record types (the engine crate does not depend on `arbitrary`), builders
//! for valid on-disk framing, and checksum "reseal" helpers so that fuzzed
//! bytes get past the crc32c checks and reach the parsers behind them.

use arbitrary::{Arbitrary, Unstructured};
use sextant_engine::inode::{Dentry, Inode, InodeExtra};
use sextant_engine::journal::{self, Lsn};
use sextant_engine::record::Mutation;
use sextant_engine::soid::{DirExtents, GlobalHighWater};
use sextant_engine::store::{MemStore, Store};
use sextant_types::{FileType, Nanos, Soid, SoidRange};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// Arbitrary mirrors
// ---------------------------------------------------------------------------

#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct ASoid(pub u128);

impl From<ASoid> for Soid {
    fn from(s: ASoid) -> Soid {
        Soid::from_u128(s.0)
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct AFileType(pub u8);

impl From<AFileType> for FileType {
    fn from(t: AFileType) -> FileType {
        FileType::ALL[usize::from(t.0) % FileType::ALL.len()]
    }
}

#[derive(Arbitrary, Debug, Clone)]
pub struct AExtra {
    pub symlink: Option<Vec<u8>>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub extents: Vec<(u128, u128)>,
    pub slots_full: bool,
    pub links: Vec<(ASoid, Vec<u8>)>,
}

#[derive(Arbitrary, Debug, Clone)]
pub struct AInode {
    pub ftype: AFileType,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub parent: ASoid,
    pub name: Vec<u8>,
    pub extra: Option<AExtra>,
}

impl From<AInode> for Inode {
    fn from(a: AInode) -> Inode {
        let mut inode = Inode {
            ftype: a.ftype.into(),
            perm: a.perm,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            size: a.size,
            atime: Nanos(a.atime),
            mtime: Nanos(a.mtime),
            ctime: Nanos(a.ctime),
            parent: a.parent.into(),
            name: a.name.into(),
            extra: a.extra.map(|e| {
                Box::new(InodeExtra {
                    symlink: e.symlink.map(Vec::into_boxed_slice),
                    xattrs: e
                        .xattrs
                        .into_iter()
                        .map(|(k, v)| (k.into_boxed_slice(), v.into_boxed_slice()))
                        .collect(),
                    extents: DirExtents {
                        ranges: e
                            .extents
                            .into_iter()
                            .map(|(a, b)| SoidRange {
                                first: Soid::from_u128(a.min(b)),
                                last: Soid::from_u128(a.max(b)),
                            })
                            .collect(),
                        slots_full: e.slots_full,
                    },
                    links: e
                        .links
                        .into_iter()
                        .map(|(p, n)| (p.into(), n.into()))
                        .collect(),
                    rdev: 0,
                })
            }),
        };
        inode.set_rdev(a.rdev);
        inode
    }
}

#[derive(Arbitrary, Debug, Clone)]
pub struct ADentry {
    pub child: ASoid,
    pub ftype: AFileType,
    pub name: Vec<u8>,
}

impl From<ADentry> for Dentry {
    fn from(d: ADentry) -> Dentry {
        Dentry {
            child: d.child.into(),
            ftype: d.ftype.into(),
            name: d.name.into(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
pub enum AMutation {
    PutInode { soid: ASoid, inode: AInode },
    DeleteInode { soid: ASoid },
    PutDentry { parent: ASoid, dentry: ADentry },
    DeleteDentry { parent: ASoid, name: Vec<u8> },
    HighWater(u128, u128, u128),
}

impl From<AMutation> for Mutation {
    fn from(m: AMutation) -> Mutation {
        match m {
            AMutation::PutInode { soid, inode } => Mutation::PutInode {
                soid: soid.into(),
                inode: inode.into(),
            },
            AMutation::DeleteInode { soid } => Mutation::DeleteInode { soid: soid.into() },
            AMutation::PutDentry { parent, dentry } => Mutation::PutDentry {
                parent: parent.into(),
                dentry: dentry.into(),
            },
            AMutation::DeleteDentry { parent, name } => Mutation::DeleteDentry {
                parent: parent.into(),
                name: name.into_boxed_slice(),
            },
            AMutation::HighWater(a, b, c) => Mutation::HighWater(GlobalHighWater {
                too_deep_roots: a,
                too_wide_buckets: b,
                catch_all: c,
            }),
        }
    }
}

// ---------------------------------------------------------------------------
// Journal framing
// ---------------------------------------------------------------------------

pub const SEGMENT_HEADER_LEN: usize = 32;
pub const BATCH_HEADER_LEN: usize = 24;

/// The 32-byte segment header (see `journal.rs`): magic, seq, first_lsn,
/// reserved, crc32c of the 28 bytes before.
pub fn segment_header(seq: u64, first_lsn: Lsn) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[..8].copy_from_slice(b"SXTJSEG1");
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

pub fn segment_name(seq: u64) -> String {
    format!("journal/{seq:020}.log")
}

/// Rewrites the crc of the batch at the start of `b` (if its header and
/// declared payload fit) so it passes the checksum test.
pub fn reseal_batch(b: &mut [u8]) {
    if b.len() < BATCH_HEADER_LEN {
        return;
    }
    let len = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    let Some(payload) = b.get(BATCH_HEADER_LEN..BATCH_HEADER_LEN + len) else {
        return;
    };
    let mut meta = [0u8; 16];
    meta[..8].copy_from_slice(&b[8..16]);
    meta[8..12].copy_from_slice(&b[16..20]);
    meta[12..16].copy_from_slice(&b[4..8]);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&meta), payload);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
}

/// One batch described structurally; encoded with a correct checksum.
#[derive(Arbitrary, Debug, Clone)]
pub struct ABatch {
    /// `None`: continue the LSN sequence; `Some(x)`: use `x` as first_lsn.
    pub first_lsn: Option<u64>,
    /// `None`: the real record count.
    pub count: Option<u32>,
    pub records: Vec<Vec<u8>>,
    /// Bytes appended to the payload (makes "trailing bytes" reachable).
    pub junk: Vec<u8>,
    /// Keep only this many bytes of the encoded batch (a torn write).
    pub cut: Option<u16>,
}

#[derive(Arbitrary, Debug, Clone)]
pub struct ASegment {
    /// `None`: the correct sequence number.
    pub seq: Option<u64>,
    /// `None`: continue the LSN sequence.
    pub first_lsn: Option<u64>,
    pub batches: Vec<ABatch>,
    /// Raw bytes appended after the batches.
    pub tail: Vec<u8>,
}

/// Encodes segments whose checksums are all valid (unless a batch is cut)
/// into a fresh `MemStore`.
pub fn build_journal(segments: &[ASegment], start_lsn: u64) -> MemStore {
    let store = MemStore::new();
    let mut next = start_lsn;
    for (i, seg) in segments.iter().enumerate() {
        let seq = i as u64 + 1;
        let first = seg.first_lsn.unwrap_or(next);
        let mut bytes = segment_header(seg.seq.unwrap_or(seq), first).to_vec();
        next = first;
        for b in &seg.batches {
            let first_lsn = b.first_lsn.unwrap_or(next);
            let mut payload = Vec::new();
            for r in &b.records {
                payload.extend_from_slice(&(r.len() as u32).to_le_bytes());
                payload.extend_from_slice(r);
            }
            payload.extend_from_slice(&b.junk);
            let count = b.count.unwrap_or(b.records.len() as u32);
            let mut enc = Vec::new();
            journal::encode_batch(first_lsn, count, &payload, &mut enc);
            if let Some(cut) = b.cut {
                enc.truncate(usize::from(cut));
            }
            bytes.extend_from_slice(&enc);
            next = first_lsn.wrapping_add(u64::from(count));
        }
        bytes.extend_from_slice(&seg.tail);
        let mut w = store.open_log(&segment_name(seq)).unwrap();
        w.append(&bytes).unwrap();
        w.sync().unwrap();
    }
    store
}

/// Replays `store` from `from_lsn` twice and checks what must hold whatever
/// the bytes: no panic, LSNs handed out strictly increasing and `>=
/// from_lsn`, and a second replay (after the torn tail was cut) agrees with
/// the first.
pub fn check_replay(store: &MemStore, from_lsn: Lsn) {
    let run = || {
        let mut recs: Vec<(Lsn, Vec<u8>)> = Vec::new();
        let r = journal::replay(store, from_lsn, |lsn, rec| {
            recs.push((lsn, rec.to_vec()));
            Ok(())
        });
        (r, recs)
    };
    let (first, recs1) = run();
    for w in recs1.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "LSNs not increasing: {} then {}",
            w[0].0,
            w[1].0
        );
    }
    assert!(recs1.iter().all(|(l, _)| *l >= from_lsn));
    if let Ok(out) = first {
        assert_eq!(out.records, recs1.len() as u64);
        let (second, recs2) = run();
        let second = second.expect("replay after a successful replay failed");
        assert_eq!(recs1, recs2, "second replay differs");
        assert_eq!(second.next_lsn, out.next_lsn);
    }
}

/// Reads `n` bytes from `u`, or whatever is left.
pub fn take_bytes<'a>(u: &mut Unstructured<'a>, n: usize) -> &'a [u8] {
    let n = n.min(u.len());
    u.bytes(n).unwrap_or(&[])
}

// ---------------------------------------------------------------------------
// Snapshot framing
// ---------------------------------------------------------------------------

pub const SNAPSHOT_HEADER_LEN: usize = 64;

/// A snapshot with `body` as its (postcard) body: correct magic, lengths
/// and checksum, so `decode_snapshot` reaches the body parser.
pub fn seal_snapshot(id: u64, first: u128, last: u128, lsn: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body.len() + 4);
    out.extend_from_slice(b"SXTSNAP1");
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&first.to_be_bytes());
    out.extend_from_slice(&last.to_be_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Appends crc32c of `b` (the trailer `AttrFilters` and snapshots use).
pub fn with_crc(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    let crc = crc32c::crc32c(b);
    v.extend_from_slice(&crc.to_le_bytes());
    v
}
