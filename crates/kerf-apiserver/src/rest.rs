//! The Kubernetes REST semantics on top of the store, at the JSON level and without HTTP: get,
//! list and watch with selectors, create, replace, merge / JSON patch, the status and scale
//! subresources, delete with preconditions and eviction. Errors carry what a `Status` needs.

use std::sync::Arc;

use kerf_api::FieldError;
use kerf_api::cluster::{AnyObject, ApiError};
use kerf_api::patch::PatchError;
use serde_json::{Value, json};

use crate::cluster::{Change, Expired, SimCluster};
use crate::kinds::{self, ResourceKind, label_problems};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::stored::{DynamicObject, Stored};
use crate::writes::{ChangeType, Commit, Mode, Part, Preconditions};

/// A request the API refuses, with the HTTP status and reason a `Status` reports.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RestError {
    #[error("{0}")]
    Api(#[from] ApiError),
    #[error("{0}")]
    BadRequest(String),
    #[error("{qualified} {name:?} is invalid: {}", causes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Invalid { kind: &'static str, qualified: String, name: String, causes: Vec<FieldError> },
    #[error("the server does not support the media type {0:?}")]
    UnsupportedMediaType(String),
    /// A body in a media type the server takes, of a kind it cannot read in it.
    #[error("{0}")]
    Unsupported(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("the server could not find the requested resource")]
    NoSuchPath,
    #[error("{0}")]
    Gone(String),
    /// A server-side apply that would change fields other managers own.
    #[error("{}", crate::apply::conflict_message(conflicts))]
    ApplyConflict { kind: &'static str, name: String, conflicts: Vec<crate::apply::Conflict> },
}

fn qualified(kind: &str) -> String {
    kinds::by_kind(kind).map_or_else(|| kind.to_lowercase(), ResourceKind::qualified)
}

impl RestError {
    /// The HTTP status code and the `Status` object of this error.
    pub fn status(&self) -> (u16, Value) {
        let (code, reason, message, details) = match self {
            RestError::Api(e) => match e {
                ApiError::NotFound { kind, name } => {
                    let q = qualified(kind);
                    let name = name.rsplit('/').next().unwrap_or(name);
                    (404, "NotFound", format!("{q} \"{name}\" not found"), json!({"name": name, "kind": q}))
                }
                ApiError::AlreadyExists { kind, name } => {
                    let q = qualified(kind);
                    (409, "AlreadyExists", format!("{q} \"{name}\" already exists"), json!({"name": name, "kind": q}))
                }
                ApiError::Conflict { kind, name } => {
                    let q = qualified(kind);
                    (
                        409,
                        "Conflict",
                        format!(
                            "Operation cannot be fulfilled on {q} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                        ),
                        json!({"name": name, "kind": q}),
                    )
                }
                ApiError::TooManyRequests { name, reason } => (
                    429,
                    "TooManyRequests",
                    format!("Cannot evict pod as it would violate the pod's disruption budget. {reason}"),
                    json!({"name": name, "kind": "pods", "causes": [{"reason": "DisruptionBudget", "message": reason}]}),
                ),
                ApiError::Invalid { kind, name, message } => {
                    let q = qualified(kind);
                    (
                        422,
                        "Invalid",
                        format!("{q} \"{name}\" is invalid: {message}"),
                        json!({"name": name, "kind": q, "causes": [{"reason": "FieldValueInvalid", "message": message}]}),
                    )
                }
                ApiError::Forbidden { kind, name, cause, message } => {
                    let q = qualified(kind);
                    let name = name.rsplit('/').next().unwrap_or(name);
                    (
                        403,
                        "Forbidden",
                        format!("{q} \"{name}\" is forbidden: {message}"),
                        json!({"name": name, "kind": q, "causes": [{"reason": cause, "message": message}]}),
                    )
                }
                ApiError::Other(m) => (500, "InternalError", m.clone(), Value::Null),
            },
            RestError::BadRequest(m) => (400, "BadRequest", m.clone(), Value::Null),
            RestError::Invalid { kind, qualified: _, name, causes } => {
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| {
                        // A message in the API server's wording keeps it, with its reason.
                        let worded = [
                            ("Invalid value:", "FieldValueInvalid"),
                            ("Unsupported value:", "FieldValueNotSupported"),
                            ("Required value", "FieldValueRequired"),
                            ("Too many:", "FieldValueTooMany"),
                            ("Too long:", "FieldValueTooLong"),
                        ]
                        .into_iter()
                        .find(|(prefix, _)| c.message.starts_with(prefix));
                        let (reason, message) = match worded {
                            Some((_, reason)) => (reason, c.message.clone()),
                            None => ("FieldValueInvalid", format!("Invalid value: {}", c.message)),
                        };
                        json!({"reason": reason, "message": message, "field": c.path})
                    })
                    .collect();
                (
                    422,
                    "Invalid",
                    self.to_string(),
                    json!({"name": name, "group": kind_group(kind), "kind": kind, "causes": causes}),
                )
            }
            RestError::UnsupportedMediaType(_) | RestError::Unsupported(_) => {
                (415, "UnsupportedMediaType", self.to_string(), Value::Null)
            }
            RestError::MethodNotAllowed => (405, "MethodNotAllowed", self.to_string(), Value::Null),
            RestError::NoSuchPath => (404, "NotFound", self.to_string(), Value::Null),
            RestError::Gone(m) => (410, "Expired", m.clone(), Value::Null),
            RestError::ApplyConflict { conflicts, .. } => {
                let causes: Vec<Value> = conflicts
                    .iter()
                    .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", c.manager), "field": c.field}))
                    .collect();
                (409, "Conflict", self.to_string(), json!({"causes": causes}))
            }
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        });
        if !details.is_null() {
            status["details"] = details;
        }
        (code, status)
    }
}

