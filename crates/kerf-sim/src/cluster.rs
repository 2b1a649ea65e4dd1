//! The cluster API in memory: typed stores per kind, uids, a global resourceVersion counter,
//! generateName, finalizers and deletionTimestamp, optimistic concurrency, PodDisruptionBudget-aware
//! eviction, an event log and a queue of watch events the driver drains.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kerf_cloud::{Clock, ManualClock, Timestamp};
use kerf_controller::{AnyObject, ApiError, ClusterApi, EventRecord, Object, WatchEvent};

use crate::rng::SplitMix64;

/// Characters Kubernetes uses for generated name suffixes (no vowels, no look-alikes).
pub use kerf_api::seeded::NAME_ALPHABET;

/// An event recorded through the cluster API, with the virtual time it was recorded at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub time: Timestamp,
    pub record: EventRecord,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Spec,
    Status,
    All,
}

#[derive(Default)]
struct Inner {
    /// kind -> key (`namespace/name` or `name`) -> object.
    stores: BTreeMap<&'static str, BTreeMap<String, AnyObject>>,
    resource_version: u64,
    uids: u64,
    rng: SplitMix64,
    events: Vec<LoggedEvent>,
    watch: Vec<WatchEvent>,
}

/// The in-memory API server. Cheap to share by reference; all methods take `&self`.
pub struct SimCluster {
    inner: Mutex<Inner>,
    clock: ManualClock,
}

fn key_of(namespace: Option<&str>, name: &str, namespaced: bool) -> String {
    match (namespaced, namespace) {
        (true, Some(ns)) => format!("{ns}/{name}"),
        (true, None) => format!("default/{name}"),
        (false, _) => name.to_string(),
    }
}

/// Copies `from`'s status into `into` (same kind), leaving everything else of `into`.
fn copy_status(into: &mut AnyObject, from: &AnyObject) {
    match (into, from) {
        (AnyObject::Pod(a), AnyObject::Pod(b)) => Arc::make_mut(a).status.clone_from(&b.status),
        (AnyObject::Node(a), AnyObject::Node(b)) => Arc::make_mut(a).status.clone_from(&b.status),
        (AnyObject::NodeClaim(a), AnyObject::NodeClaim(b)) => Arc::make_mut(a).status.clone_from(&b.status),
        (AnyObject::NodePool(a), AnyObject::NodePool(b)) => Arc::make_mut(a).status.clone_from(&b.status),
        (AnyObject::EC2NodeClass(a), AnyObject::EC2NodeClass(b)) => Arc::make_mut(a).status.clone_from(&b.status),
        (AnyObject::DaemonSet(a), AnyObject::DaemonSet(b)) => Arc::make_mut(a).status.clone_from(&b.status),
        (AnyObject::PodDisruptionBudget(a), AnyObject::PodDisruptionBudget(b)) => {
            Arc::make_mut(a).status.clone_from(&b.status)
        }
        (AnyObject::PersistentVolumeClaim(a), AnyObject::PersistentVolumeClaim(b)) => {
            Arc::make_mut(a).status.clone_from(&b.status)
        }
        (AnyObject::PersistentVolume(a), AnyObject::PersistentVolume(b)) => {
            Arc::make_mut(a).status.clone_from(&b.status)
        }
        (AnyObject::Namespace(a), AnyObject::Namespace(b)) => Arc::make_mut(a).status.clone_from(&b.status),
        _ => {}
    }
}

