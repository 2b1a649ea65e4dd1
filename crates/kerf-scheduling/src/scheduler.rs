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
//! cluster change, then ask it as often as needed ([`SchedulingContext::with_facts`] takes the
//! parsed facts of unchanged pods from a [`PodFactsCache`] kept across builds); each query
//! records what it changes and puts it back when it ends, so a query costs what it places, not
//! what the cluster holds.
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
//!   pool can launch) no longer counts, and what the removed nodes held of their NodePools'
//!   limits ([`ExistingNode::pool_usage`](crate::ExistingNode::pool_usage)) is free for their
//!   replacements. The [`WhatIf`] says, by index into `WhatIf::pods`, which
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
//! dense integer vectors; a pod finds the open claims with room for it through an index that
//! also skips the claims known never to take its group (`room`).
//!
//! # Modules
//!
//! This file is the context and its queries; each part of the work has its own module:
//! `ids` (typed indexes: pods, groups, levels, nodes, claims, pools, counters, and the tables
//! they index), `facts` (what is read from each pod, and its cache), `resources` (dense
//! resource vectors and per-type tables), `interning` (values, requirement sets, type bitsets),
//! `pools` (NodePools, type tables, DaemonSet overhead, limits, prices), `pool_fit` (whether a
//! pod can go on a new claim of a pool, and if not, why), `topology` (counters, anti-affinity
//! blocks, spread domains), `preferences` (pod groups and relaxation levels), `existing`
//! (existing nodes and the fit check on them), `claims` (new NodeClaims), `queue` (placement
//! order and retries), `journal` (undoing a query), `explain` (why a pod fits nowhere, in
//! words), `replay` (consolidation's check that kube-scheduler would bind the moved pods where
//! the plan counts on), `kept_view` (that view kept from one context for the next and edited
//! to its cluster instead of built again), `offers` (a pool's types as new claims see them),
//! `packing` (new claims sized by cost), `join_cost` (a pod making the claim it joins dearer than
//! it is worth), `dearer` (the claims a group's pods found dearer, skipped until that changes).

mod claims;
mod dearer;
mod existing;
mod explain;
mod facts;
mod ids;
mod interning;
mod join_cost;
mod journal;
mod kept_view;
mod offers;
mod packing;
mod pool_fit;
mod pools;
mod preferences;
mod queue;
mod replay;
mod resources;
mod reuse;
mod room;
mod topology;

use claims::Claim;
use existing::Node;
use facts::PodFacts;
pub use facts::PodFactsCache;
use ids::{ClaimIx, CounterIx, GroupIx, Idx, InverseIx, IxVec, NodeIx, PodIx, PoolIx};
use interning::{Bits, Interner};
use journal::Undo;
pub use kept_view::KeptKubeView;
pub use offers::PoolTypeView;
use packing::{MIX_PODS, MIX_SLACKS, Packing};
use pools::{Pool, PriceOrder};
use preferences::Group;
use replay::KubeView;
pub use replay::{KubeReplay, Replacement, Turn};
use resources::Resources;
use room::RoomIndex;
use topology::{Counter, Inverse};

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::TaintEffect;
use kerf_api::resources::{CPU, MEMORY, PODS};

use crate::model::{Placement, PricedClaim, SchedulingInput, SchedulingResult, UnknownNode, WhatIf};
use crate::pod;
use crate::requirements::Requirements;

/// Places `input.pods`; see the module documentation. A thin wrapper: builds a
/// [`SchedulingContext`] for the input and places its pending pods.
pub fn schedule(input: &SchedulingInput) -> SchedulingResult {
    SchedulingContext::new(input.clone()).place_pending()
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
    compat_cache: HashMap<(PoolIx, u32), Arc<Bits>>,
    price_cache: HashMap<(PoolIx, u32), Arc<PriceOrder>>,
    pools: IxVec<PoolIx, Pool>,
    groups: IxVec<GroupIx, Group>,
    counters: IxVec<CounterIx, Counter>,
    inverses: IxVec<InverseIx, Inverse>,
    nodes: IxVec<NodeIx, Node>,
    node_index: HashMap<String, NodeIx>,
    /// The running query's new claims, in creation order.
    claims: IxVec<ClaimIx, Claim>,
    /// Which of them could take a pod of given requests (see `room`).
    room: RoomIndex,
    /// The groups some claim of the running query refuses (see `Group::refused`).
    refusing: Vec<GroupIx>,
    /// Open claims found dearer for a group's pods at a level (see `dearer`), by slot.
    dearer: Vec<dearer::Dearer>,
    dearer_slot: HashMap<(GroupIx, ids::LevelIx), usize>,
    /// The slots holding verdicts.
    dearing: Vec<usize>,
    /// Tests: whether verdicts are kept, and how many were.
    #[cfg(test)]
    dearer_off: bool,
    #[cfg(test)]
    dearer_noted: usize,
    /// Every pod's dense requests: the pending pods (`input.pods`) first, then the pods on
    /// existing nodes (see `existing`).
    pod_requests: IxVec<PodIx, Vec<i64>>,
    /// Every pod's parsed facts, by the same index.
    facts: IxVec<PodIx, Arc<PodFacts>>,
    pod_group: IxVec<PodIx, GroupIx>,
    /// The pods on existing nodes, indexed from `input.pods.len()`.
    existing: Vec<Arc<SlimPod>>,
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
    removed: Vec<NodeIx>,
    /// The running query's nodes with room for its smallest pod, in node order.
    roomy: Vec<NodeIx>,
    /// Cost-driven sizing of new claims (provisioning only).
    packing: Packing,
    /// kube-scheduler's view of the existing nodes, for [`SchedulingContext::kube_replay`]
    /// (built on first use).
    kube_view: Option<KubeView>,
    /// A view kept from an earlier context, edited into `kube_view` on first use.
    kept_kube_view: KeptKubeView,
}

