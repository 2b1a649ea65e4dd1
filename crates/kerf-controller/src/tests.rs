//! Behaviour tests of the controllers against the in-memory fakes in `testkit`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::nodeclaim::{
    CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_READY, CONDITION_REGISTERED, NodeClaimSpec,
    ResourceRequirements,
};
use kerf_api::{NodeClaim, NodePool, Operator, Taint, TaintEffect, labels};
use kerf_cloud::{CloudError, CloudProvider};

use crate::testkit::*;

fn small_and_large() -> FakeCloud {
    FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10), instance_type("large", "8", "16Gi", 0.40)])
}

/// A claim for pool `default`, as the provisioner would create it.
pub(crate) fn claim(name: &str, requirements: Vec<kerf_api::NodeSelectorRequirementWithMinValues>) -> NodeClaim {
    let pool = node_pool("default");
    NodeClaim {
        api_version: kerf_api::nodeclaim::API_VERSION.into(),
        kind: kerf_api::nodeclaim::KIND.into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(labels::NODE_POOL.to_string(), "default".to_string())].into()),
            // kerf's hash versions, without hashes: never stamped again, never drifted by a hash.
            annotations: Some(
                [
                    (labels::NODEPOOL_HASH_VERSION.to_string(), kerf_api::hash::NODEPOOL_HASH_VERSION.to_string()),
                    (labels::NODECLASS_HASH_VERSION.to_string(), kerf_api::hash::EC2NODECLASS_HASH_VERSION.to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: NodeClaimSpec {
            taints: vec![],
            startup_taints: vec![],
            requirements,
            resources: ResourceRequirements::default(),
            node_class_ref: pool.spec.template.spec.node_class_ref.clone(),
            expire_after: pool.spec.template.spec.expire_after,
            termination_grace_period: None,
        }
        .into(),
        status: None,
    }
}

fn node_taint_keys(node: &Node) -> Vec<String> {
    node.spec.as_ref().and_then(|s| s.taints.as_ref()).into_iter().flatten().map(|t| t.key.clone()).collect()
}

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

// ---- batching ----

#[test]
fn batch_waits_for_one_second_without_new_pods_before_scheduling() {
    // No NodePools: every pod comes back unplaceable, which shows when the batch ran.
    let mut h = Harness::new(small_and_large());
    h.api.put(pending_pod("a", "1"));
    let wake = h.settle();
    assert_eq!(wake, Some(at(1)));
    assert!(h.events("FailedScheduling").is_empty());

    h.advance(Duration::from_millis(500));
    h.api.put(pending_pod("b", "1"));
    let wake = h.settle();
    assert_eq!(wake, Some(util_after(at(0), 1500)), "a new pod extends the idle window");
    assert!(h.events("FailedScheduling").is_empty());

    h.advance_to(util_after(at(0), 1500));
    let failed: Vec<String> = h.events("FailedScheduling").into_iter().map(|e| e.name).collect();
    assert_eq!(failed, vec!["default/a", "default/b"]);
}

fn jiff_ms(ms: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_millis(ms)
}

fn util_after(t: kerf_cloud::Timestamp, millis: u64) -> kerf_cloud::Timestamp {
    crate::util::after(t, Duration::from_millis(millis))
}

#[test]
fn batch_closes_after_ten_seconds_even_while_pods_keep_arriving() {
    let mut h = Harness::new(small_and_large());
    for i in 0..25u64 {
        h.advance_to(util_after(at(0), i * 500));
        h.api.put(pending_pod(&format!("p{i:02}"), "1"));
        h.settle();
        if i * 500 < 10_000 {
            assert!(h.events("FailedScheduling").is_empty(), "batch ran early at {}ms", i * 500);
        }
    }
    // The window opened at 0s and closed at 10s with the 20 pods seen before then.
    let failed = h.events("FailedScheduling");
    assert_eq!(failed.len(), 20);
    assert_eq!(failed.last().unwrap().name, "default/p19");
    // The pods from 10s on open the next window, which closes 1s after the last one (12s);
    // that batch retries every pending pod, the 20 earlier ones included.
    assert_eq!(h.last_wake, Some(at(13)));
    h.advance_to(util_after(at(13), 0) - jiff_ms(1));
    assert_eq!(h.events("FailedScheduling").len(), 20);
    h.advance_to(at(13));
    let failed = h.events("FailedScheduling");
    assert_eq!(failed.len(), 45);
    assert_eq!(failed[20].name, "default/p00");
    assert_eq!(failed.last().unwrap().name, "default/p24");
}

#[test]
fn pods_not_marked_unschedulable_or_owned_by_daemonsets_are_not_provisioned() {
    let mut h = Harness::new(small_and_large());
    let mut fresh = pending_pod("fresh", "1");
    fresh.status.as_mut().unwrap().conditions = None;
    h.api.put(fresh);
    let mut ds = pending_pod("ds-pod", "1");
    ds.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: "agent".into(),
        uid: "u".into(),
        ..Default::default()
    }]);
    h.api.put(ds);
    let wake = h.settle();
    assert_eq!(wake, None);
    h.advance(Duration::from_secs(30));
    assert!(h.events("FailedScheduling").is_empty());
}

// ---- lifecycle ----

