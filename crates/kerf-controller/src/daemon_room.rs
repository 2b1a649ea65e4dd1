//! Room for the DaemonSet pods of the nodes kerf launched.
//!
//! kerf sizes a node for the pods it plans there plus one pod of every DaemonSet that will run
//! on it, and nominates pending DaemonSet pods to their node so kube-scheduler keeps their room
//! (see `nominations`). A DaemonSet pod is created only once its node exists, though, and in
//! that moment kube-scheduler may bind other pods (ones planned elsewhere, or never planned)
//! into the room kept for it; the DaemonSet pod then stays pending for good, and a node without
//! its log agent or network plugin is a broken node.
//!
//! This reconciler makes the room again, as kube-scheduler's preemption would for a pod of
//! higher priority: when a pending DaemonSet pod pinned to a node kerf launched after the
//! DaemonSet existed has been short of room on it for [`GRACE`] (the node's allocatable minus
//! what its bound pods request, counting pods already leaving as gone), it evicts the fewest
//! of the node's other pods that frees enough — only pods of no higher priority than the
//! DaemonSet pod, never DaemonSet or mirror pods or pods marked `karpenter.sh/do-not-disrupt`,
//! lowest priority first and, among equals, the latest created (the likeliest to have taken the
//! room). Evictions go through the Eviction API, so PodDisruptionBudgets hold; the evicted pods'
//! owners recreate them and provisioning places them. Each room made is an event on the
//! DaemonSet pod and on the node (`DaemonSetRoomMade`) and a record the metrics count; a pod
//! whose room no eviction can make gets one `DaemonSetPodDoesNotFit` warning instead.
//!
//! A DaemonSet created after its node was launched was not planned for; its pods that do not
//! fit stay pending as they would under kube-scheduler alone. The state kept here (when each
//! shortfall was first seen, when room was last made) only delays actions: a restarted
//! controller waits [`GRACE`] once more and then acts on what the cluster shows.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kerf_api::cluster::{ApiError, ClusterApi, EventRecord};
use kerf_api::{MetaView, ResourceList, SlimPod, pod_facts};
use kerf_cloud::{CloudProvider, Timestamp};
use kerf_scheduling::pod_requests;

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::marks::is_disrupted;
use crate::state::ObjectKey;
use crate::util;

/// How long a DaemonSet pod is short of room on its node before room is made.
pub const GRACE: Duration = Duration::from_secs(10);

/// After making room for a pod (or being refused by a budget), how long before trying again.
pub const RETRY: Duration = Duration::from_secs(30);

/// One room made: the pods evicted from a node so a DaemonSet pod fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomRecord {
    pub node: String,
    pub node_pool: String,
    /// `namespace/name` of the DaemonSet pod.
    pub daemon_pod: String,
    /// `namespace/name` of each pod evicted.
    pub evicted: Vec<String>,
}

/// The reconciler (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct DaemonRoom {
    /// When each DaemonSet pod was first seen short of room.
    short_since: BTreeMap<ObjectKey, Timestamp>,
    /// When room was last made (or refused) for each DaemonSet pod.
    acted_at: BTreeMap<ObjectKey, Timestamp>,
    /// DaemonSet pods already warned that no eviction makes room.
    warned: BTreeSet<ObjectKey>,
    /// Every room made, in order.
    pub(crate) records: Vec<RoomRecord>,
}

/// The pod's key as the cluster state keys it.
fn key_of(pod: &SlimPod) -> ObjectKey {
    let (namespace, name) = crate::pod_set::key(pod);
    (namespace.to_string(), name.to_string())
}

fn shown(key: &ObjectKey) -> String {
    format!("{}/{}", key.0, key.1)
}

fn priority(pod: &SlimPod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// A pod that holds room on its node and may be evicted to make room for a DaemonSet pod of
/// priority `than`.
fn evictable(pod: &SlimPod, than: i32) -> bool {
    pod_facts::daemonset_owner(pod).is_none()
        && !pod_facts::mirror(pod)
        && !util::do_not_disrupt(pod)
        && priority(pod) <= than
}

/// What the node has left for a pod: allocatable minus the requests of the pods bound to it
/// that stay (pods finished or being deleted are counted as gone).
fn free_room(allocatable: &ResourceList, bound: &[&Arc<SlimPod>]) -> ResourceList {
    let mut free = allocatable.clone();
    for pod in bound.iter().filter(|p| p.metadata.deletion_timestamp().is_none()) {
        free.sub(&pod_requests(pod));
    }
    free
}

/// The fewest pods, in eviction order, whose requests added to `free` let `wanted` fit; `None`
/// when even all of them do not.
fn victims<'a>(
    wanted: &ResourceList,
    free: &ResourceList,
    candidates: &[&'a Arc<SlimPod>],
) -> Option<Vec<&'a Arc<SlimPod>>> {
    let mut order: Vec<&Arc<SlimPod>> = candidates.to_vec();
    order.sort_by(|a, b| {
        priority(a)
            .cmp(&priority(b))
            .then_with(|| b.metadata.creation_timestamp().cmp(&a.metadata.creation_timestamp()))
            .then_with(|| key_of(a).cmp(&key_of(b)))
    });
    let mut room = free.clone();
    let mut chosen = Vec::new();
    for pod in order {
        if wanted.fits(&room) {
            break;
        }
        let requests = pod_requests(pod);
        // Only a pod that gives back some of what is short helps.
        let short: Vec<String> = wanted.shortfalls(&room).into_iter().map(|s| s.resource).collect();
        if !short.iter().any(|r| requests.get(r).as_f64() > 0.0) {
            continue;
        }
        room.add(&requests);
        chosen.push(pod);
    }
    wanted.fits(&room).then_some(chosen)
}

