//! `kerf serve [SCENARIO] [--listen ADDR] [--kubeconfig FILE] [--controllers embedded|none]
//! [--speed N]`: the simulated cluster served as a Kubernetes API. The simulator's driver runs
//! on its own thread with virtual time following real time × N (the same `step` / `settle` code
//! `kerf simulate` runs); the HTTP server shares its store.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_cloud::{Clock, ManualClock, Timestamp};
use kerf_sim::scenario::{Scenario, Step};
use kerf_sim::{SimError, Simulation};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Controllers {
    /// kerf's controllers run inside the server.
    Embedded,
    /// No controllers: a separately started `kerf controller` does their work.
    None,
}

#[derive(clap::Args)]
pub struct Args {
    /// A scenario to set up and run (cloud, nodes, steps); without one, an empty cluster.
    pub scenario: Option<PathBuf>,
    /// Where to listen (plain HTTP; keep it on loopback). Port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub listen: String,
    /// Write a kubeconfig for kubectl and kube-rs clients to this file.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "embedded")]
    pub controllers: Controllers,
    /// Virtual seconds per real second.
    #[arg(long, default_value = "1")]
    pub speed: f64,
}

/// Changes an HTTP watch can resume from before it must relist.
const HISTORY: usize = 100_000;
/// How often the driver catches virtual time up with real time.
const TICK: Duration = Duration::from_millis(50);

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kerf\n  cluster:\n    server: {server}\ncontexts:\n- name: kerf\n  context:\n    cluster: kerf\n    user: kerf\n    namespace: default\ncurrent-context: kerf\nusers:\n- name: kerf\n  user: {{}}\n"
    )
}

fn bad(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(crate::BadInput(e.to_string()))
}

