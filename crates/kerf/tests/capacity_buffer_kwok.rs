//! A CapacityBuffer end to end over the API: kubectl creates a PodTemplate and a buffer against
//! `kerf serve --controllers none`, a separately started `kerf controller --cloud kwok` launches
//! Nodes for the buffer's room (no Pod is ever created for it) and writes the buffer's status;
//! shrinking the buffer lets consolidation take the nodes it no longer needs.

#[macro_use]
mod common;

use std::collections::BTreeSet;

use common::controller::{Controller, words};
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
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 2s
    budgets:
      - nodes: "100%"
---
apiVersion: v1
kind: PodTemplate
metadata:
  name: floor-chunk
  namespace: default
template:
  metadata:
    labels: {floor: default}
  spec:
    containers:
      - name: chunk
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
    affinity:
      podAntiAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchLabels: {floor: default}
            topologyKey: kubernetes.io/hostname
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata:
  name: floor
  namespace: default
spec:
  podTemplateRef:
    name: floor-chunk
  replicas: 3
"#
);

fn claims(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "nodeclaims", "-o", "jsonpath={.items[*].metadata.name}"])
}

fn condition(s: &Served, type_: &str) -> String {
    kubectl_ok(
        s,
        &[
            "get",
            "capacitybuffer",
            "floor",
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}"),
        ],
    )
}

#[test]
fn kubectl_creates_a_capacity_buffer_and_the_kwok_controller_launches_its_nodes_and_writes_its_status() {
    let s = Served::start("buffer-kwok", &["--controllers", "none", "--speed", "10"]);
    let c = Controller::start(&s, "a", &[]);
    eventually(30, "readyz", || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains("ok: leader")).then_some(())
    });
    let path = write(&s.dir, "buffer.yaml", MANIFESTS);
    let out = kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    assert!(out.contains("capacitybuffer.autoscaling.x-k8s.io/floor created"), "{out}");

    // Three nodes, one per chunk (hostname anti-affinity), and the room on them: Provisioning.
    eventually(60, "three registered nodes", || {
        let nodes = words(&s, &["get", "nodes", "-l", "karpenter.sh/registered=true", "-o", "name"]);
        (nodes.len() == 3).then_some(())
    });
    eventually(60, "Provisioning=True", || (condition(&s, "Provisioning") == "True").then_some(()));
    assert_eq!(condition(&s, "ReadyForProvisioning"), "True");
    assert_eq!(kubectl_ok(&s, &["get", "cb", "floor", "-o", "jsonpath={.status.replicas}"]), "3");
    assert_eq!(kubectl_ok(&s, &["get", "cb", "floor", "-o", "jsonpath={.status.podTemplateRef.name}"]), "floor-chunk");
    let table = kubectl_ok(&s, &["get", "capacitybuffers"]);
    assert!(table.contains("floor") && table.contains("buffer.x-k8s.io/active-capacity"), "{table}");
    // The room is virtual: no Pod object exists for it.
    assert_eq!(kubectl_ok(&s, &["get", "pods", "-A", "-o", "name"]).trim(), "");
    assert_eq!(claims(&s).len(), 3);

    // A smaller buffer leaves two nodes holding nothing: they go.
    kubectl_ok(&s, &["patch", "cb", "floor", "--type", "merge", "-p", r#"{"spec":{"replicas":1}}"#]);
    eventually(90, "one nodeclaim left", || (claims(&s).len() == 1).then_some(()));
    eventually(30, "status replicas 1", || {
        (kubectl_ok(&s, &["get", "cb", "floor", "-o", "jsonpath={.status.replicas}"]) == "1").then_some(())
    });
    assert_eq!(condition(&s, "Provisioning"), "True");
    assert!(c.stop().success());
}
