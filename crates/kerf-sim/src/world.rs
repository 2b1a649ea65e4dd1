//! The simulator's own index of the cluster, kept up to date from the same watch events the
//! controllers see, so the stand-ins never scan the stores.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kerf_api::cluster::{AnyObject, WatchEvent};
use kerf_api::{NodeClaim, SlimPod};
use kerf_scheduling::node::node_ready;

#[derive(Debug, Clone)]
pub struct PodEntry {
    pub pod: Arc<SlimPod>,
    /// Creation order, for kube-scheduler's first-come queue order.
    pub seq: u64,
}

impl PodEntry {
    pub fn node(&self) -> Option<&str> {
        self.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
    }
}

/// What changed in one batch of watch events, for the stand-ins to react to.
#[derive(Debug, Default)]
pub struct Changes {
    /// Pods that appeared (or changed) without a node.
    pub unbound_pods: BTreeSet<String>,
    /// Pods that went away (or started terminating), with the node they were on.
    pub removed_pods: Vec<(String, Option<String>)>,
    /// Pods that became bound to a node.
    pub newly_bound: Vec<String>,
    pub nodes_changed: BTreeSet<String>,
    pub nodes_removed: BTreeSet<String>,
    /// Nodes whose Ready condition flipped, and new nodes that arrived Ready: (name, ready now).
    pub readiness: Vec<(String, bool)>,
    /// Pods bound to a node that have not started (phase neither Running nor finished): the
    /// kubelet starts them once their node is Ready.
    pub unstarted_pods: BTreeSet<String>,
    pub daemonsets_changed: BTreeSet<String>,
    /// NodeClaims that just started deleting.
    pub claims_deleting: Vec<Arc<NodeClaim>>,
    /// A Namespace appeared, changed or went away (namespaceSelector matches may differ).
    pub namespaces_changed: bool,
    /// A pod arrived in a namespace no other pod was in (the scheduler's view must learn its labels).
    pub pod_namespace_added: bool,
    /// A PersistentVolumeClaim or StorageClass appeared, changed or went away.
    pub volumes_changed: bool,
    /// Nodes a pod was bound to or taken off, or whose bound pod changed.
    pub pods_touched: BTreeSet<String>,
}

#[derive(Debug, Default)]
pub struct World {
    pub pods: BTreeMap<String, PodEntry>,
    pub nodes: BTreeMap<String, Arc<Node>>,
    pub pods_by_node: BTreeMap<String, BTreeSet<String>>,
    pub claims: BTreeMap<String, Arc<NodeClaim>>,
    pub claim_by_provider: BTreeMap<String, String>,
    pub daemonsets: BTreeMap<String, Arc<DaemonSet>>,
    pub namespaces: BTreeMap<String, Arc<Namespace>>,
    /// PersistentVolumeClaims by (namespace, name), and the StorageClasses that exist by name.
    pub pvcs: BTreeMap<(String, String), Arc<PersistentVolumeClaim>>,
    pub storage_classes: BTreeMap<String, Arc<StorageClass>>,
    /// How many indexed pods each namespace holds: a pod's namespace exists even when no
    /// Namespace was applied.
    pod_namespaces: BTreeMap<String, usize>,
    /// NodeClaims that ever got a provider ID.
    pub launched_claims: BTreeSet<String>,
    seq: u64,
    bound_count: usize,
}

pub fn pod_key(pod: &SlimPod) -> String {
    format!("{}/{}", pod_namespace(pod), pod.metadata.name.as_deref().unwrap_or(""))
}

