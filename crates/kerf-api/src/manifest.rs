//! Decoding Karpenter manifests from YAML documents, with field paths in every problem.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;
use serde_yaml_ng::Value;

use crate::capacitybuffer::{self, CapacityBuffer};
use crate::capacityquota::{self, CapacityQuota};
use crate::ec2nodeclass::{self, EC2NodeClass};
use crate::nodeclaim::{self, NodeClaim};
use crate::nodeoverlay::{self, NodeOverlay};
use crate::nodepool::{self, NodePool};
use crate::provisioningrequest::{self, ProvisioningRequest};
use crate::validation::{self, FieldError};

/// One of the Karpenter kinds kerf reads, or SIG Autoscaling's CapacityBuffer,
/// ProvisioningRequest or CapacityQuota.
// Objects are decoded once and handed on whole; boxing would only add indirection for callers.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum KarpenterObject {
    NodePool(NodePool),
    NodeClaim(NodeClaim),
    EC2NodeClass(EC2NodeClass),
    CapacityBuffer(CapacityBuffer),
    NodeOverlay(NodeOverlay),
    ProvisioningRequest(ProvisioningRequest),
    CapacityQuota(CapacityQuota),
}

impl KarpenterObject {
    pub fn kind(&self) -> &'static str {
        match self {
            KarpenterObject::NodePool(_) => nodepool::KIND,
            KarpenterObject::NodeClaim(_) => nodeclaim::KIND,
            KarpenterObject::EC2NodeClass(_) => ec2nodeclass::KIND,
            KarpenterObject::CapacityBuffer(_) => capacitybuffer::KIND,
            KarpenterObject::NodeOverlay(_) => nodeoverlay::KIND,
            KarpenterObject::ProvisioningRequest(_) => provisioningrequest::KIND,
            KarpenterObject::CapacityQuota(_) => capacityquota::KIND,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            KarpenterObject::NodePool(o) => o.name(),
            KarpenterObject::NodeClaim(o) => o.name(),
            KarpenterObject::EC2NodeClass(o) => o.name(),
            KarpenterObject::CapacityBuffer(o) => o.name(),
            KarpenterObject::NodeOverlay(o) => o.name(),
            KarpenterObject::ProvisioningRequest(o) => o.name(),
            KarpenterObject::CapacityQuota(o) => o.name(),
        }
    }

    /// Every problem the CRD validation would report for this object.
    pub fn validate(&self) -> Vec<FieldError> {
        match self {
            KarpenterObject::NodePool(o) => validation::validate_node_pool(o),
            KarpenterObject::NodeClaim(o) => validation::validate_node_claim(o),
            KarpenterObject::EC2NodeClass(o) => validation::validate_ec2_node_class(o),
            KarpenterObject::CapacityBuffer(o) => capacitybuffer::validate(o),
            KarpenterObject::NodeOverlay(o) => nodeoverlay::validate(o),
            KarpenterObject::ProvisioningRequest(o) => provisioningrequest::validate(o),
            KarpenterObject::CapacityQuota(o) => capacityquota::validate(o),
        }
    }
}

/// A problem with one field of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: String,
    pub name: String,
    /// Field path, e.g. `spec.template.spec.requirements[0].operator`; empty for the whole object.
    pub path: String,
    pub message: String,
}

impl Problem {
    fn from_field(kind: &str, name: &str, e: FieldError) -> Problem {
        Problem { kind: kind.to_string(), name: name.to_string(), path: e.path, message: e.message }
    }
}

/// `KIND/NAME: path: problem`.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}/{}: {}", self.kind, self.name, self.message)
        } else {
            write!(f, "{}/{}: {}: {}", self.kind, self.name, self.path, self.message)
        }
    }
}

impl std::error::Error for Problem {}

fn path_string(path: &serde_path_to_error::Path) -> String {
    let s = path.to_string();
    if s == "." { String::new() } else { s }
}

/// Decodes one YAML document into `T`; on failure the error carries the field path
/// (e.g. `spec.template.spec.requirements[0].operator`).
pub fn decode<T: DeserializeOwned>(doc: &Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = path_string(e.path());
        let message = e.into_inner().to_string();
        FieldError::new(path, message)
    })
}

/// A neutral value put in for a required field that is missing, so that decoding (and with it
/// validation of everything else in the object) can go on.
#[derive(Debug, Clone)]
struct Placeholder {
    /// Original-coordinate path of the field.
    path: String,
    /// The variant chosen when the field is an enum (checks keyed on it are not the user's).
    variant: Option<String>,
}

