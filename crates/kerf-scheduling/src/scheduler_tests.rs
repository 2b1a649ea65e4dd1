//! Small exact cases for the provisioning Scheduler.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use kerf_api::SlimPod;
use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};
use kerf_api::{NodePool, Operator, ResourceList, Taint, TaintEffect};

use crate::instance::InstanceType;
use crate::model::{ExistingNode, NewNodeClaim, NodePoolInput, SchedulingInput, SchedulingResult};
use crate::scheduler::schedule;
use crate::testing::*;

const ZONES: [&str; 3] = ["a", "b", "c"];

fn pool_input(np: NodePool, types: Vec<InstanceType>) -> NodePoolInput {
    NodePoolInput {
        node_pool: Arc::new(np),
        instance_types: types.into_iter().map(Arc::new).collect(),
        in_use: ResourceList::new(),
    }
}

fn default_types() -> Vec<InstanceType> {
    vec![
        instance_type("small", "2", "4Gi", "20", 0.10, &ZONES),
        instance_type("medium", "4", "8Gi", "40", 0.20, &ZONES),
        instance_type("large", "8", "16Gi", "80", 0.40, &ZONES),
    ]
}

fn input(pools: Vec<NodePoolInput>, pods: Vec<Arc<SlimPod>>) -> SchedulingInput {
    SchedulingInput { node_pools: pools, pods, ..Default::default() }
}

fn one_pool(pods: Vec<Arc<SlimPod>>) -> SchedulingInput {
    input(vec![pool_input(node_pool("default", vec![]), default_types())], pods)
}

fn claim_label<'a>(c: &'a NewNodeClaim, key: &str) -> &'a str {
    c.labels.get(key).map(String::as_str).unwrap_or("")
}

/// Pods per value of `key` across the new claims.
fn pods_per(r: &SchedulingResult, key: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for c in &r.new_node_claims {
        *m.entry(claim_label(c, key).to_string()).or_insert(0) += c.pods.len();
    }
    m
}

fn placed(r: &SchedulingResult) -> usize {
    r.placements.len() + r.new_node_claims.iter().map(|c| c.pods.len()).sum::<usize>()
}

fn spread_pods(n: usize, key: &str, skew: i32) -> Vec<Arc<SlimPod>> {
    (0..n)
        .map(|i| pod(&format!("w{i}")).label("app", "w").cpu("1").spread(key, skew, &[("app", "w")]).build())
        .collect()
}

#[test]
fn zone_spread_of_four_pods_is_1_1_2() {
    let r = schedule(&one_pool(spread_pods(4, ZONE, 1)));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let mut counts: Vec<usize> = pods_per(&r, ZONE).values().copied().collect();
    counts.sort();
    assert_eq!(counts, vec![1, 1, 2]);
    assert_eq!(pods_per(&r, ZONE).len(), 3);
}

#[test]
fn spread_min_domains_not_met_keeps_each_zone_at_one() {
    let pods = (0..4)
        .map(|i| {
            pod(&format!("w{i}"))
                .label("app", "w")
                .cpu("1")
                .spread_with(TopologySpreadConstraint {
                    topology_key: ZONE.into(),
                    max_skew: 1,
                    min_domains: Some(4),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    label_selector: Some(selector(&[("app", "w")])),
                    ..Default::default()
                })
                .build()
        })
        .collect();
    let r = schedule(&one_pool(pods));
    assert_eq!(placed(&r), 3);
    assert_eq!(r.errors.len(), 1);
    let msg = &r.errors[0].1.message;
    assert!(msg.contains("topology spread constraint not satisfiable"), "{msg}");
    assert!(msg.contains("a: 1, b: 1, c: 1"), "{msg}");
}

#[test]
fn hostname_spread_puts_one_pod_per_new_node() {
    let r = schedule(&one_pool(spread_pods(4, HOSTNAME, 1)));
    assert!(r.errors.is_empty());
    assert_eq!(r.new_node_claims.len(), 4);
    assert!(r.new_node_claims.iter().all(|c| c.pods.len() == 1));
}

#[test]
fn capacity_type_spread_uses_spot_and_on_demand() {
    let r = schedule(&one_pool(spread_pods(2, CAPACITY_TYPE, 1)));
    assert!(r.errors.is_empty());
    assert_eq!(pods_per(&r, CAPACITY_TYPE), BTreeMap::from([("on-demand".to_string(), 1), ("spot".to_string(), 1)]));
}

#[test]
fn node_affinity_policy_honor_counts_only_reachable_zones_ignore_counts_all() {
    let make = |policy: Option<&str>| -> Vec<Arc<SlimPod>> {
        (0..4)
            .map(|i| {
                pod(&format!("w{i}"))
                    .label("app", "w")
                    .cpu("1")
                    .required_term(&[(ZONE, "In", &["a", "b"])])
                    .spread_with(TopologySpreadConstraint {
                        topology_key: ZONE.into(),
                        max_skew: 1,
                        node_affinity_policy: policy.map(str::to_string),
                        when_unsatisfiable: "DoNotSchedule".into(),
                        label_selector: Some(selector(&[("app", "w")])),
                        ..Default::default()
                    })
                    .build()
            })
            .collect()
    };
    let honor = schedule(&one_pool(make(None)));
    assert!(honor.errors.is_empty());
    assert_eq!(pods_per(&honor, ZONE), BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 2)]));
    // Ignore: zone c counts (empty) although the pod cannot go there, so a and b take one each.
    let ignore = schedule(&one_pool(make(Some("Ignore"))));
    assert_eq!(placed(&ignore), 2);
    assert_eq!(ignore.errors.len(), 2);
}

#[test]
fn pool_taints_block_pods_without_tolerations_and_the_message_names_the_taint() {
    let mut np = node_pool("gpu", vec![]);
    np.spec.template.spec.taints = vec![Taint::new("nvidia.com/gpu", Some("true"), TaintEffect::NoSchedule)];
    let pools = vec![pool_input(np, default_types())];
    let r = schedule(&input(pools.clone(), vec![pod("p").cpu("1").build()]));
    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].1.message, "NodePool gpu: untolerated taint nvidia.com/gpu=true:NoSchedule");
    let r = schedule(&input(pools, vec![pod("p").cpu("1").toleration("nvidia.com/gpu", None, None).build()]));
    assert!(r.errors.is_empty());
    assert_eq!(r.new_node_claims[0].taints.len(), 1);
}

