//! How the controllers write to objects: a JSON merge patch of exactly the fields they change,
//! worked out from the object as they read it and as they want it ([`changes`],
//! [`status_changes`]). A field the patch does not name stays as the API server has it, so a
//! concurrent change of another field (a user's label, a spec edit, a status the controller does
//! not touch) is neither overwritten nor a conflict to retry.
//!
//! A merge patch replaces a list whole. Where a controller rewrites a list that others also
//! edit (`metadata.finalizers`, a Node's `metadata.ownerReferences` and `spec.taints`, which the
//! kubelet and the node lifecycle controller write too), or a field another controller writes
//! as well (a pod's `status.nominatedNodeName`, kube-scheduler's too), the patch is [`pinned`]
//! to the resourceVersion it was worked out from: the API server applies it to that version only
//! and answers any other with a conflict, which the pass retries as it retried an update. A
//! pinned merge patch rather than a JSON patch with a `test`: a failed `test` is answered 422
//! Invalid, which cannot be told from a patch the server rejects, a stale resourceVersion 409
//! Conflict. The status lists kerf writes on its own objects (conditions, a node class's
//! subnets) are written by kerf's reconcilers alone, one after another on one cache that records
//! the answer to every write, so they are merged unpinned.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::MetaView;
use kerf_api::cluster::{ApiError, Patch};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ControllerError;

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: the keys whose value changed
/// (objects compared key by key, anything else whole), removed keys as `null`; `None` when the
/// two are equal.
pub(crate) fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (k, n) in new {
                let changed = match old.get(k) {
                    Some(o) => merge_diff(o, n),
                    None => Some(n.clone()),
                };
                if let Some(c) = changed {
                    patch.insert(k.clone(), c);
                }
            }
            for k in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

fn to_json<T: Serialize>(what: &str, v: &T) -> Result<Value, ControllerError> {
    serde_json::to_value(v).map_err(|e| ControllerError::Api(ApiError::Other(format!("encoding {what}: {e}"))))
}

/// The merge patch of an object's metadata and spec from `old` (as read) to `new`; `None` when
/// nothing there changed. (Status is written through the status subresource.)
pub(crate) fn changes<K: Serialize>(old: &K, new: &K) -> Result<Option<Value>, ControllerError> {
    let main = |k: &K| -> Result<Value, ControllerError> {
        let mut v = to_json("an object", k)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
        Ok(v)
    };
    Ok(merge_diff(&main(old)?, &main(new)?))
}

/// [`changes`] of an object whose metadata alone changed, worked out from the metadata only
/// (an object's spec can be large: a NodeClaim names hundreds of instance types).
pub(crate) fn metadata_changes(old: &ObjectMeta, new: &ObjectMeta) -> Result<Option<Value>, ControllerError> {
    let diff = merge_diff(&to_json("metadata", old)?, &to_json("metadata", new)?);
    Ok(diff.map(|d| serde_json::json!({ "metadata": d })))
}

/// The merge patch of a status from `old` (as read) to `new`; `None` when it did not change.
pub(crate) fn status_changes<S: Serialize>(old: Option<&S>, new: &S) -> Result<Option<Value>, ControllerError> {
    let new = to_json("a status", new)?;
    let diff = match old {
        Some(old) => merge_diff(&to_json("a status", old)?, &new),
        None => Some(new),
    };
    Ok(diff.map(|d| serde_json::json!({ "status": d })))
}

/// `patch` applied only to the version of the object `read` is (a conflict on any other).
pub(crate) fn pinned(read: &(impl MetaView + ?Sized), mut patch: Value) -> Patch {
    if let (Some(rv), Some(p)) = (read.resource_version(), patch.as_object_mut()) {
        let meta = p.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = meta.as_object_mut() {
            m.insert("resourceVersion".to_string(), Value::String(rv.to_string()));
        }
    }
    Patch::Merge(patch)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_merge_diff_names_changed_keys_removed_keys_as_null_and_lists_whole() {
        let old = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]}, "spec": {"n": 1}});
        let new = json!({"metadata": {"labels": {"a": "1", "c": "3"}, "finalizers": ["x", "y"]}, "spec": {"n": 1}});
        let diff = merge_diff(&old, &new).unwrap();
        assert_eq!(diff, json!({"metadata": {"labels": {"b": null, "c": "3"}, "finalizers": ["x", "y"]}}));
        let mut applied = old.clone();
        Patch::Merge(diff).apply(&mut applied).unwrap();
        assert_eq!(applied, new, "the diff applied to the old value gives the new one");
        assert_eq!(merge_diff(&old, &old), None);
    }

    #[test]
    fn a_metadata_change_patches_as_the_whole_object_diff_does() {
        let claim: kerf_api::NodeClaim = serde_json::from_value(json!({
            "metadata": {"name": "default-x1", "labels": {"karpenter.sh/nodepool": "default"}, "finalizers": ["a"]},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]}]
            }
        }))
        .unwrap();
        let mut changed = claim.clone();
        changed.metadata.finalizers = Some(vec!["a".to_string(), "b".to_string()]);
        changed.metadata.labels.get_or_insert_with(Default::default).insert("zone".to_string(), "z1".to_string());
        let whole = changes(&claim, &changed).unwrap();
        assert!(whole.is_some());
        assert_eq!(metadata_changes(&claim.metadata, &changed.metadata).unwrap(), whole);
        assert_eq!(metadata_changes(&claim.metadata, &claim.metadata).unwrap(), None);
    }

    #[test]
    fn a_pinned_patch_carries_the_resource_version_it_was_read_at() {
        let read = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            resource_version: Some("12".to_string()),
            ..Default::default()
        };
        let p = pinned(&read, json!({"spec": {"taints": []}}));
        assert_eq!(p, Patch::Merge(json!({"metadata": {"resourceVersion": "12"}, "spec": {"taints": []}})));
        assert_eq!(p.resource_version(), Some("12"));
    }
}
