//! `sextant`: the command users run.
//!
//! Today every command runs the engine *embedded* on a local data directory
//! (`--data`, default `./sextant-data`): no other service is needed. The
//! server (`sextant serve`), network client and FUSE mount build on the
//! same commands.

mod cmd;
mod format;
mod import;
mod session;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Sextant: a scalable, searchable metadata service.
///
/// Paths are absolute paths inside Sextant's namespace, e.g. /proj/a.txt.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Data directory of the embedded engine (created on first use).
    #[arg(
        long,
        global = true,
        env = "SEXTANT_DATA",
        default_value = "sextant-data"
    )]
    data: PathBuf,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the store's state: inodes, tables, journal.
    Status,
    /// List a directory (like ls).
    Ls {
        /// Long listing: type, mode, links, owner, group, size, mtime, name.
        #[arg(short = 'l')]
        long: bool,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Show an inode's attributes (like stat).
    Stat {
        path: String,
        /// Do not follow a final symlink.
        #[arg(short = 'L', long = "no-dereference")]
        no_follow: bool,
    },
    /// Create directories.
    Mkdir {
        /// Create missing parents; no error if the directory exists.
        #[arg(short, long)]
        parents: bool,
        /// Permission bits, octal.
        #[arg(short, long, default_value = "755", value_parser = parse_octal)]
        mode: u32,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create empty files, or set their times to now.
    Touch {
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove files (and with -r, directories and their contents).
    Rm {
        #[arg(short, long)]
        recursive: bool,
        /// Ignore missing paths.
        #[arg(short, long)]
        force: bool,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Rename or move (atomic; replaces an existing target like mv).
    Mv { source: String, target: String },
    /// Make a hard link, or with -s a symbolic link.
    Ln {
        #[arg(short, long)]
        symbolic: bool,
        target: String,
        link: String,
    },
    /// Disk usage: file count and total size under a path.
    Du {
        #[arg(default_value = "/")]
        path: String,
    },
    /// Copy a local directory tree's metadata into Sextant.
    Import {
        /// Local directory to read.
        source: PathBuf,
        /// Destination directory in Sextant (created if missing).
        #[arg(default_value = "/")]
        dest: String,
    },
    /// Write every table back and trim the journal.
    Sync,
}

fn parse_octal(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode (e.g. 755)"))
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cmd::run(cli) {
        eprintln!("sextant: {e:#}");
        std::process::exit(1);
    }
}
