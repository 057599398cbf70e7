//! Cluster member mode: the vocabulary between an [`crate::Engine`] that
//! owns *some* of the namespace's tables and the cluster's table catalogue.
//! No network code: the catalogue is a trait ([`TableCatalog`]); etcd
//! implements it in the server, [`MemCatalog`] in memory for tests.
//!
//! What this module owns:
//! - [`TableManifest`]: one table as the catalogue holds it — its snapshot
//!   (a manifest entry: id, SOID range, snapshot blob in the shared store
//!   and the LSN stamped in it), where journal replay on top of it starts
//!   ([`JournalPos`]: whose journal, from which LSN), the SOID layout and
//!   the SOID counters it was written under. Encoded by
//!   [`TableManifest::to_bytes`], decoded (never panicking) by
//!   [`TableManifest::from_bytes`].
//! - [`TableCatalog`] / [`CatalogChange`] / [`CatalogError`]: the seam.
//! - [`MemCatalog`]: the in-memory catalogue, with the ownership checks an
//!   etcd transaction does by comparing revisions.
//! - [`PrefixStore`]: one member's view of the shared store.
//!
//! # Shared store layout (member mode)
//! ```text
//! members/<name>/journal/…      the member's journal (only it writes there)
//! members/<name>/tables/….snap  snapshots the member wrote (immutable)
//! members/<name>/requests, …    its request ledger, its LSN mark
//! ```
//! A snapshot is never copied to move a table: the catalogue names the
//! blob by its full name in the shared store, and the next owner reads it
//! there.
//!
//! # Invariants
//! - A [`JournalPos`] `{member, from}` in a table's manifest means: every
//!   record of `member`'s journal with LSN ≥ `from` that touches the
//!   table's range may be missing from the snapshot, and none below is.
//!   LSNs of different members' journals are unrelated numbers; the
//!   snapshot's own LSN (`entry.lsn`) only identifies the blob.
//! - A snapshot blob is deleted only by the member that committed a
//!   manifest replacing it, or by the member that wrote it in its present
//!   run once no manifest in the catalogue names it, no table it holds
//!   uses it and no commit that may still take effect names it (the sweep
//!   of `engine::member`), or by a later run of that member once also
//!   nothing an earlier run sent can take effect
//!   ([`TableCatalog::earlier_runs_void`]): so a blob a dropped table's
//!   manifest names stays until its new owner supersedes it.

use crate::journal::Lsn;
use crate::manifest::TableEntry;
use crate::soid::{GlobalHighWater, SoidLayout};
use crate::store::{LogWriter, Store};
use crate::table::TableId;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

/// The id of the table holding the root directory, made by the first
/// member of an empty catalogue (the one [`TableCatalog::next_table_id`]
/// gives this id to).
pub const ROOT_TABLE_ID: TableId = 1;

/// Where replay on top of a snapshot starts: `member`'s journal, from
/// LSN `from` (see the module invariants).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalPos {
    pub member: String,
    pub from: Lsn,
}

/// One table as the cluster's catalogue holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableManifest {
    /// Id, SOID range, snapshot blob (full name in the shared store), the
    /// LSN stamped in the snapshot, inode count.
    pub entry: TableEntry,
    /// `None`: the snapshot holds everything (a clean DROP's final
    /// manifest). `Some`: replay that journal on top (an owner's running
    /// manifest; failover replays it).
    pub replay: Option<JournalPos>,
    /// The SOID layout of the namespace (all tables share one).
    pub layout: SoidLayout,
    /// The writer's SOID counters (the next owner takes the maximum, so a
    /// counter never goes back along a table's chain of owners).
    pub high_water: GlobalHighWater,
}

const MANIFEST_MAGIC: &[u8; 8] = b"SXTTMAN1";

