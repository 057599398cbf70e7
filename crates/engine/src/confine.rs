//! Confinement to a subtree: what a caller limited to one directory (a
//! client key's `--path`, see `sextant_server::confine`) may name.
//!
//! A [`Confine`] is the subtree's root directory and the steps from `/`
//! down to it (each ancestor and the name of the next component), found
//! by resolving the subtree's path as root, symlinks *not* followed.
//!
//! Invariants:
//! - membership is decided by ancestry only, never by SOID locality
//!   (renames keep SOIDs: see the search module's "Scope"): a directory is
//!   in the subtree iff its parent chain reaches the root; any other inode
//!   iff one of its links (primary or hard) is in a directory that is. So
//!   a file moved out is out at once, one moved in is in, and a file
//!   hard-linked from outside is in (it can be reached inside), while a
//!   hard link's *other* names are never reported by anything here;
//! - a chain longer than [`MAX_WALK`] (or broken: an inode missing on the
//!   way) counts as outside — every doubt denies;
//! - a path walk ([`may_step`]) may look up a name in a directory outside
//!   the subtree only if that (directory, name) is one of the steps down
//!   to the root: the names beside those are neither read nor told apart
//!   (missing and present both fail the same way, with `EACCES`).

use crate::txn::{OpError, OpResult, Txn};
use sextant_types::{FileType, FsError, Soid};

/// Parent links walked at most for one membership test (deeper than any
/// path of `PATH_MAX` bytes can reach).
pub const MAX_WALK: usize = 4096;

/// The subtree a caller is confined to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confine {
    /// The subtree's root directory.
    pub root: Soid,
    /// From `/` down: each ancestor of `root` and the name of the next
    /// component (empty when `root` is `/`).
    pub steps: Vec<(Soid, Box<[u8]>)>,
}

impl Confine {
    /// Is `(dir, name)` one of the steps from `/` down to the root?
    pub fn is_step(&self, dir: Soid, name: &[u8]) -> bool {
        self.steps.iter().any(|(d, n)| *d == dir && **n == *name)
    }

    /// Is `dir` a strict ancestor of the root?
    pub fn is_ancestor(&self, dir: Soid) -> bool {
        self.steps.iter().any(|(d, _)| *d == dir)
    }
}

/// The confinement to the directory at `path` (absolute): every component
/// must be a directory (a symlink is not followed: the subtree is where
/// the path names, not where a link points). `None` when there is no such
/// directory — then the confined caller may name nothing.
pub fn confine_of(txn: &mut Txn, path: &[u8]) -> OpResult<Option<Confine>> {
    let mut cur = Soid::ROOT;
    let mut steps = Vec::new();
    for comp in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
        if comp == b"." || comp == b".." {
            return Ok(None);
        }
        let Some(d) = txn.dentry(cur, comp)? else {
            return Ok(None);
        };
        if d.ftype != FileType::Directory {
            return Ok(None);
        }
        steps.push((cur, Box::from(comp)));
        cur = d.child;
    }
    Ok(Some(Confine { root: cur, steps }))
}

/// Is the directory `dir` the root or below it?
fn dir_within(txn: &mut Txn, mut dir: Soid, root: Soid) -> OpResult<bool> {
    for _ in 0..MAX_WALK {
        if dir == root {
            return Ok(true);
        }
        if dir == Soid::ROOT {
            return Ok(false);
        }
        match txn.inode(dir)? {
            Some(i) if i.is_dir() => dir = i.parent,
            _ => return Ok(false),
        }
    }
    Ok(false)
}

/// Is `soid` in the subtree (see the module doc)? A missing inode is not.
pub fn within(txn: &mut Txn, soid: Soid, c: &Confine) -> OpResult<bool> {
    if soid == c.root {
        return Ok(true);
    }
    let Some(i) = txn.inode(soid)? else {
        return Ok(false);
    };
    if i.is_dir() {
        return dir_within(txn, i.parent, c.root);
    }
    for (dir, _) in i.all_links() {
        if dir_within(txn, dir, c.root)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// May a path walk look up `name` in `dir`? In the subtree, yes; in an
/// ancestor, only the next step down to the root; anywhere else, `EACCES`.
pub fn may_step(txn: &mut Txn, dir: Soid, name: &[u8], c: &Confine) -> OpResult<()> {
    if c.is_step(dir, name) || within(txn, dir, c)? {
        Ok(())
    } else {
        Err(OpError::Fs(FsError::Access))
    }
}

/// `Ok` if `soid` is in the subtree, else `EACCES`.
pub fn require_within(txn: &mut Txn, soid: Soid, c: &Confine) -> OpResult<()> {
    if within(txn, soid, c)? {
        Ok(())
    } else {
        Err(OpError::Fs(FsError::Access))
    }
}
