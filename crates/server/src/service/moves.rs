//! Exactly-once when a table moves between servers (issue 21), on two
//! servers' [`Shared`]s over member engines on one store — the service,
//! its exactly-once table ([`crate::dedup`]) and the carried replies
//! (`sextant_engine::table::carried`) for real; the coordinator's move
//! is the engine's DROP on one and ADD on the other, as the cluster
//! shell's table host does it. Placement is the engine's own view (a
//! SOID is served where its table is loaded), with R1 ([`Placement::
//! may_ack`]) refusable by hand.
//!
//! Every case: a mutation runs on the holder `a` (acknowledged, or
//! refused by R1 after it ran), its table moves to `b`, and the same
//! request (client, seq, operation) sent again — the client's retry —
//! must get the first reply wherever it lands, never run again
//! (`EEXIST`, `ENOENT`).

use super::*;
use crate::placement::Placement;
use sextant_engine::member::MemCatalog;
use sextant_engine::store::{MemStore, Store};
use sextant_engine::{EngineConfig, MemberConfig, TableManifest};
use sextant_proto::pb::request::Op;
use sextant_proto::{cred_to_pb, error_from_pb, soid_to_pb};
use sextant_types::{Attr, Credentials, Soid};
use std::sync::atomic::AtomicBool;

/// Served where the engine holds the table; R1 refusable. A BORROW
/// ([`Placement::borrow`]) says it began (`borrowing`) and waits until
/// the test lets it end (`granted`): the test moves the tables meanwhile.
struct Held {
    engine: Engine,
    refuse_ack: AtomicBool,
    generation: AtomicU64,
    borrowing: tokio::sync::Notify,
    granted: tokio::sync::Notify,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").finish_non_exhaustive()
    }
}

impl Placement for Held {
    fn check(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        match self.engine.table_holding(soid) {
            Some(_) => Ok(()),
            None => Err(Box::new(pb::WrongServer {
                soid: Some(soid_to_pb(soid)),
                hint: None,
                revision: 0,
                ran: false,
            })),
        }
    }

    fn may_ack(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        self.check(soid)?;
        if self.refuse_ack.load(Ordering::SeqCst) {
            return Err(Box::new(pb::WrongServer {
                soid: Some(soid_to_pb(soid)),
                hint: None,
                revision: 0,
                ran: false,
            }));
        }
        Ok(())
    }

    fn map(&self) -> pb::RouteMap {
        pb::RouteMap::default()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn can_borrow(&self) -> bool {
        true
    }

    fn borrow<'a>(
        &'a self,
        soids: &'a [Soid],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            self.borrowing.notify_one();
            self.granted.notified().await;
            soids
                .iter()
                .all(|s| self.engine.table_holding(*s).is_some())
        })
    }
}

/// One server: its service state and its placement.
struct Server {
    shared: Arc<Shared>,
    held: Arc<Held>,
    _stop: watch::Sender<bool>,
}

impl Server {
    /// A server over `engine`, its carried sink feeding its exactly-once
    /// table as `crate::serve` sets it up.
    fn new(engine: Engine) -> Server {
        let held = Arc::new(Held {
            engine: engine.clone(),
            refuse_ack: AtomicBool::new(false),
            generation: AtomicU64::new(1),
            borrowing: tokio::sync::Notify::new(),
            granted: tokio::sync::Notify::new(),
        });
        let (stop, stopped) = watch::channel(false);
        let mut dedup = Dedup::new(64, 64);
        if let Some(found) = engine.take_recovered_requests() {
            seed_dedup(&mut dedup, found);
        }
        let shared = Arc::new(Shared {
            logless: crate::logless::LoglessServer::new(&engine),
            engine,
            dedup: Mutex::new(dedup),
            shutdown: stopped,
            requests: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            in_flight: Arc::new(Semaphore::new(SERVER_IN_FLIGHT)),
            watchers: crate::watchers::Watchers::default(),
            placement: Arc::clone(&held) as Arc<dyn Placement>,
            wrong_server: AtomicU64::new(0),
            peers: None,
            keys: Arc::new(crate::clientkeys::KeyBook::in_memory()),
            ticket_master: sextant_proto::keyauth::ticket_master(b"the-secret"),
            issuer: "test".into(),
        });
        let weak = Arc::downgrade(&shared);
        shared.engine.set_carried_sink(Box::new(move |found| {
            if let Some(s) = weak.upgrade() {
                seed_carried(&mut s.dedup.lock(), found);
            }
        }));
        Server {
            shared,
            held,
            _stop: stop,
        }
    }

