//! A path resolution across the servers of a cluster (issue 21 item 3):
//! the server that receives a `Resolve` whose path leaves its tables walks
//! it on across the servers itself (`server/src/confine/across.rs`,
//! `Across::resolve`) — from the directory records it keeps under the
//! other servers' leases, asking them only for what it does not keep —
//! instead of refusing it and leaving the client to walk it name by
//! name. On real processes: a real etcd, servers a and b, and a single
//! server with the same namespace made by the same operations. Every
//! answer (the inode, by its path in its namespace, or the errno) must be
//! the single server's, as root and as nobody, for paths with symlinks
//! across the servers (absolute, relative, a loop), `..` across a table
//! boundary, a directory nobody may not search (EACCES at its step), a
//! name too long, a file used as a directory. And the resolution must
//! cost the servers about one request (plus one to the holder of what it
//! ends at), not the client's two per name. Skipped, and said so,
//! without an `etcd` binary.

mod common;

use common::{
    cluster_move, free_ports, have_etcd, output_ok, owner_in, start_etcd, table_of,
    tables_by_server, try_status_on, wait_for, KillOnDrop,
};
use sextant_client::Client;
use sextant_types::{Credentials, FsError, SetAttr, Soid};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `cluster move TABLE SERVER`, which must succeed.
fn move_table(etcd: &str, secret_dir: &Path, table: u64, server: &str) {
    output_ok(
        &mut cluster_move(etcd, secret_dir, &table.to_string(), server),
        &format!("cluster move {table} {server}"),
    );
}

/// `sextant serve` as cluster member `name` (data in `dir/name`), its
/// metrics on `metrics`.
fn serve(dir: &Path, etcd: &str, name: &str, config: &str, metrics: &str) -> (Child, String) {
    let store = dir.join("store");
    let args = [
        "--etcd",
        etcd,
        "--name",
        name,
        "--cluster-store",
        store.to_str().unwrap(),
        "--config",
        config,
    ];
    common::spawn_server_env(
        &dir.join(name),
        "127.0.0.1:0",
        &args,
        Stdio::inherit(),
        &[("SEXTANT_METRICS", metrics)],
    )
}

fn connect(rt: &tokio::runtime::Runtime, addr: &str, data: &Path) -> Client {
    let options = sextant_client::Options {
        retry_for: Duration::from_secs(15),
        ..Default::default()
    };
    rt.block_on(Client::connect(addr, &common::secret_of(data), options))
        .unwrap()
}

fn nobody() -> Credentials {
    Credentials {
        uid: 65534,
        gid: 65534,
        groups: Vec::new(),
    }
}

/// The directories made first (in one `mkdir`, so the small tables split
/// between them; `/zz` last: a table never splits between the last two
/// directories made), and the server each is placed on in the cluster
/// (`-`: anywhere).
const DIRS: &[(&str, &str)] = &[
    ("/top", "a"),
    ("/top/s0", "a"),
    ("/top/s0/d", "b"),
    ("/top/s0/d/e", "b"),
    ("/top/s1", "a"),
    ("/top/s2", "a"),
    ("/top/s2/d", "b"),
    ("/zz", "-"),
];

/// Symlinks: (directory, name, target).
const LINKS: &[(&str, &str, &str)] = &[
    // a → b, absolute.
    ("/top/s1", "ln", "/top/s0/d"),
    // a → b, relative, into the directory nobody may not search.
    ("/top/s1", "rel", "../s2/d"),
    // b → a, relative, up across the table boundary.
    ("/top/s0/d", "up", "../../s1"),
    ("/top/s0/d", "loop", "loop"),
    // b → b through a.
    ("/top/s0/d", "abs", "/top/s2/d/f0"),
    ("/top/s0/d/e", "slash", "../e/"),
];

/// Makes the namespace through `client` (root): the directories, files,
/// symlinks, and `/top/s2/d` closed to all but its owner (root).
fn build(rt: &tokio::runtime::Runtime, client: &Client) {
    let root = Credentials::root();
    let at = |path: &str| {
        rt.block_on(client.resolve(&root, path.as_bytes(), false))
            .unwrap()
            .soid
    };
    for (dir, _) in DIRS {
        let (parent, name) = dir.rsplit_once('/').unwrap();
        let parent = at(if parent.is_empty() { "/" } else { parent });
        rt.block_on(client.mkdir(&root, parent, name.as_bytes(), 0o755))
            .unwrap();
    }
    for dir in ["/top/s0/d", "/top/s0/d/e", "/top/s2/d"] {
        for f in ["f0", "f1"] {
            rt.block_on(client.create(&root, at(dir), f.as_bytes(), 0o644, true))
                .unwrap();
        }
    }
    for (dir, name, target) in LINKS {
        rt.block_on(client.symlink(&root, at(dir), name.as_bytes(), target.as_bytes()))
            .unwrap();
    }
    let closed = SetAttr {
        perm: Some(0o700),
        ..Default::default()
    };
    rt.block_on(client.setattr(&root, at("/top/s2/d"), &closed))
        .unwrap();
}

