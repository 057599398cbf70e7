//! Log-less backups kept on local disk by a client that ends while it
//! cannot hand them back (a mount unmounted, a command ending, during a
//! server outage), for the next client process on this machine that talks
//! to the same server.
//!
//! Layout: `<dir>/<server address, escaped>/<incarnation>-<client id>-<pid>.bak`
//! (hex; the address without `http://`, see [`server_dir`]: on a cluster
//! a client spools each server's backups under that server's address),
//! directories mode 0700 and files 0600: the entries are
//! sealed redo of other users' operations. A file is written to a
//! temporary name, fsynced, renamed, and the directory fsynced, so a crash
//! leaves either the whole file or none.
//!
//! File format (little-endian): `SXTBAK1\n`, the incarnation (u64), the
//! entry count (u64); per entry its LSN (u64), length (u32) and bytes; then
//! an FNV-1a 64 checksum of everything before it. A file that does not
//! parse is renamed `*.bad` and left alone (never a panic, never a silent
//! delete).
//!
//! Who reads which files back (see `Client::connect`): a client reads
//! its home server's files before its first session, and on a cluster,
//! once it has the route map, those of every other server the map names
//! (a client spools each server's backups under that server's address,
//! and the next client here is usually one of the same home server).
//! Files of servers the map does not name are kept and warned of. Files
//! are not claimed: two clients may read the same ones, and a file is
//! removed only once its entries are of no more use (written back, or
//! that run's recovery over) or written anew to another file by a client
//! that ends holding them; a file removed between a listing and its read
//! is skipped.
//!
//! Which files matter: a client only sees replies of run B once run A's
//! recovery is over, so of the files for one address only those of the
//! newest incarnation (the one written last) can still be wanted; older
//! ones are removed when loaded. The server's `Recover` answer says whether
//! the newest are (see `Client::connect`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"SXTBAK1\n";
/// Larger entries are not redo (the server's record limit is far below).
const MAX_ENTRY: usize = 64 << 20;

/// Backups read back from the spool.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Spooled {
    pub incarnation: u64,
    /// (LSN, entry), in file order (possibly with duplicates across files).
    pub entries: Vec<(u64, Vec<u8>)>,
    /// The files they came from (removed once the entries are of no more
    /// use, see `Client`).
    pub files: Vec<PathBuf>,
}

/// What reading the spool can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: not a backup spool file ({what})")]
    Malformed { path: PathBuf, what: &'static str },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The directory of `addr`'s files under `dir`: the address without an
/// `http://` scheme (a cluster's route map spells its servers
/// `http://host:port`, a user `host:port`: one server, one directory),
/// with every byte outside `[A-Za-z0-9.-]` escaped as `_XX`.
pub fn server_dir(dir: &Path, addr: &str) -> PathBuf {
    let addr = addr.strip_prefix("http://").unwrap_or(addr);
    let mut name = String::new();
    for b in addr.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
            name.push(b as char);
        } else {
            name.push_str(&format!("_{b:02x}"));
        }
    }
    dir.join(name)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The bytes of a spool file.
