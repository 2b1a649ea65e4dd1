//! Where each kind the controllers use lives in the Kubernetes API (group, version, plural,
//! scope), and conversions between its JSON and the typed [`AnyObject`]. Every kind is read and
//! written as a `DynamicObject` so that one code path serves them all, including kerf's own
//! kinds, which do not implement kube-rs's `Resource`.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kerf_api::MetaView;
use kerf_api::cluster::{AnyObject, Object};
use kerf_api::{CapacityBuffer, CapacityQuota, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest};
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

/// A kind's place in the API.
#[derive(Debug, Clone)]
pub struct Kind {
    pub kind: &'static str,
    pub namespaced: bool,
    pub resource: ApiResource,
}

fn builtin<K: k8s_openapi::Resource + Object>() -> Kind {
    Kind {
        kind: <K as Object>::KIND,
        namespaced: <K as Object>::NAMESPACED,
        resource: ApiResource {
            group: <K as k8s_openapi::Resource>::GROUP.to_string(),
            version: <K as k8s_openapi::Resource>::VERSION.to_string(),
            api_version: K::API_VERSION.to_string(),
            kind: <K as Object>::KIND.to_string(),
            plural: K::URL_PATH_SEGMENT.to_string(),
        },
    }
}

fn karpenter(api_version: &str, kind: &'static str, plural: &str) -> Kind {
    custom(api_version, kind, plural, false)
}

fn custom(api_version: &str, kind: &'static str, plural: &str, namespaced: bool) -> Kind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Kind {
        kind,
        namespaced,
        resource: ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            plural: plural.to_string(),
        },
    }
}

/// Every kind the controllers watch, in the order their caches are filled.
pub fn all() -> &'static [Kind] {
    static ALL: std::sync::OnceLock<Vec<Kind>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        vec![
            builtin::<Namespace>(),
            builtin::<PriorityClass>(),
            builtin::<RuntimeClass>(),
            builtin::<StorageClass>(),
            builtin::<PersistentVolume>(),
            builtin::<PersistentVolumeClaim>(),
            // Before the pools: the types they are shown are priced with the overlays.
            karpenter(kerf_api::nodeoverlay::API_VERSION, kerf_api::nodeoverlay::KIND, "nodeoverlays"),
            karpenter(kerf_api::ec2nodeclass::API_VERSION, kerf_api::ec2nodeclass::KIND, "ec2nodeclasses"),
            karpenter(kerf_api::nodepool::API_VERSION, kerf_api::nodepool::KIND, "nodepools"),
            karpenter(kerf_api::nodeclaim::API_VERSION, kerf_api::nodeclaim::KIND, "nodeclaims"),
            builtin::<Node>(),
            builtin::<DaemonSet>(),
            builtin::<PodDisruptionBudget>(),
            builtin::<PodTemplate>(),
            custom(kerf_api::capacitybuffer::API_VERSION, kerf_api::capacitybuffer::KIND, "capacitybuffers", true),
            custom(
                kerf_api::provisioningrequest::API_VERSION,
                kerf_api::provisioningrequest::KIND,
                "provisioningrequests",
                true,
            ),
            custom(kerf_api::capacityquota::API_VERSION, kerf_api::capacityquota::KIND, "capacityquotas", false),
            builtin::<Pod>(),
        ]
    })
}

/// Kinds the controllers read with `get` but do not watch: the workloads a CapacityBuffer's
/// `scalableRef` names (watching every Deployment and ReplicaSet of a cluster for the few that
/// back buffers would cost more memory than it saves requests).
pub fn read_only() -> &'static [Kind] {
    static READ: std::sync::OnceLock<Vec<Kind>> = std::sync::OnceLock::new();
    READ.get_or_init(|| vec![builtin::<Deployment>(), builtin::<StatefulSet>(), builtin::<ReplicaSet>()])
}

/// The kind named `kind` (`Pod`, `NodeClaim`, ...), watched or read only.
pub fn by_name(kind: &str) -> Option<&'static Kind> {
    all().iter().chain(read_only()).find(|k| k.kind == kind)
}

