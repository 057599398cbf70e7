//! Model test of member mode (issue 20): random namespace operations, each
//! routed to the member that owns the table of the first SOID it names,
//! interleaved with random table moves (DROP on the owner, the
//! catalogue's reassignment, ADD on another member), member crashes with
//! restart, and member deaths whose tables fail over (ADD replaying the
//! dead member's journal) — compared with one ordinary single-server [`Engine`]
//! given the same operations. Same results (attributes, SOIDs and errnos)
//! after every step; same final tree (names, SOIDs, attributes, xattrs).
//!
//! Routing plays the client: `WrongServer { soid }` sends the operation to
//! the owner of `soid`; `NeedsTable` is answered the way BORROW will be,
//! by moving every table onto the member that was asked, then retrying.
//! After every step, what each member serves equals what the catalogue
//! says it owns, and every SOID is served by exactly one member.
//!
//! `SEXTANT_CLUSTER_CASES` sets the number of cases (default 64);
//! `SEXTANT_CLUSTER_STATS=1` prints the size of each case.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sextant_engine::store::{MemStore, Store};
use sextant_engine::{
    DirEntry, Engine, EngineConfig, MemCatalog, MemberConfig, TableCatalog, XattrFlags,
};
use sextant_types::{Attr, Credentials, FsError, Nanos, Soid};
use std::sync::Arc;

const MEMBERS: [&str; 3] = ["a", "b", "c"];
const NAMES: [&[u8]; 5] = [b"v", b"w", b"x", b"y", b"z"];

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        table_dir_limit: 3,
        table_inode_limit: 10,
        clock: Some(Arc::new(|| Nanos(1_700_000_000_000_000_000))),
        // Small segments: checkpoints trim the journal (and move clean
        // tables' replay positions) within a case.
        journal: sextant_engine::JournalConfig {
            segment_bytes: 1024,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Mkdir(usize, usize),
    Create(usize, usize),
    Unlink(usize, usize),
    Rmdir(usize, usize),
    Rename(usize, usize, usize, usize),
    SetXattr(usize, u8),
    Move(usize, usize),
    Restart(usize),
    /// The member dies; its tables fail over to the others (ADD replays
    /// its journal); it comes back owning nothing.
    Kill(usize, usize),
    Sync(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let i = || any::<usize>();
    let n = || 0..NAMES.len();
    prop_oneof![
        8 => (i(), n()).prop_map(|(p, k)| Op::Mkdir(p, k)),
        5 => (i(), n()).prop_map(|(p, k)| Op::Create(p, k)),
        2 => (i(), n()).prop_map(|(p, k)| Op::Unlink(p, k)),
        2 => (i(), n()).prop_map(|(p, k)| Op::Rmdir(p, k)),
        3 => (i(), n(), i(), n()).prop_map(|(a, k, b, l)| Op::Rename(a, k, b, l)),
        2 => (i(), any::<u8>()).prop_map(|(d, v)| Op::SetXattr(d, v)),
        4 => (i(), i()).prop_map(|(t, m)| Op::Move(t, m)),
        1 => i().prop_map(Op::Restart),
        1 => (i(), i()).prop_map(|(m, to)| Op::Kill(m, to)),
        2 => i().prop_map(Op::Sync),
    ]
}

struct Cluster {
    store: MemStore,
    catalog: Arc<MemCatalog>,
    members: Vec<Engine>,
}

fn open(store: &MemStore, catalog: &Arc<MemCatalog>, name: &str) -> Engine {
    Engine::open_member(
        Arc::new(store.clone()) as Arc<dyn Store>,
        config(),
        MemberConfig {
            name: name.into(),
            catalog: Arc::clone(catalog) as _,
        },
    )
    .expect("a member opens")
}

impl Cluster {
    fn new() -> Cluster {
        let store = MemStore::new();
        let catalog = Arc::new(MemCatalog::new());
        let members = MEMBERS.iter().map(|n| open(&store, &catalog, n)).collect();
        Cluster {
            store,
            catalog,
            members,
        }
    }

    /// The one member serving `soid`.
    fn owner_of(&self, soid: Soid) -> usize {
        let holders: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].table_holding(soid).is_some())
            .collect();
        assert_eq!(holders.len(), 1, "{soid} is served by {holders:?}");
        holders[0]
    }

    fn move_table(&mut self, id: u64, to: usize) {
        let from = (0..self.members.len())
            .find(|&i| self.members[i].owned_tables().contains(&id))
            .expect("every catalogued table is served");
        if from == to {
            return;
        }
        let m = self.members[from].drop_table(id).expect("drop");
        assert!(self.catalog.assign(id, MEMBERS[to]));
        self.members[to].add_table(&m).expect("add");
    }

    /// BORROW's stand-in: every table onto member `to`.
    fn gather(&mut self, to: usize) {
        for (id, _, _) in self.catalog.all() {
            self.move_table(id, to);
        }
    }

    fn run<T>(
        &mut self,
        first: Soid,
        op: impl Fn(&Engine) -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        let mut at = self.owner_of(first);
        for _ in 0..4 {
            match op(&self.members[at]) {
                Err(FsError::WrongServer { soid }) => at = self.owner_of(soid),
                Err(FsError::NeedsTable { .. }) => self.gather(at),
                r => return r,
            }
        }
        panic!("an operation kept being refused");
    }

    fn restart(&mut self, i: usize) {
        let name = MEMBERS[i];
        let dead = std::mem::replace(&mut self.members[i], open_placeholder());
        drop(dead);
        // Everything acknowledged was synced; the crash loses the rest.
        self.store.crash(None);
        self.members[i] = open(&self.store, &self.catalog, name);
    }

    /// Member `i` dies; each of its tables goes to another member, chosen
    /// from `pick`, which replays `i`'s journal for it.
    fn kill(&mut self, i: usize, mut pick: usize) {
        let dead = std::mem::replace(&mut self.members[i], open_placeholder());
        drop(dead);
        self.store.crash(None);
        // Each survivor ADDs its share in one batch (one pass over the
        // dead member's journal).
        let mut shares: Vec<Vec<sextant_engine::TableManifest>> = vec![Vec::new(); MEMBERS.len()];
        for m in self.catalog.tables(MEMBERS[i]).unwrap() {
            let to = (i + 1 + pick % (MEMBERS.len() - 1)) % MEMBERS.len();
            pick /= 2;
            assert!(self.catalog.assign(m.entry.id, MEMBERS[to]));
            shares[to].push(m);
        }
        for (to, share) in shares.iter().enumerate() {
            if !share.is_empty() {
                self.members[to].add_tables(share).expect("failover add");
            }
        }
        self.members[i] = open(&self.store, &self.catalog, MEMBERS[i]);
    }

    /// What each member serves is what the catalogue says it owns.
    fn check_ownership(&self) -> Result<(), TestCaseError> {
        for (i, e) in self.members.iter().enumerate() {
            let mut served = e.owned_tables();
            served.sort();
            let mut catalogued: Vec<u64> = self
                .catalog
                .tables(MEMBERS[i])
                .unwrap()
                .iter()
                .map(|m| m.entry.id)
                .collect();
            catalogued.sort();
            prop_assert_eq!(served, catalogued, "member {}", MEMBERS[i]);
        }
        Ok(())
    }
}

