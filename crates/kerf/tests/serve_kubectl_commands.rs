//! The kubectl commands a new user types first, run against `kerf serve` and each checked for the
//! result it has on a real cluster: the generators (`create deployment|namespace|pdb`, `run`),
//! `set image|resources`, `rollout status|history|undo|restart`, `wait --for=condition`, `diff`,
//! `edit`, `label`, `annotate`, client-side `apply`, server-side dry runs, `cordon`, `uncordon`,
//! `drain` (evictions honouring a PodDisruptionBudget), `expose`, `auth can-i`, `delete
//! namespace` (docs/playground.md, "Deleting a namespace") and `get` / `describe` in every output
//! format (docs/playground.md, "What works with kubectl").

mod common;

use common::*;

/// A served cluster at 20x with the example NodePool, so pods get nodes and run.
fn with_pool(test: &str) -> Served {
    let s = Served::start(test, &["--speed", "20"]);
    kubectl_ok(&s, &["create", "-f", repo_file("examples/manifests/default-nodepool.yaml").to_str().unwrap()]);
    s
}

fn jsonpath(s: &Served, what: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    let format = format!("jsonpath={path}");
    args.extend_from_slice(&["-o", &format]);
    kubectl_ok(s, &args)
}

/// kubectl's stderr and stdout together, and whether it succeeded.
fn run(s: &Served, args: &[&str]) -> (bool, String) {
    let out = kubectl(s, args);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn header(table: &str) -> Vec<&str> {
    table.lines().next().unwrap_or("").split_whitespace().collect()
}

#[test]
fn generators_create_what_a_cluster_creates_and_get_and_describe_show_it_in_every_format() {
    let s = with_pool("cmd-create");
    assert_eq!(
        kubectl_ok(&s, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]).trim(),
        "deployment.apps/web created"
    );
    assert_eq!(kubectl_ok(&s, &["create", "namespace", "team-a"]).trim(), "namespace/team-a created");
    let pdb = kubectl_ok(&s, &["create", "pdb", "web", "--selector=app=web", "--min-available=1"]);
    assert_eq!(pdb.trim(), "poddisruptionbudget.policy/web created");
    assert_eq!(kubectl_ok(&s, &["run", "one", "--image=busybox", "--labels=app=one"]).trim(), "pod/one created");

    let met = kubectl_ok(&s, &["wait", "--for=condition=Available", "deployment/web", "--timeout=120s"]);
    assert_eq!(met.trim(), "deployment.apps/web condition met");
    assert_eq!(
        kubectl_ok(&s, &["wait", "--for=condition=Ready", "pod/one", "--timeout=60s"]).trim(),
        "pod/one condition met"
    );

    // -o wide: kubectl's wide columns, filled in.
    let wide = kubectl_ok(&s, &["get", "deployment", "web", "-o", "wide"]);
    assert_eq!(header(&wide), ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]);
    let row: Vec<&str> = wide.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(
        (row[1], row[2], row[3], row[5], row[6], row[7]),
        ("2/2", "2", "2", "nginx", "nginx", "app=web"),
        "{wide}"
    );
    let pods = kubectl_ok(&s, &["get", "pods", "-o", "wide"]);
    let columns =
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"];
    assert_eq!(header(&pods), columns, "{pods}");
    let nodes = jsonpath(&s, &["nodes"], "{.items[*].metadata.name}");
    let mut ips = std::collections::BTreeSet::new();
    for row in pods.lines().skip(1) {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            (cells.len(), cells[1], cells[2], cells[7], cells[8]),
            (9, "1/1", "Running", "<none>", "<none>"),
            "{row}"
        );
        assert!(nodes.split_whitespace().any(|n| n == cells[6]), "{row} is on a node of {nodes}");
        // Each pod has an address of its own, from the pods' range (docs/playground.md).
        assert!(cells[5].starts_with("100.64.") && ips.insert(cells[5]), "{row}");
    }
    // Nodes report their address: the one their EC2-style name carries.
    let wide_nodes = kubectl_ok(&s, &["get", "nodes", "-o", "wide"]);
    assert_eq!(header(&wide_nodes)[5..7], ["INTERNAL-IP", "EXTERNAL-IP"], "{wide_nodes}");
    for row in wide_nodes.lines().skip(1) {
        let name = row.split_whitespace().next().unwrap_or("");
        let host = name.split('.').next().and_then(|h| h.strip_prefix("ip-")).map(|h| h.replace('-', "."));
        assert!(host.is_some_and(|ip| row.split_whitespace().any(|c| c == ip)), "{row}");
    }
    // A pod on the host's network has its node's address; the pod's hostIP is its node's.
    let host = r#"{"spec":{"hostNetwork":true}}"#;
    kubectl_ok(&s, &["run", "host", "--image=busybox", "--overrides", host]);
    kubectl_ok(&s, &["wait", "--for=condition=Ready", "pod/host", "--timeout=60s"]);
    let seen = jsonpath(&s, &["pod", "host"], "{.spec.nodeName} {.status.podIP} {.status.hostIP}");
    let [node, pod_ip, host_ip] = seen.split_whitespace().collect::<Vec<_>>()[..] else { panic!("{seen}") };
    let node_ip = jsonpath(&s, &["node", node], r#"{.status.addresses[?(@.type=="InternalIP")].address}"#);
    assert_eq!((pod_ip, host_ip), (node_ip.as_str(), node_ip.as_str()), "{seen}");
    // -o yaml, -o json, -o jsonpath.
    let yaml = kubectl_ok(&s, &["get", "deployment", "web", "-o", "yaml"]);
    assert!(yaml.contains("kind: Deployment") && yaml.contains("deployment.kubernetes.io/revision: \"1\""), "{yaml}");
    let json: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&s, &["get", "deployment", "web", "-o", "json"])).expect("-o json");
    let available = json["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == "Available"));
    assert_eq!(
        available.map(|c| (c["status"].clone(), c["reason"].clone())),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(jsonpath(&s, &["pods", "-l", "app=web"], "{.items[*].status.phase}"), "Running Running");
    assert_eq!(
        jsonpath(&s, &["namespace", "team-a"], "{.status.phase} {.metadata.labels.kubernetes\\.io/metadata\\.name}"),
        "Active team-a"
    );

    let described = kubectl_ok(&s, &["describe", "deployment", "web"]);
    for line in ["2 desired | 2 updated | 2 total | 2 available | 0 unavailable", "NewReplicaSet:   web-"] {
        assert!(described.contains(line), "{line:?} in:\n{described}");
    }
    assert!(
        described
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Available", "True", "MinimumReplicasAvailable"]),
        "{described}"
    );
    // The budget's status, as the disruption controller keeps it: two healthy pods, one may go.
    let budget = kubectl_ok(&s, &["describe", "pdb", "web"]);
    for line in ["Min available:  1", "Allowed disruptions:  1", "Current:              2", "Desired:              1"] {
        assert!(budget.contains(line), "{line:?} in:\n{budget}");
    }
    let pdbs = kubectl_ok(&s, &["get", "pdb", "web"]);
    // MIN AVAILABLE 1, MAX UNAVAILABLE empty, ALLOWED DISRUPTIONS 1.
    let row: Vec<&str> = pdbs.lines().nth(1).unwrap_or("").split_whitespace().collect();
    assert_eq!(row[..3], ["web", "1", "1"], "{pdbs}");
    let field = |text: &str, name: &str, value: &str| {
        text.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == [name, value])
    };
    assert!(field(&kubectl_ok(&s, &["describe", "namespace", "team-a"]), "Status:", "Active"));
    assert!(field(&kubectl_ok(&s, &["describe", "pod", "one"]), "Status:", "Running"));
    assert!(s.stop().success());
}

