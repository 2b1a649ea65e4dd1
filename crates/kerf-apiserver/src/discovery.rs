//! Discovery documents: `/api`, `/apis`, the resource list of each group version and `/version`,
//! as kubectl and kube-rs read them to map kinds and short names to REST paths: the built-in
//! kinds, those the CRDs clients created serve, and the resources answered without a store
//! (the metrics API, the access reviews).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::kinds::ResourceKind;

/// The Kubernetes version the server reports (the API surface it imitates).
pub const MAJOR: &str = "1";
pub const MINOR: &str = "32";

pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0-kerf"),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "kerf",
        "platform": "linux/amd64",
    })
}

pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
}

/// A resource the server answers without storing it: the metrics API and the access reviews.
pub struct Virtual {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
}

/// The resources answered without a store, in discovery order.
pub static VIRTUAL: &[Virtual] = &[
    Virtual {
        group: "metrics.k8s.io",
        version: "v1beta1",
        plural: "nodes",
        kind: "NodeMetrics",
        namespaced: false,
        verbs: &["get", "list"],
    },
    Virtual {
        group: "metrics.k8s.io",
        version: "v1beta1",
        plural: "pods",
        kind: "PodMetrics",
        namespaced: true,
        verbs: &["get", "list"],
    },
    Virtual {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectaccessreviews",
        kind: "SelfSubjectAccessReview",
        namespaced: false,
        verbs: &["create"],
    },
    Virtual {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectrulesreviews",
        kind: "SelfSubjectRulesReview",
        namespaced: false,
        verbs: &["create"],
    },
    Virtual {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "selfsubjectreviews",
        kind: "SelfSubjectReview",
        namespaced: false,
        verbs: &["create"],
    },
];

/// Every named group with its versions, the first preferred (a CRD's storage version).
pub fn groups(kinds: &[&'static ResourceKind]) -> Value {
    let mut order: Vec<&str> = Vec::new();
    let mut versions: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let pairs = kinds.iter().map(|k| (k.group, k.version)).chain(VIRTUAL.iter().map(|v| (v.group, v.version)));
    for (group, version) in pairs.filter(|(g, _)| !g.is_empty()) {
        let vs = versions.entry(group).or_default();
        if vs.is_empty() {
            order.push(group);
        }
        if !vs.contains(&version) {
            vs.push(version);
        }
    }
    let groups: Vec<Value> = order
        .iter()
        .map(|g| {
            let vs: Vec<Value> =
                versions[g].iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
            json!({"name": g, "versions": vs, "preferredVersion": vs.first()})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

const VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const SUB_VERBS: &[&str] = &["get", "patch", "update"];

fn resource(k: &ResourceKind) -> Value {
    json!({
        "name": k.plural,
        "singularName": k.singular,
        "namespaced": k.namespaced,
        "kind": k.kind,
        "verbs": VERBS,
        "shortNames": k.short_names,
        "categories": k.categories,
    })
}

/// The resource list of `group`/`version`, or `None` when nothing is served there.
pub fn resources(kinds: &[&'static ResourceKind], group: &str, version: &str) -> Option<Value> {
    let kinds: Vec<&ResourceKind> =
        kinds.iter().copied().filter(|k| k.group == group && k.version == version).collect();
    let virtual_: Vec<&Virtual> = VIRTUAL.iter().filter(|v| v.group == group && v.version == version).collect();
    if kinds.is_empty() && virtual_.is_empty() {
        return None;
    }
    let mut list = Vec::new();
    for k in kinds {
        list.push(resource(k));
        if k.status {
            list.push(json!({"name": format!("{}/status", k.plural), "singularName": "", "namespaced": k.namespaced, "kind": k.kind, "verbs": SUB_VERBS}));
        }
        if k.scale {
            list.push(json!({"name": format!("{}/scale", k.plural), "singularName": "", "namespaced": k.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": SUB_VERBS}));
        }
        if k.kind == "Pod" {
            list.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
        }
    }
    for v in virtual_ {
        list.push(
            json!({"name": v.plural, "singularName": "", "namespaced": v.namespaced, "kind": v.kind, "verbs": v.verbs}),
        );
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}))
}
