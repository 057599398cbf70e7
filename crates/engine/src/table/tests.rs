//! Table against a plain model: random inode and entry writes in any
//! order (the order a record's mutations are applied in is arbitrary), with
//! compaction, split + merge and snapshot round trips in between. Unit tests
//! keep only 2 bits of the name hash, so buckets collide constantly.

use super::*;
use proptest::prelude::*;
use sextant_types::Nanos;
use std::collections::BTreeMap;

fn soid(n: u8) -> Soid {
    Soid::from_u128(1000 + n as u128)
}

fn inode(parent: u8, name: &[u8], dir: bool) -> Inode {
    Inode {
        ftype: if dir {
            FileType::Directory
        } else {
            FileType::Regular
        },
        perm: 0o644,
        uid: 0,
        gid: 0,
        nlink: 1,
        size: 0,
        atime: Nanos(0),
        mtime: Nanos(0),
        ctime: Nanos(0),
        parent: soid(parent),
        name: Name::new(name),
        extra: None,
    }
}

const NAMES: [&[u8]; 6] = [
    b"a",
    b"b",
    b"c",
    b"d",
    b"a-rather-long-name-that-is-not-inline",
    b"e",
];

#[derive(Clone, Debug)]
enum Op {
    PutInode {
        s: u8,
        parent: u8,
        name: u8,
        dir: bool,
    },
    DeleteInode {
        s: u8,
    },
    PutEntry {
        parent: u8,
        name: u8,
        child: u8,
        dir: bool,
    },
    DeleteEntry {
        parent: u8,
        name: u8,
    },
    Compact,
    SplitMerge {
        at: u8,
    },
    Snapshot,
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0u8..12;
    let n = 0u8..NAMES.len() as u8;
    prop_oneof![
        // Parents 12 and 13 lie outside the table (exits).
        4 => (s.clone(), 0u8..14, n.clone(), any::<bool>())
            .prop_map(|(s, parent, name, dir)| Op::PutInode { s, parent, name, dir }),
        2 => s.clone().prop_map(|s| Op::DeleteInode { s }),
        4 => (s.clone(), n.clone(), s.clone(), any::<bool>())
            .prop_map(|(parent, name, child, dir)| Op::PutEntry { parent, name, child, dir }),
        2 => (s.clone(), n).prop_map(|(parent, name)| Op::DeleteEntry { parent, name }),
        1 => Just(Op::Compact),
        1 => (1u8..12).prop_map(|at| Op::SplitMerge { at }),
        1 => Just(Op::Snapshot),
    ]
}

type Model = (BTreeMap<Soid, Inode>, BTreeMap<(Soid, Vec<u8>), Dentry>);

fn check(t: &Table, (inodes, entries): &Model) -> Result<(), TestCaseError> {
    t.check_invariants().map_err(TestCaseError::fail)?;
    let got: BTreeMap<Soid, Inode> = t.inodes().map(|(s, i)| (s, i.clone())).collect();
    prop_assert_eq!(&got, inodes);
    let got: BTreeMap<(Soid, Vec<u8>), Dentry> = t
        .dentries()
        .map(|(p, d)| ((p, d.name.to_vec()), d))
        .collect();
    prop_assert_eq!(&got, entries);
    for ((p, name), d) in entries {
        prop_assert_eq!(t.dentry(*p, name), Some(d.clone()));
    }
    prop_assert_eq!(t.dentry_count(), entries.len());
    Ok(())
}

