//! Turning attributes into text (ls -l style) or JSON.

use serde::Serialize;
use sextant_types::{Attr, FileType, Nanos};

/// An entry as `--json` prints it.
///
/// `path` is text: a path that is not UTF-8 shows U+FFFD for its bad bytes
/// there, and then `path_hex` holds the exact bytes (hex), so a script can
/// still name the file (names are bytes in POSIX, JSON strings are not).
#[derive(Serialize)]
pub struct JsonEntry<'a> {
    pub path: std::borrow::Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub soid: String,
    #[serde(rename = "type")]
    pub ftype: &'static str,
    pub mode: String,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

pub fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::Regular => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::CharDevice => "char-device",
        FileType::BlockDevice => "block-device",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
    }
}

pub fn json_entry<'a>(path: &'a [u8], a: &Attr) -> JsonEntry<'a> {
    let text = String::from_utf8_lossy(path);
    let path_hex = matches!(text, std::borrow::Cow::Owned(_)).then(|| hex(path));
    JsonEntry {
        path: text,
        path_hex,
        soid: a.soid.to_string(),
        ftype: type_name(a.ftype),
        mode: format!("{:04o}", a.perm),
        uid: a.uid,
        gid: a.gid,
        nlink: a.nlink,
        size: a.size,
        atime_ns: a.atime.0,
        mtime_ns: a.mtime.0,
        ctime_ns: a.ctime.0,
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// `drwxr-xr-x`.
pub fn mode_string(a: &Attr) -> String {
    let t = match a.ftype {
        FileType::Directory => 'd',
        FileType::Symlink => 'l',
        FileType::CharDevice => 'c',
        FileType::BlockDevice => 'b',
        FileType::Fifo => 'p',
        FileType::Socket => 's',
        FileType::Regular => '-',
    };
    let p = a.perm;
    let bit = |mask: u32, c: char| if p & mask != 0 { c } else { '-' };
    let exec = |x: u32, special: u32, set: char, unset: char| match (p & x != 0, p & special != 0) {
        (true, true) => set,
        (false, true) => unset,
        (true, false) => 'x',
        (false, false) => '-',
    };
    [
        t,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        exec(0o100, 0o4000, 's', 'S'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        exec(0o010, 0o2000, 's', 'S'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        exec(0o001, 0o1000, 't', 'T'),
    ]
    .iter()
    .collect()
}

/// UTC `YYYY-MM-DD HH:MM:SS` (civil-from-days, no time zone database).
pub fn time_string(t: Nanos) -> String {
    let secs = t.secs();
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::Soid;

    #[test]
    fn civil_time() {
        assert_eq!(time_string(Nanos(0)), "1970-01-01 00:00:00");
        assert_eq!(
            time_string(Nanos(1_700_000_000 * 1_000_000_000)),
            "2023-11-14 22:13:20"
        );
        assert_eq!(time_string(Nanos(-1_000_000_000)), "1969-12-31 23:59:59");
    }

    fn attr() -> Attr {
        Attr {
            soid: Soid::ROOT,
            ftype: FileType::Regular,
            perm: 0o644,
            uid: 1,
            gid: 2,
            nlink: 1,
            size: 3,
            atime: Nanos(4),
            mtime: Nanos(5),
            ctime: Nanos(6),
            rdev: 0,
            parent: Soid::ROOT,
            no_xattrs: false,
        }
    }

    /// A UTF-8 path is the `path` string alone; any other keeps its exact
    /// bytes in `path_hex` (and shows U+FFFD in `path`).
    #[test]
    fn non_utf8_paths_keep_their_bytes() {
        let v = serde_json::to_value(json_entry("/a/ü b".as_bytes(), &attr())).unwrap();
        assert_eq!(v["path"], "/a/ü b");
        assert!(v.get("path_hex").is_none());
        let raw = b"/a/bad\xff\xfe";
        let v = serde_json::to_value(json_entry(raw, &attr())).unwrap();
        assert_eq!(v["path"], "/a/bad\u{fffd}\u{fffd}");
        assert_eq!(v["path_hex"], "2f612f626164fffe");
        assert_eq!(hex(&[0, 0x0f, 0xf0, 0xff]), "000ff0ff");
    }
}
