//! The SchedulingContext's queries: placing the pending pods as `schedule` does, and the
//! consolidation what-if.

use std::sync::Arc;

use kerf_api::ResourceList;
use kerf_api::labels::{HOSTNAME, ZONE};

use crate::model::{ExistingNode, NodePoolInput, SchedulingInput};
use crate::scheduler::{SchedulingContext, schedule};
use crate::testing::*;

const ZONES: [&str; 3] = ["a", "b", "c"];

fn cluster(nodes: Vec<ExistingNode>) -> SchedulingInput {
    SchedulingInput {
        node_pools: vec![NodePoolInput {
            node_pool: Arc::new(node_pool("default", vec![])),
            instance_types: vec![
                Arc::new(instance_type("small", "2", "4Gi", "20", 0.10, &ZONES)),
                Arc::new(instance_type("large", "8", "16Gi", "80", 0.40, &ZONES)),
            ],
            in_use: ResourceList::new(),
        }],
        existing_nodes: nodes,
        ..Default::default()
    }
}

fn big_node(name: &str, zone: &str, pods: &[(&str, &str)]) -> ExistingNode {
    let mut n = node(name, &[(ZONE, zone)], &[("cpu", "8"), ("memory", "16Gi"), ("pods", "80")]);
    n.node_pool = Some("default".into());
    n.pods = pods.iter().map(|(p, cpu)| pod(p).cpu(cpu).build()).collect();
    n
}

#[test]
fn what_if_without_a_node_whose_pods_fit_elsewhere_is_deletable() {
    let mut ctx = SchedulingContext::new(cluster(vec![
        big_node("n1", "a", &[("p1", "1"), ("p2", "1")]),
        big_node("n2", "b", &[]),
    ]));
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert_eq!(w.pods.len(), 2);
    assert!(w.deletable(), "{w:?}");
    assert!(w.placements.iter().all(|p| p.node == "n2"));
}

#[test]
fn what_if_needs_one_cheaper_claim_when_the_pods_fit_nowhere_else() {
    let mut ctx = SchedulingContext::new(cluster(vec![
        big_node("n1", "a", &[("p1", "500m")]),
        big_node("n2", "b", &[("full", "8")]),
    ]));
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert!(!w.deletable());
    // One small spot node holds the pod: $0.07/h.
    let price = w.single_replacement_price().expect("one replacement");
    assert!((price - 0.07).abs() < 1e-9, "{price}");
    assert_eq!(w.new_node_claims[0].claim.instance_types[0].name, "small");
    assert_eq!(w.new_node_claims[0].claim.pods, vec![0]);
}

#[test]
fn what_if_leaves_the_context_as_it_was_for_the_next_query() {
    let nodes = vec![
        big_node("n1", "a", &[("p1", "3"), ("p2", "2")]),
        big_node("n2", "b", &[("p3", "4")]),
        big_node("n3", "c", &[("p4", "6")]),
    ];
    let mut input = cluster(nodes);
    input.pods = vec![pod("pending-1").cpu("3").build(), pod("pending-2").cpu("7").build()];
    let mut ctx = SchedulingContext::new(input.clone());
    let first: Vec<String> =
        ["n1", "n2", "n3"].iter().map(|n| format!("{:?}", ctx.without_nodes(&[n]).unwrap().placements)).collect();
    let again: Vec<String> =
        ["n1", "n2", "n3"].iter().map(|n| format!("{:?}", ctx.without_nodes(&[n]).unwrap().placements)).collect();
    assert_eq!(first, again);
    // Placing the pending pods after the what-ifs gives what a fresh `schedule` gives.
    let placed = ctx.place_pending();
    let fresh = schedule(&input);
    assert_eq!(placed.placements, fresh.placements);
    assert_eq!(placed.new_node_claims.len(), fresh.new_node_claims.len());
    assert_eq!(placed.errors, fresh.errors);
}

#[test]
fn what_if_leaves_daemonset_pods_with_their_node() {
    let mut n1 = big_node("n1", "a", &[("app", "1")]);
    n1.pods.push(pod("agent").cpu("100m").owner("DaemonSet", "agent").build());
    let mut ctx = SchedulingContext::new(cluster(vec![n1, big_node("n2", "b", &[])]));
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert_eq!(w.pods.len(), 1);
    assert_eq!(w.pods[0].metadata.name.as_deref(), Some("app"));
    assert!(w.deletable());
}

#[test]
fn what_if_frees_the_removed_nodes_spread_and_anti_affinity_domains() {
    // At most one db pod per node. Without n1, its pod goes to n3 (n2 holds one); without n1
    // and n3, it needs a new node.
    let anti = |name: &str| pod(name).label("app", "db").anti_affinity(HOSTNAME, &[("app", "db")]).cpu("1").build();
    let mut n1 = big_node("n1", "a", &[]);
    n1.pods.push(anti("db-1"));
    let mut n2 = big_node("n2", "b", &[]);
    n2.pods.push(anti("db-2"));
    let n3 = big_node("n3", "c", &[]);
    let mut ctx = SchedulingContext::new(cluster(vec![n1, n2, n3]));
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert!(w.deletable(), "{w:?}");
    assert_eq!(w.placements[0].node, "n3");
    let w = ctx.without_nodes(&["n1", "n3"]).unwrap();
    assert!(!w.deletable());
    assert_eq!(w.new_node_claims.len(), 1);
}

#[test]
fn what_if_names_an_unknown_node() {
    let mut ctx = SchedulingContext::new(cluster(vec![big_node("n1", "a", &[])]));
    let err = ctx.without_nodes(&["nope"]).unwrap_err();
    assert_eq!(err.to_string(), "no existing node or in-flight NodeClaim named nope");
}
