//! Test doubles: a minimal in-memory ClusterApi, a fake CloudProvider, and a harness that
//! drives a Manager on a hand-moved clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::nodeclaim::NodeClaimStatus;
use kerf_api::nodepool::{NodeClaimTemplate, NodeClaimTemplateSpec, NodePoolSpec, TemplateMetadata};
use kerf_api::{
    EC2NodeClass, NodeClaim, NodeClassReference, NodePool, NodeSelectorRequirementWithMinValues, Operator, Quantity,
    ResourceList, Taint, TaintEffect, labels,
};
use kerf_cloud::{CloudError, CloudProvider, Timestamp};
use kerf_scheduling::{InstanceType, Offering, Requirements};

use crate::api::{AnyObject, ApiError, ClusterApi, EventRecord, Object, WatchEvent};
use crate::manager::{Manager, Options};
use crate::util;

pub use kerf_cloud::block_on;

pub fn t0() -> Timestamp {
    Timestamp::from_second(1_735_689_600).unwrap()
}

pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).unwrap()
}

type Key = (&'static str, String, String);

fn key_of(kind: &'static str, meta: &ObjectMeta) -> Key {
    (kind, meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

#[derive(Default)]
struct ApiInner {
    objects: BTreeMap<Key, AnyObject>,
    version: u64,
    events: Vec<WatchEvent>,
    recorded: Vec<EventRecord>,
    now: Option<Timestamp>,
    writes: usize,
    /// When set, creating an object of this kind fails validation with this message.
    reject_creates: Option<(&'static str, String)>,
    /// Errors for the next updates (update or update_status), in order.
    fail_writes: Vec<ApiError>,
}

/// A minimal API server: uids, resourceVersions, conflicts, finalizers, deletionTimestamp.
#[derive(Default, Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<ApiInner>>,
}

impl FakeApi {
    pub fn set_now(&self, now: Timestamp) {
        self.inner.lock().unwrap().now = Some(now);
    }

    pub fn drain(&self) -> Vec<WatchEvent> {
        std::mem::take(&mut self.inner.lock().unwrap().events)
    }

    pub fn recorded(&self) -> Vec<EventRecord> {
        self.inner.lock().unwrap().recorded.clone()
    }

    pub fn reject_creates<K: Object>(&self, message: &str) {
        self.inner.lock().unwrap().reject_creates = Some((K::KIND, message.to_string()));
    }

    pub fn fail_next_write(&self, e: ApiError) {
        self.inner.lock().unwrap().fail_writes.push(e);
    }

    pub fn writes(&self) -> usize {
        self.inner.lock().unwrap().writes
    }

    pub fn all<K: Object>(&self) -> Vec<K> {
        let inner = self.inner.lock().unwrap();
        inner.objects.values().filter_map(|o| K::from_any(o).cloned()).collect()
    }

    pub fn one<K: Object>(&self, ns: Option<&str>, name: &str) -> Option<K> {
        let inner = self.inner.lock().unwrap();
        inner
            .objects
            .get(&(K::KIND, ns.unwrap_or("").to_string(), name.to_string()))
            .and_then(|o| K::from_any(o).cloned())
    }

    /// Writes an object as another actor would (kubelet, kube-scheduler, a user).
    pub fn put<K: Object>(&self, obj: K) -> K {
        let mut inner = self.inner.lock().unwrap();
        let mut obj = obj;
        let key = key_of(K::KIND, obj.meta());
        inner.version += 1;
        let v = inner.version;
        let now = inner.now.unwrap_or_else(t0);
        let existing = inner.objects.get(&key).map(|o| o.meta().clone());
        let m = obj.meta_mut();
        m.resource_version = Some(v.to_string());
        match existing {
            Some(e) => {
                m.uid = e.uid;
                m.creation_timestamp = e.creation_timestamp;
            }
            None => {
                m.uid = Some(format!("uid-{v}"));
                m.creation_timestamp = Some(Time(now));
            }
        }
        inner.objects.insert(key, obj.clone().into_any());
        inner.events.push(WatchEvent::Applied(obj.clone().into_any()));
        obj
    }

    /// Stores an object without a watch event (as if the watch had not caught up yet).
    pub fn put_unseen<K: Object>(&self, obj: K) {
        self.put(obj);
        self.inner.lock().unwrap().events.pop();
    }

    pub fn remove<K: Object>(&self, ns: Option<&str>, name: &str) {
        let mut inner = self.inner.lock().unwrap();
        if let Some(o) = inner.objects.remove(&(K::KIND, ns.unwrap_or("").to_string(), name.to_string())) {
            inner.events.push(WatchEvent::Deleted(o));
        }
    }

    fn write<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        let mut inner = self.inner.lock().unwrap();
        inner.writes += 1;
        if !inner.fail_writes.is_empty() {
            return Err(inner.fail_writes.remove(0));
        }
        let key = key_of(K::KIND, obj.meta());
        let Some(cur) = inner.objects.get(&key) else {
            return Err(ApiError::NotFound { kind: K::KIND, name: key.2 });
        };
        if cur.meta().resource_version != obj.meta().resource_version {
            return Err(ApiError::Conflict { kind: K::KIND, name: key.2 });
        }
        let deleting = cur.meta().deletion_timestamp.clone();
        let mut obj = obj;
        inner.version += 1;
        let v = inner.version;
        obj.meta_mut().resource_version = Some(v.to_string());
        obj.meta_mut().deletion_timestamp = deleting.clone();
        if deleting.is_some() && obj.meta().finalizers.as_ref().is_none_or(Vec::is_empty) {
            inner.objects.remove(&key);
            inner.events.push(WatchEvent::Deleted(obj.clone().into_any()));
        } else {
            inner.objects.insert(key, obj.clone().into_any());
            inner.events.push(WatchEvent::Applied(obj.clone().into_any()));
        }
        Ok(obj)
    }
}

impl ClusterApi for FakeApi {
    async fn get<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, ApiError> {
        Ok(self.one::<K>(namespace, name))
    }

    async fn list<K: Object>(&self) -> Result<Vec<K>, ApiError> {
        Ok(self.all::<K>())
    }

    async fn create<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        {
            let mut inner = self.inner.lock().unwrap();
            inner.writes += 1;
            if let Some((kind, message)) = &inner.reject_creates
                && *kind == K::KIND
            {
                let name = obj.meta().name.clone().unwrap_or_default();
                return Err(ApiError::Invalid { kind: K::KIND, name, message: message.clone() });
            }
            if inner.objects.contains_key(&key_of(K::KIND, obj.meta())) {
                return Err(ApiError::AlreadyExists {
                    kind: K::KIND,
                    name: obj.meta().name.clone().unwrap_or_default(),
                });
            }
        }
        Ok(self.put(obj))
    }

    async fn update<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.write(obj)
    }

    async fn update_status<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.write(obj)
    }

    async fn delete<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<(), ApiError> {
        let mut inner = self.inner.lock().unwrap();
        inner.writes += 1;
        let key = (K::KIND, namespace.unwrap_or("").to_string(), name.to_string());
        let Some(cur) = inner.objects.get(&key).and_then(|o| K::from_any(o).cloned()) else {
            return Err(ApiError::NotFound { kind: K::KIND, name: name.to_string() });
        };
        if cur.meta().finalizers.as_ref().is_none_or(Vec::is_empty) {
            inner.objects.remove(&key);
            inner.events.push(WatchEvent::Deleted(cur.into_any()));
        } else if cur.meta().deletion_timestamp.is_none() {
            let mut cur = cur;
            inner.version += 1;
            cur.meta_mut().resource_version = Some(inner.version.to_string());
            cur.meta_mut().deletion_timestamp = Some(Time(inner.now.unwrap_or_else(t0)));
            inner.objects.insert(key, cur.clone().into_any());
            inner.events.push(WatchEvent::Applied(cur.into_any()));
        }
        Ok(())
    }

    async fn evict(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        self.remove::<Pod>(Some(namespace), name);
        Ok(())
    }

    async fn record_event(&self, event: EventRecord) {
        self.inner.lock().unwrap().recorded.push(event);
    }
}

