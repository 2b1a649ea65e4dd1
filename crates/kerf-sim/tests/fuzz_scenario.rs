//! Fuzzing the scenario loader on stable Rust with proptest: the examples with random byte
//! and line edits, and arbitrary text, load or fail with an error naming the file, never
//! panic.
//!
//! A long run: `PROPTEST_CASES=1000000 cargo test --release -p kerf-sim --test fuzz_scenario`

use std::path::{Path, PathBuf};

use proptest::prelude::*;

#[path = "../../kerf-api/tests/common/edits.rs"]
mod edits;
use edits::{edit, mutate};

fn examples() -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    paths.sort();
    let out: Vec<(PathBuf, String)> = paths
        .into_iter()
        // The 30,000-pod examples take long to load each time.
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| {
            !p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("scale") || n.starts_with("plan"))
        })
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect();
    assert!(out.len() >= 8, "the examples are found ({})", out.len());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn edited_examples_load_or_fail_with_an_error_naming_the_file(
        which in any::<usize>(),
        edits in prop::collection::vec(edit(), 1..8),
    ) {
        thread_local! {
            static SEEDS: Vec<(PathBuf, String)> = examples();
        }
        let (path, text) = SEEDS.with(|s| {
            let (p, t) = &s[which % s.len()];
            (p.clone(), mutate(t, &edits))
        });
        if let Err(e) = kerf_sim::scenario::parse(&path, &text) {
            prop_assert!(e.to_string().contains(path.file_name().and_then(|n| n.to_str()).unwrap_or("")), "{}", e);
        }
    }

    #[test]
    fn any_text_loads_or_fails_cleanly(text in any::<String>()) {
        let _ = kerf_sim::scenario::parse(Path::new("fuzz.yaml"), &text);
    }
}
