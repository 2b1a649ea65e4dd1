//! The manifest fixtures shared with `kerf validate`'s tests: every seed manifest (in v1 form)
//! decodes clean, and every broken manifest fails with exactly the field paths it declares in its
//! `# expect: KIND/NAME: PATH` header lines (or `KIND/NAME: PATH: MESSAGE`, compared whole).

use std::path::{Path, PathBuf};

use kerf_api::manifest::{self, KarpenterObject};

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

fn problems_of(text: &str) -> (Vec<KarpenterObject>, Vec<String>) {
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    for doc in manifest::yaml_documents(text) {
        let doc = doc.expect("fixtures are valid YAML");
        match manifest::decode_karpenter(&doc) {
            Ok(Some(o)) => objects.push(o),
            Ok(None) => {}
            Err(ps) => problems.extend(ps.into_iter().map(|p| format!("{}/{}: {}", p.kind, p.name, p.path))),
        }
    }
    (objects, problems)
}

/// Full problem lines, for failure messages.
fn full_problems(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for doc in manifest::yaml_documents(text) {
        if let Err(ps) = manifest::decode_karpenter(&doc.unwrap()) {
            out.extend(ps.iter().map(ToString::to_string));
        }
    }
    out
}

#[test]
fn every_seed_manifest_in_v1_form_validates_clean() {
    let files = fixtures("valid");
    assert!(files.len() >= 4, "expected the seed manifests, found {files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let (objects, problems) = problems_of(&text);
        assert!(problems.is_empty(), "{}: {:#?}", f.display(), full_problems(&text));
        assert!(!objects.is_empty(), "{}: no Karpenter object", f.display());
    }
}

#[test]
fn every_broken_manifest_fails_with_exactly_its_declared_field_paths_and_messages() {
    let mut files = fixtures("broken");
    assert!(files.len() >= 60, "expected one broken manifest per rule, found {}", files.len());
    files.extend(fixtures("legacy"));
    let mut mismatches = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut expected: Vec<String> =
            text.lines().filter_map(|l| l.strip_prefix("# expect: ")).map(str::to_string).collect();
        assert!(!expected.is_empty(), "{}: no '# expect:' line", f.display());
        let (_, paths) = problems_of(&text);
        // An expect line that carries the message after the path is compared whole.
        let mut problems: Vec<String> = paths
            .into_iter()
            .zip(full_problems(&text))
            .map(|(path, full)| if expected.contains(&full) { full } else { path })
            .collect();
        expected.sort();
        problems.sort();
        if problems != expected {
            mismatches.push(format!("{}:\n  expected {expected:#?}\n  got {:#?}", f.display(), full_problems(&text)));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn seed_manifests_round_trip_through_serialization() {
    for f in fixtures("valid") {
        let text = std::fs::read_to_string(&f).unwrap();
        let (objects, _) = problems_of(&text);
        for o in objects {
            let (yaml, again) = match &o {
                KarpenterObject::NodePool(x) => {
                    let y = serde_yaml_ng::to_string(x).unwrap();
                    (y.clone(), KarpenterObject::NodePool(serde_yaml_ng::from_str(&y).unwrap()))
                }
                KarpenterObject::NodeClaim(x) => {
                    let y = serde_yaml_ng::to_string(x).unwrap();
                    (y.clone(), KarpenterObject::NodeClaim(serde_yaml_ng::from_str(&y).unwrap()))
                }
                KarpenterObject::EC2NodeClass(x) => {
                    let y = serde_yaml_ng::to_string(x).unwrap();
                    (y.clone(), KarpenterObject::EC2NodeClass(serde_yaml_ng::from_str(&y).unwrap()))
                }
                KarpenterObject::CapacityBuffer(x) => {
                    let y = serde_yaml_ng::to_string(x).unwrap();
                    (y.clone(), KarpenterObject::CapacityBuffer(serde_yaml_ng::from_str(&y).unwrap()))
                }
                KarpenterObject::NodeOverlay(x) => {
                    let y = serde_yaml_ng::to_string(x).unwrap();
                    (y.clone(), KarpenterObject::NodeOverlay(serde_yaml_ng::from_str(&y).unwrap()))
                }
                KarpenterObject::ProvisioningRequest(x) => {
                    let y = serde_yaml_ng::to_string(x).unwrap();
                    (y.clone(), KarpenterObject::ProvisioningRequest(serde_yaml_ng::from_str(&y).unwrap()))
                }
                KarpenterObject::CapacityQuota(x) => {
                    let y = serde_yaml_ng::to_string(x).unwrap();
                    (y.clone(), KarpenterObject::CapacityQuota(serde_yaml_ng::from_str(&y).unwrap()))
                }
            };
            assert_eq!(again, o, "{}: {}/{} did not round-trip:\n{yaml}", f.display(), o.kind(), o.name());
            // The serialized form is itself valid.
            let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
            assert!(manifest::decode_karpenter(&doc).is_ok(), "{}: serialized form invalid:\n{yaml}", f.display());
        }
    }
}
