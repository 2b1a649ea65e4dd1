//! Static NodePools (`spec.replicas`): how many claims a pool has and wants ([`StaticCount`]),
//! and the claim that adds one ([`static_new_claim`]). The NodePool reconciler keeps the
//! replicas; static drift and disruption's orchestration count them the same way.

use std::sync::Arc;

use kerf_api::{NodeClaim, NodePool, Operator, ResourceList, labels};
use kerf_scheduling::{InstanceType, NewNodeClaim, Requirements};

use crate::marks::is_disrupted;
use crate::state::ClusterState;

/// How many NodeClaims a static pool has, as its reconciler and static drift count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StaticCount {
    /// `spec.replicas`, capped by `limits.nodes`.
    pub want: usize,
    /// Claims that count towards the replicas: not deleting, and not on a node a disruption
    /// is replacing (tainted `karpenter.sh/disrupted`; its replacement counts instead).
    pub live: usize,
    /// Every claim of the pool that still exists, deleting ones included: their instances
    /// still run, so `limits.nodes` counts them.
    pub claims: usize,
    /// `limits.nodes`, if set.
    pub limit: Option<usize>,
}

impl StaticCount {
    /// Claims that may be created now without going over `limits.nodes`.
    pub fn headroom(&self) -> usize {
        self.limit.map_or(usize::MAX, |l| l.saturating_sub(self.claims))
    }
}

/// A claim for a static pool: the pool's requirements and template, any instance type they
/// allow (cheapest available first), no pods. The static reconciler creates these, and static
/// drift stages one as each drifted node's replacement.
pub(crate) fn static_new_claim(pool: &NodePool, types: &[Arc<InstanceType>]) -> NewNodeClaim {
    let mut reqs = Requirements::from_node_selector(&pool.spec.template.spec.requirements);
    reqs.add(labels::NODE_POOL, kerf_scheduling::Requirement::new(Operator::In, &[pool.name()]));
    let mut allowed: Vec<(f64, &Arc<InstanceType>)> = types
        .iter()
        .filter(|t| reqs.iter().all(|(k, r)| t.labels.get(k).is_none_or(|v| r.matches(Some(v)))))
        .filter_map(|t| t.cheapest_available().map(|o| (o.price, t)))
        .collect();
    allowed.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let selector = reqs.to_node_selector();
    let instance_type_min_values = selector.iter().find(|r| r.key == labels::INSTANCE_TYPE).and_then(|r| r.min_values);
    let spec = &pool.spec.template.spec;
    NewNodeClaim {
        node_pool: pool.name().to_string(),
        requirements: selector.into_iter().filter(|r| r.key != labels::INSTANCE_TYPE).collect(),
        instance_types: allowed.into_iter().map(|(_, t)| Arc::clone(t)).collect(),
        instance_type_min_values,
        labels: reqs.single_valued_labels(),
        taints: spec.taints.clone(),
        startup_taints: spec.startup_taints.clone(),
        pods: Vec::new(),
        requests: ResourceList::new(),
    }
}

/// A claim counts towards its static pool's replicas: not deleting, and not on a node a
/// disruption is replacing.
pub(crate) fn counts_toward_replicas(state: &ClusterState, claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none() && !state.node_for_claim(claim).is_some_and(is_disrupted)
}

/// The claim counts of a static pool.
pub(crate) fn static_count(state: &ClusterState, pool: &NodePool) -> StaticCount {
    let limit = pool.node_limit().map(|l| usize::try_from(l.max(0)).unwrap_or(usize::MAX));
    let want = usize::try_from(pool.spec.replicas.unwrap_or(0).max(0)).unwrap_or(usize::MAX);
    let (mut live, mut claims) = (0, 0);
    for c in state.claims_of_pool(pool.name()) {
        claims += 1;
        if counts_toward_replicas(state, c) {
            live += 1;
        }
    }
    StaticCount { want: want.min(limit.unwrap_or(usize::MAX)), live, claims, limit }
}
