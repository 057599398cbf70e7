//! Where commands run: on a Sextant server (over the network) or on an
//! embedded engine over a local data directory. Both look the same to the
//! commands: every call is async and a mutation returns once durable.

use anyhow::{bail, Context, Result};
use sextant_client::{Client, Error, Options, SearchStream};
use sextant_engine::search::SearchHit;
use sextant_engine::{DirEntry, Engine, EngineConfig, EngineStats, RenameFlags, XattrFlags};
use sextant_proto::search::{SearchDone, SearchSpec};
use sextant_types::{Attr, Credentials, FileType, FsError, SetAttr, Soid};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub type OpResult<T> = std::result::Result<T, Error>;

pub enum Backend {
    Local(Engine),
    Remote(Client),
}

/// For a command that needs a server (bench): where to reach the server
/// at `addr`, and the secret to present — for a local user who cannot
/// read the secret, the local server's Unix socket and none (served as
/// themselves).
pub fn server_for(cli: &crate::Cli, addr: &str) -> Result<(String, String)> {
    let data = cli.data.clone().unwrap_or_else(default_data);
    let t = Target {
        data: &data,
        server: Some(addr),
        secret: cli.secret.as_deref(),
        secret_file: cli.secret_file.as_deref(),
        key_file: cli.key_file.as_deref(),
        tls_ca: cli.tls_ca.as_deref(),
        socket: cli.socket.as_deref(),
        local: false,
        writes: false,
    };
    if find_secret(&t)?.is_none() {
        if sextant_client::unix_path(addr).is_some() {
            return Ok((addr.to_string(), String::new()));
        }
        if let Some(socket) = t.socket.filter(|p| is_local_default(addr) && socket_at(p)) {
            let unix = format!("{}{}", sextant_client::UNIX_PREFIX, socket.display());
            return Ok((unix, String::new()));
        }
    }
    Ok((addr.to_string(), secret_for_server(cli, addr)?))
}

impl Session {
    /// The server this command talks to (see [`Session::open`]); `None`:
    /// none, use the embedded engine.
    async fn connect(t: &Target<'_>) -> Result<Option<Client>> {
        let secret = find_secret(t)?;
        let explicit = t.server.is_some();
        let addr = t.server.unwrap_or(sextant_proto::DEFAULT_LISTEN);
        let options = || -> Result<Options> {
            Ok(Options {
                // Log-less: backups earlier commands or mounts of this
                // server left on this machine are handed back; ours go
                // there if the server cannot take them at the end.
                backup_dir: Some(backup_dir(t.data)?),
                // A command that changes nothing (`stat`, `ls`,
                // `getfattr`, `status`) asks for the route map only once
                // it needs it: a path is resolved across the servers by
                // the server asked, and the map grows with the cluster's
                // tables (issue 21: 1,059 tables made every command ~10 ms
                // slower). One that may change something takes it at
                // connect: should its server die mid-operation, the map
                // names the servers that can say where its tables went
                // (`killed_at_a_borrow_step`); searches need it anyway.
                routes_at_connect: t.writes,
                ..client_options(t.tls_ca)?
            })
        };
        let connect = |addr: String, secret: String| async move {
            Client::connect(&addr, &secret, options()?)
                .await
                .map(Some)
                .map_err(|e| connect_failed(&addr, t.tls_ca, e))
        };
        // A Unix socket named: with the secret if readable, else as
        // yourself.
        if sextant_client::unix_path(addr).is_some() {
            return connect(addr.to_string(), secret.unwrap_or_default()).await;
        }
        if let Some(secret) = &secret {
            if explicit || answers(addr) {
                return connect(addr.to_string(), secret.clone()).await;
            }
        }
        // The local server: its socket, if there is one.
        let local = !explicit || is_local_default(addr);
        if let Some(socket) = t.socket.filter(|p| local && socket_at(p)) {
            let unix = format!("{}{}", sextant_client::UNIX_PREFIX, socket.display());
            return connect(unix, secret.unwrap_or_default()).await;
        }
        if secret.is_none() && (explicit || answers(addr)) {
            // Given with --server: whether anything answers there is
            // not known yet.
            let found = if explicit {
                format!("no cluster secret was found for the server at {addr}")
            } else {
                format!("a Sextant server answers at {addr} but no cluster secret was found")
            };
            let socket = match t.socket {
                Some(p) if local => format!(", and no server socket is at {}", p.display()),
                _ => String::new(),
            };
            bail!(
                "{found}{socket}: give --secret-file FILE (the server's <data>/secret) or \
                 SEXTANT_SECRET, or --server unix:PATH (the server's socket, as yourself), or \
                 --local to use the data directory {} directly",
                t.data.display()
            );
        }
        Ok(None)
    }
}

