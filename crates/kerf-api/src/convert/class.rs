//! AWSNodeTemplate (`karpenter.k8s.aws/v1alpha1`, and a Provisioner's inline `provider`) and
//! EC2NodeClass (`karpenter.k8s.aws/v1beta1`) to `karpenter.k8s.aws/v1` EC2NodeClass.

use serde_yaml_ng::{Mapping, Value};

use super::{ConvertOptions, Cx, join, map, metadata, s};

const AWS_NODE_TEMPLATE_FIELDS: &[&str] = &[
    "subnetSelector",
    "securityGroupSelector",
    "amiSelector",
    "amiFamily",
    "instanceProfile",
    "userData",
    "tags",
    "blockDeviceMappings",
    "metadataOptions",
    "detailedMonitoring",
    "context",
    "launchTemplate",
];

const EC2_NODE_CLASS_V1BETA1_FIELDS: &[&str] = &[
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "amiSelectorTerms",
    "amiFamily",
    "userData",
    "role",
    "instanceProfile",
    "tags",
    "blockDeviceMappings",
    "instanceStorePolicy",
    "detailedMonitoring",
    "metadataOptions",
    "associatePublicIPAddress",
    "context",
];

/// The AMI families before v1 and their v1 alias family.
fn alias_family(family: &str) -> Option<&'static str> {
    Some(match family {
        "AL2" => "al2",
        "AL2023" => "al2023",
        "Bottlerocket" => "bottlerocket",
        "Windows2019" => "windows2019",
        "Windows2022" => "windows2022",
        "Windows2025" => "windows2025",
        _ => return None,
    })
}

/// The keys of the older tag selectors that select by id rather than by tag.
const ID_KEYS: &[&str] = &["aws-ids", "aws::ids"];

fn split_list(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|x| !x.is_empty()).map(str::to_string).collect()
}

fn tags_value(tags: &[(String, String)]) -> Value {
    let mut m = Mapping::new();
    for (k, v) in tags {
        m.insert(s(k), s(v));
    }
    Value::Mapping(m)
}

/// A v1alpha1 subnet / security group selector (a tag map, or `aws::ids`) as selector terms.
fn selector_terms(cx: &mut Cx, v: Option<&Value>, path: &str, required: bool) -> Vec<Value> {
    let entries = cx.string_map(v, path);
    if entries.is_empty() {
        if required {
            cx.problem(path, "required (subnets and security groups are selected by tags or aws::ids)");
        }
        return Vec::new();
    }
    let (ids, tags): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(k, _)| ID_KEYS.contains(&k.as_str()));
    if !ids.is_empty() && !tags.is_empty() {
        cx.problem(path, "aws::ids cannot be combined with tag selectors");
        return Vec::new();
    }
    if ids.is_empty() {
        return vec![map(vec![("tags", tags_value(&tags))])];
    }
    ids.iter().flat_map(|(_, v)| split_list(v)).map(|id| map(vec![("id", s(&id))])).collect()
}

/// A v1alpha1 `amiSelector` as AMI selector terms: `aws::ids` one term per id, `aws::name` ×
/// `aws::owners` one term per combination, with the remaining tags in each.
fn ami_terms(cx: &mut Cx, v: Option<&Value>, path: &str) -> Vec<Value> {
    let entries = cx.string_map(v, path);
    let find = |key: &str| entries.iter().find(|(k, _)| k == key).map(|(_, v)| split_list(v));
    let ids: Vec<String> = ID_KEYS.iter().filter_map(|k| find(k)).flatten().collect();
    let names = find("aws::name").unwrap_or_default();
    let owners = find("aws::owners").unwrap_or_default();
    let tags: Vec<(String, String)> = entries.iter().filter(|(k, _)| !k.starts_with("aws")).cloned().collect();
    if !ids.is_empty() {
        if !names.is_empty() || !owners.is_empty() || !tags.is_empty() {
            cx.problem(path, "aws::ids cannot be combined with other AMI selectors");
            return Vec::new();
        }
        return ids.iter().map(|id| map(vec![("id", s(id))])).collect();
    }
    if names.is_empty() && owners.is_empty() && tags.is_empty() {
        return Vec::new();
    }
    let names: Vec<Option<&String>> = if names.is_empty() { vec![None] } else { names.iter().map(Some).collect() };
    let owners: Vec<Option<&String>> = if owners.is_empty() { vec![None] } else { owners.iter().map(Some).collect() };
    let mut out = Vec::new();
    for n in &names {
        for o in &owners {
            out.push(map(vec![
                ("tags", tags_value(&tags)),
                ("name", n.map(|n| s(n)).unwrap_or(Value::Null)),
                ("owner", o.map(|o| s(o)).unwrap_or(Value::Null)),
            ]));
        }
    }
    out
}

