//! A snapshot keeps the cluster's NodeOverlays: the written scenario applies them before its
//! NodePools, spec only, and loads again as a scenario.

use std::path::Path;

use kerf_api::{NodeOverlay, NodePool};
use kerf_sim::scenario::parse;
use kerf_sim::scenario_writer::{ClusterObjects, write};

#[test]
fn a_snapshots_node_overlays_are_written_before_its_pools_without_their_status() {
    let overlay: NodeOverlay = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": "m5-savings-plan", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
                 "priceAdjustment": "-30%"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "general"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let objects = ClusterObjects { node_pools: vec![pool], node_overlays: vec![overlay], ..ClusterObjects::default() };
    let (text, _) = write("overlays", kerf_cloud::Timestamp::UNIX_EPOCH, &objects).unwrap_or_else(|e| panic!("{e}"));
    let overlay_at = text.find("kind: NodeOverlay").unwrap_or_else(|| panic!("no overlay:\n{text}"));
    let pool_at = text.find("kind: NodePool").unwrap_or_else(|| panic!("no pool:\n{text}"));
    assert!(overlay_at < pool_at, "{text}");
    assert!(text.contains("priceAdjustment: -30%"), "{text}");
    for absent in ["status", "u-1", "resourceVersion"] {
        assert!(!text.contains(absent), "the snapshot holds {absent:?}:\n{text}");
    }
    parse(Path::new("snapshot.yaml"), &text).unwrap_or_else(|e| panic!("the written scenario loads: {e}\n{text}"));
}
