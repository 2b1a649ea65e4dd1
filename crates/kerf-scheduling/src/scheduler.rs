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
//! # Parts and modules
//!
//! This file is the context, its queries, and the glue that hands each module the parts it
//! works on. The context is made of parts, each a struct its module owns with the functions
//! that work on it: `interning::Interned` (label values and requirement sets as ids, their
//! intersections cached), `pools::Pools` (each NodePool's rules, type table and limits, what a
//! requirement set admits of its types and at what price; `offers` is what new claims see of
//! them), the groups of `preferences` (pods with identical constraints, and their levels:
//! preferences dropped one by one), `topology::Topology` (counters and anti-affinity blocks per
//! domain, spread plans), the nodes of `existing` (existing nodes and in-flight claims),
//! `facts::Pods` (every pod's requests, facts and group), the running query (its
//! `claims::Claims`, the `journal` of what it changed, undone when it ends, and the nodes a
//! what-if removed), `dearer::Verdicts` (the claims a group's pods found dearer, skipped until
//! that changes), `packing::Packing` (new claims sized by cost) and `replay::KubeViews`
//! (kube-scheduler's view of the nodes, kept from one context for the next, for consolidation's
//! check that kube-scheduler would bind the moved pods where the plan counts on).
//!
//! `placement` is where each pod goes, read top to bottom: order, bins, retries. Every check it
//! makes is a module working on a bundle of the parts it reads (`&`) and changes (`&mut`),
//! borrowed from the context by the glue at the end of this file: `node_fit::NodeChecks` (the
//! fit check on existing nodes), `claims::ClaimParts` (joining open NodeClaims and opening new
//! ones), `join_cost::JoinParts` (a pod making the claim it joins dearer than it is worth),
//! `explain::ExplainParts` (why a pod fits nowhere, in words) and `preferences::LevelParts` (a
//! group's next level); `claims` and `explain` ask `pool_fit::PoolFit` whether a pod can go on
//! a new claim of a pool, and if not, why (a `refusal::Why`). No module but `placement` sees
//! the context. `ids` holds the typed indexes, `resources` dense resource vectors, `room` the
//! index of open claims with room, `reuse` what a context takes over from an earlier one.

mod claims;
mod dearer;
mod existing;
mod explain;
mod facts;
mod ids;
mod interning;
mod join_cost;
mod journal;
mod node_fit;
mod offers;
mod packing;
mod placement;
mod pool_fit;
mod pools;
mod preferences;
mod quotas;
mod refusal;
mod replay;
mod request_rows;
mod resources;
mod reuse;
mod room;
mod topology;

use claims::{ClaimParts, Claims};
use dearer::Verdicts;
use existing::Node;
use explain::ExplainParts;
pub use facts::PodFactsCache;
use facts::{PodFacts, Pods};
use ids::{Attempt, GroupIx, Idx, IxVec, LevelIx, NodeIx, PodIx};
use interning::Interned;
use join_cost::JoinParts;
use journal::Undo;
use node_fit::NodeChecks;
pub use offers::PoolTypeView;
use packing::{MIX_PODS, MIX_SLACKS, Packing};
use pools::{Limits, Pools};
use preferences::{Group, LevelParts};
use replay::KubeViews;
pub use replay::{KeptKubeView, KubeReplay, Replacement, Turn};
use request_rows::RequestRows;
use resources::Resources;
use topology::{Gone, Topology};

use std::collections::BTreeSet;
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::TaintEffect;
use kerf_api::resources::{ATTACHABLE_VOLUMES_EBS, CPU, MEMORY, PODS};

use crate::model::{Placement, PricedClaim, SchedulingInput, SchedulingResult, UnknownNode, WhatIf};
use crate::pod;

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
    /// Interned label values and requirement sets, and what is cached per requirement set.
    interned: Interned,
    pools: Pools,
    groups: IxVec<GroupIx, Group>,
    /// Topology counters and anti-affinity blocks.
    topology: Topology,
    nodes: IxVec<NodeIx, Node>,
    node_index: foldhash::HashMap<String, NodeIx>,
    /// Every pod's requests, facts and group.
    pods: Pods,
    /// The running query's claims and what it changed.
    query: Query,
    /// Open claims found dearer for a group's pods at a level (see `dearer`).
    dearer: Verdicts,
    /// Whether any pool or node has a PreferNoSchedule taint (else that relaxation is moot).
    prefer_taints: bool,
    /// Cost-driven sizing of new claims (provisioning only).
    packing: Packing,
    /// kube-scheduler's view of the existing nodes, for [`SchedulingContext::kube_replay`].
    kube: KubeViews,
}

