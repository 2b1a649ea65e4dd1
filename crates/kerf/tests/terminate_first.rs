//! Terminate-first (Karpenter's `TerminateFirstDrift` and `TerminateFirstRepair` gates), through
//! the `kerf` binary. For a static NodePool at its node limit: with the drift gate a drifted node
//! is deleted first and the pool refilled from its new template, never over `limits.nodes`;
//! without it the drifted nodes stay, each saying why. Repair follows the same rule with its own
//! gate, for a static pool at its limit and for a node in a full capacity reservation: the broken
//! node goes first and its room is refilled after; without the gate it waits, saying why; where
//! the pool can grow, its replacement launches first.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

fn simulate(path: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", path.to_str().unwrap(), "--report", "json"])
        .output()
        .expect("run kerf");
    assert!(out.status.success(), "kerf simulate failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json report")
}

/// `yaml` written as `name` in a fresh directory beside the examples' manifests' copy.
fn scenario(dir: &Path, name: &str, yaml: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    path
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kerf-{name}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::copy(example("manifests/default-nodepool.yaml"), dir.join("manifests/default-nodepool.yaml")).unwrap();
    dir
}

fn nodes(r: &Value) -> &Vec<Value> {
    r["nodes"].as_array().unwrap()
}

/// The most nodes any timeline sample had.
fn most_nodes(r: &Value) -> u64 {
    r["timeline"].as_array().unwrap().iter().map(|s| s["nodes"].as_u64().unwrap()).max().unwrap_or(0)
}

fn team(n: &Value) -> Option<&str> {
    n["labels"]["team"].as_str()
}

#[test]
fn with_the_gate_a_static_pool_at_its_node_limit_terminates_a_drifted_node_first() {
    let r = simulate(&example("static-nodepool-terminate-first.yaml"));
    let d: Vec<&Value> = r["disruptions"].as_array().unwrap().iter().filter(|d| d["reason"] == "Drifted").collect();
    assert_eq!(d.len(), 3, "every drifted node goes: {d:#?}");
    // The pool is at its limit: the first goes without a replacement. Once it is gone the pool
    // has room again, and the next are replaced first as usual.
    assert_eq!(d[0]["nodePool"], "fixed");
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 0, "nothing pre-spun: {}", d[0]);
    let detail = d[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("is at its node limit (limits.nodes 3, 3 NodeClaims): the node is terminated first"),
        "{detail}"
    );
    assert!(d[1..].iter().all(|e| e["replacements"].as_array().unwrap().len() == 1), "{d:#?}");
    assert_eq!(nodes(&r).len(), 3);
    assert!(nodes(&r).iter().all(|n| team(n) == Some("blue")), "refilled from the new template");
    assert_eq!(most_nodes(&r), 3, "never more than limits.nodes");
}

#[test]
fn without_the_gate_a_static_pool_at_its_node_limit_keeps_its_drifted_nodes_and_says_why() {
    let dir = temp_dir("terminate-first-off");
    let yaml = std::fs::read_to_string(example("static-nodepool-terminate-first.yaml"))
        .unwrap()
        .replace("terminateFirstDrift: true", "terminateFirstDrift: false");
    let r = simulate(&scenario(&dir, "off.yaml", &yaml));
    assert_eq!(r["disruptions"].as_array().unwrap().len(), 0, "{:#?}", r["disruptions"]);
    assert_eq!(nodes(&r).len(), 3);
    for n in nodes(&r) {
        assert_eq!(team(n), None);
        let why = n["disruptionBlocked"].as_str().unwrap_or_default();
        assert!(
            why.contains("at its node limit (limits.nodes 3, 3 NodeClaims) and cannot stage a replacement"),
            "{why}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The static pool example with node repair on (and `TerminateFirstRepair` as `gate`), `limits.nodes`
/// as `limit`, one of its nodes failed at 2 minutes and 40 minutes run: the report and that node.
fn repair_in_static_pool(name: &str, gate: bool, limit: u32) -> (Value, String) {
    let dir = temp_dir(name);
    let base = std::fs::read_to_string(example("static-nodepool-terminate-first.yaml"))
        .unwrap()
        .replace(
            "featureGates: {terminateFirstDrift: true}",
            &format!("featureGates: {{nodeRepair: true, terminateFirstRepair: {gate}}}"),
        )
        .replace("limits: {nodes: \"3\"}", &format!("limits: {{nodes: \"{limit}\"}}"));
    let (head, _) = base.split_once("  - patch:").unwrap();
    let first = simulate(&scenario(&dir, "names.yaml", head));
    let broken = nodes(&first)[0]["name"].as_str().unwrap().to_string();
    let yaml = format!("{head}  - fail: {{node: {broken}}}\n  - wait: 40m\n");
    let r = simulate(&scenario(&dir, "repair.yaml", &yaml));
    std::fs::remove_dir_all(&dir).ok();
    (r, broken)
}

#[test]
fn with_the_repair_gate_a_static_pool_at_its_node_limit_terminates_the_broken_node_first() {
    let (r, broken) = repair_in_static_pool("terminate-first-repair", true, 3);
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Unhealthy");
    assert_eq!(d[0]["node"], broken.as_str());
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 0, "nothing pre-spun: {}", d[0]);
    let detail = d[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("is at its node limit (limits.nodes 3, 3 NodeClaims): the node is terminated first"),
        "{detail}"
    );
    assert_eq!(nodes(&r).len(), 3);
    assert!(nodes(&r).iter().all(|n| n["name"] != broken.as_str()), "the broken node is gone");
    assert_eq!(most_nodes(&r), 3, "the refill waited for the broken node: never more than limits.nodes");
}

#[test]
fn without_the_repair_gate_a_static_pool_at_its_node_limit_keeps_the_broken_node_and_says_why() {
    let (r, broken) = repair_in_static_pool("terminate-first-repair-off", false, 3);
    assert_eq!(r["disruptions"].as_array().unwrap().len(), 0, "{:#?}", r["disruptions"]);
    let node = nodes(&r).iter().find(|n| n["name"] == broken.as_str()).expect("the broken node stays");
    let why = node["disruptionBlocked"].as_str().unwrap_or_default();
    assert!(
        why.contains("but static NodePool fixed is at its node limit (limits.nodes 3, 3 NodeClaims) and cannot stage a replacement"),
        "{why}"
    );
    assert_eq!(most_nodes(&r), 3);
}

#[test]
fn repair_of_a_static_pool_with_room_under_its_limit_launches_the_replacement_first() {
    let (r, broken) = repair_in_static_pool("terminate-first-repair-room", true, 4);
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["node"], broken.as_str());
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 1, "pre-spun from the template: {}", d[0]);
    assert_eq!(nodes(&r).len(), 3);
    assert!(nodes(&r).iter().all(|n| n["name"] != broken.as_str()), "the broken node is gone");
}

