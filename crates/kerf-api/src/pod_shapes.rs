//! One copy of each distinct pod shape (a [`PodShape`]: a pod's spec less its node name).
//!
//! The replicas of a Deployment, a StatefulSet or a Job are made from one template, so a
//! cluster of tens of thousands of pods has tens or hundreds of shapes, and every version of every pod the
//! controllers keep would otherwise carry its own copy: containers, their request and limit
//! maps, affinity, tolerations, topology spread. Shapes are handed out shared from a
//! process-wide table, found by a fingerprint (requests, selectors, affinity terms) and
//! confirmed equal field by field; the table holds them weakly, so a shape no pod has any more is freed and its entry
//! swept.
//!
//! A whole `PodSpec` is matched against the table without being copied first
//! ([`shared_from`]): a pod that changes status keeps its shape at the cost of a comparison.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::{
    Affinity, Container, PodSpec, ResourceRequirements, TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::slim_pod::{PodShape, SlimContainer, SlimVolume, volume_binds_claim};
use crate::weak_table::WeakTable;

/// The shape `shape` is equal to, shared.
pub fn shared(shape: PodShape) -> Arc<PodShape> {
    TABLE.share(shape_print(&shape), shape)
}

/// The shape of `spec`, shared: copied from `spec` only when no pod has it yet.
pub fn shared_from(spec: &PodSpec) -> Arc<PodShape> {
    TABLE.share_with(spec_print(spec), |s| is_shape_of(s, spec), || PodShape::from(spec))
}

static TABLE: LazyLock<WeakTable<PodShape>> = LazyLock::new(WeakTable::new);

/// The fingerprint of a [`PodShape`] or a `PodSpec`: the fields it reads have the same names
/// and types in both.
macro_rules! print_of {
    ($s:expr) => {
        fingerprint(
            $s.containers.iter().map(|c| (c.name.as_str(), c.resources.as_ref())),
            Told {
                priority: $s.priority,
                init_containers: $s.init_containers.as_ref().map_or(0, Vec::len),
                node_selector: $s.node_selector.as_ref(),
                affinity: $s.affinity.as_ref(),
                spread: $s.topology_spread_constraints.as_deref(),
            },
        )
    };
}

fn shape_print(shape: &PodShape) -> u64 {
    print_of!(shape)
}

fn spec_print(spec: &PodSpec) -> u64 {
    print_of!(spec)
}

/// What besides the containers tells shapes apart in the fingerprint.
struct Told<'a> {
    priority: Option<i32>,
    init_containers: usize,
    node_selector: Option<&'a BTreeMap<String, String>>,
    affinity: Option<&'a Affinity>,
    spread: Option<&'a [TopologySpreadConstraint]>,
}

/// What tells shapes apart cheaply: the containers' names and requests, the priority, the
/// number of init containers, the node selector, the required node affinity (a DaemonSet's
/// pods differ only in the node it names), and the label selectors and topology keys of pod
/// (anti-)affinity and topology spread (the workloads of one namespace often differ only
/// there: one copy of a chart per app). Equal shapes have equal fingerprints, whichever form
/// they are read from; unequal ones that collide are told apart by comparison.
fn fingerprint<'a>(
    containers: impl Iterator<Item = (&'a str, Option<&'a ResourceRequirements>)>,
    told: Told<'_>,
) -> u64 {
    let mut h = DefaultHasher::new();
    for (name, resources) in containers {
        name.hash(&mut h);
        for (resource, q) in resources.and_then(|r| r.requests.as_ref()).into_iter().flatten() {
            resource.hash(&mut h);
            q.0.hash(&mut h);
        }
    }
    told.priority.hash(&mut h);
    told.init_containers.hash(&mut h);
    told.node_selector.hash(&mut h);
    let pod_terms = told.affinity.into_iter().flat_map(|a| {
        let (affinity, anti) = (a.pod_affinity.as_ref(), a.pod_anti_affinity.as_ref());
        let required = affinity
            .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_ref())
            .into_iter()
            .chain(anti.and_then(|p| p.required_during_scheduling_ignored_during_execution.as_ref()))
            .flatten();
        let preferred = affinity
            .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref())
            .into_iter()
            .chain(anti.and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref()))
            .flatten()
            .map(|w| &w.pod_affinity_term);
        required.chain(preferred)
    });
    for term in pod_terms {
        term.topology_key.hash(&mut h);
        hash_selector(term.label_selector.as_ref(), &mut h);
    }
    // A DaemonSet's pods differ only in the node their required node affinity names.
    let node_terms = told
        .affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .into_iter()
        .flat_map(|r| &r.node_selector_terms);
    for term in node_terms {
        for e in term.match_expressions.iter().flatten().chain(term.match_fields.iter().flatten()) {
            (&e.key, &e.operator, &e.values).hash(&mut h);
        }
    }
    for spread in told.spread.into_iter().flatten() {
        spread.topology_key.hash(&mut h);
        hash_selector(spread.label_selector.as_ref(), &mut h);
    }
    h.finish()
}

