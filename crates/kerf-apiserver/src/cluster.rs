//! The cluster API in memory: typed stores per kind, uids, a global resourceVersion counter,
//! generateName, finalizers and deletionTimestamp, optimistic concurrency, admission (pod priority
//! and RuntimeClass overhead; a Service's cluster IP; a CRD's checks and status; when asked, the
//! not-ready taint on new Nodes), a Namespace's deletion with its content ([`namespaces`]),
//! PodDisruptionBudget-aware eviction, an event log, a queue of watch events the driver drains,
//! and (when serving) the history of changes HTTP watches resume from. Pods are kept whole when
//! served and in the controllers' slim form when not ([`crate::pod_form`]).
//!
//! The event log keeps every event the controllers emit (the report and the tests read it);
//! when serving, they also become core/v1 Event objects the way `kerf controller`'s recorder
//! writes them: an identical event within its window is not written again
//! ([`kerf_api::events::EventDedupe`], on the virtual clock).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::clock::{Clock, ManualClock, Timestamp};
use kerf_api::cluster::{AnyObject, ApiError, ClusterApi, EventRecord, Object, Patch, WatchEvent};
use kerf_api::disruption_budgets::{DisruptionBudgets, EvictionRefusal};
use kerf_api::events::EventDedupe;

use kerf_api::seeded::SplitMix64;
use serde_json::Value;

use crate::custom::{CRD_KIND, Registry};
use crate::history::History;
pub use crate::history::{Change, Expired, HISTORY_BYTES};
use crate::kinds::{ResourceKind, is_namespaced};
use crate::pod_form::PodForm;
use crate::stored::{DynamicObject, Stored, typed};
use crate::writes::{ChangeType, Commit, Mode, Part, Preconditions};

mod namespaces;

/// Characters Kubernetes uses for generated name suffixes (no vowels, no look-alikes).
pub use kerf_api::seeded::NAME_ALPHABET;

/// An event recorded through the cluster API, with the virtual time it was recorded at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub time: Timestamp,
    pub record: EventRecord,
}

/// A change to a dynamic object of a kind the driver asked to follow.
#[derive(Debug, Clone)]
pub enum DynamicEvent {
    Applied(Arc<DynamicObject>),
    Deleted(Arc<DynamicObject>),
}

#[derive(Default)]
struct Inner {
    /// kind -> key (`namespace/name` or `name`) -> object.
    stores: BTreeMap<&'static str, BTreeMap<String, Stored>>,
    resource_version: u64,
    uids: u64,
    rng: SplitMix64,
    events: Vec<LoggedEvent>,
    /// Typed changes for the driver, drained each round.
    watch: Vec<WatchEvent>,
    /// Dynamic kinds the driver follows, and their changes.
    dynamic_kinds: BTreeSet<&'static str>,
    dynamic_watch: Vec<DynamicEvent>,
    /// Changes HTTP watches replay; empty (and not kept) unless serving.
    history: History,
    /// Recorded events also become core/v1 Event objects (when serving).
    event_objects: bool,
    /// The events written as Event objects lately (an identical one within its window is not).
    event_dedupe: EventDedupe,
    /// The Event objects created from recorded events, oldest first (namespace, name).
    event_object_keys: VecDeque<(String, String)>,
    /// Nodes created not Ready get the not-ready taint (the TaintNodesByCondition admission
    /// plugin); on only where a node lifecycle controller takes it off again.
    taint_nodes_by_condition: bool,
    /// The pods each PodDisruptionBudget selects, for the Eviction API (finished pods count).
    disruption_budgets: DisruptionBudgets,
    /// Whole pods, or the controllers' slim form of them (see [`crate::pod_form`]).
    pod_form: PodForm,
    /// The kinds the CustomResourceDefinitions clients created serve.
    custom: Registry,
    /// A namespace's content is being deleted with it (see [`namespaces`]).
    clearing_namespace: bool,
}

/// The in-memory API server. Cheap to share by reference; all methods take `&self`.
pub struct SimCluster {
    inner: Mutex<Inner>,
    clock: ManualClock,
    /// The latest resourceVersion, for HTTP watches to wait on.
    changed: tokio::sync::watch::Sender<u64>,
}

fn key_of(namespace: Option<&str>, name: &str, namespaced: bool) -> String {
    match (namespaced, namespace) {
        (true, Some(ns)) => format!("{ns}/{name}"),
        (true, None) => format!("default/{name}"),
        (false, _) => name.to_string(),
    }
}

/// The objects of one kind's store that live in namespace `ns` (its keys are `namespace/name`).
fn in_namespace<'s>(store: &'s BTreeMap<String, Stored>, ns: &str) -> impl Iterator<Item = &'s Stored> + 's {
    let prefix = format!("{ns}/");
    store.range(prefix.clone()..).take_while(move |(k, _)| k.starts_with(&prefix)).map(|(_, o)| o)
}

