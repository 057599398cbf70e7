//! One metadata server's part of the protocol: its membership lease, the
//! tables it holds and what it may do with them.
//!
//! A table held by a server is in one of four states:
//! - `Loading`: etcd names this server as owner; it is reading the
//!   table's manifest, replaying the journal the manifest points into,
//!   and committing a manifest that points into *its own* journal (so a
//!   later failover replays the right journal). Serves nothing yet.
//! - `Serving`: acknowledges operations — while its lease timer is valid
//!   (R1), checked after the operation is durable, right before the
//!   acknowledgement.
//! - `Dropping`: the coordinator asked to move it; running operations
//!   have finished, new ones get WRONG_SERVER; the server commits, in one
//!   etcd transaction conditional on its ownership revision (R2), the
//!   final manifest and the new owner — its acknowledged DROP (R3).
//! - `Reshaping`: this server is splitting it or merging it with a
//!   neighbour it also serves; acknowledges nothing until the
//!   transaction's outcome (one reshape at a time per server).
//!
//! A serving table is checkpointed now and then ([`Server::checkpoint`]):
//! its snapshot and this server's journal position become its manifest,
//! in a transaction conditional on the owner revision (R2), the server's
//! membership generation and the `manifest/` key's revision as this
//! server last saw it — the real commit's `TablesChange::manifest_revs`
//! — so that a commit etcd applies late, after a later one of the same
//! table, is refused: a table's manifest never goes back. The revision is
//! known from this server's own commits (a checkpoint's, a split's, a
//! merge's) or read again from etcd ([`Server::manifests_seen`]) after a
//! load, a refusal, or a checkpoint whose answer did not come back within
//! [`CHECKPOINT_TIMEOUT_MS`] (one checkpoint per table in flight).
//!
//! A table's key range ([`crate::keys`]) is what the server last saw of
//! `table/<id>` (by revision, never an older one) or what its own split or
//! merge committed; it runs and acknowledges an operation only in a table
//! covering the operation's key ([`Server::begin_key`],
//! [`Server::acknowledge_key`]).
//!
//! Whatever etcd says overrides: a table etcd no longer names this server
//! for is forgotten at once, and a failed manifest commit (a conflict on
//! the ownership revision: someone else owns it now) too. A server whose
//! lease etcd no longer knows forgets every table and joins again.
//!
//! Pure: the caller (the simulation, or a real shell) does the I/O the
//! returned [`Out`] values ask for and feeds the results back.

use crate::etcd::LeaseId;
use crate::exactly_once::{decide, Decision, Remembered};
use crate::ids::{Epoch, Millis, Revision, ServerId, TableId};
use crate::keys::{key_of, KeyRange};
use crate::lease::LeaseTimer;
use std::collections::BTreeMap;

/// A table's contents in this model: the ids of the operations applied to
/// it, each with how many times it was applied (a multiset, so that an
/// operation applied twice shows, and is carried as such through
/// snapshots and journal replays). Being in the contents also means the
/// table carries the operation's reply ([`crate::exactly_once`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents(BTreeMap<u64, u32>);

impl Contents {
    pub fn new() -> Contents {
        Contents::default()
    }

    /// Applies `op` once more; returns how many times it is applied now.
    pub fn apply(&mut self, op: u64) -> u32 {
        let n = self.0.entry(op).or_insert(0);
        *n += 1;
        *n
    }

    pub fn contains(&self, op: u64) -> bool {
        self.0.contains_key(&op)
    }

    /// How many times `op` was applied.
    pub fn count(&self, op: u64) -> u32 {
        self.0.get(&op).copied().unwrap_or(0)
    }

    /// Every application, an operation applied twice appearing twice.
    pub fn applications(&self) -> impl Iterator<Item = u64> + '_ {
        self.0
            .iter()
            .flat_map(|(op, n)| std::iter::repeat_n(*op, *n as usize))
    }

    /// Operations applied more than once, with their counts.
    pub fn applied_twice(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.0
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(op, n)| (*op, *n))
    }
}

impl Extend<u64> for Contents {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, ops: I) {
        for op in ops {
            self.apply(op);
        }
    }
}

impl FromIterator<u64> for Contents {
    fn from_iter<I: IntoIterator<Item = u64>>(ops: I) -> Contents {
        let mut c = Contents::new();
        c.extend(ops);
        c
    }
}

/// A journal in the shared store: one per server and membership
/// generation (the lease it joined under; 0 before any). A server that
/// joins again — after a lost lease or a restart — starts a new one, so
/// that a dead generation's journal is closed: its completion
/// ([`crate::logless`]) is decided once, and nothing is appended to it
/// after (a record written late by a partitioned server is past the
/// completion's prefix and never replayed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalId {
    pub server: ServerId,
    pub generation: u64,
}

impl std::fmt::Display for JournalId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}'s journal of generation {}",
            self.server, self.generation
        )
    }
}

/// Where a table's state is: its snapshot, and the journal whose records
/// for the table after `position` come after the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub snapshot: Contents,
    pub journal: JournalId,
    pub position: usize,
}

impl Manifest {
    pub fn encode(&self) -> String {
        let ids: Vec<String> = self
            .snapshot
            .applications()
            .map(|op| op.to_string())
            .collect();
        format!(
            "{}.{} {} {}",
            self.journal.server.0,
            self.journal.generation,
            self.position,
            ids.join(",")
        )
    }

