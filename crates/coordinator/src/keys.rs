//! The etcd key layout of a cluster and the encodings of its values.
//! Pure: no I/O; every other module names keys only through here.
//!
//! Under the cluster's prefix `P` (default `/sextant/`):
//!
//! | key                    | value                             | lease      |
//! |------------------------|-----------------------------------|------------|
//! | `P member/<name>`      | the server's client address       | membership |
//! | `P joined/<name>`      | empty; written by every join with `member/<name>`: its mod revision is the server's last join (R3 compares it) | none |
//! | `P coordinator`        | the coordinator's name            | its membership |
//! | `P table/<id>`         | the table's SOID range `first-last` (32 hex digits each) | none |
//! | `P owner/<id>`         | `<epoch> <name>`                  | none       |
//! | `P manifest/<id>`      | the engine's manifest (opaque bytes) | none    |
//! | `P move/<id>`          | the name a move goes to           | none       |
//! | `P drain/<name>`       | empty: the server gives its tables away | none |
//! | `P meta/bootstrapped`  | `1` once the root table was created | none     |
//! | `P load/<name>`        | the server's load per table: `<id>=<ops/s>` and `i<id>=<inodes>`, space-separated | membership |
//! | `P borrow/<name>`      | the tables the server's operations need together: `<id>` space-separated; queued by its mod revision | membership |
//! | `P home/<id>`          | the server a lent table goes back to  | none       |
//! | `P clientkey/<name>`   | a client key's record (TOML, as `<data>/clientkeys.toml` keeps one key: its secret included — etcd access is admin access) | none |
//!
//! `<id>` is the table's number, 6 digits (`sextant_cluster::server::owner_key`)
//! in keys, in decimal in `load/` values. In `load/<name>` a table's inode
//! count is its own `i<id>=` pair (left out at 0), which a reader that
//! knows only the `<id>=` pairs skips as malformed: either side of an
//! upgrade still reads the rates, and a value without `i` pairs (an older
//! server's) is read as rates with inodes unknown (0).
//! The range lives in `table/<id>`, apart from the owner, so that a split or
//! merge (which changes ranges) does not change `owner/<id>`'s revision —
//! the fence of R2 — and a move (which changes the owner) leaves the range
//! alone. A client routes with `table/` and `owner/` and `member/` (address).

use sextant_cluster::ids::{Epoch, TableId};
use sextant_cluster::server::{manifest_key as mk, move_key as vk, owner_key as ok};
use sextant_types::{Soid, SoidRange};
use std::collections::BTreeMap;

pub fn member_key(name: &str) -> String {
    format!("member/{name}")
}

/// Written (empty, no lease) in the transaction of every join that creates
/// `member/<name>`: its mod revision is the server's last join, which a
/// reassignment from the server compares with its view's (R3,
/// `sextant_cluster::coordinator::Gone`).
pub fn joined_key(name: &str) -> String {
    format!("joined/{name}")
}

/// A client key's record (see `sextant_server::clientkeys`); `name` is a
/// key name (the same characters as a server name).
pub fn clientkey_key(name: &str) -> String {
    format!("clientkey/{name}")
}

/// The prefix (under the cluster's) of every client key's record.
pub const CLIENTKEY_PREFIX: &str = "clientkey/";

pub fn drain_key(name: &str) -> String {
    format!("drain/{name}")
}

pub fn load_key(name: &str) -> String {
    format!("load/{name}")
}

/// One table's load, as its owner publishes it in `load/<name>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableLoad {
    /// Requests per second.
    pub rate: u64,
    /// Inodes it holds.
    pub inodes: u64,
}

/// The value of `load/<name>`: each table's rate (`<id>=<ops/s>`), then
/// its inode count when not 0 (`i<id>=<inodes>`).
pub fn encode_load(loads: &BTreeMap<TableId, TableLoad>) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(loads.len() * 2);
    for (t, l) in loads {
        parts.push(format!("{}={}", t.0, l.rate));
        if l.inodes > 0 {
            parts.push(format!("i{}={}", t.0, l.inodes));
        }
    }
    parts.join(" ")
}

/// Decodes [`encode_load`]'s form; malformed pairs are skipped, and a
/// table with only one of its two pairs gets 0 for the other.
pub fn decode_load(s: &str) -> BTreeMap<TableId, TableLoad> {
    let mut loads: BTreeMap<TableId, TableLoad> = BTreeMap::new();
    for p in s.split_whitespace() {
        let Some((t, n)) = p.split_once('=') else {
            continue;
        };
        let (t, inodes) = match t.strip_prefix('i') {
            Some(t) => (t, true),
            None => (t, false),
        };
        let (Ok(t), Ok(n)) = (t.parse::<u32>(), n.parse::<u64>()) else {
            continue;
        };
        let l = loads.entry(TableId(t)).or_default();
        if inodes {
            l.inodes = n;
        } else {
            l.rate = n;
        }
    }
    loads
}

