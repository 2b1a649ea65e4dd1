//! Whether a pod can go on a new claim of a NodePool, and if not, why: the one check placement
//! refuses a pool by and the explanations put into words ([`Why`]; `explain` only formats it).
//!
//! [`PoolFit::check`] asks, in one order: the pool's taints and requirements
//! (cached per group level and pool, and asked of open claims of the pool too), whether it has
//! instance types, DaemonSet host ports, resources no type has at all, requirements no value
//! satisfies, then — on the pool's whole type table — available offerings, room, NodePool limits
//! and minValues, and last the pod's topology constraints.
//!
//! Placement asks at [`Depth::Admission`]: the checks that need no sizing of a claim, to refuse
//! a pool before it opens one (the rest are decided when the claim is opened, on the types and
//! domains it is opened with). An explanation asks at [`Depth::Full`] about a pod placement left
//! with nowhere to go: past the pool's own checks, the pod's topology constraints are what kept
//! it out, so the first of them is named.

use std::sync::Arc;

use kerf_api::labels::{HOSTNAME, NODE_POOL};

use super::ids::{Idx, IxVec, LevelIx, PoolIx};
use super::interning::{Bits, Interned};
use super::pools::Pools;
use super::preferences::Group;
use super::refusal::Why;
use super::topology::{Gone, Topology};
use crate::pod;
use crate::requirements::{Requirement, Requirements};

/// How far [`PoolFit::check`] checks (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Depth {
    /// The checks placement refuses a pool by before sizing a claim.
    Admission,
    /// Every check, for a pod placement left with nowhere to go.
    Full,
}

/// An attempt's pod (its group at a level, its requests) against the NodePools: the parts the
/// check reads, the caches it fills (the pools' per requirement set, the interned sets) and the
/// group that keeps its verdict per level and pool.
pub(super) struct PoolFit<'s> {
    pub(super) group: &'s mut Group,
    pub(super) level: LevelIx,
    /// The pod's dense requests.
    pub(super) requests: &'s [i64],
    pub(super) pools: &'s mut Pools,
    pub(super) interned: &'s mut Interned,
    pub(super) topology: &'s Topology,
    pub(super) gone: Gone<'s>,
}

