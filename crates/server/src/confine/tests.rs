//! A client key confined to `/home/alice`, through the service's rpcs:
//! every operation of the schema refused outside (and allowed inside),
//! resolution with `..`, symlinks and hard links, renames and links
//! across the boundary, search and aggregations, and the watch.
//!
//! The key claims root throughout, so that every refusal here is the
//! path limit's, not a permission's: each outside case is checked to
//! succeed for root with the cluster secret.

use crate::auth::{Caller, Trust};
use crate::clientkeys::{Grant, Limits};
use crate::dedup::Dedup;
use crate::service::{Service, Shared, SERVER_IN_FLIGHT};
use parking_lot::Mutex;
use sextant_engine::store::MemStore;
use sextant_engine::{Engine, EngineConfig};
use sextant_proto::pb::request::Op;
use sextant_proto::pb::sextant_server::Sextant;
use sextant_proto::pb::{self, search_request::Scope};
use sextant_proto::{cred_to_pb, soid_from_pb, soid_to_pb};
use sextant_types::{Credentials, Soid};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tonic::Request;

/// `/home/alice` (the subtree: `f`, `d/`, `l` → `/home/bob/secret`,
/// `up` → `../bob`, `hl` a hard link of `/home/bob/secret`, `in` → `f`),
/// `/home/bob` (`secret`, `x/`), `/etc/passwd`.
struct Fixture {
    svc: Service,
    _stop: tokio::sync::watch::Sender<bool>,
    home: Soid,
    alice: Soid,
    f: Soid,
    d: Soid,
    l: Soid,
    bob: Soid,
    secret: Soid,
    bob_x: Soid,
    passwd: Soid,
}

async fn fixture() -> Fixture {
    fixture_with(false).await
}

/// [`fixture`], with log-less durability when `logless`.
async fn fixture_with(logless: bool) -> Fixture {
    let config = EngineConfig {
        flush_interval: None,
        logless: logless.then(sextant_engine::LoglessConfig::default),
        ..Default::default()
    };
    let e = Engine::open(Arc::new(MemStore::new()), config).unwrap();
    let r = Credentials::root();
    let dir = |p: Soid, n: &[u8]| e.mkdir(&r, p, n, 0o755).unwrap().value.soid;
    let home = dir(Soid::ROOT, b"home");
    let alice = dir(home, b"alice");
    let bob = dir(home, b"bob");
    let etc = dir(Soid::ROOT, b"etc");
    let d = dir(alice, b"d");
    let bob_x = dir(bob, b"x");
    let file = |p: Soid, n: &[u8]| e.create(&r, p, n, 0o644, true).unwrap().value.soid;
    let f = file(alice, b"f");
    let secret = file(bob, b"secret");
    let passwd = file(etc, b"passwd");
    let l = e
        .symlink(&r, alice, b"l", b"/home/bob/secret")
        .unwrap()
        .value
        .soid;
    // (Durable with the later setxattrs.)
    let _ = e.symlink(&r, alice, b"up", b"../bob").unwrap();
    let _ = e.symlink(&r, alice, b"in", b"f").unwrap();
    let _ = e.link(&r, secret, alice, b"hl").unwrap();
    let c = e
        .setxattr(&r, f, b"user.x", b"v", sextant_engine::XattrFlags::Any)
        .unwrap();
    e.durable(c.lsn).await.unwrap();
    let c = e
        .setxattr(&r, passwd, b"user.x", b"v", sextant_engine::XattrFlags::Any)
        .unwrap();
    e.durable(c.lsn).await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let shared = Arc::new(Shared {
        logless: crate::logless::LoglessServer::new(&e),
        engine: e,
        dedup: Mutex::new(Dedup::new(64, 64)),
        shutdown: stopped,
        requests: AtomicU64::new(0),
        replayed: AtomicU64::new(0),
        in_flight: Arc::new(tokio::sync::Semaphore::new(SERVER_IN_FLIGHT)),
        watchers: crate::watchers::Watchers::default(),
        placement: Arc::new(crate::placement::Everything {
            name: "sextant".into(),
            address: "localhost".into(),
        }),
        wrong_server: AtomicU64::new(0),
        peers: None,
        keys: Arc::new(crate::clientkeys::KeyBook::in_memory()),
        ticket_master: sextant_proto::keyauth::ticket_master(b"the-secret"),
        issuer: "s1".into(),
    });
    Fixture {
        svc: Service { shared },
        _stop: stop,
        home,
        alice,
        f,
        d,
        l,
        bob,
        secret,
        bob_x,
        passwd,
    }
}

