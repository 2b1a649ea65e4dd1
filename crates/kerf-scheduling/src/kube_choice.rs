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

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kerf_api::TaintEffect;

use crate::predicates::{ClusterView, PreferenceParts, PreparedPod};

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
pub fn has_preferences(pod: &Pod) -> bool {
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

pub(crate) fn cpu_memory_of(pod: &Pod) -> [f64; 2] {
    let req = crate::pod::pod_requests(pod);
    [req.get(kerf_api::resources::CPU).as_f64(), req.get(kerf_api::resources::MEMORY).as_f64()]
}

/// The node kube-scheduler binds `pod` to among `feasible` (indexes into `view`, every one
/// passing the filters); `usage(i)` gives node `i`'s allocatable and requested (cpu cores,
/// memory bytes). `None` only when `feasible` is empty.
pub fn choose(
    view: &ClusterView,
    pod: &Pod,
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
    pod: Option<Arc<Pod>>,
    verdicts: Vec<Option<(u32, Verdict)>>,
}

/// A filter verdict: fits, or the first filter's reason.
type Verdict = Result<(), Arc<str>>;

impl FilterMemo {
    /// Keeps the verdicts when `pod` is a twin of the memo's pod, else starts afresh for it.
    fn start(&mut self, pod: &Arc<Pod>, nodes: usize) {
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
        self.verdicts[node].as_ref().filter(|(v, _)| *v == version).map(|(_, r)| r.clone())
    }

    fn put(&mut self, node: usize, version: u32, verdict: Verdict) {
        self.verdicts[node] = Some((version, verdict));
    }

    fn clear(&mut self) {
        self.verdicts.iter_mut().for_each(|v| *v = None);
    }
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
/// them off the view again. Returns the node each pod went to, or the first pod that fits
/// nowhere.
pub fn replay(view: &mut ClusterView, pods: &[Arc<Pod>]) -> Result<Vec<usize>, NotBound> {
    let mut placed: Vec<(usize, Arc<Pod>)> = Vec::with_capacity(pods.len());
    let mut result = Ok(Vec::with_capacity(pods.len()));
    let mut memo = FilterMemo::default();
    let mut version = vec![0u32; view.nodes().len()];
    for (i, pod) in pods.iter().enumerate() {
        memo.start(pod, view.nodes().len());
        let mut prepared: Option<PreparedPod<'_>> = None;
        let mut feasible = Vec::new();
        let mut first_reason: Option<Arc<str>> = None;
        for (idx, &ver) in version.iter().enumerate() {
            if view.is_hidden(idx) {
                continue;
            }
            let verdict = match memo.get(idx, ver) {
                Some(v) => v,
                None => {
                    let p = prepared.get_or_insert_with(|| view.prepare(pod));
                    let v = view.check_prepared(p, idx).map_err(|u| Arc::<str>::from(u.reason));
                    memo.put(idx, ver, v.clone());
                    v
                }
            };
            match verdict {
                Ok(()) => feasible.push(idx),
                Err(reason) => {
                    first_reason.get_or_insert(reason);
                }
            }
        }
        drop(prepared);
        let Some(idx) = choose(view, pod, &feasible, |n| view.cpu_memory(n)) else {
            result = Err(NotBound {
                pod: i,
                reason: first_reason.map_or_else(|| "no nodes".to_string(), |r| r.to_string()),
            });
            break;
        };
        view.add_pod(idx, Arc::clone(pod));
        version[idx] += 1;
        if crate::pod::has_required_anti_affinity(pod) {
            // Its terms may turn this pod's twins away from other nodes too.
            memo.clear();
        }
        placed.push((idx, Arc::clone(pod)));
        if let Ok(v) = result.as_mut() {
            v.push(idx);
        }
    }
    for (idx, pod) in placed.iter().rev() {
        view.remove_pod(*idx, pod);
    }
    result
}
