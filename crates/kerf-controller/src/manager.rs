//! The controller manager: feeds watch events to the cluster state and to each reconciler, and
//! runs every reconciler once per `reconcile`, returning when it must run again. It holds what
//! the reconcilers share (the informer cache, the published facts, the name generator) and
//! nothing any one of them decides with.

use std::collections::BTreeMap;

use kerf_cloud::{CloudProvider, Timestamp};
use kerf_scheduling::PodFactsCache;

use crate::buffers::Buffers;
use crate::ctx::Ctx;
use crate::daemon_room::DaemonRoom;
use crate::deletion_cost::DeletionCosts;
use crate::disruption::Disruption;
pub use crate::error::ControllerError;
use crate::garbage::GarbageCollection;
use crate::lifecycle::Lifecycle;
use crate::nodeclass::NodeClasses;
use crate::nodepool::NodePools;
pub use crate::options::Options;
use crate::overlays::Overlays;
use crate::pass::Pass;
use crate::provisioner::Provisioner;
use crate::provisioning_requests::ProvisioningRequests;
use crate::published::Published;
use crate::runtime::{Health, Reconciler, Runtime};
use crate::state::{ClusterState, ObjectKey};
use crate::termination::Termination;
use crate::util::{self, SplitMix64};
use kerf_api::cluster::{ClusterApi, WatchEvent};

/// Runs kerf's controllers against a cluster API and a cloud provider.
pub struct Manager<P: CloudProvider> {
    pub(crate) cloud: P,
    options: Options,
    pub(crate) state: ClusterState,
    pub(crate) published: Published,
    names: SplitMix64,
    pod_facts: PodFactsCache,
    /// A watch failed and has not listed again (see [`Manager::watches_interrupted`]).
    watches_interrupted: bool,
    runtime: Runtime,
    node_classes: NodeClasses,
    node_pools: NodePools,
    overlays: Overlays,
    requests: ProvisioningRequests,
    quotas: crate::quotas::CapacityQuotas,
    buffers: Buffers,
    provisioner: Provisioner,
    daemon_room: DaemonRoom,
    lifecycle: Lifecycle,
    termination: Termination,
    garbage: GarbageCollection,
    pub(crate) disruption: Disruption,
    deletion_costs: DeletionCosts,
}

impl<P: CloudProvider> Manager<P> {
    pub fn new(cloud: P, options: Options) -> Self {
        cloud.set_reserved_capacity(options.reserved_capacity);
        Manager {
            names: SplitMix64::new(options.seed),
            runtime: Runtime::new(options.seed),
            cloud,
            options,
            state: ClusterState::new(),
            published: Published::new(),
            pod_facts: PodFactsCache::new(),
            watches_interrupted: false,
            node_classes: NodeClasses::default(),
            node_pools: NodePools::default(),
            overlays: Overlays::default(),
            requests: ProvisioningRequests::default(),
            quotas: crate::quotas::CapacityQuotas::default(),
            buffers: Buffers::default(),
            provisioner: Provisioner::default(),
            daemon_room: DaemonRoom::default(),
            lifecycle: Lifecycle::default(),
            termination: Termination,
            garbage: GarbageCollection::default(),
            disruption: Disruption::default(),
            deletion_costs: DeletionCosts::default(),
        }
    }

    /// A watch failed: until [`Manager::watches_resynced`], the state may miss whatever changed
    /// meanwhile, so the disruption controller takes no voluntary decision and carries out no
    /// pending consolidation. What does not depend on a complete view goes on.
    pub fn watches_interrupted(&mut self) {
        if !self.watches_interrupted {
            tracing::info!("a watch failed: voluntary disruption waits for every watch to list again");
        }
        self.watches_interrupted = true;
    }

    /// Every watch has listed again (the relist's changes already observed): decisions resume.
    pub fn watches_resynced(&mut self) {
        if std::mem::take(&mut self.watches_interrupted) {
            self.disruption.resynced();
        }
    }

    /// Feed every watch event (in order) before calling [`Manager::reconcile`].
    /// A whole Pod an event carries is kept as a [`kerf_api::SlimPod`], made once here.
    pub fn observe(&mut self, event: &WatchEvent) {
        let event = &*event.kept();
        self.published.observe(event, &self.state);
        self.disruption.observe(event, &self.state);
        self.lifecycle.observe(event);
        self.state.apply(event);
    }

