//! `kerf snapshot` against a running `kerf serve` (over a kubeconfig, paged lists), then
//! `kerf simulate` of the snapshot: the same nodes (NodePool, instance type, zone, capacity type,
//! managed or not), every pod on the node it runs on, the same cost; then the what-if of a
//! changed NodePool, and `kerf simulate --from-cluster` on the live server.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;
use serde_json::Value;

fn kerf(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf")).args(args).output().expect("run kerf");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn kerf_json(args: &[&str]) -> Value {
    let (ok, stdout, stderr) = kerf(args);
    assert!(ok, "kerf {} failed: {stderr}", args.join(" "));
    serde_json::from_str(&stdout).expect("JSON report")
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// The catalog's $/h for an offering.
fn catalog_price(instance_type: &str, zone: &str, capacity_type: &str) -> f64 {
    let list = kerf_json(&["instance-types", "--region", "us-west-2", "--json", instance_type]);
    let offerings = list[0]["offerings"].as_array().expect("offerings");
    offerings
        .iter()
        .find(|o| o["zone"] == zone && o["capacityType"] == capacity_type)
        .and_then(|o| o["price"].as_f64())
        .expect("an offering")
}

const MEMORY_ON_SPOT: &str = r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: memory}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [r]}
      taints:
        - {key: workload, value: memory, effect: NoSchedule}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
"#;

