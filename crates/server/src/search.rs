//! Running a [`SearchSpec`] on the engine: batching, sorting, counting,
//! aggregation and cancellation. Shared by the server's `Search` RPC and
//! the CLI's embedded engine, so both answer the same query the same way.
//!
//! Invariants:
//! - [`execute`] is synchronous and may take long: callers run it on a
//!   blocking thread (`tokio::task::spawn_blocking`), never on a runtime
//!   worker.
//! - Tables are searched on every core ([`SearchOptions::default`]);
//!   counts and aggregations build no paths ([`Engine::search_tally`]).
//! - It stops before the next table (in every worker) and at the next hit
//!   once `cancelled()` says so, or when `emit` returns `Break` (the
//!   receiver is gone): a dropped client costs at most one more table
//!   visit per worker, not the rest of the search.
//! - Hits are handed to `emit` in batches of at most `spec.batch()` hits
//!   and about [`MAX_BATCH_BYTES`] (so each fits in one wire message); with
//!   `count_only` or `group_by` no hit is emitted.

use sextant_engine::search::{
    Aggregation, ForeignDirs, Scope, SearchHit, SearchOptions, SearchStats, Spread,
};
use sextant_engine::Engine;
use sextant_proto::search::{SearchDone, SearchScope, SearchSpec, TopN, MAX_BATCH_BYTES};
use sextant_types::{Credentials, FsError};
use std::ops::ControlFlow;

/// Runs `spec` as `cred`; see the module doc. With `spec.ranges` (a
/// cluster whose namespace is spread), only those ranges are searched,
/// other servers' directories are read through `foreign`, and the ranges
/// held elsewhere come back in `not_held`; `remembering`: the caller
/// vouches for the directory paths remembered across searches
/// ([`Spread::remembering`]).
pub fn execute(
    engine: &Engine,
    cred: &Credentials,
    spec: &SearchSpec,
    foreign: &(dyn ForeignDirs + Sync),
    remembering: bool,
    cancelled: impl Fn() -> bool + Sync,
    mut emit: impl FnMut(Vec<SearchHit>) -> ControlFlow<()>,
) -> Result<SearchDone, FsError> {
    let scope = match &spec.scope {
        SearchScope::Path(p) => Scope::Path(p),
        SearchScope::Soid(s) => Scope::Soid(*s),
    };
    let limit = spec.engine_limit();
    let spread = (!spec.ranges.is_empty()).then(|| {
        let sp = Spread::new(spec.ranges.clone(), foreign);
        if remembering {
            sp.remembering()
        } else {
            sp
        }
    });
    // Tables are visited on every core; `cancelled` is asked between tables
    // (by every worker) as well as at every hit below.
    let opts = SearchOptions {
        limit,
        stop: Some(&cancelled),
        spread: spread.as_ref(),
        ..SearchOptions::default()
    };
    let mut done = SearchDone::default();
    let fill = |done: &mut SearchDone, agg: Aggregation| {
        done.count = agg.total.count;
        done.total_size = agg.total.size;
        done.groups = agg.groups.into_iter().collect();
    };
    let count = |h: &SearchHit, done: &mut SearchDone| {
        done.count += 1;
        done.total_size = done.total_size.saturating_add(h.attr.size);
    };
    let stop = |stopped: &mut bool| {
        *stopped = true;
        ControlFlow::Break(())
    };
    let mut stopped = false;
    let stats: SearchStats;
    let tally_by = match (spec.group_by, spec.count_only) {
        (Some(by), _) => Some(Some(by)),
        (None, true) => Some(None),
        (None, false) => None,
    };
    let summarized = match tally_by {
        // Root's whole-namespace totals (grouped, or the total only): from
        // the maintained summaries (of every table held here: not for a
        // spread search, which adds up its ranges only).
        Some(by) if limit == usize::MAX && spread.is_none() => {
            engine.aggregate_from_summaries(cred, scope, &spec.expr, by)?
        }
        _ => None,
    };
    if let Some(agg) = summarized {
        stats = SearchStats::default();
        fill(&mut done, agg);
    } else if let (Some(by), usize::MAX) = (tally_by, limit) {
        // Counted and grouped without building paths (unless the
        // expression or the grouping needs them).
        let (agg, s) = engine.search_tally(cred, scope, &spec.expr, by, &opts)?;
        stats = s;
        stopped = cancelled();
        fill(&mut done, agg);
    } else if let Some(by) = tally_by {
        // The first `limit` matches only: one cursor, hit by hit.
        let mut agg = Aggregation::default();
        stats = engine.search_with(cred, scope, &spec.expr, &opts, |h| {
            if cancelled() {
                return stop(&mut stopped);
            }
            agg.add_hit(by, h);
            ControlFlow::Continue(())
        })?;
        fill(&mut done, agg);
    } else if let Some(sort) = spec.sort {
        let mut top = TopN::new(sort, limit);
        // The engine's limit would cut before sorting: collect all.
        let all = SearchOptions {
            limit: usize::MAX,
            ..opts
        };
        stats = engine.search_with(cred, scope, &spec.expr, &all, |h| {
            if cancelled() {
                return stop(&mut stopped);
            }
            top.push(h.to_hit());
            ControlFlow::Continue(())
        })?;
        if !stopped {
            let mut batch = Batch::new(spec.batch());
            for h in top.finish() {
                count(&h, &mut done);
                if let Some(full) = batch.push(h) {
                    if cancelled() || emit(full).is_break() {
                        stopped = true;
                        break;
                    }
                }
            }
            let rest = batch.take();
            if !stopped && !rest.is_empty() && emit(rest).is_break() {
                stopped = true;
            }
        }
    } else {
        let mut batch = Batch::new(spec.batch());
        stats = engine.search_with(cred, scope, &spec.expr, &opts, |h| {
            if cancelled() {
                return stop(&mut stopped);
            }
            let h = h.to_hit();
            count(&h, &mut done);
            if let Some(full) = batch.push(h) {
                if emit(full).is_break() {
                    return stop(&mut stopped);
                }
            }
            ControlFlow::Continue(())
        })?;
        let batch = batch.take();
        if !stopped && !batch.is_empty() && emit(batch).is_break() {
            stopped = true;
        }
    }
    if stopped {
        tracing::debug!("search cancelled");
    }
    done.tables = stats.tables as u64;
    done.tables_pruned = stats.tables_pruned as u64;
    done.candidates = stats.candidates as u64;
    done.tables_out_of_scope = stats.tables_out_of_scope as u64;
    done.tables_summarized = stats.tables_summarized as u64;
    if let Some(sp) = &spread {
        done.not_held = sp.take_not_held();
    }
    Ok(done)
}

