//! The driver: runs kerf's controllers and the stand-ins round by round on a virtual clock.
//!
//! A round delivers the watch events produced since the last one (to the controllers and to the
//! stand-ins' index; the node lifecycle taints nodes that are not Ready and the kubelet starts
//! pods bound to Ready nodes), runs the controllers when something changed or they asked to be
//! woken, then the workload controllers, kubelet and kube-scheduler. When a round changes
//! nothing, time jumps to the earliest wake-up anyone asked for, never past the end of the
//! current `wait`.

use kerf_api::MetaView;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kerf_api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodePool, ResourceList, SlimPod};
use kerf_cloud::{Clock, CloudProvider, ManualClock, Timestamp, block_on};
use kerf_controller::{AnyObject, ApiError, ControllerError, Manager, Object, Options, WatchEvent};
use kerf_scheduling::pod_requests;

use crate::cluster::SimCluster;
use crate::daemonsets::DaemonSets;
use crate::deployments;
use crate::kube_scheduler::KubeScheduler;
use crate::kubelet::{self, Instance, Kubelet};
use crate::node_lifecycle;
use crate::owned_pods::OwnedPods;
use crate::report::{Disruption, NodeReport, PodReport, Report, Sample, Seconds, Summary, dollars};
use crate::scenario::{ManifestObject, ObjectRef, Scenario, ScenarioNode, Step};
use crate::workloads::Workloads;
use crate::world::{Changes, World, node_ready};
use kerf_api::cluster::Patch;
use kerf_apiserver::rest::Part;

/// What the driver needs from the simulated cloud beyond [`CloudProvider`].
pub trait SimCloud: CloudProvider {
    /// Every instance launched so far (terminated ones included), in launch order.
    fn sim_instances(&self) -> Vec<Instance>;
    /// Sends a spot interruption warning for the instance; the provider's reason when it cannot
    /// (no such instance, not a spot instance).
    fn sim_interrupt(&self, provider_id: &str) -> Result<(), String>;
    /// Makes an applied EC2NodeClass the node class claims launch with.
    fn sim_register_node_class(&self, _node_class: &EC2NodeClass) {}
    /// Takes over an instance running before the simulation began (a node of a cluster
    /// snapshot); the reason when this cloud cannot.
    fn sim_adopt(&self, existing: &kerf_cloud::sim::ExistingInstance) -> Result<(), String> {
        Err(format!("this cloud cannot take over the running instance {}", existing.provider_id))
    }
    /// Instances whose price the cloud does not know (provider ID → why); they count $0/h.
    fn sim_unpriced(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// The summed hourly price of the instances not terminated, in launch order.
    fn sim_fleet_price(&self) -> f64 {
        self.sim_instances().iter().filter(|i| !i.terminated).map(|i| i.price).sum()
    }
}

impl SimCloud for kerf_cloud::sim::SimProvider {
    fn sim_instances(&self) -> Vec<Instance> {
        self.instances()
            .into_iter()
            .map(|i| Instance {
                terminates_at: i
                    .interrupted_at
                    .filter(|_| !i.terminated)
                    .map(|t| after(t, kerf_cloud::sim::provider::SPOT_RECLAIM_AFTER)),
                provider_id: i.provider_id,
                node_name: i.node_name,
                instance_type: i.instance_type.name.clone(),
                zone: i.zone,
                capacity_type: i.capacity_type,
                price: i.price,
                labels: i.labels,
                launched_at: i.launched_at,
                ready_at: i.ready_at,
                terminated: i.terminated,
                terminated_at: i.terminated_at,
            })
            .collect()
    }

    fn sim_interrupt(&self, provider_id: &str) -> Result<(), String> {
        self.interrupt(provider_id).map(|_| ()).map_err(|e| e.to_string())
    }

    fn sim_register_node_class(&self, node_class: &EC2NodeClass) {
        self.register_node_class(node_class);
    }

    fn sim_fleet_price(&self) -> f64 {
        self.running_price()
    }

    fn sim_adopt(&self, existing: &kerf_cloud::sim::ExistingInstance) -> Result<(), String> {
        self.adopt(existing).map(|_| ()).map_err(|e| e.to_string())
    }

    fn sim_unpriced(&self) -> BTreeMap<String, String> {
        self.unpriced()
    }
}

/// Runs a loaded scenario to its end and returns the report.
pub fn run_scenario(scenario: &Scenario) -> Result<Report, SimError> {
    simulate(scenario).map(|(report, _)| report)
}

/// Runs a loaded scenario to its end; returns the report and the finished simulation (for
/// callers that want to inspect it, or to skip tearing it down when the process exits anyway).
pub fn simulate(scenario: &Scenario) -> Result<(Report, Simulation<kerf_cloud::sim::SimProvider>), SimError> {
    simulate_on(scenario, ManualClock::new())
}

/// The simulation of a scenario on its simulated cloud, on `clock`; its steps are not run yet.
pub fn simulation_for(
    scenario: &Scenario,
    clock: ManualClock,
) -> Result<Simulation<kerf_cloud::sim::SimProvider>, SimError> {
    let provider = kerf_cloud::sim::SimProvider::new(scenario.cloud.clone(), std::sync::Arc::new(clock.clone()))
        .map_err(|e| SimError::Step { step: 0, what: format!("cloud.{}", e.field), problem: e.problem })?;
    let region = provider.region().to_string();
    Ok(Simulation::for_scenario(scenario, provider, clock, &region))
}

/// [`simulate`] on a given virtual clock (e.g. one the caller's logs read their timestamps from).
pub fn simulate_on(
    scenario: &Scenario,
    clock: ManualClock,
) -> Result<(Report, Simulation<kerf_cloud::sim::SimProvider>), SimError> {
    let mut sim = simulation_for(scenario, clock)?;
    sim.run(scenario)?;
    let report = sim.report();
    Ok((report, sim))
}

/// Rounds at one instant before the driver decides the controllers cannot settle.
const MAX_ROUNDS_PER_INSTANT: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("controllers failed at {at}s: {source}")]
    Controller { at: f64, source: ControllerError },
    #[error("step {step} ({what}): {problem}")]
    Step { step: usize, what: String, problem: String },
    #[error("the cluster did not settle at {at}s after {rounds} rounds")]
    Stuck { at: f64, rounds: usize },
}

