//! `sextant serve` settings: flags and environment (`SEXTANT_DATA`,
//! `SEXTANT_LISTEN`) over a TOML file (`--config`) over defaults.
//!
//! ```toml
//! data = "/var/lib/sextant"      # default ./sextant-data
//! listen = "0.0.0.0:7411"        # default 127.0.0.1:7411
//! socket = "/run/sextant.sock"   # the Unix socket for local users; "off":
//!                                # none (default: see crate::local_socket)
//! memory = "8GiB"                # table cache budget (default 4GiB)
//! journal_sync = "fsync"         # fsync | nosync | off
//! metrics = "127.0.0.1:7412"     # Prometheus /metrics; "off" disables
//! durability = "journal"         # journal | logless
//! arl_size = 4                   # logless: Active Request List size K
//! recovery_grace = "5s"          # logless: wait for clients' backups
//! bench_sync_floor = "7ms"       # benchmarks only: see below
//! tls_cert = "/etc/sextant/cert.pem"  # TLS: certificate chain (PEM)
//! tls_key = "/etc/sextant/key.pem"    #      and its private key
//! ```
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
            sync: SyncMode::Fsync,
            dedup_window: sextant_proto::DEDUP_WINDOW,
            dedup_clients: 4096,
            metrics: Some(DEFAULT_METRICS.to_string()),
            logless: None,
            recovery_grace: DEFAULT_RECOVERY_GRACE,
            bench_sync_floor: None,
            tls: None,
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
        if let Some(s) = o.journal_sync.or(f.journal_sync) {
            c.sync = parse_sync(&s)?;
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
        e
    }
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

pub fn parse_sync(s: &str) -> Result<SyncMode> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "fsync" => SyncMode::Fsync,
        "nosync" => SyncMode::NoSync,
        "off" => SyncMode::Off,
        _ => bail!("journal sync mode {s:?} is not one of fsync, nosync, off"),
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
