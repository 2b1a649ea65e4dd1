//! Patches of one object, as the API server applies them: a JSON merge patch (RFC 7386) or a
//! JSON patch (RFC 6902). [`ClusterApi::patch`](crate::cluster::ClusterApi::patch) takes one; the
//! in-memory API server applies it with [`Patch::apply`], kube-rs sends it to a real one.

use serde_json::Value;

/// A patch of one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// A JSON merge patch: objects merge key by key, `null` deletes a key, and anything else (a
    /// list included) replaces what was there.
    Merge(Value),
    /// A JSON patch: a list of operations (`add`, `remove`, `replace`, `move`, `copy`, `test`)
    /// applied in order, all or none.
    Json(Value),
}

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("invalid JSON patch: {0}")]
    Malformed(String),
    #[error("the JSON patch could not be applied: {0}")]
    Failed(String),
}

impl Patch {
    /// The `Content-Type` a PATCH request carries it with.
    pub fn content_type(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Json(_) => "application/json-patch+json",
        }
    }

    /// The resourceVersion the patch writes, if any: the version it applies to, as a
    /// precondition (the API server refuses it with a conflict on any other).
    pub fn resource_version(&self) -> Option<&str> {
        match self {
            Patch::Merge(p) => merge_patch_resource_version(p),
            Patch::Json(ops) => json_patch_resource_version(ops),
        }
    }

    /// Applies the patch to `doc`. A JSON patch that fails leaves `doc` as it was.
    pub fn apply(&self, doc: &mut Value) -> Result<(), PatchError> {
        match self {
            Patch::Merge(p) => {
                merge(doc, p);
                Ok(())
            }
            Patch::Json(ops) => apply_json_patch(doc, ops),
        }
    }
}

/// The resourceVersion a merge patch writes, if it names one.
pub fn merge_patch_resource_version(patch: &Value) -> Option<&str> {
    patch.pointer("/metadata/resourceVersion").and_then(Value::as_str)
}

/// The resourceVersion a JSON patch writes last (`add` or `replace` of it), if any.
pub fn json_patch_resource_version(ops: &Value) -> Option<&str> {
    ops.as_array()?
        .iter()
        .rfind(|op| matches!(op["op"].as_str(), Some("add" | "replace")) && op["path"] == "/metadata/resourceVersion")
        .and_then(|op| op["value"].as_str())
}

/// Applies a JSON merge patch (RFC 7386) to `doc`.
pub fn merge(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
}

/// Applies a JSON patch (RFC 6902, a list of operations) to `doc`, all or none.
pub fn apply_json_patch(doc: &mut Value, ops: &Value) -> Result<(), PatchError> {
    let ops: json_patch::Patch =
        serde_json::from_value(ops.clone()).map_err(|e| PatchError::Malformed(e.to_string()))?;
    json_patch::patch(doc, &ops).map_err(|e| PatchError::Failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node() -> Value {
        json!({
            "metadata": {"name": "n1", "resourceVersion": "7",
                         "labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}},
            "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}, {"key": "k2", "effect": "NoExecute"}],
                     "unschedulable": false}
        })
    }

    #[test]
    fn a_merge_patch_merges_nested_objects_and_null_deletes_a_key() {
        let mut doc = node();
        Patch::Merge(json!({"metadata": {"labels": {"b": null, "c": "3"}}})).apply(&mut doc).unwrap();
        assert_eq!(doc["metadata"]["labels"], json!({"a": "1", "c": "3"}));
        assert_eq!(doc["metadata"]["annotations"], json!({"x": "y"}), "keys the patch does not name stay");
        assert_eq!(doc["metadata"]["name"], "n1");
        Patch::Merge(json!({"metadata": {"annotations": null}})).apply(&mut doc).unwrap();
        assert!(doc["metadata"].get("annotations").is_none());
    }

    #[test]
    fn a_merge_patch_replaces_a_list_whole() {
        let mut doc = node();
        Patch::Merge(json!({"spec": {"taints": [{"key": "k3", "effect": "NoSchedule"}]}})).apply(&mut doc).unwrap();
        assert_eq!(doc["spec"]["taints"], json!([{"key": "k3", "effect": "NoSchedule"}]));
        assert_eq!(doc["spec"]["unschedulable"], false);
    }

    #[test]
    fn a_json_patch_applies_its_operations_in_order_or_none_of_them() {
        let mut doc = node();
        let ops = json!([
            {"op": "add", "path": "/spec/taints/-", "value": {"key": "k3", "effect": "NoSchedule"}},
            {"op": "remove", "path": "/spec/taints/0"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "9"}
        ]);
        Patch::Json(ops).apply(&mut doc).unwrap();
        let keys: Vec<&str> =
            doc["spec"]["taints"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap()).collect();
        assert_eq!(keys, ["k2", "k3"]);
        assert_eq!(doc["metadata"]["labels"]["a"], "9");
        let before = doc.clone();
        let failing = json!([
            {"op": "replace", "path": "/metadata/labels/a", "value": "10"},
            {"op": "test", "path": "/metadata/resourceVersion", "value": "6"}
        ]);
        assert!(matches!(Patch::Json(failing).apply(&mut doc), Err(PatchError::Failed(_))));
        assert_eq!(doc, before, "a failed JSON patch changes nothing");
        assert!(matches!(Patch::Json(json!({"op": "add"})).apply(&mut doc), Err(PatchError::Malformed(_))));
    }

    #[test]
    fn the_resource_version_a_patch_writes_is_its_precondition() {
        assert_eq!(
            Patch::Merge(json!({"metadata": {"resourceVersion": "7", "labels": {}}})).resource_version(),
            Some("7")
        );
        assert_eq!(Patch::Merge(json!({"metadata": {"labels": {"a": null}}})).resource_version(), None);
        let ops = json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": "8"}]);
        assert_eq!(Patch::Json(ops).resource_version(), Some("8"));
        assert_eq!(Patch::Json(json!([{"op": "remove", "path": "/metadata/labels"}])).resource_version(), None);
    }
}