pub struct Simulation<P: SimCloud> {
    name: String,
    clock: ManualClock,
    pub(crate) cluster: Arc<SimCluster>,
    /// Run kerf's controllers (off when a separately started controller does their work).
    controllers: bool,
    pub(crate) manager: Manager<P>,
    world: World,
    scheduler: KubeScheduler,
    kubelet: Kubelet,
    workloads: Workloads,
    daemonsets: DaemonSets,
    owned_pods: OwnedPods,
    pub(crate) manager_wake: Option<Timestamp>,
    kubelet_wake: Option<Timestamp>,
    /// Force a controller pass on the next round (a step changed something directly).
    pub(crate) kick: bool,
    deferred_scheduling: bool,
    /// Run the kubelet on the next round whatever happened (a step touched instances).
    kick_kubelet: bool,
    /// (computed at, fleet $/h, stale).
    price_cache: Option<(Timestamp, f64, bool)>,
    timeline: Vec<Sample>,
    cost: f64,
    disruptions: Vec<Disruption>,
    /// Provider IDs of the instances present at t=0 (not launched by the run).
    adopted: std::collections::BTreeSet<String>,
    /// Wall-clock time less virtual time (the scenario's `start`), in milliseconds.
    wall_clock_offset_ms: i64,
    /// Faults, crashes and invariant checks of a `kerf bench chaos` run.
    pub(crate) chaos: Option<crate::chaos::Hooks>,
}

fn secs_between(a: Timestamp, b: Timestamp) -> f64 {
    (b.as_millisecond() - a.as_millisecond()) as f64 / 1000.0
}

fn after(t: Timestamp, d: std::time::Duration) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond().saturating_add(d.as_millis() as i64)).unwrap_or(t)
}

impl<P: SimCloud> Simulation<P> {
    pub fn new(name: &str, cloud: P, clock: ManualClock, region: &str, seed: u64) -> Self {
        Self::with_options(name, cloud, clock, region, Options { seed, ..Options::default() })
    }

    /// A simulation whose controllers run with `options` (their seed also seeds the cluster).
    /// A simulation with the scenario's settings (controller options, the kube-scheduler's
    /// handling of nominations); its steps are not run yet.
    pub fn for_scenario(scenario: &Scenario, cloud: P, clock: ManualClock, region: &str) -> Self {
        let defaults = Options::default();
        let options = Options {
            seed: 0,
            batch_idle: scenario.settings.batch_idle_duration.unwrap_or(defaults.batch_idle),
            batch_max: scenario.settings.batch_max_duration.unwrap_or(defaults.batch_max),
            spot_to_spot_consolidation: scenario.settings.spot_to_spot_consolidation,
            preference_policy: scenario.settings.preference_policy.unwrap_or(defaults.preference_policy),
            wall_clock_offset_ms: scenario.start.map_or(0, |t| t.as_millisecond() - ManualClock::EPOCH_MILLIS),
            ..defaults
        };
        let mut sim = Self::with_options(&scenario.name, cloud, clock, region, options);
        sim.set_honour_nominations(scenario.settings.nominated_node_name.unwrap_or(true));
        sim
    }

    pub fn with_options(name: &str, cloud: P, clock: ManualClock, region: &str, options: Options) -> Self {
        let cluster = Arc::new(SimCluster::new(clock.clone(), options.seed ^ 0x5eed));
        // New Nodes that are not Ready are tainted not-ready; the node lifecycle stand-in takes
        // the taint off once they are.
        cluster.taint_nodes_by_condition();
        // Every reader of the simulated cluster's pods reads them slim; serving them (`kerf
        // serve`) makes them whole again.
        cluster.keep_pods_slim();
        // Deployments are stored as JSON; the Deployment controller stand-in follows them.
        cluster.follow_dynamic(deployments::DEPLOYMENT);
        let wall_clock_offset_ms = options.wall_clock_offset_ms;
        let manager = Manager::new(cloud, options);
        Simulation {
            name: name.to_string(),
            clock,
            cluster,
            controllers: true,
            manager,
            world: World::default(),
            scheduler: KubeScheduler::default(),
            kubelet: Kubelet::new(region),
            workloads: Workloads::default(),
            daemonsets: DaemonSets::default(),
            owned_pods: OwnedPods::default(),
            manager_wake: None,
            kubelet_wake: None,
            kick: true,
            deferred_scheduling: false,
            kick_kubelet: true,
            price_cache: None,
            timeline: Vec::new(),
            cost: 0.0,
            disruptions: Vec::new(),
            adopted: std::collections::BTreeSet::new(),
            wall_clock_offset_ms,
            chaos: None,
        }
    }

    pub fn cluster(&self) -> &SimCluster {
        &self.cluster
    }

    /// The store, for serving it (`kerf serve`) while the driver runs.
    pub fn shared_cluster(&self) -> Arc<SimCluster> {
        Arc::clone(&self.cluster)
    }

