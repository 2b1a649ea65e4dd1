//! Multi-node consolidation: the longest prefix of the consolidation candidates (cheapest to
//! disrupt first, within each pool's `Underutilized` budget) whose pods all fit on the other
//! nodes plus at most one strictly cheaper new node.

use std::collections::BTreeMap;

use kerf_api::nodepool::DisruptionReason;

use super::{Eval, Method, consolidatable};
use crate::disruption::candidates::Candidate;
use crate::disruption::consolidation::largest_prefix;
use crate::disruption::{Command, Reason};

pub(in crate::disruption) struct MultiNode;

impl Method for MultiNode {
    fn reason(&self) -> Reason {
        Reason::Underutilized
    }

    fn should_disrupt(&self, c: &Candidate) -> bool {
        consolidatable(c)
    }

    /// The longest prefix of the candidates (within each pool's budget) that goes together
    /// (multi-node consolidation's binary search, [`largest_prefix`]).
    fn compute_command(&mut self, eval: &mut Eval<'_>, blocked: &mut BTreeMap<String, String>) -> Option<Command> {
        let list = eval.consolidation_candidates(blocked);
        let list = eval.allowed(list, DisruptionReason::Underutilized, &mut BTreeMap::new());
        let (k, (decision, pods)) = largest_prefix(list.len(), |k| eval.consolidate(&list[..k]))?;
        Some(eval.command(&list[..k], pods, decision))
    }
}
