//! A stand-in for kube-scheduler. It binds pending pods to existing nodes with the scheduling
//! layer's one node-fit check (`kerf_scheduling::fit::check`, through [`ClusterView`], which
//! keeps the counts its filters read) and picks among the nodes a pod fits as the default
//! profile scores them (`kerf_scheduling::kube_choice`, which consolidation replays too). Pods
//! it cannot place get `PodScheduled=False` with reason `Unschedulable` and a message in
//! kube-scheduler's words ("0/N nodes are available: ...").
//!
//! Node readiness is not looked at, as kube-scheduler does not: a Node that is not Ready carries
//! the not-ready taint ([`crate::node_lifecycle`]), so its taint filter places only pods that
//! tolerate it there; a pod bound to such a node starts once the node is Ready
//! ([`crate::kubelet`]).
//!
//! The view is brought up to date when the cluster changed (a node added, changed or gone, a
//! pod freed or bound by someone else) before the next pass: only the nodes the changes
//! touched are edited, to what a view built afresh from the cluster holds (their fields, and
//! their pods in the cluster's order); a change of namespaces builds it again.
//!
//! Nominations (Kubernetes 1.35, KEP-5278 with KEP-1923): a pending pod whose
//! `status.nominatedNodeName` names a node is tried there first and bound there when the node
//! passes every filter; until it is bound, it holds its room on that node against pods of no
//! higher priority, as kube-scheduler adds nominated pods to a node before filtering it. A
//! scenario's `settings.kubeScheduler.nominatedNodeName: false` models older clusters, where
//! an autoscaler's nomination is not looked at.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_api::SlimPod;
use kerf_api::slim_pod::{ConditionStatus, KeptCondition};
use kerf_api::{ResourceList, Taint};
use kerf_cloud::Timestamp;
use kerf_scheduling::pod::nominated_node;
use kerf_scheduling::{ClusterView, ExistingNode, NodeLabels, PreparedPod, pod_requests};

use crate::pod_writes::{set_running, write_pod};
use crate::world::World;
use kerf_apiserver::SimCluster;
use kerf_scheduling::node::node_ready;

mod sync;

#[derive(Debug, Default)]
pub struct KubeScheduler {
    /// Pods to try, in queue order: (-priority, creation order, key).
    active: BTreeSet<(i32, u64, String)>,
    /// Pods that did not fit, waiting for a cluster change.
    parked: BTreeMap<String, (i32, u64)>,
    /// Pods whose binding was refused, waiting out their backoff: their queue entry and when
    /// they are tried again.
    backoff: BTreeMap<String, (i32, u64, Timestamp)>,
    /// How many bindings of each pod failed since it was last bound (its backoff doubles).
    bind_failures: BTreeMap<String, u32>,
    /// The latest reason each pending pod could not be placed.
    messages: BTreeMap<String, String>,
    view: Option<View>,
    /// The view must be brought up to date before the next pass (the cluster changed).
    stale: bool,
    /// Nodes whose object or bound pods changed since the view was last brought up to date.
    touched: BTreeSet<String>,
    /// Pods this stand-in bound whose watch events have not come back yet, as the view holds
    /// them.
    just_bound: BTreeMap<String, Arc<SlimPod>>,
    next_start: usize,
    /// DaemonSet pods: the one node each may run on.
    pinned: BTreeMap<String, String>,
    /// Pods' `status.nominatedNodeName` is not looked at (clusters before Kubernetes 1.35).
    ignore_nominations: bool,
}

#[derive(Debug)]
struct View {
    view: ClusterView,
    index: BTreeMap<String, usize>,
    names: Vec<String>,
    /// Allocatable and requested (cpu cores, memory bytes) per node, for scoring without
    /// resource-list lookups.
    allocatable: Vec<[f64; 2]>,
    requested: Vec<[f64; 2]>,
    /// Bumped each time a pod is added to or removed from the node (filter results for it may
    /// change).
    version: Vec<u32>,
}