#[test]
fn operators_on_keys_the_pool_does_not_define() {
    let r = schedule(&one_pool(vec![
        pod("not-in").cpu("1").required_term(&[("team", "NotIn", &["x"])]).build(),
        pod("absent").cpu("1").required_term(&[("team", "DoesNotExist", &[])]).build(),
    ]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    for op in ["In", "Exists"] {
        let vals: &[&str] = if op == "In" { &["x"] } else { &[] };
        let r = schedule(&one_pool(vec![pod("p").cpu("1").required_term(&[("team", op, vals)]).build()]));
        assert_eq!(r.errors.len(), 1, "{op}");
        let msg = &r.errors[0].1.message;
        assert!(msg.contains("key team: NodePool's nodes have no label team, pod requires team"), "{msg}");
    }
}

#[test]
fn incompatible_requirement_names_the_key_and_both_values() {
    let np = node_pool("spot-only", vec![req(CAPACITY_TYPE, Operator::In, &["spot"])]);
    let r = schedule(&input(
        vec![pool_input(np, default_types())],
        vec![pod("p").cpu("1").node_selector(CAPACITY_TYPE, "on-demand").build()],
    ));
    assert_eq!(
        r.errors[0].1.message,
        "NodePool spot-only: incompatible requirements, key karpenter.sh/capacity-type: NodePool requires \
         karpenter.sh/capacity-type In [spot], pod requires karpenter.sh/capacity-type In [on-demand]"
    );
}

#[test]
fn missing_extended_resource_is_named() {
    let r = schedule(&one_pool(vec![pod("p").cpu("1").request("vpc.amazonaws.com/pod-eni", "1").build()]));
    assert_eq!(
        r.errors[0].1.message,
        "NodePool default: no instance type in NodePool default has resource vpc.amazonaws.com/pod-eni"
    );
}

#[test]
fn relaxation_drops_required_terms_then_preferred_node_affinity_heaviest_first() {
    let np = node_pool("ab", vec![req(ZONE, Operator::In, &["a", "b"])]);
    let pools = vec![pool_input(np, default_types())];
    // First required term is impossible (zone c): the second one is used.
    let p = pod("p").cpu("1").required_term(&[(ZONE, "In", &["c"])]).required_term(&[(ZONE, "In", &["b"])]).build();
    let r = schedule(&input(pools.clone(), vec![p]));
    assert!(r.errors.is_empty());
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");
    // Heaviest preference (zone c) cannot be met, so the next (zone b) is honoured.
    let p = pod("p")
        .cpu("1")
        .preferred_term(50, &[(ZONE, "In", &["c"])])
        .preferred_term(10, &[(ZONE, "In", &["b"])])
        .build();
    let r = schedule(&input(pools, vec![p]));
    assert!(r.errors.is_empty());
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");
}

#[test]
fn schedule_anyway_spread_is_honoured_until_relaxed() {
    let pods: Vec<Arc<SlimPod>> = (0..3)
        .map(|i| {
            pod(&format!("w{i}"))
                .label("app", "w")
                .cpu("1")
                .spread_with(TopologySpreadConstraint {
                    topology_key: ZONE.into(),
                    max_skew: 1,
                    when_unsatisfiable: "ScheduleAnyway".into(),
                    label_selector: Some(selector(&[("app", "w")])),
                    ..Default::default()
                })
                .build()
        })
        .collect();
    let r = schedule(&one_pool(pods));
    assert_eq!(pods_per(&r, ZONE), BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("c".into(), 1)]));
}

#[test]
fn daemonset_overhead_makes_the_claim_pick_the_larger_type() {
    let mut inp = one_pool(vec![pod("p").cpu("1500m").build()]);
    inp.daemonset_pods = vec![pod("ds").cpu("1").build()];
    let r = schedule(&inp);
    let c = &r.new_node_claims[0];
    assert_eq!(c.instance_types[0].name, "medium");
    assert_eq!(c.requests.get("cpu"), q("2500m"));
    // A daemonset that does not tolerate the pool's taint does not count.
    let mut np = node_pool("tainted", vec![]);
    np.spec.template.spec.taints = vec![Taint::new("dedicated", None, TaintEffect::NoSchedule)];
    let mut inp = input(
        vec![pool_input(np, default_types())],
        vec![pod("p").cpu("1500m").toleration("dedicated", None, None).build()],
    );
    inp.daemonset_pods = vec![pod("ds").cpu("1").build()];
    let r = schedule(&inp);
    assert_eq!(r.new_node_claims[0].instance_types[0].name, "small");
}

#[test]
fn cpu_limit_stops_new_claims_and_the_message_says_so() {
    let mut np = node_pool("limited", vec![]);
    np.spec.limits = Some(rl(&[("cpu", "4")]));
    let types = vec![instance_type("small", "2", "4Gi", "20", 0.10, &ZONES)];
    let pods = (0..3).map(|i| pod(&format!("p{i}")).cpu("1500m").build()).collect();
    let r = schedule(&input(vec![pool_input(np, types)], pods));
    assert_eq!(r.new_node_claims.len(), 2);
    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].1.reason, "NodePoolLimitExceeded");
    assert!(r.errors[0].1.message.contains("limits exhausted: cpu limit 4 (remaining 0)"), "{}", r.errors[0].1.message);
}

#[test]
fn node_limit_counts_in_flight_claims() {
    let mut np = node_pool("limited", vec![]);
    np.spec.limits = Some(rl(&[("nodes", "2")]));
    let mut pi = pool_input(np, default_types());
    pi.in_use = rl(&[("nodes", "2")]);
    let r = schedule(&input(vec![pi], vec![pod("p").cpu("1").build()]));
    assert_eq!(r.errors[0].1.reason, "NodePoolLimitExceeded");
    assert_eq!(r.errors[0].1.message, "NodePool limited: limit nodes exhausted (limit 2)");
}

#[test]
fn heavier_node_pool_wins_even_when_pricier() {
    let mut heavy = node_pool("heavy", vec![]);
    heavy.spec.weight = Some(10);
    let pools = vec![
        pool_input(node_pool("cheap", vec![]), default_types()),
        pool_input(heavy, vec![instance_type("pricey", "4", "8Gi", "40", 5.0, &ZONES)]),
    ];
    let r = schedule(&input(pools, vec![pod("p").cpu("1").build()]));
    assert_eq!(r.new_node_claims[0].node_pool, "heavy");
}

