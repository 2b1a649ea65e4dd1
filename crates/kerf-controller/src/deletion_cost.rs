//! `PodDeletionCostManagement`: kerf writes `controller.kubernetes.io/pod-deletion-cost` on the
//! ReplicaSet pods of the nodes it would disrupt first, so that when a Deployment scales down,
//! the ReplicaSet controller (which deletes the lowest-cost pods first) empties those nodes
//! instead of taking a pod here and there, and consolidation then removes empty nodes instead
//! of evicting pods.
//!
//! - Disruption publishes its ranking at each evaluation ([`DeletionRanking`]): the drifted
//!   candidates drift may take, then the consolidation candidates in the order consolidation
//!   tries them; the first [`RANKED_NODES`] are written. Nodes being disrupted or deleted are
//!   read off the cluster here.
//! - Every ReplicaSet pod (not finished, not deleting) on a node being disrupted gets
//!   `i32::MIN`; on the ranked node at position `k`, `k - RANKED_NODES` (so −50 for the first,
//!   −1 for the last, whatever the number of candidates: a node keeps its value while its
//!   position does). Pods of other nodes carry none of kerf's.
//! - kerf marks what it wrote with `kerf.sh/pod-deletion-cost` (the same value). A pod whose
//!   pod-deletion-cost is not kerf's (set by its owner, or changed since) is left alone; a
//!   value kerf wrote is removed when its node is no longer ranked, and from every pod when the
//!   gate is off. The marks are the whole state: a restarted controller reads them back.
//! - A new ranking is written at most once a minute ([`REWRITE_INTERVAL`]), so a busy cluster's
//!   evaluations do not rewrite pods on every pass.

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::SlimPod;
use kerf_api::cluster::{ClusterApi, Object, Patch};
use kerf_api::labels::{MANAGED_DELETION_COST, POD_DELETION_COST};
use kerf_api::{MetaView, pod_facts};
use kerf_cloud::{CloudProvider, Timestamp};
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::marks::is_disrupted;
use crate::published::DeletionRanking;
use crate::util;

/// At most this many nodes are ranked (and their pods written).
pub const RANKED_NODES: usize = 50;

/// A new ranking is written at most this often.
pub const REWRITE_INTERVAL: Duration = Duration::from_secs(60);

/// The value written on the pods of a node being disrupted.
pub const DISRUPTING_COST: i32 = i32::MIN;

/// The value for the pods of each ranked node.
fn ranked_values(ranking: &DeletionRanking) -> impl Iterator<Item = (&str, i32)> {
    ranking.nodes.iter().take(RANKED_NODES).enumerate().map(|(k, n)| (n.as_str(), k as i32 - RANKED_NODES as i32))
}

/// The reconciler: writes the published ranking onto pods (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct DeletionCosts {
    /// What it last wrote completely: when the ranking was written, the ranking, the nodes
    /// being disrupted, and the pods' generation after the writes.
    written: Option<Written>,
    /// The gate is off and no pod carries a mark any more (pods are scanned once for marks to
    /// remove, again only if the gate turns on and off).
    cleared: bool,
}

#[derive(Debug)]
struct Written {
    at: Timestamp,
    ranking: DeletionRanking,
    disrupting: Vec<String>,
    pods: u64,
}

/// A pod-deletion-cost kerf manages on a pod: the value it wrote, if the pod still carries it.
fn managed_value(pod: &SlimPod) -> Option<i32> {
    let a = pod.metadata.annotations()?;
    let mark = a.get(MANAGED_DELETION_COST)?;
    (a.get(POD_DELETION_COST) == Some(mark)).then(|| mark.parse().ok()).flatten()
}

/// Whether the pod carries a pod-deletion-cost that is not kerf's.
fn owner_set(pod: &SlimPod) -> bool {
    pod.metadata.annotations().is_some_and(|a| a.contains_key(POD_DELETION_COST)) && managed_value(pod).is_none()
}

/// A ReplicaSet's pod that may still be scaled down (running or waiting, not going).
fn replica_set_pod(pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp().is_none()
        && !pod_facts::terminal(pod)
        && pod.metadata.owner_references().iter().any(|o| o.kind == "ReplicaSet" && o.controller == Some(true))
}

/// The merge patch that sets (or, with `None`, removes) kerf's pod-deletion-cost.
fn patch(value: Option<i32>) -> Value {
    let v = value.map_or(Value::Null, |v| Value::String(v.to_string()));
    json!({ "metadata": { "annotations": { POD_DELETION_COST: v.clone(), MANAGED_DELETION_COST: v } } })
}

