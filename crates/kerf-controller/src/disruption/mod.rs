//! The disruption controller: removes and replaces managed nodes, one method at a time in
//! Karpenter's order — repair (with the `NodeRepair` gate; a reboot first with `RebootForRepair`), emptiness, static drift, drift, kerf's `Unfit`, multi-node consolidation,
//! single-node consolidation — plus expiration (forceful: budgets and do-not-disrupt do not hold it back).
//!
//! A command taints its nodes `karpenter.sh/disrupted:NoSchedule`, launches its replacements,
//! waits until every replacement is initialized (pre-spin), then deletes the nodes' claims; the
//! termination controller drains them. Consolidation commands wait a validation delay first and
//! are checked again before they act (one validates at a time). Commands on disjoint nodes run
//! side by side, as Karpenter's orchestration queue runs them: each is decided and validated on
//! the cluster as the running ones will leave it ([`in_flight`]), within budgets that count
//! their nodes. A decision is taken only once the cluster has settled (no pod waiting for
//! kube-scheduler or a launch), so it never races the provisioner. Every managed node that is
//! not disrupted gets the reason in [`Disruption::blocked`] and a `DisruptionBlocked` event.

pub mod balanced;
pub mod candidates;
pub mod consolidation;
pub mod cost;
pub mod counts;
mod forced;
mod in_flight;
mod interruption;
mod methods;
mod observe;
mod orchestration;
mod prepared;
mod repair;
pub mod reversals;
#[cfg(test)]
mod reversals_tests;
mod terminate_first;
mod unwatched;
#[cfg(test)]
mod unwatched_tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kerf_cloud::Timestamp;
use kerf_scheduling::NewNodeClaim;

pub use candidates::{Candidate, LAUNCH_REGRET_GUARD};
pub use repair::{REBOOT_WINDOW, RepairAction, RepairRecord};

/// How long a consolidation decision waits before it is checked again and carried out
/// (Karpenter: 15 s).
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);

/// Single-node consolidation tries at most this many candidates per pass, continuing where the
/// previous pass stopped (Karpenter bounds it by time; a count keeps the simulator
/// deterministic). Nodes not tried keep the reason they were last given.
pub const SINGLE_NODE_MAX_EVALUATIONS: usize = 50;

/// How soon disruption looks again while single-node consolidation has candidates it has not
/// tried since the cluster last changed (Karpenter polls every 10 s).
pub const SWEEP_CONTINUE: Duration = Duration::from_secs(10);

/// With nothing changing, disruption compares this often what changes without a watch event
/// (offerings, budget windows; see `unwatched`) with what its last evaluation saw, and
/// evaluates again only if it differs.
pub const IDLE_REEVALUATE: Duration = Duration::from_secs(5 * 60);

/// Why a node was disrupted, as the report and the `DisruptionReason` condition name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Empty,
    Underutilized,
    Drifted,
    Expired,
    Interrupted,
    /// Node repair: a node condition stayed unhealthy past the cloud's repair policy.
    Unhealthy,
    /// kerf: a DaemonSet pod that must run on the node cannot fit there.
    Unfit,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Empty => "Empty",
            Reason::Underutilized => "Underutilized",
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
            Reason::Interrupted => "Interrupted",
            Reason::Unhealthy => "Unhealthy",
            Reason::Unfit => "Unfit",
        }
    }

    /// As metric labels name it (snake case).
    pub fn metric_name(self) -> &'static str {
        match self {
            Reason::Empty => "empty",
            Reason::Underutilized => "underutilized",
            Reason::Drifted => "drifted",
            Reason::Expired => "expired",
            Reason::Interrupted => "interrupted",
            Reason::Unhealthy => "unhealthy",
            Reason::Unfit => "unfit",
        }
    }

    /// Forceful reasons go ahead whatever budgets, do-not-disrupt or a failed launch say.
    pub fn is_forceful(self) -> bool {
        matches!(self, Reason::Expired | Reason::Interrupted)
    }
}

/// One node kerf disrupted.
#[derive(Debug, Clone, PartialEq)]
pub struct DisruptionRecord {
    pub node_claim: String,
    pub node: Option<String>,
    pub node_pool: Option<String>,
    pub instance_type: Option<String>,
    pub reason: Reason,
    /// Why, in words.
    pub detail: String,
    /// NodeClaims launched to replace it.
    pub replacements: Vec<String>,
    /// When the decision was taken (the node tainted).
    pub decided_at: Timestamp,
    /// The Balanced score of the consolidation, when its pool is Balanced.
    pub score: Option<f64>,
}

