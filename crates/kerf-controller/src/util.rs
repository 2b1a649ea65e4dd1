//! Small helpers shared by the controllers: time arithmetic, the seeded name generator,
//! conversions between core/v1 and kerf types.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::SlimPod;
use kerf_api::pod_facts;
use kerf_api::{Condition, NodeClaim, Quantity, ResourceList, Taint};
use kerf_cloud::Timestamp;

/// `t + d`, saturating at the end of representable time.
pub fn after(t: Timestamp, d: Duration) -> Timestamp {
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

/// The earlier of two optional wake-ups.
pub fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

pub use kerf_api::seeded::SplitMix64;

/// A core/v1 resource map as a kerf ResourceList; entries that do not parse are skipped
/// (the API server would have rejected them).
pub fn resource_list(map: Option<&BTreeMap<String, KubeQuantity>>) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, v) in map.into_iter().flatten() {
        if let Ok(q) = Quantity::parse(&v.0) {
            out.set(k.clone(), q);
        }
    }
    out
}

/// Node taints in kerf form (unknown effects are dropped: nothing schedules against them).
pub fn node_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| ts.iter().filter_map(Taint::from_core).collect())
        .unwrap_or_default()
}

pub use kerf_scheduling::node::node_ready;

/// An object's label `key`, if set.
pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// The NodePool a NodeClaim belongs to: its `karpenter.sh/nodepool` label.
pub fn claim_pool(claim: &NodeClaim) -> Option<&str> {
    label(&claim.metadata, kerf_api::labels::NODE_POOL)
}

pub fn node_allocatable(node: &Node) -> ResourceList {
    resource_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()))
}

pub fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|p| !p.is_empty())
}

pub fn pod_node_name(pod: &SlimPod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
}

/// `namespace/Kind/name` of the pod's controller (its ReplicaSet, StatefulSet, Job, ...); `None`
/// for a DaemonSet's pod or a pod without one.
pub fn owner_key(pod: &SlimPod) -> Option<String> {
    if pod_facts::daemonset_owner(pod).is_some() {
        return None;
    }
    let owner = pod.metadata.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true))?;
    Some(format!("{}/{}/{}", pod.metadata.namespace.as_deref().unwrap_or_default(), owner.kind, owner.name))
}

pub use kerf_scheduling::pod::nominated_node;

/// The one node a DaemonSet pod may run on: the `metadata.name` its required node affinity
/// names, as the DaemonSet controller pins its pods.
pub fn daemon_node(pod: &SlimPod) -> Option<&str> {
    let terms = pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    let mut names = terms.node_selector_terms.iter().flat_map(|t| t.match_fields.iter().flatten()).filter_map(|f| {
        (f.key == "metadata.name" && f.operator == "In" && f.values.as_ref().is_some_and(|v| v.len() == 1))
            .then(|| f.values.as_ref().and_then(|v| v.first()).map(String::as_str))
            .flatten()
    });
    let first = names.next()?;
    names.all(|n| n == first).then_some(first)
}

/// The pod is annotated `karpenter.sh/do-not-disrupt: "true"`.
pub fn do_not_disrupt(pod: &SlimPod) -> bool {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(kerf_api::labels::DO_NOT_DISRUPT)).is_some_and(|v| v == "true")
}

/// kube-scheduler tried and failed: `PodScheduled=False` with reason `Unschedulable`.
pub fn marked_unschedulable(pod: &SlimPod) -> bool {
    use kerf_api::slim_pod::{ConditionStatus, KeptCondition};
    pod.condition(KeptCondition::PodScheduled)
        .is_some_and(|c| c.status == ConditionStatus::False && c.reason() == Some("Unschedulable"))
}

/// A condition set at `now`.
pub fn condition(type_: &str, status: bool, reason: &str, message: &str, now: Timestamp) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: Some(reason.to_string()),
        message: (!message.is_empty()).then(|| message.to_string()),
        last_transition_time: Some(Time(now)),
        observed_generation: None,
    }
}

/// When a condition last changed, if it is set and true.
pub fn true_since(conditions: &[Condition], type_: &str) -> Option<Timestamp> {
    kerf_api::shared::find_condition(conditions, type_)
        .filter(|c| c.is_true())
        .map(|c| c.last_transition_time.as_ref().map(|t| t.0).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Resources that are not cpu / memory / pods / ephemeral-storage: device plugins register them.
pub fn is_extended_resource(name: &str) -> bool {
    !matches!(
        name,
        kerf_api::resources::CPU
            | kerf_api::resources::MEMORY
            | kerf_api::resources::PODS
            | kerf_api::resources::EPHEMERAL_STORAGE
    )
}

/// `a, b, c, d, e and 7 other(s)`: the first five names of a list, as log lines show them.
pub(crate) fn first_five(names: &[String]) -> String {
    first_five_of(names.iter().cloned(), names.len())
}

/// [`first_five`] of `total` names, only the first five of which are produced.
pub(crate) fn first_five_of(names: impl Iterator<Item = String>, total: usize) -> String {
    let shown = names.take(5).collect::<Vec<_>>().join(", ");
    if total > 5 { format!("{shown} and {} other(s)", total - 5) } else { shown }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_suffixes_are_deterministic_lowercase_alnum() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        let sa: Vec<String> = (0..5).map(|_| a.suffix(5)).collect();
        let sb: Vec<String> = (0..5).map(|_| b.suffix(5)).collect();
        assert_eq!(sa, sb);
        for s in &sa {
            assert_eq!(s.len(), 5);
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()), "{s}");
        }
        let distinct: std::collections::BTreeSet<_> = sa.iter().collect();
        assert_eq!(distinct.len(), 5);
    }
}
