//! Round trip: a structured snapshot (built with `arbitrary`, SOIDs clamped
//! into the table range) encodes and decodes to the same value, through both
//! `table::encode_snapshot` and `Table::encode_snapshot`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sextant_engine::table::{decode_snapshot, encode_snapshot, SnapshotBody, Table};
use sextant_fuzz::{ADentry, AInode};
use sextant_types::{Soid, SoidRange};

#[derive(Arbitrary, Debug)]
struct Input {
    id: u64,
    a: u128,
    b: u128,
    lsn: u64,
    inodes: Vec<(u128, AInode)>,
    dentries: Vec<(u128, ADentry)>,
}

fuzz_target!(|inp: Input| {
    let (lo, hi) = (inp.a.min(inp.b), inp.a.max(inp.b));
    let range = SoidRange::new(Soid::from_u128(lo), Soid::from_u128(hi)).unwrap();
    let span = hi - lo;
    let clamp = |s: u128| Soid::from_u128(lo + if span == u128::MAX { s } else { s % (span + 1) });
    let body = SnapshotBody {
        inodes: inp
            .inodes
            .into_iter()
            .map(|(s, i)| (clamp(s), i.into()))
            .collect(),
        dentries: inp
            .dentries
            .into_iter()
            .map(|(p, d)| (clamp(p), d.into()))
            .collect(),
    };
    let enc = encode_snapshot(inp.id, range, inp.lsn, &body);
    let snap = decode_snapshot(&enc).expect("encoded snapshot must decode");
    assert_eq!(snap.id, inp.id);
    assert_eq!(snap.range, range);
    assert_eq!(snap.lsn, inp.lsn);
    assert_eq!(snap.body.inodes, body.inodes);
    assert_eq!(snap.body.dentries, body.dentries);
    // Through a Table: same inode set (last write per SOID wins) and entries.
    // Refused only for a directory with over 256 names of one hash.
    let Ok(table) = Table::from_snapshot(snap) else {
        return;
    };
    table.check_invariants().expect("a loaded table is consistent");
    let enc2 = table.encode_snapshot();
    let snap2 = decode_snapshot(&enc2).expect("table snapshot must decode");
    assert_eq!(snap2.body.inodes.len(), table.inode_count());
    assert_eq!(snap2.body.dentries.len(), table.dentry_count());
    for (s, i) in &snap2.body.inodes {
        assert_eq!(table.inode(*s), Some(i));
    }
});
