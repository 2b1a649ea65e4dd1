//! The one node-fit check: does a pod fit an existing node, and if not, why — in kube-scheduler's
//! filter order and words.
//!
//! The provisioning Scheduler (for existing nodes and in-flight claims, and for its
//! explanations) and [`ClusterView`](crate::ClusterView) (the simulator's kube-scheduler) keep
//! the pod and the node in different shapes — dense vectors and interned counters on one side,
//! resource lists and per-pod prepared counts on the other — so each answers the questions of
//! [`FitQuery`] from its own state, with the predicates of this module. [`check`] alone decides
//! which questions are asked, in which order, and what a failure is called.

use std::fmt;

use kerf_api::Taint;

use crate::pod::{self, HostPort};
use crate::requirements::{Requirement, Requirements};

pub const UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const NODE_NAME: &str = "node(s) didn't match the requested node name";
pub const NODE_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
pub const HOST_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
pub const VOLUME_ZONE: &str = "node(s) had volume node affinity conflict";
pub const SPREAD: &str = "node(s) didn't match pod topology spread constraints";
pub const SPREAD_MISSING_LABEL: &str = "node(s) didn't match pod topology spread constraints (missing required label)";
pub const POD_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const POD_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

/// Why a pod does not fit a node, in kube-scheduler's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    pub reason: String,
}

impl Unfit {
    pub fn new(reason: impl Into<String>) -> Self {
        Unfit { reason: reason.into() }
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Which filter failed: cheap to return from the hot path; [`describe`] turns it into words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Unschedulable,
    NodeName,
    /// The node's taint at this index is not tolerated.
    Taint(usize),
    NodeAffinity,
    HostPorts,
    /// The resource at this index (the caller's numbering) is short.
    Resource(usize),
    VolumeZone,
    SpreadMissingLabel,
    /// The spread constraint at this index (the caller's numbering) would exceed its skew.
    Spread(usize),
    ExistingAntiAffinity,
    PodAntiAffinity,
    PodAffinity,
}

/// The questions the fit check asks about one pod and one node. Each is answered from the
/// caller's own state with this module's predicates.
pub trait FitQuery {
    fn schedulable(&mut self) -> bool;
    fn node_name_matches(&mut self) -> bool;
    /// The index of the first node taint the pod does not tolerate.
    fn untolerated_taint(&mut self) -> Option<usize>;
    fn node_affinity_matches(&mut self) -> bool;
    fn host_ports_free(&mut self) -> bool;
    /// The index of the first resource the node lacks for the pod.
    fn short_resource(&mut self) -> Option<usize>;
    fn volumes_match(&mut self) -> bool;
    /// `Err(Why::SpreadMissingLabel)` or `Err(Why::Spread(i))` when a hard spread constraint fails.
    fn spread(&mut self) -> Result<(), Why>;
    fn existing_anti_affinity_ok(&mut self) -> bool;
    fn anti_affinity_ok(&mut self) -> bool;
    fn affinity_ok(&mut self) -> bool;

