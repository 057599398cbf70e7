//! Search on the wire: the query a client sends ([`SearchSpec`]), its
//! validation, its conversion to and from `pb`, the hit order
//! ([`SortSpec`]) and the end-of-search summary ([`SearchDone`]).
//!
//! Invariants:
//! - [`spec_from_pb`] and [`validate_expr`] accept only queries the engine
//!   runs without surprise: no inverted range, patterns and paths at most
//!   [`PATH_MAX`] bytes without NUL, xattr names and values within the
//!   file-system limits, a non-empty type list, perm modes within `07777`,
//!   and a bounded tree ([`MAX_EXPR_DEPTH`] levels, [`MAX_EXPR_NODES`]
//!   nodes) so every recursive walk of it is bounded. A violation is a
//!   [`QueryError`] naming the field, sent back as `EINVAL`.
//! - Conversion is lossless for valid queries: `from_pb(to_pb(x)) == x`.

use crate::{attr_from_pb, attr_to_pb, ftype_from_pb, ftype_to_pb, soid_from_pb, soid_to_pb};
use crate::{pb, PATH_MAX};
use sextant_engine::bloom::TimeAttr;
use sextant_engine::search::{Expr, Pred};
use sextant_engine::search::{GroupBy, GroupKey, PermMatch, SearchHit, Totals};
use sextant_types::{Credentials, FsError, Nanos, Soid, SoidRange, XATTR_NAME_MAX, XATTR_SIZE_MAX};
use std::cmp::Ordering;

/// Deepest expression tree accepted.
pub const MAX_EXPR_DEPTH: usize = 64;
/// Most nodes (operators and predicates) in one expression.
pub const MAX_EXPR_NODES: usize = 10_000;
/// Most hits per batch.
pub const MAX_BATCH: u32 = 4096;
/// Hits per batch when the request does not say.
pub const DEFAULT_BATCH: u32 = 256;
/// A batch is sent once its hits or groups take about this many bytes, so
/// every message stays well under [`crate::MAX_MESSAGE_BYTES`] (a path is
/// at most 4 KiB).
pub const MAX_BATCH_BYTES: usize = 256 * 1024;
/// Most hits a sorted search keeps (its `limit`).
pub const MAX_SORTED: u64 = 1 << 20;
/// Ranges one search request may name at most (a cluster's tables, one
/// server's share of them).
pub const MAX_RANGES: usize = 1 << 16;
/// Longest `forward_to` address.
pub const MAX_ADDRESS: usize = 1024;

/// A malformed query; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid query: {0}")]
pub struct QueryError(pub String);

impl QueryError {
    fn new(s: impl Into<String>) -> QueryError {
        QueryError(s.into())
    }

    /// As the wire's `Error` (`EINVAL` with this message).
    pub fn to_pb(&self) -> pb::Error {
        pb::Error {
            errno: FsError::Invalid.errno(),
            message: self.to_string(),
        }
    }
}

/// Where a search starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchScope {
    /// An absolute path in the namespace.
    Path(Vec<u8>),
    Soid(Soid),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Path,
    Size,
    Mtime,
    Atime,
    Ctime,
    Name,
}

/// Sort order of the hits (ties broken by path, so it is total).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortSpec {
    pub key: SortKey,
    pub descending: bool,
}

impl SortSpec {
    pub fn cmp(&self, a: &SearchHit, b: &SearchHit) -> Ordering {
        let o = match self.key {
            SortKey::Path => Ordering::Equal,
            SortKey::Size => a.attr.size.cmp(&b.attr.size),
            SortKey::Mtime => a.attr.mtime.cmp(&b.attr.mtime),
            SortKey::Atime => a.attr.atime.cmp(&b.attr.atime),
            SortKey::Ctime => a.attr.ctime.cmp(&b.attr.ctime),
            SortKey::Name => a.name().cmp(b.name()),
        }
        .then_with(|| a.path.cmp(&b.path));
        if self.descending {
            o.reverse()
        } else {
            o
        }
    }
}

/// Keeps the first `limit` hits in `sort` order seen so far, in memory
/// O(limit) (amortised: it sorts and truncates when it holds 2 × limit).
/// The hits it keeps get paths of their own: an engine hit's path is a
/// slice of its table's path buffer, which one kept hit would keep alive.
pub struct TopN {
    sort: SortSpec,
    limit: usize,
    hits: Vec<SearchHit>,
}

impl TopN {
    pub fn new(sort: SortSpec, limit: usize) -> TopN {
        TopN {
            sort,
            limit,
            hits: Vec::new(),
        }
    }

    pub fn push(&mut self, hit: SearchHit) {
        self.hits.push(hit);
        if self.limit != usize::MAX && self.hits.len() >= self.limit.saturating_mul(2).max(64) {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let s = self.sort;
        self.hits.sort_by(|a, b| s.cmp(a, b));
        self.hits.truncate(self.limit);
        if self.limit != usize::MAX {
            self.hits.iter_mut().for_each(SearchHit::detach);
        }
    }

    /// The kept hits, in order.
    pub fn finish(mut self) -> Vec<SearchHit> {
        self.compact();
        self.hits
    }
}

/// A search request, decoded and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchSpec {
    pub scope: SearchScope,
    pub expr: Expr,
    /// 0: no limit.
    pub limit: u64,
    /// 0: [`DEFAULT_BATCH`].
    pub batch_size: u32,
    pub sort: Option<SortSpec>,
    pub count_only: bool,
    pub group_by: Option<GroupBy>,
    /// A spread namespace: the SOID ranges this server searches (empty:
    /// every table it holds). See `SearchRequest.ranges`.
    pub ranges: Vec<SoidRange>,
    /// Run on the server at this address, through the one asked (empty:
    /// there). See `SearchRequest.forward_to`.
    pub forward_to: String,
    /// Answered for the whole namespace by the server asked (see
    /// `SearchRequest.gather`).
    pub gather: bool,
}

