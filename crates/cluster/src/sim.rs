//! A deterministic simulation of the cluster protocol.
//!
//! One seed decides everything: simulated time, message latencies, which
//! server a client asks, and the faults — server crashes and restarts,
//! pauses (SIGSTOP) longer than a lease, server↔etcd partitions, etcd
//! restarts (which extend every lease) — and BORROWs: servers ask for
//! random sets of tables together (`borrow/<server>`, on their lease) and
//! RETURN them a little later, so the coordinator lends tables, sends
//! them home and forgets homes among the faults. Servers ([`Server`]) and the
//! coordinator's decisions ([`decide_moves`], up to [`Config::max_moves`]
//! moves in flight at once, as the real coordinator keeps; with
//! [`Config::late_join_ms`] three servers join one holding every table
//! and balance spreads them, many moves at once, among the faults) are
//! the real state machines; etcd
//! is the [`Etcd`] model; the shared table store is the servers' journals
//! plus the manifests in etcd. The store holds one journal per server and
//! *run* (as the real member's state file names it: a restart begins a
//! new one once the process has joined, and so does a process that joins
//! again after a pause or a partition, [`Config::new_run_at_rejoin`];
//! `JournalId { server, generation: run }` there), and journals survive
//! crashes. A manifest names the journal by
//! the membership lease it was written under ([`Server::journal`], which
//! fences its commit); [`World::run_of`] maps that to the run.
//!
//! Log-less servers (half the seeds, [`Logless`]; [`crate::logless`]): a
//! journal record is written at once but synced by a background sync a
//! few ms later; a reader of the store sees the synced part (a server its
//! own journal whole). A reply carries the journal's synced watermark, and
//! the client keeps a backup of its acknowledged record while above it.
//! Half the crashes are then *machine* crashes: the unsynced tail of each
//! of the server's journals is cut at a random point (a plain crash keeps
//! it all). A run is *over* once its process is gone or its server is not
//! a member; an over run is *completed* once — the synced prefix plus
//! every client's backups past it, in LSN order, each once, a separate
//! object written with `put_blob_new` (first writer wins; a later
//! completer takes it) — before any of its server's tables is reassigned
//! (the one decision point: [`crate::coordinator::completions_due`],
//! `ClusterView::uncompleted`), and a load replaying an over run waits for
//! its completion and replays the prefix and the completion, never what
//! the journal grew after. Who completes, as the real code does
//! (`Engine::complete_dead_member`, `TableCatalog::claim_completion`,
//! `recover_member_logless`, `refuse_while_claimed`,
//! `retire_stale_completion`), each step its own event, so that crashes,
//! pauses, partitions and lease expiry fall between any two:
//!
//! 1. The coordinator reads the view; for each server that is not a
//!    member and whose latest run is over and not completed, it sends
//!    2. a *claim*: etcd puts `logless-claim/<dead>` on the coordinator's
//!    membership lease if `member/<dead>` is absent (refused otherwise:
//!    `CompletionRefused`; another's claim is overwritten, as the real put
//!    does);
//! 3. the answer reaches the claimer (deferred while it is paused:
//!    `stop-at:completion-claimed`), which then, a few ms later (deferred
//!    too; nothing if it crashed), checks that the dead server's state
//!    file still names the run it read before claiming and that its claim
//!    still stands (`RunMovedOn`, `ClaimLost`), and
//! 4. in a step of its own (a pause may fall between:
//!    [`Config::stop_before_completion_write`]) writes the completion of
//!    that run, checking nothing again,
//! 5. and sends the release: `logless-claim/<dead>` deleted if it is
//!    still its own put, sent again until etcd answers;
//! 6. the tables are reassigned in a later round, whose view shows the
//!    run completed.
//!
//! A server that restarts completes its crashed run itself, no claim
//! (take or make), before it joins, and begins a new run when it joins.
//! A server that joins again in the same process begins a new run at its
//! first load under the new membership — or, if a completion of its run
//! stands, when it retires that completion — its old run synced whole
//! and *left*: completed by nobody, and a completion of it written late
//! is read by nobody. A server's load
//! (an ADD) is refused while `logless-claim/<server>` exists; and a load
//! by a server whose own current run has a completion (written while it
//! was not a member: paused, cut off) *retires* it at the load's end —
//! deletes it and syncs the journal whole — once no manifest replays the
//! run from below the completion's prefix, else the load is refused and
//! asked again later. Clients lose their backups now and then (a client
//! machine's crash, alone or with a server's): an acknowledged record
//! whose backup was lost and that the crash cut is lost, and reported as
//! a GAP.
//!
//! Tables cover key ranges ([`crate::keys`]): etcd holds each table's
//! range (`table/<id>`) apart from its owner key (`owner/<id>`), and a
//! counter names new tables. Every operation has a key (a function of its
//! id); clients address it to the table etcd's map says covers the key,
//! and a server runs and acknowledges it only in a table whose range as it
//! knows it covers the key (else WRONG_SERVER). Among the faults, servers
//! split and merge tables they serve ([`Server::split`],
//! [`Server::merge`]): the tables acknowledge nothing during the work (up
//! to a lease) and until the transaction's outcome. A split's transaction
//! compares the owner key's and range key's revisions, no `move/` key, the
//! counter, and the server's membership generation (`member/<server>` on
//! the lease it began under); it writes both ranges, the new table's owner
//! key (the same server) and both halves' manifests, and advances the
//! counter. A merge's compares both owner and range keys, the generation,
//! no `move/` or `home/` key and no borrow naming either; it writes the
//! union range and the merged manifest and deletes the upper table's keys.
//! Neither writes the (lower) table's owner key: R2's fence keeps its
//! revision. A transaction that etcd does not reach is refused (the
//! connection failed), and the tables serve as before.
//!
//! Servers checkpoint tables they serve now and then ([`Checkpoint`]):
//! the table's snapshot and the server's journal position become its
//! manifest, in a transaction that compares the owner key's revision, the
//! server's membership generation and the `manifest/` key's revision the
//! server last saw (as the real `commit_tables_at` does with
//! `TablesChange::manifest_revs`; splits and merges compare it too). One
//! checkpoint in five is *held* on the way to etcd: etcd applies it 0.3 to
//! 3 s later and its answer is lost, so that it may arrive after a later
//! checkpoint of the same table (the server gives the first up after
//! [`crate::server::CHECKPOINT_TIMEOUT_MS`] and reads the revision again)
//! — the reordered delivery of a commit. [`Config::manifest_compare`] off
//! shows the checks catch such a commit moving a manifest back.
//!
//! Clients number their operations (client, seq), and every client
//! retries: after a timeout (its server down or paused, or the reply
//! lost — 5% of replies are), or after WRONG_SERVER, it sends the same
//! (client, seq) again to whoever etcd's map names then (another server
//! after a move, a BORROW or a failover), backing off, until acknowledged
//! or [`MAX_ATTEMPTS`] are spent. A server answers a retry from a
//! remembered reply or runs it as [`crate::exactly_once::decide`] says:
//! the table's contents (a multiset of applied operations, carried by
//! snapshots and journal replays to each new owner) carry replies; each
//! server process remembers the replies it made, with the lease they were
//! made under.
//!
//! Checked on every operation run: it is applied to its table once (never
//! twice); on every retry answered "done": the answering server's table
//! holds it. Checked on every acknowledgement: the acknowledging server is the one
//! etcd names as the table's owner, the table's range in etcd covers the
//! key, and no other server may acknowledge for the table, nor any server
//! for the key in another table, at that instant (at most one
//! acknowledger, per table and per key). Checked at every transaction
//! that puts a manifest: a table's manifest never goes back — put again
//! pointing into the same journal, its position is the same or later.
//! Checked at every split or merge:
//! the ranges of the existing tables partition the key space, and the
//! owner key's revision is unchanged. Checked from
//! [`recovery_bound_ms`] after the faults' end: no table is unserved for
//! longer than a planned move's gap ([`stall_bound_ms`]). Checked at the
//! end, after the cluster settles: no move is pending (every move ended:
//! carried out, or its table reassigned); every table has
//! exactly one owner, a live member that serves it, and holds every
//! operation ever acknowledged for it (nothing acknowledged is lost — for
//! log-less servers, acknowledged = the reply reached the client, as the
//! backup rides on it; machine crashes included; exactly the operations
//! whose backups were lost with their record, reported as a GAP by the
//! completion, may be missing), each applied once
//! (nothing acknowledged is applied twice); no borrow is left and every
//! lent table went home (no `home/` key); the ranges partition the key
//! space, every operation a table holds has its key in the table's range,
//! none is applied twice over all tables, and every acknowledged one is
//! held by the table covering its key now (however many splits and merges
//! it went through). Log-less, checked at every
//! reassignment of a table from a server whose lease is gone: each of
//! that server's over runs is completed; at every load: an over run
//! holding records of the table past the manifest's position is replayed
//! only once completed (the completion comes before any new owner serves
//! the table), and every reader of a run replays the same decision (one
//! completion per run, until its own server retires it); at every
//! completion: the backups agree with the journal and each other, and the
//! run's own process does not serve (may acknowledge nothing: a
//! completion written behind its back would be the end every reader
//! takes); at every log-less acknowledgement: the run it is written to
//! has no completion. A failure names its seed; [`run`] with that seed
//! replays it exactly (`SEXTANT_SIM_TRACE=1` prints the faults and the
//! claims' steps). [`Config::complete_from_backups`] off
//! shows the checks catch a completion that leaves the backups out;
//! [`Config::completion_put_new`] off, two completions of one run;
//! [`Config::reshape_fault`] shows they catch a split or merge without
//! the generation compare, without the move/home/borrow compares, or
//! writing the halves' contents into each other's manifests.

use crate::coordinator::{completions_due, decide_moves, Action, ClusterView};
use crate::etcd::{Compare, Etcd, EtcdError, LeaseId, Write};
use crate::ids::{Epoch, Millis, Revision, ServerId, TableId};
use crate::keys::{check_partition, key_of, range_key, KeyRange, KEYSPACE, NEXT_TABLE_KEY};
use crate::logless::{self, Backups, Completion, Record};
use crate::server::{
    joined_key, manifest_key, member_key, move_key, owner_key, Begun, Checkpoint, Contents,
    JournalId, Manifest, Merge, Out, Owner, Reply, Server, Split, TableView, COORDINATOR_KEY,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

fn borrow_key(s: ServerId) -> String {
    format!("borrow/{}", s.0)
}

fn home_key(t: TableId) -> String {
    format!("home/{}", t.0)
}

/// The claim on completing a log-less server's run.
fn claim_key(s: ServerId) -> String {
    format!("logless-claim/{}", s.0)
}

/// The simulation's settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub servers: u32,
    pub tables: u32,
    pub ttl_ms: u64,
    pub margin_ms: u64,
    /// How long faults and client operations go on.
    pub duration_ms: u64,
    /// Then, with no faults, how long the cluster has to settle.
    pub settle_ms: u64,
    /// Faults on or off.
    pub faults: bool,
    /// Which runs have log-less servers.
    pub logless: Logless,
    /// Log-less: whether the completion of a dead journal takes the
    /// clients' backups (`false` only to show that the checks catch a
    /// completion that does not: new owners then replay the synced prefix
    /// alone).
    pub complete_from_backups: bool,
    /// Splits and merges among the faults (with `faults` only).
    pub reshapes: bool,
    /// A hole deliberately left in splits' and merges' transactions, to
    /// show what the checks catch (`None`: the protocol as it is).
    pub reshape_fault: Option<ReshapeFault>,
    /// Whether manifest commits (checkpoints, splits, merges) compare the
    /// `manifest/` key's revision as the server last saw it (`false` only
    /// to show that the checks catch a commit applied late moving a
    /// table's manifest back).
    pub manifest_compare: bool,
    /// Whether a handover is refused unless `member/<server>` is still on
    /// the lease of the generation that sent it (`false` only to show
    /// what the checks catch without it).
    pub handover_member_compare: bool,
    /// Whether a completion is written with `put_blob_new` (first writer
    /// wins; a later completer takes it). `false` only to show what the
    /// checks catch when two completers of one run both write (the
    /// restarting server and a claimer): readers replay two decisions.
    pub completion_put_new: bool,
    /// Whether a log-less server begins a new run when it joins again in
    /// the same process (`Engine::begin_serving`; at the load that first
    /// comes under the new membership, or when it retires a completion of
    /// its run). `false` only to show what the checks catch when the run
    /// goes on across a rejoin: a claimer paused between its last check
    /// and its write completes the live run.
    pub new_run_at_rejoin: bool,
    /// The test-only fault `stop-before:completion-write`: every claimer
    /// whose last check before writing a completion passed is paused
    /// there (SIGSTOP) for 1 to 2.5 leases, so its claim may run out with
    /// its lease before it writes.
    pub stop_before_completion_write: bool,
    /// A reassignment compares `joined/<old owner>`'s revision with its
    /// view's (R3): `false` only to show the race it closes — a stale
    /// view reassigning the table of a server that joined, began a new
    /// log-less run and lost its lease again since.
    pub compare_last_join: bool,
    /// How many moves the coordinator keeps pending at most
    /// ([`crate::coordinator::decide_moves`]; the real default,
    /// [`crate::coordinator::MAX_MOVES`], which with a few tables lets
    /// every balancing move of a round be in flight together).
    pub max_moves: usize,
    /// Servers other than the first join this late (ms): the first takes
    /// every table, then the others join and balance spreads the tables
    /// over them, many moves in flight at once; faults begin a second
    /// after. `None`: all start together.
    pub late_join_ms: Option<u64>,
    /// Whether servers BORROW tables (on by default; off to time
    /// balancing alone).
    pub borrows: bool,
}

/// What [`Config::reshape_fault`] leaves out of a split's or merge's
/// transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReshapeFault {
    /// It is not refused when begun in an earlier membership generation
    /// of its server (no compare on `member/<server>`'s lease).
    AnyGeneration,
    /// A merge does not compare the owner keys' revisions.
    NoOwnerCompare,
    /// Neither compares `move/` and `home/` keys or looks at borrows.
    NoMoveCompare,
    /// A split writes each half's contents into the other's manifest.
    SwappedManifests,
}

