//! The etcd connection every part of the shell shares: where etcd is, the
//! key prefix of this cluster, and a bound on every call.
//!
//! Invariant: no etcd call in this crate waits longer than
//! [`EtcdConfig::request_timeout`] — a paused etcd (SIGSTOP, a partition)
//! answers nothing and would otherwise hang the caller — and the client
//! sends HTTP/2 keep-alives, so a dead connection is noticed and a stream
//! (watch, lease keep-alive) on it fails instead of going silent.
//!
//! Every connection carries the configured credentials: a user and
//! password (etcd's `auth enable`; the client renews its token when it
//! expires) and TLS (etcd's CA, optionally a client certificate). etcd
//! refusing them is [`CoordError::EtcdAuth`], naming etcd and the user.

use crate::CoordError;
use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use std::path::Path;
use std::time::Duration;

/// Where etcd is and how to talk to it.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// etcd's client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Every key of this cluster starts with it (default `/sextant/`), so
    /// one etcd can hold several clusters (and tests share one etcd).
    pub prefix: String,
    /// The longest any etcd call may take.
    pub request_timeout: Duration,
    /// etcd's user and password (`None`: anonymous; etcd's auth is off).
    pub user: Option<EtcdUser>,
    /// TLS to etcd (`None`: plain HTTP). The endpoints are then `https://`.
    pub tls: Option<EtcdTls>,
}

/// An etcd user and its password. The password is never shown (`Debug`
/// prints the name only).
#[derive(Clone)]
pub struct EtcdUser {
    pub name: String,
    password: String,
}

impl std::fmt::Debug for EtcdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUser")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl EtcdUser {
    pub fn new(name: impl Into<String>, password: impl Into<String>) -> EtcdUser {
        EtcdUser {
            name: name.into(),
            password: password.into(),
        }
    }

    /// `name` with the password in the file `path` (its first line; a
    /// password is never a command-line argument, which `ps` would show).
    pub fn from_file(name: &str, path: &Path) -> Result<EtcdUser, CoordError> {
        let bad = |reason: String| CoordError::EtcdFile {
            what: "password file",
            path: path.display().to_string(),
            reason,
        };
        if name.is_empty() {
            return Err(bad("the user name is empty".into()));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let password = text.lines().next().unwrap_or("");
        if password.is_empty() {
            return Err(bad("the file is empty".into()));
        }
        Ok(EtcdUser::new(name, password))
    }
}

/// TLS to etcd: the CA that signed etcd's certificate and, if etcd asks
/// for one (`--client-cert-auth`), this client's certificate and key.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    ca: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl EtcdTls {
    /// Reads the PEM files.
    pub fn load(ca: &Path, client: Option<(&Path, &Path)>) -> Result<EtcdTls, CoordError> {
        let read = |what: &'static str, path: &Path| {
            std::fs::read(path).map_err(|e| CoordError::EtcdFile {
                what,
                path: path.display().to_string(),
                reason: e.to_string(),
            })
        };
        let ca = read("CA file", ca)?;
        let identity = match client {
            Some((cert, key)) => {
                Some((read("client certificate", cert)?, read("client key", key)?))
            }
            None => None,
        };
        Ok(EtcdTls { ca, identity })
    }

    fn options(&self) -> TlsOptions {
        let tls = TlsOptions::new().ca_certificate(Certificate::from_pem(&self.ca));
        match &self.identity {
            Some((cert, key)) => tls.identity(Identity::from_pem(cert, key)),
            None => tls,
        }
    }
}

/// The key prefix of a cluster that names none.
pub const DEFAULT_PREFIX: &str = "/sextant/";