/// A workload kept as JSON as the typed object the controllers read (None for other kinds, or
/// JSON that does not decode).
fn workload_view(kind: &str, d: &DynamicObject) -> Option<AnyObject> {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
    fn decode<K: Object + serde::de::DeserializeOwned>(d: &DynamicObject) -> Option<AnyObject> {
        serde_json::from_value::<K>(d.to_json()).ok().map(Object::into_any)
    }
    match kind {
        "Deployment" => decode::<Deployment>(d),
        "StatefulSet" => decode::<StatefulSet>(d),
        "ReplicaSet" => decode::<ReplicaSet>(d),
        _ => None,
    }
}

/// A typed stored object as a `K`, shared (a pod in the form `K` asks for, see
/// [`AnyObject::shared_as`]).
fn shared_typed<K: Object>(s: &Stored) -> Option<Arc<K>> {
    match s {
        Stored::Typed(a) => a.shared_as::<K>(),
        Stored::Dynamic(_) => None,
    }
}

fn typed_shared<K: Object>(s: &Stored, kind: &'static str) -> Result<Arc<K>, ApiError> {
    shared_typed(s).ok_or_else(|| ApiError::Other(format!("{kind} {}: wrong kind", s.meta().name().unwrap_or(""))))
}

/// A stored object read as a `K`: a typed one as [`shared_typed`] gives it, a workload kept as
/// JSON (a Deployment, StatefulSet or ReplicaSet) as its typed object.
pub(crate) fn read_as<K: Object>(s: &Stored) -> Option<K> {
    match s {
        Stored::Typed(_) => shared_typed(s).map(Arc::unwrap_or_clone),
        Stored::Dynamic(d) => workload_view(K::KIND, d).and_then(|a| K::from_any(&a).cloned()),
    }
}

impl Inner {
    /// Keeps the disruption budgets' counts in step with a stored object that changed from
    /// `before` to `after` (`None`: absent).
    fn index(&mut self, kind: &'static str, before: Option<&Stored>, after: Option<&Stored>) {
        match kind {
            "Pod" => self.disruption_budgets.update_pod(before.and_then(Stored::pod), after.and_then(Stored::pod)),
            "PodDisruptionBudget" => {
                let Some(meta) = after.or(before).map(Stored::meta) else { return };
                let ns = meta.namespace().unwrap_or_default().to_string();
                let key = (ns.clone(), meta.name().unwrap_or_default().to_string());
                let pods =
                    self.stores.get("Pod").into_iter().flat_map(|s| in_namespace(s, &ns)).filter_map(Stored::pod);
                self.disruption_budgets.set_budget(key, after.and_then(typed::<PodDisruptionBudget>), pods);
            }
            _ => {}
        }
    }

