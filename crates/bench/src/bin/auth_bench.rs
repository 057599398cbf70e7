//! `sextant-auth-bench`: issue 22's benchmark — what the identity checks
//! cost per call. The same work through three doors of one server, in
//! interleaved rounds:
//!
//! - `secret`: TCP with the cluster secret (the admin path);
//! - `socket`: the Unix socket, as the caller the kernel names
//!   (SO_PEERCRED and the caller's groups), no secret;
//! - `key`: TCP with a client key (an HMAC-SHA256 proof when a session
//!   stream opens — every request of this client goes on one — its nonce
//!   remembered; the key's limits checked on every request);
//! - `pathkey` (with `--path-key-file`): TCP with a client key limited to
//!   a subtree (`sextant auth add NAME --path /sub`): every request is
//!   also checked to stay inside it (`crate::confine` of the server; on a
//!   cluster that check may ask other servers).
//!
//! Per door and round: `--tasks` workers on one connection each create
//! `--items` files in a directory of their own (one request at a time per
//! worker), then getattr each. Everything happens under `--under` (made
//! if missing), so a path-limited key and the others do the same work.
//! Every run's directories are made first (with the secret, owned by the
//! bench's user), then `--settle` seconds pass (a cluster spreads their
//! tables), then the timed runs.
//! Reported: operations per second and p50 per phase, medians over the
//! rounds, and each door's ratio to the secret's in the same round; with
//! `--server-pids`, also the servers' CPU (user + system, all their
//! threads) per operation of each phase.
//!
//! The doors take turns in a different order each round (round r starts
//! with door r mod doors): the server's namespace grows with every run,
//! so a door always run last would run on the largest namespace (with 3
//! doors and 3 rounds each door is once first, second and third).
//!
//! The kernel's caller on the socket is only measured as such if the
//! bench is not root (the server trusts a root peer as the secret's
//! holder): `--run-as UID:GID` reads the credential files, then drops to
//! that identity before any call (every door then runs as it).
//! `scripts/bench-auth.sh` starts a log-less server (so a create costs
//! CPU, not a journal sync) or a cluster, and the keys.
//!
//! ```text
//! sextant-auth-bench --server 127.0.0.1:7451 --socket DATA/../sextant.sock \
//!     --secret-file DATA/secret --key-file bench.key --tasks 1,16 --reps 3 \
//!     --run-as 65534:65534 --server-pids 1234
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
    /// The doors measured (secret, socket, key, pathkey), comma-separated;
    /// `secret` must be one (the ratios are to it).
    #[arg(long, default_value = "secret,socket,key", value_delimiter = ',')]
    doors: Vec<String>,
    /// A client key limited to `--under` (`sextant auth add NAME --path
    /// DIR`), for the `pathkey` door.
    #[arg(long)]
    path_key_file: Option<PathBuf>,
    /// The directory every door works in (made, mode 0777, if missing).
    #[arg(long, default_value = "/")]
    under: String,
    /// Server process ids: report their CPU per operation.
    #[arg(long, value_delimiter = ',')]
    server_pids: Vec<u32>,
    /// The servers' metrics addresses (host:port): report the gRPC calls
    /// they admitted per operation (`sextant_auth_calls_total`: a session
    /// counts once, so what grows with the operations is server-to-server
    /// calls — forwards, a confined key's `DirChain` reads).
    #[arg(long, value_delimiter = ',')]
    metrics: Vec<String>,
    /// Seconds to wait after making every run's directories (a cluster's
    /// coordinator spreads their tables meanwhile).
    #[arg(long, default_value_t = 0.0)]
    settle: f64,
    /// UID:GID to run as once the credential files are read (so that the
    /// socket door is a local user's, not root's).
    #[arg(long)]
    run_as: Option<String>,
    /// With `--metrics`: after each phase, print every counter the
    /// servers' metrics pages moved by (series ending in `_total`, and a
    /// histogram's `_count`), per 1,000 operations, all servers and each
    /// (what a door's requests make the servers do: calls between them,
    /// checks, lease asks, table moves, retries).
    #[arg(long)]
    count: bool,
}

const PHASES: [&str; 2] = ["create", "getattr"];

