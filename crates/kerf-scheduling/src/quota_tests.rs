//! CapacityQuotas in the Scheduler: which types a quota's selector picks, headroom shared and
//! debited across NodePools within one pass, what a what-if gives back, and the pending reason.

use std::sync::Arc;

use kerf_api::capacityquota::{NodeLabelSelector, SelectorRequirement};
use kerf_api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODE_POOL, ZONE};
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
    n.pool_usage = Arc::new(rl(&[("cpu", cpu), ("memory", "16Gi"), ("pods", "80")]));
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

/// The values a claim's requirement on `key` allows, as `In`/`NotIn` and the values.
fn claim_requirement(c: &crate::model::NewNodeClaim, key: &str) -> Option<(String, Vec<String>)> {
    c.requirements.iter().find(|r| r.key == key).map(|r| (format!("{:?}", r.operator), r.values.clone()))
}

/// Whether a claim's requirements keep it off spot offerings.
fn off_spot(c: &crate::model::NewNodeClaim) -> bool {
    let r = crate::requirements::Requirements::from_node_selector(&c.requirements);
    r.get(CAPACITY_TYPE).is_some_and(|x| !x.has("spot"))
}

#[test]
fn a_full_spot_quota_sends_new_claims_to_on_demand_offerings() {
    // Spot capacity is capped and full; on-demand offerings of the same types are not counted,
    // so the pods launch on-demand instead of staying pending.
    let q = quota("spot", select(CAPACITY_TYPE, &["spot"]), &[("cpu", "8")], &[("cpu", "8")]);
    let pods = vec![pod("big").cpu("6").build(), pod("little").cpu("1").build()];
    let r = schedule(&input(vec![pool("default")], pods, vec![q]));
    assert!(r.errors.is_empty(), "{r:?}");
    assert!(!r.new_node_claims.is_empty());
    for c in &r.new_node_claims {
        assert_eq!(
            claim_requirement(c, CAPACITY_TYPE),
            Some(("NotIn".to_string(), vec!["spot".to_string()])),
            "kept out of the quota's offerings: {c:?}"
        );
    }
    // A pod that must run on spot stays pending, naming the quota.
    let q = quota("spot", select(CAPACITY_TYPE, &["spot"]), &[("cpu", "8")], &[("cpu", "8")]);
    let pods = vec![pod("spot-only").cpu("1").node_selector(CAPACITY_TYPE, "spot").build()];
    let r = schedule(&input(vec![pool("default")], pods, vec![q]));
    assert!(r.new_node_claims.is_empty(), "{r:?}");
    assert_eq!(
        r.errors[0].1.message,
        "NodePool default: CapacityQuota \"spot\" would exceed cpu: 8 limit, 8 used, needs 2"
    );
}

#[test]
fn a_claim_kept_out_of_a_quotas_offerings_takes_nothing_of_it() {
    // Three on-demand pods of 6 CPUs: each needs a large node (8), and a spot quota of 8 CPUs
    // with room for one does not count them.
    let q = quota("spot", select(CAPACITY_TYPE, &["spot"]), &[("cpu", "8")], &[]);
    let pods =
        (0..3).map(|i| pod(&format!("od{i}")).cpu("6").node_selector(CAPACITY_TYPE, "on-demand").build()).collect();
    let r = schedule(&input(vec![pool("default")], pods, vec![q]));
    assert!(r.errors.is_empty(), "{r:?}");
    assert_eq!(claims(&r).len(), 3, "{:?}", claims(&r));
    // The same pods free to use spot: one spot claim fills the quota, the others go on-demand.
    let q = quota("spot", select(CAPACITY_TYPE, &["spot"]), &[("cpu", "8")], &[]);
    let pods = (0..3).map(|i| pod(&format!("any{i}")).cpu("6").build()).collect();
    let r = schedule(&input(vec![pool("default")], pods, vec![q]));
    assert!(r.errors.is_empty(), "{r:?}");
    let spot_free = r
        .new_node_claims
        .iter()
        .filter(|c| {
            claim_requirement(c, CAPACITY_TYPE).is_none_or(|(op, v)| op == "In" && v.contains(&"spot".to_string()))
        })
        .count();
    assert_eq!((r.new_node_claims.len(), spot_free), (3, 1), "{:?}", r.new_node_claims);
}

