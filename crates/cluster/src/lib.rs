//! Sextant's cluster protocols, as pure state machines.
//!
//! Many metadata servers share one namespace (docs/DESIGN.md, "Scale-out"):
//! etcd decides who is alive and who owns which table; a shared table
//! store holds snapshots and every server's journal. This crate holds the
//! *decisions* of that protocol and nothing that does I/O, so that a
//! deterministic simulation ([`sim`]) and, later, the real processes (an
//! etcd client and tonic services around the same state machines) run the
//! same code.
//!
//! Modules, bottom up:
//! - [`ids`]: servers, tables, epochs, revisions, time.
//! - [`keys`]: key ranges — each table covers one, `table/<id>` in etcd;
//!   an operation's key; whether ranges partition the key space.
//! - [`lease`]: R1 — a server's own view of whether its lease is alive,
//!   measured from the *send* time of its last acknowledged keep-alive.
//! - [`etcd`]: the semantics Sextant needs from etcd (revisioned keys,
//!   leases, compare-and-swap transactions), as a model; the simulation's
//!   etcd, and the reference the real client shell is tested against.
//! - [`exactly_once`]: whether a retried mutation is answered with its
//!   remembered reply or runs (the membership-generation rule).
//! - [`server`]: one metadata server's ownership state machine —
//!   serving, dropping (migration), loading (ADD, failover replay).
//! - [`coordinator`]: the coordinator's decisions, recomputed from etcd's
//!   state every time (it keeps none of its own, Ursa Minor §3.7).
//! - [`logless`]: log-less durability — a journal synced late, the
//!   clients' backups of its unsynced tail, and the completion of a dead
//!   journal decided once before its tables are reassigned.
//! - [`sim`]: the deterministic simulation: simulated time, network,
//!   etcd and shared store; crashes, pauses, partitions, etcd restarts,
//!   splits and merges of tables.
//!
//! The fencing rules (docs/DESIGN.md), each enforced in one place:
//! - **R1** ([`lease::LeaseTimer`], used by [`server::Server::may_ack`]):
//!   a server acknowledges for a table only while its own lease timer is
//!   valid, checked *after* the operation is durable and right before the
//!   acknowledgement.
//! - **R2** ([`server::Server`]'s manifest commits): every change of a
//!   table's manifest is an etcd transaction conditional on the revision of
//!   the table's ownership key that the server was given.
//! - **R3** ([`coordinator::decide`]): a table is reassigned only after its
//!   owner's membership lease is gone from etcd, or the owner handed it
//!   over itself (an acknowledged DROP).

pub mod coordinator;
pub mod etcd;
pub mod exactly_once;
pub mod ids;
pub mod keys;
pub mod lease;
pub mod logless;
pub mod server;
pub mod sim;
