//! kerf's controllers. They reach the cluster only through the [`ClusterApi`] trait (defined in
//! `kerf_api::cluster`, re-exported here) and read time only from the `now` they are given, so
//! the same code runs in a cluster and in the simulator.
//!
//! [`Manager`] runs them: feed it every watch event with [`Manager::observe`], then call
//! [`Manager::reconcile`] with the current time; it answers when it must run again.
//!
//! Each reconciler is a type that owns its state (`Provisioner`, `Lifecycle`, `Termination`,
//! `GarbageCollection`, `Disruption`, `NodePools`, `NodeClasses`, `ProvisioningRequests`, `Buffers`,
//! `DeletionCosts`, `Overlays`, `DaemonRoom`),
//! takes in the watch events it cares about, and runs with a `Ctx` (see [`ctx`]): the cluster
//! API, the cloud, the informer cache, the options, and the facts reconcilers publish for one
//! another. No reconciler reads or writes another's state; what a restart must know is in the
//! cluster's objects, so a new `Manager` and its first sync carry on where a crashed one left.
//!
//! One reconcile runs each reconciler ([`Reconciler`]) in turn, in this order; each has its own
//! error policy (see [`runtime`]): one that fails is retried with backoff, the others go on.
//! - NodeOverlays first: when their specs change, one set of them is handed to the cloud
//!   provider (which prices and extends the instance types every later step reads, and the
//!   launches), and their status is written (see `overlays`).
//! 0. Node classes: the cloud provider resolves new or changed EC2NodeClasses and their status
//!    (Karpenter's conditions, `Ready` over them) is written. A NodePool whose node class is
//!    missing or not Ready launches nothing; its pods and its `NodeClassReady` condition say why.
//! 1. NodeClaims of deleted NodePools are deleted; NodePools with `spec.replicas` get exactly
//!    that many NodeClaims.
//! 2. ProvisioningRequests: each request's pod sets placed by the scheduling core together —
//!    check-capacity on what exists, best-effort-atomic launching every NodeClaim its plan
//!    needs or none — and the room booked until its pods arrive or the booking expires (see
//!    [`provisioning_requests`]). CapacityBuffers: each resolved into virtual pods (never Pod objects), placed on the room
//!    nodes and in-flight claims have left, published in cluster state for the provisioner
//!    (which places them after the real pods, launching what they lack) and for disruption
//!    (which keeps their room); their status written (see [`buffers`]).
//! 3. The provisioner: pods kube-scheduler marked unschedulable are batched (a window closes
//!    after `batch_idle` without new pods or `batch_max` in total), scheduled against existing
//!    nodes, in-flight NodeClaims and NodePools, and NodeClaims are created; pods placed on
//!    in-flight claims are nominated (a `Nominated` event) and not provisioned again while the
//!    claim launches; pods that fit nowhere get a `FailedScheduling` event saying why. Where a
//!    pod is expected to run is written as its `status.nominatedNodeName` once that node
//!    exists (see [`nominations`]).
//! 4. The NodeClaim lifecycle: launch, registration, initialization, liveness.
//! 5. Termination: nodes and claims being deleted are tainted, drained through the Eviction API
//!    in priority tiers, their instance deleted, then their finalizers removed.
//! 6. Garbage collection: instances without a claim, claims without an instance.
//! 7. Disruption: expiration, emptiness, drift, consolidation (multi- then single-node), and
//!    kerf's `Unfit`; spot interruption notices are acted on before provisioning.
//! 8. NodePool status: resources, node count, Ready. CapacityQuota status: `status.used` over
//!    the nodes each quota selects (see `quotas`; the provisioner and disruption keep new
//!    claims within the quotas through the scheduling core's input).
//! 9. With `PodDeletionCostManagement`: `controller.kubernetes.io/pod-deletion-cost` on the
//!    ReplicaSet pods of the nodes disruption would take first (see `deletion_cost`).

pub mod buffer_room;
pub mod buffers;
mod claims;
pub(crate) mod ctx;
pub mod daemon_room;
mod deletion_cost;
pub mod disruption;
mod error;
pub mod feature_gates;
mod garbage;
mod hashes;
mod input;
mod lifecycle;
pub mod manager;
mod marks;
mod nodeclass;
mod nodepool;
mod nominations;
mod options;
mod overlays;
mod pass;
mod patches;
pub mod pod_set;
mod provisioner;
pub mod provisioning_requests;
mod published;
pub mod quotas;
pub mod runtime;
pub mod state;
mod static_pools;
mod termination;
mod util;

pub use disruption::DisruptionRecord;
pub use manager::{ControllerError, Manager, Options};
pub use runtime::{Health, Reconciler};
pub use state::{ClusterState, ObjectKey};

#[cfg(test)]
mod daemon_room_tests;
#[cfg(test)]
mod interruption_tests;
#[cfg(test)]
mod nodeclass_tests;
#[cfg(test)]
mod provisioning_tests;
#[cfg(test)]
mod repair_tests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;
#[cfg(test)]
mod write_tests;
