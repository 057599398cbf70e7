//! FUSE node ids ↔ SOIDs.
//!
//! SOIDs are 128-bit and FUSE node ids 64-bit, so the mount keeps a map.
//! Node ids are handed out from a counter and never reused: a node id the
//! kernel may still hold always names the SOID it was first given for. The
//! kernel's references are counted (each entry reply adds one, `forget`
//! removes n). A node the kernel forgot keeps its id (and drops the names
//! it was given under): the SOID gets the same id when it is looked up
//! again, so a file's `st_ino` is stable for as long as it exists, as a
//! program that compares inode numbers across a walk expects (hard-link
//! detection in tar, du and rsync -H, `find -inum`, GNU find against a
//! later run) — the kernel forgets inodes whenever it likes (memory
//! pressure, an invalidation). Bounded: past [`MAX_NODES`] nodes, those
//! the kernel holds no reference to are dropped at once (their SOIDs get
//! new ids later), so a walk of a huge tree costs bounded memory. Node
//! id 1 is the root and is never dropped.
//!
//! When the mount learns that a SOID's inode is gone (the last link
//! removed), it *detaches* the SOID: the node stays until the kernel forgets
//! it, but a later inode that reuses the SOID gets a fresh node id, so the
//! kernel never mistakes the new inode for the old one.
//!
//! For directories the map also keeps the parent SOID last seen in their
//! attributes, for the `..` entry of a listing. It is as fresh as the last
//! attributes the mount received for the directory (a directory moved by
//! another client shows its old parent's node id until then); only the
//! `d_ino` of `..` depends on it.
//!
//! For cache invalidation ([`crate::watch`]) each node also keeps the names
//! `(parent node, name)` under which the kernel was given it (entry
//! replies), so that when invalidation notices were lost every name the
//! kernel may hold can be dropped. Names go with their node; a name the
//! node no longer has (unlinked, renamed) may stay listed, which costs only
//! a useless invalidation.
//!
//! A directory's names are kept closer: they are where the kernel may hold
//! its dentry, which [`crate::unalias`] drops before the kernel is given
//! the directory under a name in another directory (another client moved
//! it). Invariants, for directory names (those given with `dir`):
//! - Every name under which the kernel may hold a dentry of a directory
//!   node is among that node's names: recorded before the entry reply
//!   goes ([`Nodes::named`]), moved by this mount's renames
//!   ([`Nodes::renamed`], the kernel moves the dentry), and dropped only
//!   once the kernel cannot hold it any more — invalidated
//!   ([`Nodes::unaliased`]), removed here ([`Nodes::removed`]), given to
//!   another directory node (the kernel looked it up again, so it dropped
//!   the old dentry), or the node forgotten (the kernel holds no dentry of
//!   an inode it forgot). Past [`NAMES_PER_NODE`] the oldest is dropped:
//!   the limit of this, which costs an `ESTALE` at worst.
//! - A name listed may be one the kernel no longer holds (dropped by the
//!   watcher's invalidation, an expiry, a lookup that found another
//!   inode): invalidating it again is useless but harmless.
//! - `dir_names` indexes them: `(parent, name)` → node exactly when the
//!   name is among that node's names (each name is one directory's).

use parking_lot::Mutex;
use sextant_types::Soid;
use std::collections::HashMap;
use std::sync::Arc;

/// The root directory's node id (FUSE_ROOT_ID).
pub const ROOT_INO: u64 = 1;

/// Most nodes kept before those without a kernel reference are dropped
/// (~100 bytes each).
pub const MAX_NODES: usize = 1 << 20;

#[derive(Debug)]
struct Node {
    soid: Soid,
    lookups: u64,
    /// A directory's parent, as last seen in its attributes.
    parent: Option<Soid>,
    /// Names the kernel got this node under (see the module docs).
    names: Vec<NodeName>,
    /// Its inode is known gone, its SOID reused by a new inode made here
    /// ([`Nodes::made`]): calls through it answer `ESTALE`.
    dead: bool,
}