    /// Records a change: for the driver (typed kinds and the dynamic kinds it follows) and, when
    /// serving, in the history HTTP watches replay.
    fn emit(&mut self, kind: &'static str, type_: ChangeType, object: Stored, previous: Option<Stored>) {
        match &object {
            Stored::Typed(a) => self.watch.push(match type_ {
                ChangeType::Deleted => WatchEvent::Deleted(a.clone()),
                _ => WatchEvent::Applied(a.clone()),
            }),
            Stored::Dynamic(d) if self.dynamic_kinds.contains(kind) => self.dynamic_watch.push(match type_ {
                ChangeType::Deleted => DynamicEvent::Deleted(d.clone()),
                _ => DynamicEvent::Applied(d.clone()),
            }),
            Stored::Dynamic(_) => {}
        }
        self.history.push(Change { resource_version: self.resource_version, kind, type_, object, previous });
    }

    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// Creates `obj`; a dry run answers what would be stored (no resourceVersion, the uid it
    /// would get) and keeps nothing, not even the generated name's draw.
    fn create(&mut self, now: Timestamp, kind: &'static str, obj: Stored, commit: Commit) -> Result<Stored, ApiError> {
        let namespaced = is_namespaced(kind);
        let mut obj = if kind == "Pod" {
            self.pod_form.admit(obj, self.stores.get("PriorityClass"), self.stores.get("RuntimeClass"))?
        } else {
            obj
        };
        if kind == CRD_KIND {
            self.admit_crd(&mut obj, now)?;
        }
        if kind == "Service" {
            crate::services::admit(&mut obj, self.stores.get("Service"))?;
        }
        let meta = obj.server_fields();
        if meta.name.as_deref().unwrap_or("").is_empty() {
            let Some(prefix) = meta.generate_name.clone().filter(|p| !p.is_empty()) else {
                return Err(ApiError::Invalid {
                    kind,
                    name: String::new(),
                    message: "metadata.name or metadata.generateName is required".to_string(),
                });
            };
            // Retry on the rare suffix collision, as the API server's clients do.
            let mut rng = self.rng.clone();
            let mut name;
            loop {
                name = format!("{prefix}{}", rng.suffix(5));
                let key = key_of(meta.namespace.as_deref(), &name, namespaced);
                if !self.stores.get(kind).is_some_and(|s| s.contains_key(&key)) {
                    break;
                }
            }
            if commit == Commit::Store {
                self.rng = rng;
            }
            *meta.name = Some(name);
        }
        if namespaced && meta.namespace.is_none() {
            *meta.namespace = Some("default".to_string());
        }
        if !namespaced {
            *meta.namespace = None;
        }
        let name = meta.name.clone().unwrap_or_default();
        let key = key_of(meta.namespace.as_deref(), &name, namespaced);
        if let Some(ns) = meta.namespace.as_deref() {
            self.admit_into_namespace(kind, ns, &name)?;
        }
        if self.stores.get(kind).is_some_and(|s| s.contains_key(&key)) {
            return Err(ApiError::AlreadyExists { kind, name });
        }
        if self.taint_nodes_by_condition
            && let Stored::Typed(AnyObject::Node(n)) = &mut obj
        {
            admit_node(Arc::make_mut(n));
        }
        if let Stored::Typed(AnyObject::Namespace(n)) = &mut obj {
            crate::admission::namespace(Arc::make_mut(n));
        }
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uids + 1);
        let rv = match commit {
            Commit::Store => {
                self.uids += 1;
                Some(self.next_rv())
            }
            Commit::DryRun => None,
        };
        let meta = obj.server_fields();
        *meta.uid = Some(uid);
        *meta.resource_version = rv;
        *meta.creation_timestamp = Some(Time(now));
        *meta.deletion_timestamp = None;
        *meta.generation = Some(1);
        if commit == Commit::DryRun {
            return Ok(obj);
        }
        self.stores.entry(kind).or_default().insert(key, obj.clone());
        self.index(kind, None, Some(&obj));
        self.emit(kind, ChangeType::Added, obj.clone(), None);
        if kind == CRD_KIND {
            self.crd_changed(now, &obj, false);
        }
        Ok(obj)
    }

    /// Checks a CustomResourceDefinition and fills in its status
    /// ([`crate::custom::Registry::admit`]).
    fn admit_crd(&self, obj: &mut Stored, now: Timestamp) -> Result<(), ApiError> {
        let Stored::Dynamic(d) = obj else { return Ok(()) };
        let name = d.metadata.name.clone().unwrap_or_default();
        let mut body = d.to_json();
        if body.pointer("/metadata/creationTimestamp").is_none_or(Value::is_null) {
            body["metadata"]["creationTimestamp"] = Value::String(now.to_string());
        }
        self.custom.admit(&mut body).map_err(|message| ApiError::Invalid { kind: CRD_KIND, name, message })?;
        if let Some(status) = body.get("status") {
            Arc::make_mut(d).body.insert("status".to_string(), status.clone());
        }
        Ok(())
    }

    /// Registers (or, once deleted, unregisters) the kinds of a CustomResourceDefinition that
    /// changed; a CRD's deletion deletes every object of its kind, as the API server does.
    fn crd_changed(&mut self, now: Timestamp, crd: &Stored, deleted: bool) {
        let Stored::Dynamic(d) = crd else { return };
        if !deleted {
            self.custom.register(&d.to_json());
            return;
        }
        let Some(kind) = self.custom.unregister(d.metadata.name.as_deref().unwrap_or("")) else { return };
        let mut namespaces = BTreeSet::new();
        for (_, mut obj) in self.stores.remove(kind).unwrap_or_default() {
            let rv = self.next_rv();
            let m = obj.server_fields();
            m.deletion_timestamp.get_or_insert(Time(now));
            *m.resource_version = Some(rv);
            namespaces.extend(obj.meta().namespace().map(str::to_string));
            self.emit(kind, ChangeType::Deleted, obj, None);
        }
        for ns in namespaces {
            self.namespace_settled(&ns);
        }
    }

    /// Writes `incoming` as `mode` says; a dry run answers what would be stored, at the stored
    /// resourceVersion, and keeps nothing.
    fn write(&mut self, kind: &'static str, incoming: Stored, mode: Mode, commit: Commit) -> Result<Stored, ApiError> {
        let incoming = self.pod_form.keep(incoming)?;
        let name = incoming.meta().name().map(str::to_string).unwrap_or_default();
        let key = key_of(incoming.meta().namespace(), &name, is_namespaced(kind));
        let Some(current) = self.stores.get(kind).and_then(|s| s.get(&key)) else {
            return Err(ApiError::NotFound { kind, name });
        };
        if let Some(rv) = incoming.meta().resource_version().filter(|rv| !rv.is_empty())
            && Some(rv) != current.meta().resource_version()
        {
            return Err(ApiError::Conflict { kind, name });
        }
        let previous = current.clone();
        let mut next = if mode == Mode::Status {
            let mut n = current.clone();
            n.copy_status_from(&incoming);
            n
        } else {
            let mut n = incoming;
            if mode == Mode::Spec {
                n.copy_status_from(current);
            }
            // The generation counts spec changes (of the kinds kept as JSON; typed objects keep theirs).
            let spec_changed = match (&n, current) {
                (Stored::Dynamic(a), Stored::Dynamic(b)) => a.body.get("spec") != b.body.get("spec"),
                _ => false,
            };
            // Fields the server owns.
            let cm = current.meta();
            let (uid, created, namespace) =
                (cm.uid().map(str::to_string), cm.creation_timestamp().cloned(), cm.namespace().map(str::to_string));
            let (generation, deleted) = (cm.generation(), cm.deletion_timestamp().cloned());
            let m = n.server_fields();
            *m.uid = uid;
            *m.creation_timestamp = created;
            *m.namespace = namespace;
            *m.generation = generation.map(|g| if spec_changed { g + 1 } else { g });
            // Once set, a deletionTimestamp stays; it is never set by an update.
            *m.deletion_timestamp = deleted;
            n
        };
        let now = next.meta().creation_timestamp().map(|t| t.0).unwrap_or_default();
        if kind == CRD_KIND {
            self.admit_crd(&mut next, now)?;
        }
        if commit == Commit::DryRun {
            *next.server_fields().resource_version = previous.meta().resource_version().map(str::to_string);
            return Ok(next);
        }
        let rv = self.next_rv();
        *next.server_fields().resource_version = Some(rv);
        let done = next.meta().deletion_timestamp().is_some() && next.meta().finalizers().is_empty();
        if done {
            if let Some(s) = self.stores.get_mut(kind) {
                s.remove(&key);
            }
            self.index(kind, Some(&previous), None);
            self.emit(kind, ChangeType::Deleted, next.clone(), None);
            if let Some(ns) = next.meta().namespace().filter(|_| is_namespaced(kind)).map(str::to_string) {
                self.namespace_settled(&ns);
            }
        } else {
            self.stores.entry(kind).or_default().insert(key, next.clone());
            self.index(kind, Some(&previous), Some(&next));
            self.emit(kind, ChangeType::Modified, next.clone(), Some(previous));
        }
        if kind == CRD_KIND {
            let at = next.meta().deletion_timestamp().map(|t| t.0).unwrap_or(now);
            self.crd_changed(at, &next, done);
        }
        Ok(next)
    }

    /// [`SimCluster::eviction_refusal`], on the stores as locked.
    fn eviction_refusal(&self, namespace: &str, name: &str) -> Result<Option<ApiError>, ApiError> {
        let empty_store = BTreeMap::new();
        let pods = self.stores.get("Pod").unwrap_or(&empty_store);
        let Some(pod) = pods.get(&key_of(Some(namespace), name, true)).and_then(Stored::pod) else {
            return Err(ApiError::NotFound { kind: "Pod", name: format!("{namespace}/{name}") });
        };
        let reason = match self.disruption_budgets.eviction_refusal(pod) {
            None => return Ok(None),
            Some(EvictionRefusal::MoreThanOneBudget((_, first), (_, second))) => format!(
                "it is selected by more than one PodDisruptionBudget ({namespace}/{first} and {namespace}/{second}), which the Eviction API does not support"
            ),
            Some(EvictionRefusal::NoneAllowed((_, pdb_name), status)) => format!(
                "PodDisruptionBudget {namespace}/{pdb_name} needs {} healthy pods and has {}",
                status.desired_healthy, status.healthy
            ),
        };
        Ok(Some(ApiError::TooManyRequests { name: format!("{namespace}/{name}"), reason }))
    }

    /// Deletes (or, with finalizers, marks for deletion) an object; returns its last state. A
    /// dry run answers that state (marked, at the stored resourceVersion) and keeps nothing.
    fn delete(
        &mut self,
        now: Timestamp,
        kind: &'static str,
        namespace: Option<&str>,
        name: &str,
        pre: &Preconditions,
        commit: Commit,
    ) -> Result<Stored, ApiError> {
        let key = key_of(namespace, name, is_namespaced(kind));
        let Some(mut current) = self.stores.get(kind).and_then(|s| s.get(&key)).cloned() else {
            return Err(ApiError::NotFound { kind, name: name.to_string() });
        };
        let before = current.clone();
        let m = current.meta();
        if pre.uid.as_deref().is_some_and(|u| m.uid() != Some(u)) {
            return Err(ApiError::Conflict { kind, name: format!("{name} (precondition failed: uid)") });
        }
        if pre.resource_version.as_deref().is_some_and(|rv| m.resource_version() != Some(rv)) {
            return Err(ApiError::Conflict { kind, name: format!("{name} (precondition failed: resourceVersion)") });
        }
        if kind == namespaces::NAMESPACE
            && let Some(r) = self.delete_namespace(now, name, &current, commit)
        {
            return r;
        }
        if commit == Commit::DryRun {
            current.server_fields().deletion_timestamp.get_or_insert(Time(now));
            return Ok(current);
        }
        if !m.finalizers().is_empty() {
            if m.deletion_timestamp().is_none() {
                let rv = self.next_rv();
                let m = current.server_fields();
                *m.deletion_timestamp = Some(Time(now));
                *m.resource_version = Some(rv);
                self.stores.entry(kind).or_default().insert(key, current.clone());
                self.index(kind, Some(&before), Some(&current));
                self.emit(kind, ChangeType::Modified, current.clone(), None);
            }
            return Ok(current);
        }
        if let Some(s) = self.stores.get_mut(kind) {
            s.remove(&key);
        }
        self.index(kind, Some(&before), None);
        let rv = self.next_rv();
        let m = current.server_fields();
        m.deletion_timestamp.get_or_insert(Time(now));
        *m.resource_version = Some(rv);
        self.emit(kind, ChangeType::Deleted, current.clone(), None);
        if kind == CRD_KIND {
            self.crd_changed(now, &current, true);
        }
        if let Some(ns) = current.meta().namespace().filter(|_| is_namespaced(kind)).map(str::to_string) {
            self.namespace_settled(&ns);
        }
        Ok(current)
    }
}

