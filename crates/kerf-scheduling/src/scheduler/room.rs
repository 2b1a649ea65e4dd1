//! The first-fit index over a query's claims: the first claim, at or after a position, whose
//! room could hold a pod's requests.
//!
//! # Why
//!
//! Pods join the first open claim that takes them (first-fit decreasing), so without an index
//! every pod would walk the claims in creation order, most of which turn it away for room: with
//! a few thousand claims that walk would be most of a provisioning run. The index answers "the first claim from
//! position `i` with room for `r`" in a few steps per level of a tree, so the walk only visits
//! claims that pass the room check, in the same order, and placements are exactly those of the
//! full walk.
//!
//! # What
//!
//! A segment tree over claim indexes. A leaf holds a claim's room per resource: its largest
//! candidate allocatable (componentwise) minus its requests, clamped at 0 (`type_fits` lets a
//! zero request through whatever the room); a closed claim's leaf is `i64::MIN` everywhere. An
//! inner node holds the componentwise maximum of its children, so a subtree whose maximum lacks
//! room in some resource is skipped whole. Rooms are upper bounds (the largest allocatable of
//! each resource may come from different types): the index only rules claims out, the claim's
//! own checks decide.

use super::resources::Matrix;

/// See the module documentation.
#[derive(Default)]
pub(super) struct RoomIndex {
    /// Leaves (a power of two, at least 1).
    cap: usize,
    /// Claims indexed.
    len: usize,
    /// Node `k` (1-based heap order; leaves from `cap`) is row `k`, a room per resource.
    max: Matrix,
}

impl RoomIndex {
    /// Empties the index for claims with `dims` resources.
    pub(super) fn clear(&mut self, dims: usize) {
        self.len = 0;
        self.cap = 1;
        self.max.reset(2, dims, i64::MIN);
    }

    /// Indexes the next claim (index `len()`) with the room `max_alloc - requests`.
    pub(super) fn push(&mut self, max_alloc: &[i64], requests: &[i64]) {
        if self.len == self.cap {
            self.grow();
        }
        self.len += 1;
        self.set(self.len - 1, max_alloc, requests);
    }

    /// Claim `i`'s room is now `max_alloc - requests`.
    pub(super) fn set(&mut self, i: usize, max_alloc: &[i64], requests: &[i64]) {
        for (m, (a, r)) in self.max.row_mut(self.cap + i).iter_mut().zip(max_alloc.iter().zip(requests)) {
            *m = a.saturating_sub(*r).max(0);
        }
        self.lift(self.cap + i);
    }

    /// Claim `i` takes no more pods.
    pub(super) fn close(&mut self, i: usize) {
        self.max.row_mut(self.cap + i).fill(i64::MIN);
        self.lift(self.cap + i);
    }

    /// The first claim at or after `from` whose room holds `requests` and that is in neither
    /// bit set of `skip` (over claim indexes: the claims refused, those found dearer), if any.
    pub(super) fn first_fit(&self, from: usize, requests: &[i64], skip: [&[u64]; 2]) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        self.descend(Subtree { k: 1, lo: 0, hi: self.cap }, from, requests, skip)
    }

    fn holds(&self, k: usize, requests: &[i64]) -> bool {
        self.max.row(k).iter().zip(requests).all(|(m, r)| r <= m)
    }

    /// The first claim of subtree `t` at or after `from` (see [`RoomIndex::first_fit`]).
    fn descend(&self, t: Subtree, from: usize, requests: &[i64], skip: [&[u64]; 2]) -> Option<usize> {
        let Subtree { k, lo, hi } = t;
        if hi <= from || lo >= self.len || all_set(skip, lo, hi.min(self.len)) || !self.holds(k, requests) {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        self.descend(Subtree { k: 2 * k, lo, hi: mid }, from, requests, skip)
            .or_else(|| self.descend(Subtree { k: 2 * k + 1, lo: mid, hi }, from, requests, skip))
    }

    /// Recomputes the ancestors of node `k`.
    fn lift(&mut self, mut k: usize) {
        while k > 1 {
            k /= 2;
            self.max.set_max_of_pair(k, 2 * k);
        }
    }

    /// Doubles the leaves, keeping the claims indexed.
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.max);
        let old_cap = self.cap;
        self.cap = (old_cap * 2).max(1);
        self.max.reset(2 * self.cap, old.cols(), i64::MIN);
        for i in 0..self.len {
            self.max.row_mut(self.cap + i).copy_from_slice(old.row(old_cap + i));
        }
        for k in (1..self.cap).rev() {
            self.max.set_max_of_pair(k, 2 * k);
        }
    }
}

