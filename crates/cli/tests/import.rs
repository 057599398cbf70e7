//! `sextant import` end to end: an import the server stops under exits
//! non-zero and says how far it got; hard links and extended attributes
//! come over as `cp -a` brings them, embedded, over the network and read
//! back through a mount with the file data.

mod common;

use common::{fuse_available, sh, spawn_server_with, KillOnDrop, Mounted, BIN};
use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Sets `name`=`value` on `path`; false where the file system keeps no
/// such attributes.
fn set_xattr(path: &Path, name: &str, value: &[u8]) -> bool {
    let (p, n) = (
        CString::new(path.as_os_str().as_bytes()).unwrap(),
        CString::new(name).unwrap(),
    );
    // SAFETY: NUL-terminated strings and a valid buffer.
    unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        ) == 0
    }
}

/// `dirs` directories of `files` empty files each.
fn tree(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        let sub = root.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..files {
            std::fs::write(sub.join(format!("f{f}")), b"").unwrap();
        }
    }
}

/// Entries under `path` on the server at `addr` (`sextant du`), if it
/// answers.
fn entries(addr: &str, data: &Path, path: &str) -> Option<u64> {
    let out = Command::new(BIN)
        .args(["--server", addr, "--data"])
        .arg(data)
        .args(["--json", "du", path])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["entries"].as_u64()
}

/// The server killed in the middle of an import: the import stops (after
/// the client's retry budget), exits non-zero, and reports how many
/// entries it imported — no more than the restarted server holds, since
/// each was acknowledged.
#[test]
fn an_import_the_server_stops_under_exits_non_zero_with_its_count() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let (dirs, files) = (40, 1000);
    tree(&src, dirs, files);
    let total = (dirs * (files + 1)) as u64;
    let data = dir.path().join("data");
    let (server, addr) = spawn_server_with(&data, "127.0.0.1:0", &[], Stdio::inherit());
    let mut server = KillOnDrop(server);
    let import = Command::new(BIN)
        .args(["--server", &addr, "--data"])
        .arg(&data)
        .args(["--json", "import"])
        .arg(&src)
        .arg("/dst")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let import = KillOnDrop(import);
    // Well under way, not done.
    let t = Instant::now();
    loop {
        let n = entries(&addr, &data, "/dst").unwrap_or(0);
        assert!(
            n < total / 2,
            "the import ran too far before the kill ({n})"
        );
        if n > 2000 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the import never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    common::kill9(&mut server.0);
    let mut import = import;
    let t = Instant::now();
    while import.0.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the import did not stop"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = import.0.wait().unwrap();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    import
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    import
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    let stderr = String::from_utf8_lossy(&stderr);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("import stopped after"), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&stdout)));
    assert!(report["stopped"].is_string(), "{report}");
    let imported = report["files"].as_u64().unwrap() + report["directories"].as_u64().unwrap();
    assert!(imported > 0 && imported < total, "{report}");
    // Everything reported imported was acknowledged, so is there.
    let (server, addr) = spawn_server_with(&data, &addr, &[], Stdio::inherit());
    let _server = KillOnDrop(server);
    let held = entries(&addr, &data, "/dst").unwrap() - 1;
    assert!(
        imported <= held,
        "reported {imported}, the store holds {held}"
    );
}

/// A source tree with hard links (in one directory and across
/// directories) and extended attributes.
fn linked_tree(src: &Path) -> bool {
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("f"), b"hello").unwrap();
    std::fs::hard_link(src.join("f"), src.join("f2")).unwrap();
    std::fs::hard_link(src.join("f"), src.join("a/b/f3")).unwrap();
    std::fs::write(src.join("a/g"), b"one").unwrap();
    std::fs::hard_link(src.join("a/g"), src.join("g2")).unwrap();
    set_xattr(&src.join("f"), "user.k", b"v") && set_xattr(&src.join("a"), "user.dir", b"d")
}

/// Embedded: `sextant stat` shows one inode with three links under the
/// three names, and `find -xattr` finds the attributes.
#[test]
fn import_keeps_hard_links_and_xattrs() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let xattrs = linked_tree(&src);
    let data = dir.path().join("data");
    let out = common::local_ok(&data, &["--json", "import", src.to_str().unwrap(), "/dst"]);
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (report["files"].as_u64(), report["hard_links"].as_u64()),
        (Some(2), Some(3))
    );
    let stat = |p: &str| -> (String, u64) {
        let v: serde_json::Value =
            serde_json::from_str(&common::local_ok(&data, &["--json", "stat", p])).unwrap();
        (
            v["soid"].as_str().unwrap().to_string(),
            v["nlink"].as_u64().unwrap(),
        )
    };
    let f = stat("/dst/f");
    assert_eq!(f.1, 3);
    assert_eq!(stat("/dst/f2"), f);
    assert_eq!(stat("/dst/a/b/f3"), f);
    assert_eq!(stat("/dst/g2"), stat("/dst/a/g"));
    let links = common::local_ok(&data, &["find", "/dst", "-type", "f", "-links", "3"]);
    let mut links: Vec<&str> = links.lines().collect();
    links.sort();
    assert_eq!(links, ["/dst/a/b/f3", "/dst/f", "/dst/f2"]);
    if !xattrs {
        eprintln!("the temporary directory keeps no user xattrs: links only");
        return;
    }
    let found = common::local_ok(&data, &["find", "/dst", "-xattr", "user.k=v"]);
    let mut found: Vec<&str> = found.lines().collect();
    found.sort();
    assert_eq!(found, ["/dst/a/b/f3", "/dst/f", "/dst/f2"]);
    let found = common::local_ok(&data, &["find", "/dst", "-xattr", "user.dir=d"]);
    assert_eq!(found, "/dst/a\n");
}

/// With the file data, over the network, read back through a mount: the
/// names share an inode (`stat %h %i`), its content, and the attributes
/// (`getfattr`), as on the source.
#[test]
fn import_with_data_keeps_hard_links_and_xattrs_on_the_mount() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::start();
    let src = m.dir.path().join("import-src");
    let xattrs = linked_tree(&src);
    let objects = m.data().join("objects");
    let out = m.sextant_ok(&[
        "--json",
        "import",
        src.to_str().unwrap(),
        "/imp",
        "--with-data",
        "--data-dir",
        objects.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["data_bytes"], 8, "{out}");
    let imp = m.p("imp");
    let links = |root: &Path| {
        let out = sh(
            root,
            "stat -c '%n %h %s' f f2 a/b/f3 a/g g2 && cat f2 a/b/f3 g2",
        );
        let inodes = sh(root, "stat -c %i f f2 a/b/f3 && stat -c %i a/g g2");
        let i: Vec<&str> = inodes.lines().collect();
        assert!(
            i[0] == i[1] && i[1] == i[2] && i[3] == i[4] && i[0] != i[3],
            "{inodes}"
        );
        out
    };
    assert_eq!(links(&imp), links(&src));
    if xattrs {
        let get = "getfattr -h --absolute-names -d -m 'user\\.' f f2 a/b/f3 a";
        assert_eq!(sh(&imp, get), sh(&src, get));
    }
}
