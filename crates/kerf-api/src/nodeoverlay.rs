//! `karpenter.sh/v1alpha1` NodeOverlay: what a cluster's operators know about instance types
//! and the cloud does not say: the price they actually pay (a savings plan, a negotiated
//! discount, a licence fee: `price` or `priceAdjustment`) and extended resources a node will
//! advertise (`capacity`). `requirements` select the instance types and offerings an overlay
//! applies to, `weight` orders overlapping overlays.
//!
//! This module is the kind: its fields as Karpenter's CRD has them, and the CRD's checks with
//! precise errors. How overlays combine and change instance types is [`crate::overlay`]'s
//! (docs/design.md, "NodeOverlay").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::resources::ResourceList;
use crate::shared::{Condition, NodeSelectorRequirementWithMinValues, Operator, object_meta_schema};
use crate::validation::{FieldError, LabelUse, label_value_problem, qualified_name_problem, restricted_label_problem};

pub const GROUP: &str = "karpenter.sh";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "karpenter.sh/v1alpha1";
pub const KIND: &str = "NodeOverlay";

/// The overlay's spec passed its checks and does not conflict with another overlay.
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// The root condition: True when the overlay is applied (its `ValidationSucceeded` is True).
pub const CONDITION_READY: &str = "Ready";
/// Reason of `ValidationSucceeded=False` for an overlay of the same weight as another that
/// overlaps it and sets a different value.
pub const REASON_CONFLICT: &str = "Conflict";
/// Reason of `ValidationSucceeded=False` for a spec the checks refuse.
pub const REASON_INVALID: &str = "ValidationFailed";

/// Weights an overlay may have (unset: 0, the lowest).
pub const WEIGHT_RANGE: std::ops::RangeInclusive<i32> = 1..=10_000;
/// At most this many requirements.
pub const MAX_REQUIREMENTS: usize = 100;
/// Resources `capacity` may not name: an overlay only adds extended resources.
pub const STANDARD_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pods"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverlay {
    #[serde(default = "default_api_version")]
    pub api_version: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    pub spec: NodeOverlaySpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeOverlayStatus>,
}

fn default_api_version() -> String {
    API_VERSION.to_string()
}
fn default_kind() -> String {
    KIND.to_string()
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverlaySpec {
    /// Which instance types and offerings the overlay applies to (empty: all of them). Keys are
    /// instance-type labels, `topology.kubernetes.io/zone`, `karpenter.sh/capacity-type`,
    /// `karpenter.sh/nodepool` and the NodePool's template labels.
    pub requirements: Vec<OverlayRequirement>,
    /// The price to use instead of the cloud's (a non-negative decimal, e.g. `"0.05"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<String>,
    /// A change of the cloud's price: signed absolute (`"-0.05"`, `"+1.2"`) or a percentage
    /// (`"-30%"`, `"+10%"`; at most `-100%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_adjustment: Option<String>,
    /// Extended resources matching instance types gain (never cpu, memory, ephemeral-storage or
    /// pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ResourceList>,
    /// Precedence among overlays that apply to the same offering: higher wins (unset: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// A node selector requirement (NodeOverlays have no `minValues`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverlayRequirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverlayStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// How an overlay sets the price of the offerings it applies to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// `price`: this many currency units per hour.
    Set(f64),
    /// `priceAdjustment: "+0.1"` / `"-0.05"`: added to the cloud's price (never below 0).
    Add(f64),
    /// `priceAdjustment: "-30%"`: this many percent of the cloud's price added.
    Percent(f64),
}

impl PriceChange {
    /// The price of an offering the cloud lists at `list`, never below 0.
    pub fn apply(self, list: f64) -> f64 {
        let p = match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => list + d,
            PriceChange::Percent(pct) => list * (1.0 + pct / 100.0),
        };
        p.max(0.0)
    }
}

impl std::fmt::Display for PriceChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PriceChange::Set(p) => write!(f, "price {p}"),
            PriceChange::Add(d) => write!(f, "priceAdjustment {d:+}"),
            PriceChange::Percent(p) => write!(f, "priceAdjustment {p:+}%"),
        }
    }
}