pub fn encode(incarnation: u64, entries: &[(u64, &[u8])]) -> Vec<u8> {
    let size: usize = entries.iter().map(|(_, e)| e.len() + 12).sum();
    let mut out = Vec::with_capacity(24 + size + 8);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&incarnation.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (lsn, e) in entries {
        out.extend_from_slice(&lsn.to_le_bytes());
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A spool file's content: the incarnation, and (LSN, entry) pairs.
pub type Decoded = (u64, Vec<(u64, Vec<u8>)>);

/// Parses a spool file's bytes.
pub fn decode(b: &[u8]) -> Result<Decoded, &'static str> {
    if b.len() < 32 || &b[..8] != MAGIC {
        return Err("bad magic");
    }
    let (body, sum) = b.split_at(b.len() - 8);
    if fnv1a(body) != u64::from_le_bytes(sum.try_into().map_err(|_| "short")?) {
        return Err("bad checksum");
    }
    let u64_at = |at: usize| -> Result<u64, &'static str> {
        body.get(at..at + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or("truncated")
    };
    let incarnation = u64_at(8)?;
    let count = u64_at(16)?;
    let mut at = 24;
    let mut entries = Vec::new();
    for _ in 0..count {
        let lsn = u64_at(at)?;
        let len = body
            .get(at + 8..at + 12)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or("truncated")? as usize;
        if len > MAX_ENTRY {
            return Err("entry too large");
        }
        let e = body.get(at + 12..at + 12 + len).ok_or("truncated")?;
        entries.push((lsn, e.to_vec()));
        at += 12 + len;
    }
    if at != body.len() {
        return Err("trailing bytes");
    }
    Ok((incarnation, entries))
}

/// Writes `entries` of run `incarnation` durably under `dir` for `addr`;
/// returns the file.
pub fn write(
    dir: &Path,
    addr: &str,
    incarnation: u64,
    client_id: u64,
    entries: &[(u64, &[u8])],
) -> Result<PathBuf, SpoolError> {
    let sdir = server_dir(dir, addr);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&sdir)
        .map_err(io_at(&sdir))?;
    let name = format!(
        "{incarnation:016x}-{client_id:016x}-{}.bak",
        std::process::id()
    );
    let path = sdir.join(&name);
    let tmp = sdir.join(format!(".{name}.tmp"));
    let bytes = encode(incarnation, entries);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_at(&tmp))?;
    f.write_all(&bytes).map_err(io_at(&tmp))?;
    f.sync_all().map_err(io_at(&tmp))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(io_at(&path))?;
    File::open(&sdir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(&sdir))?;
    Ok(path)
}

/// Reads the files of the newest incarnation spooled for `addr` (removing
/// older incarnations' files; renaming unreadable ones `*.bad`). Empty
/// when there are none.
pub fn load(dir: &Path, addr: &str) -> Result<Spooled, SpoolError> {
    let sdir = server_dir(dir, addr);
    let listing = match fs::read_dir(&sdir) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Spooled::default()),
        Err(e) => return Err(io_at(&sdir)(e)),
    };
    // (mtime, incarnation, path, entries)
    let mut files = Vec::new();
    for entry in listing {
        let entry = entry.map_err(io_at(&sdir))?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("bak") {
            continue;
        }
        let mut bytes = Vec::new();
        let read = File::open(&path).and_then(|mut f| f.read_to_end(&mut bytes));
        match read {
            // Removed since the listing by another client (whose entries
            // were written back, or written anew to another file).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            r => r.map_err(io_at(&path))?,
        };
        match decode(&bytes) {
            Ok((incarnation, entries)) => {
                let mtime = match entry.metadata().and_then(|m| m.modified()) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    r => r.map_err(io_at(&path))?,
                };
                files.push((mtime, incarnation, path, entries));
            }
            Err(what) => {
                let bad = path.with_extension("bad");
                fs::rename(&path, &bad).map_err(io_at(&path))?;
                tracing::error!(
                    file = %bad.display(),
                    what,
                    "a spooled log-less backup file is damaged; set aside"
                );
            }
        }
    }
    let Some(newest) = files.iter().max_by_key(|f| f.0).map(|f| f.1) else {
        return Ok(Spooled::default());
    };
    let mut out = Spooled {
        incarnation: newest,
        ..Default::default()
    };
    for (_, incarnation, path, entries) in files {
        if incarnation == newest {
            out.entries.extend(entries);
            out.files.push(path);
        } else {
            // An older run: its recovery is over (see the module docs).
            remove(&[path]);
        }
    }
    Ok(out)
}

/// The directories under `dir` that hold spool files (`*.bak`), whichever
/// server they are of; unreadable ones are left out. Empty when `dir`
/// does not exist.
pub fn spooled_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(listing) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let holds_files = |d: &Path| {
        fs::read_dir(d).is_ok_and(|l| {
            l.flatten()
                .any(|e| e.path().extension().and_then(|x| x.to_str()) == Some("bak"))
        })
    };
    let mut out: Vec<PathBuf> = listing
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|d| holds_files(d))
        .collect();
    out.sort();
    out
}

