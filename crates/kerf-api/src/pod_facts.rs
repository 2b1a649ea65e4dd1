//! What kind of pod a pod is, read the same way by every layer: the scheduler's what-if, the
//! drain, disruption budgets, the simulator and snapshots. Each fact has this one home, so drain
//! and consolidation cannot disagree on which pods move when a node goes.

use crate::slim_pod::PodView;

/// The annotation the kubelet puts on the API copy of a static pod (a mirror pod).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A pod annotation holding an int32 (`controller.kubernetes.io/pod-deletion-cost`,
/// `karpenter.sh/disruption-cost`), if it is set and is one.
pub fn int32_annotation(pod: &(impl PodView + ?Sized), key: &str) -> Option<i32> {
    pod.meta().annotations()?.get(key)?.trim().parse().ok()
}

/// The pod's `controller.kubernetes.io/pod-deletion-cost`: a ReplicaSet's scale-down deletes
/// the pods with the lowest first.
pub fn pod_deletion_cost(pod: &(impl PodView + ?Sized)) -> Option<i32> {
    int32_annotation(pod, crate::labels::POD_DELETION_COST)
}

/// Succeeded or Failed: the pod holds no resources any more and never runs again.
pub fn terminal(pod: &(impl PodView + ?Sized)) -> bool {
    matches!(pod.phase(), Some("Succeeded" | "Failed"))
}

/// A mirror pod: the API copy of a static pod the kubelet runs from a file. It belongs to its
/// node, cannot be evicted, and nothing reschedules it elsewhere. Kubernetes tells one by its
/// `kubernetes.io/config.mirror` annotation.
pub fn mirror(pod: &(impl PodView + ?Sized)) -> bool {
    pod.meta().annotations().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// The DaemonSet that owns the pod, by name (in the pod's namespace), if one does.
pub fn daemonset_owner(pod: &(impl PodView + ?Sized)) -> Option<&str> {
    pod.meta().owner_references().iter().find(|o| o.kind == "DaemonSet").map(|o| o.name.as_str())
}

/// Whether the pod must find room elsewhere when its node goes: it is not a DaemonSet's (the
/// DaemonSet runs one on every node, the new ones included), not a mirror pod (it is the node's
/// own) and not finished.
pub fn rescheduled_when_node_goes(pod: &(impl PodView + ?Sized)) -> bool {
    daemonset_owner(pod).is_none() && !mirror(pod) && !terminal(pod)
}

/// Whether a pod of a node that goes must find room elsewhere: it is not going already, and it
/// is [`rescheduled_when_node_goes`]. The pods a disruption what-if moves, and those whose
/// eviction costs a candidate's disruption cost counts.
pub fn moves_with_node(pod: &(impl PodView + ?Sized)) -> bool {
    pod.meta().deletion_timestamp().is_none() && rescheduled_when_node_goes(pod)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;
    use crate::SlimPod;

    fn pod(phase: &str, owner: Option<&str>, annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                owner_references: owner
                    .map(|kind| vec![OwnerReference { kind: kind.into(), name: "o".into(), ..Default::default() }]),
                annotations: (!annotations.is_empty())
                    .then(|| annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn a_mirror_pod_is_told_by_its_annotation_not_by_an_owner_of_kind_node() {
        let annotated = pod("Running", Some("Node"), &[(MIRROR_ANNOTATION, "abc")]);
        let owned_only = pod("Running", Some("Node"), &[]);
        for (p, is_mirror) in [(&annotated, true), (&owned_only, false)] {
            assert_eq!(mirror(p), is_mirror);
            assert_eq!(mirror(&SlimPod::from(p)), is_mirror, "the slim form reads the same");
            assert_eq!(rescheduled_when_node_goes(p), !is_mirror);
        }
    }

    #[test]
    fn daemonset_pods_and_finished_pods_stay_with_their_node() {
        let ds = pod("Running", Some("DaemonSet"), &[]);
        assert_eq!(daemonset_owner(&ds), Some("o"));
        assert!(!rescheduled_when_node_goes(&ds));
        for phase in ["Succeeded", "Failed"] {
            let done = pod(phase, Some("ReplicaSet"), &[]);
            assert!(terminal(&done));
            assert!(!rescheduled_when_node_goes(&done));
        }
        let web = pod("Running", Some("ReplicaSet"), &[]);
        assert!(!terminal(&web) && daemonset_owner(&web).is_none());
        assert!(rescheduled_when_node_goes(&web));
        assert!(rescheduled_when_node_goes(&SlimPod::from(&web)));
    }

    #[test]
    fn a_pod_already_going_does_not_move_with_its_node() {
        let mut web = pod("Running", Some("ReplicaSet"), &[]);
        assert!(moves_with_node(&web));
        web.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(!moves_with_node(&web));
        assert!(!moves_with_node(&SlimPod::from(&web)));
        assert!(!moves_with_node(&pod("Running", Some("DaemonSet"), &[])));
    }
}
