//! A stand-in for the DaemonSet controller: one pod per DaemonSet on every node whose labels
//! match the pod's node selector and affinity and whose NoSchedule/NoExecute taints it
//! tolerates (checked with the scheduling layer's predicates). Each pod is pinned to its node
//! with a `metadata.name` node affinity term, and kube-scheduler binds it when it fits.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::pod_facts;
use kerf_api::{SlimPod, Taint};
use kerf_scheduling::pod as podx;

use crate::world::World;
use kerf_apiserver::SimCluster;

/// Tolerations the DaemonSet controller adds to every daemon pod.
const DAEMON_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

#[derive(Debug, Default)]
pub struct DaemonSets {
    /// (daemonset key, node) -> pod name.
    pods: BTreeMap<(String, String), String>,
    /// pod key -> (daemonset key, node).
    by_pod: BTreeMap<String, (String, String)>,
    dirty_sets: BTreeSet<String>,
    dirty_nodes: BTreeSet<String>,
}

impl DaemonSets {
    pub fn daemonset_changed(&mut self, key: String) {
        self.dirty_sets.insert(key);
    }

    pub fn node_changed(&mut self, node: String) {
        self.dirty_nodes.insert(node);
    }

    /// A pod went away: if it was a daemon pod, its node needs another.
    pub fn pod_removed(&mut self, pod_key: &str) {
        if let Some((ds, node)) = self.by_pod.remove(pod_key) {
            self.pods.remove(&(ds, node.clone()));
            self.dirty_nodes.insert(node);
        }
    }

    /// Adopts a pod bound to a node and owned by a DaemonSet that this stand-in did not create
    /// (a cluster snapshot's daemon pods), as the node's pod of that DaemonSet.
    pub fn observe_pod(&mut self, pod: &SlimPod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let Some(name) = pod.metadata.name.as_deref() else { return };
        let pk = format!("{ns}/{name}");
        if self.by_pod.contains_key(&pk) || pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref().map(str::to_string)) else { return };
        let Some(ds) = pod_facts::daemonset_owner(pod) else { return };
        let slot = (format!("{ns}/{ds}"), node);
        if self.pods.contains_key(&slot) {
            return;
        }
        self.pods.insert(slot.clone(), name.to_string());
        self.by_pod.insert(pk, slot);
    }

    pub fn owner_of(&self, pod_key: &str) -> Option<String> {
        self.by_pod.get(pod_key).map(|(ds, _)| format!("DaemonSet/{}", ds.split_once('/').map_or(ds.as_str(), |x| x.1)))
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty_sets.is_empty() || !self.dirty_nodes.is_empty()
    }

    /// Creates missing daemon pods and removes those whose node no longer qualifies. Returns the
    /// created pods as (pod key, node) so kube-scheduler can pin them.
    pub fn run(&mut self, world: &World, cluster: &SimCluster) -> Vec<(String, String)> {
        let sets = std::mem::take(&mut self.dirty_sets);
        let nodes = std::mem::take(&mut self.dirty_nodes);
        let mut pairs: BTreeSet<(String, String)> = BTreeSet::new();
        for ds in &sets {
            for node in world.nodes.keys() {
                pairs.insert((ds.clone(), node.clone()));
            }
            // Pods of a deleted DaemonSet, or on nodes that went away.
            for (d, n) in self.pods.keys() {
                if d == ds {
                    pairs.insert((d.clone(), n.clone()));
                }
            }
        }
        for node in &nodes {
            for ds in world.daemonsets.keys() {
                pairs.insert((ds.clone(), node.clone()));
            }
            for (d, n) in self.pods.keys() {
                if n == node {
                    pairs.insert((d.clone(), n.clone()));
                }
            }
        }
        let mut created = Vec::new();
        for (ds_key, node_name) in pairs {
            let want = match (world.daemonsets.get(&ds_key), world.nodes.get(&node_name)) {
                (Some(ds), Some(node)) if node.metadata.deletion_timestamp.is_none() => {
                    daemon_pod(ds, &node_name).filter(|p| eligible(p, node))
                }
                _ => None,
            };
            let have = self.pods.get(&(ds_key.clone(), node_name.clone())).cloned();
            match (want, have) {
                (Some(pod), None) => {
                    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
                    match cluster.create_named(pod) {
                        Ok(pname) => {
                            let pkey = format!("{ns}/{pname}");
                            self.pods.insert((ds_key.clone(), node_name.clone()), pname);
                            self.by_pod.insert(pkey.clone(), (ds_key, node_name.clone()));
                            created.push((pkey, node_name));
                        }
                        Err(e) => tracing::warn!(daemonset = %ds_key, error = %e, "cannot create daemon pod"),
                    }
                }
                (None, Some(pname)) => {
                    let ns = ds_key.split_once('/').map_or("default", |x| x.0).to_string();
                    // Deleting a pod whose node is already gone may find it gone too.
                    let _ = cluster.delete_obj::<Pod>(Some(&ns), &pname);
                    self.pods.remove(&(ds_key, node_name));
                    self.by_pod.remove(&format!("{ns}/{pname}"));
                }
                _ => {}
            }
        }
        created
    }
}

/// Whether the daemon pod may run on `node`: node selector / affinity and NoSchedule and
/// NoExecute taints, as the DaemonSet controller checks before creating it.
fn eligible(pod: &Pod, node: &k8s_openapi::api::core::v1::Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or("");
    let taints: Vec<Taint> =
        node.spec.as_ref().and_then(|s| s.taints.as_ref()).into_iter().flatten().filter_map(Taint::from_core).collect();
    podx::daemon_runs_on(&SlimPod::from(pod), name, labels, &taints)
}

/// The pod the DaemonSet runs on `node`.
fn daemon_pod(ds: &DaemonSet, node: &str) -> Option<Pod> {
    let spec = ds.spec.as_ref()?;
    let ns = ds.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
    let name = ds.metadata.name.clone().unwrap_or_default();
    let tmeta = spec.template.metadata.clone().unwrap_or_default();
    let mut pspec = spec.template.spec.clone()?;
    let tols = pspec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in DAEMON_TOLERATIONS {
        if !tols.iter().any(|t| t.key.as_deref() == Some(*key) && t.effect.as_deref() == Some(*effect)) {
            tols.push(Toleration {
                key: Some((*key).to_string()),
                operator: Some("Exists".to_string()),
                effect: Some((*effect).to_string()),
                ..Toleration::default()
            });
        }
    }
    // Pin to the node: every required term gets a metadata.name field requirement (the
    // controller replaces the terms' matchFields with its own).
    let pin = NodeSelectorRequirement {
        key: "metadata.name".to_string(),
        operator: "In".to_string(),
        values: Some(vec![node.to_string()]),
    };
    let affinity = pspec.affinity.get_or_insert_with(Affinity::default);
    let na = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    let required = na
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector { node_selector_terms: vec![NodeSelectorTerm::default()] });
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for t in &mut required.node_selector_terms {
        t.match_fields = Some(vec![pin.clone()]);
    }
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(ns),
            labels: tmeta.labels,
            annotations: tmeta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_string(),
                kind: "DaemonSet".to_string(),
                name,
                uid: ds.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(pspec),
        status: None,
    })
}
