//! `kerf top`'s picture of the cluster: what the watches delivered, kept as the few facts the
//! screen shows of each object (a pod is its node, phase, requests, owner and why it waits, not
//! its whole spec; pods of one shape share one list of requests), so that 60,000 pods fit in a
//! small process. [`Fleet::apply`] takes the watches' updates, a relist included (what it did not
//! list again is gone), and keeps each node's [`Load`] and the unbound pods up to date as pods
//! come and go, so that a frame costs the nodes, not the pods; `view` turns the fleet into a
//! frame. The NodeOverlays are kept as the one [`NodeOverlays`] set the controller builds from
//! them, rebuilt when one changes, so that every frame prices nodes as kerf does.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Node};
use kerf_api::overlay::NodeOverlays;
use kerf_api::resources::SharedLists;
use kerf_api::slim_pod::{ConditionStatus, KeptCondition};
use kerf_api::{CapacityBuffer, NodeClaim, NodeOverlay, NodePool, Requirements, ResourceList, SlimPod};
use kerf_cloud::Timestamp;

/// The kinds `kerf top` watches (the two event watches are told apart by what they select).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Node,
    NodeClaim,
    NodePool,
    Pod,
    CapacityBuffer,
    /// Events about nodes (kerf's `DisruptionBlocked`, `Disruption*`).
    NodeEvent,
    /// `FailedScheduling` events about pods.
    PodEvent,
    /// NodeOverlays (`karpenter.sh/v1alpha1`): the prices the cluster pays.
    NodeOverlay,
    /// kerf's `ConsolidationReversed` events about NodePools.
    PoolEvent,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Node,
        Kind::NodeClaim,
        Kind::NodePool,
        Kind::Pod,
        Kind::CapacityBuffer,
        Kind::NodeEvent,
        Kind::PodEvent,
        Kind::NodeOverlay,
        Kind::PoolEvent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::NodeClaim => "nodeclaims",
            Kind::NodePool => "nodepools",
            Kind::Pod => "pods",
            Kind::CapacityBuffer => "capacitybuffers",
            Kind::NodeEvent => "node events",
            Kind::PodEvent => "pod events",
            Kind::NodeOverlay => "nodeoverlays",
            Kind::PoolEvent => "nodepool events",
        }
    }
}

/// What the screen reads of a Node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub created: Option<Timestamp>,
    /// Its `Ready` condition: `None` when it has none yet.
    pub ready: Option<bool>,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// Tainted `karpenter.sh/disrupted`: a disruption has been decided.
    pub disrupted: bool,
    pub deleting: bool,
    pub allocatable: ResourceList,
    pub provider_id: Option<String>,
}

/// What the screen reads of a NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimFacts {
    pub name: String,
    pub node_pool: Option<String>,
    pub node: Option<String>,
    pub provider_id: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    pub created: Option<Timestamp>,
    pub deleting: bool,
    /// Its `DisruptionReason` condition when true: `reason: message`.
    pub disruption: Option<String>,
    /// Why it has not launched (`Launched=False`), if it says.
    pub not_launched: Option<String>,
    /// Its single-valued requirements as labels: with the node's labels, what NodeOverlay
    /// requirements read beyond the instance type and offering (as the cloud provider reprices a
    /// running instance). Kept only when they say more than the labels.
    pub requirement_labels: BTreeMap<String, String>,
    /// Its `kerf.sh/consolidation-reversed` annotation: it took part in a consolidation that
    /// was undone (`undone TIME decided TIME`), and consolidation leaves it alone.
    pub reversed: Option<String>,
}

/// What the screen reads of a Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub phase: String,
    pub requests: Arc<ResourceList>,
    /// `Kind name` of its controller (a ReplicaSet of a Deployment reads as the Deployment).
    pub owner: Option<String>,
    pub nominated: Option<String>,
    /// kube-scheduler's message when it found no node (`PodScheduled=False`, `Unschedulable`).
    pub unschedulable: Option<String>,
    /// Succeeded or Failed: holds nothing.
    pub finished: bool,
}

/// What the screen reads of a CapacityBuffer.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferFacts {
    pub namespace: String,
    pub name: String,
    /// Chunks asked for (`spec.replicas`, or a percentage / limits to resolve).
    pub wanted: String,
    /// Chunks resolved (`status.replicas`).
    pub chunks: Option<i32>,
    /// `Provisioning` condition: its status and message.
    pub provisioning: Option<(String, String)>,
    /// `ReadyForProvisioning=False`: why the buffer cannot be resolved.
    pub not_ready: Option<String>,
}