/// `prefix` as every key of a cluster starts with it: ending in `/` (one
/// is added). Refused ([`CoordError::BadPrefix`]) when empty, not starting
/// with `/`, or holding a space or control character (a typo in a file,
/// which would make a cluster of its own nobody finds).
///
/// Several clusters share one etcd under different prefixes; they must
/// not nest (`/a/` and `/a/b/`): a cluster reads and watches every key
/// under its prefix.
pub fn normalize_prefix(prefix: &str) -> Result<String, CoordError> {
    let bad = |reason: &'static str| CoordError::BadPrefix {
        prefix: prefix.to_string(),
        reason,
    };
    if prefix.is_empty() {
        return Err(bad("it is empty (the default is /sextant/)"));
    }
    if !prefix.starts_with('/') {
        return Err(bad("it must start with '/', e.g. /sextant/"));
    }
    if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it holds a space or a control character"));
    }
    Ok(if prefix.ends_with('/') {
        prefix.to_string()
    } else {
        format!("{prefix}/")
    })
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>) -> EtcdConfig {
        EtcdConfig {
            endpoints,
            prefix: DEFAULT_PREFIX.to_string(),
            request_timeout: Duration::from_secs(1),
            user: None,
            tls: None,
        }
    }

    pub(crate) fn endpoints_text(&self) -> String {
        self.endpoints.join(",")
    }

    /// `key` under this cluster's prefix.
    pub fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

/// How often an idle connection is pinged. etcd refuses clients that ping
/// more often than its `--grpc-keepalive-min-time` (5 s by default): it
/// ends their connection (GOAWAY "too many pings"), which broke every
/// watch about every 8 s at a 2 s interval. A dead connection under a
/// call is noticed by the call's own timeout in any case.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(6);

/// Connects with HTTP/2 keep-alive (a dead connection is noticed) and a
/// timeout on every call (a paused etcd answers nothing).
pub async fn connect(cfg: &EtcdConfig) -> Result<Client, CoordError> {
    let options = ConnectOptions::new()
        .with_keep_alive(KEEP_ALIVE_INTERVAL, cfg.request_timeout)
        .with_keep_alive_while_idle(true)
        .with_connect_timeout(cfg.request_timeout)
        .with_timeout(cfg.request_timeout);
    let options = match &cfg.user {
        // The token etcd hands out expires (5 min idle by default): renew it.
        Some(u) => options
            .with_user(u.name.clone(), u.password.clone())
            .with_auto_token_refresh(true),
        None => options,
    };
    let options = match &cfg.tls {
        Some(t) => options.with_tls(t.options()),
        None => options,
    };
    bounded(cfg, Client::connect(&cfg.endpoints, Some(options))).await
}

