//! The narrow cluster API the controllers use, the kinds they read and write (each with its group,
//! version and plural, so a REST path or a kube-rs `Api` can be built from the type), and the
//! watch events that feed cluster state.
//!
//! It lives below the controllers and the in-memory API server so both speak it without one
//! depending on the other. Only the trait is here: implementations do the I/O.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

pub use crate::patch::Patch;
use crate::{
    CapacityBuffer, CapacityQuota, EC2NodeClass, MetaView, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest,
    SlimMeta, SlimPod,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A Kubernetes object kind the controllers read or write.
pub trait Object: Clone + Send + Sync + 'static {
    /// The kind, e.g. `Pod`, `NodeClaim`.
    const KIND: &'static str;
    /// The API group (`""` for the core group), e.g. `karpenter.sh`.
    const GROUP: &'static str;
    /// The API version within the group, e.g. `v1`.
    const VERSION: &'static str;
    /// The resource name in REST paths, e.g. `nodeclaims`.
    const PLURAL: &'static str;
    /// Whether objects of this kind live in a namespace.
    const NAMESPACED: bool;
    /// Its metadata's type: `ObjectMeta`, or a pod's [`SlimMeta`] for a [`SlimPod`].
    type Meta: MetaView;
    fn meta(&self) -> &Self::Meta;
    fn meta_mut(&mut self) -> &mut Self::Meta;
    fn into_any(self) -> AnyObject;
    fn from_any(obj: &AnyObject) -> Option<&Self> {
        Self::from_any_shared(obj).map(|o| &**o)
    }
    /// The object's shared allocation, for holders that keep it without a copy of their own.
    fn from_any_shared(obj: &AnyObject) -> Option<&Arc<Self>>;
}

/// The kind a type stands for: its own name, or the one given after `as`.
macro_rules! kind_name {
    ($ty:ident) => {
        stringify!($ty)
    };
    ($ty:ident $kind:literal) => {
        $kind
    };
}

/// The metadata type of a kind: `ObjectMeta`, or the one given after `with`.
macro_rules! meta_type {
    () => {
        ObjectMeta
    };
    ($meta:ty) => {
        $meta
    };
}

macro_rules! objects {
    ($($ty:ident $(as $kind:literal)? $(with $meta:ty)?, $namespaced:expr, $group:expr, $version:expr, $plural:expr;)*) => {
        /// Any object of the kinds the controllers watch.
        #[derive(Debug, Clone)]
        pub enum AnyObject {
            $($ty(Arc<$ty>),)*
        }

        impl AnyObject {
            pub fn kind(&self) -> &'static str {
                match self {
                    $(AnyObject::$ty(_) => kind_name!($ty $($kind)?),)*
                }
            }

            pub fn meta(&self) -> &dyn MetaView {
                match self {
                    $(AnyObject::$ty(o) => o.meta(),)*
                }
            }
        }

        /// The object as its own type serializes it.
        impl serde::Serialize for AnyObject {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(AnyObject::$ty(o) => o.serialize(s),)*
                }
            }
        }

        $(
            impl Object for $ty {
                const KIND: &'static str = kind_name!($ty $($kind)?);
                const NAMESPACED: bool = $namespaced;
                const GROUP: &'static str = $group;
                const VERSION: &'static str = $version;
                const PLURAL: &'static str = $plural;
                type Meta = meta_type!($($meta)?);
                fn meta(&self) -> &Self::Meta {
                    &self.metadata
                }
                fn meta_mut(&mut self) -> &mut Self::Meta {
                    &mut self.metadata
                }
                fn into_any(self) -> AnyObject {
                    AnyObject::$ty(Arc::new(self))
                }
                fn from_any_shared(obj: &AnyObject) -> Option<&Arc<Self>> {
                    match obj {
                        AnyObject::$ty(o) => Some(o),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }
            }
        )*
    };
}

