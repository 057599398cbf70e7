//! `sextant cluster`: a local cluster for development and tests (`up`),
//! and what an operator asks of any cluster (`status`, `move`, `drain`).
//!
//! `up` is a supervisor, not a server: it starts etcd (unless given one)
//! and N `sextant serve` processes — each its own process, the first on
//! the default address so every other command and `sextant mount` work
//! unchanged — waits until each listens, prints how to reach them, and on
//! Ctrl-C or SIGTERM stops the servers (each writes its tables back) and
//! then etcd. If any of them dies it stops the rest and fails. It writes
//! `<data>/cluster.toml` (etcd's URL, its key prefix, the servers), where the other
//! `cluster` commands find etcd without flags.
//!
//! The other commands talk to etcd, the cluster's source of truth for
//! membership and the delegation map, and to each server for its counts.
//! An etcd with authentication or TLS on takes credentials (`--etcd-user`,
//! `--etcd-password-file`, `--etcd-ca`, `--etcd-cert`, `--etcd-key`, or
//! their `SEXTANT_ETCD_*` variables); `up --etcd` hands them to its
//! servers through their environment (the password stays in its file).

use anyhow::{bail, Context, Result};
use sextant_coordinator::{ClusterState, EtcdConfig};
use sextant_server::config::EtcdSecurity;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start a whole local cluster: etcd (unless --etcd is given) and N
    /// servers, each its own process, the first on the default address
    /// (127.0.0.1:7411) and the others on the following ports. Everything
    /// lives under --data (etcd/, store/ shared by the servers, s1/, s2/…,
    /// and each process's log). Ctrl-C stops it all cleanly; `up` again
    /// carries on with the same namespace.
    Up(UpArgs),
    /// Members, coordinator, and tables, inodes and requests per server;
    /// every table with its SOID range, owner, epoch, pending move, and
    /// the request rate and inodes its owner published since it got it
    /// (the balancer's figures; none yet: the balancer waits for them).
    /// With --json: {"etcd", "etcd_prefix", "revision", "coordinator", "servers": [{"name",
    /// "address", "tables", "inodes", "requests", "draining"}], "tables":
    /// [{"table", "first", "last", "owner", "epoch", "moving_to", "home",
    /// "rate", "inodes"}],
    /// "borrows": [{"server", "tables"}] (in the coordinator's queue order)}.
    Status(EtcdArgs),
    /// Move the table holding PATH (a namespace path), or the table
    /// numbered TABLE, to SERVER (a member's name). The owner drops it and
    /// SERVER adds it: its contents are not copied.
    Move {
        /// A namespace path (e.g. /proj/a) or a table number (e.g. 3).
        target: String,
        /// The server that takes the table.
        server: String,
        #[command(flatten)]
        etcd: EtcdArgs,
    },
    /// Move every table away from SERVER and give it none (before taking
    /// it out of service); --undo ends the drain.
    Drain {
        /// The server to drain.
        server: String,
        /// End the drain: the server may receive tables again.
        #[arg(long)]
        undo: bool,
        #[command(flatten)]
        etcd: EtcdArgs,
    },
}

#[derive(clap::Args, Debug)]
pub struct EtcdArgs {
    /// etcd's client URLs, comma-separated [default: the URL `sextant
    /// cluster up` recorded in <data>/cluster.toml]
    #[arg(long, env = "SEXTANT_ETCD", value_name = "URLS")]
    pub etcd: Option<String>,
    /// The cluster's key prefix in etcd (the servers' --etcd-prefix)
    /// [default: without --etcd, the one `sextant cluster up` recorded;
    /// else /sextant/]
    #[arg(long, env = "SEXTANT_ETCD_PREFIX", value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    #[command(flatten)]
    pub credentials: EtcdCredentialArgs,
}

