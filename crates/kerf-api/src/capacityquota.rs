//! `autoscaling.x-k8s.io/v1beta1` CapacityQuota: SIG Autoscaling's limit on the total resources
//! of the nodes a label selector picks, across NodePools (the "granular resource limits" shared
//! by node autoscalers; Cluster Autoscaler serves the same kind).
//!
//! A quota names a selector over Node labels (absent or empty: every node) and limits per
//! resource (`cpu`, `memory`, `nodes` for the node count, any extended resource). The
//! autoscaler keeps the sum over the selected nodes, launching ones included, within each
//! limit, and writes that sum to `status.used.resources`. Field names are upstream's; what
//! kerf makes of them is docs/design.md, "CapacityQuota".

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::requirements::Requirement;
use crate::resources::ResourceList;
use crate::shared::{Condition, object_meta_schema};
use crate::validation::FieldError;

pub const GROUP: &str = "autoscaling.x-k8s.io";
pub const API_VERSION: &str = "autoscaling.x-k8s.io/v1beta1";
pub const KIND: &str = "CapacityQuota";
/// The limit on the number of selected nodes.
pub const NODES: &str = crate::resources::NODES;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityQuota {
    #[serde(default = "default_api_version")]
    pub api_version: String,
    #[serde(default = "default_kind")]
    pub kind: String,
    #[serde(default)]
    #[schemars(schema_with = "object_meta_schema")]
    pub metadata: ObjectMeta,
    pub spec: CapacityQuotaSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CapacityQuotaStatus>,
}

fn default_api_version() -> String {
    API_VERSION.to_string()
}
fn default_kind() -> String {
    KIND.to_string()
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityQuotaSpec {
    /// The nodes the quota counts, by their labels; absent or empty: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<NodeLabelSelector>,
    pub limits: QuotaResources,
}

/// A label selector over Node labels (metav1.LabelSelector's shape).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeLabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One `matchExpressions` entry: `In`, `NotIn`, `Exists` or `DoesNotExist`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// `{resources: {cpu: 64, memory: 256Gi, nodes: 10}}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuotaResources {
    #[serde(default)]
    pub resources: ResourceList,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityQuotaStatus {
    /// The sum over the selected nodes of each limited resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<QuotaResources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl CapacityQuota {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The limits (`spec.limits.resources`).
    pub fn limits(&self) -> &ResourceList {
        &self.spec.limits.resources
    }

    /// Whether the quota counts a node with `labels`.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.spec.selector.as_ref().is_none_or(|s| s.matches(|k| labels.get(k).map(String::as_str)))
    }

    /// Whether a node that will carry `labels` may be one the quota selects, when the labels
    /// named in `open` (those its launch decides: zone, capacity type) are not known yet and
    /// may take any value `allowed(key)` admits (`None`: any value). Each term of the selector
    /// is asked on its own: a node counts when some launch could give it labels that match.
    pub fn may_select<'r>(
        &self,
        labels: &BTreeMap<String, String>,
        open: &[&str],
        allowed: impl Fn(&str) -> Option<&'r Requirement>,
    ) -> bool {
        let Some(sel) = &self.spec.selector else { return true };
        let undecided = |k: &str| !labels.contains_key(k) && open.contains(&k);
        let may_be = |k: &str, v: &str| allowed(k).is_none_or(|r| r.has(v));
        sel.match_labels.iter().all(|(k, v)| if undecided(k) { may_be(k, v) } else { labels.get(k) == Some(v) })
            && sel.match_expressions.iter().all(|e| {
                if !undecided(&e.key) {
                    return e.matches(labels.get(&e.key).map(String::as_str));
                }
                match e.operator.as_str() {
                    "In" => e.values.iter().any(|v| may_be(&e.key, v)),
                    "NotIn" => allowed(&e.key)
                        .and_then(Requirement::values)
                        .is_none_or(|vals| vals.iter().any(|v| !e.values.contains(v))),
                    "Exists" => true,
                    _ => false,
                }
            })
    }

    /// `status.used.resources`, empty before it was written.
    pub fn used(&self) -> ResourceList {
        self.status.as_ref().and_then(|s| s.used.as_ref()).map(|u| u.resources.clone()).unwrap_or_default()
    }
}

