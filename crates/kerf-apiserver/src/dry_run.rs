//! `dryRun=All` on a write, as the API server takes it: the request is checked and its result
//! worked out exactly as for a real write (admission, validation, server-side apply's merge and
//! conflicts, preconditions, PodDisruptionBudgets for an eviction) and answered, and nothing is
//! stored. `kubectl diff` and `--dry-run=server` send it: in the query of a create, update or
//! patch, in the query or the `DeleteOptions` body of a delete, in the `Eviction`'s
//! `deleteOptions`.

use kerf_api::FieldError;
use serde_json::Value;

use crate::rest::{Rest, RestError};
use crate::writes::Commit;

/// The only dry-run value the API server knows.
const ALL: &str = "All";

impl Rest {
    /// The same API over the same store, working writes out without keeping them.
    pub fn dry_run(&self) -> Rest {
        Rest { cluster: self.cluster.clone(), commit: Commit::DryRun }
    }

    /// This API, or its dry run when `commit` asks for one.
    pub fn with(&self, commit: Commit) -> Rest {
        match commit {
            Commit::Store => self.clone(),
            Commit::DryRun => self.dry_run(),
        }
    }
}

/// The commit a write's `dryRun` values ask for: none, a dry run for `All`; any other value is
/// refused as the API server refuses it, naming the options kind (`CreateOptions`, ...).
pub fn commit_of<'a>(values: impl IntoIterator<Item = &'a str>, options: &'static str) -> Result<Commit, RestError> {
    let values: Vec<&str> = values.into_iter().filter(|v| !v.is_empty()).collect();
    if values.is_empty() {
        return Ok(Commit::Store);
    }
    if let Some(bad) = values.iter().find(|v| **v != ALL) {
        return Err(RestError::Invalid {
            kind: options,
            qualified: format!("{options}.meta.k8s.io"),
            name: String::new(),
            causes: vec![FieldError::new("dryRun", format!("Unsupported value: {bad:?}: supported values: \"All\""))],
        });
    }
    Ok(Commit::DryRun)
}

/// The `dryRun` values of an options body (`DeleteOptions`, an `Eviction`'s `deleteOptions`):
/// a list of strings, as the API defines it.
pub fn body_values(options: &Value) -> Result<Vec<&str>, RestError> {
    match options.get("dryRun") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| RestError::BadRequest(format!("dryRun must be a list of strings, got {v}")))
            })
            .collect(),
        Some(other) => Err(RestError::BadRequest(format!("dryRun must be a list of strings, got {other}"))),
    }
}

