//! How `preferencePolicy` shapes a plan: kerf's default honours "one replica per node" on room
//! that is there and never buys a node per pod for it; Karpenter's `Respect` buys them;
//! `Ignore` plans as if pods stated no preference.

use std::sync::Arc;

use kerf_api::ResourceList;
use kerf_api::SlimPod;
use kerf_api::labels::{HOSTNAME, ZONE};

use crate::instance::InstanceType;
use crate::model::{NodePoolInput, PreferencePolicy, SchedulingInput, SchedulingResult};
use crate::scheduler::schedule;
use crate::testing::*;

const ZONES: [&str; 3] = ["a", "b", "c"];

fn types() -> Vec<InstanceType> {
    vec![
        instance_type("small", "2", "4Gi", "20", 0.10, &ZONES),
        instance_type("medium", "4", "8Gi", "40", 0.20, &ZONES),
        instance_type("large", "8", "16Gi", "80", 0.40, &ZONES),
    ]
}

fn plan(pods: Vec<Arc<SlimPod>>, policy: PreferencePolicy) -> SchedulingResult {
    plan_with(pods, policy, |_| {})
}

fn plan_with(
    pods: Vec<Arc<SlimPod>>,
    policy: PreferencePolicy,
    edit: impl FnOnce(&mut SchedulingInput),
) -> SchedulingResult {
    let pool = NodePoolInput {
        node_pool: Arc::new(node_pool("default", vec![])),
        instance_types: types().into_iter().map(Arc::new).collect(),
        in_use: ResourceList::new(),
    };
    let mut input = SchedulingInput { node_pools: vec![pool], pods, preference_policy: policy, ..Default::default() };
    edit(&mut input);
    let r = schedule(&input);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    r
}

/// `n` replicas of `app` asking `cpu` each, preferring one replica per node.
fn one_per_node(app: &str, n: usize, cpu: &str) -> Vec<Arc<SlimPod>> {
    (0..n)
        .map(|i| {
            pod(&format!("{app}-{i}"))
                .label("app", app)
                .cpu(cpu)
                .preferred_anti_affinity(100, HOSTNAME, &[("app", app)])
                .build()
        })
        .collect()
}

/// How many pods of `app` each new claim holds, claim by claim.
fn per_claim(r: &SchedulingResult, pods: &[Arc<SlimPod>], app: &str) -> Vec<usize> {
    let of_app =
        |i: &usize| pods[*i].metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str) == Some(app);
    r.new_node_claims.iter().map(|c| c.pods.iter().filter(|i| of_app(i)).count()).collect()
}

#[test]
fn replicas_preferring_one_per_node_share_the_nodes_their_requests_need_rather_than_one_each() {
    let pods = one_per_node("web", 6, "1");
    let within = plan(pods.clone(), PreferencePolicy::RespectWithinRoom);
    assert_eq!(per_claim(&within, &pods, "web"), [6], "six 1-CPU pods fit one 8-CPU node");
    let respect = plan(pods.clone(), PreferencePolicy::Respect);
    assert_eq!(per_claim(&respect, &pods, "web"), [1; 6], "Karpenter's Respect buys a node per replica");
    let ignore = plan(pods.clone(), PreferencePolicy::Ignore);
    assert_eq!(per_claim(&ignore, &pods, "web"), [6]);
}

#[test]
fn replicas_preferring_one_per_node_take_one_each_of_the_nodes_other_pods_need() {
    let mut pods: Vec<Arc<SlimPod>> =
        (0..3).map(|i| pod(&format!("batch-{i}")).label("app", "batch").cpu("6").build()).collect();
    pods.extend(one_per_node("web", 3, "1"));
    let r = plan(pods.clone(), PreferencePolicy::RespectWithinRoom);
    assert_eq!(per_claim(&r, &pods, "batch"), [1, 1, 1]);
    assert_eq!(per_claim(&r, &pods, "web"), [1, 1, 1], "the preference holds where the room is there");
}

#[test]
fn replicas_preferring_one_per_node_use_room_on_an_existing_node_before_a_new_one() {
    let pods = one_per_node("web", 2, "1");
    let with_node = |input: &mut SchedulingInput| {
        let mut n = node("n1", &[(ZONE, "a")], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "20")]);
        n.pods.push(pod("web-old").label("app", "web").cpu("1").build());
        input.existing_nodes = vec![n];
    };
    let within = plan_with(pods.clone(), PreferencePolicy::RespectWithinRoom, with_node);
    assert_eq!(within.placements.len(), 2, "{within:?}");
    assert!(within.new_node_claims.is_empty());
    let respect = plan_with(pods.clone(), PreferencePolicy::Respect, with_node);
    assert!(respect.placements.is_empty());
    assert_eq!(per_claim(&respect, &pods, "web"), [1, 1]);
}

#[test]
fn a_preferred_zone_picks_the_new_nodes_zone_unless_preferences_are_ignored() {
    let pods = vec![pod("p").cpu("1").preferred_term(10, &[(ZONE, "In", &["c"])]).build()];
    let zone = |r: &SchedulingResult| r.new_node_claims[0].labels.get(ZONE).cloned();
    assert_eq!(zone(&plan(pods.clone(), PreferencePolicy::RespectWithinRoom)).as_deref(), Some("c"));
    assert_eq!(zone(&plan(pods.clone(), PreferencePolicy::Respect)).as_deref(), Some("c"));
    let ignored = plan(pods, PreferencePolicy::Ignore);
    assert_ne!(zone(&ignored).as_deref(), Some("c"));
    let reqs = &ignored.new_node_claims[0].requirements;
    assert!(!reqs.iter().any(|r| r.key == ZONE && r.values == ["c"]), "{reqs:?}");
}

#[test]
fn each_policy_name_reads_as_its_own_policy_and_others_are_refused() {
    let read: Vec<PreferencePolicy> =
        PreferencePolicy::NAMES.iter().filter_map(|n| PreferencePolicy::parse(n)).collect();
    assert_eq!(read, [PreferencePolicy::RespectWithinRoom, PreferencePolicy::Respect, PreferencePolicy::Ignore]);
    assert_eq!(PreferencePolicy::parse("respect"), None, "names are case-sensitive, as Karpenter's");
    assert_eq!(PreferencePolicy::parse(""), None);
}
