//! Consolidation's second opinion: would kube-scheduler, binding the moved pods one by one with
//! its own scores, put every one of them somewhere? The what-if packs the pods where they fit
//! best for kerf; kube-scheduler spreads them to the least allocated nodes first. When the plan
//! only works in kerf's order, a pod is left pending once the nodes are gone, a node is launched
//! for it, and the consolidation is undone — the flapping operators complain about. This module
//! keeps one [`ClusterView`] of the existing nodes per context and replays the moved pods on it
//! ([`crate::kube_choice::replay`]) with the removed nodes hidden and the replacement, if any,
//! added as the node it would become. [`KubeReplay`] is that view alone, for a caller that only
//! replays commands in turn.
//!
//! Building the view adds every pod of the cluster to a [`ClusterView`] and counts them again
//! for each selector; consecutive evaluations see clusters that differ in a few nodes (a
//! command's nodes tainted or gone, a replacement joined, the pods moved). [`KeptKubeView`]
//! holds the last view; the next context or replay edits it to its own input (nodes gone taken
//! out, new nodes put in at their place, changed nodes and pods replaced) instead of building
//! it, and the edited view answers as one built afresh from that input does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kerf_api::ResourceList;
use kerf_api::SlimPod;

use crate::model::SchedulingInput;
use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, NODE_POOL, ZONE};

use super::facts::{self, PodFacts, PodFactsCache};
use super::ids::{Idx, IxVec, PodIx};
use crate::instance::{InstanceType, Offering};
use crate::kube_choice;
use crate::model::{ExistingNode, NewNodeClaim};
use crate::pod::{self, pod_requests};
use crate::predicates::{ClusterView, PodFilters};

/// A context's kube-scheduler view: built (or edited from the kept one) on first use.
#[derive(Default)]
pub(super) struct KubeViews {
    pub(super) built: Option<KubeView>,
    /// A view kept from an earlier context, edited into `built` on first use.
    pub(super) kept: KeptKubeView,
}

/// The existing nodes as kube-scheduler sees them, and where each is in the view.
#[derive(Debug)]
pub(super) struct KubeView {
    pub(super) view: ClusterView,
    pub(super) index: foldhash::HashMap<String, usize>,
    /// The nodes each kind of moved pod fits best on, in the view as built (see
    /// [`kube_choice::Ranking`]).
    pub(super) ranking: kube_choice::Ranking,
    /// The moved pods met so far, with their kinds.
    pub(super) copies: Copies,
    /// The input's volume topology and namespace labels the view was built with.
    pub(super) volumes: BTreeMap<String, Vec<crate::requirements::Requirements>>,
    pub(super) namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// The input's EBS claims the view counts.
    pub(super) ebs_claims: Arc<std::collections::BTreeSet<String>>,
}

/// The moved pods met so far and their kinds ([`kube_choice::kind_key`]). kube-scheduler sees
/// each as its owner's new copy (not bound, not nominated), which the replay reads the pod itself
/// as ([`kube_choice::replay`]): no copy is made. They outlive the ranking: a view edited to
/// another cluster ([`KubeView::edited_to`]) keeps the pods met since the last edit that are still
/// held elsewhere, and ranks each kind again on the view as edited when a pod of it is met, so a
/// pod replayed evaluation after evaluation is keyed once rather than once per view, and a pod
/// not asked for since the last edit is not kept.
#[derive(Debug, Default)]
pub(super) struct Copies {
    /// By the address of the context's pod (kept alive here): that pod, its kind (an index into
    /// `kinds`), the last `edits` it was met at, and its filters ([`ClusterView::pod_filters`]:
    /// a view edited to another cluster keeps its volume topology and namespace labels, for
    /// which they hold).
    pub(super) by_pod: crate::index_hash::ByIndex<(Arc<SlimPod>, usize, u64, Arc<PodFilters>)>,
    /// How many times the ranking was made anew.
    edits: u64,
    /// The kinds met so far, by key.
    ids: foldhash::HashMap<Vec<u8>, usize>,
    /// Per kind: the pod it was first met with, its key, and its id in the view's ranking once
    /// ranked there.
    kinds: Vec<(Arc<SlimPod>, Vec<u8>, Option<usize>)>,
}

