//! Disruption candidates: the managed nodes disruption may act on, what each one holds, and
//! what protects it (`karpenter.sh/do-not-disrupt`, PodDisruptionBudgets, the NodePool's
//! budgets), computed once per evaluation from cluster state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kerf_api::SlimPod;
use kerf_api::duration::GoDuration;
use kerf_api::nodeclaim::CONDITION_INITIALIZED;
use kerf_api::nodepool::{ConsolidationPolicy, DisruptionReason};
use kerf_api::pod_facts;
use kerf_api::{NodeClaim, NodePool, labels};
use kerf_cloud::{CloudProvider, Timestamp};
use kerf_scheduling::Requirements;
use kerf_scheduling::disruption_budgets::{DisruptionBudgets, EvictionRefusal};

use super::Disruption;
use super::balanced::{Moved, PoolTotals};
use super::cost::{DeclaredCost, node_disruption_cost};
use crate::ctx::Ctx;
use crate::input::TypesByPool;
use crate::marks::{is_disrupted, is_drainable, rebooting};
use crate::state::ClusterState;
use crate::util;

/// A managed, initialized node that is not being disrupted, as disruption sees it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub claim: String,
    pub node: String,
    pub pool: String,
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
    /// $/h of the offering it runs on.
    pub price: f64,
    /// Pods that would have to move: not DaemonSet pods, not finished, not the node's own.
    pub pods: Vec<Arc<SlimPod>>,
    /// 1 plus the positive eviction costs of its pods (see `balanced`).
    pub disruption_cost: f64,
    /// Consolidation may act on it (policy and `consolidateAfter` allow it now).
    pub consolidatable: bool,
    /// Why consolidation may not act on it yet, when it may not.
    pub not_consolidatable: Option<String>,
    /// What forbids any voluntary disruption (do-not-disrupt, a PodDisruptionBudget).
    pub protected: Option<String>,
    /// The claim's `terminationGracePeriod`, when `protected` comes only from its pods (a
    /// do-not-disrupt pod, a PodDisruptionBudget): eventual disruption (drift) may still act on
    /// the node, the grace period forcing those pods out (Karpenter's eventual disruption
    /// class). A node's own do-not-disrupt annotation holds it against every method.
    pub eventual_grace: Option<GoDuration>,
    /// Why it drifted, if it did.
    pub drifted: Option<String>,
    /// A DaemonSet pod meant for it that cannot fit on it.
    pub unfit: Option<String>,
    /// Why it is not replaced alone by a cheaper node: a consolidation launched it for its pods
    /// and the workload has not shrunk since. Deleting it, or merging it with other nodes onto
    /// fewer, still may happen — each of those removes a node, so with the workload unchanged
    /// consolidation ends after finitely many steps.
    pub replace_hold: Option<String>,
    /// Its pool is static (`spec.replicas`): never consolidated; drift replaces it through
    /// static drift (one node from the pool's template, within `limits.nodes`).
    pub static_pool: bool,
}

impl Candidate {
    /// What a Balanced score reads of it.
    pub(crate) fn moved(&self) -> Moved<'_> {
        Moved { pool: &self.pool, price: self.price, disruption_cost: self.disruption_cost }
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn is_spot(&self) -> bool {
        self.capacity_type == labels::CAPACITY_TYPE_SPOT
    }

    /// What keeps `reason` from disrupting it, if anything. Drift is eventual: what only its
    /// pods protect (a do-not-disrupt pod, a PodDisruptionBudget) goes when the claim has a
    /// `terminationGracePeriod`.
    pub fn held_against(&self, reason: super::Reason) -> Option<&String> {
        self.protected.as_ref().filter(|_| reason != super::Reason::Drifted || self.eventual_grace.is_none())
    }
}

/// Disruptions each PodDisruptionBudget still allows, computed as the Eviction API does, from
/// the counts cluster state keeps per budget.
pub(crate) struct PdbIndex<'s> {
    budgets: &'s DisruptionBudgets,
}

impl<'s> PdbIndex<'s> {
    pub fn new(state: &'s ClusterState) -> Self {
        PdbIndex { budgets: state.disruption_budgets() }
    }

    /// Why evicting the pod now would be refused, if it would.
    pub fn blocking(&self, pod: &SlimPod) -> Option<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_name = kerf_scheduling::pod::name(pod);
        Some(match self.budgets.eviction_refusal(pod)? {
            EvictionRefusal::MoreThanOneBudget(first, second) => format!(
                "pod {ns}/{pod_name} is selected by more than one PodDisruptionBudget ({} and {}), so it cannot be evicted",
                first.1, second.1
            ),
            EvictionRefusal::NoneAllowed((_, name), status) => format!(
                "PodDisruptionBudget {ns}/{name} allows no disruption of pod {ns}/{pod_name} (needs {} healthy pods, has {})",
                status.desired_healthy, status.healthy
            ),
        })
    }
}

