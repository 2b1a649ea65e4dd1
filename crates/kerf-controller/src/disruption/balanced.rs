//! `consolidationPolicy: Balanced` (Karpenter v1.14): a consolidation in a Balanced pool goes
//! ahead only when its share of the pool's cost saved is at least half its share of the pool's
//! disruption cost, so that marginal moves (a few cents an hour for a node full of pods) are not
//! taken while worthwhile ones are.
//!
//! - A node's disruption cost is what evicting its moving pods costs (see `cost`).
//! - A pool's cost and disruption cost sum over all of its nodes, candidates or not.
//! - score = (savings / pool cost) / (move's disruption cost / pool disruption cost); the move
//!   goes ahead when score >= 1 / [`BALANCED_K`]. A move that saves nothing scores 0. A move
//!   across pools gives each Balanced pool its share of the savings (by its nodes' share of the
//!   price), and every Balanced pool must pass.
//! - Emptiness is not scored: an empty node goes whatever the policy.

use std::collections::BTreeMap;

use kerf_api::NodePool;
use kerf_api::nodepool::{BALANCED_K, ConsolidationPolicy};

/// One pool's cost ($/h) and disruption cost, over all of its nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolTotals {
    pub cost: f64,
    pub disruption: f64,
}

/// A move's score in one Balanced pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub pool: String,
    /// Savings as a share of the pool's cost.
    pub savings: f64,
    /// The move's disruption cost as a share of the pool's.
    pub disruption: f64,
    /// The pool's share of the move's savings, $/h.
    pub saved: f64,
}

impl Score {
    pub fn value(&self) -> f64 {
        if self.savings <= 0.0 {
            0.0
        } else if self.disruption <= 0.0 {
            f64::INFINITY
        } else {
            self.savings / self.disruption
        }
    }

    pub fn approved(&self) -> bool {
        self.value() >= 1.0 / f64::from(BALANCED_K)
    }

    /// The score in words, as a node's reason and a disruption's detail give it.
    pub fn describe(&self) -> String {
        format!(
            "Balanced score {:.2} in NodePool {} (saves {:.1}% of its cost for {:.1}% of its disruption cost; needs {:.2})",
            self.value(),
            self.pool,
            self.savings * 100.0,
            self.disruption * 100.0,
            1.0 / f64::from(BALANCED_K)
        )
    }
}

/// What a move's score reads of one node it removes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moved<'a> {
    pub pool: &'a str,
    /// $/h.
    pub price: f64,
    pub disruption_cost: f64,
}

/// A move's score in each Balanced pool among the nodes it removes (none when no pool is
/// Balanced).
pub(crate) fn score_move<'a>(
    nodes: impl IntoIterator<Item = Moved<'a>>,
    savings: f64,
    pools: &BTreeMap<String, NodePool>,
    totals: &BTreeMap<String, PoolTotals>,
) -> Vec<Score> {
    let balanced = |pool: &str| {
        pools.get(pool).is_some_and(|p| p.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced)
    };
    score_pools(nodes, savings, totals, balanced)
}

/// A move's score in every pool among the nodes it removes, as if each were Balanced: what
/// Balanced would have decided of a move another policy took.
pub(crate) fn score_as_balanced<'a>(
    nodes: impl IntoIterator<Item = Moved<'a>>,
    savings: f64,
    totals: &BTreeMap<String, PoolTotals>,
) -> Vec<Score> {
    score_pools(nodes, savings, totals, |_| true)
}

/// A move's score in each of the pools among its nodes that `scored` picks.
fn score_pools<'a>(
    nodes: impl IntoIterator<Item = Moved<'a>>,
    savings: f64,
    totals: &BTreeMap<String, PoolTotals>,
    scored: impl Fn(&str) -> bool,
) -> Vec<Score> {
    let mut source = 0.0;
    let mut by_pool: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for n in nodes {
        source += n.price;
        let e = by_pool.entry(n.pool).or_default();
        e.0 += n.price;
        e.1 += n.disruption_cost;
    }
    let several = by_pool.len() > 1;
    by_pool
        .into_iter()
        .filter(|(pool, _)| scored(pool))
        .map(|(pool, (price, disruption))| {
            let t = totals.get(pool).copied().unwrap_or_default();
            let share = if several && source > 0.0 { savings * price / source } else { savings };
            Score {
                pool: pool.to_string(),
                savings: if t.cost > 0.0 { share / t.cost } else { 0.0 },
                disruption: if t.disruption > 0.0 { disruption / t.disruption } else { 0.0 },
                saved: share,
            }
        })
        .collect()
}

