//! Runs one operation against the engine and the reference model and
//! compares results, errnos and (on demand) the whole tree.

use super::reference::{Id, Kind, Make, Model, SetOp, Time, XFlags, ROOT};
use sextant_engine::store::MemStore;
use sextant_engine::{Engine, EngineConfig, RenameFlags, XattrFlags};
use sextant_types::{Attr, Credentials, FileType, FsError, Nanos, SetAttr, Soid, TimeSet};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Root, two users sharing group 100, a user whose primary group is 300
/// with supplementary groups 100 and 200, and a stranger.
pub fn creds() -> [Credentials; 5] {
    [
        Credentials::root(),
        Credentials::user(1000, 100),
        Credentials::user(1001, 100),
        Credentials {
            uid: 1002,
            gid: 300,
            groups: vec![100, 200],
        },
        Credentials::user(2000, 2000),
    ]
}

pub const UIDS: [u32; 5] = [0, 1000, 1001, 1002, 2000];
pub const GIDS: [u32; 5] = [0, 100, 200, 300, 2000];

/// A byte string that prints readably.
#[derive(Clone, PartialEq, Eq)]
pub struct B(pub Vec<u8>);

impl fmt::Debug for B {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() > 40 {
            write!(
                f,
                "{:?}..<{} bytes>",
                String::from_utf8_lossy(&self.0[..8]),
                self.0.len()
            )
        } else {
            write!(f, "{:?}", String::from_utf8_lossy(&self.0))
        }
    }
}

/// Picks a live node at run time: `Dir(i)` among directories, `Any(i)`
/// among all nodes.
#[derive(Clone, Copy, Debug)]
pub enum Sel {
    Dir(u8),
    Any(u8),
}

#[derive(Clone, Debug)]
pub enum Op {
    Lookup(u8, Sel, B),
    Getattr(Sel),
    Create(u8, Sel, B, u32, bool),
    Mknod(u8, Sel, B, FileType, u32, u32),
    Mkdir(u8, Sel, B, u32),
    Symlink(u8, Sel, B, B),
    Unlink(u8, Sel, B),
    Rmdir(u8, Sel, B),
    /// cred, old dir, old name, new dir, new name, noreplace, exchange
    Rename(u8, Sel, B, Sel, B, bool, bool),
    Link(u8, Sel, Sel, B),
    Readlink(Sel),
    /// Full listing with pages of the given size.
    Readdir(u8, Sel, usize),
    /// Starts a readdir cursor (first page of the given size).
    CursorStart(u8, Sel, usize),
    /// Continues the cursor, if any.
    CursorNext(usize),
    Setattr(u8, Sel, SetOp),
    Getxattr(u8, Sel, B),
    Setxattr(u8, Sel, B, B, XFlags),
    Listxattr(u8, Sel),
    Removexattr(u8, Sel, B),
    Resolve(u8, B, bool),
    Sync,
    Reopen,
    Crash,
}

/// A readdir in progress across operations.
struct Cursor {
    cred: u8,
    dir: Id,
    last: u64,
    seen: BTreeSet<Vec<u8>>,
    /// (name, node) pairs present since the cursor started.
    stable: BTreeSet<(Vec<u8>, Id)>,
}

pub struct Harness {
    pub store: MemStore,
    pub config: EngineConfig,
    pub clock: Arc<AtomicI64>,
    pub engine: Option<Engine>,
    pub model: Model,
    pub to_soid: BTreeMap<Id, Soid>,
    pub to_id: BTreeMap<Soid, Id>,
    cursor: Option<Cursor>,
    /// Skip operations that would trigger an already reported engine bug.
    pub steps: usize,
    /// Outcomes seen: (operation, "ok" or errno name) → count.
    pub outcomes: BTreeMap<(&'static str, &'static str), usize>,
    last: Option<&'static str>,
}

trait ErrnoName {
    fn to_errno_name(&self) -> &'static str;
}

