//! Member mode, the engine's side: an engine that owns some of the
//! namespace's tables (the vocabulary is [`crate::member`]).
//!
//! - The table map still partitions the SOID space: ranges of tables other
//!   members own are `Slot::Foreign` placeholders, so every lookup still
//!   finds a slot; transactions refuse them (`crate::txn`).
//! - The engine's store is the member's [`PrefixStore`] view of the shared
//!   store (`members/<name>/`): its journal, request ledger and
//!   [`MemberState`] live there; its snapshots too, named by their full
//!   shared-store names so that another member reads them as they are.
//! - No local manifest: the catalogue holds each table's
//!   [`TableManifest`]. Checkpoints commit the manifests that changed
//!   (fenced: the catalogue refuses a table this member no longer owns,
//!   and the engine then stops serving it), then delete the snapshots
//!   those manifests replaced, then trim the journal.
//!
//! # Invariants
//! - `floors[t]` (the *floor* of owned table `t`): every record of this
//!   member's journal that `t` reflects with LSN ≥ the floor is still in
//!   the journal, and none below is missing from its snapshot. The
//!   catalogue's manifest of `t` says `replay: {this member, floor}` once
//!   committed. A table loaded from its snapshot starts at `last_lsn =
//!   floor - 1`, whoever wrote the snapshot (LSNs of other members'
//!   journals mean nothing here).
//! - A snapshot this run wrote that no manifest commits (the commit
//!   failed, the table was given up or split meanwhile) is deleted by the
//!   sweep after a committed checkpoint ([`MemberRun::sweep`]), never
//!   while a commit that may still take effect names it (`doubt`); one an
//!   earlier run wrote, once the catalogue says nothing an earlier run
//!   sent can take effect any more ([`TableCatalog::earlier_runs_void`]).
//! - The journal is trimmed only below every owned table's floor, below
//!   `pinned` (the floors of tables revoked or dropped without a known
//!   commit in this run) and below the catalogue's
//!   [`TableCatalog::journal_floor`] for this member (every manifest,
//!   whoever owns the table, that points into this journal) — so a
//!   failover can replay it, also after this member restarted.
//! - Drops, adds, revokes, merges and checkpoints are serialized by the
//!   checkpoint lock, so a checkpoint never commits the manifest of a
//!   table that is being dropped.
//!
//! # Merges
//! Two neighbouring tables this member holds, both small and both
//! catalogued in their present shape, merge — but only once the
//! catalogue has merged them, never the other way round:
//! 1. under the checkpoint lock (no DROP, ADD, revoke or checkpoint of
//!    either meanwhile) and with both marked `merging` (neither splits),
//!    a snapshot of the merged table is written (both tables as they are
//!    now; the merged floor is the lower of the two, so every record
//!    either snapshot may lack is replayed from the journal);
//! 2. [`TableCatalog::merge`] commits it: the lower table's manifest
//!    becomes the merged one (its range both ranges), the upper table
//!    ceases to exist — in one step the catalogue refuses unless both
//!    tables are still this member's as granted and no move, lend or
//!    borrow names either (on etcd: one transaction comparing both owner
//!    keys' revisions and the absence of `move/`, `home/` and of any
//!    `borrow/` naming them);
//! 3. only then the two slots become one here; refused, nothing changed
//!    here (the snapshot is deleted; a fenced table stops serving, as a
//!    fenced checkpoint leaves it), and the pair is not tried again for
//!    a while (other pairs are).
//!
//! **Why a merge cannot race a move, DROP, BORROW or failover:** every
//! one of those either changes a table's owner key (a handover, a
//! failover's reassignment) or first announces it in a key the merge's
//! step compares (`move/`, `home/`, `borrow/`); and each of them is in
//! turn conditional on the owner key's revision it read — which the merge
//! deletes for the upper table. So of a merge and a move of either table
//! exactly one takes effect in the catalogue: the merge first, a move of
//! the upper table is refused (it no longer exists) and one of the lower
//! table moves the merged table whole; the move first, the merge is
//! refused and both tables stay as they were. Locally, a DROP of either
//! waits for the merge's checkpoint lock and then drops what the
//! catalogue has; the shell, seeing the upper table gone from the map,
//! forgets it — a no-op once it is merged (no DROP, ADD or revoke of it
//! happens afterwards, and its floor is no longer pinned).
//!
//! An outcome the catalogue cannot tell (`Unavailable`) is asked again
//! ([`TableCatalog::merge`] is idempotent: a merge found done is `Ok`);
//! if it stays unknown, both tables stop serving here (their records stay
//! in the journal for whoever owns them next) rather than serve in a
//! shape that may contradict the catalogue. They are named to the owner of
//! the delegation map ([`Engine::take_given_up`]), which loads again
//! whichever of them the catalogue, once it answers, still names this
//! member for — from the manifests it holds, merged or not, replaying this
//! member's own journal — instead of leaving them unserved until the lease
//! is lost.

use super::*;
use crate::member::{
    member_prefix, CatalogChange, CatalogError, JournalPos, MemberConfig, MemberState, PrefixStore,
    TableCatalog, TableManifest, MEMBER_STATE_NAME, ROOT_TABLE_ID,
};
use crate::table::TableId;

/// Member mode's state in a running engine.
pub(crate) struct MemberRun {
    pub(crate) name: String,
    /// Log-less durability ([`crate::member_logless`]); `None`: the
    /// journal is synced as configured.
    pub(crate) redo: Option<crate::member_logless::MemberRedo>,
    /// `members/<name>/`.
    pub(crate) prefix: String,
    pub(crate) catalog: Arc<dyn TableCatalog>,
    /// The whole shared store (other members' journals are read from it).
    shared: Arc<dyn Store>,
    book: Mutex<Book>,
    /// The merge under way (lower, upper): neither splits meanwhile. A
    /// leaf lock.
    merging: Mutex<Option<(TableId, TableId)>>,
    /// Pairs the catalogue refused to merge, when and how often in a row:
    /// not picked again for [`merge_refused_pause`], so that a pair held
    /// back (a table lent away for long) neither keeps every other pair
    /// from merging nor costs a snapshot write every few seconds.
    refused: Mutex<BTreeMap<(TableId, TableId), Refusal>>,
    /// Tables this engine stopped serving on its own while the catalogue
    /// may still name this member for them (a merge whose outcome stayed
    /// unknown): the owner of the delegation map takes them
    /// ([`Engine::take_given_up`]) and loads them again from whatever the
    /// catalogue holds once it answers.
    given_up: Mutex<Vec<TableId>>,
    /// Snapshots of this run named in a commit whose outcome is unknown
    /// (the catalogue did not answer) or handed to the shell by a DROP:
    /// file → the fences of the commits naming it
    /// ([`TableCatalog::last_commit_fence`]; `None`: never known void in
    /// this run — a DROP's, whose handover the shell commits). The sweep
    /// leaves them while a commit naming them may still take effect
    /// (until every fence is void), and a commit replacing one leaves it
    /// to the sweep.
    doubt: Mutex<BTreeMap<String, BTreeSet<Option<u64>>>>,
    /// The first snapshot sequence number of this run: snapshots below it
    /// are earlier runs'.
    first_seq: u64,
    /// The sweep of earlier runs' snapshots: `None` once done; else when
    /// to ask the catalogue again whether it may be done
    /// ([`TableCatalog::earlier_runs_void`]) and the pause after that.
    earlier: Mutex<Option<(std::time::Instant, std::time::Duration)>>,
    /// A commit of this run was applied (the catalogue is asked about
    /// earlier runs only then).
    committed_any: std::sync::atomic::AtomicBool,
}

/// The first pause before the catalogue is asked again whether earlier
/// runs' snapshots may be swept; it doubles up to [`EARLIER_MAX_PAUSE`].
const EARLIER_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_secs(60);
const EARLIER_MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether `book` has table `id` committed with range `range`.
fn catalogued(book: &Book, id: TableId, range: SoidRange) -> bool {
    book.committed.get(&id).is_some_and(|c| c.2 == range) && book.floors.contains_key(&id)
}

/// How often a log-less member syncs its journal: a power loss of its
/// machine loses at most this much of acknowledged work to what its
/// clients must hand back ([`crate::member_logless`]).
const LOGLESS_MEMBER_SYNC: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a pair the catalogue refused to merge once is left alone.
const MERGE_REFUSED_PAUSE: std::time::Duration = std::time::Duration::from_secs(10);

/// A pair's refusals in a row, the last one when.
#[derive(Clone, Copy, Debug)]
struct Refusal {
    at: std::time::Instant,
    times: u32,
}

/// How long a pair refused `times` times in a row is left alone: 10 s,
/// doubling up to 320 s — each attempt writes the merged snapshot before
/// the catalogue answers, so a pair refused for hours (one of its tables
/// lent away) would otherwise cost a snapshot write every 10 s. A pair
/// not refused again within twice its pause starts over at 10 s.
fn merge_refused_pause(times: u32) -> std::time::Duration {
    MERGE_REFUSED_PAUSE * (1u32 << times.clamp(1, 6).saturating_sub(1))
}

/// Two neighbouring tables chosen to merge, as they were when chosen.
struct MergePick {
    lower: TableId,
    upper: TableId,
    lower_start: Soid,
    upper_start: Soid,
    lower_range: SoidRange,
    upper_range: SoidRange,
}

impl MergePick {
    fn range(&self) -> SoidRange {
        SoidRange {
            first: self.lower_range.first,
            last: self.upper_range.last,
        }
    }
}

/// How often a merge whose outcome the catalogue could not tell is asked
/// again (the catalogue settles it: a merge found done is `Ok`), and the
/// pause between.
const MERGE_SETTLE_TRIES: u32 = 20;
const MERGE_SETTLE_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

#[derive(Default)]
struct Book {
    /// Owned table → its floor (module invariants).
    floors: BTreeMap<TableId, Lsn>,
    /// Owned table → (snapshot blob, floor, range) as last committed.
    committed: BTreeMap<TableId, (String, Lsn, SoidRange)>,
    /// The journal keeps records from here on (`None`: nothing pinned).
    pinned: Option<Lsn>,
}

impl Book {
    fn pin(&mut self, lsn: Lsn) {
        self.pinned = Some(self.pinned.map_or(lsn, |p| p.min(lsn)));
    }

    /// Is `file` named by a committed manifest of another table?
    fn file_in_use(&self, file: &str) -> bool {
        self.committed.values().any(|(f, _, _)| f == file)
    }
}

impl MemberRun {
    /// A table just loaded from its snapshot: place it in this journal.
    pub(crate) fn place_loaded(&self, t: &mut Table) {
        if let Some(floor) = self.book.lock().floors.get(&t.id) {
            t.last_lsn = floor.saturating_sub(1);
        }
    }

    /// Table `id`'s snapshot holding every record up to `lsn` was written.
    pub(crate) fn snapshot_written(&self, id: TableId, lsn: Lsn) {
        let mut book = self.book.lock();
        if let Some(f) = book.floors.get_mut(&id) {
            *f = (*f).max(lsn + 1);
        }
    }

    /// Table `child` was split off `parent`: it shares the parent's history.
    pub(crate) fn split(&self, parent: TableId, child: TableId) {
        let mut book = self.book.lock();
        if let Some(f) = book.floors.get(&parent).copied() {
            book.floors.insert(child, f);
        }
    }

    /// Whether table `id`, now with range `range`, was split (or split
    /// off, or opened clean) since this member last committed it: the
    /// catalogue has it in another shape, or not at all. Every table this
    /// member holds has a floor (an ADD sets it, `open_member` sets one for
    /// a clean DROP's manifest too), so no held table escapes the gate.
    pub(crate) fn split_since_commit(&self, id: TableId, range: SoidRange) -> bool {
        let book = self.book.lock();
        debug_assert!(
            book.floors.contains_key(&id),
            "held table {id} has no floor"
        );
        book.committed.get(&id).is_none_or(|c| c.2 != range)
    }

    /// [`TableCatalog::commit`]; an outcome it cannot tell
    /// (`Unavailable`: the transaction may have been applied, its answer
    /// lost, or may still be) puts the change's snapshots in doubt.
    fn commit(&self, change: CatalogChange) -> Result<(), CatalogError> {
        let files: Vec<String> = change.put.iter().map(|m| m.entry.file.clone()).collect();
        let result = self.catalog.commit(&self.name, change);
        if result.is_ok() {
            self.committed_any.store(true, Ordering::Relaxed);
        }
        if matches!(result, Err(CatalogError::Unavailable(_))) {
            let fence = self.catalog.last_commit_fence(&self.name);
            self.in_doubt(files, fence);
        }
        result
    }

