//! A pod's metadata as the controllers keep it ([`SlimMeta`]), and what code reads of any
//! object's metadata, whichever form it holds ([`MetaView`]).
//!
//! The replicas of a workload carry equal labels (the template's, and the ReplicaSet's hash),
//! equal owner references and usually equal annotations. Kept as `ObjectMeta` keeps them, each
//! pod has its own map nodes and strings: in a large cluster the largest part of a controller's
//! memory after the pods' specs. A [`SlimMeta`] holds those three shared, one copy of each
//! distinct value for the whole process (found through a [`WeakTable`]), and drops what no
//! controller reads: the server-side apply bookkeeping, the self link, kubectl's copy of
//! the last applied manifest and the deletion's grace period.
//!
//! Its fields have `ObjectMeta`'s names, so code reads `pod.metadata.name` in either form;
//! the shared ones read through `as_deref()`. A changed shared value is a copy of its own
//! (`Arc::make_mut`).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Serialize};

use crate::slim_pod::LAST_APPLIED;
use crate::weak_table::WeakTable;

/// Labels or annotations.
pub type StringMap = BTreeMap<String, String>;

/// A pod's metadata as the controllers keep it (see the module's doc).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "ObjectMeta", rename_all = "camelCase")]
pub struct SlimMeta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Arc<StringMap>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// Behind a pointer: few pods have finalizers, and every pod would pay for an empty list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizers: Option<Arc<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Arc<StringMap>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Arc<Vec<OwnerReference>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl From<ObjectMeta> for SlimMeta {
    fn from(meta: ObjectMeta) -> Self {
        let ObjectMeta {
            annotations,
            creation_timestamp,
            deletion_grace_period_seconds: _,
            deletion_timestamp,
            finalizers,
            generate_name,
            generation,
            labels,
            managed_fields: _,
            name,
            namespace,
            owner_references,
            resource_version,
            self_link: _,
            uid,
        } = meta;
        SlimMeta {
            annotations: annotations.map(|mut a| {
                a.remove(LAST_APPLIED);
                shared_map(&ANNOTATIONS, a)
            }),
            creation_timestamp,
            deletion_timestamp,
            finalizers: finalizers.map(|mut f| {
                f.shrink_to_fit();
                Arc::new(f)
            }),
            generate_name,
            generation,
            labels: labels.map(|l| shared_map(&LABELS, l)),
            name,
            namespace,
            owner_references: owner_references.as_deref().map(shared_owners),
            resource_version,
            uid,
        }
    }
}

impl From<&ObjectMeta> for SlimMeta {
    /// Shared values found in the tables are not copied from `meta`.
    fn from(meta: &ObjectMeta) -> Self {
        let annotations = meta.annotations.as_ref().map(|a| {
            if a.contains_key(LAST_APPLIED) {
                let mut a = a.clone();
                a.remove(LAST_APPLIED);
                shared_map(&ANNOTATIONS, a)
            } else {
                shared_map_from(&ANNOTATIONS, a)
            }
        });
        SlimMeta {
            annotations,
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            finalizers: meta.finalizers.clone().map(Arc::new),
            generate_name: meta.generate_name.clone(),
            generation: meta.generation,
            labels: meta.labels.as_ref().map(|l| shared_map_from(&LABELS, l)),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            owner_references: meta.owner_references.as_deref().map(shared_owners),
            resource_version: meta.resource_version.clone(),
            uid: meta.uid.clone(),
        }
    }
}

impl From<SlimMeta> for ObjectMeta {
    fn from(meta: SlimMeta) -> Self {
        let unshared = |m: Arc<StringMap>| Arc::unwrap_or_clone(m);
        ObjectMeta {
            annotations: meta.annotations.map(unshared),
            creation_timestamp: meta.creation_timestamp,
            deletion_grace_period_seconds: None,
            deletion_timestamp: meta.deletion_timestamp,
            finalizers: meta.finalizers.map(Arc::unwrap_or_clone),
            generate_name: meta.generate_name,
            generation: meta.generation,
            labels: meta.labels.map(unshared),
            managed_fields: None,
            name: meta.name,
            namespace: meta.namespace,
            owner_references: meta.owner_references.map(Arc::unwrap_or_clone),
            resource_version: meta.resource_version,
            self_link: None,
            uid: meta.uid,
        }
    }
}