/// The backend plus who is asking.
pub struct Session {
    pub backend: Backend,
    pub cred: Credentials,
}

/// The calling process's uid, gid and supplementary groups.
pub fn caller() -> Credentials {
    // SAFETY: getuid/getgid/getgroups have no preconditions; the buffer is
    // sized by the first getgroups call.
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut());
        let mut groups = vec![0 as libc::gid_t; n.max(0) as usize];
        let n = libc::getgroups(groups.len() as i32, groups.as_mut_ptr());
        groups.truncate(n.max(0) as usize);
        Credentials {
            uid: libc::getuid(),
            gid: libc::getgid(),
            groups,
        }
    }
}

/// How to choose the backend (from the global flags).
pub struct Target<'a> {
    pub data: &'a Path,
    pub server: Option<&'a str>,
    pub secret: Option<&'a str>,
    pub secret_file: Option<&'a Path>,
    /// A client key file (`sextant auth add`): used instead of a secret.
    pub key_file: Option<&'a Path>,
    /// TLS: the authority that signed the server's certificate (PEM file).
    pub tls_ca: Option<&'a Path>,
    /// Where the local server's Unix socket is looked for.
    pub socket: Option<&'a Path>,
    pub local: bool,
    /// The command changes the namespace: with `--local` it may make a
    /// new embedded store in `data` (without `--local`, no command does).
    pub writes: bool,
}

/// A failed connection to the server at `addr`, said plainly: a refused
/// or unreachable address as such ("cannot connect to ADDR: connection
/// refused"), a hint about TLS only where TLS could be the cause — over
/// TCP, none asked for, and the connection made but the exchange failed (a
/// TLS server answers plain HTTP/2 with a protocol error; a Unix socket
/// never takes TLS).
pub fn connect_failed(addr: &str, tls_ca: Option<&Path>, e: Error) -> anyhow::Error {
    if let Error::Unavailable { reason, .. } = &e {
        if reason.contains("CaUsedAsEndEntity") {
            return anyhow::anyhow!(
                "cannot connect to {addr} with TLS: the server's certificate is marked as a \
                 certificate authority (basicConstraints CA:TRUE, what a plain `openssl req \
                 -x509` makes), and TLS refuses a CA as a server's own certificate. Make a \
                 leaf certificate instead: openssl req -x509 -newkey rsa:2048 -nodes -keyout \
                 key.pem -out cert.pem -days 365 -subj /CN=HOST -addext \
                 \"subjectAltName=DNS:HOST,IP:ADDR\" -addext \"basicConstraints=critical,CA:FALSE\" \
                 (see README, \"TLS\")"
            );
        }
        if reason.contains("Connection refused") {
            return anyhow::anyhow!(
                "cannot connect to {addr}: connection refused (is `sextant serve` running there?)"
            );
        }
        if reason.contains("tcp connect error") || reason.contains("no answer within") {
            return anyhow::anyhow!("cannot connect to {addr}: {reason}");
        }
    }
    let context = match tls_ca {
        Some(_) => format!("connecting to the Sextant server at {addr} with TLS"),
        None if sextant_client::unix_path(addr).is_some() || matches!(e, Error::Auth) => {
            format!("connecting to the Sextant server at {addr}")
        }
        None => format!(
            "connecting to the Sextant server at {addr} (if it serves TLS, give --tls-ca FILE)"
        ),
    };
    anyhow::Error::new(e).context(context)
}

