//! Hashers for maps keyed by ids the server assigns (SOIDs, uids, gids):
//! no keyed hash is needed, only a fast one that spreads child-closest
//! SOIDs over buckets. Used by a search's memo and tallies
//! ([`crate::search`]), the remembered directory paths
//! ([`crate::dir_cache`]) and the sum of table summaries
//! ([`crate::table::summary`]). Pure.

use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hasher for SOID keys (server-assigned ids: no need
/// for a keyed hash), also used for the small integer keys of tallies.
#[derive(Default, Clone, Copy)]
pub(crate) struct SoidHasher(u64);

impl Hasher for SoidHasher {
    /// Mixes the high bits down (MurmurHash3's 64-bit finalizer): a
    /// multiply carries low bits up but never down, and hashbrown picks
    /// buckets by the low bits, while child-closest SOIDs differ mostly in
    /// their high bits (a directory's low bits are often all zero). Without
    /// it, a memo of many directories probes long chains of one bucket.
    fn finish(&self) -> u64 {
        crate::bloom::fmix64(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
}

/// The hasher of maps keyed by ids the server assigns (SOIDs, uids, gids):
/// no need for a keyed hash.
pub(crate) type FastHash = BuildHasherDefault<SoidHasher>;

#[cfg(test)]
mod tests {
    use super::SoidHasher;
    use sextant_types::Soid;
    use std::collections::HashSet;
    use std::hash::{Hash, Hasher};

    fn low_bits(s: Soid, bits: u32) -> u64 {
        let mut h = SoidHasher::default();
        s.hash(&mut h);
        h.finish() & ((1 << bits) - 1)
    }

    /// SOIDs that differ only in high bits (directories of a child-closest
    /// layout) still spread over hashbrown's buckets, which are chosen by
    /// the low bits.
    #[test]
    fn soids_differing_in_high_bits_spread_over_buckets() {
        for shift in [20u32, 64, 100, 118] {
            let buckets: HashSet<u64> = (0..1024u128)
                .map(|i| low_bits(Soid::from_u128(i << shift), 10))
                .collect();
            // A random function fills ~63% of 1,024 buckets with 1,024 keys.
            assert!(
                buckets.len() > 550,
                "shift {shift}: {} buckets",
                buckets.len()
            );
        }
    }
}