/// What `decode_all` found, in the document's own coordinates.
struct Decoded<T> {
    object: Option<T>,
    errors: Vec<FieldError>,
    /// Paths of removed fields and list elements.
    removed: Vec<String>,
    /// For each list that lost elements, the original indices of those elements.
    removed_elems: Vec<(String, Vec<usize>)>,
    placeholders: Vec<Placeholder>,
}

impl<T> Decoded<T> {
    fn map<U>(self, f: fn(T) -> U) -> Decoded<U> {
        Decoded {
            object: self.object.map(f),
            errors: self.errors,
            removed: self.removed,
            removed_elems: self.removed_elems,
            placeholders: self.placeholders,
        }
    }
}

/// Decodes, and when decoding fails keeps going so that one run reports every decode problem
/// rather than only the first: an offending field (or list element) is removed, and a missing
/// required field is reported once and given a neutral placeholder value.
fn decode_all<T: DeserializeOwned>(doc: &Value) -> Decoded<T> {
    const MAX_ROUNDS: usize = 200;
    let mut work = doc.clone();
    let mut out = Decoded {
        object: None,
        errors: Vec::new(),
        removed: Vec::new(),
        removed_elems: Vec::new(),
        placeholders: Vec::new(),
    };
    for _ in 0..MAX_ROUNDS {
        let err = match serde_path_to_error::deserialize::<_, T>(&work) {
            Ok(v) => {
                out.object = Some(v);
                return out;
            }
            Err(e) => e,
        };
        let mut segments: Vec<Segment> = err.path().iter().cloned().collect();
        let message = with_hint(err.into_inner().to_string());
        let (path, _) = original_path(&segments, &out.removed_elems);
        if missing_field(&message).is_some()
            && let Some(holder @ Value::Null) = value_at_mut(&mut work, &segments)
        {
            // `field: null` is an absent field to the API server: the holder itself is missing.
            *holder = Value::Mapping(serde_yaml_ng::Mapping::new());
            let follow_on = out.placeholders.iter().any(|p| is_within(&path, &p.path)) || out.removed.contains(&path);
            if !follow_on {
                out.errors.push(FieldError::new(path.clone(), "required"));
            }
            out.placeholders.push(Placeholder { path, variant: None });
            continue;
        }
        if let Some(field) = missing_field(&message) {
            let field_path = join_path(&path, field);
            // Inside a placeholder, or a field we removed ourselves: already reported.
            let follow_on =
                out.placeholders.iter().any(|p| is_within(&path, &p.path)) || out.removed.contains(&field_path);
            if !follow_on {
                out.errors.push(FieldError::new(field_path.clone(), "required"));
            }
            if let Some(variant) = fill_missing::<T>(&mut work, &segments, field) {
                out.placeholders.push(Placeholder { path: field_path, variant });
                continue;
            }
            // No neutral value decodes: drop the object that holds the field instead (unless
            // that object is a placeholder of ours, which would only be put back again).
            if segments.is_empty() || out.placeholders.iter().any(|p| is_within(&path, &p.path)) {
                return out;
            }
        } else {
            if !out.placeholders.iter().any(|p| is_within(&path, &p.path)) {
                out.errors.push(FieldError::new(path, message));
            }
            if segments.is_empty() {
                return out;
            }
            if matches!(segments.last(), Some(Segment::Unknown | Segment::Enum { .. })) {
                segments.pop();
            }
        }
        let (path, seq_info) = original_path(&segments, &out.removed_elems);
        if !remove_at(&mut work, &segments) {
            return out;
        }
        if let Some((list_path, original_index)) = seq_info {
            match out.removed_elems.iter_mut().find(|(p, _)| *p == list_path) {
                Some((_, v)) => v.push(original_index),
                None => out.removed_elems.push((list_path, vec![original_index])),
            }
        }
        out.removed.push(path);
    }
    out
}

/// The field named by serde's "missing field `x`" message.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

fn join_path(parent: &str, field: &str) -> String {
    if parent.is_empty() { field.to_string() } else { format!("{parent}.{field}") }
}