/// A throwaway engine to hold the place of a member being restarted.
fn open_placeholder() -> Engine {
    Engine::open(Arc::new(MemStore::new()), config()).unwrap()
}

fn wait<T>(e: &Engine, c: Result<sextant_engine::Committed<T>, FsError>) -> Result<T, FsError> {
    c.and_then(|c| c.wait(e))
}

struct Run {
    cluster: Cluster,
    reference: Engine,
    /// Directories known to exist (or to have existed), by creation order.
    dirs: Vec<Soid>,
}

impl Run {
    fn dir(&self, i: usize) -> Soid {
        self.dirs[i % self.dirs.len()]
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let cred = Credentials::root();
        match *op {
            Op::Mkdir(p, k) => {
                let p = self.dir(p);
                let want = wait(
                    &self.reference,
                    self.reference.mkdir(&cred, p, NAMES[k], 0o755),
                );
                let got = self
                    .cluster
                    .run(p, |e| wait(e, e.mkdir(&cred, p, NAMES[k], 0o755)));
                prop_assert_eq!(&got, &want, "{:?}", op);
                if let Ok(a) = want {
                    self.dirs.push(a.soid);
                }
            }
            Op::Create(p, k) => {
                let p = self.dir(p);
                let want = wait(
                    &self.reference,
                    self.reference.create(&cred, p, NAMES[k], 0o644, true),
                );
                let got = self
                    .cluster
                    .run(p, |e| wait(e, e.create(&cred, p, NAMES[k], 0o644, true)));
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Unlink(p, k) => {
                let p = self.dir(p);
                let want = wait(&self.reference, self.reference.unlink(&cred, p, NAMES[k]));
                let got = self
                    .cluster
                    .run(p, |e| wait(e, e.unlink(&cred, p, NAMES[k])));
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Rmdir(p, k) => {
                let p = self.dir(p);
                let want = wait(&self.reference, self.reference.rmdir(&cred, p, NAMES[k]));
                let got = self
                    .cluster
                    .run(p, |e| wait(e, e.rmdir(&cred, p, NAMES[k])));
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Rename(a, k, b, l) => {
                let (a, b) = (self.dir(a), self.dir(b));
                let f = Default::default();
                let want = wait(
                    &self.reference,
                    self.reference.rename(&cred, a, NAMES[k], b, NAMES[l], f),
                );
                let got = self
                    .cluster
                    .run(a, |e| wait(e, e.rename(&cred, a, NAMES[k], b, NAMES[l], f)));
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::SetXattr(d, v) => {
                let d = self.dir(d);
                let val = [v];
                let flags = XattrFlags::default();
                let want = wait(
                    &self.reference,
                    self.reference.setxattr(&cred, d, b"user.v", &val, flags),
                );
                let got = self
                    .cluster
                    .run(d, |e| wait(e, e.setxattr(&cred, d, b"user.v", &val, flags)));
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Move(t, m) => {
                let all = self.cluster.catalog.all();
                let id = all[t % all.len()].0;
                self.cluster.move_table(id, m % MEMBERS.len());
            }
            Op::Restart(m) => self.cluster.restart(m % MEMBERS.len()),
            Op::Kill(m, to) => self.cluster.kill(m % MEMBERS.len(), to),
            Op::Sync(m) => self.cluster.members[m % MEMBERS.len()]
                .sync()
                .map_err(|e| TestCaseError::fail(format!("sync: {e}")))?,
        }
        self.cluster.check_ownership()
    }

    /// The whole tree, walked on the reference and asked of the cluster.
    fn compare_trees(&mut self) -> Result<(), TestCaseError> {
        let cred = Credentials::root();
        let mut stack = vec![Soid::ROOT];
        let mut seen = 0;
        while let Some(d) = stack.pop() {
            let sorted = |mut v: Vec<DirEntry>| {
                v.sort_by(|x, y| x.name.cmp(&y.name));
                v.into_iter()
                    .map(|e| (e.name, e.soid, e.ftype))
                    .collect::<Vec<_>>()
            };
            let want = sorted(self.reference.readdir(&cred, d, 0, 10_000).unwrap());
            let got = self
                .cluster
                .run(d, |e| e.readdir(&cred, d, 0, 10_000))
                .map(sorted);
            prop_assert_eq!(got.as_ref(), Ok(&want), "readdir {}", d);
            let attr_want: Result<Attr, FsError> = self.reference.getattr(d);
            let attr_got = self.cluster.run(d, |e| e.getattr(d));
            prop_assert_eq!(attr_got, attr_want, "getattr {}", d);
            let x_want = self.reference.getxattr(&cred, d, b"user.v");
            let x_got = self.cluster.run(d, |e| e.getxattr(&cred, d, b"user.v"));
            prop_assert_eq!(x_got, x_want, "xattr {}", d);
            for (_, soid, ftype) in want {
                seen += 1;
                if ftype == sextant_types::FileType::Directory {
                    stack.push(soid);
                } else {
                    let want = self.reference.getattr(soid);
                    let got = self.cluster.run(soid, |e| e.getattr(soid));
                    prop_assert_eq!(got, want, "getattr {}", soid);
                }
            }
        }
        let _ = seen;
        Ok(())
    }
}

#[test]
fn cluster_matches_one_engine() {
    let cases = std::env::var("SEXTANT_CLUSTER_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 200,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(op(), 1..100), |ops| {
            let mut run = Run {
                cluster: Cluster::new(),
                reference: Engine::open(Arc::new(MemStore::new()), config()).unwrap(),
                dirs: vec![Soid::ROOT],
            };
            for op in &ops {
                run.step(op)?;
            }
            run.compare_trees()?;
            if std::env::var("SEXTANT_CLUSTER_STATS").is_ok() {
                let owned: Vec<usize> = run
                    .cluster
                    .members
                    .iter()
                    .map(|e| e.owned_tables().len())
                    .collect();
                eprintln!(
                    "{} ops, {} dirs, tables per member {owned:?}",
                    ops.len(),
                    run.dirs.len()
                );
            }
            // Every member restarts: the same tree again.
            for m in 0..MEMBERS.len() {
                run.cluster.restart(m);
            }
            run.cluster.check_ownership()?;
            run.compare_trees()
        })
        .unwrap();
}
