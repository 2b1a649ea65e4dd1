//! The stand-ins and the driver on small scenarios with custom instance types.

use std::path::Path;

mod common;

use common::{NODE_CLASS, daemonset, deployment, run};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_sim::Report;
use kerf_sim::scenario::{Step, parse};
use kerf_sim::steps::run_scenario;

const CLOUD: &str = r#"
cloud:
  region: us-west-2
  zones: [us-west-2a, us-west-2b, us-west-2c]
  launchLatency: 30s
  instanceTypes:
    - name: small
      capacity: {cpu: "2", memory: 4Gi, pods: "20"}
      price: 0.10
    - name: large
      capacity: {cpu: "8", memory: 16Gi, pods: "60"}
      price: 0.40
"#;

const POOL: &str = r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              startupTaints:
                - {key: example.com/agent-not-ready, effect: NoSchedule}
              requirements:
                - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

#[test]
fn unplaceable_pod_gets_kube_scheduler_style_reason_naming_every_node() {
    let yaml = format!(
        r#"name: t
{CLOUD}
nodes:
  - {{name: n1, capacity: {{cpu: "2", memory: 4Gi, pods: "10"}}}}
  - {{name: n2, capacity: {{cpu: "2", memory: 4Gi, pods: "10"}}}}
steps:
  - apply:
{}
  - wait: 1m
"#,
        deployment("big", 1, "3", "")
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods_pending, 1);
    let reason = r.pods[0].reason.clone().unwrap();
    // kube-scheduler's condition message, as the controllers' FailedScheduling event carries it.
    assert!(reason.starts_with("0/2 nodes are available: 2 Insufficient cpu"), "{reason}");
}

#[test]
fn kubelet_registers_nodes_with_claim_labels_then_lifts_startup_taints() {
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{POOL}{NODE_CLASS}
{}
  - wait: 2m
"#,
        deployment("web", 3, "1", "")
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods_running, 3, "{:#?}", r.pods);
    assert!(!r.nodes.is_empty());
    for n in &r.nodes {
        assert_eq!(n.labels.get("kubernetes.io/hostname"), Some(&n.name));
        assert_eq!(n.labels.get("karpenter.sh/nodepool").map(String::as_str), Some("default"));
        assert_eq!(n.node_pool.as_deref(), Some("default"));
        assert!(n.ready);
    }
}

#[test]
fn daemonset_runs_one_pod_on_each_node_whose_taints_it_tolerates() {
    let yaml = format!(
        r#"name: t
{CLOUD}
nodes:
  - {{name: a, capacity: {{cpu: "2", memory: 4Gi, pods: "10"}}}}
  - {{name: b, capacity: {{cpu: "2", memory: 4Gi, pods: "10"}}}}
  - name: gpu
    taints: [{{key: nvidia.com/gpu, effect: NoSchedule}}]
    capacity: {{cpu: "2", memory: 4Gi, pods: "10"}}
steps:
  - apply:
{}
  - wait: 10s
"#,
        daemonset("logs", "", "")
    );
    let r = run(&yaml);
    let nodes: Vec<&str> = r.pods.iter().filter_map(|p| p.node.as_deref()).collect();
    assert_eq!(nodes, vec!["a", "b"]);
    assert!(r.pods.iter().all(|p| p.owner == "DaemonSet/logs" && p.phase == "Running"));
}

#[test]
fn rollout_replaces_every_pod_with_the_new_revision() {
    let yaml = format!(
        r#"name: t
{CLOUD}
nodes:
  - {{name: a, capacity: {{cpu: "8", memory: 16Gi, pods: "50"}}}}
steps:
  - apply:
{}
  - wait: 10s
  - rollout: {{kind: Deployment, name: web, namespace: default}}
  - wait: 10s
"#,
        deployment("web", 4, "500m", "\n              terminationGracePeriodSeconds: 0")
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods, 4);
    assert_eq!(r.summary.pods_running, 4);
    let hashes: std::collections::BTreeSet<&str> = r.pods.iter().map(|p| p.name.rsplit_once('-').unwrap().0).collect();
    assert_eq!(hashes.len(), 1, "{hashes:?}");
}

