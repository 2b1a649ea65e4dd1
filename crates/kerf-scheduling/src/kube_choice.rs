//! Which node kube-scheduler's default profile picks among the nodes a pod fits, and a replay of
//! a batch of pods the way it would bind them one by one.
//!
//! Scores follow the default profile: each score plugin (NodeResourcesFit least-allocated and
//! BalancedAllocation, weight 1; TaintToleration, 3; NodeAffinity, InterPodAffinity and
//! PodTopologySpread, 2 each; no ImageLocality) normalises its own scores to 0..=100 over the
//! feasible nodes, the weighted sum ranks, and ties go to the first node by name.
//!
//! One home for that choice: the simulator's kube-scheduler binds with [`choose`], and
//! consolidation asks [`replay`] whether the pods it moves would really land on the nodes it
//! counts on once kube-scheduler, not kerf, places them — a plan that needs pods packed in an
//! order kube-scheduler would not follow leaves one of them with nowhere to go, and the node
//! launched for it undoes the consolidation.
//!
//! A consolidation replays its pods on a view that differs from the cluster only on the nodes
//! it takes away and those the replay binds to, thousands of times per pass; [`Ranking`] keeps,
//! per kind of pod, the cluster's nodes in the order kube-scheduler would prefer them, so a
//! replay finds each pod's node without filtering and scoring every node again.

use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::resources::{CPU, MEMORY};
use kerf_api::{ResourceList, TaintEffect};

use crate::predicates::{ClusterView, PodFilters, PreferenceParts, PreparedPod};

/// kube-scheduler's default score plugin weights (ImageLocality is left out: nothing here pulls
/// images).
const FIT_WEIGHT: i64 = 1;
const BALANCED_WEIGHT: i64 = 1;
const TAINT_TOLERATION_WEIGHT: i64 = 3;
const NODE_AFFINITY_WEIGHT: i64 = 2;
const INTER_POD_AFFINITY_WEIGHT: i64 = 2;
const POD_TOPOLOGY_SPREAD_WEIGHT: i64 = 2;

/// The preference plugins' weighted scores per feasible node, each plugin's raw scores
/// normalised to 0..=100 over the feasible nodes as that plugin does: NodeAffinity by its
/// highest score; InterPodAffinity between its lowest and highest; PodTopologySpread and
/// TaintToleration reversed (fewer matching pods, fewer untolerated PreferNoSchedule taints
/// score higher).
pub fn plugin_scores(parts: &[PreferenceParts]) -> Vec<i64> {
    let range = |f: &dyn Fn(&PreferenceParts) -> i64| {
        let vals = parts.iter().map(f);
        (vals.clone().min().unwrap_or(0), vals.max().unwrap_or(0))
    };
    let (_, na_max) = range(&|p| p.node_affinity);
    let (ip_min, ip_max) = range(&|p| p.inter_pod);
    let (sp_min, sp_max) = range(&|p| p.spread);
    let (_, tt_max) = range(&|p| p.prefer_no_schedule);
    parts
        .iter()
        .map(|p| {
            let na = if na_max > 0 { p.node_affinity * 100 / na_max } else { 0 };
            let ip = if ip_max > ip_min { (p.inter_pod - ip_min) * 100 / (ip_max - ip_min) } else { 0 };
            let sp = if sp_max > 0 { 100 * (sp_max + sp_min - p.spread) / sp_max } else { 100 };
            let tt = if tt_max > 0 { 100 - p.prefer_no_schedule * 100 / tt_max } else { 100 };
            NODE_AFFINITY_WEIGHT * na
                + INTER_POD_AFFINITY_WEIGHT * ip
                + POD_TOPOLOGY_SPREAD_WEIGHT * sp
                + TAINT_TOLERATION_WEIGHT * tt
        })
        .collect()
}

