//! `sextant find` against GNU find, and search on the wire.
//!
//! - `same_lines_as_gnu_find_on_the_mount`: the real server, a real tree
//!   imported with `sextant import` (a copy of /usr/include/linux) plus
//!   files made through the mount (modes, owners, times, sizes, xattrs,
//!   hard links, symlinks, a fifo, unreadable directories), mounted with
//!   `sextant mount`; then GNU `find ARGS` and `sextant find ARGS` on the
//!   mount for a suite of expressions must print the same set of lines
//!   (sorted; `-ls` with whitespace collapsed), and exit the same way —
//!   also as `nobody`, through setpriv.
//! - `gnu_find_agrees_on_inodes_unsearchable_directories_and_edge_cases`:
//!   the same comparison on a small tree made through the mount: inode
//!   numbers (`-inum`, `%i`, `-ls`: the mount's), directories `nobody`
//!   may read but not search, symlink loops under `-xtype`, fractional
//!   seconds, `-regex` on names that are not UTF-8, commands that cannot
//!   start.
//! - `a_search_sees_the_mutation_acknowledged_before_it`: over the wire.
//! - `malformed_searches_get_clear_errors_and_the_server_keeps_serving`:
//!   raw gRPC.
//!
//! The mount test is skipped (with a message) without /dev/fuse and
//! fusermount3.

use sextant_client::{Client, Error, Options};
use sextant_engine::search::{Expr, GroupBy, GroupKey, Pred};
use sextant_proto::pb;
use sextant_proto::search::{spec_to_pb, SearchScope, SearchSpec};
use sextant_proto::SECRET_METADATA;
use sextant_types::{Credentials, FileType, FsError, Soid};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

mod common;
use common::{eventually, fuse_available, sh, spawn_server, KillOnDrop, Mounted, BIN};

/// How an expression's output is compared.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Lines,
    /// `-print0`: NUL-separated records.
    Nul,
    /// `-ls`: whitespace collapsed (GNU find widens its columns as it
    /// goes).
    Ls,
    /// Words, sorted: `-exec ... +` batches hold the same paths in another
    /// order (the server's, not the traversal's).
    Words,
}

fn records(out: &[u8], cmp: Cmp) -> Vec<String> {
    let text = String::from_utf8_lossy(out);
    let mut v: Vec<String> = match cmp {
        Cmp::Nul => text
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        Cmp::Lines => text.lines().map(String::from).collect(),
        Cmp::Words => text.split_whitespace().map(String::from).collect(),
        Cmp::Ls => text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect(),
    };
    v.sort();
    v
}

/// Runs GNU find and sextant find with the same arguments (optionally as
/// nobody) and returns a description of any difference.
fn compare(m: &Mounted, args: &[&str], cmp: Cmp, nobody: bool) -> Option<String> {
    compare_in(m, args, cmp, nobody, &[], false)
}

/// What a find said went wrong: each message after `find: `, quotes
/// made plain, sorted.
fn complaints(stderr: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(stderr)
        .lines()
        .filter_map(|l| {
            l.split_once("find: ")
                .map(|(_, m)| m.replace(['‘', '’'], "'"))
        })
        .collect();
    v.sort();
    v
}

/// [`compare`] with more environment variables for both; `errors`: the
/// messages must match too (the same entries reported for the same
/// reasons).
fn compare_in(
    m: &Mounted,
    args: &[&str],
    cmp: Cmp,
    nobody: bool,
    env: &[(&str, &str)],
    errors: bool,
) -> Option<String> {
    let run = |prog: &str, pre: &[&str]| -> Output {
        let mut c = if nobody {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                prog,
            ]);
            c
        } else {
            Command::new(prog)
        };
        c.args(pre)
            .args(args)
            .current_dir(m.dir.path())
            .env("TZ", "UTC")
            .env("SEXTANT_SECRET", m.secret())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let gnu = run("find", &[]);
    let ours = run(BIN, &["find"]);
    let (g, o) = (records(&gnu.stdout, cmp), records(&ours.stdout, cmp));
    let mut problems = Vec::new();
    let (ge, oe) = (complaints(&gnu.stderr), complaints(&ours.stderr));
    if errors && ge != oe {
        problems.push(format!("errors: {ge:?} vs {oe:?}"));
    }
    if g != o {
        let only_g: Vec<_> = g.iter().filter(|l| !o.contains(l)).take(5).collect();
        let only_o: Vec<_> = o.iter().filter(|l| !g.contains(l)).take(5).collect();
        problems.push(format!(
            "{} vs {} lines; only GNU: {only_g:?}; only sextant: {only_o:?}",
            g.len(),
            o.len()
        ));
    }
    if gnu.status.code() != ours.status.code() {
        problems.push(format!(
            "exit {:?} vs {:?} ({})",
            gnu.status.code(),
            ours.status.code(),
            String::from_utf8_lossy(&ours.stderr).trim()
        ));
    }
    if ours.status.success() && !ours.stderr.is_empty() && gnu.stderr.is_empty() {
        problems.push(format!(
            "stderr: {}",
            String::from_utf8_lossy(&ours.stderr).trim()
        ));
    }
    if g.is_empty() && !args.contains(&"-false") && !nobody {
        problems.push("GNU find printed nothing: a useless expression".into());
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}find {}: {}",
            if nobody { "(nobody) " } else { "" },
            args.join(" "),
            problems.join("; ")
        )
    })
}

/// The tree under the mount: `imp/` imported from the system, `x/` made
/// through the mount.
fn build_tree(m: &Mounted) {
    let src = ["/usr/include/linux", "/usr/share/doc/fuse3"]
        .into_iter()
        .find(|p| Path::new(p).is_dir());
    let base = m.dir.path();
    match src {
        Some(s) => sh(base, &format!("cp -a {s} src")),
        None => sh(base, "mkdir -p src/netfilter && seq 1 3000 > src/if_big.h && seq 1 9 > src/netfilter/xt.h && : > src/empty.h"),
    };
    let out = Command::new(BIN)
        .args(["--server", &m.addr, "--secret-file"])
        .arg(m.data().join("secret"))
        .arg("import")
        .arg(base.join("src"))
        .arg("/imp")
        .output()
        .unwrap();
    assert!(out.status.success(), "import: {out:?}");
    sh(
        &m.mnt,
        "mkdir -p x/d1/d2/d3/d4 x/emptydir x/secret x/xonly x/stick \
         && echo hi > x/f1 && ln x/f1 x/d1/hard && ln -s ../f1 x/d1/sym && ln -s /nowhere x/dangling \
         && : > x/empty && : > 'x/with space' && chmod 4755 x/f1 && chmod 640 x/empty \
         && chmod 1777 x/stick && chmod 2750 x/d1/d2 \
         && head -c 5000 /dev/zero > x/d1/d2/b5k && head -c 600 /dev/zero > x/d1/half \
         && head -c 70000 /dev/zero > x/d1/d2/d3/big \
         && chown 65534:65534 x/d1/d2/b5k && chown 1234:4321 x/d1/half && chgrp 65534 x/d1/d2/d3 \
         && touch -d '2000-01-01 00:00:00' x/ref \
         && touch -d '3 days ago' x/d1/d2/b5k && touch -d '2 hours ago' x/empty \
         && touch -d '40 days ago' x/d1/d2/d3/big && touch -d '10 minutes ago' x/d1/half \
         && touch -a -d '5 days ago' x/d1/half \
         && mkfifo x/fifo && echo s > x/secret/inner && chmod 700 x/secret \
         && echo z > x/xonly/zz && chmod 711 x/xonly \
         && setfattr -n user.tag -v blue x/f1 && setfattr -n user.tag -v red x/empty \
         && setfattr -n user.other -v 1 x/d1 && ln -s /etc/passwd x/abs",
    );
}

