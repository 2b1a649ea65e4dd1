//! The marks kerf puts on the objects it manages, and what they mean: the
//! `karpenter.sh/disrupted:NoSchedule` taint on a node being disrupted or deleted (and which pods
//! draining must therefore move), the termination finalizer on Nodes and NodeClaims, and the
//! reboot node repair records on a NodeClaim. Termination, disruption (its candidates and node
//! repair), static pools and the lifecycle all read them; this is their one home.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::{NodeClaim, SlimPod, Taint, TaintEffect, labels, pod_facts};
use kerf_cloud::Timestamp;
use std::time::Duration;

use crate::util;

/// The taint every node being disrupted or deleted carries (built once: every disruption
/// pass asks each pod on every node whether it tolerates it).
pub(crate) fn disrupted_taint() -> &'static Taint {
    static DISRUPTED: std::sync::LazyLock<Taint> =
        std::sync::LazyLock::new(|| Taint::new(labels::DISRUPTED_TAINT_KEY, None, TaintEffect::NoSchedule));
    &DISRUPTED
}

/// Whether the node carries the `karpenter.sh/disrupted` taint.
pub(crate) fn is_disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY))
}

/// The node with the disrupted taint added (unchanged when it has it).
pub(crate) fn with_disrupted_taint(node: &Node) -> Node {
    let mut node = node.clone();
    if !is_disrupted(&node) {
        node.spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(disrupted_taint().to_core());
    }
    node
}

/// The node without the disrupted taint.
pub(crate) fn without_disrupted_taint(node: &Node) -> Node {
    let mut node = node.clone();
    if let Some(ts) = node.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        ts.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
    }
    node
}

/// Whether draining must remove the pod: it holds resources, is not already going, is not the
/// node's own, and would not simply schedule back onto the node (it does not tolerate the
/// disrupted taint).
pub(crate) fn is_drainable(pod: &SlimPod) -> bool {
    !pod_facts::terminal(pod)
        && pod.metadata.deletion_timestamp.is_none()
        && !pod_facts::mirror(pod)
        && !kerf_scheduling::pod::tolerations(pod).iter().any(|t| kerf_scheduling::pod::tolerates(t, disrupted_taint()))
}

/// Whether the object carries kerf's termination finalizer.
pub(crate) fn has_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == labels::TERMINATION_FINALIZER)
}

pub(crate) fn add_finalizer(meta: &mut ObjectMeta) {
    let fs = meta.finalizers.get_or_insert_with(Vec::new);
    if !fs.iter().any(|f| f == labels::TERMINATION_FINALIZER) {
        fs.push(labels::TERMINATION_FINALIZER.to_string());
    }
}

pub(crate) fn remove_finalizer(meta: &mut ObjectMeta) {
    if let Some(fs) = meta.finalizers.as_mut() {
        fs.retain(|f| f != labels::TERMINATION_FINALIZER);
    }
}

/// How long after a reboot a node that has not reported Ready since still counts as rebooting
/// (Karpenter's reboot observation window).
pub const REBOOT_WINDOW: Duration = Duration::from_secs(20 * 60);

/// When node repair rebooted the claim's instance, if it did.
pub(crate) fn rebooted_at(claim: &NodeClaim) -> Option<Timestamp> {
    claim.metadata.annotations.as_ref()?.get(labels::REBOOTED_AT)?.parse().ok()
}

/// Whether the claim's node is in a reboot: rebooted less than [`REBOOT_WINDOW`] ago and not
/// Ready since.
pub(crate) fn rebooting(claim: &NodeClaim, node: &Node, now: Timestamp) -> bool {
    let Some(at) = rebooted_at(claim) else { return false };
    let back = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True" && c.last_transition_time.as_ref().is_some_and(|t| t.0 >= at));
    !back && now < util::after(at, REBOOT_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Toleration;
    use kerf_api::SlimPodSpec;

    fn daemon_pod() -> SlimPod {
        SlimPod {
            metadata: ObjectMeta {
                owner_references: Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    kind: "DaemonSet".into(),
                    name: "ds".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }
            .into(),
            spec: Some(SlimPodSpec::default()),
            status: None,
        }
    }

    #[test]
    fn pods_tolerating_the_disrupted_taint_are_not_drained() {
        let mut tolerant = daemon_pod();
        if let Some(spec) = tolerant.spec.as_mut() {
            spec.tolerations = Some(vec![Toleration { operator: Some("Exists".into()), ..Default::default() }]);
        }
        assert!(!is_drainable(&tolerant));
        assert!(is_drainable(&daemon_pod()));
    }
}
