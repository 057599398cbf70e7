//! `record::decode_record` and `decode_tagged_record` on arbitrary bytes
//! (raw, and with each version byte prepended: 1 mutations only, 2 with a
//! client request tag). A decoded record re-encodes and decodes to the same
//! value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::record::{
    decode_record, decode_tagged_record, encode_record, encode_tagged_record,
};

fn check(data: &[u8]) {
    if let Ok(muts) = decode_record(data) {
        let enc = encode_record(&muts);
        assert_eq!(decode_record(&enc).expect("re-encoded record"), muts);
    }
    if let Ok((tag, muts)) = decode_tagged_record(data) {
        let enc = encode_tagged_record(tag.as_ref(), &muts);
        assert_eq!(
            decode_tagged_record(&enc).expect("re-encoded tagged record"),
            (tag, muts)
        );
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    for version in [1u8, 2] {
        let mut v = Vec::with_capacity(data.len() + 1);
        v.push(version);
        v.extend_from_slice(data);
        check(&v);
    }
});
