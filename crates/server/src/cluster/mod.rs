//! A server of a cluster on etcd: the engine in member mode, the shell of
//! `sextant-coordinator` (membership, delegation map, this server's
//! tables, the coordinator's loop) and the service, put together.
//!
//! - [`placement`]: which SOIDs this server serves (the delegation map and
//!   the shell's grants) and the route map clients get; R1 before every
//!   reply.
//! - [`catalog`]: the engine's table catalogue on etcd (fenced manifest
//!   commits, new tables of a split, table numbers).
//! - [`host`]: ADD, DROP and forget for the shell, over the engine.
//! - [`load`]: this server's load per table (request rate, inodes) as
//!   the coordinator's balancer weighs it, and when to publish it.
//! - [`keys`]: the client key book, kept in etcd and followed through
//!   the delegation map by every server.
//!
//! Start-up order: the delegation map; the shell (joins as a member —
//! waiting out the lease of this name's previous life after a crash —
//! and starts following its assignments and coordinating when elected);
//! the engine, opened with the tables etcd says are this server's (the
//! first server of an empty cluster makes the root table); then serving.
//! Shut-down (SIGINT, SIGTERM): drain — every table moves to another
//! server by DROP/ADD while this one still serves, so clients never wait
//! a lease out — then stop serving, write back what is left, leave.
//!
//! An operation over tables held by several servers BORROWs them here
//! together and RETURNs them once unused ([`placement`]). What a cluster
//! does with log-less durability (`--durability logless`): see
//! `sextant_engine::member_logless` (a dead server's journal is completed
//! from its clients' backups before its tables are failed over,
//! [`host::EngineHost`]). Search covers every server (the client asks them all at once,
//! [`crate::peers`] reads other servers' directories).

pub mod catalog;
pub mod host;
pub mod keys;
pub mod load;
pub mod placement;