/// What the screen reads of an Event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventFacts {
    /// `namespace/name` of the event.
    pub key: String,
    /// The node's name, or the pod's `namespace/name`.
    pub object: String,
    pub reason: String,
    pub message: String,
    /// `karpenter` for kerf's (and Karpenter's) events.
    pub component: String,
    pub at: Option<Timestamp>,
    /// How many times it happened (`count`, at least 1).
    pub count: u32,
}

/// One object as the fleet keeps it.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    Node(NodeFacts),
    Claim(ClaimFacts),
    Pool(Arc<NodePool>),
    Pod(PodFacts),
    Buffer(BufferFacts),
    NodeEvent(EventFacts),
    PodEvent(EventFacts),
    Overlay(Arc<NodeOverlay>),
    PoolEvent(EventFacts),
}

/// A change the watches deliver.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Apply(Box<Item>),
    Delete(Kind, String),
    /// A (re)list starts: what it does not deliver again is gone when it ends.
    Listing(Kind),
    /// The list has been delivered in full.
    Listed(Kind),
    /// The cluster does not serve the kind (its CRD is not installed, or reading it is refused):
    /// nothing of it is shown.
    Absent(Kind, String),
    /// The watch failed (it starts over by itself).
    Failed(Kind, String),
}

impl Update {
    pub fn apply(item: Item) -> Update {
        Update::Apply(Box::new(item))
    }
}

fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Item {
    pub fn kind(&self) -> Kind {
        match self {
            Item::Node(_) => Kind::Node,
            Item::Claim(_) => Kind::NodeClaim,
            Item::Pool(_) => Kind::NodePool,
            Item::Pod(_) => Kind::Pod,
            Item::Buffer(_) => Kind::CapacityBuffer,
            Item::NodeEvent(_) => Kind::NodeEvent,
            Item::PodEvent(_) => Kind::PodEvent,
            Item::Overlay(_) => Kind::NodeOverlay,
            Item::PoolEvent(_) => Kind::PoolEvent,
        }
    }

    pub fn key(&self) -> String {
        match self {
            Item::Node(n) => n.name.clone(),
            Item::Claim(c) => c.name.clone(),
            Item::Pool(p) => p.name().to_string(),
            Item::Pod(p) => pod_key(&p.namespace, &p.name),
            Item::Buffer(b) => pod_key(&b.namespace, &b.name),
            Item::Overlay(o) => o.name().to_string(),
            Item::NodeEvent(e) | Item::PodEvent(e) | Item::PoolEvent(e) => e.key.clone(),
        }
    }
}

/// What the pods bound to a node hold of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Load {
    pub requested: ResourceList,
    pub pods: usize,
    pub running: usize,
    /// Bound but not started (`Pending`).
    pub starting: usize,
}

/// The cluster as the watches delivered it.
#[derive(Debug, Default)]
pub struct Fleet {
    pub nodes: BTreeMap<String, NodeFacts>,
    pub claims: BTreeMap<String, ClaimFacts>,
    pub pools: BTreeMap<String, Arc<NodePool>>,
    pub pods: HashMap<String, PodFacts>,
    pub buffers: BTreeMap<String, BufferFacts>,
    pub node_events: HashMap<String, EventFacts>,
    pub pod_events: HashMap<String, EventFacts>,
    pub pool_events: HashMap<String, EventFacts>,
    pub overlays: BTreeMap<String, Arc<NodeOverlay>>,
    /// The overlays in force (those not being deleted), as kerf applies them.
    pub overlay_set: Arc<NodeOverlays>,
    /// Kinds whose first list has been delivered (or that the cluster does not serve).
    pub synced: BTreeSet<Kind>,
    /// Kinds the cluster does not serve, and why.
    pub absent: BTreeMap<Kind, String>,
    /// The last failure of each kind's watch, until it lists again.
    pub failing: BTreeMap<Kind, String>,
    /// Per node name, what its pods (not finished) request.
    pub loads: HashMap<String, Load>,
    /// Keys of the pods (not finished) without a node.
    pub unbound: HashSet<String>,
    /// Keys delivered by a list in progress, per kind.
    listing: HashMap<Kind, HashSet<String>>,
    /// The pods' requests, one copy per distinct list.
    shared: SharedLists,
}