fn meta_mut(obj: &mut AnyObject) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    match obj {
        AnyObject::Pod(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::Node(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::NodeClaim(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::NodePool(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::EC2NodeClass(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::DaemonSet(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::PodDisruptionBudget(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::PersistentVolumeClaim(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::PersistentVolume(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::StorageClass(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::Namespace(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::PriorityClass(o) => &mut Arc::make_mut(o).metadata,
        AnyObject::RuntimeClass(o) => &mut Arc::make_mut(o).metadata,
    }
}

fn is_namespaced(kind: &str) -> bool {
    matches!(kind, "Pod" | "DaemonSet" | "PodDisruptionBudget" | "PersistentVolumeClaim")
}

impl SimCluster {
    pub fn new(clock: ManualClock, seed: u64) -> Self {
        SimCluster { inner: Mutex::new(Inner { rng: SplitMix64::new(seed), ..Inner::default() }), clock }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the stores half-written in a way later
        // readers would misread, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Takes every watch event produced since the last call, in order.
    pub fn drain_watch(&self) -> Vec<WatchEvent> {
        std::mem::take(&mut self.lock().watch)
    }

    pub fn has_pending_watch(&self) -> bool {
        !self.lock().watch.is_empty()
    }

    /// Every event recorded so far.
    pub fn events(&self) -> Vec<LoggedEvent> {
        self.lock().events.clone()
    }

    /// The most recent event with this reason about `kind`/`name`.
    pub fn latest_event(&self, kind: &str, name: &str, reason: &str) -> Option<LoggedEvent> {
        self.lock()
            .events
            .iter()
            .rev()
            .find(|e| e.record.kind == kind && e.record.name == name && e.record.reason == reason)
            .cloned()
    }

    /// The newest event per (`kind`, `name`) with this reason. One pass for the report.
    pub fn latest_events_by_object(&self, kind: &str, reason: &str) -> BTreeMap<String, LoggedEvent> {
        let mut out = BTreeMap::new();
        for e in self.lock().events.iter() {
            if e.record.kind == kind && e.record.reason == reason {
                out.insert(e.record.name.clone(), e.clone());
            }
        }
        out
    }

    pub fn get_obj<K: Object>(&self, namespace: Option<&str>, name: &str) -> Option<K> {
        let key = key_of(namespace, name, K::NAMESPACED);
        self.lock().stores.get(K::KIND).and_then(|s| s.get(&key)).and_then(K::from_any).cloned()
    }

    pub fn list_objs<K: Object>(&self) -> Vec<K> {
        self.lock()
            .stores
            .get(K::KIND)
            .map(|s| s.values().filter_map(K::from_any).cloned().collect())
            .unwrap_or_default()
    }

    pub fn count<K: Object>(&self) -> usize {
        self.lock().stores.get(K::KIND).map_or(0, BTreeMap::len)
    }

    pub fn create_obj<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let mut any = obj.into_any();
        let kind = any.kind();
        let meta = meta_mut(&mut any);
        if meta.name.as_deref().unwrap_or("").is_empty() {
            let Some(prefix) = meta.generate_name.clone().filter(|p| !p.is_empty()) else {
                return Err(ApiError::Invalid {
                    kind,
                    name: String::new(),
                    message: "metadata.name or metadata.generateName is required".to_string(),
                });
            };
            // Retry on the rare suffix collision, as the API server's clients do.
            let mut name;
            loop {
                name = format!("{prefix}{}", inner.rng.suffix(5));
                let key = key_of(meta.namespace.as_deref(), &name, is_namespaced(kind));
                if !inner.stores.get(kind).is_some_and(|s| s.contains_key(&key)) {
                    break;
                }
            }
            meta.name = Some(name);
        }
        if is_namespaced(kind) && meta.namespace.is_none() {
            meta.namespace = Some("default".to_string());
        }
        let name = meta.name.clone().unwrap_or_default();
        let key = key_of(meta.namespace.as_deref(), &name, is_namespaced(kind));
        if inner.stores.get(kind).is_some_and(|s| s.contains_key(&key)) {
            return Err(ApiError::AlreadyExists { kind, name });
        }
        if let AnyObject::Pod(p) = &mut any {
            let classes = inner.stores.get("PriorityClass");
            let runtimes = inner.stores.get("RuntimeClass");
            admit_pod(Arc::make_mut(p), classes, runtimes);
        }
        inner.uids += 1;
        inner.resource_version += 1;
        let meta = meta_mut(&mut any);
        meta.uid = Some(format!("00000000-0000-4000-8000-{:012x}", inner.uids));
        meta.resource_version = Some(inner.resource_version.to_string());
        meta.creation_timestamp = Some(Time(now));
        meta.deletion_timestamp = None;
        meta.generation = Some(1);
        let ret = K::from_any(&any).cloned().ok_or_else(|| ApiError::Other(format!("{kind} {name}: wrong kind")));
        inner.stores.entry(kind).or_default().insert(key, any.clone());
        inner.watch.push(WatchEvent::Applied(any));
        ret
    }

    /// Writes `obj`: only its status, everything but its status, or (for the simulator's own
    /// stand-ins) both.
    fn write<K: Object>(&self, obj: K, mode: Mode) -> Result<K, ApiError> {
        let mut inner = self.lock();
        let incoming = obj.into_any();
        let kind = incoming.kind();
        let name = incoming.meta().name.clone().unwrap_or_default();
        let key = key_of(incoming.meta().namespace.as_deref(), &name, is_namespaced(kind));
        let Some(current) = inner.stores.get(kind).and_then(|s| s.get(&key)) else {
            return Err(ApiError::NotFound { kind, name });
        };
        if let Some(rv) = incoming.meta().resource_version.as_deref()
            && Some(rv) != current.meta().resource_version.as_deref()
        {
            return Err(ApiError::Conflict { kind, name });
        }
        let mut next = if mode == Mode::Status {
            let mut n = current.clone();
            copy_status(&mut n, &incoming);
            n
        } else {
            let mut n = incoming;
            if mode == Mode::Spec {
                copy_status(&mut n, current);
            }
            // Fields the server owns.
            let cm = current.meta();
            let m = meta_mut(&mut n);
            m.uid.clone_from(&cm.uid);
            m.creation_timestamp.clone_from(&cm.creation_timestamp);
            m.deletion_timestamp.clone_from(&cm.deletion_timestamp);
            m.namespace.clone_from(&cm.namespace);
            m.generation = cm.generation;
            n
        };
        inner.resource_version += 1;
        let rv = inner.resource_version.to_string();
        meta_mut(&mut next).resource_version = Some(rv);
        let done =
            next.meta().deletion_timestamp.is_some() && next.meta().finalizers.as_ref().is_none_or(Vec::is_empty);
        let ret = K::from_any(&next).cloned().ok_or_else(|| ApiError::Other(format!("{kind} {name}: wrong kind")));
        if done {
            if let Some(s) = inner.stores.get_mut(kind) {
                s.remove(&key);
            }
            inner.watch.push(WatchEvent::Deleted(next));
        } else {
            inner.stores.entry(kind).or_default().insert(key, next.clone());
            inner.watch.push(WatchEvent::Applied(next));
        }
        ret
    }

    pub fn update_obj<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.write(obj, Mode::Spec)
    }

    pub fn update_status_obj<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.write(obj, Mode::Status)
    }

    /// Replaces the whole object (metadata, spec and status) — what the sim's own stand-ins use
    /// when they own every part they write (e.g. kube-scheduler binding and kubelet status).
    pub fn replace_obj<K: Object>(&self, obj: K) -> Result<K, ApiError> {
        self.write(obj, Mode::All)
    }

    pub fn delete_obj<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<(), ApiError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let key = key_of(namespace, name, K::NAMESPACED);
        let Some(mut current) = inner.stores.get(K::KIND).and_then(|s| s.get(&key)).cloned() else {
            return Err(ApiError::NotFound { kind: K::KIND, name: name.to_string() });
        };
        if current.meta().finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
            if current.meta().deletion_timestamp.is_none() {
                inner.resource_version += 1;
                let rv = inner.resource_version.to_string();
                let m = meta_mut(&mut current);
                m.deletion_timestamp = Some(Time(now));
                m.resource_version = Some(rv);
                inner.stores.entry(K::KIND).or_default().insert(key, current.clone());
                inner.watch.push(WatchEvent::Applied(current));
            }
            return Ok(());
        }
        if let Some(s) = inner.stores.get_mut(K::KIND) {
            s.remove(&key);
        }
        inner.resource_version += 1;
        let rv = inner.resource_version.to_string();
        let m = meta_mut(&mut current);
        m.deletion_timestamp.get_or_insert(Time(now));
        m.resource_version = Some(rv);
        inner.watch.push(WatchEvent::Deleted(current));
        Ok(())
    }

    /// Evicts a pod unless a PodDisruptionBudget selecting it has no disruptions left. Reads
    /// the stores in place (no copies): drains evict and retry many pods per round.
    pub fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        if let Some(refusal) = self.eviction_refusal(namespace, name)? {
            return Err(refusal);
        }
        self.delete_obj::<Pod>(Some(namespace), name)
    }

    fn eviction_refusal(&self, namespace: &str, name: &str) -> Result<Option<ApiError>, ApiError> {
        let inner = self.lock();
        let empty_store = BTreeMap::new();
        let pods = inner.stores.get("Pod").unwrap_or(&empty_store);
        let Some(pod) = pods.get(&key_of(Some(namespace), name, true)).and_then(Pod::from_any) else {
            return Err(ApiError::NotFound { kind: "Pod", name: format!("{namespace}/{name}") });
        };
        if !pod_is_healthy(pod) {
            return Ok(None);
        }
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let pdbs: Vec<&PodDisruptionBudget> = inner
            .stores
            .get("PodDisruptionBudget")
            .into_iter()
            .flat_map(|s| s.values())
            .filter_map(PodDisruptionBudget::from_any)
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|sel| kerf_scheduling::pod::selector_matches(Some(sel), labels))
            })
            .collect();
        let prefix = format!("{namespace}/");
        for pdb in pdbs {
            let Some(spec) = pdb.spec.as_ref() else { continue };
            let Some(sel) = spec.selector.as_ref() else { continue };
            let (mut expected, mut healthy) = (0i64, 0i64);
            for (_, obj) in pods.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)) {
                let Some(p) = Pod::from_any(obj) else { continue };
                if kerf_scheduling::pod::selector_matches(Some(sel), p.metadata.labels.as_ref().unwrap_or(&empty)) {
                    expected += 1;
                    healthy += i64::from(pod_is_healthy(p));
                }
            }
            let desired_healthy = match (&spec.min_available, &spec.max_unavailable) {
                (Some(min), _) => scaled(min, expected, true),
                (None, Some(max)) => expected - scaled(max, expected, true),
                (None, None) => expected,
            };
            if healthy - desired_healthy <= 0 {
                let pdb_name = pdb.metadata.name.clone().unwrap_or_default();
                return Ok(Some(ApiError::TooManyRequests {
                    name: format!("{namespace}/{name}"),
                    reason: format!(
                        "PodDisruptionBudget {namespace}/{pdb_name} needs {desired_healthy} healthy pods and has {healthy}"
                    ),
                }));
            }
        }
        Ok(None)
    }

    pub fn record(&self, event: EventRecord) {
        let time = self.clock.now();
        self.lock().events.push(LoggedEvent { time, record: event });
    }
}

