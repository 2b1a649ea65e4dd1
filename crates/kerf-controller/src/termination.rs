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

/// What a drain asks of the API for one pod.
#[derive(Clone, Copy, PartialEq)]
enum Ask {
    Evict,
    /// The grace period is over: deleted without asking.
    Delete,
}

/// One node being deleted, as this pass carries it on.
struct Terminating {
    name: String,
    /// The node as read (or as the taint left it).
    node: Node,
    claim: Option<NodeClaim>,
    /// Still going on in this pass (no write of it failed or has to be retried first).
    going: bool,
    /// Its drain is done: no drainable pod left.
    drained: bool,
}

/// The node termination reconciler. It keeps nothing: the nodes being deleted and the pods
/// still on them say where each termination stands.
///
/// Every node being deleted goes through each step of a pass together (claims deleted, nodes
/// tainted, pods evicted, instances deleted, nodes released), each step's writes `IN_FLIGHT` at
/// once: a round of drift deletes hundreds of nodes at a time, and one node after another would
/// make the last wait for every write of all the others. Answers are read in the order the
/// nodes are named, so what a pass records does not depend on which answer came first.
#[derive(Debug, Default)]
pub(crate) struct Termination;

impl Termination {
    /// Nodes being deleted that carry kerf's finalizer: delete their claim, taint, drain, delete
    /// the instance, release the node. A node whose write fails does not hold back the others;
    /// the first failure is returned.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let mut nodes: Vec<Terminating> = cx
            .state
            .nodes()
            .iter()
            .filter(|(_, n)| n.metadata.deletion_timestamp.is_some() && has_finalizer(&n.metadata))
            .map(|(name, n)| Terminating {
                name: name.clone(),
                node: Node::clone(n),
                claim: cx.state.claim_for_node(n).cloned(),
                going: true,
                drained: false,
            })
            .collect();
        if nodes.is_empty() {
            return Ok(());
        }
        let mut failed = None;
        let api = cx.api;

        // Their claims deleted.
        let claims: Vec<(usize, String)> = (nodes.iter().enumerate())
            .filter_map(|(i, t)| Some((i, t.claim.as_ref()?)))
            .filter(|(_, c)| c.metadata.deletion_timestamp.is_none())
            .map(|(i, c)| (i, c.name().to_string()))
            .collect();
        let answers = in_order(claims, |name| async move { api.delete::<NodeClaim>(None, &name).await }).await;
        for (i, answer) in answers {
            note(&mut nodes[i], &mut failed, cx.pass.soft("deleting nodeclaim", answer).map(|_| ()));
        }

        // Tainted. Taints and finalizers are lists the kubelet and other controllers edit too:
        // their writes are pinned to the node as read.
        let mut taints = Vec::new();
        for (i, t) in nodes.iter_mut().enumerate().filter(|(_, t)| t.going) {
            match changes(&t.node, &with_disrupted_taint(&t.node)) {
                Ok(patch) => taints.extend(patch.map(|p| (i, (t.name.clone(), pinned(&t.node.metadata, p))))),
                Err(e) => note(t, &mut failed, Err(e)),
            }
        }
        let answers =
            in_order(taints, |(name, patch)| async move { api.patch::<Node>(None, &name, &patch).await }).await;
        for (i, answer) in answers {
            match cx.pass.soft("tainting node", answer) {
                Ok(Some(updated)) => {
                    cx.state.record(updated.clone().into_any());
                    nodes[i].node = updated;
                }
                Ok(None) => nodes[i].going = false,
                Err(e) => note(&mut nodes[i], &mut failed, Err(e)),
            }
        }

