//! kerf's API layer: the Karpenter v1 resource types, the well-known labels, annotations and
//! taints, Kubernetes quantities and resource lists, Go durations, validation, and the cluster API
//! the controllers speak (`cluster`) and what event recorders do with the events they emit
//! (`events`).
//!
//! This crate does no I/O.

pub mod budget;
pub mod capacitybuffer;
pub mod cluster;
pub mod convert;
pub mod crd;
pub mod crd_rules;
pub mod duration;
pub mod ec2nodeclass;
pub mod events;
pub mod hash;
pub mod labels;
pub mod manifest;
pub mod nodeclaim;
pub mod nodepool;
pub mod quantity;
pub mod resources;
pub mod schema;
pub mod seeded;
pub mod shared;
pub mod validation;

pub use capacitybuffer::CapacityBuffer;
pub use duration::{GoDuration, NillableDuration};
pub use ec2nodeclass::EC2NodeClass;
pub use manifest::{KarpenterObject, Problem, decode, decode_karpenter};
pub use nodeclaim::NodeClaim;
pub use nodepool::NodePool;
pub use quantity::Quantity;
pub use resources::ResourceList;
pub use shared::{Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, Operator, Taint, TaintEffect};
pub use validation::{FieldError, validate_ec2_node_class, validate_node_claim, validate_node_pool};
