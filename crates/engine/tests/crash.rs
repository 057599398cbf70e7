//! Crash test: the engine runs in a child process doing random namespace
//! operations and is SIGKILLed at random moments, then recovered. Every
//! acknowledged operation must be present, and the recovered state must
//! equal the state after some prefix of the operation history.
//!
//! # Running
//!
//! ```text
//! cargo test -p sextant-engine --test crash                 # ~30 kills
//! SEXTANT_CRASH_KILLS=200 cargo test -p sextant-engine --test crash -- --nocapture
//! SEXTANT_CRASH_SEED=1234 ...                               # fix the master seed
//! ```
//!
//! The master seed (printed at the start) fixes the operation sequences,
//! the kill delays and which data directories are reused; the exact kill
//! moment depends on timing, so a failure prints the round's own seed,
//! kill delay and acknowledgement count as well.
//!
//! # How it works
//!
//! - *Child*: this test binary re-executed on its own ignored test
//!   [`child_entry`] (`--exact child_entry --ignored`), with the data
//!   directory and a seed in environment variables. It opens the engine on
//!   the directory with the real journal (`SyncMode::Fsync`), small table
//!   limits (splits), a 20 ms flusher with short dirty ages and a short
//!   journal budget (checkpoints, journal trims, segment rotation) and
//!   sometimes a tiny cache (evictions and reloads). One thread applies the
//!   operations of [`OpStream`] strictly in order, never waiting; a second
//!   thread waits for the newest LSN (so operations share journal syncs)
//!   and then reports "op i and everything before it is acknowledged" with
//!   a single `write(2)` to stdout. At most [`IN_FLIGHT`] operations run
//!   ahead of the last acknowledgement written.
//! - *Operations* are generated from the seed as *intents* over a fixed
//!   pool of names and paths (`mkdir /a/b`, `rename /c /a/d`, ...),
//!   independent of their results, so operation i is the same in the child
//!   and the parent. Failing operations are allowed (and common).
//! - *Parent*: for each round it spawns the child on a fresh or reused data
//!   directory (a directory lives for 1–3 rounds, so a child also continues
//!   from a recovered state and may be killed during its own recovery),
//!   SIGKILLs it after a random delay, then opens the engine in-process,
//!   dumps the whole state (paths, types, permissions, owners, link counts,
//!   sizes, symlink targets, xattrs, hard-link lists, orphan inodes; no
//!   timestamps and no SOIDs), reopens it once more (recovering a recovered
//!   store) and checks the dump is unchanged.
//! - *Reference*: the same operations on the same engine API over a
//!   `MemStore` with the journal off: the history of earlier rounds on the
//!   directory, then this round's operations one at a time. The recovered
//!   dump must equal the reference dump after k operations for some k with
//!   `acked + 1 <= k <= acked + 1 + IN_FLIGHT` (the child cannot have
//!   applied more). That k becomes part of the directory's history.
//!
//! Timing only affects coverage, never the verdict.

use sextant_engine::store::MemStore;
use sextant_engine::{
    Engine, EngineConfig, JournalConfig, LoglessConfig, Lsn, RenameFlags, SyncMode, XattrFlags,
};
use sextant_types::{Credentials, FileType, FsError, SetAttr, Soid};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Operations the child may apply beyond the last acknowledgement it wrote.
const IN_FLIGHT: usize = 64;
/// The child stops (cleanly) after this many operations.
const MAX_OPS: usize = 200_000;
const DEFAULT_KILLS: usize = 30;

const ENV_DIR: &str = "SEXTANT_CRASH_CHILD_DIR";
const ENV_SEED: &str = "SEXTANT_CRASH_CHILD_SEED";
/// Set (to anything) for a child with log-less durability.
const ENV_LOGLESS: &str = "SEXTANT_CRASH_CHILD_LOGLESS";
/// Test-the-test knob: `early-ack` makes the child acknowledge before the
/// journal says the operation is durable; the test must then fail.
const ENV_SABOTAGE: &str = "SEXTANT_CRASH_SABOTAGE";

// ---- deterministic randomness -------------------------------------------

/// SplitMix64: small, fast, and good enough for test inputs.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eb1_a5e5_c4a5_4001)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

// ---- operation intents ----------------------------------------------------

