//! Path limits of client keys (`sextant auth add NAME --path /sub`): a key
//! confined to a subtree sees and touches nothing outside it.
//!
//! Requests name objects by SOID, not by path, so a path prefix check
//! cannot work: a request passes only if every object it names is in the
//! subtree *by ancestry* (`sextant_engine::confine`: a directory whose
//! parent chain reaches the subtree's root; another inode with a link in
//! such a directory). The subtree's root is found by resolving the key's
//! path (as root, symlinks not followed) at every request — so the limit
//! is the path, as with CephFS's `path=` capabilities: if the directory
//! there is renamed away, the key follows the path, not the directory, and
//! while nothing is there the key may name nothing. (Across the servers
//! of a cluster, the resolution is kept for the checks of one generation
//! of the other servers' kept directory records, which ends with any
//! directory change anywhere: [`across`].)
//!
//! Per operation ([`check`]):
//! - on an object (`getattr`, `readlink`, `getxattr`, `listxattr`,
//!   `access`, `setattr`, `setxattr`, `removexattr`): the object is in;
//! - in a directory (`lookup`, `readdir`, `create`, `mknod`, `mkdir`,
//!   `symlink`, `unlink`, `rmdir`): the directory is in — then so is every
//!   entry it has (lookups never take `.` or `..`, readdir lists neither;
//!   a `plus` readdir's attributes are of those entries, and only where a
//!   lookup of them would be allowed);
//! - `rename`: both directories are in (nothing moves in or out, and the
//!   subtree's root, whose entry is outside, can be neither moved nor
//!   removed); `link`: the inode and the new directory are in;
//! - `resolve`: walked here, confined (`Engine::resolve_confined`): a
//!   lookup outside the subtree is allowed only for the steps down to its
//!   root (`/`, `home`, `alice` for `/home/alice`), `..` and symlinks are
//!   followed but every step is checked, and the result must be in;
//! - `statfs` is answered with zeros (its counts are the whole store's);
//!   `status` (server statistics) and a `sync` other than the release of
//!   one's own backups are admin calls: refused.
//!
//! Everything refused is `EACCES` — a missing object and an object outside
//! are not told apart — counted and audit-logged (`reason="key-path"`).
//!
//! Search (`find`, `stats`, `du`, [`search_scope`]): a scope in the subtree
//! is searched as asked (every hit is a path below the scope, so inside;
//! a hard-linked file's other names are not paths below it); a scope that
//! is an *ancestor* of the subtree's root (`/`, `/home`) is clamped to the
//! key's path — what the key can see below it is exactly its subtree, so
//! `sextant find /` lists it and `sextant du /` adds it up, where a refusal
//! would make every tool that starts at `/` useless (depth predicates then
//! count from the subtree's root); any other scope is refused (`EACCES`),
//! as a stat of it is. Spread and forwarded searches (clusters) are
//! refused; a spread search's parts (`ranges`) are confined by their
//! scope as a whole search is (a key's client sends a scope it cannot
//! resolve, such as `/`, as a path: each server clamps it), and keep their
//! `done.not_held` ranges (SOID spans, for the client to chase).
//!
//! Clusters ([`Walk`], [`across`]): on a cluster whose leases on the
//! other servers' directory records are all live, a request's check is
//! first the walk over those records ([`Across::kept`], which reads this
//! server's tables as the local walk does): the subtree found and the
//! directories proven inside it are kept per generation of the records
//! (dropped when any directory changes anywhere), so the common check is
//! the kept subtree and one read of the object's links, whose directory
//! is known inside (`Walk::within`). Otherwise (one server, a lease
//! not live, a search, a watch) the check first walks this server's
//! tables alone ([`Walk::local`], as on one server — no cost more). When
//! that meets a directory another server holds — the path from `/` to
//! the subtree, or an object's chain of parents — it stops with
//! [`CheckError::NeedsPeers`] (a type of its own, never an errno: a
//! client's EXDEV from the engine cannot be taken for it), and the
//! service runs the check again across the servers ([`Walk::across`]):
//! first inline, on the records kept under live leases alone
//! ([`Across::kept`]: no call, no blocking thread — the common case once
//! the records are kept), then, where that would need a call, from the
//! start on a blocking thread ([`Across::new`]): parent chains read
//! with `DirChain` (the search's reader, `crate::peers`), an inode's
//! links (every link's directory, hard links included) with `DirChain`'s
//! `links` from its holder, lookups on their directories' holders.
//! Other servers' directory records are kept across requests only under
//! leases that a directory change revokes before it is acknowledged
//! ([`across`], `crate::dir_leases`), so a rename on another server
//! acknowledged before a request is seen by its check. An object
//! the operation itself names that another server holds stays a
//! WRONG_SERVER (the client goes there, and
//! that server checks) — the one the request is routed by only: a
//! rename's or link's other directory held elsewhere is walked across
//! here, and the operation then BORROWs its table (a WRONG_SERVER naming
//! it would send the client back to this very server). Where the other servers cannot be reached (no
//! peers), such a check is refused (`EACCES`, reason
//! `key-path-cluster`). A watch's filter judges each batch of changes
//! on the local walk, and what that cannot place across the servers (one
//! [`Across`] per batch, on a blocking thread; without peers it is left
//! out).
//!
//! The scope is rewritten to the SOID the confined walk found (resolved
//! again, a symlink swapped in between could redirect it); a file scope
//! whose primary link is outside is refused (the search names a file
//! scope by that link); the search's `done` then carries its hits' count
//! and size only, no figure about the store (`Shared::search`).
//!
//! Watch ([`Filter`]): each change is passed on only for the inodes in the
//! subtree and the entries of directories in it, judged when it is sent.
//!
//! Log-less: a confined key's replies carry its own redo entry only, never
//! other clients' (`Shared::handle_sharing`). Entries are sealed
//! (`sextant_engine::logless::RedoKey`), so their contents are hidden
//! from every client anyway; their number, sizes and timing would still
//! tell a confined key how busy the rest of the namespace is.
//!
//! Races: the check and the operation are two engine transactions. An
//! object another client moves out between them can still be touched by
//! the operation that was admitted; nothing the key does itself can move
//! anything out (see `rename`), so this needs a concurrent rename by a
//! caller with wider rights.
//!
//! Keys without a path (and every other caller) never reach this module:
//! they pay nothing.

