//! `kubectl apply --server-side` against `kerf serve`: every kind of the examples' manifests is
//! applied (created on the first apply), a re-apply changes nothing, a second field manager
//! changing a field the first one owns gets the API server's 409 naming the field and the
//! manager, `--force-conflicts` takes the field over, and a field dropped from the applied
//! configuration is removed unless another manager owns it.

mod common;

use std::collections::BTreeMap;

use common::*;

/// The manifests applied: together they hold every kind the examples use.
const MANIFESTS: &[&str] = &[
    "examples/manifests/default-nodepool.yaml",
    "examples/manifests/inflate.yaml",
    "examples/manifests/buffers/burst-buffer.yaml",
    "examples/manifests/daemonset-overhead/fluent-bit.yaml",
    "examples/manifests/scale/pdbs.yaml",
    "examples/manifests/pod-eni/manifests.yaml",
];

const NODE_CLAIM: &str = "apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: manual
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
";

/// Every object's `kind/name` and resourceVersion.
fn versions(s: &Served) -> BTreeMap<String, String> {
    let kinds =
        "nodepools,ec2nodeclasses,nodeclaims,capacitybuffers,deployments,daemonsets,poddisruptionbudgets,podtemplates";
    let out = kubectl_ok(
        s,
        &[
            "get",
            kinds,
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name} {.metadata.resourceVersion}{\"\\n\"}{end}",
        ],
    );
    out.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn apply(s: &Served, file: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["apply", "--server-side", "-f", file];
    args.extend_from_slice(extra);
    kubectl(s, &args)
}

#[test]
fn every_example_kind_applies_server_side_and_a_reapply_changes_nothing() {
    let s = Served::start("ssa-examples", &["--controllers", "none"]);
    let claim = write(&s.dir, "nodeclaim.yaml", NODE_CLAIM);
    let mut files: Vec<String> = MANIFESTS.iter().map(|m| repo_file(m).to_string_lossy().into_owned()).collect();
    files.push(claim.to_string_lossy().into_owned());
    for f in &files {
        let out = apply(&s, f, &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{f}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.lines().all(|l| l.ends_with(" serverside-applied")), "{f}: {text}");
    }
    let first = versions(&s);
    for kind in ["NodePool", "EC2NodeClass", "NodeClaim", "CapacityBuffer", "Deployment", "DaemonSet"] {
        assert!(first.keys().any(|k| k.starts_with(&format!("{kind}/"))), "{kind} applied: {first:?}");
    }
    for f in &files {
        assert!(apply(&s, f, &[]).status.success(), "{f} again");
    }
    assert_eq!(versions(&s), first, "a re-apply writes nothing");
    let managers = kubectl_ok(
        &s,
        &[
            "get",
            "nodepool",
            "default",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].operation}",
        ],
    );
    assert_eq!(managers, "Apply");
}

#[test]
fn a_second_manager_gets_a_conflict_naming_the_field_until_it_forces() {
    let s = Served::start("ssa-conflict", &["--controllers", "none"]);
    let pool = repo_file("examples/manifests/default-nodepool.yaml");
    let pool = pool.to_str().expect("utf-8 path");
    assert!(apply(&s, pool, &[]).status.success());
    let text = std::fs::read_to_string(pool).expect("manifest").replace("consolidateAfter: 1m", "consolidateAfter: 5m");
    let changed = write(&s.dir, "changed.yaml", &text);
    let changed = changed.to_str().expect("utf-8 path");

    let out = apply(&s, changed, &["--field-manager=platform"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.disruption.consolidateAfter"#),
        "{err}"
    );
    let after = "jsonpath={.spec.disruption.consolidateAfter}";
    assert_eq!(kubectl_ok(&s, &["get", "nodepool", "default", "-o", after]), "1m0s", "nothing written");

    let out = apply(&s, changed, &["--field-manager=platform", "--force-conflicts"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(kubectl_ok(&s, &["get", "nodepool", "default", "-o", after]), "5m0s");
    // Now the first manager is the one in conflict.
    let err = String::from_utf8_lossy(&apply(&s, pool, &[]).stderr).into_owned();
    assert!(err.contains(r#"conflict with "platform": .spec.disruption.consolidateAfter"#), "{err}");

    // A field written by another verb is that writer's: kubectl label, then an apply of it.
    kubectl_ok(&s, &["label", "nodepool", "default", "team=blue"]);
    let labelled = text.replacen("name: default\n", "name: default\n  labels:\n    team: red\n", 1);
    let labelled = write(&s.dir, "labelled.yaml", &labelled);
    let err = String::from_utf8_lossy(&apply(&s, labelled.to_str().unwrap(), &["--field-manager=platform"]).stderr)
        .into_owned();
    assert!(err.contains(r#"conflict with "kubectl-label" using karpenter.sh/v1: .metadata.labels.team"#), "{err}");
}

#[test]
fn a_field_dropped_from_the_applied_configuration_is_removed_unless_another_manager_owns_it() {
    let s = Served::start("ssa-remove", &["--controllers", "none"]);
    let config = |labels: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {{{labels}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers:\n      - {{name: web, image: nginx}}\n"
        )
    };
    let both = write(&s.dir, "both.yaml", &config("a: one, b: two"));
    assert!(apply(&s, both.to_str().unwrap(), &[]).status.success());
    let shared = write(
        &s.dir,
        "shared.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {b: two}\n",
    );
    assert!(apply(&s, shared.to_str().unwrap(), &["--field-manager=other"]).status.success());
    let only_a = write(&s.dir, "a.yaml", &config("a: one"));
    assert!(apply(&s, only_a.to_str().unwrap(), &[]).status.success());
    let labels = "jsonpath={.metadata.labels}";
    assert_eq!(kubectl_ok(&s, &["get", "deployment", "web", "-o", labels]), r#"{"a":"one","b":"two"}"#, "b is shared");
    let none = write(&s.dir, "none.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n");
    assert!(apply(&s, none.to_str().unwrap(), &["--field-manager=other"]).status.success());
    assert_eq!(kubectl_ok(&s, &["get", "deployment", "web", "-o", labels]), r#"{"a":"one"}"#, "b is nobody's");
}
