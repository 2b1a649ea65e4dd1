//! The simulated provider: latency, cheapest pick, spot preference, insufficient capacity with
//! its 3-minute cache, interruption, reboot, deletion.

use std::sync::Arc;
use std::time::Duration;

use kerf_api::{EC2NodeClass, NodeClaim, NodePool};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{Clock, CloudError, CloudProvider, ManualClock, block_on};

fn config(yaml: &str) -> SimConfig {
    serde_yaml_ng::from_str(yaml).unwrap()
}

/// Two custom types in two zones: `small` ($0.10) and `large` ($0.30); spot at 0.7×.
const TWO_TYPES: &str = "
zones: [us-west-2a, us-west-2b]
instanceTypes:
  - name: small
    capacity: {cpu: '2', memory: 4Gi, pods: '20'}
    overhead: {cpu: 100m, memory: 200Mi}
    price: 0.10
  - name: large
    capacity: {cpu: '8', memory: 32Gi, pods: '50'}
    price: 0.30
";

fn provider(yaml: &str) -> (SimProvider, ManualClock) {
    let clock = ManualClock::new();
    let p = SimProvider::new(config(yaml), Arc::new(clock.clone())).unwrap();
    (p, clock)
}

fn claim(name: &str, reqs: serde_json::Value) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": reqs,
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

fn req(key: &str, values: &[&str]) -> serde_json::Value {
    serde_json::json!({"key": key, "operator": "In", "values": values})
}

fn labels_of(c: &NodeClaim) -> std::collections::BTreeMap<String, String> {
    c.metadata.labels.clone().unwrap()
}

fn pool() -> NodePool {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))
    .unwrap()
}

#[test]
fn instance_is_ready_after_the_launch_latency() {
    let (p, clock) = provider(&format!("{TWO_TYPES}launchLatency: 45s\n"));
    clock.advance(Duration::from_secs(10));
    let launched_at = clock.now();
    block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    let i = &p.instances()[0];
    assert_eq!(i.launched_at, launched_at);
    assert_eq!(i.ready_at.as_millisecond() - i.launched_at.as_millisecond(), 45_000);
    // Default latency is 30s.
    let (p, _) = provider(TWO_TYPES);
    block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    let i = &p.instances()[0];
    assert_eq!(i.ready_at.as_millisecond() - i.launched_at.as_millisecond(), 30_000);
}