/// LeastAllocated and BalancedAllocation over cpu and memory, each 0..=100, for a pod asking
/// `req` on a node with `alloc` allocatable of which `used` is requested.
pub fn resource_scores(alloc: [f64; 2], used: [f64; 2], req: [f64; 2]) -> (i64, i64) {
    let mut fractions = [0.0; 2];
    let mut n = 0;
    let mut free_sum = 0.0;
    for r in 0..2 {
        if alloc[r] <= 0.0 {
            continue;
        }
        let frac = ((used[r] + req[r]) / alloc[r]).min(1.0);
        fractions[n] = frac;
        n += 1;
        free_sum += (1.0 - frac) * 100.0;
    }
    if n == 0 {
        return (0, 0);
    }
    let fractions = &fractions[..n];
    let fit = (free_sum / n as f64) as i64;
    let mean = fractions.iter().sum::<f64>() / n as f64;
    let var = fractions.iter().map(|f| (f - mean) * (f - mean)).sum::<f64>() / n as f64;
    let balanced = ((1.0 - var.sqrt()) * 100.0) as i64;
    (fit, balanced)
}

/// Whether `pod` states any preference a score plugin reads (preferred node or pod
/// (anti-)affinity, ScheduleAnyway spread).
pub fn has_preferences(pod: &SlimPod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    let aff = spec.affinity.as_ref();
    aff.and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_ref())
        .is_some_and(|p| !p.is_empty())
        || aff
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_ref())
            .is_some_and(|p| !p.is_empty())
        || aff
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_ref())
            .is_some_and(|p| !p.is_empty())
        || spec
            .topology_spread_constraints
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c.when_unsatisfiable == "ScheduleAnyway"))
}

pub(crate) fn cpu_memory_of(pod: &SlimPod) -> [f64; 2] {
    let req = crate::pod::pod_requests(pod);
    [req.get(kerf_api::resources::CPU).as_f64(), req.get(kerf_api::resources::MEMORY).as_f64()]
}

/// The node kube-scheduler binds `pod` to among `feasible` (indexes into `view`, every one
/// passing the filters); `usage(i)` gives node `i`'s allocatable and requested (cpu cores,
/// memory bytes). `None` only when `feasible` is empty.
pub fn choose(
    view: &ClusterView,
    pod: &SlimPod,
    feasible: &[usize],
    usage: impl Fn(usize) -> ([f64; 2], [f64; 2]),
) -> Option<usize> {
    match feasible {
        [] => return None,
        [one] => return Some(*one),
        _ => {}
    }
    let requests = cpu_memory_of(pod);
    let prefs = has_preferences(pod)
        || feasible.iter().any(|i| view.nodes()[*i].taints.iter().any(|t| t.effect == TaintEffect::PreferNoSchedule));
    let prefs = if prefs { plugin_scores(&view.preference_parts(pod, feasible)) } else { vec![0; feasible.len()] };
    let mut best: Option<(i64, &str, usize)> = None;
    for (j, &idx) in feasible.iter().enumerate() {
        let (alloc, used) = usage(idx);
        let (fit, balanced) = resource_scores(alloc, used, requests);
        let score = FIT_WEIGHT * fit + BALANCED_WEIGHT * balanced + prefs[j];
        let name = view.nodes()[idx].name.as_str();
        let better = match best {
            None => true,
            Some((s, bn, _)) => score > s || (score == s && name < bn),
        };
        if better {
            best = Some((score, name, idx));
        }
    }
    best.map(|(_, _, i)| i)
}

/// The filters' verdicts per node for the pod last replayed, reused for the next pod when it
/// has the same spec, labels and namespace (the pods of one workload) and its verdicts depend on
/// other pods only through the node's own pods (no required spread or pod (anti-)affinity): a
/// verdict then changes only when its node gets a pod, which bumps the node's version.
#[derive(Default)]
struct FilterMemo {
    pod: Option<Arc<SlimPod>>,
    verdicts: Vec<Option<(u32, Verdict)>>,
}

/// A filter verdict: whether the pod passes every filter (the reason a node turns it away is
/// put into words only when no node takes the pod).
type Verdict = bool;

