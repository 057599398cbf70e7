//! `sextant auth`: client keys — add one for a client node (written to a
//! 0600 file to copy there), list, revoke, rotate. Each is one `Keys` call
//! to the server with the cluster secret (see `sextant_server::clientkeys`)
//! or, with `--etcd`, the same call made here on a cluster's book in etcd
//! (`clientkey/<name>`, `sextant_server::cluster::keys::open_book`): no
//! server need run — the first keys of a new cluster, or every server
//! down — and the servers follow etcd, so they see each change within
//! seconds (a revocation ends the key's sessions). The records and their
//! conditional writes are the servers' own code, never written twice.

use crate::Cli;
use anyhow::{bail, Context, Result};
use sextant_client::Client;
use sextant_proto::keyauth::ClientKey;
use sextant_proto::pb;
use sextant_proto::pb::keys_request::Op;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Without --etcd each command is a call to the server (--server, \
or the default address) with the cluster secret. With --etcd URL[,URL] it is made directly \
in the cluster's etcd, where the servers keep the keys (PREFIX clientkey/NAME): no server \
need run, e.g. to make the first keys before any server starts, or while every server is \
down; running servers see each change within seconds, and a revoked or rotated key's \
sessions end. Whoever can write etcd can make keys: etcd access is admin access.\n\n\
Examples:\n  sextant auth --etcd http://10.0.0.5:2379 add node7 --uids 1000-1999 --out node7.key\n  \
sextant auth --etcd http://10.0.0.5:2379 ls\n  sextant auth --etcd http://10.0.0.5:2379 revoke node7"
)]
pub struct AuthArgs {
    /// Manage the keys of a cluster directly in its etcd (client URLs,
    /// comma-separated), with no server: see below
    /// [default: through the server, with the cluster secret]
    #[arg(long, value_name = "URLS")]
    pub etcd: Option<String>,
    /// With --etcd: the cluster's key prefix in etcd, its servers'
    /// --etcd-prefix; also SEXTANT_ETCD_PREFIX [default: /sextant/]
    #[arg(
        long,
        visible_alias = "etcd-prefix",
        value_name = "PREFIX",
        requires = "etcd"
    )]
    pub prefix: Option<String>,
    #[command(flatten)]
    pub etcd_credentials: crate::cluster::EtcdCredentialArgs,
    #[command(subcommand)]
    pub command: AuthCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum AuthCommand {
    /// Make a key for a client node and write it (name and key, mode 0600)
    /// to --out (default ./NAME.key): copy that file to the node, which
    /// uses it with --key-file. The key itself never travels on a call.
    Add {
        /// The key's name (letters, digits, '.', '_', '-'; e.g. the node's)
        name: String,
        /// uids the key may act as: a list and/or ranges, e.g. 1000-1999,42
        /// [default: any]
        #[arg(long, value_name = "LIST|RANGE")]
        uids: Option<String>,
        /// gids (primary and supplementary) the key may act as, as --uids
        /// [default: any]
        #[arg(long, value_name = "LIST|RANGE")]
        gids: Option<String>,
        /// Confine the key to this subtree: every request must name
        /// objects in it (else EACCES, whatever the permissions say);
        /// `find`/`stats`/`du` of `/` or another ancestor of it search the
        /// subtree only, of anything else outside are refused; its watch
        /// carries only the subtree's changes. The limit is the path: a
        /// directory renamed away leaves the key with nothing
        /// [default: / (everything)]
        #[arg(long, value_name = "/SUB")]
        path: Option<String>,
        /// uid and gid 0 run as 65534 (nobody)
        #[arg(long)]
        root_squash: bool,
        /// Every change fails with EROFS
        #[arg(long)]
        read_only: bool,
        /// Where to write the key file [default: ./NAME.key]
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// List the keys: names and limits (never the keys).
    Ls,
    /// Revoke a key: its calls are refused from now on, and the sessions
    /// and watches using it end within seconds.
    Revoke {
        /// The key's name
        name: String,
    },
    /// Give a key a new secret (same limits), written as `add` does; the
    /// old one is revoked.
    Rotate {
        /// The key's name
        name: String,
        /// Where to write the key file [default: ./NAME.key]
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

/// `1000-1999,42` as ranges.
pub fn parse_ranges(s: &str) -> Result<Vec<pb::U32Range>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .with_context(|| format!("{part:?}: not a number or a range LO-HI"))
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            bail!("{part:?}: the range is empty");
        }
        out.push(pb::U32Range { lo, hi });
    }
    if out.is_empty() {
        bail!("{s:?}: no ids");
    }
    Ok(out)
}

