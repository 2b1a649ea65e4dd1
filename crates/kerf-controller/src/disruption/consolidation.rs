//! Consolidation's decision core: pure and deterministic. One [`SchedulingContext`] is built
//! per evaluation (per cluster change) and asked "without these nodes, where would their pods
//! go?" for every candidate and candidate set; [`decide`] reads the answer ([`WhatIf`]) and says
//! whether the candidates can simply be deleted, replaced by one strictly cheaper node, or
//! neither (and why). [`consolidate`] (one set), [`multi_node`] (the binary search over the
//! cheapest-to-disrupt prefix) and [`single_node`] (the first candidate that can go alone) are
//! the searches the disruption controller runs; `kerf bench consolidation` runs the same ones.

use std::collections::BTreeSet;
use std::sync::Arc;

use kerf_api::labels;
use kerf_api::launch::{self, offering_allowed};
use kerf_scheduling::{InstanceType, NewNodeClaim, Offering, Replacement, Requirements, SchedulingContext, WhatIf};

use super::candidates::Candidate;

/// Karpenter's floor for spot-to-spot consolidation: at least this many cheaper spot types, and
/// the replacement launches from the cheapest this many.
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// Karpenter's cap on candidates in one multi-node consolidation.
pub const MULTI_NODE_MAX_CANDIDATES: usize = 100;

/// Asks `ctx` the what-if for `cands`: their nodes gone, their pods placed elsewhere. `Err`
/// names a node the context does not know.
pub fn what_if(ctx: &mut SchedulingContext, cands: &[&Candidate]) -> Result<WhatIf, String> {
    let names: Vec<&str> = cands.iter().map(|c| c.node.as_str()).collect();
    ctx.without_nodes(&names).map_err(|e| format!("it cannot be simulated: {e}"))
}

/// What consolidation would do with a set of candidates.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Their pods fit on the remaining nodes.
    Delete,
    /// Their pods need one new node, strictly cheaper than the candidates together.
    Replace { claim: Box<NewNodeClaim>, price: f64, instance_type: String },
}

fn dollars(v: f64) -> String {
    format!("${v:.4}/h")
}

/// Decides from the what-if `answer` for `cands`. `Err` says why neither deleting nor replacing
/// works.
pub fn decide(cands: &[&Candidate], answer: &WhatIf, spot_to_spot: bool) -> Result<Decision, String> {
    let n = answer.pods.len();
    if let Some(&i) = answer.unplaced.first() {
        let pod = answer.pods.get(i).map_or_else(|| format!("#{i}"), kerf_scheduling::pod::key);
        return Err(format!("pod {pod} would fit nowhere else"));
    }
    let total: f64 = cands.iter().map(|c| c.price).sum();
    let claim = match answer.new_node_claims.as_slice() {
        [] => return Ok(Decision::Delete),
        [one] => &one.claim,
        many => return Err(format!("its {n} pod(s) would need {} new nodes, not one", many.len())),
    };
    let reqs = Requirements::from_node_selector(&claim.requirements);
    let own_types: BTreeSet<&str> = cands.iter().map(|c| c.instance_type.as_str()).collect();
    // The replacement launches by the launch rule: its capacity type and each type's price are
    // the offers a launch of these options would try.
    let mut offers: Vec<(&Arc<InstanceType>, &Offering)> = claim
        .instance_types
        .iter()
        .flat_map(|t| t.offerings.iter().map(move |o| (t, o)))
        // A node is not replaced by its own type, unless into a capacity reservation: work moves
        // into reserved capacity that frees up.
        .filter(|(t, o)| o.reservation.is_some() || !own_types.contains(t.name.as_str()))
        .filter(|(_, o)| o.available && offering_allowed(&reqs, o))
        .collect();
    let spot = launch::choose(&mut offers) == Some(labels::CAPACITY_TYPE_SPOT);
    let mut priced: Vec<(f64, &Arc<InstanceType>)> = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (t, o) in offers {
        if seen.insert(t.name.as_str()) {
            priced.push((o.price, t));
        }
    }
    let cheapest = priced.first().map(|(p, t)| format!("{} at {}", t.name, dollars(*p)));
    let mut cheaper: Vec<(f64, &Arc<InstanceType>)> = priced.iter().copied().filter(|(p, _)| *p < total).collect();
    let all_spot = cands.iter().all(|c| c.is_spot());
    if all_spot && spot && !cheaper.is_empty() {
        if !spot_to_spot {
            return Err(format!(
                "no cheaper replacement it may use: a spot node is only replaced by a cheaper spot node with settings.featureGates.spotToSpotConsolidation (cheapest option {})",
                cheapest.unwrap_or_else(|| "none".to_string())
            ));
        }
        if cands.len() > 1 {
            return Err("spot nodes are replaced by spot nodes one at a time".to_string());
        }
        if cheaper.len() < SPOT_TO_SPOT_MIN_TYPES {
            return Err(format!(
                "no cheaper replacement: only {} spot instance type(s) are cheaper than {}, spot-to-spot consolidation needs {SPOT_TO_SPOT_MIN_TYPES}",
                cheaper.len(),
                dollars(total)
            ));
        }
        cheaper.truncate(SPOT_TO_SPOT_MIN_TYPES);
    }
    let Some(&(price, best)) = cheaper.first() else {
        if total <= 0.0 && cands.iter().all(|c| c.capacity_type == labels::CAPACITY_TYPE_RESERVED) {
            return Err(format!(
                "no cheaper replacement: it runs in reserved capacity at {} (as the reservation is priced)",
                dollars(total)
            ));
        }
        if priced.is_empty() {
            return Err(format!("no cheaper replacement: no other instance type fits its {n} pod(s)"));
        }
        return Err(format!(
            "no cheaper replacement: its {n} pod(s) need a node costing at least {} ({}), it costs {}",
            priced.first().map_or_else(|| "more".to_string(), |(p, _)| dollars(*p)),
            priced.first().map_or("no other type", |(_, t)| t.name.as_str()),
            dollars(total)
        ));
    };
    let mut restricted = claim.clone();
    restricted.instance_types = cheaper.iter().map(|(_, t)| Arc::clone(t)).collect();
    Ok(Decision::Replace { claim: Box::new(restricted), price, instance_type: best.name.clone() })
}

