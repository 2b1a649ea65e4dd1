//! Server-side apply (`PATCH` with `application/apply-patch+yaml`), and the field managers of the
//! other writes of the REST API: a create, update or patch records its manager's fields as an
//! `Update` entry of `managedFields` ([`crate::managed`]); an apply merges its configuration into
//! the object, removes the fields the manager applied before and no longer does (unless another
//! manager owns them), and refuses to change a field another manager owns unless forced, naming
//! each such field and its manager as the API server does (docs/playground.md, "Server-side
//! apply").

use kerf_api::FieldError;
use kerf_api::clock::Clock;
use kerf_api::cluster::ApiError;
use serde_json::{Value, json};

use crate::kinds::ResourceKind;
use crate::managed::fieldset::{FieldSet, Walker, display, remove_at, value_at};
use crate::managed::shapes::Shapes;
use crate::managed::{self, Writer, apply_entry, entries, managed_view, new_apply_entry, record_update, set_entries};
use crate::rest::{PatchType, Rest, RestError, apply_patch, decode_body, invalid, pinned_version};
use crate::writes::Part;

/// Writes retried when the object changed under them.
const RETRIES: usize = 5;

/// One field an apply would take from another manager.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// `.spec.replicas`
    pub field: String,
    /// `"kubectl-edit" using apps/v1`
    pub manager: String,
}

/// The API server's message for conflicts: `Apply failed with 1 conflict: conflict with
/// "kubectl-edit" using apps/v1: .spec.replicas`; with more, `Apply failed with 3 conflicts:`
/// then for each manager `conflicts with "m":` and its fields, one `- .path` a line.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    let n = conflicts.len();
    if let [c] = conflicts {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", c.manager, c.field);
    }
    let mut managers: Vec<&str> = Vec::new();
    for c in conflicts {
        if !managers.contains(&c.manager.as_str()) {
            managers.push(&c.manager);
        }
    }
    let groups: Vec<String> = managers
        .iter()
        .map(|m| {
            let fields: Vec<String> =
                conflicts.iter().filter(|c| c.manager == *m).map(|c| format!("- {}", c.field)).collect();
            format!("conflicts with {m}:\n{}", fields.join("\n"))
        })
        .collect();
    format!("Apply failed with {n} conflicts: {}", groups.join("\n"))
}

