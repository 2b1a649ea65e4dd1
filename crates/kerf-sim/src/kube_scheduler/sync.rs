//! Brings the stand-in's view up to date from the nodes a batch of changes touched, instead of
//! building it again from every pod of the cluster: nodes gone are taken out, new nodes are
//! put in at their place in name order, and each touched node gets its fields and its pods as
//! the cluster has them now, so the view holds what a view built afresh holds.

use std::collections::BTreeSet;
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_scheduling::pod_requests;

use super::{View, cpu_memory, existing_node};
use crate::world::{World, pod_key};

/// The pods bound to `node`, in the cluster's order (by key).
pub(super) fn bound_pods(world: &World, node: &str) -> Vec<Arc<SlimPod>> {
    world
        .pods_by_node
        .get(node)
        .into_iter()
        .flatten()
        .filter_map(|k| world.pods.get(k))
        .map(|e| e.pod.clone())
        .collect()
}

/// Whether the view's pods of a node are the cluster's: the same pods (by key), each at the
/// same version.
fn same_pods(held: &[Arc<SlimPod>], now: &[Arc<SlimPod>]) -> bool {
    if held.len() != now.len() {
        return false;
    }
    let mut held: Vec<(String, &Arc<SlimPod>)> = held.iter().map(|p| (pod_key(p), p)).collect();
    held.sort_by(|a, b| a.0.cmp(&b.0));
    held.iter().zip(now).all(|((key, h), n)| {
        Arc::ptr_eq(h, n)
            || (*key == pod_key(n)
                && h.metadata.resource_version.is_some()
                && h.metadata.resource_version == n.metadata.resource_version)
    })
}

impl View {
    /// Edits the view to what [`super::KubeScheduler::build_view`] would build from `world`
    /// now, given the nodes whose object or bound pods changed since it last matched.
    pub(super) fn sync(&mut self, world: &World, touched: BTreeSet<String>) {
        let parse = |p: &Arc<SlimPod>| Arc::new(pod_requests(p));
        let mut reindex = false;
        for idx in (0..self.names.len()).rev() {
            if !world.nodes.contains_key(&self.names[idx]) {
                self.view.remove_node(idx);
                self.names.remove(idx);
                self.allocatable.remove(idx);
                self.requested.remove(idx);
                self.version.remove(idx);
                reindex = true;
            }
        }
        let mut added: BTreeSet<&str> = BTreeSet::new();
        if self.names.len() != world.nodes.len() {
            for (i, (name, node)) in world.nodes.iter().enumerate() {
                if self.names.get(i) == Some(name) {
                    continue;
                }
                self.view.insert_node(i, existing_node(node, bound_pods(world, name)), parse);
                self.names.insert(i, name.clone());
                self.allocatable.insert(i, cpu_memory(&self.view.nodes()[i].allocatable));
                self.requested.insert(i, [0.0; 2]);
                self.version.insert(i, 0);
                added.insert(name);
            }
            reindex = true;
        }
        if reindex {
            self.index = self.names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        }
        for name in &touched {
            if added.contains(name.as_str()) {
                continue;
            }
            let (Some(&idx), Some(node)) = (self.index.get(name), world.nodes.get(name)) else { continue };
            let now = existing_node(node, Vec::new());
            if !self.view.nodes()[idx].same_apart_from_pods(&now) {
                self.view.update_node(idx, now);
                self.allocatable[idx] = cpu_memory(&self.view.nodes()[idx].allocatable);
            } else {
                self.view.share_labels(idx, &now.labels);
            }
            let pods = bound_pods(world, name);
            if !same_pods(&self.view.nodes()[idx].pods, &pods) {
                self.view.set_pods(idx, pods, parse);
            }
        }
        // As a fresh view reads them: exact sums, not the running sums of this stand-in's binds.
        for (i, r) in self.requested.iter_mut().enumerate() {
            *r = self.view.cpu_memory(i).1;
        }
    }
}
