//! What the disruption controller takes from watch events: whether an event can change a
//! decision (the watch generation), when a pod last bound to or left each node (consolidateAfter
//! counts from it), and when the workload last shrank.

use k8s_openapi::api::core::v1::Node;
use kerf_api::SlimPod;
use kerf_api::cluster::{AnyObject, WatchEvent};
use kerf_api::{NodePool, labels};
use kerf_cloud::Timestamp;

use super::Disruption;
use crate::state::ClusterState;
use crate::util;

impl Disruption {
    /// Takes in a watch event; `old` is the cluster state before it applies.
    pub(crate) fn observe(&mut self, event: &WatchEvent, old: &ClusterState) {
        if changes_disruption(event, old) {
            self.generation += 1;
        }
        let (WatchEvent::Applied(AnyObject::SlimPod(p)) | WatchEvent::Deleted(AnyObject::SlimPod(p))) = event else {
            return;
        };
        let was = old
            .pod(p.metadata.namespace.as_deref().unwrap_or_default(), p.metadata.name.as_deref().unwrap_or_default());
        let old_node = was.and_then(|o| util::pod_node_name(o)).map(str::to_string);
        let new_node = util::pod_node_name(p).map(str::to_string);
        let leaving = matches!(event, WatchEvent::Deleted(_)) || p.metadata.deletion_timestamp.is_some();
        // A bound pod going away from a node kerf is not disrupting: the workload shrank.
        if leaving
            && was.is_some_and(|o| o.metadata.deletion_timestamp.is_none())
            && let Some(n) = &old_node
            && old
                .node(n)
                .is_some_and(|node| node.metadata.deletion_timestamp.is_none() && !crate::marks::is_disrupted(node))
        {
            self.workload_shrank = true;
        }
        if old_node != new_node || leaving {
            self.pod_event_nodes.extend(old_node.into_iter().chain(new_node));
        }
    }

    /// The pod events seen since the last round are stamped with this round's time.
    pub(crate) fn begin_round(&mut self, now: Timestamp) {
        for node in std::mem::take(&mut self.pod_event_nodes) {
            self.last_pod_event.insert(node, now);
        }
        if std::mem::take(&mut self.workload_shrank) {
            self.workload_shrank_at = Some(now);
        }
    }

    /// Every watch has listed again: decisions are taken afresh.
    pub(crate) fn resynced(&mut self) {
        self.generation += 1;
    }
}

/// Whether `event` can change a disruption decision. Status heartbeats (a Node's condition
/// times, a Pod's container statuses) cannot: a settled cluster whose kubelets report every
/// few seconds is not evaluated again for them.
fn changes_disruption(event: &WatchEvent, old: &ClusterState) -> bool {
    match event {
        WatchEvent::Applied(AnyObject::SlimPod(p)) => {
            let Some(was) = old.pod(
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default(),
            ) else {
                return true;
            };
            fn status(x: &SlimPod) -> (Option<&str>, Option<&str>) {
                x.status.as_ref().map(|s| (s.phase.as_deref(), s.nominated_node_name())).unwrap_or_default()
            }
            was.metadata.deletion_timestamp != p.metadata.deletion_timestamp
                || was.metadata.labels != p.metadata.labels
                || was.metadata.annotations != p.metadata.annotations
                || was.spec != p.spec
                || status(was) != status(p)
                || util::marked_unschedulable(was) != util::marked_unschedulable(p)
        }
        WatchEvent::Applied(AnyObject::Node(n)) => {
            let Some(was) = old.node(n.metadata.name.as_deref().unwrap_or_default()) else {
                return true;
            };
            let allocatable = |x: &Node| x.status.as_ref().and_then(|s| s.allocatable.clone());
            // A condition's status (not its heartbeat) can start node repair's countdown.
            let (old_conditions, new_conditions) = (conditions(was), conditions(n));
            let same_statuses = old_conditions.len() == new_conditions.len()
                && old_conditions.iter().zip(new_conditions).all(|(a, b)| a.type_ == b.type_ && a.status == b.status);
            was.metadata.deletion_timestamp != n.metadata.deletion_timestamp
                || was.metadata.labels != n.metadata.labels
                || was.metadata.annotations != n.metadata.annotations
                || was.spec != n.spec
                || allocatable(was) != allocatable(n)
                || !same_statuses
        }
        // kerf's own record of the consolidations it watches changes no decision.
        WatchEvent::Applied(AnyObject::NodePool(p)) => {
            let Some(was) = old.node_pool(p.name()) else { return true };
            without_watches(was) != without_watches(p)
        }
        _ => true,
    }
}

/// The pool as disruption sees it: without kerf's consolidation watches annotation.
fn without_watches(pool: &NodePool) -> NodePool {
    let mut p = pool.clone();
    if let Some(a) = p.metadata.annotations.as_mut() {
        a.remove(labels::CONSOLIDATION_WATCHES);
    }
    p
}

/// A node's conditions as its status lists them.
fn conditions(node: &Node) -> &[k8s_openapi::api::core::v1::NodeCondition] {
    node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default()
}
