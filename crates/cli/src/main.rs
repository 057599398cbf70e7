//! `sextant`: the command users run.
//!
//! `sextant serve` runs the metadata server. Every other command talks to a
//! server when one is given (`--server ADDR`) or answers at the default
//! address (127.0.0.1:7411), and otherwise runs the engine *embedded* on a
//! local data directory (`--data`, default `./sextant-data`) — one that
//! holds a store, or, for a command that writes, a new one (a command that
//! only reads says that no server answered rather than read an empty
//! store; `--local` uses the directory in any case).

mod auth;
mod bench;
mod cluster;
mod cmd;
mod find;
mod format;
mod import;
mod mount;
mod session;
mod settings;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;

/// Sextant: a scalable, searchable metadata service.
///
/// Paths are absolute paths inside Sextant's namespace, e.g. /proj/a.txt.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Data directory: of the embedded engine (made by the first command
    /// that writes), of `serve`, and where the cluster secret is looked
    /// for [default: sextant-data]
    #[arg(long, global = true, env = "SEXTANT_DATA")]
    data: Option<PathBuf>,
    /// Talk to the Sextant server at this address: host:port, or unix:PATH
    /// for the Unix socket of a server on this machine. Without it: the
    /// server answering at 127.0.0.1:7411 if the cluster secret is
    /// readable, else the local server's Unix socket (as yourself, no
    /// secret needed: $SEXTANT_SOCKET, `socket` in a config file, the
    /// server's record, /run/sextant/sextant.sock), else the embedded
    /// engine.
    #[arg(long, global = true, env = "SEXTANT_SERVER", value_name = "ADDR")]
    server: Option<String>,
    /// File holding the cluster secret [default: <data>/secret]
    #[arg(long, global = true, env = "SEXTANT_SECRET_FILE", value_name = "FILE")]
    secret_file: Option<PathBuf>,
    /// A client key file (made by `sextant auth add` on the server's
    /// side): calls prove they hold the key, and the server holds them to
    /// its limits. Used instead of the cluster secret.
    #[arg(long, global = true, env = "SEXTANT_KEY_FILE", value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// The cluster secret itself (prefer --secret-file: arguments are visible
    /// to other users).
    #[arg(long, global = true, env = "SEXTANT_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// Connect with TLS, trusting the server's certificate if this
    /// authority (a PEM file) signed it; a self-signed server certificate
    /// is its own authority (it must be a leaf: not marked as a CA). The
    /// server's name or IP is checked against the host of --server.
    #[arg(long, global = true, env = "SEXTANT_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Use the embedded engine on --data even if a server answers.
    #[arg(long, global = true, conflicts_with = "server")]
    local: bool,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
    /// The settings in force and where each came from (see [`settings`]).
    #[arg(skip)]
    settings: Option<settings::Settings>,
    /// Where the local server's Unix socket is looked for (see
    /// [`settings`]).
    #[arg(skip)]
    socket: Option<PathBuf>,
}

