//! Probe (docs/BENCHMARKS.md, "File removes through the mount: one event
//! loop instead of blocking FUSE threads"): a single-threaded async FUSE
//! daemon — fuse3 reading a non-blocking `/dev/fuse` on a current-thread
//! tokio runtime that also drives the server connection — over the sextant
//! client, with just the operations a create-then-remove benchmark needs
//! (no readdir, setattr or file data). It measures what one event loop for
//! the device and the socket would save against `sextant mount`'s fuser
//! threads, which each block in `read(2)` and then in the reply's
//! `epoll_wait`. Not part of the product (its own workspace).
//!
//!     cargo build --release --manifest-path bench/fuse3-loop-probe/Cargo.toml
//!     bench/fuse3-loop-probe/target/release/fuse3-loop-probe ADDR SECRET_FILE MOUNTPOINT
//!
//! Unmount with `fusermount3 -u MOUNTPOINT`.
use fuse3::raw::prelude::*;
use fuse3::{MountOptions, Result, Timestamp};
use sextant_client::{Client, Options};
use sextant_fuse::{dirattrs::DirAttrs, nodes::Nodes};
use sextant_types::{Attr, Credentials, FileType as FT, Soid};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);

struct Fs {
    client: Client,
    nodes: Nodes,
    dirs: DirAttrs,
}

fn ts(n: sextant_types::Nanos) -> Timestamp {
    Timestamp::new(
        n.0.div_euclid(1_000_000_000),
        n.0.rem_euclid(1_000_000_000) as u32,
    )
}

fn err(e: sextant_client::Error) -> fuse3::Errno {
    e.errno().into()
}

impl Fs {
    fn cred(r: &Request) -> Credentials {
        Credentials::user(r.uid, r.gid)
    }
    fn soid(&self, ino: u64) -> Result<Soid> {
        self.nodes.soid(ino).ok_or_else(|| libc::ESTALE.into())
    }
    fn fattr(&self, a: &Attr, ino: u64) -> FileAttr {
        FileAttr {
            ino,
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: ts(a.atime),
            mtime: ts(a.mtime),
            ctime: ts(a.ctime),
            kind: match a.ftype {
                FT::Directory => FileType::Directory,
                FT::Symlink => FileType::Symlink,
                _ => FileType::RegularFile,
            },
            perm: a.perm as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            blksize: 4096,
        }
    }
    /// Ends a change of a directory begun with `DirAttrs::begin`, keeping
    /// the directory's attributes the reply carried (as the mount does).
    fn end_change(
        &self,
        change: sextant_fuse::dirattrs::Change,
        reply: std::result::Result<sextant_client::WithDir<Attr>, sextant_client::Error>,
    ) -> Result<Attr> {
        match reply {
            Ok(r) => {
                self.dirs.end(change, r.dir, 0);
                Ok(r.value)
            }
            Err(e) => {
                self.dirs.end(change, None, 0);
                Err(err(e))
            }
        }
    }
    fn entry(&self, parent: u64, name: &OsStr, a: &Attr) -> ReplyEntry {
        let ino = self.nodes.ino(a.soid, true);
        self.nodes.named(ino, parent, name.as_bytes());
        ReplyEntry {
            ttl: TTL,
            attr: self.fattr(a, ino),
            generation: 0,
        }
    }
}