/// Client settings for the CLI's connections: TLS when `tls_ca` is given.
pub fn client_options(tls_ca: Option<&Path>) -> Result<Options> {
    let mut o = Options::default();
    // A local user on a cluster's Unix socket reaches the other servers
    // with an identity ticket unless told not to (then its server
    // forwards for it, as before tickets).
    if std::env::var("SEXTANT_TICKETS").is_ok_and(|v| matches!(v.trim(), "0" | "off" | "no")) {
        o.tickets = false;
    }
    if let Some(path) = tls_ca {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read the TLS CA certificate {}", path.display()))?;
        o.tls_ca = Some(pem);
    }
    Ok(o)
}

/// Does something accept TCP connections at `addr`?
fn answers(addr: &str) -> bool {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map(|a| a.collect())
        .unwrap_or_default();
    addrs
        .iter()
        .any(|a| TcpStream::connect_timeout(a, Duration::from_millis(300)).is_ok())
}

/// The cluster secret, if this user can read it: `--secret`, the
/// `--secret-file` (or config file's), `<data>/secret`, or — `<data>`
/// being a `sextant cluster up` directory — its servers'. A secret file
/// this user may not read counts as none (a local user then goes through
/// the Unix socket as themselves); a secret file named but missing is an
/// error. A `--key-file` comes first: its key, as the credential string
/// `sextant_client::Client::connect` takes.
pub fn find_secret(t: &Target) -> Result<Option<String>> {
    if let Some(f) = t.key_file {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("cannot read the client key file {}", f.display()))?;
        let key = sextant_proto::keyauth::ClientKey::parse_file(&text)
            .with_context(|| format!("the client key file {}", f.display()))?;
        return Ok(Some(key.credential()));
    }
    if let Some(s) = t.secret {
        return Ok(Some(s.trim().to_string()));
    }
    if let Some(f) = t.secret_file {
        return read_secret(f, true);
    }
    if let Some(s) = read_secret(&sextant_server::secret::path(t.data), false)? {
        return Ok(Some(s));
    }
    // `--data` of a whole `sextant cluster up`: its servers' secret.
    Ok(crate::cluster::secret_from_record(t.data, t.server))
}

/// A secret file's contents; `None` if this user may not read it, or if it
/// is missing and not `required`.
fn read_secret(file: &Path, required: bool) -> Result<Option<String>> {
    match std::fs::File::open(file) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(None),
        _ => sextant_server::secret::read(file).map(Some),
    }
}

/// Is `addr` the default address of a server on this machine (what a
/// local user means without naming a server)?
pub fn is_local_default(addr: &str) -> bool {
    let port = sextant_proto::DEFAULT_PORT;
    match addr.parse::<SocketAddr>() {
        Ok(a) => a.ip().is_loopback() && a.port() == port,
        Err(_) => addr == format!("localhost:{port}"),
    }
}

