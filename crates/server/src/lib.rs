//! Sextant's metadata server: the engine behind the gRPC protocol of
//! `sextant-proto`.
//!
//! - One [`Engine`] per server; every request runs on it inline (engine
//!   calls are synchronous and take microseconds) in its own task, and a
//!   mutation is answered only after `engine.durable(lsn)` resolves, so
//!   requests in flight share journal syncs.
//! - Exactly-once mutations by (client id, seq): see [`dedup`]. With the
//!   journal a mutation's record carries its request and reply, and a
//!   restarted server seeds the table from what recovery found
//!   (`sextant_engine::requests`), so a retry that reaches it gets the
//!   original reply (or `ESTALE` if written back long ago), never a
//!   second run.
//! - A cluster secret (`<data>/secret`, created on first start, mode 0600)
//!   must come with every call over TCP in the `x-sextant-secret` metadata;
//!   on the Unix socket a local user without it is served as the identity
//!   the kernel gives the connection. See [`auth`].
//! - SIGINT/SIGTERM: stop taking requests, finish those running, close the
//!   engine (tables written back).
//! - Listens on TCP and on a Unix socket (on by default, mode 0666, never
//!   TLS) for the users of this machine (`unix:PATH`); see
//!   [`local_socket`].
//! - Log-less durability (`--durability logless`): replies carry redo
//!   backups for the clients; a restart after a crash collects them before
//!   serving. See [`logless`].

pub mod auth;
pub mod clientkeys;
pub mod cluster;
pub mod config;
pub mod confine;
pub mod dedup;
pub mod dir_leases;
pub mod fault;
pub mod forward;
pub mod frame_door;
pub mod local_socket;
pub mod log_budget;
pub mod logless;
pub mod peers;
pub mod placement;
pub mod read_ahead;
pub mod search;
pub mod secret;
mod service;
#[cfg(test)]
mod test_engine;
pub mod watchers;

pub use auth::AUTH_FAILED;
pub use config::ServerConfig;
pub use service::SESSION_IN_FLIGHT;

use anyhow::{Context, Result};
use parking_lot::Mutex;
use service::{Service, Shared};
use sextant_engine::Engine;
use sextant_proto::pb::sextant_server::SextantServer;
use sextant_proto::MAX_MESSAGE_BYTES;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;

/// How long a graceful shutdown waits for connections to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How a server serves, besides its engine and secret.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub dedup_window: usize,
    pub dedup_clients: usize,
    /// Log-less: how long to collect clients' backups after a crash.
    pub recovery_grace: Duration,
    /// TLS on every connection (`None`: plain TCP).
    pub tls: Option<tonic::transport::ServerTlsConfig>,
    /// Which SOIDs this server serves (`None`: all of them, a single
    /// server, whose map names `listen_address`).
    pub placement: Option<Arc<dyn placement::Placement>>,
    /// The address clients reach this server at (for its route map).
    pub listen_address: String,
    /// TLS: the trust root this server reaches the other servers of its
    /// cluster with ([`peers`]; its own certificate).
    pub peer_ca: Option<Vec<u8>>,
    /// The client keys ([`clientkeys`]; `None`: none, and the `Keys` RPC
    /// refuses to make any; a cluster server passes the book it shares
    /// through etcd, [`cluster::keys`]).
    pub keys: Option<Arc<clientkeys::KeyBook>>,
}

impl ServeOptions {
    /// The options `config` sets, with these TLS settings, placement and
    /// address.
    pub fn from_config(
        config: &ServerConfig,
        tls: Option<tonic::transport::ServerTlsConfig>,
        placement: Option<Arc<dyn placement::Placement>>,
        listen_address: String,
    ) -> ServeOptions {
        ServeOptions {
            keys: None,
            dedup_window: config.dedup_window,
            dedup_clients: config.dedup_clients,
            recovery_grace: config.recovery_grace,
            peer_ca: config
                .tls
                .as_ref()
                .and_then(|t| std::fs::read(&t.cert).ok()),
            tls,
            placement,
            listen_address,
        }
    }
}

/// Where a server takes connections.
pub struct Listeners {
    pub tcp: TcpListener,
    /// For clients on this machine (`unix:PATH`); never TLS.
    pub unix: Option<UnixListener>,
}