#[test]
fn cheapest_compatible_offering_is_launched_with_status_and_labels() {
    let (p, _) = provider(TWO_TYPES);
    let c = claim(
        "a",
        serde_json::json!([
            req("karpenter.sh/capacity-type", &["on-demand"]),
            req("topology.kubernetes.io/zone", &["us-west-2b"])
        ]),
    );
    let out = block_on(p.create(&c)).unwrap();
    let l = labels_of(&out);
    assert_eq!(l["node.kubernetes.io/instance-type"], "small");
    assert_eq!(l["topology.kubernetes.io/zone"], "us-west-2b");
    assert_eq!(l["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(l["topology.kubernetes.io/region"], "us-west-2");
    assert_eq!(l["karpenter.sh/nodepool"], "default");
    let s = out.status.unwrap();
    assert_eq!(s.provider_id.as_deref(), Some("aws:///us-west-2b/i-00000000000000001"));
    assert_eq!(s.capacity.to_string(), r#"{"cpu":"2","memory":"4Gi","pods":"20"}"#);
    assert_eq!(s.allocatable.to_string(), r#"{"cpu":"1900m","memory":"3896Mi","pods":"20"}"#);
    let i = &p.instances()[0];
    assert_eq!(i.price, 0.10);
    assert_eq!(i.node_name, "ip-10-0-32-2.us-west-2.compute.internal");
}

#[test]
fn requirements_and_requests_narrow_the_candidates() {
    let (p, _) = provider(TWO_TYPES);
    // Only `large` has 4 CPUs to spare.
    let mut c = claim("a", serde_json::json!([req("karpenter.sh/capacity-type", &["on-demand"])]));
    Arc::make_mut(&mut c.spec).resources.requests.set("cpu", kerf_api::Quantity::parse("4").unwrap());
    let out = block_on(p.create(&c)).unwrap();
    assert_eq!(labels_of(&out)["node.kubernetes.io/instance-type"], "large");
    // arm64 is a label no type has: nothing fits.
    let c = claim("b", serde_json::json!([req("kubernetes.io/arch", &["arm64"])]));
    match block_on(p.create(&c)) {
        Err(CloudError::InsufficientCapacity(msg)) => {
            assert_eq!(msg, "NodeClaim b: no instance type satisfies its requirements and resource requests")
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    // A label only the claim knows about (a user label) does not exclude types.
    let c = claim("c", serde_json::json!([req("team", &["blue"])]));
    assert!(block_on(p.create(&c)).is_ok());
}

#[test]
fn a_claim_naming_its_types_launches_the_cheapest_named_one_that_fits_whatever_order_it_names_them() {
    let (p, _) = provider(TWO_TYPES);
    let on_demand = req("karpenter.sh/capacity-type", &["on-demand"]);
    // Named in either order, with a name the cloud does not sell: the cheapest named type.
    for names in [&["small", "large", "medium"][..], &["medium", "large", "small"]] {
        let c = claim("a", serde_json::json!([on_demand, req("node.kubernetes.io/instance-type", names)]));
        assert_eq!(labels_of(&block_on(p.create(&c)).unwrap())["node.kubernetes.io/instance-type"], "small");
    }
    // Only `large` named: launched though `small` is cheaper.
    let c = claim("b", serde_json::json!([on_demand, req("node.kubernetes.io/instance-type", &["large"])]));
    assert_eq!(labels_of(&block_on(p.create(&c)).unwrap())["node.kubernetes.io/instance-type"], "large");
    // Types excluded by name (NotIn) are not launched.
    let not_small =
        serde_json::json!({"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["small"]});
    let c = claim("c", serde_json::json!([on_demand, not_small]));
    assert_eq!(labels_of(&block_on(p.create(&c)).unwrap())["node.kubernetes.io/instance-type"], "large");
    // Named types of which none fits the requests: insufficient capacity.
    let mut c =
        claim("d", serde_json::json!([on_demand, req("node.kubernetes.io/instance-type", &["small", "medium"])]));
    Arc::make_mut(&mut c.spec).resources.requests.set("cpu", kerf_api::Quantity::parse("4").unwrap());
    assert!(matches!(block_on(p.create(&c)), Err(CloudError::InsufficientCapacity(_))));
}

#[test]
fn spot_is_preferred_when_the_claim_allows_it() {
    let (p, _) = provider(TWO_TYPES);
    let out =
        block_on(p.create(&claim("a", serde_json::json!([req("karpenter.sh/capacity-type", &["spot", "on-demand"])]))))
            .unwrap();
    assert_eq!(labels_of(&out)["karpenter.sh/capacity-type"], "spot");
    let i = &p.instances()[0];
    assert!((i.price - 0.07).abs() < 1e-12, "{}", i.price);
    // Spot no pricier than the cheapest on-demand offering is preferred.
    let (p, _) = provider(
        "zones: [us-west-2a]\ninstanceTypes:\n  - {name: t, capacity: {cpu: '1'}, price: 1.0, offerings: [\
         {zone: us-west-2a, capacityType: on-demand, price: 0.6}, {zone: us-west-2a, capacityType: spot, price: 0.5}]}\n",
    );
    let out = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    assert_eq!(labels_of(&out)["karpenter.sh/capacity-type"], "spot");
}

#[test]
fn spot_offerings_pricier_than_the_cheapest_on_demand_offering_are_not_launched() {
    // Spot at $0.50 against on-demand at $0.01: the spot offering is dropped, as the AWS
    // provider drops it, and on-demand is launched.
    let (p, _) = provider(
        "zones: [us-west-2a]\ninstanceTypes:\n  - {name: t, capacity: {cpu: '1'}, price: 1.0, offerings: [\
         {zone: us-west-2a, capacityType: on-demand, price: 0.01}, {zone: us-west-2a, capacityType: spot, price: 0.5}]}\n",
    );
    let out = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    assert_eq!(labels_of(&out)["karpenter.sh/capacity-type"], "on-demand");
    assert!((p.instances()[0].price - 0.01).abs() < 1e-12);
}

#[test]
fn insufficient_capacity_falls_through_and_is_cached_for_three_minutes() {
    let (p, clock) = provider(&format!(
        "{TWO_TYPES}unavailable:\n  - {{instanceType: small, zone: us-west-2a, capacityType: spot}}\n"
    ));
    // Before any attempt the scheduler cannot know about it.
    let types = block_on(p.instance_types(&pool(), None)).unwrap();
    assert!(types.iter().all(|t| t.offerings.iter().all(|o| o.available)));

    let out = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    // small/us-west-2a/spot failed; the next cheapest spot offering is small in us-west-2b.
    assert_eq!(labels_of(&out)["topology.kubernetes.io/zone"], "us-west-2b");
    assert_eq!(labels_of(&out)["node.kubernetes.io/instance-type"], "small");
    assert!(!p.is_offering_available("small", "us-west-2a", "spot"));
    let small = block_on(p.instance_types(&pool(), None)).unwrap().into_iter().find(|t| t.name == "small").unwrap();
    let unavailable: Vec<_> =
        small.offerings.iter().filter(|o| !o.available).map(|o| (o.zone.as_str(), o.capacity_type.as_str())).collect();
    assert_eq!(unavailable, [("us-west-2a", "spot")]);

    // A claim pinned to the failed offering is refused with insufficient capacity.
    let pinned = claim(
        "b",
        serde_json::json!([
            req("node.kubernetes.io/instance-type", &["small"]),
            req("topology.kubernetes.io/zone", &["us-west-2a"]),
            req("karpenter.sh/capacity-type", &["spot"])
        ]),
    );
    assert!(matches!(block_on(p.create(&pinned)), Err(CloudError::InsufficientCapacity(_))));

    clock.advance(Duration::from_secs(179));
    assert!(!p.is_offering_available("small", "us-west-2a", "spot"));
    clock.advance(Duration::from_secs(1));
    assert!(p.is_offering_available("small", "us-west-2a", "spot"));
    let types = block_on(p.instance_types(&pool(), None)).unwrap();
    assert!(types.iter().all(|t| t.offerings.iter().all(|o| o.available)));
}

#[test]
fn all_offerings_out_of_capacity_is_an_insufficient_capacity_error() {
    let (p, _) = provider(&format!(
        "{TWO_TYPES}unavailable:\n  - {{instanceType: small}}\n  - {{instanceType: large, capacityType: spot}}\n"
    ));
    let c = claim("a", serde_json::json!([req("karpenter.sh/capacity-type", &["spot"])]));
    match block_on(p.create(&c)) {
        Err(CloudError::InsufficientCapacity(msg)) => {
            assert!(msg.contains("small/us-west-2a/spot") && msg.contains("large/us-west-2b/spot"), "{msg}")
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    // Spot is now cached as unavailable everywhere, so the retry of an unconstrained claim
    // launches on-demand (and small on-demand is out of capacity too).
    let out = block_on(p.create(&claim("b", serde_json::json!([])))).unwrap();
    assert_eq!(labels_of(&out)["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels_of(&out)["node.kubernetes.io/instance-type"], "large");
    assert!(p.instances().len() == 1);
}

#[test]
fn interruption_warning_is_queued_and_the_instance_reclaimed_two_minutes_later() {
    let (p, clock) = provider(TWO_TYPES);
    let out = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    let pid = out.provider_id().unwrap().to_string();
    let node = p.instances()[0].node_name.clone();
    let w = p.interrupt_node(&node).unwrap();
    assert_eq!(w.provider_id, pid);
    assert_eq!(w.node_claim, "a");
    let taken = p.take_interruptions();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].kind, kerf_cloud::InterruptionKind::SpotInterruption);
    assert_eq!(taken[0].reclaim_at.map(|r| r.as_millisecond() - taken[0].at.as_millisecond()), Some(120_000));
    assert!(p.take_interruptions().is_empty());
    clock.advance(Duration::from_secs(119));
    assert!(block_on(p.get(&pid)).is_ok());
    clock.advance(Duration::from_secs(1));
    assert!(p.instances()[0].terminated);
    assert!(matches!(block_on(p.get(&pid)), Err(CloudError::NotFound(_))));
    assert!(matches!(p.interrupt(&pid), Err(CloudError::NotFound(_))));
    assert!(matches!(p.interrupt("aws:///us-west-2a/i-nope"), Err(CloudError::NotFound(_))));
}

#[test]
fn delete_terminates_and_a_second_delete_is_not_found() {
    let (p, _) = provider(TWO_TYPES);
    let a = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    let b = block_on(p.create(&claim("b", serde_json::json!([])))).unwrap();
    assert_eq!(b.provider_id(), Some("aws:///us-west-2a/i-00000000000000002"));
    assert_eq!(block_on(p.list()).unwrap().len(), 2);
    block_on(p.delete(&a)).unwrap();
    assert!(matches!(block_on(p.delete(&a)), Err(CloudError::NotFound(_))));
    let live = block_on(p.list()).unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].name(), "b");
    assert!(p.instances()[0].terminated);
    assert_eq!(block_on(p.get(b.provider_id().unwrap())).unwrap().name(), "b");
    // A claim never launched has no instance.
    assert!(matches!(block_on(p.delete(&claim("c", serde_json::json!([])))), Err(CloudError::NotFound(_))));
}

#[test]
fn reboot_keeps_the_instance_and_records_when_and_a_gone_instance_is_not_found() {
    let (p, clock) = provider(TWO_TYPES);
    let a = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    clock.advance(Duration::from_secs(600));
    block_on(p.reboot(&a)).unwrap();
    let i = &p.instances()[0];
    assert_eq!(i.rebooted_at, Some(clock.now()));
    assert!(!i.terminated);
    assert_eq!(block_on(p.list()).unwrap().len(), 1, "a reboot launches nothing");
    assert_eq!(block_on(p.get(a.provider_id().unwrap())).unwrap().name(), "a");
    block_on(p.delete(&a)).unwrap();
    assert!(matches!(block_on(p.reboot(&a)), Err(CloudError::NotFound(_))));
    assert!(matches!(block_on(p.reboot(&claim("never", serde_json::json!([])))), Err(CloudError::NotFound(_))));
}

#[test]
fn catalog_launch_reports_karpenter_allocatable_and_honours_node_class_kubelet() {
    let (p, _) = provider("region: ap-northeast-2");
    assert_eq!(p.zones(), ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c", "ap-northeast-2d"]);
    let c = claim(
        "a",
        serde_json::json!([
            req("node.kubernetes.io/instance-type", &["c7i.2xlarge", "c7i.4xlarge"]),
            req("karpenter.sh/capacity-type", &["on-demand"]),
            req("topology.kubernetes.io/zone", &["ap-northeast-2a", "ap-northeast-2c"]),
            req("kubernetes.io/arch", &["amd64"])
        ]),
    );
    let out = block_on(p.create(&c)).unwrap();
    assert_eq!(labels_of(&out)["node.kubernetes.io/instance-type"], "c7i.2xlarge");
    assert_eq!(labels_of(&out)["karpenter.k8s.aws/instance-family"], "c7i");
    let a = out.status.unwrap().allocatable;
    assert_eq!(
        a.to_string(),
        r#"{"attachable-volumes-aws-ebs":"31","cpu":"7910m","ephemeral-storage":"17Gi","memory":"14162Mi","pods":"58"}"#
    );
    assert_eq!(p.instances()[0].price, 0.4032);
    assert_eq!(p.instances()[0].node_name, "ip-10-0-0-2.ap-northeast-2.compute.internal");

    let nc: EC2NodeClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "default"}, "spec": {"kubelet": {"maxPods": 110}}
    }))
    .unwrap();
    p.register_node_class(&nc);
    let out = block_on(p.create(&c)).unwrap();
    assert_eq!(out.status.unwrap().allocatable.get("pods").canonical(), "110");
}

#[test]
fn config_errors_name_the_field() {
    let clock: Arc<dyn kerf_cloud::Clock> = Arc::new(ManualClock::new());
    let err = |yaml: &str| SimProvider::new(config(yaml), clock.clone()).err().unwrap().to_string();
    assert!(
        err("region: mars-1").starts_with("cloud.zones: required: the built-in catalog does not cover region mars-1")
    );
    assert!(
        err("zones: [us-west-2z]").starts_with("cloud.zones[0]: the built-in catalog sells nothing in zone us-west-2z")
    );
    assert_eq!(
        err(
            "instanceTypes: [{name: a, capacity: {cpu: '1'}, price: 1, offerings: [{zone: us-west-2q, capacityType: spot}]}]"
        ),
        "cloud.instanceTypes[0].offerings[0].zone: zone \"us-west-2q\" is not one of the cloud's zones \
         (us-west-2a, us-west-2b, us-west-2c, us-west-2d)"
    );
    assert_eq!(
        err("unavailable: [{instanceType: m5.lrge}]"),
        "cloud.unavailable[0].instanceType: unknown instance type \"m5.lrge\" in region us-west-2"
    );
}

/// NodeClass hash annotations: the hash and the version of the algorithm that made it.
fn hashed(hash: &str, version: &str) -> serde_json::Value {
    serde_json::json!({
        "karpenter.k8s.aws/ec2nodeclass-hash": hash,
        "karpenter.k8s.aws/ec2nodeclass-hash-version": version,
    })
}

fn annotations(v: serde_json::Value) -> Option<std::collections::BTreeMap<String, String>> {
    Some(serde_json::from_value(v).unwrap())
}

#[test]
fn claim_is_drifted_when_its_node_class_hash_changed() {
    let (p, _) = provider(TWO_TYPES);
    let mut c = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    c.metadata.annotations = annotations(hashed("111", kerf_api::hash::EC2NODECLASS_HASH_VERSION));
    let class = |hash: &str| -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default", "annotations": hashed(hash, kerf_api::hash::EC2NODECLASS_HASH_VERSION)},
            "spec": {}
        }))
        .unwrap()
    };
    assert_eq!(block_on(p.is_drifted(&c, Some(&class("111")))).unwrap(), None);
    assert_eq!(block_on(p.is_drifted(&c, Some(&class("222")))).unwrap().as_deref(), Some("NodeClassDrift"));
    assert_eq!(block_on(p.is_drifted(&c, None)).unwrap(), None);
}

#[test]
fn hashes_of_another_algorithm_are_never_compared_with_kerfs() {
    let (p, _) = provider(TWO_TYPES);
    let class = |annotations: serde_json::Value| -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default", "resourceVersion": "3", "annotations": annotations},
            "spec": {"amiFamily": "AL2023"}
        }))
        .unwrap()
    };
    let karpenters_class = class(hashed("4242", "v4"));
    let ours = karpenters_class.static_hash();
    let mut c = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    // A claim Karpenter launched: its hash is Karpenter's, whatever the class carries.
    c.metadata.annotations = annotations(hashed("1717", "v4"));
    assert_eq!(block_on(p.is_drifted(&c, Some(&karpenters_class))).unwrap(), None);
    assert_eq!(block_on(p.is_drifted(&c, Some(&class(hashed(&ours, "kerf-1"))))).unwrap(), None);
    // A claim without a version (an older kerf stamped only the hash) is not compared either.
    c.metadata.annotations = annotations(serde_json::json!({"karpenter.k8s.aws/ec2nodeclass-hash": "1717"}));
    assert_eq!(block_on(p.is_drifted(&c, Some(&karpenters_class))).unwrap(), None);
    // kerf's claim on a class still carrying Karpenter's annotation: compared with kerf's own
    // hash of the class, not with Karpenter's value.
    c.metadata.annotations = annotations(hashed(&ours, kerf_api::hash::EC2NODECLASS_HASH_VERSION));
    assert_eq!(block_on(p.is_drifted(&c, Some(&karpenters_class))).unwrap(), None);
    c.metadata.annotations = annotations(hashed("999", kerf_api::hash::EC2NODECLASS_HASH_VERSION));
    assert_eq!(block_on(p.is_drifted(&c, Some(&karpenters_class))).unwrap().as_deref(), Some("NodeClassDrift"));
}

