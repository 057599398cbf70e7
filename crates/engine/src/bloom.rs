//! Bloom filters and the per-table attribute filter set (Magellan §4.3).
//! Pure logic, no I/O.
//!
//! Hand-written on purpose: the filters, their hashing and their byte layout
//! are part of Sextant's on-disk table format, so they must not change with
//! the version of some third-party crate. The only outside pieces are the
//! xxh3 hash (a fixed, specified function) and crc32c.
//!
//! # What this module owns
//!
//! * [`BloomFilter`]: a plain, static Bloom filter over 64-bit hashes, with a
//!   self-describing encoding.
//! * [`AttrFilters`]: the set of filters one metadata table keeps so that a
//!   query can skip the whole table. It is built once from all of the
//!   table's items when the table is written back (there is no delete; a
//!   changed table gets new filters) and answers "may some item match?".
//!
//! # Invariant: no false negatives
//!
//! Every `may_*` predicate answers `true` whenever some item the set was
//! built from satisfies the predicate. `false` is a proof that no item does;
//! `true` only means "maybe" (the table must be searched). Everything below
//! (over-approximating range coverings, capping filter sizes, turning
//! undecodable-but-skippable filters into match-all filters, needles that are
//! too short) only ever adds "maybe" answers.
//!
//! # Bloom filter
//!
//! `m` bits (a multiple of 64, stored as `Vec<u64>`; bit `i` is bit `i % 64`
//! of word `i / 64`), `k` probes, `1 ≤ k ≤ 16`. Probe positions come from one
//! 64-bit hash `h` by double hashing (Kirsch–Mitzenmacher):
//! `h2 = fmix64(h ^ 0x9E37_79B9_7F4A_7C15) | 1` (MurmurHash3's 64-bit
//! finalizer, made odd), `x_i = h + i·h2 (mod 2^64)` for `i in 0..k`, and
//! position `i` is `(x_i · m) >> 64` (multiply-shift range reduction: no
//! division, no modulo). Sizing from `n` distinct keys and `b` bits per key:
//! `m = max(64, n·b)` rounded up to 64 (optionally capped), and
//! `k = round(m/n · ln 2)` clamped to `1..=16`. A filter sized for 0 keys has
//! no bits and answers "no" to everything; inserting into it turns it into a
//! match-all filter (never a silent loss). A *match-all* filter answers
//! "maybe" to everything.
//!
//! Keys are hashed with `xxh3_64_with_seed(bytes, seed)` where the seed is a
//! per-attribute domain tag (`SEED_*` constants); integers are hashed as
//! their little-endian bytes. These choices are part of the format.
//!
//! ## `BloomFilter` encoding (LevelDB style: self-describing, skippable)
//!
//! ```text
//! kind:u8  body_len:u32le  body[body_len]
//! kind 1 (standard v1): body = k:u8  bits:u32le  words[bits/64]:u64le
//!                       (bits == 64 · number of words; 1 ≤ k ≤ 16 unless bits == 0)
//! kind 0 (match-all):   body ignored (written empty)
//! any other kind:       decoded as a MATCH-ALL filter, body skipped
//! ```
//!
//! Unknown kinds decode to a match-all filter (not an error) so that a newer
//! writer can introduce a new filter kind and an older reader stays correct,
//! only less selective. Truncation, an inconsistent length or a bad `k` are
//! errors. Lengths are checked against the remaining input before anything
//! is allocated, so decoding never allocates more than the input's size.
//!
//! # `AttrFilters` contents and sizing
//!
//! Bits per key target about 1% false positives for an exact-name lookup
//! (10 bits/key → k = 7, theoretical 0.82%).
//!
//! | attribute | representation | sized by |
//! |---|---|---|
//! | name (exact and ASCII-case-insensitive) | one Bloom filter, 10 bits/key | distinct keys |
//! | name trigrams (substring) | Bloom filter, 8 bits/key, capped at 48 bits/item | distinct trigrams |
//! | extension | Bloom filter, 10 bits/key | distinct extensions |
//! | uid, gid | Bloom filters, 10 bits/key | distinct ids |
//! | xattr keys | Bloom filter, 10 bits/key | distinct keys |
//! | type | exact 7-bit mask | — |
//! | size | exact min/max + exact bucket bitmap (520 buckets) | fixed ≤ 72 bytes |
//! | atime, mtime, ctime | exact min/max + hierarchical-bucket Bloom filter, 12 bits/key | distinct buckets |
//!
//! Names: the key `lower(name)` (ASCII lowercase, seed `SEED_NAME_CI`) is
//! inserted for every item, and additionally the key `name` (seed
//! `SEED_NAME_EXACT`) for names that contain an ASCII uppercase letter. An
//! exact query for a name without uppercase letters probes the lowercase
//! key (a stored name equal to it is its own lowercase), a name with
//! uppercase letters probes the exact key. So the common all-lowercase table
//! pays 10 bits/item for both lookups; the price is that an exact query
//! `foo` also "maybe"-matches a stored `Foo`.
//!
//! Substrings: every 3-byte window of `lower(name)`; a needle must have all
//! its (at most 64 first) trigrams present. A needle's trigrams must all be
//! false positives together, so a higher per-trigram rate (8 bits/key,
//! ~2%) is acceptable; the cap keeps pathological name sets bounded.
//!
//! Extension: the bytes after the last `.` of the name, ASCII-lowercased;
//! names without `.` have the empty extension. A queried extension that
//! itself contains `.` cannot be an extension by this definition; the
//! predicate answers `true` for it (conservative).
//!
//! # Range bucketing
//!
//! **Sizes**: bucket `0` is size 0; size `v ≥ 1` is in log2 class
//! `c = 64 - lzcnt(v)` (`2^(c-1) ≤ v < 2^c`, `c` in `1..=64`) and sub-bucket
//! `j = (v - 2^(c-1)) >> max(c-1-3, 0)` (8 sub-buckets per class, i.e. 12.5%
//! resolution); bucket index `8c + j < 520`. The index is monotone in `v`, so
//! the set of occupied buckets is kept exactly as a bitmap and an inclusive
//! range `[lo, hi]` (first clipped to the exact `[min, max]`) is answered by
//! testing bits `bucket(lo)..=bucket(hi)`: at most 9 word operations, no false
//! positives beyond bucket resolution. This is cheaper and strictly better
//! than hashing buckets into a Bloom filter, since there are only 520 buckets.
//!
//! **Times** (`Nanos`, may be negative): seconds `s = floor(ns / 1e9)`; ten
//! levels of buckets of `2^sh` seconds with `sh = 12, 14, …, 30` (≈ 68 min,
//! 4.5 h, 18 h, 3 days, 12 days, 48 days, 194 days, 2.1 y, 8.5 y, 34 y); each
//! value is inserted as the key `(level, s >> sh)` at every level (seed
//! `SEED_TIME + level`, bucket as i64le) into that attribute's filter. A
//! query `[lo, hi]` is first clipped to the exact `[min, max]` of that
//! attribute (empty → `false`), then covered by buckets: the finest level `L`
//! at which the range touches at most 8 buckets (or the top level, which has
//! at most 18 buckets for any i64 range) gives the coarse buckets; a coarse
//! bucket fully inside the range is probed as is, a partially covered one
//! (only the two ends) is refined into its 4 children at level `L-1`, and
//! once more at `L-2`, where partially covered buckets are probed whole
//! (over-approximation by at most one `L-2` bucket per end). Every second of
//! the range lies in a probed bucket, and every value was inserted at every
//! level, so there are no false negatives. Probes per query: at most
//! 8 + 2·(3 + 4) = 22 (30 in the degenerate top-level case).
//!
//! # `AttrFilters` encoding
//!
//! ```text
//! magic "SXAF"  version:u8 (=1)  n_items:u64le
//! type_mask:u8                      bit t set ⇔ some item has FileType t (t = `as u8`)
//! size_min:u64le size_max:u64le     (both 0 for an empty set)
//! size_first_word:u8 size_nwords:u8 size_words[size_nwords]:u64le   (first+n ≤ 9)
//! 3 × (min:i64le max:i64le)         atime, mtime, ctime
//! 9 × BloomFilter                   name, trigram, ext, uid, gid, xattr, atime, mtime, ctime
//! crc32c:u32le                      over all preceding bytes
//! ```
//!
//! [`AttrFilters::decode`] returns an error on a bad magic, an unknown
//! container version, a checksum mismatch, truncation, trailing bytes or an
//! inconsistent field; callers must treat an error as "maybe" for every
//! predicate (search the table, or rebuild the filters), for example with
//! [`AttrFilters::match_all`]. Inside a valid container, a filter of an
//! unknown kind decodes to a match-all filter for that attribute only —
//! consistent with [`BloomFilter::decode`].
//!
//! `AttrFilters::default()` (equal to `build` of no items) is the filter set
//! of an empty table: it answers `false` to every predicate except the
//! always-`true` cases above (substring needles shorter than 3 bytes,
//! extensions containing '.').

