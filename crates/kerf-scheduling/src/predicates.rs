//! kube-scheduler's view of the cluster for placing a pod on an existing node — the counts its
//! filters need, prepared once per pod — and its preferences for ranking the nodes that pass.
//! The simulator's kube-scheduler stand-in binds pods with it. Whether a pod fits a node is
//! decided by the one fit check ([`crate::fit::check`]), which the provisioning Scheduler uses too.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::resources::{ATTACHABLE_VOLUMES_EBS, CPU, MEMORY, PODS, SharedLists};
use kerf_api::{Quantity, ResourceList, TaintEffect};

use crate::model::ExistingNode;
use crate::pod::{self, AffinityTerm, HostPort, PodAffinities, SpreadConstraint};
use crate::requirements::{Requirement, Requirements};

pub use crate::pod::pod_requests;

pub(crate) mod node_edits;

pub use crate::fit::{
    EXISTING_ANTI_AFFINITY, HOST_PORTS, NODE_AFFINITY, NODE_NAME, POD_AFFINITY, POD_ANTI_AFFINITY, SPREAD,
    SPREAD_MISSING_LABEL, UNSCHEDULABLE, Unfit, VOLUME_ZONE,
};

/// Existing nodes with their pods, and the bookkeeping the filters need.
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    nodes: Vec<ExistingNode>,
    /// The requests ([`pod_requests`]) of each node's pods, in the order of its `pods`: parsed
    /// once when a pod is added, so taking it off again parses nothing.
    pod_requests: Vec<Vec<Arc<ResourceList>>>,
    /// Sum of the requests of each node's pods other than cpu, memory and pods (those are
    /// summed in `used_core`): most pods ask for nothing else, and adding or taking one then
    /// touches no map.
    extended: Vec<ResourceList>,
    /// Per node, (allocatable, requested) cpu cores and memory bytes as the scores read them,
    /// kept with `used_core` so scoring a node does no map lookups.
    cpu_memory: Vec<([f64; 2], [f64; 2])>,
    /// Per node, allocatable minus requested for cpu, memory and pods in nano-units: the
    /// resources every pod asks for, checked without map lookups.
    free_core: Vec<[i128; 3]>,
    /// Per node, the cpu, memory and pods its pods request in nano-units (saturating sums).
    used_core: Vec<[i128; 3]>,
    ports: Vec<Vec<HostPort>>,
    /// Pods with required anti-affinity, grouped by their terms (the pods of one workload share
    /// them): the terms and how many such pods each node holds.
    anti: Vec<(Vec<AffinityTerm>, BTreeMap<usize, u32>)>,
    volumes: BTreeMap<String, Vec<Requirements>>,
    namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Per-node counts of live pods matching a spread selector or affinity term(s), computed on
    /// first use and kept current by `add_pod`: pods of one workload share their selectors, so
    /// each pod's PreFilter reads counts instead of rescanning every pod in the cluster.
    match_counts: RefCell<foldhash::HashMap<String, MatchCounts>>,
    /// The cache keys of the matchers met so far ([`PodMatcher::key`]), found again by comparing
    /// matchers: every pod prepared asks for its matchers' keys, and writing a key out costs
    /// far more than comparing a matcher with the few a cluster has.
    matcher_keys: RefCell<Vec<(PodMatcher, String)>>,
    /// Interned node values per topology key (rebuilt when a node is pushed or popped).
    topology: RefCell<foldhash::HashMap<String, Arc<TopologyIndex>>>,
    /// Nodes set aside for a what-if (see [`ClusterView::set_hidden`]); empty when none ever was.
    hidden: Vec<bool>,
    /// The pods' request lists, one per distinct list (see [`SharedLists`]).
    request_lists: SharedLists,
    /// Claims whose volumes attach as EBS volumes (see [`ClusterView::with_ebs_claims`]).
    ebs_claims: Arc<BTreeSet<String>>,
}

/// How many matchers' keys a view keeps (see `ClusterView::matcher_keys`): a cluster's
/// workloads have a few; past that, keys are written out each time.
const MATCHER_KEYS_KEPT: usize = 64;

/// What a cached count counts.
#[derive(Debug, Clone, PartialEq)]
enum PodMatcher {
    Spread(SpreadConstraint),
    /// Pods matching every one of these terms (required pod affinity).
    AllTerms(Vec<AffinityTerm>),
    /// Pods matching this term (required pod anti-affinity).
    Term(AffinityTerm),
}

#[derive(Debug, Clone)]
struct MatchCounts {
    matcher: PodMatcher,
    per_node: Vec<u32>,
    /// The same counts summed per domain of a topology key (by interned value), for the keys
    /// preferences asked about.
    per_domain: Vec<(String, Arc<TopologyIndex>, Vec<i64>)>,
    /// The same counts summed per domain of a topology key over the nodes not hidden, for the
    /// keys required spread asked about.
    visible: Vec<VisibleDomains>,
}

/// Matching pods per domain of one topology key over the nodes not hidden, and how many of those
/// nodes each domain has: what a required spread constraint counts, kept up to date as pods
/// are added or taken and nodes hidden or shown, so preparing a pod does not count over every
/// node.
#[derive(Debug, Clone)]
struct VisibleDomains {
    key: String,
    topology: Arc<TopologyIndex>,
    counts: Vec<i64>,
    nodes: Vec<u32>,
}

impl PodMatcher {
    fn key(&self) -> String {
        format!("{self:?}")
    }

    fn matches(&self, pod: &SlimPod, namespace_labels: &BTreeMap<String, BTreeMap<String, String>>) -> bool {
        is_live(pod)
            && match self {
                PodMatcher::Spread(c) => c.counts(pod),
                PodMatcher::AllTerms(terms) => terms.iter().all(|t| t.matches(pod, namespace_labels)),
                PodMatcher::Term(t) => t.matches(pod, namespace_labels),
            }
    }
}

/// What the filters computed once for a pod, to check it against every node (kube-scheduler's
/// PreFilter state).
#[derive(Debug, Clone)]
pub struct PreparedPod<'p> {
    pod: &'p SlimPod,
    /// Checked as its owner's new copy would be, not bound yet: `spec.nodeName` is not read
    /// (see [`ClusterView::prepare_unbound`]).
    unbound: bool,
    /// What the filters read of the pod alone.
    fixed: Arc<PodFilters>,
    spread: Vec<SpreadState>,
    /// Per required affinity term: the domains holding a pod that matches all terms.
    affinity_domains: Vec<MarkedDomains>,
    /// No pod anywhere matches all the required affinity terms.
    affinity_none_anywhere: bool,
    /// Per required anti-affinity term: the domains holding a matching pod.
    anti_domains: Vec<MarkedDomains>,
    /// Per topology key, the domains where an existing pod's anti-affinity rejects this pod.
    existing_anti: Vec<MarkedDomains>,
}

/// The part of a [`PreparedPod`] read from the pod alone (and the view's volume topology and
/// namespace labels, which a view keeps): its requests, required node terms, host ports,
/// volume terms, hard spread constraints and pod (anti-)affinity, parsed once. A caller that
/// prepares one pod again and again (a replay, order after order) keeps them
/// ([`ClusterView::pod_filters`]) and prepares from them ([`ClusterView::prepare_unbound_from`]):
/// only the counts over the view's pods are taken anew.
#[derive(Debug)]
pub struct PodFilters {
    requests: Arc<ResourceList>,
    /// cpu, memory and pods of `requests`, and whether it asks for nothing else.
    core_requests: [i128; 3],
    only_core: bool,
    node_terms: Vec<Requirements>,
    name_fields: Vec<Option<Requirement>>,
    ports: Vec<HostPort>,
    volume_terms: Vec<Vec<Requirements>>,
    /// The hard spread constraints, each with whether the pod counts for itself and the
    /// cache key of the pods it counts ([`ClusterView::key_of`]).
    spread: Vec<(SpreadConstraint, i64, String)>,
    affinity: PodAffinities,
    /// The cache key of the pods matching every required affinity term (empty when none).
    affinity_key: String,
    /// The cache key of the pods matching each required anti-affinity term.
    anti_keys: Vec<String>,
    matches_own_affinity: bool,
}

impl PodFilters {
    /// The pod's requests ([`pod_requests`]).
    pub fn requests(&self) -> &Arc<ResourceList> {
        &self.requests
    }
}

/// Some domains of one topology key (those holding a matching pod, or that a pod may not go to).
#[derive(Debug, Clone)]
struct MarkedDomains {
    key: String,
    topology: Arc<TopologyIndex>,
    /// By interned value.
    marked: Vec<bool>,
}