#[test]
fn min_values_keep_enough_instance_types_or_fail() {
    let mut it = req(INSTANCE_TYPE, Operator::Exists, &[]);
    it.min_values = Some(3);
    let np = node_pool("mv", vec![it]);
    let pools = vec![pool_input(np, default_types())];
    let r = schedule(&input(pools.clone(), vec![pod("p").cpu("1").build()]));
    assert!(r.errors.is_empty());
    let c = &r.new_node_claims[0];
    assert_eq!(c.instance_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["small", "medium", "large"]);
    let it_req = c.node_requirements().into_iter().find(|r| r.key == INSTANCE_TYPE).unwrap();
    assert_eq!(it_req.min_values, Some(3));
    // 3 CPUs fit only medium and large: two types, fewer than minValues.
    let r = schedule(&input(pools, vec![pod("p").cpu("3").build()]));
    assert_eq!(r.errors.len(), 1);
    assert!(
        r.errors[0].1.message.contains("minValues 3 for key node.kubernetes.io/instance-type"),
        "{}",
        r.errors[0].1.message
    );
}

#[test]
fn claims_list_every_compatible_type_cheapest_first() {
    let r = schedule(&one_pool(vec![pod("p").cpu("3").build()]));
    let c = &r.new_node_claims[0];
    assert_eq!(c.instance_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["medium", "large"]);
    let it = c.node_requirements().into_iter().find(|r| r.key == INSTANCE_TYPE).unwrap();
    assert_eq!(it.values, vec!["medium".to_string(), "large".to_string()]);
}

#[test]
fn existing_nodes_first_then_new_claims_larger_pods_first() {
    let mut inp = one_pool(vec![pod("small").cpu("1").build(), pod("big").cpu("3").build()]);
    inp.existing_nodes = vec![node("n1", &[(ZONE, "a")], &[("cpu", "3"), ("memory", "8Gi"), ("pods", "10")])];
    let r = schedule(&inp);
    // The bigger pod is placed first and takes the existing node; the small one needs a claim.
    assert_eq!(r.placements, vec![crate::model::Placement { pod: 1, node: "n1".into() }]);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].pods, vec![0]);
}

#[test]
fn hostname_anti_affinity_gives_each_pod_its_own_node_and_zone_affinity_keeps_a_zone() {
    let anti: Vec<Arc<SlimPod>> = (0..3)
        .map(|i| pod(&format!("a{i}")).label("app", "a").cpu("100m").anti_affinity(HOSTNAME, &[("app", "a")]).build())
        .collect();
    let r = schedule(&one_pool(anti));
    assert_eq!(r.new_node_claims.len(), 3);
    let aff: Vec<Arc<SlimPod>> = (0..6)
        .map(|i| pod(&format!("f{i}")).label("app", "f").cpu("1500m").pod_affinity(ZONE, &[("app", "f")]).build())
        .collect();
    let r = schedule(&one_pool(aff));
    assert!(r.errors.is_empty());
    assert_eq!(pods_per(&r, ZONE).len(), 1, "{:?}", pods_per(&r, ZONE));
}

