//! What Sextant needs from etcd, as a model: a linearizable key-value map
//! with a global revision, leases that delete their keys when they
//! expire, and transactions that compare keys' `mod_revision` before
//! writing. The simulation runs against it; the real etcd (3.4) has the
//! same semantics for these calls (`Txn` with `Compare::mod_revision`,
//! `LeaseGrant`, `LeaseKeepAlive`, `Put` with a lease), including the
//! one that matters for fencing: a restart grants every lease a whole TTL
//! again ([`Etcd::restart`]).
//!
//! Time is passed in: the model never reads a clock.

use crate::ids::{Millis, Revision};
use std::collections::BTreeMap;

/// A lease's id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct LeaseId(pub u64);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub value: String,
    pub mod_revision: Revision,
    pub lease: Option<LeaseId>,
}

#[derive(Clone, Debug)]
struct Lease {
    ttl_ms: u64,
    expires: Millis,
}

/// A condition of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compare {
    /// The key's `mod_revision` is this (`Revision(0)`: the key is absent).
    ModRevision(String, Revision),
}

/// A write of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    Put {
        key: String,
        value: String,
        lease: Option<LeaseId>,
    },
    Delete(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdError {
    /// A compare failed: nothing was written.
    Conflict,
    /// The lease does not exist (expired, or never granted).
    NoLease,
}

/// The model.
#[derive(Clone, Debug, Default)]
pub struct Etcd {
    revision: Revision,
    kv: BTreeMap<String, Entry>,
    leases: BTreeMap<LeaseId, Lease>,
    next_lease: u64,
}

impl Etcd {
    pub fn revision(&self) -> Revision {
        self.revision
    }

    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.kv.get(key)
    }

    /// Every key starting with `prefix`, in order.
    pub fn range<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a Entry)> {
        self.kv
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(k, e)| (k.as_str(), e))
    }

    pub fn grant(&mut self, ttl_ms: u64, now: Millis) -> LeaseId {
        self.next_lease += 1;
        let id = LeaseId(self.next_lease);
        self.leases.insert(
            id,
            Lease {
                ttl_ms,
                expires: now.plus(ttl_ms),
            },
        );
        id
    }

    /// A keep-alive received at `now`: the lease lives `ttl` from now.
    pub fn keep_alive(&mut self, lease: LeaseId, now: Millis) -> Result<u64, EtcdError> {
        let l = self.leases.get_mut(&lease).ok_or(EtcdError::NoLease)?;
        l.expires = now.plus(l.ttl_ms);
        Ok(l.ttl_ms)
    }

    pub fn lease_alive(&self, lease: LeaseId) -> bool {
        self.leases.contains_key(&lease)
    }

    /// Expires the leases whose time is up at `now`, deleting their keys.
    pub fn expire(&mut self, now: Millis) {
        let gone: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.revoke(id);
        }
    }

    pub fn revoke(&mut self, lease: LeaseId) {
        if self.leases.remove(&lease).is_none() {
            return;
        }
        let keys: Vec<String> = self
            .kv
            .iter()
            .filter(|(_, e)| e.lease == Some(lease))
            .map(|(k, _)| k.clone())
            .collect();
        if !keys.is_empty() {
            self.revision.0 += 1;
            for k in keys {
                self.kv.remove(&k);
            }
        }
    }

    /// etcd came back at `now` after being down: every lease gets a whole
    /// TTL again (what etcd does; the source of leases outliving their
    /// TTL by the restart time).
    pub fn restart(&mut self, now: Millis) {
        for l in self.leases.values_mut() {
            l.expires = now.plus(l.ttl_ms);
        }
    }

    /// Writes all of `writes` if every compare holds, at one new revision.
    pub fn txn(&mut self, compares: &[Compare], writes: &[Write]) -> Result<Revision, EtcdError> {
        for c in compares {
            match c {
                Compare::ModRevision(key, rev) => {
                    let actual = self.kv.get(key).map_or(Revision(0), |e| e.mod_revision);
                    if actual != *rev {
                        return Err(EtcdError::Conflict);
                    }
                }
            }
        }
        for w in writes {
            if let Write::Put { lease: Some(l), .. } = w {
                if !self.leases.contains_key(l) {
                    return Err(EtcdError::NoLease);
                }
            }
        }
        self.revision.0 += 1;
        let rev = self.revision;
        for w in writes {
            match w {
                Write::Put { key, value, lease } => {
                    self.kv.insert(
                        key.clone(),
                        Entry {
                            value: value.clone(),
                            mod_revision: rev,
                            lease: *lease,
                        },
                    );
                }
                Write::Delete(key) => {
                    self.kv.remove(key);
                }
            }
        }
        Ok(rev)
    }

    /// An unconditional put.
    pub fn put(
        &mut self,
        key: &str,
        value: &str,
        lease: Option<LeaseId>,
    ) -> Result<Revision, EtcdError> {
        self.txn(
            &[],
            &[Write::Put {
                key: key.into(),
                value: value.into(),
                lease,
            }],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_writes_only_if_the_revision_is_unchanged() {
        let mut e = Etcd::default();
        let r1 = e.put("owner/t1", "s1 1", None).unwrap();
        let c = [Compare::ModRevision("owner/t1".into(), r1)];
        let w = [Write::Put {
            key: "owner/t1".into(),
            value: "s2 2".into(),
            lease: None,
        }];
        let r2 = e.txn(&c, &w).unwrap();
        assert!(r2 > r1);
        assert_eq!(e.txn(&c, &w), Err(EtcdError::Conflict));
        assert_eq!(e.get("owner/t1").unwrap().value, "s2 2");
    }

    #[test]
    fn an_expired_lease_takes_its_keys_and_a_restart_extends_the_rest() {
        let mut e = Etcd::default();
        let a = e.grant(6_000, Millis(0));
        let b = e.grant(6_000, Millis(0));
        e.put("member/s1", "", Some(a)).unwrap();
        e.put("member/s2", "", Some(b)).unwrap();
        e.keep_alive(a, Millis(5_000)).unwrap();
        e.expire(Millis(6_000));
        assert!(e.get("member/s1").is_some() && e.get("member/s2").is_none());
        assert_eq!(e.keep_alive(b, Millis(6_000)), Err(EtcdError::NoLease));
        // Down from 7 s to 12 s: the lease, due at 11 s, lives to 18 s.
        e.restart(Millis(12_000));
        e.expire(Millis(17_999));
        assert!(e.get("member/s1").is_some());
        e.expire(Millis(18_000));
        assert!(e.get("member/s1").is_none());
    }
}
