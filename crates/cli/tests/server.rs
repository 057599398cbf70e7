//! Network tests: the real `sextant serve` binary on a free port in a temp
//! directory, driven through the client library, raw gRPC and raw TCP.

use sextant_client::{Client, Error, Options};
use sextant_engine::{RenameFlags, XattrFlags};
use sextant_proto::pb::{self, request::Op, response::Result as Res};
use sextant_proto::{soid_to_pb, SECRET_METADATA};
use sextant_types::{Credentials, FileType, FsError, SetAttr, Soid, TimeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

mod common;
use common::{spawn_server, BIN};

/// A running `sextant serve`; killed (SIGKILL) when dropped.
struct Server {
    child: Child,
    addr: String,
    data: PathBuf,
}

impl Server {
    fn start(data: &Path, listen: &str) -> Server {
        let (child, addr) = spawn_server(data, "fsync", listen);
        Server {
            child,
            addr,
            data: data.to_path_buf(),
        }
    }

    fn secret(&self) -> String {
        common::secret_of(&self.data)
    }

    async fn client(&self) -> Client {
        common::connect(&self.addr, &self.data).await
    }

    fn kill9(&mut self) {
        common::kill9(&mut self.child);
    }

    /// SIGTERM and wait for a clean exit.
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "graceful shutdown failed: {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn root() -> Credentials {
    Credentials::root()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), "127.0.0.1:0");
    let c = server.client().await;
    let cr = &root();
    let r = Soid::ROOT;

    let d = c.mkdir(cr, r, b"d", 0o755).await.unwrap();
    assert_eq!(d.ftype, FileType::Directory);
    assert_eq!(c.lookup(cr, r, b"d").await.unwrap(), d);
    assert_eq!(c.getattr(cr, d.soid).await.unwrap().soid, d.soid);
    let f = c.create(cr, d.soid, b"f", 0o640, true).await.unwrap();
    assert_eq!((f.ftype, f.perm), (FileType::Regular, 0o640));
    assert_eq!(
        c.create(cr, d.soid, b"f", 0o640, true).await,
        Err(Error::Fs(FsError::Exists))
    );
    assert_eq!(
        c.create(cr, d.soid, b"f", 0o600, false).await.unwrap().soid,
        f.soid
    );
    let fifo = c
        .mknod(cr, d.soid, b"p", FileType::Fifo, 0o600, 0)
        .await
        .unwrap();
    assert_eq!(fifo.ftype, FileType::Fifo);
    let s = c.symlink(cr, d.soid, b"s", b"/d/f").await.unwrap();
    assert_eq!(&*c.readlink(cr, s.soid).await.unwrap(), b"/d/f");
    assert_eq!(c.resolve(cr, b"/d/s", true).await.unwrap().soid, f.soid);
    assert_eq!(c.resolve(cr, b"/d/s", false).await.unwrap().soid, s.soid);
    let l = c.link(cr, f.soid, r, b"hard").await.unwrap();
    assert_eq!(l.nlink, 2);

    // readdir with cookies, one entry at a time
    let mut names = Vec::new();
    let mut cookie = 0;
    loop {
        let batch = c.readdir(cr, d.soid, cookie, 1).await.unwrap();
        let Some(e) = batch.last() else { break };
        cookie = e.cookie;
        names.push(e.name.to_vec());
    }
    names.sort();
    assert_eq!(names, vec![b"f".to_vec(), b"p".to_vec(), b"s".to_vec()]);

    let set = SetAttr {
        perm: Some(0o600),
        size: Some(4096),
        mtime: Some(TimeSet::At(sextant_types::Nanos(1_000_000_000))),
        ..Default::default()
    };
    let a = c.setattr(cr, f.soid, &set).await.unwrap();
    assert_eq!((a.perm, a.size, a.mtime.0), (0o600, 4096, 1_000_000_000));

    c.setxattr(cr, f.soid, b"user.k", b"v", XattrFlags::Create)
        .await
        .unwrap();
    assert_eq!(
        c.setxattr(cr, f.soid, b"user.k", b"v", XattrFlags::Create)
            .await,
        Err(Error::Fs(FsError::Exists))
    );
    assert_eq!(&*c.getxattr(cr, f.soid, b"user.k").await.unwrap(), b"v");
    assert_eq!(
        c.listxattr(cr, f.soid).await.unwrap(),
        vec![b"user.k".to_vec().into_boxed_slice()]
    );
    c.removexattr(cr, f.soid, b"user.k").await.unwrap();
    assert_eq!(
        c.getxattr(cr, f.soid, b"user.k").await,
        Err(Error::Fs(FsError::NoData))
    );
    // Server-side limits.
    let big = vec![0u8; sextant_types::XATTR_SIZE_MAX + 1];
    assert_eq!(
        c.setxattr(cr, f.soid, b"user.big", &big, XattrFlags::Any)
            .await,
        Err(Error::Fs(FsError::TooBig))
    );
    assert_eq!(
        c.mkdir(cr, r, &[b'x'; 256], 0o755).await,
        Err(Error::Fs(FsError::NameTooLong))
    );

    c.access(cr, f.soid, 4).await.unwrap();
    let user = Credentials::user(1000, 1000);
    assert_eq!(
        c.access(&user, f.soid, 4).await,
        Err(Error::Fs(FsError::Access))
    );
    assert_eq!(
        c.create(&user, d.soid, b"nope", 0o644, true).await,
        Err(Error::Fs(FsError::Access))
    );

    c.rename(cr, d.soid, b"f", r, b"moved", RenameFlags::default())
        .await
        .unwrap();
    assert_eq!(
        c.rename(
            cr,
            r,
            b"moved",
            r,
            b"hard",
            RenameFlags {
                noreplace: true,
                exchange: false
            }
        )
        .await,
        Err(Error::Fs(FsError::Exists))
    );
    c.rename(
        cr,
        r,
        b"moved",
        r,
        b"d",
        RenameFlags {
            noreplace: false,
            exchange: true,
        },
    )
    .await
    .unwrap();
    assert_eq!(c.lookup(cr, r, b"d").await.unwrap().soid, f.soid);
    assert_eq!(c.lookup(cr, r, b"moved").await.unwrap().soid, d.soid);

    c.unlink(cr, r, b"hard").await.unwrap();
    assert_eq!(
        c.unlink(cr, r, b"hard").await,
        Err(Error::Fs(FsError::NotFound))
    );
    for n in [&b"p"[..], b"s"] {
        c.unlink(cr, d.soid, n).await.unwrap();
    }
    assert_eq!(c.rmdir(cr, r, b"d").await, Err(Error::Fs(FsError::NotDir)));
    c.rmdir(cr, r, b"moved").await.unwrap();

    let fs = c.statfs(cr).await.unwrap();
    assert_eq!(fs.inodes, 2, "root and the file");
    let (stats, server_stats) = c.stats(cr).await.unwrap();
    assert!(stats.durable_lsn > 0);
    assert!(server_stats.requests > 20);
    c.sync(cr).await.unwrap();
    assert_eq!(
        c.sync(&user).await,
        Err(Error::Fs(FsError::Perm)),
        "only root or the root directory's owner may sync"
    );

    // Graceful shutdown writes tables back; a restart sees everything.
    server.stop();
    let server = Server::start(dir.path(), "127.0.0.1:0");
    let c = server.client().await;
    assert_eq!(c.resolve(cr, b"/d", true).await.unwrap().soid, f.soid);
    assert_eq!(
        c.resolve(cr, b"/moved", true).await,
        Err(Error::Fs(FsError::NotFound))
    );
}

