//! Capacity reservations end to end, through the `kerf` binary: the shipped examples (an ODCR
//! filled before spot, a capacity block drained before its end, consolidation into a
//! reservation that starts), their reports (JSON, text, HTML), and a bad reservation refused.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

fn run(path: &std::path::Path, report: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", path.to_str().unwrap(), "--report", report])
        .output()
        .expect("run kerf")
}

fn simulate(name: &str) -> Value {
    let out = run(&example(name), "json");
    assert!(out.status.success(), "kerf simulate {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json report")
}

fn nodes(r: &Value) -> &Vec<Value> {
    r["nodes"].as_array().unwrap()
}

fn label<'a>(n: &'a Value, key: &str) -> Option<&'a str> {
    n["labels"][key].as_str()
}

#[test]
fn an_odcr_is_filled_before_spot_and_the_rest_falls_through_to_spot() {
    let r = simulate("capacity-reservation-odcr.yaml");
    assert_eq!(r["summary"]["podsPending"], 0);
    let (reserved, other): (Vec<&Value>, Vec<&Value>) = nodes(&r).iter().partition(|n| n["capacityType"] == "reserved");
    assert_eq!(reserved.len(), 2, "the reservation holds two instances: {:#?}", nodes(&r));
    for n in &reserved {
        assert_eq!(n["instanceType"], "m5.2xlarge");
        assert_eq!(n["zone"], "us-west-2a");
        assert_eq!(n["capacityReservationId"], "cr-0a1b2c3d4e5f60001");
        assert_eq!(label(n, "karpenter.sh/capacity-type"), Some("reserved"));
        assert_eq!(label(n, "karpenter.k8s.aws/capacity-reservation-id"), Some("cr-0a1b2c3d4e5f60001"));
        assert_eq!(label(n, "karpenter.k8s.aws/capacity-reservation-type"), Some("default"));
        assert_eq!(n["pricePerHour"], 0.0, "an ODCR is prepaid by default");
        assert!(n["pods"].as_u64().unwrap() >= 6, "a reserved node is filled: {n}");
        assert!(n["disruptionBlocked"].as_str().unwrap().contains("reserved capacity"), "{}", n["disruptionBlocked"]);
    }
    assert!(!other.is_empty());
    for n in &other {
        assert_eq!(n["capacityType"], "spot", "past the reservation, spot before on-demand");
        assert!(n.get("capacityReservationId").is_none());
        assert_eq!(label(n, "karpenter.k8s.aws/capacity-reservation-id"), None);
    }
    let shares = &r["summary"]["byCapacityType"];
    assert_eq!(shares["reserved"]["nodes"], 2);
    assert_eq!(shares["reserved"]["costPerHour"], 0.0);
    assert_eq!(shares["spot"]["nodes"], other.len());
    assert_eq!(shares["spot"]["costPerHour"], r["summary"]["costPerHour"]);
}

