//! Open claims a group's pods found dearer to join (see `join_cost`), remembered so that the
//! next pods of the group skip them instead of pricing each one again.
//!
//! # Why
//!
//! A pod that makes most open claims dearer than it is worth (an on-demand pod among spot
//! claims, a pod of one zone among claims of others) would walk every open claim with room and
//! price its narrowing twice per claim, and so would every pod like it: in a large batch that
//! is millions of verdicts, most of them "dearer", and a large share of the run.
//!
//! # What
//!
//! Per group, a bit set over the query's claims found dearer for its pods at one level and of
//! one shape, which the room index skips like the claims the group is refused by. A verdict is
//! kept exactly as long as what it rests on is unchanged, so placements are those of pricing
//! every claim:
//! - the claim: any pod joining it clears its bit in every group (its requests, requirements,
//!   candidate types and topology domains change only then);
//! - the pod's plan on the claim: kept only for levels whose topology is the claim's own
//!   (anti-affinity over `kubernetes.io/hostname` at most; no spread or affinity, whose domain
//!   counts other claims change);
//! - the pod's worth (`pod_worth`, cached while about as many pods of the shape are left as when
//!   it was computed): verdicts are kept only while the worth they used would be read from
//!   that cache still, and a worth computed again bumps the shape's epoch and drops them;
//! - the pods left of the shape otherwise: with fewer left, fewer pods share a claim's
//!   narrowing, so a claim found dearer stays dearer as pods are placed (the worth unchanged).
//!
//! Only the first, cost-respecting pass of a run keeps verdicts (retries join whatever the
//! cost), and a query's end drops them with its claims.

use std::collections::HashMap;

use kerf_api::labels::HOSTNAME;

use super::ids::{Attempt, ClaimIx, GroupIx, Idx, LevelIx, PodIx};
use super::packing::{Packing, still_holds};
use super::preferences::Group;
use super::topology::Topology;

/// Every group's remembered verdicts, by slot.
#[derive(Default)]
pub(super) struct Verdicts {
    pub(super) slots: Vec<Dearer>,
    pub(super) slot_of: HashMap<(GroupIx, LevelIx), usize>,
    /// The slots holding verdicts.
    pub(super) holding: Vec<usize>,
    /// Tests: whether verdicts are kept, and how many were.
    #[cfg(test)]
    pub(super) off: bool,
    #[cfg(test)]
    pub(super) noted: usize,
}

/// One group's remembered verdicts at one level (see the module documentation).
#[derive(Default)]
pub(super) struct Dearer {
    /// The shape, and the shape's worth epoch, the verdicts hold for.
    key: Option<(u32, u64)>,
    /// Whether the level's plans depend on the claim alone.
    usable: bool,
    /// The most pods of the shape left when a worth the verdicts used was computed.
    worth_at: u64,
    /// Whether listed in `Verdicts::holding`.
    listed: bool,
    /// Claims found dearer, a bit set over claim indexes.
    claims: Vec<u64>,
}

impl Verdicts {
    /// The shape and worth epoch of pod `pi` (see [`Packing::shape_epoch`]) when verdicts are
    /// kept at all: only while sizing by cost and joining claims by worth.
    pub(super) fn key(&self, packing: &Packing, pi: PodIx) -> Option<(u32, u64)> {
        #[cfg(test)]
        if self.off {
            return None;
        }
        if !packing.enabled || !packing.joins_by_worth {
            return None;
        }
        packing.shape_epoch(pi)
    }

    /// Checks the attempt's remembered dearer claims against what they rest on (`key` of
    /// [`Self::key`], `left` pods of its shape left), dropping them if that changed; their
    /// slot, when verdicts are kept at all (see [`Self::claims`]). `group` and `topology`
    /// tell whether the level's plans depend on the claim alone.
    pub(super) fn refresh(
        &mut self,
        at: Attempt,
        key: Option<(u32, u64)>,
        left: u64,
        group: &Group,
        topology: &Topology,
    ) -> Option<usize> {
        let key = key?;
        let slot = match self.slot_of.get(&(at.group, at.level)) {
            Some(&k) => k,
            None => {
                let usable = plans_claim_local(group, at.level, topology);
                self.slots.push(Dearer { usable, ..Dearer::default() });
                self.slot_of.insert((at.group, at.level), self.slots.len() - 1);
                self.slots.len() - 1
            }
        };
        let memo = &mut self.slots[slot];
        if memo.key != Some(key) || !still_holds(left, memo.worth_at) {
            memo.key = Some(key);
            memo.worth_at = 0;
            memo.claims.clear();
        }
        memo.usable.then_some(slot)
    }

