//! Test support: kerf's in-memory API server (kerf-apiserver's `SimCluster`) behind a thin
//! fault-injecting `ClusterApi`, a fake CloudProvider, and a harness that drives a Manager on a
//! hand-moved clock.

use kerf_api::MetaView;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::ec2nodeclass::{
    CONDITION_READY, CONDITION_SUBNETS_READY, EC2NodeClassStatus, READY_DEPENDS_ON, SubnetStatus,
};
use kerf_api::nodeclaim::NodeClaimStatus;
use kerf_api::nodepool::{NodeClaimTemplate, NodeClaimTemplateSpec, NodePoolSpec, TemplateMetadata};
use kerf_api::{
    EC2NodeClass, NodeClaim, NodeClassReference, NodePool, NodeSelectorRequirementWithMinValues, Operator, Quantity,
    ResourceList, Taint, TaintEffect, labels,
};
use kerf_cloud::{CloudError, CloudProvider, ManualClock, NodeClassResolution, Timestamp};
use kerf_scheduling::{InstanceType, Offering, Requirements};

use crate::manager::{Manager, Options};
use crate::util;
use kerf_api::cluster::{ApiError, ClusterApi, EventRecord, Object, Patch, WatchEvent};
use kerf_apiserver::SimCluster;

pub use kerf_cloud::block_on;

pub fn t0() -> Timestamp {
    Timestamp::from_second(1_735_689_600).unwrap()
}

pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_735_689_600 + secs).unwrap()
}

