//! The CRDs judged against kerf's own validation, on the shared manifest fixtures: each CRD
//! schema is applied the way an API server applies it (defaults, types, enums, patterns,
//! bounds, required fields, unknown fields, and every CEL rule evaluated with a CEL
//! interpreter), then
//! - every manifest kerf accepts passes (the CRDs never reject what kerf takes), and
//! - every manifest kerf rejects is rejected by the CRDs too, but for the named few whose
//!   check no CRD can make.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cel::extractors::This;
use cel::{Context, Program};
use kerf_api::crd::{self, CrdDefinition};
use serde_json::Value;

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kerf/tests/fixtures/validate").join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The CEL environment of a Kubernetes API server, as far as kerf's rules use it: the standard
/// library plus the `find` (regex) and `lowerAscii` (strings) extensions.
fn cel_context() -> Context<'static, 'static> {
    let mut ctx = Context::default();
    let _ = ctx.add_function("find", |This(this): This<Arc<String>>, pattern: Arc<String>| -> String {
        regex::Regex::new(&pattern)
            .ok()
            .and_then(|re| re.find(&this).map(|m| m.as_str().to_string()))
            .unwrap_or_default()
    });
    let _ = ctx.add_function("lowerAscii", |This(this): This<Arc<String>>| -> String { this.to_ascii_lowercase() });
    ctx
}

fn schema_of(def: &CrdDefinition) -> Value {
    def.custom_resource_definition()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Fills in defaults the way the API server does before validating.
fn apply_defaults(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(obj) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, sub) in props {
                    if !obj.contains_key(name)
                        && let Some(d) = sub.get("default")
                    {
                        obj.insert(name.clone(), d.clone());
                    }
                    if let Some(child) = obj.get_mut(name) {
                        apply_defaults(sub, child);
                    }
                }
            } else if let Some(extra) = schema.get("additionalProperties") {
                obj.values_mut().for_each(|child| apply_defaults(extra, child));
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter_mut().for_each(|child| apply_defaults(sub, child));
            }
        }
        _ => {}
    }
}

fn type_ok(schema: &Value, v: &Value) -> bool {
    if v.is_null() {
        return schema.get("nullable") == Some(&Value::Bool(true));
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return v.is_string() || v.is_i64() || v.is_u64();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        _ => true,
    }
}

