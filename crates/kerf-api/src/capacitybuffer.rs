//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer: SIG Autoscaling's API for spare capacity
//! (headroom) that an autoscaler keeps in the cluster as room for pods that do not exist yet.
//!
//! A buffer names the shape of one chunk of room (a PodTemplate in its namespace, or the pod
//! template of a Deployment / StatefulSet / ReplicaSet) and how many chunks to keep (`replicas`,
//! `percentage` of the referenced workload's replicas, or as many as fit in `limits`). The field
//! names, the default strategy and the status conditions are the upstream API's; kerf's rules for
//! resolving them live in the controller's buffer reconciler.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::resources::ResourceList;
use crate::shared::{Condition, object_meta_schema};
use crate::validation::FieldError;

pub const GROUP: &str = "autoscaling.x-k8s.io";
pub const API_VERSION: &str = "autoscaling.x-k8s.io/v1beta1";
pub const KIND: &str = "CapacityBuffer";

/// The strategy whose buffers an autoscaler provisions actively (the default, the only one kerf
/// acts on).
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// The buffer's pod template and chunk count are resolved (or why not).
pub const CONDITION_READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// The autoscaler provisions the buffer; kerf sets it True once all of its room exists on
/// registered nodes, False while some is still launching or cannot be placed.
pub const CONDITION_PROVISIONING: &str = "Provisioning";
/// Reason of `ReadyForProvisioning=True`.
pub const REASON_ATTRIBUTES_SET: &str = "AttributesSetSuccessfully";

/// kerf's annotations: the buffer is active only in a window that opens on this cron schedule
/// (the syntax of NodePool disruption budget schedules, UTC) ...
pub const ANNOTATION_ACTIVE_SCHEDULE: &str = "kerf.dev/active-schedule";
/// ... and stays open this long (a Go duration, e.g. `10h`).
pub const ANNOTATION_ACTIVE_DURATION: &str = "kerf.dev/active-duration";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityBuffer {
    #[serde(default = "default_api_version")]
    pub api_version: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    pub spec: CapacityBufferSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CapacityBufferStatus>,
}

fn default_api_version() -> String {
    API_VERSION.to_string()
}
fn default_kind() -> String {
    KIND.to_string()
}

/// A reference to an object in the buffer's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalObjectRef {
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A workload with a scale subresource whose pod template shapes the buffer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalableRef {
    /// `""` for the core group, `apps` for Deployments, StatefulSets and ReplicaSets.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[schemars(length(min = 1))]
    pub kind: String,
    #[schemars(length(min = 1))]
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityBufferSpec {
    /// Defaults to [`ACTIVE_CAPACITY`].
    #[serde(default = "default_strategy", skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate in the buffer's namespace: the shape of one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A workload whose pod template is the shape of one chunk (and whose replicas
    /// `percentage` is taken of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// Chunks to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Chunks as a percentage of the `scalableRef` workload's replicas (rounded up, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// Caps the chunks by their total requests; alone, as many chunks as fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

fn default_strategy() -> Option<String> {
    Some(ACTIVE_CAPACITY.to_string())
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityBufferStatus {
    /// The PodTemplate the chunks were made from (for a `scalableRef` buffer, the workload's
    /// template is used directly and this stays unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// Chunks resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The `metadata.generation` of the template the chunks were made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

impl CapacityBuffer {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The namespace (`default` when unset, as the API server defaults it).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or("default")
    }

    /// The strategy in force (the default when unset).
    pub fn strategy(&self) -> &str {
        self.spec.provisioning_strategy.as_deref().unwrap_or(ACTIVE_CAPACITY)
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Every problem the CRD validation reports for a CapacityBuffer (upstream's rules: exactly one
/// of `podTemplateRef` and `scalableRef`; a `podTemplateRef` buffer needs `replicas` or
/// `limits`; counts at least 0; names not empty), plus kerf's: `percentage` needs a
/// `scalableRef`, limits are non-negative, and the schedule annotations parse.
pub fn validate(b: &CapacityBuffer) -> Vec<FieldError> {
    let mut out = Vec::new();
    let spec = &b.spec;
    match (&spec.pod_template_ref, &spec.scalable_ref) {
        (Some(_), Some(_)) => out.push(FieldError::new(
            "spec",
            "set either podTemplateRef or scalableRef, not both (exactly one names the shape of the buffer's pods)",
        )),
        (None, None) => out.push(FieldError::new(
            "spec",
            "one of podTemplateRef or scalableRef is required (it names the shape of the buffer's pods)",
        )),
        _ => {}
    }
    if let Some(r) = &spec.pod_template_ref {
        if r.name.is_empty() {
            out.push(FieldError::new("spec.podTemplateRef.name", "must not be empty"));
        }
        if spec.replicas.is_none() && spec.limits.is_none() {
            out.push(FieldError::new(
                "spec",
                "a buffer with podTemplateRef needs replicas or limits (nothing else says how many pods' room to keep)",
            ));
        }
    }
    if let Some(r) = &spec.scalable_ref {
        if r.kind.is_empty() {
            out.push(FieldError::new("spec.scalableRef.kind", "must not be empty"));
        }
        if r.name.is_empty() {
            out.push(FieldError::new("spec.scalableRef.name", "must not be empty"));
        }
    }
    if let Some(n) = spec.replicas
        && n < 0
    {
        out.push(FieldError::new("spec.replicas", format!("must be at least 0, got {n}")));
    }
    if let Some(p) = spec.percentage {
        if p < 0 {
            out.push(FieldError::new("spec.percentage", format!("must be at least 0, got {p}")));
        }
        if spec.scalable_ref.is_none() {
            out.push(FieldError::new(
                "spec.percentage",
                "needs scalableRef (it is a percentage of the referenced workload's replicas)",
            ));
        }
    }
    for (name, q) in spec.limits.iter().flat_map(|l| l.0.iter()) {
        if q.is_negative() {
            out.push(FieldError::new(format!("spec.limits.{name}"), format!("must not be negative, got {q}")));
        }
    }
    if let Some(s) = &spec.provisioning_strategy
        && s.is_empty()
    {
        out.push(FieldError::new("spec.provisioningStrategy", "must not be empty (omit it for the default)"));
    }
    out.extend(validate_window(b));
    out
}

/// Problems with kerf's `active-schedule` / `active-duration` annotations: both or neither, a
/// schedule that parses, a duration that parses.
fn validate_window(b: &CapacityBuffer) -> Vec<FieldError> {
    let ann = b.metadata.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k));
    let path = |k: &str| format!("metadata.annotations.{k}");
    let mut out = Vec::new();
    match (get(ANNOTATION_ACTIVE_SCHEDULE), get(ANNOTATION_ACTIVE_DURATION)) {
        (None, None) => {}
        (Some(_), None) => out.push(FieldError::new(
            path(ANNOTATION_ACTIVE_DURATION),
            format!("required with {ANNOTATION_ACTIVE_SCHEDULE} (how long the window stays open, e.g. 10h)"),
        )),
        (None, Some(_)) => out.push(FieldError::new(
            path(ANNOTATION_ACTIVE_SCHEDULE),
            format!("required with {ANNOTATION_ACTIVE_DURATION} (when the window opens, a cron schedule)"),
        )),
        (Some(s), Some(d)) => {
            if let Err(e) = crate::validation::parse_budget_schedule(s) {
                out.push(FieldError::new(path(ANNOTATION_ACTIVE_SCHEDULE), e));
            }
            if let Err(e) = d.parse::<crate::GoDuration>() {
                out.push(FieldError::new(path(ANNOTATION_ACTIVE_DURATION), e.to_string()));
            }
        }
    }
    out
}
