//! Routing against real servers: two in-process servers split the SOID
//! space by a route map; a client given either one reaches the owner of
//! whatever it names, follows WRONG_SERVER when a table moves, and keeps
//! exactly-once across the redirect; a watcher of every server
//! (`Client::watch_all`) follows the map as it changes.

use parking_lot::RwLock;
use sextant_client::{AllChanges, Client, Error, Options, Watched, MAP_POLL};
use sextant_engine::{Engine, EngineConfig};
use sextant_proto::pb;
use sextant_proto::route::{Route, RouteTable};
use sextant_server::placement::{Fixed, Placement};
use sextant_server::{serve, Listeners, ServeOptions};
use sextant_types::{Credentials, FsError, Soid, SoidRange};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The first SOID of the upper half: everything from here on is `b`'s at
/// first.
const SPLIT: u128 = 1 << 100;

/// A placement whose map the test changes (a table moving).
#[derive(Debug)]
struct Movable {
    me: String,
    table: RwLock<RouteTable>,
    /// While set, every request is refused as a table in transit is: the
    /// map names this server, which does not serve it yet.
    in_transit: std::sync::atomic::AtomicBool,
    /// Route maps handed out (`Map` calls).
    maps: std::sync::atomic::AtomicUsize,
    /// While set, R1 refuses every acknowledgement (a lease timer or a
    /// table's grant run out): what ran is answered WRONG_SERVER (`ran`).
    refuse_ack: std::sync::atomic::AtomicBool,
}

impl Placement for Movable {
    fn check(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        let table = self.table.read().clone();
        if self.in_transit.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Box::new(pb::WrongServer {
                soid: Some(sextant_proto::soid_to_pb(soid)),
                hint: None,
                revision: table.revision(),
                ran: false,
            }));
        }
        Fixed {
            me: self.me.clone(),
            table,
        }
        .check(soid)
    }

    fn may_ack(&self, soid: Soid) -> Result<(), Box<pb::WrongServer>> {
        self.check(soid)?;
        if self.refuse_ack.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Box::new(pb::WrongServer {
                soid: Some(sextant_proto::soid_to_pb(soid)),
                hint: None,
                revision: self.table.read().revision(),
                ran: false,
            }));
        }
        Ok(())
    }

    fn map(&self) -> pb::RouteMap {
        self.maps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.table.read().to_pb()
    }

    fn revision(&self) -> u64 {
        self.table.read().revision()
    }
}

fn routes(revision: u64, split: u128, a: &str, b: &str) -> RouteTable {
    let s = Soid::from_u128;
    let route = |first, last, name: &str, addr: &str| Route {
        range: SoidRange {
            first: s(first),
            last: s(last),
        },
        table: first as u64,
        server: name.into(),
        address: addr.into(),
        epoch: revision,
    };
    RouteTable::new(
        revision,
        vec![route(0, split - 1, "a", a), route(split, u128::MAX, "b", b)],
    )
    .unwrap()
}

struct Cluster {
    addrs: [String; 2],
    placements: [Arc<Movable>; 2],
    engines: [Engine; 2],
    _dirs: [tempfile::TempDir; 2],
    _stop: tokio::sync::watch::Sender<bool>,
}