/// Serves `engine` on `listeners` until `shutdown` resolves, then stops
/// taking requests and waits (up to 10 s) for those running. Does not close
/// the engine. Fails if a log-less recovery fails (nothing is served then).
pub async fn serve(
    listeners: Listeners,
    engine: Engine,
    secret: String,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let ServeOptions {
        dedup_window,
        dedup_clients,
        recovery_grace,
        tls,
        placement,
        listen_address,
        peer_ca,
        keys,
    } = options;
    let keys = keys.unwrap_or_else(|| {
        Arc::new(clientkeys::KeyBook::unsupported(
            "this server has no key book (it was started without one)",
        ))
    });
    let issuer = listen_address.clone();
    let placement = placement.unwrap_or_else(|| {
        Arc::new(placement::Everything {
            name: "sextant".into(),
            address: listen_address,
        })
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut dedup = dedup::Dedup::new(dedup_window, dedup_clients);
    if let Some(found) = engine.take_recovered_requests() {
        service::seed_dedup(&mut dedup, found);
    }
    let dir_epoch = engine.dir_epoch();
    let shared = Arc::new(Shared {
        logless: logless::LoglessServer::new(&engine),
        engine,
        dedup: Mutex::new(dedup),
        shutdown: stop_rx.clone(),
        requests: AtomicU64::new(0),
        replayed: AtomicU64::new(0),
        in_flight: Arc::new(tokio::sync::Semaphore::new(service::SERVER_IN_FLIGHT)),
        watchers: watchers::Watchers::default(),
        placement,
        wrong_server: AtomicU64::new(0),
        peers: peers::Peers::new(&secret, peer_ca, dir_epoch).map(Arc::new),
        keys: Arc::clone(&keys),
        ticket_master: sextant_proto::keyauth::ticket_master(secret.as_bytes()),
        issuer,
    });
    // A table added later (a move, a failover) brings the replies of the
    // mutations its previous owner ran: into the exactly-once table before
    // the table serves (see sextant_engine::table::carried).
    let weak = Arc::downgrade(&shared);
    shared.engine.set_carried_sink(Box::new(move |found| {
        if let Some(s) = weak.upgrade() {
            service::seed_carried(&mut s.dedup.lock(), found);
        }
    }));
    let recovery_shared = Arc::clone(&shared);
    let door_shared = Arc::clone(&shared);
    let svc = SextantServer::new(Service { shared })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let secret = Arc::new(secret.into_bytes());
    let incoming = TcpIncoming::from(listeners.tcp)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)));
    let service = auth::WithCallPath(InterceptedService::new(
        svc.clone(),
        auth::tcp(Arc::clone(&secret), Arc::clone(&keys)),
    ));
    let groups = Arc::new(auth::GroupDb::default());
    // The frame door beside the Unix socket (see frame_door), removed
    // when serving ends.
    let _door_file = match &listeners.unix {
        Some(l) if !frame_door::turned_off() => {
            match l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.to_path_buf()))
            {
                Some(socket) => {
                    match local_socket::bind(&sextant_proto::frames::door_path(&socket)) {
                        Ok((listener, file)) => {
                            let door = Arc::new(frame_door::Door {
                                shared: door_shared,
                                secret: Arc::clone(&secret),
                                groups: Arc::clone(&groups),
                                runtime: tokio::runtime::Handle::current(),
                            });
                            tokio::spawn(frame_door::serve(listener, door, stop_rx.clone()));
                            Some(file)
                        }
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "no frame door");
                            None
                        }
                    }
                }
                None => None,
            }
        }
        _ => None,
    };
    let local = auth::WithCallPath(InterceptedService::new(
        svc,
        auth::unix(secret, groups, keys),
    ));
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let tcp = server_builder(tls)?
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stopped(stop_rx.clone()));
    let unix = async {
        match listeners.unix {
            Some(l) => server_builder(None)?
                .add_service(local)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(l),
                    stopped(stop_rx.clone()),
                )
                .await
                .context("the gRPC server failed on the Unix socket"),
            None => Ok(()),
        }
    };
    let server = async {
        let tcp = async { tcp.await.context("the gRPC server failed") };
        tokio::try_join!(tcp, unix).map(|_| ())
    };
    let mut server = std::pin::pin!(server);
    let recovery = async {
        match &recovery_shared.logless {
            Some(ll) => {
                ll.run_recovery(recovery_shared.engine.clone(), recovery_grace)
                    .await
            }
            None => std::future::pending().await,
        }
    };
    let failed = tokio::select! {
        r = &mut server => return r,
        () = shutdown => None,
        e = recovery => Some(e),
    };
    let _ = stop_tx.send(true);
    if let Some(e) = failed {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, server).await;
        return Err(e);
    }
    let _ = stop_tx.send(true);
    // Graceful means: the requests running finish and reply; sessions and
    // watches end at once. Connections a client keeps open (a mount's)
    // must not hold the stop up for the whole grace period: once no
    // request runs, and their replies had a moment to leave, the server
    // closes them.
    let in_flight = Arc::clone(&recovery_shared.in_flight);
    let drained = async move {
        let _all = in_flight
            .acquire_many(service::SERVER_IN_FLIGHT as u32)
            .await;
        tokio::time::sleep(REPLY_FLUSH).await;
    };
    tokio::select! {
        r = &mut server => r,
        () = drained => {
            tracing::info!("requests finished; closing the connections left");
            Ok(())
        }
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "requests still running; closing anyway");
            Ok(())
        }
    }
}

