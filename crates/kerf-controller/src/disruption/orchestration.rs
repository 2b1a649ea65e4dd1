//! Running the disruption controller: when to evaluate, the methods in order, validation, and
//! carrying out commands (taint, pre-spin replacements, delete, wait for termination).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kerf_api::nodeclaim::{CONDITION_DISRUPTION_REASON, CONDITION_INITIALIZED};
use kerf_api::nodepool::DisruptionReason;
use kerf_api::pod_facts;
use kerf_api::shared::set_condition;
use kerf_api::{NodeClaim, labels};
use kerf_cloud::CloudProvider;

use super::balanced::{MoveCounts, deciding, policy_name, score_as_balanced, score_move};
use super::candidates::{Candidate, budget_reason, within_budget};
use super::consolidation::{Decision, deletion_ranking, what_if};
use super::counts::DisruptionLabels;
use super::in_flight::{Destination, planned_moves};
use super::methods::drift::Drift;
use super::methods::emptiness::Emptiness;
use super::methods::multi_node::MultiNode;
use super::methods::single_node::SingleNode;
use super::methods::static_drift::StaticDrift;
use super::methods::{Eval, Method, consolidation_command};
use super::repair::Repair;
use super::{
    Command, Disruption, DisruptionRecord, Phase, Reason, Running, SINGLE_NODE_MAX_EVALUATIONS, SWEEP_CONTINUE,
};
use crate::ClusterState;
use crate::claims::in_flight;
use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::marks::{is_disrupted, with_disrupted_taint, without_disrupted_taint};
use crate::patches::{changes, pinned, status_changes};
use crate::published::DeletionRanking;
use crate::static_pools::{StaticCount, static_count};
use crate::util;
use kerf_api::cluster::{ClusterApi, EventRecord, Object, Patch};
use kerf_api::events::same_apart_from_numbers;

