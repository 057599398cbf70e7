//! `record::decode_record` on arbitrary bytes (with and without the version
//! byte). A decoded record re-encodes and decodes to the same mutations.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::record::{decode_record, encode_record};

fn check(data: &[u8]) {
    if let Ok(muts) = decode_record(data) {
        let enc = encode_record(&muts);
        assert_eq!(decode_record(&enc).expect("re-encoded record"), muts);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(1); // RECORD_VERSION
    v.extend_from_slice(data);
    check(&v);
});
