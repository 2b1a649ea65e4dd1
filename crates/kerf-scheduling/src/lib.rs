//! kerf's scheduling core: pure, synchronous and deterministic.
//!
//! Given existing nodes (and in-flight NodeClaims), NodePools with their instance types, and a
//! batch of pending pods, the Scheduler ([`schedule`]) decides where each pod goes: onto an
//! existing node, onto an in-flight claim, or onto a new NodeClaim — and for every pod it cannot
//! place, says exactly why.
//!
//! - [`requirements`]: the requirements algebra (value and complement sets, integer bounds,
//!   minValues, intersection, compatibility with precise errors); it lives in `kerf_api` with
//!   [`instance`] types and offerings, so that the cloud layer uses them without the scheduler.
//! - [`pod`]: what a pod asks of a node (requests, tolerations, node affinity, spread, pod
//!   affinity, host ports, volumes).
//! - [`fit`]: the one node-fit check (kube-scheduler's filters, in its order and words).
//! - [`predicates`]: kube-scheduler's filters and preferences on existing nodes ([`ClusterView`]).
//! - [`scheduler`]: the provisioning Scheduler.
//! - [`bench`](mod@bench): the generated benchmark workload of `kerf bench scheduling`.
//! - [`packing_bound`]: the LP lower bound on the cheapest fleet that `kerf bench packing`
//!   measures the Scheduler against.
//! - [`volume_binding`]: the PersistentVolumeClaims that keep a pod off every node.
//! - [`volume_limits`]: EBS volume attach limits, counted as one more resource.
//! - [`disruption_budgets`] (from `kerf_api`): the pods each PodDisruptionBudget selects, counted
//!   as they change.

pub mod bench;
#[cfg(test)]
mod context_tests;
pub mod fit;
mod index_hash;
pub mod kube_choice;
pub mod model;
pub mod node_labels;
pub mod packing_bound;
pub mod pod;
pub mod predicates;
#[cfg(test)]
mod preference_policy_tests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod reservation_tests;
pub mod scheduler;
#[cfg(test)]
mod scheduler_tests;
#[cfg(test)]
pub(crate) mod testing;
pub mod volume_binding;
#[cfg(test)]
mod volume_limit_tests;
pub mod volume_limits;

// The model the cloud and the scheduler share lives in the API layer below both; re-exported here
// so that users of the scheduling core reach it through this crate too.
pub use kerf_api::{disruption_budgets, instance, node, requirements};

pub use instance::{InstanceType, Offering};
pub use model::{
    ExistingNode, NAMESPACE_NAME_LABEL, NewNodeClaim, NodePoolInput, Placement, PodError, PreferencePolicy,
    PricedClaim, QuotaInput, SchedulingInput, SchedulingResult, UnknownNode, WhatIf, namespace_labels,
};
pub use node_labels::NodeLabels;
pub use predicates::{ClusterView, PreferenceParts, PreparedPod, Unfit, pod_requests};
pub use requirements::{Incompatible, Requirement, Requirements};
pub use scheduler::{
    KeptKubeView, KubeReplay, PodFactsCache, PoolTypeView, Replacement, SchedulingContext, Turn, schedule,
};
