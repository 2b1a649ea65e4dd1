//! Provisioner (`karpenter.sh/v1alpha5`), NodePool and NodeClaim (`karpenter.sh/v1beta1`) to
//! `karpenter.sh/v1` NodePool and NodeClaim.

use serde_yaml_ng::{Mapping, Value};

use super::{ConvertOptions, Cx, KubeletMove, go_duration, join, map, metadata, s};
use crate::labels;

const PROVISIONER_FIELDS: &[&str] = &[
    "annotations",
    "labels",
    "taints",
    "startupTaints",
    "requirements",
    "kubeletConfiguration",
    "provider",
    "providerRef",
    "ttlSecondsAfterEmpty",
    "ttlSecondsUntilExpired",
    "limits",
    "weight",
    "consolidation",
];

/// Kubelet settings v1 keeps (on the EC2NodeClass).
pub(crate) const KUBELET_FIELDS: &[&str] = &[
    "clusterDNS",
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
];

fn node_class_ref(name: &str) -> Value {
    map(vec![("group", s(crate::ec2nodeclass::GROUP)), ("kind", s(crate::ec2nodeclass::KIND)), ("name", s(name))])
}

fn api_header(kind: &str) -> Vec<(&'static str, Value)> {
    let api =
        if kind == crate::ec2nodeclass::KIND { crate::ec2nodeclass::API_VERSION } else { crate::nodepool::API_VERSION };
    vec![("apiVersion", s(api)), ("kind", s(kind))]
}

/// Requirements with v1's label keys: `karpenter.sh/provisioner-name` is `karpenter.sh/nodepool`
/// in v1, which a NodePool may not constrain (it is the pool itself).
fn requirements(cx: &mut Cx, v: Option<&Value>, path: &str, in_pool: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, r) in cx.list(v, path).iter().enumerate() {
        let p = format!("{path}[{i}]");
        const FIELDS: &[&str] = &["key", "operator", "values", "minValues"];
        let Some(m) = cx.mapping(Some(r), &p, FIELDS) else {
            continue;
        };
        let mut m = super::only_allowed(m, FIELDS);
        let key = m.get("key").and_then(Value::as_str).unwrap_or("").to_string();
        if in_pool && (key == "karpenter.sh/provisioner-name" || key == labels::NODE_POOL) {
            cx.note(
                &format!("{p}.key"),
                format!("{key} left out: v1 NodePools constrain karpenter.sh/nodepool to themselves"),
            );
            continue;
        }
        if key == "karpenter.sh/provisioner-name" {
            m.insert(s("key"), s(labels::NODE_POOL));
        }
        out.push(Value::Mapping(m));
    }
    out
}

fn has_requirement(reqs: &[Value], key: &str) -> bool {
    reqs.iter().any(|r| r.get("key").and_then(Value::as_str) == Some(key))
}

/// The kubelet block of a pool, without the settings v1 dropped.
fn kubelet(cx: &mut Cx, v: Option<&Value>, path: &str) -> Option<Value> {
    let mut allowed = KUBELET_FIELDS.to_vec();
    allowed.push("containerRuntime");
    let m = cx.mapping(v, path, &allowed)?;
    let mut kept = Mapping::new();
    for (k, val) in m {
        if k.as_str() == Some("containerRuntime") {
            cx.note(
                &join(path, "containerRuntime"),
                "left out: no v1 equivalent (containerd is the only runtime of current EKS AMIs)",
            );
            continue;
        }
        if k.as_str().is_some_and(|k| KUBELET_FIELDS.contains(&k)) {
            kept.insert(k.clone(), val.clone());
        }
    }
    (!kept.is_empty()).then_some(Value::Mapping(kept))
}

