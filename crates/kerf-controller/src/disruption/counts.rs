//! What disruption counts for `karpenter_nodeclaims_disrupted_total`,
//! `karpenter_pods_disruption_initiated_total` and `karpenter_pods_disrupted_total`, with
//! Karpenter v1.15's labels: a node's claim and its reschedulable pods count as initiated when
//! a command takes the node, and its pods as disrupted once the command deletes its claim (a
//! command given up before that disrupts nothing).

use std::collections::BTreeMap;

use kerf_api::nodepool::ConsolidationPolicy;

use super::Reason;

/// The labels of one series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DisruptionLabels {
    /// The reason in snake case: `underutilized`, `empty`, `drifted`, `expired`, `unhealthy`,
    /// `interrupted`, `unfit`.
    pub reason: &'static str,
    pub nodepool: String,
    pub capacity_type: String,
    /// The pool's policy in snake case for a consolidation (`empty`, `underutilized`); empty
    /// for every other reason.
    pub consolidation_policy: &'static str,
    /// `graceful` (drained within budgets and PDBs), `eventual` (the claim's
    /// terminationGracePeriod bounds the drain) or `forceful` (the node goes without waiting
    /// for its pods).
    pub termination_mode: &'static str,
}

impl DisruptionLabels {
    /// The labels of a node of NodePool `nodepool` (its consolidation policy `policy`) taken
    /// for `reason`; `grace`: its claim has a terminationGracePeriod.
    pub fn new(
        reason: Reason,
        policy: Option<ConsolidationPolicy>,
        nodepool: &str,
        capacity_type: &str,
        grace: bool,
    ) -> Self {
        let consolidation_policy = match (reason, policy) {
            (Reason::Empty | Reason::Underutilized, Some(ConsolidationPolicy::WhenEmpty)) => "when_empty",
            (Reason::Empty | Reason::Underutilized, Some(ConsolidationPolicy::Balanced)) => "balanced",
            (Reason::Empty | Reason::Underutilized, _) => "when_empty_or_underutilized",
            _ => "",
        };
        let termination_mode = if reason.is_forceful() || reason == Reason::Unhealthy {
            "forceful"
        } else if grace {
            "eventual"
        } else {
            "graceful"
        };
        DisruptionLabels {
            reason: reason.metric_name(),
            nodepool: nodepool.to_string(),
            capacity_type: capacity_type.to_string(),
            consolidation_policy,
            termination_mode,
        }
    }
}

/// The counts, by labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DisruptionCounts {
    /// Claims a command took.
    pub nodeclaims: BTreeMap<DisruptionLabels, u64>,
    /// Reschedulable pods on the nodes a command took.
    pub pods_initiated: BTreeMap<DisruptionLabels, u64>,
    /// Reschedulable pods on the nodes whose claims a command deleted.
    pub pods_disrupted: BTreeMap<DisruptionLabels, u64>,
}

impl DisruptionCounts {
    /// A command took a node with `pods` reschedulable pods.
    pub fn initiated(&mut self, labels: &DisruptionLabels, pods: usize) {
        *self.nodeclaims.entry(labels.clone()).or_default() += 1;
        *self.pods_initiated.entry(labels.clone()).or_default() += pods as u64;
    }

    /// A command deleted the claim of a node it took with `pods` reschedulable pods.
    pub fn disrupted(&mut self, labels: &DisruptionLabels, pods: usize) {
        *self.pods_disrupted.entry(labels.clone()).or_default() += pods as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_policy_only_for_consolidation_and_the_mode_by_reason_and_grace() {
        let balanced = Some(ConsolidationPolicy::Balanced);
        let l = DisruptionLabels::new(Reason::Underutilized, balanced, "p", "spot", false);
        assert_eq!((l.reason, l.consolidation_policy, l.termination_mode), ("underutilized", "balanced", "graceful"));
        let l = DisruptionLabels::new(Reason::Drifted, balanced, "p", "spot", true);
        assert_eq!((l.reason, l.consolidation_policy, l.termination_mode), ("drifted", "", "eventual"));
        let l = DisruptionLabels::new(Reason::Unhealthy, None, "p", "on-demand", false);
        assert_eq!((l.reason, l.termination_mode), ("unhealthy", "forceful"));
    }

    #[test]
    fn pods_count_as_disrupted_only_once_their_claim_is_deleted() {
        let l = DisruptionLabels::new(Reason::Empty, None, "p", "spot", false);
        let mut c = DisruptionCounts::default();
        c.initiated(&l, 3);
        assert_eq!((c.nodeclaims[&l], c.pods_initiated[&l]), (1, 3));
        assert!(c.pods_disrupted.is_empty());
        c.disrupted(&l, 3);
        assert_eq!(c.pods_disrupted[&l], 3);
    }
}