impl MarkedDomains {
    /// No domain marked, over the nodes of the view holding the key.
    fn new(key: &str, topology: Arc<TopologyIndex>) -> Self {
        MarkedDomains { key: key.to_string(), marked: vec![false; topology.domains], topology }
    }

    /// Marks the domain of each node with a count above zero.
    fn mark_nodes(&mut self, counts: &[u32]) {
        for (domain, count) in self.topology.per_node.iter().zip(counts) {
            if *count > 0
                && let Some(d) = domain
            {
                self.marked[*d as usize] = true;
            }
        }
    }

    /// Whether `node` lies in a marked domain (a node without the key lies in none).
    fn contains(&self, node: usize) -> bool {
        self.topology.per_node.get(node).copied().flatten().is_some_and(|d| self.marked[d as usize])
    }
}

#[derive(Debug, Clone)]
struct SpreadState {
    constraint: SpreadConstraint,
    /// Each node's value of the topology key, interned.
    topology: Arc<TopologyIndex>,
    /// Matching pods per domain (by interned value), over eligible nodes only.
    counts: Vec<i64>,
    /// Domains holding at least one node eligible for this pod.
    eligible: Vec<bool>,
    /// The least count over eligible domains; `None` when there is no eligible domain.
    min: Option<i64>,
    self_match: i64,
}

/// One topology key's value on every node of the view, interned so spread counting does
/// integer indexing instead of string lookups per node.
#[derive(Debug)]
struct TopologyIndex {
    domains: usize,
    per_node: Vec<Option<u32>>,
}

impl ClusterView {
    pub fn new(nodes: Vec<ExistingNode>) -> Self {
        Self::with_requests(nodes, |p| Arc::new(pod_requests(p)))
    }

    /// [`ClusterView::new`], with each pod's requests ([`pod_requests`]) from `requests`
    /// (called for the pods in order, node by node), when the caller has them parsed already.
    pub fn with_requests(
        nodes: Vec<ExistingNode>,
        mut requests: impl FnMut(&Arc<SlimPod>) -> Arc<ResourceList>,
    ) -> Self {
        let mut v = ClusterView { nodes: Vec::new(), ..Default::default() };
        for n in nodes {
            let pods = n.pods.clone();
            let idx = v.nodes.len();
            v.nodes.push(ExistingNode { pods: Vec::new(), ..n });
            v.pod_requests.push(Vec::new());
            v.extended.push(ResourceList::new());
            v.cpu_memory.push((cpu_memory_of(&v.nodes[idx].allocatable), [0.0; 2]));
            v.free_core.push(core_of(&v.nodes[idx].allocatable));
            v.used_core.push([0; 3]);
            v.ports.push(Vec::new());
            for p in pods {
                let r = requests(&p);
                v.add_pod_with(idx, p, r);
            }
        }
        v
    }

    /// The claims (`namespace/claim`) whose volumes attach as EBS volumes: each a pod mounts
    /// counts one against its node's `attachable-volumes-aws-ebs` (nodes without it have no
    /// limit), for the pods held already and every pod added or prepared from now on.
    pub fn with_ebs_claims(mut self, claims: Arc<BTreeSet<String>>) -> Self {
        self.ebs_claims = claims;
        for node in 0..self.nodes.len() {
            for j in 0..self.nodes[node].pods.len() {
                let before = Arc::clone(&self.pod_requests[node][j]);
                let after = self.counted(&self.nodes[node].pods[j], Arc::clone(&before));
                if !Arc::ptr_eq(&before, &after) {
                    let sum = &mut self.extended[node];
                    let now = sum.get(ATTACHABLE_VOLUMES_EBS).saturating_add(&after.get(ATTACHABLE_VOLUMES_EBS));
                    sum.set(ATTACHABLE_VOLUMES_EBS, now);
                    self.pod_requests[node][j] = after;
                }
            }
        }
        self
    }

    /// `requests` of `pod` with the EBS volumes it attaches (the same list when none).
    fn counted(&self, pod: &SlimPod, requests: Arc<ResourceList>) -> Arc<ResourceList> {
        let count = crate::volume_limits::ebs_volume_count(pod, &self.ebs_claims);
        if count == 0 || requests.0.contains_key(ATTACHABLE_VOLUMES_EBS) {
            return requests;
        }
        Arc::new(crate::volume_limits::with_ebs_volumes(&requests, count))
    }

    /// Volume topology (`namespace/claim` → alternative requirements), for the volume zone filter.
    pub fn with_volumes(mut self, volumes: BTreeMap<String, Vec<Requirements>>) -> Self {
        self.volumes = volumes;
        self
    }

    /// Namespace labels, for pod affinity terms with a namespaceSelector.
    pub fn with_namespace_labels(mut self, labels: BTreeMap<String, BTreeMap<String, String>>) -> Self {
        self.namespace_labels = labels;
        self
    }

    pub fn nodes(&self) -> &[ExistingNode] {
        &self.nodes
    }

    /// What the pods on `node` request in total (a resource they ask none of left out or zero).
    pub fn requested(&self, node: usize) -> ResourceList {
        let mut list = self.extended[node].clone();
        for (name, nanos) in CORE.iter().zip(self.used_core[node]) {
            if nanos != 0 {
                list.set(*name, Quantity::from_nanos(nanos, kerf_api::quantity::Format::DecimalSI));
            }
        }
        list
    }

    /// Records a pod bound (or nominated) to `node`.
    pub fn add_pod(&mut self, node: usize, pod: Arc<SlimPod>) {
        let requests = Arc::new(pod_requests(&pod));
        self.add_pod_with(node, pod, requests);
    }

    /// [`ClusterView::add_pod`] for a pod whose requests ([`pod_requests`]) are known already.
    pub fn add_pod_with(&mut self, node: usize, pod: Arc<SlimPod>, requests: Arc<ResourceList>) {
        let requests = self.counted(&pod, requests);
        let requests = self.request_lists.share(requests);
        let core = self.split_requests(node, &requests, Quantity::saturating_add);
        for (free, req) in self.free_core[node].iter_mut().zip(core) {
            *free -= req;
        }
        let used = &mut self.used_core[node];
        for (u, r) in used.iter_mut().zip(core) {
            *u = u.saturating_add(r);
        }
        self.cpu_memory[node].1 = [nanos_f64(used[0]), nanos_f64(used[1])];
        self.ports[node].extend(pod::host_ports(&pod));
        if pod::has_required_anti_affinity(&pod) {
            let terms = pod::pod_affinities(&pod).required_anti;
            match self.anti.iter_mut().find(|(t, _)| *t == terms) {
                Some((_, nodes)) => *nodes.entry(node).or_default() += 1,
                None => self.anti.push((terms, BTreeMap::from([(node, 1)]))),
            }
        }
        let hidden = self.is_hidden(node);
        for cached in self.match_counts.get_mut().values_mut() {
            if cached.matcher.matches(&pod, &self.namespace_labels) {
                cached.per_node[node] += 1;
                for (_, topology, counts) in &mut cached.per_domain {
                    if let Some(d) = topology.per_node[node] {
                        counts[d as usize] += 1;
                    }
                }
                for v in cached.visible.iter_mut().filter(|_| !hidden) {
                    if let Some(d) = v.topology.per_node[node] {
                        v.counts[d as usize] += 1;
                    }
                }
            }
        }
        self.nodes[node].pods.push(pod);
        self.pod_requests[node].push(requests);
    }

    /// A pod's cpu, memory and pods requests in nano-units ([`core_of`]), read in one pass over
    /// `requests`; any other resource it asks for is added to (or, with `saturating_sub`,
    /// taken from) node `node`'s `extended` sum with `op`.
    fn split_requests(
        &mut self,
        node: usize,
        requests: &ResourceList,
        op: fn(&Quantity, &Quantity) -> Quantity,
    ) -> [i128; 3] {
        let mut core = [0i128; 3];
        for (name, q) in requests.iter() {
            match CORE.iter().position(|c| *c == name) {
                Some(i) => core[i] = q.nanos(),
                None => {
                    let sum = &mut self.extended[node];
                    let now = op(&sum.get(name), q);
                    sum.set(name.clone(), now);
                }
            }
        }
        core
    }

    /// Undoes [`ClusterView::add_pod`] for the very pod (the same `Arc`) added to `node`: its
    /// requests, host ports, anti-affinity and counts leave the node. Used for pods that only
    /// hold room while nominated there (kube-scheduler's nominated pods). Returns whether the
    /// pod was on the node.
    pub fn remove_pod(&mut self, node: usize, pod: &Arc<SlimPod>) -> bool {
        self.take_pod(node, pod).is_some()
    }

