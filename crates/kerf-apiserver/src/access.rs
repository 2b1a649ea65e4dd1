//! Who the client is and what it may do, as `kubectl auth can-i` and `kubectl auth whoami` ask
//! it: `kerf serve` has no authentication or authorization (plain HTTP on loopback), so every
//! client is the cluster admin and every request is allowed, and the reviews say so.

use serde_json::{Value, json};

/// The user every client is.
pub const USER: &str = "kerf-admin";

/// The answer to a create of the review `kind` (`SelfSubjectAccessReview`,
/// `SelfSubjectRulesReview`, `SelfSubjectReview`), echoing the request's spec when it is JSON.
pub fn review(kind: &str, api_version: &str, body: &[u8]) -> Value {
    let spec = serde_json::from_slice::<Value>(body).ok().and_then(|b| b.get("spec").cloned()).unwrap_or(json!({}));
    let status = match kind {
        "SelfSubjectAccessReview" => json!({"allowed": true, "reason": "kerf serve allows every request"}),
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        _ => json!({"userInfo": {"username": USER, "groups": ["system:masters", "system:authenticated"]}}),
    };
    let mut out = json!({"kind": kind, "apiVersion": api_version, "metadata": {}, "status": status});
    if kind != "SelfSubjectReview" {
        out["spec"] = spec;
    }
    out
}
