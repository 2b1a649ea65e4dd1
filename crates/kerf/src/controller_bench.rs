//! `kerf bench controller --nodes N --pods P [--json]`: `kerf controller --cloud kwok` against a
//! served cluster of about N nodes and P pods, measured as an operator would meet it.
//!
//! The cluster is built the way it would be in life: `kerf serve --controllers none` with one
//! NodePool of a single instance type and two Deployments of P pods each, and a first controller
//! that launches the nodes for them. That controller is stopped, one Deployment is deleted (the
//! nodes are left half full, so consolidation has work), and once the nodes are past the guard
//! kerf keeps on new nodes, the measured controller starts: the time until it is ready (listed,
//! synced, leading), until its first disruption decision, its peak RSS, the requests it made
//! (counted by the server per User-Agent), and the time for a scale-up of 10% more pods until
//! every pod runs. With `--drift`, every node then drifts (see `controller_drift`). The server's
//! own peak RSS is reported too: it holds every object of the cluster.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::bench_process::{self, Proc, get, http};
use crate::controller_drift::{self, BUDGET_PERCENT, Drift};

#[derive(clap::Args)]
pub struct ControllerArgs {
    /// Nodes in the served cluster (about: the pods are sized to need this many).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Pods running on them.
    #[arg(long, default_value_t = 3_000)]
    pods: usize,
    /// Then change the EC2NodeClass's AMI selection and time the drift of every node within the
    /// NodePool's budget of 10%, against the budget-bound minimum.
    #[arg(long)]
    drift: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The node type: 16 vCPU, 64 GiB, 234 pods.
const INSTANCE_TYPE: &str = "m6a.4xlarge";
/// How long the build phase and each measurement may take (a 5,000-node build on a loaded
/// 2-core machine takes many minutes).
const PHASE_LIMIT: Duration = Duration::from_secs(2400);
/// How long past their creation the measured controller's nodes are (kerf keeps a node it
/// launched for the current workload from consolidation for consolidateAfter + 1 minute).
const NODE_AGE: Duration = Duration::from_secs(65);

fn bad(msg: String) -> anyhow::Error {
    anyhow::Error::new(crate::BadInput(msg))
}

fn scenario(pods: usize, cpu_m: usize, mem_mi: usize) -> String {
    let deployment = |name: &str| {
        format!(
            r#"      - apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}, namespace: default}}
        spec:
          replicas: {pods}
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}}}}}
            spec:
              terminationGracePeriodSeconds: 0
              containers:
                - name: app
                  image: registry.k8s.io/pause:3.10
                  resources: {{requests: {{cpu: {cpu_m}m, memory: {mem_mi}Mi}}}}
"#
        )
    };
    format!(
        r#"name: bench-controller
cloud:
  region: us-west-2
  zones: [us-west-2a, us-west-2b, us-west-2c]
steps:
  - apply:
      - apiVersion: karpenter.k8s.aws/v1
        kind: EC2NodeClass
        metadata: {{name: default}}
        spec:
          role: KarpenterNodeRole-bench
          amiSelectorTerms: [{{alias: al2023@latest}}]
          subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: bench}}}}]
          securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: bench}}}}]
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {{name: bench}}
        spec:
          template:
            spec:
              requirements:
                - {{key: node.kubernetes.io/instance-type, operator: In, values: [{INSTANCE_TYPE}]}}
                - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
              nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
          disruption:
            consolidationPolicy: WhenEmptyOrUnderutilized
            consolidateAfter: 0s
            budgets: [{{nodes: "{BUDGET_PERCENT}%"}}]
{}{}"#,
        deployment("bench"),
        deployment("filler"),
    )
}