impl Filesystem for Fs {
    async fn init(&self, _req: Request) -> Result<ReplyInit> {
        Ok(ReplyInit::new(
            std::num::NonZeroU32::MIN.saturating_add(128 * 1024 - 1),
        ))
    }
    async fn destroy(&self, _req: Request) {}
    async fn lookup(&self, req: Request, parent: u64, name: &OsStr) -> Result<ReplyEntry> {
        let p = self.soid(parent)?;
        let a = self
            .client
            .lookup(&Self::cred(&req), p, name.as_bytes())
            .await
            .map_err(err)?;
        Ok(self.entry(parent, name, &a))
    }
    async fn forget(&self, _req: Request, inode: u64, nlookup: u64) {
        self.nodes.forget(inode, nlookup);
    }
    async fn batch_forget(&self, _req: Request, inodes: &[(u64, u64)]) {
        for (i, n) in inodes {
            self.nodes.forget(*i, *n);
        }
    }
    async fn getattr(
        &self,
        req: Request,
        inode: u64,
        _fh: Option<u64>,
        _flags: u32,
    ) -> Result<ReplyAttr> {
        if let Some(a) = self.dirs.take(inode, 0) {
            return Ok(ReplyAttr {
                ttl: TTL,
                attr: self.fattr(&a, inode),
            });
        }
        let s = self.soid(inode)?;
        let a = self
            .client
            .getattr(&Self::cred(&req), s)
            .await
            .map_err(err)?;
        Ok(ReplyAttr {
            ttl: TTL,
            attr: self.fattr(&a, inode),
        })
    }
    async fn create(
        &self,
        req: Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: u32,
    ) -> Result<ReplyCreated> {
        let p = self.soid(parent)?;
        let ch = self.dirs.begin(parent, 0);
        let excl = flags as i32 & libc::O_EXCL != 0;
        let r = self
            .client
            .create_with_dir(
                &Self::cred(&req),
                p,
                name.as_bytes(),
                mode & 0o7777,
                excl,
                true,
            )
            .await;
        let created = self.end_change(ch, r)?;
        let e = self.entry(parent, name, &created);
        Ok(ReplyCreated {
            ttl: TTL,
            attr: e.attr,
            generation: 0,
            fh: 0,
            flags: 0,
        })
    }
    async fn mkdir(
        &self,
        req: Request,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
    ) -> Result<ReplyEntry> {
        let p = self.soid(parent)?;
        let a = self
            .client
            .mkdir(&Self::cred(&req), p, name.as_bytes(), mode & 0o7777)
            .await
            .map_err(err)?;
        Ok(self.entry(parent, name, &a))
    }
    async fn unlink(&self, req: Request, parent: u64, name: &OsStr) -> Result<()> {
        let p = self.soid(parent)?;
        let ch = self.dirs.begin(parent, 0);
        let r = self
            .client
            .unlink_with_dir(&Self::cred(&req), p, name.as_bytes(), true)
            .await;
        let gone = self.end_change(ch, r)?;
        if gone.nlink <= 1 {
            self.nodes.detach(gone.soid);
        }
        Ok(())
    }
    async fn rmdir(&self, req: Request, parent: u64, name: &OsStr) -> Result<()> {
        let p = self.soid(parent)?;
        let r = self
            .client
            .rmdir_with_dir(&Self::cred(&req), p, name.as_bytes(), false)
            .await
            .map_err(err)?;
        self.nodes.detach(r.value.soid);
        Ok(())
    }
    async fn open(&self, _req: Request, _inode: u64, _flags: u32) -> Result<ReplyOpen> {
        Ok(ReplyOpen { fh: 0, flags: 0 })
    }
    async fn flush(&self, _req: Request, _inode: u64, _fh: u64, _lo: u64) -> Result<()> {
        Ok(())
    }
    async fn release(
        &self,
        _req: Request,
        _inode: u64,
        _fh: u64,
        _flags: u32,
        _lo: u64,
        _flush: bool,
    ) -> Result<()> {
        Ok(())
    }
    async fn opendir(&self, _req: Request, _inode: u64, _flags: u32) -> Result<ReplyOpen> {
        Ok(ReplyOpen { fh: 0, flags: 0 })
    }
    async fn access(&self, _req: Request, _inode: u64, _mask: u32) -> Result<()> {
        Ok(())
    }
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, secret_file, mnt] = &args[..] else {
        return Err("usage: fuse3-loop-probe ADDR SECRET_FILE MOUNTPOINT".into());
    };
    let secret = std::fs::read_to_string(secret_file)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = Client::connect(addr, secret.trim(), Options::default()).await?;
        let fs = Fs {
            client,
            nodes: Nodes::default(),
            dirs: DirAttrs::default(),
        };
        let mut opts = MountOptions::default();
        opts.fs_name("fuse3-loop-probe").default_permissions(true);
        let handle = Session::new(opts).mount_with_unprivileged(fs, mnt).await?;
        eprintln!("mounted");
        handle.await?;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
