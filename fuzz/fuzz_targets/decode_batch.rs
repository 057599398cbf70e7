//! `journal::decode_batch` on arbitrary bytes, and on the same bytes with the
//! batch checksum recomputed so the record framing behind it is exercised.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::journal::{decode_batch, encode_batch};
use sextant_fuzz::reseal_batch;

fn check(data: &[u8]) {
    if let Ok(batch) = decode_batch(data) {
        assert!(batch.len <= data.len());
        // A decoded batch re-encodes to exactly the bytes it came from.
        let payload = &data[24..batch.len];
        let mut again = Vec::new();
        encode_batch(
            batch.first_lsn,
            batch.records.len() as u32,
            payload,
            &mut again,
        );
        assert_eq!(&again[..], &data[..batch.len]);
        let mut at = 0;
        for r in &batch.records {
            let len = u32::from_le_bytes(payload[at..at + 4].try_into().unwrap()) as usize;
            assert_eq!(len, r.len());
            assert_eq!(&payload[at + 4..at + 4 + len], *r);
            at += 4 + len;
        }
        assert_eq!(at, payload.len());
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut sealed = data.to_vec();
    if sealed.len() >= 4 {
        // Give the fuzzer the magic for free in the resealed variant.
        sealed[..4].copy_from_slice(&0x534a_4231u32.to_le_bytes());
    }
    reseal_batch(&mut sealed);
    check(&sealed);
});