impl View {
    /// Records `pod` on node `idx` (bound, or holding its room as a nominated pod).
    fn add(&mut self, idx: usize, pod: Arc<SlimPod>) {
        let req = cpu_memory(&pod_requests(&pod));
        self.requested[idx][0] += req[0];
        self.requested[idx][1] += req[1];
        self.version[idx] += 1;
        self.view.add_pod(idx, pod);
    }

    /// Takes a nominated pod's room off node `idx` again.
    fn remove(&mut self, idx: usize, pod: &Arc<SlimPod>) {
        if self.view.remove_pod(idx, pod) {
            let req = cpu_memory(&pod_requests(pod));
            self.requested[idx][0] -= req[0];
            self.requested[idx][1] -= req[1];
            self.version[idx] += 1;
        }
    }
}

/// Per node: the node's version when the filters last ran and what they said.
type Memo = Vec<Option<(u32, Result<(), Arc<str>>)>>;

fn cpu_memory(list: &ResourceList) -> [f64; 2] {
    [list.get("cpu").as_f64(), list.get("memory").as_f64()]
}

fn priority(pod: &SlimPod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn has_inter_pod_constraints(pod: &SlimPod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    spec.topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty())
        || spec.affinity.as_ref().is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
}

/// The node as kube-scheduler's filters see it (its labels read from the very object).
pub fn existing_node(node: &Arc<Node>, pods: Vec<Arc<SlimPod>>) -> ExistingNode {
    let labels = NodeLabels::of_node(Arc::clone(node));
    let taints: Vec<Taint> =
        node.spec.as_ref().and_then(|s| s.taints.as_ref()).into_iter().flatten().filter_map(Taint::from_core).collect();
    let mut allocatable = ResourceList::new();
    for (k, q) in node.status.as_ref().and_then(|s| s.allocatable.as_ref()).into_iter().flatten() {
        if let Ok(q) = kerf_api::Quantity::parse(&q.0) {
            allocatable.set(k.clone(), q);
        }
    }
    ExistingNode {
        name: node.metadata.name.clone().unwrap_or_default(),
        node_pool: labels.get(kerf_api::labels::NODE_POOL).cloned(),
        labels,
        taints,
        allocatable: Arc::new(allocatable),
        pods,
        in_flight: false,
        schedulable: !node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
        pool_usage: Default::default(),
    }
}

/// kube-scheduler never looks for fewer feasible nodes than this.
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;

