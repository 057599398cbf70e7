//! `logless::decode_redo` (the log-less redo entry clients hand back) on
//! arbitrary bytes, and on the bytes sealed with the key, so the parser
//! behind the keyed hash is reached. A decoded entry re-encodes and
//! decodes to the same entry.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::logless::{decode_redo, encode_mutations, encode_redo, seal};

const KEY: [u8; 32] = [7; 32];

fn check(data: &[u8]) {
    if let Ok(e) = decode_redo(&KEY, data) {
        let enc = encode_redo(&KEY, e.lsn, &e.prev, &encode_mutations(&e.mutations));
        assert_eq!(decode_redo(&KEY, &enc).expect("re-encoded entry"), e);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check(&seal(&KEY, data.to_vec()));
});