/// One line for people: what the decision does and what it saves.
pub fn describe(cands: &[&Candidate], pods: usize, decision: &Decision) -> (String, f64) {
    let total: f64 = cands.iter().map(|c| c.price).sum();
    let nodes = if cands.len() == 1 { "its".to_string() } else { format!("these {} nodes'", cands.len()) };
    let text = match decision {
        Decision::Delete if pods == 0 => {
            format!("{} empty; deleting saves {}", if cands.len() == 1 { "it is" } else { "they are" }, dollars(total))
        }
        Decision::Delete => format!("{nodes} {pods} pod(s) fit on other nodes; deleting saves {}", dollars(total)),
        Decision::Replace { price, instance_type, .. } => format!(
            "{nodes} {pods} pod(s) fit on 1 cheaper node ({instance_type}, {} instead of {})",
            dollars(*price),
            dollars(total)
        ),
    };
    (text, savings(cands, decision))
}

/// $/h a decision saves on `cands`: their price, less the replacement's.
pub fn savings(cands: &[&Candidate], decision: &Decision) -> f64 {
    let total: f64 = cands.iter().map(|c| c.price).sum();
    match decision {
        Decision::Delete => total,
        Decision::Replace { price, .. } => total - price,
    }
}

/// The candidates in the order consolidation tries them, cheapest to disrupt first: the lowest
/// disruption cost (its pods' eviction costs, so pod-deletion-cost and priority count; see
/// `balanced`), then fewest pods (buffer room included), then the most expensive node, then by
/// name.
pub fn consolidation_order(list: &mut [&Candidate]) {
    list.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| a.pods.len().cmp(&b.pods.len()))
            .then_with(|| b.price.total_cmp(&a.price))
            .then_with(|| a.node.cmp(&b.node))
    });
}

/// The nodes disruption would take first, for `PodDeletionCostManagement`: drifted nodes drift
/// may act on, then every other candidate of a pool that is not static, each group in
/// [`consolidation_order`]. Nodes that no voluntary disruption may touch are left out.
pub fn deletion_ranking(cands: &[Candidate]) -> Vec<String> {
    let drifted = |c: &Candidate| c.drifted.is_some() && c.held_against(super::Reason::Drifted).is_none();
    let mut first: Vec<&Candidate> = cands.iter().filter(|c| drifted(c)).collect();
    let mut rest: Vec<&Candidate> =
        cands.iter().filter(|c| !drifted(c) && c.protected.is_none() && !c.static_pool).collect();
    consolidation_order(&mut first);
    consolidation_order(&mut rest);
    first.into_iter().chain(rest).map(|c| c.node.clone()).collect()
}