fn raw_request(client_id: u64, seq: u64, op: Op) -> pb::Request {
    pb::Request {
        id: 99,
        cred: Some(pb::Credentials {
            uid: 0,
            gid: 0,
            groups: vec![],
        }),
        client_id,
        seq,
        acked_below: 0,
        origin: 0,
        want_dir: false,
        op: Some(op),
    }
}

/// A bare generated gRPC client (the caller adds the secret per request).
async fn raw_client(
    server: &Server,
) -> pb::sextant_client::SextantClient<tonic::transport::Channel> {
    pb::sextant_client::SextantClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap()
}

fn with_secret<T>(msg: T, secret: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(SECRET_METADATA, secret.parse().unwrap());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_mutations_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0");
    let secret = server.secret();
    let mut raw = raw_client(&server).await;
    let mkdir = |name: &[u8]| {
        Op::Mkdir(pb::MkdirRequest {
            parent: Some(soid_to_pb(Soid::ROOT)),
            name: name.to_vec(),
            perm: 0o755,
        })
    };
    // The same (client, seq) twice: one directory, the same reply twice.
    let first = raw
        .call(with_secret(raw_request(7, 1, mkdir(b"once")), &secret))
        .await
        .unwrap()
        .into_inner();
    let again = raw
        .call(with_secret(raw_request(7, 1, mkdir(b"once")), &secret))
        .await
        .unwrap()
        .into_inner();
    assert!(first.error.is_none(), "{first:?}");
    assert_eq!(first, again, "a retry returns the original reply");
    // Without exactly-once the second run fails with EEXIST.
    let plain = raw
        .call(with_secret(raw_request(0, 0, mkdir(b"once")), &secret))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plain.error.map(|e| e.errno), Some(FsError::Exists.errno()));
    // A retried unlink does not fail with ENOENT the second time.
    let unlink = || {
        Op::Rmdir(pb::RmdirRequest {
            parent: Some(soid_to_pb(Soid::ROOT)),
            name: b"once".to_vec(),
        })
    };
    for _ in 0..3 {
        let r = raw
            .call(with_secret(raw_request(7, 2, unlink()), &secret))
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_none(), "{r:?}");
    }
    // The same on the Session stream, many retries in flight at once.
    let reqs: Vec<pb::Request> = (0..20)
        .map(|i| {
            let mut r = raw_request(8, 1, mkdir(b"stream"));
            r.id = i;
            r
        })
        .collect();
    let mut stream = raw
        .session(with_secret(tokio_stream_iter(reqs), &secret))
        .await
        .unwrap()
        .into_inner();
    let mut soids = std::collections::HashSet::new();
    for _ in 0..20 {
        let r = stream.message().await.unwrap().unwrap();
        match r.result {
            Some(Res::Attr(a)) => soids.insert(a.soid),
            other => panic!("{other:?} {:?}", r.error),
        };
    }
    assert_eq!(soids.len(), 1, "one directory, one reply");
    // A sequence number that fell out of the window is refused, not rerun.
    for seq in 2..=1100u64 {
        let name = format!("w{seq}");
        let r = raw
            .call(with_secret(
                raw_request(9, seq, mkdir(name.as_bytes())),
                &secret,
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_none());
    }
    let stale = raw
        .call(with_secret(raw_request(9, 3, mkdir(b"w3")), &secret))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stale.error.map(|e| e.errno), Some(FsError::Stale.errno()));
    let c = server.client().await;
    let (_, st) = c.stats(&root()).await.unwrap();
    assert!(st.replayed_replies >= 1 + 2 + 19, "{st:?}");
}