impl Cluster {
    async fn start() -> Cluster {
        let la = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let lb = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = la.local_addr().unwrap().to_string();
        let b = lb.local_addr().unwrap().to_string();
        let table = routes(1, SPLIT, &a, &b);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut dirs = Vec::new();
        let mut engines = Vec::new();
        let mut placements = Vec::new();
        for (name, listener, addr) in [("a", la, a.clone()), ("b", lb, b.clone())] {
            let dir = tempfile::tempdir().unwrap();
            let engine = Engine::open_dir(dir.path(), EngineConfig::default()).unwrap();
            let placement = Arc::new(Movable {
                me: name.into(),
                table: RwLock::new(table.clone()),
                in_transit: false.into(),
                maps: 0.into(),
                refuse_ack: false.into(),
            });
            let options = ServeOptions {
                dedup_window: 1024,
                dedup_clients: 1024,
                recovery_grace: Duration::from_secs(1),
                tls: None,
                placement: Some(Arc::clone(&placement) as Arc<dyn Placement>),
                listen_address: addr,
                peer_ca: None,
                keys: None,
            };
            let mut stopped = stopped.clone();
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let listeners = Listeners {
                tcp: listener,
                unix: None,
            };
            tokio::spawn(serve(
                listeners,
                engine.clone(),
                SECRET.into(),
                options,
                shutdown,
            ));
            dirs.push(dir);
            engines.push(engine);
            placements.push(placement);
        }
        let [da, db] = <[_; 2]>::try_from(dirs).ok().unwrap();
        let [ea, eb] = <[_; 2]>::try_from(engines).ok().unwrap();
        let [pa, pb] = <[_; 2]>::try_from(placements).ok().unwrap();
        Cluster {
            addrs: [a, b],
            placements: [pa, pb],
            engines: [ea, eb],
            _dirs: [da, db],
            _stop: stop,
        }
    }

    /// Every SOID moves to server `i` (revision 2), as both servers' maps
    /// say from now on.
    fn move_everything_to(&self, i: usize) {
        let table = RouteTable::new(
            2,
            vec![Route {
                range: SoidRange {
                    first: Soid::from_u128(0),
                    last: Soid::from_u128(u128::MAX),
                },
                table: 1,
                server: ["a", "b"][i].into(),
                address: self.addrs[i].clone(),
                epoch: 2,
            }],
        )
        .unwrap();
        for p in &self.placements {
            *p.table.write() = table.clone();
        }
    }

    async fn client(&self, i: usize) -> Client {
        Client::connect(&self.addrs[i], SECRET, Options::default())
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_client_of_either_server_reaches_the_owner() {
    let cluster = Cluster::start().await;
    let root = Credentials::root();
    let upper = Soid::from_u128(SPLIT + 5);

    // Given a: the client takes a's map when it connects (two servers).
    // The root is a's; an upper SOID is b's, whose engine has no such
    // inode (ENOENT, from b — not a WRONG_SERVER error, not a's answer),
    // asked there at once.
    let ca = cluster.client(0).await;
    let map = ca.route_map().expect("a cluster's map, taken at connect");
    assert_eq!(map.revision(), 1);
    assert!(ca.getattr(&root, Soid::ROOT).await.is_ok());
    assert_eq!(
        ca.getattr(&root, upper).await,
        Err(Error::Fs(FsError::NotFound))
    );
    assert_eq!(ca.wrong_server_replies(), 0, "straight to the owner");

    // Given b: the root is a's, and a mutation in it runs there, once.
    let cb = cluster.client(1).await;
    let made = cb
        .mkdir(&root, Soid::ROOT, b"made-via-b", 0o755)
        .await
        .expect("routed to a");
    assert_eq!(cb.wrong_server_replies(), 0, "the map says a");
    assert!(cluster.engines[0].getattr(made.soid).is_ok(), "made on a");
    assert!(cluster.engines[1].getattr(made.soid).is_err(), "not on b");
    // Its retry (same request again after a redirect) is not a second
    // mkdir: a new name works, the same name is EEXIST as a new request.
    assert_eq!(
        cb.mkdir(&root, Soid::ROOT, b"made-via-b", 0o755).await,
        Err(Error::Fs(FsError::Exists))
    );
}

#[tokio::test]
async fn a_moved_table_is_followed_with_the_newer_map() {
    let cluster = Cluster::start().await;
    let root = Credentials::root();
    let upper = Soid::from_u128(SPLIT + 5);
    let ca = cluster.client(0).await;
    // Revision 1 (upper half on b), taken at connect.
    let _ = ca.getattr(&root, upper).await;
    assert_eq!(ca.route_map().map(|m| m.revision()), Some(1));
    assert_eq!(ca.wrong_server_replies(), 0);
    // The root's table moves to b: the cached map still says a, a says
    // WRONG_SERVER, the client takes revision 2 and goes to b (whose
    // engine has its own root).
    cluster.move_everything_to(1);
    let made = ca
        .mkdir(&root, Soid::ROOT, b"after-move", 0o755)
        .await
        .expect("followed to b");
    assert_eq!(ca.wrong_server_replies(), 1);
    assert!(cluster.engines[1].getattr(made.soid).is_ok(), "made on b");
    assert_eq!(ca.route_map().map(|m| m.revision()), Some(2));
}

/// A refusal under a map no newer than the client's (a table in transit:
/// the map names the server, which does not serve it yet) fetches no map:
/// the client waits and asks again. It used to fetch the same map after
/// every such refusal — and after every hop of a path resolved across
/// servers.
#[tokio::test]
async fn a_refusal_under_the_clients_own_map_fetches_no_map() {
    use std::sync::atomic::Ordering::SeqCst;
    let cluster = Cluster::start().await;
    let root = Credentials::root();
    let ca = cluster.client(0).await;
    assert_eq!(ca.route_map().map(|m| m.revision()), Some(1));
    let a = &cluster.placements[0];
    let before = a.maps.load(SeqCst);
    a.in_transit.store(true, SeqCst);
    let arrived = {
        let a = Arc::clone(a);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            a.in_transit.store(false, SeqCst);
        })
    };
    let made = ca
        .mkdir(&root, Soid::ROOT, b"after-transit", 0o755)
        .await
        .expect("served once the table arrived");
    arrived.await.unwrap();
    assert!(ca.wrong_server_replies() >= 1, "it was refused meanwhile");
    assert_eq!(a.maps.load(SeqCst), before, "no map fetched");
    assert!(cluster.engines[0].getattr(made.soid).is_ok());
}

