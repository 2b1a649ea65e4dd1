//! Whether a pod may make the claim it joins dearer: provisioning's rule against a small pod
//! with a narrow requirement turning a whole claim into dearer capacity ([`JoinParts::cost`],
//! on the parts the rule reads).
//!
//! # Why
//!
//! First fit puts a pod on the first open claim it fits, and a claim's requirements narrow to
//! those of every pod it takes. A small pod that must run on-demand, joining a claim opened
//! for pods that may run on spot, turns the whole claim on-demand: two to four times the price,
//! for one pod. The smallest pods come last and fill the last room of many claims: in a large
//! scale-up they can turn hundreds of nodes on-demand for one on-demand pod each, a large share
//! of the fleet's cost, and consolidation then spends minutes merging those nodes.
//!
//! # What
//!
//! When provisioning sizes claims by cost (see `packing`), a pod whose requirements narrow a
//! claim's (capacity type, zone, architecture, ...) joins it only if the narrowing is worth it:
//! the rise of the claim's price (its cheapest fitting type with the pod, as it would launch,
//! types a cost cap set aside included, under the narrowed requirements against under the
//! claim's own), shared by the pods of its shape the narrowed claim holds (it, and as many more
//! as the claim's room takes, at most those left), may be no more than what such a pod is
//! worth on capacity of its own requirements (see `Packing::pod_worth`), and even then
//! the pod takes an open claim it joins as it is (one of its own requirements, opened earlier)
//! first. Otherwise the pod goes on: to another claim, or to a claim of its own requirements
//! that pods like it then share. The rule is a preference, never a reason to leave a pod
//! pending: pods the first pass left are retried without it (a NodePool's limits may leave no
//! room for a claim of their own). Consolidation's what-ifs do not size by cost and do not
//! apply it.

use super::claims::{ClaimPlan, Claims};
use super::ids::{ClaimIx, PodIx};
use super::interning::{Bits, Interned};
use super::packing::Packing;
use super::pools::Pools;
use super::resources::type_fits;
use crate::packing_bound::units_in;

/// What a pod joining an open claim costs it.
pub(super) enum JoinCost {
    /// Nothing beyond its room: the claim's requirements stay, or its price does.
    Free,
    /// A dearer claim, worth it when no other claim takes the pod as it is.
    Worth,
    /// A claim dearer than the pod is worth: the pod goes elsewhere. With the pods of its shape
    /// that were left when that worth was computed (what `dearer` keeps the verdict by).
    Dearer(Option<u64>),
}

/// What pricing a pod's join reads and the caches it fills: the query's claims (and their
/// scratch buffer), the pools and interned sets, and packing's worths.
pub(super) struct JoinParts<'s> {
    pub(super) pod: PodIx,
    /// The pod's requirements at its level (interned) and its dense requests.
    pub(super) level_req: u32,
    pub(super) requests: &'s [i64],
    pub(super) claims: &'s mut Claims,
    pub(super) pools: &'s mut Pools,
    pub(super) interned: &'s mut Interned,
    pub(super) packing: &'s mut Packing,
}

