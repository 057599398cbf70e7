//! Model-based property test of the engine's namespace (in the spirit of
//! JuiceFS's `fsMachine`): random sequences of every namespace operation,
//! run by several credentials, with valid and invalid arguments, against a
//! small independent reference model written from Linux/ext4 semantics
//! (`model/reference.rs`). Every result and errno is compared, the nodes an
//! operation touched are compared after it, and the whole tree (names,
//! types, attributes, link counts, symlink targets, xattrs) is compared
//! every few steps and after each checkpoint, clean reopen and crash.
//!
//! `SEXTANT_MODEL_CASES` sets the number of cases (default 256),
//! `SEXTANT_MODEL_STATS=1` prints how often each operation gave each errno,
//! The engine bugs this test found are fixed; each keeps a regression test
//! (`bugN_*`) at the end of this file.

#[path = "model/harness.rs"]
mod harness;
#[path = "model/reference.rs"]
mod reference;

use harness::{Harness, Op, Sel, B, GIDS, UIDS};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reference::{SetOp, Time, XFlags};
use sextant_engine::RenameFlags;
use sextant_types::{Credentials, FileType, FsError, Soid};

// ---- strategies -------------------------------------------------------------

fn name() -> impl Strategy<Value = B> {
    prop_oneof![
        24 => prop::sample::select(vec!["a", "b", "c", "d", "e"]).prop_map(|s| B(s.into())),
        1 => Just(B(Vec::new())),
        1 => Just(B(b".".to_vec())),
        1 => Just(B(b"..".to_vec())),
        1 => Just(B(b"x/y".to_vec())),
        1 => Just(B(b"n\0l".to_vec())),
        1 => Just(B(vec![b'L'; 255])),
        1 => Just(B(vec![b'L'; 256])),
    ]
}

fn sel_dir() -> impl Strategy<Value = Sel> {
    prop_oneof![9 => any::<u8>().prop_map(Sel::Dir), 1 => any::<u8>().prop_map(Sel::Any)]
}

fn sel_any() -> impl Strategy<Value = Sel> {
    prop_oneof![1 => any::<u8>().prop_map(Sel::Dir), 3 => any::<u8>().prop_map(Sel::Any)]
}

fn cred() -> impl Strategy<Value = u8> {
    prop_oneof![3 => Just(0u8), 5 => 1u8..5]
}

fn perm() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => prop::sample::select(vec![
            0o755, 0o777, 0o700, 0o644, 0o600, 0o1777, 0o2775, 0o2755, 0o2777, 0o4755, 0o6755,
            0o2644, 0o2070, 0o000, 0o555, 0o711, 0o770, 0o1770, 0o3777, 0o7777, 0o070, 0o007,
        ]),
        1 => 0u32..0o10000,
    ]
}

fn path_comp() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => prop::sample::select(vec!["a", "b", "c", "d", "e"]).prop_map(|s| s.as_bytes().to_vec()),
        2 => Just(b".".to_vec()),
        2 => Just(b"..".to_vec()),
        1 => Just(vec![b'L'; 256]),
    ]
}

/// A path: components joined by `/`, optionally absolute, optionally with
/// a trailing slash.
fn path(force_abs: bool) -> impl Strategy<Value = B> {
    (
        prop::collection::vec(path_comp(), 0..5),
        any::<bool>(),
        prop::bool::weighted(0.15),
    )
        .prop_map(move |(comps, abs, trailing)| {
            let mut p = Vec::new();
            if abs || force_abs {
                p.push(b'/');
            }
            p.extend(comps.join(&b'/'));
            if trailing && !comps.is_empty() {
                p.push(b'/');
            }
            B(p)
        })
}

fn target() -> impl Strategy<Value = B> {
    prop_oneof![
        20 => path(false).prop_filter("empty", |p| !p.0.is_empty()),
        1 => Just(B(Vec::new())),
    ]
}

fn time() -> impl Strategy<Value = Option<Time>> {
    prop_oneof![
        2 => Just(None),
        3 => Just(Some(Time::Now)),
        2 => (-5_000_000_000i64..5_000_000_000).prop_map(|t| Some(Time::At(t))),
    ]
}

