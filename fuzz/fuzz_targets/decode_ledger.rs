//! `requests::Ledger::decode` (the committed-request ledger written with
//! every checkpoint) on raw bytes, and on the input as the body of a ledger
//! with a valid magic and crc32c; a decoded ledger re-encodes and decodes
//! to the same clients.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::requests::Ledger;

fn check(data: &[u8]) {
    if let Ok(mut l) = Ledger::decode(data) {
        let again = Ledger::decode(&l.encode()).expect("re-encoded ledger");
        assert_eq!(again.clients(), l.clients());
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut v = b"SXTREQS1".to_vec();
    v.extend_from_slice(data);
    let crc = crc32c::crc32c(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    check(&v);
});
