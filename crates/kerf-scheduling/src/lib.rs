//! kerf's scheduling core: pure, synchronous and deterministic.
//!
//! Given existing nodes (and in-flight NodeClaims), NodePools with their instance types, and a
//! batch of pending pods, the [`Scheduler`](scheduler) decides where each pod goes: onto an
//! existing node, onto an in-flight claim, or onto a new NodeClaim — and for every pod it cannot
//! place, says exactly why.

pub mod bench;
pub mod instance;
pub mod model;
pub mod pod;
pub mod predicates;
pub mod requirements;
pub mod scheduler;
#[cfg(test)]
mod scheduler_tests;
#[cfg(test)]
pub(crate) mod testing;

pub use instance::{InstanceType, Offering};
pub use model::{ExistingNode, NewNodeClaim, NodePoolInput, Placement, PodError, SchedulingInput, SchedulingResult};
pub use predicates::{ClusterView, PreparedPod, Unfit, pod_requests};
pub use requirements::{Incompatible, Requirement, Requirements};
pub use scheduler::schedule;
