//! The CRD schemas generated from the types.

use std::path::Path;

use kerf_api::schema::{crd_schemas, schema_file_name};
use serde_json::Value;

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |cur, p| cur.get(*p).unwrap_or_else(|| panic!("no {p} in {path:?}")))
}

fn props(v: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v["properties"].as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    keys
}

#[test]
fn schemas_cover_the_seven_kinds_and_their_key_fields() {
    let schemas = crd_schemas();
    let kinds: Vec<&str> = schemas.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        [
            "NodePool",
            "NodeClaim",
            "EC2NodeClass",
            "CapacityBuffer",
            "NodeOverlay",
            "ProvisioningRequest",
            "CapacityQuota"
        ]
    );
    let quota_spec = at(&schemas[6].1, &["properties", "spec"]);
    assert_eq!(props(quota_spec), ["limits", "selector"]);
    let overlay_spec = at(&schemas[4].1, &["properties", "spec"]);
    assert_eq!(props(overlay_spec), ["capacity", "price", "priceAdjustment", "requirements", "weight"]);
    let request_spec = at(&schemas[5].1, &["properties", "spec"]);
    assert_eq!(props(request_spec), ["parameters", "podSets", "provisioningClassName"]);
    let buffer_spec = at(&schemas[3].1, &["properties", "spec"]);
    assert_eq!(
        props(buffer_spec),
        ["limits", "percentage", "podTemplateRef", "provisioningStrategy", "replicas", "scalableRef"]
    );

    let np = &schemas[0].1;
    assert_eq!(props(at(np, &["properties", "spec"])), ["disruption", "limits", "replicas", "template", "weight"]);
    let tmpl_spec = at(np, &["properties", "spec", "properties", "template", "properties", "spec"]);
    assert_eq!(
        props(tmpl_spec),
        ["expireAfter", "nodeClassRef", "requirements", "startupTaints", "taints", "terminationGracePeriod"]
    );
    assert_eq!(tmpl_spec["properties"]["requirements"]["maxItems"], 100);
    let req = &tmpl_spec["properties"]["requirements"]["items"];
    assert_eq!(props(req), ["key", "minValues", "operator", "values"]);
    assert_eq!(req["properties"]["minValues"]["minimum"], 1);
    assert_eq!(req["properties"]["minValues"]["maximum"], 50);
    let ops: Vec<&str> =
        req["properties"]["operator"]["enum"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(ops, ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]);
    let weight = at(np, &["properties", "spec", "properties", "weight"]);
    assert_eq!((weight["minimum"].as_i64(), weight["maximum"].as_i64()), (Some(1), Some(100)));
    let budget = at(np, &["properties", "spec", "properties", "disruption", "properties", "budgets", "items"]);
    assert_eq!(budget["properties"]["nodes"]["pattern"], "^((100|[0-9]{1,2})%|[0-9]+)$");
    let taint_effect = &tmpl_spec["properties"]["taints"]["items"]["properties"]["effect"]["enum"];
    assert_eq!(taint_effect, &serde_json::json!(["NoSchedule", "PreferNoSchedule", "NoExecute"]));

    let nc = &schemas[1].1;
    assert_eq!(props(nc), ["apiVersion", "kind", "metadata", "spec", "status"]);
    assert!(props(at(nc, &["properties", "status"])).contains(&"conditions"));

    let ec2 = &schemas[2].1;
    let spec = at(ec2, &["properties", "spec"]);
    for field in [
        "amiSelectorTerms",
        "subnetSelectorTerms",
        "securityGroupSelectorTerms",
        "role",
        "instanceProfile",
        "kubelet",
        "metadataOptions",
        "blockDeviceMappings",
        "tags",
        "userData",
    ] {
        assert!(props(spec).contains(&field), "EC2NodeClass spec lacks {field}");
    }
    assert_eq!(spec["properties"]["metadataOptions"]["properties"]["httpPutResponseHopLimit"]["maximum"], 64);
}

#[test]
fn schemas_are_structural_without_references() {
    for (kind, schema) in crd_schemas() {
        let text = serde_json::to_string(&schema).unwrap();
        assert!(!text.contains("$ref"), "{kind} schema has a $ref");
        assert!(!text.contains("\"null\""), "{kind} schema has a null type");
        assert!(schema.get("$schema").is_none(), "{kind}");
        let problems = kerf_api::schema::structural_problems(&schema);
        assert!(problems.is_empty(), "{kind}: {problems:#?}");
    }
}

/// `crds/*.schema.json` are generated files; `KERF_UPDATE_CRDS=1 cargo test -p kerf-api --test
/// schema` rewrites them.
#[test]
fn committed_crd_schema_files_are_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    let update = std::env::var_os("KERF_UPDATE_CRDS").is_some();
    for (kind, schema) in crd_schemas() {
        let path = dir.join(schema_file_name(kind));
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with KERF_UPDATE_CRDS=1)", path.display()));
        assert!(
            committed == text,
            "{} is stale: run KERF_UPDATE_CRDS=1 cargo test -p kerf-api --test schema",
            path.display()
        );
    }
}
