//! Search at scale (issue 4's benchmark): Magellan's query sets and the
//! name queries over a store made by `build`, answered from the indexes,
//! against the same queries by a brute-force scan of the same in-memory
//! tables (`Engine::search_scan`) in the same run.
//!
//! Query parameters come from files sampled uniformly from the store (one
//! reservoir pass), so every selective query has at least one match:
//! - set 1: exact name + owner;
//! - set 2: set 1 within the file's grandparent directory;
//! - set 3: owner + a 30-day mtime window around the file's + size ≥ half
//!   the file's;
//! - glob: `abcd*wxyz` from the name's first and last four bytes (names of
//!   at least 10 bytes), what someone half-remembering a name types;
//!   `glob3`: `abc*xyz`, three and three (broad in a scaled-up tree);
//! - substring: `*abcdef*`, six bytes from the middle of the name (names
//!   of at least 10 bytes); `substring4`: four bytes (broad);
//! - broad: size above the 90th percentile of the sample (~10% of the
//!   files), count only (`Engine::search_tally`, as `find -count`);
//! - per-owner totals over the whole namespace and per-subtree totals of a
//!   file's grandparent (aggregations: root's whole-namespace totals from
//!   the maintained summaries, others by `Engine::search_tally`);
//!   `per-top-dir-totals`: per-owner totals of the file's top-level
//!   directory (a large subtree: 1/36 of the real shape), where tables
//!   wholly inside are added up from their summaries — also timed with
//!   summaries off (`SearchOptions::summaries`) in the same run.
//!
//! `--threads` sets the threads per search for the indexed queries and the
//! scans alike (run it with 1 and with the core count to see what parallel
//! table visits give).

use crate::measure::{timed, Rng};
use crate::report::Report;
use sextant_engine::bloom::TimeAttr;
use sextant_engine::search::{
    Expr, GroupBy, HitRef, Pred, Scope, SearchHit, SearchOptions, SearchStats,
};
use sextant_engine::Engine;
use sextant_types::{Credentials, FileType, Nanos};
use std::ops::ControlFlow;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone, serde::Serialize)]
pub struct SearchArgs {
    /// A store made by `build` (the real shape has owners, sizes and times
    /// worth querying).
    #[arg(long)]
    pub dir: PathBuf,
    /// Sampled files, one query of each selective kind per file.
    #[arg(long, default_value_t = 40)]
    pub samples: usize,
    /// Brute-force scans per query kind (each reads every row).
    #[arg(long, default_value_t = 3)]
    pub scans: usize,
    /// Times each indexed query this many times (more samples for the
    /// kinds with few queries; the first run of a query is not set apart).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Run only these query kinds (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Threads per search, for the indexed queries and the scans alike
    /// (0: one per core, the engine's default).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Searches use the directory paths remembered across searches
    /// (`SearchOptions::dir_cache`; the sampling pass fills them). `false`
    /// resolves every directory afresh in every search.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub dir_cache: bool,
    /// Search as this user (UID:GID) instead of root: what that user may
    /// list decides what is found, and the maintained summaries answer
    /// only for tables holding no directory closed to anyone. Queries are
    /// still sampled by root.
    #[arg(long, value_name = "UID:GID", value_parser = parse_user)]
    pub user: Option<(u32, u32)>,
    /// Entries a search below a directory lists top-down before it gives
    /// up and resolves exits bottom-up (`SearchOptions::walk_budget`;
    /// default the engine's).
    #[arg(long)]
    pub walk_budget: Option<usize>,
    /// Also time each aggregation with the maintained summaries off,
    /// interleaved (`false`: only with them, e.g. under a profiler).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub summaries_off_too: bool,
}

fn parse_user(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').ok_or("expected UID:GID")?;
    Ok((
        u.parse().map_err(|e| format!("uid: {e}"))?,
        g.parse().map_err(|e| format!("gid: {e}"))?,
    ))
}

/// One query: scope, expression, and whether only totals are wanted
/// (`Some(None)`: the count, `Some(Some(by))`: grouped).
struct Query {
    scope: Vec<u8>,
    expr: Expr,
    aggregate: Option<Option<GroupBy>>,
}

fn and(a: Pred, b: Pred) -> Expr {
    Expr::and(Expr::pred(a), Expr::pred(b))
}

fn name_pred(pattern: &[u8], glob: bool) -> Pred {
    Pred::Name {
        pattern: pattern.into(),
        glob,
        ci: false,
    }
}

fn grandparent(path: &[u8]) -> Vec<u8> {
    let mut p = path.to_vec();
    for _ in 0..2 {
        match p.iter().rposition(|&c| c == b'/') {
            Some(0) | None => return b"/".to_vec(),
            Some(i) => p.truncate(i),
        }
    }
    p
}