/// Pods of the two Deployments: all, or those not Running. With `any`, at most one is listed (a
/// cheap look at a served cluster of many pods, for whether there is one).
fn pods_of(server: &str, only_not_running: bool, any: bool) -> anyhow::Result<usize> {
    let mut path = "/api/v1/namespaces/default/pods?labelSelector=app%20in%20(bench,filler)".to_string();
    if only_not_running {
        path.push_str("&fieldSelector=status.phase!%3DRunning");
    }
    if any {
        path.push_str("&limit=1");
    }
    let (code, body) = http(server, "GET", &path, None)?;
    if code != 200 {
        bail!("listing pods: HTTP {code}: {body}");
    }
    let v: serde_json::Value = serde_json::from_str(&body).context("the pod list")?;
    Ok(v["items"].as_array().map_or(0, Vec::len))
}

/// Pods of the two Deployments: (all, not Running).
fn pods(server: &str, only_not_running: bool) -> anyhow::Result<usize> {
    pods_of(server, only_not_running, false)
}

/// Whether `expected` pods of the Deployments exist and every one runs (all are listed only
/// once none is seen not Running).
fn every_one_runs(server: &str, expected: usize) -> anyhow::Result<bool> {
    Ok(pods_of(server, true, true)? == 0 && pods(server, true)? == 0 && pods(server, false)? == expected)
}

