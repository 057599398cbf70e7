//! `bloom::AttrFilters::decode` on arbitrary bytes, and on the input with a
//! valid magic/version and crc32c trailer, so the field parser is reached.
//! A decoded set must answer every predicate without panicking and
//! round-trip through `encode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::bloom::{AttrFilters, TimeAttr};
use sextant_fuzz::with_crc;
use sextant_types::{FileType, Nanos};

fn check(data: &[u8]) {
    let Ok(f) = AttrFilters::decode(data) else {
        return;
    };
    let _ = f.len();
    let _ = f.memory_bytes();
    let _ = f.may_match_name(b"Foo.txt");
    let _ = f.may_match_name_ci(b"foo.txt");
    let _ = f.may_match_extension(b"txt");
    let _ = f.may_contain_substring(b"abcdef");
    let _ = f.may_match_uid(0);
    let _ = f.may_match_gid(u32::MAX);
    let _ = f.may_match_xattr_key(b"user.x");
    for t in FileType::ALL {
        let _ = f.may_match_type(t);
    }
    for (lo, hi) in [
        (0, u64::MAX),
        (5, 5),
        (u64::MAX, u64::MAX),
        (1 << 40, 1 << 41),
    ] {
        let _ = f.may_match_size(lo, hi);
    }
    for w in [TimeAttr::Atime, TimeAttr::Mtime, TimeAttr::Ctime] {
        for (lo, hi) in [
            (i64::MIN, i64::MAX),
            (0, 0),
            (-1, 1),
            (i64::MAX, i64::MAX),
            (i64::MIN, i64::MIN),
            (1_700_000_000_000_000_000, 1_700_000_100_000_000_000),
        ] {
            let _ = f.may_match_time(w, Nanos(lo), Nanos(hi));
        }
    }
    let mut enc = Vec::new();
    f.encode(&mut enc);
    assert_eq!(AttrFilters::decode(&enc).expect("re-encoded filters"), f);
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut body = b"SXAF\x01".to_vec();
    body.extend_from_slice(data);
    check(&with_crc(&body));
});
