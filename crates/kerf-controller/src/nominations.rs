//! Where the provisioner expects each pending pod to run, and that expectation written where
//! kube-scheduler reads it.
//!
//! A pod placed on an in-flight NodeClaim is nominated to the claim (it is not provisioned again
//! while the claim launches); a pod placed on an existing node is nominated to that node. Once
//! the nominated node exists, the pod's `status.nominatedNodeName` names it (Kubernetes 1.35,
//! KEP-5278): kube-scheduler tries that node first and keeps the pod's room there against pods
//! of no higher priority, so pods land where kerf planned them instead of where they happen to
//! fit first. When the cloud knows a claim's node name before the node exists
//! ([`CloudProvider::expected_node_name`]: a kwok Node appears, Ready, the moment it is launched),
//! the nomination names it before the claim launches: kube-scheduler keeps nominated pods by node
//! name, so their room is held from the node's first moment. A pending DaemonSet pod is
//! nominated to the one node it may run on, so its room on a new node is held as well. kerf
//! never overwrites a nomination it did not write that names an existing node (kube-scheduler
//! writes its own for preemption), clears only nominations it wrote itself, and a pod bound
//! elsewhere is simply accounted where it runs.
//! After a restart, a pending pod whose nomination names the node of an in-flight claim is
//! nominated to that claim again: the cluster holds everything this module needs.
//!
//! A write goes out once per version of a pod: until the watch delivers a newer version of it
//! (the write's own echo, or kube-scheduler's bind that made it conflict), a pass does not send
//! it again, however far the watch lags. Writes go out a few at a time ([`IN_FLIGHT`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use kerf_api::NodeClaim;
use kerf_api::SlimPod;
use kerf_api::cluster::{ApiError, ClusterApi};
use kerf_api::pod_facts;
use kerf_cloud::{CloudProvider, Timestamp};

use crate::error::ControllerError;
use crate::pass::{IN_FLIGHT, Pass, RETRY_AFTER};
use crate::patches::pinned;
use crate::state::{ClusterState, ObjectKey};
use crate::util;

/// How many grace periods a nomination lasts after its node was initialized while the watch
/// has not yet shown the pod carrying it (the write was refused, or the watch lags far behind).
pub(crate) const UNSEEN_GRACE: u32 = 6;

/// Pods nominated to in-flight NodeClaims (indexed both ways) or to existing nodes.
#[derive(Debug, Default, Clone)]
pub(crate) struct Nominations {
    pub by_pod: BTreeMap<ObjectKey, String>,
    pub by_claim: BTreeMap<String, BTreeSet<ObjectKey>>,
    /// Pods the last provisioning pass placed on existing nodes: pod → node.
    pub on_nodes: BTreeMap<ObjectKey, String>,
    /// The `status.nominatedNodeName` kerf last wrote on each pod.
    written: BTreeMap<ObjectKey, String>,
    /// The resourceVersion each pod had when kerf last sent it a write (answered or refused):
    /// nothing more is sent to the pod until the watch shows it changed.
    sent_at: BTreeMap<ObjectKey, String>,
    /// When the watch first showed each pod nominated to a claim carrying the nomination kerf
    /// wrote: from then on the cache has seen the pod as it was after its node joined, so a bind
    /// that came soon after is seen soon after too (see [`Nominations::expire`]).
    echoed: BTreeMap<ObjectKey, Timestamp>,
    /// Bumped on every change of `by_pod`, so callers can tell whether anything moved.
    pub generation: u64,
}

impl Nominations {
    pub fn insert(&mut self, pod: ObjectKey, claim: &str) {
        self.remove_pod(&pod);
        self.by_claim.entry(claim.to_string()).or_default().insert(pod.clone());
        self.by_pod.insert(pod, claim.to_string());
        self.generation += 1;
    }

    pub fn remove_pod(&mut self, pod: &ObjectKey) {
        self.on_nodes.remove(pod);
        self.echoed.remove(pod);
        if let Some(claim) = self.by_pod.remove(pod) {
            if let Some(pods) = self.by_claim.get_mut(&claim) {
                pods.remove(pod);
                if pods.is_empty() {
                    self.by_claim.remove(&claim);
                }
            }
            self.generation += 1;
        }
    }

    pub fn remove_claim(&mut self, claim: &str) {
        if let Some(pods) = self.by_claim.remove(claim) {
            for pod in pods {
                self.by_pod.remove(&pod);
                self.echoed.remove(&pod);
            }
            self.generation += 1;
        }
    }

