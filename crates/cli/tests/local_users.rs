//! Local users without the cluster secret: on the server's Unix socket
//! every CLI command works for a non-root user, from any directory, as
//! that user, with the permissions ext4 gives them.
//!
//! - `local_users_get_what_ext4_gives_them`: a tree built the same way in
//!   Sextant (as root, with the secret) and in a local ext4 directory;
//!   then, as several real users of this machine (one with a
//!   supplementary group that only the user database gives), a matrix of
//!   operations — stat, ls, create, mkdir, remove, rename, chmod, chown,
//!   setfattr/getfattr — through the CLI against the same system calls on
//!   ext4: the same results and errnos, one by one; then `find`, `stats`
//!   and `du` against GNU find; and at the end the two trees (names,
//!   modes, owners) must be equal — what a user made is theirs.
//!
//! The users run through `setpriv --init-groups` (their groups from the
//! user database, as a login gives them), with their own HOME, from `/`,
//! and cannot read the secret (0600, root's).

mod common;

use common::{spawn_server_with, KillOnDrop, BIN};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const PY: &str = "/usr/bin/python3";

/// Runs operations on a local directory, one per stdin line
/// (tab-separated: op, args...), printing `OK[ value]` or the errno's name
/// per line. The same operations as the CLI's commands.
const LOCAL_OPS: &str = r#"
import errno, os, sys
os.umask(0)
os.chdir(sys.argv[1])
def rel(p): return p.lstrip("/")
def owner(spec):
    u, _, g = spec.partition(":")
    import grp, pwd
    uid = -1 if u == "" else (int(u) if u.isdigit() else pwd.getpwnam(u).pw_uid)
    gid = -1 if g == "" else (int(g) if g.isdigit() else grp.getgrnam(g).gr_gid)
    return uid, gid
for line in sys.stdin.read().splitlines():
    op, *a = line.split("\t")
    try:
        v = None
        if op == "stat": os.lstat(rel(a[0]))
        elif op == "ls": v = " ".join(sorted(os.listdir(rel(a[0]))))
        elif op == "touch": os.close(os.open(rel(a[0]), os.O_CREAT | os.O_WRONLY, 0o644))
        elif op == "mkdir": os.mkdir(rel(a[0]), 0o755)
        elif op == "rm": os.unlink(rel(a[0]))
        elif op == "rmdir": os.rmdir(rel(a[0]))
        elif op == "mv": os.rename(rel(a[0]), rel(a[1]))
        elif op == "chmod": os.chmod(rel(a[1]), int(a[0], 8))
        elif op == "chown": os.chown(rel(a[1]), *owner(a[0]))
        elif op == "setfattr": os.setxattr(rel(a[2]), a[0], a[1].encode())
        elif op == "getfattr": v = os.getxattr(rel(a[1]), a[0]).decode()
        else: raise SystemExit("unknown op " + op)
        print("OK" if v is None else "OK " + v)
    except OSError as e:
        print(errno.errorcode[e.errno])
"#;

/// Names of the errnos the CLI reports as `(errno N)`.
fn errno_name(n: i32) -> String {
    match n {
        1 => "EPERM",
        2 => "ENOENT",
        13 => "EACCES",
        17 => "EEXIST",
        20 => "ENOTDIR",
        21 => "EISDIR",
        22 => "EINVAL",
        39 => "ENOTEMPTY",
        61 => "ENODATA",
        _ => return format!("errno {n}"),
    }
    .to_string()
}

/// The CLI's arguments for one operation.
fn cli_args(op: &str, a: &[&str]) -> Vec<String> {
    let v: Vec<&str> = match op {
        "stat" | "ls" | "touch" | "rm" => vec![op, a[0]],
        "mkdir" => vec!["mkdir", "-m", "755", a[0]],
        "rmdir" => vec!["rm", "-r", a[0]],
        "mv" => vec!["mv", a[0], a[1]],
        "chmod" | "chown" => vec![op, a[0], a[1]],
        "setfattr" => vec!["setfattr", "-n", a[0], "-v", a[1], a[2]],
        "getfattr" => vec!["getfattr", "-n", a[0], a[1]],
        _ => panic!("unknown op {op}"),
    };
    v.into_iter().map(String::from).collect()
}