#[test]
fn existing_pods_anti_affinity_repels_new_pods() {
    let mut inp = one_pool(vec![pod("web").label("app", "web").cpu("1").build()]);
    let mut n = node("n1", &[(ZONE, "a")], &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")]);
    n.pods.push(pod("guard").label("app", "guard").anti_affinity(ZONE, &[("app", "web")]).build());
    inp.existing_nodes = vec![n];
    let r = schedule(&inp);
    assert!(r.placements.is_empty());
    assert_ne!(claim_label(&r.new_node_claims[0], ZONE), "a");
    assert_ne!(claim_label(&r.new_node_claims[0], ZONE), "");
}

/// Seed 000: two NodePools spread by the custom key `capacity-spread`; the spot pool offers
/// domains 2 and 3, the on-demand pool domain 1. A rolled-out on-demand pod (node selector
/// `capacity_type: on-demand`, spread maxSkew 1 over `capacity-spread`) must stay placeable:
/// domains 2 and 3 are unreachable for it and must not count.
#[test]
fn seed_000_capacity_spread_over_two_pools_keeps_on_demand_pods_placeable() {
    let mut spot = node_pool(
        "teama-spot",
        vec![req("capacity-spread", Operator::In, &["2", "3"]), req(CAPACITY_TYPE, Operator::In, &["spot"])],
    );
    spot.spec.template.metadata.labels.insert("capacity_type".into(), "spot".into());
    let mut od = node_pool(
        "teama-on-demand",
        vec![req("capacity-spread", Operator::In, &["1"]), req(CAPACITY_TYPE, Operator::In, &["on-demand"])],
    );
    od.spec.template.metadata.labels.insert("capacity_type".into(), "on-demand".into());
    let types = vec![instance_type("c6g.2xlarge", "8", "16Gi", "58", 0.27, &ZONES)];
    let mk_node = |name: &str, ct: &str, cs: &str, pool: &str| {
        let mut n = node(
            name,
            &[("capacity_type", ct), ("capacity-spread", cs), (CAPACITY_TYPE, ct), (ZONE, "a")],
            &[("cpu", "2"), ("memory", "8Gi"), ("pods", "29")],
        );
        n.node_pool = Some(pool.to_string());
        n
    };
    let running = |name: &str| pod(name).label("app", "typea-ondemand").cpu("1900m").build();
    let mut od1 = mk_node("od-1", "on-demand", "1", "teama-on-demand");
    od1.pods.push(running("typea-1"));
    let mut od2 = mk_node("od-2", "on-demand", "1", "teama-on-demand");
    od2.pods.push(running("typea-2"));
    let mut s2 = mk_node("spot-2", "spot", "2", "teama-spot");
    s2.pods.push(pod("typeb-1").label("app", "typeb").cpu("1").build());
    let mut s3 = mk_node("spot-3", "spot", "3", "teama-spot");
    s3.pods.push(pod("typeb-2").label("app", "typeb").cpu("1").build());
    let pending = pod("typea-new")
        .label("app", "typea-ondemand")
        .cpu("1")
        .node_selector("capacity_type", "on-demand")
        .spread("capacity-spread", 1, &[("app", "typea-ondemand")])
        .build();
    let mut inp = input(vec![pool_input(spot, types.clone()), pool_input(od, types.clone())], vec![pending.clone()]);
    inp.existing_nodes = vec![od1.clone(), od2.clone(), s2.clone(), s3.clone()];
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
    let c = &r.new_node_claims[0];
    assert_eq!(c.node_pool, "teama-on-demand");
    assert_eq!(claim_label(c, "capacity-spread"), "1");

    // With the on-demand pool out of nodes, the message names both pools and why.
    let mut od_full = node_pool(
        "teama-on-demand",
        vec![req("capacity-spread", Operator::In, &["1"]), req(CAPACITY_TYPE, Operator::In, &["on-demand"])],
    );
    od_full.spec.template.metadata.labels.insert("capacity_type".into(), "on-demand".into());
    od_full.spec.limits = Some(rl(&[("nodes", "2")]));
    let mut od_in = pool_input(od_full, types.clone());
    od_in.in_use = rl(&[("nodes", "2")]);
    let spot_again = inp.node_pools[0].clone();
    let mut inp2 = input(vec![spot_again, od_in], vec![pending]);
    inp2.existing_nodes = vec![od1, od2, s2, s3];
    let r = schedule(&inp2);
    let msg = &r.errors[0].1.message;
    assert_eq!(
        msg,
        "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector; \
         NodePool teama-on-demand: limit nodes exhausted (limit 2); \
         NodePool teama-spot: incompatible requirements, key capacity_type: NodePool requires capacity_type In [spot], \
         pod requires capacity_type In [on-demand]"
    );
}

/// Seed 004: 20 replicas, 1 CPU / 256M each, hostname spread maxSkew 2 and zone spread maxSkew 5.
/// All 20 must be placed, across all zones.
#[test]
fn seed_004_twenty_replicas_with_hostname_and_zone_spread_all_placed_across_zones() {
    let pods: Vec<Arc<SlimPod>> = (0..20)
        .map(|i| {
            pod(&format!("host-spread-{i}"))
                .label("app", "host-spread")
                .cpu("1")
                .memory("256M")
                .spread(HOSTNAME, 2, &[("app", "host-spread")])
                .spread(ZONE, 5, &[("app", "host-spread")])
                .build()
        })
        .collect();
    // Zone c offers only the bigger type, as in the field note.
    let types = vec![
        instance_type("t3.large", "2", "8Gi", "35", 0.08, &["a", "b"]),
        instance_type("m5.xlarge", "4", "16Gi", "58", 0.19, &ZONES),
    ];
    let np = node_pool("default", vec![req("karpenter.k8s.aws/instance-category", Operator::NotIn, &["x"])]);
    let r = schedule(&input(vec![pool_input(np, types)], pods));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(placed(&r), 20);
    let zones = pods_per(&r, ZONE);
    assert_eq!(zones.len(), 3, "{zones:?}");
    let (min, max) = (zones.values().min().copied().unwrap(), zones.values().max().copied().unwrap());
    assert!(max - min <= 5, "{zones:?}");
    // Claims are sized by price: zone c (only the dearer m5.xlarge) gets the fewest pods the
    // zone spread allows, the cheaper t3.large zones the rest.
    assert_eq!(zones, BTreeMap::from([("a".into(), 8), ("b".into(), 8), ("c".into(), 4)]));
    assert!(r.new_node_claims.iter().all(|c| c.pods.len() <= 2));
}

#[test]
fn existing_node_placements_respect_volume_zones() {
    let mut inp = one_pool(vec![pod("p").cpu("1").pvc("data").build()]);
    inp.existing_nodes = vec![
        node("n-a", &[(ZONE, "a")], &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")]),
        node("n-b", &[(ZONE, "b")], &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")]),
    ];
    inp.volume_requirements.insert(
        "default/data".into(),
        vec![crate::requirements::Requirements::from_node_selector(&[req(ZONE, Operator::In, &["b"])])],
    );
    let r = schedule(&inp);
    assert_eq!(r.placements[0].node, "n-b");
    // Without room on existing nodes, the new claim is pinned to the volume's zone.
    inp.existing_nodes.clear();
    let r = schedule(&inp);
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");
}

#[test]
fn scheduling_is_deterministic() {
    let inp = crate::bench::workload(300, 20, 3);
    let a = schedule(&inp);
    let b = schedule(&inp);
    let summary = |r: &SchedulingResult| -> Vec<(String, Vec<usize>, BTreeMap<String, String>)> {
        r.new_node_claims.iter().map(|c| (c.node_pool.clone(), c.pods.clone(), c.labels.clone())).collect()
    };
    assert_eq!(summary(&a), summary(&b));
}

#[test]
fn relaxation_drops_preferred_pod_affinity_before_preferred_node_affinity() {
    // The db pod is in zone a (on a full node); the pod prefers to be near it and prefers zone b.
    // Both cannot hold; preferred pod affinity goes first, so the claim lands in zone b.
    let np = node_pool("ab", vec![req(ZONE, Operator::In, &["a", "b"])]);
    let mut inp = input(
        vec![pool_input(np, default_types())],
        vec![
            pod("p")
                .cpu("1")
                .preferred_pod_affinity(100, ZONE, &[("app", "db")])
                .preferred_term(1, &[(ZONE, "In", &["b"])])
                .build(),
        ],
    );
    let mut n = node("full", &[(ZONE, "a")], &[("cpu", "1"), ("memory", "1Gi"), ("pods", "10")]);
    n.pods.push(pod("db").label("app", "db").cpu("1").build());
    inp.existing_nodes = vec![n];
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");
}

#[test]
fn node_taints_policy_honor_skips_pools_whose_taints_the_pod_does_not_tolerate() {
    // Pool "tainted" offers zone c only and has a taint the pod does not tolerate. With the
    // default (Ignore) zone c counts as an empty domain; with Honor it does not.
    let mut tainted = node_pool("tainted", vec![req(ZONE, Operator::In, &["c"])]);
    tainted.spec.template.spec.taints = vec![Taint::new("t", None, TaintEffect::NoSchedule)];
    let open = node_pool("open", vec![req(ZONE, Operator::In, &["a", "b"])]);
    let make = |policy: Option<&str>| -> Vec<Arc<SlimPod>> {
        (0..4)
            .map(|i| {
                pod(&format!("w{i}"))
                    .label("app", "w")
                    .cpu("1")
                    .spread_with(TopologySpreadConstraint {
                        topology_key: ZONE.into(),
                        max_skew: 1,
                        node_taints_policy: policy.map(str::to_string),
                        when_unsatisfiable: "DoNotSchedule".into(),
                        label_selector: Some(selector(&[("app", "w")])),
                        ..Default::default()
                    })
                    .build()
            })
            .collect()
    };
    let pools = || vec![pool_input(tainted.clone(), default_types()), pool_input(open.clone(), default_types())];
    let honor = schedule(&input(pools(), make(Some("Honor"))));
    assert!(honor.errors.is_empty(), "{:?}", honor.errors);
    assert_eq!(pods_per(&honor, ZONE), BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 2)]));
    let ignore = schedule(&input(pools(), make(None)));
    assert_eq!(placed(&ignore), 2);
}

#[test]
fn in_flight_claims_are_used_before_new_claims() {
    let mut inp = one_pool(vec![pod("p").cpu("1").build()]);
    let mut inflight = node("claim-1", &[(ZONE, "b")], &[("cpu", "2"), ("memory", "4Gi"), ("pods", "10")]);
    inflight.in_flight = true;
    inp.existing_nodes = vec![inflight];
    let r = schedule(&inp);
    assert_eq!(r.placements, vec![crate::model::Placement { pod: 0, node: "claim-1".into() }]);
    assert!(r.new_node_claims.is_empty());
}