    /// [`ClusterView::remove_pod`], returning the pod's requests (for
    /// [`ClusterView::add_pod_with`]) when it was on the node.
    pub fn take_pod(&mut self, node: usize, pod: &Arc<SlimPod>) -> Option<Arc<ResourceList>> {
        let at = self.nodes.get(node)?.pods.iter().position(|p| Arc::ptr_eq(p, pod))?;
        let pod = self.nodes[node].pods.remove(at);
        let requests = self.pod_requests[node].remove(at);
        let core = self.split_requests(node, &requests, Quantity::saturating_sub);
        for (free, req) in self.free_core[node].iter_mut().zip(core) {
            *free += req;
        }
        let used = &mut self.used_core[node];
        for (u, r) in used.iter_mut().zip(core) {
            *u = u.saturating_sub(r);
        }
        self.cpu_memory[node].1 = [nanos_f64(used[0]), nanos_f64(used[1])];
        if !self.ports[node].is_empty() {
            for port in pod::host_ports(&pod) {
                if let Some(i) = self.ports[node].iter().position(|p| *p == port) {
                    self.ports[node].remove(i);
                }
            }
        }
        let terms =
            if pod::has_required_anti_affinity(&pod) { pod::pod_affinities(&pod).required_anti } else { Vec::new() };
        if !terms.is_empty()
            && let Some((_, nodes)) = self.anti.iter_mut().find(|(t, _)| *t == terms)
            && let Some(count) = nodes.get_mut(&node)
        {
            *count -= 1;
            if *count == 0 {
                nodes.remove(&node);
            }
        }
        let hidden = self.is_hidden(node);
        for cached in self.match_counts.get_mut().values_mut() {
            if cached.matcher.matches(&pod, &self.namespace_labels) {
                let counted = cached.per_node[node] > 0;
                cached.per_node[node] = cached.per_node[node].saturating_sub(1);
                for (_, topology, counts) in &mut cached.per_domain {
                    if let Some(d) = topology.per_node[node] {
                        counts[d as usize] = counts[d as usize].saturating_sub(1);
                    }
                }
                for v in cached.visible.iter_mut().filter(|_| counted && !hidden) {
                    if let Some(d) = v.topology.per_node[node] {
                        v.counts[d as usize] -= 1;
                    }
                }
            }
        }
        Some(requests)
    }

    /// Appends `node` (with its pods) to the view and returns its index: a what-if about a node
    /// that does not exist yet. [`ClusterView::pop_node`] takes it off again. Counts kept per
    /// node stay; topology indexes and counts per domain are rebuilt on next use.
    pub fn push_node(&mut self, node: ExistingNode) -> usize {
        self.forget_domains();
        for cached in self.match_counts.get_mut().values_mut() {
            cached.per_node.push(0);
        }
        let pods = node.pods.clone();
        let idx = self.nodes.len();
        self.nodes.push(ExistingNode { pods: Vec::new(), ..node });
        self.pod_requests.push(Vec::new());
        self.extended.push(ResourceList::new());
        self.cpu_memory.push((cpu_memory_of(&self.nodes[idx].allocatable), [0.0; 2]));
        self.free_core.push(core_of(&self.nodes[idx].allocatable));
        self.used_core.push([0; 3]);
        self.ports.push(Vec::new());
        self.hidden.resize(self.nodes.len(), false);
        for p in pods {
            self.add_pod(idx, p);
        }
        idx
    }

    /// Takes the last node off the view again (see [`ClusterView::push_node`]).
    pub fn pop_node(&mut self) -> Option<ExistingNode> {
        let idx = self.nodes.len().checked_sub(1)?;
        for p in self.nodes[idx].pods.clone() {
            self.remove_pod(idx, &p);
        }
        let node = self.nodes.pop()?;
        self.pod_requests.pop();
        self.extended.pop();
        self.cpu_memory.pop();
        self.free_core.pop();
        self.used_core.pop();
        self.ports.pop();
        self.hidden.truncate(self.nodes.len());
        for cached in self.match_counts.get_mut().values_mut() {
            cached.per_node.pop();
        }
        self.forget_domains();
        Some(node)
    }

    /// Hides node `idx` (or shows it again): a hidden node takes no pod and is no topology
    /// domain for spread, as if it were gone. Its pods still count; take them off with
    /// [`ClusterView::remove_pod`] for a node that is going away with them.
    pub fn set_hidden(&mut self, idx: usize, hidden: bool) {
        if self.hidden.len() < self.nodes.len() {
            self.hidden.resize(self.nodes.len(), false);
        }
        let Some(h) = self.hidden.get_mut(idx) else { return };
        if *h == hidden {
            return;
        }
        *h = hidden;
        let sign: i64 = if hidden { -1 } else { 1 };
        for cached in self.match_counts.get_mut().values_mut() {
            let count = i64::from(cached.per_node[idx]);
            for v in &mut cached.visible {
                if let Some(d) = v.topology.per_node[idx] {
                    v.counts[d as usize] += sign * count;
                    v.nodes[d as usize] = v.nodes[d as usize].saturating_add_signed(sign as i32);
                }
            }
        }
    }

    /// Whether node `idx` is set aside (see [`ClusterView::set_hidden`]).
    pub fn is_hidden(&self, idx: usize) -> bool {
        self.hidden.get(idx).copied().unwrap_or(false)
    }

    /// Drops the interned topology values and the counts per domain (the node set changed).
    fn forget_domains(&mut self) {
        self.topology.get_mut().clear();
        for cached in self.match_counts.get_mut().values_mut() {
            cached.per_domain.clear();
            cached.visible.clear();
        }
    }

    /// cpu (cores) and memory (bytes) of `node`: allocatable, and what its pods request.
    pub fn cpu_memory(&self, node: usize) -> ([f64; 2], [f64; 2]) {
        self.cpu_memory[node]
    }

    /// Live pods on each node that `matcher` counts (cached; see `match_counts`).
    fn counts_per_node(&self, matcher: PodMatcher) -> Vec<u32> {
        let key = self.count_matching(matcher);
        self.match_counts.borrow().get(&key).map(|c| c.per_node.clone()).unwrap_or_default()
    }

    /// Marks in `d` the domain of each node holding a live pod the matcher cached under `key`
    /// counts (see [`ClusterView::count_matching`]).
    fn mark_counted(&self, key: &str, d: &mut MarkedDomains) {
        if let Some(c) = self.match_counts.borrow().get(key) {
            d.mark_nodes(&c.per_node);
        }
    }

    /// Makes sure the live pods on each node that `matcher` counts are cached (see
    /// `match_counts`); returns the cache key.
    fn count_matching(&self, matcher: PodMatcher) -> String {
        let key = self.key_of(&matcher);
        self.count_keyed(&key, || matcher);
        key
    }

    /// [`ClusterView::count_matching`] for a matcher whose cache key is `key` (kept from
    /// [`ClusterView::key_of`]), made by `matcher` only when it is not cached yet.
    fn count_keyed(&self, key: &str, matcher: impl FnOnce() -> PodMatcher) {
        if self.match_counts.borrow().contains_key(key) {
            return;
        }
        let matcher = matcher();
        let per_node: Vec<u32> = self
            .nodes
            .iter()
            .map(|n| n.pods.iter().filter(|p| matcher.matches(p, &self.namespace_labels)).count() as u32)
            .collect();
        self.match_counts
            .borrow_mut()
            .insert(key.to_string(), MatchCounts { matcher, per_node, per_domain: Vec::new(), visible: Vec::new() });
    }

    /// `matcher`'s cache key ([`PodMatcher::key`]): the one kept for an equal matcher met
    /// before, else written out (and kept, up to a bound).
    fn key_of(&self, matcher: &PodMatcher) -> String {
        if let Some((_, key)) = self.matcher_keys.borrow().iter().find(|(m, _)| m == matcher) {
            return key.clone();
        }
        let key = matcher.key();
        let mut keys = self.matcher_keys.borrow_mut();
        if keys.len() < MATCHER_KEYS_KEPT {
            keys.push((matcher.clone(), key.clone()));
        }
        key
    }

