//! The controller manager: feeds watch events into cluster state and runs every controller
//! once per `reconcile`, returning when it must run again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kerf_cloud::{CloudError, CloudProvider, Timestamp};

use crate::nominations::Nominations;
use crate::runtime::{Health, Reconciler, Runtime};
use crate::state::{ClusterState, ObjectKey};
use crate::util::{self, SplitMix64};
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_api::cluster::{AnyObject, ApiError, ClusterApi, WatchEvent};

/// Tunables of the controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// A provisioning batch closes after this long without a new pending pod.
    pub batch_idle: Duration,
    /// ... or after this long in total.
    pub batch_max: Duration,
    /// A launched NodeClaim whose Node has not registered after this long is deleted.
    pub registration_ttl: Duration,
    /// Seeds NodeClaim name suffixes.
    pub seed: u64,
    /// Karpenter's `featureGates.spotToSpotConsolidation`: a spot node may be replaced by a
    /// cheaper spot node (single-node consolidation, at least 15 cheaper types).
    pub spot_to_spot_consolidation: bool,
    /// Added to `now` to get the wall-clock instant disruption budget schedules run on (the
    /// simulator's virtual clock starts at a fixed epoch; a scenario's `start` moves it).
    pub wall_clock_offset_ms: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            registration_ttl: Duration::from_secs(15 * 60),
            seed: 0,
            spot_to_spot_consolidation: false,
            wall_clock_offset_ms: 0,
        }
    }
}

/// A failure the controllers cannot work around by retrying later.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

/// How long to wait before retrying a write that lost a race (conflict, not found).
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long pods that fit nowhere wait before the provisioner tries them again unprompted.
pub(crate) const UNSCHEDULABLE_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long to wait before retrying a launch that failed for a reason other than capacity.
pub(crate) const LAUNCH_RETRY_AFTER: Duration = Duration::from_secs(10);

/// The provisioning batch window (see [`Options::batch_idle`], [`Options::batch_max`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct Batch {
    /// When the open window started; `None` when no window is open.
    pub started: Option<Timestamp>,
    /// When the last new pending pod was seen.
    pub last_trigger: Option<Timestamp>,
    /// Provisionable pods already seen: only new ones (re)open a window.
    pub seen: BTreeSet<ObjectKey>,
    /// Something other than a pod changed that may let pending pods fit (a NodePool, a node
    /// class, a claim or node went away): re-run even without new pods.
    pub dirty: bool,
    /// (pod generation, nomination generation) when `seen` was last brought up to date.
    pub observed: Option<(u64, u64)>,
    /// When to try pods that fit nowhere again, even if nothing visible changed (offerings
    /// marked unavailable come back; the cloud's view is not in the watch).
    pub retry_at: Option<Timestamp>,
    /// The buffer room generation last looked at (room held nowhere opens a window once).
    pub room_seen: Option<u64>,
}

/// Per-reconcile bookkeeping.
#[derive(Debug)]
pub(crate) struct Pass {
    pub now: Timestamp,
    pub wake: Option<Timestamp>,
    /// A write of this pass went through (a failure after it does not grow the backoff).
    pub progressed: bool,
}

impl Pass {
    pub fn wake_at(&mut self, t: Timestamp) {
        self.wake = util::earliest(self.wake, Some(t));
    }

    pub fn wake_after(&mut self, d: Duration) {
        let t = util::after(self.now, d);
        self.wake_at(t);
    }

