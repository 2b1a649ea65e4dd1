//! Node readiness as a cluster has it: a Node that is not Ready carries the not-ready
//! NoSchedule taint (the API server's admission at creation, the node lifecycle controller after),
//! kube-scheduler places only pods that tolerate it there, and the kubelet starts whatever is
//! bound to a node once the node is Ready, whenever and by whomever it was bound. Driven through
//! the simulated cluster's API with kerf's controllers off, as `kerf serve --controllers none`
//! runs.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{ManualClock, Timestamp};
use kerf_sim::Simulation;
use serde_json::json;

const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

fn sim() -> Simulation<SimProvider> {
    let clock = ManualClock::new();
    let cloud = SimProvider::new(SimConfig::default(), Arc::new(clock.clone())).expect("default cloud");
    let mut sim = Simulation::new("t", cloud, clock, "us-west-2", 1);
    sim.set_controllers(false);
    sim
}

/// Runs the stand-ins until nothing changes, `secs` later.
fn settle(sim: &mut Simulation<SimProvider>, secs: i64) {
    let until = Timestamp::from_millisecond(sim.now().as_millisecond() + secs * 1000).expect("time");
    sim.settle(until).unwrap_or_else(|e| panic!("{e}"));
}

/// A Node as a client creates it: no conditions unless `ready` says.
fn node(name: &str, ready: Option<&str>, extra_spec: serde_json::Value) -> Node {
    let mut n = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": extra_spec,
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "20"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"}
        }
    });
    if let Some(r) = ready {
        n["status"]["conditions"] = json!([{"type": "Ready", "status": r}]);
    }
    serde_json::from_value(n).expect("node")
}

