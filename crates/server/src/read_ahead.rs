//! BORROW read-ahead (issue 21): the SOIDs a rename will read, found
//! before its first BORROW so that one round brings every table it
//! needs.
//!
//! A rename that moves a directory checks that the directory is not an
//! ancestor of its new parent (ext4's loop check, `is_ancestor` in the
//! engine's `namespace`): it reads the inode of every directory from the
//! new parent up to `/`. Where each directory has a table of its own and
//! the tables are spread over servers, the engine met one missing table
//! per level — `NeedsTable` for the first it lacked, a BORROW, again —
//! so a move twenty tables deep took twenty BORROW rounds. The server
//! now reads the chain of parents ahead, across the servers
//! (`crate::confine::across::Across`: the records kept under other
//! servers' leases, else `DirChain` calls to them), and BORROWs every
//! table the rename will read at once.
//!
//! What is decided here is pure (no I/O): which inodes the engine's
//! rename reads, in its order, given what is known of the entries and
//! of the directories' parents ([`rename_reads`]), and which of them to
//! ask for ([`to_borrow`]). A parent not known yet is asked for
//! ([`Plan::NeedsParent`]); the caller reads it and asks again.
//!
//! Invariants:
//! - nothing read here is trusted: the rename runs again under
//!   ownership and checks everything itself. A chain that changed in
//!   between (a concurrent rename of an ancestor) only costs a round: the
//!   engine answers `NeedsTable` again, and the next round reads ahead
//!   again;
//! - no more than the engine would read: a walk stops where the engine's
//!   stops (at the moved directory — a move into its own subtree — or at
//!   `/`), and what the engine would not reach (the target's walk after
//!   the first walk refused the move, a walk for a file) is not read.

use sextant_types::Soid;

/// Whether a BORROW reads ahead: yes, unless
/// `SEXTANT_BORROW_READ_AHEAD=0` (benchmarks compare both in one run;
/// read once).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SEXTANT_BORROW_READ_AHEAD").map_or(true, |v| v != "0"))
}

/// Directory levels one walk reads ahead at most: past that the engine
/// asks for the rest, table by table (a chain that long is damaged).
pub const MAX_WALK: usize = 4096;

/// An entry of a directory, as the read-ahead found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub child: Soid,
    pub is_dir: bool,
}

/// What the read-ahead knows of a rename.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    pub old_parent: Soid,
    pub new_parent: Soid,
    /// The entry moved (`None`: not there — the engine answers ENOENT).
    pub src: Option<Entry>,
    /// The entry at the new name (`None`: none).
    pub target: Option<Entry>,
    pub noreplace: bool,
    pub exchange: bool,
}

/// A directory's parent as far as the caller knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parent {
    Of(Soid),
    /// Not a directory, or gone: the engine's walk ends there (with an
    /// error).
    Missing,
    /// Not read yet.
    Unknown,
}

/// What [`rename_reads`] could say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The inodes the rename reads, in its order, each once.
    Reads(Vec<Soid>),
    /// The parent of this directory must be read first.
    NeedsParent(Soid),
}

/// How one ancestor walk ended.
enum Walked {
    /// At the ancestor: the engine refuses the rename there.
    Found,
    /// At `/`.
    Root,
    /// At a directory without a parent (the engine's error), or at
    /// [`MAX_WALK`].
    Ended,
}

/// The engine's `is_ancestor(ancestor, from)`, reading through
/// `parent`: the directories whose inodes it reads go to `reads`.
fn ancestor_walk(
    ancestor: Soid,
    from: Soid,
    parent: &impl Fn(Soid) -> Parent,
    reads: &mut Vec<Soid>,
) -> Result<Walked, Soid> {
    let mut dir = from;
    for _ in 0..MAX_WALK {
        if dir == ancestor {
            return Ok(Walked::Found);
        }
        if dir == Soid::ROOT {
            return Ok(Walked::Root);
        }
        match parent(dir) {
            Parent::Of(p) => {
                push_once(reads, dir);
                dir = p;
            }
            Parent::Missing => {
                push_once(reads, dir);
                return Ok(Walked::Ended);
            }
            Parent::Unknown => return Err(dir),
        }
    }
    Ok(Walked::Ended)
}

fn push_once(reads: &mut Vec<Soid>, s: Soid) {
    if !reads.contains(&s) {
        reads.push(s);
    }
}

