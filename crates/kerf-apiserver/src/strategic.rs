//! Strategic merge patch (`application/strategic-merge-patch+json`), as the API server applies it
//! to the built-in kinds: maps merge key by key (`null` deletes a key); a list whose field has a
//! merge key (containers, env and volumes by `name`, container ports by `containerPort`, volume
//! mounts by `mountPath`, conditions by `type`, ...: the keys [`Shapes`] knows) merges item by item
//! on that key, and a set (finalizers) takes the union; any other list is replaced. The directives
//! kubectl writes are honoured: `$patch: replace | delete | merge`, `$setElementOrder/FIELD`,
//! `$deleteFromPrimitiveList/FIELD` and `$retainKeys`. Custom resources have no strategic merge
//! patch: the API server answers 415, and so does this one.

use serde_json::{Map, Value};

use crate::managed::shapes::{ListShape, Shapes};
use crate::rest::RestError;

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Applies the strategic merge patch `patch` to `doc`, an object of `kind` (`Scale` for the scale
/// subresource).
pub fn apply(kind: &str, doc: &mut Value, patch: &Value) -> Result<(), RestError> {
    let custom = crate::kinds::by_kind(kind).is_some_and(|k| k.custom.is_some());
    if custom || kerf_api::crd::definition(kind).is_some() {
        return Err(RestError::Unsupported(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                .to_string(),
        ));
    }
    let Value::Object(p) = patch else {
        return Err(RestError::BadRequest(format!("a strategic merge patch must be a JSON object, got {patch}")));
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let shapes = Shapes::of(kind);
    let mut names = Vec::new();
    if let Value::Object(live) = doc {
        merge_map(&shapes, &mut names, live, p)?;
    }
    Ok(())
}

fn bad(names: &[String], problem: impl std::fmt::Display) -> RestError {
    RestError::BadRequest(format!("strategic merge patch at {}: {problem}", display(names)))
}

fn display(names: &[String]) -> String {
    if names.is_empty() { ".".to_string() } else { names.join(".") }
}

/// The patch's own value for a field with nothing to merge into: directives and `null`s dropped.
fn plain(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter().filter(|(k, v)| !k.starts_with('$') && !v.is_null()).map(|(k, v)| (k.clone(), plain(v))).collect(),
        ),
        // A `{"$patch": "replace"}` marker or an item to delete has nothing to add.
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|i| {
                    let directive = i.get("$patch").and_then(Value::as_str);
                    directive != Some("delete") && !(directive.is_some() && i.as_object().is_some_and(|m| m.len() == 1))
                })
                .map(plain)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn directive<'a>(m: &'a Map<String, Value>, names: &[String]) -> Result<Option<&'a str>, RestError> {
    match m.get("$patch") {
        None => Ok(None),
        Some(Value::String(s)) if matches!(s.as_str(), "replace" | "delete" | "merge") => Ok(Some(s.as_str())),
        Some(other) => Err(bad(names, format!("unknown patch directive {other}"))),
    }
}

fn merge_map(
    shapes: &Shapes,
    names: &mut Vec<String>,
    live: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<(), RestError> {
    if directive(patch, names)? == Some("replace") {
        if let Value::Object(m) = plain(&Value::Object(patch.clone())) {
            *live = m;
        }
        return Ok(());
    }
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        names.push(k.clone());
        match v {
            Value::Null => {
                live.remove(k);
            }
            Value::Object(pm) => match directive(pm, names)? {
                Some("delete") => {
                    live.remove(k);
                }
                Some("replace") => {
                    live.insert(k.clone(), plain(v));
                }
                _ => match live.get_mut(k) {
                    Some(Value::Object(lm)) => merge_map(shapes, names, lm, pm)?,
                    _ => {
                        live.insert(k.clone(), plain(v));
                    }
                },
            },
            Value::Array(items) => {
                let current = live.remove(k);
                live.insert(k.clone(), merge_list(shapes, names, current, items)?);
            }
            other => {
                live.insert(k.clone(), other.clone());
            }
        }
        names.pop();
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_FROM)
            && let (Some(Value::Array(items)), Value::Array(gone)) = (live.get_mut(field), v)
        {
            items.retain(|i| !gone.contains(i));
        }
    }
    for (k, order) in patch {
        if let (Some(field), Value::Array(order)) = (k.strip_prefix(SET_ORDER), order) {
            names.push(field.to_string());
            let key = match shapes.list(names) {
                ListShape::Map(keys) => keys.first().copied(),
                _ => None,
            };
            names.pop();
            if let Some(Value::Array(items)) = live.get_mut(field) {
                reorder(items, order, key);
            }
        }
    }
    if let Some(keep) = patch.get("$retainKeys") {
        let Value::Array(keep) = keep else { return Err(bad(names, "$retainKeys must be a list")) };
        live.retain(|k, _| keep.iter().any(|n| n.as_str() == Some(k)));
    }
    Ok(())
}