fn setop() -> impl Strategy<Value = SetOp> {
    prop_oneof![
        3 => perm().prop_map(SetOp::Chmod),
        3 => (
            prop::option::of(prop::sample::select(UIDS.to_vec())),
            prop::option::of(prop::sample::select(GIDS.to_vec())),
        )
            .prop_filter("chown(-1, -1)", |(u, g)| u.is_some() || g.is_some())
            .prop_map(|(u, g)| SetOp::Chown(u, g)),
        2 => prop_oneof![Just(0u64), Just(1), Just(4096), Just(1 << 40)].prop_map(SetOp::Truncate),
        3 => (time(), time())
            .prop_filter("both omitted", |(a, m)| a.is_some() || m.is_some())
            .prop_map(|(a, m)| SetOp::Times(a, m)),
    ]
}

fn xname() -> impl Strategy<Value = B> {
    prop_oneof![
        6 => prop::sample::select(vec!["user.a", "user.b", "trusted.t", "security.s"])
            .prop_map(|s| B(s.into())),
        1 => Just(B(b"foo.bar".to_vec())),
        1 => Just(B(b"user.".to_vec())),
        1 => Just(B(Vec::new())),
        1 => Just(B([b"user.".to_vec(), vec![b'x'; 251]].concat())),
    ]
}

fn xvalue() -> impl Strategy<Value = B> {
    prop_oneof![
        20 => prop::collection::vec(any::<u8>(), 0..8).prop_map(B),
        1 => Just(B(vec![7u8; 65537])),
    ]
}

fn xflags() -> impl Strategy<Value = XFlags> {
    prop_oneof![
        Just(XFlags::Any),
        Just(XFlags::Create),
        Just(XFlags::Replace)
    ]
}

fn special() -> impl Strategy<Value = (FileType, u32)> {
    prop_oneof![
        3 => Just((FileType::Fifo, 0)),
        3 => Just((FileType::Socket, 0)),
        2 => Just((FileType::CharDevice, 0x0103)),
        1 => Just((FileType::CharDevice, 0)),
        1 => Just((FileType::BlockDevice, 0x0801)),
        1 => Just((FileType::Regular, 0)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (cred(), sel_dir(), name()).prop_map(|(c, d, n)| Op::Lookup(c, d, n)),
        2 => sel_any().prop_map(Op::Getattr),
        10 => (cred(), sel_dir(), name(), perm(), any::<bool>())
            .prop_map(|(c, d, n, p, x)| Op::Create(c, d, n, p, x)),
        3 => (cred(), sel_dir(), name(), special(), perm())
            .prop_map(|(c, d, n, (t, r), p)| Op::Mknod(c, d, n, t, p, r)),
        10 => (cred(), sel_dir(), name(), perm()).prop_map(|(c, d, n, p)| Op::Mkdir(c, d, n, p)),
        6 => (cred(), sel_dir(), name(), target()).prop_map(|(c, d, n, t)| Op::Symlink(c, d, n, t)),
        7 => (cred(), sel_dir(), name()).prop_map(|(c, d, n)| Op::Unlink(c, d, n)),
        8 => (cred(), sel_dir(), name()).prop_map(|(c, d, n)| Op::Rmdir(c, d, n)),
        14 => (
            cred(),
            sel_dir(),
            name(),
            sel_dir(),
            name(),
            prop_oneof![6 => Just((false, false)), 2 => Just((true, false)), 3 => Just((false, true)), 1 => Just((true, true))],
        )
            .prop_map(|(c, od, on, nd, nn, (nr, x))| Op::Rename(c, od, on, nd, nn, nr, x)),
        5 => (cred(), sel_any(), sel_dir(), name()).prop_map(|(c, t, d, n)| Op::Link(c, t, d, n)),
        2 => sel_any().prop_map(Op::Readlink),
        3 => (cred(), sel_dir(), 1usize..4).prop_map(|(c, d, l)| Op::Readdir(c, d, l)),
        2 => (cred(), sel_dir(), 1usize..3).prop_map(|(c, d, l)| Op::CursorStart(c, d, l)),
        5 => (1usize..3).prop_map(Op::CursorNext),
        11 => (cred(), sel_any(), setop()).prop_map(|(c, t, s)| Op::Setattr(c, t, s)),
        3 => (cred(), sel_any(), xname()).prop_map(|(c, t, n)| Op::Getxattr(c, t, n)),
        6 => (cred(), sel_any(), xname(), xvalue(), xflags())
            .prop_map(|(c, t, n, v, f)| Op::Setxattr(c, t, n, v, f)),
        2 => (cred(), sel_any()).prop_map(|(c, t)| Op::Listxattr(c, t)),
        3 => (cred(), sel_any(), xname()).prop_map(|(c, t, n)| Op::Removexattr(c, t, n)),
        6 => (cred(), path(true), any::<bool>()).prop_map(|(c, p, f)| Op::Resolve(c, p, f)),
        1 => Just(Op::Sync),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

/// One test case: engine settings and an operation sequence.
#[derive(Clone)]
struct Case {
    limits: (usize, usize),
    root_perm: u32,
    ops: Vec<Op>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "limits {:?}, root perm {:o}, ops:",
            self.limits, self.root_perm
        )?;
        for (i, op) in self.ops.iter().enumerate() {
            writeln!(f, "  {i:3}: {op:?}")?;
        }
        Ok(())
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just((20_000, 2_000)), Just((16, 4)), Just((8, 2))],
        prop::sample::select(vec![0o755u32, 0o777, 0o1777]),
        prop::collection::vec(op(), 1..250),
    )
        .prop_map(|(limits, root_perm, ops)| Case {
            limits,
            root_perm,
            ops,
        })
}

