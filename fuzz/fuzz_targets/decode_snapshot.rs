//! `table::decode_snapshot` on arbitrary bytes, and on the input wrapped in
//! a valid header and checksum so the postcard body parser and the range
//! checks are exercised. A decoded snapshot must re-encode and decode to the
//! same value, and load into a `Table` without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_engine::table::{decode_snapshot, encode_snapshot, Table};
use sextant_fuzz::seal_snapshot;

fn check(data: &[u8]) {
    let Ok(snap) = decode_snapshot(data) else {
        return;
    };
    let enc = encode_snapshot(snap.id, snap.range, snap.lsn, &snap.body);
    let again = decode_snapshot(&enc).expect("re-encoded snapshot does not decode");
    assert_eq!(again.id, snap.id);
    assert_eq!(again.range, snap.range);
    assert_eq!(again.lsn, snap.lsn);
    assert_eq!(again.body.inodes, snap.body.inodes);
    assert_eq!(again.body.dentries, snap.body.dentries);
    let Ok(table) = Table::from_snapshot(snap) else {
        return;
    };
    table.check_invariants().expect("a loaded table is consistent");
    let _ = table.encode_snapshot();
    let _ = table.split_point();
    let _ = table.min_free(table.range);
}

fuzz_target!(|data: &[u8]| {
    check(data);
    // Header fields from the first bytes, the rest is the body.
    if data.len() >= 2 {
        let (sel, body) = data.split_at(2);
        let range_last = if sel[0] & 1 == 0 {
            u128::MAX
        } else {
            u128::from(sel[1]) << 8
        };
        let range_first = if sel[0] & 2 == 0 {
            0
        } else {
            u128::from(sel[1])
        };
        check(&seal_snapshot(7, range_first, range_last, 42, body));
    }
});
