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
use std::io::Write;

/// Where the entries that print go.
pub(super) trait Sink {
    fn needs_link(&self) -> bool;
    /// `%Y` is used.
    fn needs_target(&self) -> bool {
        false
    }
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

    fn action(&mut self, a: &Action, x: &printf::Facts<'_>, hit: &SearchHit, now: Nanos) {
        let mut buf = Vec::new();
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
            match a {
                Action::Print => {
                    buf.extend_from_slice(x.path);
                    buf.push(b'\n');
                }
                Action::Print0 => {
                    buf.extend_from_slice(x.path);
                    buf.push(0);
                }
                Action::Printf(f) => printf::render(f, x, &mut buf),
                Action::Ls => {
                    buf.extend(printf::ls_line(x, now));
                    buf.push(b'\n');
                }
                Action::Prune | Action::Exec(_) | Action::Delete | Action::Quit => {}
            }
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
    }
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

    fn action(&mut self, a: &Action, _: &printf::Facts<'_>, hit: &SearchHit, _: Nanos) {
        if a.prints() && !self.counted {
            self.counted = true;
            self.agg.add(self.by, hit);
        }
    }

    fn end_entry(&mut self) {
        self.counted = false;
    }
}

pub(super) fn needs_target(tree: &Tree) -> bool {
    let mut yes = false;
    tree.for_each_leaf(&mut |n| {
        if let Node::Action(Action::Printf(f)) = n {
            yes |= f.needs_target();
        }
    });
    yes
}

pub(super) fn needs_link(tree: &Tree) -> bool {
    let mut yes = false;
    tree.for_each_leaf(&mut |n| {
        if let Node::Action(Action::Ls) = n {
            yes = true;
        }
        if let Node::Action(Action::Printf(f)) = n {
            yes |= f.needs_link();
        }
    });
    yes
}
