//! The caller rules, and that the service runs every operation of the
//! schema as the caller's kernel identity whatever it claims.

use super::*;
use crate::dedup::Dedup;
use crate::service::{Service, Shared, SERVER_IN_FLIGHT};
use sextant_engine::store::MemStore;
use sextant_engine::{Engine, EngineConfig};
use sextant_proto::pb::request::Op;
use sextant_proto::pb::sextant_server::Sextant;
use sextant_proto::{cred_to_pb, soid_to_pb};
use sextant_types::Soid;
use std::sync::atomic::AtomicU64;

fn user(uid: u32, gid: u32, groups: &[u32]) -> Credentials {
    Credentials {
        uid,
        gid,
        groups: groups.to_vec(),
    }
}

fn claim(uid: u32, gid: u32, groups: &[u32]) -> pb::Credentials {
    cred_to_pb(&user(uid, gid, groups))
}

#[test]
fn a_claim_of_more_than_the_kernel_gives_is_told_apart() {
    let k = user(1000, 100, &[100, 20, 30]);
    assert!(!claims_more(&claim(1000, 100, &[20, 30]), &k));
    assert!(!claims_more(&claim(1000, 100, &[]), &k), "fewer groups");
    assert!(claims_more(&claim(0, 100, &[]), &k), "another uid");
    assert!(claims_more(&claim(1000, 0, &[]), &k), "another gid");
    assert!(
        claims_more(&claim(1000, 100, &[20, 0]), &k),
        "a group not its own"
    );
}

#[test]
fn a_kernel_caller_runs_as_itself_and_a_trusted_one_as_claimed() {
    let k = user(1000, 100, &[100, 20]);
    let forged = pb::Request {
        cred: Some(claim(0, 0, &[0])),
        op: Some(Op::Statfs(pb::StatfsRequest {})),
        ..Default::default()
    };
    let r = Caller::Kernel(k.clone()).admitted(forged.clone());
    assert_eq!(r.cred, Some(cred_to_pb(&k)));
    // No claim at all: still the kernel's.
    let r = Caller::Kernel(k.clone()).admitted(pb::Request {
        cred: None,
        ..forged.clone()
    });
    assert_eq!(r.cred, Some(cred_to_pb(&k)));
    for t in [Trust::Secret, Trust::RootPeer] {
        assert_eq!(Caller::Trusted(t).admitted(forged.clone()), forged);
    }
    let mut s = pb::SearchRequest {
        cred: Some(claim(0, 0, &[])),
        ..Default::default()
    };
    Caller::Kernel(k.clone()).admit_search(&mut s).unwrap();
    assert_eq!(s.cred, Some(cred_to_pb(&k)));
    assert!(!Caller::Kernel(k).may_watch());
    assert!(Caller::Trusted(Trust::Secret).may_watch());
}

#[test]
fn groups_come_from_the_user_database() {
    // root is in group 0 on every system; a uid nobody has is in its
    // primary group only.
    assert!(lookup_groups(0, 0).contains(&0));
    assert_eq!(lookup_groups(3_999_999_999, 4242), vec![4242]);
    let db = GroupDb::new(Duration::from_secs(60));
    assert_eq!(db.groups(3_999_999_999, 7), vec![7]);
    assert_eq!(db.groups(3_999_999_999, 7), vec![7], "cached");
}

/// The names in the schema: its rpcs, and the operations of `Request`.
fn schema() -> (Vec<String>, Vec<String>) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto/proto/sextant.proto");
    let text = std::fs::read_to_string(path).unwrap();
    let rpcs = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim().to_string())
        .collect::<Vec<_>>();
    let request = &text[text.find("message Request {").unwrap()..];
    let oneof = &request[request.find("oneof op {").unwrap()..];
    let oneof = &oneof[..oneof.find('}').unwrap()];
    let ops = oneof
        .lines()
        .skip(1)
        .filter_map(|l| {
            let l = l.trim();
            (!l.is_empty() && !l.starts_with("//")).then(|| l.split_whitespace().nth(1))?
        })
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert!(rpcs.len() >= 5 && ops.len() >= 22, "{rpcs:?} {ops:?}");
    (rpcs, ops)
}

/// A service on a fresh in-memory engine holding, as root: `/priv` (0700)
/// with the file `f` (0600, `user.x` set), the directory `d` and the
/// symlink `l`; and `/pub` (0777).
struct Fixture {
    svc: Service,
    _stop: tokio::sync::watch::Sender<bool>,
    f: Soid,
    l: Soid,
    priv_: Soid,
}

async fn fixture() -> Fixture {
    let config = EngineConfig {
        flush_interval: None,
        ..Default::default()
    };
    let e = Engine::open(Arc::new(MemStore::new()), config).unwrap();
    let root = Credentials::root();
    let priv_ = e
        .mkdir(&root, Soid::ROOT, b"priv", 0o700)
        .unwrap()
        .value
        .soid;
    let f = e
        .create(&root, priv_, b"f", 0o600, true)
        .unwrap()
        .value
        .soid;
    let _ = e.mkdir(&root, priv_, b"d", 0o755).unwrap();
    let l = e.symlink(&root, priv_, b"l", b"f").unwrap().value.soid;
    let c = e
        .setxattr(&root, f, b"user.x", b"v", sextant_engine::XattrFlags::Any)
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
        f,
        l,
        priv_,
    }
}