fn kind_group(kind: &str) -> &'static str {
    kinds::by_kind(kind).map_or("", |k| k.group)
}

/// How a PATCH body is to be applied (its Content-Type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Strategic merge patch ([`crate::strategic`]): lists merged by their fields' merge keys.
    Strategic,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Result<Self, RestError> {
        let media = ct.split(';').next().unwrap_or("").trim();
        match media {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/json-patch+json" => Ok(PatchType::Json),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            _ => Err(RestError::UnsupportedMediaType(media.to_string())),
        }
    }
}

/// List / watch filters.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn new(namespace: Option<&str>, labels: Option<&str>, fields: Option<&str>) -> Result<Self, RestError> {
        Ok(Filter {
            namespace: namespace.map(str::to_string),
            labels: LabelSelector::parse(labels.unwrap_or("")).map_err(RestError::BadRequest)?,
            fields: FieldSelector::parse(fields.unwrap_or("")).map_err(RestError::BadRequest)?,
        })
    }

    pub(crate) fn matches(&self, obj: &Stored, json: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|ns| obj.meta().namespace() == Some(ns))
            && self.labels.matches(obj.meta().labels())
            && self.fields.matches(json)
    }
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct ListPage {
    pub items: Vec<Value>,
    pub resource_version: u64,
    /// `metadata.continue`: present when more objects match.
    pub continue_token: Option<String>,
}

/// Where a paged list goes on: the first page's resourceVersion and the last key served.
/// Opaque to clients: hex of `RV/KEY`.
struct ContinueToken {
    rv: u64,
    after: String,
}

impl ContinueToken {
    fn encode(&self) -> String {
        format!("{}/{}", self.rv, self.after).bytes().map(|b| format!("{b:02x}")).collect()
    }

