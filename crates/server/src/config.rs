//! `sextant serve` settings: flags and environment (`SEXTANT_DATA`,
//! `SEXTANT_LISTEN`) over a TOML file (`--config`) over defaults.
//!
//! ```toml
//! data = "/var/lib/sextant"      # default ./sextant-data
//! listen = "0.0.0.0:7411"        # default 127.0.0.1:7411
//! socket = "/run/sextant.sock"   # the Unix socket for local users; "off":
//!                                # none (default: see crate::local_socket)
//! memory = "8GiB"                # table cache budget (default 4GiB)
//! journal_sync = "background"    # background[:5ms] (default) | fsync |
//!                                # nosync | off; fsync through a mount
//!                                # syncs the journal in every mode
//! metrics = "127.0.0.1:7412"     # Prometheus /metrics; "off" disables
//! durability = "journal"         # journal | logless
//! arl_size = 4                   # logless: Active Request List size K
//! recovery_grace = "5s"          # logless: wait for clients' backups
//! bench_sync_floor = "7ms"       # benchmarks only: see below
//! tls_cert = "/etc/sextant/cert.pem"  # TLS: certificate chain (PEM)
//! tls_key = "/etc/sextant/key.pem"    #      and its private key
//! table_dir_limit = 2000         # split a table with more directories
//! table_inode_limit = 20000      # … or more inodes (tables are what moves
//!                                # between the servers of a cluster)
//!
//! # A server of a cluster (all five, or none: a single server)
//! etcd = "http://10.0.0.1:2379,http://10.0.0.2:2379"  # also SEXTANT_ETCD
//! cluster_store = "/shared/sextant"  # the table store every server shares
//! name = "mds1"                      # this server's name in the cluster
//! advertise = "10.0.0.5:7411"        # where clients reach it (default: listen)
//! lease_ttl = "6s"                   # its membership lease (whole seconds;
//!                                    # also SEXTANT_LEASE_TTL)
//! balance_moves = 16                 # moves the coordinator keeps in flight
//!                                    # at most, spreading or draining
//!                                    # (at least 1; also SEXTANT_BALANCE_MOVES)
//! etcd_prefix = "/sextant/"          # every etcd key of the cluster starts
//!                                    # with it: several clusters share one
//!                                    # etcd under different (not nested)
//!                                    # prefixes; also SEXTANT_ETCD_PREFIX
//! # etcd's own credentials, if its authentication / TLS is on
//! etcd_user = "sextant"                # also SEXTANT_ETCD_USER
//! etcd_password_file = "/etc/sextant/etcd.pass"  # its first line is the
//!                                    # password; SEXTANT_ETCD_PASSWORD_FILE
//! etcd_ca = "/etc/sextant/etcd-ca.pem"     # TLS: etcd's CA (the bare
//!                                    # endpoints are then https://);
//!                                    # SEXTANT_ETCD_CA
//! etcd_cert = "/etc/sextant/etcd-client.pem"  # and a client certificate
//! etcd_key = "/etc/sextant/etcd-client.key"   # and key if etcd asks for one
//!                                    # (SEXTANT_ETCD_CERT, SEXTANT_ETCD_KEY)
//! ```
//!
//! The etcd password is only ever read from a file, never a flag (`ps`
//! shows a process's arguments to every user of the machine).
//!
//! The socket also comes from `SEXTANT_SOCKET` (over the file).
//!
//! The metrics address also comes from `SEXTANT_METRICS`, the durability
//! from `SEXTANT_DURABILITY` (both over the file).
//!
//! `bench_sync_floor` (or `SEXTANT_BENCH_SYNC_FLOOR`) makes every journal
//! sync last at least that long, to measure the server as on a disk slower
//! than this one (the issues' targets assume 6 – 8 ms per fdatasync). It is
//! not a flag on purpose: nobody should find it in `--help` and run a
//! production server with it. The server logs a warning when it is set.