/// The list `current` (absent: empty) with the patch's `items` merged in as the field's shape says.
fn merge_list(
    shapes: &Shapes,
    names: &mut Vec<String>,
    current: Option<Value>,
    items: &[Value],
) -> Result<Value, RestError> {
    let replace = items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let shape = shapes.list(names);
    let mut live = match current {
        Some(Value::Array(a)) if !replace => a,
        _ => Vec::new(),
    };
    match shape {
        _ if replace => live = items.iter().filter(|i| i.get("$patch").is_none()).map(plain).collect(),
        ListShape::Atomic => live = items.iter().map(plain).collect(),
        ListShape::Set => {
            for i in items {
                if !live.contains(i) {
                    live.push(i.clone());
                }
            }
        }
        ListShape::Map(keys) => {
            let key = keys.first().copied().unwrap_or("name");
            for item in items {
                let Value::Object(pm) = item else {
                    return Err(bad(names, format!("{item} is not an object with the merge key {key:?}")));
                };
                let Some(id) = pm.get(key).filter(|v| !v.is_null()) else {
                    return Err(bad(names, format!("{item} does not contain the declared merge key {key:?}")));
                };
                let at = live.iter().position(|l| l.get(key) == Some(id));
                match (directive(pm, names)?, at) {
                    (Some("delete"), Some(i)) => {
                        live.remove(i);
                    }
                    (Some("delete"), None) => {}
                    (Some("replace"), Some(i)) => live[i] = plain(item),
                    (_, Some(i)) => {
                        if let Value::Object(lm) = &mut live[i] {
                            merge_map(shapes, names, lm, pm)?;
                        }
                    }
                    (_, None) => live.push(plain(item)),
                }
            }
        }
    }
    Ok(Value::Array(live))
}

