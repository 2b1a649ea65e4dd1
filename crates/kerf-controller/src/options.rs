//! The controllers' tunables ([`Options`]): what the composition root (the `kerf controller`
//! command, the simulator) chooses, and every reconciler reads.

use std::time::Duration;

use kerf_cloud::Timestamp;
use kerf_scheduling::PreferencePolicy;

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
    /// Karpenter's `NodeRepair` gate: nodes whose conditions stay unhealthy past the cloud's
    /// repair policies are replaced (see `disruption::repair`).
    pub node_repair: bool,
    /// Karpenter's `PodDeletionCostManagement` gate: kerf writes
    /// `controller.kubernetes.io/pod-deletion-cost` on the pods of the nodes it would disrupt
    /// first, so a ReplicaSet's scale-down empties them (see `deletion_cost`).
    pub pod_deletion_cost_management: bool,
    /// The AWS provider's `RebootForRepair` gate: with `node_repair`, a node due for repair is
    /// rebooted once before it is replaced (see `disruption::repair`).
    pub reboot_for_repair: bool,
    /// Karpenter's `TerminateFirstDrift` gate: a drifted node whose replacement cannot be staged
    /// first (its static pool is at its node limit, or its capacity reservation is full) is
    /// deleted first, and its room refilled (see `disruption::methods::drift` and
    /// `static_drift`). Without it such a node waits, saying why.
    pub terminate_first_drift: bool,
    /// Karpenter's `TerminateFirstRepair` gate: the same rule for node repair (see
    /// `disruption::terminate_first`): a broken node whose replacement cannot launch first is
    /// deleted first. Without it such a node waits, saying why.
    pub terminate_first_repair: bool,
    /// Karpenter's `ReservedCapacity` gate (on by default): off, the cloud offers no capacity
    /// reservations (see `CloudProvider::set_reserved_capacity`).
    pub reserved_capacity: bool,
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
            node_repair: false,
            pod_deletion_cost_management: false,
            reboot_for_repair: false,
            terminate_first_drift: false,
            terminate_first_repair: false,
            reserved_capacity: true,
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