/// A pod asking for 100m; `spec` is merged into its spec (`nodeName`, `tolerations`).
fn pod(name: &str, spec: serde_json::Value) -> Pod {
    let mut p = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}
    });
    if let (Some(s), Some(extra)) = (p["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(p).expect("pod")
}

fn set_ready(sim: &Simulation<SimProvider>, name: &str, status: &str) {
    let mut n: Node = sim.cluster().get_obj(None, name).expect("node");
    n.status.get_or_insert_with(Default::default).conditions =
        Some(serde_json::from_value(json!([{"type": "Ready", "status": status}])).expect("conditions"));
    sim.cluster().update_status_obj(n).expect("status update");
}

fn taints(sim: &Simulation<SimProvider>, name: &str) -> Vec<String> {
    let n: Node = sim.cluster().get_obj(None, name).expect("node");
    n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(|t| format!("{}:{}", t.key, t.effect)).collect()
}

fn get_pod(sim: &Simulation<SimProvider>, name: &str) -> Pod {
    sim.cluster().get_obj(Some("default"), name).expect("pod")
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn node_name(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn condition<'a>(p: &'a Pod, type_: &str) -> Option<&'a str> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

#[test]
fn a_not_ready_node_carries_the_not_ready_no_schedule_taint_until_it_is_ready() {
    let mut s = sim();
    let own = json!({"taints": [{"key": "example.com/own", "effect": "NoSchedule"}]});
    s.cluster().create_obj(node("n", None, own)).unwrap();
    settle(&mut s, 1);
    assert_eq!(taints(&s, "n"), ["example.com/own:NoSchedule", &format!("{NOT_READY}:NoSchedule")]);
    set_ready(&s, "n", "False");
    settle(&mut s, 1);
    assert_eq!(taints(&s, "n"), ["example.com/own:NoSchedule", &format!("{NOT_READY}:NoSchedule")]);
    set_ready(&s, "n", "True");
    settle(&mut s, 1);
    assert_eq!(taints(&s, "n"), ["example.com/own:NoSchedule"], "the taint goes once the node is Ready");
    set_ready(&s, "n", "False");
    settle(&mut s, 1);
    assert_eq!(taints(&s, "n"), ["example.com/own:NoSchedule", &format!("{NOT_READY}:NoSchedule")], "and comes back");
    // A node whose kubelet stopped posting status is unreachable rather than not ready.
    set_ready(&s, "n", "Unknown");
    settle(&mut s, 1);
    assert_eq!(taints(&s, "n"), ["example.com/own:NoSchedule", &format!("{UNREACHABLE}:NoSchedule")]);
    // A node created Ready never carries it.
    s.cluster().create_obj(node("up", Some("True"), json!({}))).unwrap();
    settle(&mut s, 1);
    assert!(taints(&s, "up").is_empty(), "{:?}", taints(&s, "up"));
}

#[test]
fn kube_scheduler_does_not_place_a_pod_on_a_node_that_is_not_ready_yet() {
    let mut s = sim();
    s.cluster().create_obj(node("n", None, json!({}))).unwrap();
    s.cluster().create_obj(pod("p", json!({}))).unwrap();
    settle(&mut s, 10);
    let p = get_pod(&s, "p");
    assert_eq!((node_name(&p), phase(&p)), (None, "Pending"), "{p:?}");
    let message = p.status.as_ref().and_then(|st| st.conditions.as_ref()).and_then(|cs| cs[0].message.clone());
    assert_eq!(
        message.as_deref(),
        Some("0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."),
    );
    set_ready(&s, "n", "True");
    settle(&mut s, 1);
    let p = get_pod(&s, "p");
    assert_eq!((node_name(&p), phase(&p), condition(&p, "Ready")), (Some("n"), "Running", Some("True")), "{p:?}");
}

#[test]
fn kube_scheduler_sees_a_ready_node_go_not_ready_and_places_no_new_pod_there() {
    let mut s = sim();
    s.cluster().create_obj(node("n", Some("True"), json!({}))).unwrap();
    s.cluster().create_obj(pod("first", json!({}))).unwrap();
    settle(&mut s, 1);
    assert_eq!(phase(&get_pod(&s, "first")), "Running");
    set_ready(&s, "n", "False");
    settle(&mut s, 1);
    s.cluster().create_obj(pod("second", json!({}))).unwrap();
    settle(&mut s, 1);
    assert_eq!(node_name(&get_pod(&s, "second")), None, "the taint keeps new pods off");
    assert_eq!(node_name(&get_pod(&s, "first")), Some("n"), "NoSchedule evicts nothing");
    set_ready(&s, "n", "True");
    settle(&mut s, 1);
    assert_eq!(phase(&get_pod(&s, "second")), "Running");
}

#[test]
fn a_pod_that_tolerates_not_ready_is_placed_on_a_node_that_is_not_ready_and_starts_once_it_is() {
    let mut s = sim();
    s.cluster().create_obj(node("n", None, json!({}))).unwrap();
    let tolerates = json!({"tolerations": [{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}]});
    s.cluster().create_obj(pod("p", tolerates)).unwrap();
    settle(&mut s, 30);
    let p = get_pod(&s, "p");
    assert_eq!((node_name(&p), phase(&p), condition(&p, "PodScheduled")), (Some("n"), "Pending", Some("True")));
    assert!(p.status.as_ref().and_then(|st| st.start_time.as_ref()).is_none(), "not started: {p:?}");
    set_ready(&s, "n", "True");
    let ready_at = s.now();
    settle(&mut s, 1);
    let p = get_pod(&s, "p");
    assert_eq!((phase(&p), condition(&p, "Ready")), ("Running", Some("True")), "{p:?}");
    assert_eq!(p.status.as_ref().and_then(|st| st.start_time.as_ref()).map(|t| t.0), Some(ready_at));
}

#[test]
fn a_pod_bound_to_a_node_before_it_is_ready_starts_once_the_node_is_ready() {
    let mut s = sim();
    s.cluster().create_obj(node("n", None, json!({}))).unwrap();
    // Bound by a client, not kube-scheduler: spec.nodeName set at creation.
    s.cluster().create_obj(pod("p", json!({"nodeName": "n"}))).unwrap();
    settle(&mut s, 30);
    assert_ne!(phase(&get_pod(&s, "p")), "Running");
    set_ready(&s, "n", "True");
    settle(&mut s, 1);
    let p = get_pod(&s, "p");
    assert_eq!(
        (phase(&p), condition(&p, "PodScheduled"), condition(&p, "Ready")),
        ("Running", Some("True"), Some("True")),
        "{p:?}"
    );
}

#[test]
fn a_pod_bound_by_a_client_starts_at_once_on_a_ready_node_and_on_a_node_that_arrives_ready() {
    let mut s = sim();
    s.cluster().create_obj(node("up", Some("True"), json!({}))).unwrap();
    s.cluster().create_obj(pod("on-up", json!({"nodeName": "up"}))).unwrap();
    // Bound to a node that does not exist yet.
    s.cluster().create_obj(pod("early", json!({"nodeName": "later"}))).unwrap();
    settle(&mut s, 1);
    assert_eq!(phase(&get_pod(&s, "on-up")), "Running");
    assert_ne!(phase(&get_pod(&s, "early")), "Running");
    s.cluster().create_obj(node("later", Some("True"), json!({}))).unwrap();
    settle(&mut s, 1);
    assert_eq!(phase(&get_pod(&s, "early")), "Running");
}

#[test]
fn a_kwok_node_bound_to_before_the_kubelet_stand_in_marks_it_ready_runs_its_pods() {
    // What `kerf controller --cloud kwok` against `kerf serve` does: the Node is created not
    // Ready, and a pod may be bound to it in the same instant.
    let mut s = sim();
    s.cluster().create_obj(node("kwok-a", None, json!({"providerID": "kwok://kwok-a"}))).unwrap();
    s.cluster().create_obj(pod("bound", json!({"nodeName": "kwok-a"}))).unwrap();
    s.cluster().create_obj(pod("pending", json!({}))).unwrap();
    settle(&mut s, 1);
    let n: Node = s.cluster().get_obj(None, "kwok-a").expect("node");
    assert!(kerf_scheduling::node::node_ready(&n));
    assert!(taints(&s, "kwok-a").is_empty(), "{:?}", taints(&s, "kwok-a"));
    for name in ["bound", "pending"] {
        let p = get_pod(&s, name);
        assert_eq!((node_name(&p), phase(&p)), (Some("kwok-a"), "Running"), "{p:?}");
    }
}

fn daemonset(name: &str, extra_spec: serde_json::Value) -> DaemonSet {
    let mut spec = json!({"containers": [{"name": "c", "image": "i"}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-system", "uid": format!("uid-{name}")},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    }))
    .expect("daemonset")
}

#[test]
fn daemonset_pods_wait_for_the_node_to_be_ready_unless_they_tolerate_not_ready() {
    let mut s = sim();
    s.cluster().create_obj(daemonset("plain", json!({}))).unwrap();
    s.cluster().create_obj(daemonset("cni", json!({"tolerations": [{"operator": "Exists"}]}))).unwrap();
    s.cluster().create_obj(node("n", None, json!({}))).unwrap();
    settle(&mut s, 10);
    let on_node = |s: &Simulation<SimProvider>| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = s
            .cluster()
            .list_objs::<Pod>()
            .iter()
            .map(|p| (p.metadata.generate_name.clone().unwrap_or_default(), phase(p).to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(on_node(&s), [("cni-".to_string(), "Pending".to_string())], "only the pod tolerating everything");
    set_ready(&s, "n", "True");
    settle(&mut s, 1);
    assert_eq!(
        on_node(&s),
        [("cni-".to_string(), "Running".to_string()), ("plain-".to_string(), "Running".to_string())]
    );
}

#[test]
fn startup_and_registration_taints_are_untouched_by_the_node_lifecycle() {
    let mut s = sim();
    let spec = json!({"taints": [
        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        {"key": "example.com/agent-not-ready", "effect": "NoSchedule"},
        {"key": NOT_READY, "effect": "NoExecute"}
    ]});
    s.cluster().create_obj(node("n", None, spec)).unwrap();
    settle(&mut s, 1);
    set_ready(&s, "n", "True");
    settle(&mut s, 1);
    assert_eq!(
        taints(&s, "n"),
        [
            "karpenter.sh/unregistered:NoExecute".to_string(),
            "example.com/agent-not-ready:NoSchedule".to_string(),
            format!("{NOT_READY}:NoExecute")
        ]
    );
}
