//! Converting manifests of Karpenter's older APIs to v1: `karpenter.sh/v1alpha5` Provisioner,
//! `karpenter.k8s.aws/v1alpha1` AWSNodeTemplate, `karpenter.sh/v1beta1` NodePool and NodeClaim,
//! and `karpenter.k8s.aws/v1beta1` EC2NodeClass, field by field as Karpenter's v1beta1 and v1
//! migration guides map them.
//!
//! Conversion works on YAML values (the older kinds have no types here) and is strict about the
//! input: a field the older API did not have is a problem, like under the API server's strict
//! field validation. What the older object said and v1 cannot say is a [`Note`]; what stops a
//! faithful v1 object from being written (a field without a v1 home that changes behaviour, a
//! converted object that would not validate) is a problem.

mod class;
mod pool;

use serde_yaml_ng::{Mapping, Value};

use crate::manifest::{self, Problem};

/// Choices the older APIs left to cluster-wide settings.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// The instance profile for AWSNodeTemplates without one (v1alpha5 read it from the
    /// `aws.defaultInstanceProfile` setting, which v1 does not have).
    pub default_instance_profile: Option<String>,
}

/// Something about one document, with the document's position in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Index of the input document.
    pub doc: usize,
    /// `KIND/NAME: path: message`, with the input object's kind and name.
    pub problem: Problem,
}

/// A remark about a conversion: what the older object said that v1 says differently or not at all.
pub type Note = Located;

/// One output document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Index of the input document it came from.
    pub doc: usize,
    /// `Some("karpenter.sh/v1alpha5 Provisioner/default")` when it was converted, `None` when the
    /// input document was passed on unchanged (v1 objects, other kinds).
    pub converted_from: Option<String>,
    pub value: Value,
}

/// The result of converting a set of documents.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Conversion {
    pub documents: Vec<Document>,
    pub notes: Vec<Note>,
}

impl Conversion {
    /// How many output documents were converted from older APIs.
    pub fn converted(&self) -> usize {
        self.documents.iter().filter(|d| d.converted_from.is_some()).count()
    }

    /// The documents as multi-document YAML.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        for d in &self.documents {
            out.push_str("---\n");
            match serde_yaml_ng::to_string(&d.value) {
                Ok(s) => out.push_str(&quote_yaml11_booleans(&s)),
                // A YAML value always serializes; keep the document boundary if it ever does not.
                Err(e) => out.push_str(&format!("# not serializable: {e}\n")),
            }
        }
        out
    }
}

/// Words YAML 1.1 readers (kubectl, Helm, go-yaml v2) take for booleans; the YAML 1.2 writer leaves
/// them bare as strings, so a tag value `"no"` would come back as `false`.
const YAML11_BOOLEANS: &[&str] =
    &["y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"];