/// The NodePools' disruption budgets at one instant.
#[derive(Debug, Default)]
pub struct Budgets {
    /// Pool → (its nodes, those already disrupting or NotReady).
    pub counts: BTreeMap<String, (usize, usize)>,
    /// Pool → those of its nodes counted as disrupting only because they are NotReady (not
    /// deleting, not being disrupted, not rebooted by node repair).
    pub not_ready: BTreeMap<String, usize>,
    /// Pool → its cost and disruption cost over all of its nodes (for `Balanced`).
    pub pool_totals: BTreeMap<String, PoolTotals>,
    /// The wall-clock instant budget schedules are evaluated at.
    pub wall: Timestamp,
}

impl Budgets {
    /// How many more of the pool's nodes may be disrupted for `reason` now.
    pub fn allowed(&self, pool: &NodePool, reason: DisruptionReason) -> usize {
        let (total, disrupting) = self.counts.get(pool.name()).copied().unwrap_or((0, 0));
        pool.allowed_disruptions(self.wall, total, reason).saturating_sub(disrupting)
    }

    /// How many of the pool's unhealthy nodes node repair may take now: the nodes being
    /// disrupted or deleted count against the budget, the nodes that are merely NotReady do not
    /// (they are unavailable already; repairing them takes nothing more away).
    pub fn allowed_for_repair(&self, pool: &NodePool) -> usize {
        let (total, disrupting) = self.counts.get(pool.name()).copied().unwrap_or((0, 0));
        let not_ready = self.not_ready.get(pool.name()).copied().unwrap_or(0);
        pool.allowed_disruptions(self.wall, total, DisruptionReason::Unhealthy)
            .saturating_sub(disrupting.saturating_sub(not_ready))
    }

    /// Whether one more of the pool's nodes may be disrupted for `reason` when `used` already
    /// are by the command being built; if not, why (see [`Budgets::describe`]).
    pub fn room(&self, pool: &NodePool, reason: DisruptionReason, used: usize) -> Result<(), String> {
        if used < self.allowed(pool, reason) { Ok(()) } else { Err(self.describe(pool, reason)) }
    }

    /// Why the budget allows nothing more: the binding budget, its window and the counts.
    pub fn describe(&self, pool: &NodePool, reason: DisruptionReason) -> String {
        let (total, disrupting) = self.counts.get(pool.name()).copied().unwrap_or((0, 0));
        let binding = pool
            .spec
            .disruption
            .budgets
            .iter()
            .filter(|b| b.reasons.as_ref().is_none_or(|r| r.contains(&reason)))
            .filter_map(|b| b.allowed_disruptions(self.wall, total).ok().map(|n| (n, b)))
            .min_by_key(|(n, _)| *n);
        let what = match binding {
            Some((n, b)) => {
                let window = match (&b.schedule, &b.duration) {
                    (Some(s), Some(d)) => format!(", active on schedule \"{s}\" for {d}"),
                    _ => String::new(),
                };
                format!("budget nodes={}{window} allows {n}", b.nodes)
            }
            None => "its budgets allow none".to_string(),
        };
        format!(
            "NodePool {}'s disruption budget allows no more {reason:?} disruptions now ({what} of {total} nodes; {disrupting} already disrupting or not ready)",
            pool.name()
        )
    }
}

/// What a pool's nodes are checked against for drift, worked out once per evaluation: its
/// requirements and its template's static hash.
struct PoolDrift<'p> {
    pool: &'p NodePool,
    requirements: Requirements,
    template_hash: String,
}

impl<'p> PoolDrift<'p> {
    fn of(pool: &'p NodePool) -> Self {
        PoolDrift {
            pool,
            requirements: Requirements::from_node_selector(&pool.spec.template.spec.requirements),
            template_hash: pool.template_hash(),
        }
    }

    /// Why the claim or its node drifted from the pool, if either did: the template changed
    /// since the claim was launched, or the node's labels no longer satisfy the requirements.
    fn drift(&self, claim: &NodeClaim, node: &Node) -> Option<String> {
        self.template_drift(claim).or_else(|| self.requirement_drift(node))
    }