/// GNU find and `sextant find` on the mount `m` of [`build_tree`]'s tree,
/// for the whole suite of expressions (and some as nobody): what differs.
fn compare_suite(m: &Mounted) -> Vec<String> {
    let abs_x = format!("{}/x", m.mnt.display());
    // (arguments, comparison)
    let suite: Vec<(Vec<&str>, Cmp)> = vec![
        (vec!["mnt"], Cmp::Lines),
        (vec!["mnt/imp", "-name", "*.h"], Cmp::Lines),
        (vec!["mnt", "-iname", "IF_*.H"], Cmp::Lines),
        (vec!["mnt", "-name", "[a-c]*[0-9].h"], Cmp::Lines),
        (vec!["mnt", "-type", "d"], Cmp::Lines),
        (vec!["mnt", "-type", "l,p"], Cmp::Lines),
        (vec!["mnt", "-type", "f", "-size", "+10k"], Cmp::Lines),
        (vec!["mnt", "-size", "-1k"], Cmp::Lines),
        (vec!["mnt/x", "-size", "5000c"], Cmp::Lines),
        (vec!["mnt", "-size", "2"], Cmp::Lines),
        (
            vec!["mnt", "-size", "+3w", "-size", "-2k", "-type", "f"],
            Cmp::Lines,
        ),
        (vec!["mnt", "-size", "+60k", "-size", "-2M"], Cmp::Lines),
        (vec!["mnt", "-empty"], Cmp::Lines),
        (vec!["mnt", "-links", "+1", "-type", "f"], Cmp::Lines),
        (vec!["mnt", "-links", "2", "-type", "d"], Cmp::Lines),
        (vec!["mnt", "-perm", "-4000"], Cmp::Lines),
        (vec!["mnt", "-perm", "/o+w"], Cmp::Lines),
        (vec!["mnt", "-perm", "640"], Cmp::Lines),
        (
            vec!["mnt", "-perm", "-u=rwx,g=rx", "-type", "d"],
            Cmp::Lines,
        ),
        (vec!["mnt", "-perm", "/6000"], Cmp::Lines),
        (vec!["mnt", "-perm", "-a+X"], Cmp::Lines),
        (vec!["mnt", "-user", "nobody"], Cmp::Lines),
        (
            vec!["mnt", "-group", "nogroup", "-o", "-uid", "1234"],
            Cmp::Lines,
        ),
        (vec!["mnt", "-uid", "+0"], Cmp::Lines),
        (vec!["mnt", "-gid", "-1", "-name", "d*"], Cmp::Lines),
        (vec!["mnt/x", "-mtime", "+2"], Cmp::Lines),
        (vec!["mnt/x", "-mtime", "-1"], Cmp::Lines),
        (vec!["mnt/x", "-mtime", "3"], Cmp::Lines),
        (vec!["mnt/x", "-mmin", "-30"], Cmp::Lines),
        (vec!["mnt/x", "-mmin", "+30", "-type", "f"], Cmp::Lines),
        (vec!["mnt/x", "-atime", "+4"], Cmp::Lines),
        (vec!["mnt/x", "-ctime", "-1", "-amin", "+60"], Cmp::Lines),
        (
            vec!["mnt", "-newer", "mnt/x/ref", "-type", "f", "-name", "*x*"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "!", "-newer", "mnt/x/d1/half"], Cmp::Lines),
        (
            vec!["mnt/x", "-anewer", "mnt/x/ref", "-cnewer", "mnt/x/ref"],
            Cmp::Lines,
        ),
        (vec!["mnt", "-samefile", "mnt/x/f1"], Cmp::Lines),
        (
            vec![
                "mnt/x",
                "-newerma",
                "mnt/x/d1/half",
                "!",
                "-newermm",
                "mnt/x/d1/half",
            ],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt",
                "-path",
                "*/netfilter*",
                "-prune",
                "-o",
                "-type",
                "f",
                "-name",
                "x*",
                "-print",
            ],
            Cmp::Lines,
        ),
        (
            vec!["mnt", "-name", "d1", "-prune", "-o", "-print"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-type", "d", "-prune"], Cmp::Lines),
        (
            vec!["mnt/x", "-depth", "-name", "d2", "-prune", "-o", "-print"],
            Cmp::Lines,
        ),
        (vec!["mnt", "-maxdepth", "2"], Cmp::Lines),
        (
            vec!["mnt", "-mindepth", "3", "-maxdepth", "4", "-type", "d"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-maxdepth", "0"], Cmp::Lines),
        (
            vec![
                "mnt", "(", "-name", "f*", "-o", "-name", "e*", ")", "!", "-type", "d",
            ],
            Cmp::Lines,
        ),
        (
            vec!["mnt", "-not", "-name", "*.h", "-not", "-type", "d"],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x", "-name", "*", "-a", "-type", "f", "-o", "-type", "l",
            ],
            Cmp::Lines,
        ),
        (
            vec!["mnt", "-wholename", "*x/d1*", "-o", "-ipath", "*EMPTY*"],
            Cmp::Lines,
        ),
        (vec!["mnt/x/d1/..", "-name", "d*"], Cmp::Lines),
        (vec![abs_x.as_str(), "-type", "f"], Cmp::Lines),
        (
            vec!["mnt", "-false", "-o", "-true", "-name", "*x*.h"],
            Cmp::Lines,
        ),
        (
            vec!["mnt", "-printf", "%p %s %m %u %g %U %G %n %y %d\\n"],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x/", "-printf", "%h|%f|%P|%H|%k|%b|%M|%l|%Y\\n"],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x",
                "-printf",
                "%T@ %A@ %C@ %t|%a|%TY-%Tm-%Td %TT|%T+|%-12f|%5s|%.3f\\t%%\\n",
            ],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-print0"], Cmp::Nul),
        (vec!["mnt", "-ls"], Cmp::Ls),
        (
            vec![
                "mnt/x", "-name", "f1", "-printf", "A %p\\n", "-o", "-printf", "B %p\\n",
            ],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x",
                "-name",
                "*1",
                "-printf",
                "one %p\\n",
                ",",
                "-printf",
                "%f\\n",
            ],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x",
                "-empty",
                "-type",
                "d",
                "-o",
                "-size",
                "+1",
                "-printf",
                "big %p\\n",
            ],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x", "mnt/imp/netfilter", "-name", "*t*"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "mnt/nosuch", "-type", "f"], Cmp::Lines),
        (
            vec!["mnt/x", "-daystart", "-mtime", "-4", "!", "-mtime", "0"],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x", "-mtime", "-1", "-daystart", "-atime", "+2"],
            Cmp::Lines,
        ),
        (vec!["mnt", "-lname", "*f1"], Cmp::Lines),
        (vec!["mnt/x", "-xtype", "l"], Cmp::Lines),
        (
            vec!["mnt/x", "-fstype", "fuse.sextant", "-name", "f*"],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x", "-fstype", "fuse", "-o", "-name", "f1"],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x", "-maxdepth", "1", "-printf", "%F %p\\n"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-xtype", "f", "-type", "l"], Cmp::Lines),
        (vec!["mnt/x", "-xtype", "d,f", "-name", "*d*"], Cmp::Lines),
        (
            vec![
                "mnt",
                "-ilname",
                "/NOWHERE",
                "-o",
                "-lname",
                "../*",
                "-printf",
                "%p -> %l\\n",
            ],
            Cmp::Lines,
        ),
        (vec!["mnt", "-nouser"], Cmp::Lines),
        (vec!["mnt", "-nogroup", "-o", "-user", "nobody"], Cmp::Lines),
        (vec!["mnt/x", "-executable", "!", "-type", "d"], Cmp::Lines),
        (
            vec!["mnt/x", "-readable", "-writable", "-name", "*e*"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-newermt", "2000-01-02"], Cmp::Lines),
        (
            vec![
                "mnt/x",
                "!",
                "-newermt",
                "2000-01-01 00:00:00",
                "-type",
                "f",
            ],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x", "-type", "f", "!", "-newermt", "@946684801"],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x",
                "-newerat",
                "1999-12-31T23:00:00-01:00",
                "-newerct",
                "@0",
                "-type",
                "f",
            ],
            Cmp::Lines,
        ),
        (vec!["mnt", "-regex", r".*/if_[a-c].*\.h"], Cmp::Lines),
        (
            vec!["mnt", "-regex", r".*\(f1\|zz\|with space\)"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-iregex", r"MNT/X/D1.*"], Cmp::Lines),
        (
            vec![
                "mnt",
                "-regextype",
                "posix-extended",
                "-regex",
                r".*/(d[0-9]|[[:upper:]]+[^/]*)",
            ],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x",
                "-regextype",
                "posix-basic",
                "-regex",
                r"mnt/x/d1/d2\(/d3\)\{0,1\}",
            ],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-name", "f1", "-print", "-quit"], Cmp::Lines),
        (
            vec!["mnt/imp", "mnt/x", "-name", "zz", "-print", "-quit"],
            Cmp::Lines,
        ),
        (vec!["mnt/x", "-print", "-quit"], Cmp::Lines),
        (vec!["mnt/x", "-exec", "echo", "<{}>", ";"], Cmp::Lines),
        (
            vec!["mnt/x", "-type", "f", "-exec", "echo", "f:", "{}", "+"],
            Cmp::Words,
        ),
        (
            vec!["mnt/x", "-name", "*1*", "-execdir", "echo", "{}", ";"],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x", "-type", "l", "-execdir", "echo", "{}", "+"],
            Cmp::Words,
        ),
        (
            vec!["mnt/x", "-exec", "test", "-d", "{}", ";", "-print"],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x", "-name", "d2", "-prune", "-o", "-exec", "echo", "{}", ";",
            ],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x",
                "-exec",
                "test",
                "-s",
                "{}",
                ";",
                "-o",
                "-printf",
                "empty %p\\n",
            ],
            Cmp::Lines,
        ),
        (
            vec![
                "mnt/x",
                "-maxdepth",
                "1",
                "-exec",
                "sh",
                "-c",
                "exit 3",
                ";",
                "-o",
                "-print",
            ],
            Cmp::Lines,
        ),
        // A failed `+` run: exit status 1, every path printed.
        (
            vec![
                "mnt/x",
                "-maxdepth",
                "1",
                "-exec",
                "false",
                "{}",
                "+",
                "-print",
            ],
            Cmp::Lines,
        ),
    ];
    assert!(suite.len() >= 40);
    let started = Instant::now();
    let mut failures: Vec<String> = suite
        .iter()
        .filter_map(|(args, cmp)| compare(m, args, *cmp, false))
        .collect();

    // As nobody: unreadable directories are skipped the same way, with
    // the same exit status.
    let have_setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if have_setpriv {
        let as_nobody: Vec<Vec<&str>> = vec![
            vec!["mnt"],
            vec!["mnt/x", "-type", "f", "-perm", "/o+r"],
            vec!["mnt/x", "-empty"],
            vec!["mnt/x", "-maxdepth", "1"],
            vec!["mnt/x", "-name", "secret", "-prune", "-o", "-print"],
            vec!["mnt/x/secret"],
            vec!["mnt/x/xonly/zz"],
            vec!["mnt/x", "-readable"],
            vec!["mnt/x", "-writable"],
            vec!["mnt/x", "-executable"],
            vec!["mnt/x", "!", "-readable", "-prune", "-o", "-print"],
            vec!["mnt/x", "-exec", "test", "-r", "{}", ";", "-print"],
        ];
        failures.extend(
            as_nobody
                .iter()
                .filter_map(|args| compare(m, args, Cmp::Lines, true)),
        );
    } else {
        eprintln!("setpriv missing: the comparison as nobody is skipped");
    }
    eprintln!(
        "{} expressions compared in {:.1} s",
        suite.len(),
        started.elapsed().as_secs_f64()
    );
    failures
}

#[test]
fn same_lines_as_gnu_find_on_the_mount() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::start();
    build_tree(&m);
    let failures = compare_suite(&m);
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // -fprint and its kin: the same files, and the same stdout beside.
    for (args, cmp) in [
        (vec!["mnt/x", "-type", "f", "-fprint", "OUT"], Cmp::Lines),
        (vec!["mnt/x", "-fprint0", "OUT"], Cmp::Nul),
        (vec!["mnt/x", "-fprintf", "OUT", "%p %s %m\\n"], Cmp::Lines),
        (vec!["mnt/x", "-fls", "OUT"], Cmp::Ls),
        (
            vec!["mnt/x", "-name", "*1", "-fprint", "OUT", "-o", "-print"],
            Cmp::Lines,
        ),
        (
            vec!["mnt/x", "-name", "nothing", "-fprint", "OUT"],
            Cmp::Lines,
        ),
    ] {
        let mut outs = Vec::new();
        for (prog, pre, file) in [("find", None, "gnu.out"), (BIN, Some("find"), "ours.out")] {
            let path = m.dir.path().join(file);
            let _ = std::fs::remove_file(&path);
            let argv: Vec<String> = args
                .iter()
                .map(|a| match *a {
                    "OUT" => path.display().to_string(),
                    other => other.to_string(),
                })
                .collect();
            let out = Command::new(prog)
                .args(pre)
                .args(&argv)
                .current_dir(m.dir.path())
                .env("TZ", "UTC")
                .env("SEXTANT_SECRET", m.secret())
                .output()
                .unwrap();
            let written = std::fs::read(&path).expect("the file is made, even when empty");
            outs.push((
                records(&out.stdout, Cmp::Lines),
                records(&written, cmp),
                out.status.code(),
            ));
        }
        assert_eq!(outs[0], outs[1], "{args:?}");
    }

    // Extensions and errors GNU find has no counterpart for.
    let ours = |args: &[&str]| m.sextant(&[&["find"], args].concat());
    let out = ours(&["mnt", "-xattr", "user.tag"]);
    assert_eq!(
        records(&out.stdout, Cmp::Lines),
        ["mnt/x/d1/hard", "mnt/x/empty", "mnt/x/f1"]
    );
    let out = ours(&[
        "mnt",
        "-xattr",
        "user.tag=red",
        "-o",
        "-xattr",
        "user.other",
    ]);
    assert_eq!(
        records(&out.stdout, Cmp::Lines),
        ["mnt/x/d1", "mnt/x/empty"]
    );
    for (args, msg) in [
        (vec!["mnt", "-foo"], "unknown predicate '-foo'"),
        (
            vec!["mnt", "-exec", "rm", "{}", "{}", "+"],
            "only one instance of {}",
        ),
        (
            vec!["mnt", "-exec", "test", "-d", "{}", ";", "-prune"],
            "-prune whose outcome depends on the exit status",
        ),
        (
            vec!["mnt", "-fprint", "/nonexistent/f"],
            "'/nonexistent/f': No such file or directory",
        ),
        (
            vec!["mnt", "-regex", r"\(a\)\1"],
            "back-references (\\1) are not supported",
        ),
        (
            vec!["mnt", "-regextype", "perl"],
            "unknown regular expression type 'perl'",
        ),
        (vec!["mnt", "-size", "3q"], "invalid argument '3q' to -size"),
        (vec!["mnt", "(", "-name", "a"], "without a matching ')'"),
        (
            vec!["mnt", "-newer", "mnt/nope"],
            "'mnt/nope': No such file or directory",
        ),
    ] {
        let out = ours(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            err.starts_with("sextant find: ") && err.contains(msg),
            "{args:?}: {err}"
        );
    }
    // --json: one object per printed entry.
    let out = m.sextant(&["--json", "find", "mnt/x", "-name", "f1"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["path"].as_str(), v["size"].as_u64(), v["mode"].as_str()),
        (Some("mnt/x/f1"), Some(3), Some("4755"))
    );
    // stats = what find prints, grouped; for the whole namespace (the
    // mount root) root's totals come from the maintained summaries and
    // must still equal what find counts.
    for (scope, ty) in [("mnt", "f"), ("mnt", "d"), ("mnt/x", "f")] {
        let out = m.sextant(&["--json", "stats", "--by", "user", scope, "-type", ty]);
        assert!(out.status.success(), "{out:?}");
        let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = sh(m.dir.path(), &format!("find {scope} -type {ty} | wc -l"));
        let b = sh(
            m.dir.path(),
            &format!("find {scope} -type {ty} -printf '%s\\n' | awk '{{s+=$1}} END {{print s+0}}'"),
        );
        assert_eq!(
            w["total"]["count"].to_string(),
            n.trim(),
            "{scope} -type {ty}"
        );
        assert_eq!(
            w["total"]["size"].to_string(),
            b.trim(),
            "{scope} -type {ty}"
        );
    }
    let out = m.sextant(&["--json", "stats", "--by", "user", "mnt/x", "-type", "f"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nobody = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["uid"] == 65534)
        .unwrap();
    assert_eq!(
        (nobody["count"].as_u64(), nobody["size"].as_u64()),
        (Some(1), Some(5000))
    );
}

/// The same comparison with GNU find on a mount of a three-server cluster
/// (issue 20: "the tool-level suite also runs against a three-server
/// cluster with tables spread over all three"): `sextant cluster up
/// --servers 3` with small tables, so that the tree is spread over all
/// three servers (and the balancer keeps moving tables while the
/// expressions run), the mount through the first server. Every
/// expression, also as nobody, must print what GNU find prints.
#[test]
fn same_lines_as_gnu_find_on_a_three_server_cluster() {
    if !fuse_available() || Command::new("etcd").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs /dev/fuse, fusermount3 and etcd");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("small-tables.toml");
    std::fs::write(&config, "table_dir_limit = 8\ntable_inode_limit = 64\n").unwrap();
    let port = common::free_ports(3);
    let c_dir = dir.path().join("c").display().to_string();
    let up = Command::new(BIN)
        .args(["--json", "--data"])
        .arg(dir.path().join("c"))
        .args([
            "cluster",
            "up",
            "--servers",
            "3",
            "--journal-sync",
            "nosync",
        ])
        .args(["--base-port", &port.to_string(), "--server-config"])
        .arg(&config)
        .env_remove("SEXTANT_ETCD")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = up.id();
    /// Ctrl-C for `cluster up` (it stops etcd and the servers): before
    /// the mount's own cleanup, even when the test fails.
    struct Interrupt(u32);
    impl Drop for Interrupt {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-INT", &self.0.to_string()])
                .status();
            for _ in 0..200 {
                let state = std::fs::read_to_string(format!("/proc/{}/stat", self.0));
                if state.map_or(true, |s| s.contains(") Z ")) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
    let mut up = up;
    let stdout = up.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let first = lines.next().expect("a line from cluster up").unwrap();
    let started: serde_json::Value = serde_json::from_str(&first).expect(&first);
    let s1 = started["servers"][0]["data"].as_str().unwrap().to_string();
    // The mount's data directory is the first server's (its secret).
    std::os::unix::fs::symlink(&s1, dir.path().join("data")).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let m = Mounted {
        server: up,
        addr: format!("127.0.0.1:{port}"),
        dir,
        mnt,
    };
    let _stop = Interrupt(pid);
    m.mount();
    build_tree(&m);
    let tables_per_server = || -> Vec<u64> {
        let out = m.sextant(&["--json", "--data", &c_dir, "cluster", "status"]);
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        st["servers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| s["tables"].as_u64().unwrap_or(0))
                    .collect()
            })
            .unwrap_or_default()
    };
    let t = Instant::now();
    while !(tables_per_server().len() == 3 && tables_per_server().iter().all(|n| *n > 1)) {
        assert!(
            t.elapsed().as_secs() < 90,
            "tables not spread over three servers: {:?}",
            tables_per_server()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    eprintln!("tables per server: {:?}", tables_per_server());
    let failures = compare_suite(&m);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Totals across the servers equal what GNU find counts.
    for (scope, ty) in [("mnt", "f"), ("mnt/imp", "d")] {
        let out = m.sextant(&["--json", "stats", "--by", "user", scope, "-type", ty]);
        assert!(out.status.success(), "{out:?}");
        let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = sh(m.dir.path(), &format!("find {scope} -type {ty} | wc -l"));
        assert_eq!(
            w["total"]["count"].to_string(),
            n.trim(),
            "{scope} -type {ty}"
        );
    }
}

/// One comparison: arguments, how to compare, as nobody, environment.
type Case<'a> = (Vec<&'a str>, Cmp, bool, &'a [(&'a str, &'a str)]);

/// GNU find and `sextant find` on a small tree made through the mount, for
/// what the big suite does not hold: inode numbers as the mount shows
/// them, a directory `nobody` may read but not search (`ronly`, 0744:
/// find lists its names, and stats nothing in it), symlink loops under
/// `-xtype`, fractional seconds, names that are not UTF-8 under `-regex`
/// (in the C locale, where find matches bytes), and `-exec` of a command
/// that cannot start.
#[test]
fn gnu_find_agrees_on_inodes_unsearchable_directories_and_edge_cases() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::start();
    sh(
        &m.mnt,
        "mkdir -p y/d y/ronly/sub/deep y/ronly/emptysub y/ronly/inner \
         && echo hi > y/f && ln -s f y/l && ln -s loop y/loop && ln -s b y/a && ln -s a y/b \
         && ln -s nowhere y/dangling \
         && touch -d '2023-11-14 22:13:20.123456789' y/f \
         && touch -a -d '2001-02-03 04:05:06.5' y/f \
         && echo a > y/ronly/file && ln -s file y/ronly/lnk && mkfifo y/ronly/ff \
         && echo z > y/ronly/inner/z && echo s > y/ronly/sub/s \
         && touch \"$(printf 'y/a\\377b')\" \"$(printf 'y/x\\351y.c')\" \
         && mkdir y/fonly && echo g > y/fonly/g && chmod 744 y/ronly y/ronly/inner y/fonly",
    );
    let ino = |rel: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(m.p(rel))
            .unwrap()
            .ino()
            .to_string()
    };
    let (f, file, sub) = (ino("y/f"), ino("y/ronly/file"), ino("y/ronly/sub"));
    let c = &[("LC_ALL", "C")][..];
    // (arguments, comparison, as nobody, environment)
    let suite: Vec<Case> = vec![
        // Inode numbers: the mount's.
        (vec!["mnt/y", "-inum", &f], Cmp::Lines, false, &[]),
        (vec!["mnt", "-inum", "1"], Cmp::Lines, false, &[]),
        (vec!["mnt/y", "-printf", "%i %p\\n"], Cmp::Lines, false, &[]),
        (
            vec!["mnt", "-maxdepth", "1", "-printf", "%i %p\\n"],
            Cmp::Lines,
            false,
            &[],
        ),
        (vec!["mnt/y", "-ls"], Cmp::Ls, false, &[]),
        (
            vec!["mnt/y", "!", "-inum", &f, "-type", "f"],
            Cmp::Lines,
            false,
            &[],
        ),
        // Symlink loops: -xtype reports them (exit 1) and is false.
        (vec!["mnt/y", "-xtype", "l"], Cmp::Lines, false, &[]),
        (vec!["mnt/y", "-xtype", "d"], Cmp::Lines, false, &[]),
        (vec!["mnt/y", "-xtype", "f"], Cmp::Lines, false, &[]),
        (vec!["mnt/y", "-xtype", "l,d"], Cmp::Lines, false, &[]),
        (
            vec!["mnt/y", "-xtype", "l", "-o", "-print"],
            Cmp::Lines,
            false,
            &[],
        ),
        (
            vec!["mnt/y", "-type", "l", "-printf", "%Y %p\\n"],
            Cmp::Lines,
            false,
            &[],
        ),
        // Fractional seconds.
        (
            vec![
                "mnt/y",
                "-name",
                "f",
                "-printf",
                "%TX|%AX|%TS|%AS|%TT|%AT|%T@|%A@|%T+|%A+|%t|%a|%TH:%TM|%Tc\\n",
            ],
            Cmp::Lines,
            false,
            &[],
        ),
        (
            vec!["mnt/y", "-printf", "%CX %p\\n"],
            Cmp::Lines,
            false,
            &[],
        ),
        // -regex on names that are not UTF-8: bytes, in the C locale.
        (vec!["mnt/y", "-regex", ".*"], Cmp::Lines, false, c),
        (vec!["mnt/y", "-regex", ".*/a.b"], Cmp::Lines, false, c),
        (vec!["mnt/y", "-regex", ".*/x.y\\.c"], Cmp::Lines, false, c),
        (vec!["mnt/y", "-iregex", ".*/X.Y\\.C"], Cmp::Lines, false, c),
        (
            vec![
                "mnt/y",
                "-regextype",
                "posix-extended",
                "-regex",
                ".*/a[^a-z/]b",
            ],
            Cmp::Lines,
            false,
            c,
        ),
        // A command that cannot start: false, reported, exit 0 (`;`) or
        // 1 (`+`).
        (
            vec![
                "mnt/y",
                "-exec",
                "nonexistent-cmd",
                "{}",
                ";",
                "-o",
                "-print",
            ],
            Cmp::Lines,
            false,
            &[],
        ),
        (
            vec![
                "mnt/y",
                "-name",
                "f",
                "-exec",
                "nonexistent-cmd",
                "{}",
                ";",
                "-print",
                "-o",
                "-name",
                "f",
                "-printf",
                "false: %p\\n",
            ],
            Cmp::Lines,
            false,
            &[],
        ),
        (
            vec!["mnt/y", "-exec", "nonexistent-cmd", "{}", "+", "-print"],
            Cmp::Lines,
            false,
            &[],
        ),
        // As nobody, ronly (r, not x) is listed by name only.
        (vec!["mnt/y"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-name", "*"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-name", "sub"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-type", "f"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-type", "d"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "!", "-type", "d"], Cmp::Lines, true, &[]),
        (
            vec!["mnt/y", "-type", "d", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y", "-type", "l,p"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-size", "-1k"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-empty"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-user", "root"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-perm", "-0"], Cmp::Lines, true, &[]),
        (
            vec!["mnt/y", "-newer", "mnt/y/f", "-o", "-printf", "X %p\\n"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y", "-ls"], Cmp::Ls, true, &[]),
        (
            vec!["mnt/y", "-ls", "-o", "-printf", "X %p\\n"],
            Cmp::Ls,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-printf", "%p|%f|%h|%P|%H|%d\\n"],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-printf", "%y|%i|%p\\n"],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec![
                "mnt/y", "-printf", "A %p\\n", "-printf", "%s\\n", "-printf", "B %p\\n",
            ],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-printf", "%s %p\\n", "-o", "-printf", "X %p\\n"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y", "-inum", &file], Cmp::Lines, true, &[]),
        (
            vec![
                "mnt/y",
                "-samefile",
                "mnt/y/f",
                "-o",
                "-name",
                "file",
                "-printf",
                "X %p\\n",
            ],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y", "-inum", &sub], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-readable"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "!", "-readable"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-xtype", "f"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-lname", "*"], Cmp::Lines, true, &[]),
        (
            vec!["mnt/y", "-exec", "echo", "X", "{}", ";"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y", "-maxdepth", "2"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-mindepth", "3"], Cmp::Lines, true, &[]),
        (vec!["mnt/y", "-depth"], Cmp::Lines, true, &[]),
        (
            vec!["mnt/y", "-name", "sub", "-prune", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-name", "ronly", "-prune", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-name", "file", "-prune", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-depth", "-name", "file", "-prune", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-depth", "-name", "sub", "-prune", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
        (
            vec!["mnt/y", "-name", "sub", "-exec", "echo", "E", "{}", ";"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y", "-name", "f*", "-print0"], Cmp::Nul, true, &[]),
        (
            vec!["mnt/y", "-name", "lnk", "-printf", "%l\\n", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y/ronly"], Cmp::Lines, true, &[]),
        (vec!["mnt/y/fonly"], Cmp::Lines, true, &[]),
        (
            vec!["mnt/y/fonly", "-samefile", "mnt/y/f"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y/fonly", "-size", "-1k"], Cmp::Lines, true, &[]),
        (vec!["mnt/y/ronly/"], Cmp::Lines, true, &[]),
        (vec!["mnt/y/ronly", "-maxdepth", "0"], Cmp::Lines, true, &[]),
        (
            vec!["mnt/y/ronly", "-maxdepth", "1", "-type", "d"],
            Cmp::Lines,
            true,
            &[],
        ),
        (vec!["mnt/y/ronly/file"], Cmp::Lines, true, &[]),
        (
            vec!["mnt/y", "-regex", ".*/ronly/.*"],
            Cmp::Lines,
            true,
            &[],
        ),
        // (Nothing can be removed: nobody may write nowhere here.)
        (
            vec!["mnt/y/ronly", "-name", "f*", "-delete", "-o", "-print"],
            Cmp::Lines,
            true,
            &[],
        ),
    ];
    let mut failures: Vec<String> = suite
        .iter()
        .filter_map(|(args, cmp, nobody, env)| compare_in(&m, args, *cmp, *nobody, env, true))
        .collect();
    // The same unsearchable directory through a namespace path (listed
    // by a readdir request as nobody, not through the mount): the same
    // lines as GNU find on the mount, paths aside.
    let nobody = |prog: &str, pre: &[&str], args: &[String]| {
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(prog)
            .args(pre)
            .args(args)
            .current_dir(m.dir.path())
            .env("SEXTANT_SECRET", m.secret())
            .output()
            .unwrap()
    };
    // Y: the tree (mnt/y or /y).
    for args in [
        &["Y", "-printf", "%y %p\\n"][..],
        &["Y", "-type", "d", "-o", "-print"],
        &["Y", "-size", "-1k", "-o", "-printf", "X %p\\n"],
        &[
            "Y",
            "-samefile",
            "Y/f",
            "-o",
            "-name",
            "file",
            "-printf",
            "X %p\\n",
        ],
        &["Y/fonly", "-samefile", "Y/f"],
        &["Y/fonly", "-name", "g", "-printf", "%p %y\\n"],
    ] {
        let with = |y: &str| -> Vec<String> { args.iter().map(|a| a.replace('Y', y)).collect() };
        let gnu = nobody("find", &[], &with("mnt/y"));
        let ours = nobody(BIN, &["--server", &m.addr, "find"], &with("/y"));
        let said = |out: &Output, y: &str| {
            let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| l.replace(y, "Y"))
                .collect();
            v.sort();
            let errors: Vec<String> = complaints(&out.stderr)
                .iter()
                .map(|l| l.replace(y, "Y"))
                .collect();
            (v, errors, out.status.code())
        };
        if said(&gnu, "mnt/y") != said(&ours, "/y") {
            failures.push(format!("(nobody) find {args:?}: {gnu:?} vs {ours:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The lines of `out`, sorted, with the leading `root` of each renamed `R`.
fn renamed(out: &[u8], root: &str) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(out)
        .lines()
        .map(|l| match l.strip_prefix(root) {
            Some(rest) => format!("R{rest}"),
            None => l.to_string(),
        })
        .collect();
    v.sort();
    v
}

/// `-delete` (and `-exec rm`) change what GNU find changes: the same tree
/// made in a local directory and under the mount, GNU find on the one and
/// `sextant find` on the other must print the same, exit the same way and
/// leave the same tree behind. Then `-delete` on a namespace path (no
/// mount: requests to the server), hard links included.
#[test]
fn delete_and_exec_change_the_tree_as_gnu_find_does() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::start();
    let local = m.dir.path().join("local");
    let make = |root: &Path| {
        let _ = std::fs::remove_dir_all(root);
        sh(
            root.parent().unwrap(),
            &format!(
                "mkdir -p {r}/a/b {r}/c {r}/e/e2/e3 {r}/n/m && touch {r}/a/f1 {r}/a/b/f2 \
                 {r}/c/f3 {r}/top {r}/a/x.o {r}/c/y.o && echo data > {r}/a/b/full.o \
                 && ln {r}/a/f1 {r}/c/hl",
                r = root.file_name().unwrap().to_string_lossy()
            ),
        );
    };
    let listing = |cwd: &Path, root: &str| -> Vec<String> {
        let out = Command::new("find")
            .arg(root)
            .current_dir(cwd)
            .output()
            .unwrap();
        renamed(&out.stdout, root)
    };
    let cases: Vec<Vec<&str>> = vec![
        vec!["-name", "*.o", "-delete"],
        vec!["-type", "d", "-empty", "-delete", "-print"],
        vec!["-empty", "-delete"],
        vec!["-type", "d", "-delete"],
        vec!["-delete", "-print"],
        vec!["-name", "f*", "-delete", "-o", "-name", "*.o", "-print"],
        vec!["-depth", "-name", "b", "-prune", "-o", "-delete"],
        vec!["-type", "f", "-exec", "rm", "{}", "+"],
        vec!["-name", "*.o", "-exec", "rm", "{}", ";", "-print"],
        // Answered yes (stdin) every time.
        vec!["-name", "*.o", "-ok", "rm", "{}", ";"],
    ];
    let answer = |mut c: Command| -> Output {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(mut input) = child.stdin.take() {
            use std::io::Write;
            let _ = input.write_all("y\n".repeat(100).as_bytes());
        }
        child.wait_with_output().unwrap()
    };
    let mut failures = Vec::new();
    for args in &cases {
        make(&local);
        make(&m.p("t"));
        let mut gnu = Command::new("find");
        gnu.arg("local").args(args).current_dir(m.dir.path());
        let gnu = answer(gnu);
        let mut ours = Command::new(BIN);
        ours.arg("find")
            .arg("t")
            .args(args)
            .current_dir(&m.mnt)
            .env("SEXTANT_SECRET", m.secret());
        let ours = answer(ours);
        let (g, o) = (renamed(&gnu.stdout, "local"), renamed(&ours.stdout, "t"));
        let (gt, ot) = (listing(m.dir.path(), "local"), listing(&m.mnt, "t"));
        // GNU's messages use typographic quotes: compare their count.
        let (ge, oe) = (
            String::from_utf8_lossy(&gnu.stderr).lines().count(),
            String::from_utf8_lossy(&ours.stderr).lines().count(),
        );
        if g != o || gt != ot || gnu.status.code() != ours.status.code() || ge != oe {
            failures.push(format!(
                "find {}: output {g:?} vs {o:?}; left {gt:?} vs {ot:?}; exit {:?} vs {:?}; \
                 stderr {:?} vs {:?}",
                args.join(" "),
                gnu.status.code(),
                ours.status.code(),
                String::from_utf8_lossy(&gnu.stderr),
                String::from_utf8_lossy(&ours.stderr),
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A namespace path: each removal is a request to the server.
    make(&m.p("ns"));
    let out = m.sextant(&[
        "--server", &m.addr, "find", "/ns", "-name", "f1", "-delete", "-print",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/ns/a/f1\n");
    assert!(m.p("ns/c/hl").exists(), "the other link stays");
    let out = m.sextant(&[
        "--server", &m.addr, "find", "/ns", "-type", "d", "-name", "c", "-delete",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot delete '/ns/c': Directory not empty"),
        "{out:?}"
    );
    let out = m.sextant(&["--server", &m.addr, "find", "/ns", "-delete"]);
    assert!(out.status.success(), "{out:?}");
    // The mount learns of the server's removals by its watch.
    eventually("all gone, the starting point last", || !m.p("ns").exists());

    // -execdir needs a local directory; a relative $PATH entry is refused.
    let out = m.sextant(&[
        "--server", &m.addr, "find", "/", "-execdir", "echo", "{}", ";",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("under a Sextant mount"));
    let out = Command::new(BIN)
        .args(["find", "t", "-execdir", "echo", "{}", ";"])
        .current_dir(&m.mnt)
        .env("SEXTANT_SECRET", m.secret())
        .env("PATH", "/usr/bin:bin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("relative path 'bin'"));
}

/// A mount made the way `sextant mount DIR` makes it by default: without
/// `-o allow_other`, which for root means mount(2) called directly, so the
/// kernel records the type as plain `fuse`. `sextant find`, `du` and
/// `stats` must still know a path under it (they once said "No such file
/// or directory": they looked for type `fuse.sextant` only).
#[test]
fn paths_under_a_mount_made_without_fusermount() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::start();
    std::fs::create_dir_all(m.p("d/e")).unwrap();
    std::fs::write(m.p("d/e/f.txt"), b"abc").unwrap();
    std::fs::write(m.p("d/g.txt"), b"").unwrap();
    let own = m.dir.path().join("own");
    std::fs::create_dir(&own).unwrap();
    m.mount_private_at(&own);
    let unmount = || {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&own)
            .status();
    };
    let mut problems: Vec<String> = [
        vec!["own"],
        vec!["own/d", "-name", "*.txt"],
        vec!["own/d/e", "-type", "f", "-size", "-2k"],
        // The kernel records type `fuse` for this mount.
        vec!["own/d", "-fstype", "fuse", "-printf", "%F %p\\n"],
    ]
    .iter()
    .filter_map(|args| compare(&m, args, Cmp::Lines, false))
    .collect();
    // Another user may not enter a mount made without allow_other: both
    // finds say "Permission denied" (exit 1), not the server's answer;
    // so do du and stats.
    problems.extend(compare(&m, &["own/d"], Cmp::Lines, true));
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                BIN,
            ])
            .args(args)
            .current_dir(m.dir.path())
            .env("SEXTANT_SECRET", m.secret())
            .output()
            .unwrap()
    };
    // (du prints nothing for a path it could not read; stats, the totals
    // of what it could: none.)
    for (args, printed) in [
        (&["du", "own/d"][..], ""),
        (&["stats", "own/d"], "0 0 total"),
    ] {
        let out = as_nobody(args);
        let err = String::from_utf8_lossy(&out.stderr);
        let shown = String::from_utf8_lossy(&out.stdout);
        if out.status.code() != Some(1)
            || shown.split_whitespace().collect::<Vec<_>>().join(" ") != printed
            || !err.contains("Permission denied")
        {
            problems.push(format!("(nobody) {args:?}: {out:?}"));
        }
    }
    let out = m.sextant(&["--json", "stats", "own/d", "-type", "f"]);
    // du: what find lists under the path, and the sum of their sizes.
    let du = m.sextant(&["--json", "du", "own/d"]);
    let n = sh(m.dir.path(), "find own/d | wc -l");
    let b = sh(
        m.dir.path(),
        "find own/d -printf '%s\\n' | awk '{s+=$1} END {print s+0}'",
    );
    let missing = m.sextant(&["du", "own/nope"]);
    let several = m.sextant(&["du", "own/d", "own/nope", "own/d/e"]);
    unmount();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["total"]["count"].as_u64(), v["total"]["size"].as_u64()),
        (Some(2), Some(3))
    );
    assert!(du.status.success(), "{du:?}");
    let v: serde_json::Value = serde_json::from_slice(&du.stdout).unwrap();
    assert_eq!(
        (
            v["entries"].to_string(),
            v["bytes"].to_string(),
            v["path"].as_str()
        ),
        (n.trim().to_string(), b.trim().to_string(), Some("own/d"))
    );
    assert_eq!(n.trim(), "4");
    assert_eq!(missing.status.code(), Some(1));
    assert!(missing.stdout.is_empty(), "{missing:?}");
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        "sextant du: 'own/nope': No such file or directory"
    );
    // Several paths: a line for each that can be read, exit 1 for the rest.
    assert_eq!(several.status.code(), Some(1));
    let lines: Vec<String> = String::from_utf8_lossy(&several.stdout)
        .lines()
        .map(|l| l.split('\t').skip(1).collect::<Vec<_>>().join("\t"))
        .collect();
    assert_eq!(lines, ["4 entries\town/d", "2 entries\town/d/e"]);
}

fn root() -> Credentials {
    Credentials {
        uid: 0,
        gid: 0,
        groups: vec![],
    }
}

async fn names(c: &Client, scope: &str, expr: Expr) -> Vec<Vec<u8>> {
    let spec = SearchSpec::new(SearchScope::Path(scope.as_bytes().to_vec()), expr);
    let (hits, _) = c.search_collect(&root(), &spec).await.unwrap();
    let mut v: Vec<Vec<u8>> = hits.into_iter().map(|h| h.path.to_vec()).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_sees_the_mutation_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, addr) = spawn_server(&data, "nosync", "127.0.0.1:0");
    let _server = KillOnDrop(server);
    let secret = std::fs::read_to_string(data.join("secret")).unwrap();
    let c = Client::connect(&addr, &secret, Options::default())
        .await
        .unwrap();
    let cred = root();
    let d = c.mkdir(&cred, Soid::ROOT, b"t", 0o755).await.unwrap();
    for i in 0..200u32 {
        let name = format!("f{i}");
        // Create, then search at once: the new file is there.
        let a = c
            .create(&cred, d.soid, name.as_bytes(), 0o644, true)
            .await
            .unwrap();
        let found = names(&c, "/t", Expr::name(name.as_bytes())).await;
        assert_eq!(
            found,
            vec![format!("/t/{name}").into_bytes()],
            "after create {i}"
        );
        // Change it: the search sees the new size, not the old one.
        let set = sextant_types::SetAttr {
            size: Some(u64::from(i) + 1),
            ..Default::default()
        };
        c.setattr(&cred, a.soid, &set).await.unwrap();
        let sized = Expr::Pred(Pred::Size {
            lo: u64::from(i) + 1,
            hi: u64::from(i) + 1,
        });
        let found = names(&c, "/t", Expr::and(Expr::name(name.as_bytes()), sized)).await;
        assert_eq!(found.len(), 1, "after setattr {i}");
        if i % 2 == 0 {
            // Rename: the old name is gone, the new one is there.
            let new = format!("g{i}");
            c.rename(
                &cred,
                d.soid,
                name.as_bytes(),
                d.soid,
                new.as_bytes(),
                Default::default(),
            )
            .await
            .unwrap();
            assert!(names(&c, "/t", Expr::name(name.as_bytes()))
                .await
                .is_empty());
            assert_eq!(names(&c, "/t", Expr::name(new.as_bytes())).await.len(), 1);
        } else {
            c.unlink(&cred, d.soid, name.as_bytes()).await.unwrap();
            assert!(
                names(&c, "/t", Expr::name(name.as_bytes()))
                    .await
                    .is_empty(),
                "after unlink {i}"
            );
        }
    }
    // Aggregation over the wire agrees with the hits.
    let agg = c
        .aggregate(
            &cred,
            SearchScope::Path(b"/t".to_vec()),
            Expr::Pred(Pred::Type(vec![FileType::Regular])),
            GroupBy::Extension,
        )
        .await
        .unwrap();
    assert_eq!(agg.total.count, 100);
    assert_eq!(
        agg.total.size,
        (0..200u64).step_by(2).map(|i| i + 1).sum::<u64>()
    );
    assert_eq!(agg.groups.len(), 1);
    assert!(agg
        .groups
        .contains_key(&GroupKey::Extension(b"".as_slice().into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_searches_get_clear_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, addr) = spawn_server(&data, "nosync", "127.0.0.1:0");
    let _server = KillOnDrop(server);
    let secret = std::fs::read_to_string(data.join("secret"))
        .unwrap()
        .trim()
        .to_string();
    let c = Client::connect(&addr, &secret, Options::default())
        .await
        .unwrap();
    let cred = root();
    let d = c.mkdir(&cred, Soid::ROOT, b"d", 0o755).await.unwrap();
    for i in 0..300 {
        c.create(&cred, d.soid, format!("f{i}").as_bytes(), 0o644, true)
            .await
            .unwrap();
    }

    let mut raw = pb::sextant_client::SextantClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let send = |r: pb::SearchRequest, secret: &str| {
        let mut req = tonic::Request::new(r);
        req.metadata_mut()
            .insert(SECRET_METADATA, secret.parse().unwrap());
        req
    };
    let good = SearchSpec::new(SearchScope::Path(b"/d".to_vec()), Expr::True);
    let first_error = |mut r: pb::SearchRequest, f: &dyn Fn(&mut pb::SearchRequest)| {
        f(&mut r);
        r
    };
    let cases: Vec<(pb::SearchRequest, &str)> = vec![
        (
            spec_to_pb(
                &SearchSpec::new(
                    SearchScope::Path(b"/d".to_vec()),
                    Expr::Pred(Pred::Size { lo: 9, hi: 1 }),
                ),
                &cred,
            ),
            "size range is inverted",
        ),
        (
            first_error(spec_to_pb(&good, &cred), &|r| r.scope = None),
            "scope is unset",
        ),
        (
            first_error(spec_to_pb(&good, &cred), &|r| {
                r.scope = Some(pb::search_request::Scope::Path(b"d".to_vec()))
            }),
            "absolute",
        ),
        (
            first_error(spec_to_pb(&good, &cred), &|r| {
                r.expr = Some(pb::QueryExpr {
                    node: Some(pb::query_expr::Node::Pred(pb::QueryPred {
                        pred: Some(pb::query_pred::Pred::Type(pb::TypePred { types: vec![42] })),
                    })),
                })
            }),
            "file type 42",
        ),
        (
            first_error(spec_to_pb(&good, &cred), &|r| r.cred = None),
            "cred",
        ),
        (
            first_error(spec_to_pb(&good, &cred), &|r| r.batch_size = 1 << 20),
            "batch_size",
        ),
    ];
    for (req, want) in cases {
        let mut stream = raw.search(send(req, &secret)).await.unwrap().into_inner();
        let msg = stream.message().await.unwrap().expect("an error batch");
        let e = msg.error.expect("an error");
        assert_eq!(e.errno, FsError::Invalid.errno());
        assert!(e.message.contains(want), "{want}: {}", e.message);
        assert!(stream.message().await.unwrap().is_none(), "the stream ends");
    }
    // Through the client library: a typed error.
    let bad = SearchSpec::new(
        SearchScope::Path(b"/d".to_vec()),
        Expr::Pred(Pred::Uid { lo: 3, hi: 2 }),
    );
    match c.search_collect(&cred, &bad).await {
        Err(Error::BadQuery(m)) => assert!(m.contains("uid"), "{m}"),
        other => panic!("expected BadQuery, got {:?}", other.map(|x| x.0.len())),
    }
    // A missing scope is ENOENT; a wrong secret is refused.
    let missing = SearchSpec::new(SearchScope::Path(b"/nope".to_vec()), Expr::True);
    assert_eq!(
        c.search_collect(&cred, &missing).await.err(),
        Some(Error::Fs(FsError::NotFound))
    );
    let status = raw
        .search(send(spec_to_pb(&good, &cred), &"0".repeat(64)))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);

    // Cancel: read one batch of one hit and drop the stream, many times;
    // the server keeps answering (searches and ordinary calls).
    let mut small = good.clone();
    small.batch_size = 1;
    for _ in 0..50 {
        let mut s = c.search(&cred, &small).await.unwrap();
        assert_eq!(s.next_batch().await.unwrap().unwrap().len(), 1);
        drop(s);
    }
    let (hits, done) = c.search_collect(&cred, &good).await.unwrap();
    assert_eq!((hits.len(), done.count), (301, 301));
    c.getattr(&cred, d.soid).await.unwrap();

    // Sort and limit: the three largest, in order; count only.
    let big = c.create(&cred, d.soid, b"big", 0o644, true).await.unwrap();
    let set = sextant_types::SetAttr {
        size: Some(10_000),
        ..Default::default()
    };
    c.setattr(&cred, big.soid, &set).await.unwrap();
    let mut top = good.clone();
    top.sort = Some(sextant_proto::search::SortSpec {
        key: sextant_proto::search::SortKey::Size,
        descending: true,
    });
    top.limit = 3;
    let (hits, _) = c.search_collect(&cred, &top).await.unwrap();
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].path, b"/d/big"[..]);
    let mut count = good.clone();
    count.count_only = true;
    let (hits, done) = c.search_collect(&cred, &count).await.unwrap();
    assert_eq!((hits.len(), done.count, done.total_size), (0, 302, 10_000));
}

#[test]
fn find_and_stats_on_the_embedded_engine() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |args: &[&str]| common::local_ok(&data, args);
    run(&["mkdir", "-p", "/a/b/c", "/a/e"]);
    run(&["touch", "/a/b/f.txt", "/a/b/c/g.txt", "/a/h.rs"]);
    let mut got: Vec<String> = run(&["find", "/a", "-name", "*.txt", "-o", "-name", "e"])
        .lines()
        .map(String::from)
        .collect();
    got.sort();
    assert_eq!(got, ["/a/b/c/g.txt", "/a/b/f.txt", "/a/e"]);
    let got = run(&[
        "find", "/a", "-path", "/a/b", "-prune", "-o", "-type", "f", "-print",
    ]);
    assert_eq!(got, "/a/h.rs\n");
    // On a namespace path the inode number is the SOID, for -inum, %i
    // and -ls alike.
    let soid = run(&["find", "/a/h.rs", "-printf", "%i"]);
    assert!(soid.len() > 10, "a SOID, not a small node id: {soid}");
    assert_eq!(run(&["find", "/a", "-inum", &soid]), "/a/h.rs\n");
    let ls = run(&["find", "/a/h.rs", "-ls"]);
    assert_eq!(ls.split_whitespace().next(), Some(soid.as_str()));
    let v: serde_json::Value = serde_json::from_str(&run(&[
        "--json", "stats", "--by", "ext", "/a", "-type", "f",
    ]))
    .unwrap();
    assert_eq!(v["total"]["count"], 3);
    assert_eq!(v["groups"].as_array().map(Vec::len), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_paths_and_many_groups_are_split_over_messages() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, addr) = spawn_server(&data, "nosync", "127.0.0.1:0");
    let _server = KillOnDrop(server);
    let secret = std::fs::read_to_string(data.join("secret")).unwrap();
    let c = Client::connect(&addr, &secret, Options::default())
        .await
        .unwrap();
    let cred = root();
    // A chain of 15 directories with 250-byte names, then 300 more such
    // directories holding one file each: ~4 KiB paths, so 300 hits or 300
    // groups keyed by directory are over the 1 MiB message limit together.
    let long = |i: usize| format!("{i:0>250}").into_bytes();
    let mut parent = Soid::ROOT;
    for i in 0..15 {
        parent = c.mkdir(&cred, parent, &long(i), 0o755).await.unwrap().soid;
    }
    let futs = (0..300).map(|i| {
        let c = c.clone();
        let cred = cred.clone();
        async move {
            let d = c
                .mkdir(&cred, parent, &long(1000 + i), 0o755)
                .await
                .unwrap();
            c.create(&cred, d.soid, b"f", 0o644, true).await.unwrap();
        }
    });
    futures::future::join_all(futs).await;
    let files = Expr::Pred(Pred::Type(vec![FileType::Regular]));
    let spec = SearchSpec::new(SearchScope::Path(b"/".to_vec()), files.clone());
    let (hits, done) = c.search_collect(&cred, &spec).await.unwrap();
    assert_eq!((hits.len(), done.count), (300, 300));
    assert!(hits.iter().all(|h| h.path.len() > 4000));
    let agg = c
        .aggregate(
            &cred,
            SearchScope::Path(b"/".to_vec()),
            files,
            GroupBy::Directory,
        )
        .await
        .unwrap();
    assert_eq!((agg.groups.len(), agg.total.count), (300, 300));
}

/// `stats` and `du` with `-inum` on a mount path count by the mount's
/// inode numbers, as `sextant find` there does (the server knows SOIDs
/// only, so those totals are not asked of it).
#[test]
fn stats_with_inum_on_a_mount_counts_the_mounts_numbers() {
    if !common::fuse_available() {
        return;
    }
    let m = common::Mounted::start();
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::write(m.p("d/f"), b"12345").unwrap();
    std::fs::write(m.p("d/g"), b"x").unwrap();
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::symlink_metadata(m.p("d/f"))
        .unwrap()
        .ino()
        .to_string();
    let dir = m.mnt.join("d");
    let d = dir.to_str().unwrap();
    let found = m.sextant_ok(&["find", d, "-inum", &ino]);
    assert_eq!(found.lines().count(), 1, "{found}");
    let out = m.sextant_ok(&["--json", "stats", d, "-inum", &ino]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["total"]["count"], 1, "{out}");
    assert_eq!(v["total"]["size"], 5, "{out}");
}
