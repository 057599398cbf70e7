//! One function per subcommand.

use crate::format::{json_entry, mode_string, time_string, type_name};
use crate::import::command as import;
use crate::session::{fs_err, Session};
use crate::{Cli, Command};
use anyhow::{bail, Context, Result};
use futures::StreamExt;
use sextant_client::Error;
use sextant_engine::DirEntry;
use sextant_types::{FileType, FsError, SetAttr, Soid, TimeSet};

/// Runs a command other than `serve`.
pub async fn run(cli: Cli, s: Session) -> Result<()> {
    let json = cli.json;
    let ns = |typed: &str| crate::session::namespace_path(typed);
    match cli.command {
        Command::Serve(_)
        | Command::Mount(_)
        | Command::Umount { .. }
        | Command::Find(_)
        | Command::Stats(_)
        | Command::Du { .. }
        | Command::Init
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::Bench(_)
        | Command::Cluster(_)
        | Command::Auth(_) => {
            unreachable!("this command runs without a namespace session (see main)")
        }
        Command::Status => {
            status(&s, json, cli.settings.as_ref()).await?;
        }
        Command::Ls {
            long,
            all,
            almost_all,
            path,
        } => {
            let shown = if all {
                Shown::All
            } else if almost_all {
                Shown::AlmostAll
            } else {
                Shown::Visible
            };
            ls(&s, &ns(&path)?, long, shown, json).await?
        }
        Command::Stat { path, follow } => stat(&s, &ns(&path)?, follow, json).await?,
        Command::Mkdir {
            parents,
            mode,
            paths,
        } => {
            for p in &paths {
                mkdir(&s, &ns(p)?, mode, parents).await?;
            }
        }
        Command::Touch { paths } => {
            for p in &paths {
                touch(&s, &ns(p)?).await?;
            }
        }
        Command::Rm {
            recursive,
            force,
            paths,
        } => {
            for p in &paths {
                Box::pin(rm(&s, &ns(p)?, recursive, force)).await?;
            }
        }
        Command::Mv { source, target } => mv(&s, &ns(&source)?, &ns(&target)?).await?,
        Command::Ln {
            symbolic,
            target,
            link,
        } => {
            // A symbolic link's target is stored as typed, not a path here.
            let target = if symbolic { target } else { ns(&target)? };
            ln(&s, &target, &ns(&link)?, symbolic).await?
        }
        Command::Import {
            source,
            dest,
            with_data,
            data_dir,
        } => {
            let dest = ns(&dest)?;
            // The source first: a failed import leaves no empty destination.
            std::fs::read_dir(&source).with_context(|| format!("reading {}", source.display()))?;
            mkdir(&s, &dest, 0o755, true).await?;
            // The file contents go where the mount of this data directory
            // reads them.
            let objects = with_data.then(|| {
                data_dir.unwrap_or_else(|| {
                    cli.data
                        .clone()
                        .unwrap_or_else(crate::session::default_data)
                        .join("objects")
                })
            });
            if let Some(why) = import(&s, &source, &dest, objects.as_deref(), json).await? {
                // What was imported is kept (a log-less server writes it back).
                if let Err(e) = s.close().await {
                    eprintln!("sextant: {}", sextant_client::error_chain(e.as_ref()));
                }
                bail!(why);
            }
        }
        Command::Sync => s.sync().await?,
        Command::Chmod { mode, paths } => {
            for p in &paths {
                let set = SetAttr {
                    perm: Some(mode),
                    ..Default::default()
                };
                setattr(&s, &ns(p)?, &set).await?;
            }
        }
        Command::Chown { owner, paths } => {
            let (uid, gid) = parse_owner(&owner)?;
            for p in &paths {
                let set = SetAttr {
                    uid,
                    gid,
                    ..Default::default()
                };
                setattr(&s, &ns(p)?, &set).await?;
            }
        }
        Command::Getfattr { name, path } => {
            let path = ns(&path)?;
            let a = s.resolve(&path, true).await?;
            let value = s
                .getxattr(a.soid, name.as_bytes())
                .await
                .map_err(|e| fs_err(e, &path))?;
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(&value)?;
            out.write_all(b"\n")?;
        }
        Command::Setfattr { name, value, path } => {
            let path = ns(&path)?;
            let a = s.resolve(&path, true).await?;
            s.setxattr(a.soid, name.as_bytes(), value.as_bytes())
                .await
                .map_err(|e| fs_err(e, &path))?;
        }
    }
    s.close().await
}