/// The options kind a request of `method` carries, for naming it in an error.
pub fn options_kind(method: &axum::http::Method) -> &'static str {
    match *method {
        axum::http::Method::POST => "CreateOptions",
        axum::http::Method::PUT => "UpdateOptions",
        axum::http::Method::PATCH => "PatchOptions",
        _ => "DeleteOptions",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::clock::ManualClock;
    use serde_json::json;

    use super::*;
    use crate::cluster::SimCluster;
    use crate::kinds;
    use crate::rest::PatchType;
    use crate::writes::{Part, Preconditions};

    fn rest() -> Rest {
        let c = Arc::new(SimCluster::new(ManualClock::new(), 1));
        c.enable_serving(1000);
        Rest::new(c)
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}}}})
    }

    #[test]
    fn only_all_is_a_dry_run_and_another_value_is_refused_naming_the_options() {
        assert_eq!(commit_of([], "CreateOptions").unwrap(), Commit::Store);
        assert_eq!(commit_of([""], "CreateOptions").unwrap(), Commit::Store);
        assert_eq!(commit_of(["All"], "PatchOptions").unwrap(), Commit::DryRun);
        let (code, status) = commit_of(["Some"], "PatchOptions").unwrap_err().status();
        assert_eq!(code, 422);
        assert!(
            status["message"].as_str().unwrap().starts_with("PatchOptions.meta.k8s.io \"\" is invalid: dryRun"),
            "{status}"
        );
        assert_eq!(body_values(&json!({"dryRun": ["All"]})).unwrap(), ["All"]);
        assert!(body_values(&json!({"dryRun": "All"})).is_err());
    }

    #[test]
    fn a_dry_run_answers_what_each_write_would_store_and_changes_nothing() {
        let r = rest();
        let dry = r.dry_run();
        let kind = kinds::by_kind("Deployment").unwrap();
        let rv = || r.cluster.resource_version();

        let would = dry.create_by(kind, Some("default"), deployment(2, "nginx"), "kubectl-create").unwrap();
        assert_eq!(would["metadata"]["name"], "web");
        assert!(would["metadata"]["uid"].is_string() && would["metadata"].get("resourceVersion").is_none());
        assert_eq!(would["metadata"]["managedFields"][0]["manager"], "kubectl-create");
        assert_eq!((rv(), r.get(kind, Some("default"), "web").unwrap_err().status().0), (0, 404));

        let created = r.create_by(kind, Some("default"), deployment(2, "nginx"), "kubectl-create").unwrap();
        let before = rv();
        // A dry-run create of what exists is the conflict the real one would be.
        assert_eq!(dry.create(kind, Some("default"), deployment(2, "nginx")).unwrap_err().status().0, 409);

        let patch = json!({"spec": {"replicas": 5}});
        let patched = dry.patch_by(kind, Some("default"), "web", PatchType::Merge, &patch, Part::Main, "m").unwrap();
        assert_eq!(patched["spec"]["replicas"], 5);
        assert_eq!(patched["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);
        assert_eq!(patched["metadata"]["generation"], 2, "the spec changed");

        // Server-side apply: merged, and a conflict with another manager reported, unless forced.
        let err = dry.apply(kind, Some("default"), "web", deployment(3, "nginx:2"), "ci", false).unwrap_err();
        assert_eq!(err.status().0, 409);
        let (applied, _) = dry.apply(kind, Some("default"), "web", deployment(3, "nginx:2"), "ci", true).unwrap();
        assert_eq!(applied["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:2");

        let scale = json!({"spec": {"replicas": 9}});
        let scaled = dry.update_scale_as(kind, Some("default"), "web", &scale, Some(PatchType::Merge), "s").unwrap();
        assert_eq!(scaled["spec"]["replicas"], 9);

        let gone = dry.delete(kind, Some("default"), "web", &Preconditions::default()).unwrap();
        assert!(gone["metadata"]["deletionTimestamp"].is_string());
        let wrong = Preconditions { uid: Some("other".to_string()), resource_version: None };
        assert_eq!(dry.delete(kind, Some("default"), "web", &wrong).unwrap_err().status().0, 409);

        assert_eq!(rv(), before, "nothing was written");
        let live = r.get(kind, Some("default"), "web").unwrap();
        assert_eq!(live, created);
        let (changes, _) = r.changes(kind, &crate::rest::Filter::default(), 0).unwrap();
        assert_eq!(changes.len(), 1, "one watch event: the real create");
    }

    #[test]
    fn a_dry_run_eviction_is_refused_by_a_budget_as_the_real_one_and_evicts_nothing() {
        let r = rest();
        let pod = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
        };
        for name in ["a", "b"] {
            let obj = r.decode(kinds::by_kind("Pod").unwrap(), Some("default"), pod(name)).unwrap();
            r.cluster.create_stored("Pod", obj).unwrap();
        }
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
        r.create(kinds::by_kind("PodDisruptionBudget").unwrap(), Some("default"), pdb).unwrap();
        let dry = r.dry_run();
        // Either pod may go, alone; the dry runs leave both.
        dry.evict("default", "a", &json!({})).unwrap();
        dry.evict("default", "b", &json!({})).unwrap();
        r.evict("default", "a", &json!({})).unwrap();
        assert_eq!(dry.evict("default", "b", &json!({})).unwrap_err().status().0, 429);
        assert!(r.get(kinds::by_kind("Pod").unwrap(), Some("default"), "b").is_ok());
    }
}
