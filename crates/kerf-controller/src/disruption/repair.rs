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
//! - Like drift, the pods that fit nowhere else get a replacement launched first (a static
//!   pool's: one node from its template); then the claim is deleted with `karpenter.sh/nodeclaim-termination-timestamp` set to now, so the drain
//!   deletes what is left on the node without waiting (its kubelet may never answer).
//! - With `RebootForRepair`, a node due for repair that was never rebooted is rebooted instead
//!   (not tainted, not drained; its pods stay bound), held back by the same 20% limit,
//!   `do-not-repair` and budgets. The claim records the reboot ([`labels::REBOOTED_AT`], written before the cloud
//!   is asked, so a restarted controller does not reboot it again) and the toleration then
//!   counts from the reboot or the condition's last transition, whichever is later: a node
//!   still (or again) unhealthy that long after its reboot is replaced. Until it reports Ready
//!   again, for at most [`REBOOT_WINDOW`], a rebooted node counts against its pool's budgets as
//!   a node being disrupted. A cloud that cannot reboot (or refuses) gets the node replaced.
//! - Where the replacement cannot launch first (a static pool at its node limit; a full
//!   reservation holding the node, its pods fitting nowhere else), Karpenter's
//!   `TerminateFirstRepair` gate deletes the node first and its room is refilled; without the
//!   gate it waits, saying why (the rule is [`super::terminate_first`]'s, as for drift).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kerf_api::NodeClaim;
use kerf_api::cluster::{ClusterApi, EventRecord, Object, Patch};
use kerf_api::labels;
use kerf_api::nodepool::DisruptionReason;
use kerf_cloud::repair::{RepairPolicy, matching};
use kerf_cloud::{CloudProvider, Timestamp};

use super::candidates::{Budgets, Candidate};
use super::terminate_first::{CannotGrow, full_reservation, static_limit};
use super::{Command, Disruption, Reason};
use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::input::TypesByPool;
pub use crate::marks::REBOOT_WINDOW;
use crate::marks::{is_disrupted, rebooted_at, rebooting};
use crate::static_pools::{static_count, static_new_claim};
use crate::util;

/// A pool whose unhealthy nodes are more than this share of its nodes is not repaired.
pub(crate) const UNHEALTHY_THRESHOLD_PERCENT: usize = 20;

/// The first of a node's conditions a repair policy matches, and since when it holds.
pub(crate) fn unhealthy(node: &Node, policies: &[RepairPolicy]) -> Option<(RepairPolicy, Timestamp)> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find_map(|c| {
        let p = matching(policies, &c.type_, &c.status)?;
        Some((p, c.last_transition_time.as_ref().map(|t| t.0)?))
    })
}

/// What node repair does to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RepairAction {
    /// Rebooted in place (`RebootForRepair`).
    Reboot,
    /// Replaced: its claim deleted (after a replacement launched, when its pods need one).
    Replace,
}

impl RepairAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RepairAction::Reboot => "Reboot",
            RepairAction::Replace => "Replace",
        }
    }
}

/// One node node repair acted on.
#[derive(Debug, Clone, PartialEq)]
pub struct RepairRecord {
    pub at: Timestamp,
    pub action: RepairAction,
    pub node_claim: String,
    pub node: String,
    pub node_pool: String,
    pub capacity_type: String,
    pub image_id: String,
    /// The condition it was repaired for (`AcceleratedHardwareReady`).
    pub condition: &'static str,
    /// Why, in words.
    pub detail: String,
}

/// A node repair reboots rather than replaces.
#[derive(Debug, Clone)]
pub(super) struct Reboot {
    claim: String,
    node: String,
    pool: String,
    condition: &'static str,
    detail: String,
    /// The detail of the node's replacement, if the cloud does not reboot it.
    replace_detail: String,
}

/// What repair decided this evaluation.
pub(super) enum Repair {
    Replace(Command),
    Reboot(Reboot),
}

impl Reboot {
    /// The node it reboots.
    pub(super) fn node(&self) -> &str {
        &self.node
    }
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
    /// Whether the node is in a reboot (it then takes a place in the pool's budget already).
    rebooting: bool,
    /// Whether it was rebooted before (then it is replaced).
    rebooted: bool,
    /// How far past its toleration, as a share of the toleration (the most overdue goes first).
    overdue: f64,
}