#[test]
fn a_node_class_without_a_hash_annotation_drifts_its_claims_once_its_spec_changes() {
    let (p, _) = provider(TWO_TYPES);
    let class = |rv: &str, ami: &str| -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default", "resourceVersion": rv},
            "spec": {"amiFamily": "AL2023", "userData": ami}
        }))
        .unwrap()
    };
    let first = class("5", "one");
    let mut c = block_on(p.create(&claim("a", serde_json::json!([])))).unwrap();
    c.metadata.annotations = annotations(hashed(&first.static_hash(), kerf_api::hash::EC2NODECLASS_HASH_VERSION));
    assert_eq!(block_on(p.is_drifted(&c, Some(&first))).unwrap(), None);
    assert_eq!(block_on(p.is_drifted(&c, Some(&first))).unwrap(), None, "asked again");
    // The spec changed (a new version): the hash of the new spec, not the one of the version
    // seen before.
    let changed = class("6", "two");
    assert_eq!(block_on(p.is_drifted(&c, Some(&changed))).unwrap().as_deref(), Some("NodeClassDrift"));
    // Changed back (another version, the first spec): not drifted.
    assert_eq!(block_on(p.is_drifted(&c, Some(&class("7", "one")))).unwrap(), None);
}

#[test]
fn catalog_spot_launches_take_each_types_cheapest_zone_which_is_not_always_the_first() {
    let (p, _) = provider("{}");
    let cat = kerf_cloud::aws::catalog().unwrap();
    let settings = kerf_cloud::aws::NodeClassSettings::default();
    let names = ["m5.large", "m5.xlarge", "c5.large", "c5.xlarge", "r6i.large", "m6g.large", "c7i.large", "m7i.large"];
    let mut zones = std::collections::BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        let reqs = serde_json::json!([
            req("node.kubernetes.io/instance-type", &[name]),
            req("karpenter.sh/capacity-type", &["spot"])
        ]);
        let zone =
            labels_of(&block_on(p.create(&claim(&format!("c{i}"), reqs))).unwrap())["topology.kubernetes.io/zone"]
                .clone();
        let t = cat.instance_type("us-west-2", name, &settings).unwrap();
        let best = t
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "spot")
            .min_by(|a, b| a.price.total_cmp(&b.price).then_with(|| a.zone.cmp(&b.zone)))
            .unwrap();
        assert_eq!(zone, best.zone, "{name}");
        assert_eq!(p.instances()[i].price, best.price, "{name}");
        zones.insert(zone);
    }
    assert!(zones.len() >= 2, "every type launched in {zones:?}");
}