use crate::local_socket::SocketSetting;
use anyhow::{bail, Context, Result};
use sextant_coordinator::{EtcdConfig, EtcdTls, EtcdUser};
use sextant_engine::{EngineConfig, LoglessConfig, SyncMode};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the TOML file may say; every key is optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub data: Option<PathBuf>,
    pub listen: Option<String>,
    pub socket: Option<PathBuf>,
    pub memory: Option<String>,
    pub journal_sync: Option<String>,
    pub dedup_window: Option<usize>,
    pub dedup_clients: Option<usize>,
    pub metrics: Option<String>,
    pub durability: Option<String>,
    pub arl_size: Option<usize>,
    pub recovery_grace: Option<String>,
    pub bench_sync_floor: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub table_dir_limit: Option<usize>,
    pub table_inode_limit: Option<usize>,
    pub etcd: Option<String>,
    pub cluster_store: Option<PathBuf>,
    pub name: Option<String>,
    pub advertise: Option<String>,
    pub lease_ttl: Option<String>,
    pub balance_moves: Option<usize>,
    pub etcd_prefix: Option<String>,
    pub etcd_user: Option<String>,
    pub etcd_password_file: Option<PathBuf>,
    pub etcd_ca: Option<PathBuf>,
    pub etcd_cert: Option<PathBuf>,
    pub etcd_key: Option<PathBuf>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("bad config file {}", path.display()))
    }
}

/// The settings a server runs with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data: PathBuf,
    pub listen: String,
    /// The Unix socket to serve on as well, for users on this machine
    /// (`unix:PATH` addresses), each served as themselves; see
    /// [`crate::local_socket`].
    pub socket: SocketSetting,
    pub cache_bytes: usize,
    pub sync: SyncMode,
    /// Exactly-once replies kept per client that does not acknowledge
    /// (`acked_below` 0, older clients); see the server's `dedup` module.
    pub dedup_window: usize,
    pub dedup_clients: usize,
    /// Where to serve Prometheus metrics (`None`: not at all).
    pub metrics: Option<String>,
    /// Log-less durability (`None`: the journal).
    pub logless: Option<LoglessConfig>,
    /// Log-less: how long a restarted server waits for clients to hand back
    /// their backups before it recovers and serves.
    pub recovery_grace: Duration,
    /// Benchmarks: the least time a journal sync takes (see the module doc).
    pub bench_sync_floor: Option<Duration>,
    /// TLS: the server's certificate chain and private key, PEM files
    /// (`None`: plain TCP; the cluster secret still authenticates).
    pub tls: Option<TlsFiles>,
    /// A server of a cluster on etcd (`None`: a single server, with the
    /// in-process coordinator).
    pub cluster: Option<ClusterSettings>,
    /// Table splits (`None`: the engine's defaults).
    pub table_dir_limit: Option<usize>,
    pub table_inode_limit: Option<usize>,
}

/// How a server takes part in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// etcd's client URLs.
    pub etcd: Vec<String>,
    /// The table store every server of the cluster shares (snapshots and
    /// every server's journal).
    pub store: PathBuf,
    /// This server's name: 1–64 of `A-Z a-z 0-9 . _ -`, unique among the
    /// live members.
    pub name: String,
    /// The address clients reach this server at (the delegation map
    /// names it).
    pub advertise: String,
    /// The membership lease's TTL.
    pub lease_ttl: Duration,
    /// How many moves this server keeps in flight at most while it
    /// coordinates (default [`sextant_cluster::coordinator::MAX_MOVES`]).
    pub balance_moves: usize,
    /// etcd's credentials (none: anonymous, plain HTTP).
    pub etcd_security: EtcdSecurity,
    /// Every etcd key of the cluster starts with it (normalized: starts
    /// and ends with `/`; default [`sextant_coordinator::DEFAULT_PREFIX`]).
    pub etcd_prefix: String,
}

impl ClusterSettings {
    /// The connection to etcd every part of the server uses (membership,
    /// the map, the catalogue, the client keys, the coordinator): the
    /// credentials' files read, under the cluster's prefix.
    pub fn etcd_config(&self) -> Result<EtcdConfig> {
        let mut cfg = self.etcd_security.config(self.etcd.clone())?;
        cfg.prefix = self.etcd_prefix.clone();
        Ok(cfg)
    }
}

/// How to prove who we are to etcd, as given (file names; the files are
/// read when connecting, by [`EtcdSecurity::config`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    /// etcd's user name and the file holding its password.
    pub user: Option<(String, PathBuf)>,
    /// TLS: etcd's CA.
    pub ca: Option<PathBuf>,
    /// TLS: this client's certificate and key.
    pub client: Option<(PathBuf, PathBuf)>,
}