fn show_ranges(rs: &[pb::U32Range]) -> String {
    if rs.is_empty() {
        return "any".into();
    }
    rs.iter()
        .map(|r| {
            if r.lo == r.hi {
                r.lo.to_string()
            } else {
                format!("{}-{}", r.lo, r.hi)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Writes the key file `file` (mode 0600, replacing one there).
fn write_key_file(file: &Path, key: &ClientKey) -> Result<()> {
    sextant_server::secret::write_private(file, key.file_text().as_bytes())
}

/// `sextant auth`.
pub fn run(cli: &Cli, args: &AuthArgs) -> Result<()> {
    let op = op_of(&args.command)?;
    let reply = match &args.etcd {
        Some(urls) => on_etcd(args, urls, op)?,
        None => on_server(cli, op)?,
    };
    show(cli, &args.command, reply)
}

/// The `Keys` call `command` makes.
fn op_of(command: &AuthCommand) -> Result<Op> {
    Ok(match command {
        AuthCommand::Add {
            name,
            uids,
            gids,
            path,
            root_squash,
            read_only,
            ..
        } => {
            let limits = pb::KeyLimits {
                uids: uids
                    .as_deref()
                    .map(parse_ranges)
                    .transpose()?
                    .unwrap_or_default(),
                gids: gids
                    .as_deref()
                    .map(parse_ranges)
                    .transpose()?
                    .unwrap_or_default(),
                path: path.clone().unwrap_or_default().into_bytes(),
                root_squash: *root_squash,
                read_only: *read_only,
            };
            Op::Add(pb::KeyAdd {
                name: name.clone(),
                limits: Some(limits),
            })
        }
        AuthCommand::Rotate { name, .. } => Op::Rotate(name.clone()),
        AuthCommand::Revoke { name } => Op::Revoke(name.clone()),
        AuthCommand::Ls => Op::List(pb::Empty {}),
    })
}

/// `op` made by the server, with the cluster secret.
fn on_server(cli: &Cli, op: Op) -> Result<pb::KeysReply> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let addr = cli
            .server
            .clone()
            .unwrap_or_else(|| sextant_proto::DEFAULT_LISTEN.to_string());
        let (addr, secret) = crate::session::server_for(cli, &addr)?;
        let options = crate::session::client_options(cli.tls_ca.as_deref())?;
        let client = Client::connect(&addr, &secret, options)
            .await
            .map_err(|e| crate::session::connect_failed(&addr, cli.tls_ca.as_deref(), e))?;
        client
            .manage_keys(op)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    })
}

/// `op` made here on the book of the cluster on etcd `urls` (the servers'
/// own code: `sextant_server::clientkeys::manage`).
fn on_etcd(args: &AuthArgs, urls: &str, op: Op) -> Result<pb::KeysReply> {
    let security = args.etcd_credentials.security()?;
    let mut cfg = security.config(security.endpoints(urls))?;
    let env = std::env::var("SEXTANT_ETCD_PREFIX")
        .ok()
        .filter(|p| !p.is_empty());
    if let Some(p) = args.prefix.clone().or(env) {
        cfg.prefix = etcd_prefix(&p)?;
    }
    // The book's calls wait on the runtime from this thread: a worker of
    // its own drives it meanwhile.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let book = sextant_server::cluster::keys::open_book(cfg, rt.handle().clone())
        .with_context(|| format!("cannot read the cluster's client keys from etcd at {urls}"))?;
    sextant_server::clientkeys::manage(&book, Some(op))
        .map_err(|status| anyhow::anyhow!("{}", status.message()))
}

/// `--prefix` as etcd keys start with it (as the servers' etcd_prefix:
/// [`sextant_coordinator::normalize_prefix`]).
fn etcd_prefix(p: &str) -> Result<String> {
    sextant_coordinator::normalize_prefix(p).map_err(|e| anyhow::anyhow!("--prefix: {e}"))
}

/// Prints what `command` did (`reply`), writing the key file of a new
/// secret.
fn show(cli: &Cli, command: &AuthCommand, reply: pb::KeysReply) -> Result<()> {
    let written = |reply: pb::KeysReply, name: &str, out: &Option<PathBuf>| -> Result<()> {
        let key = ClientKey::new(name, &reply.key).context("the server's key")?;
        let file = out
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{name}.key")));
        write_key_file(&file, &key)?;
        println!(
            "wrote the key {name} to {} (mode 0600): copy it to the client node and use \
             it there with --key-file {} (or SEXTANT_KEY_FILE)",
            file.display(),
            file.display()
        );
        Ok(())
    };
    match command {
        AuthCommand::Add { name, out, .. } | AuthCommand::Rotate { name, out } => {
            written(reply, name, out)
        }
        AuthCommand::Revoke { name } => {
            println!("revoked the key {name}");
            Ok(())
        }
        AuthCommand::Ls => {
            list(cli, &reply);
            Ok(())
        }
    }
}

/// `auth ls`'s table (or JSON).
fn list(cli: &Cli, reply: &pb::KeysReply) {
    if cli.json {
        let keys: Vec<_> = reply
            .keys
            .iter()
            .map(|k| {
                let l = k.limits.clone().unwrap_or_default();
                let ranges =
                    |rs: &[pb::U32Range]| rs.iter().map(|r| [r.lo, r.hi]).collect::<Vec<_>>();
                serde_json::json!({
                    "name": k.name,
                    "uids": ranges(&l.uids),
                    "gids": ranges(&l.gids),
                    "root_squash": l.root_squash,
                    "read_only": l.read_only,
                    "path": String::from_utf8_lossy(if l.path.is_empty() {
                        b"/"
                    } else {
                        &l.path
                    }),
                    "created": k.created,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(keys));
        return;
    }
    println!(
        "{:<24} {:<20} {:<20} {:<24} FLAGS",
        "NAME", "UIDS", "GIDS", "PATH"
    );
    for k in &reply.keys {
        let l = k.limits.clone().unwrap_or_default();
        let mut flags = Vec::new();
        if l.root_squash {
            flags.push("root-squash");
        }
        if l.read_only {
            flags.push("read-only");
        }
        let path = if l.path.is_empty() {
            "/".into()
        } else {
            String::from_utf8_lossy(&l.path).into_owned()
        };
        println!(
            "{:<24} {:<20} {:<20} {:<24} {}",
            k.name,
            show_ranges(&l.uids),
            show_ranges(&l.gids),
            path,
            if flags.is_empty() {
                "-".into()
            } else {
                flags.join(",")
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        let r = parse_ranges("1000-1999,42").unwrap();
        assert_eq!(
            r,
            vec![
                pb::U32Range { lo: 1000, hi: 1999 },
                pb::U32Range { lo: 42, hi: 42 }
            ]
        );
        assert!(parse_ranges("5-1").is_err());
        assert!(parse_ranges("x").is_err());
        assert_eq!(show_ranges(&r), "1000-1999,42");
    }

    #[test]
    fn etcd_prefixes_end_in_a_slash() {
        assert_eq!(etcd_prefix("/sextant").unwrap(), "/sextant/");
        assert_eq!(etcd_prefix("/c2/").unwrap(), "/c2/");
        assert!(etcd_prefix("").is_err());
        // Not a prefix a server would take: refused, not made "c2/".
        assert!(etcd_prefix("c2").is_err());
    }
}
