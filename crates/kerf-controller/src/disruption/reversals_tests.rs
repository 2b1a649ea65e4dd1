//! Reversal holds kept on the NodeClaims and watches kept on the NodePools: a restarted
//! controller, which knows only what the cluster's objects say, still leaves a reversed
//! consolidation's nodes alone, and still sees a consolidation it was watching undone.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kerf_api::{NodeClaim, labels};

use crate::testkit::*;

/// A pending pod of ReplicaSet `web`.
fn web_pod(name: &str) -> Pod {
    let mut p = pending_pod(name, "1");
    p.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web".into(),
        uid: "web-uid".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    p
}

fn hold(h: &Harness, claim: &str) -> Option<String> {
    let c: NodeClaim = h.api.one(None, claim)?;
    c.metadata.annotations?.get(labels::CONSOLIDATION_REVERSED).cloned()
}

/// A cluster with one node, `n1` of claim `first`, running web's pod `a`.
fn web_on_one_node() -> (Harness, String) {
    let mut h = Harness::new(FakeCloud::with_types(vec![instance_type("small", "2", "8Gi", 0.10)]));
    h.api.put(node_pool("default"));
    h.api.put(web_pod("a"));
    h.settle();
    h.advance(Duration::from_secs(1));
    let first = h.claims()[0].name().to_string();
    kubelet_joins(&h.api, &first, "n1", true);
    h.settle();
    bind(&h.api, "a", "n1");
    h.settle();
    (h, first)
}

/// A consolidation (of a node already gone, `default-gone0`) moved web's pods and launched
/// `first` as its replacement: it is being watched.
fn watch_web_moved_onto(h: &mut Harness, first: &str) {
    h.mgr.disruption.reversals.watch(
        ["default-gone0".to_string()],
        ["default".to_string()],
        BTreeSet::from(["default/ReplicaSet/web".to_string()]),
        vec![first.to_string()],
        h.now,
        "its 2 pod(s) fit on other nodes",
    );
}

#[test]
fn a_reversed_consolidations_nodes_stay_held_back_after_a_restart_until_the_workload_shrinks() {
    let (mut h, first) = web_on_one_node();
    // A consolidation moved web's pods and launched `first` as its replacement; then another
    // web pod needs a node of its own: the provisioner's launch undoes the decision.
    watch_web_moved_onto(&mut h, &first);
    h.api.put(web_pod("b"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.mgr.consolidation_reversals().len(), 1);
    let second = h.claims().into_iter().map(|c| c.name().to_string()).find(|c| *c != first).expect("a second claim");
    // Both nodes of the undone decision carry the hold.
    for c in [&first, &second] {
        let v = hold(&h, c).unwrap_or_else(|| panic!("{c} carries no hold"));
        assert!(v.starts_with("undone "), "{v}");
    }
    // The NodePool's event names the claim launched and the decision's time as the hold does
    // (readers such as `kerf top` match the two by them).
    let events = h.events("ConsolidationReversed");
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!((e.kind, e.name.as_str(), e.type_), (kerf_api::nodepool::KIND, "default", "Warning"));
    let held = hold(&h, &second).expect("the hold");
    let decided = held.split_once(" decided ").map(|(_, d)| d).expect("its decision's time");
    assert!(e.message.contains(&format!("NodeClaim {second} launched")), "{}", e.message);
    assert!(e.message.contains(&format!("decided at {decided} moved")), "{} vs {held}", e.message);
    kubelet_joins(&h.api, &second, "n2", true);
    h.settle();
    bind(&h.api, "b", "n2");
    h.settle();

    // A new process, past consolidateAfter and the launch guard: the holds still apply.
    h.restart();
    h.advance(Duration::from_secs(10 * 60));
    for node in ["n1", "n2"] {
        let why = h.mgr.disruption_blocked().get(node).cloned().unwrap_or_default();
        assert!(why.contains("was undone"), "{node}: {why:?}");
    }
    assert!(h.mgr.consolidation_reversals().is_empty(), "the records themselves are the old process's");

    // The workload shrinks: the hold is lifted and taken off the claims.
    h.api.remove::<Pod>(Some("default"), "b");
    h.advance(Duration::from_secs(1));
    for c in [&first, &second] {
        assert_eq!(hold(&h, c), None, "{c}");
        let claim: NodeClaim = h.api.one(None, c).unwrap();
        assert_eq!(h.mgr.disruption.reversals.held_back(&claim, h.mgr.disruption.workload_shrank_at), None);
    }
    // ... and stays off for the next process.
    h.restart();
    let claim: NodeClaim = h.api.one(None, &first).unwrap();
    assert_eq!(h.mgr.disruption.reversals.held_back(&claim, None), None);
}

fn watches(h: &Harness) -> Option<String> {
    let p: kerf_api::NodePool = h.api.one(None, "default")?;
    p.metadata.annotations?.get(labels::CONSOLIDATION_WATCHES).cloned()
}

#[test]
fn a_controller_restarted_while_a_consolidation_settles_still_sees_it_undone() {
    let (mut h, first) = web_on_one_node();
    // A consolidation of a node that is already gone moved web's pods onto `first`.
    watch_web_moved_onto(&mut h, &first);
    h.mgr.disruption.reversals.finished(&["default-gone0".to_string()], h.now, false);
    h.advance(Duration::from_secs(1));
    let kept = watches(&h).expect("the watch is kept on the NodePool");
    assert!(kept.contains("default/ReplicaSet/web") && kept.contains("default-gone0"), "{kept}");

    // The process dies; the next one reads the watch back, and a launch for web's pods within
    // the settle time is still the decision undone.
    h.restart();
    h.api.put(web_pod("b"));
    h.settle();
    h.advance(Duration::from_secs(1));
    let reversals = h.mgr.consolidation_reversals();
    assert_eq!(reversals.len(), 1, "the new process saw the reversal");
    assert_eq!(reversals[0].pods, vec!["default/b".to_string()]);
    assert!(hold(&h, &first).is_some_and(|v| v.starts_with("undone ")), "the replacement is held back");
    // The watch was used up: the NodePool no longer carries it.
    assert_eq!(watches(&h), None);
}

#[test]
fn a_watchs_settle_time_survives_a_restart_so_a_later_launch_undoes_nothing() {
    let mut h = Harness::new(FakeCloud::with_types(vec![instance_type("small", "2", "8Gi", 0.10)]));
    h.api.put(node_pool("default"));
    h.settle();
    h.mgr.disruption.reversals.watch(
        ["default-gone0".to_string()],
        ["default".to_string()],
        BTreeSet::from(["default/ReplicaSet/web".to_string()]),
        Vec::new(),
        h.now,
        "its 1 pod(s) fit on other nodes",
    );
    h.mgr.disruption.reversals.finished(&["default-gone0".to_string()], h.now, false);
    h.advance(Duration::from_secs(1));
    assert!(watches(&h).is_some());
    h.advance(crate::disruption::reversals::SETTLE + Duration::from_secs(5));
    h.restart();
    h.api.put(web_pod("b"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.mgr.consolidation_reversals().is_empty(), "a launch after the settle time undoes nothing");
}
