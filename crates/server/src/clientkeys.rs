//! Client keys on the server: the key book (every key with its limits,
//! kept in `<data>/clientkeys.toml`), and the check of a call's proof
//! (see `sextant_proto::keyauth` and the protocol header).
//!
//! Invariants:
//! - the book on disk is replaced atomically (a new file, synced, renamed
//!   over the old, the directory synced): a crash leaves the old book or
//!   the new one, and a change is answered only once it is durable;
//! - a proof is accepted only with a MAC made with the key, a time within
//!   [`WINDOW_SECS`] of the server's clock and a nonce this server has not
//!   accepted in the last `2 * WINDOW_SECS` seconds — so no proof is
//!   accepted twice (nonces are remembered only after the MAC matched: a
//!   caller without the key cannot fill the memory);
//! - every change (add, rotate, revoke) bumps [`KeyBook::subscribe`]'s
//!   generation; a stream admitted with a key checks [`KeyBook::is_live`]
//!   then, and ends if its key is gone or rotated.
//!
//! - a key's path limit is kept normalised ([`normal_path`]); a book
//!   whose path is not is refused at start, as a malformed key is.
//!
//! - on a cluster the book is shared ([`SharedBook`], etcd's
//!   `clientkey/<name>`, one record per key): a change is a conditional
//!   write of that one record (it fails if the record changed since it was
//!   read), answered once etcd took it; every server replaces its copy
//!   with each newer state it is told of ([`KeyBook::replace`]) and never
//!   goes back to an older one (states carry etcd's revision).
//! - a proof may name the server it is for (its audience, the address the
//!   client dialled; see `sextant_proto::keyauth`): a server that knows
//!   its addresses ([`KeyBook::with_audiences`], every server of a
//!   cluster) refuses a proof for another address or for none — nonces are
//!   remembered per server, so a proof must not be good on two.

use anyhow::{Context, Result};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use sextant_proto::keyauth::{self, Proof, KEY_BYTES, WINDOW_SECS};
use sextant_proto::pb;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file of the book in the data directory.
pub const FILE_NAME: &str = "clientkeys.toml";
/// The identity root-squashed ids run as.
pub const NOBODY: u32 = 65534;
/// Nonces remembered at most; beyond, new calls are refused (UNAVAILABLE,
/// the client retries) until old ones expire. Each is 16 bytes
/// ([`keyauth::nonce_id`]) in a set and a queue: some 60 MB at most.
const MAX_NONCES: usize = 1 << 20;

/// What a key may do (see `KeyLimits` in the schema).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Inclusive ranges; empty: any uid.
    #[serde(default)]
    pub uids: Vec<(u32, u32)>,
    /// Inclusive ranges; empty: any gid or group.
    #[serde(default)]
    pub gids: Vec<(u32, u32)>,
    #[serde(default)]
    pub root_squash: bool,
    #[serde(default)]
    pub read_only: bool,
    /// The subtree the key is confined to, normalised (absolute, no `.`,
    /// `..`, empty components or trailing `/`); `None`: everything. See
    /// [`crate::confine`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `path` as [`Limits::path`] keeps it: `None` for `/` (or empty), an
/// error for a relative path, a `.` or `..` component or one that is not
/// UTF-8.
pub fn normal_path(path: &[u8]) -> Result<Option<String>, String> {
    if path.is_empty() {
        return Ok(None);
    }
    let text = std::str::from_utf8(path).map_err(|_| "path: not UTF-8".to_string())?;
    if !text.starts_with('/') {
        return Err(format!("path {text:?}: must be absolute"));
    }
    let mut out = String::new();
    for comp in text.split('/').filter(|c| !c.is_empty()) {
        if comp == "." || comp == ".." {
            return Err(format!(
                "path {text:?}: no '.' or '..' components (give the directory's own path)"
            ));
        }
        if comp.len() > sextant_types::NAME_MAX {
            return Err(format!("path {text:?}: a component is too long"));
        }
        out.push('/');
        out.push_str(comp);
    }
    if out.len() > sextant_proto::PATH_MAX {
        return Err(format!("path {text:?}: too long"));
    }
    Ok((!out.is_empty()).then_some(out))
}

