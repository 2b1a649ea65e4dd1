//! What reconcilers make known to each other ([`Published`]): each field names its writer and
//! its readers. A reconciler's own memory is never read by another; what others need of it is
//! published here.

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_api::cluster::{AnyObject, WatchEvent};
use kerf_api::pod_facts;
use kerf_api::{NodeClaim, SlimPod};
use kerf_cloud::Timestamp;

use crate::buffer_room::BufferRoom;
use crate::nominations::Nominations;
use crate::state::{ClusterState, key_of};
use crate::util;

/// The provisioner launched a NodeClaim for pods (the disruption controller checks whether it
/// undoes a consolidation it watches).
#[derive(Debug, Clone)]
pub(crate) struct PodLaunch {
    pub claim: String,
    pub node_pool: String,
    /// `namespace/name` and owner key of each pod it was launched for.
    pub pods: Vec<(String, String)>,
    pub at: Timestamp,
}

/// What disruption would disrupt first, by node name, most wanted first (written by disruption
/// at each evaluation while `PodDeletionCostManagement` is on, read by the
/// `deletion_cost` reconciler).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletionRanking {
    pub nodes: Vec<String>,
}

/// What reconcilers make known to each other. Each field says who writes it and who reads it;
/// a flag is raised by anyone who saw the change and lowered only by its reader.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// Written by the provisioner: pods nominated to in-flight claims or existing nodes (ended
    /// by watch events here, see [`Published::observe`]). Read when building any scheduling
    /// input, and by disruption, which waits while any pod is nominated to a claim.
    pub nominations: Nominations,
    /// Written by the provisioner: a batch window is open. Disruption waits while it is.
    pub batch_open: bool,
    /// Written by whoever lists the NodePools' instance types: NodePool → why its types could
    /// not be listed the last time. Read by NodePool status and in pending pods' explanations.
    pub pool_errors: BTreeMap<String, String>,
    /// Raised when something other than a pod changed that may let pending pods fit (a
    /// NodePool's or node class's spec, a node class's readiness, a claim, node or pod gone);
    /// lowered by the provisioner.
    pub pending_may_fit: bool,
    /// Raised when a claim, pool, node class or type listing changed; lowered by NodePool status.
    pub pool_status_stale: bool,
    /// Written by the lifecycle reconciler: instances launched whose claim could not record
    /// them yet. Termination deletes the one of a claim it finalizes; garbage collection
    /// leaves them alone while their claim may still record them and drops them once not.
    pub unrecorded_launches: BTreeMap<String, NodeClaim>,
    /// Written by the lifecycle reconciler: launches asked of the cloud by this process (garbage
    /// collection skips listing an empty cloud again while this is unchanged).
    pub launches: u64,
    /// Written by the provisioner, taken by disruption: the claims launched for pods.
    pub pod_launches: Vec<PodLaunch>,
    /// Written by the CapacityBuffer reconciler: the room buffers keep and where it is held.
    /// Read by the provisioner (it places the room), the scheduling inputs and disruption (room
    /// held on a node counts like its pods).
    pub buffer_room: BufferRoom,
    /// Written by the ProvisioningRequest reconciler: the room booked for provisioned requests'
    /// pods and where it is held. Read like `buffer_room`, except by the provisioner: pending
    /// pods are not planned into booked room that is held, and booked room held nowhere (only
    /// best-effort-atomic bookings keep such) is placed after them, so lost room is launched
    /// again. The buffer reconciler's chunks take what bookings leave.
    pub booked_room: BufferRoom,
    /// Written by disruption: the nodes it would disrupt first. Read by the pod-deletion-cost
    /// reconciler.
    pub deletion_ranking: DeletionRanking,
}

impl Published {
    pub fn new() -> Self {
        Published { pool_status_stale: true, ..Published::default() }
    }

    /// All room kept for pods that do not exist yet (buffers' and bookings'), by the node or
    /// in-flight claim holding it.
    pub fn room_held(&self) -> BTreeMap<&str, Vec<Arc<SlimPod>>> {
        let mut out = self.buffer_room.held();
        for (node, pods) in self.booked_room.held() {
            out.entry(node).or_default().extend(pods);
        }
        out
    }

    /// The room held on one node (buffers' and bookings').
    pub fn room_held_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Arc<SlimPod>> + 'a {
        self.buffer_room.held_on(node).chain(self.booked_room.held_on(node))
    }

    /// Changes whenever either room changes.
    pub fn room_generation(&self) -> (u64, u64) {
        (self.buffer_room.generation, self.booked_room.generation)
    }

    /// What a watch event ends or raises here (before the cluster state applies it).
    pub fn observe(&mut self, event: &WatchEvent, old: &ClusterState) {
        let (WatchEvent::Applied(obj) | WatchEvent::Deleted(obj)) = event;
        if matches!(obj, AnyObject::NodeClaim(_) | AnyObject::NodePool(_) | AnyObject::EC2NodeClass(_)) {
            self.pool_status_stale = true;
        }
        match event {
            WatchEvent::Applied(obj) => {
                // A pool or node class whose spec changed may let pending pods fit; status
                // writes (kerf's own included) do not.
                let spec_changed = match obj {
                    AnyObject::NodePool(p) => old.node_pool(p.name()).is_none_or(|was| was.spec != p.spec),
                    // ... and so does a node class becoming Ready (or no longer).
                    AnyObject::EC2NodeClass(c) => {
                        let name = c.metadata.name.as_deref().unwrap_or_default();
                        old.node_classes()
                            .get(name)
                            .is_none_or(|was| was.spec != c.spec || was.not_ready() != c.not_ready())
                    }
                    _ => false,
                };
                self.pending_may_fit |= spec_changed;
            }
            WatchEvent::Deleted(obj) => {
                if matches!(obj, AnyObject::NodeClaim(_) | AnyObject::Node(_) | AnyObject::SlimPod(_)) {
                    self.pending_may_fit = true;
                }
                // An instance launched for a deleted claim that it never recorded is garbage now.
                if let AnyObject::NodeClaim(c) = obj {
                    self.unrecorded_launches.remove(c.name());
                }
            }
        }
        // A nomination ends when its pod is bound, finished or gone, or its claim is going away.
        match event {
            WatchEvent::Applied(AnyObject::SlimPod(p))
                if util::pod_node_name(p).is_some()
                    || pod_facts::terminal(p)
                    || p.metadata.deletion_timestamp.is_some() =>
            {
                self.nominations.forget_pod(&key_of(&p.metadata));
            }
            WatchEvent::Deleted(AnyObject::SlimPod(p)) => self.nominations.forget_pod(&key_of(&p.metadata)),
            WatchEvent::Applied(AnyObject::NodeClaim(c)) if c.metadata.deletion_timestamp.is_some() => {
                self.nominations.remove_claim(c.name());
            }
            WatchEvent::Deleted(AnyObject::NodeClaim(c)) => self.nominations.remove_claim(c.name()),
            _ => {}
        }
    }
}
