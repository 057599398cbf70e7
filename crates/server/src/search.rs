//! Running a [`SearchSpec`] on the engine: batching, sorting, counting,
//! aggregation and cancellation. Shared by the server's `Search` RPC and
//! the CLI's embedded engine, so both answer the same query the same way.
//!
//! Invariants:
//! - [`execute`] is synchronous and may take long: callers run it on a
//!   blocking thread (`tokio::task::spawn_blocking`), never on a runtime
//!   worker.
//! - It stops at the next hit once `cancelled()` says so or `emit` returns
//!   `Break` (the receiver is gone): a dropped client costs at most one
//!   more table visit, not the rest of the search.
//! - Hits are handed to `emit` in batches of `spec.batch()` (the last one
//!   may be shorter); with `count_only` or `group_by` no hit is emitted.

use sextant_engine::search::{Aggregation, Scope, SearchHit, SearchStats};
use sextant_engine::Engine;
use sextant_proto::search::{SearchDone, SearchScope, SearchSpec, TopN};
use sextant_types::{Credentials, FsError};
use std::ops::ControlFlow;

/// Runs `spec` as `cred`; see the module doc.
pub fn execute(
    engine: &Engine,
    cred: &Credentials,
    spec: &SearchSpec,
    cancelled: impl Fn() -> bool,
    mut emit: impl FnMut(Vec<SearchHit>) -> ControlFlow<()>,
) -> Result<SearchDone, FsError> {
    let scope = match &spec.scope {
        SearchScope::Path(p) => Scope::Path(p),
        SearchScope::Soid(s) => Scope::Soid(*s),
    };
    let limit = spec.engine_limit();
    let mut done = SearchDone::default();
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
    if let Some(by) = spec.group_by {
        let mut agg = Aggregation::default();
        stats = engine.search(cred, scope, &spec.expr, limit, |h| {
            if cancelled() {
                return stop(&mut stopped);
            }
            agg.add(by, &h);
            ControlFlow::Continue(())
        })?;
        done.count = agg.total.count;
        done.total_size = agg.total.size;
        done.groups = agg.groups.into_iter().collect();
    } else if spec.count_only {
        stats = engine.search(cred, scope, &spec.expr, limit, |h| {
            if cancelled() {
                return stop(&mut stopped);
            }
            count(&h, &mut done);
            ControlFlow::Continue(())
        })?;
    } else if let Some(sort) = spec.sort {
        let mut top = TopN::new(sort, limit);
        // The engine's limit would cut before sorting: collect all.
        stats = engine.search(cred, scope, &spec.expr, usize::MAX, |h| {
            if cancelled() {
                return stop(&mut stopped);
            }
            top.push(h);
            ControlFlow::Continue(())
        })?;
        if !stopped {
            let hits = top.finish();
            for chunk in hits.chunks(spec.batch()) {
                chunk.iter().for_each(|h| count(h, &mut done));
                if cancelled() || emit(chunk.to_vec()).is_break() {
                    stopped = true;
                    break;
                }
            }
        }
    } else {
        let size = spec.batch();
        let mut batch = Vec::with_capacity(size);
        stats = engine.search(cred, scope, &spec.expr, limit, |h| {
            if cancelled() {
                return stop(&mut stopped);
            }
            count(&h, &mut done);
            batch.push(h);
            if batch.len() >= size {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(size));
                if emit(full).is_break() {
                    return stop(&mut stopped);
                }
            }
            ControlFlow::Continue(())
        })?;
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
    Ok(done)
}