/// A pending DaemonSet pod pinned to a node kerf launched after its DaemonSet, and short of
/// room there: (pod, node, node pool, what is short).
struct Short {
    pod: Arc<SlimPod>,
    node: String,
    node_pool: String,
    free: ResourceList,
}

impl DaemonRoom {
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let now = cx.pass.now;
        let short = shortages(cx);
        let keys: BTreeSet<ObjectKey> = short.iter().map(|s| key_of(&s.pod)).collect();
        self.short_since.retain(|k, _| keys.contains(k));
        self.acted_at.retain(|k, at| keys.contains(k) && now < util::after(*at, RETRY));
        self.warned.retain(|k| keys.contains(k));
        for s in short {
            let key = key_of(&s.pod);
            let since = *self.short_since.entry(key.clone()).or_insert(now);
            let due = util::after(since, GRACE);
            if now < due {
                cx.pass.wake_at(due);
                continue;
            }
            if let Some(at) = self.acted_at.get(&key) {
                cx.pass.wake_at(util::after(*at, RETRY));
                continue;
            }
            self.make_room(cx, s, key).await?;
        }
        Ok(())
    }

    async fn make_room<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        s: Short,
        key: ObjectKey,
    ) -> Result<(), ControllerError> {
        let wanted = pod_requests(&s.pod);
        let than = priority(&s.pod);
        let bound: Vec<&Arc<SlimPod>> = cx.state.pods_on_node(&s.node).collect();
        let candidates: Vec<&Arc<SlimPod>> = bound
            .iter()
            .copied()
            .filter(|p| p.metadata.deletion_timestamp().is_none() && !pod_facts::terminal(p.as_ref()))
            .filter(|p| evictable(p, than))
            .collect();
        let Some(chosen) = victims(&wanted, &s.free, &candidates) else {
            if self.warned.insert(key.clone()) {
                let short: Vec<String> = wanted.shortfalls(&s.free).into_iter().map(|f| f.resource).collect();
                let message = format!(
                    "DaemonSet pod {} does not fit on node {}: short of {}, and evicting every pod of no higher priority (priority {than}) would not free enough",
                    shown(&key),
                    s.node,
                    short.join(", ")
                );
                tracing::info!(pod = %shown(&key), node = %s.node, "{message}");
                record(cx, "Pod", shown(&key), "Warning", "DaemonSetPodDoesNotFit", &message).await;
            }
            return Ok(());
        };
        let chosen: Vec<ObjectKey> = chosen.iter().map(|p| key_of(p)).collect();
        let mut evicted = Vec::new();
        let mut refused = Vec::new();
        for (ns, name) in &chosen {
            match cx.api.evict(ns, name).await {
                Ok(()) => evicted.push(format!("{ns}/{name}")),
                Err(ApiError::NotFound { .. }) => {}
                Err(ApiError::TooManyRequests { reason, .. }) => refused.push(format!("{ns}/{name}: {reason}")),
                Err(e) => {
                    cx.pass.soft("evicting a pod to make room for a DaemonSet pod", Err::<(), _>(e))?;
                }
            }
        }
        self.acted_at.insert(key.clone(), cx.pass.now);
        cx.pass.wake_after(RETRY);
        if !refused.is_empty() {
            let message = format!(
                "Cannot make room for DaemonSet pod {} on node {} yet: {} eviction(s) refused ({})",
                shown(&key),
                s.node,
                refused.len(),
                refused[0]
            );
            record(cx, "Pod", shown(&key), "Warning", "DaemonSetRoomBlocked", &message).await;
        }
        if evicted.is_empty() {
            return Ok(());
        }
        let message = format!(
            "Evicted {} from node {} so DaemonSet pod {} fits: the room kerf kept for it was taken by pods it did not plan there",
            evicted.join(", "),
            s.node,
            shown(&key)
        );
        tracing::info!(pod = %shown(&key), node = %s.node, evicted = evicted.len(), "made room for a DaemonSet pod");
        record(cx, "Pod", shown(&key), "Normal", "DaemonSetRoomMade", &message).await;
        record(cx, "Node", s.node.clone(), "Normal", "DaemonSetRoomMade", &message).await;
        cx.pass.progressed = true;
        self.records.push(RoomRecord { node: s.node, node_pool: s.node_pool, daemon_pod: shown(&key), evicted });
        Ok(())
    }
}

