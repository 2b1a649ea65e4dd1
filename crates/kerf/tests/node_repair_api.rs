//! Node repair over the API: `kerf controller --cloud kwok` with `FEATURE_GATES=NodeRepair=true`
//! against `kerf serve --controllers none`. A node agent's condition written through the status
//! subresource (as the EKS node monitoring agent writes it) gets the node replaced; a node
//! annotated `karpenter.sh/do-not-repair` keeps it. With `AWS_FEATURE_GATES=RebootForRepair=true`
//! the node is rebooted instead (the kwok provider marks its kubelet gone, `kerf serve`'s
//! kubelet stand-in reports it Ready again without the failed condition) and stays.

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
    consolidateAfter: Never
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gpu
spec:
  replicas: 10
  selector:
    matchLabels: {app: gpu}
  template:
    metadata:
      labels: {app: gpu}
    spec:
      terminationGracePeriodSeconds: 0
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: gpu}}}
      containers:
        - name: gpu
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: "1"}
"#
);

fn nodes(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"])
}

fn running_pods(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"])
}

/// The node's conditions as the kubelet and a failed GPU's agent report them: Ready, and
/// `AcceleratedHardwareReady` False since long before the 10 minutes the policy tolerates.
fn fail_gpu(s: &Served, node: &str) {
    let patch = r#"{"status":{"conditions":[
        {"type":"Ready","status":"True","reason":"KubeletReady","lastTransitionTime":"2020-01-01T00:00:00Z","lastHeartbeatTime":"2020-01-01T00:00:00Z"},
        {"type":"AcceleratedHardwareReady","status":"False","reason":"NvidiaXidError","message":"XID 79","lastTransitionTime":"2020-01-01T00:00:00Z","lastHeartbeatTime":"2020-01-01T00:00:00Z"}]}}"#;
    kubectl_ok(s, &["patch", "node", node, "--subresource=status", "--type=merge", "-p", patch]);
}

