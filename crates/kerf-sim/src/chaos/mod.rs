//! `kerf bench chaos`: seeded random runs of the simulator with the controllers crashing and
//! the cloud and the API failing, checked against kerf's promises (see [`invariants`]).
//!
//! A run (one seed) generates a workload ([`workload`]), applies it, then takes random actions
//! with random waits between them. Time passes in short slices; before a slice a crash may be
//! armed (it goes off after a random number of calls, in the middle of whatever the
//! controllers are doing) and a watch outage may start. After a slice in which the process
//! died, its state is thrown away and a new one is built from the cluster and the same cloud,
//! as a restarted `kerf controller` would be. Faults come from [`faults`]' decorators around
//! the cloud provider and the cluster API; [`hooks`] plugs the outages and the faulty API into
//! the driver's loop. At the end faults stop, the cluster settles, and the state checks run a
//! last time, with every pod expected to run.
//!
//! Everything is drawn from the run's seed, so `kerf bench chaos --iterations 1 --seed S`
//! replays run S exactly.

pub mod faults;
mod hooks;
pub mod invariants;
pub mod workload;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kerf_api::cluster::{Object, WatchEvent};
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};
use kerf_cloud::{ManualClock, Timestamp};
use kerf_controller::{Manager, Options};

use crate::driver::{SimError, Simulation};
use crate::sim_cloud::SimCloud;
use kerf_api::seeded::SplitMix64;
use kerf_apiserver::SimCluster;

pub use faults::{Fault, Faults, FaultyApi, FaultyCloud};
use hooks::Hooks;
pub use invariants::{Kind, Monitor, Violation};

/// Random actions per run.
const ACTIONS: usize = 12;
/// Time passes in slices of at most this long (crashes and outages start between slices).
const SLICE: Duration = Duration::from_secs(20);
/// How long the cluster settles, without faults, at the end of a run (longer than every
/// window of the state checks).
const FINAL_SETTLE: Duration = Duration::from_secs(40 * 60);
/// After it, how many more minutes pods still moving (a node that just expired) get to run.
const SETTLE_PODS_MINUTES: usize = 15;

fn relist<K: Object>(cluster: &SimCluster, out: &mut Vec<WatchEvent>) {
    out.extend(cluster.list_objs::<K>().into_iter().map(|o| WatchEvent::Applied(o.into_any())));
}

/// Every object the controllers watch, as a new process's first list delivers it.
fn full_list(cluster: &SimCluster) -> Vec<WatchEvent> {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::node::v1::RuntimeClass;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use k8s_openapi::api::storage::v1::StorageClass;
    let mut out = Vec::new();
    relist::<EC2NodeClass>(cluster, &mut out);
    relist::<NodePool>(cluster, &mut out);
    relist::<NodeClaim>(cluster, &mut out);
    relist::<Node>(cluster, &mut out);
    relist::<DaemonSet>(cluster, &mut out);
    relist::<PodDisruptionBudget>(cluster, &mut out);
    relist::<PersistentVolumeClaim>(cluster, &mut out);
    relist::<PersistentVolume>(cluster, &mut out);
    relist::<StorageClass>(cluster, &mut out);
    relist::<Namespace>(cluster, &mut out);
    relist::<PriorityClass>(cluster, &mut out);
    relist::<RuntimeClass>(cluster, &mut out);
    relist::<k8s_openapi::api::core::v1::PodTemplate>(cluster, &mut out);
    relist::<kerf_api::CapacityBuffer>(cluster, &mut out);
    relist::<kerf_api::ProvisioningRequest>(cluster, &mut out);
    relist::<kerf_api::CapacityQuota>(cluster, &mut out);
    relist::<kerf_api::NodeOverlay>(cluster, &mut out);
    // Pods as the controllers keep them (the store's own form unless it is served).
    relist::<kerf_api::SlimPod>(cluster, &mut out);
    out
}

