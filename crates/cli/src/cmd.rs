//! One function per subcommand.

use crate::format::{json_entry, mode_string, time_string, type_name};
use crate::import::import;
use crate::session::{fs_err, Session};
use crate::{Cli, Command};
use anyhow::{bail, Result};
use sextant_engine::{DirEntry, RenameFlags};
use sextant_types::{FileType, FsError, SetAttr, Soid, TimeSet};

pub fn run(cli: Cli) -> Result<()> {
    let s = Session::open(&cli.data)?;
    let json = cli.json;
    match cli.command {
        Command::Status => status(&s, json)?,
        Command::Ls { long, path } => ls(&s, &path, long, json)?,
        Command::Stat { path, no_follow } => stat(&s, &path, !no_follow, json)?,
        Command::Mkdir {
            parents,
            mode,
            paths,
        } => {
            for p in &paths {
                mkdir(&s, p, mode, parents)?;
            }
        }
        Command::Touch { paths } => {
            for p in &paths {
                touch(&s, p)?;
            }
        }
        Command::Rm {
            recursive,
            force,
            paths,
        } => {
            for p in &paths {
                rm(&s, p, recursive, force)?;
            }
        }
        Command::Mv { source, target } => mv(&s, &source, &target)?,
        Command::Ln {
            symbolic,
            target,
            link,
        } => ln(&s, &target, &link, symbolic)?,
        Command::Du { path } => du(&s, &path, json)?,
        Command::Import { source, dest } => {
            let report = import(&s, &source, &dest, json)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!(
                    "imported {} files, {} directories, {} symlinks in {:.2} s ({:.0}/s); {} skipped",
                    report.files,
                    report.directories,
                    report.symlinks,
                    report.seconds,
                    report.per_second,
                    report.skipped
                );
            }
        }
        Command::Sync => s.engine.sync()?,
    }
    s.close()
}

fn status(s: &Session, json: bool) -> Result<()> {
    let st = s.engine.stats();
    if json {
        println!("{}", serde_json::to_string(&st)?);
    } else {
        println!("inodes          {}", st.inodes);
        println!(
            "tables          {} ({} loaded)",
            st.tables, st.loaded_tables
        );
        println!("resident bytes  {}", st.resident_bytes);
        println!("journal         lsn {} durable", st.durable_lsn);
    }
    Ok(())
}

/// Every entry of a directory, following readdir cookies.
fn list_all(s: &Session, dir: Soid, path: &str) -> Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let batch = s
            .engine
            .readdir(&s.cred, dir, cookie, 1024)
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