#[test]
fn set_and_rollout_change_a_deployment_and_undo_goes_back_a_revision_as_on_a_cluster() {
    let s = with_pool("cmd-rollout");
    kubectl_ok(&s, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]);
    let rolled = |s: &Served| kubectl_ok(s, &["rollout", "status", "deployment", "web", "--timeout=120s"]);
    assert!(rolled(&s).ends_with("deployment \"web\" successfully rolled out\n"), "{}", rolled(&s));

    let out = kubectl_ok(&s, &["set", "resources", "deployment", "web", "-c=nginx", "--limits=cpu=200m,memory=512Mi"]);
    assert_eq!(out.trim(), "deployment.apps/web resource requirements updated");
    assert_eq!(
        kubectl_ok(&s, &["set", "image", "deployment/web", "nginx=nginx:1.27"]).trim(),
        "deployment.apps/web image updated"
    );
    // The image's strategic merge patch names the container alone: its limits stay.
    let template = "{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].resources.limits.cpu}";
    assert_eq!(jsonpath(&s, &["deployment", "web"], template), "nginx:1.27 200m");
    rolled(&s);
    let history = |s: &Served| -> Vec<String> {
        kubectl_ok(s, &["rollout", "history", "deployment", "web"])
            .lines()
            .filter_map(|l| l.split_whitespace().next().filter(|w| w.parse::<u32>().is_ok()).map(str::to_string))
            .collect()
    };
    assert_eq!(history(&s), ["1", "2", "3"]);
    // The Deployment's change-cause goes to its current ReplicaSet: rollout history's column.
    kubectl_ok(&s, &["annotate", "deployment", "web", "kubernetes.io/change-cause=nginx 1.27"]);
    let cause = eventually(30, "the change-cause in the history", || {
        let h = kubectl_ok(&s, &["rollout", "history", "deployment", "web"]);
        h.lines().find(|l| l.starts_with("3 ")).filter(|l| l.contains("nginx 1.27")).map(str::to_string)
    });
    assert_eq!(cause.split_whitespace().collect::<Vec<_>>(), ["3", "nginx", "1.27"]);

    assert_eq!(kubectl_ok(&s, &["rollout", "undo", "deployment", "web"]).trim(), "deployment.apps/web rolled back");
    rolled(&s);
    assert_eq!(jsonpath(&s, &["deployment", "web"], template), "nginx 200m", "revision 2's template");
    assert_eq!(history(&s), ["1", "3", "4"], "revision 2 came back as 4");
    assert_eq!(
        jsonpath(&s, &["deployment", "web"], "{.metadata.annotations.deployment\\.kubernetes\\.io/revision}"),
        "4"
    );
    let out = kubectl_ok(&s, &["rollout", "undo", "deployment", "web", "--to-revision=1"]);
    assert_eq!(out.trim(), "deployment.apps/web rolled back");
    rolled(&s);
    assert_eq!(jsonpath(&s, &["deployment", "web"], template), "nginx ");

    assert_eq!(kubectl_ok(&s, &["rollout", "restart", "deployment", "web"]).trim(), "deployment.apps/web restarted");
    let stamp = jsonpath(
        &s,
        &["deployment", "web"],
        "{.spec.template.metadata.annotations.kubectl\\.kubernetes\\.io/restartedAt}",
    );
    assert!(!stamp.is_empty());
    rolled(&s);
    // One ReplicaSet holds the pods; the earlier revisions are kept scaled to 0.
    let sizes = jsonpath(&s, &["replicasets"], "{range .items[*]}{.spec.replicas} {end}");
    let mut sizes: Vec<&str> = sizes.split_whitespace().collect();
    sizes.sort();
    assert_eq!(sizes, ["0", "0", "0", "2"]);
    assert_eq!(jsonpath(&s, &["pods", "-l", "app=web"], "{.items[*].status.phase}"), "Running Running");
    assert!(s.stop().success());
}

