//! The CustomResourceDefinitions `kerf crds` prints: names, subresources, Karpenter's printer
//! columns, the CEL rules and bounds over the generated schemas, and their structural form.

use kerf_api::crd::{self, ALL, ColumnSource};
use kerf_api::crd_rules::{self, What};
use kerf_api::schema::{crd_schema, structural_problems};
use serde_json::Value;

fn columns(kind: &str) -> Vec<(String, String, String, i64)> {
    let crd = crd::definition(kind).unwrap().custom_resource_definition();
    crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["type"].as_str().unwrap().to_string(),
                c["jsonPath"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

fn col(name: &str, type_: &str, path: &str, priority: i64) -> (String, String, String, i64) {
    (name.to_string(), type_.to_string(), path.to_string(), priority)
}

#[test]
fn node_claim_printer_columns_are_karpenters() {
    assert_eq!(
        columns("NodeClaim"),
        [
            col("Type", "string", ".metadata.labels.node\\.kubernetes\\.io/instance-type", 0),
            col("Capacity", "string", ".metadata.labels.karpenter\\.sh/capacity-type", 0),
            col("Zone", "string", ".metadata.labels.topology\\.kubernetes\\.io/zone", 0),
            col("Node", "string", ".status.nodeName", 0),
            col("Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status", 0),
            col("Age", "date", ".metadata.creationTimestamp", 0),
            col("ImageID", "string", ".status.imageID", 1),
            col("ID", "string", ".status.providerID", 1),
            col("NodePool", "string", ".metadata.labels.karpenter\\.sh/nodepool", 1),
            col("NodeClass", "string", ".spec.nodeClassRef.name", 1),
            col("Drifted", "string", ".status.conditions[?(@.type==\"Drifted\")].status", 1),
        ]
    );
}

#[test]
fn node_pool_and_node_class_printer_columns_are_karpenters() {
    assert_eq!(
        columns("NodePool"),
        [
            col("NodeClass", "string", ".spec.template.spec.nodeClassRef.name", 0),
            col("Nodes", "string", ".status.nodes", 0),
            col("Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status", 0),
            col("Age", "date", ".metadata.creationTimestamp", 0),
            col("Weight", "integer", ".spec.weight", 1),
            col("CPU", "string", ".status.resources.cpu", 1),
            col("Memory", "string", ".status.resources.memory", 1),
        ]
    );
    assert_eq!(
        columns("EC2NodeClass"),
        [
            col("Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status", 0),
            col("Age", "date", ".metadata.creationTimestamp", 0),
            col("Role", "string", ".spec.role", 1),
        ]
    );
}

#[test]
fn node_overlay_printer_columns_and_names_are_karpenters() {
    assert_eq!(
        columns("NodeOverlay"),
        [
            col("Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status", 0),
            col("Age", "date", ".metadata.creationTimestamp", 0),
            col("Weight", "integer", ".spec.weight", 1),
        ]
    );
    let crd = crd::definition("NodeOverlay").unwrap().custom_resource_definition();
    assert_eq!(crd["metadata"]["name"], "nodeoverlays.karpenter.sh");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["names"]["shortNames"], serde_json::json!(["overlays"]));
    assert_eq!(crd["spec"]["versions"][0]["name"], "v1alpha1");
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["requirements"]));
    assert_eq!(spec["properties"]["weight"]["maximum"], 10000);
}

#[test]
fn every_printer_column_names_a_field_of_the_schema() {
    for def in ALL {
        let schema = crd_schema(def.kind).unwrap();
        for c in def.columns {
            if let ColumnSource::Field(pointer) = c.source {
                let path: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
                // A field, or a key of a map (`status.resources.cpu`).
                let node = path.iter().try_fold(&schema, |node, field| {
                    node["properties"].get(*field).or_else(|| node.get("additionalProperties"))
                });
                assert!(node.is_some(), "{} column {} reads {pointer}, which the schema lacks", def.kind, c.name);
            }
        }
    }
}

