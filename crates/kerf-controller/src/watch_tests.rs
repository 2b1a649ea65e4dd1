//! A failed watch leaves the controllers' view stale until it lists again: the disruption
//! controller takes no voluntary decision on such a view (an Underutilized decision taken
//! during a watch outage can go past its NodePool's budget, unaware of nodes already going).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_api::cluster::Object;
use kerf_api::{NodeClaim, labels};

use crate::testkit::*;
use kerf_api::cluster::WatchEvent;

fn disrupted(h: &Harness) -> bool {
    let tainted = h
        .api
        .one::<Node>(None, "n1")
        .and_then(|n| n.spec)
        .and_then(|s| s.taints)
        .into_iter()
        .flatten()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY);
    let claim_going = h.claims().iter().all(|c| c.metadata.deletion_timestamp.is_some());
    tainted || claim_going || h.api.one::<Node>(None, "n1").is_none()
}

/// Lets `minutes` pass in 5-second steps (timers fire as they come due).
fn run_for(h: &mut Harness, minutes: u64) {
    for _ in 0..minutes * 12 {
        h.advance(Duration::from_secs(5));
    }
}

#[test]
fn no_voluntary_disruption_on_a_view_a_failed_watch_left_stale_and_decisions_resume_after_the_relist() {
    let mut h = Harness::new(FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10)]));
    let mut pool = node_pool("default");
    pool.spec.disruption.consolidate_after = kerf_api::NillableDuration::from_secs(60);
    h.api.put(pool);
    h.api.put(pending_pod("a", "1"));
    let claim = h.run_on_first_claim("a", "n1");

    // The watches fail; meanwhile the pod leaves and a do-not-disrupt pod takes its place, and
    // the controllers see neither. Their view: one pod on n1, as before.
    h.mgr.watches_interrupted();
    h.api.remove::<Pod>(Some("default"), "a");
    h.api.drain();
    let mut guarded = pending_pod("guarded", "1");
    guarded.metadata.annotations = Some([(labels::DO_NOT_DISRUPT.to_string(), "true".to_string())].into());
    h.api.put(guarded);
    h.api.drain();
    bind(&h.api, "guarded", "n1");
    h.api.drain();
    // The pod the controllers know of goes too (its delete is seen, the new pod is not): n1
    // looks empty, but no decision is taken on that view.
    h.mgr.observe(&WatchEvent::Deleted(pending_pod("a", "1").into_any()));
    run_for(&mut h, 10);
    assert!(!disrupted(&h), "n1 was disrupted on a stale view: {:?}", h.events("DisruptionTerminating"));

    // The relist shows the do-not-disrupt pod: n1 is kept for good.
    for p in h.api.all::<Pod>() {
        h.mgr.observe(&WatchEvent::Applied(p.into_any()));
    }
    h.mgr.watches_resynced();
    run_for(&mut h, 10);
    assert!(!disrupted(&h), "n1 runs a do-not-disrupt pod");
    assert!(h.mgr.disruption_blocked().get("n1").is_some_and(|why| why.contains(labels::DO_NOT_DISRUPT)));

    // With the watches healthy, a node that does empty goes (decisions were only held back).
    h.api.remove::<Pod>(Some("default"), "guarded");
    run_for(&mut h, 10);
    assert!(disrupted(&h), "the empty n1 is disrupted once the view is complete: {:?}", h.mgr.disruption_blocked());
    assert!(h.claims().iter().all(|c: &NodeClaim| c.name() == claim || c.metadata.deletion_timestamp.is_some()));
}