/// An instance of the operation named `name` in the schema, on the
/// fixture's private objects, that root may run and `nobody` may not —
/// except where the operation checks no credentials (then `false`).
/// A new operation in the schema fails here until it has a case.
fn sample(name: &str, x: &Fixture) -> (Op, bool) {
    let s = |s: Soid| Some(soid_to_pb(s));
    let n = |n: &str| n.as_bytes().to_vec();
    match name {
        "lookup" => (
            Op::Lookup(pb::LookupRequest {
                parent: s(x.priv_),
                name: n("f"),
            }),
            true,
        ),
        "getattr" => (Op::Getattr(pb::GetattrRequest { soid: s(x.f) }), false),
        "resolve" => (
            Op::Resolve(pb::ResolveRequest {
                path: n("/priv/f"),
                follow_last: true,
            }),
            true,
        ),
        "readlink" => (Op::Readlink(pb::ReadlinkRequest { soid: s(x.l) }), false),
        "readdir" => (
            Op::Readdir(pb::ReaddirRequest {
                dir: s(x.priv_),
                after: 0,
                limit: 0,
                plus: false,
            }),
            true,
        ),
        "getxattr" => (
            Op::Getxattr(pb::GetxattrRequest {
                soid: s(x.f),
                name: n("user.x"),
            }),
            true,
        ),
        // Listing names needs no permission on the inode (as listxattr(2)
        // on an open file).
        "listxattr" => (Op::Listxattr(pb::ListxattrRequest { soid: s(x.f) }), false),
        "access" => (
            Op::Access(pb::AccessRequest {
                soid: s(x.f),
                mask: 4,
            }),
            true,
        ),
        "statfs" => (Op::Statfs(pb::StatfsRequest {}), false),
        "status" => (Op::Status(pb::StatusRequest {}), false),
        "create" => (
            Op::Create(pb::CreateRequest {
                parent: s(x.priv_),
                name: n("new"),
                perm: 0o644,
                exclusive: true,
            }),
            true,
        ),
        "mknod" => (
            Op::Mknod(pb::MknodRequest {
                parent: s(x.priv_),
                name: n("fifo"),
                ftype: pb::FileType::Fifo as i32,
                perm: 0o644,
                rdev: 0,
            }),
            true,
        ),
        "mkdir" => (
            Op::Mkdir(pb::MkdirRequest {
                parent: s(x.priv_),
                name: n("nd"),
                perm: 0o755,
            }),
            true,
        ),
        "symlink" => (
            Op::Symlink(pb::SymlinkRequest {
                parent: s(x.priv_),
                name: n("nl"),
                target: n("f"),
            }),
            true,
        ),
        "unlink" => (
            Op::Unlink(pb::UnlinkRequest {
                parent: s(x.priv_),
                name: n("f"),
            }),
            true,
        ),
        "rmdir" => (
            Op::Rmdir(pb::RmdirRequest {
                parent: s(x.priv_),
                name: n("d"),
            }),
            true,
        ),
        "rename" => (
            Op::Rename(pb::RenameRequest {
                old_parent: s(x.priv_),
                old_name: n("f"),
                new_parent: s(x.priv_),
                new_name: n("g"),
                noreplace: false,
                exchange: false,
            }),
            true,
        ),
        "link" => (
            Op::Link(pb::LinkRequest {
                soid: s(x.f),
                new_parent: s(x.priv_),
                new_name: n("h"),
            }),
            true,
        ),
        "setattr" => (
            Op::Setattr(pb::SetattrRequest {
                soid: s(x.f),
                perm: Some(0o666),
                ..Default::default()
            }),
            true,
        ),
        "setxattr" => (
            Op::Setxattr(pb::SetxattrRequest {
                soid: s(x.f),
                name: n("user.y"),
                value: n("w"),
                flags: 0,
            }),
            true,
        ),
        "removexattr" => (
            Op::Removexattr(pb::RemovexattrRequest {
                soid: s(x.f),
                name: n("user.x"),
            }),
            true,
        ),
        "sync" => (
            Op::Sync(pb::SyncRequest {
                release_through: 0,
                ..Default::default()
            }),
            true,
        ),
        other => panic!("the schema has an operation without a case here: {other}"),
    }
}

/// The outcome of `op` run through the `Call` RPC by `caller` claiming
/// `claim`, on a fresh fixture: the errno, 0 for success.
async fn outcome(name: &str, caller: Caller, claim: pb::Credentials) -> i32 {
    let x = fixture().await;
    let (op, _) = sample(name, &x);
    let mut req = Request::new(pb::Request {
        cred: Some(claim),
        op: Some(op),
        ..Default::default()
    });
    req.extensions_mut().insert(caller);
    let resp = x.svc.call(req).await.unwrap().into_inner();
    resp.error.map_or(0, |e| e.errno)
}

/// Every operation of the schema, claimed as root by a local user on the
/// socket, has exactly the outcome of the same user claiming itself — and,
/// where credentials matter, not root's. If the service believed the
/// claim, the forged run would match root's.
#[tokio::test]
async fn every_operation_runs_as_the_kernel_identity_whatever_it_claims() {
    let nobody = user(65534, 65534, &[65534]);
    let kernel = Caller::Kernel(nobody.clone());
    let trusted = Caller::Trusted(Trust::Secret);
    let (_, ops) = schema();
    for name in &ops {
        let (_, checks) = sample(name, &fixture().await);
        let forged = outcome(name, kernel.clone(), claim(0, 0, &[0])).await;
        let honest = outcome(name, trusted.clone(), cred_to_pb(&nobody)).await;
        let as_root = outcome(name, trusted.clone(), claim(0, 0, &[0])).await;
        assert_eq!(
            forged, honest,
            "{name}: the forged claim changed the outcome"
        );
        if checks {
            assert_eq!(as_root, 0, "{name}: root may");
            assert_ne!(forged, 0, "{name}: ran as the claimed root");
        }
    }
}