/// The Priority and RuntimeClass admission plugins: a pod naming a priority class gets its value
/// (the built-in `system-node-critical` / `system-cluster-critical` ones, or an applied
/// PriorityClass; without a name, the global default class if one is applied), and a pod naming a
/// RuntimeClass gets that class's pod overhead.
fn admit_pod(
    pod: &mut Pod,
    classes: Option<&BTreeMap<String, AnyObject>>,
    runtimes: Option<&BTreeMap<String, AnyObject>>,
) {
    use k8s_openapi::api::node::v1::RuntimeClass;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let Some(spec) = pod.spec.as_mut() else { return };
    if spec.priority.is_none() {
        let class = |name: &str| classes.and_then(|c| c.get(name)).and_then(PriorityClass::from_any).map(|c| c.value);
        spec.priority = match spec.priority_class_name.as_deref() {
            Some("system-node-critical") => Some(2_000_001_000),
            Some("system-cluster-critical") => Some(2_000_000_000),
            Some(name) => class(name),
            None => classes.and_then(|c| {
                c.values().filter_map(PriorityClass::from_any).find(|c| c.global_default == Some(true)).map(|c| c.value)
            }),
        };
    }
    if spec.overhead.is_none()
        && let Some(name) = spec.runtime_class_name.as_deref()
        && let Some(rc) = runtimes.and_then(|r| r.get(name)).and_then(RuntimeClass::from_any)
    {
        spec.overhead = rc.overhead.as_ref().and_then(|o| o.pod_fixed.clone());
    }
}

