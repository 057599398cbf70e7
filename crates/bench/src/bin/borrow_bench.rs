//! `sextant-borrow-bench`: Ursa Minor's multi-server experiment (§5) on a
//! running cluster — what BORROW/RETURN costs. Two directories, `--dir-a`
//! held by one server and `--dir-b` by another (`scripts/cluster-bench.sh
//! borrow` sets that up), and two measurements:
//!
//! - **latency**: a create in A, then — once the tables are home again —
//!   a rename of it into B (a *cold* cross-server rename: BORROW, the
//!   rename, and later the RETURN), then at once a second one (a *warm*
//!   rename: the tables are still together). Medians of `--samples`.
//! - **throughput**: one client per directory, each creating and
//!   stat-ing files in its own directory as fast as it can (one request
//!   at a time), and with probability `x` a rename of one of its files
//!   into the other directory instead; for each fraction of `--fractions`
//!   the total operations per second over `--seconds`, fractions
//!   interleaved within each of `--reps` repetitions, tables home before
//!   each run. Reported against the 0 % run of the same repetition.
//! - **pairs** (`--pairs N --etcd URL`): N BORROW+RETURN pairs back to
//!   back, one at a time — a cold rename from A into B (the BORROW), then
//!   a wait, on etcd's delegation map, until no borrow, home or move is
//!   left (the RETURN done, the table home): pairs per second, and the
//!   median of each half. The servers' idle time before a RETURN is
//!   their policy (2 s); `SEXTANT_BENCH_RETURN_AFTER=0ms` on the servers
//!   measures the mechanism without it.
//!
//! ```text
//! sextant-borrow-bench --server 127.0.0.1:7411 --secret-file DATA/secret \
//!     --dir-a /p --dir-b /q --samples 10 --seconds 10 --reps 3
//! ```

use clap::Parser;
use sextant_client::{Client, Options};
use sextant_types::Credentials;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(name = "sextant-borrow-bench", about)]
struct Args {
    /// Any server of the cluster.
    #[arg(long)]
    server: String,
    /// The cluster secret's file.
    #[arg(long)]
    secret_file: PathBuf,
    /// A directory held by one server.
    #[arg(long, default_value = "/p")]
    dir_a: String,
    /// A directory held by another.
    #[arg(long, default_value = "/q")]
    dir_b: String,
    /// Cold/warm rename samples.
    #[arg(long, default_value_t = 10)]
    samples: usize,
    /// Seconds per throughput run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Fractions of cross-server renames, comma-separated.
    #[arg(
        long,
        default_value = "0,0.0006,0.005,0.01,0.05",
        value_delimiter = ','
    )]
    fractions: Vec<f64>,
    /// Repetitions of the throughput runs.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// How long to wait for borrowed tables to go home between runs.
    #[arg(long, default_value_t = 5.0)]
    home_wait: f64,
    /// BORROW+RETURN pairs to run one after another (needs `--etcd`).
    #[arg(long, default_value_t = 0)]
    pairs: usize,
    /// The cluster's etcd (client URL), watched for the RETURNs.
    #[arg(long)]
    etcd: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let secret = std::fs::read_to_string(&args.secret_file)?;
    let root = Credentials::root();
    let connect = || Client::connect(&args.server, &secret, Options::default());
    let c = connect().await?;
    let a = c.resolve(&root, args.dir_a.as_bytes(), true).await?.soid;
    let b = c.resolve(&root, args.dir_b.as_bytes(), true).await?.soid;
    let home = Duration::from_secs_f64(args.home_wait);
    let run = std::process::id();

    // Latency: create, then cold and warm renames across.
    let (mut creates, mut cold, mut warm) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..args.samples {
        tokio::time::sleep(home).await;
        let names: Vec<Vec<u8>> = (0..2)
            .map(|k| format!("lat-{run}-{i}-{k}").into_bytes())
            .collect();
        for n in &names {
            let t = Instant::now();
            c.create(&root, a, n, 0o644, true).await?;
            creates.push(t.elapsed().as_secs_f64() * 1e3);
        }
        tokio::time::sleep(home).await;
        let t = Instant::now();
        c.rename(&root, a, &names[0], b, &names[0], Default::default())
            .await?;
        cold.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        c.rename(&root, a, &names[1], b, &names[1], Default::default())
            .await?;
        warm.push(t.elapsed().as_secs_f64() * 1e3);
        eprintln!(
            "latency sample {i}: create {:.2} ms, cold rename {:.2} ms, warm rename {:.2} ms",
            creates[creates.len() - 1],
            cold[i],
            warm[i]
        );
    }
    let (mc, mcold, mwarm) = (median(creates), median(cold), median(warm));
    println!(
        "{}",
        serde_json::json!({
            "kind": "latency", "samples": args.samples,
            "create_ms": mc, "cold_rename_ms": mcold, "warm_rename_ms": mwarm,
            "cold_over_create": mcold / mc, "warm_over_create": mwarm / mc,
        })
    );

    if args.pairs > 0 {
        let url = args.etcd.clone().ok_or("--pairs needs --etcd")?;
        pairs(&c, a, b, args.pairs, &url, run).await?;
    }

    // Throughput at each fraction of cross-server renames.
    let mut by_fraction: Vec<(f64, Vec<f64>)> =
        args.fractions.iter().map(|f| (*f, Vec::new())).collect();
    for rep in 0..args.reps {
        let mut order: Vec<usize> = (0..by_fraction.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let x = by_fraction[i].0;
            tokio::time::sleep(home).await;
            let ops = Arc::new(AtomicU64::new(0));
            let renames = Arc::new(AtomicU64::new(0));
            let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
            let mut tasks = Vec::new();
            for (k, (mine, other)) in [(a, b), (b, a)].into_iter().enumerate() {
                let client = connect().await?;
                let (ops, renames) = (Arc::clone(&ops), Arc::clone(&renames));
                let root = root.clone();
                tasks.push(tokio::spawn(async move {
                    // A cheap deterministic generator: the fraction, not
                    // the pattern, matters.
                    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (k as u64 + 1) ^ (rep as u64) << 8;
                    let mut n = 0u64;
                    let mut last: Option<Vec<u8>> = None;
                    while Instant::now() < deadline {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let cross = (state >> 11) as f64 / (1u64 << 53) as f64 <= x && x > 0.0;
                        let r: Result<(), sextant_client::Error> =
                            if let (true, Some(f)) = (cross, last.take()) {
                                renames.fetch_add(1, Ordering::Relaxed);
                                client
                                    .rename(&root, mine, &f, other, &f, Default::default())
                                    .await
                            } else {
                                n += 1;
                                let name = format!("t-{run}-{rep}-{k}-{x}-{n}").into_bytes();
                                match client.create(&root, mine, &name, 0o644, true).await {
                                    Ok(a) => {
                                        last = Some(name);
                                        client.getattr(&root, a.soid).await.map(|_| ())
                                    }
                                    Err(e) => Err(e),
                                }
                            };
                        match r {
                            Ok(()) => {
                                ops.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => return Err(e.to_string()),
                        }
                    }
                    Ok(())
                }));
            }
            let started = Instant::now();
            for t in tasks {
                t.await??;
            }
            let rate = ops.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
            eprintln!(
                "rep {rep}: {:.2} % cross-server: {rate:.0} ops/s ({} renames)",
                x * 100.0,
                renames.load(Ordering::Relaxed)
            );
            by_fraction[i].1.push(rate);
        }
    }
    let base = median(by_fraction[0].1.clone());
    for (x, rates) in by_fraction {
        let m = median(rates.clone());
        println!(
            "{}",
            serde_json::json!({
                "kind": "throughput", "cross_fraction": x, "ops_per_sec": m,
                "vs_first": m / base, "runs": rates,
            })
        );
    }
    Ok(())
}