#[test]
fn names_scope_and_subresources_match_karpenters_crds() {
    let np = crd::NODE_POOL.custom_resource_definition();
    assert_eq!(np["metadata"]["name"], "nodepools.karpenter.sh");
    assert_eq!(np["spec"]["scope"], "Cluster");
    assert_eq!(np["spec"]["names"]["categories"], serde_json::json!(["karpenter"]));
    let sub = &np["spec"]["versions"][0]["subresources"];
    assert_eq!(sub["status"], serde_json::json!({}));
    assert_eq!(sub["scale"]["specReplicasPath"], ".spec.replicas");
    assert_eq!(sub["scale"]["statusReplicasPath"], ".status.nodes");

    let nc = crd::NODE_CLAIM.custom_resource_definition();
    assert_eq!(nc["metadata"]["name"], "nodeclaims.karpenter.sh");
    assert!(nc["spec"]["versions"][0]["subresources"].get("scale").is_none());
    assert!(nc["spec"]["names"].get("shortNames").is_none());

    let ec2 = crd::EC2_NODE_CLASS.custom_resource_definition();
    assert_eq!(ec2["metadata"]["name"], "ec2nodeclasses.karpenter.k8s.aws");
    assert_eq!(ec2["spec"]["names"]["shortNames"], serde_json::json!(["ec2nc", "ec2ncs"]));
    assert_eq!(ec2["spec"]["versions"][0]["name"], "v1");
    assert_eq!(ec2["spec"]["versions"][0]["storage"], true);
    assert_eq!(crd::EC2_NODE_CLASS.file_name(), "karpenter.k8s.aws_ec2nodeclasses.yaml");

    let cb = crd::CAPACITY_BUFFER.custom_resource_definition();
    assert_eq!(cb["metadata"]["name"], "capacitybuffers.autoscaling.x-k8s.io");
    assert_eq!(cb["spec"]["scope"], "Namespaced");
    assert_eq!(cb["spec"]["names"]["shortNames"], serde_json::json!(["cb"]));
    assert_eq!(cb["spec"]["versions"][0]["name"], "v1beta1");
    assert_eq!(cb["spec"]["versions"][0]["subresources"], serde_json::json!({"status": {}}));
    let spec = &cb["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["properties"]["provisioningStrategy"]["default"], "buffer.x-k8s.io/active-capacity");
    let rules: Vec<&str> =
        spec["x-kubernetes-validations"].as_array().unwrap().iter().map(|r| r["rule"].as_str().unwrap()).collect();
    assert!(rules.contains(&"!(has(self.podTemplateRef) && has(self.scalableRef))"), "{rules:?}");
    assert!(rules.contains(&"!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)"), "{rules:?}");
    let status = &cb["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    for field in ["podTemplateRef", "replicas", "podTemplateGeneration", "conditions", "provisioningStrategy"] {
        assert!(status.get(field).is_some(), "status.{field}");
    }
}

#[test]
fn every_rule_and_bound_lands_on_a_field_of_the_schema() {
    for def in ALL {
        let mut schema = crd_schema(def.kind).unwrap();
        let missing = crd_rules::apply(def.kind, &mut schema);
        assert!(missing.is_empty(), "{}: no such field for {missing:?}", def.kind);
    }
}

#[test]
fn crd_schemas_with_their_rules_are_structural() {
    for def in ALL {
        let crd = def.custom_resource_definition();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let problems = structural_problems(schema);
        assert!(problems.is_empty(), "{}: {problems:#?}", def.kind);
        assert_eq!(schema["properties"]["metadata"], serde_json::json!({"type": "object"}));
        assert!(!serde_json::to_string(schema).unwrap().contains("\"additionalProperties\":false"));
    }
}

#[test]
fn structural_check_finds_types_inside_junctors_and_untyped_nodes() {
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"oneOf": [{"type": "string", "enum": ["x"]}]},
            "b": {"description": "untyped"},
            "c": {"type": "string", "readOnly": true},
        },
    });
    let problems = structural_problems(&bad);
    assert!(problems.iter().any(|p| p.starts_with(".a/oneOf[0]: type inside a junctor")), "{problems:?}");
    assert!(problems.iter().any(|p| p == ".a: no type"), "{problems:?}");
    assert!(problems.iter().any(|p| p == ".b: no type"), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("unknown keyword \"readOnly\"")), "{problems:?}");
}