/// Faults a test injects into the controllers' writes.
#[derive(Default)]
struct Faults {
    /// Writes the controllers made (create, update, update_status, delete).
    writes: usize,
    /// The same, by kind.
    writes_of: BTreeMap<&'static str, usize>,
    /// When set, creating an object of this kind fails validation with this message.
    reject_creates: Option<(&'static str, String)>,
    /// Errors for the next updates (update or update_status), in order.
    fail_writes: Vec<ApiError>,
    /// resourceVersions whose watch events are withheld (the watch has not caught up yet).
    unseen: BTreeSet<String>,
    /// Every write (create, update, update_status) of this kind fails with this error.
    fail_kind: Option<(&'static str, ApiError)>,
    /// Evictions asked and not answered yet, and the most there were at once. An eviction is
    /// answered on its second poll, as one that waits on the network would be.
    evictions_in_flight: usize,
    most_evictions_in_flight: usize,
}

/// The controllers' view of kerf's one in-memory API server ([`SimCluster`]), with faults a
/// test can inject into their writes. Other actors (kubelet, kube-scheduler, a user) write
/// straight to the cluster through [`TestApi::put`].
#[derive(Clone)]
pub struct TestApi {
    cluster: Arc<SimCluster>,
    clock: ManualClock,
    faults: Arc<Mutex<Faults>>,
}

impl Default for TestApi {
    fn default() -> Self {
        let clock = ManualClock::new();
        clock.set(t0());
        TestApi {
            cluster: Arc::new(SimCluster::new(clock.clone(), 1)),
            clock,
            faults: Arc::new(Mutex::new(Faults::default())),
        }
    }
}

impl TestApi {
    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.faults.lock().unwrap()
    }

    pub fn set_now(&self, now: Timestamp) {
        self.clock.set(now);
    }

    /// The watch events since the last call, without those withheld by [`TestApi::put_unseen`].
    pub fn drain(&self) -> Vec<WatchEvent> {
        let faults = self.faults();
        let mut events = self.cluster.drain_watch();
        events.retain(|e| {
            let (WatchEvent::Applied(o) | WatchEvent::Deleted(o)) = e;
            o.meta().resource_version().is_none_or(|rv| !faults.unseen.contains(rv))
        });
        events
    }

    pub fn has_pending_watch(&self) -> bool {
        self.cluster.has_pending_watch()
    }

    pub fn recorded(&self) -> Vec<EventRecord> {
        self.cluster.events().into_iter().map(|e| e.record).collect()
    }

    pub fn reject_creates<K: Object>(&self, message: &str) {
        self.faults().reject_creates = Some((K::KIND, message.to_string()));
    }

    pub fn fail_next_write(&self, e: ApiError) {
        self.faults().fail_writes.push(e);
    }

    /// Makes every write of kind `K` fail with `e` (the API server is broken for it), or
    /// succeed again (`None`).
    pub fn fail_writes_of<K: Object>(&self, e: Option<ApiError>) {
        self.faults().fail_kind = e.map(|e| (K::KIND, e));
    }

    pub fn writes(&self) -> usize {
        self.faults().writes
    }

    /// The most evictions the controllers had asked at once without an answer.
    pub fn most_evictions_in_flight(&self) -> usize {
        self.faults().most_evictions_in_flight
    }

    /// Writes the controllers made to objects of kind `K`.
    pub fn writes_of<K: Object>(&self) -> usize {
        self.faults().writes_of.get(K::KIND).copied().unwrap_or(0)
    }

    pub fn all<K: Object>(&self) -> Vec<K> {
        self.cluster.list_objs::<K>()
    }

    pub fn one<K: Object>(&self, ns: Option<&str>, name: &str) -> Option<K> {
        self.cluster.get_obj::<K>(ns, name)
    }

    /// Writes a whole object as another actor would (kubelet, kube-scheduler, a user): creates
    /// it, or replaces metadata, spec and status whatever resourceVersion it carries.
    pub fn put<K: Object>(&self, obj: K) -> K {
        let meta = obj.meta();
        let exists = self.one::<K>(meta.namespace(), meta.name().unwrap_or_default()).is_some();
        if exists {
            let mut obj = obj;
            obj.meta_mut().set_resource_version(None);
            std::sync::Arc::unwrap_or_clone(self.cluster.replace_obj(obj).unwrap())
        } else {
            std::sync::Arc::unwrap_or_clone(self.cluster.create_obj(obj).unwrap())
        }
    }

    /// Stores an object without a watch event (as if the watch had not caught up yet).
    pub fn put_unseen<K: Object>(&self, obj: K) {
        let stored = self.put(obj);
        if let Some(rv) = stored.meta().resource_version().map(str::to_string) {
            self.faults().unseen.insert(rv);
        }
    }

    /// Deletes an object as a user would, finalizers or not.
    pub fn remove<K: Object>(&self, ns: Option<&str>, name: &str) {
        let Some(mut obj) = self.one::<K>(ns, name) else { return };
        if !obj.meta().finalizers().is_empty() {
            obj.meta_mut().clear_finalizers();
            obj.meta_mut().set_resource_version(None);
            self.cluster.replace_obj(obj).unwrap();
        }
        if self.one::<K>(ns, name).is_some() {
            self.cluster.delete_obj::<K>(ns, name).unwrap();
        }
    }

    /// Counts a controller write; the injected error for it, if any.
    fn write_fault<K: Object>(&self) -> Result<(), ApiError> {
        let mut faults = self.faults();
        faults.writes += 1;
        *faults.writes_of.entry(K::KIND).or_default() += 1;
        if let Some((kind, e)) = &faults.fail_kind
            && *kind == K::KIND
        {
            return Err(e.clone());
        }
        if faults.fail_writes.is_empty() { Ok(()) } else { Err(faults.fail_writes.remove(0)) }
    }
}

impl ClusterApi for TestApi {
    async fn get<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, ApiError> {
        self.cluster.get(namespace, name).await
    }

    async fn list<K: Object>(&self) -> Result<Vec<K>, ApiError> {
        self.cluster.list().await
    }