/// `name`'s sample operation sent through the frame door
/// (`crate::frame_door`) by a peer the kernel says is `uid`/`gid`,
/// presenting `secret` (empty: none) and claiming `claim`, on a fresh
/// fixture: the errno (0 for success), or the door's refusal.
async fn door_outcome(
    name: &str,
    uid: u32,
    gid: u32,
    secret: &str,
    claim: pb::Credentials,
) -> Result<i32, String> {
    use sextant_proto::frames::{encode_frame, FrameReader, FRAME_VERSION};
    use std::io::Write;
    let x = fixture().await;
    let (op, _) = sample(name, &x);
    let door = Arc::new(crate::frame_door::Door {
        shared: Arc::clone(&x.svc.shared),
        secret: Arc::new(b"the-secret".to_vec()),
        groups: Arc::new(GroupDb::default()),
        runtime: tokio::runtime::Handle::current(),
    });
    let (client, server) = std::os::unix::net::UnixStream::pair().unwrap();
    let served =
        std::thread::spawn(move || crate::frame_door::serve_connection(server, uid, gid, &door));
    let mut buf = Vec::new();
    let hello = pb::FrameHello {
        version: FRAME_VERSION,
        secret: secret.to_string(),
    };
    encode_frame(&hello, &mut buf).unwrap();
    (&client).write_all(&buf).unwrap();
    let mut reader = FrameReader::new(client.try_clone().unwrap());
    let welcome: pb::FrameWelcome = reader.read_frame().unwrap();
    if !welcome.refused.is_empty() {
        served.join().unwrap();
        return Err(welcome.refused);
    }
    assert_eq!(welcome.server, "s1", "the issuer: its listen address");
    let req = pb::Request {
        id: 9,
        cred: Some(claim),
        op: Some(op),
        ..Default::default()
    };
    encode_frame(&req, &mut buf).unwrap();
    (&client).write_all(&buf).unwrap();
    let resp: pb::Response = reader.read_frame().unwrap();
    assert_eq!(resp.id, 9);
    drop((client, reader));
    served.join().unwrap();
    Ok(resp.error.map_or(0, |e| e.errno))
}

/// Issue 22's rule on the frame door too: every operation of the schema,
/// claimed as root by a local user (the kernel says uid 65534), has the
/// outcome of the same user claiming itself through the Call RPC — and,
/// where credentials matter, not root's; a root peer and the secret's
/// holder run as claimed; a wrong secret is refused. (With the door
/// admitting as claimed, the forged runs succeed and this fails.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frame_door_runs_every_operation_as_the_kernel_identity() {
    let nobody = user(65534, 65534, &[65534]);
    let trusted = Caller::Trusted(Trust::Secret);
    let (_, ops) = schema();
    for name in &ops {
        let (_, checks) = sample(name, &fixture().await);
        let forged = door_outcome(name, 65534, 65534, "", claim(0, 0, &[0]))
            .await
            .unwrap();
        let honest = outcome(name, trusted.clone(), cred_to_pb(&nobody)).await;
        assert_eq!(
            forged, honest,
            "{name}: the forged claim changed the outcome"
        );
        let as_root_peer = door_outcome(name, 0, 0, "", claim(0, 0, &[0]))
            .await
            .unwrap();
        let with_secret = door_outcome(name, 65534, 65534, "the-secret", claim(0, 0, &[0]))
            .await
            .unwrap();
        let as_root = outcome(name, trusted.clone(), claim(0, 0, &[0])).await;
        assert_eq!(as_root_peer, as_root, "{name}: a root peer runs as claimed");
        assert_eq!(
            with_secret, as_root,
            "{name}: the secret's holder runs as claimed"
        );
        if checks {
            assert_eq!(as_root, 0, "{name}: root may");
            assert_ne!(forged, 0, "{name}: ran as the claimed root");
        }
    }
    let wrong = door_outcome("getattr", 0, 0, "not-the-secret", claim(0, 0, &[0])).await;
    assert_eq!(
        wrong,
        Err(AUTH_FAILED.to_string()),
        "a wrong secret, even from root"
    );
}

/// A call that did not come through an interceptor has no caller and is
/// refused, on every RPC that takes a request as is (Session takes a
/// stream, tested end to end in tests/local_socket.rs).
#[tokio::test]
async fn a_call_without_a_caller_is_refused() {
    let x = fixture().await;
    let code = |r: Result<(), Status>| r.err().map(|s| s.code());
    let unauth = Some(tonic::Code::Unauthenticated);
    let call = x.svc.call(Request::new(pb::Request::default())).await;
    assert_eq!(code(call.map(|_| ())), unauth);
    let search = x
        .svc
        .search(Request::new(pb::SearchRequest::default()))
        .await;
    assert_eq!(code(search.map(|_| ())), unauth);
    let watch = x.svc.watch(Request::new(pb::WatchRequest::default())).await;
    assert_eq!(code(watch.map(|_| ())), unauth);
    let chain = x
        .svc
        .dir_chain(Request::new(pb::DirChainRequest::default()))
        .await;
    assert_eq!(code(chain.map(|_| ())), unauth);
}

/// The rpcs of the schema, each with the rule this module gives it; a new
/// rpc fails here until it has one (and a check in tests/local_socket.rs).
#[test]
fn every_rpc_has_a_rule() {
    let (rpcs, _) = schema();
    for rpc in rpcs {
        let rule = match rpc.as_str() {
            "Session" | "Call" => "every request runs as the caller (admit_request)",
            "Search" => "the search runs as the caller (admit_search; confine::search_scope)",
            "Watch" => "the trusted and keys (may_watch; confine's filter)",
            "DirChain" => "the trusted only (may_read_directories)",
            "RevokeDirs" => "the trusted only (may_read_directories: a lease on directory records)",
            "Recover" => "carries no identity: backups are authenticated by the server's key",
            "Map" => "carries no identity: the route map names tables and servers, no name",
            "Keys" => "the trusted only (may_manage_keys)",
            "Ticket" => "a Kernel caller of the Unix socket only, never uid 0 (issue_ticket)",
            other => panic!("rpc {other} has no rule in crate::auth"),
        };
        assert!(!rule.is_empty());
    }
}