impl PoolFit<'_> {
    /// Whether the pod can go on a new claim of pool `p`: the claim's requirements (the pool's
    /// with the pod's, interned), or why not. See the module documentation.
    pub(super) fn check(&mut self, p: PoolIx, depth: Depth) -> Result<u32, Why> {
        // Placement refuses an exhausted pool before anything else (nothing to intern).
        if depth == Depth::Admission && self.pools[p].limits.nodes_remaining <= 0 {
            return Err(Why::NodeLimit);
        }
        match depth {
            Depth::Admission => self.admits(p)?,
            Depth::Full => self.admission(p)?,
        }
        let full = depth == Depth::Full;
        // A pool without types, or without a resource the pod asks for, fits nothing: a
        // claim's room check says so too, so placement leaves that to it.
        if full && self.pools[p].table.types.is_empty() {
            return Err(Why::NoInstanceTypes);
        }
        if self.pools[p].table.daemon_port_conflict(&self.group.ports) {
            return Err(Why::DaemonSetPort);
        }
        let pool = &self.pools[p];
        if full
            && let Some(ri) =
                self.requests.iter().zip(&pool.table.largest_alloc).position(|(r, most)| *r > 0 && *most <= 0)
        {
            return Err(Why::NoResource(ri));
        }
        let level_req = self.group.state.levels[self.level].req;
        let pool_req = self.pools[p].rules.req(self.interned);
        let req = self.interned.intersect(pool_req, level_req);
        if self.interned.unsat[req as usize] {
            return Err(Why::Unsatisfiable(req));
        }
        if !full {
            return Ok(req);
        }
        let compat = self.pools.compat(p, req, self.interned);
        if compat.is_empty() {
            return Err(Why::NoOffering { req, excluding: self.excluding_requirement(p, req) });
        }
        let total = self.requests;
        let fit_any = self.pools[p].table.fitting(&compat, total);
        let pool = &self.pools[p];
        if fit_any.is_empty() {
            let short = (0..total.len())
                .filter(|ri| total[*ri] > 0 && compat.iter().all(|i| pool.table.free.get(i, *ri) < total[*ri]))
                .map(|ri| {
                    // The type with the most room; of equals, the cheapest.
                    let best = compat.iter().max_by_key(|i| (pool.table.free.get(*i, ri), std::cmp::Reverse(*i)));
                    (ri, best.unwrap_or(0))
                })
                .collect();
            return Err(Why::TooSmall { short });
        }
        if pool.limits.nodes_remaining <= 0 {
            return Err(Why::NodeLimit);
        }
        if !fit_any.iter().any(|i| pool.limits.admit(pool.table.capacity.row(i))) {
            return Err(Why::Limits);
        }
        if !pool.quotas.is_empty() {
            let mut within = Bits::empty(pool.table.types.len());
            for i in fit_any.iter().filter(|i| pool.limits.admit(pool.table.capacity.row(*i))) {
                within.set(i);
            }
            let Pools { all, quotas, .. } = &mut *self.pools;
            let pool = &mut all[p];
            if let Some(short) = quotas.short(&mut pool.quotas, &pool.table, &within, req, self.interned) {
                return Err(Why::Quota(short));
            }
        }
        if let Some((key, min, have)) = self.pools[p].min_values_ok(&fit_any) {
            return Err(Why::MinValues { key, min, have });
        }
        // Topology: the pool can launch a node for the pod, yet placement found none.
        let level = &self.group.state.levels[self.level];
        for (i, s) in level.spreads.iter().enumerate() {
            if !s.fresh
                || !s.domains.iter().any(|d| self.topology.spread_allows(s, *d, self.gone, &self.interned.values))
            {
                return Err(Why::Spread(i));
            }
        }
        if !level.affinity.is_empty() {
            return Err(Why::PodAffinity);
        }
        if !level.anti.is_empty() || !self.group.state.rejected_by.is_empty() {
            return Err(Why::PodAntiAffinity);
        }
        Ok(req)
    }

    /// Whether pool `p`'s taints and requirements take the group at its level (cached per
    /// level and pool; asked of new and open claims of the pool alike).
    pub(super) fn admits(&mut self, p: PoolIx) -> Result<(), Why> {
        let l = self.level;
        if let Some(Some(known)) = self.group.state.admits.get(l).and_then(|by_pool| by_pool.get(p)) {
            return known.clone();
        }
        let verdict = self.admission(p);
        let npools = self.pools.all.len();
        let admits = &mut self.group.state.admits;
        if admits.len() <= l.ix() {
            admits.resize_with(l.ix() + 1, IxVec::default);
        }
        admits[l].resize(npools, None);
        admits[l][p] = Some(verdict.clone());
        verdict
    }

    /// The pool's taints, then its requirements, against the group at its level.
    fn admission(&self, p: PoolIx) -> Result<(), Why> {
        let grp = &*self.group;
        let level = &grp.state.levels[self.level];
        let pool = &self.pools[p];
        if let Some(t) = pod::untolerated_taint_with(&grp.tolerations, &pool.rules.taints, !level.tolerate_prefer) {
            return Err(Why::Taint(pool.rules.taints.iter().position(|x| std::ptr::eq(x, t)).unwrap_or(0)));
        }
        pool.rules
            .reqs
            .compatible_strict(&self.interned.reqs[level.req as usize], |k| pool.table.type_keys.contains(k))
            .map_err(|e| Why::Requirements(Arc::new(e)))
    }

    /// The first of requirements `req` (interned) that alone leaves pool `p` no instance type
    /// with an available offering.
    fn excluding_requirement(&mut self, p: PoolIx, req: u32) -> Option<Box<(String, Requirement)>> {
        let r = self.interned.reqs[req as usize].clone();
        for (k, kr) in r.iter() {
            if k == HOSTNAME || k == NODE_POOL {
                continue;
            }
            let mut one = Requirements::new();
            one.add(k, kr.clone());
            let id = self.interned.intern_req(one);
            if self.pools.compat(p, id, self.interned).is_empty() {
                return Some(Box::new((k.clone(), kr.clone())));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::ResourceList;
    use kerf_api::SlimPod;
    use kerf_api::labels::{INSTANCE_TYPE, ZONE};

    use crate::instance::InstanceType;
    use crate::model::{NodePoolInput, SchedulingInput};
    use crate::scheduler::schedule;
    use crate::testing::*;

    /// NodePools named `pools` with the types each offers, and one pending pod.
    fn one_pod(pools: Vec<(&str, Vec<InstanceType>)>, pod: Arc<SlimPod>) -> SchedulingInput {
        let pool = |(name, types): (&str, Vec<InstanceType>)| NodePoolInput {
            node_pool: Arc::new(node_pool(name, vec![])),
            instance_types: types.into_iter().map(Arc::new).collect(),
            in_use: ResourceList::new(),
        };
        SchedulingInput { node_pools: pools.into_iter().map(pool).collect(), pods: vec![pod], ..Default::default() }
    }

    /// The message the one pending pod of `input` is left with.
    fn message(input: SchedulingInput) -> String {
        let r = schedule(&input);
        assert_eq!(r.errors.len(), 1, "{r:?}");
        r.errors[0].1.message.clone()
    }

    fn it(name: &str, cpu: &str, mem: &str, zones: &[&str]) -> InstanceType {
        instance_type(name, cpu, mem, "10", 0.1, zones)
    }

    #[test]
    fn a_pool_without_instance_types_and_one_without_the_resource_say_so() {
        let pools = vec![("empty", vec![]), ("cpu-only", vec![it("c", "4", "8Gi", &["a"])])];
        assert_eq!(
            message(one_pod(pools, pod("p").cpu("1").request("example.com/fpga", "1").build())),
            "NodePool cpu-only: no instance type in NodePool cpu-only has resource example.com/fpga; \
             NodePool empty: the NodePool has no instance types"
        );
    }

    #[test]
    fn requirements_that_exclude_every_type_only_together_are_named_whole() {
        let pools = vec![("default", vec![it("small", "2", "4Gi", &["b"]), it("medium", "4", "8Gi", &["a"])])];
        let p = pod("p").cpu("1").node_selector(ZONE, "a").node_selector(INSTANCE_TYPE, "small").build();
        assert_eq!(
            message(one_pod(pools, p)),
            "NodePool default: no instance type with an available offering satisfies requirements \
             karpenter.sh/nodepool In [default], node.kubernetes.io/instance-type In [small], \
             topology.kubernetes.io/zone In [a]"
        );
    }

    #[test]
    fn a_pod_larger_than_every_type_gets_each_short_resource_with_the_largest_room() {
        let pools = vec![("default", vec![it("small", "2", "4Gi", &["a"]), it("large", "8", "16Gi", &["a"])])];
        let mut input = one_pod(pools, pod("p").cpu("12").memory("2Gi").build());
        input.daemonset_pods = vec![pod("ds").cpu("500m").build()];
        assert_eq!(
            message(input),
            "NodePool default: no instance type has enough cpu (needs 12 plus daemonset overhead 500m, \
             largest allocatable 8)"
        );
    }

    #[test]
    fn a_pod_each_of_whose_requests_some_type_holds_but_no_type_all_of_them_says_so() {
        let pools = vec![("default", vec![it("cpu-heavy", "16", "4Gi", &["a"]), it("mem-heavy", "2", "64Gi", &["a"])])];
        assert_eq!(
            message(one_pod(pools, pod("p").cpu("8").memory("32Gi").build())),
            "NodePool default: no single instance type fits all requested resources together"
        );
    }

    #[test]
    fn required_pod_affinity_to_pods_that_run_nowhere_names_the_affinity() {
        let pools = vec![("default", vec![it("c", "4", "8Gi", &["a", "b"])])];
        assert_eq!(
            message(one_pod(pools, pod("p").cpu("1").pod_affinity(ZONE, &[("app", "db")]).build())),
            "NodePool default: pod affinity not satisfiable: no domain the NodePool can launch in has the \
             required pods"
        );
    }

    #[test]
    fn anti_affinity_that_every_zone_blocks_names_the_anti_affinity() {
        let pools = vec![("default", vec![it("c", "4", "8Gi", &["a", "b"])])];
        let p = pod("p").label("app", "x").cpu("1").anti_affinity(ZONE, &[("app", "x")]).build();
        let mut input = one_pod(pools, p);
        for zone in ["a", "b"] {
            let mut n = node(&format!("n-{zone}"), &[(ZONE, zone)], &[("cpu", "1"), ("memory", "1Gi"), ("pods", "10")]);
            n.pods = vec![pod(&format!("x-{zone}")).label("app", "x").cpu("1").build()];
            input.existing_nodes.push(n);
        }
        assert_eq!(
            message(input),
            "0/2 nodes are available: 2 Insufficient cpu; NodePool default: pod anti-affinity not \
             satisfiable in any domain the NodePool can launch in"
        );
    }
}
