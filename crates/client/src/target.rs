//! Where a server is: a TCP address (`host:port`) or a Unix domain socket
//! (`unix:PATH`, the name gRPC uses), and how to open a channel to it.
//!
//! A Unix socket is for a client on the server's machine: no TCP stack on
//! either side. On this project's 2-vCPU VM one getattr at a time ran at
//! 26.8k/s over a Unix socket against 14.5k – 20.7k/s over TCP loopback
//! (docs/BENCHMARKS.md, "… and a Unix socket"); through the mount, where
//! other hand-overs dominate, it measured the same as TCP.
//!
//! Resets: every channel remembers [`REMEMBERED_RESETS`] streams it reset
//! itself, for h2's second. A search dropped before its end (a limit
//! reached, `find | head`, a spread search's part cancelled) is reset
//! (`RST_STREAM(CANCEL)`, legitimate), and the server's batches already on
//! their way for it arrive after the reset. h2 ignores a frame of a stream
//! it remembers; one of a stream it forgot it answers with
//! `RST_STREAM(STREAM_CLOSED)`, and counts: past 1024 such resets in the
//! connection's life (`max_local_error_reset_streams`, kept at h2's
//! default), it closes the connection with
//! `GOAWAY(ENHANCE_YOUR_CALM, "too_many_internal_resets")`, failing every
//! search and call on it. h2 remembers 50 by default: a client dropping
//! more than 50 searches a second lost its connection within seconds
//! (`tests/many_streams.rs`).
//!
//! Invariants: a `unix:` address never takes TLS (the socket file's
//! permissions and the cluster secret guard it); every other address is
//! what it always was, `host:port` over TCP.

use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// How many streams it reset itself a channel remembers (for h2's default
/// second; see the module docs): a client may drop this many searches a
/// second before frames still arriving for them count against its
/// connection. A remembered stream costs a few hundred bytes, only while
/// remembered. The count of resets for protocol errors that closes the
/// connection (h2's guard against a peer making it reset streams, the
/// "MadeYouReset" kind of attack) stays at h2's default: only frames of
/// streams the client itself cancelled are no longer counted, as long as
/// it remembers them.
pub(crate) const REMEMBERED_RESETS: usize = 4096;

/// The prefix that names a Unix domain socket.
pub const UNIX_PREFIX: &str = "unix:";

/// The socket path of a `unix:PATH` address (`None`: a TCP address).
/// `unix:///abs/path` (gRPC's URI form) is accepted as `/abs/path`.
pub fn unix_path(addr: &str) -> Option<PathBuf> {
    let rest = addr.strip_prefix(UNIX_PREFIX)?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    Some(PathBuf::from(path))
}

/// How channels to one server are opened.
#[derive(Clone)]
pub(crate) struct Target {
    endpoint: Endpoint,
    /// Set for a Unix socket: every connection goes there.
    unix: Option<PathBuf>,
}

/// The TLS settings of a TCP target.
pub(crate) struct Tls<'a> {
    pub ca: &'a [u8],
    pub domain: String,
}

impl Target {
    /// The target for `addr`; `Err` says why the address cannot be used.
    pub(crate) fn new(
        addr: &str,
        connect_timeout: Duration,
        tls: Option<Tls<'_>>,
    ) -> Result<Target, String> {
        let unix = unix_path(addr);
        let uri = match (&unix, &tls) {
            (Some(p), _) if p.as_os_str().is_empty() => {
                return Err("a unix: address needs a socket path (unix:/run/sextant.sock)".into())
            }
            (Some(_), Some(_)) => {
                return Err("TLS is for TCP addresses; a unix: socket takes none".into())
            }
            // The URI only names the HTTP/2 authority; the connector below
            // decides where bytes go.
            (Some(_), None) => "http://localhost".to_string(),
            (None, Some(_)) => format!("https://{addr}"),
            (None, None) => format!("http://{addr}"),
        };
        let mut endpoint = Endpoint::from_shared(uri)
            .map_err(|e| format!("bad address: {e}"))?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .http2_max_concurrent_reset_streams(REMEMBERED_RESETS);
        if let Some(tls) = tls {
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(tls.ca))
                .domain_name(tls.domain);
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| format!("TLS settings: {e}"))?;
        }
        Ok(Target { endpoint, unix })
    }

    /// A connected channel.
    pub(crate) async fn connect(&self) -> Result<Channel, tonic::transport::Error> {
        match &self.unix {
            None => self.endpoint.connect().await,
            Some(path) => {
                self.endpoint
                    .connect_with_connector(unix_connector(path.clone()))
                    .await
            }
        }
    }

    /// A channel that connects on first use (and reconnects by itself).
    pub(crate) fn connect_lazy(&self) -> Channel {
        match &self.unix {
            None => self.endpoint.connect_lazy(),
            Some(path) => self
                .endpoint
                .connect_with_connector_lazy(unix_connector(path.clone())),
        }
    }
}

/// A connector that opens `path` whatever URI it is asked for.
fn unix_connector(
    path: PathBuf,
) -> impl tower::Service<
    tonic::transport::Uri,
    Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone
       + Send {
    tower::service_fn(move |_: tonic::transport::Uri| {
        let path = path.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(&path).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_addresses_are_told_from_tcp_ones() {
        assert_eq!(unix_path("127.0.0.1:7411"), None);
        assert_eq!(unix_path("[::1]:7411"), None);
        assert_eq!(unix_path("unix:/run/s.sock"), Some("/run/s.sock".into()));
        assert_eq!(unix_path("unix:rel.sock"), Some("rel.sock".into()));
        assert_eq!(unix_path("unix:///run/s.sock"), Some("/run/s.sock".into()));
    }

    #[test]
    fn a_unix_address_takes_no_tls_and_needs_a_path() {
        let t = Duration::from_secs(1);
        let tls = || {
            Some(Tls {
                ca: b"",
                domain: "x".into(),
            })
        };
        assert!(Target::new("unix:", t, None).is_err());
        assert!(Target::new("unix:/s.sock", t, tls())
            .err()
            .is_some_and(|e| e.contains("TLS")));
        assert!(Target::new("unix:/s.sock", t, None).is_ok());
        assert!(Target::new("127.0.0.1:1", t, None).is_ok());
    }
}