impl JoinParts<'_> {
    /// What the pod joining claim `c` as `plan` says costs the claim.
    pub(super) fn cost(&mut self, c: ClaimIx, plan: &ClaimPlan) -> JoinCost {
        if !self.packing.enabled || !self.packing.joins_by_worth || plan.req == self.claims.all[c].req {
            return JoinCost::Free;
        }
        let mut total = std::mem::take(&mut self.claims.scratch);
        total.clear();
        total.extend(self.claims.all[c].requests.iter().zip(self.requests).map(|(a, b)| a + b));
        let cost = self.narrowing_cost(c, plan, &total);
        self.claims.scratch = total;
        cost
    }

    /// [`cost`](Self::cost) once the claim's requirements narrow: `total` is the claim's
    /// requests with the pod's.
    fn narrowing_cost(&mut self, c: ClaimIx, plan: &ClaimPlan, total: &[i64]) -> JoinCost {
        let (pool, req) = (self.claims.all[c].pool, self.claims.all[c].req);
        let Some((before, _)) = self.cheapest_fitting(c, req, None, total) else {
            return JoinCost::Free;
        };
        let Some((after, t)) = self.cheapest_fitting(c, plan.req, Some(&plan.types), total) else {
            return JoinCost::Free;
        };
        if after <= before {
            return JoinCost::Free;
        }
        let pool_req = self.pools[pool].rules.req(self.interned);
        let own = self.interned.intersect(pool_req, self.level_req);
        let (Some(worth), Some(left)) =
            (self.packing.pod_worth(self.pools, self.interned, pool, own, self.pod), self.packing.shape_left(self.pod))
        else {
            return JoinCost::Worth;
        };
        // The narrowing is paid once: pods like this one the claim still has room for share it.
        let free = self.pools[pool].table.free.row(t);
        let more = units_in(self.requests, free.iter().zip(total).map(|(f, u)| f - u));
        let sharing = more.saturating_add(1).min(left.max(1));
        if (after - before) / sharing as f64 > worth {
            JoinCost::Dearer(self.packing.worth_computed_at(pool, own, self.pod))
        } else {
            JoinCost::Worth
        }
    }

    /// The cheapest type claim `c` may launch as under requirements `req`, `types` its
    /// candidates (`None`: the claim's own), that holds `total`, at the prices `req` allows: its
    /// price and index.
    fn cheapest_fitting(&mut self, c: ClaimIx, req: u32, types: Option<&Bits>, total: &[i64]) -> Option<(f64, usize)> {
        let claim = &self.claims.all[c];
        let order = self.pools.price_order(claim.pool, req, self.interned);
        let compat = self.pools.compat(claim.pool, req, self.interned);
        let types = types.unwrap_or(&claim.types);
        let pool = &self.pools[claim.pool];
        order
            .iter()
            .copied()
            .find(|(_, i)| type_fits(total, pool.table.free.row(*i)) && claim.launchable(pool, types, &compat, *i))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::ResourceList;
    use kerf_api::SlimPod;
    use kerf_api::labels::{CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND};

    use crate::bench::claims_cost;
    use crate::model::{NodePoolInput, SchedulingInput, SchedulingResult};
    use crate::scheduler::schedule;
    use crate::testing::*;

    /// 30 pods of 1500m that may run on spot (five per 8-CPU node, 500m left on each) and
    /// `od` pods of `od_cpu` that must run on-demand, on one 8-CPU type ($0.40/h on-demand,
    /// $0.28/h spot), the pool's CPU limited to `limit` when given.
    fn plan(od: usize, od_cpu: &str, limit: Option<&str>) -> SchedulingResult {
        let mut np = node_pool("default", vec![]);
        if let Some(cpu) = limit {
            np.spec.limits = Some(rl(&[("cpu", cpu)]));
        }
        let mut pods: Vec<Arc<SlimPod>> = (0..30).map(|i| pod(&format!("flex{i}")).cpu("1500m").build()).collect();
        pods.extend(
            (0..od).map(|i| {
                pod(&format!("od{i}")).cpu(od_cpu).node_selector(CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND).build()
            }),
        );
        let input = SchedulingInput {
            node_pools: vec![NodePoolInput {
                node_pool: Arc::new(np),
                instance_types: vec![Arc::new(instance_type("n8", "8", "32Gi", "110", 0.40, &["a"]))],
                in_use: ResourceList::new(),
            }],
            pods,
            ..Default::default()
        };
        schedule(&input)
    }

    fn on_demand_claims(r: &SchedulingResult) -> Vec<&Vec<usize>> {
        r.new_node_claims
            .iter()
            .filter(|c| c.labels.get(CAPACITY_TYPE).map(String::as_str) == Some(CAPACITY_TYPE_ON_DEMAND))
            .map(|c| &c.pods)
            .collect()
    }

    #[test]
    fn small_on_demand_pods_share_an_on_demand_node_rather_than_turn_spot_claims_on_demand() {
        // Each spot claim has room for one 400m pod: joining would make a $0.28/h claim a
        // $0.40/h one for one pod, where ten such pods share one on-demand node.
        let r = plan(10, "400m", None);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let od = on_demand_claims(&r);
        assert_eq!(od.len(), 1, "one on-demand claim: {od:?}");
        assert!(od[0].iter().all(|p| *p >= 30), "only the on-demand pods run on-demand: {od:?}");
        assert_eq!(od[0].len(), 10);
        assert!((claims_cost(&r) - (6.0 * 0.28 + 0.40)).abs() < 1e-9, "{}", claims_cost(&r));
    }

    #[test]
    fn on_demand_pods_that_fill_a_claims_room_together_make_it_on_demand() {
        // 500m of room holds five 100m pods: $0.12/h more for five pods is less than they cost
        // on an on-demand node of their own, so two claims turn on-demand and no node is added.
        let r = plan(10, "100m", None);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.new_node_claims.len(), 6);
        assert_eq!(on_demand_claims(&r).len(), 2);
    }

    #[test]
    fn a_pod_joins_a_dearer_claim_when_the_pools_limits_leave_no_room_for_its_own() {
        // 48 CPUs: the six spot claims and no seventh, so the on-demand pods join them anyway.
        let r = plan(6, "400m", Some("48"));
        assert!(r.errors.is_empty(), "no pod left pending: {:?}", r.errors);
        assert_eq!(r.new_node_claims.len(), 6);
        assert_eq!(on_demand_claims(&r).len(), 6);
    }
}