const WEB: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, team: blue}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: nginx}]
";

#[test]
fn diff_and_server_dry_runs_show_a_change_without_making_it_and_edit_label_annotate_do() {
    let s = Served::start("cmd-diff", &["--controllers", "none"]);
    kubectl_ok(&s, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]);
    let manifest = write(&s.dir, "web.yaml", WEB);
    let manifest = manifest.to_str().expect("utf-8 path");
    let replicas = |s: &Served| jsonpath(s, &["deployment", "web"], "{.spec.replicas} {.metadata.generation}");
    let before = replicas(&s);
    assert_eq!(before, "2 1");

    // kubectl diff: a server-side dry run; exit status 1 when there are differences.
    let out = kubectl(&s, &["diff", "-f", manifest]);
    let diff = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{diff}{}", String::from_utf8_lossy(&out.stderr));
    for line in ["-  replicas: 2", "+  replicas: 3", "+    team: blue", "-  generation: 1", "+  generation: 2"] {
        assert!(diff.lines().any(|l| l == line), "{line:?} in:\n{diff}");
    }
    let out = kubectl_ok(&s, &["apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", manifest]);
    assert_eq!(out.trim(), "deployment.apps/web serverside-applied (server dry run)");
    assert_eq!(
        kubectl_ok(&s, &["apply", "--dry-run=server", "-f", manifest]).trim(),
        "deployment.apps/web configured (server dry run)"
    );
    let out = kubectl_ok(&s, &["scale", "deployment", "web", "--replicas=5", "--dry-run=server"]);
    assert_eq!(out.trim(), "deployment.apps/web scaled (server dry run)");
    let out = kubectl_ok(&s, &["delete", "deployment", "web", "--dry-run=server"]);
    assert_eq!(out.trim(), "deployment.apps \"web\" deleted (server dry run)");
    assert_eq!(
        kubectl_ok(&s, &["create", "namespace", "dry", "--dry-run=server"]).trim(),
        "namespace/dry created (server dry run)"
    );
    assert_eq!(replicas(&s), before, "no dry run changed the Deployment");
    let (ok, err) = run(&s, &["get", "namespace", "dry"]);
    assert!(!ok && err.contains("namespaces \"dry\" not found"), "{err}");

    // An editor that changes nothing: nothing written.
    let out = kubectl_cmd(&s).args(["edit", "deployment", "web"]).env("EDITOR", "true").output().expect("kubectl edit");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "Edit cancelled, no changes made.");
    assert_eq!(replicas(&s), before);

    // An editor that changes a field: the change is sent as a strategic merge patch.
    let out = kubectl_cmd(&s)
        .args(["edit", "deployment", "web"])
        .env("EDITOR", "sed -i -e 's/^  replicas: 2$/  replicas: 4/'")
        .output()
        .expect("kubectl edit");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "deployment.apps/web edited");
    assert_eq!(replicas(&s), "4 2");

    assert_eq!(kubectl_ok(&s, &["label", "deployment", "web", "tier=front"]).trim(), "deployment.apps/web labeled");
    assert_eq!(kubectl_ok(&s, &["annotate", "deployment", "web", "owner=me"]).trim(), "deployment.apps/web annotated");
    let (ok, err) = run(&s, &["label", "deployment", "web", "tier=back"]);
    assert!(!ok && err.contains("'tier' already has a value (front), and --overwrite is false"), "{err}");
    kubectl_ok(&s, &["label", "deployment", "web", "tier=back", "--overwrite"]);
    kubectl_ok(&s, &["annotate", "deployment", "web", "owner-"]);
    let meta = "{.metadata.labels.tier} {.metadata.annotations.owner}";
    assert_eq!(jsonpath(&s, &["deployment", "web"], meta), "back ");

    // Applied for real, the diff is empty.
    kubectl_ok(&s, &["apply", "--server-side", "--force-conflicts", "-f", manifest]);
    assert_eq!(replicas(&s), "3 3");
    let out = kubectl(&s, &["diff", "--server-side", "--force-conflicts", "-f", manifest]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stdout.is_empty());
    assert!(s.stop().success());
}