impl<P: SimCloud + Clone> Simulation<P> {
    /// A controller crash: the process's state is dropped and a new one (`Manager::new`, then
    /// the first list of every kind) takes over the same cluster and cloud. The NodeOverlays
    /// the provider priced types with were the old process's: the new one starts without any
    /// until its overlay reconciler hands over those it lists.
    pub fn restart_controllers(&mut self, seed: u64) {
        let options = Options { seed, ..self.manager.options().clone() };
        let cloud = self.manager.cloud().clone();
        cloud.set_node_overlays(Arc::new(kerf_api::overlay::NodeOverlays::default()));
        self.manager = Manager::new(cloud, options);
        self.hooks.controllers_restarted();
        for ev in full_list(&self.cluster) {
            self.manager.observe(&ev);
        }
        self.manager_wake = None;
        self.kick = true;
    }
}

/// One run's outcome.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub seed: u64,
    pub crashes: u64,
    pub faults: BTreeMap<Fault, u64>,
    pub faults_injected: u64,
    pub violations: Vec<Violation>,
    /// The longest an instance ran without a NodeClaim, and a NodeClaim named a gone instance.
    pub max_leak: Duration,
    pub max_orphan: Duration,
    /// The run could not go on (the simulation stopped).
    pub error: Option<String>,
}

/// Runs seed `seed` with faults at `fault_rate`.
pub fn run(seed: u64, fault_rate: f64) -> RunOutcome {
    let mut outcome = RunOutcome { seed, ..RunOutcome::default() };
    let faults = Arc::new(Faults::new(kerf_api::seeded::mix64(seed ^ 0xfa17), fault_rate));
    match run_with(seed, &faults, &mut outcome) {
        Ok(()) => {}
        Err(e) => outcome.error = Some(e),
    }
    outcome.faults = faults.injected();
    outcome.crashes = outcome.faults.remove(&Fault::Crash).unwrap_or(0);
    outcome.faults_injected = faults.total_injected();
    outcome
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond() + d.as_millis() as i64).unwrap_or(t)
}