/// Every inode's path (each reached by one name from `/`, symlinks not
/// followed), listed as root.
fn paths_of(rt: &tokio::runtime::Runtime, client: &Client) -> HashMap<Soid, String> {
    let root = Credentials::root();
    let mut paths = HashMap::from([(Soid::ROOT, "/".to_string())]);
    let mut dirs = vec![(Soid::ROOT, String::new())];
    while let Some((dir, path)) = dirs.pop() {
        let entries = rt.block_on(client.readdir(&root, dir, 0, 1024)).unwrap();
        for e in entries {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            if e.ftype == sextant_types::FileType::Directory {
                dirs.push((e.soid, p.clone()));
            }
            paths.insert(e.soid, p);
        }
    }
    paths
}

/// The paths resolved, each as root and nobody, following the last
/// symlink and not.
fn paths() -> Vec<String> {
    let long = "n".repeat(256);
    let mut v: Vec<String> = [
        "/",
        "/top/s0/d",
        "/top/s0/d/",
        "/top/s0/d/f0",
        "/top/s0/d/f0/",
        "/top/s0/d/f0/x",
        "/top/s0/d/nope",
        "/top/s0/d/nope/x",
        "/top/s0/d/..",
        "/top/s0/d/../..",
        "/top/s0/d/../d/./e/../f1",
        "/top/s0/d/e/..",
        "/top/s0/d/e/../../s0/d/e/f0",
        "/top/s0/d/e/slash",
        "/top/s0/d/e/slash/f0",
        "/top/s1/ln",
        "/top/s1/ln/",
        "/top/s1/ln/f0",
        "/top/s1/ln/..",
        "/top/s1/ln/up",
        "/top/s1/ln/up/ln/e/f1",
        "/top/s1/ln/up/ln/up/../s0/d/loop",
        "/top/s0/d/loop",
        "/top/s0/d/loop/x",
        "/top/s0/d/abs",
        "/top/s1/rel",
        "/top/s1/rel/",
        "/top/s1/rel/f0",
        "/top/s1/rel/.",
        "/top/s1/rel/..",
        "/top/s2/d",
        "/top/s2/d/f0",
        "/top/s2/d/.",
        "/top/s2/d/..",
        "/top/s2/d/nope",
        "/../top/./s0//d/../../s2/d/f1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(format!("/top/s0/d/{long}"));
    v.push(format!("/top/s2/d/{long}"));
    v.push(format!("/top/{long}/x"));
    v
}

/// A resolution's answer, comparable between namespaces: the inode's
/// path and type, or the errno.
fn answer(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    names: &HashMap<Soid, String>,
    cred: &Credentials,
    path: &str,
    follow: bool,
) -> Result<(String, sextant_types::FileType), String> {
    match rt.block_on(client.resolve(cred, path.as_bytes(), follow)) {
        Ok(a) => Ok((
            names
                .get(&a.soid)
                .cloned()
                .unwrap_or(format!("{:?}", a.soid)),
            a.ftype,
        )),
        Err(sextant_client::Error::Fs(e)) => Err(format!("{e:?}")),
        Err(e) => panic!("resolve {path}: not an errno: {e}"),
    }
}

/// The sum of a server's `sextant_requests_total` (every op, outcome).
fn requests(metrics: &str) -> f64 {
    let mut s = std::net::TcpStream::connect(metrics).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .filter(|l| l.starts_with("sextant_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_resolution_across_servers_is_the_single_servers_and_one_request() {
    if !have_etcd() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();

    // The single server.
    let single = dir.path().join("single");
    let (s, s_addr) = common::spawn_server(&single, "nosync", "127.0.0.1:0");
    let _s = KillOnDrop(s);
    let one = connect(&rt, &s_addr, &single);
    build(&rt, &one);

    // The cluster: the namespace made on a, then b joins, then placed.
    let etcd_proc = start_etcd(dir.path());
    let etcd = etcd_proc.url.clone();
    let config = dir.path().join("small-tables.toml");
    std::fs::write(&config, "table_dir_limit = 1\ntable_inode_limit = 4\n").unwrap();
    let config = config.to_str().unwrap();
    let (a_metrics, b_metrics) = (
        format!("127.0.0.1:{}", free_ports(1)),
        format!("127.0.0.1:{}", free_ports(1)),
    );
    let (a, a_addr) = serve(dir.path(), &etcd, "a", config, &a_metrics);
    let a = KillOnDrop(a);
    let secret = dir.path().join("a");
    wait_for("the root table assigned", Duration::from_secs(30), || {
        try_status_on(&etcd, &secret)
            .map(|s| tables_by_server(&s).iter().any(|t| t.1 > 0))
            .unwrap_or(false)
    });
    let via_a = connect(&rt, &a_addr, &secret);
    build(&rt, &via_a);
    let (b, b_addr) = serve(dir.path(), &etcd, "b", config, &b_metrics);
    let b = KillOnDrop(b);
    wait_for("two servers", Duration::from_secs(60), || {
        try_status_on(&etcd, &secret)
            .map(|s| tables_by_server(&s).len() == 2)
            .unwrap_or(false)
    });
    let root = Credentials::root();
    let mut places: Vec<(u128, &str)> = vec![(Soid::ROOT.as_u128(), "a")];
    for (path, server) in DIRS.iter().filter(|d| d.1 != "-") {
        let soid = rt
            .block_on(via_a.resolve(&root, path.as_bytes(), false))
            .unwrap()
            .soid;
        places.push((soid.as_u128(), server));
    }
    // Each wanted table on its server (again: a balancing move may take
    // one elsewhere), once the tables have split apart.
    let start = Instant::now();
    loop {
        let st = try_status_on(&etcd, &secret).unwrap_or_default();
        let tables: Vec<Option<u64>> = places.iter().map(|(s, _)| table_of(&st, *s)).collect();
        let apart = tables.iter().zip(&places).all(|(t, (_, to))| {
            t.is_some()
                && tables
                    .iter()
                    .zip(&places)
                    .all(|(u, (_, other))| u != t || other == to)
        });
        if apart {
            let misplaced: Vec<(u64, &str)> = tables
                .iter()
                .zip(&places)
                .filter_map(|(t, (_, to))| t.map(|t| (t, *to)))
                .filter(|(t, to)| owner_in(&st, *t) != *to)
                .collect();
            if misplaced.is_empty() {
                break;
            }
            for (t, to) in misplaced {
                move_table(&etcd, &secret, t, to);
            }
            continue;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the tables do not split: {tables:?} for {places:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let via_b = connect(&rt, &b_addr, &secret);

    // The same answers as the single server's, through either server.
    let one_names = paths_of(&rt, &one);
    let names = paths_of(&rt, &via_a);
    let mut checked = 0;
    for path in paths() {
        for cred in [root.clone(), nobody()] {
            for follow in [false, true] {
                let want = answer(&rt, &one, &one_names, &cred, &path, follow);
                for (server, client) in [("a", &via_a), ("b", &via_b)] {
                    let got = answer(&rt, client, &names, &cred, &path, follow);
                    assert_eq!(
                        got, want,
                        "{path} as uid {} follow={follow} through {server}",
                        cred.uid
                    );
                    checked += 1;
                }
            }
        }
    }
    eprintln!("{checked} resolutions as on one server");
    // (Sanity: the cases reach what they are meant to.)
    assert_eq!(
        answer(&rt, &via_a, &names, &nobody(), "/top/s1/rel/f0", true),
        Err(format!("{:?}", FsError::Access))
    );
    assert_eq!(
        answer(&rt, &via_a, &names, &root, "/top/s1/ln/up/ln/e/f1", true).map(|a| a.0),
        Ok("/top/s0/d/e/f1".to_string())
    );

    // What a resolution through a costs the servers, warm: about one
    // request, plus one to b where it ends at b's (the client's walk
    // name by name: eleven and more).
    let deep = ["/top/s0/d/f0", "/top/s0/d/e/f1", "/top/s1/ln/up/ln/e/f1"];
    const ROUNDS: usize = 10;
    let before = requests(&a_metrics) + requests(&b_metrics);
    for _ in 0..ROUNDS {
        for p in deep {
            rt.block_on(via_a.resolve(&root, p.as_bytes(), true))
                .unwrap();
        }
    }
    let spent = requests(&a_metrics) + requests(&b_metrics) - before;
    let per = spent / (ROUNDS * deep.len()) as f64;
    eprintln!("requests per resolution: {per:.2}");
    // Measured 2.67 – 4.00 (a record not yet kept, or its lease renewed,
    // costs a call between the servers); the client's walk costs 13.33.
    assert!(
        per <= 6.0,
        "a resolution across the servers cost {per:.2} requests (the client's walk?)"
    );
    drop((a, b, etcd_proc));
}
