//! Random POSIX operations on a FUSE mount of a three-server cluster,
//! compared call by call with the same operations on a local directory
//! (ext4 here). Every directory is a table of its own (tiny table limits)
//! and the coordinator spreads the tables over the servers while the
//! operations run, so renames (also RENAME_NOREPLACE and
//! RENAME_EXCHANGE), links and removals cross servers (BORROW
//! and RETURN) and tables move under them. Each call's outcome — success
//! or its errno — must be the local file system's, and the two trees must
//! agree (types, modes, sizes, link counts, contents, symlink targets,
//! a user xattr)
//! every 50 operations and at the end.
//!
//! The operations come from a seeded generator: `SEXTANT_TEST_SEED`
//! replays a run (the seed is printed, and named in every failure);
//! `SEXTANT_TEST_OPS` runs more than the 1,000 of CI.
//! Skipped, and said so, without etcd or FUSE.

mod common;

use common::{dir_and_etcd, serve_with, wait_for, KillOnDrop, BIN};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Every directory splits off a table of its own.
const TINY_TABLES: &str = "table_dir_limit = 1\ntable_inode_limit = 16\n";

/// The operations per run (`SEXTANT_TEST_OPS` asks for more).
const OPS: usize = 1000;

/// splitmix64: a generator small enough to read, seeded for replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, of: &'a [T]) -> &'a T {
        &of[self.below(of.len())]
    }
}

/// One operation, on paths relative to the tree's root.
#[derive(Debug, Clone)]
enum Op {
    Mkdir(String),
    Create {
        path: String,
        len: usize,
        excl: bool,
    },
    Append(String, usize),
    Truncate(String, u64),
    Rename(String, String),
    /// renameat2 with RENAME_NOREPLACE (`false`) or RENAME_EXCHANGE.
    Rename2(String, String, bool),
    Link(String, String),
    Symlink(String, String),
    Unlink(String),
    Rmdir(String),
    Chmod(String, u32),
    /// setxattr `user.k` (no symlink followed: lsetxattr) to a value.
    SetXattr(String, usize),
    RemoveXattr(String),
    /// mkfifo (0644): a node the mount makes by MKNOD, which every later
    /// call must leave alone (an open of it for writing with no reader is
    /// ENXIO, its user xattrs EPERM, as on ext4).
    Mkfifo(String),
}

impl Op {
    /// The paths the operation names (a symlink's target is not one).
    fn paths(&self) -> Vec<&str> {
        match self {
            Op::Mkdir(p)
            | Op::Create { path: p, .. }
            | Op::Append(p, _)
            | Op::Truncate(p, _)
            | Op::Unlink(p)
            | Op::Rmdir(p)
            | Op::Chmod(p, _)
            | Op::SetXattr(p, _)
            | Op::RemoveXattr(p)
            | Op::Mkfifo(p)
            | Op::Symlink(_, p) => vec![p],
            Op::Rename(a, b) | Op::Rename2(a, b, _) | Op::Link(a, b) => vec![a, b],
        }
    }
}

/// What a call did: `Ok` or its errno.
fn outcome<T>(r: std::io::Result<T>) -> Result<(), i32> {
    r.map(|_| ()).map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// The bytes of the `n`-th write of `len` bytes (the same on both trees).
fn bytes(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + n * 7) % 251) as u8).collect()
}

