//! Deterministic names: the seeded generator and the pod-template-hash rendering.

use kerf_api::seeded::NAME_ALPHABET;

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