/// Decodes a typed object of the named kind from its JSON. A field kerf's Karpenter and
/// CapacityBuffer types do not know (written by Karpenter, or by another version of kerf) is
/// left out, not a reason to refuse the object (see `kerf_api::from_cluster`); the first time a
/// kind is seen with such a field, an info line names it. Its labels and annotations are kept
/// packed ([`kerf_api::slim_meta::packed`]): a Node's and a NodeClaim's labels are most of what
/// they cost to keep.
pub fn decode(kind: &str, value: Value) -> Result<AnyObject, serde_json::Error> {
    fn kept<K: Object>(mut object: K) -> AnyObject {
        object.meta_mut().pack_maps();
        object.into_any()
    }
    fn typed<K: Object + serde::de::DeserializeOwned>(v: Value) -> Result<AnyObject, serde_json::Error> {
        serde_json::from_value::<K>(v).map(kept)
    }
    fn tolerant<K: Object + serde::de::DeserializeOwned>(v: Value) -> Result<AnyObject, serde_json::Error> {
        let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let decoded = kerf_api::from_cluster::decode::<K>(v)?;
        for field in &decoded.ignored {
            if first_sight(K::KIND, field) {
                tracing::info!(kind = K::KIND, name = %name, field = %field, "field not read by kerf; ignored");
            }
        }
        Ok(kept(decoded.object))
    }
    match kind {
        "Pod" => typed::<Pod>(value),
        "Node" => typed::<Node>(value),
        "NodeClaim" => tolerant::<NodeClaim>(value),
        "NodePool" => tolerant::<NodePool>(value),
        "EC2NodeClass" => tolerant::<EC2NodeClass>(value),
        "DaemonSet" => typed::<DaemonSet>(value),
        "PodDisruptionBudget" => typed::<PodDisruptionBudget>(value),
        "PersistentVolumeClaim" => typed::<PersistentVolumeClaim>(value),
        "PersistentVolume" => typed::<PersistentVolume>(value),
        "StorageClass" => typed::<StorageClass>(value),
        "Namespace" => typed::<Namespace>(value),
        "PriorityClass" => typed::<PriorityClass>(value),
        "RuntimeClass" => typed::<RuntimeClass>(value),
        "PodTemplate" => typed::<PodTemplate>(value),
        "CapacityBuffer" => tolerant::<CapacityBuffer>(value),
        "NodeOverlay" => tolerant::<NodeOverlay>(value),
        "ProvisioningRequest" => tolerant::<ProvisioningRequest>(value),
        "CapacityQuota" => tolerant::<CapacityQuota>(value),
        "Deployment" => typed::<Deployment>(value),
        "StatefulSet" => typed::<StatefulSet>(value),
        "ReplicaSet" => typed::<ReplicaSet>(value),
        other => Err(serde::de::Error::custom(format!("kind {other} is not one the controllers use"))),
    }
}

/// Whether `field` of `kind` is reported for the first time by this process (list indices are
/// kept: the fields of a few objects, not of thousands, are expected).
fn first_sight(kind: &str, field: &str) -> bool {
    static SEEN: std::sync::Mutex<Option<std::collections::BTreeSet<String>>> = std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let seen = seen.get_or_insert_with(Default::default);
    seen.len() < 1000 && seen.insert(format!("{kind} {field}"))
}

/// The JSON of a typed object (with its apiVersion and kind).
pub fn encode(obj: &AnyObject) -> Result<Value, serde_json::Error> {
    match obj {
        AnyObject::Pod(o) => serde_json::to_value(&**o),
        AnyObject::SlimPod(o) => serde_json::to_value(&**o),
        AnyObject::Node(o) => serde_json::to_value(&**o),
        AnyObject::NodeClaim(o) => serde_json::to_value(&**o),
        AnyObject::NodePool(o) => serde_json::to_value(&**o),
        AnyObject::EC2NodeClass(o) => serde_json::to_value(&**o),
        AnyObject::DaemonSet(o) => serde_json::to_value(&**o),
        AnyObject::PodDisruptionBudget(o) => serde_json::to_value(&**o),
        AnyObject::PersistentVolumeClaim(o) => serde_json::to_value(&**o),
        AnyObject::PersistentVolume(o) => serde_json::to_value(&**o),
        AnyObject::StorageClass(o) => serde_json::to_value(&**o),
        AnyObject::Namespace(o) => serde_json::to_value(&**o),
        AnyObject::PriorityClass(o) => serde_json::to_value(&**o),
        AnyObject::RuntimeClass(o) => serde_json::to_value(&**o),
        AnyObject::PodTemplate(o) => serde_json::to_value(&**o),
        AnyObject::CapacityBuffer(o) => serde_json::to_value(&**o),
        AnyObject::NodeOverlay(o) => serde_json::to_value(&**o),
        AnyObject::ProvisioningRequest(o) => serde_json::to_value(&**o),
        AnyObject::CapacityQuota(o) => serde_json::to_value(&**o),
        AnyObject::Deployment(o) => serde_json::to_value(&**o),
        AnyObject::StatefulSet(o) => serde_json::to_value(&**o),
        AnyObject::ReplicaSet(o) => serde_json::to_value(&**o),
    }
}