    /// `files` may be named by a commit that takes effect later (`fence`:
    /// the one it was planned under; `None`: unknown).
    fn in_doubt(&self, files: impl IntoIterator<Item = String>, fence: Option<u64>) {
        let mut doubt = self.doubt.lock();
        for f in files {
            doubt.entry(f).or_default().insert(fence);
        }
    }

    /// Deletes the snapshots this run wrote that nothing may name any
    /// more: a split's or a checkpoint's whose commit failed, one made
    /// useless by a split while it was written, an ADD's whose commit was
    /// refused, one of a table given up (fenced, or forgotten with its
    /// lease). Safe because, for each one deleted:
    /// - no table held here uses it and no manifest this member committed
    ///   and still holds names it;
    /// - no commit of this member that may still take effect names it:
    ///   commits run under the checkpoint lock (held here), one whose
    ///   outcome was unknown put its files in doubt, kept until the
    ///   catalogue says each of their fences is void (on etcd: a
    ///   transaction requires `member/<me>` on the lease it was planned
    ///   under, and a lease never comes back; and each updated table's
    ///   manifest revision as it was before, so a later commit of the
    ///   same table that applied voids it), a DROP's are kept for the run;
    /// - no manifest in the catalogue names it, read after the above: a
    ///   snapshot of this member's that another member uses (a clean table
    ///   it loaded) is named by that table's manifest for as long as it
    ///   uses it, since only its owner changes the manifest.
    ///
    /// An earlier run's commits and handovers are not tracked: its files
    /// are looked at only once the catalogue says nothing an earlier run
    /// sent can still take effect ([`TableCatalog::earlier_runs_void`],
    /// asked at the first sweep and then after a pause that doubles, so
    /// that the catalogue is read rarely), and then once. REQUIRES: the
    /// checkpoint lock.
    fn sweep(&self, inner: &Inner) {
        let earlier = self.earlier_runs_void();
        let dir = format!("{}tables/", self.prefix);
        let listed = match self.shared.list(&dir) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list this member's snapshots; none swept");
                return;
            }
        };
        let mut keep: BTreeSet<String> = inner
            .tables
            .read()
            .values()
            .filter_map(|s| match &*s.state.lock() {
                Slot::Loaded(t) => t.snapshot_file.clone(),
                Slot::OnDisk(e) => Some(e.file.clone()),
                Slot::Foreign(_) | Slot::Merged => None,
            })
            .collect();
        keep.extend(self.book.lock().committed.values().map(|c| c.0.clone()));
        let doubt = self.doubt.lock().clone();
        let mut void: BTreeMap<u64, bool> = BTreeMap::new();
        let mut is_void = |fence: &Option<u64>| match fence {
            None => false,
            Some(f) => *void
                .entry(*f)
                .or_insert_with(|| self.catalog.fence_void(&self.name, *f).unwrap_or(false)),
        };
        let candidates: Vec<String> = listed
            .into_iter()
            .filter(|n| {
                n.strip_prefix(&self.prefix)
                    .and_then(snapshot_seq)
                    .is_some_and(|seq| seq >= self.first_seq || earlier)
                    && !keep.contains(n)
            })
            .filter(|n| {
                doubt
                    .get(n)
                    .is_none_or(|fences| fences.iter().all(&mut is_void))
            })
            .collect();
        if candidates.is_empty() {
            if earlier {
                *self.earlier.lock() = None;
            }
            return;
        }
        let named = match self.catalog.referenced_files() {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "the catalogue's snapshots are unknown; none swept");
                return;
            }
        };
        if earlier {
            // Done once the candidates are deleted (or found named).
            *self.earlier.lock() = None;
        }
        for f in candidates {
            if named.contains(&f) {
                continue;
            }
            match inner.store.delete(&f) {
                Ok(()) => {
                    tracing::debug!(file = %f, "swept a snapshot nothing names");
                    self.doubt.lock().remove(&f);
                }
                Err(e) => {
                    tracing::warn!(file = %f, error = %e, "cannot delete an unreferenced snapshot")
                }
            }
        }
    }

    /// Whether this sweep looks at earlier runs' snapshots: not done yet,
    /// due, and the catalogue says nothing an earlier run sent can still
    /// take effect (undecided: asked again after a longer pause).
    fn earlier_runs_void(&self) -> bool {
        let mut earlier = self.earlier.lock();
        let Some((due, pause)) = *earlier else {
            return false;
        };
        if !self.committed_any.load(Ordering::Relaxed) {
            return false;
        }
        let now = std::time::Instant::now();
        if now < due {
            return false;
        }
        match self.catalog.earlier_runs_void(&self.name) {
            Ok(true) => true,
            answer => {
                if let Err(e) = answer {
                    tracing::debug!(error = %e, "cannot tell whether earlier runs' snapshots may go");
                }
                *earlier = Some((now + pause, (pause * 2).min(EARLIER_MAX_PAUSE)));
                false
            }
        }
    }

    /// Is table `id` part of the merge under way?
    pub(crate) fn merging(&self, id: TableId) -> bool {
        self.merging.lock().is_some_and(|(a, b)| a == id || b == id)
    }

    /// Member mode's merge of two small neighbours (module doc, "Merges"):
    /// one pair per call; `true` if it merged.
    pub(crate) fn merge_small(&self, inner: &Inner) -> bool {
        if inner.check_alive().is_err() {
            return false;
        }
        let _one_at_a_time = inner.checkpoint_lock.lock();
        let Some(pick) = self.pick_merge(inner) else {
            return false;
        };
        *self.merging.lock() = Some((pick.lower, pick.upper));
        let merged = self.merge_pair(inner, &pick);
        *self.merging.lock() = None;
        if !merged {
            let mut refused = self.refused.lock();
            let r = refused.entry((pick.lower, pick.upper)).or_insert(Refusal {
                at: std::time::Instant::now(),
                times: 0,
            });
            r.at = std::time::Instant::now();
            r.times = r.times.saturating_add(1);
        }
        merged
    }

    /// Two neighbouring tables this member holds, both small, both
    /// catalogued in their present shape (a table split since its last
    /// commit waits for the split's checkpoint). REQUIRES: the checkpoint
    /// lock.
    fn pick_merge(&self, inner: &Inner) -> Option<MergePick> {
        /// A slot's start, and its table, range and size if held here.
        type Seen = (Soid, Option<(TableId, SoidRange, (usize, usize))>);
        let slots: Vec<Seen> = {
            let map = inner.tables.read();
            map.iter()
                .map(|(start, s)| {
                    let st = s.state.lock();
                    let held = slot_table(&st)
                        .zip(slot_range(&st))
                        .map(|(id, r)| (id, r, slot_size(&st)));
                    (*start, held)
                })
                .collect()
        };
        let refused: BTreeSet<(TableId, TableId)> = {
            let mut refused = self.refused.lock();
            refused.retain(|_, r| r.at.elapsed() < 2 * merge_refused_pause(r.times));
            refused
                .iter()
                .filter(|(_, r)| r.at.elapsed() < merge_refused_pause(r.times))
                .map(|(pair, _)| *pair)
                .collect()
        };
        let book = self.book.lock();
        let catalogued = |id: TableId, r: SoidRange| catalogued(&book, id, r);
        slots.windows(2).find_map(|pair| {
            let (la, Some((a, ra, na))) = pair[0] else {
                return None;
            };
            let (lb, Some((b, rb, nb))) = pair[1] else {
                return None;
            };
            let pick = ra.last.checked_next() == Some(rb.first)
                && !refused.contains(&(a, b))
                && inner.mergeable(na, nb)
                && catalogued(a, ra)
                && catalogued(b, rb);
            pick.then_some(MergePick {
                lower: a,
                upper: b,
                lower_start: la,
                upper_start: lb,
                lower_range: ra,
                upper_range: rb,
            })
        })
    }

    /// Writes the merged snapshot, asks the catalogue, and merges here
    /// only if it said yes. REQUIRES: the checkpoint lock, `merging` set.
    fn merge_pair(&self, inner: &Inner, pick: &MergePick) -> bool {
        // Both tables as they are now (each a consistent state; records
        // after it are in the journal from the merged floor on).
        let taken = {
            let map = inner.tables.read();
            let take = |start: Soid, id: TableId, range: SoidRange| {
                let slot = map.get(&start)?;
                let mut g = slot.state.lock();
                let t = inner.ensure_loaded(&mut g).ok()?;
                (t.id == id && t.range == range).then(|| (t.encode_snapshot(), t.last_lsn))
            };
            take(pick.lower_start, pick.lower, pick.lower_range).zip(take(
                pick.upper_start,
                pick.upper,
                pick.upper_range,
            ))
        };
        let Some(((lower_bytes, lower_lsn), (upper_bytes, upper_lsn))) = taken else {
            return false;
        };
        // WAL rule: the journal holds everything the snapshot holds.
        if inner.journal.wait_synced(lower_lsn.max(upper_lsn)).is_err() {
            return false;
        }
        let merged = (|| -> Result<Table, String> {
            let mut lower =
                Table::from_snapshot(decode_snapshot(&lower_bytes)?).map_err(|e| e.to_string())?;
            let upper =
                Table::from_snapshot(decode_snapshot(&upper_bytes)?).map_err(|e| e.to_string())?;
            lower.merge(upper);
            Ok(lower)
        })();
        let merged = match merged {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(lower = pick.lower, upper = pick.upper, error = %e, "a merge's snapshot could not be built; no merge");
                return false;
            }
        };
        let file = inner.snapshot_name(inner.next_snapshot_seq.fetch_add(1, Ordering::Relaxed));
        if let Err(e) = inner.store.put_blob(&file, &merged.encode_snapshot()) {
            tracing::warn!(file = %file, error = %e, "a merge's snapshot could not be written; no merge");
            return false;
        }
        inner
            .stats
            .snapshots_written
            .fetch_add(1, Ordering::Relaxed);
        let floor = {
            let book = self.book.lock();
            match (book.floors.get(&pick.lower), book.floors.get(&pick.upper)) {
                (Some(a), Some(b)) => (*a).min(*b),
                _ => {
                    drop(book);
                    delete_unreferenced(inner, Some(file));
                    return false;
                }
            }
        };
        let entry = TableEntry {
            id: pick.lower,
            range: pick.range(),
            file: file.clone(),
            lsn: merged.last_lsn,
            inodes: merged.inode_count() as u64,
        };
        let manifest = self.manifest(inner, entry, self.here(floor));
        let mut answer = self.catalog.merge(&self.name, manifest.clone(), pick.upper);
        for _ in 1..MERGE_SETTLE_TRIES {
            if !matches!(answer, Err(CatalogError::Unavailable(_))) {
                break;
            }
            std::thread::sleep(MERGE_SETTLE_PAUSE);
            answer = self.catalog.merge(&self.name, manifest.clone(), pick.upper);
        }
        match answer {
            Ok(()) => {
                self.merge_locally(inner, pick, file, floor);
                true
            }
            Err(CatalogError::NotOwner { table, .. }) => {
                // Fencing (R2), as a checkpoint meets it: that table is
                // another's; it stops serving here.
                delete_unreferenced(inner, Some(file));
                tracing::warn!(table, "a merge found a table fenced; it stops serving here");
                if table == pick.lower || table == pick.upper {
                    revoke(inner, self, table);
                }
                false
            }
            Err(CatalogError::Unavailable(what)) => {
                // Not known whether the catalogue merged them: served as
                // two tables here they could contradict it (a checkpoint
                // would commit the upper one's range again), served as one
                // likewise. Neither serves; their records stay in the
                // journal (pinned), and whoever owns them next replays
                // them from the manifests the catalogue holds.
                tracing::error!(lower = pick.lower, upper = pick.upper, error = %what, "a merge's outcome is unknown; both tables stop serving here until the catalogue answers");
                revoke(inner, self, pick.lower);
                revoke(inner, self, pick.upper);
                self.given_up.lock().extend([pick.lower, pick.upper]);
                self.in_doubt([file], None);
                false
            }
            Err(e) => {
                tracing::debug!(lower = pick.lower, upper = pick.upper, error = %e, "merge refused; both tables serve on");
                delete_unreferenced(inner, Some(file));
                false
            }
        }
    }

    /// The catalogue merged `pick`: the same here. The upper table's
    /// slot goes (operations wait on the map lock, then find the lower
    /// one), its floor and last commit go, the lower's become the merged
    /// manifest's, and the snapshots both replaced are deleted.
    /// REQUIRES: the checkpoint lock (no ADD, DROP or revoke changed
    /// either table since it was picked; `merging` kept splits away).
    fn merge_locally(&self, inner: &Inner, pick: &MergePick, file: String, floor: Lsn) {
        let merged = {
            let mut map = inner.tables.write();
            let slots = map
                .get(&pick.lower_start)
                .cloned()
                .zip(map.get(&pick.upper_start).cloned());
            let done = slots.is_some_and(|(sa, sb)| {
                let mut ga = sa.state.lock();
                let mut gb = sb.state.lock();
                let fits = |g: &mut MutexGuard<'_, Slot>, id: TableId, r: SoidRange| {
                    inner
                        .ensure_loaded(g)
                        .is_ok_and(|t| t.id == id && t.range == r)
                };
                if !fits(&mut ga, pick.lower, pick.lower_range)
                    || !fits(&mut gb, pick.upper, pick.upper_range)
                {
                    return false;
                }
                let upper = std::mem::replace(&mut *gb, Slot::Merged);
                if let (Slot::Loaded(lower), Slot::Loaded(upper)) = (&mut *ga, upper) {
                    lower.merge(*upper);
                }
                true
            });
            if done {
                map.remove(&pick.upper_start);
            }
            done
        };
        if !merged {
            // Cannot happen under the checkpoint lock, short of a table
            // that no longer loads; the catalogue has the merged table,
            // so neither half serves here (its records stay pinned).
            tracing::error!(
                lower = pick.lower,
                upper = pick.upper,
                "merged in the catalogue but not here; both tables stop serving"
            );
            revoke(inner, self, pick.lower);
            revoke(inner, self, pick.upper);
            return;
        }
        forget_derived(inner);
        inner.stats.merges.fetch_add(1, Ordering::Relaxed);
        let replaced = {
            let mut book = self.book.lock();
            book.floors.remove(&pick.upper);
            book.floors.insert(pick.lower, floor);
            let mut old: Vec<String> = [pick.lower, pick.upper]
                .iter()
                .filter_map(|id| book.committed.remove(id).map(|c| c.0))
                .collect();
            book.committed
                .insert(pick.lower, (file.clone(), floor, pick.range()));
            old.retain(|f| *f != file && !book.file_in_use(f));
            old
        };
        for f in replaced {
            if let Err(e) = inner.store.delete(&f) {
                tracing::warn!(file = %f, error = %e, "cannot delete a replaced snapshot");
            }
        }
        tracing::info!(
            lower = pick.lower,
            upper = pick.upper,
            "merged two small tables (committed through the catalogue first)"
        );
    }

    fn manifest(
        &self,
        inner: &Inner,
        entry: TableEntry,
        replay: Option<JournalPos>,
    ) -> TableManifest {
        TableManifest {
            entry,
            replay,
            layout: inner.config.layout,
            high_water: inner.high_water.lock().clone(),
        }
    }

    /// A table with no record newer than its snapshot needs none of the
    /// journal: its floor may move up to `fallback` (the journal's next
    /// LSN read before the table was seen clean — a record below it that
    /// touches the table was applied under the table's lock before that,
    /// and would have left it dirty). Done only for floors below the
    /// second segment's start, i.e. when they keep a segment from being
    /// trimmed, so a clean table's manifest is recommitted once per
    /// segment, not at every checkpoint.
    fn advance_clean_floors(&self, inner: &Inner, fallback: Lsn) {
        let Some(blocking) = inner.journal.second_segment_start() else {
            return;
        };
        let clean: Vec<TableId> = {
            let map = inner.tables.read();
            map.values()
                .filter_map(|s| match &*s.state.lock() {
                    Slot::Loaded(t) if t.first_dirty_lsn.is_none() => Some(t.id),
                    Slot::OnDisk(e) => Some(e.id),
                    _ => None,
                })
                .collect()
        };
        let mut book = self.book.lock();
        for id in clean {
            if let Some(f) = book.floors.get_mut(&id) {
                if *f < blocking && *f < fallback {
                    *f = fallback;
                }
            }
        }
    }

    fn here(&self, from: Lsn) -> Option<JournalPos> {
        Some(JournalPos {
            member: self.name.clone(),
            from,
        })
    }

    /// The member part of a checkpoint, after the snapshots: moves the
    /// floors of clean tables that hold the journal back, commits the
    /// manifests that changed, deletes the snapshots they replaced, writes
    /// the ledger and the member state, trims the journal. `fallback`: the
    /// journal's next LSN when the checkpoint began. REQUIRES: the
    /// checkpoint lock.
    pub(crate) fn checkpoint_commit(
        &self,
        inner: &Inner,
        entries: Vec<TableEntry>,
        fallback: Lsn,
    ) -> Result<(), EngineError> {
        self.advance_clean_floors(inner, fallback);
        let mut put = Vec::new();
        {
            let book = self.book.lock();
            for e in entries {
                let Some(&floor) = book.floors.get(&e.id) else {
                    tracing::error!(
                        table = e.id,
                        "an owned table without a floor; not committed"
                    );
                    continue;
                };
                let now = (e.file.clone(), floor, e.range);
                if book.committed.get(&e.id) != Some(&now) {
                    put.push(e);
                }
            }
        }
        let mut fenced = Vec::new();
        loop {
            if put.is_empty() {
                break;
            }
            let change = CatalogChange {
                put: put
                    .iter()
                    .map(|e| {
                        let floor = self.book.lock().floors.get(&e.id).copied().unwrap_or(1);
                        self.manifest(inner, e.clone(), self.here(floor))
                    })
                    .collect(),
                remove: Vec::new(),
            };
            let committed: Vec<(TableId, String, Lsn, SoidRange)> = change
                .put
                .iter()
                .map(|m| {
                    let from = m.replay.as_ref().map_or(1, |p| p.from);
                    (m.entry.id, m.entry.file.clone(), from, m.entry.range)
                })
                .collect();
            match self.commit(change) {
                Ok(()) => {
                    let mut book = self.book.lock();
                    let mut replaced = Vec::new();
                    for (id, file, from, range) in committed {
                        if let Some((old, _, _)) =
                            book.committed.insert(id, (file.clone(), from, range))
                        {
                            if old != file {
                                replaced.push(old);
                            }
                        }
                    }
                    replaced.retain(|f| !book.file_in_use(f));
                    drop(book);
                    // One a commit in doubt named is the sweep's.
                    let doubt = self.doubt.lock();
                    replaced.retain(|f| !doubt.contains_key(f));
                    drop(doubt);
                    for f in replaced {
                        if let Err(e) = inner.store.delete(&f) {
                            tracing::warn!(file = %f, error = %e, "cannot delete a replaced snapshot");
                        }
                    }
                    break;
                }
                Err(CatalogError::NotOwner { table, .. }) if !fenced.contains(&table) => {
                    // Fencing (R2): the catalogue says the table is no
                    // longer ours. Stop serving it and commit the rest.
                    tracing::warn!(table, "the catalogue fenced a table; it stops serving here");
                    // With the tables split off it since its last commit
                    // (`revoke_with_split_off`).
                    for gone in revoke_with_split_off(inner, self, table) {
                        fenced.push(gone);
                        put.retain(|e| e.id != gone);
                    }
                }
                Err(CatalogError::Unavailable(what) | CatalogError::Stale(what)) => {
                    // Nothing is lost: the journal is not trimmed, the next
                    // checkpoint commits again.
                    tracing::warn!(error = %what, "catalogue unavailable; checkpoint not committed");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.sweep(inner);
        let ledger = {
            let mut l = inner.requests.lock();
            l.dirty().then(|| l.encode())
        };
        if let Some(bytes) = ledger {
            inner
                .store
                .put_blob(LEDGER_NAME, &bytes)
                .map_err(inner.io(LEDGER_NAME))?;
        }
        let next_lsn = inner.journal.next_lsn();
        // The state names no LSN the disk may lack: a restart starts its
        // journal there, and the completion of a log-less member's
        // journal reads it from there (`crate::member_logless`), so a
        // record below it that a power loss took must not look durable.
        inner
            .journal
            .wait_synced(next_lsn.saturating_sub(1))
            .map_err(|_| EngineError::Stopped)?;
        let state = MemberState {
            next_lsn,
            high_water: inner.high_water.lock().clone(),
        };
        inner
            .store
            .put_blob(MEMBER_STATE_NAME, &state.encode())
            .map_err(inner.io(MEMBER_STATE_NAME))?;
        // Records another member may replay (a table taken from this one
        // while its manifest pointed here) stay too.
        let elsewhere = match self.catalog.journal_floor(&self.name) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "catalogue unavailable; the journal is not trimmed");
                return Ok(());
            }
        };
        let keep_from = {
            let book = self.book.lock();
            book.floors
                .values()
                .copied()
                .chain(book.pinned)
                .chain(elsewhere)
                .min()
                .unwrap_or(next_lsn)
                .min(next_lsn)
        };
        inner.journal.trim_below(keep_from)?;
        Ok(())
    }
}

