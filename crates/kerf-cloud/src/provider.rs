//! The seam between kerf's controllers and a cloud.

use std::future::Future;
use std::sync::Arc;

use kerf_api::InstanceType;
use kerf_api::ec2nodeclass::EC2NodeClassStatus;
use kerf_api::overlay::NodeOverlays;
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};

/// Provider IDs of instances that are only Node objects (`kerf controller --cloud kwok`): the
/// provider creates the Node, and a simulated kubelet (kwok, `kerf serve`) makes it Ready.
pub const KWOK_PROVIDER_ID_PREFIX: &str = "kwok://";

/// The one drift every provider shares: the claim's node class changed a launch setting since
/// the claim was created. The claim carries the class's static hash from its launch, with the
/// version of the algorithm that made it; the class's current hash is the one kerf's node class
/// controller wrote on it (with kerf's version), else the hash of its spec now. A claim whose
/// hash version is not kerf's (Karpenter launched it, or a kerf with another algorithm) is not
/// compared: its hash means nothing to kerf's, and the NodeClaim lifecycle stamps it again with
/// the current hash (see `kerf_api::hash`). A class annotation with another version (Karpenter's,
/// not yet replaced by kerf's) is not compared with either. Providers add only the facts they
/// alone know (AMIs, subnets and security groups of the instance).
pub fn node_class_hash_drift(claim: &NodeClaim, node_class: &EC2NodeClass) -> Option<String> {
    node_class_hash_drift_with(claim, node_class, EC2NodeClass::static_hash)
}

/// [`node_class_hash_drift`], the hash of a node class's spec from `static_hash` (a cache of
/// [`EC2NodeClass::static_hash`]).
pub fn node_class_hash_drift_with(
    claim: &NodeClaim,
    node_class: &EC2NodeClass,
    static_hash: impl FnOnce(&EC2NodeClass) -> String,
) -> Option<String> {
    use kerf_api::hash::EC2NODECLASS_HASH_VERSION;
    use kerf_api::labels::{NODECLASS_HASH, NODECLASS_HASH_VERSION};
    let ours = |a: &std::collections::BTreeMap<String, String>| {
        a.get(NODECLASS_HASH_VERSION).is_some_and(|v| v == EC2NODECLASS_HASH_VERSION)
    };
    let claim_annotations = claim.metadata.annotations.as_ref().filter(|a| ours(a))?;
    let claim_hash = claim_annotations.get(NODECLASS_HASH)?;
    let class_hash = node_class.metadata.annotations.as_ref().filter(|a| ours(a)).and_then(|a| a.get(NODECLASS_HASH));
    let drifted = match class_hash {
        Some(h) => claim_hash != h,
        None => *claim_hash != static_hash(node_class),
    };
    drifted.then(|| "NodeClassDrift".to_string())
}

/// `AMIDrift` when the claim's image is not among the images its node class resolves to now
/// (a class that resolved none, or a claim without an image id, is not judged).
pub fn ami_drift(claim: &NodeClaim, node_class: &EC2NodeClass) -> Option<String> {
    let amis = &node_class.status.as_ref()?.amis;
    let image = claim.status.as_ref()?.image_id.as_deref()?;
    (!amis.is_empty() && !amis.iter().any(|a| a.id == image)).then(|| "AMIDrift".to_string())
}

/// What can go wrong talking to a cloud.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CloudError {
    /// None of the claim's candidate offerings could be launched right now. The provider has
    /// marked the failed offerings unavailable; the caller should delete the claim and retry.
    #[error("insufficient capacity: {0}")]
    InsufficientCapacity(String),
    /// The instance does not exist (any more).
    #[error("instance {0} not found")]
    NotFound(String),
    /// The NodePool's node class is missing or not ready.
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    /// The request itself is malformed. (A claim no instance type can satisfy is reported as
    /// `InsufficientCapacity`, as Karpenter does, so that the claim is replaced.)
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The operation applies only to spot instances (an interruption warning) and this
    /// instance runs with another capacity type.
    #[error("instance {instance} is {capacity_type}: interruption warnings apply only to spot instances")]
    NotSpot { instance: String, capacity_type: String },
    /// The cloud has no such operation (a provider that cannot reboot an instance in place):
    /// the caller does without it.
    #[error("not supported by this cloud: {0}")]
    NotSupported(String),
    #[error("cloud provider error: {0}")]
    Other(String),
}

