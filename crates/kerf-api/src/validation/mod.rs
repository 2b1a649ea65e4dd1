//! Validation of NodePool, NodeClaim and EC2NodeClass objects, equal to the checks the API server
//! runs from Karpenter's v1 CRDs (OpenAPI patterns, enums, bounds and CEL rules).
//!
//! Every function returns all problems found, each with the JSON path of the offending field
//! (`spec.template.spec.requirements[0].values`), never only the first.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::duration::{GoDuration, NillableDuration};
use crate::nodeclaim::NodeClaim;
use crate::nodepool::{Budget, NodePool};
use crate::shared::{NodeClassReference, NodeSelectorRequirementWithMinValues, Operator, Taint};

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `spec.template.spec.requirements[0].operator`; empty for
    /// the document itself.
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() { f.write_str(&self.message) } else { write!(f, "{}: {}", self.path, self.message) }
    }
}

impl std::error::Error for FieldError {}

/// At most this many requirements per NodePool / NodeClaim.
pub const MAX_REQUIREMENTS: usize = 100;
/// At most this many template labels.
pub const MAX_LABELS: usize = 100;
/// At most this many disruption budgets.
pub const MAX_BUDGETS: usize = 50;
/// `minValues` bounds.
pub const MIN_VALUES_RANGE: std::ops::RangeInclusive<i64> = 1..=50;
/// NodePool weight bounds.
pub const WEIGHT_RANGE: std::ops::RangeInclusive<i32> = 1..=100;
/// At most this many selector terms of each kind in an EC2NodeClass.
pub const MAX_SELECTOR_TERMS: usize = 30;
/// At most this many block device mappings.
pub const MAX_BLOCK_DEVICE_MAPPINGS: usize = 50;

/// AMI alias families (`family@version`).
pub const AMI_ALIAS_FAMILIES: &[&str] = &["al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025"];

/// Eviction signals the kubelet settings accept.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// Resources `kubeReserved` / `systemReserved` accept.
pub const RESERVED_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// EBS volume types.
pub const EBS_VOLUME_TYPES: &[&str] = &["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"];

/// Tag keys Karpenter sets itself on EC2 resources; users may not set them.
pub const RESTRICTED_TAG_KEYS: &[&str] =
    &["eks:eks-cluster-name", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass"];

/// At most this many tags in one selector term.
pub const MAX_SELECTOR_TAGS: usize = 20;
/// Tag key prefix reserved for cluster ownership.
pub const RESTRICTED_TAG_PREFIX: &str = "kubernetes.io/cluster";

/// Where a label key is used: the rules differ slightly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelUse {
    /// A NodePool's template labels (`karpenter.sh/nodepool` is set by Karpenter itself).
    NodePoolLabel,
    /// A NodePool requirement key (`karpenter.sh/nodepool` is implied by the pool).
    NodePoolRequirement,
    /// A NodeClaim requirement key (`karpenter.sh/nodepool` allowed: it names the owner).
    NodeClaimRequirement,
}

/// Collects problems with paths.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(path, message));
    }
}

// ---------------------------------------------------------------------------------------------
// Syntax of names, labels and values.

/// A DNS-1123 label: lower-case alphanumerics and `-`, starting and ending alphanumeric, ≤63.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A DNS-1123 subdomain: dot-separated DNS labels, ≤253.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// The name part of a qualified name / a non-empty label value: alphanumeric at both ends,
/// `-`, `_`, `.` inside, at most 63 characters.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Why `key` is not a valid qualified name (`[prefix/]name`), if it is not.
pub fn qualified_name_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("must not be empty".to_string());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns1123_subdomain(p)
    {
        return Some(format!(
            "{key:?} is not a valid label key: the prefix {p:?} must be a DNS subdomain (lower-case alphanumerics, '-' and '.', at most 253 characters)"
        ));
    }
    if name.contains('/') {
        return Some(format!("{key:?} is not a valid label key: at most one '/' is allowed"));
    }
    if !is_name_part(name) {
        return Some(format!(
            "{key:?} is not a valid label key: the name {name:?} must be 1-63 characters, alphanumeric at both ends, with '-', '_' or '.' inside"
        ));
    }
    None
}

/// Why `value` is not a valid label value, if it is not (empty is valid).
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || is_name_part(value) {
        return None;
    }
    if value.len() > 63 {
        return Some(format!("label value {value:?} is longer than 63 characters"));
    }
    Some(format!("label value {value:?} must be alphanumeric at both ends, with '-', '_' or '.' inside"))
}

