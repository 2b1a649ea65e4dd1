//! Interruption notices from the simulated cloud ([`SimProvider::notify`]) reaching the
//! controllers: a rebalance recommendation is recorded and the node keeps running; a spot
//! interruption drains the node and deletes its claim and instance.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_api::{NodeClaim, Operator, labels};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{InterruptionKind, ManualClock};

use crate::testkit::*;

/// A harness over the simulated cloud, a spot instance launched for claim `default-aaaaa`,
/// its node `n1` registered and initialized, and pod `p1` running on it. Returns the
/// instance's provider ID.
fn spot_node_running_a_pod() -> (Harness<Arc<SimProvider>>, ManualClock, String) {
    let clock = ManualClock::new();
    let sim = SimProvider::new(SimConfig::default(), Arc::new(clock.clone())).unwrap();
    let mut h = Harness::with_cloud(Arc::new(sim));
    h.api.put(node_pool("default"));
    let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-aaaaa", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [], "resources": {"requests": {"cpu": "1"}}}
    }))
    .unwrap();
    std::sync::Arc::make_mut(&mut claim.spec).requirements = vec![
        requirement(labels::CAPACITY_TYPE, Operator::In, &["spot"]),
        requirement(labels::INSTANCE_TYPE, Operator::In, &["m5.large"]),
    ];
    h.api.put(claim);
    h.settle();
    let pid = h.cloud.instances()[0].provider_id.clone();
    assert_eq!(h.cloud.instances()[0].capacity_type, "spot");
    kubelet_joins(&h.api, "default-aaaaa", "n1", true);
    h.api.put(pending_pod("p1", "1"));
    bind(&h.api, "p1", "n1");
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(kerf_api::nodeclaim::CONDITION_INITIALIZED));
    (h, clock, pid)
}

fn advance(h: &mut Harness<Arc<SimProvider>>, clock: &ManualClock, by: Duration) {
    clock.advance(by);
    h.advance(by);
}

fn disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
}

#[test]
fn a_rebalance_recommendation_only_records_an_event_and_the_node_keeps_running() {
    let (mut h, clock, pid) = spot_node_running_a_pod();
    h.cloud.notify(&pid, InterruptionKind::RebalanceRecommendation).unwrap();
    advance(&mut h, &clock, Duration::from_secs(1));
    let events = h.events("SpotRebalanceRecommendation");
    assert_eq!(events.len(), 1, "{:?}", h.api.recorded());
    assert_eq!(events[0].name, "default-aaaaa");
    assert!(h.events("SpotInterrupted").is_empty());

    // Nothing is drained or deleted, now or later.
    advance(&mut h, &clock, Duration::from_secs(5 * 60));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").expect("the claim stays");
    assert!(c.metadata.deletion_timestamp.is_none());
    let node: Node = h.api.one(None, "n1").expect("the node stays");
    assert!(!disrupted(&node), "the node is not tainted for disruption");
    let pod: Pod = h.api.one(Some("default"), "p1").expect("the pod stays");
    assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
    assert!(!h.cloud.instances()[0].terminated, "the instance keeps running");
}

#[test]
fn a_spot_interruption_drains_the_node_and_deletes_its_claim_and_instance() {
    let (mut h, clock, pid) = spot_node_running_a_pod();
    h.cloud.notify(&pid, InterruptionKind::SpotInterruption).unwrap();
    advance(&mut h, &clock, Duration::from_secs(1));
    let events = h.events("SpotInterrupted");
    assert_eq!(events.len(), 1, "{:?}", h.api.recorded());
    assert_eq!(events[0].name, "default-aaaaa");
    assert!(h.events("SpotRebalanceRecommendation").is_empty());

    // Draining starts at once: the claim is deleted and the pod evicted from its node.
    let c: Option<NodeClaim> = h.api.one(None, "default-aaaaa");
    assert!(c.is_none_or(|c| c.metadata.deletion_timestamp.is_some()), "the claim is being deleted");
    let evicted = h.api.one::<Pod>(Some("default"), "p1").is_none_or(|p| p.spec.and_then(|s| s.node_name).is_none());
    assert!(evicted, "the pod left the interrupted node");

    // Then the node, the claim and the instance go, well before EC2 would reclaim it.
    advance(&mut h, &clock, Duration::from_secs(30));
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").is_none(), "the claim is gone");
    assert!(h.api.one::<Node>(None, "n1").is_none(), "the node is gone");
    let instance = h.cloud.instance(&pid).unwrap();
    assert!(instance.terminated, "the instance was terminated");
}