/// One consolidation question: can `cands` go together (deleted, or replaced by one cheaper
/// node)? Returns the decision and how many pods would move.
pub fn consolidate(
    ctx: &mut SchedulingContext,
    cands: &[&Candidate],
    spot_to_spot: bool,
) -> Result<(Decision, usize), String> {
    let answer = what_if(ctx, cands)?;
    let decision = decide(cands, &answer, spot_to_spot)?;
    if let ([one], Decision::Replace { .. }) = (cands, &decision)
        && let Some(why) = &one.replace_hold
    {
        return Err(why.clone());
    }
    confirm(ctx, cands, &answer, &decision)?;
    Ok((decision, answer.pods.len()))
}

/// Checks a decision against kube-scheduler: the moved pods, bound one by one with its scores
/// onto the remaining nodes (and the replacement, as the cheapest offering it launches from),
/// must all find a node. A plan that holds only in kerf's packing order would leave a pod
/// pending, get a node launched for it and be undone.
pub fn confirm(
    ctx: &mut SchedulingContext,
    cands: &[&Candidate],
    answer: &WhatIf,
    decision: &Decision,
) -> Result<(), String> {
    let names: Vec<&str> = cands.iter().map(|c| c.node.as_str()).collect();
    ctx.kube_replay(&names, &answer.pods, replacement_of(decision)?)
}

/// The node a decision launches, as kube-scheduler would find it: the replacement type at the
/// cheapest offering it may launch from. `None` for a delete.
pub fn replacement_of(decision: &Decision) -> Result<Option<Replacement<'_>>, String> {
    let Decision::Replace { claim, instance_type, .. } = decision else { return Ok(None) };
    let reqs = Requirements::from_node_selector(&claim.requirements);
    let Some(t) = claim.instance_types.iter().find(|t| &t.name == instance_type) else {
        return Err(format!("its replacement type {instance_type} is not among the claim's types"));
    };
    let Some(offering) = t
        .offerings
        .iter()
        .filter(|o| o.available)
        .filter(|o| offering_allowed(&reqs, o))
        .min_by(|a, b| a.price.total_cmp(&b.price))
    else {
        return Err(format!("its replacement type {instance_type} has no offering it may launch"));
    };
    Ok(Some(Replacement { claim, instance_type: t, offering }))
}

/// Multi-node consolidation: the longest prefix of `list` (in [`consolidation_order`]; at least
/// two, at most [`MULTI_NODE_MAX_CANDIDATES`]) that can go together, found by binary search over
/// the prefix length. Returns the prefix length, the decision and the pods that would move.
pub fn multi_node(
    ctx: &mut SchedulingContext,
    list: &[&Candidate],
    spot_to_spot: bool,
) -> Option<(usize, Decision, usize)> {
    largest_prefix(list.len(), |k| consolidate(ctx, &list[..k], spot_to_spot)).map(|(k, (d, pods))| (k, d, pods))
}