async fn status(
    s: &Session,
    json: bool,
    settings: Option<&crate::settings::Settings>,
) -> Result<()> {
    let st = s.stats().await?;
    if json {
        let mut v = serde_json::to_value(st)?;
        if let (Some(map), Some(set)) = (v.as_object_mut(), settings) {
            map.insert("settings".into(), settings_json(set));
        }
        println!("{v}");
    } else {
        if let crate::session::Backend::Remote(c) = &s.backend {
            println!("server          {}", c.addr());
        }
        match st.stopped {
            None => println!("state           running"),
            Some(FsError::NoSpace) => println!(
                "state           STOPPED: the disk is full; every request fails with ENOSPC \
                 until the server restarts (free space first; nothing acknowledged is lost)"
            ),
            Some(e) => println!(
                "state           STOPPED after a failed write; every request fails ({e}) until \
                 the server restarts (see its log; nothing acknowledged is lost)"
            ),
        }
        println!("inodes          {}", st.inodes);
        println!(
            "tables          {} ({} loaded)",
            st.tables, st.loaded_tables
        );
        println!("resident bytes  {}", st.resident_bytes);
        let remote = match &s.backend {
            crate::session::Backend::Remote(c) => Some(c.stats(&s.cred).await?.1),
            crate::session::Backend::Local(_) => None,
        };
        match remote.filter(|r| r.arl_size > 0) {
            Some(r) => {
                println!(
                    "durability      log-less (ARL {}), written back through lsn {}, lsn {} issued",
                    r.arl_size, r.written_back_lsn, st.durable_lsn
                );
                println!(
                    "redo handed out {} bytes, {} inodes stamped",
                    r.backup_bytes_issued, r.stamped_inodes
                );
                if r.logless_unreturned > 0 {
                    println!(
                        "RECOVERY GAP    {} acknowledged operations were LOST at the last \
                         restart: no client handed them back (see the server's log)",
                        r.logless_unreturned
                    );
                }
            }
            None => println!("journal         lsn {} durable", st.durable_lsn),
        }
        if let Some(set) = settings {
            print_settings(set);
        }
    }
    Ok(())
}

/// Which data directory, server, secret and TLS authority were used, and
/// where each setting came from.
fn print_settings(set: &crate::settings::Settings) {
    println!(
        "data directory  {} ({})",
        set.data.value.display(),
        set.data.source
    );
    match &set.server {
        Some(v) => println!("server setting  {} ({})", v.value, v.source),
        None => println!(
            "server setting  none (the default address {} when a server answers there)",
            sextant_proto::DEFAULT_LISTEN
        ),
    }
    match &set.secret_file {
        Some(v) => println!("secret file     {} ({})", v.value.display(), v.source),
        None => println!(
            "secret file     {} (in the data directory)",
            sextant_server::secret::path(&set.data.value).display()
        ),
    }
    if let Some(v) = &set.tls_ca {
        println!("TLS authority   {} ({})", v.value.display(), v.source);
    }
    println!(
        "local socket    {} ({}; used as yourself when the secret is not readable)",
        set.socket.value.display(),
        set.socket.source
    );
}