impl EtcdSecurity {
    /// From the settings' pieces; a half-given pair is an error.
    pub fn from_parts(
        user: Option<String>,
        password_file: Option<PathBuf>,
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<EtcdSecurity> {
        let user = match (user.filter(|u| !u.is_empty()), password_file) {
            (Some(u), Some(p)) => Some((u, p)),
            (None, None) => None,
            (Some(_), None) => {
                bail!("an etcd user needs its password file (etcd_password_file, --etcd-password-file)")
            }
            (None, Some(_)) => {
                bail!("an etcd password file needs the user's name (etcd_user, --etcd-user)")
            }
        };
        let client = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => bail!("an etcd client certificate needs its key, and the key its certificate (etcd_cert, etcd_key)"),
        };
        if client.is_some() && ca.is_none() {
            bail!("an etcd client certificate needs etcd's CA too (etcd_ca, --etcd-ca)");
        }
        Ok(EtcdSecurity { user, ca, client })
    }

    /// etcd's endpoints from `URL[,URL...]`; a bare `HOST:PORT` is
    /// `https://` with TLS, else `http://`.
    pub fn endpoints(&self, list: &str) -> Vec<String> {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        list.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| {
                if e.contains("://") {
                    e.to_string()
                } else {
                    format!("{scheme}://{e}")
                }
            })
            .collect()
    }

    /// The connection settings for `endpoints`, the files read.
    pub fn config(&self, endpoints: Vec<String>) -> Result<EtcdConfig> {
        let mut cfg = EtcdConfig::new(endpoints);
        if let Some((name, file)) = &self.user {
            cfg.user = Some(EtcdUser::from_file(name, file)?);
        }
        if let Some(ca) = &self.ca {
            let client = self
                .client
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path()));
            cfg.tls = Some(EtcdTls::load(ca, client)?);
        }
        Ok(cfg)
    }
}

/// Default [`ClusterSettings::lease_ttl`]: a dead server's tables move
/// after about this long.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(6);

/// Is `name` a server name (1–64 of `A-Z a-z 0-9 . _ -`)?
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Where the server's TLS certificate and key are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Default [`ServerConfig::recovery_grace`]: clients reconnect within a
/// second or two (their backoff is at most 500 ms).
pub const DEFAULT_RECOVERY_GRACE: Duration = Duration::from_secs(5);

/// Default address of the Prometheus endpoint (the gRPC port + 1).
pub const DEFAULT_METRICS: &str = "127.0.0.1:7412";

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data: PathBuf::from("sextant-data"),
            listen: sextant_proto::DEFAULT_LISTEN.to_string(),
            socket: SocketSetting::Default,
            cache_bytes: EngineConfig::default().cache_bytes,
            sync: SyncMode::Background(DEFAULT_BACKGROUND_SYNC),
            dedup_window: sextant_proto::DEDUP_WINDOW,
            dedup_clients: 4096,
            metrics: Some(DEFAULT_METRICS.to_string()),
            logless: None,
            recovery_grace: DEFAULT_RECOVERY_GRACE,
            bench_sync_floor: None,
            tls: None,
            cluster: None,
            table_dir_limit: None,
            table_inode_limit: None,
        }
    }
}

/// Values given on the command line or in the environment (they win).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub data: Option<PathBuf>,
    pub listen: Option<String>,
    pub socket: Option<PathBuf>,
    pub memory: Option<String>,
    pub journal_sync: Option<String>,
    pub durability: Option<String>,
    pub arl_size: Option<usize>,
    pub recovery_grace: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub etcd: Option<String>,
    pub cluster_store: Option<PathBuf>,
    pub name: Option<String>,
    pub advertise: Option<String>,
    /// `--etcd-prefix` (over `SEXTANT_ETCD_PREFIX`, over the file).
    pub etcd_prefix: Option<String>,
}

