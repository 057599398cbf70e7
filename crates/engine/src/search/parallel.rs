//! Parallel execution of one search: the caller's thread and worker
//! threads visit the tables in SOID order, each with its own [`Search`]
//! (memo and stats), and the caller's thread reports the hits in table
//! order.
//!
//! - Work items are the SOID ranges of the tables as the table map was when
//!   the search started ([`work_items`]); each worker visits the rows of its
//!   item only ([`visit_range`]), so a table split or merged meanwhile is
//!   neither missed nor reported twice.
//! - Threads claim items in order from one counter and leave each outcome
//!   in a shared map (no message, no wake-up per item: most items of a
//!   selective search are pruned in microseconds). The caller's thread
//!   reports finished items in order between its own items, and waits
//!   only when nothing is left to claim. While finished items hold more
//!   than [`SearchOptions::buffered_hits`] hits, a worker starts no item but the
//!   first unreported one (whose thread never waits, so the caller's
//!   thread can always drain), so the hits waiting to be reported stay
//!   bounded however slow the caller's `visit` is; empty items (pruned
//!   tables, tallies) never make anyone wait.
//! - Hits reach `visit` in item order and, within an item, in SOID order:
//!   the same order as the sequential cursor. Counts and tallies are
//!   summed at the end.
//! - Stopping (`visit` breaks, an error, or [`SearchOptions::stop`]) sets
//!   one flag that every thread reads before each table and while it
//!   waits.
//!
//! Workers start only once the search has run [`SearchOptions::spawn_after`]
//! on the caller's thread alone (and items are left to claim): a selective
//! search is over before a thread would have started.
//!
//! Each worker starts from a copy of the caller's memo as it is when the
//! worker starts (complete or not; the memo only ever gains directories
//! resolved by this search) and resolves further directories itself: two
//! workers may read the same directory once each, which costs a few reads
//! and keeps every lock short (no shared memo, no lock held across a
//! table visit).