pub mod across;

use across::Across;
use sextant_engine::confine::Confine;
use sextant_engine::{Changes, Engine};
use sextant_proto::pb::{self, request::Op, response::Result as Res};
use sextant_proto::{cred_from_pb, soid_from_pb};
use sextant_types::{Attr, Credentials, FileType, FsError, Soid};
use std::sync::Arc;

/// How the checks read the namespace: this server's tables alone
/// ([`Walk::local`], every request first), or across the servers of a
/// cluster too ([`Walk::across`], on a blocking thread) when the local
/// walk met a directory another server holds — which it tells by failing
/// with [`CheckError::NeedsPeers`].
pub struct Walk<'a> {
    pub engine: &'a Engine,
    pub across: Option<&'a Across>,
}

/// Why a check did not admit a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// Refused with this errno (or a WRONG_SERVER, for the client to
    /// follow): decided.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// Undecided: a [`Walk::local`] met a directory another server holds;
    /// run the check again on a [`Walk::across`]. Never from a walk
    /// across the servers.
    #[error("the check needs directories other servers hold")]
    NeedsPeers,
}

impl CheckError {
    /// The errno the client gets: a check that needs other servers where
    /// they cannot be read (no peers) is refused as [`across_servers`]
    /// refuses (`EACCES`, counted and logged).
    pub fn decided(self) -> FsError {
        match self {
            CheckError::Fs(e) => e,
            CheckError::NeedsPeers => refused_across(&self),
        }
    }
}

