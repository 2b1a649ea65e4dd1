//! What a CRD's structural schema does to the values of its objects, as the API server does it
//! on every write (create, update, patch, apply): fills in the defaults it declares for fields an
//! object leaves out ([`apply_defaults`]), then checks each value's type
//! (`x-kubernetes-int-or-string` taking either), `enum`, `required`, `minimum` / `maximum`,
//! `minLength` / `maxLength` and `minItems` / `maxItems`, each failure named by its field path in
//! the API server's words ([`problems`]). `null` passes (the API server prunes a null it does
//! not allow); `pattern`, `format` and the CEL rules (`x-kubernetes-validations`) are not
//! checked. kerf's own kinds are checked by their types and rules instead
//! ([`crate::kinds::Typed`]); the built-in kinds' defaults are the API server's code, not their
//! schemas, and are not applied.

use kerf_api::FieldError;
use serde_json::Value;

/// Deepest nesting followed (bodies are at most 128 deep).
const MAX_DEPTH: usize = 130;

/// The problems of `body` against `schema` (a CRD version's `openAPIV3Schema`).
pub fn problems(schema: &Value, body: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    check(schema, body, "", 0, &mut out);
    out
}

/// Fills in the defaults `schema` declares for fields `body` leaves out, in every object the
/// body has (a defaulted object is defaulted in turn).
pub fn apply_defaults(schema: &Value, body: &mut Value) {
    default_walk(schema, body, 0);
}