    fn topology_index(&self, key: &str) -> Arc<TopologyIndex> {
        if let Some(t) = self.topology.borrow().get(key) {
            return Arc::clone(t);
        }
        let mut ids: HashMap<&str, u32> = HashMap::new();
        let per_node = self
            .nodes
            .iter()
            .map(|n| {
                n.labels.get(key).map(|v| {
                    let next = ids.len() as u32;
                    *ids.entry(v.as_str()).or_insert(next)
                })
            })
            .collect();
        let index = Arc::new(TopologyIndex { domains: ids.len(), per_node });
        self.topology.borrow_mut().insert(key.to_string(), Arc::clone(&index));
        index
    }

    /// Every kube-scheduler filter for `pod` on node `node`.
    pub fn check(&self, pod: &SlimPod, node: usize) -> Result<(), Unfit> {
        self.check_prepared(&self.prepare(pod), node)
    }

    /// The nodes `pod` fits, by index.
    pub fn feasible_nodes(&self, pod: &SlimPod) -> Vec<usize> {
        let p = self.prepare(pod);
        (0..self.nodes.len()).filter(|i| self.check_prepared(&p, *i).is_ok()).collect()
    }

    /// Computes what the filters need for `pod` once (counts for spread and affinity).
    pub fn prepare<'p>(&self, pod: &'p SlimPod) -> PreparedPod<'p> {
        self.prepare_with(pod, None)
    }

    /// [`ClusterView::prepare`], with the pod's requests ([`pod_requests`]) when they are known
    /// already.
    pub fn prepare_with<'p>(&self, pod: &'p SlimPod, requests: Option<Arc<ResourceList>>) -> PreparedPod<'p> {
        self.prepare_as(pod, requests, false)
    }

    /// [`ClusterView::prepare_with`] for the copy of `pod` its owner creates once it is
    /// evicted: the same pod, not bound (its `spec.nodeName` is not read), so a replay of moved
    /// pods checks them without copying each one.
    pub fn prepare_unbound<'p>(&self, pod: &'p SlimPod, requests: Option<Arc<ResourceList>>) -> PreparedPod<'p> {
        self.prepare_as(pod, requests, true)
    }

    fn prepare_as<'p>(&self, pod: &'p SlimPod, requests: Option<Arc<ResourceList>>, unbound: bool) -> PreparedPod<'p> {
        self.prepare_from(pod, self.pod_filters(pod, requests), unbound)
    }

    /// What the filters read of `pod` alone (see [`PodFilters`]), with its requests when they
    /// are known already. They hold for this view and any view with its volume topology and
    /// namespace labels.
    pub fn pod_filters(&self, pod: &SlimPod, requests: Option<Arc<ResourceList>>) -> Arc<PodFilters> {
        let requests = self.counted(pod, requests.unwrap_or_else(|| Arc::new(pod_requests(pod))));
        let core_requests = core_of(&requests);
        let only_core = requests.iter().all(|(k, q)| q.is_zero() || CORE.iter().any(|c| c == k));
        let affinity = pod::pod_affinities(pod);
        let matches_own_affinity = affinity.required.iter().all(|t| t.matches(pod, &self.namespace_labels));
        let affinity_key = if affinity.required.is_empty() {
            String::new()
        } else {
            self.key_of(&PodMatcher::AllTerms(affinity.required.clone()))
        };
        let anti_keys = affinity.required_anti.iter().map(|t| self.key_of(&PodMatcher::Term(t.clone()))).collect();
        Arc::new(PodFilters {
            core_requests,
            only_core,
            requests,
            node_terms: pod::required_node_terms(pod),
            name_fields: pod::required_node_name_fields(pod),
            ports: pod::host_ports(pod),
            volume_terms: pod::volume_claims(pod).iter().filter_map(|c| self.volumes.get(c).cloned()).collect(),
            spread: pod::spread_constraints(pod)
                .into_iter()
                .filter(|c| c.hard)
                .map(|c| {
                    let self_match = i64::from(c.counts(pod));
                    let key = self.key_of(&PodMatcher::Spread(c.clone()));
                    (c, self_match, key)
                })
                .collect(),
            affinity_key,
            anti_keys,
            affinity,
            matches_own_affinity,
        })
    }

    /// [`ClusterView::prepare_unbound`] from the pod's filters kept from
    /// [`ClusterView::pod_filters`] (on this view or one with the same volume topology and
    /// namespace labels): the same verdicts, without parsing the pod again.
    pub fn prepare_unbound_from<'p>(&self, pod: &'p SlimPod, filters: &Arc<PodFilters>) -> PreparedPod<'p> {
        self.prepare_from(pod, Arc::clone(filters), true)
    }

    fn prepare_from<'p>(&self, pod: &'p SlimPod, fixed: Arc<PodFilters>, unbound: bool) -> PreparedPod<'p> {
        let node_terms = &fixed.node_terms;
        let name_fields = &fixed.name_fields;
        let tols = pod::tolerations(pod);
        let mut spread: Vec<SpreadState> = fixed
            .spread
            .iter()
            .map(|(c, self_match, _)| {
                let topology = self.topology_index(&c.topology_key);
                SpreadState {
                    self_match: *self_match,
                    counts: vec![0; topology.domains],
                    eligible: vec![false; topology.domains],
                    topology,
                    constraint: c.clone(),
                    min: None,
                }
            })
            .collect();
        if !spread.is_empty() {
            let keys: Vec<&str> = fixed.spread.iter().map(|(_, _, key)| key.as_str()).collect();
            for (s, key) in spread.iter().zip(&keys) {
                self.count_keyed(key, || PodMatcher::Spread(s.constraint.clone()));
            }
            // Node affinity and taints are read per node only when a constraint honours them
            // and they can turn a node away (a pod without node affinity matches every node).
            let check_affinity = spread.iter().any(|s| s.constraint.honor_node_affinity)
                && !(!node_terms.is_empty()
                    && node_terms.iter().all(Requirements::is_empty)
                    && name_fields.iter().all(Option::is_none));
            let check_taints = spread.iter().any(|s| s.constraint.honor_node_taints);
            // One constraint that counts every node not hidden: its counts are kept per domain.
            let mut kept = false;
            if let ([s], [mkey]) = (spread.as_mut_slice(), keys.as_slice())
                && !check_affinity
                && !check_taints
            {
                kept = self.visible_domain_counts(mkey, s);
            }
            let cache = self.match_counts.borrow();
            let matched: Vec<&[u32]> =
                keys.iter().map(|k| cache.get(*k).map_or(&[][..], |c| c.per_node.as_slice())).collect();
            for (i, n) in self.nodes.iter().enumerate().filter(|_| !kept) {
                // kube-scheduler counts only nodes carrying every topology key of the pod.
                if self.is_hidden(i) || !spread.iter().all(|s| s.topology.per_node[i].is_some()) {
                    continue;
                }
                let affinity_ok = !check_affinity || self.node_affinity_ok(node_terms, name_fields, i);
                let taints_ok = !check_taints || pod::untolerated_taint_with(tols, &n.taints, false).is_none();
                for (s, matched) in spread.iter_mut().zip(&matched) {
                    if (s.constraint.honor_node_affinity && !affinity_ok)
                        || (s.constraint.honor_node_taints && !taints_ok)
                    {
                        continue;
                    }
                    let Some(domain) = s.topology.per_node[i] else { continue };
                    s.eligible[domain as usize] = true;
                    s.counts[domain as usize] += i64::from(matched.get(i).copied().unwrap_or(0));
                }
            }
            for s in spread.iter_mut() {
                let eligible = s.eligible.iter().filter(|e| **e).count();
                let mut min = s.counts.iter().zip(&s.eligible).filter(|(_, e)| **e).map(|(c, _)| *c).min();
                if let Some(md) = s.constraint.min_domains
                    && (eligible as i64) < i64::from(md)
                {
                    min = Some(0);
                }
                s.min = min;
            }
        }
        let affinity = &fixed.affinity;
        let mut affinity_domains = Vec::with_capacity(affinity.required.len());
        if !affinity.required.is_empty() {
            let key = &fixed.affinity_key;
            self.count_keyed(key, || PodMatcher::AllTerms(affinity.required.clone()));
            for t in &affinity.required {
                let mut d = MarkedDomains::new(&t.topology_key, self.topology_index(&t.topology_key));
                self.mark_counted(key, &mut d);
                affinity_domains.push(d);
            }
        }
        let affinity_none_anywhere = affinity_domains.iter().all(|d| !d.marked.contains(&true));
        let mut anti_domains = Vec::with_capacity(affinity.required_anti.len());
        for (t, key) in affinity.required_anti.iter().zip(&fixed.anti_keys) {
            self.count_keyed(key, || PodMatcher::Term(t.clone()));
            let mut d = MarkedDomains::new(&t.topology_key, self.topology_index(&t.topology_key));
            self.mark_counted(key, &mut d);
            anti_domains.push(d);
        }
        let mut existing_anti: Vec<MarkedDomains> = Vec::new();
        for (terms, nodes) in &self.anti {
            for t in terms {
                if nodes.is_empty() || !t.matches(pod, &self.namespace_labels) {
                    continue;
                }
                let at = match existing_anti.iter().position(|b| b.key == t.topology_key) {
                    Some(at) => at,
                    None => {
                        existing_anti.push(MarkedDomains::new(&t.topology_key, self.topology_index(&t.topology_key)));
                        existing_anti.len() - 1
                    }
                };
                let b = &mut existing_anti[at];
                for n in nodes.keys() {
                    if let Some(d) = b.topology.per_node.get(*n).copied().flatten() {
                        b.marked[d as usize] = true;
                    }
                }
            }
        }
        PreparedPod {
            pod,
            unbound,
            fixed,
            spread,
            affinity_domains,
            affinity_none_anywhere,
            anti_domains,
            existing_anti,
        }
    }

    fn node_affinity_ok(&self, terms: &[Requirements], name_fields: &[Option<Requirement>], node: usize) -> bool {
        let n = &self.nodes[node];
        crate::fit::node_affinity_matches(terms, name_fields, &n.name, &n.labels)
    }

    /// The one fit check ([`crate::fit::check`]) for a prepared pod on `node`.
    pub fn check_prepared(&self, p: &PreparedPod<'_>, node: usize) -> Result<(), Unfit> {
        if node >= self.nodes.len() || self.is_hidden(node) {
            return Err(Unfit::new("node does not exist"));
        }
        let mut q = ViewFit { v: self, p, node };
        crate::fit::check(&mut q).map_err(|why| crate::fit::describe(&q, why))
    }

    /// Whether a prepared pod passes every filter on `node`: [`ClusterView::check_prepared`]
    /// without putting the reason into words.
    pub fn passes(&self, p: &PreparedPod<'_>, node: usize) -> bool {
        node < self.nodes.len() && !self.is_hidden(node) && crate::fit::check(&mut ViewFit { v: self, p, node }).is_ok()
    }

    /// Whether a prepared pod passes the filters on `node` that read only the node itself
    /// ([`crate::fit::check_node`]).
    pub fn node_filters_pass(&self, p: &PreparedPod<'_>, node: usize) -> bool {
        node < self.nodes.len()
            && !self.is_hidden(node)
            && crate::fit::check_node(&mut ViewFit { v: self, p, node }).is_ok()
    }

    /// Whether a prepared pod passes the node-local filters on `node` that read its pods
    /// ([`crate::fit::check_room`]): on a node that passed [`ClusterView::node_filters_pass`]
    /// and has only gained pods since, the same answer.
    pub fn room_filters_pass(&self, p: &PreparedPod<'_>, node: usize) -> bool {
        node < self.nodes.len()
            && !self.is_hidden(node)
            && crate::fit::check_room(&mut ViewFit { v: self, p, node }).is_ok()
    }

    /// Whether a prepared pod passes the filters on `node` that read other pods too
    /// ([`crate::fit::check_inter_pod`]).
    pub fn inter_pod_filters_pass(&self, p: &PreparedPod<'_>, node: usize) -> bool {
        node < self.nodes.len()
            && !self.is_hidden(node)
            && crate::fit::check_inter_pod(&mut ViewFit { v: self, p, node }).is_ok()
    }

    /// How much `pod` prefers `node` (higher is better): preferred node affinity weights that
    /// match, plus preferred pod affinity weight × matching pods in the node's domain, minus the
    /// same for preferred anti-affinity, minus matching pods in the node's domain for each
    /// ScheduleAnyway spread constraint, minus 100 per untolerated PreferNoSchedule taint.
    pub fn preference_score(&self, pod: &SlimPod, node: usize) -> i64 {
        self.preference_scores(pod, &[node])[0]
    }

    /// [`preference_score`](Self::preference_score) of `pod` for each of `nodes`.
    pub fn preference_scores(&self, pod: &SlimPod, nodes: &[usize]) -> Vec<i64> {
        self.preference_parts(pod, nodes)
            .into_iter()
            .map(|p| {
                if p.missing { i64::MIN } else { p.node_affinity + p.inter_pod - p.spread - 100 * p.prefer_no_schedule }
            })
            .collect()
    }

    /// What each of kube-scheduler's preference plugins sees of `pod` on each of `nodes`, before
    /// it normalises its scores: reading the matching pods per domain from counts kept per term
    /// (see `match_counts`) instead of scanning the cluster's pods for every node.
    pub fn preference_parts(&self, pod: &SlimPod, nodes: &[usize]) -> Vec<PreferenceParts> {
        let pref_node = pod::preferred_node_terms(pod);
        let aff = pod::pod_affinities(pod);
        // (weight, what is counted, topology key) of each per-domain preference.
        let mut counted: Vec<(i64, PodMatcher, String)> = Vec::new();
        for t in &aff.preferred {
            counted.push((i64::from(t.weight), PodMatcher::Term(t.clone()), t.topology_key.clone()));
        }
        for t in &aff.preferred_anti {
            counted.push((-i64::from(t.weight), PodMatcher::Term(t.clone()), t.topology_key.clone()));
        }
        for c in pod::spread_constraints(pod).into_iter().filter(|c| !c.hard) {
            let key = c.topology_key.clone();
            counted.push((-1, PodMatcher::Spread(c), key));
        }
        let spread_from = counted.len() - pod::spread_constraints(pod).iter().filter(|c| !c.hard).count();
        let keys: Vec<(String, Arc<TopologyIndex>)> =
            counted.iter().map(|(_, m, key)| (self.domain_counts(m, key), self.topology_index(key))).collect();
        let cache = self.match_counts.borrow();
        let per_domain: Vec<(i64, &TopologyIndex, &[i64])> = counted
            .iter()
            .zip(&keys)
            .map(|((w, _, key), (mkey, topology))| {
                let counts = cache
                    .get(mkey)
                    .and_then(|c| c.per_domain.iter().find(|(k, _, _)| k == key))
                    .map_or(&[][..], |(_, _, v)| v.as_slice());
                (*w, topology.as_ref(), counts)
            })
            .collect();
        let tols = pod::tolerations(pod);
        nodes
            .iter()
            .map(|&node| {
                let Some(n) = self.nodes.get(node) else {
                    return PreferenceParts { missing: true, ..PreferenceParts::default() };
                };
                let mut parts = PreferenceParts::default();
                for (w, req) in &pref_node {
                    if req.matches(&n.labels) {
                        parts.node_affinity += i64::from(*w);
                    }
                }
                for (i, (w, topology, counts)) in per_domain.iter().enumerate() {
                    if let Some(d) = topology.per_node[node] {
                        let v = w * counts.get(d as usize).copied().unwrap_or(0);
                        if i < spread_from { parts.inter_pod += v } else { parts.spread -= v }
                    }
                }
                parts.prefer_no_schedule = n
                    .taints
                    .iter()
                    .filter(|t| {
                        t.effect == TaintEffect::PreferNoSchedule && !tols.iter().any(|tol| pod::tolerates(tol, t))
                    })
                    .count() as i64;
                parts
            })
            .collect()
    }

    /// Fills `spread`'s counts and eligible domains from the live pods its matcher (cached under
    /// `mkey`) counts on the nodes not hidden, kept per domain of its topology key (counted over
    /// the nodes once, then kept up to date). `false` when the matcher is not cached.
    fn visible_domain_counts(&self, mkey: &str, spread: &mut SpreadState) -> bool {
        let key = spread.constraint.topology_key.as_str();
        let mut cache = self.match_counts.borrow_mut();
        let Some(c) = cache.get_mut(mkey) else { return false };
        let topology = &spread.topology;
        let at = match c.visible.iter().position(|v| v.key == key) {
            Some(at) => at,
            None => {
                let mut v = VisibleDomains {
                    key: key.to_string(),
                    topology: Arc::clone(topology),
                    counts: vec![0; topology.domains],
                    nodes: vec![0; topology.domains],
                };
                for (n, count) in c.per_node.iter().enumerate() {
                    if let Some(d) = topology.per_node[n]
                        && !self.is_hidden(n)
                    {
                        v.counts[d as usize] += i64::from(*count);
                        v.nodes[d as usize] += 1;
                    }
                }
                c.visible.push(v);
                c.visible.len() - 1
            }
        };
        let v = &c.visible[at];
        spread.counts.copy_from_slice(&v.counts);
        for (e, n) in spread.eligible.iter_mut().zip(&v.nodes) {
            *e = *n > 0;
        }
        true
    }

    /// Makes sure the live pods `matcher` counts are kept per domain of `key`; returns the
    /// matcher's cache key.
    fn domain_counts(&self, matcher: &PodMatcher, key: &str) -> String {
        let mkey = self.key_of(matcher);
        let known = self.match_counts.borrow().get(&mkey).map(|c| c.per_domain.iter().any(|(k, _, _)| k == key));
        if known == Some(true) {
            return mkey;
        }
        if known.is_none() {
            self.counts_per_node(matcher.clone());
        }
        let topology = self.topology_index(key);
        let mut cache = self.match_counts.borrow_mut();
        if let Some(c) = cache.get_mut(&mkey) {
            let mut counts = vec![0i64; topology.domains];
            for (n, count) in c.per_node.iter().enumerate() {
                if let Some(d) = topology.per_node[n] {
                    counts[d as usize] += i64::from(*count);
                }
            }
            c.per_domain.push((key.to_string(), Arc::clone(&topology), counts));
        }
        mkey
    }
}