/// Approximate encoded size of a hit (path plus attributes and framing).
pub fn hit_bytes(h: &SearchHit) -> usize {
    h.path.len() + 128
}

/// Hits gathered until the batch is full by count or by bytes.
struct Batch {
    size: usize,
    hits: Vec<SearchHit>,
    bytes: usize,
}

impl Batch {
    fn new(size: usize) -> Batch {
        Batch {
            size,
            hits: Vec::new(),
            bytes: 0,
        }
    }

    /// Adds a hit; returns the batch when it is full.
    fn push(&mut self, h: SearchHit) -> Option<Vec<SearchHit>> {
        self.bytes += hit_bytes(&h);
        self.hits.push(h);
        (self.hits.len() >= self.size || self.bytes >= MAX_BATCH_BYTES).then(|| self.take())
    }

    fn take(&mut self) -> Vec<SearchHit> {
        self.bytes = 0;
        std::mem::take(&mut self.hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_engine::search::{Expr, GroupBy};
    use sextant_engine::EngineConfig;
    use sextant_proto::search::{SortKey, SortSpec};
    use sextant_types::Soid;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn engine_with_files(n: usize) -> (tempfile::TempDir, Engine) {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open_dir(dir.path(), EngineConfig::default()).unwrap();
        let root = Credentials {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        let d = e.mkdir(&root, Soid::ROOT, b"d", 0o755).unwrap().value;
        for i in 0..n {
            // Visible to searches at once; durability does not matter here.
            let _ = e
                .create(&root, d.soid, format!("f{i:05}").as_bytes(), 0o644, true)
                .unwrap();
        }
        (dir, e)
    }

    fn root() -> Credentials {
        Credentials {
            uid: 0,
            gid: 0,
            groups: vec![],
        }
    }

    fn spec(batch: u32) -> SearchSpec {
        let mut s = SearchSpec::new(SearchScope::Path(b"/d".to_vec()), Expr::True);
        s.batch_size = batch;
        s
    }

    #[test]
    fn batches_and_totals() {
        let (_d, e) = engine_with_files(1000);
        let mut sizes = Vec::new();
        let done = execute(
            &e,
            &root(),
            &spec(64),
            &crate::peers::NoPeers,
            false,
            || false,
            |b| {
                sizes.push(b.len());
                ControlFlow::Continue(())
            },
        )
        .unwrap();
        assert_eq!(done.count, 1001);
        assert_eq!(sizes.iter().sum::<usize>(), 1001);
        assert!(sizes.iter().all(|s| *s <= 64));
        // Sorted with a limit: exactly the first names, in order.
        let mut s = spec(0);
        s.sort = Some(SortSpec {
            key: SortKey::Name,
            descending: false,
        });
        s.limit = 3;
        let mut hits = Vec::new();
        execute(
            &e,
            &root(),
            &s,
            &crate::peers::NoPeers,
            false,
            || false,
            |b| {
                hits.extend(b);
                ControlFlow::Continue(())
            },
        )
        .unwrap();
        let names: Vec<&[u8]> = hits.iter().map(|h| h.name()).collect();
        assert_eq!(names, [b"d".as_slice(), b"f00000", b"f00001"]);
        // Aggregation and counting emit nothing.
        let mut s = spec(0);
        s.group_by = Some(GroupBy::Type);
        let done = execute(
            &e,
            &root(),
            &s,
            &crate::peers::NoPeers,
            false,
            || false,
            |_| panic!("no hits"),
        )
        .unwrap();
        assert_eq!((done.count, done.groups.len()), (1001, 2));
        let mut s = spec(0);
        s.count_only = true;
        let done = execute(
            &e,
            &root(),
            &s,
            &crate::peers::NoPeers,
            false,
            || false,
            |_| panic!("no hits"),
        )
        .unwrap();
        assert_eq!(done.count, 1001);
    }

    /// Ungrouped totals (`count_only`: what `du` and `stats` without
    /// `--by` ask) take the path totals by owner take — root's whole
    /// namespace from the kept sum of the summaries (no table visited), a
    /// subtree's whole tables from their summaries — and equal them and a
    /// grouping by directory (which visits every entry).
    #[test]
    fn ungrouped_totals_take_the_summaries_like_totals_by_owner() {
        use sextant_engine::search::Pred;
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig {
            table_inode_limit: 64,
            table_dir_limit: 8,
            flush_interval: None,
            ..EngineConfig::default()
        };
        let e = Engine::open_dir(dir.path(), config).unwrap();
        let d = e.mkdir(&root(), Soid::ROOT, b"d", 0o755).unwrap().value;
        for i in 0..20u64 {
            let sub = e
                .mkdir(&root(), d.soid, format!("s{i}").as_bytes(), 0o755)
                .unwrap()
                .value;
            for j in 0..40u64 {
                let f = e
                    .create(&root(), sub.soid, format!("f{j}").as_bytes(), 0o644, true)
                    .unwrap()
                    .value;
                let size = sextant_types::SetAttr {
                    size: Some(i * 1000 + j),
                    ..Default::default()
                };
                let _ = e.setattr(&root(), f.soid, &size).unwrap();
            }
        }
        assert!(e.statfs().tables > 4, "{} tables", e.statfs().tables);
        for scope in [&b"/"[..], b"/d"] {
            // What the CLI sends: the starting point is counted apart.
            let below = Expr::pred(Pred::Depth {
                min: 1,
                max: u32::MAX,
            });
            let run = |group_by, count_only| {
                let mut s = SearchSpec::new(SearchScope::Path(scope.to_vec()), below.clone());
                s.group_by = group_by;
                s.count_only = count_only;
                execute(
                    &e,
                    &root(),
                    &s,
                    &crate::peers::NoPeers,
                    false,
                    || false,
                    |_| panic!("no hits"),
                )
                .unwrap()
            };
            let total = run(None, true);
            let by_owner = run(Some(GroupBy::Uid), false);
            let by_dir = run(Some(GroupBy::Directory), false);
            let what = String::from_utf8_lossy(scope);
            assert_eq!(total.count, 20 * 41 + u64::from(scope == b"/"), "{what}");
            for other in [&by_owner, &by_dir] {
                assert_eq!(
                    (total.count, total.total_size),
                    (other.count, other.total_size),
                    "{what}"
                );
            }
            assert!(total.groups.is_empty());
            assert_eq!(
                (total.tables, total.tables_summarized),
                (by_owner.tables, by_owner.tables_summarized),
                "{what}: the path totals by owner take"
            );
            assert_eq!(by_dir.tables_summarized, 0, "{what}");
            if scope == b"/" {
                assert_eq!(total.tables, 0, "from the kept sum");
                assert!(by_dir.tables > 0);
            } else {
                assert!(total.tables_summarized > 0, "{what}");
            }
        }
    }

    #[test]
    fn a_gone_reader_or_a_cancel_stops_the_search() {
        let (_d, e) = engine_with_files(1000);
        // The receiver is gone at the first batch: nothing more is done.
        let calls = Cell::new(0);
        let done = execute(
            &e,
            &root(),
            &spec(10),
            &crate::peers::NoPeers,
            false,
            || false,
            |_| {
                calls.set(calls.get() + 1);
                ControlFlow::Break(())
            },
        )
        .unwrap();
        assert_eq!((calls.get(), done.count), (1, 10));
        // Cancelled after 25 hits.
        let seen = AtomicUsize::new(0);
        let done = execute(
            &e,
            &root(),
            &spec(10),
            &crate::peers::NoPeers,
            false,
            || seen.load(Ordering::Relaxed) >= 25,
            |b| {
                seen.fetch_add(b.len(), Ordering::Relaxed);
                ControlFlow::Continue(())
            },
        )
        .unwrap();
        assert!(done.count <= 30, "{}", done.count);
        // Aggregations and counts stop between tables: cancelled from the
        // start, only the scope root (reported before any table) counts.
        for (group_by, count_only) in [(Some(GroupBy::Uid), false), (None, true)] {
            let mut s = spec(0);
            s.group_by = group_by;
            s.count_only = count_only;
            let done = execute(
                &e,
                &root(),
                &s,
                &crate::peers::NoPeers,
                false,
                || true,
                |_| ControlFlow::Continue(()),
            )
            .unwrap();
            assert!(done.count <= 1, "{group_by:?}: {}", done.count);
            assert_eq!(done.tables, 0);
        }
    }
}
