//! OpenAPI v3 schemas of the three CRDs, generated from the types, fit for a CRD's
//! `openAPIV3Schema`: structural (every node typed, subschemas inlined, no `$ref`, `nullable`
//! instead of null types, no types or descriptions inside `anyOf` / `oneOf` except the
//! int-or-string form) and limited to the keywords `apiextensions.k8s.io/v1` accepts.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use crate::{EC2NodeClass, NodeClaim, NodePool, ec2nodeclass, nodeclaim, nodepool};

fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    structural(&mut value);
    if let Some(obj) = value.as_object_mut() {
        // The CRD names its kind; a title is noise there.
        obj.remove("title");
        // apiVersion, kind and metadata at the root belong to the API server: plain types, no
        // defaults (a default under the root `metadata` is rejected).
        if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
            for (field, type_) in [("apiVersion", "string"), ("kind", "string"), ("metadata", "object")] {
                if props.contains_key(field) {
                    props.insert(field.to_string(), json!({"type": type_}));
                }
            }
        }
    }
    value
}

/// The JSONSchemaProps keywords of `apiextensions.k8s.io/v1` (besides the `x-kubernetes-*`
/// extensions); anything else schemars emits (`deprecated`, `readOnly`, `examples`, ...) is
/// dropped, as the API server would reject or silently drop it.
const CRD_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "description",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "additionalProperties",
    "nullable",
    "example",
];

/// Whether `v` is the null alternative schemars emits for an `Option` (`{enum: [null],
/// nullable: true}` or `{type: null}`).
fn is_null_variant(v: &Value) -> bool {
    v.get("nullable") == Some(&Value::Bool(true)) && v.get("type").is_none()
        || v.get("enum") == Some(&json!([null]))
        || v.get("type") == Some(&json!("null"))
}

fn type_of(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

/// Rewrites one schema node (and its children) into the structural form.
fn structural(v: &mut Value) {
    let Some(obj) = v.as_object_mut() else { return };

    // `anyOf: [X, null]` (an Option of a non-trivial type): X, nullable.
    if let Some(Value::Array(alts)) = obj.get("anyOf")
        && alts.len() == 2
        && let Some(null_at) = alts.iter().position(is_null_variant)
    {
        let inner = alts[1 - null_at].clone();
        obj.remove("anyOf");
        if let Value::Object(inner) = inner {
            for (k, val) in inner {
                obj.entry(k).or_insert(val);
            }
        }
        obj.insert("nullable".into(), Value::Bool(true));
    }

    // `oneOf` of single-value string enums (a unit enum with documented variants): one enum.
    if let Some(Value::Array(alts)) = obj.get("oneOf")
        && alts.iter().all(|a| type_of(a) == Some("string") && a["enum"].as_array().is_some_and(|e| e.len() == 1))
    {
        let values: Vec<Value> = alts.iter().map(|a| a["enum"][0].clone()).collect();
        let docs: Vec<String> = alts
            .iter()
            .filter_map(|a| Some(format!("{}: {}", a["enum"][0].as_str()?, a.get("description")?.as_str()?)))
            .collect();
        obj.remove("oneOf");
        obj.insert("type".into(), json!("string"));
        obj.insert("enum".into(), Value::Array(values));
        if !docs.is_empty() && !obj.contains_key("description") {
            obj.insert("description".into(), json!(docs.join("\n")));
        }
    }

    // An integer-or-string (possibly nested one level by an untagged enum): the
    // `x-kubernetes-int-or-string` form, the only one where types may appear in `anyOf`.
    if let Some(Value::Array(alts)) = obj.get("anyOf") {
        let flat: Vec<&Value> = alts
            .iter()
            .flat_map(|a| match a.get("anyOf").and_then(Value::as_array) {
                Some(inner) => inner.iter().collect::<Vec<_>>(),
                None => vec![a],
            })
            .collect();
        let mut types: Vec<&str> = flat.iter().filter_map(|a| type_of(a)).collect();
        types.sort_unstable();
        if flat.len() == 2 && types == ["integer", "string"] {
            let pattern = flat.iter().find_map(|a| a.get("pattern").cloned());
            let description = alts.iter().find_map(|a| a.get("description").cloned());
            obj.remove("anyOf");
            obj.insert("anyOf".into(), json!([{"type": "integer"}, {"type": "string"}]));
            obj.insert("x-kubernetes-int-or-string".into(), Value::Bool(true));
            if let Some(p) = pattern {
                obj.entry("pattern").or_insert(p);
            }
            if let Some(d) = description {
                obj.entry("description").or_insert(d);
            }
        }
    }

    // A null among an enum's values (an optional unit enum): nullable instead.
    if let Some(Value::Array(values)) = obj.get_mut("enum")
        && values.iter().any(Value::is_null)
    {
        values.retain(|v| !v.is_null());
        obj.insert("nullable".into(), Value::Bool(true));
    }

    // Objects with declared properties prune unknown fields; `additionalProperties: false` is
    // not accepted next to them, and a boolean one is never needed.
    if obj.get("additionalProperties").is_some_and(Value::is_boolean) {
        obj.remove("additionalProperties");
    }
    obj.retain(|k, _| CRD_KEYWORDS.contains(&k.as_str()) || k.starts_with("x-kubernetes-"));

    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.values_mut().for_each(structural);
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = obj.get_mut(key) {
            structural(child);
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(alts)) = obj.get_mut(key) {
            alts.iter_mut().for_each(structural);
        }
    }
}

