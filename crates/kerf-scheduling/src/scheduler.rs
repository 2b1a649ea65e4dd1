//! The provisioning Scheduler and its prepared state, the [`SchedulingContext`]: places a batch
//! of pending pods onto existing nodes, in-flight NodeClaims and new NodeClaims, explains every
//! pod it cannot place, and answers consolidation's what-ifs.
//!
//! # The context and its queries
//!
//! [`SchedulingContext::new`] takes a [`SchedulingInput`] and does every piece of setup once:
//! the pools with their instance-type tables and daemonset overhead, the parsed facts of every
//! pod (pending ones and the ones on existing nodes: requests, affinities, ports, volumes),
//! interned topology values, and the topology counters over the existing pods. Build one per
//! cluster change, then ask it as often as needed; each query records what it changes and puts
//! it back when it ends, so a query costs what it places, not what the cluster holds.
//!
//! - [`SchedulingContext::place_pending`] places `input.pods` — what provisioning does;
//!   [`schedule`] is `SchedulingContext::new(input).place_pending()`.
//! - [`SchedulingContext::without_nodes`]`(&[name, ...]) -> Result<WhatIf, UnknownNode>` is
//!   consolidation's question: "if these nodes were gone, where would their pods go?". The named
//!   nodes (existing nodes or in-flight claims) take no pods, their pods leave every topology
//!   count (spread, pod affinity and anti-affinity), and the pods that would have to move (not
//!   DaemonSet, mirror, finished or terminating pods) are placed as a batch — onto the remaining
//!   nodes first, then onto new NodeClaims of the pools, with the same rules, relaxations and
//!   retries as provisioning. A topology domain that only the removed nodes provided (and no
//!   pool can launch) no longer counts. The [`WhatIf`] says, by index into `WhatIf::pods`, which
//!   pods fit on which remaining node, which new NodeClaims (with their compatible instance
//!   types, cheapest first, and the price of the cheapest offering) the rest would need, and
//!   which fit nowhere. [`WhatIf::deletable`]: every pod fits on the remaining nodes.
//!   [`WhatIf::single_replacement_price`]: exactly one new claim holds the rest — the caller
//!   replaces only when that price is strictly below the removed nodes' price (and applies its
//!   own rules: spot-to-spot, budgets, PDBs, do-not-disrupt). No pod is explained in a what-if.
//!   [`SchedulingContext::without_node_indexes`] is the same by node index
//!   ([`SchedulingContext::node_index`], [`SchedulingContext::node_names`]) for callers that
//!   evaluate many candidates.
//!
//! Queries take `&mut self` (caches grow, state is changed and restored) but leave the context
//! answering exactly as before.
//!
//! # Design for speed
//!
//! Pods with identical constraints form a group whose constraint data (requirements, spread
//! domains, counters) is computed once; label values are interned so topology counts are
//! vectors indexed by domain id; a claim's candidate instance types are a bitset; requirement
//! intersections and type compatibility are cached per interned requirements; resources are
//! dense integer vectors; claims that cannot take any remaining pod are dropped from the scan,
//! and each group keeps a cursor past the claims it can never use.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_POOL, ZONE};
use kerf_api::resources::{CPU, MEMORY, PODS};
use kerf_api::{NodePool, Operator, Quantity, ResourceList, Taint, TaintEffect};

use crate::instance::InstanceType;
use crate::model::{
    NewNodeClaim, Placement, PodError, PricedClaim, SchedulingInput, SchedulingResult, UnknownNode, WhatIf,
};
use crate::pod::{self, AffinityTerm, HostPort, Namespaces, SpreadConstraint};
use crate::requirements::{Requirement, Requirements};

/// Places `input.pods`; see the module documentation. A thin wrapper: builds a
/// [`SchedulingContext`] for the input and places its pending pods.
pub fn schedule(input: &SchedulingInput) -> SchedulingResult {
    SchedulingContext::new(input.clone()).place_pending()
}

// ---------------------------------------------------------------------------------------------
// Small building blocks

/// Interned strings (label values, used as topology domain ids).
#[derive(Default)]
struct Interner {
    ids: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(id) = self.ids.get(s) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.into());
        self.ids.insert(s.into(), id);
        id
    }
    fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// A set of instance types (indexes into a pool's type list).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn empty(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn and(&self, other: &Bits) -> Bits {
        Bits(self.0.iter().zip(&other.0).map(|(a, b)| a & b).collect())
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, w)| {
            let mut w = *w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + b)
            })
        })
    }
    fn first(&self) -> Option<usize> {
        self.0.iter().enumerate().find(|(_, w)| **w != 0).map(|(wi, w)| wi * 64 + w.trailing_zeros() as usize)
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
}

/// Resource names of this pass, so resource lists become dense `i64` vectors (cpu in
/// millicores, everything else in whole units, as kube-scheduler compares them).
struct Resources {
    names: Vec<String>,
    index: HashMap<String, usize>,
}

impl Resources {
    fn dense(&self, list: &ResourceList) -> Vec<i64> {
        let mut v = vec![0i64; self.names.len()];
        for (k, q) in list.iter() {
            if let Some(i) = self.index.get(k) {
                v[*i] = to_units(k, q);
            }
        }
        v
    }
    fn list(&self, v: &[i64]) -> ResourceList {
        let mut out = ResourceList::new();
        for (i, n) in self.names.iter().enumerate() {
            if v[i] != 0 {
                out.set(n.clone(), from_units(n, v[i]));
            }
        }
        out
    }
}

fn to_units(name: &str, q: &Quantity) -> i64 {
    if name == CPU { q.milli_ceil() } else { q.value_ceil() }
}

fn from_units(name: &str, v: i64) -> Quantity {
    if name == CPU {
        Quantity::from_milli(v)
    } else if name == MEMORY || name.ends_with("storage") || name.starts_with("hugepages-") {
        Quantity::from_bytes(v)
    } else {
        Quantity::from_units(v)
    }
}

fn type_fits(requests: &[i64], alloc: &[i64]) -> bool {
    requests.iter().zip(alloc).all(|(r, a)| *r == 0 || r <= a)
}

// ---------------------------------------------------------------------------------------------
// Pools, groups, counters

struct Pool {
    name: String,
    node_pool: Arc<NodePool>,
    /// Pool requirements plus template labels plus `karpenter.sh/nodepool In [name]`.
    reqs: Requirements,
    /// Keys the pool itself defines (requirements or template labels).
    defined_keys: BTreeSet<String>,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    startup_taints: Vec<Taint>,
    /// Sorted by cheapest available offering, then name.
    types: Vec<Arc<InstanceType>>,
    /// Flat: type × resource.
    alloc: Vec<i64>,
    capacity: Vec<i64>,
    /// Componentwise largest capacity and free allocatable (after DaemonSets) over the types.
    max_capacity: Vec<i64>,
    max_alloc: Vec<i64>,
    /// Keys some instance type labels (plus zone and capacity type from offerings).
    type_keys: BTreeSet<String>,
    /// Flat: type × resource. The requests of the DaemonSet pods that would run on each type,
    /// and what is left for other pods (`alloc - overhead`; a type too small for its
    /// DaemonSets has a negative pod count).
    overhead: Vec<i64>,
    free: Vec<i64>,
    /// Host ports of the DaemonSets that run on some type of the pool: taken on every new claim.
    daemon_ports: Vec<HostPort>,
    /// Remaining limit per resource (`i64::MAX` when unlimited) and node count.
    remaining: Vec<i64>,
    nodes_remaining: i64,
    limited: bool,
    min_values: Vec<(String, usize)>,
}

/// A counter of pods matching a selector (and every one of `also`), per topology domain.
struct Counter {
    key: String,
    selector: Option<LabelSelector>,
    namespaces: Namespaces,
    /// Further terms a pod must match to count: the other terms of a pod's required affinity,
    /// since kube-scheduler counts, in each term's domain, the pods that match all of them.
    also: Vec<(Option<LabelSelector>, Namespaces)>,
    counts: Vec<i64>,
    total: i64,
}

impl Counter {
    fn get(&self, d: u32) -> i64 {
        self.counts.get(d as usize).copied().unwrap_or(0)
    }
    fn add(&mut self, d: u32, delta: i64) {
        let i = d as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += delta;
        self.total += delta;
    }
    fn matches(&self, p: &Pod, ns_labels: &BTreeMap<String, BTreeMap<String, String>>) -> bool {
        let term = |selector: &Option<LabelSelector>, namespaces: &Namespaces| AffinityTerm {
            topology_key: self.key.clone(),
            selector: selector.clone(),
            namespaces: namespaces.clone(),
            weight: 0,
        };
        term(&self.selector, &self.namespaces).matches(p, ns_labels)
            && self.also.iter().all(|(s, n)| term(s, n).matches(p, ns_labels))
    }
}

/// Pod affinity terms that hold together: for each term, the candidate's domain must hold a pod
/// matching every term of the set, unless no pod anywhere does and the pod itself matches them
/// all (the first of its kind may go anywhere its topology keys exist).
#[derive(Clone)]
struct AffinitySet {
    /// One counter per term: pods matching every term of the set, in that term's domains.
    counters: Vec<usize>,
    matches_own: bool,
}

/// Domains where pods matching an anti-affinity term are not allowed: per domain, how many
/// pods holding the term are there (a count, so a what-if can take a pod away again).
struct Inverse {
    key: String,
    selector: Option<LabelSelector>,
    namespaces: Namespaces,
    blocked: Vec<i64>,
}

impl Inverse {
    fn is_blocked(&self, d: u32) -> bool {
        self.blocked.get(d as usize).copied().unwrap_or(0) > 0
    }
    fn block(&mut self, d: u32, delta: i64) {
        let i = d as usize;
        if self.blocked.len() <= i {
            self.blocked.resize(i + 1, 0);
        }
        self.blocked[i] += delta;
    }
}

#[derive(Clone)]
struct SpreadPlan {
    counter: usize,
    key: String,
    max_skew: i64,
    self_match: i64,
    min_domains: Option<i64>,
    /// Domains the pod could land in (sorted).
    domains: Vec<u32>,
    /// Per domain: how many existing nodes are in it, and whether a NodePool can launch in it
    /// (a what-if that removes every node of a domain no pool offers removes the domain).
    node_support: Vec<u32>,
    from_pool: Vec<bool>,
    /// A new node is a fresh, empty domain (hostname): the minimum is 0.
    fresh: bool,
}

#[derive(Clone)]
struct Level {
    /// The pod's node requirements at this level.
    req: u32,
    name_field: Option<Requirement>,
    tolerate_prefer: bool,
    spreads: Vec<SpreadPlan>,
    /// The required affinity terms as one set, and each still-preferred term as a set of its own.
    affinity: Vec<AffinitySet>,
    anti: Vec<usize>,
    /// Relaxation state that produced this level.
    state: Relax,
    /// Human description of what was relaxed to reach this level.
    relaxed: Option<String>,
}

#[derive(Clone, Copy, Default)]
struct Relax {
    term: usize,
    pref_affinity: usize,
    pref_anti: usize,
    pref_node: usize,
    soft_spread: usize,
    tolerate_prefer: bool,
}

struct Group {
    rep: Arc<Pod>,
    tolerations: Vec<Toleration>,
    terms: Vec<Requirements>,
    name_fields: Vec<Option<Requirement>>,
    pref_node: Vec<(i32, Requirements)>,
    hard_spread: Vec<SpreadConstraint>,
    soft_spread: Vec<SpreadConstraint>,
    affinity: Vec<AffinityTerm>,
    anti: Vec<AffinityTerm>,
    pref_affinity: Vec<AffinityTerm>,
    pref_anti: Vec<AffinityTerm>,
    ports: Vec<HostPort>,
    volume: Option<Requirements>,
    volume_alts: Vec<Vec<Requirements>>,
    /// Why a volume the pods mount cannot be resolved (they are not placed).
    unresolvable: Option<String>,
    /// Counters this group's pods count toward.
    counted_by: Vec<usize>,
    /// Anti-affinity terms (of others) that reject this group's pods.
    rejected_by: Vec<usize>,
    /// This group's own required anti-affinity terms, as inverse ids.
    own_inverse: Vec<usize>,
    levels: Vec<Arc<Level>>,
    /// Per level, per existing node: taints, node affinity and volume zones allow it.
    node_ok: Vec<Vec<bool>>,
    exhausted: bool,
    /// Claims before this index never accept this group (level 0).
    cursor: usize,
}

