//! A path walk as a state machine with no I/O: which step the caller must
//! take next (look a name up, check search permission on a directory,
//! read a symlink, fetch the root) and what follows from its answer. The
//! engine (inside a transaction), a server walking its peers for a
//! path-limited key, and the client each drive it with their own reads,
//! so the rules of path resolution are written once:
//!
//! - components are separated by `/`, empty ones ignored; a trailing `/`
//!   asks for a directory (and follows a symlink there), as
//!   `path_lookupat` does;
//! - `.` and `..` need search permission on the directory they are in;
//!   `..` of the root is the root;
//! - a symlink is followed in every component but the last, and in the
//!   last when asked; an absolute target starts again at the root; more
//!   than [`MAX_SYMLINK_FOLLOWS`] follows is `ELOOP`;
//! - a component after a non-directory is `ENOTDIR`.
//!
//! Invariant: [`PathWalk::step`] is called once per step; each step's
//! answer is given with the method its doc names before the next call.

use crate::{Attr, FileType, FsError, Soid};

/// Symlinks followed in one walk at most (Linux's `MAXSYMLINKS`).
pub const MAX_SYMLINK_FOLLOWS: usize = 40;

/// What the walk needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `.` (`up == false`) or `..` in directory `dir`: check that the
    /// caller may search it, then call [`PathWalk::up`] for `..` with its
    /// parent's attributes ([`PathWalk::walked_parent`] knows it when the
    /// walk came down through it).
    Search { dir: Attr, up: bool },
    /// Look `name` up in `dir` and give the answer to [`PathWalk::found`].
    Lookup {
        dir: Soid,
        name: Vec<u8>,
        last: bool,
    },
    /// Read symlink `link`; give its target to [`PathWalk::target`].
    Readlink { link: Soid },
    /// An absolute symlink target: give the root's attributes to
    /// [`PathWalk::at_root`].
    Root,
    /// The walk ends at this inode.
    Done(Attr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaiting {
    Nothing,
    Up,
    Found { last: bool },
    Target { last: bool },
    Root,
}

/// See the module docs.
#[derive(Debug)]
pub struct PathWalk {
    /// Components still to walk, the next one last.
    pending: Vec<Vec<u8>>,
    must_be_dir: bool,
    follow_last: bool,
    follows: usize,
    cur: Attr,
    /// The directories walked down through since the root (or an absolute
    /// symlink's target), innermost last.
    walked: Vec<Attr>,
    /// The symlink being followed (for [`Step::Readlink`]).
    link: Option<Soid>,
    awaiting: Awaiting,
}

fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = Vec<u8>> + '_ {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
}

impl PathWalk {
    /// A walk of `path` from `root` (the root directory's attributes);
    /// `follow_last`: a symlink in the last component is followed too
    /// (`stat` rather than `lstat`).
    pub fn new(path: &[u8], follow_last: bool, root: Attr) -> PathWalk {
        let must_be_dir = path.ends_with(b"/");
        PathWalk {
            pending: components(path).rev().collect(),
            must_be_dir,
            follow_last: follow_last || must_be_dir,
            follows: 0,
            cur: root,
            walked: Vec::new(),
            link: None,
            awaiting: Awaiting::Nothing,
        }
    }

    /// The next step (see [`Step`]).
    pub fn step(&mut self) -> Result<Step, FsError> {
        match self.awaiting {
            Awaiting::Nothing => {}
            Awaiting::Target { .. } => {
                if let Some(link) = self.link {
                    return Ok(Step::Readlink { link });
                }
            }
            Awaiting::Root => return Ok(Step::Root),
            // The caller skipped an answer: a bug of the caller's.
            Awaiting::Up | Awaiting::Found { .. } => return Err(FsError::Invalid),
        }
        let Some(comp) = self.pending.pop() else {
            if self.must_be_dir && self.cur.ftype != FileType::Directory {
                return Err(FsError::NotDir);
            }
            return Ok(Step::Done(self.cur.clone()));
        };
        if self.cur.ftype != FileType::Directory {
            return Err(FsError::NotDir);
        }
        let last = self.pending.is_empty();
        match &comp[..] {
            b"." => Ok(Step::Search {
                dir: self.cur.clone(),
                up: false,
            }),
            b".." => {
                self.awaiting = Awaiting::Up;
                Ok(Step::Search {
                    dir: self.cur.clone(),
                    up: true,
                })
            }
            _ => {
                self.awaiting = Awaiting::Found { last };
                Ok(Step::Lookup {
                    dir: self.cur.soid,
                    name: comp,
                    last,
                })
            }
        }
    }

