//! Cluster state: an index of the objects the controllers read, built from watch events.
//!
//! Everything is kept in ordered maps so that iterating it is deterministic. Pods, Nodes and
//! NodeClaims are kept as the watch delivered them (the `Arc` of the event, shared with the
//! watch's own record of what it delivered), never copied: in a large cluster the objects
//! themselves are most of the controller's memory. Pods are kept as
//! [`SlimPod`](kerf_api::SlimPod)s (what the controllers read of them); a whole Pod an event or
//! an API answer carries is made slim as it arrives.

use kerf_api::MetaView;
use kerf_api::pod_facts;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::SlimPod;
use kerf_api::str_pair::StrPair;
use kerf_api::{
    CapacityBuffer, CapacityQuota, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest, ResourceList,
};

use crate::pod_set::{PodSet, key as pod_key};
use crate::util;
use kerf_api::cluster::{AnyObject, WatchEvent};
use kerf_scheduling::NodeLabels;
use kerf_scheduling::disruption_budgets::DisruptionBudgets;

/// `(namespace, name)` of a namespaced object.
pub type ObjectKey = (String, String);

pub(crate) fn key_of(meta: &(impl MetaView + ?Sized)) -> ObjectKey {
    (meta.namespace().unwrap_or_default().to_string(), meta.name().unwrap_or_default().to_string())
}

fn name_of(meta: &(impl MetaView + ?Sized)) -> String {
    meta.name().unwrap_or_default().to_string()
}

/// Whether `incoming` is older than `current` by resourceVersion. Versions that are not
/// integers are never considered stale (their order is opaque).
fn is_stale(current: &(impl MetaView + ?Sized), incoming: &(impl MetaView + ?Sized)) -> bool {
    fn parse(m: &(impl MetaView + ?Sized)) -> Option<u64> {
        m.resource_version().and_then(|v| v.parse::<u64>().ok())
    }
    matches!((parse(current), parse(incoming)), (Some(c), Some(i)) if i < c)
}

fn upsert<V: Clone>(map: &mut BTreeMap<String, V>, obj: &V, meta: impl Fn(&V) -> &ObjectMeta) {
    let name = name_of(meta(obj));
    if let Some(cur) = map.get(&name)
        && is_stale(meta(cur), meta(obj))
    {
        return;
    }
    map.insert(name, obj.clone());
}

fn upsert_ns<V: Clone>(map: &mut BTreeMap<ObjectKey, V>, obj: &V, meta: impl Fn(&V) -> &ObjectMeta) {
    let key = key_of(meta(obj));
    if let Some(cur) = map.get(&key)
        && is_stale(meta(cur), meta(obj))
    {
        return;
    }
    map.insert(key, obj.clone());
}

