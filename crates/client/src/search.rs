//! Metadata search over the wire ([`Client::search`], [`Client::aggregate`]).
//!
//! A search is one server-streaming `Search` call on its own HTTP/2 stream
//! (a channel shared by every search of this client, connected lazily), not
//! the `Session` envelope: its results are many messages. The caller pulls
//! batches from a [`SearchStream`] as the server produces them; dropping the
//! stream resets the HTTP/2 stream, and the server stops the search at its
//! next hit.
//!
//! A search read to its `done` message is also read to the end of its
//! HTTP/2 stream (the trailers, a moment later) before it is let go: a
//! stream dropped before its trailers is reset, and under thousands of
//! searches a second the trailers arriving on streams h2 no longer
//! remembers made it close the whole connection
//! (`GOAWAY(ENHANCE_YOUR_CALM, "too_many_internal_resets")`; see
//! `crate::target` for the resets that are legitimate, a search dropped
//! early).
//!
//! Retries: starting a search is retried like any read (until
//! `Options::retry_for`) while the server cannot be reached. A search of
//! one server ([`Client::search`] without a spread map) whose stream breaks
//! by its connection before any of its hits was handed out is asked again
//! (within the same retry time: nothing was passed on, so nothing can be
//! doubled), and [`Client::search_collect`], which hands out nothing until
//! the end, asks such a search again whenever it breaks so; otherwise,
//! once hits were handed out, a broken stream is an error (the search
//! cannot resume where it stopped). A stream broken by its connection (the
//! server died, its connection was reset or closed by a GOAWAY) is an
//! [`Error::Unavailable`] naming the server; one the server ended with an
//! error is that error. (A spread search's parts are asked again by
//! [`crate::spread`], which knows whether a part's hits were passed on.)
//!
//! Silence: every search asks for keep-alives (`SearchRequest.keep_alive`;
//! see the switches below).
//! A server that announces them (the response header
//! `sextant_proto::search::KEEP_ALIVE_HEADER`) and then sends nothing for
//! `SILENT_FOR` (10 s; it sends a keep-alive after every 2 s without a
//! batch) is taken for a server that stopped: the stream fails as if its
//! connection broke ([`Error::Unavailable`] naming the server and the
//! silence), and is asked again or not by the rules above. A server that
//! announces none (an older one) is not bounded so. Starting a search
//! waits for the server's answer no longer than the retry time left (at
//! least `MIN_ANSWER_WAIT`).
//!
//! Switches (environment, read once per process; for benchmarks that
//! compare both ways in one run): `SEXTANT_SEARCH_GATHER=0` spreads totals
//! and scope roots itself instead of asking one server to gather them
//! ([`Client::search`]); `SEXTANT_SEARCH_KEEP_ALIVE=0` asks for no
//! keep-alives — the server asked answers such a search without its relay
//! (`service::keep_alive`) once the search has started (the answer is
//! waited for as above), and its silence is unbounded (as with an older
//! server). It changes only what this client asks: a server gathering a
//! search for it, or running a part on another server for it
//! (`forward_to`), still asks that server for keep-alives and bounds its
//! silence (both relays still run for a forwarded part), and a forwarded
//! part's keep-alives are passed on to this client, which skips them as
//! always.