/// How many of completion `c`'s entries an earlier attempt to apply it
/// appended to member `m`'s journal, which now ends at `opened`: the
/// records after the decided end, each exactly the next entry's record
/// (an attempt appends them in order and may stop anywhere: a full disk,
/// a crash). `None`: the journal holds anything else after the decided
/// end, or ends before it.
fn appended_before(
    m: &MemberRun,
    c: &crate::member_logless::Completion,
    opened: Lsn,
) -> Result<Option<usize>, EngineError> {
    let Some(extra) = opened.checked_sub(c.through) else {
        return Ok(None);
    };
    if extra == 0 {
        return Ok(Some(0));
    }
    if extra > c.entries.len() as u64 {
        return Ok(None);
    }
    let view = PrefixStore::read_only(Arc::clone(&m.shared), member_prefix(&m.name));
    let mut matching = 0usize;
    crate::journal::replay(&view, c.through + 1, |lsn, record| {
        let i = (lsn - c.through - 1) as usize;
        let same = c.entries.get(i).is_some_and(|e| {
            crate::record::encode_tagged_record(e.tag.as_ref(), &e.mutations) == record
        });
        if same && i == matching {
            matching += 1;
        }
        Ok(())
    })?;
    Ok((matching as u64 == extra).then_some(matching))
}

/// The range a slot covers (`None`: merged away).
fn slot_range(slot: &Slot) -> Option<SoidRange> {
    match slot {
        Slot::Loaded(t) => Some(t.range),
        Slot::OnDisk(e) => Some(e.range),
        Slot::Foreign(r) => Some(*r),
        Slot::Merged => None,
    }
}

/// One served table's counters for the cluster's balancer
/// ([`Engine::table_counters`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableCounters {
    pub table: TableId,
    /// Operations that touched it since `since`.
    pub ops: u64,
    /// When its slot was made here (an ADD, a split or a merge starts the
    /// count again).
    pub since: std::time::Instant,
    pub inodes: u64,
}

fn slot_table(slot: &Slot) -> Option<TableId> {
    match slot {
        Slot::Loaded(t) => Some(t.id),
        Slot::OnDisk(e) => Some(e.id),
        Slot::Foreign(_) | Slot::Merged => None,
    }
}

fn table_inodes(slot: &Slot) -> i64 {
    match slot {
        Slot::Loaded(t) => t.inode_count() as i64,
        Slot::OnDisk(e) => e.inodes as i64,
        Slot::Foreign(_) | Slot::Merged => 0,
    }
}