    /// Runs each reconciler once at `now` (those waiting out an error backoff excepted); returns
    /// the earliest time any must run again even if nothing changes (`None`: only on change).
    /// A reconciler that fails is logged and retried with backoff while the others go on; the
    /// failures are handed out by [`Manager::take_errors`].
    pub async fn reconcile<C: ClusterApi>(&mut self, api: &C, now: Timestamp) -> Option<Timestamp> {
        self.disruption.begin_round(now);
        let mut wake = None;
        for r in Reconciler::ALL {
            if let Some(at) = self.runtime.backing_off(r, now) {
                wake = util::earliest(wake, Some(at));
                continue;
            }
            let mut cx = Ctx {
                api,
                cloud: &self.cloud,
                options: &self.options,
                state: &mut self.state,
                published: &mut self.published,
                names: &mut self.names,
                pod_facts: &self.pod_facts,
                watches_interrupted: self.watches_interrupted,
                pass: Pass::new(now),
            };
            let result = match r {
                Reconciler::NodeOverlay => self.overlays.reconcile(&mut cx).await,
                Reconciler::NodeClassStatus => self.node_classes.reconcile(&mut cx).await,
                Reconciler::NodePool => self.node_pools.reconcile(&mut cx).await,
                Reconciler::Interruption => self.disruption.reconcile_interruptions(&mut cx).await,
                Reconciler::ProvisioningRequest => self.requests.reconcile(&mut cx).await,
                Reconciler::CapacityBuffer => self.buffers.reconcile(&mut cx).await,
                Reconciler::Provisioning => self.provisioner.reconcile(&mut cx).await,
                Reconciler::DaemonSetRoom => self.daemon_room.reconcile(&mut cx).await,
                Reconciler::Lifecycle => self.lifecycle.reconcile(&mut cx).await,
                Reconciler::Termination => self.termination.reconcile(&mut cx).await,
                Reconciler::GarbageCollection => self.garbage.reconcile(&mut cx).await,
                Reconciler::Disruption => self.disruption.reconcile(&mut cx).await,
                Reconciler::NodePoolStatus => self.node_pools.reconcile_status(&mut cx).await,
                Reconciler::CapacityQuotaStatus => self.quotas.reconcile(&mut cx).await,
                Reconciler::PodDeletionCost => self.deletion_costs.reconcile(&mut cx).await,
            };
            let Pass { wake: pass_wake, progressed, .. } = cx.pass;
            wake = util::earliest(wake, pass_wake);
            match result {
                Ok(()) => self.runtime.succeeded(r),
                Err(e) => wake = util::earliest(wake, Some(self.runtime.failed(r, e, now, progressed))),
            }
        }
        wake
    }

    /// The reconcilers that failed since the last call, with their errors, oldest first.
    pub fn take_errors(&mut self) -> Vec<(Reconciler, ControllerError)> {
        self.runtime.take_errors()
    }

    /// A reconciler's health: failures in a row, when it runs again, its last error.
    pub fn health(&self, r: Reconciler) -> &Health {
        self.runtime.health(r)
    }

    /// Every room made for a DaemonSet pod (pods evicted from its node), in order.
    pub fn daemon_rooms(&self) -> &[crate::daemon_room::RoomRecord] {
        &self.daemon_room.records
    }

    /// Every node kerf disrupted (or is disrupting), in decision order.
    pub fn disruptions(&self) -> &[crate::disruption::DisruptionRecord] {
        &self.disruption.records
    }

    /// The nodes node repair rebooted or replaced, in order.
    pub fn repairs(&self) -> &[crate::disruption::RepairRecord] {
        &self.disruption.repairs
    }

    /// Consolidations that were undone (the provisioner launched for pods they moved).
    pub fn consolidation_reversals(&self) -> &[crate::disruption::reversals::Reversal] {
        &self.disruption.reversals.records
    }

    /// The nodes and pods disruption took and disrupted so far, by Karpenter's labels.
    pub fn disruption_counts(&self) -> &crate::disruption::counts::DisruptionCounts {
        &self.disruption.counts
    }

    /// The consolidations taken so far by pool, and how many Balanced would have refused.
    pub fn balanced_what_if(&self) -> &crate::disruption::balanced::WhatIfCounts {
        &self.disruption.balanced_what_if
    }

    /// The consolidation moves weighed so far, by pool, policy and decision, and the Balanced
    /// scores among them.
    pub fn consolidation_moves(&self) -> &crate::disruption::balanced::MoveCounts {
        &self.disruption.consolidation_moves
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

    /// The room CapacityBuffers keep and where it is held, as the buffer reconciler last
    /// published it.
    pub fn buffer_room(&self) -> &crate::buffer_room::BufferRoom {
        &self.published.buffer_room
    }

    /// The room booked for provisioned ProvisioningRequests and where it is held, as the
    /// request reconciler last published it.
    pub fn booked_room(&self) -> &crate::buffer_room::BufferRoom {
        &self.published.booked_room
    }

    pub fn cloud(&self) -> &P {
        &self.cloud
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Pods nominated to in-flight NodeClaims: `(namespace, name)` → claim name.
    pub fn nominations(&self) -> &BTreeMap<ObjectKey, String> {
        &self.published.nominations.by_pod
    }
}