fn is_cross(e: &FsError) -> bool {
    matches!(
        e,
        FsError::WrongServer { .. } | FsError::NeedsTable { .. } | FsError::CrossServer
    )
}

impl<'a> Walk<'a> {
    pub fn local(engine: &'a Engine) -> Walk<'a> {
        Walk {
            engine,
            across: None,
        }
    }

    pub fn across(engine: &'a Engine, across: &'a Across) -> Walk<'a> {
        Walk {
            engine,
            across: Some(across),
        }
    }

    /// A local read met another server's table:
    /// [`CheckError::NeedsPeers`] on a local walk, else `across` run
    /// (what still crosses servers there: `EACCES`, but a `target`'s
    /// WRONG_SERVER).
    fn or_across<T>(
        &self,
        target: Option<Soid>,
        across: impl FnOnce(&Across) -> Result<T, FsError>,
    ) -> Result<T, CheckError> {
        match self.across {
            None => Err(CheckError::NeedsPeers),
            Some(a) => across(a).map_err(|e| across_servers(e, target).into()),
        }
    }

    /// The confinement to `path` now; `EACCES` when no directory is there.
    /// Across the servers, the one found by an earlier check of the same
    /// generation of kept records, if any ([`Across::confine`]).
    pub fn confine(&self, path: &str) -> Result<Arc<Confine>, CheckError> {
        if let Some(c) = self.across.and_then(|a| a.kept_confine(path)) {
            return Ok(c);
        }
        let found = match self.engine.confine(path.as_bytes()) {
            Err(e) if is_cross(&e) => self.or_across(None, |a| a.confine(path))?,
            r => {
                let found = r?.map(Arc::new);
                if let (Some(a), Some(c)) = (self.across, &found) {
                    // Found on this server's tables alone: kept for the
                    // generation too (this server's epoch is part of it).
                    a.keep_confine(path, c);
                }
                found
            }
        };
        Ok(found.ok_or(FsError::Access)?)
    }

    /// Is `soid` in the subtree? `target`: the object the operation
    /// itself names, whose WRONG_SERVER stays one (the client goes to its
    /// owner, which checks there).
    ///
    /// Across the servers, by the directories this generation of kept
    /// records already proved inside (`Across::known_inside`) where it
    /// can: `soid` read here (one read: is it a directory, and the
    /// directories of its links), it is in when it, or the directory of
    /// one of its links, is known inside; else walked
    /// ([`Walk::within_walked`]), and what that proves inside noted for
    /// the next checks (`soid` if a directory, else its one link's
    /// directory).
    fn within(&self, soid: Soid, c: &Confine, target: bool) -> Result<bool, CheckError> {
        let Some(a) = self.across else {
            return self.within_walked(soid, c, target);
        };
        if soid == c.root {
            return Ok(true);
        }
        let (is_dir, links) = match self.engine.links_of(soid) {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(false),
            // Held elsewhere: the operation's own object is its holder's
            // to check; another (a directory) may be known inside.
            Err(e) if is_cross(&e) => {
                if !target && a.known_inside(c.root, &[soid]) {
                    return Ok(true);
                }
                return self.within_walked(soid, c, target);
            }
            Err(e) => return Err(e.into()),
        };
        let known = |dirs: &[Soid]| dirs.contains(&c.root) || a.known_inside(c.root, dirs);
        if is_dir {
            if a.known_inside(c.root, &[soid]) {
                return Ok(true);
            }
            if known(&links) {
                a.note_inside(c.root, soid);
                return Ok(true);
            }
        } else if known(&links) {
            return Ok(true);
        }
        let inside = self.within_walked(soid, c, target)?;
        if inside {
            match (is_dir, links.as_slice()) {
                (true, _) => a.note_inside(c.root, soid),
                // (Several links: which one is inside is not known here.)
                (false, [dir]) => a.note_inside(c.root, *dir),
                (false, _) => {}
            }
        }
        Ok(inside)
    }