/// Puts a neutral value for the missing `field` into the object at `segments`: the first of an
/// empty string, an empty object, an empty list, 0 and false (or, for an enum, its first variant)
/// that decodes there. Returns `Some(variant)` (the enum variant chosen, if any) when one fits;
/// otherwise leaves `work` as it was and returns `None`.
fn fill_missing<T: DeserializeOwned>(work: &mut Value, segments: &[Segment], field: &str) -> Option<Option<String>> {
    let mut candidates: Vec<Value> = vec![
        Value::String(String::new()),
        Value::Mapping(serde_yaml_ng::Mapping::new()),
        Value::Sequence(Vec::new()),
        Value::Number(0.into()),
        Value::Bool(false),
    ];
    candidates.reverse();
    let (field_path, _) = original_path(segments, &[]);
    let field_path = join_path(&field_path, field);
    let mut tried_variant = false;
    while let Some(candidate) = candidates.pop() {
        let variant = match (&candidate, tried_variant) {
            (Value::String(s), true) => Some(s.clone()),
            _ => None,
        };
        if !set_at(work, segments, field, candidate) {
            return None;
        }
        let err = match serde_path_to_error::deserialize::<_, T>(&*work) {
            Ok(_) => return Some(variant),
            Err(e) => e,
        };
        let (err_path, _) = original_path(&err.path().iter().cloned().collect::<Vec<_>>(), &[]);
        let message = err.into_inner().to_string();
        // A problem elsewhere (or a required field inside the placeholder) is for the next round.
        if !is_within(&err_path, &field_path) || missing_field(&message).is_some() {
            return Some(variant);
        }
        if !tried_variant && let Some(first) = first_expected_variant(&message) {
            tried_variant = true;
            candidates.push(Value::String(first.to_string()));
        }
    }
    remove_at(work, &[segments, &[Segment::Map { key: field.to_string() }]].concat());
    None
}

/// `unknown variant ``, expected one of `In`, `NotIn`` → `In`.
fn first_expected_variant(message: &str) -> Option<&str> {
    if !message.starts_with("unknown variant") {
        return None;
    }
    let (_, rest) = message.split_once("expected")?;
    let rest = rest.split_once('`')?.1;
    rest.split('`').next().filter(|v| !v.is_empty())
}

/// The value at `segments`, if the document has one there.
fn value_at_mut<'a>(v: &'a mut Value, segments: &[Segment]) -> Option<&'a mut Value> {
    let mut cur = v;
    for seg in segments {
        cur = match (seg, cur) {
            (Segment::Map { key }, Value::Mapping(m)) => m.get_mut(key.as_str())?,
            (Segment::Seq { index }, Value::Sequence(s)) => s.get_mut(*index)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Sets `field` of the mapping at `segments`.
fn set_at(v: &mut Value, segments: &[Segment], field: &str, value: Value) -> bool {
    match value_at_mut(v, segments) {
        Some(Value::Mapping(m)) => {
            m.insert(Value::String(field.to_string()), value);
            true
        }
        _ => false,
    }
}

/// A path of the decoded object (list indices counted after removals) in the original
/// document's coordinates.
fn to_original(path: &str, removed_elems: &[(String, Vec<usize>)]) -> String {
    if removed_elems.is_empty() {
        return path.to_string();
    }
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            out.push_str(&rest[open..]);
            rest = "";
            break;
        };
        let inner = &rest[open + 1..close];
        let index = inner.parse::<usize>().ok().filter(|_| inner.bytes().all(|b| b.is_ascii_digit()));
        match (index, removed_elems.iter().find(|(p, _)| *p == out)) {
            (Some(index), Some((_, gone))) => {
                let original = (0..).filter(|i| !gone.contains(i)).nth(index).unwrap_or(index);
                out.push_str(&format!("[{original}]"));
            }
            _ => out.push_str(&rest[open..=close]),
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// YAML reads `1`, `true` or `1.5` as numbers and booleans; CRD string fields need quotes.
fn with_hint(message: String) -> String {
    let scalar = ["invalid type: integer", "invalid type: floating point", "invalid type: boolean"];
    if scalar.iter().any(|p| message.starts_with(p)) && message.ends_with("expected a string") {
        format!("{message} (quote the value in YAML)")
    } else {
        message
    }
}

/// The path of `segments` (positions in the edited document) in the original document's
/// coordinates, and, when the last segment is a list element, that list's path and the
/// element's original index.
fn original_path(segments: &[Segment], removed_elems: &[(String, Vec<usize>)]) -> (String, Option<(String, usize)>) {
    let mut path = String::new();
    let mut last_seq = None;
    for seg in segments {
        last_seq = None;
        match seg {
            Segment::Seq { index } => {
                let gone: &[usize] =
                    removed_elems.iter().find(|(p, _)| *p == path).map(|(_, v)| v.as_slice()).unwrap_or(&[]);
                // The index-th element that was not removed.
                let original = (0..).filter(|i| !gone.contains(i)).nth(*index).unwrap_or(*index);
                last_seq = Some((path.clone(), original));
                path.push_str(&format!("[{original}]"));
            }
            Segment::Map { key } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Segment::Enum { variant } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(variant);
            }
            Segment::Unknown => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push('?');
            }
        }
    }
    (path, last_seq)
}

/// `a.b[0].c` → `a.b[0]`; `a.b[0]` → `a.b`; `a` → `` (the document); `` → none.
fn parent_of(path: &str) -> Option<String> {
    if path.is_empty() {
        return None;
    }
    Some(path[..path.rfind(['.', '[']).unwrap_or(0)].to_string())
}

fn remove_at(v: &mut Value, segments: &[Segment]) -> bool {
    let Some((last, parents)) = segments.split_last() else { return false };
    let Some(cur) = value_at_mut(v, parents) else { return false };
    match (last, cur) {
        (Segment::Map { key }, Value::Mapping(m)) => m.remove(key.as_str()).is_some(),
        (Segment::Seq { index }, Value::Sequence(s)) if *index < s.len() => {
            s.remove(*index);
            true
        }
        _ => false,
    }
}

/// A YAML syntax error, with the line (1-based) where the parser stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}YAML syntax error: {message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct YamlSyntaxError {
    pub line: Option<usize>,
    pub message: String,
}