/// A decision: which nodes go, why, and what replaces them.
#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub reason: Reason,
    pub candidates: Vec<Candidate>,
    pub replacements: Vec<NewNodeClaim>,
    pub detail: String,
    /// $/h saved (consolidation), 0 otherwise.
    pub savings: f64,
    /// The Balanced score that let a consolidation go ahead (its lowest over the Balanced pools
    /// it touches); `None` when no pool it touches is Balanced.
    pub score: Option<f64>,
    /// A consolidation's score in each pool it touches as if the pool were Balanced (what
    /// Balanced would have decided; see `balanced`), set when it is validated. Empty for other
    /// commands.
    pub balanced_what_if: Vec<balanced::Score>,
    /// Where the candidates' pods are expected to go (later decisions count them there while
    /// the command runs).
    pub moves: Vec<(crate::state::ObjectKey, in_flight::Destination)>,
}

impl Command {
    /// A command that saves nothing by itself and is not scored (drift, repair, expiration,
    /// interruption), or whose savings its caller sets (emptiness, consolidation).
    pub(crate) fn new(
        reason: Reason,
        candidates: Vec<Candidate>,
        replacements: Vec<NewNodeClaim>,
        detail: String,
        moves: Vec<(crate::state::ObjectKey, in_flight::Destination)>,
    ) -> Self {
        Command {
            reason,
            candidates,
            replacements,
            detail,
            savings: 0.0,
            score: None,
            balanced_what_if: Vec::new(),
            moves,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Waiting for these replacement claims to be initialized.
    Launching(Vec<String>),
    /// The candidates' claims are deleted; waiting for them to be gone.
    Terminating(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
struct Running {
    reason: Reason,
    /// (claim, node) of each candidate.
    candidates: Vec<(String, String)>,
    phase: Phase,
    waiting_reported: bool,
    /// Pod → the node or replacement claim the command moves it to.
    moves: Vec<(crate::state::ObjectKey, String)>,
    /// Per candidate: its metric labels and its reschedulable pods when the command took it.
    counted: Vec<(counts::DisruptionLabels, usize)>,
}

/// The disruption controller's memory between passes.
#[derive(Debug, Default)]
pub struct Disruption {
    pub(crate) records: Vec<DisruptionRecord>,
    /// The nodes node repair rebooted or replaced, in order.
    pub(crate) repairs: Vec<RepairRecord>,
    pub(crate) blocked: BTreeMap<String, String>,
    running: Vec<Running>,
    validating: Option<(Command, Timestamp)>,
    /// The watch generation at which drift was last asked whether it pre-empts a consolidation
    /// waiting out its validation.
    drift_checked: Option<u64>,
    /// What held the last pass's evaluation back, if anything (logged when it changes).
    holding: Option<String>,
    /// The watch generation the last evaluation saw.
    evaluated: Option<u64>,
    next_evaluation: Option<Timestamp>,
    /// When the inputs no watch announces are compared next, and their fingerprint at the last
    /// evaluation (see `unwatched`).
    next_check: Option<Timestamp>,
    unwatched: Option<u64>,
    /// How many evaluations ran (a settled cluster should add none).
    pub(crate) evaluations: u64,
    /// Replacement claims of running commands: not candidates, not "in flight" for gating.
    reserved: BTreeSet<String>,
    /// Where single-node consolidation continues in its candidate list.
    single_cursor: usize,
    /// Single-node candidates tried without a command since the watch generation and the
    /// candidate list (a hash of its nodes) named here: while fewer than all of them, the sweep
    /// continues at [`SWEEP_CONTINUE`], not at [`IDLE_REEVALUATE`]. A node that becomes a
    /// candidate without a watch event (its consolidateAfter or launch guard ran out) starts
    /// the sweep again, so it is tried.
    single_swept: (u64, u64, usize),
    /// Node → when a pod last bound to it or left it (consolidateAfter counts from it).
    pub(crate) last_pod_event: BTreeMap<String, Timestamp>,
    /// Nodes with a pod event seen since the last reconcile (stamped with its `now`).
    pub(crate) pod_event_nodes: BTreeSet<String>,
    /// When the workload last shrank: a bound pod deleted other than by a disruption (a scale
    /// down, a rollout, a finished job). A node is kept from consolidation for a while after
    /// its launch unless the workload shrank since (see `candidates`).
    pub(crate) workload_shrank_at: Option<Timestamp>,
    /// A shrink seen since the last reconcile (stamped with its `now`).
    pub(crate) workload_shrank: bool,
    /// Bumped on every watch event that may change a disruption decision.
    pub(crate) generation: u64,
    /// The consolidation moves weighed so far, and their Balanced scores (for the metrics).
    pub(crate) consolidation_moves: balanced::MoveCounts,
    /// The consolidations taken, and what Balanced would have decided of each, by pool.
    pub(crate) balanced_what_if: balanced::WhatIfCounts,
    /// Nodes and pods disrupted, for the metrics.
    pub(crate) counts: counts::DisruptionCounts,
    /// Consolidations watched for being undone, and the NodePools held back after one was.
    pub(crate) reversals: reversals::Reversals,
    /// The last evaluation's scheduling inputs, while another evaluation is due soon (see
    /// `prepared`).
    prepared: Option<prepared::Prepared>,
    /// kube-scheduler's views of the last inputs dropped, while commands run (see `prepared`).
    kept_views: prepared::KeptViews,
}
