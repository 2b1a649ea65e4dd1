//! The SchedulingContext's queries: placing the pending pods as `schedule` does, and the
//! consolidation what-if.

use std::sync::Arc;

use kerf_api::ResourceList;
use kerf_api::labels::{HOSTNAME, ZONE};

use crate::model::{ExistingNode, SchedulingInput};
use crate::scheduler::{PodFactsCache, SchedulingContext, schedule};
use crate::testing::*;

fn big_node(name: &str, zone: &str, pods: &[(&str, &str)]) -> ExistingNode {
    let mut n = node(name, &[(ZONE, zone)], &[("cpu", "8"), ("memory", "16Gi"), ("pods", "80")]);
    n.node_pool = Some("default".into());
    n.pods = pods.iter().map(|(p, cpu)| pod(p).cpu(cpu).build()).collect();
    n
}

#[test]
fn what_if_without_a_node_whose_pods_fit_elsewhere_is_deletable() {
    let mut ctx = SchedulingContext::new(small_large_cluster(vec![
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
    let mut ctx = SchedulingContext::new(small_large_cluster(vec![
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
    let mut input = small_large_cluster(nodes);
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
    let mut ctx = SchedulingContext::new(small_large_cluster(vec![n1, big_node("n2", "b", &[])]));
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
    let mut ctx = SchedulingContext::new(small_large_cluster(vec![n1, n2, n3]));
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert!(w.deletable(), "{w:?}");
    assert_eq!(w.placements[0].node, "n3");
    let w = ctx.without_nodes(&["n1", "n3"]).unwrap();
    assert!(!w.deletable());
    assert_eq!(w.new_node_claims.len(), 1);
}

#[test]
fn what_if_names_an_unknown_node() {
    let mut ctx = SchedulingContext::new(small_large_cluster(vec![big_node("n1", "a", &[])]));
    let err = ctx.without_nodes(&["nope"]).unwrap_err();
    assert_eq!(err.to_string(), "no existing node or in-flight NodeClaim named nope");
}

/// `cluster` with the pool limited to `cpu` and every managed node holding its capacity of it.
fn at_cpu_limit(mut input: SchedulingInput, cpu: &str) -> SchedulingInput {
    let mut in_use = ResourceList::new();
    for n in &mut input.existing_nodes {
        n.pool_usage = Arc::new(rl(&[("cpu", "8"), ("memory", "16Gi"), ("pods", "80")]));
        in_use.add(&n.pool_usage);
    }
    let pool = &mut input.node_pools[0];
    let mut np = (*pool.node_pool).clone();
    np.spec.limits = Some(rl(&[("cpu", cpu)]));
    pool.node_pool = Arc::new(np);
    pool.in_use = in_use;
    input
}

#[test]
fn pool_at_its_cpu_limit_can_still_replace_a_node_by_a_cheaper_one_in_a_what_if() {
    // The pool's 8 CPUs are all held by n1; without n1 they are free for its replacement.
    let mut input = at_cpu_limit(small_large_cluster(vec![big_node("n1", "a", &[("p1", "500m")])]), "8");
    input.pods = vec![pod("pending").cpu("1").build()];
    let mut ctx = SchedulingContext::new(input);
    let w = ctx.without_nodes(&["n1"]).unwrap();
    let price = w.single_replacement_price().unwrap_or_else(|| panic!("one replacement: {w:?}"));
    assert!((price - 0.07).abs() < 1e-9, "{price}");
    // The released capacity belongs to that what-if only: the pending pod still finds the pool
    // at its limit.
    let placed = ctx.place_pending();
    assert!(placed.new_node_claims.is_empty(), "{:?}", placed.new_node_claims);
    assert_eq!(placed.placements, vec![crate::model::Placement { pod: 0, node: "n1".into() }]);
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert!(w.single_replacement_price().is_some(), "{w:?}");
}

#[test]
fn what_if_releases_only_the_removed_nodes_share_of_the_pool_limit() {
    // Two nodes hold 16 of the pool's 16 CPUs. Without n1 its pods need 5 CPUs: the 8 n1 held
    // are enough for one new node (a large one, the small one being too small).
    let input = at_cpu_limit(
        small_large_cluster(vec![
            big_node("n1", "a", &[("p1", "3"), ("p2", "2")]),
            big_node("n2", "b", &[("full", "8")]),
        ]),
        "16",
    );
    let mut ctx = SchedulingContext::new(input.clone());
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert_eq!(w.new_node_claims.len(), 1, "{w:?}");
    assert!(w.unplaced.is_empty(), "{w:?}");
    // With the pool 1 CPU over a 15-CPU limit, n1's 8 leave 7: room for a small node (p2), not
    // for the large one p1 needs.
    let mut ctx = SchedulingContext::new(at_cpu_limit(input, "15"));
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert_eq!(w.unplaced, vec![0], "{w:?}");
    assert_eq!(w.new_node_claims.len(), 1, "{w:?}");
    assert_eq!(w.new_node_claims[0].claim.instance_types[0].name, "small");
}

/// A cluster whose pods all carry a uid and resourceVersion: two nodes with spread, anti-affinity
/// and plain pods, and pending pods of each kind.
fn versioned_cluster() -> SchedulingInput {
    let web = |name: &str, cpu: &str| {
        pod(name).label("app", "web").spread(ZONE, 1, &[("app", "web")]).cpu(cpu).version(&format!("uid-{name}"), "1")
    };
    let db = |name: &str| {
        pod(name)
            .label("app", "db")
            .anti_affinity(HOSTNAME, &[("app", "db")])
            .cpu("1")
            .version(&format!("uid-{name}"), "1")
    };
    let mut n1 = big_node("n1", "a", &[]);
    n1.pods = vec![
        web("web-1", "1").build(),
        db("db-1").build(),
        pod("plain-1").cpu("2").version("uid-plain-1", "1").build(),
    ];
    let mut n2 = big_node("n2", "b", &[]);
    n2.pods = vec![web("web-2", "1").build()];
    let mut input = small_large_cluster(vec![n1, n2]);
    input.pods = vec![
        web("web-3", "2").build(),
        db("db-2").build(),
        db("db-3").build(),
        pod("plain-2").cpu("1").version("uid-plain-2", "1").build(),
    ];
    input
}

/// A scheduling result as text, to compare two results whole.
fn shown(r: &crate::model::SchedulingResult) -> String {
    format!("{:?} {:?} {:?}", r.placements, r.new_node_claims, r.errors)
}

#[test]
fn unchanged_pods_are_parsed_once_across_context_builds_with_the_same_results() {
    let input = versioned_cluster();
    let pods = input.pods.len() + input.existing_nodes.iter().map(|n| n.pods.len()).sum::<usize>();
    let cache = PodFactsCache::new();
    let first = SchedulingContext::with_facts(input.clone(), &cache).place_pending();
    assert_eq!(cache.parses(), pods as u64);
    let mut ctx = SchedulingContext::with_facts(input.clone(), &cache);
    let again = ctx.place_pending();
    let what_if = format!("{:?}", ctx.without_nodes(&["n1"]).unwrap());
    assert_eq!(cache.parses(), pods as u64, "the second build parses nothing");
    assert_eq!(cache.len(), pods);
    // The cached facts give what parsing every pod gives.
    let fresh = schedule(&input);
    assert_eq!(shown(&first), shown(&fresh));
    assert_eq!(shown(&again), shown(&fresh));
    assert_eq!(what_if, format!("{:?}", SchedulingContext::new(input).without_nodes(&["n1"]).unwrap()));
}

#[test]
fn a_pod_whose_spec_changed_is_parsed_again() {
    let mut input = versioned_cluster();
    let pods = input.pods.len() + input.existing_nodes.iter().map(|n| n.pods.len()).sum::<usize>();
    let cache = PodFactsCache::new();
    let before = SchedulingContext::with_facts(input.clone(), &cache).place_pending();
    assert!(before.placements.iter().any(|p| p.pod == 3), "plain-2 fits on a node: {:?}", before.placements);
    // plain-2 now asks for more than any node or instance type has.
    input.pods[3] = pod("plain-2").cpu("20").version("uid-plain-2", "2").build();
    let after = SchedulingContext::with_facts(input.clone(), &cache).place_pending();
    assert_eq!(cache.parses(), pods as u64 + 1, "only the changed pod is parsed again");
    assert!(after.errors.iter().any(|(p, _)| *p == 3), "{:?}", after.errors);
    assert_eq!(shown(&after), shown(&schedule(&input)));
}

#[test]
fn constraint_classes_from_the_cache_group_pods_as_comparing_them_does() {
    let mut input = versioned_cluster();
    // Same labels, one pinned to each node (as DaemonSet pods are), and two identical pods.
    for (i, zone) in ["a", "b", "a"].iter().enumerate() {
        let p = pod(&format!("agent-{i}")).label("app", "agent").node_selector(ZONE, zone);
        input.pods.push(p.version(&format!("uid-agent-{i}"), "1").build());
    }
    let cache = PodFactsCache::new();
    let cached = SchedulingContext::with_facts(input.clone(), &cache);
    let compared = SchedulingContext::new(input.clone());
    assert_eq!(cached.pod_groups(), compared.pod_groups());
    // agent-0 and agent-2 share a group, agent-1 has its own.
    let groups = &compared.pod_groups()[input.pods.len() - 3..input.pods.len()];
    assert_eq!(groups[0], groups[2]);
    assert_ne!(groups[0], groups[1]);
}

/// n1's two pods fit in the gaps of n2 and n3 only if the large one goes first; kube-scheduler,
/// taking the small one first, puts it in the larger gap (least allocated) and leaves the large
/// one nowhere.
fn gaps_only_kerfs_order_fills() -> SchedulingInput {
    let mut n1 = big_node("n1", "a", &[]);
    n1.pods = vec![pod("small").cpu("500m").build(), pod("large").cpu("1500m").build()];
    small_large_cluster(vec![n1, big_node("n2", "b", &[("used2", "6500m")]), big_node("n3", "c", &[("used3", "7")])])
}

#[test]
fn kube_replay_refuses_a_deletion_whose_pods_fit_only_in_kerfs_packing_order() {
    let mut ctx = SchedulingContext::new(gaps_only_kerfs_order_fills());
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert!(w.deletable(), "kerf's own packing fits both pods: {w:?}");
    let e = ctx.kube_replay(&["n1"], &w.pods, None).unwrap_err();
    assert!(e.contains("default/large") && e.contains("nowhere to go"), "{e}");
    // The replay leaves the context as it was: the same question gets the same answers.
    let again = ctx.without_nodes(&["n1"]).unwrap();
    assert_eq!(format!("{:?}", again.placements), format!("{:?}", w.placements));
    assert_eq!(ctx.kube_replay(&["n1"], &w.pods, None).unwrap_err(), e);
}

#[test]
fn kube_replay_accepts_a_deletion_when_the_pods_fit_in_any_order() {
    let mut ctx = SchedulingContext::new(small_large_cluster(vec![
        big_node("n1", "a", &[("p1", "1"), ("p2", "1")]),
        big_node("n2", "b", &[]),
    ]));
    let w = ctx.without_nodes(&["n1"]).unwrap();
    assert!(ctx.kube_replay(&["n1"], &w.pods, None).is_ok());
}

#[test]
fn kube_replay_counts_the_replacement_node_with_its_daemonset_pods() {
    use crate::model::NewNodeClaim;
    use crate::scheduler::Replacement;
    let mut input = gaps_only_kerfs_order_fills();
    let small = input.node_pools[0].instance_types[0].clone();
    let claim = NewNodeClaim {
        node_pool: "default".into(),
        requirements: vec![],
        instance_types: vec![small.clone()],
        instance_type_min_values: None,
        labels: Default::default(),
        taints: vec![],
        startup_taints: vec![],
        pods: vec![],
        requests: ResourceList::new(),
    };
    let offering = small.offerings[0].clone();
    // Without DaemonSets the small replacement (2 cpu) holds both pods.
    let mut ctx = SchedulingContext::new(input.clone());
    let w = ctx.without_nodes(&["n1"]).unwrap();
    let r = Replacement { claim: &claim, instance_type: &small, offering: &offering };
    assert!(ctx.kube_replay(&["n1"], &w.pods, Some(r)).is_ok());
    // A DaemonSet taking 1.5 cpu on every node leaves the replacement room for the small pod
    // only, and the large one nowhere.
    input.daemonset_pods = vec![pod("agent").cpu("1500m").build()];
    let mut ctx = SchedulingContext::new(input);
    let e = ctx.kube_replay(&["n1"], &w.pods, Some(r)).unwrap_err();
    assert!(e.contains("default/large"), "{e}");
}