/// Refuses ([`CoordError::NestedPrefix`]) a cluster whose prefix encloses
/// another cluster's, or lies inside one: each would read and watch the
/// other's keys. A cluster counts once its bootstrap mark is written. The
/// enclosing prefixes are read at every start (one count per level); the
/// keys inside this prefix only while this cluster has no mark of its own
/// (then it holds a few member keys at most: a cluster bootstrapped
/// first refuses the nested one at that one's start). Two clusters
/// bootstrapped at the same instant are not told apart.
pub async fn refuse_nested_prefix(cfg: &EtcdConfig, client: &mut Client) -> Result<(), CoordError> {
    use crate::keys::{enclosing_prefixes, nested_cluster, BOOTSTRAPPED_KEY};
    let count_only = || Some(GetOptions::new().with_count_only());
    for outer in enclosing_prefixes(&cfg.prefix) {
        let mark = format!("{outer}{BOOTSTRAPPED_KEY}");
        if bounded(cfg, client.get(mark, count_only())).await?.count() > 0 {
            return Err(CoordError::NestedPrefix {
                prefix: cfg.prefix.clone(),
                other: outer,
                relation: "which encloses it",
            });
        }
    }
    let own = cfg.key(BOOTSTRAPPED_KEY);
    if bounded(cfg, client.get(own, count_only())).await?.count() > 0 {
        return Ok(());
    }
    let inside = bounded(
        cfg,
        client.get(
            cfg.prefix.as_bytes(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        ),
    )
    .await?;
    for kv in inside.kvs() {
        let tail = kv.key().get(cfg.prefix.len()..).unwrap_or_default();
        let Ok(tail) = std::str::from_utf8(tail) else {
            continue;
        };
        if let Some(inner) = nested_cluster(tail) {
            return Err(CoordError::NestedPrefix {
                prefix: cfg.prefix.clone(),
                other: format!("{}{inner}", cfg.prefix),
                relation: "inside it",
            });
        }
    }
    Ok(())
}

/// Where a user of this crate's callers sets the credentials.
const SETTINGS: &str = "the server's etcd_user and etcd_password_file, \
                        the CLI's --etcd-user and --etcd-password-file";

/// etcd's answer, if it refuses the client's credentials (or their lack).
fn refusal(cfg: &EtcdConfig, e: &etcd_client::Error) -> Option<CoordError> {
    if let Some(refused) = tls_refusal(cfg, e) {
        return Some(refused);
    }
    let etcd_client::Error::GRpcStatus(status) = e else {
        return None;
    };
    let message = status.message();
    let reason = if message.contains("user name is empty") {
        format!("etcd's authentication is on and this client gave no user name ({SETTINGS})")
    } else if message.contains("authentication failed") {
        format!("wrong user name or password ({SETTINGS})")
    } else if message.contains("authentication is not enabled") {
        "a user name was given, but etcd's authentication is off (give none, or enable it)"
            .to_string()
    } else if message.contains("permission denied") {
        format!(
            "permission denied (the user needs read and write on the keys under {})",
            cfg.prefix
        )
    } else if message.contains("invalid auth token") {
        "its authentication token is no longer valid".to_string()
    } else {
        return None;
    };
    let who = match &cfg.user {
        Some(u) => format!("the user {:?}", u.name),
        None => "a client without a user name".to_string(),
    };
    Some(CoordError::EtcdAuth {
        endpoints: cfg.endpoints_text(),
        who,
        reason,
    })
}

/// The TLS handshake failing for want of the right CA or client
/// certificate (rustls's words, in the error's text).
fn tls_refusal(cfg: &EtcdConfig, e: &etcd_client::Error) -> Option<CoordError> {
    let text = e.to_string();
    let (who, reason) = if text.contains("invalid peer certificate") {
        (
            "its certificate",
            "this client does not trust it (give etcd's CA: the server's etcd_ca, the CLI's --etcd-ca)",
        )
    } else if text.contains("BadCertificate")
        || text.contains("CertificateRequired")
        || text.contains("UnknownCA")
    {
        (
            "this client's certificate",
            "etcd wants one its CA signed (the server's etcd_cert and etcd_key, the CLI's --etcd-cert and --etcd-key)",
        )
    } else {
        return None;
    };
    Some(CoordError::EtcdAuth {
        endpoints: cfg.endpoints_text(),
        who: who.to_string(),
        reason: reason.to_string(),
    })
}

/// `call`, failing after the request timeout.
pub(crate) async fn bounded<T>(
    cfg: &EtcdConfig,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, CoordError> {
    match tokio::time::timeout(cfg.request_timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(refusal(cfg, &source).unwrap_or(CoordError::Etcd {
            endpoints: cfg.endpoints_text(),
            source,
        })),
        Err(_) => Err(CoordError::Timeout {
            endpoints: cfg.endpoints_text(),
            timeout: cfg.request_timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_end_in_a_slash_and_start_with_one() {
        assert_eq!(normalize_prefix("/sextant/").unwrap(), "/sextant/");
        assert_eq!(normalize_prefix("/c2").unwrap(), "/c2/");
        assert_eq!(normalize_prefix("/a/b").unwrap(), "/a/b/");
        assert_eq!(normalize_prefix("/").unwrap(), "/");
        assert_eq!(EtcdConfig::new(vec![]).prefix, DEFAULT_PREFIX);
        assert_eq!(normalize_prefix(DEFAULT_PREFIX).unwrap(), DEFAULT_PREFIX);
        for bad in ["", "c2", "c2/", " /c2/", "/c2/ ", "/c 2/", "/c2\n"] {
            let e = normalize_prefix(bad).expect_err(bad);
            assert!(
                matches!(&e, CoordError::BadPrefix { prefix, .. } if prefix == bad),
                "{bad:?}: {e}"
            );
            assert!(e.is_settings(), "{bad:?}: retrying would not help");
            assert!(e.to_string().contains("etcd key prefix"), "{e}");
        }
        assert!(normalize_prefix("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert!(normalize_prefix("c2")
            .unwrap_err()
            .to_string()
            .contains("start with '/'"));
    }

    #[test]
    fn a_key_is_under_the_prefix() {
        let mut cfg = EtcdConfig::new(vec![]);
        cfg.prefix = normalize_prefix("/b").unwrap();
        assert_eq!(cfg.key("members/s1"), "/b/members/s1");
    }
}
