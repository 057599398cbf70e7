//! Sextant object ids.
//!
//! A [`Soid`] is the 128-bit id of an inode (Ursa Minor's "SOID"). It never
//! changes for the life of the object. Numeric closeness means namespace
//! closeness, because SOIDs are assigned by the child-closest policy
//! (`sextant_engine::soid`); everything outside that policy treats a SOID as
//! an opaque number.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A 128-bit object id. Stored as two `u64` halves so that it has 8-byte
/// alignment (a `u128` would force 16-byte alignment and padding in every
/// struct that holds one).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Soid {
    hi: u64,
    lo: u64,
}

impl Soid {
    /// The smallest SOID. It is the root directory's.
    pub const ROOT: Soid = Soid { hi: 0, lo: 0 };
    /// The smallest SOID.
    pub const MIN: Soid = Soid { hi: 0, lo: 0 };
    /// The largest SOID.
    pub const MAX: Soid = Soid {
        hi: u64::MAX,
        lo: u64::MAX,
    };

    pub const fn from_u128(v: u128) -> Soid {
        Soid {
            hi: (v >> 64) as u64,
            lo: v as u64,
        }
    }

    pub const fn as_u128(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }

    /// The next SOID, or `None` at [`Soid::MAX`].
    pub fn checked_next(self) -> Option<Soid> {
        self.as_u128().checked_add(1).map(Soid::from_u128)
    }

    /// The previous SOID, or `None` at [`Soid::MIN`].
    pub fn checked_prev(self) -> Option<Soid> {
        self.as_u128().checked_sub(1).map(Soid::from_u128)
    }

    /// Big-endian bytes: byte order equals numeric order.
    pub fn to_be_bytes(self) -> [u8; 16] {
        self.as_u128().to_be_bytes()
    }

    pub fn from_be_bytes(b: [u8; 16]) -> Soid {
        Soid::from_u128(u128::from_be_bytes(b))
    }
}

impl fmt::Debug for Soid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Soid({:#034x})", self.as_u128())
    }
}

impl fmt::Display for Soid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.as_u128())
    }
}

/// An inclusive range of SOIDs `[first, last]`. Inclusive so that a range can
/// end at [`Soid::MAX`].
///
/// Invariant: `first <= last`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SoidRange {
    pub first: Soid,
    pub last: Soid,
}

impl SoidRange {
    /// The whole SOID space.
    pub const ALL: SoidRange = SoidRange {
        first: Soid::MIN,
        last: Soid::MAX,
    };

    /// A range `[first, last]`. Returns `None` when `first > last`.
    pub fn new(first: Soid, last: Soid) -> Option<SoidRange> {
        (first <= last).then_some(SoidRange { first, last })
    }

    pub fn contains(&self, soid: Soid) -> bool {
        self.first <= soid && soid <= self.last
    }

    pub fn overlaps(&self, other: &SoidRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

impl fmt::Debug for SoidRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}..={}]", self.first, self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u128_round_trip_and_order() {
        let vals = [
            0u128,
            1,
            u64::MAX as u128,
            1 << 64,
            (1 << 64) + 1,
            u128::MAX,
        ];
        for w in vals.windows(2) {
            let (a, b) = (Soid::from_u128(w[0]), Soid::from_u128(w[1]));
            assert!(a < b, "{a:?} < {b:?}");
            assert_eq!(a.as_u128(), w[0]);
            assert_eq!(Soid::from_be_bytes(a.to_be_bytes()), a);
        }
        assert_eq!(Soid::MAX.checked_next(), None);
        assert_eq!(Soid::MIN.checked_prev(), None);
    }

    #[test]
    fn ranges() {
        let r = SoidRange::new(Soid::from_u128(10), Soid::from_u128(20)).unwrap();
        assert!(r.contains(Soid::from_u128(10)) && r.contains(Soid::from_u128(20)));
        assert!(!r.contains(Soid::from_u128(21)));
        assert!(SoidRange::new(Soid::from_u128(2), Soid::from_u128(1)).is_none());
        assert!(r.overlaps(&SoidRange::ALL));
    }
}