impl SearchSpec {
    /// Every hit of `expr` under the path `scope`, unsorted.
    pub fn new(scope: SearchScope, expr: Expr) -> SearchSpec {
        SearchSpec {
            scope,
            expr,
            limit: 0,
            batch_size: 0,
            sort: None,
            count_only: false,
            group_by: None,
            ranges: Vec::new(),
            forward_to: String::new(),
            gather: false,
        }
    }

    /// The engine's limit (`usize::MAX` for none).
    pub fn engine_limit(&self) -> usize {
        match self.limit {
            0 => usize::MAX,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }

    /// Whether a server gathers this search for the whole namespace when
    /// asked (`SearchRequest.gather`): totals (`count_only`, `group_by`)
    /// of every match (no limit), or the scope root alone (a depth limit
    /// of 0: at most one hit, whatever the limit); unsorted, and not a
    /// part of a spread search already (`ranges`, `forward_to`).
    pub fn gatherable(&self) -> bool {
        self.ranges.is_empty()
            && self.forward_to.is_empty()
            && self.sort.is_none()
            && ((self.engine_limit() == usize::MAX && (self.count_only || self.group_by.is_some()))
                || sextant_engine::search::plan(&self.expr).max_depth == 0)
    }

    pub fn batch(&self) -> usize {
        match self.batch_size {
            0 => DEFAULT_BATCH as usize,
            n => n.min(MAX_BATCH) as usize,
        }
    }

    /// Checks every field (see the module doc).
    pub fn validate(&self) -> Result<(), QueryError> {
        match &self.scope {
            SearchScope::Path(p) => {
                if p.first() != Some(&b'/') {
                    return Err(QueryError::new("scope.path must be absolute"));
                }
                bytes_field(p, PATH_MAX, "scope.path")?;
            }
            SearchScope::Soid(_) => {}
        }
        if self.batch_size > MAX_BATCH {
            return Err(QueryError::new(format!(
                "batch_size {} is over {MAX_BATCH}",
                self.batch_size
            )));
        }
        if self.sort.is_some() && (self.limit == 0 || self.limit > MAX_SORTED) {
            return Err(QueryError::new(format!(
                "sort needs a limit between 1 and {MAX_SORTED}"
            )));
        }
        if self.count_only && self.group_by.is_some() {
            return Err(QueryError::new(
                "count_only and group_by exclude each other",
            ));
        }
        validate_expr(&self.expr)
    }
}

/// How long a search spread over the servers chases ranges whose tables
/// keep moving, with no round searching any of them, before it fails (the
/// client's spread search and a server gathering one: [`chase_progressed`]),
/// and how long a server waits for another's directories.
pub const CHASE_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a round of a spread search progressed: the SOID ranges it left
/// to chase (`not_held`, the parts of `wanted` whose tables had moved)
/// cover fewer SOIDs than it was asked for (`wanted`), so some table was
/// searched. A search fails only after [`CHASE_FOR`] without progress, not
/// [`CHASE_FOR`] after it started: while many tables move (a rebalance
/// after servers joined, thousands of tables), every round searches some
/// of them and the rest are chased again, which can take longer than
/// [`CHASE_FOR`] in all. (A fixed bound failed a search of 10M files
/// during a rebalance: "57 SOID ranges kept moving between servers for
/// 30 s".) `not_held` never covers more than `wanted` (each part names
/// only ranges it was given), so the ranges still wanted shrink at every
/// progress: the chase ends.
pub fn chase_progressed(wanted: &[SoidRange], not_held: &[SoidRange]) -> bool {
    soids_in(not_held) < soids_in(wanted)
}

/// How many SOIDs `ranges` (disjoint) hold, exactly: as (carries, low
/// 128 bits) — the whole space holds 2^128.
fn soids_in(ranges: &[SoidRange]) -> (u64, u128) {
    let mut total = (0u64, 0u128);
    let mut add = |n: u128| {
        let (low, carried) = total.1.overflowing_add(n);
        total = (total.0 + u64::from(carried), low);
    };
    for r in ranges {
        add(r.last.as_u128().saturating_sub(r.first.as_u128()));
        add(1);
    }
    total
}
/// Between rounds of a spread search (a table on its way to its new
/// holder), and between attempts at a server that did not answer.
pub const ROUND_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// How often a server sends a keep-alive on a search stream that asked
/// for them (`SearchRequest.keep_alive`) and carries nothing else: after
/// this much silence, again and again, from the moment the call is
/// answered (the search may wait for its turn) until its last batch. Sent
/// by the server's runtime, not by the search: a broad scan that finds
/// nothing for minutes, or a part waiting for another server's
/// directories (up to [`CHASE_FOR`]), keeps its stream alive. 2 s: a
/// message of a few bytes per part every 2 s costs nothing, and leaves
/// [`SILENT_FOR`] room for five of them.
pub const KEEP_ALIVE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// The response header of a `Search` call by which a server announces
/// keep-alives (its value: the period in milliseconds). An older server
/// sends neither: its silence is not bounded (see [`silence_bound`]).
pub const KEEP_ALIVE_HEADER: &str = "sextant-keep-alive-ms";
/// A search stream whose server announced keep-alives and that brought
/// nothing (no hit, no keep-alive, no end) for this long is taken for a
/// server that stopped (SIGSTOP, a hung machine, a network partition
/// that resets nothing): five keep-alive periods missed in a row, which a
/// loaded runtime or a TCP retransmission or two (1 s, then 2 s, 4 s) do
/// not explain. 10 s is also longer than a server's lease (6 s by
/// default): by the time a part is given up, the stopped server's tables
/// are failing over, and its ranges can be asked of their new holders
/// within [`CHASE_FOR`]. (Without the bound, an open part waited for the
/// HTTP/2 keep-alive of the client's channel, 50 s, and a server
/// gathering totals as long as the other stayed stopped.)
pub const SILENT_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a search stream may bring nothing before its server is taken
/// for stopped, given the value of its [`KEEP_ALIVE_HEADER`] (`None`: no
/// header). `None` — no bound — when the server announced none (an older
/// server: a long search's silence is normal there) or something
/// unreadable; otherwise [`SILENT_FOR`], or five of the announced periods
/// when that is longer (a server sending them less often).
pub fn silence_bound(announced: Option<&str>) -> Option<std::time::Duration> {
    let ms: u64 = announced?.trim().parse().ok()?;
    if ms == 0 {
        return None;
    }
    let five = std::time::Duration::from_millis(ms.saturating_mul(5));
    Some(SILENT_FOR.max(five))
}

/// [`silence_bound`] of a `Search` call's response headers (what its
/// server announced in [`KEEP_ALIVE_HEADER`], if anything).
pub fn silence_bound_of(headers: &tonic::metadata::MetadataMap) -> Option<std::time::Duration> {
    silence_bound(headers.get(KEEP_ALIVE_HEADER).and_then(|v| v.to_str().ok()))
}

/// `ranges` for an error message: the first four, and how many more.
pub fn ranges_named(ranges: &[SoidRange]) -> String {
    const SHOWN: usize = 4;
    let mut s: Vec<String> = ranges
        .iter()
        .take(SHOWN)
        .map(|r| format!("{r:?}"))
        .collect();
    if ranges.len() > SHOWN {
        s.push(format!("and {} more", ranges.len() - SHOWN));
    }
    if s.is_empty() {
        return "none".into();
    }
    s.join(", ")
}

/// The SOIDs a query below `root` can match: a query that matches nothing
/// below its scope (depth 0: `find P -maxdepth 0`, the starting point
/// `stats` and `du` count themselves) only `root` itself, so only its
/// holder is asked; otherwise every SOID (a subtree is spread anywhere).
pub fn matching_ranges(root: Soid, expr: &Expr) -> SoidRange {
    if sextant_engine::search::plan(expr).max_depth == 0 {
        SoidRange {
            first: root,
            last: root,
        }
    } else {
        SoidRange::ALL
    }
}

/// Adds `part` to `into`, saturating: totals of several servers' parts.
pub fn add_totals(into: &mut Totals, part: &Totals) {
    into.count = into.count.saturating_add(part.count);
    into.size = into.size.saturating_add(part.size);
}

/// What a finished search reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchDone {
    /// Hits (per path) and their total size.
    pub count: u64,
    pub total_size: u64,
    /// With `group_by`: count and size per group, in key order.
    pub groups: Vec<(GroupKey, Totals)>,
    pub tables: u64,
    pub tables_pruned: u64,
    pub candidates: u64,
    /// Tables skipped by their exit sets (counted in `tables`).
    pub tables_out_of_scope: u64,
    /// Tables added up from their maintained summaries (counted in
    /// `tables`).
    pub tables_summarized: u64,
    /// Ranges asked but held by other servers (not searched here).
    pub not_held: Vec<SoidRange>,
    /// The whole namespace's answer (`SearchDone.gathered`).
    pub gathered: bool,
}