impl Disruption {
    /// Something is still moving: a pod kube-scheduler has not tried yet, a pod waiting for a
    /// launch, a launch, or an open provisioning batch. Disruption waits for it.
    fn settling<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>) -> bool {
        self.settling_on(cx).is_some()
    }

    /// What disruption waits for (see [`Disruption::settling`]), in words, if anything.
    fn settling_on<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>) -> Option<String> {
        if cx.published.batch_open {
            return Some("a provisioning batch is open".to_string());
        }
        if let Some(((ns, name), claim)) = cx.published.nominations.by_pod.iter().next() {
            let n = cx.published.nominations.by_pod.len();
            return Some(format!("{n} pod(s) nominated to launches, e.g. {ns}/{name} to {claim}"));
        }
        let reserved = &self.reserved;
        if let Some(c) = cx.state.node_claims().values().find(|c| in_flight(c) && !reserved.contains(c.name())) {
            return Some(format!("NodeClaim {} is not initialized", c.name()));
        }
        let unjudged = cx.state.unbound_pods().find(|(_, p)| {
            pod_facts::daemonset_owner(p).is_none()
                && p.metadata.deletion_timestamp.is_none()
                && !util::marked_unschedulable(p)
        });
        unjudged.map(|((ns, name), _)| format!("pod {ns}/{name} is not bound and not marked unschedulable"))
    }

    /// Logs (at debug) what holds the next evaluation back when that changes (other than in
    /// its numbers).
    fn note_holding(&mut self, why: Option<String>) {
        let same = match (&why, &self.holding) {
            (Some(a), Some(b)) => same_apart_from_numbers(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        if !same {
            match &why {
                Some(w) => tracing::debug!(waiting_for = %w, "disruption waits"),
                None => tracing::debug!("disruption no longer waits"),
            }
            self.holding = why;
        }
    }

    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        self.reversals.load(cx.state, cx.pass.now);
        self.note_launches(cx).await;
        self.progress(cx).await?;
        self.persist_holds(cx).await?;
        self.persist_watches(cx).await?;
        self.release_outdated(cx).await?;
        self.expire(cx).await?;
        // A view a failed watch may have left stale decides nothing (a pending decision is
        // validated once the watches have listed again).
        if cx.watches_interrupted {
            return Ok(());
        }
        if let Some((cmd, at)) = self.validating.take() {
            if cx.pass.now >= at {
                return self.validate(cx, cmd).await;
            }
            if !self.drift_due(cx, &cmd).await {
                self.validating = Some((cmd, at));
                cx.pass.wake_at(at);
                return Ok(());
            }
            // Drift comes before consolidation (Karpenter's order of methods): the pending
            // consolidation is dropped for the evaluation below, which takes the drift, and
            // weighed again from scratch afterwards.
            self.abandon(cx, &cmd, "drifted nodes are due, and drift comes before consolidation").await;
            if let Some(p) = self.prepared.take() {
                self.drop_prepared(p);
            }
            self.evaluated = None;
        }
        // Commands whose replacements launch do not hold the next decision back: it is taken
        // on the cluster as they will leave it (see `in_flight`). One that deletes its nodes
        // does, until they are gone: its pods are about to be evicted and land where
        // kube-scheduler puts them.
        let deleting = self.running.iter().find_map(|r| match r.phase {
            Phase::Terminating(_) => r.candidates.iter().find(|(claim, _)| cx.state.node_claim(claim).is_some()),
            Phase::Launching(_) => None,
        });
        let holding = match deleting {
            Some((claim, _)) => Some(format!("a command's NodeClaim {claim} to be gone")),
            None => self.settling_on(cx),
        };
        let held = holding.is_some();
        self.note_holding(holding);
        if held {
            return Ok(());
        }
        let changed = self.evaluated != Some(self.generation);
        let due = self.next_evaluation.is_some_and(|at| cx.pass.now >= at);
        if !changed && !due {
            // Nothing a watch announces changed and no node's time came: evaluate again only
            // if the offerings or a budget window changed (see `unwatched`).
            let check = self.next_check.is_some_and(|at| cx.pass.now >= at);
            if check {
                let types = cx.instance_types_by_pool().await;
                if Some(self.unwatched_inputs(cx, &types, cx.pass.now)) != self.unwatched {
                    return self.evaluate(cx).await;
                }
                self.next_check = Some(self.next_unwatched_check(cx, cx.pass.now));
            }
            for at in [self.next_evaluation, self.next_check].into_iter().flatten() {
                cx.pass.wake_at(at);
            }
            return Ok(());
        }
        self.evaluate(cx).await
    }

    /// Whether drift has nodes to take now while consolidation `cmd` waits out its validation:
    /// a node due for drift that its budget allows, on a settled cluster. Asked once per watch
    /// generation (a changed node class announces itself), and only of an `Underutilized`
    /// decision (emptiness comes before drift).
    async fn drift_due<P: CloudProvider, C>(&mut self, cx: &mut Ctx<'_, P, C>, cmd: &Command) -> bool {
        if cmd.reason != Reason::Underutilized || self.drift_checked == Some(self.generation) {
            return false;
        }
        self.drift_checked = Some(self.generation);
        let deleting = self.running.iter().any(|r| matches!(r.phase, Phase::Terminating(_)));
        if deleting || self.settling(cx) {
            return false;
        }
        let types = cx.instance_types_by_pool().await;
        let exclude = self.move_targets(cx);
        let (cands, budgets, _) = self.candidates(cx, &types, cx.pass.now, &exclude).await;
        let drifted: Vec<&Candidate> = cands
            .iter()
            .filter(|c| !c.static_pool && c.drifted.is_some() && c.held_against(Reason::Drifted).is_none())
            .collect();
        if drifted.is_empty() {
            return false;
        }
        let pools = cx.state.node_pools().clone();
        !within_budget(drifted, &budgets, &pools, DisruptionReason::Drifted, &mut BTreeMap::new()).is_empty()
    }

    async fn evaluate<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let types = cx.instance_types_by_pool().await;
        let exclude = self.move_targets(cx);
        let (cands, budgets, mut wake) = self.candidates(cx, &types, cx.pass.now, &exclude).await;
        tracing::debug!(candidates = cands.len(), generation = self.generation, "evaluating disruption");
        if cx.options.pod_deletion_cost_management {
            cx.published.deletion_ranking = DeletionRanking { nodes: deletion_ranking(&cands) };
        }
        self.evaluations += 1;
        self.unwatched = Some(self.unwatched_inputs(cx, &types, cx.pass.now));
        self.next_check = Some(self.next_unwatched_check(cx, cx.pass.now));
        let mut prepared = self.take_prepared(cx, &types);
        let base = Arc::clone(&prepared.base);
        let pools = cx.state.node_pools().clone();
        let statics: BTreeMap<String, StaticCount> = pools
            .values()
            .filter(|p| p.is_static())
            .map(|p| (p.name().to_string(), static_count(cx.state, p)))
            .collect();
        let mut eval = Eval {
            cands: &cands,
            budgets: &budgets,
            pools: &pools,
            types: &types,
            statics: &statics,
            base: &base,
            prepared: &mut prepared,
            facts: cx.pod_facts,
            consolidation_list: None,
            moves: MoveCounts::default(),
            terminate_first_drift: cx.options.terminate_first_drift,
        };
        let mut blocked: BTreeMap<String, String> = BTreeMap::new();
        for c in &cands {
            if let Some(p) = &c.protected {
                blocked.insert(c.node.clone(), p.clone());
            }
        }
        // Repair first (with its gate), then the methods in Karpenter's order; the first with a
        // command takes the pass.
        let mut command = None;
        let mut reboot = None;
        if cx.options.node_repair {
            match self.repair_command(cx, &types, &budgets, &mut blocked, &mut wake).await {
                Some(Repair::Replace(cmd)) => command = Some(cmd),
                Some(Repair::Reboot(r)) => {
                    blocked.remove(r.node());
                    reboot = Some(r);
                }
                None => {}
            }
        }
        let mut single = SingleNode::starting_at(self.single_cursor);
        let methods: [&mut dyn Method; 6] = [
            &mut Emptiness,
            &mut StaticDrift,
            &mut Drift(Reason::Drifted),
            &mut Drift(Reason::Unfit),
            &mut MultiNode,
            &mut single,
        ];
        for method in methods {
            if command.is_some() || reboot.is_some() {
                break;
            }
            command = method.compute_command(&mut eval, &mut blocked);
            if let Some(cmd) = &command {
                tracing::debug!(method = method.reason().as_str(), nodes = cmd.candidates.len(), "disruption command");
                break;
            }
        }
        self.consolidation_moves.merge(std::mem::take(&mut eval.moves));
        // Whether single-node consolidation left candidates untried since the last change.
        let mut sweep_unfinished = false;
        if let Some((listed, which)) = single.listed {
            self.single_cursor = single.cursor;
            let generation = self.generation;
            if command.is_none() {
                let (seen, seen_which, tried) = self.single_swept;
                let before = if (seen, seen_which) == (generation, which) { tried } else { 0 };
                let tried = before + listed.min(SINGLE_NODE_MAX_EVALUATIONS);
                self.single_swept = (generation, which, tried);
                sweep_unfinished = tried < listed;
            } else {
                self.single_swept = (generation, which, 0);
            }
        }
        // Candidates not tried this pass keep the reason they were last given.
        for c in &cands {
            if !blocked.contains_key(&c.node)
                && let Some(why) = self.blocked.get(&c.node)
            {
                blocked.insert(c.node.clone(), why.clone());
            }
        }
        self.evaluated = Some(self.generation);
        // Evaluated again when a node becomes consolidatable or the sweep goes on; otherwise
        // only on a change (a watch event, or what `unwatched` checks on its timer).
        let mut next = wake;
        if sweep_unfinished {
            next = util::earliest(next, Some(util::after(cx.pass.now, SWEEP_CONTINUE)));
        }
        self.next_evaluation = next;
        // The inputs serve the next evaluation when it comes soon and nothing changed by then.
        let validates = command.as_ref().is_some_and(|c| matches!(c.reason, Reason::Empty | Reason::Underutilized));
        if sweep_unfinished || validates {
            self.keep_prepared(prepared);
        } else {
            self.drop_prepared(prepared);
        }
        for at in [next, self.next_check].into_iter().flatten() {
            cx.pass.wake_at(at);
        }
        if let Some(cmd) = &command {
            for c in &cmd.candidates {
                blocked.remove(&c.node);
            }
        }
        self.publish_blocked(cx.api, cx.state, blocked).await;
        if let Some(r) = reboot {
            return self.reboot(cx, r, &types).await;
        }
        let Some(cmd) = command else { return Ok(()) };
        if matches!(cmd.reason, Reason::Empty | Reason::Underutilized) {
            let at = util::after(cx.pass.now, super::VALIDATION_DELAY);
            tracing::info!(reason = cmd.reason.as_str(), nodes = cmd.candidates.len(), "validating disruption");
            self.validating = Some((cmd, at));
            cx.pass.wake_at(at);
            Ok(())
        } else {
            self.execute(cx, cmd).await
        }
    }

    /// Records the reasons and emits a `DisruptionBlocked` event for every node whose reason
    /// changed: a reason that differs only in its numbers (the countdown to consolidateAfter,
    /// a count of nodes or pods) is the same reason, not a new event every pass.
    async fn publish_blocked<C: ClusterApi>(
        &mut self,
        api: &C,
        state: &ClusterState,
        blocked: BTreeMap<String, String>,
    ) {
        for (node, why) in &blocked {
            if self.blocked.get(node).is_none_or(|was| !same_apart_from_numbers(was, why)) {
                api.record_event(EventRecord {
                    kind: "Node",
                    name: node.clone(),
                    uid: state.uid_of("Node", node),
                    type_: "Normal",
                    reason: "DisruptionBlocked".to_string(),
                    message: format!("Cannot disrupt Node: {why}"),
                })
                .await;
            }
        }
        self.blocked = blocked;
    }

    /// A consolidation decision after its delay: carried out if the same nodes can still go
    /// the same way, dropped otherwise.
    async fn validate<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        cmd: Command,
    ) -> Result<(), ControllerError> {
        // Whatever happens, look again soon: an abandoned decision is re-evaluated from scratch.
        self.evaluated = None;
        cx.pass.wake_after(std::time::Duration::from_secs(1));
        if self.settling(cx) {
            self.abandon(cx, &cmd, "the cluster changed").await;
            if let Some(p) = self.prepared.take() {
                self.drop_prepared(p);
            }
            return Ok(());
        }
        let types = cx.instance_types_by_pool().await;
        let exclude = self.move_targets(cx);
        let (cands, budgets, _) = self.candidates(cx, &types, cx.pass.now, &exclude).await;
        let now: Vec<&Candidate> =
            cmd.candidates.iter().filter_map(|c| cands.iter().find(|x| x.claim == c.claim)).collect();
        if now.len() != cmd.candidates.len()
            || now
                .iter()
                .any(|c| c.protected.is_some() || !c.consolidatable || (cmd.reason == Reason::Empty && !c.is_empty()))
        {
            self.abandon(cx, &cmd, "a node is no longer a candidate").await;
            return Ok(());
        }
        let pools = cx.state.node_pools().clone();
        let Some(reason) = budget_reason(cmd.reason) else { return Ok(()) };
        if within_budget(now.iter().copied(), &budgets, &pools, reason, &mut BTreeMap::new()).len() != now.len() {
            self.abandon(cx, &cmd, "the budget no longer allows it").await;
            return Ok(());
        }
        // The same question as the evaluation's, on the cluster as it is now (answered as it was
        // if nothing changed since).
        let mut prepared = self.take_prepared(cx, &types);
        let (decision, pods) = match prepared.consolidate(cx.pod_facts, &now) {
            Ok((decision, pods)) if matches!(decision, Decision::Delete) == cmd.replacements.is_empty() => {
                (decision, pods)
            }
            answer => {
                let why = answer.err().unwrap_or_else(|| "the decision changed".to_string());
                self.abandon(cx, &cmd, &why).await;
                // The evaluation that follows may find the cluster unchanged.
                self.keep_prepared(prepared);
                return Ok(());
            }
        };
        let mut fresh = consolidation_command(&now, pods, decision);
        fresh.reason = cmd.reason;
        // A Balanced pool's move must still score high enough on the cluster as it is now.
        let scores = score_move(now.iter().map(|c| c.moved()), fresh.savings, &pools, &budgets.pool_totals);
        if let Some(low) = deciding(&scores).filter(|s| !s.approved()) {
            self.abandon(cx, &cmd, &low.describe()).await;
            self.keep_prepared(prepared);
            return Ok(());
        }
        if let Some(s) = deciding(&scores) {
            fresh.detail = format!("{}; {}", fresh.detail, s.describe());
            fresh.score = Some(s.value());
        }
        // What Balanced would have decided, for every pool (emptiness is not scored).
        if fresh.reason == Reason::Underutilized {
            fresh.balanced_what_if =
                score_as_balanced(now.iter().map(|c| c.moved()), fresh.savings, &budgets.pool_totals);
        }
        // Where its pods go, as later decisions count them while it runs.
        if let Ok(answer) = what_if(&mut prepared.ctx, &now) {
            fresh.moves = planned_moves(&answer);
        }
        let result = self.execute(cx, fresh).await;
        // The command runs now: the next inputs may edit this evaluation's views.
        self.drop_prepared(prepared);
        result
    }

    /// A decision dropped after its validation: each of its nodes says why until the next
    /// evaluation gives it a reason of its own (or decides on it again).
    async fn abandon<P: CloudProvider, C: ClusterApi>(&mut self, cx: &mut Ctx<'_, P, C>, cmd: &Command, why: &str) {
        let reason = cmd.reason.as_str();
        tracing::info!(reason, why, "abandoning disruption after validation");
        let mut blocked = self.blocked.clone();
        for c in &cmd.candidates {
            blocked.insert(
                c.node.clone(),
                format!("kerf decided to disrupt it ({reason}) but dropped the decision on validating it: {why}"),
            );
        }
        self.publish_blocked(cx.api, cx.state, blocked).await;
    }

    /// Carries out a command: taint and mark the nodes, launch the replacements; delete the
    /// nodes now when nothing has to launch first (or the reason is an interruption).
    pub(crate) async fn execute<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        cmd: Command,
    ) -> Result<(), ControllerError> {
        let reason = cmd.reason.as_str();
        for c in &cmd.candidates {
            // The taints are a list others edit too: pinned to the node as read. The condition
            // is a merge patch of the claim's status (kerf alone writes its conditions).
            if let Some(node) = cx.state.node(&c.node).cloned()
                && let Some(patch) = changes(&node, &with_disrupted_taint(&node))?.map(|p| pinned(&node.metadata, p))
                && let Some(updated) =
                    cx.pass.soft("tainting node", cx.api.patch::<Node>(None, &c.node, &patch).await)?
            {
                cx.state.record(updated.into_any());
            }
            if let Some(claim) = cx.state.node_claim(&c.claim).cloned() {
                let mut status = claim.status.clone().unwrap_or_default();
                set_condition(
                    &mut status.conditions,
                    util::condition(CONDITION_DISRUPTION_REASON, true, reason, &cmd.detail, cx.pass.now),
                );
                if let Some(patch) = status_changes(claim.status.as_ref(), &status)? {
                    let written = cx.api.patch_status::<NodeClaim>(None, &c.claim, &Patch::Merge(patch)).await;
                    if let Some(updated) = cx.pass.soft("marking nodeclaim disrupted", written)? {
                        cx.state.record(updated.into_any());
                    }
                }
            }
        }
        let decision = if cmd.replacements.is_empty() { "Delete" } else { "Replace" };
        let pods: usize = cmd.candidates.iter().map(|c| c.pods.len()).sum();
        let nodes: Vec<String> =
            cmd.candidates.iter().map(|c| format!("{}/{}/{}", c.node, c.instance_type, c.capacity_type)).collect();
        let types: Vec<String> =
            cmd.replacements.iter().flat_map(|r| r.instance_types.iter().take(5).map(|t| t.name.clone())).collect();
        tracing::info!(
            reason,
            decision,
            savings = %format!("${:.4}/h", cmd.savings),
            command = %format!(
                "{reason}/{decision}, terminating {} node(s) ({pods} pods) {}{}",
                cmd.candidates.len(),
                nodes.join(", "),
                if types.is_empty() { String::new() } else { format!(" and replacing with node(s) from types {}", types.join(", ")) }
            ),
            detail = %cmd.detail,
            "disrupting node(s)"
        );
        let mut launched = Vec::new();
        // Replacement index → the claim launched for it.
        let mut launched_for: BTreeMap<usize, String> = BTreeMap::new();
        for (i, new) in cmd.replacements.iter().enumerate() {
            let Some(pool) = cx.state.node_pool(&new.node_pool).cloned() else { continue };
            let mut claim = cx.new_claim(&pool, new);
            if cmd.reason == Reason::Underutilized {
                claim
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(labels::CONSOLIDATION_REPLACEMENT.to_string(), "true".to_string());
            }
            if let Some(created) = cx.pass.soft("creating replacement nodeclaim", cx.api.create(claim).await)? {
                let name = created.name().to_string();
                cx.api
                    .record_event(EventRecord {
                        kind: kerf_api::nodeclaim::KIND,
                        name: name.clone(),
                        uid: created.metadata.uid.clone(),
                        type_: "Normal",
                        reason: "DisruptionLaunching".to_string(),
                        message: format!("Launching NodeClaim: {reason}/{decision}"),
                    })
                    .await;
                cx.state.record(created.into_any());
                launched_for.insert(i, name.clone());
                launched.push(name);
            }
        }
        for c in &cmd.candidates {
            cx.api
                .record_event(EventRecord {
                    kind: "Node",
                    name: c.node.clone(),
                    uid: cx.state.uid_of("Node", &c.node),
                    type_: "Normal",
                    reason: "DisruptionTerminating".to_string(),
                    message: format!("Disrupting Node: {reason}/{decision}: {}", cmd.detail),
                })
                .await;
            self.records.push(DisruptionRecord {
                node_claim: c.claim.clone(),
                node: Some(c.node.clone()).filter(|n| !n.is_empty()),
                node_pool: Some(c.pool.clone()).filter(|p| !p.is_empty()),
                instance_type: Some(c.instance_type.clone()).filter(|t| !t.is_empty()),
                reason: cmd.reason,
                detail: cmd.detail.clone(),
                replacements: launched.clone(),
                decided_at: cx.pass.now,
                score: cmd.score,
            });
        }
        if cmd.reason == Reason::Underutilized {
            let owners = cmd.candidates.iter().flat_map(|c| c.pods.iter()).filter_map(|p| util::owner_key(p)).collect();
            self.reversals.watch(
                cmd.candidates.iter().map(|c| c.claim.clone()),
                cmd.candidates.iter().map(|c| c.pool.clone()),
                owners,
                launched.clone(),
                cx.pass.now,
                &cmd.detail,
            );
        }
        let policy = |pool: &str| cx.state.node_pool(pool).map(|p| p.spec.disruption.consolidation_policy);
        for s in &cmd.balanced_what_if {
            self.balanced_what_if.record(s, policy_name(cx.state.node_pool(&s.pool)));
        }
        let counted: Vec<(DisruptionLabels, usize)> = cmd
            .candidates
            .iter()
            .map(|c| {
                let grace = cx.state.node_claim(&c.claim).is_some_and(|n| n.spec.termination_grace_period.is_some());
                let labels = DisruptionLabels::new(cmd.reason, policy(&c.pool), &c.pool, &c.capacity_type, grace);
                let pods = cx.state.pods_on_node(&c.node).filter(|p| pod_facts::moves_with_node(&***p)).count();
                self.counts.initiated(&labels, pods);
                (labels, pods)
            })
            .collect();
        let running = Running {
            counted,
            reason: cmd.reason,
            candidates: cmd.candidates.iter().map(|c| (c.claim.clone(), c.node.clone())).collect(),
            phase: Phase::Launching(launched.clone()),
            waiting_reported: false,
            moves: cmd
                .moves
                .iter()
                .filter_map(|(pod, to)| {
                    let to = match to {
                        Destination::Node(n) => n.clone(),
                        Destination::Replacement(i) => launched_for.get(i)?.clone(),
                    };
                    Some((pod.clone(), to))
                })
                .collect(),
        };
        self.reserved.extend(launched.iter().cloned());
        let running = if launched.is_empty() || cmd.reason == Reason::Interrupted {
            self.terminate(cx, running).await?
        } else if launched.len() < cmd.replacements.len() && !cmd.reason.is_forceful() {
            self.abort(cx, &running, "a replacement could not be created").await?;
            return Ok(());
        } else {
            running
        };
        self.running.push(running);
        Ok(())
    }

    /// Deletes the command's claims (the termination controller drains their nodes).
    async fn terminate<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        mut r: Running,
    ) -> Result<Running, ControllerError> {
        for (i, (claim, node)) in r.candidates.iter().enumerate() {
            if cx.state.node_claim(claim).is_some_and(|c| c.metadata.deletion_timestamp.is_none()) {
                if r.reason == Reason::Unhealthy {
                    self.record_replacement(cx, claim, node);
                    // A repaired node's pods are deleted without waiting for the drain: its kubelet
                    // may never answer an eviction.
                    let at = cx.pass.now.to_string();
                    let patch =
                        serde_json::json!({"metadata": {"annotations": {labels::NODECLAIM_TERMINATION_TIMESTAMP: at}}});
                    if let Some(updated) = cx.pass.soft(
                        "stamping the termination timestamp",
                        cx.api.patch::<NodeClaim>(None, claim, &Patch::Merge(patch)).await,
                    )? {
                        cx.state.record(updated.into_any());
                    }
                }
                if cx.pass.soft("deleting nodeclaim", cx.api.delete::<NodeClaim>(None, claim).await)?.is_some()
                    && let Some((labels, pods)) = r.counted.get(i)
                {
                    self.counts.disrupted(labels, *pods);
                }
            }
        }
        let replacements = match &r.phase {
            Phase::Launching(names) | Phase::Terminating(names) => names.clone(),
        };
        r.phase = Phase::Terminating(replacements);
        Ok(r)
    }

    /// Gives up a command before anything was deleted: untaints its nodes, clears their
    /// DisruptionReason and forgets their records.
    async fn abort<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        r: &Running,
        why: &str,
    ) -> Result<(), ControllerError> {
        tracing::info!(reason = r.reason.as_str(), why, "abandoning disruption");
        let claims: Vec<String> = r.candidates.iter().map(|(c, _)| c.clone()).collect();
        self.reversals.finished(&claims, cx.pass.now, true);
        for (claim, node) in &r.candidates {
            self.release(cx, claim, node).await?;
            self.records.retain(|x| &x.node_claim != claim);
        }
        let (Phase::Launching(names) | Phase::Terminating(names)) = &r.phase;
        for n in names {
            self.reserved.remove(n);
        }
        Ok(())
    }

    /// Takes a node out of disruption: the `karpenter.sh/disrupted` taint off the node, the
    /// DisruptionReason condition off its claim.
    async fn release<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        claim: &str,
        node: &str,
    ) -> Result<(), ControllerError> {
        if let Some(n) = cx.state.node(node).cloned()
            && let Some(patch) = changes(&n, &without_disrupted_taint(&n))?.map(|p| pinned(&n.metadata, p))
            && let Some(updated) = cx.pass.soft("untainting node", cx.api.patch::<Node>(None, node, &patch).await)?
        {
            cx.state.record(updated.into_any());
        }
        if let Some(c) = cx.state.node_claim(claim).cloned()
            && let Some(status) = c.status.as_ref()
            && status.conditions.iter().any(|x| x.type_ == CONDITION_DISRUPTION_REASON)
        {
            let mut cleared = status.clone();
            cleared.conditions.retain(|x| x.type_ != CONDITION_DISRUPTION_REASON);
            if let Some(patch) = status_changes(Some(status), &cleared)?
                && let Some(updated) = cx.pass.soft(
                    "clearing disruption reason",
                    cx.api.patch_status::<NodeClaim>(None, claim, &Patch::Merge(patch)).await,
                )?
            {
                cx.state.record(updated.into_any());
            }
        }
        Ok(())
    }

    /// Nodes left tainted `karpenter.sh/disrupted` (or claims marked with a DisruptionReason) by
    /// a command this process does not run (it was decided before a restart, or an abort's
    /// writes failed) and that nothing is deleting are released, as Karpenter does on every
    /// pass: the decision is taken again from scratch.
    async fn release_outdated<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let outdated: Vec<(String, String)> = cx
            .state
            .node_claims()
            .values()
            .filter(|c| c.metadata.deletion_timestamp.is_none() && !self.in_command(c.name()))
            .filter_map(|c| {
                let node = cx.state.node_for_claim(c);
                let tainted = node.is_some_and(|n| is_disrupted(n) && n.metadata.deletion_timestamp.is_none());
                let marked = c
                    .status
                    .as_ref()
                    .is_some_and(|s| s.conditions.iter().any(|x| x.type_ == CONDITION_DISRUPTION_REASON));
                (tainted || marked)
                    .then(|| (c.name().to_string(), node.and_then(|n| n.metadata.name.clone()).unwrap_or_default()))
            })
            .collect();
        for (claim, node) in outdated {
            tracing::info!(NodeClaim = %claim, Node = %node, "releasing a node left tainted by a disruption that is no longer running");
            self.release(cx, &claim, &node).await?;
        }
        Ok(())
    }

    /// Moves running commands on: replacements initialized → delete the nodes; nodes gone →
    /// done.
    async fn progress<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let running = std::mem::take(&mut self.running);
        for mut r in running {
            match r.phase.clone() {
                Phase::Launching(names) => {
                    let failed = names
                        .iter()
                        .any(|n| cx.state.node_claim(n).is_none_or(|c| c.metadata.deletion_timestamp.is_some()));
                    if failed && !r.reason.is_forceful() {
                        self.abort(cx, &r, "a replacement failed to launch").await?;
                        continue;
                    }
                    let ready = names
                        .iter()
                        .all(|n| cx.state.node_claim(n).is_some_and(|c| c.is_condition_true(CONDITION_INITIALIZED)));
                    if ready || failed {
                        r = self.terminate(cx, r).await?;
                    } else if !r.waiting_reported {
                        r.waiting_reported = true;
                        for (_, node) in &r.candidates {
                            cx.api
                                .record_event(EventRecord {
                                    kind: "Node",
                                    name: node.clone(),
                                    uid: cx.state.uid_of("Node", node),
                                    type_: "Normal",
                                    reason: "DisruptionWaitingReadiness".to_string(),
                                    message: "Waiting on readiness to continue disruption".to_string(),
                                })
                                .await;
                        }
                    }
                    self.running.push(r);
                }
                Phase::Terminating(names) => {
                    if r.candidates.iter().all(|(claim, _)| cx.state.node_claim(claim).is_none()) {
                        for n in &names {
                            self.reserved.remove(n);
                        }
                        let claims: Vec<String> = r.candidates.iter().map(|(c, _)| c.clone()).collect();
                        self.reversals.finished(&claims, cx.pass.now, false);
                        tracing::debug!(reason = r.reason.as_str(), "disruption done");
                    } else {
                        self.running.push(r);
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn in_command(&self, claim: &str) -> bool {
        self.running.iter().any(|r| r.candidates.iter().any(|(c, _)| c == claim))
            || self.validating.as_ref().is_some_and(|(cmd, _)| cmd.candidates.iter().any(|c| c.claim == claim))
    }

    /// Whether a claim is already part of a running or validating command.
    pub(crate) fn is_disrupting(&self, claim: &str) -> bool {
        self.in_command(claim)
    }
}