impl FilterMemo {
    /// Keeps the verdicts when `pod` is a twin of the memo's pod, else starts afresh for it.
    fn start(&mut self, pod: &Arc<SlimPod>, nodes: usize) {
        let reusable = !crate::pod::has_required_inter_pod_constraints(pod);
        let twin = self.pod.as_ref().is_some_and(|p| {
            p.metadata.namespace == pod.metadata.namespace
                && p.metadata.labels == pod.metadata.labels
                && p.spec == pod.spec
        });
        if !(reusable && twin) {
            self.verdicts.clear();
        }
        self.verdicts.resize(nodes, None);
        self.pod = reusable.then(|| Arc::clone(pod));
    }

    fn get(&self, node: usize, version: u32) -> Option<Verdict> {
        self.verdicts[node].as_ref().filter(|(v, _)| *v == version).map(|(_, r)| *r)
    }

    fn put(&mut self, node: usize, version: u32, verdict: Verdict) {
        self.verdicts[node] = Some((version, verdict));
    }

    fn clear(&mut self) {
        self.verdicts.iter_mut().for_each(|v| *v = None);
    }
}

/// For each kind of pod, the nodes of a base view it passes the node-local filters on
/// ([`crate::fit::check_node`]), best first by the scores kube-scheduler gives a pod without
/// preferences (resource scores, ties to the first name). Pods are of one kind when everything
/// those filters and scores read of them is equal ([`kind_key`]). A replay changes few nodes
/// of the view: an untouched node keeps its node-local verdict and its score, so the best of
/// them is the first in this list that passes the inter-pod filters, found without filtering
/// and scoring every node for every pod.
#[derive(Debug, Default)]
pub struct Ranking {
    /// Nodes of the base view (a node pushed later is never in a list).
    base_nodes: usize,
    /// Some base node has a PreferNoSchedule taint (its score plugin reads every feasible node):
    /// no kind is ranked.
    prefer_no_schedule: bool,
    /// Each base node's place in the base nodes sorted by name (then index).
    name_rank: Vec<u32>,
    /// Per kind; `None` when the kind states preferences (their scores are normalised over
    /// every feasible node).
    kinds: Vec<Option<RankedKind>>,
}

#[derive(Debug)]
struct RankedKind {
    /// The kind's requests ([`crate::pod::pod_requests`]: pods of one kind have the same
    /// containers and overhead), parsed once for all its pods.
    resources: Arc<ResourceList>,
    /// The kind's cpu and memory requests, as the scores read them.
    requests: [f64; 2],
    /// (score, name rank, node) of the base nodes passing the node-local filters, best first.
    nodes: Vec<(i64, u32, u32)>,
    /// Per base node, whether it passes the node-local filters (is in `nodes`). A replay only
    /// adds pods to a base node it binds to: one that failed still fails, and one that passed
    /// passes while its host ports and resources do ([`ClusterView::room_filters_pass`]).
    passes: Vec<bool>,
}

/// What the node-local filters and the resource scores read of a pod, as bytes: pods with
/// equal keys are of one kind for a [`Ranking`]. Whether it states preferences, its
/// namespace, node selector and node affinity, tolerations, containers (requests and host
/// ports), overhead and volume claims (not its node name: a replay reads every pod as not bound,
/// see [`replay`]).
pub fn kind_key(pod: &SlimPod) -> Vec<u8> {
    let spec = pod.spec.as_ref();
    let key = (
        has_preferences(pod),
        &pod.metadata.namespace,
        spec.map(|s| &s.node_selector),
        spec.and_then(|s| s.affinity.as_ref()).map(|a| &a.node_affinity),
        spec.map(|s| &s.tolerations),
        spec.map(|s| &s.containers),
        spec.map(|s| &s.init_containers),
        spec.map(|s| &s.overhead),
        crate::pod::volume_claims(pod),
    );
    // Serializing these types into memory does not fail; were it to, the empty key is never
    // ranked (see `Ranking::add_kind`).
    serde_json::to_vec(&key).unwrap_or_default()
}

