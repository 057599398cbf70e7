//! `sextant bench`: an mdtest-like metadata benchmark. Owns the command's
//! arguments and the run loop (prepare, run the phases in order, clean up,
//! repeat, report); the phase plan, the two ways of issuing operations
//! (client library or system calls on a directory) and the statistics live
//! in the submodules.

mod cpu;
mod local;
mod plan;
mod remote;
mod stats;

use crate::session::caller;
use crate::Cli;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plan::{Kind, Layout, Phase};
use serde::Serialize;
use sextant_client::Client;
use stats::{median, summarize, Counts, Summary};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const EXAMPLES: &str = "\
Each run makes a fresh directory (bench.<pid>.<n>), creates every item in
it, runs the timed phases, removes everything and the directory. Create and
remove always run (untimed unless selected with --phases). Phases:
  create   files: open(O_CREAT|O_EXCL)+close / client create; dirs: mkdir
  stat     fstatat by name / client getattr by SOID (remembered from create)
  lookup   openat(O_PATH) by name (a name lookup, no open) / client lookup
  readdir  each worker lists its directory --readdir-passes times
  remove   unlink / rmdir
Every phase reports operations per second over the whole phase, latency
p50/p99/max of single operations and, when the server is known, journal
syncs and operations per sync.

Examples:
  # Throughput over the client library: 256 tasks on one connection
  sextant bench --server 127.0.0.1:7411 --tasks 256 --items 400 -F

  # Latency at low load: one request in flight
  sextant bench --tasks 1 --items 20000 -F --phases stat

  # mdtest-style on a mount, 8 threads sharing one directory, 3 repetitions
  sextant bench --dir /mnt/sextant --tasks 8 --items 1000 --shared --reps 3

  # Creates from 8 processes sharing fdatasyncs (syncs read from the server)
  sextant --server 127.0.0.1:7411 bench --dir /mnt/sextant -P 8 --tasks 1 \\
      --items 2000 -F --phases create --json
";

/// Arguments of `sextant bench`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = EXAMPLES)]
pub struct BenchArgs {
    /// Concurrent workers: tasks sharing one connection (client library),
    /// or threads per process (--dir).
    #[arg(short = 'n', long, default_value_t = 16, value_name = "N")]
    pub tasks: usize,
    /// Items each worker creates, stats and removes.
    #[arg(short = 'i', long, default_value_t = 1000, value_name = "N")]
    pub items: usize,
    /// All workers in one shared directory (default: a directory each).
    #[arg(long)]
    pub shared: bool,
    /// Files only (mdtest -F).
    #[arg(short = 'F', long, conflicts_with = "dirs_only")]
    pub files_only: bool,
    /// Directories only (mdtest -D).
    #[arg(short = 'D', long)]
    pub dirs_only: bool,
    /// Phases to time, comma-separated: create, stat, lookup, readdir,
    /// remove [default: all]
    #[arg(
        long,
        default_value = "",
        hide_default_value = true,
        value_name = "LIST"
    )]
    pub phases: String,
    /// Listings of its directory per worker in the readdir phase.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub readdir_passes: usize,
    /// Run on this directory (e.g. a `sextant mount`) with system calls
    /// instead of the client library. With --server, the server's journal
    /// syncs are reported too.
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// --dir only: run the workers in P processes, each with --tasks
    /// threads (P × N workers in all).
    #[arg(
        short = 'P',
        long,
        default_value_t = 1,
        value_name = "P",
        requires = "dir"
    )]
    pub processes: usize,
    /// Client library: the Sextant directory to run in.
    #[arg(long, default_value = "/", value_name = "PATH", conflicts_with = "dir")]
    pub under: String,
    /// Client library: threads of the client's async runtime (1: all
    /// tasks on the calling thread).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub client_threads: usize,
    /// Repeat the whole run R times (each in a fresh directory); report
    /// every repetition and the median.
    #[arg(long, default_value_t = 1, value_name = "R")]
    pub reps: usize,
    /// Also count the CPU time of these processes (e.g. the server's and
    /// the mount's PIDs) in each phase's cpu_seconds and ops per
    /// CPU-second. This process is always counted (-P workers are not:
    /// with -P, no CPU time is reported).
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub cpu_of: Vec<u32>,
    /// No progress on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Counts finished operations for the progress display.