/// The inodes the engine's `rename` reads for `r`, in its order (see
/// the module doc), given the directories' parents by `parent`.
pub fn rename_reads(r: &Rename, parent: impl Fn(Soid) -> Parent) -> Plan {
    let mut reads = Vec::new();
    if r.noreplace && r.exchange {
        // EINVAL before anything is read.
        return Plan::Reads(reads);
    }
    // Both parents' inodes (search permission).
    reads.push(r.old_parent);
    push_once(&mut reads, r.new_parent);
    let Some(src) = r.src else {
        return Plan::Reads(reads);
    };
    push_once(&mut reads, src.child);
    if (r.noreplace && r.target.is_some()) || (r.exchange && r.target.is_none()) {
        return Plan::Reads(reads);
    }
    if src.is_dir {
        match ancestor_walk(src.child, r.new_parent, &parent, &mut reads) {
            Err(dir) => return Plan::NeedsParent(dir),
            Ok(Walked::Root) => {}
            Ok(Walked::Found | Walked::Ended) => return Plan::Reads(reads),
        }
    }
    if let Some(t) = r.target {
        push_once(&mut reads, t.child);
        if t.is_dir {
            match ancestor_walk(t.child, r.old_parent, &parent, &mut reads) {
                Err(dir) => return Plan::NeedsParent(dir),
                Ok(Walked::Root | Walked::Found | Walked::Ended) => {}
            }
        }
    }
    Plan::Reads(reads)
}