/// Runs a case; the whole tree is compared after every step.
fn run_case(c: &Case) -> Result<Harness, String> {
    let mut h = Harness::new(c.limits.0, c.limits.1, c.root_perm);
    for (i, op) in c.ops.iter().enumerate() {
        h.step(op).map_err(|e| format!("step {i}: {e}"))?;
        h.check_tree().map_err(|e| format!("after step {i}: {e}"))?;
    }
    h.check_tree().map_err(|e| format!("at the end: {e}"))?;
    Ok(h)
}

#[test]
fn engine_matches_reference_model() {
    let cases = std::env::var("SEXTANT_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 4096,
        failure_persistence: None,
        ..Config::default()
    });
    // (case runs, operations, outcome counts per (operation, result), max tables)
    let stats =
        std::cell::RefCell::new((0usize, 0usize, std::collections::BTreeMap::new(), 0usize));
    let result = runner.run(&case(), |c| {
        let h = run_case(&c).map_err(TestCaseError::fail)?;
        let mut s = stats.borrow_mut();
        s.0 += 1;
        s.1 += h.steps;
        s.3 = s.3.max(h.e().stats().tables);
        for (k, v) in h.outcomes {
            *s.2.entry(k).or_insert(0usize) += v;
        }
        Ok(())
    });
    let s = stats.into_inner();
    if std::env::var("SEXTANT_MODEL_STATS").is_ok() {
        for ((op, outcome), n) in &s.2 {
            eprintln!("  {op:24} {outcome:12} {n}");
        }
    }
    eprintln!(
        "model test: {} passing case runs, {} operations run, at most {} tables",
        s.0, s.1, s.3
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---- deterministic cases ----------------------------------------------------

fn run_ops(ops: &[Op]) -> Harness {
    run_ops_in(0o755, ops)
}

fn run_ops_in(root_perm: u32, ops: &[Op]) -> Harness {
    let mut h = Harness::new(16, 4, root_perm);
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = h.step(op) {
            panic!("step {i} {op:?}: {e}");
        }
        if let Err(e) = h.check_tree() {
            panic!("after step {i} {op:?}: {e}");
        }
    }
    h
}

fn b(s: &str) -> B {
    B(s.as_bytes().to_vec())
}

/// Model ids are creation order; `Sel::Any(i)` picks the i-th live node.
const ROOT_DIR: Sel = Sel::Dir(0);