impl ServerConfig {
    /// Defaults, then the file, then the overrides.
    pub fn resolve(file: Option<FileConfig>, o: Overrides) -> Result<ServerConfig> {
        let f = file.unwrap_or_default();
        let mut c = ServerConfig::default();
        if let Some(m) = std::env::var("SEXTANT_METRICS").ok().or(f.metrics.clone()) {
            c.metrics = (m != "off").then_some(m);
        }
        if let Some(d) = o.data.or(f.data) {
            c.data = d;
        }
        if let Some(l) = o.listen.or(f.listen) {
            c.listen = l;
        }
        if let Some(s) = o.socket.or(f.socket) {
            c.socket = SocketSetting::parse(&s)?;
        }
        if let Some(m) = o.memory.or(f.memory) {
            c.cache_bytes = parse_size(&m)?;
        }
        let journal_sync = o.journal_sync.or(f.journal_sync);
        if let Some(s) = &journal_sync {
            c.sync = parse_sync(s)?;
        }
        if let Some(w) = f.dedup_window {
            c.dedup_window = w.max(1);
        }
        if let Some(n) = f.dedup_clients {
            c.dedup_clients = n.max(1);
        }
        let durability = o
            .durability
            .or_else(|| std::env::var("SEXTANT_DURABILITY").ok())
            .or(f.durability);
        if let Some(d) = durability {
            c.logless = parse_durability(&d)?;
        }
        if journal_sync.is_none() && c.logless.is_some() {
            // Log-less chooses its own journal sync when none is asked
            // for (none on one server; a member's every 10 ms): the
            // engine reads `Fsync` as "not chosen" there.
            c.sync = SyncMode::Fsync;
        }
        if let Some(k) = o.arl_size.or(f.arl_size) {
            if k == 0 {
                bail!("arl_size must be at least 1");
            }
            match &mut c.logless {
                Some(l) => l.arl_size = k,
                None => {
                    bail!("arl_size is a setting of log-less durability (--durability logless)")
                }
            }
        }
        if let Some(g) = o.recovery_grace.or(f.recovery_grace) {
            c.recovery_grace = parse_duration(&g)?;
        }
        c.tls = match (o.tls_cert.or(f.tls_cert), o.tls_key.or(f.tls_key)) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => bail!("TLS needs both a certificate (tls_cert) and its key (tls_key)"),
        };
        let floor = std::env::var("SEXTANT_BENCH_SYNC_FLOOR")
            .ok()
            .or(f.bench_sync_floor);
        if let Some(floor) = floor {
            c.bench_sync_floor = Some(parse_duration(&floor).context("bad bench_sync_floor")?)
                .filter(|d| !d.is_zero());
        }
        c.table_dir_limit = f.table_dir_limit.map(|n| n.max(2));
        c.table_inode_limit = f.table_inode_limit.map(|n| n.max(16));
        let etcd = o
            .etcd
            .or_else(|| std::env::var("SEXTANT_ETCD").ok())
            .or(f.etcd)
            .filter(|e| !e.trim().is_empty());
        let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
        let env_path = |key: &str| env(key).map(PathBuf::from);
        let etcd_security = EtcdSecurity::from_parts(
            env("SEXTANT_ETCD_USER").or(f.etcd_user),
            env_path("SEXTANT_ETCD_PASSWORD_FILE").or(f.etcd_password_file),
            env_path("SEXTANT_ETCD_CA").or(f.etcd_ca),
            env_path("SEXTANT_ETCD_CERT").or(f.etcd_cert),
            env_path("SEXTANT_ETCD_KEY").or(f.etcd_key),
        );
        let store = o.cluster_store.or(f.cluster_store);
        let name = o.name.or(f.name);
        let advertise = o.advertise.or(f.advertise);
        // The variable only counts for a cluster server (a single server
        // ignores an environment set for the CLI); the flag and the file
        // name one.
        let given_prefix = o.etcd_prefix.or(f.etcd_prefix);
        c.cluster = match (etcd, store) {
            (None, None) => {
                if name.is_some() {
                    bail!("name and lease_ttl are settings of a cluster server (give --etcd and --cluster-store too)");
                }
                if given_prefix.is_some() {
                    bail!("etcd_prefix is a setting of a cluster server (give --etcd and --cluster-store too)");
                }
                None
            }
            (Some(_), None) => bail!(
                "a cluster server needs the table store every server shares (--cluster-store DIR)"
            ),
            (None, Some(_)) => bail!("a cluster server needs etcd (--etcd URL[,URL...])"),
            (Some(etcd), Some(store)) => {
                // Only a cluster server checks them (a single server
                // ignores an environment set for the CLI).
                let etcd_security = etcd_security?;
                let endpoints = etcd_security.endpoints(&etcd);
                let name = name.context("a cluster server needs a name (--name NAME)")?;
                if !valid_server_name(&name) {
                    bail!("{name:?} is not a server name (1-64 of A-Z a-z 0-9 . _ -)");
                }
                let advertise = match advertise {
                    Some(a) => a,
                    None if is_unspecified(&c.listen) => bail!(
                        "listening on {} names no address clients can reach: give --advertise HOST:PORT",
                        c.listen
                    ),
                    None => c.listen.clone(),
                };
                let lease_ttl = match std::env::var("SEXTANT_LEASE_TTL").ok().or(f.lease_ttl) {
                    Some(t) => parse_duration(&t).context("bad lease_ttl")?,
                    None => DEFAULT_LEASE_TTL,
                };
                if lease_ttl < Duration::from_secs(2) {
                    bail!("lease_ttl must be at least 2s (etcd counts whole seconds)");
                }
                let balance_moves = match env("SEXTANT_BALANCE_MOVES") {
                    Some(n) => n
                        .parse::<usize>()
                        .context("bad SEXTANT_BALANCE_MOVES (a number)")?,
                    None => f
                        .balance_moves
                        .unwrap_or(sextant_cluster::coordinator::MAX_MOVES),
                };
                if balance_moves == 0 {
                    bail!("balance_moves must be at least 1");
                }
                let etcd_prefix = match given_prefix.or_else(|| env("SEXTANT_ETCD_PREFIX")) {
                    Some(p) => sextant_coordinator::normalize_prefix(&p)
                        .map_err(|e| anyhow::anyhow!("bad etcd_prefix (--etcd-prefix): {e}"))?,
                    None => sextant_coordinator::DEFAULT_PREFIX.to_string(),
                };
                Some(ClusterSettings {
                    etcd: endpoints,
                    store,
                    name,
                    advertise,
                    lease_ttl,
                    balance_moves,
                    etcd_security,
                    etcd_prefix,
                })
            }
        };
        Ok(c)
    }

    pub fn engine_config(&self) -> EngineConfig {
        let mut e = EngineConfig {
            cache_bytes: self.cache_bytes,
            ..Default::default()
        };
        e.journal.mode = self.sync;
        e.journal.sync_floor = self.bench_sync_floor;
        e.logless = self.logless.clone();
        if let Some(n) = self.table_dir_limit {
            e.table_dir_limit = n;
        }
        if let Some(n) = self.table_inode_limit {
            e.table_inode_limit = n;
        }
        e
    }
}

