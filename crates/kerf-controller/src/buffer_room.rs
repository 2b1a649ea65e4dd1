//! The room CapacityBuffers keep ([`BufferRoom`]): virtual pods and where each is held. The
//! buffers reconciler writes it (see `buffers`); provisioning, disruption and the scheduling
//! inputs read it where the reconcilers publish what they know.

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_api::SlimPod;

use crate::state::ObjectKey;

/// One chunk of a buffer's room: a pod that exists only in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualPod {
    /// The buffer, `(namespace, name)`.
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
