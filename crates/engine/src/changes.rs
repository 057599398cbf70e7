//! What a committed mutation changed, for caches kept outside the engine.
//!
//! A FUSE mount lets the kernel cache names and attributes; when another
//! client changes them, the mount must drop those cache entries. The engine
//! owns the only exact answer to "what did this operation change": its
//! write set. When change tracking is on ([`crate::Engine::track_changes`]),
//! every commit hands its write set's keys back in
//! [`crate::Committed::changes`]; the layers above ship them to watchers.
//!
//! Invariants:
//! - [`Changes::inodes`] holds every SOID whose inode the operation wrote or
//!   deleted, and [`Changes::entries`] every `(parent, name)` it wrote or
//!   deleted; each once, in write-set order.
//! - High-water marks and other bookkeeping are not changes: nothing a
//!   client caches depends on them.
//! - Pure: built from the mutations alone, no I/O.

use crate::record::Mutation;
use sextant_types::Soid;

/// The keys one committed operation changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub inodes: Vec<Soid>,
    pub entries: Vec<(Soid, Box<[u8]>)>,
}

impl Changes {
    /// The keys `mutations` write or delete.
    pub fn of(mutations: &[Mutation]) -> Changes {
        let mut c = Changes::default();
        for m in mutations {
            match m {
                Mutation::PutInode { soid, .. } | Mutation::DeleteInode { soid } => {
                    if !c.inodes.contains(soid) {
                        c.inodes.push(*soid);
                    }
                }
                Mutation::PutDentry { parent, dentry } => c.add_entry(*parent, &dentry.name),
                Mutation::DeleteDentry { parent, name } => c.add_entry(*parent, name),
                Mutation::HighWater(_) => {}
            }
        }
        c
    }

    fn add_entry(&mut self, parent: Soid, name: &[u8]) {
        if !self
            .entries
            .iter()
            .any(|(p, n)| *p == parent && **n == *name)
        {
            self.entries.push((parent, name.into()));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.entries.is_empty()
    }
}