fn settings_json(set: &crate::settings::Settings) -> serde_json::Value {
    let one = |value: String, source: &crate::settings::Source| serde_json::json!({ "value": value, "source": source.to_string() });
    serde_json::json!({
        "data": one(set.data.value.display().to_string(), &set.data.source),
        "server": set.server.as_ref().map(|v| one(v.value.clone(), &v.source)),
        "secret_file": set.secret_file.as_ref().map(|v| one(v.value.display().to_string(), &v.source)),
        "tls_ca": set.tls_ca.as_ref().map(|v| one(v.value.display().to_string(), &v.source)),
        "socket": one(set.socket.value.display().to_string(), &set.socket.source),
    })
}

/// Every entry of a directory, following readdir cookies.
async fn list_all(s: &Session, dir: Soid, path: &str) -> Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let batch = s
            .readdir(dir, cookie, 1024)
            .await
            .map_err(|e| fs_err(e, path))?;
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        out.extend(batch);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn join(dir: &str, name: &[u8]) -> String {
    let name = String::from_utf8_lossy(name);
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Which entries `ls` shows (GNU ls: `-a`, `-A`, or neither).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// Names not starting with `.`.
    Visible,
    /// Every name.
    AlmostAll,
    /// Every name, and `.` and `..`.
    All,
}

async fn ls(s: &Session, path: &str, long: bool, shown: Shown, json: bool) -> Result<()> {
    use std::io::Write;
    let attr = s.resolve(path, true).await?;
    // Names as bytes: printed as they are (like ls to a pipe), and exactly
    // in --json (see `JsonEntry`).
    let entries: Vec<(Vec<u8>, sextant_types::Attr)> = if attr.ftype == FileType::Directory {
        let mut out = Vec::new();
        if shown == Shown::All {
            out.push((b".".to_vec(), attr.clone()));
            let parent = match path.trim_end_matches('/').rsplit_once('/') {
                Some(("", _)) | None => "/",
                Some((p, _)) => p,
            };
            let up = s.resolve(parent, true).await?;
            out.push((b"..".to_vec(), up));
        }
        for e in list_all(s, attr.soid, path).await? {
            if shown == Shown::Visible && e.name.starts_with(b".") {
                continue;
            }
            let a = s.getattr(e.soid).await.map_err(|er| fs_err(er, path))?;
            out.push((e.name.to_vec(), a));
        }
        out
    } else {
        vec![(path.as_bytes().to_vec(), attr)]
    };
    // Owners and groups by name, as ls shows them (a number when the
    // local databases have none).
    let mut names = crate::find::names::Names::default();
    let mut out = std::io::stdout().lock();
    for (name, a) in &entries {
        if json {
            writeln!(out, "{}", serde_json::to_string(&json_entry(name, a))?)?;
            continue;
        }
        if long {
            write!(
                out,
                "{} {:>3} {:<8} {:<8} {:>10} {} ",
                mode_string(a),
                a.nlink,
                names.user(a.uid),
                names.group(a.gid),
                a.size,
                time_string(a.mtime)
            )?;
        }
        out.write_all(name)?;
        if long && a.ftype == FileType::Symlink {
            if let Ok(t) = s.readlink(a.soid).await {
                out.write_all(b" -> ")?;
                out.write_all(&t)?;
            }
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

async fn stat(s: &Session, path: &str, follow: bool, json: bool) -> Result<()> {
    let a = s.resolve(path, follow).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&json_entry(path.as_bytes(), &a))?
        );
        return Ok(());
    }
    // As GNU stat: a symlink shows its target.
    match a.ftype {
        FileType::Symlink => {
            let target = s.readlink(a.soid).await.map_err(|e| fs_err(e, path))?;
            println!("  File: {path} -> {}", String::from_utf8_lossy(&target));
        }
        _ => println!("  File: {path}"),
    }
    println!(
        "  Size: {:<12} Type: {}  Links: {}",
        a.size,
        type_name(a.ftype),
        a.nlink
    );
    println!("  SOID: {}", a.soid);
    println!(
        "Access: ({:04o}/{})  Uid: {}  Gid: {}",
        a.perm,
        mode_string(&a),
        a.uid,
        a.gid
    );
    println!("Access: {}", time_string(a.atime));
    println!("Modify: {}", time_string(a.mtime));
    println!("Change: {}", time_string(a.ctime));
    Ok(())
}

