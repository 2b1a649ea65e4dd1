//! What disrupting a node costs in evicted pods: each pod's eviction cost, from the cost its
//! owner declares, and the node's disruption cost, their sum. Consolidation takes cheaper nodes
//! first, and a Balanced pool weighs a move's savings against it (see `balanced`).
//!
//! - A pod's eviction cost is 1, plus its declared cost / 2^27, plus its priority / 2^25,
//!   clamped to [-10, 10].
//! - The declared cost is `karpenter.sh/disruption-cost` when the pod sets it; otherwise
//!   `controller.kubernetes.io/pod-deletion-cost`, unless kerf writes that annotation itself
//!   (`PodDeletionCostManagement`): then it is kerf's ranking of the nodes, not the owner's word.
//! - A node's disruption cost is 1 plus the positive eviction costs of the pods that would move.

use kerf_api::labels::DISRUPTION_COST;
use kerf_api::{SlimPod, pod_facts};

/// Where a pod's declared cost is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeclaredCost {
    /// `karpenter.sh/disruption-cost`, else `controller.kubernetes.io/pod-deletion-cost`.
    #[default]
    Either,
    /// `karpenter.sh/disruption-cost` only: kerf manages pod-deletion-cost.
    DisruptionCostOnly,
}

impl DeclaredCost {
    /// `PodDeletionCostManagement` on or off.
    pub fn for_gate(managed: bool) -> Self {
        if managed { DeclaredCost::DisruptionCostOnly } else { DeclaredCost::Either }
    }

    fn of(self, pod: &SlimPod) -> Option<f64> {
        let declared = pod_facts::int32_annotation(pod, DISRUPTION_COST).or_else(|| match self {
            DeclaredCost::Either => pod_facts::pod_deletion_cost(pod),
            DeclaredCost::DisruptionCostOnly => None,
        });
        declared.map(f64::from)
    }
}

/// A pod's eviction cost.
pub fn eviction_cost(pod: &SlimPod, declared: DeclaredCost) -> f64 {
    let mut cost = 1.0;
    if let Some(x) = declared.of(pod) {
        cost += x / f64::from(1u32 << 27);
    }
    if let Some(p) = pod.spec.as_ref().and_then(|s| s.priority) {
        cost += f64::from(p) / f64::from(1u32 << 25);
    }
    cost.clamp(-10.0, 10.0)
}

/// A node's disruption cost, from the pods that would move off it.
pub fn node_disruption_cost<'a>(moving: impl IntoIterator<Item = &'a SlimPod>, declared: DeclaredCost) -> f64 {
    1.0 + moving.into_iter().map(|p| eviction_cost(p, declared).max(0.0)).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::labels::POD_DELETION_COST;
    use kerf_api::{PodShape, SlimPodSpec};

    fn annotated(annotations: &[(&str, &str)], priority: Option<i32>) -> SlimPod {
        SlimPod {
            metadata: ObjectMeta {
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            }
            .into(),
            spec: Some(SlimPodSpec::from(PodShape { priority, ..Default::default() })),
            status: None,
        }
    }

    fn pod(deletion_cost: Option<&str>, priority: Option<i32>) -> SlimPod {
        annotated(&deletion_cost.map(|c| (POD_DELETION_COST, c)).into_iter().collect::<Vec<_>>(), priority)
    }

    #[test]
    fn eviction_cost_is_one_raised_by_deletion_cost_and_priority_and_clamped() {
        let cost = |p: &SlimPod| eviction_cost(p, DeclaredCost::Either);
        assert_eq!(cost(&pod(None, None)), 1.0);
        assert_eq!(cost(&pod(Some("134217728"), None)), 2.0);
        assert_eq!(cost(&pod(None, Some(33554432))), 2.0);
        assert_eq!(cost(&pod(Some("2147483647"), Some(1_000_000_000))), 10.0);
        assert_eq!(cost(&pod(Some("-2147483648"), None)), -10.0);
        assert_eq!(cost(&pod(Some("not a number"), None)), 1.0);
        assert_eq!(cost(&pod(Some("1.5"), None)), 1.0, "an int32, as the ReplicaSet controller reads it");
        // Negative costs count for nothing in a node's cost.
        let (a, b) = (pod(Some("-2147483648"), None), pod(None, None));
        assert_eq!(node_disruption_cost([&a, &b], DeclaredCost::Either), 2.0);
    }

    #[test]
    fn disruption_cost_annotation_is_read_before_pod_deletion_cost() {
        let both = annotated(&[(DISRUPTION_COST, "268435456"), (POD_DELETION_COST, "-134217728")], None);
        assert_eq!(eviction_cost(&both, DeclaredCost::Either), 3.0);
        assert_eq!(eviction_cost(&both, DeclaredCost::DisruptionCostOnly), 3.0);
        // A malformed disruption-cost falls back to pod-deletion-cost.
        let bad = annotated(&[(DISRUPTION_COST, "high"), (POD_DELETION_COST, "134217728")], None);
        assert_eq!(eviction_cost(&bad, DeclaredCost::Either), 2.0);
    }

    #[test]
    fn pod_deletion_cost_kerf_manages_is_not_read_as_the_owners_word() {
        let ranked = pod(Some("-2147483648"), None);
        assert_eq!(eviction_cost(&ranked, DeclaredCost::for_gate(true)), 1.0);
        assert_eq!(eviction_cost(&ranked, DeclaredCost::for_gate(false)), -10.0);
    }
}
