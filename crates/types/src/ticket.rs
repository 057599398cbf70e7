//! Identity tickets' bodies: what a server vouches for when it hands a
//! local user of its Unix socket a ticket (see the server's
//! `crate::auth`, "identity tickets"), and how the body travels as a key
//! name (`t1.` + base64url of [`TicketBody::encode`]).
//!
//! This module only encodes and decodes; the secret of a ticket
//! (`HMAC-SHA256(ticket master, body)`) is `sextant_proto::keyauth`'s.
//!
//! Encoding (version 1, integers little-endian): `1u8`, uid `u32`, gid
//! `u32`, group count `u16` then each group `u32`, expiry `u64` (Unix
//! seconds), nonce `[u8; 16]`, issuer length `u8` then the issuer's UTF-8
//! bytes. Nothing may follow.
//!
//! Invariants: [`TicketBody::decode`] never panics and accepts exactly
//! what [`TicketBody::encode`] produces (a decoded body re-encodes to the
//! same bytes); at most [`MAX_GROUPS`] groups and [`MAX_ISSUER`] issuer
//! bytes (a ticket's name goes in one HTTP/2 header).

use crate::Credentials;

/// The version this module writes and reads.
pub const VERSION: u8 = 1;
/// The prefix of a key name that is a ticket (its version's).
pub const NAME_PREFIX: &str = "t1.";
/// Most supplementary groups a ticket carries (a user in more gets no
/// ticket: its local server forwards for it).
pub const MAX_GROUPS: usize = 256;
/// Longest issuer name in bytes.
pub const MAX_ISSUER: usize = 255;
/// Bytes of a ticket's nonce.
pub const NONCE_BYTES: usize = 16;

/// What a ticket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketBody {
    pub uid: u32,
    pub gid: u32,
    /// As the issuing server's group database gave them.
    pub groups: Vec<u32>,
    /// Unix seconds after which the ticket is refused.
    pub expires: u64,
    pub nonce: [u8; NONCE_BYTES],
    /// The issuing server's id (its name in the cluster).
    pub issuer: String,
}

/// Why bytes (or a name) are not a ticket body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("not a ticket name (no t1. prefix)")]
    NotATicket,
    #[error("the ticket name is not base64url")]
    BadBase64,
    #[error("ticket version {0} is not known")]
    Version(u8),
    #[error("the ticket body ends early")]
    Short,
    #[error("the ticket body has {0} bytes after its end")]
    Trailing(usize),
    #[error("the ticket carries {0} groups (at most 256)")]
    TooManyGroups(usize),
    #[error("the ticket's issuer is not UTF-8")]
    BadIssuer,
}

/// A cursor over a body being decoded.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TicketError> {
        if self.0.len() < n {
            return Err(TicketError::Short);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], TicketError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, TicketError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, TicketError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, TicketError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, TicketError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

impl TicketBody {
    /// The body's bytes. REQUIRES: at most [`MAX_GROUPS`] groups and
    /// [`MAX_ISSUER`] issuer bytes (more are cut: the issuer refuses to
    /// make such a ticket before it gets here).
    pub fn encode(&self) -> Vec<u8> {
        let groups = &self.groups[..self.groups.len().min(MAX_GROUPS)];
        let mut issuer = self.issuer.as_bytes();
        if issuer.len() > MAX_ISSUER {
            // Cut at a character boundary so that the body still decodes.
            let mut end = MAX_ISSUER;
            while !self.issuer.is_char_boundary(end) {
                end -= 1;
            }
            issuer = &issuer[..end];
        }
        let mut out = Vec::with_capacity(40 + 4 * groups.len() + issuer.len());
        out.push(VERSION);
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.gid.to_le_bytes());
        out.extend_from_slice(&(groups.len() as u16).to_le_bytes());
        for g in groups {
            out.extend_from_slice(&g.to_le_bytes());
        }
        out.extend_from_slice(&self.expires.to_le_bytes());
        out.extend_from_slice(&self.nonce);
        out.push(issuer.len() as u8);
        out.extend_from_slice(issuer);
        out
    }

    /// The body in `bytes` (see the module doc); never panics.
    pub fn decode(bytes: &[u8]) -> Result<TicketBody, TicketError> {
        let mut r = Reader(bytes);
        let version = r.u8()?;
        if version != VERSION {
            return Err(TicketError::Version(version));
        }
        let uid = r.u32()?;
        let gid = r.u32()?;
        let n = usize::from(r.u16()?);
        if n > MAX_GROUPS {
            return Err(TicketError::TooManyGroups(n));
        }
        let mut groups = Vec::with_capacity(n);
        for _ in 0..n {
            groups.push(r.u32()?);
        }
        let expires = r.u64()?;
        let nonce = r.array::<NONCE_BYTES>()?;
        let len = usize::from(r.u8()?);
        let issuer = std::str::from_utf8(r.take(len)?)
            .map_err(|_| TicketError::BadIssuer)?
            .to_string();
        if !r.0.is_empty() {
            return Err(TicketError::Trailing(r.0.len()));
        }
        Ok(TicketBody {
            uid,
            gid,
            groups,
            expires,
            nonce,
            issuer,
        })
    }

    /// The key name a proof of this ticket carries.
    pub fn name(&self) -> String {
        format!("{NAME_PREFIX}{}", base64url(&self.encode()))
    }

    /// The body and its bytes named by `name` (`t1.` + base64url);
    /// never panics.
    pub fn from_name(name: &str) -> Result<(TicketBody, Vec<u8>), TicketError> {
        let b64 = name
            .strip_prefix(NAME_PREFIX)
            .ok_or(TicketError::NotATicket)?;
        // Longest a valid body can be, in base64: refuse more unread.
        let most = 1 + 4 + 4 + 2 + 4 * MAX_GROUPS + 8 + NONCE_BYTES + 1 + MAX_ISSUER;
        if b64.len() > most.div_ceil(3) * 4 {
            return Err(TicketError::Trailing(b64.len()));
        }
        let bytes = unbase64url(b64).ok_or(TicketError::BadBase64)?;
        let body = TicketBody::decode(&bytes)?;
        Ok((body, bytes))
    }

    /// The identity the ticket vouches for.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        }
    }
}

