//! Where the client commands find their settings — the data directory
//! (and so the cluster secret), the server, the secret file, the TLS
//! authority — and which source gave each, so that every command works
//! from any directory and `sextant status` can say what it used.
//!
//! Order, first found wins (as servers' clients do it):
//! 1. the flag (`--data`, `--server`, `--secret-file`, `--tls-ca`);
//! 2. the environment (`SEXTANT_DATA`, `SEXTANT_SERVER`, ...);
//! 3. a config file, the first that exists of `$SEXTANT_CONFIG`,
//!    `$XDG_CONFIG_HOME/sextant/config.toml` (`~/.config/...`) and
//!    `/etc/sextant/config.toml`, with keys `data`, `server`,
//!    `secret_file`, `tls_ca` (all optional; relative paths are relative
//!    to the file's directory);
//! 4. for the data directory only: the *server record* that `sextant
//!    serve` writes when it listens on the default address
//!    (`$XDG_STATE_HOME/sextant/server.toml`, `~/.local/state/...`), which
//!    names its absolute data directory — so the CLI finds the secret of
//!    the local server from any working directory;
//! 5. the default (`./sextant-data`; no server: the default address is
//!    tried).
//!
//! The local server's Unix socket (which a user without the secret uses,
//! served as themselves): `$SEXTANT_SOCKET`, the config file's `socket`,
//! the server record's, then `/run/sextant/sextant.sock` (see
//! `sextant_server::local_socket`: a fixed path, since another user's
//! record is not readable).
//!
//! The resolution itself ([`resolve`]) is pure: it is given what the
//! flags, the environment and the files hold.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env(&'static str),
    ConfigFile(PathBuf),
    ServerRecord(PathBuf),
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag => write!(f, "command-line flag"),
            Source::Env(var) => write!(f, "environment {var}"),
            Source::ConfigFile(p) => write!(f, "config file {}", p.display()),
            Source::ServerRecord(p) => write!(f, "server record {}", p.display()),
            Source::Default => write!(f, "default"),
        }
    }
}

/// A setting's value and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

/// The keys of a client config file.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub data: Option<PathBuf>,
    pub server: Option<String>,
    pub secret_file: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    /// The local server's Unix socket.
    pub socket: Option<PathBuf>,
}

/// What `sextant serve` on the default address records about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRecord {
    /// Absolute data directory (its `secret` authenticates clients).
    pub data: PathBuf,
    /// The address it listens on.
    pub listen: String,
    /// Its Unix socket, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
}

/// What a flag (or its environment variable) gave: clap merges the two,
/// so the caller says which it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given<T> {
    Flag(T),
    Env(T),
    No,
}

/// The inputs of [`resolve`].
pub struct Inputs {
    pub data: Given<PathBuf>,
    pub server: Given<String>,
    pub secret_file: Given<PathBuf>,
    pub tls_ca: Given<PathBuf>,
    /// `$SEXTANT_SOCKET`.
    pub socket: Option<PathBuf>,
    /// The config file found, if any: its path and contents.
    pub config: Option<(PathBuf, ConfigFile)>,
    /// The server record found, if any, whose data directory exists.
    pub record: Option<(PathBuf, ServerRecord)>,
}

/// The client settings in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub data: Sourced<PathBuf>,
    pub server: Option<Sourced<String>>,
    pub secret_file: Option<Sourced<PathBuf>>,
    pub tls_ca: Option<Sourced<PathBuf>>,
    /// Where the local server's Unix socket is looked for.
    pub socket: Sourced<PathBuf>,
}

fn pick<T: Clone>(
    given: Given<T>,
    var: &'static str,
    from_file: impl FnOnce(&ConfigFile) -> Option<T>,
    config: Option<&(PathBuf, ConfigFile)>,
) -> Option<Sourced<T>> {
    match given {
        Given::Flag(value) => Some(Sourced {
            value,
            source: Source::Flag,
        }),
        Given::Env(value) => Some(Sourced {
            value,
            source: Source::Env(var),
        }),
        Given::No => config.and_then(|(path, c)| {
            from_file(c).map(|value| Sourced {
                value,
                source: Source::ConfigFile(path.clone()),
            })
        }),
    }
}

/// A config file's relative path is relative to the file's directory.
fn beside(file: &Path, p: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p.to_path_buf(),
    }
}