// ---- client keys ----------------------------------------------------------

use crate::clientkeys::{KeyBook, Limits};
use sextant_proto::keyauth::{self, ClientKey};

const CALL: &str = "/sextant.v1.Sextant/Call";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A book with the key `node1` (limits as given), and its key.
fn book_with(limits: Limits) -> (Arc<KeyBook>, ClientKey) {
    let book = Arc::new(KeyBook::in_memory());
    let (_, bytes) = book.add("node1", limits).unwrap();
    (
        book,
        ClientKey {
            name: "node1".into(),
            key: bytes,
        },
    )
}

/// A call to `path` carrying `proof`, as the server's layers hand it to
/// the interceptor.
fn call_with(proof: &keyauth::Proof, path: &str) -> Request<()> {
    let mut req = Request::new(());
    let m = req.metadata_mut();
    m.insert(keyauth::KEY_METADATA, proof.name.parse().unwrap());
    m.insert(
        keyauth::TIME_METADATA,
        proof.time.to_string().parse().unwrap(),
    );
    m.insert(keyauth::NONCE_METADATA, proof.nonce.parse().unwrap());
    m.insert(keyauth::MAC_METADATA, proof.mac.parse().unwrap());
    req.extensions_mut().insert(CallPath(path.to_string()));
    req
}

/// What the TCP interceptor makes of `req`: the caller, or the status.
fn intercept(book: &Arc<KeyBook>, req: Request<()>) -> Result<Caller, Status> {
    let mut tcp = super::tcp(Arc::new(b"the-secret".to_vec()), Arc::clone(book));
    tcp(req).map(|r| r.extensions().get::<Caller>().cloned().unwrap())
}

fn refused_with(r: Result<Caller, Status>, label: &str) {
    let s = r.expect_err("the call must be refused");
    assert_eq!(s.code(), tonic::Code::Unauthenticated);
    assert!(s.message().contains(label), "{label}: {}", s.message());
}

#[test]
fn a_key_proof_is_accepted_once_with_the_right_mac_and_time() {
    let (book, key) = book_with(Limits::default());
    let t = now();
    let good = key.prove(CALL, t, "0123456789abcdef0");
    match intercept(&book, call_with(&good, CALL)) {
        Ok(Caller::Key(g)) => assert_eq!(g.name, "node1"),
        other => panic!("not admitted as the key: {other:?}"),
    }
    // The same proof again: a recorded call replayed.
    refused_with(intercept(&book, call_with(&good, CALL)), "key-replayed");
    // The right proof for another rpc (the MAC covers the path).
    let other = key.prove("/sextant.v1.Sextant/Watch", t, "0123456789abcdef1");
    refused_with(intercept(&book, call_with(&other, CALL)), "key-mac");
    // A wrong key, and a tampered MAC.
    let wrong = ClientKey {
        key: [9; 32],
        ..key.clone()
    }
    .prove(CALL, t, "0123456789abcdef2");
    refused_with(intercept(&book, call_with(&wrong, CALL)), "key-mac");
    let mut tampered = key.prove(CALL, t, "0123456789abcdef3");
    tampered.time += 1;
    refused_with(intercept(&book, call_with(&tampered, CALL)), "key-mac");
    // An unknown name.
    let stranger = ClientKey {
        name: "node2".into(),
        ..key.clone()
    }
    .prove(CALL, t, "0123456789abcdef4");
    refused_with(intercept(&book, call_with(&stranger, CALL)), "key-unknown");
    // A short nonce.
    let short = key.prove(CALL, t, "abc");
    refused_with(intercept(&book, call_with(&short, CALL)), "key-malformed");
}

#[test]
fn a_key_proof_outside_the_time_window_is_refused() {
    let (book, key) = book_with(Limits::default());
    let t = now();
    for (i, off) in [-keyauth::WINDOW_SECS - 5, keyauth::WINDOW_SECS + 5, -3600]
        .into_iter()
        .enumerate()
    {
        let p = key.prove(CALL, t + off, &format!("0123456789abcdef-{i}"));
        refused_with(intercept(&book, call_with(&p, CALL)), "key-expired");
    }
    let p = key.prove(CALL, t - 30, "0123456789abcdef-ok");
    assert!(intercept(&book, call_with(&p, CALL)).is_ok(), "30 s old");
}

#[test]
fn a_revoked_or_rotated_key_is_refused_and_its_grants_die() {
    let (book, key) = book_with(Limits::default());
    let p = key.prove(CALL, now(), "0123456789abcdef0");
    let Ok(Caller::Key(grant)) = intercept(&book, call_with(&p, CALL)) else {
        panic!("not admitted");
    };
    assert!(book.is_live(&grant));
    let mut changes = book.subscribe();
    let (_, fresh) = book.rotate("node1").unwrap();
    assert!(changes.has_changed().unwrap(), "a rotation is announced");
    changes.mark_unchanged();
    assert!(!book.is_live(&grant), "the old secret's grant is dead");
    let old = key.prove(CALL, now(), "0123456789abcdef1");
    refused_with(intercept(&book, call_with(&old, CALL)), "key-mac");
    let new = ClientKey {
        key: fresh,
        ..key.clone()
    };
    let p = new.prove(CALL, now(), "0123456789abcdef2");
    let Ok(Caller::Key(grant)) = intercept(&book, call_with(&p, CALL)) else {
        panic!("the rotated key is not admitted");
    };
    book.revoke("node1").unwrap();
    assert!(changes.has_changed().unwrap(), "a revocation is announced");
    assert!(!book.is_live(&grant));
    let p = new.prove(CALL, now(), "0123456789abcdef3");
    refused_with(intercept(&book, call_with(&p, CALL)), "key-unknown");
}

