//! `kerf validate` run as a binary: exit codes and the exact problem lines.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture_dir(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/validate").join(dir)
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture_dir(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn kerf_validate(files: &[PathBuf]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf")).arg("validate").args(files).output().unwrap();
    Run {
        code: out.status.code().unwrap(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("kerf-validate-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn seed_manifests_in_v1_form_exit_0_and_count_their_objects() {
    let files = yaml_files("valid");
    let run = kerf_validate(&files);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    assert_eq!(run.stderr, "");
    let dir = fixture_dir("valid");
    let line = |f: &str, counts: &str| format!("{}: ok ({counts})", dir.join(f).display());
    let expected = [
        line("capacity-quotas.yaml", "0 NodePool, 0 NodeClaim, 0 EC2NodeClass, 2 CapacityQuota"),
        line("nodeclaim.yaml", "0 NodePool, 1 NodeClaim, 0 EC2NodeClass"),
        line("seed-000-teama-capacity-spread.yaml", "2 NodePool, 0 NodeClaim, 1 EC2NodeClass"),
        line("seed-001-karpenter-default.yaml", "1 NodePool, 0 NodeClaim, 1 EC2NodeClass"),
        line("seed-003-nodepool-chart.yaml", "2 NodePool, 0 NodeClaim, 1 EC2NodeClass"),
        line("seed-004-topology-spread.yaml", "1 NodePool, 0 NodeClaim, 1 EC2NodeClass"),
        line("v1-14-balanced-consolidation.yaml", "1 NodePool, 0 NodeClaim, 0 EC2NodeClass"),
        line("v1-14-ec2nodeclass-features.yaml", "1 NodePool, 0 NodeClaim, 2 EC2NodeClass"),
        line("v1-15-unhealthy-budget.yaml", "1 NodePool, 0 NodeClaim, 0 EC2NodeClass"),
    ];
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn each_broken_manifest_exits_2_with_exactly_its_field_paths_and_declared_messages() {
    let mut files = yaml_files("broken");
    files.extend(yaml_files("legacy"));
    assert!(files.len() >= 60);
    // One run over every file: each is checked completely and independently.
    let run = kerf_validate(&files);
    assert_eq!(run.code, 2);
    assert_eq!(run.stdout, "", "no broken file is reported ok");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let prefix = format!("{}: ", f.display());
        let mut expected: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# expect: ")).collect();
        let mut got: Vec<&str> = run
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            // An expect line that carries the message is compared whole; others by path:
            // `KIND/NAME: PATH: problem` → `KIND/NAME: PATH`
            .map(|l| {
                if expected.contains(&l) {
                    return l;
                }
                let mut parts = l.splitn(3, ": ");
                let obj = parts.next().unwrap();
                let path = parts.next().unwrap_or("");
                &l[..(obj.len() + 2 + path.len()).min(l.len())]
            })
            .collect();
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "{}", f.display());
    }
}

#[test]
fn every_problem_of_every_object_in_a_file_is_listed_in_order() {
    let file = fixture_dir("several-problems.yaml");
    let run = kerf_validate(std::slice::from_ref(&file));
    assert_eq!(run.code, 2);
    let f = file.display();
    let expected = [
        format!(
            "{f}: NodePool/first: spec.template.metadata.labels[kubernetes.io/hostname]: label \"kubernetes.io/hostname\" is restricted"
        ),
        format!(
            "{f}: NodePool/first: spec.template.spec.requirements[0].values: requirements with operator 'In' must have a value defined"
        ),
        format!(
            "{f}: NodePool/first: spec.template.spec.requirements[1].values: requirements with operator 'Gt' must have a single non-negative integer value, got [\"3\", \"4\"]"
        ),
        format!("{f}: NodePool/first: spec.weight: must be between 1 and 100, got 0"),
        format!(
            "{f}: EC2NodeClass/second: spec.securityGroupSelectorTerms: securityGroupSelectorTerms cannot be empty (at least one term is required)"
        ),
        format!("{f}: EC2NodeClass/second: spec: must specify exactly one of ['role', 'instanceProfile']"),
        format!(
            "{f}: EC2NodeClass/second: spec.metadataOptions.httpTokens: \"maybe\" is not one of ['required','optional']"
        ),
    ];
    assert_eq!(run.stderr.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn unknown_field_and_bad_enum_are_reported_with_their_paths() {
    let file = temp_file(
        "unknown.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  template:\n    spec:\n      \
         requirements: [{key: app, operator: Inn, values: [a]}]\n      nodeClassRef: {group: g, kind: K, name: n}\n      \
         kubelet: {maxPods: 10}\n",
    );
    let run = kerf_validate(std::slice::from_ref(&file));
    std::fs::remove_file(&file).unwrap();
    assert_eq!(run.code, 2);
    let f = file.display();
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with(&format!(
            "{f}: NodePool/p: spec.template.spec.requirements[0].operator: unknown variant `Inn`"
        ))
    );
    assert!(lines[1].starts_with(&format!("{f}: NodePool/p: spec.template.spec.kubelet: unknown field `kubelet`")));
}

#[test]
fn unreadable_file_exits_2_naming_the_file_and_other_files_are_still_checked() {
    let missing = fixture_dir("does-not-exist.yaml");
    let valid = fixture_dir("valid").join("nodeclaim.yaml");
    let run = kerf_validate(&[missing.clone(), valid.clone()]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.starts_with(&format!("{}: cannot read: ", missing.display())), "{}", run.stderr);
    assert_eq!(run.stdout, format!("{}: ok (0 NodePool, 1 NodeClaim, 0 EC2NodeClass)\n", valid.display()));
}

#[test]
fn yaml_syntax_error_names_the_file_and_line() {
    let file = temp_file("syntax.yaml", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: [unclosed\n");
    let run = kerf_validate(std::slice::from_ref(&file));
    std::fs::remove_file(&file).unwrap();
    assert_eq!(run.code, 2);
    assert!(run.stderr.starts_with(&format!("{}: line 5: YAML syntax error: ", file.display())), "{}", run.stderr);
}

#[test]
fn a_file_without_karpenter_objects_is_valid() {
    let file =
        temp_file("deploy.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 1}\n");
    let run = kerf_validate(std::slice::from_ref(&file));
    std::fs::remove_file(&file).unwrap();
    assert_eq!(run.code, 0);
    assert_eq!(run.stdout, format!("{}: ok (0 NodePool, 0 NodeClaim, 0 EC2NodeClass)\n", file.display()));
}

#[test]
fn no_file_argument_is_a_usage_error() {
    let run = kerf_validate(&[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("FILE"), "{}", run.stderr);
}

#[test]
fn a_missing_required_field_is_one_problem_and_the_rest_of_the_object_is_still_checked() {
    let file = fixture_dir("broken").join("np-missing-required-field-keeps-other-problems.yaml");
    let run = kerf_validate(std::slice::from_ref(&file));
    assert_eq!(run.code, 2);
    let p = format!("{}: NodePool/np-missing-required-field-keeps-other-problems: ", file.display());
    let expected = [
        format!("{p}spec.template.spec.nodeClassRef.name: required"),
        format!("{p}spec.template.spec.requirements[0].key: label \"kubernetes.io/hostname\" is restricted"),
        format!(
            "{p}spec.template.spec.requirements[1].values: requirements with operator 'In' must have a value defined"
        ),
        format!("{p}spec.weight: must be between 1 and 100, got 0"),
    ];
    assert_eq!(run.stderr.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn a_list_document_and_a_kindless_karpenter_document_exit_2_while_other_groups_are_skipped() {
    let file = temp_file(
        "shapes.yaml",
        "- just\n- a list\n---\napiVersion: karpenter.sh/v1\nmetadata: {name: k}\n---\n\
         apiVersion: example.com/v1\nmetadata: {name: other}\n",
    );
    let run = kerf_validate(std::slice::from_ref(&file));
    std::fs::remove_file(&file).unwrap();
    assert_eq!(run.code, 2);
    let f = file.display();
    assert_eq!(
        run.stderr.lines().collect::<Vec<_>>(),
        [
            format!("{f}: <no kind>/<unnamed>: document must be a mapping (object), got a list"),
            format!("{f}: <no kind>/k: kind: required (NodePool, NodeClaim or EC2NodeClass)"),
        ]
    );
}