/// A dynamic object read from the API as the typed object of `kind`, without its
/// `metadata.managedFields` and kubectl's copy of the last applied manifest: no controller reads
/// them, and a Node's or NodeClaim's field bookkeeping (every status writer's fields, kept by the
/// API server) is most of what the object costs the controller to keep, several kilobytes each.
/// The controllers write objects as merge patches of the fields they change, and an update that
/// leaves `managedFields` out keeps the server's, so nothing written loses them.
pub fn from_dynamic(kind: &str, mut obj: DynamicObject) -> Result<AnyObject, serde_json::Error> {
    obj.metadata.managed_fields = None;
    if let Some(annotations) = obj.metadata.annotations.as_mut() {
        annotations.remove(kerf_api::slim_pod::LAST_APPLIED);
    }
    decode(kind, serde_json::to_value(obj)?)
}

/// A typed object as the dynamic object the API takes.
pub fn to_dynamic(obj: &AnyObject) -> Result<DynamicObject, serde_json::Error> {
    serde_json::from_value(encode(obj)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_watched_kind_has_a_place_and_round_trips_through_json() {
        let kinds = all();
        assert_eq!(kinds.len() + read_only().len(), 21, "one per AnyObject variant");
        let overlays = by_name("NodeOverlay").expect("NodeOverlay");
        assert_eq!(
            (overlays.resource.api_version.as_str(), overlays.resource.plural.as_str(), overlays.namespaced),
            ("karpenter.sh/v1alpha1", "nodeoverlays", false)
        );
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}}}
        }))
        .expect("pool");
        let dynamic = to_dynamic(&pool.clone().into_any()).expect("to dynamic");
        assert_eq!(dynamic.types.as_ref().map(|t| t.kind.as_str()), Some("NodePool"));
        let back = from_dynamic("NodePool", dynamic).expect("back");
        assert_eq!(NodePool::from_any(&back), Some(&pool));
        let claims = by_name("NodeClaim").expect("NodeClaim");
        assert_eq!((claims.resource.group.as_str(), claims.resource.plural.as_str()), ("karpenter.sh", "nodeclaims"));
        // A field only another version knows (Karpenter's) is left out, not a refusal.
        let mut json = encode(&pool.clone().into_any()).expect("encode");
        json["status"] = serde_json::json!({"nodes": 1, "somethingNew": {"a": 1}});
        json["spec"]["template"]["spec"]["kubeletTweak"] = serde_json::json!(true);
        let read = decode("NodePool", json).expect("an unknown field does not refuse the object");
        let read = NodePool::from_any(&read).expect("a NodePool");
        assert_eq!((read.spec.clone(), read.status.as_ref().and_then(|s| s.nodes)), (pool.spec.clone(), Some(1)));
        let pods = by_name("Pod").expect("Pod");
        assert!(pods.namespaced);
        assert_eq!((pods.resource.api_version.as_str(), pods.resource.plural.as_str()), ("v1", "pods"));
    }

    #[test]
    fn objects_read_from_the_api_keep_neither_managed_fields_nor_the_last_applied_manifest() {
        let node: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "n1",
                "labels": {"karpenter.sh/nodepool": "default"},
                "annotations": {"keep": "yes", "kubectl.kubernetes.io/last-applied-configuration": "{\"big\":1}"},
                "managedFields": [{
                    "manager": "kwok", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}
                }]
            },
            "spec": {"providerID": "kwok://n1"}
        }))
        .expect("node");
        let read = from_dynamic("Node", node).expect("decoded");
        let read = Node::from_any(&read).expect("a Node");
        assert_eq!(read.metadata.managed_fields, None);
        let annotations = read.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.into_iter().collect::<Vec<_>>(), [("keep".to_string(), "yes".to_string())]);
        assert_eq!(
            read.metadata.labels.as_ref().and_then(|l| l.get("karpenter.sh/nodepool")).map(String::as_str),
            Some("default")
        );
        assert_eq!(read.spec.as_ref().and_then(|s| s.provider_id.as_deref()), Some("kwok://n1"));
    }
}