pub fn borrow_key(name: &str) -> String {
    format!("borrow/{name}")
}

/// The value of `borrow/<name>`.
pub fn encode_tables(tables: &std::collections::BTreeSet<TableId>) -> String {
    let parts: Vec<String> = tables.iter().map(|t| t.0.to_string()).collect();
    parts.join(" ")
}

/// Decodes [`encode_tables`]'s form; `None` when any part is not a table.
pub fn decode_tables(s: &str) -> Option<std::collections::BTreeSet<TableId>> {
    s.split_whitespace()
        .map(|t| t.parse().ok().map(TableId))
        .collect()
}

pub fn home_key(t: TableId) -> String {
    format!("home/{:06}", t.0)
}

pub fn table_key(t: TableId) -> String {
    format!("table/{:06}", t.0)
}

pub fn owner_key(t: TableId) -> String {
    ok(t)
}

pub fn manifest_key(t: TableId) -> String {
    mk(t)
}

pub fn move_key(t: TableId) -> String {
    vk(t)
}

pub const COORDINATOR_KEY: &str = sextant_cluster::server::COORDINATOR_KEY;
pub const BOOTSTRAPPED_KEY: &str = "meta/bootstrapped";

/// The prefixes enclosing a cluster's `prefix` (normalized: starting and
/// ending with `/`): every proper ancestor ending in `/`, outermost first
/// (`/a/b/` → `/`, `/a/`). A cluster under one of them would read and
/// watch every key of this one.
pub fn enclosing_prefixes(prefix: &str) -> Vec<String> {
    prefix
        .char_indices()
        .filter(|&(i, c)| c == '/' && i + 1 < prefix.len())
        .map(|(i, _)| prefix[..=i].to_string())
        .collect()
}

/// The prefix (relative to this cluster's) of another cluster nested
/// inside this one, if `tail` (a key with this cluster's prefix removed)
/// is that cluster's bootstrap mark: `b/meta/bootstrapped` → `b/`. This
/// cluster's own mark (`meta/bootstrapped`) is not one.
pub fn nested_cluster(tail: &str) -> Option<&str> {
    let inner = tail.strip_suffix(BOOTSTRAPPED_KEY)?;
    (!inner.is_empty() && inner.ends_with('/')).then_some(inner)
}

/// The root table every cluster starts with: the whole SOID space.
pub const ROOT_TABLE: TableId = TableId(0);

/// A server name: 1–64 of `[A-Za-z0-9._-]` (it is part of keys and of the
/// space-separated owner value).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// What a key under the prefix is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Member(String),
    Joined(String),
    Drain(String),
    Table(TableId),
    Owner(TableId),
    Manifest(TableId),
    Move(TableId),
    Load(String),
    Borrow(String),
    Home(TableId),
    ClientKey(String),
    Coordinator,
    Bootstrapped,
    Other,
}

/// Parses a key with the prefix already removed.
pub fn parse_key(k: &str) -> Key {
    let table = |s: &str| s.parse::<u32>().ok().map(TableId);
    if k == COORDINATOR_KEY {
        return Key::Coordinator;
    }
    if k == BOOTSTRAPPED_KEY {
        return Key::Bootstrapped;
    }
    let Some((kind, rest)) = k.split_once('/') else {
        return Key::Other;
    };
    let parsed = match kind {
        "member" if valid_name(rest) => Some(Key::Member(rest.to_string())),
        "joined" if valid_name(rest) => Some(Key::Joined(rest.to_string())),
        "drain" if valid_name(rest) => Some(Key::Drain(rest.to_string())),
        "table" => table(rest).map(Key::Table),
        "owner" => table(rest).map(Key::Owner),
        "manifest" => table(rest).map(Key::Manifest),
        "move" => table(rest).map(Key::Move),
        "load" if valid_name(rest) => Some(Key::Load(rest.to_string())),
        "borrow" if valid_name(rest) => Some(Key::Borrow(rest.to_string())),
        "home" => table(rest).map(Key::Home),
        "clientkey" if valid_name(rest) => Some(Key::ClientKey(rest.to_string())),
        _ => None,
    };
    parsed.unwrap_or(Key::Other)
}

/// The value of `owner/<id>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerValue {
    pub epoch: Epoch,
    pub server: String,
}

impl OwnerValue {
    pub fn encode(&self) -> String {
        format!("{} {}", self.epoch.0, self.server)
    }

    pub fn decode(s: &str) -> Option<OwnerValue> {
        let (e, n) = s.split_once(' ')?;
        valid_name(n).then_some(())?;
        Some(OwnerValue {
            epoch: Epoch(e.parse().ok()?),
            server: n.to_string(),
        })
    }
}