#[test]
fn launch_adds_finalizer_and_records_the_launched_instance() {
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![requirement(labels::INSTANCE_TYPE, Operator::In, &["small", "large"])]));
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert_eq!(c.metadata.finalizers, Some(vec![labels::TERMINATION_FINALIZER.to_string()]));
    assert!(c.is_condition_true(CONDITION_LAUNCHED));
    let l = c.metadata.labels.as_ref().unwrap();
    assert_eq!(l.get(labels::INSTANCE_TYPE).map(String::as_str), Some("small"));
    assert_eq!(l.get(labels::CAPACITY_TYPE).map(String::as_str), Some("spot"));
    assert_eq!(l.get(labels::ZONE).map(String::as_str), Some("test-zone-a"));
    assert_eq!(c.provider_id(), Some("fake:///test-zone-a/i-0001"));
    assert_eq!(c.status.as_ref().unwrap().allocatable, res(&[("cpu", "1900m"), ("memory", "4Gi"), ("pods", "110")]));
    assert_eq!(h.cloud.launched(), 1);
}

#[test]
fn registration_syncs_labels_and_taints_adds_finalizer_and_removes_unregistered_taint() {
    let mut h = Harness::new(small_and_large());
    let mut c = claim("default-aaaaa", vec![]);
    c.metadata.labels.as_mut().unwrap().insert("team".into(), "blue".into());
    std::sync::Arc::make_mut(&mut c.spec).taints = vec![Taint::new("dedicated", Some("blue"), TaintEffect::NoSchedule)];
    h.api.put(c);
    h.settle();
    // The kubelet joins without the claim's labels or taints: registration must add them.
    let mut node = kubelet_joins(&h.api, "default-aaaaa", "ip-10-0-0-1", false);
    node.metadata.labels.as_mut().unwrap().remove("team");
    node.spec.as_mut().unwrap().taints =
        Some(vec![Taint::new(labels::UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute).to_core()]);
    h.api.put(node);
    h.settle();

    let node: Node = h.api.one(None, "ip-10-0-0-1").unwrap();
    assert_eq!(node_label(&node, "team"), Some("blue"));
    assert_eq!(node_label(&node, labels::REGISTERED), Some("true"));
    assert_eq!(node_label(&node, labels::NODE_POOL), Some("default"));
    assert_eq!(node_taint_keys(&node), vec!["dedicated"]);
    assert_eq!(node.metadata.finalizers, Some(vec![labels::TERMINATION_FINALIZER.to_string()]));
    let owner = &node.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("NodeClaim", "default-aaaaa"));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_REGISTERED));
    assert!(!c.is_condition_true(CONDITION_INITIALIZED), "node is not ready yet");
    assert_eq!(c.status.as_ref().unwrap().node_name.as_deref(), Some("ip-10-0-0-1"));
}

#[test]
fn initialization_waits_for_ready_and_startup_taints_to_be_removed() {
    let mut h = Harness::new(small_and_large());
    let mut c = claim("default-aaaaa", vec![]);
    std::sync::Arc::make_mut(&mut c.spec).startup_taints =
        vec![Taint::new("example.com/agent-not-ready", None, TaintEffect::NoSchedule)];
    h.api.put(c);
    h.settle();
    kubelet_joins(&h.api, "default-aaaaa", "n1", true);
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_REGISTERED));
    assert!(!c.is_condition_true(CONDITION_INITIALIZED), "startup taint still present");
    let node: Node = h.api.one(None, "n1").unwrap();
    assert_eq!(node_taint_keys(&node), vec!["example.com/agent-not-ready"]);
    assert_eq!(node_label(&node, labels::INITIALIZED), None);

    // The agent removes its startup taint.
    let mut node = node;
    node.spec.as_mut().unwrap().taints = None;
    h.api.put(node);
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_INITIALIZED));
    assert!(c.is_condition_true(CONDITION_READY));
    let node: Node = h.api.one(None, "n1").unwrap();
    assert_eq!(node_label(&node, labels::INITIALIZED), Some("true"));
}

#[test]
fn initialization_waits_for_requested_extended_resources_to_register() {
    let mut h = Harness::new(small_and_large());
    let mut c = claim("default-aaaaa", vec![]);
    std::sync::Arc::make_mut(&mut c.spec).resources.requests = res(&[("cpu", "1"), ("vpc.amazonaws.com/pod-eni", "1")]);
    h.api.put(c);
    h.settle();
    let node = kubelet_joins(&h.api, "default-aaaaa", "n1", true);
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_REGISTERED));
    assert!(!c.is_condition_true(CONDITION_INITIALIZED), "pod-eni not registered yet");

    let mut node: Node = h.api.one(None, node.metadata.name.as_deref().unwrap()).unwrap();
    node.status.as_mut().unwrap().allocatable.as_mut().unwrap().insert(
        "vpc.amazonaws.com/pod-eni".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("9".into()),
    );
    h.api.put(node);
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_INITIALIZED));
}

#[test]
fn liveness_deletes_a_claim_whose_node_does_not_register_within_15_minutes() {
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![]));
    let wake = h.settle();
    // Garbage collection compares instances and claims every two minutes.
    assert_eq!(wake, Some(at(2 * 60)));
    h.advance_to(at(15 * 60 - 1));
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").is_some());
    h.advance_to(at(15 * 60));
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").is_none(), "claim deleted");
    assert_eq!(h.cloud.deleted(), vec!["default-aaaaa"], "its instance terminated");
    assert_eq!(h.cloud.running(), 0);
}