async fn mkdir(s: &Session, path: &str, mode: u32, parents: bool) -> Result<()> {
    if !parents {
        let (dir, name) = s.parent_of(path).await?;
        s.mkdir(dir, name.as_bytes(), mode)
            .await
            .map_err(|e| fs_err(e, path))?;
        return Ok(());
    }
    let mut cur = Soid::ROOT;
    let mut so_far = String::new();
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        so_far.push('/');
        so_far.push_str(comp);
        cur = match s.lookup(cur, comp.as_bytes()).await {
            Ok(a) if a.ftype == FileType::Directory => a.soid,
            Ok(_) => return Err(fs_err(Error::Fs(FsError::NotDir), &so_far)),
            Err(Error::Fs(FsError::NotFound)) => {
                match s.mkdir(cur, comp.as_bytes(), mode).await {
                    Ok(a) => a.soid,
                    // Someone else made it meanwhile: fine, like mkdir -p.
                    Err(Error::Fs(FsError::Exists)) => {
                        s.lookup(cur, comp.as_bytes())
                            .await
                            .map_err(|e| fs_err(e, &so_far))?
                            .soid
                    }
                    Err(e) => return Err(fs_err(e, &so_far)),
                }
            }
            Err(e) => return Err(fs_err(e, &so_far)),
        };
    }
    Ok(())
}

/// Sets attributes of what `path` names (a final symlink followed).
async fn setattr(s: &Session, path: &str, set: &SetAttr) -> Result<()> {
    let a = s.resolve(path, true).await?;
    s.setattr(a.soid, set).await.map_err(|e| fs_err(e, path))?;
    Ok(())
}

/// chown's OWNER[:GROUP] (or `OWNER.GROUP`, `:GROUP`): names looked up in
/// this machine's user database, or numbers.
fn parse_owner(spec: &str) -> Result<(Option<u32>, Option<u32>)> {
    use nix::unistd::{Group, User};
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let uid = match user {
        "" => None,
        u => Some(match u.parse::<u32>() {
            Ok(n) => n,
            Err(_) => User::from_name(u)
                .ok()
                .flatten()
                .map(|x| x.uid.as_raw())
                .with_context(|| format!("invalid user: {u:?}"))?,
        }),
    };
    let gid = match group {
        None | Some("") => None,
        Some(g) => Some(match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => Group::from_name(g)
                .ok()
                .flatten()
                .map(|x| x.gid.as_raw())
                .with_context(|| format!("invalid group: {g:?}"))?,
        }),
    };
    if uid.is_none() && gid.is_none() {
        bail!("invalid owner: {spec:?}");
    }
    Ok((uid, gid))
}

async fn touch(s: &Session, path: &str) -> Result<()> {
    // Only a missing file is created; any other failure is reported.
    match s.resolve_raw(path.as_bytes(), true).await {
        Ok(a) => {
            let set = SetAttr {
                atime: Some(TimeSet::Now),
                mtime: Some(TimeSet::Now),
                ..Default::default()
            };
            s.setattr(a.soid, &set).await.map_err(|e| fs_err(e, path))?;
        }
        Err(Error::Fs(FsError::NotFound)) => {
            let (dir, name) = s.parent_of(path).await?;
            s.create(dir, name.as_bytes(), 0o644)
                .await
                .map_err(|e| fs_err(e, path))?;
        }
        Err(e) => return Err(fs_err(e, path)),
    }
    Ok(())
}