use std::f64::consts::LN_2;
use std::mem::size_of;

use sextant_types::{FileType, Nanos};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Why a filter encoding could not be decoded. Callers should treat any of
/// these as "maybe" for every predicate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BloomDecodeError {
    #[error("filter encoding is truncated")]
    Truncated,
    #[error("filter set has a bad magic number")]
    BadMagic,
    #[error("unsupported filter set version {0}")]
    UnsupportedVersion(u8),
    #[error("filter set checksum mismatch")]
    ChecksumMismatch,
    #[error("corrupt filter encoding: {0}")]
    Corrupt(&'static str),
}

// ---------------------------------------------------------------------------
// BloomFilter
// ---------------------------------------------------------------------------

const KIND_MATCH_ALL: u8 = 0;
const KIND_STANDARD_V1: u8 = 1;
const MAX_K: u8 = 16;
/// Largest bit count the encoding can describe (bits is a u32, multiple of 64).
const MAX_BITS: u64 = (u32::MAX as u64) & !63;
/// Bytes before a filter's body: kind + body_len.
const BLOOM_HEADER: usize = 5;

/// A static Bloom filter over 64-bit hashes. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BloomFilter {
    words: Vec<u64>,
    k: u8,
    match_all: bool,
}

/// MurmurHash3's 64-bit finalizer.
#[inline]
pub(crate) fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Bit positions probed for hash `h` in a filter of `m > 0` bits.
#[inline]
fn probe_positions(h: u64, k: u8, m: u64) -> impl Iterator<Item = u64> {
    let h2 = fmix64(h ^ 0x9E37_79B9_7F4A_7C15) | 1;
    (0..u64::from(k)).map(move |i| {
        let x = h.wrapping_add(i.wrapping_mul(h2));
        ((u128::from(x) * u128::from(m)) >> 64) as u64
    })
}

impl BloomFilter {
    /// A filter for `distinct_items` keys at `bits_per_item` bits each.
    pub fn new(distinct_items: usize, bits_per_item: u32) -> BloomFilter {
        Self::with_max_bits(distinct_items, bits_per_item, MAX_BITS)
    }

    /// Like [`BloomFilter::new`] but with at most `max_bits` bits (at least
    /// 64 when `distinct_items > 0`); `k` follows the actual bits per key.
    pub fn with_max_bits(distinct_items: usize, bits_per_item: u32, max_bits: u64) -> BloomFilter {
        if distinct_items == 0 {
            return BloomFilter {
                words: Vec::new(),
                k: 1,
                match_all: false,
            };
        }
        let n = distinct_items as u64;
        let want = n.saturating_mul(u64::from(bits_per_item.max(1)));
        let bits = want.min(max_bits).clamp(64, MAX_BITS);
        let nwords = bits.div_ceil(64);
        let m = nwords * 64;
        let k = ((m as f64 / n as f64) * LN_2)
            .round()
            .clamp(1.0, f64::from(MAX_K)) as u8;
        BloomFilter {
            words: vec![0; nwords as usize],
            k,
            match_all: false,
        }
    }

    /// A filter that answers "maybe" to everything.
    pub fn match_all() -> BloomFilter {
        BloomFilter {
            words: Vec::new(),
            k: 1,
            match_all: true,
        }
    }

    /// Whether this filter answers "maybe" to everything.
    pub fn is_match_all(&self) -> bool {
        self.match_all
    }

    /// Number of probes per key.
    pub fn k(&self) -> u32 {
        u32::from(self.k)
    }

    /// Number of bits (0 for an empty or match-all filter).
    pub fn bits(&self) -> u64 {
        self.words.len() as u64 * 64
    }

    /// Adds the key with hash `h`. Inserting into a filter with no bits
    /// (sized for 0 keys) makes it match-all rather than losing the key.
    pub fn insert_hash(&mut self, h: u64) {
        if self.match_all {
            return;
        }
        if self.words.is_empty() {
            self.match_all = true;
            return;
        }
        let m = self.bits();
        for pos in probe_positions(h, self.k, m) {
            self.words[(pos >> 6) as usize] |= 1u64 << (pos & 63);
        }
    }

    /// `false` only if the key with hash `h` was certainly never inserted.
    pub fn may_contain_hash(&self, h: u64) -> bool {
        if self.match_all {
            return true;
        }
        if self.words.is_empty() {
            return false;
        }
        let m = self.bits();
        probe_positions(h, self.k, m)
            .all(|pos| self.words[(pos >> 6) as usize] & (1u64 << (pos & 63)) != 0)
    }

    fn heap_bytes(&self) -> usize {
        self.words.len() * size_of::<u64>()
    }

    /// Bytes of memory this filter occupies (struct plus bit array).
    pub fn memory_bytes(&self) -> usize {
        size_of::<Self>() + self.heap_bytes()
    }

    /// Appends the encoding described in the module documentation.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if self.match_all {
            out.push(KIND_MATCH_ALL);
            out.extend_from_slice(&0u32.to_le_bytes());
            return;
        }
        let body_len = 1 + 4 + self.words.len() * 8;
        out.push(KIND_STANDARD_V1);
        out.extend_from_slice(&(body_len as u32).to_le_bytes());
        out.push(self.k);
        out.extend_from_slice(&(self.bits() as u32).to_le_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Decodes one filter from the front of `bytes`; returns it and the
    /// number of bytes consumed. Unknown kinds give a match-all filter.
    pub fn decode(bytes: &[u8]) -> Result<(BloomFilter, usize), BloomDecodeError> {
        let header = bytes
            .get(..BLOOM_HEADER)
            .ok_or(BloomDecodeError::Truncated)?;
        let kind = header[0];
        let body_len = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let total = BLOOM_HEADER
            .checked_add(body_len)
            .ok_or(BloomDecodeError::Truncated)?;
        let body = bytes
            .get(BLOOM_HEADER..total)
            .ok_or(BloomDecodeError::Truncated)?;
        match kind {
            KIND_STANDARD_V1 => {
                if body.len() < 5 {
                    return Err(BloomDecodeError::Corrupt("bloom body too short"));
                }
                let k = body[0];
                let bits = u32::from_le_bytes([body[1], body[2], body[3], body[4]]);
                let rest = &body[5..];
                if rest.len() % 8 != 0 {
                    return Err(BloomDecodeError::Corrupt(
                        "bloom words not a multiple of 8 bytes",
                    ));
                }
                let nwords = rest.len() / 8;
                if u64::from(bits) != nwords as u64 * 64 {
                    return Err(BloomDecodeError::Corrupt(
                        "bloom bit count does not match its words",
                    ));
                }
                if k > MAX_K || (nwords > 0 && k == 0) {
                    return Err(BloomDecodeError::Corrupt("bloom probe count out of range"));
                }
                let words = rest
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect();
                Ok((
                    BloomFilter {
                        words,
                        k,
                        match_all: false,
                    },
                    total,
                ))
            }
            // KIND_MATCH_ALL and kinds written by a newer version.
            _ => Ok((BloomFilter::match_all(), total)),
        }
    }

    /// Builds a filter holding exactly the given key hashes (deduplicated
    /// for sizing).
    fn from_keys(mut keys: Vec<u64>, bits_per_key: u32, max_bits: u64) -> BloomFilter {
        keys.sort_unstable();
        keys.dedup();
        let mut f = BloomFilter::with_max_bits(keys.len(), bits_per_key, max_bits);
        for h in keys {
            f.insert_hash(h);
        }
        f
    }
}