/// The settings in force (see the module doc for the order).
pub fn resolve(i: Inputs) -> Settings {
    let config = i.config.as_ref();
    let file_path = |c: &ConfigFile, f: fn(&ConfigFile) -> Option<&PathBuf>| {
        let (path, _) = config?;
        f(c).map(|p| beside(path, p))
    };
    let data = pick(
        i.data,
        "SEXTANT_DATA",
        |c| file_path(c, |c| c.data.as_ref()),
        config,
    )
    .or_else(|| {
        i.record.as_ref().map(|(path, r)| Sourced {
            value: r.data.clone(),
            source: Source::ServerRecord(path.clone()),
        })
    })
    .unwrap_or(Sourced {
        value: crate::session::default_data(),
        source: Source::Default,
    });
    let socket = match i.socket {
        Some(value) => Sourced {
            value,
            source: Source::Env("SEXTANT_SOCKET"),
        },
        None => pick(
            Given::No,
            "SEXTANT_SOCKET",
            |c| file_path(c, |c| c.socket.as_ref()),
            config,
        )
        .or_else(|| {
            let (path, r) = i.record.as_ref()?;
            r.socket.clone().map(|value| Sourced {
                value,
                source: Source::ServerRecord(path.clone()),
            })
        })
        .unwrap_or(Sourced {
            value: PathBuf::from(sextant_server::local_socket::DEFAULT_PATH),
            source: Source::Default,
        }),
    };
    Settings {
        data,
        socket,
        server: pick(i.server, "SEXTANT_SERVER", |c| c.server.clone(), config),
        secret_file: pick(
            i.secret_file,
            "SEXTANT_SECRET_FILE",
            |c| file_path(c, |c| c.secret_file.as_ref()),
            config,
        ),
        tls_ca: pick(
            i.tls_ca,
            "SEXTANT_TLS_CA",
            |c| file_path(c, |c| c.tls_ca.as_ref()),
            config,
        ),
    }
}

/// `$VAR`, or `$HOME/fallback`, joined with `sextant/file`.
fn xdg_file(var: &str, fallback: &str, file: &str) -> Option<PathBuf> {
    let base = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(fallback)))?;
    Some(base.join("sextant").join(file))
}

/// Where the config files are looked for, in order.
pub fn config_candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("SEXTANT_CONFIG").filter(|v| !v.is_empty()) {
        v.push(PathBuf::from(p));
    }
    v.extend(xdg_file("XDG_CONFIG_HOME", ".config", "config.toml"));
    v.push(PathBuf::from("/etc/sextant/config.toml"));
    v
}

/// The first config file that exists and this user may read, parsed. A
/// file that cannot be parsed is an error (a typo must not be ignored).
pub fn load_config() -> anyhow::Result<Option<(PathBuf, ConfigFile)>> {
    use anyhow::Context;
    for path in config_candidates() {
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let c: ConfigFile = toml::from_str(&text)
                    .with_context(|| format!("bad config file {}", path.display()))?;
                return Ok(Some((path, c)));
            }
            // Not there — or not this user's to read (another user's home
            // under sudo or setpriv, a 0600 file in /etc): the next one.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound
                        | std::io::ErrorKind::PermissionDenied
                        | std::io::ErrorKind::NotADirectory
                ) =>
            {
                continue
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot read config file {}", path.display()))
            }
        }
    }
    Ok(None)
}

/// Where `sextant serve` on the default address records itself.
pub fn record_path() -> Option<PathBuf> {
    xdg_file("XDG_STATE_HOME", ".local/state", "server.toml")
}

/// The server record, if there is one whose data directory exists.
pub fn load_record() -> Option<(PathBuf, ServerRecord)> {
    let path = record_path()?;
    let text = std::fs::read_to_string(&path).ok()?;
    let r: ServerRecord = toml::from_str(&text).ok()?;
    r.data.is_dir().then_some((path, r))
}