/// Hundreds of requests in flight refused by one move fetch the new map
/// once, not once each: the fetches take turns, and a request whose turn
/// comes after a fetch begun while it waited routes by that fetch's map.
/// (Each fetch is ~60 B per table: at 2,000 tables, 500 refused requests
/// fetched 62 MB.)
#[tokio::test]
async fn many_requests_refused_by_one_move_fetch_the_map_once() {
    use std::sync::atomic::Ordering::SeqCst;
    let cluster = Cluster::start().await;
    let root = Credentials::root();
    let ca = cluster.client(0).await;
    let names: Vec<Vec<u8>> = (0..500).map(|i| format!("f{i}").into_bytes()).collect();
    // The root's table moves to b (revision 2), whose engine has its own
    // root: every request for it is refused by a, then served by b.
    cluster.move_everything_to(1);
    let maps_before: usize = cluster.placements.iter().map(|p| p.maps.load(SeqCst)).sum();
    let fetches_before = ca.map_fetches();
    let mut tasks = tokio::task::JoinSet::new();
    for name in names {
        let (ca, root) = (ca.clone(), root.clone());
        tasks.spawn(async move { ca.create(&root, Soid::ROOT, &name, 0o644, true).await });
    }
    while let Some(made) = tasks.join_next().await {
        made.unwrap().expect("created on b");
    }
    let maps: usize = cluster
        .placements
        .iter()
        .map(|p| p.maps.load(SeqCst))
        .sum::<usize>()
        - maps_before;
    assert!(ca.wrong_server_replies() >= 2, "several were refused");
    assert_eq!(
        ca.map_fetches() - fetches_before,
        1,
        "one fetch for {} refusals",
        ca.wrong_server_replies()
    );
    assert_eq!(maps, 1, "the servers handed out one map");
    assert_eq!(ca.route_map().map(|m| m.revision()), Some(2));
}

/// A client of a that retries for 5 minutes.
async fn patient_client(cluster: &Cluster) -> Client {
    Client::connect(
        &cluster.addrs[0],
        SECRET,
        Options {
            retry_for: Duration::from_secs(300),
            ..Options::default()
        },
    )
    .await
    .unwrap()
}