fn tokio_stream_iter(
    reqs: Vec<pb::Request>,
) -> impl tokio_stream::Stream<Item = pb::Request> + Send + 'static {
    tokio_stream::iter(reqs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_is_refused_while_others_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0");
    let good = server.client().await;
    let busy = tokio::spawn(async move {
        for i in 0..200 {
            good.mkdir(&root(), Soid::ROOT, format!("d{i}").as_bytes(), 0o755)
                .await
                .unwrap();
        }
        good
    });
    for bad in ["0".repeat(64), String::from("nope")] {
        let r = Client::connect(&server.addr, &bad, Options::default()).await;
        assert!(matches!(r, Err(Error::Auth)), "{:?}", r.err());
        assert_eq!(
            Error::Auth.to_string(),
            "authentication failed: wrong cluster secret"
        );
    }
    // No secret at all, on the unary RPC.
    let mut raw = raw_client(&server).await;
    let st = raw
        .call(tonic::Request::new(raw_request(
            0,
            0,
            Op::Statfs(pb::StatfsRequest {}),
        )))
        .await
        .unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unauthenticated);
    assert_eq!(st.message(), "authentication failed: wrong cluster secret");
    let good = busy.await.unwrap();
    assert_eq!(good.statfs(&root()).await.unwrap().inodes, 201);
    // The CLI with a wrong secret says so.
    let out = Command::new(BIN)
        .args(["--server", &server.addr, "--secret", "wrong", "status"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("authentication failed: wrong cluster secret"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0");
    let secret = server.secret();
    let good = server.client().await;
    good.mkdir(&root(), Soid::ROOT, b"before", 0o755)
        .await
        .unwrap();

    // Raw TCP garbage: the server drops that connection.
    for garbage in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &[0xffu8; 4096][..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\xff\xff\xff\x04\x00\x00\x00\x00garbage",
    ] {
        let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(garbage);
        let mut buf = [0u8; 4096];
        let started = Instant::now();
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) if started.elapsed() > Duration::from_secs(10) => {
                    panic!("the server kept a garbage connection open")
                }
                Ok(_) => {}
            }
        }
        good.lookup(&root(), Soid::ROOT, b"before").await.unwrap();
    }

    // A gRPC message over the 1 MiB limit: that call fails, others go on.
    let mut raw = raw_client(&server).await;
    let huge = Op::Setxattr(pb::SetxattrRequest {
        soid: Some(soid_to_pb(Soid::ROOT)),
        name: b"user.x".to_vec(),
        value: vec![7u8; 2 << 20],
        flags: 0,
    });
    let st = raw
        .call(with_secret(raw_request(0, 0, huge.clone()), &secret))
        .await
        .unwrap_err();
    assert!(
        matches!(
            st.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted | tonic::Code::Internal
        ),
        "{st:?}"
    );
    // ... and on a Session stream: the stream ends with an error.
    let mut s = raw
        .session(with_secret(
            tokio_stream_iter(vec![raw_request(0, 0, huge)]),
            &secret,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(s.message().await.is_err());
    // A field over its limit inside a message of normal size is EINVAL-like.
    let r = raw
        .call(with_secret(
            raw_request(
                0,
                0,
                Op::Resolve(pb::ResolveRequest {
                    path: vec![b'a'; 5000],
                    follow_last: true,
                }),
            ),
            &secret,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error.map(|e| e.errno), Some(FsError::NameTooLong.errno()));
    let r = raw
        .call(with_secret(
            pb::Request {
                op: None,
                ..raw_request(0, 0, Op::Statfs(pb::StatfsRequest {}))
            },
            &secret,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.error.map(|e| e.errno), Some(FsError::Invalid.errno()));

    // The long-lived client never noticed.
    good.mkdir(&root(), Soid::ROOT, b"after", 0o755)
        .await
        .unwrap();
    assert_eq!(good.statfs(&root()).await.unwrap().inodes, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_mutations_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), "127.0.0.1:0");
    let addr = server.addr.clone();
    let client = server.client().await;
    let dirsoid = client
        .mkdir(&root(), Soid::ROOT, b"w", 0o755)
        .await
        .unwrap()
        .soid;
    let acked = std::sync::Arc::new(parking_lot_free::Acked::default());
    const WRITERS: usize = 8;
    const PER_WRITER: usize = 150;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let c = client.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_WRITER {
                let name = format!("f{w}-{i}");
                // Non-exclusive create: a retry that reaches the restarted
                // server (which forgot its exactly-once table) still succeeds.
                c.create(&root(), dirsoid, name.as_bytes(), 0o644, false)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                acked.push(name);
            }
        }));
    }
    // Kill mid-stream, then restart on the same address: clients reconnect
    // and retry what was in flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.len() < WRITERS * PER_WRITER / 3 {
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.kill9();
    let at_kill = acked.snapshot();
    let server = Server::start(dir.path(), &addr);
    // Every mutation acknowledged before the kill is there.
    let check = server.client().await;
    for name in &at_kill {
        check
            .lookup(&root(), dirsoid, name.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("acknowledged {name} lost: {e}"));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = acked.snapshot();
    assert_eq!(all.len(), WRITERS * PER_WRITER);
    let mut cookie = 0;
    let mut listed = std::collections::HashSet::new();
    loop {
        let batch = check.readdir(&root(), dirsoid, cookie, 1000).await.unwrap();
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        listed.extend(batch.into_iter().map(|e| e.name.to_vec()));
    }
    assert_eq!(listed.len(), WRITERS * PER_WRITER);
    assert!(at_kill.len() < all.len(), "the kill happened mid-run");
}