    /// Labels a node must carry to satisfy its pool's requirements; the first one it breaks.
    fn requirement_drift(&self, node: &Node) -> Option<String> {
        let empty = BTreeMap::new();
        let node_labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        for (key, req) in self.requirements.iter() {
            let value = node_labels.get(key).map(String::as_str);
            if !req.matches(value) {
                return Some(format!(
                    "its label {key}={} no longer satisfies NodePool {}'s requirements",
                    value.unwrap_or("(none)"),
                    self.pool.name()
                ));
            }
        }
        None
    }

    /// The pool template's static hash differs from the one the claim was created with. Only a
    /// hash of kerf's algorithm is compared: a claim with another hash version (Karpenter's) is
    /// stamped again by the NodeClaim lifecycle instead of counting as drifted.
    fn template_drift(&self, claim: &NodeClaim) -> Option<String> {
        let ann = claim.metadata.annotations.as_ref()?;
        let version = ann.get(labels::NODEPOOL_HASH_VERSION)?;
        let hash = ann.get(labels::NODEPOOL_HASH)?;
        (version == kerf_api::hash::NODEPOOL_HASH_VERSION && *hash != self.template_hash)
            .then(|| format!("NodePool {}'s template changed since it was launched", self.pool.name()))
    }
}

/// $/h of the offering the node runs on.
pub(crate) fn node_price(types: &TypesByPool, pool: &str, itype: &str, zone: &str, capacity_type: &str) -> f64 {
    types
        .get(pool)
        .and_then(|ts| ts.iter().find(|t| t.name == itype))
        .and_then(|t| {
            t.offerings
                .iter()
                .find(|o| o.zone == zone && o.capacity_type == capacity_type)
                .or_else(|| t.offerings.iter().find(|o| o.capacity_type == capacity_type))
        })
        .map_or(0.0, |o| o.price)
}

/// How long past `consolidateAfter` a newly launched node that runs pods is kept from
/// consolidation while the workload does not shrink: long enough for the pods of a burst that
/// arrive in waves (a rollout, a scale-up) to land before the nodes launched for them are
/// judged, short enough that consolidation of what kube-scheduler actually bound is done
/// within minutes of a launch. Every decision is still replayed as kube-scheduler would bind
/// it, so what consolidation removes early is not launched again.
pub const LAUNCH_REGRET_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

impl Disruption {
    /// Until when a claim launched for the current workload is kept from consolidation, if it
    /// is now: it runs pods, it was created less than `consolidate_after` +
    /// [`LAUNCH_REGRET_GUARD`] ago, and no pod has left the workload since.
    fn regret_guard(
        &self,
        claim: &NodeClaim,
        consolidate_after: std::time::Duration,
        has_pods: bool,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let created = claim.metadata.creation_timestamp.as_ref()?.0;
        let until = util::after(util::after(created, consolidate_after), LAUNCH_REGRET_GUARD);
        let shrank_since = self.workload_shrank_at.is_some_and(|t| t >= created);
        (has_pods && now < until && !shrank_since).then_some(until)
    }