fn alice_key() -> Caller {
    Caller::Key(Grant {
        name: "alice".into(),
        created: 1,
        limits: Arc::new(Limits {
            path: Some("/home/alice".into()),
            ..Default::default()
        }),
    })
}

fn root_claim() -> pb::Credentials {
    cred_to_pb(&Credentials::root())
}

/// `op` through `Call` as `caller` claiming root: the reply.
async fn run(x: &Fixture, caller: &Caller, op: Op) -> pb::Response {
    let mut req = Request::new(pb::Request {
        cred: Some(root_claim()),
        op: Some(op),
        ..Default::default()
    });
    req.extensions_mut().insert(caller.clone());
    x.svc.call(req).await.unwrap().into_inner()
}

fn errno(r: &pb::Response) -> i32 {
    r.error.as_ref().map_or(0, |e| e.errno)
}

const EACCES: i32 = 13;
const ENOENT: i32 = 2;

fn s(s: Soid) -> Option<pb::Soid> {
    Some(soid_to_pb(s))
}

fn n(n: &str) -> Vec<u8> {
    n.as_bytes().to_vec()
}

/// The operation `name` of the schema, on an object outside the subtree
/// (`false`) or in it (`true`). A new operation in the schema fails here
/// until it has a case.
fn sample(name: &str, x: &Fixture, inside: bool) -> Op {
    let (obj, dir) = if inside {
        (x.f, x.alice)
    } else {
        (x.passwd, x.bob)
    };
    let (moved_from, moved_to) = if inside {
        (x.alice, x.d)
    } else {
        // Out of the subtree: the other end is inside, so only the
        // outside end refuses it.
        (x.alice, x.bob)
    };
    match name {
        "lookup" => Op::Lookup(pb::LookupRequest {
            parent: s(dir),
            name: n(if inside { "f" } else { "secret" }),
        }),
        "getattr" => Op::Getattr(pb::GetattrRequest { soid: s(obj) }),
        "resolve" => Op::Resolve(pb::ResolveRequest {
            path: n(if inside {
                "/home/alice/f"
            } else {
                "/home/bob/secret"
            }),
            follow_last: true,
        }),
        "readlink" => Op::Readlink(pb::ReadlinkRequest {
            soid: s(if inside {
                x.l
            } else {
                // A symlink outside: /etc/passwd is no symlink, but the
                // refusal comes first (and root's reads it: EINVAL).
                x.passwd
            }),
        }),
        "readdir" => Op::Readdir(pb::ReaddirRequest {
            dir: s(dir),
            after: 0,
            limit: 0,
            plus: false,
        }),
        "getxattr" => Op::Getxattr(pb::GetxattrRequest {
            soid: s(obj),
            name: n("user.x"),
        }),
        "listxattr" => Op::Listxattr(pb::ListxattrRequest { soid: s(obj) }),
        "access" => Op::Access(pb::AccessRequest {
            soid: s(obj),
            mask: 4,
        }),
        "statfs" => Op::Statfs(pb::StatfsRequest {}),
        "status" => Op::Status(pb::StatusRequest {}),
        "create" => Op::Create(pb::CreateRequest {
            parent: s(dir),
            name: n("new"),
            perm: 0o644,
            exclusive: true,
        }),
        "mknod" => Op::Mknod(pb::MknodRequest {
            parent: s(dir),
            name: n("fifo"),
            ftype: pb::FileType::Fifo as i32,
            perm: 0o644,
            rdev: 0,
        }),
        "mkdir" => Op::Mkdir(pb::MkdirRequest {
            parent: s(dir),
            name: n("nd"),
            perm: 0o755,
        }),
        "symlink" => Op::Symlink(pb::SymlinkRequest {
            parent: s(dir),
            name: n("nl"),
            target: n("f"),
        }),
        "unlink" => Op::Unlink(pb::UnlinkRequest {
            parent: s(dir),
            name: n(if inside { "f" } else { "secret" }),
        }),
        "rmdir" => Op::Rmdir(pb::RmdirRequest {
            parent: s(dir),
            name: n(if inside { "d" } else { "x" }),
        }),
        "rename" => Op::Rename(pb::RenameRequest {
            old_parent: s(moved_from),
            old_name: n("f"),
            new_parent: s(moved_to),
            new_name: n("g"),
            noreplace: false,
            exchange: false,
        }),
        "link" => Op::Link(pb::LinkRequest {
            soid: s(obj),
            new_parent: s(x.alice),
            new_name: n("h"),
        }),
        "setattr" => Op::Setattr(pb::SetattrRequest {
            soid: s(obj),
            perm: Some(0o666),
            ..Default::default()
        }),
        "setxattr" => Op::Setxattr(pb::SetxattrRequest {
            soid: s(obj),
            name: n("user.y"),
            value: n("w"),
            flags: 0,
        }),
        "removexattr" => Op::Removexattr(pb::RemovexattrRequest {
            soid: s(obj),
            name: n("user.x"),
        }),
        "sync" => Op::Sync(pb::SyncRequest {
            release_through: 0,
            ..Default::default()
        }),
        other => panic!("the schema has an operation without a case here: {other}"),
    }
}

