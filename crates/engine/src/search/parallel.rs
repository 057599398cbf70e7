//! Parallel execution of one search: worker threads visit the tables in
//! SOID order, each with its own [`Search`] (memo and stats), and the
//! caller's thread reports their hits in table order.
//!
//! - Work items are the SOID ranges of the tables as the table map was when
//!   the search started ([`work_items`]); each worker visits the rows of its
//!   item only ([`visit_range`]), so a table split or merged meanwhile is
//!   neither missed nor reported twice.
//! - Workers claim items in order from one counter; a worker does not start
//!   an item more than [`WINDOW`] items ahead of the last one reported, so
//!   the hits waiting to be reported stay bounded however slow the caller's
//!   `visit` is (lean searches report no hits and have no window).
//! - Hits reach `visit` in item order and, within an item, in SOID order:
//!   the same order as the sequential cursor. Counts and tallies are
//!   summed at the end.
//! - Stopping (`visit` breaks, an error, or [`SearchOptions::stop`]) sets
//!   one flag that every worker reads before each table and while it waits
//!   for the window; the caller's thread drops the channel so no worker
//!   blocks on a send.
//!
//! Each worker starts from a copy of the memo as it is after the top-down
//! walk (complete or not) and resolves further directories itself: two
//! workers may read the same directory once each, which costs a few reads
//! and keeps every lock short (no shared memo, no lock held across a
//! table visit).

use super::{
    visit_range, Aggregation, Job, Search, SearchHit, SearchOptions, SearchStats, Tallies,
};
use sextant_types::{FsError, Soid, SoidRange};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Threads per search at most (beyond that the table map's shared lock and
/// memory bandwidth, not cores, bound a search).
pub(crate) const MAX_THREADS: usize = 16;

/// Items a worker may run ahead of the last item reported.
const WINDOW: usize = 8;

/// How often the caller's thread asks [`SearchOptions::stop`] while it
/// waits for a worker.
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

/// One finished item: its index and hits, or the error that ended it.
type Done = (usize, Result<Vec<SearchHit>, FsError>);

/// Runs `job` over `items` on `opts.threads` workers; see the module docs.
/// `main` receives the summed stats; `lean` the summed tallies.
pub(super) fn run(
    job: &Job<'_>,
    main: &mut Search<'_>,
    items: Vec<SoidRange>,
    opts: &SearchOptions<'_>,
    lean: Option<&mut Tallies>,
    visit: &mut dyn FnMut(SearchHit) -> ControlFlow<()>,
) -> Result<(), FsError> {
    let threads = opts.threads.min(items.len()).max(1);
    let by = lean.as_ref().map(|t| t.by);
    let window = if lean.is_some() { usize::MAX } else { WINDOW };
    let next = AtomicUsize::new(0);
    let halt = AtomicBool::new(false);
    // The first item not yet reported, and a condition to wait on it.
    let reported = parking_lot::Mutex::new(0usize);
    let advanced = parking_lot::Condvar::new();
    let halted = || halt.load(Ordering::Relaxed) || opts.stopped();

    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<Done>(threads * 2);
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let tx = tx.clone();
            let mut search = Search {
                engine: main.engine,
                cred: main.cred,
                memo: main.memo.clone(),
                stats: SearchStats::default(),
            };
            let (items, next, reported, advanced, halted) =
                (&items, &next, &reported, &advanced, &halted);
            workers.push(scope.spawn(move || {
                let mut tallies = by.map(Tallies::new);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&range) = items.get(i) else {
                        break;
                    };
                    {
                        let mut r = reported.lock();
                        while i >= r.saturating_add(window) && !halted() {
                            advanced.wait_for(&mut r, STOP_POLL);
                        }
                    }
                    if halted() {
                        break;
                    }
                    let mut hits = Vec::new();
                    let done = visit_range(
                        job,
                        &mut search,
                        range,
                        tallies.as_mut(),
                        usize::MAX,
                        halted,
                        &mut |_, h| {
                            hits.extend(h);
                            ControlFlow::Continue(())
                        },
                    );
                    let failed = done.is_err();
                    if tx.send((i, done.map(|_| hits))).is_err() || failed {
                        break;
                    }
                }
                (search.stats, tallies.map(Tallies::finish))
            }));
        }
        drop(tx);

        // Report in item order.
        let mut waiting: BTreeMap<usize, Vec<SearchHit>> = BTreeMap::new();
        let mut first_unreported = 0;
        let mut result = Ok(());
        let mut stopped = false;
        loop {
            let (i, done) = match rx.recv_timeout(STOP_POLL) {
                Ok(d) => d,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if opts.stopped() {
                        halt.store(true, Ordering::Relaxed);
                        break;
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match done {
                Ok(hits) => {
                    waiting.insert(i, hits);
                }
                Err(e) => {
                    result = Err(e);
                    halt.store(true, Ordering::Relaxed);
                    break;
                }
            }
            while let Some(hits) = waiting.remove(&first_unreported) {
                first_unreported += 1;
                for hit in hits {
                    if stopped {
                        break;
                    }
                    main.stats.hits += 1;
                    stopped = visit(hit).is_break();
                }
            }
            *reported.lock() = first_unreported;
            advanced.notify_all();
            if stopped {
                halt.store(true, Ordering::Relaxed);
                break;
            }
        }
        drop(rx);
        advanced.notify_all();
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

/// Adds `w`'s counters to `into`.
fn add_stats(into: &mut SearchStats, w: &SearchStats) {
    into.tables += w.tables;
    into.tables_pruned += w.tables_pruned;
    into.tables_out_of_scope += w.tables_out_of_scope;
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