const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
const XATTRS: [&str; 3] = ["user.k0", "user.k1", "trusted.k2"];

#[derive(Clone, Debug)]
enum Op {
    Mkdir {
        dir: String,
        name: &'static str,
        perm: u32,
    },
    Create {
        dir: String,
        name: &'static str,
        perm: u32,
        exclusive: bool,
    },
    Symlink {
        dir: String,
        name: &'static str,
        target: String,
    },
    Link {
        src: String,
        dir: String,
        name: &'static str,
    },
    Unlink {
        dir: String,
        name: &'static str,
    },
    Rmdir {
        dir: String,
        name: &'static str,
    },
    Rename {
        from_dir: String,
        from: &'static str,
        to_dir: String,
        to: &'static str,
        flags: RenameFlags,
    },
    Chmod {
        path: String,
        perm: u32,
    },
    Truncate {
        path: String,
        size: u64,
    },
    Chown {
        path: String,
        uid: u32,
        gid: u32,
    },
    SetXattr {
        path: String,
        name: &'static str,
        value: Vec<u8>,
        flags: XattrFlags,
    },
    RemoveXattr {
        path: String,
        name: &'static str,
    },
}

/// A directory path of depth 0–2 over the name pool ("/", "/a", "/a/b").
fn gen_dir(rng: &mut Rng) -> String {
    let depth = match rng.below(10) {
        0..=2 => 0,
        3..=6 => 1,
        _ => 2,
    };
    let mut p = String::new();
    for _ in 0..depth {
        p.push('/');
        p.push_str(rng.pick(&NAMES));
    }
    if p.is_empty() {
        p.push('/');
    }
    p
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn gen_path(rng: &mut Rng) -> String {
    let dir = gen_dir(rng);
    join(&dir, rng.pick(&NAMES))
}

fn gen_op(rng: &mut Rng) -> Op {
    let perm = |rng: &mut Rng| rng.pick(&[0o755, 0o700, 0o644, 0o600, 0o1777, 0o2750]);
    match rng.below(100) {
        0..=13 => Op::Mkdir {
            dir: gen_dir(rng),
            name: rng.pick(&NAMES),
            perm: perm(rng),
        },
        14..=29 => Op::Create {
            dir: gen_dir(rng),
            name: rng.pick(&NAMES),
            perm: perm(rng),
            exclusive: !rng.chance(20),
        },
        30..=34 => {
            let target = if rng.chance(50) {
                gen_path(rng)
            } else {
                rng.pick(&NAMES).to_string()
            };
            Op::Symlink {
                dir: gen_dir(rng),
                name: rng.pick(&NAMES),
                target,
            }
        }
        35..=41 => Op::Link {
            src: gen_path(rng),
            dir: gen_dir(rng),
            name: rng.pick(&NAMES),
        },
        42..=51 => Op::Unlink {
            dir: gen_dir(rng),
            name: rng.pick(&NAMES),
        },
        52..=57 => Op::Rmdir {
            dir: gen_dir(rng),
            name: rng.pick(&NAMES),
        },
        58..=72 => {
            let from_dir = gen_dir(rng);
            let from = rng.pick(&NAMES);
            // Mostly cross-directory; sometimes within one directory.
            let to_dir = if rng.chance(25) {
                from_dir.clone()
            } else {
                gen_dir(rng)
            };
            let flags = match rng.below(10) {
                0 => RenameFlags {
                    noreplace: true,
                    exchange: false,
                },
                1 => RenameFlags {
                    noreplace: false,
                    exchange: true,
                },
                _ => RenameFlags::default(),
            };
            Op::Rename {
                from_dir,
                from,
                to_dir,
                to: rng.pick(&NAMES),
                flags,
            }
        }
        73..=78 => Op::Chmod {
            path: gen_path(rng),
            perm: perm(rng),
        },
        79..=83 => Op::Truncate {
            path: gen_path(rng),
            size: rng.pick(&[0, 1, 4096, 1 << 40]),
        },
        84..=87 => Op::Chown {
            path: gen_path(rng),
            uid: rng.pick(&[0, 1000, 1001]),
            gid: rng.pick(&[0, 100, 1000]),
        },
        88..=95 => {
            let len = rng.below(40) as usize;
            let value = (0..len).map(|_| rng.next() as u8).collect();
            let flags = match rng.below(6) {
                0 => XattrFlags::Create,
                1 => XattrFlags::Replace,
                _ => XattrFlags::Any,
            };
            Op::SetXattr {
                path: gen_path(rng),
                name: rng.pick(&XATTRS),
                value,
                flags,
            }
        }
        _ => Op::RemoveXattr {
            path: gen_path(rng),
            name: rng.pick(&XATTRS),
        },
    }
}

/// Random operations per cycle; each cycle then sweeps the name pool
/// bottom-up with unlink and rmdir (see [`sweep_op`]), so that tables
/// shrink and merge as well as grow and split.
const RANDOM_OPS: usize = 600;
const SWEEP_OPS: usize = 2 * (216 + 36 + 6);

/// Operation `j` of a sweep: unlink, then rmdir, every pool path of depth
/// 3, then 2, then 1.
fn sweep_op(j: usize) -> Op {
    let (entry, rmdir) = (j / 2, j % 2 == 1);
    let (depth, mut at) = match entry {
        0..=215 => (3, entry),
        216..=251 => (2, entry - 216),
        _ => (1, entry - 252),
    };
    let mut comps = Vec::new();
    for _ in 0..depth {
        comps.push(NAMES[at % NAMES.len()]);
        at /= NAMES.len();
    }
    let name = comps.pop().unwrap();
    let dir = format!("/{}", comps.join("/"));
    if rmdir {
        Op::Rmdir { dir, name }
    } else {
        Op::Unlink { dir, name }
    }
}

/// The operation sequence of one round: a pure function of the seed.
struct OpStream {
    rng: Rng,
    index: usize,
}

impl OpStream {
    fn new(seed: u64) -> OpStream {
        OpStream {
            rng: Rng::new(seed),
            index: 0,
        }
    }
}

impl Iterator for OpStream {
    type Item = Op;
    fn next(&mut self) -> Option<Op> {
        let at = self.index % (RANDOM_OPS + SWEEP_OPS);
        self.index += 1;
        Some(if at < RANDOM_OPS {
            gen_op(&mut self.rng)
        } else {
            sweep_op(at - RANDOM_OPS)
        })
    }
}

/// Applies one operation; returns its journal LSN (0: nothing written).
fn apply(e: &Engine, op: &Op) -> Result<Lsn, FsError> {
    let cred = Credentials::root();
    let resolve = |p: &str, follow: bool| e.resolve(&cred, p.as_bytes(), follow).map(|a| a.soid);
    let dir = |p: &str| resolve(p, true);
    let set = |s: SetAttr, p: &str| -> Result<Lsn, FsError> {
        Ok(e.setattr(&cred, resolve(p, true)?, &s)?.lsn)
    };
    Ok(match op {
        Op::Mkdir { dir: d, name, perm } => e.mkdir(&cred, dir(d)?, name.as_bytes(), *perm)?.lsn,
        Op::Create {
            dir: d,
            name,
            perm,
            exclusive,
        } => {
            e.create(&cred, dir(d)?, name.as_bytes(), *perm, *exclusive)?
                .lsn
        }
        Op::Symlink {
            dir: d,
            name,
            target,
        } => {
            e.symlink(&cred, dir(d)?, name.as_bytes(), target.as_bytes())?
                .lsn
        }
        Op::Link { src, dir: d, name } => {
            let soid = resolve(src, false)?;
            e.link(&cred, soid, dir(d)?, name.as_bytes())?.lsn
        }
        Op::Unlink { dir: d, name } => e.unlink(&cred, dir(d)?, name.as_bytes())?.lsn,
        Op::Rmdir { dir: d, name } => e.rmdir(&cred, dir(d)?, name.as_bytes())?.lsn,
        Op::Rename {
            from_dir,
            from,
            to_dir,
            to,
            flags,
        } => {
            let (a, b) = (dir(from_dir)?, dir(to_dir)?);
            e.rename(&cred, a, from.as_bytes(), b, to.as_bytes(), *flags)?
                .lsn
        }
        Op::Chmod { path, perm } => set(
            SetAttr {
                perm: Some(*perm),
                ..Default::default()
            },
            path,
        )?,
        Op::Truncate { path, size } => set(
            SetAttr {
                size: Some(*size),
                ..Default::default()
            },
            path,
        )?,
        Op::Chown { path, uid, gid } => set(
            SetAttr {
                uid: Some(*uid),
                gid: Some(*gid),
                ..Default::default()
            },
            path,
        )?,
        Op::SetXattr {
            path,
            name,
            value,
            flags,
        } => {
            let soid = resolve(path, false)?;
            e.setxattr(&cred, soid, name.as_bytes(), value, *flags)?.lsn
        }
        Op::RemoveXattr { path, name } => {
            let soid = resolve(path, false)?;
            e.removexattr(&cred, soid, name.as_bytes())?.lsn
        }
    })
}

// ---- engine configurations ------------------------------------------------

/// The child's engine: real journal, small limits, busy flusher.
fn child_config(seed: u64) -> EngineConfig {
    EngineConfig {
        journal: JournalConfig {
            mode: SyncMode::Fsync,
            segment_bytes: 32 << 10,
            sync_floor: None,
        },
        // Two shapes: splits mostly for directory count (many small tables),
        // or mostly for inode count (tables that merge after a sweep).
        table_inode_limit: if seed & 2 == 0 { 32 } else { 24 },
        table_dir_limit: if seed & 2 == 0 { 8 } else { 48 },
        // Every other seed: a cache far below the working set, so clean
        // tables are evicted and reloaded (and checkpoints run every tick).
        cache_bytes: if seed & 1 == 0 { 16 << 10 } else { 64 << 20 },
        max_dirty_age: Duration::from_millis(40),
        max_journal_bytes: 96 << 10,
        flush_interval: Some(Duration::from_millis(20)),
        ..Default::default()
    }
}

/// The child's engine with log-less durability: the same, but no journal;
/// every redo entry goes to the parent (the "client") before the ack.
fn child_config_logless(seed: u64) -> EngineConfig {
    EngineConfig {
        logless: Some(LoglessConfig {
            arl_size: 4,
            max_backup_bytes: 96 << 10,
        }),
        ..child_config(seed)
    }
}

/// The parent's recovery check: same limits, no flusher.
fn verify_config(logless: bool) -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        ..if logless {
            child_config_logless(1)
        } else {
            child_config(1)
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The reference: semantics only, no durability.
fn reference_config() -> EngineConfig {
    EngineConfig {
        journal: JournalConfig {
            mode: SyncMode::Off,
            ..Default::default()
        },
        flush_interval: None,
        ..Default::default()
    }
}

// ---- the child ------------------------------------------------------------

/// One `write(2)` per line, so the parent sees whole lines only, and sees
/// every line written before the process died.
fn emit(line: &str) {
    let b = line.as_bytes();
    // SAFETY: writing an owned, initialized buffer to fd 1.
    let n = unsafe { libc::write(1, b.as_ptr().cast(), b.len()) };
    if n != b.len() as isize {
        std::process::abort();
    }
}

fn fatal(what: &str) -> ! {
    emit(&format!("\n@fatal {what}\n"));
    std::process::abort();
}

struct Progress {
    /// Newest applied operation and the highest LSN through it.
    latest: Option<(usize, Lsn)>,
    /// Last acknowledged operation (written to stdout), if any.
    acked: Option<usize>,
    stop: bool,
}

/// The child process. Ignored, and a no-op unless started by the parent.
#[test]
#[ignore = "the crash test's child process; started by crash_recovery"]
fn child_entry() {
    let (Ok(dir), Ok(seed)) = (std::env::var(ENV_DIR), std::env::var(ENV_SEED)) else {
        return;
    };
    let seed: u64 = seed.parse().expect("seed");
    let early_ack = std::env::var(ENV_SABOTAGE).is_ok_and(|s| s == "early-ack");
    let logless = std::env::var(ENV_LOGLESS).is_ok();
    let config = if logless {
        child_config_logless(seed)
    } else {
        child_config(seed)
    };
    let e = Engine::open_dir(&dir, config).unwrap_or_else(|err| fatal(&format!("open: {err}")));
    emit("\n@ready\n");

    let shared = Arc::new((
        Mutex::new(Progress {
            latest: None,
            acked: None,
            stop: false,
        }),
        Condvar::new(),
    ));
    let waiter = {
        let shared = Arc::clone(&shared);
        let e = e.clone();
        std::thread::spawn(move || {
            let (lock, cv) = &*shared;
            loop {
                let (i, lsn) = {
                    let mut g = lock.lock().unwrap();
                    loop {
                        if let Some(l) = g.latest.take() {
                            break l;
                        }
                        if g.stop {
                            return;
                        }
                        g = cv.wait(g).unwrap();
                    }
                };
                if !early_ack {
                    if let Err(err) = e.wait(lsn) {
                        fatal(&format!("wait({lsn}): {err}"));
                    }
                }
                emit(&format!("\n@ack {i}\n"));
                lock.lock().unwrap().acked = Some(i);
                cv.notify_all();
            }
        })
    };

    let (lock, cv) = &*shared;
    let mut lsn_through: Lsn = 0;
    let mut redo_through: Lsn = 0;
    for (i, op) in OpStream::new(seed).take(MAX_OPS).enumerate() {
        {
            let mut g = lock.lock().unwrap();
            while g.acked.map_or(0, |a| a + 1) + IN_FLIGHT <= i {
                g = cv.wait(g).unwrap();
            }
        }
        match apply(&e, &op) {
            Ok(lsn) => lsn_through = lsn_through.max(lsn),
            Err(FsError::Io) => fatal(&format!("op {i} {op:?}: EIO")),
            Err(_) => {}
        }
        // Log-less: hand the operation's redo entry (and any other new ARL
        // entry) to the parent before the acknowledgement. Operations run
        // one at a time, so the ARL holds this one's.
        for r in e.arl_since(redo_through) {
            emit(&format!("\n@redo {} {}\n", r.lsn, hex(&r.bytes)));
            redo_through = r.lsn;
        }
        if early_ack {
            // Sabotage: acknowledge before the journal is even written.
            emit(&format!("\n@ack {i}\n"));
            lock.lock().unwrap().acked = Some(i);
        } else {
            lock.lock().unwrap().latest = Some((i, lsn_through));
            cv.notify_all();
        }
        if i % 128 == 0 {
            let s = e.stats();
            emit(&format!(
                "\n@stats ops={} checkpoints={} splits={} merges={} evicted={} syncs={} tables={}\n",
                i + 1,
                s.checkpoints,
                s.splits,
                s.merges,
                s.tables_evicted_total,
                s.journal_syncs,
                s.tables
            ));
        }
    }
    {
        let mut g = lock.lock().unwrap();
        while g.acked != Some(MAX_OPS - 1) {
            g = cv.wait(g).unwrap();
        }
        g.stop = true;
        cv.notify_all();
    }
    waiter.join().unwrap();
    e.close()
        .unwrap_or_else(|err| fatal(&format!("close: {err}")));
    emit("\n@done\n");
}

// ---- state dumps ----------------------------------------------------------

/// The whole namespace as sorted text lines, without SOIDs or timestamps.
/// An inode is named by its smallest path.
fn dump(e: &Engine) -> Vec<String> {
    let cred = Credentials::root();
    // Walk the tree through the public API.
    let mut paths: BTreeMap<Soid, Vec<String>> = BTreeMap::new();
    let mut dentry_types: Vec<(String, Soid, FileType)> = Vec::new();
    let mut lines = Vec::new();
    let mut todo = vec![("/".to_string(), Soid::ROOT)];
    let mut seen_dirs = BTreeSet::new();
    paths.insert(Soid::ROOT, vec!["/".into()]);
    while let Some((dir_path, dir)) = todo.pop() {
        if !seen_dirs.insert(dir) {
            lines.push(format!("ERROR directory cycle at {dir_path}"));
            continue;
        }
        let mut after = 0;
        loop {
            let page = match e.readdir(&cred, dir, after, 64) {
                Ok(p) => p,
                Err(err) => {
                    lines.push(format!("ERROR readdir {dir_path}: {err}"));
                    break;
                }
            };
            let Some(last) = page.last() else { break };
            after = last.cookie;
            for d in page {
                let path = join(&dir_path, &String::from_utf8_lossy(&d.name));
                paths.entry(d.soid).or_default().push(path.clone());
                dentry_types.push((path.clone(), d.soid, d.ftype));
                if d.ftype == FileType::Directory {
                    todo.push((path, d.soid));
                }
            }
        }
    }
    for p in paths.values_mut() {
        p.sort();
    }
    let name_of = |s: Soid| {
        paths
            .get(&s)
            .map_or("<unreachable>".to_string(), |p| p[0].clone())
    };

    // Everything the tables hold, for link lists and orphans.
    let mut inodes = BTreeMap::new();
    let mut dentries = 0usize;
    e.for_each_table(|t| {
        for (soid, inode) in t.inodes() {
            if inodes.insert(soid, inode.clone()).is_some() {
                lines.push("ERROR an inode is in two tables".into());
            }
        }
        dentries += t.dentries().count();
    })
    .unwrap_or_else(|err| lines.push(format!("ERROR for_each_table: {err}")));

    for (path, soid, ftype) in &dentry_types {
        match inodes.get(soid) {
            None => lines.push(format!("ERROR dangling entry {path}")),
            Some(i) if i.ftype != *ftype => lines.push(format!(
                "ERROR entry {path} says {ftype:?}, inode is {:?}",
                i.ftype
            )),
            Some(_) => {}
        }
    }
    for (soid, p) in &paths {
        let Ok(a) = e.getattr(*soid) else {
            lines.push(format!("ERROR getattr {} fails", p[0]));
            continue;
        };
        let mut line = format!(
            "{} {:?} perm={:o} uid={} gid={} nlink={} size={} rdev={} parent={} paths={:?}",
            p[0],
            a.ftype,
            a.perm,
            a.uid,
            a.gid,
            a.nlink,
            a.size,
            a.rdev,
            name_of(a.parent),
            p
        );
        if let Some(inode) = inodes.get(soid) {
            let mut links: Vec<String> = inode
                .all_links()
                .map(|(dir, name)| join(&name_of(dir), &String::from_utf8_lossy(name)))
                .collect();
            links.sort();
            if *soid != Soid::ROOT {
                line.push_str(&format!(" links={links:?}"));
            }
            if let Some(t) = inode.symlink() {
                line.push_str(&format!(" target={:?}", String::from_utf8_lossy(t)));
            }
            if let Some(x) = inode.xattrs() {
                for (k, v) in x {
                    line.push_str(&format!(" xattr:{}={:02x?}", String::from_utf8_lossy(k), v));
                }
            }
        }
        lines.push(line);
    }
    for (soid, inode) in &inodes {
        if !paths.contains_key(soid) {
            lines.push(format!(
                "ORPHAN {:?} nlink={} name={:?} parent={}",
                inode.ftype,
                inode.nlink,
                String::from_utf8_lossy(&inode.name),
                name_of(inode.parent)
            ));
        }
    }
    lines.push(format!(
        "counts: tables hold {} inodes and {} entries; statfs says {} inodes",
        inodes.len(),
        dentries,
        e.statfs().inodes
    ));
    lines.sort();
    lines
}

/// Lines only in `got` (+) and only in `want` (-).
fn diff(got: &[String], want: &[String]) -> Vec<String> {
    let g: BTreeSet<&String> = got.iter().collect();
    let w: BTreeSet<&String> = want.iter().collect();
    let mut out: Vec<String> = g.difference(&w).map(|l| format!("+ {l}")).collect();
    out.extend(w.difference(&g).map(|l| format!("- {l}")));
    out
}

// ---- the parent -----------------------------------------------------------

#[derive(Default)]
struct ChildReport {
    ready: bool,
    /// Last acknowledged operation.
    acked: Option<usize>,
    fatal: Vec<String>,
    done: bool,
    last_stats: Option<String>,
    /// Log-less: the redo entries the child handed over.
    redo: Vec<Vec<u8>>,
}

enum Event {
    Ready,
    Ack(usize),
    Stats(String),
    Fatal(String),
    Redo(Vec<u8>),
    Done,
}

fn spawn_child(
    dir: &Path,
    seed: u64,
    logless: bool,
    stderr: &Path,
) -> (Child, mpsc::Receiver<Event>) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([
        "child_entry",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ENV_DIR, dir)
    .env(ENV_SEED, seed.to_string())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(std::fs::File::create(stderr).expect("stderr file"));
    if logless {
        cmd.env(ENV_LOGLESS, "1");
    }
    let mut child = cmd.spawn().expect("spawn child");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end();
            let ev = if line == "@ready" {
                Event::Ready
            } else if let Some(n) = line.strip_prefix("@ack ") {
                Event::Ack(n.parse().expect("ack number"))
            } else if let Some(s) = line.strip_prefix("@stats ") {
                Event::Stats(s.to_string())
            } else if let Some(s) = line.strip_prefix("@fatal ") {
                Event::Fatal(s.to_string())
            } else if let Some(r) = line.strip_prefix("@redo ") {
                let bytes = r.split_once(' ').and_then(|(_, h)| unhex(h));
                Event::Redo(bytes.expect("a @redo line"))
            } else if line == "@done" {
                Event::Done
            } else {
                continue;
            };
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

fn note(report: &mut ChildReport, ev: Event) {
    match ev {
        Event::Ready => report.ready = true,
        Event::Ack(i) => report.acked = report.acked.max(Some(i)),
        Event::Stats(s) => report.last_stats = Some(s),
        Event::Fatal(s) => report.fatal.push(s),
        Event::Redo(b) => report.redo.push(b),
        Event::Done => report.done = true,
    }
}

/// A reference engine holding the history of a data directory.
fn reference(history: &[(u64, usize)]) -> Engine {
    let e = Engine::open(Arc::new(MemStore::new()), reference_config()).unwrap();
    for &(seed, n) in history {
        for op in OpStream::new(seed).take(n) {
            let r = apply(&e, &op);
            assert_ne!(r, Err(FsError::Io), "reference engine failed on {op:?}");
        }
    }
    e
}

/// Every file under `dir` with its size, for failure messages.
fn list_files(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let len = entry.metadata().map_or(0, |m| m.len());
                let name = path.strip_prefix(dir).unwrap_or(&path);
                out.push((name.display().to_string(), len));
            }
        }
    }
    out.sort();
    out
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v:?}")))
}

