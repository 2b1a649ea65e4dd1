//! CapacityQuotas (docs/design.md, "CapacityQuota"): what the nodes each quota selects hold,
//! for the scheduling core's input ([`inputs`]) and for the quota's `status.used`, which the
//! reconciler ([`CapacityQuotas`]) writes. Both are rebuilt from the cluster on every pass:
//! nothing is kept that a restart would lose.
//!
//! A node counts its NodeClaim's capacity (the capacity NodePool limits count), or its own
//! `status.capacity` when no claim of kerf's holds it; a NodeClaim without a Node yet counts
//! as the node it will become, with its claim labels and its launched (else likely) capacity.
//! `nodes` is the number of such nodes.

use std::collections::BTreeMap;

use kerf_api::capacityquota::{CapacityQuotaStatus, NODES, QuotaResources};
use kerf_api::cluster::{ClusterApi, Object, Patch};
use kerf_api::{CapacityQuota, NodeClaim, Quantity, ResourceList};
use kerf_cloud::CloudProvider;
use kerf_scheduling::QuotaInput;

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::input::claim_labels;
use crate::patches::status_changes;
use crate::state::ClusterState;

/// What the nodes (and NodeClaims without a Node) that `quota` selects hold, every resource,
/// with `nodes` their count. A claim not launched yet counts `fallback(claim)`.
pub fn usage(
    state: &ClusterState,
    quota: &CapacityQuota,
    fallback: impl Fn(&NodeClaim) -> ResourceList,
) -> ResourceList {
    let mut total = ResourceList::new();
    let mut count = 0i64;
    for node in state.nodes().values() {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if !quota.selects(&labels) {
            continue;
        }
        count += 1;
        match state.claim_for_node(node) {
            Some(claim) => total.add(&ClusterState::claim_usage(claim, &fallback)),
            None => total.add(&crate::util::resource_list(node.status.as_ref().and_then(|s| s.capacity.as_ref()))),
        }
    }
    for claim in state.node_claims().values() {
        if state.node_for_claim(claim).is_some() || !quota.selects(&claim_labels(claim)) {
            continue;
        }
        count += 1;
        total.add(&ClusterState::claim_usage(claim, &fallback));
    }
    total.set(NODES, Quantity::from_units(count));
    total
}

/// The live quotas as the scheduling core takes them, each with what it holds now.
pub(crate) fn inputs(state: &ClusterState, fallback: impl Fn(&NodeClaim) -> ResourceList) -> Vec<QuotaInput> {
    state
        .capacity_quotas()
        .values()
        .filter(|q| q.metadata.deletion_timestamp.is_none())
        .map(|q| QuotaInput {
            name: q.name().to_string(),
            selector: q.spec.selector.clone(),
            limits: q.limits().clone(),
            used: usage(state, q, &fallback),
        })
        .collect()
}

/// `used` cut to the resources `quota` limits (each named, zero when nothing holds it).
pub fn used_of_limits(quota: &CapacityQuota, used: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (name, _) in quota.limits().iter() {
        out.set(name.clone(), used.get(name));
    }
    out
}

/// The status reconciler: what is left of nothing between runs but the cluster generation it
/// last wrote for (so an unchanged cluster is not summed again).
#[derive(Default)]
pub(crate) struct CapacityQuotas {
    written_for: Option<u64>,
}

impl CapacityQuotas {
    /// Writes each quota's `status.used` (launched capacity; claims not launched yet count as
    /// a node) and `status.observedGeneration` when they changed.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let generation = cx.state.generation();
        if self.written_for == Some(generation) || cx.state.capacity_quotas().is_empty() {
            return Ok(());
        }
        let mut writes: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for q in cx.state.capacity_quotas().values().filter(|q| q.metadata.deletion_timestamp.is_none()) {
            let used = used_of_limits(q, &usage(cx.state, q, |_| ResourceList::new()));
            let mut status: CapacityQuotaStatus = q.status.clone().unwrap_or_default();
            status.used = Some(QuotaResources { resources: used });
            status.observed_generation = q.metadata.generation;
            if let Some(patch) = status_changes(q.status.as_ref(), &status)? {
                writes.insert(q.name().to_string(), patch);
            }
        }
        let mut complete = true;
        for (name, patch) in writes {
            let written = cx.api.patch_status::<CapacityQuota>(None, &name, &Patch::Merge(patch)).await;
            match cx.pass.soft("writing capacityquota status", written)? {
                Some(written) => cx.state.record(written.into_any()),
                None => complete = false,
            }
        }
        // Recording a write changes the generation: what was written is what it now says.
        self.written_for = complete.then(|| cx.state.generation());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::cluster::{AnyObject, WatchEvent};
    use std::sync::Arc;

    fn node(name: &str, team: &str, cpu: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("1".into()),
                labels: Some([("team".to_string(), team.to_string())].into()),
                ..Default::default()
            },
            spec: None,
            status: Some(NodeStatus {
                capacity: Some([("cpu".to_string(), KQ(cpu.into()))].into()),
                ..Default::default()
            }),
        }
    }

    fn quota(yaml: &str) -> CapacityQuota {
        let v: serde_json::Value = serde_json::from_str(yaml).unwrap();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn usage_sums_the_selected_nodes_and_counts_them() {
        let mut state = ClusterState::default();
        for n in [node("a1", "a", "8"), node("a2", "a", "4"), node("b1", "b", "16")] {
            state.apply(&WatchEvent::Applied(AnyObject::Node(Arc::new(n))));
        }
        let q = quota(
            r#"{"metadata": {"name": "a"}, "spec": {"selector": {"matchLabels": {"team": "a"}}, "limits": {"resources": {"cpu": "64"}}}}"#,
        );
        let used = usage(&state, &q, |_| ResourceList::new());
        assert_eq!(used.get("cpu"), Quantity::from_units(12));
        assert_eq!(used.get(NODES), Quantity::from_units(2));
        assert_eq!(used_of_limits(&q, &used).to_string(), r#"{"cpu":"12"}"#);
        let all = quota(
            r#"{"metadata": {"name": "all"}, "spec": {"limits": {"resources": {"cpu": "64", "nodes": "10", "memory": "1Gi"}}}}"#,
        );
        let used = used_of_limits(&all, &usage(&state, &all, |_| ResourceList::new()));
        assert_eq!(used.get("cpu"), Quantity::from_units(28));
        assert_eq!(used.get(NODES), Quantity::from_units(3));
        assert!(used.get("memory").is_zero());
    }
}