/// Adds (`sign` 1) or takes away (-1) a pod's part in its node's load or the unbound pods.
fn account(loads: &mut HashMap<String, Load>, unbound: &mut HashSet<String>, key: &str, p: &PodFacts, add: bool) {
    if p.finished {
        return;
    }
    let Some(node) = &p.node else {
        if add {
            unbound.insert(key.to_string());
        } else {
            unbound.remove(key);
        }
        return;
    };
    let load = loads.entry(node.clone()).or_default();
    let (running, starting) = (usize::from(p.phase == "Running"), usize::from(p.phase == "Pending"));
    if add {
        load.requested.add(&p.requests);
        load.pods += 1;
        load.running += running;
        load.starting += starting;
    } else {
        load.requested.sub(&p.requests);
        load.pods = load.pods.saturating_sub(1);
        load.running = load.running.saturating_sub(running);
        load.starting = load.starting.saturating_sub(starting);
        if load.pods == 0 {
            loads.remove(node);
        }
    }
}

impl Fleet {
    /// Whether every kind has been listed once.
    pub fn complete(&self) -> bool {
        Kind::ALL.iter().all(|k| self.synced.contains(k))
    }

    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Apply(item) => {
                let item = *item;
                let kind = item.kind();
                if let Some(seen) = self.listing.get_mut(&kind) {
                    seen.insert(item.key());
                }
                self.insert(item);
            }
            Update::Delete(kind, key) => self.remove(kind, &key),
            Update::Listing(kind) => {
                self.listing.insert(kind, HashSet::new());
            }
            Update::Listed(kind) => {
                let seen = self.listing.remove(&kind).unwrap_or_default();
                for key in self.keys(kind) {
                    if !seen.contains(&key) {
                        self.remove(kind, &key);
                    }
                }
                self.synced.insert(kind);
                self.failing.remove(&kind);
            }
            Update::Absent(kind, why) => {
                self.absent.insert(kind, why);
                self.synced.insert(kind);
            }
            Update::Failed(kind, why) => {
                self.failing.insert(kind, why);
            }
        }
    }

    fn insert(&mut self, item: Item) {
        let key = item.key();
        match item {
            Item::Node(n) => drop(self.nodes.insert(key, n)),
            Item::Claim(c) => drop(self.claims.insert(key, c)),
            Item::Pool(p) => drop(self.pools.insert(key, p)),
            Item::Pod(mut p) => {
                if let Some(old) = self.pods.get(&key) {
                    account(&mut self.loads, &mut self.unbound, &key, old, false);
                }
                p.requests = self.shared.share(p.requests);
                account(&mut self.loads, &mut self.unbound, &key, &p, true);
                self.pods.insert(key, p);
            }
            Item::Buffer(b) => drop(self.buffers.insert(key, b)),
            Item::NodeEvent(e) => drop(self.node_events.insert(key, e)),
            Item::PodEvent(e) => drop(self.pod_events.insert(key, e)),
            Item::PoolEvent(e) => drop(self.pool_events.insert(key, e)),
            Item::Overlay(o) => {
                self.overlays.insert(key, o);
                self.overlays_changed();
            }
        }
    }

    /// Builds the overlays in force again, as the controller's NodeOverlay reconciler does.
    fn overlays_changed(&mut self) {
        let live = self.overlays.values().filter(|o| o.metadata.deletion_timestamp.is_none()).map(|o| &**o);
        self.overlay_set = Arc::new(NodeOverlays::new(live));
    }

    fn remove(&mut self, kind: Kind, key: &str) {
        match kind {
            Kind::Node => drop(self.nodes.remove(key)),
            Kind::NodeClaim => drop(self.claims.remove(key)),
            Kind::NodePool => drop(self.pools.remove(key)),
            Kind::Pod => {
                if let Some(old) = self.pods.remove(key) {
                    account(&mut self.loads, &mut self.unbound, key, &old, false);
                }
            }
            Kind::CapacityBuffer => drop(self.buffers.remove(key)),
            Kind::NodeEvent => drop(self.node_events.remove(key)),
            Kind::PodEvent => drop(self.pod_events.remove(key)),
            Kind::PoolEvent => drop(self.pool_events.remove(key)),
            Kind::NodeOverlay => {
                if self.overlays.remove(key).is_some() {
                    self.overlays_changed();
                }
            }
        }
    }

    fn keys(&self, kind: Kind) -> Vec<String> {
        match kind {
            Kind::Node => self.nodes.keys().cloned().collect(),
            Kind::NodeClaim => self.claims.keys().cloned().collect(),
            Kind::NodePool => self.pools.keys().cloned().collect(),
            Kind::Pod => self.pods.keys().cloned().collect(),
            Kind::CapacityBuffer => self.buffers.keys().cloned().collect(),
            Kind::NodeEvent => self.node_events.keys().cloned().collect(),
            Kind::PodEvent => self.pod_events.keys().cloned().collect(),
            Kind::PoolEvent => self.pool_events.keys().cloned().collect(),
            Kind::NodeOverlay => self.overlays.keys().cloned().collect(),
        }
    }
}