impl Ranking {
    /// An empty ranking over `view` as it is now: the base view.
    pub fn new(view: &ClusterView) -> Self {
        let nodes = view.nodes();
        let prefer_no_schedule = nodes.iter().any(has_prefer_no_schedule);
        let mut by_name: Vec<usize> = (0..nodes.len()).collect();
        by_name.sort_by(|a, b| nodes[*a].name.cmp(&nodes[*b].name).then(a.cmp(b)));
        let mut name_rank = vec![0u32; nodes.len()];
        for (rank, idx) in by_name.into_iter().enumerate() {
            name_rank[idx] = rank as u32;
        }
        Ranking { base_nodes: nodes.len(), prefer_no_schedule, name_rank, kinds: Vec::new() }
    }

    /// Ranks the nodes of `view`, which must be the base view (as [`Ranking::new`] saw it), for
    /// the kind of `pod` (whose [`kind_key`] is `key`), and returns the kind's id.
    pub fn add_kind(&mut self, view: &ClusterView, pod: &SlimPod, key: &[u8]) -> usize {
        let rankable = !key.is_empty() && !self.prefer_no_schedule && !has_preferences(pod);
        let ranked = rankable.then(|| {
            let resources = Arc::new(crate::pod::pod_requests(pod));
            let requests = [resources.get(CPU).as_f64(), resources.get(MEMORY).as_f64()];
            let prepared = view.prepare_unbound(pod, Some(Arc::clone(&resources)));
            let mut nodes: Vec<(i64, u32, u32)> = (0..self.base_nodes.min(view.nodes().len()))
                .filter(|&i| view.node_filters_pass(&prepared, i))
                .map(|i| (resource_score(view, i, requests), self.name_rank[i], i as u32))
                .collect();
            nodes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut passes = vec![false; self.base_nodes];
            for &(_, _, idx) in &nodes {
                passes[idx as usize] = true;
            }
            RankedKind { resources, requests, nodes, passes }
        });
        self.kinds.push(ranked);
        self.kinds.len() - 1
    }

    /// The requests of the pods of `kind` ([`crate::pod::pod_requests`]), when it is ranked.
    pub fn kind_requests(&self, kind: usize) -> Option<&Arc<ResourceList>> {
        self.kinds.get(kind)?.as_ref().map(|k| &k.resources)
    }

    /// The cpu and memory requests of the pods of `kind`, when it is ranked.
    pub fn kind_cpu_memory(&self, kind: usize) -> Option<[f64; 2]> {
        self.kinds.get(kind)?.as_ref().map(|k| k.requests)
    }
}

fn has_prefer_no_schedule(node: &crate::model::ExistingNode) -> bool {
    node.taints.iter().any(|t| t.effect == TaintEffect::PreferNoSchedule)
}

/// The score [`choose`] gives node `idx` for a pod without preferences asking `requests`.
fn resource_score(view: &ClusterView, idx: usize, requests: [f64; 2]) -> i64 {
    let (alloc, used) = view.cpu_memory(idx);
    let (fit, balanced) = resource_scores(alloc, used, requests);
    FIT_WEIGHT * fit + BALANCED_WEIGHT * balanced
}

/// The nodes a replay changed: base nodes it bound pods to, and nodes pushed after the base
/// view. Their node-local verdicts and scores are not the base's; each kind keeps its own of the
/// bound nodes, brought up to date when a pod of the kind comes.
struct Touched {
    /// Per base node, its slot among the bound nodes (`UNTOUCHED` while none is bound to it).
    slot: Vec<u32>,
    /// The bound nodes, by slot (in the order they were first bound to).
    nodes: Vec<u32>,
    /// Per slot, the index in `binds` of the last bind to that node.
    last_bind: Vec<u32>,
    /// The slot of each bind, in bind order (a node again each time).
    binds: Vec<u32>,
    pushed: Vec<usize>,
    /// Per kind id (as far as a pod of it came).
    kinds: Vec<KindTouched>,
}

/// No pod bound to the base node yet (see `Touched::slot`).
const UNTOUCHED: u32 = u32::MAX;

/// A bound node the kind's node-local filters turn away (see `KindTouched::fits`).
const REFUSED: i64 = i64::MIN;

#[derive(Default)]
struct KindTouched {
    /// How many of `Touched::binds` are reflected here.
    seen: usize,
    /// Per slot of `Touched::nodes`: the node's score for the kind (`REFUSED` when it fails the
    /// kind's node-local filters) and its name rank.
    fits: Vec<(i64, u32)>,
    /// How many of the kind's ranked nodes (`RankedKind::nodes`), from the first, are bound
    /// nodes: a node once bound to stays so for the replay, so they are not looked at again.
    touched_head: usize,
}