    /// Whether kerf's controllers run inside (default) or are left to a separate process.
    pub fn set_controllers(&mut self, on: bool) {
        self.controllers = on;
        // Turned on: they take a pass on the next round, whatever happened meanwhile.
        self.kick |= on;
    }

    /// Virtual time now.
    /// Whether the simulated kube-scheduler honours pods' `status.nominatedNodeName`
    /// (Kubernetes >= 1.35; the default).
    pub fn set_honour_nominations(&mut self, on: bool) {
        self.scheduler.set_honour_nominations(on);
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn manager(&self) -> &Manager<P> {
        &self.manager
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    fn elapsed(&self) -> f64 {
        self.clock.elapsed_secs()
    }

    /// Creates the nodes present at t=0. A node with a NodeClaim is kerf's: the simulated cloud
    /// takes over its instance, and its claim is created launched, for the NodeClaim lifecycle
    /// to register and initialize as it would after a restart.
    pub fn add_nodes(&mut self, nodes: &[ScenarioNode]) -> Result<(), SimError> {
        let now = self.clock.now();
        for n in nodes {
            let fail = |problem: String| SimError::Step { step: 0, what: format!("nodes: {}", n.name), problem };
            if let (Some(claim), Some(pid)) = (&n.node_claim, &n.provider_id) {
                let label = |k: &str| n.labels.get(k).cloned();
                let existing = kerf_cloud::sim::ExistingInstance {
                    provider_id: pid.clone(),
                    node_name: n.name.clone(),
                    claim: (**claim).clone(),
                    instance_type: label(kerf_api::labels::INSTANCE_TYPE),
                    zone: label(kerf_api::labels::ZONE).unwrap_or_default(),
                    capacity_type: label(kerf_api::labels::CAPACITY_TYPE).unwrap_or_default(),
                    capacity: n.capacity.clone(),
                    allocatable: n.allocatable().clone(),
                    labels: n.labels.clone(),
                };
                self.manager.cloud().sim_adopt(&existing).map_err(fail)?;
                self.kubelet.adopt(pid, &n.name);
                self.adopted.insert(pid.clone());
                self.create_launched_claim(claim, n, pid, now).map_err(|e| fail(e.to_string()))?;
            }
            self.cluster.create_obj(kubelet::scenario_node(n, now)).map_err(|e| fail(e.to_string()))?;
        }
        Ok(())
    }

    /// A node's NodeClaim as the lifecycle leaves it once launched: the termination finalizer,
    /// the node's labels, status with the provider ID and resources, Launched=True.
    fn create_launched_claim(
        &self,
        claim: &NodeClaim,
        n: &ScenarioNode,
        provider_id: &str,
        now: Timestamp,
    ) -> Result<(), ApiError> {
        let mut claim = claim.clone();
        let fs = claim.metadata.finalizers.get_or_insert_with(Vec::new);
        if !fs.iter().any(|f| f == kerf_api::labels::TERMINATION_FINALIZER) {
            fs.push(kerf_api::labels::TERMINATION_FINALIZER.to_string());
        }
        let lbls = claim.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in &n.labels {
            lbls.entry(k.clone()).or_insert_with(|| v.clone());
        }
        claim.metadata.resource_version = None;
        claim.metadata.uid = None;
        // Its age as the snapshot found it (virtual time is wall-clock time less the offset of
        // the scenario's `start`), so expireAfter and consolidation see an old node as old.
        let created = match claim.metadata.creation_timestamp.take() {
            Some(t) => {
                let virtual_ms = t.0.as_millisecond().saturating_sub(self.wall_clock_offset_ms);
                let at = Timestamp::from_millisecond(virtual_ms).unwrap_or(now).min(now);
                self.cluster.create_obj_created_at(claim, at)?
            }
            None => self.cluster.create_obj(claim)?,
        };
        let mut created = Arc::unwrap_or_clone(created);
        let status = created.status.get_or_insert_with(Default::default);
        status.provider_id = Some(provider_id.to_string());
        status.capacity = n.capacity.clone();
        status.allocatable = n.allocatable().clone();
        status.image_id.get_or_insert_with(|| "ami-kerf-sim".to_string());
        kerf_api::shared::set_condition(
            &mut status.conditions,
            kerf_api::Condition {
                type_: kerf_api::nodeclaim::CONDITION_LAUNCHED.to_string(),
                status: "True".to_string(),
                reason: Some("Launched".to_string()),
                message: None,
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
                observed_generation: None,
            },
        );
        self.cluster.update_status_obj(created).map(|_| ())
    }

    /// Runs every step of the scenario, then settles at the final instant.
    pub fn run(&mut self, scenario: &Scenario) -> Result<(), SimError> {
        self.add_nodes(&scenario.nodes)?;
        self.settle(self.clock.now())?;
        for (i, step) in scenario.steps.iter().enumerate() {
            self.step(i, step)?;
        }
        self.settle(self.clock.now())
    }

    pub fn step(&mut self, index: usize, step: &Step) -> Result<(), SimError> {
        let fail = |what: String, problem: String| SimError::Step { step: index, what, problem };
        let now = self.clock.now();
        match step {
            Step::Wait(d) => return self.settle(after(now, *d)),
            Step::Apply(manifests) => {
                for m in manifests {
                    self.apply(&m.object).map_err(|e| fail(format!("apply {}", m.source), e.to_string()))?;
                }
            }
            Step::Scale { target, replicas } => {
                deployments::scale(&self.cluster, target, *replicas)
                    .map_err(|e| fail(format!("scale {}", describe(target)), e))?;
            }
            Step::Rollout(target) => {
                let stamp = now.to_string();
                deployments::restart(&self.cluster, target, &stamp)
                    .map_err(|e| fail(format!("rollout {}", describe(target)), e))?;
            }
            Step::Delete(target) => {
                self.delete(target).map_err(|e| fail(format!("delete {}", describe(target)), e))?;
            }
            Step::Patch { target, merge } => {
                self.patch(target, merge).map_err(|e| fail(format!("patch {}", describe(target)), e))?;
                self.kick = true;
            }
            Step::Interrupt { node } => {
                let pid = self
                    .world
                    .nodes
                    .get(node)
                    .and_then(|n| n.spec.as_ref())
                    .and_then(|s| s.provider_id.clone())
                    .ok_or_else(|| {
                        let names: Vec<&String> = self.world.nodes.keys().collect();
                        fail(
                            format!("interrupt {node}"),
                            format!("no node {node:?} launched by kerf (nodes now: {names:?})"),
                        )
                    })?;
                self.manager.cloud().sim_interrupt(&pid).map_err(|e| fail(format!("interrupt {node}"), e))?;
                // The warning is the disruption: the instance goes whether or not kerf acts on it.
                if let Some(c) = self.world.claim_by_provider.get(&pid) {
                    let labels = self.world.nodes.get(node).and_then(|n| n.metadata.labels.clone()).unwrap_or_default();
                    self.disruptions.push(Disruption {
                        at_seconds: Seconds((now.as_millisecond() - ManualClock::EPOCH_MILLIS) as f64 / 1000.0),
                        terminated_seconds: None,
                        node_claim: c.clone(),
                        node: Some(node.clone()),
                        node_pool: labels.get(kerf_api::labels::NODE_POOL).cloned(),
                        instance_type: labels.get(kerf_api::labels::INSTANCE_TYPE).cloned(),
                        reason: "Interrupted".to_string(),
                        replacements: Vec::new(),
                        detail: "a spot interruption warning was delivered".to_string(),
                    });
                }
                self.kick = true;
                self.kick_kubelet = true;
                if let Some(c) = self.price_cache.as_mut() {
                    c.2 = true;
                }
            }
        }
        self.settle(now)
    }

    fn apply(&mut self, obj: &ManifestObject) -> Result<(), ApiError> {
        match obj {
            ManifestObject::NodePool(o) => upsert::<NodePool>(&self.cluster, (**o).clone()),
            ManifestObject::EC2NodeClass(o) => {
                self.manager.cloud().sim_register_node_class(o);
                upsert::<EC2NodeClass>(&self.cluster, (**o).clone())
            }
            ManifestObject::DaemonSet(o) => upsert::<DaemonSet>(&self.cluster, (**o).clone()),
            ManifestObject::Pod(o) => upsert::<Pod>(&self.cluster, (**o).clone()),
            ManifestObject::PodDisruptionBudget(o) => upsert::<PodDisruptionBudget>(&self.cluster, (**o).clone()),
            ManifestObject::PersistentVolumeClaim(o) => upsert::<PersistentVolumeClaim>(&self.cluster, (**o).clone()),
            ManifestObject::PersistentVolume(o) => upsert::<PersistentVolume>(&self.cluster, (**o).clone()),
            ManifestObject::PriorityClass(o) => upsert::<PriorityClass>(&self.cluster, (**o).clone()),
            ManifestObject::RuntimeClass(o) => upsert::<RuntimeClass>(&self.cluster, (**o).clone()),
            ManifestObject::PodTemplate(o) => upsert::<PodTemplate>(&self.cluster, (**o).clone()),
            ManifestObject::CapacityBuffer(o) => upsert::<CapacityBuffer>(&self.cluster, (**o).clone()),
            ManifestObject::StorageClass(o) => upsert::<StorageClass>(&self.cluster, (**o).clone()),
            ManifestObject::Namespace(o) => upsert::<Namespace>(&self.cluster, (**o).clone()),
            ManifestObject::Deployment(d) => deployments::apply(&self.cluster, d),
        }
    }

    fn delete(&mut self, target: &ObjectRef) -> Result<(), String> {
        let ns = Some(target.namespace.as_str());
        let name = target.name.as_str();
        let r = match target.kind.as_str() {
            "Deployment" => {
                return deployments::delete(&self.cluster, ns, name);
            }
            "NodePool" => self.cluster.delete_obj::<NodePool>(None, name),
            "EC2NodeClass" => self.cluster.delete_obj::<EC2NodeClass>(None, name),
            "DaemonSet" => self.cluster.delete_obj::<DaemonSet>(ns, name),
            "Pod" => self.cluster.delete_obj::<Pod>(ns, name),
            "PodDisruptionBudget" => self.cluster.delete_obj::<PodDisruptionBudget>(ns, name),
            "PersistentVolumeClaim" => self.cluster.delete_obj::<PersistentVolumeClaim>(ns, name),
            "StorageClass" => self.cluster.delete_obj::<StorageClass>(None, name),
            "PersistentVolume" => self.cluster.delete_obj::<PersistentVolume>(None, name),
            "PriorityClass" => self.cluster.delete_obj::<PriorityClass>(None, name),
            "RuntimeClass" => self.cluster.delete_obj::<RuntimeClass>(None, name),
            "PodTemplate" => self.cluster.delete_obj::<PodTemplate>(ns, name),
            "CapacityBuffer" => self.cluster.delete_obj::<CapacityBuffer>(ns, name),
            // Manual disruption: the finalizer holds the object while kerf drains and removes it.
            "Node" => self.cluster.delete_obj::<Node>(None, name),
            "NodeClaim" => self.cluster.delete_obj::<NodeClaim>(None, name),
            other => return Err(format!("cannot delete kind {other}")),
        };
        r.map_err(|e| e.to_string())
    }

    /// Applies a JSON merge patch to an object's metadata and spec.
    fn patch(&mut self, target: &ObjectRef, merge: &serde_json::Value) -> Result<(), String> {
        let ns = Some(target.namespace.as_str());
        let name = target.name.as_str();
        let c = &self.cluster;
        match target.kind.as_str() {
            "Node" => patch_obj::<Node>(c, None, name, merge),
            "NodeClaim" => patch_obj::<NodeClaim>(c, None, name, merge),
            "NodePool" => patch_obj::<NodePool>(c, None, name, merge),
            "EC2NodeClass" => {
                patch_obj::<EC2NodeClass>(c, None, name, merge)?;
                if let Some(nc) = c.get_obj::<EC2NodeClass>(None, name) {
                    self.manager.cloud().sim_register_node_class(&nc);
                }
                Ok(())
            }
            "DaemonSet" => patch_obj::<DaemonSet>(c, ns, name, merge),
            "Pod" => patch_obj::<Pod>(c, ns, name, merge),
            "PodDisruptionBudget" => patch_obj::<PodDisruptionBudget>(c, ns, name, merge),
            "PersistentVolumeClaim" => patch_obj::<PersistentVolumeClaim>(c, ns, name, merge),
            "PersistentVolume" => patch_obj::<PersistentVolume>(c, None, name, merge),
            "StorageClass" => patch_obj::<StorageClass>(c, None, name, merge),
            "Namespace" => patch_obj::<Namespace>(c, None, name, merge),
            "PriorityClass" => patch_obj::<PriorityClass>(c, None, name, merge),
            "RuntimeClass" => patch_obj::<RuntimeClass>(c, None, name, merge),
            "PodTemplate" => patch_obj::<PodTemplate>(c, ns, name, merge),
            "CapacityBuffer" => patch_obj::<CapacityBuffer>(c, ns, name, merge),
            other => Err(format!("cannot patch kind {other}")),
        }
    }

    /// Runs rounds and advances time until `until`; ends with the clock at `until`.
    pub fn settle(&mut self, until: Timestamp) -> Result<(), SimError> {
        loop {
            let mut rounds = 0;
            loop {
                self.round()?;
                if !self.busy() {
                    break;
                }
                rounds += 1;
                if rounds > MAX_ROUNDS_PER_INSTANT {
                    return Err(SimError::Stuck { at: self.elapsed(), rounds });
                }
            }
            self.sample();
            let now = self.clock.now();
            let next = [self.manager_wake, self.kubelet_wake].into_iter().flatten().filter(|t| *t > now).min();
            match next {
                Some(t) if t <= until => self.advance_to(t),
                _ => {
                    if until > now {
                        self.advance_to(until);
                        // Let anything due exactly at `until` run before the next step.
                        continue;
                    }
                    return Ok(());
                }
            }
        }
    }

    fn busy(&self) -> bool {
        let now = self.clock.now();
        self.cluster.has_pending_watch()
            || self.scheduler.has_work()
            || self.workloads.is_dirty()
            || self.daemonsets.is_dirty()
            || self.kick
            || self.manager_wake.is_some_and(|t| t <= now)
            || self.kubelet_wake.is_some_and(|t| t <= now)
    }

    /// The fleet's $/h now. Instances change only when claims do (launch, delete) or when a
    /// reclaim after an interruption falls due, so the sum is cached between those.
    fn fleet_price(&mut self) -> f64 {
        let now = self.clock.now();
        if self.price_cache.is_none_or(|(at, _, stale)| stale || self.kubelet_wake.is_some_and(|w| w > at && w <= now))
        {
            let p = self.manager.cloud().sim_fleet_price() + 0.0;
            self.price_cache = Some((now, p, false));
        }
        self.price_cache.map_or(0.0, |(_, p, _)| p)
    }

    fn advance_to(&mut self, t: Timestamp) {
        let now = self.clock.now();
        if t <= now {
            return;
        }
        self.cost += self.fleet_price() * secs_between(now, t) / 3600.0;
        self.clock.set(t);
    }

    fn sample(&mut self) {
        let s = Sample {
            seconds: self.elapsed(),
            nodes: self.world.nodes.len(),
            pods_pending: self.world.pod_count() - self.world.bound_count(),
            pods_running: self.world.bound_count(),
            cost_per_hour: self.fleet_price(),
        };
        match self.timeline.last_mut() {
            Some(last) if last.seconds == s.seconds => *last = s,
            Some(last)
                if last.nodes == s.nodes
                    && last.pods_pending == s.pods_pending
                    && last.pods_running == s.pods_running
                    && last.cost_per_hour == s.cost_per_hour => {}
            _ => self.timeline.push(s),
        }
    }

    fn round(&mut self) -> Result<(), SimError> {
        let now = self.clock.now();
        for ev in self.cluster.drain_dynamic() {
            deployments::observe(&self.cluster, &mut self.workloads, ev);
        }
        let events = self.cluster.drain_watch();
        let mut changes = Changes::default();
        let had_events = !events.is_empty();
        let mut claims_changed = false;
        // A chaos run's watch outage: the controllers get nothing until it ends, then a relist.
        // Their watches fail, so they know their view may be stale until then.
        let watch_down = self.chaos.as_ref().is_some_and(|c| c.watch_down(now));
        if let Some(c) = self.chaos.as_mut() {
            if watch_down {
                c.outage_seen = true;
                self.manager.watches_interrupted();
            } else if std::mem::take(&mut c.outage_seen) {
                for ev in c.relist() {
                    self.manager.observe(&ev);
                }
                self.manager.watches_resynced();
                self.kick = true;
            }
        }
        for ev in events {
            // A StatefulSet's or Job's pod is made again from the whole pod deleted.
            if let WatchEvent::Deleted(pod @ (AnyObject::Pod(_) | AnyObject::SlimPod(_))) = &ev {
                self.owned_pods.pod_deleted(pod);
            }
            // Pods are kept slim from here on: the controllers, the world and the stand-ins
            // share one copy of each version (a pod kube-scheduler bound: the one its view holds).
            let ev = match ev {
                WatchEvent::Applied(AnyObject::Pod(p)) if let Some(slim) = self.scheduler.own_binding(&p) => {
                    WatchEvent::Applied(AnyObject::SlimPod(slim))
                }
                other => other.into_kept(),
            };
            match self.chaos.as_mut() {
                Some(c) if watch_down => c.withhold(&ev),
                _ => self.manager.observe(&ev),
            }
            match &ev {
                // However it was created (scenario or API), the simulated cloud learns the class.
                WatchEvent::Applied(AnyObject::EC2NodeClass(c)) => self.manager.cloud().sim_register_node_class(c),
                WatchEvent::Applied(AnyObject::SlimPod(p)) => {
                    let world = &self.world;
                    self.workloads.observe_pod(p, false, |n| world.is_node_ready(n));
                    self.daemonsets.observe_pod(p);
                }
                WatchEvent::Deleted(AnyObject::SlimPod(p)) => self.workloads.observe_pod(p, true, |_| false),
                WatchEvent::Applied(AnyObject::NodeClaim(_)) | WatchEvent::Deleted(AnyObject::NodeClaim(_)) => {
                    claims_changed = true;
                }
                _ => {}
            }
            self.world.apply(ev, &mut changes);
        }
        let changed_nodes: Vec<String> = changes.nodes_changed.iter().cloned().collect();
        self.react(changes);
        if !changed_nodes.is_empty() {
            node_lifecycle::sync(&changed_nodes, &self.world, &self.cluster, now);
            if let Some(at) = self.kubelet.ready_kwok_nodes(&changed_nodes, &self.world, &self.cluster, now) {
                self.kubelet_wake = Some(self.kubelet_wake.map_or(at, |w| w.min(at)));
            }
        }
        let due = self.manager_wake.is_some_and(|t| t <= now);
        if !self.controllers {
            self.kick = false;
        } else if had_events || due || self.kick {
            self.kick = false;
            if let Some(c) = &self.chaos {
                self.manager_wake = c.reconcile(&mut self.manager, &self.cluster, now);
            } else {
                self.manager_wake = block_on(self.manager.reconcile(&*self.cluster, now));
                // The in-memory API fails only on a bug: the simulation stops at the first
                // failure rather than retrying as a controller in a cluster would.
                if let Some((_, source)) = self.manager.take_errors().into_iter().next() {
                    return Err(SimError::Controller { at: self.elapsed(), source });
                }
            }
        }
        if self.owned_pods.has_work() {
            self.owned_pods.run(&self.cluster);
        }
        if self.workloads.is_dirty() {
            self.workloads.reconcile(&self.cluster);
            deployments::publish(&self.cluster, &mut self.workloads);
        }
        if self.daemonsets.is_dirty() {
            for (pod, node) in self.daemonsets.run(&self.world, &self.cluster) {
                self.scheduler.pin(pod, node);
            }
        }
        if claims_changed && let Some(c) = self.price_cache.as_mut() {
            c.2 = true;
        }
        if claims_changed || self.kick_kubelet || self.kubelet_wake.is_some_and(|t| t <= now) {
            self.kick_kubelet = false;
            let instances = self.manager.cloud().sim_instances();
            self.kubelet_wake = self.kubelet.run(&instances, &self.world, &self.cluster, now);
            if let Some(c) = self.price_cache.as_mut() {
                c.2 = true;
            }
        }
        // kube-scheduler acts on an up-to-date view: when this round's writes (new daemon pods,
        // node updates) have not been delivered yet, wait one round so that, e.g., a daemon pod
        // can claim its node before ordinary pods fill it (by priority). Never twice in a row.
        if !self.cluster.has_pending_watch() || self.deferred_scheduling {
            self.deferred_scheduling = false;
            self.scheduler.run(&self.world, &self.cluster, now);
        } else {
            self.deferred_scheduling = true;
        }
        Ok(())
    }

    fn react(&mut self, ch: Changes) {
        self.scheduler.touch(ch.pods_touched.iter().chain(&ch.nodes_changed).chain(&ch.nodes_removed));
        for key in &ch.newly_bound {
            if !self.scheduler.take_own_binding(key) {
                // Bound by someone else (a manifest with spec.nodeName): the view must learn it.
                self.scheduler.invalidate();
            }
            let (pod, seq) = match self.world.pods.get(key) {
                Some(e) => (Some(e.pod.clone()), e.seq),
                None => (None, 0),
            };
            self.scheduler.forget(key, pod.as_deref(), seq);
        }
        for key in &ch.unbound_pods {
            if let Some(e) = self.world.pods.get(key) {
                self.scheduler.enqueue(key, &e.pod, e.seq);
            }
        }
        let mut freed = false;
        for (key, node) in &ch.removed_pods {
            self.scheduler.forget(key, None, 0);
            self.daemonsets.pod_removed(key);
            freed |= node.is_some();
        }
        if ch.pod_namespace_added || ch.namespaces_changed {
            // Namespace labels are read throughout the view.
            self.scheduler.rebuild();
        }
        if freed
            || ch.namespaces_changed
            || ch.volumes_changed
            || !ch.nodes_changed.is_empty()
            || !ch.nodes_removed.is_empty()
        {
            self.scheduler.cluster_changed();
        }
        for n in ch.nodes_changed.iter().chain(&ch.nodes_removed) {
            self.daemonsets.node_changed(n.clone());
        }
        // Pod garbage collection: pods bound to a node that is gone are deleted.
        for n in &ch.nodes_removed {
            let keys: Vec<String> = self.world.pods_by_node.get(n).into_iter().flatten().cloned().collect();
            for k in keys {
                if let Some((ns, name)) = k.split_once('/') {
                    let _ = self.cluster.delete_obj::<Pod>(Some(ns), name);
                }
            }
        }
        let mut unstarted = ch.unstarted_pods;
        for (n, ready) in &ch.readiness {
            let keys: Vec<String> = self.world.pods_by_node.get(n).into_iter().flatten().cloned().collect();
            self.workloads.node_readiness_changed(&keys, *ready);
            if *ready {
                unstarted.extend(keys);
            }
        }
        // The kubelet starts what is bound to a Ready node, whenever it was bound.
        self.kubelet.start_pods(&unstarted, &self.world, &self.cluster, self.clock.now());
        for ds in ch.daemonsets_changed {
            self.daemonsets.daemonset_changed(ds);
        }
    }

    /// The report of the run so far (docs/design.md, "Report").
    pub fn report(&self) -> Report {
        let instances = self.manager.cloud().sim_instances();
        let unpriced = self.manager.cloud().sim_unpriced();
        let by_pid: BTreeMap<&str, &Instance> = instances.iter().map(|i| (i.provider_id.as_str(), i)).collect();
        let mut nodes = Vec::new();
        for (name, node) in &self.world.nodes {
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            let inst = pid.and_then(|p| by_pid.get(p)).copied();
            let claim = pid.and_then(|p| self.world.claim_by_provider.get(p)).cloned();
            let managed = inst.is_some() || claim.is_some();
            let pods_here: Vec<&SlimPod> = self
                .world
                .pods_by_node
                .get(name)
                .into_iter()
                .flatten()
                .filter_map(|k| self.world.pods.get(k))
                .map(|e| e.pod.as_ref())
                .collect();
            let mut requested = ResourceList::new();
            for p in &pods_here {
                requested.add(&pod_requests(p));
            }
            let allocatable: BTreeMap<String, String> = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .into_iter()
                .flatten()
                .map(|(k, q)| {
                    (k.clone(), kerf_api::Quantity::parse(&q.0).map_or_else(|_| q.0.clone(), |q| q.canonical()))
                })
                .collect();
            nodes.push(NodeReport {
                name: name.clone(),
                node_pool: if managed { labels.get(kerf_api::labels::NODE_POOL).cloned() } else { None },
                node_claim: claim,
                instance_type: labels
                    .get(kerf_api::labels::INSTANCE_TYPE)
                    .cloned()
                    .or_else(|| inst.map(|i| i.instance_type.clone())),
                capacity_type: labels
                    .get(kerf_api::labels::CAPACITY_TYPE)
                    .cloned()
                    .or_else(|| inst.map(|i| i.capacity_type.clone())),
                zone: labels.get(kerf_api::labels::ZONE).cloned().or_else(|| inst.map(|i| i.zone.clone())),
                // A terminated instance costs nothing any more; an unknown price is not made up.
                price_per_hour: inst
                    .filter(|i| !unpriced.contains_key(&i.provider_id))
                    .map(|i| if i.terminated { 0.0 } else { dollars(i.price) }),
                price_unknown: pid.and_then(|p| unpriced.get(p)).cloned(),
                ready: node_ready(node),
                pods: pods_here.len(),
                // Only for managed nodes that are not being disrupted or deleted.
                disruption_blocked: if managed
                    && node.metadata.deletion_timestamp.is_none()
                    && !node
                        .spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|ts| ts.iter().any(|t| t.key == kerf_api::labels::DISRUPTED_TAINT_KEY))
                {
                    self.manager.disruption_blocked().get(name).cloned()
                } else {
                    None
                },
                labels,
                annotations: node.metadata.annotations.clone().unwrap_or_default(),
                taints: node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .into_iter()
                    .flatten()
                    .filter_map(kerf_api::Taint::from_core)
                    .collect(),
                allocatable,
                requested: requested.without_zeros().iter().map(|(k, q)| (k.clone(), q.canonical())).collect(),
            });
        }
        let failed = self.cluster.latest_events_by_object("Pod", "FailedScheduling");
        let nominated = self.cluster.latest_events_by_object("Pod", "Nominated");
        let mut pods = Vec::new();
        let mut running = 0;
        for (key, e) in &self.world.pods {
            let node = e.node().map(str::to_string);
            let is_running = node.as_deref().is_some_and(|n| self.world.is_node_ready(n));
            if is_running {
                running += 1;
            }
            let owner = self
                .workloads
                .owner_of(key)
                .or_else(|| self.daemonsets.owner_of(key))
                .or_else(|| {
                    e.pod
                        .metadata
                        .owner_references
                        .as_ref()
                        .and_then(|o| o.iter().find(|r| r.controller == Some(true)))
                        .map(|r| format!("{}/{}", r.kind, r.name))
                })
                .unwrap_or_default();
            let reason = if is_running {
                None
            } else if let Some(n) = &node {
                Some(format!("bound to node {n}, which is not Ready"))
            } else {
                let scheduler_msg = self.scheduler.message(key).map(str::to_string);
                match (failed.get(key), nominated.get(key)) {
                    (Some(f), n) if n.is_none_or(|n| n.time <= f.time) => Some(f.record.message.clone()),
                    (_, Some(n)) => Some(match scheduler_msg {
                        Some(m) => format!("{m} {} (waiting for its node)", n.record.message),
                        None => format!("{} (waiting for its node)", n.record.message),
                    }),
                    _ => scheduler_msg.or_else(|| Some("not yet considered by the scheduler".to_string())),
                }
            };
            pods.push(PodReport {
                namespace: e.pod.metadata.namespace.clone().unwrap_or_else(|| "default".to_string()),
                name: e.pod.metadata.name.clone().unwrap_or_default(),
                owner,
                node,
                phase: if is_running { "Running" } else { "Pending" }.to_string(),
                reason,
            });
        }
        let mut timeline = self.timeline.clone();
        let end = self.elapsed();
        if let Some(mut last) = timeline.last().copied()
            && last.seconds < end
        {
            last.seconds = end;
            timeline.push(last);
        }
        let cost_per_hour = instances.iter().filter(|i| !i.terminated).map(|i| i.price).sum::<f64>();
        let state = self.manager.state();
        let buffers = crate::report_buffers::buffer_reports(state.capacity_buffers(), state.buffer_room(), &nodes);
        Report {
            scenario: self.name.clone(),
            end_seconds: Seconds(end),
            summary: Summary {
                pods: pods.len(),
                pods_running: running,
                pods_pending: pods.len() - running,
                nodes: nodes.len(),
                node_claims_launched: instances.iter().filter(|i| !self.adopted.contains(&i.provider_id)).count(),
                node_claims_terminated: instances.iter().filter(|i| i.terminated).count(),
                cost_per_hour: dollars(cost_per_hour),
                cost: dollars(self.cost),
            },
            nodes,
            pods,
            disruptions: self.disruption_report(&instances),
            timeline,
            buffers,
            comparison: None,
        }
    }
}

impl<P: SimCloud> Simulation<P> {
    /// `disruptions[]`: interruption warnings as they were delivered, and every node the
    /// controllers disrupted, with when its instance was gone.
    fn disruption_report(&self, instances: &[Instance]) -> Vec<Disruption> {
        let secs = |t: Timestamp| Seconds((t.as_millisecond() - ManualClock::EPOCH_MILLIS) as f64 / 1000.0);
        let mut out = self.disruptions.clone();
        for rec in self.manager.disruptions() {
            let reason = rec.reason.as_str();
            match out.iter_mut().find(|d| d.node_claim == rec.node_claim && d.reason == reason) {
                Some(d) => {
                    d.replacements = rec.replacements.clone();
                    d.detail = format!("{}; {}", d.detail, rec.detail);
                    d.node_pool = d.node_pool.take().or_else(|| rec.node_pool.clone());
                    d.instance_type = d.instance_type.take().or_else(|| rec.instance_type.clone());
                }
                None => out.push(Disruption {
                    at_seconds: secs(rec.decided_at),
                    terminated_seconds: None,
                    node_claim: rec.node_claim.clone(),
                    node: rec.node.clone(),
                    node_pool: rec.node_pool.clone(),
                    instance_type: rec.instance_type.clone(),
                    reason: reason.to_string(),
                    replacements: rec.replacements.clone(),
                    detail: rec.detail.clone(),
                }),
            }
        }
        let pid_of: BTreeMap<&str, &str> =
            self.world.claim_by_provider.iter().map(|(p, c)| (c.as_str(), p.as_str())).collect();
        let by_pid: BTreeMap<&str, &Instance> = instances.iter().map(|i| (i.provider_id.as_str(), i)).collect();
        for d in &mut out {
            d.terminated_seconds =
                pid_of.get(d.node_claim.as_str()).and_then(|p| by_pid.get(p)).and_then(|i| i.terminated_at).map(secs);
        }
        out.sort_by(|a, b| a.at_seconds.0.total_cmp(&b.at_seconds.0));
        out
    }
}

/// Applies a JSON merge patch (RFC 7386) to the object's metadata and spec, as the API server
/// applies a PATCH.
fn patch_obj<K: Object>(
    cluster: &SimCluster,
    namespace: Option<&str>,
    name: &str,
    merge: &serde_json::Value,
) -> Result<(), String> {
    if cluster.get_obj::<K>(namespace, name).is_none() {
        return Err(format!("no {} {name}", K::KIND));
    }
    let patch = Patch::Merge(merge.clone());
    cluster.patch_obj::<K>(namespace, name, &patch, Part::Main).map(|_| ()).map_err(|e| e.to_string())
}

fn describe(r: &ObjectRef) -> String {
    format!("{} {}/{}", r.kind, r.namespace, r.name)
}

/// Creates the object, or replaces the existing one (what `kubectl apply` amounts to here).
fn upsert<K: Object>(cluster: &SimCluster, obj: K) -> Result<(), ApiError> {
    match cluster.create_obj(obj.clone()) {
        Ok(_) => Ok(()),
        Err(ApiError::AlreadyExists { .. }) => {
            let mut obj = obj;
            obj.meta_mut().set_resource_version(None);
            cluster.update_obj(obj).map(|_| ())
        }
        Err(e) => Err(e),
    }
}