/// The longest prefix length in `2..=min(len, MULTI_NODE_MAX_CANDIDATES)` for which `evaluate`
/// succeeds, found by binary search (longer prefixes are assumed to fail once one does, as
/// Karpenter assumes).
pub fn largest_prefix<T>(len: usize, mut evaluate: impl FnMut(usize) -> Result<T, String>) -> Option<(usize, T)> {
    let (mut lo, mut hi) = (2usize, len.min(MULTI_NODE_MAX_CANDIDATES));
    let mut best = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        match evaluate(mid) {
            Ok(v) => {
                best = Some((mid, v));
                lo = mid + 1;
            }
            Err(_) => hi = mid - 1,
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::Operator;
    use kerf_api::SlimPod;
    use kerf_scheduling::{Offering, PricedClaim};

    fn itype(name: &str, price: f64) -> Arc<InstanceType> {
        Arc::new(InstanceType {
            name: name.into(),
            labels: Default::default(),
            capacity: Default::default(),
            overhead: Default::default(),
            offerings: ["spot", "on-demand"]
                .iter()
                .map(|ct| Offering {
                    zone: "z".into(),
                    capacity_type: ct.to_string(),
                    price: if *ct == "spot" { price * 0.5 } else { price },
                    available: true,
                    reservation: None,
                })
                .collect(),
            price_estimated: false,
        })
    }

    fn cand(itype: &str, ct: &str, price: f64) -> Candidate {
        Candidate {
            claim: "c".into(),
            node: "n".into(),
            pool: "p".into(),
            instance_type: itype.into(),
            capacity_type: ct.into(),
            zone: "z".into(),
            price,
            pods: vec![],
            disruption_cost: 1.0,
            consolidatable: true,
            not_consolidatable: None,
            protected: None,
            eventual_grace: None,
            drifted: None,
            unfit: None,
            replace_hold: None,
            static_pool: false,
        }
    }

    fn claim(types: Vec<Arc<InstanceType>>, ct: &[&str]) -> NewNodeClaim {
        NewNodeClaim {
            node_pool: "p".into(),
            requirements: vec![kerf_api::NodeSelectorRequirementWithMinValues {
                key: labels::CAPACITY_TYPE.into(),
                operator: Operator::In,
                values: ct.iter().map(|s| s.to_string()).collect(),
                min_values: None,
            }],
            instance_types: types,
            instance_type_min_values: None,
            labels: Default::default(),
            taints: vec![],
            startup_taints: vec![],
            pods: vec![0],
            requests: Default::default(),
        }
    }

    fn pod() -> Arc<SlimPod> {
        Arc::new(SlimPod::default())
    }

    /// A what-if that moves one pod and needs `claims`.
    fn result(claims: Vec<NewNodeClaim>) -> WhatIf {
        WhatIf {
            pods: vec![pod()],
            placements: vec![],
            new_node_claims: claims.into_iter().map(|claim| PricedClaim { claim, price: 0.0 }).collect(),
            unplaced: vec![],
        }
    }

    #[test]
    fn pods_that_fit_elsewhere_mean_delete() {
        let c = cand("big", "on-demand", 1.0);
        let d = decide(&[&c], &result(vec![]), false).unwrap();
        assert!(matches!(d, Decision::Delete));
    }

    #[test]
    fn a_pod_that_fits_nowhere_blocks_and_is_named() {
        let c = cand("big", "on-demand", 1.0);
        let mut r = result(vec![]);
        r.unplaced.push(0);
        let e = decide(&[&c], &r, false).unwrap_err();
        assert!(e.contains("fit nowhere else") && e.contains("default/"), "{e}");
    }

    #[test]
    fn replacement_is_strictly_cheaper_and_never_the_same_type() {
        let c = cand("mid", "on-demand", 0.5);
        let types = vec![itype("small", 0.2), itype("mid", 0.5), itype("equal", 0.5), itype("big", 1.0)];
        let d = decide(&[&c], &result(vec![claim(types, &["on-demand"])]), false).unwrap();
        let Decision::Replace { claim, price, instance_type } = d else { panic!("expected replace") };
        assert_eq!(instance_type, "small");
        assert_eq!(price, 0.2);
        let names: Vec<&str> = claim.instance_types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["small"]);
    }

    #[test]
    fn no_cheaper_type_blocks_with_the_cheapest_option() {
        let c = cand("small", "on-demand", 0.2);
        let types = vec![itype("small", 0.2), itype("mid", 0.5)];
        let e = decide(&[&c], &result(vec![claim(types, &["on-demand"])]), false).unwrap_err();
        assert!(e.starts_with("no cheaper replacement") && e.contains("mid"), "{e}");
    }

    #[test]
    fn spot_to_spot_needs_the_gate_and_fifteen_cheaper_types() {
        let c = cand("big", "spot", 10.0);
        let few: Vec<_> = (0..5).map(|i| itype(&format!("t{i:02}"), 1.0 + i as f64)).collect();
        let many: Vec<_> = (0..20).map(|i| itype(&format!("t{i:02}"), 1.0 + i as f64 * 0.1)).collect();
        let off = decide(&[&c], &result(vec![claim(many.clone(), &["spot"])]), false).unwrap_err();
        assert!(off.contains("spotToSpotConsolidation"), "{off}");
        let short = decide(&[&c], &result(vec![claim(few, &["spot"])]), true).unwrap_err();
        assert!(short.contains("needs 15"), "{short}");
        let Decision::Replace { claim, .. } = decide(&[&c], &result(vec![claim(many, &["spot"])]), true).unwrap()
        else {
            panic!("expected replace")
        };
        assert_eq!(claim.instance_types.len(), SPOT_TO_SPOT_MIN_TYPES);
    }

    #[test]
    fn needing_two_nodes_is_not_consolidation() {
        let c = cand("big", "on-demand", 1.0);
        let types = vec![itype("small", 0.1)];
        let e = decide(&[&c], &result(vec![claim(types.clone(), &["on-demand"]), claim(types, &["on-demand"])]), false)
            .unwrap_err();
        assert!(e.contains("2 new nodes"), "{e}");
    }

    #[test]
    fn largest_prefix_finds_the_longest_working_prefix() {
        let got = largest_prefix(40, |k| if k <= 23 { Ok(k) } else { Err(String::new()) });
        assert_eq!(got.map(|(k, _)| k), Some(23));
        assert!(largest_prefix(1, Ok::<_, String>).is_none());
    }
}