impl Rest {
    fn writer<'a>(&self, kind: &ResourceKind, manager: &'a str) -> Writer<'a> {
        let now = self.cluster.clock().now();
        Writer {
            manager,
            api_version: kind.api_version(),
            time: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            subresource: "",
        }
    }

    /// POST by `manager`: the object's fields become its `Update` entry's.
    pub fn create_by(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        body: Value,
        manager: &str,
    ) -> Result<Value, RestError> {
        let mut body = body;
        record_update(kind.kind, kind.status, None, &mut body, &self.writer(kind, manager));
        self.create(kind, namespace, body)
    }

    /// PUT by `manager`: the fields it changes become its. A status write keeps the entries as
    /// they are.
    pub fn replace_by(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        part: Part,
        manager: &str,
    ) -> Result<Value, RestError> {
        let mut body = body;
        if part == Part::Main
            && let Ok(live) = self.get(kind, namespace, name)
        {
            record_update(kind.kind, kind.status, Some(&live), &mut body, &self.writer(kind, manager));
        }
        self.replace(kind, namespace, name, body, part)
    }

    /// PUT or PATCH of the scale subresource by `manager`: `spec.replicas` becomes its, as an
    /// `Update` entry of the `scale` subresource.
    pub fn update_scale_as(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        body: &Value,
        patch_type: Option<PatchType>,
        manager: &str,
    ) -> Result<Value, RestError> {
        let writer = Writer { subresource: "scale", ..self.writer(kind, manager) };
        self.update_scale_by(kind, namespace, name, body, patch_type, Some(&writer))
    }

    /// PATCH (merge, JSON or strategic) by `manager`: the patched object written as an update
    /// at the version it was read at, retried if the object changed meanwhile (unless the patch
    /// names a resourceVersion). A patch of the status goes as [`Rest::patch`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_by(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        part: Part,
        manager: &str,
    ) -> Result<Value, RestError> {
        if part == Part::Status {
            return self.patch(kind, namespace, name, patch_type, patch, part);
        }
        let pinned = pinned_version(patch_type, patch).is_some();
        let mut attempt = 0;
        loop {
            let live = self.get(kind, namespace, name)?;
            let mut doc = live.clone();
            apply_patch(&mut doc, patch_type, patch)?;
            if doc.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
                return Err(invalid(kind, name, vec![FieldError::new("metadata.name", "field is immutable")]));
            }
            record_update(kind.kind, kind.status, Some(&live), &mut doc, &self.writer(kind, manager));
            if !pinned {
                doc["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
            }
            match self.replace(kind, namespace, name, doc, Part::Main) {
                Err(RestError::Api(ApiError::Conflict { .. })) if !pinned && attempt < RETRIES => attempt += 1,
                r => return r,
            }
        }
    }

    /// Server-side apply of `config` by `manager` to the object `name` (created if missing);
    /// true when it was created.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &self,
        kind: &'static ResourceKind,
        namespace: Option<&str>,
        name: &str,
        config: Value,
        manager: &str,
        force: bool,
    ) -> Result<(Value, bool), RestError> {
        if manager.is_empty() {
            return Err(RestError::BadRequest(
                "PATCH requests with the apply patch type must name a field manager (fieldManager)".to_string(),
            ));
        }
        let config = apply_config(kind, name, config)?;
        let shapes = Shapes::of(kind.kind);
        let view = managed_view(&config, kind.status);
        let applied = Walker::new(&shapes).set_of(&view);
        let writer = self.writer(kind, manager);
        let pinned = config.pointer("/metadata/resourceVersion").is_some_and(|v| !v.is_null());
        let mut attempt = 0;
        loop {
            let result = match self.cluster.get_stored(kind.kind, namespace, name) {
                None => {
                    let mut obj = config.clone();
                    set_entries(&mut obj, &[new_apply_entry(&writer, applied.clone())]);
                    self.create(kind, namespace, obj).map(|v| (v, true))
                }
                Some(current) => {
                    let live = current.to_json(kind);
                    match merged(kind, namespace, &shapes, &live, &config, &applied, &writer, force)? {
                        None => return Ok((live, false)),
                        Some(mut next) => {
                            if !pinned {
                                next["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
                            }
                            self.replace(kind, namespace, name, next, Part::Main).map(|v| (v, false))
                        }
                    }
                }
            };
            match result {
                Err(RestError::Api(ApiError::Conflict { .. } | ApiError::AlreadyExists { .. }))
                    if !pinned && attempt < RETRIES =>
                {
                    attempt += 1
                }
                r => return r,
            }
        }
    }
}

