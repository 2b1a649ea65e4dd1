//! CapacityQuotas in the Scheduler: which types a quota's selector picks, headroom shared and
//! debited across NodePools within one pass, what a what-if gives back, and the pending reason.

use std::sync::Arc;

use kerf_api::capacityquota::{NodeLabelSelector, SelectorRequirement};
use kerf_api::labels::{INSTANCE_TYPE, NODE_POOL, ZONE};
use kerf_api::{ResourceList, SlimPod};

use crate::instance::InstanceType;
use crate::model::{ExistingNode, NodePoolInput, QuotaInput, SchedulingInput, SchedulingResult};
use crate::scheduler::{SchedulingContext, schedule};
use crate::testing::*;

const ZONES: [&str; 2] = ["a", "b"];

fn types() -> Vec<InstanceType> {
    vec![
        instance_type("small", "2", "4Gi", "20", 0.10, &ZONES),
        instance_type("large", "8", "16Gi", "80", 0.40, &ZONES),
    ]
}

fn pool(name: &str) -> NodePoolInput {
    NodePoolInput {
        node_pool: Arc::new(node_pool(name, vec![])),
        instance_types: types().into_iter().map(Arc::new).collect(),
        in_use: ResourceList::new(),
    }
}

fn quota(
    name: &str,
    selector: Option<NodeLabelSelector>,
    limits: &[(&str, &str)],
    used: &[(&str, &str)],
) -> QuotaInput {
    QuotaInput { name: name.into(), selector, limits: rl(limits), used: rl(used) }
}