/// Why bytes are not a [`TableManifest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestDecodeError {
    #[error("table manifest: bad header")]
    BadHeader,
    #[error("table manifest: checksum mismatch")]
    Checksum,
    #[error("table manifest: length field says {said}, body has {got} bytes")]
    Length { said: usize, got: usize },
    #[error("table manifest body: {0}")]
    Body(String),
    #[error("table manifest has {0} trailing bytes")]
    Trailing(usize),
    #[error("table manifest: table {0} has an inverted range")]
    InvertedRange(TableId),
    #[error("table manifest: bad SOID layout: {0}")]
    Layout(String),
}

impl TableManifest {
    /// `magic "SXTTMAN1" | body_len u32 | postcard body | crc32c u32`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let body = postcard::to_stdvec(self).expect("serializing to a Vec cannot fail");
        let mut out = Vec::with_capacity(body.len() + 16);
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and checks bytes made by [`TableManifest::to_bytes`].
    /// Never panics.
    pub fn from_bytes(b: &[u8]) -> Result<TableManifest, ManifestDecodeError> {
        if b.len() < 16 || &b[..8] != MANIFEST_MAGIC {
            return Err(ManifestDecodeError::BadHeader);
        }
        let (content, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(content) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err(ManifestDecodeError::Checksum);
        }
        let said = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
        let got = content.len() - 12;
        if said != got {
            return Err(ManifestDecodeError::Length { said, got });
        }
        let m: TableManifest = match postcard::take_from_bytes(&content[12..]) {
            Ok((m, [])) => m,
            Ok((_, extra)) => return Err(ManifestDecodeError::Trailing(extra.len())),
            Err(e) => return Err(ManifestDecodeError::Body(e.to_string())),
        };
        if m.entry.range.first > m.entry.range.last {
            return Err(ManifestDecodeError::InvertedRange(m.entry.id));
        }
        m.layout
            .validate()
            .map_err(|e| ManifestDecodeError::Layout(e.to_string()))?;
        Ok(m)
    }
}

/// One atomic change to the catalogue: manifests to put (a new table
/// becomes the committer's) and tables to remove.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatalogChange {
    pub put: Vec<TableManifest>,
    pub remove: Vec<TableId>,
}

/// Why the catalogue refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The committer does not own (any more) a table the change touches:
    /// nothing was changed. For a server this is fencing (R2): stop
    /// serving that table.
    #[error("{member} does not own table {table}")]
    NotOwner { table: TableId, member: String },
    /// A new table id that was never handed out by `next_table_id`.
    #[error("table {0} was never allocated")]
    Unallocated(TableId),
    /// The catalogue could not be reached or did not answer (the change
    /// may or may not have happened; retrying the same change is safe).
    #[error("catalogue unavailable: {0}")]
    Unavailable(String),
    /// Refused, but not because of ownership: the catalogue's own view of
    /// who owns what is older than its store of record, which still names
    /// the committer for every table the change touches. Nothing was
    /// changed; the same change may succeed later (not fencing: keep
    /// serving).
    #[error("catalogue view out of date: {0}")]
    Stale(String),
    /// A merge refused because a table it touches is being moved, lent
    /// or borrowed (or the catalogue does not merge at all): nothing was
    /// changed, both tables are still the committer's (not fencing).
    #[error("merge refused: {0}")]
    Busy(String),
}

