//! `-exec`, `-execdir`, `-ok` and `-okdir`: commands run on the entries
//! `sextant find` reaches, as GNU find runs them.
//!
//! - `CMD ARGS ;` runs once per entry, with `{}` replaced by the entry's
//!   path wherever it occurs in an argument; the action's value is whether
//!   the command exited 0 (a command that cannot be started is reported
//!   and false, and — as with GNU find — leaves the exit status alone).
//! - `CMD ARGS {} +` collects paths and runs the command on as many at a
//!   time as fit in [`BATCH_BYTES`] of arguments: when a batch is full and
//!   at the end ([`Commands::finish`]). Always true; a run that fails,
//!   or cannot be started, makes the exit status 1.
//! - `-execdir`/`-okdir` run the command in the entry's directory on
//!   `./NAME`, so the path must be a local one (under a mount: the caller
//!   checks). `-execdir ... +` keeps a batch per directory. As find, they
//!   refuse a `$PATH` with a relative entry ([`check_path_env`]): a program
//!   planted in the directory searched would run instead.
//! - `-ok`/`-okdir` ask on stderr (`< CMD ARGS > ? `) and run only on an
//!   answer starting with `y` or `Y` read from stdin; the command's own
//!   stdin is then `/dev/null`.
//!
//! The caller flushes its own output before each action, so that what the
//! commands print comes after what was printed before them.

use super::parse::Exec;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Argument bytes of one `+` batch at most: well under the kernel's
/// `ARG_MAX` (2 MiB here) with the environment beside it, as find and
/// xargs keep theirs.
pub const BATCH_BYTES: usize = 128 * 1024;

/// The `+` batches waiting to run, and whether a command failed.
#[derive(Default)]
pub struct Commands {
    /// By the action's [`Exec::id`] and (`-execdir`) directory: entries
    /// do not arrive directory by directory, so each directory keeps its
    /// own batch until it is full or the search ends.
    batches: BTreeMap<(usize, Option<PathBuf>), Batch>,
    /// A command could not run, or a `+` run failed: exit status 1.
    pub failed: bool,
}

struct Batch {
    exec: Exec,
    args: Vec<OsString>,
    bytes: usize,
}

/// Where `-execdir` runs for an entry printed as `path`, and the argument
/// that names the entry there (`./NAME`).
fn split_for_dir(path: &[u8]) -> (PathBuf, Vec<u8>) {
    let dir = match super::printf::dir_name(path) {
        b"" => b"/",
        d => d,
    };
    let mut arg = b"./".to_vec();
    arg.extend_from_slice(super::typed_name(path));
    (PathBuf::from(OsStr::from_bytes(dir)), arg)
}

/// `arg` with every `{}` replaced by `path`.
fn substitute(arg: &str, path: &[u8]) -> OsString {
    let mut out = Vec::with_capacity(arg.len() + path.len());
    let mut rest = arg.as_bytes();
    while let Some(i) = rest.windows(2).position(|w| w == b"{}") {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(path);
        rest = &rest[i + 2..];
    }
    out.extend_from_slice(rest);
    OsString::from_vec(out)
}

/// `-execdir` and `-okdir` refuse a `$PATH` that searches a relative
/// directory (`.`, an empty entry, or any path not starting with `/`):
/// the command runs in directories the caller may not trust. The message
/// says which entry.
pub fn check_path_env(path_var: Option<&OsStr>) -> Result<(), String> {
    let Some(var) = path_var else {
        return Ok(());
    };
    for entry in var.as_bytes().split(|&c| c == b':') {
        if entry.is_empty() || entry == b"." {
            return Err("the current directory is included in the PATH environment \
                        variable, which is insecure in combination with -execdir and \
                        -okdir; remove it from $PATH (\".\", doubled colons, or leading \
                        or trailing colons)"
                .to_string());
        }
        if entry[0] != b'/' {
            return Err(format!(
                "the relative path '{}' is included in the PATH environment variable, \
                 which is insecure in combination with -execdir and -okdir; remove that \
                 entry from $PATH",
                String::from_utf8_lossy(entry)
            ));
        }
    }
    Ok(())
}