#[test]
fn rename_exchange_across_dirs_keeps_dir_link_counts() {
    // /a (dir with subdir /a/s), /b (dir with file /b/f): exchange /a/s <-> /b/f.
    let h = run_ops(&[
        Op::Mkdir(0, ROOT_DIR, b("a"), 0o755),
        Op::Mkdir(0, ROOT_DIR, b("b"), 0o755),
        Op::Mkdir(0, Sel::Any(1), b("s"), 0o755),
        Op::Create(0, Sel::Any(2), b("f"), 0o644, true),
        Op::Rename(0, Sel::Any(1), b("s"), Sel::Any(2), b("f"), false, true),
        Op::Reopen,
    ]);
    let e = h.e();
    let root = Credentials::root();
    let a = e.lookup(&root, Soid::ROOT, b"a").unwrap();
    let bb = e.lookup(&root, Soid::ROOT, b"b").unwrap();
    assert_eq!((a.nlink, bb.nlink), (2, 3));
    let s = e.lookup(&root, bb.soid, b"f").unwrap();
    assert_eq!((s.ftype, s.parent), (FileType::Directory, bb.soid));
    assert_eq!(
        e.lookup(&root, a.soid, b"s").unwrap().ftype,
        FileType::Regular
    );
    assert_eq!(e.getattr(Soid::ROOT).unwrap().nlink, 4);
}

#[test]
fn rename_over_empty_dir_and_not_over_full_one() {
    let h = run_ops(&[
        Op::Mkdir(0, ROOT_DIR, b("a"), 0o755),
        Op::Mkdir(0, ROOT_DIR, b("b"), 0o755),
        Op::Mkdir(0, ROOT_DIR, b("c"), 0o755),
        Op::Create(0, Sel::Any(3), b("f"), 0o644, true),
        // b is empty: replaced; c is not: ENOTEMPTY; a file over a dir: EISDIR.
        Op::Rename(0, ROOT_DIR, b("a"), ROOT_DIR, b("b"), false, false),
        Op::Rename(0, ROOT_DIR, b("b"), ROOT_DIR, b("c"), false, false),
        Op::Rename(0, Sel::Any(2), b("f"), ROOT_DIR, b("b"), false, false),
        Op::Crash,
    ]);
    let e = h.e();
    let root = Credentials::root();
    assert_eq!(
        e.rename(
            &root,
            Soid::ROOT,
            b"b",
            Soid::ROOT,
            b"c",
            RenameFlags::default()
        )
        .unwrap_err(),
        FsError::NotEmpty
    );
    assert_eq!(e.getattr(Soid::ROOT).unwrap().nlink, 4);
    assert_eq!(h.model.nodes.len(), 4);
}

#[test]
fn hard_link_survives_unlink_of_primary_name() {
    let h = run_ops(&[
        Op::Mkdir(0, ROOT_DIR, b("d"), 0o755),
        Op::Create(0, ROOT_DIR, b("f"), 0o644, true),
        Op::Link(0, Sel::Any(2), Sel::Any(1), b("g")),
        Op::Unlink(0, ROOT_DIR, b("f")),
        Op::Sync,
        Op::Link(0, Sel::Any(2), ROOT_DIR, b("h")),
        Op::Unlink(0, Sel::Any(1), b("g")),
        Op::Crash,
    ]);
    let e = h.e();
    let root = Credentials::root();
    let f = e.lookup(&root, Soid::ROOT, b"h").unwrap();
    assert_eq!((f.nlink, f.parent), (1, Soid::ROOT));
    assert_eq!(
        e.lookup(&root, Soid::ROOT, b"f").unwrap_err(),
        FsError::NotFound
    );
}

#[test]
fn readdir_cursor_survives_concurrent_changes() {
    let mut h = Harness::new(16, 4, 0o755);
    let root = Credentials::root();
    let names: Vec<String> = (0..40).map(|i| format!("n{i:02}")).collect();
    for n in &names {
        h.step(&Op::Create(0, ROOT_DIR, b(n), 0o644, true)).unwrap();
    }
    let mut seen = std::collections::BTreeMap::new();
    let mut after = 0;
    let mut round = 0;
    loop {
        let page = h.e().readdir(&root, Soid::ROOT, after, 3).unwrap();
        let Some(last) = page.last() else { break };
        after = last.cookie;
        for d in &page {
            *seen
                .entry(String::from_utf8(d.name.to_vec()).unwrap())
                .or_insert(0) += 1;
        }
        // Between pages: remove one of the odd names, add a new one.
        let victim = format!("n{:02}", 2 * round + 1);
        if round < 20 {
            h.step(&Op::Unlink(0, ROOT_DIR, b(&victim))).unwrap();
        }
        h.step(&Op::Create(
            0,
            ROOT_DIR,
            b(&format!("new{round}")),
            0o644,
            true,
        ))
        .unwrap();
        if round % 5 == 4 {
            h.step(&Op::Sync).unwrap();
        }
        round += 1;
    }
    for (i, n) in names.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(seen.get(n), Some(&1), "{n} present throughout");
        }
    }
    assert!(seen.values().all(|&c| c == 1), "{seen:?}");
    h.check_tree().unwrap();
}