#[test]
fn insufficient_capacity_deletes_the_claim() {
    let cloud = small_and_large();
    cloud.no_capacity("small", "test-zone-a", "spot");
    let mut h = Harness::new(cloud);
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").is_none());
    assert_eq!(h.events("InsufficientCapacityError").len(), 1);
    assert_eq!(h.cloud.launched(), 0);
}

#[test]
fn other_launch_errors_set_launched_false_and_retry_after_ten_seconds() {
    let cloud = small_and_large();
    cloud.fail_next(CloudError::Other("throttled".into()));
    let mut h = Harness::new(cloud);
    h.api.put(claim("default-aaaaa", vec![]));
    let wake = h.settle();
    assert_eq!(wake, Some(at(10)));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    let launched = c.condition(CONDITION_LAUNCHED).unwrap();
    assert_eq!(launched.status, "False");
    assert_eq!(launched.message.as_deref(), Some("cloud provider error: throttled"));
    h.advance_to(at(10));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_LAUNCHED));
}

#[test]
fn deleting_a_claim_deletes_its_node_and_instance_then_releases_the_claim() {
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    kubelet_joins(&h.api, "default-aaaaa", "n1", true);
    h.settle();
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").unwrap().is_condition_true(CONDITION_INITIALIZED));
    crate::testkit::block_on(kerf_api::cluster::ClusterApi::delete::<NodeClaim>(&h.api, None, "default-aaaaa"))
        .unwrap();
    h.settle();
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").is_none());
    assert!(h.api.one::<Node>(None, "n1").is_none());
    assert_eq!(h.cloud.running(), 0);
    assert!(h.mgr.state().node_claims().is_empty());
    assert!(h.mgr.state().nodes().is_empty());
}

#[test]
fn nodes_deleted_together_are_drained_together_with_their_evictions_in_flight_at_once() {
    let mut h = Harness::new(small_and_large());
    for (c, n) in [("default-aaaaa", "n1"), ("default-bbbbb", "n2"), ("default-ccccc", "n3")] {
        h.api.put(claim(c, vec![]));
        h.settle();
        kubelet_joins(&h.api, c, n, true);
        for i in 0..8 {
            let pod = format!("{n}-p{i}");
            h.api.put(pending_pod(&pod, "10m"));
            bind(&h.api, &pod, n);
        }
    }
    h.settle();
    for c in ["default-aaaaa", "default-bbbbb", "default-ccccc"] {
        crate::testkit::block_on(kerf_api::cluster::ClusterApi::delete::<NodeClaim>(&h.api, None, c)).unwrap();
    }
    h.settle();
    // 24 pods on three nodes: evicted IN_FLIGHT at a time, not one node after another.
    assert_eq!(h.api.most_evictions_in_flight(), crate::pass::IN_FLIGHT);
    assert!(
        h.api.all::<k8s_openapi::api::core::v1::Pod>().iter().all(|p| p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_none())
    );
    assert!(["n1", "n2", "n3"].iter().all(|n| h.api.one::<Node>(None, n).is_none()), "every node is released");
    assert_eq!(h.cloud.running(), 0);
}

#[test]
fn settled_controllers_write_nothing_more() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    kubelet_joins(&h.api, "default-aaaaa", "n1", true);
    h.settle();
    let writes = h.api.writes();
    h.advance(Duration::from_secs(5));
    assert_eq!(h.api.writes(), writes);
}

// ---- NodePools ----

#[test]
fn nodepool_status_counts_launched_claims_and_their_capacity() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    h.api.put(claim("default-aaaaa", vec![requirement(labels::INSTANCE_TYPE, Operator::In, &["small"])]));
    h.api.put(claim("default-bbbbb", vec![requirement(labels::INSTANCE_TYPE, Operator::In, &["large"])]));
    h.settle();
    let pool: NodePool = h.api.one(None, "default").unwrap();
    let status = pool.status.unwrap();
    assert_eq!(status.nodes, Some(2));
    assert_eq!(status.resources, res(&[("cpu", "10"), ("memory", "20Gi"), ("pods", "220")]));
    assert!(status.conditions.iter().any(|c| c.type_ == "Ready" && c.is_true()));
}

#[test]
fn replicas_keep_a_fixed_number_of_nodeclaims() {
    let mut h = Harness::new(small_and_large());
    let mut pool = node_pool("fixed");
    pool.spec.replicas = Some(3);
    pool.spec.template.spec.requirements = vec![requirement(labels::INSTANCE_TYPE, Operator::In, &["large"])];
    pool.spec.template.metadata.labels.insert("role".into(), "fixed".into());
    h.api.put(pool);
    h.settle();
    let claims = h.claims();
    assert_eq!(claims.len(), 3);
    for c in &claims {
        assert!(c.name().starts_with("fixed-") && c.name().len() == "fixed-".len() + 5, "{}", c.name());
        let l = c.metadata.labels.as_ref().unwrap();
        assert_eq!(l.get(labels::NODE_POOL).map(String::as_str), Some("fixed"));
        assert_eq!(l.get("role").map(String::as_str), Some("fixed"));
        assert_eq!(l.get(labels::INSTANCE_TYPE).map(String::as_str), Some("large"));
        assert!(c.is_condition_true(CONDITION_LAUNCHED));
    }
    // No pods at all, and it stays at three.
    h.advance(Duration::from_secs(60));
    assert_eq!(h.claims().len(), 3);

    // Scale down to one: two claims go, and their instances.
    let mut pool: NodePool = h.api.one(None, "fixed").unwrap();
    pool.spec.replicas = Some(1);
    h.api.put(pool);
    h.settle();
    assert_eq!(h.claims().len(), 1);
    assert_eq!(h.cloud.running(), 1);

    // A claim lost outside kerf's control is replaced.
    let name = h.claims()[0].name().to_string();
    crate::testkit::block_on(kerf_api::cluster::ClusterApi::delete::<NodeClaim>(&h.api, None, &name)).unwrap();
    h.settle();
    let claims = h.claims();
    assert_eq!(claims.len(), 1);
    assert_ne!(claims[0].name(), name);
}