#[derive(Default)]
struct CloudInner {
    types: Vec<Arc<InstanceType>>,
    /// Offerings that fail with insufficient capacity when tried: (type, zone, capacity type).
    no_capacity: BTreeSet<(String, String, String)>,
    /// Offerings known to be unavailable (the provider's insufficient-capacity cache).
    unavailable: BTreeSet<(String, String, String)>,
    /// Errors to return from the next create calls.
    fail_next: Vec<CloudError>,
    instances: BTreeMap<String, NodeClaim>,
    launched: u64,
    deleted: Vec<String>,
}

/// A cloud that launches the cheapest available offering a claim allows.
#[derive(Default, Clone)]
pub struct FakeCloud {
    inner: Arc<Mutex<CloudInner>>,
}

pub fn res(pairs: &[(&str, &str)]) -> ResourceList {
    pairs.iter().map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap())).collect()
}

/// An instance type offered in zones a and b, on-demand at `price` and spot at 0.7 x.
pub fn instance_type(name: &str, cpu: &str, memory: &str, price: f64) -> InstanceType {
    let mut offerings = Vec::new();
    for zone in ["test-zone-a", "test-zone-b"] {
        offerings.push(Offering { zone: zone.into(), capacity_type: "on-demand".into(), price, available: true });
        offerings.push(Offering {
            zone: zone.into(),
            capacity_type: "spot".into(),
            price: price * 0.7,
            available: true,
        });
    }
    InstanceType {
        name: name.to_string(),
        labels: [
            (labels::INSTANCE_TYPE.to_string(), name.to_string()),
            (labels::ARCH.to_string(), "amd64".to_string()),
            (labels::OS.to_string(), "linux".to_string()),
        ]
        .into(),
        capacity: res(&[("cpu", cpu), ("memory", memory), ("pods", "110")]),
        overhead: res(&[("cpu", "100m")]),
        offerings,
    }
}

