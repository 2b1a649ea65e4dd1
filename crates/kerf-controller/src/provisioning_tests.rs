//! Provisioning behaviour end to end with the real scheduling core.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kerf_api::nodeclaim::CONDITION_LAUNCHED;
use kerf_api::{NodeClaim, NodePool, Operator, Taint, TaintEffect, labels};

use crate::testkit::*;

fn small_and_large() -> FakeCloud {
    FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10), instance_type("large", "8", "16Gi", 0.40)])
}

// ---- provisioning (with the real scheduling core) ----

fn pool_with(f: impl FnOnce(&mut NodePool)) -> NodePool {
    let mut pool = node_pool("default");
    f(&mut pool);
    pool
}

fn claim_label<'a>(c: &'a NodeClaim, key: &str) -> Option<&'a str> {
    c.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

#[test]
fn a_pending_pod_yields_one_nodeclaim_with_the_pools_labels_and_requirements() {
    let mut h = Harness::new(small_and_large());
    h.api.put(pool_with(|p| {
        p.spec.template.metadata.labels.insert("team".into(), "blue".into());
        p.spec.template.metadata.annotations.insert("example.com/owner".into(), "blue".into());
        p.spec.template.spec.requirements = vec![requirement(labels::CAPACITY_TYPE, Operator::In, &["on-demand"])];
        p.spec.template.spec.startup_taints = vec![Taint::new("example.com/boot", None, TaintEffect::NoSchedule)];
        p.metadata.uid = None;
    }));
    h.api.put(pending_pod("web-1", "1"));
    h.settle();
    assert!(h.claims().is_empty(), "the batch window is still open");
    h.advance(Duration::from_secs(1));

    let claims = h.claims();
    assert_eq!(claims.len(), 1);
    let c = &claims[0];
    assert!(c.name().starts_with("default-") && c.name().len() == "default-".len() + 5, "{}", c.name());
    assert_eq!(claim_label(c, labels::NODE_POOL), Some("default"));
    assert_eq!(claim_label(c, "team"), Some("blue"));
    assert_eq!(claim_label(c, labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(
        c.metadata.annotations.as_ref().and_then(|a| a.get("example.com/owner")).map(String::as_str),
        Some("blue")
    );
    let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("NodePool", "default"));
    assert!(c.spec.requirements.iter().any(|r| r.key == labels::CAPACITY_TYPE
        && r.operator == Operator::In
        && r.values == vec!["on-demand".to_string()]));
    let types = c.spec.requirements.iter().find(|r| r.key == labels::INSTANCE_TYPE).expect("instance types");
    let mut values = types.values.clone();
    values.sort();
    assert_eq!(values, vec!["large".to_string(), "small".to_string()]);
    assert_eq!(c.spec.resources.requests.get("cpu"), kerf_api::Quantity::parse("1").unwrap());
    assert_eq!(c.spec.startup_taints, vec![Taint::new("example.com/boot", None, TaintEffect::NoSchedule)]);
    assert!(c.is_condition_true(CONDITION_LAUNCHED), "launched in the same pass");
    assert_eq!(claim_label(c, labels::INSTANCE_TYPE), Some("small"));

    let nominated = h.events("Nominated");
    assert_eq!(nominated.len(), 1);
    assert_eq!(nominated[0].name, "default/web-1");
    assert_eq!(nominated[0].message, format!("Pod should schedule on: nodeclaim/{}", c.name()));
}

#[test]
fn nominated_pods_are_not_launched_twice_while_their_claim_launches() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
    let claim_name = h.claims()[0].name().to_string();

    // kube-scheduler keeps reporting the pod unschedulable while the node boots.
    let mut p: k8s_openapi::api::core::v1::Pod = h.api.one(Some("default"), "a").unwrap();
    p.metadata.annotations = Some([("touched".to_string(), "1".to_string())].into());
    h.api.put(p);
    h.advance(Duration::from_secs(20));
    assert_eq!(h.claims().len(), 1, "the nominated pod is not provisioned again");

    // A second pod that fits beside it lands on the same in-flight claim.
    h.api.put(pending_pod("b", "500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
    let nominations: Vec<_> = h.mgr.nominations().values().cloned().collect();
    assert_eq!(nominations, vec![claim_name.clone(), claim_name.clone()]);

    // The node joins, the pods bind, the nominations end.
    kubelet_joins(&h.api, &claim_name, "n1", true);
    h.settle();
    bind(&h.api, "a", "n1");
    bind(&h.api, "b", "n1");
    h.settle();
    assert!(h.mgr.nominations().is_empty());
    assert_eq!(h.claims().len(), 1);
}

#[test]
fn insufficient_capacity_deletes_the_claim_and_the_retry_launches_another_offering() {
    let cloud = small_and_large();
    cloud.no_capacity("small", "test-zone-a", "spot");
    let mut h = Harness::new(cloud);
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.claims().is_empty(), "the first claim hit insufficient capacity and was deleted");
    assert_eq!(h.events("InsufficientCapacityError").len(), 1);
    assert!(h.mgr.nominations().is_empty());

    h.advance(Duration::from_secs(1));
    let claims = h.claims();
    assert_eq!(claims.len(), 1);
    let c = &claims[0];
    assert!(c.is_condition_true(CONDITION_LAUNCHED));
    assert_eq!(claim_label(c, labels::INSTANCE_TYPE), Some("small"));
    assert_eq!(claim_label(c, labels::ZONE), Some("test-zone-b"));
    assert_eq!(claim_label(c, labels::CAPACITY_TYPE), Some("spot"));
}

#[test]
fn nodepool_limits_stop_launches() {
    let mut h = Harness::new(FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10)]));
    h.api.put(pool_with(|p| p.spec.limits = Some(res(&[("cpu", "4")]))));
    for name in ["a", "b", "c"] {
        h.api.put(pending_pod(name, "1500m"));
    }
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 2, "two 2-cpu nodes reach the 4-cpu limit");
    let failed = h.events("FailedScheduling");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].name, "default/c");

    // A later batch sees the claims' capacity in use and launches nothing.
    h.api.put(pending_pod("d", "1500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 2);
    let failed: Vec<String> = h.events("FailedScheduling").into_iter().map(|e| e.name).collect();
    assert_eq!(failed, vec!["default/c", "default/c", "default/d"]);
}

#[test]
fn unplaceable_pods_get_a_failed_scheduling_event_naming_the_missing_resource() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    let mut pod = pending_pod("eni", "1");
    let requests = pod.spec.as_mut().unwrap().containers[0].resources.as_mut().unwrap().requests.as_mut().unwrap();
    requests.insert(
        "vpc.amazonaws.com/pod-eni".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
    );
    h.api.put(pod);
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.claims().is_empty());
    let failed = h.events("FailedScheduling");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].type_, "Warning");
    assert!(failed[0].message.contains("vpc.amazonaws.com/pod-eni"), "{}", failed[0].message);
    assert!(failed[0].message.contains("default"), "{}", failed[0].message);
}