/// A mkdir as root under an upper SOID (b's half at first), running.
fn mkdir_in_bs_half(ca: &Client) -> tokio::task::JoinHandle<Result<sextant_types::Attr, Error>> {
    let ca = ca.clone();
    tokio::spawn(async move {
        ca.mkdir(
            &Credentials::root(),
            Soid::from_u128(SPLIT + 5),
            b"late",
            0o755,
        )
        .await
    })
}

/// `n` creates in a's root as root, 64 at a time, each of which must
/// succeed.
async fn creates_in_as_root(ca: &Client, n: u32) {
    let mut tasks: tokio::task::JoinSet<Result<sextant_types::Attr, Error>> =
        tokio::task::JoinSet::new();
    for i in 0..n {
        if tasks.len() >= 64 {
            tasks
                .join_next()
                .await
                .unwrap()
                .unwrap()
                .expect("created on a");
        }
        let ca = ca.clone();
        tasks.spawn(async move {
            ca.create(
                &Credentials::root(),
                Soid::ROOT,
                format!("f{i}").as_bytes(),
                0o644,
                true,
            )
            .await
        });
    }
    while let Some(made) = tasks.join_next().await {
        made.unwrap().expect("created on a");
    }
}

/// A request that never ran is not refused as a stale retry: it waits
/// for a table in transit (b refuses it, WRONG_SERVER) while 16,400 later
/// mutations of the same client finish on a — whose exactly-once table
/// keeps at most 16,384 replies per client and raises the client's floor
/// over the ones it drops, past the waiting request's number — and then
/// the table moves to a. a's floor refuses the number (ESTALE); every
/// attempt was refused before it ran, so the client sends it again under
/// a new number and gets the operation's own answer. (A table carried to
/// a new owner raises its floors the same way past 4,096 replies per
/// client; likely what a bench on three servers met once as "stale file
/// handle" on a create — its logs were lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_ran_is_not_refused_by_a_floor_raised_meanwhile() {
    use std::sync::atomic::Ordering::SeqCst;
    let cluster = Cluster::start().await;
    let ca = patient_client(&cluster).await;
    // The waiting request: a mkdir under an upper SOID (b's), while b
    // refuses everything as a table in transit.
    cluster.placements[1].in_transit.store(true, SeqCst);
    let waiting = mkdir_in_bs_half(&ca);
    while ca.wrong_server_replies() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    creates_in_as_root(&ca, 16_400).await;
    // b's half moves to a (revision 2); b still refuses, now under the
    // newer map, so the client takes it and goes to a.
    cluster.move_everything_to(0);
    let answer = waiting.await.unwrap();
    // a's engine has no such parent: the mkdir ran there and says so.
    assert_eq!(answer.err(), Some(Error::Fs(FsError::NotFound)));
}

/// Issue 21: a request that *ran* and was refused only by R1 (its reply
/// withheld: the table moving) is never taken for one that did not run.
/// b runs the mkdir and R1 refuses the reply (WRONG_SERVER, `ran`); then
/// b refuses it as a table in transit while 16,400 later mutations of the
/// client finish on a, raising a's floor for the client past its number;
/// the table moves to a, whose floor refuses it (ESTALE: it ran, its reply
/// is gone here). Renumbered as a request that never ran (what the client
/// did), it would run a second time — a create answered EEXIST, an unlink
/// ENOENT; here a's engine, which lacks b's parent, would say ENOENT. The
/// client must return the ESTALE instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_by_r1_after_it_ran_is_never_sent_again_as_new() {
    use std::sync::atomic::Ordering::SeqCst;
    let cluster = Cluster::start().await;
    let ca = patient_client(&cluster).await;
    cluster.placements[1].refuse_ack.store(true, SeqCst);
    let waiting = mkdir_in_bs_half(&ca);
    // It ran on b; R1 refused its reply.
    while ca.wrong_server_replies() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.placements[1].in_transit.store(true, SeqCst);
    cluster.placements[1].refuse_ack.store(false, SeqCst);
    creates_in_as_root(&ca, 16_400).await;
    cluster.move_everything_to(0);
    let answer = waiting.await.unwrap();
    assert_eq!(
        answer.err(),
        Some(Error::Fs(FsError::Stale)),
        "it ran on b: refused as stale, never run again under a new number"
    );
}