    /// A claim a consolidation launched is kept from consolidation while no pod has left the
    /// workload since its creation: it was sized for exactly these pods.
    fn replacement_kept(&self, claim: &NodeClaim) -> bool {
        let replacement = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::CONSOLIDATION_REPLACEMENT))
            .is_some_and(|v| v == "true");
        let Some(created) = claim.metadata.creation_timestamp.as_ref().map(|t| t.0) else { return false };
        replacement && self.workload_shrank_at.is_none_or(|t| t < created)
    }

    /// Every managed node of a pool that disruption may consider, the budgets, and the
    /// earliest time a node becomes consolidatable (to wake then).
    pub(crate) async fn candidates<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        types: &TypesByPool,
        now: Timestamp,
        exclude: &BTreeSet<String>,
    ) -> (Vec<Candidate>, Budgets, Option<Timestamp>) {
        let state = &cx.state;
        let pdbs = PdbIndex::new(state);
        let mut budgets = Budgets { wall: cx.options.wall_clock(now), ..Budgets::default() };
        let declared = DeclaredCost::for_gate(cx.options.pod_deletion_cost_management);
        // DaemonSet pods that cannot fit on the node they are meant for, with when their
        // DaemonSet was created.
        let mut unfit: BTreeMap<&str, (String, Option<Timestamp>)> = BTreeMap::new();
        for (_, pod) in state.unbound_pods() {
            if pod_facts::daemonset_owner(pod).is_some()
                && util::marked_unschedulable(pod)
                && let Some(node) = util::daemon_node(pod)
            {
                let why = pod
                    .condition(kerf_api::slim_pod::KeptCondition::PodScheduled)
                    .and_then(|c| c.message().map(str::to_string))
                    .unwrap_or_default();
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                let created = pod_facts::daemonset_owner(pod)
                    .and_then(|name| state.daemonsets().get(&(ns, name.to_string())))
                    .and_then(|ds| ds.metadata.creation_timestamp.as_ref())
                    .map(|t| t.0);
                unfit.entry(node).or_insert_with(|| {
                    (format!("DaemonSet pod {} cannot run on it: {why}", kerf_scheduling::pod::key(pod)), created)
                });
            }
        }
        let mut room = cx.published.room_held();
        let mut drift_of: BTreeMap<&str, PoolDrift<'_>> = BTreeMap::new();
        let mut out = Vec::new();
        let mut wake: Option<Timestamp> = None;
        for (name, node) in state.nodes() {
            let Some(claim) = state.claim_for_node(node) else { continue };
            let Some(pool_name) = util::claim_pool(claim) else { continue };
            let Some(pool) = state.node_pool(pool_name) else { continue };
            let l = node.metadata.labels.as_ref();
            let get = |k: &str| l.and_then(|l| l.get(k)).cloned().unwrap_or_default();
            let (itype, zone, ct) = (get(labels::INSTANCE_TYPE), get(labels::ZONE), get(labels::CAPACITY_TYPE));
            let price = node_price(types, pool_name, &itype, &zone, &ct);
            let all_pods: Vec<&Arc<SlimPod>> = state.pods_on_node(name).filter(|p| !pod_facts::terminal(p)).collect();
            // The pods that must find room elsewhere when the node goes, as the scheduler's
            // what-ifs move them: a pod that tolerates the disrupted taint is not evicted by the
            // drain, but it goes with the node and its controller makes it again elsewhere.
            let moving: Vec<Arc<SlimPod>> =
                all_pods.iter().filter(|p| pod_facts::moves_with_node(&***p)).map(|p| Arc::clone(p)).collect();
            let disruption_cost = node_disruption_cost(moving.iter().map(|p| &**p), declared);
            let totals = budgets.pool_totals.entry(pool_name.to_string()).or_default();
            totals.cost += price;
            totals.disruption += disruption_cost;
            let count = budgets.counts.entry(pool_name.to_string()).or_default();
            count.0 += 1;
            let deleting = node.metadata.deletion_timestamp.is_some() || claim.metadata.deletion_timestamp.is_some();
            // A node node repair rebooted is disrupted until it is back (see `repair`).
            let rebooting = rebooting(claim, node, now);
            if deleting || is_disrupted(node) || rebooting || !util::node_ready(node) {
                count.1 += 1;
                if !deleting && !is_disrupted(node) && !rebooting {
                    *budgets.not_ready.entry(pool_name.to_string()).or_default() += 1;
                }
                continue;
            }
            if exclude.contains(claim.name()) || !claim.is_condition_true(CONDITION_INITIALIZED) {
                continue;
            }
            let mut pods = moving;
            // Buffer room held here moves like its pods: a node holding it is not empty.
            pods.extend(room.remove(name.as_str()).unwrap_or_default());
            let node_protected = node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
                .is_some_and(|v| v == "true");
            let protected = if node_protected {
                Some(format!("node {name} is annotated {}=true", labels::DO_NOT_DISRUPT))
            } else if let Some(p) = all_pods.iter().find(|p| util::do_not_disrupt(p)) {
                Some(format!("pod {} is annotated {}=true", kerf_scheduling::pod::key(p), labels::DO_NOT_DISRUPT))
            } else {
                // Budgets guard evictions: only the pods the drain evicts ask them.
                all_pods.iter().filter(|p| is_drainable(p)).find_map(|p| pdbs.blocking(p))
            };
            let eventual_grace =
                if protected.is_some() && !node_protected { claim.spec.termination_grace_period } else { None };
            // consolidateAfter counts from initialization or the last pod event, whichever is later.
            let initialized = claim
                .status
                .as_ref()
                .and_then(|s| util::true_since(&s.conditions, CONDITION_INITIALIZED))
                .unwrap_or(now);
            let since = self.last_pod_event.get(name).copied().map_or(initialized, |t| t.max(initialized));
            let disruption = &pool.spec.disruption;
            let not_consolidatable = match disruption.consolidate_after.duration() {
                _ if pool.is_static() => Some(format!(
                    "NodePool {pool_name} is static (spec.replicas: {}): kerf keeps exactly its replicas and never consolidates them",
                    pool.spec.replicas.unwrap_or(0)
                )),
                None => Some(format!("NodePool {pool_name} has consolidateAfter: Never")),
                Some(after) => {
                    let at = util::after(since, after);
                    if now < at {
                        wake = util::earliest(wake, Some(at));
                        Some(format!(
                            "consolidateAfter {} has not passed since its last pod change (consolidatable in {}s)",
                            disruption.consolidate_after,
                            (at.as_millisecond() - now.as_millisecond() + 999) / 1000
                        ))
                    } else if !pods.is_empty()
                        && let Some(why) = self.reversals.held_back(claim, self.workload_shrank_at)
                    {
                        Some(why)
                    } else if let Some(until) = self.regret_guard(claim, after, !pods.is_empty(), now) {
                        wake = util::earliest(wake, Some(until));
                        Some(format!(
                            "it was launched for this workload {}s ago and the workload has not shrunk since; kerf keeps a new node for consolidateAfter + {}s (consolidatable in {}s)",
                            claim
                                .metadata
                                .creation_timestamp
                                .as_ref()
                                .map_or(0, |c| (now.as_millisecond() - c.0.as_millisecond()) / 1000),
                            LAUNCH_REGRET_GUARD.as_secs(),
                            (until.as_millisecond() - now.as_millisecond() + 999) / 1000
                        ))
                    } else if disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty && !pods.is_empty() {
                        Some(format!(
                            "NodePool {pool_name} consolidates only empty nodes (WhenEmpty) and it runs {} pod(s)",
                            pods.len()
                        ))
                    } else {
                        None
                    }
                }
            };
            let class = state.node_class_for(pool);
            let drift = drift_of.entry(pool.name()).or_insert_with(|| PoolDrift::of(pool));
            let drifted = match drift.drift(claim, node) {
                Some(d) => Some(d),
                None => match cx.cloud.is_drifted(claim, class).await {
                    Ok(Some(why)) if why == "CapacityReservationDrift" => Some(format!(
                        "its node class {} no longer selects its capacity reservation ({why})",
                        pool.spec.template.spec.node_class_ref.name
                    )),
                    Ok(Some(why)) => {
                        Some(format!("its node class {} changed ({why})", pool.spec.template.spec.node_class_ref.name))
                    }
                    _ => None,
                },
            };
            let replace_hold = (!pods.is_empty() && self.replacement_kept(claim)).then(|| {
                "a consolidation launched it for these pods and the workload has not shrunk since; kerf does not replace it alone again until the workload changes".to_string()
            });
            out.push(Candidate {
                claim: claim.name().to_string(),
                node: name.clone(),
                pool: pool_name.to_string(),
                price,
                instance_type: itype,
                capacity_type: ct,
                zone,
                pods,
                disruption_cost,
                consolidatable: not_consolidatable.is_none(),
                not_consolidatable,
                protected,
                eventual_grace,
                drifted,
                replace_hold,
                static_pool: pool.is_static(),
                // A node launched after the DaemonSet existed was sized with its pod: a pod that
                // took its room won a scheduling race, and a replacement would only race again.
                unfit: unfit
                    .get(name.as_str())
                    .filter(|(_, ds_created)| {
                        let launched = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
                        !matches!((launched, ds_created), (Some(l), Some(d)) if l > *d)
                    })
                    .map(|(why, _)| why.clone()),
            });
        }
        (out, budgets, wake)
    }
}