#[test]
fn pods_go_to_a_static_pools_in_flight_claims_instead_of_new_ones() {
    let mut h = Harness::new(small_and_large());
    h.api.put(pool_with(|p| {
        p.metadata.name = Some("fixed".into());
        p.spec.replicas = Some(2);
        p.spec.template.spec.requirements = vec![requirement(labels::INSTANCE_TYPE, Operator::In, &["large"])];
    }));
    h.settle();
    assert_eq!(h.claims().len(), 2);
    let static_claims: Vec<String> = h.claims().iter().map(|c| c.name().to_string()).collect();
    for i in 0..4 {
        h.api.put(pending_pod(&format!("p{i}"), "3"));
    }
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 2, "a static pool launches no claims for pods");
    let mut targets: Vec<String> = h.mgr.nominations().values().cloned().collect();
    targets.sort();
    targets.dedup();
    assert_eq!(targets, static_claims, "two 3-cpu pods on each 8-cpu node");
}

#[test]
fn provisioning_logs_found_computed_and_created_lines() {
    let logs = capture_logs(|| {
        let mut h = Harness::new(small_and_large());
        h.api.put(node_pool("default"));
        for i in 0..7 {
            h.api.put(pending_pod(&format!("p{i}"), "1500m"));
        }
        h.settle();
        h.advance(Duration::from_secs(1));
    });
    let line = |msg: &str| {
        logs.lines().find(|l| l.contains(msg)).unwrap_or_else(|| panic!("no line {msg:?} in:\n{logs}")).to_string()
    };
    let found = line("found provisionable pod(s)");
    assert!(
        found.contains("pods=default/p0, default/p1, default/p2, default/p3, default/p4 and 2 other(s)"),
        "{found}"
    );
    let computed = line("computed new nodeclaim(s) to fit pod(s)");
    assert!(computed.contains("pods=7"), "{computed}");
    let created = line("created nodeclaim");
    assert!(created.contains("NodePool=default") && created.contains("NodeClaim=default-"), "{created}");
    assert!(created.contains("instance-types="), "{created}");
    assert!(created.contains("requests={\"cpu\":"), "{created}");
}