impl ErrnoName for FsError {
    fn to_errno_name(&self) -> &'static str {
        match self {
            FsError::NotFound => "ENOENT",
            FsError::Exists => "EEXIST",
            FsError::NotDir => "ENOTDIR",
            FsError::IsDir => "EISDIR",
            FsError::NotEmpty => "ENOTEMPTY",
            FsError::Invalid => "EINVAL",
            FsError::NameTooLong => "ENAMETOOLONG",
            FsError::Access => "EACCES",
            FsError::Perm => "EPERM",
            FsError::Loop => "ELOOP",
            FsError::NoData => "ENODATA",
            FsError::Range => "ERANGE",
            FsError::NotSupported => "EOPNOTSUPP",
            FsError::TooBig => "E2BIG",
            _ => "other",
        }
    }
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Lookup(..) => "lookup",
        Op::Getattr(..) => "getattr",
        Op::Create(.., true) => "create-excl",
        Op::Create(..) => "create",
        Op::Mknod(..) => "mknod",
        Op::Mkdir(..) => "mkdir",
        Op::Symlink(..) => "symlink",
        Op::Unlink(..) => "unlink",
        Op::Rmdir(..) => "rmdir",
        Op::Rename(.., true, true) => "rename-bothflags",
        Op::Rename(.., true, false) => "rename-noreplace",
        Op::Rename(.., false, true) => "rename-exchange",
        Op::Rename(..) => "rename",
        Op::Link(..) => "link",
        Op::Readlink(..) => "readlink",
        Op::Readdir(..) => "readdir",
        Op::CursorStart(..) => "readdir-cursor-start",
        Op::CursorNext(..) => "readdir-cursor-next",
        Op::Setattr(_, _, SetOp::Chmod(_)) => "chmod",
        Op::Setattr(_, _, SetOp::Chown(..)) => "chown",
        Op::Setattr(_, _, SetOp::Truncate(_)) => "truncate",
        Op::Setattr(_, _, SetOp::Times(..)) => "utimes",
        Op::Getxattr(..) => "getxattr",
        Op::Setxattr(..) => "setxattr",
        Op::Listxattr(..) => "listxattr",
        Op::Removexattr(..) => "removexattr",
        Op::Resolve(..) => "resolve",
        Op::Sync => "sync",
        Op::Reopen => "reopen",
        Op::Crash => "crash",
    }
}

pub type Check = Result<(), String>;

fn tsm(t: Time) -> TimeSet {
    match t {
        Time::Now => TimeSet::Now,
        Time::At(n) => TimeSet::At(Nanos(n)),
    }
}

fn to_setattr(op: &SetOp) -> SetAttr {
    let mut s = SetAttr::default();
    match op {
        SetOp::Chmod(m) => s.perm = Some(*m),
        SetOp::Chown(u, g) => {
            s.uid = *u;
            s.gid = *g;
        }
        SetOp::Truncate(n) => s.size = Some(*n),
        SetOp::Times(a, m) => {
            s.atime = a.map(tsm);
            s.mtime = m.map(tsm);
        }
    }
    s
}

fn xflags(f: XFlags) -> XattrFlags {
    match f {
        XFlags::Any => XattrFlags::Any,
        XFlags::Create => XattrFlags::Create,
        XFlags::Replace => XattrFlags::Replace,
    }
}

impl Harness {
    pub fn new(table_inode_limit: usize, table_dir_limit: usize, root_perm: u32) -> Harness {
        let clock = Arc::new(AtomicI64::new(1_000_000_000));
        let c = Arc::clone(&clock);
        let config = EngineConfig {
            flush_interval: None,
            clock: Some(Arc::new(move || Nanos(c.load(Ordering::SeqCst)))),
            table_inode_limit,
            table_dir_limit,
            root_perm,
            ..Default::default()
        };
        let store = MemStore::new();
        let engine = Engine::open(Arc::new(store.clone()), config.clone()).expect("open");
        let model = Model::new(clock.load(Ordering::SeqCst), root_perm, 0, 0);
        let mut to_soid = BTreeMap::new();
        let mut to_id = BTreeMap::new();
        to_soid.insert(ROOT, Soid::ROOT);
        to_id.insert(Soid::ROOT, ROOT);
        Harness {
            store,
            config,
            clock,
            engine: Some(engine),
            model,
            to_soid,
            to_id,
            cursor: None,
            steps: 0,
            outcomes: BTreeMap::new(),
            last: None,
        }
    }

    pub fn e(&self) -> &Engine {
        self.engine.as_ref().expect("engine open")
    }

    pub fn soid(&self, id: Id) -> Soid {
        self.to_soid[&id]
    }

    pub fn pick(&self, sel: Sel) -> Id {
        let list = match sel {
            Sel::Dir(_) => self.model.dirs(),
            Sel::Any(_) => self.model.ids(),
        };
        let i = match sel {
            Sel::Dir(i) | Sel::Any(i) => i as usize,
        };
        list[i % list.len()]
    }