/// Digits with at most one decimal point inside or in front (`\d*\.?\d+`, as the CRD's pattern).
fn is_decimal(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or(("", s));
    let digits = |x: &str| x.bytes().all(|b| b.is_ascii_digit());
    !frac.is_empty() && digits(int) && digits(frac)
}

/// `price`: a non-negative decimal with digits before the point (`^\d+(\.\d+)?$`).
pub fn parse_price(s: &str) -> Result<f64, String> {
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    let well_formed = match s.split_once('.') {
        Some((int, frac)) => digits(int) && digits(frac),
        None => digits(s),
    };
    if !well_formed {
        return Err(format!("{s:?} is not a price: a non-negative decimal such as \"0.05\""));
    }
    s.parse::<f64>().map_err(|e| format!("{s:?}: {e}"))
}

/// `priceAdjustment`: `+D` / `-D` (a signed decimal), `+P%`, or `-P%` with P at most 100.
pub fn parse_price_adjustment(s: &str) -> Result<PriceChange, String> {
    let bad = || {
        format!(
            "{s:?} is not a price adjustment: a signed amount (\"-0.05\", \"+1.2\") or percentage (\"-30%\", \"+10%\")"
        )
    };
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => return Err(bad()),
    };
    let sign = if negative { -1.0 } else { 1.0 };
    if let Some(pct) = rest.strip_suffix('%') {
        if !is_decimal(pct) {
            return Err(bad());
        }
        let v: f64 = pct.parse().map_err(|_| bad())?;
        if negative && v > 100.0 {
            return Err(format!("{s:?} takes off more than 100% of the price"));
        }
        return Ok(PriceChange::Percent(sign * v));
    }
    if !is_decimal(rest) {
        return Err(bad());
    }
    let v: f64 = rest.parse().map_err(|_| bad())?;
    Ok(PriceChange::Add(sign * v))
}