/// Which runs have log-less servers: journals synced in the background,
/// clients' backups, machine crashes and completions ([`crate::logless`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logless {
    Never,
    /// Half the seeds (drawn from the seed).
    BySeed,
    Always,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            servers: 4,
            tables: 12,
            ttl_ms: 2_000,
            margin_ms: 200,
            duration_ms: 20_000,
            settle_ms: 12_000,
            faults: true,
            logless: Logless::BySeed,
            complete_from_backups: true,
            reshapes: true,
            reshape_fault: None,
            manifest_compare: true,
            handover_member_compare: true,
            completion_put_new: true,
            new_run_at_rejoin: true,
            stop_before_completion_write: false,
            compare_last_join: true,
            max_moves: crate::coordinator::MAX_MOVES,
            late_join_ms: None,
            borrows: true,
        }
    }
}

/// What a run saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub acknowledged: usize,
    pub wrong_server: usize,
    pub moves: usize,
    /// The most moves pending at once (`move/` keys) that the run saw.
    pub most_moves_pending: usize,
    /// When (ms) the coordinator last asked for a balancing move.
    pub last_balance_move_ms: u64,
    /// Moves asked for because a server held more inodes.
    pub inode_moves: usize,
    /// Per table, the balancing moves the coordinator asked for (and etcd
    /// took), in order: from which server to which. With steady figures
    /// and no faults a table never goes back where balance took it from.
    pub balance_moves: BTreeMap<TableId, Vec<(ServerId, ServerId)>>,
    pub reassignments: usize,
    pub borrows: usize,
    pub lends: usize,
    pub crashes: usize,
    pub pauses: usize,
    pub etcd_restarts: usize,
    /// Client operations sent again (a timeout, a lost reply,
    /// WRONG_SERVER).
    pub retries: usize,
    /// Retries answered "done" from a remembered reply, not run again.
    pub answered_retries: usize,
    /// Retries run again because the reply they found was made under a
    /// lost lease (the generation rule).
    pub reruns_after_lost_lease: usize,
    /// Runs whose servers were log-less (1 or 0 for one run).
    pub logless: usize,
    /// Machine crashes (log-less): a crash that cut a journal's unsynced
    /// tail.
    pub machine_crashes: usize,
    /// Records the machine crashes cut.
    pub records_cut: usize,
    /// Dead journals completed, and the records their completions took
    /// from clients' backups.
    pub completions: usize,
    pub records_restored: usize,
    /// Acknowledged operations a completion took from backups (their
    /// record was cut, or not synced when the journal was completed).
    pub acknowledged_restored: usize,
    /// Backups lost by clients (a client's machine died; the client goes
    /// on).
    pub backups_lost: usize,
    /// Acknowledged operations lost because the only backup of their
    /// record was lost too: each in the GAP report of its journal's
    /// completion (a missing LSN range, or past the last LSN restored).
    pub acknowledged_in_gaps: usize,
    /// Of those, the ones inside a reported range (the others lie past
    /// the last LSN any backup restored).
    pub gaps_in_ranges: usize,
    /// Splits and merges committed, and those etcd refused (a move,
    /// borrow, failover or the like raced them).
    pub splits: usize,
    pub merges: usize,
    pub reshapes_refused: usize,
    /// Checkpoints committed, refused, and held on the way to etcd (their
    /// answers lost) to be applied late.
    pub checkpoints: usize,
    pub checkpoints_refused: usize,
    pub checkpoints_held: usize,
    /// Handovers held on the way to etcd (applied late, answers lost), and
    /// handovers refused because their server's generation had ended.
    pub handovers_held: usize,
    pub handovers_refused_stale: usize,
    /// Log-less claims (`logless-claim/<server>`) granted and refused (the
    /// server was a member again), completions written by a restarting
    /// server of its own crashed run, completers that found the run
    /// completed already (first writer wins), loads refused while a claim
    /// on their server's run stood, and completions retired by a server
    /// let back in.
    pub claims: usize,
    pub claims_refused: usize,
    /// Log-less: new runs begun by servers that joined again in the same
    /// process, and completions written late for a run its server had
    /// left that way (read by nobody).
    pub runs_begun_at_rejoin: usize,
    pub completions_of_left_runs: usize,
    pub completions_by_restart: usize,
    pub completions_taken: usize,
    pub loads_refused_claimed: usize,
    pub completions_retired: usize,
}

/// A journal in the shared store: its records (LSN = index), how many
/// are synced (all of them at once unless log-less), and the highest LSN
/// (+1) each table ever had in it — cut or not, for the checks.
#[derive(Clone, Debug, Default)]
struct Journal {
    records: Vec<Record>,
    synced: usize,
    sync_pending: bool,
    written: BTreeMap<TableId, usize>,
}

#[derive(Clone, Debug)]
enum Call {
    Join {
        sent_at: Millis,
    },
    KeepAlive {
        lease: LeaseId,
        sent_at: Millis,
    },
    Poll,
    LoadRead {
        table: TableId,
        owner_rev: Revision,
    },
    LoadCommit {
        table: TableId,
        owner_rev: Revision,
        /// The manifest's revision when it was read (0: absent).
        read_rev: Revision,
        manifest: Manifest,
    },
    Handover {
        table: TableId,
        owner_rev: Revision,
        to: ServerId,
        epoch: Epoch,
        snapshot: Contents,
        /// Where the snapshot stands in the server's journal: its
        /// generation's, at its end when the snapshot was taken. (Not the
        /// end at the commit: a machine crash in between may have cut the
        /// journal below records the snapshot holds, which a completion
        /// then restores at their LSNs — a replay from the lower position
        /// applied them twice: seed 562 while the faults had no lost
        /// backups yet; rare, 3,000 seeds of today's faults pass without
        /// this.)
        journal: JournalId,
        position: usize,
        /// Held on the way (arrives late) with its answer lost.
        held: bool,
    },
    /// A split's or merge's transaction (`position`: this server's
    /// journal's end when the contents were taken).
    Split {
        split: Split,
        journal: JournalId,
        position: usize,
    },
    Merge {
        merge: Merge,
        journal: JournalId,
        position: usize,
    },
    /// A checkpoint's transaction (`position`: this server's journal's
    /// end when the snapshot was taken). `held`: it was held on the way
    /// (it arrives late, whenever that is) and its answer is lost.
    Checkpoint {
        cp: Checkpoint,
        journal: JournalId,
        position: usize,
        held: bool,
    },
    CoordRead,
    /// The coordinator's writes.
    CoordWrite {
        actions: Vec<Action>,
    },
    /// Log-less: the claim on completing `dead`'s run: put
    /// `logless-claim/<dead>` on the caller's membership lease, if
    /// `member/<dead>` is absent (`TableCatalog::claim_completion`).
    /// `run`: the run `dead`'s state file named when the claimer read it,
    /// just before claiming — the one it completes (pinned).
    Claim {
        dead: ServerId,
        run: u64,
    },
    /// The claim's release: `logless-claim/<dead>` deleted if it is still
    /// the put of revision `rev` — this claimer's, never a later claim
    /// (`release_completion_claim`); sent again while etcd does not
    /// answer.
    Release {
        dead: ServerId,
        rev: Revision,
    },
}

#[derive(Clone, Debug)]
enum Answer {
    Joined {
        lease: LeaseId,
        sent_at: Millis,
        ttl: u64,
    },
    KeptAlive {
        lease: LeaseId,
        sent_at: Millis,
        ttl: u64,
    },
    LeaseLost {
        lease: LeaseId,
    },
    /// The owner keys, the ranges and the `manifest/` keys' revisions.
    Views(
        Vec<TableView>,
        Vec<(TableId, KeyRange, Revision)>,
        Vec<(TableId, Revision)>,
    ),
    Checkpointed {
        cp: Checkpoint,
        outcome: Option<Revision>,
    },
    SplitDone {
        split: Split,
        outcome: Option<(TableId, Revision)>,
    },
    MergeDone {
        merge: Merge,
        outcome: Option<Revision>,
    },
    LoadManifest {
        table: TableId,
        owner_rev: Revision,
        manifest: Option<Manifest>,
        read_rev: Revision,
    },
    LoadDone {
        table: TableId,
        owner_rev: Revision,
        ok: Option<Contents>,
    },
    HandedOver {
        table: TableId,
    },
    Coordinate(Option<ClusterView>),
    /// The claim on completing `dead`'s run was granted.
    Claimed {
        dead: ServerId,
        run: u64,
        rev: Revision,
    },
}

#[derive(Clone, Debug)]
enum Event {
    Tick(ServerId),
    /// A call arriving at etcd from a server (of an incarnation).
    AtEtcd {
        from: ServerId,
        inc: u64,
        call: Call,
    },
    /// An answer arriving at a server.
    AtServer {
        to: ServerId,
        inc: u64,
        answer: Answer,
    },
    /// A client operation (its (client, seq) as `op`) arriving at a
    /// server, sent for the `attempt`th time.
    Op {
        to: ServerId,
        table: TableId,
        op: u64,
        attempt: u32,
    },
    /// The acknowledgement check of an operation made durable (or of a
    /// retry answered from a remembered reply), and the reply to the
    /// client of that attempt.
    Ack {
        at: ServerId,
        inc: u64,
        table: TableId,
        op: u64,
        attempt: u32,
    },
    /// The client's timeout for an attempt (no reply yet), or its
    /// back-off after WRONG_SERVER: send again.
    Timeout {
        op: u64,
        attempt: u32,
    },
    Client,
    Fault,
    /// A server asks to BORROW a set of tables (if it is up and a member).
    Borrow(ServerId),
    /// It RETURNs them (its incarnation's borrow only).
    Return {
        server: ServerId,
        inc: u64,
    },
    Restart(ServerId),
    /// A server splits or merges tables it serves (drawn at random).
    Reshape,
    /// The split's or merge's work is done: its transaction goes to etcd.
    ReshapeSend {
        server: ServerId,
        inc: u64,
        call: Call,
    },
    EtcdUp,
    /// Log-less: the background sync of a journal (everything written so
    /// far is on disk).
    Sync(JournalId),
    /// A random server begins a checkpoint of a random table it serves.
    Checkpoint,
    /// Log-less: server `by` (of incarnation `inc`), holding — or having
    /// held — the claim on `dead`'s run, completes it in the shared store
    /// (`complete_member_journal`: read the run's valid prefix and the
    /// backups, `put_blob_new`), then releases the claim.
    Complete {
        by: ServerId,
        inc: u64,
        dead: ServerId,
        run: u64,
        rev: Revision,
    },
    /// Log-less: the write of the completion whose last check passed at
    /// [`Event::Complete`] (`put_blob_new`, nothing checked again: the
    /// real check and write are not atomic), then the release.
    CompleteWrite {
        by: ServerId,
        inc: u64,
        dead: ServerId,
        run: u64,
        rev: Revision,
    },
    /// Log-less: server `by` (of incarnation `inc`) sends its release of
    /// the claim of revision `rev` on `dead`'s run again, etcd not having
    /// answered the last one (`RELEASE_RETRY` in the real catalogue).
    ReleaseRetry {
        by: ServerId,
        inc: u64,
        dead: ServerId,
        rev: Revision,
    },
}

struct Node {
    server: Option<Server>,
    incarnation: u64,
    /// The server's latest run (what its state file names): its journal
    /// in the shared store is `JournalId { server, generation: run }`.
    /// A process's run goes on across joins (a pause, a partition); a
    /// restart begins a new one once the crashed one is completed.
    run: u64,
    /// The membership lease the run began serving under (`None`: it has
    /// not joined since the run began), and whether it has joined again
    /// since under another one (a new run is due before it serves).
    run_lease: Option<u64>,
    rejoined: bool,
    /// The run a restarted process begins when it joins.
    next_run: Option<u64>,
    paused_until: Millis,
    cut_from_etcd_until: Millis,
}

struct World {
    cfg: Config,
    rng: StdRng,
    /// The choices for what the retries add (which client, lost replies,
    /// back-offs, the retries themselves): their own generator, so that a
    /// seed's first attempts, faults, latencies and BORROWs are drawn
    /// exactly as before clients retried (see [`World::rng_for`]).
    client_rng: StdRng,
    now: Millis,
    queue: BinaryHeap<Reverse<(Millis, u64, usize)>>,
    events: Vec<Option<Event>>,
    seq: u64,
    etcd: Etcd,
    etcd_down_until: Option<Millis>,
    nodes: BTreeMap<ServerId, Node>,
    /// Since when each table has had no server that may acknowledge for
    /// it (tracked once the faults stop).
    unserved_since: BTreeMap<TableId, Millis>,
    /// Per run (`JournalId { server, generation: run }`, see
    /// [`World::run_of`]).
    journals: BTreeMap<JournalId, Journal>,
    /// Log-less: the completions of dead runs (separate objects in the
    /// shared store, written once: `put_blob_new`; deleted only by the
    /// run's own server when it retires a stale one).
    completions: BTreeMap<JournalId, Completion>,
    /// Which run each membership lease was joined under: a manifest names
    /// the journal by the lease ([`Server::journal`], which fences its
    /// commit); the store holds one journal per run.
    lease_run: BTreeMap<u64, u64>,
    /// Runs their servers left by joining again in the same process
    /// ([`Config::new_run_at_rejoin`]): synced whole then, completed by
    /// nobody, and a completion written for one late is read by nobody
    /// (the state file names a later run).
    left_runs: BTreeSet<JournalId>,
    /// The next id of a run begun at a rejoin (apart from restarts' ids).
    next_rejoin_run: u64,
    /// Which decision each run's completion is (a number per write), and
    /// which one the run's readers replayed (since the run's last
    /// retire): one decision per run, the same for every reader.
    decision: BTreeMap<JournalId, u64>,
    replayed_decision: BTreeMap<JournalId, u64>,
    decisions: u64,
    /// [`World::trace`] on.
    tracing: bool,
    /// Whether the servers are log-less, and the generator of what that
    /// adds (sync delays, machine crashes and their cuts), so that the
    /// main one draws as before.
    logless: bool,
    logless_rng: StdRng,
    /// The generator of the checkpoints (when, which, their latencies,
    /// which are held), so that the main one draws as before.
    checkpoint_rng: StdRng,
    /// Which handovers are held, and how long (likewise).
    handover_rng: StdRng,
    /// Per client, its backups of acknowledged records not synced yet.
    backups: Vec<Backups>,
    /// Where each operation's record was last written (journal, LSN).
    written_at: BTreeMap<u64, (JournalId, usize)>,
    /// Backups clients lost (their only holders: each operation's backup
    /// is its own client's).
    forgotten: BTreeMap<(JournalId, usize), Record>,
    /// Acknowledged operations a completion could not restore because
    /// their backups were lost: the only ones allowed to be missing.
    gaps: BTreeSet<u64>,
    /// A check that failed inside etcd's or the store's handling.
    violation: Option<String>,
    /// The `table/<id>` keys as etcd holds them (id order), and by where
    /// each range starts: read again after every write of them (the
    /// clients' map, and the tables that exist).
    ranges: Vec<(TableId, KeyRange, Revision)>,
    by_start: BTreeMap<u64, TableId>,
    /// Acknowledged operations (each is on the table covering its key).
    acked: BTreeSet<u64>,
    /// Per client, its next seq.
    next_seq: Vec<u64>,
    /// Operations sent so far (the clients take turns).
    turn: u64,
    /// Operations whose client has had no acknowledgement yet.
    pending: BTreeMap<u64, Pending>,
    report: Report,
    /// The request rates the coordinator balances by (none for even
    /// seeds; seeds 0 modulo 4 balance by table count). From their own
    /// generator, so a seed's faults and timings do not depend on them.
    rates: BTreeMap<TableId, u64>,
    /// The inode counts it balances by, likewise (for seeds 2 and 3
    /// modulo 4: with and without rates).
    inodes: BTreeMap<TableId, u64>,
}

