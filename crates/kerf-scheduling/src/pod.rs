//! What a pod asks of a node: resource requests, tolerations, node affinity, label selectors,
//! topology spread constraints, host ports and volumes — read from the core/v1 Pod.

use kerf_api::MetaView;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodAffinityTerm, Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kerf_api::SlimContainer;
use kerf_api::SlimPod;
use kerf_api::resources::PODS;
use kerf_api::slim_pod::PodView;
use kerf_api::{Quantity, ResourceList, Taint, TaintEffect};

use crate::requirements::{Requirement, Requirements};
pub use kerf_api::selector::selector_matches;

pub fn namespace(pod: &impl PodView) -> &str {
    pod.meta().namespace().unwrap_or("default")
}

pub fn name(pod: &impl PodView) -> &str {
    pod.meta().name().unwrap_or("")
}

/// `namespace/name`.
pub fn key(pod: &impl PodView) -> String {
    format!("{}/{}", namespace(pod), name(pod))
}

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();

pub fn labels(pod: &SlimPod) -> &BTreeMap<String, String> {
    pod.metadata.labels.as_deref().unwrap_or(&EMPTY_LABELS)
}

fn parse_list(m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, v) in m.into_iter().flatten() {
        // Unparseable quantities are rejected by the API server; count them as zero here.
        if let Ok(q) = Quantity::parse(&v.0) {
            out.set(k.clone(), q);
        }
    }
    out
}

/// A container's requests, defaulting each resource with only a limit to that limit (as the
/// API server does).
pub fn container_requests(c: &SlimContainer) -> ResourceList {
    let Some(r) = &c.resources else { return ResourceList::new() };
    let mut req = parse_list(r.requests.as_ref());
    for (k, v) in parse_list(r.limits.as_ref()).iter() {
        if !req.0.contains_key(k) {
            req.set(k.clone(), *v);
        }
    }
    req
}

/// What the pod needs from a node, as kube-scheduler computes it: the larger of the sum of its
/// containers (plus sidecar init containers) and the peak during init, plus the pod overhead,
/// plus one `pods`.
pub fn pod_requests(pod: &SlimPod) -> ResourceList {
    let mut total = ResourceList::new();
    let Some(spec) = &pod.spec else { return total.with(PODS, Quantity::from_units(1)) };
    for c in &spec.containers {
        total.add(&container_requests(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_peak.max_with(&sidecars);
        } else {
            init_peak.max_with(&r.plus(&sidecars));
        }
    }
    total.add(&sidecars);
    total.max_with(&init_peak);
    total.add(&parse_list(spec.overhead.as_ref()));
    total = total.without_zeros();
    total.set(PODS, Quantity::from_units(1));
    total
}

/// Whether `t` tolerates `taint` (kube's rules: empty key with Exists tolerates everything;
/// empty effect matches every effect; the operator defaults to Equal).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref()
        && !e.is_empty()
        && e != taint.effect.as_str()
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => !key.is_empty() && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

pub fn tolerations(pod: &SlimPod) -> &[Toleration] {
    pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[])
}

/// The first taint with a blocking effect (NoSchedule, NoExecute) the pod does not tolerate.
pub fn untolerated_taint<'a>(pod: &SlimPod, taints: &'a [Taint]) -> Option<&'a Taint> {
    untolerated_taint_with(tolerations(pod), taints, false)
}

/// The node a pending pod is nominated to (`status.nominatedNodeName`), if any.
pub fn nominated_node(pod: &SlimPod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.nominated_node_name()).filter(|n| !n.is_empty())
}

/// Whether the DaemonSet controller runs a pod of this template on a node with these name,
/// labels and taints: its node selector and required node affinity match and it tolerates the
/// node's NoSchedule and NoExecute taints.
pub fn daemon_runs_on(template: &SlimPod, node: &str, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
    let terms = required_node_terms(template);
    let fields = required_node_name_fields(template);
    let affinity_ok = terms.is_empty()
        || terms
            .iter()
            .enumerate()
            .any(|(i, t)| t.matches(labels) && fields.get(i).and_then(Option::as_ref).is_none_or(|f| f.has(node)));
    affinity_ok && untolerated_taint(template, taints).is_none()
}

/// The first taint the tolerations do not tolerate; PreferNoSchedule counts only when
/// `include_prefer` (the last relaxation step tolerates those).
pub fn untolerated_taint_with<'a>(tols: &[Toleration], taints: &'a [Taint], include_prefer: bool) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        (include_prefer || taint.effect != TaintEffect::PreferNoSchedule) && !tols.iter().any(|t| tolerates(t, taint))
    })
}

