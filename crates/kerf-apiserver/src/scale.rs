//! The scale subresource (`autoscaling/v1` Scale) of the kinds that have one: Deployments,
//! ReplicaSets and StatefulSets by `spec.replicas`, and a CRD's declared replica paths (a static
//! NodePool's `spec.replicas` and `status.nodes`, or those of a CRD a client created).

use kerf_api::FieldError;
use serde_json::{Value, json};

use crate::kinds::ResourceKind;
use crate::rest::{PatchType, Rest, RestError, apply_patch, check_transition, invalid};
use crate::writes::Mode;

impl Rest {
    /// The `autoscaling/v1` Scale of a Deployment or ReplicaSet.
    pub fn get_scale(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, RestError> {
        if !kind.scale {
            return Err(RestError::NoSuchPath);
        }
        Ok(scale_of_kind(kind, &self.get(kind, namespace, name)?))
    }

    /// PUT (`patch` = None, `body` the Scale) or PATCH of the scale subresource.
    pub fn update_scale(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        body: &Value,
        patch_type: Option<PatchType>,
    ) -> Result<Value, RestError> {
        self.update_scale_by(kind, namespace, name, body, patch_type, None)
    }

    /// [`Rest::update_scale`], recording `writer`'s fields when there is one.
    pub(crate) fn update_scale_by(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        body: &Value,
        patch_type: Option<PatchType>,
        writer: Option<&crate::managed::Writer>,
    ) -> Result<Value, RestError> {
        if !kind.scale {
            return Err(RestError::NoSuchPath);
        }
        let current = self.get(kind, namespace, name)?;
        let scale = match patch_type {
            None => body.clone(),
            Some(pt) => {
                let mut s = scale_of_kind(kind, &current);
                apply_patch(&mut s, "Scale", pt, body)?;
                s
            }
        };
        let replicas = scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .filter(|r| (0..=i64::from(i32::MAX)).contains(r))
            .ok_or_else(|| {
                invalid(kind, name, vec![FieldError::new("spec.replicas", "must be a non-negative integer")])
            })?;
        let mut doc = current.clone();
        let path = kind.custom.and_then(|c| c.scale.as_ref()).map_or("/spec/replicas", |s| s.spec_replicas.as_str());
        let mut at = &mut doc;
        for seg in path.split('/').skip(1) {
            if !(at.is_object() || at.is_null()) {
                let field = path.trim_start_matches('/').replace('/', ".");
                return Err(invalid(kind, name, vec![FieldError::new(field, "is not an object")]));
            }
            at = &mut at[seg];
        }
        *at = json!(replicas);
        if let Some(rv) = scale.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
            doc["metadata"]["resourceVersion"] = json!(rv);
        }
        if let Some(w) = writer {
            crate::managed::record_update(kind.kind, kind.status, Some(&current), &mut doc, w);
        }
        let obj = self.decode(kind, namespace, doc)?;
        check_transition(&self.cluster, kind, namespace, name, &obj)?;
        let written = self.cluster.write_stored_as(kind.kind, obj, Mode::Spec, self.commit)?.to_json(kind);
        Ok(scale_of_kind(kind, &written))
    }
}

/// The Scale view of an object of `kind`: a CRD's declared replica paths (a NodePool's node
/// count is `status.nodes`), else a workload's.
fn scale_of_kind(kind: &ResourceKind, obj: &Value) -> Value {
    let mut scale = scale_of(obj);
    if let Some(s) = kind.custom.and_then(|c| c.scale.as_ref()) {
        scale["spec"]["replicas"] = obj.pointer(&s.spec_replicas).cloned().unwrap_or(json!(0));
        scale["status"]["replicas"] = obj.pointer(&s.status_replicas).cloned().unwrap_or(json!(0));
    } else if let Some(s) = kerf_api::crd::definition(kind.kind).and_then(|d| d.scale) {
        let pointer = |path: &str| path.replace('.', "/");
        scale["spec"]["replicas"] = obj.pointer(&pointer(s.spec_replicas_path)).cloned().unwrap_or(json!(0));
        scale["status"]["replicas"] = obj.pointer(&pointer(s.status_replicas_path)).cloned().unwrap_or(json!(0));
    }
    scale
}

/// The Scale view of a scalable object.
fn scale_of(obj: &Value) -> Value {
    let m = &obj["metadata"];
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|l| l.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","))
        .unwrap_or_default();
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}
