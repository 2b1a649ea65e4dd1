//! A [`ClusterView`] brought up to date from what changed in the cluster instead of built
//! again: a node inserted or removed anywhere in the view's order, a node's own fields changed
//! (labels, taints, allocatable, schedulable), a node's pods replaced. A view kept across
//! cluster changes and edited this way answers every filter and score as a view built afresh
//! from the same nodes does (the tests below build both and compare them); editing costs what
//! changed, where building costs every pod of the cluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_api::ResourceList;
use kerf_api::SlimPod;

use super::{ClusterView, core_of, cpu_memory_of};
use crate::model::ExistingNode;
use crate::node_labels::NodeLabels;

impl ClusterView {
    /// Takes node `idx` and its pods out of the view; the nodes after it move down one index.
    /// `None` when there is no such node.
    pub fn remove_node(&mut self, idx: usize) -> Option<ExistingNode> {
        if idx >= self.nodes.len() {
            return None;
        }
        let pods = self.nodes[idx].pods.clone();
        for p in pods.iter().rev() {
            self.take_pod(idx, p);
        }
        let mut node = self.nodes.remove(idx);
        node.pods = pods;
        self.pod_requests.remove(idx);
        self.extended.remove(idx);
        self.cpu_memory.remove(idx);
        self.free_core.remove(idx);
        self.used_core.remove(idx);
        self.ports.remove(idx);
        if idx < self.hidden.len() {
            self.hidden.remove(idx);
        }
        for (_, nodes) in &mut self.anti {
            *nodes = shift_keys(std::mem::take(nodes), idx, false);
        }
        for cached in self.match_counts.get_mut().values_mut() {
            cached.per_node.remove(idx);
        }
        self.forget_domains();
        Some(node)
    }

    /// Inserts `node` with its pods at `idx` (at most the number of nodes); the nodes from
    /// `idx` on move up one index. `requests` gives each pod's requests
    /// ([`crate::pod::pod_requests`]), as for [`ClusterView::with_requests`].
    pub fn insert_node(
        &mut self,
        idx: usize,
        node: ExistingNode,
        mut requests: impl FnMut(&Arc<SlimPod>) -> Arc<ResourceList>,
    ) {
        let idx = idx.min(self.nodes.len());
        self.forget_domains();
        for cached in self.match_counts.get_mut().values_mut() {
            cached.per_node.insert(idx, 0);
        }
        for (_, nodes) in &mut self.anti {
            *nodes = shift_keys(std::mem::take(nodes), idx, true);
        }
        if idx < self.hidden.len() {
            self.hidden.insert(idx, false);
        }
        let pods = node.pods.clone();
        self.nodes.insert(idx, ExistingNode { pods: Vec::new(), ..node });
        self.pod_requests.insert(idx, Vec::new());
        self.extended.insert(idx, ResourceList::new());
        self.cpu_memory.insert(idx, (cpu_memory_of(&self.nodes[idx].allocatable), [0.0; 2]));
        self.free_core.insert(idx, core_of(&self.nodes[idx].allocatable));
        self.used_core.insert(idx, [0; 3]);
        self.ports.insert(idx, Vec::new());
        for p in pods {
            let r = requests(&p);
            self.add_pod_with(idx, p, r);
        }
    }

    /// Replaces what node `idx` is apart from its pods (`node.pods` is not read): its name,
    /// labels, taints, allocatable, schedulable and the rest. The pods on it stay.
    pub fn update_node(&mut self, idx: usize, node: ExistingNode) {
        let Some(old) = self.nodes.get(idx) else { return };
        let relabelled = old.labels != node.labels;
        let reallocated = old.allocatable != node.allocatable;
        let pods = std::mem::take(&mut self.nodes[idx].pods);
        self.nodes[idx] = ExistingNode { pods, ..node };
        if reallocated {
            let mut free = core_of(&self.nodes[idx].allocatable);
            for r in &self.pod_requests[idx] {
                for (f, req) in free.iter_mut().zip(core_of(r)) {
                    *f -= req;
                }
            }
            self.free_core[idx] = free;
            self.cpu_memory[idx].0 = cpu_memory_of(&self.nodes[idx].allocatable);
        }
        if relabelled {
            self.forget_domains();
        }
    }

    /// Gives node `idx` `labels` in place of the equal labels it holds (the same labels read
    /// from a newer object: a view kept across inputs then holds no object the cluster has
    /// moved on from). Labels that differ are left: [`ClusterView::update_node`] changes them.
    pub fn share_labels(&mut self, idx: usize, labels: &NodeLabels) {
        if let Some(n) = self.nodes.get_mut(idx)
            && !n.labels.ptr_eq(labels)
            && n.labels == *labels
        {
            n.labels = labels.clone();
        }
    }

    /// Replaces the pods on node `idx` with `pods`, in that order (as a view built with them
    /// holds them); `requests` gives the requests of each pod that was not on the node already.
    pub fn set_pods(
        &mut self,
        idx: usize,
        pods: Vec<Arc<SlimPod>>,
        mut requests: impl FnMut(&Arc<SlimPod>) -> Arc<ResourceList>,
    ) {
        let Some(node) = self.nodes.get(idx) else { return };
        let old = node.pods.clone();
        let mut known: Vec<(Arc<SlimPod>, Arc<ResourceList>)> = Vec::with_capacity(old.len());
        for p in old.iter().rev() {
            if let Some(r) = self.take_pod(idx, p) {
                known.push((Arc::clone(p), r));
            }
        }
        for p in pods {
            let r = match known.iter().position(|(k, _)| Arc::ptr_eq(k, &p)) {
                Some(at) => known.swap_remove(at).1,
                None => requests(&p),
            };
            self.add_pod_with(idx, p, r);
        }
    }
}

/// `nodes` with every node index from `at` on moved up one (`up`), or, removing node `at`,
/// every index after it moved down one (node `at` itself holds no pod any more).
fn shift_keys(nodes: BTreeMap<usize, u32>, at: usize, up: bool) -> BTreeMap<usize, u32> {
    nodes
        .into_iter()
        .filter_map(|(n, c)| match (n.cmp(&at), up) {
            (std::cmp::Ordering::Less, _) => Some((n, c)),
            (_, true) => Some((n + 1, c)),
            (std::cmp::Ordering::Equal, false) => None,
            (std::cmp::Ordering::Greater, false) => Some((n - 1, c)),
        })
        .collect()
}

#[cfg(test)]
#[path = "node_edits_tests.rs"]
pub(crate) mod tests;