/// The context indexes ([`PodIx`]) of each existing node's pods, node by node in input order:
/// the pending pods come first, then each existing node's pods in turn (as `build` lays out
/// `facts`).
fn existing_pod_ranges(input: &SchedulingInput) -> Vec<std::ops::Range<usize>> {
    let mut next = input.pods.len();
    input
        .existing_nodes
        .iter()
        .map(|n| {
            let range = next..next + n.pods.len();
            next = range.end;
            range
        })
        .collect()
}

impl SchedulingContext {
    /// Builds the context for `input`: pools with their type tables and daemonset overhead,
    /// existing nodes with their pods counted in every topology counter, and the parsed facts of
    /// every pod (pending and existing).
    pub fn new(input: impl Into<Arc<SchedulingInput>>) -> Self {
        Self::build(input.into(), None, None)
    }

    /// [`new`](Self::new), reading each pod's facts from `cache` when the pod (uid and
    /// resourceVersion) is unchanged since an earlier build, and keeping the facts of the pods
    /// it parses there for the next build.
    pub fn with_facts(input: impl Into<Arc<SchedulingInput>>, cache: &PodFactsCache) -> Self {
        Self::build(input.into(), Some(cache), None)
    }

    /// [`with_facts`](Self::with_facts), taking over from `earlier` (a context of an earlier,
    /// mostly equal input, dropped here) the facts and dense requests of the pods of nodes it
    /// had with the very same pods (see `reuse`). The context answers as one built by
    /// [`with_facts`](Self::with_facts) does.
    pub fn with_facts_from(
        input: impl Into<Arc<SchedulingInput>>,
        cache: &PodFactsCache,
        earlier: SchedulingContext,
    ) -> Self {
        Self::build(input.into(), Some(cache), Some(earlier))
    }