/// Every problem the CRD schema finds in `v` at `path`.
fn check(ctx: &Context, schema: &Value, v: &Value, path: &str, problems: &mut Vec<String>) {
    if !type_ok(schema, v) {
        problems.push(format!("{path}: wrong type"));
        return;
    }
    if v.is_null() {
        return;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(v)
    {
        problems.push(format!("{path}: not one of {values:?}"));
    }
    if let Some(s) = v.as_str() {
        if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
            let re = regex::Regex::new(p).unwrap_or_else(|e| panic!("{path}: pattern {p}: {e}"));
            if !re.is_match(s) {
                problems.push(format!("{path}: does not match {p}"));
            }
        }
        let len = s.chars().count() as u64;
        if schema.get("maxLength").and_then(Value::as_u64).is_some_and(|m| len > m) {
            problems.push(format!("{path}: too long"));
        }
        if schema.get("minLength").and_then(Value::as_u64).is_some_and(|m| len < m) {
            problems.push(format!("{path}: too short"));
        }
    }
    if let Some(n) = v.as_f64().filter(|_| v.is_number()) {
        if schema.get("minimum").and_then(Value::as_f64).is_some_and(|m| n < m) {
            problems.push(format!("{path}: below minimum"));
        }
        if schema.get("maximum").and_then(Value::as_f64).is_some_and(|m| n > m) {
            problems.push(format!("{path}: above maximum"));
        }
    }
    if let Some(items) = v.as_array() {
        if schema.get("maxItems").and_then(Value::as_u64).is_some_and(|m| items.len() as u64 > m) {
            problems.push(format!("{path}: too many items"));
        }
        if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set") {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    problems.push(format!("{path}[{i}]: duplicate"));
                }
            }
        }
        if let Some(sub) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                check(ctx, sub, item, &format!("{path}[{i}]"), problems);
            }
        }
    }
    if let Some(obj) = v.as_object() {
        if schema.get("maxProperties").and_then(Value::as_u64).is_some_and(|m| obj.len() as u64 > m) {
            problems.push(format!("{path}: too many properties"));
        }
        for req in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if let Some(r) = req.as_str().filter(|r| !obj.contains_key(*r)) {
                problems.push(format!("{path}.{r}: required"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        let extra = schema.get("additionalProperties");
        let free = schema.get("x-kubernetes-preserve-unknown-fields").is_some();
        for (k, child) in obj {
            match (props.and_then(|p| p.get(k)), extra) {
                (Some(sub), _) => check(ctx, sub, child, &format!("{path}.{k}"), problems),
                (None, Some(sub)) if props.is_none() => check(ctx, sub, child, &format!("{path}[{k}]"), problems),
                _ if props.is_some() && !free => problems.push(format!("{path}.{k}: unknown field")),
                _ => {}
            }
        }
    }
    for rule in schema.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten() {
        let (src, message) = (rule["rule"].as_str().unwrap(), rule["message"].as_str().unwrap());
        let program = Program::compile(src).unwrap_or_else(|e| panic!("{path}: rule {src}: {e}"));
        let mut scope = ctx.new_inner_scope();
        scope.add_variable("self", cel::to_value(v).unwrap()).unwrap();
        match program.execute(&scope) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => problems.push(format!("{path}: {message}")),
            other => problems.push(format!("{path}: rule {src} did not evaluate to a boolean: {other:?}")),
        }
    }
}

/// The CRD's problems with one Karpenter document (converted from YAML as the API server
/// receives it), or None when the document is not one of kerf's kinds.
fn crd_problems(ctx: &Context, doc: &serde_yaml_ng::Value) -> Option<Vec<String>> {
    let mut v: Value = serde_json::to_value(doc).ok()?;
    let def = crd::definition(v.get("kind")?.as_str()?)?;
    if v.get("apiVersion").and_then(Value::as_str) != Some(&format!("{}/{}", def.group, def.version)) {
        // Only v1 is served: the API server refuses any other version.
        return Some(vec![format!("apiVersion {} is not served", v["apiVersion"])]);
    }
    let schema = schema_of(def);
    apply_defaults(&schema, &mut v);
    let mut problems = Vec::new();
    check(ctx, &schema, &v, "", &mut problems);
    Some(problems)
}

fn documents(path: &Path) -> Vec<serde_yaml_ng::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    kerf_api::manifest::yaml_documents(&text).into_iter().filter_map(Result::ok).collect()
}

#[test]
fn every_manifest_kerf_accepts_passes_the_crds() {
    let ctx = cel_context();
    let mut files = fixtures("valid");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/manifests");
    files.push(examples.join("default-nodepool.yaml"));
    let mut checked = 0;
    for f in files {
        for doc in documents(&f) {
            let Some(problems) = crd_problems(&ctx, &doc) else { continue };
            checked += 1;
            assert!(problems.is_empty(), "{}: the CRD rejects what kerf accepts: {problems:#?}", f.display());
        }
    }
    assert!(checked >= 8, "only {checked} Karpenter documents checked");
}

