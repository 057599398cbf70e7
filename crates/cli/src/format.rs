//! Turning attributes into text (ls -l style) or JSON.

use serde::Serialize;
use sextant_types::{Attr, FileType, Nanos};

/// An entry as `--json` prints it.
#[derive(Serialize)]
pub struct JsonEntry<'a> {
    pub path: &'a str,
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

pub fn json_entry<'a>(path: &'a str, a: &Attr) -> JsonEntry<'a> {
    JsonEntry {
        path,
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

    #[test]
    fn civil_time() {
        assert_eq!(time_string(Nanos(0)), "1970-01-01 00:00:00");
        assert_eq!(
            time_string(Nanos(1_700_000_000 * 1_000_000_000)),
            "2023-11-14 22:13:20"
        );
        assert_eq!(time_string(Nanos(-1_000_000_000)), "1969-12-31 23:59:59");
    }
}