    fn build(input: Arc<SchedulingInput>, cache: Option<&PodFactsCache>, earlier: Option<SchedulingContext>) -> Self {
        let existing: Vec<Arc<SlimPod>> = input.existing_nodes.iter().flat_map(|n| n.pods.iter().cloned()).collect();
        let (facts, taken) = match earlier {
            Some(e) => reuse::facts_from(&input, &existing, cache, e),
            None => (facts::gather(input.pods.iter().chain(&existing), cache), reuse::Requests::none()),
        };
        let facts: IxVec<PodIx, Arc<PodFacts>> = facts.into();
        // Resource names of the whole cluster.
        let mut names: BTreeSet<String> = [CPU, MEMORY, PODS].iter().map(|s| s.to_string()).collect();
        for f in &facts {
            for (k, _) in &f.requests {
                // cpu, memory and pods are named already (most pods ask nothing else).
                let known = matches!(k, std::borrow::Cow::Borrowed(n) if [CPU, MEMORY, PODS].contains(n));
                if !known && !names.contains(k.as_ref()) {
                    names.insert(k.to_string());
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
        let mut taken = taken.for_names(&res.names);
        let pod_requests: IxVec<PodIx, Vec<i64>> = facts
            .iter()
            .enumerate()
            .map(|(pi, f)| taken.get_mut(pi).and_then(Option::take).unwrap_or_else(|| res.dense_units(&f.requests)))
            .collect();
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
            price_cache: HashMap::new(),
            pools: IxVec::default(),
            groups: IxVec::default(),
            counters: IxVec::default(),
            inverses: IxVec::default(),
            nodes: IxVec::default(),
            node_index: HashMap::new(),
            claims: IxVec::default(),
            room: RoomIndex::default(),
            refusing: Vec::new(),
            dearer: Vec::new(),
            dearer_slot: HashMap::new(),
            dearing: Vec::new(),
            #[cfg(test)]
            dearer_off: false,
            #[cfg(test)]
            dearer_noted: 0,
            pod_requests,
            facts,
            pod_group: IxVec::default(),
            existing,
            min_request: Vec::new(),
            scratch: Vec::new(),
            prefer_taints,
            journal: Vec::new(),
            pool_limits: Vec::new(),
            removed: Vec::new(),
            roomy: Vec::new(),
            packing: Packing::default(),
            kube_view: None,
            kept_kube_view: KeptKubeView::default(),
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
    fn pod(&self, pi: PodIx) -> &Arc<SlimPod> {
        let batch = self.input.pods.len();
        if pi.ix() < batch { &self.input.pods[pi.ix()] } else { &self.existing[pi.ix() - batch] }
    }

    /// Places the pending pods (`input.pods`): onto existing nodes and in-flight claims first,
    /// then onto new NodeClaims; explains every pod it cannot place. Pod indexes in the result
    /// are indexes into `input.pods`. The context is left as it was: it can be asked again.
    pub fn place_pending(&mut self) -> SchedulingResult {
        let pods: Vec<PodIx> = (0..self.input.pods.len()).map(PodIx::new).collect();
        let (mut best, mut cost) = self.place_batch(&pods, 0.0);
        // Plans whose claims keep room for mixes of pod shapes (see `packing`), for batches
        // small enough to place a few times; the cheapest placing as many pods is kept.
        if pods.len() <= MIX_PODS && self.may_mix() {
            let placed = |r: &SchedulingResult| {
                r.placements.len() + r.new_node_claims.iter().map(|c| c.pods.len()).sum::<usize>()
            };
            for slack in MIX_SLACKS {
                let (plan, plan_cost) = self.place_batch(&pods, slack);
                if placed(&plan) >= placed(&best) && plan_cost < cost * (1.0 - 1e-9) {
                    (best, cost) = (plan, plan_cost);
                }
            }
        }
        best
    }

    /// Places `pods` once (`mix_slack`: see `packing`; 0: no mixes), returning the plan and its
    /// new claims' cost.
    fn place_batch(&mut self, pods: &[PodIx], mix_slack: f64) -> (SchedulingResult, f64) {
        self.begin();
        self.packing.enabled = true;
        self.packing.mix_slack = mix_slack;
        let run = self.run(pods, true);
        self.packing.enabled = false;
        self.packing.mix_slack = 0.0;
        let mut cost = 0.0;
        let mut result = SchedulingResult {
            placements: run
                .on_node
                .into_iter()
                .map(|(pod, n)| Placement { pod: pod.ix(), node: self.nodes[n].name.clone() })
                .collect(),
            new_node_claims: Vec::new(),
            errors: run.errors.into_iter().map(|(pod, e)| (pod.ix(), e)).collect(),
        };
        for c in self.claims.indices() {
            let (claim, price) = self.finish_claim(c);
            cost += price;
            result.new_node_claims.push(claim);
        }
        self.rollback();
        (result, cost)
    }

    /// Each pod's group (pending pods first, then existing ones), for tests of the grouping.
    #[cfg(test)]
    pub(crate) fn pod_groups(&self) -> Vec<usize> {
        self.pod_group.iter().map(|g| g.ix()).collect()
    }

    /// The index of the existing node (or in-flight claim) called `name`.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.node_index.get(name).map(|n| n.ix())
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
        for n in nodes.iter().copied().map(NodeIx::new) {
            if self.removed.contains(&n) {
                continue;
            }
            self.removed.push(n);
            self.journal.push(Undo::Removed { node: n, old: self.nodes[n].schedulable });
            self.nodes[n].schedulable = false;
            self.release_limits(n);
            for j in 0..self.nodes[n].pods.len() {
                let pi = self.nodes[n].pods[j];
                let p = Arc::clone(self.pod(pi));
                if p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                // The pod leaves the node's domains, whether it moves or goes with the node.
                self.count_pod(n, pi, -1);
                if kerf_api::pod_facts::rescheduled_when_node_goes(&*p) {
                    moved.push(pi);
                }
            }
        }
        let run = self.run(&moved, false);
        let position = |pi: PodIx| moved.iter().position(|m| *m == pi).unwrap_or(usize::MAX);
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
        for c in self.claims.indices() {
            let (mut claim, price) = self.finish_claim(c);
            claim.pods = claim.pods.iter().map(|pi| position(PodIx::new(*pi))).collect();
            claim.pods.sort_unstable();
            out.new_node_claims.push(PricedClaim { claim, price });
        }
        out.placements.sort_by_key(|p| p.pod);
        self.rollback();
        out
    }
}