struct Node {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    alloc: Vec<i64>,
    used: Vec<i64>,
    ports: Vec<HostPort>,
    schedulable: bool,
    /// The node's pods, by context index.
    pods: Vec<usize>,
}

struct Claim {
    pool: usize,
    req: u32,
    types: Bits,
    requests: Vec<i64>,
    pods: Vec<usize>,
    hostname: u32,
    ports: Vec<HostPort>,
    reserved: Vec<i64>,
    /// Componentwise largest allocatable over the candidate types (a quick reject).
    max_alloc: Vec<i64>,
    open: bool,
}

/// A bin: an existing node (index) or a claim (index).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bin {
    Node(usize),
    Claim(usize),
}

/// The fit check's questions about pod `pi` (group `g`, level `l`) on existing node `n`,
/// answered from the context's state. `static_ok`: the level's cached taint, node affinity and
/// volume verdict for the node (only a failing node re-asks which one failed).
struct NodeFit<'s> {
    s: &'s SchedulingContext,
    pi: usize,
    g: usize,
    l: usize,
    n: usize,
    static_ok: bool,
}

impl NodeFit<'_> {
    fn level(&self) -> &Level {
        &self.s.groups[self.g].levels[self.l]
    }
    fn node(&self) -> &Node {
        &self.s.nodes[self.n]
    }
}

impl crate::fit::FitQuery for NodeFit<'_> {
    fn schedulable(&mut self) -> bool {
        self.node().schedulable
    }
    fn node_name_matches(&mut self) -> bool {
        // The Scheduler places pods kube-scheduler has not bound: `spec.nodeName` is unset.
        true
    }
    fn untolerated_taint(&mut self) -> Option<usize> {
        if self.static_ok {
            return None;
        }
        let grp = &self.s.groups[self.g];
        let taints = &self.node().taints;
        let t = pod::untolerated_taint_with(&grp.tolerations, taints, !self.level().tolerate_prefer)?;
        taints.iter().position(|x| std::ptr::eq(x, t))
    }
    fn node_affinity_matches(&mut self) -> bool {
        let level = self.level();
        self.static_ok
            || crate::fit::node_affinity_matches(
                std::slice::from_ref(&self.s.reqs[level.req as usize]),
                std::slice::from_ref(&level.name_field),
                &self.node().name,
                &self.node().labels,
            )
    }
    fn host_ports_free(&mut self) -> bool {
        crate::fit::host_ports_free(&self.s.groups[self.g].ports, &self.node().ports)
    }
    fn short_resource(&mut self) -> Option<usize> {
        let node = self.node();
        crate::fit::short_resource(
            self.s.pod_requests[self.pi].iter().zip(&node.used).zip(&node.alloc).map(|((r, u), a)| (*r, *u, *a)),
        )
    }
    fn volumes_match(&mut self) -> bool {
        self.static_ok || crate::fit::volumes_match(&self.s.groups[self.g].volume_alts, &self.node().labels)
    }
    fn spread(&mut self) -> Result<(), crate::fit::Why> {
        for (i, sp) in self.level().spreads.iter().enumerate() {
            let d = self.s.node_domain(self.n, &sp.key).ok_or(crate::fit::Why::SpreadMissingLabel)?;
            if !self.s.spread_allows(sp, d) {
                return Err(crate::fit::Why::Spread(i));
            }
        }
        Ok(())
    }
    fn existing_anti_affinity_ok(&mut self) -> bool {
        self.s.groups[self.g].rejected_by.iter().all(|&i| {
            let inv = &self.s.inverses[i];
            self.s.node_domain(self.n, &inv.key).is_none_or(|d| !inv.is_blocked(d))
        })
    }
    fn anti_affinity_ok(&mut self) -> bool {
        self.level().anti.iter().all(|&c| {
            let counter = &self.s.counters[c];
            self.s.node_domain(self.n, &counter.key).is_none_or(|d| counter.get(d) == 0)
        })
    }
    fn affinity_ok(&mut self) -> bool {
        self.level().affinity.iter().all(|set| {
            let (mut keys_present, mut pods_in_domains, mut none_anywhere) = (true, true, true);
            for c in set.counters.iter().map(|c| &self.s.counters[*c]) {
                match self.s.node_domain(self.n, &c.key) {
                    None => (keys_present, pods_in_domains) = (false, false),
                    Some(d) => pods_in_domains &= c.get(d) > 0,
                }
                none_anywhere &= c.total == 0;
            }
            crate::fit::pod_affinity_ok(keys_present, pods_in_domains, none_anywhere, set.matches_own)
        })
    }
    fn taint(&self, i: usize) -> Option<&Taint> {
        self.node().taints.get(i)
    }
    fn resource_name(&self, i: usize) -> &str {
        self.s.res.names.get(i).map(String::as_str).unwrap_or("")
    }
    fn spread_detail(&self, i: usize) -> Option<String> {
        self.level().spreads.get(i).map(|sp| self.s.spread_counts(sp))
    }
}

/// What one placement run did: pods (context indexes) placed on existing nodes, the reasons of
/// the pods it could not place (when asked to explain), and those pods.
#[derive(Default)]
struct Run {
    on_node: Vec<(usize, usize)>,
    errors: Vec<(usize, PodError)>,
    unplaced: Vec<usize>,
}

/// Whether consolidation moves `p` when its node goes: not a DaemonSet's pod (it goes with its
/// node), not a mirror pod, not finished.
fn reschedulable(p: &Pod) -> bool {
    let daemon = p.metadata.owner_references.iter().flatten().any(|o| o.kind == "DaemonSet");
    let mirror = p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let finished =
        p.status.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
    !daemon && !mirror && !finished
}

/// The outcome of trying a pod on a claim: the narrowed requirements and candidate types.
struct ClaimPlan {
    req: u32,
    types: Bits,
}

// ---------------------------------------------------------------------------------------------

/// A pool's instance types (by index) with their cheapest compatible price, cheapest first.
type PriceOrder = Vec<(f64, usize)>;

/// One reversible change to the mutable scheduling state (see [`SchedulingContext`]): every
/// query records what it changes and puts it back when it ends, so the context serves the next
/// query without being rebuilt.
enum Undo {
    /// Pod `pod`'s requests were added to node `node`.
    NodeUsed { node: usize, pod: usize },
    /// Node `node`'s host ports were extended from `len` entries.
    NodePorts { node: usize, len: usize },
    /// `delta` pods were counted in counter `counter`, domain `domain`.
    Count { counter: usize, domain: u32, delta: i64 },
    /// `delta` pods holding inverse term `inverse` were counted in domain `domain`.
    Block { inverse: usize, domain: u32, delta: i64 },
    /// Group `group`'s claim cursor was `old`.
    Cursor { group: usize, old: usize },
    /// Node `node` was taken out of the cluster for a what-if.
    Removed { node: usize, old: bool },
}

/// The scheduling state of one cluster, built once and asked many questions: see the
/// [module documentation](self) and [`SchedulingContext::place_pending`] /
/// [`SchedulingContext::without_nodes`].
pub struct SchedulingContext {
    input: Arc<SchedulingInput>,
    res: Resources,
    values: Interner,
    reqs: Vec<Requirements>,
    /// Whether each interned requirements has a key no node can satisfy.
    unsat: Vec<bool>,
    req_ids: HashMap<Requirements, u32>,
    intersect_cache: HashMap<(u32, u32), u32>,
    narrow_cache: HashMap<(u32, u32, u32), u32>,
    compat_cache: HashMap<(usize, u32), Arc<Bits>>,
    admits_cache: HashMap<(usize, u32, bool, usize), bool>,
    price_cache: HashMap<(usize, u32), Arc<PriceOrder>>,
    pools: Vec<Pool>,
    groups: Vec<Group>,
    counters: Vec<Counter>,
    inverses: Vec<Inverse>,
    nodes: Vec<Node>,
    node_index: HashMap<String, usize>,
    claims: Vec<Claim>,
    /// Open claims in creation order (closed ones are pruned lazily).
    open: Vec<usize>,
    /// Every pod's dense requests: the pending pods (`input.pods`) first, then the pods on
    /// existing nodes (see `existing`).
    pod_requests: Vec<Vec<i64>>,
    pod_group: Vec<usize>,
    /// The pods on existing nodes, indexed from `input.pods.len()`.
    existing: Vec<Arc<Pod>>,
    /// A reusable buffer for a claim's requests plus a pod's.
    scratch: Vec<i64>,
    /// Componentwise minimum request over the pods being placed (a claim that cannot fit it is
    /// closed).
    min_request: Vec<i64>,
    /// Whether any pool or node has a PreferNoSchedule taint (else that relaxation is moot).
    prefer_taints: bool,
    /// What the running query changed (undone when it ends).
    journal: Vec<Undo>,
    /// Pool limits and node counts before the running query.
    pool_limits: Vec<(Vec<i64>, i64)>,
    /// Nodes taken away by the running what-if.
    removed: Vec<usize>,
}

/// A pod's dense requests: the fast path for pods with only regular containers (no
/// intermediate lists), else the full rules of [`pod::pod_requests`].
fn dense_requests(res: &Resources, p: &Pod, full: Option<&ResourceList>) -> Vec<i64> {
    if let Some(r) = full {
        return res.dense(r);
    }
    let mut v = vec![0i64; res.names.len()];
    for c in p.spec.iter().flat_map(|s| &s.containers) {
        let Some(rr) = &c.resources else { continue };
        let requests = rr.requests.as_ref();
        let limits_only = rr.limits.iter().flatten().filter(|(k, _)| requests.is_none_or(|r| !r.contains_key(*k)));
        for (k, q) in requests.into_iter().flatten().chain(limits_only) {
            if let (Some(i), Ok(q)) = (res.index.get(k), Quantity::parse(&q.0)) {
                v[*i] += to_units(k, &q);
            }
        }
    }
    v[res.index[PODS]] = 1;
    v
}

impl SchedulingContext {
    /// Builds the context for `input`: pools with their type tables and daemonset overhead,
    /// existing nodes with their pods counted in every topology counter, and the parsed facts of
    /// every pod (pending and existing).
    pub fn new(input: impl Into<Arc<SchedulingInput>>) -> Self {
        let input: Arc<SchedulingInput> = input.into();
        // Resource names of the whole cluster.
        let mut names: BTreeSet<String> = [CPU, MEMORY, PODS].iter().map(|s| s.to_string()).collect();
        // Pods with only regular containers take a fast path (no intermediate lists).
        let simple = |p: &Pod| {
            p.spec
                .as_ref()
                .is_some_and(|s| s.init_containers.as_ref().is_none_or(Vec::is_empty) && s.overhead.is_none())
        };
        let existing: Vec<Arc<Pod>> = input.existing_nodes.iter().flat_map(|n| n.pods.iter().cloned()).collect();
        let all = || input.pods.iter().chain(&existing);
        let requests: Vec<Option<ResourceList>> =
            all().map(|p| if simple(p) { None } else { Some(pod::pod_requests(p)) }).collect();
        for (p, r) in all().zip(&requests) {
            match r {
                Some(r) => names.extend(r.iter().map(|(k, _)| k.clone())),
                None => {
                    for c in p.spec.iter().flat_map(|s| &s.containers) {
                        let Some(res) = &c.resources else { continue };
                        for k in res.requests.iter().flatten().chain(res.limits.iter().flatten()).map(|(k, _)| k) {
                            if !names.contains(k) {
                                names.insert(k.clone());
                            }
                        }
                    }
                }
            }
        }
        for p in &input.node_pools {
            for t in &p.instance_types {
                names.extend(t.capacity.iter().map(|(k, _)| k.clone()));
            }
        }
        for n in &input.existing_nodes {
            names.extend(n.allocatable.iter().map(|(k, _)| k.clone()));
        }
        for d in &input.daemonset_pods {
            names.extend(pod::pod_requests(d).iter().map(|(k, _)| k.clone()));
        }
        let names: Vec<String> = names.into_iter().collect();
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        let res = Resources { names, index };
        let pod_requests: Vec<Vec<i64>> =
            all().zip(&requests).map(|(p, r)| dense_requests(&res, p, r.as_ref())).collect();
        let values = Interner::default();
        let prefer_taints = input
            .node_pools
            .iter()
            .flat_map(|p| &p.node_pool.spec.template.spec.taints)
            .chain(input.existing_nodes.iter().flat_map(|n| &n.taints))
            .any(|t| t.effect == TaintEffect::PreferNoSchedule);
        let mut s = SchedulingContext {
            input,
            res,
            values,
            reqs: Vec::new(),
            unsat: Vec::new(),
            req_ids: HashMap::new(),
            intersect_cache: HashMap::new(),
            narrow_cache: HashMap::new(),
            compat_cache: HashMap::new(),
            admits_cache: HashMap::new(),
            price_cache: HashMap::new(),
            pools: Vec::new(),
            groups: Vec::new(),
            counters: Vec::new(),
            inverses: Vec::new(),
            nodes: Vec::new(),
            node_index: HashMap::new(),
            claims: Vec::new(),
            open: Vec::new(),
            pod_requests,
            pod_group: Vec::new(),
            existing,
            min_request: Vec::new(),
            scratch: Vec::new(),
            prefer_taints,
            journal: Vec::new(),
            pool_limits: Vec::new(),
            removed: Vec::new(),
        };
        s.build_pools();
        s.build_nodes();
        s.build_groups();
        s.count_existing();
        // The base state is not part of any query.
        s.journal.clear();
        s
    }

