//! The built-in kinds the API server serves: group, version, plural, scope and subresources of
//! each (what discovery publishes and what REST paths resolve to), where its OpenAPI schema comes
//! from, and for the kinds the controllers use, how their typed objects convert to and from JSON.
//! The kinds of the CRDs clients create are [`crate::custom`]'s.

use k8s_openapi::api::admissionregistration::v1 as admission;
use k8s_openapi::api::apps::v1::{self as apps, DaemonSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    self as core, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1 as rbac;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kerf_api::cluster::{AnyObject, Object};
use kerf_api::{
    CapacityBuffer, CapacityQuota, EC2NodeClass, FieldError, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest, crd,
};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Conversions of a kind the store keeps as a Rust type.
#[derive(Clone, Copy)]
pub struct Typed {
    /// Strict where the type is (kerf's CRDs reject unknown fields, as `--validate=strict`).
    pub decode: fn(Value) -> Result<AnyObject, FieldError>,
    pub encode: fn(&AnyObject) -> Option<Value>,
    /// The same object as `encode` gives, written as JSON text straight from the type (no
    /// `Value` in between: a list of 30,000 pods is written several times faster). False, with
    /// nothing written, when the object is not of the kind.
    pub write: fn(&AnyObject, &mut Vec<u8>) -> bool,
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
    pub schema: SchemaSource,
    /// What a CustomResourceDefinition a client created adds (printer columns, scale paths).
    pub custom: Option<&'static crate::custom::CustomKind>,
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

fn write<K: Object + Serialize>(a: &AnyObject, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let written = K::from_any(a).is_some_and(|k| serde_json::to_writer(&mut *out, k).is_ok());
    if !written {
        out.truncate(start);
    }
    written
}

/// [`encode_pod`] as text: a slim pod's own fields after the `apiVersion` and `kind` it lacks.
fn write_pod(a: &AnyObject, out: &mut Vec<u8>) -> bool {
    let AnyObject::SlimPod(p) = a else { return write::<Pod>(a, out) };
    let start = out.len();
    out.extend_from_slice(br#"{"apiVersion":"v1","kind":"Pod""#);
    let own = out.len();
    if serde_json::to_writer(&mut *out, &**p).is_err() || out.get(own) != Some(&b'{') {
        out.truncate(start);
        return false;
    }
    if out.len() - own == 2 {
        // `{}`: nothing of its own.
        out.truncate(own);
        out.push(b'}');
    } else {
        out[own] = b',';
    }
    true
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

fn node_overlay_rules(a: &AnyObject) -> Vec<FieldError> {
    NodeOverlay::from_any(a).map(kerf_api::nodeoverlay::validate).unwrap_or_default()
}

fn capacity_quota_rules(a: &AnyObject) -> Vec<FieldError> {
    CapacityQuota::from_any(a).map(kerf_api::capacityquota::validate).unwrap_or_default()
}

fn provisioning_request_rules(a: &AnyObject) -> Vec<FieldError> {
    ProvisioningRequest::from_any(a).map(kerf_api::provisioningrequest::validate).unwrap_or_default()
}

const fn typed<K: Object + Serialize + DeserializeOwned>() -> Option<Typed> {
    Some(Typed { decode: decode::<K>, encode: encode::<K>, write: write::<K>, validate: no_rules })
}

const fn typed_with<K: Object + Serialize + DeserializeOwned>(
    validate: fn(&AnyObject) -> Vec<FieldError>,
) -> Option<Typed> {
    Some(Typed { decode: decode::<K>, encode: encode::<K>, write: write::<K>, validate })
}

/// Where a kind's OpenAPI schema comes from.
#[derive(Clone, Copy)]
pub enum SchemaSource {
    /// The k8s-openapi type's (generated from the Kubernetes OpenAPI document).
    Type(fn(&mut SchemaGenerator) -> Schema),
    /// The CustomResourceDefinition's `openAPIV3Schema` (kerf's own, or one a client created).
    Crd,
}

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// The scope of a k8s-openapi resource as a constant.
trait Scoped {
    const NAMESPACED: bool;
}

impl Scoped for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scoped for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// A built-in kind: group, version, kind, plural, scope and schema come from its k8s-openapi
/// type (one home for them).
const fn builtin<T>(
    singular: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    scale: bool,
    typed: Option<Typed>,
) -> ResourceKind
where
    T: k8s_openapi::Resource + JsonSchema,
    T::Scope: Scoped,
{
    ResourceKind {
        group: T::GROUP,
        version: T::VERSION,
        kind: T::KIND,
        plural: T::URL_PATH_SEGMENT,
        singular,
        namespaced: <T::Scope as Scoped>::NAMESPACED,
        short_names,
        categories,
        status,
        scale,
        typed,
        schema: SchemaSource::Type(schema_of::<T>),
        custom: None,
    }
}

/// A built-in kind kept as JSON: no controller reads it as a type.
const fn stored<T>(
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    singular: &'static str,
) -> ResourceKind
where
    T: k8s_openapi::Resource + JsonSchema,
    T::Scope: Scoped,
{
    builtin::<T>(singular, short_names, categories, status, false, None)
}

/// Every built-in kind served, in discovery order. Kinds a client creates that no simulated
/// controller reads (ConfigMap, Service, Job, Role, ...) are kept as JSON and served alike.
pub static KINDS: &[ResourceKind] = &[
    builtin::<Pod>(
        "pod",
        &["po"],
        &["all"],
        true,
        false,
        Some(Typed { decode: decode::<Pod>, encode: encode_pod, write: write_pod, validate: no_rules }),
    ),
    builtin::<Node>("node", &["no"], &[], true, false, typed::<Node>()),
    builtin::<Namespace>("namespace", &["ns"], &[], true, false, typed::<Namespace>()),
    builtin::<PersistentVolumeClaim>(
        "persistentvolumeclaim",
        &["pvc"],
        &[],
        true,
        false,
        typed::<PersistentVolumeClaim>(),
    ),
    builtin::<PersistentVolume>("persistentvolume", &["pv"], &[], true, false, typed::<PersistentVolume>()),
    stored::<core::Event>(&["ev"], &[], false, "event"),
    stored::<core::ConfigMap>(&["cm"], &[], false, "configmap"),
    stored::<core::Secret>(&[], &[], false, "secret"),
    stored::<core::Service>(&["svc"], &["all"], true, "service"),
    stored::<core::ServiceAccount>(&["sa"], &[], false, "serviceaccount"),
    stored::<core::Endpoints>(&["ep"], &[], false, "endpoints"),
    stored::<core::LimitRange>(&["limits"], &[], false, "limitrange"),
    stored::<core::ResourceQuota>(&["quota"], &[], true, "resourcequota"),
    builtin::<core::ReplicationController>("replicationcontroller", &["rc"], &["all"], true, true, None),
    builtin::<PodTemplate>("podtemplate", &[], &[], false, false, typed::<PodTemplate>()),
    builtin::<apps::Deployment>("deployment", &["deploy"], &["all"], true, true, None),
    builtin::<apps::ReplicaSet>("replicaset", &["rs"], &["all"], true, true, None),
    builtin::<apps::StatefulSet>("statefulset", &["sts"], &["all"], true, true, None),
    builtin::<DaemonSet>("daemonset", &["ds"], &["all"], true, false, typed::<DaemonSet>()),
    stored::<apps::ControllerRevision>(&[], &[], false, "controllerrevision"),
    stored::<batch::Job>(&[], &["all"], true, "job"),
    stored::<batch::CronJob>(&["cj"], &["all"], true, "cronjob"),
    stored::<HorizontalPodAutoscaler>(&["hpa"], &["all"], true, "horizontalpodautoscaler"),
    builtin::<PodDisruptionBudget>("poddisruptionbudget", &["pdb"], &[], true, false, typed::<PodDisruptionBudget>()),
    builtin::<StorageClass>("storageclass", &["sc"], &[], false, false, typed::<StorageClass>()),
    builtin::<PriorityClass>("priorityclass", &["pc"], &[], false, false, typed::<PriorityClass>()),
    builtin::<RuntimeClass>("runtimeclass", &[], &[], false, false, typed::<RuntimeClass>()),
    stored::<Lease>(&[], &[], false, "lease"),
    stored::<rbac::Role>(&[], &[], false, "role"),
    stored::<rbac::RoleBinding>(&[], &[], false, "rolebinding"),
    stored::<rbac::ClusterRole>(&[], &[], false, "clusterrole"),
    stored::<rbac::ClusterRoleBinding>(&[], &[], false, "clusterrolebinding"),
    stored::<networking::Ingress>(&["ing"], &[], true, "ingress"),
    stored::<networking::IngressClass>(&[], &[], false, "ingressclass"),
    stored::<networking::NetworkPolicy>(&["netpol"], &[], false, "networkpolicy"),
    stored::<EndpointSlice>(&[], &[], false, "endpointslice"),
    stored::<admission::ValidatingWebhookConfiguration>(
        &[],
        &["api-extensions"],
        false,
        "validatingwebhookconfiguration",
    ),
    stored::<admission::MutatingWebhookConfiguration>(&[], &["api-extensions"], false, "mutatingwebhookconfiguration"),
    stored::<CustomResourceDefinition>(&["crd", "crds"], &["api-extensions"], true, "customresourcedefinition"),
    crd_kind(&crd::NODE_POOL, typed_with::<NodePool>(node_pool_rules)),
    crd_kind(&crd::NODE_CLAIM, typed_with::<NodeClaim>(node_claim_rules)),
    crd_kind(&crd::EC2_NODE_CLASS, typed_with::<EC2NodeClass>(node_class_rules)),
    crd_kind(&crd::CAPACITY_BUFFER, typed_with::<CapacityBuffer>(capacity_buffer_rules)),
    crd_kind(&crd::NODE_OVERLAY, typed_with::<NodeOverlay>(node_overlay_rules)),
    crd_kind(&crd::PROVISIONING_REQUEST, typed_with::<ProvisioningRequest>(provisioning_request_rules)),
    crd_kind(&crd::CAPACITY_QUOTA, typed_with::<CapacityQuota>(capacity_quota_rules)),
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
        schema: SchemaSource::Crd,
        custom: None,
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

/// The kind named `kind` (e.g. `Pod`): a built-in one, else the latest one a CRD served.
pub fn by_kind(kind: &str) -> Option<&'static ResourceKind> {
    KINDS.iter().find(|k| k.kind == kind).or_else(|| crate::custom::interned_by_kind(kind))
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

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::SlimPod;
    use std::sync::Arc;

    #[test]
    fn a_pod_written_as_text_is_the_pod_encode_gives_in_either_form() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let slim = AnyObject::SlimPod(Arc::new(SlimPod::from(&pod)));
        let empty = AnyObject::SlimPod(Arc::new(SlimPod::from(&Pod::default())));
        for a in [pod.into_any(), slim, empty] {
            let mut text = Vec::new();
            assert!(write_pod(&a, &mut text));
            let written: Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(Some(written), encode_pod(&a));
        }
        let mut text = b"[".to_vec();
        assert!(!write::<Node>(&AnyObject::SlimPod(Arc::new(SlimPod::from(&Pod::default()))), &mut text));
        assert_eq!(text, b"[", "nothing written for an object of another kind");
    }
}