/// A tiny thread-safe list (std only).
mod parking_lot_free {
    use std::sync::Mutex;

    #[derive(Default)]
    pub struct Acked(Mutex<Vec<String>>);

    impl Acked {
        pub fn push(&self, s: String) {
            self.0.lock().unwrap().push(s);
        }
        pub fn len(&self) -> usize {
            self.0.lock().unwrap().len()
        }
        pub fn snapshot(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }
}

#[test]
fn cli_uses_the_server_and_falls_back_to_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, "127.0.0.1:0");
    let run = |args: &[&str]| common::cli_ok(&server.addr, &data, args);
    run(&["mkdir", "-p", "/a/b"]);
    run(&["touch", "/a/f"]);
    run(&["ln", "-s", "/a/f", "/a/s"]);
    run(&["ln", "/a/f", "/a/h"]);
    run(&["mv", "/a/h", "/a/b/"]);
    assert_eq!(run(&["ls", "/a"]), "b\nf\ns\n");
    let st = run(&["--json", "stat", "/a/b/h"]);
    assert!(st.contains("\"nlink\":2"), "{st}");
    run(&["rm", "-r", "/a/b"]);
    assert!(run(&["du", "/"]).contains("4 entries"));
    assert!(run(&["status"]).contains("server "));
    drop(server);
    // With no server, --local (or nothing answering) means embedded.
    let out = common::local(&data, &["ls", "/a"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "f\ns\n");
}

/// TLS: a server with a certificate serves clients that trust it (the
/// library and the CLI), and a plain-TCP client gets a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_clients_that_trust_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let made =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let (mut child, addr) = common::spawn_server_with(
        &data,
        "127.0.0.1:0",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        std::process::Stdio::inherit(),
    );
    let secret = common::secret_of(&data);
    let tls = Options {
        tls_ca: Some(made.cert.pem().into_bytes()),
        ..Options::default()
    };
    let c = Client::connect(&addr, &secret, tls).await.unwrap();
    c.mkdir(&root(), Soid::ROOT, b"over-tls", 0o755)
        .await
        .unwrap();
    // Plain TCP to a TLS server: refused with an error, not a hang.
    let plain = Options {
        connect_timeout: Duration::from_secs(2),
        retry_for: Duration::from_secs(2),
        ..Options::default()
    };
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        Client::connect(&addr, &secret, plain),
    )
    .await
    .expect("a plain client must fail, not hang");
    assert!(r.is_err());
    // The CLI with --tls-ca.
    let ls = common::cli_ok(
        &addr,
        &data,
        &["--tls-ca", cert.to_str().unwrap(), "ls", "/"],
    );
    assert_eq!(ls.trim(), "over-tls");
    common::kill9(&mut child);
}

/// A server that stays down costs the first call the retry budget, and
/// every later call one connection attempt (it fails at once), until the
/// server answers again: a mount whose server is gone answers "not
/// connected" at once instead of after the budget per operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_fast_once_the_server_was_found_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), "127.0.0.1:0");
    let addr = server.addr.clone();
    let budget = Duration::from_secs(2);
    let options = Options {
        retry_for: budget,
        ..Options::default()
    };
    let c = Client::connect(&addr, &server.secret(), options)
        .await
        .unwrap();
    c.mkdir(&root(), Soid::ROOT, b"before", 0o755)
        .await
        .unwrap();
    server.kill9();
    let t = Instant::now();
    let first = c.getattr(&root(), Soid::ROOT).await;
    assert!(
        matches!(first, Err(sextant_client::Error::Unavailable { .. })),
        "{first:?}"
    );
    assert!(
        t.elapsed() >= budget / 2,
        "the first call retries: {:?}",
        t.elapsed()
    );
    for _ in 0..3 {
        let t = Instant::now();
        let later = c.lookup(&root(), Soid::ROOT, b"before").await;
        assert!(
            matches!(later, Err(sextant_client::Error::Unavailable { .. })),
            "{later:?}"
        );
        assert!(
            t.elapsed() < budget / 2,
            "later calls fail after one attempt: {:?}",
            t.elapsed()
        );
    }
    // Back: calls answer (and retry through a restart) again.
    let _server = Server::start(dir.path(), &addr);
    c.lookup(&root(), Soid::ROOT, b"before").await.unwrap();
    c.mkdir(&root(), Soid::ROOT, b"after", 0o755).await.unwrap();
}

/// An import whose source cannot be read fails before it makes anything:
/// no empty destination directory is left behind.
#[test]
fn a_failed_import_leaves_no_destination() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |args: &[&str]| common::local(&data, args);
    let missing = dir.path().join("missing");
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    for (source, why) in [(&missing, "No such file"), (&file, "Not a directory")] {
        let out = run(&["import", source.to_str().unwrap(), "/dest"]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
    }
    let ls = run(&["ls", "/"]);
    assert!(ls.status.success());
    assert_eq!(String::from_utf8_lossy(&ls.stdout), "", "nothing was made");
}

/// A command whose reader is gone (`sextant ls / | head -0`) ends quietly
/// by SIGPIPE, as ls does, instead of panicking on EPIPE.
#[test]
fn a_closed_stdout_ends_commands_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let init = std::process::Command::new(BIN)
        .arg("--data")
        .arg(&data)
        .arg("init")
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    for args in [&["status"][..], &["--json", "status"], &["find", "/"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(BIN)
            .args(["--local", "--data"])
            .arg(&data)
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{args:?}: {err}");
    }
}

