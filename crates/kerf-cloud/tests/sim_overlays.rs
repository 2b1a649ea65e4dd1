//! NodeOverlays in the simulated provider: the types a pool is shown and the offering a launch
//! takes are priced as the overlays say, launched claims carry the capacity overlays add, and
//! running instances are repriced when the overlays change.

use std::sync::Arc;

use kerf_api::overlay::NodeOverlays;
use kerf_api::{NodeClaim, NodeOverlay, NodePool};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{CloudProvider, ManualClock, block_on};

/// `small` ($0.10) and `large` ($0.30) in one zone; spot at 0.7×.
const TWO_TYPES: &str = "
zones: [us-west-2a]
instanceTypes:
  - name: small
    capacity: {cpu: '2', memory: 4Gi, pods: '20'}
    price: 0.10
  - name: large
    capacity: {cpu: '8', memory: 32Gi, pods: '50'}
    price: 0.30
";

/// `(price, list price)` as dollars to the 1/100000 (the simulated spot prices' precision).
fn prices(i: &kerf_cloud::sim::SimInstance) -> (f64, f64) {
    let round = |v: f64| (v * 100_000.0).round() / 100_000.0;
    (round(i.price), round(i.list_price))
}

fn provider() -> SimProvider {
    let config: SimConfig = serde_yaml_ng::from_str(TWO_TYPES).unwrap();
    SimProvider::new(config, Arc::new(ManualClock::new())).unwrap()
}

fn claim(name: &str) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": [],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

fn pool(name: &str) -> NodePool {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))
    .unwrap()
}

fn overlays(yaml: &str) -> Arc<NodeOverlays> {
    let list: Vec<NodeOverlay> =
        serde_yaml_ng::Deserializer::from_str(yaml).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
    Arc::new(NodeOverlays::new(&list))
}

const CHEAP_LARGE_SPOT: &str = "
metadata: {name: cheap-large}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [large]}
    - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
    - {key: karpenter.sh/nodepool, operator: In, values: [default]}
  price: '0.01'
---
metadata: {name: devices}
spec:
  requirements: []
  capacity: {example.com/dev: '2'}
";

#[test]
fn a_launch_takes_the_offering_overlays_make_cheapest_and_carries_the_capacity_they_add() {
    let p = provider();
    let before = block_on(p.create(&claim("a"))).unwrap();
    assert_eq!(p.instances()[0].instance_type.name, "small", "list prices: small spot is cheapest");
    assert_eq!(before.status.as_ref().unwrap().capacity.get("example.com/dev").canonical(), "0");

    p.set_node_overlays(overlays(CHEAP_LARGE_SPOT));
    let after = block_on(p.create(&claim("b"))).unwrap();
    let i = &p.instances()[1];
    assert_eq!((i.instance_type.name.as_str(), i.capacity_type.as_str()), ("large", "spot"));
    assert_eq!(prices(i), (0.01, 0.21));
    assert_eq!(i.overlays, ["cheap-large", "devices"]);
    let status = after.status.unwrap();
    assert_eq!(status.capacity.get("example.com/dev").canonical(), "2");
    assert_eq!(status.allocatable.get("example.com/dev").canonical(), "2");
    // The instance launched before the overlays only gains what applies to it: no price overlay.
    let first = &p.instances()[0];
    assert_eq!(prices(first), (0.07, 0.07));
    assert_eq!(first.overlays, ["devices"]);
}

#[test]
fn a_pools_types_are_priced_for_that_pool_and_repriced_when_the_overlays_go() {
    let p = provider();
    p.set_node_overlays(overlays(CHEAP_LARGE_SPOT));
    let spot_of = |types: &[Arc<kerf_api::InstanceType>], name: &str| {
        let t = types.iter().find(|t| t.name == name).unwrap();
        t.offerings.iter().find(|o| o.capacity_type == "spot").unwrap().price
    };
    let seen = block_on(p.instance_types(&pool("default"), None)).unwrap();
    assert_eq!(spot_of(&seen, "large"), 0.01);
    assert_eq!(seen.iter().find(|t| t.name == "small").unwrap().capacity.get("example.com/dev").canonical(), "2");
    let other = block_on(p.instance_types(&pool("batch"), None)).unwrap();
    assert_eq!(spot_of(&other, "large"), 0.21, "the overlay selects the default pool only");

    block_on(p.create(&claim("a"))).unwrap();
    assert_eq!(p.instances()[0].price, 0.01);
    p.set_node_overlays(Arc::new(NodeOverlays::default()));
    let i = &p.instances()[0];
    assert_eq!(prices(i), (0.21, 0.21));
    assert!(i.overlays.is_empty());
    let seen = block_on(p.instance_types(&pool("default"), None)).unwrap();
    assert_eq!(spot_of(&seen, "large"), 0.21);
}
