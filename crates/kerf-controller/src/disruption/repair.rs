//! Node repair (Karpenter's `NodeRepair` gate): a node whose condition stays unhealthy past the
//! cloud's repair policy (`Ready` False or Unknown for 30 minutes, `AcceleratedHardwareReady`
//! False for 10, ...; see [`kerf_cloud::repair`]) is replaced, as the first disruption method.
//!
//! - The toleration counts from the condition's `lastTransitionTime`; the node whose condition
//!   is most overdue (relative to its toleration) goes first, one per evaluation.
//! - `karpenter.sh/do-not-repair: "true"` on the Node keeps it.
//! - A pool with more than 20% of its nodes unhealthy (any matching condition, tolerated or not;
//!   rounded up, so one node in a small pool is not held back) is not repaired: a failure that
//!   wide is more likely the cluster's than the nodes', and replacing them would not help. Its
//!   nodes get a `NodeRepairBlocked` event and say so in their reason.
//! - The pool's budgets for the `Unhealthy` reason apply to the nodes being disrupted or
//!   deleted; nodes that are merely NotReady do not take budget (they are unavailable already,
//!   and with them counted two failed nodes in a pool of ten would never be repaired).
//! - Like drift, the pods that fit nowhere else get a replacement launched first; then the claim
//!   is deleted with `karpenter.sh/nodeclaim-termination-timestamp` set to now, so the drain
//!   deletes what is left on the node without waiting (its kubelet may never answer).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kerf_api::cluster::{ClusterApi, EventRecord};
use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use kerf_cloud::repair::{RepairPolicy, matching};
use kerf_cloud::{CloudProvider, Timestamp};

use super::candidates::Budgets;
use super::{Command, Disruption, Reason};
use crate::ctx::Ctx;
use crate::input::TypesByPool;
use crate::marks::is_disrupted;
use crate::util;

/// A pool whose unhealthy nodes are more than this share of its nodes is not repaired.
pub(crate) const UNHEALTHY_THRESHOLD_PERCENT: usize = 20;

/// The first of a node's conditions a repair policy matches, and since when it holds.
fn unhealthy(node: &Node, policies: &[RepairPolicy]) -> Option<(RepairPolicy, Timestamp)> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find_map(|c| {
        let p = matching(policies, &c.type_, &c.status)?;
        Some((p, c.last_transition_time.as_ref().map(|t| t.0)?))
    })
}

/// How many unhealthy nodes a pool of `total` tolerates before repair stops.
pub(crate) fn unhealthy_allowed(total: usize) -> usize {
    (total * UNHEALTHY_THRESHOLD_PERCENT).div_ceil(100)
}

/// A node repair would act on now.
struct Due {
    node: String,
    claim: String,
    pool: String,
    policy: RepairPolicy,
    since: Timestamp,
    /// How far past its toleration, as a share of the toleration (the most overdue goes first).
    overdue: f64,
}

impl Disruption {
    /// The repair command of this evaluation, if any. Nodes repair would act on but does not
    /// get why in `blocked`; `wake` gets the earliest time a tolerated condition runs out.
    pub(super) async fn repair_command<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &Ctx<'_, P, C>,
        types: &TypesByPool,
        budgets: &Budgets,
        blocked: &mut BTreeMap<String, String>,
        wake: &mut Option<Timestamp>,
    ) -> Option<Command> {
        let now = cx.pass.now;
        let policies = cx.cloud.repair_policies();
        let state = &cx.state;
        // Pool → (its nodes, those with a matching condition).
        let mut health: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        let mut due: Vec<Due> = Vec::new();
        for (name, node) in state.nodes() {
            let Some(claim) = state.claim_for_node(node) else { continue };
            let Some(pool) = claim.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE_POOL)) else { continue };
            if state.node_pool(pool).is_none() {
                continue;
            }
            let count = health.entry(pool.as_str()).or_default();
            count.0 += 1;
            let Some((policy, since)) = unhealthy(node, policies) else { continue };
            count.1 += 1;
            let deleting = node.metadata.deletion_timestamp.is_some() || claim.metadata.deletion_timestamp.is_some();
            if deleting || is_disrupted(node) || self.is_disrupting(claim.name()) {
                continue;
            }
            let at = util::after(since, policy.toleration);
            if now < at {
                *wake = util::earliest(*wake, Some(at));
                continue;
            }
            let past = (now.as_millisecond() - at.as_millisecond()) as f64;
            due.push(Due {
                node: name.clone(),
                claim: claim.name().to_string(),
                pool: pool.clone(),
                policy,
                since,
                overdue: past / (policy.toleration.as_millis().max(1) as f64),
            });
        }
        due.sort_by(|a, b| b.overdue.total_cmp(&a.overdue).then_with(|| a.node.cmp(&b.node)));
        let mut command = None;
        for d in due {
            let held = (now.as_millisecond() - d.since.as_millisecond()).max(0);
            let condition = format!(
                "its {} condition has been {} for {}",
                d.policy.condition,
                d.policy.status,
                kerf_api::duration::human(held / 1000)
            );
            let node = state.node(&d.node);
            let annotated = node
                .and_then(|n| n.metadata.annotations.as_ref())
                .and_then(|a| a.get(labels::DO_NOT_REPAIR))
                .is_some_and(|v| v == "true");
            if annotated {
                blocked.insert(
                    d.node.clone(),
                    format!("{condition}, but node {} is annotated {}=true", d.node, labels::DO_NOT_REPAIR),
                );
                continue;
            }
            let (total, sick) = health.get(d.pool.as_str()).copied().unwrap_or((0, 0));
            if sick > unhealthy_allowed(total) {
                let why = format!(
                    "{condition}, but {sick} of NodePool {}'s {total} nodes are unhealthy (more than {UNHEALTHY_THRESHOLD_PERCENT}%): kerf does not repair a pool failing that widely",
                    d.pool
                );
                if self.blocked.get(&d.node) != Some(&why) {
                    cx.api
                        .record_event(EventRecord {
                            kind: "Node",
                            name: d.node.clone(),
                            uid: state.uid_of("Node", &d.node),
                            type_: "Warning",
                            reason: "NodeRepairBlocked".to_string(),
                            message: format!(
                                "Cannot repair Node: more than {UNHEALTHY_THRESHOLD_PERCENT}% of nodes in NodePool {} are unhealthy",
                                d.pool
                            ),
                        })
                        .await;
                }
                blocked.insert(d.node.clone(), why);
                continue;
            }
            if command.is_some() {
                blocked.insert(d.node.clone(), format!("{condition}; another node is repaired first"));
                continue;
            }
            let Some(pool) = state.node_pool(&d.pool) else { continue };
            if budgets.allowed_for_repair(pool) == 0 {
                blocked.insert(
                    d.node.clone(),
                    format!("{condition}; {}", budgets.describe(pool, DisruptionReason::Unhealthy)),
                );
                continue;
            }
            let Some(claim) = state.node_claim(&d.claim).cloned() else { continue };
            let detail = format!(
                "{condition} (repaired after {})",
                kerf_api::duration::human(d.policy.toleration.as_secs() as i64)
            );
            command = Some(self.forced_command(cx, &claim, types, Reason::Unhealthy, detail));
        }
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifth_of_a_pool_rounded_up_may_be_unhealthy() {
        assert_eq!(unhealthy_allowed(1), 1);
        assert_eq!(unhealthy_allowed(5), 1);
        assert_eq!(unhealthy_allowed(10), 2);
        assert_eq!(unhealthy_allowed(11), 3);
        assert_eq!(unhealthy_allowed(0), 0);
    }
}
