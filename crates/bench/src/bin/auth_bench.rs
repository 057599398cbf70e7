//! `sextant-auth-bench`: issue 22's benchmark — what the identity checks
//! cost per call. The same work through three doors of one server, in
//! interleaved rounds:
//!
//! - `secret`: TCP with the cluster secret (the admin path);
//! - `socket`: the Unix socket, as the caller the kernel names
//!   (SO_PEERCRED and the caller's groups), no secret;
//! - `key`: TCP with a client key (an HMAC-SHA256 proof per call, its
//!   nonce remembered, the key's limits checked).
//!
//! Per door and round: `--tasks` workers on one connection each create
//! `--items` files in a directory of their own (one request at a time per
//! worker), then getattr each. Reported: operations per second and p50
//! per phase, medians over the rounds, and each door's ratio to the
//! secret's in the same round. `scripts/bench-auth.sh` starts a log-less
//! server (so a create costs CPU, not a journal sync) and a key for it.
//!
//! ```text
//! sextant-auth-bench --server 127.0.0.1:7451 --socket DATA/../sextant.sock \
//!     --secret-file DATA/secret --key-file bench.key --tasks 1,16 --reps 3
//! ```

use clap::Parser;
use sextant_client::{Client, Options};
use sextant_types::{Credentials, Soid};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "sextant-auth-bench", about)]
struct Args {
    /// The server's TCP address.
    #[arg(long)]
    server: String,
    /// The server's Unix socket.
    #[arg(long)]
    socket: PathBuf,
    /// The cluster secret's file.
    #[arg(long)]
    secret_file: PathBuf,
    /// A client key file (`sextant auth add`), allowing the caller's uid.
    #[arg(long)]
    key_file: PathBuf,
    /// Workers per run, comma-separated (one run each).
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    tasks: Vec<usize>,
    /// Files each worker creates and stats.
    #[arg(long, default_value_t = 2000)]
    items: usize,
    /// Rounds (each door once per round, interleaved).
    #[arg(long, default_value_t = 3)]
    reps: usize,
}

const DOORS: [&str; 3] = ["secret", "socket", "key"];
const PHASES: [&str; 2] = ["create", "getattr"];