    async fn send(&self, r: &pb::Request) -> pb::Response {
        Arc::clone(&self.shared).handle(r.clone()).await
    }

    fn engine(&self) -> &Engine {
        &self.shared.engine
    }
}

/// Two members `a` and `b` on one store and catalogue, and a tree made
/// on `a`: `/d0` … `/d9`, each with `f0` … `f3`.
struct Cluster {
    catalog: Arc<MemCatalog>,
    a: Server,
    b: Server,
}

fn config() -> EngineConfig {
    EngineConfig {
        flush_interval: None,
        table_dir_limit: 3,
        table_inode_limit: 12,
        ..Default::default()
    }
}

fn cluster() -> Cluster {
    let store = MemStore::new();
    let catalog = Arc::new(MemCatalog::new());
    let member = |name: &str| {
        Engine::open_member(
            Arc::new(store.clone()) as Arc<dyn Store>,
            config(),
            MemberConfig {
                name: name.into(),
                catalog: Arc::clone(&catalog) as _,
            },
        )
        .unwrap()
    };
    let (a, b) = (member("a"), member("b"));
    let root = Credentials::root();
    for i in 0..10 {
        let d = a
            .mkdir(&root, Soid::ROOT, format!("d{i}").as_bytes(), 0o755)
            .unwrap()
            .wait(&a)
            .unwrap();
        for j in 0..4 {
            a.create(&root, d.soid, format!("f{j}").as_bytes(), 0o644, true)
                .unwrap()
                .wait(&a)
                .unwrap();
        }
    }
    Cluster {
        catalog,
        a: Server::new(a),
        b: Server::new(b),
    }
}

impl Cluster {
    /// A directory of `a`'s in a table of its own (not the root's), its
    /// files in it too: (table, directory).
    fn movable(&self) -> (u64, Attr) {
        self.movables().remove(0)
    }

    /// Every directory of `a`'s in a table of its own, with its files
    /// (one per table): (table, directory).
    fn movables(&self) -> Vec<(u64, Attr)> {
        let e = self.a.engine();
        let root = Credentials::root();
        let mut found: Vec<(u64, Attr)> = (0..10)
            .filter_map(|i| {
                let d = e
                    .lookup(&root, Soid::ROOT, format!("d{i}").as_bytes())
                    .ok()?;
                let t = e.table_holding(d.soid)?;
                let files_too = (0..4).all(|j| {
                    e.lookup(&root, d.soid, format!("f{j}").as_bytes())
                        .is_ok_and(|f| e.table_holding(f.soid) == Some(t))
                });
                (t != sextant_engine::member::ROOT_TABLE_ID && files_too).then_some((t, d))
            })
            .collect();
        found.dedup_by_key(|(t, _)| *t);
        assert!(!found.is_empty(), "some directory is in a table of its own");
        found
    }

    /// The coordinator's move of `table` from `from` to `to`: DROP, the
    /// catalogue's new owner, ADD.
    fn move_table(&self, table: u64, from: &Server, to: &Server, to_name: &str) {
        let dropped = from.engine().drop_table(table).unwrap();
        assert!(self.catalog.assign(table, to_name));
        to.engine()
            .add_table(&TableManifest::from_bytes(&dropped.to_bytes()).unwrap())
            .unwrap();
    }
}

const CLIENT: u64 = 0x5e47_a471;

/// Client `CLIENT`'s request number `seq` for `op`, as root (every
/// number below it answered).
fn request(seq: u64, op: Op) -> pb::Request {
    pb::Request {
        id: seq * 100,
        cred: Some(cred_to_pb(&Credentials::root())),
        client_id: CLIENT,
        seq,
        acked_below: seq,
        origin: 0,
        want_dir: false,
        op: Some(op),
    }
}