    /// The pod with context index `pi` (pending pods first, then existing ones).
    fn pod(&self, pi: usize) -> &Arc<Pod> {
        let batch = self.input.pods.len();
        if pi < batch { &self.input.pods[pi] } else { &self.existing[pi - batch] }
    }

    fn intern_req(&mut self, r: Requirements) -> u32 {
        if let Some(id) = self.req_ids.get(&r) {
            return *id;
        }
        let id = self.reqs.len() as u32;
        for (_, x) in r.iter() {
            if let Some(vals) = x.values() {
                for v in vals {
                    self.values.id(v);
                }
            }
        }
        self.unsat.push(r.unsatisfiable_key().is_some());
        self.reqs.push(r.clone());
        self.req_ids.insert(r, id);
        id
    }

    fn intersect(&mut self, a: u32, b: u32) -> u32 {
        if a == b {
            return a;
        }
        let key = if a < b { (a, b) } else { (b, a) };
        if let Some(id) = self.intersect_cache.get(&key) {
            return *id;
        }
        let r = self.reqs[a as usize].intersect(&self.reqs[b as usize]);
        let id = self.intern_req(r);
        self.intersect_cache.insert(key, id);
        id
    }

    /// `req` with `key In [value]`.
    fn narrow(&mut self, req: u32, key: &str, value: u32) -> u32 {
        let kid = self.values.id(key);
        if let Some(id) = self.narrow_cache.get(&(req, kid, value)) {
            return *id;
        }
        let mut r = self.reqs[req as usize].clone();
        r.add(key, Requirement::single(self.values.name(value).to_string()));
        let id = self.intern_req(r);
        self.narrow_cache.insert((req, kid, value), id);
        id
    }

    fn build_pools(&mut self) {
        let mut pools: Vec<&crate::model::NodePoolInput> = self.input.node_pools.iter().collect();
        pools.sort_by(|a, b| {
            b.node_pool.weight().cmp(&a.node_pool.weight()).then_with(|| a.node_pool.name().cmp(b.node_pool.name()))
        });
        for p in pools {
            let np = &p.node_pool;
            let name = np.name().to_string();
            let tmpl = &np.spec.template;
            let mut reqs = Requirements::from_node_selector(&tmpl.spec.requirements);
            let mut defined_keys: BTreeSet<String> = reqs.keys().cloned().collect();
            for (k, v) in &tmpl.metadata.labels {
                reqs.add(k, Requirement::single(v.clone()));
                defined_keys.insert(kerf_api::labels::normalize_key(k).to_string());
            }
            reqs.add(NODE_POOL, Requirement::single(name.clone()));
            defined_keys.insert(NODE_POOL.to_string());
            let mut types: Vec<Arc<InstanceType>> = p.instance_types.clone();
            let cheapest = |t: &InstanceType| t.cheapest_available().map(|o| o.price).unwrap_or(f64::INFINITY);
            types.sort_by(|a, b| cheapest(a).total_cmp(&cheapest(b)).then_with(|| a.name.cmp(&b.name)));
            let mut alloc = Vec::with_capacity(types.len() * self.res.names.len());
            let mut capacity = Vec::with_capacity(alloc.capacity());
            let mut type_keys: BTreeSet<String> = [ZONE, CAPACITY_TYPE].iter().map(|s| s.to_string()).collect();
            for t in &types {
                alloc.extend(self.res.dense(&t.allocatable()));
                capacity.extend(self.res.dense(&t.capacity));
                type_keys.extend(t.labels.keys().map(|k| kerf_api::labels::normalize_key(k).to_string()));
            }
            // DaemonSet pods that would run on this pool's nodes, per instance type: a DaemonSet
            // whose node affinity excludes a type adds nothing to it.
            let nres = self.res.names.len();
            let mut overhead = vec![0i64; alloc.len()];
            let mut daemon_ports = Vec::new();
            let daemons: Vec<&Arc<Pod>> = self
                .input
                .daemonset_pods
                .iter()
                .filter(|d| pod::untolerated_taint(d, &tmpl.spec.taints).is_none())
                .collect();
            if !daemons.is_empty() {
                let type_reqs: Vec<Requirements> = types.iter().map(|t| type_requirements(&reqs, t)).collect();
                for d in daemons {
                    let terms = pod::required_node_terms(d);
                    let requests = self.res.dense(&pod::pod_requests(d));
                    let mut runs_somewhere = false;
                    for (ti, treq) in type_reqs.iter().enumerate() {
                        let runs = terms
                            .iter()
                            .any(|t| treq.compatible_strict(t, |k| type_keys.contains(k) || k == HOSTNAME).is_ok());
                        if runs {
                            runs_somewhere = true;
                            for (o, v) in overhead[ti * nres..(ti + 1) * nres].iter_mut().zip(&requests) {
                                *o += v;
                            }
                        }
                    }
                    if runs_somewhere {
                        daemon_ports.extend(pod::host_ports(d));
                    }
                }
            }
            // What pods can use on each type once its DaemonSets run; a type too small for
            // its DaemonSets takes no pod.
            let mut free: Vec<i64> = alloc.iter().zip(&overhead).map(|(a, o)| a - o).collect();
            let pods_index = self.res.index[PODS];
            for chunk in free.chunks_mut(nres.max(1)) {
                if chunk.iter().any(|v| *v < 0) {
                    chunk[pods_index] = -1;
                }
            }
            let nres = self.res.names.len();
            let mut max_capacity = vec![0i64; nres];
            for chunk in capacity.chunks(nres.max(1)) {
                for (m, v) in max_capacity.iter_mut().zip(chunk) {
                    *m = (*m).max(*v);
                }
            }
            let mut max_alloc = vec![0i64; nres];
            for chunk in free.chunks(nres.max(1)) {
                for (m, v) in max_alloc.iter_mut().zip(chunk) {
                    *m = (*m).max(*v);
                }
            }
            let limited = np.spec.limits.is_some();
            let mut remaining = vec![i64::MAX; self.res.names.len()];
            let mut nodes_remaining = i64::MAX;
            if let Some(limits) = &np.spec.limits {
                for (k, q) in limits.iter() {
                    let used = p.in_use.get(k);
                    if k == "nodes" {
                        nodes_remaining = q.value_ceil() - used.value_ceil();
                    } else if let Some(i) = self.res.index.get(k) {
                        remaining[*i] = to_units(k, q) - to_units(k, &used);
                    }
                }
            }
            let min_values = reqs
                .iter()
                .filter_map(|(k, r)| r.min_values.filter(|m| *m > 0).map(|m| (k.clone(), m as usize)))
                .collect();
            self.pools.push(Pool {
                name,
                node_pool: np.clone(),
                reqs,
                defined_keys,
                labels: tmpl.metadata.labels.clone(),
                taints: tmpl.spec.taints.clone(),
                startup_taints: tmpl.spec.startup_taints.clone(),
                types,
                alloc,
                capacity,
                max_capacity,
                max_alloc,
                type_keys,
                free,
                overhead,
                daemon_ports,
                remaining,
                nodes_remaining,
                limited,
                min_values,
            });
        }
    }

    fn build_nodes(&mut self) {
        // Each existing node's pods, by context index.
        let mut first = Vec::with_capacity(self.input.existing_nodes.len());
        let mut next = self.input.pods.len();
        for n in &self.input.existing_nodes {
            first.push(next);
            next += n.pods.len();
        }
        // Initialized nodes first, then in-flight claims (stable).
        let mut order: Vec<usize> = (0..self.input.existing_nodes.len()).collect();
        order.sort_by_key(|i| self.input.existing_nodes[*i].in_flight);
        let input = Arc::clone(&self.input);
        for i in order {
            let n = &input.existing_nodes[i];
            let mut used = vec![0i64; self.res.names.len()];
            let mut ports = Vec::new();
            let pods: Vec<usize> = (first[i]..first[i] + n.pods.len()).collect();
            for (&pi, p) in pods.iter().zip(&n.pods) {
                for (u, v) in used.iter_mut().zip(&self.pod_requests[pi]) {
                    *u += v;
                }
                ports.extend(pod::host_ports(p));
            }
            let mut labels: BTreeMap<String, String> = n.labels.clone();
            labels.entry(HOSTNAME.to_string()).or_insert_with(|| n.name.clone());
            for v in labels.values() {
                self.values.id(v);
            }
            self.node_index.insert(n.name.clone(), self.nodes.len());
            self.nodes.push(Node {
                name: n.name.clone(),
                labels,
                taints: n.taints.clone(),
                alloc: self.res.dense(&n.allocatable),
                used,
                ports,
                schedulable: n.schedulable,
                pods,
            });
        }
    }

    fn counter_id(&mut self, key: &str, selector: &Option<LabelSelector>, namespaces: &Namespaces) -> usize {
        self.counter_id_with(key, selector, namespaces, Vec::new())
    }

    fn counter_id_with(
        &mut self,
        key: &str,
        selector: &Option<LabelSelector>,
        namespaces: &Namespaces,
        also: Vec<(Option<LabelSelector>, Namespaces)>,
    ) -> usize {
        if let Some(i) = self
            .counters
            .iter()
            .position(|c| c.key == key && c.selector == *selector && c.namespaces == *namespaces && c.also == also)
        {
            return i;
        }
        self.counters.push(Counter {
            key: key.to_string(),
            selector: selector.clone(),
            namespaces: namespaces.clone(),
            also,
            counts: Vec::new(),
            total: 0,
        });
        self.counters.len() - 1
    }