/// etcd's own credentials, when its authentication or TLS is on (the
/// servers' etcd_user, etcd_password_file, etcd_ca, etcd_cert, etcd_key).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EtcdCredentialArgs {
    /// etcd's user name (with --etcd-password-file)
    #[arg(long, env = "SEXTANT_ETCD_USER", value_name = "NAME")]
    pub etcd_user: Option<String>,
    /// A file whose first line is the etcd user's password (never the
    /// password itself on the command line: `ps` shows it)
    #[arg(long, env = "SEXTANT_ETCD_PASSWORD_FILE", value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
    /// TLS to etcd: the CA of etcd's certificate (PEM)
    #[arg(long, env = "SEXTANT_ETCD_CA", value_name = "FILE")]
    pub etcd_ca: Option<PathBuf>,
    /// TLS to etcd: this client's certificate (PEM), if etcd asks for one
    #[arg(long, env = "SEXTANT_ETCD_CERT", value_name = "FILE")]
    pub etcd_cert: Option<PathBuf>,
    /// TLS to etcd: the client certificate's key (PEM)
    #[arg(long, env = "SEXTANT_ETCD_KEY", value_name = "FILE")]
    pub etcd_key: Option<PathBuf>,
}

impl EtcdCredentialArgs {
    pub(crate) fn security(&self) -> Result<EtcdSecurity> {
        EtcdSecurity::from_parts(
            self.etcd_user.clone(),
            self.etcd_password_file.clone(),
            self.etcd_ca.clone(),
            self.etcd_cert.clone(),
            self.etcd_key.clone(),
        )
    }

    /// Hands them to a server `up` starts (as its environment: the
    /// password stays in its file).
    fn pass_to(&self, cmd: &mut Command) {
        let vars: [(&str, Option<std::ffi::OsString>); 5] = [
            ("SEXTANT_ETCD_USER", self.etcd_user.clone().map(Into::into)),
            (
                "SEXTANT_ETCD_PASSWORD_FILE",
                self.etcd_password_file.clone().map(Into::into),
            ),
            ("SEXTANT_ETCD_CA", self.etcd_ca.clone().map(Into::into)),
            ("SEXTANT_ETCD_CERT", self.etcd_cert.clone().map(Into::into)),
            ("SEXTANT_ETCD_KEY", self.etcd_key.clone().map(Into::into)),
        ];
        for (key, value) in vars {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// How many servers.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub servers: u16,
    /// Use this etcd (comma-separated client URLs) instead of starting one.
    #[arg(long, env = "SEXTANT_ETCD", value_name = "URLS")]
    pub etcd: Option<String>,
    /// With --etcd: its credentials, handed to every server.
    #[command(flatten)]
    pub credentials: EtcdCredentialArgs,
    /// The cluster's key prefix in etcd, handed to every server (`sextant
    /// serve --etcd-prefix`): clusters sharing one etcd give different
    /// ones [default: /sextant/]
    #[arg(long, env = "SEXTANT_ETCD_PREFIX", value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    /// The first server's port; the others take the following ones.
    #[arg(long, default_value_t = 7411, value_name = "PORT")]
    pub base_port: u16,
    /// Serve each server's Prometheus metrics, the first on this port and
    /// the others on the following ones [default: no metrics]
    #[arg(long, value_name = "PORT")]
    pub metrics_base: Option<u16>,
    /// The servers' journal sync mode: fsync, background[:INTERVAL],
    /// nosync, off (see `sextant serve --help`) [default: background
    /// (5ms), the server's]
    #[arg(long, value_name = "MODE")]
    pub journal_sync: Option<String>,
    /// The membership lease of each server: a dead server's tables move
    /// after about this long, e.g. 6s [default: 6s]
    #[arg(long, value_name = "DURATION")]
    pub lease_ttl: Option<String>,
    /// A server configuration file every server starts with (`sextant
    /// serve --config`: table sizes, caches, TLS…; the flags above and the
    /// cluster's own settings win over it)
    #[arg(long = "server-config", value_name = "FILE")]
    pub server_config: Option<std::path::PathBuf>,
}

/// What `up` leaves in `<data>/cluster.toml` for the other commands.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Record {
    etcd: String,
    /// The servers' etcd key prefix (absent: the default; records from
    /// before it existed have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etcd_prefix: Option<String>,
    servers: Vec<ServerEntry>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
struct ServerEntry {
    name: String,
    address: String,
    data: PathBuf,
    log: PathBuf,
}

const RECORD: &str = "cluster.toml";

pub fn run(data: &Path, json: bool, args: &ClusterArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        match &args.command {
            ClusterCommand::Up(up_args) => up(data, json, up_args).await,
            ClusterCommand::Status(e) => status(data, &etcd_config(data, e)?, json).await,
            ClusterCommand::Move {
                target,
                server,
                etcd,
            } => move_table(data, &etcd_config(data, etcd)?, target, server, json).await,
            ClusterCommand::Drain { server, undo, etcd } => {
                drain(&etcd_config(data, etcd)?, server, *undo, json).await
            }
        }
    })
}