/// The applied configuration checked (an object of the kind, its name the URL's) and without
/// what the main resource does not write (the status of a kind with a status subresource).
fn apply_config(kind: &'static ResourceKind, name: &str, config: Value) -> Result<Value, RestError> {
    let Value::Object(mut cfg) = config else {
        return Err(RestError::BadRequest(format!(
            "the applied configuration of {} {name} must be an object",
            kind.kind
        )));
    };
    for field in ["apiVersion", "kind"] {
        if cfg.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(RestError::BadRequest(format!(
                "the applied configuration of {} {name} must set {field}",
                kind.kind
            )));
        }
    }
    let meta = cfg.entry("metadata").or_insert_with(|| json!({}));
    match meta.get("name").and_then(Value::as_str) {
        Some(n) if n != name => {
            return Err(RestError::BadRequest(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        Some(_) => {}
        None => meta["name"] = json!(name),
    }
    if let Some(m) = meta.as_object_mut() {
        m.remove("managedFields");
    }
    if kind.status {
        cfg.remove("status");
    }
    Ok(Value::Object(cfg))
}

/// The object after applying `config` to `live`, or `None` when that changes nothing; a
/// conflict unless forced. Values are compared as the kind stores them (`1m` is the `1m0s` a
/// NodePool keeps), so an apply of what is there changes nothing.
#[allow(clippy::too_many_arguments)]
fn merged(
    kind: &'static ResourceKind,
    namespace: Option<&str>,
    shapes: &Shapes,
    live: &Value,
    config: &Value,
    applied: &FieldSet,
    writer: &Writer,
    force: bool,
) -> Result<Option<Value>, RestError> {
    let mut list = entries(live);
    let mine = apply_entry(&list, writer.manager);
    let live_view = managed_view(live, kind.status);

    // Fields this manager applied before and no longer does go, unless another manager has them.
    let mut next = live.clone();
    if let Some(i) = mine {
        let mut gone = list[i].fields.clone();
        gone.remove(applied);
        for path in gone.members() {
            let kept = list.iter().enumerate().any(|(j, e)| j != i && e.fields.contains(&path));
            if !kept {
                remove_at(&mut next, &path);
            }
        }
    }
    Walker::new(shapes).merge(&mut next, config);
    let stored = decode_body(kind, namespace, next.clone())?.to_json(kind);
    let stored_view = managed_view(&stored, kind.status);

    // Fields set to another value than another manager's are conflicts.
    let mut conflicts = Vec::new();
    let mut taken = FieldSet::default();
    for path in applied.members() {
        let same = value_at(&live_view, &path) == value_at(&stored_view, &path);
        if !path.last().is_some_and(|s| s.starts_with("f:")) || same {
            continue;
        }
        for (i, e) in list.iter().enumerate() {
            if Some(i) != mine && e.fields.contains(&path) {
                conflicts.push(Conflict { field: display(&path), manager: e.who() });
                taken.insert(&path);
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let name = live.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        return Err(RestError::ApplyConflict { kind: kind.kind, name, conflicts });
    }
    for (i, e) in list.iter_mut().enumerate() {
        if Some(i) != mine {
            e.fields.remove(&taken);
        }
    }

    match mine {
        Some(i) => {
            let e = &mut list[i];
            e.fields = applied.clone();
            e.time.clone_from(&writer.time);
            e.api_version.clone_from(&writer.api_version);
        }
        None => list.push(new_apply_entry(writer, applied.clone())),
    }
    let before = managed::entries(live);
    let same_entries = before.len() == list.iter().filter(|e| !e.fields.is_empty()).count()
        && before.iter().zip(list.iter().filter(|e| !e.fields.is_empty())).all(|(a, b)| {
            (&a.manager, &a.operation, &a.subresource, &a.fields)
                == (&b.manager, &b.operation, &b.subresource, &b.fields)
        });
    set_entries(&mut next, &list);
    let without_entries = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        v
    };
    if same_entries && without_entries(&stored) == without_entries(live) {
        return Ok(None);
    }
    Ok(Some(next))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::clock::ManualClock;

    use super::*;
    use crate::cluster::SimCluster;
    use crate::kinds;

    fn rest() -> Rest {
        let c = Arc::new(SimCluster::new(ManualClock::new(), 1));
        c.enable_serving(1000);
        Rest::new(c)
    }

    fn deployment(replicas: i64, containers: Value, labels: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}}})
    }

    fn managers(obj: &Value) -> Vec<(String, String)> {
        entries(obj).into_iter().map(|e| (e.manager, e.operation)).collect()
    }

    #[test]
    fn conflicts_are_worded_as_the_api_server_words_them() {
        let c = |field: &str, manager: &str| Conflict { field: field.to_string(), manager: manager.to_string() };
        let one = [c(".spec.replicas", "\"ci\"")];
        assert_eq!(conflict_message(&one), "Apply failed with 1 conflict: conflict with \"ci\": .spec.replicas");
        let three = [c(".a", "\"x\" using v1"), c(".b", "\"y\""), c(".c", "\"x\" using v1")];
        assert_eq!(
            conflict_message(&three),
            "Apply failed with 3 conflicts: conflicts with \"x\" using v1:\n- .a\n- .c\nconflicts with \"y\":\n- .b"
        );
    }

    #[test]
    fn an_apply_creates_then_a_reapply_changes_nothing() {
        let r = rest();
        let kind = kinds::by_kind("Deployment").unwrap();
        let cfg = deployment(2, json!([{"name": "web", "image": "nginx"}]), json!({"team": "a"}));
        let (created, is_new) = r.apply(kind, Some("default"), "web", cfg.clone(), "ci", false).unwrap();
        assert!(is_new);
        assert_eq!(managers(&created), [("ci".to_string(), "Apply".to_string())]);
        let fields = &created["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(fields["f:spec"]["f:replicas"], json!({}));
        assert_eq!(fields["f:spec"]["f:selector"], json!({}), "a label selector is atomic");
        let item = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
        assert_eq!(item, &json!({".": {}, "f:image": {}, "f:name": {}}));
        let (again, is_new) = r.apply(kind, Some("default"), "web", cfg, "ci", false).unwrap();
        assert!(!is_new);
        assert_eq!(again["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);
        let err = r.apply(kind, Some("default"), "web", json!({"metadata": {}}), "", false).unwrap_err();
        assert_eq!(err.status().0, 400);
    }

    #[test]
    fn a_second_manager_changing_an_owned_field_conflicts_unless_forced() {
        let r = rest();
        let kind = kinds::by_kind("Deployment").unwrap();
        let containers = json!([{"name": "web", "image": "nginx"}]);
        r.apply(kind, Some("default"), "web", deployment(2, containers.clone(), json!({})), "ci", false).unwrap();
        // The same values: shared, no conflict.
        r.apply(kind, Some("default"), "web", deployment(2, containers.clone(), json!({})), "ops", false).unwrap();
        let other = deployment(3, json!([{"name": "web", "image": "nginx:2"}]), json!({}));
        let err = r.apply(kind, Some("default"), "web", other.clone(), "ops", false).unwrap_err();
        let (code, status) = err.status();
        assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")));
        let fields: Vec<&str> =
            status["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
        assert_eq!(fields, [".spec.replicas", ".spec.template.spec.containers[name=\"web\"].image"]);
        assert_eq!(status["details"]["causes"][0]["message"], "conflict with \"ci\"");
        assert!(
            status["message"].as_str().unwrap().starts_with("Apply failed with 2 conflicts: conflicts with \"ci\":"),
            "{status}"
        );
        let (forced, _) = r.apply(kind, Some("default"), "web", other, "ops", true).unwrap();
        assert_eq!(forced["spec"]["replicas"], 3);
        let ci = entries(&forced).into_iter().find(|e| e.manager == "ci").unwrap();
        assert!(!ci.fields.contains(&["f:spec".to_string(), "f:replicas".to_string()]), "ownership moved");
        assert!(ci.fields.contains(&["f:spec".to_string(), "f:selector".to_string()]), "shared fields stay");
    }

    #[test]
    fn a_field_dropped_from_the_applied_config_goes_unless_another_manager_owns_it() {
        let r = rest();
        let kind = kinds::by_kind("Deployment").unwrap();
        let c = json!([{"name": "web", "image": "nginx"}]);
        r.apply(
            kind,
            Some("default"),
            "web",
            deployment(1, c.clone(), json!({"a": "1", "b": "2", "s": "x"})),
            "ci",
            false,
        )
        .unwrap();
        // Another applier co-owns `s`; an update sets `e`.
        r.apply(
            kind,
            Some("default"),
            "web",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"s": "x"}}}),
            "ops",
            false,
        )
        .unwrap();
        let label = json!({"metadata": {"labels": {"e": "y"}}});
        let patched =
            r.patch_by(kind, Some("default"), "web", PatchType::Merge, &label, Part::Main, "kubectl-label").unwrap();
        assert!(managers(&patched).contains(&("kubectl-label".to_string(), "Update".to_string())));
        let (after, _) =
            r.apply(kind, Some("default"), "web", deployment(1, c, json!({"a": "1"})), "ci", false).unwrap();
        assert_eq!(after["metadata"]["labels"], json!({"a": "1", "s": "x", "e": "y"}));
        // A sidecar applied by another manager merges into the list by name.
        let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "log", "image": "busybox"}]}}}});
        let (both, _) = r.apply(kind, Some("default"), "web", sidecar, "mesh", false).unwrap();
        let names: Vec<&str> = both["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["web", "log"]);
    }

    #[test]
    fn an_apply_changing_a_field_an_update_set_names_the_updater() {
        let r = rest();
        let kind = kinds::by_kind("NodePool").unwrap();
        let pool = |weight: i64| {
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                "spec": {"weight": weight, "template": {"spec": {"requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}})
        };
        r.create_by(kind, None, pool(10), "kubectl-create").unwrap();
        let err = r.apply(kind, None, "default", pool(20), "kubectl", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-create\" using karpenter.sh/v1: .spec.weight"
        );
        let (applied, _) = r.apply(kind, None, "default", pool(20), "kubectl", true).unwrap();
        assert_eq!(applied["spec"]["weight"], 20);
        // The scale subresource's writer owns spec.replicas (of a static pool).
        let mut fixed = pool(20);
        fixed["metadata"]["name"] = json!("fixed");
        fixed["spec"]["replicas"] = json!(1);
        fixed["spec"].as_object_mut().unwrap().remove("weight");
        r.apply(kind, None, "fixed", fixed.clone(), "kubectl", false).unwrap();
        let scale = json!({"spec": {"replicas": 3}});
        r.update_scale_as(kind, None, "fixed", &scale, Some(PatchType::Merge), "kubectl-scale").unwrap();
        let err = r.apply(kind, None, "fixed", fixed, "kubectl", false).unwrap_err();
        assert!(
            err.to_string().contains("conflict with \"kubectl-scale\" using karpenter.sh/v1: .spec.replicas"),
            "{err}"
        );
        // A write the CRD rules refuse is refused through apply too.
        let err = r.apply(kind, None, "default", pool(1000), "kubectl", true).unwrap_err();
        assert_eq!(err.status().0, 422);
    }
}
