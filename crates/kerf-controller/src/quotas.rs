//! CapacityQuotas (docs/design.md, "CapacityQuota"): what the nodes each quota selects hold,
//! for the scheduling core's input ([`inputs`]) and for the quota's `status.used`, which the
//! reconciler ([`CapacityQuotas`]) writes with upstream's `Reconciled` condition. Both are
//! rebuilt from the cluster on every pass: nothing is kept that a restart would lose.
//!
//! A node counts its NodeClaim's capacity (the capacity NodePool limits count), or its own
//! `status.capacity` when no claim of kerf's holds it; a NodeClaim without a Node yet counts
//! as the node it will become, with its claim labels and its launched (else likely) capacity;
//! before its launch fixes its zone and capacity type, a quota on those counts it when its
//! requirements allow an offering the quota selects.
//! `nodes` is the number of such nodes. A quota that fails validation (one applied where
//! nothing checked it) is not enforced, as Cluster Autoscaler enforces only valid ones; its
//! condition says why.

use std::collections::BTreeMap;

use kerf_api::capacityquota::{CapacityQuotaStatus, NODES, QuotaResources};
use kerf_api::cluster::{ClusterApi, Object, Patch};
use kerf_api::labels::{CAPACITY_TYPE, ZONE};
use kerf_api::requirements::Requirements;
use kerf_api::shared::set_condition;
use kerf_api::{CapacityQuota, NodeClaim, Quantity, ResourceList};
use kerf_cloud::CloudProvider;
use kerf_scheduling::QuotaInput;

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::input::{TypesByPool, claim_labels, likely_capacity};
use crate::patches::status_changes;
use crate::state::ClusterState;

/// Upstream's condition on a quota's status (`autoscaling.x-k8s.io/v1beta1`): whether its
/// status was reconciled.
pub const CONDITION_RECONCILED: &str = "Reconciled";
pub const REASON_RECONCILIATION_SUCCEEDED: &str = "ReconciliationSucceeded";
pub const REASON_RECONCILIATION_FAILED: &str = "ReconciliationFailed";