/// The first component of `path` (`/a` of `/a/b/c`).
fn top_dir(path: &[u8]) -> Vec<u8> {
    match path.iter().skip(1).position(|&c| c == b'/') {
        Some(i) => path[..i + 1].to_vec(),
        None => b"/".to_vec(),
    }
}

/// Glob metacharacters are escaped so a sampled name matches itself.
fn escape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &c in bytes {
        if matches!(c, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(c);
    }
    out
}

fn queries_for(kind: &str, f: &SearchHit, p90_size: u64) -> Option<Query> {
    let name = f.name();
    let uid = Pred::Uid {
        lo: f.attr.uid,
        hi: f.attr.uid,
    };
    let everywhere = b"/".to_vec();
    let q = match kind {
        "set1" => Query {
            scope: everywhere,
            expr: and(name_pred(name, false), uid),
            aggregate: None,
        },
        "set2" => Query {
            scope: grandparent(&f.path),
            expr: and(name_pred(name, false), uid),
            aggregate: None,
        },
        "set3" => {
            const DAYS_15: i64 = 15 * 86_400 * 1_000_000_000;
            let window = Pred::Time {
                which: TimeAttr::Mtime,
                lo: Nanos(f.attr.mtime.0.saturating_sub(DAYS_15)),
                hi: Nanos(f.attr.mtime.0.saturating_add(DAYS_15)),
            };
            let size = Pred::Size {
                lo: f.attr.size / 2,
                hi: u64::MAX,
            };
            Query {
                scope: everywhere,
                expr: Expr::and(and(uid, window), Expr::pred(size)),
                aggregate: None,
            }
        }
        "glob" | "glob3" if name.len() >= 10 || (kind == "glob3" && name.len() >= 6) => {
            let k = if kind == "glob" { 4 } else { 3 };
            let mut g = escape(&name[..k]);
            g.push(b'*');
            g.extend(escape(&name[name.len() - k..]));
            Query {
                scope: everywhere,
                expr: Expr::pred(name_pred(&g, true)),
                aggregate: None,
            }
        }
        "substring" | "substring4"
            if name.len() >= 10 || (kind == "substring4" && name.len() >= 6) =>
        {
            let k = if kind == "substring" { 6 } else { 4 };
            let mid = name.len() / 2 - k / 2;
            let mut g = b"*".to_vec();
            g.extend(escape(&name[mid..mid + k]));
            g.push(b'*');
            Query {
                scope: everywhere,
                expr: Expr::pred(name_pred(&g, true)),
                aggregate: None,
            }
        }
        "broad-count" => Query {
            scope: everywhere,
            expr: Expr::pred(Pred::Size {
                lo: p90_size.saturating_add(1),
                hi: u64::MAX,
            }),
            aggregate: Some(None),
        },
        "per-owner-totals" => Query {
            scope: everywhere,
            expr: Expr::pred(Pred::Type(vec![FileType::Regular])),
            aggregate: Some(Some(GroupBy::Uid)),
        },
        "per-top-dir-totals" => Query {
            scope: top_dir(&f.path),
            expr: Expr::pred(Pred::Type(vec![FileType::Regular])),
            aggregate: Some(Some(GroupBy::Uid)),
        },
        "per-subtree-totals" => Query {
            scope: grandparent(&f.path),
            expr: Expr::pred(Pred::Type(vec![FileType::Regular])),
            aggregate: Some(Some(GroupBy::Type)),
        },
        _ => return None,
    };
    Some(q)
}

/// How every query of a run is searched (the command line's choices).
#[derive(Clone, Copy)]
struct How {
    threads: usize,
    dir_cache: bool,
    user: Option<(u32, u32)>,
    walk_budget: Option<usize>,
}

/// Runs `q` (indexed or scanned) as `how` says; returns (seconds,
/// matches, stats).
fn run(
    engine: &Engine,
    q: &Query,
    indexed: bool,
    how: How,
    summaries: bool,
) -> (f64, u64, SearchStats) {
    let cred = how
        .user
        .map_or_else(Credentials::root, |(u, g)| Credentials::user(u, g));
    let scope = Scope::Path(&q.scope);
    let defaults = SearchOptions::default();
    let opts = SearchOptions {
        threads: how.threads,
        summaries,
        dir_cache: how.dir_cache,
        walk_budget: how.walk_budget.unwrap_or(defaults.walk_budget),
        ..defaults
    };
    let mut count = 0u64;
    if let (Some(by), true) = (q.aggregate, indexed) {
        // What `sextant find -count`, `du` and `stats` do: maintained
        // summaries where they answer exactly (root, whole namespace;
        // grouped or the total only), else a search that adds up without
        // building paths.
        let (secs, r) = timed(|| {
            if summaries {
                if let Some(agg) = engine.aggregate_from_summaries(&cred, scope, &q.expr, by)? {
                    return Ok((agg, SearchStats::default()));
                }
            }
            engine.search_tally(&cred, scope, &q.expr, by, &opts)
        });
        let (agg, stats) = r.expect("aggregate");
        return (secs, agg.total.count, stats);
    }
    // The visitor reads each hit's path (its length), as a consumer that
    // prints or sends it would, and keeps none.
    let mut path_bytes = 0usize;
    let (secs, stats) = timed(|| {
        let visit = |h: HitRef<'_>| {
            count += 1;
            path_bytes += h.path.len();
            ControlFlow::Continue(())
        };
        if indexed {
            engine.search_with(&cred, scope, &q.expr, &opts, visit)
        } else {
            engine.search_scan_with(&cred, scope, &q.expr, &opts, visit)
        }
    });
    std::hint::black_box(path_bytes);
    (secs, count, stats.expect("search"))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