/// Where a Balanced score falls, for `karpenter_consolidation_score`: the upper bounds of the
/// histogram's buckets (the threshold, 1 / [`BALANCED_K`], is one of them).
pub const SCORE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0];

/// The consolidation moves disruption weighed, by pool, policy and decision, and the scores of
/// the Balanced ones: what `karpenter_consolidation_moves_total` and
/// `karpenter_consolidation_score` publish.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MoveCounts {
    /// (pool, policy, approved) → moves.
    pub moves: BTreeMap<(String, &'static str, bool), u64>,
    /// (pool, approved) → (per bucket of [`SCORE_BUCKETS`], then the count, the sum).
    pub scores: BTreeMap<(String, bool), ([u64; SCORE_BUCKETS.len()], u64, f64)>,
}

impl MoveCounts {
    /// One move in `pool`: its Balanced score if it has one.
    pub fn record(&mut self, pool: &str, policy: &'static str, approved: bool, score: Option<f64>) {
        *self.moves.entry((pool.to_string(), policy, approved)).or_default() += 1;
        if let Some(s) = score {
            let h = self.scores.entry((pool.to_string(), approved)).or_default();
            for (i, bound) in SCORE_BUCKETS.iter().enumerate() {
                if s <= *bound {
                    h.0[i] += 1;
                }
            }
            h.1 += 1;
            h.2 += if s.is_finite() { s } else { SCORE_BUCKETS[SCORE_BUCKETS.len() - 1] };
        }
    }
}

impl MoveCounts {
    /// Adds another evaluation's counts.
    pub fn merge(&mut self, other: MoveCounts) {
        for (k, n) in other.moves {
            *self.moves.entry(k).or_default() += n;
        }
        for (k, (buckets, count, sum)) in other.scores {
            let h = self.scores.entry(k).or_default();
            for (mine, theirs) in h.0.iter_mut().zip(buckets) {
                *mine += theirs;
            }
            h.1 += count;
            h.2 += sum;
        }
    }
}

/// The consolidations disruption took in each pool, and how many of them Balanced would have
/// refused: what `kerf_consolidation_balanced_what_if_total` and the report's `balancedWhatIf`
/// publish, so an operator can compare policies on their own cluster before switching.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WhatIfCounts {
    /// Pool → its policy, the consolidations taken, those Balanced would have refused, and the
    /// $/h the refused ones saved.
    pub pools: BTreeMap<String, WhatIf>,
}

/// One pool's [`WhatIfCounts`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WhatIf {
    pub policy: &'static str,
    pub consolidations: u64,
    pub balanced_would_refuse: u64,
    /// $/h saved by the consolidations Balanced would have refused (this pool's share).
    pub refused_savings: f64,
}

impl WhatIfCounts {
    /// A consolidation taken in a pool of `policy`, with its score as if the pool were Balanced.
    pub fn record(&mut self, score: &Score, policy: &'static str) {
        let w = self.pools.entry(score.pool.clone()).or_default();
        w.policy = policy;
        w.consolidations += 1;
        if !score.approved() {
            w.balanced_would_refuse += 1;
            w.refused_savings += score.saved;
        }
    }
}

/// A pool's consolidation policy as the metrics name it.
pub(crate) fn policy_name(pool: Option<&NodePool>) -> &'static str {
    match pool.map(|p| p.spec.disruption.consolidation_policy) {
        Some(ConsolidationPolicy::WhenEmpty) => "WhenEmpty",
        Some(ConsolidationPolicy::Balanced) => "Balanced",
        _ => "WhenEmptyOrUnderutilized",
    }
}

/// The lowest of a move's scores, the one that decides it.
pub(crate) fn deciding(scores: &[Score]) -> Option<&Score> {
    scores.iter().min_by(|a, b| a.value().total_cmp(&b.value()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_passes_when_its_savings_share_is_at_least_half_its_disruption_share() {
        let s = |savings, disruption| Score { pool: "p".into(), savings, disruption, saved: 0.0 };
        assert!(s(0.10, 0.20).approved());
        assert!(!s(0.02, 0.20).approved());
        assert_eq!(s(0.0, 0.1).value(), 0.0);
        assert!(!s(-0.1, 0.1).approved());
        assert!(s(0.01, 0.0).approved());
    }
}