    async fn create<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        {
            let mut faults = self.faults();
            faults.writes += 1;
            *faults.writes_of.entry(K::KIND).or_default() += 1;
            if let Some((kind, e)) = &faults.fail_kind
                && *kind == K::KIND
            {
                return Err(e.clone());
            }
            if let Some((kind, message)) = &faults.reject_creates
                && *kind == K::KIND
            {
                let name = obj.meta().name().map(str::to_string).unwrap_or_default();
                return Err(ApiError::Invalid { kind: K::KIND, name, message: message.clone() });
            }
        }
        self.cluster.create(obj).await
    }

    async fn update<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.write_fault::<K>()?;
        self.cluster.update(obj).await
    }

    async fn update_status<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.write_fault::<K>()?;
        self.cluster.update_status(obj).await
    }

    async fn patch<K: Object>(&self, namespace: Option<&str>, name: &str, patch: &Patch) -> Result<K, ApiError> {
        self.write_fault::<K>()?;
        self.cluster.patch(namespace, name, patch).await
    }

    async fn patch_status<K: Object>(&self, namespace: Option<&str>, name: &str, patch: &Patch) -> Result<K, ApiError> {
        self.write_fault::<K>()?;
        self.cluster.patch_status(namespace, name, patch).await
    }

    async fn delete<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<(), ApiError> {
        {
            let mut faults = self.faults();
            faults.writes += 1;
            *faults.writes_of.entry(K::KIND).or_default() += 1;
        }
        self.cluster.delete::<K>(namespace, name).await
    }

    async fn evict(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        {
            let mut faults = self.faults();
            faults.evictions_in_flight += 1;
            faults.most_evictions_in_flight = faults.most_evictions_in_flight.max(faults.evictions_in_flight);
        }
        PendingOnce(false).await;
        self.faults().evictions_in_flight -= 1;
        self.cluster.evict(namespace, name).await
    }

    async fn record_event(&self, event: EventRecord) {
        self.cluster.record_event(event).await
    }
}

/// Pending on its first poll (waking itself), ready on the next.
struct PendingOnce(bool);

impl std::future::Future for PendingOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
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
    /// When set, node classes resolve with no subnets: (the SubnetsReady message).
    no_subnets: Option<String>,
    /// Errors to return from the next node class resolutions.
    fail_resolve: Vec<CloudError>,
    /// Instances running that `list` does not return yet (an eventually consistent list).
    unlisted: BTreeSet<String>,
    /// Claims' nodes will be named after the claims, known before launch (as kwok's are).
    names_nodes_after_claims: bool,
    /// Called with each claim as its launch is asked for, before anything else.
    on_create: Option<LaunchHook>,
}