/// The operations of the schema's `Request`.
fn schema_ops() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto/proto/sextant.proto");
    let text = std::fs::read_to_string(path).unwrap();
    let request = &text[text.find("message Request {").unwrap()..];
    let oneof = &request[request.find("oneof op {").unwrap()..];
    let oneof = &oneof[..oneof.find('}').unwrap()];
    let ops: Vec<String> = oneof
        .lines()
        .skip(1)
        .filter_map(|l| {
            let l = l.trim();
            (!l.is_empty() && !l.starts_with("//")).then(|| l.split_whitespace().nth(1))?
        })
        .map(str::to_string)
        .collect();
    assert!(ops.len() >= 22, "{ops:?}");
    ops
}

/// Every operation of the schema: outside the subtree, EACCES for the key
/// where root with the secret succeeds (so the limit refused it); inside,
/// the key's outcome is root's. Admin calls (`status`, a plain `sync`) are
/// refused; `statfs` is answered without the store's counts.
#[tokio::test]
async fn a_path_limited_key_names_nothing_outside_its_subtree_in_any_operation() {
    let key = alice_key();
    let trusted = Caller::Trusted(Trust::Secret);
    for name in &schema_ops() {
        match name.as_str() {
            "status" | "sync" => {
                let x = fixture().await;
                let op = sample(name, &x, true);
                assert_eq!(errno(&run(&x, &key, op.clone()).await), EACCES, "{name}");
                assert_eq!(errno(&run(&x, &trusted, op).await), 0, "{name}: root may");
                continue;
            }
            "statfs" => {
                let x = fixture().await;
                let op = sample(name, &x, true);
                let got = run(&x, &key, op.clone()).await;
                let all = run(&x, &trusted, op).await;
                let inodes = |r: &pb::Response| match &r.result {
                    Some(pb::response::Result::Statfs(s)) => s.inodes,
                    other => panic!("statfs: {other:?}"),
                };
                assert!(inodes(&all) > 10);
                assert_eq!(inodes(&got), 0, "statfs told the store's inode count");
                continue;
            }
            _ => {}
        }
        let x = fixture().await;
        let out = sample(name, &x, false);
        assert_eq!(
            errno(&run(&x, &key, out.clone()).await),
            EACCES,
            "{name} outside the subtree was not refused"
        );
        let x = fixture().await;
        let root_out = errno(&run(&x, &trusted, sample(name, &x, false)).await);
        if name != "readlink" {
            assert_eq!(root_out, 0, "{name}: root may (the fixture is wrong)");
        }
        let x = fixture().await;
        let got = errno(&run(&x, &key, sample(name, &x, true)).await);
        let x = fixture().await;
        let want = errno(&run(&x, &trusted, sample(name, &x, true)).await);
        assert_eq!(got, want, "{name} inside the subtree: not as root");
        assert_eq!(got, 0, "{name} inside the subtree failed");
    }
}