/// Puts `slot` at `range` in the map, replacing the foreign placeholders
/// there (cut to fit). Refuses (changing nothing) if part of `range` is a
/// table this member holds.
fn carve(map: &mut TableMap, range: SoidRange, slot: Slot) -> Result<(), EngineError> {
    let mut overlapping = Vec::new();
    for (start, s) in map.range(..=range.last).rev() {
        let guard = s.state.lock();
        let Some(r) = slot_range(&guard) else {
            continue;
        };
        if r.last < range.first {
            break;
        }
        match &*guard {
            Slot::Foreign(_) => overlapping.push((*start, r)),
            other => {
                return Err(EngineError::Member(format!(
                    "the range {range:?} overlaps table {} this member holds",
                    slot_table(other).unwrap_or(0)
                )))
            }
        }
    }
    for (start, r) in overlapping {
        map.remove(&start);
        if r.first < range.first {
            if let Some(last) = range.first.checked_prev() {
                map.insert(
                    r.first,
                    TableSlot::new(Slot::Foreign(SoidRange {
                        first: r.first,
                        last,
                    })),
                );
            }
        }
        if r.last > range.last {
            if let Some(first) = range.last.checked_next() {
                map.insert(
                    first,
                    TableSlot::new(Slot::Foreign(SoidRange {
                        first,
                        last: r.last,
                    })),
                );
            }
        }
    }
    map.insert(range.first, TableSlot::new(slot));
    Ok(())
}

/// Takes table `id` out of the map (a foreign placeholder in its place)
/// and returns what its slot held. `None`: not held here.
fn take_out(inner: &Inner, id: TableId) -> Option<Slot> {
    let map = inner.tables.write();
    let slot = map
        .values()
        .find(|s| slot_table(&s.state.lock()) == Some(id))?;
    let mut guard = slot.state.lock();
    let range = slot_range(&guard)?;
    let old = std::mem::replace(&mut *guard, Slot::Foreign(range));
    drop(guard);
    drop(map);
    inner.note_inode_delta(-table_inodes(&old));
    forget_derived(inner);
    Some(old)
}

/// Search caches that summed or walked the tables held: a table came or
/// went, so none of them is trusted.
fn forget_derived(inner: &Inner) {
    inner.dir_epoch.fetch_add(1, Ordering::AcqRel);
    *inner.summed.lock() = None;
}

/// Stops serving `id` without writing anything; its journal records stay.
fn revoke(inner: &Inner, m: &MemberRun, id: TableId) -> bool {
    let held = take_out(inner, id).is_some();
    let mut book = m.book.lock();
    if let Some(floor) = book.floors.remove(&id) {
        book.pin(floor);
    }
    book.committed.remove(&id);
    held
}

/// Stops serving `id` like [`revoke`], and with it every table split off
/// it since its last commit (held here, never committed, inside `id`'s
/// committed range): for the cluster such a table is part of `id` — whoever
/// loads `id` next loads its whole committed range, replaying this
/// journal — so committed alone later (a new table is fenced only by its
/// number being unused) it would overlap `id`'s range in the catalogue and
/// serve SOIDs another server serves (issue 20: a split whose commit
/// failed, then the lease lost). Returns the tables revoked, `id` first;
/// empty if `id` was not held. REQUIRES: the checkpoint lock.
fn revoke_with_split_off(inner: &Inner, m: &MemberRun, id: TableId) -> Vec<TableId> {
    let parent = m.book.lock().committed.get(&id).map(|c| c.2);
    let held = revoke(inner, m, id);
    let mut gone = Vec::new();
    if held {
        gone.push(id);
    }
    let Some(parent) = parent else {
        return gone;
    };
    let children: Vec<TableId> = {
        let shapes: Vec<(TableId, SoidRange)> = inner
            .tables
            .read()
            .values()
            .filter_map(|s| {
                let st = s.state.lock();
                Some((slot_table(&st)?, slot_range(&st)?))
            })
            .collect();
        let book = m.book.lock();
        shapes
            .into_iter()
            .filter(|(t, r)| {
                !book.committed.contains_key(t) && r.first >= parent.first && r.last <= parent.last
            })
            .map(|(t, _)| t)
            .collect()
    };
    for child in children {
        tracing::warn!(
            table = child,
            parent = id,
            "a table split off one no longer served here stops serving too"
        );
        revoke(inner, m, child);
        gone.push(child);
    }
    gone
}

/// Undoes [`take_out`] of table `id`: `old`, what its slot held, goes back
/// in place of the foreign placeholder left there (the same slot, so
/// operations waiting on it go on), its floor and last commit untouched.
/// REQUIRES: the checkpoint lock, held since the `take_out` (no ADD or
/// revoke changed the map meanwhile; splits do not touch a placeholder).
fn put_back(inner: &Inner, m: &MemberRun, id: TableId, old: Slot) {
    let Some(range) = slot_range(&old) else {
        return;
    };
    let inodes = table_inodes(&old);
    let restored = {
        let mut map = inner.tables.write();
        let placeholder = map
            .get(&range.first)
            .filter(|s| matches!(&*s.state.lock(), Slot::Foreign(r) if *r == range))
            .cloned();
        match placeholder {
            Some(slot) => {
                *slot.state.lock() = old;
                Ok(())
            }
            None => carve(&mut map, range, old),
        }
    };
    match restored {
        Ok(()) => {
            inner.note_inode_delta(inodes);
            forget_derived(inner);
        }
        Err(e) => {
            // Cannot happen under the checkpoint lock; if it did, the table
            // is left as a revoked one: its records stay in the journal.
            tracing::error!(table = id, error = %e, "DROP: the table could not be put back; it is left to failover");
            let mut book = m.book.lock();
            if let Some(floor) = book.floors.remove(&id) {
                book.pin(floor);
            }
            book.committed.remove(&id);
        }
    }
}

/// The final snapshot of table `id`, just taken out as `old`: the one it
/// has if it is clean, else a new one (durable once this returns; its
/// name is the second value, to delete if the DROP does not commit it).
fn final_snapshot(
    inner: &Inner,
    id: TableId,
    old: &Slot,
) -> Result<(TableEntry, Option<String>), EngineError> {
    match old {
        Slot::OnDisk(e) => Ok((e.clone(), None)),
        Slot::Loaded(t) if !t.is_dirty() && t.snapshot_file.is_some() => t
            .manifest_entry()
            .map(|e| (e, None))
            .ok_or(EngineError::Stopped),
        Slot::Loaded(t) => {
            inner
                .journal
                .wait_synced(t.last_lsn)
                .map_err(|_| EngineError::Stopped)?;
            let file = inner.snapshot_name(inner.next_snapshot_seq.fetch_add(1, Ordering::Relaxed));
            inner
                .store
                .put_blob(&file, &t.encode_snapshot())
                .map_err(inner.io(&file))?;
            inner
                .stats
                .snapshots_written
                .fetch_add(1, Ordering::Relaxed);
            let entry = TableEntry {
                id: t.id,
                range: t.range,
                file: file.clone(),
                lsn: t.last_lsn,
                inodes: t.inode_count() as u64,
            };
            Ok((entry, Some(file)))
        }
        Slot::Foreign(_) | Slot::Merged => {
            Err(EngineError::Member(format!("table {id} is not held here")))
        }
    }
}

/// Whether a table held here is not in the catalogue as it is now: one
/// never committed (split off since the last checkpoint) or committed
/// with another range (split or merged since). A DROP commits those
/// first (see [`Engine::drop_table`]).
fn uncatalogued_shapes(inner: &Inner, m: &MemberRun) -> bool {
    let held: Vec<(TableId, SoidRange)> = inner
        .tables
        .read()
        .values()
        .filter_map(|s| {
            let st = s.state.lock();
            Some((slot_table(&st)?, slot_range(&st)?))
        })
        .collect();
    let book = m.book.lock();
    held.iter()
        .any(|(id, range)| book.committed.get(id).is_none_or(|c| c.2 != *range))
}

/// Deletes a snapshot a DROP wrote but did not commit (nothing names it).
fn delete_unreferenced(inner: &Inner, file: Option<String>) {
    if let Some(f) = file {
        if let Err(e) = inner.store.delete(&f) {
            tracing::warn!(file = %f, error = %e, "cannot delete an uncommitted snapshot");
        }
    }
}

impl Engine {
    /// Opens a cluster member on the shared `store`: it serves the tables
    /// `member.catalog` says it owns (replaying its own journal, and —
    /// for a table whose manifest points into another member's journal —
    /// that one: failover). The first member of an empty catalogue
    /// creates the root table. Log-less durability is refused in member
    /// mode. Small neighbouring tables merge only through the catalogue
    /// (module doc, "Merges").
    pub fn open_member(
        store: Arc<dyn Store>,
        mut config: EngineConfig,
        member: MemberConfig,
    ) -> Result<Engine, EngineError> {
        config.layout.validate()?;
        let name = member.name.clone();
        check_member_name(&name)?;
        let prefix = member_prefix(&name);
        let view: Arc<dyn Store> = Arc::new(PrefixStore::new(Arc::clone(&store), prefix.clone()));
        // Log-less on a cluster: the member's journal, synced in the
        // background, plus redo entries for the clients to keep
        // (`crate::member_logless`); not the single server's journal-less
        // engine.
        let redo = match config.logless.take() {
            None => None,
            Some(ll) => {
                if config.journal.mode == SyncMode::Fsync {
                    config.journal.mode = SyncMode::Background(LOGLESS_MEMBER_SYNC);
                }
                Some(crate::member_logless::MemberRedo::open(&*view, &ll)?)
            }
        };
        let mut state = match view
            .get_blob(MEMBER_STATE_NAME)
            .map_err(io_error(&*view, MEMBER_STATE_NAME))?
        {
            Some(b) => MemberState::decode(&b).map_err(|what| EngineError::Corrupt {
                file: view.describe(MEMBER_STATE_NAME),
                what,
            })?,
            None => MemberState::default(),
        };
        if let Some(r) = &redo {
            if let Some(through) = cut_after_completion(&*view, &name, r)? {
                // Nothing of this journal after the decided end counts;
                // the crashed run's next records follow it.
                state.next_lsn = state.next_lsn.min(through + 1);
            }
        }
        let tables_prefix = format!("{prefix}tables/");
        let mut next_snapshot_seq = store
            .list(&tables_prefix)
            .map_err(io_error(&*store, &tables_prefix))?
            .iter()
            .filter_map(|n| snapshot_seq(n.strip_prefix(&prefix)?))
            .max()
            .unwrap_or(0)
            + 1;
        let first_seq = next_snapshot_seq;
        let catalog = Arc::clone(&member.catalog);
        let mut owned = catalog.tables(&name)?;
        if owned.is_empty() && catalog.next_table_id()? == ROOT_TABLE_ID {
            // The first member of an empty catalogue: the root table.
            let table = root_table(&config);
            let file = format!("{prefix}{}", snapshot_name(next_snapshot_seq));
            next_snapshot_seq += 1;
            store
                .put_blob(&file, &table.encode_snapshot())
                .map_err(io_error(&*store, &file))?;
            let m = TableManifest {
                entry: TableEntry {
                    id: ROOT_TABLE_ID,
                    range: SoidRange::ALL,
                    file,
                    lsn: 0,
                    inodes: 1,
                },
                replay: Some(JournalPos {
                    member: name.clone(),
                    from: state.next_lsn.max(1),
                }),
                layout: config.layout,
                high_water: GlobalHighWater::default(),
            };
            catalog.commit(
                &name,
                CatalogChange {
                    put: vec![m.clone()],
                    remove: Vec::new(),
                },
            )?;
            owned.push(m);
        }
        if let Some(m) = owned.first() {
            config.layout = m.layout;
        }
        if let Some(m) = owned.iter().find(|m| m.layout != config.layout) {
            return Err(EngineError::Member(format!(
                "table {} has another SOID layout than the others",
                m.entry.id
            )));
        }
        let mut high_water = state.high_water.clone();
        for m in &owned {
            high_water.merge_max(&m.high_water);
        }
        // Tables whose replay is in this journal (or none) open here; the
        // rest are failovers, added once the engine runs.
        let (mine, others): (Vec<TableManifest>, Vec<TableManifest>) = owned
            .into_iter()
            .partition(|m| m.replay.as_ref().is_none_or(|p| p.member == name));
        let mut floors: BTreeMap<TableId, Lsn> = BTreeMap::new();
        let mut committed = BTreeMap::new();
        for m in &mine {
            if let Some(p) = &m.replay {
                floors.insert(m.entry.id, p.from);
                committed.insert(m.entry.id, (m.entry.file.clone(), p.from, m.entry.range));
            }
        }
        let mut map: TableMap = BTreeMap::new();
        map.insert(
            SoidRange::ALL.first,
            TableSlot::new(Slot::Foreign(SoidRange::ALL)),
        );
        for m in &mine {
            carve(&mut map, m.entry.range, Slot::OnDisk(m.entry.clone()))?;
        }
        let from = floors
            .values()
            .copied()
            .min()
            .unwrap_or(state.next_lsn.max(1))
            .min(state.next_lsn.max(1));
        let mut tags = Vec::new();
        let outcome = replay_journal_from(
            &*view,
            from,
            Some(&floors),
            &map,
            &mut high_water,
            &mut tags,
        )?;
        let mut ledger = read_ledger(&*view)?;
        for t in &tags {
            ledger.note(&t.id);
        }
        let recovered = Recovered::from_ledger(&ledger, tags);
        let next_lsn = outcome
            .next_lsn
            .max(state.next_lsn)
            .max(floors.values().copied().max().unwrap_or(1));
        // Clean tables (a DROP's final manifest) start here.
        for m in &mine {
            floors.entry(m.entry.id).or_insert(next_lsn);
        }
        let journal = Journal::start(
            Arc::clone(&view),
            config.journal.clone(),
            next_lsn,
            outcome.segments.clone(),
        )?;
        if let Some(r) = &redo {
            r.opened_through.store(next_lsn - 1, Ordering::Relaxed);
        }
        let flush_interval = config.flush_interval;
        let inner = Arc::new(Inner {
            config,
            store: view,
            inode_count: AtomicI64::new(count_inodes(&map)),
            tables: RwLock::new(map),
            journal,
            high_water: Mutex::new(high_water),
            next_table_id: AtomicU64::new(0),
            next_snapshot_seq: AtomicU64::new(next_snapshot_seq),
            checkpoint_lock: Mutex::new(()),
            epoch: AtomicU64::new(1),
            journal_bytes_at_checkpoint: AtomicU64::new(0),
            stop: StopState::default(),
            stats: Counters::default(),
            logless: None,
            track_changes: AtomicBool::new(false),
            dir_epoch: AtomicU64::new(1),
            dir_changes: AtomicU64::new(1),
            dir_forgets: AtomicU64::new(0),
            dir_cache: RwLock::new(Default::default()),
            summed: Mutex::new(None),
            requests: Mutex::new(ledger),
            recovered: Mutex::new(Some(recovered)),
            carried_sink: Mutex::new(None),
            member: Some(MemberRun {
                name,
                redo,
                prefix,
                catalog,
                shared: store,
                book: Mutex::new(Book {
                    floors,
                    committed,
                    pinned: None,
                }),
                merging: Mutex::new(None),
                refused: Mutex::new(BTreeMap::new()),
                given_up: Mutex::new(Vec::new()),
                doubt: Mutex::new(BTreeMap::new()),
                first_seq,
                earlier: Mutex::new(Some((std::time::Instant::now(), EARLIER_FIRST_PAUSE))),
                committed_any: std::sync::atomic::AtomicBool::new(false),
            }),
        });
        let engine = Engine {
            inner: Arc::clone(&inner),
            flusher: Arc::new(Flusher::default()),
            request: None,
        };
        engine.add_tables(&others)?;
        inner.split_oversized();
        // Commits the manifests of tables that came clean (their replay
        // now points here) and writes the member state.
        inner.checkpoint(&|_| false)?;
        if let Some(interval) = flush_interval {
            engine.start_flusher(interval)?;
        }
        Ok(engine)
    }

