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
    Caller::Kernel(k.clone()).admit_search(&mut s);
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
        "sync" => (Op::Sync(pb::SyncRequest { release_through: 0 }), true),
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
            "Search" => "the search runs as the caller (admit_search)",
            "Watch" => "the trusted only (may_watch)",
            "DirChain" => "the trusted only (may_read_directories)",
            "Recover" => "carries no identity: backups are authenticated by the server's key",
            "Map" => "carries no identity: the route map names tables and servers, no name",
            other => panic!("rpc {other} has no rule in crate::auth"),
        };
        assert!(!rule.is_empty());
    }
}