/// Is `name` a ticket's name (whatever its body)?
pub fn is_ticket_name(name: &str) -> bool {
    name.starts_with(NAME_PREFIX)
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64url of `bytes`, without padding.
pub fn base64url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// The bytes of unpadded base64url `text`; `None` if it is not that (a
/// character outside the alphabet, a length no encoding has, or unused
/// bits set: each byte string has exactly one encoding).
pub fn unbase64url(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32)
    };
    let t = text.as_bytes();
    if t.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(t.len() / 4 * 3 + 2);
    for chunk in t.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let bytes = chunk.len() - 1;
        let unused = n & ((1 << (24 - 8 * bytes)) - 1);
        if unused != 0 {
            return None;
        }
        for i in 0..bytes {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body() -> TicketBody {
        TicketBody {
            uid: 1000,
            gid: 100,
            groups: vec![100, 27, 4],
            expires: 1_900_000_000,
            nonce: [9; NONCE_BYTES],
            issuer: "s1".into(),
        }
    }

    #[test]
    fn a_body_round_trips_through_its_name() {
        let b = body();
        let name = b.name();
        assert!(name.starts_with("t1."));
        assert!(is_ticket_name(&name));
        let (back, bytes) = TicketBody::from_name(&name).unwrap();
        assert_eq!(back, b);
        assert_eq!(bytes, b.encode());
    }

    #[test]
    fn malformed_names_and_bodies_are_refused() {
        assert_eq!(TicketBody::from_name("node1"), Err(TicketError::NotATicket));
        assert_eq!(TicketBody::from_name("t1.a*b"), Err(TicketError::BadBase64));
        assert_eq!(TicketBody::from_name("t1."), Err(TicketError::Short));
        let mut bytes = body().encode();
        bytes.push(0);
        assert_eq!(TicketBody::decode(&bytes), Err(TicketError::Trailing(1)));
        bytes[0] = 2;
        assert_eq!(TicketBody::decode(&bytes), Err(TicketError::Version(2)));
        let enc = body().encode();
        for cut in 0..enc.len() {
            assert!(TicketBody::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn base64url_matches_known_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64url(plain.as_bytes()), enc);
            assert_eq!(unbase64url(enc).as_deref(), Some(plain.as_bytes()));
        }
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        // Unused bits set: not the encoding of anything.
        assert_eq!(unbase64url("Zh"), None);
        assert_eq!(unbase64url("Z"), None);
    }

    proptest! {
        /// Random bytes (as a body, and as a name) never panic the
        /// decoder; what decodes re-encodes to the same bytes.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            if let Ok(b) = TicketBody::decode(&bytes) {
                prop_assert_eq!(b.encode(), bytes.clone());
            }
            let text = String::from_utf8_lossy(&bytes);
            let _ = TicketBody::from_name(&format!("t1.{text}"));
            let _ = TicketBody::from_name(&format!("t1.{}", base64url(&bytes)));
        }

        #[test]
        fn base64url_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(unbase64url(&base64url(&bytes)), Some(bytes));
        }
    }
}
