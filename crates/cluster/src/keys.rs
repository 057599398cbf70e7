//! Key ranges: each table covers a half-open range of the key space
//! (`table/<id>` in etcd holds it, apart from `owner/<id>`), and the
//! ranges of the existing tables partition `0..KEYSPACE`. In the model an
//! operation's key is a function of its id ([`key_of`]); a real operation
//! carries its key.
//!
//! Pure: encoding, decoding, the key of an operation, whether a set of
//! ranges partitions the key space.

use crate::ids::TableId;

/// The size of the key space: keys are `0..KEYSPACE`.
pub const KEYSPACE: u64 = 1 << 16;

/// The key an operation addresses (a fixed mix of its id, so that
/// consecutive operations spread over the key space).
pub fn key_of(op: u64) -> u64 {
    let mut x = op.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) % KEYSPACE
}

/// A half-open range of keys `start..end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KeyRange {
    pub start: u64,
    pub end: u64,
}

impl KeyRange {
    pub fn contains(&self, key: u64) -> bool {
        self.start <= key && key < self.end
    }

    pub fn encode(&self) -> String {
        format!("{} {}", self.start, self.end)
    }

    pub fn decode(s: &str) -> Option<KeyRange> {
        let (a, b) = s.split_once(' ')?;
        let r = KeyRange {
            start: a.parse().ok()?,
            end: b.parse().ok()?,
        };
        (r.start < r.end).then_some(r)
    }

    /// The range split at `at` (strictly inside): the lower and the upper
    /// part.
    pub fn split(&self, at: u64) -> Option<(KeyRange, KeyRange)> {
        (self.start < at && at < self.end).then_some((
            KeyRange {
                start: self.start,
                end: at,
            },
            KeyRange {
                start: at,
                end: self.end,
            },
        ))
    }

    /// This range and `upper`, if `upper` starts where this one ends.
    pub fn merge(&self, upper: &KeyRange) -> Option<KeyRange> {
        (self.end == upper.start).then_some(KeyRange {
            start: self.start,
            end: upper.end,
        })
    }
}

/// The etcd key of a table's range.
pub fn range_key(t: TableId) -> String {
    format!("table/{:06}", t.0)
}

/// The etcd key of the counter that names new tables (its value: the next
/// table id).
pub const NEXT_TABLE_KEY: &str = "next_table";

/// Whether `ranges` (in any order) partition `0..KEYSPACE`: sorted by
/// start, each begins where the previous one ended, the first at 0, the
/// last ends at `KEYSPACE`. `Err` says where not.
pub fn check_partition(ranges: &[(TableId, KeyRange)]) -> Result<(), String> {
    let mut sorted: Vec<(KeyRange, TableId)> = ranges.iter().map(|(t, r)| (*r, *t)).collect();
    sorted.sort();
    let mut next = 0;
    for (r, t) in &sorted {
        if r.start != next {
            return Err(format!(
                "{t} covers {}..{} but the previous range ends at {next}: {sorted:?}",
                r.start, r.end
            ));
        }
        next = r.end;
    }
    if next != KEYSPACE {
        return Err(format!(
            "the ranges end at {next}, not {KEYSPACE}: {sorted:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_split_merge_and_partition() {
        let all = KeyRange {
            start: 0,
            end: KEYSPACE,
        };
        let (a, b) = all.split(100).unwrap();
        assert!(all.split(0).is_none() && all.split(KEYSPACE).is_none());
        assert_eq!(a.merge(&b), Some(all));
        assert_eq!(b.merge(&a), None);
        assert!(check_partition(&[(TableId(1), b), (TableId(0), a)]).is_ok());
        assert!(check_partition(&[(TableId(0), a)]).is_err());
        assert!(check_partition(&[(TableId(0), a), (TableId(1), b), (TableId(2), b)]).is_err());
        assert_eq!(KeyRange::decode(&a.encode()), Some(a));
        assert!(key_of(7) < KEYSPACE);
    }
}