    /// The parent of the directory `..` was met in, as the walk came down
    /// (`None` at the root of the walk: the caller reads `dir.parent`, or
    /// stays at the root).
    pub fn walked_parent(&self) -> Option<&Attr> {
        self.walked.last()
    }

    /// The answer to `Search { up: true }`: the parent's attributes.
    pub fn up(&mut self, parent: Attr) {
        self.walked.pop();
        self.cur = parent;
        self.awaiting = Awaiting::Nothing;
    }

    /// The answer to [`Step::Lookup`].
    pub fn found(&mut self, attr: Attr) -> Result<(), FsError> {
        let Awaiting::Found { last } = self.awaiting else {
            return Err(FsError::Invalid);
        };
        if attr.ftype == FileType::Symlink && (!last || self.follow_last) {
            self.follows += 1;
            if self.follows > MAX_SYMLINK_FOLLOWS {
                self.awaiting = Awaiting::Nothing;
                return Err(FsError::Loop);
            }
            self.link = Some(attr.soid);
            self.awaiting = Awaiting::Target { last };
            return Ok(());
        }
        self.awaiting = Awaiting::Nothing;
        self.walked.push(std::mem::replace(&mut self.cur, attr));
        Ok(())
    }

    /// The answer to [`Step::Readlink`]: the symlink's target.
    pub fn target(&mut self, target: &[u8]) {
        let Awaiting::Target { last } = self.awaiting else {
            return;
        };
        self.link = None;
        if last && target.ends_with(b"/") {
            self.must_be_dir = true;
            self.follow_last = true;
        }
        self.pending.extend(components(target).rev());
        self.awaiting = if target.starts_with(b"/") {
            Awaiting::Root
        } else {
            Awaiting::Nothing
        };
    }