    /// The journal and position of an encoded manifest, without its
    /// snapshot.
    pub fn position_of(s: &str) -> Option<(JournalId, usize)> {
        let mut it = s.splitn(3, ' ');
        let (server, generation) = it.next()?.split_once('.')?;
        let journal = JournalId {
            server: ServerId(server.parse().ok()?),
            generation: generation.parse().ok()?,
        };
        Some((journal, it.next()?.parse().ok()?))
    }

    pub fn decode(s: &str) -> Option<Manifest> {
        let mut it = s.splitn(3, ' ');
        let (server, generation) = it.next()?.split_once('.')?;
        let journal = JournalId {
            server: ServerId(server.parse().ok()?),
            generation: generation.parse().ok()?,
        };
        let position = it.next()?.parse().ok()?;
        let ids = it.next().unwrap_or("");
        let snapshot = ids
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse().ok())
            .collect::<Option<Contents>>()?;
        Some(Manifest {
            snapshot,
            journal,
            position,
        })
    }
}

/// The value of `owner/<table>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub server: ServerId,
    pub epoch: Epoch,
}

impl Owner {
    pub fn encode(&self) -> String {
        format!("{} {}", self.server.0, self.epoch.0)
    }

    pub fn decode(s: &str) -> Option<Owner> {
        let (a, b) = s.split_once(' ')?;
        Some(Owner {
            server: ServerId(a.parse().ok()?),
            epoch: Epoch(b.parse().ok()?),
        })
    }
}

pub fn owner_key(t: TableId) -> String {
    format!("owner/{:06}", t.0)
}

pub fn manifest_key(t: TableId) -> String {
    format!("manifest/{:06}", t.0)
}

pub fn move_key(t: TableId) -> String {
    format!("move/{:06}", t.0)
}

pub fn member_key(s: ServerId) -> String {
    format!("member/{:06}", s.0)
}

/// Written, without a lease, by every join of `s` in the transaction that
/// creates its member key: its `mod_revision` tells a reassignment whether
/// `s` joined since the view it decided on ([`crate::coordinator::Gone`]).
pub fn joined_key(s: ServerId) -> String {
    format!("joined/{:06}", s.0)
}

pub const COORDINATOR_KEY: &str = "coordinator";

/// What etcd says about one table, as a server reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableView {
    pub table: TableId,
    pub owner: Owner,
    /// `mod_revision` of `owner/<table>`: the fence of R2.
    pub owner_rev: Revision,
    /// A move the coordinator asked for, to this server.
    pub move_to: Option<ServerId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Loading,
    Serving,
    Dropping,
    /// Being split or merged by this server ([`Server::split`],
    /// [`Server::merge`]): acknowledges nothing until the transaction's
    /// outcome comes back.
    Reshaping,
}

#[derive(Clone, Debug)]
struct Held {
    epoch: Epoch,
    owner_rev: Revision,
    state: State,
    contents: Contents,
    /// The table's key range as last seen, with the revision of
    /// `table/<id>` it was seen at (none yet: it serves no key).
    range: Option<(KeyRange, Revision)>,
    /// The `manifest/<id>` key's mod revision as this server last knew it
    /// (its own last commit's, or read from etcd); `None`: not known —
    /// read it again before a checkpoint ([`Server::manifests_seen`]).
    manifest_rev: Option<Revision>,
    /// The checkpoint in flight: its number and when it began.
    checkpoint: Option<(u64, Millis)>,
}

/// How long a checkpoint's answer is waited for; then its outcome counts
/// as unknown (the transaction may still apply, late: its compare on the
/// manifest revision refuses it then if a later commit came first), and
/// the manifest revision is read again.
pub const CHECKPOINT_TIMEOUT_MS: u64 = 1_000;

/// A checkpoint this server began ([`Server::checkpoint`]): one etcd
/// transaction puts the table's manifest (`snapshot`, this server's
/// journal at its end when the snapshot was taken), conditional on the
/// owner key's revision (R2), on `member/<server>` being on the lease it
/// began under, and on the `manifest/` key's revision being
/// `manifest_rev` (a manifest never goes back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub table: TableId,
    pub id: u64,
    pub owner_rev: Revision,
    pub manifest_rev: Revision,
    pub snapshot: Contents,
}

/// A split this server began ([`Server::split`]): one etcd transaction,
/// conditional on the table's owner key and range key revisions and on
/// no move naming it, writes both ranges, the new table's owner key (this
/// server) and both manifests (each half's contents, this server's
/// journal at its current end), and takes the new id from the counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    pub table: TableId,
    pub owner_rev: Revision,
    pub range_rev: Revision,
    /// The table's `manifest/` revision as last known, compared by the
    /// transaction (`None`: not known, not compared).
    pub manifest_rev: Option<Revision>,
    pub epoch: Epoch,
    pub lower: (KeyRange, Contents),
    pub upper: (KeyRange, Contents),
}

/// A merge this server began ([`Server::merge`]): `upper` into `lower`,
/// one etcd transaction conditional on both owner keys' and range keys'
/// revisions and on no move, borrow or home naming either; it writes the
/// union range and the merged manifest and deletes the upper table's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merge {
    pub lower: TableId,
    pub upper: TableId,
    pub owner_revs: (Revision, Revision),
    pub range_revs: (Revision, Revision),
    /// Both tables' `manifest/` revisions as last known (`None`: not
    /// compared).
    pub manifest_revs: (Option<Revision>, Option<Revision>),
    pub range: KeyRange,
    pub contents: Contents,
}

