//! Fuzzing on stable Rust with proptest: whatever text arrives, quantity and duration parsing,
//! manifest decoding, validation and conversion answer with a value or an error, never a
//! panic. Inputs are arbitrary strings and the repository's own manifests with random byte
//! and line edits (so most cases get deep into the decoders).
//!
//! CI runs the default case count; a long run:
//! `PROPTEST_CASES=1000000 cargo test --release -p kerf-api --test fuzz`

use std::path::PathBuf;

use kerf_api::convert::{ConvertOptions, convert};
use kerf_api::manifest::yaml_documents;
use kerf_api::{GoDuration, Quantity, decode_karpenter};
use proptest::prelude::*;

#[path = "common/edits.rs"]
mod edits;
use edits::{edit, mutate};

fn fixtures() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kerf/tests/fixtures");
    let mut out = Vec::new();
    for dir in ["validate/valid", "validate/invalid", "convert"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths.into_iter().filter(|p| p.extension().is_some_and(|x| x == "yaml")) {
            if let Ok(text) = std::fs::read_to_string(&p) {
                out.push(text);
            }
        }
    }
    assert!(out.len() >= 10, "the manifest fixtures are found ({} files)", out.len());
    out
}

/// Everything `kerf validate` and `kerf convert` do with a file's text.
fn decode_validate_convert(text: &str) {
    let mut docs = Vec::new();
    for doc in yaml_documents(text).into_iter().flatten() {
        if let Ok(Some(obj)) = decode_karpenter(&doc) {
            let _ = obj.validate();
        }
        docs.push(doc);
    }
    let _ = convert(&docs, &ConvertOptions::default());
}

fn quantity_like() -> impl Strategy<Value = String> {
    "[+-]?[0-9]{0,25}(\\.[0-9]{0,25})?([eE][+-]?[0-9]{0,4})?(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?"
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn quantities_parse_or_fail_cleanly_and_canonical_forms_parse_back(s in prop_oneof![quantity_like(), any::<String>()]) {
        if let Ok(q) = Quantity::parse(&s) {
            let canonical = q.canonical();
            prop_assert_eq!(Quantity::parse(&canonical).ok(), Some(q), "{} -> {}", s, canonical);
        }
    }

    #[test]
    fn durations_parse_or_fail_cleanly(s in prop_oneof!["[0-9.]{0,12}(ns|us|µs|ms|s|m|h){0,3}[0-9.]{0,6}(h|m|s)?", any::<String>()]) {
        let _ = GoDuration::parse(&s);
    }

    #[test]
    fn any_text_decodes_validates_and_converts_without_panicking(text in any::<String>()) {
        decode_validate_convert(&text);
    }

    #[test]
    fn edited_manifests_decode_validate_and_convert_without_panicking(
        which in any::<usize>(),
        edits in prop::collection::vec(edit(), 1..8),
    ) {
        thread_local! {
            static SEEDS: Vec<String> = fixtures();
        }
        let text = SEEDS.with(|s| mutate(&s[which % s.len()], &edits));
        decode_validate_convert(&text);
    }
}
