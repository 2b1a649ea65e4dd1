//! Single-node consolidation: the first candidate (cheapest to disrupt first) whose pods fit on
//! the other nodes, or on one strictly cheaper new node, and then the longest run of the
//! candidates after it that go along. At most [`SINGLE_NODE_MAX_EVALUATIONS`] candidates are
//! tried per pass, continuing where the previous pass stopped.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use kerf_api::nodepool::DisruptionReason;

use super::{Eval, Method, consolidatable};
use crate::disruption::candidates::Candidate;
use crate::disruption::consolidation::largest_prefix;
use crate::disruption::{Command, Reason, SINGLE_NODE_MAX_EVALUATIONS};

pub(in crate::disruption) struct SingleNode {
    /// Where the sweep continues in the candidate list; after a pass, where the next goes on.
    pub cursor: usize,
    /// How many candidates the pass listed, and which (a hash of their nodes), once it ran.
    pub listed: Option<(usize, u64)>,
}

impl Method for SingleNode {
    fn reason(&self) -> Reason {
        Reason::Underutilized
    }

    fn should_disrupt(&self, c: &Candidate) -> bool {
        consolidatable(c)
    }

    fn compute_command(&mut self, eval: &mut Eval<'_>, blocked: &mut BTreeMap<String, String>) -> Option<Command> {
        let list = eval.consolidation_candidates(blocked);
        let (cmd, cursor) = Self::search(eval, &list, blocked, self.cursor);
        self.cursor = cursor;
        let mut names = std::collections::hash_map::DefaultHasher::new();
        for c in &list {
            c.node.hash(&mut names);
        }
        self.listed = Some((list.len(), names.finish()));
        cmd
    }
}

impl SingleNode {
    /// Starts where the last pass's sweep stopped.
    pub fn starting_at(cursor: usize) -> Self {
        SingleNode { cursor, listed: None }
    }

    /// The first candidate that can go on its own (its pool's budget must allow one more),
    /// trying up to [`SINGLE_NODE_MAX_EVALUATIONS`] from `cursor` on (wrapping). Returns the
    /// command, if any, and where the next pass continues.
    fn search(
        eval: &mut Eval<'_>,
        list: &[&Candidate],
        blocked: &mut BTreeMap<String, String>,
        cursor: usize,
    ) -> (Option<Command>, usize) {
        let open: Vec<&Candidate> = list
            .iter()
            .copied()
            .filter(|c| {
                let Some(pool) = eval.pools.get(&c.pool) else { return false };
                match eval.budgets.room(pool, DisruptionReason::Underutilized, 0) {
                    Ok(()) => true,
                    Err(why) => {
                        blocked.entry(c.node.clone()).or_insert(why);
                        false
                    }
                }
            })
            .collect();
        let n = open.len();
        if n == 0 {
            return (None, 0);
        }
        let start = cursor % n;
        for j in 0..n.min(SINGLE_NODE_MAX_EVALUATIONS) {
            let i = (start + j) % n;
            let c = open[i];
            match eval.consolidate(&[c]) {
                Ok((decision, pods)) => {
                    // The nodes after it may go along: the longest prefix from here that still
                    // goes together (multi-node consolidation anchored at a node that can go
                    // alone; the plain prefix search fails when the first nodes cannot go
                    // together).
                    let rest = eval.allowed(open[i..].to_vec(), DisruptionReason::Underutilized, &mut BTreeMap::new());
                    let cmd = match largest_prefix(rest.len(), |k| eval.consolidate(&rest[..k])) {
                        Some((k, (d, p))) => eval.command(&rest[..k], p, d),
                        None => eval.command(&[c], pods, decision),
                    };
                    return (Some(cmd), i);
                }
                Err(why) => {
                    blocked.entry(c.node.clone()).or_insert(why);
                }
            }
        }
        (None, (start + SINGLE_NODE_MAX_EVALUATIONS) % n)
    }
}