// ---------------------------------------------------------------------------
// Key hashing (part of the format)
// ---------------------------------------------------------------------------

const SEED_NAME_CI: u64 = 0x5358_0001;
const SEED_NAME_EXACT: u64 = 0x5358_0002;
const SEED_TRIGRAM: u64 = 0x5358_0003;
const SEED_EXT: u64 = 0x5358_0004;
const SEED_UID: u64 = 0x5358_0005;
const SEED_GID: u64 = 0x5358_0006;
const SEED_XATTR: u64 = 0x5358_0007;
/// Time keys use `SEED_TIME + level`.
const SEED_TIME: u64 = 0x5358_0100;

const NAME_BITS_PER_KEY: u32 = 10;
const TRIGRAM_BITS_PER_KEY: u32 = 8;
const TRIGRAM_MAX_BITS_PER_ITEM: u64 = 48;
const SMALL_BITS_PER_KEY: u32 = 10;
const TIME_BITS_PER_KEY: u32 = 12;
/// At most this many trigrams of a needle are probed (a subset is sound).
const MAX_TRIGRAM_PROBES: usize = 64;

fn lowercase(b: &[u8]) -> Vec<u8> {
    b.to_ascii_lowercase()
}

fn has_upper(b: &[u8]) -> bool {
    b.iter().any(u8::is_ascii_uppercase)
}

fn name_ci_key(lower: &[u8]) -> u64 {
    xxh3_64_with_seed(lower, SEED_NAME_CI)
}

fn name_exact_key(name: &[u8]) -> u64 {
    xxh3_64_with_seed(name, SEED_NAME_EXACT)
}

fn trigram_key(tri: &[u8]) -> u64 {
    xxh3_64_with_seed(tri, SEED_TRIGRAM)
}

fn ext_key(lower_ext: &[u8]) -> u64 {
    xxh3_64_with_seed(lower_ext, SEED_EXT)
}

fn u32_key(v: u32, seed: u64) -> u64 {
    xxh3_64_with_seed(&v.to_le_bytes(), seed)
}

fn xattr_key(k: &[u8]) -> u64 {
    xxh3_64_with_seed(k, SEED_XATTR)
}

/// The extension of a name: after the last '.', or empty.
fn extension_of(name: &[u8]) -> &[u8] {
    match name.iter().rposition(|&c| c == b'.') {
        Some(i) => &name[i + 1..],
        None => &[],
    }
}

fn type_bit(t: FileType) -> u8 {
    // FileType discriminants are 1..=7.
    1u8.checked_shl(u32::from(t as u8)).unwrap_or(0)
}

// ---------------------------------------------------------------------------
// Size buckets
// ---------------------------------------------------------------------------

const SIZE_SUB_BITS: u32 = 3;
const SIZE_BUCKETS: usize = 65 << SIZE_SUB_BITS;
const SIZE_WORDS: usize = SIZE_BUCKETS.div_ceil(64);

/// Monotone bucket index of a size; see the module documentation.
fn size_bucket(v: u64) -> usize {
    let c = 64 - v.leading_zeros();
    if c == 0 {
        return 0;
    }
    let off = v - (1u64 << (c - 1));
    let j = off >> (c - 1).saturating_sub(SIZE_SUB_BITS);
    ((c as usize) << SIZE_SUB_BITS) + j as usize
}

/// Whether any bit in `lo..=hi` is set.
fn any_bit_in(words: &[u64; SIZE_WORDS], lo: usize, hi: usize) -> bool {
    let (lw, hw) = (lo / 64, hi / 64);
    (lw..=hw).any(|w| {
        let mut mask = u64::MAX;
        if w == lw {
            mask &= u64::MAX << (lo % 64);
        }
        if w == hw {
            mask &= u64::MAX >> (63 - hi % 64);
        }
        words[w] & mask != 0
    })
}

// ---------------------------------------------------------------------------
// Time buckets
// ---------------------------------------------------------------------------

/// Bucket widths (log2 seconds), finest first; consecutive levels differ by 4×.
const TIME_SHIFTS: [u32; 10] = [12, 14, 16, 18, 20, 22, 24, 26, 28, 30];
/// A query starts at the finest level where it touches at most this many buckets.
const TIME_TOP_FANOUT: i64 = 8;
/// How many levels partially covered edge buckets are refined.
const TIME_REFINE_DEPTH: u32 = 2;

fn time_secs(t: Nanos) -> i64 {
    t.0.div_euclid(Nanos::NSEC_PER_SEC)
}

fn time_key(level: usize, bucket: i64) -> u64 {
    xxh3_64_with_seed(&bucket.to_le_bytes(), SEED_TIME + level as u64)
}

/// Calls `probe(level, bucket)` for a set of buckets covering the seconds
/// `lo..=hi` (`lo <= hi`); stops and returns `true` at the first `true`.
fn time_cover(lo: i64, hi: i64, probe: &mut impl FnMut(usize, i64) -> bool) -> bool {
    let level = TIME_SHIFTS
        .iter()
        .position(|&sh| (hi >> sh) - (lo >> sh) < TIME_TOP_FANOUT)
        .unwrap_or(TIME_SHIFTS.len() - 1);
    time_cover_at(lo, hi, level, TIME_REFINE_DEPTH, probe)
}

fn time_cover_at(
    lo: i64,
    hi: i64,
    level: usize,
    depth: u32,
    probe: &mut impl FnMut(usize, i64) -> bool,
) -> bool {
    let sh = TIME_SHIFTS[level];
    for x in (lo >> sh)..=(hi >> sh) {
        let start = x << sh;
        let end = start + ((1i64 << sh) - 1);
        let full = lo <= start && end <= hi;
        let hit = if full || level == 0 || depth == 0 {
            probe(level, x)
        } else {
            time_cover_at(lo.max(start), hi.min(end), level - 1, depth - 1, probe)
        };
        if hit {
            return true;
        }
    }
    false
}

// ---------------------------------------------------------------------------
// AttrFilters
// ---------------------------------------------------------------------------

/// One item (inode) as seen by [`AttrFilters::build`].
#[derive(Clone, Copy, Debug)]
pub struct FilterInput<'a> {
    pub name: &'a [u8],
    pub uid: u32,
    pub gid: u32,
    pub ftype: FileType,
    pub size: u64,
    pub atime: Nanos,
    pub mtime: Nanos,
    pub ctime: Nanos,
    pub xattr_keys: &'a [&'a [u8]],
}

/// Which timestamp a time predicate is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeAttr {
    Atime,
    Mtime,
    Ctime,
}

