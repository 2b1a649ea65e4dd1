//! NodeOverlays on EC2, against moto: the types the provider hands a NodePool carry overlay
//! prices, and a launch ranks its CreateFleet overrides by them with the `prioritized` on-demand
//! strategy (EC2's `lowest-price` would rank by list price), so an overlay changes which type
//! is launched.

mod common;

use std::sync::Arc;

use common::*;
use kerf_api::overlay::NodeOverlays;
use kerf_api::{NodePool, labels};
use kerf_aws::AwsClients;
use kerf_cloud::CloudProvider;

fn pool() -> NodePool {
    serde_yaml_ng::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
         nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// An m5 savings plan: 60% off m5's on-demand price.
fn m5_savings_plan() -> Arc<NodeOverlays> {
    let overlay: kerf_api::nodeoverlay::NodeOverlay = serde_yaml_ng::from_str(
        "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: m5-savings-plan}\nspec:\n  \
         requirements:\n    - {key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}\n    \
         - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n  priceAdjustment: \"-60%\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    Arc::new(NodeOverlays::new([&overlay]))
}

const C5_OR_M5_ON_DEMAND: &str = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large, m5.large]}\n    \
                                  - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n    \
                                  - {key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}\n";

/// The on-demand allocation strategy and the overrides (type, priority) of the fleet CreateFleet
/// made for NodeClaim `claim`, as EC2 (moto) recorded the request.
async fn fleet_request(clients: &AwsClients, claim: &str) -> (String, Vec<(String, Option<f64>)>) {
    let out = clients.ec2.describe_fleets().send().await.unwrap_or_else(|e| panic!("DescribeFleets: {e:?}"));
    let fleet = out
        .fleets()
        .iter()
        .find(|f| f.tags().iter().any(|t| t.key() == Some(labels::NODE_CLAIM) && t.value() == Some(claim)))
        .unwrap_or_else(|| panic!("no fleet tagged for {claim}"));
    let strategy = fleet
        .on_demand_options()
        .and_then(|o| o.allocation_strategy())
        .map(|s| s.as_str().to_string())
        .unwrap_or_default();
    let overrides = fleet
        .launch_template_configs()
        .iter()
        .flat_map(|c| c.overrides())
        .map(|o| (o.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(), o.priority()))
        .collect();
    (strategy, overrides)
}

fn price(types: &[Arc<kerf_api::InstanceType>], name: &str) -> f64 {
    types
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| t.offerings.iter().find(|o| o.zone == "us-west-2a" && o.capacity_type == "on-demand"))
        .map(|o| o.price)
        .unwrap_or_else(|| panic!("no on-demand {name} in us-west-2a"))
}

#[tokio::test]
async fn an_overlay_price_changes_the_type_chosen_and_launched() {
    let clients = clients().await;
    let (provider, _clock, _net, nc) =
        ready_provider("overlay", 74, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;

    // By list price c5.large is the cheaper: lowest-price, and c5.large launches.
    let listed = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    let (c5, m5) = (price(&listed, "c5.large"), price(&listed, "m5.large"));
    assert!(c5 < m5, "c5.large {c5} m5.large {m5}");
    let before =
        provider.create(&claim("default-list", "default", C5_OR_M5_ON_DEMAND)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        before.metadata.labels.as_ref().and_then(|l| l.get(labels::INSTANCE_TYPE)).map(String::as_str),
        Some("c5.large")
    );
    let (strategy, overrides) = fleet_request(&clients, "default-list").await;
    assert_eq!(strategy, "lowest-price");
    assert_eq!(overrides, vec![("c5.large".to_string(), None), ("m5.large".to_string(), None)]);

    // With the savings plan m5.large is the cheaper for the scheduler and for the launch.
    provider.set_node_overlays(m5_savings_plan());
    let overlaid = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!((price(&overlaid, "m5.large") - m5 * 0.4).abs() < 1e-9);
    assert_eq!(price(&overlaid, "c5.large"), c5);
    let after = provider
        .create(&claim("default-overlay", "default", C5_OR_M5_ON_DEMAND))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        after.metadata.labels.as_ref().and_then(|l| l.get(labels::INSTANCE_TYPE)).map(String::as_str),
        Some("m5.large")
    );
    let (strategy, overrides) = fleet_request(&clients, "default-overlay").await;
    assert_eq!(strategy, "prioritized");
    assert_eq!(overrides, vec![("m5.large".to_string(), Some(0.0)), ("c5.large".to_string(), Some(1.0))]);
}