fn in_ranges(ranges: &[(u32, u32)], id: u32) -> bool {
    ranges.is_empty() || ranges.iter().any(|&(lo, hi)| lo <= id && id <= hi)
}

impl Limits {
    pub fn allows_uid(&self, uid: u32) -> bool {
        in_ranges(&self.uids, uid)
    }

    pub fn allows_gid(&self, gid: u32) -> bool {
        in_ranges(&self.gids, gid)
    }

    pub fn from_pb(l: &pb::KeyLimits) -> Result<Limits, String> {
        let ranges = |rs: &[pb::U32Range], what: &str| {
            rs.iter()
                .map(|r| {
                    if r.lo > r.hi {
                        Err(format!("{what}: range {}-{} is empty", r.lo, r.hi))
                    } else {
                        Ok((r.lo, r.hi))
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Limits {
            uids: ranges(&l.uids, "uids")?,
            gids: ranges(&l.gids, "gids")?,
            root_squash: l.root_squash,
            read_only: l.read_only,
            path: normal_path(&l.path)?,
        })
    }

    pub fn to_pb(&self) -> pb::KeyLimits {
        let ranges =
            |rs: &[(u32, u32)]| rs.iter().map(|&(lo, hi)| pb::U32Range { lo, hi }).collect();
        pb::KeyLimits {
            uids: ranges(&self.uids),
            gids: ranges(&self.gids),
            path: self.path.clone().unwrap_or_default().into_bytes(),
            root_squash: self.root_squash,
            read_only: self.read_only,
        }
    }
}

/// One key as the book keeps it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredKey {
    pub name: String,
    /// Hex; see [`StoredKey::bytes`].
    key: String,
    /// Unix seconds when this secret was made (add or rotate).
    pub created: u64,
    pub limits: Limits,
}

impl std::fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKey")
            .field("name", &self.name)
            .field("created", &self.created)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl StoredKey {
    fn bytes(&self) -> Option<[u8; KEY_BYTES]> {
        keyauth::unhex::<KEY_BYTES>(&self.key)
    }

    pub fn info(&self) -> pb::KeyInfo {
        pb::KeyInfo {
            name: self.name.clone(),
            limits: Some(self.limits.to_pb()),
            created: self.created,
        }
    }
}

/// The book on disk.
#[derive(Default, Serialize, Deserialize)]
struct BookFile {
    #[serde(default)]
    keys: Vec<StoredKey>,
}

/// Why an admin change failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyAdminError {
    #[error("a key named {0} exists (rotate it, or revoke it first)")]
    Exists(String),
    #[error("no key named {0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unsupported(&'static str),
    #[error("cannot write the key book: {0:#}")]
    Store(anyhow::Error),
}

/// Why a proof was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Metadata missing or malformed.
    Malformed,
    UnknownKey,
    BadMac,
    /// The time is outside the window.
    Expired,
    /// The nonce was used already.
    Replayed,
    /// Too many nonces remembered.
    Busy,
    /// Made for another server (or for none, where one is needed).
    WrongServer,
    /// An identity ticket's name that is no ticket body.
    TicketMalformed,
    /// An identity ticket whose proof does not match the key the body
    /// gives (the body was edited, made with another cluster's secret, or
    /// the MAC is wrong).
    TicketMac,
    /// An identity ticket past its expiry.
    TicketExpired,
    /// An identity ticket for uid 0 (never issued: refused whoever made it).
    TicketRoot,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Malformed => "key-malformed",
            Refusal::UnknownKey => "key-unknown",
            Refusal::BadMac => "key-mac",
            Refusal::Expired => "key-expired",
            Refusal::Replayed => "key-replayed",
            Refusal::Busy => "key-busy",
            Refusal::WrongServer => "key-audience",
            Refusal::TicketMalformed => "ticket-malformed",
            Refusal::TicketMac => "ticket-mac",
            Refusal::TicketExpired => "expired-ticket",
            Refusal::TicketRoot => "ticket-root",
        }
    }
}