impl SimCluster {
    pub fn new(clock: ManualClock, seed: u64) -> Self {
        SimCluster {
            inner: Mutex::new(Inner {
                rng: SplitMix64::new(seed),
                disruption_budgets: DisruptionBudgets::new(true),
                ..Inner::default()
            }),
            clock,
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the stores half-written in a way later
        // readers would misread, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells HTTP watches that something changed (a no-op when nobody listens).
    fn notify(&self, rv: u64) {
        if self.changed.receiver_count() > 0 {
            self.changed.send_replace(rv);
        }
    }

    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Keeps the last `capacity` changes for HTTP watches to resume from, records events as
    /// core/v1 Event objects too, and keeps pods whole (see [`crate::pod_form`]); a pod stored
    /// slim before is made whole of what it kept. The simulator leaves this off (it costs
    /// memory per write).
    pub fn enable_serving(&self, capacity: usize) {
        let mut inner = self.lock();
        let rv = inner.resource_version;
        inner.history.enable(capacity, rv);
        inner.event_objects = true;
        inner.pod_form = PodForm::Whole;
        for obj in inner.stores.get_mut("Pod").into_iter().flat_map(BTreeMap::values_mut) {
            if let Stored::Typed(a @ AnyObject::SlimPod(_)) = obj
                && let Some(whole) = a.shared_as::<Pod>()
            {
                *a = AnyObject::Pod(whole);
            }
        }
    }

    /// Keeps pods in the controllers' slim form (see [`crate::pod_form`]): for a cluster that
    /// is not served, whose readers all read that form. Pods stored before keep their form
    /// until written.
    pub fn keep_pods_slim(&self) {
        self.lock().pod_form = PodForm::Kept;
    }

    /// Keeps at most `bytes` of objects (as JSON) in the history HTTP watches replay
    /// ([`HISTORY_BYTES`] unless set): older changes go first, and a watch that needs them
    /// relists.
    pub fn limit_history_bytes(&self, bytes: usize) {
        self.lock().history.limit_bytes(bytes);
    }

    /// Turns on the TaintNodesByCondition admission plugin: a Node created without a Ready=True
    /// condition gets `node.kubernetes.io/not-ready:NoSchedule`, so kube-scheduler places no pod
    /// there before it is Ready. For clusters whose node lifecycle controller takes the taint off
    /// once the node is Ready (the simulator's); off by default, as controller tests have none.
    pub fn taint_nodes_by_condition(&self) {
        self.lock().taint_nodes_by_condition = true;
    }

    /// Delivers changes of the dynamic `kind` (e.g. `Deployment`) through [`Self::drain_dynamic`].
    pub fn follow_dynamic(&self, kind: &'static str) {
        self.lock().dynamic_kinds.insert(kind);
    }

    /// Takes every watch event produced since the last call, in order.
    pub fn drain_watch(&self) -> Vec<WatchEvent> {
        std::mem::take(&mut self.lock().watch)
    }

    /// Takes every change of a followed dynamic kind since the last call, in order.
    pub fn drain_dynamic(&self) -> Vec<DynamicEvent> {
        std::mem::take(&mut self.lock().dynamic_watch)
    }

    pub fn has_pending_watch(&self) -> bool {
        let inner = self.lock();
        !inner.watch.is_empty() || !inner.dynamic_watch.is_empty()
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Every kind served: the built-in ones, then those the CRDs clients created serve.
    pub fn served_kinds(&self) -> Vec<&'static ResourceKind> {
        let inner = self.lock();
        crate::kinds::KINDS.iter().chain(inner.custom.kinds()).collect()
    }

    /// The served kind at `group`/`version`/`plural` of a REST path.
    pub fn kind_at(&self, group: &str, version: &str, plural: &str) -> Option<&'static ResourceKind> {
        crate::kinds::by_plural(group, version, plural).or_else(|| {
            self.lock().custom.kinds().find(|k| k.group == group && k.version == version && k.plural == plural)
        })
    }

    /// Whether `kind` is served now (a CRD's kind stops being served when the CRD is deleted).
    pub fn serves(&self, kind: &ResourceKind) -> bool {
        kind.custom.is_none() || self.lock().custom.serves(kind)
    }

    /// The kinds the CRDs clients created serve, with their schemas.
    pub fn custom_kinds(&self) -> Registry {
        self.lock().custom.clone()
    }

    /// A receiver that wakes when the resourceVersion moves.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Changes after `since`, oldest first; `Expired` when some are no longer kept.
    pub fn changes_since(&self, since: u64) -> Result<Vec<Change>, Expired> {
        self.lock().history.since(since)
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

    /// One stored object of any kind.
    pub fn get_stored(&self, kind: &'static str, namespace: Option<&str>, name: &str) -> Option<Stored> {
        let key = key_of(namespace, name, is_namespaced(kind));
        self.lock().stores.get(kind).and_then(|s| s.get(&key)).cloned()
    }

    /// The objects of `kind` (in `namespace`, or all), with the resourceVersion of the list.
    pub fn list_stored(&self, kind: &'static str, namespace: Option<&str>) -> (Vec<Stored>, u64) {
        let inner = self.lock();
        let items = inner
            .stores
            .get(kind)
            .map(|s| {
                s.values().filter(|o| namespace.is_none_or(|ns| o.meta().namespace() == Some(ns))).cloned().collect()
            })
            .unwrap_or_default();
        (items, inner.resource_version)
    }

    /// At most `max` objects of `kind` (in `namespace`, or all) that `keep` accepts and whose
    /// store key (`namespace/name`, or `name`) sorts after `after`, in key order, with their keys,
    /// and the resourceVersion now: what a paged list continues from.
    pub fn list_stored_after(
        &self,
        kind: &'static str,
        namespace: Option<&str>,
        after: Option<&str>,
        max: usize,
        keep: impl Fn(&Stored) -> bool,
    ) -> (Vec<(String, Stored)>, u64) {
        use std::ops::Bound;
        let inner = self.lock();
        let lower = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_string()));
        let items = inner
            .stores
            .get(kind)
            .map(|s| {
                s.range((lower, Bound::Unbounded))
                    .filter(|(_, o)| namespace.is_none_or(|ns| o.meta().namespace() == Some(ns)) && keep(o))
                    .take(max)
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect()
            })
            .unwrap_or_default();
        (items, inner.resource_version)
    }

