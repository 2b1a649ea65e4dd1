//! Emptiness: nodes that run no pod that would have to move (DaemonSet pods and finished pods
//! aside) are deleted together, as many as each pool's `Empty` budget allows, once their
//! `consolidateAfter` has passed.

use std::collections::BTreeMap;

use kerf_api::nodepool::DisruptionReason;

use super::{Eval, Method};
use crate::disruption::candidates::Candidate;
use crate::disruption::consolidation::{Decision, describe};
use crate::disruption::{Command, Reason};

pub(in crate::disruption) struct Emptiness;

impl Method for Emptiness {
    fn reason(&self) -> Reason {
        Reason::Empty
    }

    fn should_disrupt(&self, c: &Candidate) -> bool {
        c.protected.is_none() && c.is_empty() && c.consolidatable
    }

    fn compute_command(&mut self, eval: &mut Eval<'_>, blocked: &mut BTreeMap<String, String>) -> Option<Command> {
        let empty: Vec<&Candidate> = eval.cands.iter().filter(|c| self.should_disrupt(c)).collect();
        let chosen = eval.allowed(empty, DisruptionReason::Empty, blocked);
        if chosen.is_empty() {
            return None;
        }
        let (detail, savings) = describe(&chosen, 0, &Decision::Delete);
        let mut cmd =
            Command::new(Reason::Empty, chosen.into_iter().cloned().collect(), Vec::new(), detail, Vec::new());
        cmd.savings = savings;
        Some(cmd)
    }
}
