//! `karpenter.sh/v1` NodePool.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{GoDuration, NillableDuration};
use crate::resources::ResourceList;
use crate::shared::{Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, Taint, object_meta_schema};

pub const API_VERSION: &str = "karpenter.sh/v1";
pub const KIND: &str = "NodePool";

// Condition types of a NodePool's status (Karpenter's).
pub const CONDITION_READY: &str = "Ready";
/// Its node class exists and is Ready (Karpenter provisions only with Ready pools).
pub const CONDITION_NODE_CLASS_READY: &str = "NodeClassReady";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePool {
    #[serde(default = "default_api_version")]
    pub api_version: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    pub spec: NodePoolSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodePoolStatus>,
}

fn default_api_version() -> String {
    API_VERSION.to_string()
}
fn default_kind() -> String {
    KIND.to_string()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolSpec {
    pub template: NodeClaimTemplate,
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bounds on the pool's total capacity; the key `nodes` bounds the node count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
    /// Priority among NodePools (higher first), 1..100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// A fixed node count: the pool keeps exactly this many nodes, whatever the pods need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    pub spec: NodeClaimTemplateSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    pub node_class_ref: NodeClassReference,
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<GoDuration>,
}

/// Karpenter's default node lifetime: 30 days.
pub fn default_expire_after() -> NillableDuration {
    NillableDuration::from_secs(720 * 3600)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without workload pods.
    WhenEmpty,
    /// Empty and underutilized nodes.
    #[default]
    WhenEmptyOrUnderutilized,
    /// A consolidation goes ahead only when its share of the pool's cost saved outweighs its
    /// share of pod disruption (score = savings share / disruption share >= 1 / [`BALANCED_K`]).
    Balanced,
}

/// The scoring parameter of [`ConsolidationPolicy::Balanced`]: moves scoring at least 1/k pass.
pub const BALANCED_K: i32 = 2;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disruption {
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    #[serde(default = "default_consolidate_after")]
    pub consolidate_after: NillableDuration,
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidation_policy: ConsolidationPolicy::default(),
            consolidate_after: default_consolidate_after(),
            budgets: default_budgets(),
        }
    }
}

fn default_consolidate_after() -> NillableDuration {
    NillableDuration::from_secs(0)
}

/// Karpenter's default budget: at most 10% of a pool's nodes disrupted at once.
pub fn default_budgets() -> Vec<Budget> {
    vec![Budget { nodes: "10%".to_string(), schedule: None, duration: None, reasons: None }]
}

/// Why a node is disrupted, as budgets name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
    // Node repair (Karpenter v1.15). kerf reads budgets naming it but does not repair nodes, so
    // no disruption of kerf's counts against it. (A comment, not a doc comment: one on a variant
    // turns the CRD's enum into a oneOf, which a structural schema refuses.)
    Unhealthy,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    /// An integer or a percentage (`"10%"`) of the pool's nodes.
    #[serde(default = "default_budget_nodes")]
    #[schemars(regex(pattern = r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    /// A cron schedule (5 fields or a macro such as `@daily`) when the budget is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// How long the budget stays active after each scheduled start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<GoDuration>,
    /// The disruption reasons the budget applies to (all when unset); a set, at most 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub reasons: Option<Vec<DisruptionReason>>,
}

fn default_budget_nodes() -> String {
    "10%".to_string()
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolStatus {
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub resources: ResourceList,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` of the node class the conditions were worked out from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
}

impl NodePool {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// The pool's weight, 0 when unset.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// A static pool keeps `replicas` nodes whatever the pods need (no consolidation).
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// The `nodes` limit (an upper bound on the pool's node count), if any.
    pub fn node_limit(&self) -> Option<i64> {
        self.spec.limits.as_ref().and_then(|l| l.0.get(crate::resources::NODES)).map(|q| q.value_ceil())
    }
}
