//! Termination, as Karpenter's node and NodeClaim termination controllers do it.
//!
//! Deleting a NodeClaim deletes its Node; deleting a Node (kerf's finalizer holds it) deletes its
//! NodeClaim. A Node being deleted is tainted `karpenter.sh/disrupted:NoSchedule` so nothing new
//! lands on it, then drained through the Eviction API one priority tier at a time (non-critical
//! pods, non-critical DaemonSet pods, critical pods, critical DaemonSet pods); evictions a
//! PodDisruptionBudget refuses are retried; pods annotated `karpenter.sh/do-not-disrupt` are not
//! evicted while a grace period runs. When the NodeClaim's `terminationGracePeriod` has run
//! out, what is left is deleted without asking. Then the instance is deleted, then the Node's
//! finalizer removed; the NodeClaim's finalizer goes last, once its Node is gone.

use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kerf_api::pod_facts;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kerf_api::NodeClaim;
use kerf_api::SlimPod;
use kerf_cloud::{CloudError, CloudProvider, Timestamp};

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::marks::{has_finalizer, is_drainable, remove_finalizer, with_disrupted_taint};
use crate::pass::{IN_FLIGHT, LAUNCH_RETRY_AFTER};
use crate::patches::{changes, pinned};
use crate::util;
use kerf_api::cluster::{ApiError, ClusterApi, EventRecord, Object};

/// How long before an eviction a PodDisruptionBudget refused is tried again.
pub(crate) const EVICTION_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Pods with `system-cluster-critical` / `system-node-critical` priority are evicted last.
pub(crate) fn is_critical(pod: &SlimPod) -> bool {
    matches!(
        pod.spec.as_ref().and_then(|s| s.priority_class_name.as_deref()),
        Some("system-cluster-critical" | "system-node-critical")
    )
}

/// The eviction tier of a pod: 0 non-critical, 1 non-critical DaemonSet, 2 critical,
/// 3 critical DaemonSet.
fn tier(pod: &SlimPod) -> u8 {
    u8::from(is_critical(pod)) * 2 + u8::from(pod_facts::daemonset_owner(pod).is_some())
}

fn pod_key(pod: &SlimPod) -> (String, String) {
    (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default())
}

/// When a node's remaining pods are deleted without asking: its deletion plus the claim's
/// `terminationGracePeriod`, or the `karpenter.sh/nodeclaim-termination-timestamp` on the claim
/// (node repair sets it), whichever comes first.
fn grace_deadline(node: &Node, claim: Option<&NodeClaim>) -> Option<Timestamp> {
    let claim = claim?;
    let stamped = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(kerf_api::labels::NODECLAIM_TERMINATION_TIMESTAMP))
        .and_then(|t| t.parse::<Timestamp>().ok());
    let since = node.metadata.deletion_timestamp.as_ref()?.0;
    let graceful = claim.spec.termination_grace_period.map(|grace| util::after(since, grace.as_duration()));
    util::earliest(stamped, graceful)
}

enum Drain {
    Done,
    Waiting,
}

/// The node termination reconciler. It keeps nothing: the nodes being deleted and the pods
/// still on them say where each termination stands.
#[derive(Debug, Default)]
pub(crate) struct Termination;

