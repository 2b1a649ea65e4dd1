//! A tiny seeded generator (splitmix64) so every run of a scenario picks the same names.

use crate::cluster::NAME_ALPHABET;

#[derive(Debug, Clone, Default)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `len` characters from the generated-name alphabet.
    pub fn suffix(&mut self, len: usize) -> String {
        (0..len).map(|_| NAME_ALPHABET[(self.next_u64() % NAME_ALPHABET.len() as u64) as usize] as char).collect()
    }
}

/// 32-bit FNV-1a, the hash the pod-template-hash label is derived from.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Renders a hash as a label-safe string the way Kubernetes does for pod-template-hash: each
/// decimal digit mapped onto the generated-name alphabet.
pub fn safe_encode(hash: u32) -> String {
    hash.to_string().bytes().map(|b| NAME_ALPHABET[b as usize % NAME_ALPHABET.len()] as char).collect()
}
