//! `sextant mount` and `sextant umount`.
//!
//! Without `-f` the command re-runs itself as a detached child (its own
//! session, stdin closed) and returns once the child reports the mount is in
//! place, or fails with the child's error. The child then sends its output to
//! `--log FILE` (default: nowhere) so it holds no caller's terminal or pipe.

use crate::Cli;
use anyhow::{bail, Context, Result};
use sextant_client::{Client, Options};
use sextant_fuse::{MountConfig, ReaddirPlus};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set in the detached child of a background mount.
const CHILD_ENV: &str = "SEXTANT_MOUNT_CHILD";
/// What the child says on stdout once mounted.
const READY: &str = "mounted";

#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// Directory to mount on.
    pub mountpoint: PathBuf,
    /// Where file data is kept (one object file per inode) [default:
    /// <data>/objects]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Seconds the kernel may cache attributes [default: 30, or 1 with
    /// --no-watch]. The mount watches the server and drops cached
    /// attributes as soon as another client changes them, so a long
    /// timeout stays exact; it bounds staleness only while the server
    /// cannot be reached, or with --no-watch. 0 sends every operation to
    /// the server.
    #[arg(long, value_name = "SECS")]
    pub attr_timeout: Option<f64>,
    /// Seconds the kernel may cache names, absent names and directory
    /// listings [default: 30, or 1 with --no-watch]; see --attr-timeout.
    #[arg(long, value_name = "SECS")]
    pub entry_timeout: Option<f64>,
    /// Do not watch the server for other clients' changes: cached names
    /// and attributes then expire only by their timeouts (1 s unless
    /// given), and absent names and listings are not cached.
    #[arg(long)]
    pub no_watch: bool,
    /// Mount options, comma-separated: allow_other (let every user in;
    /// also unmounts automatically if the mount process dies);
    /// default_permissions (accepted and always on: the kernel checks
    /// permissions from the attributes it caches, which the mount keeps
    /// exact, and the server checks every call).
    #[arg(short = 'o', value_name = "OPTS", value_delimiter = ',')]
    pub options: Vec<String>,
    /// Stay in the foreground (default: detach once mounted).
    #[arg(short, long)]
    pub foreground: bool,
    /// Threads serving kernel requests. More let more requests wait on the
    /// server at once (raise it to the number of processes that create
    /// files at the same time under a journaling server, so their creates
    /// share syncs); fewer cost less CPU per request (a request waits for
    /// a busy thread instead of waking an idle one).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Show this directory of the namespace at the mount point instead of
    /// `/` (as `ceph-fuse -r` or an NFS export path). A client key limited
    /// to a subtree (`sextant auth add --path`) can mount only its subtree
    /// or a directory below it. Symlinks on the way are followed; the
    /// mount keeps the directory itself, even if it is renamed later.
    #[arg(long, value_name = "PATH")]
    pub subdir: Option<String>,
    /// Where a detached mount writes its messages [default: nowhere]
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// READDIRPLUS: listings carry each entry's attributes, so `ls -l`,
    /// `du` and `find` need no server call per entry. always: every
    /// listing batch; auto: the kernel chooses (the first batch of a
    /// listing, and batches of a directory whose entries were looked up
    /// since); off: names only. Only on a watching mount with nonzero
    /// timeouts (else off).
    #[arg(long, value_name = "WHEN", default_value = "always")]
    pub readdirplus: ReaddirPlusArg,
}

/// `--readdirplus`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ReaddirPlusArg {
    Always,
    Auto,
    Off,
}

impl From<ReaddirPlusArg> for ReaddirPlus {
    fn from(a: ReaddirPlusArg) -> ReaddirPlus {
        match a {
            ReaddirPlusArg::Always => ReaddirPlus::Always,
            ReaddirPlusArg::Auto => ReaddirPlus::Auto,
            ReaddirPlusArg::Off => ReaddirPlus::Off,
        }
    }
}

fn seconds(s: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("--{what} {s} is not a duration"))
}

/// Refuses a mount point that already carries a Sextant mount: mounts
/// would stack there, and one `umount` would take both away.
fn refuse_stacking(mountpoint: &std::path::Path) -> Result<()> {
    let abs = std::path::absolute(mountpoint)?;
    // A live mount point canonicalizes; a dead one (its daemon gone) may
    // not, then its absolute path is what mountinfo shows.
    let point = std::fs::canonicalize(&abs).unwrap_or(abs);
    if let Some(m) = crate::find::mounts::current()
        .into_iter()
        .find(|m| m.point == point)
    {
        bail!(
            "{} already carries a Sextant mount (of {}); unmount it first: sextant umount {}",
            point.display(),
            m.server.as_deref().unwrap_or("a server"),
            point.display()
        );
    }
    Ok(())
}

