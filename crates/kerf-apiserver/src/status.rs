//! The status part of the typed kinds: which kinds have one, copying it between two versions of
//! an object (a write of the status subresource keeps everything else; a write of the main
//! resource keeps the stored status), and a merge patch of the status alone.
//!
//! A status patch is the API's most frequent write (a nomination on every pending pod, a
//! condition on every NodeClaim): patching the status as a part of its own, instead of encoding
//! the whole object to JSON and decoding it again, keeps that write proportional to the status.
//! The result is the one the whole-object patch gives: the status subresource takes nothing but
//! the status from a patch.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kerf_api::cluster::{AnyObject, Object};
use kerf_api::{
    CapacityBuffer, CapacityQuota, EC2NodeClass, FieldError, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest,
    SlimPod,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A kind with a `status` field.
trait HasStatus: Object {
    type Status: Clone + Serialize + DeserializeOwned;
    fn status(&self) -> &Option<Self::Status>;
    fn status_mut(&mut self) -> &mut Option<Self::Status>;
}

/// The kinds with a status, and the type of each one's status.
macro_rules! with_status {
    ($($ty:ident => $status:ty),* $(,)?) => {
        $(impl HasStatus for $ty {
            type Status = $status;
            fn status(&self) -> &Option<Self::Status> {
                &self.status
            }
            fn status_mut(&mut self) -> &mut Option<Self::Status> {
                &mut self.status
            }
        })*

        /// Copies `from`'s status into `into` (same kind), leaving everything else of `into`.
        pub(crate) fn copy_status(into: &mut AnyObject, from: &AnyObject) {
            match (into, from) {
                $((AnyObject::$ty(a), AnyObject::$ty(b)) => copy::<$ty>(a, b),)*
                _ => {}
            }
        }

        /// `obj` with `patch` (a JSON merge patch of the status, RFC 7386) applied to its status;
        /// `None` for a kind without a status.
        fn patched(obj: &AnyObject, patch: &Value) -> Option<Result<AnyObject, FieldError>> {
            match obj {
                $(AnyObject::$ty(o) => Some(patch_one::<$ty>(o, patch)),)*
                _ => None,
            }
        }
    };
}

with_status! {
    Pod => k8s_openapi::api::core::v1::PodStatus,
    SlimPod => kerf_api::slim_pod::SlimPodStatus,
    Node => k8s_openapi::api::core::v1::NodeStatus,
    Namespace => k8s_openapi::api::core::v1::NamespaceStatus,
    PersistentVolumeClaim => k8s_openapi::api::core::v1::PersistentVolumeClaimStatus,
    PersistentVolume => k8s_openapi::api::core::v1::PersistentVolumeStatus,
    DaemonSet => k8s_openapi::api::apps::v1::DaemonSetStatus,
    PodDisruptionBudget => k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus,
    NodeClaim => kerf_api::nodeclaim::NodeClaimStatus,
    NodePool => kerf_api::nodepool::NodePoolStatus,
    EC2NodeClass => kerf_api::ec2nodeclass::EC2NodeClassStatus,
    CapacityBuffer => kerf_api::capacitybuffer::CapacityBufferStatus,
    NodeOverlay => kerf_api::nodeoverlay::NodeOverlayStatus,
    ProvisioningRequest => kerf_api::provisioningrequest::ProvisioningRequestStatus,
    CapacityQuota => kerf_api::capacityquota::CapacityQuotaStatus,
}

fn copy<K: HasStatus>(into: &mut Arc<K>, from: &Arc<K>) {
    Arc::make_mut(into).status_mut().clone_from(from.status());
}

fn patch_one<K: HasStatus>(obj: &Arc<K>, patch: &Value) -> Result<AnyObject, FieldError> {
    let status = crate::parts::merged(obj.status(), patch, "status")?;
    let mut next = K::clone(obj);
    *next.status_mut() = status;
    Ok(next.into_any())
}

/// A merge patch of the status subresource that only names the status (and, as a
/// precondition, the resourceVersion): the status it sets and the version it is pinned to.
/// Anything else (a patch that also names other metadata, `apiVersion` or `kind`, which the
/// whole-object patch checks) is not one.
pub(crate) fn status_only(patch: &Value) -> Option<(&Value, Option<&str>)> {
    let fields = patch.as_object()?;
    let mut version = None;
    for (k, v) in fields {
        match k.as_str() {
            "status" => {}
            "metadata" => {
                let meta = v.as_object()?;
                for (mk, mv) in meta {
                    match (mk.as_str(), mv) {
                        ("resourceVersion", Value::String(rv)) => version = Some(rv.as_str()),
                        _ => return None,
                    }
                }
            }
            _ => return None,
        }
    }
    Some((fields.get("status")?, version))
}

/// `current` with a status-only merge patch applied, pinned to `version` (else to `current`'s
/// own); `None` for a kind this does not apply to.
pub(crate) fn patch_status(
    current: &AnyObject,
    status_patch: &Value,
    version: Option<&str>,
) -> Option<Result<AnyObject, FieldError>> {
    let mut next = match patched(current, status_patch)? {
        Ok(n) => n,
        Err(e) => return Some(Err(e)),
    };
    if let Some(v) = version {
        *crate::server_fields::any_server_fields(&mut next).resource_version = Some(v.to_string());
    }
    Some(Ok(next))
}