/// A key a call was admitted with: its name and which secret of it (a
/// rotation makes a new one), and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub name: String,
    pub created: u64,
    pub limits: Arc<Limits>,
}

/// What is remembered of an accepted proof ([`keyauth::nonce_id`] of
/// its name and nonce): 16 bytes, whatever the name's size.
type NonceId = [u8; 16];

/// Nonces accepted recently, oldest first.
#[derive(Default)]
struct Nonces {
    seen: HashSet<NonceId>,
    order: VecDeque<(i64, NonceId)>,
}

/// Every key of this server, and the nonces of recent proofs.
pub struct KeyBook {
    keys: RwLock<HashMap<String, Arc<StoredKey>>>,
    /// `None`: in memory only (tests).
    file: Option<PathBuf>,
    /// Serialises admin changes (read, change, write, swap).
    writing: Mutex<()>,
    changed: tokio::sync::watch::Sender<u64>,
    nonces: Mutex<Nonces>,
    /// Addresses each key was used from (for the audit line of a new one).
    addresses: Mutex<HashMap<String, HashSet<String>>>,
    /// Why keys cannot be changed here (`None`: they can).
    unsupported: Option<&'static str>,
    /// Where the book is kept on a cluster (`None`: `file`, or memory).
    shared: Option<Arc<dyn SharedBook>>,
    /// The shared store's revision the keys are at (0: not shared).
    revision: Mutex<i64>,
    /// The addresses a proof may be for (`None`: any, or none given).
    audiences: Option<Vec<String>>,
}

/// A book kept elsewhere than this server (etcd on a cluster): one
/// record per key, with a revision that moves on every change. Blocking
/// (called from blocking threads).
pub trait SharedBook: Send + Sync {
    /// The record of `name` and its revision (`None`: no such key).
    fn read(&self, name: &str) -> Result<Option<(String, i64)>>;
    /// Writes (`Some`) or removes (`None`) `name`'s record if its revision
    /// is still `expect` (0: absent): the write's revision, or `None` if
    /// the record changed meanwhile.
    fn write(&self, name: &str, record: Option<&str>, expect: i64) -> Result<Option<i64>>;
}

impl StoredKey {
    /// The record of this key as a shared book keeps it (TOML, the same
    /// fields as one key of the file).
    pub fn to_record(&self) -> Result<String> {
        toml::to_string(self).context("cannot encode a client key")
    }

    /// A key from its record; `name` is the name it is stored under (the
    /// record must say the same).
    pub fn from_record(name: &str, record: &str) -> Result<StoredKey> {
        let k: StoredKey = toml::from_str(record).context("not a client key record")?;
        anyhow::ensure!(k.name == name, "the record names {:?}", k.name);
        anyhow::ensure!(k.well_formed(), "the key {name:?} is malformed");
        Ok(k)
    }

    fn well_formed(&self) -> bool {
        let path_ok = self
            .limits
            .path
            .as_ref()
            .is_none_or(|p| normal_path(p.as_bytes()).ok().flatten().as_ref() == Some(p));
        keyauth::valid_name(&self.name) && self.bytes().is_some() && path_ok
    }
}