    /// The counter of term `i` of an affinity set: pods matching every term, in term `i`'s
    /// domains (a plain per-term counter when the set has one term).
    fn set_counter_id(&mut self, terms: &[AffinityTerm], i: usize) -> usize {
        let also = terms
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, t)| (t.selector.clone(), t.namespaces.clone()))
            .collect();
        let t = &terms[i];
        self.counter_id_with(&t.topology_key, &t.selector, &t.namespaces, also)
    }

    fn inverse_id(&mut self, t: &AffinityTerm) -> usize {
        if let Some(i) = self
            .inverses
            .iter()
            .position(|c| c.key == t.topology_key && c.selector == t.selector && c.namespaces == t.namespaces)
        {
            return i;
        }
        self.inverses.push(Inverse {
            key: t.topology_key.clone(),
            selector: t.selector.clone(),
            namespaces: t.namespaces.clone(),
            blocked: Vec::new(),
        });
        self.inverses.len() - 1
    }

    fn build_groups(&mut self) {
        let mut buckets: HashMap<u64, Vec<usize>> = HashMap::new();
        let input = Arc::clone(&self.input);
        let existing = std::mem::take(&mut self.existing);
        for p in input.pods.iter().chain(&existing) {
            let mut h = DefaultHasher::new();
            pod::namespace(p).hash(&mut h);
            pod::labels(p).hash(&mut h);
            let candidates = buckets.entry(h.finish()).or_default();
            let found = candidates.iter().copied().find(|g| same_constraints(&self.groups[*g].rep, p));
            let g = match found {
                Some(g) => g,
                None => {
                    let g = self.groups.len();
                    self.groups.push(self.make_group(p.clone()));
                    candidates.push(g);
                    g
                }
            };
            self.pod_group.push(g);
        }
        self.existing = existing;
        // Counters and inverse terms for every constraint any group may use.
        for g in 0..self.groups.len() {
            let grp = &self.groups[g];
            let terms: Vec<(String, Option<LabelSelector>, Namespaces)> = grp
                .hard_spread
                .iter()
                .chain(&grp.soft_spread)
                .map(|c| {
                    (
                        c.topology_key.clone(),
                        c.selector.clone(),
                        Namespaces::Some { names: vec![c.namespace.clone()], selector: None },
                    )
                })
                .chain(
                    grp.affinity
                        .iter()
                        .chain(&grp.anti)
                        .chain(&grp.pref_affinity)
                        .chain(&grp.pref_anti)
                        .map(|t| (t.topology_key.clone(), t.selector.clone(), t.namespaces.clone())),
                )
                .collect();
            for (k, s, n) in terms {
                self.counter_id(&k, &s, &n);
            }
            // The required affinity terms count together (before `counted_by` is computed).
            let required = self.groups[g].affinity.clone();
            for i in 0..required.len() {
                self.set_counter_id(&required, i);
            }
            let anti = self.groups[g].anti.clone();
            let own: Vec<usize> = anti.iter().map(|t| self.inverse_id(t)).collect();
            self.groups[g].own_inverse = own;
        }
        let ns = &input.namespace_labels;
        for g in 0..self.groups.len() {
            let rep = self.groups[g].rep.clone();
            self.groups[g].counted_by =
                (0..self.counters.len()).filter(|c| self.counters[*c].matches(&rep, ns)).collect();
            self.groups[g].rejected_by = (0..self.inverses.len())
                .filter(|i| {
                    let inv = &self.inverses[*i];
                    AffinityTerm {
                        topology_key: inv.key.clone(),
                        selector: inv.selector.clone(),
                        namespaces: inv.namespaces.clone(),
                        weight: 0,
                    }
                    .matches(&rep, ns)
                })
                .collect();
        }
    }

    fn make_group(&self, p: Arc<Pod>) -> Group {
        let aff = pod::pod_affinities(&p);
        let mut pref_affinity = aff.preferred.clone();
        pref_affinity.sort_by_key(|t| std::cmp::Reverse(t.weight));
        let mut pref_anti = aff.preferred_anti.clone();
        pref_anti.sort_by_key(|t| std::cmp::Reverse(t.weight));
        let spreads = pod::spread_constraints(&p);
        let volume_alts: Vec<Vec<Requirements>> = pod::volume_claims(&p)
            .iter()
            .filter_map(|c| self.input.volume_requirements.get(c).cloned())
            .filter(|alts| !alts.is_empty())
            .collect();
        let volume = if volume_alts.is_empty() {
            None
        } else {
            let mut r = Requirements::new();
            for alts in &volume_alts {
                r.add_all(&volume_union(alts));
            }
            Some(r)
        };
        let unresolvable = pod::volume_claims(&p).iter().find_map(|c| self.input.unresolvable_volumes.get(c).cloned());
        Group {
            unresolvable,
            tolerations: pod::tolerations(&p).to_vec(),
            terms: pod::required_node_terms(&p),
            name_fields: pod::required_node_name_fields(&p),
            pref_node: pod::preferred_node_terms(&p),
            hard_spread: spreads.iter().filter(|c| c.hard).cloned().collect(),
            soft_spread: spreads.iter().filter(|c| !c.hard).cloned().collect(),
            affinity: aff.required,
            anti: aff.required_anti,
            pref_affinity,
            pref_anti,
            ports: pod::host_ports(&p),
            volume,
            volume_alts,
            counted_by: Vec::new(),
            rejected_by: Vec::new(),
            own_inverse: Vec::new(),
            levels: Vec::new(),
            node_ok: Vec::new(),
            exhausted: false,
            cursor: 0,
            rep: p,
        }
    }

    fn count_existing(&mut self) {
        for n in 0..self.nodes.len() {
            for j in 0..self.nodes[n].pods.len() {
                let pi = self.nodes[n].pods[j];
                if self.pod(pi).metadata.deletion_timestamp.is_some() {
                    continue;
                }
                self.count_pod(n, pi, 1);
            }
        }
    }

    /// Counts pod `pi` (`delta` = 1) or takes it away (`delta` = -1) in the domains of existing
    /// node `n`: every counter it matches and every anti-affinity term it holds.
    fn count_pod(&mut self, n: usize, pi: usize, delta: i64) {
        let g = self.pod_group[pi];
        for j in 0..self.groups[g].counted_by.len() {
            let c = self.groups[g].counted_by[j];
            if let Some(d) = self.node_domain(n, &self.counters[c].key) {
                self.count(c, d, delta);
            }
        }
        for j in 0..self.groups[g].own_inverse.len() {
            let i = self.groups[g].own_inverse[j];
            if let Some(d) = self.node_domain(n, &self.inverses[i].key) {
                self.block(i, d, delta);
            }
        }
    }

    /// Adds `delta` to counter `c` in domain `d`, recorded in the journal.
    fn count(&mut self, c: usize, d: u32, delta: i64) {
        self.counters[c].add(d, delta);
        self.journal.push(Undo::Count { counter: c, domain: d, delta });
    }

    /// Adds `delta` to inverse term `i` in domain `d`, recorded in the journal.
    fn block(&mut self, i: usize, d: u32, delta: i64) {
        self.inverses[i].block(d, delta);
        self.journal.push(Undo::Block { inverse: i, domain: d, delta });
    }

    // -----------------------------------------------------------------------------------------
    // Levels (preference relaxation)

    /// The level `l` of group `g`, building it (by relaxing the previous level) when needed.
    /// `None` when nothing is left to relax.
    fn level(&mut self, g: usize, l: usize) -> Option<usize> {
        while self.groups[g].levels.len() <= l {
            if self.groups[g].exhausted {
                return None;
            }
            let next = match self.groups[g].levels.last() {
                None => Some((Relax::default(), None)),
                Some(prev) => self.relax(g, prev.state),
            };
            match next {
                Some((state, why)) => {
                    let level = self.build_level(g, state, why);
                    self.groups[g].levels.push(Arc::new(level));
                }
                None => {
                    self.groups[g].exhausted = true;
                    return None;
                }
            }
        }
        Some(l)
    }

    /// The next relaxation in Karpenter's order.
    fn relax(&self, g: usize, s: Relax) -> Option<(Relax, Option<String>)> {
        let grp = &self.groups[g];
        let mut n = s;
        if s.term + 1 < grp.terms.len() {
            n.term += 1;
            return Some((n, Some(format!("dropped required node affinity term {}", s.term + 1))));
        }
        if s.pref_affinity < grp.pref_affinity.len() {
            n.pref_affinity += 1;
            return Some((n, Some("dropped a preferred pod affinity term".into())));
        }
        if s.pref_anti < grp.pref_anti.len() {
            n.pref_anti += 1;
            return Some((n, Some("dropped a preferred pod anti-affinity term".into())));
        }
        if s.pref_node < grp.pref_node.len() {
            n.pref_node += 1;
            return Some((n, Some("dropped a preferred node affinity term".into())));
        }
        if s.soft_spread < grp.soft_spread.len() {
            n.soft_spread += 1;
            return Some((n, Some("dropped a ScheduleAnyway topology spread constraint".into())));
        }
        if !s.tolerate_prefer && self.prefer_taints {
            n.tolerate_prefer = true;
            return Some((n, Some("tolerated PreferNoSchedule taints".into())));
        }
        None
    }

    fn build_level(&mut self, g: usize, s: Relax, relaxed: Option<String>) -> Level {
        let grp = &self.groups[g];
        let mut r = grp.terms.get(s.term).cloned().unwrap_or_default();
        if let Some((_, pref)) = grp.pref_node.get(s.pref_node) {
            r.add_all(pref);
        }
        if let Some(v) = &grp.volume {
            r.add_all(v);
        }
        let name_field = grp.name_fields.get(s.term).cloned().flatten();
        let input = Arc::clone(&self.input);
        let ns = &input.namespace_labels;
        let rep = grp.rep.clone();
        let spreads: Vec<(SpreadConstraint, bool)> = grp
            .hard_spread
            .iter()
            .map(|c| (c.clone(), false))
            .chain(grp.soft_spread.iter().skip(s.soft_spread).map(|c| (c.clone(), true)))
            .collect();
        let required_aff = grp.affinity.clone();
        let preferred_aff: Vec<AffinityTerm> = grp.pref_affinity.iter().skip(s.pref_affinity).cloned().collect();
        let anti_terms: Vec<AffinityTerm> =
            grp.anti.iter().chain(grp.pref_anti.iter().skip(s.pref_anti)).cloned().collect();
        let tolerations = grp.tolerations.clone();
        // Spread domains honour the pod's required node affinity — every term, OR'ed, as
        // kube-scheduler's nodeAffinityPolicy Honor does — never a preferred term.
        let terms = grp.terms.clone();
        let req = self.intern_req(r.clone());
        let mut plans = Vec::new();
        for (c, _soft) in spreads {
            let counter = self.counter_id(
                &c.topology_key,
                &c.selector,
                &Namespaces::Some { names: vec![c.namespace.clone()], selector: None },
            );
            let (support, fresh) = self.spread_domains(&c, &terms, &tolerations);
            plans.push(SpreadPlan {
                counter,
                key: c.topology_key.clone(),
                max_skew: i64::from(c.max_skew),
                self_match: i64::from(c.counts(&rep)),
                min_domains: c.min_domains.map(i64::from),
                domains: support.keys().copied().collect(),
                node_support: support.values().map(|(n, _)| *n).collect(),
                from_pool: support.values().map(|(_, p)| *p).collect(),
                fresh,
            });
        }
        // Preferred terms are scored one by one by kube-scheduler: while kept, each holds alone.
        let mut affinity = Vec::new();
        if !required_aff.is_empty() {
            affinity.push(AffinitySet {
                counters: (0..required_aff.len()).map(|i| self.set_counter_id(&required_aff, i)).collect(),
                matches_own: required_aff.iter().all(|t| t.matches(&rep, ns)),
            });
        }
        for t in &preferred_aff {
            affinity.push(AffinitySet {
                counters: vec![self.counter_id(&t.topology_key, &t.selector, &t.namespaces)],
                matches_own: t.matches(&rep, ns),
            });
        }
        let anti: Vec<usize> =
            anti_terms.iter().map(|t| self.counter_id(&t.topology_key, &t.selector, &t.namespaces)).collect();
        Level { req, name_field, tolerate_prefer: s.tolerate_prefer, spreads: plans, affinity, anti, state: s, relaxed }
    }

    /// The domains of a spread constraint the pod could land in: existing nodes passing its
    /// required node affinity (any of its `terms`; Honor) and taints (Honor), and the values
    /// NodePools compatible with some term can launch. For hostname, a new node is a fresh empty
    /// domain.
    /// Each domain comes with its number of existing nodes and whether a pool offers it.
    fn spread_domains(
        &mut self,
        c: &SpreadConstraint,
        terms: &[Requirements],
        tols: &[Toleration],
    ) -> (BTreeMap<u32, (u32, bool)>, bool) {
        let mut out: BTreeMap<u32, (u32, bool)> = BTreeMap::new();
        let mut fresh = false;
        for n in &self.nodes {
            let Some(v) = n.labels.get(&c.topology_key) else { continue };
            if c.honor_node_affinity && !terms.iter().any(|r| r.matches(&n.labels)) {
                continue;
            }
            if c.honor_node_taints && pod::untolerated_taint_with(tols, &n.taints, false).is_some() {
                continue;
            }
            out.entry(self.values.id(v)).or_default().0 += 1;
        }
        let key = kerf_api::labels::normalize_key(&c.topology_key).to_string();
        for pi in 0..self.pools.len() {
            let pool = &self.pools[pi];
            if c.honor_node_taints && pod::untolerated_taint_with(tols, &pool.taints, false).is_some() {
                continue;
            }
            let combined: Vec<Requirements> = if c.honor_node_affinity {
                terms
                    .iter()
                    .filter(|r| pool.reqs.compatible_strict(r, |k| pool.type_keys.contains(k)).is_ok())
                    .map(|r| pool.reqs.intersect(r))
                    .collect()
            } else {
                vec![pool.reqs.clone()]
            };
            if combined.is_empty() {
                continue;
            }
            if key == HOSTNAME {
                fresh = true;
                continue;
            }
            let mut vals: BTreeSet<String> = BTreeSet::new();
            for combined in &combined {
                let allowed = combined.get(&key);
                let mut these: BTreeSet<String> = BTreeSet::new();
                if key == ZONE || key == CAPACITY_TYPE {
                    for t in &pool.types {
                        for o in t.offerings.iter().filter(|o| o.available) {
                            if combined.allows(ZONE, &o.zone) && combined.allows(CAPACITY_TYPE, &o.capacity_type) {
                                these.insert(if key == ZONE { o.zone.clone() } else { o.capacity_type.clone() });
                            }
                        }
                    }
                } else if pool.type_keys.contains(&key) && !pool.defined_keys.contains(&key) {
                    for t in &pool.types {
                        if let Some(v) = t.labels.get(&key) {
                            these.insert(v.clone());
                        }
                    }
                } else if let Some(values) = allowed.and_then(|a| a.values()) {
                    these.extend(values.iter().cloned());
                }
                vals.extend(these.into_iter().filter(|v| allowed.is_none_or(|a| a.has(v))));
            }
            for v in vals {
                out.entry(self.values.id(&v)).or_default().1 = true;
            }
        }
        (out, fresh)
    }

    // -----------------------------------------------------------------------------------------
    // Compatibility of instance types

    /// Types of `pool` whose labels and some available offering satisfy requirements `req`.
    fn compat(&mut self, pool: usize, req: u32) -> Arc<Bits> {
        if let Some(b) = self.compat_cache.get(&(pool, req)) {
            return Arc::clone(b);
        }
        let p = &self.pools[pool];
        let r = &self.reqs[req as usize];
        let mut bits = Bits::empty(p.types.len());
        let zone = r.get(ZONE);
        let ct = r.get(CAPACITY_TYPE);
        'types: for (i, t) in p.types.iter().enumerate() {
            for (k, req) in r.iter() {
                if k == ZONE || k == CAPACITY_TYPE || k == HOSTNAME {
                    continue;
                }
                if let Some(v) = t.labels.get(k) {
                    if !req.has(v) {
                        continue 'types;
                    }
                } else if k == INSTANCE_TYPE {
                    if !req.has(&t.name) {
                        continue 'types;
                    }
                } else if !p.defined_keys.contains(k) && !req.allows_absent() {
                    continue 'types;
                }
            }
            let offered = t.offerings.iter().any(|o| {
                o.available && zone.is_none_or(|z| z.has(&o.zone)) && ct.is_none_or(|c| c.has(&o.capacity_type))
            });
            if offered {
                bits.set(i);
            }
        }
        let bits = Arc::new(bits);
        self.compat_cache.insert((pool, req), Arc::clone(&bits));
        bits
    }

    /// Types among `types` that fit `requests`.
    fn fitting(&self, pool: usize, types: &Bits, requests: &[i64]) -> Bits {
        let p = &self.pools[pool];
        let n = self.res.names.len();
        let mut out = Bits::empty(p.types.len());
        for i in types.iter() {
            if type_fits(requests, &p.free[i * n..(i + 1) * n]) {
                out.set(i);
            }
        }
        out
    }

    /// Whether some type in `a ∧ b` fits `requests` (no allocation).
    fn any_fit(&self, pool: usize, a: &Bits, b: &Bits, requests: &[i64]) -> bool {
        let p = &self.pools[pool];
        let n = self.res.names.len();
        for (wi, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
            let mut w = x & y;
            while w != 0 {
                let i = wi * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                if type_fits(requests, &p.free[i * n..(i + 1) * n]) {
                    return true;
                }
            }
        }
        false
    }

    /// Whether `types` still offer at least minValues distinct values for each key that has one.
    fn min_values_ok(&self, pool: usize, types: &Bits) -> Option<(String, usize, usize)> {
        let p = &self.pools[pool];
        for (k, m) in &p.min_values {
            let mut vals: BTreeSet<&str> = BTreeSet::new();
            for i in types.iter() {
                let t = &p.types[i];
                if k == INSTANCE_TYPE {
                    vals.insert(&t.name);
                } else if k == ZONE || k == CAPACITY_TYPE {
                    for o in t.offerings.iter().filter(|o| o.available) {
                        vals.insert(if k == ZONE { &o.zone } else { &o.capacity_type });
                    }
                } else if let Some(v) = t.labels.get(k) {
                    vals.insert(v);
                }
            }
            if vals.len() < *m {
                return Some((k.clone(), *m, vals.len()));
            }
        }
        None
    }

    // -----------------------------------------------------------------------------------------
    // The main loop

    /// Places the pending pods (`input.pods`): onto existing nodes and in-flight claims first,
    /// then onto new NodeClaims; explains every pod it cannot place. Pod indexes in the result
    /// are indexes into `input.pods`. The context is left as it was: it can be asked again.
    pub fn place_pending(&mut self) -> SchedulingResult {
        let pods: Vec<usize> = (0..self.input.pods.len()).collect();
        self.begin();
        let run = self.run(&pods, true);
        let mut result = SchedulingResult {
            placements: run
                .on_node
                .into_iter()
                .map(|(pod, n)| Placement { pod, node: self.nodes[n].name.clone() })
                .collect(),
            new_node_claims: Vec::new(),
            errors: run.errors,
        };
        for c in 0..self.claims.len() {
            let (claim, _) = self.finish_claim(c);
            result.new_node_claims.push(claim);
        }
        self.rollback();
        result
    }

    /// The index of the existing node (or in-flight claim) called `name`.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.node_index.get(name).copied()
    }

    /// The names of the existing nodes and in-flight claims, by index (initialized nodes first).
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|n| n.name.as_str())
    }

    /// Consolidation's question: if the nodes named `names` were gone, where would their pods
    /// go? See [`WhatIf`] and the module documentation. The context is left as it was.
    pub fn without_nodes(&mut self, names: &[&str]) -> Result<WhatIf, UnknownNode> {
        let mut nodes = Vec::with_capacity(names.len());
        for name in names {
            nodes.push(self.node_index(name).ok_or_else(|| UnknownNode((*name).to_string()))?);
        }
        Ok(self.without_node_indexes(&nodes))
    }

    /// [`without_nodes`](Self::without_nodes) by node index ([`node_index`](Self::node_index)).
    pub fn without_node_indexes(&mut self, nodes: &[usize]) -> WhatIf {
        self.begin();
        let mut moved = Vec::new();
        for &n in nodes {
            if self.removed.contains(&n) {
                continue;
            }
            self.removed.push(n);
            self.journal.push(Undo::Removed { node: n, old: self.nodes[n].schedulable });
            self.nodes[n].schedulable = false;
            for j in 0..self.nodes[n].pods.len() {
                let pi = self.nodes[n].pods[j];
                let p = Arc::clone(self.pod(pi));
                if p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                // The pod leaves the node's domains, whether it moves or goes with the node.
                self.count_pod(n, pi, -1);
                if reschedulable(&p) {
                    moved.push(pi);
                }
            }
        }
        let run = self.run(&moved, false);
        let position = |pi: usize| moved.iter().position(|m| *m == pi).unwrap_or(usize::MAX);
        let mut out = WhatIf {
            pods: moved.iter().map(|pi| Arc::clone(self.pod(*pi))).collect(),
            placements: run
                .on_node
                .iter()
                .map(|(pi, n)| Placement { pod: position(*pi), node: self.nodes[*n].name.clone() })
                .collect(),
            new_node_claims: Vec::new(),
            unplaced: run.unplaced.iter().map(|pi| position(*pi)).collect(),
        };
        for c in 0..self.claims.len() {
            let (mut claim, price) = self.finish_claim(c);
            claim.pods = claim.pods.iter().map(|pi| position(*pi)).collect();
            claim.pods.sort_unstable();
            out.new_node_claims.push(PricedClaim { claim, price });
        }
        out.placements.sort_by_key(|p| p.pod);
        self.rollback();
        out
    }

    /// Starts a query: remembers the pool limits it may use up.
    fn begin(&mut self) {
        self.journal.clear();
        self.claims.clear();
        self.open.clear();
        self.pool_limits = self.pools.iter().map(|p| (p.remaining.clone(), p.nodes_remaining)).collect();
    }

    /// Ends a query: puts back everything it changed.
    fn rollback(&mut self) {
        while let Some(u) = self.journal.pop() {
            match u {
                Undo::NodeUsed { node, pod } => {
                    for (u, v) in self.nodes[node].used.iter_mut().zip(&self.pod_requests[pod]) {
                        *u -= v;
                    }
                }
                Undo::NodePorts { node, len } => self.nodes[node].ports.truncate(len),
                Undo::Count { counter, domain, delta } => self.counters[counter].add(domain, -delta),
                Undo::Block { inverse, domain, delta } => self.inverses[inverse].block(domain, -delta),
                Undo::Cursor { group, old } => self.groups[group].cursor = old,
                Undo::Removed { node, old } => self.nodes[node].schedulable = old,
            }
        }
        self.claims.clear();
        self.open.clear();
        for (p, (remaining, nodes)) in std::mem::take(&mut self.pool_limits).into_iter().enumerate() {
            self.pools[p].remaining = remaining;
            self.pools[p].nodes_remaining = nodes;
        }
        self.removed.clear();
    }

    /// Places `pods` (context indexes), largest first, retrying the ones that did not fit until
    /// a full pass places none of them (a pod may fit only once another pod of the batch is
    /// placed). With `explain`, says why for each pod left.
    fn run(&mut self, pods: &[usize], explain: bool) -> Run {
        let nres = self.res.names.len();
        self.min_request = vec![i64::MAX; nres];
        for &pi in pods {
            for (m, v) in self.min_request.iter_mut().zip(&self.pod_requests[pi]) {
                *m = (*m).min(*v);
            }
        }
        let mut order: Vec<usize> = pods.to_vec();
        let (cpu, mem) = (self.res.index[CPU], self.res.index[MEMORY]);
        order.sort_by(|a, b| {
            let (ra, rb) = (&self.pod_requests[*a], &self.pod_requests[*b]);
            rb[cpu].cmp(&ra[cpu]).then(rb[mem].cmp(&ra[mem])).then(a.cmp(b))
        });
        let mut run = Run::default();
        let mut queue = order;
        loop {
            let before = queue.len();
            let mut left = Vec::new();
            for pi in queue {
                match self.place_pod(pi) {
                    Some(Bin::Node(n)) => run.on_node.push((pi, n)),
                    Some(Bin::Claim(_)) => {}
                    None => left.push(pi),
                }
            }
            queue = left;
            if queue.is_empty() || queue.len() == before {
                break;
            }
        }
        run.on_node.sort();
        if explain {
            let mut explained: HashMap<(usize, Vec<i64>), PodError> = HashMap::new();
            for &pi in &queue {
                let g = self.pod_group[pi];
                // Identical pods (same group and requests) get the same explanation.
                let key = (g, self.pod_requests[pi].clone());
                let err = match explained.get(&key) {
                    Some(e) => PodError::clone(e),
                    None => {
                        let e = self.explain(pi, g);
                        explained.insert(key, e.clone());
                        e
                    }
                };
                run.errors.push((pi, err));
            }
            run.errors.sort_by_key(|(p, _)| *p);
        }
        run.unplaced = queue;
        run.unplaced.sort_unstable();
        run
    }

    /// Tries pod `pi` at each level of its group, most constrained first.
    fn place_pod(&mut self, pi: usize) -> Option<Bin> {
        let g = self.pod_group[pi];
        if self.groups[g].unresolvable.is_some() {
            return None;
        }
        let mut l = 0;
        loop {
            let level = self.level(g, l)?;
            if let Some(bin) = self.place(pi, g, level) {
                return Some(bin);
            }
            l += 1;
        }
    }

    fn set_cursor(&mut self, g: usize, value: usize) {
        let old = self.groups[g].cursor;
        if old != value {
            self.journal.push(Undo::Cursor { group: g, old });
            self.groups[g].cursor = value;
        }
    }

    /// Tries every bin for pod `pi` at level `l` of its group, in order: existing nodes,
    /// in-flight claims, open claims, new claims. Commits the first that fits.
    fn place(&mut self, pi: usize, g: usize, l: usize) -> Option<Bin> {
        for n in 0..self.nodes.len() {
            if self.node_fits(pi, g, l, n) {
                self.commit_node(pi, g, n);
                return Some(Bin::Node(n));
            }
        }
        // Open claims, from the group's cursor.
        let start = if l == 0 { self.groups[g].cursor } else { 0 };
        let mut advance_cursor = l == 0;
        let mut i = start;
        while i < self.open.len() {
            let c = self.open[i];
            if !self.claims[c].open {
                i += 1;
                continue;
            }
            match self.claim_fits(pi, g, l, c) {
                Ok(plan) => {
                    if advance_cursor {
                        self.set_cursor(g, i);
                    }
                    self.commit_claim(pi, g, l, c, plan);
                    return Some(Bin::Claim(c));
                }
                Err(permanent) => {
                    if advance_cursor && permanent {
                        self.set_cursor(g, i + 1);
                    } else {
                        advance_cursor = false;
                    }
                }
            }
            i += 1;
        }
        // A new claim, NodePools by weight.
        for p in 0..self.pools.len() {
            if let Some(c) = self.new_claim(pi, g, l, p) {
                return Some(Bin::Claim(c));
            }
        }
        None
    }

    fn tolerated(tols: &[Toleration], taints: &[Taint], tolerate_prefer: bool) -> bool {
        pod::untolerated_taint_with(tols, taints, !tolerate_prefer).is_none()
    }

    fn node_fits(&mut self, pi: usize, g: usize, l: usize, n: usize) -> bool {
        // Cheap rejections first (the answer is the same; only the reason's order differs).
        let node = &self.nodes[n];
        if !node.schedulable
            || crate::fit::short_resource(
                self.pod_requests[pi].iter().zip(&node.used).zip(&node.alloc).map(|((r, u), a)| (*r, *u, *a)),
            )
            .is_some()
        {
            return false;
        }
        self.node_fit(pi, g, l, n).is_ok()
    }

    /// The one node-fit check ([`crate::fit::check`]) for pod `pi` of group `g` at level `l` on
    /// existing node `n`.
    fn node_fit(&mut self, pi: usize, g: usize, l: usize, n: usize) -> Result<(), crate::fit::Why> {
        // Taints, node affinity and volume zones do not change during a query: once per level.
        let static_ok = self.node_static_ok(g, l, n);
        crate::fit::check(&mut NodeFit { s: self, pi, g, l, n, static_ok })
    }

    /// The domain of existing node `n` for `key` (its label values are interned up front).
    fn node_domain(&self, n: usize, key: &str) -> Option<u32> {
        self.nodes[n].labels.get(key).and_then(|v| self.values.ids.get(v.as_str()).copied())
    }

    fn node_static_ok(&mut self, g: usize, l: usize, n: usize) -> bool {
        if self.groups[g].node_ok.len() <= l {
            self.groups[g].node_ok.resize(l + 1, Vec::new());
        }
        if self.groups[g].node_ok[l].is_empty() {
            let grp = &self.groups[g];
            let level = &grp.levels[l];
            let r = &self.reqs[level.req as usize];
            let ok: Vec<bool> = self
                .nodes
                .iter()
                .map(|node| {
                    Self::tolerated(&grp.tolerations, &node.taints, level.tolerate_prefer)
                        && crate::fit::node_affinity_matches(
                            std::slice::from_ref(r),
                            std::slice::from_ref(&level.name_field),
                            &node.name,
                            &node.labels,
                        )
                        && crate::fit::volumes_match(&grp.volume_alts, &node.labels)
                })
                .collect();
            self.groups[g].node_ok[l] = ok;
        }
        self.groups[g].node_ok[l][n]
    }

    fn spread_min(&self, s: &SpreadPlan) -> i64 {
        if s.fresh {
            return 0;
        }
        let c = &self.counters[s.counter];
        if self.removed.is_empty() {
            if let Some(md) = s.min_domains
                && (s.domains.len() as i64) < md
            {
                return 0;
            }
            return s.domains.iter().map(|d| c.get(*d)).min().unwrap_or(0);
        }
        let alive = || (0..s.domains.len()).filter(|i| self.domain_alive(s, *i)).map(|i| s.domains[i]);
        if let Some(md) = s.min_domains
            && (alive().count() as i64) < md
        {
            return 0;
        }
        alive().map(|d| c.get(d)).min().unwrap_or(0)
    }

    /// Whether domain `i` of spread plan `s` still exists in the running what-if: a pool offers
    /// it, or some node in it is not removed.
    fn domain_alive(&self, s: &SpreadPlan, i: usize) -> bool {
        let d = s.domains[i];
        s.from_pool[i]
            || (self.removed.iter().filter(|n| self.node_domain(**n, &s.key) == Some(d)).count() as u32)
                < s.node_support[i]
    }

    fn spread_allows(&self, s: &SpreadPlan, d: u32) -> bool {
        if !s.fresh && !s.domains.contains(&d) {
            return false;
        }
        crate::fit::spread_skew_ok(self.counters[s.counter].get(d), s.self_match, self.spread_min(s), s.max_skew)
    }

    fn commit_node(&mut self, pi: usize, g: usize, n: usize) {
        for (u, v) in self.nodes[n].used.iter_mut().zip(&self.pod_requests[pi]) {
            *u += v;
        }
        self.journal.push(Undo::NodeUsed { node: n, pod: pi });
        if !self.groups[g].ports.is_empty() {
            self.journal.push(Undo::NodePorts { node: n, len: self.nodes[n].ports.len() });
            let ports = self.groups[g].ports.clone();
            self.nodes[n].ports.extend(ports);
        }
        self.count_pod(n, pi, 1);
    }

    /// The first of `domains` that, set as `key`'s value on the claim's requirements `req`, still
    /// leaves an instance type of `pool` (among `types`) that fits `total`: the narrowed
    /// requirements and the types that remain.
    fn first_fitting_domain(
        &mut self,
        pool: usize,
        req: u32,
        key: &str,
        types: &Bits,
        total: &[i64],
        domains: impl IntoIterator<Item = u32>,
    ) -> Option<(u32, Bits)> {
        for d in domains {
            let r = self.narrow(req, key, d);
            let cr = self.compat(pool, r);
            if self.any_fit(pool, types, &cr, total) {
                return Some((r, types.and(&cr)));
            }
        }
        None
    }

    /// The domain of claim `c` (with requirements `req`) for `key`, when determined.
    fn claim_domain(&self, c: usize, req: u32, key: &str) -> Option<u32> {
        if key == HOSTNAME {
            return Some(self.claims[c].hostname);
        }
        // Every finite value of an interned requirement is interned (see `intern_req`).
        let v = self.reqs[req as usize].get(key).and_then(|r| r.single_value())?;
        self.values.ids.get(v).copied()
    }

    /// Whether pod `pi` fits claim `c`; `Err(true)` when the claim can never take this group.
    fn claim_fits(&mut self, pi: usize, g: usize, l: usize, c: usize) -> Result<ClaimPlan, bool> {
        let pool = self.claims[c].pool;
        let level_req = self.groups[g].levels[l].req;
        let tolerate_prefer = self.groups[g].levels[l].tolerate_prefer;
        if !self.pool_admits(pool, g, l) {
            return Err(true);
        }
        let _ = tolerate_prefer;
        if !self.groups[g].ports.is_empty()
            && self.groups[g].ports.iter().any(|a| self.claims[c].ports.iter().any(|b| a.conflicts(b)))
        {
            return Err(true);
        }
        // Resources first: cheap, and most claims that fail, fail here.
        let mut total = std::mem::take(&mut self.scratch);
        total.clear();
        total.extend(self.claims[c].requests.iter().zip(&self.pod_requests[pi]).map(|(a, b)| a + b));
        let result = if !type_fits(&total, &self.claims[c].max_alloc) {
            Err(false)
        } else {
            let req = self.intersect(self.claims[c].req, level_req);
            if self.unsat[req as usize] {
                Err(true)
            } else {
                let types = std::mem::replace(&mut self.claims[c].types, Bits(Vec::new()));
                // Limits were reserved (the largest candidate's capacity) when the claim was
                // created; its candidates only shrink, so it cannot exceed them.
                let plan = self.plan_topology(g, l, c, req, &types, &total);
                self.claims[c].types = types;
                plan
            }
        };
        self.scratch = total;
        result
    }

    /// Whether pool `p` takes pods of group `g` at level `l` at all (taints, requirements).
    fn pool_admits(&mut self, p: usize, g: usize, l: usize) -> bool {
        let level_req = self.groups[g].levels[l].req;
        let tolerate_prefer = self.groups[g].levels[l].tolerate_prefer;
        if let Some(ok) = self.admits_cache.get(&(p, level_req, tolerate_prefer, g)) {
            return *ok;
        }
        let pool = &self.pools[p];
        let ok = Self::tolerated(&self.groups[g].tolerations, &pool.taints, tolerate_prefer)
            && pool.reqs.compatible_strict(&self.reqs[level_req as usize], |k| pool.type_keys.contains(k)).is_ok();
        self.admits_cache.insert((p, level_req, tolerate_prefer, g), ok);
        ok
    }

    /// Resolves topology for a claim: checks determined domains and picks a domain for each
    /// undetermined key (narrowing the requirements), keeping some fitting type available.
    /// `Err(true)` when the claim can never take this group's pods.
    fn plan_topology(
        &mut self,
        g: usize,
        l: usize,
        c: usize,
        mut req: u32,
        types: &Bits,
        total: &[i64],
    ) -> Result<ClaimPlan, bool> {
        let pool = self.claims[c].pool;
        let compat = self.compat(pool, req);
        if !self.any_fit(pool, types, &compat, total) {
            return Err(false);
        }
        let mut types = types.and(&compat);
        let level = Arc::clone(&self.groups[g].levels[l]);
        // Spread constraints.
        for s in &level.spreads {
            match self.claim_domain(c, req, &s.key) {
                Some(d) => {
                    if !self.spread_allows(s, d) {
                        // With a fresh-domain minimum of 0, counts only grow: never again.
                        return Err(s.fresh);
                    }
                }
                None => {
                    // Candidates: allowed domains, fewest pods first.
                    let min = self.spread_min(s);
                    let counter = s.counter;
                    let mut cands: Vec<(i64, u32)> = s
                        .domains
                        .iter()
                        .copied()
                        .filter(|d| self.reqs[req as usize].allows(&s.key, self.values.name(*d)))
                        .map(|d| (self.counters[counter].get(d), d))
                        .filter(|(n, _)| n + s.self_match - min <= s.max_skew)
                        .collect();
                    cands.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| self.values.name(a.1).cmp(self.values.name(b.1))));
                    let (r, t) = self
                        .first_fitting_domain(pool, req, &s.key, &types, total, cands.into_iter().map(|(_, d)| d))
                        .ok_or(false)?;
                    req = r;
                    types = t;
                }
            }
        }
        // Required (and still-preferred) pod affinity.
        for set in &level.affinity {
            let first_of_its_kind = set.matches_own && set.counters.iter().all(|ci| self.counters[*ci].total == 0);
            for &ci in &set.counters {
                let key = self.counters[ci].key.clone();
                match self.claim_domain(c, req, &key) {
                    Some(d) => {
                        if !first_of_its_kind && self.counters[ci].get(d) == 0 {
                            return Err(false);
                        }
                    }
                    None => {
                        // Pin to a domain that has matching pods, or (first of its kind) to the
                        // cheapest domain so the rest of the group follows.
                        let cands: Vec<u32> = if first_of_its_kind {
                            self.candidate_values(pool, req, &key, &types)
                        } else {
                            let counts = &self.counters[ci];
                            let mut v: Vec<u32> =
                                (0..counts.counts.len() as u32).filter(|d| counts.get(*d) > 0).collect();
                            v.retain(|d| self.reqs[req as usize].allows(&key, self.values.name(*d)));
                            v
                        };
                        let mut chosen = None;
                        for d in cands {
                            let r = self.narrow(req, &key, d);
                            let t = types.and(&self.compat(pool, r));
                            if !t.is_empty() {
                                chosen = Some((r, t));
                                break;
                            }
                        }
                        let (r, t) = chosen.ok_or(false)?;
                        req = r;
                        types = t;
                    }
                }
            }
        }
        // Anti-affinity: own terms and others' terms against this pod.
        let n_own = level.anti.len();
        let n_all = n_own + self.groups[g].rejected_by.len();
        for j in 0..n_all {
            let (counter, inverse) = if j < n_own {
                (Some(level.anti[j]), None)
            } else {
                (None, Some(self.groups[g].rejected_by[j - n_own]))
            };
            let key: &str = match (counter, inverse) {
                (Some(ci), _) => &self.counters[ci].key,
                (_, Some(ii)) => &self.inverses[ii].key,
                _ => continue,
            };
            let blocked = |s: &Self, d: u32| match (counter, inverse) {
                (Some(ci), _) => s.counters[ci].get(d) > 0,
                (_, Some(ii)) => s.inverses[ii].is_blocked(d),
                _ => false,
            };
            match self.claim_domain(c, req, key) {
                Some(d) => {
                    if blocked(self, d) {
                        // Blocked domains stay blocked.
                        return Err(true);
                    }
                }
                None => {
                    let key = key.to_string();
                    let cands = self.candidate_values(pool, req, &key, &types);
                    let open: Vec<u32> = cands.into_iter().filter(|d| !blocked(self, *d)).collect();
                    let (r, t) = self.first_fitting_domain(pool, req, &key, &types, total, open).ok_or(false)?;
                    req = r;
                    types = t;
                }
            }
        }
        if !self.pools[pool].min_values.is_empty() {
            let fit = self.fitting(pool, &types, total);
            if self.min_values_ok(pool, &fit).is_some() {
                return Err(false);
            }
        }
        Ok(ClaimPlan { req, types })
    }

    /// Values of `key` a claim of `pool` with requirements `req` and candidate `types` could take,
    /// cheapest first for zone and capacity type, else sorted by value.
    fn candidate_values(&mut self, pool: usize, req: u32, key: &str, types: &Bits) -> Vec<u32> {
        let r = self.reqs[req as usize].clone();
        let p = &self.pools[pool];
        let mut vals: Vec<(f64, String)>;
        if key == ZONE || key == CAPACITY_TYPE {
            let mut best: BTreeMap<String, f64> = BTreeMap::new();
            for i in types.iter() {
                for o in p.types[i].offerings.iter().filter(|o| o.available) {
                    if r.allows(ZONE, &o.zone) && r.allows(CAPACITY_TYPE, &o.capacity_type) {
                        let v = if key == ZONE { &o.zone } else { &o.capacity_type };
                        let e = best.entry(v.clone()).or_insert(f64::INFINITY);
                        *e = e.min(o.price);
                    }
                }
            }
            vals = best.into_iter().map(|(k, v)| (v, k)).collect();
        } else if let Some(values) = r.get(key).and_then(|x| x.values()) {
            vals = values.iter().map(|v| (0.0, v.clone())).collect();
        } else {
            let mut seen = BTreeSet::new();
            for i in types.iter() {
                if let Some(v) = p.types[i].labels.get(key)
                    && r.allows(key, v)
                {
                    seen.insert(v.clone());
                }
            }
            vals = seen.into_iter().map(|v| (0.0, v)).collect();
        }
        vals.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        vals.into_iter().map(|(_, v)| self.values.id(&v)).collect()
    }

    fn max_alloc(&self, pool: usize, types: &Bits) -> Vec<i64> {
        let p = &self.pools[pool];
        let n = self.res.names.len();
        let mut r = vec![0i64; n];
        for i in types.iter() {
            for (k, v) in r.iter_mut().zip(&p.free[i * n..(i + 1) * n]) {
                *k = (*k).max(*v);
            }
        }
        r
    }

    /// The limit reservation of claim `c` if its candidates were `types`: the largest capacity.
    fn reservation(&self, pool: usize, types: &Bits, requests: &[i64]) -> Vec<i64> {
        let p = &self.pools[pool];
        let n = self.res.names.len();
        let mut r = vec![0i64; n];
        for i in types.iter().filter(|i| type_fits(requests, &p.free[i * n..(i + 1) * n])) {
            for (k, v) in r.iter_mut().zip(&p.capacity[i * n..(i + 1) * n]) {
                *k = (*k).max(*v);
            }
        }
        r
    }

    /// Whether any remaining limit of `pool` is below its largest type's capacity (else no
    /// claim can reach the limit and the check is skipped).
    fn limits_matter(&self, pool: usize) -> bool {
        let p = &self.pools[pool];
        p.limited && p.remaining.iter().zip(&p.max_capacity).any(|(r, m)| *r != i64::MAX && r < m)
    }

    fn within_limits(&self, c: usize, types: &Bits, total: &[i64]) -> bool {
        let pool = self.claims[c].pool;
        let new = self.reservation(pool, types, total);
        let p = &self.pools[pool];
        new.iter()
            .zip(&self.claims[c].reserved)
            .zip(&p.remaining)
            .all(|((n, o), rem)| *rem == i64::MAX || n - o <= *rem)
    }

    fn commit_claim(&mut self, pi: usize, g: usize, _l: usize, c: usize, plan: ClaimPlan) {
        let pool = self.claims[c].pool;
        for (t, v) in self.claims[c].requests.iter_mut().zip(&self.pod_requests[pi]) {
            *t += v;
        }
        // Drop the cheapest candidates that no longer fit (requests only grow, so they never
        // will again); the rest are checked when needed, and in full when the claim is output.
        // A looser bound is fine for a quick reject: recompute only when topology or requirements
        // narrowed the candidates, not when pruning dropped the too-small ones.
        let narrowed = plan.types != self.claims[c].types;
        let mut types = plan.types;
        while let Some(i) = types.first() {
            let n = self.res.names.len();
            if type_fits(&self.claims[c].requests, &self.pools[pool].free[i * n..(i + 1) * n]) {
                break;
            }
            types.clear(i);
        }
        if narrowed {
            self.claims[c].max_alloc = self.max_alloc(pool, &types);
        }
        self.claims[c].types = types;
        self.claims[c].req = plan.req;
        self.claims[c].pods.push(pi);
        if !self.groups[g].ports.is_empty() {
            let ports = self.groups[g].ports.clone();
            self.claims[c].ports.extend(ports);
        }
        // Count the pod in every counter it matches, where the claim's domain is determined.
        let req = plan.req;
        for j in 0..self.groups[g].counted_by.len() {
            let ci = self.groups[g].counted_by[j];
            if let Some(d) = self.claim_domain(c, req, &self.counters[ci].key) {
                self.count(ci, d, 1);
            }
        }
        for j in 0..self.groups[g].own_inverse.len() {
            let ii = self.groups[g].own_inverse[j];
            if let Some(d) = self.claim_domain(c, req, &self.inverses[ii].key) {
                self.block(ii, d, 1);
            }
        }
        // Close the claim when even the smallest pod of the batch no longer fits any type.
        let probe: Vec<i64> = self.claims[c].requests.iter().zip(&self.min_request).map(|(a, b)| a + b).collect();
        if !type_fits(&probe, &self.claims[c].max_alloc)
            || !self.any_fit(pool, &self.claims[c].types, &self.claims[c].types, &probe)
        {
            self.claims[c].open = false;
        }
    }

    fn new_claim(&mut self, pi: usize, g: usize, l: usize, p: usize) -> Option<usize> {
        if self.pools[p].nodes_remaining <= 0 || !self.pool_admits(p, g, l) || self.daemon_port_conflict(g, p) {
            return None;
        }
        let level_req = self.groups[g].levels[l].req;
        let pool_req = self.intern_req(self.pools[p].reqs.clone());
        let req = self.intersect(pool_req, level_req);
        if self.unsat[req as usize] {
            return None;
        }
        // Claims hold their pods' requests; DaemonSet overhead is in each type's `free`.
        let total: Vec<i64> = self.pod_requests[pi].clone();
        let ntypes = self.pools[p].types.len();
        let mut candidates = Bits::empty(ntypes);
        {
            let n = self.res.names.len();
            let pool = &self.pools[p];
            for i in 0..ntypes {
                // Only types whose capacity fits the remaining limits.
                if !pool.limited
                    || pool.capacity[i * n..(i + 1) * n]
                        .iter()
                        .zip(&pool.remaining)
                        .all(|(c, r)| *r == i64::MAX || c <= r)
                {
                    candidates.set(i);
                }
            }
        }
        if !self.any_fit(p, &candidates, &candidates, &total) {
            return None;
        }
        let c = self.claims.len();
        let hostname = self.values.id(&format!("{}-claim-{}", self.pools[p].name, c));
        let max_alloc =
            if self.pools[p].limited { self.max_alloc(p, &candidates) } else { self.pools[p].max_alloc.clone() };
        self.claims.push(Claim {
            pool: p,
            req: pool_req,
            types: candidates.clone(),
            requests: vec![0; self.res.names.len()],
            pods: Vec::new(),
            hostname,
            ports: self.pools[p].daemon_ports.clone(),
            reserved: vec![0; self.res.names.len()],
            max_alloc,
            open: true,
        });
        match self.plan_topology(g, l, c, req, &candidates, &total) {
            Ok(plan) if !self.limits_matter(p) || self.within_limits(c, &plan.types, &total) => {
                self.pools[p].nodes_remaining -= 1;
                if self.pools[p].limited {
                    let reserve = self.reservation(p, &plan.types, &total);
                    for (rem, v) in self.pools[p].remaining.iter_mut().zip(&reserve) {
                        if *rem != i64::MAX {
                            *rem -= v;
                        }
                    }
                    self.claims[c].reserved = reserve;
                }
                self.open.push(c);
                self.commit_claim(pi, g, l, c, plan);
                Some(c)
            }
            _ => {
                self.claims.pop();
                None
            }
        }
    }

    /// Whether group `g` asks for a host port the pool's DaemonSets take on every new node.
    fn daemon_port_conflict(&self, g: usize, p: usize) -> bool {
        let ports = &self.groups[g].ports;
        !ports.is_empty() && ports.iter().any(|a| self.pools[p].daemon_ports.iter().any(|b| a.conflicts(b)))
    }

    /// The pool's types with an offering compatible with requirements `req`, cheapest
    /// compatible offering first (then name), with that price.
    fn price_order(&mut self, pool: usize, req: u32) -> Arc<PriceOrder> {
        if let Some(v) = self.price_cache.get(&(pool, req)) {
            return Arc::clone(v);
        }
        let p = &self.pools[pool];
        let r = &self.reqs[req as usize];
        let (zone, ct) = (r.get(ZONE), r.get(CAPACITY_TYPE));
        let mut v: Vec<(f64, usize)> = p
            .types
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let price = t
                    .offerings
                    .iter()
                    .filter(|o| {
                        o.available && zone.is_none_or(|z| z.has(&o.zone)) && ct.is_none_or(|c| c.has(&o.capacity_type))
                    })
                    .map(|o| o.price)
                    .fold(f64::INFINITY, f64::min);
                price.is_finite().then_some((price, i))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| p.types[a.1].name.cmp(&p.types[b.1].name)));
        let v = Arc::new(v);
        self.price_cache.insert((pool, req), Arc::clone(&v));
        v
    }

    /// Claim `c` as a NodeClaim to create (pod indexes are context indexes), and the price of
    /// its cheapest fitting instance type's cheapest compatible offering.
    fn finish_claim(&mut self, c: usize) -> (NewNodeClaim, f64) {
        let order = self.price_order(self.claims[c].pool, self.claims[c].req);
        let claim = &self.claims[c];
        let pool = &self.pools[claim.pool];
        let r = &self.reqs[claim.req as usize];
        let n = self.res.names.len();
        let fitting: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|(_, i)| claim.types.contains(*i) && type_fits(&claim.requests, &pool.free[i * n..(i + 1) * n]))
            .collect();
        let price = fitting.first().map(|(p, _)| *p).unwrap_or(f64::INFINITY);
        let types: Vec<usize> = fitting.into_iter().map(|(_, i)| i).collect();
        let mut requirements: Vec<kerf_api::NodeSelectorRequirementWithMinValues> = r
            .iter()
            .filter(|(k, x)| k.as_str() != INSTANCE_TYPE && !x.is_any())
            .flat_map(|(k, x)| x.to_node_selector(k))
            .collect();
        let it = kerf_api::NodeSelectorRequirementWithMinValues {
            key: INSTANCE_TYPE.to_string(),
            operator: Operator::In,
            values: types.iter().map(|i| pool.types[*i].name.clone()).collect(),
            min_values: r.get(INSTANCE_TYPE).and_then(|x| x.min_values),
        };
        let at = requirements.partition_point(|x| x.key.as_str() < INSTANCE_TYPE);
        requirements.insert(at, it);
        let mut labels = pool.labels.clone();
        for (k, v) in r.single_valued_labels() {
            if k != INSTANCE_TYPE {
                labels.insert(k, v);
            }
        }
        let mut pods = claim.pods.clone();
        pods.sort_unstable();
        // The pods' requests plus the DaemonSet overhead of the cheapest fitting type.
        let mut requests = claim.requests.clone();
        if let Some(first) = types.first() {
            for (r, o) in requests.iter_mut().zip(&pool.overhead[first * n..(first + 1) * n]) {
                *r += o;
            }
        }
        let claim = NewNodeClaim {
            node_pool: pool.name.clone(),
            requirements,
            instance_types: types.iter().map(|i| Arc::clone(&pool.types[*i])).collect(),
            labels,
            taints: pool.taints.clone(),
            startup_taints: pool.startup_taints.clone(),
            pods,
            requests: self.res.list(&requests),
        };
        (claim, price)
    }

    // -----------------------------------------------------------------------------------------
    // Explanations

    /// The distinct values of `key` among pool `p`'s instance types (their labels, names, and
    /// available offerings' zones and capacity types), sorted.
    fn type_values(&self, p: usize, key: &str) -> Vec<String> {
        let mut vals: BTreeSet<&str> = BTreeSet::new();
        for t in &self.pools[p].types {
            if key == ZONE || key == CAPACITY_TYPE {
                for o in t.offerings.iter().filter(|o| o.available) {
                    vals.insert(if key == ZONE { &o.zone } else { &o.capacity_type });
                }
            } else if let Some(v) = t.labels.get(key) {
                vals.insert(v);
            } else if key == INSTANCE_TYPE {
                vals.insert(&t.name);
            }
        }
        vals.into_iter().map(str::to_string).collect()
    }

    /// Why pod `pi` fits nowhere: existing nodes summarized kube-scheduler style, then each
    /// NodePool with what excluded it (at the most relaxed level).
    fn explain(&mut self, pi: usize, g: usize) -> PodError {
        if let Some(why) = &self.groups[g].unresolvable {
            return PodError { reason: "UnresolvableVolume".to_string(), message: why.clone() };
        }
        let l = self.groups[g].levels.len().saturating_sub(1);
        let mut parts: Vec<String> = Vec::new();
        if !self.nodes.is_empty() {
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            for n in 0..self.nodes.len() {
                let why = self.node_reason(pi, g, l, n);
                *reasons.entry(why).or_insert(0) += 1;
            }
            let list: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.push(format!("0/{} nodes are available: {}", self.nodes.len(), list.join(", ")));
        }
        let mut all_limits = !self.pools.is_empty();
        for p in 0..self.pools.len() {
            let (why, is_limit) = self.pool_reason(pi, g, l, p);
            all_limits &= is_limit;
            parts.push(format!("NodePool {}: {}", self.pools[p].name, why));
        }
        if self.pools.is_empty() {
            parts.push("no NodePool can launch nodes".to_string());
        }
        let mut message = parts.join("; ");
        if let Some(r) = self.groups[g].levels.get(l).and_then(|x| x.relaxed.clone()) {
            message.push_str(&format!(" (after relaxing preferences: {r})"));
        }
        PodError { reason: if all_limits { "NodePoolLimitExceeded" } else { "Unschedulable" }.to_string(), message }
    }

    fn node_reason(&mut self, pi: usize, g: usize, l: usize, n: usize) -> String {
        match self.node_fit(pi, g, l, n) {
            Ok(()) => "node(s) would fit".into(),
            Err(why) => {
                let static_ok = self.node_static_ok(g, l, n);
                crate::fit::describe(&NodeFit { s: self, pi, g, l, n, static_ok }, why).reason
            }
        }
    }

    fn spread_counts(&self, s: &SpreadPlan) -> String {
        let c = &self.counters[s.counter];
        let counts: Vec<String> =
            s.domains.iter().map(|d| format!("{}: {}", self.values.name(*d), c.get(*d))).collect();
        format!(
            "key {} maxSkew {}, counts in reachable domains {{{}}}{}",
            s.key,
            s.max_skew,
            counts.join(", "),
            if s.fresh { " plus an empty new node" } else { "" }
        )
    }

    /// What excluded NodePool `p`, and whether it was (only) its limits.
    fn pool_reason(&mut self, pi: usize, g: usize, l: usize, p: usize) -> (String, bool) {
        let level = self.groups[g].levels[l].clone();
        let grp = &self.groups[g];
        let pool = &self.pools[p];
        if let Some(t) = pod::untolerated_taint_with(&grp.tolerations, &pool.taints, !level.tolerate_prefer) {
            return (format!("untolerated taint {}", t), false);
        }
        let pod_req = self.reqs[level.req as usize].clone();
        if let Err(e) = pool.reqs.compatible_strict(&pod_req, |k| pool.type_keys.contains(k)) {
            let pool_side = if e.left == "undefined" {
                format!("NodePool's nodes have no label {}", e.key)
            } else {
                format!("NodePool requires {} {}", e.key, e.left)
            };
            return (
                format!("incompatible requirements, key {}: {pool_side}, pod requires {} {}", e.key, e.key, e.right),
                false,
            );
        }
        if pool.types.is_empty() {
            return ("the NodePool has no instance types".into(), false);
        }
        if self.daemon_port_conflict(g, p) {
            return ("a host port the pod asks for is taken by a DaemonSet pod on every new node".into(), false);
        }
        // Resources the pod needs that no type has at all, then ones too small.
        let n = self.res.names.len();
        let total = self.pod_requests[pi].clone();
        for (ri, name) in self.res.names.iter().enumerate() {
            if self.pod_requests[pi][ri] > 0 && (0..pool.types.len()).all(|i| pool.alloc[i * n + ri] <= 0) {
                return (format!("no instance type in NodePool {} has resource {}", pool.name, name), false);
            }
        }
        let pool_req = self.intern_req(self.pools[p].reqs.clone());
        let req = self.intersect(pool_req, level.req);
        if let Some(k) = self.reqs[req as usize].unsatisfiable_key() {
            return (format!("incompatible requirements, key {k}: no value satisfies both"), false);
        }
        let compat = self.compat(p, req);
        if compat.is_empty() {
            // Find the requirement that excludes every type.
            let r = self.reqs[req as usize].clone();
            for (k, kr) in r.iter() {
                if k == HOSTNAME || k == NODE_POOL {
                    continue;
                }
                let mut one = Requirements::new();
                one.add(k, kr.clone());
                let id = self.intern_req(one);
                if self.compat(p, id).is_empty() {
                    // Name what the types do have, so both sides of the mismatch are visible.
                    let have = self.type_values(p, k);
                    let have = if have.is_empty() {
                        String::new()
                    } else {
                        format!(" (the NodePool's instance types have {k} {})", value_list(&have))
                    };
                    return (
                        format!("no instance type with an available offering satisfies requirement {k} {kr}{have}"),
                        false,
                    );
                }
            }
            return (format!("no instance type with an available offering satisfies requirements {r}"), false);
        }
        let fit_any = self.fitting(p, &compat, &total);
        if fit_any.is_empty() {
            let pool = &self.pools[p];
            let short: Vec<String> = self
                .res
                .names
                .iter()
                .enumerate()
                .filter(|(ri, _)| total[*ri] > 0 && compat.iter().all(|i| pool.free[i * n + ri] < total[*ri]))
                .map(|(ri, name)| {
                    // The type with the most room left after its DaemonSets.
                    let best = compat.iter().max_by_key(|i| pool.free[i * n + ri]).unwrap_or(0);
                    let overhead = pool.overhead.get(best * n + ri).copied().unwrap_or(0);
                    let alloc = pool.alloc.get(best * n + ri).copied().unwrap_or(0);
                    format!(
                        "{name} (needs {} plus daemonset overhead {}, largest allocatable {})",
                        from_units(name, total[ri]),
                        from_units(name, overhead),
                        from_units(name, alloc)
                    )
                })
                .collect();
            return if short.is_empty() {
                ("no single instance type fits all requested resources together".into(), false)
            } else {
                (format!("no instance type has enough {}", short.join(", ")), false)
            };
        }
        let pool = &self.pools[p];
        if pool.nodes_remaining <= 0 {
            return (format!("limit nodes exhausted (limit {})", limit_of(&pool.node_pool, "nodes")), true);
        }
        if pool.limited {
            let within: Vec<usize> = fit_any
                .iter()
                .filter(|i| {
                    pool.capacity[i * n..(i + 1) * n].iter().zip(&pool.remaining).all(|(c, r)| *r == i64::MAX || c <= r)
                })
                .collect();
            if within.is_empty() {
                let names: Vec<String> = self
                    .res
                    .names
                    .iter()
                    .enumerate()
                    .filter(|(ri, _)| pool.remaining[*ri] != i64::MAX)
                    .map(|(ri, name)| {
                        format!(
                            "{name} limit {} (remaining {})",
                            limit_of(&pool.node_pool, name),
                            from_units(name, pool.remaining[ri].max(0))
                        )
                    })
                    .collect();
                return (format!("limits exhausted: {}", names.join(", ")), true);
            }
        }
        if let Some((k, m, have)) = self.min_values_ok(p, &fit_any) {
            return (
                format!("minValues {m} for key {k} not met: only {have} values among fitting instance types"),
                false,
            );
        }
        // Topology.
        for s in &level.spreads {
            let allowed: Vec<u32> = s.domains.iter().copied().filter(|d| self.spread_allows(s, *d)).collect();
            if allowed.is_empty() || !s.fresh {
                return (format!("topology spread constraint not satisfiable, {}", self.spread_counts(s)), false);
            }
        }
        if !level.affinity.is_empty() {
            return (
                "pod affinity not satisfiable: no domain the NodePool can launch in has the required pods".into(),
                false,
            );
        }
        if !level.anti.is_empty() || !self.groups[g].rejected_by.is_empty() {
            return ("pod anti-affinity not satisfiable in any domain the NodePool can launch in".into(), false);
        }
        ("no compatible instance type and offering fits with the pod's topology constraints".into(), false)
    }
}