/// A pod's raw preference for one node, per kube-scheduler score plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreferenceParts {
    /// NodeAffinity: the weights of the preferred node affinity terms the node matches.
    pub node_affinity: i64,
    /// InterPodAffinity: preferred pod affinity weight × matching pods in the node's domain,
    /// less the same for preferred anti-affinity.
    pub inter_pod: i64,
    /// PodTopologySpread (ScheduleAnyway constraints): matching pods in the node's domains.
    pub spread: i64,
    /// TaintToleration: the node's PreferNoSchedule taints the pod does not tolerate.
    pub prefer_no_schedule: i64,
    /// The node is not in the view.
    pub missing: bool,
}

/// The fit check's questions about a prepared pod on one node of the view.
struct ViewFit<'a, 'p> {
    v: &'a ClusterView,
    p: &'a PreparedPod<'p>,
    node: usize,
}

impl ViewFit<'_, '_> {
    fn node(&self) -> &ExistingNode {
        &self.v.nodes[self.node]
    }
}

impl crate::fit::FitQuery for ViewFit<'_, '_> {
    fn schedulable(&mut self) -> bool {
        self.node().schedulable || {
            let unschedulable =
                kerf_api::Taint::new(kerf_api::labels::NODE_UNSCHEDULABLE_TAINT_KEY, None, TaintEffect::NoSchedule);
            pod::tolerations(self.p.pod).iter().any(|t| pod::tolerates(t, &unschedulable))
        }
    }
    fn node_name_matches(&mut self) -> bool {
        if self.p.unbound {
            return true;
        }
        let name = self.p.pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        name.is_none_or(|n| n.is_empty() || n == self.node().name)
    }
    fn untolerated_taint(&mut self) -> Option<usize> {
        let taints = &self.node().taints;
        let t = pod::untolerated_taint_with(pod::tolerations(self.p.pod), taints, false)?;
        taints.iter().position(|x| std::ptr::eq(x, t))
    }
    fn node_affinity_matches(&mut self) -> bool {
        self.v.node_affinity_ok(&self.p.fixed.node_terms, &self.p.fixed.name_fields, self.node)
    }
    fn host_ports_free(&mut self) -> bool {
        crate::fit::host_ports_free(&self.p.fixed.ports, &self.v.ports[self.node])
    }
    fn short_resource(&mut self) -> Option<usize> {
        // cpu, memory and pods without map lookups when that is all the pod asks for.
        let free = &self.v.free_core[self.node];
        if self.p.fixed.only_core
            && crate::fit::short_resource(self.p.fixed.core_requests.iter().zip(free).map(|(r, f)| (*r, 0, *f)))
                .is_none()
        {
            return None;
        }
        let (used_core, extended) = (&self.v.used_core[self.node], &self.v.extended[self.node]);
        let used = |k: &str| match CORE.iter().position(|c| *c == k) {
            Some(i) => used_core[i],
            None => extended.get(k).nanos(),
        };
        let alloc = &self.node().allocatable;
        // A node that states no attach limit has none.
        let room = |k: &str| match alloc.0.get(k) {
            None if k == ATTACHABLE_VOLUMES_EBS => Quantity::from_units(crate::volume_limits::NO_LIMIT).nanos(),
            q => q.map_or(0, Quantity::nanos),
        };
        crate::fit::short_resource(self.p.fixed.requests.iter().map(|(k, q)| (q.nanos(), used(k), room(k))))
    }
    fn volumes_match(&mut self) -> bool {
        crate::fit::volumes_match(&self.p.fixed.volume_terms, &self.node().labels)
    }
    fn spread(&mut self) -> Result<(), crate::fit::Why> {
        for (i, s) in self.p.spread.iter().enumerate() {
            let domain = s.topology.per_node[self.node].ok_or(crate::fit::Why::SpreadMissingLabel)?;
            let Some(min) = s.min else { continue };
            let count = if s.eligible[domain as usize] { s.counts[domain as usize] } else { 0 };
            if !crate::fit::spread_skew_ok(count, s.self_match, min, i64::from(s.constraint.max_skew)) {
                return Err(crate::fit::Why::Spread(i));
            }
        }
        Ok(())
    }
    fn existing_anti_affinity_ok(&mut self) -> bool {
        !self.p.existing_anti.iter().any(|b| b.contains(self.node))
    }
    fn anti_affinity_ok(&mut self) -> bool {
        !self.p.anti_domains.iter().any(|b| b.contains(self.node))
    }
    fn affinity_ok(&mut self) -> bool {
        let required = &self.p.fixed.affinity.required;
        if required.is_empty() {
            return true;
        }
        let node = self.node;
        let domains = &self.p.affinity_domains;
        let keys_present = domains.iter().all(|d| d.topology.per_node.get(node).copied().flatten().is_some());
        let pods_in_domains = domains.iter().all(|d| d.contains(node));
        crate::fit::pod_affinity_ok(
            keys_present,
            pods_in_domains,
            self.p.affinity_none_anywhere,
            self.p.fixed.matches_own_affinity,
        )
    }
    fn taint(&self, i: usize) -> Option<&kerf_api::Taint> {
        self.node().taints.get(i)
    }
    fn resource_name(&self, i: usize) -> &str {
        self.p.fixed.requests.iter().nth(i).map(|(k, _)| k.as_str()).unwrap_or("")
    }
}

