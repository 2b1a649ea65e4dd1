//! Fuzzing `kerf serve`'s request decoding on stable Rust with proptest: arbitrary JSON bodies
//! (and well-formed objects with one field of the wrong type) sent as creates, replaces and
//! patches of every kind are answered with an object or a Kubernetes error, never a panic.
//!
//! A long run: `PROPTEST_CASES=1000000 cargo test --release -p kerf-apiserver --test fuzz_rest`

use std::sync::Arc;

use kerf_api::clock::ManualClock;
use kerf_apiserver::SimCluster;
use kerf_apiserver::kinds::KINDS;
use kerf_apiserver::rest::{PatchType, Rest};
use kerf_apiserver::writes::Part;
use proptest::prelude::*;
use serde_json::{Value, json};

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "metadata",
            "name",
            "namespace",
            "spec",
            "status",
            "labels",
            "apiVersion",
            "kind",
            "template",
            "finalizers",
            "resourceVersion",
            "replicas",
            "op",
            "path",
            "value",
            "containers",
            "selector",
        ])
        .prop_map(str::to_string),
        "[a-z]{1,8}",
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-zA-Z0-9./:-]{0,12}".prop_map(Value::String),
        prop::sample::select(vec!["x", "default", "/metadata/name", "add", "remove", "replace", "100m", "1Gi"])
            .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A well-formed object of the kind with the field at `path` (dot-separated) set to `value`.
fn object_with(kind: &str, api_version: &str, path: &str, value: Value) -> Value {
    let mut obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "default"}});
    let parts: Vec<&str> = path.split('.').collect();
    let mut at = &mut obj;
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            at[*p] = value;
            break;
        }
        if !at[*p].is_object() {
            at[*p] = json!({});
        }
        at = &mut at[*p];
    }
    obj
}

fn rest() -> Rest {
    Rest::new(Arc::new(SimCluster::new(ManualClock::new(), 1)))
}

const PATCHES: [PatchType; 3] = [PatchType::Merge, PatchType::Json, PatchType::Strategic];

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bodies_are_answered_with_an_object_or_an_error(k in 0..KINDS.len(), body in arb_json(), patch in arb_json()) {
        let kind = &KINDS[k];
        let rest = rest();
        let _ = rest.create(kind, Some("default"), body.clone());
        let _ = rest.replace(kind, Some("default"), "x", body.clone(), Part::Main);
        let _ = rest.replace(kind, Some("default"), "x", body, Part::Status);
        for pt in PATCHES {
            let _ = rest.patch(kind, Some("default"), "x", pt, &patch, Part::Main);
        }
    }

    #[test]
    fn fields_of_the_wrong_type_are_answered_with_an_error_not_a_panic(
        k in 0..KINDS.len(),
        path in prop::sample::select(vec![
            "metadata", "metadata.name", "metadata.labels", "metadata.finalizers", "metadata.resourceVersion",
            "metadata.deletionTimestamp", "metadata.generateName", "spec", "spec.replicas", "spec.template",
            "spec.template.spec.containers", "status", "spec.requirements", "spec.disruption.budgets",
            "spec.selector", "spec.template.spec.requirements", "spec.nodeName",
        ]),
        value in arb_json(),
        patch in arb_json(),
    ) {
        let kind = &KINDS[k];
        let rest = rest();
        let body = object_with(kind.kind, &kind.api_version(), path, value);
        let created = rest.create(kind, Some("default"), body.clone()).is_ok();
        let _ = rest.replace(kind, Some("default"), "x", body, Part::Main);
        if created {
            for pt in PATCHES {
                let _ = rest.patch(kind, Some("default"), "x", pt, &patch, Part::Main);
            }
        }
    }
}
