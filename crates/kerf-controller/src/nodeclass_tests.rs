//! Karpenter's NodeClassReady rule and the node class status controller.

use std::time::Duration;

use kerf_api::ec2nodeclass::{CONDITION_READY, EC2NodeClassStatus};
use kerf_api::nodepool::CONDITION_NODE_CLASS_READY;
use kerf_api::{Condition, EC2NodeClass, NodeClaim, NodePool};
use kerf_cloud::CloudError;

use crate::testkit::*;

fn small() -> FakeCloud {
    FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10)])
}

fn pool_condition(h: &Harness, pool: &str, type_: &str) -> Condition {
    let pool: NodePool = h.api.one(None, pool).unwrap();
    let status = pool.status.unwrap_or_default();
    status.conditions.into_iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition"))
}

fn failed_scheduling(h: &Harness) -> Vec<String> {
    h.events("FailedScheduling").into_iter().map(|e| e.message).collect()
}

#[test]
fn a_pool_whose_node_class_is_missing_launches_nothing_until_the_class_is_created() {
    let mut h = Harness::new(small());
    h.api.remove::<EC2NodeClass>(None, "default");
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.claims().is_empty());
    assert_eq!(failed_scheduling(&h), vec!["NodePool default: EC2NodeClass default not found"]);
    let class_ready = pool_condition(&h, "default", CONDITION_NODE_CLASS_READY);
    assert_eq!(
        (class_ready.status.as_str(), class_ready.reason.as_deref(), class_ready.message.as_deref()),
        ("False", Some("NodeClassNotFound"), Some("EC2NodeClass default not found"))
    );
    assert_eq!(pool_condition(&h, "default", "Ready").status, "False");

    // The node class is created: it is resolved, the pool becomes ready, the pod gets a node.
    h.api.put(node_class("default"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
    assert!(pool_condition(&h, "default", CONDITION_NODE_CLASS_READY).is_true());
    assert!(pool_condition(&h, "default", "Ready").is_true());
    assert_eq!(h.events("FailedScheduling").len(), 1);
}

#[test]
fn a_pool_whose_node_class_is_not_ready_names_the_class_and_its_ready_message() {
    let cloud = small();
    cloud.no_subnets(Some("SubnetSelector did not match any Subnets"));
    let mut h = Harness::new(cloud.clone());
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.claims().is_empty());
    let why = "EC2NodeClass default is not ready: SubnetSelector did not match any Subnets";
    assert_eq!(failed_scheduling(&h), vec![format!("NodePool default: {why}")]);
    let class_ready = pool_condition(&h, "default", CONDITION_NODE_CLASS_READY);
    assert_eq!((class_ready.reason.as_deref(), class_ready.message.as_deref()), (Some("NodeClassNotReady"), Some(why)));

    // The user fixes the selector: the class is resolved again and the pod gets its node.
    cloud.no_subnets(None);
    let mut class: EC2NodeClass = h.api.one(None, "default").unwrap();
    class.spec.subnet_selector_terms[0].tags.insert("fixed".into(), "yes".into());
    h.api.put(class);
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
}

#[test]
fn the_node_class_status_controller_writes_what_the_cloud_resolved() {
    let mut h = Harness::new(small());
    h.api.put(node_class("other"));
    h.settle();
    let class: EC2NodeClass = h.api.one(None, "other").unwrap();
    let status: EC2NodeClassStatus = class.status.unwrap();
    assert_eq!(status, ready_status());
    assert!(status.conditions.iter().any(|c| c.type_ == CONDITION_READY && c.is_true()));
    // Resolved once: nothing is written again while it does not change.
    let writes = h.api.writes();
    h.advance(Duration::from_secs(600));
    assert_eq!(h.api.writes(), writes);
}

#[test]
fn a_node_class_the_cloud_cannot_resolve_is_tried_again_thirty_seconds_later() {
    let cloud = small();
    let mut h = Harness::new(cloud.clone());
    h.settle();
    cloud.fail_next_resolve(CloudError::Other("throttled".into()));
    h.api.put(node_class("other"));
    let wake = h.settle();
    assert!(h.api.one::<EC2NodeClass>(None, "other").unwrap().status.is_none());
    assert_eq!(wake, Some(at(30)));
    h.advance_to(at(30));
    assert_eq!(h.api.one::<EC2NodeClass>(None, "other").unwrap().status, Some(ready_status()));
}

#[test]
fn a_node_class_whose_status_write_failed_is_written_when_the_reconciler_retries() {
    let mut h = Harness::new(small());
    h.settle();
    h.tolerate_errors = true;
    h.api.fail_next_write(kerf_api::cluster::ApiError::Other("the API server answered 500".into()));
    h.api.put(node_class("other"));
    h.settle();
    assert!(h.api.one::<EC2NodeClass>(None, "other").unwrap().status.is_none(), "the write failed");
    h.advance(Duration::from_secs(2));
    assert_eq!(h.api.one::<EC2NodeClass>(None, "other").unwrap().status, Some(ready_status()));
}

#[test]
fn a_static_pool_whose_node_class_is_missing_creates_no_nodeclaims() {
    let mut h = Harness::new(small());
    let mut pool = node_pool("fixed");
    pool.spec.replicas = Some(2);
    pool.spec.template.spec.node_class_ref.name = "gone".into();
    h.api.put(pool);
    h.settle();
    assert!(h.api.all::<NodeClaim>().is_empty());
    assert_eq!(pool_condition(&h, "fixed", "Ready").message.as_deref(), Some("EC2NodeClass gone not found"));
}

#[test]
fn a_node_class_deleted_and_created_again_alike_between_two_passes_is_resolved_again() {
    // What a restarted API server without persistence looks like to the controllers: the class
    // they resolved is gone and one of the same name and spec, without status, takes its place
    // (the relist delivers both changes at once).
    let mut h = Harness::new(small());
    h.api.put(node_pool("default"));
    h.settle();
    h.api.remove::<EC2NodeClass>(None, "default");
    h.api.put(node_class("default"));
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.api.one::<EC2NodeClass>(None, "default").unwrap().status, Some(ready_status()));
    assert_eq!(h.claims().len(), 1, "the pool launches for the pending pod: {:?}", failed_scheduling(&h));
}
