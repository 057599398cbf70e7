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
//! 3. Those ranges are asked again of their holders by a fresh map, round
//!    after round, until none is left. A range is with one server at a
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
//! A server that cannot be reached, or whose search stream breaks (its
//! connection reset: the server was killed) before any hit of its part was
//! passed on, is asked again; once a fresh map no longer names it (it left
//! the cluster, or its tables failed over), its ranges are asked of their
//! holders like those a server did not hold. A part whose stream breaks
//! after some of its hits were passed on fails the query (asked again,
//! they would be doubled).
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
use sextant_proto::search::{add_totals, matching_ranges, CHASE_FOR, ROUND_PAUSE};
use sextant_proto::search::{SearchDone, SearchScope, SearchSpec, TopN};
use sextant_types::{Credentials, SoidRange};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// A server that does not answer a part for this long is looked up in a
/// fresh map: gone from it, its ranges are asked of their new holders.
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

/// What one server's part gave.
struct Part {
    done: SearchDone,
}

/// Runs the rounds and merges; returns the summary of the whole query.
async fn drive(
    client: &Client,
    cred: &Credentials,
    spec: &SearchSpec,
    mut map: Arc<RouteTable>,
    out: &mpsc::Sender<Result<Next>>,
) -> Result<SearchDone> {
    let limit = spec.engine_limit();
    let listing = !spec.count_only && spec.group_by.is_none();
    let mut top = spec.sort.map(|s| TopN::new(s, limit));
    let mut total = SearchDone::default();
    let mut groups: HashMap<GroupKey, Totals> = HashMap::new();
    let mut listed = 0usize;
    let mut wanted = vec![scope_ranges(spec)];
    let started = Instant::now();
    loop {
        let (hits_tx, mut hits_rx) = mpsc::channel::<Vec<SearchHit>>(QUEUE);
        let mut parts: JoinSet<Result<Part>> = JoinSet::new();
        for Share {
            address, ranges, ..
        } in map.split(&wanted)
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
                            // A stream broken by its connection before any of
                            // its hits was passed on (a server killed as the
                            // query reached it) searched nothing yet: asked
                            // again like a server that does not answer.
                            if passed {
                                return Err(failure);
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
        // Hits as they come (all servers at once).
        while let Some(batch) = hits_rx.recv().await {
            if !listing {
                continue;
            }
            match &mut top {
                Some(t) => batch.into_iter().for_each(|h| t.push(h)),
                None => {
                    let room = limit.saturating_sub(listed);
                    let batch: Vec<SearchHit> = batch.into_iter().take(room).collect();
                    listed += batch.len();
                    for h in &batch {
                        total.count += 1;
                        total.total_size = total.total_size.saturating_add(h.attr.size);
                    }
                    if !batch.is_empty() && out.send(Ok(Next::Hits(batch))).await.is_err() {
                        return Ok(total);
                    }
                    if listed >= limit {
                        // Enough: the other servers' searches are cancelled
                        // (their streams dropped with their tasks).
                        parts.abort_all();
                        return Ok(total);
                    }
                }
            }
        }
        crate::timing::mark(|| "spread search: every part's hits in".into());
        let mut not_held = Vec::new();
        while let Some(joined) = parts.join_next().await {
            let part = joined.map_err(|e| Error::Protocol(format!("a server's search: {e}")))??;
            let d = part.done;
            total.add_work(&d);
            if !listing {
                total.count = total.count.saturating_add(d.count);
                total.total_size = total.total_size.saturating_add(d.total_size);
                for (k, t) in d.groups {
                    add_totals(groups.entry(k).or_default(), &t);
                }
            }
            not_held.extend(d.not_held);
        }
        if not_held.is_empty() {
            break;
        }
        if started.elapsed() > CHASE_FOR {
            return Err(Error::Protocol(format!(
                "{} SOID ranges kept moving between servers for {} s; the search could not finish",
                not_held.len(),
                CHASE_FOR.as_secs()
            )));
        }
        tokio::time::sleep(ROUND_PAUSE).await;
        map = client.peek_route_map().await?;
        wanted = not_held;
    }
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
    use sextant_types::Soid;

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