use super::{
    report, visit_range, Aggregation, Hits, Job, Search, SearchOptions, SearchStats, Tallies, Visit,
};
use sextant_types::{FsError, Soid, SoidRange};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Threads per search at most (beyond that the table map's shared lock and
/// memory bandwidth, not cores, bound a search).
pub(crate) const MAX_THREADS: usize = 16;

/// The default of [`SearchOptions::buffered_hits`] (tens of MB at most).
pub(crate) const MAX_BUFFERED_HITS: usize = 1 << 16;

/// The default of [`SearchOptions::spawn_after`].
pub(crate) const SPAWN_AFTER: Duration = Duration::from_millis(2);

/// How often a waiting thread looks at the stop check again.
const STOP_POLL: Duration = Duration::from_millis(10);

/// The SOID range of each table whose first SOID is in `starts` (sorted,
/// from the table map): consecutive, disjoint, covering every SOID.
pub(crate) fn work_items(starts: &[Soid]) -> Vec<SoidRange> {
    let mut items = Vec::with_capacity(starts.len());
    let mut first = Soid::MIN;
    for &next in starts.iter().skip_while(|s| **s == Soid::MIN) {
        let Some(last) = next.checked_prev() else {
            continue;
        };
        if let Some(r) = SoidRange::new(first, last) {
            items.push(r);
            first = next;
        }
    }
    items.push(SoidRange::new(first, Soid::MAX).unwrap_or(SoidRange::ALL));
    items
}

/// What the workers and the caller's thread share.
struct Shared {
    /// The next item to claim.
    next: AtomicUsize,
    /// Set to stop every worker (an error, `visit` broke, a stop check).
    halt: AtomicBool,
    state: parking_lot::Mutex<Progress>,
    /// Signalled when an item is finished or reported.
    changed: parking_lot::Condvar,
}

/// Finished items not yet reported, the first item not reported, and the
/// hits the finished items hold.
#[derive(Default)]
struct Progress {
    finished: BTreeMap<usize, Result<Vec<Hits>, FsError>>,
    reported: usize,
    buffered: usize,
}

/// Runs `job` over `items` on `opts.threads` threads — the caller's and
/// `threads - 1` workers; see the module docs. `main`'s stats receive
/// everyone's counters; `lean` everyone's tallies.
pub(super) fn run(
    job: &Job<'_>,
    main: &mut Search<'_>,
    items: Vec<SoidRange>,
    opts: &SearchOptions<'_>,
    mut lean: Option<&mut Tallies>,
    visit: Visit<'_>,
) -> Result<(), FsError> {
    let threads = opts.threads.min(items.len()).max(1);
    let lean_by = lean.as_ref().map(|t| t.by);
    let shared = Shared {
        next: AtomicUsize::new(0),
        halt: AtomicBool::new(false),
        state: parking_lot::Mutex::new(Progress::default()),
        changed: parking_lot::Condvar::new(),
    };
    let halted = || shared.halt.load(Ordering::Relaxed) || opts.stopped();
    // Visits item `i` with `search`; records the outcome. False when the
    // item failed (the worker stops).
    let work = |i: usize, search: &mut Search<'_>, tallies: Option<&mut Tallies>| -> bool {
        let mut hits = Vec::new();
        let done = visit_range(
            job,
            search,
            items[i],
            tallies,
            usize::MAX,
            &halted,
            &mut |_, h| {
                if !h.is_empty() {
                    hits.push(h);
                }
                ControlFlow::Continue(())
            },
        );
        let ok = done.is_ok();
        let mut st = shared.state.lock();
        if ok {
            st.buffered += count(&hits);
        }
        st.finished.insert(i, done.map(|_| hits));
        if i == st.reported {
            shared.changed.notify_all();
        }
        ok
    };

    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        let mut workers = Vec::with_capacity(threads - 1);
        let (engine, cred, foreign) = (main.engine, main.cred, main.foreign);
        let dir_cache = main.dir_cache.clone();
        let spawn_workers = |workers: &mut Vec<_>, memo: &super::scope::Memo| {
            for _ in 1..threads {
                let mut search = Search {
                    engine,
                    cred,
                    memo: memo.clone(),
                    stats: SearchStats::default(),
                    dir_cache: dir_cache.clone(),
                    foreign,
                };
                let (shared, work, halted, items) = (&shared, &work, &halted, &items);
                workers.push(scope.spawn(move || {
                    let mut tallies = lean_by.map(Tallies::new);
                    while !halted() {
                        let i = shared.next.fetch_add(1, Ordering::Relaxed);
                        if i >= items.len() {
                            break;
                        }
                        {
                            let mut st = shared.state.lock();
                            // Never for the first unreported item: the caller's
                            // thread waits for it to drain the others.
                            while i > st.reported && st.buffered >= opts.buffered_hits && !halted()
                            {
                                shared.changed.wait_for(&mut st, STOP_POLL);
                            }
                        }
                        if halted() || !work(i, &mut search, tallies.as_mut()) {
                            break;
                        }
                    }
                    (search.stats, tallies.map(Tallies::finish))
                }));
            }
        };
        let mut spawned = threads <= 1;

        // The caller's thread reports finished items in order and, when
        // none is ready, visits the next unclaimed item itself.
        let mut result = Ok(());
        'report: loop {
            let ready = {
                let mut st = shared.state.lock();
                let mut ready = Vec::new();
                loop {
                    let next = st.reported;
                    let Some(done) = st.finished.remove(&next) else {
                        break;
                    };
                    st.reported = next + 1;
                    if let Ok(hits) = &done {
                        st.buffered -= count(hits);
                    }
                    ready.push(done);
                }
                if !ready.is_empty() {
                    shared.changed.notify_all();
                }
                ready
            };
            for done in ready {
                match done {
                    Ok(batches) => {
                        for hits in batches {
                            if report(&mut main.stats, hits, usize::MAX, visit).is_break() {
                                break 'report;
                            }
                        }
                    }
                    Err(e) => {
                        result = Err(e);
                        break 'report;
                    }
                }
            }
            if opts.stopped() {
                break;
            }
            if !spawned
                && started.elapsed() >= opts.spawn_after
                && shared.next.load(Ordering::Relaxed) + 1 < items.len()
            {
                spawn_workers(&mut workers, &main.memo);
                spawned = true;
            }
            let i = shared.next.fetch_add(1, Ordering::Relaxed);
            if i < items.len() && !spawned {
                // Alone: every item before `i` is reported, so this one's
                // hits go straight to `visit` (no map, no lock), as in a
                // sequential search. A break is `visit`'s or a stop check's:
                // the search ends either way.
                let done = visit_range(
                    job,
                    main,
                    items[i],
                    lean.as_deref_mut(),
                    usize::MAX,
                    &halted,
                    &mut |stats, hits| report(stats, hits, usize::MAX, visit),
                );
                shared.state.lock().reported = i + 1;
                match done {
                    Err(e) => {
                        result = Err(e);
                        break 'report;
                    }
                    Ok(ControlFlow::Break(())) => break 'report,
                    Ok(ControlFlow::Continue(())) => continue,
                }
            }
            if i < items.len() {
                work(i, main, lean.as_deref_mut());
                continue;
            }
            // Nothing left to claim: wait for the next item to report.
            let mut st = shared.state.lock();
            if st.reported >= items.len() {
                break;
            }
            if !st.finished.contains_key(&st.reported) {
                shared.changed.wait_for(&mut st, STOP_POLL);
            }
        }
        shared.halt.store(true, Ordering::Relaxed);
        shared.changed.notify_all();
        let mut total = Aggregation::default();
        for w in workers {
            // A worker that panicked is a bug in the engine: re-raise it.
            let (stats, tallied) = match w.join() {
                Ok(x) => x,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            add_stats(&mut main.stats, &stats);
            if let Some(a) = tallied {
                total.merge(a);
            }
        }
        if let Some(t) = lean {
            t.agg.merge(total);
        }
        result
    })
}

/// Hits in `batches`.
fn count(batches: &[Hits]) -> usize {
    batches.iter().map(Hits::len).sum()
}

/// Adds `w`'s counters to `into`.
fn add_stats(into: &mut SearchStats, w: &SearchStats) {
    into.tables += w.tables;
    into.tables_pruned += w.tables_pruned;
    into.tables_out_of_scope += w.tables_out_of_scope;
    into.tables_summarized += w.tables_summarized;
    into.tables_summarized_by_exit += w.tables_summarized_by_exit;
    into.candidates += w.candidates;
    into.links_checked += w.links_checked;
    into.dir_reads += w.dir_reads;
    into.hits += w.hits;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u128) -> Soid {
        Soid::from_u128(v)
    }

    #[test]
    fn work_items_partition_the_soid_space() {
        for starts in [
            vec![],
            vec![s(0)],
            vec![s(0), s(10)],
            vec![s(0), s(10), s(11), s(u128::MAX)],
            vec![s(5), s(7)],
        ] {
            let items = work_items(&starts);
            assert_eq!(items[0].first, Soid::MIN, "{starts:?}");
            assert_eq!(items.last().map(|r| r.last), Some(Soid::MAX));
            for w in items.windows(2) {
                assert_eq!(w[0].last.checked_next(), Some(w[1].first), "{starts:?}");
            }
        }
        assert_eq!(work_items(&[s(0), s(10), s(20)]).len(), 3);
    }
}
