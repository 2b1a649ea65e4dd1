//! Node repair with `RebootForRepair` against the simulated cloud (which reboots) and the fake
//! one (which cannot): a node due for repair is rebooted once, not tainted or drained, and a
//! restarted controller does not reboot it again; still unhealthy a toleration after the
//! reboot, it is replaced; a cloud that cannot reboot gets it replaced at once.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::{NodeClaim, NodePool, NodeSelectorRequirementWithMinValues, Operator, labels};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{Clock, CloudProvider, ManualClock, Timestamp};

use crate::manager::Options;
use crate::testkit::*;

const CLAIM: &str = "default-aaaaa";

fn repair_options() -> Options {
    Options { node_repair: true, reboot_for_repair: true, ..Options::default() }
}

/// A pool that keeps its nodes (no consolidation) and, launched for it, claim `default-aaaaa`
/// (an on-demand m5.large) with node `n1` registered, initialized and running pod `p1`.
fn node_running_a_pod<P: CloudProvider + Clone>(h: &mut Harness<P>) {
    let mut pool: NodePool = node_pool("default");
    pool.spec.disruption.consolidate_after = kerf_api::NillableDuration::NEVER;
    h.api.put(pool);
    let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": CLAIM, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [], "resources": {"requests": {"cpu": "1"}}}
    }))
    .unwrap();
    let reqs: Vec<NodeSelectorRequirementWithMinValues> = vec![
        requirement(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
        requirement(labels::INSTANCE_TYPE, Operator::In, &["m5.large"]),
    ];
    Arc::make_mut(&mut claim.spec).requirements = reqs;
    h.api.put(claim);
    h.settle();
    kubelet_joins(&h.api, CLAIM, "n1", true);
    h.api.put(pending_pod("p1", "1"));
    bind(&h.api, "p1", "n1");
    h.settle();
    let c: NodeClaim = h.api.one(None, CLAIM).unwrap();
    assert!(c.is_condition_true(kerf_api::nodeclaim::CONDITION_INITIALIZED));
}

/// The node's GPU fails now: `AcceleratedHardwareReady` False, as the EKS node monitoring
/// agent reports it.
fn fail_gpu<P: CloudProvider + Clone>(h: &mut Harness<P>) {
    let mut node: Node = h.api.one(None, "n1").unwrap();
    let conditions = node.status.as_mut().unwrap().conditions.get_or_insert_with(Vec::new);
    conditions.push(NodeCondition {
        type_: "AcceleratedHardwareReady".into(),
        status: "False".into(),
        reason: Some("NvidiaXidError".into()),
        last_transition_time: Some(Time(h.now)),
        ..Default::default()
    });
    h.api.put(node);
    h.settle();
}

fn rebooted_at(h: &Harness<impl CloudProvider + Clone>) -> Option<String> {
    let c: NodeClaim = h.api.one(None, CLAIM)?;
    c.metadata.annotations?.get(labels::REBOOTED_AT).cloned()
}

fn deleting(h: &Harness<impl CloudProvider + Clone>) -> bool {
    h.api.one::<NodeClaim>(None, CLAIM).is_none_or(|c| c.metadata.deletion_timestamp.is_some())
}

fn tainted(h: &Harness<impl CloudProvider + Clone>) -> bool {
    let node: Node = h.api.one(None, "n1").unwrap();
    node.spec.and_then(|s| s.taints).into_iter().flatten().any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
}