/// After the last request of a stopping server, how long its reply has to
/// leave before the connections close (a reply lost here is retried by the
/// client, and answered from the journal after the restart).
const REPLY_FLUSH: Duration = Duration::from_millis(200);

/// A gRPC server with the settings every listener shares.
///
/// h2's guards against abusive clients are kept at their defaults, on
/// purpose: streams a client opens and resets before this server took
/// them (20 at a time, hyper's `max_pending_accept_reset_streams`: the
/// "rapid reset" attack, CVE-2023-44487), and streams this server resets
/// itself for a client's protocol error or refuses past
/// `max_concurrent_streams` (1024 in a connection's life,
/// `max_local_error_reset_streams`, h2 0.4.2's limit on connections that
/// keep provoking stream errors), past which the connection is closed
/// with `GOAWAY(ENHANCE_YOUR_CALM)`. A client cancelling a search it was
/// answered (`RST_STREAM(CANCEL)`) counts against neither. (The
/// `too_many_internal_resets` closure seen under thousands of searches a
/// second was the *client's* own count, of frames arriving on streams it
/// had reset and forgotten; fixed in `sextant_client`'s `search` and
/// `target`, not by loosening these.)
fn server_builder(
    tls: Option<tonic::transport::ServerTlsConfig>,
) -> Result<tonic::transport::Server> {
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).context("TLS settings")?;
    }
    Ok(builder
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        // Per connection: streams, and requests handled at once (unary).
        .max_concurrent_streams(Some(64))
        .concurrency_limit_per_connection(1024))
}