    pub fn create_stored(&self, kind: &'static str, obj: Stored) -> Result<Stored, ApiError> {
        self.create_stored_as(kind, obj, Commit::Store)
    }

    /// [`Self::create_stored`], or (`Commit::DryRun`) what it would store.
    pub fn create_stored_as(&self, kind: &'static str, obj: Stored, commit: Commit) -> Result<Stored, ApiError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let r = inner.create(now, kind, obj, commit);
        let rv = inner.resource_version;
        drop(inner);
        self.notify(rv);
        r
    }

    pub fn write_stored(&self, kind: &'static str, obj: Stored, mode: Mode) -> Result<Stored, ApiError> {
        self.write_stored_as(kind, obj, mode, Commit::Store)
    }

    /// [`Self::write_stored`], or (`Commit::DryRun`) what it would store.
    pub fn write_stored_as(
        &self,
        kind: &'static str,
        obj: Stored,
        mode: Mode,
        commit: Commit,
    ) -> Result<Stored, ApiError> {
        let mut inner = self.lock();
        let r = inner.write(kind, obj, mode, commit);
        let rv = inner.resource_version;
        drop(inner);
        self.notify(rv);
        r
    }

    pub fn delete_stored(
        &self,
        kind: &'static str,
        namespace: Option<&str>,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Stored, ApiError> {
        self.delete_stored_as(kind, namespace, name, pre, Commit::Store)
    }

    /// [`Self::delete_stored`], or (`Commit::DryRun`) the state it would leave.
    pub fn delete_stored_as(
        &self,
        kind: &'static str,
        namespace: Option<&str>,
        name: &str,
        pre: &Preconditions,
        commit: Commit,
    ) -> Result<Stored, ApiError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        let r = inner.delete(now, kind, namespace, name, pre, commit);
        let rv = inner.resource_version;
        drop(inner);
        self.notify(rv);
        r
    }