use crate::{bad_reply, error_chain, Client, Error, Result};
use sextant_engine::search::{Aggregation, Expr, GroupBy, GroupKey, SearchHit, Totals};
use sextant_proto::pb;
use sextant_proto::route::RouteTable;
use sextant_proto::search::{done_from_pb, group_from_pb, hit_from_pb, spec_to_pb, SearchDone};
use sextant_proto::search::{silence_bound_of, SearchScope, SearchSpec};
use sextant_proto::{error_from_pb, MAX_MESSAGE_BYTES};
use sextant_types::{Credentials, FsError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Code;

/// The hits of one search, batch by batch.
pub struct SearchStream {
    source: Source,
    groups: Vec<(GroupKey, Totals)>,
    done: Option<SearchDone>,
}

/// Where a search's batches come from.
enum Source {
    /// One server's stream.
    One(Box<One>),
    /// Several servers' streams, merged ([`crate::spread`]).
    Spread(crate::spread::Merged),
    /// A search gathered by the server asked, read whole already
    /// ([`Client::gathered`]): its hits, batch by batch.
    Gathered(std::collections::VecDeque<Vec<SearchHit>>),
}

/// One server's search stream.
struct One {
    stream: tonic::Streaming<pb::SearchBatch>,
    /// The server's address.
    addr: String,
    /// How to ask the search again if its stream breaks by its connection
    /// before any hit was handed out (`None`: a spread search's part, which
    /// its caller asks again).
    again: Option<Again>,
    /// Whether a hit was handed out (then it cannot be asked again).
    passed: bool,
    /// How long the stream may bring nothing before its server is taken
    /// for stopped (`None`: it announced no keep-alives, an older server;
    /// `sextant_proto::search::silence_bound`).
    silent_for: Option<Duration>,
    /// Set when it failed so: it brought nothing for `silent_for`.
    went_silent: bool,
}

/// What asking a search again takes.
struct Again {
    client: Client,
    link: Option<Arc<crate::route::Link>>,
    cred: Credentials,
    spec: SearchSpec,
    /// When it was first asked: the retry time counts from here.
    started: Instant,
}

impl Again {
    /// The search asked again on a new stream, within what is left of the
    /// retry time; `None` when none is left.
    async fn ask(&self) -> Option<Result<(tonic::Streaming<pb::SearchBatch>, Option<Duration>)>> {
        let left = self
            .client
            .inner
            .options
            .retry_for
            .checked_sub(self.started.elapsed())?;
        if left.is_zero() {
            return None;
        }
        let fresh = self
            .client
            .search_at_within(self.link.clone(), &self.cred, &self.spec, left)
            .await;
        Some(fresh.and_then(|s| match s.source {
            Source::One(one) => Ok((one.stream, one.silent_for)),
            Source::Spread(_) | Source::Gathered(_) => {
                Err(bad_reply("a spread search for one server"))
            }
        }))
    }
}

/// Whether totals and scope roots are asked gathered (see
/// [`Client::search`]): yes, unless `SEXTANT_SEARCH_GATHER=0` (benchmarks
/// compare both in one run; read once).
fn gathering() -> bool {
    static GATHERING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GATHERING.get_or_init(|| std::env::var("SEXTANT_SEARCH_GATHER").map_or(true, |v| v != "0"))
}

/// Whether searches ask for keep-alives (`SearchRequest.keep_alive`):
/// yes, unless `SEXTANT_SEARCH_KEEP_ALIVE=0` (benchmarks compare both in
/// one run; read once; see the module docs).
fn asking_keep_alives() -> bool {
    static ASKING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ASKING.get_or_init(|| std::env::var("SEXTANT_SEARCH_KEEP_ALIVE").map_or(true, |v| v != "0"))
}

/// The least time one attempt to start a search waits for the server's
/// answer, however little of the retry time is left.
const MIN_ANSWER_WAIT: Duration = Duration::from_secs(1);

/// How long the end of a search's stream is waited for after its `done`
/// message (the server ends it at once).
const FINISH_WAIT: Duration = Duration::from_secs(2);

/// Reads `stream` to its end after its `done` message: its trailers, which
/// close the HTTP/2 stream (dropped before them, the stream would be reset;
/// see the module docs). The search's answer is whole already: a
/// connection broken now loses nothing, and is not an error.
async fn finish(stream: &mut tonic::Streaming<pb::SearchBatch>, addr: &str) -> Result<()> {
    let Ok(end) = tokio::time::timeout(FINISH_WAIT, stream.message()).await else {
        // A server that does not end the stream: let go (reset) anyway.
        return Ok(());
    };
    match end {
        Ok(None) => Ok(()),
        // (A server sends no keep-alive after `done`; one on its way as
        // the search ended is harmless.)
        Ok(Some(b)) if b.keep_alive && b.hits.is_empty() && b.done.is_none() => Ok(()),
        Ok(Some(_)) => Err(bad_reply("a search batch after the search's end")),
        Err(s) => match stream_error(&s, addr) {
            Error::Unavailable { .. } => Ok(()),
            e => Err(e),
        },
    }
}

impl SearchStream {
    /// The next batch of hits; `None` once the search finished (then
    /// [`SearchStream::done`] holds its summary).
    pub async fn next_batch(&mut self) -> Result<Option<Vec<SearchHit>>> {
        let one = match &mut self.source {
            Source::One(one) => one,
            Source::Gathered(batches) => return Ok(batches.pop_front()),
            Source::Spread(merged) => {
                if self.done.is_some() {
                    return Ok(None);
                }
                return match merged.next().await? {
                    crate::spread::Next::Hits(hits) => Ok(Some(hits)),
                    crate::spread::Next::Done(done) => {
                        self.done = Some(done);
                        Ok(None)
                    }
                };
            }
        };
        loop {
            if self.done.is_some() {
                return Ok(None);
            }
            let next = match one.silent_for {
                Some(bound) => tokio::time::timeout(bound, one.stream.message())
                    .await
                    .map_err(|_| bound),
                None => Ok(one.stream.message().await),
            };
            let next = match next {
                Ok(n) => n,
                // Nothing for `bound` from a server that promised a
                // keep-alive every few seconds: taken for stopped, as a
                // broken connection (asked again below if nothing was
                // handed out yet).
                Err(bound) => {
                    one.went_silent = true;
                    Err(tonic::Status::unavailable(format!(
                        "it sent nothing for {} s (no hit, keep-alive or end, though it \
                         announced keep-alives): taken for a stopped server",
                        bound.as_secs()
                    )))
                }
            };
            let msg = match next {
                Ok(Some(m)) => m,
                Ok(None) => return Err(bad_reply("a search stream without an end")),
                Err(s) => {
                    let e = stream_error(&s, &one.addr);
                    // Broken by its connection before any hit was handed
                    // out: asked again on a new one (groups received so
                    // far are dropped; they come again).
                    if let (Error::Unavailable { .. }, false, Some(again)) =
                        (&e, one.passed, &one.again)
                    {
                        if let Some(fresh) = again.ask().await {
                            (one.stream, one.silent_for) = fresh?;
                            one.went_silent = false;
                            self.groups.clear();
                            continue;
                        }
                    }
                    return Err(e);
                }
            };
            if let Some(e) = msg.error {
                return Err(batch_error(&e));
            }
            for g in msg.groups {
                self.groups
                    .push(group_from_pb(g).map_err(|_| bad_reply("a bad search group"))?);
            }
            if let Some(d) = msg.done {
                let mut done = done_from_pb(d);
                done.groups = std::mem::take(&mut self.groups);
                self.done = Some(done);
                finish(&mut one.stream, &one.addr).await?;
            }
            if !msg.hits.is_empty() {
                let hits = msg
                    .hits
                    .into_iter()
                    .map(hit_from_pb)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| bad_reply("a bad search hit"))?;
                one.passed = true;
                return Ok(Some(hits));
            }
        }
    }

    /// The summary, once [`SearchStream::next_batch`] returned `None`.
    pub fn done(&self) -> Option<&SearchDone> {
        self.done.as_ref()
    }

    /// For one server's stream that failed because it brought nothing for
    /// its bound: that bound.
    pub(crate) fn went_silent(&self) -> Option<Duration> {
        match &self.source {
            Source::One(one) if one.went_silent => one.silent_for,
            _ => None,
        }
    }
}