impl Copies {
    /// The ranking is made anew ([`kube_choice::Ranking::new`]): no kind is ranked on it yet,
    /// and the pods not met since it was last made, or that no one else holds any more, are
    /// dropped.
    pub(super) fn ranking_made_anew(&mut self) {
        let edits = self.edits;
        self.by_pod.retain(|_, (pod, _, met, _)| *met == edits && Arc::strong_count(pod) > 1);
        self.edits += 1;
        for kind in &mut self.kinds {
            kind.2 = None;
        }
    }
}

impl KubeView {
    /// The kind in the ranking of `pod` (a moved pod, replayed as its owner's new copy) and its
    /// filters; ranks a kind not ranked yet (the view must be as built). Pods of one kind read
    /// the same of the view ([`kube_choice::kind_key`]), so the kind is ranked with whichever of
    /// its pods was met first.
    pub(super) fn kind_of(&mut self, pod: &Arc<SlimPod>) -> (usize, Arc<PodFilters>) {
        let addr = Arc::as_ptr(pod) as usize;
        let copies = &mut self.copies;
        if let Some((_, kind, met, filters)) = copies.by_pod.get_mut(&addr) {
            *met = copies.edits;
            let (kind, filters) = (*kind, Arc::clone(filters));
            let (first, key, ranked) = &mut copies.kinds[kind];
            return (*ranked.get_or_insert_with(|| self.ranking.add_kind(&self.view, first, key)), filters);
        }
        let key = kube_choice::kind_key(pod);
        let kind = match copies.ids.get(&key) {
            Some(k) => *k,
            None => {
                copies.kinds.push((Arc::clone(pod), key.clone(), None));
                copies.ids.insert(key, copies.kinds.len() - 1);
                copies.kinds.len() - 1
            }
        };
        let (first, key, ranked) = &mut copies.kinds[kind];
        let ranked = *ranked.get_or_insert_with(|| self.ranking.add_kind(&self.view, first, key));
        // Pods of one kind have the same containers and overhead: a ranked kind's requests are
        // this pod's.
        let requests = self.ranking.kind_requests(ranked).cloned();
        let filters = self.view.pod_filters(pod, requests);
        copies.by_pod.insert(addr, (Arc::clone(pod), kind, copies.edits, Arc::clone(&filters)));
        (ranked, filters)
    }
}

/// A pod taken off a removed node, with its requests (to put it back without parsing them).
type PodWithRequests = (Arc<SlimPod>, Arc<ResourceList>);

/// The node a replacement claim would become: launched as `instance_type` with `offering`.
#[derive(Debug, Clone, Copy)]
pub struct Replacement<'a> {
    pub claim: &'a NewNodeClaim,
    pub instance_type: &'a InstanceType,
    pub offering: &'a Offering,
}

/// The hostname the replayed replacement node carries (no real node has it).
const REPLACEMENT_NODE: &str = "replacement.kerf.invalid";

impl Replacement<'_> {
    /// The node as kube-scheduler would find it once launched and initialized: the claim's labels
    /// and taints (startup taints gone), the type's labels and allocatable, the offering's zone
    /// and capacity type, and the pods of the DaemonSets that run on it.
    fn node(&self, daemonsets: &[Arc<SlimPod>]) -> ExistingNode {
        let mut labels = self.claim.labels.clone();
        labels.extend(self.instance_type.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels.insert(ZONE.to_string(), self.offering.zone.clone());
        labels.insert(CAPACITY_TYPE.to_string(), self.offering.capacity_type.clone());
        for key in kerf_api::labels::CAPACITY_RESERVATION_LABELS {
            if let Some(v) = self.offering.label(key) {
                labels.insert(key.to_string(), v.to_string());
            }
        }
        labels.insert(NODE_POOL.to_string(), self.claim.node_pool.clone());
        labels.insert(HOSTNAME.to_string(), REPLACEMENT_NODE.to_string());
        let taints = self.claim.taints.clone();
        let pods =
            daemonsets.iter().filter(|d| pod::daemon_runs_on(d, REPLACEMENT_NODE, &labels, &taints)).cloned().collect();
        ExistingNode {
            name: REPLACEMENT_NODE.to_string(),
            node_pool: Some(self.claim.node_pool.clone()),
            labels: labels.into(),
            taints,
            allocatable: Arc::new(self.instance_type.allocatable()),
            pods,
            in_flight: false,
            schedulable: true,
            pool_usage: Default::default(),
        }
    }
}

