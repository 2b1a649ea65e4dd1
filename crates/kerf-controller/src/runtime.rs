//! The reconciler runtime: kerf's controllers are separate reconcilers, each with its own error
//! policy. A reconciler that fails is logged and retried after an exponential backoff with
//! jitter; the others keep running. The jitter comes from its own seeded generator, so the
//! simulator stays deterministic (and draws nothing while nothing fails).

use std::time::Duration;

use kerf_cloud::Timestamp;

use crate::error::ControllerError;
use crate::util::{self, SplitMix64};

/// kerf's reconcilers, in the order one pass runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reconciler {
    /// NodeOverlays: handed to the cloud provider when they change; their status.
    NodeOverlay,
    /// Resolves EC2NodeClasses through the cloud provider and writes their status.
    NodeClassStatus,
    /// NodeClaims of deleted NodePools; static pools' replicas.
    NodePool,
    /// Spot interruption notices.
    Interruption,
    /// ProvisioningRequests: answered, planned and launched; their booked room placed and
    /// published; their status.
    ProvisioningRequest,
    /// CapacityBuffers: their room resolved, placed and published; their status.
    CapacityBuffer,
    /// Pending pods → NodeClaims.
    Provisioning,
    /// Room made again for DaemonSet pods whose room on a node kerf launched was taken.
    DaemonSetRoom,
    /// NodeClaim launch, registration, initialization, liveness.
    Lifecycle,
    /// Draining and removing nodes and claims being deleted.
    Termination,
    /// Instances without claims, claims without instances.
    GarbageCollection,
    /// Emptiness, drift, consolidation, expiration.
    Disruption,
    /// NodePool resources, node count and conditions.
    NodePoolStatus,
    /// CapacityQuotas: `status.used` over the nodes each selects.
    CapacityQuotaStatus,
    /// `PodDeletionCostManagement`: pod-deletion-cost on the pods of the nodes disruption
    /// would take first.
    PodDeletionCost,
}

impl Reconciler {
    pub const ALL: [Reconciler; 15] = [
        Reconciler::NodeOverlay,
        Reconciler::NodeClassStatus,
        Reconciler::NodePool,
        Reconciler::Interruption,
        Reconciler::ProvisioningRequest,
        Reconciler::CapacityBuffer,
        Reconciler::Provisioning,
        Reconciler::DaemonSetRoom,
        Reconciler::Lifecycle,
        Reconciler::Termination,
        Reconciler::GarbageCollection,
        Reconciler::Disruption,
        Reconciler::NodePoolStatus,
        Reconciler::CapacityQuotaStatus,
        Reconciler::PodDeletionCost,
    ];

    /// Its name in logs (Karpenter's controller names where it has one).
    pub fn name(self) -> &'static str {
        match self {
            Reconciler::NodeOverlay => "nodeoverlay.validation",
            Reconciler::NodeClassStatus => "nodeclass.status",
            Reconciler::NodePool => "nodepool.static",
            Reconciler::Interruption => "interruption",
            Reconciler::ProvisioningRequest => "provisioningrequest",
            Reconciler::CapacityBuffer => "capacitybuffer",
            Reconciler::Provisioning => "provisioner",
            Reconciler::DaemonSetRoom => "daemonset.room",
            Reconciler::Lifecycle => "nodeclaim.lifecycle",
            Reconciler::Termination => "node.termination",
            Reconciler::GarbageCollection => "nodeclaim.garbagecollection",
            Reconciler::Disruption => "disruption",
            Reconciler::NodePoolStatus => "nodepool.status",
            Reconciler::CapacityQuotaStatus => "capacityquota.status",
            Reconciler::PodDeletionCost => "pod.deletioncost",
        }
    }
}

/// The first retry of a failed reconciler waits this long; each further failure doubles it.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// ... up to this.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5 * 60);

/// A reconciler's health: how often in a row it failed, when it runs again, and why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    pub failures: u32,
    pub retry_at: Option<Timestamp>,
    pub last_error: Option<String>,
}