/// `karpenter.sh/v1alpha5` Provisioner → NodePool (and an EC2NodeClass for an inline `provider`).
pub(super) fn provisioner(doc: &Value, cx: &mut Cx, opts: &ConvertOptions, moves: &mut Vec<KubeletMove>) -> Vec<Value> {
    let mut out = Vec::new();
    let Some(spec) = cx.mapping(doc.get("spec"), "spec", PROVISIONER_FIELDS) else {
        cx.problem("spec", "required");
        return out;
    };
    let get = |k: &str| spec.get(k);
    let name = cx.name.clone();

    // The node class: a reference, or inline provider settings that become an EC2NodeClass.
    let class_name = match (get("providerRef"), get("provider")) {
        (Some(_), Some(_)) => {
            cx.problem("spec.provider", "provider and providerRef are mutually exclusive");
            None
        }
        (Some(r), None) => {
            let m = cx.mapping(Some(r), "spec.providerRef", &["apiVersion", "kind", "name"]);
            if let Some(kind) = m.and_then(|m| m.get("kind")).and_then(Value::as_str)
                && kind != "AWSNodeTemplate"
            {
                cx.problem("spec.providerRef.kind", format!("{kind:?}: only AWSNodeTemplate references convert"));
            }
            let n = cx.string(m.and_then(|m| m.get("name")), "spec.providerRef.name");
            if n.is_none() {
                cx.problem("spec.providerRef.name", "required");
            }
            n
        }
        (None, Some(p)) => {
            let class = super::class::provider_spec(p, "spec.provider", cx, opts);
            cx.note(
                "spec.provider",
                format!(
                    "inline provider settings are an EC2NodeClass named {name:?} in v1 (written out after the NodePool)"
                ),
            );
            out.push(map([
                api_header(crate::ec2nodeclass::KIND),
                vec![("metadata", map(vec![("name", s(&name))])), ("spec", class)],
            ]
            .concat()));
            Some(name.clone())
        }
        (None, None) => {
            cx.problem("spec.providerRef", "required: a v1 NodePool needs a node class (an AWSNodeTemplate reference)");
            None
        }
    };

    let mut reqs = requirements(cx, get("requirements"), "spec.requirements", true);
    // The AWS provider's defaulting webhook: on-demand, amd64 unless the Provisioner said otherwise.
    for (key, value) in [(labels::CAPACITY_TYPE, labels::CAPACITY_TYPE_ON_DEMAND), (labels::ARCH, "amd64")] {
        let beta = if key == labels::ARCH { labels::BETA_ARCH } else { key };
        if !has_requirement(&reqs, key) && !has_requirement(&reqs, beta) {
            reqs.push(map(vec![("key", s(key)), ("operator", s("In")), ("values", Value::Sequence(vec![s(value)]))]));
            cx.note("spec.requirements", format!("{key} In [{value}] written out: v1alpha5 defaulted it, v1 does not"));
        }
    }

    if let Some(k) = kubelet(cx, get("kubeletConfiguration"), "spec.kubeletConfiguration")
        && let Some(class) = &class_name
    {
        moves.push(KubeletMove {
            doc: cx.doc,
            pool_kind: cx.kind.clone(),
            pool_name: name.clone(),
            path: "spec.kubeletConfiguration".to_string(),
            class_name: class.clone(),
            kubelet: k,
        });
    }

    let expire = match cx.seconds(get("ttlSecondsUntilExpired"), "spec.ttlSecondsUntilExpired") {
        Some(secs) => go_duration(secs),
        None => "Never".to_string(),
    };

    let consolidation = cx.mapping(get("consolidation"), "spec.consolidation", &["enabled"]);
    let enabled = match consolidation.and_then(|c| c.get("enabled")) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            cx.problem(
                "spec.consolidation.enabled",
                format!("must be a boolean, got {}", crate::manifest::value_kind(other)),
            );
            false
        }
    };
    let empty_ttl = cx.seconds(get("ttlSecondsAfterEmpty"), "spec.ttlSecondsAfterEmpty");
    let (policy, after) = match (enabled, empty_ttl) {
        (true, Some(_)) => {
            cx.problem(
                "spec.ttlSecondsAfterEmpty",
                "consolidation.enabled and ttlSecondsAfterEmpty are mutually exclusive",
            );
            ("WhenEmptyOrUnderutilized", "0s".to_string())
        }
        (true, None) => ("WhenEmptyOrUnderutilized", "0s".to_string()),
        (false, Some(secs)) => ("WhenEmpty", format!("{secs}s")),
        (false, None) => {
            cx.note(
                "spec.disruption",
                "consolidateAfter: Never: without ttlSecondsAfterEmpty or consolidation the Provisioner never removed empty or underutilized nodes",
            );
            ("WhenEmpty", "Never".to_string())
        }
    };

    let limits = cx.mapping(get("limits"), "spec.limits", &["resources"]).and_then(|l| l.get("resources")).cloned();

    let template_meta = map(vec![
        ("labels", get("labels").cloned().unwrap_or(Value::Null)),
        ("annotations", get("annotations").cloned().unwrap_or(Value::Null)),
    ]);
    let template_spec = map(vec![
        ("taints", get("taints").cloned().unwrap_or(Value::Null)),
        ("startupTaints", get("startupTaints").cloned().unwrap_or(Value::Null)),
        ("requirements", Value::Sequence(reqs.clone())),
        ("nodeClassRef", class_name.as_deref().map(node_class_ref).unwrap_or(Value::Null)),
        ("expireAfter", s(&expire)),
    ]);
    let mut template_spec = template_spec;
    if reqs.is_empty()
        && let Value::Mapping(m) = &mut template_spec
    {
        m.insert(s("requirements"), Value::Sequence(Vec::new()));
    }
    let pool = map([
        api_header(crate::nodepool::KIND),
        vec![
            ("metadata", metadata(doc)),
            (
                "spec",
                map(vec![
                    ("template", map(vec![("metadata", template_meta), ("spec", template_spec)])),
                    ("disruption", map(vec![("consolidationPolicy", s(policy)), ("consolidateAfter", s(&after))])),
                    ("limits", limits.unwrap_or(Value::Null)),
                    ("weight", get("weight").cloned().unwrap_or(Value::Null)),
                ]),
            ),
        ],
    ]
    .concat());
    out.insert(0, pool);
    out
}