impl TimeAttr {
    fn index(self) -> usize {
        match self {
            TimeAttr::Atime => 0,
            TimeAttr::Mtime => 1,
            TimeAttr::Ctime => 2,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct TimeFilter {
    min: i64,
    max: i64,
    bloom: BloomFilter,
}

/// The per-table filter set. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttrFilters {
    len: usize,
    type_mask: u8,
    size_min: u64,
    size_max: u64,
    size_buckets: [u64; SIZE_WORDS],
    /// atime, mtime, ctime.
    times: [TimeFilter; 3],
    names: BloomFilter,
    trigrams: BloomFilter,
    exts: BloomFilter,
    uids: BloomFilter,
    gids: BloomFilter,
    xattrs: BloomFilter,
}

const MAGIC: &[u8; 4] = b"SXAF";
const VERSION: u8 = 1;

impl AttrFilters {
    /// Builds the filters from all items of a table.
    pub fn build<'a>(items: impl Iterator<Item = FilterInput<'a>>) -> AttrFilters {
        let mut len = 0usize;
        let mut name_keys = Vec::new();
        let mut tri_keys = Vec::new();
        let mut ext_keys = Vec::new();
        let mut uid_keys = Vec::new();
        let mut gid_keys = Vec::new();
        let mut xattr_keys = Vec::new();
        let mut time_keys: [Vec<u64>; 3] = Default::default();
        let mut type_mask = 0u8;
        let (mut size_min, mut size_max) = (u64::MAX, 0u64);
        let mut size_buckets = [0u64; SIZE_WORDS];
        let mut tmin = [i64::MAX; 3];
        let mut tmax = [i64::MIN; 3];

        for it in items {
            len += 1;
            let lower = lowercase(it.name);
            name_keys.push(name_ci_key(&lower));
            if has_upper(it.name) {
                name_keys.push(name_exact_key(it.name));
            }
            tri_keys.extend(lower.windows(3).map(trigram_key));
            ext_keys.push(ext_key(extension_of(&lower)));
            uid_keys.push(u32_key(it.uid, SEED_UID));
            gid_keys.push(u32_key(it.gid, SEED_GID));
            xattr_keys.extend(it.xattr_keys.iter().map(|k| xattr_key(k)));
            type_mask |= type_bit(it.ftype);

            size_min = size_min.min(it.size);
            size_max = size_max.max(it.size);
            let b = size_bucket(it.size);
            size_buckets[b / 64] |= 1u64 << (b % 64);

            for (i, t) in [it.atime, it.mtime, it.ctime].into_iter().enumerate() {
                tmin[i] = tmin[i].min(t.0);
                tmax[i] = tmax[i].max(t.0);
                let s = time_secs(t);
                for (level, &sh) in TIME_SHIFTS.iter().enumerate() {
                    time_keys[i].push(time_key(level, s >> sh));
                }
            }
        }
        if len == 0 {
            return AttrFilters::default();
        }

        let tri_cap = (len as u64).saturating_mul(TRIGRAM_MAX_BITS_PER_ITEM);
        let [ka, km, kc] = time_keys;
        let time = |i: usize, keys: Vec<u64>| TimeFilter {
            min: tmin[i],
            max: tmax[i],
            bloom: BloomFilter::from_keys(keys, TIME_BITS_PER_KEY, MAX_BITS),
        };
        AttrFilters {
            len,
            type_mask,
            size_min,
            size_max,
            size_buckets,
            times: [time(0, ka), time(1, km), time(2, kc)],
            names: BloomFilter::from_keys(name_keys, NAME_BITS_PER_KEY, MAX_BITS),
            trigrams: BloomFilter::from_keys(tri_keys, TRIGRAM_BITS_PER_KEY, tri_cap),
            exts: BloomFilter::from_keys(ext_keys, SMALL_BITS_PER_KEY, MAX_BITS),
            uids: BloomFilter::from_keys(uid_keys, SMALL_BITS_PER_KEY, MAX_BITS),
            gids: BloomFilter::from_keys(gid_keys, SMALL_BITS_PER_KEY, MAX_BITS),
            xattrs: BloomFilter::from_keys(xattr_keys, SMALL_BITS_PER_KEY, MAX_BITS),
        }
    }

    /// A filter set that answers "maybe" to every predicate; use it when a
    /// table's filters are missing or failed to decode.
    pub fn match_all(len: usize) -> AttrFilters {
        let time = TimeFilter {
            min: i64::MIN,
            max: i64::MAX,
            bloom: BloomFilter::match_all(),
        };
        AttrFilters {
            len,
            type_mask: FileType::ALL.into_iter().fold(0, |m, t| m | type_bit(t)),
            size_min: 0,
            size_max: u64::MAX,
            size_buckets: [u64::MAX; SIZE_WORDS],
            times: [time.clone(), time.clone(), time],
            names: BloomFilter::match_all(),
            trigrams: BloomFilter::match_all(),
            exts: BloomFilter::match_all(),
            uids: BloomFilter::match_all(),
            gids: BloomFilter::match_all(),
            xattrs: BloomFilter::match_all(),
        }
    }

    /// May some item have exactly this name (case-sensitive)?
    pub fn may_match_name(&self, name: &[u8]) -> bool {
        if has_upper(name) {
            self.names.may_contain_hash(name_exact_key(name))
        } else {
            self.names.may_contain_hash(name_ci_key(name))
        }
    }

    /// May some item have this name, ignoring ASCII case?
    pub fn may_match_name_ci(&self, name: &[u8]) -> bool {
        self.names.may_contain_hash(name_ci_key(&lowercase(name)))
    }

    /// May some item have this extension (the part after the last '.' of
    /// its name, compared ASCII-case-insensitively; `b""` for names without
    /// '.')? An `ext` containing '.' answers `true`.
    pub fn may_match_extension(&self, ext: &[u8]) -> bool {
        if ext.contains(&b'.') {
            return true;
        }
        self.exts.may_contain_hash(ext_key(&lowercase(ext)))
    }

    /// May some item's name contain `needle`, ignoring ASCII case? Needles
    /// shorter than 3 bytes answer `true`.
    pub fn may_contain_substring(&self, needle: &[u8]) -> bool {
        if needle.len() < 3 {
            return true;
        }
        let lower = lowercase(needle);
        lower
            .windows(3)
            .take(MAX_TRIGRAM_PROBES)
            .all(|w| self.trigrams.may_contain_hash(trigram_key(w)))
    }

    pub fn may_match_uid(&self, uid: u32) -> bool {
        self.uids.may_contain_hash(u32_key(uid, SEED_UID))
    }

    pub fn may_match_gid(&self, gid: u32) -> bool {
        self.gids.may_contain_hash(u32_key(gid, SEED_GID))
    }

    /// Exact: `true` iff some item has this type.
    pub fn may_match_type(&self, t: FileType) -> bool {
        self.type_mask & type_bit(t) != 0
    }

    pub fn may_match_xattr_key(&self, key: &[u8]) -> bool {
        self.xattrs.may_contain_hash(xattr_key(key))
    }

    /// May some item's size lie in `lo..=hi`?
    pub fn may_match_size(&self, lo: u64, hi: u64) -> bool {
        let (lo, hi) = (lo.max(self.size_min), hi.min(self.size_max));
        if lo > hi {
            return false;
        }
        any_bit_in(&self.size_buckets, size_bucket(lo), size_bucket(hi))
    }

    /// May some item's `which` time lie in `lo..=hi`?
    pub fn may_match_time(&self, which: TimeAttr, lo: Nanos, hi: Nanos) -> bool {
        let tf = &self.times[which.index()];
        let (lo, hi) = (lo.0.max(tf.min), hi.0.min(tf.max));
        if lo > hi {
            return false;
        }
        if tf.bloom.is_match_all() {
            return true;
        }
        let (lo_s, hi_s) = (
            lo.div_euclid(Nanos::NSEC_PER_SEC),
            hi.div_euclid(Nanos::NSEC_PER_SEC),
        );
        time_cover(lo_s, hi_s, &mut |level, bucket| {
            tf.bloom.may_contain_hash(time_key(level, bucket))
        })
    }

    /// Number of items the set was built from.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn blooms(&self) -> [&BloomFilter; 9] {
        [
            &self.names,
            &self.trigrams,
            &self.exts,
            &self.uids,
            &self.gids,
            &self.xattrs,
            &self.times[0].bloom,
            &self.times[1].bloom,
            &self.times[2].bloom,
        ]
    }