impl SearchDone {
    /// Adds the work counters of another server's part (tables visited,
    /// pruned, out of scope, summarized; candidates) to these.
    pub fn add_work(&mut self, part: &SearchDone) {
        self.tables += part.tables;
        self.tables_pruned += part.tables_pruned;
        self.candidates += part.candidates;
        self.tables_out_of_scope += part.tables_out_of_scope;
        self.tables_summarized += part.tables_summarized;
    }
}

fn bytes_field(b: &[u8], max: usize, what: &str) -> Result<(), QueryError> {
    if b.len() > max {
        return Err(QueryError::new(format!(
            "{what} is {} bytes, over {max}",
            b.len()
        )));
    }
    if b.contains(&0) {
        return Err(QueryError::new(format!("{what} contains a NUL byte")));
    }
    Ok(())
}

fn range<T: PartialOrd + std::fmt::Display>(lo: T, hi: T, what: &str) -> Result<(), QueryError> {
    if lo > hi {
        return Err(QueryError::new(format!(
            "{what} range is inverted ({lo} > {hi})"
        )));
    }
    Ok(())
}

/// Checks an expression (see the module doc).
pub fn validate_expr(e: &Expr) -> Result<(), QueryError> {
    let mut nodes = 0usize;
    validate_node(e, 1, &mut nodes)
}

fn validate_node(e: &Expr, depth: usize, nodes: &mut usize) -> Result<(), QueryError> {
    *nodes += 1;
    if *nodes > MAX_EXPR_NODES {
        return Err(QueryError::new(format!(
            "the expression has over {MAX_EXPR_NODES} nodes"
        )));
    }
    if depth > MAX_EXPR_DEPTH {
        return Err(QueryError::new(format!(
            "the expression is nested over {MAX_EXPR_DEPTH} levels deep"
        )));
    }
    match e {
        Expr::True | Expr::False => Ok(()),
        Expr::And(xs) | Expr::Or(xs) => xs
            .iter()
            .try_for_each(|x| validate_node(x, depth + 1, nodes)),
        Expr::Not(x) => validate_node(x, depth + 1, nodes),
        Expr::Pred(p) => validate_pred(p),
    }
}