/// Splits multi-document YAML into its documents, in order, skipping empty ones. A syntax
/// error ends the list (the parser cannot resynchronise after one).
pub fn yaml_documents(text: &str) -> Vec<Result<Value, YamlSyntaxError>> {
    use serde::Deserialize;
    let text = strip_bom(text);
    let mut out = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        match Value::deserialize(document) {
            Ok(Value::Null) => {}
            Ok(v) => out.push(Ok(v)),
            Err(e) => {
                out.push(Err(YamlSyntaxError { line: e.location().map(|l| l.line()), message: e.to_string() }));
                break;
            }
        }
    }
    out
}

/// The text without a leading UTF-8 byte order mark (editors on Windows write one; YAML
/// parsers would read it as content).
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// `metadata.name` of a raw document, or `<unnamed>`.
pub fn document_name(doc: &Value) -> String {
    doc.get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("<unnamed>")
        .to_string()
}

/// `kind` of a raw document, if it has one.
pub fn document_kind(doc: &Value) -> Option<&str> {
    doc.get("kind").and_then(Value::as_str)
}

/// API groups whose kinds kerf understands (only the three v1 kinds of them, and
/// CapacityBuffer of SIG Autoscaling's group).
const KARPENTER_GROUPS: &[&str] = &["karpenter.sh", "karpenter.k8s.aws", capacitybuffer::GROUP];

/// The v1 replacement of a kind from an older Karpenter API.
fn replacement_of(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Provisioner" => "NodePool (karpenter.sh/v1)",
        "Machine" => "NodeClaim (karpenter.sh/v1)",
        "AWSNodeTemplate" | "NodeTemplate" => "EC2NodeClass (karpenter.k8s.aws/v1)",
        _ => return None,
    })
}

