//! Every shipped example scenario, run through the `kerf` binary, with its outcome asserted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

fn simulate_raw(name: &str, report: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", example(name).to_str().unwrap(), "--report", report])
        .output()
        .expect("run kerf")
}

fn simulate(name: &str) -> Value {
    let out = simulate_raw(name, "json");
    assert!(out.status.success(), "kerf simulate {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json report")
}

fn pods<'a>(r: &'a Value, prefix: &str) -> Vec<&'a Value> {
    r["pods"].as_array().unwrap().iter().filter(|p| p["name"].as_str().unwrap().starts_with(prefix)).collect()
}

fn node<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).expect("node in report")
}

fn summary(r: &Value, key: &str) -> u64 {
    r["summary"][key].as_u64().unwrap_or_else(|| panic!("summary.{key}"))
}

#[test]
fn inflate_runs_all_sixty_one_cpu_pods_on_default_pool_nodes() {
    let r = simulate("inflate.yaml");
    assert_eq!(r["scenario"], "inflate");
    assert_eq!(summary(&r, "pods"), 60);
    assert_eq!(summary(&r, "podsRunning"), 60);
    assert_eq!(summary(&r, "podsPending"), 0);
    let nodes = r["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty());
    assert_eq!(summary(&r, "nodes"), nodes.len() as u64);
    assert_eq!(summary(&r, "nodeClaimsLaunched"), nodes.len() as u64);
    for n in nodes {
        assert_eq!(n["nodePool"], "default");
        assert_eq!(n["ready"], true);
        assert!(n["nodeClaim"].as_str().unwrap().starts_with("default-"));
        assert!(n["pricePerHour"].as_f64().unwrap() > 0.0);
    }
    let placed: u64 = nodes.iter().map(|n| n["pods"].as_u64().unwrap()).sum();
    assert_eq!(placed, 60);
    for p in pods(&r, "inflate-") {
        assert_eq!(p["owner"], "Deployment/inflate");
        assert_eq!(p["phase"], "Running");
        assert!(p["reason"].is_null());
    }
    assert!(r["summary"]["costPerHour"].as_f64().unwrap() > 0.0);
    assert!(r["summary"]["cost"].as_f64().unwrap() > 0.0);
}

#[test]
fn fixed_count_inflate_with_required_anti_affinity_launches_exactly_six_nodes() {
    let r = simulate("inflate-fixed-nodes.yaml");
    assert_eq!(summary(&r, "podsRunning"), 6);
    assert_eq!(summary(&r, "podsPending"), 0);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6);
    for n in nodes {
        assert_eq!(n["nodePool"], "default");
        assert_eq!(n["pods"], 1, "one karpenter-inflate pod per node: {}", n["name"]);
    }
    let hosts: BTreeSet<&str> = pods(&r, "karpenter-inflate-").iter().map(|p| p["node"].as_str().unwrap()).collect();
    assert_eq!(hosts.len(), 6);
}