use crate::config::{ClusterSettings, ServerConfig};
use crate::{local_socket, secret, serve, Listeners, ServeOptions};
use anyhow::{Context, Result};
use sextant_coordinator::keys::TableLoad;
use sextant_coordinator::{
    ClusterConfig, CoordError, Coordination, DelegationMap, EtcdCluster, EtcdConfig,
    MembershipConfig,
};
use sextant_engine::{Engine, MemberConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// How long a leaving server waits for its tables to move away.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// `sextant serve` as a server of a cluster: like [`crate::run`], with
/// the cluster's settings.
pub fn run(
    config: ServerConfig,
    cluster: ClusterSettings,
    on_listening: impl FnOnce(SocketAddr, Option<&std::path::Path>),
) -> Result<()> {
    std::fs::create_dir_all(&config.data)
        .with_context(|| format!("cannot create the data directory {}", config.data.display()))?;
    std::fs::create_dir_all(&cluster.store).with_context(|| {
        format!(
            "cannot create the cluster's table store {}",
            cluster.store.display()
        )
    })?;
    // One secret for the whole cluster, kept in the shared store; a copy
    // in the data directory is where the CLI on this machine finds it.
    let secret = secret::load_or_create(&cluster.store)?;
    secret::adopt(&config.data, &secret)?;
    let tls = config.tls.as_ref().map(crate::load_tls).transpose()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sextant-server")
        .build()
        .context("cannot start the async runtime")?;
    let etcd = cluster.etcd_config()?;
    let mut cluster = cluster;
    // Bound before joining: the map names the address clients reach.
    let listener = rt.block_on(async {
        TcpListener::bind(&config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))
    })?;
    let addr = listener.local_addr()?;
    if cluster.advertise.ends_with(":0") {
        // Port 0 (tests): the port the system picked.
        let host = cluster.advertise.trim_end_matches(":0");
        cluster.advertise = format!("{host}:{}", addr.port());
    }
    // `catalog_map` feeds the engine's catalogue its fences: it lives as
    // long as the engine (dropped after the close below).
    let (engine, node, catalog_map, host) = rt.block_on(join(&config, &cluster, &etcd))?;
    let result = rt.block_on(async {
        if let Some(addr) = &config.metrics {
            crate::start_metrics(addr, &engine);
        }
        let bound = local_socket::bind_setting(&config.socket, &config.listen, &config.data)?;
        let (unix, socket_file) = match bound {
            Some((listener, file)) => (Some(listener), Some(file)),
            None => (None, None),
        };
        // The client keys: etcd's book, followed; a proof must be made
        // for one of this server's addresses (see crate::clientkeys).
        let mut audiences = vec![cluster.advertise.clone(), addr.to_string()];
        if let Some(f) = &socket_file {
            audiences.push(format!("unix:{}", f.0.display()));
        }
        let map = node.delegation_map();
        let state = map.current();
        let book = Arc::new(
            crate::clientkeys::KeyBook::shared(
                Arc::new(keys::EtcdBook::new(
                    node.etcd().clone(),
                    tokio::runtime::Handle::current(),
                )),
                &keys::records(&state),
                state.revision,
            )
            .with_audiences(audiences),
        );
        let follower = tokio::spawn(keys::follow(Arc::clone(&book), map.subscribe()));
        let signalled = crate::signalled();
        on_listening(addr, socket_file.as_ref().map(|f| f.0.as_path()));
        let coordination: Arc<dyn Coordination> = Arc::clone(&node) as Arc<dyn Coordination>;
        let placement = Arc::new(
            placement::ClusterPlacement::new(coordination)
                .with_etcd(Arc::clone(&node))
                .with_engine(engine.clone()),
        );
        // Stopped when serving ends: it holds the shell, which `leave`
        // needs back whole.
        let reporter = tokio::spawn(report(Arc::clone(&node), engine.clone()));
        let draining = Arc::clone(&node);
        let name = cluster.name.clone();
        let watched = (engine.clone(), Arc::clone(&host));
        let shutdown = async move {
            tokio::select! {
                () = signalled => drain(&draining, &name, draining.etcd()).await,
                cause = engine_stopped(watched) => tracing::error!(
                    %cause,
                    "the engine stopped after a failed write: this server leaves the cluster, \
                     so that the others take its tables over (restart it, after freeing space \
                     if the disk is full)"
                ),
            }
        };
        let mut options =
            ServeOptions::from_config(&config, tls, Some(placement), cluster.advertise.clone());
        options.keys = Some(book);
        let served = serve(
            Listeners {
                tcp: listener,
                unix,
            },
            engine.clone(),
            secret,
            options,
            shutdown,
        )
        .await;
        follower.abort();
        reporter.abort();
        let _ = reporter.await;
        drop(socket_file);
        served
    });
    tracing::info!("writing tables back");
    let closed = engine.close().context("closing the engine");
    rt.block_on(leave(node));
    drop(catalog_map);
    rt.shutdown_timeout(Duration::from_secs(1));
    let mut result = result.and(closed);
    if let (Ok(()), Some(cause)) = (&result, host.disk_failure()) {
        // Left the cluster because its disk failed (see `engine_stopped`):
        // an error exit, though the engine closed.
        result = Err(anyhow::anyhow!(
            "left the cluster: a write to this server's disk failed ({cause}); restart it (after freeing space, if the disk is full)"
        ));
    }
    match &result {
        Ok(()) => tracing::info!("stopped"),
        Err(e) => tracing::error!(error = %format!("{e:#}"), "stopped after an error"),
    }
    result
}