fn validate_pred(p: &Pred) -> Result<(), QueryError> {
    match p {
        Pred::Name { pattern, .. } => bytes_field(pattern, PATH_MAX, "name.pattern"),
        Pred::Path { pattern, .. } => bytes_field(pattern, PATH_MAX, "path.pattern"),
        Pred::Type(ts) => {
            if ts.is_empty() {
                return Err(QueryError::new("type: the list of types is empty"));
            }
            Ok(())
        }
        Pred::Uid { lo, hi } => range(lo, hi, "uid"),
        Pred::Gid { lo, hi } => range(lo, hi, "gid"),
        Pred::Size { lo, hi } => range(lo, hi, "size"),
        Pred::Time { lo, hi, .. } => range(lo.0, hi.0, "time"),
        Pred::Perm(PermMatch::Exact(m) | PermMatch::All(m) | PermMatch::Any(m)) => {
            if *m > 0o7777 {
                return Err(QueryError::new(format!("perm.mode {m:o} is over 7777")));
            }
            Ok(())
        }
        Pred::Links { lo, hi } => range(lo, hi, "links"),
        Pred::Empty | Pred::Soid(_) => Ok(()),
        Pred::XattrExists(k) => xattr_name(k),
        Pred::XattrEq(k, v) => {
            xattr_name(k)?;
            if v.len() > XATTR_SIZE_MAX {
                return Err(QueryError::new(format!(
                    "xattr.value is {} bytes, over {XATTR_SIZE_MAX}",
                    v.len()
                )));
            }
            Ok(())
        }
        Pred::Depth { min, max } => range(min, max, "depth"),
    }
}

fn xattr_name(k: &[u8]) -> Result<(), QueryError> {
    if k.is_empty() {
        return Err(QueryError::new("xattr.name is empty"));
    }
    bytes_field(k, XATTR_NAME_MAX, "xattr.name")
}

// ---- to the wire ---------------------------------------------------------------

fn time_field_to_pb(t: TimeAttr) -> pb::TimeField {
    match t {
        TimeAttr::Atime => pb::TimeField::Atime,
        TimeAttr::Mtime => pb::TimeField::Mtime,
        TimeAttr::Ctime => pb::TimeField::Ctime,
    }
}

pub fn group_by_to_pb(g: GroupBy) -> pb::GroupBy {
    match g {
        GroupBy::Uid => pb::GroupBy::Uid,
        GroupBy::Gid => pb::GroupBy::Gid,
        GroupBy::Type => pb::GroupBy::Type,
        GroupBy::Extension => pb::GroupBy::Extension,
        GroupBy::Directory => pb::GroupBy::Directory,
    }
}

fn pred_to_pb(p: &Pred) -> pb::query_pred::Pred {
    use pb::query_pred::Pred as P;
    match p {
        Pred::Name { pattern, glob, ci } => P::Name(pb::NamePred {
            pattern: pattern.to_vec(),
            glob: *glob,
            case_insensitive: *ci,
        }),
        Pred::Path { pattern, ci } => P::Path(pb::PathPred {
            pattern: pattern.to_vec(),
            case_insensitive: *ci,
        }),
        Pred::Type(ts) => P::Type(pb::TypePred {
            types: ts.iter().map(|t| ftype_to_pb(*t) as i32).collect(),
        }),
        Pred::Uid { lo, hi } => P::Uid(pb::U32Range { lo: *lo, hi: *hi }),
        Pred::Gid { lo, hi } => P::Gid(pb::U32Range { lo: *lo, hi: *hi }),
        Pred::Size { lo, hi } => P::Size(pb::U64Range { lo: *lo, hi: *hi }),
        Pred::Time { which, lo, hi } => P::Time(pb::TimePred {
            field: time_field_to_pb(*which) as i32,
            lo_ns: lo.0,
            hi_ns: hi.0,
        }),
        Pred::Perm(m) => {
            let (how, mode) = match m {
                PermMatch::Exact(m) => (pb::PermHow::Exact, *m),
                PermMatch::All(m) => (pb::PermHow::All, *m),
                PermMatch::Any(m) => (pb::PermHow::Any, *m),
            };
            P::Perm(pb::PermPred {
                how: how as i32,
                mode: mode as u32,
            })
        }
        Pred::Links { lo, hi } => P::Links(pb::U32Range { lo: *lo, hi: *hi }),
        Pred::Empty => P::Empty(pb::Empty {}),
        Pred::Soid(s) => P::Soid(soid_to_pb(*s)),
        Pred::XattrExists(k) => P::Xattr(pb::XattrPred {
            name: k.to_vec(),
            value: None,
        }),
        Pred::XattrEq(k, v) => P::Xattr(pb::XattrPred {
            name: k.to_vec(),
            value: Some(v.to_vec()),
        }),
        Pred::Depth { min, max } => P::Depth(pb::U32Range { lo: *min, hi: *max }),
    }
}

pub fn expr_to_pb(e: &Expr) -> pb::QueryExpr {
    use pb::query_expr::Node;
    let node = match e {
        Expr::True => Node::Constant(true),
        Expr::False => Node::Constant(false),
        Expr::And(xs) => Node::And(pb::QueryList {
            items: xs.iter().map(expr_to_pb).collect(),
        }),
        Expr::Or(xs) => Node::Or(pb::QueryList {
            items: xs.iter().map(expr_to_pb).collect(),
        }),
        Expr::Not(x) => Node::Not(Box::new(expr_to_pb(x))),
        Expr::Pred(p) => Node::Pred(pb::QueryPred {
            pred: Some(pred_to_pb(p)),
        }),
    };
    pb::QueryExpr { node: Some(node) }
}