#[test]
fn claim_names_are_pool_name_and_five_seeded_characters() {
    let run = || {
        let mut h = Harness::new(small_and_large());
        let mut pool = node_pool("web");
        pool.spec.replicas = Some(2);
        h.api.put(pool);
        h.settle();
        h.claims().into_iter().map(|c| c.name().to_string()).collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run(), "same seed, same names");
    assert_eq!(a.len(), 2);
    for n in &a {
        let suffix = n.strip_prefix("web-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }
}

// ---- the scheduling input ----

#[test]
fn in_flight_claims_are_existing_nodes_with_their_nominated_pods_and_count_against_limits() {
    use kerf_api::cluster::{Object, WatchEvent};
    use std::sync::Arc;

    let cloud = small_and_large();
    let mut mgr = crate::Manager::new(cloud.clone(), crate::Options::default());
    mgr.observe(&WatchEvent::Applied(ready_node_class("default").into_any()));
    let pool = node_pool("default");
    mgr.observe(&WatchEvent::Applied(pool.clone().into_any()));
    let mut c = claim("default-aaaaa", vec![requirement(labels::INSTANCE_TYPE, Operator::In, &["large", "small"])]);
    std::sync::Arc::make_mut(&mut c.spec).requirements.push(requirement(labels::ZONE, Operator::In, &["test-zone-b"]));
    std::sync::Arc::make_mut(&mut c.spec).taints = vec![Taint::new("dedicated", None, TaintEffect::NoSchedule)];
    std::sync::Arc::make_mut(&mut c.spec).startup_taints = vec![Taint::new("boot", None, TaintEffect::NoSchedule)];
    mgr.observe(&WatchEvent::Applied(c.into_any()));
    let pod = pending_pod("a", "1");
    mgr.observe(&WatchEvent::Applied(pod.into_any()));
    mgr.published.nominations.insert(("default".into(), "a".into()), "default-aaaaa");

    let (input, types) = scheduling_input_of(&mut mgr);
    assert_eq!(input.existing_nodes.len(), 1);
    let n = &input.existing_nodes[0];
    assert_eq!(n.name, "default-aaaaa");
    assert!(n.in_flight && n.schedulable);
    assert_eq!(n.node_pool.as_deref(), Some("default"));
    assert_eq!(n.labels.get(labels::ZONE).map(String::as_str), Some("test-zone-b"));
    assert_eq!(n.labels.get(labels::NODE_POOL).map(String::as_str), Some("default"));
    assert_eq!(n.taints, vec![Taint::new("dedicated", None, TaintEffect::NoSchedule)], "startup taints left out");
    // Not launched yet: the cheapest type its requirements allow stands in.
    assert_eq!(*n.allocatable, res(&[("cpu", "1900m"), ("memory", "4Gi"), ("pods", "110")]));
    assert_eq!(n.pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect::<Vec<_>>(), vec!["a"]);

    assert_eq!(input.node_pools.len(), 1);
    assert_eq!(input.node_pools[0].in_use, res(&[("cpu", "2"), ("memory", "4Gi"), ("pods", "110"), ("nodes", "1")]));
    assert!(Arc::ptr_eq(&input.node_pools[0].instance_types[0], &types["default"][0]));
}

#[test]
fn scheduling_inputs_share_each_nodes_labels_instead_of_copying_them() {
    use k8s_openapi::api::core::v1::Node;
    use kerf_api::cluster::{Object, WatchEvent};

    let mut mgr = crate::Manager::new(small_and_large(), crate::Options::default());
    mgr.observe(&WatchEvent::Applied(ready_node_class("default").into_any()));
    mgr.observe(&WatchEvent::Applied(node_pool("default").into_any()));
    let node = Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            labels: Some([(labels::NODE_POOL.to_string(), "default".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    mgr.observe(&WatchEvent::Applied(node.into_any()));
    let (first, _) = scheduling_input_of(&mut mgr);
    let (second, _) = scheduling_input_of(&mut mgr);
    let (a, b) = (&first.existing_nodes[0], &second.existing_nodes[0]);
    assert_eq!(a.labels.get(labels::NODE_POOL).map(String::as_str), Some("default"));
    assert!(a.labels.ptr_eq(&b.labels), "both inputs read the labels of the one Node the state keeps");
}

#[test]
fn daemonset_templates_and_static_pools_in_the_scheduling_input() {
    use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use kerf_api::cluster::{Object, WatchEvent};

    let mut mgr = crate::Manager::new(small_and_large(), crate::Options::default());
    mgr.observe(&WatchEvent::Applied(ready_node_class("default").into_any()));
    mgr.observe(&WatchEvent::Applied(node_pool("default").into_any()));
    let mut fixed = node_pool("fixed");
    fixed.spec.replicas = Some(2);
    mgr.observe(&WatchEvent::Applied(fixed.into_any()));
    let ds = DaemonSet {
        metadata: ObjectMeta {
            name: Some("agent".into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            template: PodTemplateSpec { metadata: None, spec: pending_pod("x", "100m").spec },
            ..Default::default()
        }),
        status: None,
    };
    mgr.observe(&WatchEvent::Applied(ds.into_any()));
    let (input, _) = scheduling_input_of(&mut mgr);
    let pools: Vec<&str> = input.node_pools.iter().map(|p| p.node_pool.name()).collect();
    assert_eq!(pools, vec!["default"], "static pools do not provision for pods");
    assert_eq!(input.daemonset_pods.len(), 1);
    assert_eq!(input.daemonset_pods[0].metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(input.daemonset_pods[0].metadata.name.as_deref(), Some("agent"));
}

#[test]
fn scheduling_input_carries_namespace_labels_with_metadata_name() {
    use k8s_openapi::api::core::v1::Namespace;
    use kerf_api::cluster::{Object, WatchEvent};

    let mut mgr = crate::Manager::new(small_and_large(), crate::Options::default());
    mgr.observe(&WatchEvent::Applied(ready_node_class("default").into_any()));
    mgr.observe(&WatchEvent::Applied(node_pool("default").into_any()));
    let shop = Namespace {
        metadata: ObjectMeta {
            name: Some("shop".into()),
            labels: Some(BTreeMap::from([("team".to_string(), "a".to_string())])),
            ..Default::default()
        },
        ..Default::default()
    };
    mgr.observe(&WatchEvent::Applied(shop.into_any()));
    // A pod in `default`, whose Namespace object was never seen.
    mgr.observe(&WatchEvent::Applied(pending_pod("a", "1").into_any()));

    let (input, _) = scheduling_input_of(&mut mgr);
    let name = kerf_scheduling::NAMESPACE_NAME_LABEL.to_string();
    assert_eq!(
        input.namespace_labels,
        BTreeMap::from([
            ("default".to_string(), BTreeMap::from([(name.clone(), "default".to_string())])),
            ("shop".to_string(), BTreeMap::from([(name, "shop".to_string()), ("team".to_string(), "a".to_string())])),
        ])
    );
}

// ---- log lines ----

#[test]
fn lifecycle_steps_log_karpenter_style_lines_with_fields() {
    let logs = capture_logs(|| {
        let cloud = small_and_large();
        cloud.fail_next(CloudError::Other("throttled".into()));
        let mut h = Harness::new(cloud);
        h.api.put(claim("default-aaaaa", vec![requirement(labels::INSTANCE_TYPE, Operator::In, &["small"])]));
        h.settle();
        h.advance(Duration::from_secs(10));
        kubelet_joins(&h.api, "default-aaaaa", "n1", true);
        h.settle();
        crate::testkit::block_on(kerf_api::cluster::ClusterApi::delete::<NodeClaim>(&h.api, None, "default-aaaaa"))
            .unwrap();
        h.settle();
    });
    let line = |msg: &str| {
        logs.lines().find(|l| l.contains(msg)).unwrap_or_else(|| panic!("no line {msg:?} in:\n{logs}")).to_string()
    };
    let failed = line("failed launching nodeclaim");
    assert!(failed.contains("ERROR") && failed.contains("error=cloud provider error: throttled"), "{failed}");
    let launched = line("launched nodeclaim");
    for field in [
        "NodeClaim=default-aaaaa",
        "provider-id=fake:///test-zone-a/i-0001",
        "instance-type=small",
        "zone=test-zone-a",
        "capacity-type=spot",
        "allocatable={\"cpu\":\"1900m\",\"memory\":\"4Gi\",\"pods\":\"110\"}",
    ] {
        assert!(launched.contains(field), "{field} missing: {launched}");
    }
    assert!(line("registered nodeclaim").contains("Node=n1"));
    assert!(line("initialized nodeclaim").contains("Node=n1"));
    assert!(line("deleted nodeclaim").contains("NodeClaim=default-aaaaa"));
}

/// A static pool `default` of two claims and a pool `other` with one claim, settled.
fn two_pools_with_claims() -> Harness {
    let mut h = Harness::new(small_and_large());
    let mut pool = node_pool("default");
    pool.spec.replicas = Some(2);
    h.api.put(pool);
    h.api.put(node_pool("other"));
    let mut other = claim("other-bbbbb", vec![]);
    other.metadata.labels = Some([(labels::NODE_POOL.to_string(), "other".to_string())].into());
    h.api.put(other);
    h.settle();
    h
}

#[test]
fn deleting_a_nodepool_deletes_its_nodeclaims_and_instances() {
    let mut h = two_pools_with_claims();
    assert_eq!(h.claims().len(), 3);
    h.api.remove::<NodePool>(None, "default");
    h.settle();
    let left: Vec<String> = h.claims().iter().map(|c| c.name().to_string()).collect();
    assert_eq!(left, vec!["other-bbbbb"]);
    assert_eq!(h.cloud.running(), 1);
}

#[test]
fn a_nodepool_deleted_while_no_controller_ran_loses_its_nodeclaims_to_the_next_one() {
    let mut h = two_pools_with_claims();
    // A claim that names a pool it is not owned by is not the pool's to delete.
    let mut stray = claim("gone-ccccc", vec![]);
    stray.metadata.labels = Some([(labels::NODE_POOL.to_string(), "gone".to_string())].into());
    h.api.put(stray);
    h.settle();
    assert_eq!(h.claims().len(), 4);
    // The pool goes while the controller is down: the next process never sees it deleted.
    h.api.remove::<NodePool>(None, "default");
    h.restart();
    h.settle();
    let left: Vec<String> = h.claims().iter().map(|c| c.name().to_string()).collect();
    assert_eq!(left, vec!["gone-ccccc", "other-bbbbb"]);
    assert_eq!(h.cloud.running(), 2);
}

#[test]
fn a_node_labelled_do_not_sync_taints_keeps_its_own_taints_but_loses_the_unregistered_one() {
    let mut h = Harness::new(small_and_large());
    let mut c = claim("default-aaaaa", vec![]);
    std::sync::Arc::make_mut(&mut c.spec).taints = vec![Taint::new("dedicated", Some("blue"), TaintEffect::NoSchedule)];
    h.api.put(c);
    h.settle();
    let mut node = kubelet_joins(&h.api, "default-aaaaa", "n1", false);
    node.metadata.labels.as_mut().unwrap().insert(labels::DO_NOT_SYNC_TAINTS.into(), "true".into());
    node.spec.as_mut().unwrap().taints = Some(vec![
        Taint::new("own", None, TaintEffect::NoSchedule).to_core(),
        Taint::new(labels::UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute).to_core(),
    ]);
    h.api.put(node);
    h.settle();
    let node: Node = h.api.one(None, "n1").unwrap();
    assert_eq!(node_taint_keys(&node), vec!["own"]);
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").unwrap().is_condition_true(CONDITION_REGISTERED));
}

#[test]
fn a_static_pools_node_limit_caps_its_replicas() {
    let mut h = Harness::new(small_and_large());
    let mut pool = node_pool("fixed");
    pool.spec.replicas = Some(5);
    pool.spec.limits = Some(res(&[("nodes", "2")]));
    h.api.put(pool);
    h.settle();
    assert_eq!(h.claims().len(), 2);
}

#[test]
fn a_launch_whose_status_write_is_lost_is_recorded_later_without_a_second_instance() {
    let mut h = Harness::new(small_and_large());
    let mut c = claim("default-aaaaa", vec![]);
    c.metadata.finalizers = Some(vec![labels::TERMINATION_FINALIZER.into()]);
    h.api.put(c);
    h.api.put(node_pool("default"));
    // The write of the launched instance's labels loses a race; the pool status write that
    // follows makes the controllers run again at once.
    h.api.fail_next_write(kerf_api::cluster::ApiError::Conflict { kind: "NodeClaim", name: "default-aaaaa".into() });
    h.settle();
    assert_eq!(h.cloud.launched(), 1, "no second instance");
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_LAUNCHED));
    assert_eq!(c.provider_id(), Some("fake:///test-zone-a/i-0001"));
}

#[test]
fn an_instance_whose_claim_went_away_before_recording_it_is_garbage_collected() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    let mut c = claim("default-aaaaa", vec![]);
    c.metadata.finalizers = Some(vec![labels::TERMINATION_FINALIZER.into()]);
    h.api.put(c);
    // Launched, but every write of the claim loses a race: the launch is kept unrecorded.
    h.api.fail_writes_of::<NodeClaim>(Some(kerf_api::cluster::ApiError::Conflict {
        kind: "NodeClaim",
        name: "default-aaaaa".into(),
    }));
    h.settle();
    assert_eq!(h.cloud.running(), 1);
    // The claim is deleted (finalizer and all) before the launch could be recorded.
    h.api.fail_writes_of::<NodeClaim>(None);
    h.api.remove::<NodeClaim>(None, "default-aaaaa");
    h.advance_to(at(2 * 60));
    assert_eq!(h.cloud.running(), 0, "the instance is terminated");
}

#[test]
fn an_unrecorded_launch_of_a_claim_that_recorded_another_instance_is_garbage_collected() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    let mut c = claim("default-aaaaa", vec![]);
    c.metadata.finalizers = Some(vec![labels::TERMINATION_FINALIZER.into()]);
    h.api.put(c);
    h.api.fail_writes_of::<NodeClaim>(Some(kerf_api::cluster::ApiError::Conflict {
        kind: "NodeClaim",
        name: "default-aaaaa".into(),
    }));
    h.settle();
    h.api.fail_writes_of::<NodeClaim>(None);
    // Meanwhile the claim recorded another instance (an earlier launch whose answer was lost,
    // seen only now after a watch outage).
    h.cloud.add_orphan("default-aaaaa", "fake:///test-zone-a/i-first");
    let mut c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    let mut status = kerf_api::nodeclaim::NodeClaimStatus {
        provider_id: Some("fake:///test-zone-a/i-first".into()),
        ..Default::default()
    };
    kerf_api::shared::set_condition(
        &mut status.conditions,
        crate::util::condition(CONDITION_LAUNCHED, true, "Launched", "", at(0)),
    );
    c.status = Some(status);
    h.api.put(c);
    h.advance_to(at(2 * 60));
    assert_eq!(h.cloud.running(), 1, "only the recorded instance runs");
    assert!(kerf_cloud::block_on(h.cloud.get("fake:///test-zone-a/i-first")).is_ok());
}

#[test]
fn static_pool_claims_log_the_types_they_may_become() {
    let logs = capture_logs(|| {
        let mut h = Harness::new(small_and_large());
        let mut pool = node_pool("fixed");
        pool.spec.replicas = Some(1);
        h.api.put(pool);
        h.settle();
    });
    let created = logs.lines().find(|l| l.contains("created nodeclaim")).expect("created line");
    assert!(created.contains("NodePool=fixed") && created.contains("instance-types=small, large"), "{created}");
    assert!(created.contains("replicas=1"), "{created}");
}

#[test]
fn garbage_collection_terminates_an_instance_no_nodeclaim_accounts_for() {
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    h.cloud.add_orphan("default-gone1", "fake:///test-zone-a/i-orphan");
    assert_eq!(h.cloud.running(), 2);
    h.advance_to(at(2 * 60));
    assert_eq!(h.cloud.deleted(), vec!["default-gone1"], "only the orphan");
    assert_eq!(h.cloud.running(), 1);
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").is_some());
}

#[test]
fn garbage_collection_deletes_a_launched_claim_whose_instance_is_gone() {
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    h.cloud.lose_instance(c.provider_id().unwrap());
    h.advance_to(at(2 * 60));
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").is_none(), "claim garbage collected");
}

#[test]
fn garbage_collection_terminates_a_second_instance_of_a_claim_that_records_another() {
    // The cloud launched an instance for the claim but the answer was lost (a timeout, then a
    // restart): the claim was launched again. The first instance carries the claim's name but
    // is garbage.
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    let recorded = h.api.one::<NodeClaim>(None, "default-aaaaa").unwrap().provider_id().unwrap().to_string();
    h.cloud.add_orphan("default-aaaaa", "fake:///test-zone-a/i-lost");
    h.advance_to(at(2 * 60));
    assert_eq!(h.cloud.running(), 1, "the lost launch is terminated");
    assert!(kerf_cloud::block_on(h.cloud.get(&recorded)).is_ok(), "the recorded instance keeps running");
    assert!(kerf_cloud::block_on(h.cloud.get("fake:///test-zone-a/i-lost")).is_err());
}

#[test]
fn a_new_process_garbage_collects_an_instance_left_behind_when_no_claim_exists() {
    // The process before launched it and died before its claim recorded it; the claim went.
    let mut h = Harness::new(small_and_large());
    h.cloud.add_orphan("default-gone1", "fake:///test-zone-a/i-orphan");
    h.settle();
    assert_eq!(h.cloud.deleted(), vec!["default-gone1"]);
    assert_eq!(h.cloud.running(), 0);
}

#[test]
fn garbage_collection_keeps_a_claim_whose_instance_a_stale_list_missed() {
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    h.cloud.hide_from_list(c.provider_id().unwrap());
    h.advance_to(at(2 * 60));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.metadata.deletion_timestamp.is_none(), "the instance is asked for before its claim goes");
    assert!(h.cloud.deleted().is_empty());
}

#[test]
fn a_restart_releases_a_node_left_tainted_by_a_disruption_it_no_longer_runs() {
    let mut h = Harness::new(small_and_large());
    h.api.put(claim("default-aaaaa", vec![]));
    h.settle();
    kubelet_joins(&h.api, "default-aaaaa", "n1", true);
    h.settle();
    // A disruption decided before the crash: the node tainted, the claim marked.
    let mut node: Node = h.api.one(None, "n1").unwrap();
    node.spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new)
        .push(Taint::new(labels::DISRUPTED_TAINT_KEY, None, TaintEffect::NoSchedule).to_core());
    h.api.put(node);
    let mut c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    let status = c.status.get_or_insert_with(Default::default);
    kerf_api::shared::set_condition(
        &mut status.conditions,
        crate::util::condition(kerf_api::nodeclaim::CONDITION_DISRUPTION_REASON, true, "Drifted", "", at(0)),
    );
    h.api.put(c);
    h.restart();
    let node: Node = h.api.one(None, "n1").unwrap();
    assert!(!node_taint_keys(&node).contains(&labels::DISRUPTED_TAINT_KEY.to_string()), "{:?}", node_taint_keys(&node));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.metadata.deletion_timestamp.is_none());
    let conditions = &c.status.unwrap().conditions;
    assert!(conditions.iter().all(|x| x.type_ != kerf_api::nodeclaim::CONDITION_DISRUPTION_REASON));
}

