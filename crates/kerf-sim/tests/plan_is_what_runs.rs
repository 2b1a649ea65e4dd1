//! What kerf plans is what runs: the nominations kerf writes (`status.nominatedNodeName`) make
//! the simulated kube-scheduler bind pods where kerf planned them, and a scenario can model a
//! cluster whose kube-scheduler ignores them (`settings.kubeScheduler.nominatedNodeName: false`).

mod common;

use common::{NODE_CLASS, daemonset, deployment, run};
use kerf_sim::Report;

/// An arm64 type with room for seven 1.1-CPU pods, and a small amd64 type.
const CLOUD: &str = r#"
cloud:
  region: us-west-2
  zones: [us-west-2a]
  launchLatency: 30s
  instanceTypes:
    - name: arm
      capacity: {cpu: "8", memory: 32Gi, pods: "40"}
      labels: {kubernetes.io/arch: arm64}
      price: 0.40
      offerings: [{zone: us-west-2a, capacityType: on-demand, price: 0.40}]
    - name: small
      capacity: {cpu: "2", memory: 8Gi, pods: "20"}
      labels: {kubernetes.io/arch: amd64}
      price: 0.10
      offerings: [{zone: us-west-2a, capacityType: on-demand, price: 0.10}]
"#;

const POOL: &str = r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              requirements:
                - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

/// [`POOL`] consolidating underutilized nodes as soon as `consolidateAfter` (0s) allows.
fn consolidating_pool() -> String {
    let pool = POOL.replace(
        "        spec:\n          template:",
        "        spec:\n          disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}\n          template:",
    );
    assert!(pool.contains("consolidateAfter"), "{pool}");
    pool
}

/// A small on-demand type of the one zone of [`one_zone_cloud`] ($0.10/h, 2 CPUs).
const SMALL: &str = r#"    - name: small
      capacity: {cpu: "2", memory: 8Gi, pods: "20"}
      price: 0.10
      offerings: [{zone: us-west-2a, capacityType: on-demand, price: 0.10}]"#;

/// One zone whose launches take 30 s, offering `types` (instance type entries).
fn one_zone_cloud(types: &[&str]) -> String {
    format!(
        "cloud:\n  region: us-west-2\n  zones: [us-west-2a]\n  launchLatency: 30s\n  instanceTypes:\n{}",
        types.join("\n")
    )
}

/// Two unconstrained 900m pods (created first) and seven arm64-only 1.1-CPU pods: kerf plans the
/// arm64 pods on one arm node and the others on one small node. A kube-scheduler that does not
/// look at nominations binds the unconstrained pods first, on the emptiest node: the arm node.
fn scenario(honour: bool) -> Report {
    let yaml = format!(
        r#"name: t
settings:
  kubeScheduler: {{nominatedNodeName: {honour}}}
{CLOUD}
steps:
  - apply:
{NODE_CLASS}{POOL}
  - apply:
{}
  - apply:
{}
  - wait: 3m
"#,
        deployment("any", 2, "900m", ""),
        deployment("arm", 7, "1100m", "\n              nodeSelector: {kubernetes.io/arch: arm64}"),
    );
    run(&yaml)
}

fn nodes_of_type<'a>(r: &'a Report, itype: &str) -> Vec<&'a str> {
    r.nodes.iter().filter(|n| n.instance_type.as_deref() == Some(itype)).map(|n| n.name.as_str()).collect()
}

#[test]
fn pods_run_on_the_nodes_kerf_planned_when_kube_scheduler_honours_nominations() {
    let r = scenario(true);
    assert_eq!(r.summary.pods_pending, 0);
    assert_eq!(r.summary.node_claims_launched, 2, "one launch: the plan");
    assert!(r.disruptions.is_empty());
    let arm = nodes_of_type(&r, "arm");
    let small = nodes_of_type(&r, "small");
    assert_eq!((arm.len(), small.len()), (1, 1));
    for p in &r.pods {
        let want = if p.name.starts_with("arm-") { arm[0] } else { small[0] };
        assert_eq!(p.node.as_deref(), Some(want), "{} runs where kerf planned it", p.name);
    }
    // Every pod runs as soon as the nodes are Ready (launch latency 30 s after the 1 s batch).
    let ready = r.timeline.iter().find(|s| s.nodes == 2).unwrap();
    assert_eq!((ready.seconds, ready.pods_pending), (31.0, 0));
}

#[test]
fn without_nominations_unconstrained_pods_take_the_room_planned_for_constrained_ones() {
    let r = scenario(false);
    // The arm pods that lost their room wait for a second launch.
    assert!(r.summary.node_claims_launched > 2, "{:?}", r.summary);
    let at_ready = r.timeline.iter().find(|s| s.nodes == 2).unwrap();
    assert!(at_ready.pods_pending > 0, "{at_ready:?}");
    assert_eq!(r.summary.pods_pending, 0, "they run in the end");
}

#[test]
fn daemonset_pods_run_on_every_node_kerf_launches_while_more_pods_keep_arriving() {
    // Pods arrive in waves while the first claims launch: later waves are planned onto the
    // in-flight claims, which keep room for the agent that will run on their nodes.
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{NODE_CLASS}{POOL}{}
  - apply:
{}
  - wait: 5s
  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 6}}
  - wait: 5s
  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 9}}
  - wait: 3m