/// Quotes bare scalars that YAML 1.1 reads as booleans. Booleans themselves are written `true` /
/// `false`, so any such bare word is a string.
fn quote_yaml11_booleans(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len());
    for line in yaml.lines() {
        let fixed = YAML11_BOOLEANS.iter().find_map(|w| {
            [": ", "- "].iter().find_map(|sep| {
                line.strip_suffix(w).filter(|head| head.ends_with(sep)).map(|head| format!("{head}'{w}'"))
            })
        });
        out.push_str(fixed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The older Karpenter APIs kerf converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldKind {
    ProvisionerV1alpha5,
    AwsNodeTemplateV1alpha1,
    NodePoolV1beta1,
    NodeClaimV1beta1,
    Ec2NodeClassV1beta1,
}

impl OldKind {
    pub fn api_version(&self) -> &'static str {
        match self {
            OldKind::ProvisionerV1alpha5 => "karpenter.sh/v1alpha5",
            OldKind::AwsNodeTemplateV1alpha1 => "karpenter.k8s.aws/v1alpha1",
            OldKind::NodePoolV1beta1 | OldKind::NodeClaimV1beta1 => "karpenter.sh/v1beta1",
            OldKind::Ec2NodeClassV1beta1 => "karpenter.k8s.aws/v1beta1",
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            OldKind::ProvisionerV1alpha5 => "Provisioner",
            OldKind::AwsNodeTemplateV1alpha1 => "AWSNodeTemplate",
            OldKind::NodePoolV1beta1 => "NodePool",
            OldKind::NodeClaimV1beta1 => "NodeClaim",
            OldKind::Ec2NodeClassV1beta1 => "EC2NodeClass",
        }
    }
}

/// Which older API a document is written in, if any.
pub fn older_api(doc: &Value) -> Option<OldKind> {
    let api = doc.get("apiVersion").and_then(Value::as_str)?;
    let kind = doc.get("kind").and_then(Value::as_str)?;
    Some(match (api, kind) {
        ("karpenter.sh/v1alpha5", "Provisioner") => OldKind::ProvisionerV1alpha5,
        ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => OldKind::AwsNodeTemplateV1alpha1,
        ("karpenter.sh/v1beta1", "NodePool") => OldKind::NodePoolV1beta1,
        ("karpenter.sh/v1beta1", "NodeClaim") => OldKind::NodeClaimV1beta1,
        ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => OldKind::Ec2NodeClassV1beta1,
        _ => return None,
    })
}

/// Problems and notes of the document being converted.
pub(crate) struct Cx {
    pub doc: usize,
    pub kind: String,
    pub name: String,
    pub problems: Vec<Located>,
    pub notes: Vec<Located>,
}

impl Cx {
    fn located(&self, path: &str, message: String) -> Located {
        Located {
            doc: self.doc,
            problem: Problem { kind: self.kind.clone(), name: self.name.clone(), path: path.to_string(), message },
        }
    }

    pub fn problem(&mut self, path: &str, message: impl Into<String>) {
        let l = self.located(path, message.into());
        self.problems.push(l);
    }

    pub fn note(&mut self, path: &str, message: impl Into<String>) {
        let l = self.located(path, message.into());
        self.notes.push(l);
    }

    /// The mapping at `v` (`None` for an absent or null value), every key not in `allowed`
    /// reported as an unknown field of the older API. An unknown key with nothing under it is
    /// only noted as left out: the older API server pruned unknown fields, so manifests that
    /// ran for years can carry such leftovers. Callers that copy the mapping whole keep only
    /// the `allowed` keys ([`only_allowed`]).
    pub fn mapping<'v>(&mut self, v: Option<&'v Value>, path: &str, allowed: &[&str]) -> Option<&'v Mapping> {
        match v {
            None | Some(Value::Null) => None,
            Some(Value::Mapping(m)) => {
                for (k, val) in m {
                    match k.as_str() {
                        Some(k) if allowed.contains(&k) => {}
                        Some(k) if is_empty_value(val) => self.note(
                            &join(path, k),
                            format!(
                                "left out: `{k}` is not a field here and is empty (the older API server pruned it; expected one of: {})",
                                allowed.join(", ")
                            ),
                        ),
                        Some(k) => self.problem(
                            &join(path, k),
                            format!("unknown field `{k}` (expected one of: {})", allowed.join(", ")),
                        ),
                        None => self.problem(path, format!("keys must be strings, got {}", manifest::value_kind(k))),
                    }
                }
                Some(m)
            }
            Some(other) => {
                self.problem(path, format!("must be a mapping, got {}", manifest::value_kind(other)));
                None
            }
        }
    }

    /// The list at `v` (empty for absent or null).
    pub fn list<'v>(&mut self, v: Option<&'v Value>, path: &str) -> &'v [Value] {
        match v {
            None | Some(Value::Null) => &[],
            Some(Value::Sequence(s)) => s,
            Some(other) => {
                self.problem(path, format!("must be a list, got {}", manifest::value_kind(other)));
                &[]
            }
        }
    }

    /// A string field (`None` when absent).
    pub fn string(&mut self, v: Option<&Value>, path: &str) -> Option<String> {
        match v {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.problem(path, format!("must be a string, got {}", manifest::value_kind(other)));
                None
            }
        }
    }

    /// A string-to-string map (tag selectors).
    pub fn string_map(&mut self, v: Option<&Value>, path: &str) -> Vec<(String, String)> {
        let m = match v {
            None | Some(Value::Null) => return Vec::new(),
            Some(Value::Mapping(m)) => m,
            Some(other) => {
                self.problem(path, format!("must be a mapping, got {}", manifest::value_kind(other)));
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (k, val) in m {
            let key = match k {
                Value::String(s) => s.clone(),
                other => {
                    self.problem(path, format!("keys must be strings, got {}", manifest::value_kind(other)));
                    continue;
                }
            };
            match val {
                Value::String(s) => out.push((key, s.clone())),
                Value::Number(n) => out.push((key, n.to_string())),
                Value::Bool(b) => out.push((key, b.to_string())),
                other => {
                    self.problem(&join(path, &key), format!("must be a string, got {}", manifest::value_kind(other)))
                }
            }
        }
        out
    }

    /// A non-negative integer number of seconds.
    pub fn seconds(&mut self, v: Option<&Value>, path: &str) -> Option<u64> {
        match v {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
            Some(other) => {
                self.problem(path, format!("must be a non-negative whole number of seconds, got {}", describe(other)));
                None
            }
        }
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        other => manifest::value_kind(other).to_string(),
    }
}

/// Nothing under it: `null`, `""`, `{}` or `[]`.
fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    }
}

