//! What every reconciler is handed when it runs ([`Ctx`]), what it may publish for the others
//! ([`Published`]), and the bookkeeping of one run ([`Pass`]).
//!
//! A reconciler owns its state and reaches everything else through its `Ctx`: the cluster API,
//! the cloud, the informer cache ([`ClusterState`], written only with what the API server
//! answered a write with, as the watch would deliver it), the options, and [`Published`]: the
//! facts and signals one reconciler makes known to the others, each field naming its writer.
//! Nothing a reconciler keeps is read or written by another.

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::cluster::{AnyObject, ApiError, WatchEvent};
use kerf_api::pod_facts;
use kerf_api::{NodeClaim, NodePool};
use kerf_cloud::{CloudError, CloudProvider, Timestamp};
use kerf_scheduling::{NewNodeClaim, PodFactsCache, PreferencePolicy};

use crate::input::{TypesByPool, View};
use crate::nominations::Nominations;
use crate::state::{ClusterState, key_of};
use crate::util::{self, SplitMix64};

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
    /// Karpenter's `preferencePolicy`: how pods' preferences shape provisioning and
    /// consolidation plans.
    pub preference_policy: PreferencePolicy,
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
            preference_policy: PreferencePolicy::default(),
            wall_clock_offset_ms: 0,
        }
    }
}

