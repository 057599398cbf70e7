//! What a server uses, written once for both deployments: the
//! [`Coordination`] trait, implemented by [`EtcdCluster`] (membership,
//! delegation map, this server's tables and the coordinator loop on
//! etcd) and by [`InProcess`] (the single-server default: one table, the
//! whole SOID space, always this server's; no other service).

use crate::coordinate::{CoordinatorConfig, CoordinatorLoop};
use crate::etcd::connect;
use crate::keys;
use crate::map::{ClusterState, DelegationMap, Member, OwnerEntry};
use crate::membership::{Membership, MembershipConfig};
use crate::ownership::{CommitError, Grant, Ownership, OwnershipConfig, TableHost};
use crate::CoordError;
use sextant_cluster::ids::{Epoch, Revision, TableId};
use sextant_types::SoidRange;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A boxed future (the trait is used as `dyn Coordination`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The cluster as one server sees it.
pub trait Coordination: Send + Sync {
    /// This server's name.
    fn name(&self) -> &str;
    /// The delegation map: the current state, and every change.
    fn map(&self) -> watch::Receiver<Arc<ClusterState>>;
    /// The grant of `table` if it serves here now (an operation on it may
    /// begin); `None`: answer WRONG_SERVER.
    fn serving(&self, table: TableId) -> Option<Grant>;
    /// The tables serving here.
    fn tables(&self) -> Vec<Grant>;
    /// Changes each time a table begins serving here, so that a waiter
    /// for [`Coordination::serving`] need not poll (`None`: tables never
    /// begin serving later — one that does not serve now never will).
    fn served(&self) -> Option<watch::Receiver<u64>> {
        None
    }
    /// R1: may an operation on `table` be acknowledged now? Ask after it
    /// is durable, right before the reply; `false`: WRONG_SERVER.
    fn may_ack(&self, table: TableId) -> bool;
    /// R2: make `manifest` the table's, fenced by the grant.
    fn commit_manifest<'a>(
        &'a self,
        grant: &'a Grant,
        manifest: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), CommitError>>;
    /// What the lease timer has left (the `sextant_lease_margin` metric).
    fn lease_remaining(&self) -> Duration;
    /// Which membership lease this server is under: +1 each time one was
    /// lost (every table held before went with it). Constant without
    /// leases.
    fn generation(&self) -> u64 {
        0
    }
}

/// Settings of a server in a cluster on etcd.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub membership: MembershipConfig,
    /// The coordinator's balancing hysteresis (tables).
    pub spread: usize,
    /// How many moves the coordinator keeps in flight at most (default
    /// [`sextant_cluster::coordinator::MAX_MOVES`]).
    pub max_moves: usize,
    /// See [`crate::coordinate::CoordinatorConfig::bootstrap`] (default
    /// `true`).
    pub bootstrap: bool,
    /// How often the shell and the coordinator look without a change
    /// (default: a quarter of the TTL).
    pub tick: Duration,
}

impl ClusterConfig {
    pub fn new(membership: MembershipConfig) -> ClusterConfig {
        let tick = membership.ttl / 4;
        ClusterConfig {
            membership,
            spread: 2,
            max_moves: sextant_cluster::coordinator::MAX_MOVES,
            bootstrap: true,
            tick,
        }
    }
}

/// A server of a cluster on etcd.
pub struct EtcdCluster {
    name: String,
    etcd: crate::etcd::EtcdConfig,
    // Dropped in this order: the loops first, then the map, then the
    // membership (its lease then ends by itself).
    _coordinator: CoordinatorLoop,
    ownership: Ownership,
    map: DelegationMap,
    membership: Arc<Membership>,
    /// For [`EtcdCluster::publish_load`] (made at its first use).
    load_client: tokio::sync::Mutex<Option<etcd_client::Client>>,
}

impl EtcdCluster {
    /// Joins the cluster and starts following the map, carrying out this
    /// server's assignments through `host`, and coordinating when
    /// elected.
    pub async fn start(
        cfg: ClusterConfig,
        host: Arc<dyn TableHost>,
    ) -> Result<EtcdCluster, CoordError> {
        let etcd = cfg.membership.etcd.clone();
        let name = cfg.membership.name.clone();
        crate::etcd::refuse_nested_prefix(&etcd, &mut connect(&etcd).await?).await?;
        let membership = Arc::new(Membership::join(cfg.membership.clone()).await?);
        let map = DelegationMap::start(etcd.clone()).await?;
        let client = connect(&etcd).await?;
        let ownership = Ownership::start(
            OwnershipConfig {
                etcd: etcd.clone(),
                name: name.clone(),
                tick: cfg.tick,
            },
            client.clone(),
            Arc::clone(&membership),
            map.subscribe(),
            Arc::clone(&host),
        );
        let coordinator = CoordinatorLoop::start(
            CoordinatorConfig {
                etcd,
                name: name.clone(),
                spread: cfg.spread,
                max_moves: cfg.max_moves,
                bootstrap: cfg.bootstrap,
                tick: cfg.tick,
                host: Some(host),
            },
            client,
            Arc::clone(&membership),
            map.subscribe(),
        );
        Ok(EtcdCluster {
            name,
            etcd: cfg.membership.etcd.clone(),
            _coordinator: coordinator,
            ownership,
            map,
            membership,
            load_client: tokio::sync::Mutex::new(None),
        })
    }