    /// [`Walk::within`] by walking the parent chains (here, then across
    /// the servers), no memo.
    fn within_walked(&self, soid: Soid, c: &Confine, target: bool) -> Result<bool, CheckError> {
        match self.engine.within(soid, c) {
            Err(FsError::WrongServer { soid: s }) if target && s == soid => {
                Err(FsError::WrongServer { soid }.into())
            }
            Err(e) if is_cross(&e) => {
                self.or_across(target.then_some(soid), |a| a.within(soid, c, target))
            }
            r => Ok(r?),
        }
    }

    fn resolve_confined(
        &self,
        cred: &Credentials,
        path: &[u8],
        follow_last: bool,
        c: &Confine,
    ) -> Result<(Attr, bool), CheckError> {
        match self.engine.resolve_confined(cred, path, follow_last, c) {
            Err(e) if is_cross(&e) => {
                self.or_across(None, |a| a.resolve_confined(cred, path, follow_last, c))
            }
            r => Ok(r?),
        }
    }
}

/// A confinement that needs directories another server of a cluster
/// holds, where they cannot be read (a server without peers, or a walk
/// that met a cross-server error even so): `EACCES`, counted
/// (`key-path-cluster`) and logged. `target`: the object the operation
/// itself names, whose WRONG_SERVER stays one.
pub fn across_servers(e: FsError, target: Option<Soid>) -> FsError {
    match e {
        FsError::WrongServer { soid } if Some(soid) == target => e,
        FsError::WrongServer { .. } | FsError::NeedsTable { .. } | FsError::CrossServer => {
            refused_across(&e)
        }
        e => e,
    }
}

/// The refusal of a check that needs other servers' directories it
/// cannot read (`why`): `EACCES`, counted (`key-path-cluster`) and logged.
fn refused_across(why: &dyn std::fmt::Display) -> FsError {
    metrics::counter!("sextant_auth_refused_total", "reason" => "key-path-cluster").increment(1);
    tracing::warn!(
        error = %why,
        "refused: a path-limited client key's check needs directories of other servers \
         it cannot read (EACCES)"
    );
    FsError::Access
}

/// `EACCES` unless the object `s` names is in the subtree. `route`: the
/// SOID the request is routed by — held elsewhere, the WRONG_SERVER
/// stays one (the client goes to its owner); any other SOID of the
/// operation (a rename's new parent) is walked across the servers.
fn inside(
    walk: &Walk,
    c: &Confine,
    s: &Option<pb::Soid>,
    route: Option<Soid>,
) -> Result<(), CheckError> {
    let soid = soid_from_pb(s.as_ref())?;
    if walk.within(soid, c, route == Some(soid))? {
        Ok(())
    } else {
        Err(FsError::Access.into())
    }
}