async fn rm(s: &Session, path: &str, recursive: bool, force: bool) -> Result<()> {
    let (dir, name) = s.parent_of(path).await?;
    let attr = match s.lookup(dir, name.as_bytes()).await {
        Ok(a) => a,
        Err(Error::Fs(FsError::NotFound)) if force => return Ok(()),
        Err(e) => return Err(fs_err(e, path)),
    };
    if attr.ftype != FileType::Directory {
        s.unlink(dir, name.as_bytes())
            .await
            .map_err(|e| fs_err(e, path))?;
        return Ok(());
    }
    if !recursive {
        bail!("{path}: is a directory (use -r)");
    }
    let removal = Removal {
        s,
        force,
        in_flight: tokio::sync::Semaphore::new(RM_IN_FLIGHT),
        bar: indicatif::ProgressBar::new_spinner().with_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos} entries removed ({per_sec})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        ),
    };
    let r = removal.tree(attr.soid, path).await;
    removal.bar.finish_and_clear();
    r?;
    s.rmdir(dir, name.as_bytes())
        .await
        .map_err(|e| fs_err(e, path))?;
    Ok(())
}

/// Requests `rm -r` keeps in flight: one at a time, a large tree took a
/// minute per 125k entries (a round trip each); the server's session
/// answers many at once.
const RM_IN_FLIGHT: usize = 64;

/// One `rm -r`: the entries of a directory are removed concurrently (at
/// most [`RM_IN_FLIGHT`] requests at a time over the whole tree), each by
/// SOID and name bytes (names that are not UTF-8 are removed exactly,
/// never a look-alike); a directory goes once its entries have. The first
/// failure ends it (what was removed stays removed, like rm). A spinner
/// counts entries on a terminal.
struct Removal<'a> {
    s: &'a Session,
    force: bool,
    in_flight: tokio::sync::Semaphore,
    bar: indicatif::ProgressBar,
}

impl Removal<'_> {
    /// Removes everything below directory `dir` (`shown` in messages).
    async fn tree(&self, dir: Soid, shown: &str) -> Result<()> {
        let entries = {
            let _permit = self.in_flight.acquire().await?;
            list_all(self.s, dir, shown).await?
        };
        let mut removals = futures::stream::iter(entries.iter().map(|e| async move {
            let child = join(shown, &e.name);
            if e.ftype == FileType::Directory {
                Box::pin(self.tree(e.soid, &child)).await?;
            }
            let _permit = self.in_flight.acquire().await?;
            let r = if e.ftype == FileType::Directory {
                self.s.rmdir(dir, &e.name).await
            } else {
                self.s.unlink(dir, &e.name).await
            };
            match r {
                Ok(_) => {}
                // Gone meanwhile: what -f asks for.
                Err(Error::Fs(FsError::NotFound)) if self.force => {}
                Err(er) => return Err(fs_err(er, &child)),
            }
            self.bar.inc(1);
            anyhow::Ok(())
        }))
        .buffer_unordered(RM_IN_FLIGHT);
        while let Some(r) = futures::StreamExt::next(&mut removals).await {
            r?;
        }
        Ok(())
    }
}

async fn mv(s: &Session, source: &str, target: &str) -> Result<()> {
    let (sdir, sname) = s.parent_of(source).await?;
    // `mv a dir/` moves into an existing directory, like mv.
    let (tdir, tname) = match s.resolve(target, true).await {
        Ok(a) if a.ftype == FileType::Directory => (a.soid, sname),
        _ => s.parent_of(target).await?,
    };
    s.rename(sdir, sname.as_bytes(), tdir, tname.as_bytes())
        .await
        .map_err(|e| fs_err(e, source))?;
    Ok(())
}

async fn ln(s: &Session, target: &str, link: &str, symbolic: bool) -> Result<()> {
    let (dir, name) = s.parent_of(link).await?;
    let r = if symbolic {
        s.symlink(dir, name.as_bytes(), target.as_bytes()).await
    } else {
        let t = s.resolve(target, false).await?;
        s.link(t.soid, dir, name.as_bytes()).await
    };
    r.map_err(|e| fs_err(e, link))?;
    Ok(())
}