"#,
        daemonset("agent", "\n              tolerations: [{operator: Exists}]", ""),
        deployment("web", 3, "500m", ""),
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods_pending, 0, "{:#?}", r.pods.iter().filter(|p| p.node.is_none()).collect::<Vec<_>>());
    let agents = r.pods.iter().filter(|p| p.owner == "DaemonSet/agent").count();
    assert_eq!(agents, r.nodes.len(), "one agent Running on every node");
}

#[test]
fn a_new_node_is_kept_while_the_workload_is_unchanged_and_consolidated_as_soon_as_it_shrinks() {
    // Three 1.2-CPU pods fit one medium node ($0.15/h) where one small node ($0.10/h) holds only
    // one of them.
    let medium = r#"    - name: medium
      capacity: {cpu: "4", memory: 16Gi, pods: "40"}
      price: 0.15
      offerings: [{zone: us-west-2a, capacityType: on-demand, price: 0.15}]"#;
    let yaml = format!(
        r#"name: t
{}
steps:
  - apply:
{NODE_CLASS}{}
  - apply:
{}
  - wait: 35s
"#,
        one_zone_cloud(&[SMALL, medium]),
        consolidating_pool(),
        deployment("web", 3, "1200m", ""),
    );
    let r = run(&yaml);
    assert_eq!(r.nodes.len(), 1);
    assert_eq!(r.nodes[0].instance_type.as_deref(), Some("medium"));
    let blocked = r.nodes[0].disruption_blocked.as_deref().unwrap_or_default();
    assert!(blocked.starts_with("it was launched for this workload"), "{blocked}");

    // Scaled down to one pod at 35s: the medium node is replaced by a small one right away.
    let shrunk = run(&yaml.replace(
        "  - wait: 35s\n",
        "  - wait: 35s\n  - scale: {kind: Deployment, name: web, namespace: default, replicas: 1}\n  - wait: 2m\n",
    ));
    assert_eq!(shrunk.disruptions.len(), 1, "{:?}", shrunk.nodes);
    let d = &shrunk.disruptions[0];
    assert_eq!(d.reason, "Underutilized");
    assert!(d.at_seconds.0 < 61.0, "before the new node's minute was up: {d:?}");
    assert_eq!(shrunk.nodes.len(), 1);
    assert_eq!(shrunk.nodes[0].instance_type.as_deref(), Some("small"));
}

#[test]
fn a_node_whose_launch_guard_runs_out_in_a_quiet_cluster_is_tried_by_single_node_consolidation() {
    // 66 nodes whose one pod fits nowhere else (more than one single-node pass tries), then a
    // 67th launched for a new Deployment. Its launch guard runs out with no watch event: the
    // sweep starts again over the longer list, so the new node is tried and its reason is
    // current, not the guard's countdown from a minute before.
    let yaml = format!(
        r#"name: t
{}
steps:
  - apply:
{NODE_CLASS}{}
  - apply:
{}
  - wait: 3m
  - apply:
{}
  - wait: 5m
"#,
        one_zone_cloud(&[SMALL]),
        consolidating_pool(),
        deployment("fixed", 66, "1500m", ""),
        deployment("late", 1, "1500m", ""),
    );
    let r = run(&yaml);
    assert_eq!(r.nodes.len(), 67, "nothing could go");
    let late = r.pods.iter().find(|p| p.owner == "Deployment/late").and_then(|p| p.node.clone()).unwrap();
    let node = r.nodes.iter().find(|n| n.name == late).unwrap();
    let blocked = node.disruption_blocked.as_deref().unwrap_or_default();
    assert!(!blocked.is_empty() && !blocked.starts_with("it was launched for this workload"), "{blocked}");
}

#[test]
fn without_nominations_a_daemonset_pod_that_lost_a_race_gets_its_room_back_and_is_not_replaced_for() {
    // kerf plans x (1.9 CPU) with the agent on a small node and four y (1.95 CPU) with the agent
    // on a big one. Ignoring nominations, x lands on the big node, a y takes the small node's
    // room and the small node's agent is left without room. The node was sized with the agent:
    // replacing it (Unfit) would only race again; kerf evicts the pod that took the agent's room
    // instead, and that pod gets a node of its own (the small node, left with the agent only,
    // is then empty and removed).
    let big = r#"    - name: big
      capacity: {cpu: "8", memory: 32Gi, pods: "40"}
      price: 0.40
      offerings: [{zone: us-west-2a, capacityType: on-demand, price: 0.40}]"#;
    let yaml = format!(
        r#"name: t
settings:
  kubeScheduler: {{nominatedNodeName: false}}
{}
steps:
  - apply:
{NODE_CLASS}{POOL}{}
  - apply:
{}
  - apply:
{}
  - wait: 5m
"#,
        one_zone_cloud(&[big, SMALL]),
        daemonset("agent", "\n              tolerations: [{operator: Exists}]", ""),
        deployment("x", 1, "1900m", ""),
        deployment("y", 4, "1950m", ""),
    );
    let r = run(&yaml);
    let pending: Vec<&str> = r.pods.iter().filter(|p| p.node.is_none()).map(|p| p.owner.as_str()).collect();
    assert!(pending.is_empty(), "every pod runs, the agent too: {pending:?}");
    assert_eq!(r.summary.node_claims_launched, 3, "the two planned nodes and one for the evicted pod: {:?}", r.nodes);
    assert!(
        r.disruptions.iter().all(|d| d.reason == "Empty" && d.replacements.is_empty()),
        "no replacement that would race again: {:?}",
        r.disruptions
    );
}