/// Removes spool files (logging, not failing, on an error).
pub fn remove(files: &[PathBuf]) {
    for f in files {
        if let Err(e) = fs::remove_file(f) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(file = %f.display(), error = %e, "removing a spooled backup file");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory under the system's temporary directory, removed
    /// when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let p = std::env::temp_dir().join(format!(
                "sextant-spool-{tag}-{}-{:?}",
                std::process::id(),
                std::time::SystemTime::now()
            ));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn round_trip_newest_incarnation_and_damage() {
        let dir = TempDir::new("round-trip");
        let addr = "unix:/run/sextant.sock";
        assert_eq!(load(dir.path(), addr).unwrap(), Spooled::default());
        let a = write(dir.path(), addr, 5, 1, &[(10, b"ten"), (11, b"")]).unwrap();
        let mode = fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = fs::metadata(a.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = write(dir.path(), addr, 7, 2, &[(12, b"twelve")]).unwrap();
        // Another server's files are not this one's.
        write(dir.path(), "127.0.0.1:7411", 9, 3, &[(1, b"x")]).unwrap();
        let got = load(dir.path(), addr).unwrap();
        assert_eq!(got.incarnation, 7);
        assert_eq!(got.entries, vec![(12, b"twelve".to_vec())]);
        assert_eq!(got.files, vec![b.clone()]);
        assert!(!a.exists(), "an older run's file goes");
        // Damaged: set aside, not loaded, not deleted.
        let mut bytes = fs::read(&b).unwrap();
        let n = bytes.len();
        bytes[n - 9] ^= 1;
        fs::write(&b, &bytes).unwrap();
        assert_eq!(load(dir.path(), addr).unwrap(), Spooled::default());
        assert!(b.with_extension("bad").exists());
        remove(std::slice::from_ref(&b));
    }

    /// A server a cluster's route map names (`http://host:port`, how a
    /// client keeps its backups of another server) is the server a user
    /// names `host:port`: what one client spools, the next one's home
    /// server reads back.
    #[test]
    fn route_map_and_user_spellings_share_a_spool() {
        let dir = TempDir::new("spelling");
        assert_eq!(
            server_dir(dir.path(), "http://127.0.0.1:7411"),
            server_dir(dir.path(), "127.0.0.1:7411")
        );
        let f = write(dir.path(), "http://127.0.0.1:7411", 4, 1, &[(3, b"e")]).unwrap();
        let got = load(dir.path(), "127.0.0.1:7411").unwrap();
        assert_eq!((got.incarnation, got.files), (4, vec![f]));
        assert_ne!(
            server_dir(dir.path(), "https://127.0.0.1:7411"),
            server_dir(dir.path(), "127.0.0.1:7411"),
            "only the plain scheme the map writes is dropped"
        );
    }

    /// Every server's directory that holds spool files is listed (what a
    /// client checks against its route map); empty or temporary-only
    /// directories are not.
    #[test]
    fn spooled_dirs_lists_the_servers_with_files() {
        let dir = TempDir::new("dirs");
        assert!(spooled_dirs(&dir.path().join("none")).is_empty());
        write(dir.path(), "http://127.0.0.1:7411", 4, 1, &[(3, b"e")]).unwrap();
        write(dir.path(), "127.0.0.1:7412", 4, 1, &[(3, b"e")]).unwrap();
        fs::create_dir(dir.path().join("empty")).unwrap();
        let tmp_only = dir.path().join("tmp-only");
        fs::create_dir(&tmp_only).unwrap();
        fs::write(tmp_only.join(".x.bak.tmp"), b"").unwrap();
        assert_eq!(
            spooled_dirs(dir.path()),
            vec![
                server_dir(dir.path(), "127.0.0.1:7411"),
                server_dir(dir.path(), "127.0.0.1:7412")
            ]
        );
    }

    #[test]
    fn decode_never_panics_on_garbage() {
        let good = encode(3, &[(1, b"abc"), (2, b"defg")]);
        assert_eq!(
            decode(&good).unwrap(),
            (3, vec![(1, b"abc".to_vec()), (2, b"defg".to_vec())])
        );
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err());
        }
        let mut x = 0x1234_5678_u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = good.clone();
            let i = (x as usize) % b.len();
            b[i] = (x >> 32) as u8;
            let _ = decode(&b);
        }
    }
}