/// Without a server (none answering at the default address, no --server,
/// no --local), no command makes a store to answer from — neither one that
/// reads nor one that writes (a second, private namespace): each says that
/// no server answered. `sextant init` makes one; then commands use it.
#[test]
fn without_a_server_reads_do_not_make_an_empty_store() {
    if std::net::TcpStream::connect(sextant_proto::DEFAULT_LISTEN).is_ok() {
        eprintln!("SKIPPED: a server answers at the default address");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |args: &[&str]| {
        std::process::Command::new(BIN)
            .arg("--data")
            .arg(&data)
            .args(args)
            .env_remove("SEXTANT_SERVER")
            .env_remove("SEXTANT_DATA")
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    for args in [&["ls", "/"][..], &["status"], &["find", "/"], &["du", "/"]] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("no Sextant server answers at"),
            "{args:?}: {err}"
        );
        assert!(!data.exists(), "{args:?} made a store");
    }
    let out = run(&["mkdir", "/a"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!data.exists(), "mkdir made a store");
    let out = run(&["init"]);
    assert!(out.status.success(), "{out:?}");
    let out = run(&["mkdir", "/a"]);
    assert!(out.status.success(), "{out:?}");
    let out = run(&["ls", "/"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\n");
    assert!(out.stderr.is_empty(), "{out:?}");
}

/// `sextant stat` is GNU stat's: a final symlink is shown itself, and
/// with -L (--dereference) what it points to.
#[test]
fn stat_shows_a_symlink_itself_unless_dereferenced() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |args: &[&str]| common::local_ok(&data, args);
    run(&["touch", "/f"]);
    run(&["ln", "-s", "/f", "/s"]);
    let ty = |args: &[&str]| {
        let v: serde_json::Value = serde_json::from_str(&run(args)).unwrap();
        v["type"].as_str().unwrap().to_string()
    };
    // ls -l names owner and group, as ls does.
    let id = |flag: &str| {
        let out = std::process::Command::new("id").arg(flag).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let long = run(&["ls", "-l", "/"]);
    let line = long.lines().find(|l| l.ends_with(" f")).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        (fields[2], fields[3]),
        (id("-un").as_str(), id("-gn").as_str()),
        "{line}"
    );
    assert_eq!(ty(&["--json", "stat", "/s"]), "symlink");
    assert_eq!(ty(&["--json", "stat", "-L", "/s"]), "file");
    assert_eq!(ty(&["--json", "stat", "--dereference", "/s"]), "file");
}

/// Import keeps a symlink's own times (and, as root, owner), as cp -a.
#[test]
fn import_keeps_symlink_times_and_owner() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let link = src.join("lnk");
    std::os::unix::fs::symlink("target", &link).unwrap();
    let ok = std::process::Command::new("touch")
        .args(["-h", "-d", "@1577934245"])
        .arg(&link)
        .status()
        .unwrap();
    assert!(ok.success());
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    if root {
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    }
    let data = dir.path().join("data");
    let run = |args: &[&str]| common::local_ok(&data, args);
    run(&["import", src.to_str().unwrap(), "/dst"]);
    let v: serde_json::Value = serde_json::from_str(&run(&["--json", "stat", "/dst/lnk"])).unwrap();
    assert_eq!(v["type"], "symlink");
    assert_eq!(v["mtime_ns"].as_i64(), Some(1_577_934_245_000_000_000));
    if root {
        assert_eq!(
            (v["uid"].as_u64(), v["gid"].as_u64()),
            (Some(65534), Some(65534))
        );
    }
}

/// `rm -r` removes a whole tree (many entries at once now), names that are
/// not UTF-8 included, and leaves the rest alone; `rm` of a directory
/// without -r refuses.
#[test]
fn rm_r_removes_a_tree_concurrently() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    for d in 0..8 {
        let sub = src.join(format!("d{d}")).join("deeper");
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..40 {
            std::fs::write(sub.join(format!("f{f}")), b"").unwrap();
        }
    }
    std::fs::write(src.join(std::ffi::OsStr::from_bytes(b"bad\xff")), b"").unwrap();
    let data = dir.path().join("data");
    let run = |args: &[&str]| common::local(&data, args);
    assert!(run(&["import", src.to_str().unwrap(), "/t"])
        .status
        .success());
    assert!(run(&["mkdir", "/keep"]).status.success());
    let out = run(&["rm", "/t"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory (use -r)"));
    let out = run(&["rm", "-r", "/t"]);
    assert!(out.status.success(), "{out:?}");
    let ls = run(&["ls", "/"]);
    assert_eq!(String::from_utf8_lossy(&ls.stdout), "keep\n");
    let du = run(&["du", "/"]);
    assert!(
        String::from_utf8_lossy(&du.stdout).contains("\t2 entries\t/"),
        "{du:?}"
    );
}

/// `sextant serve --socket SOCKET --data DATA`, which must fail at once;
/// what it said.
fn serve_refused(socket: &Path, data: &Path) -> String {
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--socket"])
        .arg(socket)
        .arg("--data")
        .arg(data)
        .env("SEXTANT_METRICS", "off")
        .output()
        .unwrap();
    assert!(!out.status.success(), "serve should have refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `serve --socket PATH`: clients on this machine reach the server at
/// `unix:PATH` (library and CLI) while TCP still serves; every local user
/// may connect (mode 0666); a second server does not take over a live
/// socket, nor a file that is not a socket; a stale socket is replaced; a
/// clean stop removes the socket. Without `--socket` a server off the
/// default address serves on `<data>/sextant.sock`; `--socket off` on
/// none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_serves_local_clients_beside_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let sock = dir.path().join("s.sock");
    let sock_arg = sock.to_str().unwrap();
    let (child, tcp) = common::spawn_server_with(
        &data,
        "127.0.0.1:0",
        &["--socket", sock_arg],
        std::process::Stdio::inherit(),
    );
    // Killed however the test ends (a failed assertion included).
    let mut child = common::KillOnDrop(child);
    let unix = format!("unix:{sock_arg}");
    let c = common::connect(&unix, &data).await;
    c.mkdir(&root(), Soid::ROOT, b"via-unix", 0o755)
        .await
        .unwrap();
    let over_tcp = common::connect(&tcp, &data).await;
    assert!(over_tcp
        .lookup(&root(), Soid::ROOT, b"via-unix")
        .await
        .is_ok());
    assert_eq!(
        common::cli_ok(&unix, &data, &["ls", "/"]).trim(),
        "via-unix"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o666);
    // The wrong secret is refused over the socket too.
    let wrong = Client::connect(&unix, "not-the-secret", Options::default()).await;
    assert!(matches!(wrong, Err(Error::Auth)), "{:?}", wrong.err());

    // Another server may not take the live socket (nor remove it).
    let said = serve_refused(&sock, &dir.path().join("other"));
    assert!(said.contains("another server answers there"), "{said}");
    assert!(sock.exists());
    c.getattr(&root(), Soid::ROOT).await.unwrap();

    // A clean stop removes the socket.
    drop((c, over_tcp));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    assert!(child.0.wait().unwrap().success());
    assert!(!sock.exists());

    // A socket left by a killed server is replaced.
    let start = || {
        let (child, _) = common::spawn_server_with(
            &data,
            "127.0.0.1:0",
            &["--socket", sock_arg],
            std::process::Stdio::inherit(),
        );
        common::KillOnDrop(child)
    };
    drop(start());
    assert!(sock.exists(), "kill -9 leaves the socket file");
    let _restarted = start();
    let c = common::connect(&unix, &data).await;
    assert!(c.lookup(&root(), Soid::ROOT, b"via-unix").await.is_ok());

    // A file that is not a socket is never replaced.
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"keep me").unwrap();
    let said = serve_refused(&plain, &dir.path().join("third"));
    assert!(said.contains("is not a socket"), "{said}");
    assert_eq!(std::fs::read(&plain).unwrap(), b"keep me");

    // The default: in the data directory; or off.
    for (setting, data, socket) in [(None, "fourth", true), (Some("off"), "fifth", false)] {
        let data = dir.path().join(data);
        let args: Vec<&str> = setting.map_or(vec![], |s| vec!["--socket", s]);
        let (child, _) =
            common::spawn_server_with(&data, "127.0.0.1:0", &args, std::process::Stdio::inherit());
        let _child = common::KillOnDrop(child);
        let default = data.join("sextant.sock");
        assert_eq!(default.exists(), socket, "{setting:?}");
        if socket {
            let c = common::connect(&format!("unix:{}", default.display()), &data).await;
            c.getattr(&root(), Soid::ROOT).await.unwrap();
        }
    }
}

/// A server given with `--server` that is not there: the CLI says what is
/// missing (a secret, or the server) and makes no embedded store.
#[test]
fn a_given_server_that_is_missing_is_named_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let gone = format!("unix:{}", dir.path().join("gone.sock").display());
    // A TCP port nobody listens on (bound, then let go).
    let gone_tcp = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let run_at = |server: &str, secret: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(["--server", server, "--data"])
            .arg(&data)
            .args(["mkdir", "/x"])
            .env_remove("SEXTANT_SECRET");
        if let Some(s) = secret {
            cmd.env("SEXTANT_SECRET", s);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Over TCP a secret is needed, and its absence is what is named.
    let said = run_at(&gone_tcp, None);
    assert!(
        said.contains(&format!(
            "no cluster secret was found for the server at {gone_tcp}"
        )),
        "{said}"
    );
    // A Unix socket needs none (the kernel names the caller): the missing
    // server is what is named, with or without a secret.
    let said = run_at(&gone, None);
    assert!(
        said.contains(&format!("cannot reach the Sextant server at {gone}")),
        "{said}"
    );
    let said = run_at(&gone, Some("s3cret"));
    assert!(
        said.contains(&format!("cannot reach the Sextant server at {gone}")),
        "{said}"
    );
    assert!(
        !said.contains("TLS"),
        "no TLS hint for a Unix socket: {said}"
    );
    assert!(!data.exists(), "no store made for a given server");
}

/// A server whose exactly-once count window (for clients that do not
/// acknowledge) is tiny: the config key `dedup_window`.
fn start_with_small_window(data: &Path) -> Server {
    std::fs::create_dir_all(data).unwrap();
    let config = data.join("small-window.toml");
    std::fs::write(&config, "dedup_window = 8\n").unwrap();
    let (child, addr) = common::spawn_server_with(
        data,
        "127.0.0.1:0",
        &[
            "--journal-sync",
            "fsync",
            "--config",
            config.to_str().unwrap(),
        ],
        std::process::Stdio::inherit(),
    );
    Server {
        child,
        addr,
        data: data.to_path_buf(),
    }
}

/// A deterministic shuffle of `1..=n` (xorshift; no rand dependency).
fn shuffled(n: u64, mut state: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (1..=n).collect();
    for i in (1..v.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        v.swap(i, (state % (i as u64 + 1)) as usize);
    }
    v
}

/// Issue 25 item 1: thousands of mutations in flight on one Session
/// stream, sent deliberately out of order (as a server's tasks may reach
/// the exactly-once table), with some replies "lost" and retried: each
/// runs exactly once and none is refused. The old window (the last N
/// numbers by count) refused the late arrivals with ESTALE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordered_mutations_in_flight_run_once_and_none_is_refused() {
    const N: u64 = 3000;
    const CLIENT: u64 = 0x5eed;
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_small_window(&dir.path().join("data"));
    let secret = server.secret();
    let c = server.client().await;
    let parent = c
        .mkdir(&root(), Soid::ROOT, b"r", 0o755)
        .await
        .unwrap()
        .soid;
    let create = move |seq: u64| {
        Op::Create(pb::CreateRequest {
            parent: Some(soid_to_pb(parent)),
            name: format!("f{seq}").into_bytes(),
            perm: 0o644,
            exclusive: true,
        })
    };
    let request = move |id: u64, seq: u64, acked_below: u64| pb::Request {
        id,
        acked_below,
        ..raw_request(CLIENT, seq, create(seq))
    };
    let mut raw = raw_client(&server).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::Request>(64);
    let mut replies = raw
        .session(with_secret(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            &secret,
        ))
        .await
        .unwrap()
        .into_inner();
    // Every first attempt, shuffled, with a pause now and then so later
    // numbers overtake earlier ones by a lot; nothing answered yet is
    // acknowledged (acked_below 1).
    let sender = tokio::spawn(async move {
        for (i, seq) in shuffled(N, 0x2545_f491_4f6c_dd1d).into_iter().enumerate() {
            tx.send(request(seq, seq, 1)).await.unwrap();
            if i % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tx
    });
    let mut first = std::collections::HashMap::new();
    for _ in 0..N {
        let r = replies.message().await.unwrap().unwrap();
        match (&r.result, &r.error) {
            (Some(Res::Attr(a)), None) => first.insert(r.id, a.soid),
            other => panic!("seq {}: {other:?}", r.id),
        };
    }
    let tx = sender.await.unwrap();
    assert_eq!(first.len() as u64, N);
    // The replies of every 7th were "lost": retry those (again out of
    // order); the rest count as answered, so the client acknowledges
    // everything below the lowest lost one.
    let lost: Vec<u64> = shuffled(N, 0x1234_5678_9abc_def1)
        .into_iter()
        .filter(|s| s % 7 == 0)
        .collect();
    let lowest_lost = *lost.iter().min().unwrap();
    for &seq in &lost {
        tx.send(request(N + seq, seq, lowest_lost)).await.unwrap();
    }
    for _ in 0..lost.len() {
        let r = replies.message().await.unwrap().unwrap();
        let seq = r.id - N;
        match (&r.result, &r.error) {
            (Some(Res::Attr(a)), None) => {
                assert_eq!(
                    Some(&a.soid),
                    first.get(&seq),
                    "seq {seq}: the original reply"
                )
            }
            other => panic!("retry of seq {seq}: {other:?}"),
        }
    }
    // Now everything is answered: a new request acknowledges it all, and a
    // late duplicate of an old number is refused, not run again.
    tx.send(request(2 * N + 1, N + 1, N + 1)).await.unwrap();
    let r = replies.message().await.unwrap().unwrap();
    assert!(r.error.is_none(), "{r:?}");
    tx.send(request(2 * N + 2, lowest_lost, 1)).await.unwrap();
    let r = replies.message().await.unwrap().unwrap();
    assert_eq!(r.error.map(|e| e.errno), Some(FsError::Stale.errno()));
    // Each ran once: N + 1 files, every name there.
    let mut cookie = 0;
    let mut names = std::collections::HashSet::new();
    loop {
        let batch = c.readdir(&root(), parent, cookie, 1000).await.unwrap();
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        names.extend(batch.into_iter().map(|e| e.name.to_vec()));
    }
    assert_eq!(names.len() as u64, N + 1);
    let (_, st) = c.stats(&root()).await.unwrap();
    assert!(st.replayed_replies >= lost.len() as u64, "{st:?}");
}

/// Issue 25 item 1 through the client library: thousands of concurrent
/// mutations against a server whose count window is tiny: none is refused
/// (the client acknowledges, so the window never applies to it). Failed
/// with ESTALE before: requests were numbered before waiting for a permit
/// and forgotten by count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_concurrent_client_mutations_are_never_stale() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_small_window(&dir.path().join("data"));
    let c = server.client().await;
    let parent = c
        .mkdir(&root(), Soid::ROOT, b"c", 0o755)
        .await
        .unwrap()
        .soid;
    const N: usize = 4000;
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                let f = c
                    .create(&root(), parent, format!("f{i}").as_bytes(), 0o644, true)
                    .await?;
                c.setattr(
                    &root(),
                    f.soid,
                    &SetAttr {
                        perm: Some(0o600),
                        ..Default::default()
                    },
                )
                .await
            })
        })
        .collect();
    let mut failures = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        if let Err(e) = t.await.unwrap() {
            failures.push((i, e));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {N} failed, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert_eq!(c.statfs(&root()).await.unwrap().inodes as usize, 2 + N);
}