/// Puts the items named by `order` first, in its order (by `key` for a list of objects), and the
/// others after them as they were.
fn reorder(items: &mut [Value], order: &[Value], key: Option<&str>) {
    let id = |v: &Value| key.map_or_else(|| v.clone(), |k| v.get(k).cloned().unwrap_or(Value::Null));
    let ids: Vec<Value> = order.iter().map(id).collect();
    items.sort_by_key(|v| {
        let mine = id(v);
        ids.iter().position(|o| *o == mine).unwrap_or(usize::MAX)
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment() -> Value {
        json!({"metadata": {"name": "web", "finalizers": ["a"], "labels": {"app": "web"}},
            "spec": {"replicas": 1, "template": {"spec": {
                "containers": [
                    {"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "1"}},
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 80}]},
                    {"name": "log", "image": "busybox"}],
                "tolerations": [{"key": "x", "operator": "Exists"}]}}}})
    }

    fn patched(kind: &str, patch: Value) -> Value {
        let mut d = deployment();
        apply(kind, &mut d, &patch).unwrap();
        d
    }

    #[test]
    fn a_container_is_merged_by_name_keeping_what_the_patch_does_not_name() {
        // What `kubectl set image deployment/web web=nginx:2` sends.
        let d = patched(
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}),
        );
        let c = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], "nginx:2");
        assert_eq!(c[0]["resources"]["requests"]["cpu"], "1", "untouched fields stay");
        assert_eq!(c[1]["name"], "log", "the other container stays");
        // A new container is added; env merges by name; a port by containerPort.
        let d = patched(
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                    "ports": [{"containerPort": 443}]},
                {"name": "mesh", "image": "envoy"}]}}}}),
        );
        let c = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!(
            c[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(c[0]["ports"], json!([{"containerPort": 80}, {"containerPort": 443}]));
        assert_eq!(c[2]["name"], "mesh");
    }

    #[test]
    fn lists_without_a_merge_key_are_replaced_and_sets_take_the_union() {
        let d = patched(
            "Deployment",
            json!({"metadata": {"finalizers": ["b"]},
                "spec": {"template": {"spec": {"tolerations": [{"key": "y", "operator": "Exists"}]}}}}),
        );
        assert_eq!(d["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(d["spec"]["template"]["spec"]["tolerations"], json!([{"key": "y", "operator": "Exists"}]));
    }

    #[test]
    fn directives_delete_replace_order_and_retain_as_kubectl_writes_them() {
        // What `kubectl edit` / client-side apply send when a container and an env var go.
        let d = patched(
            "Deployment",
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"app": null}},
                "spec": {"template": {"spec": {
                    "$setElementOrder/containers": [{"name": "log"}, {"name": "web"}],
                    "containers": [{"name": "web", "$setElementOrder/env": [{"name": "B"}],
                        "env": [{"name": "A", "$patch": "delete"}]}]}}}}),
        );
        let c = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!((c[0]["name"].as_str(), c[1]["name"].as_str()), (Some("log"), Some("web")));
        assert_eq!(c[1]["env"], json!([{"name": "B", "value": "2"}]));
        assert_eq!(d["metadata"]["finalizers"], json!([]));
        assert_eq!(d["metadata"]["labels"], json!({}));
        let d = patched(
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "i"}]}}}}),
        );
        assert_eq!(d["spec"]["template"]["spec"]["containers"], json!([{"name": "only", "image": "i"}]));
        let d = patched("Deployment", json!({"spec": {"$retainKeys": ["replicas"], "replicas": 3}}));
        assert_eq!(d["spec"], json!({"replicas": 3}));
        let d = patched("Deployment", json!({"spec": {"template": {"$patch": "delete"}}}));
        assert!(d["spec"].get("template").is_none());
        // Into a list the object lacks: what is to be deleted is not added.
        let d = patched(
            "Deployment",
            json!({"spec": {"template": {"spec": {"volumes": [{"name": "a", "$patch": "delete"}, {"name": "b"}]}}}}),
        );
        assert_eq!(d["spec"]["template"]["spec"]["volumes"], json!([{"name": "b"}]));
    }

    #[test]
    fn a_custom_resource_or_an_item_without_its_merge_key_is_refused() {
        let mut d = json!({});
        let (code, _) = apply("NodePool", &mut d, &json!({"spec": {}})).unwrap_err().status();
        assert_eq!(code, 415);
        let mut d = deployment();
        let err =
            apply("Deployment", &mut d, &json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}))
                .unwrap_err();
        assert_eq!(err.status().0, 400);
        assert!(err.to_string().contains("spec.template.spec.containers"), "{err}");
    }

    #[test]
    fn a_nodes_addresses_merge_by_type_and_a_pods_readiness_gates_are_replaced() {
        let mut node = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "a"}]}});
        apply("Node", &mut node, &json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}))
            .unwrap();
        assert_eq!(
            node["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "a"}])
        );
        let mut pod = json!({"spec": {"readinessGates": [{"conditionType": "a"}, {"conditionType": "b"}]}});
        apply("Pod", &mut pod, &json!({"spec": {"readinessGates": [{"conditionType": "c"}]}})).unwrap();
        assert_eq!(pod["spec"]["readinessGates"], json!([{"conditionType": "c"}]));
    }
}