/// The orders the moved pods' copies may reach kube-scheduler in (positions in `pods`): as
/// given, reversed, largest first, smallest first (the largest pods last, when the room left is
/// most cut up), and owner by owner (namespace, then owner; as given within one: the order a
/// Deployment controller that reconciles its Deployments in turn creates them in, as kerf's
/// own stand-ins do), each with higher priority first (`cpu_memory` gives a pod's cores and
/// bytes). An order that repeats an earlier one (one pod, pods all alike) is left out.
fn arrival_orders(pods: &[Arc<SlimPod>], cpu_memory: impl Fn(usize) -> [f64; 2]) -> Vec<Vec<usize>> {
    let priority = |i: &usize| std::cmp::Reverse(pods[*i].spec.as_ref().and_then(|s| s.priority).unwrap_or(0));
    let size = |i: &usize| {
        let [cpu, memory] = cpu_memory(*i);
        ((cpu * 1000.0) as i64, memory as i64)
    };
    let mut queue: Vec<usize> = (0..pods.len()).collect();
    queue.sort_by_key(priority);
    let mut reversed: Vec<usize> = queue.iter().rev().copied().collect();
    reversed.sort_by_key(priority);
    let mut largest = reversed.clone();
    largest.sort_by_cached_key(|i| (priority(i), std::cmp::Reverse(size(i))));
    let mut smallest = queue.clone();
    smallest.sort_by_cached_key(|i| (priority(i), size(i)));
    let mut by_owner = queue.clone();
    by_owner.sort_by_cached_key(|i| (priority(i), pods[*i].metadata.namespace.clone(), pod::owner(&pods[*i])));
    let mut orders: Vec<Vec<usize>> = vec![queue];
    for o in [reversed, largest, smallest, by_owner] {
        if !orders.contains(&o) {
            orders.push(o);
        }
    }
    orders
}

/// One disruption command in [`SchedulingContext::kube_replay_in_turn`]: its nodes go, the
/// nodes it launched join, and kube-scheduler binds the new copies of the pods its nodes ran.
#[derive(Debug, Clone, Default)]
pub struct Turn<'a> {
    /// The command's nodes (tainted from the start, drained at its turn).
    pub removed: Vec<&'a str>,
    /// Nodes it launched that kube-scheduler does not see yet (in-flight claims, by the node
    /// they will become); they join at its turn.
    pub added: Vec<ExistingNode>,
    /// The replacement of the command being decided, as it would launch.
    pub replacement: Option<Replacement<'a>>,
}

