//! The cluster API's patches ([`ClusterApi::patch`](kerf_api::cluster::ClusterApi::patch)) on
//! the in-memory store: the same path as a PATCH request (the patch applied to the object as
//! the REST API shows it, decoded and validated, written with its resourceVersion rules), with
//! the REST errors turned into the cluster API's.

use kerf_api::cluster::{ApiError, Object, Patch};

use crate::cluster::{SimCluster, read_as};
use crate::rest::{PatchType, RestError, patch_stored};
use crate::writes::{Commit, Part};

impl SimCluster {
    /// Applies a patch to the object's metadata and spec (`Part::Main`) or its status, as a
    /// PATCH request does (the same validation and resourceVersion rules).
    pub fn patch_obj<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        part: Part,
    ) -> Result<K, ApiError> {
        let qualified = || namespace.map_or_else(|| name.to_string(), |ns| format!("{ns}/{name}"));
        let Some(kind) = crate::kinds::by_kind(K::KIND) else {
            return Err(ApiError::Other(format!("{} {}: not a kind this API serves", K::KIND, qualified())));
        };
        let (patch_type, body) = match patch {
            Patch::Merge(p) => (PatchType::Merge, p),
            Patch::Json(p) => (PatchType::Json, p),
        };
        let written =
            patch_stored(self, kind, namespace, name, patch_type, body, part, Commit::Store).map_err(|e| match e {
                RestError::Api(e) => e,
                RestError::BadRequest(message) => ApiError::Invalid { kind: K::KIND, name: qualified(), message },
                RestError::Invalid { causes, .. } => ApiError::Invalid {
                    kind: K::KIND,
                    name: qualified(),
                    message: causes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                },
                other => ApiError::Other(format!("{} {}: {other}", K::KIND, qualified())),
            })?;
        read_as::<K>(&written).ok_or_else(|| ApiError::Other(format!("{} {}: wrong kind", K::KIND, qualified())))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::clock::ManualClock;
    use kerf_api::cluster::ClusterApi;

    use super::*;

    fn node(name: &str) -> Node {
        Node { metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() }, ..Default::default() }
    }

    /// The cluster API's patch of `node`, driven to its (immediate) result.
    fn patched(c: &SimCluster, name: &str, patch: serde_json::Value, status: bool) -> Result<Node, ApiError> {
        use futures_util::FutureExt;
        let patch = if patch.is_array() { Patch::Json(patch) } else { Patch::Merge(patch) };
        let call = if status {
            ClusterApi::patch_status::<Node>(c, None, name, &patch).boxed()
        } else {
            ClusterApi::patch::<Node>(c, None, name, &patch).boxed()
        };
        call.now_or_never().expect("the in-memory cluster answers at once")
    }

    #[test]
    fn the_cluster_api_patches_metadata_and_spec_or_status_as_the_api_server_does() {
        use serde_json::json;
        let c = SimCluster::new(ManualClock::new(), 1);
        let mut n = node("a");
        n.metadata.labels = Some(BTreeMap::from([("team".into(), "blue".into()), ("tier".into(), "web".into())]));
        n.status = Some(Default::default());
        let created = c.create_obj(n).unwrap();
        let rv = created.metadata.resource_version.clone().unwrap();

        let p = json!({"metadata": {"labels": {"team": null, "zone": "z1"}},
                       "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                       "status": {"phase": "Running"}});
        let n = patched(&c, "a", p, false).unwrap();
        let labels = n.metadata.labels.clone().unwrap();
        assert_eq!(labels, BTreeMap::from([("tier".into(), "web".into()), ("zone".into(), "z1".into())]));
        assert_eq!(n.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key, "k");
        assert_eq!(n.status.as_ref().unwrap().phase, None, "the main resource does not write status");
        assert_ne!(n.metadata.resource_version.as_deref(), Some(rv.as_str()));

        let n = patched(&c, "a", json!({"status": {"phase": "Running"}, "metadata": {"labels": {"x": "y"}}}), true)
            .unwrap();
        assert_eq!(n.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
        assert!(!n.metadata.labels.as_ref().unwrap().contains_key("x"), "the status subresource writes only status");

        // A patch naming a resourceVersion applies to that version only.
        let stale = json!({"metadata": {"resourceVersion": rv, "labels": {"x": "y"}}});
        assert!(matches!(patched(&c, "a", stale, false), Err(ApiError::Conflict { .. })));
        let current = n.metadata.resource_version.clone().unwrap();
        let n =
            patched(&c, "a", json!({"metadata": {"resourceVersion": current, "labels": {"x": "y"}}}), false).unwrap();
        assert_eq!(n.metadata.labels.unwrap()["x"], "y");

        let ops = json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "k2", "effect": "NoExecute"}}]);
        let n = patched(&c, "a", ops, false).unwrap();
        let keys: Vec<String> = n.spec.unwrap().taints.unwrap().into_iter().map(|t| t.key).collect();
        assert_eq!(keys, ["k", "k2"]);
        let failing = json!([{"op": "test", "path": "/metadata/name", "value": "b"}]);
        assert!(matches!(patched(&c, "a", failing, false), Err(ApiError::Invalid { .. })));
        assert!(matches!(patched(&c, "nope", json!({}), false), Err(ApiError::NotFound { .. })));
        let renamed = patched(&c, "a", json!({"metadata": {"name": "b"}}), false);
        assert!(
            matches!(renamed, Err(ApiError::Invalid { ref message, .. }) if message.contains("immutable")),
            "{renamed:?}"
        );
    }

    #[test]
    fn a_patch_of_owned_metadata_alone_leaves_the_object_the_whole_object_patch_leaves() {
        use serde_json::json;
        // Two equal nodes; each patch once as metadata alone and once with `kind` named too,
        // which takes the whole-object path (encode, patch, decode).
        let c = SimCluster::new(ManualClock::new(), 1);
        for name in ["alone", "whole"] {
            let mut n = node(name);
            n.metadata.labels = Some(BTreeMap::from([("team".into(), "blue".into())]));
            n.metadata.finalizers = Some(vec!["karpenter.sh/termination".into()]);
            n.spec = Some(Default::default());
            n.status =
                Some(k8s_openapi::api::core::v1::NodeStatus { phase: Some("Running".into()), ..Default::default() });
            c.create_obj(n).unwrap();
        }
        let patches = [
            json!({"metadata": {"labels": {"team": null, "zone": "z1"}, "annotations": {"a": "1"}}}),
            json!({"metadata": {"finalizers": null}}),
            json!({"metadata": {"labels": null, "finalizers": ["x", "y"]}}),
        ];
        for p in patches {
            let alone = patched(&c, "alone", p.clone(), false).unwrap();
            let mut with_kind = p.clone();
            with_kind["kind"] = json!("Node");
            let whole = patched(&c, "whole", with_kind, false).unwrap();
            let strip = |mut n: Node| {
                n.metadata.name = None;
                n.metadata.uid = None;
                n.metadata.resource_version = None;
                n
            };
            assert_eq!(strip(alone), strip(whole), "{p}");
        }
        // A value of the wrong type is refused naming the field, and nothing is written.
        let before = c.get_obj::<Node>(None, "alone").unwrap();
        let bad = patched(&c, "alone", json!({"metadata": {"labels": {"a": 1}}}), false);
        assert!(
            matches!(bad, Err(ApiError::Invalid { ref message, .. }) if message.contains("metadata.labels.a")),
            "{bad:?}"
        );
        assert_eq!(c.get_obj::<Node>(None, "alone").unwrap(), before);
    }

    #[test]
    fn labels_that_are_not_kubernetes_labels_are_refused_by_every_write_naming_them() {
        use serde_json::json;
        let c = SimCluster::new(ManualClock::new(), 1);
        c.create_obj(node("a")).unwrap();
        let refused = |r: Result<Node, ApiError>, what: &str| {
            assert!(
                matches!(&r, Err(ApiError::Invalid { message, .. }) if message.contains("metadata.labels") && message.contains(what)),
                "{r:?}"
            );
        };
        // A patch of labels alone, a patch of more than labels, and a create.
        refused(patched(&c, "a", json!({"metadata": {"labels": {"bad key!": "x"}}}), false), "bad key!");
        refused(patched(&c, "a", json!({"kind": "Node", "metadata": {"labels": {"ok": "-x"}}}), false), "\"-x\"");
        let long = "v".repeat(64);
        refused(patched(&c, "a", json!({"metadata": {"labels": {"ok": long}}}), false), "longer than 63");
        let kind = crate::kinds::by_kind("Node").unwrap();
        let body = json!({"metadata": {"name": "b", "labels": {"example.com/a/b": "x"}}});
        let created = crate::rest::decode_body(kind, None, body);
        assert!(
            matches!(&created, Err(crate::rest::RestError::Invalid { causes, .. }) if causes[0].to_string().starts_with("metadata.labels")),
            "{created:?}"
        );
        assert!(c.get_obj::<Node>(None, "a").unwrap().metadata.labels.is_none(), "nothing was written");
        // Valid keys and values, a prefix included, are taken.
        let ok = patched(&c, "a", json!({"metadata": {"labels": {"example.com/team": "blue", "empty": ""}}}), false);
        assert_eq!(ok.unwrap().metadata.labels.unwrap().len(), 2);
    }
}