#[test]
fn capacity_spread_rollout_leaves_no_pod_pending() {
    let r = simulate("capacity-spread-rollout.yaml");
    assert_eq!(summary(&r, "podsPending"), 0, "{:#}", r["pods"]);
    let typea = pods(&r, "example-17-teama-typea-ondemand-");
    assert_eq!(typea.len(), 2, "old revision scaled away, two new pods");
    let revisions: BTreeSet<&str> =
        typea.iter().map(|p| p["name"].as_str().unwrap().rsplit_once('-').unwrap().0).collect();
    assert_eq!(revisions.len(), 1, "both pods from the rolled-out revision: {revisions:?}");
    for p in &typea {
        assert_eq!(p["phase"], "Running");
        let n = node(&r, p["node"].as_str().unwrap());
        assert_eq!(n["nodePool"], "teama-on-demand");
        assert_eq!(n["labels"]["capacity-spread"], "1");
        assert_eq!(n["capacityType"], "on-demand");
    }
    let typeb = pods(&r, "example-17-teama-typeb-");
    assert_eq!(typeb.len(), 4);
    let mut per_domain: BTreeMap<String, u64> = BTreeMap::new();
    for p in &typeb {
        assert_eq!(p["phase"], "Running");
        let n = node(&r, p["node"].as_str().unwrap());
        *per_domain.entry(n["labels"]["capacity-spread"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let (min, max) = (per_domain.values().min().unwrap(), per_domain.values().max().unwrap());
    assert!(max - min <= 1, "typeb spread over capacity-spread within maxSkew 1: {per_domain:?}");
}

#[test]
fn zone_and_hostname_spread_runs_all_twenty_pods_across_three_zones() {
    let r = simulate("zone-hostname-spread.yaml");
    let spread = pods(&r, "host-spread-");
    assert_eq!(spread.len(), 20);
    let mut per_zone: BTreeMap<String, i64> = BTreeMap::new();
    let mut per_host: BTreeMap<String, i64> = BTreeMap::new();
    for p in &spread {
        assert_eq!(p["phase"], "Running", "{p}");
        let host = p["node"].as_str().unwrap();
        *per_host.entry(host.to_string()).or_default() += 1;
        *per_zone.entry(node(&r, host)["zone"].as_str().unwrap().to_string()).or_default() += 1;
    }
    assert_eq!(per_zone.len(), 3, "pods in all three zones: {per_zone:?}");
    let zmax = per_zone.values().max().unwrap();
    let zmin = per_zone.values().min().unwrap();
    assert!(zmax - zmin <= 5, "zone skew within 5: {per_zone:?}");
    let hmax = per_host.values().max().unwrap();
    let hmin = per_host.values().min().unwrap();
    assert!(hmax - hmin <= 2, "hostname skew within 2: {per_host:?}");
    let node_zones: BTreeSet<&str> =
        r["nodes"].as_array().unwrap().iter().map(|n| n["zone"].as_str().unwrap()).collect();
    assert_eq!(node_zones.len(), 3);
}

#[test]
fn daemonset_added_later_that_cannot_fit_gets_its_full_nodes_replaced_as_unfit() {
    let r = simulate("daemonset-overhead.yaml");
    let fluent = pods(&r, "fluent-bit-");
    assert!(fluent.iter().all(|p| p["owner"] == "DaemonSet/fluent-bit"));
    // Never on Fargate (node affinity); on both managed node group nodes and on every kerf node.
    for p in &fluent {
        assert_eq!(p["phase"], "Running", "{p}");
        assert!(!p["node"].as_str().unwrap().starts_with("fargate-"), "{p}");
    }
    let kerf_nodes: Vec<&Value> =
        r["nodes"].as_array().unwrap().iter().filter(|n| n["nodePool"] == "karpenter-default").collect();
    assert_eq!(fluent.len(), 2 + kerf_nodes.len());
    // The two full nodes launched before the DaemonSet were replaced, one at a time (budget 10%).
    let unfit: Vec<&Value> = r["disruptions"].as_array().unwrap().iter().filter(|d| d["reason"] == "Unfit").collect();
    assert_eq!(unfit.len(), 2, "{:#}", r["disruptions"]);
    for d in &unfit {
        assert!(d["detail"].as_str().unwrap().contains("fluent-bit"), "{d}");
        assert_eq!(d["replacements"].as_array().unwrap().len(), 1, "{d}");
        let (at, gone) = (d["atSeconds"].as_f64().unwrap(), d["terminatedSeconds"].as_f64().unwrap());
        assert!(gone >= at + 30.0, "replacement launched and ready before the node went: {d}");
    }
    assert!(unfit[1]["atSeconds"].as_f64().unwrap() >= unfit[0]["terminatedSeconds"].as_f64().unwrap());
    assert_eq!(summary(&r, "podsPending"), 0);
    assert_eq!(pods(&r, "app-").iter().filter(|p| p["phase"] == "Running").count(), 4);
}

#[test]
fn pod_eni_pending_reason_names_the_nodepool_and_the_resource() {
    let r = simulate("pod-eni.yaml");
    let eni = pods(&r, "nginx-a1938a0d");
    assert_eq!(eni.len(), 1);
    assert_eq!(eni[0]["phase"], "Pending");
    assert_eq!(eni[0]["owner"], "");
    let reason = eni[0]["reason"].as_str().unwrap();
    assert!(reason.contains("vpc.amazonaws.com/pod-eni"), "{reason}");
    assert!(reason.contains("test-nodepool"), "{reason}");
    let plain = pods(&r, "nginx-plain");
    assert_eq!(plain[0]["phase"], "Running");
}

#[test]
fn capacity_quota_caps_two_pools_at_64_vcpu_and_names_itself_in_the_pending_reason() {
    let r = simulate("capacity-quota.yaml");
    // 16 m5.xlarge (4 vCPU) between the two pools: 64 vCPU, no more.
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 16, "{nodes:?}");
    let per_pool = |p: &str| nodes.iter().filter(|n| n["nodePool"] == p).count();
    assert!(per_pool("team-a") > 0 && per_pool("team-b") > 0, "both pools launch under the one quota");
    assert_eq!(per_pool("team-a") + per_pool("team-b"), 16);
    assert_eq!(summary(&r, "podsRunning"), 32);
    let pending: Vec<&Value> = r["pods"].as_array().unwrap().iter().filter(|p| p["phase"] == "Pending").collect();
    assert_eq!(pending.len(), 8);
    for p in pending {
        let reason = p["reason"].as_str().unwrap();
        assert!(
            reason.contains("CapacityQuota \"batch-cpu\" would exceed cpu: 64 limit, 64 used, needs 4"),
            "{reason}"
        );
    }
    assert_eq!(
        r["quotas"],
        serde_json::json!([{
            "name": "batch-cpu", "limits": {"cpu": "64"}, "used": {"cpu": "64"}, "peakUsed": {"cpu": "64"},
            "timeline": [{"atSeconds": 0, "used": {"cpu": "0"}}, {"atSeconds": 1, "used": {"cpu": "64"}}]
        }])
    );
    let text = String::from_utf8(simulate_raw("capacity-quota.yaml", "text").stdout).unwrap();
    assert!(text.contains("batch-cpu  cpu 64/64   cpu 64/64"), "{text}");
    let html = String::from_utf8(simulate_raw("capacity-quota.yaml", "html").stdout).unwrap();
    assert!(html.contains("<table id=\"capacity-quotas\">") && html.contains("cpu 64/64"), "html section");
}

#[test]
fn same_scenario_gives_byte_identical_json_reports() {
    let a = simulate_raw("capacity-spread-rollout.yaml", "json");
    let b = simulate_raw("capacity-spread-rollout.yaml", "json");
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn json_report_carries_every_contract_field() {
    let r = simulate("daemonset-overhead.yaml");
    for k in ["scenario", "endSeconds", "summary", "nodes", "pods", "disruptions", "timeline"] {
        assert!(r.get(k).is_some(), "missing {k}");
    }
    let timeline = r["timeline"].as_array().unwrap();
    assert_eq!(timeline[0]["atSeconds"], 0);
    assert_eq!(timeline.last().unwrap()["atSeconds"], r["endSeconds"]);
    for s in timeline {
        for k in ["atSeconds", "nodes", "podsRunning", "podsPending", "costPerHour"] {
            assert!(s.get(k).is_some(), "missing timeline[].{k}");
        }
    }
    for d in r["disruptions"].as_array().unwrap() {
        for k in [
            "atSeconds",
            "terminatedSeconds",
            "nodeClaim",
            "node",
            "nodePool",
            "instanceType",
            "reason",
            "replacements",
            "detail",
        ] {
            assert!(d.get(k).is_some(), "missing disruptions[].{k}");
        }
    }
    for k in [
        "pods",
        "podsRunning",
        "podsPending",
        "nodes",
        "nodeClaimsLaunched",
        "nodeClaimsTerminated",
        "costPerHour",
        "cost",
    ] {
        assert!(r["summary"].get(k).is_some(), "missing summary.{k}");
    }
    for n in r["nodes"].as_array().unwrap() {
        for k in [
            "name",
            "nodePool",
            "nodeClaim",
            "instanceType",
            "capacityType",
            "zone",
            "pricePerHour",
            "ready",
            "pods",
            "labels",
            "annotations",
            "taints",
            "allocatable",
            "requested",
            "disruptionBlocked",
        ] {
            assert!(n.get(k).is_some(), "missing nodes[].{k}");
        }
    }
    let unmanaged = node(&r, "ip-10-20-10-230.ap-northeast-2.compute.internal");
    assert!(unmanaged["nodePool"].is_null());
    assert_eq!(unmanaged["labels"]["kubernetes.io/hostname"], "ip-10-20-10-230.ap-northeast-2.compute.internal");
    assert_eq!(unmanaged["allocatable"]["cpu"], "1930m");
    for p in r["pods"].as_array().unwrap() {
        for k in ["namespace", "name", "owner", "node", "phase", "reason"] {
            assert!(p.get(k).is_some(), "missing pods[].{k}");
        }
    }
    assert_eq!(r["endSeconds"], 420);
}

#[test]
fn html_report_is_one_self_contained_page_with_charts() {
    let dir = std::env::temp_dir().join(format!("kerf-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("inflate.html");
    let status = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", example("inflate.yaml").to_str().unwrap(), "--report", "html", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 3, "nodes, pending pods and cost charts");
    assert!(!html.contains("<script src") && !html.contains("<link"), "no external assets");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn text_report_summarises_nodes_pods_and_cost() {
    let out = simulate_raw("pod-eni.yaml", "text");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Pods: 2 (1 running, 1 pending)"), "{text}");
    assert!(text.contains("test-nodepool/nginx-a1938a0d"), "{text}");
    assert!(text.contains("vpc.amazonaws.com/pod-eni"), "{text}");
    assert!(text.contains("Cost: $"), "{text}");
}

#[test]
fn spot_interruption_drains_the_node_at_once_and_its_pods_run_on_a_replacement() {
    let r = simulate("spot-interruption.yaml");
    assert_eq!(summary(&r, "nodeClaimsTerminated"), 1);
    assert_eq!(summary(&r, "podsRunning"), 10);
    assert_eq!(summary(&r, "podsPending"), 0);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "the interrupted node is gone");
    assert_ne!(nodes[0]["name"], "ip-10-0-0-2.us-west-2.compute.internal");
    for p in pods(&r, "inflate-") {
        assert_eq!(p["node"], nodes[0]["name"]);
    }
    let disruptions = r["disruptions"].as_array().unwrap();
    assert_eq!(disruptions.len(), 1, "{disruptions:?}");
    let d = &disruptions[0];
    assert_eq!(d["reason"], "Interrupted");
    assert_eq!(d["node"], "ip-10-0-0-2.us-west-2.compute.internal");
    assert_eq!(d["nodePool"], "spot");
    // Warned at 2m; drained and gone well before EC2's two minutes are up; replaced at once.
    assert_eq!(d["atSeconds"], 120);
    assert!(d["terminatedSeconds"].as_f64().unwrap() < 240.0, "{d}");
    assert_eq!(d["replacements"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(nodes[0]["nodeClaim"], d["replacements"][0]);
    // The interrupted offering (its type, in the pool's one zone, spot) is marked unavailable:
    // the replacement is another type.
    assert_ne!(nodes[0]["instanceType"], d["instanceType"]);
}

#[test]
fn node_repair_example_replaces_the_failed_node_after_thirty_minutes_and_its_pods_run_again() {
    let r = simulate("node-repair.yaml");
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Unhealthy");
    assert_eq!(d["node"], "ip-10-0-32-2.us-west-2.compute.internal");
    // Failed at 5m, Ready Unknown tolerated for 30 minutes; gone once its replacement is up.
    assert_eq!(d["atSeconds"], 2100);
    assert_eq!(d["terminatedSeconds"], 2130);
    assert_eq!(d["replacements"].as_array().unwrap().len(), 1, "{d}");
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["nodeClaim"], d["replacements"][0]);
    for p in pods(&r, "inflate-") {
        assert_eq!(p["node"], nodes[0]["name"]);
    }
    all_pods_running(&r);
}

#[test]
fn pod_deletion_cost_example_scales_down_the_node_kerf_ranked_first_and_emptiness_removes_it() {
    let r = simulate("pod-deletion-cost.yaml");
    // Three nodes of four pods; the scale-down from twelve to eight empties the first node,
    // which kerf ranked first, instead of the third, which holds the newest pods.
    assert_eq!(summary(&r, "nodeClaimsLaunched"), 3);
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Empty");
    assert_eq!(d["node"], "ip-10-0-0-2.us-west-2.compute.internal");
    assert_eq!(pods(&r, "web-").len(), 8);
    all_pods_running(&r);

    // Without the gate the ReplicaSet deletes its newest pods: the third node empties.
    let off = std::fs::read_to_string(example("pod-deletion-cost.yaml"))
        .unwrap()
        .replace("podDeletionCostManagement: true", "podDeletionCostManagement: false");
    let dir = std::env::temp_dir().join(format!("kerf-pdc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pod-deletion-cost-off.yaml");
    std::fs::write(&path, off).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", path.to_str().unwrap(), "--report", "json"])
        .output()
        .expect("run kerf");
    std::fs::remove_dir_all(&dir).ok();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Empty");
    assert_eq!(d["node"], "ip-10-0-0-4.us-west-2.compute.internal");
    all_pods_running(&r);
}

#[test]
fn node_reboot_example_fixes_the_gpu_by_a_reboot_then_replaces_the_node_when_it_fails_again() {
    let r = simulate("node-reboot.yaml");
    let node = "ip-10-0-32-2.us-west-2.compute.internal";
    let reboots = r["reboots"].as_array().unwrap();
    assert_eq!(reboots.len(), 1, "{reboots:#?}");
    // Failed at 5m, tolerated for 10 minutes: rebooted at 15m, back at 15m30s, nothing launched.
    assert_eq!(reboots[0]["node"], node);
    assert_eq!(reboots[0]["condition"], "AcceleratedHardwareReady");
    assert_eq!(reboots[0]["atSeconds"], 900);
    // Failed again at 30m: not rebooted twice, replaced at 40m.
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Unhealthy");
    assert_eq!(d["node"], node);
    assert_eq!(d["atSeconds"], 2400);
    assert_eq!(d["nodeClaim"], reboots[0]["nodeClaim"]);
    assert!(d["detail"].as_str().unwrap().contains("after its reboot"), "{d}");
    let launches: Vec<f64> = r["timeline"]
        .as_array()
        .unwrap()
        .windows(2)
        .filter(|w| w[1]["costPerHour"].as_f64() > w[0]["costPerHour"].as_f64())
        .map(|w| w[1]["atSeconds"].as_f64().unwrap())
        .collect();
    assert_eq!(launches, [1.0, 2400.0], "launched at the start and for the replacement only: {:#}", r["timeline"]);
    assert_eq!(summary(&r, "nodeClaimsLaunched"), 2);
    all_pods_running(&r);
}

#[test]
fn balanced_disrupts_at_most_a_third_of_what_when_empty_or_underutilized_does_after_a_mix_change() {
    let balanced = simulate("consolidation-balanced.yaml");
    let baseline = simulate("consolidation-mix-change.yaml");
    let (b, w) = (balanced["disruptions"].as_array().unwrap(), baseline["disruptions"].as_array().unwrap());
    assert!(b.len() * 3 <= w.len(), "Balanced {} disruptions, WhenEmptyOrUnderutilized {}", b.len(), w.len());

    // Every move Balanced takes scores at least one half, and says so.
    for x in b.iter().filter(|x| x["reason"] == "Underutilized") {
        let score = x["score"].as_f64().unwrap_or_else(|| panic!("no score: {x}"));
        assert!(score >= 0.5, "{x}");
        assert!(x["detail"].as_str().unwrap().contains("Balanced score"), "{x}");
    }
    // It still removes every empty node: the batch pool's nodes go under both policies.
    let empties = |d: &[Value]| d.iter().filter(|x| x["reason"] == "Empty").count();
    assert!(empties(b) > 0, "the batch scale-to-zero leaves empty nodes");
    assert_eq!(empties(b), empties(w), "both policies remove the same empty nodes");
    for r in [&balanced, &baseline] {
        let nodes = r["nodes"].as_array().unwrap();
        assert!(!nodes.iter().any(|n| n["nodePool"] == "batch"), "no batch node left");
        assert!(!nodes.iter().any(|n| n["pods"] == 0), "no empty node left");
        all_pods_running(r);
    }
    // The moves it refuses are scored on the nodes they would have removed.
    let refused: Vec<&Value> = balanced["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["disruptionBlocked"].as_str().is_some_and(|r| r.starts_with("Balanced score")))
        .collect();
    assert!(refused.len() >= 30, "{} nodes kept for their score", refused.len());
    // The baseline's what-if says the same from the other side: most of its consolidations
    // would not have passed.
    let what_if = baseline["balancedWhatIf"].as_array().unwrap();
    let (commands, refuse) = what_if.iter().fold((0, 0), |(c, r), p| {
        (c + p["consolidations"].as_u64().unwrap(), r + p["balancedWouldRefuse"].as_u64().unwrap())
    });
    assert!(refuse * 3 >= commands * 2, "Balanced would refuse {refuse} of {commands} consolidations");
    // Balanced saves less: what it forgoes is the refused moves' savings.
    let cost = |r: &Value| r["summary"]["costPerHour"].as_f64().unwrap();
    assert!(cost(&balanced) > cost(&baseline), "{} vs {}", cost(&balanced), cost(&baseline));
}

#[test]
fn scale_example_has_fifty_deployments_and_thirty_thousand_replicas() {
    // Running it takes seconds in a release build; here its shape is checked (its run time is
    // in docs/performance.md).
    let s = kerf_sim::scenario::load(&example("scale.yaml")).unwrap();
    let mut deployments = 0;
    let mut replicas = 0;
    let mut constrained = 0;
    for step in &s.steps {
        if let kerf_sim::scenario::Step::Apply(ms) = step {
            for m in ms {
                if let kerf_sim::scenario::ManifestObject::Deployment(d) = &m.object {
                    deployments += 1;
                    let spec = d.spec.as_ref().unwrap();
                    replicas += spec.replicas.unwrap();
                    let pod = spec.template.spec.as_ref().unwrap();
                    if pod.affinity.is_some()
                        || pod.topology_spread_constraints.is_some()
                        || pod.node_selector.is_some()
                    {
                        constrained += 1;
                    }
                }
            }
        }
    }
    assert_eq!(deployments, 50);
    assert_eq!(replicas, 30_000);
    assert_eq!(constrained, 24, "mixed constraints: 24 of 50 Deployments constrain placement");
}

#[test]
fn scale_preferred_example_prefers_one_pod_per_node_in_every_deployment() {
    // Its wall time is a release-build figure (docs/performance.md); here its shape is checked.
    preferred_shape("scale-preferred.yaml", 30_000);
}

#[test]
fn scale_preferred_100k_example_is_the_same_workload_at_about_100000_pods() {
    preferred_shape("scale-preferred-100k.yaml", 100_006);
}

/// The scale-preferred workload's shape: 50 Deployments of `total` replicas, each preferring
/// one pod per node (preferred anti-affinity on hostname against its own pods), five spreading
/// over zones with ScheduleAnyway.
fn preferred_shape(file: &str, total: i32) {
    let s = kerf_sim::scenario::load(&example(file)).unwrap();
    let (mut deployments, mut replicas, mut preferring, mut soft_spread) = (0, 0, 0, 0);
    for step in &s.steps {
        let kerf_sim::scenario::Step::Apply(ms) = step else { continue };
        for m in ms {
            let kerf_sim::scenario::ManifestObject::Deployment(d) = &m.object else { continue };
            deployments += 1;
            let spec = d.spec.as_ref().unwrap();
            replicas += spec.replicas.unwrap();
            let pod = spec.template.spec.as_ref().unwrap();
            let own = d.metadata.name.clone().unwrap();
            let terms = pod
                .affinity
                .as_ref()
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.clone())
                .unwrap_or_default();
            if terms.iter().any(|t| {
                t.pod_affinity_term.topology_key == "kubernetes.io/hostname"
                    && t.pod_affinity_term
                        .label_selector
                        .as_ref()
                        .and_then(|l| l.match_labels.as_ref())
                        .is_some_and(|l| l.get("app") == Some(&own))
            }) {
                preferring += 1;
            }
            let spreads = pod.topology_spread_constraints.iter().flatten();
            soft_spread += spreads.filter(|c| c.when_unsatisfiable == "ScheduleAnyway").count();
        }
    }
    assert_eq!(deployments, 50);
    assert_eq!(replicas, total);
    assert_eq!(preferring, 50, "every Deployment prefers not to share a node with its own pods");
    assert_eq!(soft_spread, 5);
}

#[test]
fn simulation_logs_are_json_lines_stamped_with_virtual_time() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kerf"))
        .env("KERF_LOG", "info")
        .args(["simulate", "--report", "json"])
        .arg(example("inflate.yaml"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let logs: Vec<serde_json::Value> =
        String::from_utf8(out.stderr).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // inflate scales to 60 at t=10s; the batch closes after 1s idle; the node is ready 30s later.
    let at = |msg: &str| {
        logs.iter().find(|l| l["fields"]["message"] == msg).map(|l| l["timestamp"].as_str().unwrap().to_string())
    };
    assert_eq!(at("found provisionable pod(s)").as_deref(), Some("2025-01-01T00:00:11Z"));
    assert_eq!(at("registered nodeclaim").as_deref(), Some("2025-01-01T00:00:41Z"));
}

fn the_disruption(r: &Value) -> &Value {
    let d = r["disruptions"].as_array().unwrap();
    assert_eq!(d.len(), 1, "{d:#?}");
    &d[0]
}

fn all_pods_running(r: &Value) {
    assert_eq!(summary(r, "podsPending"), 0, "{:#}", r["pods"]);
    assert!(r["pods"].as_array().unwrap().iter().all(|p| p["phase"] == "Running"));
}

#[test]
fn consolidation_empty_example_removes_the_empty_node_a_minute_after_scale_to_zero() {
    let r = simulate("consolidation-empty.yaml");
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Empty");
    assert_eq!(d["instanceType"], "c6a.16xlarge");
    // Scaled to zero at 3m; consolidateAfter 1m; validation 15 s.
    assert_eq!(d["atSeconds"], 255);
    assert_eq!(d["terminatedSeconds"], 255);
    assert_eq!(summary(&r, "nodes"), 0);
    assert_eq!(summary(&r, "nodeClaimsTerminated"), 1);
    assert_eq!(r["summary"]["costPerHour"], 0.0);
}

#[test]
fn consolidation_underutilized_example_replaces_the_node_by_a_cheaper_one() {
    let r = simulate("consolidation-underutilized.yaml");
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Underutilized");
    assert_eq!(d["instanceType"], "c6a.12xlarge");
    assert!(d["detail"].as_str().unwrap().contains("fit on 1 cheaper node (c6a.2xlarge"), "{d}");
    assert_eq!(d["atSeconds"], 135);
    assert_eq!(d["terminatedSeconds"], 165);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["instanceType"], "c6a.2xlarge");
    assert_eq!(nodes[0]["nodeClaim"], d["replacements"][0]);
    // The replacement is the cheapest type its pods fit: nothing to gain by replacing it again.
    let blocked = nodes[0]["disruptionBlocked"].as_str().unwrap();
    assert!(blocked.starts_with("no cheaper replacement"), "{blocked}");
    assert_eq!(r["summary"]["costPerHour"], 0.306);
    // One node's pods onto a node a fifth of its price: Balanced would have taken it too.
    let what_if = r["balancedWhatIf"].as_array().expect("balancedWhatIf[]");
    assert_eq!(what_if.len(), 1, "{what_if:#?}");
    assert_eq!(what_if[0]["policy"], "WhenEmptyOrUnderutilized");
    assert_eq!(what_if[0]["consolidations"], 1);
    assert_eq!(what_if[0]["balancedWouldRefuse"], 0);
    all_pods_running(&r);
}

#[test]
fn drift_example_replaces_the_node_with_one_carrying_the_new_label() {
    let r = simulate("drift.yaml");
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Drifted");
    assert_eq!(d["atSeconds"], 120);
    assert_eq!(d["terminatedSeconds"], 150);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["labels"]["team"], "blue");
    assert_eq!(summary(&r, "pods"), 10);
    all_pods_running(&r);
}

#[test]
fn expiration_example_replaces_the_node_despite_do_not_disrupt_and_a_zero_budget() {
    let r = simulate("expiration.yaml");
    let d = the_disruption(&r);
    assert_eq!(d["reason"], "Expired");
    assert_eq!(d["atSeconds"], 301);
    assert_eq!(d["terminatedSeconds"], 331);
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["nodeClaim"], d["replacements"][0]);
    assert!(nodes[0]["disruptionBlocked"].as_str().unwrap().contains("do-not-disrupt"));
    assert_eq!(summary(&r, "pods"), 8);
    all_pods_running(&r);
}

#[test]
fn scale_down_example_keeps_the_scale_manifests_and_a_third_of_the_replicas() {
    // Running it takes a release build (its run time is in docs/performance.md); here its shape
    // is checked.
    let replicas = |name: &str| -> i32 {
        let s = kerf_sim::scenario::load(&example(name)).unwrap();
        let mut last = BTreeMap::new();
        for step in &s.steps {
            if let kerf_sim::scenario::Step::Apply(ms) = step {
                for m in ms {
                    if let kerf_sim::scenario::ManifestObject::Deployment(d) = &m.object {
                        last.insert(d.metadata.name.clone().unwrap(), d.spec.as_ref().unwrap().replicas.unwrap());
                    }
                }
            }
        }
        last.values().sum()
    };
    assert_eq!(replicas("scale-down.yaml"), 9981);
    assert_eq!(replicas("scale-remaining.yaml"), 9981);
}

#[test]
fn disrupting_logs_a_json_line_with_reason_decision_savings_and_the_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", example("consolidation-underutilized.yaml").to_str().unwrap(), "--report", "json"])
        .env("KERF_LOG", "info")
        .output()
        .expect("run kerf");
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v["fields"]["message"] == "disrupting node(s)")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let f = &lines[0]["fields"];
    assert_eq!(lines[0]["timestamp"], "2025-01-01T00:02:15Z");
    assert_eq!(f["reason"], "Underutilized");
    assert_eq!(f["decision"], "Replace");
    assert_eq!(f["savings"], "$1.5300/h");
    assert!(f["command"].as_str().unwrap().starts_with("Underutilized/Replace, terminating 1 node(s) (6 pods)"), "{f}");
}

#[test]
fn mixed_workload_lands_on_a_fleet_cheaper_than_filling_claims_to_the_largest_types() {
    let r = simulate("mixed-workload.yaml");
    all_pods_running(&r);
    assert_eq!(summary(&r, "pods"), 400);
    // First-fit decreasing up to the largest types bought m5a.12xlarge + 2 m6a.metal +
    // r6a.48xlarge for $7.7419/h; sized by price the same pods cost less: spot m5a.12xlarge
    // nodes and one spot c6a.48xlarge (the cheapest per CPU in us-west-2), $6.5196/h.
    let cost = r["summary"]["costPerHour"].as_f64().unwrap();
    assert!(cost < 7.0, "fleet costs ${cost}/h");
    let nodes = r["nodes"].as_array().unwrap();
    assert!(nodes.iter().all(|n| !n["instanceType"].as_str().unwrap().ends_with("metal")), "{nodes:#?}");
    assert!(nodes.iter().all(|n| !n["instanceType"].as_str().unwrap().starts_with("r6a")), "{nodes:#?}");
}

#[test]
fn consolidation_of_an_unchanged_mixed_workload_settles_and_is_never_undone() {
    let r = simulate("converge-mixed.yaml");
    all_pods_running(&r);
    let disruptions = r["disruptions"].as_array().unwrap();
    assert!(!disruptions.is_empty(), "provisioning over-bought, consolidation has work to do");
    // No launch undid a consolidation: every NodeClaim is either from the first provisioning
    // pass or a replacement a consolidation launched.
    let replacements: BTreeSet<&str> =
        disruptions.iter().flat_map(|d| d["replacements"].as_array().unwrap()).filter_map(|c| c.as_str()).collect();
    let timeline = r["timeline"].as_array().unwrap();
    let first_fleet = timeline.iter().find(|t| t["podsPending"] == 0).expect("every pod placed")["nodes"].as_u64();
    assert_eq!(
        Some(summary(&r, "nodeClaimsLaunched") - replacements.len() as u64),
        first_fleet,
        "a NodeClaim was launched for pods a consolidation moved"
    );
    // It settles within the first 5 of the 60 minutes (independent consolidations run side by
    // side): no NodeClaim is created or removed after that, and the fleet stays as it is.
    let last = disruptions
        .iter()
        .flat_map(|d| [d["atSeconds"].as_f64().unwrap(), d["terminatedSeconds"].as_f64().unwrap_or(f64::INFINITY)])
        .fold(0.0, f64::max);
    assert!(last <= 300.0, "a NodeClaim created or removed at {last}s with the workload unchanged");
    let end = timeline.last().unwrap();
    for t in timeline.iter().filter(|t| t["atSeconds"].as_u64().unwrap() > 5 * 60) {
        assert_eq!((&t["nodes"], &t["costPerHour"]), (&end["nodes"], &end["costPerHour"]), "{t}");
    }
}

fn buffer<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["buffers"].as_array().expect("buffers[]").iter().find(|b| b["name"] == name).expect("buffer in report")
}

/// The first time in the timeline at which `pred` holds of a sample, at or after `from`.
fn first_sample_at(r: &Value, from: f64, pred: impl Fn(&Value) -> bool) -> Option<f64> {
    r["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["atSeconds"].as_f64().unwrap() >= from)
        .find(|s| pred(s))
        .map(|s| s["atSeconds"].as_f64().unwrap())
}

#[test]
fn a_buffer_of_twenty_pods_room_runs_a_burst_of_twenty_at_once_and_is_back_within_launch_latency_plus_30s() {
    let r = simulate("capacity-buffer-burst.yaml");
    // The burst arrives at 180 s (after `wait: 3m`); the room was ready before it.
    let running = first_sample_at(&r, 180.0, |s| s["podsRunning"] == 20).expect("the burst runs");
    assert!(running - 180.0 <= 5.0, "the 20 pods ran {}s after their creation", running - 180.0);
    // The nodes that held the room before the burst are the ones it runs on: no launch for it.
    let before = first_sample_at(&r, 170.0, |_| true).unwrap();
    let nodes_before = r["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|s| s["atSeconds"].as_f64().unwrap() <= before)
        .unwrap()["nodes"]
        .clone();
    let at_burst = r["timeline"].as_array().unwrap().iter().find(|s| s["atSeconds"] == running).unwrap();
    assert_eq!(at_burst["nodes"], nodes_before, "no node launched before the burst ran");
    let b = buffer(&r, "burst");
    assert_eq!((b["namespace"].as_str(), b["replicas"].as_i64()), (Some("default"), Some(20)));
    assert_eq!(b["placed"], 20, "all the room is back on registered nodes: {b}");
    assert_eq!(b["provisioning"], "True");
    let back = b["provisioningSinceSeconds"].as_f64().unwrap();
    assert!(back > 180.0 && back <= 180.0 + 30.0 + 30.0, "room back at {back}s (launch latency 30s)");
    assert!(b["costPerHour"].as_f64().unwrap() > 0.0);
    assert!(b["costPerHour"].as_f64().unwrap() < r["summary"]["costPerHour"].as_f64().unwrap());
    assert_eq!(summary(&r, "podsPending"), 0);
    // For three minutes the first node held nothing but room: it is not empty, nothing removed it.
    assert!(r["disruptions"].as_array().unwrap().is_empty(), "{}", r["disruptions"]);
    for p in pods(&r, "burst-") {
        assert_eq!(p["phase"], "Running");
    }
    // No Pod object was ever made for the room: every pod in the report is the Deployment's.
    assert!(r["pods"].as_array().unwrap().iter().all(|p| p["owner"] == "Deployment/burst"));
    let text = String::from_utf8(simulate_raw("capacity-buffer-burst.yaml", "text").stdout).unwrap();
    assert!(text.contains("Capacity buffers (room kept for pods that do not exist yet):"), "{text}");
    assert!(text.contains("default/burst"), "{text}");
    assert!(text.contains("Headroom: $"), "{text}");
    let html = String::from_utf8(simulate_raw("capacity-buffer-burst.yaml", "html").stdout).unwrap();
    assert!(html.contains("<table id=\"buffers\">") && html.contains("id=\"headroom\""));
}

#[test]
fn a_buffer_floor_keeps_three_nodes_while_the_pool_grows_with_demand_and_shrinks_back_to_three() {
    let r = simulate("capacity-buffer-floor.yaml");
    let timeline = r["timeline"].as_array().unwrap();
    let nodes_at = |s: &Value| s["nodes"].as_u64().unwrap();
    // Three nodes once the first launch is Ready, and never fewer after.
    let ready = first_sample_at(&r, 0.0, |s| nodes_at(s) == 3).expect("three floor nodes");
    assert!(ready <= 60.0, "floor ready at {ready}s");
    for s in timeline.iter().filter(|s| s["atSeconds"].as_f64().unwrap() >= ready) {
        assert!(nodes_at(s) >= 3, "below the floor: {s}");
    }
    // The pool still grows with its workload (20 one-CPU pods from 120 s) ...
    assert!(timeline.iter().any(|s| nodes_at(s) > 3), "the pool never grew above the floor");
    assert!(first_sample_at(&r, 120.0, |s| s["podsRunning"] == 20).is_some(), "the workload ran");
    // ... and shrinks back to exactly the floor once it is gone.
    assert_eq!(summary(&r, "nodes"), 3);
    assert_eq!(summary(&r, "pods"), 0);
    let nodes = r["nodes"].as_array().unwrap();
    assert!(nodes.iter().all(|n| n["nodePool"] == "default" && n["pods"] == 0));
    let b = buffer(&r, "default-floor");
    assert_eq!((b["replicas"].as_i64(), b["placed"].as_u64()), (Some(3), Some(3)));
    assert_eq!(b["provisioning"], "True");
    // The floor nodes hold nothing but the room, and kerf says why it keeps each of them.
    for n in nodes {
        let why = n["disruptionBlocked"].as_str().unwrap_or_default();
        assert!(why.contains("pod(s)"), "{}: {why}", n["name"]);
    }
}

#[test]
fn a_static_nodepool_keeps_exactly_its_replicas_without_any_pod() {
    let r = simulate("static-nodepool-fixed-count.yaml");
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6);
    for n in nodes {
        assert_eq!(n["nodePool"], "fixed");
        assert_eq!(n["instanceType"], "m5.large");
        assert_eq!(n["pods"], 0);
    }
    assert_eq!(summary(&r, "nodeClaimsTerminated"), 0);
    assert!(r["disruptions"].as_array().unwrap().is_empty());
}

#[test]
fn business_hours_headroom_is_launched_before_the_peak_runs_it_at_once_and_is_released_after_the_window() {
    let r = simulate("capacity-buffer-business-hours.yaml");
    let timeline = r["timeline"].as_array().unwrap();
    let at = |s: &Value| s["atSeconds"].as_f64().unwrap();
    // Starts 07:30: no node until the window opens at 07:45 (900 s).
    for s in timeline.iter().filter(|s| at(s) < 900.0) {
        assert_eq!(s["nodes"], 0, "room before the window opened: {s}");
    }
    let warm = first_sample_at(&r, 900.0, |s| s["nodes"].as_u64().unwrap() > 0).expect("room launched");
    assert!(warm <= 900.0 + 60.0, "room ready {}s after the window opened", warm - 900.0);
    // The peak arrives at 08:00 (1,800 s) and runs on the room at once.
    let running = first_sample_at(&r, 1800.0, |s| s["podsRunning"] == 10).expect("the peak runs");
    assert!(running - 1800.0 <= 5.0, "the peak ran {}s after its creation", running - 1800.0);
    // After 09:45 (8,100 s) the room is released: the buffer keeps none, the peak still runs,
    // and the fleet is smaller than it was in the window.
    let b = buffer(&r, "business-hours");
    assert_eq!((b["replicas"].as_i64(), b["placed"].as_u64()), (Some(10), Some(0)), "{b}");
    assert_eq!(b["provisioning"], "False");
    assert!(b["message"].as_str().unwrap_or_default().contains("outside its active window"), "{b}");
    assert_eq!(summary(&r, "podsRunning"), 10);
    let most = timeline.iter().map(|s| s["nodes"].as_u64().unwrap()).max().unwrap();
    assert!(summary(&r, "nodes") < most, "the room's nodes stayed after the window");
    let removed = r["disruptions"].as_array().unwrap();
    assert!(!removed.is_empty() && removed.iter().all(|d| d["atSeconds"].as_f64().unwrap() >= 8100.0), "{removed:?}");
}

#[test]
fn windows_pool_runs_windows_pods_on_windows_nodes_and_linux_pods_elsewhere() {
    let r = simulate("windows-pool.yaml");
    assert_eq!(summary(&r, "podsPending"), 0, "{}", r["pods"]);
    assert_eq!(summary(&r, "podsRunning"), 10);
    let nodes = r["nodes"].as_array().unwrap();
    let os_of = |name: &Value| {
        let n = nodes.iter().find(|n| n["name"] == *name).expect("pod's node in report");
        (n["nodePool"].as_str().unwrap().to_string(), n["labels"]["kubernetes.io/os"].as_str().unwrap().to_string())
    };
    for p in pods(&r, "build-agent-") {
        assert_eq!(os_of(&p["node"]), ("windows-agents".to_string(), "windows".to_string()));
    }
    for p in pods(&r, "api-") {
        assert_eq!(os_of(&p["node"]), ("linux".to_string(), "linux".to_string()));
    }
    for n in nodes.iter().filter(|n| n["nodePool"] == "windows-agents") {
        assert_eq!(n["labels"]["node.kubernetes.io/windows-build"], "10.0.20348");
        assert_eq!(n["labels"]["kubernetes.io/arch"], "amd64");
        assert!(["t3.large", "t3.xlarge", "t3a.large", "t3a.xlarge"].contains(&n["instanceType"].as_str().unwrap()));
        assert_eq!(n["allocatable"]["pods"], "110");
        assert_eq!(n["priceEstimated"], true, "Windows prices are derived from Linux ones");
    }
    for n in nodes.iter().filter(|n| n["nodePool"] == "linux") {
        assert!(n["labels"].get("node.kubernetes.io/windows-build").is_none());
    }
}

#[test]
fn volume_attach_limits_spread_pods_by_ebs_volumes_and_name_the_limit_when_none_fits() {
    let r = simulate("volume-attach-limits.yaml");
    let nodes = r["nodes"].as_array().unwrap();
    // Five shards of 10 EBS volumes are left: two per t3.large (26 attachable), so three nodes,
    // although their CPU would fit one.
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    for n in nodes {
        assert_eq!(n["allocatable"]["attachable-volumes-aws-ebs"], "26");
        let used: u64 = n["requested"]["attachable-volumes-aws-ebs"].as_str().map_or(0, |v| v.parse().unwrap());
        assert!(used <= 26, "{} attaches {used} volumes", n["name"]);
    }
    for shard in ["shard-0", "shard-2", "shard-4", "shard-6", "shard-7", "shared-"] {
        let p = pods(&r, shard);
        assert_eq!(p.len(), 1, "{shard}");
        assert_eq!(p[0]["phase"], "Running", "{shard}: {}", p[0]["reason"]);
    }
    let archive = pods(&r, "archive-");
    assert_eq!(archive[0]["phase"], "Pending");
    let reason = archive[0]["reason"].as_str().unwrap();
    assert!(reason.contains("needs 30 volumes, t3.large attaches 26"), "{reason}");
    assert!(reason.contains("node(s) exceed max volume count"), "{reason}");
    // Consolidation removed the node the deleted shards left, and packed no third shard anywhere.
    assert_eq!(summary(&r, "nodeClaimsLaunched"), 4);
    assert_eq!(summary(&r, "nodeClaimsTerminated"), 1);
}
