//! `kerf bench`: benchmarks. `kerf bench scheduling --pods N --instance-types M [--json]` runs the
//! scheduling workload of DESIGN.md and prints pods per second, nodes and cost.

use std::process::ExitCode;
use std::time::Instant;

use kerf_scheduling::bench::{claims_cost, workload};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(clap::Subcommand)]
enum BenchCommand {
    /// Place N generated pods against M generated instance types (one pass of the Scheduler).
    Scheduling(SchedulingArgs),
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
    }
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