impl Disruption {
    /// The repair of this evaluation, if any. Nodes repair would act on but does not get why in
    /// `blocked`; `wake` gets the earliest time a tolerated condition runs out.
    pub(super) async fn repair_command<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &Ctx<'_, P, C>,
        types: &TypesByPool,
        budgets: &Budgets,
        blocked: &mut BTreeMap<String, String>,
        wake: &mut Option<Timestamp>,
    ) -> Option<Repair> {
        let now = cx.pass.now;
        let policies = cx.cloud.repair_policies();
        let state = &cx.state;
        // Pool → (its nodes, those with a matching condition).
        let mut health: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        let mut due: Vec<Due> = Vec::new();
        for (name, node) in state.nodes() {
            let Some(claim) = state.claim_for_node(node) else { continue };
            let Some(pool) = util::claim_pool(claim) else { continue };
            if state.node_pool(pool).is_none() {
                continue;
            }
            let count = health.entry(pool).or_default();
            count.0 += 1;
            let Some((policy, since)) = unhealthy(node, policies) else { continue };
            count.1 += 1;
            // After a reboot, the toleration counts from it.
            let rebooted = rebooted_at(claim);
            let since = rebooted.map_or(since, |r| since.max(r));
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
                pool: pool.to_string(),
                policy,
                since,
                rebooting: rebooting(claim, node, now),
                rebooted: rebooted.is_some(),
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
            // A node in its reboot holds its place in the budget: replacing it takes no other.
            if budgets.allowed_for_repair(pool) + usize::from(d.rebooting) == 0 {
                blocked.insert(
                    d.node.clone(),
                    format!("{condition}; {}", budgets.describe(pool, DisruptionReason::Unhealthy)),
                );
                continue;
            }
            let Some(claim) = state.node_claim(&d.claim).cloned() else { continue };
            let toleration = kerf_api::duration::human(d.policy.toleration.as_secs() as i64);
            if cx.options.reboot_for_repair && !d.rebooted {
                command = Some(Repair::Reboot(Reboot {
                    claim: d.claim.clone(),
                    node: d.node.clone(),
                    pool: d.pool.clone(),
                    condition: d.policy.condition,
                    detail: format!("{condition} (rebooted after {toleration})"),
                    replace_detail: format!("{condition} (repaired after {toleration})"),
                }));
                continue;
            }
            let detail = if d.rebooted {
                format!("{condition} after its reboot (replaced after {toleration})")
            } else {
                format!("{condition} (repaired after {toleration})")
            };
            match self.repair_replacement(cx, &claim, types, detail, &condition) {
                Ok(cmd) => command = Some(Repair::Replace(cmd)),
                Err(why) => {
                    blocked.insert(d.node.clone(), why);
                }
            }
        }
        command
    }

    /// The command replacing a broken node's claim, its replacement launched first: for a
    /// static pool one node from its template, else what its pods need. Where the pool's
    /// capacity cannot grow ([`terminate_first`](super::terminate_first)), the node goes first
    /// with `TerminateFirstRepair`; without it, `Err` says why it waits.
    fn repair_replacement<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        claim: &NodeClaim,
        types: &TypesByPool,
        detail: String,
        condition: &str,
    ) -> Result<Command, String> {
        let cand = self.forced_candidate(cx, claim, types);
        let gate = cx.options.terminate_first_repair;
        let n = cand.pods.len();
        let first = |cand: Candidate, full: CannotGrow| {
            let detail = full.terminate_first_detail(&detail, n);
            Command::new(Reason::Unhealthy, vec![cand], Vec::new(), detail, Vec::new())
        };
        if let Some(pool) = cx.state.node_pool(&cand.pool).filter(|p| p.is_static()) {
            let count = static_count(cx.state, pool);
            if let Some(full) = static_limit(&cand.pool, &count) {
                return match gate {
                    true => Ok(first(cand, full)),
                    false => Err(format!("{condition}, but {} and cannot stage a replacement", full.describe())),
                };
            }
            // A pool over its replicas is being scaled down: nothing to replace.
            let new = static_new_claim(pool, types.get(&cand.pool).map(Vec::as_slice).unwrap_or_default());
            let replacements =
                if count.live > count.want || new.instance_types.is_empty() { Vec::new() } else { vec![new] };
            return Ok(Command::new(Reason::Unhealthy, vec![cand], replacements, detail, Vec::new()));
        }
        let (replacements, moves, unplaced) = self.replacements_and_unplaced(cx, &cand, types);
        if let Some(pod) = unplaced
            && let Some(full) = full_reservation(cx.state.node_pools(), types, &cand)
        {
            return match gate {
                true => Ok(first(cand, full)),
                false => Err(format!("{condition}, but {} and pod {pod} would fit nowhere else", full.describe())),
            };
        }
        Ok(Command::new(Reason::Unhealthy, vec![cand], replacements, detail, moves))
    }

    /// Reboots the node of a repair: the claim records it first, then the cloud is asked. A
    /// cloud that cannot (or will not) reboot gets the node replaced now, and the record goes.
    pub(super) async fn reboot<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        r: Reboot,
        types: &TypesByPool,
    ) -> Result<(), ControllerError> {
        let now = cx.pass.now;
        let annotate = |v: serde_json::Value| {
            Patch::Merge(serde_json::json!({"metadata": {"annotations": {labels::REBOOTED_AT: v}}}))
        };
        let written = cx.api.patch::<NodeClaim>(None, &r.claim, &annotate(now.to_string().into())).await;
        let Some(claim) = cx.pass.soft("recording the reboot", written)? else { return Ok(()) };
        cx.state.record(claim.clone().into_any());
        let uids = (cx.state.uid_of("Node", &r.node), claim.metadata.uid.clone());
        let event = |kind: &'static str, type_: &'static str, reason: &str, message: &str| EventRecord {
            kind,
            name: if kind == "Node" { r.node.clone() } else { r.claim.clone() },
            uid: if kind == "Node" { uids.0.clone() } else { uids.1.clone() },
            type_,
            reason: reason.to_string(),
            message: message.to_string(),
        };
        match cx.cloud.reboot(&claim).await {
            Ok(()) => {
                tracing::info!(NodeClaim = %r.claim, Node = %r.node, detail = %r.detail, "rebooting node for repair");
                let message = format!("Rebooting Node for repair: {}", r.detail);
                for kind in ["Node", kerf_api::nodeclaim::KIND] {
                    cx.api.record_event(event(kind, "Normal", "RebootIssued", &message)).await;
                }
                self.repairs.push(RepairRecord {
                    at: now,
                    action: RepairAction::Reboot,
                    node_claim: r.claim,
                    node: r.node,
                    node_pool: r.pool,
                    capacity_type: claim_label(&claim, labels::CAPACITY_TYPE),
                    image_id: claim.status.as_ref().and_then(|s| s.image_id.clone()).unwrap_or_default(),
                    condition: r.condition,
                    detail: r.detail,
                });
                Ok(())
            }
            Err(e) => {
                tracing::warn!(NodeClaim = %r.claim, Node = %r.node, error = %e, "cannot reboot node for repair; replacing it");
                let message = format!("Cannot reboot Node for repair ({e}); replacing it");
                for kind in ["Node", kerf_api::nodeclaim::KIND] {
                    cx.api.record_event(event(kind, "Warning", "RebootFailed", &message)).await;
                }
                let undone = cx.api.patch::<NodeClaim>(None, &r.claim, &annotate(serde_json::Value::Null)).await;
                let Some(claim) = cx.pass.soft("clearing the reboot record", undone)? else { return Ok(()) };
                cx.state.record(claim.clone().into_any());
                let cmd = self.forced_command(cx, &claim, types, Reason::Unhealthy, r.replace_detail);
                self.execute(cx, cmd).await
            }
        }
    }

    /// The record of a repair replacing `claim` (its claim is being deleted now).
    pub(super) fn record_replacement<P: CloudProvider, C>(&mut self, cx: &Ctx<'_, P, C>, claim: &str, node: &str) {
        let Some(c) = cx.state.node_claim(claim) else { return };
        let condition =
            cx.state.node(node).and_then(|n| unhealthy(n, cx.cloud.repair_policies())).map_or("", |(p, _)| p.condition);
        let detail = self
            .records
            .iter()
            .rev()
            .find(|x| x.node_claim == claim && x.reason == Reason::Unhealthy)
            .map(|x| x.detail.clone())
            .unwrap_or_default();
        self.repairs.push(RepairRecord {
            at: cx.pass.now,
            action: RepairAction::Replace,
            node_claim: claim.to_string(),
            node: node.to_string(),
            node_pool: claim_label(c, labels::NODE_POOL),
            capacity_type: claim_label(c, labels::CAPACITY_TYPE),
            image_id: c.status.as_ref().and_then(|s| s.image_id.clone()).unwrap_or_default(),
            condition,
            detail,
        });
    }
}

fn claim_label(claim: &NodeClaim, key: &str) -> String {
    util::label(&claim.metadata, key).unwrap_or_default().to_string()
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
