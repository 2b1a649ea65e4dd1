//! `kerf bench packing`: how close the Scheduler's fleet comes to the cheapest possible one.
//!
//! Several mixed workloads are placed by the provisioner's own decision
//! (`SchedulingContext::new(input).place_pending()`) against the built-in AWS catalog in
//! us-west-2, with a NodePool allowing instance categories c, m and r of generation > 2 (amd64,
//! Linux, spot and on-demand) and three DaemonSets whose pods run on every node. The fleet's
//! $/h (each new claim at its cheapest fitting type's cheapest allowed offering, what the cloud
//! layer launches) is compared with a lower bound on the cheapest fleet
//! ([`kerf_scheduling::packing_bound`]: the LP relaxation of the configuration program over the
//! pool's types as the Scheduler sees them, DaemonSet overhead and pod-count limits included).
//! The workloads carry no topology constraints: the bound does not model zones, so a zone
//! spread (whose domains have different spot prices) would measure the bound's slack, not the
//! packing.
//!
//! `--realized` also runs each workload end to end in the simulator (the same pool, DaemonSets
//! and pods as Deployments; kerf's controllers, the simulated kube-scheduler binding the pods,
//! then five minutes of disruption) and reports the fleet that runs then: what an operator pays,
//! beside the plan and the bound.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::labels::{ARCH, CAPACITY_TYPE, INSTANCE_CATEGORY, INSTANCE_GENERATION, OS};
use kerf_api::{NodePool, NodeSelectorRequirementWithMinValues, Operator, ResourceList};
use kerf_api::{PodShape, SlimContainer, SlimPod, SlimPodSpec};
use kerf_cloud::aws::{NodeClassSettings, catalog};
use kerf_scheduling::bench::claims_cost;
use kerf_scheduling::packing_bound::{BoundBin, BoundShape, lower_bound};
use kerf_scheduling::{NodePoolInput, SchedulingContext, SchedulingInput, pod_requests};

/// The benchmark's region.
const REGION: &str = "us-west-2";

#[derive(clap::Args)]
pub struct PackingArgs {
    /// Run each workload's placement this many times and report the median time.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Only the workloads with these names (all when none is given).
    #[arg(long = "workload")]
    workloads: Vec<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also run each workload in the simulator and report the fleet that runs after its pods
    /// are bound and five minutes of consolidation.
    #[arg(long)]
    realized: bool,
}

/// A deployment-like set of identical pods.
struct Shape {
    app: &'static str,
    replicas: usize,
    cpu: &'static str,
    memory: Option<&'static str>,
}

const fn shape(app: &'static str, replicas: usize, cpu: &'static str, memory: &'static str) -> Shape {
    Shape { app, replicas, cpu, memory: Some(memory) }
}

/// The workloads: name and shapes.
fn workloads() -> Vec<(&'static str, Vec<Shape>)> {
    vec![
        ("inflate", vec![Shape { app: "inflate", replicas: 60, cpu: "1", memory: None }]),
        // Karpenter's scale-test workload: two deployments of very different shapes.
        ("karpenter-two-shape", vec![shape("small", 500, "900m", "3100Mi"), shape("large", 500, "3500m", "28Gi")]),
        (
            "five-shape",
            vec![
                shape("xs", 400, "250m", "512Mi"),
                shape("s", 400, "500m", "2Gi"),
                shape("m", 400, "1", "1Gi"),
                shape("l", 400, "2", "4Gi"),
                shape("xl", 400, "4", "16Gi"),
            ],
        ),
        // A web tier, its API, a memory-hungry cache and CPU-bound workers.
        (
            "web-stack",
            vec![
                shape("web", 600, "500m", "768Mi"),
                shape("api", 200, "1500m", "3Gi"),
                shape("cache", 60, "1", "12Gi"),
                shape("worker", 100, "2", "2Gi"),
            ],
        ),
        // Memory-heavy analytics executors with small sidecar-like services.
        (
            "memory-analytics",
            vec![
                shape("executor", 150, "2", "14Gi"),
                shape("driver", 40, "8", "60Gi"),
                shape("agent", 400, "100m", "256Mi"),
            ],
        ),
        // Many small pods: the pods-per-node limit binds before cpu or memory.
        ("small-pods", vec![shape("tiny", 3000, "100m", "128Mi"), shape("little", 200, "250m", "256Mi")]),
    ]
}