/// A user of this machine.
#[derive(Clone, Copy, Debug)]
struct User {
    name: &'static str,
    uid: u32,
    gid: u32,
}

/// The users the test runs as: those of the list this machine has (by
/// name, with these ids). `postgres` is in `ssl-cert` (103) through the
/// user database only.
fn users() -> Vec<User> {
    let want = [
        User {
            name: "nobody",
            uid: 65534,
            gid: 65534,
        },
        User {
            name: "cloudsdk",
            uid: 1000,
            gid: 1000,
        },
        User {
            name: "postgres",
            uid: 101,
            gid: 104,
        },
        User {
            name: "etcd",
            uid: 102,
            gid: 105,
        },
    ];
    want.into_iter()
        .filter(|u| {
            let id = |flag: &str| {
                Command::new("id")
                    .args([flag, u.name])
                    .output()
                    .ok()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            };
            id("-u") == Some(u.uid.to_string()) && id("-g") == Some(u.gid.to_string())
        })
        .collect()
}

/// `setpriv` as `user` (groups from the user database) running `prog`.
fn as_user(user: User, prog: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid",
        &user.uid.to_string(),
        "--regid",
        &user.gid.to_string(),
        "--init-groups",
        prog,
    ]);
    c
}

/// The test's world: a server (root's, with its secret in `data`) with a
/// socket, and a local directory.
struct World {
    _server: KillOnDrop,
    addr: String,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl World {
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn local(&self) -> PathBuf {
        self.dir.path().join("local")
    }

    /// The CLI as `user` (no secret, their own HOME, from `/`), or as root
    /// with the secret over TCP.
    fn sextant(&self, user: Option<User>, args: &[String]) -> Output {
        let mut c = match user {
            Some(u) => {
                let mut c = as_user(u, BIN);
                let home = self.dir.path().join(format!("home-{}", u.name));
                std::fs::create_dir_all(&home).unwrap();
                std::os::unix::fs::chown(&home, Some(u.uid), Some(u.gid)).unwrap();
                c.env("HOME", home)
                    .env("SEXTANT_SOCKET", &self.socket)
                    .env_remove("SEXTANT_SERVER");
                c
            }
            None => {
                let mut c = Command::new(BIN);
                c.args(["--server", &self.addr]);
                c
            }
        };
        c.args(args)
            .current_dir("/")
            .env("SEXTANT_DATA", self.data())
            .env("TZ", "UTC")
            .env_remove("SEXTANT_SECRET")
            .env_remove("SEXTANT_SECRET_FILE")
            .env_remove("SEXTANT_CONFIG")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs `ops` (op, args) through the CLI: one result line each.
    fn sextant_ops(&self, user: Option<User>, ops: &[Vec<String>]) -> Vec<String> {
        ops.iter()
            .map(|op| {
                let a: Vec<&str> = op[1..].iter().map(String::as_str).collect();
                let out = self.sextant(user, &cli_args(&op[0], &a));
                let stdout = String::from_utf8_lossy(&out.stdout);
                let stderr = String::from_utf8_lossy(&out.stderr);
                if out.status.success() {
                    match op[0].as_str() {
                        "ls" => {
                            let mut names: Vec<&str> = stdout.split_whitespace().collect();
                            names.sort_unstable();
                            format!("OK {}", names.join(" "))
                        }
                        "getfattr" => format!("OK {}", stdout.trim_end()),
                        _ => "OK".to_string(),
                    }
                } else {
                    match stderr
                        .rsplit_once("(errno ")
                        .and_then(|(_, n)| n.split(')').next()?.parse().ok())
                    {
                        Some(n) => errno_name(n),
                        None => format!("FAILED: {}", stderr.trim()),
                    }
                }
            })
            .collect()
    }

    /// Runs `ops` on the local directory, as `user` or root.
    fn local_ops(&self, user: Option<User>, ops: &[Vec<String>]) -> Vec<String> {
        let script = self.dir.path().join("ops.py");
        std::fs::write(&script, LOCAL_OPS).unwrap();
        let mut c = match user {
            Some(u) => as_user(u, PY),
            None => Command::new(PY),
        };
        let input: String = ops.iter().map(|op| op.join("\t") + "\n").collect();
        let mut child = c
            .arg(&script)
            .arg(self.local())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    }
}

fn ops(text: &str, user: &str, gid: u32) -> Vec<Vec<String>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| l.replace("USER", user).replace("GID", &gid.to_string()))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// The tree both sides start with (as root).
const BUILD: &str = "
    mkdir /t
    mkdir /t/pub
    chmod 1777 /t/pub
    touch /t/pub/rootfile
    chmod 666 /t/pub/rootfile
    mkdir /t/nob
    touch /t/nob/f
    chown 65534:65534 /t/nob/f
    chown 65534:65534 /t/nob
    mkdir /t/grp
    touch /t/grp/g
    setfattr user.x gv /t/grp/g
    chmod 640 /t/grp/g
    chown 0:103 /t/grp/g
    chmod 770 /t/grp
    chown 0:103 /t/grp
    mkdir /t/priv
    touch /t/priv/s
    chmod 700 /t/priv
    mkdir /t/ro
    touch /t/ro/r
    chmod 444 /t/ro/r
    chmod 555 /t/ro
    mkdir /t/cl
    touch /t/cl/c
    chmod 600 /t/cl/c
    chown 1000:1000 /t/cl/c
    chown 1000:1000 /t/cl
    mkdir /t/wx
    chmod 733 /t/wx
";

/// What each user tries, in order (`USER` is the user's name).
const MATRIX: &str = "
    stat /t/priv/s
    stat /t/grp/g
    stat /t/nob/f
    ls /t
    ls /t/priv
    ls /t/grp
    ls /t/wx
    ls /t/cl
    getfattr user.x /t/grp/g
    touch /t/pub/USER-f
    touch /t/ro/USER-f
    touch /t/grp/USER-f
    touch /t/wx/USER-f
    touch /t/priv/USER-f
    mkdir /t/pub/USER-d
    mkdir /t/nob/USER-d
    mkdir /t/cl/USER-d
    stat /t/pub/USER-f
    chmod 600 /t/pub/USER-f
    chmod 644 /t/nob/f
    chmod 600 /t/cl/c
    chmod 777 /t/pub/rootfile
    chown USER /t/pub/USER-f
    chown 0 /t/pub/USER-f
    chown :103 /t/pub/USER-f
    chown :GID /t/pub/USER-d
    chown 65534 /t/cl/c
    setfattr user.a va /t/pub/USER-f
    getfattr user.a /t/pub/USER-f
    setfattr user.b vb /t/nob/f
    setfattr user.c vc /t/grp/g
    setfattr trusted.t vt /t/pub/USER-f
    getfattr user.none /t/pub/USER-f
    mv /t/pub/USER-f /t/pub/USER-g
    mv /t/pub/rootfile /t/pub/USER-r
    mv /t/cl/c /t/cl/c2
    mv /t/pub/USER-g /t/ro/USER-g
    rm /t/pub/rootfile
    rm /t/nob/f
    rm /t/grp/g
    touch /t/nob/f
    rm /t/pub/USER-g
    rmdir /t/pub/USER-d
    mkdir /t/pub/USER-d
";

#[test]
fn local_users_get_what_ext4_gives_them() {
    if Command::new("setpriv").arg("--version").output().is_err() || !Path::new(PY).exists() {
        eprintln!("SKIPPED: needs setpriv and {PY}");
        return;
    }
    let users = users();
    if users.len() < 2 {
        eprintln!("SKIPPED: needs at least two of the users nobody, cloudsdk, postgres, etcd");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Every user reaches the socket (and the data directory, whose secret
    // stays root's: mode 0600).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("s.sock");
    let data = dir.path().join("data");
    let (server, addr) = spawn_server_with(
        &data,
        "127.0.0.1:0",
        &[
            "--journal-sync",
            "nosync",
            "--socket",
            socket.to_str().unwrap(),
        ],
        Stdio::inherit(),
    );
    let w = World {
        _server: KillOnDrop(server),
        addr,
        dir,
        socket,
    };
    std::fs::create_dir(w.local()).unwrap();
    std::fs::set_permissions(w.local(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let build = ops(BUILD, "root", 0);
    let (ours, theirs) = (w.sextant_ops(None, &build), w.local_ops(None, &build));
    assert!(ours.iter().all(|r| r == "OK"), "building: {ours:?}");
    assert!(
        theirs.iter().all(|r| r == "OK"),
        "building locally: {theirs:?}"
    );

    for user in &users {
        let m = ops(MATRIX, user.name, user.gid);
        let (ours, theirs) = (w.sextant_ops(Some(*user), &m), w.local_ops(Some(*user), &m));
        let diffs: Vec<String> = m
            .iter()
            .zip(ours.iter().zip(&theirs))
            .filter(|(_, (o, t))| o != t)
            .map(|(op, (o, t))| format!("{}: sextant {o}, ext4 {t}", op.join(" ")))
            .collect();
        assert!(
            diffs.is_empty(),
            "as {}: {} of {} operations differ:\n{}",
            user.name,
            diffs.len(),
            m.len(),
            diffs.join("\n")
        );
        // The matrix must not be trivial: some refused, some allowed.
        assert!(ours.iter().any(|r| r == "EACCES") && ours.iter().any(|r| r.starts_with("OK")));

        // find, stats and du, against GNU find as the same user.
        let find = w.sextant(Some(*user), &["find".into(), "/t".into()]);
        let gnu = as_user(*user, "find")
            .arg("t")
            .current_dir(w.local())
            .output()
            .unwrap();
        let lines = |o: &Output, strip: &str| {
            let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.strip_prefix(strip).unwrap_or(l).to_string())
                .collect();
            v.sort();
            v
        };
        let complaints = |o: &Output| {
            let mut v: Vec<String> = String::from_utf8_lossy(&o.stderr)
                .lines()
                .filter_map(|l| l.split_once("find: ").map(|(_, m)| m.to_string()))
                .map(|m| m.replace(['‘', '’'], "'").replace("'/t", "'t"))
                .collect();
            v.sort();
            v
        };
        let found = lines(&find, "/");
        assert_eq!(found, lines(&gnu, ""), "find as {}", user.name);
        assert_eq!(
            complaints(&find),
            complaints(&gnu),
            "find's errors as {}",
            user.name
        );
        assert_eq!(
            find.status.code(),
            gnu.status.code(),
            "find's exit as {}",
            user.name
        );

        let files = |o: &Output| lines(o, "").len();
        let gnu_files = as_user(*user, "find")
            .args(["t", "-type", "f"])
            .current_dir(w.local())
            .output()
            .unwrap();
        let stats = w.sextant(
            Some(*user),
            &["--json", "stats", "/t", "-type", "f"].map(String::from),
        );
        let stats_text = String::from_utf8_lossy(&stats.stdout);
        let count = format!("\"count\":{}", files(&gnu_files));
        assert!(
            stats_text.contains(&count),
            "stats as {}: want {count} in {stats_text} ({})",
            user.name,
            String::from_utf8_lossy(&stats.stderr)
        );
        let du = w.sextant(Some(*user), &["--json", "du", "/t"].map(String::from));
        let du_text = String::from_utf8_lossy(&du.stdout);
        let entries = format!("\"entries\":{}", found.len());
        assert!(
            du_text.contains(&entries),
            "du as {}: want {entries} in {du_text} ({})",
            user.name,
            String::from_utf8_lossy(&du.stderr)
        );
        // status too, as the user.
        let status = w.sextant(Some(*user), &["status".into()]);
        assert!(
            status.status.success(),
            "status as {}: {status:?}",
            user.name
        );
    }

    // The trees are the same: names, modes, owners — what a user made is
    // theirs, not root's or the server's.
    let fmt = ["-printf", "%p %m %U %G\\n"];
    let args: Vec<String> = ["find", "/t"]
        .iter()
        .chain(&fmt)
        .map(|s| s.to_string())
        .collect();
    let ours = w.sextant(None, &args);
    let theirs = Command::new("find")
        .arg("t")
        .args(fmt)
        .current_dir(w.local())
        .output()
        .unwrap();
    let sorted = |o: &Output, strip: &str| {
        let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.strip_prefix(strip).unwrap_or(l).to_string())
            .collect();
        v.sort();
        v
    };
    let (a, b) = (sorted(&ours, "/"), sorted(&theirs, ""));
    assert!(a.len() > 20, "{a:?}");
    assert_eq!(a, b, "the trees differ");
    for user in &users {
        assert!(
            a.iter()
                .any(|l| l.starts_with(&format!("t/pub/{}-d ", user.name))
                    && l.ends_with(&format!(" {} {}", user.uid, user.gid))),
            "{}'s directory is theirs: {a:?}",
            user.name
        );
        // bench, too (over the client library, through the socket).
        let bench = w.sextant(
            Some(*user),
            &["bench", "-n", "1", "-i", "5", "--under", "/t/pub", "-q"].map(String::from),
        );
        assert!(bench.status.success(), "bench as {}: {bench:?}", user.name);
    }
}

/// The rpcs of the schema (`rpc NAME(`), so that a new one fails
/// [`forged_claims_child`] until it has a check there.
fn schema_rpcs() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto/proto/sextant.proto");
    let text = std::fs::read_to_string(path).unwrap();
    let rpcs: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim().to_string())
        .collect();
    assert!(rpcs.len() >= 5, "{rpcs:?}");
    rpcs
}

/// The environment variable that makes [`forged_claims_child`] run: the
/// socket's path.
const FORGE_SOCKET: &str = "SEXTANT_TEST_FORGE_SOCKET";
/// ... and the server's TCP address (where a ticket is proved).
const FORGE_TCP: &str = "SEXTANT_TEST_FORGE_TCP";

/// The half of `a_forged_claim_on_the_socket_is_ignored_logged_and_counted`
/// that runs as `nobody` (the test binary re-executed through setpriv):
/// on every rpc of the schema, claims to be root, and checks it was served
/// as itself. A no-op when run as a test of its own.
#[test]
fn forged_claims_child() {
    let Ok(socket) = std::env::var(FORGE_SOCKET) else {
        return;
    };
    use sextant_client::{Client, Error, Options};
    use sextant_engine::search::Expr;
    use sextant_proto::pb::{self, request::Op};
    use sextant_proto::search::{SearchScope, SearchSpec};
    use sextant_types::{Credentials, FsError, SetAttr};
    assert_ne!(nix::unistd::getuid().as_raw(), 0, "runs as a user");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let root = Credentials::root();
        let addr = format!("unix:{socket}");
        let c = Client::connect(&addr, "", Options::default())
            .await
            .unwrap();
        // A single server: nothing to route, so no identity ticket.
        assert!(!c.has_ticket(), "a ticket from a single server");
        let pub_ = c.resolve(&root, b"/t/pub", true).await.unwrap().soid;
        let priv_ = c.resolve(&root, b"/t/priv", true).await.unwrap().soid;
        // A raw gRPC client on the socket, for the rpcs the library does
        // not use as such.
        let channel = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_| {
                let path = socket.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            }))
            .await
            .unwrap();
        let mut raw = pb::sextant_client::SextantClient::new(channel);
        let forged = |op: Op| pb::Request {
            id: 1,
            cred: Some(sextant_proto::cred_to_pb(&root)),
            op: Some(op),
            ..Default::default()
        };
        let create = |parent, name: &str| {
            Op::Create(pb::CreateRequest {
                parent: Some(sextant_proto::soid_to_pb(parent)),
                name: name.as_bytes().to_vec(),
                perm: 0o644,
                exclusive: true,
            })
        };
        for rpc in schema_rpcs() {
            match rpc.as_str() {
                "Session" => {
                    let a = c.create(&root, pub_, b"session-file", 0o644, true).await;
                    let a = a.unwrap();
                    assert_eq!((a.uid, a.gid), (65534, 65534), "created as nobody");
                    let e = c.create(&root, priv_, b"x", 0o644, true).await.unwrap_err();
                    assert_eq!(e.fs(), Some(FsError::Access));
                    let chown = SetAttr {
                        uid: Some(0),
                        ..Default::default()
                    };
                    let e = c.setattr(&root, a.soid, &chown).await.unwrap_err();
                    assert_eq!(e.fs(), Some(FsError::Perm));
                }
                "Call" => {
                    let r = raw.call(forged(create(pub_, "call-file"))).await;
                    let r = r.unwrap().into_inner();
                    match r.result {
                        Some(pb::response::Result::Attr(a)) => {
                            assert_eq!((a.uid, a.gid), (65534, 65534))
                        }
                        other => panic!("call: {other:?} {:?}", r.error),
                    }
                    let r = raw.call(forged(create(priv_, "y"))).await;
                    assert_eq!(r.unwrap().into_inner().error.map(|e| e.errno), Some(13));
                }
                "Search" => {
                    let spec = SearchSpec::new(SearchScope::Path(b"/t".to_vec()), Expr::True);
                    let mut s = c.search(&root, &spec).await.unwrap();
                    let mut paths = Vec::new();
                    while let Ok(Some(hits)) = s.next_batch().await {
                        paths.extend(hits.into_iter().map(|h| h.path));
                    }
                    assert!(paths.iter().any(|p| p.ends_with(b"session-file")));
                    assert!(
                        !paths.iter().any(|p| p.ends_with(b"hidden")),
                        "found what only root may see: {paths:?}"
                    );
                }
                "Recover" => {
                    // No identity in it (backups are authenticated by the
                    // server's key); a journaling server needs none.
                    let r = raw
                        .recover(pb::RecoverRequest {
                            client_id: 1,
                            incarnation: 1,
                            ..Default::default()
                        })
                        .await;
                    assert_eq!(
                        r.unwrap().into_inner().outcome,
                        pb::RecoverOutcome::RecoverNotNeeded as i32
                    );
                }
                "Map" => {
                    // The route map names tables and servers, never a name
                    // of the namespace: any local user may read it.
                    let map = raw
                        .map(pb::MapRequest::default())
                        .await
                        .unwrap()
                        .into_inner();
                    assert!(!map.routes.is_empty(), "an empty route map: {map:?}");
                }
                "DirChain" => {
                    // Directories raw (names and modes whoever may see
                    // them), for another server's search: the trusted only.
                    let r = raw
                        .dir_chain(pb::DirChainRequest {
                            dir: Some(sextant_proto::soid_to_pb(sextant_types::Soid::ROOT)),
                            more: vec![sextant_proto::soid_to_pb(sextant_types::Soid::ROOT)],
                            ..Default::default()
                        })
                        .await;
                    assert_eq!(
                        r.map(|_| ()).map_err(|s| s.code()),
                        Err(tonic::Code::PermissionDenied),
                        "a local user may not read directories raw"
                    );
                }
                "RevokeDirs" => {
                    // Dropping the leases a server holds on others'
                    // directories: the trusted only.
                    let r = raw.revoke_dirs(pb::RevokeDirsRequest::default()).await;
                    assert_eq!(
                        r.map(|_| ()).map_err(|s| s.code()),
                        Err(tonic::Code::PermissionDenied),
                        "a local user may not revoke directory leases"
                    );
                }
                "Keys" => {
                    // Client keys: the cluster secret only.
                    let r = raw
                        .keys(pb::KeysRequest {
                            op: Some(pb::keys_request::Op::List(pb::Empty {})),
                        })
                        .await;
                    assert_eq!(
                        r.map(|_| ()).map_err(|s| s.code()),
                        Err(tonic::Code::PermissionDenied),
                        "a local user may not manage client keys"
                    );
                }
                "Ticket" => {
                    // An identity ticket: issued on the socket to a local
                    // user; proved over TCP it runs as that user whatever
                    // the request claims; never issued over TCP.
                    use sextant_proto::keyauth;
                    let t = raw.ticket(pb::TicketRequest {}).await.unwrap().into_inner();
                    assert!(t.name.starts_with("t1.") && t.key.len() == 64, "{t:?}");
                    let key = keyauth::ClientKey {
                        name: t.name.clone(),
                        key: keyauth::unhex(&t.key).unwrap(),
                    };
                    let tcp = std::env::var(FORGE_TCP).unwrap();
                    let tcp = tcp.trim_start_matches("http://").to_string();
                    let ch = tonic::transport::Endpoint::from_shared(format!("http://{tcp}"))
                        .unwrap()
                        .connect()
                        .await
                        .unwrap();
                    let mut over_tcp = pb::sextant_client::SextantClient::new(ch);
                    let prove = |method: &str, nonce: &str| {
                        let time = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .unwrap()
                            .as_secs() as i64;
                        let p = key.prove_for(
                            &format!("/sextant.v1.Sextant/{method}"),
                            &tcp,
                            time,
                            nonce,
                        );
                        let mut m = tonic::metadata::MetadataMap::new();
                        m.insert(keyauth::KEY_METADATA, p.name.parse().unwrap());
                        m.insert(keyauth::TIME_METADATA, p.time.to_string().parse().unwrap());
                        m.insert(keyauth::NONCE_METADATA, p.nonce.parse().unwrap());
                        m.insert(keyauth::MAC_METADATA, p.mac.parse().unwrap());
                        m.insert(keyauth::AUDIENCE_METADATA, p.audience.parse().unwrap());
                        m
                    };
                    let mut req = tonic::Request::new(forged(create(pub_, "ticket-file")));
                    *req.metadata_mut() = prove("Call", "0123456789abcdef-call");
                    let r = over_tcp.call(req).await.unwrap().into_inner();
                    match r.result {
                        Some(pb::response::Result::Attr(a)) => {
                            assert_eq!((a.uid, a.gid), (65534, 65534), "made as the ticket's user")
                        }
                        other => panic!("ticket call: {other:?} {:?}", r.error),
                    }
                    let mut req = tonic::Request::new(pb::TicketRequest {});
                    *req.metadata_mut() = prove("Ticket", "0123456789abcdef-tick");
                    let r = over_tcp.ticket(req).await;
                    assert_eq!(
                        r.map(|_| ()).map_err(|s| s.code()),
                        Err(tonic::Code::PermissionDenied),
                        "a ticket's holder over TCP gets no ticket"
                    );
                }
                "Watch" => match c.watch().await {
                    Err(Error::Fs(FsError::Perm)) => {}
                    Err(e) => panic!("watch: {e}"),
                    Ok(_) => panic!("a local user may not watch every change"),
                },
                other => panic!("rpc {other} of the schema has no check here"),
            }
            println!("checked {rpc}");
        }
    });
}

