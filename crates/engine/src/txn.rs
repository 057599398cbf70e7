//! Transactions: how one namespace operation reads and writes tables.
//!
//! An operation runs against a [`Txn`]. Reads go through the transaction's
//! write set, then to the table that owns the key; the first touch of a
//! table locks it and keeps it locked until the end (two-phase locking).
//! Writes only go to the write set; `Txn::commit` turns the write set into
//! one journal record, appends it while every lock is still held (so LSN
//! order agrees with the order of conflicting operations), applies it to
//! the tables and releases the locks. Durability is awaited afterwards, so
//! concurrent operations share journal syncs.
//!
//! Member mode: a table owned by another member is a `Slot::Foreign` in
//! the map; touching it fails the operation with `WrongServer` (it was the
//! first table touched) or `NeedsTable` (it was not), before anything is
//! written.
//!
//! Deadlock freedom: tables are locked in ascending SOID order. When an
//! operation discovers it needs a table *below* one it holds, it only
//! `try_lock`s it; if that fails the operation is abandoned with
//! [`OpError::Retry`] and rerun with the whole set locked in order up front.
//! Nothing has been written at that point (writes are buffered), so a retry
//! is invisible.

use crate::changes::Changes;
use crate::engine::{Committed, Inner, Slot, TableSlot};
use crate::inode::{Dentry, Inode};
use crate::journal::MAX_RECORD_LEN;
use crate::logless::{encode_mutations, stamp_keys};
use crate::record::{encode_tagged_record, Mutation};
use crate::requests::RequestTag;
use crate::soid::{GlobalHighWater, SoidSpace};
use crate::table::Table;
use parking_lot::MutexGuard;
use sextant_types::{FsError, Nanos, Soid, SoidRange};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Why an operation stopped.
#[derive(Debug)]
pub enum OpError {
    /// The answer for the caller.
    Fs(FsError),
    /// The transaction must be rerun with the table holding this SOID locked
    /// in order from the start.
    Retry(Soid),
}

impl From<FsError> for OpError {
    fn from(e: FsError) -> Self {
        OpError::Fs(e)
    }
}

pub type OpResult<T> = Result<T, OpError>;

/// See the module docs.
pub struct Txn<'m> {
    inner: &'m Inner,
    map: &'m BTreeMap<Soid, Arc<TableSlot>>,
    locked: BTreeMap<Soid, MutexGuard<'m, Slot>>,
    /// Write set. An operation touches a handful of keys, so small vectors
    /// searched linearly beat maps (and lookups allocate nothing).
    inodes: Vec<(Soid, Option<Inode>)>,
    dentries: Vec<(Soid, Box<[u8]>, Option<Dentry>)>,
    high_water: Option<GlobalHighWater>,
    /// The operation's timestamp (one per operation, as in Linux).
    pub now: Nanos,
}