/// Why `key` may not be used where `usage` says, per the restricted label domains
/// ([`crate::labels::RESTRICTED_DOMAINS`]).
pub fn restricted_label_problem(key: &str, usage: LabelUse) -> Option<String> {
    // The specific keys first: their messages say more than the domain's.
    if key == crate::labels::NODE_POOL && usage != LabelUse::NodeClaimRequirement {
        return Some("label \"karpenter.sh/nodepool\" is restricted: Karpenter sets it from the NodePool".to_string());
    }
    if key == crate::labels::HOSTNAME {
        return Some("label \"kubernetes.io/hostname\" is restricted".to_string());
    }
    crate::labels::restricted_domain_of(key).map(|d| format!("label domain {:?} is restricted ({key:?})", d.domain))
}

// ---------------------------------------------------------------------------------------------
// Shared pieces.

fn validate_object_name(name: Option<&str>, errs: &mut Errors) {
    match name {
        None | Some("") => errs.push("metadata.name", "required"),
        Some(n) if !is_dns1123_subdomain(n) => errs.push(
            "metadata.name",
            format!("{n:?} is not a valid name: lower-case alphanumerics, '-' and '.', at most 253 characters"),
        ),
        Some(_) => {}
    }
}

fn validate_requirements(
    reqs: &[NodeSelectorRequirementWithMinValues],
    path: &str,
    usage: LabelUse,
    errs: &mut Errors,
) {
    if reqs.len() > MAX_REQUIREMENTS {
        errs.push(path, format!("has {} requirements, at most {MAX_REQUIREMENTS} are allowed", reqs.len()));
    }
    for (i, r) in reqs.iter().enumerate() {
        validate_requirement(r, &format!("{path}[{i}]"), usage, errs);
    }
}

fn validate_requirement(r: &NodeSelectorRequirementWithMinValues, path: &str, usage: LabelUse, errs: &mut Errors) {
    let key_path = format!("{path}.key");
    if r.key.len() > 316 {
        errs.push(&key_path, "may not be longer than 316 characters");
    }
    if let Some(p) = qualified_name_problem(&r.key) {
        errs.push(&key_path, p);
    } else if let Some(p) = restricted_label_problem(&r.key, usage) {
        errs.push(&key_path, p);
    }
    for (j, v) in r.values.iter().enumerate() {
        if let Some(p) = label_value_problem(v) {
            errs.push(format!("{path}.values[{j}]"), p);
        }
    }
    let values_path = format!("{path}.values");
    match r.operator {
        Operator::In => {
            if r.values.is_empty() {
                errs.push(&values_path, "requirements with operator 'In' must have a value defined");
            }
        }
        Operator::NotIn => {}
        Operator::Exists | Operator::DoesNotExist => {
            if !r.values.is_empty() {
                errs.push(&values_path, format!("requirements with operator '{}' must not have values", r.operator));
            }
        }
        Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
            let single_integer = r.values.len() == 1 && r.values[0].parse::<u64>().is_ok();
            if !single_integer {
                errs.push(
                    &values_path,
                    format!(
                        "requirements with operator '{}' must have a single non-negative integer value, got {:?}",
                        r.operator, r.values
                    ),
                );
            }
        }
    }
    if let Some(mv) = r.min_values {
        let mv_path = format!("{path}.minValues");
        if !MIN_VALUES_RANGE.contains(&mv) {
            errs.push(&mv_path, format!("must be between 1 and 50, got {mv}"));
        } else if r.operator == Operator::In && (r.values.len() as i64) < mv {
            errs.push(
                &mv_path,
                format!(
                    "requirements with 'minValues' must have at least that many values specified in the 'values' field (minValues {mv}, {} values)",
                    r.values.len()
                ),
            );
        }
    }
}

fn validate_taints(taints: &[Taint], path: &str, errs: &mut Errors) {
    for (i, t) in taints.iter().enumerate() {
        let p = format!("{path}[{i}]");
        if let Some(problem) = qualified_name_problem(&t.key) {
            errs.push(format!("{p}.key"), problem);
        }
        // The CRD gives taint values the qualified-name pattern (an optional `prefix/`).
        if let Some(v) = &t.value
            && !v.is_empty()
            && qualified_name_problem(v).is_some()
        {
            errs.push(
                format!("{p}.value"),
                format!("taint value {v:?} must be alphanumeric at both ends, with '-', '_' or '.' inside (optionally prefix/value)"),
            );
        }
    }
}