impl KubeView {
    /// kube-scheduler's view of `input`'s initialized nodes; `facts` are the facts of the
    /// input's pods, pending pods first, then each existing node's pods in turn (as
    /// [`SchedulingContext`] lays them out).
    pub(super) fn build<'f>(input: &SchedulingInput, facts: impl Fn(usize) -> &'f PodFacts) -> Self {
        let nodes: Vec<ExistingNode> = input.existing_nodes.iter().filter(|n| !n.in_flight).cloned().collect();
        let index = nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let ranges = facts::existing_pod_ranges(input);
        let mut shared = kerf_api::resources::SharedLists::default();
        let mut requests = input
            .existing_nodes
            .iter()
            .zip(ranges)
            .filter(|(n, _)| !n.in_flight)
            .flat_map(|(n, range)| n.pods.iter().zip(range))
            .map(|(p, pi)| facts(pi).request_list(p, &mut shared));
        let view = ClusterView::with_requests(nodes, |p| {
            requests.next().unwrap_or_else(|| Arc::new(crate::pod::pod_requests(p)))
        })
        .with_volumes(input.volume_requirements.clone())
        .with_namespace_labels(input.namespace_labels.clone())
        .with_ebs_claims(Arc::clone(&input.ebs_claims));
        let ranking = kube_choice::Ranking::new(&view);
        KubeView {
            view,
            index,
            ranking,
            copies: Copies::default(),
            volumes: input.volume_requirements.clone(),
            namespace_labels: input.namespace_labels.clone(),
            ebs_claims: Arc::clone(&input.ebs_claims),
        }
    }

    /// The view of `input`: `kept` edited to it when it can be, else `build()` (see
    /// [`KubeView::edited_to`]).
    fn of(input: &SchedulingInput, kept: KeptKubeView, build: impl FnOnce() -> Self) -> Self {
        kept.0.and_then(|v| v.edited_to(input)).unwrap_or_else(build)
    }
}

/// kube-scheduler's view of a cluster for [`KubeReplay::in_turn`] alone: what a
/// [`SchedulingContext`] keeps for [`SchedulingContext::kube_replay_in_turn`], without the
/// rest of the context (pools, groups, topology counters), for a caller that asks nothing else.
pub struct KubeReplay {
    input: Arc<SchedulingInput>,
    view: KubeView,
}

impl KubeReplay {
    /// The view of `input`'s initialized nodes, reading each pod's facts from `cache` when the
    /// pod is unchanged since an earlier build (see [`SchedulingContext::with_facts`]).
    pub fn new(input: Arc<SchedulingInput>, cache: &PodFactsCache) -> Self {
        Self::with_kept(input, cache, KeptKubeView::default())
    }

    /// [`KubeReplay::new`], editing the view `kept` from an earlier replay or context to this
    /// input instead of building one, when it can (the view answers the same either way).
    pub fn with_kept(input: Arc<SchedulingInput>, cache: &PodFactsCache, kept: KeptKubeView) -> Self {
        let view = KubeView::of(&input, kept, || {
            let existing = input.existing_nodes.iter().flat_map(|n| n.pods.iter());
            let facts = facts::gather(input.pods.iter().chain(existing), Some(cache));
            KubeView::build(&input, |pi| facts[pi].as_ref())
        });
        KubeReplay { input, view }
    }

    /// The view, to keep for a later replay or context ([`KubeReplay::with_kept`]).
    pub fn into_kept(self) -> KeptKubeView {
        KeptKubeView(Some(self.view))
    }

    /// [`SchedulingContext::kube_replay_in_turn`] on this view.
    pub fn in_turn(&mut self, turns: &[Turn<'_>]) -> Result<(), String> {
        replay_in_turn(&self.input, &mut self.view, turns)
    }
}

impl KubeViews {
    /// kube-scheduler's view of `input`'s existing nodes (built on first use from the pods'
    /// `facts`, or edited from the view handed over with [`KubeViews::keep_from`]).
    fn view(&mut self, input: &SchedulingInput, facts: &IxVec<PodIx, Arc<PodFacts>>) -> &mut KubeView {
        let kept = &mut self.kept;
        self.built.get_or_insert_with(|| {
            KubeView::of(input, std::mem::take(kept), || KubeView::build(input, |pi| facts[PodIx::new(pi)].as_ref()))
        })
    }

    /// Hands over a view kept from an earlier context or replay: the first replay edits it to
    /// this input instead of building its own view.
    pub(super) fn keep_from(&mut self, kept: KeptKubeView) {
        if self.built.is_none() {
            self.kept = kept;
        }
    }

    /// The view (or the one handed over and not used yet), to keep for a later context or
    /// replay.
    pub(super) fn take(&mut self) -> KeptKubeView {
        match self.built.take() {
            Some(v) => KeptKubeView(Some(v)),
            None => std::mem::take(&mut self.kept),
        }
    }