fn default_walk(schema: &Value, v: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut ps = Vec::new();
    parts(schema, &mut ps, 0);
    match v {
        Value::Object(m) => {
            for p in &ps {
                for (key, sub) in p.get("properties").and_then(Value::as_object).into_iter().flatten() {
                    if let (false, Some(d)) = (m.contains_key(key), sub.get("default")) {
                        m.insert(key.clone(), d.clone());
                    }
                    if let Some(child) = m.get_mut(key) {
                        default_walk(sub, child, depth + 1);
                    }
                }
                if let Some(additional) = p.get("additionalProperties").filter(|a| a.is_object()) {
                    for child in m.values_mut() {
                        default_walk(additional, child, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = ps.iter().find_map(|p| p.get("items")) {
                for x in items {
                    default_walk(item, x, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// A schema with its reference and `allOf` parts followed.
fn parts<'s>(schema: &'s Value, out: &mut Vec<&'s Value>, depth: usize) {
    if depth > 16 {
        return;
    }
    // A reference is a built-in type (ObjectMeta): the API server's own code checks it.
    if schema.get("$ref").is_some() {
        return;
    }
    out.push(schema);
    for sub in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        parts(sub, out, depth + 1);
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn fits(type_: &str, v: &Value) -> bool {
    match type_ {
        "number" => v.is_number(),
        other => type_name(v) == other,
    }
}

fn check(schema: &Value, v: &Value, path: &str, depth: usize, out: &mut Vec<FieldError>) {
    if depth > MAX_DEPTH || v.is_null() {
        return;
    }
    let mut ps = Vec::new();
    parts(schema, &mut ps, 0);
    let field = if path.is_empty() { "<root>" } else { path };
    let shown = |v: &Value| if v.is_string() { v.to_string() } else { type_name(v).to_string() };
    for p in &ps {
        let int_or_string = p.get("x-kubernetes-int-or-string").and_then(Value::as_bool).unwrap_or(false);
        if let Some(t) = p.get("type").and_then(Value::as_str)
            && !fits(t, v)
            && !(int_or_string && (v.is_string() || fits("integer", v)))
        {
            out.push(FieldError::new(
                field,
                format!("Invalid value: {:?}: {field} in body must be of type {t}: {:?}", type_name(v), type_name(v)),
            ));
            return;
        }
        if let Some(allowed) = p.get("enum").and_then(Value::as_array)
            && !allowed.contains(v)
        {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            out.push(FieldError::new(
                field,
                format!("Unsupported value: {}: supported values: {}", shown(v), list.join(", ")),
            ));
        }
        let bound = |k: &str| p.get(k).and_then(Value::as_f64);
        if let Some(n) = v.as_f64() {
            if let Some(min) = bound("minimum").filter(|m| n < *m) {
                out.push(FieldError::new(
                    field,
                    format!("Invalid value: {v}: {field} in body should be greater than or equal to {min}"),
                ));
            }
            if let Some(max) = bound("maximum").filter(|m| n > *m) {
                out.push(FieldError::new(
                    field,
                    format!("Invalid value: {v}: {field} in body should be less than or equal to {max}"),
                ));
            }
        }
        let count = |k: &str| p.get(k).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
        if let Some(s) = v.as_str() {
            let len = s.chars().count();
            if let Some(max) = count("maxLength").filter(|m| len > *m) {
                out.push(FieldError::new(field, format!("Too long: may not be more than {max} bytes")));
            }
            if let Some(min) = count("minLength").filter(|m| len < *m) {
                out.push(FieldError::new(
                    field,
                    format!("Invalid value: {v}: {field} in body should be at least {min} chars long"),
                ));
            }
        }
        if let Some(items) = v.as_array() {
            if let Some(max) = count("maxItems").filter(|m| items.len() > *m) {
                out.push(FieldError::new(field, format!("Too many: {}: must have at most {max} items", items.len())));
            }
            if let Some(min) = count("minItems").filter(|m| items.len() < *m) {
                out.push(FieldError::new(
                    field,
                    format!("Invalid value: {}: {field} in body should have at least {min} items", items.len()),
                ));
            }
            if let Some(item) = p.get("items") {
                for (i, x) in items.iter().enumerate() {
                    check(item, x, &format!("{path}[{i}]"), depth + 1, out);
                }
            }
        }
        if let Some(m) = v.as_object() {
            for r in p.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
                if !m.contains_key(r) {
                    let at = if path.is_empty() { r.to_string() } else { format!("{path}.{r}") };
                    out.push(FieldError::new(at, "Required value"));
                }
            }
            for (key, child) in m {
                let at = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                if let Some(s) = p.get("properties").and_then(|props| props.get(key)) {
                    check(s, child, &at, depth + 1, out);
                } else if let Some(s) = p.get("additionalProperties").filter(|a| a.is_object()) {
                    check(s, child, &at, depth + 1, out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::clock::ManualClock;
    use serde_json::json;

    use super::*;
    use crate::cluster::SimCluster;
    use crate::rest::Rest;

    #[test]
    fn defaults_fill_what_an_object_leaves_out_and_keep_what_it_sets() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "default": {},
            "properties": {"mode": {"type": "string", "default": "Fast"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"weight": {"type": "integer", "default": 1}}}}}}}});
        let mut a = json!({});
        apply_defaults(&schema, &mut a);
        assert_eq!(a, json!({"spec": {"mode": "Fast"}}));
        let mut b = json!({"spec": {"mode": "Slow", "items": [{}, {"weight": 5}]}});
        apply_defaults(&schema, &mut b);
        assert_eq!(b, json!({"spec": {"mode": "Slow", "items": [{"weight": 1}, {"weight": 5}]}}));
    }

    #[test]
    fn a_crd_objects_values_are_checked_against_its_schema_with_the_api_servers_wording() {
        let cluster = Arc::new(SimCluster::new(ManualClock::new(), 1));
        let rest = Rest::new(cluster.clone());
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "queues.values.example.com"},
            "spec": {"group": "values.example.com", "scope": "Cluster", "names": {"kind": "ValueQueue", "plural": "queues"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                        "quota": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}}}}}}}}]}});
        rest.create(crate::kinds::by_kind("CustomResourceDefinition").unwrap(), None, crd).unwrap();
        let kind = cluster.kind_at("values.example.com", "v1", "queues").unwrap();
        let schema = &kind.custom.unwrap().schema;
        let check = |spec: Value| -> Vec<String> {
            problems(schema, &json!({"spec": spec})).iter().map(ToString::to_string).collect()
        };
        assert!(check(json!({"size": 2, "mode": "Fast", "quota": "10Gi", "tags": ["a"]})).is_empty());
        assert!(check(json!({"size": 2, "quota": 10})).is_empty(), "an int-or-string takes an integer");
        assert_eq!(check(json!({"mode": "Fast"})), ["spec.size: Required value"]);
        assert_eq!(
            check(json!({"size": 0, "mode": "Quick", "tags": ["a", "b", "c"]})),
            [
                "spec.mode: Unsupported value: \"Quick\": supported values: \"Fast\", \"Slow\"",
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
                "spec.tags: Too many: 3: must have at most 2 items",
            ]
        );
        assert_eq!(
            check(json!({"size": "two"})),
            ["spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""]
        );
    }
}