    /// Appends the encoding described in the module documentation.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&(self.len as u64).to_le_bytes());
        out.push(self.type_mask);
        out.extend_from_slice(&self.size_min.to_le_bytes());
        out.extend_from_slice(&self.size_max.to_le_bytes());
        let first = self.size_buckets.iter().position(|&w| w != 0);
        let last = self.size_buckets.iter().rposition(|&w| w != 0);
        match (first, last) {
            (Some(f), Some(l)) => {
                out.push(f as u8);
                out.push((l - f + 1) as u8);
                for w in &self.size_buckets[f..=l] {
                    out.extend_from_slice(&w.to_le_bytes());
                }
            }
            _ => out.extend_from_slice(&[0, 0]),
        }
        for tf in &self.times {
            out.extend_from_slice(&tf.min.to_le_bytes());
            out.extend_from_slice(&tf.max.to_le_bytes());
        }
        for b in self.blooms() {
            b.encode(out);
        }
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Decodes exactly `bytes` (one encoded set). See the module
    /// documentation for what is an error.
    pub fn decode(bytes: &[u8]) -> Result<AttrFilters, BloomDecodeError> {
        let magic = bytes.get(..4).ok_or(BloomDecodeError::Truncated)?;
        if magic != MAGIC {
            return Err(BloomDecodeError::BadMagic);
        }
        let version = *bytes.get(4).ok_or(BloomDecodeError::Truncated)?;
        if version != VERSION {
            return Err(BloomDecodeError::UnsupportedVersion(version));
        }
        let body_end = bytes
            .len()
            .checked_sub(4)
            .filter(|&e| e >= 5)
            .ok_or(BloomDecodeError::Truncated)?;
        let stored = u32::from_le_bytes([
            bytes[body_end],
            bytes[body_end + 1],
            bytes[body_end + 2],
            bytes[body_end + 3],
        ]);
        if crc32c::crc32c(&bytes[..body_end]) != stored {
            return Err(BloomDecodeError::ChecksumMismatch);
        }
        let mut r = Reader {
            b: &bytes[..body_end],
            pos: 5,
        };
        let len = usize::try_from(r.u64()?)
            .map_err(|_| BloomDecodeError::Corrupt("item count too large"))?;
        let type_mask = r.u8()?;
        let size_min = r.u64()?;
        let size_max = r.u64()?;
        let first = usize::from(r.u8()?);
        let nwords = usize::from(r.u8()?);
        if first + nwords > SIZE_WORDS {
            return Err(BloomDecodeError::Corrupt("size bitmap out of range"));
        }
        let mut size_buckets = [0u64; SIZE_WORDS];
        for w in &mut size_buckets[first..first + nwords] {
            *w = r.u64()?;
        }
        let mut mins = [0i64; 3];
        let mut maxs = [0i64; 3];
        for i in 0..3 {
            mins[i] = r.u64()? as i64;
            maxs[i] = r.u64()? as i64;
        }
        let names = r.bloom()?;
        let trigrams = r.bloom()?;
        let exts = r.bloom()?;
        let uids = r.bloom()?;
        let gids = r.bloom()?;
        let xattrs = r.bloom()?;
        let mut time = |i: usize| -> Result<TimeFilter, BloomDecodeError> {
            Ok(TimeFilter {
                min: mins[i],
                max: maxs[i],
                bloom: r.bloom()?,
            })
        };
        let times = [time(0)?, time(1)?, time(2)?];
        if r.pos != r.b.len() {
            return Err(BloomDecodeError::Corrupt("trailing bytes after filters"));
        }
        Ok(AttrFilters {
            len,
            type_mask,
            size_min,
            size_max,
            size_buckets,
            times,
            names,
            trigrams,
            exts,
            uids,
            gids,
            xattrs,
        })
    }

    /// Bytes of memory this set occupies (structs plus bit arrays).
    pub fn memory_bytes(&self) -> usize {
        size_of::<Self>() + self.blooms().iter().map(|b| b.heap_bytes()).sum::<usize>()
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], BloomDecodeError> {
        let end = self.pos.checked_add(n).ok_or(BloomDecodeError::Truncated)?;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or(BloomDecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, BloomDecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, BloomDecodeError> {
        let s = self.take(8)?;
        Ok(u64::from_le_bytes([
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
        ]))
    }

    fn bloom(&mut self) -> Result<BloomFilter, BloomDecodeError> {
        let rest = self.b.get(self.pos..).ok_or(BloomDecodeError::Truncated)?;
        let (f, used) = BloomFilter::decode(rest)?;
        self.pos += used;
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Deterministic test PRNG (splitmix64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            fmix64(self.0)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
        fn normal(&mut self) -> f64 {
            let (u1, u2) = (self.unit().max(1e-12), self.unit());
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        }
    }

    #[derive(Clone, Debug)]
    struct Item {
        name: Vec<u8>,
        uid: u32,
        gid: u32,
        ftype: FileType,
        size: u64,
        times: [i64; 3],
        xattrs: Vec<Vec<u8>>,
    }

    fn build(items: &[Item]) -> AttrFilters {
        let xrefs: Vec<Vec<&[u8]>> = items
            .iter()
            .map(|i| i.xattrs.iter().map(|x| x.as_slice()).collect())
            .collect();
        AttrFilters::build(items.iter().zip(&xrefs).map(|(i, x)| FilterInput {
            name: &i.name,
            uid: i.uid,
            gid: i.gid,
            ftype: i.ftype,
            size: i.size,
            atime: Nanos(i.times[0]),
            mtime: Nanos(i.times[1]),
            ctime: Nanos(i.times[2]),
            xattr_keys: x,
        }))
    }

    const NOW: i64 = 1_750_000_000 * Nanos::NSEC_PER_SEC;
    const DAY: i64 = 86_400 * Nanos::NSEC_PER_SEC;
    const YEAR: i64 = 365 * DAY;

    /// A realistic table: "file_12345.txt"-like names, 3 uids, 2 gids,
    /// log-normal-ish sizes, times spread over a year.
    fn realistic(n: usize, seed: u64) -> Vec<Item> {
        let mut r = Rng(seed);
        let exts = ["txt", "c", "h", "o", "log", "dat", "json"];
        (0..n)
            .map(|_| {
                let ext = exts[r.below(exts.len() as u64) as usize];
                let name = format!("file_{}.{}", r.below(100_000), ext).into_bytes();
                let mtime = NOW - r.below(YEAR as u64) as i64;
                let atime = mtime + r.below((NOW - mtime) as u64 + 1) as i64;
                let ctime = if r.below(4) == 0 {
                    mtime + r.below(DAY as u64) as i64
                } else {
                    mtime
                };
                Item {
                    name,
                    uid: 1000 + r.below(3) as u32,
                    gid: 100 + r.below(2) as u32,
                    ftype: if r.below(20) == 0 {
                        FileType::Directory
                    } else {
                        FileType::Regular
                    },
                    size: (8.0 + 2.5 * r.normal()).exp().min(1e13) as u64,
                    times: [atime, mtime, ctime],
                    xattrs: if r.below(50) == 0 {
                        vec![b"user.tag".to_vec()]
                    } else {
                        vec![]
                    },
                }
            })
            .collect()
    }

    fn random_name(r: &mut Rng, len: usize) -> Vec<u8> {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_-.";
        (0..len)
            .map(|_| CHARS[r.below(CHARS.len() as u64) as usize])
            .collect()
    }

    /// Flips the ASCII case of bytes whose bit is set in `mask`.
    fn flip_case(b: &[u8], mask: u64) -> Vec<u8> {
        b.iter()
            .enumerate()
            .map(|(i, &c)| {
                if mask >> (i % 64) & 1 == 1 {
                    if c.is_ascii_lowercase() {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    }
                } else {
                    c
                }
            })
            .collect()
    }

    fn name_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            "[a-zA-Z0-9._-]{0,16}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..12),
        ]
    }

    fn item_strategy() -> impl Strategy<Value = Item> {
        let time = prop_oneof![
            any::<i64>(),
            (NOW - 2 * YEAR..NOW + DAY),
            (-YEAR..YEAR),
            Just(i64::MIN),
            Just(i64::MAX),
        ];
        (
            name_strategy(),
            prop_oneof![0..4u32, any::<u32>()],
            prop_oneof![0..4u32, any::<u32>()],
            0..FileType::ALL.len(),
            prop_oneof![
                0..100u64,
                any::<u64>(),
                (0..64u32).prop_map(|s| 1u64 << s),
                Just(u64::MAX)
            ],
            [time.clone(), time.clone(), time],
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 0..3),
        )
            .prop_map(|(name, uid, gid, t, size, times, xattrs)| Item {
                name,
                uid,
                gid,
                ftype: FileType::ALL[t],
                size,
                times,
                xattrs,
            })
    }