/// The frame door of the server at `addr` (`sextant_proto::frames`) for
/// the mount's lanes, when the server is on this machine: beside the
/// socket of a `unix:` address; for a loopback address, beside the data
/// directory's `sextant.sock` (a server's default socket off the default
/// address) or the local server's socket (`$SEXTANT_SOCKET`, the config,
/// the server's record) — the first whose door is there (the client
/// checks that it is the server at `addr`, else uses the Session
/// stream). `SEXTANT_FRAME_DOOR=off`: none.
fn frame_door_for(cli: &Cli, addr: &str) -> Option<std::path::PathBuf> {
    if std::env::var("SEXTANT_FRAME_DOOR").is_ok_and(|v| v == "off") {
        return None;
    }
    let sockets = match sextant_client::unix_path(addr) {
        Some(p) => vec![p],
        None => {
            let loopback = addr
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|a| a.ip().is_loopback())
                || addr.starts_with("localhost:");
            if !loopback {
                return None;
            }
            let in_data = cli
                .data
                .clone()
                .map(|d| d.join(sextant_server::local_socket::IN_DATA));
            in_data
                .into_iter()
                .chain(cli.socket.iter().cloned())
                .collect()
        }
    };
    sockets
        .iter()
        .map(|s| sextant_proto::frames::door_path(s))
        .find(|d| {
            use std::os::unix::fs::FileTypeExt;
            std::fs::metadata(d).is_ok_and(|m| m.file_type().is_socket())
        })
}

pub fn mount(cli: &Cli, args: &MountArgs) -> Result<()> {
    let child = std::env::var_os(CHILD_ENV).is_some();
    if !child {
        refuse_stacking(&args.mountpoint)?;
    }
    if !args.foreground && !child {
        return detach();
    }
    let mut cfg = MountConfig::new(
        &std::path::absolute(&args.mountpoint)?,
        &std::path::absolute(match &args.data_dir {
            Some(d) => d.clone(),
            None => cli
                .data
                .clone()
                .unwrap_or_else(crate::session::default_data)
                .join("objects"),
        })?,
    );
    let default_ttl = if args.no_watch { 1.0 } else { 30.0 };
    cfg.attr_ttl = seconds(args.attr_timeout.unwrap_or(default_ttl), "attr-timeout")?;
    cfg.entry_ttl = seconds(args.entry_timeout.unwrap_or(default_ttl), "entry-timeout")?;
    cfg.threads = args.threads;
    cfg.watch = !args.no_watch;
    cfg.readdirplus = args.readdirplus.into();
    for o in &args.options {
        match o.as_str() {
            "allow_other" => cfg.allow_other = true,
            "default_permissions" => {}
            "" => {}
            other => bail!(
                "unsupported mount option {other:?} (known: allow_other, default_permissions)"
            ),
        }
    }
    let addr = cli
        .server
        .clone()
        .unwrap_or_else(|| sextant_proto::DEFAULT_LISTEN.to_string());
    cfg.fsname = format!("sextant:{addr}");
    let secret = crate::session::secret_for_server(cli, &addr)?;
    cfg.frame_door = frame_door_for(cli, &addr);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = rt
        .block_on(Client::connect(
            &addr,
            &secret,
            Options {
                // The watcher skips this mount's own changes.
                origin: sextant_client::new_origin(),
                backup_dir: Some(backup_dir(cli)?),
                ..crate::session::client_options(cli.tls_ca.as_deref())?
            },
        ))
        .map_err(|e| crate::session::connect_failed(&addr, cli.tls_ca.as_deref(), e))?;
    let (root, shown) = rt.block_on(mount_root(&client, args.subdir.as_deref(), cli))?;
    cfg.root = root;
    if let Some(sub) = shown {
        // Read back by `sextant find` (find::mounts) to map paths under
        // the mount point into the namespace.
        cfg.fsname = format!("sextant:{addr}{}{sub}", crate::find::mounts::SUBDIR_MARK);
    }
    let log = args.log.clone();
    let mountpoint = cfg.mountpoint.clone();
    let releaser = client.clone();
    sextant_fuse::mount(client, rt.handle().clone(), &cfg, || {
        if child {
            println!("{READY}");
            let _ = std::io::stdout().flush();
            redirect_output(log.as_deref());
        } else {
            eprintln!("sextant: {} mounted from {addr}", mountpoint.display());
        }
    })
    .with_context(|| format!("mounting on {}", cfg.mountpoint.display()))?;
    release_backups(&rt, &releaser);
    Ok(())
}