/// What the cloud said is happening to an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterruptionKind {
    /// The spot instance is reclaimed shortly (two minutes on EC2).
    SpotInterruption,
    /// The spot instance is at elevated risk of interruption. Karpenter only records it.
    RebalanceRecommendation,
    /// The instance is stopping, stopped, shutting down or terminated.
    StateChange { state: String },
    /// Scheduled maintenance or retirement of the instance's host.
    ScheduledChange,
    /// The capacity block the instance runs in ends soon: EC2 reclaims its instances ahead of the
    /// end, and Karpenter drains them before that.
    CapacityBlockEnding,
    /// The owner of the interruptible capacity reservation the instance runs in takes the
    /// capacity back: EC2 terminates the instance shortly (two minutes), and Karpenter drains it
    /// as it does a spot interruption.
    CapacityReservationInterruption,
}

impl InterruptionKind {
    /// Whether the node must be drained and replaced now (every kind but a rebalance
    /// recommendation, which is only recorded, as Karpenter does).
    pub fn requires_drain(&self) -> bool {
        !matches!(self, InterruptionKind::RebalanceRecommendation)
    }

    /// The reason of the Event recorded on the NodeClaim and Node (Karpenter's names).
    pub fn event_reason(&self) -> &'static str {
        match self {
            InterruptionKind::SpotInterruption => "SpotInterrupted",
            InterruptionKind::RebalanceRecommendation => "SpotRebalanceRecommendation",
            InterruptionKind::StateChange { state } if state == "stopping" || state == "stopped" => "InstanceStopping",
            InterruptionKind::StateChange { .. } => "InstanceTerminating",
            InterruptionKind::ScheduledChange => "InstanceUnhealthy",
            InterruptionKind::CapacityBlockEnding => "CapacityReservationExpiring",
            InterruptionKind::CapacityReservationInterruption => "CapacityReservationInterrupted",
        }
    }

    /// The kind as Karpenter names it in its interruption metrics' `message_type` label.
    pub fn metric_name(&self) -> &'static str {
        match self {
            InterruptionKind::SpotInterruption => "spot_interrupted",
            InterruptionKind::RebalanceRecommendation => "rebalance_recommendation",
            InterruptionKind::StateChange { .. } => "instance_state_change",
            InterruptionKind::ScheduledChange => "scheduled_change",
            InterruptionKind::CapacityBlockEnding => "capacity_reservation_expiring",
            InterruptionKind::CapacityReservationInterruption => "capacity_reservation_interrupted",
        }
    }
}

impl std::fmt::Display for InterruptionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InterruptionKind::SpotInterruption => f.write_str("SpotInterruption"),
            InterruptionKind::RebalanceRecommendation => f.write_str("RebalanceRecommendation"),
            InterruptionKind::StateChange { state } => write!(f, "StateChange ({state})"),
            InterruptionKind::ScheduledChange => f.write_str("ScheduledChange"),
            InterruptionKind::CapacityBlockEnding => f.write_str("CapacityBlockEnding"),
            InterruptionKind::CapacityReservationInterruption => f.write_str("CapacityReservationInterruption"),
        }
    }
}

/// A notice from the cloud that an instance is going away (e.g. a spot interruption warning).
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptionNotice {
    pub provider_id: String,
    /// What the cloud said.
    pub kind: InterruptionKind,
    /// When the cloud takes the instance away, if it said.
    pub terminates_at: Option<crate::Timestamp>,
}