/// Is there a Unix socket at `path` (one this user can see)?
fn socket_at(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// The cluster secret for talking to the server at `addr` (commands that
/// need a server: the mount, bench): `--secret`, `--secret-file`, or
/// `<data>/secret`; an error that says where to find it if none is there.
pub fn secret_for_server(cli: &crate::Cli, addr: &str) -> Result<String> {
    let data = cli.data.clone().unwrap_or_else(default_data);
    find_secret(&Target {
        data: &data,
        server: Some(addr),
        secret: cli.secret.as_deref(),
        secret_file: cli.secret_file.as_deref(),
        key_file: cli.key_file.as_deref(),
        tls_ca: cli.tls_ca.as_deref(),
        socket: cli.socket.as_deref(),
        local: false,
        writes: false,
    })?
    .with_context(|| {
        format!(
            "no cluster secret found for the server at {addr}: give --secret-file FILE \
             (the server's <data>/secret), SEXTANT_SECRET, or --data of the server"
        )
    })
}

impl Session {
    /// A server given with `--server`; else one answering at the default
    /// address if the secret is readable; else the local server's Unix
    /// socket (as the caller's own identity when the secret is not
    /// readable); else the embedded engine on `--data`.
    pub async fn open(t: Target<'_>) -> Result<Session> {
        let cred = caller();
        if !t.local {
            if let Some(client) = Self::connect(&t).await? {
                return Ok(Session {
                    backend: Backend::Remote(client),
                    cred,
                });
            }
        }
        if !Engine::dir_holds_store(t.data) {
            // Never a new store by accident: a command run while the
            // server is down must fail, not write into a second, private
            // namespace. `sextant init`, or --local with a command that
            // writes, asks for one.
            if !t.local {
                let addr = t.server.unwrap_or(sextant_proto::DEFAULT_LISTEN);
                bail!(
                    "no Sextant server answers at {addr}, and {} holds no store: start one \
                     (`sextant serve`), or give --server ADDR, or --data DIR of an existing \
                     store (`sextant init` or --local makes a new one)",
                    t.data.display()
                );
            }
            if !t.writes {
                bail!(
                    "{} holds no store (`sextant init` makes one; a command that only reads \
                     does not)",
                    t.data.display()
                );
            }
            eprintln!(
                "sextant: making a new store in {} (--local; `sextant serve` serves it)",
                t.data.display()
            );
        }
        let config = EngineConfig {
            // A new store's root belongs to whoever creates it.
            root_uid: cred.uid,
            root_gid: cred.gid,
            ..Default::default()
        };
        let engine = Engine::open_dir(t.data, config)
            .with_context(|| format!("cannot open the data directory {}", t.data.display()))?;
        Ok(Session {
            backend: Backend::Local(engine),
            cred,
        })
    }

    /// Whether the namespace is spread over several servers, as the route
    /// map of the last second says ([`sextant_client::Client::spread_recently`];
    /// `false` on the embedded engine).
    pub fn spread_recently(&self) -> bool {
        match &self.backend {
            Backend::Remote(c) => c.spread_recently(),
            Backend::Local(_) => false,
        }
    }

    /// Resolves `path` (following symlinks except, unless `follow`, the last).
    pub async fn resolve(&self, path: &str, follow: bool) -> Result<Attr> {
        self.resolve_raw(path.as_bytes(), follow)
            .await
            .map_err(|e| fs_err(e, path))
    }

    pub async fn resolve_raw(&self, path: &[u8], follow: bool) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => Ok(e.resolve(&self.cred, path, follow)?),
            Backend::Remote(c) => c.resolve(&self.cred, path, follow).await,
        }
    }

    /// The directory that would hold `path`, and the last component.
    pub async fn parent_of<'p>(&self, path: &'p str) -> Result<(Soid, &'p str)> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rsplit_once('/') {
            Some((d, n)) => (if d.is_empty() { "/" } else { d }, n),
            None => ("/", trimmed),
        };
        if name.is_empty() {
            anyhow::bail!("{path}: not a path to an entry");
        }
        let dir_attr = self.resolve(dir, true).await?;
        Ok((dir_attr.soid, name))
    }

    async fn durable<T>(
        e: &Engine,
        c: std::result::Result<sextant_engine::Committed<T>, FsError>,
    ) -> OpResult<T> {
        let c = c?;
        e.durable(c.lsn).await?;
        Ok(c.value)
    }

    pub async fn lookup(&self, parent: Soid, name: &[u8]) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => Ok(e.lookup(&self.cred, parent, name)?),
            Backend::Remote(c) => c.lookup(&self.cred, parent, name).await,
        }
    }

    pub async fn getattr(&self, soid: Soid) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => Ok(e.getattr(soid)?),
            Backend::Remote(c) => c.getattr(&self.cred, soid).await,
        }
    }

    pub async fn readlink(&self, soid: Soid) -> OpResult<Box<[u8]>> {
        match &self.backend {
            Backend::Local(e) => Ok(e.readlink(soid)?),
            Backend::Remote(c) => c.readlink(&self.cred, soid).await,
        }
    }

    pub async fn readdir(&self, dir: Soid, after: u64, limit: usize) -> OpResult<Vec<DirEntry>> {
        match &self.backend {
            Backend::Local(e) => Ok(e.readdir(&self.cred, dir, after, limit)?),
            Backend::Remote(c) => c.readdir(&self.cred, dir, after, limit).await,
        }
    }

    pub async fn create(&self, parent: Soid, name: &[u8], perm: u32) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => {
                Self::durable(e, e.create(&self.cred, parent, name, perm, false)).await
            }
            Backend::Remote(c) => c.create(&self.cred, parent, name, perm, false).await,
        }
    }

    pub async fn mknod(
        &self,
        parent: Soid,
        name: &[u8],
        ftype: FileType,
        perm: u32,
        rdev: u32,
    ) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => {
                Self::durable(e, e.mknod(&self.cred, parent, name, ftype, perm, rdev)).await
            }
            Backend::Remote(c) => c.mknod(&self.cred, parent, name, ftype, perm, rdev).await,
        }
    }

    pub async fn mkdir(&self, parent: Soid, name: &[u8], perm: u32) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => Self::durable(e, e.mkdir(&self.cred, parent, name, perm)).await,
            Backend::Remote(c) => c.mkdir(&self.cred, parent, name, perm).await,
        }
    }

    pub async fn symlink(&self, parent: Soid, name: &[u8], target: &[u8]) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => {
                Self::durable(e, e.symlink(&self.cred, parent, name, target)).await
            }
            Backend::Remote(c) => c.symlink(&self.cred, parent, name, target).await,
        }
    }

    /// Removes a link; the value is the inode's attributes as they were.
    pub async fn unlink(&self, parent: Soid, name: &[u8]) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => Self::durable(e, e.unlink(&self.cred, parent, name)).await,
            Backend::Remote(c) => c.unlink(&self.cred, parent, name).await,
        }
    }

    /// Removes an empty directory; the value is its attributes as they were.
    pub async fn rmdir(&self, parent: Soid, name: &[u8]) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => Self::durable(e, e.rmdir(&self.cred, parent, name)).await,
            Backend::Remote(c) => c.rmdir(&self.cred, parent, name).await,
        }
    }

    pub async fn rename(
        &self,
        old_parent: Soid,
        old_name: &[u8],
        new_parent: Soid,
        new_name: &[u8],
    ) -> OpResult<()> {
        let f = RenameFlags::default();
        match &self.backend {
            Backend::Local(e) => Self::durable(
                e,
                e.rename(&self.cred, old_parent, old_name, new_parent, new_name, f),
            )
            .await
            .map(drop),
            Backend::Remote(c) => {
                c.rename(&self.cred, old_parent, old_name, new_parent, new_name, f)
                    .await
            }
        }
    }

    pub async fn link(&self, soid: Soid, new_parent: Soid, new_name: &[u8]) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => {
                Self::durable(e, e.link(&self.cred, soid, new_parent, new_name)).await
            }
            Backend::Remote(c) => c.link(&self.cred, soid, new_parent, new_name).await,
        }
    }

    pub async fn setattr(&self, soid: Soid, set: &SetAttr) -> OpResult<Attr> {
        match &self.backend {
            Backend::Local(e) => Self::durable(e, e.setattr(&self.cred, soid, set)).await,
            Backend::Remote(c) => c.setattr(&self.cred, soid, set).await,
        }
    }

    pub async fn getxattr(&self, soid: Soid, name: &[u8]) -> OpResult<Box<[u8]>> {
        match &self.backend {
            Backend::Local(e) => Ok(e.getxattr(&self.cred, soid, name)?),
            Backend::Remote(c) => c.getxattr(&self.cred, soid, name).await,
        }
    }

    /// Sets an extended attribute (created or replaced).
    pub async fn setxattr(&self, soid: Soid, name: &[u8], value: &[u8]) -> OpResult<()> {
        let f = XattrFlags::Any;
        match &self.backend {
            Backend::Local(e) => {
                Self::durable(e, e.setxattr(&self.cred, soid, name, value, f)).await
            }
            Backend::Remote(c) => c.setxattr(&self.cred, soid, name, value, f).await,
        }
    }

    /// Starts a search; read its hits with [`Hits::next_batch`]. On the
    /// embedded engine it runs on a blocking thread (like the server) and
    /// stops when the [`Hits`] is dropped.
    pub async fn search(&self, spec: &SearchSpec) -> OpResult<Hits> {
        match &self.backend {
            Backend::Remote(c) => Ok(Hits::Remote(Box::new(c.search(&self.cred, spec).await?))),
            Backend::Local(e) => {
                spec.validate()
                    .map_err(|q| Error::BadQuery(q.to_string()))?;
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                let (engine, cred, spec) = (e.clone(), self.cred.clone(), spec.clone());
                tokio::task::spawn_blocking(move || {
                    let r = sextant_server::search::execute(
                        &engine,
                        &cred,
                        &spec,
                        &sextant_server::peers::NoPeers,
                        false,
                        || tx.is_closed(),
                        |hits| match tx.blocking_send(LocalMsg::Hits(hits)) {
                            Ok(()) => ControlFlow::Continue(()),
                            Err(_) => ControlFlow::Break(()),
                        },
                    );
                    let _ = tx.blocking_send(match r {
                        Ok(d) => LocalMsg::Done(d),
                        Err(e) => LocalMsg::Failed(e),
                    });
                });
                Ok(Hits::Local { rx, done: None })
            }
        }
    }

    pub async fn stats(&self) -> Result<EngineStats> {
        match &self.backend {
            Backend::Local(e) => Ok(e.stats()),
            Backend::Remote(c) => Ok(c.stats(&self.cred).await?.0),
        }
    }

    pub async fn sync(&self) -> Result<()> {
        match &self.backend {
            Backend::Local(e) => Ok(e.sync()?),
            Backend::Remote(c) => Ok(c.sync(&self.cred).await?),
        }
    }

    /// Ends the session: a local engine writes its tables back; a client
    /// of a log-less server has it write back what the client's backups
    /// hold, since they go away with this process.
    pub async fn close(self) -> Result<()> {
        match self.backend {
            Backend::Local(e) => e.close().context("writing tables back"),
            Backend::Remote(c) => {
                let released = c.release_backups(&self.cred).await;
                if released.is_err() {
                    // Kept on local disk for the next client of this
                    // server here (a mount, a command) to hand back.
                    match c.spool_backups() {
                        Ok(Some(file)) => eprintln!(
                            "sextant: the server did not take this command's log-less backups; \
                             kept in {} for the next client to hand back",
                            file.display()
                        ),
                        Ok(None) => {}
                        Err(e) => eprintln!("sextant: log-less backups lost: {e}"),
                    }
                }
                released
                    .context("asking the log-less server to write back this command's changes")?;
                Ok(())
            }
        }
    }
}