objects! {
    Pod, true, "", "v1", "pods";
    // A Pod as the controllers keep it (what a watch of pods delivers to them).
    SlimPod as "Pod" with SlimMeta, true, "", "v1", "pods";
    Node, false, "", "v1", "nodes";
    NodeClaim, false, crate::crd::NODE_CLAIM.group, crate::crd::NODE_CLAIM.version, crate::crd::NODE_CLAIM.plural;
    NodePool, false, crate::crd::NODE_POOL.group, crate::crd::NODE_POOL.version, crate::crd::NODE_POOL.plural;
    EC2NodeClass, false, crate::crd::EC2_NODE_CLASS.group, crate::crd::EC2_NODE_CLASS.version, crate::crd::EC2_NODE_CLASS.plural;
    DaemonSet, true, "apps", "v1", "daemonsets";
    PodDisruptionBudget, true, "policy", "v1", "poddisruptionbudgets";
    PersistentVolumeClaim, true, "", "v1", "persistentvolumeclaims";
    PersistentVolume, false, "", "v1", "persistentvolumes";
    StorageClass, false, "storage.k8s.io", "v1", "storageclasses";
    Namespace, false, "", "v1", "namespaces";
    PriorityClass, false, "scheduling.k8s.io", "v1", "priorityclasses";
    RuntimeClass, false, "node.k8s.io", "v1", "runtimeclasses";
    PodTemplate, true, "", "v1", "podtemplates";
    CapacityBuffer, true, crate::crd::CAPACITY_BUFFER.group, crate::crd::CAPACITY_BUFFER.version, crate::crd::CAPACITY_BUFFER.plural;
    NodeOverlay, false, crate::crd::NODE_OVERLAY.group, crate::crd::NODE_OVERLAY.version, crate::crd::NODE_OVERLAY.plural;
    ProvisioningRequest, true, crate::crd::PROVISIONING_REQUEST.group, crate::crd::PROVISIONING_REQUEST.version, crate::crd::PROVISIONING_REQUEST.plural;
    CapacityQuota, false, crate::crd::CAPACITY_QUOTA.group, crate::crd::CAPACITY_QUOTA.version, crate::crd::CAPACITY_QUOTA.plural;
    // Read (not watched) for the workload a CapacityBuffer's scalableRef names.
    Deployment, true, "apps", "v1", "deployments";
    StatefulSet, true, "apps", "v1", "statefulsets";
    ReplicaSet, true, "apps", "v1", "replicasets";
}

impl AnyObject {
    /// The object as the controllers keep it: a whole Pod made a [`SlimPod`] (see
    /// [`crate::slim_pod`]), any other object as it is.
    pub fn kept(&self) -> Cow<'_, AnyObject> {
        match self {
            AnyObject::Pod(p) => Cow::Owned(slim(p)),
            other => Cow::Borrowed(other),
        }
    }

    /// [`AnyObject::kept`], taking the object.
    pub fn into_kept(self) -> AnyObject {
        match self {
            AnyObject::Pod(p) => slim(&p),
            other => other,
        }
    }

    /// The object as a `K`, shared when it is one; a pod in the other form than `K` is
    /// converted (a slim pod read as a whole `Pod` has only what the slim form keeps). `None`
    /// for an object of another kind.
    pub fn shared_as<K: Object>(&self) -> Option<Arc<K>> {
        if let Some(k) = K::from_any_shared(self) {
            return Some(Arc::clone(k));
        }
        let other = match self {
            AnyObject::Pod(p) => slim(p),
            AnyObject::SlimPod(p) => p.whole().ok()?.into_any(),
            _ => return None,
        };
        K::from_any_shared(&other).cloned()
    }
}

fn slim(pod: &Pod) -> AnyObject {
    AnyObject::SlimPod(Arc::new(SlimPod::from(pod)))
}

/// A change to one object, as a watch delivers it.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// Created or updated; carries the object's new state.
    Applied(AnyObject),
    /// Gone from the API (finalizers, if any, were already removed).
    Deleted(AnyObject),
}