/// Per-reconciler error policy and the failures since the driver last asked.
#[derive(Debug)]
pub(crate) struct Runtime {
    health: [Health; Reconciler::ALL.len()],
    jitter: SplitMix64,
    /// Failures not yet taken by [`Runtime::take_errors`].
    errors: Vec<(Reconciler, ControllerError)>,
}

impl Runtime {
    pub fn new(seed: u64) -> Self {
        Runtime {
            health: Default::default(),
            jitter: SplitMix64::new(seed ^ 0x6a09_e667_f3bc_c908),
            errors: Vec::new(),
        }
    }

    pub fn health(&self, r: Reconciler) -> &Health {
        &self.health[r as usize]
    }

    /// Whether `r` waits out a backoff at `now`; if so, when it runs again.
    pub fn backing_off(&self, r: Reconciler, now: Timestamp) -> Option<Timestamp> {
        self.health[r as usize].retry_at.filter(|t| now < *t)
    }

    pub fn succeeded(&mut self, r: Reconciler) {
        let h = &mut self.health[r as usize];
        if h.failures > 0 {
            tracing::info!(controller = r.name(), failures = h.failures, "reconciler recovered");
        }
        *h = Health::default();
    }

    /// Records a failure; returns when to retry: the backoff doubled per failure in a row, plus
    /// up to half of it again as jitter (so many failing reconcilers do not retry in step). A
    /// pass that `progressed` (some write went through before it failed) starts the count
    /// again: an API server that fails some calls is retried soon, one that fails every call
    /// ever more slowly.
    pub fn failed(&mut self, r: Reconciler, error: ControllerError, now: Timestamp, progressed: bool) -> Timestamp {
        let h = &mut self.health[r as usize];
        if progressed {
            h.failures = 0;
        }
        h.failures = h.failures.saturating_add(1);
        let exp = BACKOFF_BASE.saturating_mul(1u32 << (h.failures - 1).min(20)).min(BACKOFF_MAX);
        let jitter_ms = self.jitter.next_u64() % (exp.as_millis() as u64 / 2 + 1);
        let retry = util::after(now, exp + Duration::from_millis(jitter_ms));
        tracing::error!(controller = r.name(), error = %error, failures = h.failures, "reconciler failed; retrying at {retry}");
        h.retry_at = Some(retry);
        h.last_error = Some(error.to_string());
        self.errors.push((r, error));
        retry
    }

    pub fn take_errors(&mut self) -> Vec<(Reconciler, ControllerError)> {
        std::mem::take(&mut self.errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::cluster::ApiError;

    #[test]
    fn backoff_doubles_with_jitter_below_half_and_is_capped() {
        let mut rt = Runtime::new(7);
        let t0 = Timestamp::UNIX_EPOCH;
        let mut waits = Vec::new();
        for _ in 0..12 {
            let at = rt.failed(Reconciler::Provisioning, ControllerError::Api(ApiError::Other("x".into())), t0, false);
            waits.push(at.as_millisecond());
        }
        for (i, w) in waits.iter().enumerate() {
            let base = (1000i64 << i.min(20)).min(300_000);
            assert!(*w >= base && *w <= base + base / 2, "failure {}: {w} for base {base}", i + 1);
        }
        assert_eq!(rt.health(Reconciler::Provisioning).failures, 12);
        rt.succeeded(Reconciler::Provisioning);
        assert_eq!(rt.health(Reconciler::Provisioning), &Health::default());
        assert_eq!(rt.take_errors().len(), 12);
    }

    #[test]
    fn a_failure_after_some_progress_is_retried_after_the_first_backoff() {
        let mut rt = Runtime::new(7);
        let t0 = Timestamp::UNIX_EPOCH;
        let fail = |rt: &mut Runtime, progressed| {
            let e = ControllerError::Api(ApiError::Other("x".into()));
            rt.failed(Reconciler::Lifecycle, e, t0, progressed).as_millisecond()
        };
        for _ in 0..6 {
            fail(&mut rt, false);
        }
        assert_eq!(rt.health(Reconciler::Lifecycle).failures, 6);
        let at = fail(&mut rt, true);
        assert!((1000..=1500).contains(&at), "{at}");
        assert_eq!(rt.health(Reconciler::Lifecycle).failures, 1);
    }
}