/// What a key confined to `path` gets for `req`: `Ok(None)`, run it;
/// `Ok(Some(result))`, answered here (a resolve, a statfs); `Err`, the
/// errno it is refused with, or [`CheckError::NeedsPeers`] (a local walk
/// that needs the other servers).
pub fn check(walk: &Walk, path: &str, req: &pb::Request) -> Result<Option<Res>, CheckError> {
    let c = walk.confine(path)?;
    let Some(op) = &req.op else {
        return Ok(None);
    };
    let route = op.route_soid();
    let check = |s: &Option<pb::Soid>| inside(walk, &c, s, route);
    match op {
        Op::Getattr(r) => check(&r.soid)?,
        Op::Readlink(r) => check(&r.soid)?,
        Op::Getxattr(r) => check(&r.soid)?,
        Op::Listxattr(r) => check(&r.soid)?,
        Op::Access(r) => check(&r.soid)?,
        Op::Setattr(r) => check(&r.soid)?,
        Op::Setxattr(r) => check(&r.soid)?,
        Op::Removexattr(r) => check(&r.soid)?,
        Op::Lookup(r) => check(&r.parent)?,
        Op::Readdir(r) => check(&r.dir)?,
        Op::Create(r) => check(&r.parent)?,
        Op::Mknod(r) => check(&r.parent)?,
        Op::Mkdir(r) => check(&r.parent)?,
        Op::Symlink(r) => check(&r.parent)?,
        Op::Unlink(r) => check(&r.parent)?,
        Op::Rmdir(r) => check(&r.parent)?,
        Op::Rename(r) => {
            check(&r.old_parent)?;
            check(&r.new_parent)?;
        }
        Op::Link(r) => {
            check(&r.soid)?;
            check(&r.new_parent)?;
        }
        Op::Resolve(r) => {
            if r.path.len() > sextant_proto::PATH_MAX {
                return Err(FsError::NameTooLong.into());
            }
            let cred = cred_from_pb(req.cred.clone())?;
            let (attr, is_in) = walk.resolve_confined(&cred, &r.path, r.follow_last, &c)?;
            if !is_in {
                return Err(FsError::Access.into());
            }
            return Ok(Some(Res::Attr(sextant_proto::attr_to_pb(&attr))));
        }
        Op::Statfs(_) => return Ok(Some(Res::Statfs(pb::StatFs::default()))),
        Op::Status(_) => return Err(FsError::Access.into()),
        // fsync's wait for the journal is every client's (routed by a
        // SOID inside, when it names one); releasing one's own backups too;
        // a sync for its own sake is an admin's.
        Op::Sync(r) if r.journal => {
            if r.soid.is_some() {
                check(&r.soid)?;
            }
        }
        Op::Sync(r) if r.release_through == 0 => return Err(FsError::Access.into()),
        Op::Sync(_) => {}
    }
    Ok(None)
}

/// Confines a search by a key limited to `path` (see the module doc): the
/// scope kept, clamped to `path`, or `EACCES`. The scope is left as the
/// SOID the confined walk found — a path resolved again by the search
/// could meet a symlink changed in between. [`CheckError::NeedsPeers`]:
/// a local walk that needs the other servers.
pub fn search_scope(
    walk: &Walk,
    path: &str,
    req: &mut pb::SearchRequest,
) -> Result<(), CheckError> {
    use pb::search_request::Scope;
    // A spread search's part (`ranges`, the scope then a SOID) is
    // confined by its scope as a whole search is; a forwarded one is for
    // callers without the secret or a key (the Unix socket's).
    if !req.forward_to.is_empty() {
        return Err(FsError::Access.into());
    }
    let c = walk.confine(path)?;
    let cred = cred_from_pb(req.cred.clone())?;
    let found = match &req.scope {
        None => return Ok(()),
        Some(Scope::Path(p)) => {
            if p.len() > sextant_proto::PATH_MAX {
                return Err(FsError::NameTooLong.into());
            }
            // `find`'s starting point: symlinks followed but in the last
            // component. An ancestor passes the walk, but is not in.
            let (attr, is_in) = walk.resolve_confined(&cred, p, false, &c)?;
            is_in.then_some(attr)
        }
        Some(Scope::Soid(s)) => {
            let soid = soid_from_pb(Some(s))?;
            if walk.within(soid, &c, false)? {
                Some(getattr(walk, soid)?)
            } else if c.is_ancestor(soid) {
                None
            } else {
                return Err(FsError::Access.into());
            }
        }
    };
    let root = match found {
        Some(attr) => {
            // A file's scope path is its primary link's: that must be in
            // too (a hard link's other name is outside otherwise).
            if attr.ftype != FileType::Directory && !walk.within(attr.parent, &c, false)? {
                return Err(FsError::Access.into());
            }
            attr.soid
        }
        // An ancestor: clamped to the key's subtree, walked down as the
        // caller (search permission on the way, as any path scope).
        None => {
            walk.resolve_confined(&cred, path.as_bytes(), false, &c)?
                .0
                .soid
        }
    };
    req.scope = Some(Scope::Soid(sextant_proto::soid_to_pb(root)));
    Ok(())
}

