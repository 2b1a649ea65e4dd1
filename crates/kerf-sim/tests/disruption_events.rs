//! The disruption controller's Kubernetes events, as a cluster would show them.

mod common;

use common::{NODE_CLASS, deployment, run_keeping};

/// One zone, a small and a large type; `web` runs 6 one-CPU pods beside `pinned` (its pods
/// marked do-not-disrupt), then is scaled to `web_after`.
fn scenario(pinned: u32, web_after: u32) -> String {
    let web = deployment("web", 6, "1", "");
    format!(
        r#"
name: events
cloud:
  region: us-west-2
  zones: [us-west-2a]
  launchLatency: 30s
  instanceTypes:
    - {{name: small, capacity: {{cpu: "2", memory: 8Gi, pods: "110"}}, price: 0.10}}
    - {{name: large, capacity: {{cpu: "8", memory: 32Gi, pods: "110"}}, price: 0.40}}
steps:
  - apply:
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {{name: default}}
        spec:
          template:
            spec:
              requirements: [{{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}]
              nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
          disruption: {{consolidateAfter: 0s, budgets: [{{nodes: "100%"}}]}}
{NODE_CLASS}{web}
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: pinned}}
        spec:
          replicas: {pinned}
          selector: {{matchLabels: {{app: pinned}}}}
          template:
            metadata: {{labels: {{app: pinned}}, annotations: {{karpenter.sh/do-not-disrupt: "true"}}}}
            spec:
              containers: [{{name: c, image: pause, resources: {{requests: {{cpu: "1"}}}}}}]
  - wait: 1m
  - scale: {{kind: Deployment, name: web, namespace: default, replicas: {web_after}}}
  - wait: 2m
"#
    )
}

#[test]
fn blocked_nodes_get_a_disruption_blocked_event_and_disruptions_are_announced() {
    let (report, sim) = run_keeping(&scenario(1, 0));
    let events = sim.cluster().events();
    let node = &report.nodes[0].name;
    let blocked: Vec<_> =
        events.iter().filter(|e| e.record.reason == "DisruptionBlocked" && &e.record.name == node).collect();
    assert!(!blocked.is_empty(), "{events:#?}");
    assert_eq!(blocked[0].record.kind, "Node");
    assert!(blocked[0].record.message.starts_with("Cannot disrupt Node: pod default/pinned-"), "{:?}", blocked[0]);
    assert!(blocked[0].record.message.contains("karpenter.sh/do-not-disrupt"));
    // Nothing is disrupted: the only node holds the do-not-disrupt pod.
    assert!(report.disruptions.is_empty());
    assert!(!events.iter().any(|e| e.record.reason == "DisruptionTerminating"));
    assert_eq!(
        report.nodes[0].disruption_blocked.as_deref(),
        Some(&blocked.last().unwrap().record.message["Cannot disrupt Node: ".len()..])
    );
}

#[test]
fn a_replacement_is_announced_launching_and_its_node_terminating() {
    let (report, sim) = run_keeping(&scenario(0, 1));
    let events = sim.cluster().events();
    assert_eq!(report.disruptions.len(), 1, "{:#?}", report.disruptions);
    let d = &report.disruptions[0];
    assert_eq!(d.reason, "Underutilized");
    let launching: Vec<_> = events.iter().filter(|e| e.record.reason == "DisruptionLaunching").collect();
    assert_eq!(launching.len(), 1);
    assert_eq!(launching[0].record.kind, "NodeClaim");
    assert_eq!(launching[0].record.name, d.replacements[0]);
    assert_eq!(launching[0].record.message, "Launching NodeClaim: Underutilized/Replace");
    let terminating: Vec<_> = events.iter().filter(|e| e.record.reason == "DisruptionTerminating").collect();
    assert_eq!(terminating.len(), 1);
    assert_eq!(terminating[0].record.name, d.node.clone().unwrap());
    assert!(
        terminating[0].record.message.starts_with("Disrupting Node: Underutilized/Replace: "),
        "{:?}",
        terminating[0]
    );
    assert!(events.iter().any(|e| e.record.reason == "DisruptionWaitingReadiness"));
}