    fn delta_strategy() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..10u64,
            0..(1u64 << 20),
            0..(1u64 << 45),
            any::<u64>(),
            Just(u64::MAX)
        ]
    }

    fn sub_i(v: i64, d: u64) -> i64 {
        v.saturating_sub(i64::try_from(d).unwrap_or(i64::MAX))
    }
    fn add_i(v: i64, d: u64) -> i64 {
        v.saturating_add(i64::try_from(d).unwrap_or(i64::MAX))
    }

    fn check_no_false_negatives(
        f: &AttrFilters,
        items: &[Item],
        deltas: &[(u64, u64)],
        case_mask: u64,
    ) {
        for (n, it) in items.iter().enumerate() {
            let (d1, d2) = deltas[n % deltas.len()];
            let mask = case_mask.rotate_left(n as u32);
            assert!(f.may_match_name(&it.name), "name {:?}", it.name);
            assert!(f.may_match_name_ci(&it.name));
            assert!(f.may_match_name_ci(&flip_case(&it.name, mask)));
            assert!(f.may_match_name_ci(&it.name.to_ascii_uppercase()));
            let ext = extension_of(&it.name);
            assert!(f.may_match_extension(ext), "ext {ext:?}");
            assert!(f.may_match_extension(&flip_case(ext, mask)));
            for len in 3..=it.name.len() {
                for w in it.name.windows(len) {
                    assert!(
                        f.may_contain_substring(w),
                        "substring {w:?} of {:?}",
                        it.name
                    );
                    assert!(f.may_contain_substring(&flip_case(w, mask)));
                }
            }
            assert!(f.may_match_uid(it.uid));
            assert!(f.may_match_gid(it.gid));
            assert!(f.may_match_type(it.ftype));
            for x in &it.xattrs {
                assert!(f.may_match_xattr_key(x));
            }
            let s = it.size;
            assert!(f.may_match_size(s, s));
            assert!(f.may_match_size(s.saturating_sub(d1), s.saturating_add(d2)));
            assert!(f.may_match_size(s.saturating_sub(d1), s));
            assert!(f.may_match_size(s, s.saturating_add(d2)));
            assert!(f.may_match_size(0, u64::MAX));
            for (which, t) in [TimeAttr::Atime, TimeAttr::Mtime, TimeAttr::Ctime]
                .into_iter()
                .zip(it.times)
            {
                assert!(f.may_match_time(which, Nanos(t), Nanos(t)), "{which:?} {t}");
                assert!(
                    f.may_match_time(which, Nanos(sub_i(t, d1)), Nanos(add_i(t, d2))),
                    "{which:?} {t} -{d1} +{d2}"
                );
                assert!(f.may_match_time(which, Nanos(sub_i(t, d1)), Nanos(t)));
                assert!(f.may_match_time(which, Nanos(t), Nanos(add_i(t, d2))));
                assert!(f.may_match_time(which, Nanos(i64::MIN), Nanos(i64::MAX)));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn no_false_negatives(
            items in proptest::collection::vec(item_strategy(), 0..40),
            deltas in proptest::collection::vec((delta_strategy(), delta_strategy()), 1..8),
            case_mask in any::<u64>(),
        ) {
            let f = build(&items);
            prop_assert_eq!(f.len(), items.len());
            check_no_false_negatives(&f, &items, &deltas, case_mask);
            // The decoded copy is identical, hence answers identically.
            let mut enc = Vec::new();
            f.encode(&mut enc);
            let g = AttrFilters::decode(&enc).unwrap();
            prop_assert_eq!(&g, &f);
            check_no_false_negatives(&g, &items, &deltas, case_mask);
        }

        #[test]
        fn round_trip_answers_identically(
            items in proptest::collection::vec(item_strategy(), 0..30),
            probes in proptest::collection::vec((name_strategy(), any::<u32>(), any::<u64>(), any::<u64>(), any::<i64>(), any::<i64>()), 1..20),
        ) {
            let f = build(&items);
            let mut enc = Vec::new();
            f.encode(&mut enc);
            let g = AttrFilters::decode(&enc).unwrap();
            for (name, id, a, b, ta, tb) in probes {
                prop_assert_eq!(f.may_match_name(&name), g.may_match_name(&name));
                prop_assert_eq!(f.may_match_name_ci(&name), g.may_match_name_ci(&name));
                prop_assert_eq!(f.may_match_extension(&name), g.may_match_extension(&name));
                prop_assert_eq!(f.may_contain_substring(&name), g.may_contain_substring(&name));
                prop_assert_eq!(f.may_match_xattr_key(&name), g.may_match_xattr_key(&name));
                prop_assert_eq!(f.may_match_uid(id), g.may_match_uid(id));
                prop_assert_eq!(f.may_match_gid(id), g.may_match_gid(id));
                prop_assert_eq!(f.may_match_size(a.min(b), a.max(b)), g.may_match_size(a.min(b), a.max(b)));
                for w in [TimeAttr::Atime, TimeAttr::Mtime, TimeAttr::Ctime] {
                    let (lo, hi) = (Nanos(ta.min(tb)), Nanos(ta.max(tb)));
                    prop_assert_eq!(f.may_match_time(w, lo, hi), g.may_match_time(w, lo, hi));
                }
            }
            for t in FileType::ALL {
                prop_assert_eq!(f.may_match_type(t), g.may_match_type(t));
            }
        }

        /// The time covering covers every second of the range, with a
        /// bounded number of probes.
        #[test]
        fn time_cover_is_a_bounded_cover(
            a in prop_oneof![any::<i64>(), -1_000_000i64..1_000_000],
            d in prop_oneof![0..100i64, 0..100_000i64, 0..100_000_000i64, any::<i64>()],
            picks in proptest::collection::vec(any::<u64>(), 1..16),
        ) {
            let (lo_ns, hi_ns) = (a, a.saturating_add(d.max(0)));
            let (lo, hi) = (time_secs(Nanos(lo_ns)), time_secs(Nanos(hi_ns)));
            let mut probed = Vec::new();
            time_cover(lo, hi, &mut |level, b| { probed.push((level, b)); false });
            prop_assert!(probed.len() <= 30, "{} probes for {lo}..={hi}", probed.len());
            let span = (hi as i128 - lo as i128 + 1) as u128;
            let mut pts = vec![lo, hi];
            pts.extend(picks.iter().map(|&p| (lo as i128 + (p as u128 % span) as i128) as i64));
            for t in pts {
                prop_assert!(
                    probed.iter().any(|&(l, b)| t >> TIME_SHIFTS[l] == b),
                    "second {t} of {lo}..={hi} not covered by {probed:?}"
                );
            }
        }

        #[test]
        fn decode_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), prefix in any::<bool>()) {
            let mut b = if prefix { b"SXAF\x01".to_vec() } else { Vec::new() };
            b.extend_from_slice(&bytes);
            let _ = AttrFilters::decode(&b);
            // Resealed, so the parser proper sees the garbage.
            let _ = AttrFilters::decode(&reseal(&b));
            if let Ok((f, used)) = BloomFilter::decode(&bytes) {
                prop_assert!(used <= bytes.len());
                let _ = f.may_contain_hash(bytes.len() as u64);
            }
        }

        #[test]
        fn decode_mutated_never_panics(
            items in proptest::collection::vec(item_strategy(), 0..8),
            muts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let f = build(&items);
            let mut enc = Vec::new();
            f.encode(&mut enc);
            let mut m = enc.clone();
            for (i, v) in &muts {
                let i = i.index(m.len());
                m[i] ^= v | 1;
            }
            if truncate {
                m.truncate(cut.index(m.len()));
            }
            // A checksum catches the mutation.
            // (Two mutations of one byte may cancel out.)
            if m != enc {
                prop_assert!(AttrFilters::decode(&m).is_err());
            }
            // Past the checksum the parser must still not panic.
            let body = &m[..m.len().saturating_sub(4)];
            if let Ok(g) = AttrFilters::decode(&reseal(body)) {
                let _ = g.may_match_name(b"x");
                let _ = g.may_match_size(0, 10);
                let _ = g.may_match_time(TimeAttr::Mtime, Nanos(0), Nanos(NOW));
                let _ = g.memory_bytes();
            }
            // Bloom filters alone, mutated and truncated.
            let mut bf = BloomFilter::new(items.len() + 1, 10);
            bf.insert_hash(7);
            let mut be = Vec::new();
            bf.encode(&mut be);
            for (i, v) in &muts {
                let i = i.index(be.len());
                be[i] ^= v | 1;
            }
            let be = &be[..cut.index(be.len() + 1)];
            if let Ok((g, used)) = BloomFilter::decode(be) {
                prop_assert!(used <= be.len());
                let _ = g.may_contain_hash(7);
            }
        }
    }

    /// Appends a valid checksum to `body`.
    fn reseal(body: &[u8]) -> Vec<u8> {
        let mut v = body.to_vec();
        let crc = crc32c::crc32c(body);
        v.extend_from_slice(&crc.to_le_bytes());
        v
    }

    #[test]
    fn name_false_positive_rate() {
        let mut r = Rng(1);
        let present: Vec<Vec<u8>> = (0..20_000)
            .map(|_| {
                let len = 6 + r.below(14) as usize;
                random_name(&mut r, len)
            })
            .collect();
        let items: Vec<Item> = present
            .iter()
            .map(|n| Item {
                name: n.clone(),
                uid: 0,
                gid: 0,
                ftype: FileType::Regular,
                size: 0,
                times: [0; 3],
                xattrs: vec![],
            })
            .collect();
        let f = build(&items);
        let set: std::collections::HashSet<&Vec<u8>> = present.iter().collect();
        let mut r = Rng(2);
        let (mut tried, mut fp, mut fp_ci, mut fp_sub) = (0u32, 0u32, 0u32, 0u32);
        while tried < 20_000 {
            let len = 6 + r.below(14) as usize;
            let n = random_name(&mut r, len);
            if set.contains(&n) {
                continue;
            }
            tried += 1;
            fp += u32::from(f.may_match_name(&n));
            fp_ci += u32::from(f.may_match_name_ci(&n.to_ascii_uppercase()));
            fp_sub += u32::from(f.may_contain_substring(&n[..6]));
        }
        for n in &present {
            assert!(f.may_match_name(n));
        }
        let rate = f64::from(fp) / f64::from(tried);
        let rate_ci = f64::from(fp_ci) / f64::from(tried);
        eprintln!(
            "name filter: exact FP {:.3}%, ci FP {:.3}%; absent 6-byte needles answered maybe {:.2}% (trigrams of 20000 random names cover most of the alphabet^3); {} bytes for {} names",
            rate * 100.0,
            rate_ci * 100.0,
            f64::from(fp_sub) / f64::from(tried) * 100.0,
            f.names.bits() / 8,
            present.len()
        );
        assert!(rate <= 0.03, "exact-name FP rate {rate}");
        assert!(rate_ci <= 0.03, "ci-name FP rate {rate_ci}");
    }

    #[test]
    fn uppercase_names_exact_and_ci() {
        let mut r = Rng(3);
        let items: Vec<Item> = realistic(500, 4)
            .into_iter()
            .map(|mut i| {
                i.name = flip_case(&i.name, r.next());
                i
            })
            .collect();
        let f = build(&items);
        for it in &items {
            assert!(f.may_match_name(&it.name));
            assert!(f.may_match_name_ci(&it.name.to_ascii_lowercase()));
            assert!(f.may_match_name_ci(&it.name.to_ascii_uppercase()));
        }
        let fp = (0..2000)
            .filter(|i| f.may_match_name(format!("Other_{i}.TXT").as_bytes()))
            .count();
        assert!(fp < 60, "{fp}");
    }

    #[test]
    fn size_range_far_from_values_is_false() {
        let items = realistic(20_000, 5)
            .into_iter()
            .map(|mut i| {
                i.size = i.size.clamp(1, 10_000_000);
                i
            })
            .collect::<Vec<_>>();
        let f = build(&items);
        assert!(!f.may_match_size(0, 0));
        assert!(!f.may_match_size(1 << 30, 1 << 40));
        assert!(!f.may_match_size(20_000_000, u64::MAX));
        assert!(!f.may_match_size(10, 5));
        assert!(f.may_match_size(0, u64::MAX));
        // A gap in the middle, caught by the bucket bitmap, not by min/max.
        let mut two = vec![];
        for (n, size) in [(100u64, 100u64), (100, 200), (100, 3 << 30)] {
            two.extend(realistic(n as usize, size).into_iter().map(|mut i| {
                i.size = size + i.size % 10;
                i
            }));
        }
        let f = build(&two);
        assert!(!f.may_match_size(1 << 20, 10 << 20));
        assert!(!f.may_match_size(300, 1 << 30));
        assert!(f.may_match_size(150, 250));
        assert!(f.may_match_size(3 << 30, 3 << 30));
    }

    #[test]
    fn time_window_far_from_values_is_false() {
        let old = realistic(20_000, 6)
            .into_iter()
            .map(|mut i| {
                for t in &mut i.times {
                    *t = NOW - 5 * YEAR + (*t - NOW) / 50; // within a week, 5 years ago
                }
                i
            })
            .collect::<Vec<_>>();
        let f = build(&old);
        let week_ago = Nanos(NOW - 7 * DAY);
        for w in [TimeAttr::Atime, TimeAttr::Mtime, TimeAttr::Ctime] {
            assert!(!f.may_match_time(w, week_ago, Nanos(NOW)));
            assert!(f.may_match_time(w, Nanos(NOW - 6 * YEAR), Nanos(NOW)));
        }
        // Two clusters, five years ago and today: a window between them is
        // inside [min, max], so only the bucket filter can answer "no".
        let mut two = old.clone();
        two.extend(realistic(2_000, 7).into_iter().map(|mut i| {
            i.times = [NOW - i.times[0] % 3_600_000_000_000; 3];
            i
        }));
        let f = build(&two);
        for w in [TimeAttr::Atime, TimeAttr::Mtime, TimeAttr::Ctime] {
            assert!(
                !f.may_match_time(w, week_ago, Nanos(NOW - 2 * DAY)),
                "{w:?}"
            );
            assert!(
                !f.may_match_time(w, Nanos(NOW - 4 * YEAR), Nanos(NOW - YEAR)),
                "{w:?}"
            );
            assert!(
                f.may_match_time(w, Nanos(NOW - 2 * DAY), Nanos(NOW)),
                "{w:?}"
            );
        }
        // Negative times.
        let neg = realistic(100, 8)
            .into_iter()
            .map(|mut i| {
                i.times = [-10 * YEAR - i.times[0] % DAY; 3];
                i
            })
            .collect::<Vec<_>>();
        let f = build(&neg);
        assert!(f.may_match_time(TimeAttr::Mtime, Nanos(-10 * YEAR - DAY), Nanos(-10 * YEAR)));
        assert!(!f.may_match_time(TimeAttr::Mtime, Nanos(-9 * YEAR), Nanos(0)));
    }

    #[test]
    fn memory_per_item_realistic_table() {
        let items = realistic(20_000, 9);
        let f = build(&items);
        let mut enc = Vec::new();
        f.encode(&mut enc);
        let per_item = f.memory_bytes() as f64 / items.len() as f64;
        let names = [
            "name", "trigram", "ext", "uid", "gid", "xattr", "atime", "mtime", "ctime",
        ];
        let parts: Vec<String> = names
            .iter()
            .zip(f.blooms())
            .map(|(n, b)| format!("{n}={}B/k{}", b.bits() / 8, b.k()))
            .collect();
        eprintln!(
            "realistic 20000-item table: {:.2} bytes/item in memory, {:.2} bytes/item encoded; {}",
            per_item,
            enc.len() as f64 / items.len() as f64,
            parts.join(" ")
        );
        assert!(per_item <= 30.0, "{per_item} bytes/item");
        assert!(f.uids.bits() <= 64 && f.gids.bits() <= 64 && f.exts.bits() <= 128);
        // Random (high-entropy) names: trigrams are capped.
        let mut r = Rng(10);
        let random: Vec<Item> = realistic(20_000, 11)
            .into_iter()
            .map(|mut i| {
                let len = 8 + r.below(24) as usize;
                i.name = (0..len).map(|_| r.next() as u8).collect();
                i
            })
            .collect();
        let g = build(&random);
        let per_item = g.memory_bytes() as f64 / random.len() as f64;
        eprintln!("random-byte names: {per_item:.2} bytes/item in memory");
        assert!(per_item <= 30.0, "{per_item} bytes/item");
    }

    #[test]
    fn empty_and_match_all() {
        let e = AttrFilters::build(std::iter::empty());
        assert_eq!(e, AttrFilters::default());
        assert!(e.is_empty());
        let mut enc = Vec::new();
        e.encode(&mut enc);
        let d = AttrFilters::decode(&enc).unwrap();
        let all = AttrFilters::match_all(5);
        let mut enc = Vec::new();
        all.encode(&mut enc);
        let all2 = AttrFilters::decode(&enc).unwrap();
        assert_eq!(all2, all);
        for f in [&e, &d] {
            assert!(!f.may_match_name(b"a"));
            assert!(!f.may_match_name_ci(b"a"));
            assert!(!f.may_match_extension(b""));
            assert!(!f.may_contain_substring(b"abc"));
            assert!(f.may_contain_substring(b"ab"));
            assert!(!f.may_match_uid(0));
            assert!(!f.may_match_gid(0));
            assert!(!f.may_match_xattr_key(b"user.x"));
            assert!(FileType::ALL.iter().all(|&t| !f.may_match_type(t)));
            assert!(!f.may_match_size(0, u64::MAX));
            assert!(!f.may_match_time(TimeAttr::Ctime, Nanos(i64::MIN), Nanos(i64::MAX)));
        }
        for f in [&all, &all2] {
            assert_eq!(f.len(), 5);
            assert!(
                f.may_match_name(b"a") && f.may_match_name_ci(b"A") && f.may_match_extension(b"x")
            );
            assert!(f.may_contain_substring(b"abcdef") && f.may_match_uid(3) && f.may_match_gid(4));
            assert!(
                f.may_match_xattr_key(b"k") && FileType::ALL.iter().all(|&t| f.may_match_type(t))
            );
            assert!(f.may_match_size(u64::MAX, u64::MAX) && f.may_match_size(0, 0));
            assert!(f.may_match_time(TimeAttr::Atime, Nanos(i64::MIN), Nanos(i64::MIN)));
        }
        let b = BloomFilter::new(0, 10);
        assert_eq!(b.bits(), 0);
        assert!(!b.may_contain_hash(0) && !b.may_contain_hash(u64::MAX));
        let mut b2 = b.clone();
        b2.insert_hash(42);
        assert!(b2.is_match_all() && b2.may_contain_hash(1));
        assert!(!BloomFilter::default().may_contain_hash(3));
    }

    #[test]
    fn bloom_sizing_and_round_trip() {
        let mut b = BloomFilter::new(1000, 10);
        assert_eq!(b.bits(), 10_048);
        assert_eq!(b.k(), 7);
        assert_eq!(BloomFilter::new(3, 10).bits(), 64);
        assert_eq!(BloomFilter::new(3, 10).k(), 15);
        assert_eq!(BloomFilter::new(1, 100).k(), 16);
        assert_eq!(BloomFilter::with_max_bits(1000, 10, 1000).bits(), 1024);
        assert_eq!(BloomFilter::with_max_bits(1000, 10, 1000).k(), 1);
        for i in 0..1000u64 {
            b.insert_hash(fmix64(i));
        }
        let mut enc = vec![0xAA];
        b.encode(&mut enc);
        enc.push(0xBB);
        let (d, used) = BloomFilter::decode(&enc[1..]).unwrap();
        assert_eq!(used, enc.len() - 2);
        assert_eq!(d, b);
        assert!((0..1000u64).all(|i| d.may_contain_hash(fmix64(i))));
        let fp = (1000..101_000u64)
            .filter(|&i| d.may_contain_hash(fmix64(i)))
            .count();
        eprintln!("raw bloom 10 bits/key: FP {:.3}%", fp as f64 / 1000.0);
        assert!(fp < 1_500, "{fp}");
    }

    #[test]
    fn bloom_decode_errors_and_unknown_kinds() {
        assert_eq!(BloomFilter::decode(&[]), Err(BloomDecodeError::Truncated));
        assert_eq!(
            BloomFilter::decode(&[1, 0xff, 0xff, 0xff, 0xff, 1]),
            Err(BloomDecodeError::Truncated)
        );
        // Unknown kind: skipped as a match-all filter.
        let (f, used) = BloomFilter::decode(&[9, 3, 0, 0, 0, 1, 2, 3, 4]).unwrap();
        assert!(f.is_match_all() && f.may_contain_hash(5));
        assert_eq!(used, 8);
        // Bad k, bit count mismatch, ragged words.
        let mut good = Vec::new();
        BloomFilter::new(5, 10).encode(&mut good);
        let mut bad_k = good.clone();
        bad_k[5] = 17;
        assert!(matches!(
            BloomFilter::decode(&bad_k),
            Err(BloomDecodeError::Corrupt(_))
        ));
        let mut bad_bits = good.clone();
        bad_bits[6] = 65;
        assert!(matches!(
            BloomFilter::decode(&bad_bits),
            Err(BloomDecodeError::Corrupt(_))
        ));
        // Container errors.
        let f = build(&realistic(50, 12));
        let mut enc = Vec::new();
        f.encode(&mut enc);
        assert_eq!(
            AttrFilters::decode(&enc[..3]),
            Err(BloomDecodeError::Truncated)
        );
        let mut v = enc.clone();
        v[4] = 2;
        assert_eq!(
            AttrFilters::decode(&v),
            Err(BloomDecodeError::UnsupportedVersion(2))
        );
        let mut v = enc.clone();
        v[0] = b'X';
        assert_eq!(AttrFilters::decode(&v), Err(BloomDecodeError::BadMagic));
        let mut v = enc.clone();
        let n = v.len();
        v[n / 2] ^= 1;
        assert_eq!(
            AttrFilters::decode(&v),
            Err(BloomDecodeError::ChecksumMismatch)
        );
        let mut v = enc[..enc.len() - 4].to_vec();
        v.push(0);
        assert!(matches!(
            AttrFilters::decode(&reseal(&v)),
            Err(BloomDecodeError::Corrupt(_))
        ));
        // A filter of an unknown kind inside a valid container: that
        // attribute answers "maybe", the others are unaffected.
        let mut v = Vec::new();
        f.encode(&mut v);
        let body = &v[..v.len() - 4];
        // The uid filter is the 4th of 9; the 5 after it end the body.
        let tail: usize = f.blooms()[4..]
            .iter()
            .map(|b| {
                let mut t = Vec::new();
                b.encode(&mut t);
                t.len()
            })
            .sum();
        let mut uid = Vec::new();
        f.uids.encode(&mut uid);
        let uid_at = body.len() - tail - uid.len();
        let mut patched = body.to_vec();
        assert_eq!(patched[uid_at], KIND_STANDARD_V1);
        patched[uid_at] = 200;
        let d = AttrFilters::decode(&reseal(&patched)).unwrap();
        assert!(d.may_match_uid(12345) && d.uids.is_match_all());
        assert!(!d.may_match_gid(12345));
    }
}