#[test]
fn a_nodepool_whose_instance_types_cannot_be_listed_is_not_ready() {
    use kerf_api::{EC2NodeClass, NodePool as Pool};
    use kerf_cloud::{CloudError, CloudProvider};
    use std::sync::Arc;

    /// A cloud whose node class is never ready.
    #[derive(Clone, Default)]
    struct NotReady(FakeCloud);
    impl CloudProvider for NotReady {
        async fn create(&self, c: &NodeClaim) -> Result<NodeClaim, CloudError> {
            self.0.create(c).await
        }
        async fn delete(&self, c: &NodeClaim) -> Result<(), CloudError> {
            self.0.delete(c).await
        }
        async fn get(&self, id: &str) -> Result<NodeClaim, CloudError> {
            self.0.get(id).await
        }
        async fn list(&self) -> Result<Vec<std::sync::Arc<NodeClaim>>, CloudError> {
            self.0.list().await
        }
        async fn instance_types(
            &self,
            _: &Pool,
            _: Option<&EC2NodeClass>,
        ) -> Result<Vec<Arc<kerf_scheduling::InstanceType>>, CloudError> {
            Err(CloudError::NodeClassNotReady("EC2NodeClass default not found".into()))
        }
        async fn resolve_node_class(&self, c: &EC2NodeClass) -> Result<kerf_cloud::NodeClassResolution, CloudError> {
            self.0.resolve_node_class(c).await
        }
        async fn is_drifted(&self, _: &NodeClaim, _: Option<&EC2NodeClass>) -> Result<Option<String>, CloudError> {
            Ok(None)
        }
        fn name(&self) -> &'static str {
            "not-ready"
        }
    }

    let api = TestApi::default();
    let mut mgr = crate::Manager::new(NotReady::default(), crate::Options::default());
    api.put(ready_node_class("default"));
    api.put(node_pool("default"));
    api.put(pending_pod("a", "1"));
    let mut run = |now| {
        for e in api.drain() {
            mgr.observe(&e);
        }
        let wake = block_on(mgr.reconcile(&api, now));
        assert!(mgr.take_errors().is_empty());
        wake
    };
    run(at(0));
    run(at(1));
    run(at(1));
    let pool: NodePool = api.one(None, "default").unwrap();
    let ready = pool.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.message.as_deref(), Some("node class not ready: EC2NodeClass default not found"));
    assert!(api.all::<NodeClaim>().is_empty());
    let failed: Vec<_> = api.recorded().into_iter().filter(|e| e.reason == "FailedScheduling").collect();
    assert_eq!(failed.len(), 1);
}

#[test]
fn a_claim_that_cannot_be_created_is_retried_under_a_new_name() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    // The name the seeded generator picks first is taken by a claim the watch has not shown yet.
    let first = format!("default-{}", crate::util::SplitMix64::new(42).suffix(5));
    let template = node_pool("default").spec.template;
    let mut blocker = kerf_api::NodeClaim {
        api_version: kerf_api::nodeclaim::API_VERSION.into(),
        kind: kerf_api::nodeclaim::KIND.into(),
        metadata: Default::default(),
        spec: kerf_api::nodeclaim::NodeClaimSpec {
            taints: vec![],
            startup_taints: vec![],
            requirements: vec![],
            resources: Default::default(),
            node_class_ref: template.spec.node_class_ref.clone(),
            expire_after: template.spec.expire_after,
            termination_grace_period: None,
        }
        .into(),
        status: None,
    };
    blocker.metadata.name = Some(first.clone());
    h.api.put_unseen(blocker);
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.mgr.nominations().is_empty(), "the create failed");
    h.advance(Duration::from_secs(1));
    h.advance(Duration::from_secs(1));
    let created: Vec<String> = h.claims().into_iter().map(|c| c.name().to_string()).filter(|n| *n != first).collect();
    assert_eq!(created.len(), 1);
    assert_eq!(h.mgr.nominations().values().cloned().collect::<Vec<_>>(), created);
}

#[test]
fn a_nomination_ends_a_batch_window_after_its_claim_initializes() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    let claim = h.claims()[0].name().to_string();
    kubelet_joins(&h.api, &claim, "n1", true);
    h.advance(Duration::from_secs(5));
    assert!(h.claims()[0].is_condition_true(kerf_api::nodeclaim::CONDITION_INITIALIZED));
    // kube-scheduler has not bound the pod: the nomination holds for 10s after initialization.
    assert_eq!(h.last_wake, Some(crate::util::after(h.now, Duration::from_secs(10))));
    h.advance(Duration::from_secs(9));
    assert_eq!(h.mgr.nominations().len(), 1);
    h.advance(Duration::from_secs(1));
    assert!(h.mgr.nominations().is_empty());
    // Provisioned again, the pod fits on the node that now exists: nothing new is launched.
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
    assert!(h.events("FailedScheduling").is_empty());
}