/// The errno of `resp` (0: success), or a panic on WRONG_SERVER.
fn errno(resp: &pb::Response) -> i32 {
    assert!(resp.wrong_server.is_none(), "WRONG_SERVER: {resp:?}");
    resp.error.as_ref().map_or(0, |e| error_from_pb(e).errno())
}

/// The SOID of an attributes reply.
fn soid_of(resp: &pb::Response) -> Option<Soid> {
    match &resp.result {
        Some(Res::Attr(a)) => soid_from_pb(a.soid.as_ref()).ok(),
        _ => None,
    }
}

fn names(e: &Engine, dir: Soid) -> Vec<Vec<u8>> {
    let (page, _) = e.readdir_page(&Credentials::root(), dir, 0, 1000).unwrap();
    let mut v: Vec<Vec<u8>> = page.iter().map(|d| d.name.to_vec()).collect();
    v.sort();
    v
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// What `op` (on `d`, whose table moves) must reply with, and what
/// `d`'s listing is once it ran once.
struct Case {
    what: &'static str,
    op: fn(Soid, Soid) -> Op,
    listing: &'static [&'static str],
}

/// `f` is `d/f1`'s SOID (for link).
fn cases() -> Vec<Case> {
    vec![
        Case {
            what: "create",
            op: |d, _| {
                Op::Create(pb::CreateRequest {
                    parent: Some(soid_to_pb(d)),
                    name: b("new"),
                    perm: 0o644,
                    exclusive: true,
                })
            },
            listing: &["f0", "f1", "f2", "f3", "new"],
        },
        Case {
            what: "mkdir",
            op: |d, _| {
                Op::Mkdir(pb::MkdirRequest {
                    parent: Some(soid_to_pb(d)),
                    name: b("sub"),
                    perm: 0o755,
                })
            },
            listing: &["f0", "f1", "f2", "f3", "sub"],
        },
        Case {
            what: "unlink",
            op: |d, _| {
                Op::Unlink(pb::UnlinkRequest {
                    parent: Some(soid_to_pb(d)),
                    name: b("f0"),
                })
            },
            listing: &["f1", "f2", "f3"],
        },
        Case {
            what: "rename",
            op: |d, _| {
                Op::Rename(pb::RenameRequest {
                    old_parent: Some(soid_to_pb(d)),
                    old_name: b("f0"),
                    new_parent: Some(soid_to_pb(d)),
                    new_name: b("g0"),
                    noreplace: true,
                    exchange: false,
                })
            },
            listing: &["f1", "f2", "f3", "g0"],
        },
        Case {
            what: "link",
            op: |d, f| {
                Op::Link(pb::LinkRequest {
                    soid: Some(soid_to_pb(f)),
                    new_parent: Some(soid_to_pb(d)),
                    new_name: b("again"),
                })
            },
            listing: &["again", "f0", "f1", "f2", "f3"],
        },
    ]
}

/// How the first attempt ended on `a`.
#[derive(Clone, Copy, Debug)]
enum First {
    /// Answered (its reply lost on the way: the client retries).
    Answered,
    /// Ran, then refused by R1 (the table moved before the reply).
    RefusedByR1,
}

