//! The measured part of `kerf bench consolidation`: the disruption controller's own
//! consolidation searches ([`kerf_controller::disruption::consolidation`]) run over a generated
//! cluster — every node as a single-node candidate, then the multi-node search — with one
//! SchedulingContext built for all of them, as the controller builds one per evaluation.

use std::time::Instant;

use kerf_api::labels;
use kerf_controller::disruption::Candidate;
use kerf_controller::disruption::consolidation::{Decision, consolidate, consolidation_order, multi_node};
use kerf_controller::disruption::cost::{DeclaredCost, node_disruption_cost};
use kerf_scheduling::{SchedulingContext, SchedulingInput};

/// What one run measured and found.
pub struct Figures {
    /// Seconds to build the SchedulingContext.
    pub build_seconds: f64,
    /// Seconds of each single-node candidate's question and decision, in node order.
    pub per_candidate: Vec<f64>,
    /// Pods the single-node what-ifs moved, summed.
    pub moved: usize,
    pub deletable: usize,
    pub replaceable: usize,
    /// Seconds of the multi-node search.
    pub multi_seconds: f64,
    /// Nodes the multi-node search would consolidate together (0: none).
    pub multi_nodes: usize,
}

/// The cluster's nodes as disruption candidates (every one consolidatable, nothing protecting
/// it), `prices[i]` being node `i`'s hourly price.
fn candidates(input: &SchedulingInput, prices: &[f64]) -> Vec<Candidate> {
    input
        .existing_nodes
        .iter()
        .zip(prices)
        .map(|(n, price)| {
            let label = |k: &str| n.labels.get(k).cloned().unwrap_or_default();
            Candidate {
                claim: n.name.clone(),
                node: n.name.clone(),
                pool: n.node_pool.clone().unwrap_or_default(),
                instance_type: label(labels::INSTANCE_TYPE),
                capacity_type: label(labels::CAPACITY_TYPE),
                zone: label(labels::ZONE),
                price: *price,
                pods: n.pods.clone(),
                disruption_cost: node_disruption_cost(n.pods.iter().map(|p| &**p), DeclaredCost::default()),
                consolidatable: true,
                not_consolidatable: None,
                protected: None,
                eventual_grace: None,
                drifted: None,
                unfit: None,
                replace_hold: None,
                static_pool: false,
            }
        })
        .collect()
}

/// Builds one context for `input` and runs the controller's consolidation decision on every
/// node alone and the multi-node search over all of them. `spot_to_spot` is the feature gate.
pub fn run(input: SchedulingInput, prices: &[f64], spot_to_spot: bool) -> Figures {
    let cands = candidates(&input, prices);
    let start = Instant::now();
    let mut ctx = SchedulingContext::new(input);
    let build_seconds = start.elapsed().as_secs_f64();
    let mut figures = Figures {
        build_seconds,
        per_candidate: Vec::with_capacity(cands.len()),
        moved: 0,
        deletable: 0,
        replaceable: 0,
        multi_seconds: 0.0,
        multi_nodes: 0,
    };
    for c in &cands {
        let t = Instant::now();
        let decision = consolidate(&mut ctx, &[c], spot_to_spot);
        figures.per_candidate.push(t.elapsed().as_secs_f64());
        match decision {
            Ok((Decision::Delete, pods)) => {
                figures.deletable += 1;
                figures.moved += pods;
            }
            Ok((Decision::Replace { .. }, pods)) => {
                figures.replaceable += 1;
                figures.moved += pods;
            }
            Err(_) => {}
        }
    }
    let t = Instant::now();
    let mut order: Vec<&Candidate> = cands.iter().collect();
    consolidation_order(&mut order);
    figures.multi_nodes = multi_node(&mut ctx, &order, spot_to_spot).map_or(0, |(k, _, _)| k);
    figures.multi_seconds = t.elapsed().as_secs_f64();
    figures
}
