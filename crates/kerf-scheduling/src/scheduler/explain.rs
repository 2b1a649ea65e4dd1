//! Explanations: for a pod placed nowhere, each existing node's reason (the one fit check's
//! words, summarized as kube-scheduler does) and, per NodePool, what excluded it.

use std::collections::BTreeMap;

use kerf_api::NodePool;

use super::SchedulingContext;
use super::ids::{Attempt, GroupIx, Idx, LevelIx, NodeIx, PodIx, PoolIx};
use super::pool_fit::Depth;
use super::refusal::Why;
use super::resources::from_units;
use crate::model::PodError;

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
    /// Why pod `pi` fits nowhere: existing nodes summarized kube-scheduler style, then each
    /// NodePool with what excluded it (at the most relaxed level).
    pub(super) fn explain(&mut self, pi: PodIx, g: GroupIx) -> PodError {
        if let Some(why) = &self.groups[g].volumes.unresolvable {
            return PodError { reason: "UnresolvableVolume".to_string(), message: why.clone() };
        }
        let l = LevelIx::new(self.groups[g].state.levels.len().saturating_sub(1));
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
        let mut all_limits = !self.pools.all.is_empty();
        for p in self.pools.all.indices() {
            let (why, is_limit) = self.pool_reason(at, p);
            all_limits &= is_limit;
            parts.push(format!("NodePool {}: {}", self.pools[p].name, why));
        }
        for (name, why) in &self.input.unavailable_node_pools {
            all_limits = false;
            parts.push(format!("NodePool {name}: {why}"));
        }
        if self.pools.all.is_empty() && self.input.unavailable_node_pools.is_empty() {
            parts.push("no NodePool can launch nodes".to_string());
        }
        let mut message = parts.join("; ");
        if let Some(r) = self.groups[g].state.levels.get(l).and_then(|x| x.relaxed.clone()) {
            message.push_str(&format!(" (after relaxing preferences: {r})"));
        }
        PodError { reason: if all_limits { "NodePoolLimitExceeded" } else { "Unschedulable" }.to_string(), message }
    }

    pub(super) fn node_reason(&mut self, at: Attempt, n: NodeIx) -> String {
        self.node_checks(at).reason(n)
    }

    /// What excluded NodePool `p` (the pool-fit check's [`Why`] in words), and whether it was
    /// (only) its limits.
    pub(super) fn pool_reason(&mut self, at: Attempt, p: PoolIx) -> (String, bool) {
        match self.pool_fit(at).check(p, Depth::Full) {
            Ok(_) => {
                ("no compatible instance type and offering fits with the pod's topology constraints".into(), false)
            }
            Err(why) => (self.pool_words(at, p, &why), why.is_limit()),
        }
    }

    /// `why` NodePool `p` takes no new claim for the attempt's pod, in words.
    fn pool_words(&self, at: Attempt, p: PoolIx, why: &Why) -> String {
        let pool = &self.pools[p];
        let total = &self.pods.requests[at.pod];
        let name = |ri: usize| self.res.names[ri].as_str();
        match why {
            Why::Taint(i) => match pool.rules.taints.get(*i) {
                Some(t) => format!("untolerated taint {t}"),
                None => "untolerated taint".to_string(),
            },
            Why::Requirements(e) => {
                let pool_side = if e.left == "undefined" {
                    format!("NodePool's nodes have no label {}", e.key)
                } else {
                    format!("NodePool requires {} {}", e.key, e.left)
                };
                format!("incompatible requirements, key {}: {pool_side}, pod requires {} {}", e.key, e.key, e.right)
            }
            Why::NoInstanceTypes => "the NodePool has no instance types".into(),
            Why::DaemonSetPort => "a host port the pod asks for is taken by a DaemonSet pod on every new node".into(),
            Why::NoResource(ri) => format!("no instance type in NodePool {} has resource {}", pool.name, name(*ri)),
            Why::Unsatisfiable(req) => format!(
                "incompatible requirements, key {}: no value satisfies both",
                self.interned.reqs[*req as usize].unsatisfiable_key().unwrap_or_default()
            ),
            Why::NoOffering { excluding: Some(excluding), .. } => {
                let (k, kr) = &**excluding;
                // Name what the types do have, so both sides of the mismatch are visible.
                let have = pool.table.values(k);
                let have = if have.is_empty() {
                    String::new()
                } else {
                    format!(" (the NodePool's instance types have {k} {})", value_list(&have))
                };
                format!("no instance type with an available offering satisfies requirement {k} {kr}{have}")
            }
            Why::NoOffering { req, excluding: None } => format!(
                "no instance type with an available offering satisfies requirements {}",
                self.interned.reqs[*req as usize]
            ),
            Why::TooSmall { short } if short.is_empty() => {
                "no single instance type fits all requested resources together".into()
            }
            Why::TooSmall { short } => {
                let short: Vec<String> = short
                    .iter()
                    .map(|&(ri, best)| {
                        // The type with the most room left after its DaemonSets.
                        let name = name(ri);
                        format!(
                            "{name} (needs {} plus daemonset overhead {}, largest allocatable {})",
                            from_units(name, total[ri]),
                            from_units(name, pool.table.overhead.get(best, ri)),
                            from_units(name, pool.table.alloc.get(best, ri))
                        )
                    })
                    .collect();
                format!("no instance type has enough {}", short.join(", "))
            }
            Why::NodeLimit => format!("limit nodes exhausted (limit {})", limit_of(&pool.node_pool, "nodes")),
            Why::Limits => {
                let names: Vec<String> = self
                    .res
                    .names
                    .iter()
                    .enumerate()
                    .filter(|(ri, _)| pool.limits.remaining[*ri] != i64::MAX)
                    .map(|(ri, name)| {
                        format!(
                            "{name} limit {} (remaining {})",
                            limit_of(&pool.node_pool, name),
                            from_units(name, pool.limits.remaining[ri].max(0))
                        )
                    })
                    .collect();
                format!("limits exhausted: {}", names.join(", "))
            }
            Why::MinValues { key, min, have } => {
                format!("minValues {min} for key {key} not met: only {have} values among fitting instance types")
            }
            Why::Spread(i) => {
                let level = &self.groups[at.group].state.levels[at.level];
                match level.spreads.get(*i) {
                    Some(s) => format!(
                        "topology spread constraint not satisfiable, {}",
                        self.topology.spread_counts(s, &self.interned.values)
                    ),
                    None => "topology spread constraint not satisfiable".into(),
                }
            }
            Why::PodAffinity => {
                "pod affinity not satisfiable: no domain the NodePool can launch in has the required pods".into()
            }
            Why::PodAntiAffinity => "pod anti-affinity not satisfiable in any domain the NodePool can launch in".into(),
        }
    }
}