    /// Words for a failure (the node's taint, the resource's name, spread counts).
    fn taint(&self, i: usize) -> Option<&Taint>;
    fn resource_name(&self, i: usize) -> &str;
    fn spread_detail(&self, _i: usize) -> Option<String> {
        None
    }
}

/// Every filter, in kube-scheduler's order; the first that fails says why.
pub fn check(q: &mut impl FitQuery) -> Result<(), Why> {
    check_node(q)?;
    check_inter_pod(q)
}

/// The filters [`check`] runs first, which read only the pod and the node itself (its name,
/// labels, taints, host ports and free resources): their verdict on a node changes only when
/// that node or its pods do.
pub fn check_node(q: &mut impl FitQuery) -> Result<(), Why> {
    if !q.schedulable() {
        return Err(Why::Unschedulable);
    }
    if !q.node_name_matches() {
        return Err(Why::NodeName);
    }
    if let Some(t) = q.untolerated_taint() {
        return Err(Why::Taint(t));
    }
    if !q.node_affinity_matches() {
        return Err(Why::NodeAffinity);
    }
    if !q.host_ports_free() {
        return Err(Why::HostPorts);
    }
    if let Some(r) = q.short_resource() {
        return Err(Why::Resource(r));
    }
    if !q.volumes_match() {
        return Err(Why::VolumeZone);
    }
    Ok(())
}

/// The filters of [`check_node`] that read the node's pods (host ports, free resources). On a
/// node that passed [`check_node`] for a pod and has only gained pods since, [`check_node`]
/// passes exactly when these do: the others read the pod and the node alone.
pub fn check_room(q: &mut impl FitQuery) -> Result<(), Why> {
    if !q.host_ports_free() {
        return Err(Why::HostPorts);
    }
    if let Some(r) = q.short_resource() {
        return Err(Why::Resource(r));
    }
    Ok(())
}

/// The filters [`check`] runs last, which read the pods of other nodes too (topology spread and
/// pod (anti-)affinity, the pod's own and the existing pods').
pub fn check_inter_pod(q: &mut impl FitQuery) -> Result<(), Why> {
    q.spread()?;
    if !q.existing_anti_affinity_ok() {
        return Err(Why::ExistingAntiAffinity);
    }
    if !q.anti_affinity_ok() {
        return Err(Why::PodAntiAffinity);
    }
    if !q.affinity_ok() {
        return Err(Why::PodAffinity);
    }
    Ok(())
}

/// A failure in kube-scheduler's words.
pub fn describe(q: &impl FitQuery, why: Why) -> Unfit {
    Unfit::new(match why {
        Why::Unschedulable => UNSCHEDULABLE.to_string(),
        Why::NodeName => NODE_NAME.to_string(),
        Why::Taint(i) => match q.taint(i) {
            Some(t) => format!("node(s) had untolerated taint {}", pod::taint_message(t)),
            None => "node(s) had untolerated taint".to_string(),
        },
        Why::NodeAffinity => NODE_AFFINITY.to_string(),
        Why::HostPorts => HOST_PORTS.to_string(),
        Why::Resource(i) => match q.resource_name(i) {
            kerf_api::resources::PODS => "Too many pods".to_string(),
            kerf_api::resources::ATTACHABLE_VOLUMES_EBS => crate::volume_limits::MAX_VOLUME_COUNT.to_string(),
            name => format!("Insufficient {name}"),
        },
        Why::VolumeZone => VOLUME_ZONE.to_string(),
        Why::SpreadMissingLabel => SPREAD_MISSING_LABEL.to_string(),
        Why::Spread(i) => match q.spread_detail(i) {
            Some(d) => format!("{SPREAD} ({d})"),
            None => SPREAD.to_string(),
        },
        Why::ExistingAntiAffinity => EXISTING_ANTI_AFFINITY.to_string(),
        Why::PodAntiAffinity => POD_ANTI_AFFINITY.to_string(),
        Why::PodAffinity => POD_AFFINITY.to_string(),
    })
}

// ---------------------------------------------------------------------------------------------
// The predicates

/// Whether the node (`name`, `labels`) matches one of the pod's required node affinity terms
/// (alternatives), each with its `matchFields` node names.
pub fn node_affinity_matches(
    terms: &[Requirements],
    name_fields: &[Option<Requirement>],
    name: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    terms
        .iter()
        .enumerate()
        .any(|(i, t)| t.matches(labels) && name_fields.get(i).and_then(Option::as_ref).is_none_or(|f| f.has(name)))
}

/// Whether every volume's topology (alternatives each) allows the node's labels.
pub fn volumes_match(volume_terms: &[Vec<Requirements>], labels: &std::collections::BTreeMap<String, String>) -> bool {
    volume_terms.iter().all(|alts| alts.iter().any(|r| r.matches(labels)))
}

/// Whether none of the pod's host ports is taken on the node.
pub fn host_ports_free(pod: &[HostPort], node: &[HostPort]) -> bool {
    pod.iter().all(|a| node.iter().all(|b| !a.conflicts(b)))
}

/// The first resource (index into the rows) whose request does not fit: a request above zero
/// with `used + request > allocatable`.
pub fn short_resource<T: Copy + PartialOrd + std::ops::Add<Output = T> + Default>(
    rows: impl IntoIterator<Item = (T, T, T)>,
) -> Option<usize> {
    rows.into_iter().position(|(request, used, allocatable)| request > T::default() && used + request > allocatable)
}

/// Whether placing a pod in a domain with `count` matching pods keeps the skew within
/// `max_skew` over the least-loaded domain (`min`).
pub fn spread_skew_ok(count: i64, self_match: i64, min: i64, max_skew: i64) -> bool {
    count + self_match - min <= max_skew
}

/// Required pod affinity: every term's topology key must be on the node; then the node's
/// domains must hold matching pods, unless none exist anywhere and the pod matches its own
/// terms (the first of its kind may go anywhere).
pub fn pod_affinity_ok(keys_present: bool, pods_in_domains: bool, none_anywhere: bool, matches_own: bool) -> bool {
    keys_present && (pods_in_domains || (none_anywhere && matches_own))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_resource_names_the_first_request_that_does_not_fit_and_skips_zero_requests() {
        assert_eq!(short_resource([(0i64, 9, 1), (2, 1, 4), (3, 2, 4)]), Some(2));
        assert_eq!(short_resource([(1i64, 0, 1)]), None);
    }

    #[test]
    fn spread_skew_counts_the_pod_itself() {
        assert!(spread_skew_ok(1, 1, 1, 1));
        assert!(!spread_skew_ok(1, 1, 0, 1));
        assert!(spread_skew_ok(1, 0, 0, 1));
    }

    #[test]
    fn first_of_its_kind_affinity_needs_its_own_match_and_every_key() {
        assert!(pod_affinity_ok(true, false, true, true));
        assert!(!pod_affinity_ok(true, false, true, false));
        assert!(!pod_affinity_ok(false, true, false, true));
        assert!(!pod_affinity_ok(true, false, false, true));
    }
}
