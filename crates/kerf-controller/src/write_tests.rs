//! How the controllers write (see [`crate::patches`]): what another actor changes between a
//! controller's read and its write stays, and is not a conflict to retry, unless the write
//! replaces a list others edit too, which is refused until the controller has seen the change.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED};
use kerf_api::{NodeClaim, NodePool, labels};

use crate::testkit::*;

fn cloud() -> FakeCloud {
    FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10)])
}

/// A claim for pool `default` as the provisioner creates it (`finalized`: with kerf's finalizer).
fn claim(name: &str, finalized: bool) -> NodeClaim {
    let mut c = crate::tests::claim(name, vec![]);
    c.metadata.finalizers = finalized.then(|| vec![labels::TERMINATION_FINALIZER.to_string()]);
    c
}

/// The controllers take in the watch events so far, without reconciling.
fn deliver(h: &mut Harness) {
    for e in h.api.drain() {
        h.mgr.observe(&e);
    }
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

#[test]
fn a_label_a_user_adds_to_a_claim_before_its_launch_is_recorded_stays_and_the_launch_is_recorded() {
    let mut h = Harness::new(cloud());
    h.api.put(claim("default-aaaaa", true));
    deliver(&mut h);
    // A user labels the claim; the controllers have not seen it when they record the launch.
    let mut c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    c.metadata.labels.as_mut().unwrap().insert("team".into(), "blue".into());
    h.api.put_unseen(c);
    h.settle();
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert_eq!(label(&c.metadata, "team"), Some("blue"), "the user's label stays");
    assert_eq!(label(&c.metadata, labels::INSTANCE_TYPE), Some("small"), "the launch's labels are written");
    assert!(c.is_condition_true(CONDITION_LAUNCHED), "the status write is no conflict");
    assert_eq!(c.provider_id(), Some("fake:///test-zone-a/i-0001"));
    assert_eq!(h.cloud.launched(), 1);
}

#[test]
fn a_label_a_user_adds_to_a_node_before_it_is_initialized_stays_beside_the_initialized_label() {
    let mut h = Harness::new(cloud());
    h.api.put(claim("default-aaaaa", true));
    h.settle();
    kubelet_joins(&h.api, "default-aaaaa", "n1", false);
    h.settle();
    // The node turns Ready and the controllers see it; then a user labels it, unseen.
    let mut node: Node = h.api.one(None, "n1").unwrap();
    node.status.as_mut().unwrap().conditions =
        Some(vec![NodeCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() }]);
    h.api.put(node);
    deliver(&mut h);
    let mut node: Node = h.api.one(None, "n1").unwrap();
    node.metadata.labels.as_mut().unwrap().insert("team".into(), "blue".into());
    h.api.put_unseen(node);
    h.settle();
    let node: Node = h.api.one(None, "n1").unwrap();
    assert_eq!(label(&node.metadata, "team"), Some("blue"), "the user's label stays");
    assert_eq!(label(&node.metadata, labels::INITIALIZED), Some("true"));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert!(c.is_condition_true(CONDITION_INITIALIZED));
}

#[test]
fn a_nodepool_status_write_keeps_a_spec_change_the_controllers_have_not_seen_and_is_no_conflict() {
    let mut h = Harness::new(cloud());
    h.api.put(node_pool("default"));
    h.settle();
    assert_eq!(h.api.one::<NodePool>(None, "default").unwrap().status.unwrap().nodes, Some(0));
    // A claim of the pool launches (its capacity changes the pool's status) while a user's
    // change of the pool's weight has not reached the controllers.
    h.api.put(claim("default-aaaaa", true));
    deliver(&mut h);
    let mut pool: NodePool = h.api.one(None, "default").unwrap();
    pool.spec.weight = Some(7);
    h.api.put_unseen(pool);
    h.settle();
    let pool: NodePool = h.api.one(None, "default").unwrap();
    assert_eq!(pool.spec.weight, Some(7), "the user's spec change stays");
    assert_eq!(pool.status.unwrap().nodes, Some(1), "the status is written at once");
}

#[test]
fn a_finalizer_another_controller_adds_before_kerf_adds_its_own_is_kept_the_write_waits_to_see_it() {
    let mut h = Harness::new(cloud());
    h.api.put(claim("default-aaaaa", false));
    deliver(&mut h);
    let mut c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    c.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    h.api.put_unseen(c);
    h.settle();
    // The finalizers are replaced whole: written over a version kerf has not seen, the other
    // controller's would be lost, so the write is refused and nothing launches yet.
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    assert_eq!(c.metadata.finalizers, Some(vec!["example.com/keep".to_string()]));
    assert_eq!(h.cloud.launched(), 0);
    // Once the watch delivers the change, the retry adds kerf's beside it.
    h.api.put(c);
    h.advance(Duration::from_secs(1));
    let c: NodeClaim = h.api.one(None, "default-aaaaa").unwrap();
    let both = vec!["example.com/keep".to_string(), labels::TERMINATION_FINALIZER.to_string()];
    assert_eq!(c.metadata.finalizers, Some(both));
    assert!(c.is_condition_true(CONDITION_LAUNCHED));
}