    /// [`SchedulingContext::kube_replay_in_turn`](crate::SchedulingContext::kube_replay_in_turn)
    /// on the view of `input`.
    pub(super) fn replay_in_turn(
        &mut self,
        input: &SchedulingInput,
        facts: &IxVec<PodIx, Arc<PodFacts>>,
        turns: &[Turn<'_>],
    ) -> Result<(), String> {
        replay_in_turn(input, self.view(input, facts), turns)
    }

    /// [`SchedulingContext::kube_replay`](crate::SchedulingContext::kube_replay) on the view of
    /// `input`: whether kube-scheduler would bind every one of `pods` once the nodes named in
    /// `removed` are gone and `replacement`, if any, runs, in each of [`arrival_orders`].
    pub(super) fn replay(
        &mut self,
        input: &SchedulingInput,
        facts: &IxVec<PodIx, Arc<PodFacts>>,
        removed: &[&str],
        pods: &[Arc<SlimPod>],
        replacement: Option<Replacement<'_>>,
    ) -> Result<(), String> {
        let kv = self.view(input, facts);
        // The pods kube-scheduler sees are their owners' new copies: not bound, not nominated,
        // as the replay reads the pods themselves. Their kinds are ranked on the view as built,
        // before any node is taken away.
        let order = pods;
        let (kinds, filters): (Vec<usize>, Vec<Arc<PodFilters>>) = pods.iter().map(|p| kv.kind_of(p)).unzip();
        // The removed nodes go, and their pods with them.
        let mut taken: Vec<(usize, Vec<PodWithRequests>)> = Vec::new();
        for name in removed {
            let Some(&idx) = kv.index.get(*name) else { continue };
            let on_node: Vec<PodWithRequests> = kv.view.nodes()[idx]
                .pods
                .clone()
                .into_iter()
                .filter_map(|p| kv.view.take_pod(idx, &p).map(|r| (p, r)))
                .collect();
            kv.view.set_hidden(idx, true);
            taken.push((idx, on_node));
        }
        let pushed = replacement.map(|r| kv.view.push_node(r.node(&input.daemonset_pods)));
        // kube-scheduler takes the new copies as their owners create them, an order kerf cannot
        // know: the decision must hold in each of `arrival_orders` (within each priority), or a
        // pod may be left over once the nodes are gone. Orders are positions in `order`.
        let ranking = &kv.ranking;
        let orders = arrival_orders(order, |i| {
            ranking.kind_cpu_memory(kinds[i]).unwrap_or_else(|| kube_choice::cpu_memory_of(&order[i]))
        });
        let mut result = Ok(());
        for positions in &orders {
            let batch: Vec<Arc<SlimPod>> = positions.iter().map(|i| Arc::clone(&order[*i])).collect();
            let batch_kinds: Vec<usize> = positions.iter().map(|i| kinds[*i]).collect();
            let batch_filters: Vec<Arc<PodFilters>> = positions.iter().map(|i| Arc::clone(&filters[*i])).collect();
            let ranked = Some((&kv.ranking, batch_kinds.as_slice()));
            if let Err(nb) = kube_choice::replay(&mut kv.view, &batch, ranked, Some(&batch_filters)) {
                let key = batch.get(nb.pod).map_or_else(|| format!("#{}", nb.pod), pod::key);
                result = Err(format!("kube-scheduler would leave pod {key} with nowhere to go ({})", nb.reason));
                break;
            }
        }
        if pushed.is_some() {
            kv.view.pop_node();
        }
        for (idx, on_node) in taken.into_iter().rev() {
            kv.view.set_hidden(idx, false);
            for (p, requests) in on_node {
                kv.view.add_pod_with(idx, p, requests);
            }
        }
        result
    }
}

/// [`KubeViews::replay_in_turn`] on the view `kv` of `input`.
fn replay_in_turn(input: &SchedulingInput, kv: &mut KubeView, turns: &[Turn<'_>]) -> Result<(), String> {
    let nodes: Vec<Vec<usize>> =
        turns.iter().map(|t| t.removed.iter().filter_map(|n| kv.index.get(*n).copied()).collect()).collect();
    // The pods each turn moves (replayed as kube-scheduler sees their copies), with their kinds
    // (ranked on the view as built, before any node is hidden), and their orders.
    let mut moved: Vec<Vec<Arc<SlimPod>>> = Vec::with_capacity(nodes.len());
    let mut kinds: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
    let mut filters: Vec<Vec<Arc<PodFilters>>> = Vec::with_capacity(nodes.len());
    for idxs in &nodes {
        let on_nodes: Vec<Arc<SlimPod>> = idxs
            .iter()
            .flat_map(|&i| kv.view.nodes()[i].pods.iter())
            .filter(|p| kerf_api::pod_facts::moves_with_node(&***p))
            .cloned()
            .collect();
        let (k, f): (Vec<usize>, Vec<Arc<PodFilters>>) = on_nodes.iter().map(|p| kv.kind_of(p)).unzip();
        moved.push(on_nodes);
        kinds.push(k);
        filters.push(f);
    }
    let KubeView { view, ranking, .. } = kv;
    for &idx in nodes.iter().flatten() {
        view.set_hidden(idx, true);
    }
    let orders: Vec<Vec<Vec<usize>>> = moved
        .iter()
        .zip(&kinds)
        .map(|(pods, kinds)| {
            arrival_orders(pods, |i| {
                ranking.kind_cpu_memory(kinds[i]).unwrap_or_else(|| kube_choice::cpu_memory_of(&pods[i]))
            })
        })
        .collect();
    let variants = orders.iter().map(Vec::len).max().unwrap_or(0);
    let mut result = Ok(());
    for v in 0..variants {
        // The pods bound at each turn stay bound for the turns after it.
        let mut session = kube_choice::Replay::new(view, Some(ranking));
        let mut taken: Vec<(usize, Vec<PodWithRequests>)> = Vec::new();
        let mut pushed = 0usize;
        for (t, turn) in turns.iter().enumerate() {
            for &idx in &nodes[t] {
                let on_node: Vec<PodWithRequests> = view.nodes()[idx]
                    .pods
                    .clone()
                    .into_iter()
                    .filter_map(|p| view.take_pod(idx, &p).map(|r| (p, r)))
                    .collect();
                taken.push((idx, on_node));
            }
            for n in &turn.added {
                view.push_node(ExistingNode { in_flight: false, schedulable: true, ..n.clone() });
                pushed += 1;
            }
            if let Some(r) = &turn.replacement {
                view.push_node(r.node(&input.daemonset_pods));
                pushed += 1;
            }
            let Some(order) = orders[t].get(v).or_else(|| orders[t].last()) else { continue };
            let batch: Vec<Arc<SlimPod>> = order.iter().map(|i| Arc::clone(&moved[t][*i])).collect();
            let batch_kinds: Vec<usize> = order.iter().map(|i| kinds[t][*i]).collect();
            let batch_filters: Vec<Arc<PodFilters>> = order.iter().map(|i| Arc::clone(&filters[t][*i])).collect();
            if let Err(nb) = session.bind(view, &batch, Some(&batch_kinds), Some(&batch_filters)) {
                let key = batch.get(nb.pod).map_or_else(|| format!("#{}", nb.pod), pod::key);
                result = Err(format!("kube-scheduler would leave pod {key} with nowhere to go ({})", nb.reason));
                break;
            }
        }
        session.finish(view);
        for _ in 0..pushed {
            view.pop_node();
        }
        for (idx, on_node) in taken.into_iter().rev() {
            for (p, requests) in on_node {
                view.add_pod_with(idx, p, requests);
            }
        }
        if result.is_err() {
            break;
        }
    }
    for &idx in nodes.iter().flatten() {
        view.set_hidden(idx, false);
    }
    result
}

/// kube-scheduler's view kept from an earlier context or replay (see the module documentation); empty
/// when there is none.
#[derive(Default)]
pub struct KeptKubeView(pub(super) Option<KubeView>);

impl std::fmt::Debug for KeptKubeView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("KeptKubeView").field(&self.0.as_ref().map(|v| v.view.nodes().len())).finish()
    }
}

impl KeptKubeView {
    /// Whether a view is kept.
    pub fn is_some(&self) -> bool {
        self.0.is_some()
    }
}

impl KubeView {
    /// This view (of an earlier input, as built: no node hidden or pushed) edited to the view
    /// [`KubeView::build`] builds from `input`; `None` when it cannot be (the namespaces or
    /// volumes differ, or the nodes both inputs have are in another order).
    pub(super) fn edited_to(mut self, input: &SchedulingInput) -> Option<Self> {
        if self.volumes != input.volume_requirements
            || self.namespace_labels != input.namespace_labels
            || self.ebs_claims != input.ebs_claims
        {
            return None;
        }
        let nodes: Vec<&ExistingNode> = input.existing_nodes.iter().filter(|n| !n.in_flight).collect();
        let position: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let mut reindex = false;
        for idx in (0..self.view.nodes().len()).rev() {
            if !position.contains_key(self.view.nodes()[idx].name.as_str()) {
                self.view.remove_node(idx);
                reindex = true;
            }
        }
        let mut last = None;
        for n in self.view.nodes() {
            let at = position.get(n.name.as_str()).copied();
            if at <= last {
                return None;
            }
            last = at;
        }
        let parse = |p: &Arc<kerf_api::SlimPod>| Arc::new(pod_requests(p));
        for (i, n) in nodes.iter().enumerate() {
            if self.view.nodes().get(i).map(|v| v.name.as_str()) != Some(n.name.as_str()) {
                self.view.insert_node(i, (*n).clone(), parse);
                reindex = true;
                continue;
            }
            if !self.view.nodes()[i].same_apart_from_pods(n) {
                self.view.update_node(i, ExistingNode { pods: Vec::new(), ..(*n).clone() });
            } else {
                self.view.share_labels(i, &n.labels);
            }
            if !self.view.nodes()[i].holds_same_pods(n) {
                self.view.set_pods(i, n.pods.clone(), parse);
            }
        }
        if reindex {
            self.index = self.view.nodes().iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        }
        self.ranking = kube_choice::Ranking::new(&self.view);
        self.copies.ranking_made_anew();
        Some(self)
    }
}

#[cfg(test)]
mod kept_tests {
    use super::*;
    use crate::predicates::node_edits::tests::answers;
    use crate::testing::*;

