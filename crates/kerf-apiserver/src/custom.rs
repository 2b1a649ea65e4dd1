//! CustomResourceDefinitions clients create: what one serves (a kind per served version, its
//! names, scope, subresources, printer columns and schema), the checks the API server makes
//! before accepting one, the status it reports (`NamesAccepted`, `Established`), and each
//! cluster's registry of the kinds its CRDs serve. A CRD for a kind kerf serves built in
//! (`kerf crds`' own) is accepted and changes nothing: that kind stays served as it is.
//!
//! The store and every request handler name a kind by a `&'static ResourceKind`; a kind a CRD
//! registers is made once and kept for the life of the process ([`intern`]), and the same
//! definition registered again (a CRD deleted and created again) reuses it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use serde_json::{Value, json};

use crate::kinds::{KINDS, ResourceKind, SchemaSource};

/// The kind of a CustomResourceDefinition object.
pub const CRD_KIND: &str = "CustomResourceDefinition";

/// One additional printer column of a CRD version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: u8,
    /// The column's JSONPath (`.status.conditions[?(@.type=="Ready")].status`).
    pub json_path: String,
}

/// The scale subresource's replica fields, as JSON pointers (`/spec/replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
}

/// What a served version of a CRD adds to its [`ResourceKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomKind {
    /// The CustomResourceDefinition's name (`plural.group`).
    pub crd: String,
    pub columns: Vec<CustomColumn>,
    pub scale: Option<ScalePaths>,
    /// The version's `openAPIV3Schema` as the CRD gives it: its objects' defaults and the checks
    /// of their values ([`crate::value_validation`]).
    pub schema: Value,
}

/// The kinds one CRD serves: one per served version, the storage version first.
#[derive(Clone)]
pub struct Served {
    pub versions: Vec<(&'static ResourceKind, Arc<Value>)>,
}

/// Kinds made from CRDs, for the life of the process (see the module doc).
static INTERNED: Mutex<Vec<&'static ResourceKind>> = Mutex::new(Vec::new());

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_all(v: &[String]) -> &'static [&'static str] {
    Box::leak(v.iter().map(|s| leak(s)).collect::<Vec<_>>().into_boxed_slice())
}

/// The one `&'static` kind with these parts.
fn intern(spec: &KindSpec) -> &'static ResourceKind {
    let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = interned.iter().find(|k| spec.is(k)) {
        return k;
    }
    let k: &'static ResourceKind = Box::leak(Box::new(ResourceKind {
        group: leak(&spec.group),
        version: leak(&spec.version),
        kind: leak(&spec.kind),
        plural: leak(&spec.plural),
        singular: leak(&spec.singular),
        namespaced: spec.namespaced,
        short_names: leak_all(&spec.short_names),
        categories: leak_all(&spec.categories),
        status: spec.status,
        scale: spec.custom.scale.is_some(),
        typed: None,
        schema: SchemaSource::Crd,
        custom: Some(Box::leak(Box::new(spec.custom.clone()))),
    }));
    interned.push(k);
    k
}

/// A kind made from a CRD with this name, if any (the latest made), for naming it in errors.
pub fn interned_by_kind(kind: &str) -> Option<&'static ResourceKind> {
    INTERNED.lock().unwrap_or_else(|e| e.into_inner()).iter().rev().find(|k| k.kind == kind).copied()
}

/// The parts of one served version.
struct KindSpec {
    group: String,
    version: String,
    kind: String,
    plural: String,
    singular: String,
    namespaced: bool,
    short_names: Vec<String>,
    categories: Vec<String>,
    status: bool,
    custom: CustomKind,
    schema: Value,
}

impl KindSpec {
    fn is(&self, k: &ResourceKind) -> bool {
        let strs = |a: &[&str], b: &[String]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y);
        k.group == self.group
            && k.version == self.version
            && k.kind == self.kind
            && k.plural == self.plural
            && k.singular == self.singular
            && k.namespaced == self.namespaced
            && strs(k.short_names, &self.short_names)
            && strs(k.categories, &self.categories)
            && k.status == self.status
            && k.custom == Some(&self.custom)
    }
}