    /// A dynamic object (a kind the store keeps as JSON, e.g. `Deployment`).
    pub fn get_dynamic(&self, kind: &'static str, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        match self.get_stored(kind, namespace, name)? {
            Stored::Dynamic(d) => Some(d),
            Stored::Typed(_) => None,
        }
    }

    /// Creates the dynamic object, or replaces the existing one's metadata and spec (what
    /// `kubectl apply` amounts to here).
    pub fn apply_dynamic(&self, kind: &'static str, obj: DynamicObject) -> Result<Arc<DynamicObject>, ApiError> {
        let stored = match self.create_stored(kind, Stored::Dynamic(Arc::new(obj.clone()))) {
            Err(ApiError::AlreadyExists { .. }) => {
                let mut obj = obj;
                obj.metadata.resource_version = None;
                self.write_stored(kind, Stored::Dynamic(Arc::new(obj)), Mode::Spec)?
            }
            other => other?,
        };
        match stored {
            Stored::Dynamic(d) => Ok(d),
            Stored::Typed(a) => Err(ApiError::Other(format!("{kind}: stored as {}", a.kind()))),
        }
    }

    /// Writes a dynamic object (`mode` as for typed writes; a set resourceVersion must match).
    pub fn update_dynamic(&self, kind: &'static str, obj: DynamicObject, mode: Mode) -> Result<(), ApiError> {
        self.write_stored(kind, Stored::Dynamic(Arc::new(obj)), mode).map(|_| ())
    }

    /// The object of kind `K`; a workload kept as JSON (a Deployment, StatefulSet or ReplicaSet,
    /// which the controllers read but do not watch) is read as its typed object.
    pub fn get_obj<K: Object>(&self, namespace: Option<&str>, name: &str) -> Option<K> {
        let key = key_of(namespace, name, K::NAMESPACED);
        let inner = self.lock();
        read_as(inner.stores.get(K::KIND).and_then(|s| s.get(&key))?)
    }

    /// The objects of kind `K` (pods in the form `K` asks for, see [`AnyObject::shared_as`]).
    pub fn list_objs<K: Object>(&self) -> Vec<K> {
        self.lock()
            .stores
            .get(K::KIND)
            .map(|s| s.values().filter_map(shared_typed::<K>).map(Arc::unwrap_or_clone).collect())
            .unwrap_or_default()
    }

    pub fn count<K: Object>(&self) -> usize {
        self.lock().stores.get(K::KIND).map_or(0, BTreeMap::len)
    }

    /// Creates an object that existed before the simulation began, with the creation time it
    /// had (a cluster snapshot's NodeClaims keep their age).
    pub fn create_obj_created_at<K: Object>(&self, obj: K, created: Timestamp) -> Result<Arc<K>, ApiError> {
        let mut inner = self.lock();
        let r = inner.create(created, K::KIND, Stored::Typed(obj.into_any()), Commit::Store);
        let rv = inner.resource_version;
        drop(inner);
        self.notify(rv);
        typed_shared(&r?, K::KIND)
    }

    /// Creates `obj`; the answer is the stored object, shared.
    pub fn create_obj<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        let created = self.create_stored(K::KIND, Stored::Typed(obj.into_any()))?;
        typed_shared(&created, K::KIND)
    }

    /// Creates `obj`; the answer is the name it was stored under (a `generateName` filled in).
    /// For a creator that keeps only the name: the stored object is not read back in `K`'s
    /// form (a pod kept slim is not made whole for the answer).
    pub fn create_named<K: Object>(&self, obj: K) -> Result<String, ApiError> {
        let created = self.create_stored(K::KIND, Stored::Typed(obj.into_any()))?;
        Ok(created.meta().name().unwrap_or_default().to_string())
    }

    /// Writes `obj`: only its status, everything but its status, or (for the simulator's own
    /// stand-ins) both. The answer is the stored object itself, shared: a holder of it (the
    /// simulated kube-scheduler's view of bound pods) keeps no copy of its own.
    fn write<K: Object>(&self, obj: K, mode: Mode) -> Result<Arc<K>, ApiError> {
        let written = self.write_stored(K::KIND, Stored::Typed(obj.into_any()), mode)?;
        typed_shared(&written, K::KIND)
    }

    pub fn update_obj<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.write(obj, Mode::Spec)
    }

    pub fn update_status_obj<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.write(obj, Mode::Status)
    }

    /// Replaces the whole object (metadata, spec and status) — what the sim's own stand-ins use
    /// when they own every part they write (e.g. kube-scheduler binding and kubelet status), or
    /// write a new status on the object exactly as they read it: at the version read (a newer
    /// one is a conflict), it is the status write without the copy of the stored object.
    pub fn replace_obj<K: Object>(&self, obj: K) -> Result<Arc<K>, ApiError> {
        self.write(obj, Mode::All)
    }

    pub fn delete_obj<K: Object>(&self, namespace: Option<&str>, name: &str) -> Result<(), ApiError> {
        self.delete_stored(K::KIND, namespace, name, &Preconditions::default()).map(|_| ())
    }

    /// Evicts a pod unless a PodDisruptionBudget selecting it has no disruptions left. Reads
    /// the stores in place (no copies): drains evict and retry many pods per round.
    /// The check and the deletion happen under one lock: evictions that arrive together cannot
    /// both spend a budget's last disruption.
    pub fn evict_pod(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        let now = self.clock.now();
        let mut inner = self.lock();
        if let Some(refusal) = inner.eviction_refusal(namespace, name)? {
            return Err(refusal);
        }
        let r = inner.delete(now, Pod::KIND, Some(namespace), name, &Preconditions::default(), Commit::Store);
        let rv = inner.resource_version;
        drop(inner);
        self.notify(rv);
        r.map(|_| ())
    }

    /// The counts of the PodDisruptionBudget `namespace/name` (None for no such budget).
    pub fn budget_status(&self, namespace: &str, name: &str) -> Option<kerf_api::disruption_budgets::BudgetStatus> {
        self.lock().disruption_budgets.status(&(namespace.to_string(), name.to_string()))
    }

    /// Why the Eviction API would refuse to evict the pod now (a PodDisruptionBudget selecting it
    /// has no disruption left), if it would; `NotFound` when there is no such pod.
    pub fn eviction_refusal(&self, namespace: &str, name: &str) -> Result<Option<ApiError>, ApiError> {
        self.lock().eviction_refusal(namespace, name)
    }

    pub fn record(&self, event: EventRecord) {
        let time = self.clock.now();
        let mut inner = self.lock();
        if inner.event_objects && inner.event_dedupe.admit(&event, time) {
            let mut obj = event_object(&event, time, inner.events.len());
            // The object's uid, which `kubectl describe` selects events by.
            let uid = inner
                .stores
                .get(event.kind)
                .and_then(|st| st.get(&event.name))
                .and_then(|o| o.meta().uid().map(str::to_string));
            if let (Some(uid), Some(involved)) = (uid, obj.body.get_mut("involvedObject")) {
                involved["uid"] = Value::String(uid);
            }
            let key =
                (obj.metadata.namespace.clone().unwrap_or_default(), obj.metadata.name.clone().unwrap_or_default());
            // Event names are unique by construction; a failure here would only lose the copy.
            if inner.create(time, "Event", Stored::Dynamic(Arc::new(obj)), Commit::Store).is_ok() {
                inner.event_object_keys.push_back(key);
            }
            // Like the API server's event TTL, old Event objects go (the event log keeps them).
            while inner.event_object_keys.len() > MAX_EVENT_OBJECTS {
                if let Some((ns, name)) = inner.event_object_keys.pop_front() {
                    let _ = inner.delete(time, "Event", Some(&ns), &name, &Preconditions::default(), Commit::Store);
                }
            }
        }
        inner.events.push(LoggedEvent { time, record: event });
        let rv = inner.resource_version;
        drop(inner);
        self.notify(rv);
    }
}

