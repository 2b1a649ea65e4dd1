//! Commands in flight, as later decisions see them. Disruption does not wait for a command's
//! replacements to launch before deciding the next (a launch takes half a minute, so one command
//! at a time would keep a cluster with many independent consolidations unsettled for minutes):
//! every decision is taken on the cluster as the running commands will leave it. Their nodes
//! take no new pods, and each of their pods already holds room where the command expects it to
//! go (its replacement, or the node the what-if placed it on), so two commands never count on
//! the same room; the nodes pods are moving to are not candidates themselves while the move
//! runs. A pod headed for a replacement that is not a Node yet also still counts where it runs
//! now: kube-scheduler's view (the replay) has no such node, and its topology counts must keep
//! the pod. Once a command deletes its nodes, nothing new is decided until its pods have landed
//! (see `orchestration`). Budgets count the running commands' nodes as disrupting.
//!
//! Where a running command's pods land is kube-scheduler's choice, not the what-if's: its
//! copies go to the least allocated nodes that pass, which may be room the what-if left free and
//! a later decision counted on. So every consolidation decided while others run must also hold
//! as kube-scheduler will see it ([`Landing`]): each command's pods bound once its nodes go, in
//! the order the commands will delete them (those deleting now, then the new decision if it
//! deletes without a replacement, then those whose replacements launch, in the order they
//! were carried out, each replacement joining at its command's turn, and last the new decision
//! if it waits for its own replacement), all of their nodes tainted from the start. A decision
//! that only holds if two commands count the same room is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_cloud::CloudProvider;
use kerf_scheduling::{ExistingNode, KeptKubeView, KubeReplay, PodFactsCache, SchedulingInput, Turn, WhatIf};

use super::candidates::Candidate;
use super::consolidation::{Decision, replacement_of};
use super::{Disruption, Phase};
use crate::claims::in_flight;
use crate::ctx::Ctx;
use crate::input::TypesByPool;
use crate::state::{ObjectKey, key_of};

/// Where a pod of a command's nodes is expected to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Destination {
    /// An existing node (or an in-flight NodeClaim, by its name).
    Node(String),
    /// The command's replacement with this index.
    Replacement(usize),
}

/// Where the what-if `answer` puts each pod it moves: the node it placed it on, or the new
/// NodeClaim (by index, the order the command launches its replacements in) it is for. Pods
/// that fit nowhere have no destination.
pub(crate) fn planned_moves(answer: &WhatIf) -> Vec<(ObjectKey, Destination)> {
    let key = |i: usize| answer.pods.get(i).map(|p| key_of(&p.metadata));
    let placed = answer.placements.iter().filter_map(|pl| Some((key(pl.pod)?, Destination::Node(pl.node.clone()))));
    let launched = answer
        .new_node_claims
        .iter()
        .enumerate()
        .flat_map(|(k, c)| c.claim.pods.iter().filter_map(move |&i| Some((key(i)?, Destination::Replacement(k)))));
    placed.chain(launched).collect()
}

/// The running commands as kube-scheduler will carry them out, for checking a new decision
/// against them (see the module doc). Its view of the cluster is built on the first check: most
/// evaluations find no decision to check.
pub(crate) struct Landing {
    /// The cluster as it is (the running commands' pods still where they run).
    input: Arc<SchedulingInput>,
    view: Option<KubeReplay>,
    /// A view kept from an earlier evaluation, edited into `view` on the first check.
    kept: KeptKubeView,
    /// Per running command, in the order they were carried out: whether it still waits for its
    /// replacements, its nodes still there, and its replacements still in flight (as the nodes
    /// they will become).
    running: Vec<(bool, Vec<String>, Vec<ExistingNode>)>,
}

impl Landing {
    /// Whether kube-scheduler finds a node for every pod of the running commands and then for
    /// every pod of `cands`, gone by `decision`. `Err` says which pod would be left over.
    /// `facts` serve the context built on the first check.
    pub(crate) fn check(
        &mut self,
        facts: &PodFactsCache,
        cands: &[&Candidate],
        decision: &Decision,
    ) -> Result<(), String> {
        fn turn((_, removed, added): &(bool, Vec<String>, Vec<ExistingNode>)) -> Turn<'_> {
            Turn { removed: removed.iter().map(String::as_str).collect(), added: added.clone(), replacement: None }
        }
        let replacement = replacement_of(decision)?;
        let waits = replacement.is_some();
        let new = Turn { removed: cands.iter().map(|c| c.node.as_str()).collect(), added: Vec::new(), replacement };
        let mut turns: Vec<Turn<'_>> = self.running.iter().filter(|r| !r.0).map(turn).collect();
        if !waits {
            turns.push(new.clone());
        }
        turns.extend(self.running.iter().filter(|r| r.0).map(turn));
        if waits {
            turns.push(new);
        }
        let input = &self.input;
        let kept = &mut self.kept;
        self.view
            .get_or_insert_with(|| KubeReplay::with_kept(Arc::clone(input), facts, std::mem::take(kept)))
            .in_turn(&turns)
            .map_err(|e| format!("{e} once the disruptions under way have moved their pods"))
    }
}

impl Landing {
    /// Hands over a view kept from an earlier evaluation (see [`Landing::check`]).
    pub(crate) fn keep_view_from(&mut self, kept: KeptKubeView) {
        if self.view.is_none() {
            self.kept = kept;
        }
    }