/// A name the kernel may cache: (parent node id, name).
pub type NodeName = (u64, Box<[u8]>);

/// Most names remembered per node (hard links beyond it are not tracked,
/// and so not cached by the kernel).
const NAMES_PER_NODE: usize = 8;

#[derive(Debug)]
struct Inner {
    /// The SOID of node [`ROOT_INO`].
    root: Soid,
    by_ino: HashMap<u64, Node>,
    by_soid: HashMap<Soid, u64>,
    /// Directory names → their node (see the module docs).
    dir_names: HashMap<NodeName, u64>,
    next: u64,
}

impl Inner {
    /// Drops every node the kernel holds no reference to (but the root).
    fn drop_unreferenced(&mut self) {
        let root = self.root;
        let by_soid = &mut self.by_soid;
        let dir_names = &mut self.dir_names;
        self.by_ino.retain(|&ino, n| {
            let keep = n.lookups > 0 || ino == ROOT_INO;
            if !keep {
                if by_soid.get(&n.soid) == Some(&ino) && n.soid != root {
                    by_soid.remove(&n.soid);
                }
                unindex(dir_names, ino, &n.names);
            }
            keep
        });
    }

    /// Directory name `name` is node `ino`'s no more (see the module docs).
    fn drop_dir_name(&mut self, ino: u64, name: &NodeName) {
        if self.dir_names.get(name) == Some(&ino) {
            self.dir_names.remove(name);
        }
        if let Some(n) = self.by_ino.get_mut(&ino) {
            n.names.retain(|m| m != name);
        }
    }
}

/// Drops from `dir_names` those of `names` that are `ino`'s.
fn unindex(dir_names: &mut HashMap<NodeName, u64>, ino: u64, names: &[NodeName]) {
    for name in names {
        if dir_names.get(name) == Some(&ino) {
            dir_names.remove(name);
        }
    }
}

/// One kernel reference to a node, taken for an entry not yet in a reply
/// (READDIRPLUS: a reply holds as many entries as fit). Dropped unless
/// [`Reference::given`]: the reference is released as a `forget` would.
#[derive(Debug)]
pub struct Reference {
    nodes: Option<Arc<Nodes>>,
    ino: u64,
}

impl Reference {
    /// Takes over the reference [`Nodes::ino`] with `lookup` took to `ino`.
    pub fn taken(nodes: &Arc<Nodes>, ino: u64) -> Reference {
        Reference {
            nodes: Some(Arc::clone(nodes)),
            ino,
        }
    }

    /// The kernel got the entry: it holds the reference now (and will
    /// forget it).
    pub fn given(mut self) {
        self.nodes = None;
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        if let Some(nodes) = self.nodes.take() {
            nodes.forget(self.ino, 1);
        }
    }
}

#[derive(Debug)]
pub struct Nodes {
    inner: Mutex<Inner>,
}

impl Default for Nodes {
    fn default() -> Self {
        Nodes::with_root(Soid::ROOT)
    }
}

impl Nodes {
    /// The nodes of a mount whose root (node [`ROOT_INO`]) is the
    /// directory `root`: `/`, or the subtree a `--subdir` mount shows. The
    /// root node is never forgotten or detached, and its `..` is itself
    /// (the kernel answers `..` of a mount's root; a listing must not name
    /// a directory above the subtree).
    pub fn with_root(root: Soid) -> Self {
        let mut by_ino = HashMap::new();
        by_ino.insert(
            ROOT_INO,
            Node {
                soid: root,
                lookups: 1,
                parent: Some(root),
                names: Vec::new(),
                dead: false,
            },
        );
        let mut by_soid = HashMap::new();
        by_soid.insert(root, ROOT_INO);
        Nodes {
            inner: Mutex::new(Inner {
                root,
                by_ino,
                by_soid,
                dir_names: HashMap::new(),
                next: ROOT_INO + 1,
            }),
        }
    }