fn requests(cpu: &str, memory: Option<&str>) -> ResourceRequirements {
    let mut r: BTreeMap<String, KQ> = [("cpu".to_string(), KQ(cpu.into()))].into();
    if let Some(m) = memory {
        r.insert("memory".to_string(), KQ(m.into()));
    }
    ResourceRequirements { requests: Some(r), ..Default::default() }
}

fn pods(shapes: &[Shape]) -> Vec<Arc<SlimPod>> {
    let mut out = Vec::new();
    for s in shapes {
        let labels: BTreeMap<String, String> = [("app".to_string(), s.app.to_string())].into();
        for i in 0..s.replicas {
            out.push(Arc::new(SlimPod {
                metadata: ObjectMeta {
                    name: Some(format!("{}-{i}", s.app)),
                    namespace: Some("default".into()),
                    labels: Some(labels.clone()),
                    ..Default::default()
                }
                .into(),
                spec: Some(SlimPodSpec::from(PodShape {
                    containers: vec![SlimContainer {
                        name: "app".into(),
                        resources: Some(requests(s.cpu, s.memory)),
                        ..Default::default()
                    }],
                    ..Default::default()
                })),
                status: None,
            }));
        }
    }
    out
}

/// The DaemonSets on every node: the VPC CNI, kube-proxy and a log shipper.
fn daemonset_pods() -> Vec<Arc<SlimPod>> {
    [("aws-node", "25m", None), ("kube-proxy", "100m", None), ("fluent-bit", "100m", Some("128Mi"))]
        .into_iter()
        .map(|(name, cpu, memory)| {
            Arc::new(SlimPod {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("kube-system".into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "apps/v1".into(),
                        kind: "DaemonSet".into(),
                        name: name.into(),
                        uid: name.into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }
                .into(),
                spec: Some(SlimPodSpec::from(PodShape {
                    containers: vec![SlimContainer {
                        name: name.into(),
                        resources: Some(requests(cpu, memory)),
                        ..Default::default()
                    }],
                    ..Default::default()
                })),
                status: None,
            })
        })
        .collect()
}

