//! `sextant stats`: counts and total sizes of what `sextant find` would
//! print, grouped. The server aggregates when it can decide the whole
//! expression (no `-path`, `-prune` or client-only test: then only the
//! starting point is evaluated here, as find names it as typed); otherwise
//! the hits stream here and are counted after the exact evaluation.

use super::names::{now, Names, RealEnv};
use super::parse::{self, Action, Command, Node, Test};
use super::plan::{self, Tree};
use super::sink::Counter;
use super::{depth, describe, mounts, open_session_with, prepare, report, Run};
use crate::Cli;
use anyhow::{Context, Result};
use sextant_client::Error;
use sextant_engine::search::{Aggregation, Expr, GroupBy, GroupKey, Pred};
use sextant_proto::search::{SearchScope, SearchSpec};
use sextant_types::FsError;

/// Shown by `sextant stats --help`.
pub const STATS_HELP: &str = "\
Counts and total sizes of what `sextant find PATH... EXPRESSION` would
print, optionally grouped (--by user|group|type|ext|dir). The expression is
find's (tests and operators; no actions). Permission-aware: only what the
caller could list is counted. Hard links count once per path, like
`find | wc -l`; --by dir keys are namespace paths (also for a PATH under a
mount); --by ext keys are what follows the last '.' of the name.

In --json, a key that is not UTF-8 also comes exactly, as key_hex.

Examples:
  sextant stats /proj
  sextant stats --by user /mnt/sextant/proj -type f
  sextant --json stats --by ext /proj -size +1M";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    User,
    Group,
    Type,
    Ext,
    Dir,
}

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// Group the totals.
    #[arg(long, value_enum)]
    pub by: Option<By>,
    /// Starting points (default /), then a find expression.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PATH... EXPRESSION"
    )]
    pub args: Vec<String>,
}

/// What the server is asked for: grouped totals, or — ungrouped (`du`,
/// `stats` without `--by`) — the total only (`count_only`), which the
/// server adds up from the tables' kept summaries as it does totals by
/// owner (a grouping by directory would make it visit every entry).
fn ask_totals(spec: &mut SearchSpec, by: Option<By>) {
    match by {
        Some(by) => spec.group_by = Some(group_by(Some(by))),
        None => spec.count_only = true,
    }
}

/// The grouping of `by`; without one, hits counted here (the starting
/// point, or what the server cannot decide) are keyed by directory, which
/// `print_stats` leaves out.
fn group_by(by: Option<By>) -> GroupBy {
    match by {
        Some(By::User) => GroupBy::Uid,
        Some(By::Group) => GroupBy::Gid,
        Some(By::Type) => GroupBy::Type,
        Some(By::Ext) => GroupBy::Extension,
        Some(By::Dir) | None => GroupBy::Directory,
    }
}

/// Can the server aggregate this expression exactly? Yes unless it has
/// `-prune`, `-path` or `-regex` (matched against printed paths) or a
/// client-only test;
/// actions other than the implicit `-print` are refused before.
fn server_exact(tree: &Tree) -> bool {
    let mut ok = true;
    tree.for_each_leaf(&mut |n| match n {
        Node::Test(Test::Pred(Pred::Path { .. }) | Test::Client(_) | Test::Regex(_))
        | Node::Action(Action::Prune) => ok = false,
        _ => {}
    });
    ok
}

/// `sextant stats`.
pub async fn stats(cli: &Cli, a: &StatsArgs) -> Result<bool> {
    let _ = super::COMMAND.set("stats");
    let own = own_options(&a.args, a.by, cli.json)?;
    // Totals of what could be read, also when a starting point failed
    // (reported, exit 1), as find prints what it could.
    totals(cli, own.args, own.by, |total, names, _| {
        print_stats(total, own.by, own.json, names)
    })
    .await
}

/// `stats`' own options where GNU-style tools accept them: anywhere,
/// before or after the paths and the expression (`stats /proj --by user
/// --json`), up to a `--`.
struct Own {
    args: Vec<String>,
    by: Option<By>,
    json: bool,
}

fn own_options(args: &[String], by: Option<By>, json: bool) -> Result<Own> {
    use clap::ValueEnum;
    let mut own = Own {
        args: Vec::with_capacity(args.len()),
        by,
        json,
    };
    let parse_by = |v: &str| {
        By::from_str(v, true)
            .map_err(|_| anyhow::anyhow!("--by {v:?}: expected one of user, group, type, ext, dir"))
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--" => {
                own.args.extend(it.cloned());
                break;
            }
            "--json" => own.json = true,
            "--by" => {
                let v = it
                    .next()
                    .context("--by needs a value: user, group, type, ext or dir")?;
                own.by = Some(parse_by(v)?);
            }
            _ => match a.strip_prefix("--by=") {
                Some(v) => own.by = Some(parse_by(v)?),
                None => own.args.push(a.clone()),
            },
        }
    }
    Ok(own)
}