/// Asks the `-ok` question on stderr as find does (`< CMD ... PATH > ? `);
/// true on an answer starting with y/Y.
fn confirm(program: &str, path: &[u8]) -> bool {
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "< {program} ... {} > ? ",
        String::from_utf8_lossy(path)
    );
    let _ = err.flush();
    let mut answer = String::new();
    match std::io::stdin().read_line(&mut answer) {
        Ok(0) | Err(_) => false,
        Ok(_) => answer.trim_start().starts_with(['y', 'Y']),
    }
}

impl Commands {
    /// Performs `e` on the entry printed as `path`; returns the action's
    /// value. `report` shows a message (`sextant find: ...`).
    pub fn run(&mut self, e: &Exec, path: &[u8], report: &dyn Fn(&str)) -> bool {
        let (dir, arg) = if e.in_dir {
            let (d, a) = split_for_dir(path);
            (Some(d), a)
        } else {
            (None, path.to_vec())
        };
        if e.batch {
            self.add(e, dir, OsString::from_vec(arg), report);
            return true;
        }
        if e.ask && !confirm(&e.argv[0], path) {
            return false;
        }
        let argv: Vec<OsString> = e.argv.iter().map(|a| substitute(a, &arg)).collect();
        // A command that cannot start is only false (find's exit status
        // stays 0).
        match self.spawn(&argv, dir.as_ref(), e.ask, report) {
            Some(status) => status.success(),
            None => false,
        }
    }

    /// Adds one path to `e`'s batch (for its directory), running the batch
    /// first when the path would not fit.
    fn add(&mut self, e: &Exec, dir: Option<PathBuf>, arg: OsString, report: &dyn Fn(&str)) {
        let key = (e.id, dir);
        let full = self
            .batches
            .get(&key)
            .is_some_and(|b| !b.args.is_empty() && b.bytes + arg.len() + 1 > BATCH_BYTES);
        if full {
            if let Some(b) = self.batches.remove(&key) {
                self.run_batch(b, key.1.as_ref(), report);
            }
        }
        let b = self.batches.entry(key).or_insert_with(|| Batch {
            exec: e.clone(),
            args: Vec::new(),
            bytes: e.argv.iter().map(|a| a.len() + 1).sum(),
        });
        b.bytes += arg.len() + 1;
        b.args.push(arg);
    }

    fn run_batch(&mut self, b: Batch, dir: Option<&PathBuf>, report: &dyn Fn(&str)) {
        if b.args.is_empty() {
            return;
        }
        // The command's arguments, without the final `{}`.
        let fixed = &b.exec.argv[..b.exec.argv.len() - 1];
        let mut argv: Vec<OsString> = fixed.iter().map(OsString::from).collect();
        argv.extend(b.args);
        match self.spawn(&argv, dir, false, report) {
            Some(s) if s.success() => {}
            Some(s) => {
                if let Some(sig) = s.signal() {
                    report(&format!(
                        "'{}' terminated by signal {sig}",
                        argv[0].to_string_lossy()
                    ));
                }
                self.failed = true;
            }
            None => self.failed = true,
        }
    }

    /// Runs every batch still waiting (at the end of the search).
    pub fn finish(&mut self, report: &dyn Fn(&str)) {
        for ((_, dir), b) in std::mem::take(&mut self.batches) {
            self.run_batch(b, dir.as_ref(), report);
        }
    }