    pub fn contains(&self, pod: &ObjectKey) -> bool {
        self.by_pod.contains_key(pod)
    }

    /// Drops nominations to claims that are gone or going, and a pod's nomination once the
    /// claim's node has been initialized for `grace` and the pod is still not bound (it is then
    /// provisioned again). The window starts at the later of the initialization and the moment
    /// the cache first showed the pod carrying the nomination kerf wrote; while it has not shown
    /// it (the write was refused, or the watch lags far behind), [`UNSEEN_GRACE`] windows after
    /// the initialization. Timed from the cache's own view of the pod, a watch that lags behind a
    /// burst of thousands of binds does not make their pods look unbound for good and provisioned
    /// a second time. Pod-side ends are handled as watch events arrive.
    pub fn expire(&mut self, state: &ClusterState, pass: &mut Pass, grace: Duration) {
        let mut expired_claims = Vec::new();
        let mut expired_pods = Vec::new();
        for (claim_name, pods) in &self.by_claim {
            let Some(claim) = state.node_claim(claim_name) else {
                expired_claims.push(claim_name.clone());
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                expired_claims.push(claim_name.clone());
                continue;
            }
            let conditions = claim.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
            let Some(since) = util::true_since(conditions, kerf_api::nodeclaim::CONDITION_INITIALIZED) else {
                continue;
            };
            for key in pods {
                let carried = || {
                    let pod = state.pod(&key.0, &key.1)?;
                    let ours = self.written.get(key)?;
                    (util::nominated_node(pod) == Some(ours.as_str())).then_some(())
                };
                let seen = match self.echoed.get(key) {
                    Some(&t) => Some(t),
                    None if carried().is_some() => {
                        self.echoed.insert(key.clone(), pass.now);
                        Some(pass.now)
                    }
                    None => None,
                };
                let expires = match seen {
                    Some(seen) => util::after(seen.max(since), grace),
                    None => util::after(since, grace * UNSEEN_GRACE),
                };
                if pass.now >= expires {
                    expired_pods.push(key.clone());
                } else {
                    pass.wake_at(expires);
                }
            }
        }
        for claim in expired_claims {
            self.remove_claim(&claim);
        }
        for pod in expired_pods {
            self.remove_pod(&pod);
        }
    }

    /// A pod is gone or bound: nothing of it is left to write.
    pub fn forget_pod(&mut self, pod: &ObjectKey) {
        self.remove_pod(pod);
        self.written.remove(pod);
        self.sent_at.remove(pod);
    }