fn pod_namespace(pod: &SlimPod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// Whether the kubelet has started the pod (or it has finished).
pub fn started(pod: &SlimPod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Running" | "Succeeded" | "Failed"))
}

impl World {
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    pub fn bound_count(&self) -> usize {
        self.bound_count
    }

    /// The labels of every namespace as a namespaceSelector sees them (the same rule the
    /// controllers use): applied namespaces plus the namespace of every pod.
    pub fn namespace_labels(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        kerf_scheduling::namespace_labels(
            self.namespaces.values().map(|n| &**n),
            self.pod_namespaces.keys().map(String::as_str),
        )
    }

    /// kube-scheduler's VolumeBinding reason for binding `pod` nowhere: a claim it mounts is
    /// missing, or unbound with a StorageClass that does not exist.
    pub fn volume_binding_refusal(&self, pod: &SlimPod) -> Option<String> {
        let found = kerf_scheduling::volume_binding::unresolvable_claims(
            pod,
            |ns, name| self.pvcs.get(&(ns.to_string(), name.to_string())).map(|c| &**c),
            |class| self.storage_classes.contains_key(class),
        );
        found.first().map(|u| u.scheduler_reason())
    }

    /// The claims (`namespace/claim`) whose volumes attach as EBS volumes, by their
    /// StorageClass (kube-scheduler's NodeVolumeLimits counts them against a node's limit).
    pub fn ebs_claims(&self) -> Arc<BTreeSet<String>> {
        let class = |name: Option<&str>| match name {
            Some(n) => self.storage_classes.get(n).map(|c| &**c),
            None => kerf_scheduling::volume_limits::default_storage_class(self.storage_classes.values().map(|c| &**c)),
        };
        Arc::new(
            self.pvcs
                .iter()
                .filter(|(_, pvc)| kerf_scheduling::volume_limits::claim_attaches_ebs(pvc, class))
                .map(|((ns, name), _)| format!("{ns}/{name}"))
                .collect(),
        )
    }

    /// The `InternalIP` the Node named `name` reports, if it is known and has one.
    pub fn node_ip(&self, name: &str) -> Option<&str> {
        let node = self.nodes.get(name)?;
        crate::addresses::internal_ip(node.status.as_ref().and_then(|s| s.addresses.as_deref()))
    }

    pub fn is_node_ready(&self, name: &str) -> bool {
        self.nodes.get(name).is_some_and(|n| node_ready(n))
    }

    fn unlink(&mut self, key: &str) -> Option<PodEntry> {
        let old = self.pods.remove(key)?;
        let ns = pod_namespace(&old.pod);
        if let Some(n) = self.pod_namespaces.get_mut(ns) {
            *n -= 1;
            if *n == 0 {
                self.pod_namespaces.remove(ns);
            }
        }
        if let Some(n) = old.node() {
            self.bound_count -= 1;
            if let Some(set) = self.pods_by_node.get_mut(n) {
                set.remove(key);
                if set.is_empty() {
                    self.pods_by_node.remove(n);
                }
            }
        }
        Some(old)
    }

    /// Takes in one watch event (by value: the index keeps the objects without copying them).
    pub fn apply(&mut self, event: WatchEvent, changes: &mut Changes) {
        match event {
            WatchEvent::Applied(AnyObject::SlimPod(p)) => {
                let key = pod_key(&p);
                let old = self.unlink(&key);
                if let Some(n) = old.as_ref().and_then(PodEntry::node) {
                    changes.pods_touched.insert(n.to_string());
                }
                if p.metadata.deletion_timestamp.is_some() {
                    // A terminating pod: gone for the stand-ins' purposes.
                    if let Some(o) = old {
                        changes.removed_pods.push((key, o.node().map(str::to_string)));
                    }
                    return;
                }
                let seq = match &old {
                    Some(o) => o.seq,
                    None => {
                        self.seq += 1;
                        self.seq
                    }
                };
                let entry = PodEntry { pod: p, seq };
                match entry.node() {
                    Some(n) => {
                        changes.pods_touched.insert(n.to_string());
                        if !started(&entry.pod) {
                            changes.unstarted_pods.insert(key.clone());
                        }
                        self.bound_count += 1;
                        self.pods_by_node.entry(n.to_string()).or_default().insert(key.clone());
                        if old.as_ref().is_none_or(|o| o.node().is_none()) {
                            changes.newly_bound.push(key.clone());
                        }
                        changes.unbound_pods.remove(&key);
                    }
                    None => {
                        changes.unbound_pods.insert(key.clone());
                    }
                }
                let ns = pod_namespace(&entry.pod).to_string();
                let count = self.pod_namespaces.entry(ns).or_default();
                // A pod replacing itself (same key, so same namespace) adds no namespace.
                if *count == 0 && old.is_none() {
                    changes.pod_namespace_added = true;
                }
                *count += 1;
                self.pods.insert(key, entry);
            }
            WatchEvent::Deleted(AnyObject::SlimPod(p)) => {
                let key = pod_key(&p);
                changes.unbound_pods.remove(&key);
                changes.unstarted_pods.remove(&key);
                if let Some(o) = self.unlink(&key) {
                    if let Some(n) = o.node() {
                        changes.pods_touched.insert(n.to_string());
                    }
                    changes.removed_pods.push((key, o.node().map(str::to_string)));
                }
            }
            WatchEvent::Applied(AnyObject::Node(n)) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                let was_ready = self.nodes.get(&name).map(|o| node_ready(o));
                let now_ready = node_ready(&n);
                if was_ready.map_or(now_ready, |w| w != now_ready) {
                    changes.readiness.push((name.clone(), now_ready));
                }
                self.nodes.insert(name.clone(), n);
                changes.nodes_changed.insert(name);
            }
            WatchEvent::Deleted(AnyObject::Node(n)) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                self.nodes.remove(&name);
                changes.nodes_removed.insert(name);
            }
            WatchEvent::Applied(AnyObject::NodeClaim(c)) => {
                let name = c.name().to_string();
                if let Some(pid) = c.provider_id() {
                    self.claim_by_provider.insert(pid.to_string(), name.clone());
                    self.launched_claims.insert(name.clone());
                }
                let was_deleting = self.claims.get(&name).is_some_and(|o| o.metadata.deletion_timestamp.is_some());
                let claim = c;
                if claim.metadata.deletion_timestamp.is_some() && !was_deleting {
                    changes.claims_deleting.push(claim.clone());
                }
                self.claims.insert(name, claim);
            }
            WatchEvent::Deleted(AnyObject::NodeClaim(c)) => {
                let name = c.name().to_string();
                let was_deleting = self.claims.get(&name).is_some_and(|o| o.metadata.deletion_timestamp.is_some());
                if !was_deleting {
                    changes.claims_deleting.push(c);
                }
                self.claims.remove(&name);
            }
            WatchEvent::Applied(AnyObject::DaemonSet(d)) => {
                let key = format!(
                    "{}/{}",
                    d.metadata.namespace.as_deref().unwrap_or("default"),
                    d.metadata.name.as_deref().unwrap_or("")
                );
                self.daemonsets.insert(key.clone(), d);
                changes.daemonsets_changed.insert(key);
            }
            WatchEvent::Deleted(AnyObject::DaemonSet(d)) => {
                let key = format!(
                    "{}/{}",
                    d.metadata.namespace.as_deref().unwrap_or("default"),
                    d.metadata.name.as_deref().unwrap_or("")
                );
                self.daemonsets.remove(&key);
                changes.daemonsets_changed.insert(key);
            }
            WatchEvent::Applied(AnyObject::Namespace(n)) => {
                self.namespaces.insert(n.metadata.name.clone().unwrap_or_default(), n);
                changes.namespaces_changed = true;
            }
            WatchEvent::Deleted(AnyObject::Namespace(n)) => {
                self.namespaces.remove(n.metadata.name.as_deref().unwrap_or_default());
                changes.namespaces_changed = true;
            }
            WatchEvent::Applied(AnyObject::PersistentVolumeClaim(c)) => {
                let key = (
                    c.metadata.namespace.clone().unwrap_or_else(|| "default".to_string()),
                    c.metadata.name.clone().unwrap_or_default(),
                );
                self.pvcs.insert(key, c);
                changes.volumes_changed = true;
            }
            WatchEvent::Deleted(AnyObject::PersistentVolumeClaim(c)) => {
                let key = (
                    c.metadata.namespace.clone().unwrap_or_else(|| "default".to_string()),
                    c.metadata.name.clone().unwrap_or_default(),
                );
                self.pvcs.remove(&key);
                changes.volumes_changed = true;
            }
            WatchEvent::Applied(AnyObject::StorageClass(s)) => {
                self.storage_classes.insert(s.metadata.name.clone().unwrap_or_default(), s);
                changes.volumes_changed = true;
            }
            WatchEvent::Deleted(AnyObject::StorageClass(s)) => {
                self.storage_classes.remove(s.metadata.name.as_deref().unwrap_or_default());
                changes.volumes_changed = true;
            }
            _ => {}
        }
    }
}
