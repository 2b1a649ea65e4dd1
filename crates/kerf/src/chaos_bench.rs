//! `kerf bench chaos --iterations N [--seed S] [--fault-rate R] [--json]`: N seeded runs of the
//! simulator in which the controllers crash and the cloud and the API fail (see
//! `kerf_sim::chaos`); prints the crashes, faults and every invariant's violation count, and
//! exits 1 on any violation, naming the seed and step that replay it.

use std::process::ExitCode;
use std::time::Instant;

use kerf_sim::chaos::{self, Kind, Summary};

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// Number of runs; run i uses seed S + i.
    #[arg(long, default_value_t = 100)]
    iterations: u64,
    /// Seed of the first run (`--iterations 1 --seed S` replays run S).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Probability that a call to the cloud or the API meets a fault (0 to 1).
    #[arg(long = "fault-rate", default_value_t = 0.2, allow_negative_numbers = true)]
    fault_rate: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ChaosArgs) -> anyhow::Result<ExitCode> {
    if a.iterations == 0 {
        return Err(anyhow::Error::new(crate::BadInput("--iterations: must be at least 1".into())));
    }
    if !(0.0..=1.0).contains(&a.fault_rate) {
        return Err(anyhow::Error::new(crate::BadInput(format!(
            "--fault-rate: must be between 0 and 1 (a probability per call), got {}",
            a.fault_rate
        ))));
    }
    let start = Instant::now();
    let mut summary = Summary::default();
    for i in 0..a.iterations {
        let seed = a.seed.wrapping_add(i);
        let outcome = chaos::run(seed, a.fault_rate);
        summary.add(&outcome);
    }
    let seconds = start.elapsed().as_secs_f64();
    let count = |k: Kind| summary.violations.get(&k).copied().unwrap_or(0);
    if a.json {
        let mut out = serde_json::json!({
            "iterations": summary.iterations,
            "seed": a.seed,
            "faultRate": a.fault_rate,
            "crashes": summary.crashes,
            "faultsInjected": summary.faults_injected,
            "faults": summary.faults.iter().map(|(f, n)| (f.name().to_string(), serde_json::json!(n))).collect::<serde_json::Map<_, _>>(),
            "runErrors": summary.errors,
            "seconds": seconds,
            "violations": summary.total_violations(),
            "maxLeakSeconds": summary.max_leak.0.as_secs_f64(),
            "maxLeakSeed": summary.max_leak.1,
            "maxOrphanSeconds": summary.max_orphan.0.as_secs_f64(),
            "maxOrphanSeed": summary.max_orphan.1,
        });
        for k in Kind::ALL {
            out[k.json_key()] = serde_json::json!(count(k));
        }
        println!("{out}");
    } else {
        let counts: Vec<String> = Kind::ALL.iter().map(|k| format!("{} {}", k.json_key(), count(*k))).collect();
        println!(
            "{} runs (seeds {}..={}) in {seconds:.1}s: {} crashes, {} faults injected at rate {}; {}{}; longest leak {:.0}s (seed {}), longest orphan {:.0}s (seed {})",
            summary.iterations,
            a.seed,
            a.seed.wrapping_add(a.iterations - 1),
            summary.crashes,
            summary.faults_injected,
            a.fault_rate,
            counts.join(", "),
            if summary.errors > 0 { format!(", {} runs stopped with an error", summary.errors) } else { String::new() },
            summary.max_leak.0.as_secs_f64(),
            summary.max_leak.1,
            summary.max_orphan.0.as_secs_f64(),
            summary.max_orphan.1,
        );
    }
    for (seed, what) in &summary.failures {
        eprintln!("seed {seed}: {what}");
        eprintln!("  replay: kerf bench chaos --iterations 1 --seed {seed} --fault-rate {}", a.fault_rate);
    }
    Ok(if summary.total_violations() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