/// The controllers' view of the cluster.
#[derive(Debug, Default, Clone)]
pub struct ClusterState {
    nodes: BTreeMap<String, Arc<Node>>,
    node_claims: BTreeMap<String, Arc<NodeClaim>>,
    pods: PodSet,
    pods_by_node: BTreeMap<String, PodSet>,
    /// Pods not bound to a node and not terminal (each with the pod: every pass reads them).
    unbound_pods: BTreeMap<ObjectKey, Arc<SlimPod>>,
    node_pools: BTreeMap<String, NodePool>,
    node_classes: BTreeMap<String, EC2NodeClass>,
    daemonsets: BTreeMap<ObjectKey, DaemonSet>,
    pdbs: BTreeMap<ObjectKey, PodDisruptionBudget>,
    pvcs: BTreeMap<ObjectKey, PersistentVolumeClaim>,
    pvs: BTreeMap<String, PersistentVolume>,
    storage_classes: BTreeMap<String, StorageClass>,
    namespaces: BTreeMap<String, Namespace>,
    /// providerID → the NodeClaim launched with it (hashed: looked up for every node on every
    /// disruption pass, and the IDs share long prefixes).
    claim_by_provider_id: HashMap<String, Arc<NodeClaim>>,
    /// providerID → the Node that joined with it.
    node_by_provider_id: HashMap<String, Arc<Node>>,
    /// Bumped on every pod change.
    pod_generation: u64,
    /// The pods each PodDisruptionBudget selects (finished pods not counted).
    disruption_budgets: DisruptionBudgets,
    capacity_buffers: BTreeMap<ObjectKey, CapacityBuffer>,
    pod_templates: BTreeMap<ObjectKey, PodTemplate>,
    node_overlays: BTreeMap<String, NodeOverlay>,
    provisioning_requests: BTreeMap<ObjectKey, ProvisioningRequest>,
    capacity_quotas: BTreeMap<String, CapacityQuota>,
    /// Bumped on every object added, changed or removed.
    generation: u64,
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: &WatchEvent) {
        match event {
            WatchEvent::Applied(obj) => self.upsert(obj),
            WatchEvent::Deleted(obj) => self.remove(obj),
        }
    }

    /// Records an object as written by a controller (the API server's answer), so later steps
    /// of the same reconcile see it before its watch event arrives.
    pub fn record(&mut self, obj: AnyObject) {
        self.upsert(&obj);
    }

    /// Forgets an object a controller saw disappear.
    pub fn forget(&mut self, obj: &AnyObject) {
        self.remove(obj);
    }

    fn upsert(&mut self, obj: &AnyObject) {
        self.generation += 1;
        match obj {
            AnyObject::SlimPod(p) => self.upsert_pod(p),
            AnyObject::Pod(p) => self.upsert_pod(&Arc::new(SlimPod::from(&**p))),
            AnyObject::Node(n) => {
                if let Some(old) = self.nodes.get(&name_of(&n.metadata)) {
                    if is_stale(&old.metadata, &n.metadata) {
                        return;
                    }
                    if let Some(pid) = util::node_provider_id(old) {
                        self.node_by_provider_id.remove(pid);
                    }
                }
                if let Some(pid) = util::node_provider_id(n) {
                    self.node_by_provider_id.insert(pid.to_string(), Arc::clone(n));
                }
                self.nodes.insert(name_of(&n.metadata), Arc::clone(n));
            }
            AnyObject::NodeClaim(c) => {
                if let Some(old) = self.node_claims.get(c.name()) {
                    if is_stale(&old.metadata, &c.metadata) {
                        return;
                    }
                    if let Some(pid) = old.provider_id() {
                        self.claim_by_provider_id.remove(pid);
                    }
                }
                if let Some(pid) = c.provider_id() {
                    self.claim_by_provider_id.insert(pid.to_string(), Arc::clone(c));
                }
                self.node_claims.insert(c.name().to_string(), Arc::clone(c));
            }
            AnyObject::NodePool(p) => upsert(&mut self.node_pools, &**p, |o| &o.metadata),
            AnyObject::EC2NodeClass(c) => upsert(&mut self.node_classes, &**c, |o| &o.metadata),
            AnyObject::DaemonSet(d) => upsert_ns(&mut self.daemonsets, &**d, |o| &o.metadata),
            AnyObject::PodDisruptionBudget(p) => {
                let key = key_of(&p.metadata);
                if self.pdbs.get(&key).is_some_and(|cur| is_stale(&cur.metadata, &p.metadata)) {
                    return;
                }
                self.pdbs.insert(key.clone(), (**p).clone());
                self.reindex_budget(key);
            }
            AnyObject::PersistentVolumeClaim(p) => upsert_ns(&mut self.pvcs, &**p, |o| &o.metadata),
            AnyObject::PersistentVolume(p) => upsert(&mut self.pvs, &**p, |o| &o.metadata),
            AnyObject::StorageClass(s) => upsert(&mut self.storage_classes, &**s, |o| &o.metadata),
            AnyObject::Namespace(n) => upsert(&mut self.namespaces, &**n, |o| &o.metadata),
            AnyObject::CapacityBuffer(b) => upsert_ns(&mut self.capacity_buffers, &**b, |o| &o.metadata),
            AnyObject::PodTemplate(t) => upsert_ns(&mut self.pod_templates, &**t, |o| &o.metadata),
            AnyObject::NodeOverlay(o) => upsert(&mut self.node_overlays, &**o, |o| &o.metadata),
            AnyObject::ProvisioningRequest(r) => upsert_ns(&mut self.provisioning_requests, &**r, |o| &o.metadata),
            AnyObject::CapacityQuota(q) => upsert(&mut self.capacity_quotas, &**q, |o| &o.metadata),
            // Admission applies these to pods; the controllers read the result on the pod.
            AnyObject::PriorityClass(_) | AnyObject::RuntimeClass(_) => {}
            // Read on demand (a buffer's scalableRef), not kept.
            AnyObject::Deployment(_) | AnyObject::StatefulSet(_) | AnyObject::ReplicaSet(_) => {}
        }
    }

    fn upsert_pod(&mut self, pod: &Arc<SlimPod>) {
        self.pod_generation += 1;
        let (ns, name) = pod_key(pod);
        let old = self.pods.get(ns, name).cloned();
        if let Some(old) = &old {
            if is_stale(&old.metadata, &pod.metadata) {
                return;
            }
            self.unindex_pod(old);
        }
        self.disruption_budgets.update_pod(old.as_deref(), Some(pod));
        if let Some(node) = util::pod_node_name(pod) {
            let on_node = match self.pods_by_node.get_mut(node) {
                Some(on_node) => on_node,
                None => self.pods_by_node.entry(node.to_string()).or_default(),
            };
            on_node.insert(Arc::clone(pod));
        } else if !pod_facts::terminal(pod) {
            self.unbound_pods.insert(key_of(&pod.metadata), Arc::clone(pod));
        }
        self.pods.insert(Arc::clone(pod));
    }

    /// Takes `old`, a pod stored now, out of the per-node and unbound indexes.
    fn unindex_pod(&mut self, old: &SlimPod) {
        let (ns, name) = pod_key(old);
        if let Some(node) = util::pod_node_name(old)
            && let Some(set) = self.pods_by_node.get_mut(node)
        {
            set.remove(ns, name);
            if set.is_empty() {
                self.pods_by_node.remove(node);
            }
        }
        if !self.unbound_pods.is_empty() {
            self.unbound_pods.remove(&(ns, name) as &dyn StrPair);
        }
    }

    fn remove(&mut self, obj: &AnyObject) {
        self.generation += 1;
        let meta = obj.meta();
        match obj {
            AnyObject::Pod(_) | AnyObject::SlimPod(_) => {
                self.pod_generation += 1;
                let (ns, name) = (meta.namespace().unwrap_or_default(), meta.name().unwrap_or_default());
                if let Some(old) = self.pods.remove(ns, name) {
                    self.unindex_pod(&old);
                    self.disruption_budgets.update_pod(Some(&old), None);
                }
            }
            AnyObject::Node(_) => {
                if let Some(old) = self.nodes.remove(&name_of(meta))
                    && let Some(pid) = util::node_provider_id(&old)
                {
                    self.node_by_provider_id.remove(pid);
                }
            }
            AnyObject::NodeClaim(_) => {
                if let Some(old) = self.node_claims.remove(&name_of(meta))
                    && let Some(pid) = old.provider_id()
                {
                    self.claim_by_provider_id.remove(pid);
                }
            }
            AnyObject::NodePool(_) => {
                self.node_pools.remove(&name_of(meta));
            }
            AnyObject::EC2NodeClass(_) => {
                self.node_classes.remove(&name_of(meta));
            }
            AnyObject::DaemonSet(_) => {
                self.daemonsets.remove(&key_of(meta));
            }
            AnyObject::PodDisruptionBudget(_) => {
                let key = key_of(meta);
                self.pdbs.remove(&key);
                self.reindex_budget(key);
            }
            AnyObject::PersistentVolumeClaim(_) => {
                self.pvcs.remove(&key_of(meta));
            }
            AnyObject::PersistentVolume(_) => {
                self.pvs.remove(&name_of(meta));
            }
            AnyObject::StorageClass(_) => {
                self.storage_classes.remove(&name_of(meta));
            }
            AnyObject::Namespace(_) => {
                self.namespaces.remove(&name_of(meta));
            }
            AnyObject::CapacityBuffer(_) => {
                self.capacity_buffers.remove(&key_of(meta));
            }
            AnyObject::PodTemplate(_) => {
                self.pod_templates.remove(&key_of(meta));
            }
            AnyObject::NodeOverlay(_) => {
                self.node_overlays.remove(&name_of(meta));
            }
            AnyObject::ProvisioningRequest(_) => {
                self.provisioning_requests.remove(&key_of(meta));
            }
            AnyObject::CapacityQuota(_) => {
                self.capacity_quotas.remove(&name_of(meta));
            }
            AnyObject::PriorityClass(_) | AnyObject::RuntimeClass(_) => {}
            AnyObject::Deployment(_) | AnyObject::StatefulSet(_) | AnyObject::ReplicaSet(_) => {}
        }
    }

    /// Matches the budget `key` (as stored now, or gone) against its namespace's pods again.
    fn reindex_budget(&mut self, key: ObjectKey) {
        let pods = self.pods.in_namespace(&key.0);
        self.disruption_budgets.set_budget(key.clone(), self.pdbs.get(&key), pods.map(|p| &**p));
    }

    // ---- reads ----

    /// Changes whenever any object is added, updated or removed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn capacity_buffers(&self) -> &BTreeMap<ObjectKey, CapacityBuffer> {
        &self.capacity_buffers
    }

    pub fn pod_templates(&self) -> &BTreeMap<ObjectKey, PodTemplate> {
        &self.pod_templates
    }

    /// NodeOverlays by name.
    pub fn node_overlays(&self) -> &BTreeMap<String, NodeOverlay> {
        &self.node_overlays
    }

    pub fn provisioning_requests(&self) -> &BTreeMap<ObjectKey, ProvisioningRequest> {
        &self.provisioning_requests
    }

    /// CapacityQuotas by name.
    pub fn capacity_quotas(&self) -> &BTreeMap<String, CapacityQuota> {
        &self.capacity_quotas
    }

    /// Changes whenever any pod is added, updated or removed.
    pub fn pod_generation(&self) -> u64 {
        self.pod_generation
    }

    pub fn nodes(&self) -> &BTreeMap<String, Arc<Node>> {
        &self.nodes
    }

    /// The labels of the node `name` (empty for no such node), read from the Node as kept
    /// here: every scheduling input built from this state shares them.
    pub fn node_labels(&self, name: &str) -> NodeLabels {
        self.nodes.get(name).map(|n| NodeLabels::of_node(Arc::clone(n))).unwrap_or_default()
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name).map(|n| &**n)
    }

    pub fn node_claims(&self) -> &BTreeMap<String, Arc<NodeClaim>> {
        &self.node_claims
    }

    pub fn node_claim(&self, name: &str) -> Option<&NodeClaim> {
        self.node_claims.get(name).map(|c| &**c)
    }

    pub fn node_pools(&self) -> &BTreeMap<String, NodePool> {
        &self.node_pools
    }

    pub fn node_pool(&self, name: &str) -> Option<&NodePool> {
        self.node_pools.get(name)
    }

    pub fn node_classes(&self) -> &BTreeMap<String, EC2NodeClass> {
        &self.node_classes
    }

    /// The node class a pool refers to, if it exists.
    pub fn node_class_for(&self, pool: &NodePool) -> Option<&EC2NodeClass> {
        self.node_classes.get(&pool.spec.template.spec.node_class_ref.name)
    }

    /// Why `pool` cannot launch anything because of its node class: the class does not exist, or
    /// its `Ready` condition is not True. `None` when the class is Ready.
    pub(crate) fn node_class_problem(&self, pool: &NodePool) -> Option<NodeClassProblem> {
        let name = &pool.spec.template.spec.node_class_ref.name;
        let kind = &pool.spec.template.spec.node_class_ref.kind;
        match self.node_class_for(pool) {
            None => Some(NodeClassProblem { reason: "NodeClassNotFound", message: format!("{kind} {name} not found") }),
            Some(class) => class.not_ready().map(|why| NodeClassProblem {
                reason: "NodeClassNotReady",
                message: format!("{kind} {name} is not ready: {why}"),
            }),
        }
    }

    /// Every pod, in key order.
    pub fn pods(&self) -> impl ExactSizeIterator<Item = &Arc<SlimPod>> + DoubleEndedIterator {
        self.pods.iter()
    }

    /// The uid of the object of `kind` named `name` (`namespace/name` for a pod), for the
    /// Events recorded about it.
    pub fn uid_of(&self, kind: &str, name: &str) -> Option<String> {
        let meta: &dyn MetaView = match kind {
            "Pod" => {
                let (ns, n) = name.split_once('/')?;
                return self.pod_uid(&(ns.to_string(), n.to_string()));
            }
            "Node" => &self.node(name)?.metadata,
            kerf_api::nodeclaim::KIND => &self.node_claim(name)?.metadata,
            kerf_api::nodepool::KIND => &self.node_pool(name)?.metadata,
            _ => return None,
        };
        meta.uid().map(str::to_string)
    }

    /// The uid of the pod with this key (for an event about it).
    pub fn pod_uid(&self, key: &ObjectKey) -> Option<String> {
        self.pods.get(&key.0, &key.1)?.metadata.uid.clone()
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Arc<SlimPod>> {
        self.pods.get(namespace, name)
    }

    /// Pods bound to `node` (terminal ones included; callers filter).
    pub fn pods_on_node<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Arc<SlimPod>> + 'a {
        self.pods_by_node.get(node).into_iter().flat_map(PodSet::iter)
    }

    /// Pods not bound to any node and not terminal, in key order.
    pub fn unbound_pods(&self) -> impl Iterator<Item = (&ObjectKey, &Arc<SlimPod>)> {
        self.unbound_pods.iter()
    }

    pub fn daemonsets(&self) -> &BTreeMap<ObjectKey, DaemonSet> {
        &self.daemonsets
    }

    pub fn pdbs(&self) -> &BTreeMap<ObjectKey, PodDisruptionBudget> {
        &self.pdbs
    }

    /// The pods each PodDisruptionBudget selects, and how many of them are healthy.
    pub fn disruption_budgets(&self) -> &DisruptionBudgets {
        &self.disruption_budgets
    }

    pub fn pvcs(&self) -> &BTreeMap<ObjectKey, PersistentVolumeClaim> {
        &self.pvcs
    }

    pub fn pvs(&self) -> &BTreeMap<String, PersistentVolume> {
        &self.pvs
    }

    pub fn storage_classes(&self) -> &BTreeMap<String, StorageClass> {
        &self.storage_classes
    }

    pub fn namespaces(&self) -> &BTreeMap<String, Namespace> {
        &self.namespaces
    }

    /// The NodeClaim launched with this provider ID.
    pub fn claim_for_provider_id(&self, provider_id: &str) -> Option<&NodeClaim> {
        self.claim_by_provider_id.get(provider_id).map(|c| &**c)
    }

    /// The Node that joined with this provider ID.
    pub fn node_for_provider_id(&self, provider_id: &str) -> Option<&Node> {
        self.node_by_provider_id.get(provider_id).map(|n| &**n)
    }

    /// The Node a claim became, if it has joined.
    pub fn node_for_claim(&self, claim: &NodeClaim) -> Option<&Node> {
        self.shared_node_for_claim(claim).map(|n| &**n)
    }

    /// [`ClusterState::node_for_claim`], the cache's shared copy.
    pub fn shared_node_for_claim(&self, claim: &NodeClaim) -> Option<&Arc<Node>> {
        claim.provider_id().and_then(|p| self.node_by_provider_id.get(p))
    }

    /// The NodeClaim a node belongs to, if kerf launched it.
    pub fn claim_for_node(&self, node: &Node) -> Option<&NodeClaim> {
        util::node_provider_id(node).and_then(|p| self.claim_for_provider_id(p))
    }

    /// NodeClaims of a pool, in name order.
    pub fn claims_of_pool<'a>(&'a self, pool: &'a str) -> impl Iterator<Item = &'a NodeClaim> + 'a {
        self.node_claims.values().map(|c| &**c).filter(move |c| crate::util::claim_pool(c) == Some(pool))
    }

    /// Capacity held by a pool's NodeClaims, counted against its limits. Claims that have not
    /// launched yet count with `fallback(claim)` (e.g. their cheapest candidate type). The
    /// `nodes` entry is the claim count.
    pub fn pool_usage(&self, pool: &str, fallback: impl Fn(&NodeClaim) -> ResourceList) -> ResourceList {
        let mut total = ResourceList::new();
        let mut count = 0i64;
        for claim in self.claims_of_pool(pool) {
            count += 1;
            total.add(&Self::claim_usage(claim, &fallback));
        }
        total.set("nodes", kerf_api::Quantity::from_units(count));
        total
    }

    /// What one NodeClaim holds of its pool's limits: its launched capacity, or `fallback(claim)`
    /// while it has none.
    pub fn claim_usage(claim: &NodeClaim, fallback: impl Fn(&NodeClaim) -> ResourceList) -> ResourceList {
        match claim.status.as_ref().filter(|s| !s.capacity.is_empty()) {
            Some(s) => s.capacity.clone(),
            None => fallback(claim),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use kerf_api::cluster::Object;
    use kerf_api::{PodShape, SlimPodSpec};

    fn pod(name: &str, node: Option<&str>, rv: &str) -> SlimPod {
        SlimPod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            }
            .into(),
            spec: Some(SlimPodSpec::from(PodShape { node_name: node.map(str::to_string), ..Default::default() })),
            status: None,
        }
    }

    fn node(name: &str, provider_id: &str) -> Node {
        Node {
            metadata: ObjectMeta { name: Some(name.into()), resource_version: Some("1".into()), ..Default::default() },
            spec: Some(NodeSpec { provider_id: Some(provider_id.into()), ..Default::default() }),
            status: None,
        }
    }

    fn names<'a>(it: impl Iterator<Item = &'a Arc<SlimPod>>) -> Vec<String> {
        it.map(|p| p.metadata.name.clone().unwrap_or_default()).collect()
    }

    #[test]
    fn pods_are_indexed_by_node_and_move_when_rebound() {
        let mut s = ClusterState::new();
        s.apply(&WatchEvent::Applied(pod("a", None, "1").into_any()));
        s.apply(&WatchEvent::Applied(pod("b", Some("n1"), "2").into_any()));
        assert_eq!(s.unbound_pods().map(|(k, _)| k.1.clone()).collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(names(s.pods_on_node("n1")), vec!["b"]);
        s.apply(&WatchEvent::Applied(pod("a", Some("n1"), "3").into_any()));
        assert_eq!(s.unbound_pods().count(), 0);
        assert_eq!(names(s.pods_on_node("n1")), vec!["a", "b"]);
        s.apply(&WatchEvent::Deleted(pod("b", Some("n1"), "4").into_any()));
        assert_eq!(names(s.pods_on_node("n1")), vec!["a"]);
        assert_eq!(s.pods().len(), 1);
        assert_eq!(s.pod("default", "a").and_then(|p| p.metadata.resource_version.as_deref()), Some("3"));
        assert!(s.pod("default", "b").is_none() && s.pod("other", "a").is_none());
    }

    #[test]
    fn events_name_the_uid_of_the_pod_or_node_they_are_about() {
        let mut s = ClusterState::new();
        let mut p = pod("a", None, "1");
        p.metadata.uid = Some("uid-pod-a".into());
        let mut n = node("n1", "kwok://n1");
        n.metadata.uid = Some("uid-node-n1".into());
        s.apply(&WatchEvent::Applied(p.into_any()));
        s.apply(&WatchEvent::Applied(n.into_any()));
        assert_eq!(s.uid_of("Pod", "default/a").as_deref(), Some("uid-pod-a"));
        assert_eq!(s.uid_of("Node", "n1").as_deref(), Some("uid-node-n1"));
        assert_eq!(s.uid_of("Pod", "default/gone"), None);
        assert_eq!(s.uid_of("Pod", "a"), None, "a pod is named with its namespace");
        assert_eq!(s.uid_of(kerf_api::nodeclaim::KIND, "n1"), None);
    }

    #[test]
    fn a_nodes_labels_are_read_from_the_node_kept_and_go_with_it() {
        let mut s = ClusterState::new();
        let labelled = |rv: &str, team: &str| {
            let mut n = node("n1", "kwok://n1");
            n.metadata.resource_version = Some(rv.into());
            n.metadata.labels = Some([("team".to_string(), team.to_string())].into());
            n
        };
        s.apply(&WatchEvent::Applied(labelled("1", "blue").into_any()));
        let first = s.node_labels("n1");
        assert_eq!(first.get("team").map(String::as_str), Some("blue"));
        let NodeLabels::Node(held) = &first else { panic!("the labels were copied out of the Node") };
        assert!(Arc::ptr_eq(held, &s.nodes()["n1"]), "read from the very Node the state keeps");
        s.apply(&WatchEvent::Applied(labelled("3", "green").into_any()));
        assert_eq!(s.node_labels("n1").get("team").map(String::as_str), Some("green"));
        assert_eq!(first.get("team").map(String::as_str), Some("blue"), "a copy handed out is not changed");
        s.apply(&WatchEvent::Deleted(labelled("4", "green").into_any()));
        assert!(s.node_labels("n1").is_empty());
    }

    #[test]
    fn an_event_older_than_the_recorded_object_is_ignored() {
        let mut s = ClusterState::new();
        s.record(pod("a", Some("n1"), "5").into_any());
        s.apply(&WatchEvent::Applied(pod("a", None, "4").into_any()));
        assert_eq!(names(s.pods_on_node("n1")), vec!["a"]);
        assert_eq!(s.unbound_pods().count(), 0);
    }

    #[test]
    fn provider_ids_link_claims_and_nodes() {
        let mut s = ClusterState::new();
        let claim = NodeClaim {
            api_version: String::new(),
            kind: String::new(),
            metadata: ObjectMeta {
                name: Some("c1".into()),
                labels: Some([(kerf_api::labels::NODE_POOL.to_string(), "p".to_string())].into()),
                ..Default::default()
            },
            spec: serde_json::from_value(serde_json::json!({
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }))
            .unwrap(),
            status: Some(kerf_api::nodeclaim::NodeClaimStatus {
                provider_id: Some("aws:///z/i-1".into()),
                capacity: [("cpu".to_string(), kerf_api::Quantity::from_units(4))].into_iter().collect(),
                ..Default::default()
            }),
        };
        s.apply(&WatchEvent::Applied(claim.clone().into_any()));
        s.apply(&WatchEvent::Applied(node("n1", "aws:///z/i-1").into_any()));
        assert_eq!(s.claim_for_node(s.node("n1").unwrap()).map(|c| c.name()), Some("c1"));
        assert_eq!(s.node_for_claim(&claim).and_then(|n| n.metadata.name.as_deref()), Some("n1"));
        let usage = s.pool_usage("p", |_| ResourceList::new());
        assert_eq!(usage.get("cpu"), kerf_api::Quantity::from_units(4));
        assert_eq!(usage.get("nodes"), kerf_api::Quantity::from_units(1));
        // Each link reads the latest version of what it links to.
        let mut relabelled = node("n1", "aws:///z/i-1");
        relabelled.metadata.labels = Some([("team".to_string(), "blue".to_string())].into());
        s.apply(&WatchEvent::Applied(relabelled.into_any()));
        let linked = s.node_for_claim(&claim).and_then(|n| n.metadata.labels.as_ref());
        assert_eq!(linked.and_then(|l| l.get("team")).map(String::as_str), Some("blue"));
        let mut annotated = claim.clone();
        annotated.metadata.annotations = Some([("a".to_string(), "1".to_string())].into());
        s.apply(&WatchEvent::Applied(annotated.into_any()));
        let linked = s.claim_for_node(s.node("n1").unwrap()).and_then(|c| c.metadata.annotations.as_ref());
        assert!(linked.is_some_and(|a| a.contains_key("a")));
        // A node that joins again under another provider ID is found by that one only.
        s.apply(&WatchEvent::Applied(node("n1", "aws:///z/i-2").into_any()));
        assert!(s.node_for_claim(&claim).is_none());
        assert_eq!(s.node_for_provider_id("aws:///z/i-2").and_then(|n| n.metadata.name.as_deref()), Some("n1"));
        s.apply(&WatchEvent::Deleted(node("n1", "aws:///z/i-2").into_any()));
        assert!(s.node_for_provider_id("aws:///z/i-2").is_none());
        s.apply(&WatchEvent::Deleted(claim.clone().into_any()));
        assert!(s.claim_for_provider_id("aws:///z/i-1").is_none());
    }
}

/// A NodePool's node class is missing or not Ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeClassProblem {
    /// `NodeClassNotFound` or `NodeClassNotReady` (the NodePool's `NodeClassReady` reason).
    pub reason: &'static str,
    /// e.g. `EC2NodeClass default not found`.
    pub message: String,
}
