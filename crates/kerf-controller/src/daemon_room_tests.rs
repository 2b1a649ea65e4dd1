//! Room for DaemonSet pods: a pod kube-scheduler bound into the room a launched node kept for
//! its DaemonSet pod is evicted once the DaemonSet pod has waited [`GRACE`], with events and a
//! record; pods of higher priority or marked do-not-disrupt are never taken (a warning says the
//! pod cannot fit), and a DaemonSet created after the node was launched is left alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::daemon_room::GRACE;
use crate::testkit::*;

/// The pod the DaemonSet controller makes for `set` on `node`: owned by the set, pinned to the
/// node by a `metadata.name` term, pending.
fn daemon_pod(set: &str, node: &str, cpu: &str) -> Pod {
    let mut pod = pending_pod(&format!("{set}-{node}"), cpu);
    pod.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        name: set.into(),
        uid: format!("uid-{set}"),
        controller: Some(true),
        ..Default::default()
    }]);
    let pin =
        NodeSelectorRequirement { key: "metadata.name".into(), operator: "In".into(), values: Some(vec![node.into()]) };
    pod.spec.as_mut().unwrap().affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm { match_fields: Some(vec![pin]), ..Default::default() }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    pod
}

fn exists(h: &Harness, pod: &str) -> bool {
    h.api.one::<Pod>(Some("default"), pod).is_some_and(|p| p.metadata.deletion_timestamp.is_none())
}

/// A node `n1` (2 CPU less 100m) launched for pod `a` (1 CPU) with room for the DaemonSet
/// `agent` (500m), `a` bound there, then pod `x` (600m, created later) bound there by someone
/// else: the agent's pod, created last, is 200m short.
fn room_taken(agent_first: bool, x: impl FnOnce(&mut Pod)) -> Harness {
    let mut h = Harness::new(FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10)]));
    h.api.put(node_pool("default"));
    if agent_first {
        h.api.put(daemonset("agent", "500m"));
    }
    h.api.put(pending_pod("a", "1"));
    let claim = h.run_on_first_claim("a", "n1");
    assert_eq!(h.claims().len(), 1, "{claim}");
    h.advance(Duration::from_secs(1));
    if !agent_first {
        h.api.put(daemonset("agent", "500m"));
    }
    let mut intruder = pending_pod("x", "600m");
    x(&mut intruder);
    h.api.put(intruder);
    bind(&h.api, "x", "n1");
    h.api.put(daemon_pod("agent", "n1", "500m"));
    h.settle();
    h
}

#[test]
fn a_pod_bound_into_a_daemonset_pods_room_is_evicted_after_the_grace() {
    let mut h = room_taken(true, |_| {});
    h.advance(GRACE - Duration::from_secs(2));
    assert!(exists(&h, "x"), "nothing is evicted within the grace");
    h.advance(Duration::from_secs(3));
    assert!(!exists(&h, "x"), "the pod that took the room is evicted");
    assert!(exists(&h, "a"), "the pod the node was launched for stays");
    let made = h.events("DaemonSetRoomMade");
    assert_eq!(made.len(), 2, "one event on the pod, one on the node: {made:?}");
    assert!(made.iter().any(|e| e.kind == "Pod" && e.name == "default/agent-n1"), "{made:?}");
    assert!(made.iter().any(|e| e.kind == "Node" && e.name == "n1"), "{made:?}");
    assert!(made[0].message.contains("Evicted default/x from node n1"), "{}", made[0].message);
    let records = h.mgr.daemon_rooms();
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].node_pool.as_str(), records[0].evicted.clone()), ("default", vec!["default/x".to_string()]));
    // Done once: later passes take nothing more.
    h.advance(Duration::from_secs(60));
    assert!(exists(&h, "a"));
    assert_eq!(h.mgr.daemon_rooms().len(), 1);
}

#[test]
fn pods_of_higher_priority_or_marked_do_not_disrupt_are_never_taken() {
    let mut h = room_taken(true, |x| {
        x.metadata.annotations = Some([(kerf_api::labels::DO_NOT_DISRUPT.to_string(), "true".to_string())].into());
    });
    let mut a: Pod = h.api.one(Some("default"), "a").unwrap();
    a.spec.as_mut().unwrap().priority = Some(1000);
    h.api.put(a);
    h.settle();
    h.advance(GRACE + Duration::from_secs(1));
    h.advance(Duration::from_secs(60));
    assert!(exists(&h, "x") && exists(&h, "a"));
    assert!(h.mgr.daemon_rooms().is_empty());
    let warned = h.events("DaemonSetPodDoesNotFit");
    assert_eq!(warned.len(), 1, "warned once: {warned:?}");
    assert!(warned[0].message.contains("short of cpu"), "{}", warned[0].message);
}

#[test]
fn a_daemonset_created_after_the_node_was_launched_is_not_made_room_for() {
    let mut h = room_taken(false, |_| {});
    h.advance(GRACE + Duration::from_secs(1));
    h.advance(Duration::from_secs(60));
    assert!(exists(&h, "x"));
    assert!(h.mgr.daemon_rooms().is_empty());
    assert!(h.events("DaemonSetPodDoesNotFit").is_empty());
}
