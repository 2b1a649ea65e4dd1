//! ProvisioningRequests end to end over the API: kubectl creates PodTemplates and requests
//! against `kerf serve --controllers none`, a separately started `kerf controller --cloud kwok`
//! answers them with upstream's conditions: an atomic request launches every NodeClaim its plan
//! needs, one over the NodePool's limit fails launching nothing, a check-capacity request finds
//! the booked room taken, and the job's pods use the booking until it is consumed.

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
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: ["m5.xlarge"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  limits:
    cpu: "40"
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 2s
---
apiVersion: v1
kind: PodTemplate
metadata:
  name: worker
  namespace: default
template:
  metadata:
    labels: {app: worker}
  spec:
    containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 1800m}
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata:
  name: job
  namespace: default
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
  podSets:
    - podTemplateRef: {name: worker}
      count: 6
"#
);

const TOO_BIG: &str = r#"apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata:
  name: too-big
  namespace: default
spec:
  provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
  podSets:
    - podTemplateRef: {name: worker}
      count: 32
---
apiVersion: autoscaling.x-k8s.io/v1
kind: ProvisioningRequest
metadata:
  name: probe
  namespace: default
spec:
  provisioningClassName: check-capacity.autoscaling.x-k8s.io
  podSets:
    - podTemplateRef: {name: worker}
      count: 1
"#;

const JOB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: job
  namespace: default
spec:
  replicas: 6
  selector:
    matchLabels: {app: worker}
  template:
    metadata:
      labels: {app: worker}
      annotations:
        autoscaling.x-k8s.io/consume-provisioning-request: job
    spec:
      containers:
        - name: worker
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: 1800m}
"#;

fn claims(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "nodeclaims", "-o", "jsonpath={.items[*].metadata.name}"])
}

/// `status reason` of a request's condition (empty when not set).
fn condition(s: &Served, name: &str, type_: &str) -> String {
    kubectl_ok(
        s,
        &[
            "get",
            "provisioningrequest",
            name,
            "-o",
            &format!(
                "jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}} {{.status.conditions[?(@.type==\"{type_}\")].reason}}"
            ),
        ],
    )
    .trim()
    .to_string()
}

#[test]
fn kubectl_creates_provisioning_requests_and_the_kwok_controller_answers_them_as_upstream() {
    let s = Served::start("provreq-kwok", &["--controllers", "none", "--speed", "10"]);
    let c = Controller::start(&s, "a", &[]);
    eventually(30, "readyz", || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains("ok: leader")).then_some(())
    });
    let path = write(&s.dir, "request.yaml", MANIFESTS);
    let out = kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    assert!(out.contains("provisioningrequest.autoscaling.x-k8s.io/job created"), "{out}");

    // Six 1800m workers, two per m5.xlarge: three NodeClaims, then Provisioned.
    eventually(60, "Provisioned=True", || {
        (condition(&s, "job", "Provisioned") == "True CapacityIsProvisioned").then_some(())
    });
    assert_eq!(condition(&s, "job", "Accepted"), "True Accepted");
    assert_eq!(claims(&s).len(), 3);
    let table = kubectl_ok(&s, &["get", "provreq"]);
    assert!(table.contains("best-effort-atomic-scale-up.autoscaling.x-k8s.io"), "{table}");

    // 32 more would pass the limit of 40 CPU: Failed, nothing launched. The booked room leaves
    // none for the check-capacity probe.
    let path = write(&s.dir, "more.yaml", TOO_BIG);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    eventually(60, "too-big Failed", || {
        (condition(&s, "too-big", "Failed") == "True CapacityIsNotFound").then_some(())
    });
    let message = kubectl_ok(
        &s,
        &["get", "provreq", "too-big", "-o", "jsonpath={.status.conditions[?(@.type==\"Failed\")].message}"],
    );
    assert!(message.starts_with("pod set 0 (PodTemplate worker)") && message.contains("limit"), "{message}");
    eventually(60, "probe answered", || {
        (condition(&s, "probe", "Provisioned") == "False CapacityIsNotFound").then_some(())
    });
    assert_eq!(claims(&s).len(), 3, "neither the failed plan nor check-capacity launches");

    // The job's pods run on the booked nodes; the booking ends as consumed.
    let path = write(&s.dir, "job.yaml", JOB);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    eventually(90, "six workers running", || {
        let running = words(&s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "name"]);
        (running.len() == 6).then_some(())
    });
    eventually(60, "BookingExpired=True", || {
        (condition(&s, "job", "BookingExpired") == "True CapacityBookingConsumed").then_some(())
    });
    assert_eq!(claims(&s).len(), 3, "the workers used the booked room");

    // The gauge by class and state.
    let atomic = r#"class="best-effort-atomic-scale-up.autoscaling.x-k8s.io""#;
    eventually(20, "kerf_provisioning_requests", || {
        let m = c.metrics();
        let count = |state: &str| {
            m.lines()
                .find(|l| l.starts_with("kerf_provisioning_requests{") && l.contains(atomic) && l.contains(state))
                .and_then(|l| l.rsplit(' ').next())
                .map(str::to_string)
        };
        (count(r#"state="BookingExpired""#).as_deref() == Some("1")
            && count(r#"state="Failed""#).as_deref() == Some("1"))
        .then_some(())
    });
    assert!(c.stop().success());
}