    const Z: &str = "topology.kubernetes.io/zone";
    const HOST: &str = "kubernetes.io/hostname";

    fn zone_node(name: &str, zone: &str, pods: Vec<Arc<kerf_api::SlimPod>>) -> ExistingNode {
        let mut n = node(name, &[(Z, zone), (HOST, name)], &[("cpu", "4"), ("memory", "8Gi"), ("pods", "8")]);
        n.pods = pods;
        n
    }

    fn web(name: &str) -> Arc<kerf_api::SlimPod> {
        pod(name).label("app", "w").cpu("500m").build()
    }

    fn db(name: &str) -> Arc<kerf_api::SlimPod> {
        pod(name).label("app", "db").anti_affinity(HOST, &[("app", "db")]).build()
    }

    /// The view as a view built from `input` must be: the same nodes (pods by identity, in
    /// order), the same index, the same answers.
    fn assert_built_as(kv: &KubeView, input: &SchedulingInput, step: &str) {
        let fresh = build(input);
        let ids = |v: &KubeView| -> Vec<Vec<usize>> {
            v.view.nodes().iter().map(|n| n.pods.iter().map(|p| Arc::as_ptr(p) as usize).collect()).collect()
        };
        assert_eq!(ids(kv), ids(&fresh), "{step}: pods");
        let mut index: Vec<(&String, &usize)> = kv.index.iter().collect();
        let mut fresh_index: Vec<(&String, &usize)> = fresh.index.iter().collect();
        index.sort();
        fresh_index.sort();
        assert_eq!(index, fresh_index, "{step}: index");
        assert_eq!(answers(&kv.view), answers(&fresh.view), "{step}: answers");
    }

