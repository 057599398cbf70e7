//! The file-system side of `sextant bench --dir PATH`: plain system calls
//! on a mounted (or any local) directory from N threads, optionally in P
//! worker processes (the same binary, re-run with [`WORKER_ENV`] set and
//! driven phase by phase over its stdin/stdout).
//!
//! Each worker opens its directory once per phase and names items relative
//! to it (`openat`, `fstatat`, `unlinkat`, …), so one operation is one
//! lookup of one name, not a walk of the whole path.

use super::plan::{Kind, Layout, Op, Phase};
use super::remote::Outcome;
use super::Progress;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

/// Set (to the worker's process index) in a worker process's environment.
pub const WORKER_ENV: &str = "SEXTANT_BENCH_WORKER";
/// The run's root directory, passed to worker processes.
pub const ROOT_ENV: &str = "SEXTANT_BENCH_ROOT";
/// What a worker prints once it is ready for its first phase.
const READY: &str = "ready";

/// The workers of one process.
pub struct Local {
    /// The run's root directory.
    pub root: PathBuf,
    pub layout: Layout,
    /// Workers (threads) in this process.
    pub threads: usize,
    /// Global number of this process's first worker.
    pub first_task: usize,
    pub readdir_passes: usize,
}

/// One worker's reply to a phase, as a worker process sends it.
#[derive(Serialize, Deserialize)]
struct Reply {
    latencies_ns: Vec<u64>,
    entries: u64,
    error: Option<String>,
}

fn cstr(name: &str) -> Result<CString> {
    CString::new(name).with_context(|| format!("{name:?} contains a NUL byte"))
}

fn os_err(what: &str, name: &str) -> anyhow::Error {
    anyhow::Error::new(std::io::Error::last_os_error()).context(format!("{what} {name}"))
}

/// An open directory, closed on drop.
struct DirFd(libc::c_int);

impl DirFd {
    fn open(path: &Path) -> Result<DirFd> {
        let p = CString::new(path.as_os_str().as_bytes())
            .with_context(|| format!("{} contains a NUL byte", path.display()))?;
        // SAFETY: a valid NUL-terminated path; the fd is owned by DirFd.
        let fd = unsafe {
            libc::open(
                p.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(os_err("opening directory", &path.display().to_string()));
        }
        Ok(DirFd(fd))
    }
}

impl Drop for DirFd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// One operation on `name` in the directory `d`.
fn one(d: &DirFd, phase: Phase, name: &str) -> Result<()> {
    let c = cstr(name)?;
    // SAFETY (every block): `d.0` is an open directory, `c` a valid
    // NUL-terminated name, and `st` a struct we own; descriptors we open
    // are closed right away.
    let rc = match (phase.op, phase.kind) {
        (Op::Create, Kind::File) => unsafe {
            let fd = libc::openat(
                d.0,
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            );
            if fd >= 0 {
                libc::close(fd)
            } else {
                fd
            }
        },
        (Op::Create, Kind::Dir) => unsafe { libc::mkdirat(d.0, c.as_ptr(), 0o755) },
        (Op::Stat, _) => unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstatat(d.0, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW)
        },
        (Op::Lookup, _) => unsafe {
            // O_PATH: resolve the name only; no open reaches the file system.
            let fd = libc::openat(
                d.0,
                c.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                libc::close(fd)
            } else {
                fd
            }
        },
        (Op::Remove, Kind::File) => unsafe { libc::unlinkat(d.0, c.as_ptr(), 0) },
        (Op::Remove, Kind::Dir) => unsafe { libc::unlinkat(d.0, c.as_ptr(), libc::AT_REMOVEDIR) },
        (Op::Readdir, _) => bail!("readdir is not a per-item operation"),
    };
    if rc < 0 {
        return Err(os_err(phase.op.name(), name));
    }
    Ok(())
}