/// The cluster's gauges on /metrics, every second: tables served here,
/// the lease timer's margin (R1 stops acknowledgements at 0), whether this
/// server coordinates, the map's revision, and changes of owner seen;
/// every [`load::LOAD_EVERY`] seconds this server's request rate and the
/// coordinator's weight of its tables (rates and inodes; the inodes
/// themselves are the engine's `sextant_inodes`); and the load per table,
/// published for the balancer when it changed ([`load`]).
async fn report(node: Arc<EtcdCluster>, engine: Engine) {
    use std::collections::BTreeMap;
    let mut seen: Option<BTreeMap<u32, String>> = None;
    let mut ticks: u32 = 0;
    let mut sampler = load::Sampler::default();
    let mut published: Option<BTreeMap<sextant_cluster::ids::TableId, TableLoad>> = None;
    let mut published_rev = sextant_cluster::ids::Revision(0);
    loop {
        ticks = ticks.wrapping_add(1);
        let state = node.delegation_map().current();
        if ticks.is_multiple_of(load::LOAD_EVERY) {
            let loads = sampler.sample(&engine.table_counters(), Instant::now());
            metrics::gauge!("sextant_cluster_requests_per_second")
                .set(loads.values().map(|l| l.rate as f64).sum::<f64>());
            metrics::gauge!("sextant_cluster_balance_weight").set(load::weight(&loads) as f64);
            // The coordinator counts only figures published since a
            // table's owner key was written: after one naming this server
            // (a table given here, or given again), publish even unchanged
            // figures — of the tables measured here, never older ones.
            let renewed = state
                .owners
                .values()
                .any(|o| o.server == node.name() && o.rev >= published_rev);
            // Also once a minute as it is (the key goes with a lost lease).
            let stale = ticks.is_multiple_of(load::LOAD_EVERY * 12);
            if renewed || stale || published.as_ref().is_none_or(|p| load::changed(p, &loads)) {
                match node.publish_load(&loads).await {
                    Ok(rev) => {
                        published = Some(loads);
                        published_rev = rev;
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot publish the load"),
                }
            }
        }

        metrics::gauge!("sextant_cluster_tables_served").set(node.tables().len() as f64);
        metrics::gauge!("sextant_cluster_tables").set(state.tables.len() as f64);
        metrics::gauge!("sextant_lease_margin_seconds")
            .set(node.lease_remaining().as_secs_f64().min(1e6));
        metrics::gauge!("sextant_cluster_coordinator").set(f64::from(u8::from(
            state
                .coordinator
                .as_ref()
                .is_some_and(|(c, _)| c == node.name()),
        )));
        metrics::gauge!("sextant_cluster_map_revision").set(state.revision as f64);
        let owners: BTreeMap<u32, String> = state
            .owners
            .iter()
            .map(|(t, o)| (t.0, o.server.clone()))
            .collect();
        if let Some(before) = &seen {
            let moved = owners
                .iter()
                .filter(|(t, o)| before.get(t).is_some_and(|b| b != *o))
                .count();
            metrics::counter!("sextant_cluster_owner_changes_total").increment(moved as u64);
        }
        seen = Some(owners);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Joins the cluster and opens the engine on the shared store.
async fn join(
    config: &ServerConfig,
    cluster: &ClusterSettings,
    etcd: &EtcdConfig,
) -> Result<(
    Engine,
    Arc<EtcdCluster>,
    DelegationMap,
    Arc<host::EngineHost>,
)> {
    let name = cluster.name.clone();
    let map = retry_etcd("read the delegation map", || {
        DelegationMap::start(etcd.clone())
    })
    .await?;
    let catalog = Arc::new(
        catalog::EtcdCatalog::start(&name, etcd.clone(), map.subscribe())
            .context("cannot start the catalogue thread")?,
    );
    let host = Arc::new(host::EngineHost::default());
    host.set_failover_grace(config.recovery_grace, cluster.lease_ttl);
    let mut membership = MembershipConfig::new(etcd.clone(), &name, &cluster.advertise);
    membership.ttl = cluster.lease_ttl;
    let mut cfg = ClusterConfig::new(membership);
    cfg.max_moves = cluster.balance_moves;
    // The root table is made by the engine of the first server.
    cfg.bootstrap = false;
    // After a crash this name's lease may live on for a TTL: wait it out.
    let deadline = Instant::now() + cluster.lease_ttl * 3 + Duration::from_secs(10);
    let node = loop {
        match EtcdCluster::start(
            cfg.clone(),
            Arc::clone(&host) as Arc<dyn sextant_coordinator::TableHost>,
        )
        .await
        {
            Ok(n) => break n,
            Err(CoordError::NameTaken { .. }) if Instant::now() < deadline => {
                tracing::info!(%name, "this name's previous lease is still alive; waiting it out");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e @ (CoordError::Etcd { .. } | CoordError::Timeout { .. }))
                if Instant::now() < deadline =>
            {
                tracing::warn!(error = %e, "cannot join the cluster yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context("cannot join the cluster"),
        }
    };
    tracing::info!(%name, address = %cluster.advertise, prefix = %etcd.prefix, "joined the cluster");
    let store = cluster.store.clone();
    let engine_config = config.engine_config();
    let member = MemberConfig {
        name: name.clone(),
        catalog: catalog as Arc<dyn sextant_engine::TableCatalog>,
    };
    // The map goes into the opening task and comes back with the engine.
    let engine = tokio::task::spawn_blocking(move || {
        let e = Engine::open_member_dir(&store, engine_config, member);
        (e, map)
    })
    .await
    .context("the engine's opening task failed")?;
    let (engine, map) = engine;
    let engine = engine.with_context(|| {
        format!(
            "cannot open this server's tables in the shared store {}",
            cluster.store.display()
        )
    })?;
    host.set_engine(engine.clone());
    tracing::info!(tables = engine.owned_tables().len(), "engine open");
    Ok((engine, Arc::new(node), map, host))
}

/// Resolves once the engine stopped after a failed write (a full disk, an
/// I/O error: [`sextant_engine::EngineStats::stopped`]), with its cause.
/// A member whose engine stopped must not stay one: it answers every
/// request with that error until restarted, yet keeps its lease, so its
/// tables — and tables the coordinator goes on giving it — were never
/// failed over (found 2026-12-07: a log-less member woken onto a full
/// disk stopped at a write-back, joined again, and was given the root's
/// table, which then answered ENOSPC for as long as it ran, space back
/// or not). Leaving ends its lease: its journal is replayed (completed
/// from its clients' backups, if log-less) and its tables go elsewhere.
///
/// Likewise when a log-less member could not begin its new run at a
/// rejoin because its disk failed ([`host::EngineHost::disk_failure`]):
/// the engine refuses the ADD and goes on, but the coordinator would give
/// the tables back to it again and again, unserved.
async fn engine_stopped((engine, host): (Engine, Arc<host::EngineHost>)) -> sextant_types::FsError {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(cause) = engine.stopped().or_else(|| host.disk_failure()) {
            return cause;
        }
    }
}

/// Retries an etcd call that fails because etcd is not up yet (a server
/// started with its etcd), for up to 30 s — not one etcd refused for
/// its credentials (the settings must change).
async fn retry_etcd<T, F, Fut>(what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CoordError>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if !e.is_settings() && Instant::now() < deadline => {
                tracing::warn!(error = %e, "cannot {what} yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("cannot {what}")),
        }
    }
}

/// Moves every table of this server away while it still serves, if
/// another server can take them.
async fn drain(node: &EtcdCluster, name: &str, etcd: &EtcdConfig) {
    let state = node.delegation_map().current();
    let others = state
        .members
        .keys()
        .any(|m| m != name && !state.draining.contains(m));
    if !others || state.owned_by(name).next().is_none() {
        return;
    }
    tracing::info!("draining: moving this server's tables to the others");
    let drained = async {
        let mut client = sextant_coordinator::etcd::connect(etcd).await?;
        sextant_coordinator::admin::set_draining(&mut client, etcd, name, true).await?;
        Ok::<_, CoordError>(())
    };
    if let Err(e) = drained.await {
        tracing::warn!(error = %e, "cannot drain; leaving with the tables (another server takes them after the lease)");
        return;
    }
    let name = name.to_string();
    // Done when nothing is left here — or when nobody is left to take it
    // (every other server is stopping too: all of them stopped at once
    // would otherwise each wait the whole timeout).
    let ended = node
        .delegation_map()
        .wait_for(DRAIN_TIMEOUT, move |s| {
            s.owned_by(&name).next().is_none()
                || !s
                    .members
                    .keys()
                    .any(|m| *m != name && !s.draining.contains(m))
        })
        .await;
    match ended {
        None => tracing::warn!("tables still here after the drain's timeout"),
        Some(s) if s.owned_by(node.name()).next().is_some() => {
            tracing::warn!("every other server is stopping too; leaving with the tables")
        }
        Some(_) => {}
    }
}

/// Leaves the cluster: revokes the lease, so nobody waits a TTL for it.
async fn leave(node: Arc<EtcdCluster>) {
    // The service's copies go with its last tasks.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut node = node;
    loop {
        match Arc::try_unwrap(node) {
            Ok(n) => {
                if let Err(e) = n.leave(Duration::ZERO).await {
                    tracing::warn!(error = %e, "leaving the cluster failed; the lease ends by itself");
                }
                return;
            }
            Err(n) if Instant::now() < deadline => {
                node = n;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => {
                tracing::warn!("still in use at exit; the lease ends by itself");
                return;
            }
        }
    }
}
