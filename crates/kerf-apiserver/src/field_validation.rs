//! Field validation, as the API server does it for the `fieldValidation` query parameter: a
//! body's fields that its kind's schema does not declare are refused (`Strict`, what kubectl
//! sends), dropped with a warning (`Warn`, the default) or dropped silently (`Ignore`). The
//! schemas are the OpenAPI documents' ([`crate::openapi`]), so what `kubectl explain` shows is
//! what is accepted. A CRD's schema prunes as the API server prunes structural schemas: an
//! object without declared properties keeps nothing unless it says
//! `x-kubernetes-preserve-unknown-fields`; a built-in free-form object (`fieldsV1`, a
//! `RawExtension`) keeps everything.

use serde_json::{Map, Value};

use crate::kinds::ResourceKind;
use crate::openapi::{Schemas, V3_REF};
use crate::rest::RestError;

/// What to do with fields the schema does not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    Strict,
    Warn,
    Ignore,
}

impl Directive {
    /// The `fieldValidation` query parameter (`Warn` when absent, as the API server).
    pub fn from_query(value: Option<&str>) -> Result<Self, RestError> {
        match value.unwrap_or("") {
            "" | "Warn" => Ok(Directive::Warn),
            "Strict" => Ok(Directive::Strict),
            "Ignore" => Ok(Directive::Ignore),
            other => Err(RestError::BadRequest(format!(
                "fieldValidation parameter unsupported: {other:?}: supported values are \"Ignore\", \"Warn\", \"Strict\""
            ))),
        }
    }
}

/// Applies `directive` to `body` (an object of `kind`): with `Strict`, the unknown fields are a
/// 400 naming each; otherwise they are dropped, and the answer is the warnings to send.
pub fn check(
    schemas: &Schemas,
    kind: &ResourceKind,
    directive: Directive,
    body: &mut Value,
) -> Result<Vec<String>, RestError> {
    let Some(root) = schemas.reference(kind) else { return Ok(Vec::new()) };
    let mut walk = Walk { schemas, found: Vec::new() };
    walk.walk(&root, false, body, "", 0);
    if walk.found.is_empty() {
        return Ok(Vec::new());
    }
    let unknown: Vec<String> = walk.found.iter().map(|f| format!("unknown field {f:?}")).collect();
    match directive {
        Directive::Strict => Err(RestError::BadRequest(format!(
            "{} in version {:?} cannot be handled as a {}: strict decoding error: {}",
            kind.kind,
            kind.version,
            kind.kind,
            unknown.join(", ")
        ))),
        Directive::Warn => Ok(unknown),
        Directive::Ignore => Ok(Vec::new()),
    }
}

/// How deep a body is followed (bodies are at most 128 deep, see `http::parse_json`).
const MAX_DEPTH: usize = 130;

struct Walk<'a> {
    schemas: &'a Schemas,
    /// Unknown fields found (and removed), as paths (`spec.containers[0].foo`).
    found: Vec<String>,
}

/// A schema with its references and `allOf` parts followed: the parts, each marked whether it
/// was reached through a reference (a built-in definition, or ObjectMeta in a CRD's schema).
fn parts<'s>(schemas: &'s Schemas, schema: &'s Value, via_ref: bool, out: &mut Vec<(&'s Value, bool)>, depth: usize) {
    if depth > 16 {
        return;
    }
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        if let Some(def) = schemas.get(r.trim_start_matches(V3_REF)) {
            parts(schemas, def, true, out, depth + 1);
        }
        return;
    }
    out.push((schema, via_ref));
    for sub in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        parts(schemas, sub, via_ref, out, depth + 1);
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

