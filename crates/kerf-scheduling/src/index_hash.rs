//! Maps keyed by a small integer or an address (a node's index, a kind's id, a pod's address)
//! in the replay's hot loops. The standard hasher is built to resist chosen keys, which these are
//! not, and its cost shows in a consolidation what-if's replay: [`ByIndex`] hashes a key with
//! two multiplications instead. Nothing reads these maps in their iteration order.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes one `usize` (an index or an address) by two multiplications, high bits folded into
/// low ones after each (addresses are aligned: their low bits alone say little).
#[derive(Default, Clone, Copy)]
pub(crate) struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used for `usize` keys; any other key is still hashed, byte by byte.
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let mut h = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 29;
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        self.0 = h ^ (h >> 32);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A map keyed by an index or an address (see the module doc).
pub(crate) type ByIndex<V> = HashMap<usize, V, BuildHasherDefault<IndexHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The low 6 bits of the hashes of 64 keys `start + step * i`: how many differ.
    fn buckets(start: usize, step: usize) -> usize {
        let buckets: std::collections::BTreeSet<u64> = (0..64usize)
            .map(|i| {
                let mut h = IndexHasher::default();
                h.write_usize(start + step * i);
                h.finish() & 63
            })
            .collect();
        buckets.len()
    }

    #[test]
    fn aligned_addresses_and_small_indexes_spread_over_the_low_bits() {
        // 64 keys in 64 buckets fill about 40 of them when hashed at random.
        assert!(buckets(0x7f00_0000_1000, 64) > 32, "addresses: {}", buckets(0x7f00_0000_1000, 64));
        assert!(buckets(0, 1) > 32, "indexes: {}", buckets(0, 1));
    }
}
