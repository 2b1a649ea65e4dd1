//! The Scheduler's input and output: the contract between the scheduling core and its callers
//! (the provisioner, disruption simulations, the simulator's kube-scheduler stand-in).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::labels::INSTANCE_TYPE;
use kerf_api::{NodePool, NodeSelectorRequirementWithMinValues, Operator, ResourceList, Taint};

use crate::instance::InstanceType;
use crate::node_labels::NodeLabels;
use crate::requirements::Requirements;

/// Everything one scheduling pass looks at. Built by the caller from cluster state.
#[derive(Debug, Clone, Default)]
pub struct SchedulingInput {
    /// NodePools that may launch capacity, with their instance types. Order does not matter:
    /// the Scheduler orders them by weight (then name).
    pub node_pools: Vec<NodePoolInput>,
    /// Nodes that exist, and in-flight NodeClaims that have no initialized Node yet.
    pub existing_nodes: Vec<ExistingNode>,
    /// The pod template of each DaemonSet in the cluster, as a Pod. A DaemonSet's pod counts
    /// against a new node only when it would run on that node (tolerations, node affinity).
    pub daemonset_pods: Vec<Arc<SlimPod>>,
    /// The pending pods to place, in any order.
    pub pods: Vec<Arc<SlimPod>>,
    /// Where each PersistentVolumeClaim's volume can be used, keyed `namespace/claim`: the bound
    /// PersistentVolume's node affinity terms, or for an unbound WaitForFirstConsumer claim its
    /// StorageClass's allowedTopologies terms. The terms are alternatives; claims not listed
    /// do not constrain placement.
    pub volume_requirements: BTreeMap<String, Vec<Requirements>>,
    /// PersistentVolumeClaims (`namespace/claim`) whose volume cannot be resolved, with why
    /// (the claim does not exist; it is unbound and its StorageClass does not exist). A pod
    /// mounting one is not placed: no node can be provisioned for it.
    pub unresolvable_volumes: BTreeMap<String, String>,
    /// PersistentVolumeClaims (`namespace/claim`) whose volume attaches as an EBS volume: each
    /// a pod mounts counts one against a node's `attachable-volumes-aws-ebs`
    /// ([`volume_limits`](crate::volume_limits)). Empty: no volume is counted.
    pub ebs_claims: Arc<BTreeSet<String>>,
    /// Labels of each namespace, for pod affinity terms with a namespaceSelector.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// NodePools that cannot launch anything now, with why (e.g. their node class is not
    /// ready). They take no part in placement; explanations name them with their reason.
    pub unavailable_node_pools: BTreeMap<String, String>,
    /// The last this many of `pods` are placed only after every other pod has been: room kept
    /// for pods that do not exist yet (CapacityBuffers) never takes room a real pod could use.
    pub placed_last: usize,
    /// How pods' preferences shape what is planned (Karpenter's `preferencePolicy`).
    pub preference_policy: PreferencePolicy,
    /// CapacityQuotas: limits on the nodes a label selector picks, across NodePools. New
    /// claims keep each quota's selected total within its limits, beside the pools' own.
    pub quotas: Vec<QuotaInput>,
}

/// One CapacityQuota as the Scheduler keeps it (docs/design.md, "CapacityQuota").
#[derive(Debug, Clone, Default)]
pub struct QuotaInput {
    pub name: String,
    /// The nodes it counts, by their labels; `None` or empty: every node.
    pub selector: Option<kerf_api::capacityquota::NodeLabelSelector>,
    /// `spec.limits.resources` (`nodes`: the node count).
    pub limits: ResourceList,
    /// What the selected nodes hold now, in-flight claims included (`nodes`: their count).
    pub used: ResourceList,
}

impl QuotaInput {
    /// Whether the quota counts a node whose labels `label` reads.
    pub fn selects<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.selector.as_ref().is_none_or(|s| s.matches(label))
    }
}

/// How the scheduling core treats pods' preferences (preferred node and pod (anti-)affinity,
/// ScheduleAnyway topology spread) when it plans, under Karpenter's setting name
/// `preferencePolicy`. kube-scheduler only ever scores them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PreferencePolicy {
    /// kerf's default: preferences are honoured as Karpenter's `Respect` honours them, except
    /// that a preference about each node on its own (over `kubernetes.io/hostname`: "one
    /// replica per node") is honoured on room that is there, never by buying a node per pod.
    #[default]
    RespectWithinRoom,
    /// Karpenter's `Respect`: every preference is taken as required, and dropped one by one
    /// only when a pod fits nowhere, new nodes included.
    Respect,
    /// Karpenter's `Ignore`: preferences play no part in the plan.
    Ignore,
}