    /// The answer to [`Step::Root`].
    pub fn at_root(&mut self, root: Attr) {
        self.walked.clear();
        self.cur = root;
        self.awaiting = Awaiting::Nothing;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Nanos;
    use std::collections::HashMap;

    /// An inode: type, parent, children by name, symlink target.
    type Node = (FileType, u128, Vec<(&'static str, u128)>, &'static str);

    /// A tree: inode number → its node.
    struct Tree {
        nodes: HashMap<u128, Node>,
        /// Directories the caller may not search.
        closed: Vec<u128>,
    }

    fn attr(t: &Tree, n: u128) -> Attr {
        let (ftype, parent, _, _) = &t.nodes[&n];
        Attr {
            soid: Soid::from_u128(n),
            ftype: *ftype,
            perm: 0o755,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            rdev: 0,
            atime: Nanos(0),
            mtime: Nanos(0),
            ctime: Nanos(0),
            parent: Soid::from_u128(*parent),
            no_xattrs: false,
        }
    }

    /// Drives a walk over `t`, counting steps; `..` by the walk's own
    /// record, else the inode's parent (as the engine does).
    fn resolve(t: &Tree, path: &str, follow_last: bool) -> Result<u128, FsError> {
        let mut w = PathWalk::new(path.as_bytes(), follow_last, attr(t, 1));
        for _ in 0..1000 {
            match w.step()? {
                Step::Done(a) => return Ok(a.soid.as_u128()),
                Step::Search { dir, up } => {
                    if t.closed.contains(&dir.soid.as_u128()) {
                        return Err(FsError::Access);
                    }
                    if up {
                        let parent = match w.walked_parent() {
                            Some(p) => p.clone(),
                            None => attr(t, dir.parent.as_u128()),
                        };
                        w.up(parent);
                    }
                }
                Step::Lookup { dir, name, .. } => {
                    let d = dir.as_u128();
                    if t.closed.contains(&d) {
                        return Err(FsError::Access);
                    }
                    let name = std::str::from_utf8(&name).unwrap();
                    let (_, _, children, _) = &t.nodes[&d];
                    let child = children
                        .iter()
                        .find(|(n, _)| *n == name)
                        .ok_or(FsError::NotFound)?
                        .1;
                    w.found(attr(t, child))?;
                }
                Step::Readlink { link } => w.target(t.nodes[&link.as_u128()].3.as_bytes()),
                Step::Root => w.at_root(attr(t, 1)),
            }
        }
        panic!("the walk did not end")
    }

    fn tree() -> Tree {
        use FileType::*;
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            (
                Directory,
                1,
                vec![("a", 2), ("f", 3), ("abs", 5), ("loop", 6), ("c", 9)],
                "",
            ),
        );
        nodes.insert(
            2,
            (Directory, 1, vec![("b", 4), ("up", 7), ("slash", 8)], ""),
        );
        nodes.insert(3, (Regular, 1, vec![], ""));
        nodes.insert(4, (Directory, 2, vec![], ""));
        nodes.insert(5, (Symlink, 1, vec![], "/a/b"));
        nodes.insert(6, (Symlink, 1, vec![], "loop"));
        nodes.insert(7, (Symlink, 2, vec![], "../f"));
        nodes.insert(8, (Symlink, 2, vec![], "b/"));
        nodes.insert(9, (Directory, 1, vec![("x", 3)], ""));
        Tree {
            nodes,
            closed: vec![9],
        }
    }

    #[test]
    fn resolves_as_linux_does() {
        let t = tree();
        let cases: &[(&str, bool, Result<u128, FsError>)] = &[
            ("/", false, Ok(1)),
            ("", false, Ok(1)),
            ("//a///b", false, Ok(4)),
            ("/a/b/..", false, Ok(2)),
            ("/a/b/../..", false, Ok(1)),
            ("/..", false, Ok(1)),
            ("/a/./b/.", false, Ok(4)),
            ("/f", false, Ok(3)),
            ("/f/", false, Err(FsError::NotDir)),
            ("/f/x", false, Err(FsError::NotDir)),
            ("/f/.", false, Err(FsError::NotDir)),
            ("/nope", false, Err(FsError::NotFound)),
            ("/abs", false, Ok(5)),
            ("/abs", true, Ok(4)),
            ("/abs/", false, Ok(4)),
            ("/abs/..", false, Ok(2)),
            ("/a/up", true, Ok(3)),
            ("/a/up", false, Ok(7)),
            ("/a/slash", true, Ok(4)),
            ("/loop", false, Ok(6)),
            ("/loop", true, Err(FsError::Loop)),
            ("/loop/x", false, Err(FsError::Loop)),
            ("/c/x", false, Err(FsError::Access)),
            ("/c/..", false, Err(FsError::Access)),
            ("/c", false, Ok(9)),
        ];
        for (path, follow, want) in cases {
            assert_eq!(&resolve(&t, path, *follow), want, "{path} follow={follow}");
        }
    }

    #[test]
    fn a_skipped_answer_is_refused_not_guessed() {
        let t = tree();
        let mut w = PathWalk::new(b"/a/b", false, attr(&t, 1));
        assert!(matches!(w.step(), Ok(Step::Lookup { .. })));
        assert_eq!(w.step(), Err(FsError::Invalid));
        assert_eq!(w.found(attr(&t, 2)), Ok(()));
        assert_eq!(w.found(attr(&t, 4)), Err(FsError::Invalid));
    }
}