/// `nodeClassRef` of v1beta1 (`apiVersion`, `kind`, `name`) in v1 form (`group`, `kind`, `name`).
fn v1beta1_class_ref(cx: &mut Cx, v: Option<&Value>, path: &str) -> (Value, Option<String>) {
    let Some(m) = cx.mapping(v, path, &["apiVersion", "kind", "name"]) else {
        cx.problem(path, "required");
        return (Value::Null, None);
    };
    let group = match m.get("apiVersion").and_then(Value::as_str) {
        Some(api) => api.split_once('/').map_or(api, |(g, _)| g).to_string(),
        None => crate::ec2nodeclass::GROUP.to_string(),
    };
    let kind = cx.string(m.get("kind"), &join(path, "kind")).unwrap_or_else(|| crate::ec2nodeclass::KIND.to_string());
    let name = cx.string(m.get("name"), &join(path, "name"));
    if name.is_none() {
        cx.problem(&join(path, "name"), "required");
    }
    let value =
        map(vec![("group", s(&group)), ("kind", s(&kind)), ("name", name.as_deref().map(s).unwrap_or(Value::Null))]);
    let class = (group == crate::ec2nodeclass::GROUP && kind == crate::ec2nodeclass::KIND).then_some(name).flatten();
    (value, class)
}

const V1BETA1_TEMPLATE_SPEC_FIELDS: &[&str] =
    &["taints", "startupTaints", "requirements", "kubelet", "nodeClassRef", "resources"];