impl PreferencePolicy {
    /// Every policy with its name as written in a setting.
    const ALL: [(&str, PreferencePolicy); 3] = [
        ("RespectWithinRoom", PreferencePolicy::RespectWithinRoom),
        ("Respect", PreferencePolicy::Respect),
        ("Ignore", PreferencePolicy::Ignore),
    ];

    /// The setting's values, as written.
    pub const NAMES: [&str; 3] = [Self::ALL[0].0, Self::ALL[1].0, Self::ALL[2].0];

    /// The policy named `name` (as written in a setting), if any.
    pub fn parse(name: &str) -> Option<PreferencePolicy> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }
}

/// A NodePool and what it can launch.
#[derive(Debug, Clone)]
pub struct NodePoolInput {
    pub node_pool: Arc<NodePool>,
    /// The instance types the cloud provider offers for this pool (already resolved against
    /// the pool's node class), in any order.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Capacity already held by the pool's NodeClaims (in-flight included), counted against
    /// `spec.limits`; the `nodes` entry is the pool's NodeClaim count.
    pub in_use: ResourceList,
}

/// A node, or an in-flight NodeClaim standing in for the node it will become.
#[derive(Debug, Clone, Default)]
pub struct ExistingNode {
    pub name: String,
    /// The owning NodePool, `None` for nodes kerf does not manage.
    pub node_pool: Option<String>,
    /// Shared: every input and view of the same node reads the one copy (see [`NodeLabels`]).
    pub labels: NodeLabels,
    /// Taints that block scheduling (startup taints of a claim are left out: they go away).
    pub taints: Vec<Taint>,
    /// Shared, as the labels: an input copied (disruption edits copies) copies no list.
    pub allocatable: Arc<ResourceList>,
    /// Pods bound or nominated to this node. They use its resources and count in topology
    /// spread and pod (anti-)affinity.
    pub pods: Vec<Arc<SlimPod>>,
    /// True for a NodeClaim whose Node is not initialized yet (placements onto it are
    /// nominations, not bindings).
    pub in_flight: bool,
    /// False for nodes that take no new pods (cordoned, being deleted); their pods still count
    /// in topology and affinity.
    pub schedulable: bool,
    /// What this node holds of its NodePool's `spec.limits` (its NodeClaim's capacity, as
    /// counted in [`NodePoolInput::in_use`]; empty when unknown or unmanaged). A what-if that
    /// removes the node gives it back to the pool, so a replacement may use it.
    pub pool_usage: Arc<ResourceList>,
}

impl ExistingNode {
    /// Whether `other` is this node as it was or will be, apart from its pods: what a view kept
    /// from one input to the next must edit when it is not.
    pub fn same_apart_from_pods(&self, other: &ExistingNode) -> bool {
        self.name == other.name
            && self.node_pool == other.node_pool
            && self.labels == other.labels
            && self.taints == other.taints
            && self.allocatable == other.allocatable
            && self.in_flight == other.in_flight
            && self.schedulable == other.schedulable
            && self.pool_usage == other.pool_usage
    }

    /// Whether `other` holds the very same pods (the same `Arc`s), in the same order.
    pub fn holds_same_pods(&self, other: &ExistingNode) -> bool {
        self.pods.len() == other.pods.len() && self.pods.iter().zip(&other.pods).all(|(x, y)| Arc::ptr_eq(x, y))
    }
}

/// The outcome of one scheduling pass.
#[derive(Debug, Clone, Default)]
pub struct SchedulingResult {
    /// Pods that fit on existing nodes or in-flight claims.
    pub placements: Vec<Placement>,
    /// NodeClaims to create, each with the pods it is for.
    pub new_node_claims: Vec<NewNodeClaim>,
    /// Pods that could not be placed anywhere, with the reason.
    pub errors: Vec<(usize, PodError)>,
}

/// A pod (by index into [`SchedulingInput::pods`]) placed on an existing node or in-flight claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub pod: usize,
    pub node: String,
}

/// A NodeClaim the Scheduler wants launched.
#[derive(Debug, Clone)]
pub struct NewNodeClaim {
    pub node_pool: String,
    /// The claim's requirements: the pool's, narrowed by its pods, sorted by key — except
    /// `node.kubernetes.io/instance-type`, which `instance_types` gives
    /// ([`NewNodeClaim::node_requirements`] has them all).
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Every compatible instance type, cheapest compatible offering first.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// The minValues of the pool's `node.kubernetes.io/instance-type` requirement.
    pub instance_type_min_values: Option<i64>,
    /// Labels the node will carry: the pool's template labels plus single-valued requirements.
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Indexes into [`SchedulingInput::pods`].
    pub pods: Vec<usize>,
    /// Sum of the pods' requests plus the daemonset overhead for this claim.
    pub requests: ResourceList,
}