/// How many Event objects a served cluster keeps.
const MAX_EVENT_OBJECTS: usize = 10_000;

/// A recorded event as the core/v1 Event object `kubectl describe` and `kubectl get events` read.
fn event_object(e: &EventRecord, time: Timestamp, seq: usize) -> DynamicObject {
    let namespaced = is_namespaced(e.kind);
    let (namespace, name) = match e.name.split_once('/') {
        Some((ns, n)) if namespaced => (ns.to_string(), n.to_string()),
        _ => ("default".to_string(), e.name.clone()),
    };
    let api_version = crate::kinds::by_kind(e.kind).map_or_else(|| "v1".to_string(), |k| k.api_version());
    let stamp = Value::String(time.to_string());
    let mut involved = serde_json::json!({"apiVersion": api_version, "kind": e.kind, "name": name});
    if namespaced {
        involved["namespace"] = Value::String(namespace.clone());
    }
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Event",
        "involvedObject": involved,
        "reason": e.reason,
        "message": e.message,
        "type": e.type_,
        "source": {"component": "karpenter"},
        "reportingComponent": "karpenter",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    });
    DynamicObject {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(format!("{name}.{seq:016x}")),
            namespace: Some(namespace),
            ..Default::default()
        },
        body: body.as_object().cloned().unwrap_or_default(),
    }
}

