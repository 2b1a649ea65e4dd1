//! Commands on one claim decided outside the evaluation's methods (expiration, interruption,
//! repair): the claim as such a command sees it, initialized or not, and the replacements its
//! pods need. Pods that fit nowhere do not stop them; expiration and interruption are also
//! forceful (budgets and do-not-disrupt do not hold them back).

use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::{NodeClaim, NodePool, labels};
use kerf_cloud::CloudProvider;
use kerf_scheduling::{NewNodeClaim, SchedulingContext};

use super::candidates::{Candidate, node_price};
use super::consolidation::what_if;
use super::cost::{DeclaredCost, node_disruption_cost};
use super::in_flight::{Destination, planned_moves};
use super::{Command, Disruption, Reason};
use crate::ctx::Ctx;
use crate::input::TypesByPool;

/// A forceful command's replacements and where its pods go.
pub(crate) type ForcedReplacements = (Vec<NewNodeClaim>, Vec<(crate::state::ObjectKey, Destination)>);

impl Disruption {
    /// The command that disrupts `claim` for `reason`: its candidate and the replacements its
    /// pods need.
    pub(crate) fn forced_command<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        claim: &NodeClaim,
        types: &TypesByPool,
        reason: Reason,
        detail: String,
    ) -> Command {
        let cand = self.forced_candidate(cx, claim, types);
        let (replacements, moves) = self.forced_replacements(cx, &cand, types);
        Command::new(reason, vec![cand], replacements, detail, moves)
    }

    /// A managed claim as a forceful command sees it (initialized or not).
    pub(super) fn forced_candidate<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        claim: &NodeClaim,
        types: &TypesByPool,
    ) -> Candidate {
        let l = claim.metadata.labels.as_ref();
        let get = |k: &str| l.and_then(|l| l.get(k)).cloned().unwrap_or_default();
        let pool_name = get(labels::NODE_POOL);
        let (itype, zone, ct) = (get(labels::INSTANCE_TYPE), get(labels::ZONE), get(labels::CAPACITY_TYPE));
        let node = cx.state.node_for_claim(claim).and_then(|n| n.metadata.name.clone()).unwrap_or_default();
        let mut pods: Vec<Arc<SlimPod>> =
            cx.state.pods_on_node(&node).filter(|p| kerf_api::pod_facts::moves_with_node(&***p)).cloned().collect();
        // As in `candidates`: the pods' eviction costs, not the buffer room's.
        let disruption_cost = node_disruption_cost(
            pods.iter().map(|p| &**p),
            DeclaredCost::for_gate(cx.options.pod_deletion_cost_management),
        );
        // Buffer room held here moves like its pods (its replacement keeps the room).
        pods.extend(cx.published.room_held_on(&node).cloned());
        Candidate {
            claim: claim.name().to_string(),
            price: node_price(types, &pool_name, &itype, &zone, &ct),
            node,
            instance_type: itype,
            capacity_type: ct,
            zone,
            disruption_cost,
            pods,
            consolidatable: false,
            not_consolidatable: None,
            protected: None,
            eventual_grace: None,
            drifted: None,
            unfit: None,
            replace_hold: None,
            static_pool: cx.state.node_pool(&pool_name).is_some_and(NodePool::is_static),
            pool: pool_name,
        }
    }

    /// Replacements for a forceful command: whatever new nodes the pods need (pods that fit
    /// nowhere do not stop it).
    fn forced_replacements<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        cand: &Candidate,
        types: &TypesByPool,
    ) -> ForcedReplacements {
        let (replacements, moves, _) = self.replacements_and_unplaced(cx, cand, types);
        (replacements, moves)
    }

    /// [`Self::forced_replacements`], and the first of the candidate's pods that would fit
    /// nowhere (its key).
    pub(super) fn replacements_and_unplaced<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        cand: &Candidate,
        types: &TypesByPool,
    ) -> (Vec<NewNodeClaim>, Vec<(crate::state::ObjectKey, Destination)>, Option<String>) {
        if cand.pods.is_empty() || cx.state.node_pool(&cand.pool).is_none_or(NodePool::is_static) {
            return (Vec::new(), Vec::new(), None);
        }
        let mut ctx = SchedulingContext::with_facts(self.decision_inputs(cx, types).base, cx.pod_facts);
        match what_if(&mut ctx, &[cand]) {
            Ok(answer) => {
                let moves = planned_moves(&answer);
                let unplaced = answer
                    .unplaced
                    .first()
                    .map(|&i| answer.pods.get(i).map_or_else(|| format!("#{i}"), kerf_scheduling::pod::key));
                (answer.new_node_claims.into_iter().map(|c| c.claim).collect(), moves, unplaced)
            }
            Err(e) => {
                tracing::warn!(node = %cand.node, error = %e, "no replacement for a forceful disruption");
                (Vec::new(), Vec::new(), None)
            }
        }
    }
}
