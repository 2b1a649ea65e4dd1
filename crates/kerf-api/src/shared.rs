//! Types shared by NodePool, NodeClaim and EC2NodeClass.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A requirement operator. Karpenter adds `Gte`/`Lte` to the core Kubernetes set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    /// Parses an operator name as it appears in a pod's node affinity (`"In"`, `"Gt"`, ...).
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node selector requirement with Karpenter's `minValues` (minimum distinct values of the key
/// across the instance types a NodeClaim may launch).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorRequirementWithMinValues {
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(&self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }

    pub fn parse(s: &str) -> Option<TaintEffect> {
        Some(match s {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            _ => return None,
        })
    }
}

/// A node taint (core/v1 Taint, with the effect typed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: TaintEffect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub time_added: Option<Time>,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) if !v.is_empty() => write!(f, "{}={}:{}", self.key, v, self.effect.as_str()),
            _ => write!(f, "{}:{}", self.key, self.effect.as_str()),
        }
    }
}

impl Taint {
    pub fn new(key: impl Into<String>, value: Option<&str>, effect: TaintEffect) -> Self {
        Taint { key: key.into(), value: value.map(str::to_string), effect, time_added: None }
    }

    /// Converts to the core/v1 type used on Node objects.
    pub fn to_core(&self) -> k8s_openapi::api::core::v1::Taint {
        k8s_openapi::api::core::v1::Taint {
            key: self.key.clone(),
            value: self.value.clone(),
            effect: self.effect.as_str().to_string(),
            time_added: self.time_added.clone(),
        }
    }

    /// Converts from the core/v1 type; `None` when the effect is not a known one.
    pub fn from_core(t: &k8s_openapi::api::core::v1::Taint) -> Option<Self> {
        Some(Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: TaintEffect::parse(&t.effect)?,
            time_added: t.time_added.clone(),
        })
    }
}

/// Reference to the cloud provider's node class (e.g. an EC2NodeClass).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClassReference {
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[^/]*$"))]
    pub group: String,
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A status condition (metav1.Condition shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// Finds a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Sets (or replaces) a condition, keeping `lastTransitionTime` when the status is unchanged.
pub fn set_condition(conditions: &mut Vec<Condition>, mut cond: Condition) {
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == cond.type_) {
        if existing.status == cond.status {
            cond.last_transition_time = existing.last_transition_time.clone();
        }
        *existing = cond;
    } else {
        conditions.push(cond);
    }
}

/// The root condition (`Ready`) over its dependents: True when every dependent is True; else
/// the first False one's status, reason and message (in `dependents` order), else the first one
/// that is Unknown or missing. The caller stamps time and generation.
pub fn root_condition(conditions: &[Condition], type_: &str, dependents: &[&str]) -> Condition {
    let of = |t: &str| find_condition(conditions, t);
    let pick = dependents
        .iter()
        .find(|t| of(t).is_some_and(|c| c.status == "False"))
        .or_else(|| dependents.iter().find(|t| of(t).is_none_or(|c| c.status != "True")));
    let (status, reason, message) = match pick {
        None => ("True".to_string(), Some(type_.to_string()), None),
        Some(t) => match of(t) {
            Some(c) => (c.status.clone(), c.reason.clone(), c.message.clone()),
            None => {
                ("Unknown".to_string(), Some("AwaitingReconciliation".to_string()), Some(format!("{t} is unknown")))
            }
        },
    };
    Condition {
        type_: type_.to_string(),
        status,
        reason,
        message,
        last_transition_time: None,
        observed_generation: None,
    }
}

/// Schema for embedded object metadata: CRDs only declare it as an object.
pub(crate) fn object_meta_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}