#[test]
fn a_snapshot_of_a_served_cluster_simulates_to_the_same_nodes_placements_and_cost_and_a_changed_nodepool_saves() {
    let fixture = repo_file("crates/kerf/tests/fixtures/snapshot/cluster.yaml");
    let served = Served::start("snapshot", &[fixture.to_str().expect("path"), "--speed", "30"]);
    // Every pod runs on its node (the DaemonSet's on all seven).
    eventually(60, "18 running pods", || {
        let out = kubectl_ok(&served, &["get", "pods", "-A", "--field-selector", "status.phase=Running", "-o", "name"]);
        (out.lines().count() == 18).then_some(())
    });
    let snap = served.dir.join("snapshot.yaml");
    let kc = served.kubeconfig.to_str().expect("path").to_string();
    let (ok, _, stderr) = kerf(&["snapshot", "--kubeconfig", &kc, "--out", snap.to_str().expect("path")]);
    assert!(ok, "kerf snapshot failed: {stderr}");
    assert!(stderr.contains("7 nodes (5 managed by a NodePool), 18 pods (18 bound)"), "{stderr}");
    // What the cluster looked like, read with kubectl right after.
    let nodes: Value = serde_json::from_str(&kubectl_ok(&served, &["get", "nodes", "-o", "json"])).expect("nodes");
    let pods: Value = serde_json::from_str(&kubectl_ok(&served, &["get", "pods", "-A", "-o", "json"])).expect("pods");

    // Only what scheduling needs: no image, command, environment or foreign annotation.
    let text = std::fs::read_to_string(&snap).expect("snapshot");
    // Read 3 objects a page, the same cluster (the instant it is of apart).
    let paged = served.dir.join("paged.yaml");
    let (ok, _, stderr) =
        kerf(&["snapshot", "--kubeconfig", &kc, "--chunk-size", "3", "--out", paged.to_str().expect("path")]);
    assert!(ok, "kerf snapshot --chunk-size 3 failed: {stderr}");
    let without_start = |t: &str| t.lines().filter(|l| !l.starts_with("start:")).collect::<Vec<_>>().join("\n");
    assert_eq!(without_start(&std::fs::read_to_string(&paged).expect("paged")), without_start(&text));
    for secret in ["do-not-copy", "agent:1", "web:1", "command", "last-applied-configuration"] {
        assert!(!text.contains(secret), "the snapshot holds {secret:?}");
    }
    // Each EC2NodeClass keeps what the cluster resolved it to, for the what-if to launch with.
    let classes: Vec<Value> = serde_json::from_str(&kubectl_ok(&served, &["get", "ec2nodeclasses", "-o", "json"]))
        .map(|v: Value| v["items"].as_array().cloned().unwrap_or_default())
        .expect("classes");
    assert!(!classes.is_empty());
    let scenario = kerf_sim::scenario::load(&snap).expect("the snapshot loads");
    for live in &classes {
        let name = s(&live["metadata"]["name"]);
        let kept = scenario
            .steps
            .iter()
            .filter_map(|step| match step {
                kerf_sim::scenario::Step::Apply(ms) => Some(ms),
                _ => None,
            })
            .flatten()
            .find_map(|m| match &m.object {
                kerf_sim::scenario::ManifestObject::EC2NodeClass(c) if c.name() == name => c.status.clone(),
                _ => None,
            })
            .unwrap_or_else(|| panic!("EC2NodeClass {name} kept no status"));
        let ids =
            |v: &Value| v.as_array().map(|a| a.iter().map(|x| s(&x["id"])).collect::<Vec<_>>()).unwrap_or_default();
        assert_eq!(kept.subnets.iter().map(|x| x.id.clone()).collect::<Vec<_>>(), ids(&live["status"]["subnets"]));
        assert_eq!(kept.amis.iter().map(|x| x.id.clone()).collect::<Vec<_>>(), ids(&live["status"]["amis"]));
        assert!(kept.conditions.is_empty(), "conditions are the simulation's own");
    }

    let report = kerf_json(&["simulate", snap.to_str().expect("path"), "--report", "json"]);
    assert_eq!(report["endSeconds"], 0);
    assert_eq!(report["summary"]["nodeClaimsLaunched"], 0, "nothing launched: the nodes are the cluster's");
    let mut want_cost = 0.0;
    let mut live: BTreeMap<String, [String; 4]> = BTreeMap::new();
    for n in nodes["items"].as_array().expect("items") {
        let l = &n["metadata"]["labels"];
        let managed = l.get("karpenter.sh/nodepool").is_some();
        let row = [
            if managed { s(&l["karpenter.sh/nodepool"]) } else { String::new() },
            s(&l["node.kubernetes.io/instance-type"]),
            s(&l["topology.kubernetes.io/zone"]),
            if managed { s(&l["karpenter.sh/capacity-type"]) } else { String::new() },
        ];
        if managed {
            want_cost += catalog_price(&row[1], &row[2], &row[3]);
        }
        live.insert(s(&n["metadata"]["name"]), row);
    }
    let simulated: BTreeMap<String, [String; 4]> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            let managed = !n["nodePool"].is_null();
            let ct = if managed { s(&n["capacityType"]) } else { String::new() };
            (s(&n["name"]), [s(&n["nodePool"]), s(&n["instanceType"]), s(&n["zone"]), ct])
        })
        .collect();
    assert_eq!(simulated, live, "the same nodes, each in its NodePool (unmanaged ones in none)");
    let cost = report["summary"]["costPerHour"].as_f64().expect("cost");
    assert!((cost - want_cost).abs() < 1e-6, "cost {cost} against the catalog's {want_cost}");

    let placed = |items: &Value, node: &str| -> BTreeMap<String, String> {
        items
            .as_array()
            .expect("pods")
            .iter()
            .map(|p| {
                let (ns, name) = match p.get("metadata") {
                    Some(m) => (s(&m["namespace"]), s(&m["name"])),
                    None => (s(&p["namespace"]), s(&p["name"])),
                };
                let at = if node == "spec" { s(&p["spec"]["nodeName"]) } else { s(&p["node"]) };
                (format!("{ns}/{name}"), at)
            })
            .collect()
    };
    assert_eq!(placed(&report["pods"], "node"), placed(&pods["items"], "spec"), "every pod on the node it runs on");
    assert_eq!(report["summary"]["podsRunning"], 18);
    let owners: Vec<String> = report["pods"].as_array().expect("pods").iter().map(|p| s(&p["owner"])).collect();
    assert_eq!(owners.iter().filter(|o| *o == "Deployment/web").count(), 6);
    assert_eq!(owners.iter().filter(|o| *o == "DaemonSet/agent").count(), 7);

    // The what-if: the memory pool may use spot. Its on-demand node is replaced by a cheaper
    // one; the general pool and the unmanaged nodes stay; nothing is left pending.
    let change = write(&served.dir, "memory-spot.yaml", MEMORY_ON_SPOT);
    let whatif = kerf_json(&[
        "simulate",
        snap.to_str().expect("path"),
        "--for",
        "30m",
        "--apply",
        change.to_str().expect("path"),
        "--report",
        "json",
    ]);
    let c = &whatif["comparison"];
    assert!((c["before"]["costPerHour"].as_f64().expect("before") - want_cost).abs() < 1e-6, "{c}");
    assert_eq!(c["before"]["unmanagedNodes"], 2);
    assert_eq!(c["after"]["podsPending"], 0, "{c}");
    let pools: BTreeMap<String, &Value> =
        c["byNodePool"].as_array().expect("pools").iter().map(|p| (s(&p["nodePool"]), p)).collect();
    assert!(pools["memory"]["savingsPerHour"].as_f64().expect("savings") > 0.0, "{c}");
    assert_eq!(pools["general"]["savingsPerHour"], 0.0, "{c}");
    assert_eq!((pools[""]["nodesBefore"].clone(), pools[""]["nodesAfter"].clone()), (2.into(), 2.into()));
    let disruptions = whatif["disruptions"].as_array().expect("disruptions");
    assert!(
        disruptions.iter().any(|d| d["nodePool"] == "memory" && !d["detail"].as_str().unwrap_or("").is_empty()),
        "{disruptions:?}"
    );
    assert!(disruptions.iter().all(|d| d["nodePool"] == "memory"), "{disruptions:?}");
    let savings = c["savingsPerHour"].as_f64().expect("savings");
    assert!(savings > 0.0 && (savings - pools["memory"]["savingsPerHour"].as_f64().expect("pool")).abs() < 1e-6);

    // The same, straight from the live server.
    let live_whatif =
        kerf_json(&["simulate", "--from-cluster", "--kubeconfig", &kc, "--for", "1m", "--report", "json"]);
    let before = &live_whatif["comparison"]["before"];
    assert_eq!((before["nodes"].clone(), before["podsRunning"].clone()), (7.into(), 18.into()), "{before}");
    assert!((before["costPerHour"].as_f64().expect("cost") - want_cost).abs() < 1e-6);
    served.stop();
}