/// Waits until `expected` pods of the Deployments exist and every one runs.
fn all_running(server: &str, expected: usize, what: &str) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        if every_one_runs(server, expected)? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > PHASE_LIMIT {
            bail!("{what}: not every one of {expected} pods ran within {}s", PHASE_LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn scale(server: &str, name: &str, replicas: usize) -> anyhow::Result<()> {
    let path = format!("/apis/apps/v1/namespaces/default/deployments/{name}");
    let patch = format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#);
    let (code, body) = http(server, "PATCH", &path, Some(("application/merge-patch+json", &patch)))?;
    if code != 200 {
        bail!("scaling deployment {name}: HTTP {code}: {body}");
    }
    Ok(())
}

/// The name of the controller measured (its stderr file's too).
const MEASURED: &str = "measured";

/// A started controller and where it serves metrics and probes.
fn controller(dir: &Path, name: &str, kubeconfig: &Path) -> anyhow::Result<(Proc, String, String)> {
    let kc = kubeconfig.to_str().context("the kubeconfig path is not UTF-8")?;
    let args = [
        "controller",
        "--cloud",
        "kwok",
        "--kubeconfig",
        kc,
        "--metrics-addr",
        "127.0.0.1:0",
        "--health-addr",
        "127.0.0.1:0",
    ];
    // A profiler to run the measured controller under (`KERF_BENCH_WRAP=/path/to/script`).
    // The controller that builds the cluster is not the one measured: it runs bare.
    let wrapper = std::env::var("KERF_BENCH_WRAP").ok().filter(|w| !w.is_empty() && name == MEASURED);
    let mut p = Proc::spawn_wrapped(dir, name, &args, wrapper.as_deref())?;
    let line = p.line("metrics on http://", Duration::from_secs(60))?;
    let after =
        |marker: &str| line.split(marker).nth(1).and_then(|r| r.split('/').next()).unwrap_or_default().to_string();
    let (metrics, health) = (after("metrics on http://"), after("probes on http://"));
    Ok((p, metrics, health))
}

/// The sum of a metric's samples (0 without any).
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn wait_for(what: &str, mut check: impl FnMut() -> anyhow::Result<bool>) -> anyhow::Result<Duration> {
    let start = Instant::now();
    loop {
        if check()? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > PHASE_LIMIT {
            bail!("{what}: not within {}s", PHASE_LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn run(a: ControllerArgs) -> anyhow::Result<ExitCode> {
    if a.nodes == 0 || a.pods == 0 {
        return Err(bad("--nodes and --pods: must be at least 1".to_string()));
    }
    // Two Deployments of P pods need the N nodes: 2P/N pods a node.
    let per_node = (2 * a.pods).div_ceil(a.nodes);
    if per_node > 200 {
        return Err(bad(format!(
            "--pods: at most 100 pods a node ({} for --nodes {}), got {}",
            100 * a.nodes,
            a.nodes,
            a.pods
        )));
    }
    let cpu_m = (15_000 / per_node).max(1);
    let mem_mi = (54_000 / per_node).max(1);
    let dir = std::env::temp_dir().join(format!("kerf-bench-controller-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure(&a, &dir, cpu_m, mem_mi);
    let _ = std::fs::remove_dir_all(&dir);
    let Measured { ready, first, executed, rss, serve_rss, requests, scale_up, nodes, drift } = result?;
    if a.json {
        let mut req = serde_json::Map::new();
        for (verb, n) in &requests {
            req.insert(verb.clone(), serde_json::json!(n));
        }
        let mut out = serde_json::json!({
            "nodes": nodes,
            "pods": a.pods,
            "readySeconds": ready,
            "firstDecisionSeconds": first,
            "firstDisruptionSeconds": executed,
            "peakRssBytes": rss,
            "servePeakRssBytes": serve_rss,
            "apiRequests": requests.values().sum::<u64>(),
            "apiRequestsByVerb": req,
            "scaleUpPods": a.pods / 10,
            "scaleUpSeconds": scale_up,
        });
        if let (Some(d), Some(o)) = (&drift, out.as_object_mut()) {
            o.insert(
                "drift".to_string(),
                serde_json::json!({
                    "nodes": d.nodes,
                    "nodesAfter": d.nodes_after,
                    "budget": d.budget,
                    "rounds": d.rounds,
                    "roundSeconds": d.round_seconds,
                    "decidedSeconds": d.decided_seconds,
                    "minimumSeconds": d.minimum_seconds(),
                    "seconds": d.seconds,
                    "ratio": d.ratio(),
                }),
            );
        }
        println!("{out}");
    } else {
        let by_verb: Vec<String> = requests.iter().map(|(v, n)| format!("{n} {v}")).collect();
        println!(
            "kerf controller against {nodes} nodes / {} pods: ready in {ready:.2}s, first disruption decision \
             {first:.2}s after its start (carried out at {executed:.2}s), peak RSS {:.1} MiB, {} API requests ({}); {} more pods all Running in {scale_up:.2}s",
            a.pods,
            rss as f64 / (1024.0 * 1024.0),
            requests.values().sum::<u64>(),
            by_verb.join(", "),
            a.pods / 10,
        );
        println!("kerf serve holding them: peak RSS {:.1} MiB", serve_rss as f64 / (1024.0 * 1024.0));
        if let Some(d) = &drift {
            println!(
                "drift of {} nodes (AMI change, {} nodes after) within a budget of 10% ({} nodes at first): {:.1}s \
                 (first decision {:.1}s after the change); {} rounds of {:.1}s (the first replacement) make a \
                 minimum of {:.1}s: {:.2}x the minimum",
                d.nodes,
                d.nodes_after,
                d.budget,
                d.seconds,
                d.decided_seconds,
                d.rounds,
                d.round_seconds,
                d.minimum_seconds(),
                d.ratio()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What the measured controller did, in seconds from its start (scale-up: from the change).
struct Measured {
    ready: f64,
    first: f64,
    executed: f64,
    rss: u64,
    /// kerf serve's peak RSS.
    serve_rss: u64,
    requests: std::collections::BTreeMap<String, u64>,
    scale_up: f64,
    nodes: usize,
    drift: Option<Drift>,
}

fn measure(a: &ControllerArgs, dir: &Path, cpu_m: usize, mem_mi: usize) -> anyhow::Result<Measured> {
    let scenario_path = dir.join("scenario.yaml");
    std::fs::write(&scenario_path, scenario(a.pods, cpu_m, mem_mi)).context("writing the scenario")?;
    let (serve, server, kubeconfig) = bench_process::serve(dir, &scenario_path, Duration::from_secs(60))?;

    // Build: a first controller launches the nodes for both Deployments.
    let (builder, _, _) = controller(dir, "build", &kubeconfig)?;
    all_running(&server, 2 * a.pods, "building the cluster").context("kerf bench controller")?;
    builder.stop().context("stopping the first controller")?;
    let built = Instant::now();
    scale(&server, "filler", 0)?;
    wait_for("the filler pods gone", || {
        let filler = "/api/v1/namespaces/default/pods?labelSelector=app%3Dfiller&limit=1";
        let (code, body) = http(&server, "GET", filler, None)?;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let none = code == 200 && v["items"].as_array().is_some_and(Vec::is_empty);
        Ok(none && pods(&server, false)? == a.pods)
    })?;
    let nodes = {
        let (code, body) = http(&server, "GET", "/apis/karpenter.sh/v1/nodeclaims", None)?;
        if code != 200 {
            bail!("listing nodeclaims: HTTP {code}");
        }
        let v: serde_json::Value = serde_json::from_str(&body).context("the nodeclaim list")?;
        v["items"].as_array().map_or(0, Vec::len)
    };
    if let Some(rest) = NODE_AGE.checked_sub(built.elapsed()) {
        std::thread::sleep(rest);
    }

    // Measure: a new controller against the built cluster.
    let before = requests(&server)?;
    let start = Instant::now();
    let (measured, metrics, health) = controller(dir, MEASURED, &kubeconfig)?;
    wait_for("the controller ready", || {
        let (code, body) = get(&health, "/readyz");
        Ok(code == 200 && body.contains("leader"))
    })?;
    let ready = start.elapsed().as_secs_f64();
    // A consolidation is decided, then validated after 15 s and carried out (Karpenter's
    // order): the decision is its "validating disruption" line, the execution the
    // decisions metric.
    wait_for("the first disruption decision", || {
        Ok(measured.stderr().contains(r#""message":"validating disruption""#)
            || metric_sum(&get(&metrics, "/metrics").1, "karpenter_voluntary_disruption_decisions_total") > 0.0)
    })?;
    let first = start.elapsed().as_secs_f64();
    wait_for("the first disruption carried out", || {
        Ok(metric_sum(&get(&metrics, "/metrics").1, "karpenter_voluntary_disruption_decisions_total") > 0.0)
    })?;
    let executed = start.elapsed().as_secs_f64();

    // Scale up by 10%.
    let more = a.pods / 10;
    scale(&server, "bench", a.pods + more)?;
    let scale_up = all_running(&server, a.pods + more, "scaling up")?.as_secs_f64();
    let after = requests(&server)?;
    let drift = if a.drift {
        let expected = a.pods + more;
        let all_run = || every_one_runs(&server, expected);
        Some(controller_drift::measure(&server, "default", "bottlerocket@latest", all_run).context("the drift")?)
    } else {
        None
    };
    let rss = measured.peak_rss().unwrap_or(0);
    let serve_rss = serve.peak_rss().unwrap_or(0);
    measured.stop().context("stopping the measured controller")?;
    let mut made = std::collections::BTreeMap::new();
    for (verb, n) in after {
        let d = n - before.get(&verb).copied().unwrap_or(0);
        if d > 0 {
            made.insert(verb, d);
        }
    }
    drop(serve);
    Ok(Measured { ready, first, executed, rss, serve_rss, requests: made, scale_up, nodes, drift })
}

/// The server's request counts of `kerf-controller` clients, by verb.
fn requests(server: &str) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let (code, text) = http(server, "GET", "/metrics", None)?;
    if code != 200 {
        bail!("the server's /metrics: HTTP {code}");
    }
    let mut out = std::collections::BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("apiserver_request_total{client=\"kerf-controller\"")) {
        let verb = l.split("verb=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("other");
        let n = l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.insert(verb.to_string(), n);
    }
    Ok(out)
}
