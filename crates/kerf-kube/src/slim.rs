//! What the controllers keep of a watched Pod. Every pod of the cluster stays in the
//! controllers' state for as long as it exists, so the fields no controller reads are dropped
//! as the watch delivers it, before it is decoded: the server-side apply bookkeeping
//! (`managedFields`), kubectl's copy of the last applied manifest, the containers' images,
//! commands, environment, probes, mounts and security settings, the status of each container,
//! the pod's addresses and the conditions nothing reads. Real pods carry kilobytes of these;
//! what scheduling, disruption, termination and the metrics read (requests, ports, restart
//! policies, volumes, affinities, tolerations, labels, annotations, owners, phase, the
//! `PodScheduled` and `Ready` conditions, the host IP) is kept as delivered.
//!
//! Pods are only ever written back as patches of named fields, deleted or evicted (never
//! replaced whole), so a pod kept without these fields is never sent back to the API server.

use kube::api::DynamicObject;
use serde_json::Value;

/// kubectl's copy of the manifest it last applied, kept on the object by client-side apply.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Fields of a container no controller reads.
const CONTAINER_FIELDS: &[&str] = &[
    "args",
    "command",
    "env",
    "envFrom",
    "image",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "securityContext",
    "stdin",
    "stdinOnce",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
];

/// Fields of a pod's status no controller reads.
const STATUS_FIELDS: &[&str] = &[
    "containerStatuses",
    "ephemeralContainerStatuses",
    "hostIPs",
    "initContainerStatuses",
    "podIP",
    "podIPs",
    "qosClass",
    "resourceClaimStatuses",
];

/// The pod conditions the controllers read: `PodScheduled` (kube-scheduler found no node, and
/// why) and `Ready` (the pod counts as healthy for its disruption budgets).
const CONDITIONS: &[&str] = &["PodScheduled", "Ready"];

/// Drops from a watched Pod the fields no controller reads.
pub fn pod(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if let Some(annotations) = obj.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(spec) = obj.data.get_mut("spec").and_then(Value::as_object_mut) {
        // Debugging containers never take part in scheduling (they have no resources).
        spec.remove("ephemeralContainers");
        for list in ["containers", "initContainers"] {
            for c in spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(c) = c.as_object_mut() {
                    for field in CONTAINER_FIELDS {
                        c.remove(*field);
                    }
                }
            }
        }
    }
    if let Some(status) = obj.data.get_mut("status").and_then(Value::as_object_mut) {
        for field in STATUS_FIELDS {
            status.remove(*field);
        }
        if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            conditions.retain(|c| c.get("type").and_then(Value::as_str).is_some_and(|t| CONDITIONS.contains(&t)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    #[test]
    fn a_watched_pod_keeps_what_scheduling_reads_and_loses_env_probes_and_statuses() {
        let full = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true", LAST_APPLIED: "{\"big\":1}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": true}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{
                    "name": "app", "image": "web:1", "command": ["/web"], "args": ["--port=80"],
                    "env": [{"name": "A", "value": "1"}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
                }],
                "initContainers": [{"name": "sidecar", "image": "proxy:1", "restartPolicy": "Always", "env": [{"name": "B", "value": "2"}], "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                "qosClass": "Burstable",
                "conditions": [
                    {"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"}, {"type": "PodScheduled", "status": "True"}
                ],
                "containerStatuses": [{"name": "app", "image": "web:1", "imageID": "", "ready": true, "restartCount": 0}]
            }
        });
        let mut obj: DynamicObject = serde_json::from_value(full).unwrap();
        pod(&mut obj);
        let kept: Pod = serde_json::from_value(serde_json::to_value(&obj).unwrap()).unwrap();
        let expected: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": true}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{
                    "name": "app",
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
                }],
                "initContainers": [{"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
            }
        }))
        .unwrap();
        assert_eq!(kept, expected);
    }
}