// ---- regression tests of engine bugs found by the model (all fixed) --------
//
// Each runs the minimal sequence that exposed the bug through the model
// comparison; each failed before its fix.

const ALICE: u8 = 1;
const BOB: u8 = 2;

#[test]
fn bug1_xattr_unknown_namespace_checks_permission_first() {
    // Linux: xattr_permission (EACCES) before the handler lookup (EOPNOTSUPP).
    run_ops(&[
        Op::Mkdir(0, ROOT_DIR, b("d"), 0o700),
        Op::Setxattr(ALICE, Sel::Any(1), b("foo.bar"), b("v"), XFlags::Any),
    ]);
}

#[test]
fn bug2_mkdir_drops_requested_suid_sgid() {
    // Linux: vfs_mkdir keeps S_IRWXUGO|S_ISVTX: perm 0755.
    run_ops(&[Op::Mkdir(0, ROOT_DIR, b("d"), 0o6755)]);
}

#[test]
fn bug3_utime_now_with_omit_needs_owner() {
    // Linux: utimensat({UTIME_NOW, UTIME_OMIT}) sets ATTR_TIMES_SET: EPERM for
    // a non-owner even with write permission.
    run_ops(&[
        Op::Create(0, ROOT_DIR, b("f"), 0o666, true),
        Op::Setattr(ALICE, Sel::Any(1), SetOp::Times(Some(Time::Now), None)),
    ]);
}

#[test]
fn bug4_symlink_empty_target_is_enoent_first() {
    run_ops(&[
        Op::Mkdir(0, ROOT_DIR, b("d"), 0o700),
        Op::Symlink(ALICE, Sel::Any(1), b("s"), B(Vec::new())),
    ]);
}

#[test]
fn bug5_rename_exchange_missing_target_under_source() {
    // Linux: RENAME_EXCHANGE with a missing target is ENOENT before the
    // "source is an ancestor of the target" EINVAL.
    run_ops(&[
        Op::Mkdir(0, ROOT_DIR, b("d"), 0o755),
        Op::Rename(0, ROOT_DIR, b("d"), Sel::Any(1), b("x"), false, true),
    ]);
}

#[test]
fn bug6_resolve_trailing_slash_needs_directory() {
    run_ops(&[
        Op::Create(0, ROOT_DIR, b("f"), 0o644, true),
        Op::Resolve(0, b("/f/"), false),
    ]);
}

#[test]
fn bug7_chown_same_uid_by_non_owner_is_eperm() {
    // Linux chown_ok: an unchanged uid is allowed only to the owner. The
    // engine accepts it and clears the owner's setuid bit.
    run_ops_in(
        0o777,
        &[
            Op::Create(ALICE, ROOT_DIR, b("f"), 0o4755, true),
            Op::Setattr(BOB, Sel::Any(1), SetOp::Chown(Some(1000), None)),
        ],
    );
}

#[test]
fn bug8_setxattr_bad_name_before_big_value() {
    run_ops(&[Op::Setxattr(
        0,
        ROOT_DIR,
        B(Vec::new()),
        B(vec![0; 65537]),
        XFlags::Any,
    )]);
}

#[test]
fn bug9_mknod_char_device_needs_root() {
    run_ops_in(
        0o777,
        &[Op::Mknod(
            ALICE,
            ROOT_DIR,
            b("c"),
            FileType::CharDevice,
            0o644,
            0x0103,
        )],
    );
}

#[test]
fn bug10_sgid_kept_without_group_exec_in_setgid_dir() {
    // Linux mode_strip_sgid: only S_ISGID|S_IXGRP is stripped; 02644 stays.
    run_ops(&[
        Op::Mkdir(0, ROOT_DIR, b("g"), 0o777),
        Op::Setattr(0, Sel::Any(1), SetOp::Chmod(0o2777)),
        Op::Create(ALICE, Sel::Dir(1), b("f"), 0o2644, true),
    ]);
}