/// A search error from the server: `EINVAL` with the validator's message
/// is a [`Error::BadQuery`], anything else the errno.
fn batch_error(e: &pb::Error) -> Error {
    let fs = error_from_pb(e);
    if fs == FsError::Invalid && !e.message.is_empty() {
        Error::BadQuery(e.message.clone())
    } else {
        Error::Fs(fs)
    }
}

fn status_error(s: &tonic::Status) -> Error {
    match s.code() {
        Code::Unauthenticated => Error::Auth,
        _ => Error::Protocol(format!("the search stream failed: {}", s.message())),
    }
}

/// A search call's failure: broken by its connection (`Unavailable`, or a
/// status tonic made here from a transport error — one the server sent
/// has no source: a reset or closed HTTP/2 connection, the server may have
/// died) an [`Error::Unavailable`] of `addr`, otherwise as
/// [`status_error`].
fn stream_error(s: &tonic::Status, addr: &str) -> Error {
    let local = std::error::Error::source(s);
    if s.code() == Code::Unavailable || local.is_some() {
        Error::Unavailable {
            addr: addr.to_string(),
            reason: match local {
                Some(src) => error_chain(src),
                None => s.message().to_string(),
            },
        }
    } else {
        status_error(s)
    }
}

impl Client {
    /// Starts `spec` as `cred`; read the hits with
    /// [`SearchStream::next_batch`]. On a cluster whose namespace is
    /// spread over several servers, every server searches its part at
    /// once and the answers are merged ([`crate::spread`]).
    pub async fn search(&self, cred: &Credentials, spec: &SearchSpec) -> Result<SearchStream> {
        // Totals, or the scope root alone: the home server answers for
        // every server (one call; see `SearchRequest.gather`). Spread here
        // only when it did not (an older server) or could not (a server
        // it could not reach: nothing was answered yet).
        if gathering() && spec.gatherable() {
            match self.gathered(cred, spec).await {
                Ok(Some(stream)) => return Ok(stream),
                Ok(None) => {}
                Err(e @ (Error::Unavailable { .. } | Error::Protocol(_))) => {
                    crate::timing::mark(|| format!("gathered search failed ({e}): spread here"));
                }
                Err(e) => return Err(e),
            }
        }
        if spec.ranges.is_empty() {
            if let Some(map) = self.spread_map().await {
                let merged = crate::spread::Merged::start(self, cred, spec, map).await?;
                return Ok(SearchStream {
                    source: Source::Spread(merged),
                    groups: Vec::new(),
                    done: None,
                });
            }
        }
        let started = Instant::now();
        let mut stream = self.search_at(None, cred, spec).await?;
        if let Source::One(one) = &mut stream.source {
            one.again = Some(Again {
                client: self.clone(),
                link: None,
                cred: cred.clone(),
                spec: spec.clone(),
                started,
            });
        }
        Ok(stream)
    }