#[test]
fn scale_step_grows_and_shrinks_a_deployment() {
    let yaml = format!(
        r#"name: t
{CLOUD}
nodes:
  - {{name: a, capacity: {{cpu: "8", memory: 16Gi, pods: "50"}}}}
steps:
  - apply:
{}
  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 6}}
  - wait: 5s
  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 2}}
  - wait: 5s
"#,
        deployment("web", 1, "100m", "")
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods, 2);
    assert_eq!(r.end_seconds.0, 10.0);
}

#[test]
fn interrupting_an_unknown_node_fails_the_run_naming_the_node() {
    let yaml = format!("name: t\n{CLOUD}\nsteps:\n  - interrupt: {{node: nope}}\n");
    let scenario = parse(Path::new("t.yaml"), &yaml).unwrap();
    let err = run_scenario(&scenario).unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn interrupting_an_on_demand_node_fails_the_run_saying_it_is_not_spot() {
    let setup = format!(
        "name: t\n{CLOUD}\nsteps:\n  - apply:\n{POOL}{NODE_CLASS}{}\n  - wait: 2m\n",
        deployment("web", 1, "1", "")
    );
    let node = run(&setup).nodes.iter().find(|n| n.node_pool.is_some()).map(|n| n.name.clone()).unwrap();
    let yaml = format!("{setup}  - interrupt: {{node: {node}}}\n");
    let err = run_scenario(&parse(Path::new("t.yaml"), &yaml).unwrap()).unwrap_err().to_string();
    assert!(err.contains(&node) && err.contains("on-demand"), "{err}");
}

#[test]
fn inline_apply_and_every_step_kind_parse() {
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{}
  - wait: 1h30m
  - scale: {{kind: Deployment, name: web, replicas: 3}}
  - rollout: {{kind: Deployment, name: web}}
  - delete: {{kind: Deployment, name: web}}
  - interrupt: {{node: ip-10-0-0-2.us-west-2.compute.internal}}
"#,
        deployment("web", 1, "1", "")
    );
    let s = parse(Path::new("t.yaml"), &yaml).unwrap();
    assert_eq!(s.steps.len(), 6);
    assert!(matches!(&s.steps[1], Step::Wait(d) if d.as_secs() == 5400));
    assert!(matches!(&s.steps[2], Step::Scale { replicas: 3, target } if target.namespace == "default"));
}

#[test]
fn unknown_step_is_rejected_with_its_path() {
    let e = parse(Path::new("t.yaml"), "name: t\nsteps:\n  - sleep: 1m\n").unwrap_err();
    assert_eq!(e.field, "steps[0].sleep");
    assert!(e.problem.contains("unknown field"), "{e}");
}

/// One node; a `db` pod in namespace `shop` (after the `shop_namespace` manifest, if any),
/// then a `web` pod in `default` with required anti-affinity to `app: db` pods in namespaces
/// matching `ns_selector`.
fn namespace_selector_scenario(shop_namespace: &str, ns_selector: &str) -> Report {
    let yaml = format!(
        r#"name: t
{CLOUD}
nodes:
  - {{name: n1, capacity: {{cpu: "4", memory: 8Gi, pods: "10"}}}}
steps:
  - apply:{shop_namespace}
      - apiVersion: v1
        kind: Pod
        metadata: {{name: db, namespace: shop, labels: {{app: db}}}}
        spec:
          containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
  - wait: 5s
  - apply:
      - apiVersion: v1
        kind: Pod
        metadata: {{name: web, namespace: default}}
        spec:
          affinity:
            podAntiAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                - topologyKey: kubernetes.io/hostname
                  labelSelector: {{matchLabels: {{app: db}}}}
                  namespaceSelector: {{matchLabels: {ns_selector}}}
          containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
  - wait: 5s
"#
    );
    run(&yaml)
}

fn shop_namespace(team: &str) -> String {
    format!(
        r#"
      - apiVersion: v1
        kind: Namespace
        metadata: {{name: shop, labels: {{team: {team}}}}}"#
    )
}

fn pod<'a>(r: &'a Report, namespace: &str, name: &str) -> &'a kerf_sim::report::PodReport {
    r.pods.iter().find(|p| p.namespace == namespace && p.name == name).unwrap_or_else(|| panic!("{:#?}", r.pods))
}