    /// The view of the checks (or the one handed over and not used yet), to keep.
    pub(crate) fn take_view(&mut self) -> KeptKubeView {
        match self.view.take() {
            Some(v) => v.into_kept(),
            None => std::mem::take(&mut self.kept),
        }
    }
}

/// What a disruption evaluation decides on (see [`Disruption::decision_inputs`]).
pub(crate) struct DecisionInputs {
    /// The cluster as the running commands leave it.
    pub base: Arc<SchedulingInput>,
    /// The running commands to check decisions against, when some still have pods to move.
    pub landing: Option<Landing>,
}

impl Disruption {
    /// The scheduling inputs of one evaluation, from one reading of the cluster: the input
    /// decisions are taken on (the cluster as the running commands leave it) and the running
    /// commands whose nodes still run pods, as a [`Landing`] on the cluster as it is.
    pub(crate) fn decision_inputs<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        types: &TypesByPool,
    ) -> DecisionInputs {
        let plain = Arc::new(cx.view().scheduling_input(&[], types));
        let landing = self.landing(cx, &plain);
        let base = if self.running.is_empty() {
            plain
        } else {
            // The cluster as it is is kept only for a landing check: without one, edited in place.
            let input = Arc::try_unwrap(plain).unwrap_or_else(|shared| SchedulingInput::clone(&shared));
            Arc::new(self.moved(cx, input))
        };
        DecisionInputs { base, landing }
    }

    /// The running commands whose nodes still run pods, as a [`Landing`] on `plain` (the
    /// cluster as it is); `None` when there are none.
    fn landing<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>, plain: &Arc<SchedulingInput>) -> Option<Landing> {
        let running: Vec<(bool, Vec<String>, &Vec<String>)> = self
            .running
            .iter()
            .filter_map(|r| {
                let nodes: Vec<String> =
                    r.candidates.iter().filter(|(_, n)| cx.state.node(n).is_some()).map(|(_, n)| n.clone()).collect();
                let (launching, launched) = match &r.phase {
                    Phase::Launching(l) => (true, l),
                    Phase::Terminating(l) => (false, l),
                };
                (!nodes.is_empty()).then_some((launching, nodes, launched))
            })
            .collect();
        if running.is_empty() {
            return None;
        }
        let in_flight: BTreeMap<&str, &ExistingNode> =
            plain.existing_nodes.iter().filter(|n| n.in_flight).map(|n| (n.name.as_str(), n)).collect();
        let running = running
            .into_iter()
            .map(|(launching, nodes, launched)| {
                let added = launched.iter().filter_map(|c| in_flight.get(c.as_str()).map(|n| (*n).clone())).collect();
                (launching, nodes, added)
            })
            .collect();
        Some(Landing { input: Arc::clone(plain), view: None, kept: KeptKubeView::default(), running })
    }

    /// Nodes and claims the running commands move pods to: not candidates while they do.
    pub(crate) fn move_targets<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>) -> BTreeSet<String> {
        let mut out = self.reserved.clone();
        for r in &self.running {
            for (_, to) in &r.moves {
                out.insert(to.clone());
                if let Some(node) = cx.state.node_claim(to).and_then(|c| cx.state.node_for_claim(c)) {
                    out.extend(node.metadata.name.clone());
                }
            }
        }
        // Candidates are excluded by claim name: a node named here stands for its claim.
        let claims: Vec<String> = out
            .iter()
            .filter_map(|n| cx.state.node(n))
            .filter_map(|n| cx.state.claim_for_node(n))
            .map(|c| c.name().to_string())
            .collect();
        out.extend(claims);
        out
    }

    /// `input` (the cluster as it is) as the running commands leave it: their nodes take no new
    /// pods, and their pods still bound there count on the node (or in-flight claim) the
    /// command moves them to, when that one is still there. A moved pod is the very pod the
    /// state keeps (its nodeName still names the node it leaves: nothing reads a placed pod's
    /// nodeName in an input), so a view kept from one evaluation to the next finds it unchanged.
    fn moved<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>, mut input: SchedulingInput) -> SchedulingInput {
        let mut sources: BTreeSet<&str> = BTreeSet::new();
        let mut to: BTreeMap<&ObjectKey, String> = BTreeMap::new();
        for r in &self.running {
            sources.extend(r.candidates.iter().map(|(_, node)| node.as_str()));
            for (pod, target) in &r.moves {
                to.insert(pod, self.input_name(cx, target));
            }
        }
        let index: BTreeMap<String, (usize, bool)> =
            input.existing_nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), (i, n.in_flight))).collect();
        let mut moving: Vec<(usize, Arc<SlimPod>)> = Vec::new();
        for n in &mut input.existing_nodes {
            if !sources.contains(n.name.as_str()) {
                continue;
            }
            n.schedulable = false;
            n.pods.retain(|p| {
                let Some(&(target, launching)) = to.get(&key_of(&p.metadata)).and_then(|t| index.get(t)) else {
                    return true;
                };
                moving.push((target, Arc::clone(p)));
                launching
            });
        }
        for (target, pod) in moving {
            if let Some(n) = input.existing_nodes.get_mut(target) {
                n.pods.push(pod);
            }
        }
        input
    }

    /// The name a move target has in the scheduling input: an in-flight claim by its own name,
    /// an initialized one by its node's.
    fn input_name<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>, target: &str) -> String {
        match cx.state.node_claim(target) {
            Some(c) if !in_flight(c) => {
                cx.state.node_for_claim(c).and_then(|n| n.metadata.name.clone()).unwrap_or_else(|| target.to_string())
            }
            _ => target.to_string(),
        }
    }
}