    /// `spec` asked of the home server to gather for the whole namespace
    /// and read to its end: `None` when the server did not gather it
    /// (an older one; its answer is dropped). Totals carry no hits, the
    /// scope root alone one: all are held until the end, so a search
    /// that fails halfway has handed out nothing.
    async fn gathered(
        &self,
        cred: &Credentials,
        spec: &SearchSpec,
    ) -> Result<Option<SearchStream>> {
        crate::timing::mark(|| "search: asking the home server to gather".into());
        let mut ask = spec.clone();
        ask.gather = true;
        let mut s = self.search_at(None, cred, &ask).await?;
        let mut batches = std::collections::VecDeque::new();
        while let Some(b) = s.next_batch().await? {
            batches.push_back(b);
        }
        crate::timing::mark(|| "search: gathered answer in".into());
        match s.done.take() {
            Some(done) if done.gathered => Ok(Some(SearchStream {
                source: Source::Gathered(batches),
                groups: Vec::new(),
                done: Some(done),
            })),
            _ => Ok(None),
        }
    }

    /// The route map to spread a search by: any map but a single server's
    /// (`None`: a single server, or no map could be had — then the home
    /// server answers, as on one server). A cluster's map is used even
    /// when it names one server: that server searches by SOID ranges and
    /// says which it no longer held when its search came to them (a table
    /// moving away meanwhile), and those are asked of their new holders. A
    /// search without ranges would get WRONG_SERVER from a server that no
    /// longer holds the scope root, and would skip, without a word, the
    /// tables that move away while it runs. Fetched for every search
    /// unless one came within the last second
    /// ([`Client::recent_route_map`]).
    async fn spread_map(&self) -> Option<Arc<RouteTable>> {
        let map = self.recent_route_map().await.ok()?;
        (!map.is_single_server()).then_some(map)
    }

    /// [`Client::search`] on one server: `link` (`None`: the home server).
    pub(crate) async fn search_at(
        &self,
        link: Option<Arc<crate::route::Link>>,
        cred: &Credentials,
        spec: &SearchSpec,
    ) -> Result<SearchStream> {
        let retry_for = self.inner.options.retry_for;
        self.search_at_within(link, cred, spec, retry_for).await
    }