    /// kube-scheduler's view built from `input`, as a replay builds it.
    fn build(input: &SchedulingInput) -> KubeView {
        let existing = input.existing_nodes.iter().flat_map(|n| n.pods.iter());
        let facts = facts::gather(input.pods.iter().chain(existing), None);
        KubeView::build(input, |pi| facts[pi].as_ref())
    }

    #[test]
    fn a_kept_view_edited_to_a_changed_cluster_is_the_view_built_from_it() {
        let (w0, w1, d0) = (web("w0"), web("w1"), db("d0"));
        let mut input = SchedulingInput {
            existing_nodes: vec![
                zone_node("a", "z1", vec![Arc::clone(&w0)]),
                zone_node("b", "z2", vec![Arc::clone(&d0)]),
                zone_node("c", "z3", vec![Arc::clone(&w1)]),
            ],
            ..SchedulingInput::default()
        };
        let built = build(&input);
        assert_built_as(&built, &input, "the build");

        // A node gone with its pods, one joined in the middle, another relabelled and cordoned,
        // one whose pods moved (a new copy of one, as a running command leaves it).
        input.existing_nodes.remove(1);
        input.existing_nodes.insert(1, zone_node("b2", "z2", vec![db("d1"), web("w2")]));
        input.existing_nodes[2].labels.to_mut().insert(Z.to_string(), "z1".to_string());
        input.existing_nodes[2].schedulable = false;
        input.existing_nodes[0].pods = vec![Arc::new((*w0).clone()), Arc::clone(&w1)];
        // An in-flight claim is no node of kube-scheduler's.
        let mut claim = zone_node("claim", "z3", Vec::new());
        claim.in_flight = true;
        input.existing_nodes.push(claim);
        let edited = built.edited_to(&input).expect("same namespaces and volumes");
        assert_built_as(&edited, &input, "the first edit");

        input.existing_nodes.retain(|n| n.name != "a");
        input.existing_nodes.push(zone_node("d", "z3", vec![db("d2")]));
        let edited = edited.edited_to(&input).expect("same namespaces and volumes");
        assert_built_as(&edited, &input, "the second edit");

        // Replays on the edited view answer as on a view built afresh, whether kube-scheduler
        // finds room for the drained node's pods (c's) or not (b2's: a second db pod fits no
        // other node).
        let input = Arc::new(input);
        let replays = |kv: KubeView| -> Vec<Result<(), String>> {
            let mut replay =
                crate::KubeReplay::with_kept(Arc::clone(&input), &crate::PodFactsCache::new(), KeptKubeView(Some(kv)));
            [vec!["c"], vec!["b2"], vec!["c", "d"]]
                .iter()
                .map(|removed| replay.in_turn(&[crate::Turn { removed: removed.clone(), ..Default::default() }]))
                .collect()
        };
        let kept = |kv: &KubeView| kv.copies.by_pod.contains_key(&(Arc::as_ptr(&w1) as usize));
        let mut edited = edited;
        let _ = edited.kind_of(&w1);
        let edited = edited.edited_to(&input).expect("same namespaces and volumes");
        assert!(kept(&edited), "a pod still held keeps its kind across the edit");
        let edited = edited.edited_to(&input).expect("same namespaces and volumes");
        assert!(!kept(&edited), "a pod not asked for since the last edit is dropped at the next");
        let answers = replays(edited);
        assert!(answers[1].is_err(), "{answers:?}");
        assert_eq!(answers, replays(build(&input)));
        let mut input = Arc::unwrap_or_clone(input);
        let edited = build(&input);

        // Nodes both clusters have, in another order: built again.
        input.existing_nodes.reverse();
        assert!(edited.edited_to(&input).is_none());
    }
}