/// Events of `all` until `done` says enough (at most 10 s).
async fn watch_until(
    all: &mut AllChanges,
    mut done: impl FnMut(&[Watched]) -> bool,
) -> Vec<Watched> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done(&seen) {
        match tokio::time::timeout_at(deadline, all.next()).await {
            Ok(w) => seen.push(w.expect("watching")),
            Err(_) => panic!("not within 10 s; saw {seen:?}"),
        }
    }
    seen
}

fn changed(seen: &[Watched], name: &[u8]) -> bool {
    seen.iter().any(|w| match w {
        Watched::Changes(b) => b.entries.iter().any(|(_, n)| &n[..] == name),
        _ => false,
    })
}

fn has(seen: &[Watched], want: &Watched) -> bool {
    seen.contains(want)
}

/// `watch_all` of a client given a watches both servers of the map, so it
/// sees what another client changes through either; it follows the map:
/// a server that leaves it is no longer watched (`Left`), and one that
/// comes back is watched again (`Opened`), each seen within the poll.
#[tokio::test]
async fn watch_all_watches_every_server_of_the_map_and_follows_it() {
    let cluster = Cluster::start().await;
    let root = Credentials::root();
    let [a, b] = cluster.addrs.clone();
    let with_origin = |origin| Options {
        origin,
        ..Options::default()
    };
    let watcher = Client::connect(&a, SECRET, with_origin(1)).await.unwrap();
    let writer = Client::connect(&b, SECRET, with_origin(2)).await.unwrap();
    let mut all = watcher.watch_all();
    let opened = |s: &str| Watched::Opened { server: s.into() };
    let left = |s: &str| Watched::Left { server: s.into() };
    watch_until(&mut all, |w| has(w, &opened(&a)) && has(w, &opened(&b))).await;
    let mut servers = all.servers();
    servers.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(servers, both);

    // The root is a's: a mkdir through b runs there.
    writer
        .mkdir(&root, Soid::ROOT, b"on-a", 0o755)
        .await
        .unwrap();
    watch_until(&mut all, |w| changed(w, b"on-a")).await;

    // Everything moves to b (b's engine has a root of its own): a leaves
    // the map, and changes made through b are seen.
    let s = Soid::from_u128;
    let whole = |revision, name: &str, addr: &str| {
        RouteTable::new(
            revision,
            vec![Route {
                range: SoidRange {
                    first: s(0),
                    last: s(u128::MAX),
                },
                table: 1,
                server: name.into(),
                address: addr.into(),
                epoch: revision,
            }],
        )
        .unwrap()
    };
    for p in &cluster.placements {
        *p.table.write() = whole(2, "b", &b);
    }
    watch_until(&mut all, |w| has(w, &left(&a))).await;
    assert_eq!(all.servers(), vec![b.clone()]);
    writer
        .mkdir(&root, Soid::ROOT, b"on-b", 0o755)
        .await
        .unwrap();
    assert!(cluster.engines[1]
        .lookup(&root, Soid::ROOT, b"on-b")
        .is_ok());
    watch_until(&mut all, |w| changed(w, b"on-b")).await;

    // And back to a, a server that was not watched any more.
    for p in &cluster.placements {
        *p.table.write() = whole(3, "a", &a);
    }
    watch_until(&mut all, |w| has(w, &opened(&a)) && has(w, &left(&b))).await;
    writer
        .mkdir(&root, Soid::ROOT, b"on-a-again", 0o755)
        .await
        .unwrap();
    watch_until(&mut all, |w| changed(w, b"on-a-again")).await;

    // A map of a lower revision (a server that has not heard yet) is not
    // followed.
    *cluster.placements[0].table.write() = whole(2, "b", &b);
    tokio::time::sleep(MAP_POLL * 2).await;
    assert_eq!(all.servers(), vec![a.clone()]);
}
