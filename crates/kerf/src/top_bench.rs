//! `kerf bench top --nodes N --pods P [--changes C] [--json]`: `kerf top` against a served
//! cluster of N nodes and P pods (the `kerf bench snapshot` cluster, `kerf serve --controllers
//! none`). Measures, for the figures of docs/performance.md:
//! - start: a `kerf top --json` process from its start to its exit (every kind listed and
//!   watched, one frame computed and printed) once every served pod runs, and its peak RSS;
//! - redraw: in this process, the watches and the screen of `kerf top` (drawn on an off-screen
//!   terminal of 200×50): C nodes cordoned one after the other through the API, each timed from
//!   the write to the drawn frame that shows it; and the time to draw a frame.

use std::path::Path;
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
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
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
    if a.nodes == 0 || a.pods == 0 {
        return Err(bad("--nodes and --pods must be at least 1".to_string()));
    }
    let dir = std::env::temp_dir().join(format!("kerf-bench-top-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let scenario = dir.join("cluster.yaml");
    std::fs::write(&scenario, cluster_scenario(a.nodes, a.pods, 0.5)?).context("cannot write the cluster")?;
    let (served, kubeconfig) = serve(&dir, &scenario, &last_pod(a.pods))?;
    let server = server_of(&kubeconfig)?;

    // Until every pod runs (the served kubelets start them after the cluster is loaded) the
    // server is busy; the start is timed on a settled cluster.
    let settled_by = Instant::now() + Duration::from_secs(300);
    let (start_seconds, frame) = loop {
        let t = Instant::now();
        let frame = top_json(&kubeconfig)?;
        let start_seconds = t.elapsed().as_secs_f64();
        let c = &frame["cluster"];
        if c["podsRunning"].as_u64() == Some(a.pods as u64) {
            break (start_seconds, frame);
        }
        anyhow::ensure!(Instant::now() < settled_by, "the served pods did not all run within 5 minutes: {c}");
        std::thread::sleep(Duration::from_secs(1));
    };
    // Every run so far counts: the peak is the largest of them.
    let rss = children_peak_rss();
    let nodes = frame["cluster"]["nodes"].as_u64();
    anyhow::ensure!(nodes == Some(a.nodes as u64), "kerf top showed {nodes:?} nodes, not {}", a.nodes);

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
                "nodes": a.nodes, "pods": a.pods,
                "startSeconds": start_seconds, "peakRssBytes": rss,
                "firstFrameSeconds": first,
                "redrawSeconds": redraw, "redrawMaxSeconds": max, "redrawRuns": latencies,
                "frameSeconds": frame_s,
            })
        );
    } else {
        println!(
            "kerf top --json of {} nodes / {} pods served by kerf serve: {start_seconds:.2} s, peak RSS {:.1} MB",
            a.nodes,
            a.pods,
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
