//! `autoscaling.x-k8s.io/v1` ProvisioningRequest: SIG Autoscaling's API for asking an
//! autoscaler for room for a whole group of pods at once (what Kueue's ProvisioningRequest
//! admission check creates for a gang-scheduled job).
//!
//! A request lists pod sets (a PodTemplate in its namespace and how many pods of it) and names
//! a provisioning class: `check-capacity.autoscaling.x-k8s.io` (does it all fit on what exists?)
//! or `best-effort-atomic-scale-up.autoscaling.x-k8s.io` (launch room for all of it, or nothing).
//! Field names, classes, parameters, condition types and reasons are the upstream API's; the
//! controller's provisioning-request reconciler gives them kerf's meaning. `v1beta1` has the
//! same fields: manifests of either version decode into this type.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::shared::{Condition, object_meta_schema};
use crate::validation::FieldError;

pub const GROUP: &str = "autoscaling.x-k8s.io";
pub const API_VERSION: &str = "autoscaling.x-k8s.io/v1";
/// The older version, read from manifests and scenarios (same fields).
pub const API_VERSION_V1BETA1: &str = "autoscaling.x-k8s.io/v1beta1";
pub const KIND: &str = "ProvisioningRequest";

/// Answer from the room that exists (nodes and launching NodeClaims); never launch.
pub const CLASS_CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";
/// Launch room for every pod set together, or none of it.
pub const CLASS_BEST_EFFORT_ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
/// The classes kerf acts on.
pub const CLASSES: [&str; 2] = [CLASS_CHECK_CAPACITY, CLASS_BEST_EFFORT_ATOMIC];

/// Annotation on a pod naming the request (in its namespace) whose booked room it uses.
pub const CONSUME_ANNOTATION: &str = "autoscaling.x-k8s.io/consume-provisioning-request";
/// The older spelling of [`CONSUME_ANNOTATION`], still honoured.
pub const CONSUME_ANNOTATION_LEGACY: &str = "cluster-autoscaler.kubernetes.io/consume-provisioning-request";

/// The autoscaler took the request on.
pub const CONDITION_ACCEPTED: &str = "Accepted";
/// The room exists (check-capacity) or was launched (best-effort-atomic) and is booked.
pub const CONDITION_PROVISIONED: &str = "Provisioned";
/// The request cannot be met; terminal.
pub const CONDITION_FAILED: &str = "Failed";
/// The booking ended: its time ran out, or the consuming pods all arrived.
pub const CONDITION_BOOKING_EXPIRED: &str = "BookingExpired";
/// The booked room was lost before the pods arrived.
pub const CONDITION_CAPACITY_REVOKED: &str = "CapacityRevoked";

/// Upstream's reasons.
pub const REASON_ACCEPTED: &str = "Accepted";
pub const REASON_CAPACITY_IS_FOUND: &str = "CapacityIsFound";
pub const REASON_CAPACITY_IS_NOT_FOUND: &str = "CapacityIsNotFound";
pub const REASON_CAPACITY_IS_PROVISIONED: &str = "CapacityIsProvisioned";
pub const REASON_BOOKING_TIME_EXPIRED: &str = "CapacityReservationTimeExpired";
pub const REASON_BOOKING_CONSUMED: &str = "CapacityBookingConsumed";
pub const REASON_EXPIRED: &str = "Expired";
pub const REASON_FAILED_TO_BOOK: &str = "FailedToBookCapacity";
pub const REASON_FAILED_TO_CREATE_PODS: &str = "FailedToCreatePods";
/// kerf's reason for `CapacityRevoked`: a node or NodeClaim holding booked room went away and
/// what is left cannot hold it.
pub const REASON_BOOKED_CAPACITY_LOST: &str = "BookedCapacityLost";

/// check-capacity parameter: `"true"` makes "does not fit" terminal (`Failed`) instead of
/// answered again as the cluster changes.
pub const PARAM_NO_RETRY: &str = "noRetry";

/// How long room stays booked after `Provisioned` (upstream's fixed reservation time).
pub const BOOKING_DURATION: std::time::Duration = std::time::Duration::from_secs(10 * 60);
/// A request neither provisioned nor failed this long after its creation fails (`Expired`).
pub const EXPIRATION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Upstream's limits on the spec.
pub const MAX_POD_SETS: usize = 32;
pub const MAX_PARAMETERS: usize = 100;
pub const MAX_PARAMETER_LENGTH: usize = 255;
pub const MAX_CLASS_NAME_LENGTH: usize = 253;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisioningRequest {
    #[serde(default = "default_api_version")]
    pub api_version: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    pub spec: ProvisioningRequestSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ProvisioningRequestStatus>,
}

