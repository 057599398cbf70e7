//! The README's own examples run: every command in README.md's code blocks
//! runs against a fresh server in a scratch directory, in order, and
//! succeeds — or is marked otherwise by the block's info string:
//!
//! - ` ```sh `: each command must succeed;
//! - ` ```sh error `: each command must fail (examples of errors);
//! - ` ```sh mount `: as `sh`, where FUSE is available (skipped, said so,
//!   elsewhere);
//! - ` ```sh no-test `: not run — and allowed to hold only commands this
//!   test cannot run by their nature: starting a server (`sextant serve`),
//!   the project's scripts, cargo, and installation with sudo.
//!
//! Each command runs in `sh -c` in the scratch directory, with `sextant`
//! (this build) first on PATH, HOME inside the scratch directory, and the
//! server and its secret in the environment (`SEXTANT_SERVER`,
//! `SEXTANT_SECRET_FILE`) — except commands with `--local`, which use
//! the embedded engine. Lines ending in `\` continue on the next.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Run,
    Error,
    Mount,
    NoTest,
}

#[derive(Debug)]
struct Block {
    kind: Kind,
    line: usize,
    commands: Vec<String>,
}

/// The `sh` blocks of a Markdown text (other fences are not commands).
fn sh_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(Kind, usize, Vec<String>)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if let Some(info) = line.strip_prefix("```") {
            match open.take() {
                Some((kind, at, lines)) => blocks.push(Block {
                    kind,
                    line: at,
                    commands: commands(&lines),
                }),
                None => {
                    let kind = match info.trim() {
                        "sh" => Some(Kind::Run),
                        "sh error" => Some(Kind::Error),
                        "sh mount" => Some(Kind::Mount),
                        "sh no-test" => Some(Kind::NoTest),
                        other if other.starts_with("sh") => {
                            panic!("README.md:{}: unknown block kind {other:?}", i + 1)
                        }
                        _ => None,
                    };
                    // Not a shell block: skip to its end all the same.
                    open = Some((kind.unwrap_or(Kind::NoTest), i + 1, Vec::new()));
                    if kind.is_none() {
                        open.as_mut().unwrap().2.push("\u{0}not-sh".into());
                    }
                }
            }
            continue;
        }
        if let Some((_, _, lines)) = open.as_mut() {
            lines.push(line.to_string());
        }
    }
    blocks.retain(|b| b.commands.first().map(String::as_str) != Some("\u{0}not-sh"));
    blocks
}

/// A block's commands: continuation lines joined, blanks and comment
/// lines dropped.
fn commands(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in lines {
        if let Some(head) = l.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
            continue;
        }
        cur.push_str(l);
        let cmd = std::mem::take(&mut cur);
        let cmd = cmd.trim();
        if !cmd.is_empty() && !cmd.starts_with('#') {
            out.push(cmd.to_string());
        }
    }
    out
}

/// What a `no-test` block may hold.
fn cannot_run_here(cmd: &str) -> bool {
    let bare = cmd
        .split_whitespace()
        .skip_while(|w| w.contains('=') && w.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .collect::<Vec<_>>()
        .join(" ");
    ["sextant serve", "scripts/", "cargo ", "sudo "]
        .iter()
        .any(|p| bare.starts_with(p))
}

struct Scratch {
    dir: PathBuf,
    path_env: String,
    addr: String,
    secret: PathBuf,
}

impl Scratch {
    fn run(&self, cmd: &str) -> std::process::Output {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(cmd)
            .current_dir(&self.dir)
            .env("PATH", &self.path_env)
            .env("HOME", self.dir.join("home"))
            .env("XDG_CONFIG_HOME", self.dir.join("home/.config"))
            .env("XDG_STATE_HOME", self.dir.join("home/.local/state"))
            .env_remove("SEXTANT_CONFIG")
            .env_remove("SEXTANT_DATA")
            .env_remove("SEXTANT_SECRET")
            .stdin(Stdio::null());
        if cmd.contains("--local") {
            c.env_remove("SEXTANT_SERVER")
                .env_remove("SEXTANT_SECRET_FILE");
        } else {
            c.env("SEXTANT_SERVER", &self.addr)
                .env("SEXTANT_SECRET_FILE", &self.secret);
        }
        c.output().unwrap()
    }
}

/// Unmounts whatever the README mounted, however the test ends.
struct UnmountAll(PathBuf);

impl Drop for UnmountAll {
    fn drop(&mut self) {
        if common::is_mounted(&self.0) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.0)
                .status();
        }
    }
}

#[test]
fn every_command_in_the_readme_runs() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let blocks = sh_blocks(&std::fs::read_to_string(&readme).unwrap());
    assert!(blocks.len() >= 8, "found only {} sh blocks", blocks.len());

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    std::fs::create_dir_all(root.join("home")).unwrap();
    let data = root.join("server-data");
    let (server, addr) = common::spawn_server_with(
        &data,
        "127.0.0.1:0",
        &["--journal-sync", "nosync"],
        Stdio::null(),
    );
    let _server = common::KillOnDrop(server);
    let bin_dir = Path::new(common::BIN).parent().unwrap().to_path_buf();
    let scratch = Scratch {
        path_env: format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        dir: root.clone(),
        addr,
        secret: data.join("secret"),
    };
    let _unmount = UnmountAll(root.join("home/sextant"));
    let fuse = common::fuse_available();

    let mut ran = 0;
    for b in &blocks {
        if b.kind == Kind::Mount && !fuse {
            eprintln!("README.md:{}: skipped (no FUSE here)", b.line);
            continue;
        }
        for cmd in &b.commands {
            if b.kind == Kind::NoTest {
                assert!(
                    cannot_run_here(cmd),
                    "README.md:{}: `{cmd}` is in a no-test block but could run: test it",
                    b.line
                );
                continue;
            }
            let out = scratch.run(cmd);
            let should_fail = b.kind == Kind::Error;
            assert_eq!(
                !out.status.success(),
                should_fail,
                "README.md:{}: `{cmd}` {}\nstdout: {}\nstderr: {}",
                b.line,
                if should_fail {
                    "succeeded but is shown as an error"
                } else {
                    "failed"
                },
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(ran >= 20, "only {ran} README commands ran");
}

#[test]
fn blocks_and_commands_are_read_as_meant() {
    let text =
        "x\n```sh\na \\\n  b\n# c\n\nd\n```\n  ```sh error\n  e\n  ```\n```toml\nk = 1\n```\n";
    let b = sh_blocks(text);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].commands, vec!["a  b", "d"]);
    assert_eq!(
        (b[1].kind, b[1].commands.clone()),
        (Kind::Error, vec!["e".to_string()])
    );
    assert!(cannot_run_here("SEXTANT_CRASH_KILLS=200 cargo test"));
    assert!(!cannot_run_here("sextant ls /"));
}
