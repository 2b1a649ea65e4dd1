//! Why a NodePool takes no new claim for a pod ([`Why`]): what `pool_fit` answers, the groups
//! of `preferences` keep per level and pool, and `explain` puts into words. A leaf of its own so
//! that the check and the groups it reads need not import each other.

use std::sync::Arc;

use super::quotas::QuotaShort;
use crate::requirements::{Incompatible, Requirement};

/// Why a pod cannot go on a new claim of a NodePool.
#[derive(Clone, Debug)]
pub(super) enum Why {
    /// The pool's taint at this index is not tolerated.
    Taint(usize),
    /// The pool's requirements and the pod's cannot both hold.
    Requirements(Arc<Incompatible>),
    NoInstanceTypes,
    /// A host port the pod asks for is taken by a DaemonSet pod on every type.
    DaemonSetPort,
    /// No instance type has the resource at this index at all.
    NoResource(usize),
    /// No value satisfies both the pool's and the pod's requirements (interned) for some key.
    Unsatisfiable(u32),
    /// No instance type with an available offering satisfies the requirements `req`
    /// (interned); `excluding`: the one requirement that alone excludes every type, if any.
    NoOffering {
        req: u32,
        excluding: Option<Box<(String, Requirement)>>,
    },
    /// No compatible type fits the pod's requests: per resource no type has enough of, that
    /// resource's index and the compatible type with the most of it left after DaemonSets.
    TooSmall {
        short: Vec<(usize, usize)>,
    },
    /// The pool's node limit is used up.
    NodeLimit,
    /// No compatible type that fits is within the pool's remaining resource limits.
    Limits,
    /// Every compatible type that fits (within the pool's limits) is kept out by a
    /// CapacityQuota that selects it: the first such quota, and where it falls short.
    Quota(QuotaShort),
    /// The fitting types offer only `have` distinct values of `key`, where minValues asks `min`.
    MinValues {
        key: String,
        min: usize,
        have: usize,
    },
    /// The level's spread constraint at this index cannot be met on a new node.
    Spread(usize),
    PodAffinity,
    PodAntiAffinity,
}

impl Why {
    /// Whether the pool was kept out by its limits alone.
    pub(super) fn is_limit(&self) -> bool {
        matches!(self, Why::NodeLimit | Why::Limits | Why::Quota(_))
    }
}