#[test]
fn a_node_whose_gpu_failed_is_replaced_over_the_api_and_do_not_repair_keeps_one() {
    let s = Served::start("repair-api", &["--controllers", "none"]);
    let mut command = Controller::command(&s, &[]);
    command.env("FEATURE_GATES", "NodeRepair=true");
    let c = Controller::spawn(&s, "repair", command);
    let path = write(&s.dir, "manifests.yaml", MANIFESTS);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    // Ten nodes, one pod each: two failing GPUs are a fifth of the pool, which repair tolerates.
    eventually(60, "10 running gpu pods", || Some(running_pods(&s)).filter(|p| p.len() == 10));
    let before = nodes(&s);
    assert_eq!(before.len(), 10, "{before:?}");
    let mut it = before.iter();
    let (kept, broken) = (it.next().cloned().unwrap_or_default(), it.next().cloned().unwrap_or_default());

    // The kept node says do-not-repair; both GPUs fail.
    kubectl_ok(&s, &["annotate", "node", &kept, "karpenter.sh/do-not-repair=true"]);
    fail_gpu(&s, &kept);
    fail_gpu(&s, &broken);

    // The broken node goes; a replacement runs its pod; the annotated node stays.
    let after = eventually(90, "the broken node replaced", || {
        let now = nodes(&s);
        (!now.contains(&broken) && now.len() == 10 && running_pods(&s).len() == 10).then_some(now)
    });
    assert!(after.contains(&kept), "{after:?}");
    let events = kubectl_ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={kept}"),
            "-o",
            "jsonpath={.items[*].message}",
        ],
    );
    assert!(events.contains("do-not-repair"), "{events}");
    let metrics = c.metrics();
    assert!(metrics.contains(r#"reason="unhealthy""#), "{metrics}");
    assert!(c.stderr().contains("Unhealthy"), "{}", c.stderr());
}

#[test]
fn three_of_ten_nodes_failing_at_once_are_not_repaired_over_the_api_and_an_event_says_why() {
    let s = Served::start("repair-breaker-api", &["--controllers", "none"]);
    let controller = |name: &str| {
        let mut command = Controller::command(&s, &[]);
        command.env("FEATURE_GATES", "NodeRepair=true");
        Controller::spawn(&s, name, command)
    };
    let c = controller("repair-breaker");
    let path = write(&s.dir, "manifests.yaml", MANIFESTS);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    eventually(60, "10 running gpu pods", || Some(running_pods(&s)).filter(|p| p.len() == 10));
    let before = nodes(&s);
    assert_eq!(before.len(), 10, "{before:?}");
    // Three GPUs fail at once (while the controller is down, so it finds them together): more
    // than the fifth of the pool repair tolerates.
    c.stop();
    for n in before.iter().take(3) {
        fail_gpu(&s, n);
    }
    let _c = controller("repair-breaker-2");
    let events = eventually(60, "a NodeRepairBlocked event", || {
        let e =
            kubectl_ok(&s, &["get", "events", "-o", r#"jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}"#]);
        let blocked: Vec<&str> = e.lines().filter(|l| l.starts_with("NodeRepairBlocked: ")).collect();
        (!blocked.is_empty()).then(|| blocked.join("\n"))
    });
    assert!(events.contains("unhealthy"), "{events}");
    // Several more passes: nothing is replaced, no pod moves.
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert_eq!(nodes(&s), before);
    assert_eq!(running_pods(&s).len(), 10);
}

/// The NodeClaims' names.
fn claims(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "nodeclaims", "-o", "jsonpath={.items[*].metadata.name}"])
}

#[test]
fn a_node_whose_gpu_failed_is_rebooted_over_the_api_and_stays_with_its_pods() {
    let s = Served::start("reboot-api", &["--controllers", "none"]);
    let mut command = Controller::command(&s, &[]);
    command.env("FEATURE_GATES", "NodeRepair=true");
    command.env("AWS_FEATURE_GATES", "RebootForRepair=true");
    let c = Controller::spawn(&s, "reboot", command);
    let path = write(&s.dir, "manifests.yaml", &MANIFESTS.replace("replicas: 10", "replicas: 5"));
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    let pods = eventually(60, "5 running gpu pods", || Some(running_pods(&s)).filter(|p| p.len() == 5));
    let (before, claims_before) = (nodes(&s), claims(&s));
    assert_eq!(before.len(), 5, "{before:?}");
    let broken = before.iter().next().cloned().unwrap_or_default();
    fail_gpu(&s, &broken);

    // The claim records the reboot; the node comes back Ready without the failed condition.
    let annotation = r"jsonpath={.metadata.annotations.kerf\.sh/rebooted-at}";
    eventually(60, "the reboot recorded on the claim", || {
        Some(kubectl_ok(&s, &["get", "nodeclaim", &broken, "-o", annotation])).filter(|a| !a.trim().is_empty())
    });
    let conditions = "jsonpath={range .status.conditions[*]}{.type}={.status} {end}";
    eventually(30, "the node Ready again, its GPU condition gone", || {
        let now = kubectl_ok(&s, &["get", "node", &broken, "-o", conditions]);
        (now.trim() == "Ready=True").then_some(())
    });
    // Nothing replaced it: the same nodes, claims and pods, a while later too.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(nodes(&s), before);
    assert_eq!(claims(&s), claims_before);
    eventually(30, "the same 5 pods running", || (running_pods(&s) == pods).then_some(()));
    let events = kubectl_ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={broken}"),
            "-o",
            "jsonpath={.items[*].reason}",
        ],
    );
    assert!(events.contains("RebootIssued"), "{events}");
    assert!(!events.contains("DisruptionTerminating"), "{events}");
    let metrics = c.metrics();
    assert!(
        metrics.contains(
            r#"kerf_nodeclaims_unhealthy_rebooted_total{condition="accelerated_hardware_ready",nodepool="default""#
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("karpenter_nodeclaims_unhealthy_disrupted_total{"), "{metrics}");
    assert!(c.stderr().contains("rebooting node for repair"), "{}", c.stderr());
}