#[test]
fn a_claim_whose_write_fails_does_not_hold_back_the_launch_of_another() {
    let mut h = Harness::new(small_and_large());
    h.tolerate_errors = true;
    h.api.put(node_pool("default"));
    h.settle();
    h.api.put(claim("default-aaaaa", vec![]));
    h.api.put(claim("default-bbbbb", vec![]));
    // The first write of the pass (claim a's finalizer) meets a 500.
    h.api.fail_next_write(kerf_api::cluster::ApiError::Other("the API server answered 500".into()));
    h.settle();
    assert_eq!(h.cloud.launched(), 1, "claim b launched in the same pass");
    assert!(h.api.one::<NodeClaim>(None, "default-bbbbb").unwrap().is_condition_true(CONDITION_LAUNCHED));
    // Claim a on the retry, a second later (the pass made progress: no longer backoff).
    h.advance(Duration::from_secs(2));
    assert!(h.api.one::<NodeClaim>(None, "default-aaaaa").unwrap().is_condition_true(CONDITION_LAUNCHED));
}

// ---- the reconciler runtime ----

#[test]
fn an_api_error_in_one_reconciler_leaves_the_others_working() {
    use crate::Reconciler;
    let mut h = Harness::new(small_and_large());
    h.tolerate_errors = true;
    // The API server fails every NodePool write: only the NodePool status reconciler writes them
    // (the pool already carries kerf's hash annotations).
    h.api.fail_writes_of::<NodePool>(Some(kerf_api::cluster::ApiError::Other("etcdserver: request timed out".into())));
    let mut pool = node_pool("default");
    let hash = pool.template_hash();
    pool.metadata.annotations = Some(
        [
            (labels::NODEPOOL_HASH.to_string(), hash),
            (labels::NODEPOOL_HASH_VERSION.to_string(), kerf_api::hash::NODEPOOL_HASH_VERSION.to_string()),
        ]
        .into(),
    );
    h.api.put(pool);
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(!h.errors.is_empty());
    assert!(h.errors.iter().all(|(r, _)| *r == Reconciler::NodePoolStatus), "{:?}", h.errors);
    let health = h.mgr.health(Reconciler::NodePoolStatus).clone();
    assert!(health.failures >= 1 && health.retry_at.is_some(), "{health:?}");
    assert!(health.last_error.unwrap().contains("etcdserver: request timed out"));

    // Provisioning and the NodeClaim lifecycle went on: the pod's claim is created and launched.
    let claims = h.claims();
    assert_eq!(claims.len(), 1);
    assert!(claims[0].is_condition_true(CONDITION_LAUNCHED));
    assert_eq!(h.events("Nominated").len(), 1);
    kubelet_joins(&h.api, claims[0].name(), "n1", true);
    h.settle();
    assert!(h.api.one::<NodeClaim>(None, claims[0].name()).unwrap().is_condition_true(CONDITION_INITIALIZED));

    // The API recovers: the failed reconciler's retry writes the status and it is healthy again.
    h.api.fail_writes_of::<NodePool>(None);
    h.advance(Duration::from_secs(10 * 60));
    let pool: NodePool = h.api.one(None, "default").unwrap();
    assert_eq!(pool.status.unwrap().nodes, Some(1));
    assert_eq!(h.mgr.health(Reconciler::NodePoolStatus), &crate::Health::default());
}

