//! `kerf serve` with a CustomResourceDefinition applied by kubectl (a reduced one of Kueue's
//! shape, tests/fixtures/crd): the kind is served as on a real cluster (discovery, short name
//! and category, create/get/watch, status subresource, printer columns, schema defaults and
//! value checks, `kubectl explain`, strict field validation, a second served version) until the
//! CRD is deleted, which deletes its objects. `kubectl explain` of built-in and kerf's kinds reads the
//! OpenAPI v3 documents too.

mod common;

use std::io::Read;
use std::process::Stdio;

use common::*;

const CRD: &str = "clusterqueues.kueue.x-k8s.io";

const QUEUE: &str = "apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: team-a
spec:
  cohort: all
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default
      resources:
      - name: cpu
        nominalQuota: 9
      - name: memory
        nominalQuota: 36Gi
";

fn header(table: &str) -> Vec<String> {
    table.lines().next().unwrap_or("").split_whitespace().map(str::to_string).collect()
}

#[test]
fn a_crd_applied_with_kubectl_serves_its_kind_until_it_is_deleted() {
    let s = Served::start("crds", &["--controllers", "none"]);
    let crd = repo_file(&format!("crates/kerf/tests/fixtures/crd/{CRD}.yaml"));
    let applied = kubectl_ok(&s, &["apply", "-f", crd.to_str().unwrap()]);
    assert_eq!(applied.trim(), format!("customresourcedefinition.apiextensions.k8s.io/{CRD} created"));
    kubectl_ok(&s, &["wait", "--for", "condition=established", "--timeout=10s", &format!("crd/{CRD}")]);
    assert!(kubectl_ok(&s, &["get", "crds", "-o", "name"]).contains(CRD));

    let mut watch = kubectl_cmd(&s)
        .args(["get", "clusterqueues", "-w", "--output-watch-events", "--no-headers"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");

    let queue = write(&s.dir, "queue.yaml", QUEUE);
    let created = kubectl_ok(&s, &["create", "-f", queue.to_str().unwrap()]);
    assert_eq!(created.trim(), "clusterqueue.kueue.x-k8s.io/team-a created");
    // The schema's default is filled in, and the short name and category find the object.
    assert_eq!(kubectl_ok(&s, &["get", "cq", "team-a", "-o", "jsonpath={.spec.queueingStrategy}"]), "BestEffortFIFO");
    assert_eq!(kubectl_ok(&s, &["get", "kueue", "-o", "name"]).trim(), "clusterqueue.kueue.x-k8s.io/team-a");

    // The status subresource: written there, not through the main resource.
    kubectl_ok(
        &s,
        &[
            "patch",
            "cq",
            "team-a",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"pendingWorkloads":3,"conditions":[{"type":"Active","status":"True"}]}}"#,
        ],
    );
    kubectl_ok(&s, &["patch", "cq", "team-a", "--type=merge", "-p", r#"{"status":{"pendingWorkloads":9}}"#]);
    let table = kubectl_ok(&s, &["get", "clusterqueues", "-o", "wide"]);
    assert_eq!(header(&table), ["NAME", "COHORT", "STRATEGY", "PENDING", "WORKLOADS", "ACTIVE", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..5], ["team-a", "all", "BestEffortFIFO", "3", "True"], "{table}");

    // Served at its second version too, the same object.
    let other = kubectl_ok(
        &s,
        &["get", "clusterqueues.v1alpha1.kueue.x-k8s.io", "team-a", "-o", "jsonpath={.apiVersion} {.spec.cohort}"],
    );
    assert_eq!(other, "kueue.x-k8s.io/v1alpha1 all");

    // kubectl explain reads the CRD's schema; strict validation refuses a field it lacks.
    let explained = kubectl_ok(&s, &["explain", "clusterqueue.spec.queueingStrategy"]);
    assert!(explained.contains("queueingStrategy indicates the queueing strategy"), "{explained}");
    assert!(explained.contains("BestEffortFIFO"), "the enum: {explained}");
    let typo = write(&s.dir, "typo.yaml", &QUEUE.replace("team-a", "team-b").replace("cohort: all", "cohortt: all"));
    let out = kubectl(&s, &["apply", "--validate=strict", "-f", typo.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(r#"ClusterQueue in version "v1beta1" cannot be handled as a ClusterQueue: strict decoding error: unknown field "spec.cohortt""#),
        "{err}"
    );
    // Values are checked against the schema, in the API server's words.
    let bad = write(
        &s.dir,
        "bad.yaml",
        &QUEUE.replace("team-a", "team-b").replace("cohort: all", "cohort: all\n  queueingStrategy: Sometimes"),
    );
    let out = kubectl(&s, &["create", "-f", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"The ClusterQueue "team-b" is invalid: spec.queueingStrategy: Unsupported value: "Sometimes": supported values: "StrictFIFO", "BestEffortFIFO""#),
        "{err}"
    );
    let out = kubectl(&s, &["get", "cq", "team-b"]);
    assert!(!out.status.success(), "nothing was created");
    // A patch is checked too, and a server-side apply gets the defaults.
    let out =
        kubectl(&s, &["patch", "cq", "team-a", "--type=merge", "-p", r#"{"spec":{"queueingStrategy":"Sometimes"}}"#]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(r#"spec.queueingStrategy: Unsupported value: "Sometimes""#), "{err}");
    let applied = write(&s.dir, "applied.yaml", &QUEUE.replace("team-a", "team-c"));
    kubectl_ok(&s, &["apply", "--server-side", "-f", applied.to_str().unwrap()]);
    assert_eq!(kubectl_ok(&s, &["get", "cq", "team-c", "-o", "jsonpath={.spec.queueingStrategy}"]), "BestEffortFIFO");
    kubectl_ok(&s, &["delete", "cq", "team-c"]);

    let deleted = kubectl_ok(&s, &["delete", "crd", CRD]);
    assert!(deleted.contains("deleted"), "{deleted}");
    eventually(10, "the kind to go from discovery", || {
        let out = kubectl(&s, &["get", "--raw", "/apis/kueue.x-k8s.io/v1beta1"]);
        (!out.status.success()).then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let _ = watch.kill();
    let mut seen = String::new();
    watch.stdout.take().expect("watch stdout").read_to_string(&mut seen).expect("watch output");
    let _ = watch.wait();
    let events: Vec<String> =
        seen.lines().map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(events.first().map(String::as_str), Some("ADDED team-a"), "{seen}");
    assert!(events.iter().any(|e| e == "MODIFIED team-a"), "{seen}");
    assert_eq!(
        events.last().map(String::as_str),
        Some("DELETED team-a"),
        "the CRD's deletion deletes its objects: {seen}"
    );
}

#[test]
fn kubectl_explain_and_strict_validation_read_the_schemas_of_built_in_and_kerfs_kinds() {
    let s = Served::start("explain", &["--controllers", "none"]);
    let containers = kubectl_ok(&s, &["explain", "pods.spec.containers"]);
    assert!(containers.contains("List of containers belonging to the pod."), "{containers}");
    assert!(containers.contains("imagePullPolicy\t<string>"), "{containers}");
    let disruption = kubectl_ok(&s, &["explain", "nodepool.spec.disruption"]);
    assert!(disruption.contains("GROUP:      karpenter.sh"), "{disruption}");
    for field in ["budgets\t<[]Object>", "consolidateAfter\t<string>", "consolidationPolicy\t<string>"] {
        assert!(disruption.contains(field), "{field}: {disruption}");
    }
    let recursive = kubectl_ok(&s, &["explain", "configmap", "--recursive"]);
    assert!(recursive.contains("binaryData\t<map[string]string>"), "{recursive}");

    let pod = write(
        &s.dir,
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: nginx\n    imagePullPolicyy: Always\n",
    );
    let out = kubectl(&s, &["apply", "--validate=strict", "-f", pod.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagePullPolicyy""#),
        "{err}"
    );
    // With --validate=warn the field is dropped and named in a warning.
    let out = kubectl(&s, &["apply", "--validate=warn", "-f", pod.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains(r#"Warning: unknown field "spec.containers[0].imagePullPolicyy""#),
        "{err}"
    );
    let got = kubectl_ok(&s, &["get", "pod", "p", "-o", "jsonpath={.spec.containers[0]}"]);
    assert!(got.contains("nginx") && !got.contains("imagePullPolicyy"), "{got}");
}
