//! Static drift: a drifted node of a static NodePool (`spec.replicas`) is replaced one for one by
//! a node from the pool's template, pre-spun like any drift replacement. Three things bound it:
//! the pool's disruption budget for `Drifted`; its `limits.nodes`, which every claim of the pool
//! counts against (deleting ones and staged replacements included); and the pool's size: nothing
//! is replaced while it has more live claims than its replicas (the scale-down goes first).
//!
//! A pool at its node limit cannot stage a replacement. Without Karpenter's `TerminateFirstDrift`
//! gate it keeps its drifted nodes, each with the reason, until room appears; with it
//! (terminate-first, Karpenter v1.15) its drifted nodes, within the budget, are deleted first,
//! without one, and the static reconciler refills each from the pool's template once its
//! instance is gone and the limit has room.
//! Consolidation never touches a static pool; expiration deletes its nodes and the static
//! reconciler refills them within the same limit.

use std::collections::BTreeMap;

use kerf_api::nodepool::DisruptionReason;

use super::{Eval, Method};
use crate::disruption::candidates::Candidate;
use crate::disruption::terminate_first::static_limit;
use crate::disruption::{Command, Reason};
use crate::static_pools::static_new_claim;

pub(in crate::disruption) struct StaticDrift;

impl Method for StaticDrift {
    fn reason(&self) -> Reason {
        Reason::Drifted
    }

    fn should_disrupt(&self, c: &Candidate) -> bool {
        c.static_pool && c.drifted.is_some()
    }

    fn compute_command(&mut self, eval: &mut Eval<'_>, blocked: &mut BTreeMap<String, String>) -> Option<Command> {
        static_drift(self, eval, blocked)
    }
}

/// The first static pool's drift command (pools in name order), as many of its drifted nodes as
/// its budget and its node limit allow; each drifted static node of the pools looked at that is
/// not in it gets its reason in `blocked`.
fn static_drift(method: &StaticDrift, eval: &Eval<'_>, blocked: &mut BTreeMap<String, String>) -> Option<Command> {
    let (cands, budgets, pools, counts, types) = (eval.cands, eval.budgets, eval.pools, eval.statics, eval.types);
    let mut by_pool: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in cands.iter().filter(|c| method.should_disrupt(c)) {
        let Some(why) = &c.drifted else { continue };
        match c.held_against(Reason::Drifted) {
            Some(p) => {
                blocked.insert(c.node.clone(), format!("Drifted ({why}), but {p}"));
            }
            None => by_pool.entry(c.pool.as_str()).or_default().push(c),
        }
    }
    for (name, drifted) in by_pool {
        let (Some(pool), Some(count)) = (pools.get(name), counts.get(name)) else { continue };
        let budget = budgets.allowed(pool, DisruptionReason::Drifted);
        let headroom = count.headroom();
        let at_limit = static_limit(name, count);
        let why_not = |c: &Candidate| {
            let drift = c.drifted.clone().unwrap_or_default();
            if count.live > count.want {
                format!(
                    "Drifted ({drift}), but static NodePool {name} has {} live NodeClaims for {} replicas: the scale-down goes first",
                    count.live, count.want
                )
            } else if let Some(full) = at_limit.as_ref().filter(|_| !eval.terminate_first_drift) {
                format!("Drifted ({drift}), but {} and cannot stage a replacement", full.describe())
            } else {
                format!("Drifted ({drift}), but {}", budgets.describe(pool, DisruptionReason::Drifted))
            }
        };
        // At its node limit, a pool replaces by terminating first.
        let terminate_first = at_limit.as_ref().filter(|_| eval.terminate_first_drift);
        let take = match (count.live > count.want, terminate_first.is_some()) {
            (true, _) => 0,
            (false, true) => budget,
            (false, false) => budget.min(headroom),
        };
        let (chosen, waiting) = drifted.split_at(take.min(drifted.len()));
        for c in waiting {
            blocked.insert(c.node.clone(), why_not(c));
        }
        if chosen.is_empty() {
            continue;
        }
        let pool_types = types.get(name).map(Vec::as_slice).unwrap_or_default();
        let new = static_new_claim(pool, pool_types);
        if new.instance_types.is_empty() {
            for c in chosen {
                blocked.insert(
                    c.node.clone(),
                    format!(
                        "Drifted ({}), but no instance type NodePool {name} allows is available for a replacement",
                        c.drifted.clone().unwrap_or_default()
                    ),
                );
            }
            continue;
        }
        let limit = count.limit.map_or_else(|| "unset".to_string(), |l| l.to_string());
        let candidates = chosen.iter().map(|c| (*c).clone()).collect();
        if let Some(full) = terminate_first {
            // The refill is the static reconciler's, once the deleted claim's instance is gone.
            let detail = full.terminate_first_detail(&chosen[0].drifted.clone().unwrap_or_default(), chosen.len());
            return Some(Command::new(Reason::Drifted, candidates, Vec::new(), detail, Vec::new()));
        }
        let detail = format!(
            "{}; static NodePool {name} replaces it with a node from its template ({} of {} NodeClaims under limits.nodes {})",
            chosen[0].drifted.clone().unwrap_or_default(),
            count.claims + chosen.len(),
            count.want,
            limit,
        );
        // One command a pass: later pools' drifted nodes keep the reason they were last given.
        return Some(Command::new(Reason::Drifted, candidates, vec![new; chosen.len()], detail, Vec::new()));
    }
    None
}