#[test]
fn with_the_reserved_capacity_gate_off_the_odcr_is_neither_listed_nor_launched_into() {
    let dir = std::env::temp_dir().join(format!("kerf-reserved-gate-off-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = format!("{}/", example("manifests").display());
    let yaml = std::fs::read_to_string(example("capacity-reservation-odcr.yaml"))
        .unwrap()
        .replace("manifests/", &manifests)
        .replace("cloud:\n", "settings: {featureGates: {reservedCapacity: false}}\ncloud:\n");
    let path = dir.join("odcr-gate-off.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = run(&path, "json");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["summary"]["podsPending"], 0);
    assert!(!nodes(&r).is_empty());
    for n in nodes(&r) {
        assert_eq!(n["capacityType"], "spot", "no reserved offering: spot first: {n}");
        assert!(n.get("capacityReservationId").is_none());
    }
    // No kerf warning that the gate is not acted on.
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("ReservedCapacity"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_odcr_reports_show_reserved_capacity_apart() {
    let text = run(&example("capacity-reservation-odcr.yaml"), "text");
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("By capacity type (reserved as declared): reserved 2 node(s) $0.0000/hour, spot"), "{text}");
    let html = run(&example("capacity-reservation-odcr.yaml"), "html");
    let html = String::from_utf8(html.stdout).unwrap();
    assert!(html.contains("id=\"summary-capacity-reserved\">2 (0.0000/h)"), "reserved summary card");
    assert!(html.contains("<th data-col=\"capacityReservationId\">reservation</th>"));
    assert!(html.contains("<td>cr-0a1b2c3d4e5f60001</td>"));
}

#[test]
fn a_capacity_block_is_drained_before_its_end_and_its_workers_move() {
    let r = simulate("capacity-block.yaml");
    // The block ends at 2h; EC2 reclaims from 1h30m; kerf drains at 1h20m.
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 2, "{d:#?}");
    for e in d {
        assert_eq!(e["reason"], "Interrupted");
        assert_eq!(e["instanceType"], "p5.48xlarge");
        assert_eq!(e["atSeconds"], 4800.0);
        let gone = e["terminatedSeconds"].as_f64().unwrap();
        assert!(gone < 5400.0, "terminated before EC2 reclaims the block: {gone}");
        assert!(e["detail"].as_str().unwrap().starts_with("its capacity block ends"), "{}", e["detail"]);
        assert_eq!(e["replacements"].as_array().unwrap().len(), 1);
    }
    assert_eq!(r["summary"]["nodeClaimsLaunched"], 4);
    assert_eq!(r["summary"]["podsRunning"], 2);
    for n in nodes(&r) {
        assert_eq!(n["capacityType"], "on-demand", "the replacements cannot use the draining block");
    }
    // Before the drain the workers ran in the block, at its declared price ($0/h).
    let tl = r["timeline"].as_array().unwrap();
    let before = tl.iter().rfind(|s| s["atSeconds"].as_f64().unwrap() < 4800.0).unwrap();
    assert_eq!((before["nodes"].as_u64(), before["costPerHour"].as_f64()), (Some(2), Some(0.0)));
    let after = tl.last().unwrap();
    assert!(after["costPerHour"].as_f64().unwrap() > 200.0, "two on-demand p5.48xlarge");
}

#[test]
fn consolidation_moves_work_into_a_reservation_once_it_starts() {
    let r = simulate("capacity-reservation-consolidation.yaml");
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Underutilized");
    assert!(d[0]["atSeconds"].as_f64().unwrap() >= 600.0, "not before the reservation starts");
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 1);
    let n = &nodes(&r)[0];
    assert_eq!(nodes(&r).len(), 1);
    assert_eq!(n["capacityReservationId"], "cr-0a1b2c3d4e5f60003");
    assert_eq!(n["pods"], 7);
    assert_eq!(r["summary"]["costPerHour"], 0.0);
}

#[test]
fn a_bad_reservation_is_refused_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("kerf-reservations-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "{id: cr-1, instanceType: m5.large, zone: us-west-2a, type: block}",
            "cloud.capacityReservations[0].type: \"block\" is not one of default, capacity-block",
        ),
        (
            "{id: cr-1, instanceType: m5.large, zone: us-west-2a, type: capacity-block}",
            "cloud.capacityReservations[0].end: required: a capacity block has an end time",
        ),
        (
            "{id: cr-1, instanceType: m5.huge, zone: us-west-2a}",
            "cloud.capacityReservations[0].instanceType: unknown instance type \"m5.huge\" in region us-west-2",
        ),
    ];
    for (i, (entry, problem)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad-{i}.yaml"));
        std::fs::write(&path, format!("name: bad\ncloud:\n  capacityReservations:\n    - {entry}\nsteps: []\n"))
            .unwrap();
        let out = run(&path, "json");
        assert_eq!(out.status.code(), Some(2), "{entry}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(problem), "{entry}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_reservation_that_ends_drifts_its_nodes_and_their_pods_move() {
    let dir = std::env::temp_dir().join(format!("kerf-reservation-ends-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = example("manifests");
    let path = dir.join("ends.yaml");
    std::fs::write(
        &path,
        format!(
            "name: odcr-ends\ncloud:\n  capacityReservations:\n    - {{id: cr-0a1b2c3d4e5f60009, instanceType: m5.2xlarge, \
             zone: us-west-2a, count: 2, tags: {{team: web}}, end: 10m}}\nsteps:\n  - apply: {m}/reserved/nodepool.yaml\n  \
             - apply: {m}/inflate.yaml\n  - scale: {{kind: Deployment, name: inflate, namespace: default, replicas: 7}}\n  \
             - wait: 20m\n",
            m = manifests.display()
        ),
    )
    .unwrap();
    let out = run(&path, "json");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Drifted");
    assert_eq!(d[0]["atSeconds"], 600);
    assert!(
        d[0]["detail"]
            .as_str()
            .unwrap()
            .contains("no longer selects its capacity reservation (CapacityReservationDrift)"),
        "{}",
        d[0]["detail"]
    );
    assert_eq!(r["summary"]["podsRunning"], 7);
    assert!(nodes(&r).iter().all(|n| n["capacityType"] == "spot" && n.get("capacityReservationId").is_none()));
    std::fs::remove_dir_all(&dir).ok();
}

/// Two drifted nodes in a full reservation their pool's only capacity type (reserved), with
/// Karpenter's `TerminateFirstDrift` gate set to `gate`: the report.
fn drifted_in_a_full_reservation(gate: bool) -> Value {
    let dir = std::env::temp_dir().join(format!("kerf-terminate-first-{gate}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The NodePool of the examples, allowing reserved capacity only.
    let pool = std::fs::read_to_string(example("manifests/reserved/nodepool.yaml"))
        .unwrap()
        .replace(r#"values: ["reserved", "spot", "on-demand"]"#, r#"values: ["reserved"]"#);
    std::fs::write(dir.join("pool.yaml"), pool).unwrap();
    let path = dir.join("terminate-first.yaml");
    std::fs::write(
        &path,
        format!(
            "name: terminate-first\nsettings: {{featureGates: {{terminateFirstDrift: {gate}}}}}\ncloud:\n  capacityReservations:\n    - {{id: cr-0a1b2c3d4e5f60001, \
             instanceType: m5.2xlarge, zone: us-west-2a, count: 2, tags: {{team: web}}}}\nsteps:\n  \
             - apply: pool.yaml\n  - apply: {}\n  \
             - scale: {{kind: Deployment, name: inflate, namespace: default, replicas: 12}}\n  - wait: 2m\n  \
             - patch: {{kind: NodePool, name: default, merge: {{spec: {{template: {{metadata: {{labels: {{team: web}}}}}}}}}}}}\n  \
             - wait: 10m\n",
            example("manifests/inflate.yaml").display()
        ),
    )
    .unwrap();
    let out = run(&path, "json");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).ok();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn with_the_gate_a_drifted_node_in_a_full_reservation_is_terminated_first_and_replaced_into_its_room() {
    let r = drifted_in_a_full_reservation(true);
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 2, "both drifted nodes are replaced: {d:#?}");
    for e in d {
        assert_eq!(e["reason"], "Drifted");
        assert_eq!(e["replacements"].as_array().unwrap().len(), 0, "terminated first, nothing pre-spun");
        assert!(e["detail"].as_str().unwrap().contains("is full: the node is terminated first"), "{}", e["detail"]);
    }
    assert_eq!(r["summary"]["podsRunning"], 12);
    assert_eq!(nodes(&r).len(), 2);
    for n in nodes(&r) {
        assert_eq!(n["capacityReservationId"], "cr-0a1b2c3d4e5f60001");
        assert_eq!(label(n, "team"), Some("web"), "the replacement carries the new template");
    }
}

#[test]
fn without_the_gate_drifted_nodes_in_a_full_reservation_stay_and_say_their_pods_fit_nowhere_else() {
    let r = drifted_in_a_full_reservation(false);
    assert_eq!(r["disruptions"].as_array().unwrap().len(), 0, "{:#?}", r["disruptions"]);
    assert_eq!(r["summary"]["podsRunning"], 12);
    assert_eq!(nodes(&r).len(), 2);
    let whys: Vec<&str> = nodes(&r).iter().map(|n| n["disruptionBlocked"].as_str().unwrap_or_default()).collect();
    assert!(nodes(&r).iter().all(|n| label(n, "team").is_none()), "nothing replaced");
    assert!(whys.iter().all(|w| w.contains("Drifted")), "{whys:?}");
    // The node drift tried says why it stays (the other waits for the budget).
    assert!(whys.iter().any(|w| w.contains("would fit nowhere else")), "{whys:?}");
}

/// A scenario in a fresh directory with the reservations example's NodePool (its capacity types
/// replaced by `capacity_types`, and `extra_requirement` added) and the inflate Deployment at
/// `replicas`: `cloud` and `settings` as given, run for `wait`. The report.
fn reserved_scenario(
    name: &str,
    settings: &str,
    cloud: &str,
    capacity_types: &str,
    replicas: u32,
    wait: &str,
) -> Value {
    let dir = std::env::temp_dir().join(format!("kerf-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pool = std::fs::read_to_string(example("manifests/reserved/nodepool.yaml"))
        .unwrap()
        .replace(r#"values: ["reserved", "spot", "on-demand"]"#, capacity_types);
    std::fs::write(dir.join("pool.yaml"), pool).unwrap();
    let path = dir.join("scenario.yaml");
    std::fs::write(
        &path,
        format!(
            "name: {name}\nsettings: {settings}\ncloud:\n{cloud}steps:\n  - apply: pool.yaml\n  - apply: {}\n  \
             - scale: {{kind: Deployment, name: inflate, namespace: default, replicas: {replicas}}}\n  - wait: {wait}\n",
            example("manifests/inflate.yaml").display()
        ),
    )
    .unwrap();
    let out = run(&path, "json");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).ok();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_interruptible_reservation_reclaimed_by_its_owner_has_its_nodes_drained_and_replaced_like_spot() {
    let r = simulate("capacity-reservation-interruptible.yaml");
    let interrupted: Vec<&Value> =
        r["disruptions"].as_array().unwrap().iter().filter(|d| d["reason"] == "Interrupted").collect();
    assert_eq!(interrupted.len(), 2, "{:#?}", r["disruptions"]);
    for d in &interrupted {
        assert!(
            d["detail"].as_str().unwrap().contains("the owner of its interruptible capacity reservation reclaims it"),
            "{}",
            d["detail"]
        );
        let at = d["atSeconds"].as_f64().unwrap();
        assert!((1800.0..1830.0).contains(&at), "interrupted at the reclaim, 30 minutes in: {at}");
    }
    assert_eq!(r["summary"]["podsRunning"], 12);
    for n in nodes(&r) {
        assert_eq!(n["capacityType"], "spot", "reserved first, then spot: {n}");
        assert!(n.get("capacityReservationId").is_none(), "nothing launches into a reclaimed reservation: {n}");
    }
}

#[test]
fn an_interruptible_reservations_nodes_are_labelled_so_before_the_reclaim() {
    let dir = std::env::temp_dir().join(format!("kerf-interruptible-before-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = std::fs::read_to_string(example("capacity-reservation-interruptible.yaml"))
        .unwrap()
        .replace("manifests/", &format!("{}/", example("manifests").display()))
        .replace("  - wait: 35m\n", "");
    let path = dir.join("before.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = run(&path, "json");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).ok();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reserved: Vec<&Value> = nodes(&r).iter().filter(|n| n["capacityType"] == "reserved").collect();
    assert_eq!(reserved.len(), 2, "{:#?}", nodes(&r));
    for n in &reserved {
        assert_eq!(n["capacityReservationId"], "cr-0a1b2c3d4e5f60009");
        assert_eq!(label(n, "karpenter.k8s.aws/capacity-reservation-interruptible"), Some("true"));
    }
}

/// An open reservation of one m5.large in us-west-2a that no class selects, and a pool that
/// launches on-demand m5.large in us-west-2a, with the `ReservedCapacity` gate as `gate`.
fn on_demand_beside_an_open_reservation(gate: bool) -> Value {
    let cloud = "  capacityReservations:\n    - {id: cr-0a1b2c3d4e5f6000a, instanceType: m5.large, zone: us-west-2a, \
                 instanceMatchCriteria: open}\n";
    let types = r#"values: ["on-demand"]
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["m5.large"]
        - key: topology.kubernetes.io/zone
          operator: In
          values: ["us-west-2a"]"#;
    let settings = format!("{{featureGates: {{reservedCapacity: {gate}}}}}");
    reserved_scenario(&format!("open-reservation-{gate}"), &settings, cloud, types, 1, "2m")
}

#[test]
fn with_the_gate_an_on_demand_launch_stays_out_of_an_open_reservation_as_it_asks_ec2_for_none() {
    let r = on_demand_beside_an_open_reservation(true);
    assert_eq!(nodes(&r).len(), 1);
    let n = &nodes(&r)[0];
    assert_eq!(n["capacityType"], "on-demand");
    assert!(n.get("capacityReservationId").is_none(), "{n}");
    assert!(n["pricePerHour"].as_f64().unwrap() > 0.0, "billed on demand: {n}");
}

#[test]
fn without_the_gate_ec2_puts_an_on_demand_launch_into_a_matching_open_reservation() {
    let r = on_demand_beside_an_open_reservation(false);
    assert_eq!(nodes(&r).len(), 1);
    let n = &nodes(&r)[0];
    assert_eq!(n["capacityType"], "on-demand", "Karpenter labels what it launched");
    assert_eq!(label(n, "karpenter.k8s.aws/capacity-reservation-id"), None);
    assert_eq!(n["capacityReservationId"], "cr-0a1b2c3d4e5f6000a", "the report names where EC2 put it");
    assert_eq!(n["pricePerHour"], 0.0, "the reservation is prepaid");
}