/// `sextant du PATH...`: for each PATH, the entries under it (itself
/// included) and their total size, one line each — `sextant stats PATH` in
/// du's words, so from the same search aggregation (and root's maintained
/// summaries), not a crawl, and PATH may be under a mount. A PATH that
/// cannot be read is reported and prints nothing; the others still do.
pub async fn du(cli: &Cli, paths: &[String], human: bool) -> Result<bool> {
    let _ = super::COMMAND.set("du");
    let mut ok = true;
    for path in paths {
        ok &= totals(cli, vec![path.clone()], None, |total, _, failed| {
            if failed {
                // Reported already; a total of nothing would read as "empty".
                return Ok(());
            }
            let (entries, bytes) = (total.total.count, total.total.size);
            if cli.json {
                println!(
                    "{}",
                    serde_json::json!({ "path": path, "entries": entries, "bytes": bytes })
                );
            } else if human {
                println!("{}\t{entries} entries\t{path}", human_size(bytes));
            } else {
                println!("{bytes}\t{entries} entries\t{path}");
            }
            Ok(())
        })
        .await?;
    }
    Ok(ok)
}

/// What `stats` and `du` share: `args` are starting points (default `/`)
/// and a find expression; the totals of what find would print go to
/// `finish` (with the names of owners and groups, and whether something
/// was reported as failed). False when something failed.
async fn totals(
    cli: &Cli,
    mut args: Vec<String>,
    by: Option<By>,
    finish: impl FnOnce(&Aggregation, &mut Names, bool) -> Result<()>,
) -> Result<bool> {
    let now = now();
    if args
        .first()
        .is_none_or(|f| f.starts_with('-') || f == "(" || f == "!")
    {
        args.insert(0, "/".into());
    }
    let cmd = match parse::parse(&args, &RealEnv { now }) {
        Ok(c) => c,
        Err(e) => {
            report(e);
            return Ok(false);
        }
    };
    let mut actions = false;
    cmd.expr.for_each_leaf(&mut |n| {
        if matches!(n, Node::Action(a) if !matches!(a, Action::Prune)) {
            actions = true;
        }
    });
    // The parser appends the implicit -print: only it may be there.
    if actions
        && !matches!(&cmd.expr, Node::And(_, b) if **b == Node::Action(Action::Print))
        && cmd.expr != Node::Action(Action::Print)
    {
        report(
            "actions (-print, -printf, ...) are not allowed; stats counts what find would print",
        );
        return Ok(false);
    }
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let mounts = mounts::current();
    // Aggregated by the server (see below): its searches are gathered by
    // the server asked from the others, wherever the tables are (one
    // call each), so the session need not find the tables' owner first —
    // which fetched the whole route map per command.
    let gathered = server_exact(&cmd.expr)
        && cmd
            .paths
            .iter()
            .all(|p| mounts::locate(p, &cwd, &mounts).is_ok_and(|l| l.mount.is_none()));
    let mut client_decided = false;
    cmd.expr.for_each_leaf(&mut |n| {
        if matches!(n, Node::Test(Test::Samefile(_) | Test::Inum(_))) {
            client_decided = true;
        }
    });
    let s = open_session_with(cli, &cmd.paths, &mounts, &cwd, !gathered || client_decided).await?;
    let mut run = match prepare(&s, &cmd, cwd, mounts, now).await {
        Ok(r) => r,
        Err(e) => {
            report(format_args!("{e:#}"));
            return Ok(false);
        }
    };
    let grouped = by;
    let by = group_by(by);
    let mut total = Aggregation::default();
    let exact = server_exact(&run.tree);
    for p in &cmd.paths {
        let r: Result<(), Error> = async {
            let mut counter = Counter {
                by,
                agg: Aggregation::default(),
                counted: false,
            };
            // Under a mount, `-inum` compares the mount's inode numbers,
            // which the server does not know: counted here then.
            let mount_variant = run.local_variant.is_some()
                && mounts::locate(p, &run.cwd, &run.mounts).is_ok_and(|l| l.mount.is_some());
            if exact && !mount_variant {
                // The starting point client-side (find names it as
                // typed), the rest aggregated by the server.
                let saved = run.cmd.max_depth;
                let loc = mounts::locate(p, &run.cwd, &run.mounts)
                    .map_err(|_| Error::Fs(FsError::NotFound))?;
                if super::refused_by_mount(p, &loc) {
                    run.failed = true;
                    return Ok(());
                }
                // The starting point (depth 0) and the totals below it are
                // asked at once, not the totals after the depth-0 search:
                // on a cluster that wait was a whole round of calls (the
                // root's holder) before the servers' parts were asked.
                // Both start at one object: on a cluster the path is
                // resolved once, here (each resolution is a walk across
                // the servers), and both searches start at its SOID; on
                // one server each search resolves it itself (no call of
                // its own). `/` needs no resolution (the searches skip
                // it), and a path that cannot be resolved here (missing,
                // or above a client key's subtree, which the servers
                // clamp) is left to the searches, which report it.
                let all_slashes = loc.ns.iter().all(|&c| c == b'/');
                let mut known = None;
                if s.spread_recently() && !all_slashes {
                    sextant_client::timing::mark(|| {
                        "stats: resolving the starting point's path".into()
                    });
                    known = s.resolve_raw(&loc.ns, false).await.ok().map(|a| a.soid);
                }
                let scope = match known {
                    Some(soid) => SearchScope::Soid(soid),
                    None => SearchScope::Path(loc.ns.clone()),
                };
                let below = plan::and(
                    depth(run.cmd.min_depth.max(1), saved),
                    run.filters.out.clone(),
                );
                let below = (saved > 0 && below != Expr::False).then(|| {
                    let mut spec = SearchSpec::new(scope, below);
                    ask_totals(&mut spec, grouped);
                    spec
                });
                let tally = async {
                    let Some(spec) = &below else {
                        return Ok(None);
                    };
                    let mut h = s.search(spec).await?;
                    while h.next_batch().await?.is_some() {}
                    Ok::<_, Error>(h.done().cloned())
                };
                let probe = Command {
                    max_depth: 0,
                    ..run.cmd.clone()
                };
                let mut sub = (run.cmd.min_depth == 0).then(|| {
                    let mut sub = Run::new(run.s, run.cwd.clone(), run.mounts.clone(), &probe, now);
                    sub.tree = run.tree.clone();
                    sub.filters = run.filters.clone();
                    sub.known_root = known;
                    sub
                });
                let start = async {
                    match &mut sub {
                        Some(sub) => sub.start(p, &mut counter).await,
                        None => Ok(()),
                    }
                };
                let (started, tallied) = futures::join!(start, tally);
                // The starting point's failure is the one reported (the
                // totals below it fail the same way).
                started?;
                if let Some(sub) = &sub {
                    run.failed |= sub.failed;
                }
                if let Some(d) = tallied? {
                    for (k, t) in &d.groups {
                        let e = counter.agg.groups.entry(k.clone()).or_default();
                        e.count += t.count;
                        e.size += t.size;
                    }
                    counter.agg.total.count += d.count;
                    counter.agg.total.size += d.total_size;
                }
            } else {
                run.start(p, &mut counter).await?;
            }
            for (k, t) in counter.agg.groups {
                let e = total.groups.entry(k).or_default();
                e.count += t.count;
                e.size += t.size;
            }
            total.total.count += counter.agg.total.count;
            total.total.size += counter.agg.total.size;
            Ok(())
        }
        .await;
        if let Err(e) = r {
            report(format_args!("'{p}': {}", describe(&e)));
            run.failed = true;
        }
    }
    finish(&total, &mut run.names, run.failed)?;
    let ok = !run.failed;
    drop(run);
    s.close().await?;
    Ok(ok)
}