#[test]
fn interrupting_an_on_demand_instance_is_a_not_spot_error_naming_it() {
    let (p, clock) = provider(TWO_TYPES);
    let out = block_on(p.create(&claim("a", serde_json::json!([req("karpenter.sh/capacity-type", &["on-demand"])]))))
        .unwrap();
    let pid = out.provider_id().unwrap().to_string();
    let err = p.interrupt(&pid).unwrap_err();
    assert_eq!(err, CloudError::NotSpot { instance: pid.clone(), capacity_type: "on-demand".into() });
    assert!(err.to_string().contains(&pid) && err.to_string().contains("on-demand"), "{err}");
    let node = p.instances()[0].node_name.clone();
    assert!(matches!(p.interrupt_node(&node), Err(CloudError::NotSpot { .. })));
    // No warning was queued and the instance is not reclaimed.
    assert!(p.take_interruptions().is_empty());
    clock.advance(Duration::from_secs(600));
    assert!(!p.instances()[0].terminated);
}

#[test]
fn ten_thousand_instances_in_one_zone_each_get_their_own_node_name() {
    // A large scale-up puts thousands of launches in one zone: an address reused within them
    // would give two claims the same node name, and the later claim's Node would never register.
    let (p, _) = provider(TWO_TYPES);
    let zone = req("topology.kubernetes.io/zone", &["us-west-2b"]);
    for i in 0..10_000 {
        block_on(p.create(&claim(&format!("c{i}"), serde_json::json!([zone.clone()])))).unwrap();
    }
    let names: std::collections::BTreeSet<String> = p.instances().iter().map(|i| i.node_name.clone()).collect();
    assert_eq!(names.len(), 10_000);
    let first = &p.instances()[0].node_name;
    assert!(first.starts_with("ip-10-0-32-2."), "the first keeps its address: {first}");
}
