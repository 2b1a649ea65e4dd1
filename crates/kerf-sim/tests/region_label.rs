//! The provider's region is a label of every instance type it offers, so a pod selecting
//! `topology.kubernetes.io/region` is provisioned for (in the cloud's region) or refused with a
//! message naming both regions (in another one); the launched instance carries the label.

use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::labels::REGION;
use kerf_api::{NodeClaim, NodePool};
use kerf_cloud::aws::{NodeClassSettings, catalog};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{CloudProvider, ManualClock, block_on};
use kerf_scheduling::{NodePoolInput, SchedulingInput, SchedulingResult, schedule};

/// A scenario's custom types (no region label written by the user).
const CUSTOM: &str = "
zones: [us-west-2a, us-west-2b]
instanceTypes:
  - name: small
    capacity: {cpu: '2', memory: 4Gi, pods: '20'}
    price: 0.10
  - name: large
    capacity: {cpu: '8', memory: 32Gi, pods: '50'}
    price: 0.30
";

fn provider(yaml: &str) -> SimProvider {
    let config: SimConfig = serde_yaml_ng::from_str(yaml).unwrap();
    SimProvider::new(config, Arc::new(ManualClock::new())).unwrap()
}

fn pool() -> NodePool {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))
    .unwrap()
}

fn pod_selecting_region(name: &str, region: &str) -> Arc<SlimPod> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeSelector": {REGION: region},
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
            }
        }))
        .unwrap(),
    )
}

fn schedule_on(p: &SimProvider, pods: Vec<Arc<SlimPod>>) -> SchedulingResult {
    let types = block_on(p.instance_types(&pool(), None)).unwrap();
    let input = SchedulingInput {
        node_pools: vec![NodePoolInput {
            node_pool: Arc::new(pool()),
            instance_types: types,
            in_use: Default::default(),
        }],
        pods,
        ..Default::default()
    };
    schedule(&input)
}

/// The NodeClaim the provisioner would create for a new claim of the Scheduler.
fn node_claim(r: &SchedulingResult) -> NodeClaim {
    let c = &r.new_node_claims[0];
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "default-x1", "labels": c.labels},
        "spec": {"requirements": c.node_requirements(),
                 "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

fn pod_in_the_clouds_region_gets_a_claim_and_another_region_is_refused(yaml: &str) {
    let p = provider(yaml);
    let types = block_on(p.instance_types(&pool(), None)).unwrap();
    assert!(types.iter().all(|t| t.labels.get(REGION).map(String::as_str) == Some("us-west-2")));

    let r =
        schedule_on(&p, vec![pod_selecting_region("here", "us-west-2"), pod_selecting_region("there", "us-east-1")]);
    assert_eq!(r.new_node_claims.len(), 1, "{:?}", r.errors);
    assert_eq!(r.new_node_claims[0].pods, vec![0]);
    assert_eq!(r.new_node_claims[0].labels.get(REGION).map(String::as_str), Some("us-west-2"));

    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].0, 1);
    let msg = &r.errors[0].1.message;
    assert!(
        msg.contains(
            "satisfies requirement topology.kubernetes.io/region In [us-east-1] \
             (the NodePool's instance types have topology.kubernetes.io/region us-west-2)"
        ),
        "{msg}"
    );

    // The instance launched for the claim carries the region label too.
    let launched = block_on(p.create(&node_claim(&r))).unwrap();
    assert_eq!(launched.metadata.labels.unwrap().get(REGION).map(String::as_str), Some("us-west-2"));
    assert_eq!(p.instances()[0].labels.get(REGION).map(String::as_str), Some("us-west-2"));
}

#[test]
fn catalog_pod_selecting_the_region_gets_a_claim_other_region_is_refused_naming_key_and_both_values() {
    pod_in_the_clouds_region_gets_a_claim_and_another_region_is_refused("{}");
}

#[test]
fn custom_types_pod_selecting_the_region_gets_a_claim_other_region_is_refused_naming_key_and_both_values() {
    pod_in_the_clouds_region_gets_a_claim_and_another_region_is_refused(CUSTOM);
}

#[test]
fn custom_types_carry_the_clouds_region_not_a_default() {
    let p = provider(&format!(
        "region: eu-west-1\nzones: [eu-west-1a]\n{}",
        CUSTOM.replace("zones: [us-west-2a, us-west-2b]", "")
    ));
    let types = block_on(p.instance_types(&pool(), None)).unwrap();
    assert_eq!(types.len(), 2);
    assert!(types.iter().all(|t| t.labels[REGION] == "eu-west-1"), "{:?}", types[0].labels);
}

#[test]
fn every_catalog_instance_type_is_labelled_with_the_region_it_is_sold_in() {
    let cat = catalog().unwrap();
    for region in cat.regions() {
        let types = cat.instance_types(region, None, &NodeClassSettings::default()).unwrap();
        assert!(!types.is_empty(), "{region}");
        for t in &types {
            assert_eq!(t.labels.get(REGION).map(String::as_str), Some(region), "{} in {region}", t.name);
        }
    }
}