/// Every entry's cookie, by (parent, name), read through paged readdir,
/// stopping where a page says the directory ends (which must be true: no
/// entry after it; and a page that does not say so is full).
fn cookies(t: &Table) -> BTreeMap<(Soid, Vec<u8>), u64> {
    let mut out = BTreeMap::new();
    for p in 0..12 {
        let mut after = 0;
        loop {
            let (page, end) = t.readdir_page(soid(p), after, 2);
            let last = page.last().map(|(c, _)| *c);
            for (c, d) in page {
                out.insert((soid(p), d.name.to_vec()), c);
            }
            let Some(last) = last else {
                assert!(end, "an empty page is the end");
                break;
            };
            if end {
                assert!(
                    t.readdir(soid(p), last, 2).is_empty(),
                    "entries past the end"
                );
                break;
            }
            after = last;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn table_matches_model(ops in prop::collection::vec(op(), 1..60)) {
        let range = SoidRange::new(soid(0), soid(11)).unwrap();
        let mut t = Table::new(1, range);
        let mut model: Model = Default::default();
        for op in ops {
            let before = cookies(&t);
            let mut keeps_cookies = true;
            match op {
                Op::PutInode { s, parent, name, dir } => {
                    let mut i = inode(parent, NAMES[name as usize], dir);
                    // Vary what the maintained summary groups and adds.
                    i.uid = u32::from(s % 3);
                    i.size = u64::from(parent) * 7;
                    i.nlink = 1 + u32::from(s % 3);
                    model.0.insert(soid(s), i.clone());
                    t.put_inode(soid(s), i);
                }
                Op::DeleteInode { s } => {
                    model.0.remove(&soid(s));
                    t.delete_inode(soid(s));
                }
                Op::PutEntry { parent, name, child, dir } => {
                    let d = Dentry {
                        child: soid(child),
                        ftype: if dir { FileType::Directory } else { FileType::Regular },
                        name: Name::new(NAMES[name as usize]),
                    };
                    model.1.insert((soid(parent), NAMES[name as usize].to_vec()), d.clone());
                    prop_assert!(t.put_dentry(soid(parent), d));
                }
                Op::DeleteEntry { parent, name } => {
                    model.1.remove(&(soid(parent), NAMES[name as usize].to_vec()));
                    t.delete_dentry(soid(parent), NAMES[name as usize]);
                }
                Op::Compact => {
                    t.churn = usize::MAX / 2;
                    prop_assert!(t.compact_if_fragmented());
                }
                Op::SplitMerge { at } => {
                    let upper = t.split_off(soid(at), 2);
                    t.check_invariants().map_err(TestCaseError::fail)?;
                    upper.check_invariants().map_err(TestCaseError::fail)?;
                    prop_assert!(t.inodes().all(|(s, _)| s < soid(at)));
                    prop_assert!(upper.inodes().all(|(s, _)| s >= soid(at)));
                    t.merge(upper);
                    prop_assert_eq!(t.range, range);
                }
                Op::Snapshot => {
                    let snap = decode_snapshot(&t.encode_snapshot()).map_err(TestCaseError::fail)?;
                    t = Table::from_snapshot(snap).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    keeps_cookies = false;
                }
            }
            check(&t, &model)?;
            if keeps_cookies {
                // A cursor stays valid: surviving entries keep their cookies.
                let after = cookies(&t);
                for (k, c) in &after {
                    if let Some(old) = before.get(k) {
                        prop_assert_eq!(old, c, "cookie of {:?} changed", k);
                    }
                }
            }
        }
    }
}

#[test]
fn full_bucket_is_refused_and_changes_nothing() {
    let mut t = Table::new(1, SoidRange::ALL);
    let dir = Soid::from_u128(7);
    // 2-bit hashes: 4 buckets of 256.
    let mut added = 0usize;
    let mut refused = 0usize;
    for i in 0..1200u32 {
        let name = format!("f{i}");
        let d = Dentry {
            child: Soid::from_u128(100_000 + i as u128),
            ftype: FileType::Regular,
            name: Name::new(name.as_bytes()),
        };
        let can = t.can_add_entry(dir, name.as_bytes());
        let ok = t.put_dentry(dir, d);
        assert_eq!(can, ok);
        if ok {
            added += 1;
        } else {
            refused += 1;
            assert!(t.dentry(dir, name.as_bytes()).is_none());
        }
    }
    assert_eq!(added, 4 * BUCKET as usize);
    assert_eq!(refused, 1200 - added);
    t.check_invariants().unwrap();
    // Replacing an existing name in a full bucket still works.
    let d = t.readdir(dir, 0, 1).remove(0).1;
    assert!(t.can_add_entry(dir, &d.name));
    assert!(t.put_dentry(dir, d));
    // A snapshot with an over-full bucket is refused, not truncated.
    let mut entries: Vec<(Soid, Dentry)> = t.dentries().collect();
    entries.push((
        dir,
        Dentry {
            child: Soid::from_u128(1),
            ftype: FileType::Regular,
            name: Name::new(b"f1199"),
        },
    ));
    assert_eq!(
        Table::build(1, SoidRange::ALL, Vec::new(), entries).err(),
        Some(BuildError::BucketFull(dir))
    );
}

#[test]
fn primary_entries_are_stored_as_rows() {
    let mut t = Table::new(1, SoidRange::ALL);
    let dir = soid(0);
    t.put_inode(dir, inode(0, b"", true));
    for i in 1..=10u8 {
        t.put_inode(soid(i), inode(0, &[b'a' + i], false));
        t.put_dentry(
            dir,
            Dentry {
                child: soid(i),
                ftype: FileType::Regular,
                name: Name::new(&[b'a' + i]),
            },
        );
    }
    // A second link to soid(1) and an entry for a child elsewhere.
    t.put_dentry(
        dir,
        Dentry {
            child: soid(1),
            ftype: FileType::Regular,
            name: Name::new(b"link"),
        },
    );
    t.put_dentry(
        dir,
        Dentry {
            child: Soid::from_u128(1 << 100),
            ftype: FileType::Regular,
            name: Name::new(b"far"),
        },
    );
    t.check_invariants().unwrap();
    assert_eq!(t.foreign.iter().flatten().count(), 2);
    assert_eq!(t.dentry_count(), 12);
}

/// The exit a link leaves the table through, by plain recursion (no
/// memo): its parent if outside the table, else its parent's; with
/// whether every directory on the way (inside the table) is open to all.
/// A chain longer than the table's directories is a cycle: no exit.
fn naive_exit(t: &Table, d: Soid, steps: usize) -> Option<(Soid, bool)> {
    match t.inode(d) {
        None => Some((d, true)),
        Some(_) if steps > t.dir_count() || d == Soid::ROOT => None,
        Some(i) if i.is_dir() => naive_exit(t, i.parent, steps + 1)
            .map(|(e, open)| (e, open && crate::perm::open_to_all(i.perm))),
        Some(_) => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// `summary::by_exit` (chains memoised) against the plain recursion,
    /// over random tables whose parents lie inside and outside the range
    /// (cycles included) and whose directories are open or closed.
    #[test]
    fn totals_per_exit_match_plain_recursion(
        puts in prop::collection::vec(
            (0u8..6, 0u8..12, any::<bool>(), 0u8..6, 0u64..50, any::<bool>()),
            1..40,
        ),
    ) {
        let range = SoidRange::new(soid(0), soid(5)).unwrap();
        let mut t = Table::new(1, range);
        for (s, parent, dir, name, size, closed) in puts {
            let mut i = inode(parent, NAMES[name as usize], dir);
            i.uid = u32::from(s % 2);
            i.size = size;
            i.perm = if closed { 0o750 } else { 0o755 };
            t.put_inode(soid(s), i);
        }
        let mut want: BTreeMap<Soid, (summary::Summary, summary::Summary)> = BTreeMap::new();
        let mut closed = std::collections::BTreeSet::new();
        for (_, i) in t.inodes() {
            if i.is_dir() && !crate::perm::open_to_all(i.perm) {
                closed.insert((i.uid, i.gid, i.perm));
            }
            for (parent, _) in i.all_links() {
                if let Some((e, open)) = naive_exit(&t, parent, 0) {
                    let (all, open_only) = want.entry(e).or_default();
                    all.add_path(i);
                    if open {
                        open_only.add_path(i);
                    }
                }
            }
        }
        let got = summary::by_exit(&t);
        let want_exits: Vec<_> = want.into_iter().map(|(e, (a, o))| (e, a, o)).collect();
        prop_assert_eq!(&got.exits[..], &want_exits[..]);
        prop_assert_eq!(&got.closed[..], &closed.into_iter().collect::<Vec<_>>()[..]);
    }
}
