//! The disruption methods, one type each, in the order Karpenter runs them: emptiness, static
//! drift, drift, kerf's `Unfit`, multi-node consolidation, single-node consolidation. Each
//! implements [`Method`]: which candidates it acts on, and the command it proposes on one
//! evaluation's shared inputs ([`Eval`]: candidates, budgets computed once for the pass, the
//! scheduling context built once). The first method with a command wins the pass. Expiration is
//! forceful (budgets and do-not-disrupt do not hold it back) and runs on every claim before any
//! evaluation ([`expiration`]).

pub(super) mod drift;
pub(super) mod emptiness;
pub(super) mod expiration;
pub(super) mod multi_node;
pub(super) mod single_node;
pub(super) mod static_drift;

use std::collections::BTreeMap;

use kerf_api::NodePool;
use kerf_api::nodepool::DisruptionReason;
use kerf_scheduling::{PodFactsCache, SchedulingInput};

use super::balanced::{MoveCounts, Score, deciding, policy_name, score_move};
use super::candidates::{Budgets, Candidate, within_budget};
use super::consolidation::{Decision, consolidation_order, describe, savings};
use super::prepared::Prepared;
use super::{Command, Reason};
use crate::input::TypesByPool;
use crate::static_pools::StaticCount;

/// One disruption method.
pub(super) trait Method {
    /// The reason its commands carry.
    fn reason(&self) -> Reason;

    /// Whether it would act on this candidate at all (before budgets and what-ifs).
    fn should_disrupt(&self, c: &Candidate) -> bool;

    /// The command it takes this pass, if any. Candidates it would act on but does not get
    /// why in `blocked`.
    fn compute_command(&mut self, eval: &mut Eval<'_>, blocked: &mut BTreeMap<String, String>) -> Option<Command>;
}

/// One evaluation's shared inputs.
pub(super) struct Eval<'a> {
    pub cands: &'a [Candidate],
    /// The NodePools' disruption budgets, computed once for the pass.
    pub budgets: &'a Budgets,
    pub pools: &'a BTreeMap<String, NodePool>,
    pub types: &'a TypesByPool,
    /// Static pools' claim counts.
    pub statics: &'a BTreeMap<String, StaticCount>,
    pub base: &'a SchedulingInput,
    /// The scheduling context built from `base` for every consolidation what-if, the running
    /// commands every consolidation must also hold with once their pods have landed, and the
    /// answers given so far (kept from an earlier evaluation on the same inputs).
    pub prepared: &'a mut Prepared,
    /// The controller's parsed pod facts, for the contexts built during the evaluation.
    pub facts: &'a PodFactsCache,
    /// The consolidation candidates in order, once listed (both consolidation methods use it);
    /// `None` until then.
    pub consolidation_list: Option<Vec<&'a Candidate>>,
    /// The consolidation moves weighed in this evaluation (see `balanced`).
    pub moves: MoveCounts,
    /// Karpenter's `TerminateFirstDrift` gate (see `Options::terminate_first_drift`).
    pub terminate_first_drift: bool,
}

impl<'a> Eval<'a> {
    pub fn allowed<'c>(
        &self,
        list: Vec<&'c Candidate>,
        reason: DisruptionReason,
        blocked: &mut BTreeMap<String, String>,
    ) -> Vec<&'c Candidate> {
        within_budget(list, self.budgets, self.pools, reason, blocked)
    }

    /// Consolidatable, unprotected candidates, cheapest to disrupt first
    /// ([`consolidation_order`]). Budgets apply per command. Listed once per evaluation.
    pub fn consolidation_candidates(&mut self, blocked: &mut BTreeMap<String, String>) -> Vec<&'a Candidate> {
        if let Some(list) = &self.consolidation_list {
            return list.clone();
        }
        let mut list: Vec<&Candidate> = Vec::new();
        for c in self.cands {
            if c.protected.is_some() {
                continue;
            }
            match &c.not_consolidatable {
                Some(why) => {
                    blocked.entry(c.node.clone()).or_insert_with(|| why.clone());
                }
                None => list.push(c),
            }
        }
        consolidation_order(&mut list);
        self.consolidation_list = Some(list.clone());
        list
    }

    /// One consolidation question ([`consolidate`]), on the cluster as the running commands
    /// will leave it once their pods have landed too.
    /// A move in a Balanced pool must also score high enough (see `balanced`); one that does
    /// not is refused with its score.
    pub fn consolidate(&mut self, cands: &[&Candidate]) -> Result<(Decision, usize), String> {
        let (decision, pods) = self.prepared.consolidate(self.facts, cands)?;
        let scores = score_move(
            cands.iter().map(|c| c.moved()),
            savings(cands, &decision),
            self.pools,
            &self.budgets.pool_totals,
        );
        let refused = deciding(&scores).filter(|s| !s.approved()).map(Score::describe);
        let mut pools: Vec<&str> = cands.iter().map(|c| c.pool.as_str()).collect();
        pools.sort_unstable();
        pools.dedup();
        for pool in pools {
            let score = scores.iter().find(|s| s.pool == pool);
            let approved = refused.is_none();
            self.moves.record(pool, policy_name(self.pools.get(pool)), approved, score.map(Score::value));
        }
        match refused {
            Some(why) => Err(format!("{why}: too little saved for what it disrupts")),
            None => Ok((decision, pods)),
        }
    }

    /// The command for a consolidation decision, with its Balanced score.
    pub fn command(&self, cands: &[&Candidate], pods: usize, decision: Decision) -> Command {
        let mut cmd = consolidation_command(cands, pods, decision);
        let scores = score_move(cands.iter().map(|c| c.moved()), cmd.savings, self.pools, &self.budgets.pool_totals);
        if let Some(s) = deciding(&scores) {
            cmd.detail = format!("{}; {}", cmd.detail, s.describe());
            cmd.score = Some(s.value());
        }
        cmd
    }
}

/// Consolidation may look at the candidate: nothing protects it and its pool's policy and
/// `consolidateAfter` allow it now.
pub(super) fn consolidatable(c: &Candidate) -> bool {
    c.protected.is_none() && c.not_consolidatable.is_none()
}

/// The Underutilized command for a consolidation decision on `cands`.
pub(super) fn consolidation_command(cands: &[&Candidate], pods: usize, decision: Decision) -> Command {
    let (detail, savings) = describe(cands, pods, &decision);
    let replacements = match decision {
        Decision::Delete => Vec::new(),
        Decision::Replace { claim, .. } => vec![*claim],
    };
    let candidates = cands.iter().map(|c| (*c).clone()).collect();
    let mut cmd = Command::new(Reason::Underutilized, candidates, replacements, detail, Vec::new());
    cmd.savings = savings;
    cmd
}