#[test]
fn host_ports_keep_pods_apart_on_new_claims() {
    let pods = (0..2).map(|i| pod(&format!("p{i}")).cpu("100m").host_port(8080).build()).collect();
    let r = schedule(&one_pool(pods));
    assert_eq!(r.new_node_claims.len(), 2);
}

#[test]
fn cordoned_and_tainted_existing_nodes_are_skipped() {
    let mut inp = one_pool(vec![pod("p").cpu("1").build()]);
    let mut cordoned = node("cordoned", &[(ZONE, "a")], &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")]);
    cordoned.schedulable = false;
    let mut tainted = node("tainted", &[(ZONE, "a")], &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")]);
    tainted.taints = vec![Taint::new("x", Some("y"), TaintEffect::NoExecute)];
    inp.existing_nodes = vec![cordoned, tainted];
    let r = schedule(&inp);
    assert!(r.placements.is_empty());
    assert_eq!(r.new_node_claims.len(), 1);
}

#[test]
fn a_pod_pinned_to_a_hostname_only_fits_that_existing_node() {
    let mut inp = one_pool(vec![pod("p").cpu("1").node_selector(HOSTNAME, "n1").build()]);
    inp.existing_nodes = vec![node("n1", &[(ZONE, "a")], &[("cpu", "1"), ("memory", "8Gi"), ("pods", "10")])];
    inp.existing_nodes[0].pods.push(pod("busy").cpu("1").build());
    let r = schedule(&inp);
    assert!(r.new_node_claims.is_empty());
    assert_eq!(
        r.errors[0].1.message,
        "0/1 nodes are available: 1 Insufficient cpu; NodePool default: incompatible requirements, key \
         kubernetes.io/hostname: NodePool's nodes have no label kubernetes.io/hostname, pod requires \
         kubernetes.io/hostname In [n1]"
    );
}

#[test]
fn volume_topology_alternatives_union_their_zones_for_new_claims() {
    let mut inp = one_pool(vec![pod("p").cpu("1").pvc("data").build()]);
    inp.volume_requirements.insert(
        "default/data".into(),
        vec![
            crate::requirements::Requirements::from_node_selector(&[req(ZONE, Operator::In, &["c"])]),
            crate::requirements::Requirements::from_node_selector(&[req(ZONE, Operator::In, &["b"])]),
        ],
    );
    let r = schedule(&inp);
    let zone = r.new_node_claims[0].requirements.iter().find(|x| x.key == ZONE).unwrap();
    assert_eq!(zone.values, vec!["b".to_string(), "c".to_string()]);
}

#[test]
fn a_requirement_no_instance_type_satisfies_is_named() {
    let r = schedule(&one_pool(vec![pod("p").cpu("1").node_selector(INSTANCE_TYPE, "x9.huge").build()]));
    assert_eq!(
        r.errors[0].1.message,
        "NodePool default: no instance type with an available offering satisfies requirement \
         node.kubernetes.io/instance-type In [x9.huge] (the NodePool's instance types have \
         node.kubernetes.io/instance-type large, medium, small)"
    );
}

/// The benchmark's outcome obeys every constraint: claims fit their listed types, hostname
/// anti-affinity and hostname spread (maxSkew 1, new nodes empty) put at most one pod of their
/// group on a claim, the zone spread group is balanced within 1, and the zone affinity group
/// shares one zone.
#[test]
fn benchmark_outcome_obeys_every_constraint() {
    let inp = crate::bench::workload(1000, 30, 11);
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors.first());
    assert_eq!(placed(&r), 1000);
    let app = |i: usize| crate::pod::labels(&inp.pods[i])["app"].clone();
    let mut zone_spread: BTreeMap<String, usize> = BTreeMap::new();
    let mut affinity_zones: BTreeMap<String, usize> = BTreeMap::new();
    for c in &r.new_node_claims {
        let mut sum = ResourceList::new();
        for p in &c.pods {
            sum.add(&crate::pod::pod_requests(&inp.pods[*p]));
        }
        assert_eq!(sum.without_zeros(), c.requests.clone().without_zeros());
        assert!(!c.instance_types.is_empty());
        for t in &c.instance_types {
            assert!(c.requests.fits(&t.allocatable()), "{} does not fit {}", t.name, c.requests);
        }
        let count = |name: &str| c.pods.iter().filter(|p| app(**p) == name).count();
        assert!(count("bench-host-anti-affinity") <= 1);
        assert!(count("bench-host-spread") <= 1);
        let zone = claim_label(c, ZONE).to_string();
        if count("bench-zone-spread") > 0 {
            assert!(!zone.is_empty());
            *zone_spread.entry(zone.clone()).or_default() += count("bench-zone-spread");
        }
        if count("bench-zone-affinity") > 0 {
            *affinity_zones.entry(zone).or_default() += count("bench-zone-affinity");
        }
    }
    assert_eq!(zone_spread.len(), 3);
    let (min, max) = (zone_spread.values().min().unwrap(), zone_spread.values().max().unwrap());
    assert!(max - min <= 1, "{zone_spread:?}");
    assert_eq!(affinity_zones.len(), 1, "{affinity_zones:?}");
    assert!(!affinity_zones.contains_key(""));
}

/// A pod with required affinity to app=a on the hostname and to tier=b in the zone.
fn two_term_pod(name: &str, own: &[(&str, &str)]) -> Arc<SlimPod> {
    let mut b = pod(name).cpu("100m").pod_affinity(HOSTNAME, &[("app", "a")]).pod_affinity(ZONE, &[("tier", "b")]);
    for (k, v) in own {
        b = b.label(k, v);
    }
    b.build()
}

fn roomy(name: &str, zone: &str) -> ExistingNode {
    node(name, &[(ZONE, zone)], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "10")])
}

fn full(name: &str, zone: &str) -> ExistingNode {
    node(name, &[(ZONE, zone)], &[("cpu", "0"), ("memory", "0"), ("pods", "1")])
}