/// `amiFamily` and `amiSelectorTerms` in v1 form: a family without selector terms is an alias
/// `family@latest` (what the older APIs resolved: the latest EKS-optimized AMI); Ubuntu, which
/// v1 no longer resolves, keeps its selected AMIs with the AL2 family (same user data format)
/// and its own root device.
fn ami_selection(
    cx: &mut Cx,
    family: Option<String>,
    terms: Vec<Value>,
    family_path: &str,
    terms_path: &str,
    bdm_given: bool,
) -> (Option<String>, Vec<Value>, Option<Value>) {
    let mut default_bdm = None;
    let family = match family.as_deref() {
        Some("Ubuntu") => {
            if terms.is_empty() {
                cx.problem(
                    family_path,
                    format!("Ubuntu is not an AMI family of v1, which needs the Ubuntu AMIs named in {terms_path}"),
                );
                return (None, terms, None);
            }
            cx.note(family_path, "Ubuntu is AL2 in v1 (the same user data format), with the selected Ubuntu AMIs");
            if !bdm_given {
                default_bdm = Some(Value::Sequence(vec![map(vec![
                    ("deviceName", s("/dev/sda1")),
                    ("rootVolume", Value::Bool(true)),
                    (
                        "ebs",
                        map(vec![
                            ("encrypted", Value::Bool(true)),
                            ("volumeType", s("gp3")),
                            ("volumeSize", s("20Gi")),
                        ]),
                    ),
                ])]));
                cx.note("spec.blockDeviceMappings", "Ubuntu's root device /dev/sda1 (20Gi gp3, encrypted) written out: the AL2 family would use /dev/xvda");
            }
            Some("AL2".to_string())
        }
        other => other.map(str::to_string),
    };
    if !terms.is_empty() {
        return (family, terms, default_bdm);
    }
    match family.as_deref() {
        Some("Custom") => {
            cx.problem(family_path, format!("Custom needs the AMIs named in {terms_path}"));
            (family, terms, default_bdm)
        }
        Some(f) => match alias_family(f) {
            Some(alias) => (None, vec![map(vec![("alias", s(&format!("{alias}@latest")))])], default_bdm),
            None => (family, terms, default_bdm),
        },
        None => (None, terms, default_bdm),
    }
}

/// v1 changed the default hop limit from 2 to 1 (pods without host networking lose IMDS): the
/// older default is written out.
fn metadata_options(cx: &mut Cx, v: Option<&Value>, path: &str) -> Value {
    let mut m = match v {
        Some(Value::Mapping(m)) => m.clone(),
        _ => Mapping::new(),
    };
    if !m.contains_key("httpPutResponseHopLimit") {
        m.insert(s("httpPutResponseHopLimit"), Value::Number(2.into()));
        cx.note(&join(path, "httpPutResponseHopLimit"), "2 written out: the older default (v1's default is 1)");
    }
    Value::Mapping(m)
}

