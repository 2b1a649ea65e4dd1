//! `kerf bench snapshot --nodes N --pods P [--fill F] [--for DURATION] [--runs R] [--json]`: a
//! cluster of N nodes (each an m5.4xlarge a NodePool launched, with its NodeClaim) running P
//! pods of 30 Deployments, bound and filling each node to F of its CPU, is served by a
//! `kerf serve` process (this binary, `--controllers none`, so nothing moves while it is read);
//! then `kerf snapshot` reads it over HTTP (paged lists, as against a real cluster) and the
//! what-if runs kerf's controllers on the snapshot for DURATION. Prints the median time of each
//! over R runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::bench_process::{self, Proc, http};

#[derive(clap::Args)]
pub struct SnapshotArgs {
    /// Nodes in the served cluster.
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    /// Pods, spread evenly over the nodes.
    #[arg(long, default_value_t = 30_000)]
    pods: usize,
    /// Each node's CPU requested by its pods (0 < F <= 1): below 1, consolidation has work.
    #[arg(long, default_value_t = 0.5)]
    fill: f64,
    /// How long the what-if runs the controllers (virtual time).
    #[arg(long = "for", default_value = "30m")]
    for_: String,
    /// Snapshots and what-ifs to time (the medians are printed).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

const INSTANCE_TYPE: &str = "m5.4xlarge";
const ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];
pub(crate) const DEPLOYMENTS: usize = 30;