/// `(kind, schema)` for NodePool, NodeClaim, EC2NodeClass, CapacityBuffer, NodeOverlay,
/// ProvisioningRequest and CapacityQuota, in that order.
pub fn crd_schemas() -> Vec<(&'static str, Value)> {
    vec![
        (nodepool::KIND, schema_of::<NodePool>()),
        (nodeclaim::KIND, schema_of::<NodeClaim>()),
        (ec2nodeclass::KIND, schema_of::<EC2NodeClass>()),
        (crate::capacitybuffer::KIND, schema_of::<crate::CapacityBuffer>()),
        (crate::nodeoverlay::KIND, schema_of::<crate::NodeOverlay>()),
        (crate::provisioningrequest::KIND, schema_of::<crate::ProvisioningRequest>()),
        (crate::capacityquota::KIND, schema_of::<crate::CapacityQuota>()),
    ]
}

/// The schema of one kind (`NodePool`, `NodeClaim`, `EC2NodeClass`).
pub fn crd_schema(kind: &str) -> Option<Value> {
    crd_schemas().into_iter().find(|(k, _)| *k == kind).map(|(_, s)| s)
}

/// The file name of a kind's schema under `crds/` (`nodepools.karpenter.sh.schema.json`, `ec2nodeclasses.karpenter.k8s.aws.schema.json`).
pub fn schema_file_name(kind: &str) -> String {
    let group = match kind {
        ec2nodeclass::KIND => ec2nodeclass::GROUP,
        crate::capacitybuffer::KIND => crate::capacitybuffer::GROUP,
        crate::provisioningrequest::KIND => crate::provisioningrequest::GROUP,
        crate::capacityquota::KIND => crate::capacityquota::GROUP,
        _ => crate::labels::GROUP,
    };
    let singular = kind.to_ascii_lowercase();
    let plural = if singular.ends_with('s') { format!("{singular}es") } else { format!("{singular}s") };
    format!("{plural}.{group}.schema.json")
}

/// Every problem that keeps `schema` from being a structural CRD schema, as
/// `path: problem` lines (empty when it is one). Checks what the API server checks of the
/// generated parts: a type on every node (except int-or-string), no `type`, `description`,
/// `default`, `nullable` or `additionalProperties` under `anyOf` / `allOf` / `oneOf` / `not`
/// (beyond the int-or-string pair), no `$ref`, only known keywords, and no
/// `additionalProperties` beside `properties`.
pub fn structural_problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    check_node(schema, "", false, &mut problems);
    problems
}

fn check_node(v: &Value, path: &str, in_junctor: bool, problems: &mut Vec<String>) {
    let Some(obj) = v.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    for k in obj.keys() {
        if !CRD_KEYWORDS.contains(&k.as_str()) && !k.starts_with("x-kubernetes-") {
            problems.push(format!("{path}: unknown keyword {k:?}"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if in_junctor {
        for k in ["description", "default", "nullable", "additionalProperties"] {
            if obj.contains_key(k) {
                problems.push(format!("{path}: {k} inside a junctor"));
            }
        }
    } else if !obj.contains_key("type") && !int_or_string && !preserve {
        problems.push(format!("{path}: no type"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        problems.push(format!("{path}: additionalProperties beside properties"));
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, child) in props {
            check_node(child, &format!("{path}.{name}"), in_junctor, problems);
        }
    }
    if let Some(items) = obj.get("items") {
        check_node(items, &format!("{path}[]"), in_junctor, problems);
    }
    if let Some(extra) = obj.get("additionalProperties") {
        check_node(extra, &format!("{path}{{}}"), in_junctor, problems);
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(alts)) = obj.get(key) {
            for (i, alt) in alts.iter().enumerate() {
                let is_pair_type = int_or_string && key == "anyOf";
                let alt_path = format!("{path}/{key}[{i}]");
                if !is_pair_type && alt.get("type").is_some() {
                    problems.push(format!("{alt_path}: type inside a junctor"));
                }
                check_node(alt, &alt_path, true, problems);
            }
        }
    }
    if let Some(not) = obj.get("not") {
        check_node(not, &format!("{path}/not"), true, problems);
    }
}