    /// The claims slot `slot` (of [`Self::refresh`]) remembers as dearer, a bit set.
    pub(super) fn claims(&self, slot: Option<usize>) -> &[u64] {
        slot.map_or(&[], |k| &self.slots[k].claims)
    }

    /// Remembers in `slot` that claim `c` is dearer for a pod (`key` of [`Self::key`], `left`
    /// pods of its shape left), by a worth computed with `worth_at` pods of its shape left.
    pub(super) fn note(
        &mut self,
        slot: Option<usize>,
        key: Option<(u32, u64)>,
        left: u64,
        c: ClaimIx,
        worth_at: Option<u64>,
    ) {
        let (Some(slot), Some(key), Some(worth_at)) = (slot, key, worth_at) else {
            return;
        };
        // A worth the next pod would compute again (the shape's tail) keeps no verdict.
        if !still_holds(left, worth_at) {
            return;
        }
        let memo = &mut self.slots[slot];
        if memo.key != Some(key) {
            // The shape's worth was computed again during this scan: earlier verdicts may rest
            // on the old one.
            memo.key = Some(key);
            memo.worth_at = 0;
            memo.claims.clear();
        }
        memo.worth_at = memo.worth_at.max(worth_at);
        let c = c.ix();
        if memo.claims.len() <= c / 64 {
            memo.claims.resize(c / 64 + 1, 0);
        }
        memo.claims[c / 64] |= 1 << (c % 64);
        #[cfg(test)]
        {
            self.noted += 1;
        }
        let memo = &mut self.slots[slot];
        if !memo.listed {
            memo.listed = true;
            self.holding.push(slot);
        }
    }

    /// A pod joined claim `c`: every verdict on it is void.
    pub(super) fn claim_changed(&mut self, c: ClaimIx) {
        let (w, bit) = (c.ix() / 64, 1u64 << (c.ix() % 64));
        for &k in &self.holding {
            if let Some(word) = self.slots[k].claims.get_mut(w) {
                *word &= !bit;
            }
        }
    }

    /// Drops every verdict (the query's claims are gone).
    pub(super) fn forget(&mut self) {
        for k in std::mem::take(&mut self.holding) {
            let memo = &mut self.slots[k];
            memo.claims.clear();
            memo.key = None;
            memo.worth_at = 0;
            memo.listed = false;
        }
    }
}