#[test]
fn crash_recovery() {
    run_crash_test(false);
}

/// The same with log-less durability: no journal; the parent plays the
/// client that keeps the redo entries and hands them back to recovery.
#[test]
fn crash_recovery_logless() {
    run_crash_test(true);
}

/// The two crash tests run one at a time: a child spawned by one test
/// inherits (until its exec) the other's store LOCK descriptor, and that
/// test's immediate re-open would find the lock held.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run_crash_test(logless: bool) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let kills = env_u64("SEXTANT_CRASH_KILLS").map_or(DEFAULT_KILLS, |k| k as usize);
    let master = env_u64("SEXTANT_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    eprintln!("crash test (log-less: {logless}): {kills} kills, SEXTANT_CRASH_SEED={master}");
    let started = Instant::now();
    let mut rng = Rng::new(master);

    let mut data: Option<tempfile::TempDir> = None;
    let mut history: Vec<(u64, usize)> = Vec::new();
    let mut rounds_left = 0u64;
    let (mut total_acked, mut max_tables, mut early_kills) = (0usize, 0usize, 0usize);
    for round in 0..kills {
        if rounds_left == 0 || data.is_none() {
            data = Some(
                tempfile::Builder::new()
                    .prefix("sextant-crash-")
                    .tempdir()
                    .unwrap(),
            );
            history.clear();
            rounds_left = rng.range(1, 3);
        }
        rounds_left -= 1;
        let dir = data.as_ref().unwrap().path().join("store");
        let seed = rng.next();
        let stderr_path = data
            .as_ref()
            .unwrap()
            .path()
            .join(format!("child-{round}.stderr"));

        // Kill: sometimes right after the spawn (maybe during recovery),
        // usually some milliseconds after the engine is open.
        let early = rng.chance(15);
        let delay = Duration::from_millis(if early {
            rng.below(20)
        } else {
            rng.range(5, 300)
        });
        let (mut child, rx) = spawn_child(&dir, seed, logless, &stderr_path);
        let mut report = ChildReport::default();
        if early {
            early_kills += 1;
        } else {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !report.ready && Instant::now() < deadline {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(ev) => note(&mut report, ev),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        if child.try_wait().unwrap().is_some() {
                            break;
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        std::thread::sleep(delay);
        child.kill().expect("SIGKILL"); // std sends SIGKILL on Unix
        let status = child.wait().unwrap();
        for ev in rx {
            note(&mut report, ev);
        }
        let child_stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        assert!(
            report.fatal.is_empty(),
            "round {round}: child (seed {seed}) failed: {:?}\nstderr:\n{child_stderr}",
            report.fatal
        );
        assert!(
            report.ready || early,
            "round {round}: child (seed {seed}) never opened the engine ({status})\nstderr:\n{child_stderr}"
        );

        // Recover in-process, twice (the second recovers a recovered store).
        let recovered = {
            let e = Engine::open_dir(&dir, verify_config(logless)).unwrap_or_else(|err| {
                panic!(
                    "round {round}: recovery failed (seed {seed}, kill delay {delay:?}, early: \
                     {early}, last ack {:?}, earlier rounds on this directory: {history:?}): \
                     {err}\nstore files: {:?}\nchild stderr:\n{child_stderr}",
                    report.acked,
                    list_files(&dir)
                )
            });
            if e.crashed_incarnation().is_some() {
                let rep = e
                    .recover_logless(std::mem::take(&mut report.redo))
                    .unwrap_or_else(|err| panic!("round {round}: log-less recovery: {err}"));
                assert!(
                    !rep.maybe_lost() && rep.forged == 0 && rep.malformed == 0,
                    "round {round}: log-less recovery lost something with every backup \
                     present (seed {seed}): {rep:?}"
                );
            }
            max_tables = max_tables.max(e.statfs().tables);
            dump(&e)
        };
        let again = {
            let e = Engine::open_dir(&dir, verify_config(logless)).unwrap();
            if e.crashed_incarnation().is_some() {
                // The first check's engine was dropped, not closed: a crash
                // with nothing handed out since its recovery.
                let rep = e.recover_logless(Vec::new()).unwrap();
                assert!(!rep.maybe_lost(), "round {round}: {rep:?}");
            }
            let d = dump(&e);
            if rng.chance(20) {
                e.close().unwrap(); // sometimes the next child starts from a checkpoint
            }
            d
        };
        assert!(
            recovered == again,
            "round {round}: a second recovery changed the state (seed {seed}):\n{}",
            diff(&again, &recovered).join("\n")
        );

        // Find the prefix: acked + 1 <= k <= acked + 1 + IN_FLIGHT.
        let min_k = report.acked.map_or(0, |a| a + 1);
        let max_k = if report.done {
            MAX_OPS
        } else {
            (min_k + IN_FLIGHT).min(MAX_OPS)
        };
        let r = reference(&history);
        let mut ops = OpStream::new(seed);
        let mut matched = None;
        let mut nearest: Option<(usize, Vec<String>)> = None;
        for k in 0..=max_k {
            if k >= min_k {
                let want = dump(&r);
                if want == recovered {
                    matched = Some(k);
                    break;
                }
                let d = diff(&recovered, &want);
                if nearest.as_ref().is_none_or(|(_, n)| d.len() < n.len()) {
                    nearest = Some((k, d));
                }
            }
            if k < max_k {
                let op = ops.next().unwrap();
                let res = apply(&r, &op);
                assert_ne!(res, Err(FsError::Io), "reference engine failed on {op:?}");
            }
        }
        let Some(k) = matched else {
            let (nk, d) = nearest.unwrap();
            panic!(
                "round {round}: recovered state is not the state after any k in {min_k}..={max_k} \
                 operations (every acknowledged operation present, then a prefix).\n\
                 round seed {seed}, kill delay {delay:?} (early: {early}), last ack {:?}, \
                 earlier rounds on this directory (seed, ops): {history:?}\n\
                 nearest: k = {nk}; + recovered only, - expected only:\n{}\n\
                 recovered state:\n{}\nchild stderr:\n{child_stderr}",
                report.acked,
                d.iter().take(40).cloned().collect::<Vec<_>>().join("\n"),
                recovered.join("\n")
            );
        };
        eprintln!(
            "round {round}: seed {seed} delay {delay:?}{}{} acked {} recovered k={k} ({} lines) [{}]",
            if early { " (early)" } else { "" },
            if history.is_empty() { " new store" } else { "" },
            min_k,
            recovered.len(),
            report.last_stats.as_deref().unwrap_or("-")
        );
        total_acked += min_k;
        history.push((seed, k));
    }
    eprintln!(
        "crash test: {kills} kills ({early_kills} early) in {:?}, {total_acked} acknowledged \
         operations checked, up to {max_tables} tables",
        started.elapsed()
    );
}