/// What to add to an operation's BORROW (`needs`: what it asks for
/// already) for the inodes it will read: those whose table is not
/// `here`, not asked for yet, each once — `room` at most.
pub fn to_borrow(
    needs: &[Soid],
    reads: &[Soid],
    here: impl Fn(Soid) -> bool,
    room: usize,
) -> Vec<Soid> {
    let mut more: Vec<Soid> = Vec::new();
    for &s in reads {
        if more.len() >= room {
            break;
        }
        if !needs.contains(&s) && !more.contains(&s) && !here(s) {
            more.push(s);
        }
    }
    more
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn s(v: u128) -> Soid {
        Soid::from_u128(v)
    }

    /// A chain `/` <- 10 <- 11 <- … <- 10+n-1 (each the parent of the
    /// next), and 60 in `/`.
    fn chain(n: u128) -> HashMap<Soid, Soid> {
        let mut p = HashMap::new();
        p.insert(s(10), Soid::ROOT);
        for i in 1..n {
            p.insert(s(10 + i), s(10 + i - 1));
        }
        p.insert(s(60), Soid::ROOT);
        p
    }

    fn knowing(p: &HashMap<Soid, Soid>) -> impl Fn(Soid) -> Parent + '_ {
        |d| p.get(&d).map_or(Parent::Unknown, |&x| Parent::Of(x))
    }

    fn dir(child: u128) -> Option<Entry> {
        Some(Entry {
            child: s(child),
            is_dir: true,
        })
    }

    fn file(child: u128) -> Option<Entry> {
        Some(Entry {
            child: s(child),
            is_dir: false,
        })
    }

    /// `mv /60 /10/…/29/60`: the moved directory, then every directory
    /// from the new parent up to (not including) `/`.
    fn deep_move() -> Rename {
        Rename {
            old_parent: Soid::ROOT,
            new_parent: s(29),
            src: dir(60),
            target: None,
            noreplace: false,
            exchange: false,
        }
    }

    #[test]
    fn a_directory_moved_deep_reads_the_whole_chain() {
        let p = chain(20);
        let Plan::Reads(reads) = rename_reads(&deep_move(), knowing(&p)) else {
            panic!("every parent is known");
        };
        let mut want = vec![Soid::ROOT, s(29), s(60)];
        want.extend((10..29).rev().map(s));
        assert_eq!(reads, want);
    }

    #[test]
    fn an_unknown_parent_is_asked_for_where_the_walk_needs_it() {
        let mut p = chain(20);
        p.remove(&s(15));
        assert_eq!(
            rename_reads(&deep_move(), knowing(&p)),
            Plan::NeedsParent(s(15))
        );
        // Nothing is asked before the walk reaches it: a file's move
        // walks nothing.
        let r = Rename {
            src: file(60),
            ..deep_move()
        };
        assert_eq!(
            rename_reads(&r, knowing(&HashMap::new())),
            Plan::Reads(vec![Soid::ROOT, s(29), s(60)])
        );
    }

    #[test]
    fn a_move_into_its_own_subtree_reads_no_higher_than_the_moved_directory() {
        // mv /10/11 /10/…/29/in: the walk stops at 11 (EINVAL), and the
        // target's walk never runs.
        let p = chain(20);
        let r = Rename {
            old_parent: s(10),
            new_parent: s(29),
            src: dir(11),
            target: dir(70),
            noreplace: false,
            exchange: false,
        };
        let Plan::Reads(reads) = rename_reads(&r, knowing(&p)) else {
            panic!("every parent is known");
        };
        let mut want = vec![s(10), s(29), s(11)];
        want.extend((12..29).rev().map(s));
        assert_eq!(reads, want);
    }

    #[test]
    fn a_directory_replaced_walks_the_old_parents_chain() {
        // mv /10/…/19/x /60/t (t an empty directory): the new parent's
        // walk reads nothing more (60 is below `/`); the target's walks
        // 19 … 10.
        let p = chain(10);
        let r = Rename {
            old_parent: s(19),
            new_parent: s(60),
            src: dir(80),
            target: dir(81),
            noreplace: false,
            exchange: false,
        };
        let Plan::Reads(reads) = rename_reads(&r, knowing(&p)) else {
            panic!("every parent is known");
        };
        let mut want = vec![s(19), s(60), s(80), s(81)];
        want.extend((10..19).rev().map(s));
        assert_eq!(reads, want);
        // A file replaced: no second walk.
        let r = Rename {
            target: file(81),
            ..r
        };
        assert_eq!(
            rename_reads(&r, knowing(&p)),
            Plan::Reads(vec![s(19), s(60), s(80), s(81)])
        );
    }

    #[test]
    fn what_the_engine_refuses_first_reads_nothing_more() {
        let p = chain(20);
        // No source: ENOENT once both parents are read.
        let r = Rename {
            src: None,
            ..deep_move()
        };
        assert_eq!(
            rename_reads(&r, knowing(&p)),
            Plan::Reads(vec![Soid::ROOT, s(29)])
        );
        // NOREPLACE onto a name that exists: EEXIST before the walk.
        let r = Rename {
            noreplace: true,
            target: file(70),
            ..deep_move()
        };
        assert_eq!(
            rename_reads(&r, knowing(&p)),
            Plan::Reads(vec![Soid::ROOT, s(29), s(60)])
        );
        // EXCHANGE with nothing: ENOENT before the walk.
        let r = Rename {
            exchange: true,
            ..deep_move()
        };
        assert_eq!(
            rename_reads(&r, knowing(&p)),
            Plan::Reads(vec![Soid::ROOT, s(29), s(60)])
        );
        // Both flags: EINVAL first.
        let r = Rename {
            exchange: true,
            noreplace: true,
            ..deep_move()
        };
        assert_eq!(rename_reads(&r, knowing(&p)), Plan::Reads(vec![]));
    }

    #[test]
    fn a_missing_directory_ends_the_walk_and_a_cycle_is_bounded() {
        let mut p = chain(20);
        p.remove(&s(15));
        let missing = |d: Soid| {
            if d == s(15) {
                Parent::Missing
            } else {
                knowing(&p)(d)
            }
        };
        let Plan::Reads(reads) = rename_reads(&deep_move(), missing) else {
            panic!("every parent is known");
        };
        assert_eq!(reads.last(), Some(&s(15)));
        assert!(!reads.contains(&s(14)));
        // 10's parent 29: a damaged cycle. Each directory once, and an
        // end.
        let mut cyclic = chain(20);
        cyclic.insert(s(10), s(29));
        let Plan::Reads(reads) = rename_reads(&deep_move(), knowing(&cyclic)) else {
            panic!("every parent is known");
        };
        assert_eq!(reads.len(), 22);
    }

    #[test]
    fn only_tables_not_here_and_not_asked_for_are_borrowed_within_the_room() {
        let reads: Vec<Soid> = (1..=6).map(s).collect();
        let here = |x: Soid| x == s(2) || x == s(5);
        assert_eq!(
            to_borrow(&[s(3)], &reads, here, 100),
            vec![s(1), s(4), s(6)]
        );
        assert_eq!(to_borrow(&[s(3)], &reads, here, 2), vec![s(1), s(4)]);
        assert_eq!(to_borrow(&[], &[s(7), s(7)], |_| false, 9), vec![s(7)]);
    }
}