impl Touched {
    fn new(view: &ClusterView, base_nodes: usize) -> Self {
        let len = view.nodes().len();
        let base = base_nodes.min(len);
        Touched {
            slot: vec![UNTOUCHED; base],
            nodes: Vec::new(),
            last_bind: Vec::new(),
            binds: Vec::new(),
            pushed: (base..len).collect(),
            kinds: Vec::new(),
        }
    }

    fn bound(&mut self, idx: usize) {
        let Some(slot) = self.slot.get_mut(idx) else { return };
        if *slot == UNTOUCHED {
            *slot = self.nodes.len() as u32;
            self.nodes.push(idx as u32);
            self.last_bind.push(0);
        }
        let s = *slot as usize;
        self.last_bind[s] = self.binds.len() as u32;
        self.binds.push(s as u32);
    }
}

/// Where kube-scheduler binds a pod of a ranked kind ([`Ranking`]) — the same node [`choose`]
/// picks among every node it fits — or `None` when it fits nowhere.
fn choose_ranked(
    view: &ClusterView,
    pod: &SlimPod,
    ranking: &Ranking,
    kind_id: usize,
    kind: &RankedKind,
    filters: Option<&Arc<PodFilters>>,
    touched: &mut Touched,
) -> Option<usize> {
    let prepared = match filters {
        Some(f) => view.prepare_unbound_from(pod, f),
        None => view.prepare_unbound(pod, Some(Arc::clone(&kind.resources))),
    };
    let name = |i: usize| view.nodes()[i].name.as_str();
    let better = |a: (i64, usize), b: Option<(i64, usize)>| match b {
        None => true,
        Some(b) => a.0 > b.0 || (a.0 == b.0 && (name(a.1), a.1) < (name(b.1), b.1)),
    };
    if touched.kinds.len() <= kind_id {
        touched.kinds.resize_with(kind_id + 1, KindTouched::default);
    }
    let kt = &mut touched.kinds[kind_id];
    // The untouched base nodes: the first of the kind's list passing the inter-pod filters.
    while kind.nodes.get(kt.touched_head).is_some_and(|&(_, _, idx)| touched.slot[idx as usize] != UNTOUCHED) {
        kt.touched_head += 1;
    }
    let mut best: Option<(i64, usize)> = kind.nodes[kt.touched_head..]
        .iter()
        .map(|&(score, _, idx)| (score, idx as usize))
        .find(|&(_, idx)| touched.slot[idx] == UNTOUCHED && view.inter_pod_filters_pass(&prepared, idx));
    // The bound nodes: the kind's own verdicts and scores of them, brought up to date first
    // (a node bound to again since is read once, at its last bind: the view as it is now).
    kt.fits.resize(touched.nodes.len(), (REFUSED, 0));
    for (at, &slot) in touched.binds.iter().enumerate().skip(kt.seen) {
        let slot = slot as usize;
        if touched.last_bind[slot] as usize != at {
            continue;
        }
        let idx = touched.nodes[slot] as usize;
        let fits = kind.passes[idx] && view.room_filters_pass(&prepared, idx);
        kt.fits[slot] = (if fits { resource_score(view, idx, kind.requests) } else { REFUSED }, ranking.name_rank[idx]);
    }
    kt.seen = touched.binds.len();
    // The best of them that beats the best untouched node and passes the inter-pod filters.
    let mut bar = best.map(|(score, idx)| (score, ranking.name_rank[idx]));
    for (slot, &(score, rank)) in kt.fits.iter().enumerate() {
        let beats = score != REFUSED && bar.is_none_or(|(s, r)| score > s || (score == s && rank < r));
        if !beats {
            continue;
        }
        let idx = touched.nodes[slot] as usize;
        if view.inter_pod_filters_pass(&prepared, idx) {
            best = Some((score, idx));
            bar = Some((score, rank));
        }
    }
    // Nodes pushed after the base view: every filter.
    for &idx in &touched.pushed {
        if view.is_hidden(idx) || view.check_prepared(&prepared, idx).is_err() {
            continue;
        }
        let candidate = (resource_score(view, idx, kind.requests), idx);
        if better(candidate, best) {
            best = Some(candidate);
        }
    }
    best.map(|(_, idx)| idx)
}

