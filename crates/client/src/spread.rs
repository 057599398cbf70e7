//! Search across the servers of a cluster (issue 21 item 3, Magellan's
//! routing): one query, every server searching its part at once, the
//! answers merged into one [`crate::SearchStream`].
//!
//! How a query runs:
//! 1. The scope path is resolved here, as the caller (each name's search
//!    permission checked by the server holding it), to a SOID: every
//!    server then starts from the same directory. (A path leaving the
//!    home server's tables is walked name by name, a round trip per
//!    name: a caller searching one starting point several times — `find`
//!    searches it at depth 0, then below it — resolves it once and gives
//!    its SOID after; `stats` and `du` ask both at once, each resolving
//!    the path.)
//! 2. The route map splits the SOID space by server; each server gets
//!    its ranges (`SearchRequest.ranges`). It searches the tables it holds
//!    in them — reading the directories other servers hold for ancestry,
//!    paths and permissions — and says which ranges it did not hold when
//!    its search came to them (a table moved meanwhile).
//! 3. Those ranges — and those in a gap of the map (no route: a table
//!    whose owner left and is not replaced yet), which no server was asked
//!    for — are asked again of their holders by a fresh map, round after
//!    round, until none is left. A range is with one server at a
//!    time and is searched only under the lock of a table held there, so
//!    a table that moves during the query is searched exactly once.
//! 4. Merging: hits pass through as they come (at most `limit`, the
//!    other servers then cancelled); a sorted query keeps the top `limit`
//!    of every server's top `limit`; counts, sizes and groups are added up
//!    (a limited count stops at the limit).
//!
//! A client without the cluster secret (a local user on a server's Unix
//! socket, served as the kernel says it is) sends every part to that
//! server, naming the holder in `forward_to`: the server runs it there,
//! with the secret, as the caller it admitted.
//!
//! Failures of a part (issue 21, "a time bound on a spread search's
//! parts, and fail fast"):
//! - A server that cannot be reached, that does not answer the call
//!   within [`REROUTE_AFTER`], whose search stream breaks (its connection
//!   reset: the server was killed), or whose stream goes silent — nothing,
//!   not even a keep-alive, for `sextant_proto::search::SILENT_FOR` (10 s)
//!   after it announced keep-alives every `KEEP_ALIVE_EVERY` (2 s): the
//!   server stopped, its machine hangs, a partition resets nothing — is,
//!   if no hit of its part was passed on yet, asked again (its stream
//!   dropped); once a fresh map no longer names it (it left the cluster,
//!   or its tables failed over after its lease), its ranges are asked of
//!   their holders like those a server did not hold; all within
//!   `Options::retry_for` of the part, and as long as the query's rounds
//!   progress: it fails after [`CHASE_FOR`] with no round searching any of
//!   the ranges still wanted (`sextant_proto::search::chase_progressed`).
//! - A part whose stream breaks or goes silent after some of its hits
//!   were passed on fails the query (asked again, they would be doubled):
//!   the error names the server, the silence and the part's ranges. So
//!   does any other error of a part (EACCES, the scope gone, ...), and a
//!   part asked again for longer than the retry time.
//! - The first part that fails the query fails it at once: its error is
//!   the merged stream's next item, and the other parts are cancelled
//!   (their tasks aborted, their streams dropped, so each server stops
//!   its search at its next hit) — not after every other part ended.
//! - A server that announced no keep-alives (an older one) has no bound on
//!   its silence: a long search there is normal. Its stream is still cut
//!   by the HTTP/2 keep-alive of the channel (a ping every 30 s, 20 s to
//!   answer) when the server stops.
//!
//! Totals (`count_only`, `group_by`) and the scope root alone (depth 0)
//! are not spread here first: the home server is asked to gather them
//! (`SearchRequest.gather`, the server's `service::gather`), which it does
//! the same way with its own route map and the channels it keeps to the
//! others — one call for the client instead of a route map, a `Resolve`
//! and a connection per server. Only when it does not (an older server)
//! or cannot (a server unreachable) does the client spread them itself.
//!
//! Invariants: the merged stream ends with `Done` only when every range
//! was searched by some server; any server's failure fails the query (no
//! silently partial answer). Dropping the stream cancels every server's
//! search.