    /// The SOID of a node the kernel names, if it is known (and its
    /// inode not known gone: [`Nodes::made`]).
    pub fn soid(&self, ino: u64) -> Option<Soid> {
        self.inner
            .lock()
            .by_ino
            .get(&ino)
            .filter(|n| !n.dead)
            .map(|n| n.soid)
    }

    /// A new inode was made here with `soid` (a create, mkdir, mknod or
    /// symlink answered it). SOIDs are reused once free, so a node this
    /// mount still has for `soid` is an older inode that another client
    /// removed — the mount may not have heard yet. It is detached, as if
    /// heard ([`Nodes::detach`]), so the new inode gets a node id of its
    /// own: given the old one, the kernel took the new directory for the
    /// old one moved (its dentry spliced over: `ESTALE` from the VFS, or
    /// the old directory's cached names under the new one). Calls the
    /// kernel still makes through the old node answer `ESTALE`, and the
    /// VFS looks the name up again.
    pub fn made(&self, soid: Soid) {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        if soid == inner.root {
            return;
        }
        if let Some(ino) = inner.by_soid.remove(&soid) {
            match inner.by_ino.get_mut(&ino) {
                Some(n) if n.lookups > 0 => n.dead = true,
                _ => {
                    if let Some(n) = inner.by_ino.remove(&ino) {
                        unindex(&mut inner.dir_names, ino, &n.names);
                    }
                }
            }
        }
    }

    /// The node id for `soid`, assigning one if it has none. With `lookup`
    /// the kernel gains a reference (an entry reply); without, the id is
    /// only shown (a readdir `d_ino`).
    pub fn ino(&self, soid: Soid, lookup: bool) -> u64 {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let ino = match inner.by_soid.get(&soid) {
            Some(&ino) => ino,
            None => {
                if inner.by_ino.len() >= MAX_NODES {
                    inner.drop_unreferenced();
                }
                let ino = inner.next;
                inner.next += 1;
                inner.by_soid.insert(soid, ino);
                inner.by_ino.insert(
                    ino,
                    Node {
                        soid,
                        lookups: 0,
                        parent: None,
                        names: Vec::new(),
                        dead: false,
                    },
                );
                ino
            }
        };
        if lookup && ino != ROOT_INO {
            if let Some(n) = inner.by_ino.get_mut(&ino) {
                n.lookups += 1;
            }
        }
        ino
    }

    /// The node id `soid` has now, if the kernel may know it.
    pub fn find(&self, soid: Soid) -> Option<u64> {
        self.inner.lock().by_soid.get(&soid).copied()
    }

    /// The kernel is given `ino` (a directory when `dir`) as `name` in
    /// directory `parent`. Returns whether the name is remembered (false
    /// past [`NAMES_PER_NODE`]: the kernel must not cache it, or nothing
    /// could drop it). A directory's name always is (the kernel makes a
    /// dentry whether or not it may cache it): past the bound its oldest
    /// name is dropped (see the module docs).
    pub fn named(&self, ino: u64, parent: u64, name: &[u8], dir: bool) -> bool {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let Some(n) = inner.by_ino.get_mut(&ino) else {
            return false;
        };
        let known = n.names.iter().any(|(p, m)| *p == parent && **m == *name);
        if !dir {
            if known {
                return true;
            }
            if n.names.len() < NAMES_PER_NODE {
                n.names.push((parent, name.into()));
                return true;
            }
            return false;
        }
        let key: NodeName = (parent, name.into());
        if !known {
            n.names.push(key.clone());
        }
        let oldest = (n.names.len() > NAMES_PER_NODE).then(|| n.names.remove(0));
        if let Some(old) = oldest {
            if inner.dir_names.get(&old) == Some(&ino) {
                inner.dir_names.remove(&old);
            }
        }
        // The kernel looked the name up, so it holds no other dentry
        // there: a directory that had it has it no more.
        if let Some(before) = inner.dir_names.insert(key.clone(), ino) {
            if before != ino {
                if let Some(b) = inner.by_ino.get_mut(&before) {
                    b.names.retain(|m| *m != key);
                }
            }
        }
        true
    }

