//! NodeOverlays in the shipped examples, run through the `kerf` binary: a savings plan changes
//! which family kerf launches and consolidates to, and the report gives each node's list price
//! beside its overlay price; a capacity overlay lets pods that request an extended resource
//! run; `kerf instance-types --overlays` prices types as the overlays say.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

fn kerf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf")).args(args).output().expect("run kerf")
}

/// The JSON report of `scenario` (a path).
fn report_of(scenario: &std::path::Path) -> Value {
    let out = kerf(&["simulate", scenario.to_str().unwrap(), "--report", "json"]);
    assert!(out.status.success(), "kerf simulate failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json report")
}

/// The example with the step applying `manifest` left out, written beside it (so its relative
/// manifest paths still resolve).
fn without_step(name: &str, manifest: &str) -> PathBuf {
    let text = std::fs::read_to_string(example(name)).unwrap();
    let step = format!("  - apply: {manifest}\n");
    assert!(text.contains(&step), "{name} applies {manifest}");
    let path = example(&format!(".{}-without-overlay-{name}", std::process::id()));
    std::fs::write(&path, text.replace(&step, "")).unwrap();
    path
}

fn family(n: &Value) -> &str {
    n["instanceType"].as_str().unwrap().split('.').next().unwrap()
}

#[test]
fn a_savings_plan_overlay_makes_consolidation_move_the_pods_from_c5_to_m5() {
    let r = report_of(&example("node-overlay-savings-plan.yaml"));
    assert_eq!(r["summary"]["podsRunning"], 6);
    // First launched at list prices (c5), replaced once the overlay made m5 cheaper.
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Underutilized");
    assert!(d[0]["instanceType"].as_str().unwrap().starts_with("c5."), "{}", d[0]);
    assert!(d[0]["atSeconds"].as_u64().unwrap() >= 180, "no move before the overlay: {}", d[0]);
    let nodes = r["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty());
    for n in nodes {
        assert_eq!(family(n), "m5", "{n}");
        let price = n["pricePerHour"].as_f64().unwrap();
        let list = n["listPricePerHour"].as_f64().expect("listPricePerHour beside an overlay price");
        assert!((price - list * 0.7).abs() < 1e-4, "30% off: {price} of {list}");
        assert_eq!(n["nodeOverlays"], serde_json::json!(["m5-savings-plan"]));
    }
    let cost: f64 = nodes.iter().map(|n| n["pricePerHour"].as_f64().unwrap()).sum();
    assert!((r["summary"]["costPerHour"].as_f64().unwrap() - cost).abs() < 1e-6, "the summary counts overlay prices");

    // Without the overlay, the same workload stays on c5 and no node has a list price apart.
    let path = without_step("node-overlay-savings-plan.yaml", "manifests/overlays/m5-savings-plan.yaml");
    let plain = report_of(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(plain["disruptions"].as_array().unwrap().len(), 0);
    for n in plain["nodes"].as_array().unwrap() {
        assert_eq!(family(n), "c5", "{n}");
        assert!(n.get("listPricePerHour").is_none() && n.get("nodeOverlays").is_none(), "{n}");
    }
}

#[test]
fn pods_requesting_an_extended_resource_run_once_an_overlay_adds_it_and_stay_pending_without() {
    let r = report_of(&example("node-overlay-fuse-devices.yaml"));
    assert_eq!(r["summary"]["podsRunning"], 4);
    assert_eq!(r["summary"]["podsPending"], 0);
    for n in r["nodes"].as_array().unwrap() {
        assert_eq!(n["allocatable"]["smarter-devices/fuse"], "10", "{n}");
        assert_eq!(n["nodeOverlays"], serde_json::json!(["fuse-devices"]));
        assert!(n.get("listPricePerHour").is_none(), "a capacity overlay leaves the price: {n}");
    }
    // Nothing launched before the overlay was applied at 2m.
    let first_node = r["timeline"].as_array().unwrap().iter().find(|t| t["nodes"].as_u64().unwrap() > 0).unwrap();
    assert!(first_node["atSeconds"].as_u64().unwrap() >= 120, "{first_node}");

    let path = without_step("node-overlay-fuse-devices.yaml", "manifests/overlays/fuse-devices.yaml");
    let plain = report_of(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(plain["summary"]["podsPending"], 4);
    assert_eq!(plain["summary"]["nodeClaimsLaunched"], 0);
    let reason = plain["pods"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("smarter-devices/fuse"), "the pending reason names the resource: {reason}");
}

#[test]
fn instance_types_with_overlays_prints_overlay_prices_list_prices_and_added_capacity() {
    let dir = std::env::temp_dir().join(format!("kerf-overlays-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("overlays.yaml");
    let manifests = example("manifests/overlays");
    let both = [manifests.join("m5-savings-plan.yaml"), manifests.join("fuse-devices.yaml")]
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    std::fs::write(&file, both).unwrap();
    let out = kerf(&["instance-types", "--json", "--overlays", file.to_str().unwrap(), "m5.large", "c5.large"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let types: Value = serde_json::from_slice(&out.stdout).unwrap();
    let m5 = &types[0];
    assert_eq!(m5["name"], "m5.large");
    assert_eq!(m5["capacity"]["smarter-devices/fuse"], "10");
    let od = m5["offerings"].as_array().unwrap().iter().find(|o| o["capacityType"] == "on-demand").unwrap();
    assert_eq!(od["listPrice"], 0.102);
    assert!((od["price"].as_f64().unwrap() - 0.0714).abs() < 1e-9, "{od}");
    assert_eq!(od["nodeOverlay"], "m5-savings-plan");
    let spot = m5["offerings"].as_array().unwrap().iter().find(|o| o["capacityType"] == "spot").unwrap();
    assert!(spot.get("listPrice").is_none(), "the plan covers on-demand only: {spot}");
    let c5 = &types[1];
    assert!(c5["offerings"].as_array().unwrap().iter().all(|o| o.get("nodeOverlay").is_none()));

    // A file that is not all valid NodeOverlays is bad input naming the object and field.
    std::fs::write(&file, "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {name: x}\nspec: {requirements: [], priceAdjustment: '30%'}\n").unwrap();
    let out = kerf(&["instance-types", "--overlays", file.to_str().unwrap(), "m5.large"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NodeOverlay/x: spec.priceAdjustment:"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
