//! The metadata fields the API server owns or sets on every object ([`ServerFields`]): one view
//! over the whole objects' `ObjectMeta` and a slim pod's metadata, so the store writes names,
//! uids, versions and timestamps the same way whatever the object's form.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::SlimMeta;
use kerf_api::cluster::AnyObject;

/// The metadata fields the server owns or sets (names, uid, versions, timestamps), of either
/// metadata type: the whole objects' `ObjectMeta` and a slim pod's `SlimMeta` name them alike.
pub struct ServerFields<'a> {
    pub name: &'a mut Option<String>,
    pub generate_name: &'a Option<String>,
    pub namespace: &'a mut Option<String>,
    pub uid: &'a mut Option<String>,
    pub resource_version: &'a mut Option<String>,
    pub creation_timestamp: &'a mut Option<Time>,
    pub deletion_timestamp: &'a mut Option<Time>,
    pub generation: &'a mut Option<i64>,
}

/// Both metadata types have the fields under the same names.
macro_rules! server_fields_of {
    ($($fn:ident: $ty:ty),*) => {
        impl<'a> ServerFields<'a> {
            $(pub fn $fn(m: &'a mut $ty) -> Self {
                ServerFields {
                    name: &mut m.name,
                    generate_name: &m.generate_name,
                    namespace: &mut m.namespace,
                    uid: &mut m.uid,
                    resource_version: &mut m.resource_version,
                    creation_timestamp: &mut m.creation_timestamp,
                    deletion_timestamp: &mut m.deletion_timestamp,
                    generation: &mut m.generation,
                }
            })*
        }
    };
}
server_fields_of!(of_whole: ObjectMeta, of_slim: SlimMeta);

/// The metadata fields the server writes, of a stored typed object.
pub(crate) fn any_server_fields(obj: &mut AnyObject) -> ServerFields<'_> {
    match obj {
        AnyObject::Pod(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::SlimPod(o) => ServerFields::of_slim(&mut Arc::make_mut(o).metadata),
        AnyObject::Node(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::NodeClaim(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::NodePool(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::EC2NodeClass(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::DaemonSet(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::PodDisruptionBudget(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::PersistentVolumeClaim(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::PersistentVolume(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::StorageClass(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::Namespace(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::PriorityClass(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::RuntimeClass(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::PodTemplate(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::CapacityBuffer(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::NodeOverlay(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::ProvisioningRequest(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::CapacityQuota(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::Deployment(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::StatefulSet(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
        AnyObject::ReplicaSet(o) => ServerFields::of_whole(&mut Arc::make_mut(o).metadata),
    }
}