fn validate_node_class_ref(r: &NodeClassReference, path: &str, errs: &mut Errors) {
    if r.group.is_empty() {
        errs.push(format!("{path}.group"), "group may not be empty");
    } else if r.group.contains('/') || r.group.len() > 253 {
        errs.push(
            format!("{path}.group"),
            format!("{:?} is not an API group (no '/', at most 253 characters)", r.group),
        );
    }
    if r.kind.is_empty() {
        errs.push(format!("{path}.kind"), "kind may not be empty");
    } else if r.kind.len() > 63 {
        errs.push(format!("{path}.kind"), "may not be longer than 63 characters");
    }
    if r.name.is_empty() {
        errs.push(format!("{path}.name"), "name may not be empty");
    } else if r.name.len() > 253 {
        errs.push(format!("{path}.name"), "may not be longer than 253 characters");
    }
}

/// The CRDs accept only whole seconds (`^([0-9]+(s|m|h))+$`): no `ms`, `us`, `ns` precision.
fn check_whole_seconds(d: &GoDuration, path: &str, errs: &mut Errors) {
    if d.0.subsec_nanos() != 0 {
        errs.push(path, format!("{d} is not a whole number of seconds (use s, m or h units)"));
    }
}

fn check_nillable(d: &NillableDuration, path: &str, errs: &mut Errors) {
    if let Some(d) = &d.0 {
        check_whole_seconds(d, path, errs);
    }
}

// ---------------------------------------------------------------------------------------------
// NodePool.

/// Whether `nodes` of a budget is an integer or a percentage 0-100%.
pub fn is_budget_nodes(nodes: &str) -> bool {
    if let Some(pct) = nodes.strip_suffix('%') {
        // `100%` or one or two digits.
        pct == "100" || (!pct.is_empty() && pct.len() <= 2 && pct.bytes().all(|b| b.is_ascii_digit()))
    } else {
        !nodes.is_empty() && nodes.bytes().all(|b| b.is_ascii_digit())
    }
}