static LABELS: LazyLock<WeakTable<StringMap>> = LazyLock::new(WeakTable::new);
static ANNOTATIONS: LazyLock<WeakTable<StringMap>> = LazyLock::new(WeakTable::new);
static OWNERS: LazyLock<WeakTable<Vec<OwnerReference>>> = LazyLock::new(WeakTable::new);

fn map_print(map: &StringMap) -> u64 {
    let mut h = DefaultHasher::new();
    map.hash(&mut h);
    h.finish()
}

fn shared_map(table: &WeakTable<StringMap>, map: StringMap) -> Arc<StringMap> {
    table.share(map_print(&map), map)
}

fn shared_map_from(table: &WeakTable<StringMap>, map: &StringMap) -> Arc<StringMap> {
    table.share_with(map_print(map), |m| m == map, || map.clone())
}

/// `owners`, shared: copied (to a list of their length) only when no object has them yet.
fn shared_owners(owners: &[OwnerReference]) -> Arc<Vec<OwnerReference>> {
    let mut h = DefaultHasher::new();
    for o in owners {
        (&o.api_version, &o.kind, &o.name, &o.uid, o.controller, o.block_owner_deletion).hash(&mut h);
    }
    OWNERS.share_with(h.finish(), |o| o.as_slice() == owners, || owners.to_vec())
}

/// What code reads of an object's metadata, and the API server's bookkeeping it writes, in
/// either form (`ObjectMeta`, a pod's [`SlimMeta`]).
pub trait MetaView {
    fn name(&self) -> Option<&str>;
    fn namespace(&self) -> Option<&str>;
    fn generate_name(&self) -> Option<&str>;
    fn uid(&self) -> Option<&str>;
    fn resource_version(&self) -> Option<&str>;
    fn labels(&self) -> Option<&StringMap>;
    fn annotations(&self) -> Option<&StringMap>;
    fn owner_references(&self) -> &[OwnerReference];
    fn finalizers(&self) -> &[String];
    fn deletion_timestamp(&self) -> Option<&Time>;
    fn creation_timestamp(&self) -> Option<&Time>;
    fn generation(&self) -> Option<i64>;
    fn set_resource_version(&mut self, rv: Option<String>);
    fn clear_finalizers(&mut self);
    /// Rebuilds its labels and annotations with full map nodes ([`packed`]), for an object
    /// that is kept as long as it exists. A [`SlimMeta`]'s maps are shared: one copy each.
    fn pack_maps(&mut self);
}

/// The entries a B-tree node of a `BTreeMap` holds.
const MAP_NODE_ENTRIES: usize = 11;

/// `map` rebuilt with its B-tree nodes full. Decoding a map inserts its keys one at a time, in
/// order, and each node that fills up is split in two, leaving part of it empty; built from its
/// sorted entries at once, the map fills its nodes. A Node's twenty-odd labels take two leaves
/// instead of three (a leaf is over 500 bytes whatever it holds). A map that fits one node is
/// returned as it is.
pub fn packed<V>(map: BTreeMap<String, V>) -> BTreeMap<String, V> {
    if map.len() <= MAP_NODE_ENTRIES {
        return map;
    }
    map.into_iter().collect()
}

