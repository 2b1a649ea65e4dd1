//! CapacityQuotas through the simulator, on examples/capacity-quota.yaml (two NodePools capped
//! at 64 vCPU together): `status.used` written from the cluster, controllers restarted before
//! and while the claims launch that launch nothing past the quota, a quota raised mid-run, and a
//! snapshot writing quotas back.

use std::path::{Path, PathBuf};

use kerf_api::{CapacityQuota, Quantity};
use kerf_cloud::ManualClock;
use kerf_cloud::sim::SimProvider;
use kerf_sim::Report;
use kerf_sim::chaos::{Faults, FaultyCloud};
use kerf_sim::driver::Simulation;
use kerf_sim::scenario::{Scenario, parse};

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn scenario(file: &str) -> Scenario {
    let path = example_dir().join(file);
    let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse(&path, &yaml).unwrap_or_else(|e| panic!("{e}"))
}

type Sim = Simulation<FaultyCloud<SimProvider>>;

/// Runs `scenario`'s steps, restarting the controllers before step `restart_at` if given (on a
/// cloud that outlives the controllers' process; no fault is injected at rate 0).
fn run(scenario: &Scenario, restart_at: Option<usize>) -> (Report, Sim) {
    let clock = ManualClock::new();
    let provider = SimProvider::new(scenario.cloud.clone(), std::sync::Arc::new(clock.clone()))
        .unwrap_or_else(|e| panic!("{}", e.problem));
    let region = provider.region().to_string();
    let faults = std::sync::Arc::new(Faults::new(1, 0.0));
    let cloud = FaultyCloud::new(std::sync::Arc::new(provider), faults);
    let mut sim = Simulation::for_scenario(scenario, cloud, clock, &region);
    sim.settle(sim.now()).unwrap_or_else(|e| panic!("{e}"));
    for (i, step) in scenario.steps.iter().enumerate() {
        if restart_at == Some(i) {
            sim.restart_controllers(7);
        }
        sim.step(i, step).unwrap_or_else(|e| panic!("{e}"));
    }
    (sim.report(), sim)
}

fn cpu_used(sim: &Sim, quota: &str) -> Option<Quantity> {
    let q = sim.cluster().get_obj::<CapacityQuota>(None, quota)?;
    Some(q.status?.used?.resources.get("cpu"))
}

#[test]
fn status_used_is_written_and_a_restarted_controller_keeps_to_the_quota() {
    let s = scenario("capacity-quota.yaml");
    // A new process right before the run's last step (the wait while the nodes launch).
    let last = s.steps.len() - 1;
    let (report, sim) = run(&s, Some(last));
    assert_eq!(report.nodes.len(), 16, "{:?}", report.nodes.iter().map(|n| &n.name).collect::<Vec<_>>());
    assert_eq!(report.summary.pods_pending, 8);
    assert_eq!(cpu_used(&sim, "batch-cpu"), Some(Quantity::from_units(64)));
    let q = &report.quotas[0];
    assert_eq!(
        (q.name.as_str(), q.used.get("cpu"), q.peak_used.get("cpu")),
        ("batch-cpu", Quantity::from_units(64), Quantity::from_units(64))
    );
}