    /// [`Engine::open_member`] on a local directory shared by the members
    /// (created if missing). Every member writes only under its own
    /// `members/<name>/`, which it locks (`EngineError::InUse` if another
    /// engine runs as that member).
    pub fn open_member_dir(
        path: impl AsRef<Path>,
        config: EngineConfig,
        member: MemberConfig,
    ) -> Result<Engine, EngineError> {
        let path = path.as_ref();
        check_member_name(&member.name)?;
        let store = LocalDirStore::open_shared(path, &member.name).map_err(|source| {
            if source.kind() == std::io::ErrorKind::WouldBlock {
                EngineError::InUse {
                    dir: path
                        .join("members")
                        .join(&member.name)
                        .display()
                        .to_string(),
                }
            } else {
                EngineError::Io {
                    file: path.display().to_string(),
                    source,
                }
            }
        })?;
        Engine::open_member(Arc::new(store), config, member)
    }

    /// Member mode: this member's name (`None`: a single server).
    pub fn member_name(&self) -> Option<&str> {
        self.inner.member.as_ref().map(|m| m.name.as_str())
    }

    /// The tables this engine serves, by SOID order (a single server: all).
    pub fn owned_tables(&self) -> Vec<TableId> {
        let map = self.inner.tables.read();
        map.values()
            .filter_map(|s| slot_table(&s.state.lock()))
            .collect()
    }

    /// Per table this engine serves: how many operations touched it
    /// since its slot was made (a split, merge or ADD starts it again at
    /// 0). The cluster's balancer turns deltas of these into rates.
    pub fn table_ops(&self) -> Vec<(TableId, u64)> {
        let map = self.inner.tables.read();
        map.values()
            .filter_map(|s| {
                let id = slot_table(&s.state.lock())?;
                Some((id, s.ops.load(Ordering::Relaxed)))
            })
            .collect()
    }

    /// Per table this engine serves, what the cluster's balancer weighs
    /// it by ([`TableCounters`]): its operation counter, when that counter
    /// started (the slot was made: ADD, split or merge), and its inodes —
    /// a loaded table's own count, or the one its last write-back recorded
    /// (no table is loaded for this).
    pub fn table_counters(&self) -> Vec<TableCounters> {
        let map = self.inner.tables.read();
        map.values()
            .filter_map(|s| {
                let slot = s.state.lock();
                Some(TableCounters {
                    table: slot_table(&slot)?,
                    ops: s.ops.load(Ordering::Relaxed),
                    since: s.made,
                    inodes: u64::try_from(table_inodes(&slot)).unwrap_or(0),
                })
            })
            .collect()
    }

    /// The table this engine serves whose range holds `soid` (`None`:
    /// another member's).
    pub fn table_holding(&self, soid: Soid) -> Option<TableId> {
        let map = self.inner.tables.read();
        let (_, slot) = map.range(..=soid).next_back()?;
        let guard = slot.state.lock();
        slot_table(&guard)
    }

    /// DROP (member mode): lets running operations on table `id` finish,
    /// refuses later ones (`WrongServer`), writes its snapshot if it has
    /// changes (durable once this returns), commits its final manifest
    /// (`replay: None`) through the catalogue and returns it, for the
    /// member that adds the table next.
    ///
    /// If it fails, what the table becomes depends on why:
    /// - the catalogue says another member owns it (`NotOwner`, fencing):
    ///   it is not served here any more; its records stay in the journal,
    ///   and the catalogue's last manifest still points at them (the new
    ///   owner replays them);
    /// - the commit's outcome is unknown (`Unavailable`): not served here
    ///   any more, and `Ok` with the final manifest, which the caller's
    ///   handover commits;
    /// - anything else (the snapshot could not be written, the
    ///   catalogue's view is out of date): nothing was committed and the
    ///   table is put back as it was — served here, nothing lost — so a
    ///   later DROP can succeed.
    pub fn drop_table(&self, id: TableId) -> Result<TableManifest, EngineError> {
        let inner = &*self.inner;
        let m = member_of(inner)?;
        inner.check_alive().map_err(|_| EngineError::Stopped)?;
        let _one_at_a_time = inner.checkpoint_lock.lock();
        if m.redo.as_ref().is_some_and(|r| r.crashed().is_some()) {
            // Its final snapshot would lack the entries the crashed run's
            // completion still has to apply (`recover_member_logless`).
            return Err(EngineError::Member(format!(
                "table {id} cannot leave yet: this member is completing its crashed run's journal"
            )));
        }
        // Tables split off (or merged) and not yet in the catalogue in
        // their present shape (the split's own checkpoint has not run):
        // commit them first, or the final manifest's smaller range would
        // leave their SOIDs uncatalogued. Only then: a whole checkpoint
        // (the member state's blob, the catalogue's journal floor, a
        // trim) costs a DROP several milliseconds it does not need.
        let uncatalogued = uncatalogued_shapes(inner, m);
        if uncatalogued {
            inner.checkpoint_locked(&|_| false)?;
        }
        tracing::debug!(target: "borrow_trace", table = id, checkpoint = uncatalogued, "DROP: checkpoint of new tables done");
        let old = take_out(inner, id)
            .ok_or_else(|| EngineError::Member(format!("table {id} is not held here")))?;
        // From here on the table serves nothing; every failure below that
        // is not fencing puts it back (`put_back`).
        let (entry, fresh) = match final_snapshot(inner, id, &old) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(table = id, error = %e, "DROP: the table could not be written back; it serves again");
                put_back(inner, m, id, old);
                return Err(e);
            }
        };
        tracing::debug!(target: "borrow_trace", table = id, "DROP: final snapshot written");
        let man = m.manifest(inner, entry, None);
        let change = CatalogChange {
            put: vec![man.clone()],
            remove: Vec::new(),
        };
        let committed = m.commit(change);
        tracing::debug!(target: "borrow_trace", table = id, ok = committed.is_ok(), "DROP: final manifest committed (catalogue)");
        if matches!(committed, Ok(()) | Err(CatalogError::Unavailable(_))) {
            // Handed to the shell, whose handover commits it.
            m.in_doubt([man.entry.file.clone()], None);
        }
        match committed {
            Ok(()) => {
                let mut book = m.book.lock();
                book.floors.remove(&id);
                if let Some((old_file, _, _)) = book.committed.remove(&id) {
                    if old_file != man.entry.file
                        && !book.file_in_use(&old_file)
                        && !m.doubt.lock().contains_key(&old_file)
                    {
                        drop(book);
                        if let Err(e) = inner.store.delete(&old_file) {
                            tracing::warn!(file = %old_file, error = %e, "cannot delete a replaced snapshot");
                        }
                    }
                }
                Ok(man)
            }
            Err(CatalogError::Unavailable(what)) => {
                // Unknown: the caller's handover commits it; until then
                // the catalogue's last manifest may still point into this
                // journal, so it stays pinned and the old snapshot stays.
                tracing::warn!(table = id, error = %what, "DROP: the final manifest's commit is unknown");
                let mut book = m.book.lock();
                if let Some(f) = book.floors.remove(&id) {
                    book.pin(f);
                }
                book.committed.remove(&id);
                Ok(man)
            }
            Err(e @ CatalogError::NotOwner { .. }) => {
                // Fencing (R2): another member owns it. It stays out, as
                // a fenced checkpoint leaves it; its records stay for the
                // new owner.
                tracing::warn!(table = id, error = %e, "DROP: the catalogue fenced the table; it stops serving here");
                delete_unreferenced(inner, fresh);
                let mut book = m.book.lock();
                if let Some(f) = book.floors.remove(&id) {
                    book.pin(f);
                }
                book.committed.remove(&id);
                Err(e.into())
            }
            Err(e) => {
                // Refused, nothing committed, and not fenced: still ours.
                tracing::warn!(table = id, error = %e, "DROP: the final manifest was not committed; the table serves again");
                delete_unreferenced(inner, fresh);
                put_back(inner, m, id, old);
                Err(e.into())
            }
        }
    }

    /// ADD of a new, empty table `id` over `range` (member mode), which
    /// the catalogue must let this member create or already name it for:
    /// the coordinator's bootstrap (`TableHost::add_table` without a
    /// manifest). A range holding [`Soid::ROOT`] gets the root directory.
    /// Writes its first snapshot, serves it, commits its manifest and
    /// returns it.
    pub fn add_new_table(
        &self,
        id: TableId,
        range: SoidRange,
    ) -> Result<TableManifest, EngineError> {
        let inner = &*self.inner;
        let m = member_of(inner)?;
        inner.check_alive().map_err(|_| EngineError::Stopped)?;
        let _one_at_a_time = inner.checkpoint_lock.lock();
        if self.owned_tables().contains(&id) {
            return Err(EngineError::Member(format!(
                "table {id} is already held here"
            )));
        }
        refuse_while_claimed(m)?;
        retire_stale_completion(inner, m)?;
        begin_run_if_due(inner, m)?;
        let mut table = if range.contains(Soid::ROOT) {
            let root = root_table(&inner.config);
            let inode = root.inode(Soid::ROOT).cloned();
            let mut t = Table::new(id, range);
            if let Some(inode) = inode {
                t.put_inode(Soid::ROOT, inode);
            }
            t
        } else {
            Table::new(id, range)
        };
        let lsn = inner.journal.next_lsn() - 1;
        table.last_lsn = lsn;
        let file = inner.snapshot_name(inner.next_snapshot_seq.fetch_add(1, Ordering::Relaxed));
        inner
            .store
            .put_blob(&file, &table.encode_snapshot())
            .map_err(inner.io(&file))?;
        table.snapshot_file = Some(file);
        table.snapshot_lsn = lsn;
        let entry = table.manifest_entry().ok_or(EngineError::Stopped)?;
        install(inner, m, table, entry, lsn + 1)
    }

    /// ADD (member mode): serves the table `manifest` describes, which the
    /// catalogue must already say is this member's. With `replay: None`
    /// (a clean DROP) its snapshot is loaded as it is; with a replay
    /// position (failover: the owner died) the snapshot is loaded, the
    /// records of that member's journal from there are replayed into it,
    /// and the result is written as this member's snapshot. Then its
    /// manifest — replay pointing into this member's journal — is
    /// committed through the catalogue and returned.
    ///
    /// The replies the table carries (its snapshot's, and the tags of the
    /// journal records replayed) go to the carried sink first
    /// ([`Engine::set_carried_sink`]), so a retry of a mutation the
    /// previous owner ran is answered, not run again.
    pub fn add_table(&self, manifest: &TableManifest) -> Result<TableManifest, EngineError> {
        let mut added = self.add_tables(std::slice::from_ref(manifest))?;
        added.pop().ok_or(EngineError::Stopped)
    }

    /// [`Engine::add_table`] for several tables at once (a failover of a
    /// dead member's tables): each journal they replay from is read once
    /// for all of them. Returns the committed manifests in the order
    /// given. On an error, tables installed before it stay installed.
    pub fn add_tables(
        &self,
        manifests: &[TableManifest],
    ) -> Result<Vec<TableManifest>, EngineError> {
        let inner = &*self.inner;
        let m = member_of(inner)?;
        inner.check_alive().map_err(|_| EngineError::Stopped)?;
        let _one_at_a_time = inner.checkpoint_lock.lock();
        let held = self.owned_tables();
        let mut ids = BTreeSet::new();
        for man in manifests {
            let id = man.entry.id;
            if man.layout != inner.config.layout {
                return Err(EngineError::Member(format!(
                    "table {id} has another SOID layout"
                )));
            }
            if held.contains(&id) || !ids.insert(id) {
                return Err(EngineError::Member(format!(
                    "table {id} is already held here"
                )));
            }
        }
        // A woken member whose run was completed behind its back: its own
        // old tables (the catalogue kept them its own when it joined
        // again) load like anyone's — from the journal up to the completed
        // end and the decided entries — and commit manifests replaying
        // from above it; once no manifest replays from at or below it, the
        // completion is retired before any of them serves.
        refuse_while_claimed(m)?;
        // Joined again and the new run not begun (the host's
        // `begin_serving` failed, or was not called): begun here first.
        begin_run_if_due(inner, m)?;
        let stale = stale_completion(inner, m)?;
        let mut added = Vec::with_capacity(manifests.len());
        let result = load_and_install(inner, m, manifests, &mut added);
        let Some((run, c)) = stale else {
            return result.map(|()| added);
        };
        if let Err(e) = result.and_then(|()| retire_completion(inner, m, run, &c)) {
            // Nothing served while the completion stands (what it
            // acknowledged would be lost at its next death); the manifests
            // committed stay (they replay from above the completed end,
            // from snapshots holding what it decided): a retry goes on
            // from there.
            for man in &added {
                let id = man.entry.id;
                take_out(inner, id);
                let mut book = m.book.lock();
                book.floors.remove(&id);
                book.committed.remove(&id);
            }
            return Err(e);
        }
        Ok(added)
    }
}