impl WatchEvent {
    /// The event as the controllers keep its object (see [`AnyObject::kept`]).
    pub fn kept(&self) -> Cow<'_, WatchEvent> {
        let (obj, applied) = match self {
            WatchEvent::Applied(o) => (o, true),
            WatchEvent::Deleted(o) => (o, false),
        };
        match obj.kept() {
            Cow::Borrowed(_) => Cow::Borrowed(self),
            Cow::Owned(o) if applied => Cow::Owned(WatchEvent::Applied(o)),
            Cow::Owned(o) => Cow::Owned(WatchEvent::Deleted(o)),
        }
    }

    /// [`WatchEvent::kept`], taking the event.
    pub fn into_kept(self) -> WatchEvent {
        match self {
            WatchEvent::Applied(o) => WatchEvent::Applied(o.into_kept()),
            WatchEvent::Deleted(o) => WatchEvent::Deleted(o.into_kept()),
        }
    }
}

/// Errors from the cluster API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{kind} {name} not found")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} {name} already exists")]
    AlreadyExists { kind: &'static str, name: String },
    /// The object changed since it was read (stale resourceVersion).
    #[error("conflict writing {kind} {name}: the object was modified")]
    Conflict { kind: &'static str, name: String },
    /// An eviction refused because it would violate a PodDisruptionBudget.
    #[error("cannot evict pod {name}: {reason}")]
    TooManyRequests { name: String, reason: String },
    #[error("invalid {kind} {name}: {message}")]
    Invalid { kind: &'static str, name: String, message: String },
    /// A write the cluster refuses whatever the object says, e.g. new content in a namespace
    /// being deleted; `cause` is the reason's one word (`NamespaceTerminating`).
    #[error("{kind} {name} is forbidden: {message}")]
    Forbidden { kind: &'static str, name: String, cause: &'static str, message: String },
    #[error("cluster API error: {0}")]
    Other(String),
}

/// A Kubernetes Event to record against an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// Kind and name of the object it is about, e.g. (`Pod`, `default/inflate-abc`).
    pub kind: &'static str,
    pub name: String,
    /// The object's uid, as the recorder knows it (an Event names the object's incarnation).
    pub uid: Option<String>,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    pub reason: String,
    pub message: String,
}

/// The cluster as the controllers see it. Writes follow API server semantics: `create` assigns
/// uid / resourceVersion / creationTimestamp (and `generateName`); `update` fails with
/// `Conflict` on a stale resourceVersion; `delete` of an object with finalizers only sets its
/// deletionTimestamp, and the object goes away when the last finalizer is removed by `update`.
pub trait ClusterApi: Send + Sync {
    fn get<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, ApiError>> + Send;
    fn list<K: Object>(&self) -> impl Future<Output = Result<Vec<K>, ApiError>> + Send;
    fn create<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send;
    /// Replaces metadata and spec (not status).
    fn update<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send;
    /// Replaces status only.
    fn update_status<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send;
    /// Patches metadata and spec (not status) of the current object and returns the result.
    /// A patch that writes `metadata.resourceVersion` applies only to that version (`Conflict`
    /// on any other); one that does not applies to whichever version is current, so what it
    /// leaves alone is never overwritten with a stale copy.
    fn patch<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> impl Future<Output = Result<K, ApiError>> + Send;
    /// Patches status only, as [`ClusterApi::patch`] does the rest.
    fn patch_status<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> impl Future<Output = Result<K, ApiError>> + Send;
    fn delete<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
    /// Evicts a pod through the Eviction API (PodDisruptionBudgets are honoured).
    fn evict(&self, namespace: &str, name: &str) -> impl Future<Output = Result<(), ApiError>> + Send;
    /// Nominates / binds are not here: kerf never binds pods; kube-scheduler does.
    fn record_event(&self, event: EventRecord) -> impl Future<Output = ()> + Send;
}
