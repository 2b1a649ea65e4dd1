//! `kerf bench`: benchmarks. `kerf bench scheduling --pods N --instance-types M [--json]` runs the
//! scheduling workload (docs/design.md, "Scheduling benchmark workload") and prints pods per
//! second, nodes and cost.
//! `kerf bench consolidation --nodes N --pods-per-node P [--fill F] [--json]` builds a cluster of
//! N nodes holding N × P pods of the same shapes (each node filled to F of its allocatable;
//! default 1, full) and asks, for every node, whether its pods could move
//! elsewhere or onto one cheaper node — the disruption controller's own searches — and runs the
//! multi-node search.
//! `kerf bench controller --nodes N --pods P [--drift] [--json]` measures `kerf controller`
//! against a served cluster, and with `--drift` a drift of every node (see `controller_bench`).
//! `kerf bench packing [--json]` compares the fleet the Scheduler buys for mixed workloads with a
//! lower bound on the cheapest fleet (see `packing_bench`).
//! `kerf bench snapshot --nodes N --pods P [--json]` times `kerf snapshot` of a served cluster and
//! the what-if on it (see `snapshot_bench`).
//! `kerf bench chaos --iterations N [--seed S] [--fault-rate R] [--json]` runs the simulator with
//! crashes and faults and checks kerf's invariants (see `chaos_bench`).
//! `kerf bench top --nodes N --pods P [--changes C] [--json]` times `kerf top` against a served
//! cluster (see `top_bench`).

use std::process::ExitCode;
use std::time::Instant;

use kerf_scheduling::bench::{claims_cost, consolidation_cluster_filled, workload};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(clap::Subcommand)]
enum BenchCommand {
    /// Place N generated pods against M generated instance types (one pass of the Scheduler).
    Scheduling(SchedulingArgs),
    /// Evaluate every single-node consolidation candidate of a generated cluster.
    Consolidation(ConsolidationArgs),
    /// Place mixed workloads against the built-in AWS catalog and compare the fleet's price with
    /// a lower bound on the cheapest fleet.
    Packing(crate::packing_bench::PackingArgs),
    /// Snapshot a served cluster of N nodes and P pods over HTTP, then run the what-if on it.
    Snapshot(crate::snapshot_bench::SnapshotArgs),
    /// Run `kerf controller --cloud kwok` against a served cluster of N nodes and P pods: time
    /// to ready, to its first disruption decision, peak RSS, API requests, a 10% scale-up.
    Controller(crate::controller_bench::ControllerArgs),
    /// Seeded random runs with controller crashes and cloud and API faults, checked against
    /// kerf's invariants (no leaked instance, no lost pod, budgets, PDBs, do-not-disrupt).
    Chaos(crate::chaos_bench::ChaosArgs),
    /// Run `kerf top` against a served cluster of N nodes and P pods: time to the first frame,
    /// peak RSS, and the time from a change to the frame that shows it.
    Top(crate::top_bench::TopArgs),
}

#[derive(clap::Args)]
struct ConsolidationArgs {
    /// Number of existing nodes.
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    /// Pods on each node.
    #[arg(long = "pods-per-node", default_value_t = 30)]
    pods_per_node: usize,
    /// Number of instance types the NodePool can launch replacements from.
    #[arg(long = "instance-types", default_value_t = 400)]
    instance_types: usize,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fill each node to this fraction of its allocatable (0 < F <= 1; 1: full nodes, no pod
    /// can move) so pods can move to other nodes.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    fill: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SchedulingArgs {
    /// Number of pods.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Number of instance types.
    #[arg(long = "instance-types", default_value_t = 400)]
    instance_types: usize,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the pass this many times on the same input and report the median time.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        BenchCommand::Scheduling(a) => scheduling(a),
        BenchCommand::Consolidation(a) => consolidation(a),
        BenchCommand::Packing(a) => crate::packing_bench::run(a),
        BenchCommand::Snapshot(a) => crate::snapshot_bench::run(a),
        BenchCommand::Controller(a) => crate::controller_bench::run(a),
        BenchCommand::Chaos(a) => crate::chaos_bench::run(a),
        BenchCommand::Top(a) => crate::top_bench::run(a),
    }
}