/// Resolution: `..` out of the subtree, symlinks out of it (absolute and
/// relative), a missing name outside (not told apart from a present one),
/// the ancestors themselves; hard links into the subtree are in.
#[tokio::test]
async fn a_path_limited_key_resolves_nothing_outside() {
    let x = fixture().await;
    let key = alice_key();
    let resolve = |path: &str, follow_last: bool| {
        Op::Resolve(pb::ResolveRequest {
            path: n(path),
            follow_last,
        })
    };
    for (path, follow, want) in [
        ("/home/alice/f", true, 0),
        ("/home/alice", true, 0),
        ("/home/alice/", true, 0),
        ("/home/alice/d/../f", true, 0),
        ("/home/alice/in", true, 0),
        ("/home/alice/hl", true, 0),
        ("/home/alice/l", false, 0),
        ("/home/alice/nothing", true, ENOENT),
        ("/home/alice/l", true, EACCES),
        ("/home/alice/up", true, EACCES),
        ("/home/alice/up/secret", true, EACCES),
        ("/home/alice/..", true, EACCES),
        ("/home/alice/../bob/secret", true, EACCES),
        ("/home/bob/secret", true, EACCES),
        ("/home/bob/nothing", true, EACCES),
        ("/nothing", true, EACCES),
        ("/home", true, EACCES),
        ("/", true, EACCES),
        ("/etc/passwd", true, EACCES),
    ] {
        let r = run(&x, &key, resolve(path, follow)).await;
        assert_eq!(errno(&r), want, "{path} (follow {follow})");
    }
    // The subtree's root's parent (what `..` names): refused by SOID too.
    let up = Op::Getattr(pb::GetattrRequest { soid: s(x.home) });
    assert_eq!(errno(&run(&x, &key, up).await), EACCES);
    for plus in [false, true] {
        let root = Op::Readdir(pb::ReaddirRequest {
            dir: s(Soid::ROOT),
            after: 0,
            limit: 0,
            plus,
        });
        assert_eq!(errno(&run(&x, &key, root).await), EACCES, "plus {plus}");
    }
}

/// Renames and links across the boundary, either way, and of the subtree's
/// root itself, are refused; within it they work. A directory moved out
/// by the admin is out at once (membership is by ancestry, not by SOID).
#[tokio::test]
async fn a_path_limited_key_moves_nothing_in_or_out() {
    let x = fixture().await;
    let key = alice_key();
    let trusted = Caller::Trusted(Trust::Secret);
    let rename = |from: Soid, name: &str, to: Soid, new: &str| {
        Op::Rename(pb::RenameRequest {
            old_parent: s(from),
            old_name: n(name),
            new_parent: s(to),
            new_name: n(new),
            noreplace: false,
            exchange: false,
        })
    };
    for (what, op) in [
        ("a file out", rename(x.alice, "f", x.bob, "f")),
        ("a directory out", rename(x.alice, "d", x.bob, "d")),
        ("a file in", rename(x.bob, "secret", x.alice, "s")),
        ("the subtree's root", rename(x.home, "alice", x.home, "a2")),
        ("exchanged", {
            let Op::Rename(mut r) = rename(x.alice, "f", x.bob, "secret") else {
                unreachable!()
            };
            r.exchange = true;
            Op::Rename(r)
        }),
        (
            "a link out",
            Op::Link(pb::LinkRequest {
                soid: s(x.f),
                new_parent: s(x.bob),
                new_name: n("f2"),
            }),
        ),
        (
            "a link in",
            Op::Link(pb::LinkRequest {
                soid: s(x.passwd),
                new_parent: s(x.alice),
                new_name: n("p"),
            }),
        ),
        (
            "the root removed",
            Op::Rmdir(pb::RmdirRequest {
                parent: s(x.home),
                name: n("alice"),
            }),
        ),
    ] {
        assert_eq!(errno(&run(&x, &key, op).await), EACCES, "{what}");
    }
    let ok = run(&x, &key, rename(x.alice, "f", x.d, "g")).await;
    assert_eq!(errno(&ok), 0, "within the subtree");
    // The admin moves d (with g) out: both are out now.
    let out = run(&x, &trusted, rename(x.alice, "d", x.bob, "d")).await;
    assert_eq!(errno(&out), 0);
    for soid in [x.d, x.f] {
        let op = Op::Getattr(pb::GetattrRequest { soid: s(soid) });
        assert_eq!(errno(&run(&x, &key, op).await), EACCES, "moved out");
    }
    // ... and bob's x moved in is in.
    let back = run(&x, &trusted, rename(x.bob, "x", x.alice, "x")).await;
    assert_eq!(errno(&back), 0);
    let op = Op::Getattr(pb::GetattrRequest { soid: s(x.bob_x) });
    assert_eq!(errno(&run(&x, &key, op).await), 0, "moved in");
}