/// A pod counts as healthy for a disruption budget when it runs with its Ready condition true.
fn pod_is_healthy(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    status.phase.as_deref() == Some("Running")
        && status.conditions.as_ref().is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// An int-or-percent scaled against `total`, rounding percentages up when `round_up`.
pub fn scaled(v: &IntOrString, total: i64, round_up: bool) -> i64 {
    match v {
        IntOrString::Int(i) => i64::from(*i),
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            let prod = pct * total;
            if round_up { (prod + 99) / 100 } else { prod / 100 }
        }
    }
}

impl ClusterApi for SimCluster {
    fn get<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, ApiError>> + Send {
        std::future::ready(Ok(self.get_obj::<K>(namespace, name)))
    }

    fn list<K: Object>(&self) -> impl Future<Output = Result<Vec<K>, ApiError>> + Send {
        std::future::ready(Ok(self.list_objs::<K>()))
    }

    fn create<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        std::future::ready(self.create_obj(obj))
    }

    fn update<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        std::future::ready(self.update_obj(obj))
    }

    fn update_status<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        std::future::ready(self.update_status_obj(obj))
    }

    fn delete<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        std::future::ready(self.delete_obj::<K>(namespace, name))
    }

    fn evict(&self, namespace: &str, name: &str) -> impl Future<Output = Result<(), ApiError>> + Send {
        std::future::ready(self.evict_pod(namespace, name))
    }

    fn record_event(&self, event: EventRecord) -> impl Future<Output = ()> + Send {
        self.record(event);
        std::future::ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str) -> Node {
        Node { metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() }, ..Default::default() }
    }

    #[test]
    fn create_assigns_uid_and_increasing_resource_versions() {
        let c = SimCluster::new(ManualClock::new(), 1);
        let a = c.create_obj(node("a")).unwrap();
        let b = c.create_obj(node("b")).unwrap();
        assert_ne!(a.metadata.uid, b.metadata.uid);
        assert_eq!(a.metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(b.metadata.resource_version.as_deref(), Some("2"));
        assert!(matches!(c.create_obj(node("a")), Err(ApiError::AlreadyExists { .. })));
    }

    #[test]
    fn update_with_stale_resource_version_conflicts() {
        let c = SimCluster::new(ManualClock::new(), 1);
        let a = c.create_obj(node("a")).unwrap();
        let mut fresh = a.clone();
        fresh.metadata.labels = Some(BTreeMap::from([("x".to_string(), "1".to_string())]));
        c.update_obj(fresh).unwrap();
        assert!(matches!(c.update_obj(a), Err(ApiError::Conflict { .. })));
    }

    #[test]
    fn delete_with_finalizer_marks_then_last_finalizer_removal_deletes() {
        let c = SimCluster::new(ManualClock::new(), 1);
        let mut n = node("a");
        n.metadata.finalizers = Some(vec!["karpenter.sh/termination".to_string()]);
        c.create_obj(n).unwrap();
        c.drain_watch();
        c.delete_obj::<Node>(None, "a").unwrap();
        let marked = c.get_obj::<Node>(None, "a").unwrap();
        assert!(marked.metadata.deletion_timestamp.is_some());
        let mut unfinalized = marked.clone();
        unfinalized.metadata.finalizers = Some(vec![]);
        c.update_obj(unfinalized).unwrap();
        assert!(c.get_obj::<Node>(None, "a").is_none());
        let kinds: Vec<bool> = c.drain_watch().iter().map(|e| matches!(e, WatchEvent::Deleted(_))).collect();
        assert_eq!(kinds, vec![false, true]);
    }

    #[test]
    fn generate_name_appends_a_deterministic_suffix() {
        let make = || {
            let c = SimCluster::new(ManualClock::new(), 7);
            let p = Pod {
                metadata: ObjectMeta { generate_name: Some("inflate-abc-".to_string()), ..Default::default() },
                ..Default::default()
            };
            c.create_obj(p).unwrap().metadata.name.unwrap()
        };
        let a = make();
        assert!(a.starts_with("inflate-abc-") && a.len() == "inflate-abc-".len() + 5, "{a}");
        assert_eq!(a, make());
    }

    #[test]
    fn eviction_blocked_by_pod_disruption_budget_with_no_disruptions_left() {
        use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
        use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
        let c = SimCluster::new(ManualClock::new(), 1);
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        for n in ["a", "b"] {
            c.create_obj(Pod {
                metadata: ObjectMeta { name: Some(n.to_string()), labels: Some(labels.clone()), ..Default::default() },
                status: Some(PodStatus {
                    phase: Some("Running".to_string()),
                    conditions: Some(vec![PodCondition {
                        type_: "Ready".to_string(),
                        status: "True".to_string(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .unwrap();
        }
        c.create_obj(PodDisruptionBudget {
            metadata: ObjectMeta { name: Some("web".to_string()), ..Default::default() },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(1)),
                selector: Some(LabelSelector { match_labels: Some(labels), ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap();
        c.evict_pod("default", "a").unwrap();
        assert!(matches!(c.evict_pod("default", "b"), Err(ApiError::TooManyRequests { .. })));
        assert!(c.get_obj::<Pod>(Some("default"), "b").is_some());
    }
}