/// What a test looks at when the cloud is asked to launch a claim.
type LaunchHook = Arc<dyn Fn(&NodeClaim) + Send + Sync>;

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
        offerings.push(Offering {
            zone: zone.into(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
            reservation: None,
        });
        offerings.push(Offering {
            zone: zone.into(),
            capacity_type: "spot".into(),
            price: price * 0.7,
            available: true,
            reservation: None,
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
        price_estimated: false,
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

    /// Node classes resolve with no subnets (not Ready, with this message), or normally again.
    pub fn no_subnets(&self, message: Option<&str>) {
        self.inner.lock().unwrap().no_subnets = message.map(str::to_string);
    }

    pub fn fail_next_resolve(&self, e: CloudError) {
        self.inner.lock().unwrap().fail_resolve.push(e);
    }

    pub fn fail_next(&self, e: CloudError) {
        self.inner.lock().unwrap().fail_next.push(e);
    }

    /// Says that each claim's node will be named after the claim, before it launches.
    pub fn name_nodes_after_claims(&self) {
        self.inner.lock().unwrap().names_nodes_after_claims = true;
    }

    /// Calls `hook` with each claim the cloud is asked to launch, before launching it.
    pub fn on_create(&self, hook: impl Fn(&NodeClaim) + Send + Sync + 'static) {
        self.inner.lock().unwrap().on_create = Some(Arc::new(hook));
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

    /// `list` leaves the instance out (as an eventually consistent list may); `get` finds it.
    pub fn hide_from_list(&self, provider_id: &str) {
        self.inner.lock().unwrap().unlisted.insert(provider_id.to_string());
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
        let hook = self.inner.lock().unwrap().on_create.clone();
        if let Some(hook) = hook {
            hook(claim);
        }
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

    async fn list(&self) -> Result<Vec<Arc<NodeClaim>>, CloudError> {
        let inner = self.inner.lock().unwrap();
        let listed = inner.instances.iter().filter(|(pid, _)| !inner.unlisted.contains(*pid));
        Ok(listed.map(|(_, c)| Arc::new(c.clone())).collect())
    }

    async fn instance_types(
        &self,
        _node_pool: &NodePool,
        _node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        Ok(Self::types_now(&self.inner.lock().unwrap()))
    }

    async fn resolve_node_class(&self, _: &EC2NodeClass) -> Result<NodeClassResolution, CloudError> {
        let mut inner = self.inner.lock().unwrap();
        if !inner.fail_resolve.is_empty() {
            return Err(inner.fail_resolve.remove(0));
        }
        let status = match &inner.no_subnets {
            None => ready_status(),
            Some(message) => {
                let mut status = ready_status();
                for c in &mut status.conditions {
                    if c.type_ == CONDITION_SUBNETS_READY || c.type_ == CONDITION_READY {
                        c.status = "False".into();
                        c.reason = Some("SubnetsNotFound".into());
                        c.message = Some(message.clone());
                    }
                }
                status.subnets.clear();
                status
            }
        };
        Ok(NodeClassResolution { status, recheck_after: None })
    }

    async fn is_drifted(&self, _: &NodeClaim, _: Option<&EC2NodeClass>) -> Result<Option<String>, CloudError> {
        Ok(None)
    }

    fn expected_node_name<'c>(&self, claim: &'c NodeClaim) -> Option<&'c str> {
        self.inner.lock().unwrap().names_nodes_after_claims.then(|| claim.name())
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

/// The status of a node class the fake cloud resolved: one subnet, every condition True.
pub fn ready_status() -> EC2NodeClassStatus {
    let condition = |t: &str| kerf_api::Condition {
        type_: t.to_string(),
        status: "True".into(),
        reason: Some(t.to_string()),
        message: None,
        last_transition_time: None,
        observed_generation: None,
    };
    EC2NodeClassStatus {
        subnets: vec![SubnetStatus { id: "subnet-a".into(), zone: "test-zone-a".into(), zone_id: None }],
        conditions: READY_DEPENDS_ON.iter().chain([&CONDITION_READY]).map(|t| condition(t)).collect(),
        ..Default::default()
    }
}

/// An EC2NodeClass as a user writes it (no status).
pub fn node_class(name: &str) -> EC2NodeClass {
    let mut class: EC2NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
        }
    }))
    .unwrap();
    class.status = None;
    class
}