impl Walk<'_> {
    fn walk(&mut self, schema: &Value, via_ref: bool, v: &mut Value, path: &str, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let mut ps = Vec::new();
        parts(self.schemas, schema, via_ref, &mut ps, 0);
        match v {
            Value::Object(m) => self.object(&ps, m, path, depth),
            Value::Array(items) => {
                let Some((item, r)) = ps.iter().find_map(|(p, r)| p.get("items").map(|i| (i, *r))) else { return };
                for (i, x) in items.iter_mut().enumerate() {
                    self.walk(item, r, x, &format!("{path}[{i}]"), depth + 1);
                }
            }
            _ => {}
        }
    }

    fn object(&mut self, ps: &[(&Value, bool)], m: &mut Map<String, Value>, path: &str, depth: usize) {
        let preserve = ps.iter().any(|(p, _)| flag(p, "x-kubernetes-preserve-unknown-fields"));
        let embedded = ps.iter().any(|(p, _)| flag(p, "x-kubernetes-embedded-resource"));
        let shaped = ps.iter().any(|(p, _)| p.get("properties").is_some() || p.get("additionalProperties").is_some());
        let typed_object = ps.iter().any(|(p, _)| p.get("type").and_then(Value::as_str) == Some("object"));
        // A free-form object: a built-in one keeps what it has; so does a schema that does not
        // say it is an object (an int-or-string, say).
        if !shaped && (ps.iter().any(|(_, r)| *r) || !typed_object) {
            return;
        }
        let mut unknown = Vec::new();
        for (key, value) in m.iter_mut() {
            // Strategic merge patch directives (`$patch`, `$setElementOrder/...`).
            if key.starts_with('$') {
                continue;
            }
            let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            let property =
                ps.iter().find_map(|(p, r)| p.get("properties").and_then(|props| props.get(key)).map(|s| (s, *r)));
            let additional = ps.iter().find_map(|(p, r)| p.get("additionalProperties").map(|s| (s, *r)));
            match (property, additional) {
                (Some((s, r)), _) => self.walk(s, r, value, &child, depth + 1),
                (None, Some((Value::Bool(true), _))) => {}
                (None, Some((s, r))) if s.is_object() => self.walk(s, r, value, &child, depth + 1),
                _ if preserve => {}
                _ if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") => {}
                _ => unknown.push((key.clone(), child)),
            }
        }
        for (key, child) in unknown {
            m.remove(&key);
            self.found.push(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::custom::Registry;
    use crate::kinds::by_kind;

    fn checked(kind: &str, directive: Directive, mut body: Value) -> (Result<Vec<String>, RestError>, Value) {
        let schemas = Schemas::of(&Registry::default());
        let r = check(&schemas, by_kind(kind).unwrap(), directive, &mut body);
        (r, body)
    }

    #[test]
    fn strict_refuses_every_unknown_field_of_a_built_in_kind_naming_its_path() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labelz": {}},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyy": "x"}]}});
        let (r, _) = checked("Pod", Directive::Strict, pod);
        let Err(RestError::BadRequest(m)) = r else { panic!("expected a bad request: {r:?}") };
        assert_eq!(
            m,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"metadata.labelz\", unknown field \"spec.containers[0].imagePullPolicyy\""
        );
    }

    #[test]
    fn warn_drops_unknown_fields_and_keeps_free_form_ones() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c",
            "managedFields": [{"manager": "m", "fieldsV1": {"f:data": {}}}]}, "data": {"a": "b"}, "extra": 1});
        let (r, body) = checked("ConfigMap", Directive::Warn, cm);
        assert_eq!(r.unwrap(), ["unknown field \"extra\""]);
        assert!(body.get("extra").is_none());
        assert_eq!(body["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:data": {}}));
        assert_eq!(body["data"], json!({"a": "b"}));
    }

    #[test]
    fn a_crd_kind_refuses_fields_its_schema_does_not_declare() {
        let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"disruption": {"consolidateAftr": "1m"}, "template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}}}}});
        let (r, _) = checked("NodePool", Directive::Strict, pool);
        let Err(RestError::BadRequest(m)) = r else { panic!("expected a bad request: {r:?}") };
        assert!(m.ends_with("strict decoding error: unknown field \"spec.disruption.consolidateAftr\""), "{m}");
    }
}
