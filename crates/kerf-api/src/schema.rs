//! OpenAPI v3 schemas of the three CRDs, generated from the types, fit for a CRD's
//! `openAPIV3Schema` (structural: subschemas inlined, no `$ref`, `nullable` instead of null types).

use schemars::generate::SchemaSettings;

use crate::{EC2NodeClass, NodeClaim, NodePool, ec2nodeclass, nodeclaim, nodepool};

fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Some(obj) = value.as_object_mut() {
        // The CRD names its kind; a title is noise there.
        obj.remove("title");
    }
    value
}

/// `(kind, schema)` for NodePool, NodeClaim and EC2NodeClass, in that order.
pub fn crd_schemas() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        (nodepool::KIND, schema_of::<NodePool>()),
        (nodeclaim::KIND, schema_of::<NodeClaim>()),
        (ec2nodeclass::KIND, schema_of::<EC2NodeClass>()),
    ]
}

/// The file name of a kind's schema under `crds/` (`nodepools.karpenter.sh.schema.json`, `ec2nodeclasses.karpenter.k8s.aws.schema.json`).
pub fn schema_file_name(kind: &str) -> String {
    let group = if kind == ec2nodeclass::KIND { ec2nodeclass::GROUP } else { crate::labels::GROUP };
    let singular = kind.to_ascii_lowercase();
    let plural = if singular.ends_with('s') { format!("{singular}es") } else { format!("{singular}s") };
    format!("{plural}.{group}.schema.json")
}