#[test]
fn cordon_uncordon_and_drain_evict_as_far_as_a_disruption_budget_allows() {
    let s = with_pool("cmd-drain");
    kubectl_ok(&s, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]);
    kubectl_ok(&s, &["wait", "--for=condition=Available", "deployment/web", "--timeout=120s"]);
    let node = jsonpath(&s, &["pods", "-l", "app=web"], "{.items[0].spec.nodeName}");
    let on_node = |s: &Served| {
        let nodes = jsonpath(s, &["pods", "-l", "app=web"], "{.items[*].spec.nodeName}");
        nodes.split_whitespace().filter(|n| *n == node).count()
    };
    let before = on_node(&s);

    assert_eq!(kubectl_ok(&s, &["cordon", &node]).trim(), format!("node/{node} cordoned"));
    assert!(kubectl_ok(&s, &["get", "node", &node]).contains("Ready,SchedulingDisabled"));
    assert_eq!(kubectl_ok(&s, &["uncordon", &node]).trim(), format!("node/{node} uncordoned"));
    assert_eq!(jsonpath(&s, &["node", &node], "{.spec.unschedulable}"), "");

    // Every pod is needed: each eviction is refused (429) and retried until the timeout.
    kubectl_ok(&s, &["create", "pdb", "web", "--selector=app=web", "--min-available=2"]);
    let (ok, out) = run(&s, &["drain", &node, "--ignore-daemonsets", "--timeout=8s"]);
    assert!(!ok, "{out}");
    assert!(out.contains("Cannot evict pod as it would violate the pod's disruption budget"), "{out}");
    assert!(out.contains("global timeout reached: 8s"), "{out}");
    assert_eq!(on_node(&s), before, "nothing evicted");
    kubectl_ok(&s, &["uncordon", &node]);

    // One may go: a server-side dry run evicts nothing and leaves the node schedulable.
    kubectl_ok(&s, &["patch", "pdb", "web", "--type=merge", "-p", r#"{"spec":{"minAvailable":1}}"#]);
    let out = kubectl_ok(&s, &["drain", &node, "--ignore-daemonsets", "--dry-run=server"]);
    assert!(out.contains(&format!("node/{node} drained (server dry run)")), "{out}");
    assert_eq!(on_node(&s), before);
    assert_eq!(jsonpath(&s, &["node", &node], "{.spec.unschedulable}"), "");

    // For real: evicted one at a time as replacements become ready elsewhere.
    let out = kubectl_ok(&s, &["drain", &node, "--ignore-daemonsets", "--timeout=120s"]);
    assert!(out.contains(&format!("node/{node} cordoned")) && out.contains(&format!("node/{node} drained")), "{out}");
    assert!(out.contains("evicted"), "{out}");
    eventually(60, "two web pods running elsewhere", || {
        let phases = jsonpath(&s, &["pods", "-l", "app=web"], "{.items[*].status.phase}");
        (on_node(&s) == 0 && phases == "Running Running").then_some(())
    });
    assert!(s.stop().success());
}

/// `kubectl expose` creates a Service for the Deployment's selector; `kubectl auth can-i` asks a
/// SelfSubjectAccessReview, which every client passes (the server has no authorization).
#[test]
fn expose_creates_a_service_for_a_deployment_and_auth_can_i_is_answered_yes() {
    let s = Served::start("cmd-expose", &["--controllers", "none"]);
    kubectl_ok(&s, &["create", "deployment", "web", "--image=nginx"]);
    assert_eq!(kubectl_ok(&s, &["expose", "deployment", "web", "--port=80"]).trim(), "service/web exposed");
    assert_eq!(jsonpath(&s, &["service", "web"], "{.spec.selector.app} {.spec.ports[0].port}"), "web 80");
    assert_eq!(kubectl_ok(&s, &["auth", "can-i", "create", "deployments"]).trim(), "yes");
    assert_eq!(kubectl_ok(&s, &["auth", "can-i", "*", "*"]).trim(), "yes");
    assert!(s.stop().success());
}

#[test]
fn client_side_apply_removes_what_the_manifest_dropped_and_keeps_what_another_writer_set() {
    let s = Served::start("cmd-apply", &["--controllers", "none"]);
    let manifest = |containers: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers:\n{containers}"
        )
    };
    let first = write(
        &s.dir,
        "first.yaml",
        &manifest(
            "      - {name: web, image: nginx, env: [{name: A, value: '1'}, {name: B, value: '2'}], ports: [{containerPort: 80}, {containerPort: 443}]}\n      - {name: side, image: busybox}\n",
        ),
    );
    assert_eq!(kubectl_ok(&s, &["apply", "-f", first.to_str().unwrap()]).trim(), "deployment.apps/web created");
    kubectl_ok(&s, &["set", "resources", "deployment", "web", "-c=web", "--limits=cpu=1"]);
    // kubectl's three-way strategic merge patch deletes the dropped container, env var and port
    // by their merge keys; the limits another writer set are not the manifest's to remove.
    let second = write(
        &s.dir,
        "second.yaml",
        &manifest(
            "      - {name: web, image: 'nginx:2', env: [{name: A, value: '1'}], ports: [{containerPort: 80}]}\n",
        ),
    );
    assert_eq!(kubectl_ok(&s, &["apply", "-f", second.to_str().unwrap()]).trim(), "deployment.apps/web configured");
    let containers = jsonpath(&s, &["deployment", "web"], "{.spec.template.spec.containers}");
    let containers: serde_json::Value = serde_json::from_str(&containers).expect("containers as JSON");
    assert_eq!(
        containers,
        serde_json::json!([{"name": "web", "image": "nginx:2", "env": [{"name": "A", "value": "1"}],
            "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}}}])
    );
    assert!(s.stop().success());
}

#[test]
fn deleting_a_namespace_deletes_its_workload_and_a_finalizer_holds_it_terminating() {
    let s = with_pool("cmd-namespace-delete");
    kubectl_ok(&s, &["create", "namespace", "team"]);
    kubectl_ok(&s, &["create", "deployment", "web", "-n", "team", "--image=nginx", "--replicas=2"]);
    kubectl_ok(&s, &["create", "deployment", "web", "--image=nginx"]);
    let met = kubectl_ok(&s, &["wait", "-n", "team", "--for=condition=Available", "deployment/web", "--timeout=120s"]);
    assert_eq!(met.trim(), "deployment.apps/web condition met");

    // The namespace goes with its Deployment, ReplicaSet and pods; nothing makes them again.
    assert_eq!(kubectl_ok(&s, &["delete", "namespace", "team"]).trim(), "namespace \"team\" deleted");
    let (found, text) = run(&s, &["get", "namespace", "team"]);
    assert!(!found && text.contains("namespaces \"team\" not found"), "{text}");
    for kind in ["pods", "replicasets", "deployments"] {
        assert_eq!(jsonpath(&s, &[kind, "-n", "team"], "{.items[*].metadata.name}"), "", "{kind}");
    }
    // The default namespace keeps its own.
    assert_eq!(jsonpath(&s, &["deployments"], "{.items[*].metadata.name}"), "web");

    // A pod kept by a finalizer of its own keeps its namespace Terminating, and closed.
    kubectl_ok(&s, &["create", "namespace", "hold"]);
    kubectl_ok(&s, &["run", "keep", "-n", "hold", "--image=busybox"]);
    let finalizer = r#"{"metadata":{"finalizers":["example.com/keep"]}}"#;
    kubectl_ok(&s, &["patch", "pod", "keep", "-n", "hold", "--type", "merge", "-p", finalizer]);
    kubectl_ok(&s, &["delete", "namespace", "hold", "--wait=false"]);
    assert_eq!(jsonpath(&s, &["namespace", "hold"], "{.status.phase}"), "Terminating");
    let described = kubectl_ok(&s, &["describe", "namespace", "hold"]);
    for line in [
        "Some resources are remaining: pods has 1 resource instances",
        "Some content in the namespace has finalizers remaining: example.com/keep in 1 resource instances",
    ] {
        assert!(described.contains(line), "{line:?} in:\n{described}");
    }
    let (created, text) = run(&s, &["create", "deployment", "late", "-n", "hold", "--image=nginx"]);
    assert!(!created, "{text}");
    assert!(
        text.contains(
            "deployments.apps \"late\" is forbidden: unable to create new content in namespace hold because it is being terminated"
        ),
        "{text}"
    );
    // Once the finalizer is removed the pod goes, and the namespace with it.
    kubectl_ok(
        &s,
        &["patch", "pod", "keep", "-n", "hold", "--type", "merge", "-p", r#"{"metadata":{"finalizers":null}}"#],
    );
    let (found, text) = run(&s, &["get", "namespace", "hold"]);
    assert!(!found && text.contains("namespaces \"hold\" not found"), "{text}");
    // The default namespace is never deleted.
    let (deleted, text) = run(&s, &["delete", "namespace", "default"]);
    assert!(
        !deleted && text.contains("namespaces \"default\" is forbidden: this namespace may not be deleted"),
        "{text}"
    );
    assert_eq!(jsonpath(&s, &["deployments"], "{.items[*].metadata.name}"), "web");
    assert!(s.stop().success());
}