/// What the server asks its shell to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// Grant a membership lease and put `member/<id>` on it.
    Join,
    /// Send a keep-alive of the lease; report the ack with its send time.
    KeepAlive { lease: LeaseId, sent_at: Millis },
    /// Load `table`: read its manifest, replay that journal's records for
    /// the table after the position, then commit — conditional on
    /// `owner_rev` (R2) *and* on the manifest's revision as read — a
    /// manifest pointing at this server's journal end. (Without the second
    /// compare, a retried load committing after the first had made the
    /// table serve would move the journal position past operations
    /// acknowledged meanwhile: the simulation found that, seed 270.)
    Load { table: TableId, owner_rev: Revision },
    /// Hand `table` to `to`: one transaction, conditional on `owner_rev`,
    /// writing the final manifest and the new owner (epoch + 1).
    Handover {
        table: TableId,
        owner_rev: Revision,
        to: ServerId,
        epoch: Epoch,
        snapshot: Contents,
    },
}

/// Whether an operation was acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Ack,
    /// This server does not serve the table (any more): the client
    /// refreshes its map and retries elsewhere.
    WrongServer,
}

/// What became of an operation that arrived ([`Server::begin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begun {
    /// Apply it (done: it is in the table's contents), make it durable,
    /// then ask [`Server::acknowledge`].
    Run {
        epoch: Epoch,
        /// How many times it is applied to the table now (1 unless the
        /// exactly-once rule failed).
        applied: u32,
    },
    /// A retry of an operation already done: answered with its
    /// remembered reply, not run (acknowledged through
    /// [`Server::acknowledge`] like any other).
    Answered,
    /// This server does not serve the table.
    WrongServer,
}

pub struct Server {
    pub id: ServerId,
    lease: Option<LeaseId>,
    timer: LeaseTimer,
    tables: BTreeMap<TableId, Held>,
    /// The replies of the operations run here, with the membership
    /// generation (lease) each ran under; lost with the process.
    replies: BTreeMap<u64, u64>,
    /// The number of the last checkpoint begun.
    checkpoints: u64,
}

impl Server {
    pub fn new(id: ServerId, margin_ms: u64) -> Server {
        Server {
            id,
            lease: None,
            timer: LeaseTimer::new(margin_ms),
            tables: BTreeMap::new(),
            replies: BTreeMap::new(),
            checkpoints: 0,
        }
    }

    pub fn lease(&self) -> Option<LeaseId> {
        self.lease
    }

    /// The journal this server appends to now: its current membership
    /// generation's ([`JournalId`]).
    pub fn journal(&self) -> JournalId {
        JournalId {
            server: self.id,
            generation: self.lease.map_or(0, |l| l.0),
        }
    }

    pub fn lease_remaining(&self, now: Millis) -> u64 {
        self.timer.remaining(now)
    }

    /// Periodic work: join (again at every tick until it worked: a join
    /// is a create-if-absent of `member/<id>`, so a repeated one fails
    /// while an earlier one's key lives), or keep the lease alive.
    /// A checkpoint in flight for longer than [`CHECKPOINT_TIMEOUT_MS`] is
    /// given up (its outcome unknown: the manifest revision is read again).
    pub fn tick(&mut self, now: Millis) -> Vec<Out> {
        for h in self.tables.values_mut() {
            if h.checkpoint
                .is_some_and(|(_, at)| now.0 >= at.0 + CHECKPOINT_TIMEOUT_MS)
            {
                h.checkpoint = None;
                h.manifest_rev = None;
            }
        }
        match self.lease {
            None => vec![Out::Join],
            Some(lease) => vec![Out::KeepAlive {
                lease,
                sent_at: now,
            }],
        }
    }

    /// A join requested at `sent_at` was granted `lease` (ignored once
    /// joined: only the lease `member/<id>` lives on counts).
    pub fn joined(&mut self, lease: LeaseId, sent_at: Millis, ttl_ms: u64) {
        if self.lease.is_none() {
            self.lease = Some(lease);
            self.timer.reset();
            self.timer.acknowledged(sent_at, ttl_ms);
        }
    }

    /// A keep-alive sent at `sent_at` was acknowledged.
    pub fn kept_alive(&mut self, lease: LeaseId, sent_at: Millis, ttl_ms: u64) {
        if self.lease == Some(lease) {
            self.timer.acknowledged(sent_at, ttl_ms);
        }
    }

    /// etcd no longer knows the lease: every table is forgotten (others
    /// may own them already) and the server joins again.
    pub fn lease_lost(&mut self, lease: LeaseId) {
        if self.lease == Some(lease) {
            self.lease = None;
            self.timer.reset();
            self.tables.clear();
        }
    }

    /// R1: may this server acknowledge an operation on `table` at `now`?
    pub fn may_ack(&self, table: TableId, now: Millis) -> bool {
        self.timer.valid(now)
            && self
                .tables
                .get(&table)
                .is_some_and(|h| h.state == State::Serving)
    }

    /// Is `table` serving here (loaded, not dropping)? [`Server::may_ack`]
    /// without the lease timer, for a shell that keeps the timer itself.
    pub fn is_serving(&self, table: TableId) -> bool {
        self.tables
            .get(&table)
            .is_some_and(|h| h.state == State::Serving)
    }

