//! `journal::replay` over a `MemStore` whose segments hold fuzzed bytes.
//!
//! The first input byte picks a mode:
//! - 0: the input is segment 1, raw;
//! - 1: a valid segment header, then the input;
//! - 2: a valid header, then the input with the first batch's crc resealed;
//! - 3: two segments, the input split in two, each behind a valid header;
//! - other: structured segments and batches (`arbitrary`), with valid
//!   checksums, so LSN sequencing and the torn-tail rule are exercised.
//!
//! Replay must return `Ok` or `Err`, never panic or hang; see
//! `sextant_fuzz::check_replay` for the properties checked on `Ok`.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use sextant_engine::store::{MemStore, Store};
use sextant_fuzz::{
    build_journal, check_replay, reseal_batch, segment_header, segment_name, ASegment,
    SEGMENT_HEADER_LEN,
};

fn put(store: &MemStore, seq: u64, bytes: &[u8]) {
    let mut w = store.open_log(&segment_name(seq)).unwrap();
    w.append(bytes).unwrap();
    w.sync().unwrap();
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    // from_lsn: usually 1, sometimes taken from the input.
    let from_lsn = if mode & 0x80 != 0 && rest.len() >= 8 {
        u64::from_le_bytes(rest[..8].try_into().unwrap())
    } else {
        1
    };
    let store = MemStore::new();
    match mode & 0x7f {
        0 => put(&store, 1, rest),
        1 | 2 => {
            let mut seg = segment_header(1, 1).to_vec();
            seg.extend_from_slice(rest);
            if mode & 0x7f == 2 {
                if seg.len() >= SEGMENT_HEADER_LEN + 4 {
                    seg[SEGMENT_HEADER_LEN..SEGMENT_HEADER_LEN + 4]
                        .copy_from_slice(&0x534a_4231u32.to_le_bytes());
                }
                reseal_batch(&mut seg[SEGMENT_HEADER_LEN..]);
            }
            put(&store, 1, &seg);
        }
        3 => {
            let mid = rest.first().map_or(0, |&b| usize::from(b)).min(rest.len());
            let (a, b) = rest.split_at(mid);
            let mut s1 = segment_header(1, 1).to_vec();
            s1.extend_from_slice(a);
            let mut s2 = segment_header(2, 1).to_vec();
            s2.extend_from_slice(b);
            put(&store, 1, &s1);
            put(&store, 2, &s2);
        }
        _ => {
            let mut u = Unstructured::new(rest);
            let Ok(start) = u64::arbitrary(&mut u) else {
                return;
            };
            // Small start LSNs mostly; large ones reach the LSN arithmetic edges.
            let start = if start & 1 == 0 { start % 8 } else { start };
            let Ok(segments) = Vec::<ASegment>::arbitrary(&mut u) else {
                return;
            };
            let store = build_journal(&segments, start);
            check_replay(&store, from_lsn);
            return;
        }
    }
    check_replay(&store, from_lsn);
});
