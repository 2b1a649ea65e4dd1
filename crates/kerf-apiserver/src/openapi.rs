//! The OpenAPI documents: `/openapi/v2` (every kind) and `/openapi/v3` (its index, and one
//! document per group version), carrying each served kind's schema as `kubectl explain` and
//! field validation read them. Built-in kinds' schemas are k8s-openapi's (generated from the
//! Kubernetes OpenAPI document); a CRD's kinds carry its `openAPIV3Schema`, named and marked as
//! the API server names and marks them (`io.x-k8s.kueue.v1beta1.ClusterQueue`, with
//! `x-kubernetes-group-version-kind`, and `metadata` as ObjectMeta).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::custom::Registry;
use crate::discovery::{MAJOR, MINOR};
use crate::kinds::{KINDS, ResourceKind, SchemaSource};

pub(crate) const V3_REF: &str = "#/components/schemas/";
const V2_REF: &str = "#/definitions/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// `api/v1` or `apis/GROUP/VERSION`: a group version's place under `/openapi/v3`.
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// The schema name of a CRD's kind as the API server gives it: the group reversed, then the
/// version and kind (`kueue.x-k8s.io`, `v1beta1`, `ClusterQueue` ->
/// `io.x-k8s.kueue.v1beta1.ClusterQueue`).
fn crd_schema_name(k: &ResourceKind) -> String {
    let group: Vec<&str> = k.group.split('.').rev().collect();
    format!("{}.{}.{}", group.join("."), k.version, k.kind)
}

/// The GVK extension of a kind's schema.
fn gvk(k: &ResourceKind) -> Value {
    json!({"group": k.group, "version": k.version, "kind": k.kind})
}

/// Schemas of the built-in kinds and the definitions they reference, by name, and each kind's
/// schema name. Made once: they depend on nothing a client changes.
struct Builtin {
    schemas: Map<String, Value>,
    names: Vec<(&'static ResourceKind, String)>,
}

fn builtin() -> &'static Builtin {
    static BUILTIN: OnceLock<Builtin> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        let mut generator = SchemaSettings::openapi3().with(|s| s.meta_schema = None).into_generator();
        let mut names = Vec::new();
        let mut crds = Vec::new();
        for k in KINDS {
            match k.schema {
                SchemaSource::Type(f) => {
                    let reference = f(&mut generator).to_value();
                    let name = reference["$ref"].as_str().unwrap_or("").trim_start_matches(V3_REF).to_string();
                    names.push((k, name));
                }
                SchemaSource::Crd => {
                    if let Some(def) = kerf_api::crd::definition(k.kind) {
                        let crd = def.custom_resource_definition();
                        let schema =
                            crd.pointer("/spec/versions/0/schema/openAPIV3Schema").cloned().unwrap_or(json!({}));
                        crds.push((k, schema));
                    }
                }
            }
        }
        let _ = generator.subschema_for::<ObjectMeta>();
        let _ = generator.subschema_for::<ListMeta>();
        let mut schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
        for (k, name) in &names {
            if let Some(s) = schemas.get_mut(name).and_then(Value::as_object_mut) {
                s.insert("x-kubernetes-group-version-kind".to_string(), json!([gvk(k)]));
                // Every object has metadata; the API server's documents do not call it required.
                if let Some(Value::Array(required)) = s.get_mut("required") {
                    required.retain(|r| r != "metadata");
                    if required.is_empty() {
                        s.remove("required");
                    }
                }
            }
        }
        for (k, schema) in crds {
            let name = crd_schema_name(k);
            names.push((k, name.clone()));
            schemas.insert(name, crd_schema(k, schema));
        }
        for (k, name) in &names {
            schemas.entry(format!("{name}List")).or_insert_with(|| list_schema(k, name));
        }
        Builtin { schemas, names }
    })
}

/// The schema of a list of `k` (`PodList`), whose items are the schema `item`.
fn list_schema(k: &ResourceKind, item: &str) -> Value {
    json!({
        "description": format!("{}List is a list of {}.", k.kind, k.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
            "items": {"type": "array", "description": format!("List of {}.", k.plural), "items": {"$ref": format!("{V3_REF}{item}")}},
            "metadata": {"allOf": [{"$ref": format!("{V3_REF}{LIST_META}")}], "description": "Standard list metadata."},
        },
        "x-kubernetes-group-version-kind": [{"group": k.group, "version": k.version, "kind": format!("{}List", k.kind)}],
    })
}