#[test]
fn a_full_zonal_quota_sends_new_claims_to_the_other_zone() {
    let q = quota("zone-a", select(ZONE, &["a"]), &[("nodes", "2")], &[("nodes", "2")]);
    let pods = vec![pod("p").cpu("1").build()];
    let r = schedule(&input(vec![pool("default")], pods, vec![q]));
    assert!(r.errors.is_empty(), "{r:?}");
    let c = &r.new_node_claims[0];
    let zone = claim_requirement(c, ZONE);
    assert!(
        zone == Some(("NotIn".to_string(), vec!["a".to_string()]))
            || zone == Some(("In".to_string(), vec!["b".to_string()])),
        "{zone:?}"
    );
}

#[test]
fn a_quota_with_room_for_small_types_keeps_those_on_its_offerings() {
    // 2 CPUs left of a spot quota: a small pod still launches a small spot node (cheapest),
    // while a pod that needs a large node goes on-demand.
    let q = quota("spot", select(CAPACITY_TYPE, &["spot"]), &[("cpu", "16")], &[("cpu", "14")]);
    let r = schedule(&input(vec![pool("default")], vec![pod("little").cpu("1").build()], vec![q.clone()]));
    let c = &r.new_node_claims[0];
    assert_eq!(c.instance_types[0].name, "small");
    assert!(claim_requirement(c, CAPACITY_TYPE).is_none(), "{c:?}");
    let r = schedule(&input(vec![pool("default")], vec![pod("big").cpu("6").build()], vec![q]));
    assert!(r.errors.is_empty(), "{r:?}");
    let c = &r.new_node_claims[0];
    assert_eq!(c.instance_types[0].name, "large");
    assert_eq!(claim_requirement(c, CAPACITY_TYPE), Some(("NotIn".to_string(), vec!["spot".to_string()])));
}

#[test]
fn a_spot_quota_filled_within_the_pass_sends_the_rest_on_demand() {
    let mut p = pool("default");
    let either = req(CAPACITY_TYPE, kerf_api::Operator::In, &["spot", "on-demand"]);
    p.node_pool = Arc::new(node_pool("default", vec![either]));
    p.instance_types = vec![Arc::new(instance_type("m", "4", "16Gi", "80", 0.2, &ZONES))];
    let q = quota("spot", select(CAPACITY_TYPE, &["spot"]), &[("cpu", "16")], &[]);
    let pods = (0..20).map(|i| pod(&format!("w{i}")).cpu("1800m").build()).collect();
    let r = schedule(&input(vec![p], pods, vec![q]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let on_demand = r.new_node_claims.iter().filter(|c| off_spot(c)).count();
    assert_eq!((r.new_node_claims.len(), on_demand), (10, 6), "{:?}", r.new_node_claims);
}

#[test]
fn types_the_pod_cannot_use_do_not_stop_a_claim_from_avoiding_a_full_quota() {
    // The pool also has a type offered on-demand only, which a spot quota does not select: it
    // fits the pod's requests, but the pod asks for the large type, which must launch on-demand.
    let mut p = pool("default");
    let mut od_only = instance_type("od-only", "16", "32Gi", "80", 0.5, &ZONES);
    od_only.offerings.retain(|o| o.capacity_type == "on-demand");
    p.instance_types.push(Arc::new(od_only));
    let q = quota("spot", select(CAPACITY_TYPE, &["spot"]), &[("cpu", "8")], &[("cpu", "8")]);
    let pods = vec![pod("big").cpu("6").node_selector(INSTANCE_TYPE, "large").build()];
    let r = schedule(&input(vec![p], pods, vec![q]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(claims(&r), [("default".to_string(), "large".to_string())]);
    assert!(off_spot(&r.new_node_claims[0]), "{:?}", r.new_node_claims[0]);
}
