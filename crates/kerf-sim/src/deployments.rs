//! Deployments as objects in the store (JSON; the API server has no Rust type for them): the
//! scenario's apply / scale / rollout / delete steps write them like any client would, the
//! Deployment controller stand-in (`workloads`) follows their changes, and publishes what it
//! keeps (ReplicaSets, each Deployment's status) back to the store for clients to read.

use k8s_openapi::api::apps::v1::Deployment;
use kerf_api::clock::Clock;
use kerf_api::cluster::ApiError;
use kerf_apiserver::DynamicObject;
use kerf_apiserver::cluster::{DynamicEvent, SimCluster};
use kerf_apiserver::writes::Mode;
use serde_json::{Value, json};

use crate::scenario::ObjectRef;
use crate::workloads::{DeploymentProgress, RESTARTED_AT, REVISION, Workloads};

/// The kind the Deployment controller stand-in follows through the store.
pub const DEPLOYMENT: &str = "Deployment";
/// The ReplicaSets the Deployment stand-in publishes.
const REPLICA_SET: &str = "ReplicaSet";

/// Creates the Deployment, or replaces the existing one's metadata and spec.
pub fn apply(cluster: &SimCluster, d: &Deployment) -> Result<(), ApiError> {
    let obj = serde_json::to_value(d)
        .map_err(|e| e.to_string())
        .and_then(|v| DynamicObject::from_json(v).map_err(|e| e.to_string()))
        .map_err(|message| ApiError::Invalid {
            kind: DEPLOYMENT,
            name: d.metadata.name.clone().unwrap_or_default(),
            message,
        })?;
    cluster.apply_dynamic(DEPLOYMENT, obj).map(|_| ())
}

pub fn delete(cluster: &SimCluster, namespace: Option<&str>, name: &str) -> Result<(), String> {
    cluster
        .delete_stored(DEPLOYMENT, namespace, name, &Default::default())
        .map(|_| ())
        .map_err(|_| "no such Deployment".to_string())
}

/// Changes the stored Deployment's JSON.
fn edit(cluster: &SimCluster, target: &ObjectRef, edit: impl FnOnce(&mut Value)) -> Result<(), String> {
    let ns = Some(target.namespace.as_str());
    let Some(current) = cluster.get_dynamic(DEPLOYMENT, ns, &target.name) else {
        return Err("no such Deployment".to_string());
    };
    let mut doc = current.to_json();
    edit(&mut doc);
    let obj = DynamicObject::from_json(doc).map_err(|e| e.to_string())?;
    cluster.update_dynamic(DEPLOYMENT, obj, Mode::Spec).map_err(|e| e.to_string())
}

pub fn scale(cluster: &SimCluster, target: &ObjectRef, replicas: i32) -> Result<(), String> {
    edit(cluster, target, |d| d["spec"]["replicas"] = json!(replicas))
}

/// What `kubectl rollout restart` does: a new template annotation, so a new template hash.
pub fn restart(cluster: &SimCluster, target: &ObjectRef, stamp: &str) -> Result<(), String> {
    edit(cluster, target, |d| {
        let t = &mut d["spec"]["template"]["metadata"];
        if !t.is_object() {
            *t = json!({});
        }
        if !t["annotations"].is_object() {
            t["annotations"] = json!({});
        }
        t["annotations"][RESTARTED_AT] = json!(stamp);
    })
}

/// A Deployment created, changed or deleted (through a scenario step or the API).
pub fn observe(cluster: &SimCluster, workloads: &mut Workloads, ev: DynamicEvent) {
    let (obj, deleted) = match ev {
        DynamicEvent::Applied(o) => (o, false),
        DynamicEvent::Deleted(o) => (o, true),
    };
    if obj.kind() != DEPLOYMENT {
        return;
    }
    let ns = obj.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
    let name = obj.metadata.name.clone().unwrap_or_default();
    if deleted {
        workloads.delete(cluster, &ns, &name);
        return;
    }
    match serde_json::from_value::<Deployment>(obj.to_json()) {
        Ok(d) => workloads.apply_deployment(d),
        Err(e) => tracing::warn!(deployment = %format!("{ns}/{name}"), error = %e, "cannot read Deployment"),
    }
}

