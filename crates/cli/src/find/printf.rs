//! `-printf` formats and `-ls` lines, as GNU find writes them.
//!
//! [`parse`] turns a format into segments once (an unknown directive or
//! escape is an error naming it, never printed literally); [`render`]
//! writes one entry. Times are local time (`localtime_r`, so `TZ`
//! applies) and keep find's quirk of printing fractional seconds with ten
//! digits (nanoseconds followed by `0`). `%i` and `-ls` print
//! [`Facts::ino`] (the number the mount shows under a mount, else the
//! SOID) and `%b`/`%k` are derived from the size (512-byte blocks rounded
//! up, as the mount reports them).

use sextant_engine::bloom::TimeAttr;
use sextant_types::{Attr, FileType, Nanos};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format(pub Vec<Seg>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Lit(Vec<u8>),
    Field {
        left: bool,
        width: usize,
        prec: Option<usize>,
        field: Field,
    },
    /// `\c`: stop printing this format (and flush).
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFmt {
    /// `%a %c %t`: like ctime(3), with fractional seconds.
    Ctime,
    /// `%A@`: seconds since the epoch, fractional.
    Epoch,
    /// `%Ak` for a strftime letter `k` (`S`, `T`, `X` and `+` with
    /// fractions).
    Strf(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Path,
    Name,
    Dir,
    Rel,
    Start,
    Size,
    Mode,
    ModeSym,
    User,
    Group,
    Uid,
    Gid,
    Links,
    Inode,
    Type,
    /// `%Y`: the type, following a symlink (`N` dangling, `L` loop, `?`
    /// other errors).
    TypeFollow,
    Depth,
    Link,
    Blocks,
    KBlocks,
    /// `%F`: the file system type (see [`Facts::fstype`]).
    FsType,
    Time(TimeAttr, TimeFmt),
}

impl Format {
    /// Does rendering need what only `stat` tells, beside the path and
    /// depth — and, when `typed`, the type and inode number, which readdir
    /// gives (see [`super::plan::Blind`])?
    pub fn needs_stat(&self, typed: bool) -> bool {
        self.0.iter().any(|s| match s {
            Seg::Field { field, .. } => match field {
                Field::Path
                | Field::Name
                | Field::Dir
                | Field::Rel
                | Field::Start
                | Field::Depth => false,
                Field::Type | Field::Inode => !typed,
                _ => true,
            },
            _ => false,
        })
    }

    /// Does rendering print the inode number (`%i`)?
    pub fn needs_inode(&self) -> bool {
        self.0.iter().any(|s| {
            matches!(
                s,
                Seg::Field {
                    field: Field::Inode,
                    ..
                }
            )
        })
    }

    /// Does rendering need what a symlink resolves to (`%Y`)?
    pub fn needs_target(&self) -> bool {
        self.0.iter().any(|s| {
            matches!(
                s,
                Seg::Field {
                    field: Field::TypeFollow,
                    ..
                }
            )
        })
    }

    /// Does rendering need the symlink target?
    pub fn needs_link(&self) -> bool {
        self.0.iter().any(|s| {
            matches!(
                s,
                Seg::Field {
                    field: Field::Link,
                    ..
                }
            )
        })
    }
}

const STRF_LETTERS: &[u8] = b"aAbBcdDeFgGhHIjklmMnpr+sStTuUVwWxXyYzZ";

/// Parses a `-printf` format.
pub fn parse(f: &[u8]) -> Result<Format, String> {
    let mut segs = Vec::new();
    let mut lit = Vec::new();
    let mut i = 0;
    while i < f.len() {
        match f[i] {
            b'\\' => {
                let Some(&c) = f.get(i + 1) else {
                    lit.push(b'\\');
                    i += 1;
                    continue;
                };
                i += 2;
                match c {
                    b'n' => lit.push(b'\n'),
                    b't' => lit.push(b'\t'),
                    b'0'..=b'7' => {
                        let mut v: u32 = (c - b'0') as u32;
                        let mut k = 0;
                        while k < 2 && i < f.len() && (b'0'..=b'7').contains(&f[i]) {
                            v = v * 8 + (f[i] - b'0') as u32;
                            i += 1;
                            k += 1;
                        }
                        lit.push(v as u8);
                    }
                    b'\\' => lit.push(b'\\'),
                    b'a' => lit.push(7),
                    b'b' => lit.push(8),
                    b'f' => lit.push(12),
                    b'r' => lit.push(b'\r'),
                    b'v' => lit.push(11),
                    b'c' => {
                        if !lit.is_empty() {
                            segs.push(Seg::Lit(std::mem::take(&mut lit)));
                        }
                        segs.push(Seg::Stop);
                    }
                    other => {
                        return Err(format!(
                            "unrecognized escape '\\{}' in -printf format",
                            other as char
                        ))
                    }
                }
            }
            b'%' => {
                i += 1;
                if f.get(i) == Some(&b'%') {
                    lit.push(b'%');
                    i += 1;
                    continue;
                }
                let mut left = false;
                while let Some(&c) = f.get(i) {
                    match c {
                        b'-' => left = true,
                        b'+' | b' ' | b'#' | b'0' => {}
                        _ => break,
                    }
                    i += 1;
                }
                let mut width = 0usize;
                while let Some(&c) = f.get(i).filter(|c| c.is_ascii_digit()) {
                    width = width.saturating_mul(10).saturating_add((c - b'0') as usize);
                    i += 1;
                }
                let mut prec = None;
                if f.get(i) == Some(&b'.') {
                    i += 1;
                    let mut p = 0usize;
                    while let Some(&c) = f.get(i).filter(|c| c.is_ascii_digit()) {
                        p = p.saturating_mul(10).saturating_add((c - b'0') as usize);
                        i += 1;
                    }
                    prec = Some(p);
                }
                let Some(&d) = f.get(i) else {
                    return Err("-printf format ends with an incomplete '%' directive".into());
                };
                i += 1;
                let time = |which: TimeAttr, i: &mut usize| -> Result<Field, String> {
                    let Some(&k) = f.get(*i) else {
                        return Err(format!(
                            "-printf directive '%{}' needs a time letter after it",
                            d as char
                        ));
                    };
                    *i += 1;
                    if k == b'@' {
                        Ok(Field::Time(which, TimeFmt::Epoch))
                    } else if STRF_LETTERS.contains(&k) {
                        Ok(Field::Time(which, TimeFmt::Strf(k)))
                    } else {
                        Err(format!(
                            "unrecognized -printf time directive '%{}{}'",
                            d as char, k as char
                        ))
                    }
                };
                let field = match d {
                    b'p' => Field::Path,
                    b'f' => Field::Name,
                    b'h' => Field::Dir,
                    b'P' => Field::Rel,
                    b'H' => Field::Start,
                    b's' => Field::Size,
                    b'm' => Field::Mode,
                    b'M' => Field::ModeSym,
                    b'u' => Field::User,
                    b'g' => Field::Group,
                    b'U' => Field::Uid,
                    b'G' => Field::Gid,
                    b'n' => Field::Links,
                    b'i' => Field::Inode,
                    b'y' => Field::Type,
                    b'Y' => Field::TypeFollow,
                    b'd' => Field::Depth,
                    b'l' => Field::Link,
                    b'b' => Field::Blocks,
                    b'k' => Field::KBlocks,
                    b'F' => Field::FsType,
                    b'a' => Field::Time(TimeAttr::Atime, TimeFmt::Ctime),
                    b'c' => Field::Time(TimeAttr::Ctime, TimeFmt::Ctime),
                    b't' => Field::Time(TimeAttr::Mtime, TimeFmt::Ctime),
                    b'A' => time(TimeAttr::Atime, &mut i)?,
                    b'C' => time(TimeAttr::Ctime, &mut i)?,
                    b'T' => time(TimeAttr::Mtime, &mut i)?,
                    other => {
                        return Err(format!(
                            "-printf directive '%{}' is not supported",
                            other as char
                        ))
                    }
                };
                if !lit.is_empty() {
                    segs.push(Seg::Lit(std::mem::take(&mut lit)));
                }
                segs.push(Seg::Field {
                    left,
                    width,
                    prec,
                    field,
                });
            }
            c => {
                lit.push(c);
                i += 1;
            }
        }
    }
    if !lit.is_empty() {
        segs.push(Seg::Lit(lit));
    }
    Ok(Format(segs))
}

/// What rendering one entry needs.
pub struct Facts<'a> {
    /// The path as printed (`%p`).
    pub path: &'a [u8],
    /// The starting point as typed (`%H`).
    pub start: &'a [u8],
    pub depth: u32,
    pub attr: &'a Attr,
    /// The inode number `%i` and `-ls` print: under a mount the one the
    /// mount shows (`st_ino`, its node id), else the SOID.
    pub ino: u128,
    /// Symlink target, when known.
    pub link: Option<&'a [u8]>,
    /// For a symlink, `%Y`'s letter for what it resolves to.
    pub follow_type: Option<u8>,
    pub user: &'a str,
    pub group: &'a str,
    /// The starting point's file system type (`%F`, `-fstype`).
    pub fstype: &'a str,
}

/// The index where the last component starts, ignoring trailing slashes
/// (`None`: no slash before it).
fn last_slash(p: &[u8]) -> Option<usize> {
    let mut end = p.len();
    while end > 1 && p[end - 1] == b'/' {
        end -= 1;
    }
    p[..end].iter().rposition(|&c| c == b'/')
}

/// `%f`: the last component, trailing slashes kept (`/` for `/`), as GNU
/// find's base_name.
pub fn base_name(p: &[u8]) -> &[u8] {
    if !p.is_empty() && p.iter().all(|&c| c == b'/') {
        return b"/";
    }
    match last_slash(p) {
        Some(i) => &p[i + 1..],
        None => p,
    }
}

/// `%h`: everything before the last component (`.` without a slash).
pub fn dir_name(p: &[u8]) -> &[u8] {
    match last_slash(p) {
        Some(i) => &p[..i],
        None => b".",
    }
}

pub fn type_letter(t: FileType) -> u8 {
    match t {
        FileType::Regular => b'f',
        FileType::Directory => b'd',
        FileType::Symlink => b'l',
        FileType::CharDevice => b'c',
        FileType::BlockDevice => b'b',
        FileType::Fifo => b'p',
        FileType::Socket => b's',
    }
}

/// 512-byte blocks (as the mount reports `st_blocks`).
pub fn blocks(a: &Attr) -> u64 {
    a.size.div_ceil(512)
}

fn frac(t: Nanos) -> String {
    format!("{:09}0", t.subsec_nanos())
}

fn local(t: Nanos) -> libc::tm {
    let secs = t.secs() as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`; a zeroed tm is a valid
    // value to start from.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    }
}

/// strftime(3) of one format in local time.
pub fn strftime(t: Nanos, fmt: &str) -> String {
    let tm = local(t);
    let Ok(cfmt) = std::ffi::CString::new(fmt) else {
        return String::new();
    };
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its length; strftime writes at
    // most that many bytes and returns how many.
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
            cfmt.as_ptr(),
            &tm,
        )
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn time_of(a: &Attr, which: TimeAttr) -> Nanos {
    match which {
        TimeAttr::Atime => a.atime,
        TimeAttr::Mtime => a.mtime,
        TimeAttr::Ctime => a.ctime,
    }
}

fn time_field(t: Nanos, f: TimeFmt) -> String {
    match f {
        TimeFmt::Ctime => format!(
            "{}.{} {}",
            strftime(t, "%a %b %e %H:%M:%S"),
            frac(t),
            strftime(t, "%Y")
        ),
        TimeFmt::Epoch => format!("{}.{}", t.secs(), frac(t)),
        TimeFmt::Strf(b'S') => format!("{}.{}", strftime(t, "%S"), frac(t)),
        TimeFmt::Strf(b'T') => format!("{}.{}", strftime(t, "%H:%M:%S"), frac(t)),
        // The locale's time, which ends with the seconds (find's own list
        // of the directives that take the fraction: S, T, X, +, @).
        TimeFmt::Strf(b'X') => format!("{}.{}", strftime(t, "%X"), frac(t)),
        TimeFmt::Strf(b'+') => format!("{}.{}", strftime(t, "%Y-%m-%d+%H:%M:%S"), frac(t)),
        TimeFmt::Strf(k) => strftime(t, &format!("%{}", k as char)),
    }
}

/// `-rw-r--r--`.
pub fn mode_string(a: &Attr) -> String {
    crate::format::mode_string(a)
}

fn field(f: Field, x: &Facts<'_>) -> Vec<u8> {
    let a = x.attr;
    let s = |v: String| v.into_bytes();
    match f {
        Field::Path => x.path.to_vec(),
        Field::Name => base_name(x.path).to_vec(),
        Field::Dir => dir_name(x.path).to_vec(),
        Field::Rel => {
            let rel = x.path.strip_prefix(x.start).unwrap_or(x.path);
            rel.strip_prefix(b"/").unwrap_or(rel).to_vec()
        }
        Field::Start => x.start.to_vec(),
        Field::Size => s(a.size.to_string()),
        Field::Mode => s(format!("{:o}", a.perm & 0o7777)),
        Field::ModeSym => s(mode_string(a)),
        Field::User => s(x.user.to_string()),
        Field::Group => s(x.group.to_string()),
        Field::Uid => s(a.uid.to_string()),
        Field::Gid => s(a.gid.to_string()),
        Field::Links => s(a.nlink.to_string()),
        Field::Inode => s(x.ino.to_string()),
        Field::Type => vec![type_letter(a.ftype)],
        Field::TypeFollow => vec![x.follow_type.unwrap_or_else(|| type_letter(a.ftype))],
        Field::Depth => s(x.depth.to_string()),
        Field::Link => x.link.unwrap_or_default().to_vec(),
        Field::Blocks => s(blocks(a).to_string()),
        Field::KBlocks => s(blocks(a).div_ceil(2).to_string()),
        Field::FsType => x.fstype.as_bytes().to_vec(),
        Field::Time(which, tf) => s(time_field(time_of(a, which), tf)),
    }
}

/// Appends one entry's rendering of `fmt` to `out`.
pub fn render(fmt: &Format, x: &Facts<'_>, out: &mut Vec<u8>) {
    for seg in &fmt.0 {
        match seg {
            Seg::Lit(l) => out.extend_from_slice(l),
            Seg::Stop => return,
            Seg::Field {
                left,
                width,
                prec,
                field: f,
            } => {
                let mut v = field(*f, x);
                if let Some(p) = prec {
                    if !matches!(f, Field::Size | Field::Links | Field::Depth) {
                        v.truncate(*p);
                    }
                }
                let pad = width.saturating_sub(v.len());
                if !*left {
                    out.extend(std::iter::repeat_n(b' ', pad));
                }
                out.extend_from_slice(&v);
                if *left {
                    out.extend(std::iter::repeat_n(b' ', pad));
                }
            }
        }
    }
}

/// One `-ls` line (without the newline): inode ([`Facts::ino`]), 1 KiB blocks,
/// mode, links, owner, group, size (or major, minor), date, path and
/// `-> target` for symlinks. GNU find widens its columns as it goes; ours
/// are fixed, so compare `-ls` output with whitespace collapsed.
pub fn ls_line(x: &Facts<'_>, now: Nanos) -> Vec<u8> {
    let a = x.attr;
    let size = match a.ftype {
        FileType::CharDevice | FileType::BlockDevice => {
            let dev = a.rdev as libc::dev_t;
            format!("{:>3}, {:>3}", libc::major(dev), libc::minor(dev))
        }
        _ => a.size.to_string(),
    };
    const HALF_YEAR: i64 = 31_556_952 / 2 * 1_000_000_000;
    let recent = a.mtime.0 > now.0.saturating_sub(HALF_YEAR) && a.mtime.0 <= now.0;
    let date = strftime(a.mtime, if recent { "%b %e %H:%M" } else { "%b %e  %Y" });
    let mut out = format!(
        "{:>9} {:>6} {} {:>3} {:<8} {:<8} {:>8} {} ",
        x.ino,
        blocks(a).div_ceil(2),
        mode_string(a),
        a.nlink,
        x.user,
        x.group,
        size,
        date
    )
    .into_bytes();
    ls_quote(x.path, &mut out);
    if a.ftype == FileType::Symlink {
        out.extend_from_slice(b" -> ");
        ls_quote(x.link.unwrap_or_default(), &mut out);
    }
    out
}

/// Names in `-ls` lines are escaped as GNU find's listing does: `\ ` for a
/// space, C escapes for control characters, `\NNN` for other bytes outside
/// printable ASCII.
fn ls_quote(name: &[u8], out: &mut Vec<u8>) {
    for &c in name {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            8 => out.extend_from_slice(b"\\b"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            12 => out.extend_from_slice(b"\\f"),
            b' ' => out.extend_from_slice(b"\\ "),
            b'"' => out.extend_from_slice(b"\\\""),
            0x21..=0x7e => out.push(c),
            _ => out.extend_from_slice(format!("\\{c:03o}").as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::Soid;

    fn attr() -> Attr {
        Attr {
            soid: Soid::from_u128(77),
            ftype: FileType::Regular,
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 2,
            size: 1025,
            rdev: 0,
            atime: Nanos(1_767_323_045_123_456_789),
            mtime: Nanos(1_767_323_045_123_456_789),
            ctime: Nanos(5),
            parent: Soid::ROOT,
            no_xattrs: false,
        }
    }

    /// An entry at depth 2 owned by alice:users on a mount.
    fn facts<'a>(a: &'a Attr, path: &'a [u8], start: &'a [u8]) -> Facts<'a> {
        Facts {
            path,
            start,
            depth: 2,
            attr: a,
            ino: a.soid.as_u128(),
            link: None,
            follow_type: None,
            user: "alice",
            group: "users",
            fstype: "fuse.sextant",
        }
    }

    fn show(fmt: &str, path: &str, start: &str) -> String {
        let a = attr();
        let x = facts(&a, path.as_bytes(), start.as_bytes());
        let mut out = Vec::new();
        render(&parse(fmt.as_bytes()).unwrap(), &x, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn directives() {
        assert_eq!(
            show("%p|%f|%h|%P|%H|%d\\n", "mnt/a/b.txt", "mnt"),
            "mnt/a/b.txt|b.txt|mnt/a|a/b.txt|mnt|2\n"
        );
        assert_eq!(
            show("%s %m %M %u %g %U %G %n %y %Y %i %b %k", "x", "x"),
            "1025 4755 -rwsr-xr-x alice users 1000 100 2 f f 77 3 2"
        );
        assert_eq!(
            show("%T@ %C@", "x", "x"),
            "1767323045.1234567890 0.0000000050"
        );
        assert_eq!(
            show("%%\\t\\0\\\\%5s|%-4U|%.2f", "abc", "abc"),
            "%\t\0\\ 1025|1000|ab"
        );
        assert_eq!(show("a\\cb", "x", "x"), "a");
        assert_eq!(show("\\101", "x", "x"), "A");
        // Ten fractional digits, like find, after the seconds of %S, %T,
        // %X and %+ (and not after other letters).
        let at = Nanos(1_767_323_045_123_456_789);
        assert_eq!(
            show("%TS|%AT|%TX|%T+|%Ts|%TM", "x", "x"),
            format!(
                "{}.1234567890|{}.1234567890|{}.1234567890|{}.1234567890|1767323045|{}",
                strftime(at, "%S"),
                strftime(at, "%H:%M:%S"),
                strftime(at, "%X"),
                strftime(at, "%Y-%m-%d+%H:%M:%S"),
                strftime(at, "%M"),
            )
        );
    }

    #[test]
    fn what_needs_stat() {
        let needs = |f: &str, typed: bool| parse(f.as_bytes()).unwrap().needs_stat(typed);
        assert!(!needs("%p %f %h %P %H %d %% x\\n", false));
        assert!(needs("%y", false) && needs("%i", false));
        assert!(!needs("%y %i", true));
        for f in ["%s", "%m", "%u", "%l", "%Y", "%TS", "%a", "%n", "%k", "%F"] {
            assert!(needs(f, true), "{f}");
        }
    }

    #[test]
    fn names_like_gnu_find() {
        assert_eq!(base_name(b"/tmp/ft/"), b"ft/");
        assert_eq!(dir_name(b"/tmp/ft/"), b"/tmp");
        assert_eq!(base_name(b"/"), b"/");
        assert_eq!(dir_name(b"/"), b"");
        assert_eq!(dir_name(b"/tmp"), b"");
        assert_eq!(base_name(b"."), b".");
        assert_eq!(dir_name(b"."), b".");
        assert_eq!(dir_name(b"./a"), b".");
    }

    #[test]
    fn ls_names_are_escaped() {
        let mut out = Vec::new();
        ls_quote(b"a b\\c\n\x01\"\xc3", &mut out);
        assert_eq!(out, b"a\\ b\\\\c\\n\\001\\\"\\303");
    }

    #[test]
    fn bad_formats_are_refused_by_name() {
        assert!(parse(b"%Q").unwrap_err().contains("%Q"));
        assert!(parse(b"%D").unwrap_err().contains("%D"));
        assert!(parse(b"%Z").unwrap_err().contains("%Z"));
        assert!(parse(b"%T").unwrap_err().contains("time letter"));
        assert!(parse(b"%Tq").unwrap_err().contains("%Tq"));
        assert!(parse(b"\\q").unwrap_err().contains("\\q"));
        assert!(parse(b"abc%").unwrap_err().contains("incomplete"));
    }

    use proptest::prelude::*;

    proptest! {
        /// Any format parses or is refused, and a parsed one renders any
        /// entry without a panic (widths and precisions near their
        /// limits, every directive, times far from now).
        #[test]
        fn any_format_parses_or_errs_and_renders(
            fmt in proptest::collection::vec(
                prop_oneof![
                    3 => proptest::sample::select(b"%\\-+.0123456789aAbcCdDfFgGhHiklmMnpPsStTuUyYZ@ \n".to_vec()),
                    1 => any::<u8>(),
                ],
                0..24,
            ),
            size in any::<u64>(),
            time in any::<i64>(),
            perm in 0u32..0o10000,
        ) {
            if let Ok(f) = parse(&fmt) {
                let mut a = attr();
                (a.size, a.mtime, a.atime, a.ctime, a.perm) =
                    (size, Nanos(time), Nanos(time.wrapping_neg()), Nanos(time / 3), perm);
                let mut out = Vec::new();
                render(&f, &facts(&a, b"mnt/a/b", b"mnt"), &mut out);
            }
        }
    }
}