/// A size as `du -h` prints it: powers of 1024, one decimal below 10
/// (rounded up, as du does), a unit letter (`0`, `512`, `1.5K`, `23M`).
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["K", "M", "G", "T", "P", "E"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v < 10.0 {
        let tenths = (v * 10.0).ceil() / 10.0;
        if tenths < 10.0 {
            return format!("{tenths:.1}{}", UNITS[unit]);
        }
    }
    format!("{:.0}{}", v.ceil(), UNITS[unit])
}

/// The text of a group's key; files without an extension are grouped
/// under `(none)`.
fn key_text(k: &GroupKey, names: &mut Names) -> String {
    match k {
        GroupKey::Extension(e) if e.is_empty() => "(none)".to_string(),
        GroupKey::Uid(u) => names.user(*u).to_string(),
        GroupKey::Gid(g) => names.group(*g).to_string(),
        GroupKey::Type(t) => crate::format::type_name(*t).to_string(),
        GroupKey::Extension(e) => String::from_utf8_lossy(e).into_owned(),
        GroupKey::Directory(d) => String::from_utf8_lossy(d).into_owned(),
    }
}

/// One group of `--json` output: its key as text (owner and group names
/// resolved, with the numeric id beside), count and size; a key of bytes
/// that are not UTF-8 (an extension, a directory) also exactly, as
/// `key_hex` (as paths have `path_hex`, see `format::JsonEntry`).
fn group_json(k: &GroupKey, count: u64, size: u64, names: &mut Names) -> serde_json::Value {
    let mut v = serde_json::json!({ "key": key_text(k, names), "count": count, "size": size });
    match k {
        GroupKey::Uid(u) => v["uid"] = (*u).into(),
        GroupKey::Gid(g) => v["gid"] = (*g).into(),
        GroupKey::Extension(b) | GroupKey::Directory(b) if std::str::from_utf8(b).is_err() => {
            v["key_hex"] = crate::format::hex(b).into()
        }
        _ => {}
    }
    v
}