/// A copy of `m` with only the `allowed` keys (what [`Cx::mapping`] let through as leftovers
/// goes).
pub(crate) fn only_allowed(m: &Mapping, allowed: &[&str]) -> Mapping {
    m.iter()
        .filter(|(k, _)| k.as_str().is_some_and(|k| allowed.contains(&k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// A YAML string.
pub(crate) fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

/// A mapping from `(key, value)` pairs, in order, leaving out nulls and empty collections.
pub(crate) fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in entries {
        let empty = match &v {
            Value::Null => true,
            Value::Mapping(m) => m.is_empty(),
            Value::Sequence(s) => s.is_empty(),
            _ => false,
        };
        if !empty {
            m.insert(s(k), v);
        }
    }
    Value::Mapping(m)
}

/// `720h` for whole hours, else `Ns`.
pub(crate) fn go_duration(secs: u64) -> String {
    if secs > 0 && secs.is_multiple_of(3600) { format!("{}h", secs / 3600) } else { format!("{secs}s") }
}

/// `metadata` of a converted object: name, namespace-free; labels and annotations kept, the
/// fields the API server sets (uid, resourceVersion, managedFields, ...) left out.
pub(crate) fn metadata(doc: &Value) -> Value {
    let meta = doc.get("metadata");
    let keep = |k: &str| meta.and_then(|m| m.get(k)).cloned().unwrap_or(Value::Null);
    let mut annotations = keep("annotations");
    if let Value::Mapping(a) = &mut annotations {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    map(vec![("name", keep("name")), ("labels", keep("labels")), ("annotations", annotations)])
}

/// A kubelet configuration that moves from a NodePool (or Provisioner) to its EC2NodeClass.
pub(crate) struct KubeletMove {
    pub doc: usize,
    pub pool_kind: String,
    pub pool_name: String,
    pub path: String,
    pub class_name: String,
    pub kubelet: Value,
}

/// Converts `docs`: each document of an older API to its v1 form, other documents unchanged.
/// Every converted object is checked as `kerf validate` checks v1 objects. `Err` lists every
/// problem (with the notes found before them); nothing is half-converted.
pub fn convert(docs: &[Value], opts: &ConvertOptions) -> Result<Conversion, (Vec<Located>, Vec<Note>)> {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut documents = Vec::new();
    let mut moves = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let Some(old) = older_api(doc) else {
            documents.push(Document { doc: i, converted_from: None, value: doc.clone() });
            continue;
        };
        let mut cx = Cx {
            doc: i,
            kind: old.kind().to_string(),
            name: manifest::document_name(doc),
            problems: Vec::new(),
            notes: Vec::new(),
        };
        cx.mapping(Some(doc), "", &["apiVersion", "kind", "metadata", "spec", "status"]);
        if doc.get("status").is_some_and(|s| !s.is_null()) {
            cx.note("status", "left out: the controller writes status");
        }
        let converted = match old {
            OldKind::ProvisionerV1alpha5 => pool::provisioner(doc, &mut cx, opts, &mut moves),
            OldKind::NodePoolV1beta1 => pool::node_pool_v1beta1(doc, &mut cx, &mut moves),
            OldKind::NodeClaimV1beta1 => pool::node_claim_v1beta1(doc, &mut cx),
            OldKind::AwsNodeTemplateV1alpha1 => class::aws_node_template(doc, &mut cx, opts).into_iter().collect(),
            OldKind::Ec2NodeClassV1beta1 => class::ec2_node_class_v1beta1(doc, &mut cx).into_iter().collect(),
        };
        let from = format!("{} {}/{}", old.api_version(), old.kind(), cx.name);
        for value in converted {
            documents.push(Document { doc: i, converted_from: Some(from.clone()), value });
        }
        problems.extend(cx.problems);
        notes.extend(cx.notes);
    }
    apply_kubelet_moves(&mut documents, moves, &mut problems, &mut notes);
    // Every converted object must be a valid v1 object (what could not be converted is already
    // reported: its consequences would only repeat it).
    for d in &documents {
        if d.converted_from.is_none() || problems.iter().any(|p: &Located| p.doc == d.doc) {
            continue;
        }
        if let Err(ps) = manifest::decode_karpenter(&d.value) {
            let (kind, name) = source_of(docs, d.doc);
            for p in ps {
                problems.push(Located {
                    doc: d.doc,
                    problem: Problem {
                        kind: kind.clone(),
                        name: name.clone(),
                        path: p.path.clone(),
                        message: format!("after conversion to {} {}: {}", p.kind, p.name, p.message),
                    },
                });
            }
        }
    }
    if problems.is_empty() { Ok(Conversion { documents, notes }) } else { Err((problems, notes)) }
}

fn source_of(docs: &[Value], i: usize) -> (String, String) {
    let doc = &docs[i];
    (manifest::document_kind(doc).unwrap_or("<no kind>").to_string(), manifest::document_name(doc))
}

/// v1 keeps the kubelet settings on the EC2NodeClass: each pool's settings go to the converted
/// class it references. Two pools with different settings on one class need two classes, which
/// only the user can name.
fn apply_kubelet_moves(
    documents: &mut [Document],
    moves: Vec<KubeletMove>,
    problems: &mut Vec<Located>,
    notes: &mut Vec<Note>,
) {
    let mut placed: Vec<(String, String, Value)> = Vec::new();
    for m in moves {
        let problem = |message: String| Located {
            doc: m.doc,
            problem: Problem { kind: m.pool_kind.clone(), name: m.pool_name.clone(), path: m.path.clone(), message },
        };
        if let Some((_, first_pool, kubelet)) = placed.iter().find(|(c, _, _)| *c == m.class_name) {
            if *kubelet != m.kubelet {
                problems.push(problem(format!(
                    "v1 keeps kubelet settings on the EC2NodeClass, and {} (referenced by {first_pool} too) already takes {first_pool}'s different settings: give this pool its own EC2NodeClass",
                    m.class_name
                )));
            }
            continue;
        }
        let target = documents.iter_mut().find(|d| {
            d.converted_from.is_some()
                && manifest::document_kind(&d.value) == Some(crate::ec2nodeclass::KIND)
                && manifest::document_name(&d.value) == m.class_name
        });
        match target.and_then(|d| d.value.get_mut("spec")).and_then(Value::as_mapping_mut) {
            Some(spec) => {
                if let Some(existing) = spec.get("kubelet")
                    && *existing != m.kubelet
                {
                    problems.push(problem(format!(
                        "EC2NodeClass {} has kubelet settings of its own that differ from this pool's",
                        m.class_name
                    )));
                    continue;
                }
                spec.insert(s("kubelet"), m.kubelet.clone());
                notes.push(Located {
                    doc: m.doc,
                    problem: Problem {
                        kind: m.pool_kind.clone(),
                        name: m.pool_name.clone(),
                        path: m.path.clone(),
                        message: format!("moved to EC2NodeClass {}'s spec.kubelet (v1 keeps it there)", m.class_name),
                    },
                });
                placed.push((m.class_name, m.pool_name, m.kubelet));
            }
            None => {
                let yaml = serde_yaml_ng::to_string(&m.kubelet).unwrap_or_default();
                let flat = yaml.trim().replace('\n', "; ");
                notes.push(Located {
                    doc: m.doc,
                    problem: Problem {
                        kind: m.pool_kind.clone(),
                        name: m.pool_name.clone(),
                        path: m.path.clone(),
                        message: format!(
                            "not converted: v1 keeps kubelet settings on the EC2NodeClass, and {} is not among the converted objects; add them to its spec.kubelet: {flat}",
                            m.class_name
                        ),
                    },
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_yaml_1_1_reads_as_booleans_are_quoted() {
        let v: Value = serde_yaml_ng::from_str("a: 'no'\nb: false\nc: [on, 'off']\nd: nothing\n").unwrap();
        let c = Conversion { documents: vec![Document { doc: 0, converted_from: None, value: v }], notes: vec![] };
        assert_eq!(c.to_yaml(), "---\na: 'no'\nb: false\nc:\n- 'on'\n- 'off'\nd: nothing\n");
    }

    #[test]
    fn durations_are_written_in_hours_when_whole() {
        assert_eq!(go_duration(2_592_000), "720h");
        assert_eq!(go_duration(60), "60s");
        assert_eq!(go_duration(0), "0s");
    }
}