#[test]
fn two_term_affinity_needs_in_each_terms_domain_a_pod_matching_both_terms() {
    // n1 (zone a) holds an app=a pod and zone a holds a tier=b pod (on n3): counted term by term,
    // n1 would do. Only n2's pod matches both terms, so kube-scheduler accepts only n2.
    let mut n1 = roomy("n1", "a");
    n1.pods.push(pod("x").label("app", "a").build());
    let mut n2 = roomy("n2", "b");
    n2.pods.push(pod("y").label("app", "a").label("tier", "b").build());
    let mut n3 = roomy("n3", "a");
    n3.pods.push(pod("z").label("tier", "b").build());
    let nodes = vec![n1, n2, n3];
    let p = two_term_pod("p", &[("role", "client")]);
    let mut inp = one_pool(vec![p.clone()]);
    inp.existing_nodes = nodes.clone();
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.placements, vec![crate::model::Placement { pod: 0, node: "n2".into() }]);
    assert!(r.new_node_claims.is_empty());
    // The Scheduler agrees with the kube-scheduler filters.
    let view = crate::predicates::ClusterView::new(nodes);
    assert_eq!(view.feasible_nodes(&p), vec![1]);
}

#[test]
fn two_term_affinity_first_of_its_kind_gets_a_new_claim_when_no_pod_matches_both_terms() {
    // Pods match each term on its own (x: app=a, z: tier=b) but none matches both, and the pods
    // match both themselves: the first may go anywhere and the second follows it. Counted term by
    // term, the hostname term would demand a node with an app=a pod, which is full.
    let mut n1 = full("n1", "a");
    n1.pods.push(pod("x").label("app", "a").build());
    let mut n3 = full("n3", "a");
    n3.pods.push(pod("z").label("tier", "b").build());
    let own = [("app", "a"), ("tier", "b")];
    let mut inp = one_pool(vec![two_term_pod("p0", &own), two_term_pod("p1", &own)]);
    inp.existing_nodes = vec![n1.clone(), n3.clone()];
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].pods, vec![0, 1]);
    assert_ne!(claim_label(&r.new_node_claims[0], ZONE), "");
    // kube-scheduler lets the first such pod onto any node with room that has both keys.
    let view = crate::predicates::ClusterView::new(vec![n1, n3, roomy("n4", "c")]);
    assert_eq!(view.feasible_nodes(&two_term_pod("p0", &own)), vec![2]);
}

#[test]
fn two_term_affinity_to_two_values_of_one_label_is_unschedulable_as_in_kube_scheduler() {
    // Affinity to app=a on the hostname and to app=b in the zone: no pod can match both terms,
    // nor can the pod itself, so kube-scheduler never places it. Counted term by term, n1 (an
    // app=a pod, and an app=b pod in its zone) would be chosen.
    let mut n1 = roomy("n1", "a");
    n1.pods.push(pod("x").label("app", "a").build());
    let mut n2 = roomy("n2", "a");
    n2.pods.push(pod("y").label("app", "b").build());
    let nodes = vec![n1, n2];
    let p = pod("p")
        .label("app", "a")
        .cpu("100m")
        .pod_affinity(HOSTNAME, &[("app", "a")])
        .pod_affinity(ZONE, &[("app", "b")])
        .build();
    let mut inp = one_pool(vec![p.clone()]);
    inp.existing_nodes = nodes.clone();
    let r = schedule(&inp);
    assert!(r.placements.is_empty(), "{:?}", r.placements);
    assert!(r.new_node_claims.is_empty());
    assert_eq!(r.errors.len(), 1);
    assert!(
        r.errors[0].1.message.starts_with("0/2 nodes are available: 2 node(s) didn't match pod affinity rules"),
        "{}",
        r.errors[0].1.message
    );
    let view = crate::predicates::ClusterView::new(nodes);
    assert!(view.feasible_nodes(&p).is_empty());
}

#[test]
fn first_pod_of_a_zone_affinity_group_skips_an_existing_node_without_a_zone_label() {
    let bare = node("bare", &[], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "10")]);
    let p = pod("p").label("app", "db").cpu("1").pod_affinity(ZONE, &[("app", "db")]).build();
    let mut inp = one_pool(vec![p.clone()]);
    inp.existing_nodes = vec![bare.clone()];
    let r = schedule(&inp);
    assert!(r.placements.is_empty(), "{:?}", r.placements);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_ne!(claim_label(&r.new_node_claims[0], ZONE), "");
    assert!(crate::predicates::ClusterView::new(vec![bare]).feasible_nodes(&p).is_empty());
}

fn weighted(mut np: NodePool, weight: i32) -> NodePool {
    np.spec.weight = Some(weight);
    np
}

#[test]
fn prefer_no_schedule_pool_is_avoided_while_an_untainted_pool_fits_and_used_when_nothing_else_does() {
    // The tainted pool is heavier, so only its PreferNoSchedule taint keeps it second.
    let mut soft = weighted(node_pool("soft", vec![]), 50);
    soft.spec.template.spec.taints = vec![Taint::new("soft", None, TaintEffect::PreferNoSchedule)];
    let plain = node_pool("plain", vec![req(ZONE, Operator::In, &["a"])]);
    let pools = vec![pool_input(soft, default_types()), pool_input(plain, default_types())];

    let r = schedule(&input(pools.clone(), vec![pod("p").cpu("1").build()]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].node_pool, "plain");

    // Only zone b is acceptable: the untainted pool cannot launch there, so the taint is tolerated.
    let r = schedule(&input(pools, vec![pod("p").cpu("1").required_term(&[(ZONE, "In", &["b"])]).build()]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].node_pool, "soft");
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");
}

#[test]
fn prefer_no_schedule_existing_node_is_skipped_while_an_untainted_one_has_room() {
    let alloc = [("cpu", "4"), ("memory", "8Gi"), ("pods", "10")];
    let mut tainted = node("tainted", &[(ZONE, "a")], &alloc);
    tainted.taints = vec![Taint::new("soft", None, TaintEffect::PreferNoSchedule)];
    let clean = node("clean", &[(ZONE, "a")], &alloc);
    let mut inp = one_pool(vec![pod("p").cpu("1").build()]);
    inp.existing_nodes = vec![tainted.clone(), clean];
    let r = schedule(&inp);
    assert_eq!(r.placements, vec![crate::model::Placement { pod: 0, node: "clean".into() }]);
    // With no pool and no other node, the tainted node takes the pod.
    let mut inp = input(vec![], vec![pod("p").cpu("1").build()]);
    inp.existing_nodes = vec![tainted];
    let r = schedule(&inp);
    assert_eq!(r.placements, vec![crate::model::Placement { pod: 0, node: "tainted".into() }]);
}

/// A full node in `zone` holding one pod labelled `app=<app>`.
fn full_with(name: &str, zone: &str, app: &str) -> ExistingNode {
    let mut n = node(name, &[(ZONE, zone)], &[("cpu", "1"), ("memory", "1Gi"), ("pods", "10")]);
    n.pods.push(pod(&format!("{app}-0")).label("app", app).cpu("1").build());
    n
}