    /// The attributes the model expects for `id`. A non-directory's
    /// `parent` is "the directory it was last linked into", which the
    /// model does not track, so the engine's value is taken.
    fn expect_attr(&self, id: Id, got_parent: Soid) -> Attr {
        let n = self.model.node(id);
        let parent = match &n.kind {
            Kind::Dir { parent, .. } => self.soid(*parent),
            _ => got_parent,
        };
        Attr {
            soid: self.soid(id),
            ftype: n.ftype,
            perm: n.perm,
            uid: n.uid,
            gid: n.gid,
            nlink: self.model.nlink(id),
            size: n.size,
            rdev: n.rdev,
            atime: Nanos(n.atime),
            mtime: Nanos(n.mtime),
            ctime: Nanos(n.ctime),
            parent,
            no_xattrs: n.xattrs.is_empty(),
        }
    }

    fn cmp_attr(&self, what: &str, got: &Attr, id: Id) -> Check {
        let exp = self.expect_attr(id, got.parent);
        if *got != exp {
            return Err(format!(
                "{what}: attributes of model node {id} differ\n  engine: {got:?}\n  model:  {exp:?}"
            ));
        }
        Ok(())
    }

    /// Records `soid` ↔ `id` (a node new to the mapping), or checks it.
    fn bind(&mut self, id: Id, soid: Soid) -> Check {
        match (self.to_soid.get(&id), self.to_id.get(&soid)) {
            (Some(s), _) if *s != soid => Err(format!(
                "model node {id} is {s:?} but the engine returned {soid:?}"
            )),
            (_, Some(i)) if *i != id => Err(format!(
                "engine {soid:?} is model node {i} but the model says {id}"
            )),
            _ => {
                self.to_soid.insert(id, soid);
                self.to_id.insert(soid, id);
                Ok(())
            }
        }
    }

    /// Forgets mappings of nodes the model deleted.
    fn prune(&mut self) {
        let dead: Vec<Id> = self
            .to_soid
            .keys()
            .filter(|id| !self.model.nodes.contains_key(id))
            .copied()
            .collect();
        for id in dead {
            let s = self.to_soid.remove(&id).expect("mapped");
            self.to_id.remove(&s);
        }
    }

    fn note<T>(&mut self, exp: &Result<T, FsError>) {
        self.last = Some(match exp {
            Ok(_) => "ok",
            Err(e) => e.to_errno_name(),
        });
    }

    fn same_err<A: fmt::Debug, B: fmt::Debug>(
        &mut self,
        what: &str,
        got: &Result<A, FsError>,
        exp: &Result<B, FsError>,
    ) -> Check {
        self.note(exp);
        match (got, exp) {
            (Err(a), Err(b)) if a == b => Ok(()),
            (Ok(_), Ok(_)) => Ok(()),
            _ => Err(format!("{what}: engine {got:?}, model {exp:?}")),
        }
    }

    /// Compares a result that carries a node.
    fn cmp_node_result(
        &mut self,
        what: &str,
        got: Result<Attr, FsError>,
        exp: Result<Id, FsError>,
    ) -> Check {
        self.same_err(what, &got, &exp)?;
        if let (Ok(a), Ok(id)) = (got, exp) {
            self.bind(id, a.soid)?;
            self.cmp_attr(what, &a, id)?;
        }
        Ok(())
    }

    /// Runs one step: the engine, then the model, then compares.
    pub fn step(&mut self, op: &Op) -> Check {
        self.steps += 1;
        let now = self.clock.fetch_add(1_000, Ordering::SeqCst) + 1_000;
        self.model.now = now;
        let cs = creds();
        let what = format!("{op:?}");
        self.last = None;
        let r = self.run(op, &cs, &what);
        let outcome = self.last.take().unwrap_or("ok");
        *self.outcomes.entry((op_name(op), outcome)).or_default() += 1;
        self.prune();
        if let Some(c) = &self.cursor {
            if !self.model.nodes.contains_key(&c.dir) || !self.model.is_dir(c.dir) {
                self.cursor = None;
            }
        }
        if let Some(c) = &mut self.cursor {
            let now: BTreeSet<(Vec<u8>, Id)> = self
                .model
                .entries(c.dir)
                .iter()
                .map(|(n, i)| (n.clone(), *i))
                .collect();
            c.stable = c.stable.intersection(&now).cloned().collect();
        }
        r
    }

