//! Where the entries find prints go: [`Output`] writes what each action
//! prints (or, with `--json`, one object per entry), [`Counter`] counts
//! them for `sextant stats`. Actions reach a sink in the order find runs
//! them on an entry; [`Sink::end_entry`] follows every entry.

use super::parse::{Action, Node};
use super::plan::Tree;
use super::printf;
use crate::format::json_entry;
use sextant_engine::search::{Aggregation, GroupBy, SearchHit};
use sextant_types::Nanos;
use std::collections::HashMap;
use std::io::Write;

/// Where the entries that print go.
pub(super) trait Sink {
    fn needs_link(&self) -> bool;
    /// `%Y` is used.
    fn needs_target(&self) -> bool {
        false
    }
    /// Does performing `a` need what only `stat` tells (beside the path,
    /// and when `typed` the type and inode number)? Then it cannot be
    /// performed on an entry known from a listing alone
    /// ([`super::plan::Blind`]).
    fn needs_stat(&self, a: &Action, typed: bool) -> bool;
    fn action(&mut self, a: &Action, facts: &printf::Facts<'_>, hit: &SearchHit, now: Nanos);
    /// After each entry.
    fn end_entry(&mut self) {}
    fn flush(&mut self) {}
    /// Nothing more can be written.
    fn stopped(&self) -> bool {
        false
    }
}

/// `sextant find`'s output.
pub(super) struct Output {
    pub(super) out: std::io::BufWriter<std::io::Stdout>,
    /// The files of `-fprint` and its kin, by name as typed.
    pub(super) files: HashMap<String, std::io::BufWriter<std::fs::File>>,
    /// Writing a file failed (reported once each; exit status 1).
    pub(super) file_failed: bool,
    pub(super) json: bool,
    pub(super) needs_link: bool,
    pub(super) needs_target: bool,
    /// --json: this entry was already printed.
    pub(super) printed: bool,
    /// Writing failed (e.g. a closed pipe): stop quietly.
    pub(super) broken: bool,
}

impl Sink for Output {
    fn needs_link(&self) -> bool {
        self.needs_link
    }

    fn needs_target(&self) -> bool {
        self.needs_target
    }

    fn needs_stat(&self, a: &Action, typed: bool) -> bool {
        // --json prints the attributes of whatever prints.
        (self.json && a.prints()) || action_needs_stat(a, typed)
    }

    fn action(&mut self, a: &Action, x: &printf::Facts<'_>, hit: &SearchHit, now: Nanos) {
        let mut buf = Vec::new();
        if let Action::ToFile { file, what } = a {
            render(what, x, now, &mut buf);
            if let Some(w) = self.files.get_mut(file) {
                if let Err(e) = w.write_all(&buf) {
                    self.files.remove(file);
                    super::report(format_args!("'{file}': {}", super::describe_io(&e)));
                    self.file_failed = true;
                }
            }
            return;
        }
        if self.json {
            if !a.prints() || self.printed {
                return;
            }
            self.printed = true;
            if let Ok(s) = serde_json::to_string(&json_entry(x.path, &hit.attr)) {
                buf.extend_from_slice(s.as_bytes());
                buf.push(b'\n');
            }
        } else {
            render(a, x, now, &mut buf);
        }
        if !self.broken && self.out.write_all(&buf).is_err() {
            self.broken = true;
        }
    }

    fn end_entry(&mut self) {
        self.printed = false;
    }

    fn stopped(&self) -> bool {
        self.broken
    }

