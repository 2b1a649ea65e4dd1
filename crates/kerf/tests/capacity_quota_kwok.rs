//! CapacityQuotas end to end over the API: kubectl creates a NodePool, a CapacityQuota and a
//! workload against `kerf serve --controllers none`; a separately started `kerf controller
//! --cloud kwok` launches no more than the quota allows, says so in the pods' FailedScheduling
//! events, writes the quota's `status.used` and serves it as a metric; a raised limit lets the
//! rest launch.

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
  name: batch
spec:
  template:
    metadata:
      labels: {workload: batch}
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: ["m5.xlarge"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityQuota
metadata:
  name: batch-cpu
spec:
  selector:
    matchLabels: {workload: batch}
  limits:
    resources:
      cpu: "8"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: workers
  namespace: default
spec:
  replicas: 6
  selector:
    matchLabels: {app: workers}
  template:
    metadata:
      labels: {app: workers}
    spec:
      nodeSelector: {workload: batch}
      containers:
        - name: worker
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: 1800m}
"#
);

fn claims(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "nodeclaims", "-o", "jsonpath={.items[*].metadata.name}"])
}

fn used_cpu(s: &Served) -> String {
    kubectl_ok(s, &["get", "capacityquota", "batch-cpu", "-o", "jsonpath={.status.used.resources.cpu}"])
        .trim()
        .to_string()
}

#[test]
fn kubectl_creates_a_capacity_quota_and_the_kwok_controller_keeps_to_it() {
    let s = Served::start("quota-kwok", &["--controllers", "none", "--speed", "10"]);
    let c = Controller::start(&s, "a", &[]);
    eventually(30, "readyz", || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains("ok: leader")).then_some(())
    });
    let path = write(&s.dir, "quota.yaml", MANIFESTS);
    let out = kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    assert!(out.contains("capacityquota.autoscaling.x-k8s.io/batch-cpu created"), "{out}");

    // Six 1800m workers, two per m5.xlarge (4 vCPU): the 8 vCPU quota allows two nodes.
    eventually(90, "four workers running", || {
        let running = words(&s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "name"]);
        (running.len() == 4).then_some(())
    });
    eventually(60, "status.used", || (used_cpu(&s) == "8").then_some(()));
    assert_eq!(claims(&s).len(), 2, "no claim past the quota");
    let reconciled = kubectl_ok(
        &s,
        &[
            "get",
            "capacityquota",
            "batch-cpu",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Reconciled\")].status} {.status.conditions[?(@.type==\"Reconciled\")].reason}",
        ],
    );
    assert_eq!(reconciled.trim(), "True ReconciliationSucceeded", "upstream's condition");
    eventually(60, "FailedScheduling names the quota", || {
        let messages = kubectl_ok(
            &s,
            &["get", "events", "--field-selector", "reason=FailedScheduling", "-o", "jsonpath={.items[*].message}"],
        );
        messages.contains("CapacityQuota \"batch-cpu\" would exceed cpu: 8 limit, 8 used, needs 4").then_some(())
    });
    eventually(20, "kerf_capacity_quota_used", || {
        let m = c.metrics();
        let value =
            |series: &str| m.lines().find_map(|l| l.strip_prefix(series)).and_then(|v| v.trim().parse::<f64>().ok());
        (value(r#"kerf_capacity_quota_used{quota="batch-cpu",resource="cpu"}"#) == Some(8.0)
            && value(r#"kerf_capacity_quota_limit{quota="batch-cpu",resource="cpu"}"#) == Some(8.0))
        .then_some(())
    });

    // A bad quota is refused naming the field.
    let bad = write(
        &s.dir,
        "bad.yaml",
        "apiVersion: autoscaling.x-k8s.io/v1beta1\nkind: CapacityQuota\nmetadata: {name: bad}\n\
         spec: {limits: {resources: {cpu: \"-2\"}}}\n",
    );
    let out = kubectl(&s, &["create", "-f", bad.to_str().expect("utf-8 path")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("spec.limits.resources[cpu]"), "{err}");

    // Raised to 12: the last two workers get a node.
    kubectl_ok(
        &s,
        &[
            "patch",
            "capacityquota",
            "batch-cpu",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"limits":{"resources":{"cpu":"12"}}}}"#,
        ],
    );
    eventually(90, "six workers running", || {
        let running = words(&s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "name"]);
        (running.len() == 6).then_some(())
    });
    eventually(60, "status.used 12", || (used_cpu(&s) == "12").then_some(()));
    assert_eq!(claims(&s).len(), 3);
    assert!(c.stop().success());
}
