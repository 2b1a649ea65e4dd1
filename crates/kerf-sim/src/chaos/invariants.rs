//! The promises `kerf bench chaos` checks, during a run and after it settles: every instance is
//! tracked by a NodeClaim or garbage-collected, every launched NodeClaim has its instance, pods
//! that fit run, no removal by kerf takes a PodDisruptionBudget below its minimum, no voluntary
//! disruption touches a do-not-disrupt pod or node or goes past its NodePool's budget, and no
//! node keeps the `karpenter.sh/disrupted` taint once its disruption is abandoned.
//!
//! Writes are judged as they reach the API server ([`Monitor::on_write`]); a taint is judged
//! once the pass that wrote it has recorded why ([`Monitor::after_reconcile`]). The state of
//! the cluster and the cloud is judged between steps ([`Monitor::check_state`]), with a window
//! for what a controller legitimately needs time to clean up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kerf_api::SlimPod;
use kerf_api::nodepool::DisruptionReason;
use kerf_api::{NodeClaim, NodePool, labels};
use kerf_cloud::{ManualClock, Timestamp};
use kerf_controller::DisruptionRecord;
use kerf_controller::disruption::Reason;

use kerf_apiserver::SimCluster;

/// Once faults have stopped, how long an instance may still run without a NodeClaim, or a
/// launched NodeClaim lack its instance (a backstop: [`CLEAN_PERIODS`] is the bound; while
/// calls fail, how long a leak lasts is measured, not judged).
pub const LEAK_WINDOW: Duration = Duration::from_secs(20 * 60);
/// How many garbage collection periods in which it could have been cleaned up (the cloud's list
/// answered and no call cleaning it up failed) a leaked instance or an orphan NodeClaim may
/// outlive: the one in which it appeared may have listed just before it did.
pub const CLEAN_PERIODS: u64 = 2;

/// What the state checks need to know of the faults: garbage collection periods in which a
/// leak could have been cleaned up.
pub trait CleanupPeriods {
    /// A counter of garbage collection periods that could see the instances.
    fn lists(&self) -> u64;
    /// Periods since `lists` in which no call cleaning up `key` (a provider ID or a NodeClaim
    /// name) failed.
    fn clean_periods_since(&self, key: &str, lists: u64) -> u64;
}
/// How long a node may carry the disrupted taint without being deleted (a replacement that
/// never registers is given up after 15 minutes).
pub const TAINT_WINDOW: Duration = Duration::from_secs(30 * 60);

/// An instance as the cloud holds it (whatever the controllers were told).
#[derive(Debug, Clone, PartialEq)]
pub struct CloudInstance {
    pub provider_id: String,
    pub instance_type: String,
    /// The NodeClaim it was launched for.
    pub node_claim: String,
    pub launched_at: Timestamp,
    pub terminated: bool,
}

/// One kind of broken promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    LeakedInstance,
    OrphanNodeClaim,
    LostPod,
    PdbViolation,
    DoNotDisruptViolation,
    BudgetViolation,
    StuckDisruptedTaint,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::LeakedInstance,
        Kind::OrphanNodeClaim,
        Kind::LostPod,
        Kind::PdbViolation,
        Kind::DoNotDisruptViolation,
        Kind::BudgetViolation,
        Kind::StuckDisruptedTaint,
    ];

    /// Its key in the bench's JSON.
    pub fn json_key(self) -> &'static str {
        match self {
            Kind::LeakedInstance => "leakedInstances",
            Kind::OrphanNodeClaim => "orphanNodeClaims",
            Kind::LostPod => "lostPods",
            Kind::PdbViolation => "pdbViolations",
            Kind::DoNotDisruptViolation => "doNotDisruptViolations",
            Kind::BudgetViolation => "budgetViolations",
            Kind::StuckDisruptedTaint => "stuckDisruptedTaints",
        }
    }
}

/// A broken promise: what, where and when (virtual seconds), and the step of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub kind: Kind,
    pub step: usize,
    pub at_seconds: f64,
    pub detail: String,
}