#[test]
fn a_pod_nominated_to_a_claim_keeps_its_room_on_the_initialized_node_until_it_binds() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    kubelet_joins(&h.api, &claim, "n1", true);
    h.advance(Duration::from_secs(2));
    assert!(h.claims()[0].is_condition_true(kerf_api::nodeclaim::CONDITION_INITIALIZED));
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some("n1"));
    // kube-scheduler has not bound `a` yet. A small node has 1900m: b (1500m) fits there only
    // if a's room is taken for b, and then one of them would find no room at all.
    h.api.put(pending_pod("b", "1500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 2, "b gets a node of its own");
    assert_ne!(nominated_node_name(&h, "b").as_deref(), Some("n1"));
}

#[test]
fn a_rejected_nodeclaim_tells_its_pods_why_and_does_not_stop_the_controllers() {
    let mut h = Harness::new(small_and_large());
    h.api.reject_creates::<NodeClaim>("spec.requirements: too many values");
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.claims().is_empty());
    let failed = h.events("FailedScheduling");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].name, "default/a");
    assert_eq!(
        failed[0].message,
        "NodePool default: the NodeClaim for this pod was rejected: spec.requirements: too many values"
    );
}

#[test]
fn pods_that_fit_nowhere_are_tried_again_a_minute_later() {
    let cloud = small_and_large();
    cloud.all_unavailable(true);
    let mut h = Harness::new(cloud.clone());
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "1"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert!(h.claims().is_empty());
    assert_eq!(h.events("FailedScheduling").len(), 1);
    assert_eq!(h.last_wake, Some(at(61)));

    // The capacity comes back; nothing in the cluster changes, the retry finds it.
    cloud.all_unavailable(false);
    h.advance_to(at(61));
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
    assert_eq!(h.events("FailedScheduling").len(), 1);
    assert_eq!(h.mgr.nominations().len(), 1);
}

// ---- volume topology ----