/// Does `addr` listen on every interface (0.0.0.0 / [::])?
fn is_unspecified(addr: &str) -> bool {
    addr.parse::<std::net::SocketAddr>()
        .map(|a| a.ip().is_unspecified())
        .unwrap_or(false)
}

/// `journal` (the default) or `logless`.
pub fn parse_durability(s: &str) -> Result<Option<LoglessConfig>> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "journal" => None,
        "logless" | "log-less" => Some(LoglessConfig::default()),
        _ => bail!("durability {s:?} is not one of journal, logless"),
    })
}

/// `5s`, `500ms`, `2m`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a duration (e.g. 5s, 500ms)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        _ => bail!("{s:?}: unknown duration unit (use ms, s, m)"),
    };
    if !(0.0..=86_400.0).contains(&secs) {
        bail!("{s:?} is out of range (0 to 24 hours)");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The background sync interval of `journal_sync = "background"`.
pub const DEFAULT_BACKGROUND_SYNC: Duration = Duration::from_millis(5);

/// `fsync`, `background[:INTERVAL]` (e.g. `background:10ms`), `nosync`,
/// `off`.
pub fn parse_sync(s: &str) -> Result<SyncMode> {
    let lower = s.trim().to_ascii_lowercase();
    if let Some(rest) = lower.strip_prefix("background") {
        let every = match rest.strip_prefix(':') {
            Some(d) => parse_duration(d).context("bad background sync interval")?,
            None if rest.is_empty() => DEFAULT_BACKGROUND_SYNC,
            None => bail!("journal sync mode {s:?}: write background or background:INTERVAL"),
        };
        if every.is_zero() || every > Duration::from_secs(10) {
            bail!("journal sync mode {s:?}: the interval must be above 0 and at most 10s");
        }
        return Ok(SyncMode::Background(every));
    }
    Ok(match lower.as_str() {
        "fsync" => SyncMode::Fsync,
        "nosync" => SyncMode::NoSync,
        "off" => SyncMode::Off,
        _ => {
            bail!("journal sync mode {s:?} is not one of fsync, background[:INTERVAL], nosync, off")
        }
    })
}

/// `4GiB`, `512MiB`, `100M`, `1G`, `65536` (bytes).
pub fn parse_size(s: &str) -> Result<usize> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a size (e.g. 4GiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => bail!("{s:?}: unknown size unit (use KiB, MiB, GiB, TiB)"),
    };
    n.checked_mul(mult)
        .and_then(|v| usize::try_from(v).ok())
        .with_context(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_settings_come_all_together() {
        let o = |etcd: Option<&str>, store: Option<&str>, name: Option<&str>| Overrides {
            etcd: etcd.map(String::from),
            cluster_store: store.map(PathBuf::from),
            name: name.map(String::from),
            ..Overrides::default()
        };
        let single = ServerConfig::resolve(None, o(None, None, None)).unwrap();
        assert_eq!(single.cluster, None);
        let c = ServerConfig::resolve(
            None,
            o(
                Some("127.0.0.1:2379, http://h:2379"),
                Some("/s"),
                Some("mds1"),
            ),
        )
        .unwrap()
        .cluster
        .unwrap();
        assert_eq!(c.etcd, vec!["http://127.0.0.1:2379", "http://h:2379"]);
        assert_eq!(
            (c.name.as_str(), c.store.as_path()),
            ("mds1", Path::new("/s"))
        );
        assert_eq!(c.advertise, sextant_proto::DEFAULT_LISTEN);
        assert_eq!(c.lease_ttl, DEFAULT_LEASE_TTL);
        let err = |o: Overrides| ServerConfig::resolve(None, o).unwrap_err().to_string();
        assert!(err(o(Some("e:1"), None, Some("a"))).contains("--cluster-store"));
        assert!(err(o(None, Some("/s"), Some("a"))).contains("--etcd"));
        assert!(err(o(Some("e:1"), Some("/s"), None)).contains("--name"));
        assert!(err(o(Some("e:1"), Some("/s"), Some("a/b"))).contains("not a server name"));
        assert!(err(o(None, None, Some("a"))).contains("cluster server"));
        let mut wild = o(Some("e:1"), Some("/s"), Some("a"));
        wild.listen = Some("0.0.0.0:7411".into());
        assert!(err(wild.clone()).contains("--advertise"));
        wild.advertise = Some("10.1.1.1:7411".into());
        let c = ServerConfig::resolve(None, wild).unwrap().cluster.unwrap();
        assert_eq!(c.advertise, "10.1.1.1:7411");
    }

    #[test]
    fn balance_moves_defaults_and_is_at_least_one() {
        let o = || Overrides {
            etcd: Some("e:1".into()),
            cluster_store: Some(PathBuf::from("/s")),
            name: Some("a".into()),
            ..Overrides::default()
        };
        let moves = |f: Option<usize>| {
            let file = FileConfig {
                balance_moves: f,
                ..FileConfig::default()
            };
            ServerConfig::resolve(Some(file), o()).map(|c| c.cluster.unwrap().balance_moves)
        };
        if std::env::var_os("SEXTANT_BALANCE_MOVES").is_some() {
            return; // the environment decides
        }
        assert_eq!(
            moves(None).unwrap(),
            sextant_cluster::coordinator::MAX_MOVES
        );
        assert_eq!(moves(Some(4)).unwrap(), 4);
        assert!(moves(Some(0))
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
    }

    #[test]
    fn the_etcd_prefix_is_normalized_and_checked() {
        let o = |prefix: Option<&str>| Overrides {
            etcd: Some("e:1".into()),
            cluster_store: Some(PathBuf::from("/s")),
            name: Some("a".into()),
            etcd_prefix: prefix.map(String::from),
            ..Overrides::default()
        };
        let prefix = |o: Overrides, f: Option<FileConfig>| {
            ServerConfig::resolve(f, o).map(|c| c.cluster.unwrap().etcd_prefix)
        };
        assert_eq!(prefix(o(None), None).unwrap(), "/sextant/");
        assert_eq!(prefix(o(Some("/c2")), None).unwrap(), "/c2/");
        assert_eq!(prefix(o(Some("/c2/")), None).unwrap(), "/c2/");
        let file = |p: &str| {
            Some(FileConfig {
                etcd_prefix: Some(p.into()),
                ..FileConfig::default()
            })
        };
        assert_eq!(prefix(o(None), file("/from-file")).unwrap(), "/from-file/");
        assert_eq!(prefix(o(Some("/flag")), file("/file")).unwrap(), "/flag/");
        for bad in ["", "c2", " /c2"] {
            let e = prefix(o(Some(bad)), None).unwrap_err().to_string();
            assert!(
                e.contains("etcd_prefix") && e.contains("etcd key prefix"),
                "{bad:?}: {e}"
            );
            let e = prefix(o(None), file(bad)).unwrap_err().to_string();
            assert!(e.contains("etcd_prefix"), "{bad:?}: {e}");
        }
        // What every part of the server talks to etcd with.
        let c = ServerConfig::resolve(None, o(Some("/b")))
            .unwrap()
            .cluster
            .unwrap();
        let cfg = c.etcd_config().unwrap();
        assert_eq!(cfg.prefix, "/b/");
        assert_eq!(cfg.key("members/a"), "/b/members/a");
        // A single server has no etcd: the prefix is a mistake.
        let single = Overrides {
            etcd_prefix: Some("/b/".into()),
            ..Overrides::default()
        };
        let e = ServerConfig::resolve(None, single).unwrap_err().to_string();
        assert!(e.contains("cluster server"), "{e}");
    }

    #[test]
    fn etcd_credentials_come_in_pairs_and_tls_makes_bare_endpoints_https() {
        let p = |s: &str| Some(PathBuf::from(s));
        let u = || Some("root".to_string());
        assert_eq!(
            EtcdSecurity::from_parts(None, None, None, None, None).unwrap(),
            EtcdSecurity::default()
        );
        let err = |r: Result<EtcdSecurity>| r.unwrap_err().to_string();
        assert!(
            err(EtcdSecurity::from_parts(u(), None, None, None, None)).contains("password file")
        );
        assert!(err(EtcdSecurity::from_parts(None, p("/p"), None, None, None)).contains("user"));
        assert!(err(EtcdSecurity::from_parts(
            None,
            None,
            p("/ca"),
            p("/c"),
            None
        ))
        .contains("key"));
        assert!(err(EtcdSecurity::from_parts(None, None, None, p("/c"), p("/k"))).contains("CA"));
        let plain = EtcdSecurity::from_parts(u(), p("/p"), None, None, None).unwrap();
        assert_eq!(
            plain.endpoints("h:1, https://g:2"),
            ["http://h:1", "https://g:2"]
        );
        let tls = EtcdSecurity::from_parts(None, None, p("/ca"), None, None).unwrap();
        assert_eq!(tls.endpoints("h:1"), ["https://h:1"]);
        // The password is read from its file, its first line; never shown.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pass");
        std::fs::write(&file, "pw one\nignored\n").unwrap();
        let s = EtcdSecurity::from_parts(u(), Some(file.clone()), None, None, None).unwrap();
        let cfg = s.config(vec!["http://h:1".into()]).unwrap();
        let shown = format!("{cfg:?}");
        assert!(
            shown.contains("root") && !shown.contains("pw one"),
            "{shown}"
        );
        let missing = EtcdSecurity::from_parts(u(), p("/nonexistent/pass"), None, None, None)
            .unwrap()
            .config(vec![])
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("etcd password file /nonexistent/pass"),
            "{missing}"
        );
        // In the config file, for a cluster server.
        let file: FileConfig = toml::from_str(&format!(
            "etcd = \"h:1\"\ncluster_store = \"/s\"\nname = \"a\"\n\
             etcd_user = \"root\"\netcd_password_file = {:?}\n",
            file.to_str().unwrap()
        ))
        .unwrap();
        let c = ServerConfig::resolve(Some(file), Overrides::default())
            .unwrap()
            .cluster
            .unwrap();
        assert_eq!(c.etcd_security.user.map(|u| u.0), Some("root".into()));
    }

    #[test]
    fn durability_settings() {
        assert_eq!(parse_durability("journal").unwrap(), None);
        assert_eq!(
            parse_durability("LogLess").unwrap(),
            Some(LoglessConfig::default())
        );
        assert!(parse_durability("paper").is_err());
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            parse_sync("background").unwrap(),
            SyncMode::Background(DEFAULT_BACKGROUND_SYNC)
        );
        // The default: replies once written, synced within 5 ms (fsync
        // through a mount waits for the sync).
        let default = ServerConfig::resolve(None, Overrides::default()).unwrap();
        assert_eq!(default.sync, SyncMode::Background(Duration::from_millis(5)));
        assert_eq!(
            parse_sync("Background:20ms").unwrap(),
            SyncMode::Background(Duration::from_millis(20))
        );
        for bad in [
            "background:0ms",
            "background:1m",
            "backgroundx",
            "background:",
            "sometimes",
        ] {
            assert!(parse_sync(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("-1s").is_err());
        let slow: FileConfig = toml::from_str("bench_sync_floor = \"7ms\"\n").unwrap();
        let c = ServerConfig::resolve(Some(slow), Overrides::default()).unwrap();
        assert_eq!(
            c.engine_config().journal.sync_floor,
            Some(Duration::from_millis(7))
        );
        let half: FileConfig = toml::from_str("tls_cert = \"/c.pem\"\n").unwrap();
        let err = ServerConfig::resolve(Some(half), Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("tls_key"), "{err}");
        let both: FileConfig =
            toml::from_str("tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n").unwrap();
        let c = ServerConfig::resolve(Some(both), Overrides::default()).unwrap();
        assert_eq!(c.tls.map(|t| t.key), Some(PathBuf::from("/k.pem")));
        let file: FileConfig =
            toml::from_str("durability = \"logless\"\narl_size = 8\nrecovery_grace = \"1s\"\n")
                .unwrap();
        let c = ServerConfig::resolve(Some(file), Overrides::default()).unwrap();
        assert_eq!(c.logless.map(|l| l.arl_size), Some(8));
        assert_eq!(c.recovery_grace, Duration::from_secs(1));
        let journal_with_arl = Overrides {
            arl_size: Some(3),
            durability: Some("journal".into()),
            ..Default::default()
        };
        assert!(ServerConfig::resolve(None, journal_with_arl).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("4XB").is_err());
    }

    #[test]
    fn precedence_flags_over_file_over_defaults() {
        let file: FileConfig = toml::from_str(
            "data = \"/f\"\nlisten = \"127.0.0.1:1\"\nmemory = \"1GiB\"\njournal_sync = \"nosync\"\n",
        )
        .unwrap();
        let c = ServerConfig::resolve(
            Some(file),
            Overrides {
                listen: Some("127.0.0.1:2".into()),
                socket: Some("/s.sock".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.data, PathBuf::from("/f"));
        assert_eq!(c.listen, "127.0.0.1:2");
        assert_eq!(c.socket, SocketSetting::At(PathBuf::from("/s.sock")));
        assert_eq!(c.cache_bytes, 1 << 30);
        assert_eq!(c.sync, SyncMode::NoSync);
        let d = ServerConfig::resolve(None, Overrides::default()).unwrap();
        assert_eq!(d.listen, "127.0.0.1:7411");
        assert_eq!(d.socket, SocketSetting::Default);
        let file: FileConfig = toml::from_str("socket = \"/f.sock\"\n").unwrap();
        let c = ServerConfig::resolve(Some(file), Overrides::default()).unwrap();
        assert_eq!(c.socket, SocketSetting::At(PathBuf::from("/f.sock")));
        let file: FileConfig = toml::from_str("socket = \"off\"\n").unwrap();
        let c = ServerConfig::resolve(Some(file), Overrides::default()).unwrap();
        assert_eq!(c.socket, SocketSetting::Off);
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
    }
}