pub fn encode_range(r: &SoidRange) -> String {
    format!("{}-{}", r.first, r.last)
}

pub fn decode_range(s: &str) -> Option<SoidRange> {
    let (a, b) = s.split_once('-')?;
    let soid = |x: &str| {
        (x.len() == 32)
            .then(|| u128::from_str_radix(x, 16).ok())
            .flatten()
            .map(Soid::from_u128)
    };
    SoidRange::new(soid(a)?, soid(b)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_keys_round_trip() {
        let o = OwnerValue {
            epoch: Epoch(7),
            server: "mds-2.a_b".into(),
        };
        assert_eq!(OwnerValue::decode(&o.encode()), Some(o));
        assert_eq!(OwnerValue::decode("7 two words"), None);
        assert_eq!(OwnerValue::decode("x s1"), None);
        for r in [
            SoidRange::ALL,
            SoidRange::new(Soid::from_u128(5), Soid::from_u128(1 << 100)).unwrap(),
        ] {
            assert_eq!(decode_range(&encode_range(&r)), Some(r));
        }
        assert_eq!(decode_range("1-2"), None);
        let bad = format!("{}-{}", Soid::MAX, Soid::MIN);
        assert_eq!(decode_range(&bad), None, "first > last");
        assert_eq!(parse_key(&owner_key(TableId(3))), Key::Owner(TableId(3)));
        assert_eq!(parse_key(&table_key(TableId(3))), Key::Table(TableId(3)));
        assert_eq!(parse_key(&move_key(TableId(9))), Key::Move(TableId(9)));
        assert_eq!(
            parse_key(&manifest_key(TableId(9))),
            Key::Manifest(TableId(9))
        );
        assert_eq!(parse_key(&member_key("s1")), Key::Member("s1".into()));
        assert_eq!(parse_key(&joined_key("s1")), Key::Joined("s1".into()));
        assert_eq!(parse_key(&drain_key("s1")), Key::Drain("s1".into()));
        assert_eq!(parse_key("coordinator"), Key::Coordinator);
        assert_eq!(parse_key(&borrow_key("s1")), Key::Borrow("s1".into()));
        assert_eq!(parse_key(&home_key(TableId(4))), Key::Home(TableId(4)));
        let set = [TableId(3), TableId(12)].into();
        assert_eq!(decode_tables(&encode_tables(&set)), Some(set));
        assert_eq!(decode_tables("3 x"), None);
        assert_eq!(parse_key("member/a b"), Key::Other);
        assert_eq!(parse_key("owner/x"), Key::Other);
        assert!(!valid_name("") && !valid_name("a/b") && valid_name("s-1"));
    }

    #[test]
    fn loads_carry_inodes_and_read_either_form() {
        let l = |rate, inodes| TableLoad { rate, inodes };
        let loads: BTreeMap<TableId, TableLoad> = [
            (TableId(1), l(250, 20_000)),
            (TableId(2), l(0, 0)),
            (TableId(7), l(3, 1)),
        ]
        .into();
        let text = encode_load(&loads);
        assert_eq!(text, "1=250 i1=20000 2=0 7=3 i7=1");
        assert_eq!(decode_load(&text), loads);
        // An older server's value: rates only.
        assert_eq!(
            decode_load("1=250 2=40"),
            [(TableId(1), l(250, 0)), (TableId(2), l(40, 0))].into()
        );
        // What an older reader sees of the new form: the rates (it skips
        // the pairs whose table is not a number).
        let old_reader: BTreeMap<u32, u64> = text
            .split_whitespace()
            .filter_map(|p| {
                let (t, r) = p.split_once('=')?;
                Some((t.parse().ok()?, r.parse().ok()?))
            })
            .collect();
        assert_eq!(old_reader, [(1, 250), (2, 0), (7, 3)].into());
        // Junk is skipped; inodes alone are a table without requests.
        assert_eq!(
            decode_load("x=1 i=5 ix=2 i3 4= i5=60000 junk"),
            [(TableId(5), l(0, 60_000))].into()
        );
    }

    #[test]
    fn prefixes_that_would_nest_are_named() {
        assert_eq!(enclosing_prefixes("/sextant/"), ["/"]);
        assert_eq!(enclosing_prefixes("/a/b/"), ["/", "/a/"]);
        assert!(enclosing_prefixes("/").is_empty());
        assert_eq!(nested_cluster("b/meta/bootstrapped"), Some("b/"));
        assert_eq!(nested_cluster("b/c/meta/bootstrapped"), Some("b/c/"));
        assert_eq!(nested_cluster("meta/bootstrapped"), None);
        assert_eq!(nested_cluster("member/meta/bootstrappedx"), None);
        assert_eq!(nested_cluster("xmeta/bootstrapped"), None);
        assert_eq!(nested_cluster("owner/000001"), None);
    }
}
