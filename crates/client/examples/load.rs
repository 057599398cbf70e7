//! Throughput over the client library: creates, then stats, with many
//! requests in flight on one connection; with one in flight it also reports
//! the round-trip latency percentiles of getattr.
//!
//! ```text
//! sextant serve --data /tmp/d --listen 127.0.0.1:7411 &
//! cargo run --release -p sextant-client --example load -- 127.0.0.1:7411 /tmp/d/secret 100000 256
//! ```

use sextant_client::{Client, Options};
use sextant_types::{Credentials, Soid};
use std::time::Instant;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).map_or("127.0.0.1:7411", |s| s.as_str());
    let secret_file = args.get(2).map_or("sextant-data/secret", |s| s.as_str());
    let n: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let in_flight: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(256);
    let secret = std::fs::read_to_string(secret_file).expect("read the secret");
    let c = Client::connect(addr, secret.trim(), Options::default())
        .await
        .expect("connect");
    let cred = Credentials::root();
    let dir = format!("load-{}", std::process::id());
    let d = c
        .mkdir(&cred, Soid::ROOT, dir.as_bytes(), 0o755)
        .await
        .expect("mkdir")
        .soid;

    let per = n / in_flight;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..in_flight {
        let (c, cred) = (c.clone(), cred.clone());
        tasks.push(tokio::spawn(async move {
            let mut soids = Vec::with_capacity(per);
            for i in 0..per {
                let name = format!("f{w}-{i}");
                let a = c
                    .create(&cred, d, name.as_bytes(), 0o644, true)
                    .await
                    .expect("create");
                soids.push(a.soid);
            }
            soids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    let secs = t.elapsed().as_secs_f64();
    let total = per * in_flight;
    println!(
        "create: {total} in {secs:.2} s = {:.0}/s ({in_flight} in flight)",
        total as f64 / secs
    );

    let t = Instant::now();
    let mut tasks = Vec::new();
    for soids in all {
        let (c, cred) = (c.clone(), cred.clone());
        tasks.push(tokio::spawn(async move {
            let mut rtts = Vec::with_capacity(soids.len());
            for s in soids {
                let one = Instant::now();
                c.getattr(&cred, s).await.expect("getattr");
                rtts.push(one.elapsed());
            }
            rtts
        }));
    }
    let mut rtts = Vec::new();
    for t in tasks {
        rtts.extend(t.await.unwrap());
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "getattr: {total} in {secs:.2} s = {:.0}/s ({in_flight} in flight)",
        total as f64 / secs
    );
    rtts.sort();
    let pct = |p: f64| rtts[((rtts.len() - 1) as f64 * p) as usize].as_micros();
    if !rtts.is_empty() {
        println!(
            "getattr round trip: p50 {} µs, p99 {} µs",
            pct(0.50),
            pct(0.99)
        );
    }
    let (stats, server) = c.stats(&cred).await.expect("stats");
    println!(
        "journal syncs {} for {} requests",
        stats.journal_syncs, server.requests
    );
}