#[test]
fn the_key_book_survives_a_restart_and_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        uids: vec![(1000, 1999)],
        gids: vec![(100, 100)],
        root_squash: true,
        read_only: true,
        path: Some("/home/alice".into()),
    };
    let book = KeyBook::open(dir.path()).unwrap();
    let (k, _) = book.add("a", limits.clone()).unwrap();
    book.add("b", Limits::default()).unwrap();
    book.revoke("b").unwrap();
    assert!(book.add("a", Limits::default()).is_err(), "a name in use");
    drop(book);
    let again = KeyBook::open(dir.path()).unwrap();
    let keys = again.list();
    assert_eq!(keys.len(), 1);
    assert_eq!(*keys[0], *k);
    assert_eq!(keys[0].limits, limits);
    let mode = std::fs::metadata(dir.path().join(crate::clientkeys::FILE_NAME))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

fn key_caller(limits: Limits) -> Caller {
    Caller::Key(crate::clientkeys::Grant {
        name: "node1".into(),
        created: 1,
        limits: Arc::new(limits),
    })
}

#[test]
fn a_key_runs_only_the_identities_its_limits_allow() {
    let k = key_caller(Limits {
        uids: vec![(1000, 1000)],
        gids: vec![(100, 100)],
        ..Default::default()
    });
    let req = |c: pb::Credentials| pb::Request {
        cred: Some(c),
        op: Some(Op::Statfs(pb::StatfsRequest {})),
        ..Default::default()
    };
    let ok = k.admit_op(req(claim(1000, 100, &[100]))).unwrap();
    assert_eq!(ok.cred, Some(claim(1000, 100, &[100])), "used as claimed");
    for bad in [
        claim(0, 100, &[]),
        claim(1001, 100, &[]),
        claim(1000, 0, &[]),
        claim(1000, 100, &[100, 0]),
    ] {
        assert_eq!(k.admit_op(req(bad.clone())), Err(FsError::Perm), "{bad:?}");
    }
    let mut s = pb::SearchRequest {
        cred: Some(claim(0, 0, &[])),
        ..Default::default()
    };
    assert_eq!(k.admit_search(&mut s), Err(FsError::Perm));
    assert!(!k.may_read_directories());
    assert!(!k.may_manage_keys());
    // Root squashed: 0 runs as nobody, which the key then allows.
    let sq = key_caller(Limits {
        uids: vec![(1000, 1000)],
        root_squash: true,
        ..Default::default()
    });
    let r = sq.admit_op(req(claim(0, 0, &[0, 5]))).unwrap();
    assert_eq!(r.cred, Some(claim(65534, 65534, &[65534, 5])));
    assert_eq!(sq.admit_op(req(claim(7, 0, &[]))), Err(FsError::Perm));
}

/// Every operation of the schema through `Call` with a read-only key:
/// EROFS for each that changes the namespace, and for the others the
/// outcome the same claim has with the secret.
#[tokio::test]
async fn a_read_only_key_changes_nothing_through_any_operation() {
    let ro = key_caller(Limits {
        read_only: true,
        ..Default::default()
    });
    let trusted = Caller::Trusted(Trust::Secret);
    let (_, ops) = schema();
    let mutations = [
        "create",
        "mknod",
        "mkdir",
        "symlink",
        "unlink",
        "rmdir",
        "rename",
        "link",
        "setattr",
        "setxattr",
        "removexattr",
    ];
    for name in &ops {
        let got = outcome(name, ro.clone(), claim(0, 0, &[0])).await;
        let as_root = outcome(name, trusted.clone(), claim(0, 0, &[0])).await;
        if mutations.contains(&name.as_str()) {
            assert_eq!(got, 30, "{name}: not EROFS");
            assert_eq!(as_root, 0, "{name}: root may");
        } else {
            assert_eq!(got, as_root, "{name}: a read must run");
        }
    }
}