/// A taint written this pass, with what the cluster looked like just after it.
#[derive(Debug, Clone)]
struct Tainted {
    node: String,
    claim: Option<String>,
    /// A do-not-disrupt pod or annotation on the node, and whether only pods protect it.
    protected: Option<(String, bool)>,
    /// The claim's terminationGracePeriod is set (drift goes ahead despite pods then).
    grace: bool,
    /// (pool, nodes of the pool, of which disrupting or not ready).
    counts: Option<(NodePool, usize, usize)>,
}

#[derive(Debug, Default)]
struct State {
    step: usize,
    taints: Vec<Tainted>,
    violations: Vec<Violation>,
    /// Objects already reported, per kind (one violation per object and kind).
    reported: BTreeSet<(Kind, String)>,
    /// Leaks and orphans seen: key → (since, the periods counter then).
    unclaimed_since: BTreeMap<String, (Timestamp, u64)>,
    orphan_since: BTreeMap<String, (Timestamp, u64)>,
    /// The longest an instance ran without a NodeClaim, and a NodeClaim named a gone instance.
    max_leak: Duration,
    max_orphan: Duration,
    /// When faults stopped (the run's fault-free tail began).
    calm_since: Option<Timestamp>,
    tainted_since: BTreeMap<String, Timestamp>,
}

/// Collects violations; shared by the API decorator's write hook and the runner.
#[derive(Debug, Default)]
pub struct Monitor {
    state: Mutex<State>,
    /// Added to virtual time to get the wall clock budgets' schedules run on.
    wall_offset_ms: i64,
}

fn secs(t: Timestamp) -> f64 {
    (t.as_millisecond() - ManualClock::EPOCH_MILLIS) as f64 / 1000.0
}

fn annotated_do_not_disrupt(meta: &dyn kerf_api::MetaView) -> bool {
    meta.annotations().and_then(|a| a.get(labels::DO_NOT_DISRUPT)).is_some_and(|v| v == "true")
}

fn disrupted(node: &Node) -> bool {
    node.spec.iter().flat_map(|s| s.taints.iter().flatten()).any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
}

fn provider_id(node: &Node) -> Option<&str> {
    node.spec.as_ref().and_then(|s| s.provider_id.as_deref())
}

fn ready(node: &Node) -> bool {
    kerf_scheduling::node::node_ready(node)
}

fn live(pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !kerf_api::pod_facts::terminal(pod)
}

fn pods_on(cluster: &SimCluster, node: &str) -> Vec<SlimPod> {
    cluster
        .list_objs::<SlimPod>()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) && live(p))
        .collect()
}

fn claim_for(cluster: &SimCluster, node: &Node) -> Option<NodeClaim> {
    let pid = provider_id(node)?;
    cluster.list_objs::<NodeClaim>().into_iter().find(|c| c.provider_id() == Some(pid))
}

/// Whether the claim's terminationGracePeriod has run out since the node started deleting (kerf
/// then deletes what is left without asking, as Karpenter does).
fn grace_elapsed(node: &Node, claim: Option<&NodeClaim>, now: Timestamp) -> bool {
    let (Some(since), Some(grace)) =
        (node.metadata.deletion_timestamp.as_ref(), claim.and_then(|c| c.spec.termination_grace_period))
    else {
        return false;
    };
    since.0.as_millisecond() + grace.as_duration().as_millis() as i64 <= now.as_millisecond()
}

impl Monitor {
    pub fn new(wall_offset_ms: i64) -> Self {
        Monitor { state: Mutex::new(State::default()), wall_offset_ms }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The step of the run now executing (named in violations).
    pub fn set_step(&self, step: usize) {
        self.lock().step = step;
    }

    fn report(s: &mut State, kind: Kind, key: &str, now: Timestamp, detail: String) {
        if s.reported.insert((kind, key.to_string())) {
            let step = s.step;
            s.violations.push(Violation { kind, step, at_seconds: secs(now), detail });
        }
    }

    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.clone()
    }