mod volumes {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
        PersistentVolumeSpec, Pod, TopologySelectorLabelRequirement, TopologySelectorTerm, Volume, VolumeNodeAffinity,
    };
    use k8s_openapi::api::storage::v1::StorageClass;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod_with_claim(name: &str, claim: &str) -> Pod {
        let mut p = pending_pod(name, "1");
        p.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Default::default()
        }]);
        p
    }

    fn pvc(name: &str, class: Option<&str>, volume: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: class.map(str::to_string),
                volume_name: volume.map(str::to_string),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// A WaitForFirstConsumer class limited to `zone`.
    fn class(name: &str, zone: &str, default: bool) -> StorageClass {
        let annotations =
            default.then(|| [("storageclass.kubernetes.io/is-default-class".to_string(), "true".to_string())].into());
        StorageClass {
            metadata: ObjectMeta { name: Some(name.into()), annotations, ..Default::default() },
            provisioner: "ebs.csi.aws.com".into(),
            volume_binding_mode: Some("WaitForFirstConsumer".into()),
            allowed_topologies: Some(vec![TopologySelectorTerm {
                match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                    key: labels::ZONE.into(),
                    values: vec![zone.into()],
                }]),
            }]),
            ..Default::default()
        }
    }

    fn launched_zone(h: &mut Harness) -> String {
        h.settle();
        h.advance(Duration::from_secs(1));
        let claims = h.claims();
        assert_eq!(claims.len(), 1);
        let zone_req = claims[0].spec.requirements.iter().find(|r| r.key == labels::ZONE).expect("zone requirement");
        assert_eq!(zone_req.values.len(), 1, "{zone_req:?}");
        assert_eq!(claim_label(&claims[0], labels::ZONE), Some(zone_req.values[0].as_str()));
        zone_req.values[0].clone()
    }

    #[test]
    fn a_bound_volumes_node_affinity_zone_constrains_the_new_claim() {
        let mut h = Harness::new(small_and_large());
        h.api.put(node_pool("default"));
        h.api.put(PersistentVolume {
            metadata: ObjectMeta { name: Some("pv-1".into()), ..Default::default() },
            spec: Some(PersistentVolumeSpec {
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(k8s_openapi::api::core::v1::NodeSelector {
                        node_selector_terms: vec![k8s_openapi::api::core::v1::NodeSelectorTerm {
                            match_expressions: Some(vec![k8s_openapi::api::core::v1::NodeSelectorRequirement {
                                key: labels::ZONE.into(),
                                operator: "In".into(),
                                values: Some(vec!["test-zone-b".into()]),
                            }]),
                            match_fields: None,
                        }],
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        });
        h.api.put(pvc("data-0", Some("gp3"), Some("pv-1")));
        h.api.put(pod_with_claim("db-0", "data-0"));
        assert_eq!(launched_zone(&mut h), "test-zone-b");
    }

    #[test]
    fn an_unbound_wait_for_first_consumer_claim_is_constrained_by_allowed_topologies() {
        let mut h = Harness::new(small_and_large());
        h.api.put(node_pool("default"));
        h.api.put(class("zonal-b", "test-zone-b", false));
        h.api.put(pvc("data-0", Some("zonal-b"), None));
        h.api.put(pod_with_claim("db-0", "data-0"));
        assert_eq!(launched_zone(&mut h), "test-zone-b");
    }

    #[test]
    fn a_claim_without_storage_class_name_uses_the_default_class() {
        let mut h = Harness::new(small_and_large());
        h.api.put(node_pool("default"));
        h.api.put(class("other-a", "test-zone-a", false));
        h.api.put(class("standard-b", "test-zone-b", true));
        h.api.put(pvc("data-0", None, None));
        h.api.put(pod_with_claim("db-0", "data-0"));
        assert_eq!(launched_zone(&mut h), "test-zone-b");
    }

    fn assert_not_provisioned_and_told(h: &mut Harness, want: &str) {
        h.settle();
        h.advance(Duration::from_secs(1));
        assert!(h.claims().is_empty());
        let failed = h.events("FailedScheduling");
        assert_eq!(failed.len(), 1);
        assert!(failed[0].message.contains(want), "{}", failed[0].message);
    }

    #[test]
    fn a_pod_whose_persistent_volume_claim_is_missing_is_not_provisioned_for_and_told_why() {
        let mut h = Harness::new(small_and_large());
        h.api.put(node_pool("default"));
        h.api.put(pod_with_claim("db-0", "data-0"));
        assert_not_provisioned_and_told(&mut h, "persistentvolumeclaim \"data-0\" not found");
    }

    #[test]
    fn a_pod_whose_unbound_claim_names_a_missing_storage_class_is_not_provisioned_for_and_told_why() {
        let mut h = Harness::new(small_and_large());
        h.api.put(node_pool("default"));
        h.api.put(pvc("data-0", Some("gone"), None));
        h.api.put(pod_with_claim("db-0", "data-0"));
        assert_not_provisioned_and_told(&mut h, "storageclass \"gone\" does not exist");
    }

    #[test]
    fn a_claim_with_an_empty_storage_class_name_ignores_the_default_class() {
        let mut h = Harness::new(small_and_large());
        h.api.put(node_pool("default"));
        h.api.put(class("standard-b", "test-zone-b", true));
        h.api.put(pvc("data-0", Some(""), None));
        h.api.put(pod_with_claim("db-0", "data-0"));
        h.settle();
        h.advance(Duration::from_secs(1));
        let claims = h.claims();
        assert_eq!(claims.len(), 1);
        assert!(!claims[0].spec.requirements.iter().any(|r| r.key == labels::ZONE), "{:?}", claims[0].spec);
    }
}

// ---- nominations written as status.nominatedNodeName ----

fn nominated_node_name(h: &Harness, pod: &str) -> Option<String> {
    let p: k8s_openapi::api::core::v1::Pod = h.api.one(Some("default"), pod).unwrap();
    p.status.and_then(|s| s.nominated_node_name)
}

#[test]
fn a_pod_nominated_to_a_launching_claim_gets_its_node_as_nominated_node_name_once_the_node_exists() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    assert_eq!(nominated_node_name(&h, "a"), None, "no node to name while the claim launches");

    kubelet_joins(&h.api, &claim, "n1", true);
    h.settle();
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some("n1"));

    // Bound there: nothing more is written.
    let writes = h.api.writes();
    bind(&h.api, "a", "n1");
    h.settle();
    assert!(h.mgr.nominations().is_empty());
    let p: k8s_openapi::api::core::v1::Pod = h.api.one(Some("default"), "a").unwrap();
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("n1"));
    assert_eq!(h.api.writes(), writes, "no write for a bound pod");
}

/// A 500m pod `a`, pending, and the NodeClaim launched for it (not registered yet): the harness
/// and the claim's name.
fn pod_a_on_a_launching_claim() -> (Harness, String) {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    let claim = h.claims()[0].name().to_string();
    (h, claim)
}

/// Reconciles `passes` times, delivering every watch event except those of pods (a watch that
/// lags behind the pods' changes); the writes sent meanwhile.
fn passes_with_pod_events_held_back(h: &mut Harness, passes: usize) -> usize {
    let before = h.api.writes_of::<k8s_openapi::api::core::v1::Pod>();
    for _ in 0..passes {
        for e in h.api.drain() {
            let pod = matches!(&e, kerf_api::cluster::WatchEvent::Applied(kerf_api::cluster::AnyObject::Pod(_)));
            if !pod {
                h.mgr.observe(&e);
            }
        }
        h.now = crate::util::after(h.now, Duration::from_secs(1));
        h.api.set_now(h.now);
        crate::testkit::block_on(h.mgr.reconcile(&h.api, h.now));
        assert!(h.mgr.take_errors().is_empty());
    }
    h.api.writes_of::<k8s_openapi::api::core::v1::Pod>() - before
}