/// An EC2NodeClass the fake cloud has resolved: Ready.
pub fn ready_node_class(name: &str) -> EC2NodeClass {
    let mut class = node_class(name);
    class.status = Some(ready_status());
    class
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

/// A DaemonSet in `default` whose pods request `cpu` and tolerate nothing.
pub fn daemonset(name: &str, cpu: &str) -> k8s_openapi::api::apps::v1::DaemonSet {
    use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    DaemonSet {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
        spec: Some(DaemonSetSpec {
            template: PodTemplateSpec { metadata: None, spec: pending_pod(name, cpu).spec },
            ..Default::default()
        }),
        status: None,
    }
}

/// Binds a pod to a node, as kube-scheduler would.
pub fn bind(api: &TestApi, pod: &str, node: &str) {
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
pub fn kubelet_joins(api: &TestApi, claim: &str, node: &str, ready: bool) -> Node {
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

/// A manager, its API and cloud on a clock moved by hand. The cloud is a [`FakeCloud`] unless
/// another is given ([`Harness::with_cloud`], e.g. a shared `SimProvider`).
pub struct Harness<P: CloudProvider + Clone = FakeCloud> {
    pub api: TestApi,
    pub cloud: P,
    pub mgr: Manager<P>,
    pub now: Timestamp,
    pub last_wake: Option<Timestamp>,
    /// Reconciler failures are expected (else a failure fails the test).
    pub tolerate_errors: bool,
    /// The failures seen: reconciler and error.
    pub errors: Vec<(crate::Reconciler, String)>,
}

impl Harness {
    pub fn new(cloud: FakeCloud) -> Self {
        Harness::with_cloud(cloud)
    }
}

impl<P: CloudProvider + Clone> Harness<P> {
    pub fn with_cloud(cloud: P) -> Self {
        Harness::with_options(cloud, Options::default())
    }

    /// A harness whose manager runs with `options` (seeded 42; a restart keeps the rest).
    pub fn with_options(cloud: P, options: Options) -> Self {
        let api = TestApi::default();
        api.set_now(t0());
        let mgr = Manager::new(cloud.clone(), Options { seed: 42, ..options });
        // The node class every pool here refers to, already resolved and Ready.
        api.put(ready_node_class("default"));
        Harness { api, cloud, mgr, now: t0(), last_wake: None, tolerate_errors: false, errors: Vec::new() }
    }

    /// Delivers pending watch events and reconciles until nothing more changes at `now`.
    pub fn settle(&mut self) -> Option<Timestamp> {
        for _ in 0..50 {
            let events = self.api.drain();
            for e in &events {
                self.mgr.observe(e);
            }
            let wake = block_on(self.mgr.reconcile(&self.api, self.now));
            let errors = self.mgr.take_errors();
            assert!(self.tolerate_errors || errors.is_empty(), "reconcilers failed: {errors:?}");
            self.errors.extend(errors.into_iter().map(|(r, e)| (r, e.to_string())));
            self.last_wake = wake;
            if !self.api.has_pending_watch() {
                return wake;
            }
        }
        panic!("controllers did not settle");
    }

    /// A controller crash and restart: a new Manager that learns everything from a full list
    /// of the cluster, as a new process's watches would deliver it.
    pub fn restart(&mut self) -> Option<Timestamp> {
        self.mgr = Manager::new(self.cloud.clone(), Options { seed: 43, ..self.mgr.options().clone() });
        self.api.drain();
        fn relist<K: Object>(api: &TestApi, mgr: &mut Manager<impl CloudProvider>) {
            for obj in api.all::<K>() {
                mgr.observe(&WatchEvent::Applied(obj.into_any()));
            }
        }
        relist::<EC2NodeClass>(&self.api, &mut self.mgr);
        relist::<NodePool>(&self.api, &mut self.mgr);
        relist::<NodeClaim>(&self.api, &mut self.mgr);
        relist::<Node>(&self.api, &mut self.mgr);
        relist::<k8s_openapi::api::apps::v1::DaemonSet>(&self.api, &mut self.mgr);
        relist::<Pod>(&self.api, &mut self.mgr);
        relist::<k8s_openapi::api::core::v1::PodTemplate>(&self.api, &mut self.mgr);
        relist::<kerf_api::ProvisioningRequest>(&self.api, &mut self.mgr);
        self.settle()
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

    /// The pending pod `pod` runs on a new node: the first NodeClaim launches, its kubelet
    /// registers it as `node`, and the pod is bound there. The claim's name.
    pub fn run_on_first_claim(&mut self, pod: &str, node: &str) -> String {
        self.settle();
        self.advance(Duration::from_secs(1));
        let claim = self.claims()[0].name().to_string();
        kubelet_joins(&self.api, &claim, node, true);
        self.settle();
        bind(&self.api, pod, node);
        self.settle();
        claim
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