/// `karpenter.sh/v1beta1` NodePool → v1.
pub(super) fn node_pool_v1beta1(doc: &Value, cx: &mut Cx, moves: &mut Vec<KubeletMove>) -> Vec<Value> {
    let Some(spec) = cx.mapping(doc.get("spec"), "spec", &["template", "disruption", "limits", "weight"]) else {
        cx.problem("spec", "required");
        return Vec::new();
    };
    let template = cx.mapping(spec.get("template"), "spec.template", &["metadata", "spec"]);
    let tmeta =
        cx.mapping(template.and_then(|t| t.get("metadata")), "spec.template.metadata", &["labels", "annotations"]);
    let tspec = cx.mapping(template.and_then(|t| t.get("spec")), "spec.template.spec", V1BETA1_TEMPLATE_SPEC_FIELDS);
    let tget = |k: &str| tspec.and_then(|t| t.get(k));
    let (class_ref, class_name) = v1beta1_class_ref(cx, tget("nodeClassRef"), "spec.template.spec.nodeClassRef");
    if let Some(k) = kubelet(cx, tget("kubelet"), "spec.template.spec.kubelet") {
        match class_name {
            Some(class) => moves.push(KubeletMove {
                doc: cx.doc,
                pool_kind: cx.kind.clone(),
                pool_name: cx.name.clone(),
                path: "spec.template.spec.kubelet".to_string(),
                class_name: class,
                kubelet: k,
            }),
            None => cx.note("spec.template.spec.kubelet", "left out: v1 keeps kubelet settings on the EC2NodeClass"),
        }
    }
    if tget("resources").is_some() {
        cx.note(
            "spec.template.spec.resources",
            "left out: v1 NodePools have no resources (NodeClaims get them from their pods)",
        );
    }
    let disruption = cx.mapping(
        spec.get("disruption"),
        "spec.disruption",
        &["consolidationPolicy", "consolidateAfter", "expireAfter", "budgets"],
    );
    let dget = |k: &str| disruption.and_then(|d| d.get(k));
    let policy = match cx.string(dget("consolidationPolicy"), "spec.disruption.consolidationPolicy").as_deref() {
        None | Some("WhenUnderutilized") => "WhenEmptyOrUnderutilized".to_string(),
        Some(other) => other.to_string(),
    };
    let after = dget("consolidateAfter").cloned().unwrap_or_else(|| s("0s"));
    let reqs = requirements(cx, tget("requirements"), "spec.template.spec.requirements", true);
    let mut template_spec = map(vec![
        ("taints", tget("taints").cloned().unwrap_or(Value::Null)),
        ("startupTaints", tget("startupTaints").cloned().unwrap_or(Value::Null)),
        ("requirements", Value::Sequence(reqs)),
        ("nodeClassRef", class_ref),
        ("expireAfter", dget("expireAfter").cloned().unwrap_or(Value::Null)),
    ]);
    if let Value::Mapping(m) = &mut template_spec
        && !m.contains_key("requirements")
    {
        m.insert(s("requirements"), Value::Sequence(Vec::new()));
    }
    let template_meta = map(vec![
        ("labels", tmeta.and_then(|m| m.get("labels")).cloned().unwrap_or(Value::Null)),
        ("annotations", tmeta.and_then(|m| m.get("annotations")).cloned().unwrap_or(Value::Null)),
    ]);
    vec![map([
        api_header(crate::nodepool::KIND),
        vec![
            ("metadata", metadata(doc)),
            (
                "spec",
                map(vec![
                    ("template", map(vec![("metadata", template_meta), ("spec", template_spec)])),
                    (
                        "disruption",
                        map(vec![
                            ("consolidationPolicy", s(&policy)),
                            ("consolidateAfter", after),
                            ("budgets", dget("budgets").cloned().unwrap_or(Value::Null)),
                        ]),
                    ),
                    ("limits", spec.get("limits").cloned().unwrap_or(Value::Null)),
                    ("weight", spec.get("weight").cloned().unwrap_or(Value::Null)),
                ]),
            ),
        ],
    ]
    .concat())]
}

/// `karpenter.sh/v1beta1` NodeClaim → v1.
pub(super) fn node_claim_v1beta1(doc: &Value, cx: &mut Cx) -> Vec<Value> {
    let Some(spec) = cx.mapping(doc.get("spec"), "spec", V1BETA1_TEMPLATE_SPEC_FIELDS) else {
        cx.problem("spec", "required");
        return Vec::new();
    };
    let (class_ref, _) = v1beta1_class_ref(cx, spec.get("nodeClassRef"), "spec.nodeClassRef");
    if spec.get("kubelet").is_some() {
        cx.note("spec.kubelet", "left out: v1 keeps kubelet settings on the EC2NodeClass");
    }
    let reqs = requirements(cx, spec.get("requirements"), "spec.requirements", false);
    let mut out = map(vec![
        ("taints", spec.get("taints").cloned().unwrap_or(Value::Null)),
        ("startupTaints", spec.get("startupTaints").cloned().unwrap_or(Value::Null)),
        ("requirements", Value::Sequence(reqs)),
        ("resources", spec.get("resources").cloned().unwrap_or(Value::Null)),
        ("nodeClassRef", class_ref),
    ]);
    if let Value::Mapping(m) = &mut out
        && !m.contains_key("requirements")
    {
        m.insert(s("requirements"), Value::Sequence(Vec::new()));
    }
    vec![map([api_header(crate::nodeclaim::KIND), vec![("metadata", metadata(doc)), ("spec", out)]].concat())]
}