pub enum LocalMsg {
    Hits(Vec<SearchHit>),
    Done(SearchDone),
    Failed(FsError),
}

/// The hits of a running search, batch by batch.
pub enum Hits {
    Remote(Box<SearchStream>),
    Local {
        rx: tokio::sync::mpsc::Receiver<LocalMsg>,
        done: Option<SearchDone>,
    },
}

impl Hits {
    /// The next batch; `None` at the end (then [`Hits::done`] is set).
    pub async fn next_batch(&mut self) -> OpResult<Option<Vec<SearchHit>>> {
        match self {
            Hits::Remote(s) => s.next_batch().await,
            Hits::Local { rx, done } => loop {
                if done.is_some() {
                    return Ok(None);
                }
                match rx.recv().await {
                    Some(LocalMsg::Hits(h)) => return Ok(Some(h)),
                    Some(LocalMsg::Done(d)) => *done = Some(d),
                    Some(LocalMsg::Failed(e)) => return Err(Error::Fs(e)),
                    None => return Err(Error::Protocol("the search thread ended".into())),
                }
            },
        }
    }

    pub fn done(&self) -> Option<&SearchDone> {
        match self {
            Hits::Remote(s) => s.done(),
            Hits::Local { done, .. } => done.as_ref(),
        }
    }
}