/// Parses a budget schedule: five cron fields or one of the `@` macros, no time zone.
pub fn parse_budget_schedule(schedule: &str) -> Result<croner::Cron, String> {
    let s = schedule.trim();
    let s = match s {
        "@midnight" => "@daily",
        "@annually" => "@yearly",
        other => other,
    };
    if s.starts_with('@') && !matches!(s, "@yearly" | "@monthly" | "@weekly" | "@daily" | "@hourly") {
        return Err(format!(
            "{schedule:?} is not a valid schedule: macros are @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly"
        ));
    }
    if s.to_ascii_uppercase().starts_with("TZ=") || s.to_ascii_uppercase().starts_with("CRON_TZ=") {
        return Err(format!("{schedule:?}: time zones are not supported in budget schedules"));
    }
    if !s.starts_with('@') && s.split_whitespace().count() != 5 {
        return Err(format!(
            "{schedule:?} is not a valid schedule: expected 5 cron fields (minute hour day-of-month month day-of-week) or a macro such as @daily"
        ));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(s)
        .map_err(|e| format!("{schedule:?} is not a valid cron schedule: {e}"))
}

fn validate_budget(b: &Budget, path: &str, errs: &mut Errors) {
    if !is_budget_nodes(&b.nodes) {
        errs.push(
            format!("{path}.nodes"),
            format!("{:?} must be a non-negative integer or a percentage from 0% to 100%", b.nodes),
        );
    }
    match (&b.schedule, &b.duration) {
        (Some(_), None) => errs.push(format!("{path}.duration"), "'schedule' must be set with 'duration'"),
        (None, Some(_)) => errs.push(format!("{path}.schedule"), "'schedule' must be set with 'duration'"),
        _ => {}
    }
    if let Some(s) = &b.schedule
        && let Err(e) = parse_budget_schedule(s)
    {
        errs.push(format!("{path}.schedule"), e);
    }
    if let Some(reasons) = &b.reasons {
        // A list of type set: no duplicates.
        for (i, r) in reasons.iter().enumerate() {
            if reasons[..i].contains(r) {
                errs.push(format!("{path}.reasons[{i}]"), format!("Duplicate value: {r:?}"));
            }
        }
        if reasons.len() > 50 {
            errs.push(format!("{path}.reasons"), "at most 50 reasons are allowed");
        }
    }
    if let Some(d) = &b.duration
        && !d.0.as_nanos().is_multiple_of(Duration::from_secs(60).as_nanos())
    {
        errs.push(format!("{path}.duration"), format!("{d} must be whole minutes or hours (e.g. 30m, 1h, 1h30m)"));
    }
}

fn validate_template_labels(labels: &BTreeMap<String, String>, path: &str, errs: &mut Errors) {
    if labels.len() > MAX_LABELS {
        errs.push(path, format!("has {} labels, at most {MAX_LABELS} are allowed", labels.len()));
    }
    for (k, v) in labels {
        let p = format!("{path}[{k}]");
        if let Some(problem) = qualified_name_problem(k) {
            errs.push(&p, problem);
        } else if let Some(problem) = restricted_label_problem(k, LabelUse::NodePoolLabel) {
            errs.push(&p, problem);
        }
        if let Some(problem) = label_value_problem(v) {
            errs.push(&p, problem);
        }
    }
}

fn validate_annotations(annotations: &BTreeMap<String, String>, path: &str, errs: &mut Errors) {
    for k in annotations.keys() {
        if let Some(problem) = qualified_name_problem(k) {
            errs.push(format!("{path}[{k}]"), problem.replacen("label key", "annotation key", 1));
        }
    }
}

/// Checks a NodePool against Karpenter's CRD rules.
pub fn validate_node_pool(np: &NodePool) -> Vec<FieldError> {
    let mut errs = Errors::default();
    validate_object_name(np.metadata.name.as_deref(), &mut errs);
    let spec = &np.spec;
    let tmpl = &spec.template;
    validate_template_labels(&tmpl.metadata.labels, "spec.template.metadata.labels", &mut errs);
    validate_annotations(&tmpl.metadata.annotations, "spec.template.metadata.annotations", &mut errs);
    let ts = &tmpl.spec;
    validate_taints(&ts.taints, "spec.template.spec.taints", &mut errs);
    validate_taints(&ts.startup_taints, "spec.template.spec.startupTaints", &mut errs);
    validate_requirements(
        &ts.requirements,
        "spec.template.spec.requirements",
        LabelUse::NodePoolRequirement,
        &mut errs,
    );
    validate_node_class_ref(&ts.node_class_ref, "spec.template.spec.nodeClassRef", &mut errs);
    check_nillable(&ts.expire_after, "spec.template.spec.expireAfter", &mut errs);
    if let Some(d) = &ts.termination_grace_period {
        check_whole_seconds(d, "spec.template.spec.terminationGracePeriod", &mut errs);
    }

    let d = &spec.disruption;
    check_nillable(&d.consolidate_after, "spec.disruption.consolidateAfter", &mut errs);
    if d.budgets.len() > MAX_BUDGETS {
        errs.push(
            "spec.disruption.budgets",
            format!("has {} budgets, at most {MAX_BUDGETS} are allowed", d.budgets.len()),
        );
    }
    for (i, b) in d.budgets.iter().enumerate() {
        validate_budget(b, &format!("spec.disruption.budgets[{i}]"), &mut errs);
    }

    if let Some(w) = spec.weight
        && !WEIGHT_RANGE.contains(&w)
    {
        errs.push("spec.weight", format!("must be between 1 and 100, got {w}"));
    }
    if let Some(r) = spec.replicas {
        if r < 0 {
            errs.push("spec.replicas", format!("must be 0 or more, got {r}"));
        }
        if let Some(limits) = &spec.limits {
            for (name, _) in limits.iter().filter(|(name, _)| name.as_str() != "nodes") {
                errs.push(
                    format!("spec.limits[{name}]"),
                    "only 'limits.nodes' is supported on static NodePools (replicas is set)",
                );
            }
        }
        if spec.weight.is_some() {
            errs.push("spec.weight", "'weight' is not supported on static NodePools (replicas is set)");
        }
    }
    errs.0
}

// ---------------------------------------------------------------------------------------------
// NodeClaim.

/// Checks a NodeClaim against Karpenter's CRD rules.
pub fn validate_node_claim(nc: &NodeClaim) -> Vec<FieldError> {
    let mut errs = Errors::default();
    validate_object_name(nc.metadata.name.as_deref(), &mut errs);
    let s = &nc.spec;
    validate_taints(&s.taints, "spec.taints", &mut errs);
    validate_taints(&s.startup_taints, "spec.startupTaints", &mut errs);
    validate_requirements(&s.requirements, "spec.requirements", LabelUse::NodeClaimRequirement, &mut errs);
    validate_node_class_ref(&s.node_class_ref, "spec.nodeClassRef", &mut errs);
    check_nillable(&s.expire_after, "spec.expireAfter", &mut errs);
    if let Some(d) = &s.termination_grace_period {
        check_whole_seconds(d, "spec.terminationGracePeriod", &mut errs);
    }
    errs.0
}

mod ec2nodeclass;
pub use ec2nodeclass::{ami_alias_family, is_eviction_threshold, validate_ec2_node_class};