#[test]
fn a_nomination_is_sent_once_per_version_of_the_pod_however_long_the_watch_lags() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    // The node registers, Ready; the watch delivers it but not the pod's changes.
    kubelet_joins(&h.api, &claim, "n1", true);
    let writes = passes_with_pod_events_held_back(&mut h, 5);
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some("n1"));
    assert_eq!(writes, 1, "the nomination was written once");
    // Passes that still see the pod un-nominated do not write it again.
    let more = passes_with_pod_events_held_back(&mut h, 5);
    assert_eq!(more, 0, "no write while the watch has not delivered the pod's new version");
    // The watch catches up: the nomination it shows is kerf's, nothing to write.
    let writes = h.api.writes_of::<k8s_openapi::api::core::v1::Pod>();
    h.settle();
    assert_eq!(h.api.writes_of::<k8s_openapi::api::core::v1::Pod>(), writes);
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some("n1"));
}

#[test]
fn a_nomination_outlasts_a_watch_that_lags_behind_the_pod_and_lapses_a_window_after_the_pod_is_seen_carrying_it() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    let key = ("default".to_string(), "a".to_string());
    // The node joins, Ready, and the claim is initialized; the watch shows nothing of the pod
    // for 30 s (three batch windows): the nomination kerf wrote is not seen, the pod is not
    // provisioned again.
    kubelet_joins(&h.api, &claim, "n1", true);
    passes_with_pod_events_held_back(&mut h, 30);
    assert!(h.claims()[0].is_condition_true(kerf_api::nodeclaim::CONDITION_INITIALIZED));
    assert!(h.mgr.nominations().contains_key(&key), "held while the pod's nomination is not seen");
    assert_eq!(h.claims().len(), 1);
    // The watch catches up: the pod carries the nomination, still unbound. It lapses one
    // window (10 s) later.
    let p: k8s_openapi::api::core::v1::Pod = h.api.one(Some("default"), "a").unwrap();
    h.mgr.observe(&kerf_api::cluster::WatchEvent::Applied(kerf_api::cluster::AnyObject::Pod(std::sync::Arc::new(p))));
    h.settle();
    h.advance(Duration::from_secs(9));
    assert!(h.mgr.nominations().contains_key(&key));
    h.advance(Duration::from_secs(1));
    assert!(!h.mgr.nominations().contains_key(&key), "lapsed a window after it was seen");
    // Provisioned again, it fits on the node that exists: nothing new is launched.
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
}

#[test]
fn a_nomination_the_watch_never_shows_lapses_six_windows_after_its_node_is_initialized() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    let key = ("default".to_string(), "a".to_string());
    kubelet_joins(&h.api, &claim, "n1", true);
    // Initialized on the first of these passes (1 s in); 60 s later the nomination lapses.
    passes_with_pod_events_held_back(&mut h, 60);
    assert!(h.mgr.nominations().contains_key(&key));
    passes_with_pod_events_held_back(&mut h, 1);
    assert!(!h.mgr.nominations().contains_key(&key));
}

#[test]
fn a_nomination_refused_because_the_pod_changed_is_not_sent_again_until_the_watch_shows_the_change() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    // kube-scheduler binds the pod as soon as its node registers, before the controller's
    // watch shows either the bind or anything else about the pod.
    kubelet_joins(&h.api, &claim, "n1", true);
    bind(&h.api, "a", "n1");
    let pod_writes = |h: &Harness| h.api.writes_of::<k8s_openapi::api::core::v1::Pod>();
    let before = pod_writes(&h);
    passes_with_pod_events_held_back(&mut h, 6);
    let p: k8s_openapi::api::core::v1::Pod = h.api.one(Some("default"), "a").unwrap();
    assert_eq!(p.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()), None, "the bound version refused it");
    // One refused write, then none while the view is stale.
    assert_eq!(pod_writes(&h) - before, 1, "the refused nomination was sent once");
    // The watch catches up: the pod is bound, nothing is left to write.
    h.mgr.observe(&kerf_api::cluster::WatchEvent::Applied(kerf_api::cluster::AnyObject::Pod(std::sync::Arc::new(p))));
    h.settle();
    assert!(h.mgr.nominations().is_empty());
    assert_eq!(pod_writes(&h) - before, 1);
}

#[test]
fn kerf_clears_a_nomination_it_wrote_when_the_plan_changes_and_leaves_one_it_did_not_write() {
    let mut h = Harness::new(small_and_large());
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "500m"));
    // Nominated by someone else (kube-scheduler's preemption) to a node kerf does not manage.
    h.api.put(k8s_openapi::api::core::v1::Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("elsewhere".into()),
            ..Default::default()
        },
        ..Default::default()
    });
    let mut b = pending_pod("b", "100m");
    b.status.as_mut().unwrap().nominated_node_name = Some("elsewhere".into());
    h.api.put(b);
    h.settle();
    h.advance(Duration::from_secs(1));
    let first =
        h.claims().iter().find(|c| h.mgr.nominations().values().any(|n| n == c.name())).unwrap().name().to_string();
    kubelet_joins(&h.api, &first, "n1", true);
    h.settle();
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some("n1"));
    assert_eq!(nominated_node_name(&h, "b").as_deref(), Some("elsewhere"), "not kerf's to change");

    // The claim is deleted before the pod binds: the pod is planned onto a new claim, whose
    // node does not exist yet, so the node kerf named is no longer its expectation.
    let claim: NodeClaim = h.api.one(None, &first).unwrap();
    h.api.remove::<NodeClaim>(None, claim.name());
    h.api.remove::<k8s_openapi::api::core::v1::Node>(None, "n1");
    h.settle();
    h.advance(Duration::from_secs(2));
    assert_eq!(nominated_node_name(&h, "a"), None);
    assert!(h.mgr.nominations().contains_key(&("default".to_string(), "a".to_string())), "planned again");
}

