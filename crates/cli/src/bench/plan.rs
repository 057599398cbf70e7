//! What a `sextant bench` run does, decided before anything runs: which
//! phases in which order, which of them are reported, and the names of the
//! directories and items every worker touches. Pure: no I/O.

use anyhow::{bail, Result};
use std::fmt;

/// Files (mdtest -F) or directories (mdtest -D).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// One operation measured over every item (readdir: over every worker's
/// directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Create,
    Stat,
    Lookup,
    Readdir,
    Remove,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Create, Op::Stat, Op::Lookup, Op::Readdir, Op::Remove];

    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Stat => "stat",
            Op::Lookup => "lookup",
            Op::Readdir => "readdir",
            Op::Remove => "remove",
        }
    }

    fn parse(s: &str) -> Result<Op> {
        Op::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| anyhow::anyhow!("unknown phase {s:?} (known: {})", Op::names()))
    }

    fn names() -> String {
        Op::ALL.map(Op::name).join(", ")
    }
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
        }
    }
}

/// One step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    pub kind: Kind,
    pub op: Op,
    /// Timed and reported. Create and remove always run (the items must
    /// exist for the other phases, and nothing is left behind); when not
    /// asked for they run untimed.
    pub reported: bool,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.kind.name(), self.op.name())
    }
}

impl Phase {
    /// Parses what [`Display`](fmt::Display) prints (`file-create`), as sent
    /// to worker processes.
    pub fn parse(s: &str) -> Result<Phase> {
        let Some((k, o)) = s.split_once('-') else {
            bail!("bad phase {s:?}");
        };
        let kind = match k {
            "file" => Kind::File,
            "dir" => Kind::Dir,
            _ => bail!("bad phase {s:?}"),
        };
        Ok(Phase {
            kind,
            op: Op::parse(o)?,
            reported: true,
        })
    }
}

/// Parses `--phases` (comma-separated op names; empty = all).
pub fn parse_ops(list: &str) -> Result<Vec<Op>> {
    let mut ops: Vec<Op> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Op::parse)
        .collect::<Result<_>>()?;
    if ops.is_empty() {
        ops = Op::ALL.to_vec();
    }
    ops.sort();
    ops.dedup();
    Ok(ops)
}

/// The phases of a run in order: for each kind (files, then directories)
/// create, the selected read phases, remove.
pub fn phases(kinds: &[Kind], ops: &[Op]) -> Vec<Phase> {
    let mut out = Vec::new();
    for &kind in kinds {
        for op in Op::ALL {
            let reported = ops.contains(&op);
            if reported || matches!(op, Op::Create | Op::Remove) {
                out.push(Phase { kind, op, reported });
            }
        }
    }
    out
}

/// Where worker `task` (numbered over all processes) works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// All workers share one directory.
    pub shared: bool,
    /// Items each worker creates, stats and removes.
    pub items: usize,
}

impl Layout {
    /// The directory of worker `task`, relative to the run's root.
    pub fn dir_of(&self, task: usize) -> String {
        if self.shared {
            "shared".to_string()
        } else {
            format!("t{task}")
        }
    }

    /// Every directory the run needs under its root (made untimed before
    /// the first phase, removed after the last).
    pub fn dirs(&self, tasks: usize) -> Vec<String> {
        if self.shared {
            vec![self.dir_of(0)]
        } else {
            (0..tasks).map(|t| self.dir_of(t)).collect()
        }
    }

    /// The name of item `i` of worker `task` (unique within a shared
    /// directory too), like mdtest's `file.mdtest.<rank>.<i>`.
    pub fn item(&self, kind: Kind, task: usize, i: usize) -> String {
        let prefix = match kind {
            Kind::File => 'f',
            Kind::Dir => 'd',
        };
        format!("{prefix}.{task}.{i}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_and_remove_always_run() {
        let p = phases(&[Kind::File], &[Op::Stat]);
        let names: Vec<_> = p.iter().map(|p| (p.to_string(), p.reported)).collect();
        assert_eq!(
            names,
            [
                ("file-create".to_string(), false),
                ("file-stat".to_string(), true),
                ("file-remove".to_string(), false)
            ]
        );
    }

    #[test]
    fn all_phases_files_then_dirs_in_order() {
        let p = phases(&[Kind::File, Kind::Dir], &parse_ops("").unwrap());
        let names: Vec<_> = p.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "file-create",
                "file-stat",
                "file-lookup",
                "file-readdir",
                "file-remove",
                "dir-create",
                "dir-stat",
                "dir-lookup",
                "dir-readdir",
                "dir-remove"
            ]
        );
        assert!(p.iter().all(|p| p.reported));
    }

    #[test]
    fn ops_parse_sorted_deduplicated_and_checked() {
        assert_eq!(
            parse_ops("remove, stat,create,stat").unwrap(),
            [Op::Create, Op::Stat, Op::Remove]
        );
        let e = parse_ops("create,frob").unwrap_err().to_string();
        assert!(e.contains("frob") && e.contains("readdir"), "{e}");
    }

    #[test]
    fn phase_names_round_trip() {
        for p in phases(&[Kind::File, Kind::Dir], &Op::ALL) {
            assert_eq!(Phase::parse(&p.to_string()).unwrap(), p);
        }
        assert!(Phase::parse("file").is_err());
        assert!(Phase::parse("socket-create").is_err());
    }

    #[test]
    fn unique_and_shared_layouts() {
        let unique = Layout {
            shared: false,
            items: 3,
        };
        assert_eq!(unique.dirs(3), ["t0", "t1", "t2"]);
        assert_eq!(unique.dir_of(2), "t2");
        let shared = Layout {
            shared: true,
            items: 3,
        };
        assert_eq!(shared.dirs(3), ["shared"]);
        assert_eq!(shared.dir_of(2), "shared");
        // Names stay unique across workers in one directory.
        let mut all: Vec<String> = (0..4)
            .flat_map(|t| (0..12).map(move |i| shared.item(Kind::File, t, i)))
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_ne!(shared.item(Kind::File, 0, 0), shared.item(Kind::Dir, 0, 0));
    }
}