/// Writes the ReplicaSets the stand-in keeps (each with its revision) and what changed of each
/// Deployment: its revision annotation, and its status counts (kubectl's READY / UP-TO-DATE /
/// AVAILABLE; `observedGeneration` for `rollout status`) and conditions.
pub fn publish(cluster: &SimCluster, workloads: &mut Workloads) {
    // Nothing changes the workloads while they are published: their pods are counted once.
    let available = workloads.available_by_set();
    for (key, obj) in workloads.take_replica_set_changes(&available) {
        let Some((ns, name)) = key.split_once('/') else { continue };
        let written = match obj {
            Some(obj) => DynamicObject::from_json(obj)
                .map_err(|e| e.to_string())
                .and_then(|o| publish_replica_set(cluster, o).map_err(|e| e.to_string())),
            None => cluster
                .delete_stored(REPLICA_SET, Some(ns), name, &Default::default())
                .map(|_| ())
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = written {
            tracing::warn!(replicaset = %key, error = %e, "cannot publish ReplicaSet");
        }
    }
    let now = cluster.clock().now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    for p in workloads.progress(&available) {
        let (ns, name) = (p.namespace.clone(), p.name.clone());
        let Some(d) = cluster.get_dynamic(DEPLOYMENT, Some(&ns), &name) else { continue };
        let revision = p.revision.to_string();
        let annotated = d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)) == Some(&revision);
        let d = if annotated || p.revision == 0 {
            d
        } else {
            let mut next = (*d).clone();
            next.metadata.annotations.get_or_insert_with(Default::default).insert(REVISION.to_string(), revision);
            next.metadata.resource_version = None;
            match cluster.write_stored(DEPLOYMENT, kerf_apiserver::Stored::Dynamic(next.into()), Mode::Spec) {
                Ok(kerf_apiserver::Stored::Dynamic(written)) => written,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(deployment = %format!("{ns}/{name}"), error = %e, "cannot write Deployment revision");
                    continue;
                }
            }
        };
        let previous = d.body.get("status").and_then(|s| s.get("conditions"));
        let status = json!({
            "observedGeneration": d.metadata.generation.unwrap_or(1),
            "replicas": p.replicas,
            "updatedReplicas": p.updated,
            "readyReplicas": p.available,
            "availableReplicas": p.available,
            "unavailableReplicas": (p.replicas - p.available).max(0),
            "conditions": conditions(&p, previous, &now),
        });
        if d.body.get("status") == Some(&status) {
            continue;
        }
        let mut d = (*d).clone();
        d.body.insert("status".to_string(), status);
        d.metadata.resource_version = None;
        if let Err(e) = cluster.update_dynamic(DEPLOYMENT, d, Mode::Status) {
            tracing::warn!(deployment = %format!("{ns}/{name}"), error = %e, "cannot write Deployment status");
        }
    }
}

/// A Deployment's `Available` and `Progressing` conditions, as the Deployment controller words
/// them (`kubectl wait --for=condition=Available` waits on the first); a condition that did not
/// change keeps its times.
fn conditions(p: &DeploymentProgress, previous: Option<&Value>, now: &str) -> Value {
    let (available, available_reason, available_message) = if p.available >= p.min_available {
        ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    } else {
        ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
    };
    let done = p.updated == p.desired && p.replicas == p.desired && p.available == p.desired;
    let (progress_reason, progress_message) = if done {
        ("NewReplicaSetAvailable", format!("ReplicaSet {:?} has successfully progressed.", p.replica_set))
    } else {
        ("ReplicaSetUpdated", format!("ReplicaSet {:?} is progressing.", p.replica_set))
    };
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        let before = previous
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
            .filter(|c| c["status"] == status);
        let transition = before.map_or(now, |c| c["lastTransitionTime"].as_str().unwrap_or(now));
        let update = before.filter(|c| c["reason"] == reason && c["message"] == message);
        let updated = update.map_or(now, |c| c["lastUpdateTime"].as_str().unwrap_or(now));
        json!({"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": transition, "lastUpdateTime": updated})
    };
    json!([
        condition("Available", available, available_reason, available_message),
        condition("Progressing", "True", progress_reason, &progress_message),
    ])
}

/// Creates or updates a ReplicaSet object, spec and status.
fn publish_replica_set(cluster: &SimCluster, obj: DynamicObject) -> Result<(), ApiError> {
    let ns = obj.metadata.namespace.clone();
    let name = obj.metadata.name.clone().unwrap_or_default();
    if cluster.get_dynamic(REPLICA_SET, ns.as_deref(), &name).is_none() {
        return cluster.apply_dynamic(REPLICA_SET, obj).map(|_| ());
    }
    cluster.update_dynamic(REPLICA_SET, obj, Mode::All)
}
