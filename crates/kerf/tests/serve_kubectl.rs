//! `kerf serve` driven by the installed kubectl: manifests created with `kubectl create -f`,
//! pods running on nodes kerf launched, server-side printer columns, describe, scale, label,
//! annotate, taint, merge / JSON patches (with a resourceVersion precondition), delete, watches,
//! Kubernetes `Status` errors for bad requests, and node readiness (a Node created not Ready is
//! tainted, and pods bound to it start once it is Ready).

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::process::Stdio;

use common::*;

fn running_pods(s: &Served) -> Vec<String> {
    kubectl_ok(s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "name"])
        .lines()
        .map(str::to_string)
        .collect()
}

fn header(table: &str) -> Vec<String> {
    table.lines().next().unwrap_or("").split_whitespace().map(str::to_string).collect()
}

#[test]
fn kubectl_creates_karpenter_objects_and_a_deployment_whose_pods_run_on_nodes_kerf_launched() {
    let s = Served::start("e2e", &["--speed", "20"]);
    // A watch started before anything exists sees every pod come and go.
    let mut watch = kubectl_cmd(&s)
        .args(["get", "pods", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");

    let created = kubectl_ok(
        &s,
        &[
            "create",
            "-f",
            repo_file("examples/manifests/default-nodepool.yaml").to_str().unwrap(),
            "-f",
            repo_file("examples/manifests/inflate.yaml").to_str().unwrap(),
        ],
    );
    for line in [
        "nodepool.karpenter.sh/default created",
        "ec2nodeclass.karpenter.k8s.aws/default created",
        "deployment.apps/inflate created",
    ] {
        assert!(created.contains(line), "{created}");
    }
    assert!(kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=3"]).contains("scaled"));
    let pods = eventually(120, "3 running inflate pods", || Some(running_pods(&s)).filter(|p| p.len() == 3));
    assert!(pods.iter().all(|p| p.starts_with("pod/inflate-")), "{pods:?}");
    let sets = kubectl_ok(&s, &["get", "replicasets", "-o", "name"]);
    assert!(sets.trim().starts_with("replicaset.apps/inflate-") && sets.lines().count() == 1, "{sets}");
    // The Deployment controller stand-in reports its status: kubectl's READY column.
    eventually(30, "deployment inflate READY 3/3", || {
        let t = kubectl_ok(&s, &["get", "deployment", "inflate"]);
        t.lines().nth(1).is_some_and(|row| row.split_whitespace().nth(1) == Some("3/3")).then_some(())
    });

    // Every pod is bound to a node of a NodeClaim kerf launched.
    let claim_nodes: BTreeSet<String> =
        kubectl_ok(&s, &["get", "nodeclaims", "-o", "jsonpath={.items[*].status.nodeName}"])
            .split_whitespace()
            .map(str::to_string)
            .collect();
    assert!(!claim_nodes.is_empty());
    let pod_nodes: BTreeSet<String> = kubectl_ok(&s, &["get", "pods", "-o", "jsonpath={.items[*].spec.nodeName}"])
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(pod_nodes.is_subset(&claim_nodes), "pods on {pod_nodes:?}, claims' nodes {claim_nodes:?}");

    // Printer columns, as Karpenter's CRDs declare them.
    let claims = kubectl_ok(&s, &["get", "nodeclaims"]);
    assert_eq!(header(&claims), ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"], "{claims}");
    let row: Vec<&str> = claims.lines().nth(1).unwrap().split_whitespace().collect();
    assert!(row[0].starts_with("default-") && row[2] == "spot" || row[2] == "on-demand", "{claims}");
    assert!(claim_nodes.contains(row[4]) && row[5] == "True", "{claims}");
    let pools = kubectl_ok(&s, &["get", "nodepools"]);
    assert_eq!(&header(&pools)[..2], ["NAME", "NODECLASS"], "{pools}");
    assert!(header(&pools).ends_with(&["READY".to_string(), "AGE".to_string()]), "{pools}");
    assert!(header(&pools).contains(&"NODES".to_string()), "{pools}");
    assert!(pools.lines().nth(1).unwrap().starts_with("default "), "{pools}");

    let described = kubectl_ok(&s, &["describe", "nodeclaim", row[0]]);
    assert!(
        described.contains(&format!("Name:         {}", row[0])) && described.contains("Provider ID:"),
        "{described}"
    );
    let described = kubectl_ok(&s, &["describe", "pod", pods[0].trim_start_matches("pod/")]);
    assert!(described.contains("Node:") && described.contains("Events:"), "{described}");
    assert!(described.contains("Nominated") && described.contains("karpenter"), "the pod's events: {described}");

    kubectl_ok(&s, &["label", "nodepool", "default", "team=blue"]);
    kubectl_ok(&s, &["annotate", "nodepool", "default", "owner=platform"]);
    kubectl_ok(&s, &["patch", "nodepool", "default", "--type=merge", "-p", r#"{"spec":{"weight":7}}"#]);
    let got = kubectl_ok(
        &s,
        &[
            "get",
            "nodepool",
            "default",
            "-o",
            "jsonpath={.metadata.labels.team} {.metadata.annotations.owner} {.spec.weight}",
        ],
    );
    assert_eq!(got, "blue platform 7");
    assert_eq!(
        kubectl_ok(&s, &["get", "nodepools", "-l", "team=blue", "-o", "name"]).trim(),
        "nodepool.karpenter.sh/default"
    );
    assert_eq!(kubectl_ok(&s, &["get", "nodepools", "-l", "team=red", "-o", "name"]).trim(), "");

    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=5"]);
    eventually(120, "5 running inflate pods", || Some(running_pods(&s)).filter(|p| p.len() == 5));

    assert!(kubectl_ok(&s, &["delete", "deployment", "inflate"]).contains("deleted"));
    eventually(60, "the Deployment's pods to be gone", || {
        kubectl_ok(&s, &["get", "pods", "-o", "name"]).trim().is_empty().then_some(())
    });

    let status = s.stop();
    assert!(status.success(), "kerf serve exit status on SIGTERM: {status}");
    let mut seen = String::new();
    let _ = watch.kill();
    watch.stdout.take().expect("watch stdout").read_to_string(&mut seen).expect("watch output");
    let _ = watch.wait();
    let added = seen.lines().filter(|l| l.starts_with("ADDED")).count();
    let deleted = seen.lines().filter(|l| l.starts_with("DELETED")).count();
    assert!(added >= 5 && deleted >= 5, "the watch saw {added} additions and {deleted} deletions:\n{seen}");
    assert!(seen.lines().any(|l| l.starts_with("MODIFIED")), "{seen}");
}

#[test]
fn bad_requests_get_kubernetes_status_errors_and_the_server_keeps_serving() {
    let s = Served::start("errors", &["--controllers", "none"]);
    let pools = "/apis/karpenter.sh/v1/nodepools";
    let json = "application/json";
    let pool = r#"{"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"a"},"spec":{"template":{"spec":{"nodeClassRef":{"group":"karpenter.k8s.aws","kind":"EC2NodeClass","name":"default"},"requirements":[]}}}}"#;

    for body in ["{", "not json", "[1,2", "\u{0}\u{1}", r#"{"metadata": 5}"#, "[]"] {
        let (code, text) = http(&s, "POST", pools, json, body);
        assert!(code == 400 || code == 422, "{body:?} -> {code} {text}");
        assert!(text.contains(r#""kind":"Status""#), "{text}");
    }
    let (code, text) = http(&s, "GET", "/apis/karpenter.sh/v1/nodepools/nope", "", "");
    assert_eq!(code, 404, "{text}");
    assert!(
        text.contains(r#""reason":"NotFound""#) && text.contains(r#"nodepools.karpenter.sh \"nope\" not found"#),
        "{text}"
    );

    assert_eq!(http(&s, "POST", pools, json, pool).0, 201);
    let (code, text) = http(&s, "POST", pools, json, pool);
    assert_eq!(code, 409, "{text}");
    assert!(text.contains(r#""reason":"AlreadyExists""#), "{text}");

    let stale = pool.replace(r#""name":"a"}"#, r#""name":"a","resourceVersion":"1"}"#);
    let (code, text) = http(&s, "PUT", &format!("{pools}/a"), json, &stale);
    assert_eq!(code, 409, "{text}");
    assert!(text.contains(r#""reason":"Conflict""#), "{text}");

    let bad_operator = pool
        .replace(r#""requirements":[]"#, r#""requirements":[{"key":"k","operator":"Sometimes","values":["x"]}]"#)
        .replace(r#""name":"a""#, r#""name":"b""#);
    let (code, text) = http(&s, "POST", pools, json, &bad_operator);
    assert_eq!(code, 422, "{text}");
    assert!(
        text.contains(r#""reason":"Invalid""#) && text.contains("spec.template.spec.requirements[0].operator"),
        "{text}"
    );
    let unknown_field =
        pool.replace(r#""spec":{"#, r#""spec":{"colour":"red","#).replace(r#""name":"a""#, r#""name":"c""#);
    // As the API server: refused under fieldValidation=Strict (what kubectl sends), dropped
    // with a warning by default.
    let (code, text) = http(&s, "POST", &format!("{pools}?fieldValidation=Strict"), json, &unknown_field);
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("strict decoding error: ") && text.contains(r#"unknown field \"spec.colour\""#), "{text}");
    let (code, text) = http(&s, "POST", pools, json, &unknown_field);
    assert_eq!(code, 201, "{text}");
    assert!(!text.contains("colour"), "{text}");

    let (code, text) = http(&s, "PATCH", &format!("{pools}/a"), "application/apply-patch+yaml", "spec: {}");
    assert_eq!(code, 400, "an apply names its field manager: {text}");
    assert!(text.contains("fieldManager"), "{text}");
    let (code, text) = http(&s, "PATCH", &format!("{pools}/a"), "application/x-unknown-patch", "{}");
    assert_eq!(code, 415, "{text}");
    let (code, text) = http(&s, "PATCH", &format!("{pools}/a"), "application/merge-patch+json", "{not json");
    assert_eq!(code, 400, "{text}");
    let (code, text) = http(
        &s,
        "PATCH",
        &format!("{pools}/a"),
        "application/json-patch+json",
        r#"[{"op":"replace","path":"/spec/nothing/here","value":1}]"#,
    );
    assert_eq!(code, 422, "{text}");
    let (code, _) = http(&s, "GET", "/apis/no.such/v1/things", "", "");
    assert_eq!(code, 404);
    let (code, text) = http(&s, "GET", "/api/v1/namespaces/default/pods?labelSelector=a%20in%20b", "", "");
    assert_eq!(code, 400, "{text}");

    let (code, text) = http(&s, "DELETE", &format!("{pools}/a?dryRun=All"), json, "");
    assert_eq!(code, 200, "a dry run is answered: {text}");
    assert_eq!(http(&s, "GET", &format!("{pools}/a"), "", "").0, 200, "and deletes nothing");
    let (code, text) = http(&s, "DELETE", &format!("{pools}/a?dryRun=Some"), json, "");
    assert_eq!(code, 422, "only dryRun=All is a dry run: {text}");
    // Delete with a failed precondition, then for real.
    let (code, text) = http(&s, "DELETE", &format!("{pools}/a"), json, r#"{"preconditions":{"uid":"someone-else"}}"#);
    assert_eq!(code, 409, "{text}");
    assert_eq!(http(&s, "DELETE", &format!("{pools}/a"), json, "").0, 200);
    // Still serving after all of that.
    assert_eq!(http(&s, "GET", "/version", "", "").0, 200);
    assert!(s.stop().success());
}

#[test]
fn serve_runs_a_scenarios_steps_on_its_clock_then_keeps_serving() {
    let s = Served::start("scenario", &[repo_file("examples/inflate.yaml").to_str().unwrap(), "--speed", "100"]);
    // inflate.yaml scales to 60 after 10s and waits 3m: about 2s of real time at 100x.
    eventually(120, "60 running inflate pods", || Some(running_pods(&s)).filter(|p| p.len() == 60));
    let deployments = kubectl_ok(&s, &["get", "deployments"]);
    assert!(deployments.lines().nth(1).is_some_and(|r| r.split_whitespace().nth(1) == Some("60/60")), "{deployments}");

    // A rolling restart through a strategic merge patch, followed to its end by kubectl.
    kubectl_ok(&s, &["rollout", "restart", "deployment", "inflate"]);
    let status = kubectl_ok(&s, &["rollout", "status", "deployment", "inflate", "--timeout=90s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    let sets = kubectl_ok(&s, &["get", "replicasets", "-o", "jsonpath={range .items[*]}{.spec.replicas} {end}"]);
    let mut sizes: Vec<&str> = sets.split_whitespace().collect();
    sizes.sort();
    assert_eq!(sizes, ["0", "60"], "the old revision scaled to 0, the new one to 60");

    // Draining a node evicts its pods through the Eviction API.
    let node = kubectl_ok(&s, &["get", "nodes", "-o", "name"]).lines().next().unwrap().to_string();
    let drained = kubectl_ok(&s, &["drain", &node, "--ignore-daemonsets", "--timeout=60s"]);
    assert!(drained.contains("cordoned") && drained.contains("drained"), "{drained}");
    // At 100x a drained node can be removed as empty before the next call; while it exists it is
    // cordoned.
    let nodes = kubectl(&s, &["get", &node]);
    if nodes.status.success() {
        let shown = String::from_utf8_lossy(&nodes.stdout);
        assert!(shown.contains("SchedulingDisabled"), "{shown}");
    } else {
        let err = String::from_utf8_lossy(&nodes.stderr);
        assert!(err.contains("NotFound"), "{err}");
    }
    assert!(s.stop().success());
}

const NOT_READY_NODE: &str = r#"apiVersion: v1
kind: Node
metadata:
  name: edge-1
  labels: {kubernetes.io/hostname: edge-1}
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "20"}
  allocatable: {cpu: "4", memory: 8Gi, pods: "20"}
"#;

const PODS_FOR_EDGE: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: bound-early
spec:
  nodeName: edge-1
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: waits-for-ready
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 100m}}}]
"#;

#[test]
fn a_pod_bound_to_a_node_before_kubectl_marks_it_ready_starts_once_it_is_ready() {
    let s = Served::start("readiness", &["--controllers", "none", "--speed", "20"]);
    let node = write(&s.dir, "node.yaml", NOT_READY_NODE);
    kubectl_ok(&s, &["create", "-f", node.to_str().unwrap()]);
    let taints = |s: &Served| kubectl_ok(s, &["get", "node", "edge-1", "-o", "jsonpath={.spec.taints}"]);
    assert!(taints(&s).contains(r#""key":"node.kubernetes.io/not-ready""#), "{}", taints(&s));
    let pods = write(&s.dir, "pods.yaml", PODS_FOR_EDGE);
    kubectl_ok(&s, &["create", "-f", pods.to_str().unwrap()]);
    // kube-scheduler leaves the free pod alone while the node is not Ready, in its own words.
    let reason = eventually(30, "waits-for-ready to be unschedulable", || {
        let m = kubectl_ok(
            &s,
            &[
                "get",
                "pod",
                "waits-for-ready",
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}"#,
            ],
        );
        (!m.is_empty()).then_some(m)
    });
    assert_eq!(reason, "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.");
    let bound = kubectl_ok(&s, &["get", "pod", "bound-early", "-o", "jsonpath={.spec.nodeName} {.status.phase}"]);
    assert!(bound.starts_with("edge-1") && !bound.contains("Running"), "{bound}");

    kubectl_ok(
        &s,
        &[
            "patch",
            "node",
            "edge-1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}"#,
        ],
    );
    let running = eventually(30, "both pods running on edge-1", || {
        let pods = running_pods(&s);
        (pods.len() == 2).then_some(pods)
    });
    assert_eq!(running, ["pod/bound-early", "pod/waits-for-ready"]);
    assert_eq!(
        kubectl_ok(&s, &["get", "pods", "-o", "jsonpath={.items[*].spec.nodeName}"]),
        "edge-1 edge-1",
        "the free pod went to the node once it was Ready"
    );
    assert!(!taints(&s).contains("not-ready"), "the taint is gone once the node is Ready: {}", taints(&s));
    assert!(s.stop().success());
}

#[test]
fn serve_rejects_a_bad_scenario_or_speed_with_exit_status_2() {
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["serve", "no-such-scenario.yaml", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run kerf serve");
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-scenario.yaml"));
    let speed = std::process::Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["serve", "--speed", "0", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run kerf serve");
    assert_eq!(speed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&speed.stderr).contains("--speed"));
}

#[test]
fn kubectl_scales_a_static_nodepool_through_its_scale_subresource_and_cannot_make_a_pool_static() {
    let s = Served::start(
        "static-pool",
        &[repo_file("examples/static-nodepool-fixed-count.yaml").to_str().unwrap(), "--speed", "100"],
    );
    let claims = |s: &Served| {
        kubectl_ok(s, &["get", "nodeclaims", "-l", "karpenter.sh/nodepool=fixed", "-o", "name"]).lines().count()
    };
    eventually(60, "the static pool's 6 nodeclaims", || (claims(&s) == 6).then_some(()));
    let out = kubectl_ok(&s, &["scale", "nodepool", "fixed", "--replicas=3"]);
    assert!(out.contains("nodepool.karpenter.sh/fixed scaled"), "{out}");
    eventually(60, "3 nodeclaims after scaling down", || (claims(&s) == 3).then_some(()));
    assert_eq!(kubectl_ok(&s, &["get", "nodepool", "fixed", "-o", "jsonpath={.spec.replicas}"]), "3");
    // A dynamic pool cannot become static, by scale or by patch.
    let elastic = write(
        &s.dir,
        "elastic.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: elastic}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
    );
    kubectl_ok(&s, &["create", "-f", elastic.to_str().unwrap()]);
    let out = kubectl(&s, &["scale", "nodepool", "elastic", "--replicas=2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a dynamic NodePool cannot become static"), "{err}");
    let out = kubectl(
        &s,
        &["patch", "nodepool", "fixed", "--type", "json", "-p", r#"[{"op":"remove","path":"/spec/replicas"}]"#],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a static NodePool cannot become dynamic"));
}

const PLAIN_NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: plain-1
  labels: {kubernetes.io/hostname: plain-1, team: blue}
status:
  conditions: [{type: Ready, status: "True", reason: KubeletReady}]
"#;

#[test]
fn kubectl_taints_labels_and_patches_a_node_where_null_deletes_lists_are_replaced_and_a_stale_version_conflicts() {
    let s = Served::start("patches", &["--controllers", "none"]);
    let node = write(&s.dir, "node.yaml", PLAIN_NODE);
    kubectl_ok(&s, &["create", "-f", node.to_str().unwrap()]);
    let get = |s: &Served, path: &str| kubectl_ok(s, &["get", "node", "plain-1", "-o", &format!("jsonpath={path}")]);

    kubectl_ok(&s, &["taint", "node", "plain-1", "dedicated=infra:NoSchedule"]);
    kubectl_ok(&s, &["label", "node", "plain-1", "team-", "tier=web"]);
    kubectl_ok(&s, &["annotate", "node", "plain-1", "owner=platform"]);
    assert_eq!(get(&s, "{.spec.taints[*].key}={.spec.taints[*].value}"), "dedicated=infra");
    assert_eq!(get(&s, "{.metadata.labels.team}|{.metadata.labels.tier}"), "|web", "team- removes the label");
    assert_eq!(get(&s, "{.metadata.annotations.owner}"), "platform");
    kubectl_ok(&s, &["taint", "node", "plain-1", "dedicated:NoSchedule-"]);
    assert_eq!(get(&s, "{.spec.taints}"), "");

    // A merge patch: null deletes a key, a nested object merges, a list is replaced whole.
    let two = r#"{"spec":{"taints":[{"key":"a","effect":"NoSchedule"},{"key":"b","effect":"NoExecute"}]}}"#;
    kubectl_ok(&s, &["patch", "node", "plain-1", "--type=merge", "-p", two]);
    let one = r#"{"metadata":{"annotations":{"owner":null},"labels":{"zone":"z1"}},"spec":{"taints":[{"key":"c","effect":"NoSchedule"}]}}"#;
    kubectl_ok(&s, &["patch", "node", "plain-1", "--type=merge", "-p", one]);
    assert_eq!(get(&s, "{.spec.taints[*].key}"), "c");
    assert_eq!(get(&s, "{.metadata.annotations.owner}"), "");
    assert_eq!(get(&s, "{.metadata.labels.tier} {.metadata.labels.zone}"), "web z1");
    assert_eq!(get(&s, "{.status.conditions[0].type}"), "Ready", "status is untouched by a patch of the node");

    // A patch naming a resourceVersion applies to that version only.
    let rv = get(&s, "{.metadata.resourceVersion}");
    let stale = kubectl(
        &s,
        &[
            "patch",
            "node",
            "plain-1",
            "--type=merge",
            "-p",
            r#"{"metadata":{"resourceVersion":"1","labels":{"x":"y"}}}"#,
        ],
    );
    let err = String::from_utf8_lossy(&stale.stderr);
    assert!(!stale.status.success() && err.contains("the object has been modified"), "{err}");
    assert_eq!(get(&s, "{.metadata.labels.x}"), "");
    let current = format!(r#"{{"metadata":{{"resourceVersion":"{rv}","labels":{{"x":"y"}}}}}}"#);
    kubectl_ok(&s, &["patch", "node", "plain-1", "--type=merge", "-p", &current]);
    assert_eq!(get(&s, "{.metadata.labels.x}"), "y");

    // A JSON patch, sent as the real API server takes it, on the node and on its status.
    let ops = r#"[{"op":"add","path":"/spec/taints/-","value":{"key":"d","effect":"NoExecute"}},{"op":"remove","path":"/metadata/labels/x"}]"#;
    let (code, text) = http(&s, "PATCH", "/api/v1/nodes/plain-1", "application/json-patch+json", ops);
    assert_eq!(code, 200, "{text}");
    assert_eq!(get(&s, "{.spec.taints[*].key} {.metadata.labels.x}"), "c d ");
    let failing =
        r#"[{"op":"test","path":"/metadata/labels/tier","value":"db"},{"op":"remove","path":"/spec/taints"}]"#;
    let (code, text) = http(&s, "PATCH", "/api/v1/nodes/plain-1", "application/json-patch+json", failing);
    assert_eq!(code, 422, "a failing test operation applies nothing: {text}");
    assert_eq!(get(&s, "{.spec.taints[*].key}"), "c d");
    let ops = r#"[{"op":"replace","path":"/status/conditions/0/reason","value":"Patched"}]"#;
    let (code, text) = http(&s, "PATCH", "/api/v1/nodes/plain-1/status", "application/json-patch+json", ops);
    assert_eq!(code, 200, "{text}");
    assert_eq!(get(&s, "{.status.conditions[0].reason}"), "Patched");
    assert!(s.stop().success());
}