fn apply(root: &Path, op: &Op, n: usize) -> Result<(), i32> {
    let p = |s: &str| root.join(s);
    // Every open is non-blocking: one of a FIFO for writing then fails
    // with ENXIO (no reader) instead of waiting for ever; a regular
    // file's open and writes do not change.
    let opener = || {
        let mut o = fs::OpenOptions::new();
        o.custom_flags(libc::O_NONBLOCK);
        o
    };
    match op {
        Op::Mkdir(d) => outcome(fs::create_dir(p(d))),
        Op::Mkfifo(f) => {
            let f = cstr(&p(f));
            // SAFETY: a NUL-terminated path alive across the call.
            errno_of(unsafe { libc::mkfifo(f.as_ptr(), 0o644) })
        }
        Op::Create { path, len, excl } => {
            let mut o = opener();
            o.write(true).mode(0o644);
            if *excl {
                o.create_new(true);
            } else {
                o.create(true).truncate(true);
            }
            outcome(
                o.open(p(path))
                    .and_then(|mut f| f.write_all(&bytes(n, *len))),
            )
        }
        Op::Append(f, len) => outcome(
            opener()
                .append(true)
                .open(p(f))
                .and_then(|mut f| f.write_all(&bytes(n, *len))),
        ),
        Op::Truncate(f, len) => outcome(
            opener()
                .write(true)
                .open(p(f))
                .and_then(|f| f.set_len(*len)),
        ),
        Op::Rename(a, b) => outcome(fs::rename(p(a), p(b))),
        Op::Rename2(a, b, exchange) => {
            let flags = if *exchange {
                libc::RENAME_EXCHANGE
            } else {
                libc::RENAME_NOREPLACE
            };
            let (a, b) = (cstr(&p(a)), cstr(&p(b)));
            // SAFETY: two NUL-terminated paths that live across the call.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    flags,
                )
            };
            errno_of(r)
        }
        Op::SetXattr(f, len) => {
            let (f, v) = (cstr(&p(f)), bytes(n, *len));
            // SAFETY: a NUL-terminated path and name, and a buffer of
            // `v.len()` bytes, all alive across the call.
            let r = unsafe {
                libc::lsetxattr(
                    f.as_ptr(),
                    c"user.k".as_ptr(),
                    v.as_ptr().cast(),
                    v.len(),
                    0,
                )
            };
            errno_of(r)
        }
        Op::RemoveXattr(f) => {
            let f = cstr(&p(f));
            // SAFETY: NUL-terminated path and name alive across the call.
            let r = unsafe { libc::lremovexattr(f.as_ptr(), c"user.k".as_ptr()) };
            errno_of(r)
        }
        Op::Link(a, b) => outcome(fs::hard_link(p(a), p(b))),
        Op::Symlink(target, at) => outcome(std::os::unix::fs::symlink(target, p(at))),
        Op::Unlink(f) => outcome(fs::remove_file(p(f))),
        Op::Rmdir(d) => outcome(fs::remove_dir(p(d))),
        Op::Chmod(f, mode) => outcome(fs::set_permissions(p(f), fs::Permissions::from_mode(*mode))),
    }
}

fn cstr(p: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// A libc call's outcome: `Ok` or errno.
fn errno_of(r: libc::c_int) -> Result<(), i32> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    }
}