fn print_stats(agg: &Aggregation, by: Option<By>, json: bool, names: &mut Names) -> Result<()> {
    if json {
        let groups: Vec<serde_json::Value> = if by.is_some() {
            agg.groups
                .iter()
                .map(|(k, t)| group_json(k, t.count, t.size, names))
                .collect()
        } else {
            Vec::new()
        };
        println!(
            "{}",
            serde_json::json!({
                "groups": groups,
                "total": { "count": agg.total.count, "size": agg.total.size },
            })
        );
        return Ok(());
    }
    if by.is_some() {
        println!("{:>12} {:>16}  KEY", "COUNT", "SIZE");
        for (k, t) in &agg.groups {
            println!("{:>12} {:>16}  {}", t.count, t.size, key_text(k, names));
        }
    }
    println!("{:>12} {:>16}  total", agg.total.count, agg.total.size);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_options_anywhere_up_to_a_double_dash() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = own_options(
            &args(&["/proj", "--by", "user", "--json", "-type", "f"]),
            None,
            false,
        )
        .unwrap();
        assert_eq!((o.by, o.json), (Some(By::User), true));
        assert_eq!(o.args, args(&["/proj", "-type", "f"]));
        let o = own_options(&args(&["--by=ext", "/p", "--", "--json"]), None, false).unwrap();
        assert_eq!((o.by, o.json), (Some(By::Ext), false));
        assert_eq!(o.args, args(&["/p", "--json"]));
        assert!(own_options(&args(&["/p", "--by", "colour"]), None, false).is_err());
        assert!(own_options(&args(&["/p", "--by"]), None, false).is_err());
    }

    #[test]
    fn human_sizes_as_du_prints_them() {
        for (bytes, shown) in [
            (0, "0"),
            (1023, "1023"),
            (1024, "1.0K"),
            (1536, "1.5K"),
            (1537, "1.6K"),
            (10 * 1024, "10K"),
            (10 * 1024 + 1, "11K"),
            (5 * 1024 * 1024, "5.0M"),
            (3 * 1024 * 1024 * 1024, "3.0G"),
        ] {
            assert_eq!(human_size(bytes), shown, "{bytes}");
        }
    }

    #[test]
    fn files_without_an_extension_are_named() {
        let mut names = Names::default();
        assert_eq!(
            key_text(&GroupKey::Extension(Vec::new().into()), &mut names),
            "(none)"
        );
    }

    /// Ungrouped totals ask the server for the total only, answered from
    /// the kept summaries like totals by owner, not for totals by
    /// directory (which visit every entry).
    #[test]
    fn ungrouped_totals_ask_for_the_total_only() {
        let spec = |by| {
            let mut s = SearchSpec::new(SearchScope::Path(b"/".to_vec()), Expr::True);
            ask_totals(&mut s, by);
            s
        };
        let s = spec(None);
        assert!(s.count_only);
        assert_eq!(s.group_by, None);
        assert!(s.validate().is_ok());
        for (by, want) in [
            (By::User, GroupBy::Uid),
            (By::Group, GroupBy::Gid),
            (By::Type, GroupBy::Type),
            (By::Ext, GroupBy::Extension),
            (By::Dir, GroupBy::Directory),
        ] {
            let s = spec(Some(by));
            assert_eq!((s.group_by, s.count_only), (Some(want), false));
        }
    }

    #[test]
    fn group_keys_in_json() {
        let mut names = Names::default();
        let v = group_json(&GroupKey::Uid(0), 2, 30, &mut names);
        assert_eq!(
            (v["uid"].as_u64(), v["count"].as_u64(), v["size"].as_u64()),
            (Some(0), Some(2), Some(30))
        );
        let v = group_json(
            &GroupKey::Extension(b"txt".to_vec().into()),
            1,
            1,
            &mut names,
        );
        assert_eq!(v["key"], "txt");
        assert!(v.get("key_hex").is_none());
        let v = group_json(
            &GroupKey::Directory(b"/d\xff".to_vec().into()),
            1,
            1,
            &mut names,
        );
        assert_eq!(v["key"], "/d\u{fffd}");
        assert_eq!(v["key_hex"], "2f64ff");
    }
}
