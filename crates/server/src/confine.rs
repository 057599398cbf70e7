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
//! while nothing is there the key may name nothing.
//!
//! Per operation ([`check`]):
//! - on an object (`getattr`, `readlink`, `getxattr`, `listxattr`,
//!   `access`, `setattr`, `setxattr`, `removexattr`): the object is in;
//! - in a directory (`lookup`, `readdir`, `create`, `mknod`, `mkdir`,
//!   `symlink`, `unlink`, `rmdir`): the directory is in — then so is every
//!   entry it has (lookups never take `.` or `..`, readdir lists neither);
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
//! refused. On a cluster, a confinement that needs directories another
//! server holds — the path from `/` to the subtree, or an object's chain
//! of parents — is refused too (`EACCES`, reason `key-path-cluster`): the
//! membership walk across servers is not built, so a path-limited key
//! works on a cluster only where its subtree and the directories above it
//! are held by one server.
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

use sextant_engine::confine::Confine;
use sextant_engine::{Changes, Engine};
use sextant_proto::pb::{self, request::Op, response::Result as Res};
use sextant_proto::{cred_from_pb, soid_from_pb};
use sextant_types::{FileType, FsError, Soid};

/// The confinement to `path` now; `EACCES` when no directory is there.
pub fn confine(engine: &Engine, path: &str) -> Result<Confine, FsError> {
    engine
        .confine(path.as_bytes())
        .map_err(|e| across_servers(e, None))?
        .ok_or(FsError::Access)
}

/// A confinement that needs directories another server of a cluster
/// holds (the path from `/` to the subtree, or an object's chain of
/// parents): `EACCES`, counted (`key-path-cluster`) and logged — the
/// membership walk across servers is not built. `target`: the object the
/// operation itself names, whose WRONG_SERVER stays one (the client goes
/// to its owner, which checks there).
fn across_servers(e: FsError, target: Option<Soid>) -> FsError {
    match e {
        FsError::WrongServer { soid } if Some(soid) == target => e,
        FsError::WrongServer { .. } | FsError::NeedsTable { .. } | FsError::CrossServer => {
            metrics::counter!("sextant_auth_refused_total", "reason" => "key-path-cluster")
                .increment(1);
            tracing::warn!(
                error = %e,
                "refused: a path-limited client key whose subtree (or the path to it) spans \
                 servers of the cluster (not supported: EACCES)"
            );
            FsError::Access
        }
        e => e,
    }
}

/// `EACCES` unless the object `s` names is in the subtree.
fn inside(engine: &Engine, c: &Confine, s: &Option<pb::Soid>) -> Result<(), FsError> {
    let soid = soid_from_pb(s.as_ref())?;
    if engine
        .within(soid, c)
        .map_err(|e| across_servers(e, Some(soid)))?
    {
        Ok(())
    } else {
        Err(FsError::Access)
    }
}

/// What a key confined to `path` gets for `req`: `Ok(None)`, run it;
/// `Ok(Some(result))`, answered here (a resolve, a statfs); `Err`, the
/// errno it is refused with.
pub fn check(engine: &Engine, path: &str, req: &pb::Request) -> Result<Option<Res>, FsError> {
    let c = confine(engine, path)?;
    let Some(op) = &req.op else {
        return Ok(None);
    };
    let check = |s: &Option<pb::Soid>| inside(engine, &c, s);
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
                return Err(FsError::NameTooLong);
            }
            let cred = cred_from_pb(req.cred.clone())?;
            let (attr, is_in) = engine
                .resolve_confined(&cred, &r.path, r.follow_last, &c)
                .map_err(|e| across_servers(e, None))?;
            if !is_in {
                return Err(FsError::Access);
            }
            return Ok(Some(Res::Attr(sextant_proto::attr_to_pb(&attr))));
        }
        Op::Statfs(_) => return Ok(Some(Res::Statfs(pb::StatFs::default()))),
        Op::Status(_) => return Err(FsError::Access),
        // Releasing one's own backups is every client's; a sync for its
        // own sake is an admin's.
        Op::Sync(r) if r.release_through == 0 => return Err(FsError::Access),
        Op::Sync(_) => {}
    }
    Ok(None)
}

/// Confines a search by a key limited to `path` (see the module doc): the
/// scope kept, clamped to `path`, or `EACCES`. The scope is left as the
/// SOID the confined walk found — a path resolved again by the search
/// could meet a symlink changed in between.
pub fn search_scope(
    engine: &Engine,
    path: &str,
    req: &mut pb::SearchRequest,
) -> Result<(), FsError> {
    use pb::search_request::Scope;
    if !req.ranges.is_empty() || !req.forward_to.is_empty() {
        return Err(FsError::Access);
    }
    let c = confine(engine, path)?;
    let cred = cred_from_pb(req.cred.clone())?;
    let found = match &req.scope {
        None => return Ok(()),
        Some(Scope::Path(p)) => {
            if p.len() > sextant_proto::PATH_MAX {
                return Err(FsError::NameTooLong);
            }
            // `find`'s starting point: symlinks followed but in the last
            // component. An ancestor passes the walk, but is not in.
            let (attr, is_in) = engine.resolve_confined(&cred, p, false, &c)?;
            is_in.then_some(attr)
        }
        Some(Scope::Soid(s)) => {
            let soid = soid_from_pb(Some(s))?;
            if engine.within(soid, &c)? {
                Some(engine.getattr(soid)?)
            } else if c.is_ancestor(soid) {
                None
            } else {
                return Err(FsError::Access);
            }
        }
    };
    let root = match found {
        Some(attr) => {
            // A file's scope path is its primary link's: that must be in
            // too (a hard link's other name is outside otherwise).
            if attr.ftype != FileType::Directory && !engine.within(attr.parent, &c)? {
                return Err(FsError::Access);
            }
            attr.soid
        }
        // An ancestor: clamped to the key's subtree, walked down as the
        // caller (search permission on the way, as any path scope).
        None => {
            engine
                .resolve_confined(&cred, path.as_bytes(), false, &c)?
                .0
                .soid
        }
    };
    req.scope = Some(Scope::Soid(sextant_proto::soid_to_pb(root)));
    Ok(())
}

/// The part of a change a key confined to `path` may see: the inodes in
/// the subtree and the entries of its directories (`None`: nothing).
pub fn filter_changes(engine: &Engine, path: &str, changes: &Changes) -> Option<Changes> {
    let c = confine(engine, path).ok()?;
    let is_in = |s: Soid| engine.within(s, &c).unwrap_or(false);
    let out = Changes {
        inodes: changes
            .inodes
            .iter()
            .copied()
            .filter(|s| is_in(*s))
            .collect(),
        entries: changes
            .entries
            .iter()
            .filter(|(parent, _)| is_in(*parent))
            .cloned()
            .collect(),
    };
    (!out.is_empty()).then_some(out)
}

/// A watch's filter of changes (see [`crate::watchers::Watchers::watch`]).
pub type Filter = std::sync::Arc<dyn Fn(&Changes) -> Option<Changes> + Send + Sync>;

/// The filter of a watch by a key confined to `path`.
pub fn watch_filter(engine: Engine, path: String) -> Filter {
    std::sync::Arc::new(move |c: &Changes| filter_changes(&engine, &path, c))
}

#[cfg(test)]
mod tests;