/// Resolves on SIGINT or SIGTERM.
/// SIGINT or SIGTERM. The handlers are installed when this is *called*
/// (not when the future is first polled), so a signal that arrives right
/// after the caller announced itself still means a clean shutdown.
/// REQUIRES: a tokio runtime is entered.
pub fn signalled() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    async move {
        let (Ok(mut int), Ok(mut term)) = handlers else {
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}

/// Reads the certificate chain and key named in the config.
pub(crate) fn load_tls(files: &config::TlsFiles) -> Result<tonic::transport::ServerTlsConfig> {
    let read = |p: &std::path::Path, what: &str| {
        std::fs::read(p).with_context(|| format!("cannot read the TLS {what} {}", p.display()))
    };
    let identity = tonic::transport::Identity::from_pem(
        read(&files.cert, "certificate")?,
        read(&files.key, "key")?,
    );
    Ok(tonic::transport::ServerTlsConfig::new().identity(identity))
}

/// `sextant serve`: opens the engine, creates or reads the secret, listens,
/// serves until SIGINT/SIGTERM, closes the engine. `on_listening` is told
/// the bound address (useful with port 0) and the Unix socket's path, if
/// any.
pub fn run(
    config: ServerConfig,
    on_listening: impl FnOnce(SocketAddr, Option<&std::path::Path>),
) -> Result<()> {
    if let Some(c) = config.cluster.clone() {
        return cluster::run(config, c, on_listening);
    }
    std::fs::create_dir_all(&config.data)
        .with_context(|| format!("cannot create the data directory {}", config.data.display()))?;
    let secret = secret::load_or_create(&config.data)?;
    if let Some(floor) = config.bench_sync_floor {
        tracing::warn!(
            ?floor,
            "bench_sync_floor is set: every journal sync is slowed to emulate a slower disk"
        );
    }
    let tls = config.tls.as_ref().map(load_tls).transpose()?;
    if let Some(files) = &config.tls {
        tracing::info!(cert = %files.cert.display(), "TLS on every connection");
    }
    let engine = Engine::open_dir(&config.data, config.engine_config())
        .with_context(|| format!("cannot open the data directory {}", config.data.display()))?;
    let keys = clientkeys::KeyBook::open(&config.data)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sextant-server")
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(async {
        if let Some(addr) = &config.metrics {
            start_metrics(addr, &engine);
        }
        let listener = TcpListener::bind(&config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr()?;
        // The socket file is removed when serving ends (only one this
        // server made).
        let bound = local_socket::bind_setting(&config.socket, &config.listen, &config.data)?;
        let (unix, _socket_file) = match bound {
            Some((listener, file)) => (Some(listener), Some(file)),
            None => (None, None),
        };
        let shutdown = signalled();
        on_listening(addr, _socket_file.as_ref().map(|f| f.0.as_path()));
        serve(
            Listeners {
                tcp: listener,
                unix,
            },
            engine.clone(),
            secret,
            ServeOptions {
                keys: Some(Arc::new(keys)),
                ..ServeOptions::from_config(&config, tls, None, addr.to_string())
            },
            shutdown,
        )
        .await
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    tracing::info!("writing tables back");
    let closed = engine.close().context("closing the engine");
    let result = result.and(closed);
    match &result {
        Ok(()) => tracing::info!("stopped"),
        Err(e) => tracing::error!(error = %format!("{e:#}"), "stopped after an error"),
    }
    result
}

/// Serves Prometheus metrics on `addr` (`/metrics`): request counts and
/// latency by operation (recorded in the service) and the engine's
/// counters, refreshed every second. A failure to start is reported and
/// the server goes on without metrics.
pub(crate) fn start_metrics(addr: &str, engine: &Engine) {
    let installed = addr
        .parse::<SocketAddr>()
        .map_err(|e| e.to_string())
        .and_then(|a| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .with_http_listener(a)
                .install()
                .map_err(|e| e.to_string())
        });
    match installed {
        Ok(()) => tracing::info!(url = %format!("http://{addr}/metrics"), "metrics endpoint"),
        Err(e) => {
            tracing::warn!(addr, error = %e, "no metrics endpoint");
            return;
        }
    }
    let engine = engine.clone();
    tokio::spawn(async move {
        loop {
            let s = engine.stats();
            metrics::gauge!("sextant_inodes").set(s.inodes as f64);
            // 1 once the engine stopped after a failed write (see `status`).
            metrics::gauge!("sextant_engine_stopped").set(f64::from(u8::from(s.stopped.is_some())));
            metrics::gauge!("sextant_tables").set(s.tables as f64);
            metrics::gauge!("sextant_tables_loaded").set(s.loaded_tables as f64);
            metrics::gauge!("sextant_resident_bytes").set(s.resident_bytes as f64);
            metrics::gauge!("sextant_durable_lsn").set(s.durable_lsn as f64);
            metrics::counter!("sextant_journal_syncs_total").absolute(s.journal_syncs);
            // What those syncs took (fdatasync), for the time per sync.
            metrics::counter!("sextant_journal_sync_microseconds_total")
                .absolute(u64::try_from(s.journal_sync_time.as_micros()).unwrap_or(u64::MAX));
            metrics::counter!("sextant_journal_bytes_total").absolute(s.journal_bytes);
            metrics::counter!("sextant_checkpoints_total").absolute(s.checkpoints);
            metrics::counter!("sextant_snapshots_written_total").absolute(s.snapshots_written);
            metrics::counter!("sextant_table_loads_total").absolute(s.tables_loaded_total);
            metrics::counter!("sextant_table_evictions_total").absolute(s.tables_evicted_total);
            metrics::counter!("sextant_table_splits_total").absolute(s.splits);
            metrics::counter!("sextant_table_merges_total").absolute(s.merges);
            metrics::counter!("sextant_lock_retries_total").absolute(s.retries);
            if let Some((stamped, issued, _)) = engine.logless_stats() {
                metrics::gauge!("sextant_logless_written_back_lsn")
                    .set(engine.written_back_lsn() as f64);
                metrics::gauge!("sextant_logless_stamped_inodes").set(stamped as f64);
                metrics::counter!("sextant_logless_backup_bytes_issued_total").absolute(issued);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}
