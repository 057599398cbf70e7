//! `sextant-logless-bench`: the log-less paper's experiment on this
//! machine — mdtest-like creates and removes from C clients (each its own
//! `Client`: own connection, client id and backups; one request at a time
//! each, as mdtest's processes), against a real `sextant serve` with the
//! journal (fsync), log-less durability with several ARL sizes, and the
//! journal off (no durability at all: the baseline for the clients' cost
//! of keeping backups). Every configuration gets a fresh server; modes are
//! interleaved within each repetition; medians are reported.
//!
//! ```text
//! sextant-logless-bench --sextant target/release/sextant --clients 1,4,16 \
//!     --items 2000 --modes journal,logless:1,logless:4,logless:16,off --reps 3
//! ```

use clap::Parser;
use sextant_client::{Client, Options};
use sextant_types::{Credentials, Soid};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(name = "sextant-logless-bench", about)]
struct Args {
    /// The `sextant` binary to start servers with.
    #[arg(long, default_value = "target/release/sextant")]
    sextant: PathBuf,
    /// Client counts to run, comma-separated.
    #[arg(long, default_value = "1,4,16", value_delimiter = ',')]
    clients: Vec<usize>,
    /// Files each client creates (then removes).
    #[arg(long, default_value_t = 2000)]
    items: usize,
    /// journal | off | logless:K, comma-separated.
    #[arg(
        long,
        default_value = "journal,logless:1,logless:4,logless:16,off",
        value_delimiter = ','
    )]
    modes: Vec<String>,
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Where server data directories go.
    #[arg(long, default_value = "bench-data")]
    dir: PathBuf,
    /// One JSON object per measurement on stdout as well.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
struct Sample {
    mode: String,
    clients: usize,
    rep: usize,
    creates_per_s: f64,
    removes_per_s: f64,
    /// Client process CPU per operation (create and remove), µs.
    client_cpu_us_per_op: f64,
    /// Sum over clients of the most backup bytes each held at once.
    backup_peak_bytes: usize,
    /// Most backup entries one client held at the end of the creates.
    backup_entries_max: usize,
    /// Creates per journal sync (`None`: no syncs — log-less or off).
    creates_per_sync: Option<f64>,
}

fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the zeroed struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &Args, mode: &str, data: &std::path::Path) -> Server {
    let mut cmd = Command::new(&args.sextant);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("SEXTANT_METRICS", "off")
        .env("SEXTANT_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match mode.split_once(':') {
        Some(("logless", k)) => {
            cmd.args(["--durability", "logless", "--arl-size", k]);
        }
        _ if mode == "journal" => {
            cmd.args(["--journal-sync", "fsync"]);
        }
        _ if mode == "background" => {
            cmd.args(["--journal-sync", "background"]);
        }
        _ if mode == "off" => {
            cmd.args(["--journal-sync", "off"]);
        }
        _ => panic!("unknown mode {mode:?} (journal, background, off, logless:K)"),
    }
    let mut child = cmd.spawn().expect("start sextant serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("a 'listening on' line")
        .to_string();
    Server { child, addr }
}

async fn run_one(args: &Args, mode: &str, clients: usize, rep: usize) -> Sample {
    let data = args
        .dir
        .join(format!("logless-bench-{mode}-{clients}-{rep}").replace(':', "-"));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).expect("data dir");
    let server = start(args, mode, &data);
    let secret = std::fs::read_to_string(data.join("secret")).expect("secret");
    let cred = Credentials::root();
    let mut cs = Vec::new();
    let mut dirs = Vec::new();
    for i in 0..clients {
        let c = Client::connect(&server.addr, &secret, Options::default())
            .await
            .expect("connect");
        let d = c
            .mkdir(&cred, Soid::ROOT, format!("c{i}").as_bytes(), 0o755)
            .await
            .expect("mkdir")
            .soid;
        cs.push(c);
        dirs.push(d);
    }
    let items = args.items;
    let phase = |remove: bool| {
        let tasks: Vec<_> = cs
            .iter()
            .zip(&dirs)
            .map(|(c, d)| {
                let (c, d) = (c.clone(), *d);
                tokio::spawn(async move {
                    let cred = Credentials::root();
                    for i in 0..items {
                        let name = format!("f{i}");
                        if remove {
                            c.unlink(&cred, d, name.as_bytes()).await.expect("unlink");
                        } else {
                            c.create(&cred, d, name.as_bytes(), 0o644, true)
                                .await
                                .expect("create");
                        }
                    }
                })
            })
            .collect();
        async move {
            for t in tasks {
                t.await.expect("task");
            }
        }
    };
    let ops = (clients * items) as f64;
    let journal_syncs = || async {
        let (stats, _) = cs[0].stats(&cred).await.expect("status");
        stats.journal_syncs
    };
    let syncs0 = journal_syncs().await;
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    phase(false).await;
    let create_s = t.elapsed().as_secs_f64();
    let cpu_creates = cpu_seconds() - cpu0;
    let create_syncs = journal_syncs().await - syncs0;
    let backup_entries_max = cs
        .iter()
        .map(|c| c.backup_stats().entries)
        .max()
        .unwrap_or(0);
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    phase(true).await;
    let remove_s = t.elapsed().as_secs_f64();
    let cpu = cpu_creates + (cpu_seconds() - cpu0);
    let backup_peak_bytes = cs.iter().map(|c| c.backup_stats().peak_bytes).sum();
    drop(cs);
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
    Sample {
        mode: mode.to_string(),
        clients,
        rep,
        creates_per_s: ops / create_s,
        removes_per_s: ops / remove_s,
        client_cpu_us_per_op: cpu / (2.0 * ops) * 1e6,
        backup_peak_bytes,
        backup_entries_max,
        creates_per_sync: (create_syncs > 0).then(|| ops / create_syncs as f64),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut samples: Vec<Sample> = Vec::new();
    for rep in 0..args.reps {
        for &clients in &args.clients {
            for mode in &args.modes {
                let s = rt.block_on(run_one(&args, mode, clients, rep));
                eprintln!(
                    "rep {rep} {mode:>11} x{clients:<2}: {:>9.0} creates/s {:>9.0} removes/s, \
                     client {:.1} µs/op, backups peak {:.1} MiB{}",
                    s.creates_per_s,
                    s.removes_per_s,
                    s.client_cpu_us_per_op,
                    s.backup_peak_bytes as f64 / (1 << 20) as f64,
                    s.creates_per_sync
                        .map_or(String::new(), |n| format!(", {n:.1} creates per sync"))
                );
                if args.json {
                    println!("{}", serde_json::to_string(&s).expect("json"));
                }
                samples.push(s);
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    // Medians, and per-repetition ratios against the journal.
    println!(
        "\n| clients | mode | creates/s | removes/s | creates vs journal | removes vs journal | client CPU µs/op | backups peak (all clients) | creates per sync |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for &clients in &args.clients {
        for mode in &args.modes {
            let of = |m: &str| -> Vec<&Sample> {
                samples
                    .iter()
                    .filter(|s| s.clients == clients && s.mode == m)
                    .collect()
            };
            let mine = of(mode);
            let journal = of("journal");
            let ratio = |f: &dyn Fn(&Sample) -> f64| {
                if journal.is_empty() {
                    return f64::NAN;
                }
                median(
                    mine.iter()
                        .zip(&journal)
                        .map(|(a, b)| f(a) / f(b))
                        .collect(),
                )
            };
            println!(
                "| {clients} | {mode} | {:.0} | {:.0} | {:.1}× | {:.1}× | {:.1} | {:.2} MiB | {} |",
                median(mine.iter().map(|s| s.creates_per_s).collect()),
                median(mine.iter().map(|s| s.removes_per_s).collect()),
                ratio(&|s| s.creates_per_s),
                ratio(&|s| s.removes_per_s),
                median(mine.iter().map(|s| s.client_cpu_us_per_op).collect()),
                median(mine.iter().map(|s| s.backup_peak_bytes as f64).collect())
                    / (1 << 20) as f64,
                match mine
                    .iter()
                    .filter_map(|s| s.creates_per_sync)
                    .collect::<Vec<_>>()
                {
                    v if v.is_empty() => "-".to_string(),
                    v => format!("{:.1}", median(v)),
                },
            );
        }
    }
}