pub fn spec_to_pb(spec: &SearchSpec, cred: &Credentials) -> pb::SearchRequest {
    use pb::search_request::Scope;
    pb::SearchRequest {
        cred: Some(crate::cred_to_pb(cred)),
        scope: Some(match &spec.scope {
            SearchScope::Path(p) => Scope::Path(p.clone()),
            SearchScope::Soid(s) => Scope::Soid(soid_to_pb(*s)),
        }),
        expr: Some(expr_to_pb(&spec.expr)),
        limit: spec.limit,
        batch_size: spec.batch_size,
        sort: spec.sort.map(|s| pb::SearchSort {
            key: match s.key {
                SortKey::Path => pb::SortKey::Path,
                SortKey::Size => pb::SortKey::Size,
                SortKey::Mtime => pb::SortKey::Mtime,
                SortKey::Atime => pb::SortKey::Atime,
                SortKey::Ctime => pb::SortKey::Ctime,
                SortKey::Name => pb::SortKey::Name,
            } as i32,
            descending: s.descending,
        }),
        count_only: spec.count_only,
        group_by: spec.group_by.map(|g| group_by_to_pb(g) as i32),
        ranges: spec.ranges.iter().map(span_to_pb).collect(),
        forward_to: spec.forward_to.clone(),
        gather: spec.gather,
        // (Asked by the client's transport, not part of the query.)
        keep_alive: false,
    }
}

pub fn span_to_pb(r: &SoidRange) -> pb::SoidSpan {
    pb::SoidSpan {
        first: Some(soid_to_pb(r.first)),
        last: Some(soid_to_pb(r.last)),
    }
}

/// A range from the wire; `None` when a bound is missing or they are out
/// of order.
pub fn span_from_pb(r: &pb::SoidSpan) -> Option<SoidRange> {
    let first = soid_from_pb(r.first.as_ref()).ok()?;
    let last = soid_from_pb(r.last.as_ref()).ok()?;
    SoidRange::new(first, last)
}

pub fn hit_to_pb(h: &SearchHit) -> pb::SearchHit {
    pb::SearchHit {
        path: h.path.clone(),
        attr: Some(attr_to_pb(&h.attr)),
        depth: h.depth,
    }
}

pub fn hit_from_pb(h: pb::SearchHit) -> Result<SearchHit, FsError> {
    let attr = attr_from_pb(h.attr.as_ref().ok_or(FsError::Invalid)?)?;
    Ok(SearchHit {
        path: h.path,
        soid: attr.soid,
        attr,
        depth: h.depth,
    })
}

pub fn group_key_to_pb(k: &GroupKey) -> pb::search_group::Key {
    use pb::search_group::Key;
    match k {
        GroupKey::Uid(u) => Key::Uid(*u),
        GroupKey::Gid(g) => Key::Gid(*g),
        GroupKey::Type(t) => Key::Type(ftype_to_pb(*t) as i32),
        GroupKey::Extension(e) => Key::Extension(e.to_vec()),
        GroupKey::Directory(d) => Key::Directory(d.to_vec()),
    }
}

pub fn group_key_from_pb(k: Option<pb::search_group::Key>) -> Result<GroupKey, FsError> {
    use pb::search_group::Key;
    Ok(match k.ok_or(FsError::Invalid)? {
        Key::Uid(u) => GroupKey::Uid(u),
        Key::Gid(g) => GroupKey::Gid(g),
        Key::Type(t) => GroupKey::Type(ftype_from_pb(t)?),
        Key::Extension(e) => GroupKey::Extension(e.into()),
        Key::Directory(d) => GroupKey::Directory(d.into()),
    })
}

pub fn group_to_pb(k: &GroupKey, t: &Totals) -> pb::SearchGroup {
    pb::SearchGroup {
        key: Some(group_key_to_pb(k)),
        count: t.count,
        size: t.size,
    }
}

pub fn group_from_pb(g: pb::SearchGroup) -> Result<(GroupKey, Totals), FsError> {
    Ok((
        group_key_from_pb(g.key)?,
        Totals {
            count: g.count,
            size: g.size,
        },
    ))
}

/// The summary without its groups (they travel in batches).
pub fn done_to_pb(d: &SearchDone) -> pb::SearchDone {
    pb::SearchDone {
        count: d.count,
        total_size: d.total_size,
        tables: d.tables,
        tables_pruned: d.tables_pruned,
        candidates: d.candidates,
        tables_out_of_scope: d.tables_out_of_scope,
        tables_summarized: d.tables_summarized,
        not_held: d.not_held.iter().map(span_to_pb).collect(),
        gathered: d.gathered,
    }
}

/// The summary; `groups` are added from the batches by the receiver.
/// Malformed `not_held` ranges are dropped (the asker then misses them:
/// only a broken server sends them).
pub fn done_from_pb(d: pb::SearchDone) -> SearchDone {
    SearchDone {
        count: d.count,
        total_size: d.total_size,
        groups: Vec::new(),
        tables: d.tables,
        tables_pruned: d.tables_pruned,
        candidates: d.candidates,
        tables_out_of_scope: d.tables_out_of_scope,
        tables_summarized: d.tables_summarized,
        not_held: d.not_held.iter().filter_map(span_from_pb).collect(),
        gathered: d.gathered,
    }
}

// ---- from the wire -------------------------------------------------------------

fn time_field_from_pb(v: i32) -> Result<TimeAttr, QueryError> {
    match pb::TimeField::try_from(v) {
        Ok(pb::TimeField::Atime) => Ok(TimeAttr::Atime),
        Ok(pb::TimeField::Mtime) => Ok(TimeAttr::Mtime),
        Ok(pb::TimeField::Ctime) => Ok(TimeAttr::Ctime),
        Err(_) => Err(QueryError::new(format!("time.field {v} is unknown"))),
    }
}

pub fn group_by_from_pb(v: i32) -> Result<GroupBy, QueryError> {
    Ok(match pb::GroupBy::try_from(v) {
        Ok(pb::GroupBy::Uid) => GroupBy::Uid,
        Ok(pb::GroupBy::Gid) => GroupBy::Gid,
        Ok(pb::GroupBy::Type) => GroupBy::Type,
        Ok(pb::GroupBy::Extension) => GroupBy::Extension,
        Ok(pb::GroupBy::Directory) => GroupBy::Directory,
        Err(_) => return Err(QueryError::new(format!("group_by {v} is unknown"))),
    })
}

