//! The driver: runs kerf's controllers and the stand-ins round by round on a virtual clock.
//!
//! A round delivers the watch events produced since the last one (to the controllers and to the
//! stand-ins' index; the node lifecycle taints nodes that are not Ready and the kubelet starts
//! pods bound to Ready nodes), runs the controllers when something changed or they asked to be
//! woken, then the workload controllers, kubelet and kube-scheduler. When a round changes
//! nothing, time jumps to the earliest wake-up anyone asked for, never past the end of the
//! current `wait`.
//!
//! Around it: the scenario steps ([`crate::steps`]), the cloud adapter ([`crate::sim_cloud`]),
//! report assembly ([`crate::report_assembly`]) and the seams a run can be disturbed at
//! ([`crate::run_hooks`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::cluster::{AnyObject, WatchEvent};
use kerf_cloud::{Clock, ManualClock, Timestamp};
use kerf_controller::{ControllerError, Manager, Options};

use crate::daemonsets::DaemonSets;
use crate::deployments;
use crate::kube_scheduler::KubeScheduler;
use crate::kubelet::Kubelet;
use crate::node_lifecycle;
use crate::owned_pods::OwnedPods;
use crate::report::{Disruption, Sample};
use crate::run_hooks::{NoHooks, RunHooks};
use crate::sim_cloud::FleetPrice;
use crate::sim_cloud::SimCloud;
use crate::workloads::Workloads;
use crate::world::{Changes, World};
use kerf_apiserver::SimCluster;

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

/// A simulated cluster with its cloud, kerf's controllers and the stand-ins, on a virtual clock.
pub struct Simulation<P: SimCloud> {
    pub(crate) name: String,
    pub(crate) clock: ManualClock,
    pub(crate) cluster: Arc<SimCluster>,
    /// Run kerf's controllers (off when a separately started controller does their work).
    controllers: bool,
    pub(crate) manager: Manager<P>,
    pub(crate) world: World,
    pub(crate) scheduler: KubeScheduler,
    pub(crate) kubelet: Kubelet,
    pub(crate) workloads: Workloads,
    pub(crate) daemonsets: DaemonSets,
    owned_pods: OwnedPods,
    pub(crate) manager_wake: Option<Timestamp>,
    kubelet_wake: Option<Timestamp>,
    /// Force a controller pass on the next round (a step changed something directly).
    pub(crate) kick: bool,
    deferred_scheduling: bool,
    /// Run the kubelet on the next round whatever happened (a step touched instances).
    pub(crate) kick_kubelet: bool,
    /// The fleet's $/h, summed again only when instances may have changed.
    pub(crate) price: FleetPrice,
    pub(crate) timeline: Vec<Sample>,
    /// What each CapacityQuota's nodes held so far (the report's `peakUsed` and `timeline`).
    pub(crate) quota_history: crate::report_quotas::QuotaHistory,
    pub(crate) cost: f64,
    pub(crate) disruptions: Vec<Disruption>,
    /// Provider IDs of the instances present at t=0 (not launched by the run).
    pub(crate) adopted: BTreeSet<String>,
    /// Wall-clock time less virtual time (the scenario's `start`), in milliseconds.
    pub(crate) wall_clock_offset_ms: i64,
    /// What the run does at the loop's seams ([`NoHooks`] unless a bench plugs in its own).
    pub(crate) hooks: Box<dyn RunHooks<P> + Send>,
}

fn secs_between(a: Timestamp, b: Timestamp) -> f64 {
    (b.as_millisecond() - a.as_millisecond()) as f64 / 1000.0
}

pub(crate) fn after(t: Timestamp, d: std::time::Duration) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond().saturating_add(d.as_millis() as i64)).unwrap_or(t)
}

impl<P: SimCloud> Simulation<P> {
    pub fn new(name: &str, cloud: P, clock: ManualClock, region: &str, seed: u64) -> Self {
        Self::with_options(name, cloud, clock, region, Options { seed, ..Options::default() })
    }