/// For a document whose apiVersion/kind is a Karpenter kind: decode and validate, listing every
/// problem. `Ok(None)` when the document is not a Karpenter object (a Deployment, ...).
///
/// A document that is not a mapping, or that has a Karpenter apiVersion but no (string) kind, is a
/// problem. Unknown `metadata` fields are problems, as under the API server's strict field
/// validation. A missing required field is one `required` problem; the rest of the object is
/// still checked.
///
/// A wrong apiVersion for a Karpenter kind (e.g. `karpenter.sh/v1beta1`) or a missing one is a
/// problem on `apiVersion`; a kind of an older Karpenter API (Provisioner, AWSNodeTemplate,
/// Machine) or an unknown kind in a Karpenter API group is a problem on `kind`. Kinds of other
/// API groups that share a name (`hypershift.openshift.io/v1beta1` NodePool) are not Karpenter's.
pub fn decode_karpenter(doc: &Value) -> Result<Option<KarpenterObject>, Vec<Problem>> {
    let name = document_name(doc);
    if !doc.is_mapping() {
        let got = value_kind(doc);
        return Err(vec![Problem {
            kind: "<no kind>".to_string(),
            name,
            path: String::new(),
            message: format!("document must be a mapping (object), got {got}"),
        }]);
    }
    let api_version = doc.get("apiVersion").and_then(Value::as_str);
    let group = api_version.map(|v| v.split_once('/').map_or(v, |(g, _)| g));
    let Some(kind) = document_kind(doc) else {
        // Without a kind, only a Karpenter apiVersion says the document was meant for kerf.
        if !group.is_some_and(|g| KARPENTER_GROUPS.contains(&g)) {
            return Ok(None);
        }
        let message = match doc.get("kind") {
            None | Some(Value::Null) => "required (NodePool, NodeClaim or EC2NodeClass)".to_string(),
            Some(v) => format!("must be a string, got {}", value_kind(v)),
        };
        return Err(vec![Problem { kind: "<no kind>".to_string(), name, path: "kind".to_string(), message }]);
    };
    // Another API's kind of the same name (HyperShift has a NodePool) is not ours.
    if group.is_some_and(|g| !KARPENTER_GROUPS.contains(&g)) {
        return Ok(None);
    }
    // SIG Autoscaling's group has other kinds kerf does not read here.
    if group == Some(capacitybuffer::GROUP)
        && ![capacitybuffer::KIND, provisioningrequest::KIND, capacityquota::KIND].contains(&kind)
    {
        return Ok(None);
    }
    let expected = match kind {
        capacitybuffer::KIND => capacitybuffer::API_VERSION,
        capacityquota::KIND => capacityquota::API_VERSION,
        // v1beta1 has the same fields: read as v1.
        provisioningrequest::KIND if api_version == Some(provisioningrequest::API_VERSION_V1BETA1) => {
            provisioningrequest::API_VERSION_V1BETA1
        }
        provisioningrequest::KIND => provisioningrequest::API_VERSION,
        nodepool::KIND => nodepool::API_VERSION,
        nodeclaim::KIND => nodeclaim::API_VERSION,
        ec2nodeclass::KIND => ec2nodeclass::API_VERSION,
        nodeoverlay::KIND => nodeoverlay::API_VERSION,
        _ => {
            let Some(group) = group else { return Ok(None) };
            let message = match replacement_of(kind) {
                Some(r) => {
                    let hint =
                        if crate::convert::older_api(doc).is_some() { " (`kerf convert` converts it)" } else { "" };
                    format!("{kind} ({}) is not served by the v1 API; use {r}{hint}", api_version.unwrap_or(""))
                }
                None => {
                    format!("{kind} is not a kind of the {group} API (expected NodePool, NodeClaim or EC2NodeClass)")
                }
            };
            return Err(vec![Problem { kind: kind.to_string(), name, path: "kind".to_string(), message }]);
        }
    };
    if api_version != Some(expected) {
        let message = match api_version {
            None => format!("required: must be {expected}"),
            Some(v) if crate::convert::older_api(doc).is_some() => {
                format!("{v} is not served for {kind}; use {expected} (`kerf convert` converts it)")
            }
            Some(v) => format!("{v} is not served for {kind}; use {expected}"),
        };
        return Err(vec![Problem { kind: kind.to_string(), name, path: "apiVersion".to_string(), message }]);
    }
    let decoded = match kind {
        nodepool::KIND => decode_all::<NodePool>(doc).map(KarpenterObject::NodePool),
        nodeclaim::KIND => decode_all::<NodeClaim>(doc).map(KarpenterObject::NodeClaim),
        capacitybuffer::KIND => decode_all::<CapacityBuffer>(doc).map(KarpenterObject::CapacityBuffer),
        capacityquota::KIND => decode_all::<CapacityQuota>(doc).map(KarpenterObject::CapacityQuota),
        nodeoverlay::KIND => decode_all::<NodeOverlay>(doc).map(KarpenterObject::NodeOverlay),
        provisioningrequest::KIND => decode_all::<ProvisioningRequest>(doc).map(|mut r| {
            r.api_version = provisioningrequest::API_VERSION.to_string();
            KarpenterObject::ProvisioningRequest(r)
        }),
        _ => decode_all::<EC2NodeClass>(doc).map(KarpenterObject::EC2NodeClass),
    };
    let mut errors = unknown_metadata_fields(doc);
    errors.extend(decoded.errors);
    let object = decoded.object;
    if let Some(obj) = &object {
        let lists: Vec<&str> = decoded.removed_elems.iter().map(|(p, _)| p.as_str()).collect();
        // The typed object's list indices skip removed elements; the raw checks read the document.
        let mut checked: Vec<FieldError> = obj
            .validate()
            .into_iter()
            .map(|e| FieldError::new(to_original(&e.path, &decoded.removed_elems), e.message))
            .collect();
        for e in raw_pattern_errors(doc, kind) {
            // A stricter reading of a field the typed checks may already have refused.
            if !checked.iter().any(|x| x.path == e.path) {
                checked.push(e);
            }
        }
        for e in checked {
            // What was removed or filled in to get past decode errors is not checked again: its
            // absence or placeholder value would be reported as a second problem. Whole-list
            // rules on a list that lost elements judge a shortened list.
            let follow_on = decoded.removed.iter().any(|r| !r.is_empty() && is_within(&e.path, r))
                || lists.contains(&e.path.as_str())
                || decoded.placeholders.iter().any(|p| is_placeholder_follow_on(&e, p));
            if !follow_on && !errors.iter().any(|x| x.path == e.path && x.message == e.message) {
                errors.push(e);
            }
        }
    }
    if errors.is_empty() {
        match object {
            Some(o) => Ok(Some(o)),
            // Unreachable in practice: no object means a decode error was recorded.
            None => Err(vec![Problem {
                kind: kind.to_string(),
                name,
                path: String::new(),
                message: "could not be decoded".to_string(),
            }]),
        }
    } else {
        Err(errors.into_iter().map(|e| Problem::from_field(kind, &name, e)).collect())
    }
}