    /// Turns a write that lost a race into a retry, and a write the API server rejected into an
    /// error log (retrying it unchanged cannot help); any other API error is fatal.
    pub fn soft<T>(&mut self, what: &str, r: Result<T, ApiError>) -> Result<Option<T>, ControllerError> {
        match r {
            Ok(v) => {
                self.progressed = true;
                Ok(Some(v))
            }
            Err(e @ (ApiError::Conflict { .. } | ApiError::NotFound { .. } | ApiError::AlreadyExists { .. })) => {
                tracing::debug!(error = %e, "{what}: retrying");
                self.wake_after(RETRY_AFTER);
                Ok(None)
            }
            Err(e @ ApiError::Invalid { .. }) => {
                tracing::error!(error = %e, "{what} failed");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// The provisioner's own state.
#[derive(Debug, Default)]
pub(crate) struct Provisioning {
    pub batch: Batch,
    /// Pod → the in-flight NodeClaim it is expected to land on. Such pods are not provisioned
    /// again while the claim launches (disruption waits while any are; observe ends them).
    pub nominations: Nominations,
    /// NodePool → why its instance types could not be listed on the last listing (the NodePool
    /// status reconciler reports it).
    pub pool_errors: BTreeMap<String, String>,
}

/// The NodeClaim lifecycle reconciler's own state.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    /// NodeClaim → earliest time to retry a failed launch.
    pub launch_retry: BTreeMap<String, Timestamp>,
    /// Instances launched whose claim could not be written yet (the write lost a race; garbage
    /// collection leaves them alone).
    pub unrecorded_launches: BTreeMap<String, kerf_api::NodeClaim>,
}

/// The garbage collector's own state.
#[derive(Debug, Default)]
pub(crate) struct GarbageCollection {
    /// When it runs next.
    pub next_at: Option<Timestamp>,
    /// The cloud listed no instance on the last run and this process launched nothing since.
    pub cloud_empty: bool,
}

/// The NodePool reconcilers' own state.
#[derive(Debug)]
pub(crate) struct NodePools {
    /// NodePools seen deleted whose NodeClaims must go too (they are owned by the pool).
    pub deleted: BTreeSet<String>,
    /// A claim, pool or node class changed since NodePool status was last written.
    pub status_stale: bool,
}

/// Runs kerf's controllers against a cluster API and a cloud provider: the cluster state every
/// reconciler reads (the informer cache), the seeded name generator they draw NodeClaim names
/// from in turn, and each reconciler's own state.
pub struct Manager<P: CloudProvider> {
    pub(crate) cloud: P,
    pub(crate) options: Options,
    pub(crate) state: ClusterState,
    pub(crate) rng: SplitMix64,
    pub(crate) provisioning: Provisioning,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) garbage: GarbageCollection,
    pub(crate) pools: NodePools,
    /// The disruption controller's commands, records, explanations and watch bookkeeping
    /// (interruption carries out its commands through the same orchestration).
    pub(crate) disruption: crate::disruption::DisruptionState,
    /// The node class status controller's memory.
    pub(crate) resolved: crate::nodeclass::Resolved,
    /// The CapacityBuffer reconciler's memory.
    pub(crate) buffers: crate::buffers::Buffers,
    /// Each reconciler's error policy.
    runtime: Runtime,
    /// Parsed pod facts kept across the SchedulingContexts the provisioner and the disruption
    /// controller build pass after pass (an unchanged pod is not parsed again).
    pub(crate) pod_facts: kerf_scheduling::PodFactsCache,
    /// A watch failed and has not listed again: the state may miss changes (see
    /// [`Manager::watches_interrupted`]).
    pub(crate) watches_interrupted: bool,
}

impl<P: CloudProvider> Manager<P> {
    pub fn new(cloud: P, options: Options) -> Self {
        let rng = SplitMix64::new(options.seed);
        let runtime = Runtime::new(options.seed);
        Manager {
            cloud,
            options,
            state: ClusterState::new(),
            rng,
            provisioning: Provisioning::default(),
            lifecycle: Lifecycle::default(),
            garbage: GarbageCollection::default(),
            pools: NodePools { deleted: BTreeSet::new(), status_stale: true },
            disruption: Default::default(),
            resolved: Default::default(),
            buffers: Default::default(),
            runtime,
            pod_facts: kerf_scheduling::PodFactsCache::new(),
            watches_interrupted: false,
        }
    }

    /// A watch failed: until [`Manager::watches_resynced`], the state may miss whatever changed
    /// meanwhile (a pod bound to a node that looks empty, a node another actor started deleting),
    /// so the disruption controller takes no voluntary decision and carries out no pending
    /// consolidation on it. What does not depend on a complete view goes on: provisioning,
    /// commands already running, expiration, interruptions, termination.
    pub fn watches_interrupted(&mut self) {
        if !self.watches_interrupted {
            tracing::info!("a watch failed: voluntary disruption waits for every watch to list again");
        }
        self.watches_interrupted = true;
    }

    /// Every watch has listed again (the relist's changes already observed): decisions resume,
    /// taken afresh.
    pub fn watches_resynced(&mut self) {
        if self.watches_interrupted {
            self.watches_interrupted = false;
            self.disruption.generation += 1;
        }
    }

    /// Feed every watch event (in order) before calling [`Manager::reconcile`].
    pub fn observe(&mut self, event: &WatchEvent) {
        let (WatchEvent::Applied(obj) | WatchEvent::Deleted(obj)) = event;
        if matches!(obj, AnyObject::NodeClaim(_) | AnyObject::NodePool(_) | AnyObject::EC2NodeClass(_)) {
            self.pools.status_stale = true;
        }
        if self.changes_disruption(event) {
            self.disruption.generation += 1;
        }
        if let AnyObject::Pod(p) = obj {
            // consolidateAfter counts from the last pod bound to or leaving a node.
            let old = self.state.pod(
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default(),
            );
            let old_node = old.and_then(|o| util::pod_node_name(o)).map(str::to_string);
            let new_node = util::pod_node_name(p).map(str::to_string);
            let leaving = matches!(event, WatchEvent::Deleted(_)) || p.metadata.deletion_timestamp.is_some();
            // A bound pod going away from a node kerf is not disrupting: the workload shrank.
            if leaving
                && old.is_some_and(|o| o.metadata.deletion_timestamp.is_none())
                && let Some(n) = &old_node
                && self.state.node(n).is_some_and(|node| {
                    node.metadata.deletion_timestamp.is_none() && !crate::termination::is_disrupted(node)
                })
            {
                self.disruption.workload_shrank = true;
            }
            if old_node != new_node || leaving {
                self.disruption.pod_event_nodes.extend(old_node.into_iter().chain(new_node));
            }
        }
        match event {
            WatchEvent::Applied(obj) => {
                // A pool or node class whose spec changed may let pending pods fit; status
                // writes (kerf's own included) do not.
                let spec_changed = match obj {
                    AnyObject::NodePool(p) => self.state.node_pool(p.name()).is_none_or(|old| old.spec != p.spec),
                    // ... and so does a node class becoming Ready (or no longer).
                    AnyObject::EC2NodeClass(c) => {
                        let name = c.metadata.name.as_deref().unwrap_or_default();
                        self.state
                            .node_classes()
                            .get(name)
                            .is_none_or(|old| old.spec != c.spec || old.not_ready() != c.not_ready())
                    }
                    _ => false,
                };
                if spec_changed {
                    self.provisioning.batch.dirty = true;
                }
            }
            WatchEvent::Deleted(obj) => {
                if matches!(obj, AnyObject::NodeClaim(_) | AnyObject::Node(_) | AnyObject::Pod(_)) {
                    self.provisioning.batch.dirty = true;
                }
                if let AnyObject::NodeClaim(c) = obj {
                    self.lifecycle.launch_retry.remove(c.name());
                    // An instance launched for it that it never recorded is garbage now.
                    self.lifecycle.unrecorded_launches.remove(c.name());
                }
                if let AnyObject::NodePool(p) = obj {
                    self.pools.deleted.insert(p.name().to_string());
                }
            }
        }
        self.state.apply(event);
        self.forget_nominations(event);
    }

    /// Whether `event` can change a disruption decision. Status heartbeats (a Node's condition
    /// times, a Pod's container statuses) cannot: a settled cluster whose kubelets report every
    /// few seconds is not evaluated again for them.
    fn changes_disruption(&self, event: &WatchEvent) -> bool {
        match event {
            WatchEvent::Applied(AnyObject::Pod(p)) => {
                let Some(old) = self.state.pod(
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default(),
                ) else {
                    return true;
                };
                let status = |x: &Pod| {
                    x.status.as_ref().map(|s| (s.phase.clone(), s.nominated_node_name.clone())).unwrap_or_default()
                };
                old.metadata.deletion_timestamp != p.metadata.deletion_timestamp
                    || old.metadata.labels != p.metadata.labels
                    || old.metadata.annotations != p.metadata.annotations
                    || old.spec != p.spec
                    || status(old) != status(p)
                    || util::marked_unschedulable(old) != util::marked_unschedulable(p)
            }
            WatchEvent::Applied(AnyObject::Node(n)) => {
                let Some(old) = self.state.node(n.metadata.name.as_deref().unwrap_or_default()) else {
                    return true;
                };
                let allocatable = |x: &Node| x.status.as_ref().and_then(|s| s.allocatable.clone());
                old.metadata.deletion_timestamp != n.metadata.deletion_timestamp
                    || old.metadata.labels != n.metadata.labels
                    || old.metadata.annotations != n.metadata.annotations
                    || old.spec != n.spec
                    || allocatable(old) != allocatable(n)
                    || util::node_ready(old) != util::node_ready(n)
            }
            _ => true,
        }
    }

    /// A nomination ends when its pod is bound, finished or gone, or its claim is going away.
    fn forget_nominations(&mut self, event: &WatchEvent) {
        match event {
            WatchEvent::Applied(AnyObject::Pod(p))
                if util::pod_node_name(p).is_some()
                    || util::pod_terminal(p)
                    || p.metadata.deletion_timestamp.is_some() =>
            {
                self.provisioning.nominations.forget_pod(&crate::state::key_of(&p.metadata));
            }
            WatchEvent::Deleted(AnyObject::Pod(p)) => {
                self.provisioning.nominations.forget_pod(&crate::state::key_of(&p.metadata));
            }
            WatchEvent::Applied(AnyObject::NodeClaim(c)) if c.metadata.deletion_timestamp.is_some() => {
                self.provisioning.nominations.remove_claim(c.name());
            }
            WatchEvent::Deleted(AnyObject::NodeClaim(c)) => {
                self.provisioning.nominations.remove_claim(c.name());
            }
            _ => {}
        }
    }

    /// Runs each reconciler once at `now` (those waiting out an error backoff excepted); returns
    /// the earliest time any must run again even if nothing changes (`None`: only on change).
    /// A reconciler that fails is logged and retried with backoff while the others go on; the
    /// failures are handed out by [`Manager::take_errors`].
    pub async fn reconcile<C: ClusterApi>(&mut self, api: &C, now: Timestamp) -> Option<Timestamp> {
        for node in std::mem::take(&mut self.disruption.pod_event_nodes) {
            self.disruption.last_pod_event.insert(node, now);
        }
        if std::mem::take(&mut self.disruption.workload_shrank) {
            self.disruption.workload_shrank_at = Some(now);
        }
        let mut wake = None;
        for r in Reconciler::ALL {
            if let Some(at) = self.runtime.backing_off(r, now) {
                wake = util::earliest(wake, Some(at));
                continue;
            }
            let mut pass = Pass { now, wake: None, progressed: false };
            let result = self.run(r, api, &mut pass).await;
            wake = util::earliest(wake, pass.wake);
            match result {
                Ok(()) => self.runtime.succeeded(r),
                Err(e) => wake = util::earliest(wake, Some(self.runtime.failed(r, e, now, pass.progressed))),
            }
        }
        wake
    }

    async fn run<C: ClusterApi>(&mut self, r: Reconciler, api: &C, pass: &mut Pass) -> Result<(), ControllerError> {
        match r {
            Reconciler::NodeClassStatus => self.reconcile_node_classes(api, pass).await,
            Reconciler::NodePool => {
                // Pools whose claims are not all deleted yet are tried again on the retry.
                let deleted = self.pools.deleted.clone();
                if let Err(e) = self.delete_claims_of_deleted_pools(api, pass).await {
                    self.pools.deleted.extend(deleted);
                    return Err(e);
                }
                self.reconcile_static_pools(api, pass).await
            }
            Reconciler::Interruption => self.reconcile_interruptions(api, pass).await,
            Reconciler::CapacityBuffer => self.reconcile_buffers(api, pass).await,
            Reconciler::Provisioning => self.provision(api, pass).await,
            Reconciler::Lifecycle => self.reconcile_claims(api, pass).await,
            Reconciler::Termination => self.reconcile_node_termination(api, pass).await,
            Reconciler::GarbageCollection => self.garbage_collect(api, pass).await,
            Reconciler::Disruption => self.reconcile_disruption(api, pass).await,
            Reconciler::NodePoolStatus => {
                let r = self.reconcile_pool_status(api, pass).await;
                // Statuses not written are written on the retry.
                self.pools.status_stale |= r.is_err();
                r
            }
        }
    }

    /// The reconcilers that failed since the last call, with their errors, oldest first.
    pub fn take_errors(&mut self) -> Vec<(Reconciler, ControllerError)> {
        self.runtime.take_errors()
    }

    /// A reconciler's health: failures in a row, when it runs again, its last error.
    pub fn health(&self, r: Reconciler) -> &Health {
        self.runtime.health(r)
    }

    /// Every node kerf disrupted (or is disrupting), in decision order.
    pub fn disruptions(&self) -> &[crate::disruption::DisruptionRecord] {
        &self.disruption.records
    }

    /// Consolidations that were undone (the provisioner launched for pods they moved).
    pub fn consolidation_reversals(&self) -> &[crate::disruption::reversals::Reversal] {
        &self.disruption.reversals.records
    }

    /// How many times the disruption controller evaluated the cluster.
    pub fn disruption_evaluations(&self) -> u64 {
        self.disruption.evaluations
    }

    /// For each managed node kerf is not disrupting: why it would not remove or replace it now.
    pub fn disruption_blocked(&self) -> &BTreeMap<String, String> {
        &self.disruption.blocked
    }

    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    pub fn cloud(&self) -> &P {
        &self.cloud
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Pods nominated to in-flight NodeClaims: `(namespace, name)` → claim name.
    pub fn nominations(&self) -> &BTreeMap<ObjectKey, String> {
        &self.provisioning.nominations.by_pod
    }
}