/// A request over the socket from a non-root user that claims root (or
/// anyone else) is served as the kernel's identity — on every rpc of the
/// schema — and the refusal is logged (target `audit`) and counted
/// (/metrics). A root peer without the secret keeps root's powers; a
/// wrong secret is refused.
#[test]
fn a_forged_claim_on_the_socket_is_ignored_logged_and_counted() {
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs setpriv");
        return;
    }
    use sextant_client::{Client, Error, Options};
    use sextant_types::Credentials;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("s.sock");
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let (server, addr) = common::spawn_server_env(
        &data,
        "127.0.0.1:0",
        &[
            "--journal-sync",
            "nosync",
            "--socket",
            socket.to_str().unwrap(),
        ],
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[
            ("SEXTANT_METRICS", metrics.as_str()),
            ("SEXTANT_LOG_FORMAT", "json"),
        ],
    );
    let w = World {
        _server: KillOnDrop(server),
        addr,
        dir,
        socket: socket.clone(),
    };
    let build = ops(
        "mkdir /t\nmkdir /t/pub\nchmod 777 /t/pub\nmkdir /t/priv\ntouch /t/priv/hidden\nchmod 700 /t/priv",
        "root",
        0,
    );
    assert!(w.sextant_ops(None, &build).iter().all(|r| r == "OK"));

    let nobody = User {
        name: "nobody",
        uid: 65534,
        gid: 65534,
    };
    let child = as_user(nobody, std::env::current_exe().unwrap().to_str().unwrap())
        .args([
            "--exact",
            "forged_claims_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(FORGE_SOCKET, &socket)
        .env(FORGE_TCP, &w.addr)
        .current_dir("/")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "the child failed: {said}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    for rpc in schema_rpcs() {
        assert!(
            said.contains(&format!("checked {rpc}")),
            "{rpc} unchecked: {said}"
        );
    }
    // What the server holds, seen by root: the files are nobody's, and
    // nothing was made where only root may write.
    let stat = |p: &str| w.sextant(None, &["--json".into(), "stat".into(), p.into()]);
    for f in ["/t/pub/session-file", "/t/pub/call-file"] {
        let out = String::from_utf8_lossy(&stat(f).stdout).into_owned();
        assert!(out.contains("\"uid\":65534"), "{f}: {out}");
    }
    for f in ["/t/priv/x", "/t/priv/y"] {
        assert!(!stat(f).status.success(), "{f} was made");
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let unix = format!("unix:{}", socket.display());
        // Root on the socket, without the secret: root's powers.
        let c = Client::connect(&unix, "", Options::default())
            .await
            .unwrap();
        let root = Credentials::root();
        let priv_ = c.resolve(&root, b"/t/priv", true).await.unwrap().soid;
        let a = c
            .create(&root, priv_, b"by-root", 0o600, true)
            .await
            .unwrap();
        assert_eq!(a.uid, 0);
        // A wrong secret: refused, on the socket as over TCP.
        let wrong = Client::connect(&unix, "00", Options::default()).await;
        assert!(matches!(wrong, Err(Error::Auth)));
        let wrong = Client::connect(&w.addr, "00", Options::default()).await;
        assert!(matches!(wrong, Err(Error::Auth)));
        // No secret over TCP: refused.
        let none = Client::connect(&w.addr, "", Options::default()).await;
        assert!(matches!(none, Err(Error::Auth)));
    });

    // One audit line per refused claim, with who and what was claimed.
    let text = std::fs::read_to_string(&log).unwrap();
    let audit: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"target\":\"audit\""))
        .collect();
    assert!(
        audit.iter().any(|l| l.contains("refused claim")
            && l.contains("\"uid\":65534")
            && l.contains("\"claimed_uid\":0")),
        "no audit line for the forged claims:\n{text}"
    );
    assert!(
        audit.iter().any(|l| l.contains("wrong cluster secret")),
        "no audit line for the wrong secret:\n{text}"
    );
    // And counters.
    let body = scrape(metrics_port);
    let value = |prefix: &str, labels: &[&str]| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(prefix) && labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        value("sextant_auth_refused_total", &["reason=\"claim\""]) >= 5.0,
        "{body}"
    );
    assert!(
        value("sextant_auth_refused_total", &["reason=\"secret\""]) >= 3.0,
        "{body}"
    );
    assert!(
        value("sextant_auth_refused_total", &["reason=\"watch\""]) >= 1.0,
        "{body}"
    );
    let kernel = ["transport=\"unix\"", "caller=\"kernel\""];
    assert!(value("sextant_auth_calls_total", &kernel) >= 3.0, "{body}");
    let root = ["transport=\"unix\"", "caller=\"root\""];
    assert!(value("sextant_auth_calls_total", &root) >= 1.0, "{body}");
    let tcp = ["transport=\"tcp\"", "caller=\"secret\""];
    assert!(value("sextant_auth_calls_total", &tcp) >= 1.0, "{body}");
}

/// GET /metrics (retried for a few seconds while the exporter starts).
fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut body = String::new();
            if s.read_to_string(&mut body).is_ok() && body.contains("sextant_") {
                return body;
            }
        }
        assert!(std::time::Instant::now() < deadline, "no metrics");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