    /// Runs `argv` and waits; `None` (reported) when it could not be
    /// started.
    fn spawn(
        &mut self,
        argv: &[OsString],
        dir: Option<&PathBuf>,
        quiet_stdin: bool,
        report: &dyn Fn(&str),
    ) -> Option<std::process::ExitStatus> {
        let (program, args) = argv.split_first()?;
        let mut c = Command::new(program);
        c.args(args);
        if let Some(d) = dir {
            c.current_dir(d);
        }
        if quiet_stdin {
            c.stdin(Stdio::null());
        }
        match c.status() {
            Ok(s) => Some(s),
            Err(err) => {
                let why = super::describe_io(&err);
                match dir {
                    // Which of the two failed: the directory or the program.
                    Some(d) if !d.is_dir() => report(&format!("'{}': {why}", d.display())),
                    _ => report(&format!("'{}': {why}", program.to_string_lossy())),
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(argv: &[&str], batch: bool, in_dir: bool) -> Exec {
        Exec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            batch,
            in_dir,
            ask: false,
            id: 0,
        }
    }

    #[test]
    fn braces_are_replaced_anywhere_in_an_argument() {
        assert_eq!(substitute("{}", b"a/b"), OsString::from("a/b"));
        assert_eq!(substitute("x{}y{}", b"p"), OsString::from("xpyp"));
        assert_eq!(substitute("{", b"p"), OsString::from("{"));
        assert_eq!(substitute("none", b"p"), OsString::from("none"));
    }

    #[test]
    fn execdir_runs_in_the_entrys_directory() {
        assert_eq!(
            split_for_dir(b"mnt/a/b"),
            (PathBuf::from("mnt/a"), b"./b".to_vec())
        );
        assert_eq!(
            split_for_dir(b"mnt/a/"),
            (PathBuf::from("mnt"), b"./a".to_vec())
        );
        assert_eq!(split_for_dir(b"x"), (PathBuf::from("."), b"./x".to_vec()));
        assert_eq!(split_for_dir(b"."), (PathBuf::from("."), b"./.".to_vec()));
        assert_eq!(split_for_dir(b"/m"), (PathBuf::from("/"), b"./m".to_vec()));
    }

    #[test]
    fn relative_path_entries_are_refused_for_execdir() {
        assert!(check_path_env(Some(OsStr::new("/usr/bin:/bin"))).is_ok());
        assert!(check_path_env(None).is_ok());
        for bad in ["/bin:", ":/bin", "/bin::/usr/bin", ".:/bin", "/bin:bin"] {
            assert!(check_path_env(Some(OsStr::new(bad))).is_err(), "{bad}");
        }
    }

    #[test]
    fn commands_report_their_status() {
        let mut c = Commands::default();
        let quiet = |_: &str| {};
        assert!(c.run(&exec(&["true"], false, false), b"x", &quiet));
        assert!(!c.run(&exec(&["false"], false, false), b"x", &quiet));
        assert!(!c.failed, "a false test is not an error");
        // As GNU find: a command that cannot start is false, reported,
        // and not a failure of the run (find exits 0)...
        let said = std::cell::RefCell::new(Vec::new());
        let note = |m: &str| said.borrow_mut().push(m.to_string());
        assert!(!c.run(&exec(&["/nonexistent/cmd"], false, false), b"x", &note));
        assert_eq!(
            *said.borrow(),
            ["'/nonexistent/cmd': No such file or directory"]
        );
        assert!(!c.failed, "a command that cannot start is only false");
        // ... but for `+` it is (find exits 1).
        assert!(c.run(
            &exec(&["/nonexistent/cmd", "{}"], true, false),
            b"x",
            &quiet
        ));
        c.finish(&quiet);
        assert!(c.failed, "a batch that cannot start is a failure");
    }

    #[test]
    fn batches_split_when_full_and_run_at_the_end() {
        let dir = std::env::temp_dir().join(format!("sextant-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        let script = format!("echo $# >> {}", log.display());
        let e = exec(&["sh", "-c", &script, "sh", "{}"], true, false);
        let mut c = Commands::default();
        let long = vec![b'p'; 1000];
        for _ in 0..300 {
            assert!(c.run(&e, &long, &|m| panic!("{m}")));
        }
        c.finish(&|m| panic!("{m}"));
        let counts: Vec<usize> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(counts.iter().sum::<usize>(), 300, "{counts:?}");
        assert!(
            counts.len() >= 3,
            "300 kB of paths in 128 kB batches: {counts:?}"
        );
        assert!(!c.failed);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