fn consolidation(a: ConsolidationArgs) -> anyhow::Result<ExitCode> {
    if a.nodes == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--nodes: must be at least 1".into())));
    }
    if a.pods_per_node == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--pods-per-node: must be at least 1".into())));
    }
    if a.instance_types == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--instance-types: must be at least 1".into())));
    }
    if !(a.fill > 0.0 && a.fill <= 1.0) {
        return Err(anyhow::Error::new(crate::BadInput(format!(
            "--fill: must be greater than 0 and at most 1 (a fraction of each node's allocatable), got {}",
            a.fill
        ))));
    }
    let (input, prices) = consolidation_cluster_filled(a.nodes, a.pods_per_node, a.instance_types, a.seed, a.fill);
    let pods: usize = input.existing_nodes.iter().map(|n| n.pods.len()).sum();
    // The generated nodes are spot: the spot-to-spot gate is on so replacements are considered.
    let f = crate::consolidation_bench::run(input, &prices, true);
    let (build, per_candidate, moved) = (f.build_seconds, f.per_candidate, f.moved);
    let (deletable, replaceable) = (f.deletable, f.replaceable);
    let seconds = build + per_candidate.iter().sum::<f64>();
    let decision_seconds = seconds + f.multi_seconds;
    let candidates = per_candidate.len();
    let mut sorted = per_candidate.clone();
    sorted.sort_by(f64::total_cmp);
    let median_ms = sorted.get(candidates / 2).copied().unwrap_or(0.0) * 1e3;
    let max_ms = sorted.last().copied().unwrap_or(0.0) * 1e3;
    let mean_ms = per_candidate.iter().sum::<f64>() * 1e3 / candidates.max(1) as f64;
    if a.json {
        let out = serde_json::json!({
            "nodes": a.nodes,
            "pods": pods,
            "podsPerNode": a.pods_per_node,
            "fill": a.fill,
            "instanceTypes": a.instance_types,
            "seed": a.seed,
            "candidates": candidates,
            "podsMoved": moved,
            "seconds": seconds,
            "buildSeconds": build,
            "perCandidateMs": median_ms,
            "meanPerCandidateMs": mean_ms,
            "maxPerCandidateMs": max_ms,
            "deletable": deletable,
            "replaceable": replaceable,
            "multiNodeSeconds": f.multi_seconds,
            "multiNodeCandidates": f.multi_nodes,
            "decisionSeconds": decision_seconds,
        });
        println!("{out}");
    } else {
        println!(
            "evaluated {candidates} single-node candidates ({} nodes, {pods} pods) in {seconds:.3}s \
             (context {build:.3}s): median {median_ms:.3} ms per candidate (mean {mean_ms:.3}, max {max_ms:.3}); \
             {deletable} deletable, {replaceable} replaceable by one cheaper node; multi-node search {:.3}s \
             ({} nodes together); whole decision {decision_seconds:.3}s",
            a.nodes, f.multi_seconds, f.multi_nodes
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn scheduling(a: SchedulingArgs) -> anyhow::Result<ExitCode> {
    if a.pods == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--pods: must be at least 1".into())));
    }
    if a.instance_types == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--instance-types: must be at least 1".into())));
    }
    if a.runs == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--runs: must be at least 1".into())));
    }
    let input = workload(a.pods, a.instance_types, a.seed);
    let mut times = Vec::with_capacity(a.runs);
    let mut result = None;
    for _ in 0..a.runs {
        let start = Instant::now();
        let r = kerf_scheduling::schedule(&input);
        times.push(start.elapsed().as_secs_f64());
        // Dropped outside the timed region.
        result = Some(r);
    }
    let result = result.unwrap_or_default();
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    let scheduled: usize = result.placements.len() + result.new_node_claims.iter().map(|c| c.pods.len()).sum::<usize>();
    let claims = result.new_node_claims.len();
    let cost = claims_cost(&result);
    let pods_per_second = a.pods as f64 / seconds.max(1e-9);
    if a.json {
        let out = serde_json::json!({
            "pods": a.pods,
            "instanceTypes": a.instance_types,
            "seed": a.seed,
            "scheduled": scheduled,
            "unschedulable": result.errors.len(),
            "nodeClaims": claims,
            "costPerHour": (cost * 1e6).round() / 1e6,
            "seconds": seconds,
            "runs": a.runs,
            "podsPerSecond": pods_per_second.round(),
        });
        println!("{out}");
    } else {
        println!(
            "scheduled {scheduled}/{} pods against {} instance types in {:.3}s{}: {:.0} pods/s, {claims} node claims, ${cost:.2}/h",
            a.pods,
            a.instance_types,
            seconds,
            if a.runs > 1 { format!(" (median of {} runs)", a.runs) } else { String::new() },
            pods_per_second
        );
        if let Some((pod, err)) = result.errors.first() {
            println!("first unschedulable pod #{pod}: {}", err.message);
        }
    }
    Ok(if scheduled == a.pods { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