fn time(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

/// Requests and allocatable as kerf reads them; a quantity that does not parse is left out.
fn resources(list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, q) in list.into_iter().flatten() {
        if let Ok(q) = kerf_api::Quantity::parse(&q.0) {
            out.set(k.clone(), q);
        }
    }
    out
}

impl NodeFacts {
    pub fn of(node: &Node) -> NodeFacts {
        let spec = node.spec.as_ref();
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status == "True");
        NodeFacts {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            created: time(node.metadata.creation_timestamp.as_ref()),
            ready,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            disrupted: spec
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == kerf_api::labels::DISRUPTED_TAINT_KEY)),
            deleting: node.metadata.deletion_timestamp.is_some(),
            allocatable: resources(status.and_then(|s| s.allocatable.as_ref())),
            provider_id: spec.and_then(|s| s.provider_id.clone()),
        }
    }
}

impl ClaimFacts {
    pub fn of(claim: &NodeClaim) -> ClaimFacts {
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        let label = |k: &str| labels.get(k).cloned();
        let status = claim.status.as_ref();
        let disruption =
            claim.condition(kerf_api::nodeclaim::CONDITION_DISRUPTION_REASON).filter(|c| c.is_true()).map(|c| {
                match (c.reason.as_deref(), c.message.as_deref().filter(|m| !m.is_empty())) {
                    (Some(r), Some(m)) => format!("{r}: {m}"),
                    (Some(r), None) => r.to_string(),
                    (None, m) => m.unwrap_or("disrupting").to_string(),
                }
            });
        let not_launched = claim
            .condition(kerf_api::nodeclaim::CONDITION_LAUNCHED)
            .filter(|c| c.status == "False")
            .and_then(|c| c.message.clone().or_else(|| c.reason.clone()));
        // What overlays read of the claim beyond its labels (which its node carries too).
        let requirement_labels = Requirements::from_node_selector(&claim.spec.requirements)
            .single_valued_labels()
            .into_iter()
            .filter(|(k, _)| !labels.contains_key(k))
            .collect();
        let reversed =
            claim.metadata.annotations.as_ref().and_then(|a| a.get(kerf_api::labels::CONSOLIDATION_REVERSED)).cloned();
        ClaimFacts {
            name: claim.name().to_string(),
            node_pool: label(kerf_api::labels::NODE_POOL),
            node: status.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
            provider_id: claim.provider_id().map(str::to_string),
            instance_type: label(kerf_api::labels::INSTANCE_TYPE),
            zone: label(kerf_api::labels::ZONE),
            capacity_type: label(kerf_api::labels::CAPACITY_TYPE),
            created: time(claim.metadata.creation_timestamp.as_ref()),
            deleting: claim.metadata.deletion_timestamp.is_some(),
            disruption,
            not_launched,
            requirement_labels,
            reversed,
        }
    }
}

/// A ReplicaSet named `<deployment>-<pod-template-hash>` reads as its Deployment.
fn owner(pod: &SlimPod) -> Option<String> {
    let refs = pod.metadata.owner_references.as_ref()?;
    let owner = refs.iter().find(|r| r.controller == Some(true)).or_else(|| refs.first())?;
    let hash = pod.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash"));
    if owner.kind == "ReplicaSet"
        && let Some(hash) = hash
        && let Some(deployment) = owner.name.strip_suffix(hash.as_str()).and_then(|d| d.strip_suffix('-'))
    {
        return Some(format!("Deployment {deployment}"));
    }
    Some(format!("{} {}", owner.kind, owner.name))
}