/// A server armed to exit (like kill -9) right after its first
/// exactly-once mutation is durable, before the reply goes out.
fn start_crashing_after_commit(data: &Path) -> Server {
    let (child, addr) = common::spawn_server_env(
        data,
        "127.0.0.1:0",
        &["--journal-sync", "fsync"],
        std::process::Stdio::inherit(),
        &[("SEXTANT_FAULT", "exit-after-commit:1")],
    );
    Server {
        child,
        addr,
        data: data.to_path_buf(),
    }
}

async fn send(server: &Server, req: pb::Request) -> Result<pb::Response, tonic::Status> {
    let mut raw = raw_client(server).await;
    raw.call(with_secret(req, &server.secret()))
        .await
        .map(|r| r.into_inner())
}

/// Sends a mutation the server dies on before replying; checks it died
/// of the fault point.
async fn send_and_crash(server: &mut Server, req: pb::Request) {
    assert!(send(server, req).await.is_err(), "no reply expected");
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(86), "died of the fault point");
}

fn attr_of(r: &pb::Response) -> sextant_types::Attr {
    assert!(r.error.is_none(), "{r:?}");
    match &r.result {
        Some(Res::Attr(a)) => sextant_proto::attr_from_pb(a).unwrap(),
        other => panic!("not attributes: {other:?}"),
    }
}