/// A CRD's schema as the documents carry it: metadata is ObjectMeta, the GVK is marked.
pub(crate) fn crd_schema(k: &ResourceKind, mut schema: Value) -> Value {
    if let Some(s) = schema.as_object_mut() {
        let props = s.entry("properties").or_insert_with(|| json!({}));
        if let Some(props) = props.as_object_mut() {
            props.insert(
                "metadata".to_string(),
                json!({"allOf": [{"$ref": format!("{V3_REF}{OBJECT_META}")}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
            );
            for (field, text) in [
                ("apiVersion", "APIVersion defines the versioned schema of this representation of an object."),
                ("kind", "Kind is a string value representing the REST resource this object represents."),
            ] {
                props.insert(field.to_string(), json!({"type": "string", "description": text}));
            }
        }
        s.insert("x-kubernetes-group-version-kind".to_string(), json!([gvk(k)]));
    }
    schema
}

/// The schemas of every served kind: the built-in ones and those of the CRDs clients created.
pub struct Schemas {
    builtin: &'static Builtin,
    /// Each kind a CRD serves with its schema name, and those schemas by name (as the
    /// documents carry them: [`crd_schema`] was applied when the CRD was registered).
    custom_names: Vec<(&'static ResourceKind, String)>,
    custom: BTreeMap<String, Arc<Value>>,
}

impl Schemas {
    /// The built-in kinds' schemas and those of the kinds `custom` serves.
    pub fn of(custom: &Registry) -> Schemas {
        let mut out = Schemas { builtin: builtin(), custom_names: Vec::new(), custom: BTreeMap::new() };
        for k in custom.kinds() {
            let name = crd_schema_name(k);
            if let Some(schema) = custom.schema(k) {
                out.custom.insert(name.clone(), schema);
            }
            out.custom.insert(format!("{name}List"), Arc::new(list_schema(k, &name)));
            out.custom_names.push((k, name));
        }
        out
    }

    /// Every served kind with its schema name.
    pub fn names(&self) -> impl Iterator<Item = &(&'static ResourceKind, String)> {
        self.builtin.names.iter().chain(&self.custom_names)
    }

    /// The schema called `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.custom.get(name).map(|s| &**s).or_else(|| self.builtin.schemas.get(name))
    }

    /// Every schema by name.
    pub fn all(&self) -> Map<String, Value> {
        let mut all = self.builtin.schemas.clone();
        all.extend(self.custom.iter().map(|(k, v)| (k.clone(), (**v).clone())));
        all
    }

    /// The schema of `kind`, if it has one.
    pub fn of_kind(&self, kind: &ResourceKind) -> Option<&Value> {
        let (_, name) = self.names().find(|(k, _)| std::ptr::eq(*k, kind))?;
        self.get(name)
    }

    /// A reference to the schema of `kind`, if it has one.
    pub fn reference(&self, kind: &ResourceKind) -> Option<Value> {
        let (_, name) = self.names().find(|(k, _)| std::ptr::eq(*k, kind))?;
        Some(json!({"$ref": format!("{V3_REF}{name}")}))
    }

    /// The schemas `names` reference, transitively, with those named.
    fn closure<'a>(&self, names: impl Iterator<Item = &'a str>) -> Map<String, Value> {
        let mut out = Map::new();
        let mut todo: Vec<String> = names.map(str::to_string).collect();
        while let Some(name) = todo.pop() {
            if out.contains_key(&name) {
                continue;
            }
            let Some(schema) = self.get(&name) else { continue };
            refs(schema, &mut |r| todo.push(r.to_string()));
            out.insert(name, schema.clone());
        }
        out
    }
}

/// Calls `f` with the name of each `$ref` in `v`.
fn refs(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                f(r.trim_start_matches(V3_REF));
            }
            m.values().for_each(|x| refs(x, f));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, f)),
        _ => {}
    }
}

/// The object paths of `k` and their operations, marked with the kind and the query
/// parameters the server takes (`fieldValidation` among them, so kubectl leaves validation to
/// the server), in OpenAPI v3 (`v3`) or v2 form.
fn paths_of(k: &ResourceKind, schema_ref: &str, v3: bool) -> Vec<(String, Value)> {
    let params: Vec<Value> = ["fieldValidation", "fieldManager", "dryRun"]
        .iter()
        .map(|n| {
            if v3 {
                json!({"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
            } else {
                json!({"name": n, "in": "query", "type": "string", "uniqueItems": true})
            }
        })
        .collect();
    let response = if v3 {
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}})
    } else {
        json!({"200": {"description": "OK", "schema": {"$ref": schema_ref}}})
    };
    let list_ref = format!("{schema_ref}List");
    let list_response = if v3 {
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": list_ref}}}}})
    } else {
        json!({"200": {"description": "OK", "schema": {"$ref": list_ref}}})
    };
    let op = |id: &str, action: &str| {
        json!({
            "operationId": format!("{id}{}", k.kind),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(k),
            "parameters": params,
            "responses": if action == "list" { &list_response } else { &response },
        })
    };
    let prefix =
        if k.group.is_empty() { format!("/api/{}", k.version) } else { format!("/apis/{}/{}", k.group, k.version) };
    let base = if k.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", k.plural)
    } else {
        format!("{prefix}/{}", k.plural)
    };
    let mut out = vec![
        (base.clone(), json!({"post": op("create", "post"), "get": op("list", "list")})),
        (
            format!("{base}/{{name}}"),
            json!({"get": op("read", "get"), "put": op("replace", "put"), "patch": op("patch", "patch"), "delete": op("delete", "delete")}),
        ),
    ];
    if k.status {
        out.push((
            format!("{base}/{{name}}/status"),
            json!({"get": op("readStatus", "get"), "put": op("replaceStatus", "put"), "patch": op("patchStatus", "patch")}),
        ));
    }
    out
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": format!("v{MAJOR}.{MINOR}.0-kerf")})
}