/// What a node class resolved to in the cloud.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClassResolution {
    /// The node class's new status: what its selector terms found (subnets, security groups,
    /// AMIs, instance profile) and Karpenter's conditions (`SubnetsReady`, `SecurityGroupsReady`,
    /// `AMIsReady`, `InstanceProfileReady`, `ValidationSucceeded`, and `Ready` over them).
    pub status: EC2NodeClassStatus,
    /// When to resolve it again although it did not change (what it selects may change in the
    /// cloud; a call that failed should be retried). `None`: only when it changes.
    pub recheck_after: Option<std::time::Duration>,
}

/// A cloud that can launch and remove machines for NodeClaims.
///
/// Methods are async because real clouds are remote; the simulated provider answers at once.
pub trait CloudProvider: Send + Sync {
    /// Launches one instance for `claim`, choosing among the instance types and offerings its
    /// requirements allow (cheapest available first, spot preferred when allowed). Returns the
    /// claim with `status` filled in (providerID, capacity, allocatable) and its labels set to
    /// the launched instance type, zone and capacity type.
    fn create(&self, claim: &NodeClaim) -> impl Future<Output = Result<NodeClaim, CloudError>> + Send;

    /// Terminates the claim's instance. `NotFound` when it is already gone.
    fn delete(&self, claim: &NodeClaim) -> impl Future<Output = Result<(), CloudError>> + Send;

    /// The instance with this provider ID, described as a NodeClaim.
    fn get(&self, provider_id: &str) -> impl Future<Output = Result<NodeClaim, CloudError>> + Send;

    /// Every instance this provider launched for the cluster, described as NodeClaims (shared:
    /// a provider that keeps its launches' claims hands them out without copying each). Each
    /// names its instance (name, provider ID); a provider that has to build them may leave out
    /// what does not identify the instance (garbage collection reads no more), where `get`
    /// describes it whole.
    fn list(&self) -> impl Future<Output = Result<Vec<Arc<NodeClaim>>, CloudError>> + Send;

    /// The instance types the pool may launch, with offerings, prices and availability,
    /// and allocatable computed with the node class's kubelet settings.
    fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> impl Future<Output = Result<Vec<Arc<InstanceType>>, CloudError>> + Send;

    /// Resolves what the node class selects and says whether instances can be launched with it
    /// (its `Ready` condition). Launches for the node class use what was resolved here. Parts
    /// the cloud could not be asked about read `Unknown`; `Err` only when nothing could be done.
    fn resolve_node_class(
        &self,
        node_class: &EC2NodeClass,
    ) -> impl Future<Output = Result<NodeClassResolution, CloudError>> + Send;

    /// Why the claim's instance no longer matches its node class, if it does not.
    fn is_drifted(
        &self,
        claim: &NodeClaim,
        node_class: Option<&EC2NodeClass>,
    ) -> impl Future<Output = Result<Option<String>, CloudError>> + Send;