/// What a CRD object defines, read and checked.
struct Definition {
    name: String,
    group: String,
    kind: String,
    plural: String,
    list_kind: String,
    versions: Vec<KindSpec>,
    storage: String,
}

fn invalid(field: &str, message: impl Into<String>) -> String {
    format!("{field}: {}", message.into())
}

/// A JSONPath of a printer column (`.spec.replicas`) as a JSON pointer, when it is a plain path.
fn pointer_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix('.')?;
    (!rest.is_empty() && !rest.contains(['[', '\\', '*', '?'])).then(|| format!("/{}", rest.replace('.', "/")))
}

fn version_spec(
    crd: &CustomResourceDefinition,
    v: &CustomResourceDefinitionVersion,
    body: &Value,
    index: usize,
) -> Result<KindSpec, String> {
    let names = &crd.spec.names;
    let at = format!("spec.versions[{index}]");
    let schema = body
        .pointer(&format!("/spec/versions/{index}/schema/openAPIV3Schema"))
        .cloned()
        .ok_or_else(|| invalid(&format!("{at}.schema.openAPIV3Schema"), "Required value: schemas are required"))?;
    let sub = v.subresources.as_ref();
    let scale = match sub.and_then(|s| s.scale.as_ref()) {
        None => None,
        Some(s) => Some(ScalePaths {
            spec_replicas: pointer_of(&s.spec_replicas_path).ok_or_else(|| {
                invalid(
                    &format!("{at}.subresources.scale.specReplicasPath"),
                    "must be a simple JSON path (.spec.replicas)",
                )
            })?,
            status_replicas: pointer_of(&s.status_replicas_path).ok_or_else(|| {
                invalid(
                    &format!("{at}.subresources.scale.statusReplicasPath"),
                    "must be a simple JSON path (.status.replicas)",
                )
            })?,
        }),
    };
    let columns = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| CustomColumn {
            name: c.name.clone(),
            type_: c.type_.clone(),
            format: c.format.clone().unwrap_or_default(),
            description: c.description.clone().unwrap_or_default(),
            priority: u8::try_from(c.priority.unwrap_or(0).clamp(0, 255)).unwrap_or(0),
            json_path: c.json_path.clone(),
        })
        .collect();
    let mut categories = names.categories.clone().unwrap_or_default();
    categories.dedup();
    Ok(KindSpec {
        group: crd.spec.group.clone(),
        version: v.name.clone(),
        kind: names.kind.clone(),
        plural: names.plural.clone(),
        singular: names.singular.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| names.kind.to_lowercase()),
        namespaced: crd.spec.scope == "Namespaced",
        short_names: names.short_names.clone().unwrap_or_default(),
        categories,
        status: sub.is_some_and(|s| s.status.is_some()),
        custom: CustomKind {
            crd: crd.metadata.name.clone().unwrap_or_default(),
            columns,
            scale,
            schema: schema.clone(),
        },
        schema,
    })
}