/// Runs every case: the first attempt on `a` ends as `first`, the table
/// moves to `b` and, with `back`, home to `a` again; then the retry goes
/// to the table's holder.
async fn retried_after_a_move(first: First, back: bool) {
    for case in cases() {
        let x = cluster();
        let (t, d) = x.movable();
        let root = Credentials::root();
        let f1 = x.a.engine().lookup(&root, d.soid, b"f1").unwrap().soid;
        let r = request(7, (case.op)(d.soid, f1));
        x.a.held
            .refuse_ack
            .store(matches!(first, First::RefusedByR1), Ordering::SeqCst);
        let one = x.a.send(&r).await;
        x.a.held.refuse_ack.store(false, Ordering::SeqCst);
        let label = format!("{} ({first:?}, back: {back})", case.what);
        match first {
            First::Answered => assert_eq!(errno(&one), 0, "{label}: first attempt"),
            First::RefusedByR1 => assert!(
                one.wrong_server.as_ref().is_some_and(|w| w.ran),
                "{label}: R1 refuses the acknowledgement, saying it ran: {one:?}"
            ),
        }
        x.move_table(t, &x.a, &x.b, "b");
        let holder = if back {
            x.move_table(t, &x.b, &x.a, "a");
            &x.a
        } else {
            &x.b
        };
        // The retry lands where the table is now.
        let again = holder.send(&r).await;
        assert_eq!(
            errno(&again),
            0,
            "{label}: the retry must get the first reply, not run again: {again:?}"
        );
        if let First::Answered = first {
            assert_eq!(soid_of(&again), soid_of(&one), "{label}: the same reply");
        }
        // And once more (a second retry, answered from the same place).
        assert_eq!(errno(&holder.send(&r).await), 0, "{label}: second retry");
        let listing: Vec<Vec<u8>> = case.listing.iter().map(|s| b(s)).collect();
        assert_eq!(names(holder.engine(), d.soid), listing, "{label}: ran once");
    }
}

#[tokio::test]
async fn a_retry_after_a_move_gets_the_first_reply() {
    retried_after_a_move(First::Answered, false).await;
}

#[tokio::test]
async fn a_retry_of_a_mutation_refused_by_r1_gets_its_reply_from_the_new_holder() {
    retried_after_a_move(First::RefusedByR1, false).await;
}

#[tokio::test]
async fn a_retry_after_a_move_there_and_back_gets_the_first_reply() {
    retried_after_a_move(First::Answered, true).await;
    retried_after_a_move(First::RefusedByR1, true).await;
}

/// An attempt that began on `a` and then waited — here in a BORROW of the
/// other table its rename needs, as long as the coordinator's queue makes
/// it — while the client's retry ran the rename on the table's next holder
/// `b`, and the tables came back to `a` with that reply: the waiting
/// attempt must not run the rename a second time once its BORROW is
/// granted (it answered `ENOENT`, the name being gone — and would rename
/// whatever has that name by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_waiting_while_its_table_went_and_came_back_does_not_run_again() {
    let x = cluster();
    let tables = x.movables();
    assert!(tables.len() >= 2, "two directories in tables of their own");
    let ((t1, d1), (t2, d2)) = (tables[0].clone(), tables[1].clone());
    // d2's table is b's: a rename from d1 to d2 on a needs it.
    x.move_table(t2, &x.a, &x.b, "b");
    let r = request(
        9,
        Op::Rename(pb::RenameRequest {
            old_parent: Some(soid_to_pb(d1.soid)),
            old_name: b("f0"),
            new_parent: Some(soid_to_pb(d2.soid)),
            new_name: b("moved"),
            noreplace: true,
            exchange: false,
        }),
    );
    let a = Arc::clone(&x.a.shared);
    let first = {
        let r = r.clone();
        tokio::spawn(async move { a.handle(r).await })
    };
    // The first attempt waits for its BORROW.
    x.a.held.borrowing.notified().await;
    // Meanwhile d1's table moves to b, where the client's retry runs the
    // rename (both tables there): answered.
    x.move_table(t1, &x.a, &x.b, "b");
    let retry = x.b.send(&r).await;
    assert_eq!(errno(&retry), 0, "the retry on b runs it: {retry:?}");
    // Both tables come to a (the BORROW granted at last).
    x.move_table(t1, &x.b, &x.a, "a");
    x.move_table(t2, &x.b, &x.a, "a");
    x.a.held.granted.notify_one();
    let first = first.await.unwrap();
    assert!(
        first.wrong_server.is_some() || first.error.is_none(),
        "the waiting attempt must not run the rename again: {first:?}"
    );
    // A retry on a now gets the reply the tables carried.
    assert_eq!(errno(&x.a.send(&r).await), 0, "a retry on a is answered");
    assert_eq!(
        names(x.a.engine(), d1.soid),
        vec![b("f1"), b("f2"), b("f3")]
    );
    let d2_names = names(x.a.engine(), d2.soid);
    assert!(d2_names.contains(&b("moved")), "renamed once: {d2_names:?}");
}