/// How many clients send operations.
const CLIENTS: u32 = 8;
/// Clients `0..RETRYING` send an operation again until it is
/// acknowledged; any others would send each once (fire and forget). All of
/// them: many clients retrying around the same table in transit is where
/// exactly-once breaks if it does (2,000 fault seeds passed when this went
/// from one client to all; the run costs ~2.5× the CPU of one).
const RETRYING: u32 = CLIENTS;
/// How long a client waits for a reply to its first attempt before
/// sending again.
const CLIENT_TIMEOUT_MS: u64 = 400;
/// How often a client sends one operation at most.
const MAX_ATTEMPTS: u32 = 8;

/// An operation's id: its client and the client's number for it, the
/// same for every retry (as `client_id` and `seq` in the real protocol).
/// Packed densely: the ids are written into manifests, whose encoding
/// costs by their digits.
fn op_id(client: u32, seq: u64) -> u64 {
    seq * u64::from(CLIENTS) + u64::from(client)
}

fn describe(op: u64) -> String {
    let n = u64::from(CLIENTS);
    format!("(client {}, seq {})", op % n, op / n)
}

/// A client operation not acknowledged to its client yet.
struct Pending {
    /// The attempt whose reply (or timeout) counts.
    attempt: u32,
    /// When it was sent.
    sent: Millis,
}

/// Runs one seed; `Err` says which invariant broke, when, and how.
pub fn run(seed: u64, cfg: &Config) -> Result<Report, String> {
    let mut logless_rng = StdRng::seed_from_u64(seed ^ 0x1065_1e55);
    let logless = match cfg.logless {
        Logless::Never => false,
        Logless::BySeed => logless_rng.random_bool(0.5),
        Logless::Always => true,
    };
    let mut w = World {
        cfg: cfg.clone(),
        rng: StdRng::seed_from_u64(seed),
        client_rng: StdRng::seed_from_u64(seed ^ 0xc11e_4750),
        now: Millis(0),
        queue: BinaryHeap::new(),
        events: Vec::new(),
        seq: 0,
        etcd: Etcd::default(),
        etcd_down_until: None,
        nodes: BTreeMap::new(),
        unserved_since: BTreeMap::new(),
        journals: BTreeMap::new(),
        completions: BTreeMap::new(),
        lease_run: BTreeMap::new(),
        left_runs: BTreeSet::new(),
        next_rejoin_run: 1_000_000,
        decision: BTreeMap::new(),
        replayed_decision: BTreeMap::new(),
        decisions: 0,
        tracing: std::env::var_os("SEXTANT_SIM_TRACE").is_some(),
        logless,
        logless_rng,
        checkpoint_rng: StdRng::seed_from_u64(seed ^ 0xc4ec_4901),
        handover_rng: StdRng::seed_from_u64(seed ^ 0x4a4d_0e55),
        backups: vec![Backups::default(); CLIENTS as usize],
        written_at: BTreeMap::new(),
        forgotten: BTreeMap::new(),
        gaps: BTreeSet::new(),
        violation: None,
        acked: BTreeSet::new(),
        ranges: Vec::new(),
        by_start: BTreeMap::new(),
        next_seq: vec![1; CLIENTS as usize],
        turn: 0,
        pending: BTreeMap::new(),
        report: Report {
            logless: usize::from(logless),
            ..Report::default()
        },
        rates: if seed.is_multiple_of(2) {
            BTreeMap::new()
        } else {
            let mut r = StdRng::seed_from_u64(seed ^ 0x5eed_0a7e);
            (0..cfg.tables)
                .map(|t| (TableId(t), r.random_range(0..500)))
                .collect()
        },
        inodes: if seed % 4 < 2 {
            BTreeMap::new()
        } else {
            // Mostly small tables, some of up to a few full ones.
            let mut r = StdRng::seed_from_u64(seed ^ 0x1_0de5);
            (0..cfg.tables)
                .map(|t| {
                    let big = r.random_bool(0.3);
                    let n = r.random_range(0..if big { 100_000 } else { 2_000 });
                    (TableId(t), n)
                })
                .collect()
        },
    };
    for s in 0..cfg.servers {
        let id = ServerId(s);
        w.nodes.insert(
            id,
            Node {
                server: Some(Server::new(id, cfg.margin_ms)),
                incarnation: 0,
                run: 1,
                run_lease: None,
                rejoined: false,
                next_run: None,
                paused_until: Millis(0),
                cut_from_etcd_until: Millis(0),
            },
        );
        w.journals
            .entry(JournalId {
                server: id,
                generation: 1,
            })
            .or_default();
        let mut at = w.rng.random_range(0..50);
        if s > 0 {
            at += cfg.late_join_ms.unwrap_or(0);
        }
        w.at(at, Event::Tick(id));
    }
    w.at(100, Event::Client);
    if cfg.faults {
        w.at(cfg.late_join_ms.unwrap_or(0) + 1_000, Event::Fault);
    }
    if cfg.borrows {
        w.at(500, Event::Borrow(ServerId(0)));
    }
    if cfg.faults {
        w.at(300, Event::Checkpoint);
    }
    // The initial tables cover equal parts of the key space; the counter
    // names the next one.
    for t in 0..cfg.tables {
        let range = KeyRange {
            start: KEYSPACE * u64::from(t) / u64::from(cfg.tables),
            end: KEYSPACE * u64::from(t + 1) / u64::from(cfg.tables),
        };
        w.etcd
            .put(&range_key(TableId(t)), &range.encode(), None)
            .map_err(|e| format!("seed {seed}: {e:?}"))?;
    }
    w.etcd
        .put(NEXT_TABLE_KEY, &cfg.tables.to_string(), None)
        .map_err(|e| format!("seed {seed}: {e:?}"))?;
    w.check_ranges();
    if cfg.faults && cfg.reshapes {
        w.at(700, Event::Reshape);
    }
    let end = Millis(cfg.duration_ms + cfg.settle_ms);
    // At the end a balancing move may be half done: the cluster has until
    // a move's gap ([`stall_bound_ms`]) more to show every table served.
    let last_chance = end.plus(stall_bound_ms(cfg));
    while let Some(Reverse((t, _, i))) = w.queue.pop() {
        if t > end && (t > last_chance || w.check_settled().is_ok()) {
            break;
        }
        w.now = t;
        let e = w.events[i].take().expect("each event runs once");
        w.handle(e).map_err(|e| format!("seed {seed}: {e}"))?;
        if let Some(e) = w.violation.take() {
            return Err(format!("seed {seed}: {e}"));
        }
        w.check_available()
            .map_err(|e| format!("seed {seed}: {e}"))?;
    }
    w.check_settled()
        .map_err(|e| format!("seed {seed}: after settling: {e}"))?;
    if !cfg.faults {
        // The map converged: the coordinator wants no further move.
        let wanted = decide_moves(&w.cluster_view(), 2, cfg.max_moves);
        if !wanted.is_empty() {
            return Err(format!(
                "seed {seed}: after settling the coordinator still asks {wanted:?}"
            ));
        }
    }
    Ok(w.report)
}

/// The longest a table may go unserved once the cluster has recovered:
/// a planned move's gap between the old owner's handover and the new
/// owner's load (two polls of etcd, and their round trips).
pub fn stall_bound_ms(cfg: &Config) -> u64 {
    2 * (cfg.ttl_ms / 4) + 200
}

/// How long after the faults stop every table must be served again: the
/// longest fault still running then (a pause or a crash of up to two
/// leases), then a lease to expire and 2 s for the coordinator to see it,
/// reassign, and the new owner to load (the issue's failover target:
/// TTL + 2 s after the failure is visible).
pub fn recovery_bound_ms(cfg: &Config) -> u64 {
    3 * cfg.ttl_ms + 2_000
}

impl World {
    /// `SEXTANT_SIM_TRACE=1`: the faults and the log-less claim's steps
    /// on stderr (to read a failing seed's story).
    fn trace(&self, what: impl FnOnce() -> String) {
        if self.tracing {
            eprintln!("t={} ms: {}", self.now.0, what());
        }
    }

    fn at(&mut self, after_ms: u64, e: Event) {
        self.seq += 1;
        self.events.push(Some(e));
        let i = self.events.len() - 1;
        self.queue
            .push(Reverse((self.now.plus(after_ms), self.seq, i)));
    }

    /// The generator for attempt `attempt` of a client operation: the
    /// first attempt draws from the seed's main one, as one-shot
    /// operations did; retries from [`World::client_rng`], so that they do
    /// not shift what the main one draws next (a seed without faults runs
    /// the protocol exactly as before retries existed).
    fn rng_for(&mut self, attempt: u32) -> &mut StdRng {
        if attempt == 0 {
            &mut self.rng
        } else {
            &mut self.client_rng
        }
    }

    fn latency(&mut self) -> u64 {
        self.rng.random_range(1..20)
    }

    fn faulting(&self) -> bool {
        self.now.0 < self.cfg.duration_ms
    }

    fn etcd_reachable(&self, s: ServerId) -> bool {
        self.etcd_down_until.is_none()
            && self
                .nodes
                .get(&s)
                .is_some_and(|n| self.now >= n.cut_from_etcd_until)
    }

    /// An event for server `s` while it is paused waits until it wakes.
    fn deferred(&mut self, s: ServerId, e: &Event) -> bool {
        let until = self.nodes[&s].paused_until;
        if self.now < until {
            let wait = until.0 - self.now.0;
            self.at(wait, e.clone());
            return true;
        }
        false
    }