/// An error as a message in the style of coreutils: `path: No such file…`.
pub fn fs_err(e: Error, path: &str) -> anyhow::Error {
    match e {
        Error::Fs(f) => anyhow::anyhow!("{path}: {f} (errno {})", f.errno()),
        other => anyhow::anyhow!("{path}: {other}"),
    }
}

/// The namespace path a command-line path names: an absolute path as it
/// is, unless it lies under a `sextant mount` (then what follows the mount
/// point); a relative path only inside a mount, relative to the working
/// directory there — elsewhere there is nothing for it to be relative to,
/// so it is refused rather than taken from `/`.
pub fn namespace_path(typed: &str) -> Result<String> {
    use crate::find::mounts;
    let all = mounts::current();
    if typed.starts_with('/') && all.is_empty() {
        return Ok(typed.to_string());
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    match mounts::locate(typed, &cwd, &all) {
        Ok(loc) if loc.mount.is_some() => Ok(String::from_utf8_lossy(&loc.ns).into_owned()),
        Ok(_) => Ok(typed.to_string()),
        Err(_) => bail!(
            "{typed}: a relative path is understood only inside a Sextant mount, and the \
             working directory {} is not in one: give the absolute path in the namespace \
             (e.g. /{typed})",
            cwd.display()
        ),
    }
}

/// `addr` with the default port when it names none (`127.0.0.1`,
/// `mds1`, `[::1]`, `::1`); `unix:PATH` and `host:port` as they are.
pub fn with_default_port(addr: &str) -> String {
    let port = sextant_proto::DEFAULT_PORT;
    if addr.starts_with(sextant_client::UNIX_PREFIX) || addr.parse::<SocketAddr>().is_ok() {
        return addr.to_string();
    }
    if addr.starts_with('[') {
        return match addr.rsplit_once("]:") {
            Some(_) => addr.to_string(),
            None => format!("{addr}:{port}"),
        };
    }
    match addr.matches(':').count() {
        0 => format!("{addr}:{port}"),
        1 => addr.to_string(),
        // A bare IPv6 address.
        _ => format!("[{addr}]:{port}"),
    }
}

/// The default data directory (`./sextant-data`).
/// Where log-less backups a client could not hand back are kept on this
/// machine: `$SEXTANT_BACKUP_DIR`, else `<data>/backups`.
pub fn backup_dir(data: &Path) -> Result<PathBuf> {
    let dir = match std::env::var_os("SEXTANT_BACKUP_DIR") {
        Some(d) => PathBuf::from(d),
        None => data.join("backups"),
    };
    Ok(std::path::absolute(dir)?)
}

pub fn default_data() -> PathBuf {
    PathBuf::from("sextant-data")
}

#[cfg(test)]
mod tests {
    use super::with_default_port;

    #[test]
    fn an_address_without_a_port_gets_the_default_one() {
        assert_eq!(with_default_port("127.0.0.1"), "127.0.0.1:7411");
        assert_eq!(with_default_port("mds1"), "mds1:7411");
        assert_eq!(with_default_port("::1"), "[::1]:7411");
        assert_eq!(with_default_port("[::1]"), "[::1]:7411");
        for kept in ["127.0.0.1:9", "mds1:9", "[::1]:9", "unix:/run/s.sock"] {
            assert_eq!(with_default_port(kept), kept);
        }
    }
}
