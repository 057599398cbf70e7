//! Client keys on the wire: how a call proves it holds a key without
//! sending it (see the protocol header), and the key file a client reads.
//!
//! Both sides use this module: the client makes a [`Proof`] per call
//! ([`ClientKey::prove`]), the server checks its MAC ([`mac_matches`],
//! constant-time) and, itself, its time window and nonce.
//!
//! Invariants: the key's bytes are never put in metadata or a message,
//! only the MAC over (name, time, nonce, gRPC path, and the proof's
//! audience if it has one: the address of the server it is for, as the
//! client dialled it — so a server of a cluster can refuse a proof made
//! for another, see [`AUDIENCE_METADATA`]); a key name is
//! 1 to 64 of `[A-Za-z0-9._-]` (it is a file name on the server and an
//! etcd key suffix).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Metadata: the key's name.
pub const KEY_METADATA: &str = "x-sextant-key";
/// Metadata: Unix seconds when the proof was made.
pub const TIME_METADATA: &str = "x-sextant-key-time";
/// Metadata: a random string used once.
pub const NONCE_METADATA: &str = "x-sextant-key-nonce";
/// Metadata: the MAC, lowercase hex.
pub const MAC_METADATA: &str = "x-sextant-key-mac";
/// Metadata: the address of the server the proof is for (its audience,
/// covered by the MAC); absent: any (a single server accepts that, a
/// cluster's server does not).
pub const AUDIENCE_METADATA: &str = "x-sextant-key-for";
/// How far a proof's time may be from the server's clock, in seconds.
pub const WINDOW_SECS: i64 = 60;
/// Bytes in a key.
pub const KEY_BYTES: usize = 32;
/// The prefix of a key given where a secret string goes
/// ([`ClientKey::credential`]).
pub const CREDENTIAL_PREFIX: &str = "key:";

/// A malformed key file, credential or proof.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("invalid key name {0:?}: 1 to 64 letters, digits, '.', '_' or '-'")]
    BadName(String),
    #[error("the key is not 64 hex characters")]
    BadKey,
    #[error("the key file has no {0} line")]
    Missing(&'static str),
}

