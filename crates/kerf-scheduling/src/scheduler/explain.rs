//! Explanations: for a pod placed nowhere, each existing node's reason (the one fit check's
//! words, summarized as kube-scheduler does) and, per NodePool, what excluded it.

use std::collections::{BTreeMap, BTreeSet};

use kerf_api::NodePool;
use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_POOL, ZONE};

use super::SchedulingContext;
use super::existing::NodeFit;
use super::ids::{Attempt, GroupIx, Idx, LevelIx, NodeIx, PodIx, PoolIx};
use super::resources::from_units;
use super::topology::SpreadPlan;
use crate::model::PodError;
use crate::pod;
use crate::requirements::Requirements;

/// `a, b, c`, or the first few and how many more.
pub(super) fn value_list(values: &[String]) -> String {
    const SHOWN: usize = 5;
    if values.len() <= SHOWN {
        values.join(", ")
    } else {
        format!("{} and {} more", values[..SHOWN].join(", "), values.len() - SHOWN)
    }
}

pub(super) fn limit_of(np: &NodePool, name: &str) -> String {
    np.spec.limits.as_ref().map(|l| l.get(name).to_string()).unwrap_or_default()
}

impl SchedulingContext {
    /// The distinct values of `key` among pool `p`'s instance types (their labels, names, and
    /// available offerings' zones and capacity types), sorted.
    pub(super) fn type_values(&self, p: PoolIx, key: &str) -> Vec<String> {
        let mut vals: BTreeSet<&str> = BTreeSet::new();
        for t in &self.pools[p].types {
            if key == ZONE || key == CAPACITY_TYPE {
                for o in t.offerings.iter().filter(|o| o.available) {
                    vals.insert(if key == ZONE { &o.zone } else { &o.capacity_type });
                }
            } else if let Some(v) = t.labels.get(key) {
                vals.insert(v);
            } else if key == INSTANCE_TYPE {
                vals.insert(&t.name);
            }
        }
        vals.into_iter().map(str::to_string).collect()
    }

    /// Why pod `pi` fits nowhere: existing nodes summarized kube-scheduler style, then each
    /// NodePool with what excluded it (at the most relaxed level).
    pub(super) fn explain(&mut self, pi: PodIx, g: GroupIx) -> PodError {
        if let Some(why) = &self.groups[g].unresolvable {
            return PodError { reason: "UnresolvableVolume".to_string(), message: why.clone() };
        }
        let l = LevelIx::new(self.groups[g].levels.len().saturating_sub(1));
        let at = Attempt { pod: pi, group: g, level: l };
        let mut parts: Vec<String> = Vec::new();
        if !self.nodes.is_empty() {
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            for n in self.nodes.indices() {
                let why = self.node_reason(at, n);
                *reasons.entry(why).or_insert(0) += 1;
            }
            let list: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.push(format!("0/{} nodes are available: {}", self.nodes.len(), list.join(", ")));
        }
        let mut all_limits = !self.pools.is_empty();
        for p in self.pools.indices() {
            let (why, is_limit) = self.pool_reason(at, p);
            all_limits &= is_limit;
            parts.push(format!("NodePool {}: {}", self.pools[p].name, why));
        }
        for (name, why) in &self.input.unavailable_node_pools {
            all_limits = false;
            parts.push(format!("NodePool {name}: {why}"));
        }
        if self.pools.is_empty() && self.input.unavailable_node_pools.is_empty() {
            parts.push("no NodePool can launch nodes".to_string());
        }
        let mut message = parts.join("; ");
        if let Some(r) = self.groups[g].levels.get(l).and_then(|x| x.relaxed.clone()) {
            message.push_str(&format!(" (after relaxing preferences: {r})"));
        }
        PodError { reason: if all_limits { "NodePoolLimitExceeded" } else { "Unschedulable" }.to_string(), message }
    }

    pub(super) fn node_reason(&mut self, at: Attempt, n: NodeIx) -> String {
        match self.node_fit(at, n) {
            Ok(()) => "node(s) would fit".into(),
            Err(why) => {
                let static_ok = self.node_static_ok(at, n);
                crate::fit::describe(&NodeFit { s: self, at, n, static_ok }, why).reason
            }
        }
    }

    pub(super) fn spread_counts(&self, s: &SpreadPlan) -> String {
        let c = &self.counters[s.counter];
        let counts: Vec<String> =
            s.domains.iter().map(|d| format!("{}: {}", self.values.name(*d), c.get(*d))).collect();
        format!(
            "key {} maxSkew {}, counts in reachable domains {{{}}}{}",
            s.key,
            s.max_skew,
            counts.join(", "),
            if s.fresh { " plus an empty new node" } else { "" }
        )
    }