impl std::fmt::Debug for KeyBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyBook")
            .field("keys", &self.keys.read().len())
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn random_key() -> Result<[u8; KEY_BYTES]> {
    use std::io::Read;
    let mut b = [0u8; KEY_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("cannot read /dev/urandom")?;
    Ok(b)
}

impl KeyBook {
    fn with(keys: Vec<StoredKey>, file: Option<PathBuf>) -> KeyBook {
        KeyBook {
            keys: RwLock::new(
                keys.into_iter()
                    .map(|k| (k.name.clone(), Arc::new(k)))
                    .collect(),
            ),
            file,
            writing: Mutex::new(()),
            changed: tokio::sync::watch::channel(0).0,
            nonces: Mutex::default(),
            addresses: Mutex::default(),
            unsupported: None,
            shared: None,
            revision: Mutex::new(0),
            audiences: None,
        }
    }

    /// A book kept in `store` whose keys are `records` (name, record) at
    /// the store's `revision`; malformed records are left out (logged).
    pub fn shared(
        store: Arc<dyn SharedBook>,
        records: &[(String, String)],
        revision: i64,
    ) -> KeyBook {
        let book = KeyBook {
            shared: Some(store),
            ..KeyBook::with(Vec::new(), None)
        };
        book.replace(revision, records);
        book
    }

    /// This book, refusing proofs for any address but `audiences` (and
    /// proofs for none).
    pub fn with_audiences(self, audiences: Vec<String>) -> KeyBook {
        KeyBook {
            audiences: Some(audiences),
            ..self
        }
    }

    /// The addresses a proof must be for (`None`: any).
    pub fn audiences(&self) -> Option<&[String]> {
        self.audiences.as_deref()
    }

    /// The shared store's state at `revision` is `records`: the book
    /// becomes that, unless it is at a newer revision already. A change
    /// ends the streams of keys revoked or rotated.
    pub fn replace(&self, revision: i64, records: &[(String, String)]) {
        let mut at = self.revision.lock();
        if revision < *at {
            return;
        }
        *at = revision;
        let mut next = HashMap::new();
        for (name, record) in records {
            match StoredKey::from_record(name, record) {
                Ok(k) => {
                    next.insert(name.clone(), Arc::new(k));
                }
                Err(e) => {
                    tracing::warn!(key = name, error = %format!("{e:#}"), "a client key's record is malformed; ignored")
                }
            }
        }
        let mut keys = self.keys.write();
        if *keys != next {
            // The audit log of every server says what it enforces from
            // now on, whoever changed the book (another server, or
            // `sextant auth --etcd` with no server involved).
            for name in keys.keys().filter(|n| !next.contains_key(*n)) {
                tracing::warn!(target: "audit", key = %name, "client key revoked (the shared key book changed)");
            }
            for (name, k) in &next {
                match keys.get(name) {
                    None => {
                        tracing::info!(target: "audit", key = %name, "client key added (the shared key book changed)")
                    }
                    Some(old) if old != k => {
                        tracing::warn!(target: "audit", key = %name, "client key changed (rotated or new limits; the shared key book changed)")
                    }
                    Some(_) => {}
                }
            }
            *keys = next;
            drop(keys);
            self.changed.send_modify(|g| *g += 1);
        }
    }

    /// An empty book that refuses every change, saying `why`.
    pub fn unsupported(why: &'static str) -> KeyBook {
        KeyBook {
            unsupported: Some(why),
            ..KeyBook::in_memory()
        }
    }

    /// An empty book kept in memory only.
    pub fn in_memory() -> KeyBook {
        KeyBook::with(Vec::new(), None)
    }

    /// The book of the data directory `data` (empty if it has none).
    pub fn open(data: &Path) -> Result<KeyBook> {
        let file = data.join(FILE_NAME);
        let keys = match std::fs::read_to_string(&file) {
            Ok(text) => {
                let book: BookFile = toml::from_str(&text)
                    .with_context(|| format!("cannot parse {}", file.display()))?;
                for k in &book.keys {
                    if !k.well_formed() {
                        anyhow::bail!("{}: the key {:?} is malformed", file.display(), k.name);
                    }
                }
                book.keys
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
        };
        Ok(KeyBook::with(keys, Some(file)))
    }

    /// Every key, by name.
    pub fn list(&self) -> Vec<Arc<StoredKey>> {
        let mut v: Vec<_> = self.keys.read().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Changes of the book: the generation moves on each.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Is the key `grant` was made from still in the book, unrotated?
    pub fn is_live(&self, grant: &Grant) -> bool {
        self.keys
            .read()
            .get(&grant.name)
            .is_some_and(|k| k.created == grant.created && k.limits == *grant.limits)
    }

    /// Applies `change` to the key `name` (its current form, `None` if
    /// absent; it gives the new one, `None` to remove it), stores the
    /// result, then makes it the book.
    fn change<T>(
        &self,
        name: &str,
        change: impl FnOnce(
            Option<&Arc<StoredKey>>,
        ) -> Result<(Option<Arc<StoredKey>>, T), KeyAdminError>,
    ) -> Result<T, KeyAdminError> {
        if let Some(why) = self.unsupported {
            return Err(KeyAdminError::Unsupported(why));
        }
        let _w = self.writing.lock();
        if let Some(store) = &self.shared {
            let current = store.read(name).map_err(KeyAdminError::Store)?;
            let (old, expect) = match current {
                Some((record, rev)) => (
                    Some(Arc::new(
                        StoredKey::from_record(name, &record).map_err(KeyAdminError::Store)?,
                    )),
                    rev,
                ),
                None => (None, 0),
            };
            let (new, out) = change(old.as_ref())?;
            let record = new
                .as_ref()
                .map(|k| k.to_record())
                .transpose()
                .map_err(KeyAdminError::Store)?;
            let rev = store
                .write(name, record.as_deref(), expect)
                .map_err(KeyAdminError::Store)?
                .ok_or_else(|| {
                    KeyAdminError::Store(anyhow::anyhow!(
                        "the key {name} was changed by another server meanwhile; retry"
                    ))
                })?;
            // The watch brings the same change; applied now so that the
            // answer is seen here at once (never over a newer state).
            let mut at = self.revision.lock();
            if rev > *at {
                *at = rev;
                let mut keys = self.keys.write();
                match new {
                    Some(k) => keys.insert(name.to_string(), k),
                    None => keys.remove(name),
                };
                drop(keys);
                self.changed.send_modify(|g| *g += 1);
            }
            return Ok(out);
        }
        let mut next = self.keys.read().clone();
        let (new, out) = change(next.get(name))?;
        match new {
            Some(k) => next.insert(name.to_string(), k),
            None => next.remove(name),
        };
        if let Some(file) = &self.file {
            let mut keys: Vec<StoredKey> = next.values().map(|k| (**k).clone()).collect();
            keys.sort_by(|a, b| a.name.cmp(&b.name));
            write_book(file, &BookFile { keys }).map_err(KeyAdminError::Store)?;
        }
        *self.keys.write() = next;
        self.changed.send_modify(|g| *g += 1);
        Ok(out)
    }

    /// A new key `name` with `limits`: its stored form and its bytes.
    pub fn add(
        &self,
        name: &str,
        limits: Limits,
    ) -> Result<(Arc<StoredKey>, [u8; KEY_BYTES]), KeyAdminError> {
        if !keyauth::valid_name(name) {
            return Err(KeyAdminError::Invalid(
                keyauth::KeyError::BadName(name.into()).to_string(),
            ));
        }
        let bytes = random_key().map_err(KeyAdminError::Store)?;
        let k = Arc::new(StoredKey {
            name: name.to_string(),
            key: keyauth::hex(&bytes),
            created: now_secs().max(0) as u64,
            limits,
        });
        self.change(name, |old| {
            if old.is_some() {
                return Err(KeyAdminError::Exists(name.into()));
            }
            Ok((Some(Arc::clone(&k)), ()))
        })?;
        tracing::info!(target: "audit", key = name, limits = ?k.limits, "client key added");
        Ok((k, bytes))
    }

    /// A new secret for the key `name`, same limits; the old one stops
    /// working (its streams end).
    pub fn rotate(&self, name: &str) -> Result<(Arc<StoredKey>, [u8; KEY_BYTES]), KeyAdminError> {
        let bytes = random_key().map_err(KeyAdminError::Store)?;
        let k = self.change(name, |old| {
            let old = old.ok_or_else(|| KeyAdminError::NotFound(name.into()))?;
            // Never the same `created` as the secret it replaces: that is
            // how a stream tells its secret was rotated.
            let k = Arc::new(StoredKey {
                key: keyauth::hex(&bytes),
                created: (now_secs().max(0) as u64).max(old.created + 1),
                ..(**old).clone()
            });
            Ok((Some(Arc::clone(&k)), k))
        })?;
        tracing::warn!(target: "audit", key = name, "client key rotated: the old secret is revoked");
        Ok((k, bytes))
    }

    /// Removes the key `name`: its calls are refused from now on, its
    /// streams end.
    pub fn revoke(&self, name: &str) -> Result<(), KeyAdminError> {
        self.change(name, |old| match old {
            Some(_) => Ok((None, ())),
            None => Err(KeyAdminError::NotFound(name.into())),
        })?;
        metrics::counter!("sextant_auth_key_revocations_total").increment(1);
        tracing::warn!(target: "audit", key = name, "client key revoked");
        Ok(())
    }

    /// Checks `proof` for a call to `path` at `now` (Unix seconds): the
    /// key's grant, or why not.
    pub fn check(&self, proof: &Proof, path: &str, now: i64) -> Result<Grant, Refusal> {
        if proof.nonce.len() < 16 || proof.nonce.len() > 64 {
            return Err(Refusal::Malformed);
        }
        let key = self
            .keys
            .read()
            .get(&proof.name)
            .cloned()
            .ok_or(Refusal::UnknownKey)?;
        let bytes = key.bytes().ok_or(Refusal::UnknownKey)?;
        if !keyauth::mac_matches(&bytes, proof, path) {
            return Err(Refusal::BadMac);
        }
        self.fresh(proof, now)?;
        Ok(Grant {
            name: key.name.clone(),
            created: key.created,
            limits: Arc::new(key.limits.clone()),
        })
    }

    /// Checks `proof` of an identity ticket (its name `t1.` + body, see
    /// `sextant_types::ticket`) for a call to `path` at `now`: the key is
    /// re-derived from the body with `master`
    /// ([`keyauth::ticket_master`]), then MAC, time window, audience and
    /// nonce as for a key ([`KeyBook::check`]), and the expiry. The
    /// identity the ticket names and its expiry (Unix seconds), or why
    /// not. Never panics on what the name holds.
    pub fn check_ticket(
        &self,
        proof: &Proof,
        path: &str,
        now: i64,
        master: &[u8; KEY_BYTES],
    ) -> Result<(sextant_types::Credentials, u64), Refusal> {
        if proof.nonce.len() < 16 || proof.nonce.len() > 64 {
            return Err(Refusal::Malformed);
        }
        let (body, bytes) = sextant_types::ticket::TicketBody::from_name(&proof.name)
            .map_err(|_| Refusal::TicketMalformed)?;
        let key = keyauth::ticket_secret(master, &bytes);
        if !keyauth::mac_matches(&key, proof, path) {
            return Err(Refusal::TicketMac);
        }
        if body.uid == 0 {
            return Err(Refusal::TicketRoot);
        }
        if i64::try_from(body.expires).unwrap_or(i64::MAX) < now {
            return Err(Refusal::TicketExpired);
        }
        self.fresh(proof, now)?;
        Ok((body.credentials(), body.expires))
    }

    /// The checks of a proof whose MAC matched: its time within the
    /// window, its audience one of ours, its nonce not seen (then
    /// remembered).
    fn fresh(&self, proof: &Proof, now: i64) -> Result<(), Refusal> {
        if (proof.time - now).abs() > WINDOW_SECS {
            return Err(Refusal::Expired);
        }
        if let Some(ours) = &self.audiences {
            if !ours.contains(&proof.audience) {
                return Err(Refusal::WrongServer);
            }
        }
        let mut n = self.nonces.lock();
        while n.order.front().is_some_and(|(exp, _)| *exp < now) {
            if let Some((_, k)) = n.order.pop_front() {
                n.seen.remove(&k);
            }
        }
        let id = keyauth::nonce_id(&proof.name, &proof.nonce);
        if n.seen.contains(&id) {
            return Err(Refusal::Replayed);
        }
        if n.seen.len() >= MAX_NONCES {
            return Err(Refusal::Busy);
        }
        n.seen.insert(id);
        n.order.push_back((now + 2 * WINDOW_SECS, id));
        Ok(())
    }

    /// The replay table: proofs remembered, and the bytes it holds (its
    /// containers' capacity and what their entries point to).
    #[cfg(test)]
    pub(crate) fn nonce_table(&self) -> (usize, usize) {
        let n = self.nonces.lock();
        // (A NonceId points to nothing.)
        let bytes = n.seen.capacity() * std::mem::size_of::<NonceId>()
            + n.order.capacity() * std::mem::size_of::<(i64, NonceId)>();
        (n.seen.len(), bytes)
    }

    /// Notes that `name` was used from `address`: `true` the first time.
    pub fn first_use_from(&self, name: &str, address: &str) -> bool {
        let mut a = self.addresses.lock();
        let set = a.entry(name.to_string()).or_default();
        if set.len() >= 1024 {
            set.clear();
        }
        set.insert(address.to_string())
    }
}

/// One admin call on `book` (the `Keys` RPC's, admission checked by the
/// caller; `sextant auth --etcd` makes the same calls on the cluster's
/// book in etcd): its reply, or the status it fails with. REQUIRES: on a
/// blocking thread (a shared book waits on its store).
pub fn manage(
    book: &KeyBook,
    op: Option<pb::keys_request::Op>,
) -> Result<pb::KeysReply, tonic::Status> {
    use pb::keys_request::Op as K;
    use tonic::Status;
    let status = |e: KeyAdminError| match e {
        KeyAdminError::Exists(_) => Status::already_exists(e.to_string()),
        KeyAdminError::NotFound(_) => Status::not_found(e.to_string()),
        KeyAdminError::Invalid(_) => Status::invalid_argument(e.to_string()),
        KeyAdminError::Unsupported(_) => Status::failed_precondition(e.to_string()),
        // (etcd, or the book's file: not the caller's fault; try later)
        KeyAdminError::Store(_) => Status::unavailable(e.to_string()),
    };
    let made = |(k, bytes): (Arc<StoredKey>, [u8; KEY_BYTES])| pb::KeysReply {
        keys: vec![k.info()],
        key: keyauth::hex(&bytes),
    };
    match op {
        Some(K::Add(add)) => {
            let limits = Limits::from_pb(&add.limits.unwrap_or_default())
                .map_err(Status::invalid_argument)?;
            book.add(&add.name, limits).map(made).map_err(status)
        }
        Some(K::Rotate(name)) => book.rotate(&name).map(made).map_err(status),
        Some(K::Revoke(name)) => {
            book.revoke(&name).map_err(status)?;
            Ok(pb::KeysReply::default())
        }
        Some(K::List(_)) => Ok(pb::KeysReply {
            keys: book.list().iter().map(|k| k.info()).collect(),
            key: String::new(),
        }),
        None => Err(Status::invalid_argument("op is missing")),
    }
}

/// Writes `book` to `file` atomically (see the module doc), mode 0600.
fn write_book(file: &Path, book: &BookFile) -> Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let text = toml::to_string(book).context("cannot encode the key book")?;
    crate::secret::write_private(file, text.as_bytes())?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync {}", dir.display()))?;
    Ok(())
}