const CORE: [&str; 3] = [CPU, MEMORY, PODS];

/// cpu (cores) and memory (bytes) of a resource list.
fn cpu_memory_of(list: &ResourceList) -> [f64; 2] {
    [list.get(CPU).as_f64(), list.get(MEMORY).as_f64()]
}

fn core_of(list: &ResourceList) -> [i128; 3] {
    CORE.map(|k| list.get(k).nanos())
}

/// A quantity's nano-units as [`kerf_api::Quantity::as_f64`] reads them.
fn nanos_f64(nanos: i128) -> f64 {
    kerf_api::Quantity::from_nanos(nanos, kerf_api::quantity::Format::DecimalSI).as_f64()
}

/// Pods being deleted no longer count in spread or affinity.
fn is_live(p: &SlimPod) -> bool {
    p.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use kerf_api::Taint;

    const Z: &str = "topology.kubernetes.io/zone";

    fn three_zone_nodes() -> Vec<ExistingNode> {
        ["a", "b", "c"]
            .iter()
            .map(|z| node(&format!("n-{z}"), &[(Z, z)], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "10")]))
            .collect()
    }

    fn reason(r: Result<(), Unfit>) -> String {
        r.err().map(|u| u.reason).unwrap_or_else(|| "fits".into())
    }

    #[test]
    fn a_workloads_replicas_share_one_request_list_in_the_view() {
        let mut n = node("n", &[], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "10")]);
        n.pods.push(pod("web-1").cpu("1").memory("1Gi").build());
        n.pods.push(pod("web-2").cpu("1").memory("1Gi").build());
        let mut v = ClusterView::new(vec![n]);
        v.add_pod(0, pod("web-3").cpu("1").memory("1Gi").build());
        v.add_pod(0, pod("db-1").cpu("2").memory("1Gi").build());
        let lists = &v.pod_requests[0];
        assert!(Arc::ptr_eq(&lists[0], &lists[1]) && Arc::ptr_eq(&lists[0], &lists[2]));
        assert!(!Arc::ptr_eq(&lists[0], &lists[3]));
        assert_eq!(v.requested(0).get("cpu").to_string(), "5");
    }

    #[test]
    fn resources_include_pod_count_and_extended_resources() {
        let mut n = node("n", &[], &[("cpu", "2"), ("memory", "4Gi"), ("pods", "1")]);
        n.pods.push(pod("existing").cpu("1500m").build());
        let v = ClusterView::new(vec![n]);
        assert_eq!(reason(v.check(&pod("p").cpu("1").build(), 0)), "Insufficient cpu");
        let v = ClusterView::new(vec![node("n", &[], &[("cpu", "2"), ("pods", "1")])]);
        assert_eq!(
            reason(v.check(&pod("p").request("vpc.amazonaws.com/pod-eni", "1").build(), 0)),
            "Insufficient vpc.amazonaws.com/pod-eni"
        );
        let mut v = ClusterView::new(vec![node("n", &[], &[("cpu", "2"), ("pods", "1")])]);
        v.add_pod(0, pod("x").build());
        assert_eq!(reason(v.check(&pod("p").build(), 0)), "Too many pods");
    }

    #[test]
    fn node_selector_and_required_affinity_terms_are_alternatives() {
        let v = ClusterView::new(three_zone_nodes());
        let p = pod("p").required_term(&[(Z, "In", &["a"])]).required_term(&[(Z, "In", &["c"])]).build();
        assert_eq!(v.feasible_nodes(&p), vec![0, 2]);
        let p = pod("p").node_selector(Z, "b").build();
        assert_eq!(v.feasible_nodes(&p), vec![1]);
        assert_eq!(reason(v.check(&p, 0)), NODE_AFFINITY);
    }

    #[test]
    fn untolerated_no_schedule_and_no_execute_taints_block_prefer_no_schedule_does_not() {
        let mut nodes = three_zone_nodes();
        nodes[0].taints.push(Taint::new("dedicated", Some("gpu"), TaintEffect::NoSchedule));
        nodes[1].taints.push(Taint::new("evict", None, TaintEffect::NoExecute));
        nodes[2].taints.push(Taint::new("soft", None, TaintEffect::PreferNoSchedule));
        let v = ClusterView::new(nodes);
        let p = pod("p").build();
        assert_eq!(reason(v.check(&p, 0)), "node(s) had untolerated taint {dedicated: gpu}");
        assert_eq!(reason(v.check(&p, 1)), "node(s) had untolerated taint {evict: }");
        assert!(v.check(&p, 2).is_ok());
        let tolerant = pod("p").toleration("dedicated", Some("gpu"), Some("NoSchedule")).build();
        assert!(v.check(&tolerant, 0).is_ok());
        assert!(v.preference_score(&p, 2) < v.preference_score(&tolerant, 0));
    }

    #[test]
    fn unschedulable_nodes_and_host_ports() {
        let mut nodes = three_zone_nodes();
        nodes[0].schedulable = false;
        let mut v = ClusterView::new(nodes);
        v.add_pod(1, pod("web").host_port(80).build());
        let p = pod("p").host_port(80).build();
        assert_eq!(reason(v.check(&p, 0)), UNSCHEDULABLE);
        assert_eq!(reason(v.check(&p, 1)), HOST_PORTS);
        assert!(v.check(&p, 2).is_ok());
    }

    #[test]
    fn zone_spread_with_max_skew_1_rejects_the_fuller_zone() {
        let mut v = ClusterView::new(three_zone_nodes());
        v.add_pod(0, pod("w1").label("app", "w").build());
        v.add_pod(1, pod("w2").label("app", "w").build());
        let p = pod("p").label("app", "w").spread(Z, 1, &[("app", "w")]).build();
        assert_eq!(v.feasible_nodes(&p), vec![2]);
        assert_eq!(reason(v.check(&p, 0)), SPREAD);
    }

    #[test]
    fn spread_min_domains_not_met_treats_the_minimum_as_zero() {
        // Two zones only, one pod in each; minDomains 3 makes the global minimum 0, so skew 1+1.
        let mut v = ClusterView::new(three_zone_nodes()[..2].to_vec());
        v.add_pod(0, pod("w1").label("app", "w").build());
        v.add_pod(1, pod("w2").label("app", "w").build());
        let c = TopologySpreadConstraint {
            topology_key: Z.into(),
            max_skew: 1,
            min_domains: Some(3),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(&[("app", "w")])),
            ..Default::default()
        };
        let p = pod("p").label("app", "w").spread_with(c.clone()).build();
        assert!(v.feasible_nodes(&p).is_empty());
        let p = pod("p").label("app", "w").spread_with(TopologySpreadConstraint { min_domains: None, ..c }).build();
        assert_eq!(v.feasible_nodes(&p), vec![0, 1]);
    }

    #[test]
    fn node_affinity_policy_honor_ignores_unreachable_domains_ignore_counts_them() {
        // Zone c has no matching pods but the pod cannot go there (node selector): with Honor it
        // does not pull the minimum down, with Ignore it does.
        let mut nodes = three_zone_nodes();
        nodes[0].labels.to_mut().insert("pool".into(), "x".into());
        nodes[1].labels.to_mut().insert("pool".into(), "x".into());
        let mut v = ClusterView::new(nodes);
        v.add_pod(0, pod("w1").label("app", "w").build());
        let c = TopologySpreadConstraint {
            topology_key: Z.into(),
            max_skew: 1,
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(&[("app", "w")])),
            ..Default::default()
        };
        let honor = pod("p").label("app", "w").node_selector("pool", "x").spread_with(c.clone()).build();
        assert_eq!(v.feasible_nodes(&honor), vec![1]);
        v.add_pod(1, pod("w2").label("app", "w").build());
        assert_eq!(v.feasible_nodes(&honor), vec![0, 1]);
        let ignore = pod("p")
            .label("app", "w")
            .node_selector("pool", "x")
            .spread_with(TopologySpreadConstraint { node_affinity_policy: Some("Ignore".into()), ..c })
            .build();
        assert!(v.feasible_nodes(&ignore).is_empty());
    }

    #[test]
    fn node_without_the_topology_key_fails_spread() {
        let v = ClusterView::new(vec![node("bare", &[], &[("cpu", "1"), ("pods", "5")])]);
        let p = pod("p").label("app", "w").spread(Z, 1, &[("app", "w")]).build();
        assert_eq!(reason(v.check(&p, 0)), SPREAD_MISSING_LABEL);
    }

    #[test]
    fn pod_affinity_first_pod_may_go_anywhere_then_follows() {
        let mut v = ClusterView::new(three_zone_nodes());
        let p = pod("p").label("app", "db").pod_affinity(Z, &[("app", "db")]).build();
        assert_eq!(v.feasible_nodes(&p), vec![0, 1, 2]);
        v.add_pod(1, pod("db-0").label("app", "db").build());
        assert_eq!(v.feasible_nodes(&p), vec![1]);
        assert_eq!(reason(v.check(&p, 0)), POD_AFFINITY);
        // Not matching its own term: with no match anywhere nothing fits.
        let other = ClusterView::new(three_zone_nodes());
        let q = pod("q").label("app", "web").pod_affinity(Z, &[("app", "db")]).build();
        assert!(other.feasible_nodes(&q).is_empty());
    }

    #[test]
    fn pod_affinity_first_pod_still_needs_every_topology_key_on_the_node() {
        let mut nodes = three_zone_nodes();
        nodes.push(node("bare", &[], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "10")]));
        let v = ClusterView::new(nodes);
        let p = pod("p").label("app", "db").pod_affinity(Z, &[("app", "db")]).build();
        assert_eq!(v.feasible_nodes(&p), vec![0, 1, 2]);
        assert_eq!(reason(v.check(&p, 3)), POD_AFFINITY);
    }

    #[test]
    fn spread_and_anti_affinity_counts_follow_pods_added_after_the_first_check() {
        let mut v = ClusterView::new(three_zone_nodes());
        let spread = pod("p").label("app", "w").spread(Z, 1, &[("app", "w")]).build();
        let anti = pod("q").label("app", "q").anti_affinity(Z, &[("app", "w")]).build();
        // Counted once here, before any matching pod exists.
        assert_eq!(v.feasible_nodes(&spread), vec![0, 1, 2]);
        assert_eq!(v.feasible_nodes(&anti), vec![0, 1, 2]);
        v.add_pod(0, pod("w1").label("app", "w").build());
        v.add_pod(1, pod("w2").label("app", "w").build());
        v.add_pod(1, pod("other").label("app", "x").build());
        assert_eq!(v.feasible_nodes(&spread), vec![2]);
        assert_eq!(v.feasible_nodes(&anti), vec![2]);
    }

    #[test]
    fn anti_affinity_both_directions() {
        let mut v = ClusterView::new(three_zone_nodes());
        v.add_pod(0, pod("a").label("app", "a").anti_affinity(Z, &[("app", "b")]).build());
        let b = pod("b").label("app", "b").build();
        assert_eq!(reason(v.check(&b, 0)), EXISTING_ANTI_AFFINITY);
        assert!(v.check(&b, 1).is_ok());
        let c = pod("c").label("app", "c").anti_affinity(Z, &[("app", "a")]).build();
        assert_eq!(reason(v.check(&c, 0)), POD_ANTI_AFFINITY);
        assert_eq!(v.feasible_nodes(&c), vec![1, 2]);
        // Other namespaces are not matched by default.
        let d = pod("d").namespace("other").label("app", "b").build();
        assert!(v.check(&d, 0).is_ok());
    }

    #[test]
    fn volume_zone_conflict() {
        let mut vols = BTreeMap::new();
        vols.insert(
            "default/data".to_string(),
            vec![Requirements::from_node_selector(&[req(Z, kerf_api::Operator::In, &["b"])])],
        );
        let v = ClusterView::new(three_zone_nodes()).with_volumes(vols);
        let p = pod("p").pvc("data").build();
        assert_eq!(v.feasible_nodes(&p), vec![1]);
        assert_eq!(reason(v.check(&p, 0)), VOLUME_ZONE);
    }

    #[test]
    fn preferred_node_affinity_scores_matching_nodes_higher() {
        let v = ClusterView::new(three_zone_nodes());
        let p = pod("p").preferred_term(10, &[(Z, "In", &["b"])]).preferred_term(5, &[(Z, "In", &["c"])]).build();
        let scores: Vec<i64> = (0..3).map(|i| v.preference_score(&p, i)).collect();
        assert_eq!(scores, vec![0, 10, 5]);
    }

    #[test]
    fn preference_scores_count_matching_pods_per_domain_and_follow_added_pods() {
        let mut v = ClusterView::new(three_zone_nodes());
        v.add_pod(0, pod("w1").label("app", "w").build());
        v.add_pod(0, pod("w2").label("app", "w").build());
        v.add_pod(1, pod("w3").label("app", "w").build());
        v.add_pod(1, pod("db").label("app", "db").build());
        let p = pod("p")
            .label("app", "w")
            .preferred_anti_affinity(10, Z, &[("app", "w")])
            .preferred_pod_affinity(3, Z, &[("app", "db")])
            .build();
        // Zone a: 2 of w; zone b: 1 of w and 1 db; zone c: none.
        assert_eq!(v.preference_scores(&p, &[0, 1, 2]), vec![-20, -7, 0]);
        // Counted once above; a pod added later is counted in its domain.
        v.add_pod(2, pod("w4").label("app", "w").build());
        v.add_pod(2, pod("w5").label("app", "w").namespace("other").build());
        assert_eq!(v.preference_scores(&p, &[2, 0]), vec![-10, -20]);
        assert_eq!(v.preference_score(&p, 1), -7);
    }

    #[test]
    fn a_pod_removed_again_leaves_the_view_as_before_it_was_added() {
        let mut v = ClusterView::new(three_zone_nodes());
        v.add_pod(0, pod("w1").label("app", "w").build());
        let p = pod("p")
            .label("app", "w")
            .request("cpu", "3")
            .preferred_anti_affinity(10, Z, &[("app", "w")])
            .anti_affinity(Z, &[("app2", "x")])
            .build();
        let scores = v.preference_scores(&p, &[0, 1, 2]);
        let fits: Vec<bool> = (0..3).map(|i| v.check(&p, i).is_ok()).collect();
        // A nominated pod holds its room in zone b, then gives it back.
        let held = pod("held").label("app", "w").label("app2", "x").request("cpu", "2").build();
        v.add_pod(1, held.clone());
        assert_ne!(v.preference_scores(&p, &[0, 1, 2]), scores);
        assert!(v.check(&p, 1).is_err(), "the held room is taken");
        assert!(v.remove_pod(1, &held));
        assert!(!v.remove_pod(1, &held), "only once");
        assert_eq!(v.preference_scores(&p, &[0, 1, 2]), scores);
        assert_eq!((0..3).map(|i| v.check(&p, i).is_ok()).collect::<Vec<_>>(), fits);
        assert_eq!(v.requested(1).get("cpu").as_f64(), 0.0);
    }

    #[test]
    fn anti_affinity_namespace_selector_uses_namespace_labels() {
        use k8s_openapi::api::core::v1::{PodAffinityTerm, PodAntiAffinity};
        let term = PodAffinityTerm {
            topology_key: Z.into(),
            label_selector: Some(selector(&[("app", "db")])),
            namespace_selector: Some(selector(&[("team", "red")])),
            ..Default::default()
        };
        let mut p = (*pod("p").label("app", "web").build()).clone();
        p.spec.as_mut().unwrap().affinity = Some(k8s_openapi::api::core::v1::Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term]),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut ns = BTreeMap::new();
        ns.insert("red-ns".to_string(), labels(&[("team", "red")]));
        ns.insert("blue-ns".to_string(), labels(&[("team", "blue")]));
        let mut v = ClusterView::new(three_zone_nodes()).with_namespace_labels(ns);
        v.add_pod(0, pod("db1").namespace("red-ns").label("app", "db").build());
        v.add_pod(1, pod("db2").namespace("blue-ns").label("app", "db").build());
        assert_eq!(v.feasible_nodes(&p), vec![1, 2]);
    }

    #[test]
    fn spread_counts_kept_per_domain_follow_pods_and_hidden_nodes_as_a_fresh_count_does() {
        let mut nodes: Vec<ExistingNode> = (0..6)
            .map(|i| {
                let z = ["a", "b", "c"][i % 3];
                node(&format!("n{i}"), &[(Z, z)], &[("cpu", "8"), ("memory", "16Gi"), ("pods", "20")])
            })
            .collect();
        nodes.push(node("bare", &[], &[("cpu", "8"), ("pods", "20")]));
        let mut v = ClusterView::new(nodes);
        let zone = pod("p").label("app", "w").spread(Z, 1, &[("app", "w")]).build();
        let host = pod("p").label("app", "w").spread("kubernetes.io/hostname", 1, &[("app", "w")]).build();
        // Counted once here; kept from now on.
        assert_eq!(v.feasible_nodes(&zone), vec![0, 1, 2, 3, 4, 5]);
        let mut added = Vec::new();
        for (step, n) in [0usize, 0, 3, 1, 4, 6, 2, 0].into_iter().enumerate() {
            let p = pod(&format!("w{step}")).label("app", "w").build();
            v.add_pod(n, Arc::clone(&p));
            added.push((n, p));
            if step == 2 {
                v.set_hidden(1, true);
            }
            if step == 4 {
                v.set_hidden(0, true);
                let (n, p) = added.remove(0);
                assert!(v.remove_pod(n, &p));
            }
            if step == 6 {
                v.set_hidden(1, false);
            }
            let mut fresh = ClusterView::new(v.nodes().to_vec());
            (0..v.nodes().len()).for_each(|i| fresh.set_hidden(i, v.is_hidden(i)));
            for p in [&zone, &host] {
                let verdicts = |view: &ClusterView| {
                    let pp = view.prepare(p);
                    (0..view.nodes().len())
                        .map(|i| view.check_prepared(&pp, i).map_err(|u| u.reason))
                        .collect::<Vec<_>>()
                };
                assert_eq!(verdicts(&v), verdicts(&fresh), "step {step}");
            }
        }
    }

    #[test]
    fn spread_match_label_keys_count_only_the_same_revision() {
        let mut v = ClusterView::new(three_zone_nodes());
        for (i, z) in [0usize, 0, 1].iter().enumerate() {
            v.add_pod(*z, pod(&format!("old{i}")).label("app", "w").label("rev", "1").build());
        }
        let c = TopologySpreadConstraint {
            topology_key: Z.into(),
            max_skew: 1,
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(&[("app", "w")])),
            match_label_keys: Some(vec!["rev".into()]),
            ..Default::default()
        };
        // A new revision ignores the old pods: every zone is empty for it.
        let p = pod("new").label("app", "w").label("rev", "2").spread_with(c.clone()).build();
        assert_eq!(v.feasible_nodes(&p), vec![0, 1, 2]);
        let same = pod("old").label("app", "w").label("rev", "1").spread_with(c).build();
        assert_eq!(v.feasible_nodes(&same), vec![2]);
    }
}
