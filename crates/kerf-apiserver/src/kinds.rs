//! The kinds the API server serves: group, version, plural, scope and subresources of each (what
//! discovery publishes and what REST paths resolve to), and for the kinds the controllers use,
//! how their typed objects convert to and from JSON.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use kerf_api::cluster::{AnyObject, Object};
use kerf_api::{CapacityBuffer, EC2NodeClass, FieldError, NodeClaim, NodePool, crd};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Conversions of a kind the store keeps as a Rust type.
#[derive(Clone, Copy)]
pub struct Typed {
    /// Strict where the type is (kerf's CRDs reject unknown fields, as `--validate=strict`).
    pub decode: fn(Value) -> Result<AnyObject, FieldError>,
    pub encode: fn(&AnyObject) -> Option<Value>,
    /// The CRD validation rules, for kerf's own kinds.
    pub validate: fn(&AnyObject) -> Vec<FieldError>,
}

/// One served resource.
pub struct ResourceKind {
    /// `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub status: bool,
    pub scale: bool,
    pub typed: Option<Typed>,
}

impl ResourceKind {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    /// `plural` or `plural.group`, as Status errors name a resource.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.to_string() } else { format!("{}.{}", self.plural, self.group) }
    }
}

fn decode<K: Object + DeserializeOwned>(v: Value) -> Result<AnyObject, FieldError> {
    serde_path_to_error::deserialize::<_, K>(v).map(Object::into_any).map_err(|e| {
        let path = e.path().to_string();
        FieldError::new(if path == "." { String::new() } else { path }, e.into_inner().to_string())
    })
}

fn encode<K: Object + Serialize>(a: &AnyObject) -> Option<Value> {
    K::from_any(a).and_then(|k| serde_json::to_value(k).ok())
}

/// A pod in either of the store's forms (see the `pod_form` module); a slim one shows what it keeps.
fn encode_pod(a: &AnyObject) -> Option<Value> {
    match a {
        AnyObject::SlimPod(p) => {
            let mut v = serde_json::to_value(&**p).ok()?;
            let fields = v.as_object_mut()?;
            fields.insert("apiVersion".to_string(), Value::from(<Pod as Object>::VERSION));
            fields.insert("kind".to_string(), Value::from(<Pod as Object>::KIND));
            Some(v)
        }
        other => encode::<Pod>(other),
    }
}

fn no_rules(_: &AnyObject) -> Vec<FieldError> {
    Vec::new()
}

fn node_pool_rules(a: &AnyObject) -> Vec<FieldError> {
    NodePool::from_any(a).map(kerf_api::validate_node_pool).unwrap_or_default()
}

fn node_claim_rules(a: &AnyObject) -> Vec<FieldError> {
    NodeClaim::from_any(a).map(kerf_api::validate_node_claim).unwrap_or_default()
}

fn node_class_rules(a: &AnyObject) -> Vec<FieldError> {
    EC2NodeClass::from_any(a).map(kerf_api::validate_ec2_node_class).unwrap_or_default()
}

fn capacity_buffer_rules(a: &AnyObject) -> Vec<FieldError> {
    CapacityBuffer::from_any(a).map(kerf_api::capacitybuffer::validate).unwrap_or_default()
}

const fn typed<K: Object + Serialize + DeserializeOwned>() -> Option<Typed> {
    Some(Typed { decode: decode::<K>, encode: encode::<K>, validate: no_rules })
}

const fn typed_with<K: Object + Serialize + DeserializeOwned>(
    validate: fn(&AnyObject) -> Vec<FieldError>,
) -> Option<Typed> {
    Some(Typed { decode: decode::<K>, encode: encode::<K>, validate })
}

macro_rules! kind {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, $ns:expr, [$($short:expr),*], [$($cat:expr),*], status: $status:expr, scale: $scale:expr, $typed:expr) => {
        ResourceKind {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            namespaced: $ns,
            short_names: &[$($short),*],
            categories: &[$($cat),*],
            status: $status,
            scale: $scale,
            typed: $typed,
        }
    };
}

/// A kind the store keeps as a Rust type: group, version, kind, plural and scope come from its
/// [`Object`] implementation (one home for them).
macro_rules! typed_kind {
    ($ty:ty, $singular:expr, [$($short:expr),*], [$($cat:expr),*], status: $status:expr, scale: $scale:expr, $typed:expr) => {
        kind!(
            <$ty as Object>::GROUP,
            <$ty as Object>::VERSION,
            <$ty as Object>::KIND,
            <$ty as Object>::PLURAL,
            $singular,
            <$ty as Object>::NAMESPACED,
            [$($short),*],
            [$($cat),*],
            status: $status,
            scale: $scale,
            $typed
        )
    };
}