pub fn run(args: Args, clock: ManualClock) -> anyhow::Result<ExitCode> {
    if !(args.speed.is_finite() && args.speed > 0.0) {
        return Err(bad(format!("--speed: must be a positive number, got {}", args.speed)));
    }
    let scenario = match &args.scenario {
        Some(p) => kerf_sim::scenario::load(p).map_err(bad)?,
        None => kerf_sim::scenario::parse(Path::new("<none>"), "name: serve\n").map_err(bad)?,
    };
    // Virtual time starts at the real current time, so the ages clients compute from the
    // wall clock (kubectl describe) agree with the server's.
    clock.set(kerf_cloud::SystemClock.now());
    let provider = kerf_cloud::sim::SimProvider::new(scenario.cloud.clone(), Arc::new(clock.clone()))
        .map_err(|e| bad(format!("cloud.{}: {}", e.field, e.problem)))?;
    let region = provider.region().to_string();
    let mut sim = Simulation::for_scenario(&scenario, provider, clock, &region);
    sim.set_controllers(args.controllers == Controllers::Embedded);
    let cluster = sim.shared_cluster();
    cluster.enable_serving(HISTORY);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let obj = Namespace {
            metadata: ObjectMeta { name: Some(ns.to_string()), ..Default::default() },
            ..Default::default()
        };
        cluster.create_obj(obj).map_err(|e| anyhow::anyhow!("namespace {ns}: {e}"))?;
    }
    // The `kubernetes` Service every cluster has, at the first IP of the service range.
    let services = kerf_apiserver::kinds::by_kind("Service").context("the Service kind")?;
    let api_service = serde_json::json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]}});
    kerf_apiserver::rest::Rest::new(Arc::clone(&cluster))
        .create(services, Some("default"), api_service)
        .map_err(|e| anyhow::anyhow!("service kubernetes: {e}"))?;
    // kerf's CRDs, as `kerf crds` installs them in a cluster (`kubectl get crds` lists them).
    let crds = kerf_apiserver::kinds::by_kind(kerf_apiserver::custom::CRD_KIND).context("the CRD kind")?;
    let rest = kerf_apiserver::rest::Rest::new(Arc::clone(&cluster));
    for def in kerf_api::crd::ALL {
        rest.create(crds, None, def.custom_resource_definition())
            .map_err(|e| anyhow::anyhow!("CustomResourceDefinition {}: {e}", def.name()))?;
    }

    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the runtime")?;
    let listener = runtime
        .block_on(kerf_apiserver::http::bind(&args.listen))
        .map_err(|e| bad(format!("--listen {}: {e}", args.listen)))?;
    let addr = listener.local_addr().context("listening address")?;
    let server = format!("http://{addr}");
    if let Some(path) = &args.kubeconfig {
        std::fs::write(path, kubeconfig(&server)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    eprintln!("kerf serve: the {} cluster is served on {server}", scenario.name);

    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("driver".to_string())
            .spawn(move || drive(sim, &scenario, args.speed, &stop))
            .context("cannot start the driver")?
    };
    let (tx, rx) = tokio::sync::watch::channel(false);
    let rest = kerf_apiserver::rest::Rest::new(cluster);
    let driver_stopped = {
        let stop = Arc::clone(&stop);
        async move {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let served = runtime.block_on(async {
        let server = kerf_apiserver::http::serve(listener, rest, rx);
        tokio::pin!(server);
        tokio::select! {
            r = &mut server => r,
            _ = kerf_apiserver::http::interrupted() => { let _ = tx.send(true); server.await }
            _ = driver_stopped => { let _ = tx.send(true); server.await }
        }
    });
    stop.store(true, Ordering::SeqCst);
    let driven = driver.join().map_err(|_| anyhow::anyhow!("the driver thread panicked"))?;
    served.context("serving")?;
    driven.map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("kerf serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// Virtual time that follows real time at `speed` from the moment driving starts.
struct Pace {
    real0: Instant,
    virt0: Timestamp,
    speed: f64,
}

impl Pace {
    fn now(&self) -> Timestamp {
        let ms = (self.real0.elapsed().as_secs_f64() * 1000.0 * self.speed) as i64;
        Timestamp::from_millisecond(self.virt0.as_millisecond().saturating_add(ms)).unwrap_or(self.virt0)
    }
}

/// Runs the scenario's steps, a `wait` lasting its virtual time at the given speed, then keeps
/// the cluster running until `stop`. A failure stops the server too.
fn drive(
    mut sim: Simulation<kerf_cloud::sim::SimProvider>,
    scenario: &Scenario,
    speed: f64,
    stop: &AtomicBool,
) -> Result<(), SimError> {
    let result = drive_inner(&mut sim, scenario, speed, stop);
    if let Err(e) = &result {
        eprintln!("kerf serve: the simulation failed: {e}");
    }
    stop.store(true, Ordering::SeqCst);
    // The process ends right after; tearing the cluster down object by object would only cost time.
    std::mem::forget(sim);
    result
}

fn drive_inner(
    sim: &mut Simulation<kerf_cloud::sim::SimProvider>,
    scenario: &Scenario,
    speed: f64,
    stop: &AtomicBool,
) -> Result<(), SimError> {
    let pace = Pace { real0: Instant::now(), virt0: sim.now(), speed };
    sim.add_nodes(&scenario.nodes)?;
    sim.settle(sim.now())?;
    for (i, step) in scenario.steps.iter().enumerate() {
        match step {
            Step::Wait(d) => {
                let until =
                    Timestamp::from_millisecond(sim.now().as_millisecond().saturating_add(d.as_millis() as i64))
                        .unwrap_or(sim.now());
                follow(sim, &pace, stop, Some(until))?;
            }
            other => sim.step(i, other)?,
        }
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
    }
    follow(sim, &pace, stop, None)
}

/// Settles the cluster at the paced virtual time, tick by tick, up to `until` (or until `stop`).
fn follow(
    sim: &mut Simulation<kerf_cloud::sim::SimProvider>,
    pace: &Pace,
    stop: &AtomicBool,
    until: Option<Timestamp>,
) -> Result<(), SimError> {
    loop {
        let target = match until {
            Some(u) => pace.now().min(u),
            None => pace.now(),
        };
        sim.settle(target.max(sim.now()))?;
        if until.is_some_and(|u| sim.now() >= u) || stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        std::thread::sleep(TICK);
    }
}