/// Broken fixtures whose problem no CRD schema can express, and who catches it instead.
const ONLY_KERF_OR_THE_API_SERVER: &[(&str, &str)] = &[
    // Not a Kubernetes object at all: kubectl refuses it before any schema is consulted.
    ("doc-karpenter-group-without-kind.yaml", "kubectl: no kind"),
    ("doc-not-a-mapping.yaml", "kubectl: not an object"),
    // Object metadata is checked by the API server itself (names are DNS subdomains, unknown
    // ObjectMeta fields fail strict field validation), not by the CRD.
    ("np-name-invalid.yaml", "API server: metadata.name"),
    ("np-metadata-unknown-field.yaml", "API server: ObjectMeta fields"),
    // Cron syntax: CEL has no cron parser.
    ("np-budget-bad-cron.yaml", "kerf: cron syntax"),
    ("np-budget-cron-six-fields.yaml", "kerf: cron syntax"),
    ("np-budget-unknown-macro.yaml", "kerf: cron syntax"),
    // Quantities: the EBS size ranges per unit need quantity arithmetic.
    ("ec2-ebs-volume-size-mebibytes.yaml", "kerf: quantity range"),
    // A CapacityQuota's label selector: rules over its unbounded lists and maps would exceed the
    // API server's CEL cost budget (upstream leaves the selector to its quota controller).
    ("cq-in-without-values.yaml", "kerf: selector operator values"),
    ("cq-exists-with-values.yaml", "kerf: selector operator values"),
    ("cq-label-bad-key.yaml", "kerf: selector matchLabels keys"),
];

#[test]
fn every_manifest_kerf_rejects_is_rejected_by_the_crds_but_the_named_few() {
    let ctx = cel_context();
    let mut passed = Vec::new();
    for f in fixtures("broken") {
        let docs = documents(&f);
        let problems: Vec<String> = docs.iter().filter_map(|d| crd_problems(&ctx, d)).flatten().collect();
        let karpenter_docs = docs.iter().filter(|d| crd_problems(&ctx, d).is_some()).count();
        if problems.is_empty() || karpenter_docs == 0 {
            passed.push(f.file_name().unwrap().to_string_lossy().to_string());
        }
    }
    let expected: Vec<String> = ONLY_KERF_OR_THE_API_SERVER.iter().map(|(f, _)| f.to_string()).collect();
    let unexpected: Vec<&String> = passed.iter().filter(|f| !expected.contains(f)).collect();
    let caught_now: Vec<&String> = expected.iter().filter(|f| !passed.contains(f)).collect();
    assert!(unexpected.is_empty(), "kerf rejects these but the CRDs accept them: {unexpected:#?}");
    assert!(caught_now.is_empty(), "the CRDs now catch these; drop them from the list: {caught_now:#?}");
}

#[test]
fn crd_checks_name_the_rule_that_fails() {
    let ctx = cel_context();
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: x}\nspec:\n  role: r\n  instanceProfile: p\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{id: subnet-1, tags: {a: b}}]\n  securityGroupSelectorTerms: [{name: sg}]\n",
    )
    .unwrap();
    let problems = crd_problems(&ctx, &doc).unwrap();
    assert!(
        problems.contains(&".spec: must specify exactly one of ['role', 'instanceProfile']".to_string()),
        "{problems:#?}"
    );
    assert!(
        problems.iter().any(|p| p.starts_with(".spec.subnetSelectorTerms: 'id' is mutually exclusive")),
        "{problems:#?}"
    );
    assert_eq!(problems.len(), 2, "{problems:#?}");
}

#[test]
fn every_cel_rule_compiles() {
    for def in crd::ALL {
        for a in kerf_api::crd_rules::additions(def.kind) {
            if let kerf_api::crd_rules::What::Rule { rule, .. } = a.what {
                assert!(Program::compile(&rule).is_ok(), "{} {}: {rule}", def.kind, a.at);
            }
        }
    }
}