/// Every kind served, in discovery order.
pub static KINDS: &[ResourceKind] = &[
    typed_kind!(Pod, "pod", ["po"], ["all"], status: true, scale: false, Some(Typed { decode: decode::<Pod>, encode: encode_pod, validate: no_rules })),
    typed_kind!(Node, "node", ["no"], [], status: true, scale: false, typed::<Node>()),
    typed_kind!(Namespace, "namespace", ["ns"], [], status: true, scale: false, typed::<Namespace>()),
    typed_kind!(PersistentVolumeClaim, "persistentvolumeclaim", ["pvc"], [], status: true, scale: false, typed::<PersistentVolumeClaim>()),
    typed_kind!(PersistentVolume, "persistentvolume", ["pv"], [], status: true, scale: false, typed::<PersistentVolume>()),
    kind!("", "v1", "Event", "events", "event", true, ["ev"], [], status: false, scale: false, None),
    kind!("apps", "v1", "Deployment", "deployments", "deployment", true, ["deploy"], ["all"], status: true, scale: true, None),
    kind!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", true, ["rs"], ["all"], status: true, scale: true, None),
    kind!("apps", "v1", "StatefulSet", "statefulsets", "statefulset", true, ["sts"], ["all"], status: true, scale: true, None),
    typed_kind!(PodTemplate, "podtemplate", [], [], status: false, scale: false, typed::<PodTemplate>()),
    typed_kind!(DaemonSet, "daemonset", ["ds"], ["all"], status: true, scale: false, typed::<DaemonSet>()),
    typed_kind!(PodDisruptionBudget, "poddisruptionbudget", ["pdb"], [], status: true, scale: false, typed::<PodDisruptionBudget>()),
    typed_kind!(StorageClass, "storageclass", ["sc"], [], status: false, scale: false, typed::<StorageClass>()),
    typed_kind!(PriorityClass, "priorityclass", ["pc"], [], status: false, scale: false, typed::<PriorityClass>()),
    typed_kind!(RuntimeClass, "runtimeclass", [], [], status: false, scale: false, typed::<RuntimeClass>()),
    kind!("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, [], [], status: false, scale: false, None),
    crd_kind(&crd::NODE_POOL, typed_with::<NodePool>(node_pool_rules)),
    crd_kind(&crd::NODE_CLAIM, typed_with::<NodeClaim>(node_claim_rules)),
    crd_kind(&crd::EC2_NODE_CLASS, typed_with::<EC2NodeClass>(node_class_rules)),
    crd_kind(&crd::CAPACITY_BUFFER, typed_with::<CapacityBuffer>(capacity_buffer_rules)),
];

/// One of kerf's CRDs, named as its CustomResourceDefinition names it, with the scale
/// subresource the CRD declares (a static NodePool's `spec.replicas`).
const fn crd_kind(def: &'static crd::CrdDefinition, typed: Option<Typed>) -> ResourceKind {
    ResourceKind {
        group: def.group,
        version: def.version,
        kind: def.kind,
        plural: def.plural,
        singular: def.singular,
        namespaced: def.namespaced,
        short_names: def.short_names,
        categories: def.categories,
        status: true,
        scale: def.scale.is_some(),
        typed,
    }
}

/// Rules an update is held to against the object it replaces (CEL `oldSelf` rules): a NodePool
/// cannot turn from static (`spec.replicas` set) to dynamic or back, as Karpenter's CRD rules.
pub fn transition_rules(old: &AnyObject, new: &AnyObject) -> Vec<FieldError> {
    match (NodePool::from_any(old), NodePool::from_any(new)) {
        (Some(o), Some(n)) if o.spec.replicas.is_some() != n.spec.replicas.is_some() => vec![FieldError::new(
            "spec.replicas",
            if o.spec.replicas.is_some() {
                "a static NodePool cannot become dynamic (spec.replicas cannot be removed); create a new NodePool"
            } else {
                "a dynamic NodePool cannot become static (spec.replicas cannot be added); create a new NodePool"
            },
        )],
        _ => Vec::new(),
    }
}

/// The kind named `kind` (e.g. `Pod`).
pub fn by_kind(kind: &str) -> Option<&'static ResourceKind> {
    KINDS.iter().find(|k| k.kind == kind)
}

/// The resource at `group`/`version`/`plural` of a REST path.
pub fn by_plural(group: &str, version: &str, plural: &str) -> Option<&'static ResourceKind> {
    KINDS.iter().find(|k| k.group == group && k.version == version && k.plural == plural)
}

/// Whether objects of `kind` live in a namespace (unknown kinds are taken as cluster-scoped).
pub fn is_namespaced(kind: &str) -> bool {
    by_kind(kind).is_some_and(|k| k.namespaced)
}

/// What the API server refuses in any object's labels: a key that is not a qualified name, a
/// value that is not a label value.
pub(crate) fn label_problems<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<FieldError> {
    use kerf_api::validation::{label_value_problem, qualified_name_problem};
    labels
        .into_iter()
        .flat_map(|(k, v)| [qualified_name_problem(k), label_value_problem(v)])
        .flatten()
        .map(|problem| FieldError::new("metadata.labels", problem))
        .collect()
}