    /// The names under which the kernel may hold directory `ino`'s dentry
    /// in directories other than `parent` (see [`crate::unalias`]; one in
    /// `parent` the kernel moves without locks).
    pub fn names_elsewhere(&self, ino: u64, parent: u64) -> Vec<NodeName> {
        let g = self.inner.lock();
        let Some(n) = g.by_ino.get(&ino) else {
            return Vec::new();
        };
        n.names
            .iter()
            .filter(|(p, m)| *p != parent && g.dir_names.get(&(*p, m.clone())) == Some(&ino))
            .cloned()
            .collect()
    }

    /// These names of directory `ino` were invalidated: the kernel holds
    /// no dentry under them now.
    pub fn unaliased(&self, ino: u64, names: &[NodeName]) {
        let mut g = self.inner.lock();
        for name in names {
            g.drop_dir_name(ino, name);
        }
    }

    /// This mount renamed `from` to `to` (exchanged them with `exchange`):
    /// the kernel moved the dentries (a directory's replaced at `to` is
    /// dropped).
    pub fn renamed(&self, from: (u64, &[u8]), to: (u64, &[u8]), exchange: bool) {
        let mut g = self.inner.lock();
        let (from, to): (NodeName, NodeName) = ((from.0, from.1.into()), (to.0, to.1.into()));
        let moved = g.dir_names.get(&from).copied();
        let other = g.dir_names.get(&to).copied();
        if let Some(d) = moved {
            g.drop_dir_name(d, &from);
        }
        if let Some(e) = other {
            g.drop_dir_name(e, &to);
        }
        let mut put = |ino: u64, name: NodeName| {
            if let Some(n) = g.by_ino.get_mut(&ino) {
                if !n.names.contains(&name) {
                    n.names.push(name.clone());
                }
                g.dir_names.insert(name, ino);
            }
        };
        if let Some(d) = moved {
            put(d, to);
        }
        if let (Some(e), true) = (other, exchange) {
            put(e, from);
        }
    }

    /// Directory `name` in `parent` was removed here: the kernel dropped
    /// its dentry.
    pub fn removed(&self, parent: u64, name: &[u8]) {
        let mut g = self.inner.lock();
        let key: NodeName = (parent, name.into());
        if let Some(ino) = g.dir_names.get(&key).copied() {
            g.drop_dir_name(ino, &key);
        }
    }

    /// Every node the kernel may hold, and every name it may cache for
    /// them (what to invalidate when notices were lost).
    pub fn cached(&self) -> (Vec<u64>, Vec<NodeName>) {
        let g = self.inner.lock();
        let inos = g.by_ino.keys().copied().collect();
        let names = g.by_ino.values().flat_map(|n| n.names.clone()).collect();
        (inos, names)
    }

    /// Records the parent of directory `ino` (from its attributes).
    pub fn set_parent(&self, ino: u64, parent: Soid) {
        if ino == ROOT_INO {
            return;
        }
        if let Some(n) = self.inner.lock().by_ino.get_mut(&ino) {
            n.parent = Some(parent);
        }
    }

