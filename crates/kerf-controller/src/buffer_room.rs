//! Room kept for pods that do not exist yet ([`BufferRoom`]): virtual pods and where each is
//! held, and how they are placed ([`place_room`]). Two reconcilers keep such room: the
//! CapacityBuffer reconciler (a buffer's chunks, see `buffers`) and the ProvisioningRequest
//! reconciler (a request's booked pods, see `provisioning_requests`); each publishes its own
//! [`BufferRoom`]. Provisioning, disruption and the scheduling inputs read both where the
//! reconcilers publish what they know.

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_cloud::CloudProvider;
use kerf_scheduling::SchedulingContext;

use crate::ctx::Ctx;
use crate::state::ObjectKey;

/// One chunk of a buffer's room, or one booked pod of a ProvisioningRequest: a pod that exists
/// only in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualPod {
    /// The buffer or request, `(namespace, name)`.
    pub buffer: ObjectKey,
    pub pod: Arc<SlimPod>,
    /// The node (or in-flight NodeClaim) whose free room holds it, if any does.
    pub held_on: Option<String>,
    /// `held_on` is a registered, initialized node (not a claim still launching).
    pub registered: bool,
}

/// The room every buffer keeps, and where it is held now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BufferRoom {
    /// In buffer order, then chunk order.
    pub pods: Vec<VirtualPod>,
    /// Bumped whenever `pods` changes (what the provisioner watches to open a batch).
    pub generation: u64,
}

impl BufferRoom {
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Empties the room, bumping the generation when it held anything.
    pub fn clear(&mut self) {
        if !self.pods.is_empty() {
            self.pods.clear();
            self.generation += 1;
        }
    }

    /// Some chunk is held nowhere: neither on a node nor on a claim that is launching.
    pub fn short(&self) -> bool {
        self.pods.iter().any(|p| p.held_on.is_none())
    }

    /// The virtual pods held on a node or in-flight claim, by its name.
    pub fn held(&self) -> BTreeMap<&str, Vec<Arc<SlimPod>>> {
        let mut out: BTreeMap<&str, Vec<Arc<SlimPod>>> = BTreeMap::new();
        for p in &self.pods {
            if let Some(n) = &p.held_on {
                out.entry(n.as_str()).or_default().push(Arc::clone(&p.pod));
            }
        }
        out
    }

    /// The room held on one node.
    pub fn held_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Arc<SlimPod>> + 'a {
        self.pods.iter().filter(move |p| p.held_on.as_deref() == Some(node)).map(|p| &p.pod)
    }

    /// `(chunks, chunks on registered nodes)` of one buffer.
    pub fn counts(&self, buffer: &ObjectKey) -> (usize, usize) {
        let mine = self.pods.iter().filter(|p| &p.buffer == buffer);
        mine.fold((0, 0), |(all, placed), p| (all + 1, placed + usize::from(p.registered)))
    }
}

/// Where each virtual pod of `room` is held, by the pod's uid.
pub(crate) fn previous_places(room: &BufferRoom) -> BTreeMap<String, String> {
    room.pods.iter().filter_map(|p| Some((p.pod.metadata.uid.clone()?, p.held_on.clone()?))).collect()
}

/// [`BufferRoom::held`] with owned node names (to outlive a borrow of the room).
pub(crate) fn held_owned(room: &BufferRoom) -> BTreeMap<String, Vec<Arc<SlimPod>>> {
    room.held().into_iter().map(|(n, pods)| (n.to_string(), pods)).collect()
}

/// `pod` with every term of its required node affinity narrowed to the node (or in-flight
/// claim) named `node`.
fn pinned_to(pod: &SlimPod, node: &str) -> SlimPod {
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
    let field = NodeSelectorRequirement {
        key: "metadata.name".to_string(),
        operator: "In".to_string(),
        values: Some(vec![node.to_string()]),
    };
    let mut pod = pod.clone();
    let spec = pod.spec.get_or_insert_with(Default::default);
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    let required = node_affinity
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector { node_selector_terms: Vec::new() });
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields.get_or_insert_with(Vec::new).push(field.clone());
    }
    // Another identity: the pinned copy's parsed facts differ from the pod's.
    pod.metadata.uid = pod.metadata.uid.map(|u| format!("{u}@{node}"));
    pod
}

/// Places every virtual pod on the room existing nodes and in-flight claims have left (pods
/// bound, nominated and DaemonSet pods counted, and `also_held`: room another reconciler keeps),
/// no pool launching anything. A pod stays on the node that held it (`before`, by uid) while it
/// still fits there (room that moves on every change would leave the nodes it left empty, and
/// emptiness would take them); the others go wherever the scheduling core puts them.
pub(crate) async fn place_room<P: CloudProvider, C>(
    cx: &mut Ctx<'_, P, C>,
    pods: &mut [VirtualPod],
    before: &BTreeMap<String, String>,
    mut also_held: BTreeMap<String, Vec<Arc<SlimPod>>>,
) {
    if pods.is_empty() {
        return;
    }
    let types = cx.instance_types_by_pool().await;
    let mut base = cx.view().scheduling_input_with(&[], &types, false);
    base.node_pools.clear();
    base.unavailable_node_pools.clear();
    for n in &mut base.existing_nodes {
        n.pods.extend(also_held.remove(n.name.as_str()).unwrap_or_default());
    }
    let registered: BTreeMap<String, bool> =
        base.existing_nodes.iter().map(|n| (n.name.clone(), !n.in_flight)).collect();
    let pinned: Vec<(usize, String)> = pods
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let node = before.get(p.pod.metadata.uid.as_deref()?)?;
            registered.contains_key(node.as_str()).then(|| (i, node.clone()))
        })
        .collect();
    if !pinned.is_empty() {
        let mut input = base.clone();
        input.pods = pinned.iter().map(|(i, node)| Arc::new(pinned_to(&pods[*i].pod, node))).collect();
        let result = SchedulingContext::with_facts(input, cx.pod_facts).place_pending();
        for placement in result.placements {
            if let Some((i, _)) = pinned.get(placement.pod)
                && let Some(p) = pods.get_mut(*i)
            {
                p.held_on = Some(placement.node);
            }
        }
    }
    let rest: Vec<usize> = (0..pods.len()).filter(|i| pods[*i].held_on.is_none()).collect();
    if !rest.is_empty() {
        let mut input = base;
        let mut kept: BTreeMap<&str, Vec<Arc<SlimPod>>> = BTreeMap::new();
        for p in pods.iter() {
            if let Some(n) = &p.held_on {
                kept.entry(n.as_str()).or_default().push(Arc::clone(&p.pod));
            }
        }
        for n in &mut input.existing_nodes {
            n.pods.extend(kept.remove(n.name.as_str()).unwrap_or_default());
        }
        input.pods = rest.iter().map(|i| Arc::clone(&pods[*i].pod)).collect();
        let result = SchedulingContext::with_facts(input, cx.pod_facts).place_pending();
        for placement in result.placements {
            if let Some(p) = rest.get(placement.pod).and_then(|i| pods.get_mut(*i)) {
                p.held_on = Some(placement.node);
            }
        }
    }
    for p in pods.iter_mut() {
        p.registered = p.held_on.as_ref().is_some_and(|n| registered.get(n).copied().unwrap_or(false));
    }
}