fn default_api_version() -> String {
    API_VERSION.to_string()
}
fn default_kind() -> String {
    KIND.to_string()
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisioningRequestSpec {
    /// The groups of pods to find or make room for (1 to 32).
    #[schemars(length(min = 1, max = 32))]
    pub pod_sets: Vec<PodSet>,
    /// The provisioning class ([`CLASSES`]; other classes are left to other autoscalers).
    #[schemars(length(min = 1, max = 253))]
    pub provisioning_class_name: String,
    /// Class parameters (each value at most 255 characters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// One group of identical pods.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSet {
    /// A PodTemplate in the request's namespace: the shape of the pods.
    pub pod_template_ref: Reference,
    /// How many pods of that shape.
    #[schemars(range(min = 1))]
    pub count: i32,
}

/// A reference to an object in the request's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reference {
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisioningRequestStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Class-specific details for users.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provisioning_class_details: BTreeMap<String, String>,
}

/// Where a request stands, from its conditions: the latest of the terminal and booking states
/// it reached (what the report's `state` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not yet taken on.
    Pending,
    Accepted,
    Provisioned,
    Failed,
    BookingExpired,
    CapacityRevoked,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "Pending",
            State::Accepted => CONDITION_ACCEPTED,
            State::Provisioned => CONDITION_PROVISIONED,
            State::Failed => CONDITION_FAILED,
            State::BookingExpired => CONDITION_BOOKING_EXPIRED,
            State::CapacityRevoked => CONDITION_CAPACITY_REVOKED,
        }
    }
}

impl ProvisioningRequest {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The namespace (`default` when unset, as the API server defaults it).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or("default")
    }

    pub fn class(&self) -> &str {
        &self.spec.provisioning_class_name
    }

    /// The condition of `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of `type_` is True.
    pub fn is(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(Condition::is_true)
    }

    /// Pods over all pod sets.
    pub fn pod_count(&self) -> i64 {
        self.spec.pod_sets.iter().map(|s| i64::from(s.count.max(0))).sum()
    }

    /// A class parameter.
    pub fn parameter(&self, key: &str) -> Option<&str> {
        self.spec.parameters.get(key).map(String::as_str)
    }

    /// The state its conditions say (see [`State`]).
    pub fn state(&self) -> State {
        if self.is(CONDITION_FAILED) {
            State::Failed
        } else if self.is(CONDITION_CAPACITY_REVOKED) {
            State::CapacityRevoked
        } else if self.is(CONDITION_BOOKING_EXPIRED) {
            State::BookingExpired
        } else if self.is(CONDITION_PROVISIONED) {
            State::Provisioned
        } else if self.is(CONDITION_ACCEPTED) {
            State::Accepted
        } else {
            State::Pending
        }
    }

    /// Room is booked for it now: Provisioned, and neither failed, expired nor revoked.
    pub fn booked(&self) -> bool {
        self.state() == State::Provisioned
    }
}

/// The request a pod consumes, if it carries either consume annotation.
pub fn consumed_by(annotations: Option<&BTreeMap<String, String>>) -> Option<&str> {
    let a = annotations?;
    a.get(CONSUME_ANNOTATION).or_else(|| a.get(CONSUME_ANNOTATION_LEGACY)).map(String::as_str)
}

/// Whether `s` is a DNS subdomain (lowercase alphanumerics, `-` and `.`, each dot-separated
/// part starting and ending alphanumeric), as upstream's patterns require of names and classes.
fn dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
            !b.is_empty()
                && b.first().is_some_and(edge)
                && b.last().is_some_and(edge)
                && b.iter().all(|c| edge(c) || *c == b'-')
        })
}