impl<'m> Txn<'m> {
    pub(crate) fn new(
        inner: &'m Inner,
        map: &'m BTreeMap<Soid, Arc<TableSlot>>,
        now: Nanos,
    ) -> Txn<'m> {
        Txn {
            inner,
            map,
            locked: BTreeMap::new(),
            inodes: Vec::new(),
            dentries: Vec::new(),
            high_water: None,
            now,
        }
    }

    pub(crate) fn layout(&self) -> &crate::soid::SoidLayout {
        &self.inner.config.layout
    }

    /// Starts (range.first) of the tables this transaction holds.
    pub(crate) fn locked_keys(&self) -> Vec<Soid> {
        self.locked.keys().copied().collect()
    }

    fn slot_for(&self, soid: Soid) -> (Soid, &'m Arc<TableSlot>) {
        // The map always has an entry at Soid::MIN, so this cannot miss.
        let (start, slot) = self
            .map
            .range(..=soid)
            .next_back()
            .expect("table map covers the whole SOID space");
        (*start, slot)
    }

    /// Locks (in order, or by try-lock) and returns the table owning `soid`.
    pub(crate) fn table_for(&mut self, soid: Soid) -> OpResult<&mut Table> {
        let (start, slot) = self.slot_for(soid);
        if !self.locked.contains_key(&start) {
            let in_order = self
                .locked
                .keys()
                .next_back()
                .is_none_or(|top| *top < start);
            let guard = if in_order {
                slot.state.lock()
            } else {
                slot.state.try_lock().ok_or(OpError::Retry(start))?
            };
            if let Slot::Foreign(_) = &*guard {
                // Member mode: another member's table. Nothing is written
                // yet (writes are buffered), so refusing here changes
                // nothing. First table touched: the client asked the wrong
                // server; else the operation spans servers.
                return Err(OpError::Fs(if self.locked.is_empty() {
                    FsError::WrongServer { soid }
                } else {
                    FsError::NeedsTable { soid }
                }));
            }
            self.locked.insert(start, guard);
        }
        let guard = self
            .locked
            .get_mut(&start)
            .ok_or(OpError::Fs(FsError::Io))?;
        slot.touch(self.inner.epoch());
        self.inner.ensure_loaded(guard).map_err(OpError::Fs)
    }

    fn pending_inode(&self, soid: Soid) -> Option<&Option<Inode>> {
        self.inodes.iter().find(|(s, _)| *s == soid).map(|(_, v)| v)
    }

    fn set_inode(&mut self, soid: Soid, v: Option<Inode>) {
        match self.inodes.iter_mut().find(|(s, _)| *s == soid) {
            Some(slot) => slot.1 = v,
            None => self.inodes.push((soid, v)),
        }
    }

    fn pending_dentry(&self, parent: Soid, name: &[u8]) -> Option<&Option<Dentry>> {
        self.dentries
            .iter()
            .find(|(p, n, _)| *p == parent && &**n == name)
            .map(|(_, _, v)| v)
    }

    fn set_dentry(&mut self, parent: Soid, name: &[u8], v: Option<Dentry>) {
        match self
            .dentries
            .iter_mut()
            .find(|(p, n, _)| *p == parent && &**n == name)
        {
            Some(slot) => slot.2 = v,
            None => self.dentries.push((parent, Box::from(name), v)),
        }
    }

    /// The inode `soid` as this transaction sees it.
    pub fn inode(&mut self, soid: Soid) -> OpResult<Option<Inode>> {
        if let Some(v) = self.pending_inode(soid) {
            return Ok(v.clone());
        }
        Ok(self.table_for(soid)?.inode(soid).cloned())
    }

    /// The inode `soid`, or `err` if it does not exist.
    pub fn inode_or(&mut self, soid: Soid, err: FsError) -> OpResult<Inode> {
        self.inode(soid)?.ok_or(OpError::Fs(err))
    }

    pub fn put_inode(&mut self, soid: Soid, mut inode: Inode) -> OpResult<()> {
        self.table_for(soid)?;
        inode.normalize();
        self.set_inode(soid, Some(inode));
        Ok(())
    }

    pub fn delete_inode(&mut self, soid: Soid) -> OpResult<()> {
        self.table_for(soid)?;
        self.set_inode(soid, None);
        Ok(())
    }

    /// The entry `name` in directory `parent`.
    pub fn dentry(&mut self, parent: Soid, name: &[u8]) -> OpResult<Option<Dentry>> {
        if let Some(v) = self.pending_dentry(parent, name) {
            return Ok(v.clone());
        }
        Ok(self.table_for(parent)?.dentry(parent, name))
    }

    /// Adds or replaces an entry. ENOSPC when `BUCKET` names of `parent`
    /// already share the name's hash (checked here, before the record is
    /// journaled, so applying it cannot fail).
    ///
    /// [`BUCKET`]: crate::table::BUCKET
    pub fn put_dentry(&mut self, parent: Soid, dentry: Dentry) -> OpResult<()> {
        if !self.table_for(parent)?.can_add_entry(parent, &dentry.name) {
            return Err(OpError::Fs(FsError::NoSpace));
        }
        let name = dentry.name.clone();
        self.set_dentry(parent, &name, Some(dentry));
        Ok(())
    }

    pub fn delete_dentry(&mut self, parent: Soid, name: &[u8]) -> OpResult<()> {
        self.table_for(parent)?;
        self.set_dentry(parent, name, None);
        Ok(())
    }

    /// Does directory `dir` have any entry, as this transaction sees it?
    pub fn has_entries(&mut self, dir: Soid) -> OpResult<bool> {
        let mine = || self.dentries.iter().filter(|(p, _, _)| *p == dir);
        if mine().any(|(_, _, v)| v.is_some()) {
            return Ok(true);
        }
        let pending: Vec<Box<[u8]>> = mine().map(|(_, n, _)| n.clone()).collect();
        let table = self.table_for(dir)?;
        // Enough entries to find one this transaction did not delete.
        let listed = table.readdir(dir, 0, pending.len() + 1);
        Ok(listed
            .iter()
            .any(|(_, d)| !pending.iter().any(|p| **p == *d.name)))
    }

    /// The engine-wide SOID counters, to be changed by an allocation.
    pub(crate) fn high_water(&mut self) -> GlobalHighWater {
        match &self.high_water {
            Some(hw) => hw.clone(),
            None => self.inner.high_water.lock().clone(),
        }
    }

    pub(crate) fn set_high_water(&mut self, hw: GlobalHighWater) {
        self.high_water = Some(hw);
    }

    /// Writes the write set as one journal record (or, log-less, one redo
    /// entry) and applies it. Returns what was committed (LSN, 0 if the
    /// transaction wrote nothing; the log-less redo entry; the changed keys
    /// when tracked; the caller puts in the value) and the starts of tables
    /// that grew past their limits and should split. With the journal, a
    /// `tag` (the client request this answers) goes into the record and
    /// the request ledger ([`crate::requests`]); log-less ignores it.
    pub(crate) fn commit(
        mut self,
        tag: Option<RequestTag>,
    ) -> OpResult<(Committed<()>, Vec<Soid>)> {
        let nothing = Committed {
            value: (),
            lsn: 0,
            redo: None,
            changes: None,
        };
        if self.inodes.is_empty() && self.dentries.is_empty() && self.high_water.is_none() {
            return Ok((nothing, Vec::new()));
        }
        let mut mutations = Vec::with_capacity(self.inodes.len() + self.dentries.len() + 1);
        if let Some(hw) = self.high_water.take() {
            let mut global = self.inner.high_water.lock();
            global.merge_max(&hw);
            mutations.push(Mutation::HighWater(global.clone()));
        }
        for (soid, v) in std::mem::take(&mut self.inodes) {
            mutations.push(match v {
                Some(inode) => Mutation::PutInode { soid, inode },
                None => Mutation::DeleteInode { soid },
            });
        }
        for (parent, name, v) in std::mem::take(&mut self.dentries) {
            mutations.push(match v {
                Some(dentry) => Mutation::PutDentry { parent, dentry },
                None => Mutation::DeleteDentry { parent, name },
            });
        }
        let changes = self
            .inner
            .track_changes
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| Changes::of(&mutations))
            .filter(|c| !c.is_empty());
        // Every key's table was locked when it was written, so nothing
        // below can ask for a retry once the record is in the journal.
        let (lsn, redo) = match &self.inner.logless {
            None => {
                // A log-less member encodes the write set once, for the
                // record and for the redo entry.
                let body = self
                    .inner
                    .member_redo()
                    .map(|_| encode_mutations(&mutations));
                let record = match &body {
                    Some(b) => crate::record::encode_tagged_record_from_body(tag.as_ref(), b),
                    None => encode_tagged_record(tag.as_ref(), &mutations),
                };
                if let Some(tag) = &tag {
                    if record.len() > MAX_RECORD_LEN {
                        return Err(OpError::Fs(FsError::TooBig));
                    }
                    // Before the append: a checkpoint that may trim this
                    // record writes a ledger that has it.
                    self.inner.requests.lock().note(&tag.id);
                }
                match self.inner.member_redo().zip(body) {
                    None => (
                        self.inner.journal.append(&record).map_err(OpError::Fs)?,
                        None,
                    ),
                    // A log-less member: journaled as any member, and a
                    // redo entry for the clients, in the same LSN order.
                    Some((r, body)) => {
                        let keys = stamp_keys(&mutations);
                        let synced = self.inner.journal.synced_lsn();
                        let (lsn, redo) = self
                            .inner
                            .journal
                            .append_with(&record, |lsn| {
                                r.commit(lsn, &keys, tag.as_ref(), &body, synced)
                            })
                            .map_err(OpError::Fs)?;
                        (lsn, Some(redo))
                    }
                }
            }
            Some(ll) => {
                // Log-less: the redo entry is built under the LSN lock (its
                // stamps and ARL place are in LSN order); nothing is written.
                let body = encode_mutations(&mutations);
                if body.len() > MAX_RECORD_LEN {
                    return Err(OpError::Fs(FsError::TooBig));
                }
                let keys = stamp_keys(&mutations);
                let (lsn, redo) = self
                    .inner
                    .journal
                    .assign_lsn(|lsn| ll.commit(lsn, &keys, tag.as_ref(), &body))
                    .map_err(OpError::Fs)?;
                // Before the deletes are applied (their tables are still
                // locked): a freed SOID is never seen free meanwhile.
                ll.quarantine(
                    lsn,
                    mutations.iter().filter_map(|m| match m {
                        Mutation::DeleteInode { soid } => Some(*soid),
                        _ => None,
                    }),
                );
                (lsn, Some(redo))
            }
        };
        // A member engine's tables carry the replies of the mutations that
        // touched them to their next owner (see `table::carried`).
        let carry = tag
            .as_ref()
            .filter(|_| self.inner.member.is_some() && self.inner.logless.is_none())
            .map(|t| (t, crate::table::carried::unix_now()));
        let mut touched: Vec<Soid> = Vec::new();
        let mut inode_delta = 0i64;
        let mut directory_changed = false;
        let epoch = self.inner.epoch();
        for m in mutations {
            let Some(key) = m.table_key() else { continue };
            let (start, _) = self.slot_for(key);
            let table = self.table_for(key)?;
            // One lookup of the inode a mutation replaces serves the inode
            // count and the directory epoch.
            match &m {
                Mutation::PutInode { soid, inode } => match table.inode(*soid) {
                    None => inode_delta += 1,
                    // A directory's place, or who may list it, changed
                    // (its owner too: other members keep its owner and
                    // group to decide who may list it).
                    Some(old) => {
                        directory_changed |= old.is_dir()
                            && (old.parent != inode.parent
                                || old.name != inode.name
                                || old.perm != inode.perm
                                || old.uid != inode.uid
                                || old.gid != inode.gid);
                    }
                },
                Mutation::DeleteInode { soid } => {
                    if let Some(old) = table.inode(*soid) {
                        inode_delta -= 1;
                        directory_changed |= old.is_dir();
                    }
                }
                _ => {}
            }
            if let Err(e) = table.apply(m) {
                // `put_dentry` ruled this out under the same table lock.
                unreachable!("a checked mutation failed to apply: {e}");
            }
            table.mark_applied(lsn, epoch);
            if !touched.contains(&start) {
                touched.push(start);
                if let Some((tag, now)) = carry {
                    table.carried.note(tag, now);
                }
            }
        }
        self.inner.note_inode_delta(inode_delta);
        if directory_changed {
            // After the writes, before the caller is answered: a search
            // that starts once this returns sees the new epoch and no
            // directory path remembered from before
            // ([`crate::dir_cache`]).
            self.inner.dir_epoch.fetch_add(1, Ordering::AcqRel);
            self.inner.dir_changes.fetch_add(1, Ordering::AcqRel);
        }
        let mut oversized = Vec::new();
        for start in touched {
            if let Some(Slot::Loaded(t)) = self.locked.get(&start).map(|g| &**g) {
                if self.inner.oversized(t) {
                    oversized.push(start);
                }
            }
        }
        let committed = Committed {
            lsn,
            redo,
            changes,
            ..nothing
        };
        Ok((committed, oversized))
    }
}