fn select(key: &str, values: &[&str]) -> Option<NodeLabelSelector> {
    Some(NodeLabelSelector {
        match_expressions: vec![SelectorRequirement {
            key: key.into(),
            operator: "In".into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
        ..Default::default()
    })
}

fn input(pools: Vec<NodePoolInput>, pods: Vec<Arc<SlimPod>>, quotas: Vec<QuotaInput>) -> SchedulingInput {
    SchedulingInput { node_pools: pools, pods, quotas, ..Default::default() }
}

/// Per new claim: its pool and the cheapest type it would launch.
fn claims(r: &SchedulingResult) -> Vec<(String, String)> {
    r.new_node_claims.iter().map(|c| (c.node_pool.clone(), c.instance_types[0].name.clone())).collect()
}

#[test]
fn a_quota_keeps_out_only_the_types_its_selector_picks() {
    // The quota covers large nodes and has no cpu left: the small pod goes on a small node, the
    // pod only a large one holds stays pending, naming the quota.
    let q = quota("large-only", select(INSTANCE_TYPE, &["large"]), &[("cpu", "16")], &[("cpu", "16")]);
    let pods = vec![pod("big").cpu("6").build(), pod("little").cpu("1").build()];
    let r = schedule(&input(vec![pool("default")], pods, vec![q]));
    assert_eq!(claims(&r), [("default".to_string(), "small".to_string())]);
    assert_eq!(r.errors.len(), 1, "{r:?}");
    assert_eq!(r.errors[0].1.reason, "NodePoolLimitExceeded");
    assert_eq!(
        r.errors[0].1.message,
        "NodePool default: CapacityQuota \"large-only\" would exceed cpu: 16 limit, 16 used, needs 8"
    );
}

#[test]
fn headroom_is_debited_as_claims_are_planned_across_pools() {
    // 16 CPUs over both pools, 4 used: one large node (8) fits, then only a small one (2) and
    // another small one (2). Pods of 6 CPUs, 3 for each pool: one is placed.
    let q = quota("all", None, &[("cpu", "16")], &[("cpu", "4")]);
    let mut pods = Vec::new();
    for (i, p) in ["team-a", "team-b", "team-a", "team-b"].iter().enumerate() {
        pods.push(pod(&format!("p{i}")).cpu("6").node_selector(NODE_POOL, p).build());
    }
    let r = schedule(&input(vec![pool("team-a"), pool("team-b")], pods, vec![q]));
    assert_eq!(claims(&r).len(), 1, "{:?}", claims(&r));
    assert_eq!(r.errors.len(), 3);
    let message = &r.errors[0].1.message;
    assert!(message.contains("CapacityQuota \"all\" would exceed cpu: 16 limit, 12 used, needs 8"), "{message}");
    // Small pods share the rest, 12 CPUs, whichever pool: a claim that may still become a large
    // node holds 8 of them, so the claims of both pools together never pass 12.
    let mut pods = Vec::new();
    for i in 0..8 {
        let p = if i % 2 == 0 { "team-a" } else { "team-b" };
        pods.push(pod(&format!("s{i}")).cpu("1500m").node_selector(NODE_POOL, p).build());
    }
    let q = quota("all", None, &[("cpu", "16")], &[("cpu", "4")]);
    let r = schedule(&input(vec![pool("team-a"), pool("team-b")], pods, vec![q]));
    let total: usize = claims(&r).iter().map(|(_, t)| if t == "small" { 2 } else { 8 }).sum();
    assert!(total <= 12, "{:?}", claims(&r));
    assert!(claims(&r).iter().any(|(p, _)| p == "team-a") && claims(&r).iter().any(|(p, _)| p == "team-b"));
    assert!(!r.errors.is_empty() && r.errors.iter().all(|(_, e)| e.message.contains("CapacityQuota \"all\"")));
}

#[test]
fn a_node_count_limit_counts_each_new_claim() {
    let q = quota("two-nodes", select(NODE_POOL, &["default"]), &[("nodes", "2")], &[("nodes", "1")]);
    let pods = (0..3).map(|i| pod(&format!("p{i}")).cpu("7").build()).collect();
    let r = schedule(&input(vec![pool("default")], pods, vec![q]));
    assert_eq!(claims(&r).len(), 1);
    assert_eq!(
        r.errors[0].1.message,
        "NodePool default: CapacityQuota \"two-nodes\" would exceed nodes: 2 limit, 2 used, needs 1"
    );
}

#[test]
fn quotas_apply_beside_the_pools_own_limits() {
    // The pool's limit would allow a large node; the quota does not.
    let mut p = pool("default");
    let mut np = (*p.node_pool).clone();
    np.spec.limits = Some(rl(&[("cpu", "100")]));
    p.node_pool = Arc::new(np);
    let q = quota("small", None, &[("cpu", "4")], &[]);
    let r = schedule(&input(vec![p], vec![pod("big").cpu("6").build()], vec![q]));
    assert!(r.new_node_claims.is_empty());
    assert!(r.errors[0].1.message.contains("CapacityQuota \"small\" would exceed cpu: 4 limit, 0 used, needs 8"));
}

fn managed(name: &str, zone: &str, cpu: &str, pods: &[(&str, &str)]) -> ExistingNode {
    let mut n =
        node(name, &[(ZONE, zone), (NODE_POOL, "default")], &[("cpu", cpu), ("memory", "16Gi"), ("pods", "80")]);
    n.node_pool = Some("default".into());
    n.pool_usage = rl(&[("cpu", cpu), ("memory", "16Gi"), ("pods", "80")]);
    n.pods = pods.iter().map(|(p, c)| pod(p).cpu(c).build()).collect();
    n
}

#[test]
fn a_replacement_may_use_what_the_removed_node_held_of_a_quota_and_no_more() {
    // Two 8-CPU nodes fill a 16-CPU quota. Without n1, its 1-CPU pod needs a new node: the 8
    // CPUs n1 held are free for a small one.
    let nodes = vec![managed("n1", "a", "8", &[("p1", "1")]), managed("n2", "b", "8", &[("full", "8")])];
    let q = quota("team", select(NODE_POOL, &["default"]), &[("cpu", "16")], &[("cpu", "16")]);
    let mut i = input(vec![pool("default")], vec![], vec![q]);
    i.existing_nodes = nodes;
    let mut ctx = SchedulingContext::new(i);
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert_eq!(w.new_node_claims.len(), 1, "{w:?}");
    assert_eq!(w.new_node_claims[0].claim.instance_types[0].name, "small");
    // One CPU over the limit: the 8 n1 gives back leave 7, no room for a large node that p2
    // (6 CPUs) needs.
    let q = quota("team", select(NODE_POOL, &["default"]), &[("cpu", "15")], &[("cpu", "16")]);
    let mut i = input(vec![pool("default")], vec![], vec![q]);
    i.existing_nodes = vec![managed("n1", "a", "8", &[("p2", "6")]), managed("n2", "b", "8", &[("full", "8")])];
    let mut ctx = SchedulingContext::new(i);
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert_eq!(w.unplaced, vec![0], "{w:?}");
    // What a what-if gives back is its own: a pending pod still finds the quota full.
    let mut i = input(vec![pool("default")], vec![pod("late").cpu("1").build()], vec![]);
    i.quotas = vec![quota("team", None, &[("cpu", "16")], &[("cpu", "16")])];
    i.existing_nodes = vec![managed("n1", "a", "8", &[("p1", "8")])];
    let mut ctx = SchedulingContext::new(i);
    assert_eq!(ctx.without_nodes(&["n1"]).unwrap().new_node_claims.len(), 1);
    let r = ctx.place_pending();
    assert!(r.new_node_claims.is_empty(), "{r:?}");
}