#[test]
fn a_node_due_for_repair_is_rebooted_once_and_replaced_when_still_unhealthy_a_toleration_later() {
    let clock = ManualClock::new();
    let sim = Arc::new(SimProvider::new(SimConfig::default(), Arc::new(clock.clone())).unwrap());
    let mut h = Harness::with_options(sim, repair_options());
    let advance = |h: &mut Harness<Arc<SimProvider>>, by: Duration| {
        clock.advance(by);
        h.advance(by);
    };
    node_running_a_pod(&mut h);
    fail_gpu(&mut h);

    // Tolerated for 10 minutes; then rebooted, neither tainted nor drained.
    advance(&mut h, Duration::from_secs(9 * 60));
    assert_eq!(rebooted_at(&h), None);
    advance(&mut h, Duration::from_secs(60));
    let at = rebooted_at(&h).expect("the claim records the reboot");
    assert_eq!(at.parse::<Timestamp>().ok(), Some(h.now));
    assert_eq!(h.cloud.instances()[0].rebooted_at, Some(clock.now()));
    let issued = h.events("RebootIssued");
    assert_eq!(issued.len(), 2, "on the Node and the NodeClaim: {issued:?}");
    assert!(issued[0].message.contains("AcceleratedHardwareReady condition has been False for 10m"), "{issued:?}");
    assert!(!deleting(&h) && !tainted(&h));
    let pod: Pod = h.api.one(Some("default"), "p1").unwrap();
    assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
    assert_eq!(h.mgr.repairs().len(), 1);
    assert!(h.mgr.disruptions().is_empty());

    // A restarted controller reads the reboot from the claim: no second reboot.
    h.restart();
    advance(&mut h, Duration::from_secs(5 * 60));
    assert_eq!(h.events("RebootIssued").len(), 2);
    assert_eq!(rebooted_at(&h), Some(at));
    assert!(!deleting(&h));

    // Still failing 10 minutes after the reboot: replaced (its pod's new node launches first).
    advance(&mut h, Duration::from_secs(5 * 60) - Duration::from_secs(1));
    assert!(h.mgr.disruptions().is_empty());
    advance(&mut h, Duration::from_secs(1));
    assert!(tainted(&h), "replaced once the toleration ran out again");
    let d = h.mgr.disruptions();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].detail.contains("after its reboot"), "{}", d[0].detail);
    assert_eq!(h.events("RebootIssued").len(), 2, "not rebooted again");
}

#[test]
fn a_node_back_from_its_reboot_healthy_is_kept() {
    let clock = ManualClock::new();
    let sim = Arc::new(SimProvider::new(SimConfig::default(), Arc::new(clock.clone())).unwrap());
    let mut h = Harness::with_options(sim, repair_options());
    node_running_a_pod(&mut h);
    fail_gpu(&mut h);
    clock.advance(Duration::from_secs(600));
    h.advance(Duration::from_secs(600));
    assert!(rebooted_at(&h).is_some());
    // The node comes back: Ready again, the GPU healthy.
    let mut node: Node = h.api.one(None, "n1").unwrap();
    for c in node.status.as_mut().unwrap().conditions.iter_mut().flatten() {
        c.status = "True".into();
        c.last_transition_time = Some(Time(util_after(h.now, 30)));
    }
    h.api.put(node);
    clock.advance(Duration::from_secs(3600));
    h.advance(Duration::from_secs(3600));
    assert!(!deleting(&h) && !tainted(&h));
    assert!(h.mgr.disruptions().is_empty());
    assert_eq!(h.events("RebootIssued").len(), 2);
    assert_eq!(h.claims().len(), 1, "nothing launched");
}

fn util_after(t: Timestamp, secs: u64) -> Timestamp {
    crate::util::after(t, Duration::from_secs(secs))
}

#[test]
fn a_cloud_that_cannot_reboot_gets_the_node_replaced_at_once() {
    let mut h = Harness::with_options(
        FakeCloud::with_types(vec![instance_type("m5.large", "2", "8Gi", 0.096)]),
        repair_options(),
    );
    node_running_a_pod(&mut h);
    fail_gpu(&mut h);
    h.advance(Duration::from_secs(600));
    let failed = h.events("RebootFailed");
    assert_eq!(failed.len(), 2, "{:?}", h.api.recorded());
    assert!(failed[0].message.contains("not supported by this cloud"), "{failed:?}");
    assert!(h.events("RebootIssued").is_empty());
    assert_eq!(rebooted_at(&h), None, "no reboot is recorded");
    assert!(tainted(&h));
    let d = h.mgr.disruptions();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].detail.contains("(repaired after 10m)"), "{}", d[0].detail);
}
