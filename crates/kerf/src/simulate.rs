//! `kerf simulate SCENARIO [--report text|json|html] [--out FILE]`, and the what-if:
//! `kerf simulate --from-cluster [--kubeconfig FILE] [--context NAME] [--for DURATION]
//! [--apply FILE...]` (or a snapshot file with `--for` / `--apply`): the cluster as it is, then
//! kerf's controllers for DURATION, reported with before / after.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// How long the what-if runs kerf's controllers when `--for` is not given.
const DEFAULT_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// A summary for people.
    Text,
    /// The JSON report (summary, nodes, pods, disruptions; see docs/reports.md), for tools.
    Json,
    /// One self-contained page with charts.
    Html,
}

#[derive(clap::Args)]
pub struct Args {
    /// The scenario file (YAML); not with --from-cluster.
    #[arg(required_unless_present = "from_cluster", conflicts_with = "from_cluster")]
    pub scenario: Option<PathBuf>,
    /// Snapshot the cluster (as `kerf snapshot` does, in memory) and run the what-if on it.
    #[arg(long)]
    pub from_cluster: bool,
    #[command(flatten)]
    pub cluster: crate::snapshot::ClusterArgs,
    /// What-if: how long kerf's controllers run on the cluster as it is (Go duration; default
    /// 30m). With a scenario file, its steps are the cluster as it is.
    #[arg(long = "for", value_name = "DURATION")]
    pub for_: Option<String>,
    /// What-if: manifests applied before the controllers run (e.g. a changed NodePool).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub apply: Vec<PathBuf>,
    /// The report to print.
    #[arg(long, value_enum, default_value = "text")]
    pub report: ReportFormat,
    /// Write the report to this file instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn bad(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(crate::BadInput(e.to_string()))
}

/// Runs the scenario on `clock` (the clock the log timestamps are read from).
pub fn run(args: Args, clock: kerf_cloud::ManualClock) -> anyhow::Result<ExitCode> {
    if !args.from_cluster && (args.cluster.kubeconfig.is_some() || args.cluster.context.is_some()) {
        return Err(bad("--kubeconfig and --context read a cluster: use them with --from-cluster"));
    }
    let what_if = args.from_cluster || args.for_.is_some() || !args.apply.is_empty();
    let (scenario, label) = match &args.scenario {
        Some(path) => (kerf_sim::scenario::load(path).map_err(bad)?, path.display().to_string()),
        None => {
            let (text, written) = crate::snapshot::snapshot_text(&args.cluster)?;
            eprintln!("kerf simulate: snapshot of the cluster: {}", crate::snapshot::describe(&written));
            let label = "the cluster snapshot".to_string();
            // The cluster's objects, checked as a scenario file's are.
            let scenario = kerf_sim::scenario::parse(std::path::Path::new("<cluster>"), &text)
                .map_err(|e| anyhow::anyhow!("the cluster cannot be simulated as it is: {e}"))?;
            (scenario, label)
        }
    };
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
    if let Some(gates) = scenario.settings.feature_gates.not_acted_on() {
        eprintln!("kerf: settings.featureGates: {gates}");
    }
    let result = if what_if {
        let duration = match &args.for_ {
            Some(d) => kerf_api::GoDuration::parse(d).map_err(|e| bad(format!("--for {d:?}: {e}")))?.as_duration(),
            None => DEFAULT_FOR,
        };
        let mut manifests = Vec::new();
        for path in &args.apply {
            manifests.extend(kerf_sim::scenario::load_manifests(path).map_err(bad)?);
        }
        kerf_sim::what_if::run(&scenario, manifests, duration, clock)
    } else {
        kerf_sim::steps::simulate_on(&scenario, clock)
    };
    let (report, sim) = result.map_err(|e| match e {
        // A cloud section the simulated provider rejects is bad input like any other field.
        kerf_sim::SimError::Step { step: 0, ref what, ref problem } if what.starts_with("cloud") => {
            bad(format!("{label}: {what}: {problem}"))
        }
        other => anyhow::Error::new(other).context(format!("scenario {label}")),
    })?;
    // The process ends right after printing: tearing down a large simulated cluster object by
    // object would only cost time, the more the larger the cluster.
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