fn run_with(seed: u64, faults: &Arc<Faults>, outcome: &mut RunOutcome) -> Result<(), String> {
    let w = workload::generate(seed).map_err(|e| e.to_string())?;
    let clock = ManualClock::new();
    let provider = kerf_cloud::sim::SimProvider::new(w.scenario.cloud.clone(), Arc::new(clock.clone()))
        .map_err(|e| format!("cloud.{}: {}", e.field, e.problem))?;
    let region = provider.region().to_string();
    let cloud = FaultyCloud::new(Arc::new(provider), Arc::clone(faults));
    let mut sim = Simulation::for_scenario(&w.scenario, cloud, clock, &region);
    let monitor = Arc::new(Monitor::new(0));
    sim.set_hooks(Box::new(Hooks::new(Arc::clone(faults), Arc::clone(&monitor))));
    let mut rng = SplitMix64::new(kerf_api::seeded::mix64(seed));
    let mut restarts = 0u64;
    // At least one crash per run, at a random slice; more at random.
    let mut crash_slices: Vec<usize> = vec![rng.below(ACTIONS * 4)];
    for _ in 0..rng.below(3) {
        crash_slices.push(rng.below(ACTIONS * 6));
    }
    let fail = |e: SimError| e.to_string();
    let check = |sim: &mut Simulation<FaultyCloud<kerf_cloud::sim::SimProvider>>, restarts: &mut u64| {
        if faults.crashed() {
            *restarts += 1;
            faults.restarted();
            sim.restart_controllers(kerf_api::seeded::mix64(seed.wrapping_add(*restarts)));
        }
        let instances: Vec<invariants::CloudInstance> = sim
            .manager()
            .cloud()
            .inner()
            .instances()
            .into_iter()
            .map(|i| invariants::CloudInstance {
                provider_id: i.provider_id,
                instance_type: i.instance_type.name.clone(),
                node_claim: i.node_claim,
                launched_at: i.launched_at,
                terminated: i.terminated,
            })
            .collect();
        monitor.check_state(sim.cluster(), &instances, faults.as_ref(), sim.now());
    };
    let first = w.scenario.steps.first().cloned().ok_or("the generated scenario has no steps")?;
    monitor.set_step(0);
    sim.step(0, &first).map_err(fail)?;
    let mut slice = 0usize;
    let mut daemonset_applied = false;
    for i in 1..=ACTIONS {
        monitor.set_step(i);
        if let Some(step) = workload::action(&mut rng, &w, sim.world(), &mut daemonset_applied, i) {
            match sim.step(i, &step) {
                Ok(()) => {}
                // An action the cluster refused (a node gone in the meantime): nothing happened.
                Err(SimError::Step { .. }) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        let end = after(sim.now(), Duration::from_secs(30 + rng.below(240) as u64));
        while sim.now() < end {
            if crash_slices.contains(&slice) {
                faults.arm_crash(rng.below(40) as u32);
            }
            if rng.below(100) < 5 {
                faults.watch_outage(after(sim.now(), Duration::from_secs(5 + rng.below(60) as u64)));
            }
            slice += 1;
            let until = after(sim.now(), SLICE).min(end);
            sim.settle(until).map_err(fail)?;
            check(&mut sim, &mut restarts);
        }
    }
    // Make sure the process crashed at least once: a crash armed but not yet gone off goes off
    // at the next call.
    if restarts == 0 {
        faults.arm_crash(0);
        let until = after(sim.now(), SLICE);
        sim.settle(until).map_err(fail)?;
        check(&mut sim, &mut restarts);
    }
    monitor.set_step(ACTIONS + 1);
    faults.set_enabled(false);
    monitor.faults_stopped(sim.now());
    let end = after(sim.now(), FINAL_SETTLE);
    while sim.now() < end {
        let until = after(sim.now(), Duration::from_secs(60)).min(end);
        sim.settle(until).map_err(fail)?;
        check(&mut sim, &mut restarts);
    }
    // Nodes keep expiring: pods moved by the last disruptions get a few minutes to run again.
    for _ in 0..SETTLE_PODS_MINUTES {
        if invariants::pods_not_running(sim.cluster()).is_empty() {
            break;
        }
        let until = after(sim.now(), Duration::from_secs(60));
        sim.settle(until).map_err(fail)?;
        check(&mut sim, &mut restarts);
    }
    monitor.check_pods(sim.cluster(), sim.now());
    outcome.violations = monitor.violations();
    (outcome.max_leak, outcome.max_orphan) = monitor.max_leak_and_orphan();
    Ok(())
}

/// The totals of many runs.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub iterations: u64,
    pub crashes: u64,
    pub faults_injected: u64,
    pub faults: BTreeMap<Fault, u64>,
    pub violations: BTreeMap<Kind, u64>,
    /// Runs that stopped with an error.
    pub errors: u64,
    /// The longest leak and orphan over all runs, and the seeds they were in.
    pub max_leak: (Duration, u64),
    pub max_orphan: (Duration, u64),
    /// The first few failing runs: (seed, first violation or error).
    pub failures: Vec<(u64, String)>,
}

impl Summary {
    pub fn add(&mut self, o: &RunOutcome) {
        self.iterations += 1;
        self.crashes += o.crashes;
        self.faults_injected += o.faults_injected;
        for (f, n) in &o.faults {
            *self.faults.entry(*f).or_default() += n;
        }
        for v in &o.violations {
            *self.violations.entry(v.kind).or_default() += 1;
        }
        if o.max_leak > self.max_leak.0 {
            self.max_leak = (o.max_leak, o.seed);
        }
        if o.max_orphan > self.max_orphan.0 {
            self.max_orphan = (o.max_orphan, o.seed);
        }
        let first = match (&o.error, o.violations.first()) {
            (Some(e), _) => Some(format!("the run stopped: {e}")),
            (None, Some(v)) => {
                Some(format!("{} at step {} ({}s): {}", v.kind.json_key(), v.step, v.at_seconds, v.detail))
            }
            _ => None,
        };
        if o.error.is_some() {
            self.errors += 1;
        }
        if let Some(f) = first
            && self.failures.len() < 20
        {
            self.failures.push((o.seed, f));
        }
    }

    pub fn total_violations(&self) -> u64 {
        self.violations.values().sum::<u64>() + self.errors
    }
}