#[test]
fn a_restarted_controller_takes_back_the_nominations_its_pods_carry_and_launches_nothing_more() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    // The node joins but is not Ready yet, so the claim stays in flight.
    kubelet_joins(&h.api, &claim, "n1", false);
    h.settle();
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some("n1"));

    // A new process: everything it knows comes from the cluster.
    h.restart();
    h.advance(Duration::from_secs(15));
    assert_eq!(h.claims().len(), 1, "no second claim for a pod nominated to an in-flight one");
    assert_eq!(h.mgr.nominations().values().cloned().collect::<Vec<_>>(), vec![claim]);
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some("n1"));
}

/// Pod `a` pending, planned onto a claim that launches (its node not registered); the cloud
/// names each claim's node after the claim in advance when `names_known`. The harness, and pod
/// `a`'s `status.nominatedNodeName` as it was each time a launch was asked for.
fn pod_a_on_a_claim_whose_node_name_is_known(names_known: bool) -> (Harness, Arc<Mutex<Vec<Option<String>>>>) {
    let cloud = small_and_large();
    if names_known {
        cloud.name_nodes_after_claims();
    }
    let h = Harness::new(cloud);
    let at_launch = Arc::new(Mutex::new(Vec::new()));
    let (api, seen) = (h.api.clone(), at_launch.clone());
    h.cloud.on_create(move |_| {
        let pod: Option<k8s_openapi::api::core::v1::Pod> = api.one(Some("default"), "a");
        seen.lock().unwrap().push(pod.and_then(|p| p.status?.nominated_node_name));
    });
    let mut h = h;
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("a", "500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    (h, at_launch)
}

#[test]
fn a_pod_is_nominated_to_the_name_its_claims_node_will_have_before_the_claim_launches() {
    let (h, at_launch) = pod_a_on_a_claim_whose_node_name_is_known(true);
    let claim = h.claims()[0].name().to_string();
    assert_eq!(h.cloud.launched(), 1);
    // A kwok Node appears, Ready, the moment it is launched: the nomination is already there.
    assert_eq!(*at_launch.lock().unwrap(), vec![Some(claim.clone())]);
    assert_eq!(nominated_node_name(&h, "a"), Some(claim));
}

#[test]
fn a_pod_is_nominated_only_once_the_node_exists_when_the_cloud_names_nodes_at_boot() {
    let (h, at_launch) = pod_a_on_a_claim_whose_node_name_is_known(false);
    assert_eq!(*at_launch.lock().unwrap(), vec![None]);
    assert_eq!(nominated_node_name(&h, "a"), None);
}

#[test]
fn a_restarted_controller_takes_back_a_nomination_to_a_node_that_does_not_exist_yet() {
    let (mut h, _) = pod_a_on_a_claim_whose_node_name_is_known(true);
    let claim = h.claims()[0].name().to_string();
    assert_eq!(nominated_node_name(&h, "a").as_deref(), Some(claim.as_str()));

    // A new process, before any batch window of its own has closed: the pod is its claim's.
    h.restart();
    assert_eq!(h.mgr.nominations().values().cloned().collect::<Vec<_>>(), vec![claim.clone()]);
    h.advance(Duration::from_secs(15));
    assert_eq!(h.claims().len(), 1);
    assert_eq!(nominated_node_name(&h, "a"), Some(claim));
}

#[test]
fn a_launching_claim_keeps_room_for_the_daemonset_pods_its_node_will_run() {
    // small: 2 CPU less 100m overhead. A DaemonSet of 1 CPU runs on every node.
    let mut h = Harness::new(FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10)]));
    h.api.put(node_pool("default"));
    h.api.put(daemonset("agent", "1"));
    h.api.put(pending_pod("a", "500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 1);
    // 400m is left on the launching claim once the agent runs: a 500m pod needs a new claim.
    h.api.put(pending_pod("b", "500m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 2, "the agent's room on the first claim is kept");
    // A 300m pod fits beside the agent.
    h.api.put(pending_pod("c", "300m"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 2);
}

#[test]
fn a_nomination_that_cannot_be_written_never_stops_provisioning() {
    let (mut h, claim) = pod_a_on_a_launching_claim();
    // The API server refuses every pod write (say, no RBAC for pods/status).
    h.api.fail_writes_of::<k8s_openapi::api::core::v1::Pod>(Some(kerf_api::cluster::ApiError::Other(
        "pods \"a\" is forbidden: cannot update resource \"pods/status\"".into(),
    )));
    kubelet_joins(&h.api, &claim, "n1", true);
    h.settle();
    assert_eq!(nominated_node_name(&h, "a"), None);
    // Provisioning goes on: a pod too big for the small node gets its own claim, and no
    // reconciler failed.
    h.api.put(pending_pod("b", "3"));
    h.settle();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.claims().len(), 2);
    assert!(h.errors.is_empty(), "{:?}", h.errors);
}

#[test]
fn pods_whose_nodeclaims_a_failed_pass_did_not_create_are_provisioned_when_it_is_retried() {
    let mut h = Harness::new(small_and_large());
    h.tolerate_errors = true;
    h.api.put(node_pool("default"));
    h.api.put(pending_pod("big-1", "7"));
    h.api.put(pending_pod("big-2", "7"));
    h.settle();
    // The API server fails the first claim's creation (a 500): the pass stops there.
    h.api.fail_writes_of::<NodeClaim>(Some(kerf_api::cluster::ApiError::Other("the API server answered 500".into())));
    h.advance(Duration::from_secs(1));
    assert!(h.claims().is_empty());
    assert!(!h.errors.is_empty(), "the provisioner failed");
    h.api.fail_writes_of::<NodeClaim>(None);
    // Retried after its backoff, then a batch window.
    h.advance(Duration::from_secs(2));
    h.advance(Duration::from_secs(2));
    assert_eq!(h.claims().len(), 2, "one claim per pod");
}

// ---- bursts: many claims created and launched a few at a time ----

mod bursts {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use kerf_api::nodeclaim::CONDITION_LAUNCHED;
    use kerf_api::{EC2NodeClass, NodeClaim, NodePool};
    use kerf_cloud::{CloudError, CloudProvider, NodeClassResolution};
    use kerf_scheduling::InstanceType;

    use crate::testkit::*;

    /// Not ready on its first poll (it asks to be polled again), ready on the second: a call
    /// that takes a round trip.
    struct RoundTrip(bool);

    impl Future for RoundTrip {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// The fake cloud, whose launches each take a round trip; it counts how many are under way
    /// at once.
    #[derive(Clone)]
    struct Remote {
        inner: FakeCloud,
        launching: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl CloudProvider for Remote {
        async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
            let now = self.launching.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            RoundTrip(false).await;
            self.launching.fetch_sub(1, Ordering::SeqCst);
            self.inner.create(claim).await
        }
        async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
            self.inner.delete(claim).await
        }
        async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
            self.inner.get(provider_id).await
        }
        async fn list(&self) -> Result<Vec<std::sync::Arc<NodeClaim>>, CloudError> {
            self.inner.list().await
        }
        async fn instance_types(
            &self,
            node_pool: &NodePool,
            node_class: Option<&EC2NodeClass>,
        ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
            self.inner.instance_types(node_pool, node_class).await
        }
        async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> Result<NodeClassResolution, CloudError> {
            self.inner.resolve_node_class(node_class).await
        }
        async fn is_drifted(
            &self,
            claim: &NodeClaim,
            node_class: Option<&EC2NodeClass>,
        ) -> Result<Option<String>, CloudError> {
            self.inner.is_drifted(claim, node_class).await
        }
        fn name(&self) -> &'static str {
            "remote"
        }
    }

    #[test]
    fn a_burst_of_forty_claims_launches_sixteen_at_a_time_and_every_one_is_recorded() {
        let cloud = Remote {
            inner: FakeCloud::with_types(vec![instance_type("small", "2", "4Gi", 0.10)]),
            launching: Arc::default(),
            most: Arc::default(),
        };
        let mut h = Harness::with_cloud(cloud.clone());
        h.api.put(node_pool("default"));
        // 40 pods of 1.5 CPU: one small node each.
        for i in 0..40 {
            h.api.put(pending_pod(&format!("p{i:02}"), "1500m"));
        }
        h.settle();
        h.advance(Duration::from_secs(1));
        let claims = h.claims();
        assert_eq!(claims.len(), 40);
        assert!(claims.iter().all(|c| c.is_condition_true(CONDITION_LAUNCHED)), "every launch recorded");
        assert_eq!(cloud.inner.launched(), 40, "one instance per claim");
        assert_eq!(cloud.most.load(Ordering::SeqCst), 16, "launches under way at once");
        assert_eq!(cloud.launching.load(Ordering::SeqCst), 0);
    }
}