#[test]
fn anti_affinity_namespace_selector_keeps_pod_off_the_node_of_a_pod_in_a_matching_namespace() {
    let r = namespace_selector_scenario(&shop_namespace("a"), "{team: a}");
    assert_eq!(pod(&r, "shop", "db").node.as_deref(), Some("n1"));
    let web = pod(&r, "default", "web");
    assert_eq!(web.node, None);
    let reason = web.reason.clone().unwrap_or_default();
    assert!(reason.starts_with("0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules"), "{reason}");
}

#[test]
fn anti_affinity_namespace_selector_ignores_pods_in_a_namespace_with_other_labels() {
    let r = namespace_selector_scenario(&shop_namespace("b"), "{team: a}");
    assert_eq!(pod(&r, "shop", "db").node.as_deref(), Some("n1"));
    assert_eq!(pod(&r, "default", "web").node.as_deref(), Some("n1"));
}

#[test]
fn namespace_never_applied_still_has_its_metadata_name_label() {
    let r = namespace_selector_scenario("", "{kubernetes.io/metadata.name: shop}");
    assert_eq!(pod(&r, "shop", "db").node.as_deref(), Some("n1"));
    assert_eq!(pod(&r, "default", "web").node, None);
}

#[test]
fn applied_namespace_gets_its_metadata_name_label() {
    let r = namespace_selector_scenario(&shop_namespace("b"), "{kubernetes.io/metadata.name: shop}");
    assert_eq!(pod(&r, "default", "web").node, None);
}

#[test]
fn apply_accepts_namespace_and_still_rejects_unknown_kinds() {
    let ok = format!("name: t\nsteps:\n  - apply:{}\n", shop_namespace("a"));
    let s = parse(Path::new("t.yaml"), &ok).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(&s.steps[0], Step::Apply(m) if m.len() == 1));

    let bad = "name: t\nsteps:\n  - apply:\n      - {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n";
    let e = parse(Path::new("t.yaml"), bad).unwrap_err();
    assert_eq!(e.field, "steps[0].apply[0]: kind");
    assert!(e.problem.contains("unknown kind \"ConfigMap\"") && e.problem.contains("StorageClass, Namespace"), "{e}");
}

#[test]
fn provisioner_launches_a_separate_node_for_anti_affinity_across_a_selected_namespace() {
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{POOL}{NODE_CLASS}{}
      - apiVersion: v1
        kind: Pod
        metadata: {{name: db, namespace: shop, labels: {{app: db}}}}
        spec:
          containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
      - apiVersion: v1
        kind: Pod
        metadata: {{name: web, namespace: default}}
        spec:
          affinity:
            podAntiAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                - topologyKey: kubernetes.io/hostname
                  labelSelector: {{matchLabels: {{app: db}}}}
                  namespaceSelector: {{matchLabels: {{team: a}}}}
          containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
  - wait: 2m
"#,
        shop_namespace("a")
    );
    let r = run(&yaml);
    let db = pod(&r, "shop", "db").node.clone();
    let web = pod(&r, "default", "web").node.clone();
    assert!(db.is_some() && web.is_some(), "{:#?}", r.pods);
    assert_ne!(db, web);
    assert_eq!(r.summary.nodes, 2);
}

/// A bare pod asking for 100m that mounts the PersistentVolumeClaim `claim`.
fn pod_with_claim(name: &str, claim: &str) -> String {
    format!(
        r#"
      - apiVersion: v1
        kind: Pod
        metadata: {{name: {name}}}
        spec:
          containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
          volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]
"#
    )
}