/// Is `name` a valid key name?
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A key and its name: what a client holds.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKey {
    pub name: String,
    pub key: [u8; KEY_BYTES],
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What a call carries instead of the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub name: String,
    pub time: i64,
    pub nonce: String,
    /// Lowercase hex.
    pub mac: String,
    /// The server address the proof is for; empty: none named.
    pub audience: String,
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string of exactly `N` bytes.
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in s.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

fn hmac_of(
    key: &[u8; KEY_BYTES],
    name: &str,
    time: i64,
    nonce: &str,
    path: &str,
    audience: &str,
) -> Hmac<Sha256> {
    // new_from_slice fails only for key lengths HMAC cannot take: none.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(format!("{name}|{time}|{nonce}|{path}").as_bytes());
    // Without an audience, the input of the first proofs (old clients'
    // proofs still check on a single server).
    if !audience.is_empty() {
        m.update(format!("|{audience}").as_bytes());
    }
    m
}

/// Does `proof` carry the MAC that `key` gives for a call to `path`?
/// Constant-time in the MAC's bytes.
pub fn mac_matches(key: &[u8; KEY_BYTES], proof: &Proof, path: &str) -> bool {
    let Some(mac) = unhex::<32>(&proof.mac) else {
        return false;
    };
    hmac_of(
        key,
        &proof.name,
        proof.time,
        &proof.nonce,
        path,
        &proof.audience,
    )
    .verify_slice(&mac)
    .is_ok()
}

/// What a server remembers of a proof to refuse its replay: the first 16
/// bytes of SHA-256 over the name's length (8 bytes, little-endian), the
/// name and the nonce — the same size whatever the name (a ticket's is
/// over a kilobyte), and no two (name, nonce) pairs alike short of a
/// 2^64-work collision.
pub fn nonce_id(name: &str, nonce: &str) -> [u8; 16] {
    use sha2::Digest;
    let mut h = Sha256::new();
    h.update((name.len() as u64).to_le_bytes());
    h.update(name.as_bytes());
    h.update(nonce.as_bytes());
    let d = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// The label the ticket master is derived with (see [`ticket_master`]).
pub const TICKET_MASTER_LABEL: &[u8] = b"sextant identity ticket v1";

/// The key identity tickets are made with, derived from the cluster
/// secret every server of a cluster holds: `HMAC-SHA256(secret, label)`.
/// Any server can check a ticket another made, with no shared state.
pub fn ticket_master(cluster_secret: &[u8]) -> [u8; KEY_BYTES] {
    // new_from_slice fails only for key lengths HMAC cannot take: none.
    let mut m =
        <Hmac<Sha256> as Mac>::new_from_slice(cluster_secret).expect("HMAC takes any key length");
    m.update(TICKET_MASTER_LABEL);
    let mut out = [0u8; KEY_BYTES];
    out.copy_from_slice(&m.finalize().into_bytes());
    out
}

/// A ticket's secret: `HMAC-SHA256(master, body)` (the body's bytes, see
/// `sextant_types::ticket`). Its holder proves it as a client key's,
/// under the ticket's name.
pub fn ticket_secret(master: &[u8; KEY_BYTES], body: &[u8]) -> [u8; KEY_BYTES] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(master).expect("HMAC takes any key length");
    m.update(body);
    let mut out = [0u8; KEY_BYTES];
    out.copy_from_slice(&m.finalize().into_bytes());
    out
}

impl ClientKey {
    /// The proof for a call to `path` made at `time` with `nonce`.
    pub fn prove(&self, path: &str, time: i64, nonce: &str) -> Proof {
        self.prove_for(path, "", time, nonce)
    }

    /// The proof for a call to `path` on the server at `audience` (the
    /// address dialled) made at `time` with `nonce`.
    pub fn prove_for(&self, path: &str, audience: &str, time: i64, nonce: &str) -> Proof {
        let mac = hmac_of(&self.key, &self.name, time, nonce, path, audience)
            .finalize()
            .into_bytes();
        Proof {
            name: self.name.clone(),
            time,
            nonce: nonce.to_string(),
            mac: hex(&mac),
            audience: audience.to_string(),
        }
    }

    /// The key as one string (`key:NAME:HEX`), for APIs that take the
    /// cluster secret as a string (`sextant_client::Client::connect`).
    pub fn credential(&self) -> String {
        format!("{CREDENTIAL_PREFIX}{}:{}", self.name, hex(&self.key))
    }

    /// The key in a [`ClientKey::credential`] string; `None` if `s` is not
    /// one (it is a cluster secret then).
    pub fn from_credential(s: &str) -> Option<Result<ClientKey, KeyError>> {
        let rest = s.strip_prefix(CREDENTIAL_PREFIX)?;
        let (name, key) = rest.rsplit_once(':').unwrap_or((rest, ""));
        Some(ClientKey::new(name, key))
    }

    /// A key from its name and hex.
    pub fn new(name: &str, key_hex: &str) -> Result<ClientKey, KeyError> {
        if !valid_name(name) {
            return Err(KeyError::BadName(name.to_string()));
        }
        let key = unhex::<KEY_BYTES>(key_hex.trim()).ok_or(KeyError::BadKey)?;
        Ok(ClientKey {
            name: name.to_string(),
            key,
        })
    }

    /// The text of a key file (what `sextant auth add` writes).
    pub fn file_text(&self) -> String {
        format!(
            "# Sextant client key: keep this file mode 0600 (sextant --key-file FILE)\n\
             name = {}\nkey = {}\n",
            self.name,
            hex(&self.key)
        )
    }

    /// Reads a key file: `name = NAME` and `key = HEX` lines (`#`
    /// comments, blank lines and quotes around values allowed).
    pub fn parse_file(text: &str) -> Result<ClientKey, KeyError> {
        let mut name = None;
        let mut key = None;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim() {
                "name" => name = Some(v.to_string()),
                "key" => key = Some(v.to_string()),
                _ => {}
            }
        }
        let name = name.ok_or(KeyError::Missing("name"))?;
        let key = key.ok_or(KeyError::Missing("key"))?;
        ClientKey::new(&name, &key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ClientKey {
        ClientKey {
            name: "node1".into(),
            key: [7; 32],
        }
    }

    #[test]
    fn a_proof_verifies_for_its_path_and_key_only() {
        let p = key().prove("/sextant.v1.Sextant/Call", 100, "abcdefabcdefabcdef");
        assert!(mac_matches(&[7; 32], &p, "/sextant.v1.Sextant/Call"));
        assert!(!mac_matches(&[8; 32], &p, "/sextant.v1.Sextant/Call"));
        assert!(!mac_matches(&[7; 32], &p, "/sextant.v1.Sextant/Watch"));
        let later = Proof {
            time: 101,
            ..p.clone()
        };
        assert!(!mac_matches(&[7; 32], &later, "/sextant.v1.Sextant/Call"));
        assert!(!p.mac.contains(&hex(&[7; 32])));
        // The audience is covered: a proof for one server is not one for
        // another, nor one for none.
        let a = key().prove_for(
            "/sextant.v1.Sextant/Call",
            "10.0.0.1:7000",
            100,
            "abcdefabcdefabcdef",
        );
        assert!(mac_matches(&[7; 32], &a, "/sextant.v1.Sextant/Call"));
        let moved = Proof {
            audience: "10.0.0.2:7000".into(),
            ..a.clone()
        };
        assert!(!mac_matches(&[7; 32], &moved, "/sextant.v1.Sextant/Call"));
        let bare = Proof {
            audience: String::new(),
            ..a
        };
        assert!(!mac_matches(&[7; 32], &bare, "/sextant.v1.Sextant/Call"));
    }

    #[test]
    fn key_file_and_credential_round_trip() {
        let k = key();
        assert_eq!(ClientKey::parse_file(&k.file_text()), Ok(k.clone()));
        assert_eq!(ClientKey::from_credential(&k.credential()), Some(Ok(k)));
        assert_eq!(ClientKey::from_credential("00ff"), None);
        assert_eq!(
            ClientKey::parse_file("name = a/b\nkey = 00\n"),
            Err(KeyError::BadName("a/b".into()))
        );
        assert_eq!(
            ClientKey::parse_file("name = a\n"),
            Err(KeyError::Missing("key"))
        );
    }
}