fn hash_selector(selector: Option<&LabelSelector>, h: &mut DefaultHasher) {
    let Some(selector) = selector else { return };
    selector.match_labels.hash(h);
    for e in selector.match_expressions.iter().flatten() {
        (&e.key, &e.operator, &e.values).hash(h);
    }
}

/// Whether `shape` is what `PodShape::from(spec)` would make, field by field (the pattern
/// names every field, so a field added to the shape must be compared here).
fn is_shape_of(shape: &PodShape, spec: &PodSpec) -> bool {
    let PodShape {
        affinity,
        containers,
        host_network,
        init_containers,
        node_name,
        node_selector,
        os,
        overhead,
        preemption_policy,
        priority,
        priority_class_name,
        resources,
        restart_policy,
        runtime_class_name,
        scheduler_name,
        termination_grace_period_seconds,
        tolerations,
        topology_spread_constraints,
        volumes,
    } = shape;
    node_name.is_none()
        && *priority == spec.priority
        && *host_network == spec.host_network
        && *termination_grace_period_seconds == spec.termination_grace_period_seconds
        && *preemption_policy == spec.preemption_policy
        && *priority_class_name == spec.priority_class_name
        && *restart_policy == spec.restart_policy
        && *runtime_class_name == spec.runtime_class_name
        && *scheduler_name == spec.scheduler_name
        && *node_selector == spec.node_selector
        && *os == spec.os
        && *overhead == spec.overhead
        && *resources == spec.resources
        && *affinity == spec.affinity
        && *tolerations == spec.tolerations
        && *topology_spread_constraints == spec.topology_spread_constraints
        && same_containers(containers, &spec.containers)
        && match (init_containers, &spec.init_containers) {
            (None, None) => true,
            (Some(kept), Some(all)) => same_containers(kept, all),
            _ => false,
        }
        && match (volumes, &spec.volumes) {
            (None, None) => true,
            (Some(kept), Some(all)) => same_volumes(kept, all),
            _ => false,
        }
}

fn same_containers(kept: &[SlimContainer], all: &[Container]) -> bool {
    kept.len() == all.len()
        && kept.iter().zip(all).all(|(k, c)| {
            let SlimContainer { name, ports, resources, restart_policy } = k;
            *name == c.name && *ports == c.ports && *resources == c.resources && *restart_policy == c.restart_policy
        })
}