    /// The node `pod` should be nominated to now, if any: for a pod on an in-flight claim, the
    /// claim's node, or the name the cloud says it will have while it does not exist yet.
    fn target<'s, P: CloudProvider>(
        &'s self,
        cloud: &P,
        state: &'s ClusterState,
        key: &ObjectKey,
        pod: &'s SlimPod,
    ) -> Option<&'s str> {
        if let Some(node) = self.on_nodes.get(key) {
            return Some(node.as_str());
        }
        if let Some(claim) = self.by_pod.get(key) {
            let claim = state.node_claim(claim)?;
            return match state.node_for_claim(claim) {
                Some(node) => node.metadata.name.as_deref(),
                None => cloud.expected_node_name(claim),
            };
        }
        if pod_facts::daemonset_owner(pod).is_some() {
            return util::daemon_node(pod).filter(|n| state.node(n).is_some());
        }
        None
    }

    /// Brings every pending pod's `status.nominatedNodeName` in line with where kerf expects it
    /// to run: written once the node exists, cleared when kerf no longer expects it there (only
    /// values kerf wrote). A nomination found on a pod naming an in-flight claim's node is taken
    /// as kerf's own (a restart).
    pub async fn write<P: CloudProvider, C: ClusterApi>(
        &mut self,
        api: &C,
        cloud: &P,
        state: &ClusterState,
        pass: &mut Pass,
    ) -> Result<(), ControllerError> {
        let mut writes: Vec<(ObjectKey, Option<String>)> = Vec::new();
        let mut adopted = Vec::new();
        // In-flight claims by the name the cloud says their node will have (built when needed).
        let mut expected: Option<BTreeMap<&str, &NodeClaim>> = None;
        for (key, pod) in state.unbound_pods() {
            if pod.metadata.deletion_timestamp.is_some() || pod_facts::terminal(pod) {
                continue;
            }
            let current = util::nominated_node(pod);
            if let Some(claim) = self.adoptable(cloud, state, &mut expected, key, pod) {
                // Already nominated where kerf would write it: nothing to write.
                adopted.push((key.clone(), claim, current.unwrap_or_default().to_string()));
                continue;
            }
            let target = self.target(cloud, state, key, pod);
            if target == current {
                continue;
            }
            // Sent to this very version already: its answer (or the change that refused it) is
            // still on its way through the watch.
            if pod.metadata.resource_version.is_some()
                && self.sent_at.get(key).map(String::as_str) == pod.metadata.resource_version.as_deref()
            {
                continue;
            }
            // kube-scheduler's own nomination (preemption) to a node that exists stands.
            let ours = current.is_some() && self.written.get(key).map(String::as_str) == current;
            if current.is_some_and(|n| state.node(n).is_some()) && !ours {
                continue;
            }
            match target {
                Some(node) => writes.push((key.clone(), Some(node.to_string()))),
                None if ours => {
                    writes.push((key.clone(), None));
                }
                None => {}
            }
        }
        for (key, claim, node) in adopted {
            self.insert(key.clone(), &claim);
            self.written.insert(key, node);
        }
        let unbound = |k: &ObjectKey| state.pod(&k.0, &k.1).is_some_and(|p| util::pod_node_name(p).is_none());
        self.written.retain(|k, _| unbound(k));
        self.sent_at.retain(|k, _| unbound(k));
        let sends = writes.into_iter().filter_map(|(key, node)| {
            let pod = state.pod(&key.0, &key.1)?;
            // Only right for the pod as read (unbound, with the nomination seen): kube-scheduler
            // binds pods and writes nominations too, so the patch is pinned to that version.
            let patch = pinned(&pod.metadata, serde_json::json!({ "status": { "nominatedNodeName": node } }));
            let version = pod.metadata.resource_version.clone();
            Some(async move {
                let answer = api.patch_status::<SlimPod>(Some(&key.0), &key.1, &patch).await;
                (key, node, version, answer)
            })
        });
        let mut answers = stream::iter(sends).buffered(IN_FLIGHT);
        while let Some((key, node, version, answer)) = answers.next().await {
            match answer {
                Ok(_) => match node {
                    Some(n) => {
                        self.written.insert(key.clone(), n);
                    }
                    None => {
                        self.written.remove(&key);
                    }
                },
                // The pod changed or went meanwhile: the next pass sees it as it is now.
                Err(ApiError::Conflict { .. } | ApiError::NotFound { .. }) => pass.wake_after(RETRY_AFTER),
                // A nomination is advice to kube-scheduler: failing to write one (no RBAC for
                // pods/status, an API server that refuses it) must never stop provisioning.
                Err(e) => {
                    tracing::warn!(pod = %format!("{}/{}", key.0, key.1), error = %e, "cannot write nominatedNodeName");
                    pass.wake_after(RETRY_AFTER);
                    break;
                }
            }
            if let Some(v) = version {
                self.sent_at.insert(key, v);
            }
        }
        Ok(())
    }

    /// The in-flight claim a pending pod's nomination names the node of (or the name its node
    /// will have), when kerf has no plan of its own for the pod (an earlier process nominated
    /// it): the pod is nominated to that claim again.
    fn adoptable<'s, P: CloudProvider>(
        &self,
        cloud: &P,
        state: &'s ClusterState,
        expected: &mut Option<BTreeMap<&'s str, &'s NodeClaim>>,
        key: &ObjectKey,
        pod: &SlimPod,
    ) -> Option<String> {
        if self.by_pod.contains_key(key) || self.written.contains_key(key) || pod_facts::daemonset_owner(pod).is_some()
        {
            return None;
        }
        let name = util::nominated_node(pod)?;
        let claim = match state.node(name) {
            Some(node) => state.claim_for_node(node)?,
            None => {
                let by_name = expected.get_or_insert_with(|| {
                    state
                        .node_claims()
                        .values()
                        .map(|c| &**c)
                        .filter(|c| state.node_for_claim(c).is_none())
                        .filter_map(|c| Some((cloud.expected_node_name(c)?, c)))
                        .collect()
                });
                *by_name.get(name)?
            }
        };
        crate::claims::in_flight(claim).then(|| claim.name().to_string())
    }
}