impl NodeOverlay {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The weight in force (0 when unset).
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// How the overlay changes prices, if it does (`Err`: the field does not parse).
    pub fn price_change(&self) -> Result<Option<PriceChange>, String> {
        match (&self.spec.price, &self.spec.price_adjustment) {
            (Some(p), _) => parse_price(p).map(|v| Some(PriceChange::Set(v))),
            (None, Some(a)) => parse_price_adjustment(a).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The requirements as node selector requirements (for [`crate::Requirements`]).
    pub fn node_selector(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        self.spec
            .requirements
            .iter()
            .map(|r| NodeSelectorRequirementWithMinValues {
                key: r.key.clone(),
                operator: r.operator,
                values: r.values.clone(),
                min_values: None,
            })
            .collect()
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// Every problem Karpenter's CRD validation reports for a NodeOverlay: the name; requirement
/// keys (qualified names outside the restricted domains, `karpenter.sh/nodepool` and
/// `karpenter.sh/capacity-type` allowed), operators' values; `price` and `priceAdjustment`
/// patterns, not both; `capacity` only extended resources, none negative; `weight` 1 to 10000.
pub fn validate(o: &NodeOverlay) -> Vec<FieldError> {
    let mut out = Vec::new();
    match o.metadata.name.as_deref() {
        None | Some("") => out.push(FieldError::new("metadata.name", "required")),
        Some(n) if !crate::validation::is_dns1123_subdomain(n) => out.push(FieldError::new(
            "metadata.name",
            format!("{n:?} is not a valid name: lower-case alphanumerics, '-' and '.', at most 253 characters"),
        )),
        Some(_) => {}
    }
    let spec = &o.spec;
    if spec.requirements.len() > MAX_REQUIREMENTS {
        out.push(FieldError::new(
            "spec.requirements",
            format!("has {} requirements, at most {MAX_REQUIREMENTS} are allowed", spec.requirements.len()),
        ));
    }
    for (i, r) in spec.requirements.iter().enumerate() {
        validate_requirement(r, &format!("spec.requirements[{i}]"), &mut out);
    }
    if spec.price.is_some() && spec.price_adjustment.is_some() {
        out.push(FieldError::new("spec", "cannot set both 'price' and 'priceAdjustment'"));
    }
    if let Some(p) = &spec.price
        && let Err(e) = parse_price(p)
    {
        out.push(FieldError::new("spec.price", e));
    }
    if let Some(a) = &spec.price_adjustment
        && let Err(e) = parse_price_adjustment(a)
    {
        out.push(FieldError::new("spec.priceAdjustment", e));
    }
    for (name, q) in spec.capacity.iter().flat_map(|c| c.0.iter()) {
        let path = format!("spec.capacity.{name}");
        if STANDARD_RESOURCES.contains(&name.as_str()) {
            out.push(FieldError::new(
                &path,
                format!("{name} is a standard resource: an overlay adds extended resources only"),
            ));
        } else if let Some(p) = qualified_name_problem(name) {
            out.push(FieldError::new(&path, p));
        }
        if q.is_negative() {
            out.push(FieldError::new(path, format!("must not be negative, got {q}")));
        }
    }
    if let Some(w) = spec.weight
        && !WEIGHT_RANGE.contains(&w)
    {
        out.push(FieldError::new("spec.weight", format!("must be between 1 and 10000, got {w}")));
    }
    out
}

fn validate_requirement(r: &OverlayRequirement, path: &str, out: &mut Vec<FieldError>) {
    let key_path = format!("{path}.key");
    if r.key.len() > 316 {
        out.push(FieldError::new(&key_path, "may not be longer than 316 characters"));
    }
    if let Some(p) = qualified_name_problem(&r.key) {
        out.push(FieldError::new(&key_path, p));
    } else if let Some(p) = restricted_label_problem(&r.key, LabelUse::NodeClaimRequirement) {
        out.push(FieldError::new(&key_path, p));
    }
    for (j, v) in r.values.iter().enumerate() {
        if let Some(p) = label_value_problem(v) {
            out.push(FieldError::new(format!("{path}.values[{j}]"), p));
        }
    }
    let values_path = format!("{path}.values");
    match r.operator {
        Operator::In | Operator::NotIn if r.values.is_empty() => out.push(FieldError::new(
            values_path,
            format!("requirements with operator '{}' must have a value defined", r.operator),
        )),
        Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => out.push(FieldError::new(
            values_path,
            format!("requirements with operator '{}' must not have values", r.operator),
        )),
        Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
            if !(r.values.len() == 1 && r.values[0].parse::<u64>().is_ok()) =>
        {
            out.push(FieldError::new(
                values_path,
                format!(
                    "requirements operator '{}' must have a single positive integer value, got {:?}",
                    r.operator, r.values
                ),
            ))
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_adjustments_parse_as_the_crd_pattern_allows() {
        assert_eq!(parse_price_adjustment("-30%"), Ok(PriceChange::Percent(-30.0)));
        assert_eq!(parse_price_adjustment("+10%"), Ok(PriceChange::Percent(10.0)));
        assert_eq!(parse_price_adjustment("-100%"), Ok(PriceChange::Percent(-100.0)));
        assert_eq!(parse_price_adjustment("+150%"), Ok(PriceChange::Percent(150.0)));
        assert_eq!(parse_price_adjustment("-0.05"), Ok(PriceChange::Add(-0.05)));
        assert_eq!(parse_price_adjustment("+.5"), Ok(PriceChange::Add(0.5)));
        for bad in ["0.05", "-101%", "10%", "-", "+%", "-1.", "+1e3", "", "-0.5.1"] {
            assert!(parse_price_adjustment(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse_price("5.00"), Ok(5.0));
        assert_eq!(parse_price("3"), Ok(3.0));
        for bad in ["-1", ".5", "5.", "1e2", ""] {
            assert!(parse_price(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_price_change_never_takes_the_price_below_zero() {
        assert!((PriceChange::Percent(-30.0).apply(0.1) - 0.07).abs() < 1e-12);
        assert_eq!(PriceChange::Add(-1.0).apply(0.1), 0.0);
        assert_eq!(PriceChange::Set(2.5).apply(0.1), 2.5);
        assert!((PriceChange::Add(0.25).apply(0.5) - 0.75).abs() < 1e-12);
    }
}