    /// A write the controllers are making (pod deletes: before; taints and node releases:
    /// just after it was applied).
    pub fn on_write(&self, write: &super::faults::Write, cluster: &SimCluster, now: Timestamp) {
        use super::faults::Write;
        match write {
            Write::Tainted { node } => {
                let Some(n) = cluster.get_obj::<Node>(None, node) else { return };
                if n.metadata.deletion_timestamp.is_some() {
                    // Termination's taint on a node being deleted: not a disruption decision.
                    return;
                }
                let claim = claim_for(cluster, &n);
                let pods = pods_on(cluster, node);
                let protected = if annotated_do_not_disrupt(&n.metadata) {
                    Some((format!("node {node} is annotated {}", labels::DO_NOT_DISRUPT), false))
                } else {
                    pods.iter().find(|p| annotated_do_not_disrupt(&p.metadata)).map(|p| {
                        (format!("pod {} is annotated {}", kerf_scheduling::pod::key(p), labels::DO_NOT_DISRUPT), true)
                    })
                };
                let counts = n
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::NODE_POOL))
                    .and_then(|pool| cluster.get_obj::<NodePool>(None, pool))
                    .map(|pool| {
                        let claims = cluster.list_objs::<NodeClaim>();
                        let managed: Vec<Node> = cluster
                            .list_objs::<Node>()
                            .into_iter()
                            .filter(|x| {
                                x.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE_POOL))
                                    == Some(&pool.name().to_string())
                                    && provider_id(x).is_some_and(|p| claims.iter().any(|c| c.provider_id() == Some(p)))
                            })
                            .collect();
                        let busy = managed
                            .iter()
                            .filter(|x| {
                                x.metadata.deletion_timestamp.is_some()
                                    || disrupted(x)
                                    || !ready(x)
                                    || claims.iter().any(|c| {
                                        c.provider_id() == provider_id(x) && c.metadata.deletion_timestamp.is_some()
                                    })
                            })
                            .count();
                        (pool, managed.len(), busy)
                    });
                let grace = claim.as_ref().is_some_and(|c| c.spec.termination_grace_period.is_some());
                self.lock().taints.push(Tainted {
                    node: node.clone(),
                    claim: claim.map(|c| c.name().to_string()),
                    protected,
                    grace,
                    counts,
                });
            }
            Write::PodDeleted { namespace, name } => {
                let Some(pod) = cluster.get_obj::<SlimPod>(Some(namespace), name) else { return };
                if !live(&pod) {
                    return;
                }
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .and_then(|n| cluster.get_obj::<Node>(None, n));
                if let Some(n) = &node
                    && grace_elapsed(n, claim_for(cluster, n).as_ref(), now)
                {
                    return;
                }
                if let Ok(Some(refusal)) = cluster.eviction_refusal(namespace, name) {
                    let mut s = self.lock();
                    Self::report(
                        &mut s,
                        Kind::PdbViolation,
                        &format!("{namespace}/{name}"),
                        now,
                        format!("kerf deleted pod {namespace}/{name} outright although {refusal}"),
                    );
                }
            }
            Write::NodeReleased { node } => {
                // The Node is gone now; whatever is still bound to it goes with it.
                for pod in pods_on(cluster, node) {
                    let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if let Ok(Some(refusal)) = cluster.eviction_refusal(&ns, &name) {
                        let mut s = self.lock();
                        Self::report(
                            &mut s,
                            Kind::PdbViolation,
                            &format!("{ns}/{name}"),
                            now,
                            format!(
                                "kerf released node {node} while pod {ns}/{name} still ran there, although {refusal}"
                            ),
                        );
                    }
                }
            }
        }
    }

    /// Judges the taints written in the pass that just ended, now that its disruption records
    /// say why each node was tainted.
    pub fn after_reconcile(&self, records: &[DisruptionRecord], now: Timestamp) {
        let mut s = self.lock();
        let taints = std::mem::take(&mut s.taints);
        for t in taints {
            let Some(claim) = &t.claim else { continue };
            // The decision this pass recorded for the node. A pass that failed between the taint
            // and the record leaves the taint to be released (see `check_state`); an older
            // record of the same claim (another command, maybe another reason) says nothing
            // about this taint.
            let Some(rec) = records.iter().rev().find(|r| &r.node_claim == claim && r.decided_at == now) else {
                continue;
            };
            let budget_reason = match rec.reason {
                // Repair counts its budget without the node it repairs (already unavailable).
                Reason::Expired | Reason::Interrupted | Reason::Unhealthy => continue,
                Reason::Empty => DisruptionReason::Empty,
                Reason::Underutilized => DisruptionReason::Underutilized,
                Reason::Drifted | Reason::Unfit => DisruptionReason::Drifted,
            };
            if let Some((why, pods_only)) = &t.protected
                && !(rec.reason == Reason::Drifted && *pods_only && t.grace)
            {
                Self::report(
                    &mut s,
                    Kind::DoNotDisruptViolation,
                    &format!("{}@{}", t.node, secs(now)),
                    now,
                    format!("node {} was disrupted ({}) although {why}", t.node, rec.reason.as_str()),
                );
            }
            if let Some((pool, total, busy)) = &t.counts {
                let wall = Timestamp::from_millisecond(now.as_millisecond() + self.wall_offset_ms).unwrap_or(now);
                let allowed = pool.allowed_disruptions(wall, *total, budget_reason);
                if busy > &allowed {
                    Self::report(
                        &mut s,
                        Kind::BudgetViolation,
                        &format!("{}@{}", t.node, secs(now)),
                        now,
                        format!(
                            "node {} was disrupted ({}) making {busy} of NodePool {}'s {total} nodes disrupting, more than its budget's {allowed}",
                            t.node,
                            rec.reason.as_str(),
                            pool.name()
                        ),
                    );
                }
            }
        }
    }

    /// Judges the cluster and the cloud as they are: instances without claims, launched claims
    /// without instances, nodes keeping the disrupted taint, each once it has lasted longer than
    /// its window.
    /// Faults stopped at `at`: from then on leaks and orphans are also held to [`LEAK_WINDOW`],
    /// counted from `at` at the earliest.
    pub fn faults_stopped(&self, at: Timestamp) {
        self.lock().calm_since = Some(at);
    }

    /// The longest an instance ran without a NodeClaim, and a launched NodeClaim lacked its
    /// instance, so far (ongoing ones counted to `now` of the last check).
    pub fn max_leak_and_orphan(&self) -> (Duration, Duration) {
        let s = self.lock();
        (s.max_leak, s.max_orphan)
    }

    pub fn check_state(
        &self,
        cluster: &SimCluster,
        instances: &[CloudInstance],
        periods: &dyn CleanupPeriods,
        now: Timestamp,
    ) {
        let (leak_window, taint_window) = (LEAK_WINDOW, TAINT_WINDOW);
        let lists = periods.lists();
        let lasted = |since: Timestamp| {
            Duration::from_millis(u64::try_from(now.as_millisecond() - since.as_millisecond()).unwrap_or(0))
        };
        let claims = cluster.list_objs::<NodeClaim>();
        let nodes = cluster.list_objs::<Node>();
        let claimed: BTreeMap<&str, &NodeClaim> =
            claims.iter().filter_map(|c| c.provider_id().map(|p| (p, c))).collect();
        let running: BTreeMap<&str, &CloudInstance> =
            instances.iter().filter(|i| !i.terminated).map(|i| (i.provider_id.as_str(), i)).collect();
        let mut s = self.lock();
        let calm = s.calm_since;
        let over = |since: Timestamp, window: Duration| {
            now.as_millisecond() - since.as_millisecond() >= window.as_millis() as i64
        };
        // Instances no claim accounts for. One whose claim has not recorded an instance yet is
        // a launch in flight, not a leak (garbage collection leaves it alone too).
        let launching: BTreeSet<&str> = claims.iter().filter(|c| c.provider_id().is_none()).map(|c| c.name()).collect();
        let mut unclaimed = BTreeMap::new();
        for (pid, i) in &running {
            if claimed.contains_key(pid) || launching.contains(i.node_claim.as_str()) {
                continue;
            }
            let (since, from) = s.unclaimed_since.get(*pid).copied().unwrap_or((now, lists));
            unclaimed.insert(pid.to_string(), (since, from));
            s.max_leak = s.max_leak.max(lasted(since));
            let clean = periods.clean_periods_since(pid, from);
            if clean > CLEAN_PERIODS || calm.is_some_and(|c| over(since.max(c), leak_window)) {
                let detail = format!(
                    "instance {pid} ({}, launched for NodeClaim {} at {}s) has had no NodeClaim since {}s, \
                     through {clean} garbage collection period(s) that could have removed it",
                    i.instance_type,
                    i.node_claim,
                    secs(i.launched_at),
                    secs(since)
                );
                Self::report(&mut s, Kind::LeakedInstance, pid, now, detail);
            }
        }
        s.unclaimed_since = unclaimed;
        // Launched claims whose instance is gone.
        let mut orphans = BTreeMap::new();
        for (pid, c) in &claimed {
            if running.contains_key(pid) {
                continue;
            }
            let (since, from) = s.orphan_since.get(*pid).copied().unwrap_or((now, lists));
            orphans.insert(pid.to_string(), (since, from));
            s.max_orphan = s.max_orphan.max(lasted(since));
            // Garbage collection deletes a claim that is not being deleted already; one that is
            // goes with its termination (bounded by the window).
            let clean = if c.metadata.deletion_timestamp.is_some() {
                0
            } else {
                periods.clean_periods_since(pid, from).min(periods.clean_periods_since(c.name(), from))
            };
            if clean > CLEAN_PERIODS || calm.is_some_and(|c| over(since.max(c), leak_window)) {
                let detail = format!(
                    "NodeClaim {} names instance {pid}, which has not run since {}s, through {clean} garbage \
                     collection period(s) that could have deleted it",
                    c.name(),
                    secs(since)
                );
                Self::report(&mut s, Kind::OrphanNodeClaim, c.name(), now, detail);
            }
        }
        s.orphan_since = orphans;
        // Nodes tainted disrupted that nothing is deleting.
        let mut tainted = BTreeMap::new();
        for n in nodes.iter().filter(|n| disrupted(n) && n.metadata.deletion_timestamp.is_none()) {
            let claim = provider_id(n).and_then(|p| claimed.get(p));
            if claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some()) {
                continue;
            }
            let name = n.metadata.name.clone().unwrap_or_default();
            let since = s.tainted_since.get(&name).copied().unwrap_or(now);
            tainted.insert(name.clone(), since);
            if over(since, taint_window) {
                let detail = format!(
                    "node {name} has carried {} since {}s and is not being deleted",
                    labels::DISRUPTED_TAINT_KEY,
                    secs(since)
                );
                Self::report(&mut s, Kind::StuckDisruptedTaint, &name, now, detail);
            }
        }
        s.tainted_since = tainted;
    }

    /// Pods that are not running at the end of a settled run.
    pub fn check_pods(&self, cluster: &SimCluster, now: Timestamp) {
        let lost = pods_not_running(cluster);
        let mut s = self.lock();
        for (key, detail) in lost {
            Self::report(&mut s, Kind::LostPod, &key, now, detail);
        }
    }
}

/// Pods that are not running (bound to a Ready node, phase Running): key and why.
pub fn pods_not_running(cluster: &SimCluster) -> Vec<(String, String)> {
    let ready_nodes: BTreeSet<String> =
        cluster.list_objs::<Node>().into_iter().filter(ready).filter_map(|n| n.metadata.name).collect();
    let mut out = Vec::new();
    for p in cluster.list_objs::<SlimPod>().into_iter().filter(live) {
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let running = node.as_ref().is_some_and(|n| ready_nodes.contains(*n))
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if !running {
            let key = kerf_scheduling::pod::key(&p);
            let detail = match node {
                Some(n) => format!("pod {key} is bound to {n} but not running"),
                None => format!("pod {key} is pending"),
            };
            out.push((key, detail));
        }
    }
    out
}