/// The cluster's table catalogue, as a member engine sees it.
///
/// To ensure correctness, implementations must guarantee:
/// - `commit` is atomic: all of `put` and `remove` or nothing, and only if
///   `member` owns every table it touches that exists; a put of a table
///   id that does not exist yet (handed out by `next_table_id`) makes
///   `member` its owner. (On etcd: one transaction comparing each owner
///   key's revision with the one the table was granted under.)
/// - `next_table_id` never returns an id twice, and returns
///   [`ROOT_TABLE_ID`] first (the member that gets it creates the root
///   table).
/// - `tables(member)` is every manifest `member` owns, as last committed.
/// - `journal_floor(member)` is the lowest `replay.from` among the
///   manifests of *every* table (whoever owns it) whose replay points into
///   `member`'s journal, as last committed (`None`: none does). A member
///   trims its journal only below it, so a table taken from it (its lease
///   ran out) can still be replayed by the new owner, even across the old
///   member's restart. (On etcd: from the cached map's `manifest/` keys.)
/// - `merge` (see [`TableCatalog::merge`]) is atomic and refuses unless
///   both tables are `member`'s and no move, lend or borrow involves
///   either.
pub trait TableCatalog: Send + Sync {
    fn commit(&self, member: &str, change: CatalogChange) -> Result<(), CatalogError>;
    /// A merge of two neighbouring tables of `member`: `merged` (the
    /// lower table's id, the union of both ranges, a snapshot holding
    /// both) replaces the lower table's manifest and table `gone` (the
    /// upper) ceases to exist — all or nothing, in one step that is
    /// refused unless `member` owns both *as it was granted them* and no
    /// move, lend (home) or borrow names either (`Busy`; `NotOwner` when
    /// one is another's). This is the rule that keeps a merge from racing
    /// a move, DROP, BORROW or failover: each of those changes the owner
    /// of a table, or announces it will (a `move/`, `home/` or `borrow/`
    /// key), and the merge's single conditional step sees it — while
    /// every one of them is itself conditional on the owner it read, which
    /// the merge deletes for `gone`.
    ///
    /// Idempotent: a merge found already done is `Ok`. `Unavailable`:
    /// the outcome is not known (the same call again settles it).
    ///
    /// The default refuses (`Busy`): a catalogue that does not implement
    /// merges never merges.
    fn merge(
        &self,
        member: &str,
        merged: TableManifest,
        gone: TableId,
    ) -> Result<(), CatalogError> {
        let _ = (member, merged, gone);
        Err(CatalogError::Busy(
            "this catalogue does not merge tables".into(),
        ))
    }
    fn next_table_id(&self) -> Result<TableId, CatalogError>;
    fn tables(&self, member: &str) -> Result<Vec<TableManifest>, CatalogError>;
    fn journal_floor(&self, member: &str) -> Result<Option<Lsn>, CatalogError>;
    /// Every snapshot blob a manifest in the catalogue names, read at one
    /// instant. A member's sweep of the snapshots it wrote deletes none of
    /// these. The default: unknown (nothing is swept).
    fn referenced_files(&self) -> Result<std::collections::BTreeSet<String>, CatalogError> {
        Err(CatalogError::Unavailable(
            "this catalogue does not list the snapshots it names".into(),
        ))
    }
    /// The fence of `member`'s last commit, as an opaque number asked
    /// about by [`Self::fence_void`] (on etcd: its transaction kept as a
    /// doubt, with the lease and the revisions it compares). `None`: unknown (a snapshot in a commit whose outcome is unknown is
    /// then never swept in this run).
    fn last_commit_fence(&self, member: &str) -> Option<u64> {
        let _ = member;
        None
    }
    /// Whether no commit of `member` planned under `fence` can take effect
    /// any more, also one still in flight (on etcd: `member/<member>` is on
    /// another lease — a lease never comes back —, or a later commit of a
    /// table it updates applied). The default: `false`.
    fn fence_void(&self, member: &str, fence: u64) -> Result<bool, CatalogError> {
        let _ = (member, fence);
        Ok(false)
    }
    /// Whether nothing an earlier run of `member` (an engine opened before
    /// this one, on this store) sent to the catalogue — a commit, or a
    /// handover of the shell's naming one of its snapshots — can take
    /// effect any more, also one still in flight. Then that run's
    /// snapshots that no manifest names are swept. The default: `false`.
    fn earlier_runs_void(&self, member: &str) -> Result<bool, CatalogError> {
        let _ = member;
        Ok(false)
    }
    /// Log-less failover's fence (issue 21 item 6): before another server
    /// completes `member`'s journal it *claims* the completion — only
    /// while `member` is not a member (its lease gone), read at the
    /// moment of the claim, not from a view that may be old; the claim
    /// lives until [`TableCatalog::release_completion_claim`] or the
    /// claimer's death. `Ok(false)`: `member` is one (it joined again):
    /// its journal must not be completed. The default: `Ok(true)` (a
    /// catalogue that knows no membership).
    fn claim_completion(&self, member: &str) -> Result<bool, CatalogError> {
        let _ = member;
        Ok(true)
    }
    /// Ends a claim [`TableCatalog::claim_completion`] made.
    fn release_completion_claim(&self, member: &str) -> Result<(), CatalogError> {
        let _ = member;
        Ok(())
    }
    /// Whether some server is completing `member`'s journal now (read at
    /// this moment). A log-less member asks before every ADD: it serves
    /// nothing while one is, and afterwards finds the completion.
    fn completion_claimed(&self, member: &str) -> Result<bool, CatalogError> {
        let _ = member;
        Ok(false)
    }
    /// Whether `member` — this server — holds its membership now: its
    /// `member/` key stands on the lease it serves under (read at this
    /// moment). A log-less member asks before it marks its run closed
    /// cleanly: while it does, nobody can claim its journal's completion
    /// ([`TableCatalog::claim_completion`] needs the key gone) until the
    /// lease runs out, which its own lease timer sees first (R1). The
    /// default: `Ok(true)` (a catalogue that knows no membership).
    fn holds_membership(&self, member: &str) -> Result<bool, CatalogError> {
        let _ = member;
        Ok(true)
    }
    /// Whether this server's claim on completing `member`'s journal
    /// ([`TableCatalog::claim_completion`]) still stands (read at this
    /// moment): asked right before the completion is written, so a
    /// claimer whose lease — and with it the claim — ran out while it was
    /// paused writes nothing. The default: `Ok(true)`.
    fn claim_held(&self, member: &str) -> Result<bool, CatalogError> {
        let _ = member;
        Ok(true)
    }
}