/// The directory the mount shows at its mount point: `/`, or `--subdir`
/// resolved as the caller (a directory, else a clear error), with its
/// normalised path. A mount of `/` the server refuses (a client key
/// limited to a subtree) says how to mount the subtree instead.
async fn mount_root(
    client: &Client,
    subdir: Option<&str>,
    cli: &Cli,
) -> Result<(sextant_types::Soid, Option<String>)> {
    let cred = crate::session::caller();
    let Some(sub) = subdir else {
        return match client.getattr(&cred, sextant_types::Soid::ROOT).await {
            Err(e) if e.fs() == Some(sextant_types::FsError::Access) && cli.key_file.is_some() => {
                bail!(
                    "the server refuses `/` to this client key (it is limited to a subtree): \
                     mount that subtree with --subdir PATH"
                )
            }
            // Anything else shows once the kernel asks (as before).
            _ => Ok((sextant_types::Soid::ROOT, None)),
        };
    };
    let path = crate::find::mounts::absolute(std::path::Path::new(sub), std::path::Path::new("/"));
    if !sub.starts_with('/') {
        bail!("--subdir {sub:?}: give an absolute path in the namespace");
    }
    let shown = path.to_string_lossy().into_owned();
    if shown.contains(',') {
        // The mount's source carries it, among comma-separated mount
        // options.
        bail!("--subdir {shown}: a path with a comma cannot be mounted (mount its parent)");
    }
    let attr = client
        .resolve(&cred, shown.as_bytes(), true)
        .await
        .with_context(|| format!("--subdir {shown}"))?;
    if attr.ftype != sextant_types::FileType::Directory {
        bail!("--subdir {shown}: not a directory");
    }
    Ok((attr.soid, (shown != "/").then_some(shown)))
}

/// Log-less: the mount held its programs' backups; before it goes, the
/// server writes back what they cover. Bounded: a server that is down
/// cannot be waited for forever (it is then as if the mount had died).
fn release_backups(rt: &tokio::runtime::Runtime, client: &Client) {
    let held = client.backup_stats().entries;
    if held == 0 {
        return;
    }
    let cred = crate::session::caller();
    let released = rt.block_on(async {
        tokio::time::timeout(RELEASE_TIMEOUT, client.release_backups(&cred)).await
    });
    match released {
        Ok(Ok(_)) => tracing::info!(
            entries = held,
            "the server wrote back what the mount's backups held"
        ),
        Ok(Err(e)) => {
            tracing::warn!(entries = held, error = %e, "the server did not take the backups");
            spool_backups(client);
        }
        Err(_) => {
            tracing::warn!(
                entries = held,
                timeout = ?RELEASE_TIMEOUT,
                "the server did not take the backups: no answer"
            );
            spool_backups(client);
        }
    }
}

/// Keeps the backups the server could not take on local disk, for the
/// next mount or client of this server on this machine to hand back.
fn spool_backups(client: &Client) {
    let held = client.backup_stats().entries;
    match client.spool_backups() {
        Ok(Some(file)) => tracing::warn!(
            entries = held,
            file = %file.display(),
            "backups kept on local disk; the next mount or client of this server on this \
             machine hands them back"
        ),
        Ok(None) => {}
        Err(e) => tracing::error!(
            entries = held,
            error = %e,
            "backups dropped unreleased: they could not be kept on local disk either"
        ),
    }
}

/// Where a mount keeps log-less backups it could not hand back:
/// `$SEXTANT_BACKUP_DIR`, else `<data>/backups`.
fn backup_dir(cli: &Cli) -> Result<PathBuf> {
    let dir = match std::env::var_os("SEXTANT_BACKUP_DIR") {
        Some(d) => PathBuf::from(d),
        None => cli
            .data
            .clone()
            .unwrap_or_else(crate::session::default_data)
            .join("backups"),
    };
    Ok(std::path::absolute(dir)?)
}

/// How long an unmounting mount waits for the server to take its backups.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Re-runs this command as a detached child and waits for it to mount.
fn detach() -> Result<()> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(std::env::args_os().skip(1))
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: setsid is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the mount process")?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    let _ = BufReader::new(stdout).read_line(&mut line);
    if line.trim() == READY {
        return Ok(());
    }
    let status = child.wait()?;
    bail!("the mount process failed ({status})")
}

/// Points stdout and stderr at `log` (appended) or /dev/null.
fn redirect_output(log: Option<&Path>) {
    let file = match log {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p),
        None => std::fs::OpenOptions::new().write(true).open("/dev/null"),
    };
    if let Ok(f) = file {
        // SAFETY: dup2 onto the standard descriptors of our own process.
        unsafe {
            libc::dup2(f.as_raw_fd(), 1);
            libc::dup2(f.as_raw_fd(), 2);
        }
    }
}

pub fn umount(mountpoint: &Path, lazy: bool) -> Result<()> {
    sextant_fuse::unmount(mountpoint, lazy)
        .with_context(|| format!("unmounting {}", mountpoint.display()))
}