impl Local {
    /// Runs one phase on this process's threads.
    pub fn phase(&self, phase: Phase, progress: &Progress) -> Result<Outcome> {
        let results: Vec<Result<(Vec<u64>, u64)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.threads)
                .map(|i| {
                    let task = self.first_task + i;
                    s.spawn(move || self.worker(phase, task, progress))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker panicked")))
                })
                .collect()
        });
        let mut out = Outcome {
            latencies_ns: Vec::new(),
            entries: 0,
        };
        for r in results {
            let (lat, entries) = r?;
            out.latencies_ns.extend(lat);
            out.entries += entries;
        }
        Ok(out)
    }

    fn worker(&self, phase: Phase, task: usize, progress: &Progress) -> Result<(Vec<u64>, u64)> {
        let dir = self.root.join(self.layout.dir_of(task));
        let run = || -> Result<(Vec<u64>, u64)> {
            let mut entries = 0u64;
            if phase.op == Op::Readdir {
                let mut lat = Vec::with_capacity(self.readdir_passes);
                for _ in 0..self.readdir_passes {
                    let t = Instant::now();
                    for e in std::fs::read_dir(&dir).context("readdir")? {
                        e.context("readdir")?;
                        entries += 1;
                    }
                    lat.push(t.elapsed().as_nanos() as u64);
                    progress.tick();
                }
                return Ok((lat, entries));
            }
            let d = DirFd::open(&dir)?;
            let mut lat = Vec::with_capacity(self.layout.items);
            for i in 0..self.layout.items {
                let name = self.layout.item(phase.kind, task, i);
                let t = Instant::now();
                one(&d, phase, &name)?;
                lat.push(t.elapsed().as_nanos() as u64);
                progress.tick();
            }
            Ok((lat, entries))
        };
        run().with_context(|| format!("{phase}, worker {task} in {}", dir.display()))
    }

    /// The loop of a worker process: announce readiness, then run each
    /// phase named on stdin and reply with one JSON line, until stdin
    /// closes.
    pub fn serve_parent(&self) -> Result<()> {
        for d in (0..self.threads).map(|i| self.root.join(self.layout.dir_of(self.first_task + i)))
        {
            DirFd::open(&d)?;
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{READY}")?;
        out.flush()?;
        let progress = Progress::default();
        for line in std::io::stdin().lock().lines() {
            let line = line.context("reading the next phase")?;
            let phase = Phase::parse(line.trim())?;
            let reply = match self.phase(phase, &progress) {
                Ok(o) => Reply {
                    latencies_ns: o.latencies_ns,
                    entries: o.entries,
                    error: None,
                },
                Err(e) => Reply {
                    latencies_ns: Vec::new(),
                    entries: 0,
                    error: Some(format!("{e:#}")),
                },
            };
            serde_json::to_writer(&mut out, &reply)?;
            writeln!(out)?;
            out.flush()?;
        }
        Ok(())
    }
}

/// Worker processes of one run, each with its threads.
pub struct Pool {
    workers: Vec<Worker>,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Pool {
    /// Starts `processes` copies of this command as workers on `root` and
    /// waits until each is ready.
    pub fn start(processes: usize, root: &Path) -> Result<Pool> {
        let exe = std::env::current_exe().context("finding this program")?;
        let mut workers = Vec::with_capacity(processes);
        for p in 0..processes {
            let mut child = Command::new(&exe)
                .args(std::env::args_os().skip(1))
                .env(WORKER_ENV, p.to_string())
                .env(ROOT_ENV, root)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting a worker process")?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                bail!("a worker process has no pipes");
            };
            workers.push(Worker {
                child,
                stdin,
                stdout: BufReader::new(stdout),
            });
        }
        let mut pool = Pool { workers };
        for (p, w) in pool.workers.iter_mut().enumerate() {
            let mut line = String::new();
            w.stdout.read_line(&mut line)?;
            if line.trim() != READY {
                bail!("worker process {p} failed to start");
            }
        }
        Ok(pool)
    }

    /// Runs `phase` in every worker process at once.
    pub fn phase(&mut self, phase: Phase) -> Result<Outcome> {
        for (p, w) in self.workers.iter_mut().enumerate() {
            writeln!(w.stdin, "{phase}")
                .and_then(|()| w.stdin.flush())
                .with_context(|| format!("worker process {p} is gone"))?;
        }
        let mut out = Outcome {
            latencies_ns: Vec::new(),
            entries: 0,
        };
        for (p, w) in self.workers.iter_mut().enumerate() {
            let mut line = String::new();
            w.stdout.read_line(&mut line)?;
            let r: Reply = serde_json::from_str(&line)
                .with_context(|| format!("worker process {p} did not reply to {phase}"))?;
            if let Some(e) = r.error {
                bail!("worker process {p}: {e}");
            }
            out.latencies_ns.extend(r.latencies_ns);
            out.entries += r.entries;
        }
        Ok(out)
    }

    /// Closes the workers' stdin and waits for them to exit.
    pub fn finish(mut self) -> Result<()> {
        let workers = std::mem::take(&mut self.workers);
        for (p, w) in workers.into_iter().enumerate() {
            let Worker {
                mut child, stdin, ..
            } = w;
            drop(stdin);
            let status = child.wait()?;
            if !status.success() {
                bail!("worker process {p} failed ({status})");
            }
        }
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Only workers not waited for by finish() are left: an error path.
        // Do not leave them behind.
        for w in &mut self.workers {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}