/// `DirChain` with `more` (a search's batch) answers every directory in
/// one reply, each record once, and says how many it answered; without
/// `more` it answers as a server that predates batches did (`answered`
/// 0: the asker takes it for `dir` alone).
#[tokio::test]
async fn dir_chain_answers_a_batch_in_one_reply() {
    let x = fixture().await;
    let d = x
        .svc
        .shared
        .engine
        .lookup(&Credentials::root(), x.priv_, b"d")
        .unwrap()
        .soid;
    let ask = |dir: Soid, more: Vec<Soid>| {
        let mut req = Request::new(pb::DirChainRequest {
            dir: Some(soid_to_pb(dir)),
            more: more.into_iter().map(soid_to_pb).collect(),
            ..Default::default()
        });
        req.extensions_mut().insert(Caller::Trusted(Trust::Secret));
        req
    };
    let one = x.svc.dir_chain(ask(d, vec![])).await.unwrap().into_inner();
    assert_eq!((one.answered, one.dirs.len()), (0, 3), "d, /priv, /");
    let batch = x
        .svc
        .dir_chain(ask(d, vec![x.priv_, x.f, d]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(batch.answered, 4);
    assert!(batch.error.is_none() && !batch.not_held && batch.not_held_dirs.is_empty());
    let mut soids: Vec<Soid> = batch
        .dirs
        .iter()
        .map(|r| sextant_proto::soid_from_pb(r.soid.as_ref()).unwrap())
        .collect();
    soids.sort();
    let mut want = vec![Soid::ROOT, x.priv_, d];
    want.sort();
    assert_eq!(soids, want, "each directory once; the file has none");
}

/// `DirChain` with `links` (a confinement check placing an inode another
/// server holds): a file's every link's directory (a hard link's too),
/// with their chains; a directory's parent; nothing for a missing inode;
/// and it is asked of one inode at a time.
#[tokio::test]
async fn dir_chain_with_links_answers_every_link_of_an_inode() {
    let x = fixture().await;
    let root = Credentials::root();
    let e = &x.svc.shared.engine;
    let d = e.lookup(&root, x.priv_, b"d").unwrap().soid;
    let _ = e.link(&root, x.f, d, b"hard").unwrap();
    let ask = |soid: Soid, more: Vec<Soid>| {
        let mut req = Request::new(pb::DirChainRequest {
            dir: Some(soid_to_pb(soid)),
            more: more.into_iter().map(soid_to_pb).collect(),
            links: true,
            lease_for: String::new(),
        });
        req.extensions_mut().insert(Caller::Trusted(Trust::Secret));
        req
    };
    let soids = |v: &[pb::Soid]| -> Vec<Soid> {
        let mut v: Vec<Soid> = v
            .iter()
            .map(|s| sextant_proto::soid_from_pb(Some(s)).unwrap())
            .collect();
        v.sort();
        v
    };
    let sorted = |mut v: Vec<Soid>| {
        v.sort();
        v
    };
    let file = x
        .svc
        .dir_chain(ask(x.f, vec![]))
        .await
        .unwrap()
        .into_inner();
    assert!(file.error.is_none() && !file.not_held);
    let links = file.links_of.expect("a file's links");
    assert!(!links.is_dir);
    assert_eq!(soids(&links.dirs), sorted(vec![x.priv_, d]), "both links");
    let chained: Vec<pb::Soid> = file.dirs.iter().filter_map(|r| r.soid).collect();
    assert_eq!(
        soids(&chained),
        sorted(vec![Soid::ROOT, x.priv_, d]),
        "their chains, each directory once"
    );

    let dir = x.svc.dir_chain(ask(d, vec![])).await.unwrap().into_inner();
    let links = dir.links_of.expect("a directory's links");
    assert!(links.is_dir);
    assert_eq!(soids(&links.dirs), vec![x.priv_], "its parent");

    let gone = Soid::from_u128(x.f.as_u128() + 1000);
    let none = x
        .svc
        .dir_chain(ask(gone, vec![]))
        .await
        .unwrap()
        .into_inner();
    assert!(none.links_of.is_none() && none.dirs.is_empty() && none.error.is_none());

    let many = x.svc.dir_chain(ask(x.f, vec![d])).await;
    assert_eq!(
        many.map(|_| ()).map_err(|s| s.code()),
        Err(tonic::Code::InvalidArgument)
    );
}

/// Records by name, with the revision each was written at.
type Records = HashMap<String, (String, i64)>;

/// A shared store in memory: what etcd is to a cluster's book (its
/// revision, its records).
#[derive(Default)]
struct MemShared {
    records: parking_lot::Mutex<(i64, Records)>,
}

impl crate::clientkeys::SharedBook for MemShared {
    fn read(&self, name: &str) -> anyhow::Result<Option<(String, i64)>> {
        Ok(self.records.lock().1.get(name).cloned())
    }

    fn write(&self, name: &str, record: Option<&str>, expect: i64) -> anyhow::Result<Option<i64>> {
        let mut r = self.records.lock();
        if r.1.get(name).map_or(0, |x| x.1) != expect {
            return Ok(None);
        }
        r.0 += 1;
        let rev = r.0;
        match record {
            Some(text) => r.1.insert(name.to_string(), (text.to_string(), rev)),
            None => r.1.remove(name),
        };
        Ok(Some(rev))
    }
}

impl MemShared {
    fn state(&self) -> (i64, Vec<(String, String)>) {
        let r = self.records.lock();
        (
            r.0,
            r.1.iter()
                .map(|(n, (t, _))| (n.clone(), t.clone()))
                .collect(),
        )
    }
}

/// Nonces are remembered per server: a proof made for server a must not
/// be good on b of the same cluster (same book), nor one made for no
/// server; a single server (no audiences) takes both.
#[test]
fn a_proof_made_for_one_server_is_refused_by_another() {
    use crate::clientkeys::Refusal;
    let store = Arc::new(MemShared::default());
    let a = KeyBook::shared(Arc::clone(&store) as _, &[], 0)
        .with_audiences(vec!["10.0.0.1:7000".into()]);
    let (_, bytes) = a.add("node1", Limits::default()).unwrap();
    let (rev, records) = store.state();
    let b = KeyBook::shared(Arc::clone(&store) as _, &records, rev)
        .with_audiences(vec!["10.0.0.2:7000".into()]);
    let key = ClientKey {
        name: "node1".into(),
        key: bytes,
    };
    let t = now();
    let for_a = key.prove_for(CALL, "10.0.0.1:7000", t, "0123456789abcdef0");
    assert_eq!(b.check(&for_a, CALL, t), Err(Refusal::WrongServer));
    assert!(a.check(&for_a, CALL, t).is_ok(), "a takes its own proof");
    let for_b = key.prove_for(CALL, "10.0.0.2:7000", t, "0123456789abcdef1");
    assert!(b.check(&for_b, CALL, t).is_ok(), "b takes its own proof");
    let bare = key.prove(CALL, t, "0123456789abcdef2");
    assert_eq!(b.check(&bare, CALL, t), Err(Refusal::WrongServer));
    // A single server: any audience, or none (older clients).
    let single = KeyBook::shared(Arc::clone(&store) as _, &records, rev);
    assert!(single.check(&bare, CALL, t).is_ok());
    assert!(single.check(&for_a, CALL, t).is_ok());
}

/// A cluster's book: a change goes to the store, and every other copy
/// takes each newer state of the store (a revocation ends the key's
/// grants there), never an older one.
#[test]
fn a_shared_book_follows_the_store_forward_only() {
    let store = Arc::new(MemShared::default());
    let a = Arc::new(KeyBook::shared(Arc::clone(&store) as _, &[], 0));
    let b = Arc::new(KeyBook::shared(Arc::clone(&store) as _, &[], 0));
    let (_, bytes) = a.add("node1", Limits::default()).unwrap();
    assert!(
        b.add("node1", Limits::default()).is_err(),
        "the name is taken in the store"
    );
    let (rev, with_key) = store.state();
    b.replace(rev, &with_key);
    let key = ClientKey {
        name: "node1".into(),
        key: bytes,
    };
    let p = key.prove(CALL, now(), "0123456789abcdef0");
    let Ok(Caller::Key(grant)) = intercept(&b, call_with(&p, CALL)) else {
        panic!("b does not know the key a added");
    };
    let changes = a.subscribe();
    b.revoke("node1").unwrap();
    let (gone, without) = store.state();
    a.replace(gone, &without);
    assert!(
        changes.has_changed().unwrap(),
        "the revocation is announced on a"
    );
    assert!(!a.is_live(&grant) && !b.is_live(&grant));
    // An older state arriving late does not bring the key back.
    a.replace(rev, &with_key);
    assert!(!a.is_live(&grant), "went back to an older state");
}

// ---- identity tickets -----------------------------------------------------

const SECRET: &[u8] = b"the-secret";

/// A ticket issued (as the `Ticket` RPC does) to the socket's `cred` at
/// `now`, with the cluster secret `secret`: the client key it gives.
fn ticket_for(cred: &Credentials, secret: &[u8], now: u64) -> ClientKey {
    let master = keyauth::ticket_master(secret);
    let r = issue_ticket(&Caller::Kernel(cred.clone()), true, &master, "s1", now).unwrap();
    assert_eq!(
        r.expires,
        now + TICKET_LIFETIME.as_secs(),
        "a lifetime of a few minutes"
    );
    // (Not ClientKey::new: a ticket's name is longer than a key's may be.)
    ClientKey {
        name: r.name.clone(),
        key: keyauth::unhex(&r.key).unwrap(),
    }
}

/// What the TCP interceptor (with the cluster secret [`SECRET`]) makes of
/// a ticket's proof for `path`.
fn intercept_ticket(book: &Arc<KeyBook>, key: &ClientKey, nonce: &str) -> Result<Caller, Status> {
    let p = key.prove(CALL, now(), nonce);
    intercept(book, call_with(&p, CALL))
}

/// A valid ticket is served as the identity it names, whatever the
/// requests claim (as the socket door: `Caller::Kernel`); its proof is
/// good once (the nonce set of client keys).
#[test]
fn a_ticket_is_served_as_its_identity_and_its_claims_are_ignored() {
    let book = Arc::new(KeyBook::in_memory());
    let me = user(1000, 100, &[100, 20]);
    let key = ticket_for(&me, SECRET, now() as u64);
    assert!(key.name.starts_with("t1."), "{}", key.name);
    let caller = intercept_ticket(&book, &key, "0123456789abcdef0").unwrap();
    assert_eq!(caller, Caller::Kernel(me.clone()));
    let forged = pb::Request {
        cred: Some(claim(0, 0, &[0])),
        op: Some(Op::Statfs(pb::StatfsRequest {})),
        ..Default::default()
    };
    assert_eq!(caller.admitted(forged).cred, Some(cred_to_pb(&me)));
    // The same proof again: replayed.
    refused_with(
        intercept_ticket(&book, &key, "0123456789abcdef0"),
        "key-replayed",
    );
    // A fresh proof of the same ticket: fine.
    assert!(intercept_ticket(&book, &key, "0123456789abcdef1").is_ok());
}

/// Every way a ticket can be wrong is refused with its own reason.
#[test]
fn a_wrong_ticket_is_refused_with_its_reason() {
    use sextant_types::ticket::{base64url, TicketBody};
    let book = Arc::new(KeyBook::in_memory());
    let me = user(1000, 100, &[100]);
    let t = now() as u64;
    let good = ticket_for(&me, SECRET, t);
    // A wrong MAC (the key is not the ticket's).
    let wrong_mac = ClientKey {
        key: [7; 32],
        ..good.clone()
    };
    refused_with(
        intercept_ticket(&book, &wrong_mac, "0123456789abcdef0"),
        "ticket-mac",
    );
    // The body edited (uid changed to another user's, or to root's),
    // proved with the ticket's key.
    let (mut body, _) = TicketBody::from_name(&good.name).unwrap();
    body.uid = 1001;
    let edited = ClientKey {
        name: body.name(),
        ..good.clone()
    };
    refused_with(
        intercept_ticket(&book, &edited, "0123456789abcdef1"),
        "ticket-mac",
    );
    // A ticket of another cluster (made with another secret).
    let foreign = ticket_for(&me, b"another-secret", t);
    refused_with(
        intercept_ticket(&book, &foreign, "0123456789abcdef2"),
        "ticket-mac",
    );
    // Expired: issued a lifetime and more ago (its proof is fresh).
    let old = ticket_for(&me, SECRET, t - TICKET_LIFETIME.as_secs() - 5);
    refused_with(
        intercept_ticket(&book, &old, "0123456789abcdef3"),
        "expired-ticket",
    );
    // A proof of a good ticket outside the time window.
    let late = good.prove(CALL, now() - keyauth::WINDOW_SECS - 5, "0123456789abcdef4");
    refused_with(intercept(&book, call_with(&late, CALL)), "key-expired");
    // Malformed names: not base64url, a body cut short, trailing bytes.
    let bytes = body.encode();
    for name in [
        "t1.not*base64".to_string(),
        format!("t1.{}", base64url(&bytes[..bytes.len() - 1])),
        format!("t1.{}", base64url(&[bytes.as_slice(), &[0]].concat())),
        "t1.".to_string(),
    ] {
        let k = ClientKey {
            name,
            ..good.clone()
        };
        refused_with(
            intercept_ticket(&book, &k, "0123456789abcdef5"),
            "ticket-malformed",
        );
    }
    // A ticket for uid 0, made by whoever holds the master (never
    // issued): refused all the same.
    let master = keyauth::ticket_master(SECRET);
    let root_body = TicketBody {
        uid: 0,
        gid: 0,
        groups: vec![0],
        expires: t + 60,
        nonce: [1; 16],
        issuer: "s1".into(),
    };
    let root = ClientKey {
        name: root_body.name(),
        key: keyauth::ticket_secret(&master, &root_body.encode()),
    };
    refused_with(
        intercept_ticket(&book, &root, "0123456789abcdef6"),
        "ticket-root",
    );
    // The good one still is good.
    assert!(intercept_ticket(&book, &good, "0123456789abcdef7").is_ok());
}

/// A ticket is issued to a local user of the Unix socket only: not over
/// TCP (a ticket's holder cannot renew it there), not to the secret's or
/// a key's holder, never for uid 0.
#[tokio::test]
async fn a_ticket_is_issued_on_the_socket_to_a_local_user_only() {
    let x = fixture().await;
    let me = user(1000, 100, &[100]);
    let ask = |caller: Caller, local: bool| {
        let mut req = Request::new(pb::TicketRequest {});
        req.extensions_mut().insert(caller);
        if local {
            req.extensions_mut().insert(LocalPeer);
        }
        req
    };
    let code =
        |r: Result<tonic::Response<pb::TicketReply>, Status>| r.map(|_| ()).map_err(|s| s.code());
    assert!(x
        .svc
        .ticket(ask(Caller::Kernel(me.clone()), true))
        .await
        .is_ok());
    let denied = Err(tonic::Code::PermissionDenied);
    // A ticket's holder over TCP (no LocalPeer): no new ticket.
    assert_eq!(
        code(x.svc.ticket(ask(Caller::Kernel(me.clone()), false)).await),
        denied
    );
    for caller in [
        Caller::Trusted(Trust::Secret),
        Caller::Trusted(Trust::RootPeer),
        key_caller(Limits::default()),
    ] {
        assert_eq!(
            code(x.svc.ticket(ask(caller.clone(), true)).await),
            denied,
            "{caller:?}"
        );
    }
    assert_eq!(
        code(
            x.svc
                .ticket(ask(Caller::Kernel(user(0, 0, &[0])), true))
                .await
        ),
        denied,
        "uid 0"
    );
    // Without a caller at all (not through an interceptor).
    assert_eq!(
        code(x.svc.ticket(Request::new(pb::TicketRequest {})).await),
        Err(tonic::Code::Unauthenticated)
    );
    // Through the real interceptors: the Unix one marks its Kernel peers;
    // the TCP one never does.
    let book = Arc::new(KeyBook::in_memory());
    let key = ticket_for(&me, SECRET, now() as u64);
    let p = key.prove(CALL, now(), "0123456789abcdef9");
    let mut tcp = super::tcp(Arc::new(SECRET.to_vec()), Arc::clone(&book));
    let req = tcp(call_with(&p, CALL)).unwrap();
    assert!(req.extensions().get::<LocalPeer>().is_none());
}

/// Issue 22: 2000 ticket sessions opened at once (8 threads), each of
/// its own user with the biggest ticket there is (256 groups): each is
/// admitted as its user, once (its replay refused); the replay table
/// holds one small entry per proof whatever the ticket's size (a ticket's
/// name is ~1.4 KB: remembered as is, 2^20 proofs would hold gigabytes),
/// and it drains once the proofs are too old to be replayed.
#[test]
fn thousands_of_tickets_at_once_are_admitted_once_and_their_replay_table_stays_small() {
    const N: usize = 2000;
    let book = Arc::new(KeyBook::in_memory());
    let t = now();
    let tickets: Vec<(u32, ClientKey)> = (0..N as u32)
        .map(|i| {
            let uid = 1000 + i;
            let cred = user(uid, uid, &(20_000..20_256).collect::<Vec<u32>>());
            (uid, ticket_for(&cred, SECRET, t as u64))
        })
        .collect();
    assert!(tickets[0].1.name.len() > 1000, "a big ticket");
    std::thread::scope(|s| {
        for chunk in tickets.chunks(N / 8) {
            let book = &book;
            s.spawn(move || {
                for (uid, key) in chunk {
                    match intercept_ticket(book, key, "0123456789abcdef0") {
                        Ok(Caller::Kernel(c)) => assert_eq!(c.uid, *uid),
                        other => panic!("ticket of {uid}: {other:?}"),
                    }
                    refused_with(
                        intercept_ticket(book, key, "0123456789abcdef0"),
                        "key-replayed",
                    );
                }
            });
        }
    });
    let (entries, bytes) = book.nonce_table();
    assert_eq!(entries, N, "one entry per proof admitted");
    assert!(
        bytes <= entries * 128,
        "{bytes} bytes for {entries} proofs: {} each",
        bytes / entries
    );
    // Past twice the time window after the last admission: nothing of
    // them is kept. (Counted from the clock now, not from `t`: under load
    // the admissions run past a second's edge, and those admitted in the
    // next second are rightly still remembered at `t + 2W + 1`.)
    let later = now() + 2 * keyauth::WINDOW_SECS + 1;
    let master = keyauth::ticket_master(SECRET);
    let proof = tickets[0].1.prove(CALL, later, "0123456789abcdef1");
    assert!(book.check_ticket(&proof, CALL, later, &master).is_ok());
    assert_eq!(book.nonce_table().0, 1, "the old proofs are forgotten");
}