    /// Does this server hold `table` at all (in any state)?
    pub fn holds(&self, table: TableId) -> bool {
        self.tables.contains_key(&table)
    }

    pub fn serving(&self) -> impl Iterator<Item = TableId> + '_ {
        self.tables
            .iter()
            .filter(|(_, h)| h.state == State::Serving)
            .map(|(t, _)| *t)
    }

    pub fn contents(&self, table: TableId) -> Option<&Contents> {
        self.tables.get(&table).map(|h| &h.contents)
    }

    /// What etcd says now (a watch event or a poll): learn new tables,
    /// forget lost ones, start requested moves.
    pub fn observe(&mut self, views: &[TableView]) -> Vec<Out> {
        let mut out = Vec::new();
        if self.lease.is_none() {
            return out;
        }
        let mine: BTreeMap<TableId, &TableView> = views
            .iter()
            .filter(|v| v.owner.server == self.id)
            .map(|v| (v.table, v))
            .collect();
        // Tables etcd gives to someone else (or to this server under
        // another revision: a later assignment) are gone.
        self.tables.retain(|t, h| {
            mine.get(t)
                .is_some_and(|v| v.owner_rev == h.owner_rev && v.owner.epoch == h.epoch)
        });
        // A split in flight names a new table in etcd before its outcome
        // comes back: it is taken from the outcome, not loaded.
        let reshaping = self.tables.values().any(|h| h.state == State::Reshaping);
        for (t, v) in mine {
            match self.tables.get_mut(&t) {
                None if reshaping => {}
                None => {
                    self.tables.insert(
                        t,
                        Held {
                            epoch: v.owner.epoch,
                            owner_rev: v.owner_rev,
                            state: State::Loading,
                            contents: Contents::new(),
                            range: None,
                            manifest_rev: None,
                            checkpoint: None,
                        },
                    );
                    out.push(Out::Load {
                        table: t,
                        owner_rev: v.owner_rev,
                    });
                }
                Some(h) => match (&h.state, v.move_to.filter(|to| *to != self.id)) {
                    // Asked again while loading: the answer may have been
                    // lost (loads are idempotent: each commit is
                    // conditional on the same revision).
                    (State::Loading, _) => out.push(Out::Load {
                        table: t,
                        owner_rev: h.owner_rev,
                    }),
                    (State::Serving | State::Dropping, Some(to)) => {
                        // No acknowledgement after this point. A handover
                        // still pending is sent again (its answer may have
                        // been lost; a second commit fails its compare).
                        h.state = State::Dropping;
                        out.push(Out::Handover {
                            table: t,
                            owner_rev: h.owner_rev,
                            to,
                            epoch: h.epoch,
                            snapshot: h.contents.clone(),
                        });
                    }
                    // Never back to serving without the handover's outcome:
                    // one in flight could still commit a snapshot without
                    // what was acknowledged meanwhile. (The coordinator
                    // never cancels a move; a handover to a server that
                    // is gone is reassigned by R3 like any other.)
                    (State::Dropping, None) | (State::Serving, None) => {}
                    // Not before the split's or merge's outcome.
                    (State::Reshaping, _) => {}
                },
            }
        }
        out
    }

    /// The load of `table` finished: `contents` replayed, the new
    /// manifest committed (`Ok`) or refused (the revision moved on).
    ///
    /// A refusal leaves the table loading: the next [`Server::observe`]
    /// that still names this server asks for the load again, and one that
    /// does not forgets it. It used to forget it at once — but loads are
    /// asked again while one is in flight, and the refusal of a second
    /// load (its commit lost to the first's) can arrive before the first
    /// one's success, which then found nothing to serve: the table went
    /// unserved round after round (the simulation's seed 12, once homes
    /// were kept under lends).
    pub fn loaded(&mut self, table: TableId, owner_rev: Revision, result: Result<Contents, ()>) {
        let Some(h) = self.tables.get_mut(&table) else {
            return;
        };
        if h.owner_rev != owner_rev || h.state != State::Loading {
            return;
        }
        if let Ok(contents) = result {
            h.contents = contents;
            h.state = State::Serving;
        }
    }

    /// The handover of `table` was committed or refused: either way the
    /// table is no longer this server's.
    pub fn handed_over(&mut self, table: TableId) {
        if self
            .tables
            .get(&table)
            .is_some_and(|h| h.state == State::Dropping)
        {
            self.tables.remove(&table);
        }
    }

    /// The host stopped serving `table` on its own although etcd may
    /// still name this server for it (an engine merge whose outcome
    /// stayed unknown): forgotten if it was serving, so that the next
    /// [`Server::observe`] that still names this server loads it again
    /// (from the manifest etcd holds then). A table loading or dropping
    /// is left to that load or handover.
    pub fn given_up(&mut self, table: TableId) {
        if self
            .tables
            .get(&table)
            .is_some_and(|h| h.state == State::Serving)
        {
            self.tables.remove(&table);
        }
    }

    /// What etcd says about tables' key ranges (with each `table/<id>`'s
    /// revision): a held table learns its range, or a newer one. Not while
    /// it is being split or merged (the outcome sets it).
    pub fn ranges_seen(&mut self, ranges: &[(TableId, KeyRange, Revision)]) {
        for (t, r, rev) in ranges {
            if let Some(h) = self.tables.get_mut(t) {
                if h.state != State::Reshaping && h.range.is_none_or(|(_, seen)| seen < *rev) {
                    h.range = Some((*r, *rev));
                }
            }
        }
    }

    /// The table this server may acknowledge `key` in at `now`, if any
    /// (R1, and the table's range as it knows it covers the key).
    pub fn may_ack_key(&self, key: u64, now: Millis) -> Option<TableId> {
        if !self.timer.valid(now) {
            return None;
        }
        self.tables
            .iter()
            .find(|(_, h)| {
                h.state == State::Serving && h.range.is_some_and(|(r, _)| r.contains(key))
            })
            .map(|(t, _)| *t)
    }

    /// The key range of a held table, as this server knows it.
    pub fn range(&self, table: TableId) -> Option<KeyRange> {
        self.tables.get(&table)?.range.map(|(r, _)| r)
    }

    /// Is a split or merge of this server's in flight?
    pub fn reshaping(&self) -> bool {
        self.tables.values().any(|h| h.state == State::Reshaping)
    }

    /// Begins splitting `table` (serving, its range known) at key `at`
    /// (strictly inside): it acknowledges nothing until
    /// [`Server::split_done`]. One reshape at a time.
    pub fn split(&mut self, table: TableId, at: u64) -> Option<Split> {
        if self.reshaping() {
            return None;
        }
        let h = self.tables.get_mut(&table)?;
        let (range, range_rev) = h.range?;
        if h.state != State::Serving || h.checkpoint.is_some() {
            return None;
        }
        let (lo, hi) = range.split(at)?;
        let (mut lower, mut upper) = (Contents::new(), Contents::new());
        for op in h.contents.applications() {
            if hi.contains(key_of(op)) {
                upper.apply(op);
            } else {
                lower.apply(op);
            }
        }
        h.state = State::Reshaping;
        Some(Split {
            table,
            owner_rev: h.owner_rev,
            range_rev,
            manifest_rev: h.manifest_rev,
            epoch: h.epoch,
            lower: (lo, lower),
            upper: (hi, upper),
        })
    }

    /// The outcome of `split`: committed at revision `rev`, the upper half
    /// named `new` (it serves both halves then), or refused (it serves the
    /// whole table again — nothing changed in etcd).
    pub fn split_done(&mut self, split: &Split, outcome: Option<(TableId, Revision)>) {
        let Some(h) = self.tables.get_mut(&split.table) else {
            return;
        };
        if h.owner_rev != split.owner_rev || h.state != State::Reshaping {
            return;
        }
        h.state = State::Serving;
        // Refused: perhaps for a manifest changed since (read it again).
        h.manifest_rev = outcome.map(|(_, rev)| rev);
        if let Some((new, rev)) = outcome {
            h.range = Some((split.lower.0, rev));
            h.contents = split.lower.1.clone();
            let epoch = h.epoch;
            self.tables.insert(
                new,
                Held {
                    epoch,
                    owner_rev: rev,
                    state: State::Serving,
                    contents: split.upper.1.clone(),
                    range: Some((split.upper.0, rev)),
                    manifest_rev: Some(rev),
                    checkpoint: None,
                },
            );
        }
    }

    /// Begins merging `upper` into `lower` (both serving here, `upper`'s
    /// range starting where `lower`'s ends): neither acknowledges anything
    /// until [`Server::merge_done`]. One reshape at a time.
    pub fn merge(&mut self, lower: TableId, upper: TableId) -> Option<Merge> {
        if self.reshaping() || lower == upper {
            return None;
        }
        let l = self.tables.get(&lower)?;
        let u = self.tables.get(&upper)?;
        if l.state != State::Serving || u.state != State::Serving {
            return None;
        }
        if l.checkpoint.is_some() || u.checkpoint.is_some() {
            return None;
        }
        let ((lr, lrev), (ur, urev)) = (l.range?, u.range?);
        let range = lr.merge(&ur)?;
        let mut contents = l.contents.clone();
        contents.extend(u.contents.applications());
        let m = Merge {
            lower,
            upper,
            owner_revs: (l.owner_rev, u.owner_rev),
            range_revs: (lrev, urev),
            manifest_revs: (l.manifest_rev, u.manifest_rev),
            range,
            contents,
        };
        for t in [lower, upper] {
            if let Some(h) = self.tables.get_mut(&t) {
                h.state = State::Reshaping;
            }
        }
        Some(m)
    }

    /// The outcome of `merge`: committed at revision `rev` (the lower
    /// table serves the union; the upper one no longer exists) or refused
    /// (both serve again as they were).
    pub fn merge_done(&mut self, merge: &Merge, outcome: Option<Revision>) {
        let held = |s: &Server, t: TableId, rev: Revision| {
            s.tables
                .get(&t)
                .is_some_and(|h| h.owner_rev == rev && h.state == State::Reshaping)
        };
        let lower_held = held(self, merge.lower, merge.owner_revs.0);
        let upper_held = held(self, merge.upper, merge.owner_revs.1);
        match outcome {
            Some(rev) => {
                self.tables.remove(&merge.upper);
                if let Some(h) = self.tables.get_mut(&merge.lower).filter(|_| lower_held) {
                    h.state = State::Serving;
                    h.contents = merge.contents.clone();
                    h.range = Some((merge.range, rev));
                    h.manifest_rev = Some(rev);
                }
            }
            None => {
                for (t, ok) in [(merge.lower, lower_held), (merge.upper, upper_held)] {
                    if let Some(h) = self.tables.get_mut(&t).filter(|_| ok) {
                        h.state = State::Serving;
                        h.manifest_rev = None;
                    }
                }
            }
        }
    }

    /// Begins a checkpoint of `table` at `now` (serving, its manifest
    /// revision known, none in flight): its snapshot is the table's
    /// contents now; the caller adds this server's journal position now.
    /// The table goes on serving meanwhile.
    pub fn checkpoint(&mut self, table: TableId, now: Millis) -> Option<Checkpoint> {
        let h = self.tables.get_mut(&table)?;
        if h.state != State::Serving || h.checkpoint.is_some() {
            return None;
        }
        let manifest_rev = h.manifest_rev?;
        self.checkpoints += 1;
        h.checkpoint = Some((self.checkpoints, now));
        Some(Checkpoint {
            table,
            id: self.checkpoints,
            owner_rev: h.owner_rev,
            manifest_rev,
            snapshot: h.contents.clone(),
        })
    }

    /// The outcome of checkpoint `cp`: committed at revision `rev` (the
    /// manifest's revision now), or refused (read the revision again).
    /// Ignored unless it is the table's checkpoint in flight (one given up
    /// left the revision unknown already).
    pub fn checkpointed(&mut self, cp: &Checkpoint, outcome: Option<Revision>) {
        let Some(h) = self.tables.get_mut(&cp.table) else {
            return;
        };
        if h.owner_rev != cp.owner_rev || h.checkpoint.map(|(id, _)| id) != Some(cp.id) {
            return;
        }
        h.checkpoint = None;
        h.manifest_rev = outcome;
    }

    /// The `manifest/` keys' revisions as read from etcd: a serving table
    /// whose revision this server does not know, with no checkpoint in
    /// flight, learns it. (Any revision read is safe to compare against:
    /// a commit applied after the read moved the key past it, and one
    /// compared against it applies only if none did.)
    pub fn manifests_seen(&mut self, revs: &[(TableId, Revision)]) {
        for (t, rev) in revs {
            if let Some(h) = self.tables.get_mut(t) {
                if h.state == State::Serving && h.manifest_rev.is_none() && h.checkpoint.is_none() {
                    h.manifest_rev = Some(*rev);
                }
            }
        }
    }

    /// [`Server::begin`] for an operation on `key`: only if `table`'s range
    /// as this server knows it covers the key (else WRONG_SERVER: the
    /// client's map is stale, a split or merge moved the key).
    pub fn begin_key(&mut self, table: TableId, key: u64, op: u64) -> Begun {
        let covers = self
            .tables
            .get(&table)
            .and_then(|h| h.range)
            .is_some_and(|(r, _)| r.contains(key));
        if !covers {
            return Begun::WrongServer;
        }
        self.begin(table, op)
    }

    /// An operation on `table` arrives (`op`: its client's (client, seq),
    /// the same for every retry of it). What is remembered for it — the
    /// table's carried reply if the table's contents hold it, else a reply
    /// made here with its generation — goes to [`crate::exactly_once::decide`].
    pub fn begin(&mut self, table: TableId, op: u64) -> Begun {
        let generation = self.lease.map_or(0, |l| l.0);
        let Some(h) = self.tables.get_mut(&table) else {
            return Begun::WrongServer;
        };
        if h.state != State::Serving {
            return Begun::WrongServer;
        }
        let remembered = if h.contents.contains(op) {
            Some(Remembered::Carried)
        } else {
            self.replies.get(&op).map(|g| Remembered::MadeUnder(*g))
        };
        match decide(remembered, generation) {
            Decision::Answer => Begun::Answered,
            Decision::Run => {
                let applied = h.contents.apply(op);
                self.replies.insert(op, generation);
                Begun::Run {
                    epoch: h.epoch,
                    applied,
                }
            }
        }
    }

    /// The generation `op` was run under here, if this process ran it.
    pub fn made_under(&self, op: u64) -> Option<u64> {
        self.replies.get(&op).copied()
    }

    /// [`Server::acknowledge`] for an operation on `key`: also only if the
    /// table still covers the key (a split in between may have moved it to
    /// another table: the client's retry finds it there).
    pub fn acknowledge_key(&self, table: TableId, key: u64, now: Millis) -> Reply {
        let covers = self
            .tables
            .get(&table)
            .and_then(|h| h.range)
            .is_some_and(|(r, _)| r.contains(key));
        if covers {
            self.acknowledge(table, now)
        } else {
            Reply::WrongServer
        }
    }

    /// R1, checked after the operation is durable and right before its
    /// acknowledgement.
    pub fn acknowledge(&self, table: TableId, now: Millis) -> Reply {
        if self.may_ack(table, now) {
            Reply::Ack
        } else {
            Reply::WrongServer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let m = Manifest {
            snapshot: [1, 5, 9].into_iter().collect(),
            journal: JournalId {
                server: ServerId(3),
                generation: 12,
            },
            position: 17,
        };
        assert_eq!(Manifest::decode(&m.encode()), Some(m));
        let empty = Manifest {
            snapshot: Contents::new(),
            journal: JournalId {
                server: ServerId(0),
                generation: 0,
            },
            position: 0,
        };
        assert_eq!(Manifest::decode(&empty.encode()), Some(empty));
        let o = Owner {
            server: ServerId(2),
            epoch: Epoch(7),
        };
        assert_eq!(Owner::decode(&o.encode()), Some(o));
        assert_eq!(Manifest::decode("x"), None);
    }

    /// A split serves nothing until its outcome, then each half serves
    /// only its keys with only its operations (one begun before the split
    /// on a key now in the upper half is not acknowledged in the lower);
    /// a merge serves the union in the lower table; a refusal serves as
    /// before.
    #[test]
    fn splits_and_merges_serve_each_key_in_one_table() {
        use crate::keys::{key_of, KEYSPACE};
        let mut s = Server::new(ServerId(1), 100);
        s.joined(LeaseId(1), Millis(0), 10_000);
        let view = TableView {
            table: TableId(0),
            owner: Owner {
                server: ServerId(1),
                epoch: Epoch(1),
            },
            owner_rev: Revision(4),
            move_to: None,
        };
        s.observe(std::slice::from_ref(&view));
        let all = KeyRange {
            start: 0,
            end: KEYSPACE,
        };
        s.ranges_seen(&[(TableId(0), all, Revision(2))]);
        s.loaded(TableId(0), Revision(4), Ok(Contents::new()));
        let at = KEYSPACE / 2;
        let (lo_op, hi_op) = {
            let mut ops = 1..;
            let lo = ops.find(|op| key_of(*op) < at).unwrap();
            let hi = (1..).find(|op| key_of(*op) >= at).unwrap();
            (lo, hi)
        };
        for op in [lo_op, hi_op] {
            assert!(matches!(
                s.begin_key(TableId(0), key_of(op), op),
                Begun::Run { .. }
            ));
        }
        let split = s.split(TableId(0), at).expect("serving, range known");
        assert!(split.lower.1.contains(lo_op) && !split.lower.1.contains(hi_op));
        assert!(split.upper.1.contains(hi_op) && !split.upper.1.contains(lo_op));
        assert_eq!(s.acknowledge(TableId(0), Millis(1)), Reply::WrongServer);
        assert!(s.merge(TableId(0), TableId(0)).is_none() && s.split(TableId(0), 7).is_none());
        // Refused: the whole table serves again.
        s.split_done(&split, None);
        assert_eq!(
            s.acknowledge_key(TableId(0), key_of(hi_op), Millis(1)),
            Reply::Ack
        );
        let split = s.split(TableId(0), at).expect("again");
        s.split_done(&split, Some((TableId(9), Revision(8))));
        // The operation begun before the split: not in the lower half.
        assert_eq!(
            s.acknowledge_key(TableId(0), key_of(hi_op), Millis(1)),
            Reply::WrongServer
        );
        assert_eq!(
            s.acknowledge_key(TableId(9), key_of(hi_op), Millis(1)),
            Reply::Ack
        );
        assert_eq!(
            s.begin_key(TableId(0), key_of(hi_op), hi_op),
            Begun::WrongServer
        );
        assert_eq!(
            s.begin_key(TableId(9), key_of(hi_op), hi_op),
            Begun::Answered
        );
        assert_eq!(s.may_ack_key(key_of(lo_op), Millis(1)), Some(TableId(0)));
        assert_eq!(s.may_ack_key(key_of(hi_op), Millis(1)), Some(TableId(9)));
        // An older range read afterwards does not undo the split.
        s.ranges_seen(&[(TableId(0), all, Revision(2))]);
        assert_eq!(s.range(TableId(0)), all.split(at).map(|(l, _)| l));
        let merge = s.merge(TableId(0), TableId(9)).expect("neighbours");
        assert!(s.merge(TableId(0), TableId(9)).is_none(), "one at a time");
        s.merge_done(&merge, Some(Revision(11)));
        assert!(!s.holds(TableId(9)));
        assert_eq!(s.range(TableId(0)), Some(all));
        assert_eq!(
            s.begin_key(TableId(0), key_of(hi_op), hi_op),
            Begun::Answered
        );
    }

    #[test]
    fn acknowledges_only_while_serving_with_a_valid_lease() {
        let mut s = Server::new(ServerId(1), 100);
        assert_eq!(s.tick(Millis(0)), vec![Out::Join]);
        s.joined(LeaseId(1), Millis(0), 1_000);
        assert_eq!(s.journal().generation, 1, "a journal per membership");
        let view = TableView {
            table: TableId(0),
            owner: Owner {
                server: ServerId(1),
                epoch: Epoch(1),
            },
            owner_rev: Revision(4),
            move_to: None,
        };
        let out = s.observe(std::slice::from_ref(&view));
        assert_eq!(
            out,
            vec![Out::Load {
                table: TableId(0),
                owner_rev: Revision(4)
            }]
        );
        assert_eq!(
            s.begin(TableId(0), 1),
            Begun::WrongServer,
            "loading serves nothing"
        );
        s.loaded(TableId(0), Revision(4), Ok(Contents::new()));
        assert!(matches!(
            s.begin(TableId(0), 1),
            Begun::Run { applied: 1, .. }
        ));
        assert_eq!(s.begin(TableId(0), 1), Begun::Answered, "a retry");
        assert_eq!(s.acknowledge(TableId(0), Millis(899)), Reply::Ack);
        assert_eq!(s.acknowledge(TableId(0), Millis(900)), Reply::WrongServer);
        // A move: no more acknowledgements, a handover out.
        let moved = TableView {
            move_to: Some(ServerId(2)),
            ..view
        };
        let out = s.observe(&[moved]);
        assert!(matches!(
            out[..],
            [Out::Handover {
                to: ServerId(2),
                ..
            }]
        ));
        assert_eq!(s.acknowledge(TableId(0), Millis(10)), Reply::WrongServer);
    }

    /// Server 1, joined, and etcd's view of table 0 owned by it (owner
    /// key at revision 4, no move).
    fn joined_with_table_0() -> (Server, TableView) {
        let mut s = Server::new(ServerId(1), 100);
        s.tick(Millis(0));
        s.joined(LeaseId(1), Millis(0), 1_000);
        let view = TableView {
            table: TableId(0),
            owner: Owner {
                server: ServerId(1),
                epoch: Epoch(1),
            },
            owner_rev: Revision(4),
            move_to: None,
        };
        (s, view)
    }

    /// Checkpoints: one in flight per table, only with the manifest
    /// revision known; committed, the revision is the commit's; refused
    /// or given up after the timeout, it is read again (and only then a
    /// checkpoint begins again, comparing what was read).
    #[test]
    fn a_checkpoint_compares_the_manifest_revision_last_known() {
        let (mut s, view) = joined_with_table_0();
        let t = TableId(0);
        s.observe(std::slice::from_ref(&view));
        s.loaded(t, Revision(4), Ok(Contents::from_iter([1])));
        assert_eq!(s.checkpoint(t, Millis(10)), None, "revision unknown");
        s.manifests_seen(&[(t, Revision(5))]);
        let cp = s
            .checkpoint(t, Millis(10))
            .expect("serving, revision known");
        assert_eq!(cp.manifest_rev, Revision(5));
        assert_eq!(cp.snapshot, Contents::from_iter([1]));
        assert_eq!(s.checkpoint(t, Millis(11)), None, "one in flight");
        assert!(s.split(t, 7).is_none(), "no split while one is in flight");
        s.manifests_seen(&[(t, Revision(3))]);
        s.checkpointed(&cp, Some(Revision(9)));
        let next = s.checkpoint(t, Millis(20)).expect("the first is done");
        assert_eq!(next.manifest_rev, Revision(9));
        // Its answer lost: given up at the timeout, the revision unknown.
        s.tick(Millis(20 + CHECKPOINT_TIMEOUT_MS));
        assert_eq!(s.checkpoint(t, Millis(2_000)), None);
        // A late answer of the given-up one changes nothing.
        s.checkpointed(&next, Some(Revision(12)));
        assert_eq!(s.checkpoint(t, Millis(2_000)), None);
        s.manifests_seen(&[(t, Revision(12))]);
        let third = s.checkpoint(t, Millis(2_000)).expect("read again");
        assert_eq!(third.manifest_rev, Revision(12));
        s.checkpointed(&third, None);
        assert_eq!(s.checkpoint(t, Millis(2_001)), None, "refused: read again");
    }

    #[test]
    fn a_table_the_host_gave_up_is_loaded_again_while_etcd_names_this_server() {
        let (mut s, view) = joined_with_table_0();
        let load = vec![Out::Load {
            table: TableId(0),
            owner_rev: Revision(4),
        }];
        assert_eq!(s.observe(std::slice::from_ref(&view)), load);
        s.loaded(TableId(0), Revision(4), Ok(Contents::new()));
        assert!(s.observe(std::slice::from_ref(&view)).is_empty());
        s.given_up(TableId(0));
        assert_eq!(
            s.begin(TableId(0), 1),
            Begun::WrongServer,
            "given up: serves nothing"
        );
        assert_eq!(s.observe(std::slice::from_ref(&view)), load);
        // Given up while dropping: the handover decides, no load.
        s.loaded(TableId(0), Revision(4), Ok(Contents::new()));
        let moved = TableView {
            move_to: Some(ServerId(2)),
            ..view.clone()
        };
        assert!(matches!(
            s.observe(std::slice::from_ref(&moved))[..],
            [Out::Handover { .. }]
        ));
        s.given_up(TableId(0));
        assert!(matches!(s.observe(&[moved])[..], [Out::Handover { .. }]));
    }

    /// Two loads of one table in flight (asked again while loading): the
    /// second's refusal (its commit lost to the first's) arriving first
    /// does not undo the first's success.
    #[test]
    fn a_duplicate_loads_refusal_before_the_first_loads_success_leaves_it_serving() {
        let (mut s, view) = joined_with_table_0();
        assert_eq!(s.observe(std::slice::from_ref(&view)).len(), 1);
        assert_eq!(
            s.observe(std::slice::from_ref(&view)).len(),
            1,
            "asked again"
        );
        s.loaded(TableId(0), Revision(4), Err(()));
        assert!(!s.is_serving(TableId(0)));
        s.loaded(TableId(0), Revision(4), Ok(Contents::new()));
        assert!(
            s.is_serving(TableId(0)),
            "the first load's success serves it"
        );
        // A refusal alone: loaded again by the next look, if still named.
        let mut s = Server::new(ServerId(1), 100);
        s.tick(Millis(0));
        s.joined(LeaseId(1), Millis(0), 1_000);
        s.observe(std::slice::from_ref(&view));
        s.loaded(TableId(0), Revision(4), Err(()));
        assert!(matches!(
            s.observe(std::slice::from_ref(&view))[..],
            [Out::Load { .. }]
        ));
        assert!(s.observe(&[]).is_empty(), "not named any more: forgotten");
        assert!(!s.holds(TableId(0)));
    }
}