async fn record<P: CloudProvider, C: ClusterApi>(
    cx: &mut Ctx<'_, P, C>,
    kind: &'static str,
    name: String,
    type_: &'static str,
    reason: &str,
    message: &str,
) {
    let uid = match kind {
        "Pod" => name.split_once('/').and_then(|(ns, n)| cx.state.pod_uid(&(ns.to_string(), n.to_string()))),
        _ => cx.state.uid_of(kind, &name),
    };
    cx.api
        .record_event(EventRecord { kind, name, uid, type_, reason: reason.to_string(), message: message.to_string() })
        .await;
}

/// Every pending DaemonSet pod short of room on a node kerf launched after its DaemonSet.
fn shortages<P: CloudProvider, C: ClusterApi>(cx: &Ctx<'_, P, C>) -> Vec<Short> {
    let state = &*cx.state;
    let mut out = Vec::new();
    for (_, pod) in state.unbound_pods() {
        let Some(set) = pod_facts::daemonset_owner(pod.as_ref()) else { continue };
        if pod.metadata.deletion_timestamp().is_some() || pod_facts::terminal(pod.as_ref()) {
            continue;
        }
        let Some(node_name) = util::daemon_node(pod) else { continue };
        let Some(node) = state.node(node_name) else { continue };
        if node.metadata.deletion_timestamp.is_some() || is_disrupted(node) {
            continue;
        }
        let Some(claim) = state.claim_for_node(node) else { continue };
        let Some(daemon_set) = state.daemonsets().get(&(key_of(pod).0, set.to_string())) else { continue };
        // Planned for only if the DaemonSet existed when the claim was made.
        let planned = match (&daemon_set.metadata.creation_timestamp, &claim.metadata.creation_timestamp) {
            (Some(set_at), Some(claim_at)) => set_at.0 <= claim_at.0,
            _ => true,
        };
        if !planned {
            continue;
        }
        let bound: Vec<&Arc<SlimPod>> = state.pods_on_node(node_name).collect();
        let free = free_room(&util::node_allocatable(node), &bound);
        if pod_requests(pod).fits(&free) {
            continue;
        }
        out.push(Short {
            pod: Arc::clone(pod),
            node: node_name.to_string(),
            node_pool: util::claim_pool(claim).unwrap_or_default().to_string(),
            free,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kerf_api::Quantity;

    fn pod(name: &str, cpu_milli: i64, priority: i32, created: i64) -> Arc<SlimPod> {
        let spec = PodSpec {
            priority: Some(priority),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), KubeQuantity(format!("{cpu_milli}m")))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let meta = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            creation_timestamp: Some(Time(
                kerf_cloud::Timestamp::from_second(1_700_000_000 + created).unwrap_or_default(),
            )),
            ..Default::default()
        };
        Arc::new(SlimPod::from(&k8s_openapi::api::core::v1::Pod { metadata: meta, spec: Some(spec), status: None }))
    }

    fn cpu(milli: i64) -> ResourceList {
        ResourceList::new().with("cpu", Quantity::from_milli(milli)).with("pods", Quantity::from_units(10))
    }

    #[test]
    fn the_fewest_latest_lowest_priority_pods_that_free_enough_are_chosen() {
        let (old, new, newer, high) =
            (pod("old", 500, 0, 1), pod("new", 500, 0, 2), pod("newer", 100, 0, 3), pod("high", 2000, 10, 4));
        let all = [&old, &new, &newer, &high];
        // 150m short: the newest pod frees only 100m, so the next newest joins it.
        let chosen = victims(&pod("agent", 250, 0, 0).requests_list(), &cpu(100), &all).unwrap_or_default();
        let names: Vec<&str> = chosen.iter().map(|p| p.metadata.name().unwrap_or_default()).collect();
        assert_eq!(names, ["newer", "new"]);
        // Pods of higher priority than the DaemonSet pod are never candidates.
        assert!(!evictable(&high, 0) && evictable(&high, 10));
        // Not enough even with every candidate: none chosen.
        assert!(victims(&cpu(5000), &cpu(0), &[&old, &new]).is_none());
    }

    trait Requests {
        fn requests_list(&self) -> ResourceList;
    }

    impl Requests for Arc<SlimPod> {
        fn requests_list(&self) -> ResourceList {
            pod_requests(self)
        }
    }
}