#[test]
fn kube_scheduler_binds_no_pod_whose_claim_is_missing_or_of_a_missing_storage_class() {
    let yaml = format!(
        r#"name: t
{CLOUD}
nodes:
  - {{name: n1, capacity: {{cpu: "4", memory: 8Gi, pods: "20"}}}}
steps:
  - apply:
      - {{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {{name: gp3}}, provisioner: ebs.csi.aws.com}}
      - {{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {{name: orphan}}, spec: {{storageClassName: nope}}}}
      - {{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {{name: fine}}, spec: {{storageClassName: gp3}}}}
{}{}{}
  - wait: 1m
"#,
        pod_with_claim("ghost", "data"),
        pod_with_claim("stray", "orphan"),
        pod_with_claim("ok", "fine"),
    );
    let (r, sim) = common::run_keeping(&yaml);
    let pod = |name: &str| r.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("pod {name}"));
    assert_eq!(pod("ok").phase, "Running", "{:#?}", r.pods);
    assert_eq!(pod("ok").node.as_deref(), Some("n1"));
    for (name, claim) in [("ghost", "data"), ("stray", "orphan")] {
        let p = pod(name);
        assert_eq!(p.phase, "Pending", "{p:#?}");
        assert!(p.node.is_none(), "{p:#?}");
        let reason = p.reason.clone().unwrap_or_default();
        assert!(reason.contains(&format!("persistentvolumeclaim \"{claim}\"")), "{name}: {reason}");
    }
    assert!(pod("stray").reason.as_deref().unwrap_or_default().contains("storageclass \"nope\" does not exist"));
    assert_eq!(r.summary.nodes, 1, "nothing is launched for them: {:#?}", r.nodes);
    // kube-scheduler's own words on the pods' PodScheduled condition.
    let condition = |name: &str| {
        let p: k8s_openapi::api::core::v1::Pod = sim.cluster().get_obj(Some("default"), name).expect("pod");
        let conds = p.status.and_then(|s| s.conditions).unwrap_or_default();
        conds.into_iter().find(|c| c.type_ == "PodScheduled").and_then(|c| c.message).unwrap_or_default()
    };
    assert_eq!(condition("ghost"), "0/1 nodes are available: persistentvolumeclaim \"data\" not found.");
    assert_eq!(condition("stray"), "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.");

    // The pod binds once its claim exists.
    let r = run(&yaml.replace(
        "  - wait: 1m\n",
        "  - wait: 1m\n  - apply:\n      - {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: data}, spec: {storageClassName: gp3}}\n  - wait: 30s\n",
    ));
    let ghost = r.pods.iter().find(|p| p.name == "ghost").unwrap();
    assert_eq!(ghost.phase, "Running", "{ghost:#?}");
    assert_eq!(r.pods.iter().find(|p| p.name == "stray").unwrap().phase, "Pending");
}

#[test]
fn followers_with_zone_pod_affinity_to_a_target_pinned_to_one_zone_all_run_on_cheap_capacity_there() {
    // The followers are created before the target (Deployments are reconciled by name), so
    // kube-scheduler first finds no target for each of them, and must try them all again once
    // the target is bound (with no startup taint to lift, nothing else retries them).
    let target = "\n              affinity:\n                nodeAffinity:\n                  requiredDuringSchedulingIgnoredDuringExecution:\n                    nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-west-2b]}]}]";
    let follower = "\n              affinity:\n                podAffinity:\n                  requiredDuringSchedulingIgnoredDuringExecution:\n                    - labelSelector: {matchLabels: {app: target}}\n                      topologyKey: topology.kubernetes.io/zone";
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{}{NODE_CLASS}
{}{}
  - wait: 3m
"#,
        POOL.replace(
            "              startupTaints:\n                - {key: example.com/agent-not-ready, effect: NoSchedule}\n",
            ""
        ),
        deployment("target", 1, "100m", target),
        deployment("follower", 11, "100m", follower),
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods_running, 12, "{:#?}", r.pods);
    assert_eq!(r.summary.pods_pending, 0);
    assert_eq!(r.nodes.len(), 1, "{:#?}", r.nodes);
    let n = &r.nodes[0];
    assert_eq!(n.zone.as_deref(), Some("us-west-2b"));
    assert_eq!(n.instance_type.as_deref(), Some("small"), "1.2 CPUs of pods: the cheapest type that holds them");
    assert_eq!(n.pods, 12);
}

#[test]
fn pod_asking_for_a_daemonsets_host_port_runs_on_a_type_the_daemonset_does_not_run_on() {
    // The proxy DaemonSet holds host port 8080 only on "large" nodes.
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{POOL}{NODE_CLASS}
{}
      - apiVersion: v1
        kind: Pod
        metadata: {{name: web}}
        spec:
          containers: [{{name: c, image: i, ports: [{{containerPort: 8080, hostPort: 8080}}], resources: {{requests: {{cpu: 500m}}}}}}]
  - wait: 2m
"#,
        daemonset(
            "proxy",
            "\n              affinity:\n                nodeAffinity:\n                  requiredDuringSchedulingIgnoredDuringExecution:\n                    \
             nodeSelectorTerms: [{matchExpressions: [{key: node.kubernetes.io/instance-type, operator: In, values: [large]}]}]",
            ", ports: [{containerPort: 8080, hostPort: 8080}]",
        )
    );
    let r = run(&yaml);
    let web = r.pods.iter().find(|p| p.name == "web").expect("web pod");
    assert_eq!(web.phase, "Running", "{web:#?}");
    assert_eq!(r.nodes.len(), 1, "{:#?}", r.nodes);
    assert_eq!(r.nodes[0].instance_type.as_deref(), Some("small"));
    assert_eq!(web.node.as_deref(), Some(r.nodes[0].name.as_str()));
    assert!(r.pods.iter().all(|p| p.owner != "DaemonSet/proxy"), "no proxy pod on a small node: {:#?}", r.pods);
}