fn pred_from_pb(p: &pb::QueryPred) -> Result<Pred, QueryError> {
    use pb::query_pred::Pred as P;
    let p = p
        .pred
        .as_ref()
        .ok_or_else(|| QueryError::new("a predicate is unset"))?;
    Ok(match p {
        P::Name(n) => Pred::Name {
            pattern: n.pattern.as_slice().into(),
            glob: n.glob,
            ci: n.case_insensitive,
        },
        P::Path(n) => Pred::Path {
            pattern: n.pattern.as_slice().into(),
            ci: n.case_insensitive,
        },
        P::Type(t) => Pred::Type(
            t.types
                .iter()
                .map(|v| {
                    ftype_from_pb(*v)
                        .map_err(|_| QueryError::new(format!("type: file type {v} is unknown")))
                })
                .collect::<Result<_, _>>()?,
        ),
        P::Uid(r) => Pred::Uid { lo: r.lo, hi: r.hi },
        P::Gid(r) => Pred::Gid { lo: r.lo, hi: r.hi },
        P::Size(r) => Pred::Size { lo: r.lo, hi: r.hi },
        P::Time(t) => Pred::Time {
            which: time_field_from_pb(t.field)?,
            lo: Nanos(t.lo_ns),
            hi: Nanos(t.hi_ns),
        },
        P::Perm(m) => {
            let mode = u16::try_from(m.mode)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| QueryError::new(format!("perm.mode {:o} is over 7777", m.mode)))?;
            Pred::Perm(match pb::PermHow::try_from(m.how) {
                Ok(pb::PermHow::Exact) => PermMatch::Exact(mode),
                Ok(pb::PermHow::All) => PermMatch::All(mode),
                Ok(pb::PermHow::Any) => PermMatch::Any(mode),
                Err(_) => return Err(QueryError::new(format!("perm.how {} is unknown", m.how))),
            })
        }
        P::Links(r) => Pred::Links { lo: r.lo, hi: r.hi },
        P::Empty(_) => Pred::Empty,
        P::Soid(s) => Pred::Soid(soid_from_pb(Some(s)).map_err(|_| QueryError::new("soid"))?),
        P::Xattr(x) => match &x.value {
            None => Pred::XattrExists(x.name.as_slice().into()),
            Some(v) => Pred::XattrEq(x.name.as_slice().into(), v.as_slice().into()),
        },
        P::Depth(r) => Pred::Depth {
            min: r.lo,
            max: r.hi,
        },
    })
}