impl NodeLabelSelector {
    /// Whether labels read through `label` satisfy every term (an empty selector: always).
    /// An unknown operator matches nothing (`kerf validate` refuses it).
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.match_labels.iter().all(|(k, v)| label(k) == Some(v.as_str()))
            && self.match_expressions.iter().all(|e| e.matches(label(&e.key)))
    }

    /// The keys the selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.match_labels.keys().map(String::as_str).chain(self.match_expressions.iter().map(|e| e.key.as_str()))
    }
}

impl SelectorRequirement {
    /// Whether a label of value `have` (`None`: absent) satisfies the term.
    pub fn matches(&self, have: Option<&str>) -> bool {
        let listed = |h: &str| self.values.iter().any(|v| v == h);
        match self.operator.as_str() {
            "In" => have.is_some_and(listed),
            "NotIn" => have.is_none_or(|h| !listed(h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    }
}

/// Whether `s` is a valid label key (an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric).
fn label_key_ok(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                let b = part.as_bytes();
                let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
                !b.is_empty()
                    && b.first().is_some_and(edge)
                    && b.last().is_some_and(edge)
                    && b.iter().all(|c| edge(c) || *c == b'-')
            })
    });
    prefix_ok && label_value_ok(name) && !name.is_empty()
}

/// Whether `s` is a valid label value (empty, or at most 63 alphanumerics, `-`, `_`, `.`,
/// starting and ending alphanumeric).
fn label_value_ok(s: &str) -> bool {
    let b = s.as_bytes();
    s.is_empty()
        || (b.len() <= 63
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

/// Every problem with a CapacityQuota: a selector that is not a valid label selector (bad
/// keys or values, an unknown operator, `In`/`NotIn` without values, `Exists`/`DoesNotExist`
/// with some), no limits or more than [`MAX_LIMITS`], a resource name over 63 characters, and
/// limits that are negative or not whole numbers (upstream's CRD allows integers only).
pub fn validate(q: &CapacityQuota) -> Vec<FieldError> {
    let mut out = Vec::new();
    if let Some(sel) = &q.spec.selector {
        for (k, v) in &sel.match_labels {
            if !label_key_ok(k) {
                out.push(FieldError::new(format!("spec.selector.matchLabels[{k}]"), "not a valid label key"));
            }
            if !label_value_ok(v) {
                out.push(FieldError::new(
                    format!("spec.selector.matchLabels[{k}]"),
                    format!("{v:?} is not a valid label value"),
                ));
            }
        }
        for (i, e) in sel.match_expressions.iter().enumerate() {
            let path = format!("spec.selector.matchExpressions[{i}]");
            if !label_key_ok(&e.key) {
                out.push(FieldError::new(format!("{path}.key"), format!("{:?} is not a valid label key", e.key)));
            }
            match e.operator.as_str() {
                "In" | "NotIn" if e.values.is_empty() => out.push(FieldError::new(
                    format!("{path}.values"),
                    format!("must not be empty for operator {}", e.operator),
                )),
                "Exists" | "DoesNotExist" if !e.values.is_empty() => out.push(FieldError::new(
                    format!("{path}.values"),
                    format!("must be empty for operator {}", e.operator),
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => out.push(FieldError::new(
                    format!("{path}.operator"),
                    format!("unknown operator {other:?} (In, NotIn, Exists or DoesNotExist)"),
                )),
            }
            for v in e.values.iter().filter(|v| !label_value_ok(v)) {
                out.push(FieldError::new(format!("{path}.values"), format!("{v:?} is not a valid label value")));
            }
        }
    }
    let limits = q.limits();
    if limits.is_empty() {
        out.push(FieldError::new("spec.limits.resources", "must name at least one resource"));
    }
    if limits.0.len() > MAX_LIMITS {
        out.push(FieldError::new(
            "spec.limits.resources",
            format!("may name at most {MAX_LIMITS} resources, got {}", limits.0.len()),
        ));
    }
    for (name, v) in limits.iter() {
        let path = format!("spec.limits.resources[{name}]");
        if name.len() > 63 {
            out.push(FieldError::new(
                path.clone(),
                format!("a resource name is at most 63 characters, got {}", name.len()),
            ));
        }
        if v.is_negative() {
            out.push(FieldError::new(path, format!("must not be negative, got {v}")));
        } else if v.nanos() % 1_000_000_000 != 0 {
            let what = if name == NODES { "a node count" } else { "a limit" };
            out.push(FieldError::new(path, format!("{what} must be a whole number, got {v}")));
        }
    }
    out
}

/// At most this many limited resources per quota (upstream's CRD).
pub const MAX_LIMITS: usize = 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(yaml: &str) -> CapacityQuota {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn an_absent_or_empty_selector_selects_every_node_and_terms_all_must_hold() {
        let all = quota("metadata: {name: all}\nspec: {limits: {resources: {cpu: 64}}}");
        assert!(all.selects(&labels(&[])));
        let empty = quota("metadata: {name: e}\nspec: {selector: {}, limits: {resources: {cpu: 64}}}");
        assert!(empty.selects(&labels(&[("a", "b")])));
        let team = quota(
            "metadata: {name: t}\nspec:\n  selector:\n    matchLabels: {team: a}\n    matchExpressions:\n    \
             - {key: karpenter.sh/capacity-type, operator: NotIn, values: [spot]}\n  limits: {resources: {cpu: 64}}",
        );
        assert!(team.selects(&labels(&[("team", "a"), ("karpenter.sh/capacity-type", "on-demand")])));
        assert!(team.selects(&labels(&[("team", "a")])));
        assert!(!team.selects(&labels(&[("team", "a"), ("karpenter.sh/capacity-type", "spot")])));
        assert!(!team.selects(&labels(&[("team", "b")])));
    }

    #[test]
    fn validation_names_the_field_and_the_problem() {
        let q = quota(
            "metadata: {name: bad}\nspec:\n  selector:\n    matchLabels: {'bad key!': x}\n    matchExpressions:\n    \
             - {key: team, operator: Near, values: [a]}\n    - {key: zone, operator: In}\n  \
             limits: {resources: {cpu: '-4', nodes: '1.5'}}",
        );
        let got: Vec<String> = validate(&q).into_iter().map(|e| format!("{}: {}", e.path, e.message)).collect();
        assert_eq!(
            got,
            [
                "spec.selector.matchLabels[bad key!]: not a valid label key",
                "spec.selector.matchExpressions[0].operator: unknown operator \"Near\" (In, NotIn, Exists or DoesNotExist)",
                "spec.selector.matchExpressions[1].values: must not be empty for operator In",
                "spec.limits.resources[cpu]: must not be negative, got -4",
                "spec.limits.resources[nodes]: a node count must be a whole number, got 1500m",
            ]
        );
        let none = quota("metadata: {name: n}\nspec: {limits: {resources: {}}}");
        assert_eq!(validate(&none)[0].path, "spec.limits.resources");
    }

    #[test]
    fn a_launch_that_may_land_in_a_selected_offering_may_be_selected() {
        use crate::requirements::Requirements;
        use crate::shared::Operator;
        let q: CapacityQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "spot"},
            "spec": {"selector": {"matchLabels": {"team": "a", "karpenter.sh/capacity-type": "spot"}},
                     "limits": {"resources": {"cpu": "16"}}}
        }))
        .unwrap();
        let labels: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        let open = ["karpenter.sh/capacity-type", "topology.kubernetes.io/zone"];
        let with = |values: &[&str]| {
            let mut r = Requirements::default();
            r.add("karpenter.sh/capacity-type", Requirement::new(Operator::In, values));
            r
        };
        let either = with(&["spot", "on-demand"]);
        let on_demand = with(&["on-demand"]);
        assert!(q.may_select(&labels, &open, |k| either.get(k)), "may launch spot");
        assert!(!q.may_select(&labels, &open, |k| on_demand.get(k)), "on-demand only");
        assert!(q.may_select(&labels, &open, |_| None), "nothing decided yet");
        assert!(!q.may_select(&labels, &[], |k| either.get(k)), "a key not open must be a label");
        let other: BTreeMap<String, String> = [("team".to_string(), "b".to_string())].into();
        assert!(!q.may_select(&other, &open, |k| either.get(k)), "other labels still decide");
    }
}