/// The running query's state: its new claims, what it changed (undone when it ends), and what
/// it placed against.
#[derive(Default)]
struct Query {
    /// The new claims and the index of those with room.
    claims: Claims,
    /// The groups some claim refuses (see `GroupState::refused`).
    refusing: Vec<GroupIx>,
    /// The nodes with room for the smallest pod, in node order.
    roomy: Vec<NodeIx>,
    /// What the query changed.
    journal: Vec<Undo>,
    /// Pool limits before the query.
    pool_limits: Vec<Limits>,
    /// CapacityQuotas before the query.
    quotas: Vec<quotas::Quota>,
    /// Nodes taken away by a what-if.
    removed: Vec<NodeIx>,
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
        let facts = match earlier {
            Some(e) => reuse::facts_from(&input, &existing, cache, e.into_earlier()),
            None => facts::gather(input.pods.iter().chain(&existing), cache),
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
        if !input.ebs_claims.is_empty() {
            names.insert(ATTACHABLE_VOLUMES_EBS.to_string());
        }
        let names: Vec<String> = names.into_iter().collect();
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        let res = Resources { names, index };
        // Pods with the very same facts ask the same: one row each, worked out once.
        let mut pod_requests = RequestRows::new(res.names.len());
        let mut row_of_facts: foldhash::HashMap<usize, u32> = foldhash::HashMap::default();
        // EBS volumes depend on the claims' classes, not the pod alone: counted here, per build.
        let ebs = res.column(ATTACHABLE_VOLUMES_EBS).filter(|_| !input.ebs_claims.is_empty());
        for (f, p) in facts.iter().zip(input.pods.iter().chain(&existing)) {
            let n = match ebs {
                None => *row_of_facts
                    .entry(Arc::as_ptr(f) as usize)
                    .or_insert_with(|| pod_requests.row(&res.dense_units(&f.requests))),
                Some(col) => {
                    let mut row = res.dense_units(&f.requests);
                    row[col] = crate::volume_limits::ebs_volume_count(p, &input.ebs_claims);
                    pod_requests.row(&row)
                }
            };
            pod_requests.push(n);
        }
        let pod_requests = pod_requests.finish();
        let prefer_taints = input
            .node_pools
            .iter()
            .flat_map(|p| &p.node_pool.spec.template.spec.taints)
            .chain(input.existing_nodes.iter().flat_map(|n| &n.taints))
            .any(|t| t.effect == TaintEffect::PreferNoSchedule);
        let pods = Pods { requests: pod_requests, facts, group: IxVec::default(), existing };
        let pools = Pools::build(&input, &res);
        let mut interned = Interned::default();
        let (nodes, node_index) = existing::build(&input, &res, &pools, &pods, &mut interned.values);
        let mut s = SchedulingContext {
            input,
            res,
            interned,
            pools,
            groups: IxVec::default(),
            topology: Topology::default(),
            nodes,
            node_index,
            pods,
            query: Query::default(),
            dearer: Verdicts::default(),
            prefer_taints,
            packing: Packing::default(),
            kube: KubeViews::default(),
        };
        s.groups = preferences::build_groups(&s.input, &mut s.pods, &mut s.topology);
        s.count_existing();
        // The base state is not part of any query.
        s.query.journal.clear();
        s
    }

    /// Starts a query: remembers the pool limits it may use up.
    pub(super) fn begin(&mut self) {
        self.query.journal.clear();
        self.forget_claims();
        self.query.pool_limits = self.pools.all.iter().map(|p| p.limits.clone()).collect();
        self.query.quotas = self.pools.quotas.all.clone();
    }

    /// Drops the query's claims and what is known of them.
    fn forget_claims(&mut self) {
        self.query.claims.clear(self.res.names.len());
        for g in std::mem::take(&mut self.query.refusing) {
            self.groups[g].state.refused.clear();
        }
        self.dearer.forget();
    }

    /// Ends a query: puts back everything it changed.
    pub(super) fn rollback(&mut self) {
        while let Some(u) = self.query.journal.pop() {
            match u {
                Undo::NodeUsed { node, pod } => {
                    for (u, v) in self.nodes[node].used.iter_mut().zip(&self.pods.requests[pod]) {
                        *u -= v;
                    }
                }
                Undo::NodePorts { node, len } => self.nodes[node].ports.truncate(len),
                Undo::Count { counter, domain, delta } => self.topology.counters[counter].add(domain, -delta),
                Undo::Block { inverse, domain, delta } => self.topology.inverses[inverse].block(domain, -delta),
                Undo::Removed { node, old } => self.nodes[node].schedulable = old,
            }
        }
        self.forget_claims();
        for (pool, limits) in self.pools.all.iter_mut().zip(std::mem::take(&mut self.query.pool_limits)) {
            pool.limits = limits;
        }
        self.pools.quotas.all = std::mem::take(&mut self.query.quotas);
        self.query.removed.clear();
    }