/// Karpenter's reason a budget is checked against, for each method. kerf's `Unfit` counts as
/// drift: the node no longer suits what must run on it.
pub(crate) fn budget_reason(reason: super::Reason) -> Option<DisruptionReason> {
    match reason {
        super::Reason::Empty => Some(DisruptionReason::Empty),
        super::Reason::Underutilized => Some(DisruptionReason::Underutilized),
        super::Reason::Drifted | super::Reason::Unfit => Some(DisruptionReason::Drifted),
        super::Reason::Unhealthy => Some(DisruptionReason::Unhealthy),
        super::Reason::Expired | super::Reason::Interrupted => None,
    }
}

/// Takes candidates (in order) while their pool's budget for `reason` allows; the others get
/// the budget as their reason.
pub(crate) fn within_budget<'a>(
    cands: impl IntoIterator<Item = &'a Candidate>,
    budgets: &Budgets,
    pools: &BTreeMap<String, NodePool>,
    reason: DisruptionReason,
    blocked: &mut BTreeMap<String, String>,
) -> Vec<&'a Candidate> {
    let mut used: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for c in cands {
        let Some(pool) = pools.get(&c.pool) else { continue };
        let n = used.entry(c.pool.as_str()).or_default();
        match budgets.room(pool, reason, *n) {
            Ok(()) => {
                *n += 1;
                out.push(c);
            }
            Err(why) => {
                blocked.entry(c.node.clone()).or_insert(why);
            }
        }
    }
    out
}