/// `soid`'s attributes (a search scope's), wherever it is held.
fn getattr(walk: &Walk, soid: Soid) -> Result<Attr, CheckError> {
    match walk.engine.getattr(soid) {
        Err(e) if is_cross(&e) => walk.or_across(None, |a| a.getattr(soid)),
        r => Ok(r?),
    }
}

/// The part of `changes` a key confined to `c` may see: the inodes in the
/// subtree and the entries of its directories (`Ok(None)`: nothing).
/// [`CheckError::NeedsPeers`] when `walk` is local and some object's
/// place needs another server's directories; on a walk across the
/// servers, an object that cannot be placed (a peer down) is left out —
/// never passed on in doubt.
fn filter_changes(
    walk: &Walk,
    c: &Confine,
    changes: &Changes,
) -> Result<Option<Changes>, CheckError> {
    let is_in = |s: Soid| match walk.within(s, c, false) {
        Ok(inside) => Ok(inside),
        Err(CheckError::NeedsPeers) => Err(CheckError::NeedsPeers),
        Err(CheckError::Fs(_)) => Ok(false),
    };
    let mut out = Changes::default();
    for s in &changes.inodes {
        if is_in(*s)? {
            out.inodes.push(*s);
        }
    }
    for (parent, name) in &changes.entries {
        if is_in(*parent)? {
            out.entries.push((*parent, name.clone()));
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// A watch's filter of changes (see [`crate::watchers::Watchers::watch`]):
/// given a batch of changes, what of each the watcher may see. Run on a
/// blocking thread (it may wait on other servers).
pub type Filter = std::sync::Arc<dyn Fn(&[std::sync::Arc<Changes>]) -> Vec<Changes> + Send + Sync>;

/// What a watch filter needs to read other servers' directories (a
/// cluster), as [`Across::new`] takes it.
pub struct Peered {
    pub peers: std::sync::Arc<crate::peers::Peers>,
    pub placement: std::sync::Arc<dyn crate::placement::Placement>,
    pub runtime: tokio::runtime::Handle,
}

/// The filter of a watch by a key confined to `path`. Each batch is judged
/// on this server's tables first; the changes whose place needs another
/// server's directories (a subtree whose ancestors, or part of it, other
/// servers hold) are judged again across the servers, with one
/// [`Across`] per batch — its records are read for that batch and kept
/// for it only, as a request's check keeps them (so a rename of an
/// ancestor elsewhere counts from the next batch on). Without peers those
/// changes are left out.
pub fn watch_filter(engine: Engine, path: String, peered: Option<Peered>) -> Filter {
    std::sync::Arc::new(move |batch: &[std::sync::Arc<Changes>]| {
        let local = Walk::local(&engine);
        let local_confine = local.confine(&path);
        let mut across: Option<(Across, Result<Arc<Confine>, CheckError>)> = None;
        let mut kept = Vec::new();
        for changes in batch {
            let here = match &local_confine {
                Ok(c) => filter_changes(&local, c, changes),
                Err(e) => Err(*e),
            };
            let judged = match here {
                Err(CheckError::NeedsPeers) => {
                    let Some(p) = &peered else { continue };
                    let (a, c) = across.get_or_insert_with(|| {
                        let a = Across::new(
                            engine.clone(),
                            std::sync::Arc::clone(&p.peers),
                            std::sync::Arc::clone(&p.placement),
                            p.runtime.clone(),
                        );
                        let c = Walk::across(&engine, &a).confine(&path);
                        (a, c)
                    });
                    match c {
                        Ok(c) => filter_changes(&Walk::across(&engine, a), c, changes),
                        Err(_) => continue,
                    }
                }
                r => r,
            };
            if let Ok(Some(c)) = judged {
                kept.push(c);
            }
        }
        kept
    })
}

#[cfg(test)]
mod tests;