/// Both forms name their fields alike; only the shared ones read through a pointer.
macro_rules! meta_view {
    ($($ty:ty { $($own:item)* }),*) => {$(
        impl MetaView for $ty {
            fn name(&self) -> Option<&str> {
                self.name.as_deref()
            }
            fn namespace(&self) -> Option<&str> {
                self.namespace.as_deref()
            }
            fn generate_name(&self) -> Option<&str> {
                self.generate_name.as_deref()
            }
            fn uid(&self) -> Option<&str> {
                self.uid.as_deref()
            }
            fn resource_version(&self) -> Option<&str> {
                self.resource_version.as_deref()
            }
            fn labels(&self) -> Option<&StringMap> {
                self.labels.as_ref().map(Borrow::borrow)
            }
            fn annotations(&self) -> Option<&StringMap> {
                self.annotations.as_ref().map(Borrow::borrow)
            }
            fn owner_references(&self) -> &[OwnerReference] {
                self.owner_references.as_ref().map_or(&[], |o| Borrow::<Vec<OwnerReference>>::borrow(o))
            }
            fn finalizers(&self) -> &[String] {
                self.finalizers.as_ref().map_or(&[], |f| Borrow::<Vec<String>>::borrow(f))
            }
            fn deletion_timestamp(&self) -> Option<&Time> {
                self.deletion_timestamp.as_ref()
            }
            fn creation_timestamp(&self) -> Option<&Time> {
                self.creation_timestamp.as_ref()
            }
            fn generation(&self) -> Option<i64> {
                self.generation
            }
            fn set_resource_version(&mut self, rv: Option<String>) {
                self.resource_version = rv;
            }
            fn clear_finalizers(&mut self) {
                self.finalizers = None;
            }
            $($own)*
        }
    )*};
}
meta_view!(
    ObjectMeta {
        fn pack_maps(&mut self) {
            for map in [&mut self.labels, &mut self.annotations] {
                *map = map.take().map(packed);
            }
        }
    },
    SlimMeta {
        fn pack_maps(&mut self) {}
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, labels: &[(&str, &str)], owner: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("shop".to_string()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_string(),
                kind: "ReplicaSet".to_string(),
                name: owner.to_string(),
                uid: format!("uid-{owner}"),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn replicas_share_their_labels_and_owner_whichever_form_they_arrive_in() {
        let a = SlimMeta::from(meta("web-1", &[("app", "web"), ("hash", "1")], "web-1"));
        let b = SlimMeta::from(&meta("web-2", &[("app", "web"), ("hash", "1")], "web-1"));
        let c = SlimMeta::from(meta("web-3", &[("app", "web"), ("hash", "2")], "web-2"));
        let (la, lb, lc) = (a.labels.as_ref().unwrap(), b.labels.as_ref().unwrap(), c.labels.as_ref().unwrap());
        assert!(Arc::ptr_eq(la, lb));
        assert!(!Arc::ptr_eq(la, lc));
        assert_eq!(lc.get("hash").map(String::as_str), Some("2"));
        let (oa, ob, oc) = (
            a.owner_references.as_ref().unwrap(),
            b.owner_references.as_ref().unwrap(),
            c.owner_references.as_ref().unwrap(),
        );
        assert!(Arc::ptr_eq(oa, ob));
        assert!(!Arc::ptr_eq(oa, oc));
        assert_eq!(b.name.as_deref(), Some("web-2"));
    }

    #[test]
    fn a_changed_label_map_is_a_copy_of_its_own() {
        let a = SlimMeta::from(meta("db-1", &[("app", "db")], "db"));
        let mut b = SlimMeta::from(meta("db-2", &[("app", "db")], "db"));
        Arc::make_mut(b.labels.as_mut().unwrap()).insert("extra".to_string(), "1".to_string());
        assert_eq!(a.labels.as_deref().map(BTreeMap::len), Some(1));
        assert_eq!(b.labels.as_deref().map(BTreeMap::len), Some(2));
    }

    #[test]
    fn slim_metadata_drops_apply_bookkeeping_and_reads_back_as_written() {
        let json = serde_json::json!({
            "name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
            "generateName": "web-", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web"}, "finalizers": ["f"],
            "annotations": {"keep": "yes", LAST_APPLIED: "{}"},
            "selfLink": "/api/v1/namespaces/shop/pods/web-1",
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u0"}]
        });
        let slim: SlimMeta = serde_json::from_value(json.clone()).unwrap();
        let mut expected = json.clone();
        let e = expected.as_object_mut().unwrap();
        e.remove("selfLink");
        e.remove("managedFields");
        e["annotations"].as_object_mut().unwrap().remove(LAST_APPLIED);
        assert_eq!(serde_json::to_value(&slim).unwrap(), expected);
        let whole: ObjectMeta = serde_json::from_value(json).unwrap();
        assert_eq!(SlimMeta::from(&whole), slim);
        assert_eq!(SlimMeta::from(ObjectMeta::from(slim.clone())), slim);
        assert_eq!(slim.labels().and_then(|l| l.get("app")).map(String::as_str), Some("web"));
        assert_eq!(slim.owner_references()[0].name, "web");
        assert_eq!(slim.finalizers(), ["f".to_string()]);
    }
}
