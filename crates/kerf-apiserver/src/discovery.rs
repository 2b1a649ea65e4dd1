//! Discovery documents: `/api`, `/apis`, the resource list of each group version and `/version`,
//! as kubectl and kube-rs read them to map kinds and short names to REST paths.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::kinds::{KINDS, ResourceKind};

/// The Kubernetes version the server reports (the API surface it imitates).
pub const MAJOR: &str = "1";
pub const MINOR: &str = "32";

pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0-kerf"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "kerf",
        "platform": "linux/amd64",
    })
}

pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
}

/// Every named group with its (single) version.
pub fn groups() -> Value {
    let mut seen = BTreeSet::new();
    let groups: Vec<Value> = KINDS
        .iter()
        .filter(|k| !k.group.is_empty() && seen.insert((k.group, k.version)))
        .map(|k| {
            let gv = json!({"groupVersion": k.api_version(), "version": k.version});
            json!({"name": k.group, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const SUB_VERBS: &[&str] = &["get", "patch", "update"];

fn resource(k: &ResourceKind) -> Value {
    json!({
        "name": k.plural,
        "singularName": k.singular,
        "namespaced": k.namespaced,
        "kind": k.kind,
        "verbs": VERBS,
        "shortNames": k.short_names,
        "categories": k.categories,
    })
}

/// The resource list of `group`/`version`, or `None` when no kind is served there.
pub fn resources(group: &str, version: &str) -> Option<Value> {
    let kinds: Vec<&ResourceKind> = KINDS.iter().filter(|k| k.group == group && k.version == version).collect();
    if kinds.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for k in kinds {
        list.push(resource(k));
        if k.status {
            list.push(json!({"name": format!("{}/status", k.plural), "singularName": "", "namespaced": k.namespaced, "kind": k.kind, "verbs": SUB_VERBS}));
        }
        if k.scale {
            list.push(json!({"name": format!("{}/scale", k.plural), "singularName": "", "namespaced": k.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": SUB_VERBS}));
        }
        if k.kind == "Pod" {
            list.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}))
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// `/openapi/v3`: the OpenAPI v3 document of each group version.
pub fn openapi_root() -> Value {
    let mut paths = serde_json::Map::new();
    for k in KINDS {
        let p = gv_path(k.group, k.version);
        let url = format!("/openapi/v3/{p}?hash=kerf");
        paths.entry(p).or_insert_with(|| json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// The OpenAPI v3 document of one group version: each object path with its operations, the
/// kind it serves and the `fieldValidation` parameter, so clients know the server validates
/// fields (kubectl then leaves validation to it). Schemas are left open.
pub fn openapi_group_version(group: &str, version: &str) -> Option<Value> {
    let kinds: Vec<&ResourceKind> = KINDS.iter().filter(|k| k.group == group && k.version == version).collect();
    if kinds.is_empty() {
        return None;
    }
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for k in kinds {
        let gvk = json!({"group": k.group, "version": k.version, "kind": k.kind});
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
        ]);
        let op = |id: &str| {
            json!({
                "operationId": format!("{id}{}", k.kind),
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            })
        };
        let base = if k.namespaced {
            format!("/{}/namespaces/{{namespace}}/{}", gv_path(k.group, k.version), k.plural)
        } else {
            format!("/{}/{}", gv_path(k.group, k.version), k.plural)
        };
        paths.insert(base.clone(), json!({"post": op("create"), "get": op("list")}));
        paths.insert(
            format!("{base}/{{name}}"),
            json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}),
        );
        let schema_name = format!("{}.{}.{}", if k.group.is_empty() { "core" } else { k.group }, k.version, k.kind);
        schemas.insert(
            schema_name,
            json!({"type": "object", "x-kubernetes-group-version-kind": [gvk], "x-kubernetes-preserve-unknown-fields": true}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "kerf", "version": format!("v{MAJOR}.{MINOR}.0-kerf")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