/// The served cluster as a scenario: nodes with NodeClaims, Deployments and their pods bound.
pub(crate) fn cluster_scenario(nodes: usize, pods: usize, fill: f64) -> anyhow::Result<String> {
    let cat = kerf_cloud::aws::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
    let types = cat
        .instance_types("us-west-2", None, &kerf_cloud::aws::NodeClassSettings::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let it = types.iter().find(|t| t.name == INSTANCE_TYPE).context("m5.4xlarge is in the catalog")?;
    let alloc = it.allocatable();
    let cpu_milli = alloc.get("cpu").milli_ceil();
    let per_node = pods.div_ceil(nodes.max(1)).max(1);
    let pod_cpu = ((cpu_milli as f64 * fill) / per_node as f64).floor().max(1.0) as i64;
    let pod_mem_mi =
        (alloc.get("memory").value_ceil() as f64 * fill / per_node as f64 / (1024.0 * 1024.0)).floor().max(1.0);
    let q = |l: &kerf_api::ResourceList| -> String {
        l.iter().map(|(k, v)| format!("{k}: \"{}\"", v.canonical())).collect::<Vec<_>>().join(", ")
    };
    // The type's labels (instance type, arch, os, region, karpenter.k8s.aws/*) and the
    // node's own below.
    let mut type_labels: Vec<String> = it.labels.iter().map(|(k, v)| format!("{k}: \"{v}\"")).collect();
    type_labels.sort();
    let mut s = String::with_capacity(pods * 600);
    s.push_str(
        "name: bench-snapshot\ncloud:\n  region: us-west-2\n  zones: [us-west-2a, us-west-2b, us-west-2c]\nnodes:\n",
    );
    let node_name =
        |i: usize| format!("ip-10-{}-{}-{}.us-west-2.compute.internal", 1 + i / 65_536, (i / 256) % 256, i % 256);
    for i in 0..nodes {
        let zone = ZONES[i % ZONES.len()];
        let name = node_name(i);
        let _ = write!(
            s,
            "  - name: {name}\n    providerID: aws:///{zone}/i-{n:017x}\n    labels: {{{labels}, karpenter.sh/nodepool: default, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: {zone}, karpenter.sh/registered: \"true\", karpenter.sh/initialized: \"true\"}}\n    capacity: {{{cap}}}\n    allocatable: {{{alloc}}}\n    nodeClaim:\n      apiVersion: karpenter.sh/v1\n      kind: NodeClaim\n      metadata: {{name: default-{i:05}, labels: {{karpenter.sh/nodepool: default}}}}\n      spec:\n        nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n        requirements:\n          - {{key: karpenter.sh/nodepool, operator: In, values: [default]}}\n          - {{key: node.kubernetes.io/instance-type, operator: In, values: [{INSTANCE_TYPE}]}}\n",
            n = i + 1,
            labels = type_labels.join(", "),
            cap = q(&it.capacity),
            alloc = q(&alloc),
        );
    }
    s.push_str(
        "steps:\n  - apply:\n      - apiVersion: karpenter.k8s.aws/v1\n        kind: EC2NodeClass\n        metadata: {name: default}\n        spec:\n          role: r\n          amiSelectorTerms: [{alias: al2023@latest}]\n          subnetSelectorTerms: [{tags: {a: b}}]\n          securityGroupSelectorTerms: [{tags: {a: b}}]\n      - apiVersion: karpenter.sh/v1\n        kind: NodePool\n        metadata: {name: default}\n        spec:\n          template:\n            spec:\n              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n              requirements:\n                - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n                - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}\n          disruption: {consolidateAfter: 30s}\n      - apiVersion: v1\n        kind: Namespace\n        metadata: {name: bench}\n",
    );
    let mut replicas = vec![pods / DEPLOYMENTS; DEPLOYMENTS];
    for r in replicas.iter_mut().take(pods % DEPLOYMENTS) {
        *r += 1;
    }
    for (d, r) in replicas.iter().enumerate() {
        let _ = write!(
            s,
            "      - apiVersion: apps/v1\n        kind: Deployment\n        metadata: {{name: app-{d:02}, namespace: bench}}\n        spec:\n          replicas: {r}\n          selector: {{matchLabels: {{app: app-{d:02}}}}}\n          template:\n            metadata: {{labels: {{app: app-{d:02}}}}}\n            spec:\n              containers: [{{name: c, resources: {{requests: {{cpu: {pod_cpu}m, memory: {pod_mem_mi}Mi}}}}}}]\n"
        );
    }
    // Pods fill the nodes in order; each Deployment's pods are consecutive.
    let mut p = 0;
    for (d, r) in replicas.iter().enumerate() {
        for k in 0..*r {
            let node = node_name(p / per_node);
            let _ = write!(
                s,
                "      - apiVersion: v1\n        kind: Pod\n        metadata:\n          name: app-{d:02}-5c7f9-{k:05}\n          namespace: bench\n          labels: {{app: app-{d:02}}}\n          ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: app-{d:02}-5c7f9, uid: \"\", controller: true}}]\n        spec:\n          nodeName: {node}\n          containers: [{{name: c, resources: {{requests: {{cpu: {pod_cpu}m, memory: {pod_mem_mi}Mi}}}}}}]\n"
            );
            p += 1;
        }
    }
    Ok(s)
}

/// Starts `kerf serve` on the scenario and waits until its last pod exists.
pub(crate) fn serve(dir: &Path, scenario: &Path, last_pod: &str) -> anyhow::Result<(Proc, PathBuf)> {
    let limit = Duration::from_secs(600);
    let start = Instant::now();
    let (mut served, server, kubeconfig) = bench_process::serve(dir, scenario, limit)?;
    let path = format!("/api/v1/namespaces/bench/pods/{last_pod}");
    while http(&server, "GET", &path, None).ok().map(|(code, _)| code) != Some(200) {
        served.still_running().context("kerf serve")?;
        anyhow::ensure!(start.elapsed() < limit, "kerf serve did not load the cluster in 10 minutes");
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok((served, kubeconfig))
}

/// The name of the last pod [`cluster_scenario`] writes for `pods` pods.
pub(crate) fn last_pod(pods: usize) -> String {
    let last = DEPLOYMENTS.min(pods) - 1;
    format!("app-{last:02}-5c7f9-{:05}", pods / DEPLOYMENTS + usize::from(pods % DEPLOYMENTS > last) - 1)
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(a: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let bad = |m: String| anyhow::Error::new(crate::BadInput(m));
    if a.nodes == 0 || a.pods == 0 || a.runs == 0 {
        return Err(bad("--nodes, --pods and --runs must be at least 1".to_string()));
    }
    if !(a.fill > 0.0 && a.fill <= 1.0) {
        return Err(bad(format!("--fill must be in (0, 1], got {}", a.fill)));
    }
    let duration = kerf_api::GoDuration::parse(&a.for_).map_err(|e| bad(format!("--for {:?}: {e}", a.for_)))?;
    let dir = std::env::temp_dir().join(format!("kerf-bench-snapshot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let scenario = dir.join("cluster.yaml");
    std::fs::write(&scenario, cluster_scenario(a.nodes, a.pods, a.fill)?).context("cannot write the cluster")?;
    let (served, kubeconfig) = serve(&dir, &scenario, &last_pod(a.pods))?;
    let cluster = crate::snapshot::ClusterArgs { kubeconfig: Some(kubeconfig), context: None, chunk_size: 500 };
    let (mut snap_secs, mut what_if_secs) = (Vec::new(), Vec::new());
    let mut outcome = None;
    for _ in 0..a.runs {
        let t = Instant::now();
        let (text, written) = crate::snapshot::snapshot_text(&cluster)?;
        snap_secs.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            written.nodes == a.nodes && written.pods == a.pods,
            "the snapshot holds {} nodes and {} pods, not {} and {}",
            written.nodes,
            written.pods,
            a.nodes,
            a.pods
        );
        let t = Instant::now();
        let s = kerf_sim::scenario::parse(Path::new("<cluster>"), &text).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (report, sim) =
            kerf_sim::what_if::run(&s, Vec::new(), duration.as_duration(), kerf_cloud::ManualClock::new())?;
        what_if_secs.push(t.elapsed().as_secs_f64());
        std::mem::forget(sim);
        outcome = Some((text.len(), report));
    }
    drop(served);
    let _ = std::fs::remove_dir_all(&dir);
    let (bytes, report) = outcome.context("no run")?;
    let c = report.comparison.as_ref().context("the what-if has a comparison")?;
    let (snap, what_if) = (median(snap_secs.clone()), median(what_if_secs.clone()));
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "nodes": a.nodes, "pods": a.pods, "fill": a.fill, "for": a.for_, "runs": a.runs,
                "snapshotSeconds": snap, "snapshotRuns": snap_secs, "snapshotBytes": bytes,
                "whatIfSeconds": what_if, "whatIfRuns": what_if_secs,
                "costPerHourBefore": c.before.cost_per_hour, "costPerHourAfter": c.after.cost_per_hour,
                "nodesAfter": c.after.nodes, "podsPendingAfter": c.after.pods_pending,
                "disruptions": report.disruptions.len(),
            })
        );
    } else {
        println!(
            "snapshot of {} nodes / {} pods served by kerf serve: {snap:.2} s (median of {}; {:.1} MB of scenario)",
            a.nodes,
            a.pods,
            a.runs,
            bytes as f64 / 1e6
        );
        println!(
            "what-if, {} of kerf's controllers on it: {what_if:.2} s (median of {}); ${:.2}/h -> ${:.2}/h, {} nodes -> {}, {} disruptions, {} pods pending",
            a.for_,
            a.runs,
            c.before.cost_per_hour,
            c.after.cost_per_hour,
            c.before.nodes,
            c.after.nodes,
            report.disruptions.len(),
            c.after.pods_pending
        );
    }
    Ok(ExitCode::SUCCESS)
}