/// Two nodes filling a reservation that is their pool's only capacity type, one of them failed
/// at 2 minutes, node repair on and `TerminateFirstRepair` as `gate`: the report and that node.
fn repair_in_full_reservation(gate: bool) -> (Value, String) {
    let dir = temp_dir(&format!("terminate-first-repair-reserved-{gate}"));
    let pool = std::fs::read_to_string(example("manifests/reserved/nodepool.yaml"))
        .unwrap()
        .replace(r#"values: ["reserved", "spot", "on-demand"]"#, r#"values: ["reserved"]"#);
    std::fs::write(dir.join("pool.yaml"), pool).unwrap();
    let head = format!(
        "name: terminate-first-repair\nsettings: {{featureGates: {{nodeRepair: true, terminateFirstRepair: {gate}}}}}\n\
         cloud:\n  capacityReservations:\n    - {{id: cr-0a1b2c3d4e5f60001, instanceType: m5.2xlarge, zone: us-west-2a, \
         count: 2, tags: {{team: web}}}}\nsteps:\n  - apply: pool.yaml\n  - apply: {}\n  \
         - scale: {{kind: Deployment, name: inflate, namespace: default, replicas: 12}}\n  - wait: 2m\n",
        example("manifests/inflate.yaml").display()
    );
    let first = simulate(&scenario(&dir, "names.yaml", &head));
    assert_eq!(nodes(&first).len(), 2, "{:#?}", nodes(&first));
    let broken = nodes(&first)[0]["name"].as_str().unwrap().to_string();
    let r = simulate(&scenario(&dir, "repair.yaml", &format!("{head}  - fail: {{node: {broken}}}\n  - wait: 40m\n")));
    std::fs::remove_dir_all(&dir).ok();
    (r, broken)
}

#[test]
fn with_the_repair_gate_a_broken_node_in_a_full_reservation_goes_first_and_is_replaced_into_its_room() {
    let (r, broken) = repair_in_full_reservation(true);
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!((d[0]["reason"].as_str(), d[0]["node"].as_str()), (Some("Unhealthy"), Some(broken.as_str())));
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 0, "nothing pre-spun: {}", d[0]);
    let detail = d[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("capacity reservation cr-0a1b2c3d4e5f60001 is full: the node is terminated first"),
        "{detail}"
    );
    assert_eq!(nodes(&r).len(), 2);
    for n in nodes(&r) {
        assert_ne!(n["name"], broken.as_str(), "the broken node is gone");
        assert_eq!(n["capacityReservationId"], "cr-0a1b2c3d4e5f60001", "its replacement took the room it freed");
    }
    assert_eq!(most_nodes(&r), 2, "the replacement launched after the broken node went");
    assert_eq!(r["summary"]["podsRunning"], 12);
}

#[test]
fn without_the_repair_gate_a_broken_node_in_a_full_reservation_waits_and_says_why() {
    let (r, broken) = repair_in_full_reservation(false);
    assert_eq!(r["disruptions"].as_array().unwrap().len(), 0, "{:#?}", r["disruptions"]);
    let node = nodes(&r).iter().find(|n| n["name"] == broken.as_str()).expect("the broken node stays");
    let why = node["disruptionBlocked"].as_str().unwrap_or_default();
    assert!(
        why.contains("but capacity reservation cr-0a1b2c3d4e5f60001 is full and pod default/inflate-")
            && why.ends_with("would fit nowhere else"),
        "{why}"
    );
}
