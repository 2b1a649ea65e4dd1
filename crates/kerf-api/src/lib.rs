//! kerf's API layer: the Karpenter v1 resource types, the well-known labels, annotations and
//! taints, Kubernetes quantities and resource lists, Go durations, validation, and the cluster API
//! the controllers speak (`cluster`, with the [`patch`]es it applies) and what event recorders do
//! with the events they emit (`events`).
//!
//! It also holds the vocabulary every layer above shares, so that the cloud, the scheduler, the
//! API server and the controllers build side by side on it rather than on each other:
//! - [`requirements`]: the meaning of the API's node selector requirements (the requirements
//!   algebra);
//! - [`instance`]: instance types and their offerings, as cloud providers describe them and the
//!   scheduler chooses among them;
//! - [`selector`]: label selector matching; [`intstr`]: int-or-percent values; [`node`]: node
//!   readiness;
//! - [`disruption_budgets`]: the PodDisruptionBudget arithmetic (which pods a budget selects,
//!   how many may be disrupted now), one home for the Eviction API and the disruption controller;
//! - [`overlay`]: NodeOverlays applied to instance types (the price of an offering after them);
//! - [`clock`]: the time seam (the wall clock itself is the cloud layer's).
//!
//! This crate does no I/O.

pub mod budget;
pub mod capacitybuffer;
pub mod capacityquota;
pub mod clock;
pub mod cluster;
pub mod convert;
pub mod crd;
pub mod crd_rules;
pub mod disruption_budgets;
pub mod duration;
pub mod ec2nodeclass;
pub mod events;
pub mod from_cluster;
pub mod hash;
pub mod instance;
pub mod intstr;
pub mod labels;
pub mod launch;
pub mod manifest;
pub mod node;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod overlay;
pub mod patch;
pub mod pod_facts;
pub mod pod_shapes;
pub mod provisioningrequest;
pub mod quantity;
pub mod requirements;
pub mod resources;
pub mod schema;
pub mod seeded;
pub mod selector;
pub mod shared;
pub mod slim_meta;
pub mod slim_pod;
pub mod str_pair;
pub mod validation;
mod weak_table;

pub use capacitybuffer::CapacityBuffer;
pub use capacityquota::CapacityQuota;
pub use duration::{GoDuration, NillableDuration};
pub use ec2nodeclass::EC2NodeClass;
pub use instance::{InstanceType, Offering, OfferingReservation};
pub use manifest::{KarpenterObject, Problem, decode, decode_karpenter};
pub use nodeclaim::NodeClaim;
pub use nodeoverlay::NodeOverlay;
pub use nodepool::NodePool;
pub use provisioningrequest::ProvisioningRequest;
pub use quantity::Quantity;
pub use requirements::{Incompatible, Requirement, Requirements};
pub use resources::ResourceList;
pub use shared::{Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, Operator, Taint, TaintEffect};
pub use slim_meta::{MetaView, SlimMeta};
pub use slim_pod::{PodShape, SlimContainer, SlimPod, SlimPodSpec, SlimPodStatus, SlimVolume};
pub use validation::{FieldError, validate_ec2_node_class, validate_node_claim, validate_node_pool};