    fn run(&mut self, op: &Op, cs: &[Credentials; 5], what: &str) -> Check {
        match op {
            Op::Lookup(c, d, name) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let got = self.e().lookup(cred, self.soid(dir), &name.0);
                let exp = self.model.lookup(cred, dir, &name.0);
                self.cmp_node_result(what, got, exp)
            }
            Op::Getattr(t) => {
                let id = self.pick(*t);
                let got = self.e().getattr(self.soid(id));
                self.cmp_node_result(what, got, Ok(id))
            }
            Op::Create(c, d, name, perm, excl) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let e = self.e().clone();
                let got = e
                    .create(cred, self.soid(dir), &name.0, *perm, *excl)
                    .and_then(|x| x.wait(&e));
                let exp =
                    self.model
                        .make(cred, dir, &name.0, *perm, Make::File { exclusive: *excl });
                self.cmp_node_result(what, got, exp)?;
                self.cmp_dir(what, dir)
            }
            Op::Mknod(c, d, name, ft, perm, rdev) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let e = self.e().clone();
                let got = e
                    .mknod(cred, self.soid(dir), &name.0, *ft, *perm, *rdev)
                    .and_then(|x| x.wait(&e));
                let exp = self
                    .model
                    .make(cred, dir, &name.0, *perm, Make::Special(*ft, *rdev));
                self.cmp_node_result(what, got, exp)?;
                self.cmp_dir(what, dir)
            }
            Op::Mkdir(c, d, name, perm) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let e = self.e().clone();
                let got = e
                    .mkdir(cred, self.soid(dir), &name.0, *perm)
                    .and_then(|x| x.wait(&e));
                let exp = self.model.make(cred, dir, &name.0, *perm, Make::Dir);
                self.cmp_node_result(what, got, exp)?;
                self.cmp_dir(what, dir)
            }
            Op::Symlink(c, d, name, target) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let e = self.e().clone();
                let got = e
                    .symlink(cred, self.soid(dir), &name.0, &target.0)
                    .and_then(|x| x.wait(&e));
                let exp =
                    self.model
                        .make(cred, dir, &name.0, 0o777, Make::Symlink(target.0.clone()));
                self.cmp_node_result(what, got, exp)?;
                self.cmp_dir(what, dir)
            }
            Op::Unlink(c, d, name) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let victim = self.model.entries_opt(dir, &name.0);
                let e = self.e().clone();
                let got = e
                    .unlink(cred, self.soid(dir), &name.0)
                    .and_then(|x| x.wait(&e));
                let exp = self.model.unlink(cred, dir, &name.0);
                self.same_err(what, &got, &exp)?;
                self.cmp_dir(what, dir)?;
                self.cmp_alive(what, victim)
            }
            Op::Rmdir(c, d, name) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let victim = self.model.entries_opt(dir, &name.0);
                let e = self.e().clone();
                let got = e
                    .rmdir(cred, self.soid(dir), &name.0)
                    .and_then(|x| x.wait(&e));
                let exp = self.model.rmdir(cred, dir, &name.0);
                self.same_err(what, &got, &exp)?;
                self.cmp_dir(what, dir)?;
                self.cmp_alive(what, victim)
            }
            Op::Rename(c, od, on, nd, nn, noreplace, exchange) => {
                let cred = &cs[*c as usize];
                let (od, nd) = (self.pick(*od), self.pick(*nd));
                let src = self.model.entries_opt(od, &on.0);
                let tgt = self.model.entries_opt(nd, &nn.0);
                let e = self.e().clone();
                let got = e
                    .rename(
                        cred,
                        self.soid(od),
                        &on.0,
                        self.soid(nd),
                        &nn.0,
                        RenameFlags {
                            noreplace: *noreplace,
                            exchange: *exchange,
                        },
                    )
                    .and_then(|x| x.wait(&e));
                let exp = self
                    .model
                    .rename(cred, od, &on.0, nd, &nn.0, *noreplace, *exchange);
                self.same_err(what, &got, &exp)?;
                self.cmp_dir(what, od)?;
                self.cmp_dir(what, nd)?;
                self.cmp_alive(what, src)?;
                self.cmp_alive(what, tgt)
            }
            Op::Link(c, t, d, name) => {
                let cred = &cs[*c as usize];
                let (id, dir) = (self.pick(*t), self.pick(*d));
                let e = self.e().clone();
                let got = e
                    .link(cred, self.soid(id), self.soid(dir), &name.0)
                    .and_then(|x| x.wait(&e));
                let exp = self.model.link(cred, id, dir, &name.0);
                self.cmp_node_result(what, got, exp)?;
                self.cmp_dir(what, dir)
            }
            Op::Readlink(t) => {
                let id = self.pick(*t);
                let got = self.e().readlink(self.soid(id)).map(|b| b.to_vec());
                let exp = self.model.readlink(id);
                self.note(&exp);
                if got != exp {
                    return Err(format!("{what}: engine {got:?}, model {exp:?}"));
                }
                Ok(())
            }
            Op::Readdir(c, d, limit) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let got = self.list_dir(cred, dir, *limit);
                let exp = self.model.opendir(cred, dir);
                self.same_err(what, &got, &exp)?;
                if let Ok(list) = got {
                    self.cmp_listing(what, dir, &list)?;
                }
                Ok(())
            }
            Op::CursorStart(c, d, limit) => {
                let cred = &cs[*c as usize];
                let dir = self.pick(*d);
                let got = self.e().readdir(cred, self.soid(dir), 0, *limit);
                let exp = self.model.opendir(cred, dir);
                self.same_err(what, &got, &exp)?;
                if let Ok(page) = got {
                    let stable = self
                        .model
                        .entries(dir)
                        .iter()
                        .map(|(n, i)| (n.clone(), *i))
                        .collect();
                    self.cursor = Some(Cursor {
                        cred: *c,
                        dir,
                        last: 0,
                        seen: BTreeSet::new(),
                        stable,
                    });
                    self.cursor_page(what, page)?;
                }
                Ok(())
            }
            Op::CursorNext(limit) => {
                let Some(cur) = &self.cursor else {
                    return Ok(());
                };
                let cred = &cs[cur.cred as usize];
                let (dir, last) = (cur.dir, cur.last);
                let got = self.e().readdir(cred, self.soid(dir), last, *limit);
                let exp = self.model.opendir(cred, dir);
                self.same_err(what, &got, &exp)?;
                match got {
                    Ok(page) => self.cursor_page(what, page),
                    Err(_) => {
                        self.cursor = None;
                        Ok(())
                    }
                }
            }
            Op::Setattr(c, t, set) => {
                let cred = &cs[*c as usize];
                let id = self.pick(*t);
                let e = self.e().clone();
                let got = e
                    .setattr(cred, self.soid(id), &to_setattr(set))
                    .and_then(|x| x.wait(&e));
                let exp = self.model.setattr(cred, id, set).map(|()| id);
                self.cmp_node_result(what, got, exp)?;
                self.cmp_alive(what, Some(id))
            }
            Op::Getxattr(c, t, name) => {
                let cred = &cs[*c as usize];
                let id = self.pick(*t);
                let got = self
                    .e()
                    .getxattr(cred, self.soid(id), &name.0)
                    .map(|v| v.to_vec());
                let exp = self.model.getxattr(cred, id, &name.0);
                self.note(&exp);
                if got != exp {
                    return Err(format!("{what}: engine {got:?}, model {exp:?}"));
                }
                Ok(())
            }
            Op::Setxattr(c, t, name, value, flags) => {
                let cred = &cs[*c as usize];
                let id = self.pick(*t);
                let e = self.e().clone();
                let got = e
                    .setxattr(cred, self.soid(id), &name.0, &value.0, xflags(*flags))
                    .and_then(|x| x.wait(&e));
                let exp = self.model.setxattr(cred, id, &name.0, &value.0, *flags);
                self.same_err(what, &got, &exp)?;
                self.cmp_alive(what, Some(id))?;
                self.cmp_xattrs(what, id)
            }
            Op::Listxattr(c, t) => {
                let cred = &cs[*c as usize];
                let id = self.pick(*t);
                let got: Result<BTreeSet<Vec<u8>>, FsError> = self
                    .e()
                    .listxattr(cred, self.soid(id))
                    .map(|v| v.into_iter().map(|b| b.to_vec()).collect());
                let exp = Ok(self.model.listxattr(cred, id));
                if got != exp {
                    return Err(format!("{what}: engine {got:?}, model {exp:?}"));
                }
                Ok(())
            }
            Op::Removexattr(c, t, name) => {
                let cred = &cs[*c as usize];
                let id = self.pick(*t);
                let e = self.e().clone();
                let got = e
                    .removexattr(cred, self.soid(id), &name.0)
                    .and_then(|x| x.wait(&e));
                let exp = self.model.removexattr(cred, id, &name.0);
                self.same_err(what, &got, &exp)?;
                self.cmp_alive(what, Some(id))?;
                self.cmp_xattrs(what, id)
            }
            Op::Resolve(c, path, follow) => {
                let cred = &cs[*c as usize];
                let got = self.e().resolve(cred, &path.0, *follow);
                let exp = self.model.resolve(cred, &path.0, *follow);
                self.cmp_node_result(what, got, exp)
            }
            Op::Sync => {
                self.e().sync().map_err(|e| format!("sync: {e}"))?;
                self.check_tree()
            }
            Op::Reopen => {
                self.cursor = None;
                let e = self.engine.take().expect("engine");
                e.close().map_err(|e| format!("close: {e}"))?;
                self.engine = Some(
                    Engine::open(Arc::new(self.store.clone()), self.config.clone())
                        .map_err(|e| format!("reopen: {e}"))?,
                );
                self.check_tree()
            }
            Op::Crash => {
                // Every operation was waited for: nothing may be lost.
                self.cursor = None;
                drop(self.engine.take());
                self.store.crash(None);
                self.engine = Some(
                    Engine::open(Arc::new(self.store.clone()), self.config.clone())
                        .map_err(|e| format!("recover: {e}"))?,
                );
                self.check_tree()
            }
        }
    }

    /// A node touched by an operation: still there with the model's
    /// attributes, or gone in both.
    fn cmp_alive(&self, what: &str, id: Option<Id>) -> Check {
        let Some(id) = id else { return Ok(()) };
        if self.model.nodes.contains_key(&id) {
            let a = self
                .e()
                .getattr(self.soid(id))
                .map_err(|e| format!("{what}: getattr of model node {id}: {e:?}"))?;
            self.cmp_attr(what, &a, id)
        } else {
            Ok(())
        }
    }

    fn cmp_dir(&self, what: &str, dir: Id) -> Check {
        self.cmp_alive(what, Some(dir))
    }

    fn cmp_xattrs(&self, what: &str, id: Id) -> Check {
        let root = Credentials::root();
        let soid = self.soid(id);
        let names: BTreeSet<Vec<u8>> = self
            .e()
            .listxattr(&root, soid)
            .map_err(|e| format!("{what}: listxattr: {e:?}"))?
            .into_iter()
            .map(|b| b.to_vec())
            .collect();
        let want: BTreeSet<Vec<u8>> = self.model.node(id).xattrs.keys().cloned().collect();
        if names != want {
            return Err(format!(
                "{what}: xattr names of node {id}: engine {:?}, model {:?}",
                names.iter().map(|n| B(n.clone())).collect::<Vec<_>>(),
                want.iter().map(|n| B(n.clone())).collect::<Vec<_>>()
            ));
        }
        for (k, v) in &self.model.node(id).xattrs {
            let got = self.e().getxattr(&root, soid, k).map(|b| b.to_vec());
            if got.as_ref() != Ok(v) {
                return Err(format!(
                    "{what}: xattr {:?} of node {id}: engine {got:?}, model {v:?}",
                    B(k.clone())
                ));
            }
        }
        Ok(())
    }

    /// All entries of `dir` by cookie paging; checks cookie order.
    fn list_dir(
        &self,
        cred: &Credentials,
        dir: Id,
        limit: usize,
    ) -> Result<Vec<sextant_engine::DirEntry>, FsError> {
        let soid = self.soid(dir);
        let mut out: Vec<sextant_engine::DirEntry> = Vec::new();
        let mut after = 0;
        loop {
            let page = self.e().readdir(cred, soid, after, limit)?;
            let Some(last) = page.last() else { break };
            after = last.cookie;
            out.extend(page);
            if out.len() > 100_000 {
                break;
            }
        }
        Ok(out)
    }

    fn cmp_listing(&self, what: &str, dir: Id, list: &[sextant_engine::DirEntry]) -> Check {
        let mut prev = 0u64;
        let mut got = BTreeMap::new();
        for d in list {
            if d.cookie <= prev && !(d.cookie == prev && prev != 0) {
                return Err(format!("{what}: readdir cookies not increasing: {list:?}"));
            }
            prev = d.cookie;
            if got.insert(d.name.to_vec(), (d.soid, d.ftype)).is_some() {
                return Err(format!(
                    "{what}: readdir returned {:?} twice",
                    B(d.name.to_vec())
                ));
            }
        }
        let exp: BTreeMap<Vec<u8>, (Soid, FileType)> = self
            .model
            .entries(dir)
            .iter()
            .map(|(n, i)| {
                let s = self.to_soid.get(i).copied().unwrap_or(Soid::MAX);
                (n.clone(), (s, self.model.node(*i).ftype))
            })
            .collect();
        if got != exp {
            let show = |m: &BTreeMap<Vec<u8>, (Soid, FileType)>| {
                m.iter()
                    .map(|(n, (s, t))| format!("{:?}={s}:{t:?}", B(n.clone())))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(format!(
                "{what}: entries of model dir {dir} differ\n  engine: {}\n  model:  {}",
                show(&got),
                show(&exp)
            ));
        }
        Ok(())
    }

    fn cursor_page(&mut self, what: &str, page: Vec<sextant_engine::DirEntry>) -> Check {
        let cur = self.cursor.as_mut().expect("cursor");
        if page.is_empty() {
            let missing: Vec<_> = cur
                .stable
                .iter()
                .filter(|(n, _)| !cur.seen.contains(n))
                .map(|(n, _)| B(n.clone()))
                .collect();
            let dir = cur.dir;
            self.cursor = None;
            if !missing.is_empty() {
                return Err(format!(
                    "{what}: readdir cursor over model dir {dir} never returned {missing:?}, \
                     present throughout"
                ));
            }
            return Ok(());
        }
        let entries = self.model.entries(cur.dir);
        for d in &page {
            if d.cookie <= cur.last {
                return Err(format!(
                    "{what}: cookie {} not after {} in {page:?}",
                    d.cookie, cur.last
                ));
            }
            cur.last = d.cookie;
            if !cur.seen.insert(d.name.to_vec()) {
                return Err(format!(
                    "{what}: readdir cursor returned {:?} twice",
                    B(d.name.to_vec())
                ));
            }
            let Some(&id) = entries.get(&*d.name) else {
                return Err(format!(
                    "{what}: readdir returned {:?}, which does not exist",
                    B(d.name.to_vec())
                ));
            };
            if self.to_soid.get(&id) != Some(&d.soid) || self.model.node(id).ftype != d.ftype {
                return Err(format!("{what}: readdir entry {d:?} is model node {id}"));
            }
        }
        Ok(())
    }

    /// Walks the engine's tree from the root (readdir + getattr + readlink
    /// + xattrs, as root) and compares it with the model, node by node.
    pub fn check_tree(&mut self) -> Check {
        self.model.check_invariants()?;
        let root = Credentials::root();
        let mut visited = BTreeSet::new();
        let mut stack = vec![ROOT];
        visited.insert(ROOT);
        while let Some(dir) = stack.pop() {
            let what = format!("tree check (step {})", self.steps);
            let list = self
                .list_dir(&root, dir, 3)
                .map_err(|e| format!("{what}: readdir of model dir {dir}: {e:?}"))?;
            for d in &list {
                if let Some(&id) = self.model.entries(dir).get(&*d.name) {
                    self.bind(id, d.soid).map_err(|e| format!("{what}: {e}"))?;
                }
            }
            self.cmp_listing(&what, dir, &list)?;
            for &id in self.model.entries(dir).values() {
                if visited.insert(id) && self.model.is_dir(id) {
                    stack.push(id);
                }
            }
        }
        let what = format!("tree check (step {})", self.steps);
        for &id in &visited {
            let soid = self.soid(id);
            let a = self
                .e()
                .getattr(soid)
                .map_err(|e| format!("{what}: getattr of model node {id}: {e:?}"))?;
            self.cmp_attr(&what, &a, id)?;
            let got = self.e().readlink(soid).map(|b| b.to_vec());
            let exp = self.model.readlink(id);
            if got != exp {
                return Err(format!(
                    "{what}: readlink of node {id}: engine {got:?}, model {exp:?}"
                ));
            }
            self.cmp_xattrs(&what, id)?;
        }
        let inodes = self.e().statfs().inodes;
        if inodes != self.model.nodes.len() as u64 {
            return Err(format!(
                "{what}: engine counts {inodes} inodes, model has {}",
                self.model.nodes.len()
            ));
        }
        Ok(())
    }
}