/// A pod of a [`replay`] that kube-scheduler would not bind: its index in the batch and the
/// first filter that turned it away from each node, in kube-scheduler's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotBound {
    pub pod: usize,
    pub reason: String,
}

/// Binds `pods` one at a time, in order, the way kube-scheduler would (each on the node
/// [`choose`] picks among every node of `view` it fits; hidden nodes take none), then takes
/// them off the view again. Each pod is read as its owner's new copy, not bound: its
/// `spec.nodeName` is not read ([`ClusterView::prepare_unbound`]), so moved pods are replayed
/// as they are, without a copy each. Returns the node each pod went to, or the first pod that fits
/// nowhere.
///
/// With `ranked`, the ranking of the view's base state (before the replay's nodes were hidden
/// or pushed; their pods changed only on hidden nodes) and each pod's kind in it: pods of
/// ranked kinds find their node through the ranking ([`Ranking`]), with the same result.
///
/// With `filters`, each pod's filters kept from [`ClusterView::pod_filters`] (on a view with the
/// same volume topology and namespace labels): the pods are prepared from them instead of parsed
/// again, with the same result.
pub fn replay(
    view: &mut ClusterView,
    pods: &[Arc<SlimPod>],
    ranked: Option<(&Ranking, &[usize])>,
    filters: Option<&[Arc<PodFilters>]>,
) -> Result<Vec<usize>, NotBound> {
    let mut session = Replay::new(view, ranked.map(|(r, _)| r));
    let result = session.bind(view, pods, ranked.map(|(_, kinds)| kinds), filters);
    session.finish(view);
    result
}

/// A [`replay`] in several batches: the pods one batch binds stay for the next, and between
/// batches nodes may be hidden (their pods taken off) or pushed; [`Replay::finish`] takes every
/// pod it bound off the view again. With a ranking, the view must be the ranking's base state
/// when the replay starts, and change only that way and through the replay's own binds until
/// it finishes.
pub struct Replay<'r> {
    ranking: Option<&'r Ranking>,
    placed: Vec<(usize, Arc<SlimPod>)>,
    version: Vec<u32>,
    touched: Touched,
}

impl<'r> Replay<'r> {
    /// A replay on `view` as it is now, with the ranking of that state when given.
    pub fn new(view: &ClusterView, ranking: Option<&'r Ranking>) -> Self {
        let touched = Touched::new(view, ranking.map_or(0, |r| r.base_nodes));
        Replay { ranking, placed: Vec::new(), version: vec![0; view.nodes().len()], touched }
    }