/// One phase of one run: operations per second, p50 (µs), the servers'
/// CPU per operation (µs; NaN without `--server-pids`) and the gRPC calls
/// they admitted per operation (NaN without `--metrics`).
#[derive(Clone, Copy, Debug)]
struct Figure {
    ops_per_sec: f64,
    p50_us: f64,
    server_cpu_us: f64,
    calls: f64,
    /// The path-limited checks that could not use the records kept under
    /// leases (`sextant_confine_kept_walk_misses_total`, all servers): a
    /// lease not live, or a read that needed a call. NaN without
    /// `--metrics`; 0 from servers that do not count them.
    misses: f64,
    /// Each server's share of `server_cpu_us` (in `--server-pids` order).
    shares: [f64; MAX_SERVERS],
}

/// Servers whose CPU shares a [`Figure`] keeps.
const MAX_SERVERS: usize = 8;

/// The sums of `sextant_auth_calls_total` and of
/// `sextant_confine_kept_walk_misses_total` over the servers' metrics
/// endpoints `addrs`; NaN if any cannot be read.
fn admitted_calls(addrs: &[String]) -> [f64; 2] {
    let mut total = [0.0; 2];
    for addr in addrs {
        let Ok(text) = metrics_page(addr) else {
            return [f64::NAN; 2];
        };
        total[0] += calls_in(&text);
        total[1] += series_sum(&text, "sextant_confine_kept_walk_misses_total");
    }
    if addrs.is_empty() {
        [f64::NAN; 2]
    } else {
        total
    }
}

/// The metrics page a server serves at `addr` (host:port).
fn metrics_page(addr: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr)?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(c, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut body = String::new();
    c.read_to_string(&mut body)?;
    Ok(body)
}

/// Every counter series of a metrics page (`name{labels}`: a name ending
/// in `_total`, or a histogram's `_count`) and its value.
fn counter_series(page: &str) -> std::collections::BTreeMap<String, f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            (name.ends_with("_total") || name.ends_with("_count"))
                .then(|| Some((series.to_string(), value.parse::<f64>().ok()?)))?
        })
        .collect()
}

/// [`counter_series`] of each server's page (`None`: one cannot be read).
fn counters(addrs: &[String]) -> Option<Vec<std::collections::BTreeMap<String, f64>>> {
    addrs
        .iter()
        .map(|a| metrics_page(a).ok().map(|p| counter_series(&p)))
        .collect()
}

/// What the counters moved by between `before` and `after` (each
/// server's), per 1,000 of `ops`: one line per series that moved, all
/// servers, then each.
fn counted(
    before: &[std::collections::BTreeMap<String, f64>],
    after: &[std::collections::BTreeMap<String, f64>],
    ops: usize,
) -> String {
    let mut names: std::collections::BTreeSet<&String> = std::collections::BTreeSet::new();
    for a in after {
        names.extend(a.keys());
    }
    let per = 1000.0 / ops.max(1) as f64;
    let mut out = String::new();
    for name in names {
        let each: Vec<f64> = after
            .iter()
            .zip(before)
            .map(|(a, b)| a.get(name).copied().unwrap_or(0.0) - b.get(name).copied().unwrap_or(0.0))
            .collect();
        let all: f64 = each.iter().sum();
        if all.abs() < 0.5 {
            continue;
        }
        let each: Vec<String> = each.iter().map(|d| format!("{:.1}", d * per)).collect();
        out.push_str(&format!(
            "    {name} {:.1} [{}]\n",
            all * per,
            each.join(" ")
        ));
    }
    out
}

/// The sum of the `sextant_auth_calls_total` series in a metrics page.
fn calls_in(page: &str) -> f64 {
    series_sum(page, "sextant_auth_calls_total")
}

/// The sum of the series of the counter `name` in a metrics page.
fn series_sum(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The doors in the order round `round` runs them: rotated by one each
/// round, so that over `doors.len()` rounds each door takes every place
/// once.
fn door_order<'a>(doors: &[&'a str], round: usize) -> Vec<&'a str> {
    (0..doors.len())
        .map(|i| doors[(round + i) % doors.len()])
        .collect()
}