    /// Leaves the cluster cleanly (Ctrl-C): marks this server draining,
    /// waits up to `timeout` until it owns no table (the coordinator moves
    /// them away by DROP/ADD; with no other server they stay, and this
    /// server loads them again when it comes back), then stops and
    /// revokes its lease, so the cluster does not wait a TTL for it.
    pub async fn leave(self, timeout: Duration) -> Result<(), CoordError> {
        let mut client = connect(&self.etcd).await?;
        crate::admin::set_draining(&mut client, &self.etcd, &self.name, true).await?;
        // What this server borrowed may go (a borrow holds its tables).
        if let Err(e) = self.end_borrow().await {
            tracing::warn!(error = %e, "leaving: cannot RETURN borrowed tables");
        }
        let name = self.name.clone();
        let emptied = self
            .map
            .wait_for(timeout, |s| s.owned_by(&name).next().is_none())
            .await
            .is_some();
        if !emptied {
            tracing::warn!(name = %self.name, "leaving with tables still owned (no server took them in time)");
        } else {
            // The map says the tables are others'; the shell finishes its
            // handovers (the host forgets each table, then its grant goes).
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            while !self.ownership.tables().is_empty() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let lease = self.membership.lease();
        let (etcd, name) = (self.etcd.clone(), self.name.clone());
        drop(self);
        crate::etcd::bounded(&etcd, client.lease_revoke(lease)).await?;
        crate::admin::set_draining(&mut client, &etcd, &name, false).await?;
        tracing::info!(name = %name, "left the cluster");
        Ok(())
    }

    /// Publishes this server's load per table — request rate and inodes
    /// (`load/<name>`, on its membership lease) — which the coordinator
    /// balances by; returns the revision it was written at (figures count
    /// for a table whose owner key is older).
    pub async fn publish_load(
        &self,
        loads: &std::collections::BTreeMap<TableId, crate::keys::TableLoad>,
    ) -> Result<Revision, CoordError> {
        self.put_on_lease(
            &crate::keys::load_key(&self.name),
            crate::keys::encode_load(loads),
        )
        .await
    }

    /// BORROW: asks for `tables` to be moved here together
    /// (`borrow/<name>`, on the membership lease: a server that dies
    /// returns what it borrowed). Writing it again — a larger set — puts
    /// it at the end of the coordinator's queue.
    pub async fn borrow(
        &self,
        tables: &std::collections::BTreeSet<TableId>,
    ) -> Result<(), CoordError> {
        self.put_on_lease(
            &crate::keys::borrow_key(&self.name),
            crate::keys::encode_tables(tables),
        )
        .await
        .map(|_| ())
    }

    /// RETURN: this server's operations no longer need its borrowed
    /// tables together; the coordinator sends them home, or to the next
    /// borrower.
    pub async fn end_borrow(&self) -> Result<(), CoordError> {
        let mut client = self.load_client.lock().await;
        if client.is_none() {
            *client = Some(connect(&self.etcd).await?);
        }
        let Some(c) = client.as_mut() else {
            return Ok(());
        };
        let key = self.etcd.key(&crate::keys::borrow_key(&self.name));
        let r = crate::etcd::bounded(&self.etcd, c.delete(key, None)).await;
        if r.is_err() {
            *client = None;
        }
        r.map(|_| ())
    }

    /// Puts `key` (under the prefix) on the membership lease, so it goes
    /// with this server; one client for these writes, made again after a
    /// failure. Returns the revision of the write.
    async fn put_on_lease(&self, key: &str, value: String) -> Result<Revision, CoordError> {
        let mut client = self.load_client.lock().await;
        if client.is_none() {
            *client = Some(connect(&self.etcd).await?);
        }
        let Some(c) = client.as_mut() else {
            return Ok(Revision(0));
        };
        let put = c.put(
            self.etcd.key(key),
            value,
            Some(etcd_client::PutOptions::new().with_lease(self.membership.lease())),
        );
        let r = crate::etcd::bounded(&self.etcd, put).await;
        if r.is_err() {
            *client = None;
        }
        r.map(|p| {
            Revision(
                p.header()
                    .map_or(0, |h| u64::try_from(h.revision()).unwrap_or(0)),
            )
        })
    }

    pub fn etcd(&self) -> &crate::etcd::EtcdConfig {
        &self.etcd
    }

    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    pub fn delegation_map(&self) -> &DelegationMap {
        &self.map
    }
}

impl Coordination for EtcdCluster {
    fn name(&self) -> &str {
        &self.name
    }