/// A node of the tree: heap index `k`, covering claims `lo..hi`.
#[derive(Clone, Copy)]
struct Subtree {
    k: usize,
    lo: usize,
    hi: usize,
}

/// Whether every index in `lo..hi` is in one of the bit sets `sets` (their union). Node ranges
/// are aligned to their power-of-two size, so a range is whole words or lies within one word.
fn all_set(sets: [&[u64]; 2], lo: usize, hi: usize) -> bool {
    let word = |j: usize| sets[0].get(j).copied().unwrap_or(0) | sets[1].get(j).copied().unwrap_or(0);
    if hi - lo >= 64 {
        return (lo / 64..hi.div_ceil(64)).all(|j| {
            // The last word may be partly past `hi`.
            let end = (hi - j * 64).min(64);
            let mask = if end == 64 { u64::MAX } else { (1u64 << end) - 1 };
            word(j) & mask == mask
        });
    }
    let mask = ((1u64 << (hi - lo)) - 1) << (lo % 64);
    word(lo / 64) & mask == mask
}

#[cfg(test)]
mod tests {
    use super::RoomIndex;

    /// The claims a linear walk from `from` would stop at first, by the index's own rule.
    fn walk(rooms: &[Option<[i64; 2]>], from: usize, req: [i64; 2]) -> Option<usize> {
        (from..rooms.len()).find(|i| rooms[*i].is_some_and(|r| req.iter().zip(&r).all(|(q, r)| q <= r)))
    }

    #[test]
    fn the_first_fit_is_the_first_open_claim_with_room_outside_both_skipped_sets_a_linear_walk_would_find() {
        let mut idx = RoomIndex::default();
        idx.clear(2);
        let mut rooms: Vec<Option<[i64; 2]>> = Vec::new();
        let mut rng = kerf_api::seeded::SplitMix64::new(7);
        for step in 0..2_000 {
            match rng.below(4) {
                0 | 1 => {
                    let room = [rng.below(16) as i64, rng.below(16) as i64];
                    idx.push(&[room[0] + 3, room[1] + 5], &[3, 5]);
                    rooms.push(Some(room));
                }
                2 if !rooms.is_empty() => {
                    let i = rng.below(rooms.len());
                    let room = [rng.below(16) as i64, rng.below(16) as i64];
                    idx.set(i, &room, &[0, 0]);
                    rooms[i] = Some(room);
                }
                _ if !rooms.is_empty() => {
                    let i = rng.below(rooms.len());
                    idx.close(i);
                    rooms[i] = None;
                }
                _ => {}
            }
            let from = rng.below(rooms.len() + 2);
            let req = [rng.below(18) as i64, rng.below(18) as i64];
            assert_eq!(idx.first_fit(from, &req, [&[], &[]]), walk(&rooms, from, req), "step {step}");
            // Refused claims in runs of random length: the walk's first claim that is not refused.
            let mut refused = vec![0u64; rooms.len().div_ceil(64)];
            let mut i = 0;
            while i < rooms.len() {
                let run = 1 + rng.below(150);
                if rng.below(3) > 0 {
                    for j in i..(i + run).min(rooms.len()) {
                        refused[j / 64] |= 1 << (j % 64);
                    }
                }
                i += run;
            }
            let not_refused = (from..rooms.len()).find(|i| {
                refused[i / 64] & (1 << (i % 64)) == 0
                    && rooms[*i].is_some_and(|r| req.iter().zip(&r).all(|(q, r)| q <= r))
            });
            assert_eq!(idx.first_fit(from, &req, [&refused, &[]]), not_refused, "step {step}");
            // The same claims split between the two sets at random: their union is skipped.
            let (mut a, mut b) = (vec![0u64; refused.len()], vec![0u64; refused.len()]);
            for (j, w) in refused.iter().enumerate() {
                let pick = rng.next_u64();
                a[j] = w & pick;
                b[j] = w & !pick;
            }
            assert_eq!(idx.first_fit(from, &req, [&a, &b]), not_refused, "step {step}, split");
        }
        assert_eq!(idx.len, rooms.len());
    }

    #[test]
    fn a_zero_request_fits_a_claim_whose_allocatable_is_negative_in_that_resource() {
        let mut idx = RoomIndex::default();
        idx.clear(2);
        idx.push(&[4, -1], &[1, 0]);
        assert_eq!(idx.first_fit(0, &[2, 0], [&[], &[]]), Some(0));
        assert_eq!(idx.first_fit(0, &[2, 1], [&[], &[]]), None);
        idx.close(0);
        assert_eq!(idx.first_fit(0, &[0, 0], [&[], &[]]), None);
    }
}