/// How an engine joins a cluster ([`crate::Engine::open_member`]).
#[derive(Clone)]
pub struct MemberConfig {
    /// The member's name; its journal lives under `members/<name>/`.
    pub name: String,
    pub catalog: Arc<dyn TableCatalog>,
}

impl std::fmt::Debug for MemberConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberConfig")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The in-memory catalogue (tests, the simulation). Also plays the
/// coordinator's part: [`MemCatalog::assign`] hands a table to a member.
#[derive(Default)]
pub struct MemCatalog {
    inner: Mutex<MemCatalogInner>,
}

#[derive(Default)]
struct MemCatalogInner {
    next_id: TableId,
    /// id → (owner, manifest)
    tables: BTreeMap<TableId, (String, TableManifest)>,
    /// Tables a move, lend or borrow names (what etcd's `move/`,
    /// `home/` and `borrow/` keys say): no merge touches them.
    moving: std::collections::BTreeSet<TableId>,
    /// Members whose lease is alive (what etcd's `member/` keys say), as
    /// a test sets them ([`MemCatalog::set_member`]); and the members
    /// whose journal completion is claimed.
    members: std::collections::BTreeSet<String>,
    claims: std::collections::BTreeSet<String>,
    /// Members a test cut off ([`MemCatalog::set_member`] `false`): they
    /// do not hold their membership ([`TableCatalog::holds_membership`]);
    /// every other one does, as a test that never sets a member expects.
    cut_off: std::collections::BTreeSet<String>,
}

impl MemCatalog {
    pub fn new() -> MemCatalog {
        MemCatalog::default()
    }

    /// `member` is (`true`) or is not a member, its lease alive (only
    /// [`TableCatalog::claim_completion`] asks).
    pub fn set_member(&self, member: &str, present: bool) {
        let mut inner = self.inner.lock();
        if present {
            inner.members.insert(member.to_string());
            inner.cut_off.remove(member);
        } else {
            inner.members.remove(member);
            inner.cut_off.insert(member.to_string());
        }
    }

    /// The coordinator's move: `table` now belongs to `member` (its
    /// manifest unchanged). Returns false if the table is unknown.
    pub fn assign(&self, table: TableId, member: &str) -> bool {
        let mut inner = self.inner.lock();
        inner.moving.remove(&table);
        match inner.tables.get_mut(&table) {
            Some((owner, _)) => {
                *owner = member.to_owned();
                true
            }
            None => false,
        }
    }