impl DeletionCosts {
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        if !cx.options.pod_deletion_cost_management {
            self.written = None;
            if !self.cleared {
                self.cleared = write(cx, &BTreeMap::new()).await?;
            }
            return Ok(());
        }
        self.cleared = false;
        let ranking = &cx.published.deletion_ranking;
        let disrupting: Vec<String> = cx
            .state
            .nodes()
            .iter()
            .filter(|(_, n)| n.metadata.deletion_timestamp.is_some() || is_disrupted(n))
            .filter(|(_, n)| cx.state.claim_for_node(n).is_some())
            .map(|(name, _)| name.clone())
            .collect();
        let mut ranked_at = cx.pass.now;
        if let Some(w) = &self.written {
            if w.ranking == *ranking {
                if w.disrupting == disrupting && w.pods == cx.state.pod_generation() {
                    return Ok(());
                }
                ranked_at = w.at;
            } else if cx.pass.now < util::after(w.at, REWRITE_INTERVAL) {
                cx.pass.wake_at(util::after(w.at, REWRITE_INTERVAL));
                return Ok(());
            }
        }
        let ranking = ranking.clone();
        let mut want: BTreeMap<String, i32> = ranked_values(&ranking).map(|(n, v)| (n.to_string(), v)).collect();
        for name in &disrupting {
            want.insert(name.clone(), DISRUPTING_COST);
        }
        if write(cx, &want).await? {
            self.written = Some(Written { at: ranked_at, ranking, disrupting, pods: cx.state.pod_generation() });
        }
        Ok(())
    }
}

/// Brings every pod's kerf-managed pod-deletion-cost to `want` (by node; ReplicaSet pods of
/// a node named get its value, every other pod none). Returns whether every write went
/// through (a write that lost a race is retried by the next pass).
async fn write<P: CloudProvider, C: ClusterApi>(
    cx: &mut Ctx<'_, P, C>,
    want: &BTreeMap<String, i32>,
) -> Result<bool, ControllerError> {
    let mut changes: Vec<(String, String, Option<i32>)> = Vec::new();
    for pod in cx.state.pods() {
        let has = managed_value(pod);
        let node = util::pod_node_name(pod);
        let target = if replica_set_pod(pod) { node.and_then(|n| want.get(n)).copied() } else { None };
        if has == target || (target.is_some() && owner_set(pod)) {
            continue;
        }
        let ns = pod.metadata.namespace().unwrap_or("default").to_string();
        changes.push((ns, pod.metadata.name().unwrap_or_default().to_string(), target));
    }
    let mut complete = true;
    for (ns, name, value) in &changes {
        let written = cx.api.patch::<SlimPod>(Some(ns), name, &Patch::Merge(patch(*value))).await;
        match cx.pass.soft("writing pod-deletion-cost", written)? {
            Some(pod) => cx.state.record(pod.into_any()),
            None => complete = false,
        }
    }
    if !changes.is_empty() {
        tracing::debug!(pods = changes.len(), nodes = want.len(), "wrote pod-deletion-cost");
    }
    Ok(complete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(annotations: &[(&str, &str)]) -> SlimPod {
        SlimPod {
            metadata: ObjectMeta {
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            }
            .into(),
            spec: None,
            status: None,
        }
    }

    #[test]
    fn a_value_is_kerfs_only_while_the_pod_carries_what_kerf_marked() {
        let ours = pod(&[(POD_DELETION_COST, "-50"), (MANAGED_DELETION_COST, "-50")]);
        assert_eq!(managed_value(&ours), Some(-50));
        assert!(!owner_set(&ours));
        // The owner changed it since: no longer kerf's, and kerf leaves it alone.
        let changed = pod(&[(POD_DELETION_COST, "100"), (MANAGED_DELETION_COST, "-50")]);
        assert_eq!(managed_value(&changed), None);
        assert!(owner_set(&changed));
        let owners = pod(&[(POD_DELETION_COST, "7")]);
        assert!(owner_set(&owners));
        assert!(!owner_set(&pod(&[])));
    }

    #[test]
    fn ranked_nodes_get_their_position_less_fifty_and_only_fifty_are_ranked() {
        let ranking = DeletionRanking { nodes: (0..60).map(|i| format!("n{i}")).collect() };
        let values: Vec<(&str, i32)> = ranked_values(&ranking).collect();
        assert_eq!(values.len(), RANKED_NODES);
        assert_eq!(values[0], ("n0", -50));
        assert_eq!(values[49], ("n49", -1));
        // A node keeps its value while its position does, however many nodes are ranked.
        let fewer = DeletionRanking { nodes: vec!["n0".into(), "n1".into()] };
        assert_eq!(ranked_values(&fewer).collect::<Vec<_>>(), [("n0", -50), ("n1", -49)]);
    }

    #[test]
    fn the_patch_sets_or_removes_both_annotations_together() {
        assert_eq!(
            patch(Some(-3)),
            json!({"metadata": {"annotations": {POD_DELETION_COST: "-3", MANAGED_DELETION_COST: "-3"}}})
        );
        assert_eq!(
            patch(None),
            json!({"metadata": {"annotations": {POD_DELETION_COST: null, MANAGED_DELETION_COST: null}}})
        );
    }
}
