//! Node repair policies: which node conditions mean a node is broken, and for how long each is
//! tolerated before the node is replaced. They are the cloud's to declare (an agent on its
//! images reports the hardware conditions); every provider kerf has runs the same EKS images
//! and declares [`EKS_REPAIR_POLICIES`].

use std::time::Duration;

/// One unhealthy state of a node condition and how long it is tolerated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    /// The Node condition type (`Ready`, `AcceleratedHardwareReady`, ...).
    pub condition: &'static str,
    /// The status that is unhealthy (`False`, `Unknown`).
    pub status: &'static str,
    /// How long the condition may hold that status, counted from its `lastTransitionTime`,
    /// before the node is repaired.
    pub toleration: Duration,
}

const fn policy(condition: &'static str, status: &'static str, minutes: u64) -> RepairPolicy {
    RepairPolicy { condition, status, toleration: Duration::from_secs(minutes * 60) }
}

/// The kubelet's Ready condition, and the conditions the EKS node monitoring agent reports.
pub const EKS_REPAIR_POLICIES: &[RepairPolicy] = &[
    policy("Ready", "False", 30),
    policy("Ready", "Unknown", 30),
    policy("AcceleratedHardwareReady", "False", 10),
    policy("StorageReady", "False", 30),
    policy("NetworkingReady", "False", 30),
    policy("KernelReady", "False", 30),
    policy("ContainerRuntimeReady", "False", 30),
];

/// The policy a condition `(type, status)` matches, if any.
pub fn matching(policies: &[RepairPolicy], condition: &str, status: &str) -> Option<RepairPolicy> {
    policies.iter().find(|p| p.condition == condition && p.status == status).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_condition_matches_only_its_unhealthy_status() {
        let p = matching(EKS_REPAIR_POLICIES, "AcceleratedHardwareReady", "False").map(|p| p.toleration);
        assert_eq!(p, Some(Duration::from_secs(600)));
        assert!(matching(EKS_REPAIR_POLICIES, "AcceleratedHardwareReady", "True").is_none());
        assert!(matching(EKS_REPAIR_POLICIES, "Ready", "True").is_none());
        assert!(matching(EKS_REPAIR_POLICIES, "MemoryPressure", "True").is_none());
        assert_eq!(matching(EKS_REPAIR_POLICIES, "Ready", "Unknown").map(|p| p.toleration.as_secs()), Some(1800));
    }
}