impl Termination {
    /// Nodes being deleted that carry kerf's finalizer: delete their claim, taint, drain, delete
    /// the instance, release the node.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let deleting: Vec<String> = cx
            .state
            .nodes()
            .iter()
            .filter(|(_, n)| n.metadata.deletion_timestamp.is_some() && has_finalizer(&n.metadata))
            .map(|(name, _)| name.clone())
            .collect();
        // Each node on its own: one whose write fails does not hold back the others.
        let mut failed = None;
        for name in deleting {
            if let Err(e) = self.terminate_node(cx, &name).await {
                failed.get_or_insert(e);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// One node being deleted: its claim deleted, tainted, drained, its instance deleted, then
    /// released.
    async fn terminate_node<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        name: &str,
    ) -> Result<(), ControllerError> {
        let Some(node) = cx.state.node(name).cloned() else { return Ok(()) };
        let claim = cx.state.claim_for_node(&node).cloned();
        if let Some(c) = claim.as_ref().filter(|c| c.metadata.deletion_timestamp.is_none()) {
            cx.pass.soft("deleting nodeclaim", cx.api.delete::<NodeClaim>(None, c.name()).await)?;
        }
        // Taints and finalizers are lists the kubelet and other controllers edit too: their
        // writes are pinned to the node as read.
        let tainted = with_disrupted_taint(&node);
        let node = match changes(&node, &tainted)?.map(|p| pinned(&node.metadata, p)) {
            Some(patch) => {
                let written = cx.api.patch::<Node>(None, name, &patch).await;
                let Some(updated) = cx.pass.soft("tainting node", written)? else { return Ok(()) };
                cx.state.record(updated.clone().into_any());
                updated
            }
            None => node,
        };
        if let Drain::Waiting = self.drain(cx, &node, claim.as_ref()).await? {
            return Ok(());
        }
        if let Some(c) = &claim {
            match cx.cloud.delete(c).await {
                Ok(()) | Err(CloudError::NotFound(_)) => {}
                Err(e) => {
                    tracing::error!(Node = %name, error = %e, "failed terminating instance");
                    cx.pass.wake_after(LAUNCH_RETRY_AFTER);
                    return Ok(());
                }
            }
        }
        let mut released = node.clone();
        remove_finalizer(&mut released.metadata);
        let Some(patch) = changes(&node, &released)?.map(|p| pinned(&node.metadata, p)) else { return Ok(()) };
        let gone = cx.api.patch::<Node>(None, name, &patch).await;
        if let Some(gone) = cx.pass.soft("removing node finalizer", gone)? {
            tracing::info!(Node = %name, "deleted node");
            cx.state.forget(&gone.into_any());
        }
        Ok(())
    }

    /// Evicts the lowest tier of drainable pods still on the node; `Done` when none is left.
    async fn drain<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        node: &Node,
        claim: Option<&NodeClaim>,
    ) -> Result<Drain, ControllerError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let pods: Vec<SlimPod> =
            cx.state.pods_on_node(&name).filter(|p| is_drainable(p)).map(|p| SlimPod::clone(p)).collect();
        if pods.is_empty() {
            return Ok(Drain::Done);
        }
        let deadline = grace_deadline(node, claim);
        if let Some(deadline) = deadline
            && cx.pass.now >= deadline
        {
            tracing::info!(Node = %name, pods = pods.len(), "deleting pods: terminationGracePeriod elapsed");
            for pod in &pods {
                let (ns, pod_name) = pod_key(pod);
                match cx.api.delete::<Pod>(Some(&ns), &pod_name).await {
                    Ok(()) | Err(ApiError::NotFound { .. }) => {}
                    Err(e) => {
                        cx.pass.soft("deleting pod", Err::<(), _>(e))?;
                    }
                }
            }
            return Ok(Drain::Waiting);
        }
        // With a grace period, do-not-disrupt pods are left for its end (Karpenter's drain does
        // not evict them); without one they are evicted like the rest.
        let evictable: Vec<&SlimPod> = pods.iter().filter(|p| deadline.is_none() || !util::do_not_disrupt(p)).collect();
        let lowest = evictable.iter().map(|p| tier(p)).min().unwrap_or(0);
        // A few evictions at a time (a round of drift drains hundreds of nodes), answered in
        // the order asked.
        let api = cx.api;
        let evictions = evictable.into_iter().filter(|p| tier(p) == lowest).map(|pod| async move {
            let (ns, pod_name) = pod_key(pod);
            let answer = api.evict(&ns, &pod_name).await;
            (ns, pod_name, answer)
        });
        let answers: Vec<_> = stream::iter(evictions).buffered(IN_FLIGHT).collect().await;
        let mut refused = Vec::new();
        for (ns, pod_name, answer) in answers {
            match answer {
                Ok(()) | Err(ApiError::NotFound { .. }) => {}
                Err(ApiError::TooManyRequests { reason, .. }) => refused.push(format!("{ns}/{pod_name}: {reason}")),
                Err(e) => {
                    cx.pass.soft("evicting pod", Err::<(), _>(e))?;
                }
            }
        }
        if !refused.is_empty() {
            tracing::info!(Node = %name, refused = refused.len(), first = %refused[0], "evictions refused; retrying");
            cx.api
                .record_event(EventRecord {
                    kind: "Node",
                    name: name.clone(),
                    uid: cx.state.uid_of("Node", &name),
                    type_: "Warning",
                    reason: "FailedDraining".to_string(),
                    message: format!(
                        "Failed to drain node, {} pod(s) are waiting to be evicted: {}",
                        refused.len(),
                        refused[0]
                    ),
                })
                .await;
            cx.pass.wake_after(EVICTION_RETRY_AFTER);
        }
        if let Some(deadline) = deadline {
            cx.pass.wake_at(deadline);
        }
        Ok(Drain::Waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use kerf_api::{PodShape, SlimPodSpec};

    fn pod(critical: bool, daemon: bool) -> SlimPod {
        SlimPod {
            metadata: ObjectMeta {
                owner_references: daemon.then(|| {
                    vec![OwnerReference { kind: "DaemonSet".into(), name: "ds".into(), ..Default::default() }]
                }),
                ..Default::default()
            }
            .into(),
            spec: Some(SlimPodSpec::from(PodShape {
                priority_class_name: critical.then(|| "system-node-critical".to_string()),
                ..Default::default()
            })),
            status: None,
        }
    }

    #[test]
    fn eviction_tiers_go_non_critical_then_daemon_then_critical_then_critical_daemon() {
        assert_eq!(
            [tier(&pod(false, false)), tier(&pod(false, true)), tier(&pod(true, false)), tier(&pod(true, true))],
            [0, 1, 2, 3]
        );
    }
}