impl FakeCloud {
    pub fn with_types(types: Vec<InstanceType>) -> Self {
        let cloud = FakeCloud::default();
        cloud.inner.lock().unwrap().types = types.into_iter().map(Arc::new).collect();
        cloud
    }

    pub fn no_capacity(&self, it: &str, zone: &str, ct: &str) {
        self.inner.lock().unwrap().no_capacity.insert((it.into(), zone.into(), ct.into()));
    }

    /// Marks every offering of every type unavailable (true) or available again (false).
    pub fn all_unavailable(&self, unavailable: bool) {
        let mut inner = self.inner.lock().unwrap();
        let all: Vec<_> = inner
            .types
            .iter()
            .flat_map(|t| t.offerings.iter().map(|o| (t.name.clone(), o.zone.clone(), o.capacity_type.clone())))
            .collect();
        if unavailable { inner.unavailable.extend(all) } else { inner.unavailable.clear() }
    }

    pub fn fail_next(&self, e: CloudError) {
        self.inner.lock().unwrap().fail_next.push(e);
    }

    pub fn launched(&self) -> u64 {
        self.inner.lock().unwrap().launched
    }

    pub fn deleted(&self) -> Vec<String> {
        self.inner.lock().unwrap().deleted.clone()
    }

    /// An instance running for this cluster that no NodeClaim in the API accounts for.
    pub fn add_orphan(&self, name: &str, provider_id: &str) {
        let mut claim = claim_stub(name);
        claim.status = Some(NodeClaimStatus { provider_id: Some(provider_id.to_string()), ..Default::default() });
        self.inner.lock().unwrap().instances.insert(provider_id.to_string(), claim);
    }

    /// The instance disappears without kerf asking (terminated out of band).
    pub fn lose_instance(&self, provider_id: &str) {
        self.inner.lock().unwrap().instances.remove(provider_id);
    }

    pub fn running(&self) -> usize {
        self.inner.lock().unwrap().instances.len()
    }

    fn types_now(inner: &CloudInner) -> Vec<Arc<InstanceType>> {
        inner
            .types
            .iter()
            .map(|t| {
                let mut t = (**t).clone();
                for o in &mut t.offerings {
                    o.available =
                        !inner.unavailable.contains(&(t.name.clone(), o.zone.clone(), o.capacity_type.clone()));
                }
                Arc::new(t)
            })
            .collect()
    }
}