impl NewNodeClaim {
    /// The requirements of the NodeClaim to create: [`requirements`](Self::requirements) with
    /// `node.kubernetes.io/instance-type In [...]` listing every compatible type (cheapest first)
    /// and its minValues, in key order. Built on demand: a pass may plan thousands of claims
    /// with hundreds of types each, and only the ones launched need the names written out.
    pub fn node_requirements(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        let mut out = self.requirements.clone();
        let it = NodeSelectorRequirementWithMinValues {
            key: INSTANCE_TYPE.to_string(),
            operator: Operator::In,
            values: self.instance_types.iter().map(|t| t.name.clone()).collect(),
            min_values: self.instance_type_min_values,
        };
        let at = out.partition_point(|x| x.key.as_str() < INSTANCE_TYPE);
        out.insert(at, it);
        out
    }
}

/// The answer of a consolidation what-if ([`SchedulingContext::without_nodes`]): where the
/// pods of the removed nodes would go.
///
/// [`SchedulingContext::without_nodes`]: crate::SchedulingContext::without_nodes
#[derive(Debug, Clone, Default)]
pub struct WhatIf {
    /// The pods that would have to move (DaemonSet, mirror, finished and terminating pods stay
    /// with their node); every index below is into this list.
    pub pods: Vec<Arc<SlimPod>>,
    /// Pods that fit on remaining existing nodes or in-flight claims.
    pub placements: Vec<Placement>,
    /// NodeClaims that would have to be launched for the rest, each with its price.
    pub new_node_claims: Vec<PricedClaim>,
    /// Pods that fit nowhere, not even on a new NodeClaim.
    pub unplaced: Vec<usize>,
}

impl WhatIf {
    /// Every pod fits on the remaining nodes: the removed nodes can simply be deleted.
    pub fn deletable(&self) -> bool {
        self.new_node_claims.is_empty() && self.unplaced.is_empty()
    }

    /// The price of the one new NodeClaim the pods need (all other pods fitting on remaining
    /// nodes), or `None` when they need none, several, or some pod fits nowhere. Replacing is
    /// worth it only when this is strictly below the removed nodes' price: the caller compares.
    pub fn single_replacement_price(&self) -> Option<f64> {
        match (self.new_node_claims.as_slice(), self.unplaced.is_empty()) {
            ([one], true) => Some(one.price),
            _ => None,
        }
    }
}

/// A NodeClaim a what-if would launch, and its price: the cheapest compatible offering of its
/// cheapest fitting instance type, dollars per hour.
#[derive(Debug, Clone)]
pub struct PricedClaim {
    pub claim: NewNodeClaim,
    pub price: f64,
}

/// A node name a what-if was asked about that the context does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no existing node or in-flight NodeClaim named {0}")]
pub struct UnknownNode(pub String);

/// Why a pod could not be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodError {
    /// A short machine-readable reason (`Unschedulable`, `NodePoolLimitExceeded`, ...).
    pub reason: String,
    /// One line for people, naming each NodePool and exactly what excluded it.
    pub message: String,
}

/// The label the API server sets on every namespace, holding the namespace's name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The labels of each namespace as a namespaceSelector sees them: every namespace object's
/// labels plus `kubernetes.io/metadata.name` (the API server always sets it), and for each
/// namespace in `used` that has no object, just that label — a pod's namespace exists in a real
/// cluster even when the caller has not seen its object.
pub fn namespace_labels<'a>(
    namespaces: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::Namespace>,
    used: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for ns in namespaces {
        let Some(name) = ns.metadata.name.as_deref() else { continue };
        let mut labels = ns.metadata.labels.clone().unwrap_or_default();
        labels.insert(NAMESPACE_NAME_LABEL.to_string(), name.to_string());
        out.insert(name.to_string(), labels);
    }
    for name in used {
        if !out.contains_key(name) {
            out.insert(name.to_string(), BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), name.to_string())]));
        }
    }
    out
}

#[cfg(test)]
mod namespace_label_tests {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    #[test]
    fn namespace_labels_add_metadata_name_and_cover_namespaces_without_an_object() {
        let team_a = Namespace {
            metadata: ObjectMeta {
                name: Some("shop".into()),
                labels: Some(BTreeMap::from([("team".to_string(), "a".to_string())])),
                ..Default::default()
            },
            ..Default::default()
        };
        let got = namespace_labels([&team_a], ["shop", "default"]);
        let want = BTreeMap::from([
            ("default".to_string(), BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), "default".to_string())])),
            (
                "shop".to_string(),
                BTreeMap::from([
                    (NAMESPACE_NAME_LABEL.to_string(), "shop".to_string()),
                    ("team".to_string(), "a".to_string()),
                ]),
            ),
        ]);
        assert_eq!(got, want);
    }
}