/// The `user.k` xattr of `path` (not followed), if any.
fn xattr(path: &Path) -> Option<Vec<u8>> {
    let p = cstr(path);
    let mut buf = vec![0u8; 65_536];
    // SAFETY: a NUL-terminated path and name, and a buffer of its length.
    let n = unsafe {
        libc::lgetxattr(
            p.as_ptr(),
            c"user.k".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Every path below `root` (relative), directories with a trailing `/`.
fn paths(root: &Path) -> Vec<String> {
    fn walk(root: &Path, rel: &str, out: &mut Vec<String>) {
        let Ok(rd) = fs::read_dir(root.join(rel)) else {
            return;
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let is_dir = fs::symlink_metadata(root.join(&path)).is_ok_and(|m| m.is_dir());
            if is_dir {
                out.push(format!("{path}/"));
                walk(root, &path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, "", &mut out);
    out
}

/// What is compared of each entry: type and mode, and for a file its
/// size, link count and contents, for a symlink its target.
fn describe(root: &Path) -> BTreeMap<String, String> {
    paths(root)
        .into_iter()
        .map(|rel| {
            let path = root.join(rel.trim_end_matches('/'));
            let m = fs::symlink_metadata(&path).unwrap();
            let what = if m.is_dir() {
                format!("dir {:o}", m.mode() & 0o7777)
            } else if m.file_type().is_fifo() {
                // Never opened: that would wait for a writer.
                format!("fifo {:o} nlink {}", m.mode() & 0o7777, m.nlink())
            } else if m.file_type().is_symlink() {
                format!("symlink -> {}", fs::read_link(&path).unwrap().display())
            } else {
                let data = fs::read(&path).unwrap();
                let sum = data.iter().fold(0u64, |h, b| {
                    h.wrapping_mul(1_099_511_628_211) ^ u64::from(*b)
                });
                format!(
                    "file {:o} size {} nlink {} sum {sum:x}",
                    m.mode() & 0o7777,
                    m.len(),
                    m.nlink()
                )
            };
            let what = format!("{what} owner {}:{}", m.uid(), m.gid());
            let x = match xattr(&path) {
                Some(v) => format!(" xattr {} bytes {:x}", v.len(), checksum(&v)),
                None => String::new(),
            };
            (rel, what + &x)
        })
        .collect()
}

fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |h, b| {
        h.wrapping_mul(1_099_511_628_211) ^ u64::from(*b)
    })
}

/// The next operation, drawn against the reference tree as it is.
fn draw(rng: &mut Rng, reference: &Path, fresh: &mut usize) -> Op {
    let all = paths(reference);
    let dirs: Vec<String> = std::iter::once(String::new())
        .chain(
            all.iter()
                .filter(|p| p.ends_with('/'))
                .map(|p| p.trim_end_matches('/').to_string()),
        )
        .collect();
    let entries: Vec<String> = all
        .iter()
        .map(|p| p.trim_end_matches('/').to_string())
        .collect();
    let mut new_in = |rng: &mut Rng| {
        let d = rng.pick(&dirs).clone();
        *fresh += 1;
        let name = format!("n{fresh}");
        if d.is_empty() {
            name
        } else {
            format!("{d}/{name}")
        }
    };
    // An existing entry (also a missing one now and then: ENOENT).
    let any = |rng: &mut Rng| -> String {
        if entries.is_empty() || rng.below(20) == 0 {
            "missing".to_string()
        } else {
            rng.pick(&entries).clone()
        }
    };
    match rng.below(25) {
        0..=2 => Op::Mkdir(new_in(rng)),
        3..=5 => Op::Create {
            path: new_in(rng),
            len: rng.below(3_000),
            excl: rng.below(2) == 0,
        },
        6 => Op::Create {
            path: any(rng),
            len: rng.below(500),
            excl: rng.below(2) == 0,
        },
        7 => Op::Append(any(rng), rng.below(2_000)),
        8 => Op::Truncate(any(rng), rng.below(4_000) as u64),
        // Renames: onto a new name, or over an existing entry (a file
        // over a file, a directory over an empty one, and every error:
        // EISDIR, ENOTDIR, ENOTEMPTY, EINVAL into its own subtree).
        9..=11 => Op::Rename(any(rng), new_in(rng)),
        12 | 13 => Op::Rename(any(rng), any(rng)),
        14 => Op::Link(any(rng), new_in(rng)),
        15 => Op::Symlink(any(rng), new_in(rng)),
        16 => Op::Unlink(any(rng)),
        17 => Op::Rmdir(any(rng)),
        18 => Op::Chmod(any(rng), *rng.pick(&[0o755, 0o700, 0o644, 0o600, 0o1777])),
        19 => Op::Rename2(any(rng), new_in(rng), false),
        20 => Op::Rename2(any(rng), any(rng), rng.below(2) == 0),
        21 => Op::SetXattr(any(rng), rng.below(300)),
        22 => Op::RemoveXattr(any(rng)),
        23 => Op::Mkfifo(new_in(rng)),
        _ => Op::Rename2(any(rng), any(rng), true),
    }
}

fn compare(reference: &Path, mnt: &Path, seed: u64, done: usize, log: &[String]) {
    let want = describe(reference);
    let got = describe(mnt);
    if want != got {
        let mut diff = String::new();
        for (k, v) in &want {
            match got.get(k) {
                Some(g) if g == v => {}
                Some(g) => diff += &format!("  {k}: local {v}, mount {g}\n"),
                None => diff += &format!("  {k}: local {v}, missing on the mount\n"),
            }
        }
        for (k, g) in &got {
            if !want.contains_key(k) {
                diff += &format!("  {k}: only on the mount: {g}\n");
            }
        }
        panic!(
            "seed {seed}: after {done} operations the trees differ:\n{diff}the last operations:\n{}",
            log[log.len().saturating_sub(15)..].join("\n")
        );
    }
}

/// `SEXTANT_TEST_SEED`, or one from the clock (printed by the caller).
fn seed() -> u64 {
    std::env::var("SEXTANT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// `SEXTANT_TEST_OPS`, or `default`.
fn ops_or(default: usize) -> usize {
    std::env::var("SEXTANT_TEST_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The servers' config file in `dir`: [`TINY_TABLES`]. Its path.
fn tiny_config(dir: &Path) -> String {
    let config = dir.join("tiny.toml");
    fs::write(&config, TINY_TABLES).unwrap();
    config.to_str().unwrap().to_string()
}

/// Server a with `flags`, once it holds the root table: a, its address,
/// the directory holding the secret.
fn first_server(dir: &Path, etcd: &str, flags: &[&str]) -> (KillOnDrop, String, PathBuf) {
    let (a, a_addr) = serve_with(dir, etcd, "a", flags);
    let a = KillOnDrop(a);
    let secret = dir.join("a");
    common::wait_root_assigned(etcd, &secret);
    (a, a_addr, secret)
}

/// Operation `n`: drawn against `reference`, made on both trees, logged;
/// the mount's outcome must be the local file system's (`who`: said in
/// the failure).
#[allow(clippy::too_many_arguments)]
fn step(
    rng: &mut Rng,
    reference: &Path,
    mnt: &Path,
    fresh: &mut usize,
    log: &mut Vec<String>,
    n: usize,
    seed: u64,
    who: &str,
) {
    let op = draw(rng, reference, fresh);
    let want = apply(reference, &op, n);
    let got = apply(mnt, &op, n);
    log.push(format!("{n}: {op:?} -> {want:?}"));
    assert_eq!(
        got,
        want,
        "seed {seed}: operation {n} {op:?}{who}: the mount answered {got:?}, the local file \
         system {want:?}; the last operations:\n{}",
        log[log.len().saturating_sub(15)..].join("\n")
    );
}

/// Unmounts when dropped.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3").arg("-u").arg(&self.0).status();
    }
}

/// `sextant mount` of the server at `addr` on `mnt` (made here).
fn mount(dir: &Path, addr: &str, secret: &Path, mnt: &Path) -> Unmount {
    fs::create_dir(mnt).unwrap();
    let log = dir.join(format!(
        "{}.log",
        mnt.file_name().unwrap().to_string_lossy()
    ));
    let out = Command::new(BIN)
        .args(["--server", addr, "--data"])
        .arg(secret)
        .arg("mount")
        .arg("--log")
        .arg(log)
        .arg(mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Unmount(mnt.to_path_buf())
}

#[test]
fn random_operations_on_a_mount_of_three_servers_match_a_local_directory() {
    run(false);
}

/// The same, with server c killed (-9) halfway and started again a few
/// operations later: the calls that reach its tables wait for the
/// failover (the mount retries) and every outcome is still ext4's —
/// nothing acknowledged is lost, nothing is done twice.
#[test]
fn random_operations_match_a_local_directory_across_a_server_kill() {
    run(true);
}

/// Runs the operations; `kill`: kills c halfway and restarts it.
fn run(kill: bool) {
    if !common::fuse_available() {
        return;
    }
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let seed = seed();
    let ops = ops_or(OPS);
    eprintln!("SEXTANT_TEST_SEED={seed} SEXTANT_TEST_OPS={ops}");
    let config = tiny_config(dir.path());
    let flags = ["--config", config.as_str(), "--journal-sync", "nosync"];
    let (_a, a_addr, secret) = first_server(dir.path(), &etcd.url, &flags);
    let mnt = dir.path().join("mnt");
    let _unmount = mount(dir.path(), &a_addr, &secret, &mnt);
    let reference = dir.path().join("ref");
    fs::create_dir(&reference).unwrap();
    // The servers that join once there is something to spread.
    let mut joined: Vec<KillOnDrop> = Vec::new();
    let mut rng = Rng(seed);
    let mut fresh = 0usize;
    let mut log = Vec::new();
    for n in 0..ops {
        if n == ops / 8 || n == ops / 4 {
            let name = if joined.is_empty() { "b" } else { "c" };
            let (s, _) = serve_with(dir.path(), &etcd.url, name, &flags);
            joined.push(KillOnDrop(s));
        }
        if kill && n == ops / 2 - 10 {
            // Tables on c to lose: the top directories' (the balancer
            // may have given it none yet).
            let tops: Vec<String> = paths(&reference)
                .into_iter()
                .filter(|p| p.ends_with('/') && p.matches('/').count() == 1)
                .take(3)
                .collect();
            for top in &tops {
                let path = format!("/{}", top.trim_end_matches('/'));
                common::move_table(&etcd.url, &secret, &path, "c");
                log.push(format!("{n}: {path}'s table moved to c"));
            }
        }
        if kill && n == ops / 2 {
            if let Some(c) = joined.get_mut(1) {
                common::kill9(&mut c.0);
                log.push(format!("{n}: c killed (-9)"));
            }
        }
        if kill && n == ops / 2 + 20 {
            let (s, _) = serve_with(dir.path(), &etcd.url, "c", &flags);
            joined[1] = KillOnDrop(s);
            log.push(format!("{n}: c started again"));
        }
        step(
            &mut rng, &reference, &mnt, &mut fresh, &mut log, n, seed, "",
        );
        if n % 50 == 49 {
            compare(&reference, &mnt, seed, n + 1, &log);
        }
    }
    // The tables were spread over the three servers while this ran.
    wait_for("tables on three servers", Duration::from_secs(60), || {
        let t = common::tables_by_server(&common::status_on(&etcd.url, &secret));
        t.len() == 3 && t.iter().all(|x| x.1 > 0)
    });
    compare(&reference, &mnt, seed, ops, &log);
}

/// A path of one to three names from a small pool, so that concurrent
/// operations meet: the same names, and renames that would nest two
/// directories in each other.
fn pooled(rng: &mut Rng) -> String {
    let depth = 1 + rng.below(3);
    (0..depth)
        .map(|_| *rng.pick(&["a", "b", "c", "d", "e"]))
        .collect::<Vec<_>>()
        .join("/")
}

/// The errnos concurrent operations may meet on a local file system.
const EXPECTED: [i32; 8] = [
    libc::ENOENT,
    libc::EEXIST,
    libc::ENOTEMPTY,
    libc::EINVAL,
    libc::ENOTDIR,
    libc::EISDIR,
    libc::EPERM,
    libc::EBUSY,
];

/// Four writers at once, each on a mount of its own (two of server a,
/// one of b, one of c), make, rename (also RENAME_EXCHANGE), link and remove
/// directories and files among a few shared names, every directory a
/// table of its own on three servers, so that concurrent renames cross
/// servers and try to nest directories in each other (the cycle-forming
/// pairs). Every call must fail only as a local file system can (never
/// EXDEV or EIO), and afterwards the namespace is whole: the walk ends,
/// every directory is reached once, every file's link count is its
/// number of names, a directory's is 2 + its subdirectories, and every
/// mount and the search (`sextant stats`) see the same entries.
///
/// One writer per mount: two renames at once on one Linux mount can make
/// the VFS answer `ESTALE` by itself — a lookup that finds a directory
/// another client moved must move its dentry, which takes the
/// superblock's rename mutex only by trylock (`__d_unalias`), and a
/// cross-directory rename on the same mount holds it. (NFS meets the
/// same.) Alone on its mount, a writer met it too: a rename holds that
/// mutex while it looks its names up. The mount now drops a moved
/// directory's old name before it answers (fuse/src/unalias.rs), which
/// made these rarer, not gone (ARCHITECTURE, "Directories moved
/// elsewhere", says what is left). So a call answered
/// `ESTALE` is still made again after 50 ms and a lookup of its paths
/// (which moves the dentry, holding no lock), counted and each printed,
/// up to 5 times; one that stays `ESTALE` is a fault of the mount's,
/// e.g. a node for an inode that is gone (`Nodes::made`).
#[test]
fn concurrent_operations_on_two_mounts_keep_the_namespace_whole() {
    if !common::fuse_available() {
        return;
    }
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    let seed = seed();
    eprintln!("SEXTANT_TEST_SEED={seed}");
    let config = tiny_config(dir.path());
    let flags = ["--config", config.as_str(), "--journal-sync", "nosync"];
    let (_a, a_addr, secret) = first_server(dir.path(), &etcd.url, &flags);
    let (b, b_addr) = serve_with(dir.path(), &etcd.url, "b", &flags);
    let _b = KillOnDrop(b);
    let (c, c_addr) = serve_with(dir.path(), &etcd.url, "c", &flags);
    let _c = KillOnDrop(c);
    // One writer per mount (see the test's doc): two mounts of a, one
    // of b, one of c.
    let mounts: Vec<PathBuf> = ["ma", "mb", "mc", "md"]
        .iter()
        .map(|m| dir.path().join(m))
        .collect();
    let _unmount: Vec<Unmount> = mounts
        .iter()
        .zip([&a_addr, &b_addr, &c_addr, &a_addr])
        .map(|(m, addr)| mount(dir.path(), addr, &secret, m))
        .collect();
    let ma = mounts[0].clone();
    for top in ["a", "b", "c", "d", "e"] {
        fs::create_dir(ma.join(top)).unwrap();
    }
    // The tables spread before the writers start, so that they meet
    // across servers from the first operation.
    for (top, server) in [
        ("/a", "b"),
        ("/b", "c"),
        ("/c", "a"),
        ("/d", "b"),
        ("/e", "c"),
    ] {
        common::move_table(&etcd.url, &secret, top, server);
    }
    const PER_WRITER: usize = 250;
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let root = mounts[w as usize].clone();
            std::thread::spawn(move || {
                let mut rng = Rng(seed ^ (w + 1).wrapping_mul(0x9E37_79B9));
                let mut unexpected = Vec::new();
                let mut estale = 0;
                for n in 0..PER_WRITER {
                    let op = match rng.below(10) {
                        0 | 1 => Op::Mkdir(pooled(&mut rng)),
                        2 => Op::Create {
                            path: pooled(&mut rng),
                            len: rng.below(100),
                            excl: true,
                        },
                        3..=5 => Op::Rename(pooled(&mut rng), pooled(&mut rng)),
                        6 => Op::Rename2(pooled(&mut rng), pooled(&mut rng), true),
                        7 => Op::Link(pooled(&mut rng), pooled(&mut rng)),
                        8 => Op::Unlink(pooled(&mut rng)),
                        _ => Op::Rmdir(pooled(&mut rng)),
                    };
                    // The VFS's own ESTALE (see above) comes before the
                    // call reaches the file system: the call is made
                    // again, as a program on NFS would; one that stays
                    // ESTALE is the mount's fault.
                    let mut outcome = apply(&root, &op, n);
                    let mut again = 0;
                    while outcome == Err(libc::ESTALE) && again < 5 {
                        again += 1;
                        estale += 1;
                        eprintln!("writer {w} op {n} {op:?}: ESTALE ({again})");
                        std::thread::sleep(Duration::from_millis(50));
                        // Looked up outside the call first: a rename holds
                        // the rename mutex while it looks up, so only a
                        // lookup of its own moves a moved directory's
                        // dentry.
                        for path in op.paths() {
                            let _ = fs::symlink_metadata(root.join(path));
                        }
                        outcome = apply(&root, &op, n);
                    }
                    if let Err(e) = outcome {
                        if !EXPECTED.contains(&e) {
                            unexpected.push(format!("writer {w} op {n} {op:?}: errno {e}"));
                        }
                    }
                }
                if estale > 0 {
                    eprintln!("writer {w}: {estale} calls refused by the VFS (ESTALE), made again");
                }
                unexpected
            })
        })
        .collect();
    let unexpected: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    if !unexpected.is_empty() {
        for m in ["ma", "mb", "mc", "md"] {
            let log = fs::read_to_string(dir.path().join(format!("{m}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- the end of {m}'s log:");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
    assert!(
        unexpected.is_empty(),
        "seed {seed}: errors no local file system gives:\n{}",
        unexpected.join("\n")
    );
    // Both mounts see one namespace, and it is whole — once the changes
    // each made have reached the other's caches.
    let mut last = String::new();
    let mut seen = BTreeMap::new();
    let settled = (0..300).any(|_| {
        let both = whole(&ma).and_then(|a| {
            for m in &mounts[1..] {
                if whole(m)? != a {
                    return Err(format!("{} differs from ma", m.display()));
                }
            }
            Ok(a)
        });
        match both {
            Ok(tree) => {
                seen = tree;
                true
            }
            Err(why) => {
                last = why;
                std::thread::sleep(Duration::from_millis(100));
                false
            }
        }
    });
    assert!(settled, "seed {seed}: not whole within 30 s: {last}");
    let count = seen.len();
    let stats = common::sextant_ok(&a_addr, &secret, &["stats", "--json", "/"]);
    assert!(
        stats.contains(&format!("\"count\":{}", count + 1)),
        "seed {seed}: {count} entries below / and / itself: {stats}"
    );
    eprintln!("{count} entries after {} operations", 4 * PER_WRITER);
}

/// The tree below `root` if it is whole (the walk ends, every directory
/// reached once, link counts right), else why not.
fn whole(root: &Path) -> Result<BTreeMap<String, String>, String> {
    let mut dirs_seen = std::collections::BTreeSet::new();
    let mut names_of: BTreeMap<u64, usize> = BTreeMap::new();
    let mut nlink_of: BTreeMap<u64, u64> = BTreeMap::new();
    let listed = paths(root);
    for rel in &listed {
        let m = fs::symlink_metadata(root.join(rel.trim_end_matches('/')))
            .map_err(|e| format!("{rel}: {e}"))?;
        if m.is_dir() {
            if !dirs_seen.insert(m.ino()) {
                return Err(format!("directory {rel} reached twice"));
            }
            let subdirs = listed
                .iter()
                .filter(|p| {
                    p.ends_with('/')
                        && p.strip_prefix(rel.as_str()).is_some_and(|r| {
                            !r.is_empty() && r.trim_end_matches('/').matches('/').count() == 0
                        })
                })
                .count() as u64;
            if m.nlink() != 2 + subdirs {
                return Err(format!(
                    "{rel}'s link count is {} with {subdirs} subdirectories",
                    m.nlink()
                ));
            }
        } else {
            *names_of.entry(m.ino()).or_default() += 1;
            nlink_of.insert(m.ino(), m.nlink());
        }
    }
    for (ino, names) in &names_of {
        if nlink_of[ino] != *names as u64 {
            return Err(format!(
                "inode {ino}'s link count is {} with {names} names",
                nlink_of[ino]
            ));
        }
    }
    Ok(describe(root)
        .into_iter()
        .map(|(k, v)| (k, v.split(" nlink").next().unwrap_or("").to_string()))
        .collect())
}

/// The environment variables of [`random_ops_as_a_user_child`]: the
/// reference tree, the mount, the seed and the number of operations.
const CHILD_REF: &str = "SEXTANT_TEST_RANDOM_REF";
const CHILD_MNT: &str = "SEXTANT_TEST_RANDOM_MNT";
const CHILD_SEED: &str = "SEXTANT_TEST_RANDOM_SEED";
const CHILD_OPS: &str = "SEXTANT_TEST_RANDOM_OPS";

/// The half of `random_operations_as_a_user_match_a_local_directory` that
/// runs as nobody: the random calls on both trees, each outcome compared
/// (the parent compares the trees afterwards, as root: nobody cannot read
/// everything). A no-op when run as a test of its own.
#[test]
fn random_ops_as_a_user_child() {
    let Ok(reference) = std::env::var(CHILD_REF) else {
        return;
    };
    assert_ne!(nix::unistd::getuid().as_raw(), 0, "runs as a user");
    let reference = PathBuf::from(reference);
    let mnt = PathBuf::from(std::env::var(CHILD_MNT).unwrap());
    let seed: u64 = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    let ops: usize = std::env::var(CHILD_OPS).unwrap().parse().unwrap();
    let mut rng = Rng(seed);
    let mut fresh = 0usize;
    let mut log = Vec::new();
    for n in 0..ops {
        step(
            &mut rng,
            &reference,
            &mnt,
            &mut fresh,
            &mut log,
            n,
            seed,
            " as nobody",
        );
    }
    let failed = log.iter().filter(|l| l.contains("-> Err(")).count();
    println!("\n{ops} operations as nobody, {failed} refused alike");
}

/// The random calls of `random_operations_on_a_mount_of_three_servers_
/// match_a_local_directory` made by a user (nobody) through an
/// `allow_other` mount, among directories root made first on both trees
/// — `pub` (0777), `sticky` (1777, with root's 0666 file), `ro` (0755,
/// root's file), `priv` (0700, root's file) — whose tables sit on three
/// servers: every outcome is ext4's, EACCES and EPERM included (chmod of
/// root's files, removals in the sticky directory, writes in `ro`), and
/// the trees agree afterwards, owners included.
#[test]
fn random_operations_as_a_user_match_a_local_directory() {
    if !common::fuse_available() || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs FUSE and setpriv");
        return;
    }
    let Some((dir, etcd)) = dir_and_etcd() else {
        return;
    };
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let seed = seed();
    let ops = ops_or(600);
    eprintln!("SEXTANT_TEST_SEED={seed} SEXTANT_TEST_OPS={ops}");
    let config = tiny_config(dir.path());
    let flags = ["--config", config.as_str(), "--journal-sync", "nosync"];
    let (_a, a_addr, secret) = first_server(dir.path(), &etcd.url, &flags);
    let mut servers = Vec::new();
    for name in ["b", "c"] {
        let (s, _) = serve_with(dir.path(), &etcd.url, name, &flags);
        servers.push(KillOnDrop(s));
    }
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let out = Command::new(BIN)
        .args(["--server", &a_addr, "--data"])
        .arg(&secret)
        .args(["mount", "-o", "allow_other", "--log"])
        .arg(dir.path().join("mnt.log"))
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _unmount = Unmount(mnt.clone());
    let reference = dir.path().join("ref");
    fs::create_dir(&reference).unwrap();
    for root in [&reference, &mnt] {
        fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
        common::sh(
            root,
            "mkdir pub sticky ro priv && chmod 777 pub && chmod 1777 sticky && chmod 755 ro \
             && chmod 700 priv && echo r > sticky/rootfile && chmod 666 sticky/rootfile \
             && echo r > ro/f && chmod 644 ro/f && echo r > priv/f && mkdir pub/sub",
        );
    }
    for (path, server) in [
        ("/pub", "b"),
        ("/sticky", "c"),
        ("/ro", "b"),
        ("/pub/sub", "c"),
    ] {
        common::move_table(&etcd.url, &secret, path, server);
    }
    let child = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "random_ops_as_a_user_child", "--nocapture"])
        .env(CHILD_REF, &reference)
        .env(CHILD_MNT, &mnt)
        .env(CHILD_SEED, seed.to_string())
        .env(CHILD_OPS, ops.to_string())
        .current_dir("/")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success() && said.contains("operations as nobody"),
        "the child failed: {said}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    eprintln!(
        "{}",
        said.lines()
            .filter(|l| l.contains("as nobody"))
            .collect::<String>()
    );
    compare(&reference, &mnt, seed, ops, &[]);
}