impl PodFacts {
    pub fn of(pod: &SlimPod) -> PodFacts {
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".to_string());
        let unschedulable = pod
            .condition(KeptCondition::PodScheduled)
            .filter(|c| c.status == ConditionStatus::False)
            .map(|c| c.message().or(c.reason()).unwrap_or("unschedulable").to_string());
        PodFacts {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()).map(str::to_string),
            finished: phase == "Succeeded" || phase == "Failed",
            phase,
            requests: Arc::new(kerf_scheduling::pod::pod_requests(pod)),
            owner: owner(pod),
            nominated: status.and_then(|s| s.nominated_node_name()).filter(|n| !n.is_empty()).map(str::to_string),
            unschedulable,
        }
    }
}

impl BufferFacts {
    pub fn of(b: &CapacityBuffer) -> BufferFacts {
        let wanted = match (b.spec.replicas, b.spec.percentage, &b.spec.limits) {
            (Some(r), _, _) => r.to_string(),
            (None, Some(p), _) => format!("{p}%"),
            (None, None, Some(_)) => "as limits allow".to_string(),
            (None, None, None) => "-".to_string(),
        };
        let provisioning = b
            .condition(kerf_api::capacitybuffer::CONDITION_PROVISIONING)
            .map(|c| (c.status.clone(), c.message.clone().or_else(|| c.reason.clone()).unwrap_or_default()));
        let not_ready = b
            .condition(kerf_api::capacitybuffer::CONDITION_READY_FOR_PROVISIONING)
            .filter(|c| c.status == "False")
            .map(|c| c.message.clone().or_else(|| c.reason.clone()).unwrap_or_default());
        BufferFacts {
            namespace: b.namespace().to_string(),
            name: b.name().to_string(),
            wanted,
            chunks: b.status.as_ref().and_then(|s| s.replicas),
            provisioning,
            not_ready,
        }
    }
}