/// The spec of a v1alpha1 AWSNodeTemplate (or a v1alpha5 Provisioner's inline `provider`) as a
/// v1 EC2NodeClass spec.
pub(super) fn provider_spec(v: &Value, path: &str, cx: &mut Cx, opts: &ConvertOptions) -> Value {
    let spec = cx.mapping(Some(v), path, AWS_NODE_TEMPLATE_FIELDS);
    let get = |k: &str| spec.and_then(|m| m.get(k));
    let p = |k: &str| join(path, k);
    if get("launchTemplate").is_some() {
        cx.problem(
            &p("launchTemplate"),
            "no v1 equivalent: launch templates are generated from the EC2NodeClass (set its AMIs, user data, block devices, metadata options instead)",
        );
    }
    let subnets = selector_terms(cx, get("subnetSelector"), &p("subnetSelector"), true);
    let groups = selector_terms(cx, get("securityGroupSelector"), &p("securityGroupSelector"), true);
    let terms = ami_terms(cx, get("amiSelector"), &p("amiSelector"));
    let mut family = cx.string(get("amiFamily"), &p("amiFamily"));
    if family.is_none() {
        family = Some("AL2".to_string());
        cx.note(&p("amiFamily"), "AL2 (the v1alpha1 default) written out");
    }
    let bdm = get("blockDeviceMappings").cloned();
    let (family, terms, default_bdm) =
        ami_selection(cx, family, terms, &p("amiFamily"), &p("amiSelector"), bdm.is_some());
    let profile = match cx.string(get("instanceProfile"), &p("instanceProfile")) {
        Some(p) => Some(p),
        None => match &opts.default_instance_profile {
            Some(d) => {
                cx.note(&p("instanceProfile"), format!("{d:?} (the default instance profile given) written out"));
                Some(d.clone())
            }
            None => {
                cx.problem(
                    &p("instanceProfile"),
                    "not set: v1alpha5 took it from the aws.defaultInstanceProfile setting, which v1 does not have (give the profile with --default-instance-profile, or set spec.instanceProfile or spec.role)",
                );
                None
            }
        },
    };
    let metadata_options = metadata_options(cx, get("metadataOptions"), &p("metadataOptions"));
    let mut out = map(vec![
        ("subnetSelectorTerms", Value::Sequence(subnets)),
        ("securityGroupSelectorTerms", Value::Sequence(groups)),
        ("amiFamily", family.as_deref().map(s).unwrap_or(Value::Null)),
        ("amiSelectorTerms", Value::Sequence(terms)),
        ("instanceProfile", profile.as_deref().map(s).unwrap_or(Value::Null)),
        ("userData", get("userData").cloned().unwrap_or(Value::Null)),
        ("tags", get("tags").cloned().unwrap_or(Value::Null)),
        ("blockDeviceMappings", bdm.or(default_bdm).unwrap_or(Value::Null)),
        ("metadataOptions", metadata_options),
        ("detailedMonitoring", get("detailedMonitoring").cloned().unwrap_or(Value::Null)),
        ("context", get("context").cloned().unwrap_or(Value::Null)),
    ]);
    drop_managed_by_tag(cx, &mut out, &p("tags"));
    out
}

/// `karpenter.sh/managed-by` was a tag Karpenter set itself before v1 (v1 sets
/// `eks:eks-cluster-name`); as a user tag it has no meaning left.
fn drop_managed_by_tag(cx: &mut Cx, spec: &mut Value, path: &str) {
    if let Some(Value::Mapping(tags)) = spec.get_mut("tags")
        && tags.remove("karpenter.sh/managed-by").is_some()
    {
        cx.note(
            &format!("{path}[karpenter.sh/managed-by]"),
            "left out: v1 tags instances with eks:eks-cluster-name instead",
        );
    }
}

fn ec2_node_class(doc: &Value, spec: Value) -> Value {
    map(vec![
        ("apiVersion", s(crate::ec2nodeclass::API_VERSION)),
        ("kind", s(crate::ec2nodeclass::KIND)),
        ("metadata", metadata(doc)),
        ("spec", spec),
    ])
}

/// `karpenter.k8s.aws/v1alpha1` AWSNodeTemplate → v1 EC2NodeClass.
pub(super) fn aws_node_template(doc: &Value, cx: &mut Cx, opts: &ConvertOptions) -> Option<Value> {
    let Some(spec) = doc.get("spec") else {
        cx.problem("spec", "required");
        return None;
    };
    Some(ec2_node_class(doc, provider_spec(spec, "spec", cx, opts)))
}

/// `karpenter.k8s.aws/v1beta1` EC2NodeClass → v1.
pub(super) fn ec2_node_class_v1beta1(doc: &Value, cx: &mut Cx) -> Option<Value> {
    let Some(spec) = cx.mapping(doc.get("spec"), "spec", EC2_NODE_CLASS_V1BETA1_FIELDS) else {
        cx.problem("spec", "required");
        return None;
    };
    let family = cx.string(spec.get("amiFamily"), "spec.amiFamily");
    let terms = cx.list(spec.get("amiSelectorTerms"), "spec.amiSelectorTerms").to_vec();
    let (family, terms, default_bdm) = ami_selection(
        cx,
        family,
        terms,
        "spec.amiFamily",
        "spec.amiSelectorTerms",
        spec.contains_key("blockDeviceMappings"),
    );
    let mut out = Mapping::new();
    for (k, v) in &super::only_allowed(spec, EC2_NODE_CLASS_V1BETA1_FIELDS) {
        match k.as_str() {
            Some("amiFamily" | "amiSelectorTerms" | "metadataOptions") => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(f) = family {
        out.insert(s("amiFamily"), s(&f));
    }
    out.insert(s("amiSelectorTerms"), Value::Sequence(terms));
    if let Some(b) = default_bdm {
        out.insert(s("blockDeviceMappings"), b);
    }
    let mo = metadata_options(cx, spec.get("metadataOptions"), "spec.metadataOptions");
    out.insert(s("metadataOptions"), mo);
    let mut out = Value::Mapping(out);
    drop_managed_by_tag(cx, &mut out, "spec.tags");
    Some(ec2_node_class(doc, out))
}