/// What a node of instance type `t` from a pool with requirements `pool` would carry: the
/// pool's requirements narrowed to the type's labels and its available offerings' zones and
/// capacity types.
fn type_requirements(pool: &Requirements, t: &InstanceType) -> Requirements {
    let mut r = pool.clone();
    r.add(INSTANCE_TYPE, Requirement::single(t.name.clone()));
    for (k, v) in &t.labels {
        r.add(k, Requirement::single(v.clone()));
    }
    let available = || t.offerings.iter().filter(|o| o.available);
    let zones: BTreeSet<&str> = available().map(|o| o.zone.as_str()).collect();
    let capacity_types: BTreeSet<&str> = available().map(|o| o.capacity_type.as_str()).collect();
    r.add(ZONE, Requirement::new(Operator::In, &zones.into_iter().collect::<Vec<_>>()));
    r.add(CAPACITY_TYPE, Requirement::new(Operator::In, &capacity_types.into_iter().collect::<Vec<_>>()));
    r
}

/// One requirement set standing for alternatives (a volume's node affinity terms): when every
/// alternative constrains only the same single key with finite values (the usual zone list),
/// their union; otherwise the first alternative.
fn volume_union(alts: &[Requirements]) -> Requirements {
    let single_key = alts.first().and_then(|a| (a.len() == 1).then(|| a.keys().next().cloned()).flatten());
    if let Some(key) = single_key {
        let mut values: BTreeSet<String> = BTreeSet::new();
        let mut ok = true;
        for a in alts {
            match (a.len() == 1, a.get(&key).and_then(|r| r.values())) {
                (true, Some(v)) => values.extend(v.iter().cloned()),
                _ => ok = false,
            }
        }
        if ok {
            let values: Vec<String> = values.into_iter().collect();
            let mut r = Requirements::new();
            r.add(&key, Requirement::new(Operator::In, &values));
            return r;
        }
    }
    alts.first().cloned().unwrap_or_default()
}

