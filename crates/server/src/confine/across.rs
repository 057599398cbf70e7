//! The confinement walk across the servers of a cluster (see the parent
//! module): what a path-limited key's check needs from directories other
//! servers hold — the steps from `/` down to the subtree's root, a
//! directory's chain of parents, a confined path walk. And a caller's
//! path resolution across the servers ([`Across::resolve`]), which a
//! server answers whole (a `Resolve` whose path leaves its tables:
//! `service`) instead of the client walking it name by name.
//!
//! Parent chains are read with the search's reader ([`PeerDirs`], the
//! `DirChain` RPC), and so are the links of an inode another server holds
//! (`DirChain` with `links`: every link's directory, hard links included,
//! so a file is placed as on one server — by any of its links), lookups
//! and attributes with ordinary requests run on
//! the holder as root (the steps to the subtree, as on one server) or as
//! the caller (a path walk: its search permissions are checked there).
//!
//! Invariants:
//! - other servers' directory records are kept across requests only
//!   under their leases (`crate::dir_leases`: every other server's live,
//!   or its epoch asked at the check's start — `Peers::check_epochs`, the
//!   search's cache and generation): a server acknowledges a change of a
//!   directory (rename, removal, mode, owner) only once every lease on its
//!   records is revoked or run out, so an ancestor renamed on another
//!   server — acknowledged before the request — moves the subtree out at
//!   once. Read from them: parent chains, and the steps to the subtree's
//!   root (a directory kept at that name in that parent). Nothing else is
//!   kept (an inode's links, attributes, lookups of files); with leases
//!   off (`SEXTANT_DIR_LEASES=0`) nothing is, and every check reads what
//!   it needs again;
//! - the subtree a key's path names (a [`Confine`]: its root and the
//!   steps down to it) is kept too, per key path, in the generation of
//!   the kept records it was found in (`ForeignCache::keep_confine`): it
//!   is read from those records, this server's own directories (whose
//!   epoch is part of the generation's check) and lookups other servers
//!   answered during the generation — any of which changing drops the
//!   generation at the next check, so the path is not resolved again at
//!   every request, yet a rename acknowledged before a request is seen
//!   by its check;
//! - the directories a check proved inside a key's subtree (by the
//!   subtree's root) are kept the same way, per generation
//!   ([`Across::note_inside`], `ForeignCache::note_inside`): read from
//!   the same sources, and a directory's place changes only by a rename
//!   or removal (of it or an ancestor) — a directory change, which moves
//!   an epoch and so drops the generation. The next checks of the
//!   generation take an object whose directory (a file's: one of its
//!   links') is known inside as in, with one read of its links
//!   (`crate::confine`'s `Walk::within`);
//! - a path-limited key's check on a cluster gets here first inline, on
//!   the runtime's worker ([`Across::kept`]), where every other server's
//!   lease is live (else its walk of this server's tables alone comes
//!   first, and only one that met a directory another server holds gets
//!   here): the records kept under leases alone, no
//!   call — when every record the
//!   check reads is kept, that decides, without the hop to a blocking
//!   thread. A kept walk that would need a call (a lease run out, a
//!   record or an inode's links not kept, a lookup elsewhere) makes
//!   none: it gives up ([`Across::needed_call`]), and the check runs
//!   again from the start on a blocking thread ([`Across::new`]: it
//!   waits on the runtime). Every doubt (a peer that does not answer, a
//!   broken chain) denies, as on one server;
//! - [`Across::resolve`] is [`Engine::resolve`]'s walk (the same
//!   [`PathWalk`](sextant_types::walk::PathWalk), so the same rules):
//!   search permission on every directory as the caller — on a directory
//!   another server holds, from its kept record (mode and owner, as that
//!   server would check them: no ACLs) or by an `Access` there as the
//!   caller; lookups of names not kept (files, symlinks, directories not
//!   kept yet) on their directory's holder as the caller. A directory
//!   walked through from a kept record is carried as a partial `Attr`
//!   (its type, mode, owner and parent); the walk's answer is always
//!   read whole from its holder.