/// `n` BORROW+RETURN pairs, one at a time: a cold rename from `a` into
/// `b`, then a wait until etcd's map shows no borrow, no lent table away
/// from home and no move (the RETURN's handover committed).
async fn pairs(
    c: &Client,
    a: sextant_types::Soid,
    b: sextant_types::Soid,
    n: usize,
    etcd: &str,
    run: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = Credentials::root();
    let map =
        sextant_coordinator::DelegationMap::start(sextant_coordinator::EtcdConfig::new(vec![
            etcd.to_string()
        ]))
        .await?;
    // Home: no borrow, no table away, no move, and A and B on two
    // servers (else a rename needs no BORROW).
    let home = |s: &std::sync::Arc<sextant_coordinator::ClusterState>| {
        let owner = |x| {
            s.table_of(x)
                .and_then(|t| s.owner(t))
                .map(|o| o.server.clone())
        };
        s.borrows.is_empty()
            && s.homes.is_empty()
            && s.moves.is_empty()
            && owner(a).is_some()
            && owner(a) != owner(b)
    };
    let wait_home = || map.wait_for(Duration::from_secs(60), home);
    let names: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("pair-{run}-{i}").into_bytes())
        .collect();
    for name in &names {
        c.create(&root, a, name, 0o644, true).await?;
    }
    wait_home().await.ok_or("the tables did not go home")?;
    let (mut borrow, mut ret) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let t = Instant::now();
        c.rename(&root, a, name, b, name, Default::default())
            .await?;
        borrow.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        wait_home().await.ok_or("the tables did not go home")?;
        ret.push(t.elapsed().as_secs_f64() * 1e3);
        eprintln!(
            "pair {i}: rename (BORROW) {:.2} ms, until home (RETURN) {:.2} ms",
            borrow[i], ret[i]
        );
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "kind": "pairs", "pairs": n, "seconds": secs, "pairs_per_sec": n as f64 / secs,
            "borrow_ms": median(borrow), "return_ms": median(ret),
        })
    );
    Ok(())
}