// ---- events ----

#[test]
fn disruption_blocked_is_emitted_when_the_blocking_reason_changes_not_every_pass() {
    let mut h = Harness::new(small_and_large());
    let mut pool = node_pool("default");
    pool.spec.disruption.consolidate_after = kerf_api::NillableDuration::from_secs(60);
    h.api.put(pool);
    h.api.put(pending_pod("a", "1"));
    h.run_on_first_claim("a", "n1");
    let blocked = |h: &Harness| -> Vec<String> {
        h.events("DisruptionBlocked").into_iter().filter(|e| e.name == "n1").map(|e| e.message).collect()
    };
    let touch = |h: &mut Harness, key: &str, value: &str| {
        let mut node: Node = h.api.one(None, "n1").unwrap();
        node.metadata.labels.get_or_insert_with(Default::default).insert(key.into(), value.into());
        h.api.put(node);
        h.settle();
    };
    let mut reasons = BTreeMap::new();
    for i in 0..20 {
        // Every pass re-evaluates (a label changed), and the reason counts down each time.
        h.advance(Duration::from_secs(5));
        touch(&mut h, "touched", &i.to_string());
        let why = h.mgr.disruption_blocked().get("n1").cloned().unwrap_or_default();
        reasons.insert(why, ());
    }
    assert_eq!(reasons.len(), 20, "every pass gave the node a new countdown: {reasons:#?}");
    // Two causes over those 20 passes (consolidateAfter, then the guard against launch regret):
    // one event each, with the countdown as it stood then.
    let events = blocked(&h);
    assert_eq!(events.len(), 2, "{events:#?}");
    assert!(events[0].starts_with("Cannot disrupt Node: consolidateAfter 1m0s has not passed"), "{events:#?}");
    assert!(events[1].starts_with("Cannot disrupt Node: it was launched for this workload"), "{events:#?}");
    let now = h.mgr.disruption_blocked().get("n1").cloned().unwrap_or_default();
    assert_ne!(events[1], format!("Cannot disrupt Node: {now}"), "the state has the current countdown");

    // A new cause is a new event at once.
    let mut node: Node = h.api.one(None, "n1").unwrap();
    node.metadata.annotations.get_or_insert_with(Default::default).insert(labels::DO_NOT_DISRUPT.into(), "true".into());
    h.api.put(node);
    h.advance(Duration::from_secs(5));
    let events = blocked(&h);
    assert_eq!(events.len(), 3, "{events:#?}");
    assert!(events[2].contains(labels::DO_NOT_DISRUPT), "{events:#?}");
    touch(&mut h, "touched", "again");
    assert_eq!(blocked(&h).len(), 3);
}

/// The scheduling input the provisioner and disruption would build from the manager's state.
fn scheduling_input_of(
    mgr: &mut crate::Manager<FakeCloud>,
) -> (kerf_scheduling::SchedulingInput, crate::input::TypesByPool) {
    let types =
        crate::testkit::block_on(crate::input::instance_types_by_pool(&mgr.cloud, &mgr.state, &mut mgr.published));
    (
        crate::input::View {
            state: &mgr.state,
            published: &mgr.published,
            preference_policy: mgr.options().preference_policy,
        }
        .scheduling_input(&[], &types),
        types,
    )
}