impl CloudProvider for FakeCloud {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let mut inner = self.inner.lock().unwrap();
        if !inner.fail_next.is_empty() {
            return Err(inner.fail_next.remove(0));
        }
        let reqs = Requirements::from_node_selector(&claim.spec.requirements);
        let mut best: Option<(f64, Arc<InstanceType>, Offering)> = None;
        for t in Self::types_now(&inner) {
            if !reqs.iter().all(|(k, r)| t.labels.get(k).is_none_or(|v| r.matches(Some(v)))) {
                continue;
            }
            for o in t.offerings.iter().filter(|o| o.available) {
                if !reqs.allows(labels::ZONE, &o.zone) || !reqs.allows(labels::CAPACITY_TYPE, &o.capacity_type) {
                    continue;
                }
                if best.as_ref().is_none_or(|b| o.price < b.0) {
                    best = Some((o.price, t.clone(), o.clone()));
                }
            }
        }
        let Some((_, t, o)) = best else {
            return Err(CloudError::InsufficientCapacity(format!("no offering available for {}", claim.name())));
        };
        let offering = (t.name.clone(), o.zone.clone(), o.capacity_type.clone());
        if inner.no_capacity.contains(&offering) {
            inner.unavailable.insert(offering);
            return Err(CloudError::InsufficientCapacity(format!("{} {} {}", t.name, o.zone, o.capacity_type)));
        }
        inner.launched += 1;
        let mut out = claim.clone();
        let l = out.metadata.labels.get_or_insert_with(Default::default);
        l.extend(t.labels.clone());
        l.insert(labels::ZONE.into(), o.zone.clone());
        l.insert(labels::CAPACITY_TYPE.into(), o.capacity_type.clone());
        let provider_id = format!("fake:///{}/i-{:04}", o.zone, inner.launched);
        out.status = Some(NodeClaimStatus {
            provider_id: Some(provider_id.clone()),
            capacity: t.capacity.clone(),
            allocatable: t.allocatable(),
            ..Default::default()
        });
        inner.instances.insert(provider_id, out.clone());
        Ok(out)
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let mut inner = self.inner.lock().unwrap();
        let pid = claim.provider_id().unwrap_or_default().to_string();
        match inner.instances.remove(&pid) {
            Some(_) => {
                inner.deleted.push(claim.name().to_string());
                Ok(())
            }
            None => Err(CloudError::NotFound(pid)),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.inner.lock().unwrap().instances.get(provider_id).cloned().ok_or(CloudError::NotFound(provider_id.into()))
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        Ok(self.inner.lock().unwrap().instances.values().cloned().collect())
    }

    async fn instance_types(
        &self,
        _node_pool: &NodePool,
        _node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        Ok(Self::types_now(&self.inner.lock().unwrap()))
    }

    async fn is_drifted(&self, _: &NodeClaim, _: Option<&EC2NodeClass>) -> Result<Option<String>, CloudError> {
        Ok(None)
    }

    fn name(&self) -> &'static str {
        "fake"
    }
}

fn claim_stub(name: &str) -> NodeClaim {
    NodeClaim {
        api_version: kerf_api::nodeclaim::API_VERSION.into(),
        kind: kerf_api::nodeclaim::KIND.into(),
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: serde_json::from_value(serde_json::json!({
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }))
        .unwrap(),
        status: None,
    }
}

pub fn node_pool(name: &str) -> NodePool {
    NodePool {
        api_version: kerf_api::nodepool::API_VERSION.into(),
        kind: kerf_api::nodepool::KIND.into(),
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: NodePoolSpec {
            template: NodeClaimTemplate {
                metadata: TemplateMetadata::default(),
                spec: NodeClaimTemplateSpec {
                    taints: vec![],
                    startup_taints: vec![],
                    requirements: vec![],
                    node_class_ref: NodeClassReference {
                        group: "karpenter.k8s.aws".into(),
                        kind: "EC2NodeClass".into(),
                        name: "default".into(),
                    },
                    expire_after: kerf_api::nodepool::default_expire_after(),
                    termination_grace_period: None,
                },
            },
            disruption: Default::default(),
            limits: None,
            weight: None,
            replicas: None,
        },
        status: None,
    }
}

pub fn requirement(key: &str, op: Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.into(),
        operator: op,
        values: values.iter().map(|s| s.to_string()).collect(),
        min_values: None,
    }
}