    fn map(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.map.subscribe()
    }

    fn serving(&self, table: TableId) -> Option<Grant> {
        self.ownership.serving(table)
    }

    fn tables(&self) -> Vec<Grant> {
        self.ownership.tables()
    }

    fn served(&self) -> Option<watch::Receiver<u64>> {
        Some(self.ownership.served())
    }

    fn may_ack(&self, table: TableId) -> bool {
        self.ownership.may_ack(table)
    }

    fn commit_manifest<'a>(
        &'a self,
        grant: &'a Grant,
        manifest: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), CommitError>> {
        Box::pin(self.ownership.commit_manifest(grant, manifest))
    }

    fn lease_remaining(&self) -> Duration {
        self.membership.remaining()
    }

    fn generation(&self) -> u64 {
        self.membership().generation()
    }
}

/// The single-server default: this server is the only member and owns
/// the one table, the whole SOID space, for ever. Manifests are kept in
/// memory (a single server's state lives in its own data directory).
pub struct InProcess {
    name: String,
    grant: Grant,
    map: watch::Sender<Arc<ClusterState>>,
    manifest: Mutex<Option<Vec<u8>>>,
}

impl InProcess {
    pub fn new(name: &str, address: &str) -> InProcess {
        let grant = Grant {
            table: keys::ROOT_TABLE,
            range: SoidRange::ALL,
            epoch: Epoch(1),
            owner_rev: Revision(1),
            generation: 1,
        };
        let mut state = ClusterState {
            revision: 1,
            coordinator: Some((name.to_string(), 0)),
            bootstrapped: true,
            ..ClusterState::default()
        };
        state.members.insert(
            name.to_string(),
            Member {
                address: address.to_string(),
                lease: 0,
            },
        );
        state.tables.insert(grant.table, grant.range);
        state.owners.insert(
            grant.table,
            OwnerEntry {
                server: name.to_string(),
                epoch: grant.epoch,
                rev: grant.owner_rev,
            },
        );
        InProcess {
            name: name.to_string(),
            grant,
            map: watch::Sender::new(Arc::new(state)),
            manifest: Mutex::new(None),
        }
    }

    /// The last manifest committed.
    pub fn manifest(&self) -> Option<Vec<u8>> {
        self.manifest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Coordination for InProcess {
    fn name(&self) -> &str {
        &self.name
    }

    fn map(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.map.subscribe()
    }

    fn serving(&self, table: TableId) -> Option<Grant> {
        (table == self.grant.table).then(|| self.grant.clone())
    }

    fn tables(&self) -> Vec<Grant> {
        vec![self.grant.clone()]
    }

    fn may_ack(&self, table: TableId) -> bool {
        table == self.grant.table
    }

    fn commit_manifest<'a>(
        &'a self,
        grant: &'a Grant,
        manifest: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), CommitError>> {
        Box::pin(async move {
            if *grant != self.grant {
                return Err(CommitError::Fenced {
                    table: grant.table,
                    owner_rev: grant.owner_rev,
                });
            }
            *self.manifest.lock().unwrap_or_else(|p| p.into_inner()) = Some(manifest);
            Ok(())
        })
    }

    fn lease_remaining(&self) -> Duration {
        Duration::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::Soid;

    #[tokio::test]
    async fn in_process_owns_everything_and_fences_foreign_grants() {
        let c: Box<dyn Coordination> = Box::new(InProcess::new("solo", "127.0.0.1:7000"));
        let map = c.map().borrow().clone();
        let r = map.route(Soid::from_u128(12345)).unwrap();
        assert_eq!(r.address.as_deref(), Some("127.0.0.1:7000"));
        let g = c.serving(keys::ROOT_TABLE).unwrap();
        assert!(c.may_ack(g.table) && !c.may_ack(TableId(1)));
        assert!(c.serving(TableId(1)).is_none());
        c.commit_manifest(&g, b"m1".to_vec()).await.unwrap();
        let other = Grant {
            owner_rev: Revision(9),
            ..g.clone()
        };
        assert!(matches!(
            c.commit_manifest(&other, b"m2".to_vec()).await,
            Err(CommitError::Fenced { .. })
        ));
        assert_eq!(c.tables(), vec![g]);
    }
}