/// The OpenAPI v3 document of one group version, or `None` when nothing is served there.
pub fn v3_group_version(schemas: &Schemas, group: &str, version: &str) -> Option<Value> {
    let kinds: Vec<&(&ResourceKind, String)> =
        schemas.names().filter(|(k, _)| k.group == group && k.version == version).collect();
    if kinds.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    for (k, name) in &kinds {
        paths.extend(paths_of(k, &format!("{V3_REF}{name}"), true));
    }
    let lists: Vec<String> = kinds.iter().map(|(_, n)| format!("{n}List")).collect();
    let components = schemas.closure(kinds.iter().map(|(_, n)| n.as_str()).chain(lists.iter().map(String::as_str)));
    Some(json!({"openapi": "3.0.0", "info": info(), "paths": paths, "components": {"schemas": components}}))
}

/// A short, stable digest of a document: its URL's `hash`, which changes when it does.
fn digest(v: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

/// `/openapi/v3`: where each group version's document is, with its digest.
pub fn v3_root(schemas: &Schemas) -> Value {
    let mut gvs: BTreeMap<String, (&str, &str)> = BTreeMap::new();
    for (k, _) in schemas.names() {
        gvs.entry(gv_path(k.group, k.version)).or_insert((k.group, k.version));
    }
    let paths: Map<String, Value> = gvs
        .into_iter()
        .filter_map(|(path, (g, v))| {
            let doc = v3_group_version(schemas, g, v)?;
            let url = format!("/openapi/v3/{path}?hash={}", digest(&doc));
            Some((path, json!({"serverRelativeURL": url})))
        })
        .collect();
    json!({"paths": paths})
}

/// A v3 schema in v2 form: references under `#/definitions/`, a lone `allOf` reference as the
/// reference itself, no `nullable`.
fn to_v2(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(all)) = m.get("allOf")
                && let [only] = all.as_slice()
                && only.get("$ref").is_some()
            {
                let only = only.clone();
                m.remove("allOf");
                if let Some(r) = only.get("$ref") {
                    m.insert("$ref".to_string(), r.clone());
                }
            }
            m.remove("nullable");
            if let Some(Value::String(r)) = m.get_mut("$ref") {
                *r = r.replace(V3_REF, V2_REF);
            }
            m.values_mut().for_each(to_v2);
        }
        Value::Array(a) => a.iter_mut().for_each(to_v2),
        _ => {}
    }
}

/// `/openapi/v2`: every kind's paths and schemas in one Swagger 2.0 document.
pub fn v2(schemas: &Schemas) -> Value {
    let mut paths = Map::new();
    for (k, name) in schemas.names() {
        paths.extend(paths_of(k, &format!("{V2_REF}{name}"), false));
    }
    let mut definitions = Value::Object(schemas.all());
    to_v2(&mut definitions);
    json!({"swagger": "2.0", "info": info(), "paths": paths, "definitions": definitions})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_document_carries_the_pod_schema_with_its_group_version_kind_and_references() {
        let s = Schemas::of(&Registry::default());
        let doc = v3_group_version(&s, "", "v1").unwrap();
        let pod = &doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
        assert_eq!(pod["x-kubernetes-group-version-kind"], json!([{"group": "", "version": "v1", "kind": "Pod"}]));
        assert!(pod.get("required").is_none(), "{}", pod["required"]);
        // Every reference resolves within the document.
        refs(&doc, &mut |r| assert!(doc["components"]["schemas"].get(r).is_some(), "{r} is not in the document"));
        let spec = &doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"];
        assert!(spec["properties"]["containers"]["description"].as_str().is_some_and(|d| d.contains("containers")));
        assert!(
            doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]["parameters"]
                .to_string()
                .contains("fieldValidation")
        );
    }

    #[test]
    fn kerfs_crds_are_named_as_the_api_server_names_them_and_v2_references_definitions() {
        let s = Schemas::of(&Registry::default());
        let doc = v3_group_version(&s, "karpenter.sh", "v1").unwrap();
        let pool = &doc["components"]["schemas"]["sh.karpenter.v1.NodePool"];
        assert!(pool["properties"]["spec"]["properties"]["disruption"]["properties"]["budgets"].is_object(), "{pool}");
        assert!(doc["components"]["schemas"].get(OBJECT_META).is_some());
        let v2 = v2(&s);
        assert!(!v2.to_string().contains(V3_REF));
        assert_eq!(
            v2["definitions"]["sh.karpenter.v1.NodePool"]["properties"]["metadata"]["$ref"],
            format!("{V2_REF}{OBJECT_META}")
        );
    }
}
