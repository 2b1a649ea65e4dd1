//! How server-side apply merges each list and map of a kind, as its schema declares: a list is
//! atomic (replaced whole) unless declared a set or a map keyed by some of its items' fields; a
//! map merges key by key unless declared atomic. Kerf's CRDs say so in their schemas
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`); the
//! built-in kinds by the markers of their Go types, of which the ones of the kinds served are
//! listed here by field name.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::Value;

/// How a list merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListShape {
    Atomic,
    Set,
    /// Items are identified by these fields.
    Map(Vec<&'static str>),
}

/// The shapes of one kind's lists and maps.
pub struct Shapes {
    /// The CRD's structural schema, for kerf's own kinds.
    crd: Option<&'static Value>,
}

/// Kerf's CRDs' schemas by kind, built once.
static CRD_SCHEMAS: LazyLock<HashMap<&'static str, Value>> = LazyLock::new(|| {
    kerf_api::crd::ALL
        .iter()
        .map(|d| {
            let crd = d.custom_resource_definition();
            (d.kind, crd.pointer("/spec/versions/0/schema/openAPIV3Schema").cloned().unwrap_or(Value::Null))
        })
        .collect()
});

impl Shapes {
    pub fn of(kind: &str) -> Shapes {
        Shapes { crd: CRD_SCHEMAS.get(kind) }
    }

    /// The schema node at `names` (field names from the object's root), if the kind has a schema.
    fn node(&self, names: &[String]) -> Option<&'static Value> {
        let mut node = self.crd?;
        for name in names {
            // List items have no name of their own: step into `items` first.
            while node.get("type").and_then(Value::as_str) == Some("array") {
                node = node.get("items")?;
            }
            node = node.pointer(&format!("/properties/{name}")).or_else(|| node.get("additionalProperties"))?;
        }
        Some(node)
    }

    /// How the list at `names` merges.
    pub fn list(&self, names: &[String]) -> ListShape {
        let last = names.last().map_or("", String::as_str);
        let in_metadata = names.first().is_some_and(|n| n == "metadata");
        if self.crd.is_some() && !in_metadata {
            let Some(node) = self.node(names) else { return ListShape::Atomic };
            return match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => ListShape::Set,
                Some("map") => {
                    let keys: Vec<&'static str> = node
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|k| k.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    if keys.is_empty() { ListShape::Atomic } else { ListShape::Map(keys) }
                }
                _ => ListShape::Atomic,
            };
        }
        built_in_list(last, names.get(names.len().wrapping_sub(2)).map(String::as_str))
    }

    /// Whether the map at `names` is replaced whole.
    pub fn atomic_map(&self, names: &[String]) -> bool {
        let in_metadata = names.first().is_some_and(|n| n == "metadata");
        if self.crd.is_some() && !in_metadata {
            return self
                .node(names)
                .and_then(|n| n.get("x-kubernetes-map-type"))
                .is_some_and(|t| t.as_str() == Some("atomic"));
        }
        // Label selectors are atomic structs (`+structType=atomic`), a pod's nodeSelector an
        // atomic map.
        matches!(names.last().map(String::as_str), Some("selector" | "labelSelector" | "nodeSelector"))
            && !names.iter().any(|n| n == "metadata")
    }
}

/// The list shapes of the built-in kinds' fields, by the field's name (and its parent's, where
/// the name alone is ambiguous).
fn built_in_list(name: &str, parent: Option<&str>) -> ListShape {
    let keys: &[&'static str] = match (name, parent) {
        ("containers" | "initContainers" | "ephemeralContainers", _) => &["name"],
        ("ports", Some("spec")) => &["port", "protocol"],
        ("ports", _) => &["containerPort", "protocol"],
        ("env" | "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates", _) => &["name"],
        ("volumeMounts", _) => &["mountPath"],
        ("volumeDevices", _) => &["devicePath"],
        ("hostAliases", _) => &["ip"],
        ("topologySpreadConstraints", _) => &["topologyKey", "whenUnsatisfiable"],
        // A node's addresses, keyed by type; a pod's readiness gates are atomic.
        ("addresses", Some("status")) => &["type"],
        ("conditions", _) => &["type"],
        ("ownerReferences", _) => &["uid"],
        ("finalizers", _) => return ListShape::Set,
        _ => return ListShape::Atomic,
    };
    ListShape::Map(keys.to_vec())
}