/// Records the server (best effort: a server without a writable home
/// still serves; its clients then need `--data` or a config file).
pub fn write_record(data: &Path, listen: &str, socket: Option<&Path>) {
    let Some(path) = record_path() else { return };
    let data = std::fs::canonicalize(data).unwrap_or_else(|_| data.to_path_buf());
    let record = ServerRecord {
        data,
        listen: listen.to_string(),
        socket: socket.map(Path::to_path_buf),
    };
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = toml::to_string(&record).map_err(std::io::Error::other)?;
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)
    };
    if let Err(e) = write() {
        tracing::warn!(file = %path.display(), error = %e, "cannot record this server for its clients");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            data: Given::No,
            server: Given::No,
            secret_file: Given::No,
            tls_ca: Given::No,
            socket: None,
            config: None,
            record: None,
        }
    }

    fn record() -> (PathBuf, ServerRecord) {
        (
            PathBuf::from("/home/u/.local/state/sextant/server.toml"),
            ServerRecord {
                data: PathBuf::from("/srv/sextant"),
                listen: "127.0.0.1:7411".into(),
                socket: Some(PathBuf::from("/srv/sextant/sextant.sock")),
            },
        )
    }

    fn config() -> (PathBuf, ConfigFile) {
        (
            PathBuf::from("/etc/sextant/config.toml"),
            ConfigFile {
                data: Some(PathBuf::from("data")),
                server: Some("mds1:7411".into()),
                secret_file: Some(PathBuf::from("/etc/sextant/secret")),
                tls_ca: None,
                socket: None,
            },
        )
    }

    #[test]
    fn nothing_given_is_the_default() {
        let s = resolve(inputs());
        assert_eq!(s.data.source, Source::Default);
        assert_eq!(s.data.value, PathBuf::from("sextant-data"));
        assert!(s.server.is_none() && s.secret_file.is_none() && s.tls_ca.is_none());
        assert_eq!(s.socket.value, PathBuf::from("/run/sextant/sextant.sock"));
        assert_eq!(s.socket.source, Source::Default);
    }

    #[test]
    fn the_socket_comes_from_the_environment_a_config_file_or_the_record() {
        let s = resolve(Inputs {
            record: Some(record()),
            ..inputs()
        });
        assert_eq!(s.socket.value, PathBuf::from("/srv/sextant/sextant.sock"));
        assert!(matches!(s.socket.source, Source::ServerRecord(_)));
        let (path, mut c) = config();
        c.socket = Some(PathBuf::from("s.sock"));
        let s = resolve(Inputs {
            record: Some(record()),
            config: Some((path, c.clone())),
            ..inputs()
        });
        assert_eq!(s.socket.value, PathBuf::from("/etc/sextant/s.sock"));
        let s = resolve(Inputs {
            socket: Some(PathBuf::from("/e.sock")),
            record: Some(record()),
            config: Some((PathBuf::from("/etc/sextant/config.toml"), c)),
            ..inputs()
        });
        assert_eq!(s.socket.value, PathBuf::from("/e.sock"));
        assert_eq!(s.socket.source, Source::Env("SEXTANT_SOCKET"));
        // A record written before sockets existed still parses.
        let old: ServerRecord =
            toml::from_str("data = \"/d\"\nlisten = \"127.0.0.1:7411\"\n").unwrap();
        assert_eq!(old.socket, None);
    }

    #[test]
    fn the_server_record_names_the_data_directory() {
        let s = resolve(Inputs {
            record: Some(record()),
            ..inputs()
        });
        assert_eq!(s.data.value, PathBuf::from("/srv/sextant"));
        assert!(matches!(s.data.source, Source::ServerRecord(_)));
    }

    #[test]
    fn a_config_file_comes_before_the_record_and_is_relative_to_itself() {
        let s = resolve(Inputs {
            record: Some(record()),
            config: Some(config()),
            ..inputs()
        });
        assert_eq!(s.data.value, PathBuf::from("/etc/sextant/data"));
        assert!(matches!(s.data.source, Source::ConfigFile(_)));
        assert_eq!(s.server.unwrap().value, "mds1:7411");
        assert_eq!(
            s.secret_file.unwrap().value,
            PathBuf::from("/etc/sextant/secret")
        );
    }

    #[test]
    fn flags_and_environment_come_first() {
        let s = resolve(Inputs {
            data: Given::Env(PathBuf::from("/e")),
            server: Given::Flag("h:1".into()),
            record: Some(record()),
            config: Some(config()),
            ..inputs()
        });
        assert_eq!(s.data.value, PathBuf::from("/e"));
        assert_eq!(s.data.source, Source::Env("SEXTANT_DATA"));
        let server = s.server.unwrap();
        assert_eq!(
            (server.value.as_str(), server.source),
            ("h:1", Source::Flag)
        );
    }

    #[test]
    fn config_files_parse_and_refuse_unknown_keys() {
        let c: ConfigFile = toml::from_str("data = \"/d\"\nserver = \"h:1\"\n").unwrap();
        assert_eq!(c.data, Some(PathBuf::from("/d")));
        assert!(toml::from_str::<ConfigFile>("dta = \"/d\"\n").is_err());
    }
}