        // Drained: the lowest tier of each node's drainable pods evicted (or, once its grace
        // period is over, every one deleted).
        let mut asks: Vec<(usize, (Ask, String, String))> = Vec::new();
        for (i, t) in nodes.iter_mut().enumerate().filter(|(_, t)| t.going) {
            let (ask, pods) = drain_plan(cx, t);
            asks.extend(pods.into_iter().map(|(ns, pod)| (i, (ask, ns, pod))));
        }
        let answers = in_order(asks, |(ask, ns, pod)| async move {
            let answer = match ask {
                Ask::Evict => api.evict(&ns, &pod).await,
                Ask::Delete => api.delete::<Pod>(Some(&ns), &pod).await,
            };
            (ask, ns, pod, answer)
        })
        .await;
        let mut refused: Vec<(usize, Vec<String>)> = Vec::new();
        for (i, (ask, ns, pod, answer)) in answers {
            match answer {
                Ok(()) | Err(ApiError::NotFound { .. }) => {}
                Err(ApiError::TooManyRequests { reason, .. }) => match refused.last_mut() {
                    Some((j, list)) if *j == i => list.push(format!("{ns}/{pod}: {reason}")),
                    _ => refused.push((i, vec![format!("{ns}/{pod}: {reason}")])),
                },
                Err(e) => {
                    let what = if ask == Ask::Delete { "deleting pod" } else { "evicting pod" };
                    note(&mut nodes[i], &mut failed, cx.pass.soft(what, Err::<(), _>(e)).map(|_| ()));
                }
            }
        }
        for (i, refused) in refused {
            let name = nodes[i].name.clone();
            tracing::info!(Node = %name, refused = refused.len(), first = %refused[0], "evictions refused; retrying");
            cx.api
                .record_event(EventRecord {
                    kind: "Node",
                    uid: cx.state.uid_of("Node", &name),
                    name,
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

        // Drained nodes: their instances deleted, then released.
        let done: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].going && nodes[i].drained).collect();
        let instances: Vec<(usize, NodeClaim)> =
            done.iter().filter_map(|&i| Some((i, nodes[i].claim.clone()?))).collect();
        let cloud = cx.cloud;
        let answers = in_order(instances, |c| async move { cloud.delete(&c).await }).await;
        for (i, answer) in answers {
            match answer {
                Ok(()) | Err(CloudError::NotFound(_)) => {}
                Err(e) => {
                    tracing::error!(Node = %nodes[i].name, error = %e, "failed terminating instance");
                    cx.pass.wake_after(LAUNCH_RETRY_AFTER);
                    nodes[i].going = false;
                }
            }
        }
        let mut releases = Vec::new();
        for &i in &done {
            let t = &nodes[i];
            if !t.going {
                continue;
            }
            let mut released = t.node.clone();
            remove_finalizer(&mut released.metadata);
            match changes(&t.node, &released) {
                Ok(patch) => releases.extend(patch.map(|p| (i, (t.name.clone(), pinned(&t.node.metadata, p))))),
                Err(e) => note(&mut nodes[i], &mut failed, Err(e)),
            }
        }
        let answers =
            in_order(releases, |(name, patch)| async move { api.patch::<Node>(None, &name, &patch).await }).await;
        for (i, answer) in answers {
            match cx.pass.soft("removing node finalizer", answer) {
                Ok(Some(gone)) => {
                    tracing::info!(Node = %nodes[i].name, "deleted node");
                    cx.state.forget(&gone.into_any());
                }
                Ok(None) => {}
                Err(e) => note(&mut nodes[i], &mut failed, Err(e)),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// Records the outcome of a write for node `t`: a failure stops the node for this pass (and
/// the first one is what the pass returns).
fn note(t: &mut Terminating, failed: &mut Option<ControllerError>, r: Result<(), ControllerError>) {
    if let Err(e) = r {
        t.going = false;
        failed.get_or_insert(e);
    }
}

/// `calls` made `IN_FLIGHT` at once, each answer with what it was made for (`usize`: the
/// node's place), in the order given.
async fn in_order<T, R, F, Fut>(calls: Vec<(usize, T)>, call: F) -> Vec<(usize, R)>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = R>,
{
    let call = &call;
    stream::iter(calls).map(|(i, t)| async move { (i, call(t).await) }).buffered(IN_FLIGHT).collect().await
}

/// What draining node `t` asks this pass, by pod `(namespace, name)`: its lowest tier of
/// drainable pods evicted, or (its grace period over) all of them deleted. Marks the node
/// drained when none is left, and asks to be woken when its grace period ends.
fn drain_plan<P: CloudProvider, C: ClusterApi>(
    cx: &mut Ctx<'_, P, C>,
    t: &mut Terminating,
) -> (Ask, Vec<(String, String)>) {
    let pods: Vec<&SlimPod> = cx.state.pods_on_node(&t.name).filter(|p| is_drainable(p)).map(|p| &**p).collect();
    if pods.is_empty() {
        t.drained = true;
        return (Ask::Evict, Vec::new());
    }
    let deadline = grace_deadline(&t.node, t.claim.as_ref());
    if let Some(deadline) = deadline
        && cx.pass.now >= deadline
    {
        tracing::info!(Node = %t.name, pods = pods.len(), "deleting pods: terminationGracePeriod elapsed");
        return (Ask::Delete, pods.into_iter().map(pod_key).collect());
    }
    // With a grace period, do-not-disrupt pods are left for its end (Karpenter's drain does
    // not evict them); without one they are evicted like the rest.
    let evictable: Vec<&SlimPod> =
        pods.into_iter().filter(|p| deadline.is_none() || !util::do_not_disrupt(p)).collect();
    let lowest = evictable.iter().map(|p| tier(p)).min().unwrap_or(0);
    if let Some(deadline) = deadline {
        cx.pass.wake_at(deadline);
    }
    (Ask::Evict, evictable.into_iter().filter(|p| tier(p) == lowest).map(pod_key).collect())
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