    /// Notices received since the last call (oldest first): instances the cloud is about to take
    /// away. The provider marks the offerings involved unavailable itself (it owns that cache).
    /// Clouds without such notices keep the default: none.
    fn interruptions(&self) -> impl Future<Output = Result<Vec<InterruptionNotice>, CloudError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// The name the claim's Node will have, when the provider knows it before the Node
    /// registers (a kwok Node is named after its claim and appears, Ready, the moment it is
    /// launched). Pods kerf plans onto the claim are nominated to that name before the launch, so
    /// kube-scheduler holds their room from the moment the Node appears instead of handing it to
    /// whichever pending pod it tries first. Clouds that name nodes at boot keep the default: not
    /// known until the Node registers.
    fn expected_node_name<'c>(&self, claim: &'c NodeClaim) -> Option<&'c str> {
        let _ = claim;
        None
    }

    /// The node conditions this cloud's nodes are repaired for, and how long each is tolerated
    /// (node repair, Karpenter's `NodeRepair` gate). Every provider kerf has runs EKS images.
    fn repair_policies(&self) -> &'static [crate::repair::RepairPolicy] {
        crate::repair::EKS_REPAIR_POLICIES
    }

    /// Restarts the claim's instance in place (node repair with the AWS provider's
    /// `RebootForRepair` gate). Returns once the cloud accepted the request; the node's return
    /// is seen on its Node. `NotFound` when the instance is gone. Clouds that cannot reboot keep
    /// the default, `NotSupported`, and repair replaces the node instead.
    fn reboot(&self, claim: &NodeClaim) -> impl Future<Output = Result<(), CloudError>> + Send {
        let what = format!("rebooting the instance of NodeClaim {}", claim.name());
        async move { Err(CloudError::NotSupported(what)) }
    }

    /// The cluster's NodeOverlays changed: from now on the instance types this provider hands
    /// out and the offerings it launches are priced, and their capacity extended, as `overlays`
    /// say (docs/design.md, "NodeOverlay"). Clouds that do not apply overlays keep the default:
    /// list prices and the types' own capacity.
    fn set_node_overlays(&self, overlays: Arc<NodeOverlays>) {
        let _ = overlays;
    }

    /// Karpenter's `ReservedCapacity` gate (on unless set): off, the provider resolves no
    /// capacity reservations into node class statuses, offers no `reserved` offerings, and
    /// drifts no node for the reservation it runs in (docs/design.md, "Capacity reservations").
    /// Clouds without reservations ignore it.
    fn set_reserved_capacity(&self, enabled: bool) {
        let _ = enabled;
    }

    /// A short name for logs (`aws`, `sim`).
    fn name(&self) -> &'static str;
}

/// A provider shared behind an `Arc` (the controllers hold one handle, whoever drives the cloud
/// another) is the provider.
impl<P: CloudProvider> CloudProvider for Arc<P> {
    fn create(&self, claim: &NodeClaim) -> impl Future<Output = Result<NodeClaim, CloudError>> + Send {
        P::create(self, claim)
    }

    fn delete(&self, claim: &NodeClaim) -> impl Future<Output = Result<(), CloudError>> + Send {
        P::delete(self, claim)
    }

    fn get(&self, provider_id: &str) -> impl Future<Output = Result<NodeClaim, CloudError>> + Send {
        P::get(self, provider_id)
    }

    fn list(&self) -> impl Future<Output = Result<Vec<Arc<NodeClaim>>, CloudError>> + Send {
        P::list(self)
    }

    fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> impl Future<Output = Result<Vec<Arc<InstanceType>>, CloudError>> + Send {
        P::instance_types(self, node_pool, node_class)
    }

    fn resolve_node_class(
        &self,
        node_class: &EC2NodeClass,
    ) -> impl Future<Output = Result<NodeClassResolution, CloudError>> + Send {
        P::resolve_node_class(self, node_class)
    }

    fn is_drifted(
        &self,
        claim: &NodeClaim,
        node_class: Option<&EC2NodeClass>,
    ) -> impl Future<Output = Result<Option<String>, CloudError>> + Send {
        P::is_drifted(self, claim, node_class)
    }

    fn interruptions(&self) -> impl Future<Output = Result<Vec<InterruptionNotice>, CloudError>> + Send {
        P::interruptions(self)
    }

    fn expected_node_name<'c>(&self, claim: &'c NodeClaim) -> Option<&'c str> {
        P::expected_node_name(self, claim)
    }

    fn repair_policies(&self) -> &'static [crate::repair::RepairPolicy] {
        P::repair_policies(self)
    }

    fn reboot(&self, claim: &NodeClaim) -> impl Future<Output = Result<(), CloudError>> + Send {
        P::reboot(self, claim)
    }

    fn set_node_overlays(&self, overlays: Arc<NodeOverlays>) {
        P::set_node_overlays(self, overlays)
    }

    fn set_reserved_capacity(&self, enabled: bool) {
        P::set_reserved_capacity(self, enabled)
    }

    fn name(&self) -> &'static str {
        P::name(self)
    }
}