#[derive(Clone, Default)]
pub struct Progress {
    done: Arc<AtomicU64>,
}

impl Progress {
    pub fn tick(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Draws a progress bar for one phase on stderr (only when it is a
/// terminal) until dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(label: String, total: u64, progress: &Progress, quiet: bool) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        if quiet {
            return Ticker { stop, thread: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{msg:>14} [{bar:30}] {pos}/{len} ({per_sec}, {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(label);
        let (s, done) = (Arc::clone(&stop), Arc::clone(&progress.done));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                bar.set_position(done.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The JSON report.
#[derive(Serialize)]
struct Report {
    mode: &'static str,
    target: String,
    tasks: usize,
    processes: usize,
    items: usize,
    shared: bool,
    reps: usize,
    /// Per phase: the median over repetitions of each number.
    median: Vec<Summary>,
    /// Every repetition's phases.
    runs: Vec<Vec<Summary>>,
    /// What the client held for log-less servers' recovery when the run
    /// ended (absent when it never received a backup: a journaling server,
    /// or `--dir`).
    #[serde(skip_serializing_if = "Option::is_none")]
    backups: Option<Held>,
}

/// The client's log-less backups (all servers'), see
/// [`Client::backup_stats`].
#[derive(Serialize, Debug, PartialEq, Eq)]
struct Held {
    /// Entries held at the end.
    entries: usize,
    /// Their bytes.
    bytes: usize,
    /// The most bytes held at once during the run, per server, summed
    /// over the servers (the peaks may not coincide: an upper bound).
    peak_bytes: usize,
    /// Entries received in all (with duplicates).
    received: u64,
}

impl Held {
    fn of(client: &Client) -> Option<Held> {
        let b = client.backup_stats();
        (b.received > 0).then_some(Held {
            entries: b.entries,
            bytes: b.bytes,
            peak_bytes: b.peak_bytes,
            received: b.received,
        })
    }
}

/// How operations are issued.
enum Backend {
    Remote {
        client: Client,
        addr: String,
    },
    Local {
        dir: PathBuf,
        counters: Option<Client>,
    },
}

fn connect(cli: &Cli, addr: &str, rt: &tokio::runtime::Runtime) -> Result<Client> {
    if cli.key_file.is_some() {
        anyhow::bail!("bench needs the cluster secret: a client key may not run it");
    }
    let (addr, secret) = crate::session::server_for(cli, addr)?;
    let options = crate::session::client_options(cli.tls_ca.as_deref())?;
    rt.block_on(Client::connect(&addr, &secret, options))
        .map_err(|e| crate::session::connect_failed(&addr, cli.tls_ca.as_deref(), e))
}

/// `sextant bench`.
pub fn run(cli: &Cli, args: &BenchArgs) -> Result<()> {
    if args.tasks == 0 || args.processes == 0 || args.reps == 0 {
        bail!("--tasks, --processes and --reps must be at least 1");
    }
    let layout = Layout {
        shared: args.shared,
        items: args.items,
    };
    let kinds: Vec<Kind> = match (args.files_only, args.dirs_only) {
        (true, _) => vec![Kind::File],
        (_, true) => vec![Kind::Dir],
        _ => vec![Kind::File, Kind::Dir],
    };
    let phases = plan::phases(&kinds, &plan::parse_ops(&args.phases)?);

    if let Ok(p) = std::env::var(local::WORKER_ENV) {
        // A worker process of a --dir run with -P.
        let index: usize = p.parse().context("bad worker index")?;
        let root = std::env::var_os(local::ROOT_ENV).context("worker without a root")?;
        let l = local::Local {
            root: root.into(),
            layout,
            threads: args.tasks,
            first_task: index * args.tasks,
            readdir_passes: args.readdir_passes,
        };
        return l.serve_parent();
    }

    let rt = if args.client_threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.client_threads)
            .enable_all()
            .build()
    }
    .context("starting the async runtime")?;
    let backend = match &args.dir {
        Some(dir) => Backend::Local {
            dir: dir.clone(),
            counters: cli
                .server
                .as_deref()
                .map(|a| connect(cli, a, &rt))
                .transpose()?,
        },
        None => {
            let addr = cli
                .server
                .clone()
                .unwrap_or_else(|| sextant_proto::DEFAULT_LISTEN.to_string());
            Backend::Remote {
                client: connect(cli, &addr, &rt)?,
                addr,
            }
        }
    };
    let mut runs = Vec::with_capacity(args.reps);
    for rep in 0..args.reps {
        let name = format!("bench.{}.{rep}", std::process::id());
        let run = match &backend {
            Backend::Remote { client, .. } => {
                rt.block_on(run_remote(args, layout, &phases, client, &name))
            }
            Backend::Local { dir, counters } => {
                run_local(args, layout, &phases, dir, counters.as_ref(), &rt, &name)
            }
        }
        .with_context(|| format!("repetition {} of {}", rep + 1, args.reps))?;
        if !args.quiet && args.reps > 1 {
            eprintln!("repetition {} of {} done", rep + 1, args.reps);
        }
        runs.push(run);
    }
    let report = Report {
        mode: match backend {
            Backend::Remote { .. } => "client",
            Backend::Local { .. } => "dir",
        },
        target: match &backend {
            Backend::Remote { addr, .. } => addr.clone(),
            Backend::Local { dir, .. } => dir.display().to_string(),
        },
        tasks: args.tasks,
        processes: args.processes,
        items: args.items,
        shared: args.shared,
        reps: args.reps,
        median: medians(&runs),
        runs,
        backups: match &backend {
            Backend::Remote { client, .. } => Held::of(client),
            Backend::Local { .. } => None,
        },
    };
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}

/// Times one phase: `f` runs it; journal syncs and CPU time are read
/// before and after when `syncs` and `cpu` can.
fn timed<F>(
    phase: Phase,
    total: u64,
    quiet: bool,
    mut syncs: impl FnMut() -> Result<Option<u64>>,
    mut cpu: impl FnMut() -> Result<Option<f64>>,
    f: F,
) -> Result<Summary>
where
    F: FnOnce(&Progress) -> Result<remote::Outcome>,
{
    let progress = Progress::default();
    let before = syncs()?;
    let ticker = Ticker::start(phase.to_string(), total, &progress, quiet);
    let cpu0 = cpu()?;
    let t = Instant::now();
    let out = f(&progress)?;
    let seconds = t.elapsed().as_secs_f64();
    let cpu1 = cpu()?;
    drop(ticker);
    let after = syncs()?;
    let counts = Counts {
        entries: (phase.op == plan::Op::Readdir).then_some(out.entries),
        journal_syncs: before.zip(after).map(|(b, a)| a.saturating_sub(b)),
        cpu_seconds: cpu0.zip(cpu1).map(|(a, b)| b - a),
    };
    Ok(summarize(
        phase.to_string(),
        out.latencies_ns,
        seconds,
        counts,
    ))
}

fn total_ops(args: &BenchArgs, phase: Phase, workers: usize) -> u64 {
    let per = if phase.op == plan::Op::Readdir {
        args.readdir_passes
    } else {
        args.items
    };
    (per * workers) as u64
}

async fn run_remote(
    args: &BenchArgs,
    layout: Layout,
    phases: &[Phase],
    client: &Client,
    name: &str,
) -> Result<Vec<Summary>> {
    let cred = caller();
    let mut run = remote::Run::prepare(
        client.clone(),
        cred.clone(),
        &args.under,
        name,
        layout,
        args.tasks,
        args.readdir_passes,
    )
    .await?;
    let mut out = Vec::new();
    for &phase in phases {
        let progress = Progress::default();
        let before = remote::journal_syncs(client, &cred).await?;
        let ticker = Ticker::start(
            phase.to_string(),
            total_ops(args, phase, args.tasks),
            &progress,
            args.quiet || !phase.reported,
        );
        let cpu0 = cpu::total(&args.cpu_of)?;
        let t = Instant::now();
        let o = run.phase(phase, &progress).await?;
        let seconds = t.elapsed().as_secs_f64();
        let cpu1 = cpu::total(&args.cpu_of)?;
        drop(ticker);
        let after = remote::journal_syncs(client, &cred).await?;
        if phase.reported {
            let counts = Counts {
                entries: (phase.op == plan::Op::Readdir).then_some(o.entries),
                journal_syncs: Some(after.saturating_sub(before)),
                cpu_seconds: Some(cpu1 - cpu0),
            };
            let s = summarize(phase.to_string(), o.latencies_ns, seconds, counts);
            note(args, &s);
            out.push(s);
        }
    }
    run.cleanup(&args.under, name).await?;
    Ok(out)
}

fn run_local(
    args: &BenchArgs,
    layout: Layout,
    phases: &[Phase],
    dir: &std::path::Path,
    counters: Option<&Client>,
    rt: &tokio::runtime::Runtime,
    name: &str,
) -> Result<Vec<Summary>> {
    let root = dir.join(name);
    let workers = args.tasks * args.processes;
    std::fs::create_dir(&root).with_context(|| format!("making {}", root.display()))?;
    for d in layout.dirs(workers) {
        let p = root.join(d);
        std::fs::create_dir(&p).with_context(|| format!("making {}", p.display()))?;
    }
    let cred = caller();
    let syncs = || -> Result<Option<u64>> {
        counters
            .map(|c| rt.block_on(remote::journal_syncs(c, &cred)))
            .transpose()
    };
    let local = local::Local {
        root: root.clone(),
        layout,
        threads: args.tasks,
        first_task: 0,
        readdir_passes: args.readdir_passes,
    };
    let mut pool = if args.processes > 1 {
        Some(local::Pool::start(args.processes, &root)?)
    } else {
        None
    };
    let mut out = Vec::new();
    for &phase in phases {
        let quiet = args.quiet || !phase.reported;
        let total = total_ops(args, phase, workers);
        let cpu = || -> Result<Option<f64>> {
            if args.processes > 1 {
                return Ok(None);
            }
            cpu::total(&args.cpu_of).map(Some)
        };
        let s = timed(
            phase,
            total,
            quiet,
            syncs,
            cpu,
            |progress| match &mut pool {
                Some(pool) => pool.phase(phase),
                None => local.phase(phase, progress),
            },
        )?;
        if phase.reported {
            note(args, &s);
            out.push(s);
        }
    }
    if let Some(pool) = pool {
        pool.finish()?;
    }
    for d in layout.dirs(workers) {
        let p = root.join(d);
        std::fs::remove_dir(&p).with_context(|| format!("removing {}", p.display()))?;
    }
    std::fs::remove_dir(&root).with_context(|| format!("removing {}", root.display()))?;
    Ok(out)
}

/// One line on stderr per finished phase (progress for logs).
fn note(args: &BenchArgs, s: &Summary) {
    if !args.quiet {
        eprintln!(
            "{}: {} ops in {:.2} s, {:.0}/s",
            s.phase, s.ops, s.seconds, s.ops_per_sec
        );
    }
}

/// Per phase, the median of every number over the repetitions.
fn medians(runs: &[Vec<Summary>]) -> Vec<Summary> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let col = |f: &dyn Fn(&Summary) -> Option<f64>| -> Option<f64> {
                let v: Vec<f64> = runs.iter().filter_map(|r| r.get(i)).filter_map(f).collect();
                median(&v)
            };
            Summary {
                phase: s.phase.clone(),
                ops: s.ops,
                seconds: col(&|x| Some(x.seconds)).unwrap_or(0.0),
                ops_per_sec: col(&|x| Some(x.ops_per_sec)).unwrap_or(0.0),
                p50_us: col(&|x| Some(x.p50_us)).unwrap_or(0.0),
                p99_us: col(&|x| Some(x.p99_us)).unwrap_or(0.0),
                max_us: col(&|x| Some(x.max_us)).unwrap_or(0.0),
                entries_per_sec: col(&|x| x.entries_per_sec),
                journal_syncs: col(&|x| x.journal_syncs.map(|n| n as f64))
                    .map(|m| m.round() as u64),
                ops_per_sync: col(&|x| x.ops_per_sync),
                cpu_seconds: col(&|x| x.cpu_seconds),
                ops_per_cpu_sec: col(&|x| x.ops_per_cpu_sec),
            }
        })
        .collect()
}

fn print_text(r: &Report) {
    let layout = if r.shared {
        "one shared directory"
    } else {
        "a directory per worker"
    };
    let procs = if r.processes > 1 {
        format!("{} processes × ", r.processes)
    } else {
        String::new()
    };
    println!(
        "sextant bench ({}: {}): {procs}{} workers × {} items, {layout}{}",
        if r.mode == "client" {
            "client library"
        } else {
            "directory"
        },
        r.target,
        r.tasks,
        r.items,
        if r.reps > 1 {
            format!(", median of {} repetitions", r.reps)
        } else {
            String::new()
        }
    );
    println!(
        "{:<14} {:>9} {:>8} {:>11} {:>9} {:>9} {:>9} {:>7} {:>8} {:>10}",
        "phase",
        "ops",
        "seconds",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "max µs",
        "syncs",
        "ops/sync",
        "ops/CPU-s"
    );
    for s in &r.median {
        println!(
            "{:<14} {:>9} {:>8.3} {:>11.0} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>8} {:>10}",
            s.phase,
            s.ops,
            s.seconds,
            s.ops_per_sec,
            s.p50_us,
            s.p99_us,
            s.max_us,
            s.journal_syncs.map_or("-".into(), |n| n.to_string()),
            s.ops_per_sync.map_or("-".into(), |n| format!("{n:.1}")),
            s.ops_per_cpu_sec.map_or("-".into(), |n| format!("{n:.0}")),
        );
        if let Some(e) = s.entries_per_sec {
            println!("{:<14} {:>9} entries/s {:.0}", "", "", e);
        }
    }
    if r.reps > 1 {
        for s in &r.median {
            let all: Vec<String> = r
                .runs
                .iter()
                .filter_map(|run| run.iter().find(|x| x.phase == s.phase))
                .map(|x| format!("{:.0}", x.ops_per_sec))
                .collect();
            println!("{:<14} ops/s per repetition: {}", s.phase, all.join(" / "));
        }
    }
    if let Some(b) = &r.backups {
        println!(
            "log-less backups held at the end: {} entries, {} bytes (peak {} bytes; {} received)",
            b.entries, b.bytes, b.peak_bytes, b.received
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(phase: &str, rate: f64, syncs: Option<u64>) -> Summary {
        let c = Counts {
            journal_syncs: syncs,
            ..Counts::default()
        };
        let mut s = summarize(phase.into(), vec![1000; 10], 10.0 / rate, c);
        s.ops_per_sec = rate;
        s
    }

    #[test]
    fn medians_per_phase_over_repetitions() {
        let runs = vec![
            vec![
                summary("file-create", 100.0, Some(10)),
                summary("file-stat", 7.0, None),
            ],
            vec![
                summary("file-create", 300.0, Some(2)),
                summary("file-stat", 5.0, None),
            ],
            vec![
                summary("file-create", 200.0, Some(5)),
                summary("file-stat", 9.0, None),
            ],
        ];
        let m = medians(&runs);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].phase, "file-create");
        assert_eq!(m[0].ops_per_sec, 200.0);
        assert_eq!(m[0].journal_syncs, Some(5));
        assert_eq!(m[0].ops_per_sync, Some(2.0));
        assert_eq!((m[1].ops_per_sec, m[1].journal_syncs), (7.0, None));
        assert!(medians(&[]).is_empty());
    }
}