/// The CPU time (user + system, µs) each of the processes `pids` has
/// used; NaN for one that cannot be read.
fn cpu_us(pids: &[u32]) -> Vec<f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    pids.iter()
        .map(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return f64::NAN;
            };
            // Fields after the command (which may hold spaces), from field
            // 3: utime and stime are fields 14 and 15.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            match (
                f.get(11).and_then(|v| v.parse::<f64>().ok()),
                f.get(12).and_then(|v| v.parse::<f64>().ok()),
            ) {
                (Some(u), Some(s)) => (u + s) / ticks * 1e6,
                _ => f64::NAN,
            }
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs both phases through `client`, one worker per directory of `dirs`.
async fn run(
    client: &Client,
    cred: &Credentials,
    dirs: &[Soid],
    items: usize,
    pids: &[u32],
    metrics: &[String],
    count: bool,
) -> Result<([Figure; 2], [String; 2]), String> {
    let tasks = dirs.len();
    let mut out = [Figure {
        ops_per_sec: 0.0,
        p50_us: 0.0,
        server_cpu_us: f64::NAN,
        calls: f64::NAN,
        misses: f64::NAN,
        shares: [f64::NAN; MAX_SERVERS],
    }; 2];
    let mut made: Vec<Vec<Soid>> = vec![Vec::new(); tasks];
    let mut counts = [String::new(), String::new()];
    for (p, phase) in PHASES.iter().enumerate() {
        let counters_before = if count { counters(metrics) } else { None };
        let calls_before = admitted_calls(metrics);
        let cpu_before = cpu_us(pids);
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
        let per_server: Vec<f64> = cpu_us(pids)
            .iter()
            .zip(&cpu_before)
            .map(|(a, b)| a - b)
            .collect();
        let cpu: f64 = if pids.is_empty() {
            f64::NAN
        } else {
            per_server.iter().sum()
        };
        let mut shares = [f64::NAN; MAX_SERVERS];
        for (s, c) in shares.iter_mut().zip(&per_server) {
            *s = c / cpu;
        }
        let after = admitted_calls(metrics);
        if let Some(b) = &counters_before {
            if let Some(a) = counters(metrics) {
                counts[p] = counted(b, &a, tasks * items);
            }
        }
        let (calls, misses) = (after[0] - calls_before[0], after[1] - calls_before[1]);
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
            server_cpu_us: cpu / (tasks * items) as f64,
            calls: calls / (tasks * items) as f64,
            misses,
            shares,
        };
    }
    Ok((out, counts))
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

/// The credential strings of the doors, read before the bench drops its
/// identity (`--run-as`).
struct DoorCredentials {
    secret: String,
    key: String,
    path_key: Option<String>,
}

fn read_key(file: &PathBuf) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let key = sextant_proto::keyauth::ClientKey::parse_file(&text)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(key.credential())
}

fn read_credentials(args: &Args) -> Result<DoorCredentials, String> {
    Ok(DoorCredentials {
        secret: std::fs::read_to_string(&args.secret_file)
            .map_err(|e| format!("{}: {e}", args.secret_file.display()))?
            .trim()
            .to_string(),
        key: read_key(&args.key_file)?,
        path_key: args.path_key_file.as_ref().map(read_key).transpose()?,
    })
}