/// The rules no fixture reaches, each on a case of its own: kerf rejects it and the CRD names
/// the rule.
#[test]
fn node_class_rules_beyond_the_fixtures_agree_with_kerf() {
    let ctx = cel_context();
    let base = serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "x"},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]},
    });
    let cases: &[(Value, &str)] = &[
        (serde_json::json!({"subnetSelectorTerms": []}), "subnetSelectorTerms cannot be empty"),
        (serde_json::json!({"amiSelectorTerms": []}), "amiSelectorTerms cannot be empty"),
        (
            serde_json::json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"id": "ami-1", "name": "n"}]}),
            "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
        ),
        (serde_json::json!({"role": null, "instanceProfile": ""}), "instanceProfile cannot be empty"),
        (serde_json::json!({"tags": {"": "x"}}), "empty tag keys aren't supported"),
        (serde_json::json!({"placementGroupSelector": {"name": ""}}), "name cannot be empty"),
        (
            serde_json::json!({"kubelet": {"evictionSoft": {"foo": "1%"}, "evictionSoftGracePeriod": {"foo": "1m"}}}),
            "valid keys for evictionSoft are",
        ),
        (
            serde_json::json!({"kubelet": {"evictionSoft": {"foo": "1%"}, "evictionSoftGracePeriod": {"foo": "1m"}}}),
            "valid keys for evictionSoftGracePeriod are",
        ),
        (serde_json::json!({"kubelet": {"systemReserved": {"gpu": "1"}}}), "valid keys for systemReserved are"),
        (
            serde_json::json!({"kubelet": {"systemReserved": {"cpu": "-1"}}}),
            "systemReserved value cannot be a negative resource quantity",
        ),
    ];
    let clean: serde_yaml_ng::Value = serde_json::from_value(base.clone()).unwrap();
    assert_eq!(crd_problems(&ctx, &clean), Some(vec![]));
    assert!(kerf_api::manifest::decode_karpenter(&clean).is_ok());
    for (patch, message) in cases {
        let mut doc = base.clone();
        kerf_api::patch::merge(&mut doc["spec"], patch);
        let yaml: serde_yaml_ng::Value = serde_json::from_value(doc).unwrap();
        assert!(kerf_api::manifest::decode_karpenter(&yaml).is_err(), "kerf accepts {patch}");
        let problems = crd_problems(&ctx, &yaml).unwrap();
        assert!(problems.iter().any(|p| p.contains(message)), "{patch}: no {message:?} in {problems:#?}");
    }
}

/// The CapacityBuffer CRD refuses what `kerf validate` refuses: both references, neither, a
/// template without a count, a percentage without a workload, negative counts.
#[test]
fn capacity_buffer_rules_agree_with_kerf() {
    let ctx = cel_context();
    let base = serde_json::json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "b", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "t"}, "replicas": 2},
    });
    let cases: &[(Value, &str)] = &[
        (
            serde_json::json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}}),
            "set either podTemplateRef or scalableRef, not both",
        ),
        (serde_json::json!({"podTemplateRef": null}), "one of podTemplateRef or scalableRef is required"),
        (serde_json::json!({"replicas": null}), "a buffer with podTemplateRef needs replicas or limits"),
        (serde_json::json!({"percentage": 20}), "percentage needs scalableRef"),
        (serde_json::json!({"replicas": -1}), "minimum"),
        (serde_json::json!({"podTemplateRef": {"name": ""}}), "too short"),
    ];
    let clean: serde_yaml_ng::Value = serde_json::from_value(base.clone()).unwrap();
    assert_eq!(crd_problems(&ctx, &clean), Some(vec![]));
    assert!(kerf_api::manifest::decode_karpenter(&clean).is_ok());
    for (patch, message) in cases {
        let mut doc = base.clone();
        kerf_api::patch::merge(&mut doc["spec"], patch);
        let yaml: serde_yaml_ng::Value = serde_json::from_value(doc).unwrap();
        assert!(kerf_api::manifest::decode_karpenter(&yaml).is_err(), "kerf accepts {patch}");
        let problems = crd_problems(&ctx, &yaml).unwrap();
        assert!(problems.iter().any(|p| p.contains(message)), "{patch}: no {message:?} in {problems:#?}");
    }
}
