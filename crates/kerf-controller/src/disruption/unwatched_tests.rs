//! A settled cluster costs the disruption controller nothing: it is evaluated again only when
//! something that can change a decision changed.

use std::time::Duration;

use crate::testkit::*;

#[test]
fn a_settled_cluster_is_evaluated_again_only_when_something_that_can_change_a_decision_changes() {
    let cloud = FakeCloud::with_types(vec![
        instance_type("small", "2", "8Gi", 0.10),
        instance_type("large", "8", "32Gi", 0.40),
    ]);
    let mut h = Harness::new(cloud);
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "1"));
    h.run_on_first_claim("a", "n1");
    // Past consolidateAfter and the launch guard: consolidation has said what it has to say.
    h.advance(Duration::from_secs(10 * 60));
    let settled = h.mgr.disruption_evaluations();
    assert!(settled > 0);
    for _ in 0..60 {
        h.advance(Duration::from_secs(60));
    }
    assert_eq!(h.mgr.disruption_evaluations(), settled, "an hour with nothing changing");

    // The offerings change (no watch event says so): evaluated once, at the next check.
    h.cloud.all_unavailable(true);
    for _ in 0..10 {
        h.advance(Duration::from_secs(60));
    }
    assert_eq!(h.mgr.disruption_evaluations(), settled + 1);

    // A pod arrives on the node (a watch event): evaluated at once, and not again after.
    let mut b = pending_pod("b", "100m");
    b.spec.as_mut().unwrap().node_name = Some("n1".into());
    h.api.put(b);
    h.advance(Duration::from_secs(1));
    let after = h.mgr.disruption_evaluations();
    assert!(after > settled + 1);
    for _ in 0..30 {
        h.advance(Duration::from_secs(60));
    }
    assert!(
        h.mgr.disruption_evaluations() <= after + 1,
        "{} > {after} + 1 (consolidateAfter passing)",
        h.mgr.disruption_evaluations()
    );
}