fn requirement(key: &str, operator: Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

/// The benchmark's NodePool: c/m/r, generation > 2, amd64 Linux, spot and on-demand, no limits.
fn node_pool() -> NodePool {
    kerf_scheduling::bench::pool(
        "default",
        vec![
            requirement(ARCH, Operator::In, &["amd64"]),
            requirement(OS, Operator::In, &["linux"]),
            requirement(CAPACITY_TYPE, Operator::In, &["spot", "on-demand"]),
            requirement(INSTANCE_CATEGORY, Operator::In, &["c", "m", "r"]),
            requirement(INSTANCE_GENERATION, Operator::Gt, &["2"]),
        ],
        None,
    )
}

/// One workload's figures.
struct Outcome {
    name: String,
    pods: usize,
    scheduled: usize,
    node_claims: usize,
    cost: f64,
    bound: f64,
    /// The relaxation's optimum over the configurations generated: `bound` when every pricing
    /// knapsack was solved exactly; otherwise a better configuration may have been missed, and
    /// only `bound` is proven.
    bound_master: f64,
    bound_converged: bool,
    bound_exact: bool,
    seconds: f64,
    bound_seconds: f64,
    /// Instance type name → claims of that type.
    types: BTreeMap<String, usize>,
    realized: Option<Realized>,
}

/// The fleet that runs once the simulated cluster has bound the pods and disruption has had
/// five minutes.
struct Realized {
    cost: f64,
    nodes: usize,
    running: usize,
    pending: usize,
    launched: usize,
    terminated: usize,
}

/// The workload as a scenario: the benchmark's pool, its DaemonSets and one Deployment per
/// shape, applied at once; then the launch and five minutes.
fn scenario_yaml(name: &str, shapes: &[Shape]) -> String {
    let mut y = [
        format!("name: packing-{name}"),
        format!("cloud: {{region: {REGION}}}"),
        "steps:".to_string(),
        "  - apply:".to_string(),
        "      - apiVersion: karpenter.k8s.aws/v1".to_string(),
        "        kind: EC2NodeClass".to_string(),
        "        metadata: {name: default}".to_string(),
        "        spec: {role: r, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{tags: {a: b}}], securityGroupSelectorTerms: [{tags: {a: b}}]}".to_string(),
        "      - apiVersion: karpenter.sh/v1".to_string(),
        "        kind: NodePool".to_string(),
        "        metadata: {name: default}".to_string(),
        "        spec:".to_string(),
        "          template:".to_string(),
        "            spec:".to_string(),
        "              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}".to_string(),
        "              requirements:".to_string(),
    ]
    .join("\n");
    y.push('\n');
    for r in node_pool().spec.template.spec.requirements {
        let values: Vec<String> = r.values.iter().map(|v| format!("\"{v}\"")).collect();
        y.push_str(&format!(
            "                - {{key: {}, operator: {:?}, values: [{}]}}\n",
            r.key,
            r.operator,
            values.join(", ")
        ));
    }
    let resources = |cpu: &str, memory: Option<&str>| match memory {
        Some(m) => format!("{{cpu: \"{cpu}\", memory: \"{m}\"}}"),
        None => format!("{{cpu: \"{cpu}\"}}"),
    };
    for d in daemonset_pods() {
        let name = kerf_scheduling::pod::name(&d);
        let requests = pod_requests(&d);
        let memory = requests.get("memory");
        let memory = (!memory.is_zero()).then(|| memory.to_string());
        y.push_str(&format!(
            "      - {{apiVersion: apps/v1, kind: DaemonSet, metadata: {{name: {name}, namespace: kube-system}}, spec: {{selector: {{matchLabels: {{app: {name}}}}}, template: {{metadata: {{labels: {{app: {name}}}}}, spec: {{containers: [{{name: c, image: i, resources: {{requests: {}}}}}]}}}}}}}}\n",
            resources(&requests.get("cpu").to_string(), memory.as_deref())
        ));
    }
    for s in shapes {
        y.push_str(&format!(
            "      - {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: {app}}}, spec: {{replicas: {replicas}, selector: {{matchLabels: {{app: {app}}}}}, template: {{metadata: {{labels: {{app: {app}}}}}, spec: {{containers: [{{name: c, image: i, resources: {{requests: {}}}}}]}}}}}}}}\n",
            resources(s.cpu, s.memory),
            app = s.app,
            replicas = s.replicas,
        ));
    }
    // Batching (at most 10 s), the launch (30 s), then five minutes of disruption.
    y.push_str("  - wait: 45s\n  - wait: 5m\n");
    y
}

/// Runs the workload in the simulator (see [`scenario_yaml`]).
fn realize(name: &str, shapes: &[Shape]) -> anyhow::Result<Realized> {
    let yaml = scenario_yaml(name, shapes);
    let scenario = kerf_sim::scenario::parse(std::path::Path::new(&format!("packing-{name}.yaml")), &yaml)
        .map_err(|e| anyhow::anyhow!("workload {name}: {e}"))?;
    let report = kerf_sim::steps::run_scenario(&scenario).map_err(|e| anyhow::anyhow!("workload {name}: {e}"))?;
    let s = &report.summary;
    Ok(Realized {
        cost: s.cost_per_hour,
        nodes: s.nodes,
        running: s.pods_running,
        pending: s.pods_pending,
        launched: s.node_claims_launched,
        terminated: s.node_claims_terminated,
    })
}

/// The scheduling input of a workload: the pool, the catalog's types, the DaemonSets, the pods.
fn input(shapes: &[Shape]) -> anyhow::Result<SchedulingInput> {
    let types = catalog()?.instance_types(REGION, None, &NodeClassSettings::default())?;
    Ok(SchedulingInput {
        node_pools: vec![NodePoolInput {
            node_pool: Arc::new(node_pool()),
            instance_types: types.into_iter().map(Arc::new).collect(),
            in_use: ResourceList::new(),
        }],
        daemonset_pods: daemonset_pods(),
        pods: pods(shapes),
        ..Default::default()
    })
}

/// Places one workload (median of `runs` timings) and computes its lower bound; with
/// `realized`, also runs it in the simulator.
fn measure(name: &str, shapes: &[Shape], runs: usize, realized: bool) -> anyhow::Result<Outcome> {
    let realized = if realized { Some(realize(name, shapes)?) } else { None };
    let input = Arc::new(input(shapes)?);
    let mut times = Vec::with_capacity(runs);
    let mut result = None;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let r = SchedulingContext::new(Arc::clone(&input)).place_pending();
        times.push(start.elapsed().as_secs_f64());
        result = Some(r);
    }
    let result = result.unwrap_or_default();
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let scheduled = result.placements.len() + result.new_node_claims.iter().map(|c| c.pods.len()).sum::<usize>();
    let mut types = BTreeMap::new();
    for c in &result.new_node_claims {
        if let Some(t) = c.instance_types.first() {
            *types.entry(t.name.clone()).or_insert(0) += 1;
        }
    }
    let start = Instant::now();
    let mut ctx = SchedulingContext::new(Arc::clone(&input));
    let table = ctx.pool_types("default").unwrap_or_default();
    // Resources the pods ask for, in a fixed order; the bins' room in the same order.
    let dims = ["cpu", "memory", "pods"];
    let dense = |list: &ResourceList| -> Vec<i64> {
        dims.iter().map(|d| if *d == "cpu" { list.get(d).milli_ceil() } else { list.get(d).value_ceil() }).collect()
    };
    let bins: Vec<BoundBin> = table
        .iter()
        .map(|t| BoundBin { name: t.instance_type.name.clone(), free: dense(&t.free), price: t.price })
        .collect();
    let mut by_shape: BTreeMap<Vec<i64>, u64> = BTreeMap::new();
    for p in &input.pods {
        let mut r = dense(&pod_requests(p));
        r[2] = 1;
        *by_shape.entry(r).or_insert(0) += 1;
    }
    let shapes: Vec<BoundShape> =
        by_shape.into_iter().map(|(requests, count)| BoundShape { requests, count }).collect();
    let bound = lower_bound(&bins, &shapes).map_err(|e| anyhow::anyhow!("workload {name}: {e}"))?;
    let bound_seconds = start.elapsed().as_secs_f64();
    Ok(Outcome {
        name: name.to_string(),
        pods: input.pods.len(),
        scheduled,
        node_claims: result.new_node_claims.len(),
        cost: claims_cost(&result),
        bound: bound.value,
        bound_master: bound.master,
        bound_converged: bound.converged,
        bound_exact: bound.exact,
        seconds,
        bound_seconds,
        types,
        realized,
    })
}

