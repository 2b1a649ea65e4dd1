//! A merge patch of one part of a typed object applied to that part alone: the part encoded to
//! JSON, patched and decoded, the rest of the object shared with the version it was read from.
//!
//! A whole-object patch encodes and decodes everything the object holds; a NodeClaim's spec
//! names hundreds of instance types, and the lifecycle writes a claim's finalizer and labels
//! with metadata-only patches. Patching the metadata (or, in the status module, the status) on
//! its own gives the object the whole-object patch gives, for a cost proportional to the part.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::cluster::{AnyObject, Object};
use kerf_api::{
    CapacityBuffer, CapacityQuota, EC2NodeClass, FieldError, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// `part` (the object's field `field`) with `patch` (a JSON merge patch, RFC 7386) applied; a
/// value that no longer decodes is refused naming the field under `field`.
pub(crate) fn merged<T: Serialize + DeserializeOwned>(part: &T, patch: &Value, field: &str) -> Result<T, FieldError> {
    let mut doc = serde_json::to_value(part).map_err(|e| FieldError::new(field, e.to_string()))?;
    kerf_api::patch::merge(&mut doc, patch);
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        FieldError::new(
            if path == "." { field.to_string() } else { format!("{field}.{path}") },
            e.into_inner().to_string(),
        )
    })
}

/// The metadata fields a metadata-only patch may name: the ones objects' owners edit (and the
/// resourceVersion, as a precondition). A patch naming anything else takes the whole-object path.
const OWNED_METADATA: &[&str] = &["labels", "annotations", "finalizers", "resourceVersion"];

/// A merge patch of the main resource that names nothing but [`OWNED_METADATA`]: its
/// `metadata` object.
pub(crate) fn metadata_only(patch: &Value) -> Option<&Value> {
    let fields = patch.as_object()?;
    let meta = fields.get("metadata")?;
    let only_metadata = fields.len() == 1 && meta.as_object()?.keys().all(|k| OWNED_METADATA.contains(&k.as_str()));
    only_metadata.then_some(meta)
}

/// The kinds kept typed with an `ObjectMeta` (a slim pod's metadata is not one).
macro_rules! with_object_meta {
    ($($ty:ident),* $(,)?) => {
        /// `current` with `meta_patch` merged into its metadata, its labels checked as any
        /// write's are; `None` for an object whose metadata is not an `ObjectMeta`.
        pub(crate) fn patch_metadata(current: &AnyObject, meta_patch: &Value) -> Option<Result<AnyObject, Vec<FieldError>>> {
            match current {
                $(AnyObject::$ty(o) => Some(patch_one::<$ty>(o, meta_patch)),)*
                _ => None,
            }
        }
    };
}

with_object_meta! {
    Pod, Node, Namespace, PersistentVolumeClaim, PersistentVolume, DaemonSet, PodDisruptionBudget,
    NodeClaim, NodePool, EC2NodeClass, CapacityBuffer, NodeOverlay, ProvisioningRequest, CapacityQuota,
}

fn patch_one<K: Object<Meta = ObjectMeta>>(obj: &Arc<K>, meta_patch: &Value) -> Result<AnyObject, Vec<FieldError>> {
    let meta = merged(obj.meta(), meta_patch, "metadata").map_err(|e| vec![e])?;
    let problems = crate::kinds::label_problems(meta.labels.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str())));
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut next = K::clone(obj);
    *next.meta_mut() = meta;
    Ok(next.into_any())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_patch_of_owned_metadata_is_metadata_only() {
        let labels = json!({"metadata": {"labels": {"a": "1"}, "resourceVersion": "7"}});
        assert_eq!(metadata_only(&labels), Some(&labels["metadata"]));
        let finalizers = json!({"metadata": {"finalizers": null}});
        assert!(metadata_only(&finalizers).is_some());
        for other in [
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {}}),
            json!({"metadata": {"name": "b"}}),
            json!({"metadata": {"ownerReferences": []}}),
            json!({"metadata": null}),
            json!({"kind": "Node", "metadata": {"labels": {}}}),
            json!({}),
            json!([]),
        ] {
            assert_eq!(metadata_only(&other), None, "{other}");
        }
    }

    #[test]
    fn a_metadata_value_that_does_not_decode_is_refused_naming_its_field() {
        let meta = ObjectMeta { name: Some("a".into()), ..Default::default() };
        let err = merged(&meta, &json!({"labels": {"a": 1}}), "metadata").unwrap_err();
        assert!(err.to_string().starts_with("metadata.labels.a"), "{err}");
    }
}