use crate::peers::{PeerDirs, Peers};
use crate::placement::Placement;
use sextant_engine::confine::{Confine, MAX_WALK};
use sextant_engine::search::DirRecord;
use sextant_engine::search::ForeignDirs;
use sextant_engine::Engine;
use sextant_proto::pb::{self, request::Op, response::Result as Res};
use sextant_proto::route::RouteTable;
use sextant_proto::{attr_from_pb, cred_to_pb, error_from_pb, soid_from_pb, soid_to_pb};
use sextant_types::{Attr, Credentials, FileType, FsError, Nanos, Soid, NAME_MAX};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Attempts at one request whose holder the route map names wrongly (a
/// table moving).
const ATTEMPTS: usize = 20;
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// One check's walk across servers.
pub struct Across {
    engine: Engine,
    dirs: PeerDirs,
    /// Directory -> parent, read during this check (`None`: not a
    /// directory, or missing).
    parents: parking_lot::Mutex<HashMap<Soid, Option<Soid>>>,
    /// The route map, built from the placement's once per check and again
    /// only after a WRONG_SERVER (building it per request cost a search
    /// ~11 % of its CPU: BENCHMARKS, "After batching the directory reads").
    routes: parking_lot::Mutex<Option<RouteTable>>,
    /// A walk of kept records alone ([`Across::kept`]): it calls no other
    /// server, and sets `needed_call` where it would have.
    kept_only: bool,
    needed_call: AtomicBool,
}

fn is_cross(e: &FsError) -> bool {
    matches!(
        e,
        FsError::WrongServer { .. } | FsError::NeedsTable { .. } | FsError::CrossServer
    )
}

impl Across {
    /// REQUIRES: used on a blocking thread (waits on `runtime`).
    pub fn new(
        engine: Engine,
        peers: Arc<Peers>,
        placement: Arc<dyn Placement>,
        runtime: tokio::runtime::Handle,
    ) -> Across {
        // The records kept across requests, while every other server's
        // lease on them is live (or its epoch was asked now): see the
        // module doc.
        let checked = if crate::dir_leases::granting() && crate::peers::keeping() {
            peers.check_epochs(&engine, placement.as_ref(), &runtime)
        } else {
            None
        };
        Across::with(engine, peers, placement, runtime, checked, false)
    }

    fn with(
        engine: Engine,
        peers: Arc<Peers>,
        placement: Arc<dyn Placement>,
        runtime: tokio::runtime::Handle,
        checked: Option<crate::peers::Checked>,
        kept_only: bool,
    ) -> Across {
        Across {
            engine,
            dirs: PeerDirs::new(peers, placement, runtime, checked),
            parents: parking_lot::Mutex::new(HashMap::new()),
            routes: parking_lot::Mutex::new(None),
            kept_only,
            needed_call: AtomicBool::new(false),
        }
    }

    /// A walk across the servers that reads other servers' directories
    /// from the records kept under their live leases alone, and calls
    /// none of them: never waits, so it may run on a runtime worker. A
    /// read it cannot make so fails (EIO) and sets
    /// [`Across::needed_call`]: its check's outcome is then void, and the
    /// check must run again on an [`Across::new`]. `None` when records
    /// cannot be used without a call (a lease not live, leases or kept
    /// records off).
    pub fn kept(
        engine: Engine,
        peers: Arc<Peers>,
        placement: Arc<dyn Placement>,
        runtime: tokio::runtime::Handle,
    ) -> Option<Across> {
        if !(crate::dir_leases::granting() && crate::peers::keeping()) {
            return None;
        }
        let checked = peers.check_epochs_kept(&engine, placement.as_ref())?;
        Some(Across::with(
            engine,
            peers,
            placement,
            runtime,
            Some(checked),
            true,
        ))
    }

    /// Whether this walk (an [`Across::kept`]) met a read it could not
    /// make without a call: whatever its check decided, it must run again
    /// on an [`Across::new`].
    pub fn needed_call(&self) -> bool {
        self.needed_call.load(Ordering::Relaxed)
    }

    /// A read a kept walk cannot make: marked, and failed.
    fn call_needed(&self) -> FsError {
        self.needed_call.store(true, Ordering::Relaxed);
        FsError::Io
    }

    /// Runs `op` as `cred` on the server holding `key`; a WRONG_SERVER
    /// naming another SOID is returned as the error.
    fn run(&self, cred: &Credentials, key: Soid, op: Op) -> Result<Res, FsError> {
        if self.kept_only {
            return Err(self.call_needed());
        }
        for _ in 0..ATTEMPTS {
            let address = {
                let mut routes = self.routes.lock();
                if routes.is_none() {
                    *routes = RouteTable::from_pb(&self.dirs.placement.map()).ok();
                }
                routes
                    .as_ref()
                    .and_then(|t| t.route(key).map(|r| r.address.clone()))
                    .filter(|a| !a.is_empty())
                    .ok_or(FsError::Io)?
            };
            let req = pb::Request {
                cred: Some(cred_to_pb(cred)),
                op: Some(op.clone()),
                ..Default::default()
            };
            let resp = self
                .dirs
                .runtime
                .block_on(self.dirs.peers.call(&address, req))
                .map_err(|why| {
                    tracing::warn!(%why, "a confinement check cannot reach another server");
                    FsError::Io
                })?;
            if let Some(ws) = resp.wrong_server {
                let soid = soid_from_pb(ws.soid.as_ref())?;
                if soid != key {
                    return Err(FsError::WrongServer { soid });
                }
                // The map was behind a move: ask again, by a newer one.
                *self.routes.lock() = None;
                std::thread::sleep(RETRY_PAUSE);
                continue;
            }
            if let Some(e) = resp.error {
                return Err(error_from_pb(&e));
            }
            return resp.result.ok_or(FsError::Io);
        }
        Err(FsError::Io)
    }

    fn attr_of(res: Res) -> Result<Attr, FsError> {
        match res {
            Res::Attr(a) => attr_from_pb(&a),
            _ => Err(FsError::Io),
        }
    }

    /// `soid`'s attributes, wherever it is held.
    pub fn getattr(&self, soid: Soid) -> Result<Attr, FsError> {
        match self.engine.getattr(soid) {
            Err(e) if is_cross(&e) => {
                let op = Op::Getattr(pb::GetattrRequest {
                    soid: Some(soid_to_pb(soid)),
                });
                Self::attr_of(self.run(&Credentials::root(), soid, op)?)
            }
            r => r,
        }
    }

    /// `name` in `dir` looked up as `cred`, wherever either is held.
    fn lookup(&self, cred: &Credentials, dir: Soid, name: &[u8]) -> Result<Attr, FsError> {
        match self.engine.lookup(cred, dir, name) {
            Err(e) if is_cross(&e) => {
                let op = Op::Lookup(pb::LookupRequest {
                    parent: Some(soid_to_pb(dir)),
                    name: name.to_vec(),
                });
                match self.run(cred, dir, op) {
                    // The entry is there, its inode elsewhere.
                    Err(FsError::WrongServer { soid }) => self.getattr(soid),
                    r => Self::attr_of(r?),
                }
            }
            r => r,
        }
    }

    /// The parent of the directory `dir` (`None`: not a directory, or
    /// missing), read here or from its holder's `DirChain` (the whole
    /// chain it holds is kept for this check).
    fn dir_parent(&self, dir: Soid) -> Result<Option<Soid>, FsError> {
        if let Some(p) = self.parents.lock().get(&dir) {
            return Ok(*p);
        }
        let parent = match self.engine.links_of(dir) {
            Ok(Some((true, links))) => links.first().copied(),
            Ok(_) => None,
            Err(e) if is_cross(&e) => {
                let chain = match &self.dirs.checked {
                    // The kept records alone.
                    Some(c) if self.kept_only => {
                        let (kept, rest) = self.dirs.peers.cache.lookup(c, &[dir]);
                        if !rest.is_empty() {
                            return Err(self.call_needed());
                        }
                        kept
                    }
                    // The kept records first, then the holders (and
                    // kept).
                    Some(_) => self.dirs.chains(&[dir])?,
                    None if self.kept_only => return Err(self.call_needed()),
                    None => self.dirs.chain(dir)?,
                };
                let mut parents = self.parents.lock();
                for r in &chain {
                    parents.insert(r.soid, Some(r.parent));
                }
                chain.iter().find(|r| r.soid == dir).map(|r| r.parent)
            }
            Err(e) => return Err(e),
        };
        self.parents.lock().insert(dir, parent);
        Ok(parent)
    }

    /// The parent of the directory `dir` wherever it is held (`None`:
    /// not a directory, or gone): from this server's tables, the records
    /// kept under other servers' leases, else its holder's `DirChain`
    /// (whose whole chain there is kept for this walk). For a BORROW's
    /// read-ahead (`crate::read_ahead`).
    pub fn parent_of(&self, dir: Soid) -> Result<Option<Soid>, FsError> {
        self.dir_parent(dir)
    }

    /// The entry `name` in the directory `dir` looked up as `cred`,
    /// wherever `dir` is held: its inode and whether that is a directory
    /// (`None`: no such entry). For a BORROW's read-ahead
    /// (`crate::read_ahead`).
    pub fn entry(
        &self,
        cred: &Credentials,
        dir: Soid,
        name: &[u8],
    ) -> Result<Option<(Soid, bool)>, FsError> {
        let found = match self.engine.lookup_entry(cred, dir, name) {
            Ok((child, ftype)) => Ok((child, ftype == FileType::Directory)),
            Err(e) if is_cross(&e) => self
                .lookup(cred, dir, name)
                .map(|a| (a.soid, a.ftype == FileType::Directory)),
            Err(e) => Err(e),
        };
        match found {
            Ok(e) => Ok(Some(e)),
            Err(FsError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`Engine::links_of`] wherever `soid` is held: whether it is a
    /// directory, and the directories of its links — all of them, hard
    /// links included (a directory's: its parent). Another server's are
    /// read from it (`DirChain` with `links`), with the chains of those
    /// directories it holds (kept for this check).
    fn links_of(&self, soid: Soid) -> Result<Option<(bool, Vec<Soid>)>, FsError> {
        match self.engine.links_of(soid) {
            Err(e) if is_cross(&e) && self.kept_only => Err(self.call_needed()),
            Err(e) if is_cross(&e) => {
                let Some(links) = self.dirs.links(soid)? else {
                    return Ok(None);
                };
                let mut parents = self.parents.lock();
                for r in &links.records {
                    parents.insert(r.soid, Some(r.parent));
                }
                if links.is_dir {
                    parents.insert(soid, links.dirs.first().copied());
                }
                Ok(Some((links.is_dir, links.dirs)))
            }
            r => r,
        }
    }

    /// Is the directory `dir` the subtree's root or below it?
    fn dir_within(&self, mut dir: Soid, root: Soid) -> Result<bool, FsError> {
        for _ in 0..MAX_WALK {
            if dir == root {
                return Ok(true);
            }
            if dir == Soid::ROOT {
                return Ok(false);
            }
            match self.dir_parent(dir)? {
                Some(p) => dir = p,
                None => return Ok(false),
            }
        }
        Ok(false)
    }

    /// [`sextant_engine::confine::within`] across servers. `target`: a
    /// `soid` another server holds is that server's to check
    /// (`WRONG_SERVER`, the client goes there); else it is placed by its
    /// links, read from its holder — any inode, a file by every link
    /// (hard links included), as on one server.
    pub fn within(&self, soid: Soid, c: &Confine, target: bool) -> Result<bool, FsError> {
        if soid == c.root {
            return Ok(true);
        }
        let links = match self.engine.links_of(soid) {
            Ok(Some((_, links))) => links,
            Ok(None) => return Ok(false),
            Err(FsError::WrongServer { .. }) if target => {
                return Err(FsError::WrongServer { soid });
            }
            Err(e) if is_cross(&e) => match self.links_of(soid)? {
                Some((_, links)) => links,
                None => return Ok(false),
            },
            Err(e) => return Err(e),
        };
        for dir in links {
            if self.dir_within(dir, c.root)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The subtree at `path` as a check of this generation found it
    /// before ([`Across::confine`]; `None`: none kept).
    pub fn kept_confine(&self, path: &str) -> Option<Arc<Confine>> {
        let checked = self.dirs.checked.as_ref()?;
        self.dirs.peers.cache.confine(checked, path)
    }

    /// Keeps `confine`, the subtree at `path` as this check found it on
    /// this server's tables alone, for the next checks of this
    /// generation (its epoch is part of the generation's check). Nothing
    /// without a generation, or once this walk needed a call.
    pub fn keep_confine(&self, path: &str, confine: &Arc<Confine>) {
        if let Some(checked) = self.checked_here() {
            self.dirs
                .peers
                .cache
                .keep_confine(checked, path, Arc::clone(confine));
        }
    }

    /// Whether a check of this generation proved one of `dirs`
    /// (directories) to be `root` or below it (`false`: not known).
    pub fn known_inside(&self, root: Soid, dirs: &[Soid]) -> bool {
        self.dirs
            .checked
            .as_ref()
            .is_some_and(|c| self.dirs.peers.cache.known_inside(c, root, dirs))
    }

    /// Notes that this check proved the directory `dir` to be `root` or
    /// below it, for the next checks of this generation (see the module
    /// doc). Nothing without a generation, or once this walk needed a
    /// call (its outcome is void).
    pub fn note_inside(&self, root: Soid, dir: Soid) {
        if let Some(checked) = self.checked_here() {
            self.dirs.peers.cache.note_inside(checked, root, dir);
        }
    }

    /// The generation this walk may fill, if any (not once it needed a
    /// call).
    fn checked_here(&self) -> Option<&crate::peers::Checked> {
        self.dirs.checked.as_ref().filter(|_| !self.needed_call())
    }

    /// [`sextant_engine::confine::confine_of`] across servers (`None`: no
    /// directory at `path`); what it finds is kept for the next checks of
    /// this generation of kept records (see the module doc).
    pub fn confine(&self, path: &str) -> Result<Option<Arc<Confine>>, FsError> {
        if let Some(c) = self.kept_confine(path) {
            return Ok(Some(c));
        }
        let Some(found) = self.confine_walk(path.as_bytes())? else {
            // (Not kept: a directory made there later changes no epoch.)
            return Ok(None);
        };
        let found = Arc::new(found);
        if let Some(checked) = &self.dirs.checked {
            if !self.needed_call() {
                self.dirs
                    .peers
                    .cache
                    .keep_confine(checked, path, Arc::clone(&found));
            }
        }
        Ok(Some(found))
    }

    fn confine_walk(&self, path: &[u8]) -> Result<Option<Confine>, FsError> {
        let root = Credentials::root();
        let mut cur = Soid::ROOT;
        let mut steps = Vec::new();
        for comp in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            if comp == b"." || comp == b".." {
                return Ok(None);
            }
            if let Some(child) = self.kept_child(cur, comp) {
                steps.push((cur, Box::from(comp)));
                cur = child;
                continue;
            }
            let child = match self.lookup(&root, cur, comp) {
                Ok(a) => a,
                Err(FsError::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            };
            if child.ftype != FileType::Directory {
                return Ok(None);
            }
            if self.dirs.checked.is_some() {
                // Its record (and its chain) kept for the next checks:
                // this step is then read from it.
                self.dir_parent(child.soid)?;
            }
            steps.push((cur, Box::from(comp)));
            cur = child.soid;
        }
        Ok(Some(Confine { root: cur, steps }))
    }

    /// The directory at `name` in `dir` by the records kept across
    /// requests (`None`: not kept, or none may be used).
    fn kept_child(&self, dir: Soid, name: &[u8]) -> Option<Soid> {
        let checked = self.dirs.checked.as_ref()?;
        self.dirs.peers.cache.child(checked, dir, name)
    }

    /// May a confined walk look up `name` in `dir`
    /// ([`sextant_engine::confine::may_step`])?
    fn may_step(&self, dir: Soid, name: &[u8], c: &Confine) -> Result<(), FsError> {
        if c.is_step(dir, name) || self.within(dir, c, false)? {
            Ok(())
        } else {
            Err(FsError::Access)
        }
    }

    /// Search permission on the directory `dir` for `cred`, wherever it
    /// is held; its attributes.
    fn searchable(&self, cred: &Credentials, dir: Soid) -> Result<Attr, FsError> {
        let op = Op::Access(pb::AccessRequest {
            soid: Some(soid_to_pb(dir)),
            mask: 1,
        });
        match self.engine.access(cred, dir, 1) {
            Err(e) if is_cross(&e) => {
                self.run(cred, dir, op)?;
            }
            r => r?,
        }
        let attr = self.getattr(dir)?;
        if attr.ftype != FileType::Directory {
            return Err(FsError::NotDir);
        }
        Ok(attr)
    }

    fn readlink(&self, soid: Soid) -> Result<Box<[u8]>, FsError> {
        match self.engine.readlink(soid) {
            Err(e) if is_cross(&e) => {
                let op = Op::Readlink(pb::ReadlinkRequest {
                    soid: Some(soid_to_pb(soid)),
                });
                match self.run(&Credentials::root(), soid, op)? {
                    Res::Data(d) => Ok(d.data.into()),
                    _ => Err(FsError::Io),
                }
            }
            r => r,
        }
    }

    /// [`Engine::resolve_confined`] across servers: the engine's
    /// `resolve_path`, step by step, each lookup on its directory's
    /// holder as `cred`, every step confined; with whether the result is
    /// in the subtree (else it is one of its root's ancestors).
    pub fn resolve_confined(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
        c: &Confine,
    ) -> Result<(Attr, bool), FsError> {
        use sextant_types::walk::{PathWalk, Step};
        let mut walk = PathWalk::new(path, follow_last, self.getattr(Soid::ROOT)?);
        let cur = loop {
            match walk.step()? {
                Step::Search { dir, up } => {
                    let dir = self.searchable(cred, dir.soid)?;
                    if up {
                        let parent = match walk.walked_parent() {
                            Some(p) => p.clone(),
                            None => self.getattr(dir.parent)?,
                        };
                        walk.up(parent);
                    }
                }
                Step::Lookup { dir, name, .. } => {
                    self.may_step(dir, &name, c)?;
                    walk.found(self.lookup(cred, dir, &name)?)?;
                }
                Step::Readlink { link } => walk.target(&self.readlink(link)?),
                Step::Root => walk.at_root(self.getattr(Soid::ROOT)?),
                Step::Done(attr) => break attr,
            }
        };
        // (Wherever it is held: a file by every link, as on one server.)
        let inside = self.within(cur.soid, c, false)?;
        if !inside && !c.is_ancestor(cur.soid) {
            return Err(FsError::Access);
        }
        Ok((cur, inside))
    }

    /// The kept record of the directory `dir` another server holds
    /// (`None`: not kept, or none may be used).
    fn kept_record(&self, dir: Soid) -> Option<DirRecord> {
        let checked = self.dirs.checked.as_ref()?;
        let (kept, _) = self.dirs.peers.cache.lookup(checked, &[dir]);
        kept.into_iter().find(|r| r.soid == dir)
    }

    /// Search permission on the directory `dir` for `cred` (`EACCES`
    /// otherwise), wherever it is held: here, else by its kept record,
    /// else asked of its holder as `cred`.
    fn may_search(&self, cred: &Credentials, dir: Soid) -> Result<(), FsError> {
        match self.engine.access(cred, dir, 1) {
            Err(e) if is_cross(&e) => {}
            r => return r,
        }
        if let Some(r) = self.kept_record(dir) {
            let allowed =
                cred.is_root() || sextant_engine::perm::class_allows(r.uid, r.gid, r.perm, cred, 1);
            return if allowed {
                Ok(())
            } else {
                Err(FsError::Access)
            };
        }
        let op = Op::Access(pb::AccessRequest {
            soid: Some(soid_to_pb(dir)),
            mask: 1,
        });
        self.run(cred, dir, op).map(|_| ())
    }

    /// The directory `dir`'s attributes for the walk to go on from: read
    /// here, else from its kept record (partial: noted in `partial`),
    /// else from its holder.
    fn walk_dir(&self, dir: Soid, partial: &mut HashSet<Soid>) -> Result<Attr, FsError> {
        match self.engine.getattr(dir) {
            Err(e) if is_cross(&e) => {}
            r => return r,
        }
        if let Some(r) = self.kept_record(dir) {
            partial.insert(dir);
            return Ok(partial_attr(&r));
        }
        self.getattr(dir)
    }

    /// `name` in the directory `dir` looked up as `cred` for
    /// [`Across::resolve`]: as [`Engine::lookup`] checks it (search
    /// permission first, then the name), wherever `dir` and the entry's
    /// inode are held. A directory found in the kept records comes back
    /// partial (noted in `partial`); one another server answered for is
    /// kept (its chain read) for the next resolutions.
    fn resolve_lookup(
        &self,
        cred: &Credentials,
        dir: Soid,
        name: &[u8],
        partial: &mut HashSet<Soid>,
    ) -> Result<Attr, FsError> {
        match self.engine.lookup(cred, dir, name) {
            Err(e) if is_cross(&e) => {}
            r => return r,
        }
        if name.len() > NAME_MAX {
            // (A peer's `Lookup` checks the name before the permission.)
            self.may_search(cred, dir)?;
            return Err(FsError::NameTooLong);
        }
        if let Some(child) = self.kept_child(dir, name) {
            if let Some(r) = self.kept_record(child) {
                self.may_search(cred, dir)?;
                partial.insert(child);
                return Ok(partial_attr(&r));
            }
        }
        let found = match self.engine.lookup_entry(cred, dir, name) {
            // The entry is here, its inode elsewhere.
            Ok((child, _)) => self.getattr(child)?,
            Err(e) if is_cross(&e) => {
                let op = Op::Lookup(pb::LookupRequest {
                    parent: Some(soid_to_pb(dir)),
                    name: name.to_vec(),
                });
                match self.run(cred, dir, op) {
                    // The entry is there, its inode elsewhere.
                    Err(FsError::WrongServer { soid }) => self.getattr(soid)?,
                    r => Self::attr_of(r?)?,
                }
            }
            Err(e) => return Err(e),
        };
        if found.ftype == FileType::Directory
            && self.dirs.checked.is_some()
            && matches!(self.engine.links_of(found.soid), Err(e) if is_cross(&e))
        {
            // Its record (and chain) kept, so the next resolution steps
            // through it without a call. Only an optimisation: a failure
            // here changes nothing of this answer.
            let _ = self.dir_parent(found.soid);
        }
        Ok(found)
    }

    /// [`Engine::resolve`] across servers: the path walk of `path` as
    /// `cred`, following symlinks on the way (and at its end with
    /// `follow_last`), each step where the directory is held — here, in
    /// the records kept under other servers' leases, or asked of its
    /// holder as `cred` (see the module doc). The answer is the inode's
    /// attributes as its holder has them.
    pub fn resolve(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
    ) -> Result<Attr, FsError> {
        use sextant_types::walk::{PathWalk, Step};
        let mut partial = HashSet::new();
        let mut walk = PathWalk::new(path, follow_last, self.walk_dir(Soid::ROOT, &mut partial)?);
        loop {
            match walk.step()? {
                Step::Search { dir, up } => {
                    self.may_search(cred, dir.soid)?;
                    if up {
                        // `..` is the physical parent, as walked (at the
                        // walk's root: the root's parent, the root).
                        let parent = match walk.walked_parent() {
                            Some(p) => p.clone(),
                            None => self.walk_dir(dir.parent, &mut partial)?,
                        };
                        walk.up(parent);
                    }
                }
                Step::Lookup { dir, name, .. } => {
                    walk.found(self.resolve_lookup(cred, dir, &name, &mut partial)?)?
                }
                Step::Readlink { link } => walk.target(&self.readlink(link)?),
                Step::Root => walk.at_root(self.walk_dir(Soid::ROOT, &mut partial)?),
                Step::Done(attr) if partial.contains(&attr.soid) => return self.getattr(attr.soid),
                Step::Done(attr) => return Ok(attr),
            }
        }
    }
}

/// A directory's attributes as far as its kept record says (type, mode,
/// owner, parent; the rest zero): enough to walk through it, never an
/// answer ([`Across::resolve`] reads the answer whole).
fn partial_attr(r: &DirRecord) -> Attr {
    Attr {
        soid: r.soid,
        ftype: FileType::Directory,
        perm: u32::from(r.perm),
        uid: r.uid,
        gid: r.gid,
        nlink: 0,
        size: 0,
        rdev: 0,
        atime: Nanos(0),
        mtime: Nanos(0),
        ctime: Nanos(0),
        parent: r.parent,
        no_xattrs: false,
    }
}