/// Every problem the CRD validation reports for a ProvisioningRequest (upstream's rules: 1 to
/// 32 pod sets, each naming a PodTemplate and a count of at least 1; a class name that is a DNS
/// subdomain of at most 253 characters; at most 100 parameters of at most 255 characters), plus
/// kerf's: a known parameter has a value kerf can read.
pub fn validate(r: &ProvisioningRequest) -> Vec<FieldError> {
    let mut out = Vec::new();
    let spec = &r.spec;
    if spec.pod_sets.is_empty() {
        out.push(FieldError::new("spec.podSets", "must list at least one pod set"));
    }
    if spec.pod_sets.len() > MAX_POD_SETS {
        out.push(FieldError::new(
            "spec.podSets",
            format!("at most {MAX_POD_SETS} pod sets, got {}", spec.pod_sets.len()),
        ));
    }
    for (i, set) in spec.pod_sets.iter().enumerate() {
        let name = &set.pod_template_ref.name;
        if name.is_empty() {
            out.push(FieldError::new(
                format!("spec.podSets[{i}].podTemplateRef.name"),
                "required (a PodTemplate in the request's namespace)",
            ));
        } else if name.len() > 253 || !dns_subdomain(name) {
            out.push(FieldError::new(
                format!("spec.podSets[{i}].podTemplateRef.name"),
                format!("\"{name}\" is not a valid object name (lowercase DNS subdomain, at most 253 characters)"),
            ));
        }
        if set.count < 1 {
            out.push(FieldError::new(
                format!("spec.podSets[{i}].count"),
                format!("must be at least 1, got {}", set.count),
            ));
        }
    }
    let class = &spec.provisioning_class_name;
    if class.is_empty() {
        out.push(FieldError::new(
            "spec.provisioningClassName",
            format!("required ({CLASS_CHECK_CAPACITY} or {CLASS_BEST_EFFORT_ATOMIC})"),
        ));
    } else if class.len() > MAX_CLASS_NAME_LENGTH || !dns_subdomain(class) {
        out.push(FieldError::new(
            "spec.provisioningClassName",
            format!("\"{class}\" is not a DNS subdomain of at most {MAX_CLASS_NAME_LENGTH} characters"),
        ));
    }
    if spec.parameters.len() > MAX_PARAMETERS {
        out.push(FieldError::new(
            "spec.parameters",
            format!("at most {MAX_PARAMETERS} parameters, got {}", spec.parameters.len()),
        ));
    }
    for (k, v) in &spec.parameters {
        if v.len() > MAX_PARAMETER_LENGTH {
            out.push(FieldError::new(
                format!("spec.parameters.{k}"),
                format!("at most {MAX_PARAMETER_LENGTH} characters, got {}", v.len()),
            ));
        }
    }
    if let Some(v) = spec.parameters.get(PARAM_NO_RETRY)
        && v != "true"
        && v != "false"
    {
        out.push(FieldError::new(
            format!("spec.parameters.{PARAM_NO_RETRY}"),
            format!("must be \"true\" or \"false\", got \"{v}\""),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(sets: Vec<PodSet>, class: &str) -> ProvisioningRequest {
        ProvisioningRequest {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: ObjectMeta { name: Some("job".into()), ..Default::default() },
            spec: ProvisioningRequestSpec {
                pod_sets: sets,
                provisioning_class_name: class.into(),
                parameters: BTreeMap::new(),
            },
            status: None,
        }
    }

    fn set(name: &str, count: i32) -> PodSet {
        PodSet { pod_template_ref: Reference { name: name.into() }, count }
    }

    #[test]
    fn validation_names_each_bad_field() {
        assert!(validate(&request(vec![set("workers", 32)], CLASS_BEST_EFFORT_ATOMIC)).is_empty());
        let bad = request(vec![set("", 1), set("Bad_Name", 0)], "Not A Class");
        let paths: Vec<String> = validate(&bad).into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "spec.podSets[0].podTemplateRef.name",
                "spec.podSets[1].podTemplateRef.name",
                "spec.podSets[1].count",
                "spec.provisioningClassName"
            ]
        );
        let none = request(Vec::new(), CLASS_CHECK_CAPACITY);
        assert_eq!(validate(&none)[0].path, "spec.podSets");
    }

    #[test]
    fn state_is_the_latest_reached() {
        let mut r = request(vec![set("w", 1)], CLASS_CHECK_CAPACITY);
        assert_eq!(r.state(), State::Pending);
        let cond = |t: &str| Condition {
            type_: t.into(),
            status: "True".into(),
            reason: None,
            message: None,
            last_transition_time: None,
            observed_generation: None,
        };
        let status = r.status.get_or_insert_with(Default::default);
        status.conditions.push(cond(CONDITION_ACCEPTED));
        status.conditions.push(cond(CONDITION_PROVISIONED));
        assert_eq!(r.state(), State::Provisioned);
        assert!(r.booked());
        r.status.as_mut().unwrap().conditions.push(cond(CONDITION_BOOKING_EXPIRED));
        assert_eq!(r.state(), State::BookingExpired);
        assert!(!r.booked());
    }

    #[test]
    fn either_consume_annotation_names_the_request() {
        let a: BTreeMap<String, String> = [(CONSUME_ANNOTATION_LEGACY.to_string(), "job".to_string())].into();
        assert_eq!(consumed_by(Some(&a)), Some("job"));
        assert_eq!(consumed_by(None), None);
    }
}