    /// The coordinator asks for a move (or a lend, or a server borrows
    /// the table): `true` marks `table` as moving — no merge may touch it
    /// until it is marked `false` again (the move done: [`MemCatalog::
    /// assign`], or given up). Returns false if the table is unknown (a
    /// merge took it: the move is refused, as etcd refuses a `move/` put
    /// whose owner key is gone).
    pub fn set_moving(&self, table: TableId, moving: bool) -> bool {
        let mut inner = self.inner.lock();
        if !inner.tables.contains_key(&table) {
            return false;
        }
        if moving {
            inner.moving.insert(table);
        } else {
            inner.moving.remove(&table);
        }
        true
    }

    pub fn owner(&self, table: TableId) -> Option<String> {
        self.inner.lock().tables.get(&table).map(|(o, _)| o.clone())
    }

    pub fn manifest(&self, table: TableId) -> Option<TableManifest> {
        self.inner.lock().tables.get(&table).map(|(_, m)| m.clone())
    }

    /// Every table: (id, owner, manifest), by id.
    pub fn all(&self) -> Vec<(TableId, String, TableManifest)> {
        self.inner
            .lock()
            .tables
            .iter()
            .map(|(id, (o, m))| (*id, o.clone(), m.clone()))
            .collect()
    }
}

impl TableCatalog for MemCatalog {
    fn claim_completion(&self, member: &str) -> Result<bool, CatalogError> {
        let mut inner = self.inner.lock();
        if inner.members.contains(member) {
            return Ok(false);
        }
        inner.claims.insert(member.to_string());
        Ok(true)
    }

    fn release_completion_claim(&self, member: &str) -> Result<(), CatalogError> {
        self.inner.lock().claims.remove(member);
        Ok(())
    }

    fn completion_claimed(&self, member: &str) -> Result<bool, CatalogError> {
        Ok(self.inner.lock().claims.contains(member))
    }

    fn claim_held(&self, member: &str) -> Result<bool, CatalogError> {
        Ok(self.inner.lock().claims.contains(member))
    }

    fn holds_membership(&self, member: &str) -> Result<bool, CatalogError> {
        Ok(!self.inner.lock().cut_off.contains(member))
    }

    fn commit(&self, member: &str, change: CatalogChange) -> Result<(), CatalogError> {
        let mut inner = self.inner.lock();
        let touched = change
            .put
            .iter()
            .map(|m| m.entry.id)
            .chain(change.remove.iter().copied());
        for id in touched {
            match inner.tables.get(&id) {
                Some((owner, _)) if owner != member => {
                    return Err(CatalogError::NotOwner {
                        table: id,
                        member: member.to_owned(),
                    })
                }
                Some(_) => {}
                None if id == 0 || id >= inner.next_id.max(1) => {
                    return Err(CatalogError::Unallocated(id))
                }
                None => {}
            }
        }
        for id in change.remove {
            inner.tables.remove(&id);
        }
        for m in change.put {
            inner.tables.insert(m.entry.id, (member.to_owned(), m));
        }
        Ok(())
    }

    fn merge(
        &self,
        member: &str,
        merged: TableManifest,
        gone: TableId,
    ) -> Result<(), CatalogError> {
        let mut inner = self.inner.lock();
        let lower = merged.entry.id;
        if !inner.tables.contains_key(&gone)
            && inner
                .tables
                .get(&lower)
                .is_some_and(|(o, m)| o == member && *m == merged)
        {
            return Ok(()); // done already (a retry)
        }
        for id in [lower, gone] {
            match inner.tables.get(&id) {
                Some((owner, _)) if owner == member => {}
                _ => {
                    return Err(CatalogError::NotOwner {
                        table: id,
                        member: member.to_owned(),
                    })
                }
            }
            if inner.moving.contains(&id) {
                return Err(CatalogError::Busy(format!("table {id} is moving")));
            }
        }
        inner.tables.remove(&gone);
        inner.tables.insert(lower, (member.to_owned(), merged));
        Ok(())
    }

