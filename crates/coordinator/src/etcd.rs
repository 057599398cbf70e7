//! The etcd connection every part of the shell shares: where etcd is, the
//! key prefix of this cluster, and a bound on every call.
//!
//! Invariant: no etcd call in this crate waits longer than
//! [`EtcdConfig::request_timeout`] — a paused etcd (SIGSTOP, a partition)
//! answers nothing and would otherwise hang the caller — and the client
//! sends HTTP/2 keep-alives, so a dead connection is noticed and a stream
//! (watch, lease keep-alive) on it fails instead of going silent.

use crate::CoordError;
use etcd_client::{Client, ConnectOptions};
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
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>) -> EtcdConfig {
        EtcdConfig {
            endpoints,
            prefix: "/sextant/".to_string(),
            request_timeout: Duration::from_secs(1),
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
    bounded(cfg, Client::connect(&cfg.endpoints, Some(options))).await
}

/// `call`, failing after the request timeout.
pub(crate) async fn bounded<T>(
    cfg: &EtcdConfig,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, CoordError> {
    match tokio::time::timeout(cfg.request_timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(CoordError::Etcd {
            endpoints: cfg.endpoints_text(),
            source,
        }),
        Err(_) => Err(CoordError::Timeout {
            endpoints: cfg.endpoints_text(),
            timeout: cfg.request_timeout,
        }),
    }
}