fn rules_at<'a>(crd: &'a Value, pointer: &str) -> Vec<&'a str> {
    crd.pointer(pointer)
        .and_then(|n| n["x-kubernetes-validations"].as_array())
        .map(|rules| rules.iter().map(|r| r["message"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

#[test]
fn kerfs_requirement_and_label_checks_become_cel_rules() {
    let np = crd::NODE_POOL.custom_resource_definition();
    let spec = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
    let reqs = format!("{spec}/template/properties/spec/properties/requirements");
    let messages = rules_at(&np, &reqs);
    assert!(messages.contains(&"requirements with operator 'In' must have a value defined"));
    assert!(messages.iter().any(|m| m.contains("single non-negative integer")));
    assert!(messages.iter().any(|m| m.contains("minValues")));
    let key_messages = rules_at(&np, &format!("{reqs}/items/properties/key"));
    assert!(key_messages.contains(&"label domain \"kubernetes.io\" is restricted"));
    assert!(key_messages.contains(&"label \"karpenter.sh/nodepool\" is restricted"));
    let key = np.pointer(&format!("{reqs}/items/properties/key")).unwrap();
    assert_eq!(key["maxLength"], 316);
    let labels = rules_at(&np, &format!("{spec}/template/properties/metadata/properties/labels"));
    assert!(labels.contains(&"label \"kubernetes.io/hostname\" is restricted"));
    assert!(rules_at(&np, spec.trim_end_matches("/properties")).iter().any(|m| m.contains("static NodePools")));

    // A NodeClaim names its pool: karpenter.sh/nodepool is allowed there.
    let nc = crd::NODE_CLAIM.custom_resource_definition();
    let nc_key = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/requirements/items/properties/key";
    let nc_messages = rules_at(&nc, nc_key);
    assert!(nc_messages.contains(&"label domain \"karpenter.sh\" is restricted"));
    assert!(!nc_messages.contains(&"label \"karpenter.sh/nodepool\" is restricted"));
}

#[test]
fn node_class_rules_cover_selector_terms_identity_and_tags() {
    let all: Vec<(String, String)> = crd_rules::additions("EC2NodeClass")
        .into_iter()
        .filter_map(|a| match a.what {
            What::Rule { message, .. } => Some((a.at, message)),
            _ => None,
        })
        .collect();
    let has = |at: &str, msg: &str| all.iter().any(|(a, m)| a == at && m.contains(msg));
    assert!(has("spec.subnetSelectorTerms", "cannot be empty"));
    assert!(has("spec.amiSelectorTerms[].alias", "family@version"));
    assert!(has("spec", "exactly one of ['role', 'instanceProfile']"));
    assert!(has("spec.tags", "eks:eks-cluster-name"));
    assert!(has("spec.kubelet.evictionHard", "valid keys for evictionHard"));
    assert!(has("spec.blockDeviceMappings", "only one blockDeviceMappings with rootVolume"));
}

#[test]
fn crds_print_as_seven_yaml_documents() {
    let text = crd::all_yaml().unwrap();
    let docs: Vec<Value> =
        serde_yaml_ng::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
    let names: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "ec2nodeclasses.karpenter.k8s.aws",
            "capacitybuffers.autoscaling.x-k8s.io",
            "nodeoverlays.karpenter.sh",
            "provisioningrequests.autoscaling.x-k8s.io",
            "capacityquotas.autoscaling.x-k8s.io",
        ]
    );
    assert!(docs.iter().all(|d| d["kind"] == "CustomResourceDefinition"));
}

/// Every field of the CRDs is one the API's own type knows, with the type it has: decoding into
/// k8s-openapi's CustomResourceDefinition (which drops unknown fields) and encoding again gives
/// back the same object.
#[test]
fn crds_round_trip_through_the_apiextensions_v1_type() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    for def in ALL {
        let crd = def.custom_resource_definition();
        let typed: CustomResourceDefinition =
            serde_json::from_value(crd.clone()).unwrap_or_else(|e| panic!("{}: {e}", def.kind));
        // Numbers compare as numbers (the type holds `minimum` as a float).
        let (back, crd) = (numbers_as_floats(serde_json::to_value(&typed).unwrap()), numbers_as_floats(crd));
        if back != crd {
            let (a, b) = (serde_json::to_string_pretty(&crd).unwrap(), serde_json::to_string_pretty(&back).unwrap());
            let first = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(0);
            let context: Vec<_> = a.lines().zip(b.lines()).skip(first.saturating_sub(5)).take(10).collect();
            panic!("{}: the typed CRD differs from kerf's near line {first}: {context:#?}", def.kind);
        }
    }
}

fn numbers_as_floats(v: Value) -> Value {
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        Value::Array(a) => Value::Array(a.into_iter().map(numbers_as_floats).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, numbers_as_floats(v))).collect()),
        other => other,
    }
}

/// CEL string literals accept only the escapes the CEL spec lists (`\\`, `\'`, `\n`, ...);
/// cel-go rejects a rule with any other (`'\.'`), so regex escapes in rules are doubled.
#[test]
fn cel_rules_escape_backslashes_in_string_literals() {
    for def in ALL {
        for a in crd_rules::additions(def.kind) {
            if let What::Rule { rule, .. } = a.what {
                let mut chars = rule.chars();
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        let next = chars.next();
                        assert!(
                            matches!(next, Some('\\' | '\'' | '"' | 'n' | 't' | 'r')),
                            "{} {}: {rule} has the escape \\{next:?}",
                            def.kind,
                            a.at
                        );
                    }
                }
            }
        }
    }
}