use crate::{Client, Error, Result};
use sextant_engine::search::{GroupKey, SearchHit, Totals};
use sextant_proto::route::{RouteTable, Share};
use sextant_proto::search::{
    add_totals, chase_progressed, matching_ranges, CHASE_FOR, ROUND_PAUSE,
};
use sextant_proto::search::{SearchDone, SearchScope, SearchSpec, TopN};
use sextant_types::{Credentials, SoidRange};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// A server that does not answer a part for this long (the call not
/// answered: a server that announces keep-alives answers at once) is
/// looked up in a fresh map: gone from it, its ranges are asked of their
/// new holders.
const REROUTE_AFTER: Duration = Duration::from_secs(1);
/// Batches queued from the servers for the reader.
const QUEUE: usize = 16;

/// What the merged stream yields.
pub(crate) enum Next {
    Hits(Vec<SearchHit>),
    Done(SearchDone),
}

/// The merged search (see the module docs); its driver task ends when it
/// is dropped.
pub(crate) struct Merged {
    rx: mpsc::Receiver<Result<Next>>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for Merged {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Merged {
    /// Resolves the scope and starts every server's part.
    pub(crate) async fn start(
        client: &Client,
        cred: &Credentials,
        spec: &SearchSpec,
        map: Arc<RouteTable>,
    ) -> Result<Merged> {
        crate::timing::mark(|| "spread search: resolving the scope".into());
        let scope = match &spec.scope {
            SearchScope::Soid(s) => SearchScope::Soid(*s),
            // `/` is the root whoever asks (no search permission is needed
            // to reach it): no call, which cost a `Map` and a `Resolve`
            // round trip per spread search. With a key, the server clamps
            // the path to the key's subtree: asked.
            SearchScope::Path(p)
                if client.unconfined() && !p.is_empty() && p.iter().all(|&c| c == b'/') =>
            {
                SearchScope::Soid(sextant_types::Soid::ROOT)
            }
            // (A walk across the servers, name by name, when the path
            // leaves the home server's tables: a caller that searches the
            // same starting point again gives its SOID, as `find` does.)
            SearchScope::Path(p) => {
                crate::timing::mark(|| "spread search: resolving the scope's path".into());
                match client.resolve(cred, p, false).await {
                    Ok(a) => SearchScope::Soid(a.soid),
                    // With a client key limited to a subtree, a scope above
                    // it (`find /`) cannot be resolved by the key, but is
                    // searched clamped to the subtree: each server clamps
                    // the path itself (`sextant_server::confine::search_scope`).
                    Err(Error::Fs(sextant_types::FsError::Access)) if client.has_key() => {
                        SearchScope::Path(p.clone())
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        crate::timing::mark(|| "spread search: scope resolved, fanning out".into());
        let mut spec = spec.clone();
        spec.scope = scope;
        let (tx, rx) = mpsc::channel(QUEUE);
        let (client, cred) = (client.clone(), cred.clone());
        let driver = tokio::spawn(async move {
            let result = drive(&client, &cred, &spec, map, &tx).await;
            let last = match result {
                Ok(done) => Ok(Next::Done(done)),
                Err(e) => Err(e),
            };
            let _ = tx.send(last).await;
        });
        Ok(Merged { rx, driver })
    }

    pub(crate) async fn next(&mut self) -> Result<Next> {
        match self.rx.recv().await {
            Some(n) => n,
            None => Err(Error::Protocol("the merged search ended early".into())),
        }
    }
}

/// The SOIDs a query can match ([`matching_ranges`]): only the scope's
/// own object for a query at depth 0 (every server's part of a spread
/// search visiting nothing cost ~4 ms of a `stats /` on four servers, done
/// twice); every SOID for one below it or a scope not resolved to a SOID.
fn scope_ranges(spec: &SearchSpec) -> SoidRange {
    match spec.scope {
        SearchScope::Soid(root) => matching_ranges(root, &spec.expr),
        SearchScope::Path(_) => SoidRange::ALL,
    }
}

/// The error of a part whose server at `address` went silent for `bound`
/// after some of its hits were passed on: it names the server, the
/// silence and the part's ranges.
fn silent_after_hits(address: &str, bound: Duration, ranges: &[SoidRange]) -> Error {
    Error::Unavailable {
        addr: address.to_string(),
        reason: format!(
            "it sent nothing for {} s in the middle of its part of the search (SOID ranges \
             {}), after some of its hits were passed on: taken for a stopped server; the \
             search cannot finish (asked again, those hits would come twice)",
            bound.as_secs(),
            sextant_proto::search::ranges_named(ranges)
        ),
    }
}

/// What one server's part gave.
struct Part {
    done: SearchDone,
}

/// The merge of the parts' answers, round after round.
struct Merge {
    limit: usize,
    /// Hits are passed on (not counts or groups).
    listing: bool,
    /// A sorted query's top `limit` so far.
    top: Option<TopN>,
    total: SearchDone,
    groups: HashMap<GroupKey, Totals>,
    /// Hits passed on so far.
    listed: usize,
}

/// How a round of parts ended.
enum Round {
    /// Every part ended; the ranges their servers did not hold.
    Finished(Vec<SoidRange>),
    /// Enough hits, or the reader is gone: the query ends here.
    Stopped,
}

impl Merge {
    fn new(spec: &SearchSpec) -> Merge {
        let limit = spec.engine_limit();
        Merge {
            limit,
            listing: !spec.count_only && spec.group_by.is_none(),
            top: spec.sort.map(|s| TopN::new(s, limit)),
            total: SearchDone::default(),
            groups: HashMap::new(),
            listed: 0,
        }
    }

    /// Hits as they come (all servers at once), and each part's end as it
    /// comes. The first part that fails the query (its error: see the
    /// module docs) fails it at once, and the other parts are cancelled
    /// (their tasks aborted, their streams dropped: each server stops its
    /// search at its next hit) — not after every other part ended.
    async fn round(
        &mut self,
        parts: &mut JoinSet<Result<Part>>,
        hits: &mut mpsc::Receiver<Vec<SearchHit>>,
        out: &mpsc::Sender<Result<Next>>,
    ) -> Result<Round> {
        let mut not_held = Vec::new();
        let mut hits_open = true;
        while hits_open || !parts.is_empty() {
            tokio::select! {
                batch = hits.recv(), if hits_open => {
                    let Some(batch) = batch else {
                        hits_open = false;
                        continue;
                    };
                    if !self.pass(batch, out).await {
                        // Enough, or nobody reads: the other servers'
                        // searches are cancelled.
                        parts.abort_all();
                        return Ok(Round::Stopped);
                    }
                }
                joined = parts.join_next(), if !parts.is_empty() => {
                    let part = match joined {
                        None => continue,
                        Some(Ok(Ok(part))) => part,
                        Some(Ok(Err(e))) => {
                            parts.abort_all();
                            return Err(e);
                        }
                        Some(Err(e)) => {
                            parts.abort_all();
                            return Err(Error::Protocol(format!("a server's search: {e}")));
                        }
                    };
                    let d = part.done;
                    self.total.add_work(&d);
                    if !self.listing {
                        self.total.count = self.total.count.saturating_add(d.count);
                        self.total.total_size = self.total.total_size.saturating_add(d.total_size);
                        for (k, t) in d.groups {
                            add_totals(self.groups.entry(k).or_default(), &t);
                        }
                    }
                    not_held.extend(d.not_held);
                }
            }
        }
        Ok(Round::Finished(not_held))
    }

    /// Takes a part's batch of hits (passed on, or kept for sorting);
    /// false when the query is to end here (enough hits, or the reader
    /// is gone).
    async fn pass(&mut self, batch: Vec<SearchHit>, out: &mpsc::Sender<Result<Next>>) -> bool {
        if !self.listing {
            return true;
        }
        if let Some(t) = &mut self.top {
            batch.into_iter().for_each(|h| t.push(h));
            return true;
        }
        let room = self.limit.saturating_sub(self.listed);
        let batch: Vec<SearchHit> = batch.into_iter().take(room).collect();
        self.listed += batch.len();
        for h in &batch {
            self.total.count += 1;
            self.total.total_size = self.total.total_size.saturating_add(h.attr.size);
        }
        if !batch.is_empty() && out.send(Ok(Next::Hits(batch))).await.is_err() {
            return false;
        }
        self.listed < self.limit
    }
}

/// Runs the rounds and merges; returns the summary of the whole query.
async fn drive(
    client: &Client,
    cred: &Credentials,
    spec: &SearchSpec,
    mut map: Arc<RouteTable>,
    out: &mpsc::Sender<Result<Next>>,
) -> Result<SearchDone> {
    let mut merge = Merge::new(spec);
    let mut wanted = vec![scope_ranges(spec)];
    // Since the last round that searched some of what was wanted.
    let mut progressed = Instant::now();
    loop {
        let (hits_tx, mut hits_rx) = mpsc::channel::<Vec<SearchHit>>(QUEUE);
        let mut parts: JoinSet<Result<Part>> = JoinSet::new();
        let split = map.split(&wanted);
        // A gap of the map (a table between owners, or whose owner left
        // and is not replaced yet): asked again with a fresh map, like a
        // range a server did not hold (left out, its SOIDs went uncounted).
        let gaps = split.gaps;
        for Share {
            address, ranges, ..
        } in split.shares
        {
            let mut part = spec.clone();
            part.ranges = ranges;
            let (client, cred, hits_tx) = (client.clone(), cred.clone(), hits_tx.clone());
            parts.spawn(async move {
                // Without the secret (a local user on the Unix socket)
                // and without a usable identity ticket, every part goes
                // through the home server, which runs it on its holder as
                // the caller it admitted; with a ticket, to its holder.
                let mut forward = client.forwards() && !address.is_empty();
                if forward {
                    part.forward_to = address.clone();
                }
                let mut link = (!address.is_empty() && !forward).then(|| client.link_to(&address));
                crate::timing::mark(|| format!("part {address}: asked"));
                let asked = Instant::now();
                let retry_for = client.inner.options.retry_for;
                // Whether a hit of this part was passed on (then a broken
                // stream cannot be asked again: its hits would be doubled).
                let mut passed = false;
                let mut done = SearchDone::default();
                'ask: loop {
                    let within = REROUTE_AFTER.min(retry_for.saturating_sub(asked.elapsed()));
                    let failure = match client
                        .search_at_within(link.clone(), &cred, &part, within)
                        .await
                    {
                        // A local user's ticket refused by the holder: the
                        // part goes through the home server after all.
                        Err(Error::Auth)
                            if !forward
                                && link.as_ref().is_some_and(|l| client.ticket_refused(l)) =>
                        {
                            forward = true;
                            part.forward_to = address.clone();
                            link = None;
                            continue 'ask;
                        }
                        // Typically a local user on the Unix socket, who has
                        // no secret for the other servers' TCP ports.
                        Err(Error::Auth) if client.secret_is_empty() => {
                            return Err(Error::Protocol(format!(
                                "the namespace is spread over several servers, and searching \
                                 {address} needs the cluster secret (without it, only the \
                                 server on this machine's socket answers)"
                            )))
                        }
                        Err(e) => e,
                        Ok(mut s) => {
                            crate::timing::mark(|| format!("part {address}: stream open"));
                            let failure = loop {
                                match s.next_batch().await {
                                    Ok(Some(batch)) => {
                                        passed = true;
                                        if hits_tx.send(batch).await.is_err() {
                                            break 'ask;
                                        }
                                    }
                                    Ok(None) => {
                                        done = s.done().cloned().unwrap_or_default();
                                        break 'ask;
                                    }
                                    Err(e) => break e,
                                }
                            };
                            // A stream broken by its connection, or silent past
                            // its bound, before any of its hits was passed on
                            // (a server killed or stopped as the query reached
                            // it) searched nothing yet: asked again like a
                            // server that does not answer. After: the query
                            // fails (at once: see `drive`).
                            if passed {
                                return Err(match s.went_silent() {
                                    Some(bound) => silent_after_hits(&address, bound, &part.ranges),
                                    None => failure,
                                });
                            }
                            tokio::time::sleep(ROUND_PAUSE).await;
                            failure
                        }
                    };
                    match failure {
                        // A server that does not answer and that the map
                        // no longer names (it left, or its tables failed
                        // over) searched nothing: its ranges are asked
                        // again of their holders, by a fresh map.
                        e @ Error::Unavailable { .. } if !forward => {
                            let gone = client
                                .peek_route_map()
                                .await
                                .is_ok_and(|m| !m.routes().iter().any(|r| r.address == address));
                            if gone {
                                return Ok(Part {
                                    done: SearchDone {
                                        not_held: part.ranges.clone(),
                                        ..SearchDone::default()
                                    },
                                });
                            }
                            if asked.elapsed() >= retry_for {
                                return Err(e);
                            }
                        }
                        e => return Err(e),
                    }
                }
                crate::timing::mark(|| format!("part {address}: done"));
                Ok(Part { done })
            });
        }
        drop(hits_tx);
        let not_held = match merge.round(&mut parts, &mut hits_rx, out).await? {
            Round::Finished(mut not_held) => {
                not_held.extend(gaps);
                not_held
            }
            Round::Stopped => return Ok(merge.total),
        };
        crate::timing::mark(|| "spread search: every part in".into());
        if not_held.is_empty() {
            break;
        }
        if chase_progressed(&wanted, &not_held) {
            progressed = Instant::now();
        } else if progressed.elapsed() > CHASE_FOR {
            return Err(Error::Protocol(format!(
                "{} SOID ranges kept moving between servers: none of them could be searched \
                 for {} s; the search could not finish",
                not_held.len(),
                CHASE_FOR.as_secs()
            )));
        }
        tokio::time::sleep(ROUND_PAUSE).await;
        map = client.peek_route_map().await?;
        wanted = not_held;
    }
    let Merge {
        limit,
        top,
        mut total,
        groups,
        ..
    } = merge;
    if spec.count_only && limit != usize::MAX {
        total.count = total.count.min(limit as u64);
    }
    if let Some(t) = top {
        let hits = t.finish();
        total.count = hits.len() as u64;
        total.total_size = hits.iter().fold(0u64, |a, h| a.saturating_add(h.attr.size));
        for chunk in hits.chunks(spec.batch()) {
            if out.send(Ok(Next::Hits(chunk.to_vec()))).await.is_err() {
                return Ok(total);
            }
        }
    }
    let mut groups: Vec<(GroupKey, Totals)> = groups.into_iter().collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    total.groups = groups;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_engine::search::{Expr, Pred};
    use sextant_types::{FsError, Soid};

    /// Set when dropped: a part's task (its stream) was let go.
    struct Dropped(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn listing() -> SearchSpec {
        SearchSpec::new(SearchScope::Soid(Soid::ROOT), Expr::True)
    }

    /// One part fails for good while another never ends (its server
    /// stopped, say): the round fails at once with the first's error and
    /// the other part is cancelled. (Before: the round waited for every
    /// part, here for ever.)
    #[tokio::test(start_paused = true)]
    async fn a_part_failing_for_good_fails_the_round_at_once_and_cancels_the_others() {
        let (hits_tx, mut hits_rx) = mpsc::channel::<Vec<SearchHit>>(QUEUE);
        let (out, _reader) = mpsc::channel(QUEUE);
        let mut parts: JoinSet<Result<Part>> = JoinSet::new();
        let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (guard, stuck_tx) = (Dropped(Arc::clone(&cancelled)), hits_tx.clone());
        parts.spawn(async move {
            let _guard = guard;
            let _hits = stuck_tx;
            std::future::pending::<()>().await;
            Ok(Part {
                done: SearchDone::default(),
            })
        });
        parts.spawn(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err(Error::Fs(FsError::Access))
        });
        drop(hits_tx);
        let mut merge = Merge::new(&listing());
        let started = tokio::time::Instant::now();
        let round = tokio::time::timeout(
            Duration::from_secs(3600),
            merge.round(&mut parts, &mut hits_rx, &out),
        )
        .await
        .expect("the round waited for the part that never ends");
        assert!(
            matches!(round, Err(Error::Fs(FsError::Access))),
            "{:?}",
            round.as_ref().err()
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        // The stuck part's task is aborted (its stream dropped).
        while parts.join_next().await.is_some() {}
        assert!(cancelled.load(std::sync::atomic::Ordering::SeqCst));
    }

    /// Parts that end well: their hits passed on in the order they come,
    /// their summaries added up, their ranges not held collected.
    #[tokio::test]
    async fn a_round_of_parts_that_end_well_passes_every_hit_on() {
        let (hits_tx, mut hits_rx) = mpsc::channel::<Vec<SearchHit>>(QUEUE);
        let (out, mut reader) = mpsc::channel(QUEUE);
        let mut parts: JoinSet<Result<Part>> = JoinSet::new();
        let moved = SoidRange {
            first: Soid::from_u128(5),
            last: Soid::from_u128(9),
        };
        for n in 1..=2u64 {
            let tx = hits_tx.clone();
            parts.spawn(async move {
                tx.send(Vec::new()).await.ok();
                Ok(Part {
                    done: SearchDone {
                        tables: n,
                        not_held: if n == 2 { vec![moved] } else { Vec::new() },
                        ..SearchDone::default()
                    },
                })
            });
        }
        drop(hits_tx);
        let mut merge = Merge::new(&listing());
        let round = merge.round(&mut parts, &mut hits_rx, &out).await;
        match round {
            Ok(Round::Finished(not_held)) => assert_eq!(not_held, vec![moved]),
            Ok(Round::Stopped) => panic!("stopped"),
            Err(e) => panic!("{e}"),
        }
        assert_eq!(merge.total.tables, 3);
        drop(out);
        // (Empty batches are not passed on.)
        assert!(reader.recv().await.is_none());
    }

    #[test]
    fn a_part_silent_after_passing_hits_names_its_server_the_silence_and_its_ranges() {
        let ranges = [SoidRange {
            first: Soid::from_u128(0x10),
            last: Soid::from_u128(0x1f),
        }];
        let e = silent_after_hits("10.0.0.7:7420", Duration::from_secs(10), &ranges);
        assert!(matches!(e, Error::Unavailable { .. }));
        let text = e.to_string();
        assert!(text.contains("10.0.0.7:7420"), "{text}");
        assert!(text.contains("nothing for 10 s"), "{text}");
        assert!(text.contains(&format!("{:?}", ranges[0])), "{text}");
    }

    #[test]
    fn a_query_of_the_scope_root_alone_asks_its_holder_only() {
        let root = Soid::from_u128(77);
        let spec = |expr: Expr| {
            let mut s = SearchSpec::new(SearchScope::Soid(root), expr);
            s.count_only = true;
            s
        };
        let only_root = SoidRange {
            first: root,
            last: root,
        };
        let depth = |min, max| Expr::pred(Pred::Depth { min, max });
        assert_eq!(scope_ranges(&spec(depth(0, 0))), only_root);
        assert_eq!(
            scope_ranges(&spec(Expr::and(depth(0, 0), Expr::pred(Pred::Empty)))),
            only_root
        );
        for below in [Expr::True, depth(0, 1), depth(1, u32::MAX)] {
            assert_eq!(scope_ranges(&spec(below)), SoidRange::ALL);
        }
        // A path scope is resolved first; until then every SOID.
        let by_path = SearchSpec::new(SearchScope::Path(b"/a".to_vec()), depth(0, 0));
        assert_eq!(scope_ranges(&by_path), SoidRange::ALL);
    }
}