    /// Counts the pods on existing nodes (not terminating) in every topology counter.
    pub(super) fn count_existing(&mut self) {
        for n in self.nodes.indices() {
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
    fn count_pod(&mut self, n: NodeIx, pi: PodIx, delta: i64) {
        let g = &self.groups[self.pods.group[pi]];
        let values = &self.interned.values;
        self.topology.count_pod(
            &mut self.query.journal,
            &self.nodes[n],
            values,
            &g.state.counted_by,
            &g.state.own_inverse,
            delta,
        );
    }

    /// The pod with context index `pi` (pending pods first, then existing ones).
    fn pod(&self, pi: PodIx) -> &Arc<SlimPod> {
        let batch = self.input.pods.len();
        if pi.ix() < batch { &self.input.pods[pi.ix()] } else { &self.pods.existing[pi.ix() - batch] }
    }

    /// Places the pending pods (`input.pods`): onto existing nodes and in-flight claims first,
    /// then onto new NodeClaims; explains every pod it cannot place. Pod indexes in the result
    /// are indexes into `input.pods`. The context is left as it was: it can be asked again.
    pub fn place_pending(&mut self) -> SchedulingResult {
        let pods: Vec<PodIx> = (0..self.input.pods.len()).map(PodIx::new).collect();
        let (mut best, mut cost) = self.place_batch(&pods, 0.0);
        // Plans whose claims keep room for mixes of pod shapes (see `packing`), for batches
        // small enough to place a few times; the cheapest placing as many pods is kept.
        if pods.len() <= MIX_PODS && self.packing.may_mix() {
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
        for claim in self.query.claims.all.iter() {
            let (claim, price) = claim.finish(&mut self.pools, &self.interned, &self.res);
            cost += price;
            result.new_node_claims.push(claim);
        }
        self.rollback();
        (result, cost)
    }

    /// Each pod's group (pending pods first, then existing ones), for tests of the grouping.
    #[cfg(test)]
    pub(crate) fn pod_groups(&self) -> Vec<usize> {
        self.pods.group.iter().map(|g| g.ix()).collect()
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
            if self.query.removed.contains(&n) {
                continue;
            }
            self.query.removed.push(n);
            self.query.journal.push(Undo::Removed { node: n, old: self.nodes[n].schedulable });
            self.nodes[n].schedulable = false;
            if let Some(p) = self.nodes[n].pool {
                self.pools[p].limits.release(&self.nodes[n].pool_usage);
            }
            self.pools.quotas.release(&self.nodes[n].quotas, &self.nodes[n].quota_usage);
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
        for claim in self.query.claims.all.iter() {
            let (mut claim, price) = claim.finish(&mut self.pools, &self.interned, &self.res);
            claim.pods = claim.pods.iter().map(|pi| position(PodIx::new(*pi))).collect();
            claim.pods.sort_unstable();
            out.new_node_claims.push(PricedClaim { claim, price });
        }
        out.placements.sort_by_key(|p| p.pod);
        self.rollback();
        out
    }
    /// The instance types NodePool `pool` may launch, cheapest first, each with what is free
    /// for pods and its price; `None` when the context has no such pool. Types too small for
    /// their DaemonSets are left out.
    pub fn pool_types(&mut self, pool: &str) -> Option<Vec<PoolTypeView>> {
        self.pools.type_views(pool, &mut self.interned, &self.res)
    }

    /// Hands over a view kept from an earlier context or replay: the first replay of this
    /// context edits it to this context's input instead of building its own view.
    pub fn keep_kube_view_from(&mut self, kept: KeptKubeView) {
        self.kube.keep_from(kept);
    }

    /// The context's view (or the one handed over and not used yet), to keep for a later
    /// context or replay.
    pub fn take_kube_view(&mut self) -> KeptKubeView {
        self.kube.take()
    }

    /// Whether kube-scheduler would bind the pods of several disruption commands that run side
    /// by side, each command's pods once its nodes go, in the order given (the order the
    /// commands delete their nodes): every command's nodes take no pod from the start (they are
    /// tainted) and count for topology until their turn; at its turn a command's nodes and
    /// their pods go, the nodes it launched join, and the new copies of its reschedulable pods
    /// are bound one by one with kube-scheduler's scores onto what the earlier turns left. Each
    /// turn's pods arrive in the orders of [`SchedulingContext::kube_replay`]. A command
    /// decided on room that an earlier command's pods will take fails here, though each holds
    /// on its own. `Err` names the first pod left with nowhere to go and why.
    pub fn kube_replay_in_turn(&mut self, turns: &[Turn<'_>]) -> Result<(), String> {
        self.kube.replay_in_turn(&self.input, &self.pods.facts, turns)
    }

    /// Whether kube-scheduler would bind every one of `pods` (the pods a consolidation moves)
    /// once the nodes named in `removed` are gone and `replacement`, if any, runs: each pod on
    /// the node kube-scheduler's default scores pick, higher priority first, in each of the
    /// orders the copies may arrive in (as given, reversed, largest first, smallest first,
    /// owner by owner) since that order is unknown. In-flight claims take no part
    /// (kube-scheduler cannot bind to them). `Err` names the first pod left with nowhere to go
    /// and why.
    pub fn kube_replay(
        &mut self,
        removed: &[&str],
        pods: &[Arc<SlimPod>],
        replacement: Option<Replacement<'_>>,
    ) -> Result<(), String> {
        self.kube.replay(&self.input, &self.pods.facts, removed, pods, replacement)
    }
}

/// The glue: each module's functions take the parts they read (`&`) and change (`&mut`), and
/// these hand them over, one bundle per module, so that no module takes the whole context.
impl SchedulingContext {
    /// The attempt's pod against the existing nodes (see [`NodeChecks`]).
    fn node_checks(&mut self, at: Attempt) -> NodeChecks<'_> {
        NodeChecks {
            group: &mut self.groups[at.group],
            level: at.level,
            requests: &self.pods.requests[at.pod],
            interned: &self.interned,
            topology: &self.topology,
            gone: Gone { nodes: &self.query.removed, all: &self.nodes },
            res: &self.res,
        }
    }

    /// What placing the attempt's pod on new claims reads and changes (see [`ClaimParts`]).
    fn claim_parts(&mut self, at: Attempt) -> ClaimParts<'_> {
        ClaimParts {
            at,
            group: &mut self.groups[at.group],
            requests: &self.pods.requests[at.pod],
            claims: &mut self.query.claims,
            pools: &mut self.pools,
            interned: &mut self.interned,
            topology: &mut self.topology,
            journal: &mut self.query.journal,
            dearer: &mut self.dearer,
            packing: &mut self.packing,
            gone: Gone { nodes: &self.query.removed, all: &self.nodes },
        }
    }

    /// What pricing the attempt's pod's join reads (see [`JoinParts`]).
    fn join_parts(&mut self, at: Attempt) -> JoinParts<'_> {
        JoinParts {
            pod: at.pod,
            level_req: self.groups[at.group].state.levels[at.level].req,
            requests: &self.pods.requests[at.pod],
            claims: &mut self.query.claims,
            pools: &mut self.pools,
            interned: &mut self.interned,
            packing: &mut self.packing,
        }
    }

    /// The parts a later context takes over from this one (see `reuse`); the rest is dropped.
    fn into_earlier(self) -> reuse::Earlier {
        reuse::Earlier { input: self.input, facts: self.pods.facts }
    }

    /// What explaining pod `pi` of group `g` reads (see [`ExplainParts`]).
    fn explain_parts(&mut self, pi: PodIx, g: GroupIx) -> ExplainParts<'_> {
        ExplainParts {
            group: &mut self.groups[g],
            requests: &self.pods.requests[pi],
            pools: &mut self.pools,
            unavailable: &self.input.unavailable_node_pools,
            interned: &mut self.interned,
            topology: &self.topology,
            gone: Gone { nodes: &self.query.removed, all: &self.nodes },
            res: &self.res,
        }
    }

    /// Level `l` of group `g`, built when first needed (see [`Group::level`]).
    fn level(&mut self, g: GroupIx, l: LevelIx) -> Option<LevelIx> {
        let mut parts = LevelParts {
            input: &self.input,
            nodes: &self.nodes,
            pools: &self.pools,
            prefer_taints: self.prefer_taints,
            interned: &mut self.interned,
            topology: &mut self.topology,
        };
        self.groups[g].level(l, &mut parts)
    }
}