/// A check that failed only because of a placeholder: on the placeholder's own path (an empty
/// name "must not be empty"), or, for an enum variant put in, a sibling check naming that variant
/// (an `In` operator put in "must have a value defined").
fn is_placeholder_follow_on(e: &FieldError, p: &Placeholder) -> bool {
    if is_within(&e.path, &p.path) {
        return true;
    }
    match (&p.variant, parent_of(&p.path)) {
        (Some(v), Some(parent)) => is_within(&e.path, &parent) && e.message.contains(&format!("'{v}'")),
        _ => false,
    }
}

/// Fields of ObjectMeta (k8s-openapi's type ignores unknown keys; the API server's strict field
/// validation refuses them).
const OBJECT_META_FIELDS: &[&str] = &[
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];

fn unknown_metadata_fields(doc: &Value) -> Vec<FieldError> {
    let Some(meta) = doc.get("metadata").and_then(Value::as_mapping) else { return Vec::new() };
    // A key that is not a string is refused by the decoder itself.
    meta.keys()
        .filter_map(Value::as_str)
        .filter(|k| !OBJECT_META_FIELDS.contains(k))
        .map(|k| FieldError::new(format!("metadata.{k}"), "unknown field"))
        .collect()
}

/// What a YAML value is, for messages about the wrong one.
pub fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Whether `path` is `prefix` or a field below it.
fn is_within(path: &str, prefix: &str) -> bool {
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// Duration fields whose CRD patterns are stricter than Go's duration syntax (which kerf's
/// duration type accepts: `1.5h`, `300ms`, `0`). The patterns are checked on the raw strings.
fn raw_pattern_errors(doc: &Value, kind: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let get = |path: &[&str]| -> Option<&str> {
        let mut cur = doc;
        for p in path {
            cur = cur.get(*p)?;
        }
        cur.as_str()
    };
    let mut check = |path: &[&str], allow_never: bool| {
        if let Some(s) = get(path)
            && !(allow_never && s == "Never")
            && !is_whole_units(s, &["s", "m", "h"])
        {
            let hint = if allow_never { " or Never" } else { "" };
            errs.push(FieldError::new(
                path.join("."),
                format!("{s:?} must be whole numbers of s, m or h (e.g. 30s, 10m, 1h30m){hint}"),
            ));
        }
    };
    match kind {
        nodepool::KIND => {
            check(&["spec", "template", "spec", "expireAfter"], true);
            check(&["spec", "template", "spec", "terminationGracePeriod"], false);
            check(&["spec", "disruption", "consolidateAfter"], true);
        }
        nodeclaim::KIND => {
            check(&["spec", "expireAfter"], true);
            check(&["spec", "terminationGracePeriod"], false);
        }
        _ => {}
    }
    // `requirements` is required (an empty list is fine); the typed field defaults it.
    let requirements_path: &[&str] =
        if kind == nodepool::KIND { &["spec", "template", "spec", "requirements"] } else { &["spec", "requirements"] };
    let holder = requirements_path[..requirements_path.len() - 1].iter().try_fold(doc, |cur, p| cur.get(*p));
    if (kind == nodepool::KIND || kind == nodeclaim::KIND)
        && let Some(holder) = holder
        && holder.get("requirements").is_none()
    {
        errs.push(FieldError::new(requirements_path.join("."), "required (an empty list is allowed)"));
    }
    if kind == nodepool::KIND
        && let Some(budgets) = doc.get("spec").and_then(|s| s.get("disruption")).and_then(|d| d.get("budgets"))
        && let Some(list) = budgets.as_sequence()
    {
        for (i, b) in list.iter().enumerate() {
            if let Some(d) = b.get("duration").and_then(Value::as_str)
                && !is_budget_duration(d)
            {
                errs.push(FieldError::new(
                    format!("spec.disruption.budgets[{i}].duration"),
                    format!("{d:?} must be whole hours and/or minutes (e.g. 30m, 8h, 1h30m)"),
                ));
            }
        }
    }
    errs
}

/// `^([0-9]+(UNIT))+$` for the given units.
fn is_whole_units(s: &str, units: &[&str]) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = units.iter().find(|u| rest.starts_with(**u) && !rest[u.len()..].starts_with('s')) else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

/// A budget duration: `^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$`.
fn is_budget_duration(s: &str) -> bool {
    let s = s.strip_suffix("0s").filter(|r| !r.is_empty()).unwrap_or(s);
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if let Some(m) = s.strip_suffix('m') {
        match m.split_once('h') {
            Some((h, m)) => digits(h) && digits(m),
            None => digits(m),
        }
    } else if let Some(h) = s.strip_suffix('h') {
        digits(h)
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_unit_durations_match_the_crd_pattern() {
        assert!(is_whole_units("30s", &["s", "m", "h"]));
        assert!(is_whole_units("1h30m", &["s", "m", "h"]));
        assert!(!is_whole_units("1.5h", &["s", "m", "h"]));
        assert!(!is_whole_units("300ms", &["s", "m", "h"]));
        assert!(!is_whole_units("0", &["s", "m", "h"]));
        assert!(!is_whole_units("", &["s", "m", "h"]));
    }

    #[test]
    fn decoded_list_indices_map_back_past_removed_elements() {
        let removed = vec![("spec.taints".to_string(), vec![0, 2]), ("spec.taints[3].x".to_string(), vec![0])];
        assert_eq!(to_original("spec.taints[0].key", &removed), "spec.taints[1].key");
        assert_eq!(to_original("spec.taints[1]", &removed), "spec.taints[3]");
        assert_eq!(to_original("spec.taints[1].x[0]", &removed), "spec.taints[3].x[1]");
        // Map keys in brackets (with dots inside) and lists without removals stay as they are.
        assert_eq!(to_original("labels[kubernetes.io/os]", &removed), "labels[kubernetes.io/os]");
        assert_eq!(to_original("spec.other[0]", &removed), "spec.other[0]");
        assert_eq!(to_original("spec.taints[", &removed), "spec.taints[");
    }

    #[test]
    fn the_first_expected_variant_is_taken_from_serdes_message() {
        assert_eq!(first_expected_variant("unknown variant ``, expected one of `In`, `NotIn`"), Some("In"));
        assert_eq!(first_expected_variant("unknown variant ``, expected `A` or `B`"), Some("A"));
        assert_eq!(first_expected_variant("invalid type: string, expected a map"), None);
        assert_eq!(missing_field("missing field `nodeClassRef`"), Some("nodeClassRef"));
        assert_eq!(missing_field("unknown field `x`"), None);
    }

    #[test]
    fn budget_durations_are_hours_and_minutes_only() {
        for ok in ["10m", "8h", "1h30m", "720h0m0s", "90m0s"] {
            assert!(is_budget_duration(ok), "{ok}");
        }
        for bad in ["30s", "1h30s", "1.5h", "", "0s", "m", "h30m"] {
            assert!(!is_budget_duration(bad), "{bad}");
        }
    }
}
