//! `kerf bench top --nodes N --pods P [--changes C] [--json]`: `kerf top` against a served
//! cluster of N nodes and P pods (the `kerf bench snapshot` cluster, `kerf serve --controllers
//! none`), or with `--scenario FILE` against `kerf serve FILE` (its controllers running, the
//! fleet they launch). Measures, for the figures of docs/performance.md:
//! - start: a `kerf top --json` process from its start to its exit (every kind listed and
//!   watched, one frame computed and printed) once every served pod runs (with a scenario: once
//!   the fleet has settled), the median of `--runs`, and the peak RSS of them all;
//! - redraw: in this process, the watches and the screen of `kerf top` (drawn on an off-screen
//!   terminal of 200×50): C nodes cordoned one after the other through the API, each timed from
//!   the write to the drawn frame that shows it; and the time to draw a frame.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::bench_process::http;
use crate::snapshot_bench::{cluster_scenario, last_pod, median, serve};
use crate::top::fleet::{Fleet, Kind};
use crate::top::view::Options;
use crate::top::viewer::Viewer;

#[derive(clap::Args)]
pub struct TopArgs {
    /// Nodes in the served cluster.
    #[arg(long, default_value_t = 2_000)]
    nodes: usize,
    /// Pods, spread evenly over the nodes.
    #[arg(long, default_value_t = 60_000)]
    pods: usize,
    /// Nodes cordoned, one after the other, to time redraws.
    #[arg(long, default_value_t = 10)]
    changes: usize,
    /// Serve this scenario with its controllers instead of a generated cluster (`--nodes` and
    /// `--pods` are then not used).
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Timed `kerf top --json` starts once the cluster has settled; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The counts that say whether a served fleet has settled.
fn fleet_counts(frame: &serde_json::Value) -> [Option<u64>; 5] {
    let c = &frame["cluster"];
    ["nodes", "launching", "podsRunning", "podsPending", "podsBoundNotStarted"].map(|k| c[k].as_u64())
}

/// `kerf serve FILE` with its controllers, at ten times real speed; its kubeconfig.
fn serve_scenario(dir: &Path, scenario: &Path) -> anyhow::Result<(crate::bench_process::Proc, PathBuf)> {
    let kubeconfig = dir.join("kubeconfig");
    let sc = scenario.to_str().context("the scenario path is not UTF-8")?;
    let kc = kubeconfig.to_str().context("the kubeconfig path is not UTF-8")?;
    let mut served = crate::bench_process::Proc::spawn(
        dir,
        "serve",
        &["serve", sc, "--speed", "10", "--listen", "127.0.0.1:0", "--kubeconfig", kc],
    )?;
    served.line("is served on http://", Duration::from_secs(600))?;
    Ok((served, kubeconfig))
}

/// Timed `kerf top --json` runs once the served fleet holds still (the same counts in three
/// frames in a row, no node launching, no pod bound and not started): the start seconds of
/// `runs` runs after that, and the last frame.
fn settled_starts(kubeconfig: &Path, runs: usize) -> anyhow::Result<(Vec<f64>, serde_json::Value)> {
    let settled_by = Instant::now() + Duration::from_secs(600);
    let mut same = 0;
    let mut last = None;
    loop {
        let frame = top_json(kubeconfig)?;
        let counts = fleet_counts(&frame);
        let quiet = counts[0].is_some_and(|n| n > 0) && counts[1] == Some(0) && counts[4] == Some(0);
        same = if quiet && last == Some(counts) { same + 1 } else { 0 };
        last = Some(counts);
        if same >= 2 {
            break;
        }
        anyhow::ensure!(Instant::now() < settled_by, "the served fleet did not settle within 10 minutes: {counts:?}");
        std::thread::sleep(Duration::from_secs(2));
    }
    let mut starts = Vec::new();
    let mut frame = serde_json::Value::Null;
    for _ in 0..runs {
        let t = Instant::now();
        frame = top_json(kubeconfig)?;
        starts.push(t.elapsed().as_secs_f64());
    }
    Ok((starts, frame))
}

/// Peak RSS of the children waited for so far, in bytes.
fn children_peak_rss() -> u64 {
    // SAFETY: getrusage writes one plain struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN covers the children this process has waited for.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } == 0;
    if ok { (usage.ru_maxrss.max(0) as u64) * 1024 } else { 0 }
}

fn server_of(kubeconfig: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(kubeconfig).context("reading the served kubeconfig")?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: http://"))
        .map(str::to_string)
        .context("no server in the served kubeconfig")
}

/// One `kerf top --json` process's frame.
fn top_json(kubeconfig: &Path) -> anyhow::Result<serde_json::Value> {
    let exe = std::env::current_exe().context("finding the kerf executable")?;
    let out = Command::new(exe)
        .args(["top", "--json", "--kubeconfig"])
        .arg(kubeconfig)
        .stdin(Stdio::null())
        .output()
        .context("running kerf top --json")?;
    anyhow::ensure!(out.status.success(), "kerf top --json failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).context("kerf top --json printed no JSON")
}

/// The redraw measurement: (seconds to the first full frame, per change seconds, frame seconds).
async fn redraws(kubeconfig: &Path, server: &str, changes: usize) -> anyhow::Result<(f64, Vec<f64>, Vec<f64>)> {
    let start = Instant::now();
    let config = crate::controller::client_config(Some(&kubeconfig.to_path_buf()), None).await?;
    let client = kerf_kube::api::client(config).context("cannot build the Kubernetes client")?;
    let mut rx = crate::top::feed::start(&client, &crate::top::feed::Selection::default());
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 50)).context("an off-screen terminal")?;
    let mut fleet = Fleet::default();
    let mut viewer = Viewer::new(Options { sort: "price".parse().map_err(anyhow::Error::msg)?, ..Options::default() });
    while !fleet.complete() {
        let batch = rx.recv().await.context("the watches stopped")?;
        batch.into_iter().for_each(|u| fleet.apply(u));
    }
    let names = crate::top::paint(&mut terminal, &fleet, &mut viewer)?;
    let first = start.elapsed().as_secs_f64();
    anyhow::ensure!(!fleet.failing.contains_key(&Kind::Pod), "the pod watch failed");
    let mut latencies = Vec::new();
    let mut frames = Vec::new();
    for name in names.iter().take(changes) {
        let t = Instant::now();
        let (code, body) = http(
            server,
            "PATCH",
            &format!("/api/v1/nodes/{name}"),
            Some(("application/merge-patch+json", r#"{"spec":{"unschedulable":true}}"#)),
        )?;
        anyhow::ensure!(code == 200, "cordoning {name}: {code} {body}");
        while !fleet.nodes.get(name).is_some_and(|n| n.unschedulable) {
            let batch = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .with_context(|| format!("{name} was not seen cordoned within 30 s"))?
                .context("the watches stopped")?;
            batch.into_iter().for_each(|u| fleet.apply(u));
        }
        let drawn = Instant::now();
        crate::top::paint(&mut terminal, &fleet, &mut viewer)?;
        frames.push(drawn.elapsed().as_secs_f64());
        latencies.push(t.elapsed().as_secs_f64());
    }
    Ok((first, latencies, frames))
}

pub fn run(a: TopArgs) -> anyhow::Result<ExitCode> {
    let bad = |m: String| anyhow::Error::new(crate::BadInput(m));
    if a.nodes == 0 || a.pods == 0 || a.runs == 0 {
        return Err(bad("--nodes, --pods and --runs must be at least 1".to_string()));
    }
    if let Some(path) = &a.scenario {
        anyhow::ensure!(path.is_file(), crate::BadInput(format!("--scenario {}: no such file", path.display())));
    }
    let dir = std::env::temp_dir().join(format!("kerf-bench-top-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (served, kubeconfig) = match &a.scenario {
        Some(path) => serve_scenario(&dir, path)?,
        None => {
            let scenario = dir.join("cluster.yaml");
            std::fs::write(&scenario, cluster_scenario(a.nodes, a.pods, 0.5)?).context("cannot write the cluster")?;
            serve(&dir, &scenario, &last_pod(a.pods))?
        }
    };
    let server = server_of(&kubeconfig)?;

    // Until every pod runs (the served kubelets start them after the cluster is loaded, or the
    // controllers launch the fleet) the server is busy; the start is timed on a settled cluster.
    let (starts, frame) = match a.scenario {
        Some(_) => settled_starts(&kubeconfig, a.runs)?,
        None => {
            let settled_by = Instant::now() + Duration::from_secs(300);
            loop {
                let frame = top_json(&kubeconfig)?;
                let c = &frame["cluster"];
                if c["podsRunning"].as_u64() == Some(a.pods as u64) {
                    break;
                }
                anyhow::ensure!(Instant::now() < settled_by, "the served pods did not all run within 5 minutes: {c}");
                std::thread::sleep(Duration::from_secs(1));
            }
            settled_starts(&kubeconfig, a.runs)?
        }
    };
    let start_seconds = median(starts.clone());
    // Every run so far counts: the peak is the largest of them.
    let rss = children_peak_rss();
    let (nodes, pods) = (frame["cluster"]["nodes"].as_u64(), frame["cluster"]["podsRunning"].as_u64());
    if a.scenario.is_none() {
        anyhow::ensure!(nodes == Some(a.nodes as u64), "kerf top showed {nodes:?} nodes, not {}", a.nodes);
    }
    let (nodes, pods) = (nodes.unwrap_or(0), pods.unwrap_or(0));

    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    let (first, latencies, frames) = runtime.block_on(redraws(&kubeconfig, &server, a.changes))?;
    drop(served);
    let _ = std::fs::remove_dir_all(&dir);
    let max = latencies.iter().copied().fold(0.0, f64::max);
    let (redraw, frame_s) = (median(latencies.clone()), median(frames));
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "scenario": a.scenario.as_ref().map(|p| p.display().to_string()),
                "nodes": nodes, "podsRunning": pods, "podsPending": frame["cluster"]["podsPending"],
                "startSeconds": start_seconds, "startRuns": starts, "peakRssBytes": rss,
                "firstFrameSeconds": first,
                "redrawSeconds": redraw, "redrawMaxSeconds": max, "redrawRuns": latencies,
                "frameSeconds": frame_s,
            })
        );
    } else {
        println!(
            "kerf top --json of {nodes} nodes / {pods} running pods served by kerf serve: {start_seconds:.2} s (median of {}), peak RSS {:.1} MB",
            starts.len(),
            rss as f64 / 1e6
        );
        println!(
            "screen: first frame {first:.2} s; a cordon drawn {:.0} ms after its write (median of {}, max {:.0} ms); a frame {:.0} ms",
            redraw * 1e3,
            latencies.len(),
            max * 1e3,
            frame_s * 1e3
        );
    }
    Ok(ExitCode::SUCCESS)
}