    fn flush(&mut self) {
        if !self.broken && self.out.flush().is_err() {
            self.broken = true;
        }
        let mut failed = Vec::new();
        for (name, w) in &mut self.files {
            if let Err(e) = w.flush() {
                super::report(format_args!("'{name}': {}", super::describe_io(&e)));
                failed.push(name.clone());
            }
        }
        for name in failed {
            self.files.remove(&name);
            self.file_failed = true;
        }
    }
}

/// What a printing action writes for an entry.
fn render(a: &Action, x: &printf::Facts<'_>, now: Nanos, buf: &mut Vec<u8>) {
    match a {
        Action::Print => {
            buf.extend_from_slice(x.path);
            buf.push(b'\n');
        }
        Action::Print0 => {
            buf.extend_from_slice(x.path);
            buf.push(0);
        }
        Action::Printf(f) => printf::render(f, x, buf),
        Action::Ls => {
            buf.extend(printf::ls_line(x, now));
            buf.push(b'\n');
        }
        Action::Prune | Action::Exec(_) | Action::Delete | Action::Quit | Action::ToFile { .. } => {
        }
    }
}

/// Creates (or truncates) the file of every `-fprint` and its kin, as
/// find does before it starts; `/dev/stdout` and `/dev/stderr` are opened
/// like any file. The first that cannot be made is the error.
pub(super) fn open_files(
    tree: &Tree,
) -> Result<HashMap<String, std::io::BufWriter<std::fs::File>>, String> {
    let mut names = Vec::new();
    tree.for_each_leaf(&mut |n| {
        if let Node::Action(Action::ToFile { file, .. }) = n {
            names.push(file.clone());
        }
    });
    let mut files = HashMap::new();
    for name in names {
        if files.contains_key(&name) {
            continue;
        }
        let f = std::fs::File::create(&name)
            .map_err(|e| format!("'{name}': {}", super::describe_io(&e)))?;
        files.insert(name, std::io::BufWriter::new(f));
    }
    Ok(files)
}

/// `sextant stats`' client-side aggregation (when the server cannot
/// aggregate exactly).
pub(super) struct Counter {
    pub(super) by: GroupBy,
    pub(super) agg: Aggregation,
    pub(super) counted: bool,
}

impl Sink for Counter {
    fn needs_link(&self) -> bool {
        false
    }

    /// Counts sizes and owners.
    fn needs_stat(&self, a: &Action, _: bool) -> bool {
        a.prints()
    }

    fn action(&mut self, a: &Action, _: &printf::Facts<'_>, hit: &SearchHit, _: Nanos) {
        if a.prints() && !self.counted {
            self.counted = true;
            self.agg.add(self.by, hit.as_ref());
        }
    }

    fn end_entry(&mut self) {
        self.counted = false;
    }
}

/// Does `a` (writing to stdout or a file) need `stat` (see
/// [`Sink::needs_stat`])? `-ls` does, and `-printf` with anything but
/// names, depth, and when `typed` the type and inode number.
fn action_needs_stat(a: &Action, typed: bool) -> bool {
    match inner(a) {
        Action::Ls => true,
        Action::Printf(f) => f.needs_stat(typed),
        _ => false,
    }
}

/// Does anything print an inode number (`%i`, `-ls`)?
pub(super) fn needs_inode(tree: &Tree) -> bool {
    let mut yes = false;
    tree.for_each_leaf(&mut |n| {
        if let Node::Action(a) = n {
            match inner(a) {
                Action::Ls => yes = true,
                Action::Printf(f) => yes |= f.needs_inode(),
                _ => {}
            }
        }
    });
    yes
}

pub(super) fn needs_target(tree: &Tree) -> bool {
    let mut yes = false;
    tree.for_each_leaf(&mut |n| {
        if let Node::Action(a) = n {
            if let Action::Printf(f) = inner(a) {
                yes |= f.needs_target();
            }
        }
    });
    yes
}

pub(super) fn needs_link(tree: &Tree) -> bool {
    let mut yes = false;
    tree.for_each_leaf(&mut |n| {
        if let Node::Action(a) = n {
            match inner(a) {
                Action::Ls => yes = true,
                Action::Printf(f) => yes |= f.needs_link(),
                _ => {}
            }
        }
    });
    yes
}

/// The printing action `a` stands for (itself, or what it writes to a
/// file).
fn inner(a: &Action) -> &Action {
    match a {
        Action::ToFile { what, .. } => what,
        other => other,
    }
}
