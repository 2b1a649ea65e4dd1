//! Faults for `kerf bench chaos`, injected around the two seams the controllers talk through:
//! [`FaultyCloud`] decorates a [`CloudProvider`] (launch errors, insufficient capacity,
//! throttling, timeouts that happen after the cloud acted, instances that never register,
//! terminate failures, stale list results) and [`FaultyApi`] decorates a [`ClusterApi`]
//! (conflicts, 5xx, timeouts after the write was applied, throttled evictions). Watch outages
//! (events held back, then a relist) and crashes are driven from here too: a crash is armed to
//! go off after a number of calls, from which point every call fails, as if the process had
//! died in the middle of its pass; the runner then builds a new controller process.
//!
//! Every decision draws from one seeded generator, so a run replays exactly from its seed.

use kerf_api::MetaView;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Node;
use kerf_api::cluster::{AnyObject, ApiError, ClusterApi, EventRecord, Object, Patch};
use kerf_api::labels;
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};
use kerf_cloud::{CloudError, CloudProvider, InterruptionNotice, NodeClassResolution, Timestamp};
use kerf_scheduling::InstanceType;

use crate::kubelet::Instance;
use crate::sim_cloud::SimCloud;
use kerf_api::seeded::SplitMix64;

/// What a call meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Goes through untouched.
    Pass,
    /// Fails without reaching the other side.
    Fail(Fault),
    /// Reaches the other side (which acts), then the answer is lost.
    Lost(Fault),
    /// The process is dead: nothing reaches the other side.
    Dead,
}

/// A fault kind, named in the bench's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    LaunchError,
    InsufficientCapacity,
    Throttled,
    Timeout,
    NeverRegisters,
    TerminateFailure,
    StaleList,
    Conflict,
    ServerError,
    WatchOutage,
    Crash,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::LaunchError => "launchError",
            Fault::InsufficientCapacity => "insufficientCapacity",
            Fault::Throttled => "throttled",
            Fault::Timeout => "timeout",
            Fault::NeverRegisters => "neverRegisters",
            Fault::TerminateFailure => "terminateFailure",
            Fault::StaleList => "staleList",
            Fault::Conflict => "conflict",
            Fault::ServerError => "serverError",
            Fault::WatchOutage => "watchOutage",
            Fault::Crash => "crash",
        }
    }
}

/// The message every call of a dead process fails with.
const DEAD: &str = "the controller process is gone (simulated crash)";

#[derive(Debug, Default)]
struct State {
    rng: SplitMix64,
    /// Probability that a call meets a fault.
    rate: f64,
    /// Off while the cluster settles at the end of a run.
    enabled: bool,
    injected: BTreeMap<Fault, u64>,
    /// Calls left before the armed crash goes off.
    crash_after: Option<u32>,
    crashed: bool,
    /// Instances whose node never registers (hidden from the kubelet stand-in).
    never_register: BTreeSet<String>,
    /// The cloud's answer to the previous `list` (what a stale answer repeats).
    last_list: Option<Vec<Arc<NodeClaim>>>,
    /// The controllers' watches deliver nothing until then.
    watch_down_until: Option<Timestamp>,
    /// Fresh answers the cloud gave to `list` (garbage collection's look at the instances).
    lists: u64,
    /// Instance (provider ID) or NodeClaim name → `lists` when a call to clean it up (terminate,
    /// get, delete) last failed.
    cleanup_failed_at: BTreeMap<String, u64>,
}

/// The fault plan shared by the decorators and the runner.
#[derive(Debug, Default)]
pub struct Faults {
    state: Mutex<State>,
}