/// Why `quota` is not enforced: its validation problems, joined (`None`: it is valid).
pub fn invalid(quota: &CapacityQuota) -> Option<String> {
    let problems = kerf_api::capacityquota::validate(quota);
    (!problems.is_empty()).then(|| problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
}

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
        if state.node_for_claim(claim).is_some() {
            continue;
        }
        // Zone and capacity type are known once it launched; before, whatever its requirements
        // allow may be chosen.
        let reqs = Requirements::from_node_selector(&claim.spec.requirements);
        if !quota.may_select(&claim_labels(claim), &[ZONE, CAPACITY_TYPE], |k| reqs.get(k)) {
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
        .filter(|q| q.metadata.deletion_timestamp.is_none() && invalid(q).is_none())
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
    /// Writes each quota's `status.used` (NodeClaims not launched yet count at their likely
    /// type's capacity, as the scheduling core counts them), `status.observedGeneration` and
    /// its `Reconciled` condition, when they changed. An invalid quota gets `Reconciled`
    /// False with its problems and no `used`.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let generation = cx.state.generation();
        if self.written_for == Some(generation) || cx.state.capacity_quotas().is_empty() {
            return Ok(());
        }
        // Instance types only when a claim has no launched capacity to count.
        let launching =
            cx.state.node_claims().values().any(|c| c.status.as_ref().is_none_or(|s| s.capacity.is_empty()));
        let types = if launching { cx.instance_types_by_pool().await } else { TypesByPool::new() };
        let mut writes: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for q in cx.state.capacity_quotas().values().filter(|q| q.metadata.deletion_timestamp.is_none()) {
            let status = status_of(cx.state, q, &types, cx.pass.now);
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

/// The status `quota` should have now.
fn status_of(
    state: &ClusterState,
    quota: &CapacityQuota,
    types: &TypesByPool,
    now: kerf_cloud::Timestamp,
) -> CapacityQuotaStatus {
    let mut status: CapacityQuotaStatus = quota.status.clone().unwrap_or_default();
    status.observed_generation = quota.metadata.generation;
    let mut reconciled = match invalid(quota) {
        Some(problems) => {
            status.used = None;
            crate::util::condition(CONDITION_RECONCILED, false, REASON_RECONCILIATION_FAILED, &problems, now)
        }
        None => {
            let used = used_of_limits(quota, &usage(state, quota, |c| likely_capacity(c, types)));
            status.used = Some(QuotaResources { resources: used });
            crate::util::condition(
                CONDITION_RECONCILED,
                true,
                REASON_RECONCILIATION_SUCCEEDED,
                "CapacityQuota successfully reconciled",
                now,
            )
        }
    };
    reconciled.observed_generation = quota.metadata.generation;
    set_condition(&mut status.conditions, reconciled);
    status
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

    fn launching_claim(name: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "resourceVersion": "1",
                         "labels": {"karpenter.sh/nodepool": "p", "team": "a"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}]}
        }))
        .unwrap()
    }

    fn reconciled(status: &CapacityQuotaStatus) -> (&str, &str, &str) {
        let c = status.conditions.iter().find(|c| c.type_ == CONDITION_RECONCILED).expect("Reconciled");
        (c.status.as_str(), c.reason.as_deref().unwrap_or(""), c.message.as_deref().unwrap_or(""))
    }

    #[test]
    fn status_used_counts_a_launching_claim_at_its_likely_types_capacity() {
        let mut state = ClusterState::default();
        state.apply(&WatchEvent::Applied(AnyObject::Node(Arc::new(node("a1", "a", "8")))));
        state.apply(&WatchEvent::Applied(AnyObject::NodeClaim(Arc::new(launching_claim("p-1")))));
        let q = quota(
            r#"{"metadata": {"name": "a", "generation": 3}, "spec": {"selector": {"matchLabels": {"team": "a"}}, "limits": {"resources": {"cpu": "64", "nodes": "10"}}}}"#,
        );
        let types: TypesByPool =
            [("p".to_string(), vec![Arc::new(crate::testkit::instance_type("m5.xlarge", "4", "16Gi", 0.192))])].into();
        let status = status_of(&state, &q, &types, crate::testkit::t0());
        let used = status.used.as_ref().map(|u| u.resources.clone()).unwrap_or_default();
        assert_eq!(used.get("cpu"), Quantity::from_units(12), "8 launched and 4 launching");
        assert_eq!(used.get(NODES), Quantity::from_units(2));
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(
            reconciled(&status),
            ("True", REASON_RECONCILIATION_SUCCEEDED, "CapacityQuota successfully reconciled")
        );
        assert_eq!(status.conditions[0].observed_generation, Some(3));
    }

    #[test]
    fn an_invalid_quota_is_not_enforced_and_its_condition_names_the_field() {
        let mut state = ClusterState::default();
        let bad = quota(
            r#"{"metadata": {"name": "bad", "resourceVersion": "1"}, "spec": {"selector": {"matchExpressions": [{"key": "team", "operator": "Equals", "values": ["a"]}]}, "limits": {"resources": {"cpu": "64"}}}}"#,
        );
        let status = status_of(&state, &bad, &TypesByPool::new(), crate::testkit::t0());
        assert_eq!(status.used, None);
        assert_eq!(
            reconciled(&status),
            (
                "False",
                REASON_RECONCILIATION_FAILED,
                "spec.selector.matchExpressions[0].operator: unknown operator \"Equals\" (In, NotIn, Exists or DoesNotExist)"
            )
        );
        state.apply(&WatchEvent::Applied(AnyObject::CapacityQuota(Arc::new(bad))));
        assert!(inputs(&state, |_| ResourceList::new()).is_empty(), "not handed to the scheduling core");
    }

    #[test]
    fn a_launching_claim_counts_toward_a_spot_quota_while_it_may_launch_spot() {
        let claim = |name: &str, capacity_types: &[&str]| -> NodeClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "resourceVersion": "1", "labels": {"karpenter.sh/nodepool": "p"}},
                "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                         "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}]}
            }))
            .unwrap()
        };
        let mut state = ClusterState::default();
        state.apply(&WatchEvent::Applied(AnyObject::NodeClaim(Arc::new(claim("either", &["spot", "on-demand"])))));
        state.apply(&WatchEvent::Applied(AnyObject::NodeClaim(Arc::new(claim("od", &["on-demand"])))));
        let q = quota(
            r#"{"metadata": {"name": "spot"}, "spec": {"selector": {"matchLabels": {"karpenter.sh/capacity-type": "spot"}}, "limits": {"resources": {"nodes": "10"}}}}"#,
        );
        assert_eq!(
            usage(&state, &q, |_| ResourceList::new()).get(NODES),
            Quantity::from_units(1),
            "the claim that may be spot"
        );
    }
}