/// The claim-binding volumes of `all` are `kept`, in order.
fn same_volumes(kept: &[SlimVolume], all: &[Volume]) -> bool {
    let mut binding = all.iter().filter(|v| volume_binds_claim(v));
    kept.iter().all(|k| {
        let SlimVolume { name, ephemeral, persistent_volume_claim } = k;
        binding.next().is_some_and(|v| {
            *name == v.name
                && ephemeral.as_deref() == v.ephemeral.as_ref()
                && *persistent_volume_claim == v.persistent_volume_claim
        })
    }) && binding.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slim_pod::SlimPodSpec;

    /// A spec with every kept field set, named uniquely by `app`.
    fn spec(app: &str) -> PodSpec {
        serde_json::from_value(serde_json::json!({
            "nodeName": "n1",
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}
            }]}},
            "containers": [{"name": app, "image": "x", "ports": [{"containerPort": 80}], "resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
            "hostNetwork": false,
            "nodeSelector": {"disk": "ssd"},
            "os": {"name": "linux"},
            "overhead": {"cpu": "10m"},
            "preemptionPolicy": "Never",
            "priority": 10,
            "priorityClassName": "high",
            "restartPolicy": "Always",
            "runtimeClassName": "gvisor",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}, {"name": "cfg", "configMap": {"name": "c"}}]
        }))
        .expect("spec")
    }

    #[test]
    fn replicas_of_one_template_share_one_shape_whichever_form_they_arrive_in() {
        let whole = spec("shapes-share");
        let a = SlimPodSpec::from(&whole);
        let mut other_node = whole.clone();
        other_node.node_name = Some("n2".into());
        let b = SlimPodSpec::from(&other_node);
        let decoded: SlimPodSpec = serde_json::from_value(serde_json::to_value(&whole).expect("json")).expect("decode");
        assert!(Arc::ptr_eq(a.shape(), b.shape()));
        assert!(Arc::ptr_eq(a.shape(), decoded.shape()));
        assert_eq!((a.node_name.as_deref(), b.node_name.as_deref()), (Some("n1"), Some("n2")));
        assert_eq!(a.shape().node_name, None);
        assert_eq!(**a.shape(), PodShape { node_name: None, ..PodShape::from(&whole) });
    }

    #[test]
    fn a_spec_differing_in_any_kept_field_gets_a_shape_of_its_own() {
        let base = spec("shapes-differ");
        let shared_base = SlimPodSpec::from(&base);
        type Edit = (&'static str, fn(&mut PodSpec));
        let edits: Vec<Edit> = vec![
            ("affinity", |s| s.affinity = None),
            ("container name", |s| s.containers[0].name = "other".into()),
            ("container ports", |s| s.containers[0].ports = None),
            ("container limits", |s| {
                s.containers[0].resources.get_or_insert_default().limits = Some(
                    [("cpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()))].into(),
                )
            }),
            ("container restart policy", |s| s.containers[0].restart_policy = Some("Always".into())),
            ("init containers", |s| s.init_containers = None),
            ("init container restart policy", |s| {
                if let Some(c) = s.init_containers.as_mut() {
                    c[0].restart_policy = None
                }
            }),
            ("host network", |s| s.host_network = Some(true)),
            ("node selector", |s| s.node_selector = None),
            ("os", |s| s.os = None),
            ("overhead", |s| s.overhead = None),
            ("preemption policy", |s| s.preemption_policy = None),
            ("priority", |s| s.priority = Some(11)),
            ("priority class", |s| s.priority_class_name = None),
            ("pod resources", |s| s.resources = Some(Default::default())),
            ("restart policy", |s| s.restart_policy = None),
            ("runtime class", |s| s.runtime_class_name = None),
            ("scheduler", |s| s.scheduler_name = None),
            ("grace period", |s| s.termination_grace_period_seconds = Some(5)),
            ("tolerations", |s| s.tolerations = None),
            ("topology spread", |s| s.topology_spread_constraints = None),
            ("claim volume", |s| {
                if let Some(v) = s.volumes.as_mut() {
                    v.remove(0);
                }
            }),
            ("volumes absent", |s| s.volumes = None),
        ];
        for (field, edit) in edits {
            let mut edited = base.clone();
            edit(&mut edited);
            let from_whole = SlimPodSpec::from(&edited);
            assert!(!Arc::ptr_eq(shared_base.shape(), from_whole.shape()), "{field}");
            assert_eq!(**from_whole.shape(), PodShape::from(&edited), "{field}");
        }
        // A volume that binds no claim is not kept, so it does not tell shapes apart.
        let mut other_config = base.clone();
        if let Some(v) = other_config.volumes.as_mut() {
            v[1].name = "other-config".into();
        }
        assert!(Arc::ptr_eq(shared_base.shape(), SlimPodSpec::from(&other_config).shape()));
    }

    #[test]
    fn a_shape_no_pod_holds_is_freed_and_a_changed_shape_is_a_copy() {
        let whole = spec("shapes-freed");
        let mut a = SlimPodSpec::from(&whole);
        let print = spec_print(&whole);
        let live = || TABLE.live(print);
        assert_eq!(live(), 1);
        let b = SlimPodSpec::from(&whole);
        a.tolerations = None; // a's own copy now; b keeps the shared one
        assert!(!Arc::ptr_eq(a.shape(), b.shape()));
        assert_eq!(b.tolerations.as_ref().map(Vec::len), Some(1));
        drop(b);
        assert_eq!(live(), 0);
    }

    #[test]
    fn charts_differing_only_in_their_selectors_are_told_apart_by_fingerprint() {
        // Replicas of many copies of one chart differ only in the app their selectors name:
        // their shapes must not share a fingerprint, or each conversion compares them all.
        let chart = |app: &str| {
            let mut s = spec(app);
            s.containers[0].name = "app".into();
            s
        };
        let prints: std::collections::BTreeSet<u64> =
            ["a", "b", "c"].iter().map(|app| spec_print(&chart(app))).collect();
        assert_eq!(prints.len(), 3);
        let mut spread_only = chart("a");
        spread_only.affinity = None;
        let mut other_spread = spread_only.clone();
        if let Some(t) = other_spread.topology_spread_constraints.as_mut() {
            t[0].label_selector = Some(LabelSelector {
                match_labels: Some([("app".to_string(), "b".to_string())].into()),
                ..Default::default()
            });
        }
        assert_ne!(spec_print(&spread_only), spec_print(&other_spread));
        assert_eq!(spec_print(&spread_only), shape_print(&PodShape::from(&spread_only)));
    }

    #[test]
    fn daemon_pods_pinned_to_different_nodes_are_told_apart_by_fingerprint() {
        let pinned = |node: &str| -> PodSpec {
            serde_json::from_value(serde_json::json!({
                "containers": [{"name": "agent", "resources": {"requests": {"cpu": "100m"}}}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]}}}
            }))
            .expect("spec")
        };
        assert_ne!(spec_print(&pinned("n1")), spec_print(&pinned("n2")));
        assert_eq!(spec_print(&pinned("n1")), shape_print(&PodShape::from(&pinned("n1"))));
    }
}