    /// [`Client::search_at`], retrying a server that does not answer for
    /// `retry_for` at most.
    pub(crate) async fn search_at_within(
        &self,
        link: Option<Arc<crate::route::Link>>,
        cred: &Credentials,
        spec: &SearchSpec,
        retry_for: Duration,
    ) -> Result<SearchStream> {
        let mut req = spec_to_pb(spec, cred);
        // Keep-alives, so that a server that stops mid-search is noticed
        // (`SearchRequest.keep_alive`; an older server sends none), unless
        // switched off (`SEXTANT_SEARCH_KEEP_ALIVE=0`).
        req.keep_alive = asking_keep_alives();
        if prost::Message::encoded_len(&req) > MAX_MESSAGE_BYTES {
            return Err(Error::Fs(FsError::TooBig));
        }
        let addr = link
            .as_ref()
            .map_or_else(|| self.inner.addr.clone(), |l| l.addr.clone());
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        loop {
            let mut grpc = match &link {
                None => self.stream_client(),
                Some(l) => pb::sextant_client::SextantClient::new(l.channel())
                    .max_decoding_message_size(4 * MAX_MESSAGE_BYTES),
            };
            let mut request = tonic::Request::new(req.clone());
            self.inner.authorize(&mut request, "Search", &addr);
            // A server that accepts the call but never answers it (stopped
            // on a connection already open) is not waited for past the
            // retry time (a server that announces keep-alives answers at
            // once, whatever its search waits for).
            let wait = retry_for
                .saturating_sub(started.elapsed())
                .max(MIN_ANSWER_WAIT);
            let failure = match tokio::time::timeout(wait, grpc.search(request)).await {
                Ok(Ok(r)) => {
                    let silent_for = silence_bound_of(r.metadata());
                    return Ok(SearchStream {
                        source: Source::One(Box::new(One {
                            stream: r.into_inner(),
                            addr,
                            again: None,
                            passed: false,
                            silent_for,
                            went_silent: false,
                        })),
                        groups: Vec::new(),
                        done: None,
                    });
                }
                Ok(Err(s)) if s.code() == Code::Unauthenticated => return Err(Error::Auth),
                Ok(Err(s)) => match stream_error(&s, &addr) {
                    e @ Error::Unavailable { .. } => e,
                    e => return Err(e),
                },
                Err(_) => Error::Unavailable {
                    addr: addr.clone(),
                    reason: format!("no answer to a search within {} ms", wait.as_millis()),
                },
            };
            if started.elapsed() + backoff > retry_for {
                return Err(failure);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Every hit of `spec` and the summary (memory: all hits).
    pub async fn search_collect(
        &self,
        cred: &Credentials,
        spec: &SearchSpec,
    ) -> Result<(Vec<SearchHit>, SearchDone)> {
        let started = Instant::now();
        let mut s = self.search(cred, spec).await?;
        let mut all = Vec::new();
        loop {
            match s.next_batch().await {
                Ok(Some(b)) => all.extend(b),
                Ok(None) => break,
                // One server's search broken by its connection after some
                // hits came: none was handed out yet (they are all here),
                // so the whole search is asked again, within the retry
                // time. (A spread search's parts are asked again by
                // `crate::spread`, as far as they can be.)
                Err(e @ Error::Unavailable { .. }) if matches!(s.source, Source::One(_)) => {
                    if started.elapsed() >= self.inner.options.retry_for {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    s = self.search(cred, spec).await?;
                    all.clear();
                }
                Err(e) => return Err(e),
            }
        }
        let done = s.done.take().unwrap_or_default();
        Ok((all, done))
    }

    /// Count and total size of the matches of `expr` under `scope`,
    /// grouped `by` (the server aggregates; no hit crosses the wire).
    pub async fn aggregate(
        &self,
        cred: &Credentials,
        scope: SearchScope,
        expr: Expr,
        by: GroupBy,
    ) -> Result<Aggregation> {
        let mut spec = SearchSpec::new(scope, expr);
        spec.group_by = Some(by);
        let (_, done) = self.search_collect(cred, &spec).await?;
        let mut agg = Aggregation::default();
        agg.total.count = done.count;
        agg.total.size = done.total_size;
        agg.groups = done.groups.into_iter().collect();
        Ok(agg)
    }
}