/// A search as `caller`: its hits' paths and its `done`, or the status.
async fn search(
    x: &Fixture,
    caller: &Caller,
    scope: Scope,
    count_only: bool,
) -> Result<(Vec<String>, pb::SearchDone), tonic::Status> {
    let mut req = Request::new(pb::SearchRequest {
        cred: Some(root_claim()),
        scope: Some(scope),
        expr: Some(pb::QueryExpr {
            node: Some(pb::query_expr::Node::Constant(true)),
        }),
        count_only,
        ..Default::default()
    });
    req.extensions_mut().insert(caller.clone());
    let mut stream = x.svc.search(req).await?.into_inner();
    let mut paths = Vec::new();
    use tokio_stream::StreamExt;
    while let Some(b) = stream.next().await {
        let b = b?;
        if let Some(e) = b.error {
            return Err(tonic::Status::internal(format!("errno {}", e.errno)));
        }
        paths.extend(
            b.hits
                .iter()
                .map(|h| String::from_utf8_lossy(&h.path).into_owned()),
        );
        if let Some(d) = b.done {
            paths.sort();
            return Ok((paths, d));
        }
    }
    panic!("the search ended without done");
}

/// `find /` and `find /home` are clamped to the subtree: exactly its
/// paths (the hard link by its name inside only); counts too; a scope
/// outside (by path or SOID) is refused; so is a file whose primary name
/// is outside (the search would name it by that).
#[tokio::test]
async fn a_path_limited_key_searches_its_subtree_only() {
    let x = fixture().await;
    let key = alice_key();
    let subtree: Vec<String> = [
        "/home/alice",
        "/home/alice/d",
        "/home/alice/f",
        "/home/alice/hl",
        "/home/alice/in",
        "/home/alice/l",
        "/home/alice/up",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    for scope in [
        Scope::Path(n("/")),
        Scope::Path(n("/home")),
        Scope::Path(n("/home/alice")),
        Scope::Path(n("/home/alice/d/..")),
        Scope::Soid(soid_to_pb(Soid::ROOT)),
        Scope::Soid(soid_to_pb(x.alice)),
    ] {
        let (paths, done) = search(&x, &key, scope.clone(), false).await.unwrap();
        assert_eq!(paths, subtree, "{scope:?}");
        assert_eq!(done.count, subtree.len() as u64);
        let (_, done) = search(&x, &key, scope.clone(), true).await.unwrap();
        assert_eq!(done.count, subtree.len() as u64, "count of {scope:?}");
    }
    // Root with the secret sees more (the fixture is right), and how the
    // store was searched; the key only its hits' count and size.
    let (all, done) = search(
        &x,
        &Caller::Trusted(Trust::Secret),
        Scope::Path(n("/")),
        false,
    )
    .await
    .unwrap();
    assert!(all.contains(&"/home/bob/secret".to_string()), "{all:?}");
    assert!(done.tables > 0, "{done:?}");
    let (_, done) = search(&x, &key, Scope::Path(n("/")), false).await.unwrap();
    assert_eq!(
        pb::SearchDone {
            count: 0,
            total_size: 0,
            ..done.clone()
        },
        pb::SearchDone::default(),
        "figures about the store: {done:?}"
    );
    for scope in [
        Scope::Path(n("/home/bob")),
        Scope::Path(n("/home/bob/nothing")),
        Scope::Path(n("/etc")),
        Scope::Path(n("/home/alice/up/x")),
        Scope::Soid(soid_to_pb(x.bob)),
        Scope::Soid(soid_to_pb(x.secret)),
        Scope::Path(n("/home/alice/hl")),
    ] {
        let r = search(&x, &key, scope.clone(), false).await;
        assert!(r.is_err(), "{scope:?}: {r:?}");
    }
    // A file in the subtree by its own (primary) name is searchable.
    let (paths, _) = search(&x, &key, Scope::Soid(soid_to_pb(x.f)), false)
        .await
        .unwrap();
    assert_eq!(paths, vec!["/home/alice/f".to_string()]);
}

/// The watch of a confined key carries the subtree's changes only: a
/// change outside (a create in /home/bob, a chmod of /etc/passwd) never
/// reaches it, one inside does.
#[tokio::test]
async fn a_path_limited_keys_watch_carries_nothing_from_outside() {
    let x = fixture().await;
    let trusted = Caller::Trusted(Trust::Secret);
    // Keys of the server's book (a watch ends when its key is not).
    let grant = |name: &str, limits: Limits| {
        let (k, _) = x.svc.shared.keys.add(name, limits).unwrap();
        Caller::Key(Grant {
            name: k.name.clone(),
            created: k.created,
            limits: Arc::new(k.limits.clone()),
        })
    };
    let key = grant(
        "alice",
        Limits {
            path: Some("/home/alice".into()),
            ..Default::default()
        },
    );
    let mut req = Request::new(pb::WatchRequest { origin: 0 });
    req.extensions_mut().insert(key);
    let mut stream = x.svc.watch(req).await.unwrap().into_inner();
    // What a key without a path sees, for comparison.
    let mut req = Request::new(pb::WatchRequest { origin: 0 });
    req.extensions_mut().insert(grant("all", Limits::default()));
    let mut all = x.svc.watch(req).await.unwrap().into_inner();
    let outside = [
        Op::Create(pb::CreateRequest {
            parent: s(x.bob),
            name: n("new"),
            perm: 0o644,
            exclusive: true,
        }),
        Op::Setattr(pb::SetattrRequest {
            soid: s(x.passwd),
            perm: Some(0o600),
            ..Default::default()
        }),
    ];
    for op in outside {
        assert_eq!(errno(&run(&x, &trusted, op).await), 0);
    }
    let inside = run(
        &x,
        &trusted,
        Op::Create(pb::CreateRequest {
            parent: s(x.alice),
            name: n("mine"),
            perm: 0o644,
            exclusive: true,
        }),
    )
    .await;
    assert_eq!(errno(&inside), 0);
    let mine = match inside.result {
        Some(pb::response::Result::Attr(a)) => soid_from_pb(a.soid.as_ref()).unwrap(),
        other => panic!("{other:?}"),
    };
    use tokio_stream::StreamExt;
    let collect = |changes: &[pb::Changed]| {
        let mut inodes = Vec::new();
        let mut parents = Vec::new();
        for c in changes {
            inodes.extend(c.inodes.iter().map(|s| soid_from_pb(Some(s)).unwrap()));
            parents.extend(
                c.entries
                    .iter()
                    .map(|e| soid_from_pb(e.parent.as_ref()).unwrap()),
            );
        }
        (inodes, parents)
    };
    // The unconfined key sees all three changes (the test can fail).
    let mut seen = Vec::new();
    while !collect(&seen).0.contains(&mine) {
        let b = tokio::time::timeout(Duration::from_secs(5), all.next())
            .await
            .expect("no change reached the unconfined watch")
            .unwrap()
            .unwrap();
        seen.extend(b.changes);
    }
    let (inodes, parents) = collect(&seen);
    assert!(inodes.contains(&x.passwd) && parents.contains(&x.bob));
    // The confined one: the inside change, and nothing else.
    let mut seen = Vec::new();
    while !collect(&seen).0.contains(&mine) {
        let b = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the inside change did not reach the confined watch")
            .unwrap()
            .unwrap();
        seen.extend(b.changes);
    }
    let (inodes, parents) = collect(&seen);
    for soid in &inodes {
        assert!(
            *soid == mine || *soid == x.alice,
            "an inode outside was sent: {soid:?} ({inodes:?})"
        );
    }
    for p in &parents {
        assert_eq!(*p, x.alice, "an entry outside was sent");
    }
}

/// Log-less: a reply carries other clients' redo entries (more copies of
/// them), which name what those clients changed — not to a confined key,
/// whose replies carry its own entry only; a key without a path still
/// gets the others'.
#[tokio::test]
async fn a_path_limited_key_gets_no_other_clients_backups() {
    let x = fixture_with(true).await;
    assert!(x.svc.shared.logless.is_some());
    let mutate = |caller: Caller, client_id: u64, parent: Soid, name: &str| {
        let mut req = Request::new(pb::Request {
            cred: Some(root_claim()),
            op: Some(Op::Create(pb::CreateRequest {
                parent: s(parent),
                name: n(name),
                perm: 0o644,
                exclusive: true,
            })),
            client_id,
            seq: 1,
            ..Default::default()
        });
        req.extensions_mut().insert(caller);
        let svc = x.svc.clone();
        async move { svc.call(req).await.unwrap().into_inner() }
    };
    let admin = mutate(Caller::Trusted(Trust::Secret), 7, x.bob, "outside").await;
    assert_eq!(errno(&admin), 0);
    assert!(
        admin.backups.len() > 1,
        "the ARL is shared: {}",
        admin.backups.len()
    );
    let confined = mutate(alice_key(), 9, x.alice, "mine").await;
    assert_eq!(errno(&confined), 0);
    assert_eq!(confined.backups.len(), 1, "another client's entry was sent");
    let plain = Caller::Key(Grant {
        name: "plain".into(),
        created: 1,
        limits: Arc::new(Limits::default()),
    });
    let other = mutate(plain, 11, x.alice, "theirs").await;
    assert!(other.backups.len() >= 3, "{}", other.backups.len());
}

/// `--path` as the book keeps it: normalised; `/` is no limit; relative
/// paths and `.`/`..` components are refused (a key must not be limited
/// to somewhere other than it reads).
#[test]
fn a_key_path_is_kept_normalised() {
    let from = |p: &str| {
        Limits::from_pb(&pb::KeyLimits {
            path: n(p),
            ..Default::default()
        })
        .map(|l| l.path)
    };
    assert_eq!(from("/home//alice/"), Ok(Some("/home/alice".into())));
    assert_eq!(from("/"), Ok(None));
    assert_eq!(from(""), Ok(None));
    for bad in ["home/alice", "/home/../etc", "/home/./alice"] {
        assert!(from(bad).is_err(), "{bad}");
    }
    assert_eq!(
        Limits {
            path: Some("/home/alice".into()),
            ..Default::default()
        }
        .to_pb()
        .path,
        n("/home/alice")
    );
}

/// On a cluster, a confinement that needs another server's directories
/// (the path to the subtree, an object's parents) is refused (EACCES),
/// not passed on as a WRONG_SERVER the client would chase; the object
/// the operation names held elsewhere stays a WRONG_SERVER (its owner
/// checks it).
#[test]
fn a_confinement_across_servers_is_refused_the_target_elsewhere_redirected() {
    use sextant_types::{FsError, Soid};
    let target = Soid::from_u128(7);
    let parent = Soid::from_u128(8);
    let redirect = FsError::WrongServer { soid: target };
    assert!(matches!(
        super::across_servers(redirect, Some(target)),
        FsError::WrongServer { .. }
    ));
    for e in [
        FsError::WrongServer { soid: parent },
        FsError::NeedsTable { soid: parent },
        FsError::CrossServer,
    ] {
        assert!(matches!(
            super::across_servers(e, Some(target)),
            FsError::Access
        ));
    }
    assert!(matches!(
        super::across_servers(FsError::WrongServer { soid: target }, None),
        FsError::Access
    ));
    assert!(matches!(
        super::across_servers(FsError::NotFound, None),
        FsError::NotFound
    ));
}

/// The signal that a local walk needs the other servers is a type of its
/// own: an errno the engine answers with — EXDEV included — is decided
/// and passed on as it is, never run again across the servers nor turned
/// into the refusal of a check without peers (EACCES).
#[test]
fn a_real_cross_server_errno_is_not_the_needs_peers_signal() {
    use super::CheckError;
    use sextant_types::FsError;
    let real = CheckError::from(FsError::CrossServer);
    assert_ne!(real, CheckError::NeedsPeers);
    assert_eq!(real.decided(), FsError::CrossServer);
    assert_eq!(CheckError::NeedsPeers.decided(), FsError::Access);
}

/// On a cluster, a check over the records kept under live leases
/// ([`super::across::Across::kept`]) remembers the directories it proved
/// inside the key's subtree for the next checks of the same generation;
/// a directory the admin then moves out (this server's epoch moves) is
/// out at the next check, with every object below it — and a hard link
/// into the subtree, a symlink in it and a file outside are judged as on
/// one server, first walked, then by the memo. Fails when what was
/// remembered outlives its generation.
#[tokio::test]
async fn a_directory_known_inside_is_out_once_it_moves_out() {
    use super::across::Across;
    use super::{CheckError, Walk};
    use crate::placement::{Everything, Placement};
    use sextant_types::FsError;
    let x = fixture().await;
    let engine = x.svc.shared.engine.clone();
    let r = Credentials::root();
    let g = engine
        .create(&r, x.d, b"g", 0o644, true)
        .unwrap()
        .value
        .soid;
    // One other server, whose lease on its records is live.
    let other = "127.0.0.1:2";
    let peers = Arc::new(crate::peers::Peers::new("secret", None, 0).unwrap());
    let placement: Arc<dyn Placement> = Arc::new(Everything {
        name: "s2".into(),
        address: other.into(),
    });
    {
        let mut held = peers.leases.held.lock();
        let ticket = held.ticket();
        let now = std::time::Instant::now();
        assert!(held.install(other, (7, 1), now, crate::dir_leases::LEASE, ticket));
    }
    let kept = || {
        Across::kept(
            engine.clone(),
            Arc::clone(&peers),
            Arc::clone(&placement),
            tokio::runtime::Handle::current(),
        )
        .expect("every lease live")
    };
    let getattr = |a: &Across, soid: Soid| {
        let req = pb::Request {
            cred: Some(root_claim()),
            op: Some(Op::Getattr(pb::GetattrRequest { soid: s(soid) })),
            ..Default::default()
        };
        let got = super::check(&Walk::across(&engine, a), "/home/alice", &req).map(|_| ());
        assert!(!a.needed_call(), "all here: no call needed");
        got
    };
    let refused = Err(CheckError::Fs(FsError::Access));
    for round in 0..2 {
        let a = kept();
        for (what, soid) in [
            ("g in d", g),
            ("d", x.d),
            ("f", x.f),
            ("the symlink l", x.l),
            ("a hard link in", x.secret),
        ] {
            assert_eq!(getattr(&a, soid), Ok(()), "{what}, round {round}");
        }
        for (what, soid) in [("passwd", x.passwd), ("bob", x.bob), ("bob/x", x.bob_x)] {
            assert_eq!(getattr(&a, soid), refused, "{what}, round {round}");
        }
        assert!(a.known_inside(x.alice, &[x.d]), "d remembered inside");
        assert!(!a.known_inside(x.alice, &[x.bob]));
    }
    // The admin moves d (with g) out.
    let _ = engine
        .rename(&r, x.alice, b"d", x.bob, b"d", Default::default())
        .unwrap();
    let a = kept();
    assert_eq!(getattr(&a, g), refused, "g moved out");
    assert_eq!(getattr(&a, x.d), refused, "d moved out");
    assert_eq!(getattr(&a, x.f), Ok(()));
    assert!(!a.known_inside(x.alice, &[x.d]), "forgotten");
}
