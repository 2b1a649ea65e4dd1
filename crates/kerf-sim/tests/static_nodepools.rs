//! Static NodePools (`spec.replicas`) through the simulator, against Karpenter's rules: drifted
//! nodes are replaced one for one from the pool's template within the `Drifted` budget, never
//! taking the pool over `limits.nodes` (a pool at its limit keeps its drifted nodes and says
//! why), and an expired node's refill waits for it when the pool is at its limit.

mod common;

use std::path::Path;

use kerf_api::NodeClaim;
use kerf_cloud::ManualClock;
use kerf_sim::Report;
use kerf_sim::driver::Simulation;
use kerf_sim::scenario::parse;
use kerf_sim::steps::simulation_for;

/// A static pool `fixed` of m5.large nodes.
fn pool(replicas: u32, limit: u32, extra_spec: &str) -> String {
    format!(
        r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {{name: fixed}}
        spec:
          replicas: {replicas}
          limits: {{nodes: "{limit}"}}
          disruption: {{budgets: [{{nodes: "1"}}]}}
          template:
            spec:{extra_spec}
              requirements:
                - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}
                - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
              nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
"#
    )
}

/// Runs the scenario step by step; returns the report and the most NodeClaims the pool had
/// after any step (steps are `wait`s of a few seconds, so this follows the pool closely).
fn run_counting(yaml: &str) -> (Report, usize, Simulation<kerf_cloud::sim::SimProvider>) {
    let scenario = parse(Path::new("test.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = simulation_for(&scenario, ManualClock::new()).unwrap_or_else(|e| panic!("{e}"));
    sim.settle(sim.now()).unwrap_or_else(|e| panic!("{e}"));
    let mut most = 0;
    for (i, step) in scenario.steps.iter().enumerate() {
        sim.step(i, step).unwrap_or_else(|e| panic!("{e}"));
        most = most.max(sim.cluster().count::<NodeClaim>());
    }
    (sim.report(), most, sim)
}

/// A scenario named `name` (launch latency 30 s) that applies the node class and `objects`,
/// then runs `steps`.
fn scenario(name: &str, objects: &str, steps: &str) -> String {
    format!(
        "name: {name}\ncloud: {{region: us-west-2, launchLatency: 30s}}\nsteps:\n  - apply:\n{}{objects}\n{steps}",
        common::NODE_CLASS
    )
}

/// `n` waits of `each`.
fn waits(n: usize, each: &str) -> String {
    (0..n).map(|_| format!("  - wait: {each}\n")).collect()
}

const DRIFT: &str =
    "  - patch: {kind: NodePool, name: fixed, merge: {spec: {template: {metadata: {labels: {team: blue}}}}}}\n";

fn team_blue(r: &Report) -> usize {
    r.nodes.iter().filter(|n| n.labels.get("team").is_some_and(|v| v == "blue")).count()
}

#[test]
fn a_drifted_static_pool_is_replaced_one_node_at_a_time_within_its_node_limit() {
    let yaml = scenario("static-drift", &pool(3, 4, ""), &format!("  - wait: 2m\n{DRIFT}{}", waits(60, "5s")));
    let (r, most, _) = run_counting(&yaml);
    assert!(most <= 4, "the pool had {most} NodeClaims with limits.nodes 4");
    assert_eq!(r.nodes.len(), 3, "{:?}", r.nodes);
    assert_eq!(team_blue(&r), 3, "every node replaced from the new template");
    let drifted: Vec<_> = r.disruptions.iter().filter(|d| d.reason == "Drifted").collect();
    assert_eq!(drifted.len(), 3, "{:?}", r.disruptions);
    // One at a time (budget nodes: 1): each decided after the previous replacement's node went.
    let mut at: Vec<f64> = drifted.iter().map(|d| d.at_seconds.0).collect();
    at.sort_by(f64::total_cmp);
    assert!(at.windows(2).all(|w| w[1] - w[0] >= 30.0), "replacements overlapped: {at:?}");
}

#[test]
fn a_static_pool_at_its_node_limit_keeps_its_drifted_nodes_and_says_why_until_the_limit_is_raised() {
    let raise = "  - patch: {kind: NodePool, name: fixed, merge: {spec: {limits: {nodes: \"4\"}}}}\n";
    let held = scenario("static-drift-at-limit", &pool(3, 3, ""), &format!("  - wait: 2m\n{DRIFT}{}", waits(24, "5s")));
    let (r, most, _) = run_counting(&held);
    assert_eq!(most, 3, "never more than limits.nodes");
    assert!(r.disruptions.is_empty(), "{:?}", r.disruptions);
    assert_eq!(team_blue(&r), 0);
    for n in &r.nodes {
        let why = n.disruption_blocked.as_deref().unwrap_or_default();
        assert!(why.contains("at its node limit (limits.nodes 3, 3 NodeClaims)"), "{}: {why}", n.name);
    }
    let (r, most, _) = run_counting(&format!("{held}{raise}{}", waits(60, "5s")));
    assert!(most <= 4, "{most}");
    assert_eq!((r.nodes.len(), team_blue(&r)), (3, 3), "replaced once the limit allowed a fourth NodeClaim");
}

/// Two pods, one per node of `fixed`, that a PodDisruptionBudget keeps from eviction: an
/// expired node drains only when its `terminationGracePeriod` (2m) ends.
fn guarded_pods() -> String {
    let extra = "
              nodeSelector: {karpenter.sh/nodepool: fixed}
              affinity:
                podAntiAffinity:
                  requiredDuringSchedulingIgnoredDuringExecution:
                    - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}";
    format!(
        "{}{}",
        common::deployment("web", 2, "500m", extra),
        r#"
      - apiVersion: policy/v1
        kind: PodDisruptionBudget
        metadata: {name: web}
        spec: {minAvailable: 2, selector: {matchLabels: {app: web}}}
"#
    )
}

#[test]
fn an_expired_static_node_is_refilled_only_once_it_is_gone_when_the_pool_is_at_its_node_limit() {
    let expire = "\n              expireAfter: 5m\n              terminationGracePeriod: 2m";
    let at_limit = scenario("static-expiry", &format!("{}{}", pool(2, 2, expire), guarded_pods()), &waits(100, "5s"));
    let (r, most, sim) = run_counting(&at_limit);
    assert_eq!(most, 2, "a refill went over limits.nodes 2");
    assert_eq!(r.nodes.len(), 2);
    let expired = r.disruptions.iter().filter(|d| d.reason == "Expired").count();
    assert!(expired >= 2, "{:?}", r.disruptions);
    assert!(sim.cluster().list_objs::<NodeClaim>().iter().all(|c| c.metadata.deletion_timestamp.is_none()));
    assert_eq!(r.summary.pods_running, 2, "{:?}", r.pods);
    // With room under the limit, the refill is launched while the expired node drains.
    let surge = at_limit.replace("nodes: \"2\"", "nodes: \"3\"");
    let (r, most, _) = run_counting(&surge);
    assert_eq!(most, 3, "no refill while the expired node drained, with limits.nodes 3");
    assert_eq!(r.nodes.len(), 2);
    assert_eq!(r.summary.pods_running, 2, "{:?}", r.pods);
}