/// The allocator's view of used SOIDs: the tables (locking them as it goes)
/// plus this transaction's pending inode writes, plus (log-less) the SOIDs
/// freed by operations not yet written back ([`crate::quarantine`]).
impl SoidSpace for Txn<'_> {
    type Error = OpError;

    fn max_used(&mut self, range: SoidRange) -> OpResult<Option<Soid>> {
        let quarantined = self
            .inner
            .logless
            .as_ref()
            .and_then(|ll| ll.quarantined().max_in(range));
        let pending = self
            .inodes
            .iter()
            .filter(|(s, v)| range.contains(*s) && v.is_some())
            .map(|(s, _)| *s)
            .max()
            .max(quarantined);
        // Walk tables from the top of the range down.
        let mut key = range.last;
        loop {
            let (start, _) = self.slot_for(key);
            let table = self.table_for(key)?;
            if let Some(found) = table.max_used(range) {
                // A pending delete of the maximum still counts as used
                // until the transaction commits (conservative).
                return Ok(Some(pending.map_or(found, |p| p.max(found))));
            }
            if start <= range.first {
                return Ok(pending);
            }
            match start.checked_prev() {
                Some(k) => key = k,
                None => return Ok(pending),
            }
        }
    }

    fn min_free(&mut self, range: SoidRange) -> OpResult<Option<Soid>> {
        let mut key = range.first;
        loop {
            let table = self.table_for(key)?;
            let table_last = table.range.last;
            let mut candidate = table.min_free(range);
            while let Some(c) = candidate {
                let quarantined = || {
                    self.inner
                        .logless
                        .as_ref()
                        .is_some_and(|ll| ll.quarantined().contains(c))
                };
                if self.pending_inode(c).is_none() && !quarantined() {
                    return Ok(Some(c));
                }
                let Some(next) = c.checked_next() else { break };
                if next > range.last {
                    break;
                }
                let sub = SoidRange {
                    first: next,
                    last: range.last,
                };
                candidate = self.table_for(key)?.min_free(sub);
            }
            if table_last >= range.last {
                return Ok(None);
            }
            match table_last.checked_next() {
                Some(k) => key = k,
                None => return Ok(None),
            }
        }
    }
}
