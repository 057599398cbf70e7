//! The frame door (`sextant_proto::frames`) from the client's side: a
//! lane made with `Client::sibling_with_frame_door` sends its requests
//! there (on its own calling-thread runtime, as the mount's FUSE threads
//! do) and gets the answers the Session stream gives; a door that is not
//! its server's, or none, leaves it on the Session stream; a connection
//! cut after the server ran a mutation and before its reply came back is
//! retried under the same exactly-once number, on a new door connection,
//! and the mutation runs once.

use sextant_client::{Client, Options};
use sextant_engine::{Engine, EngineConfig};
use sextant_proto::frames::{encode_frame, FrameReader};
use sextant_proto::pb;
use sextant_server::{serve, Listeners, ServeOptions};
use sextant_types::{Credentials, FsError, Soid};
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// One server on a loopback port with a Unix socket (and so a frame door)
/// in a directory of its own; stops when dropped.
struct Server {
    addr: String,
    door: PathBuf,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open_dir(dir.path().join("data"), EngineConfig::default()).unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap().to_string();
        let socket = dir.path().join("s.sock");
        let (unix, file) = sextant_server::local_socket::bind(&socket).unwrap();
        let options = ServeOptions {
            dedup_window: 1024,
            dedup_clients: 1024,
            recovery_grace: Duration::from_secs(1),
            tls: None,
            placement: None,
            listen_address: addr.clone(),
            peer_ca: None,
            keys: None,
        };
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let listeners = Listeners {
            tcp,
            unix: Some(unix),
        };
        tokio::spawn(async move {
            let _file = file;
            serve(listeners, engine, SECRET.into(), options, shutdown).await
        });
        let door = sextant_proto::frames::door_path(&socket);
        for _ in 0..100 {
            if door.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(door.exists(), "the server opened its frame door");
        Server {
            addr,
            door,
            _dir: dir,
            _stop: stop,
        }
    }
}

/// Runs `f` with a lane of `shared` on `door`, on a thread of its own
/// with a calling-thread runtime (as a mount's FUSE thread).
fn on_lane<T: Send + 'static>(
    shared: &Client,
    door: Option<PathBuf>,
    f: impl FnOnce(&tokio::runtime::Runtime, Client) -> T + Send + 'static,
) -> T {
    let shared = shared.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let lane = rt.block_on(shared.sibling_with_frame_door(door)).unwrap();
        f(&rt, lane)
    })
    .join()
    .unwrap()
}

fn root() -> Credentials {
    Credentials::root()
}

#[test]
fn a_lane_on_the_frame_door_answers_as_the_session_stream_does() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, b) = rt.block_on(async { (Server::start().await, Server::start().await) });
    let shared = rt
        .block_on(Client::connect(&a.addr, SECRET, Options::default()))
        .unwrap();
    let door = a.door.clone();
    let (used, listed) = on_lane(&shared, Some(door), |rt, lane| {
        rt.block_on(async {
            let c = root();
            let d = lane.mkdir(&c, Soid::ROOT, b"d", 0o755).await.unwrap();
            let f = lane.create(&c, d.soid, b"f", 0o644, true).await.unwrap();
            assert_eq!(lane.getattr(&c, f.soid).await.unwrap().soid, f.soid);
            assert_eq!(lane.lookup(&c, d.soid, b"f").await.unwrap().soid, f.soid);
            // Exclusive, again: the engine's answer, as over gRPC.
            assert_eq!(
                lane.create(&c, d.soid, b"f", 0o644, true).await,
                Err(sextant_client::Error::Fs(FsError::Exists))
            );
            // A request the session loop does not answer inline.
            let listed: Vec<_> = lane
                .readdir(&c, d.soid, 0, 100)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.name.to_vec())
                .collect();
            lane.unlink(&c, d.soid, b"f").await.unwrap();
            assert_eq!(
                lane.unlink(&c, d.soid, b"f").await,
                Err(sextant_client::Error::Fs(FsError::NotFound))
            );
            (lane.on_frame_door(), listed)
        })
    });
    assert!(used, "the lane's session is on the frame door");
    assert!(listed.contains(&b"f".to_vec()), "{listed:?}");
    // The shared client (another session) sees what the lane did.
    let d = rt
        .block_on(shared.lookup(&root(), Soid::ROOT, b"d"))
        .unwrap();
    assert_eq!(
        rt.block_on(shared.lookup(&root(), d.soid, b"f")),
        Err(sextant_client::Error::Fs(FsError::NotFound))
    );
    // Another server's door (it names another address), and no door: the
    // Session stream, with the same answers.
    for door in [
        Some(b.door.clone()),
        Some(a.door.with_extension("none")),
        None,
    ] {
        let used = on_lane(&shared, door.clone(), |rt, lane| {
            rt.block_on(async {
                let c = root();
                let d = lane.lookup(&c, Soid::ROOT, b"d").await.unwrap();
                lane.create(&c, d.soid, b"g", 0o644, false).await.unwrap();
                lane.unlink(&c, d.soid, b"g").await.unwrap();
                lane.on_frame_door()
            })
        });
        assert!(!used, "{door:?}: not on the frame door");
    }
}