impl EventFacts {
    /// The event about a node (`node`) or a pod (`namespace/name`).
    pub fn of(e: &Event) -> EventFacts {
        let o = &e.involved_object;
        let name = o.name.clone().unwrap_or_default();
        let object = match (o.kind.as_deref(), o.namespace.as_deref()) {
            (Some("Pod"), Some(ns)) => pod_key(ns, &name),
            _ => name,
        };
        let at = e
            .last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.first_timestamp.as_ref().map(|t| t.0))
            .or_else(|| time(e.metadata.creation_timestamp.as_ref()));
        EventFacts {
            key: pod_key(
                e.metadata.namespace.as_deref().unwrap_or_default(),
                e.metadata.name.as_deref().unwrap_or_default(),
            ),
            object,
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
            component: e
                .reporting_component
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_default(),
            at,
            count: e.count.and_then(|c| u32::try_from(c).ok()).unwrap_or(1).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn node(name: &str) -> NodeFacts {
        NodeFacts {
            name: name.to_string(),
            labels: BTreeMap::new(),
            created: None,
            ready: Some(true),
            unschedulable: false,
            disrupted: false,
            deleting: false,
            allocatable: ResourceList::new(),
            provider_id: None,
        }
    }

    #[test]
    fn a_relist_removes_what_it_did_not_list_again_and_keeps_what_it_did() {
        let mut f = Fleet::default();
        for n in ["a", "b", "c"] {
            f.apply(Update::apply(Item::Node(node(n))));
        }
        assert!(!f.synced.contains(&Kind::Node));
        f.apply(Update::Listing(Kind::Node));
        f.apply(Update::apply(Item::Node(node("a"))));
        f.apply(Update::apply(Item::Node(node("d"))));
        f.apply(Update::Listed(Kind::Node));
        assert_eq!(f.nodes.keys().collect::<Vec<_>>(), ["a", "d"]);
        assert!(f.synced.contains(&Kind::Node));
        f.apply(Update::Delete(Kind::Node, "a".to_string()));
        assert_eq!(f.nodes.keys().collect::<Vec<_>>(), ["d"]);
    }

    fn pod(name: &str, node: Option<&str>, phase: &str, cpu_milli: i64) -> PodFacts {
        PodFacts {
            namespace: "default".into(),
            name: name.into(),
            node: node.map(str::to_string),
            finished: phase == "Succeeded",
            phase: phase.into(),
            requests: Arc::new(ResourceList::new().with("cpu", kerf_api::Quantity::from_milli(cpu_milli))),
            owner: None,
            nominated: None,
            unschedulable: None,
        }
    }

    #[test]
    fn node_loads_and_unbound_pods_follow_pods_as_they_bind_start_finish_and_go() {
        let mut f = Fleet::default();
        let cpu = |f: &Fleet, n: &str| {
            f.loads.get(n).map(|l| (l.requested.get("cpu").milli_ceil(), l.pods, l.running, l.starting))
        };
        f.apply(Update::apply(Item::Pod(pod("a", None, "Pending", 500))));
        f.apply(Update::apply(Item::Pod(pod("b", Some("n1"), "Running", 250))));
        assert_eq!(f.unbound.iter().collect::<Vec<_>>(), ["default/a"]);
        f.apply(Update::apply(Item::Pod(pod("a", Some("n1"), "Pending", 500))));
        assert!(f.unbound.is_empty());
        assert_eq!(cpu(&f, "n1"), Some((750, 2, 1, 1)));
        f.apply(Update::apply(Item::Pod(pod("a", Some("n1"), "Running", 500))));
        assert_eq!(cpu(&f, "n1"), Some((750, 2, 2, 0)));
        assert!(Arc::ptr_eq(&f.pods["default/a"].requests, &f.pods["default/a"].requests));
        f.apply(Update::apply(Item::Pod(pod("b", Some("n1"), "Succeeded", 250))));
        assert_eq!(cpu(&f, "n1"), Some((500, 1, 1, 0)), "a finished pod holds nothing");
        f.apply(Update::Listing(Kind::Pod));
        f.apply(Update::apply(Item::Pod(pod("b", Some("n1"), "Succeeded", 250))));
        f.apply(Update::Listed(Kind::Pod));
        assert_eq!(cpu(&f, "n1"), None, "a relist without a drops its part");
        f.apply(Update::apply(Item::Pod(pod("c", Some("n2"), "Running", 250))));
        f.apply(Update::apply(Item::Pod(pod("d", Some("n2"), "Running", 250))));
        assert!(Arc::ptr_eq(&f.pods["default/c"].requests, &f.pods["default/d"].requests), "one list per shape");
        f.apply(Update::Delete(Kind::Pod, "default/c".into()));
        assert_eq!(cpu(&f, "n2"), Some((250, 1, 1, 0)));
    }

    #[test]
    fn the_fleet_is_complete_once_every_kind_is_listed_or_absent() {
        let mut f = Fleet::default();
        for k in Kind::ALL {
            assert!(!f.complete());
            if k == Kind::CapacityBuffer {
                f.apply(Update::Absent(k, "not served".to_string()));
            } else {
                f.apply(Update::Listing(k));
                f.apply(Update::Listed(k));
            }
        }
        assert!(f.complete());
        assert_eq!(f.absent.get(&Kind::CapacityBuffer).map(String::as_str), Some("not served"));
    }

    #[test]
    fn a_pod_of_a_deployment_reads_as_the_deployment_and_keeps_its_requests_and_scheduler_message() {
        let pod: SlimPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-5d8f-x", "namespace": "shop", "labels": {"pod-template-hash": "5d8f"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}]}
        }))
        .expect("pod");
        let f = PodFacts::of(&pod);
        assert_eq!(f.owner.as_deref(), Some("Deployment web"));
        assert_eq!(f.requests.get("cpu"), kerf_api::Quantity::from_milli(250));
        assert_eq!(f.unschedulable.as_deref(), Some("0/3 nodes are available"));
        assert_eq!((f.node, f.phase.as_str(), f.finished), (None, "Pending", false));
    }

    #[test]
    fn a_node_tainted_disrupted_and_cordoned_is_read_as_such() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "general"}},
            "spec": {"unschedulable": true, "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "3920m"}, "conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .expect("node");
        let f = NodeFacts::of(&n);
        assert!(f.unschedulable && f.disrupted && !f.deleting);
        assert_eq!(f.ready, Some(false));
        assert_eq!(f.allocatable.get("cpu"), kerf_api::Quantity::from_milli(3920));
    }
}