#[test]
fn a_controller_restarted_while_claims_launch_counts_them_against_the_quota() {
    // Five seconds after the workers arrive, 16 NodeClaims are launching (30 s): a new process
    // sees them only in the cluster, and must count them before planning the 8 pods left.
    let yaml = r#"
name: quota-restart
cloud: {region: us-west-2, launchLatency: 30s}
steps:
  - apply: manifests/quota/team-pools.yaml
  - apply: manifests/quota/batch-quota.yaml
  - apply: manifests/quota/team-workers.yaml
  - wait: 5s
  - wait: 3m
"#;
    let s = parse(&example_dir().join("quota-restart.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    let (report, sim) = run(&s, Some(4));
    assert_eq!(report.summary.node_claims_launched, 16);
    assert_eq!(report.nodes.len(), 16);
    assert_eq!(cpu_used(&sim, "batch-cpu"), Some(Quantity::from_units(64)));
}

#[test]
fn a_quota_raised_mid_run_lets_the_pending_workers_launch() {
    let yaml = r#"
name: quota-raised
cloud: {region: us-west-2, launchLatency: 30s}
steps:
  - apply: manifests/quota/team-pools.yaml
  - apply: manifests/quota/batch-quota.yaml
  - apply: manifests/quota/team-workers.yaml
  - wait: 2m
  - patch: {kind: CapacityQuota, name: batch-cpu, merge: {spec: {limits: {resources: {cpu: "80"}}}}}
  - wait: 2m
"#;
    let s = parse(&example_dir().join("quota-raised.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    let (report, sim) = run(&s, None);
    assert_eq!(report.nodes.len(), 20);
    assert_eq!(report.summary.pods_pending, 0);
    assert_eq!(cpu_used(&sim, "batch-cpu"), Some(Quantity::from_units(80)));
    assert_eq!(report.quotas[0].peak_used.get("cpu"), Quantity::from_units(80));
}

#[test]
fn the_report_keeps_each_quotas_use_over_the_run_only_where_it_changes() {
    let yaml = r#"
name: quota-timeline
cloud: {region: us-west-2, launchLatency: 30s}
steps:
  - apply: manifests/quota/team-pools.yaml
  - apply: manifests/quota/batch-quota.yaml
  - apply: manifests/quota/team-workers.yaml
  - wait: 2m
  - patch: {kind: CapacityQuota, name: batch-cpu, merge: {spec: {limits: {resources: {cpu: "80"}}}}}
  - wait: 2m
"#;
    let s = parse(&example_dir().join("quota-timeline.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    let (report, _) = run(&s, None);
    let t = &report.quotas[0].timeline;
    let cpu: Vec<(f64, i64)> = t.iter().map(|s| (s.at_seconds.0, s.used.get("cpu").value_ceil())).collect();
    assert_eq!(cpu.first().map(|c| c.1), Some(0), "nothing held before the workers: {cpu:?}");
    assert_eq!(cpu.last().map(|c| c.1), Some(80), "the raised quota filled: {cpu:?}");
    assert!(cpu.iter().any(|&(at, used)| used == 64 && at < 120.0), "64 held before the quota was raised: {cpu:?}");
    assert!(cpu.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 != w[1].1), "only changes, in time order: {cpu:?}");
    assert!(cpu.iter().all(|&(at, _)| at <= report.end_seconds.0), "{cpu:?}");
    assert!(t.len() < report.timeline.len(), "fewer entries than the report's samples");
}

#[test]
fn a_spot_quota_counts_only_spot_offerings_and_the_rest_launch_on_demand() {
    // examples/capacity-quota-spot.yaml, then 20 minutes more for consolidation to act.
    let mut s = scenario("capacity-quota-spot.yaml");
    let again = s.steps.last().cloned().expect("a last step");
    s.steps.extend(std::iter::repeat_n(again, 7));
    let (report, sim) = run(&s, None);
    assert_eq!(report.summary.pods_pending, 0, "no worker left pending");
    let of = |ct: &str| report.nodes.iter().filter(|n| n.capacity_type.as_deref() == Some(ct)).count();
    assert_eq!((of("spot"), of("on-demand")), (4, 6), "16 vCPU of spot, the rest on-demand");
    assert_eq!(cpu_used(&sim, "spot-cpu"), Some(Quantity::from_units(16)), "on-demand nodes are not counted");
    assert_eq!(report.quotas[0].peak_used.get("cpu"), Quantity::from_units(16), "never over the limit");
    assert!(report.disruptions.is_empty(), "no consolidation onto spot past the quota");
}

#[test]
fn a_snapshot_writes_quotas_back_without_their_status() {
    use kerf_sim::scenario_writer::{ClusterObjects, write};
    let quota: CapacityQuota = serde_json::from_value(serde_json::json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityQuota",
        "metadata": {"name": "batch-cpu", "resourceVersion": "9"},
        "spec": {"selector": {"matchLabels": {"workload": "batch"}}, "limits": {"resources": {"cpu": "64"}}},
        "status": {"used": {"resources": {"cpu": "12"}}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let objects = ClusterObjects { capacity_quotas: vec![quota], ..ClusterObjects::default() };
    let (text, _) = write("quotas", kerf_cloud::Timestamp::UNIX_EPOCH, &objects).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("kind: CapacityQuota") && text.contains("name: batch-cpu"), "{text}");
    assert!(text.contains("workload: batch") && !text.contains("status"), "{text}");
    parse(Path::new("snapshot.yaml"), &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
}