impl Cli {
    /// Parses the command line and fills in what the flags left open from
    /// the environment, a config file or the local server's record
    /// ([`settings`]).
    fn load() -> anyhow::Result<Cli> {
        use clap::parser::ValueSource;
        let matches = Cli::command().get_matches();
        let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        fn given<T>(m: &clap::ArgMatches, id: &str, v: Option<T>) -> settings::Given<T> {
            match (v, m.value_source(id)) {
                (Some(v), Some(ValueSource::EnvVariable)) => settings::Given::Env(v),
                (Some(v), _) => settings::Given::Flag(v),
                (None, _) => settings::Given::No,
            }
        }
        let s = settings::resolve(settings::Inputs {
            data: given(&matches, "data", cli.data.take()),
            server: given(&matches, "server", cli.server.take()),
            secret_file: given(&matches, "secret_file", cli.secret_file.take()),
            tls_ca: given(&matches, "tls_ca", cli.tls_ca.take()),
            socket: std::env::var_os("SEXTANT_SOCKET")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            config: settings::load_config()?,
            record: settings::load_record(),
        });
        cli.data = Some(s.data.value.clone());
        cli.server = s
            .server
            .as_ref()
            .map(|v| session::with_default_port(&v.value));
        cli.secret_file = s.secret_file.as_ref().map(|v| v.value.clone());
        cli.tls_ca = s.tls_ca.as_ref().map(|v| v.value.clone());
        cli.socket = Some(s.socket.value.clone());
        cli.settings = Some(s);
        Ok(cli)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the metadata server (gRPC, default 127.0.0.1:7411) on --data.
    ///
    /// Settings come from flags and environment, then the --config TOML
    /// file (keys: data, listen, socket, memory, journal_sync, dedup_window,
    /// dedup_clients, metrics, durability, arl_size, recovery_grace,
    /// tls_cert, tls_key; for a cluster server etcd, cluster_store, name,
    /// advertise, lease_ttl, etcd_prefix, and etcd's own credentials etcd_user,
    /// etcd_password_file, etcd_ca, etcd_cert, etcd_key), then defaults. The first start creates the cluster
    /// secret <data>/secret (mode 0600) that clients must present. SIGINT
    /// or SIGTERM stops it gracefully (tables written back).
    Serve(ServeArgs),
    /// Many servers, one namespace: start a local cluster (`up`), see it
    /// (`status`), move a table (`move`), drain a server (`drain`).
    Cluster(cluster::ClusterArgs),
    /// Client keys: `add` one for a client node (written to a 0600 file
    /// to copy there; the node uses it with --key-file), `ls`, `revoke`,
    /// `rotate`. Needs the cluster secret — or, with --etcd, a cluster's
    /// etcd and no server at all (the first keys, every server down).
    Auth(auth::AuthArgs),
    /// Show the store's state: inodes, tables, journal; and which data
    /// directory, server and secret this command used, and where each
    /// setting came from (flag, environment, config file, the local
    /// server's record, default).
    Status,
    /// Make a new, empty store in the data directory (--data), for the
    /// embedded engine or a server to use. Commands never make one by
    /// themselves, so a command run while the server is down cannot
    /// write into a second, private namespace.
    Init,
    /// List a directory (like ls: names starting with `.` only with -a or
    /// -A; options combine, e.g. `ls -la`).
    Ls {
        /// Long listing: type, mode, links, owner, group, size, mtime, name.
        #[arg(short = 'l')]
        long: bool,
        /// Show every entry, `.` and `..` included.
        #[arg(short = 'a', long = "all")]
        all: bool,
        /// Show every entry but `.` and `..`.
        #[arg(short = 'A', long = "almost-all")]
        almost_all: bool,
        /// The directory (or file) to list: a namespace path, or a path
        /// under a `sextant mount`.
        #[arg(default_value = "/")]
        path: String,
    },
    /// Show an inode's attributes (like stat: a final symlink is shown
    /// itself unless -L).
    Stat {
        /// The entry: a namespace path, or a path under a `sextant mount`.
        path: String,
        /// Follow a final symlink (show what it points to), as GNU stat -L.
        #[arg(short = 'L', long = "dereference")]
        follow: bool,
    },
    /// Create directories.
    Mkdir {
        /// Create missing parents; no error if the directory exists.
        #[arg(short, long)]
        parents: bool,
        /// Permission bits, octal.
        #[arg(short, long, default_value = "755", value_parser = parse_octal)]
        mode: u32,
        /// Directories to create (namespace paths, or paths under a mount).
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create empty files, or set their times to now.
    Touch {
        /// Files to create or touch.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove files (and with -r, directories and their contents).
    Rm {
        /// Remove directories and everything under them.
        #[arg(short, long)]
        recursive: bool,
        /// Ignore missing paths.
        #[arg(short, long)]
        force: bool,
        /// What to remove.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Rename or move (atomic; replaces an existing target like mv).
    Mv {
        /// What to move.
        source: String,
        /// The new path; an existing directory there receives SOURCE under
        /// its own name (as mv), any other existing entry is replaced.
        target: String,
    },
    /// Make a hard link, or with -s a symbolic link.
    Ln {
        /// Make a symbolic link (TARGET is stored as typed) instead of a
        /// hard link.
        #[arg(short, long)]
        symbolic: bool,
        /// What the link points to: an existing entry for a hard link, any
        /// text for a symbolic one.
        target: String,
        /// The new link's path.
        link: String,
    },
    /// Change permission bits (like chmod with an octal mode; a symlink's
    /// target is changed).
    Chmod {
        /// Permission bits, octal (e.g. 640, 2775).
        #[arg(value_parser = parse_octal)]
        mode: u32,
        /// Entries to change.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Change owner and group (like chown: OWNER, OWNER:GROUP or :GROUP,
    /// each a name or a number; a symlink's target is changed).
    Chown {
        /// OWNER[:GROUP] or :GROUP.
        owner: String,
        /// Entries to change.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Print an extended attribute's value (like getfattr -n NAME
    /// --only-values).
    Getfattr {
        /// The attribute, e.g. user.comment.
        #[arg(short = 'n', long = "name")]
        name: String,
        /// The entry (a symlink's target).
        path: String,
    },
    /// Set an extended attribute (like setfattr -n NAME -v VALUE).
    Setfattr {
        /// The attribute, e.g. user.comment.
        #[arg(short = 'n', long = "name")]
        name: String,
        /// Its value (as given, no encoding).
        #[arg(short = 'v', long = "value", default_value = "")]
        value: String,
        /// The entry (a symlink's target).
        path: String,
    },
    /// Disk usage: the entries under a path and their total size
    ///
    /// Counts PATH itself and everything below it, from the servers'
    /// search totals (no crawl; root's whole namespace from the maintained
    /// summaries), as the caller may see it. PATH is a namespace path or a
    /// path under a `sextant mount`. `sextant stats` groups and filters
    /// the same totals.
    #[command(disable_help_flag = true)]
    Du {
        /// Sizes in powers of 1024 with a unit (1.5K, 23M), as du -h.
        #[arg(short = 'h', long = "human-readable")]
        human: bool,
        /// Paths to add up, one line each.
        #[arg(default_value = "/")]
        paths: Vec<String>,
        /// Print help (-h is --human-readable, as in du).
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Copy a local directory tree's metadata, and with --with-data its
    /// file contents, into Sextant, as cp -a would: modes, times, owners
    /// (as root), symlinks, hard links and extended attributes.
    ///
    /// Shows a progress bar with entries per second; prints a summary of
    /// what was imported and what failed (--json for scripts). Every
    /// failed operation is reported and counted; a fatal error (the server
    /// gone, out of space, the secret refused) stops the import. Exits
    /// non-zero if anything failed or it stopped.
    Import {
        /// Local directory to read.
        source: PathBuf,
        /// Destination directory in Sextant (created if missing).
        #[arg(default_value = "/")]
        dest: String,
        /// Also copy regular files' contents into the data directory that
        /// `sextant mount` reads (--data-dir), so the files open with
        /// their data on the mount.
        #[arg(long)]
        with_data: bool,
        /// The mount's file-data directory [default: <data>/objects]
        #[arg(long, value_name = "DIR", requires = "with_data")]
        data_dir: Option<PathBuf>,
    },
    /// Write every table back and trim the journal.
    Sync,
    /// Mount the namespace on a local directory (FUSE; needs a server).
    ///
    /// Every metadata operation goes to the server as the calling user;
    /// file data is kept in --data-dir (default <data>/objects), one file
    /// per inode. Detaches once mounted unless -f is given; `sextant
    /// umount`, fusermount3 -u, SIGINT or SIGTERM unmount it.
    Mount(mount::MountArgs),
    /// Search the namespace with GNU find's syntax: PATH... [EXPRESSION].
    ///
    /// PATH is a path under a `sextant mount` mount point (output keeps the
    /// prefix as typed) or an absolute namespace path.
    #[command(after_help = find::FIND_HELP)]
    Find(find::FindArgs),
    /// File counts and total sizes of what `find` would print, grouped.
    #[command(after_help = find::STATS_HELP)]
    Stats(find::StatsArgs),
    /// Unmount a `sextant mount` (fusermount3 -u).
    Umount {
        /// The directory a `sextant mount` is mounted on.
        mountpoint: PathBuf,
        /// Lazy: detach now, finish when no longer busy.
        #[arg(short = 'z', long)]
        lazy: bool,
    },
    /// Benchmark metadata operations, like mdtest: create, stat, lookup,
    /// readdir and remove of files and directories from N workers.
    ///
    /// Over the client library (a server: --server, default 127.0.0.1:7411)
    /// or, with --dir, by system calls on a directory such as a `sextant
    /// mount` (threads, or with -P several processes).
    Bench(bench::BenchArgs),
    /// Print a shell completion script, e.g.
    /// `sextant completions bash > /etc/bash_completion.d/sextant`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (sextant.1 and one per subcommand, e.g.
    /// sextant-find.1) into a directory, e.g. /usr/local/share/man/man1.
    Man {
        /// Directory to write the pages into (created if missing).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address to listen on (host:port; port 0 picks a free one)
    /// [default: 127.0.0.1:7411]
    #[arg(long, env = "SEXTANT_LISTEN", value_name = "ADDR")]
    listen: Option<String>,
    /// The Unix socket for the users of this machine, or `off`. Every
    /// local user may connect (mode 0666) and is served as the uid, gid
    /// and groups the kernel and the user database give them, without the
    /// secret; a caller with the secret, or root, acts as over TCP.
    /// [default: /run/sextant/sextant.sock for a server on the default
    /// address that may create it, else <data>/sextant.sock]
    #[arg(long, env = "SEXTANT_SOCKET", value_name = "PATH")]
    socket: Option<PathBuf>,
    /// TOML config file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Memory budget of the table cache, e.g. 4GiB [default: 4GiB]
    #[arg(long, env = "SEXTANT_MEMORY")]
    memory: Option<String>,
    /// Journal sync mode: background[:INTERVAL] (replies once written,
    /// synced within INTERVAL, 5ms by default: a process crash loses
    /// nothing, a power loss at most what was acknowledged in the last
    /// interval and one sync and not fsync'd), fsync (every reply waits
    /// for its sync: nothing acknowledged is lost, power loss included),
    /// nosync (synced only at table write-backs and fsyncs: benchmarks),
    /// off (benchmarks only). In every mode fsync, fsyncdir through a
    /// mount (and Client::sync_journal) return once everything the server
    /// acknowledged is synced [default: background (5ms)]
    #[arg(long, env = "SEXTANT_JOURNAL_SYNC", value_name = "MODE")]
    journal_sync: Option<String>,
    /// How acknowledged operations survive a crash: `journal` (written and
    /// synced to the local journal before the reply) or `logless` (no
    /// journal: each reply carries redo backups that the clients keep
    /// until the tables are written back and hand back after a crash;
    /// see docs/ARCHITECTURE.md) [default: journal]
    #[arg(long, env = "SEXTANT_DURABILITY", value_name = "MODE")]
    durability: Option<String>,
    /// Log-less: the Active Request List size K — each operation is sent
    /// to the clients of up to K later operations, so it survives the loss
    /// of fewer than K of them [default: 4]
    #[arg(long, value_name = "K")]
    arl_size: Option<usize>,
    /// Log-less: after a crash, how long to wait for clients to hand back
    /// their backups before recovering and serving, e.g. 5s, 500ms
    /// [default: 5s]
    #[arg(long, value_name = "DURATION")]
    recovery_grace: Option<String>,
    /// TLS: the server's certificate chain, a PEM file (with --tls-key;
    /// clients then connect with --tls-ca). Without it, plain TCP: the
    /// cluster secret still authenticates, but travels in clear.
    #[arg(
        long,
        env = "SEXTANT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// TLS: the private key of --tls-cert, a PEM file.
    #[arg(
        long,
        env = "SEXTANT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// Cluster: etcd's client URLs, comma-separated (e.g.
    /// http://10.0.0.1:2379). With --cluster-store and --name, this server
    /// joins a cluster of servers sharing one namespace; without them it
    /// is a single server. `sextant cluster up` starts a whole local one.
    #[arg(
        long,
        env = "SEXTANT_ETCD",
        value_name = "URLS",
        help_heading = "Cluster"
    )]
    etcd: Option<String>,
    /// Cluster: the table store every server shares (a directory on a
    /// shared file system): table snapshots and each server's journal, so
    /// a move copies nothing and a dead server's tables can be recovered.
    #[arg(long, value_name = "DIR", help_heading = "Cluster")]
    cluster_store: Option<PathBuf>,
    /// Cluster: this server's name, unique among the live servers
    /// (1-64 of A-Z a-z 0-9 . _ -).
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    name: Option<String>,
    /// Cluster: the address clients reach this server at, when --listen
    /// is not one (e.g. 0.0.0.0:7411) [default: the --listen address]
    #[arg(long, value_name = "HOST:PORT", help_heading = "Cluster")]
    advertise: Option<String>,
    /// Cluster: every etcd key of the cluster starts with it, so several
    /// clusters can share one etcd under different prefixes (which must
    /// not nest, e.g. /a/ and /a/b/: a server refuses to start under one
    /// inside or around a set-up cluster's); every server of a cluster gives the
    /// same. A '/' is added at its end; also SEXTANT_ETCD_PREFIX
    /// [default: /sextant/]
    #[arg(long, value_name = "PREFIX", help_heading = "Cluster")]
    etcd_prefix: Option<String>,
}

fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode (e.g. 755)"))
}

fn serve(cli: &Cli, args: &ServeArgs) -> anyhow::Result<()> {
    use sextant_server::config::{FileConfig, Overrides, ServerConfig};
    let file = args.config.as_deref().map(FileConfig::load).transpose()?;
    let config = ServerConfig::resolve(
        file,
        Overrides {
            data: cli.data.clone(),
            listen: args.listen.clone(),
            socket: args.socket.clone(),
            memory: args.memory.clone(),
            journal_sync: args.journal_sync.clone(),
            durability: args.durability.clone(),
            arl_size: args.arl_size,
            recovery_grace: args.recovery_grace.clone(),
            tls_cert: args.tls_cert.clone(),
            tls_key: args.tls_key.clone(),
            etcd: args.etcd.clone(),
            cluster_store: args.cluster_store.clone(),
            name: args.name.clone(),
            advertise: args.advertise.clone(),
            etcd_prefix: args.etcd_prefix.clone(),
        },
    )?;
    let data = config.data.clone();
    let default_address = config.listen == sextant_proto::DEFAULT_LISTEN;
    sextant_server::run(config, |addr, socket| {
        tracing::info!(data = %data.display(), %addr, "serving");
        if default_address {
            // Where this server's clients find its secret (and socket)
            // from any directory (see the settings module).
            settings::write_record(&data, &addr.to_string(), socket);
        }
        // One line on stdout for scripts and tests (port 0 shows the port).
        println!("listening on {addr}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
    })
}

/// `sextant init`: a new store in the data directory, or a word that one
/// is there already.
fn init(cli: &Cli) -> anyhow::Result<()> {
    use anyhow::Context;
    let data = cli.data.clone().unwrap_or_else(session::default_data);
    if sextant_engine::Engine::dir_holds_store(&data) {
        println!("{} already holds a store", data.display());
        return Ok(());
    }
    let cred = session::caller();
    let config = sextant_engine::EngineConfig {
        // A new store's root belongs to whoever creates it.
        root_uid: cred.uid,
        root_gid: cred.gid,
        ..Default::default()
    };
    std::fs::create_dir_all(&data)
        .with_context(|| format!("cannot create the data directory {}", data.display()))?;
    sextant_engine::Engine::open_dir(&data, config)
        .and_then(|e| e.close())
        .with_context(|| format!("cannot make a store in {}", data.display()))?;
    println!(
        "made a new store in {} (`sextant serve --data {}` serves it)",
        data.display(),
        data.display()
    );
    Ok(())
}

/// `sextant man DIR`: the man pages, generated from the same definitions
/// as `--help` (so they cannot drift from it).
fn man_pages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cmd = Cli::command();
    let mut pages = vec![("sextant".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        let name = format!("sextant-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, page) in pages {
        let file = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page).render(&mut out)?;
        std::fs::write(&file, out).with_context(|| format!("cannot write {}", file.display()))?;
        println!("{}", file.display());
    }
    Ok(())
}

/// Logs go to stderr: text by default, one JSON object per line with
/// `SEXTANT_LOG_FORMAT=json`; `SEXTANT_LOG` filters (e.g. `debug`,
/// `sextant_engine=warn`), default `info` for `serve` and `warn` otherwise.
fn init_logging(serving: bool) {
    use tracing_subscriber::EnvFilter;
    let default = if serving { "info" } else { "warn" };
    let filter = EnvFilter::try_from_env("SEXTANT_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only for a terminal: not in journald, files or pipes.
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let json = std::env::var("SEXTANT_LOG_FORMAT").is_ok_and(|f| f == "json");
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.with_target(false).try_init()
    };
}

fn main() {
    sextant_client::timing::mark(|| "start".into());
    let cli = match Cli::load() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("sextant: {}", error_chain(&e));
            std::process::exit(1);
        }
    };
    if !matches!(
        cli.command,
        Command::Serve(_) | Command::Mount(_) | Command::Bench(_) | Command::Cluster(_)
    ) {
        // Commands that print end quietly when their reader goes away
        // (`sextant find / | head`), as find and ls do, instead of failing
        // on EPIPE (println! would panic). Not for the server, the mount
        // or bench, which outlive their terminal and write to sockets.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    init_logging(matches!(cli.command, Command::Serve(_) | Command::Mount(_)));
    let result = match &cli.command {
        Command::Serve(args) => serve(&cli, args),
        Command::Mount(args) => mount::mount(&cli, args),
        Command::Umount { mountpoint, lazy } => mount::umount(mountpoint, *lazy),
        Command::Find(_) | Command::Stats(_) | Command::Du { .. } => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| {
                    let done = rt.block_on(async {
                        match &cli.command {
                            Command::Find(a) => find::find(&cli, &a.args).await,
                            Command::Stats(a) => find::stats(&cli, a).await,
                            Command::Du { paths, human, .. } => find::du(&cli, paths, *human).await,
                            _ => Ok(true),
                        }
                    });
                    sextant_client::timing::mark(|| "command done".into());
                    drop(rt);
                    sextant_client::timing::mark(|| "runtime dropped".into());
                    done
                })
                .map(|ok| {
                    if !ok {
                        std::process::exit(1);
                    }
                })
        }
        Command::Bench(args) => bench::run(&cli, args),
        Command::Auth(args) => auth::run(&cli, args),
        Command::Cluster(args) => cluster::run(
            &cli.data.clone().unwrap_or_else(session::default_data),
            cli.json,
            args,
        ),
        Command::Init => init(&cli),
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut Cli::command(),
                "sextant",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Man { dir } => man_pages(dir),
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| {
                rt.block_on(async {
                    let data = cli.data.clone().unwrap_or_else(session::default_data);
                    let s = session::Session::open(session::Target {
                        data: &data,
                        server: cli.server.as_deref(),
                        secret: cli.secret.as_deref(),
                        secret_file: cli.secret_file.as_deref(),
                        key_file: cli.key_file.as_deref(),
                        tls_ca: cli.tls_ca.as_deref(),
                        socket: cli.socket.as_deref(),
                        local: cli.local,
                        writes: !matches!(
                            cli.command,
                            Command::Status
                                | Command::Ls { .. }
                                | Command::Stat { .. }
                                | Command::Getfattr { .. }
                        ),
                    })
                    .await?;
                    cmd::run(cli, s).await
                })
            }),
    };
    if let Err(e) = result {
        eprintln!("sextant: {}", error_chain(&e));
        std::process::exit(1);
    }
}

/// `e` and its causes, `: `-separated, like anyhow's `{:#}` — but a cause
/// its parent's message already ends with is not repeated (the engine's
/// I/O errors name their cause in their own message, and also chain it).
fn error_chain(e: &anyhow::Error) -> String {
    sextant_client::error_chain(e.as_ref())
}

#[cfg(test)]
mod tests {
    /// Every argument of every command says what it is in `--help`.
    #[test]
    fn every_argument_has_a_description() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "sextant", &mut missing);
        assert!(
            missing.is_empty(),
            "arguments without a description: {missing:?}"
        );
    }

    #[test]
    fn error_chain_says_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(13);
        let engine = sextant_engine::EngineError::Io {
            file: "/d".into(),
            source: io,
        };
        let e = anyhow::Error::new(engine).context("cannot open the data directory /d");
        assert_eq!(
            super::error_chain(&e),
            "cannot open the data directory /d: I/O error on /d: Permission denied (os error 13)"
        );
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(super::error_chain(&e), "outer: middle: inner");
    }
}
