//! CapacityBuffers through the simulator: a buffer sized as a percentage of a Deployment follows
//! the Deployment as it scales, and a buffer with kerf's active-schedule window keeps room only
//! inside the window (virtual time placed on the wall clock by the scenario's `start`).

mod common;

use std::path::Path;

use kerf_cloud::ManualClock;
use kerf_sim::Report;
use kerf_sim::report_buffers::BufferReport;
use kerf_sim::scenario::parse;
use kerf_sim::steps::simulation_for;

const POOL: &str = r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              requirements:
                - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
                - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s}
"#;

/// The report after each step of the scenario.
fn reports_per_step(yaml: &str) -> Vec<Report> {
    let scenario = parse(Path::new("test.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = simulation_for(&scenario, ManualClock::new()).unwrap_or_else(|e| panic!("{e}"));
    sim.add_nodes(&scenario.nodes).unwrap_or_else(|e| panic!("{e}"));
    sim.settle(sim.now()).unwrap_or_else(|e| panic!("{e}"));
    scenario
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            sim.step(i, step).unwrap_or_else(|e| panic!("{e}"));
            sim.report()
        })
        .collect()
}

fn only_buffer(r: &Report) -> &BufferReport {
    assert_eq!(r.buffers.len(), 1, "{:?}", r.buffers);
    &r.buffers[0]
}

#[test]
fn a_percentage_buffer_follows_its_deployment_as_it_scales() {
    let yaml = format!(
        r#"
name: percentage
steps:
  - apply:
{}{POOL}{}
      - apiVersion: autoscaling.x-k8s.io/v1beta1
        kind: CapacityBuffer
        metadata: {{name: web-headroom, namespace: default}}
        spec:
          scalableRef: {{apiGroup: apps, kind: Deployment, name: web}}
          percentage: 20
  - wait: 2m
  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 30}}
  - wait: 3m
"#,
        common::NODE_CLASS,
        common::deployment("web", 10, "500m", "")
    );
    let reports = reports_per_step(&yaml);
    let b = only_buffer(&reports[1]);
    assert_eq!((b.replicas, b.placed), (2, 2), "20% of 10 replicas: {b:?}");
    assert_eq!(b.provisioning.as_deref(), Some("True"));
    let b = only_buffer(&reports[3]);
    assert_eq!((b.replicas, b.placed), (6, 6), "20% of 30 replicas: {b:?}");
    assert_eq!(b.provisioning.as_deref(), Some("True"));
    let end = &reports[3];
    assert_eq!(end.summary.pods_running, 30, "the workload's own pods all run beside the room");
    // The room is real capacity: the fleet holds the 30 pods and 6 more of their shape.
    let cpu: f64 = end.nodes.iter().map(|n| kerf_api::Quantity::parse(&n.allocatable["cpu"]).unwrap().as_f64()).sum();
    assert!(cpu >= 36.0 * 0.5, "allocatable {cpu} CPUs for 30 + 6 pods of 500m");
}

#[test]
fn a_scheduled_buffer_keeps_room_only_inside_its_active_window() {
    let yaml = format!(
        r#"
name: business-hours
start: "2025-01-06T07:00:00Z"
steps:
  - apply:
{}{POOL}
      - apiVersion: v1
        kind: PodTemplate
        metadata: {{name: chunk, namespace: default}}
        template:
          spec:
            containers:
              - name: c
                image: i
                resources: {{requests: {{cpu: "1"}}}}
      - apiVersion: autoscaling.x-k8s.io/v1beta1
        kind: CapacityBuffer
        metadata:
          name: business-hours
          namespace: default
          annotations:
            kerf.dev/active-schedule: "0 8 * * mon-fri"
            kerf.dev/active-duration: 2h
        spec:
          podTemplateRef: {{name: chunk}}
          replicas: 4
  - wait: 30m
  - wait: 45m
  - wait: 2h
"#,
        common::NODE_CLASS
    );
    let reports = reports_per_step(&yaml);
    // 07:30: before the window, no room and no node.
    let b = only_buffer(&reports[1]);
    assert_eq!((b.replicas, b.placed), (4, 0), "{b:?}");
    assert_eq!(b.provisioning.as_deref(), Some("False"));
    assert!(b.message.as_deref().unwrap_or_default().contains("outside its active window"), "{b:?}");
    assert_eq!(reports[1].nodes.len(), 0);
    // 08:15: the window opened at 08:00 and the room was launched for it.
    let b = only_buffer(&reports[2]);
    assert_eq!((b.replicas, b.placed), (4, 4), "{b:?}");
    assert_eq!(b.provisioning.as_deref(), Some("True"));
    let opened = b.provisioning_since_seconds.map(|s| s.0).unwrap_or_default();
    assert!((3600.0..3600.0 + 90.0).contains(&opened), "room in place {opened}s after 07:00");
    assert!(!reports[2].nodes.is_empty());
    // 10:15: the window closed at 10:00; the room is released and its nodes go.
    let b = only_buffer(&reports[3]);
    assert_eq!(b.placed, 0, "{b:?}");
    assert_eq!(b.provisioning.as_deref(), Some("False"));
    assert_eq!(reports[3].nodes.len(), 0, "the empty nodes were removed once the window closed");
    assert!(reports[3].disruptions.iter().all(|d| d.reason == "Empty" && d.at_seconds.0 >= 3.0 * 3600.0));
}

