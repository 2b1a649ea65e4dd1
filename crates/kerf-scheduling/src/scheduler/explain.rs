//! Explanations: for a pod placed nowhere ([`ExplainParts`], the parts it reads), each
//! existing node's reason (the one fit check's words, summarized as kube-scheduler does) and,
//! per NodePool, what excluded it (the pool-fit check's [`Why`] in words).

use std::collections::BTreeMap;

use kerf_api::NodePool;

use super::ids::{Idx, LevelIx, PoolIx};
use super::interning::Interned;
use super::node_fit::NodeChecks;
use super::pool_fit::{Depth, PoolFit};
use super::pools::Pools;
use super::preferences::Group;
use super::refusal::Why;
use super::resources::{Resources, from_units, to_units};
use super::topology::{Gone, Topology};
use crate::model::PodError;
use crate::volume_limits::ATTACHABLE_VOLUMES_EBS;
use kerf_api::resources::NODES;

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

/// What explaining a pod placed nowhere reads, and the caches its checks fill: the pod's group
/// and requests, the NodePools (and those that cannot launch nodes), the interned sets, the
/// topology, the nodes and the resource names.
pub(super) struct ExplainParts<'s> {
    pub(super) group: &'s mut Group,
    /// The pod's dense requests.
    pub(super) requests: &'s [i64],
    pub(super) pools: &'s mut Pools,
    /// The NodePools that cannot launch nodes, with why.
    pub(super) unavailable: &'s BTreeMap<String, String>,
    pub(super) interned: &'s mut Interned,
    pub(super) topology: &'s Topology,
    /// Every node (`all`), and those the running what-if took away.
    pub(super) gone: Gone<'s>,
    pub(super) res: &'s Resources,
}

impl ExplainParts<'_> {
    /// Why the pod fits nowhere: existing nodes summarized kube-scheduler style, then each
    /// NodePool with what excluded it (at the most relaxed level).
    pub(super) fn explain(&mut self) -> PodError {
        if let Some(why) = &self.group.volumes.unresolvable {
            return PodError { reason: "UnresolvableVolume".to_string(), message: why.clone() };
        }
        let l = LevelIx::new(self.group.state.levels.len().saturating_sub(1));
        let mut parts: Vec<String> = Vec::new();
        let nodes = self.gone.all;
        if !nodes.is_empty() {
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            let mut checks = self.node_checks(l);
            for n in nodes.indices() {
                *reasons.entry(checks.reason(n)).or_insert(0) += 1;
            }
            let list: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.push(format!("0/{} nodes are available: {}", nodes.len(), list.join(", ")));
        }
        let mut all_limits = !self.pools.all.is_empty();
        for p in self.pools.all.indices() {
            let (why, is_limit) = self.pool_reason(l, p);
            all_limits &= is_limit;
            parts.push(format!("NodePool {}: {}", self.pools[p].name, why));
        }
        for (name, why) in self.unavailable {
            all_limits = false;
            parts.push(format!("NodePool {name}: {why}"));
        }
        if self.pools.all.is_empty() && self.unavailable.is_empty() {
            parts.push("no NodePool can launch nodes".to_string());
        }
        let mut message = parts.join("; ");
        if let Some(r) = self.group.state.levels.get(l).and_then(|x| x.relaxed.clone()) {
            message.push_str(&format!(" (after relaxing preferences: {r})"));
        }
        PodError { reason: if all_limits { "NodePoolLimitExceeded" } else { "Unschedulable" }.to_string(), message }
    }

    /// The pod at level `l` against the existing nodes.
    fn node_checks(&mut self, l: LevelIx) -> NodeChecks<'_> {
        NodeChecks {
            group: self.group,
            level: l,
            requests: self.requests,
            interned: self.interned,
            topology: self.topology,
            gone: self.gone,
            res: self.res,
        }
    }

    /// What excluded NodePool `p` for the pod at level `l` (the pool-fit check's [`Why`] in
    /// words), and whether it was (only) its limits.
    fn pool_reason(&mut self, l: LevelIx, p: PoolIx) -> (String, bool) {
        let mut fit = PoolFit {
            group: self.group,
            level: l,
            requests: self.requests,
            pools: self.pools,
            interned: self.interned,
            topology: self.topology,
            gone: self.gone,
        };
        match fit.check(p, Depth::Full) {
            Ok(_) => {
                ("no compatible instance type and offering fits with the pod's topology constraints".into(), false)
            }
            Err(why) => (self.pool_words(l, p, &why), why.is_limit()),
        }
    }

    /// `why` NodePool `p` takes no new claim for the pod at level `l`, in words.
    fn pool_words(&self, l: LevelIx, p: PoolIx, why: &Why) -> String {
        let pool = &self.pools[p];
        let total = self.requests;
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
                        if name == ATTACHABLE_VOLUMES_EBS {
                            let (need, have) = (total[ri], pool.table.free.get(best, ri));
                            let best = &pool.table.types[best].name;
                            return format!("attachable EBS volumes (needs {need} volumes, {best} attaches {have})");
                        }
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
            Why::Quota(short) => {
                let q = &self.pools.quotas.inputs[short.quota];
                let left = &self.pools.quotas.all[short.quota];
                match short.resource {
                    Some(ri) => {
                        let name = name(ri);
                        let limit = q.limits.get(name);
                        let used = to_units(name, &limit).saturating_sub(left.remaining[ri]);
                        format!(
                            "CapacityQuota {:?} would exceed {name}: {limit} limit, {} used, needs {}",
                            q.name,
                            from_units(name, used),
                            from_units(name, short.needs)
                        )
                    }
                    None if short.needs > 0 => {
                        let limit = q.limits.get(NODES);
                        let used = limit.value_ceil().saturating_sub(left.nodes_remaining);
                        format!("CapacityQuota {:?} would exceed nodes: {limit} limit, {used} used, needs 1", q.name)
                    }
                    None => format!("CapacityQuota {:?} leaves no room for a new node of the NodePool", q.name),
                }
            }
            Why::MinValues { key, min, have } => {
                format!("minValues {min} for key {key} not met: only {have} values among fitting instance types")
            }
            Why::Spread(i) => {
                let level = &self.group.state.levels[l];
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