/// kube-scheduler's wording for an untolerated taint: `{key: value}`.
pub fn taint_message(taint: &Taint) -> String {
    format!("{{{}: {}}}", taint.key, taint.value.as_deref().unwrap_or(""))
}

/// The pod's required node constraints: `nodeSelector` intersected into each term of its
/// required node affinity (the terms are alternatives). Always at least one entry.
pub fn required_node_terms(pod: &SlimPod) -> Vec<Requirements> {
    let Some(spec) = &pod.spec else { return vec![Requirements::new()] };
    let base = spec.node_selector.as_ref().map(Requirements::from_labels).unwrap_or_default();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|s| s.node_selector_terms.as_slice());
    match terms {
        None => vec![base],
        Some(terms) => {
            let out: Vec<Requirements> = terms
                .iter()
                .map(|t| {
                    let mut r = base.clone();
                    if t.match_expressions.as_ref().is_none_or(Vec::is_empty)
                        && t.match_fields.as_ref().is_none_or(Vec::is_empty)
                    {
                        // An empty term matches no node.
                        r.add(NO_NODE_KEY, Requirement::new::<&str>(kerf_api::Operator::In, &[]));
                    }
                    r.add_all(&Requirements::from_node_selector_term(t));
                    r
                })
                .collect();
            if out.is_empty() {
                let mut r = base;
                r.add(NO_NODE_KEY, Requirement::new::<&str>(kerf_api::Operator::In, &[]));
                vec![r]
            } else {
                out
            }
        }
    }
}

/// A key used to mark a term that matches no node (an empty node selector term).
pub const NO_NODE_KEY: &str = "kerf.internal/no-node";

/// `matchFields` node names of each required term (`metadata.name In [...]`), `None` when a
/// term has none. Same order as [`required_node_terms`].
pub fn required_node_name_fields(pod: &SlimPod) -> Vec<Option<Requirement>> {
    let terms = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|s| s.node_selector_terms.as_slice())
        .unwrap_or(&[]);
    terms
        .iter()
        .map(|t| {
            let mut acc: Option<Requirement> = None;
            for f in t.match_fields.iter().flatten() {
                let r = if f.key == "metadata.name" {
                    crate::requirements::requirement_from_core(f)
                } else {
                    Requirement::new::<&str>(kerf_api::Operator::In, &[])
                };
                acc = Some(match acc {
                    Some(a) => a.intersect(&r),
                    None => r,
                });
            }
            acc
        })
        .collect()
}

/// Preferred node affinity terms with their weights, heaviest first (stable by position).
pub fn preferred_node_terms(pod: &SlimPod) -> Vec<(i32, Requirements)> {
    let mut out: Vec<(i32, Requirements)> = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_ref())
        .into_iter()
        .flatten()
        .map(|p| (p.weight, Requirements::from_node_selector_term(&p.preference)))
        .collect();
    out.sort_by_key(|(w, _)| std::cmp::Reverse(*w));
    out
}

/// A selector with `key In [pod's value]` added for each of `keys` the pod has (matchLabelKeys),
/// or `NotIn` when `negate` (mismatchLabelKeys).
pub fn selector_with_label_keys(
    sel: Option<&LabelSelector>,
    keys: Option<&Vec<String>>,
    mismatch: Option<&Vec<String>>,
    pod_labels: &BTreeMap<String, String>,
) -> Option<LabelSelector> {
    let mut sel = sel?.clone();
    let mut add = |k: &String, op: &str| {
        if let Some(v) = pod_labels.get(k) {
            sel.match_expressions.get_or_insert_with(Vec::new).push(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: k.clone(),
                    operator: op.to_string(),
                    values: Some(vec![v.clone()]),
                },
            );
        }
    };
    for k in keys.into_iter().flatten() {
        add(k, "In");
    }
    for k in mismatch.into_iter().flatten() {
        add(k, "NotIn");
    }
    Some(sel)
}

/// A topology spread constraint, resolved against its pod.
#[derive(Debug, Clone, PartialEq)]
pub struct SpreadConstraint {
    pub topology_key: String,
    pub max_skew: i32,
    /// DoNotSchedule (true) or ScheduleAnyway.
    pub hard: bool,
    pub min_domains: Option<i32>,
    /// nodeAffinityPolicy Honor (default): only nodes matching the pod's node affinity count.
    pub honor_node_affinity: bool,
    /// nodeTaintsPolicy Honor: only nodes whose taints the pod tolerates count (default Ignore).
    pub honor_node_taints: bool,
    /// The label selector with matchLabelKeys folded in; `None` matches no pod.
    pub selector: Option<LabelSelector>,
    pub namespace: String,
}