pub fn search(a: &SearchArgs) -> Report {
    let mut report = Report::new("search", a);
    let threads = match a.threads {
        0 => sextant_engine::search::default_threads(),
        n => n,
    };
    report.info("threads per search", threads);
    let how = How {
        threads,
        dir_cache: a.dir_cache,
        user: a.user,
        walk_budget: a.walk_budget,
    };
    let engine = Engine::open_dir(
        &a.dir,
        crate::workload::build_config(crate::workload::Journal::Fsync),
    )
    .expect("open");
    let (load_s, r) = timed(|| engine.for_each_table(|_| ()));
    r.expect("load all tables");
    let cred = Credentials::root();
    // One pass: reservoir-sample regular files (and build every index).
    let mut rng = Rng::new(42);
    let mut sample: Vec<SearchHit> = Vec::new();
    let mut seen = 0usize;
    let files = Expr::pred(Pred::Type(vec![FileType::Regular]));
    let (sample_s, r) = timed(|| {
        // (A kept hit gets a path of its own: it outlives its table's
        // path buffer.)
        engine.search(&cred, Scope::Path(b"/"), &files, usize::MAX, |h| {
            seen += 1;
            let kept = || {
                let mut h = h.to_hit();
                h.detach();
                h
            };
            if sample.len() < a.samples {
                sample.push(kept());
            } else {
                let j = rng.below(seen);
                if j < a.samples {
                    sample[j] = kept();
                }
            }
            ControlFlow::Continue(())
        })
    });
    r.expect("sample");
    let mut sizes: Vec<u64> = sample.iter().map(|h| h.attr.size).collect();
    sizes.sort_unstable();
    let p90_size = sizes.get(sizes.len() * 9 / 10).copied().unwrap_or(0);
    let (mut index_bytes, mut inodes, mut exits) = (0usize, 0usize, Vec::new());
    engine
        .for_each_table(|t| {
            index_bytes += t.index.memory_bytes();
            inodes += t.inode_count();
            exits.push(t.exits().len());
        })
        .expect("tables");
    exits.sort_unstable();
    report.info("table exits (sum)", exits.iter().sum::<usize>());
    report.info(
        "table exits (median, max)",
        format!("{:?}", (exits.get(exits.len() / 2), exits.last())),
    );
    report.info("regular files", seen);
    report.info("inodes", inodes);
    report.info("tables", engine.stats().tables);
    report.metric("load every table", "s", &[load_s]);
    report.metric(
        "first search: build every index + full pass",
        "s",
        &[sample_s],
    );
    report
        .metric(
            "search index bytes per file (K-D trees, Bloom filters, trigram lists)",
            "bytes",
            &[index_bytes as f64 / inodes.max(1) as f64],
        )
        .target("<= 60 bytes/file", 60.0, false);

    let kinds: [(&str, f64, f64); 11] = [
        // (kind, p50 target ms, p99 target ms; NaN: none)
        ("set1", 5.0, 50.0),
        ("set2", 5.0, 50.0),
        ("set3", 20.0, f64::NAN),
        ("glob", 20.0, f64::NAN),
        ("glob3", f64::NAN, f64::NAN),
        ("substring", 20.0, f64::NAN),
        ("substring4", f64::NAN, f64::NAN),
        ("broad-count", 300.0, f64::NAN),
        ("per-owner-totals", 5.0, f64::NAN),
        ("per-subtree-totals", 5.0, f64::NAN),
        ("per-top-dir-totals", 5.0, f64::NAN),
    ];
    for (kind, p50_target, p99_target) in kinds {
        if !a.only.is_empty() && !a.only.iter().any(|k| k == kind) {
            continue;
        }
        let qs: Vec<Query> = sample
            .iter()
            .filter_map(|f| queries_for(kind, f, p90_size))
            .take(if kind.contains("totals") || kind == "broad-count" {
                5
            } else {
                a.samples
            })
            .collect();
        if qs.is_empty() {
            continue;
        }
        let mut ms: Vec<f64> = Vec::new();
        // Matches of each timed run, in the order of `ms`.
        let mut each_matches: Vec<f64> = Vec::new();
        let (mut pruned, mut tables, mut matches) = (0usize, 0usize, 0u64);
        let (mut summarized, mut dir_reads, mut candidates) = (0usize, 0usize, 0usize);
        let mut by_exit = 0usize;
        // Aggregations are also timed without the per-table summaries
        // (interleaved, same queries).
        let mut unsummarized_ms: Vec<f64> = Vec::new();
        for q in &qs {
            for _ in 0..a.repeat.max(1) {
                let (s, n, st) = run(&engine, q, true, how, true);
                ms.push(s * 1e3);
                pruned += st.tables_pruned;
                tables += st.tables;
                summarized += st.tables_summarized;
                by_exit += st.tables_summarized_by_exit;
                dir_reads += st.dir_reads;
                candidates += st.candidates;
                matches += n;
                each_matches.push(n as f64);
                if q.aggregate.is_some() && a.summaries_off_too {
                    let (s, n_off, _) = run(&engine, q, true, how, false);
                    assert_eq!(n, n_off, "{kind}: with and without summaries disagree");
                    unsummarized_ms.push(s * 1e3);
                }
            }
        }
        let mut scan_ms: Vec<f64> = Vec::new();
        for q in qs.iter().take(a.scans) {
            let (s, n_scan, _) = run(&engine, q, false, how, false);
            let (_, n_index, _) = run(&engine, q, true, how, true);
            assert_eq!(n_scan, n_index, "{kind}: scan and index disagree");
            scan_ms.push(s * 1e3);
        }
        if !unsummarized_ms.is_empty() {
            report.metric(
                format!("{kind}: latency (index, summaries off)"),
                "ms",
                &unsummarized_ms,
            );
            report.metric(
                format!("{kind}: tables summarized per query"),
                "n",
                &[summarized as f64 / ms.len() as f64],
            );
            report.metric(
                format!("{kind}: of them, covered partly and added up per exit"),
                "n",
                &[by_exit as f64 / ms.len() as f64],
            );
        }
        let mut sorted = ms.clone();
        sorted.sort_by(|x, y| x.total_cmp(y));
        let p50 = percentile(&sorted, 0.5);
        let p99 = percentile(&sorted, 0.99);
        eprintln!(
            "{kind}: {} queries, p50 {p50:.3} ms, p99 {p99:.3} ms, {:.1} matches/query, {:.0}% tables pruned",
            qs.len(),
            matches as f64 / ms.len() as f64,
            100.0 * pruned as f64 / tables.max(1) as f64
        );
        let m = report.metric(format!("{kind}: latency (index)"), "ms", &ms);
        if p50_target.is_finite() {
            m.target(&format!("p50 <= {p50_target} ms"), p50_target, false);
        }
        report.metric(format!("{kind}: p99 latency (index)"), "ms", &[p99]);
        if p99_target.is_finite() {
            report
                .metric(format!("{kind}: p99 vs target"), "ms", &[p99])
                .target(&format!("p99 <= {p99_target} ms"), p99_target, false);
        }
        report.metric(format!("{kind}: brute-force scan"), "ms", &scan_ms);
        let mut scan_sorted = scan_ms.clone();
        scan_sorted.sort_by(|x, y| x.total_cmp(y));
        let speedup = percentile(&scan_sorted, 0.5) / p50;
        let m = report.metric(format!("{kind}: scan p50 / index p50"), "x", &[speedup]);
        if matches!(kind, "set1" | "set2" | "set3") {
            m.target(">= 20x for selective queries", 20.0, true);
        }
        report.metric(
            format!("{kind}: tables pruned by Bloom filters"),
            "%",
            &[100.0 * pruned as f64 / tables.max(1) as f64],
        );
        report.metric(
            format!("{kind}: directory reads per query"),
            "n",
            &[dir_reads as f64 / ms.len() as f64],
        );
        report.metric(
            format!("{kind}: candidate rows per query"),
            "n",
            &[candidates as f64 / ms.len() as f64],
        );
        report.metric(
            format!("{kind}: matches per query"),
            "n",
            &[matches as f64 / ms.len() as f64],
        );
        // Latency against result volume: the samples of this metric line
        // up with those of "latency (index)".
        report.metric(format!("{kind}: matches of each query"), "n", &each_matches);
    }
    let st = engine.stats();
    report.info(
        "remembered directory paths (end of run)",
        st.dir_cache_paths,
    );
    report.metric(
        "remembered directory paths: bytes per file (end of run)",
        "bytes",
        &[st.dir_cache_bytes as f64 / inodes.max(1) as f64],
    );
    engine.close().expect("close");
    report
}