/// etcd's URLs (and the key prefix) as given, else as `up` recorded them.
fn etcd_config(data: &Path, args: &EtcdArgs) -> Result<EtcdConfig> {
    let (urls, recorded_prefix) = match &args.etcd {
        Some(u) => (u.clone(), None),
        None => {
            let file = data.join(RECORD);
            let text = std::fs::read_to_string(&file).with_context(|| {
                format!(
                    "no cluster found: give --etcd URL (or SEXTANT_ETCD), or run this where \
                     `sextant cluster up` keeps its data ({} is missing)",
                    file.display()
                )
            })?;
            let r: Record =
                toml::from_str(&text).with_context(|| format!("bad {}", file.display()))?;
            (r.etcd, r.etcd_prefix)
        }
    };
    let security = args.credentials.security()?;
    let mut cfg = security.config(security.endpoints(&urls))?;
    if let Some(p) = args.etcd_prefix.clone().or(recorded_prefix) {
        cfg.prefix = prefix_arg(&p)?;
    }
    Ok(cfg)
}

/// `--etcd-prefix` normalized (see [`sextant_coordinator::normalize_prefix`]).
pub(crate) fn prefix_arg(p: &str) -> Result<String> {
    sextant_coordinator::normalize_prefix(p).map_err(|e| anyhow::anyhow!("--etcd-prefix: {e}"))
}

async fn read_state(cfg: &EtcdConfig) -> Result<ClusterState> {
    let mut client = sextant_coordinator::etcd::connect(cfg)
        .await
        .context("cannot read the cluster from etcd")?;
    Ok(sextant_coordinator::map::load(&mut client, cfg).await?)
}

// ---- up ------------------------------------------------------------------

/// The processes `up` runs; stopped (servers first, then etcd) on drop.
struct Supervised {
    servers: Vec<(String, Child)>,
    etcd: Option<Child>,
}