    fn next_table_id(&self) -> Result<TableId, CatalogError> {
        let mut inner = self.inner.lock();
        let id = inner.next_id.max(ROOT_TABLE_ID);
        inner.next_id = id + 1;
        Ok(id)
    }

    fn tables(&self, member: &str) -> Result<Vec<TableManifest>, CatalogError> {
        Ok(self
            .inner
            .lock()
            .tables
            .values()
            .filter(|(o, _)| o == member)
            .map(|(_, m)| m.clone())
            .collect())
    }

    fn journal_floor(&self, member: &str) -> Result<Option<Lsn>, CatalogError> {
        Ok(self
            .inner
            .lock()
            .tables
            .values()
            .filter_map(|(_, m)| m.replay.as_ref())
            .filter(|p| p.member == member)
            .map(|p| p.from)
            .min())
    }
}

/// A member's view of the shared store: every name is put under
/// `prefix` (e.g. `members/a/`), except names that already start with
/// [`SHARED_ROOT`] (`members/`), which are full shared-store names and pass
/// through — that is how one member reads a snapshot another wrote.
/// With `read_only`, writes fail and `truncate_log` does nothing (replaying
/// another member's journal must never cut it).
#[derive(Clone)]
pub struct PrefixStore {
    inner: Arc<dyn Store>,
    prefix: String,
    read_only: bool,
}

/// Names under this are full shared-store names (see [`PrefixStore`]).
pub const SHARED_ROOT: &str = "members/";

/// The prefix of member `name`'s part of the shared store.
pub fn member_prefix(name: &str) -> String {
    format!("{SHARED_ROOT}{name}/")
}

impl PrefixStore {
    pub fn new(inner: Arc<dyn Store>, prefix: impl Into<String>) -> PrefixStore {
        PrefixStore {
            inner,
            prefix: prefix.into(),
            read_only: false,
        }
    }

    pub fn read_only(inner: Arc<dyn Store>, prefix: impl Into<String>) -> PrefixStore {
        PrefixStore {
            read_only: true,
            ..PrefixStore::new(inner, prefix)
        }
    }

    fn full(&self, name: &str) -> String {
        if name.starts_with(SHARED_ROOT) {
            name.to_owned()
        } else {
            format!("{}{name}", self.prefix)
        }
    }

    fn writable(&self) -> io::Result<()> {
        if self.read_only {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is read-only here", self.prefix),
            ))
        } else {
            Ok(())
        }
    }
}

impl Store for PrefixStore {
    fn put_blob(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.writable()?;
        self.inner.put_blob(&self.full(name), bytes)
    }

    fn put_blob_new(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        self.writable()?;
        self.inner.put_blob_new(&self.full(name), bytes)
    }

    fn get_blob(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        self.inner.get_blob(&self.full(name))
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        self.writable()?;
        self.inner.delete(&self.full(name))
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        let full = self.full(prefix);
        let names = self.inner.list(&full)?;
        if prefix.starts_with(SHARED_ROOT) {
            return Ok(names);
        }
        Ok(names
            .into_iter()
            .filter_map(|n| n.strip_prefix(&self.prefix).map(str::to_owned))
            .collect())
    }

    fn open_log(&self, name: &str) -> io::Result<Box<dyn LogWriter>> {
        self.writable()?;
        self.inner.open_log(&self.full(name))
    }

    fn read_log(&self, name: &str) -> io::Result<Vec<u8>> {
        self.inner.read_log(&self.full(name))
    }

    fn truncate_log(&self, name: &str, len: u64) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.inner.truncate_log(&self.full(name), len)
    }

    fn describe(&self, name: &str) -> String {
        self.inner.describe(&self.full(name))
    }
}

/// What a member persists of its own beyond its journal, so a restart
/// never numbers records below ones a catalogue manifest may point at,
/// nor hands out a SOID counter value twice. Written at checkpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MemberState {
    pub next_lsn: Lsn,
    pub high_water: GlobalHighWater,
}

pub(crate) const MEMBER_STATE_NAME: &str = "MEMBER";
const STATE_MAGIC: &[u8; 8] = b"SXTMEMB1";