fn ls(s: &Session, path: &str, long: bool, json: bool) -> Result<()> {
    let attr = s.resolve(path, true)?;
    let entries: Vec<(String, sextant_types::Attr)> = if attr.ftype == FileType::Directory {
        list_all(s, attr.soid, path)?
            .into_iter()
            .map(|e| {
                let a = s.engine.getattr(e.soid).map_err(|er| fs_err(er, path))?;
                Ok((String::from_utf8_lossy(&e.name).into_owned(), a))
            })
            .collect::<Result<_>>()?
    } else {
        vec![(path.to_string(), attr)]
    };
    for (name, a) in &entries {
        if json {
            println!("{}", serde_json::to_string(&json_entry(name, a))?);
        } else if long {
            let target = if a.ftype == FileType::Symlink {
                s.engine
                    .readlink(a.soid)
                    .map(|t| format!(" -> {}", String::from_utf8_lossy(&t)))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            println!(
                "{} {:>3} {:>6} {:>6} {:>10} {} {name}{target}",
                mode_string(a),
                a.nlink,
                a.uid,
                a.gid,
                a.size,
                time_string(a.mtime)
            );
        } else {
            println!("{name}");
        }
    }
    Ok(())
}

fn stat(s: &Session, path: &str, follow: bool, json: bool) -> Result<()> {
    let a = s.resolve(path, follow)?;
    if json {
        println!("{}", serde_json::to_string(&json_entry(path, &a))?);
        return Ok(());
    }
    println!("  File: {path}");
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

fn mkdir(s: &Session, path: &str, mode: u32, parents: bool) -> Result<()> {
    if !parents {
        let (dir, name) = s.parent_of(path)?;
        s.engine
            .mkdir(&s.cred, dir, name.as_bytes(), mode)
            .and_then(|c| c.wait(&s.engine))
            .map_err(|e| fs_err(e, path))?;
        return Ok(());
    }
    let mut cur = Soid::ROOT;
    let mut so_far = String::new();
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        so_far.push('/');
        so_far.push_str(comp);
        cur = match s.engine.lookup(&s.cred, cur, comp.as_bytes()) {
            Ok(a) if a.ftype == FileType::Directory => a.soid,
            Ok(_) => return Err(fs_err(FsError::NotDir, &so_far)),
            Err(FsError::NotFound) => {
                s.engine
                    .mkdir(&s.cred, cur, comp.as_bytes(), mode)
                    .and_then(|c| c.wait(&s.engine))
                    .map_err(|e| fs_err(e, &so_far))?
                    .soid
            }
            Err(e) => return Err(fs_err(e, &so_far)),
        };
    }
    Ok(())
}

fn touch(s: &Session, path: &str) -> Result<()> {
    match s.resolve(path, true) {
        Ok(a) => {
            let set = SetAttr {
                atime: Some(TimeSet::Now),
                mtime: Some(TimeSet::Now),
                ..Default::default()
            };
            s.engine
                .setattr(&s.cred, a.soid, &set)
                .and_then(|c| c.wait(&s.engine))
                .map_err(|e| fs_err(e, path))?;
        }
        Err(_) => {
            let (dir, name) = s.parent_of(path)?;
            s.engine
                .create(&s.cred, dir, name.as_bytes(), 0o644, false)
                .and_then(|c| c.wait(&s.engine))
                .map_err(|e| fs_err(e, path))?;
        }
    }
    Ok(())
}

fn rm(s: &Session, path: &str, recursive: bool, force: bool) -> Result<()> {
    let (dir, name) = s.parent_of(path)?;
    let attr = match s.engine.lookup(&s.cred, dir, name.as_bytes()) {
        Ok(a) => a,
        Err(FsError::NotFound) if force => return Ok(()),
        Err(e) => return Err(fs_err(e, path)),
    };
    if attr.ftype == FileType::Directory {
        if !recursive {
            bail!("{path}: is a directory (use -r)");
        }
        for e in list_all(s, attr.soid, path)? {
            rm(s, &join(path, &e.name), true, force)?;
        }
        s.engine
            .rmdir(&s.cred, dir, name.as_bytes())
            .and_then(|c| c.wait(&s.engine))
            .map_err(|e| fs_err(e, path))?;
    } else {
        s.engine
            .unlink(&s.cred, dir, name.as_bytes())
            .and_then(|c| c.wait(&s.engine))
            .map_err(|e| fs_err(e, path))?;
    }
    Ok(())
}

fn mv(s: &Session, source: &str, target: &str) -> Result<()> {
    let (sdir, sname) = s.parent_of(source)?;
    // `mv a dir/` moves into an existing directory, like mv.
    let (tdir, tname) = match s.resolve(target, true) {
        Ok(a) if a.ftype == FileType::Directory => (a.soid, sname),
        _ => s.parent_of(target)?,
    };
    s.engine
        .rename(
            &s.cred,
            sdir,
            sname.as_bytes(),
            tdir,
            tname.as_bytes(),
            RenameFlags::default(),
        )
        .and_then(|c| c.wait(&s.engine))
        .map_err(|e| fs_err(e, source))?;
    Ok(())
}

fn ln(s: &Session, target: &str, link: &str, symbolic: bool) -> Result<()> {
    let (dir, name) = s.parent_of(link)?;
    let r = if symbolic {
        s.engine
            .symlink(&s.cred, dir, name.as_bytes(), target.as_bytes())
    } else {
        let t = s.resolve(target, false)?;
        s.engine.link(&s.cred, t.soid, dir, name.as_bytes())
    };
    r.and_then(|c| c.wait(&s.engine))
        .map_err(|e| fs_err(e, link))?;
    Ok(())
}

fn du(s: &Session, path: &str, json: bool) -> Result<()> {
    let root = s.resolve(path, true)?;
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![(root, path.to_string())];
    while let Some((a, p)) = stack.pop() {
        files += 1;
        bytes += a.size;
        if a.ftype == FileType::Directory {
            for e in list_all(s, a.soid, &p)? {
                let child = s.engine.getattr(e.soid).map_err(|er| fs_err(er, &p))?;
                stack.push((child, join(&p, &e.name)));
            }
        }
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "path": path, "entries": files, "bytes": bytes })
        );
    } else {
        println!("{bytes}\t{files} entries\t{path}");
    }
    Ok(())
}