impl Supervised {
    fn stop(&mut self) {
        for (_, c) in &self.servers {
            signal(c, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for (name, c) in &mut self.servers {
            wait_until(c, deadline, name);
        }
        self.servers.clear();
        if let Some(mut e) = self.etcd.take() {
            signal(&e, libc::SIGTERM);
            wait_until(&mut e, Instant::now() + Duration::from_secs(10), "etcd");
        }
    }

    /// The first process that ended, if any.
    fn exited(&mut self) -> Option<(String, std::process::ExitStatus)> {
        for (name, c) in &mut self.servers {
            if let Ok(Some(s)) = c.try_wait() {
                return Some((name.clone(), s));
            }
        }
        if let Some(e) = &mut self.etcd {
            if let Ok(Some(s)) = e.try_wait() {
                return Some(("etcd".into(), s));
            }
        }
        None
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

fn signal(c: &Child, sig: i32) {
    if let Ok(pid) = i32::try_from(c.id()) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn wait_until(c: &mut Child, deadline: Instant, name: &str) {
    loop {
        match c.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() >= deadline => {
                eprintln!("sextant cluster: {name} did not stop in time; killing it");
                let _ = c.kill();
                let _ = c.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .context("cannot find a free port")?
        .local_addr()?
        .port())
}

/// Starts etcd under `dir`, answering on a free port; its URL.
fn start_etcd(dir: &Path, sup: &mut Supervised) -> Result<String> {
    if Command::new("etcd").arg("--version").output().is_err() {
        bail!(
            "etcd is not installed: install Debian's etcd-server package \
             (scripts/ensure-deps.sh does), or give --etcd URL"
        );
    }
    let (client, peer) = (free_port()?, free_port()?);
    let c = format!("http://127.0.0.1:{client}");
    let p = format!("http://127.0.0.1:{peer}");
    let log = dir.join("etcd.log");
    let child = Command::new("etcd")
        .args(["--name", "sextant-dev", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
        .args([
            "--listen-peer-urls",
            &p,
            "--initial-advertise-peer-urls",
            &p,
        ])
        .args(["--initial-cluster", &format!("sextant-dev={p}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(&log)
                .with_context(|| format!("cannot create {}", log.display()))?,
        )
        .spawn()
        .context("cannot start etcd")?;
    sup.etcd = Some(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
        if let Some((_, s)) = sup.exited() {
            bail!("etcd exited ({s}); see {}", log.display());
        }
        if Instant::now() > deadline {
            bail!("etcd did not answer within 30 s; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(c)
}

/// Starts server `name` (data `dir/name`, listening on `listen`) and
/// waits for its "listening on" line.
fn start_server(
    dir: &Path,
    name: &str,
    listen: &str,
    etcd: &str,
    metrics: Option<String>,
    args: &UpArgs,
) -> Result<(ServerEntry, Child)> {
    use std::io::BufRead;
    let exe = std::env::current_exe().context("cannot find the sextant binary")?;
    let data = dir.join(name);
    let log = dir.join(format!("{name}.log"));
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--data")
        .arg(&data)
        .args(["--listen", listen, "--etcd", etcd, "--name", name])
        .arg("--cluster-store")
        .arg(dir.join("store"))
        .env("SEXTANT_METRICS", metrics.as_deref().unwrap_or("off"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(
            std::fs::File::create(&log)
                .with_context(|| format!("cannot create {}", log.display()))?,
        );
    if let Some(s) = &args.journal_sync {
        cmd.args(["--journal-sync", s]);
    }
    if let Some(t) = &args.lease_ttl {
        cmd.env("SEXTANT_LEASE_TTL", t);
    }
    if let Some(c) = &args.server_config {
        cmd.arg("--config").arg(c);
    }
    if let Some(p) = &args.etcd_prefix {
        cmd.args(["--etcd-prefix", p]);
    }
    // Its own etcd has no authentication: no credentials from this shell's
    // environment either.
    let credentials = match &args.etcd {
        Some(_) => args.credentials.clone(),
        None => EtcdCredentialArgs::default(),
    };
    credentials.pass_to(&mut cmd);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start server {name}"))?;
    let Some(out) = child.stdout.take() else {
        bail!("server {name}: no stdout");
    };
    // The line comes once the server listens; the reader thread then
    // drains the rest so the server never blocks on a full pipe.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(out).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(a) = line.strip_prefix("listening on ") {
                let _ = tx.send(a.trim().to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(address) => Ok((
            ServerEntry {
                name: name.to_string(),
                address,
                data,
                log,
            },
            child,
        )),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            bail!(
                "server {name} did not start (see {}): {}",
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        }
    }
}

async fn up(data: &Path, json: bool, args: &UpArgs) -> Result<()> {
    if sextant_engine::Engine::dir_holds_store(data) {
        bail!(
            "{} holds a single server's store; give the cluster a directory of its own (--data DIR)",
            data.display()
        );
    }
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let data = std::fs::canonicalize(data)?;
    // Stopping starts at the first signal, even one that arrives while
    // the processes are still starting.
    let stop = sextant_server::signalled();
    let mut sup = Supervised {
        servers: Vec::new(),
        etcd: None,
    };
    // Checked before anything starts.
    let etcd_prefix = args.etcd_prefix.as_deref().map(prefix_arg).transpose()?;
    let etcd = match &args.etcd {
        Some(u) => args.credentials.security()?.endpoints(u).join(","),
        None => start_etcd(&data, &mut sup)?,
    };
    let mut entries = Vec::new();
    for i in 0..args.servers {
        let name = format!("s{}", i + 1);
        let port = args
            .base_port
            .checked_add(i)
            .context("the servers' ports run past 65535: lower --base-port")?;
        let listen = format!("127.0.0.1:{port}");
        let metrics = args
            .metrics_base
            .map(|m| m.checked_add(i).map(|p| format!("127.0.0.1:{p}")))
            .map(|m| m.context("the metrics ports run past 65535"))
            .transpose()?;
        let (entry, child) = start_server(&data, &name, &listen, &etcd, metrics, args)?;
        sup.servers.push((name, child));
        entries.push(entry);
    }
    let record = Record {
        etcd: etcd.clone(),
        etcd_prefix: etcd_prefix.clone(),
        servers: entries.clone(),
    };
    let text = toml::to_string(&record).context("cannot write the cluster record")?;
    std::fs::write(data.join(RECORD), text)
        .with_context(|| format!("cannot write {}", data.join(RECORD).display()))?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "etcd": etcd,
                "etcd_prefix": etcd_prefix.as_deref().unwrap_or(sextant_coordinator::DEFAULT_PREFIX),
                "data": data,
                "servers": entries.iter().map(|e| serde_json::json!({
                    "name": e.name, "address": e.address,
                    "data": e.data, "log": e.log,
                })).collect::<Vec<_>>(),
            })
        );
    } else {
        println!(
            "a cluster of {} servers on etcd {etcd} (keys under {}):",
            entries.len(),
            etcd_prefix
                .as_deref()
                .unwrap_or(sextant_coordinator::DEFAULT_PREFIX)
        );
        for e in &entries {
            println!("  {:<4} {:<21} log {}", e.name, e.address, e.log.display());
        }
        println!(
            "every sextant command reaches it at {} (`sextant mount DIR`, `sextant cluster status`); \
             Ctrl-C stops it",
            entries.first().map_or("", |e| e.address.as_str())
        );
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut stop = std::pin::pin!(stop);
    let failed = loop {
        tokio::select! {
            () = &mut stop => break None,
            () = tokio::time::sleep(Duration::from_millis(200)) => {
                if let Some(e) = sup.exited() {
                    break Some(e);
                }
            }
        }
    };
    if !json {
        eprintln!("stopping the servers, then etcd");
    }
    tokio::task::block_in_place(|| sup.stop());
    match failed {
        None => Ok(()),
        Some((name, s)) => bail!("{name} exited ({s}); the cluster was stopped"),
    }
}

// ---- status, move, drain -------------------------------------------------

async fn status(data: &Path, cfg: &EtcdConfig, json: bool) -> Result<()> {
    let state = read_state(cfg).await?;
    let mut servers = Vec::new();
    for (name, m) in &state.members {
        let tables = state.owned_by(name).count();
        let counts = server_counts(data, &m.address).await;
        servers.push(serde_json::json!({
            "name": name,
            "address": m.address,
            "tables": tables,
            "inodes": counts.as_ref().ok().map(|c| c.0),
            "requests": counts.as_ref().ok().map(|c| c.1),
            "error": counts.as_ref().err().map(|e| format!("{e:#}")),
            "draining": state.draining.contains(name),
            "coordinator": state.coordinator.as_ref().is_some_and(|(c, _)| c == name),
        }));
    }
    let tables: Vec<serde_json::Value> = state
        .routes()
        .into_iter()
        .map(|r| {
            // Its load as the balancer weighs it: published by its owner
            // since it became the owner.
            let load = r.owner.as_ref().and_then(|o| {
                state
                    .loads
                    .get(&o.server)
                    .filter(|l| l.rev > o.rev)?
                    .tables
                    .get(&r.table)
            });
            serde_json::json!({
                "table": r.table.0,
                "first": format!("{:032x}", r.range.first.as_u128()),
                "last": format!("{:032x}", r.range.last.as_u128()),
                "owner": r.owner.as_ref().map(|o| o.server.clone()),
                "epoch": r.owner.as_ref().map(|o| o.epoch.0),
                "moving_to": state.moves.get(&r.table).map(|m| m.to.clone()),
                // Lent by a BORROW: where it goes back to.
                "home": state.homes.get(&r.table),
                "rate": load.map(|l| l.rate),
                "inodes": load.map(|l| l.inodes),
            })
        })
        .collect();
    let mut queue: Vec<(&sextant_cluster::ids::Revision, &String, Vec<u32>)> = state
        .borrows
        .iter()
        .map(|(server, (tables, rev))| (rev, server, tables.iter().map(|t| t.0).collect()))
        .collect();
    queue.sort();
    let borrows: Vec<serde_json::Value> = queue
        .iter()
        .map(|(_, server, tables)| serde_json::json!({"server": server, "tables": tables}))
        .collect();
    let coordinator = state.coordinator.as_ref().map(|(c, _)| c.clone());
    if json {
        println!(
            "{}",
            serde_json::json!({
                "etcd": cfg.endpoints.join(","),
                "etcd_prefix": cfg.prefix,
                "revision": state.revision,
                "coordinator": coordinator,
                "servers": servers,
                "tables": tables,
                "borrows": borrows,
            })
        );
        return Ok(());
    }
    println!(
        "cluster on etcd {} (keys under {}) at revision {}; coordinator {}",
        cfg.endpoints.join(","),
        cfg.prefix,
        state.revision,
        coordinator.as_deref().unwrap_or("(none elected)")
    );
    println!(
        "{:<12} {:<21} {:>6} {:>10} {:>10}  state",
        "SERVER", "ADDRESS", "TABLES", "INODES", "REQUESTS"
    );
    let num = |v: &serde_json::Value| v.as_u64().map_or("?".to_string(), |n| n.to_string());
    for s in &servers {
        let mut state_words = Vec::new();
        if s["coordinator"] == true {
            state_words.push("coordinator".to_string());
        }
        if s["draining"] == true {
            state_words.push("draining".to_string());
        }
        if let Some(e) = s["error"].as_str() {
            state_words.push(format!("unreachable: {e}"));
        }
        println!(
            "{:<12} {:<21} {:>6} {:>10} {:>10}  {}",
            s["name"].as_str().unwrap_or(""),
            s["address"].as_str().unwrap_or(""),
            num(&s["tables"]),
            num(&s["inodes"]),
            num(&s["requests"]),
            state_words.join(", ")
        );
    }
    println!(
        "{:<6} {:<34} {:<12} {:>6} {:>7} {:>10}  move",
        "TABLE", "SOIDS (first-last, hex)", "OWNER", "EPOCH", "OPS/S", "INODES"
    );
    for t in &tables {
        println!(
            "{:<6} {:<34} {:<12} {:>6} {:>7} {:>10}  {}",
            num(&t["table"]),
            format!(
                "{}-{}",
                short(t["first"].as_str().unwrap_or("")),
                short(t["last"].as_str().unwrap_or(""))
            ),
            t["owner"].as_str().unwrap_or("(none)"),
            num(&t["epoch"]),
            num(&t["rate"]),
            num(&t["inodes"]),
            [
                t["moving_to"].as_str().map(|m| format!("→ {m}")),
                t["home"].as_str().map(|h| format!("lent, home {h}")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ")
        );
    }
    for (i, (_, server, tables)) in queue.iter().enumerate() {
        let tables: Vec<String> = tables.iter().map(u32::to_string).collect();
        println!(
            "borrow {}: {server} needs tables {} together",
            i + 1,
            tables.join(" ")
        );
    }
    Ok(())
}

/// A SOID in hex without its leading zeros (0 stays "0").
fn short(hex: &str) -> &str {
    let t = hex.trim_start_matches('0');
    if t.is_empty() {
        "0"
    } else {
        t
    }
}

/// A server's inode and request counts (its own status call).
async fn server_counts(data: &Path, address: &str) -> Result<(u64, u64)> {
    let client = connect_admin(data, address).await?;
    let (engine, server) = client
        .stats(&sextant_types::Credentials::root())
        .await
        .with_context(|| format!("status of {address}"))?;
    Ok((engine.inodes, server.requests))
}

/// A client of one server with the cluster's secret: $SEXTANT_SECRET or
/// $SEXTANT_SECRET_FILE, else the copy `up` left in that server's data
/// directory, else the one in --data.
async fn connect_admin(data: &Path, address: &str) -> Result<sextant_client::Client> {
    let secret = std::env::var("SEXTANT_SECRET")
        .ok()
        .or_else(|| {
            std::env::var_os("SEXTANT_SECRET_FILE")
                .and_then(|f| sextant_server::secret::read(Path::new(&f)).ok())
        })
        .or_else(|| cluster_secret_near(data, address))
        // The secret in --data itself (a server's data directory: every
        // server of a cluster keeps a copy of the cluster's secret).
        .or_else(|| sextant_server::secret::read(&sextant_server::secret::path(data)).ok());
    let Some(secret) = secret else {
        bail!(
            "no cluster secret for {address}: give --data a server's data directory, \
             or set SEXTANT_SECRET_FILE"
        );
    };
    sextant_client::Client::connect(address, &secret, sextant_client::Options::default())
        .await
        .with_context(|| format!("cannot reach {address}"))
}

/// The secret `up` gave the server at `address` (its record in
/// `<data>/cluster.toml` names its data directory).
fn cluster_secret_near(data: &Path, address: &str) -> Option<String> {
    let text = std::fs::read_to_string(data.join(RECORD)).ok()?;
    let r: Record = toml::from_str(&text).ok()?;
    let e = r.servers.iter().find(|s| s.address == address)?;
    sextant_server::secret::read(&sextant_server::secret::path(&e.data)).ok()
}

/// The cluster secret of the cluster `up` recorded in `<data>`: that of
/// the server at `address` if it is one of them, else the first server's
/// (they share one). `None`: no record, or no secret this user may read.
pub fn secret_from_record(data: &Path, address: Option<&str>) -> Option<String> {
    if let Some(s) = address.and_then(|a| cluster_secret_near(data, a)) {
        return Some(s);
    }
    let text = std::fs::read_to_string(data.join(RECORD)).ok()?;
    let r: Record = toml::from_str(&text).ok()?;
    let first = r.servers.first()?;
    sextant_server::secret::read(&sextant_server::secret::path(&first.data)).ok()
}

async fn move_table(
    data: &Path,
    cfg: &EtcdConfig,
    target: &str,
    server: &str,
    json: bool,
) -> Result<()> {
    let state = read_state(cfg).await?;
    if !state.members.contains_key(server) {
        bail!(
            "{server:?} is not a member of the cluster (members: {})",
            state.members.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let table = match target.parse::<u32>() {
        Ok(n) => sextant_cluster::ids::TableId(n),
        Err(_) => {
            let soid = resolve_path(data, &state, target).await?;
            state
                .table_of(soid)
                .with_context(|| format!("no table holds {target} (its SOID {soid:?})"))?
        }
    };
    // Asked again for a while when another move of the table (a
    // balancing one, a pull) is pending or its owner is changing.
    let mut client = sextant_coordinator::etcd::connect(cfg).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut state = state;
    loop {
        let owner = state.owner(table).map(|o| o.server.clone());
        if owner.as_deref() == Some(server) && !state.moves.contains_key(&table) {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"table": table.0, "server": server, "moved": false, "already": true})
                );
            } else {
                println!("table {} is already on {server}", table.0);
            }
            return Ok(());
        }
        if owner.is_some()
            && sextant_coordinator::admin::request_move(&mut client, cfg, table, server).await?
        {
            break;
        }
        if std::time::Instant::now() >= deadline {
            bail!(
                "table {} could not be asked to move for 15 s (another move stayed pending, \
                 or it had no owner): try again",
                table.0
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        state = read_state(cfg).await?;
    }
    // Wait for the handover so that the command's end means it is done.
    let map = sextant_coordinator::DelegationMap::start(cfg.clone()).await?;
    let done = map
        .wait_for(Duration::from_secs(60), |s| {
            s.owner(table).is_some_and(|o| o.server == server) && !s.moves.contains_key(&table)
        })
        .await;
    match done {
        Some(_) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({"table": table.0, "server": server, "moved": true})
                );
            } else {
                println!("table {} moved to {server}", table.0);
            }
            Ok(())
        }
        None => bail!(
            "table {} was asked to move to {server} but had not moved after 60 s (it still may)",
            table.0
        ),
    }
}

/// The SOID of a namespace path, looked up through the cluster.
async fn resolve_path(
    data: &Path,
    state: &ClusterState,
    path: &str,
) -> Result<sextant_types::Soid> {
    if !path.starts_with('/') {
        bail!("{path:?} is neither a table number nor an absolute namespace path");
    }
    let address = state
        .members
        .values()
        .next()
        .map(|m| m.address.clone())
        .context("the cluster has no members")?;
    let client = connect_admin(data, &address).await?;
    // Client::resolve walks the path name by name where it crosses servers.
    let attr = client
        .resolve(&sextant_types::Credentials::root(), path.as_bytes(), true)
        .await
        .with_context(|| format!("cannot look up {path}"))?;
    Ok(attr.soid)
}

async fn drain(cfg: &EtcdConfig, server: &str, undo: bool, json: bool) -> Result<()> {
    let mut client = sextant_coordinator::etcd::connect(cfg).await?;
    sextant_coordinator::admin::set_draining(&mut client, cfg, server, !undo).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({"server": server, "draining": !undo})
        );
    } else if undo {
        println!("{server} may receive tables again");
    } else {
        println!("{server} is draining: its tables move to the other servers (see `sextant cluster status`)");
    }
    Ok(())
}
