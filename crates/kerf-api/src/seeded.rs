//! A tiny seeded generator (splitmix64): deterministic names, hashes and generated workloads, so
//! the same input always gives the same output.

/// The alphabet of generated-name suffixes (the API server's: no vowels, no look-alike digits).
pub const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// splitmix64's output function: a cheap, well-mixed 64-bit hash of `z`.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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
        mix64(self.state)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// `len` characters of [`NAME_ALPHABET`], like a generateName suffix.
    pub fn suffix(&mut self, len: usize) -> String {
        (0..len).map(|_| NAME_ALPHABET[self.below(NAME_ALPHABET.len())] as char).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_suffixes_use_the_name_alphabet() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        assert_eq!((0..4).map(|_| a.next_u64()).collect::<Vec<_>>(), (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(SplitMix64::new(1).next_u64(), SplitMix64::new(2).next_u64());
        let s = a.suffix(5);
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|c| NAME_ALPHABET.contains(&c)));
    }

    #[test]
    fn splitmix64_matches_its_reference_output() {
        // First output of splitmix64 seeded with 0, as published with the algorithm.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }
}