#[test]
fn relaxation_drops_preferred_pod_anti_affinity_after_preferred_pod_affinity_and_before_preferred_node_affinity() {
    let ab = || vec![pool_input(node_pool("ab", vec![req(ZONE, Operator::In, &["a", "b"])]), default_types())];
    // Near db (zone a) and away from cache (also zone a) conflict. Preferred pod affinity is
    // dropped first, so the anti-affinity holds and the claim avoids zone a.
    let p = pod("p")
        .cpu("1")
        .preferred_pod_affinity(100, ZONE, &[("app", "db")])
        .preferred_anti_affinity(100, ZONE, &[("app", "cache")])
        .build();
    let mut inp = input(ab(), vec![p]);
    inp.existing_nodes = vec![full_with("n-db", "a", "db"), full_with("n-cache", "a", "cache")];
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");

    // Away from cache (zone b) and preferring zone b conflict. Preferred anti-affinity is dropped
    // before preferred node affinity, so the claim lands in zone b.
    let p = pod("p")
        .cpu("1")
        .preferred_anti_affinity(100, ZONE, &[("app", "cache")])
        .preferred_term(1, &[(ZONE, "In", &["b"])])
        .build();
    let mut inp = input(ab(), vec![p]);
    inp.existing_nodes = vec![full_with("n-cache", "b", "cache")];
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");
}

#[test]
fn schedule_anyway_spread_that_cannot_be_met_is_dropped_and_the_pod_placed() {
    // Zone a already holds two matching pods, zone b none; the pool launches only in zone a, so
    // a third pod there makes skew 3 > 1.
    let make = |when: &str| {
        let p = pod("w")
            .label("app", "w")
            .cpu("1")
            .spread_with(TopologySpreadConstraint {
                topology_key: ZONE.into(),
                max_skew: 1,
                when_unsatisfiable: when.into(),
                label_selector: Some(selector(&[("app", "w")])),
                ..Default::default()
            })
            .build();
        let np = node_pool("only-a", vec![req(ZONE, Operator::In, &["a"])]);
        let mut inp = input(vec![pool_input(np, default_types())], vec![p]);
        let mut na = node("na", &[(ZONE, "a")], &[("cpu", "2"), ("memory", "1Gi"), ("pods", "10")]);
        na.pods.push(pod("w-0").label("app", "w").cpu("1").build());
        na.pods.push(pod("w-1").label("app", "w").cpu("1").build());
        let nb = node("nb", &[(ZONE, "b")], &[("cpu", "0"), ("memory", "1Gi"), ("pods", "10")]);
        inp.existing_nodes = vec![na, nb];
        schedule(&inp)
    };
    let hard = make("DoNotSchedule");
    assert_eq!(placed(&hard), 0);
    assert!(hard.errors[0].1.message.contains("a: 2, b: 0"), "{}", hard.errors[0].1.message);
    let soft = make("ScheduleAnyway");
    assert!(soft.errors.is_empty(), "{:?}", soft.errors);
    assert_eq!(soft.new_node_claims.len(), 1);
    assert_eq!(claim_label(&soft.new_node_claims[0], ZONE), "a");
}

#[test]
fn startup_taints_of_a_node_pool_do_not_block_pods_and_go_on_the_claim() {
    let mut np = node_pool("boot", vec![]);
    let boot = Taint::new("example.com/agent-not-ready", None, TaintEffect::NoSchedule);
    np.spec.template.spec.startup_taints = vec![boot.clone()];
    let r = schedule(&input(vec![pool_input(np, default_types())], vec![pod("p").cpu("1").build()]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.new_node_claims.len(), 1);
    assert_eq!(r.new_node_claims[0].startup_taints, vec![boot]);
    assert!(r.new_node_claims[0].taints.is_empty());
}

#[test]
fn required_anti_affinity_namespace_selector_matches_pods_in_selected_namespaces_only() {
    use k8s_openapi::api::core::v1::{Affinity, PodAffinityTerm, PodAntiAffinity};
    let mut p = SlimPod::clone(&pod("p").cpu("1").build());
    p.spec.as_mut().unwrap().affinity = Some(Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                topology_key: ZONE.into(),
                label_selector: Some(selector(&[("app", "db")])),
                namespace_selector: Some(selector(&[("team", "blue")])),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    });
    let np = node_pool("abc", vec![]);
    let mut inp = input(vec![pool_input(np, default_types())], vec![Arc::new(p)]);
    let full = |name: &str, zone: &str, ns: &str| {
        let mut n = node(name, &[(ZONE, zone)], &[("cpu", "1"), ("memory", "1Gi"), ("pods", "10")]);
        n.pods.push(pod("db").namespace(ns).label("app", "db").cpu("1").build());
        n
    };
    // db runs in a blue namespace in zones a and c, and in a red one in zone b.
    inp.existing_nodes = vec![full("na", "a", "blue-1"), full("nb", "b", "red"), full("nc", "c", "blue-2")];
    inp.namespace_labels = BTreeMap::from([
        ("blue-1".to_string(), labels(&[("team", "blue")])),
        ("blue-2".to_string(), labels(&[("team", "blue")])),
        ("red".to_string(), labels(&[("team", "red")])),
        ("default".to_string(), labels(&[("team", "blue")])),
    ]);
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(claim_label(&r.new_node_claims[0], ZONE), "b");
    // Once the red namespace turns blue, every zone holds a selected db pod.
    inp.namespace_labels.insert("red".into(), labels(&[("team", "blue")]));
    let r = schedule(&inp);
    assert_eq!(placed(&r), 0);
    assert_eq!(r.errors.len(), 1);
}

#[test]
fn preferred_node_affinity_does_not_narrow_spread_domains() {
    // Zone a is only preferred: the spread still counts zones b and c, so the pods spread out
    // once zone a would exceed maxSkew, instead of all landing in zone a.
    let pods = (0..3)
        .map(|i| {
            pod(&format!("w{i}"))
                .label("app", "w")
                .cpu("1")
                .spread(ZONE, 1, &[("app", "w")])
                .preferred_term(10, &[(ZONE, "In", &["a"])])
                .build()
        })
        .collect();
    let r = schedule(&one_pool(pods));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(pods_per(&r, ZONE), BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("c".into(), 1)]));
}

#[test]
fn spread_domains_honour_every_required_node_affinity_term_ored() {
    // Terms "zone a" OR "zone b": both zones are domains of the spread, zone c is not.
    let pods = (0..4)
        .map(|i| {
            pod(&format!("w{i}"))
                .label("app", "w")
                .cpu("1")
                .spread(ZONE, 1, &[("app", "w")])
                .required_term(&[(ZONE, "In", &["a"])])
                .required_term(&[(ZONE, "In", &["b"])])
                .build()
        })
        .collect();
    let r = schedule(&one_pool(pods));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(pods_per(&r, ZONE), BTreeMap::from([("a".into(), 2), ("b".into(), 2)]));
}

