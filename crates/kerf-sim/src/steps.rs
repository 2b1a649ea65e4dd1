//! Running a scenario: the entry points, the simulation a scenario's settings make, the nodes
//! it starts with, and what its steps (`apply`, `scale`, `rollout`, `delete`, `patch`,
//! `interrupt`, `condition`, `fail`, `wait`) do to the simulated cluster and cloud.
//!
//! A step writes through the in-memory API (or the simulated cloud, for an interruption) and
//! then lets the clock loop in [`crate::driver`] settle; keeping the writes here leaves the loop
//! free of any knowledge of manifests and object kinds.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Namespace, Node, NodeCondition, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::MetaView;
use kerf_api::cluster::Patch;
use kerf_api::cluster::{ApiError, Object};
use kerf_api::{CapacityBuffer, CapacityQuota, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest};
use kerf_apiserver::writes::Part;
use kerf_cloud::{Clock, ManualClock, Timestamp};
use kerf_controller::Options;

use crate::deployments;
use crate::driver::{SimError, Simulation, after};
use crate::kubelet;
use crate::report::{Disruption, Report, Seconds};
use crate::scenario::{ManifestObject, ObjectRef, Scenario, ScenarioNode, Step};
use crate::sim_cloud::SimCloud;
use kerf_apiserver::SimCluster;

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

impl<P: SimCloud> Simulation<P> {
    /// A simulation with the scenario's settings (controller options, the kube-scheduler's
    /// handling of nominations); its steps are not run yet.
    pub fn for_scenario(scenario: &Scenario, cloud: P, clock: ManualClock, region: &str) -> Self {
        let defaults = Options::default();
        let options = Options {
            seed: 0,
            batch_idle: scenario.settings.batch_idle_duration.unwrap_or(defaults.batch_idle),
            batch_max: scenario.settings.batch_max_duration.unwrap_or(defaults.batch_max),
            spot_to_spot_consolidation: scenario.settings.spot_to_spot_consolidation,
            node_repair: scenario.settings.feature_gates.get("NodeRepair").unwrap_or(false),
            pod_deletion_cost_management: scenario
                .settings
                .feature_gates
                .get("PodDeletionCostManagement")
                .unwrap_or(false),
            reboot_for_repair: scenario.settings.feature_gates.get("RebootForRepair").unwrap_or(false),
            terminate_first_drift: scenario.settings.feature_gates.get("TerminateFirstDrift").unwrap_or(false),
            terminate_first_repair: scenario.settings.feature_gates.get("TerminateFirstRepair").unwrap_or(false),
            reserved_capacity: scenario.settings.feature_gates.get("ReservedCapacity").unwrap_or(true),
            preference_policy: scenario.settings.preference_policy.unwrap_or(defaults.preference_policy),
            wall_clock_offset_ms: scenario.start.map_or(0, |t| t.as_millisecond() - ManualClock::EPOCH_MILLIS),
            ..defaults
        };
        let mut sim = Self::with_options(&scenario.name, cloud, clock, region, options);
        sim.set_honour_nominations(scenario.settings.nominated_node_name.unwrap_or(true));
        sim
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
            let addresses = self.kubelet.node_addresses(&n.name);
            self.cluster.create_obj(kubelet::scenario_node(n, now, addresses)).map_err(|e| fail(e.to_string()))?;
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

    /// Runs step `index` of a scenario, then settles (a `wait`: until it has passed).
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
                        score: None,
                    });
                }
                self.kick = true;
                self.kick_kubelet = true;
                self.price.invalidate();
            }
            Step::Condition { node, type_, status, reason, message, persistent } => {
                let what = format!("condition {type_}={status} on {node}");
                let reason = reason.clone().unwrap_or_else(|| "ScenarioStep".to_string());
                let message = message.clone().unwrap_or_else(|| format!("set by the scenario's {type_} step"));
                self.set_node_condition(node, type_, status, &reason, &message, now).map_err(|e| fail(what, e))?;
                self.kubelet.note_fault(node, type_, *persistent);
                self.kick = true;
                self.kick_kubelet = true;
            }
            Step::SpotPrices { seed, change } => {
                let market = kerf_cloud::sim::SpotMarket { seed: *seed, change: *change };
                self.manager.cloud().sim_spot_market(market).map_err(|e| fail(format!("spotPrices seed {seed}"), e))?;
                self.price.invalidate();
                self.kick = true;
            }
            Step::Fail { node, persistent } => {
                let message = "Kubelet stopped posting node status.";
                self.set_node_condition(node, "Ready", "Unknown", "NodeStatusUnknown", message, now)
                    .map_err(|e| fail(format!("fail {node}"), e))?;
                self.kubelet.note_fault(node, "Ready", *persistent);
                self.kick = true;
                self.kick_kubelet = true;
            }
        }
        self.settle(now)
    }

    /// Writes one condition of a Node as its kubelet (or a node agent) would: the condition's
    /// lastTransitionTime moves only when its status changes.
    fn set_node_condition(
        &mut self,
        node: &str,
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> Result<(), String> {
        let Some(current) = self.world.nodes.get(node) else {
            let names: Vec<&String> = self.world.nodes.keys().collect();
            return Err(format!("no node {node:?} (nodes now: {names:?})"));
        };
        let mut n = (**current).clone();
        let conditions = n.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new);
        let at = Some(Time(now));
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = at.clone();
                }
                c.status = status.to_string();
                c.reason = Some(reason.to_string());
                c.message = Some(message.to_string());
                c.last_heartbeat_time = at;
            }
            None => conditions.push(NodeCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
                last_transition_time: at.clone(),
                last_heartbeat_time: at,
            }),
        }
        self.cluster.replace_obj(n).map(|_| ()).map_err(|e| e.to_string())
    }

    fn apply(&mut self, obj: &ManifestObject) -> Result<(), ApiError> {
        match obj {
            ManifestObject::NodePool(o) => upsert::<NodePool>(&self.cluster, (**o).clone()),
            ManifestObject::EC2NodeClass(o) => {
                // A status it carries is what a real cluster recorded (a snapshot's): the account's
                // answer for the class. The object itself is stored without it, as an API server
                // stores a created object; the node class controller writes its own.
                let cloud = self.manager.cloud();
                cloud.sim_record_node_class_status(o);
                let mut class = (**o).clone();
                class.status = None;
                cloud.sim_register_node_class(&class);
                upsert::<EC2NodeClass>(&self.cluster, class)
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
            ManifestObject::NodeOverlay(o) => upsert::<NodeOverlay>(&self.cluster, (**o).clone()),
            ManifestObject::ProvisioningRequest(o) => upsert::<ProvisioningRequest>(&self.cluster, (**o).clone()),
            ManifestObject::CapacityQuota(o) => upsert::<CapacityQuota>(&self.cluster, (**o).clone()),
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
            "NodeOverlay" => self.cluster.delete_obj::<NodeOverlay>(None, name),
            "ProvisioningRequest" => self.cluster.delete_obj::<ProvisioningRequest>(ns, name),
            "CapacityQuota" => self.cluster.delete_obj::<CapacityQuota>(None, name),
            // Everything in it goes too (see kerf_apiserver's cluster::namespaces).
            "Namespace" => self.cluster.delete_obj::<Namespace>(None, name),
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
            "NodeOverlay" => patch_obj::<NodeOverlay>(c, None, name, merge),
            "ProvisioningRequest" => patch_obj::<ProvisioningRequest>(c, ns, name, merge),
            "CapacityQuota" => patch_obj::<CapacityQuota>(c, None, name, merge),
            other => Err(format!("cannot patch kind {other}")),
        }
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