impl Faults {
    pub fn new(seed: u64, rate: f64) -> Self {
        let state = State { rng: SplitMix64::new(seed), rate, enabled: rate > 0.0, ..State::default() };
        Faults { state: Mutex::new(state) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns injection on or off (crashes and outages included).
    pub fn set_enabled(&self, on: bool) {
        let mut s = self.lock();
        s.enabled = on && s.rate > 0.0;
        if !on {
            s.crash_after = None;
            s.watch_down_until = None;
        }
    }

    /// Arms a crash that goes off after `calls` more calls to the cloud or the API.
    pub fn arm_crash(&self, calls: u32) {
        self.lock().crash_after = Some(calls);
    }

    /// Whether the armed crash went off (the process must be replaced).
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// A new process is running: calls go through again.
    pub fn restarted(&self) {
        let mut s = self.lock();
        s.crashed = false;
        s.crash_after = None;
        *s.injected.entry(Fault::Crash).or_default() += 1;
    }

    /// The controllers' watches stop delivering until `until` (then they relist).
    pub fn watch_outage(&self, until: Timestamp) {
        let mut s = self.lock();
        if s.enabled {
            s.watch_down_until = Some(until);
            *s.injected.entry(Fault::WatchOutage).or_default() += 1;
        }
    }

    fn cleanup_failed(&self, key: &str) {
        let mut s = self.lock();
        let at = s.lists;
        s.cleanup_failed_at.insert(key.to_string(), at);
    }

    /// Whether the controllers' watches are down at `now`.
    pub fn watch_down(&self, now: Timestamp) -> bool {
        self.lock().watch_down_until.is_some_and(|t| now < t)
    }

    /// A number in `0..n` from the plan's generator (the runner's random choices).
    pub fn below(&self, n: usize) -> usize {
        self.lock().rng.below(n)
    }

    /// Faults injected so far, by kind (crashes counted as restarts).
    pub fn injected(&self) -> BTreeMap<Fault, u64> {
        self.lock().injected.clone()
    }

    pub fn total_injected(&self) -> u64 {
        self.lock().injected.iter().filter(|(f, _)| **f != Fault::Crash).map(|(_, n)| n).sum()
    }

    /// Whether an instance's node is kept from registering.
    pub fn never_registers(&self, provider_id: &str) -> bool {
        self.lock().never_register.contains(provider_id)
    }

    /// The gate a call meets: one of `choices` with the fault rate's probability.
    fn gate(&self, choices: &[(Fault, bool)]) -> Gate {
        let mut s = self.lock();
        if s.crashed {
            return Gate::Dead;
        }
        if let Some(left) = s.crash_after {
            if left == 0 {
                s.crashed = true;
                s.crash_after = None;
                return Gate::Dead;
            }
            s.crash_after = Some(left - 1);
        }
        if !s.enabled || choices.is_empty() {
            return Gate::Pass;
        }
        let roll = (s.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if roll >= s.rate {
            return Gate::Pass;
        }
        let (fault, acted) = choices[s.rng.below(choices.len())];
        *s.injected.entry(fault).or_default() += 1;
        if acted { Gate::Lost(fault) } else { Gate::Fail(fault) }
    }

    fn cloud_error(fault: Fault) -> CloudError {
        match fault {
            Fault::InsufficientCapacity => {
                CloudError::InsufficientCapacity("InsufficientInstanceCapacity (injected)".to_string())
            }
            Fault::Throttled => CloudError::Other("RequestLimitExceeded: request rate exceeded (injected)".to_string()),
            Fault::Timeout => CloudError::Other("request timed out (injected)".to_string()),
            Fault::TerminateFailure => {
                CloudError::Other("UnauthorizedOperation: cannot terminate the instance (injected)".to_string())
            }
            _ => CloudError::Other(format!("{} (injected)", fault.name())),
        }
    }

    fn api_error(fault: Fault, kind: &'static str, name: &str) -> ApiError {
        match fault {
            Fault::Conflict => ApiError::Conflict { kind, name: name.to_string() },
            Fault::Throttled => ApiError::TooManyRequests {
                name: name.to_string(),
                reason: "the API server is throttling requests (injected)".to_string(),
            },
            Fault::Timeout => ApiError::Other("the request timed out after it was sent (injected)".to_string()),
            _ => ApiError::Other("the API server answered 500 Internal Server Error (injected)".to_string()),
        }
    }
}

/// A [`CloudProvider`] that fails as a real cloud does, at the plan's rate.
pub struct FaultyCloud<P> {
    inner: Arc<P>,
    faults: Arc<Faults>,
}

/// Another handle on the same cloud (what a restarted process gets).
impl<P> Clone for FaultyCloud<P> {
    fn clone(&self) -> Self {
        FaultyCloud { inner: Arc::clone(&self.inner), faults: Arc::clone(&self.faults) }
    }
}

impl<P> FaultyCloud<P> {
    pub fn new(inner: Arc<P>, faults: Arc<Faults>) -> Self {
        FaultyCloud { inner, faults }
    }

    /// The decorated provider, fault-free (what the cloud really holds).
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

const THROTTLED: &[(Fault, bool)] = &[(Fault::Throttled, false)];

fn cloud_dead<T>() -> Result<T, CloudError> {
    Err(CloudError::Other(DEAD.to_string()))
}

/// A cloud call through its gate: made or not, its answer kept or lost.
async fn cloud_call<T>(gate: Gate, call: impl Future<Output = Result<T, CloudError>>) -> Result<T, CloudError> {
    match gate {
        Gate::Dead => cloud_dead(),
        Gate::Fail(f) => Err(Faults::cloud_error(f)),
        Gate::Pass => call.await,
        Gate::Lost(f) => {
            let _ = call.await;
            Err(Faults::cloud_error(f))
        }
    }
}

impl<P: CloudProvider> CloudProvider for FaultyCloud<P> {
    fn create(&self, claim: &NodeClaim) -> impl Future<Output = Result<NodeClaim, CloudError>> + Send {
        let gate = self.faults.gate(&[
            (Fault::LaunchError, false),
            (Fault::InsufficientCapacity, false),
            (Fault::Throttled, false),
            (Fault::Timeout, true),
            (Fault::NeverRegisters, true),
        ]);
        async move {
            match gate {
                Gate::Dead => cloud_dead(),
                Gate::Fail(f) => Err(Faults::cloud_error(f)),
                Gate::Pass => self.inner.create(claim).await,
                Gate::Lost(Fault::NeverRegisters) => {
                    let launched = self.inner.create(claim).await?;
                    if let Some(pid) = launched.provider_id() {
                        self.faults.lock().never_register.insert(pid.to_string());
                    }
                    Ok(launched)
                }
                Gate::Lost(f) => {
                    let _ = self.inner.create(claim).await;
                    Err(Faults::cloud_error(f))
                }
            }
        }
    }

    fn delete(&self, claim: &NodeClaim) -> impl Future<Output = Result<(), CloudError>> + Send {
        let gate =
            self.faults.gate(&[(Fault::TerminateFailure, false), (Fault::Throttled, false), (Fault::Timeout, true)]);
        if !matches!(gate, Gate::Pass) {
            self.faults.cleanup_failed(claim.provider_id().unwrap_or_default());
        }
        cloud_call(gate, self.inner.delete(claim))
    }

    fn get(&self, provider_id: &str) -> impl Future<Output = Result<NodeClaim, CloudError>> + Send {
        let gate = self.faults.gate(THROTTLED);
        if !matches!(gate, Gate::Pass) {
            self.faults.cleanup_failed(provider_id);
        }
        cloud_call(gate, self.inner.get(provider_id))
    }

    fn list(&self) -> impl Future<Output = Result<Vec<Arc<NodeClaim>>, CloudError>> + Send {
        let gate = self.faults.gate(&[(Fault::Throttled, false), (Fault::StaleList, true)]);
        async move {
            match gate {
                Gate::Dead => cloud_dead(),
                Gate::Fail(f) => Err(Faults::cloud_error(f)),
                Gate::Lost(_) => {
                    // An eventually consistent answer: what the cloud said last time.
                    let stale = self.faults.lock().last_list.clone();
                    match stale {
                        Some(list) => Ok(list),
                        None => self.inner.list().await,
                    }
                }
                Gate::Pass => {
                    let list = self.inner.list().await?;
                    let mut s = self.faults.lock();
                    s.last_list = Some(list.clone());
                    s.lists += 1;
                    Ok(list)
                }
            }
        }
    }

    fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> impl Future<Output = Result<Vec<Arc<InstanceType>>, CloudError>> + Send {
        let gate = self.faults.gate(THROTTLED);
        cloud_call(gate, self.inner.instance_types(node_pool, node_class))
    }

    fn resolve_node_class(
        &self,
        node_class: &EC2NodeClass,
    ) -> impl Future<Output = Result<NodeClassResolution, CloudError>> + Send {
        let gate = self.faults.gate(THROTTLED);
        cloud_call(gate, self.inner.resolve_node_class(node_class))
    }

    fn is_drifted(
        &self,
        claim: &NodeClaim,
        node_class: Option<&EC2NodeClass>,
    ) -> impl Future<Output = Result<Option<String>, CloudError>> + Send {
        let gate = self.faults.gate(THROTTLED);
        cloud_call(gate, self.inner.is_drifted(claim, node_class))
    }

    fn interruptions(&self) -> impl Future<Output = Result<Vec<InterruptionNotice>, CloudError>> + Send {
        // A failed receive leaves the messages in the queue.
        let gate = self.faults.gate(THROTTLED);
        cloud_call(gate, self.inner.interruptions())
    }

    fn reboot(&self, claim: &NodeClaim) -> impl Future<Output = Result<(), CloudError>> + Send {
        let gate = self.faults.gate(THROTTLED);
        cloud_call(gate, self.inner.reboot(claim))
    }

    fn expected_node_name<'c>(&self, claim: &'c NodeClaim) -> Option<&'c str> {
        self.inner.expected_node_name(claim)
    }

    fn set_node_overlays(&self, overlays: std::sync::Arc<kerf_api::overlay::NodeOverlays>) {
        self.inner.set_node_overlays(overlays);
    }

    fn set_reserved_capacity(&self, enabled: bool) {
        self.inner.set_reserved_capacity(enabled);
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// The simulator's own view of the cloud goes around the faults; only instances whose node
/// never registers are hidden from the kubelet stand-in.
impl<P: SimCloud> SimCloud for FaultyCloud<P> {
    fn sim_instances(&self) -> Vec<Instance> {
        let mut all = self.inner.sim_instances();
        let s = self.faults.lock();
        if !s.never_register.is_empty() {
            all.retain(|i| !s.never_register.contains(&i.provider_id));
        }
        all
    }

    fn sim_interrupt(&self, provider_id: &str) -> Result<(), String> {
        self.inner.sim_interrupt(provider_id)
    }

    fn sim_register_node_class(&self, node_class: &EC2NodeClass) {
        self.inner.sim_register_node_class(node_class);
    }

    fn sim_record_node_class_status(&self, node_class: &EC2NodeClass) {
        self.inner.sim_record_node_class_status(node_class);
    }

    fn sim_fleet_price(&self) -> f64 {
        self.inner.sim_fleet_price()
    }

    fn sim_spot_market(&self, market: kerf_cloud::sim::SpotMarket) -> Result<(), String> {
        self.inner.sim_spot_market(market)
    }
}

/// A controller write the invariants look at, as it reached the API server.
#[derive(Debug, Clone)]
pub enum Write {
    /// A Node got the `karpenter.sh/disrupted` taint.
    Tainted { node: String },
    /// A pod was deleted outright (not evicted).
    PodDeleted { namespace: String, name: String },
    /// A Node's finalizer was removed (the Node goes away with whatever is still bound to it).
    NodeReleased { node: String },
}

/// A [`ClusterApi`] that fails as an API server under load does, at the plan's rate, and tells
/// the invariant checks what the controllers wrote before it is applied.
pub struct FaultyApi<'a, C> {
    inner: &'a C,
    faults: &'a Faults,
    /// Sees each write that is about to reach the API server.
    watcher: &'a (dyn Fn(&Write) + Sync),
}

impl<'a, C> FaultyApi<'a, C> {
    pub fn new(inner: &'a C, faults: &'a Faults, watcher: &'a (dyn Fn(&Write) + Sync)) -> Self {
        FaultyApi { inner, faults, watcher }
    }
}

const READ: &[(Fault, bool)] = &[(Fault::ServerError, false)];
const WRITE: &[(Fault, bool)] = &[(Fault::Conflict, false), (Fault::ServerError, false), (Fault::Timeout, true)];

fn api_dead<T>() -> Result<T, ApiError> {
    Err(ApiError::Other(DEAD.to_string()))
}

/// An API call through its gate: made or not, its answer kept or lost.
async fn api_call<T>(
    gate: Gate,
    kind: &'static str,
    name: &str,
    call: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    match gate {
        Gate::Dead => api_dead(),
        Gate::Fail(f) => Err(Faults::api_error(f, kind, name)),
        Gate::Pass => call.await,
        Gate::Lost(f) => {
            let _ = call.await;
            Err(Faults::api_error(f, kind, name))
        }
    }
}

fn name_of<K: Object>(obj: &K) -> String {
    obj.meta().name().map(str::to_string).unwrap_or_default()
}

/// The write `obj` is, for the invariants (only Nodes' taints and finalizers matter).
fn node_write<K: Object, C: ClusterApi>(inner: &C, obj: &K) -> impl Future<Output = Option<Write>> {
    let node = K::from_any(&obj.clone().into_any()).is_some().then(|| obj.clone().into_any());
    async move {
        let AnyObject::Node(new) = node? else { return None };
        let name = new.metadata.name.clone().unwrap_or_default();
        let old = inner.get::<Node>(None, &name).await.ok()??;
        node_change(&old, &new)
    }
}

/// What a Node's change from `old` to `new` is, for the invariants: the disrupted taint put on,
/// or the termination finalizer taken off a deleted node.
fn node_change(old: &Node, new: &Node) -> Option<Write> {
    let name = new.metadata.name.clone().unwrap_or_default();
    let tainted =
        |n: &Node| n.spec.iter().flat_map(|s| s.taints.iter().flatten()).any(|t| t.key == labels::DISRUPTED_TAINT_KEY);
    if tainted(new) && !tainted(old) {
        return Some(Write::Tainted { node: name });
    }
    let finalized = |n: &Node| n.metadata.finalizers.iter().flatten().any(|f| f == labels::TERMINATION_FINALIZER);
    (old.metadata.deletion_timestamp.is_some() && finalized(old) && !finalized(new))
        .then_some(Write::NodeReleased { node: name })
}

impl<C: ClusterApi> ClusterApi for FaultyApi<'_, C> {
    fn get<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, ApiError>> + Send {
        let gate = self.faults.gate(READ);
        api_call(gate, K::KIND, name, self.inner.get(namespace, name))
    }

    fn list<K: Object>(&self) -> impl Future<Output = Result<Vec<K>, ApiError>> + Send {
        let gate = self.faults.gate(READ);
        api_call(gate, K::KIND, "", self.inner.list())
    }

    fn create<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        let gate = self.faults.gate(&[(Fault::ServerError, false), (Fault::Timeout, true)]);
        async move {
            let name = name_of(&obj);
            api_call(gate, K::KIND, &name, self.inner.create(obj)).await
        }
    }

    fn update<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        let gate = self.faults.gate(WRITE);
        async move {
            let name = name_of(&obj);
            let write = async {
                let seen = node_write(self.inner, &obj).await;
                let r = self.inner.update(obj).await;
                if r.is_ok()
                    && let Some(w) = seen
                {
                    (self.watcher)(&w);
                }
                r
            };
            api_call(gate, K::KIND, &name, write).await
        }
    }

