//! kerf-kube's cluster API (the controllers' `ClusterApi` over kube-rs) against `kerf serve`:
//! stale writes are conflicts, a PodDisruptionBudget's refusal of an eviction is
//! `TooManyRequests`, merge and JSON patches apply as the API server applies them, events land
//! against the object they are about (once within the dedupe window), and reads of missing
//! objects say so.

mod common;

use common::*;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kerf_api::cluster::Patch;
use kerf_api::cluster::{ApiError, ClusterApi, EventRecord};
use kerf_kube::api::KubeApi;
use kerf_kube::recorder::EventMetrics;
use kube::api::ListParams;
use kube::{Api, Client, Config};
use serde_json::json;

const SCENARIO: &str = r#"name: kube-api
nodes:
  - name: n1
    capacity: {cpu: "4", memory: 8Gi, pods: "20"}
steps:
  - apply:
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web}
        spec:
          replicas: 2
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers:
                - name: web
                  image: registry.k8s.io/pause:3.10
                  resources: {requests: {cpu: 100m}}
      - apiVersion: policy/v1
        kind: PodDisruptionBudget
        metadata: {name: web}
        spec: {minAvailable: 2, selector: {matchLabels: {app: web}}}
"#;

async fn client(s: &Served) -> Client {
    let kc = kube::config::Kubeconfig::read_from(&s.kubeconfig).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
    kerf_kube::api::client(config).expect("client")
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

#[test]
fn kube_cluster_api_turns_conflicts_refused_evictions_and_missing_objects_into_api_errors_patches_and_records_events() {
    let dir = std::env::temp_dir().join(format!("kerf-kube-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let scenario = write(&dir, "scenario.yaml", SCENARIO);
    let s = Served::start("kube-api", &[scenario.to_str().expect("path"), "--controllers", "none"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let api = KubeApi::new(client(&s).await, "test", EventMetrics::default());
        let mut pods: Vec<Pod> = Vec::new();
        for _ in 0..100 {
            pods = api.list::<Pod>().await.expect("list pods");
            if pods.len() == 2 && pods.iter().all(running) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(pods.len() == 2 && pods.iter().all(running), "two running web pods: {pods:?}");
        let pod = &pods[0];
        let pod_name = pod.metadata.name.clone().expect("name");

        // The budget needs both pods: the Eviction subresource refuses with 429.
        match api.evict("default", &pod_name).await {
            Err(ApiError::TooManyRequests { name, reason }) => {
                assert_eq!(name, format!("default/{pod_name}"));
                assert!(reason.contains("PodDisruptionBudget"), "{reason}");
            }
            other => panic!("eviction against the budget: {other:?}"),
        }

        // A write carrying a stale resourceVersion is a conflict.
        let node: Node = api.get(None, "n1").await.expect("get").expect("node n1 exists");
        let mut labelled = node.clone();
        labelled.metadata.labels.get_or_insert_with(Default::default).insert("a".into(), "1".into());
        let written = api.update(labelled).await.expect("update");
        assert_ne!(written.metadata.resource_version, node.metadata.resource_version);
        let mut stale = node.clone();
        stale.metadata.labels.get_or_insert_with(Default::default).insert("b".into(), "2".into());
        assert!(matches!(api.update(stale).await, Err(ApiError::Conflict { kind: "Node", .. })));

        // Missing objects.
        assert!(api.get::<Node>(None, "nope").await.expect("get").is_none());
        assert!(matches!(api.delete::<Node>(None, "nope").await, Err(ApiError::NotFound { kind: "Node", .. })));
        let mut again = node.clone();
        again.metadata.resource_version = None;
        assert!(matches!(api.create(again).await, Err(ApiError::AlreadyExists { kind: "Node", .. })));

        // Patches: a merge patch deletes a label with null and replaces the taint list, one
        // naming a stale resourceVersion is a conflict, a JSON patch writes status.
        let merge = Patch::Merge(json!({"metadata": {"labels": {"a": null, "c": "3"}},
                                        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}));
        let patched: Node = api.patch(None, "n1", &merge).await.expect("merge patch");
        let labels = patched.metadata.labels.clone().unwrap_or_default();
        assert!(!labels.contains_key("a") && labels.get("c").map(String::as_str) == Some("3"), "{labels:?}");
        let taints: Vec<String> =
            patched.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(|t| t.key.clone()).collect();
        assert_eq!(taints, ["k"]);
        let pinned = Patch::Merge(
            json!({"metadata": {"resourceVersion": written.metadata.resource_version, "labels": {"d": "4"}}}),
        );
        assert!(matches!(api.patch::<Node>(None, "n1", &pinned).await, Err(ApiError::Conflict { kind: "Node", .. })));
        let ops = Patch::Json(
            json!([{"op": "add", "path": "/status/conditions/-", "value": {"type": "Example", "status": "True"}}]),
        );
        let status: Node = api.patch_status(None, "n1", &ops).await.expect("JSON patch of status");
        let conditions = status.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(conditions.iter().any(|c| c.type_ == "Example"), "{conditions:?}");
        assert!(matches!(api.patch::<Node>(None, "nope", &merge).await, Err(ApiError::NotFound { kind: "Node", .. })));

        // An event about the pod, with its uid (what `kubectl describe pod` selects by).
        let event = EventRecord {
            kind: "Pod",
            name: format!("default/{pod_name}"),
            uid: pod.metadata.uid.clone(),
            type_: "Warning",
            reason: "FailedScheduling".into(),
            message: "no instance type in NodePool default has resource example.com/gpu".into(),
        };
        // Recorded twice within the dedupe window: written once, in the background.
        api.record_event(event.clone()).await;
        api.record_event(event).await;
        let events: Api<Event> = Api::namespaced(client(&s).await, "default");
        let mut failed = Vec::new();
        for _ in 0..50 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            failed = events
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
                .collect();
            if !failed.is_empty() {
                break;
            }
        }
        assert!(!failed.is_empty(), "the event was recorded");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let all = events.list(&ListParams::default()).await.expect("events").items;
        let count = all.iter().filter(|e| e.reason.as_deref() == Some("FailedScheduling")).count();
        assert_eq!(count, 1, "recorded once: {all:?}");
        let found = &failed[0];
        assert_eq!(found.involved_object.kind.as_deref(), Some("Pod"));
        assert_eq!(found.involved_object.name.as_deref(), Some(pod_name.as_str()));
        assert_eq!(found.involved_object.uid, pod.metadata.uid);
        assert_eq!(found.type_.as_deref(), Some("Warning"));
        assert!(found.message.as_deref().is_some_and(|m| m.contains("example.com/gpu")));
    });
    let described = kubectl_ok(&s, &["describe", "pod"]);
    assert!(described.contains("FailedScheduling"), "{described}");
}