#[test]
fn a_pod_made_again_under_the_name_of_one_deleted_in_the_same_batch_is_scheduled() {
    // The deletion and the new pod reach kube-scheduler in one batch of watch events, as writes
    // from API clients do: the deleted pod's name must not take the new pod out of the queue (a
    // Deployment's generated names come back as pods churn, and a StatefulSet's always do).
    let yaml = format!(
        r#"name: t
{CLOUD}
nodes:
  - {{name: n1, capacity: {{cpu: "4", memory: 8Gi, pods: "10"}}}}
steps:
  - apply:
      - apiVersion: v1
        kind: Pod
        metadata: {{name: solo, namespace: default}}
        spec:
          containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}}}]
  - wait: 5s
"#
    );
    let scenario = parse(Path::new("test.yaml"), &yaml).unwrap_or_else(|e| panic!("{e}"));
    let (_, mut sim) = kerf_sim::steps::simulate(&scenario).unwrap_or_else(|e| panic!("{e}"));
    let cluster = sim.cluster();
    let first: Pod = cluster.get_obj(Some("default"), "solo").expect("the first pod");
    assert_eq!(first.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("n1"));
    cluster.delete_obj::<Pod>(Some("default"), "solo").expect("deleted");
    let mut again = first.clone();
    again.metadata =
        ObjectMeta { name: Some("solo".to_string()), namespace: Some("default".to_string()), ..ObjectMeta::default() };
    again.spec.as_mut().expect("a spec").node_name = None;
    again.status = None;
    cluster.create_obj(again).expect("made again");
    let until = kerf_cloud::Timestamp::from_millisecond(sim.now().as_millisecond() + 5_000).expect("a time");
    sim.settle(until).unwrap_or_else(|e| panic!("{e}"));
    let p = pod(&sim.report(), "default", "solo").clone();
    assert_eq!(p.node.as_deref(), Some("n1"), "{p:#?}");
}

#[test]
fn a_deleted_namespace_takes_its_workloads_with_it_and_their_nodes_go() {
    // Namespace `team` runs a Deployment and a StatefulSet's pod, `default` one more Deployment:
    // 6 cores, more than one node holds.
    let team = r#"
      - apiVersion: v1
        kind: Namespace
        metadata: {name: team}
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web, namespace: team}
        spec:
          replicas: 2
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers: [{name: c, resources: {requests: {cpu: "1500m"}}}]
      - apiVersion: v1
        kind: Pod
        metadata:
          name: db-0
          namespace: team
          ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: "", controller: true}]
        spec:
          containers: [{name: c, resources: {requests: {cpu: "1500m"}}}]
"#;
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{NODE_CLASS}{POOL}{team}{}
  - wait: 3m
  - delete: {{kind: Namespace, name: team}}
  - wait: 15m
"#,
        deployment("keep", 1, "1500m", "")
    );
    let r = run(&yaml);
    let left: Vec<(&str, &str, &str)> =
        r.pods.iter().map(|p| (p.namespace.as_str(), p.owner.as_str(), p.phase.as_str())).collect();
    // Nothing of `team` is left, the StatefulSet's pod included (its owner went with it).
    assert_eq!(left, [("default", "Deployment/keep", "Running")], "{:#?}", r.pods);
    // The nodes `team` ran on were emptied and removed: one node is left, for `keep`.
    assert!(r.summary.node_claims_launched >= 2, "{:?}", r.summary);
    assert_eq!(r.summary.nodes, 1, "{:#?}", r.nodes);
    assert_eq!(r.summary.node_claims_terminated, r.summary.node_claims_launched - 1, "{:?}", r.summary);
}