#[test]
fn retry_queue_places_a_pod_whose_zone_affinity_target_is_a_smaller_pod_of_the_same_batch() {
    // The larger pod is tried first and needs a pod labelled app=db in its zone; the smaller db
    // pod (pinned to zone b) is placed later in the same pass, and the retry then places the
    // larger one in zone b.
    let web = pod("web").label("app", "web").cpu("3").pod_affinity(ZONE, &[("app", "db")]).build();
    let db = pod("db").label("app", "db").cpu("1").node_selector(ZONE, "b").build();
    let r = schedule(&one_pool(vec![web, db]));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(placed(&r), 2);
    let zone_of =
        |i: usize| r.new_node_claims.iter().find(|c| c.pods.contains(&i)).map(|c| claim_label(c, ZONE).to_string());
    assert_eq!(zone_of(0).as_deref(), Some("b"));
    assert_eq!(zone_of(1).as_deref(), Some("b"));
}

#[test]
fn daemonset_overhead_is_per_instance_type_and_skips_types_its_affinity_excludes() {
    // The 1-CPU DaemonSet runs only on "medium" and "large": "small" keeps its full 2 CPUs, so a
    // 1500m pod still fits it.
    let mut inp = one_pool(vec![pod("p").cpu("1500m").build()]);
    inp.daemonset_pods = vec![pod("ds").cpu("1").required_term(&[(INSTANCE_TYPE, "In", &["medium", "large"])]).build()];
    let r = schedule(&inp);
    let c = &r.new_node_claims[0];
    assert_eq!(c.instance_types[0].name, "small");
    assert_eq!(c.requests.get("cpu"), q("1500m"));
    // "medium" must hold the DaemonSet as well: 4500m is more than its 4 CPUs.
    let mut inp = one_pool(vec![pod("p").cpu("3500m").build()]);
    inp.daemonset_pods = vec![pod("ds").cpu("1").required_term(&[(INSTANCE_TYPE, "In", &["medium", "large"])]).build()];
    let r = schedule(&inp);
    let c = &r.new_node_claims[0];
    assert_eq!(c.instance_types[0].name, "large");
    assert_eq!(c.requests.get("cpu"), q("4500m"));
}

#[test]
fn daemonset_host_ports_are_taken_on_new_claims() {
    // A pod asking for the DaemonSet's host port cannot share a node with it.
    let mut inp = one_pool(vec![pod("p").cpu("100m").host_port(9100).build()]);
    inp.daemonset_pods = vec![pod("exporter").cpu("100m").host_port(9100).build()];
    let r = schedule(&inp);
    assert!(r.new_node_claims.is_empty());
    assert_eq!(r.errors.len(), 1, "{r:?}");
    assert!(r.errors[0].1.message.contains("host port"), "{}", r.errors[0].1.message);
    // Another port is fine.
    let mut inp = one_pool(vec![pod("p").cpu("100m").host_port(8080).build()]);
    inp.daemonset_pods = vec![pod("exporter").cpu("100m").host_port(9100).build()];
    assert_eq!(schedule(&inp).new_node_claims.len(), 1);
}

#[test]
fn daemonset_host_ports_count_only_on_the_types_the_daemonset_runs_on() {
    // The 8080 DaemonSet runs only on "medium" and "large": a pod asking for 8080 goes to "small",
    // and a claim holding it never grows into a type the DaemonSet would take the port on.
    let ds = || pod("proxy").cpu("100m").host_port(8080).required_term(&[(INSTANCE_TYPE, "In", &["medium", "large"])]);
    let mut inp = one_pool(vec![pod("p").cpu("100m").host_port(8080).build(), pod("q").cpu("1").build()]);
    inp.daemonset_pods = vec![ds().build()];
    let r = schedule(&inp);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let with_port = r.new_node_claims.iter().find(|c| c.pods.contains(&0)).expect("a claim for the pod");
    let names: Vec<&str> = with_port.instance_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["small"]);
    // Too big for "small": no type leaves the port free.
    let mut inp = one_pool(vec![pod("p").cpu("3").host_port(8080).build()]);
    inp.daemonset_pods = vec![ds().build()];
    let r = schedule(&inp);
    assert!(r.new_node_claims.is_empty(), "{:?}", r.new_node_claims);
    assert_eq!(r.errors.len(), 1);
    // A DaemonSet running everywhere takes the port on every new node.
    let mut inp = one_pool(vec![pod("p").cpu("100m").host_port(8080).build()]);
    inp.daemonset_pods = vec![pod("proxy").cpu("100m").host_port(8080).build()];
    let r = schedule(&inp);
    assert!(r.errors[0].1.message.contains("taken by a DaemonSet pod on every new node"), "{:?}", r.errors);
}

#[test]
fn scheduler_explanations_and_the_kube_scheduler_view_give_the_same_reason_per_node() {
    // One fit check: the Scheduler's words for each existing node are ClusterView's.
    let mut tainted = node("tainted", &[(ZONE, "a")], &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")]);
    tainted.taints.push(Taint::new("dedicated", Some("db"), TaintEffect::NoSchedule));
    let small = node("small", &[(ZONE, "b")], &[("cpu", "1"), ("memory", "8Gi"), ("pods", "10")]);
    let mut ported = node("ported", &[(ZONE, "c")], &[("cpu", "8"), ("memory", "8Gi"), ("pods", "10")]);
    ported.pods.push(pod("web").host_port(80).build());
    let nodes = vec![tainted, small, ported];
    let p = pod("p").cpu("2").host_port(80).build();
    let mut inp = input(vec![], vec![p.clone()]);
    inp.existing_nodes = nodes.clone();
    let r = schedule(&inp);
    let message = &r.errors[0].1.message;
    let view = crate::predicates::ClusterView::new(nodes);
    for i in 0..3 {
        let reason = view.check(&p, i).unwrap_err().reason;
        assert!(message.contains(&format!("1 {reason}")), "{reason} not in {message}");
    }
}

#[test]
fn an_unavailable_pool_is_not_used_and_is_named_with_its_reason() {
    let mut i = one_pool(vec![pod("p").cpu("1").build()]);
    i.node_pools.clear();
    i.unavailable_node_pools.insert("default".into(), "EC2NodeClass default not found".into());
    let r = schedule(&i);
    assert!(r.new_node_claims.is_empty());
    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].1.message, "NodePool default: EC2NodeClass default not found");
}