    fn handle(&mut self, e: Event) -> Result<(), String> {
        match e {
            Event::Tick(s) => {
                if self.deferred(s, &Event::Tick(s)) {
                    return Ok(());
                }
                let now = self.now;
                let inc = self.nodes[&s].incarnation;
                if let Some(server) = self.nodes.get_mut(&s).and_then(|n| n.server.as_mut()) {
                    let outs = server.tick(now);
                    self.perform(s, inc, outs);
                    self.send(s, inc, Call::Poll);
                    self.send(s, inc, Call::CoordRead);
                    let next = self.cfg.ttl_ms / 4;
                    self.at(next, Event::Tick(s));
                }
            }
            Event::AtEtcd { from, inc, call } => {
                let answer = if self.etcd_reachable(from) {
                    self.etcd.expire(self.now);
                    self.at_etcd(from, call)
                } else {
                    // Not executed: a split or merge learns it (the
                    // connection was refused) and serves its tables again.
                    match call {
                        Call::Split { split, .. } => Some(Answer::SplitDone {
                            split,
                            outcome: None,
                        }),
                        Call::Merge { merge, .. } => Some(Answer::MergeDone {
                            merge,
                            outcome: None,
                        }),
                        Call::Checkpoint {
                            cp, held: false, ..
                        } => Some(Answer::Checkpointed { cp, outcome: None }),
                        Call::Release { dead, rev } => {
                            // Sent again every 500 ms while etcd does not
                            // answer, as the real release (sent once, a
                            // lost release left the claim standing: the
                            // simulation's seeds 26, 131, … before the fix).
                            self.trace(|| {
                                format!(
                                    "{from}'s release of logless-claim/{} fails; sent again",
                                    dead.0
                                )
                            });
                            self.at(
                                500,
                                Event::ReleaseRetry {
                                    by: from,
                                    inc,
                                    dead,
                                    rev,
                                },
                            );
                            None
                        }
                        _ => None,
                    }
                };
                if let Some(answer) = answer {
                    let l = self.latency();
                    self.at(
                        l,
                        Event::AtServer {
                            to: from,
                            inc,
                            answer,
                        },
                    );
                }
            }
            Event::AtServer { to, inc, answer } => {
                let e = Event::AtServer { to, inc, answer };
                if self.deferred(to, &e) {
                    return Ok(());
                }
                let Event::AtServer { answer, .. } = e else {
                    unreachable!()
                };
                if self.nodes[&to].incarnation == inc {
                    self.at_server(to, inc, answer);
                }
            }
            Event::Op {
                to,
                table,
                op,
                attempt,
            } => {
                let e = Event::Op {
                    to,
                    table,
                    op,
                    attempt,
                };
                if self.deferred(to, &e) {
                    self.no_reply(op, attempt);
                    return Ok(());
                }
                let inc = self.nodes[&to].incarnation;
                let Some(server) = self.nodes.get_mut(&to).and_then(|n| n.server.as_mut()) else {
                    // Down: the client's timeout sends it again.
                    self.no_reply(op, attempt);
                    return Ok(());
                };
                let ran_before = attempt > 0 && server.made_under(op).is_some();
                let journal = server.journal();
                match server.begin_key(table, key_of(op), op) {
                    Begun::Run { applied, .. } => {
                        if applied > 1 {
                            return Err(format!(
                                "t={} ms: operation {} on {table} applied {applied} times \
                                 (attempt {attempt}, at {to})",
                                self.now.0,
                                describe(op)
                            ));
                        }
                        if ran_before {
                            self.report.reruns_after_lost_lease += 1;
                        }
                        // Written to this server's journal in the shared
                        // store (synced at once, or later if log-less).
                        self.append(journal, Record { table, op });
                    }
                    Begun::Answered => {
                        // "Done" only for what is in the table's contents.
                        if !server.contents(table).is_some_and(|c| c.contains(op)) {
                            return Err(format!(
                                "t={} ms: a retry of {} on {table} was answered \"done\" by {to}, \
                                 which does not hold it in the table",
                                self.now.0,
                                describe(op)
                            ));
                        }
                        self.report.answered_retries += 1;
                    }
                    Begun::WrongServer => {
                        self.report.wrong_server += 1;
                        self.client_reply(op, attempt, false);
                        return Ok(());
                    }
                }
                let d = self.rng_for(attempt).random_range(0..5);
                self.at(
                    d,
                    Event::Ack {
                        at: to,
                        inc,
                        table,
                        op,
                        attempt,
                    },
                );
            }
            Event::Ack {
                at,
                inc,
                table,
                op,
                attempt,
            } => {
                let e = Event::Ack {
                    at,
                    inc,
                    table,
                    op,
                    attempt,
                };
                if self.deferred(at, &e) {
                    self.no_reply(op, attempt);
                    return Ok(());
                }
                if self.nodes[&at].incarnation != inc {
                    self.no_reply(op, attempt);
                    return Ok(());
                }
                let now = self.now;
                let Some(server) = self.nodes[&at].server.as_ref() else {
                    self.no_reply(op, attempt);
                    return Ok(());
                };
                if server.acknowledge_key(table, key_of(op), now) == Reply::Ack {
                    let journal = server.journal();
                    self.check_single_acknowledger(at, table, key_of(op))?;
                    // Some replies are lost on the way: the client's
                    // timeout sends the operation again. (Log-less, what
                    // counts is what reaches the client: a reply lost
                    // carried the only backup of a record not synced.)
                    let lost = self.client_rng.random_bool(0.05);
                    if !self.logless || !lost {
                        self.acked.insert(op);
                    }
                    self.report.acknowledged += 1;
                    if lost {
                        self.no_reply(op, attempt);
                        return Ok(());
                    }
                    if self.logless {
                        // Every reader of a completed run stops at its
                        // completion: nothing may be acknowledged into it.
                        let run = self.run_of(journal);
                        if let Some(c) = self.completions.get(&run) {
                            return Err(format!(
                                "t={} ms: {at} acknowledged {} into {run}, which was completed \
                                 through LSN {}: every reader stops there",
                                self.now.0,
                                describe(op),
                                c.prefix
                            ));
                        }
                        self.keep_backup(op, table, journal);
                    }
                    self.client_reply(op, attempt, true);
                } else {
                    self.report.wrong_server += 1;
                    self.client_reply(op, attempt, false);
                }
            }
            Event::Timeout { op, attempt } => {
                if self.pending.get(&op).is_some_and(|p| p.attempt == attempt) {
                    self.resend(op);
                }
            }
            Event::Client => {
                if self.faulting() {
                    self.client_op();
                    let next = self.rng.random_range(1..6);
                    self.at(next, Event::Client);
                }
            }
            Event::Fault => {
                if self.faulting() {
                    self.fault();
                    let next = self.rng.random_range(300..1_500);
                    self.at(next, Event::Fault);
                }
            }
            Event::Borrow(s) => {
                if self.faulting() {
                    self.borrow(s);
                    let next = self.rng.random_range(100..800);
                    let who = ServerId(self.rng.random_range(0..self.cfg.servers));
                    self.at(next, Event::Borrow(who));
                }
            }
            Event::Return { server, inc } => {
                let e = Event::Return { server, inc };
                if self.deferred(server, &e) {
                    return Ok(());
                }
                // A crashed incarnation's borrow goes with its lease; a
                // server cut from etcd RETURNs once it reaches it again.
                if self.nodes[&server].incarnation == inc {
                    if self.etcd_reachable(server) {
                        self.etcd.expire(self.now);
                        let _ = self.txn(&[], &[Write::Delete(borrow_key(server))]);
                    } else {
                        self.at(200, e);
                    }
                }
            }
            Event::Restart(s) => {
                // Log-less: the crashed run is completed by the server
                // itself before anything serves (no claim: first writer
                // wins against a claimer's), then a new run begins.
                let crashed = JournalId {
                    server: s,
                    generation: self.nodes[&s].run,
                };
                if self.logless && self.journals.contains_key(&crashed) {
                    let before = self.decision.get(&crashed).copied();
                    self.complete_run(crashed, "its own restart");
                    if self.decision.get(&crashed).copied() != before {
                        self.report.completions_by_restart += 1;
                    }
                }
                let n = self.nodes.get_mut(&s).expect("known server");
                n.incarnation += 1;
                // The new run is named once the process has joined (the
                // real server joins, then opens its engine and recovers):
                // until then the state file names the crashed run, which
                // is completed.
                n.next_run = Some(n.incarnation + 1);
                n.run_lease = None;
                n.rejoined = false;
                let run = n.incarnation + 1;
                n.server = Some(Server::new(s, self.cfg.margin_ms));
                self.trace(|| format!("{s} restarts (run {run} once it joins)"));
                self.at(1, Event::Tick(s));
            }
            Event::ReleaseRetry { by, inc, dead, rev } => {
                let e = Event::ReleaseRetry { by, inc, dead, rev };
                if self.deferred(by, &e) {
                    return Ok(());
                }
                // The retrying thread dies with its process.
                if self.nodes[&by].incarnation == inc && self.nodes[&by].server.is_some() {
                    self.send(by, inc, Call::Release { dead, rev });
                }
            }
            Event::Complete {
                by,
                inc,
                dead,
                run,
                rev,
            } => {
                let e = Event::Complete {
                    by,
                    inc,
                    dead,
                    run,
                    rev,
                };
                if self.deferred(by, &e) {
                    return Ok(());
                }
                // A completer that crashed meanwhile completes nothing
                // (its claim goes with its lease).
                if self.nodes[&by].incarnation != inc || self.nodes[&by].server.is_none() {
                    return Ok(());
                }
                // The run read before the claim (pinned,
                // `complete_member_run`): if the state file names another
                // run now — the server restarted and completed that one
                // itself, or joined again and began a new one — nothing is
                // written (`RunMovedOn`).
                // Right before the write, the claim is read again
                // (`TableCatalog::claim_held`): gone with a lease that ran
                // out while the claimer was paused, or etcd not reachable,
                // nothing is written (`ClaimLost`).
                // The checks and the write are not atomic: the write is a
                // step of its own ([`Event::CompleteWrite`]), and a pause
                // may fall between them.
                self.etcd.expire(self.now);
                let held = self.etcd_reachable(by)
                    && self
                        .etcd
                        .get(&claim_key(dead))
                        .is_some_and(|e| e.mod_revision == rev);
                if self.nodes[&dead].run != run {
                    self.trace(|| {
                        format!("{by} does not complete {dead}'s run {run}: it moved on")
                    });
                } else if !held {
                    self.trace(|| {
                        format!("{by} does not complete {dead}'s run {run}: its claim is gone")
                    });
                } else if self.logless {
                    // (Among the faults only: their end bounds recovery.)
                    if self.cfg.stop_before_completion_write && self.faulting() {
                        let ttl = self.cfg.ttl_ms;
                        let d = self.logless_rng.random_range(ttl..5 * ttl / 2);
                        let n = self.nodes.get_mut(&by).expect("known server");
                        n.paused_until = self.now.plus(d);
                        self.report.pauses += 1;
                        self.trace(|| {
                            format!(
                                "{by} checked its claim on {dead}'s run {run} and is paused for \
                                 {d} ms before the write (stop-before:completion-write)"
                            )
                        });
                    }
                    self.at(
                        0,
                        Event::CompleteWrite {
                            by,
                            inc,
                            dead,
                            run,
                            rev,
                        },
                    );
                    return Ok(());
                }
                self.send(by, inc, Call::Release { dead, rev });
            }
            Event::CompleteWrite {
                by,
                inc,
                dead,
                run,
                rev,
            } => {
                let e = Event::CompleteWrite {
                    by,
                    inc,
                    dead,
                    run,
                    rev,
                };
                if self.deferred(by, &e) {
                    return Ok(());
                }
                if self.nodes[&by].incarnation != inc || self.nodes[&by].server.is_none() {
                    return Ok(());
                }
                let run = JournalId {
                    server: dead,
                    generation: run,
                };
                self.complete_run(run, &format!("{by} (claimer)"));
                self.send(by, inc, Call::Release { dead, rev });
            }
            Event::Reshape => {
                if self.faulting() {
                    self.reshape();
                    let next = self.rng.random_range(200..1_200);
                    self.at(next, Event::Reshape);
                }
            }
            Event::ReshapeSend { server, inc, call } => {
                let e = Event::ReshapeSend { server, inc, call };
                if self.deferred(server, &e) {
                    return Ok(());
                }
                let Event::ReshapeSend { call, .. } = e else {
                    unreachable!()
                };
                if self.nodes[&server].incarnation == inc {
                    self.send(server, inc, call);
                }
            }
            Event::EtcdUp => {
                self.etcd_down_until = None;
                self.etcd.restart(self.now);
            }
            Event::Sync(j) => {
                if let Some(jr) = self.journals.get_mut(&j) {
                    jr.synced = jr.records.len();
                    jr.sync_pending = false;
                }
            }
            Event::Checkpoint => {
                if self.faulting() {
                    self.checkpoint();
                    let next = self.checkpoint_rng.random_range(50..500);
                    self.at(next, Event::Checkpoint);
                }
            }
        }
        Ok(())
    }

    /// A random server (up, not paused, a member) begins a checkpoint of a
    /// random table it serves (while the faults go on); one in five is held
    /// on the way to etcd — applied late (0.3 to 3 s), its answer lost —
    /// so that it may arrive after a later checkpoint of the same table
    /// (the server gives it up after [`CHECKPOINT_TIMEOUT_MS`], reads the
    /// manifest's revision again, and checkpoints again).
    ///
    /// [`CHECKPOINT_TIMEOUT_MS`]: crate::server::CHECKPOINT_TIMEOUT_MS
    fn checkpoint(&mut self) {
        let s = ServerId(self.checkpoint_rng.random_range(0..self.cfg.servers));
        let pick = self.checkpoint_rng.random_range(0..1_000usize);
        let held = self.checkpoint_rng.random_bool(0.2);
        let delay = if held {
            self.checkpoint_rng.random_range(300..3_000)
        } else {
            self.checkpoint_rng.random_range(1..20)
        };
        let now = self.now;
        let inc = self.nodes[&s].incarnation;
        if now < self.nodes[&s].paused_until {
            return;
        }
        let Some(server) = self.nodes.get_mut(&s).and_then(|n| n.server.as_mut()) else {
            return;
        };
        if server.lease().is_none() {
            return;
        }
        let serving: Vec<TableId> = server.serving().collect();
        if serving.is_empty() {
            return;
        }
        let journal = server.journal();
        let Some(cp) = server.checkpoint(serving[pick % serving.len()], now) else {
            return;
        };
        let position = self.end_of(journal);
        if held {
            self.report.checkpoints_held += 1;
        }
        self.at(
            delay,
            Event::AtEtcd {
                from: s,
                inc,
                call: Call::Checkpoint {
                    cp,
                    journal,
                    position,
                    held,
                },
            },
        );
    }

    /// etcd runs a checkpoint's transaction: conditional on the owner key
    /// (R2), the server's membership generation, and the manifest's
    /// revision as the server last saw it (unless
    /// [`Config::manifest_compare`] is off); it puts the manifest.
    fn commit_checkpoint(
        &mut self,
        from: ServerId,
        cp: &Checkpoint,
        journal: JournalId,
        position: usize,
    ) -> Option<Revision> {
        let mut compares = vec![Compare::ModRevision(owner_key(cp.table), cp.owner_rev)];
        if self.cfg.manifest_compare {
            compares.push(Compare::ModRevision(
                manifest_key(cp.table),
                cp.manifest_rev,
            ));
        }
        let manifest = Manifest {
            snapshot: cp.snapshot.clone(),
            journal,
            position,
        };
        let r = if self.same_generation(from, journal) {
            self.txn(
                &compares,
                &[Write::Put {
                    key: manifest_key(cp.table),
                    value: manifest.encode(),
                    lease: None,
                }],
            )
            .ok()
        } else {
            None
        };
        if r.is_some() {
            self.report.checkpoints += 1;
        } else {
            self.report.checkpoints_refused += 1;
        }
        r
    }