    /// A simulation whose controllers run with `options` (their seed also seeds the cluster).
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
            price: FleetPrice::default(),
            timeline: Vec::new(),
            quota_history: Default::default(),
            cost: 0.0,
            disruptions: Vec::new(),
            adopted: BTreeSet::new(),
            wall_clock_offset_ms,
            hooks: Box::new(NoHooks),
        }
    }

    /// Plugs in what the run does at the loop's seams (watch delivery, controller passes).
    pub fn set_hooks(&mut self, hooks: Box<dyn RunHooks<P> + Send>) {
        self.hooks = hooks;
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

    /// Whether the simulated kube-scheduler honours pods' `status.nominatedNodeName`
    /// (Kubernetes >= 1.35; the default).
    pub fn set_honour_nominations(&mut self, on: bool) {
        self.scheduler.set_honour_nominations(on);
    }

    /// Virtual time now.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn manager(&self) -> &Manager<P> {
        &self.manager
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    pub(crate) fn elapsed(&self) -> f64 {
        self.clock.elapsed_secs()
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
            let next = [self.manager_wake, self.kubelet_wake, self.scheduler.next_retry()]
                .into_iter()
                .flatten()
                .filter(|t| *t > now)
                .min();
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
            || self.scheduler.next_retry().is_some_and(|t| t <= now)
    }

    /// The fleet's $/h now (see [`FleetPrice`]).
    pub(crate) fn fleet_price(&mut self) -> f64 {
        self.price.get(self.manager.cloud(), self.clock.now(), self.kubelet_wake)
    }

    fn advance_to(&mut self, t: Timestamp) {
        let now = self.clock.now();
        if t <= now {
            return;
        }
        self.cost += self.fleet_price() * secs_between(now, t) / 3600.0;
        self.clock.set(t);
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
        // The run's hooks may hold the controllers' watches back, and ask for a pass when they
        // list again.
        if self.hooks.before_round(&mut self.manager, now) {
            self.kick = true;
        }
        for ev in events {
            // A StatefulSet's or Job's pod is made again from the whole pod deleted.
            match &ev {
                WatchEvent::Deleted(pod @ (AnyObject::Pod(_) | AnyObject::SlimPod(_))) => {
                    self.owned_pods.pod_deleted(pod)
                }
                // Its content goes in the same step, with the pods' owners.
                WatchEvent::Deleted(AnyObject::Namespace(ns)) => {
                    self.owned_pods.namespace_deleted(ns.metadata.name.as_deref().unwrap_or_default());
                }
                _ => {}
            }
            // Pods are kept slim from here on: the controllers, the world and the stand-ins
            // share one copy of each version (a pod kube-scheduler bound: the one its view holds).
            let ev = match ev {
                WatchEvent::Applied(AnyObject::Pod(p)) if let Some(slim) = self.scheduler.own_binding(&p) => {
                    WatchEvent::Applied(AnyObject::SlimPod(slim))
                }
                other => other.into_kept(),
            };
            self.hooks.deliver(&mut self.manager, &ev);
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
            self.manager_wake = self.hooks.reconcile(&mut self.manager, &self.cluster, now);
            if let Some(source) = self.hooks.after_controllers(&mut self.manager, now) {
                return Err(SimError::Controller { at: self.elapsed(), source });
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
        if claims_changed {
            self.price.invalidate();
        }
        if claims_changed || self.kick_kubelet || self.kubelet_wake.is_some_and(|t| t <= now) {
            self.kick_kubelet = false;
            let instances = self.manager.cloud().sim_instances();
            self.kubelet_wake = self.kubelet.run(&instances, &self.world, &self.cluster, now);
            self.price.invalidate();
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
        // Pods gone first: a pod made again under a name deleted in the same batch (generated
        // names come back as pods churn; a StatefulSet's always do) is queued below, not forgotten.
        let mut freed = false;
        for (key, node) in &ch.removed_pods {
            self.scheduler.forget(key, None, 0);
            self.daemonsets.pod_removed(key);
            freed |= node.is_some();
        }
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
        if ch.pod_namespace_added || ch.namespaces_changed || ch.volumes_changed {
            // Namespace labels and the claims that attach EBS volumes are read throughout the view.
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
}
