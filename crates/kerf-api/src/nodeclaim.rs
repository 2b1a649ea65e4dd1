//! `karpenter.sh/v1` NodeClaim.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::{GoDuration, NillableDuration};
use crate::resources::ResourceList;
use crate::shared::{Condition, NodeClassReference, NodeSelectorRequirementWithMinValues, Taint, object_meta_schema};

pub const API_VERSION: &str = "karpenter.sh/v1";
pub const KIND: &str = "NodeClaim";

// Condition types.
pub const CONDITION_LAUNCHED: &str = "Launched";
pub const CONDITION_REGISTERED: &str = "Registered";
pub const CONDITION_INITIALIZED: &str = "Initialized";
pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_DRIFTED: &str = "Drifted";
pub const CONDITION_EMPTY: &str = "Empty";
pub const CONDITION_CONSOLIDATABLE: &str = "Consolidatable";
pub const CONDITION_DISRUPTION_REASON: &str = "DisruptionReason";
pub const CONDITION_EXPIRED: &str = "Expired";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaim {
    #[serde(default = "default_api_version")]
    pub api_version: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    // Shared between copies of the claim (a plain comment: a doc comment would become the
    // CRD schema's description): a spec is immutable once created, and its requirements can
    // name hundreds of instance types, which every copy (the informer's, the API server's, the
    // cloud's record of the launch, a status write) would repeat.
    pub spec: Arc<NodeClaimSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeClaimStatus>,
}

fn default_api_version() -> String {
    API_VERSION.to_string()
}
fn default_kind() -> String {
    KIND.to_string()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    pub node_class_ref: NodeClassReference,
    #[serde(default = "crate::nodepool::default_expire_after")]
    pub expire_after: NillableDuration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<GoDuration>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub requests: ResourceList,
}

impl ResourceRequirements {
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub capacity: ResourceList,
    #[serde(default, skip_serializing_if = "ResourceList::is_empty")]
    pub allocatable: ResourceList,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub last_pod_event_time: Option<Time>,
}

impl NodeClaim {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref().and_then(|s| crate::shared::find_condition(&s.conditions, type_))
    }

    pub fn is_condition_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(Condition::is_true)
    }

    pub fn provider_id(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.provider_id.as_deref())
    }
}