/// A proxy in front of a frame door (at `path`) that, once `armed`, cuts
/// the connection instead of passing the next response back.
fn cutting_proxy(path: &Path, door: PathBuf, armed: Arc<AtomicBool>) {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = UnixStream::connect(&door).unwrap();
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            // Client to server: bytes as they come.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut &c2, &mut &s2);
                let _ = s2.shutdown(std::net::Shutdown::Both);
            });
            let armed = Arc::clone(&armed);
            std::thread::spawn(move || {
                let mut from = FrameReader::new(server.try_clone().unwrap());
                let welcome: pb::FrameWelcome = from.read_frame().unwrap();
                let mut buf = Vec::new();
                encode_frame(&welcome, &mut buf).unwrap();
                (&client).write_all(&buf).unwrap();
                while let Ok(resp) = from.read_frame::<pb::Response>() {
                    if armed.swap(false, Ordering::SeqCst) {
                        let _ = client.shutdown(std::net::Shutdown::Both);
                        let _ = server.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                    encode_frame(&resp, &mut buf).unwrap();
                    if (&client).write_all(&buf).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

/// The reply of an exclusive create that ran is lost with its door
/// connection: the client retries it (same client id and number) on a new
/// connection and gets the first run's answer — not EEXIST, which a
/// second run would give. (Without the retry under the transport, the
/// lost reply would be an error to the caller.)
#[test]
fn a_mutation_whose_reply_was_cut_off_is_retried_and_runs_once() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = rt.block_on(Server::start());
    let shared = rt
        .block_on(Client::connect(&a.addr, SECRET, Options::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proxy = dir.path().join("p.frames");
    let armed = Arc::new(AtomicBool::new(false));
    cutting_proxy(&proxy, a.door.clone(), Arc::clone(&armed));
    let (made, used, pauses) = on_lane(&shared, Some(proxy), move |rt, lane| {
        rt.block_on(async {
            let c = root();
            assert!(lane.on_frame_door());
            armed.store(true, Ordering::SeqCst);
            let made = lane.create(&c, Soid::ROOT, b"once", 0o644, true).await;
            assert!(!armed.load(Ordering::SeqCst), "the proxy cut a reply");
            (made, lane.on_frame_door(), lane.retry_pauses())
        })
    });
    let made = made.expect("the retry gets the first run's answer");
    assert!(used, "the retry went through the door again");
    assert!(pauses >= 1, "it was retried");
    let seen = rt
        .block_on(shared.lookup(&root(), Soid::ROOT, b"once"))
        .unwrap();
    assert_eq!(seen.soid, made.soid, "one file, the one made");
}