/// A pod kube-scheduler could not place.
pub fn pending_pod(name: &str, cpu: &str) -> Pod {
    Pod {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), KubeQuantity(cpu.into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// Binds a pod to a node, as kube-scheduler would.
pub fn bind(api: &FakeApi, pod: &str, node: &str) {
    let mut p: Pod = api.one(Some("default"), pod).unwrap();
    p.spec.as_mut().unwrap().node_name = Some(node.into());
    let status = p.status.as_mut().unwrap();
    status.conditions =
        Some(vec![PodCondition { type_: "PodScheduled".into(), status: "True".into(), ..Default::default() }]);
    status.phase = Some("Running".into());
    api.put(p);
}

/// The Node a kubelet registers for a launched claim: the claim's labels, its taints and
/// startup taints, the unregistered taint, allocatable from the claim.
pub fn kubelet_joins(api: &FakeApi, claim: &str, node: &str, ready: bool) -> Node {
    let claim: NodeClaim = api.one(None, claim).unwrap();
    let status = claim.status.clone().unwrap();
    let mut taints: Vec<_> = claim.spec.taints.iter().chain(&claim.spec.startup_taints).map(Taint::to_core).collect();
    taints.push(Taint::new(labels::UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute).to_core());
    let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
    node_labels.insert(labels::HOSTNAME.into(), node.into());
    let to_kube = |r: &ResourceList| r.iter().map(|(k, v)| (k.clone(), KubeQuantity(v.to_string()))).collect();
    api.put(Node {
        metadata: ObjectMeta { name: Some(node.into()), labels: Some(node_labels), ..Default::default() },
        spec: Some(NodeSpec { provider_id: status.provider_id.clone(), taints: Some(taints), ..Default::default() }),
        status: Some(NodeStatus {
            allocatable: Some(to_kube(&status.allocatable)),
            capacity: Some(to_kube(&status.capacity)),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    })
}

/// A manager, its API and cloud on a clock moved by hand.
pub struct Harness {
    pub api: FakeApi,
    pub cloud: FakeCloud,
    pub mgr: Manager<FakeCloud>,
    pub now: Timestamp,
    pub last_wake: Option<Timestamp>,
}

impl Harness {
    pub fn new(cloud: FakeCloud) -> Self {
        let api = FakeApi::default();
        api.set_now(t0());
        let mgr = Manager::new(cloud.clone(), Options { seed: 42, ..Options::default() });
        Harness { api, cloud, mgr, now: t0(), last_wake: None }
    }

    /// Delivers pending watch events and reconciles until nothing more changes at `now`.
    pub fn settle(&mut self) -> Option<Timestamp> {
        for _ in 0..50 {
            let events = self.api.drain();
            for e in &events {
                self.mgr.observe(e);
            }
            let wake = block_on(self.mgr.reconcile(&self.api, self.now)).expect("reconcile");
            self.last_wake = wake;
            if self.api.inner.lock().unwrap().events.is_empty() {
                return wake;
            }
        }
        panic!("controllers did not settle");
    }

    pub fn advance_to(&mut self, t: Timestamp) -> Option<Timestamp> {
        self.now = t;
        self.api.set_now(t);
        self.settle()
    }

    pub fn advance(&mut self, d: Duration) -> Option<Timestamp> {
        self.advance_to(util::after(self.now, d))
    }

    pub fn claims(&self) -> Vec<NodeClaim> {
        self.api.all::<NodeClaim>()
    }

    pub fn events(&self, reason: &str) -> Vec<EventRecord> {
        self.api.recorded().into_iter().filter(|e| e.reason == reason).collect()
    }
}

thread_local! {
    static LOG_BUFFER: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// Writes into the current thread's capture buffer, if one is open; otherwise discards.
struct ThreadBuffer;

impl std::io::Write for ThreadBuffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        LOG_BUFFER.with(|buf| {
            if let Some(v) = buf.borrow_mut().as_mut() {
                v.extend_from_slice(b);
            }
        });
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with the log lines it emits on this thread captured (fmt format, no ANSI, no time).
///
/// One process-wide subscriber writes to per-thread buffers: a thread-local subscriber would
/// race with tests on other threads over tracing's per-callsite interest cache.
pub fn capture_logs(f: impl FnOnce()) -> String {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadBuffer)
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber in tests");
    });
    LOG_BUFFER.with(|buf| *buf.borrow_mut() = Some(Vec::new()));
    f();
    let bytes = LOG_BUFFER.with(|buf| buf.borrow_mut().take()).unwrap_or_default();
    String::from_utf8(bytes).unwrap()
}