    /// What excluded NodePool `p`, and whether it was (only) its limits.
    pub(super) fn pool_reason(&mut self, at: Attempt, p: PoolIx) -> (String, bool) {
        let (pi, g) = (at.pod, at.group);
        let level = self.groups[g].levels[at.level].clone();
        let grp = &self.groups[g];
        let pool = &self.pools[p];
        if let Some(t) = pod::untolerated_taint_with(&grp.tolerations, &pool.taints, !level.tolerate_prefer) {
            return (format!("untolerated taint {}", t), false);
        }
        let pod_req = self.reqs[level.req as usize].clone();
        if let Err(e) = pool.reqs.compatible_strict(&pod_req, |k| pool.type_keys.contains(k)) {
            let pool_side = if e.left == "undefined" {
                format!("NodePool's nodes have no label {}", e.key)
            } else {
                format!("NodePool requires {} {}", e.key, e.left)
            };
            return (
                format!("incompatible requirements, key {}: {pool_side}, pod requires {} {}", e.key, e.key, e.right),
                false,
            );
        }
        if pool.types.is_empty() {
            return ("the NodePool has no instance types".into(), false);
        }
        if self.daemon_port_conflict(g, p) {
            return ("a host port the pod asks for is taken by a DaemonSet pod on every new node".into(), false);
        }
        // Resources the pod needs that no type has at all, then ones too small.
        let total = self.pod_requests[pi].clone();
        for (ri, name) in self.res.names.iter().enumerate() {
            if self.pod_requests[pi][ri] > 0 && (0..pool.types.len()).all(|i| pool.alloc.get(i, ri) <= 0) {
                return (format!("no instance type in NodePool {} has resource {}", pool.name, name), false);
            }
        }
        let pool_req = self.pool_req(p);
        let req = self.intersect(pool_req, level.req);
        if let Some(k) = self.reqs[req as usize].unsatisfiable_key() {
            return (format!("incompatible requirements, key {k}: no value satisfies both"), false);
        }
        let compat = self.compat(p, req);
        if compat.is_empty() {
            // Find the requirement that excludes every type.
            let r = self.reqs[req as usize].clone();
            for (k, kr) in r.iter() {
                if k == HOSTNAME || k == NODE_POOL {
                    continue;
                }
                let mut one = Requirements::new();
                one.add(k, kr.clone());
                let id = self.intern_req(one);
                if self.compat(p, id).is_empty() {
                    // Name what the types do have, so both sides of the mismatch are visible.
                    let have = self.type_values(p, k);
                    let have = if have.is_empty() {
                        String::new()
                    } else {
                        format!(" (the NodePool's instance types have {k} {})", value_list(&have))
                    };
                    return (
                        format!("no instance type with an available offering satisfies requirement {k} {kr}{have}"),
                        false,
                    );
                }
            }
            return (format!("no instance type with an available offering satisfies requirements {r}"), false);
        }
        let fit_any = self.fitting(p, &compat, &total);
        if fit_any.is_empty() {
            let pool = &self.pools[p];
            let short: Vec<String> = self
                .res
                .names
                .iter()
                .enumerate()
                .filter(|(ri, _)| total[*ri] > 0 && compat.iter().all(|i| pool.free.get(i, *ri) < total[*ri]))
                .map(|(ri, name)| {
                    // The type with the most room left after its DaemonSets.
                    let best = compat.iter().max_by_key(|i| pool.free.get(*i, ri)).unwrap_or(0);
                    let overhead = pool.overhead.get(best, ri);
                    let alloc = pool.alloc.get(best, ri);
                    format!(
                        "{name} (needs {} plus daemonset overhead {}, largest allocatable {})",
                        from_units(name, total[ri]),
                        from_units(name, overhead),
                        from_units(name, alloc)
                    )
                })
                .collect();
            return if short.is_empty() {
                ("no single instance type fits all requested resources together".into(), false)
            } else {
                (format!("no instance type has enough {}", short.join(", ")), false)
            };
        }
        let pool = &self.pools[p];
        if pool.nodes_remaining <= 0 {
            return (format!("limit nodes exhausted (limit {})", limit_of(&pool.node_pool, "nodes")), true);
        }
        if pool.limited {
            let within: Vec<usize> = fit_any
                .iter()
                .filter(|i| pool.capacity.row(*i).iter().zip(&pool.remaining).all(|(c, r)| *r == i64::MAX || c <= r))
                .collect();
            if within.is_empty() {
                let names: Vec<String> = self
                    .res
                    .names
                    .iter()
                    .enumerate()
                    .filter(|(ri, _)| pool.remaining[*ri] != i64::MAX)
                    .map(|(ri, name)| {
                        format!(
                            "{name} limit {} (remaining {})",
                            limit_of(&pool.node_pool, name),
                            from_units(name, pool.remaining[ri].max(0))
                        )
                    })
                    .collect();
                return (format!("limits exhausted: {}", names.join(", ")), true);
            }
        }
        if let Some((k, m, have)) = self.min_values_ok(p, &fit_any) {
            return (
                format!("minValues {m} for key {k} not met: only {have} values among fitting instance types"),
                false,
            );
        }
        // Topology.
        for s in &level.spreads {
            let allowed: Vec<u32> = s.domains.iter().copied().filter(|d| self.spread_allows(s, *d)).collect();
            if allowed.is_empty() || !s.fresh {
                return (format!("topology spread constraint not satisfiable, {}", self.spread_counts(s)), false);
            }
        }
        if !level.affinity.is_empty() {
            return (
                "pod affinity not satisfiable: no domain the NodePool can launch in has the required pods".into(),
                false,
            );
        }
        if !level.anti.is_empty() || !self.groups[g].rejected_by.is_empty() {
            return ("pod anti-affinity not satisfiable in any domain the NodePool can launch in".into(), false);
        }
        ("no compatible instance type and offering fits with the pod's topology constraints".into(), false)
    }
}