impl SpreadConstraint {
    pub fn from_core(c: &TopologySpreadConstraint, pod: &SlimPod) -> Self {
        SpreadConstraint {
            topology_key: c.topology_key.clone(),
            max_skew: c.max_skew.max(1),
            hard: c.when_unsatisfiable != "ScheduleAnyway",
            min_domains: c.min_domains.filter(|_| c.when_unsatisfiable != "ScheduleAnyway"),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            selector: selector_with_label_keys(
                c.label_selector.as_ref(),
                c.match_label_keys.as_ref(),
                None,
                labels(pod),
            ),
            namespace: namespace(pod).to_string(),
        }
    }

    /// Whether `other` counts toward this constraint.
    pub fn counts(&self, other: &SlimPod) -> bool {
        namespace(other) == self.namespace && selector_matches(self.selector.as_ref(), labels(other))
    }
}

pub fn spread_constraints(pod: &SlimPod) -> Vec<SpreadConstraint> {
    pod.spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .into_iter()
        .flatten()
        .map(|c| SpreadConstraint::from_core(c, pod))
        .collect()
}

/// Which namespaces a pod affinity term covers.
#[derive(Debug, Clone, PartialEq)]
pub enum Namespaces {
    /// Listed namespaces, plus those whose labels match the selector (if any).
    Some { names: Vec<String>, selector: Option<LabelSelector> },
    /// An empty namespaceSelector: every namespace.
    All,
}

/// A pod (anti-)affinity term resolved against its pod.
#[derive(Debug, Clone, PartialEq)]
pub struct AffinityTerm {
    pub topology_key: String,
    pub selector: Option<LabelSelector>,
    pub namespaces: Namespaces,
    /// For preferred terms; 0 for required ones.
    pub weight: i32,
}

impl AffinityTerm {
    pub fn from_core(t: &PodAffinityTerm, pod: &SlimPod, weight: i32) -> Self {
        let namespaces = match &t.namespace_selector {
            Some(sel)
                if sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                    && sel.match_expressions.as_ref().is_none_or(Vec::is_empty) =>
            {
                Namespaces::All
            }
            sel => {
                let mut names: Vec<String> = t.namespaces.clone().unwrap_or_default();
                if names.is_empty() && sel.is_none() {
                    names.push(namespace(pod).to_string());
                }
                Namespaces::Some { names, selector: sel.clone() }
            }
        };
        AffinityTerm {
            topology_key: t.topology_key.clone(),
            selector: selector_with_label_keys(
                t.label_selector.as_ref(),
                t.match_label_keys.as_ref(),
                t.mismatch_label_keys.as_ref(),
                labels(pod),
            ),
            namespaces,
            weight,
        }
    }

    /// Whether `other` is a pod this term refers to. `namespace_labels` gives the labels of each
    /// namespace (for namespaceSelector).
    pub fn matches(&self, other: &SlimPod, namespace_labels: &BTreeMap<String, BTreeMap<String, String>>) -> bool {
        let ns = namespace(other);
        let ns_ok = match &self.namespaces {
            Namespaces::All => true,
            Namespaces::Some { names, selector } => {
                names.iter().any(|n| n == ns)
                    || selector
                        .as_ref()
                        .is_some_and(|s| selector_matches(Some(s), namespace_labels.get(ns).unwrap_or(&EMPTY_LABELS)))
            }
        };
        ns_ok && selector_matches(self.selector.as_ref(), labels(other))
    }
}

/// The pod's affinity terms: (required affinity, required anti-affinity, preferred affinity,
/// preferred anti-affinity).
#[derive(Debug, Clone, Default)]
pub struct PodAffinities {
    pub required: Vec<AffinityTerm>,
    pub required_anti: Vec<AffinityTerm>,
    pub preferred: Vec<AffinityTerm>,
    pub preferred_anti: Vec<AffinityTerm>,
}

impl PodAffinities {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty()
            && self.required_anti.is_empty()
            && self.preferred.is_empty()
            && self.preferred_anti.is_empty()
    }
}

pub fn pod_affinities(pod: &SlimPod) -> PodAffinities {
    let mut out = PodAffinities::default();
    let Some(aff) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else { return out };
    if let Some(a) = &aff.pod_affinity {
        for t in a.required_during_scheduling_ignored_during_execution.iter().flatten() {
            out.required.push(AffinityTerm::from_core(t, pod, 0));
        }
        for w in a.preferred_during_scheduling_ignored_during_execution.iter().flatten() {
            out.preferred.push(AffinityTerm::from_core(&w.pod_affinity_term, pod, w.weight));
        }
    }
    if let Some(a) = &aff.pod_anti_affinity {
        for t in a.required_during_scheduling_ignored_during_execution.iter().flatten() {
            out.required_anti.push(AffinityTerm::from_core(t, pod, 0));
        }
        for w in a.preferred_during_scheduling_ignored_during_execution.iter().flatten() {
            out.preferred_anti.push(AffinityTerm::from_core(&w.pod_affinity_term, pod, w.weight));
        }
    }
    out
}