/// The rest of [`Engine::add_tables`]: loads `manifests`' tables, replays
/// the journals they name, installs each and commits its manifest, pushing
/// it on `added` (those installed before an error stay installed).
fn load_and_install(
    inner: &Inner,
    m: &MemberRun,
    manifests: &[TableManifest],
    added: &mut Vec<TableManifest>,
) -> Result<(), EngineError> {
    {
        let mut tables = Vec::with_capacity(manifests.len());
        for man in manifests {
            inner.high_water.lock().merge_max(&man.high_water);
            tables.push(load_table(&*inner.store, &man.entry)?);
        }
        tracing::debug!(target: "borrow_trace", tables = manifests.len(), "ADD: snapshots loaded");
        // One pass over each journal replayed from: a record applies to the
        // table whose range holds its key, from that table's position on.
        let sources: BTreeSet<&str> = manifests
            .iter()
            .filter_map(|man| man.replay.as_ref().map(|p| p.member.as_str()))
            .collect();
        for source in sources {
            let wanted: Vec<(usize, Lsn)> = manifests
                .iter()
                .enumerate()
                .filter_map(|(i, man)| {
                    let p = man.replay.as_ref()?;
                    (p.member == source).then_some((i, p.from))
                })
                .collect();
            let from = wanted.iter().map(|(_, f)| *f).min().unwrap_or(1);
            let store: Arc<dyn Store> = Arc::new(PrefixStore::read_only(
                Arc::clone(&m.shared),
                member_prefix(source),
            ));
            let mut high_water = GlobalHighWater::default();
            let now = crate::table::carried::unix_now();
            // A log-less member's journal completed from its clients'
            // backups: its records up to P, then the decided entries, and
            // nothing else of it (`crate::member_logless`).
            let completion = crate::member_logless::current_completion(&*store)?;
            let through = completion.as_ref().map_or(Lsn::MAX, |c| c.through);
            let mut apply = |lsn: Lsn,
                             tag: Option<RequestTag>,
                             mutations: Vec<Mutation>|
             -> Result<(), String> {
                let mut noted: Vec<usize> = Vec::new();
                for mu in mutations {
                    let Some(key) = mu.table_key() else {
                        if let Mutation::HighWater(hw) = &mu {
                            high_water.merge_max(hw);
                        }
                        continue;
                    };
                    let target = wanted
                        .iter()
                        .find(|(i, f)| lsn >= *f && tables[*i].range.contains(key));
                    if let Some((i, _)) = target {
                        tables[*i].apply(mu).map_err(|e| e.to_string())?;
                        // The dead owner's replies move on with the table.
                        if let Some(tag) = &tag {
                            if !noted.contains(i) {
                                noted.push(*i);
                                tables[*i].carried.note(tag, now);
                            }
                        }
                    }
                }
                Ok(())
            };
            journal::replay(&*store, from, |lsn, rec| {
                if lsn > through {
                    return Ok(());
                }
                let (tag, mutations) = decode_tagged_record(rec)?;
                apply(lsn, tag, mutations)
            })?;
            for e in completion.map(|c| c.entries).unwrap_or_default() {
                let lsn = e.lsn;
                apply(lsn, e.tag, e.mutations).map_err(|what| EngineError::Corrupt {
                    file: store.describe("logless.completion"),
                    what: format!("entry {lsn}: {what}"),
                })?;
            }
            inner.high_water.lock().merge_max(&high_water);
        }
        for (man, mut table) in manifests.iter().zip(tables) {
            let (entry, floor) = match &man.replay {
                None => {
                    let floor = inner.journal.next_lsn();
                    table.last_lsn = floor - 1;
                    (man.entry.clone(), floor)
                }
                Some(_) => {
                    // Replayed from another journal: written as this
                    // member's snapshot, holding everything up to now of
                    // this journal (none of whose records touch it).
                    let lsn = inner.journal.next_lsn() - 1;
                    table.last_lsn = lsn;
                    table.first_dirty_lsn = None;
                    table.dirty_epoch = None;
                    let file = inner
                        .snapshot_name(inner.next_snapshot_seq.fetch_add(1, Ordering::Relaxed));
                    inner
                        .store
                        .put_blob(&file, &table.encode_snapshot())
                        .map_err(inner.io(&file))?;
                    inner
                        .stats
                        .snapshots_written
                        .fetch_add(1, Ordering::Relaxed);
                    table.snapshot_file = Some(file);
                    table.snapshot_lsn = lsn;
                    let entry = table.manifest_entry().ok_or(EngineError::Stopped)?;
                    (entry, lsn + 1)
                }
            };
            inner.stats.tables_loaded.fetch_add(1, Ordering::Relaxed);
            // Before the table serves: a retry of a mutation its previous
            // owner ran is answered with that reply, never run again.
            Engine::deliver_carried(
                inner,
                Recovered {
                    floors: table.carried.floors(),
                    gone: Vec::new(),
                    replies: table.carried.tags(),
                },
            );
            added.push(install(inner, m, table, entry, floor)?);
        }
        Ok(())
    }
}

impl Engine {
    /// A log-less member whose last run crashed: completes that run's
    /// journal from the backups its clients handed back — or takes the
    /// completion another member (the coordinator, before a failover)
    /// already decided — and applies the decided entries to the tables
    /// held here as new journal records. Call it before serving anything
    /// (the server answers only `Recover` until then). Entries of tables
    /// no longer held here were applied by their new owners. An attempt
    /// that stopped part-way (a full disk, a crash) is taken up again
    /// after a restart: the entries it appended are in the journal right
    /// after the decided end and are not appended twice.
    pub(crate) fn recover_member_logless(
        &self,
        backups: Vec<Vec<u8>>,
    ) -> Result<LoglessRecovery, EngineError> {
        let inner = &*self.inner;
        let m = member_of(inner)?;
        let Some(r) = m.redo.as_ref() else {
            return Ok(LoglessRecovery::default());
        };
        let Some(run) = r.crashed() else {
            return Ok(LoglessRecovery::default());
        };
        let decided = crate::member_logless::complete_member_journal(
            Arc::clone(&m.shared),
            &m.name,
            backups,
        )?;
        let file = crate::member_logless::completion_file(run);
        let c = crate::member_logless::read_completion(&*inner.store, run)?.ok_or_else(|| {
            EngineError::Member(format!("member {}'s journal completion vanished", m.name))
        })?;
        let opened = r.opened_through.load(Ordering::Relaxed);
        let appended = if inner.journal.next_lsn() == opened + 1 {
            appended_before(m, &c, opened)?
        } else {
            None
        };
        let Some(appended) = appended else {
            return Err(EngineError::Member(format!(
                "member {}'s journal ends at {opened} but its completion was decided at {}: \
                 the journal changed after the decision; not applying it",
                m.name, c.through
            )));
        };
        // Those an earlier attempt appended were replayed at open: synced
        // with the rest before the run is noted recovered.
        let mut last = if appended > 0 { opened } else { 0 };
        // Their replies, for retries: answered, not run again.
        let mut replies = Vec::new();
        {
            let _no_checkpoint = inner.checkpoint_lock.lock();
            let map = inner.tables.read();
            let epoch = inner.epoch();
            for (i, e) in c.entries.iter().enumerate() {
                if let Some(tag) = &e.tag {
                    // Before the append, as a commit does.
                    inner.requests.lock().note(&tag.id);
                    replies.push(tag.clone());
                }
                if i < appended {
                    continue;
                }
                let record = crate::record::encode_tagged_record(e.tag.as_ref(), &e.mutations);
                let lsn = inner.journal.append(&record).map_err(|e| {
                    EngineError::Member(format!("appending a completed entry to the journal: {e}"))
                })?;
                last = lsn;
                for mu in &e.mutations {
                    let Some(key) = mu.table_key() else {
                        if let Mutation::HighWater(hw) = mu {
                            inner.high_water.lock().merge_max(hw);
                        }
                        continue;
                    };
                    let mut guard = lock_loaded(&*inner.store, &map, key, &|t| m.place_loaded(t))?;
                    if let Slot::Loaded(table) = &mut *guard {
                        table.apply(mu.clone()).map_err(|e| EngineError::Corrupt {
                            file: inner.store.describe(&file),
                            what: format!("a completed entry does not apply: {e}"),
                        })?;
                        table.mark_applied(lsn, epoch);
                    }
                }
            }
            inner
                .inode_count
                .store(count_inodes(&map), Ordering::Relaxed);
        }
        // Replayed renames bypass transactions: no remembered path holds.
        inner.dir_epoch.fetch_add(1, Ordering::AcqRel);
        inner.dir_changes.fetch_add(1, Ordering::AcqRel);
        if last > 0 {
            inner
                .journal
                .wait_synced(last)
                .map_err(|_| EngineError::Stopped)?;
        }
        // The entries are in the journal now, at new LSNs after the
        // decided end: a later reader replays it whole.
        // The state file names this run first: a reader must not take the
        // completion once the entries are in the journal; then it goes.
        r.recovered(&*inner.store)?;
        inner.store.delete(&file).map_err(inner.io(&file))?;
        crate::member_logless::forget_kept_backups(&*m.shared, &m.name, run);
        Engine::deliver_carried(
            inner,
            Recovered {
                floors: Vec::new(),
                gone: Vec::new(),
                replies,
            },
        );
        Ok(LoglessRecovery {
            received: decided.received,
            distinct: decided.above,
            applied: c.entries.len(),
            discarded: decided.discarded,
            missing: decided.missing,
            forged: decided.forged,
            malformed: decided.malformed,
            acked_mark: decided.acked_mark,
            unreturned: decided.unreturned,
            ..Default::default()
        })
    }