    /// etcd's transaction, and the check that no manifest it puts goes
    /// back: a `manifest/` key put again pointing into the same journal
    /// as before points at the same position or a later one. (A manifest
    /// going back names an older snapshot — in the real store one that a
    /// later commit let be deleted — and an older journal position.)
    fn txn(&mut self, compares: &[Compare], writes: &[Write]) -> Result<Revision, EtcdError> {
        let position = |e: Option<&crate::etcd::Entry>| Manifest::position_of(&e?.value);
        let before: Vec<(&String, (JournalId, usize))> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Put { key, .. } if key.starts_with("manifest/") => {
                    Some((key, position(self.etcd.get(key))?))
                }
                _ => None,
            })
            .collect();
        let r = self.etcd.txn(compares, writes)?;
        for (key, (journal, old)) in before {
            match position(self.etcd.get(key)) {
                Some((j, new)) if j == journal && new < old => {
                    self.violation = Some(format!(
                        "t={} ms: {key} went back: from {journal} at position {old} to position {new}",
                        self.now.0
                    ));
                }
                _ => {}
            }
        }
        Ok(r)
    }

    /// Appends `r` to journal `j` in the shared store: synced at once, or
    /// (log-less) by a background sync a few ms later.
    fn append(&mut self, j: JournalId, r: Record) {
        let j = self.run_of(j);
        let logless = self.logless;
        let jr = self.journals.entry(j).or_default();
        let lsn = jr.records.len();
        jr.records.push(r);
        jr.written.insert(r.table, lsn + 1);
        let schedule = logless && !jr.sync_pending;
        if !logless {
            jr.synced = jr.records.len();
        }
        jr.sync_pending |= schedule;
        self.written_at.insert(r.op, (j, lsn));
        if schedule {
            let d = self.logless_rng.random_range(1..10);
            self.at(d, Event::Sync(j));
        }
    }

    /// The acknowledgement of `op` on `table` by the server appending to
    /// `journal` reaches its client, with the journal's synced watermark:
    /// the client drops the backups it shows synced, and keeps one of the
    /// op's record if it is in that journal and not synced. (A record
    /// elsewhere reached this server by a replay, durable in the manifest
    /// that load committed.)
    fn keep_backup(&mut self, op: u64, table: TableId, journal: JournalId) {
        let journal = self.run_of(journal);
        let watermark = self.journals.get(&journal).map_or(0, |j| j.synced);
        let b = &mut self.backups[(op % u64::from(CLIENTS)) as usize];
        match self.written_at.get(&op) {
            Some(&(j, lsn)) if j == journal => {
                b.acknowledged(j, lsn, Record { table, op }, watermark)
            }
            _ => b.synced(journal, watermark),
        }
    }

    /// A random client loses its backups (its machine died; the client
    /// goes on, as the same client).
    fn client_loses_backups(&mut self) {
        let c = self.logless_rng.random_range(0..CLIENTS) as usize;
        for (j, lsn, r) in self.backups[c].all() {
            self.forgotten.insert((j, lsn), r);
            self.report.backups_lost += 1;
        }
        self.backups[c].clear();
    }

    /// Server `s`'s machine crashed: each of its journals loses its
    /// unsynced tail from a random point on (some, all or none of it);
    /// what survives is on disk. Now and then a client's machine goes
    /// down with it (one power failure): its backups are lost too.
    fn machine_crash(&mut self, s: ServerId) {
        self.report.machine_crashes += 1;
        if self.logless_rng.random_bool(0.2) {
            self.client_loses_backups();
        }
        let range = JournalId {
            server: s,
            generation: 0,
        }..=JournalId {
            server: s,
            generation: u64::MAX,
        };
        for (_, jr) in self.journals.range_mut(range) {
            let cut = self.logless_rng.random_range(jr.synced..=jr.records.len());
            self.report.records_cut += jr.records.len() - cut;
            jr.records.truncate(cut);
            jr.synced = cut;
        }
    }

    /// The run a journal named by its membership lease belongs to (the
    /// shared store's journal: one per run). Generation 0 (no lease yet)
    /// names nothing written.
    fn run_of(&self, j: JournalId) -> JournalId {
        JournalId {
            server: j.server,
            generation: self.lease_run.get(&j.generation).copied().unwrap_or(0),
        }
    }

    /// How many records the journal of `j`'s run holds.
    fn end_of(&self, j: JournalId) -> usize {
        self.journals
            .get(&self.run_of(j))
            .map_or(0, |jr| jr.records.len())
    }

    /// Is run `r` over for readers: its process is gone (crashed, or
    /// restarted into a later run), or its server is not a member (its
    /// lease is gone: paused, cut off)?
    fn run_dead(&self, r: JournalId) -> bool {
        let n = &self.nodes[&r.server];
        n.server.is_none()
            || n.run != r.generation
            || self.etcd.get(&member_key(r.server)).is_none()
    }

    /// Does run `r` wait for its completion: log-less, begun, over
    /// ([`World::run_dead`]), not completed yet?
    fn awaits_completion(&self, r: JournalId) -> bool {
        self.logless
            && self.journals.contains_key(&r)
            && !self.completions.contains_key(&r)
            && !self.left_runs.contains(&r)
            && self.run_dead(r)
    }

    /// Server `s`'s runs that wait for their completion.
    fn uncompleted(&self, s: ServerId) -> impl Iterator<Item = JournalId> + '_ {
        self.journals
            .keys()
            .filter(move |j| j.server == s && self.awaits_completion(**j))
            .copied()
    }

    /// Run `r` is completed (`complete_member_journal`): its synced
    /// prefix and the backups every client hands in for it, written with
    /// `put_blob_new` — a completion there already stands (first writer
    /// wins) and is taken. Whoever writes it: a claimer (the coordinator)
    /// or the run's own server restarting.
    ///
    /// Checked: a completion is never written while the run's own process
    /// may acknowledge (it serves: every reader would stop at the
    /// completion, below what it acknowledges from then on). The claim
    /// exists for this: it needs the server absent, and the server takes
    /// no table while it stands.
    fn complete_run(&mut self, r: JournalId, by: &str) {
        let Some(jr) = self.journals.get(&r) else {
            return;
        };
        if self.left_runs.contains(&r) {
            // Its server joined again and began a new run: the state
            // file names that one, and every reader takes the completion
            // of the run it names. Written, read by nobody.
            self.report.completions_of_left_runs += 1;
            self.trace(|| format!("{by} completes {r}, a run its server left (read by nobody)"));
            return;
        }
        if self.completions.contains_key(&r) && self.cfg.completion_put_new {
            self.report.completions_taken += 1;
            return;
        }
        let backups: Vec<(usize, Record)> = if self.cfg.complete_from_backups {
            self.backups.iter().flat_map(|b| b.of(r)).collect()
        } else {
            Vec::new()
        };
        match logless::complete(&jr.records[..jr.synced], backups) {
            Ok(c) => {
                // Records backed up only by lost backups, not in the
                // prefix nor restored: lost, and reported as a gap.
                let gaps = c.gaps();
                let restored: BTreeSet<usize> = c.tail.iter().map(|(l, _)| *l).collect();
                let lost = self
                    .forgotten
                    .range((r, c.prefix)..=(r, usize::MAX))
                    .filter(|((_, l), _)| !restored.contains(l));
                for ((_, lsn), rec) in lost {
                    if self.acked.contains(&rec.op) {
                        self.gaps.insert(rec.op);
                        self.report.acknowledged_in_gaps += 1;
                        if gaps.iter().any(|(a, b)| (a..=b).contains(&lsn)) {
                            self.report.gaps_in_ranges += 1;
                        }
                    }
                }
                self.report.completions += 1;
                self.report.records_restored += c.tail.len();
                self.report.acknowledged_restored += c
                    .tail
                    .iter()
                    .filter(|(_, rec)| self.acked.contains(&rec.op))
                    .count();
                let n = &self.nodes[&r.server];
                let serving = n.run == r.generation
                    && n.server
                        .as_ref()
                        .is_some_and(|sv| sv.serving().any(|t| sv.may_ack(t, self.now)));
                if serving && self.violation.is_none() {
                    self.violation = Some(format!(
                        "t={} ms: {by} completed {r} through LSN {} while {} serves that run \
                         (a completion behind the back of a server that acknowledges)",
                        self.now.0, c.prefix, r.server
                    ));
                }
                self.trace(|| format!("{by} completes {r} through LSN {}", c.prefix));
                self.completions.insert(r, c);
                self.decisions += 1;
                self.decision.insert(r, self.decisions);
            }
            Err(e) => {
                self.violation = Some(format!(
                    "t={} ms: the backups for {r} contradict it: {e}",
                    self.now.0
                ))
            }
        }
    }

    /// A server that loads a table (an ADD) while its own run has a
    /// completion someone wrote while it was not a member retires it
    /// (`retire_stale_completion`) — deletes it, its journal synced
    /// whole — once no manifest replays the run from below the
    /// completion's prefix; until then the load is refused. `false`:
    /// refused.
    fn retire_stale_completion(&mut self, s: ServerId) -> bool {
        let run = JournalId {
            server: s,
            generation: self.nodes[&s].run,
        };
        let Some(c) = self.completions.get(&run) else {
            return true;
        };
        // Only a member retires it (an ADD runs under a grant of the
        // membership it joined under; a server whose lease is gone
        // retires nothing).
        let lease = self.nodes[&s].server.as_ref().and_then(Server::lease);
        let member = self.etcd.get(&member_key(s)).and_then(|e| e.lease);
        if lease.is_none() || lease != member {
            return false;
        }
        let below = self.etcd.range("manifest/").any(|(_, e)| {
            Manifest::decode(&e.value)
                .is_some_and(|m| self.run_of(m.journal) == run && m.position < c.prefix)
        });
        if below {
            return false;
        }
        self.trace(|| {
            format!(
                "{s} retires the completion of {run} (through LSN {})",
                c.prefix
            )
        });
        self.completions.remove(&run);
        self.decision.remove(&run);
        self.replayed_decision.remove(&run);
        if let Some(jr) = self.journals.get_mut(&run) {
            jr.synced = jr.records.len();
        }
        self.report.completions_retired += 1;
        if self.cfg.new_run_at_rejoin {
            // The run does not go on: a completion of it written late (a
            // second claimer paused before its write) is read by nobody.
            self.begin_run_at_rejoin(s);
        }
        true
    }

    /// Server `s`, joined again in the same process, begins a new run
    /// (`Engine::begin_serving`, [`Config::new_run_at_rejoin`]): the old
    /// run's journal synced whole, a new run named in the state file. The
    /// real journal is one file whose LSNs go on; here each run has its
    /// own, so the new one begins as a copy of the old one's records (its
    /// positions go on), and the current lease names it from now on (the
    /// server's loads, checkpoints and writes). The old run is *left*:
    /// completed by nobody, and a completion written for it late is read
    /// by nobody.
    fn begin_run_at_rejoin(&mut self, s: ServerId) {
        let Some(lease) = self.nodes[&s].server.as_ref().and_then(Server::lease) else {
            return;
        };
        let old = JournalId {
            server: s,
            generation: self.nodes[&s].run,
        };
        let new_run = self.next_rejoin_run;
        self.next_rejoin_run += 1;
        let jr = self.journals.entry(old).or_default();
        jr.synced = jr.records.len();
        let copy = Journal {
            records: jr.records.clone(),
            synced: jr.records.len(),
            sync_pending: false,
            written: jr.written.clone(),
        };
        self.journals.insert(
            JournalId {
                server: s,
                generation: new_run,
            },
            copy,
        );
        self.left_runs.insert(old);
        self.lease_run.insert(lease.0, new_run);
        let n = self.nodes.get_mut(&s).expect("known server");
        n.run = new_run;
        n.run_lease = Some(lease.0);
        n.rejoined = false;
        self.report.runs_begun_at_rejoin += 1;
        self.trace(|| format!("{s} joined again: run {new_run} begins, {old} is left synced"));
    }

    /// The operations on `table` a load by the server appending to `own`
    /// replays from journal `j` after `from`: its own journal as written,
    /// another's as far as it is synced, a completed one's prefix and
    /// completion ([`logless::replay`]).
    fn replay(&self, j: JournalId, own: JournalId, from: usize, table: TableId) -> Vec<u64> {
        let (j, own) = (self.run_of(j), self.run_of(own));
        let Some(jr) = self.journals.get(&j) else {
            return Vec::new();
        };
        let readable = if j == own {
            jr.records.len()
        } else {
            jr.synced
        };
        logless::replay(&jr.records, readable, self.completions.get(&j), from, table).collect()
    }

    /// The completion happens before any new owner serves the table: a
    /// load that replays a dead log-less journal which ever held records
    /// of the table past the manifest's position finds its completion.
    fn check_completed(&mut self, s: ServerId, m: &Manifest, table: TableId) {
        let j = self.run_of(m.journal);
        let past = self
            .journals
            .get(&j)
            .and_then(|jr| jr.written.get(&table))
            .is_some_and(|end| *end > m.position);
        if self.logless
            && past
            && self.run_dead(j)
            && !self.completions.contains_key(&j)
            && !self.left_runs.contains(&j)
        {
            self.violation = Some(format!(
                "t={} ms: {s} loads {table} from {j} (past LSN {}) before its completion",
                self.now.0, m.position
            ));
        }
    }

    /// Every reader of a completed run replays the same decision: the
    /// one completion written for it (first writer wins).
    fn check_one_decision(&mut self, s: ServerId, j: JournalId, table: TableId) {
        let j = self.run_of(j);
        let Some(&d) = self.decision.get(&j) else {
            return;
        };
        let first = *self.replayed_decision.entry(j).or_insert(d);
        if first != d && self.violation.is_none() {
            self.violation = Some(format!(
                "t={} ms: {s} loads {table} replaying decision #{d} of {j}, an earlier reader \
                 replayed decision #{first}: two completions of one run",
                self.now.0
            ));
        }
    }

    fn send(&mut self, from: ServerId, inc: u64, call: Call) {
        let l = self.latency();
        self.at(l, Event::AtEtcd { from, inc, call });
    }

    fn perform(&mut self, s: ServerId, inc: u64, outs: Vec<Out>) {
        for o in outs {
            let mut hold = 0;
            let call = match o {
                Out::Join => Call::Join { sent_at: self.now },
                Out::KeepAlive { lease, sent_at } => Call::KeepAlive { lease, sent_at },
                Out::Load { table, owner_rev } => Call::LoadRead { table, owner_rev },
                Out::Handover {
                    table,
                    owner_rev,
                    to,
                    epoch,
                    snapshot,
                } => {
                    let journal = self.nodes[&s].server.as_ref().map_or(
                        JournalId {
                            server: s,
                            generation: 0,
                        },
                        Server::journal,
                    );
                    // While the faults go on, one in five is held on the
                    // way: etcd applies it 0.3 to 3 s later, its answer
                    // lost (the server sends it again meanwhile).
                    let held =
                        self.cfg.faults && self.faulting() && self.handover_rng.random_bool(0.2);
                    if held {
                        hold = self.handover_rng.random_range(300..3_000);
                        self.report.handovers_held += 1;
                    }
                    Call::Handover {
                        table,
                        owner_rev,
                        to,
                        epoch,
                        snapshot,
                        journal,
                        position: self.end_of(journal),
                        held,
                    }
                }
            };
            let l = self.latency();
            self.at(l + hold, Event::AtEtcd { from: s, inc, call });
        }
    }

    /// A call executed by etcd (reachable), and its answer.
    fn at_etcd(&mut self, from: ServerId, call: Call) -> Option<Answer> {
        let now = self.now;
        Some(match call {
            Call::Join { sent_at } => {
                // Create-if-absent: a member key still living on an
                // earlier lease (a join whose answer was lost) is not
                // taken over; it expires, and a later join succeeds.
                let lease = self.etcd.grant(self.cfg.ttl_ms, now);
                let created = self.txn(
                    &[Compare::ModRevision(member_key(from), Revision(0))],
                    &[
                        Write::Put {
                            key: member_key(from),
                            value: String::new(),
                            lease: Some(lease),
                        },
                        Write::Put {
                            key: joined_key(from),
                            value: String::new(),
                            lease: None,
                        },
                    ],
                );
                if created.is_err() {
                    self.etcd.revoke(lease);
                    return None;
                }
                Answer::Joined {
                    lease,
                    sent_at,
                    ttl: self.cfg.ttl_ms,
                }
            }
            Call::KeepAlive { lease, sent_at } => match self.etcd.keep_alive(lease, now) {
                Ok(ttl) => Answer::KeptAlive {
                    lease,
                    sent_at,
                    ttl,
                },
                Err(_) => Answer::LeaseLost { lease },
            },
            Call::Poll => Answer::Views(self.views(), self.ranges(), self.manifest_revs()),
            Call::Checkpoint {
                cp,
                journal,
                position,
                held,
            } => {
                let outcome = self.commit_checkpoint(from, &cp, journal, position);
                if held {
                    return None;
                }
                Answer::Checkpointed { cp, outcome }
            }
            Call::Split {
                split,
                journal,
                position,
            } => {
                let outcome = self.commit_split(from, &split, journal, position);
                Answer::SplitDone { split, outcome }
            }
            Call::Merge {
                merge,
                journal,
                position,
            } => {
                let outcome = self.commit_merge(from, &merge, journal, position);
                Answer::MergeDone { merge, outcome }
            }
            Call::LoadRead { table, owner_rev } => {
                // Log-less: no table is taken while another server holds
                // the claim on completing this server's run
                // (`refuse_while_claimed`): the load waits.
                if self.logless && self.etcd.get(&claim_key(from)).is_some() {
                    self.report.loads_refused_claimed += 1;
                    self.trace(|| format!("{from}'s load of {table} refused: its run is claimed"));
                    return None;
                }
                let entry = self.etcd.get(&manifest_key(table));
                Answer::LoadManifest {
                    table,
                    owner_rev,
                    manifest: entry.and_then(|e| Manifest::decode(&e.value)),
                    read_rev: entry.map_or(Revision(0), |e| e.mod_revision),
                }
            }
            Call::LoadCommit {
                table,
                owner_rev,
                read_rev,
                manifest,
            } => {
                // R2, and the manifest unchanged since it was read: of two
                // loads of one assignment (a retried one), only the first
                // commits — a late second one would set the journal
                // position past what the table acknowledged meanwhile.
                let r = self.txn(
                    &[
                        Compare::ModRevision(owner_key(table), owner_rev),
                        Compare::ModRevision(manifest_key(table), read_rev),
                    ],
                    &[Write::Put {
                        key: manifest_key(table),
                        value: manifest.encode(),
                        lease: None,
                    }],
                );
                Answer::LoadDone {
                    table,
                    owner_rev,
                    ok: r.ok().map(|_| manifest.snapshot),
                }
            }
            Call::Handover {
                table,
                owner_rev,
                to,
                epoch,
                snapshot,
                journal,
                position,
                held,
            } => {
                let manifest = Manifest {
                    snapshot,
                    journal,
                    position,
                };
                // R2, and the generation that sent it still a member (as
                // the real `handover_txn` compares `member/<server>`'s
                // lease): a handover of a generation whose lease is gone
                // would otherwise land after the server joined again and
                // loaded the table again under the same owner revision.
                if self.cfg.handover_member_compare && !self.same_generation(from, journal) {
                    self.report.handovers_refused_stale += 1;
                    return (!held).then_some(Answer::HandedOver { table });
                }
                let r = self.txn(
                    &[Compare::ModRevision(owner_key(table), owner_rev)],
                    &[
                        Write::Put {
                            key: manifest_key(table),
                            value: manifest.encode(),
                            lease: None,
                        },
                        Write::Put {
                            key: owner_key(table),
                            value: Owner {
                                server: to,
                                epoch: Epoch(epoch.0 + 1),
                            }
                            .encode(),
                            lease: None,
                        },
                        Write::Delete(move_key(table)),
                    ],
                );
                if r.is_ok() {
                    self.report.moves += 1;
                }
                if held {
                    return None;
                }
                Answer::HandedOver { table }
            }
            Call::CoordRead => {
                let lease = self.nodes[&from].server.as_ref()?.lease()?;
                let holder = self.etcd.get(COORDINATOR_KEY).map(|e| e.value.clone());
                match holder {
                    None => {
                        let _ = self.txn(
                            &[Compare::ModRevision(COORDINATOR_KEY.into(), Revision(0))],
                            &[Write::Put {
                                key: COORDINATOR_KEY.into(),
                                value: from.0.to_string(),
                                lease: Some(lease),
                            }],
                        );
                        Answer::Coordinate(None)
                    }
                    Some(v) if v == from.0.to_string() => {
                        Answer::Coordinate(Some(self.cluster_view()))
                    }
                    Some(_) => Answer::Coordinate(None),
                }
            }
            Call::Claim { dead, run } => {
                // `member/<me>`'s lease as etcd holds it now, then the
                // transaction: `member/<dead>` absent, `member/<me>` on
                // that lease; put the claim on it (another's claim there
                // is overwritten, as the real put does).
                let lease = self.etcd.get(&member_key(from))?.lease?;
                let mut compares = vec![Compare::ModRevision(
                    member_key(from),
                    self.etcd.get(&member_key(from))?.mod_revision,
                )];
                compares.push(Compare::ModRevision(member_key(dead), Revision(0)));
                let r = self.txn(
                    &compares,
                    &[Write::Put {
                        key: claim_key(dead),
                        value: from.0.to_string(),
                        lease: Some(lease),
                    }],
                );
                let Ok(rev) = r else {
                    // `CompletionRefused`: it is a member again.
                    self.report.claims_refused += 1;
                    return None;
                };
                self.report.claims += 1;
                self.trace(|| {
                    format!(
                        "{from} claims the completion of {dead}'s run (on lease {})",
                        lease.0
                    )
                });
                Answer::Claimed { dead, run, rev }
            }
            Call::Release { dead, rev } => {
                self.trace(|| format!("{from} releases logless-claim/{}", dead.0));
                let _ = self.txn(
                    &[Compare::ModRevision(claim_key(dead), rev)],
                    &[Write::Delete(claim_key(dead))],
                );
                return None;
            }
            Call::CoordWrite { actions } => {
                for a in actions {
                    self.apply_action(a);
                }
                return None;
            }
        })
    }

    fn apply_action(&mut self, a: Action) {
        // An action on a table a merge deleted since the view does nothing
        // (the real shell compares `table/<id>`'s revision as read).
        let table = match &a {
            Action::Assign { table, .. }
            | Action::Lend { table, .. }
            | Action::ForgetHome { table, .. }
            | Action::Move { table, .. } => *table,
        };
        if self.etcd.get(&range_key(table)).is_none() {
            return;
        }
        match a {
            Action::Assign {
                table,
                expect,
                gone,
                owner,
                reason,
            } => {
                let mut compares = vec![Compare::ModRevision(owner_key(table), expect)];
                if let Some(g) = gone {
                    compares.push(Compare::ModRevision(member_key(g.server), Revision(0)));
                    if self.cfg.compare_last_join {
                        compares.push(Compare::ModRevision(joined_key(g.server), g.last_join));
                    }
                }
                let gone = gone.map(|g| g.server);
                let r = self.txn(
                    &compares,
                    &[
                        Write::Put {
                            key: owner_key(table),
                            value: owner.encode(),
                            lease: None,
                        },
                        Write::Delete(move_key(table)),
                    ],
                );
                if r.is_ok() && reason != "no owner yet" {
                    self.report.reassignments += 1;
                }
                // The one decision point: a log-less owner's runs are
                // completed before its tables go to anyone else (a run
                // that holds nothing yet — a restart's, not joined — may
                // wait: no reader needs it).
                if let (Ok(_), Some(old)) = (r, gone) {
                    let waiting = self
                        .uncompleted(old)
                        .find(|j| !self.journals[j].written.is_empty());
                    if let Some(j) = waiting {
                        self.violation = Some(format!(
                            "t={} ms: {table} was reassigned from {old} before {j} was completed",
                            self.now.0
                        ));
                    }
                }
            }
            Action::Lend {
                table,
                expect,
                to,
                home,
            } => {
                // Only if no move is pending, the owner is the one seen,
                // and the home is noted now (first lend: absent before;
                // otherwise still there).
                let hkey = home_key(table);
                let (home_is, home_write) = match home {
                    Some(h) => (
                        Compare::ModRevision(hkey.clone(), Revision(0)),
                        vec![Write::Put {
                            key: hkey,
                            value: h.0.to_string(),
                            lease: None,
                        }],
                    ),
                    None => match self.etcd.get(&hkey) {
                        Some(e) => (Compare::ModRevision(hkey, e.mod_revision), Vec::new()),
                        None => return,
                    },
                };
                let mut writes = vec![Write::Put {
                    key: move_key(table),
                    value: to.0.to_string(),
                    lease: None,
                }];
                writes.extend(home_write);
                let r = self.txn(
                    &[
                        Compare::ModRevision(move_key(table), Revision(0)),
                        Compare::ModRevision(owner_key(table), expect),
                        home_is,
                    ],
                    &writes,
                );
                if r.is_ok() {
                    self.report.lends += 1;
                }
            }
            Action::ForgetHome { table, expect } => {
                let _ = self.txn(
                    &[
                        Compare::ModRevision(owner_key(table), expect.unwrap_or(Revision(0))),
                        // No lend or move written since the view.
                        Compare::ModRevision(move_key(table), Revision(0)),
                    ],
                    &[Write::Delete(home_key(table))],
                );
            }
            Action::Move {
                table,
                expect,
                to,
                reason,
            } => {
                let from = self.owner_of(table).map(|(o, _)| o.server);
                // Only if the table has no pending move yet, and its
                // owner is still the one the view saw.
                let r = self.txn(
                    &[
                        Compare::ModRevision(move_key(table), Revision(0)),
                        Compare::ModRevision(owner_key(table), expect),
                    ],
                    &[Write::Put {
                        key: move_key(table),
                        value: to.0.to_string(),
                        lease: None,
                    }],
                );
                if r.is_ok() {
                    let pending = self.etcd.range("move/").count();
                    self.report.most_moves_pending = self.report.most_moves_pending.max(pending);
                }
                if r.is_ok() && reason.starts_with("balancing") {
                    self.report.last_balance_move_ms = self.now.0;
                    if reason == "balancing: its server holds more inodes" {
                        self.report.inode_moves += 1;
                    }
                    if let Some(from) = from {
                        let moves = self.report.balance_moves.entry(table).or_default();
                        moves.push((from, to));
                    }
                }
            }
        }
    }

    fn owner_of(&self, t: TableId) -> Option<(Owner, Revision)> {
        let e = self.etcd.get(&owner_key(t))?;
        Some((Owner::decode(&e.value)?, e.mod_revision))
    }

    /// The tables that exist (`table/<id>` keys).
    fn tables(&self) -> Vec<TableId> {
        self.ranges.iter().map(|(t, _, _)| *t).collect()
    }

    /// Every table's range, with its key's revision.
    fn ranges(&self) -> Vec<(TableId, KeyRange, Revision)> {
        self.ranges.clone()
    }

    /// The `table/<id>` keys, read from etcd.
    fn read_ranges(&self) -> Vec<(TableId, KeyRange, Revision)> {
        self.etcd
            .range("table/")
            .filter_map(|(k, e)| {
                let t = TableId(k.strip_prefix("table/")?.parse().ok()?);
                Some((t, KeyRange::decode(&e.value)?, e.mod_revision))
            })
            .collect()
    }

    /// The table whose range covers `key`, per etcd.
    fn covering(&self, key: u64) -> Option<TableId> {
        self.by_start.range(..=key).next_back().map(|(_, t)| *t)
    }

    /// Every table's `manifest/` key's revision.
    fn manifest_revs(&self) -> Vec<(TableId, Revision)> {
        self.tables()
            .into_iter()
            .filter_map(|t| Some((t, self.etcd.get(&manifest_key(t))?.mod_revision)))
            .collect()
    }

    fn views(&self) -> Vec<TableView> {
        self.tables()
            .into_iter()
            .filter_map(|t| {
                let (owner, owner_rev) = self.owner_of(t)?;
                let move_to = self
                    .etcd
                    .get(&move_key(t))
                    .and_then(|e| e.value.parse().ok())
                    .map(ServerId);
                Some(TableView {
                    table: t,
                    owner,
                    owner_rev,
                    move_to,
                })
            })
            .collect()
    }

    fn cluster_view(&self) -> ClusterView {
        ClusterView {
            members: self
                .etcd
                .range("member/")
                .filter_map(|(k, _)| k.strip_prefix("member/")?.parse().ok().map(ServerId))
                .collect(),
            draining: BTreeSet::new(),
            owners: self
                .tables()
                .into_iter()
                .map(|t| (t, self.owner_of(t)))
                .collect(),
            moves: self
                .tables()
                .into_iter()
                .filter_map(|t| {
                    let e = self.etcd.get(&move_key(t))?;
                    Some((t, ServerId(e.value.parse().ok()?)))
                })
                .collect(),
            rates: self.rates.clone(),
            inodes: self.inodes.clone(),
            unknown: BTreeSet::new(),
            // Asked about servers that are not members (the real
            // coordinator asks the host about dead owners): a crashed
            // process whose lease lives on waits for it to expire.
            uncompleted: self
                .journals
                .keys()
                .filter(|j| {
                    self.awaits_completion(**j) && self.etcd.get(&member_key(j.server)).is_none()
                })
                .map(|j| j.server)
                .collect(),
            joins: self
                .etcd
                .range("joined/")
                .filter_map(|(k, e)| {
                    let s = k.strip_prefix("joined/")?.parse().ok()?;
                    Some((ServerId(s), e.mod_revision))
                })
                .collect(),
            borrows: {
                let mut q: Vec<(Revision, ServerId, BTreeSet<TableId>)> = self
                    .etcd
                    .range("borrow/")
                    .filter_map(|(k, e)| {
                        let s = ServerId(k.strip_prefix("borrow/")?.parse().ok()?);
                        let tables = e
                            .value
                            .split_whitespace()
                            .map(|t| t.parse().ok().map(TableId))
                            .collect::<Option<BTreeSet<TableId>>>()?;
                        Some((e.mod_revision, s, tables))
                    })
                    .collect();
                q.sort();
                q.into_iter().map(|(_, s, t)| (s, t)).collect()
            },
            homes: self
                .etcd
                .range("home/")
                .filter_map(|(k, e)| {
                    let t = TableId(k.strip_prefix("home/")?.parse().ok()?);
                    Some((t, ServerId(e.value.parse().ok()?)))
                })
                .collect(),
        }
    }

    /// A random server that is up, a member and not paused begins a split
    /// of one of its tables at a random key, or a merge of two
    /// neighbouring ones it serves (the table count kept between half and
    /// twice the initial one); its transaction goes to etcd after the
    /// work (up to a lease: the engine's split or merge), during which
    /// faults, moves, borrows and failovers race it.
    fn reshape(&mut self) {
        let s = ServerId(self.rng.random_range(0..self.cfg.servers));
        let count = self.tables().len();
        let split = self.rng.random_bool(0.5);
        let pick = self.rng.random_range(0..1_000usize);
        let at_frac = self.rng.random_range(1..1_000u64);
        let work = self.rng.random_range(0..self.cfg.ttl_ms);
        let inc = self.nodes[&s].incarnation;
        if self.now < self.nodes[&s].paused_until {
            return;
        }
        let Some(server) = self.nodes.get_mut(&s).and_then(|n| n.server.as_mut()) else {
            return;
        };
        if server.lease().is_none() {
            return;
        }
        let journal = server.journal();
        let serving: Vec<(TableId, KeyRange)> = server
            .serving()
            .filter_map(|t| Some((t, server.range(t)?)))
            .collect();
        let call = if split && count < 2 * self.cfg.tables as usize {
            let candidates: Vec<&(TableId, KeyRange)> = serving
                .iter()
                .filter(|(_, r)| r.end - r.start >= 2)
                .collect();
            if candidates.is_empty() {
                return;
            }
            let (t, r) = *candidates[pick % candidates.len()];
            let at = r.start + 1 + (r.end - r.start - 1) * at_frac / 1_000;
            let Some(split) = server.split(t, at.min(r.end - 1)) else {
                return;
            };
            let position = self.end_of(journal);
            Call::Split {
                split,
                journal,
                position,
            }
        } else if !split && count > (self.cfg.tables as usize).div_ceil(2) {
            let pairs: Vec<(TableId, TableId)> = serving
                .iter()
                .flat_map(|(a, ra)| {
                    serving
                        .iter()
                        .filter(move |(_, rb)| ra.end == rb.start)
                        .map(move |(b, _)| (*a, *b))
                })
                .collect();
            if pairs.is_empty() {
                return;
            }
            let (a, b) = pairs[pick % pairs.len()];
            let Some(merge) = server.merge(a, b) else {
                return;
            };
            let position = self.end_of(journal);
            Call::Merge {
                merge,
                journal,
                position,
            }
        } else {
            return;
        };
        self.at(
            work,
            Event::ReshapeSend {
                server: s,
                inc,
                call,
            },
        );
    }

    /// etcd runs a split's transaction: conditional on the table's owner
    /// and range keys as the server saw them, on no move naming it, and on
    /// the counter as read; it writes both ranges, the new table's owner
    /// key (the same server, the same epoch) and both manifests, and
    /// advances the counter. The table's owner key is not written (its
    /// revision, the fence of R2, stays).
    fn commit_split(
        &mut self,
        from: ServerId,
        split: &Split,
        journal: JournalId,
        position: usize,
    ) -> Option<(TableId, Revision)> {
        if !self.same_generation(from, journal)
            && self.cfg.reshape_fault != Some(ReshapeFault::AnyGeneration)
        {
            self.report.reshapes_refused += 1;
            return None;
        }
        let counter = self.etcd.get(NEXT_TABLE_KEY)?;
        let (next, counter_rev) = (counter.value.parse::<u32>().ok()?, counter.mod_revision);
        let (t, new) = (split.table, TableId(next));
        let manifest = |contents: &Contents| Manifest {
            snapshot: contents.clone(),
            journal,
            position,
        };
        let fault = self.cfg.reshape_fault;
        let mut compares = vec![
            Compare::ModRevision(owner_key(t), split.owner_rev),
            Compare::ModRevision(range_key(t), split.range_rev),
            Compare::ModRevision(NEXT_TABLE_KEY.into(), counter_rev),
        ];
        if fault != Some(ReshapeFault::NoMoveCompare) {
            compares.push(Compare::ModRevision(move_key(t), Revision(0)));
        }
        if let Some(rev) = split.manifest_rev.filter(|_| self.cfg.manifest_compare) {
            compares.push(Compare::ModRevision(manifest_key(t), rev));
        }
        let (mut lower, mut upper) = (&split.lower.1, &split.upper.1);
        if fault == Some(ReshapeFault::SwappedManifests) {
            std::mem::swap(&mut lower, &mut upper);
        }
        let put = |key: String, value: String| Write::Put {
            key,
            value,
            lease: None,
        };
        let r = self.txn(
            &compares,
            &[
                put(range_key(t), split.lower.0.encode()),
                put(range_key(new), split.upper.0.encode()),
                put(
                    owner_key(new),
                    Owner {
                        server: from,
                        epoch: split.epoch,
                    }
                    .encode(),
                ),
                put(manifest_key(t), manifest(lower).encode()),
                put(manifest_key(new), manifest(upper).encode()),
                put(NEXT_TABLE_KEY.into(), (next + 1).to_string()),
            ],
        );
        match r {
            Ok(rev) => {
                self.report.splits += 1;
                self.check_ranges();
                // The owner key's revision (R2's fence) is untouched.
                if self.owner_of(t).map(|(_, r)| r) != Some(split.owner_rev) {
                    self.violation = Some(format!(
                        "t={} ms: the split of {t} changed its owner key",
                        self.now.0
                    ));
                }
                Some((new, rev))
            }
            Err(_) => {
                self.report.reshapes_refused += 1;
                None
            }
        }
    }

    /// etcd runs a merge's transaction: conditional on both tables' owner
    /// and range keys as the server saw them, and on no move, home or
    /// borrow naming either (the borrows as read: the model's etcd runs
    /// the read and the transaction at once); it writes the union range
    /// and the merged manifest and deletes the upper table's keys.
    fn commit_merge(
        &mut self,
        from: ServerId,
        merge: &Merge,
        journal: JournalId,
        position: usize,
    ) -> Option<Revision> {
        let (lo, up) = (merge.lower, merge.upper);
        let fault = self.cfg.reshape_fault;
        let borrowed = fault != Some(ReshapeFault::NoMoveCompare)
            && self.etcd.range("borrow/").any(|(_, e)| {
                e.value
                    .split_whitespace()
                    .any(|t| t == lo.0.to_string() || t == up.0.to_string())
            });
        let mut compares = vec![
            Compare::ModRevision(range_key(lo), merge.range_revs.0),
            Compare::ModRevision(range_key(up), merge.range_revs.1),
        ];
        if fault != Some(ReshapeFault::NoOwnerCompare) {
            compares.push(Compare::ModRevision(owner_key(lo), merge.owner_revs.0));
            compares.push(Compare::ModRevision(owner_key(up), merge.owner_revs.1));
        }
        let (lm, um) = merge.manifest_revs;
        for (t, rev) in [(lo, lm), (up, um)] {
            if let Some(rev) = rev.filter(|_| self.cfg.manifest_compare) {
                compares.push(Compare::ModRevision(manifest_key(t), rev));
            }
            if fault != Some(ReshapeFault::NoMoveCompare) {
                compares.push(Compare::ModRevision(move_key(t), Revision(0)));
                compares.push(Compare::ModRevision(home_key(t), Revision(0)));
            }
        }
        let manifest = Manifest {
            snapshot: merge.contents.clone(),
            journal,
            position,
        };
        let stale =
            !self.same_generation(from, journal) && fault != Some(ReshapeFault::AnyGeneration);
        let owner_before = self.owner_of(lo).map(|(_, r)| r);
        let r = if borrowed || stale {
            Err(crate::etcd::EtcdError::Conflict)
        } else {
            self.txn(
                &compares,
                &[
                    Write::Put {
                        key: range_key(lo),
                        value: merge.range.encode(),
                        lease: None,
                    },
                    Write::Put {
                        key: manifest_key(lo),
                        value: manifest.encode(),
                        lease: None,
                    },
                    Write::Delete(range_key(up)),
                    Write::Delete(owner_key(up)),
                    Write::Delete(manifest_key(up)),
                ],
            )
        };
        match r {
            Ok(rev) => {
                self.report.merges += 1;
                self.check_ranges();
                // The lower table's owner key (R2's fence) is untouched.
                if self.owner_of(lo).map(|(_, r)| r) != owner_before {
                    self.violation = Some(format!(
                        "t={} ms: the merge into {lo} changed its owner key",
                        self.now.0
                    ));
                }
                Some(rev)
            }
            Err(_) => {
                self.report.reshapes_refused += 1;
                None
            }
        }
    }

    /// Is `from` still a member of the generation whose journal is
    /// `journal` (`member/<s>` on that lease: etcd's compare on a key's
    /// lease)? A split or merge begun in an earlier generation is refused:
    /// the server may have loaded the tables again since, and acknowledged
    /// operations its contents then lack (seed 175, when only the owner
    /// keys were compared).
    fn same_generation(&self, from: ServerId, journal: JournalId) -> bool {
        self.etcd
            .get(&member_key(from))
            .is_some_and(|e| e.lease == Some(LeaseId(journal.generation)))
    }

    /// After every change of the ranges: reads them again, and they
    /// partition the key space.
    fn check_ranges(&mut self) {
        self.ranges = self.read_ranges();
        self.by_start = self.ranges.iter().map(|(t, r, _)| (r.start, *t)).collect();
        let parts: Vec<(TableId, KeyRange)> =
            self.ranges().into_iter().map(|(t, r, _)| (t, r)).collect();
        if let Err(e) = check_partition(&parts) {
            self.violation = Some(format!("t={} ms: {e}", self.now.0));
        }
    }

    /// Server `s` (up, with a lease) asks to BORROW two or three tables
    /// together, and RETURNs them a little later.
    fn borrow(&mut self, s: ServerId) {
        let inc = self.nodes[&s].incarnation;
        let Some(lease) = self.nodes[&s].server.as_ref().and_then(|x| x.lease()) else {
            return;
        };
        if !self.etcd_reachable(s) || self.now < self.nodes[&s].paused_until {
            return;
        }
        let existing = self.tables();
        let n = self.rng.random_range(2..=3usize.min(existing.len()));
        let tables: BTreeSet<u32> = (0..n)
            .map(|_| existing[self.rng.random_range(0..existing.len())].0)
            .collect();
        let value: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
        self.etcd.expire(self.now);
        if self.etcd.lease_alive(lease) {
            let put = self.txn(
                &[],
                &[Write::Put {
                    key: borrow_key(s),
                    value: value.join(" "),
                    lease: Some(lease),
                }],
            );
            if put.is_ok() {
                self.report.borrows += 1;
                let hold = self.rng.random_range(200..3_000);
                self.at(hold, Event::Return { server: s, inc });
            }
        }
    }

    fn at_server(&mut self, s: ServerId, inc: u64, answer: Answer) {
        let now = self.now;
        if self.nodes[&s].server.is_none() {
            return;
        }
        // Log-less: an ADD that loaded a table retires, at its end, a
        // completion of this server's run written while it was not a
        // member — or is refused (the table is loaded again later).
        let answer = match answer {
            Answer::LoadDone {
                table,
                owner_rev,
                ok: Some(_),
            } if self.logless && !self.retire_stale_completion(s) => Answer::LoadDone {
                table,
                owner_rev,
                ok: None,
            },
            a => a,
        };
        if let Answer::Joined { .. } = &answer {
            let n = self.nodes.get_mut(&s).expect("known server");
            if let Some(run) = n.next_run.take() {
                // The run exists from its start (its state file), written
                // to or not: it is completed when it is over.
                n.run = run;
                self.journals
                    .entry(JournalId {
                        server: s,
                        generation: run,
                    })
                    .or_default();
            }
        }
        if self.cfg.new_run_at_rejoin {
            match &answer {
                // A join after the run began serving under another lease
                // (the process was cut off): a new run is due.
                Answer::Joined { lease, .. } => {
                    let n = self.nodes.get_mut(&s).expect("known server");
                    match n.run_lease {
                        None => n.run_lease = Some(lease.0),
                        Some(l) if l != lease.0 => n.rejoined = true,
                        Some(_) => {}
                    }
                }
                // The load's start (the host's ADD, `begin_serving`): the
                // new run begins before anything is loaded — unless a
                // completion of the current run stands, whose retirement
                // at a load's end begins it.
                Answer::LoadManifest { .. } if self.logless && self.nodes[&s].rejoined => {
                    let current = JournalId {
                        server: s,
                        generation: self.nodes[&s].run,
                    };
                    if !self.completions.contains_key(&current) {
                        self.begin_run_at_rejoin(s);
                    }
                }
                _ => {}
            }
        }
        let run = self.nodes[&s].run;
        let Some(server) = self.nodes.get_mut(&s).and_then(|n| n.server.as_mut()) else {
            return;
        };
        let mut outs = Vec::new();
        let mut calls = Vec::new();
        let mut completes = Vec::new();
        match answer {
            Answer::Joined {
                lease,
                sent_at,
                ttl,
            } => {
                self.lease_run.insert(lease.0, run);
                if self.tracing {
                    eprintln!(
                        "t={} ms: {s} joined under lease {} (run {run})",
                        now.0, lease.0
                    );
                }
                server.joined(lease, sent_at, ttl)
            }
            Answer::KeptAlive {
                lease,
                sent_at,
                ttl,
            } => server.kept_alive(lease, sent_at, ttl),
            Answer::LeaseLost { lease } => server.lease_lost(lease),
            Answer::Views(v, ranges, manifests) => {
                outs = server.observe(&v);
                server.ranges_seen(&ranges);
                server.manifests_seen(&manifests);
            }
            Answer::Checkpointed { cp, outcome } => server.checkpointed(&cp, outcome),
            Answer::SplitDone { split, outcome } => server.split_done(&split, outcome),
            Answer::MergeDone { merge, outcome } => server.merge_done(&merge, outcome),
            Answer::LoadManifest {
                table,
                owner_rev,
                manifest,
                read_rev,
            } => {
                // Replay the journal the manifest points into, from the
                // shared store, then commit a manifest that points at the
                // end of this server's own journal. A dead log-less journal
                // not completed yet is not replayed: the load waits (the
                // next look at etcd asks for it again).
                let own = server.journal();
                let mut snapshot = Contents::new();
                if let Some(m) = manifest {
                    if self.awaits_completion(self.run_of(m.journal)) {
                        return;
                    }
                    self.check_completed(s, &m, table);
                    self.check_one_decision(s, m.journal, table);
                    snapshot = m.snapshot;
                    snapshot.extend(self.replay(m.journal, own, m.position, table));
                }
                let manifest = Manifest {
                    snapshot,
                    journal: own,
                    position: self.end_of(own),
                };
                calls.push(Call::LoadCommit {
                    table,
                    owner_rev,
                    read_rev,
                    manifest,
                });
            }
            Answer::LoadDone {
                table,
                owner_rev,
                ok,
            } => server.loaded(table, owner_rev, ok.ok_or(())),
            Answer::HandedOver { table } => server.handed_over(table),
            Answer::Coordinate(Some(view)) => {
                // Log-less: each dead server's run is completed under a
                // claim, in steps of their own (claim, completion,
                // release); its tables wait for a later round, whose view
                // shows the completion.
                // The run to complete is read (from the dead server's
                // state file) just before claiming.
                for dead in completions_due(&view) {
                    let run = self.nodes[&dead].run;
                    calls.push(Call::Claim { dead, run });
                }
                let actions = decide_moves(&view, 2, self.cfg.max_moves);
                if !actions.is_empty() {
                    calls.push(Call::CoordWrite { actions });
                }
            }
            Answer::Coordinate(None) => {}
            Answer::Claimed { dead, run, rev } => completes.push((dead, run, rev)),
        }
        let _ = now;
        for (dead, run, rev) in completes {
            // Reading the run and the backups, writing the completion: a
            // few ms in the shared store.
            let d = self.logless_rng.random_range(1..20);
            self.at(
                d,
                Event::Complete {
                    by: s,
                    inc,
                    dead,
                    run,
                    rev,
                },
            );
        }
        self.perform(s, inc, outs);
        for c in calls {
            self.send(s, inc, c);
        }
    }

    /// Once the faults have stopped: by [`recovery_bound_ms`] after, every
    /// table is served, but for gaps shorter than [`stall_bound_ms`] (a
    /// planned move).
    fn check_available(&mut self) -> Result<(), String> {
        if self.now.0 < self.cfg.duration_ms {
            return Ok(());
        }
        for i in 0..self.ranges.len() {
            let t = self.ranges[i].0;
            let served = self
                .nodes
                .values()
                .any(|n| n.server.as_ref().is_some_and(|s| s.may_ack(t, self.now)));
            if served {
                self.unserved_since.remove(&t);
                continue;
            }
            let since = *self.unserved_since.entry(t).or_insert(self.now);
            let deadline = self.cfg.duration_ms + recovery_bound_ms(&self.cfg);
            let gap = self.now.0 - since.0;
            if self.now.0 >= deadline && gap > stall_bound_ms(&self.cfg) {
                return Err(format!(
                    "t={} ms: {t} unserved for {gap} ms, past the recovery bound ({} ms after \
                     the faults' end)",
                    self.now.0,
                    recovery_bound_ms(&self.cfg)
                ));
            }
        }
        Ok(())
    }

    /// At the instant `at` acknowledges for `table`: etcd names it as the
    /// owner, and no other server may acknowledge for the table.
    fn check_single_acknowledger(
        &self,
        at: ServerId,
        table: TableId,
        key: u64,
    ) -> Result<(), String> {
        let now = self.now;
        // (The ranges as etcd holds them: read again after every write.)
        let covering = self.covering(key);
        if covering != Some(table) {
            return Err(format!(
                "t={} ms: {at} acknowledged key {key} in {table}, but etcd's map puts it in {covering:?}",
                now.0
            ));
        }
        for (id, n) in &self.nodes {
            if let Some(other) = n.server.as_ref().and_then(|s| s.may_ack_key(key, now)) {
                if *id != at || other != table {
                    return Err(format!(
                        "t={} ms: {at} acknowledged key {key} in {table}, and {id} may acknowledge it in {other}",
                        now.0
                    ));
                }
            }
        }
        match self.owner_of(table) {
            Some((o, _)) if o.server == at => {}
            other => {
                return Err(format!(
                    "t={} ms: {at} acknowledged for {table}, but etcd names {other:?}",
                    now.0
                ))
            }
        }
        for (id, n) in &self.nodes {
            if *id != at && n.server.as_ref().is_some_and(|s| s.may_ack(table, now)) {
                return Err(format!(
                    "t={} ms: {at} and {id} may both acknowledge for {table}",
                    now.0
                ));
            }
        }
        Ok(())
    }

    /// A client sends a new operation, mostly to the owner etcd names (a
    /// fresh map), sometimes to any server (a stale one).
    fn client_op(&mut self) {
        // The clients take turns (no draw: the seed's generator draws
        // what it drew before clients retried).
        self.turn += 1;
        let client = (self.turn % u64::from(CLIENTS)) as u32;
        let seq = self.next_seq[client as usize];
        self.next_seq[client as usize] += 1;
        let op = op_id(client, seq);
        if client < RETRYING {
            self.pending.insert(
                op,
                Pending {
                    attempt: 0,
                    sent: self.now,
                },
            );
        }
        // Fire and forget for the others: no retry, no timeout.
        self.send_op(op, 0);
    }

    /// Sends attempt `attempt` of `op`, and arms its timeout.
    /// The table is the one etcd's map says covers the op's key now.
    fn send_op(&mut self, op: u64, attempt: u32) {
        let Some(table) = self.covering(key_of(op)) else {
            return;
        };
        let to = match self.owner_of(table) {
            Some((o, _)) if self.rng_for(attempt).random_bool(0.9) => o.server,
            _ => {
                let n = self.cfg.servers;
                ServerId(self.rng_for(attempt).random_range(0..n))
            }
        };
        let l = self.rng_for(attempt).random_range(1..20);
        self.at(
            l,
            Event::Op {
                to,
                table,
                op,
                attempt,
            },
        );
        // Backing off: twice as long after each attempt, up to 8 times.
        if let Some(p) = self.pending.get_mut(&op) {
            p.sent = self.now;
        }
    }

    /// The reply to attempt `attempt` of `op` reaches its client: done,
    /// or WRONG_SERVER (it sends again, to whoever etcd names then).
    fn client_reply(&mut self, op: u64, attempt: u32, done: bool) {
        if self.pending.get(&op).is_none_or(|p| p.attempt != attempt) {
            return;
        }
        if done {
            self.pending.remove(&op);
        } else {
            // After a back-off (the map is being refreshed), twice as
            // long after each attempt, up to 16 times.
            let d = self.client_rng.random_range(50..150) << attempt.min(4);
            self.at(d, Event::Timeout { op, attempt });
        }
    }

    /// The reply to attempt `attempt` of `op` is lost or late (its server
    /// is down or paused, or the network lost it): the client's timeout
    /// fires when it would have — twice as long after each attempt, up to
    /// 8 times. (Scheduled only then, not for every attempt, which keeps
    /// the event queue as small as it was without retries.)
    fn no_reply(&mut self, op: u64, attempt: u32) {
        let Some(p) = self.pending.get(&op).filter(|p| p.attempt == attempt) else {
            return;
        };
        let timeout = CLIENT_TIMEOUT_MS << attempt.min(3);
        let waited = self.now.0.saturating_sub(p.sent.0);
        self.at(
            timeout.saturating_sub(waited),
            Event::Timeout { op, attempt },
        );
    }

    /// The same (client, seq) again, to whoever etcd's map names now —
    /// until the client gives up (too many attempts, or the run ends).
    fn resend(&mut self, op: u64) {
        let Some(p) = self.pending.get_mut(&op) else {
            return;
        };
        let give_up = op % u64::from(CLIENTS) >= u64::from(RETRYING)
            || p.attempt + 1 >= MAX_ATTEMPTS
            || self.now.0 > self.cfg.duration_ms + self.cfg.settle_ms / 2;
        if give_up {
            self.pending.remove(&op);
            return;
        }
        p.attempt += 1;
        let attempt = p.attempt;
        self.report.retries += 1;
        self.send_op(op, attempt);
    }

    fn fault(&mut self) {
        let s = ServerId(self.rng.random_range(0..self.cfg.servers));
        let ttl = self.cfg.ttl_ms;
        match self.rng.random_range(0..5) {
            0 => {
                // kill -9, back a little later.
                let n = self.nodes.get_mut(&s).expect("known server");
                if n.server.take().is_some() {
                    n.incarnation += 1;
                    self.report.crashes += 1;
                    self.trace(|| format!("{s} crashes (kill -9)"));
                    // Log-less, half the crashes take the machine down:
                    // the unsynced tails of its journals are cut.
                    if self.logless && self.logless_rng.random_bool(0.5) {
                        self.machine_crash(s);
                    }
                    let back = self.rng.random_range(100..2 * ttl);
                    self.at(back, Event::Restart(s));
                }
            }
            1 => {
                // SIGSTOP for up to twice a lease, then SIGCONT.
                let d = self.rng.random_range(100..2 * ttl);
                let n = self.nodes.get_mut(&s).expect("known server");
                n.paused_until = self.now.plus(d);
                self.report.pauses += 1;
                self.trace(|| format!("{s} paused for {d} ms"));
            }
            2 => {
                // Cut from etcd (clients still reach it).
                let d = self.rng.random_range(100..2 * ttl);
                self.nodes
                    .get_mut(&s)
                    .expect("known server")
                    .cut_from_etcd_until = self.now.plus(d);
                self.trace(|| format!("{s} cut from etcd for {d} ms"));
            }
            3 if self.etcd_down_until.is_none() => {
                let d = self.rng.random_range(100..ttl);
                self.etcd_down_until = Some(self.now.plus(d));
                self.report.etcd_restarts += 1;
                self.trace(|| format!("etcd down for {d} ms"));
                self.at(d, Event::EtcdUp);
            }
            _ => {
                // Log-less: now and then a client loses its backups (its
                // machine died; the client goes on, as the same client).
                if self.logless && self.logless_rng.random_bool(0.3) {
                    self.client_loses_backups();
                }
            }
        }
    }

    fn check_settled(&self) -> Result<(), String> {
        if let Some((k, _)) = self.etcd.range("borrow/").next() {
            return Err(format!("{k} was never RETURNed"));
        }
        // Every move ends: carried out, or its table reassigned.
        if let Some((k, e)) = self.etcd.range("move/").next() {
            return Err(format!("{k} (to {}) is still pending", e.value));
        }
        if let Some((k, e)) = self.etcd.range("home/").next() {
            return Err(format!(
                "{k} (= {}) is still noted: a lent table is not home",
                e.value
            ));
        }
        let members: BTreeSet<ServerId> = self
            .etcd
            .range("member/")
            .filter_map(|(k, _)| k.strip_prefix("member/")?.parse().ok().map(ServerId))
            .collect();
        for t in self.tables() {
            let Some((owner, _)) = self.owner_of(t) else {
                return Err(format!("{t} has no owner"));
            };
            if !members.contains(&owner.server) {
                return Err(format!("{t}'s owner {} is not a member", owner.server));
            }
            let serving: Vec<ServerId> = self
                .nodes
                .iter()
                .filter(|(_, n)| n.server.as_ref().is_some_and(|s| s.may_ack(t, self.now)))
                .map(|(id, _)| *id)
                .collect();
            if serving != [owner.server] {
                let n = &self.nodes[&owner.server];
                let state = match &n.server {
                    None => "down".to_string(),
                    Some(s) => format!(
                        "holds it: {}, lease left {} ms, paused until {} ms, cut from etcd until {} ms",
                        s.holds(t),
                        s.lease_remaining(self.now),
                        n.paused_until.0,
                        n.cut_from_etcd_until.0
                    ),
                };
                return Err(format!(
                    "{t} is served by {serving:?}, etcd names {} ({state})",
                    owner.server
                ));
            }
            let held = self.nodes[&owner.server]
                .server
                .as_ref()
                .and_then(|s| s.contents(t))
                .cloned()
                .unwrap_or_default();
            let twice = held.applied_twice().next();
            if let Some((op, n)) = twice {
                return Err(format!(
                    "operation {} on {t} was applied {n} times",
                    describe(op)
                ));
            }
        }
        self.check_keys()
    }

    /// The ranges of the existing tables partition the key space; each
    /// operation is applied once at most over all tables and held only by
    /// the table covering its key; every acknowledged one is held (but
    /// those in a completion's GAP).
    fn check_keys(&self) -> Result<(), String> {
        let ranges = self.read_ranges();
        let parts: Vec<(TableId, KeyRange)> = ranges.iter().map(|(t, r, _)| (*t, *r)).collect();
        check_partition(&parts)?;
        // Over all tables: each operation applied once at most, and held
        // only by the table covering its key.
        let mut applied: BTreeMap<u64, u32> = BTreeMap::new();
        let mut held_in: BTreeMap<u64, TableId> = BTreeMap::new();
        for (t, range, _) in &ranges {
            let Some((owner, _)) = self.owner_of(*t) else {
                return Err(format!("{t} has no owner"));
            };
            let Some(held) = self.nodes[&owner.server]
                .server
                .as_ref()
                .and_then(|s| s.contents(*t))
            else {
                continue;
            };
            for op in held.applications() {
                *applied.entry(op).or_default() += 1;
                held_in.insert(op, *t);
                if !range.contains(key_of(op)) {
                    return Err(format!(
                        "{t} ({}..{}) holds operation {} of key {}, outside its range",
                        range.start,
                        range.end,
                        describe(op),
                        key_of(op)
                    ));
                }
            }
        }
        if let Some((op, n)) = applied.iter().find(|(_, n)| **n > 1) {
            return Err(format!(
                "operation {} was applied {n} times (across tables)",
                describe(*op)
            ));
        }
        // Only an operation whose every backup holder lost it (a GAP
        // reported at its journal's completion) may be missing.
        if let Some(lost) = self
            .acked
            .iter()
            .find(|op| !held_in.contains_key(op) && !self.gaps.contains(op))
        {
            return Err(format!(
                "operation {} (key {}, table {:?} now) was acknowledged and is lost",
                describe(*lost),
                key_of(*lost),
                self.covering(key_of(*lost))
            ));
        }
        Ok(())
    }
}
