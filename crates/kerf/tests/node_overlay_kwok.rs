//! NodeOverlays end to end over the API: kubectl creates a NodePool that may use c5 or m5 and a
//! Deployment against `kerf serve --controllers none`; a separately started `kerf controller
//! --cloud kwok` launches c5 (cheaper per CPU at list prices). An m5 savings plan applied with
//! kubectl makes the controller replace it with m5 and mark the overlay Ready; a second
//! overlay of the same weight that sets another m5 price reads Ready=False, reason Conflict.

#[macro_use]
mod common;

use std::collections::BTreeSet;

use common::controller::{Controller, words};
use common::*;

const POOL: &str = concat!(
    demo_node_class!(),
    r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: general
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["c5", "m5"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 2s
    budgets:
      - nodes: "100%"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: default
spec:
  replicas: 3
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
        - name: api
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: "1", memory: 1Gi}
"#
);

const PLAN: &str = r#"apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata:
  name: m5-savings-plan
spec:
  weight: 10
  requirements:
    - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["m5"]}
  priceAdjustment: "-30%"
"#;

const RIVAL: &str = r#"apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata:
  name: negotiated-m5
spec:
  weight: 10
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: ["m5.large", "m5.xlarge"]}
  price: "0.01"
"#;

/// The instance families of the registered nodes.
fn families(s: &Served) -> BTreeSet<String> {
    words(
        s,
        &[
            "get",
            "nodes",
            "-l",
            "karpenter.sh/registered=true",
            "-o",
            "jsonpath={.items[*].metadata.labels.karpenter\\.k8s\\.aws/instance-family}",
        ],
    )
}

fn condition(s: &Served, overlay: &str, type_: &str, field: &str) -> String {
    kubectl_ok(
        s,
        &[
            "get",
            "nodeoverlay",
            overlay,
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"{type_}\")].{field}}}"),
        ],
    )
}

#[test]
fn kubectl_applies_a_savings_plan_overlay_and_the_kwok_controller_moves_the_pods_to_the_family_it_discounts() {
    let s = Served::start("overlay-kwok", &["--controllers", "none", "--speed", "10"]);
    let c = Controller::start(&s, "a", &[]);
    eventually(30, "readyz", || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains("ok: leader")).then_some(())
    });
    let pool = write(&s.dir, "pool.yaml", POOL);
    kubectl_ok(&s, &["create", "-f", pool.to_str().expect("utf-8 path")]);
    eventually(60, "a c5 node", || (families(&s) == BTreeSet::from(["c5".to_string()])).then_some(()));

    let plan = write(&s.dir, "plan.yaml", PLAN);
    let out = kubectl_ok(&s, &["apply", "-f", plan.to_str().expect("utf-8 path")]);
    assert!(out.contains("nodeoverlay.karpenter.sh/m5-savings-plan created"), "{out}");
    eventually(30, "Ready=True", || (condition(&s, "m5-savings-plan", "Ready", "status") == "True").then_some(()));
    assert_eq!(condition(&s, "m5-savings-plan", "ValidationSucceeded", "status"), "True");
    eventually(120, "only m5 nodes", || (families(&s) == BTreeSet::from(["m5".to_string()])).then_some(()));
    let pending = kubectl_ok(&s, &["get", "pods", "--field-selector", "status.phase=Pending", "-o", "name"]);
    assert_eq!(pending.trim(), "", "every pod runs on the m5 replacement");

    // A second overlay of the same weight that prices m5 otherwise conflicts and is not applied.
    let rival = write(&s.dir, "rival.yaml", RIVAL);
    kubectl_ok(&s, &["apply", "-f", rival.to_str().expect("utf-8 path")]);
    eventually(30, "the rival in conflict", || {
        (condition(&s, "negotiated-m5", "ValidationSucceeded", "reason") == "Conflict").then_some(())
    });
    assert_eq!(condition(&s, "negotiated-m5", "Ready", "status"), "False");
    let message = condition(&s, "negotiated-m5", "ValidationSucceeded", "message");
    assert!(message.contains("m5-savings-plan"), "{message}");
    // The API server refuses an overlay its CRD refuses, naming the object, field and problem.
    let bad = write(
        &s.dir,
        "bad.yaml",
        &PLAN
            .replace("m5-savings-plan", "both-prices")
            .replace("priceAdjustment: \"-30%\"", "price: \"1\"\n  priceAdjustment: \"-30%\""),
    );
    let out = kubectl(&s, &["apply", "-f", bad.to_str().expect("utf-8 path")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("both-prices") && err.contains("cannot set both"), "{err}");
    let table = kubectl_ok(&s, &["get", "overlays"]);
    assert!(table.contains("m5-savings-plan") && table.contains("negotiated-m5"), "{table}");
    assert!(c.stop().success());
}