/// Becomes `uid:gid` (no supplementary groups), for good.
fn drop_to(spec: &str) -> Result<(), String> {
    let (u, g) = spec
        .split_once(':')
        .ok_or_else(|| format!("--run-as {spec}: not UID:GID"))?;
    let uid: u32 = u.parse().map_err(|_| format!("--run-as: bad uid {u}"))?;
    let gid: u32 = g.parse().map_err(|_| format!("--run-as: bad gid {g}"))?;
    // SAFETY: plain system calls, before any other thread exists.
    let failed = unsafe {
        libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
    };
    if failed {
        return Err(format!(
            "--run-as {spec}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

async fn connect(args: &Args, creds: &DoorCredentials, door: &str) -> Result<Client, String> {
    let (addr, credential) = match door {
        "secret" => (args.server.clone(), creds.secret.clone()),
        "socket" => (format!("unix:{}", args.socket.display()), String::new()),
        "key" => (args.server.clone(), creds.key.clone()),
        "pathkey" => (
            args.server.clone(),
            creds
                .path_key
                .clone()
                .ok_or("the pathkey door needs --path-key-file")?,
        ),
        other => return Err(format!("unknown door {other}")),
    };
    Client::connect(&addr, &credential, Options::default())
        .await
        .map_err(|e| format!("{door}: connecting to {addr}: {e}"))
}

fn main() {
    let args = Args::parse();
    let prepared = read_credentials(&args).and_then(|c| {
        if let Some(spec) = &args.run_as {
            drop_to(spec)?;
        }
        Ok(c)
    });
    let creds = match prepared {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sextant-auth-bench: {e}");
            std::process::exit(1);
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if let Err(e) = rt.block_on(bench(&args, &creds)) {
        eprintln!("sextant-auth-bench: {e}");
        std::process::exit(1);
    }
}

/// The directory `path` (made, mode 0777, where missing), as the admin.
async fn make_dirs(admin: &Client, path: &str) -> Result<Soid, String> {
    let mut at = Soid::ROOT;
    for name in path.split('/').filter(|c| !c.is_empty()) {
        at = match admin
            .lookup(&Credentials::root(), at, name.as_bytes())
            .await
        {
            Ok(a) => a.soid,
            Err(_) => {
                admin
                    .mkdir(&Credentials::root(), at, name.as_bytes(), 0o777)
                    .await
                    .map_err(|e| format!("mkdir {path}: {e}"))?
                    .soid
            }
        };
    }
    Ok(at)
}

async fn bench(args: &Args, creds: &DoorCredentials) -> Result<(), String> {
    if !args.doors.iter().any(|d| d == "secret") {
        return Err("--doors must include secret (the ratios are to it)".into());
    }
    let doors: Vec<&str> = args.doors.iter().map(String::as_str).collect();
    // The caller's own identity: the socket takes the kernel's anyway.
    // SAFETY: getuid/getgid cannot fail.
    let cred = Credentials::user(unsafe { libc::getuid() }, unsafe { libc::getgid() });
    // (door, tasks, round) -> figures
    let mut runs: Vec<(&str, usize, usize, [Figure; 2])> = Vec::new();
    let admin = connect(args, creds, "secret").await?;
    let under = make_dirs(&admin, &args.under).await?;
    let top = admin
        .mkdir(
            &Credentials::root(),
            under,
            format!("authbench-{}", std::process::id()).as_bytes(),
            0o777,
        )
        .await
        .map_err(|e| format!("mkdir: {e}"))?
        .soid;
    // Every run's directories first (as the bench's user), so that no
    // directory (and on a cluster no table) is made while a phase is
    // timed; `--settle` then lets a cluster's coordinator spread them.
    let mut dirs = std::collections::HashMap::new();
    for round in 0..args.reps {
        for &tasks in &args.tasks {
            for &door in &doors {
                let name = format!("{door}-t{tasks}-r{round}");
                let root = admin
                    .mkdir(&cred, top, name.as_bytes(), 0o755)
                    .await
                    .map_err(|e| format!("mkdir {name}: {e}"))?
                    .soid;
                let mut workers = Vec::with_capacity(tasks);
                for t in 0..tasks {
                    let w = format!("w{t}");
                    let a = admin
                        .mkdir(&cred, root, w.as_bytes(), 0o755)
                        .await
                        .map_err(|e| format!("mkdir {name}/{w}: {e}"))?;
                    workers.push(a.soid);
                }
                dirs.insert((round, tasks, door), workers);
            }
        }
    }
    if args.settle > 0.0 {
        eprintln!("waiting {} s for the tables to settle", args.settle);
        tokio::time::sleep(std::time::Duration::from_secs_f64(args.settle)).await;
    }
    for round in 0..args.reps {
        for &tasks in &args.tasks {
            for door in door_order(&doors, round) {
                let client = connect(args, creds, door).await?;
                let (f, counts) = run(
                    &client,
                    &cred,
                    &dirs[&(round, tasks, door)],
                    args.items,
                    &args.server_pids,
                    &args.metrics,
                    args.count,
                )
                .await?;
                eprintln!(
                    "round {round}, {tasks} tasks, {door}: create {:.0}/s (server {:.1} µs/op, \
                     {:.2} calls/op, {} kept-walk misses), getattr {:.0}/s (server {:.1} µs/op, \
                     {:.2} calls/op, {} kept-walk misses)",
                    f[0].ops_per_sec,
                    f[0].server_cpu_us,
                    f[0].calls,
                    f[0].misses,
                    f[1].ops_per_sec,
                    f[1].server_cpu_us,
                    f[1].calls,
                    f[1].misses
                );
                if args.server_pids.len() > 1 {
                    let share = |f: &Figure| {
                        f.shares[..args.server_pids.len().min(MAX_SERVERS)]
                            .iter()
                            .map(|s| format!("{:.0}%", s * 100.0))
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    eprintln!(
                        "  servers' shares of the CPU: create {}, getattr {}",
                        share(&f[0]),
                        share(&f[1])
                    );
                }
                for (phase, c) in PHASES.iter().zip(&counts) {
                    if !c.is_empty() {
                        eprint!("  counters per 1,000 {phase}s, all servers [each]:\n{c}");
                    }
                }
                runs.push((door, tasks, round, f));
            }
        }
    }
    println!(
        "phase tasks door ops/s(median) p50_us(median) ratio_to_secret(median of rounds) \
         server_cpu_us_per_op(median) cpu_ratio_to_secret(median of rounds) \
         server_calls_per_op(median) kept_walk_misses(median)"
    );
    for (p, phase) in PHASES.iter().enumerate() {
        for &tasks in &args.tasks {
            for &door in &doors {
                let mine: Vec<_> = runs
                    .iter()
                    .filter(|r| r.0 == door && r.1 == tasks)
                    .collect();
                let ratio = |of: fn(&Figure) -> f64| {
                    median(
                        mine.iter()
                            .filter_map(|r| {
                                runs.iter()
                                    .find(|s| s.0 == "secret" && s.1 == tasks && s.2 == r.2)
                                    .map(|s| of(&r.3[p]) / of(&s.3[p]))
                            })
                            .collect(),
                    )
                };
                println!(
                    "{phase} {tasks} {door} {:.0} {:.1} {:.3} {:.1} {:.3} {:.3} {:.0}",
                    median(mine.iter().map(|r| r.3[p].ops_per_sec).collect()),
                    median(mine.iter().map(|r| r.3[p].p50_us).collect()),
                    ratio(|f| f.ops_per_sec),
                    median(mine.iter().map(|r| r.3[p].server_cpu_us).collect()),
                    ratio(|f| f.server_cpu_us),
                    median(mine.iter().map(|r| r.3[p].calls).collect()),
                    median(mine.iter().map(|r| r.3[p].misses).collect()),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_door_takes_every_place_once_over_as_many_rounds() {
        let doors = ["secret", "socket", "key", "pathkey"];
        for place in 0..doors.len() {
            let mut seen: Vec<&str> = (0..doors.len())
                .map(|round| door_order(&doors, round)[place])
                .collect();
            seen.sort_unstable();
            let mut all = doors.to_vec();
            all.sort_unstable();
            assert_eq!(seen, all, "place {place}");
        }
        assert_eq!(door_order(&doors, 0), doors);
    }

    #[test]
    fn admitted_calls_add_up_every_caller_series() {
        let page = "# TYPE sextant_auth_calls_total counter\n\
            sextant_auth_calls_total{transport=\"tcp\",caller=\"secret\"} 12\n\
            sextant_auth_calls_total{transport=\"unix\",caller=\"kernel\"} 3\n\
            sextant_auth_refused_total{reason=\"secret\"} 100\n";
        assert_eq!(calls_in(page), 15.0);
        let page = "sextant_confine_kept_walk_misses_total{why=\"lease\"} 7\n\
            sextant_confine_kept_walk_misses_total{why=\"call\"} 2\n\
            sextant_confine_kept_walk_misses_total_other 100\n";
        assert_eq!(
            series_sum(page, "sextant_confine_kept_walk_misses_total"),
            9.0
        );
    }

    #[test]
    fn counters_moved_are_told_per_thousand_operations() {
        let before = counter_series(
            "# TYPE x_total counter\n\
             x_total{a=\"1\"} 10\n\
             y_seconds_count{op=\"create\"} 5\n\
             z_gauge 3\n",
        );
        assert_eq!(before.len(), 2);
        let after = counter_series(
            "x_total{a=\"1\"} 30\n\
             y_seconds_count{op=\"create\"} 5\n\
             w_total 2000\n\
             z_gauge 9\n",
        );
        let text = counted(&[before.clone(), before], &[after.clone(), after], 2000);
        assert_eq!(
            text,
            "    w_total 2000.0 [1000.0 1000.0]\n    x_total{a=\"1\"} 20.0 [10.0 10.0]\n"
        );
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        let spent = cpu_us(&[std::process::id()]);
        assert_eq!(spent.len(), 1);
        assert!(spent[0].is_finite() && spent[0] >= 0.0);
        assert!(cpu_us(&[u32::MAX])[0].is_nan());
    }
}