/// How many feasible nodes kube-scheduler looks for before it stops filtering and scores: its
/// adaptive default `percentageOfNodesToScore` (50% less 1% per 125 nodes, at least 5%).
fn feasible_to_find(nodes: usize) -> usize {
    if nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return nodes;
    }
    let percentage = 50usize.saturating_sub(nodes / 125).max(5);
    (nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

impl KubeScheduler {
    /// Whether pods' `status.nominatedNodeName` is honoured (default: yes, Kubernetes >= 1.35).
    pub fn set_honour_nominations(&mut self, on: bool) {
        self.ignore_nominations = !on;
    }

    /// A pod without a node: queue it unless it already waits. A waiting pod that carries a
    /// nomination is queued again: a new nominated node is worth trying at once.
    pub fn enqueue(&mut self, key: &str, pod: &SlimPod, seq: u64) {
        // A new version of a pod whose binding failed is worth trying at once (the failure
        // was most likely that version's write).
        self.backoff.remove(key);
        if self.parked.contains_key(key) {
            if self.ignore_nominations || nominated_node(pod).is_none() {
                return;
            }
            self.parked.remove(key);
        }
        self.active.insert((-priority(pod), seq, key.to_string()));
    }

    pub fn pin(&mut self, key: String, node: String) {
        self.pinned.insert(key, node);
    }

    /// A pod left (deleted or bound elsewhere).
    pub fn forget(&mut self, key: &str, pod: Option<&SlimPod>, seq: u64) {
        if let Some(p) = pod {
            self.active.remove(&(-priority(p), seq, key.to_string()));
        } else {
            self.active.retain(|(_, _, k)| k != key);
        }
        self.parked.remove(key);
        self.backoff.remove(key);
        self.bind_failures.remove(key);
        self.messages.remove(key);
        self.pinned.remove(key);
    }

    /// Whether this stand-in bound `key` itself (the view already has it).
    pub fn take_own_binding(&mut self, key: &str) -> bool {
        self.just_bound.remove(key).is_some()
    }

    /// The view's copy of a pod this stand-in bound, when `pod` is that version of it: its watch
    /// event then shares the view's copy instead of making one more.
    pub fn own_binding(&self, pod: &Pod) -> Option<Arc<SlimPod>> {
        let bound = self.just_bound.get(&kerf_scheduling::pod::key(pod))?;
        let rv = &pod.metadata.resource_version;
        (rv.is_some() && bound.metadata.resource_version == *rv).then(|| Arc::clone(bound))
    }

    /// The cluster changed so parked pods may fit now (kube-scheduler's queue moves on
    /// node add/update and pod delete).
    pub fn cluster_changed(&mut self) {
        self.stale = true;
        self.unpark_all();
    }

    /// The node set or a bound pod changed: bring the view up to date before the next pass.
    pub fn invalidate(&mut self) {
        self.stale = true;
    }

    /// Namespaces (or their labels) changed: build the view again before the next pass.
    pub fn rebuild(&mut self) {
        self.view = None;
        self.touched.clear();
    }

    /// These nodes, or the pods bound to them, changed (see `touched`).
    pub fn touch<'a>(&mut self, nodes: impl IntoIterator<Item = &'a String>) {
        if self.view.is_some() {
            self.touched.extend(nodes.into_iter().cloned());
        }
    }

    fn unpark_all(&mut self) {
        for (k, (p, s)) in std::mem::take(&mut self.parked) {
            self.active.insert((p, s, k));
        }
    }

    pub fn has_work(&self) -> bool {
        !self.active.is_empty()
    }

    /// When the first pod whose binding failed is due to be tried again.
    pub fn next_retry(&self) -> Option<Timestamp> {
        self.backoff.values().map(|(_, _, at)| *at).min()
    }

    /// Queues the pods whose backoff has run out by `now`.
    fn release_backoff(&mut self, now: Timestamp) {
        let due: Vec<String> =
            self.backoff.iter().filter(|(_, (_, _, at))| *at <= now).map(|(k, _)| k.clone()).collect();
        for k in due {
            if let Some((p, s, _)) = self.backoff.remove(&k) {
                self.active.insert((p, s, k));
            }
        }
    }

    /// The latest reason kube-scheduler gave for `key` not being placed.
    pub fn message(&self, key: &str) -> Option<&str> {
        self.messages.get(key).map(String::as_str)
    }

    fn build_view(&mut self, world: &World) -> View {
        let mut nodes = Vec::with_capacity(world.nodes.len());
        let mut index = BTreeMap::new();
        let mut names = Vec::with_capacity(world.nodes.len());
        for (name, node) in &world.nodes {
            index.insert(name.clone(), nodes.len());
            names.push(name.clone());
            nodes.push(existing_node(node, sync::bound_pods(world, name)));
        }
        let view =
            ClusterView::new(nodes).with_namespace_labels(world.namespace_labels()).with_ebs_claims(world.ebs_claims());
        // The view keeps each node's cpu and memory, allocatable and requested, as these count them.
        let (allocatable, requested) = (0..view.nodes().len()).map(|i| view.cpu_memory(i)).unzip();
        let version = vec![0; names.len()];
        View { view, index, names, allocatable, requested, version }
    }

    /// Tries every queued pod once, in queue order. Returns how many were bound.
    pub fn run(&mut self, world: &World, cluster: &SimCluster, now: Timestamp) -> usize {
        self.release_backoff(now);
        if self.active.is_empty() {
            return 0;
        }
        let mut view = match self.view.take() {
            Some(mut v) if self.stale => {
                v.sync(world, std::mem::take(&mut self.touched));
                v
            }
            Some(v) => v,
            None => {
                self.touched.clear();
                self.build_view(world)
            }
        };
        self.stale = false;
        let queue = std::mem::take(&mut self.active);
        let mut bound = 0;
        // Pods of one owner share a spec: once one fails in this pass, the rest wait too.
        let mut failed_owners: BTreeMap<String, String> = BTreeMap::new();
        let mut parked_inter_pod = Vec::new();
        // The filters' pre-computed state depends on other pods only through spread, pod
        // affinity and existing pods' anti-affinity: pods of one owner without the first two
        // share it until a pod with required anti-affinity is bound.
        let mut shared: BTreeMap<String, (PreparedPod<'_>, u64)> = BTreeMap::new();
        let mut anti_epoch: u64 = 0;
        // For those pods the filters' verdict on a node changes only when that node gets a pod:
        // remember verdicts per owner and node version (a pure function's results, reused).
        let mut memos: BTreeMap<String, (u64, Memo)> = BTreeMap::new();
        // Pending pods nominated to a node hold their room there against pods of no higher
        // priority: the queue runs by falling priority, so each nominee's room is taken before
        // the first pod of its priority is tried.
        let mut nominees: Vec<(i32, &str, usize)> = if self.ignore_nominations {
            Vec::new()
        } else {
            world
                .pods
                .iter()
                .filter(|(_, e)| e.node().is_none())
                .filter_map(|(k, e)| {
                    let idx = *view.index.get(nominated_node(&e.pod)?)?;
                    Some((priority(&e.pod), k.as_str(), idx))
                })
                .collect()
        };
        nominees.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        let mut next_nominee = 0;
        let mut holding: BTreeMap<&str, (usize, Arc<SlimPod>)> = BTreeMap::new();
        for (prio, seq, key) in queue {
            while let Some(&(p, k, idx)) = nominees.get(next_nominee)
                && p >= -prio
            {
                next_nominee += 1;
                let Some(e) = world.pods.get(k) else { continue };
                if kerf_scheduling::pod::has_required_anti_affinity(&e.pod) {
                    anti_epoch += 1;
                }
                view.add(idx, e.pod.clone());
                holding.insert(k, (idx, e.pod.clone()));
            }
            let Some(entry) = world.pods.get(&key) else { continue };
            if entry.node().is_some() {
                continue;
            }
            // The pod's own room is free for itself.
            if let Some((idx, p)) = holding.remove(key.as_str()) {
                if kerf_scheduling::pod::has_required_anti_affinity(&p) {
                    anti_epoch += 1;
                }
                view.remove(idx, &p);
            }
            let pod: &SlimPod = &entry.pod;
            // VolumeBinding's pre-filter: a missing claim, or an unbound one of a missing
            // StorageClass, keeps the pod off every node.
            if let Some(why) = world.volume_binding_refusal(pod) {
                let msg = format!("0/{} nodes are available: {why}.", view.names.len());
                self.park(cluster, &key, pod, prio, seq, msg, now);
                continue;
            }
            let nominated = if self.ignore_nominations {
                None
            } else {
                nominated_node(pod).and_then(|n| view.index.get(n).copied())
            };
            let owner = pod
                .metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.iter().find(|r| r.controller == Some(true)))
                .map(|r| format!("{}/{}", r.kind, r.name));
            let pinned = self.pinned.get(&key).cloned();
            if pinned.is_none()
                && nominated.is_none()
                && let Some(o) = &owner
                && let Some(msg) = failed_owners.get(o)
            {
                let msg = msg.clone();
                // Like the pod that failed, retried when this pass binds a pod it may need.
                if has_inter_pod_constraints(pod) {
                    parked_inter_pod.push(key.clone());
                }
                self.park(cluster, &key, pod, prio, seq, msg, now);
                continue;
            }
            let reusable = pinned.is_none() && !kerf_scheduling::pod::has_required_inter_pod_constraints(pod);
            let cached = match (&owner, reusable) {
                (Some(o), true) => shared.get(o).filter(|(_, e)| *e == anti_epoch).map(|(p, _)| p.clone()),
                _ => None,
            };
            let prepared = cached.unwrap_or_else(|| view.view.prepare(pod));
            if reusable && let Some(o) = &owner {
                shared.insert(o.clone(), (prepared.clone(), anti_epoch));
            }
            let memo = match (&owner, reusable) {
                (Some(o), true) => {
                    let m = memos.entry(o.clone()).or_insert_with(|| (anti_epoch, vec![None; view.names.len()]));
                    if m.0 != anti_epoch {
                        *m = (anti_epoch, vec![None; view.names.len()]);
                    }
                    Some(&mut m.1)
                }
                _ => None,
            };
            let first = nominated.filter(|idx| view.view.check_prepared(&prepared, *idx).is_ok());
            let placed = match first {
                Some(idx) => Ok(idx),
                None => self.place(&view, pod, &prepared, pinned.as_deref(), memo),
            };
            match placed {
                Ok(idx) => match bind(cluster, pod, &view.names[idx], world, now) {
                    Some(Ok(b)) => {
                        if kerf_scheduling::pod::has_required_anti_affinity(pod) {
                            anti_epoch += 1;
                        }
                        view.add(idx, Arc::clone(&b));
                        self.just_bound.insert(key.clone(), b);
                        self.messages.remove(&key);
                        self.bind_failures.remove(&key);
                        bound += 1;
                    }
                    // Refused: tried again after a backoff (sooner if the pod changes), as
                    // kube-scheduler requeues a pod whose binding failed. Dropped here, it would
                    // wait with no verdict for an event that may never come.
                    Some(Err(e)) => {
                        tracing::debug!(pod = %key, node = %view.names[idx], error = %e, "bind failed; will retry");
                        let failures = self.bind_failures.entry(key.clone()).or_default();
                        *failures += 1;
                        let at = crate::driver::after(now, bind_backoff(*failures));
                        self.backoff.insert(key.clone(), (prio, seq, at));
                    }
                    // The pod is gone; its deletion's watch event forgets it.
                    None => {}
                },
                Err(msg) => {
                    if pinned.is_none()
                        && nominated.is_none()
                        && let Some(o) = owner
                    {
                        failed_owners.insert(o, msg.clone());
                    }
                    if has_inter_pod_constraints(pod) {
                        parked_inter_pod.push(key.clone());
                    }
                    self.park(cluster, &key, pod, prio, seq, msg, now);
                }
            }
        }
        // The view keeps bound pods only.
        for (idx, p) in holding.into_values() {
            view.remove(idx, &p);
        }
        // A bound pod can satisfy another pod's affinity or even out a spread: retry those.
        if bound > 0 {
            for k in parked_inter_pod {
                if let Some((p, s)) = self.parked.remove(&k) {
                    self.active.insert((p, s, k));
                }
            }
        }
        self.view = Some(view);
        bound
    }

    #[allow(clippy::too_many_arguments)]
    fn park(
        &mut self,
        cluster: &SimCluster,
        key: &str,
        pod: &SlimPod,
        prio: i32,
        seq: u64,
        msg: String,
        now: Timestamp,
    ) {
        self.parked.insert(key.to_string(), (prio, seq));
        let already = pod
            .condition(kerf_api::slim_pod::KeptCondition::PodScheduled)
            .is_some_and(|c| c.status == kerf_api::slim_pod::ConditionStatus::False);
        self.messages.insert(key.to_string(), msg.clone());
        if already {
            // The condition is what the autoscaler watches; rewriting only its message for every
            // retry would flood the watch with no new information.
            return;
        }
        // The stored pod as the world read it with a new status: written whole (a newer
        // version is a conflict either way), without the status write's copy of the stored pod.
        let written = write_pod(cluster, pod, |p| {
            p.set_phase("Pending");
            p.set_condition(KeptCondition::PodScheduled, ConditionStatus::False, Some("Unschedulable"), Some(msg), now);
        });
        // A verdict that could not be written (the pod changed since the world read it) is no
        // verdict: parked without one, the pod would wait, unseen by the autoscaler, for a
        // change to the cluster that its waiting may hold back. It is tried again next pass.
        if matches!(written, Some(Err(_))) {
            self.parked.remove(key);
            self.active.insert((prio, seq, key.to_string()));
        }
    }

    /// Filters then scores; the chosen node's index, or kube-scheduler's message.
    fn place(
        &mut self,
        v: &View,
        pod: &SlimPod,
        prepared: &PreparedPod<'_>,
        pinned: Option<&str>,
        mut memo: Option<&mut Memo>,
    ) -> Result<usize, String> {
        let total = v.names.len();
        if total == 0 {
            return Err("0/0 nodes are available: no nodes available to schedule pods.".to_string());
        }
        // Why each rejecting node said no; only turned into a message when nothing fits.
        let mut rejections: Vec<(Arc<str>, usize)> = Vec::new();
        let mut feasible = Vec::new();
        if let Some(node) = pinned {
            // A DaemonSet pod may only go to its node; every other node fails node affinity.
            if let Some(&idx) = v.index.get(node) {
                match v.view.check_prepared(prepared, idx) {
                    Ok(()) => feasible.push(idx),
                    Err(u) => rejections.push((Arc::from(u.reason), 1)),
                }
            }
            let others = total - usize::from(v.index.contains_key(node));
            if others > 0 {
                rejections.push((Arc::from(kerf_scheduling::predicates::NODE_AFFINITY), others));
            }
        } else {
            let want = feasible_to_find(total);
            let start = self.next_start % total;
            let mut visited = 0;
            for i in 0..total {
                let idx = (start + i) % total;
                visited += 1;
                let verdict = match memo.as_deref_mut() {
                    Some(m) => match &m[idx] {
                        Some((ver, r)) if *ver == v.version[idx] => r.clone(),
                        _ => {
                            let r = v.view.check_prepared(prepared, idx).map_err(|u| Arc::<str>::from(u.reason));
                            m[idx] = Some((v.version[idx], r.clone()));
                            r
                        }
                    },
                    None => v.view.check_prepared(prepared, idx).map_err(|u| Arc::<str>::from(u.reason)),
                };
                match verdict {
                    Ok(()) => {
                        feasible.push(idx);
                        if feasible.len() >= want {
                            break;
                        }
                    }
                    Err(reason) => rejections.push((reason, 1)),
                }
            }
            self.next_start = (start + visited) % total;
        }
        if feasible.is_empty() {
            let mut reasons: BTreeMap<Arc<str>, usize> = BTreeMap::new();
            for (r, n) in rejections {
                *reasons.entry(r).or_default() += n;
            }
            let mut parts: Vec<String> = reasons.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            return Err(format!("0/{total} nodes are available: {}.", parts.join(", ")));
        }
        kerf_scheduling::kube_choice::choose(&v.view, pod, &feasible, |i| (v.allocatable[i], v.requested[i]))
            .ok_or_else(|| "no feasible node".to_string())
    }
}

