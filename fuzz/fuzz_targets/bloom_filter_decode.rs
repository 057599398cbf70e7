//! `bloom::BloomFilter::decode` on arbitrary bytes. A decoded filter must
//! report a consumed length inside the input, answer queries without
//! panicking, and round-trip through `encode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::bloom::BloomFilter;

fuzz_target!(|data: &[u8]| {
    let Ok((f, used)) = BloomFilter::decode(data) else {
        return;
    };
    assert!(used >= 5 && used <= data.len());
    for h in [0u64, 1, u64::MAX, 0x9E37_79B9_7F4A_7C15] {
        let _ = f.may_contain_hash(h);
    }
    let mut enc = Vec::new();
    f.encode(&mut enc);
    let (g, used2) = BloomFilter::decode(&enc).expect("re-encoded filter");
    assert_eq!(used2, enc.len());
    assert_eq!(g, f);
    // Inserting then querying must find the key (no false negatives).
    let mut f = f;
    f.insert_hash(12345);
    assert!(f.may_contain_hash(12345));
});