impl Options {
    /// The wall-clock instant disruption budget schedules are evaluated at for `now`.
    pub fn wall_clock(&self, now: Timestamp) -> Timestamp {
        Timestamp::from_millisecond(now.as_millisecond().saturating_add(self.wall_clock_offset_ms)).unwrap_or(now)
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

/// Writes (or cloud calls) a reconciler keeps in flight at once when it has many independent
/// ones to make (a burst of new claims, their launches, nominations): enough that a round trip's
/// latency does not limit a burst of thousands, few enough not to crowd out the API server's
/// other clients. Answers are taken in the order the calls were made, so what a pass records
/// does not depend on which answer came first.
pub(crate) const IN_FLIGHT: usize = 16;

/// One run of one reconciler: when it runs, when it must run again, whether it wrote anything.
#[derive(Debug)]
pub(crate) struct Pass {
    pub now: Timestamp,
    pub wake: Option<Timestamp>,
    /// A write of this pass went through (a failure after it does not grow the backoff).
    pub progressed: bool,
}

impl Pass {
    pub fn new(now: Timestamp) -> Self {
        Pass { now, wake: None, progressed: false }
    }

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

/// The provisioner launched a NodeClaim for pods (the disruption controller checks whether it
/// undoes a consolidation it watches).
#[derive(Debug, Clone)]
pub(crate) struct PodLaunch {
    pub claim: String,
    pub node_pool: String,
    /// `namespace/name` and owner key of each pod it was launched for.
    pub pods: Vec<(String, String)>,
    pub at: Timestamp,
}

/// What reconcilers make known to each other. Each field says who writes it and who reads it;
/// a flag is raised by anyone who saw the change and lowered only by its reader.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// Written by the provisioner: pods nominated to in-flight claims or existing nodes (ended
    /// by watch events here, see [`Published::observe`]). Read when building any scheduling
    /// input, and by disruption, which waits while any pod is nominated to a claim.
    pub nominations: Nominations,
    /// Written by the provisioner: a batch window is open. Disruption waits while it is.
    pub batch_open: bool,
    /// Written by whoever lists the NodePools' instance types: NodePool → why its types could
    /// not be listed the last time. Read by NodePool status and in pending pods' explanations.
    pub pool_errors: BTreeMap<String, String>,
    /// Raised when something other than a pod changed that may let pending pods fit (a
    /// NodePool's or node class's spec, a node class's readiness, a claim, node or pod gone);
    /// lowered by the provisioner.
    pub pending_may_fit: bool,
    /// Raised when a claim, pool, node class or type listing changed; lowered by NodePool status.
    pub pool_status_stale: bool,
    /// Written by the lifecycle reconciler: instances launched whose claim could not record
    /// them yet. Termination deletes the one of a claim it finalizes; garbage collection
    /// leaves them alone while their claim may still record them and drops them once not.
    pub unrecorded_launches: BTreeMap<String, NodeClaim>,
    /// Written by the lifecycle reconciler: launches asked of the cloud by this process (garbage
    /// collection skips listing an empty cloud again while this is unchanged).
    pub launches: u64,
    /// Written by the provisioner, taken by disruption: the claims launched for pods.
    pub pod_launches: Vec<PodLaunch>,
}

impl Published {
    pub fn new() -> Self {
        Published { pool_status_stale: true, ..Published::default() }
    }

    /// What a watch event ends or raises here (before the cluster state applies it).
    pub fn observe(&mut self, event: &WatchEvent, old: &ClusterState) {
        let (WatchEvent::Applied(obj) | WatchEvent::Deleted(obj)) = event;
        if matches!(obj, AnyObject::NodeClaim(_) | AnyObject::NodePool(_) | AnyObject::EC2NodeClass(_)) {
            self.pool_status_stale = true;
        }
        match event {
            WatchEvent::Applied(obj) => {
                // A pool or node class whose spec changed may let pending pods fit; status
                // writes (kerf's own included) do not.
                let spec_changed = match obj {
                    AnyObject::NodePool(p) => old.node_pool(p.name()).is_none_or(|was| was.spec != p.spec),
                    // ... and so does a node class becoming Ready (or no longer).
                    AnyObject::EC2NodeClass(c) => {
                        let name = c.metadata.name.as_deref().unwrap_or_default();
                        old.node_classes()
                            .get(name)
                            .is_none_or(|was| was.spec != c.spec || was.not_ready() != c.not_ready())
                    }
                    _ => false,
                };
                self.pending_may_fit |= spec_changed;
            }
            WatchEvent::Deleted(obj) => {
                if matches!(obj, AnyObject::NodeClaim(_) | AnyObject::Node(_) | AnyObject::SlimPod(_)) {
                    self.pending_may_fit = true;
                }
                // An instance launched for a deleted claim that it never recorded is garbage now.
                if let AnyObject::NodeClaim(c) = obj {
                    self.unrecorded_launches.remove(c.name());
                }
            }
        }
        // A nomination ends when its pod is bound, finished or gone, or its claim is going away.
        match event {
            WatchEvent::Applied(AnyObject::SlimPod(p))
                if util::pod_node_name(p).is_some()
                    || pod_facts::terminal(p)
                    || p.metadata.deletion_timestamp.is_some() =>
            {
                self.nominations.forget_pod(&key_of(&p.metadata));
            }
            WatchEvent::Deleted(AnyObject::SlimPod(p)) => self.nominations.forget_pod(&key_of(&p.metadata)),
            WatchEvent::Applied(AnyObject::NodeClaim(c)) if c.metadata.deletion_timestamp.is_some() => {
                self.nominations.remove_claim(c.name());
            }
            WatchEvent::Deleted(AnyObject::NodeClaim(c)) => self.nominations.remove_claim(c.name()),
            _ => {}
        }
    }
}

/// What a reconciler is handed for one run.
pub(crate) struct Ctx<'a, P, C> {
    pub api: &'a C,
    pub cloud: &'a P,
    pub options: &'a Options,
    /// The informer cache. Reconcilers read it, and record in it only the objects the API
    /// server answered their own writes with (read-your-writes, as the watch will deliver them).
    pub state: &'a mut ClusterState,
    pub published: &'a mut Published,
    /// NodeClaim names are drawn from one seeded generator, reconciler after reconciler.
    pub names: &'a mut SplitMix64,
    /// Parsed pod facts kept across the scheduling inputs built pass after pass.
    pub pod_facts: &'a PodFactsCache,
    /// A watch failed and has not listed again: the state may miss changes.
    pub watches_interrupted: bool,
    pub pass: Pass,
}

impl<P: CloudProvider, C> Ctx<'_, P, C> {
    /// The cluster as the scheduling core is shown it.
    pub fn view(&self) -> View<'_> {
        View { state: self.state, published: self.published, preference_policy: self.options.preference_policy }
    }

    /// Instance types of every live NodePool (see [`crate::input::instance_types_by_pool`]).
    pub async fn instance_types_by_pool(&mut self) -> TypesByPool {
        crate::input::instance_types_by_pool(self.cloud, self.state, self.published).await
    }

    /// A NodeClaim of `pool` for `new`, with a fresh name.
    pub fn new_claim(&mut self, pool: &NodePool, new: &NewNodeClaim) -> NodeClaim {
        crate::claims::new_claim(self.state, self.names, pool, new)
    }
}