    /// Log-less on a cluster: the host calls this before every ADD with
    /// the membership generation the table was given under (1: the
    /// process's first membership, which it joins before the engine
    /// opens). A newer generation than the one this run began under means
    /// the member was cut off (its lease ended) and joined again in the
    /// same process: before it takes or serves any table it begins a *new
    /// run* — its journal synced through everything written so far, a new
    /// run id in its state file. The hole it closes (issue 21 item 6): a
    /// claimer that checked its claim (`TableCatalog::claim_held`) and was
    /// paused before its write, past its lease, loses the claim; this
    /// member, back meanwhile, finds no claim and no completion and
    /// serves; the claimer wakes and writes the completion of the run it
    /// pinned. Were that the live run, every reader would take it as the
    /// journal's end and what this member acknowledged since would be
    /// lost at its next death. It is the old run now, which no reader
    /// takes (each takes the completion of the run the state file names).
    ///
    /// When a completion of the current run exists already (written while
    /// this member was away) the new run waits for that completion's
    /// retirement, at the end of the ADD that leaves no manifest
    /// replaying from at or below it (`retire_stale_completion`, which
    /// begins the new run). While a crashed run is being recovered (a
    /// restart that lost its lease meanwhile) the ADD is refused: the
    /// new run begins after the recovery. A member paused but not past
    /// its lease does not join again and goes on with its run (no claim
    /// on it can be made: a claim needs it absent from the membership).
    /// A no-op on a single server or a journaling member.
    pub fn begin_serving(&self, generation: u64) -> Result<(), EngineError> {
        let inner = &*self.inner;
        let Some(m) = &inner.member else {
            return Ok(());
        };
        let Some(r) = m.redo.as_ref() else {
            return Ok(());
        };
        if !r.joined(generation) {
            return Ok(());
        }
        let _one_at_a_time = inner.checkpoint_lock.lock();
        begin_run_if_due(inner, m)
    }

    /// Log-less on a cluster: before a table this engine holds already
    /// (opened with it at a restart, or split off here) begins serving
    /// under a grant — the shell's ADD of a table the host has, which
    /// loads nothing and so passes neither check of [`Engine::add_tables`]:
    /// refused while another server is completing this member's journal
    /// (`refuse_while_claimed`); and when the journal of this member's
    /// current run was completed behind its back (a claim made before it
    /// joined, decided after its restart's recovery), every table held is
    /// let go (revoked, nothing written) and refused, so the shell's next
    /// ADD loads each from the journal up to the completed end and retires
    /// the completion before it serves. `Ok` on a single server or a
    /// journaling member.
    pub fn check_before_serving(&self) -> Result<(), EngineError> {
        let inner = &*self.inner;
        let m = member_of(inner)?;
        refuse_while_claimed(m)?;
        if stale_completion(inner, m)?.is_none() {
            let _one_at_a_time = inner.checkpoint_lock.lock();
            return begin_run_if_due(inner, m);
        }
        for id in self.owned_tables() {
            self.revoke_table(id);
        }
        Err(EngineError::Member(format!(
            "member {}'s journal was completed while it was not a member: its tables are loaded \
             again from the completed journal",
            m.name
        )))
    }

    /// Log-less on a cluster: backups a client hands in for run
    /// `incarnation` of another member (dead, or restarting) are kept in
    /// the shared store for whoever completes that member's journal
    /// ([`crate::member_logless::keep_backups`]). `Unknown` on a single
    /// server.
    pub fn keep_backups_for(
        &self,
        incarnation: u64,
        client_id: u64,
        backups: Vec<Vec<u8>>,
    ) -> Result<crate::member_logless::Handed, EngineError> {
        match &self.inner.member {
            Some(m) => {
                crate::member_logless::keep_backups(&m.shared, incarnation, client_id, backups)
            }
            None => Ok(crate::member_logless::Handed::Unknown),
        }
    }

    /// Failover (R3) of member `dead`, whose lease is gone: `false` while
    /// it is a log-less member whose crashed run's journal is not
    /// completed yet ([`Engine::complete_dead_member`] first).
    pub fn failover_ready(&self, dead: &str) -> Result<bool, EngineError> {
        let m = member_of(&self.inner)?;
        let view = PrefixStore::read_only(Arc::clone(&m.shared), member_prefix(dead));
        if view
            .get_blob(crate::member_logless::KEY_FILE)
            .map_err(io_error(&view, crate::member_logless::KEY_FILE))?
            .is_none()
        {
            return Ok(true);
        }
        match crate::member_logless::unclean_run(&view)? {
            None => Ok(true),
            Some(run) => Ok(crate::member_logless::read_completion(&view, run)?.is_some()),
        }
    }

    /// Completes dead member `dead`'s journal from the backups its clients
    /// handed in (kept in the shared store), once; see
    /// [`crate::member_logless`].
    pub fn complete_dead_member(
        &self,
        dead: &str,
    ) -> Result<crate::member_logless::CompletionReport, EngineError> {
        let m = member_of(&self.inner)?;
        let view = PrefixStore::read_only(Arc::clone(&m.shared), member_prefix(dead));
        let run = crate::member_logless::unclean_run(&view)?;
        // Deciding anew: only under a claim made while `dead` is not a
        // member *now* (the caller's view of the membership may be older
        // than its rejoin: issue 21 item 6, "the coordinator-view race").
        // A member that joined again serves nothing while a claim stands
        // and finds the completion once it is released.
        let claim = match run {
            Some(run) => crate::member_logless::read_completion(&view, run)?.is_none(),
            None => false,
        };
        if claim && !m.catalog.claim_completion(dead)? {
            return Err(EngineError::CompletionRefused {
                member: dead.to_string(),
            });
        }
        // The run read before the claim, not the one named when the
        // completion is written (`complete_member_run`: pinned).
        let report = crate::member_logless::complete_member_run(
            Arc::clone(&m.shared),
            dead,
            run,
            Vec::new(),
            || {
                // A claim that ran out with this server's lease (paused
                // since it claimed): nothing written. (The check and the
                // write are not atomic: ARCHITECTURE.md, "Log-less on a
                // cluster", says what stays open.)
                if claim && !m.catalog.claim_held(dead)? {
                    return Err(EngineError::ClaimLost {
                        member: dead.to_string(),
                    });
                }
                Ok(())
            },
        );
        if claim {
            if let Err(e) = m.catalog.release_completion_claim(dead) {
                tracing::warn!(member = dead, error = %e, "cannot release the claim on a journal completion (it goes with this server's lease)");
            }
        }
        let report = report?;
        // Decided: the backups kept for it are of no more use (a late
        // hand-in is told "too late").
        if let Some(run) = run {
            crate::member_logless::forget_kept_backups(&*m.shared, dead, run);
        }
        Ok(report)
    }

    /// Tables this engine stopped serving on its own since the last call
    /// although the catalogue may still name this member for them (a
    /// merge whose outcome stayed unknown; module docs, "Merges"). The
    /// caller loads each again if the catalogue still names this member
    /// for it ([`Engine::add_table`] from its manifest there).
    pub fn take_given_up(&self) -> Vec<TableId> {
        match &self.inner.member {
            Some(m) => std::mem::take(&mut *m.given_up.lock()),
            None => Vec::new(),
        }
    }

    /// Fencing (member mode): stops serving table `id` at once, writing
    /// nothing (its lease ran out; another member may already own it) —
    /// and every table split off it since its last commit, which the
    /// cluster knows only as part of `id` (issue 20: kept, such a table
    /// blocked `id`'s reload after a rejoin, and its next checkpoint
    /// committed it over a range the catalogue still gave `id`). Their
    /// records stay in the journal for a failover to replay. Returns
    /// whether `id` was held.
    pub fn revoke_table(&self, id: TableId) -> bool {
        let inner = &*self.inner;
        let Some(m) = &inner.member else { return false };
        let _one_at_a_time = inner.checkpoint_lock.lock();
        revoke_with_split_off(inner, m, id).first() == Some(&id)
    }
}

/// The end of every ADD: `table` (snapshot `entry`, floor `floor`) goes
/// into the map in place of foreign placeholders, then its manifest is
/// committed through the catalogue (undone if that is refused) and
/// returned.
fn install(
    inner: &Inner,
    m: &MemberRun,
    table: Table,
    entry: TableEntry,
    floor: Lsn,
) -> Result<TableManifest, EngineError> {
    let id = table.id;
    let inodes = table.inode_count() as i64;
    let range = table.range;
    tracing::debug!(target: "borrow_trace", table = id, "ADD: journal replayed; installing");
    m.book.lock().floors.insert(id, floor);
    if let Err(e) = carve(
        &mut inner.tables.write(),
        range,
        Slot::Loaded(Box::new(table)),
    ) {
        m.book.lock().floors.remove(&id);
        return Err(e);
    }
    inner.note_inode_delta(inodes);
    forget_derived(inner);
    let committed = m.manifest(inner, entry, m.here(floor));
    let change = CatalogChange {
        put: vec![committed.clone()],
        remove: Vec::new(),
    };
    let result = m.commit(change);
    tracing::debug!(target: "borrow_trace", table = id, ok = result.is_ok(), "ADD: manifest committed (catalogue)");
    if let Err(e) = result {
        take_out(inner, id);
        m.book.lock().floors.remove(&id);
        return Err(e.into());
    }
    m.book.lock().committed.insert(
        id,
        (committed.entry.file.clone(), floor, committed.entry.range),
    );
    Ok(committed)
}

/// A log-less member takes no table while another server is completing
/// its journal (`TableCatalog::completion_claimed`, asked at this
/// moment): that server decided from a view in which this member was
/// dead, and claimed the completion before this member joined again
/// (a claim needs the member absent). Once released, the completion is
/// there and the ADD takes it as stale (`retire_stale_completion`); a
/// claim made after this member joined is refused, so no completion is
/// written behind the back of a member that serves (the coordinator-view
/// race). Refused: the shell tries again; a claimer that dies takes its
/// claim with it (its lease).
fn refuse_while_claimed(m: &MemberRun) -> Result<(), EngineError> {
    if m.redo.is_some() && m.catalog.completion_claimed(&m.name)? {
        return Err(EngineError::Member(format!(
            "another server is completing member {}'s journal: no table is taken here until it is done",
            m.name
        )));
    }
    Ok(())
}