    /// The parent of directory `ino` as last recorded, if any.
    pub fn parent(&self, ino: u64) -> Option<Soid> {
        self.inner.lock().by_ino.get(&ino).and_then(|n| n.parent)
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let Some(node) = inner.by_ino.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            let soid = node.soid;
            let names = std::mem::take(&mut node.names);
            unindex(&mut inner.dir_names, ino, &names);
            if inner.by_soid.get(&soid) != Some(&ino) {
                // Detached: its inode is gone. (Else kept for its SOID,
                // see the module docs; the kernel holds no name of it now.)
                inner.by_ino.remove(&ino);
            }
        }
    }

    /// `soid`'s inode is gone: a later inode with the same SOID gets a new
    /// node id. Nodes nobody references are dropped at once.
    pub fn detach(&self, soid: Soid) {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        if soid == inner.root {
            return;
        }
        if let Some(ino) = inner.by_soid.remove(&soid) {
            if inner.by_ino.get(&ino).is_some_and(|n| n.lookups == 0) {
                inner.by_ino.remove(&ino);
            }
        }
    }

    /// Nodes currently known (for tests and status).
    pub fn len(&self) -> usize {
        self.inner.lock().by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u128) -> Soid {
        Soid::from_u128(v)
    }

    #[test]
    fn names_are_remembered_once_and_go_with_their_node() {
        let n = Nodes::default();
        let a = n.ino(s(5), true);
        assert!(n.named(a, ROOT_INO, b"a", false));
        assert!(n.named(a, ROOT_INO, b"a", false));
        assert!(n.named(a, ROOT_INO, b"b", false));
        assert_eq!(n.find(s(5)), Some(a));
        let (inos, names) = n.cached();
        assert!(inos.contains(&a) && inos.contains(&ROOT_INO));
        assert_eq!(names.len(), 2);
        let remembered = (0..20u8)
            .filter(|i| n.named(a, ROOT_INO, &[b'x', *i], false))
            .count();
        assert_eq!(remembered, NAMES_PER_NODE - 2, "the others are not");
        assert_eq!(n.cached().1.len(), NAMES_PER_NODE, "bounded per node");
        assert!(n.named(a, ROOT_INO, b"b", false), "one remembered stays so");
        n.forget(a, 1);
        assert_eq!(n.find(s(5)), Some(a), "its id is kept");
        assert!(n.cached().1.is_empty(), "its names go");
    }

    fn nm(parent: u64, name: &[u8]) -> NodeName {
        (parent, name.into())
    }

    /// A directory's names follow where the kernel may hold its dentry:
    /// the names elsewhere are those to drop before it is given under a
    /// name in another directory (see crate::unalias).
    #[test]
    fn a_directorys_names_follow_its_dentry() {
        let n = Nodes::default();
        let (p1, p2, p3) = (n.ino(s(1), true), n.ino(s(2), true), n.ino(s(3), true));
        let x = n.ino(s(10), true);
        assert!(n.named(x, p1, b"x", true));
        assert!(n.names_elsewhere(x, p1).is_empty(), "its own name");
        assert_eq!(n.names_elsewhere(x, p2), [nm(p1, b"x")]);
        // Renamed here: the kernel moved the dentry.
        n.renamed((p1, b"x"), (p2, b"y"), false);
        assert_eq!(n.names_elsewhere(x, p3), [nm(p2, b"y")]);
        // Moved elsewhere by another client, found in p3: the old name
        // is dropped once invalidated, not before.
        assert!(n.named(x, p3, b"w", true));
        assert_eq!(n.names_elsewhere(x, p3), [nm(p2, b"y")]);
        n.unaliased(x, &[nm(p2, b"y")]);
        assert!(n.names_elsewhere(x, p3).is_empty());
        assert_eq!(n.names_elsewhere(x, p1), [nm(p3, b"w")]);
        // Another directory given under its name: the kernel dropped
        // the old dentry there.
        let z = n.ino(s(11), true);
        assert!(n.named(z, p3, b"w", true));
        assert!(n.names_elsewhere(x, p1).is_empty());
        assert_eq!(n.names_elsewhere(z, p1), [nm(p3, b"w")]);
        // An exchange swaps them; a rename over one drops the victim's.
        assert!(n.named(x, p1, b"x", true));
        n.renamed((p1, b"x"), (p3, b"w"), true);
        assert_eq!(n.names_elsewhere(x, p2), [nm(p3, b"w")]);
        assert_eq!(n.names_elsewhere(z, p2), [nm(p1, b"x")]);
        n.renamed((p1, b"x"), (p3, b"w"), false);
        assert_eq!(n.names_elsewhere(z, p2), [nm(p3, b"w")]);
        assert!(n.names_elsewhere(x, p2).is_empty());
        // Removed here, forgotten: nothing left to drop.
        n.removed(p3, b"w");
        assert!(n.names_elsewhere(z, p2).is_empty());
        assert!(n.named(x, p1, b"x", true));
        n.forget(x, 1);
        assert!(n.names_elsewhere(x, p2).is_empty());
        assert!(n.inner.lock().dir_names.is_empty(), "the index follows");
        // Bounded: the oldest goes first.
        let d = n.ino(s(12), true);
        for i in 0..(NAMES_PER_NODE as u8 + 3) {
            assert!(n.named(d, 100 + u64::from(i), b"d", true));
        }
        let left = n.names_elsewhere(d, 1);
        assert_eq!(left.len(), NAMES_PER_NODE);
        assert!(!left.contains(&nm(100, b"d")));
        assert_eq!(n.inner.lock().dir_names.len(), NAMES_PER_NODE);
        // A file's names are not a directory's: renames leave them.
        let f = n.ino(s(13), true);
        assert!(n.named(f, p1, b"f", false));
        n.renamed((p1, b"f"), (p2, b"g"), false);
        assert_eq!(
            n.cached().1.iter().filter(|m| **m == nm(p1, b"f")).count(),
            1
        );
    }

    fn lookups(n: &Nodes, ino: u64) -> u64 {
        n.inner.lock().by_ino.get(&ino).map_or(0, |n| n.lookups)
    }

    /// A READDIRPLUS entry's reference stays only if the entry was sent.
    #[test]
    fn a_reference_not_given_is_released() {
        let n = Arc::new(Nodes::default());
        let a = n.ino(s(5), true);
        Reference::taken(&n, a).given();
        assert_eq!(lookups(&n, a), 1, "given: the kernel holds it");
        let b = n.ino(s(5), true);
        assert_eq!(a, b);
        drop(Reference::taken(&n, b));
        assert_eq!(lookups(&n, a), 1, "not sent: released");
        n.forget(a, 1);
        assert_eq!(lookups(&n, a), 0);
    }

    /// A new inode made here with a SOID the mount still has a node for
    /// (an older inode another client removed, unheard of yet) gets a node
    /// of its own; the old node answers nothing (`ESTALE`) until the
    /// kernel forgets it, then goes.
    #[test]
    fn a_soid_made_again_gets_a_new_node_and_the_old_one_is_dead() {
        let n = Nodes::default();
        let old = n.ino(s(9), true);
        n.made(s(9));
        assert_eq!(n.soid(old), None, "the old inode is gone");
        let new = n.ino(s(9), true);
        assert_ne!(new, old);
        assert_eq!(n.soid(new), Some(s(9)));
        n.forget(old, 1);
        assert!(
            !n.inner.lock().by_ino.contains_key(&old),
            "dropped once forgotten"
        );
        assert_eq!(n.find(s(9)), Some(new));
        // Unreferenced: dropped at once.
        n.forget(new, 1);
        n.made(s(9));
        assert!(!n.inner.lock().by_ino.contains_key(&new));
        n.made(Soid::ROOT);
        assert_eq!(n.soid(ROOT_INO), Some(Soid::ROOT), "never the root");
    }

    #[test]
    fn root_is_one_and_never_forgotten() {
        let n = Nodes::default();
        assert_eq!(n.soid(ROOT_INO), Some(Soid::ROOT));
        assert_eq!(n.ino(Soid::ROOT, true), ROOT_INO);
        n.forget(ROOT_INO, 100);
        n.detach(Soid::ROOT);
        assert_eq!(n.soid(ROOT_INO), Some(Soid::ROOT));
    }

    #[test]
    fn lookups_are_counted_and_a_soid_keeps_its_id() {
        let n = Nodes::default();
        let big = s(u128::MAX - 7);
        let a = n.ino(big, true);
        assert_eq!(n.ino(big, true), a);
        assert_eq!(n.soid(a), Some(big));
        n.forget(a, 1);
        assert_eq!(n.soid(a), Some(big), "one reference left");
        n.forget(a, 1);
        // Forgotten by the kernel: looked up again, the same id (st_ino
        // is stable while the file exists).
        assert_eq!(n.soid(a), Some(big));
        assert_eq!(n.ino(big, true), a);
        // Its inode gone: the id is never handed out again, to it or
        // anything else.
        n.detach(big);
        n.forget(a, 1);
        assert_eq!(n.soid(a), None);
        let b = n.ino(big, true);
        assert_ne!(a, b, "an id of a gone inode is not handed out again");
    }

    #[test]
    fn a_detached_soid_gets_a_new_id_while_the_old_one_lives() {
        let n = Nodes::default();
        let a = n.ino(s(5), true);
        n.detach(s(5));
        assert_eq!(n.soid(a), Some(s(5)), "the kernel still holds it");
        let b = n.ino(s(5), true);
        assert_ne!(a, b);
        n.forget(a, 1);
        assert_eq!(n.soid(b), Some(s(5)), "forgetting the old id keeps the new");
        assert_eq!(n.ino(s(5), false), b);
    }

    #[test]
    fn a_subtree_root_is_node_one_and_its_own_parent() {
        let root = s(77);
        let n = Nodes::with_root(root);
        assert_eq!(n.soid(ROOT_INO), Some(root));
        assert_eq!(n.ino(root, true), ROOT_INO);
        // Its attributes name the directory above the subtree: not kept.
        n.set_parent(ROOT_INO, s(3));
        assert_eq!(n.parent(ROOT_INO), Some(root));
        n.detach(root);
        n.forget(ROOT_INO, 5);
        assert_eq!(n.soid(ROOT_INO), Some(root));
        // `/` is an ordinary node there.
        let top = n.ino(Soid::ROOT, true);
        assert_ne!(top, ROOT_INO);
        n.detach(Soid::ROOT);
        assert_eq!(n.find(Soid::ROOT), None);
    }

    #[test]
    fn past_the_bound_unreferenced_nodes_go() {
        let n = Nodes::default();
        let held = n.ino(s(1), true);
        let shown = n.ino(s(2), false);
        {
            let mut g = n.inner.lock();
            g.drop_unreferenced();
        }
        assert_eq!(n.soid(held), Some(s(1)), "a referenced node stays");
        assert_eq!(n.soid(ROOT_INO), Some(Soid::ROOT));
        assert_eq!(n.soid(shown), None);
        assert_ne!(n.ino(s(2), false), shown, "a new id, never an old one");
    }

    #[test]
    fn parents_are_remembered_per_node() {
        let n = Nodes::default();
        assert_eq!(n.parent(ROOT_INO), Some(Soid::ROOT));
        let a = n.ino(s(5), true);
        assert_eq!(n.parent(a), None);
        n.set_parent(a, s(3));
        assert_eq!(n.parent(a), Some(s(3)));
        n.set_parent(a, s(4));
        assert_eq!(n.parent(a), Some(s(4)), "the last one seen wins");
        n.forget(a, 1);
        assert_eq!(n.parent(a), Some(s(4)), "kept with its node");
        n.detach(s(5));
        assert_eq!(n.parent(a), None, "gone with its node");
    }

    #[test]
    fn readdir_ids_take_no_reference() {
        let n = Nodes::default();
        let a = n.ino(s(9), false);
        n.detach(s(9));
        assert_eq!(n.soid(a), None, "unreferenced nodes go at once");
        assert_eq!(n.len(), 1);
    }
}