    /// Binds `pods` as [`replay`] does (`kinds`: each pod's kind in the ranking; `filters`: each
    /// pod's kept filters), after the pods of the earlier batches; they stay bound. Returns the
    /// node each pod went to, or the first pod that fits nowhere.
    pub fn bind(
        &mut self,
        view: &mut ClusterView,
        pods: &[Arc<SlimPod>],
        kinds: Option<&[usize]>,
        filters: Option<&[Arc<PodFilters>]>,
    ) -> Result<Vec<usize>, NotBound> {
        let len = view.nodes().len();
        self.version.resize(len, 0);
        self.touched.pushed = (self.touched.slot.len()..len).collect();
        let mut result = Ok(Vec::with_capacity(pods.len()));
        // Verdicts are remembered within a batch only: pods taken off hidden nodes between
        // batches may change them.
        let mut memo = FilterMemo::default();
        // A node pushed with a PreferNoSchedule taint makes every pod's scores read every node.
        let ranked = self.ranking.zip(kinds).filter(|(r, _)| {
            !r.prefer_no_schedule
                && view
                    .nodes()
                    .iter()
                    .enumerate()
                    .skip(r.base_nodes)
                    .all(|(i, n)| view.is_hidden(i) || !has_prefer_no_schedule(n))
        });
        for (i, pod) in pods.iter().enumerate() {
            let kind = ranked.and_then(|(r, kinds)| {
                let id = *kinds.get(i)?;
                Some((r, id, r.kinds.get(id)?.as_ref()?))
            });
            let filters = filters.and_then(|f| f.get(i));
            let chosen = kind.and_then(|(r, id, k)| choose_ranked(view, pod, r, id, k, filters, &mut self.touched));
            if let (Some(idx), Some((_, _, k))) = (chosen, kind) {
                bind(
                    view,
                    &mut self.placed,
                    &mut self.version,
                    &mut memo,
                    &mut self.touched,
                    idx,
                    pod,
                    Some(Arc::clone(&k.resources)),
                );
                if let Ok(v) = result.as_mut() {
                    v.push(idx);
                }
                continue;
            }
            memo.start(pod, view.nodes().len());
            let mut prepared: Option<PreparedPod<'_>> = None;
            let mut feasible = Vec::new();
            let mut first_refusal: Option<usize> = None;
            for (idx, &ver) in self.version.iter().enumerate() {
                if view.is_hidden(idx) {
                    continue;
                }
                let fits = match memo.get(idx, ver) {
                    Some(v) => v,
                    None => {
                        let p = prepared.get_or_insert_with(|| prepare(view, pod, filters));
                        let v = view.passes(p, idx);
                        memo.put(idx, ver, v);
                        v
                    }
                };
                if fits {
                    feasible.push(idx);
                } else {
                    first_refusal.get_or_insert(idx);
                }
            }
            let Some(idx) = choose(view, pod, &feasible, |n| view.cpu_memory(n)) else {
                // The first node's refusal, in kube-scheduler's words (the view is as the verdicts
                // saw it).
                let reason = first_refusal.and_then(|n| {
                    let p = prepared.get_or_insert_with(|| prepare(view, pod, filters));
                    view.check_prepared(p, n).err().map(|u| u.reason)
                });
                result = Err(NotBound { pod: i, reason: reason.unwrap_or_else(|| "no nodes".to_string()) });
                break;
            };
            drop(prepared);
            let requests = filters.map(|f| Arc::clone(f.requests()));
            bind(view, &mut self.placed, &mut self.version, &mut memo, &mut self.touched, idx, pod, requests);
            if let Ok(v) = result.as_mut() {
                v.push(idx);
            }
        }
        result
    }

    /// Takes every pod the replay bound off the view again.
    pub fn finish(self, view: &mut ClusterView) {
        for (idx, pod) in self.placed.iter().rev() {
            view.remove_pod(*idx, pod);
        }
    }
}

/// A replayed pod prepared as its owner's new copy, from its kept filters when given.
fn prepare<'p>(view: &ClusterView, pod: &'p SlimPod, filters: Option<&Arc<PodFilters>>) -> PreparedPod<'p> {
    match filters {
        Some(f) => view.prepare_unbound_from(pod, f),
        None => view.prepare_unbound(pod, None),
    }
}

/// Binds a replayed pod to node `idx` and notes what that changes for the next pods.
/// `requests` are the pod's, when known.
#[allow(clippy::too_many_arguments)]
fn bind(
    view: &mut ClusterView,
    placed: &mut Vec<(usize, Arc<SlimPod>)>,
    version: &mut [u32],
    memo: &mut FilterMemo,
    touched: &mut Touched,
    idx: usize,
    pod: &Arc<SlimPod>,
    requests: Option<Arc<ResourceList>>,
) {
    match requests {
        Some(r) => view.add_pod_with(idx, Arc::clone(pod), r),
        None => view.add_pod(idx, Arc::clone(pod)),
    }
    version[idx] += 1;
    touched.bound(idx);
    if crate::pod::has_required_anti_affinity(pod) {
        // Its terms may turn this pod's twins away from other nodes too.
        memo.clear();
    }
    placed.push((idx, Arc::clone(pod)));
}

#[cfg(test)]
#[path = "kube_choice_tests.rs"]
mod tests;