impl MemberState {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let body = postcard::to_stdvec(self).expect("serializing to a Vec cannot fail");
        let mut out = Vec::with_capacity(body.len() + 12);
        out.extend_from_slice(STATE_MAGIC);
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub(crate) fn decode(b: &[u8]) -> Result<MemberState, String> {
        if b.len() < 12 || &b[..8] != STATE_MAGIC {
            return Err("bad member state header".into());
        }
        let (content, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(content) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err("member state checksum mismatch".into());
        }
        match postcard::take_from_bytes(&content[8..]) {
            Ok((s, [])) => Ok(s),
            Ok((_, extra)) => Err(format!("member state has {} trailing bytes", extra.len())),
            Err(e) => Err(format!("member state body: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::{Soid, SoidRange};

    fn manifest(id: TableId) -> TableManifest {
        TableManifest {
            entry: TableEntry {
                id,
                range: SoidRange {
                    first: Soid::from_u128(10),
                    last: Soid::from_u128(99),
                },
                file: "members/a/tables/0000000000000001.snap".into(),
                lsn: 7,
                inodes: 3,
            },
            replay: Some(JournalPos {
                member: "a".into(),
                from: 8,
            }),
            layout: SoidLayout::default(),
            high_water: GlobalHighWater::default(),
        }
    }

    #[test]
    fn manifest_bytes_round_trip_and_damage_is_a_typed_error() {
        let m = manifest(3);
        let b = m.to_bytes();
        assert_eq!(TableManifest::from_bytes(&b).unwrap(), m);
        assert_eq!(
            TableManifest::from_bytes(&b[..5]),
            Err(ManifestDecodeError::BadHeader)
        );
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x40;
            assert!(TableManifest::from_bytes(&bad).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn mem_catalog_checks_ownership_atomically() {
        let c = MemCatalog::new();
        assert_eq!(c.next_table_id(), Ok(ROOT_TABLE_ID));
        let two = c.next_table_id().unwrap();
        c.commit(
            "a",
            CatalogChange {
                put: vec![manifest(ROOT_TABLE_ID)],
                remove: vec![],
            },
        )
        .unwrap();
        assert_eq!(c.owner(ROOT_TABLE_ID).as_deref(), Some("a"));
        // b touches a's table and a new one: nothing happens.
        let err = c.commit(
            "b",
            CatalogChange {
                put: vec![manifest(two), manifest(ROOT_TABLE_ID)],
                remove: vec![],
            },
        );
        assert!(matches!(err, Err(CatalogError::NotOwner { table: 1, .. })));
        assert_eq!(c.owner(two), None);
        assert!(matches!(
            c.commit(
                "b",
                CatalogChange {
                    put: vec![manifest(99)],
                    remove: vec![]
                }
            ),
            Err(CatalogError::Unallocated(99))
        ));
        assert!(c.assign(ROOT_TABLE_ID, "b"));
        assert_eq!(c.tables("b").unwrap().len(), 1);
        assert!(c.tables("a").unwrap().is_empty());
    }

    #[test]
    fn prefix_store_maps_names_and_passes_shared_ones_through() {
        let shared = crate::store::MemStore::new();
        let a = PrefixStore::new(Arc::new(shared.clone()), member_prefix("a"));
        a.put_blob("x", b"1").unwrap();
        a.put_blob("members/b/y", b"2").unwrap();
        assert_eq!(shared.get_blob("members/a/x").unwrap().unwrap(), b"1");
        assert_eq!(shared.get_blob("members/b/y").unwrap().unwrap(), b"2");
        assert_eq!(a.list("").unwrap(), vec!["x"]);
        let ro = PrefixStore::read_only(Arc::new(shared.clone()), member_prefix("a"));
        assert!(ro.put_blob("z", b"3").is_err());
        let mut log = a.open_log("journal/1.log").unwrap();
        log.append(b"abc").unwrap();
        ro.truncate_log("journal/1.log", 0).unwrap();
        assert_eq!(ro.read_log("journal/1.log").unwrap(), b"abc");
    }
}