/// One phase of one run: operations per second and p50 (µs).
#[derive(Clone, Copy, Debug)]
struct Figure {
    ops_per_sec: f64,
    p50_us: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs both phases through `client` with `tasks` workers under `root`.
async fn run(
    client: &Client,
    cred: &Credentials,
    root: Soid,
    tasks: usize,
    items: usize,
) -> Result<[Figure; 2], String> {
    let mut dirs = Vec::new();
    for t in 0..tasks {
        let name = format!("w{t}");
        let a = client
            .mkdir(cred, root, name.as_bytes(), 0o755)
            .await
            .map_err(|e| format!("mkdir {name}: {e}"))?;
        dirs.push(a.soid);
    }
    let mut out = [Figure {
        ops_per_sec: 0.0,
        p50_us: 0.0,
    }; 2];
    let mut made: Vec<Vec<Soid>> = vec![Vec::new(); tasks];
    for (p, phase) in PHASES.iter().enumerate() {
        let started = Instant::now();
        let workers = dirs.iter().zip(made.iter()).map(|(dir, mine)| {
            let (client, cred, dir, mine) = (client.clone(), cred.clone(), *dir, mine.clone());
            async move {
                let mut lat = Vec::with_capacity(items);
                let mut soids = Vec::with_capacity(items);
                if *phase == "create" {
                    for i in 0..items {
                        let t = Instant::now();
                        let name = format!("f{i}");
                        let a = client
                            .create(&cred, dir, name.as_bytes(), 0o644, true)
                            .await
                            .map_err(|e| format!("create {name}: {e}"))?;
                        soids.push(a.soid);
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                } else {
                    for soid in mine {
                        let t = Instant::now();
                        client
                            .getattr(&cred, soid)
                            .await
                            .map_err(|e| format!("getattr: {e}"))?;
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                Ok::<_, String>((lat, soids))
            }
        });
        let results = futures_join(workers).await;
        let secs = started.elapsed().as_secs_f64();
        let mut lat = Vec::new();
        for (w, r) in results.into_iter().enumerate() {
            let (l, soids) = r?;
            lat.extend(l);
            if *phase == "create" {
                made[w] = soids;
            }
        }
        out[p] = Figure {
            ops_per_sec: (tasks * items) as f64 / secs,
            p50_us: median(lat),
        };
    }
    Ok(out)
}

/// Runs every future at once on this runtime; their results in order.
async fn futures_join<F, T>(futures: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("a worker panicked"));
    }
    out
}

async fn connect(args: &Args, door: &str) -> Result<Client, String> {
    let (addr, credential) = match door {
        "secret" => (
            args.server.clone(),
            std::fs::read_to_string(&args.secret_file)
                .map_err(|e| format!("{}: {e}", args.secret_file.display()))?
                .trim()
                .to_string(),
        ),
        "socket" => (format!("unix:{}", args.socket.display()), String::new()),
        _ => {
            let text = std::fs::read_to_string(&args.key_file)
                .map_err(|e| format!("{}: {e}", args.key_file.display()))?;
            let key = sextant_proto::keyauth::ClientKey::parse_file(&text)
                .map_err(|e| format!("{}: {e}", args.key_file.display()))?;
            (args.server.clone(), key.credential())
        }
    };
    Client::connect(&addr, &credential, Options::default())
        .await
        .map_err(|e| format!("{door}: connecting to {addr}: {e}"))
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if let Err(e) = rt.block_on(bench(&args)) {
        eprintln!("sextant-auth-bench: {e}");
        std::process::exit(1);
    }
}

async fn bench(args: &Args) -> Result<(), String> {
    // The caller's own identity: the socket takes the kernel's anyway.
    // SAFETY: getuid/getgid cannot fail.
    let cred = Credentials::user(unsafe { libc::getuid() }, unsafe { libc::getgid() });
    // (door, tasks, round) -> figures
    let mut runs: Vec<(&str, usize, usize, [Figure; 2])> = Vec::new();
    let admin = connect(args, "secret").await?;
    let top = admin
        .mkdir(
            &Credentials::root(),
            Soid::ROOT,
            format!("authbench-{}", std::process::id()).as_bytes(),
            0o777,
        )
        .await
        .map_err(|e| format!("mkdir: {e}"))?
        .soid;
    for round in 0..args.reps {
        for &tasks in &args.tasks {
            for door in DOORS {
                let client = connect(args, door).await?;
                let name = format!("{door}-t{tasks}-r{round}");
                let root = client
                    .mkdir(&cred, top, name.as_bytes(), 0o755)
                    .await
                    .map_err(|e| format!("mkdir {name}: {e}"))?
                    .soid;
                let f = run(&client, &cred, root, tasks, args.items).await?;
                eprintln!(
                    "round {round}, {tasks} tasks, {door}: create {:.0}/s, getattr {:.0}/s",
                    f[0].ops_per_sec, f[1].ops_per_sec
                );
                runs.push((door, tasks, round, f));
            }
        }
    }
    println!("phase tasks door ops/s(median) p50_us(median) ratio_to_secret(median of rounds)");
    for (p, phase) in PHASES.iter().enumerate() {
        for &tasks in &args.tasks {
            for door in DOORS {
                let mine: Vec<_> = runs
                    .iter()
                    .filter(|r| r.0 == door && r.1 == tasks)
                    .collect();
                let ratio = median(
                    mine.iter()
                        .filter_map(|r| {
                            runs.iter()
                                .find(|s| s.0 == "secret" && s.1 == tasks && s.2 == r.2)
                                .map(|s| r.3[p].ops_per_sec / s.3[p].ops_per_sec)
                        })
                        .collect(),
                );
                println!(
                    "{phase} {tasks} {door} {:.0} {:.1} {:.3}",
                    median(mine.iter().map(|r| r.3[p].ops_per_sec).collect()),
                    median(mine.iter().map(|r| r.3[p].p50_us).collect()),
                    ratio
                );
            }
        }
    }
    Ok(())
}