/// Reads and checks a CRD object as the API server's validation does (the parts kerf uses).
fn definition(body: &Value) -> Result<Definition, String> {
    let crd: CustomResourceDefinition = serde_path_to_error::deserialize(body.clone())
        .map_err(|e| invalid(&e.path().to_string(), e.into_inner().to_string()))?;
    let spec = &crd.spec;
    let names = &spec.names;
    let name = crd.metadata.name.clone().unwrap_or_default();
    let lower = |s: &str| !s.is_empty() && kerf_api::validation::is_dns1123_subdomain(s) && !s.contains('.');
    if !spec.group.contains('.') || !kerf_api::validation::is_dns1123_subdomain(&spec.group) {
        return Err(invalid(
            "spec.group",
            format!("Invalid value: {:?}: should be a domain with at least one dot", spec.group),
        ));
    }
    if !lower(&names.plural) {
        return Err(invalid("spec.names.plural", format!("Invalid value: {:?}: a lowercase name", names.plural)));
    }
    if names.kind.is_empty() {
        return Err(invalid("spec.names.kind", "Required value"));
    }
    if name != format!("{}.{}", names.plural, spec.group) {
        return Err(invalid(
            "metadata.name",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if spec.scope != "Namespaced" && spec.scope != "Cluster" {
        return Err(invalid(
            "spec.scope",
            format!("Unsupported value: {:?}: supported values: \"Cluster\", \"Namespaced\"", spec.scope),
        ));
    }
    let storage: Vec<&CustomResourceDefinitionVersion> = spec.versions.iter().filter(|v| v.storage).collect();
    let [storage] = storage.as_slice() else {
        return Err(invalid("spec.versions", "Invalid value: must have exactly one version marked as storage version"));
    };
    let mut versions = Vec::new();
    for (i, v) in spec.versions.iter().enumerate() {
        if v.served {
            versions.push(version_spec(&crd, v, body, i)?);
        }
    }
    // The storage version first: the group's preferred version.
    versions.sort_by_key(|v| v.version != storage.name);
    Ok(Definition {
        name,
        group: spec.group.clone(),
        kind: names.kind.clone(),
        plural: names.plural.clone(),
        list_kind: names.list_kind.clone().unwrap_or_else(|| format!("{}List", names.kind)),
        versions,
        storage: storage.name.clone(),
    })
}

/// The kinds served by the CRDs a cluster holds.
#[derive(Default, Clone)]
pub struct Registry {
    by_crd: BTreeMap<String, Served>,
    /// Moves each time the served kinds change (the OpenAPI documents' version).
    pub generation: u64,
}

impl Registry {
    /// Every kind served through a CRD.
    pub fn kinds(&self) -> impl Iterator<Item = &'static ResourceKind> + '_ {
        self.by_crd.values().flat_map(|s| s.versions.iter().map(|(k, _)| *k))
    }

    /// The served kind named `kind` (any version).
    pub fn by_kind(&self, kind: &str) -> Option<&'static ResourceKind> {
        self.kinds().find(|k| k.kind == kind)
    }

    /// The schema of a kind served through a CRD, as the OpenAPI documents carry it.
    pub fn schema(&self, kind: &ResourceKind) -> Option<Arc<Value>> {
        self.by_crd.values().flat_map(|s| &s.versions).find(|(k, _)| std::ptr::eq(*k, kind)).map(|(_, s)| s.clone())
    }

    /// Whether `kind` is served: a built-in kind always, a CRD's while its CRD exists.
    pub fn serves(&self, kind: &ResourceKind) -> bool {
        kind.custom.is_none() || self.kinds().any(|k| std::ptr::eq(k, kind))
    }

    /// Checks the CRD `body` (a CustomResourceDefinition as JSON) and fills in its status;
    /// the error is the message of a 422.
    pub fn admit(&self, body: &mut Value) -> Result<(), String> {
        let def = definition(body)?;
        if let Some(builtin) = KINDS.iter().find(|k| k.kind == def.kind) {
            let same = builtin.group == def.group && builtin.plural == def.plural;
            if !same {
                return Err(invalid(
                    "spec.names.kind",
                    format!(
                        "Invalid value: {:?}: kind {} is served by {}; kerf serve keeps one kind per name",
                        def.kind,
                        def.kind,
                        builtin.qualified()
                    ),
                ));
            }
        }
        if let Some((other, _)) = self
            .by_crd
            .iter()
            .find(|(name, s)| **name != def.name && s.versions.first().is_some_and(|(k, _)| k.kind == def.kind))
        {
            return Err(invalid(
                "spec.names.kind",
                format!(
                    "Invalid value: {:?}: kind {} is served by CRD {other}; kerf serve keeps one kind per name",
                    def.kind, def.kind
                ),
            ));
        }
        let mut accepted = json!({"kind": def.kind, "plural": def.plural, "listKind": def.list_kind});
        if let Some(names) = body.pointer("/spec/names").and_then(Value::as_object) {
            for (k, v) in names {
                accepted[k] = v.clone();
            }
        }
        let now = body.pointer("/metadata/creationTimestamp").cloned().unwrap_or(Value::Null);
        let condition = |type_: &str, reason: &str, message: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
        body["status"] = json!({
            "conditions": [
                condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            ],
            "acceptedNames": accepted,
            "storedVersions": [def.storage],
        });
        Ok(())
    }

    /// Serves the kinds of an admitted CRD (a kind kerf serves built in stays as it is).
    pub fn register(&mut self, body: &Value) {
        let Ok(def) = definition(body) else { return };
        if KINDS.iter().any(|k| k.group == def.group && k.plural == def.plural) {
            return;
        }
        let versions = def
            .versions
            .iter()
            .map(|spec| {
                let kind = intern(spec);
                (kind, Arc::new(crate::openapi::crd_schema(kind, spec.schema.clone())))
            })
            .collect();
        self.by_crd.insert(def.name, Served { versions });
        self.generation += 1;
    }

    /// Stops serving the kinds of the CRD `name`; the kind name whose objects go with it.
    pub fn unregister(&mut self, name: &str) -> Option<&'static str> {
        let served = self.by_crd.remove(name)?;
        self.generation += 1;
        served.versions.first().map(|(k, _)| k.kind)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::clock::ManualClock;
    use serde_json::json;

    use super::*;
    use crate::cluster::SimCluster;
    use crate::kinds;
    use crate::rest::{Filter, Rest};
    use crate::writes::Preconditions;

    fn crd(kind: &str, plural: &str, group: &str) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
    }

    #[test]
    fn a_created_crd_serves_its_kind_until_deleted_and_takes_its_objects_with_it() {
        let cluster = Arc::new(SimCluster::new(ManualClock::new(), 1));
        cluster.enable_serving(1000);
        let rest = Rest::new(cluster.clone());
        let crds = kinds::by_kind(CRD_KIND).unwrap();
        let created = rest.create(crds, None, crd("Widget", "widgets", "example.com")).unwrap();
        let established =
            created["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Established");
        assert!(established, "{created}");
        let kind = cluster.kind_at("example.com", "v1", "widgets").expect("served");
        assert_eq!((kind.kind, kind.namespaced, kind.status), ("Widget", true, true));
        let w =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}});
        rest.create(kind, Some("default"), w).unwrap();
        assert_eq!(rest.list(kind, &Filter::default()).0.len(), 1);
        let (_, since) = rest.list(kind, &Filter::default());
        rest.delete(crds, None, "widgets.example.com", &Preconditions::default()).unwrap();
        assert!(cluster.kind_at("example.com", "v1", "widgets").is_none());
        let (changes, _) = rest.changes(kind, &Filter::default(), since).unwrap();
        assert_eq!(changes.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["DELETED"]);
        assert!(rest.create(kind, Some("default"), json!({"metadata": {"name": "x"}})).is_err());
        // Created again, the same kind is served (and made once).
        rest.create(crds, None, crd("Widget", "widgets", "example.com")).unwrap();
        assert!(std::ptr::eq(cluster.kind_at("example.com", "v1", "widgets").unwrap(), kind));
    }

    #[test]
    fn a_crd_is_refused_for_a_taken_kind_name_or_a_name_that_is_not_plural_dot_group() {
        let cluster = Arc::new(SimCluster::new(ManualClock::new(), 1));
        let rest = Rest::new(cluster);
        let crds = kinds::by_kind(CRD_KIND).unwrap();
        let err = rest.create(crds, None, crd("Pod", "pods", "example.com")).unwrap_err();
        assert!(err.to_string().contains("kind Pod is served by pods"), "{err}");
        let mut bad = crd("Gadget", "gadgets", "example.com");
        bad["metadata"]["name"] = json!("gadgets");
        let err = rest.create(crds, None, bad).unwrap_err();
        assert!(err.to_string().contains("must be spec.names.plural+\".\"+spec.group"), "{err}");
        // kerf's own CRD is accepted and leaves the built-in kind as it is.
        let pools = kerf_api::crd::NODE_POOL.custom_resource_definition();
        rest.create(crds, None, pools).unwrap();
        assert!(std::ptr::eq(
            rest.cluster.kind_at("karpenter.sh", "v1", "nodepools").unwrap(),
            kinds::by_kind("NodePool").unwrap()
        ));
    }
}
