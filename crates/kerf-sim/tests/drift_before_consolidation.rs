//! Drift comes before consolidation (Karpenter's order of methods): a node class change that
//! drifts nodes is acted on at once, not after a consolidation decision that happens to be
//! waiting out its 15 s validation.

mod common;

use common::{NODE_CLASS, deployment, run};

const POOL: &str = r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              requirements:
                - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}
                - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          disruption:
            consolidationPolicy: WhenEmptyOrUnderutilized
            consolidateAfter: 0s
            budgets: [{nodes: "100%"}]
"#;

#[test]
fn a_drift_is_decided_while_a_consolidation_waits_out_its_validation() {
    // Four `solo` pods of 1.5 CPU keep off each other's node: four m5.xlarge nodes, each with a
    // `web` pod of 1.5 CPU beside its `solo` pod. With `solo` deleted each node is 40% used and
    // two nodes' pods fit on the other two: consolidation decides to delete two (validated
    // 15 s later). Five seconds into that wait the node class's AMI changes: every node drifts.
    let solo = r#"
              terminationGracePeriodSeconds: 0
              affinity:
                podAntiAffinity:
                  requiredDuringSchedulingIgnoredDuringExecution:
                    - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: solo}}}"#;
    let yaml = format!(
        r#"name: drift-first
cloud: {{region: us-west-2, launchLatency: 30s}}
steps:
  - apply:
{NODE_CLASS}{POOL}{}{}
  - wait: 3m
  - delete: {{kind: Deployment, name: solo, namespace: default}}
  - wait: 5s
  - patch: {{kind: EC2NodeClass, name: default, merge: {{spec: {{amiSelectorTerms: [{{alias: bottlerocket@latest}}]}}}}}}
  - wait: 1m
"#,
        deployment("solo", 4, "1500m", solo),
        deployment("web", 4, "1500m", "")
    );
    let r = run(&yaml);
    let at = |reason: &str| {
        r.disruptions.iter().filter(|d| d.reason == reason).map(|d| d.at_seconds.0).fold(f64::INFINITY, f64::min)
    };
    let (shrunk, changed) = (180.0, 185.0);
    let drifted = at("Drifted");
    assert!(drifted.is_finite(), "no drift: {:#?}", r.disruptions);
    // The consolidation decided on the shrink would have been carried out at about
    // shrunk + 15 s, the drift after it; drift goes first, within a couple of seconds of the change.
    assert!(drifted >= changed && drifted < shrunk + 10.0, "first drift at {drifted}s: {:#?}", r.disruptions);
    assert!(
        r.disruptions.iter().all(|d| d.reason == "Drifted" || d.at_seconds.0 > drifted),
        "something went before the drift: {:#?}",
        r.disruptions
    );
}
