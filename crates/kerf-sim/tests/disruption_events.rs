//! The disruption controller's Kubernetes events, as a cluster would show them.

use std::path::Path;

use kerf_sim::driver::simulate;
use kerf_sim::scenario::parse;

const SCENARIO: &str = r#"
name: events
cloud:
  region: us-west-2
  zones: [us-west-2a]
  launchLatency: 30s
  instanceTypes:
    - {name: small, capacity: {cpu: "2", memory: 8Gi, pods: "110"}, price: 0.10}
    - {name: large, capacity: {cpu: "8", memory: 32Gi, pods: "110"}, price: 0.40}
steps:
  - apply:
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          disruption: {consolidateAfter: 0s, budgets: [{nodes: "100%"}]}
      - apiVersion: karpenter.k8s.aws/v1
        kind: EC2NodeClass
        metadata: {name: default}
        spec:
          role: r
          amiSelectorTerms: [{alias: al2023@latest}]
          subnetSelectorTerms: [{tags: {a: b}}]
          securityGroupSelectorTerms: [{tags: {a: b}}]
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web}
        spec:
          replicas: 6
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers: [{name: c, image: pause, resources: {requests: {cpu: "1"}}}]
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {name: pinned}
        spec:
          replicas: 1
          selector: {matchLabels: {app: pinned}}
          template:
            metadata: {labels: {app: pinned}, annotations: {karpenter.sh/do-not-disrupt: "true"}}
            spec:
              containers: [{name: c, image: pause, resources: {requests: {cpu: "1"}}}]
  - wait: 1m
  - scale: {kind: Deployment, name: web, namespace: default, replicas: 0}
  - wait: 2m
"#;

#[test]
fn blocked_nodes_get_a_disruption_blocked_event_and_disruptions_are_announced() {
    let scenario = parse(Path::new("events.yaml"), SCENARIO).unwrap();
    let (report, sim) = simulate(&scenario).unwrap();
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
    let text = SCENARIO.replace("replicas: 1\n", "replicas: 0\n").replace("replicas: 0}", "replicas: 1}");
    let scenario = parse(Path::new("events.yaml"), &text).unwrap();
    let (report, sim) = simulate(&scenario).unwrap();
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
