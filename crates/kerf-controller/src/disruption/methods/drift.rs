//! Drift, and kerf's `Unfit` (a DaemonSet pod meant for the node cannot fit on it): the node is
//! replaced with whatever its pods need (no price rule), as long as every pod fits somewhere;
//! drifted empty nodes go together without replacements. Budgets are the pool's `Drifted`
//! budget for both. Static pools' nodes are left to static drift.
//!
//! Every drifted node the budgets allow goes in one command when all their pods fit (their
//! replacements sized for all of them), so a fleet drifts in rounds of its budget back to back
//! rather than one node per command (Karpenter's pace, which a large fleet's drift outlasts);
//! when some pod would fit nowhere, the nodes are taken one at a time.
//!
//! Terminate-first (Karpenter v1.15's `TerminateFirstDrift` gate): a drifted node in a capacity
//! reservation that is full, whose pods fit nowhere else, holds the very room its replacement
//! needs (the rule is `terminate_first`'s). With the gate it is deleted first, without a
//! replacement; its pods wait, and provisioning launches them into the room its instance frees.
//! Without it the node waits, saying why.

use std::collections::{BTreeMap, BTreeSet};

use kerf_api::nodepool::DisruptionReason;
use kerf_scheduling::{NewNodeClaim, SchedulingContext, SchedulingInput};

use super::{Eval, Method};
use crate::disruption::candidates::Candidate;
use crate::disruption::consolidation::what_if;
use crate::disruption::in_flight::planned_moves;
use crate::disruption::terminate_first::full_reservation;
use crate::disruption::{Command, Reason};

/// Drift (`Reason::Drifted`) or kerf's `Unfit` (`Reason::Unfit`).
pub(in crate::disruption) struct Drift(pub Reason);

/// Why the candidate is due for `reason`, if it is.
fn why(reason: Reason, c: &Candidate) -> Option<&String> {
    if reason == Reason::Unfit { c.unfit.as_ref() } else { c.drifted.as_ref() }
}

/// `base` with `nodes` taking no new pods (their pods still count where they are).
fn unschedulable(base: &SchedulingInput, nodes: &BTreeSet<&str>) -> SchedulingInput {
    let mut input = base.clone();
    for n in &mut input.existing_nodes {
        if nodes.contains(n.name.as_str()) {
            n.schedulable = false;
        }
    }
    input
}

/// One command replacing all of `nodes` (each due for `reason`), when every pod of theirs fits.
fn together(ctx: &mut SchedulingContext, reason: Reason, nodes: &[&Candidate]) -> Option<Command> {
    let answer = what_if(ctx, nodes).ok()?;
    if !answer.unplaced.is_empty() {
        return None;
    }
    let n = answer.pods.len();
    let moves = planned_moves(&answer);
    let replacements: Vec<NewNodeClaim> = answer.new_node_claims.into_iter().map(|c| c.claim).collect();
    let first = nodes.first().and_then(|c| why(reason, c)).cloned().unwrap_or_default();
    let detail = format!(
        "{first} (and {} more node(s) due for it); their {n} pod(s) move to {}",
        nodes.len() - 1,
        match replacements.len() {
            0 => "other nodes".to_string(),
            k => format!("{k} new node(s)"),
        }
    );
    Some(Command::new(reason, nodes.iter().map(|c| (*c).clone()).collect(), replacements, detail, moves))
}

impl Method for Drift {
    fn reason(&self) -> Reason {
        self.0
    }

    fn should_disrupt(&self, c: &Candidate) -> bool {
        !c.static_pool && why(self.0, c).is_some()
    }

    /// Drift, and kerf's `Unfit`: replace the node with whatever its pods need (no price rule),
    /// as long as every pod fits somewhere.
    fn compute_command(&mut self, eval: &mut Eval<'_>, blocked: &mut BTreeMap<String, String>) -> Option<Command> {
        let reason = self.0;
        let why = |c: &Candidate| why(reason, c).cloned();
        let held = |c: &Candidate| c.held_against(reason).cloned();
        // Static pools' nodes are replaced by static drift, from their pool's template.
        let matching: Vec<&Candidate> = eval.cands.iter().filter(|c| self.should_disrupt(c)).collect();
        for c in &matching {
            if let Some(p) = held(c) {
                blocked
                    .insert(c.node.clone(), format!("{} ({}), but {p}", reason.as_str(), why(c).unwrap_or_default()));
            }
        }
        let open: Vec<&Candidate> = matching.iter().copied().filter(|c| held(c).is_none()).collect();
        let allowed = eval.allowed(open, DisruptionReason::Drifted, blocked);
        // Empty ones go together, without replacements.
        let empties: Vec<&Candidate> = allowed.iter().copied().filter(|c| c.is_empty()).collect();
        if !empties.is_empty() {
            let detail = empties.iter().filter_map(|c| why(c)).next().unwrap_or_default();
            let candidates = empties.into_iter().cloned().collect();
            return Some(Command::new(reason, candidates, Vec::new(), format!("{detail}; it is empty"), Vec::new()));
        }
        if allowed.is_empty() {
            return None;
        }
        // Nodes being replaced for the same reason are no place for the pods either: one
        // context for the method, with those nodes taking no new pods.
        let all: BTreeSet<&str> = matching.iter().map(|c| c.node.as_str()).collect();
        let mut ctx = SchedulingContext::with_facts(unschedulable(eval.base, &all), eval.facts);
        if allowed.len() > 1
            && let Some(cmd) = together(&mut ctx, reason, &allowed)
        {
            return Some(cmd);
        }
        for c in allowed {
            let answer = match what_if(&mut ctx, &[c]) {
                Ok(a) => a,
                Err(e) => {
                    blocked.insert(
                        c.node.clone(),
                        format!("{} ({}), but {e}", reason.as_str(), why(c).unwrap_or_default()),
                    );
                    continue;
                }
            };
            let n = answer.pods.len();
            let moves = planned_moves(&answer);
            if let Some(&i) = answer.unplaced.first() {
                if reason == Reason::Drifted
                    && eval.terminate_first_drift
                    && let Some(full) = full_reservation(eval.pools, eval.types, c)
                {
                    let detail = full.terminate_first_detail(&why(c).unwrap_or_default(), n);
                    return Some(Command::new(reason, vec![c.clone()], Vec::new(), detail, Vec::new()));
                }
                blocked.insert(
                    c.node.clone(),
                    format!(
                        "{} ({}), but pod {} would fit nowhere else",
                        reason.as_str(),
                        why(c).unwrap_or_default(),
                        answer.pods.get(i).map_or_else(|| format!("#{i}"), kerf_scheduling::pod::key),
                    ),
                );
                continue;
            }
            let replacements: Vec<NewNodeClaim> = answer.new_node_claims.into_iter().map(|c| c.claim).collect();
            let forced = match (&c.protected, c.eventual_grace) {
                (Some(p), Some(grace)) => {
                    format!(" ({p}: what is not evicted is deleted when its terminationGracePeriod {grace} ends)")
                }
                _ => String::new(),
            };
            let detail = format!(
                "{}; its {n} pod(s) move to {}{forced}",
                why(c).unwrap_or_default(),
                match replacements.len() {
                    0 => "other nodes".to_string(),
                    k => format!("{k} new node(s)"),
                }
            );
            return Some(Command::new(reason, vec![c.clone()], replacements, detail, moves));
        }
        None
    }
}