    fn update_status<K: Object>(&self, obj: K) -> impl Future<Output = Result<K, ApiError>> + Send {
        let gate = self.faults.gate(WRITE);
        async move {
            let name = name_of(&obj);
            api_call(gate, K::KIND, &name, self.inner.update_status(obj)).await
        }
    }

    fn patch<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> impl Future<Output = Result<K, ApiError>> + Send {
        let gate = self.faults.gate(WRITE);
        async move {
            let write = async {
                let old =
                    if K::KIND == "Node" { self.inner.get::<Node>(None, name).await.ok().flatten() } else { None };
                let r = self.inner.patch::<K>(namespace, name, patch).await;
                if let (Ok(new), Some(old)) = (&r, &old)
                    && let AnyObject::Node(new) = new.clone().into_any()
                    && let Some(w) = node_change(old, &new)
                {
                    (self.watcher)(&w);
                }
                r
            };
            api_call(gate, K::KIND, name, write).await
        }
    }

    fn patch_status<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
    ) -> impl Future<Output = Result<K, ApiError>> + Send {
        let gate = self.faults.gate(WRITE);
        api_call(gate, K::KIND, name, self.inner.patch_status(namespace, name, patch))
    }

    fn delete<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        let gate = self.faults.gate(&[(Fault::ServerError, false), (Fault::Timeout, true)]);
        if K::KIND == "NodeClaim" && !matches!(gate, Gate::Pass) {
            self.faults.cleanup_failed(name);
        }
        async move {
            let delete = async {
                if K::KIND == "Pod" {
                    (self.watcher)(&Write::PodDeleted {
                        namespace: namespace.unwrap_or("default").to_string(),
                        name: name.to_string(),
                    });
                }
                self.inner.delete::<K>(namespace, name).await
            };
            api_call(gate, K::KIND, name, delete).await
        }
    }

    fn evict(&self, namespace: &str, name: &str) -> impl Future<Output = Result<(), ApiError>> + Send {
        let gate = self.faults.gate(&[(Fault::Throttled, false), (Fault::ServerError, false)]);
        async move { api_call(gate, "Pod", &format!("{namespace}/{name}"), self.inner.evict(namespace, name)).await }
    }

    fn record_event(&self, event: EventRecord) -> impl Future<Output = ()> + Send {
        let dead = self.faults.crashed();
        async move {
            if !dead {
                self.inner.record_event(event).await;
            }
        }
    }
}

/// Garbage collection periods are the fresh answers the cloud gave to `list`; one counts as
/// clean for a key (an instance's provider ID or a NodeClaim's name) unless a call cleaning it
/// up failed after it.
impl super::invariants::CleanupPeriods for Faults {
    fn lists(&self) -> u64 {
        self.lock().lists
    }

    fn clean_periods_since(&self, key: &str, lists: u64) -> u64 {
        let s = self.lock();
        let from = s.cleanup_failed_at.get(key).copied().unwrap_or(0).max(lists);
        s.lists.saturating_sub(from)
    }
}
