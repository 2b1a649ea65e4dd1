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

/// One edit of a text: overwrite, insert or delete a byte, or duplicate or drop a line.
#[derive(Debug, Clone)]
enum Edit {
    Overwrite(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    DuplicateLine(usize),
    DropLine(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to YAML and to the fields: structure, digits, signs, letters.
    let byte = prop_oneof![
        Just(b':'),
        Just(b'-'),
        Just(b' '),
        Just(b'\n'),
        Just(b'{'),
        Just(b'['),
        Just(b'"'),
        Just(b'&'),
        Just(b'*'),
        Just(b'!'),
        Just(b'%'),
        b'0'..=b'9',
        b'a'..=b'z',
        any::<u8>(),
    ];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Overwrite(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::DuplicateLine),
        any::<usize>().prop_map(Edit::DropLine),
    ]
}

/// `seed` with `edits` applied (invalid UTF-8 replaced, as a reader of text would).
fn mutate(seed: &str, edits: &[Edit]) -> String {
    let mut bytes = seed.as_bytes().to_vec();
    for e in edits {
        match *e {
            Edit::Overwrite(i, b) if !bytes.is_empty() => {
                let n = bytes.len();
                bytes[i % n] = b;
            }
            Edit::Insert(i, b) => {
                let at = i % (bytes.len() + 1);
                bytes.insert(at, b);
            }
            Edit::Delete(i) if !bytes.is_empty() => {
                let n = bytes.len();
                bytes.remove(i % n);
            }
            Edit::DuplicateLine(i) | Edit::DropLine(i) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let k = i % lines.len();
                    if matches!(e, Edit::DuplicateLine(_)) {
                        lines.insert(k, lines[k]);
                    } else {
                        lines.remove(k);
                    }
                }
                bytes = lines.join("\n").into_bytes();
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

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
