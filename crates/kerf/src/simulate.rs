//! `kerf simulate SCENARIO [--report text|json|html] [--out FILE]`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// A summary for people.
    Text,
    /// The JSON report (summary, nodes, pods, disruptions; see the README), for tools.
    Json,
    /// One self-contained page with charts.
    Html,
}

#[derive(clap::Args)]
pub struct Args {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    /// The report to print.
    #[arg(long, value_enum, default_value = "text")]
    pub report: ReportFormat,
    /// Write the report to this file instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs the scenario on `clock` (the clock the log timestamps are read from).
pub fn run(args: Args, clock: kerf_cloud::ManualClock) -> anyhow::Result<ExitCode> {
    let scenario =
        kerf_sim::scenario::load(&args.scenario).map_err(|e| anyhow::Error::new(crate::BadInput(e.to_string())))?;
    if !scenario.converted.is_empty() {
        // `FILE: KIND/NAME` entries, grouped by file.
        let mut by_file: Vec<(&str, Vec<&str>)> = Vec::new();
        for entry in &scenario.converted {
            let (file, object) = entry.rsplit_once(": ").unwrap_or(("", entry));
            match by_file.iter_mut().find(|(f, _)| *f == file) {
                Some((_, objects)) => objects.push(object),
                None => by_file.push((file, vec![object])),
            }
        }
        let list: Vec<String> = by_file.iter().map(|(f, o)| format!("{f}: {}", o.join(", "))).collect();
        eprintln!(
            "kerf: converted from Karpenter's older APIs to v1 for this run: {} (`kerf convert` writes the v1 manifests and names what has no v1 equivalent)",
            list.join("; ")
        );
    }
    let (report, sim) = kerf_sim::driver::simulate_on(&scenario, clock).map_err(|e| match e {
        // A cloud section the simulated provider rejects is bad input like any other field.
        kerf_sim::SimError::Step { step: 0, ref what, ref problem } if what.starts_with("cloud") => {
            anyhow::Error::new(crate::BadInput(format!("{}: {what}: {problem}", args.scenario.display())))
        }
        other => anyhow::Error::new(other).context(format!("scenario {}", args.scenario.display())),
    })?;
    // The process ends right after printing: tearing down a large simulated cluster object by
    // object would only cost time (about a second at 30,000 pods).
    std::mem::forget(sim);
    let text = match args.report {
        ReportFormat::Text => report.to_text(),
        ReportFormat::Json => report.to_json(),
        ReportFormat::Html => report.to_html(),
    };
    match &args.out {
        Some(path) => std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
