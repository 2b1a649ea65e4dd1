//! Nodes present at t=0 (a cluster snapshot's): a node with a NodeClaim is kerf's, at its
//! catalog price; a price the catalog does not have is reported unknown, never guessed; pods
//! of Deployments and DaemonSets bound at t=0 are adopted by their workload, not duplicated.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use kerf_cloud::ManualClock;
use kerf_sim::scenario::parse;

fn managed(name: &str, instance_type: &str, capacity_type: Option<&str>, n: u32) -> String {
    let ct = capacity_type.map(|c| format!("karpenter.sh/capacity-type: {c}, ")).unwrap_or_default();
    format!(
        r#"
  - name: {name}
    providerID: aws:///us-west-2a/i-{n:017x}
    labels: {{{ct}karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: {instance_type}, topology.kubernetes.io/zone: us-west-2a, kubernetes.io/arch: amd64, kubernetes.io/os: linux}}
    capacity: {{cpu: "2", memory: 8Gi, pods: "29"}}
    allocatable: {{cpu: 1930m, memory: 7000Mi, pods: "29"}}
    nodeClaim:
      apiVersion: karpenter.sh/v1
      kind: NodeClaim
      metadata: {{name: default-{n}, labels: {{karpenter.sh/nodepool: default}}}}
      spec:
        nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
        requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [default]}}]
"#
    )
}

const POOL: &str = r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
              requirements: []
          disruption: {consolidateAfter: Never}
"#;

fn scenario() -> String {
    format!(
        "name: existing\nnodes:{}{}{}\n  - name: mng-1\n    labels: {{topology.kubernetes.io/zone: us-west-2a}}\n    capacity: {{cpu: \"2\", memory: 8Gi, pods: \"29\"}}\nsteps:\n  - apply:{NODE_CLASS}{POOL}",
        managed("known", "m5.large", Some("on-demand"), 7),
        managed("mystery", "x9.mega", Some("spot"), 8),
        managed("unlabelled", "m5.large", None, 9),
    )
}

#[test]
fn a_node_with_a_nodeclaim_is_managed_at_its_catalog_price_and_an_unknown_price_is_named_never_guessed() {
    let r = run(&scenario());
    let node = |name: &str| r.nodes.iter().find(|n| n.name == name).unwrap_or_else(|| panic!("node {name}"));
    let known = node("known");
    assert_eq!(known.node_pool.as_deref(), Some("default"));
    assert_eq!(known.node_claim.as_deref(), Some("default-7"));
    let price = known.price_per_hour.expect("m5.large on-demand is in the catalog");
    assert!(price > 0.0 && known.price_unknown.is_none());
    let mystery = node("mystery");
    assert_eq!((mystery.node_pool.as_deref(), mystery.price_per_hour), (Some("default"), None));
    assert_eq!(
        mystery.price_unknown.as_deref(),
        Some("instance type x9.mega is not in the catalog for region us-west-2")
    );
    assert_eq!(node("unlabelled").price_unknown.as_deref(), Some("the node has no karpenter.sh/capacity-type label"));
    let unmanaged = node("mng-1");
    assert_eq!((unmanaged.node_pool.as_deref(), unmanaged.price_per_hour), (None, None));
    assert_eq!(r.summary.cost_per_hour, price, "unknown prices are left out of the sum");
    assert_eq!((r.summary.nodes, r.summary.node_claims_launched), (4, 0));
    // The claims were registered and initialized from the nodes, as after a restart.
    assert!(r.nodes.iter().filter(|n| n.node_pool.is_some()).all(|n| n.ready));
}

#[test]
fn the_what_if_compares_the_cluster_as_it_is_with_after_and_lists_unpriced_nodes() {
    let s = parse(Path::new("t.yaml"), &scenario()).unwrap_or_else(|e| panic!("{e}"));
    let (r, _) = kerf_sim::what_if::run(&s, Vec::new(), Duration::from_secs(600), ManualClock::new())
        .unwrap_or_else(|e| panic!("{e}"));
    let c = r.comparison.expect("comparison");
    assert_eq!((c.before.nodes, c.before.unmanaged_nodes, c.before.unpriced_nodes), (4, 1, 2));
    assert_eq!(c.before.cost_per_hour, c.after.cost_per_hour, "nothing to change: no pods, consolidation off");
    let names: Vec<&str> = c.unpriced_nodes.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["mystery", "unlabelled"]);
    let text = c.to_text("10m");
    assert!(text.contains("Price unknown (left out of every sum):"), "{text}");
}

#[test]
fn bound_pods_of_a_deployment_and_a_daemonset_are_adopted_not_created_again() {
    let pod = |ns: &str, name: &str, owner: &str, kind: &str, labels: &str| {
        format!(
            r#"
      - apiVersion: v1
        kind: Pod
        metadata:
          name: {name}
          namespace: {ns}
          labels: {{{labels}}}
          ownerReferences: [{{apiVersion: apps/v1, kind: {kind}, name: {owner}, uid: "", controller: true}}]
        spec:
          nodeName: known
          containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]
"#
        )
    };
    let yaml = format!(
        "{}{}{}{}{}{}",
        scenario(),
        deployment("web", 2, "100m", ""),
        pod("default", "web-5f7c9-aaaaa", "web-5f7c9", "ReplicaSet", "app: web"),
        pod("default", "web-5f7c9-bbbbb", "web-5f7c9", "ReplicaSet", "app: web"),
        daemonset("agent", "", ""),
        pod("kube-system", "agent-zzzzz", "agent", "DaemonSet", "app: agent"),
    );
    let r = run(&yaml);
    let web: Vec<&str> = r.pods.iter().filter(|p| p.owner == "Deployment/web").map(|p| p.name.as_str()).collect();
    assert_eq!(web, ["web-5f7c9-aaaaa", "web-5f7c9-bbbbb"], "{:#?}", r.pods);
    let on_known: Vec<&str> = r
        .pods
        .iter()
        .filter(|p| p.owner == "DaemonSet/agent" && p.node.as_deref() == Some("known"))
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(on_known, ["agent-zzzzz"]);
}

#[test]
fn a_node_with_a_nodeclaim_and_no_provider_id_is_refused_naming_the_field() {
    let yaml = scenario().replacen("    providerID: aws:///us-west-2a/i-00000000000000007\n", "", 1);
    let err = parse(Path::new("t.yaml"), &yaml).expect_err("refused");
    assert_eq!(err.to_string(), "t.yaml: nodes[0].providerID: required for a node with a nodeClaim");
}

#[test]
fn a_statefulset_pod_drained_off_its_node_comes_back_under_its_name_and_runs_elsewhere() {
    let yaml = format!(
        r#"{}
      - apiVersion: v1
        kind: Pod
        metadata:
          name: db-0
          namespace: default
          labels: {{app: db}}
          ownerReferences: [{{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: "", controller: true}}]
        spec:
          nodeName: known
          containers: [{{name: c, resources: {{requests: {{cpu: 500m}}}}}}]
  - delete: {{kind: Node, name: known}}
  - wait: 3m
"#,
        scenario()
    );
    let r = run(&yaml);
    let db: Vec<_> = r.pods.iter().filter(|p| p.owner == "StatefulSet/db").collect();
    assert_eq!(db.len(), 1, "{:#?}", r.pods);
    assert_eq!((db[0].name.as_str(), db[0].phase.as_str()), ("db-0", "Running"));
    assert!(db[0].node.as_deref().is_some_and(|n| n != "known"), "{:?}", db[0]);
}