/// `a, b, c`, or the first few and how many more.
fn value_list(values: &[String]) -> String {
    const SHOWN: usize = 5;
    if values.len() <= SHOWN {
        values.join(", ")
    } else {
        format!("{} and {} more", values[..SHOWN].join(", "), values.len() - SHOWN)
    }
}

fn limit_of(np: &NodePool, name: &str) -> String {
    np.spec.limits.as_ref().map(|l| l.get(name).to_string()).unwrap_or_default()
}

/// Whether two pods (same namespace and labels) have the same scheduling constraints.
fn same_constraints(a: &Pod, b: &Pod) -> bool {
    let (Some(x), Some(y)) = (&a.spec, &b.spec) else { return a.spec.is_none() && b.spec.is_none() };
    pod::namespace(a) == pod::namespace(b)
        && pod::labels(a) == pod::labels(b)
        && x.node_selector == y.node_selector
        && x.affinity == y.affinity
        && x.tolerations == y.tolerations
        && x.topology_spread_constraints == y.topology_spread_constraints
        // `nodeName` is a binding, not a constraint the Scheduler places by: pods on existing
        // nodes differ in it and still move alike.
        && x.volumes == y.volumes
        // Generic ephemeral volumes are claims named after the pod: such pods stand alone.
        && (x.volumes.iter().flatten().all(|v| v.ephemeral.is_none()) || a.metadata.name == b.metadata.name)
        && pod::host_ports(a) == pod::host_ports(b)
}