#[test]
fn a_snapshot_writes_buffers_and_the_templates_they_use_and_the_written_scenario_keeps_their_room() {
    use k8s_openapi::api::core::v1::PodTemplate;
    use kerf_api::{CapacityBuffer, EC2NodeClass, NodePool};
    use kerf_sim::scenario_writer::{ClusterObjects, write};

    // The scenario snippets above as objects (their list indentation taken off).
    fn object<T: serde::de::DeserializeOwned>(snippet: &str) -> T {
        let yaml = snippet.lines().map(|l| l.get(8..).unwrap_or("")).collect::<Vec<_>>().join("\n");
        serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }
    let pool: NodePool = object(POOL);
    let node_class: EC2NodeClass = object(common::NODE_CLASS);
    let template = |name: &str| -> PodTemplate {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "template": {"spec": {"containers": [{
                "name": "room", "image": "registry.example/secret-image:1",
                "env": [{"name": "TOKEN", "value": "do-not-copy"}],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
            }]}}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let buffer: CapacityBuffer = serde_json::from_value(serde_json::json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "headroom", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 2},
        "status": {"replicas": 2}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let objects = ClusterObjects {
        node_pools: vec![pool],
        node_classes: vec![node_class],
        pod_templates: vec![template("chunk"), template("unused")],
        capacity_buffers: vec![buffer],
        ..ClusterObjects::default()
    };
    let (text, _) = write("buffers", kerf_cloud::Timestamp::UNIX_EPOCH, &objects).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("kind: CapacityBuffer") && text.contains("name: chunk"), "{text}");
    for absent in ["unused", "do-not-copy", "secret-image", "status"] {
        assert!(!text.contains(absent), "the snapshot holds {absent:?}:\n{text}");
    }
    // The written scenario runs: two minutes later the buffer's two chunks of room exist.
    let reports = reports_per_step(&format!("{text}- wait: 2m\n"));
    assert_eq!(reports.len(), 2, "the snapshot's apply step and the wait:\n{text}");
    let last = reports.last().unwrap_or_else(|| panic!("no step ran"));
    let b = only_buffer(last);
    assert_eq!((b.replicas, b.placed), (2, 2), "{b:?}");
}

/// A floor of three nodes under `default` (one tiny virtual pod per node, hostname
/// anti-affinity), the pool's nodes expiring after `expire`; `extra` steps follow.
fn floor_scenario(expire: &str, extra: &str) -> String {
    format!(
        r#"
name: floor-replaced
cloud: {{region: us-west-2, launchLatency: 30s}}
steps:
  - apply:
{}
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {{name: default}}
        spec:
          template:
            spec:
              expireAfter: {expire}
              requirements:
                - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
                - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}}
              nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
          disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 30s, budgets: [{{nodes: "1"}}]}}
      - apiVersion: v1
        kind: PodTemplate
        metadata: {{name: floor-chunk, namespace: default}}
        template:
          metadata: {{labels: {{floor: default}}}}
          spec:
            containers: [{{name: c, image: i, resources: {{requests: {{cpu: 10m}}}}}}]
            affinity:
              podAntiAffinity:
                requiredDuringSchedulingIgnoredDuringExecution:
                  - {{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{floor: default}}}}}}
      - apiVersion: autoscaling.x-k8s.io/v1beta1
        kind: CapacityBuffer
        metadata: {{name: floor, namespace: default}}
        spec: {{podTemplateRef: {{name: floor-chunk}}, replicas: 3}}
  - wait: 2m
{extra}"#,
        common::NODE_CLASS
    )
}

#[test]
fn drift_replaces_a_floor_buffers_nodes_one_by_one_and_the_floor_never_drops_below_three_nodes() {
    let drift =
        "  - patch: {kind: NodePool, name: default, merge: {spec: {template: {metadata: {labels: {team: blue}}}}}}\n";
    let waits: String = (0..60).map(|_| "  - wait: 5s\n").collect();
    let reports = reports_per_step(&floor_scenario("720h", &format!("{drift}{waits}")));
    // One node at a time (budget nodes: 1): while a node is replaced, its chunk of room is
    // unusable (the node is tainted) and the other two stay; never fewer than three nodes.
    for (i, r) in reports.iter().enumerate().skip(1) {
        assert!(r.nodes.len() >= 3, "step {i}: {} nodes while the floor's nodes were replaced", r.nodes.len());
        assert!(only_buffer(r).placed >= 2, "step {i}: {:?}", only_buffer(r));
    }
    let end = reports.last().unwrap();
    let blue = end.nodes.iter().filter(|n| n.labels.get("team").is_some_and(|v| v == "blue")).count();
    assert_eq!((end.nodes.len(), blue), (3, 3), "each floor node replaced from the new template");
    assert_eq!(end.disruptions.iter().filter(|d| d.reason == "Drifted").count(), 3, "{:?}", end.disruptions);
    assert_eq!(end.summary.node_claims_launched, 6, "the three replacements and nothing else");
    let b = only_buffer(end);
    assert_eq!((b.replicas, b.placed), (3, 3), "{b:?}");
    assert_eq!(b.provisioning.as_deref(), Some("True"));
}

#[test]
fn expired_floor_nodes_get_replacements_sized_for_the_buffers_room() {
    let waits: String = (0..60).map(|_| "  - wait: 5s\n").collect();
    let reports = reports_per_step(&floor_scenario("5m", &waits));
    for (i, r) in reports.iter().enumerate().skip(1) {
        assert!(r.nodes.len() >= 3, "step {i}: {} nodes while expired floor nodes were replaced", r.nodes.len());
    }
    let end = reports.last().unwrap();
    let expired: Vec<_> = end.disruptions.iter().filter(|d| d.reason == "Expired").collect();
    assert!(expired.len() >= 3, "{:?}", end.disruptions);
    // Expiration pre-spins a replacement for the room each expired node held.
    assert!(expired.iter().all(|d| !d.replacements.is_empty()), "{expired:?}");
    let b = only_buffer(end);
    assert_eq!((b.replicas, b.placed), (3, 3), "{b:?}");
    assert_eq!(end.nodes.len(), 3);
}
