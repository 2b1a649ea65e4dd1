//! `PodDeletionCostManagement` over the API: `kerf controller --cloud kwok` with
//! `FEATURE_GATES=PodDeletionCostManagement=true` against `kerf serve --controllers none`. kerf
//! writes `controller.kubernetes.io/pod-deletion-cost` (marked `kerf.sh/pod-deletion-cost`) on
//! the web pods of the node it would disrupt first; `kubectl scale` down by one node's worth of
//! pods then empties that node, and emptiness removes it.

#[macro_use]
mod common;

use std::collections::BTreeMap;

use common::controller::Controller;
use common::*;

const MANIFESTS: &str = concat!(
    demo_node_class!(),
    r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: ["c6a.xlarge"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 5s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 12
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: web
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: 900m}
"#
);

/// Running web pods: name → (node, kerf's pod-deletion-cost if any).
fn web_pods(s: &Served) -> BTreeMap<String, (String, Option<i64>)> {
    let out = kubectl_ok(
        s,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector",
            "status.phase=Running",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.metadata.annotations.kerf\.sh/pod-deletion-cost}{"\n"}{end}"#,
        ],
    );
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (name, node) = (w.next()?, w.next()?);
            Some((name.to_string(), (node.to_string(), w.next().and_then(|v| v.parse().ok()))))
        })
        .collect()
}

#[test]
fn a_scale_down_over_the_api_empties_the_node_kerf_ranked_first() {
    let s = Served::start("deletion-cost-api", &["--controllers", "none"]);
    let mut command = Controller::command(&s, &[]);
    command.env("FEATURE_GATES", "PodDeletionCostManagement=true");
    let _c = Controller::spawn(&s, "deletion-cost", command);
    let path = write(&s.dir, "manifests.yaml", MANIFESTS);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    // Twelve pods, four to a node; kerf ranks the three nodes and writes their pods' costs.
    let ranked = eventually(90, "12 running web pods, every one with kerf's cost", || {
        let pods = web_pods(&s);
        (pods.len() == 12 && pods.values().all(|(_, c)| c.is_some())).then_some(pods)
    });
    let mut by_node: BTreeMap<String, (i64, usize)> = BTreeMap::new();
    for (node, cost) in ranked.values() {
        let e = by_node.entry(node.clone()).or_insert((i64::MAX, 0));
        e.0 = e.0.min(cost.unwrap_or(i64::MAX));
        e.1 += 1;
    }
    assert_eq!(by_node.len(), 3, "{by_node:?}");
    let (first, (cost, pods)) = by_node.iter().min_by_key(|(_, (c, _))| *c).map(|(n, v)| (n.clone(), *v)).unwrap();
    assert_eq!((cost, pods), (-50, 4), "{by_node:?}");

    // Down by one node's worth: the ReplicaSet deletes the lowest-cost pods, all on `first`.
    kubectl_ok(&s, &["scale", "deployment", "web", "--replicas=8"]);
    let after = eventually(60, "8 running web pods", || Some(web_pods(&s)).filter(|p| p.len() == 8));
    assert!(after.values().all(|(node, _)| *node != first), "{after:?}");
    // Emptiness removes it; no pod was evicted (the eight are the ones that ran before).
    eventually(90, "the emptied node gone", || {
        let nodes = kubectl_ok(&s, &["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"]);
        (!nodes.split_whitespace().any(|n| n == first)).then_some(())
    });
    let now = web_pods(&s);
    assert_eq!(now.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
}