/// Whether the pod has required anti-affinity terms (existing pods with them constrain others).
pub fn has_required_anti_affinity(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .is_some_and(|t| !t.is_empty())
}

/// Required spread (DoNotSchedule) or required pod (anti-)affinity: what makes kube-scheduler's
/// filter verdicts for the pod depend on pods on other nodes (preferred terms only change
/// scores; existing pods' required anti-affinity is the other way round and not looked at here).
pub fn has_required_inter_pod_constraints(pod: &SlimPod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    spec.topology_spread_constraints
        .as_ref()
        .is_some_and(|c| c.iter().any(|c| c.when_unsatisfiable != "ScheduleAnyway"))
        || has_required_anti_affinity(pod)
        || spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_ref())
            .is_some_and(|t| !t.is_empty())
}

/// A host port the pod binds: (host IP, protocol, port); IP `0.0.0.0` stands for all.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

pub fn host_ports(pod: &SlimPod) -> Vec<HostPort> {
    let Some(spec) = &pod.spec else { return Vec::new() };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always")))
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            let ip = p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".to_string());
            Some(HostPort { ip, protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()), port })
        })
        .collect()
}

/// The PersistentVolumeClaims the pod mounts, as `namespace/claim` (generic ephemeral volumes
/// get the claim `<pod>-<volume>`).
pub fn volume_claims(pod: &SlimPod) -> Vec<String> {
    let ns = namespace(pod);
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(format!("{ns}/{}", c.claim_name))
            } else if v.ephemeral.is_some() {
                Some(format!("{ns}/{}-{}", name(pod), v.name))
            } else {
                None
            }
        })
        .collect()
}

/// The pod's owner as `Kind/name`, or `""`.
pub fn owner(pod: &SlimPod) -> String {
    pod.metadata
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .or_else(|| pod.metadata.owner_references().iter().next())
        .map(|o| format!("{}/{}", o.kind, o.name))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;
    use kerf_api::{PodShape, SlimPodSpec};

    fn container(cpu: &str, restart: Option<&str>) -> SlimContainer {
        SlimContainer {
            name: "c".into(),
            restart_policy: restart.map(str::to_string),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), KQ(cpu.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn init_containers_count_at_their_peak_and_sidecars_add_up() {
        let pod = SlimPod {
            spec: Some(SlimPodSpec::from(PodShape {
                containers: vec![container("1", None), container("500m", None)],
                init_containers: Some(vec![container("200m", Some("Always")), container("2", None)]),
                overhead: Some([("cpu".to_string(), KQ("100m".into()))].into()),
                ..Default::default()
            })),
            ..Default::default()
        };
        // containers 1.5 + sidecar 0.2 = 1.7; init peak 2 + 0.2 = 2.2; plus overhead 0.1.
        let r = pod_requests(&pod);
        assert_eq!(r.get("cpu"), Quantity::parse("2300m").unwrap());
        assert_eq!(r.get("pods"), Quantity::from_units(1));
    }

    #[test]
    fn limits_default_requests() {
        let mut c = container("1", None);
        c.resources.as_mut().unwrap().limits = Some([("memory".to_string(), KQ("1Gi".into()))].into());
        assert_eq!(container_requests(&c).get("memory"), Quantity::parse("1Gi").unwrap());
    }

    #[test]
    fn toleration_rules() {
        let taint = Taint::new("dedicated", Some("gpu"), TaintEffect::NoSchedule);
        let t = |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| Toleration {
            key: key.map(str::to_string),
            operator: op.map(str::to_string),
            value: value.map(str::to_string),
            effect: effect.map(str::to_string),
            toleration_seconds: None,
        };
        assert!(tolerates(&t(Some("dedicated"), None, Some("gpu"), None), &taint));
        assert!(!tolerates(&t(Some("dedicated"), None, Some("cpu"), None), &taint));
        assert!(tolerates(&t(Some("dedicated"), Some("Exists"), None, Some("NoSchedule")), &taint));
        assert!(!tolerates(&t(Some("dedicated"), Some("Exists"), None, Some("NoExecute")), &taint));
        assert!(tolerates(&t(None, Some("Exists"), None, None), &taint));
    }
}