    fn decode(token: &str) -> Result<Self, RestError> {
        let bad = || RestError::BadRequest(format!("invalid continue token {token:?}: not one this server gave"));
        if !token.len().is_multiple_of(2) {
            return Err(bad());
        }
        let bytes: Vec<u8> = (0..token.len())
            .step_by(2)
            .map(|i| token.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect::<Option<_>>()
            .ok_or_else(bad)?;
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let (rv, after) = text.split_once('/').ok_or_else(bad)?;
        Ok(ContinueToken { rv: rv.parse().map_err(|_| bad())?, after: after.to_string() })
    }
}

/// The REST API over one store: its writes kept, or (a [`Rest::dry_run`]) only worked out.
#[derive(Clone)]
pub struct Rest {
    pub cluster: Arc<SimCluster>,
    pub(crate) commit: Commit,
}

pub(crate) fn invalid(kind: &ResourceKind, name: &str, causes: Vec<FieldError>) -> RestError {
    RestError::Invalid {
        kind: kind.kind,
        qualified: format!("{}.{}", kind.kind, kind.group).trim_end_matches('.').to_string(),
        name: name.to_string(),
        causes,
    }
}

/// Applies a patch to a JSON document, an object of `kind` (the merge and JSON patch semantics
/// are [`kerf_api::patch`]'s, the strategic merge patch's [`crate::strategic`]'s).
pub fn apply_patch(doc: &mut Value, kind: &str, patch_type: PatchType, patch: &Value) -> Result<(), RestError> {
    match patch_type {
        PatchType::Merge => kerf_api::patch::merge(doc, patch),
        PatchType::Strategic => crate::strategic::apply(kind, doc, patch)?,
        PatchType::Json => kerf_api::patch::apply_json_patch(doc, patch).map_err(|e| match e {
            PatchError::Malformed(_) => RestError::BadRequest(e.to_string()),
            PatchError::Failed(_) => {
                RestError::Api(ApiError::Invalid { kind: "Patch", name: String::new(), message: e.to_string() })
            }
        })?,
    }
    Ok(())
}

/// The resourceVersion a patch writes, which pins it to that version.
pub(crate) fn pinned_version(patch_type: PatchType, patch: &Value) -> Option<&str> {
    match patch_type {
        PatchType::Json => kerf_api::patch::json_patch_resource_version(patch),
        PatchType::Merge | PatchType::Strategic => kerf_api::patch::merge_patch_resource_version(patch),
    }
}

/// Applies a patch to the stored object (or its status) and writes the result: a PATCH request
/// and the cluster API's `patch` both come here. A conflict with a concurrent write is retried
/// unless the patch itself names a resourceVersion.
#[allow(clippy::too_many_arguments)]
pub(crate) fn patch_stored(
    cluster: &SimCluster,
    kind: &'static ResourceKind,
    namespace: Option<&str>,
    name: &str,
    patch_type: PatchType,
    patch: &Value,
    part: Part,
    commit: Commit,
) -> Result<Stored, RestError> {
    if part == Part::Status && !kind.status {
        return Err(RestError::NoSuchPath);
    }
    let pinned = pinned_version(patch_type, patch).is_some();
    let merge = patch_type == PatchType::Merge;
    let status_only = (part == Part::Status && merge).then(|| crate::status::status_only(patch)).flatten();
    let metadata_only = (part == Part::Main && merge).then(|| crate::parts::metadata_only(patch)).flatten();
    let mut attempt = 0;
    loop {
        let current = cluster
            .get_stored(kind.kind, namespace, name)
            .ok_or_else(|| RestError::Api(ApiError::NotFound { kind: kind.kind, name: name.to_string() }))?;
        // A status patch of the status alone: the stored object with its new status, written
        // whole at the version it was read at (or pinned to), so a change in between is a
        // conflict. A patch of owned metadata alone: the stored object with its new metadata,
        // written as an update of the main resource. Anything else: the whole object patched
        // and decoded.
        let alone = match (status_only, metadata_only) {
            (Some((sp, version)), _) => patch_alone(kind, name, &current, |t| {
                crate::status::patch_status(t, sp, version).map(|r| r.map_err(|e| vec![e]))
            })
            .map(|n| (n, Mode::All)),
            (None, Some(mp)) => patch_alone(kind, name, &current, |t| crate::parts::patch_metadata(t, mp))
                .map(|n| (n, write_mode(kind, part))),
            (None, None) => None,
        };
        let (obj, mode) = match alone {
            Some((next, mode)) => {
                let obj = next?;
                if part == Part::Main {
                    check_transition(cluster, kind, namespace, name, &obj)?;
                }
                (obj, mode)
            }
            None => {
                let mut doc = current.to_json(kind);
                apply_patch(&mut doc, kind.kind, patch_type, patch)?;
                let obj = decode_body(kind, namespace, doc)?;
                if obj.meta().name() != Some(name) {
                    return Err(invalid(kind, name, vec![FieldError::new("metadata.name", "field is immutable")]));
                }
                if part == Part::Main {
                    check_transition(cluster, kind, namespace, name, &obj)?;
                }
                (obj, write_mode(kind, part))
            }
        };
        match cluster.write_stored_as(kind.kind, obj, mode, commit) {
            Err(ApiError::Conflict { .. }) if !pinned && attempt < 5 => attempt += 1,
            r => return Ok(r?),
        }
    }
}

/// `current` patched by `patch` (a merge patch of one part alone: the status, pinned or not,
/// or owned metadata) and checked as a decoded body would be; `None` for an object or kind kept
/// without that part typed.
fn patch_alone(
    kind: &'static ResourceKind,
    name: &str,
    current: &Stored,
    patch: impl FnOnce(&AnyObject) -> Option<Result<AnyObject, Vec<FieldError>>>,
) -> Option<Result<Stored, RestError>> {
    let (Stored::Typed(typed), Some(codec)) = (current, kind.typed) else { return None };
    let next = match patch(typed)? {
        Ok(next) => next,
        Err(problems) => return Some(Err(invalid(kind, name, problems))),
    };
    let problems = (codec.validate)(&next);
    Some(if problems.is_empty() { Ok(Stored::Typed(next)) } else { Err(invalid(kind, name, problems)) })
}

/// What a write of `part` of `kind` replaces.
fn write_mode(kind: &ResourceKind, part: Part) -> Mode {
    match part {
        Part::Status => Mode::Status,
        Part::Main if kind.status => Mode::Spec,
        Part::Main => Mode::All,
    }
}

/// Refuses an update that breaks a rule against the object it replaces
/// ([`crate::kinds::transition_rules`]).
pub(crate) fn check_transition(
    cluster: &SimCluster,
    kind: &'static ResourceKind,
    namespace: Option<&str>,
    name: &str,
    new: &Stored,
) -> Result<(), RestError> {
    let (Some(Stored::Typed(old)), Stored::Typed(new)) = (cluster.get_stored(kind.kind, namespace, name), new) else {
        return Ok(());
    };
    let problems = crate::kinds::transition_rules(&old, new);
    if problems.is_empty() { Ok(()) } else { Err(invalid(kind, name, problems)) }
}

/// Decodes a request body into a storable object of `kind`, checking what the API server
/// checks: apiVersion / kind, the namespace against the URL's, the name, the schema and
/// (for kerf's kinds) the CRD validation rules.
pub fn decode_body(kind: &'static ResourceKind, namespace: Option<&str>, body: Value) -> Result<Stored, RestError> {
    let Value::Object(mut map) = body else {
        return Err(RestError::BadRequest(format!("the body of a {} must be a JSON object", kind.kind)));
    };
    let api_version = kind.api_version();
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != api_version => {
            return Err(RestError::BadRequest(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
        _ => {}
    }
    match map.get("kind").and_then(Value::as_str) {
        Some(k) if k != kind.kind => {
            return Err(RestError::BadRequest(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                kind.kind
            )));
        }
        _ => {}
    }
    map.insert("apiVersion".to_string(), Value::String(api_version));
    map.insert("kind".to_string(), Value::String(kind.kind.to_string()));
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        return Err(invalid(kind, "", vec![FieldError::new("metadata", "must be an object")]));
    }
    let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    if kind.namespaced {
        match (meta.get("namespace").and_then(Value::as_str), namespace) {
            (Some(a), Some(b)) if a != b => {
                return Err(RestError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".to_string(),
                ));
            }
            (None, Some(ns)) => meta["namespace"] = Value::String(ns.to_string()),
            _ => {}
        }
    } else if let Some(m) = meta.as_object_mut() {
        m.remove("namespace");
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        // A value of another type is the decoder's to name.
        let problems = label_problems(labels.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))));
        if !problems.is_empty() {
            return Err(invalid(kind, &name, problems));
        }
    }
    if !name.is_empty() && !kerf_api::validation::is_dns1123_subdomain(&name) {
        return Err(invalid(
            kind,
            &name,
            vec![FieldError::new(
                "metadata.name",
                format!(
                    "{name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            )],
        ));
    }
    let mut value = Value::Object(map);
    // A CRD's kind: its schema's defaults, then the checks of its values.
    if let Some(custom) = kind.custom {
        crate::value_validation::apply_defaults(&custom.schema, &mut value);
        let problems = crate::value_validation::problems(&custom.schema, &value);
        if !problems.is_empty() {
            return Err(invalid(kind, &name, problems));
        }
    }
    match kind.typed {
        Some(t) => {
            let any = (t.decode)(value).map_err(|e| invalid(kind, &name, vec![e]))?;
            let problems = (t.validate)(&any);
            if !problems.is_empty() {
                return Err(invalid(kind, &name, problems));
            }
            Ok(Stored::Typed(any))
        }
        None => DynamicObject::from_json(value)
            .map(|d| Stored::Dynamic(Arc::new(d)))
            .map_err(|e| invalid(kind, &name, vec![e])),
    }
}

impl Rest {
    pub fn new(cluster: Arc<SimCluster>) -> Self {
        Rest { cluster, commit: Commit::Store }
    }

    /// Decodes a request body into a storable object of `kind` ([`decode_body`]).
    pub fn decode(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        body: Value,
    ) -> Result<Stored, RestError> {
        decode_body(kind, namespace, body)
    }

    fn current(&self, kind: &'static ResourceKind, namespace: Option<&str>, name: &str) -> Result<Stored, RestError> {
        self.cluster
            .get_stored(kind.kind, namespace, name)
            .ok_or_else(|| RestError::Api(ApiError::NotFound { kind: kind.kind, name: name.to_string() }))
    }

    pub fn get(&self, kind: &'static ResourceKind, namespace: Option<&str>, name: &str) -> Result<Value, RestError> {
        Ok(self.shown(kind, self.current(kind, namespace, name)?.to_json(kind)))
    }

    /// An object as a read shows it: a PodDisruptionBudget with its status now
    /// ([`crate::budget_status`]).
    fn shown(&self, kind: &ResourceKind, obj: Value) -> Value {
        if kind.kind == "PodDisruptionBudget" { crate::budget_status::with_status(&self.cluster, obj) } else { obj }
    }

    /// The matching objects and the list's resourceVersion.
    pub fn list(&self, kind: &'static ResourceKind, filter: &Filter) -> (Vec<Value>, u64) {
        let (items, rv) = self.cluster.list_stored(kind.kind, filter.namespace.as_deref());
        let items = items
            .iter()
            .filter_map(|o| {
                let j = o.to_json(kind);
                filter.matches(o, &j).then(|| self.shown(kind, j))
            })
            .collect();
        (items, rv)
    }

    /// One page of a list (`limit` and `continue`, as Kubernetes pages): at most `limit`
    /// matching objects after where `continue_token` left off, in name order, and a token for
    /// the rest when more match. The page's resourceVersion is the first page's, so a watch
    /// started from it sees every change made while the pages were read. Unlike etcd, later pages
    /// read the store as it is then, not as it was at the first page (a paged list of a busy
    /// cluster can show an object changed after the first page, never one twice or none lost).
    pub fn list_page(
        &self,
        kind: &'static ResourceKind,
        filter: &Filter,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, RestError> {
        let (items, resource_version, continue_token) = self.page_of(kind, filter, limit, continue_token, |o, j| {
            self.shown(kind, j.unwrap_or_else(|| o.to_json(kind)))
        })?;
        Ok(ListPage { items, resource_version, continue_token })
    }

    /// [`Rest::list_page`] as the JSON text of a `KindList`, each object written straight from
    /// its stored form.
    pub fn list_page_json(
        &self,
        kind: &'static ResourceKind,
        filter: &Filter,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<Vec<u8>, RestError> {
        let (items, rv, continue_token) = self.page_of(kind, filter, limit, continue_token, |o, j| {
            let mut text = Vec::new();
            match j {
                Some(j) => {
                    let _ = serde_json::to_writer(&mut text, &self.shown(kind, j));
                }
                None if kind.kind == "PodDisruptionBudget" => {
                    let _ = serde_json::to_writer(&mut text, &self.shown(kind, o.to_json(kind)));
                }
                None => o.write_json(kind, &mut text),
            }
            text
        })?;
        let mut metadata = serde_json::json!({"resourceVersion": rv.to_string()});
        if let Some(c) = continue_token {
            metadata["continue"] = Value::String(c);
        }
        let head = serde_json::json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version(), "metadata": metadata});
        let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum::<usize>() + 256);
        let _ = serde_json::to_writer(&mut out, &head);
        out.pop();
        out.extend_from_slice(b",\"items\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item);
        }
        out.extend_from_slice(b"]}");
        Ok(out)
    }

    /// One page of matching objects, each made by `item` from the stored object and, when a
    /// field selector had to judge it, its JSON; the page's resourceVersion and continue token.
    fn page_of<T>(
        &self,
        kind: &'static ResourceKind,
        filter: &Filter,
        limit: Option<usize>,
        continue_token: Option<&str>,
        item: impl Fn(&Stored, Option<Value>) -> T,
    ) -> Result<(Vec<T>, u64, Option<String>), RestError> {
        let from = continue_token.filter(|t| !t.is_empty()).map(ContinueToken::decode).transpose()?;
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        // One more than the page tells whether more follow; a field selector is judged on the
        // JSON below, so then every label-matching object is read.
        let max = if filter.fields.is_empty() { limit.saturating_add(1) } else { usize::MAX };
        let (stored, now) = self.cluster.list_stored_after(
            kind.kind,
            filter.namespace.as_deref(),
            from.as_ref().map(|f| f.after.as_str()),
            max,
            |o| filter.labels.matches(o.meta().labels()),
        );
        let rv = from.as_ref().map_or(now, |f| f.rv);
        let mut items = Vec::new();
        let mut last_key = None;
        let mut more = false;
        for (key, o) in &stored {
            let j = if filter.fields.is_empty() {
                None
            } else {
                let j = o.to_json(kind);
                if !filter.fields.matches(&j) {
                    continue;
                }
                Some(j)
            };
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(item(o, j));
            last_key = Some(key.clone());
        }
        let continue_token = match (more, last_key) {
            (true, Some(after)) => Some(ContinueToken { rv, after }.encode()),
            _ => None,
        };
        Ok((items, rv, continue_token))
    }

    pub fn create(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        body: Value,
    ) -> Result<Value, RestError> {
        if !self.cluster.serves(kind) {
            return Err(RestError::NoSuchPath);
        }
        let mut body = body;
        if kind.kind == "Pod" {
            crate::admission::pod(&mut body);
        }
        let obj = self.decode(kind, namespace, body)?;
        Ok(self.cluster.create_stored_as(kind.kind, obj, self.commit)?.to_json(kind))
    }

    /// PUT: replaces the object (or its status). The body's name must be the URL's.
    pub fn replace(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        part: Part,
    ) -> Result<Value, RestError> {
        if part == Part::Status && !kind.status {
            return Err(RestError::NoSuchPath);
        }
        let obj = self.decode(kind, namespace, body)?;
        if obj.meta().name() != Some(name) {
            return Err(RestError::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                obj.meta().name().unwrap_or("")
            )));
        }
        if part == Part::Main {
            check_transition(&self.cluster, kind, namespace, name, &obj)?;
        }
        Ok(self.cluster.write_stored_as(kind.kind, obj, write_mode(kind, part), self.commit)?.to_json(kind))
    }

    /// PATCH: applies the patch to the current object (or its status) and writes the result
    /// ([`patch_stored`]).
    pub fn patch(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        part: Part,
    ) -> Result<Value, RestError> {
        Ok(patch_stored(&self.cluster, kind, namespace, name, patch_type, patch, part, self.commit)?.to_json(kind))
    }

    /// DELETE with optional preconditions; returns the object's last state.
    pub fn delete(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        pre: &Preconditions,
    ) -> Result<Value, RestError> {
        Ok(self.cluster.delete_stored_as(kind.kind, namespace, name, pre, self.commit)?.to_json(kind))
    }

    /// The Eviction subresource of a pod (PodDisruptionBudgets honoured).
    pub fn evict(&self, namespace: &str, name: &str, body: &Value) -> Result<Value, RestError> {
        if let Some(n) = body.pointer("/metadata/name").and_then(Value::as_str)
            && n != name
        {
            return Err(RestError::BadRequest(format!("the eviction names pod {n:?}, the URL pod {name:?}")));
        }
        match self.commit {
            Commit::Store => self.cluster.evict_pod(namespace, name)?,
            Commit::DryRun => {
                if let Some(refusal) = self.cluster.eviction_refusal(namespace, name)? {
                    return Err(refusal.into());
                }
            }
        }
        Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
    }

    /// Changes of `kind` after `since` that pass the filter, as (type, object), and the
    /// resourceVersion they bring the watch to.
    pub fn changes(
        &self,
        kind: &'static ResourceKind,
        filter: &Filter,
        since: u64,
    ) -> Result<(Vec<(ChangeType, Value)>, u64), Expired> {
        let (changes, last) = self.changes_of(kind, since)?;
        Ok((changes.iter().filter_map(|c| Rest::event_of(kind, filter, c)).collect(), last))
    }

    /// The changes of `kind` after `since` as the history keeps them (nothing copied), and the
    /// last resourceVersion looked at; [`Rest::event_of`] turns each into what a watch shows.
    pub fn changes_of(&self, kind: &'static ResourceKind, since: u64) -> Result<(Vec<Change>, u64), Expired> {
        let mut changes = self.cluster.changes_since(since)?;
        let last = changes.last().map_or(since, |c| c.resource_version);
        changes.retain(|c| c.kind == kind.kind);
        Ok((changes, last))
    }

    /// What a watch filtered by `filter` shows of one change: an object entering the filter is
    /// ADDED, one leaving it DELETED, one outside it nothing.
    pub fn event_of(kind: &'static ResourceKind, filter: &Filter, c: &Change) -> Option<(ChangeType, Value)> {
        let j = c.object.to_json(kind);
        let now = filter.matches(&c.object, &j);
        let before = c.previous.as_ref().map(|p| filter.matches(p, &p.to_json(kind)));
        match (before, now) {
            (Some(false), true) => Some((ChangeType::Added, j)),
            (Some(true), false) => Some((ChangeType::Deleted, j)),
            (_, true) => Some((c.type_, j)),
            (_, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_api::clock::ManualClock;

    fn rest() -> Rest {
        let c = Arc::new(SimCluster::new(ManualClock::new(), 1));
        c.enable_serving(1000);
        Rest::new(c)
    }

    fn kind(k: &str) -> &'static ResourceKind {
        kinds::by_kind(k).unwrap()
    }

    #[test]
    fn merge_patch_json_patch_and_status_subresource_follow_api_semantics() {
        let r = rest();
        let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}}});
        let created = r.create(kind("Deployment"), Some("default"), dep).unwrap();
        assert_eq!(created["metadata"]["namespace"], "default");
        let patched = r
            .patch(
                kind("Deployment"),
                Some("default"),
                "web",
                PatchType::Merge,
                &json!({"metadata": {"labels": {"a": "b"}}, "status": {"replicas": 9}}),
                Part::Main,
            )
            .unwrap();
        assert_eq!(patched["metadata"]["labels"]["a"], "b");
        assert!(patched.get("status").is_none(), "the main resource does not write status: {patched}");
        let patched = r
            .patch(
                kind("Deployment"),
                Some("default"),
                "web",
                PatchType::Json,
                &json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]),
                Part::Main,
            )
            .unwrap();
        assert_eq!(patched["spec"]["replicas"], 4);
        let status = r
            .patch(
                kind("Deployment"),
                Some("default"),
                "web",
                PatchType::Merge,
                &json!({"status": {"replicas": 4}, "spec": {"replicas": 0}}),
                Part::Status,
            )
            .unwrap();
        assert_eq!((status["status"]["replicas"].clone(), status["spec"]["replicas"].clone()), (json!(4), json!(4)));
        let scale = r
            .update_scale(
                kind("Deployment"),
                Some("default"),
                "web",
                &json!({"spec": {"replicas": 2}}),
                Some(PatchType::Merge),
            )
            .unwrap();
        assert_eq!(scale["spec"]["replicas"], 2);
        assert_eq!(scale["status"]["selector"], "app=web");
        let err = r
            .update_scale(
                kind("Deployment"),
                Some("default"),
                "web",
                &json!({"spec": {"replicas": -1}}),
                Some(PatchType::Merge),
            )
            .unwrap_err();
        assert_eq!(err.status().0, 422);
    }

    #[test]
    fn a_status_patch_applied_to_the_status_alone_gives_what_the_whole_object_patch_gives() {
        let r = rest();
        let pod = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}})
        };
        // The second pod's patches also name its own name, which only the whole-object path
        // takes (and checks), so the two pods go through the two paths.
        let (fast, whole) = ("fast", "whole");
        for name in [fast, whole] {
            r.create(kind("Pod"), Some("default"), pod(name)).unwrap();
        }
        let patch = |name: &str, body: Value| {
            let mut body = body;
            if name == whole {
                body["metadata"]["name"] = json!(whole);
            }
            r.patch(kind("Pod"), Some("default"), name, PatchType::Merge, &body, Part::Status)
        };
        let comparable = |mut v: Value| {
            for f in ["name", "uid", "resourceVersion", "creationTimestamp"] {
                v["metadata"].as_object_mut().unwrap().remove(f);
            }
            v
        };
        let steps = [
            json!({"status": {"nominatedNodeName": "n1"}}),
            json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}], "phase": "Running"},
                "spec": {"nodeName": "ignored"}}),
            json!({"status": {"nominatedNodeName": null}}),
            json!({"status": null}),
        ];
        for step in steps {
            let (a, b) = (patch(fast, step.clone()).unwrap(), patch(whole, step.clone()).unwrap());
            assert_eq!(comparable(a), comparable(b), "after {step}");
        }
        // Pinned to the version read: written; pinned to an older one: a conflict.
        let rv = |name: &str| r.get(kind("Pod"), Some("default"), name).unwrap()["metadata"]["resourceVersion"].clone();
        let now = rv(fast);
        let pinned = json!({"metadata": {"resourceVersion": now}, "status": {"phase": "Running"}});
        let written = patch(fast, pinned.clone()).unwrap();
        assert_eq!(written["status"]["phase"], "Running");
        assert_ne!(written["metadata"]["resourceVersion"], now);
        assert_eq!(patch(fast, pinned).unwrap_err().status().0, 409);
        // A status of the wrong shape is refused naming the field, and nothing is written.
        let before = rv(fast);
        let err = patch(fast, json!({"status": {"phase": 7}})).unwrap_err();
        assert_eq!(err.status().0, 422);
        assert!(err.status().1.to_string().contains("status.phase"), "{}", err.status().1);
        assert_eq!(rv(fast), before);
    }

    #[test]
    fn a_static_nodepool_scales_through_its_scale_subresource_and_no_pool_turns_static_or_dynamic() {
        let r = rest();
        let pool = |name: &str, replicas: Option<i64>| {
            let mut spec = json!({"template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}});
            if let Some(n) = replicas {
                spec["replicas"] = json!(n);
            }
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec})
        };
        r.create(kind("NodePool"), None, pool("fixed", Some(2))).unwrap();
        r.create(kind("NodePool"), None, pool("dynamic", None)).unwrap();
        let scale = r
            .update_scale(kind("NodePool"), None, "fixed", &json!({"spec": {"replicas": 5}}), Some(PatchType::Merge))
            .unwrap();
        assert_eq!((scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()), (Some("Scale"), Some(5)));
        assert_eq!(r.get(kind("NodePool"), None, "fixed").unwrap()["spec"]["replicas"], 5);
        assert_eq!(r.get_scale(kind("NodePool"), None, "fixed").unwrap()["status"]["replicas"], 0, "status.nodes");
        let err = r
            .update_scale(kind("NodePool"), None, "dynamic", &json!({"spec": {"replicas": 3}}), Some(PatchType::Merge))
            .unwrap_err();
        assert_eq!(err.status().0, 422);
        assert!(
            format!("{:?}", err.status().1).contains("a dynamic NodePool cannot become static"),
            "{:?}",
            err.status()
        );
        let err = r
            .patch(kind("NodePool"), None, "fixed", PatchType::Merge, &json!({"spec": {"replicas": null}}), Part::Main)
            .unwrap_err();
        assert!(
            format!("{:?}", err.status().1).contains("a static NodePool cannot become dynamic"),
            "{:?}",
            err.status()
        );
        assert!(r.replace(kind("NodePool"), None, "dynamic", pool("dynamic", Some(1)), Part::Main).is_err());
    }

    #[test]
    fn eviction_refused_by_a_disruption_budget_is_429_too_many_requests() {
        let r = rest();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        // Created with its status (as a kubelet stand-in would write it).
        let obj = r.decode(kind("Pod"), Some("default"), pod).unwrap();
        r.cluster.create_stored("Pod", obj).unwrap();
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
        r.create(kind("PodDisruptionBudget"), Some("default"), pdb).unwrap();
        let err = r.evict("default", "p", &json!({})).unwrap_err();
        let (code, status) = err.status();
        assert_eq!(code, 429);
        assert_eq!(status["reason"], "TooManyRequests");
        assert!(
            status["details"]["causes"][0]["message"].as_str().unwrap().contains("PodDisruptionBudget default/web")
        );
        assert!(r.get(kind("Pod"), Some("default"), "p").is_ok());
    }

    #[test]
    fn delete_with_finalizers_marks_then_removal_of_the_last_finalizer_deletes() {
        let r = rest();
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "finalizers": ["example.com/keep"]}, "spec": {"holderIdentity": "a"}});
        let created = r.create(kind("Lease"), Some("default"), lease).unwrap();
        let wrong = Preconditions { resource_version: Some("999".to_string()), uid: None };
        assert_eq!(r.delete(kind("Lease"), Some("default"), "l", &wrong).unwrap_err().status().0, 409);
        let pre =
            Preconditions { uid: created["metadata"]["uid"].as_str().map(str::to_string), resource_version: None };
        let marked = r.delete(kind("Lease"), Some("default"), "l", &pre).unwrap();
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert!(r.get(kind("Lease"), Some("default"), "l").is_ok());
        r.patch(
            kind("Lease"),
            Some("default"),
            "l",
            PatchType::Merge,
            &json!({"metadata": {"finalizers": null}}),
            Part::Main,
        )
        .unwrap();
        assert_eq!(r.get(kind("Lease"), Some("default"), "l").unwrap_err().status().0, 404);
        let (changes, _) = r.changes(kind("Lease"), &Filter::default(), 0).unwrap();
        let types: Vec<&str> = changes.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
    }

    #[test]
    fn a_watch_resuming_from_a_resource_version_no_longer_kept_is_expired() {
        let c = Arc::new(SimCluster::new(ManualClock::new(), 1));
        c.enable_serving(2);
        let r = Rest::new(c);
        for n in ["a", "b", "c", "d"] {
            r.create(kind("PriorityClass"), None, json!({"metadata": {"name": n}, "value": 1})).unwrap();
        }
        assert!(r.changes(kind("PriorityClass"), &Filter::default(), 1).is_err());
        let (recent, last) = r.changes(kind("PriorityClass"), &Filter::default(), 2).unwrap();
        let names: Vec<&str> = recent.iter().map(|(_, o)| o["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!((names, last), (vec!["c", "d"], 4));
        let (code, _) = RestError::Gone("too old".to_string()).status();
        assert_eq!(code, 410);
    }

    #[test]
    fn a_list_paged_by_limit_and_continue_returns_each_matching_object_once() {
        let r = rest();
        for i in 0..7 {
            let app = if i % 3 == 0 { "skip" } else { "web" };
            let pod = json!({"metadata": {"name": format!("p{i}"), "labels": {"app": app}}, "spec": {"containers": [{"name": "c"}]}});
            r.create(kind("Pod"), Some("default"), pod).unwrap();
        }
        let f = Filter::new(None, Some("app=web"), None).unwrap();
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = r.list_page(kind("Pod"), &f, Some(2), token.as_deref()).unwrap();
            pages += 1;
            assert!(page.items.len() <= 2);
            names.extend(page.items.iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()));
            // A pod created between pages is served once, in name order.
            if pages == 1 {
                let late = json!({"metadata": {"name": "p9", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}});
                r.create(kind("Pod"), Some("default"), late).unwrap();
            }
            match page.continue_token {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        assert_eq!(names, ["p1", "p2", "p4", "p5", "p9"]);
        assert_eq!(pages, 3);
        let all = r.list_page(kind("Pod"), &f, None, None).unwrap();
        assert_eq!((all.items.len(), all.continue_token), (5, None));
        assert!(matches!(r.list_page(kind("Pod"), &f, Some(2), Some("zz")), Err(RestError::BadRequest(_))));
    }

    #[test]
    fn a_list_written_as_text_is_the_list_of_objects_the_server_shows() {
        let r = rest();
        for i in 0..5 {
            let pod = json!({"metadata": {"name": format!("p{i}"), "labels": {"app": "web"}},
                "spec": {"nodeName": if i % 2 == 0 { "n1" } else { "n2" }, "priority": i,
                    "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]},
                "status": {"phase": "Running"}});
            r.create(kind("Pod"), Some("default"), pod).unwrap();
        }
        r.create(kind("Pod"), Some("default"), json!({"metadata": {"name": "bare"}, "spec": {"containers": []}}))
            .unwrap();
        let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}});
        r.create(kind("NodePool"), None, pool).unwrap();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}});
        r.create(kind("ConfigMap"), Some("default"), cm).unwrap();
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
        r.create(kind("PodDisruptionBudget"), Some("default"), pdb).unwrap();
        let cases = [
            ("Pod", Filter::new(None, None, None).unwrap(), None),
            ("Pod", Filter::new(Some("default"), Some("app=web"), None).unwrap(), Some(2)),
            ("Pod", Filter::new(None, None, Some("spec.nodeName=n1")).unwrap(), None),
            ("NodePool", Filter::new(None, None, None).unwrap(), None),
            ("ConfigMap", Filter::new(None, None, None).unwrap(), None),
            ("PodDisruptionBudget", Filter::new(None, None, None).unwrap(), None),
        ];
        for (k, f, limit) in cases {
            let page = r.list_page(kind(k), &f, limit, None).unwrap();
            let text = r.list_page_json(kind(k), &f, limit, None).unwrap();
            let written: Value = serde_json::from_slice(&text).unwrap();
            let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
            if let Some(c) = &page.continue_token {
                metadata["continue"] = json!(c);
            }
            let shown = json!({"kind": format!("{k}List"), "apiVersion": kind(k).api_version(),
                "metadata": metadata, "items": page.items});
            assert_eq!(written, shown, "{k} {f:?}");
            assert!(!page.items.is_empty(), "{k}");
        }
    }

    #[test]
    fn selectors_filter_lists_and_watches() {
        let r = rest();
        for (n, node) in [("a", "n1"), ("b", "n2")] {
            let pod = json!({"metadata": {"name": n, "labels": {"app": n}}, "spec": {"nodeName": node, "containers": [{"name": "c"}]}});
            r.create(kind("Pod"), Some("default"), pod).unwrap();
        }
        let f = Filter::new(Some("default"), Some("app in (a,b)"), Some("spec.nodeName=n2")).unwrap();
        let (items, _) = r.list(kind("Pod"), &f);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"]["name"], "b");
        let (changes, last) = r.changes(kind("Pod"), &f, 0).unwrap();
        assert_eq!(changes.len(), 1);
        // Relabelled out of the selector: the watch sees it go; back in: it comes again.
        let relabel = |v: &str| json!({"metadata": {"labels": {"app": v}}});
        r.patch(kind("Pod"), Some("default"), "b", PatchType::Merge, &relabel("c"), Part::Main).unwrap();
        r.patch(kind("Pod"), Some("default"), "b", PatchType::Merge, &relabel("b"), Part::Main).unwrap();
        let (changes, _) = r.changes(kind("Pod"), &f, last).unwrap();
        let types: Vec<&str> = changes.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(types, ["DELETED", "ADDED"]);
        assert!(Filter::new(None, Some("a in b"), None).is_err());
    }
}