/// Structural conversion; depth-bounded (prost bounds decoding recursion
/// too, at 100).
fn expr_from_pb_at(e: &pb::QueryExpr, depth: usize) -> Result<Expr, QueryError> {
    use pb::query_expr::Node;
    if depth > MAX_EXPR_DEPTH {
        return Err(QueryError::new(format!(
            "the expression is nested over {MAX_EXPR_DEPTH} levels deep"
        )));
    }
    let node = e
        .node
        .as_ref()
        .ok_or_else(|| QueryError::new("an expression node is unset"))?;
    Ok(match node {
        Node::Constant(true) => Expr::True,
        Node::Constant(false) => Expr::False,
        Node::And(l) => Expr::And(
            l.items
                .iter()
                .map(|x| expr_from_pb_at(x, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Node::Or(l) => Expr::Or(
            l.items
                .iter()
                .map(|x| expr_from_pb_at(x, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Node::Not(x) => Expr::Not(Box::new(expr_from_pb_at(x, depth + 1)?)),
        Node::Pred(p) => Expr::Pred(pred_from_pb(p)?),
    })
}

/// Decodes and validates an expression.
pub fn expr_from_pb(e: &pb::QueryExpr) -> Result<Expr, QueryError> {
    let x = expr_from_pb_at(e, 1)?;
    validate_expr(&x)?;
    Ok(x)
}

/// Decodes and validates a whole request.
pub fn spec_from_pb(r: pb::SearchRequest) -> Result<(Credentials, SearchSpec), QueryError> {
    use pb::search_request::Scope;
    let cred = crate::cred_from_pb(r.cred).map_err(|_| {
        QueryError::new("cred is missing or has too many supplementary groups".to_string())
    })?;
    let scope = match r.scope {
        Some(Scope::Path(p)) => SearchScope::Path(p),
        Some(Scope::Soid(s)) => {
            SearchScope::Soid(soid_from_pb(Some(&s)).map_err(|_| QueryError::new("scope.soid"))?)
        }
        None => return Err(QueryError::new("scope is unset (give a path or a SOID)")),
    };
    let expr = match &r.expr {
        Some(e) => expr_from_pb(e)?,
        None => Expr::True,
    };
    let sort = match r.sort {
        None => None,
        Some(s) => Some(SortSpec {
            key: match pb::SortKey::try_from(s.key) {
                Ok(pb::SortKey::Path) => SortKey::Path,
                Ok(pb::SortKey::Size) => SortKey::Size,
                Ok(pb::SortKey::Mtime) => SortKey::Mtime,
                Ok(pb::SortKey::Atime) => SortKey::Atime,
                Ok(pb::SortKey::Ctime) => SortKey::Ctime,
                Ok(pb::SortKey::Name) => SortKey::Name,
                Err(_) => return Err(QueryError::new(format!("sort.key {} is unknown", s.key))),
            },
            descending: s.descending,
        }),
    };
    let ranges = r
        .ranges
        .iter()
        .map(|s| {
            span_from_pb(s).ok_or_else(|| QueryError::new("a range without bounds or reversed"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ranges.len() > MAX_RANGES {
        return Err(QueryError::new(format!(
            "{} ranges, over {MAX_RANGES}",
            ranges.len()
        )));
    }
    if !ranges.is_empty() && matches!(scope, SearchScope::Path(_)) {
        return Err(QueryError::new("a search of ranges needs a SOID scope"));
    }
    if r.forward_to.len() > MAX_ADDRESS {
        return Err(QueryError::new(format!(
            "forward_to is {} bytes, over {MAX_ADDRESS}",
            r.forward_to.len()
        )));
    }
    let spec = SearchSpec {
        scope,
        expr,
        limit: r.limit,
        batch_size: r.batch_size,
        sort,
        count_only: r.count_only,
        group_by: r.group_by.map(group_by_from_pb).transpose()?,
        ranges,
        forward_to: r.forward_to,
        gather: r.gather,
    };
    spec.validate()?;
    Ok((cred, spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round progressed when it left fewer SOIDs to chase than it was
    /// asked for — counted exactly, the whole space included.
    #[test]
    fn a_round_progressed_when_it_left_fewer_soids_to_chase() {
        let r = |first: u128, last: u128| SoidRange {
            first: Soid::from_u128(first),
            last: Soid::from_u128(last),
        };
        let all = [SoidRange::ALL];
        // Nothing searched: the same ranges back, or the same SOIDs cut
        // in pieces by the tables that moved.
        assert!(!chase_progressed(&all, &all));
        assert!(!chase_progressed(&all, &[r(0, 9), r(10, u128::MAX)]));
        // One SOID of the whole space searched (2^128 - 1 left).
        assert!(chase_progressed(&all, &[r(1, u128::MAX)]));
        assert!(chase_progressed(&all, &[r(0, 9), r(11, u128::MAX)]));
        assert!(chase_progressed(&all, &[]));
        assert!(chase_progressed(&[r(5, 9), r(20, 29)], &[r(20, 29)]));
        assert!(!chase_progressed(
            &[r(5, 9), r(20, 29)],
            &[r(5, 9), r(20, 29)]
        ));
        assert!(!chase_progressed(&[], &[]));
    }

    /// Every counter of the summary survives the wire (groups travel in
    /// batches of their own).
    #[test]
    fn search_done_round_trips() {
        let d = SearchDone {
            count: 1,
            total_size: 2,
            groups: Vec::new(),
            tables: 3,
            tables_pruned: 4,
            candidates: 5,
            tables_out_of_scope: 6,
            tables_summarized: 7,
            not_held: vec![SoidRange::ALL],
            gathered: true,
        };
        assert_eq!(done_from_pb(done_to_pb(&d)), d);
    }
    use sextant_types::FileType;

    fn everything() -> Expr {
        let p = Expr::Pred;
        Expr::And(vec![
            Expr::Or(vec![
                Expr::name(b"*.c"),
                Expr::iname(b"READ*"),
                p(Pred::Name {
                    pattern: b"x".as_slice().into(),
                    glob: false,
                    ci: false,
                }),
                Expr::path(b"/a/*"),
            ]),
            Expr::not(p(Pred::Type(vec![FileType::Directory, FileType::Symlink]))),
            p(Pred::Uid { lo: 1, hi: 2 }),
            p(Pred::Gid { lo: 3, hi: 3 }),
            p(Pred::Size {
                lo: 0,
                hi: u64::MAX,
            }),
            p(Pred::Time {
                which: TimeAttr::Ctime,
                lo: Nanos(-5),
                hi: Nanos(i64::MAX),
            }),
            p(Pred::Perm(PermMatch::Any(0o111))),
            p(Pred::Perm(PermMatch::All(0o4000))),
            p(Pred::Perm(PermMatch::Exact(0o644))),
            p(Pred::Links { lo: 2, hi: 9 }),
            p(Pred::Empty),
            p(Pred::Soid(Soid::from_u128(u128::MAX - 3))),
            p(Pred::XattrExists(b"user.a".as_slice().into())),
            p(Pred::XattrEq(
                b"user.b".as_slice().into(),
                b"".as_slice().into(),
            )),
            p(Pred::Depth { min: 1, max: 3 }),
            Expr::True,
            Expr::False,
        ])
    }

    #[test]
    fn requests_round_trip() {
        let mut spec = SearchSpec::new(SearchScope::Path(b"/x".to_vec()), everything());
        spec.limit = 7;
        spec.batch_size = 9;
        spec.count_only = false;
        spec.sort = Some(SortSpec {
            key: SortKey::Mtime,
            descending: true,
        });
        spec.group_by = Some(GroupBy::Extension);
        let cred = Credentials {
            uid: 5,
            gid: 6,
            groups: vec![7],
        };
        let (c, back) = spec_from_pb(spec_to_pb(&spec, &cred)).unwrap();
        assert_eq!(c, cred);
        assert_eq!(back, spec);
        spec.scope = SearchScope::Soid(Soid::from_u128(77));
        spec.group_by = None;
        spec.count_only = true;
        assert_eq!(spec_from_pb(spec_to_pb(&spec, &cred)).unwrap().1, spec);
    }

    #[test]
    fn malformed_requests_name_the_field() {
        let cred = Credentials {
            uid: 0,
            gid: 0,
            groups: vec![],
        };
        let bad = |e: Expr| {
            let spec = SearchSpec::new(SearchScope::Path(b"/".to_vec()), e);
            spec_from_pb(spec_to_pb(&spec, &cred)).unwrap_err().0
        };
        assert!(bad(Expr::Pred(Pred::Size { lo: 5, hi: 4 })).contains("size"));
        assert!(bad(Expr::Pred(Pred::Uid { lo: 5, hi: 4 })).contains("uid"));
        assert!(bad(Expr::Pred(Pred::Time {
            which: TimeAttr::Mtime,
            lo: Nanos(2),
            hi: Nanos(1)
        }))
        .contains("time"));
        assert!(bad(Expr::Pred(Pred::Type(vec![]))).contains("type"));
        assert!(bad(Expr::name(b"a\0b")).contains("NUL"));
        assert!(bad(Expr::name(&[b'a'; PATH_MAX + 1])).contains("name.pattern"));
        assert!(bad(Expr::Pred(Pred::XattrExists(b"".as_slice().into()))).contains("xattr"));
        let mut deep = Expr::True;
        for _ in 0..MAX_EXPR_DEPTH + 1 {
            deep = Expr::not(deep);
        }
        assert!(bad(deep).contains("nested"));
        let wide = Expr::Or(vec![Expr::True; MAX_EXPR_NODES + 1]);
        assert!(bad(wide).contains("nodes"));

        // Raw wire values the Rust types cannot express.
        let mut r = spec_to_pb(
            &SearchSpec::new(SearchScope::Path(b"/".to_vec()), Expr::True),
            &cred,
        );
        r.scope = None;
        assert!(spec_from_pb(r.clone()).unwrap_err().0.contains("scope"));
        r.scope = Some(pb::search_request::Scope::Path(b"relative".to_vec()));
        assert!(spec_from_pb(r.clone()).unwrap_err().0.contains("absolute"));
        r.scope = Some(pb::search_request::Scope::Path(b"/".to_vec()));
        r.expr = Some(pb::QueryExpr {
            node: Some(pb::query_expr::Node::Pred(pb::QueryPred {
                pred: Some(pb::query_pred::Pred::Perm(pb::PermPred {
                    how: 0,
                    mode: 0o17777,
                })),
            })),
        });
        assert!(spec_from_pb(r.clone()).unwrap_err().0.contains("perm"));
        r.expr = Some(pb::QueryExpr { node: None });
        assert!(spec_from_pb(r.clone()).unwrap_err().0.contains("unset"));
        r.expr = None;
        r.batch_size = MAX_BATCH + 1;
        assert!(spec_from_pb(r.clone())
            .unwrap_err()
            .0
            .contains("batch_size"));
        r.batch_size = 0;
        r.sort = Some(pb::SearchSort {
            key: 0,
            descending: false,
        });
        assert!(spec_from_pb(r.clone()).unwrap_err().0.contains("limit"));
        r.limit = MAX_SORTED + 1;
        assert!(spec_from_pb(r.clone()).unwrap_err().0.contains("limit"));
        r.limit = 0;
        r.sort = None;
        r.group_by = Some(99);
        assert!(spec_from_pb(r).unwrap_err().0.contains("group_by"));
    }

    #[test]
    fn only_a_server_that_announced_keep_alives_has_its_silence_bounded() {
        // An older server (no header), or a header that says nothing.
        for none in [None, Some(""), Some("soon"), Some("0"), Some("-5")] {
            assert_eq!(silence_bound(none), None, "{none:?}");
        }
        // This server's period: the bound is SILENT_FOR, five periods.
        let ms = KEEP_ALIVE_EVERY.as_millis().to_string();
        assert_eq!(silence_bound(Some(&ms)), Some(SILENT_FOR));
        assert!(SILENT_FOR >= KEEP_ALIVE_EVERY * 5);
        // A server sending them less often: five of its periods.
        assert_eq!(
            silence_bound(Some("4000")),
            Some(std::time::Duration::from_secs(20))
        );
        assert_eq!(silence_bound(Some(" 100 ")), Some(SILENT_FOR));
        // Longer than a server's default lease (6 s): its tables are
        // failing over when its part is given up.
        assert!(SILENT_FOR > std::time::Duration::from_secs(6));
        assert!(SILENT_FOR < CHASE_FOR);
    }

    #[test]
    fn the_bound_is_read_from_the_response_headers() {
        let mut headers = tonic::metadata::MetadataMap::new();
        assert_eq!(silence_bound_of(&headers), None);
        headers.insert(KEEP_ALIVE_HEADER, "2000".parse().unwrap());
        assert_eq!(silence_bound_of(&headers), Some(SILENT_FOR));
    }

    #[test]
    fn ranges_are_named_four_at_most() {
        let r = |a: u128, b: u128| SoidRange {
            first: Soid::from_u128(a),
            last: Soid::from_u128(b),
        };
        assert_eq!(ranges_named(&[]), "none");
        let one = ranges_named(&[r(1, 2)]);
        assert_eq!(one, format!("{:?}", r(1, 2)));
        let many: Vec<SoidRange> = (0..6).map(|i| r(i, i)).collect();
        let named = ranges_named(&many);
        assert!(named.ends_with(", and 2 more"), "{named}");
        assert_eq!(named.matches("..=").count(), 4, "{named}");
    }

    #[test]
    fn top_n_keeps_the_first_in_order() {
        let hit = |p: &str, size: u64| SearchHit {
            path: p.as_bytes().to_vec().into(),
            soid: Soid::ROOT,
            attr: sextant_types::Attr {
                soid: Soid::ROOT,
                ftype: FileType::Regular,
                perm: 0,
                uid: 0,
                gid: 0,
                nlink: 1,
                size,
                rdev: 0,
                atime: Nanos(0),
                mtime: Nanos(0),
                ctime: Nanos(0),
                parent: Soid::ROOT,
                no_xattrs: false,
            },
            depth: 1,
        };
        let sort = SortSpec {
            key: SortKey::Size,
            descending: true,
        };
        let mut t = TopN::new(sort, 3);
        let mut all: Vec<u64> = (0..500u64).map(|i| (i * 7919) % 1000).collect();
        for (i, s) in all.iter().enumerate() {
            t.push(hit(&format!("/f{i}"), *s));
        }
        all.sort_unstable_by(|a, b| b.cmp(a));
        let sizes: Vec<u64> = t.finish().iter().map(|h| h.attr.size).collect();
        assert_eq!(sizes, all[..3]);
    }
}