/// The TaintNodesByCondition admission plugin: a new Node carries
/// `node.kubernetes.io/not-ready:NoSchedule` until the node lifecycle controller sees it Ready.
/// A Node created Ready is left alone: that controller would take the taint off at once.
fn admit_node(node: &mut k8s_openapi::api::core::v1::Node) {
    use k8s_openapi::api::core::v1::Taint;
    if kerf_api::node::node_ready(node) {
        return;
    }
    let key = kerf_api::labels::NODE_NOT_READY_TAINT_KEY;
    let taints = node.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new);
    if !taints.iter().any(|t| t.key == key && t.effect == "NoSchedule") {
        taints.push(Taint { key: key.to_string(), effect: "NoSchedule".to_string(), ..Taint::default() });
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
        std::future::ready(self.create_obj(obj).map(Arc::unwrap_or_clone))
    }

    fn update<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        std::future::ready(self.update_obj(obj).map(Arc::unwrap_or_clone))
    }

    fn update_status<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        std::future::ready(self.update_status_obj(obj).map(Arc::unwrap_or_clone))
    }

    fn patch<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> impl Future<Output = Result<K, ApiError>> + Send {
        std::future::ready(self.patch_obj(namespace, name, patch, Part::Main))
    }

    fn patch_status<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> impl Future<Output = Result<K, ApiError>> + Send {
        std::future::ready(self.patch_obj(namespace, name, patch, Part::Status))
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
mod tests;