/// Issue 25 item 12: with the journal, a mutation committed and synced
/// whose server died before replying gets, when retried on the restarted
/// server with the same client id and seq, its original reply — create the
/// same inode (not EEXIST), unlink and rmdir success with the attributes
/// as they were (not ENOENT) — and once written back, ESTALE (never a
/// second run). Before, the table was memory only and the retry ran again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_crash_between_commit_and_reply_gets_the_original_reply() {
    const CLIENT: u64 = 0xfeed_f00d;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let req = |seq: u64, op: Op| pb::Request {
        acked_below: 1,
        ..raw_request(CLIENT, seq, op)
    };
    let mkdir = || {
        Op::Mkdir(pb::MkdirRequest {
            parent: Some(soid_to_pb(Soid::ROOT)),
            name: b"d".to_vec(),
            perm: 0o755,
        })
    };
    let create = |d: Soid| {
        Op::Create(pb::CreateRequest {
            parent: Some(soid_to_pb(d)),
            name: b"f".to_vec(),
            perm: 0o640,
            exclusive: true,
        })
    };
    let unlink = |d: Soid| {
        Op::Unlink(pb::UnlinkRequest {
            parent: Some(soid_to_pb(d)),
            name: b"f".to_vec(),
        })
    };
    let rmdir = || {
        Op::Rmdir(pb::RmdirRequest {
            parent: Some(soid_to_pb(Soid::ROOT)),
            name: b"d".to_vec(),
        })
    };

    let mut s = start_crashing_after_commit(&data);
    send_and_crash(&mut s, req(1, mkdir())).await;

    let mut s = start_crashing_after_commit(&data);
    let d = attr_of(&send(&s, req(1, mkdir())).await.unwrap());
    let looked = s
        .client()
        .await
        .lookup(&root(), Soid::ROOT, b"d")
        .await
        .unwrap();
    // The no-xattrs hint is not in the replay ledger: a replayed reply
    // says "not known".
    assert!(!d.no_xattrs && looked.no_xattrs);
    let looked = sextant_types::Attr {
        no_xattrs: false,
        ..looked
    };
    assert_eq!(d, looked, "mkdir: the original reply, not EEXIST");
    send_and_crash(&mut s, req(2, create(d.soid))).await;

    let mut s = start_crashing_after_commit(&data);
    let f = attr_of(&send(&s, req(2, create(d.soid))).await.unwrap());
    let looked = s
        .client()
        .await
        .lookup(&root(), d.soid, b"f")
        .await
        .unwrap();
    assert_eq!(
        (f.soid, f.perm, f.ftype),
        (looked.soid, 0o640, FileType::Regular)
    );
    send_and_crash(&mut s, req(3, unlink(d.soid))).await;

    let mut s = start_crashing_after_commit(&data);
    let gone = attr_of(&send(&s, req(3, unlink(d.soid))).await.unwrap());
    assert_eq!((gone.soid, gone.nlink), (f.soid, 1), "unlink: as it was");
    send_and_crash(&mut s, req(4, rmdir())).await;

    let mut s = Server::start(&data, "127.0.0.1:0");
    let gone = attr_of(&send(&s, req(4, rmdir())).await.unwrap());
    assert_eq!(gone.soid, d.soid, "rmdir: success, not ENOENT");
    // The same numbers for another operation are refused.
    let other = send(&s, req(4, mkdir())).await.unwrap();
    assert_eq!(other.error.map(|e| e.errno), Some(FsError::Invalid.errno()));
    // A clean stop writes everything back and trims the journal: the
    // replies are gone, the numbers are not forgotten.
    s.stop();
    let s = Server::start(&data, "127.0.0.1:0");
    let stale = send(&s, req(2, create(d.soid))).await.unwrap();
    assert_eq!(stale.error.map(|e| e.errno), Some(FsError::Stale.errno()));
    let c = s.client().await;
    assert_eq!(
        c.lookup(&root(), Soid::ROOT, b"d").await.err(),
        Some(Error::Fs(FsError::NotFound)),
        "nothing ran twice"
    );
    // New numbers of the same client run.
    let again = send(&s, req(5, mkdir())).await.unwrap();
    assert!(again.error.is_none(), "{again:?}");
}