/// Whether a plan of `group`'s pods at `level` on a claim depends on that claim alone: no
/// spread or pod affinity, anti-affinity (its own terms and others' against it) only over each
/// node's own hostname.
fn plans_claim_local(group: &Group, level: LevelIx, topology: &Topology) -> bool {
    let l = &group.state.levels[level];
    l.spreads.is_empty()
        && l.affinity.is_empty()
        && l.anti.iter().all(|ci| topology.counters[*ci].key == HOSTNAME)
        && group.state.rejected_by.iter().all(|ii| topology.inverses[*ii].key == HOSTNAME)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::ResourceList;
    use kerf_api::SlimPod;
    use kerf_api::labels::{CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, HOSTNAME, ZONE};
    use kerf_api::seeded::SplitMix64;

    use crate::model::{NodePoolInput, SchedulingInput};
    use crate::scheduler::SchedulingContext;
    use crate::testing::*;

    /// Three types in three zones, zone c a third dearer; `n` pods of random sizes, some that
    /// must run on-demand, some in one zone, some one per node (required anti-affinity over
    /// the hostname), some spread over zones.
    fn workload(seed: u64, n: usize) -> SchedulingInput {
        let mut rng = SplitMix64::new(seed);
        let types = [("s", "2", "8Gi", 0.10), ("m", "4", "16Gi", 0.19), ("l", "8", "32Gi", 0.37)]
            .into_iter()
            .map(|(name, cpu, mem, price)| {
                let mut t = instance_type(name, cpu, mem, "110", price, &["a", "b", "c"]);
                for o in t.offerings.iter_mut().filter(|o| o.zone == "c") {
                    o.price *= 1.3;
                }
                Arc::new(t)
            })
            .collect();
        let sizes = ["100m", "250m", "500m", "1", "1500m"];
        let pods: Vec<Arc<SlimPod>> = (0..n)
            .map(|i| {
                let app = format!("app{}", rng.below(6));
                let mut p = pod(&format!("p{i}")).cpu(sizes[rng.below(sizes.len())]).label("app", &app);
                p = match rng.below(8) {
                    0 | 1 => p.node_selector(CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND),
                    2 => p.node_selector(ZONE, ["a", "b", "c"][rng.below(3)]),
                    3 => p.anti_affinity(HOSTNAME, &[("app", &app)]),
                    4 | 5 => p.spread(ZONE, 1, &[("app", &app)]),
                    _ => p,
                };
                p.build()
            })
            .collect();
        SchedulingInput {
            node_pools: vec![NodePoolInput {
                node_pool: Arc::new(node_pool("default", vec![])),
                instance_types: types,
                in_use: ResourceList::new(),
            }],
            pods,
            ..Default::default()
        }
    }

    #[test]
    fn a_claim_found_dearer_is_priced_again_once_the_pods_worth_would_be_computed_again() {
        // 30 pods of 3 CPUs that may run on spot fill fifteen spot claims of one 8-CPU type
        // ($0.40/h on-demand, $0.04/h spot) two each, 2 CPUs of room left on each; 60 pods of
        // 100m that must run on-demand, one per node. Turning a spot claim on-demand costs
        // $0.36/h, shared by the twenty such pods its room holds: $0.018/h a pod; a pod's worth
        // is $0.40/h over the pods of its shape left (at most 80 a node): dearer while more than
        // about 22 are left, worth it after, when the pods join the spot claims rather than
        // open on-demand nodes of their own. The worth is cached while about as many pods are
        // left, so a verdict must be dropped once it would be computed again, though no claim
        // was priced since.
        let mut n8 = instance_type("n8", "8", "32Gi", "110", 0.40, &["a"]);
        for o in n8.offerings.iter_mut().filter(|o| o.capacity_type == "spot") {
            o.price = 0.04;
        }
        let mut pods: Vec<Arc<SlimPod>> = (0..30).map(|i| pod(&format!("flex{i}")).cpu("3").build()).collect();
        pods.extend((0..60).map(|i| {
            pod(&format!("od{i}"))
                .cpu("100m")
                .label("app", "od")
                .node_selector(CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND)
                .anti_affinity(HOSTNAME, &[("app", "od")])
                .build()
        }));
        let input = SchedulingInput {
            node_pools: vec![NodePoolInput {
                node_pool: Arc::new(node_pool("default", vec![])),
                instance_types: vec![Arc::new(n8)],
                in_use: ResourceList::new(),
            }],
            pods,
            ..Default::default()
        };
        let mut priced = SchedulingContext::new(input.clone());
        priced.dearer.off = true;
        let mut skipping = SchedulingContext::new(input);
        let (a, b) = (priced.place_pending(), skipping.place_pending());
        assert!(a.errors.is_empty(), "{:?}", a.errors);
        let shared =
            a.new_node_claims.iter().filter(|c| c.pods.iter().any(|p| *p < 30) && c.pods.iter().any(|p| *p >= 30));
        assert!(shared.count() > 0, "on-demand pods join spot claims once few are left");
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert!(skipping.dearer.noted > 0, "verdicts were kept");
    }

    #[test]
    fn skipping_claims_found_dearer_places_every_pod_where_pricing_every_claim_does() {
        let mut kept = 0;
        for seed in 0..40 {
            let input = workload(seed, 200 + 20 * seed as usize);
            let mut priced = SchedulingContext::new(input.clone());
            priced.dearer.off = true;
            let mut skipping = SchedulingContext::new(input);
            let (a, b) = (priced.place_pending(), skipping.place_pending());
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "seed {seed}");
            assert_eq!(priced.dearer.noted, 0);
            kept += skipping.dearer.noted;
        }
        assert!(kept > 0, "the workloads have claims found dearer, and they were kept");
    }
}