/// kube-scheduler's backoff for a pod's `failures`-th failed attempt in a row: 1 s, doubling,
/// at most 10 s.
fn bind_backoff(failures: u32) -> std::time::Duration {
    std::time::Duration::from_secs((1u64 << failures.saturating_sub(1).min(4)).min(10))
}

/// Binds `pod` to `node`; the kubelet starts it at once when the node is Ready (it has nothing
/// to pull in the simulator), else once the node is. The answer is the bound pod as the view
/// keeps it, the store's refusal, or `None` when the pod is gone.
fn bind(
    cluster: &SimCluster,
    pod: &SlimPod,
    node: &str,
    world: &World,
    now: Timestamp,
) -> Option<Result<Arc<SlimPod>, kerf_api::cluster::ApiError>> {
    let ready = world.nodes.get(node).is_some_and(|n| node_ready(n));
    let host_ip = world.node_ip(node);
    write_pod(cluster, pod, |p| {
        p.set_node_name(node);
        // A bound pod's nomination has served its purpose.
        p.clear_nomination();
        p.remove_condition(KeptCondition::Ready);
        p.set_condition(KeptCondition::PodScheduled, ConditionStatus::True, None, None, now);
        if ready {
            set_running(p, now, host_ip);
        } else {
            p.set_phase("Pending");
        }
    })
}

#[cfg(test)]
mod tests;