/// A log-less member let back in after its journal was completed (a
/// defect found 2026-12-06, fixed here): cut off (SIGSTOP, a partition) past its lease
/// and the grace, its current run R was completed by another server
/// (`completion-<R>`, through P) and its tables handed out; woken in the
/// same process it joins again under a new lease and goes on with run R.
/// Every reader of its journal takes that completion as the journal's
/// end, so what it acknowledged after P was lost at its next death.
///
/// Called at the start of every ADD (the only way a member begins serving
/// a table after its tables were revoked, so before it can acknowledge
/// anything again): when this member's own current run has a completion
/// (someone else wrote it behind its back; a restarting member's crashed
/// run is `crashed()`, not this), the completion is *retired* — deleted,
/// with the backups kept for it — once no manifest replays this member's
/// journal from at or below P; until then the ADD is refused (the shell
/// tries again, the coordinator may give the table elsewhere).
///
/// An ADD of tables ([`Engine::add_tables`]) retires it at its *end*,
/// before the tables serve (the shell marks a table served only once its
/// ADD returned; a refused one is taken out again): its own old tables,
/// which the catalogue kept its own when it joined again before they were
/// handed out (R3: a member back in time keeps its tables), are loaded
/// like anyone's from its journal up to P and the decided entries, and
/// their manifests committed replaying from above P — so once every such
/// table was ADDed once, none replays from at or below P and the
/// completion goes. Refusing those ADDs up front instead (the first
/// version of this fix) refused them for ever: nobody else may take a
/// live member's tables, so its own old tables never moved on.
///
/// Why that is right (design B of the analysis; a new run per wake-up,
/// with readers that skip a completed run's records after P, would need
/// a second kind of journal reader and state-file format for the same
/// guarantee):
/// - Nobody needs the completion any more: a reader replays a journal
///   only for the manifests that replay from it, each from its `from`.
///   Those from at or below P are gone (checked: their tables were taken
///   over, and the new owner wrote its own snapshot and replays from
///   itself; a reader still at work holds its old manifest); the set only
///   shrinks (this member's new manifests start at its next LSN, above
///   P; nobody else commits a manifest replaying from it). The
///   completion's entries live in the snapshots of those who applied them.
/// - Records after P in run R written before now were never acknowledged
///   (the lease was gone); no manifest replays from at or below them
///   (every later manifest of this member starts at or above the next
///   LSN), so no reader applies them.
/// - The journal is synced through everything written so far before any
///   table serves: a later power loss cuts it at or above that point, so
///   every stamp a new operation can carry from before now is at or
///   below the new cut (durable for the stamp rule), and the unsynced
///   tail is again exactly what the clients hold.
/// - Run R does not go on: a new run R' begins (`begin_new_run`; since
///   2026-12-07 — before, R went on without a completion, and a second
///   claimer paused between its last check and its write could complete
///   R again behind the member's back, the hole `Engine::begin_serving`
///   closes). At the member's next death `failover_ready` is `false`
///   again, and the coordinator (or the member's own restart) completes
///   R' from its clients' backups (which carry R''s id, learnt from the
///   next reply) at the new end of the journal. A power loss after the
///   re-admission thus keeps what the clients hold.
fn retire_stale_completion(inner: &Inner, m: &MemberRun) -> Result<(), EngineError> {
    match stale_completion(inner, m)? {
        Some((run, c)) => retire_completion(inner, m, run, &c),
        None => Ok(()),
    }
}

/// The completion of this member's own current run, written by someone
/// else while it was cut off (`None`: none).
fn stale_completion(
    inner: &Inner,
    m: &MemberRun,
) -> Result<Option<(u64, crate::member_logless::Completion)>, EngineError> {
    let Some(r) = m.redo.as_ref() else {
        return Ok(None);
    };
    if r.crashed().is_some() {
        // A restart's own crashed run: `recover_member_logless` applies
        // that completion before anything serves.
        return Ok(None);
    }
    let run = r.incarnation();
    if crate::member_logless::unclean_run(&*inner.store)? != Some(run) {
        return Ok(None);
    }
    Ok(crate::member_logless::read_completion(&*inner.store, run)?.map(|c| (run, c)))
}

/// Retires completion `c` of this member's run `run` (see
/// [`retire_stale_completion`]); refused while a manifest replays this
/// member's journal from at or below its end.
fn retire_completion(
    inner: &Inner,
    m: &MemberRun,
    run: u64,
    c: &crate::member_logless::Completion,
) -> Result<(), EngineError> {
    if let Some(floor) = m.catalog.journal_floor(&m.name)? {
        if floor <= c.through {
            return Err(EngineError::Member(format!(
                "member {}'s journal was completed through {} while it was cut off, and a table \
                 still replays it from {floor}: no table is taken here until that one has \
                 moved on",
                m.name, c.through
            )));
        }
    }
    let Some(r) = m.redo.as_ref() else {
        return Ok(());
    };
    // A new run: the completion is then of a run no reader takes, and so
    // is any other completion of it written late (a second claimer paused
    // before its write).
    begin_new_run(inner, m, r)?;
    let file = crate::member_logless::completion_file(run);
    if let Err(e) = inner.store.delete(&file) {
        tracing::warn!(file = %inner.store.describe(&file), error = %e, "cannot delete a completion of an old run (read by nobody)");
    }
    tracing::warn!(
        member = %m.name,
        through = c.through,
        "log-less: this server's journal was completed while it was cut off; that completion is retired \
         (no table replays its journal from there any more) and a new run begins before it serves again"
    );
    Ok(())
}

/// Why a log-less member stopping cleanly must not mark its run clean
/// (`None`: it may). A clean mark tells every reader of its journal to
/// take the whole journal, and a completion of the run then counts for
/// nobody. That is wrong while a completion of its current run stands,
/// written behind its back while it was cut off (not yet retired: it has
/// served nothing since): tables other servers took from that completion
/// hold the journal up to its end P, while a table still replaying the
/// journal from at or below P would, after the clean mark, replay what
/// this member wrote after P — never acknowledged (its lease was gone),
/// and possibly the other half of an operation whose first half the
/// completion left out (a cross-table rename applied to one table only).
/// And while another server holds a claim on completing it, a completion
/// may be written any moment — and while its membership lease is gone,
/// a claim may be made any moment. So the run stays unfinished: readers go on
/// taking the completion (or wait for the claimer's), and the restart
/// cuts the journal after P (`cut_after_completion`) as after a crash.
/// Unfinished is always safe (what the journal holds is synced, and the
/// completion reads it), so a failure to tell counts as "not clean".
pub(super) fn unclean_at_close(inner: &Inner) -> Option<String> {
    let m = inner.member.as_ref()?;
    m.redo.as_ref()?;
    // The order of the three reads closes the race with a claimer. While
    // this member holds its membership (read first), nobody can claim its
    // completion until its lease runs out — seconds, against the
    // milliseconds to the clean mark, and its own lease timer runs out
    // first (R1). A claim made before that read is either still held
    // (read second) or was released after its completion was written
    // (read third).
    match m.catalog.holds_membership(&m.name) {
        Ok(true) => {}
        Ok(false) => {
            return Some(
                "its membership lease is gone: another server may complete its journal any moment"
                    .into(),
            )
        }
        Err(e) => return Some(format!("cannot ask whether it is still a member: {e}")),
    }
    match m.catalog.completion_claimed(&m.name) {
        Ok(false) => {}
        Ok(true) => return Some("another server is completing its journal".into()),
        Err(e) => {
            return Some(format!(
                "cannot ask whether its journal is being completed: {e}"
            ))
        }
    }
    match stale_completion(inner, m) {
        Ok(Some((run, c))) => Some(format!(
            "run {run:016x} was completed through {} while it was cut off",
            c.through
        )),
        Ok(None) => None,
        Err(e) => Some(format!("cannot read its completion: {e}")),
    }
}

/// A log-less member that joined the cluster again (a newer membership
/// generation than its run began under) begins its new run before any
/// table serves here: from `Engine::begin_serving`, which the host calls
/// before every ADD, and again at every way a table begins serving
/// (`add_tables`, `add_new_table`, `check_before_serving`) — so a table
/// never serves under a run the state file does not durably name, also
/// when that call failed (a full disk: the ADD is refused with its error,
/// and this one tries again) or was skipped. Refused while a crashed run
/// is being recovered (the new run begins after the recovery); left to
/// the retirement of a completion of the current run written behind this
/// member's back, which begins it (`retire_stale_completion`). The
/// caller holds the checkpoint lock.
fn begin_run_if_due(inner: &Inner, m: &MemberRun) -> Result<(), EngineError> {
    let Some(r) = m.redo.as_ref() else {
        return Ok(());
    };
    if !r.rejoined() {
        return Ok(());
    }
    if r.crashed().is_some() {
        return Err(EngineError::Member(format!(
            "member {} joined the cluster again while it recovers its crashed run: no table \
             is taken until that is done and a new run begins",
            m.name
        )));
    }
    if stale_completion(inner, m)?.is_some() {
        // Its retirement begins the new run, once nobody reads it.
        return Ok(());
    }
    begin_new_run(inner, m, r)
}

/// A log-less member begins a new run in the same process
/// ([`crate::member_logless::MemberRedo::begin_new_run`]): its journal is
/// synced through everything written so far, then the state file names a
/// new run, and the backups other servers kept for the old run go (the
/// old run is whole: nothing of it is needed from the clients, who learn
/// the new run from the next reply and drop the old one's backups; one
/// handed in later is answered "too late", as no member's state file
/// names that run).
fn begin_new_run(
    inner: &Inner,
    m: &MemberRun,
    r: &crate::member_logless::MemberRedo,
) -> Result<(), EngineError> {
    let last = inner.journal.next_lsn() - 1;
    if last > 0 {
        // A failed sync stops the journal (and the engine): the run
        // stays the old one, whose unsynced tail its clients hold.
        inner
            .journal
            .wait_synced(last)
            .map_err(|cause| EngineError::JournalStopped { cause })?;
    }
    // A failed write leaves the state file naming the old run (a put is
    // all or nothing) and this run unchanged in memory: the ADD is
    // refused, and the next one begins the new run.
    let old = r.begin_new_run(&*inner.store)?;
    crate::member_logless::forget_kept_backups(&*m.shared, &m.name, old);
    tracing::info!(
        member = %m.name,
        old = format_args!("{old:016x}"),
        new = format_args!("{:016x}", r.incarnation()),
        synced_through = last,
        "log-less: a new run begins (this server joined the cluster again); the old run's journal is synced whole"
    );
    Ok(())
}

/// A log-less member restarting after its crashed run was completed —
/// by another server while it was cut off, or by an earlier attempt of
/// its own recovery: every record its journal holds after the decided end
/// P is cut off before anything is replayed, so the run's journal is
/// exactly what every reader took it to be (records up to P), and
/// [`Engine::recover_member_logless`] appends the decided entries right
/// after P. Returns P (`None`: no completion for the crashed run).
///
/// Why cutting is right (nothing acknowledged is lost): a completion is
/// written only once the member's membership lease is gone from etcd
/// (and the grace has passed), when by R1 its own lease timer — which
/// runs out before etcd's lease does — has stopped every
/// acknowledgement; the journal's end P is read after that. A record
/// written after that read was therefore never acknowledged (its client
/// was told to ask again, and asks the table's next owner, which never
/// saw it: readers stop at P). An acknowledged record a reader could not
/// see at P (a shared mount's late write) was unsynced, so its clients
/// hold it and it is among the completion's entries, appended again. The
/// same holds for entries an interrupted recovery appended after P: the
/// completion still exists, so they are appended again, once. And while
/// the completion exists the member acknowledges nothing: a woken member
/// retires it before it serves (`retire_stale_completion`), a restarted
/// one deletes it only after its recovery.
fn cut_after_completion(
    view: &dyn Store,
    name: &str,
    r: &crate::member_logless::MemberRedo,
) -> Result<Option<Lsn>, EngineError> {
    let Some(run) = r.crashed() else {
        return Ok(None);
    };
    let Some(c) = crate::member_logless::read_completion(view, run)? else {
        return Ok(None);
    };
    let cut = crate::journal::truncate_after(view, c.through)?;
    if cut > 0 {
        tracing::warn!(
            member = name,
            through = c.through,
            records = cut,
            "log-less: this server's journal was completed while it was cut off; the records it \
             wrote after the completed end (never acknowledged) are discarded"
        );
    }
    Ok(Some(c.through))
}

/// A member name is one path component of the shared store.
fn check_member_name(name: &str) -> Result<(), EngineError> {
    if name.is_empty() || name.contains('/') || name.contains('\0') || name == "." || name == ".." {
        return Err(EngineError::Member(format!("bad member name {name:?}")));
    }
    Ok(())
}

fn member_of(inner: &Inner) -> Result<&MemberRun, EngineError> {
    inner
        .member
        .as_ref()
        .ok_or_else(|| EngineError::Member("this engine is not a cluster member".into()))
}

#[cfg(test)]
mod tests {
    use super::merge_refused_pause;
    use std::time::Duration;

    #[test]
    fn a_pair_refused_again_and_again_is_tried_less_and_less_often() {
        let secs = |n| merge_refused_pause(n).as_secs();
        assert_eq!(
            (1..=8).map(secs).collect::<Vec<_>>(),
            [10, 20, 40, 80, 160, 320, 320, 320]
        );
        assert_eq!(merge_refused_pause(0), Duration::from_secs(10));
        assert_eq!(merge_refused_pause(u32::MAX), Duration::from_secs(320));
    }
}