/// `value` over `base`: a ratio to a cost or bound, 1 when there is nothing to compare with.
fn over(value: f64, base: f64) -> f64 {
    if base > 0.0 { value / base } else { 1.0 }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

pub fn run(a: PackingArgs) -> anyhow::Result<ExitCode> {
    if a.runs == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--runs: must be at least 1".into())));
    }
    let all = workloads();
    for w in &a.workloads {
        if !all.iter().any(|(n, _)| n == w) {
            let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
            return Err(anyhow::Error::new(crate::BadInput(format!(
                "--workload: unknown workload {w:?} (known: {})",
                names.join(", ")
            ))));
        }
    }
    let mut outcomes = Vec::new();
    for (name, shapes) in &all {
        if a.workloads.is_empty() || a.workloads.iter().any(|w| w == name) {
            outcomes.push(measure(name, shapes, a.runs, a.realized)?);
        }
    }
    let ratio = |o: &Outcome| over(o.cost, o.bound);
    let all_placed = outcomes.iter().all(|o| o.scheduled == o.pods);
    if a.json {
        let workloads: Vec<serde_json::Value> = outcomes
            .iter()
            .map(|o| {
                serde_json::json!({
                    "name": o.name,
                    "pods": o.pods,
                    "scheduled": o.scheduled,
                    "nodeClaims": o.node_claims,
                    "costPerHour": round(o.cost, 5),
                    "lowerBound": round(o.bound, 5),
                    "lpOptimum": round(o.bound_master, 5),
                    "ratio": round(ratio(o), 4),
                    "boundConverged": o.bound_converged,
                    "boundExact": o.bound_exact,
                    "seconds": o.seconds,
                    "boundSeconds": o.bound_seconds,
                    "instanceTypes": o.types,
                    "realized": o.realized.as_ref().map(|r| serde_json::json!({
                        "costPerHour": round(r.cost, 5),
                        "ratio": round(over(r.cost, o.bound), 4),
                        "toPlan": round(over(r.cost, o.cost), 4),
                        "nodes": r.nodes,
                        "podsRunning": r.running,
                        "podsPending": r.pending,
                        "nodeClaimsLaunched": r.launched,
                        "nodeClaimsTerminated": r.terminated,
                    })),
                })
            })
            .collect();
        let max = outcomes.iter().map(ratio).fold(1.0, f64::max);
        let mut out = serde_json::json!({
            "region": REGION,
            "runs": a.runs,
            "workloads": workloads,
            "maxRatio": round(max, 4),
            "maxRatioToLpOptimum": round(outcomes.iter().map(|o| over(o.cost, o.bound_master)).fold(1.0, f64::max), 4),
        });
        if a.realized {
            let realized_max =
                outcomes.iter().filter_map(|o| o.realized.as_ref().map(|r| over(r.cost, o.bound))).fold(1.0, f64::max);
            out["maxRealizedRatio"] = serde_json::json!(round(realized_max, 4));
        }
        println!("{out}");
    } else {
        println!(
            "{:<20} {:>6} {:>6} {:>10} {:>12} {:>7} {:>9}  instance types",
            "workload", "pods", "nodes", "$/h", "lower bound", "ratio", "seconds"
        );
        for o in &outcomes {
            let types: Vec<String> = o.types.iter().map(|(t, n)| format!("{n}x{t}")).collect();
            println!(
                "{:<20} {:>6} {:>6} {:>10.4} {:>12.4} {:>7.4} {:>9.4}  {}",
                o.name,
                o.pods,
                o.node_claims,
                o.cost,
                o.bound,
                ratio(o),
                o.seconds,
                types.join(" ")
            );
            if o.scheduled != o.pods {
                println!("  {} of {} pods could not be placed", o.pods - o.scheduled, o.pods);
            }
            if let Some(r) = &o.realized {
                println!(
                    "  realized: {:.4} $/h on {} nodes ({:.4} of the bound, {:.4} of the plan), {} pods running, {} pending, {} claims launched, {} terminated",
                    r.cost,
                    r.nodes,
                    over(r.cost, o.bound),
                    over(r.cost, o.cost),
                    r.running,
                    r.pending,
                    r.launched,
                    r.terminated
                );
            }
        }
    }
    let all_running = outcomes.iter().all(|o| o.realized.as_ref().is_none_or(|r| r.pending == 0));
    Ok(if all_placed && all_running { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
