//! Installing kerf in a cluster: the CRD manifests `kerf crds` prints and the copies committed
//! for the Helm chart and the kustomize base, the chart rendered (by the subset renderer in
//! `install/template.rs`: no `helm` package exists in the registries this project installs
//! from), the kustomize base built with the installed kubectl and compared with the chart, and
//! the Dockerfile.
//!
//! `KERF_UPDATE_INSTALL=1 cargo test -p kerf --test install` rewrites the generated files
//! (charts/kerf/crds/*, deploy/kustomize/base/crds.yaml and deploy/kustomize/base/kerf.yaml).

#[path = "install/template.rs"]
mod template;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn updating() -> bool {
    std::env::var_os("KERF_UPDATE_INSTALL").is_some()
}

/// Checks (or with KERF_UPDATE_INSTALL, writes) a generated file.
fn generated(path: &Path, expected: &str) {
    if updating() {
        std::fs::write(path, expected).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let committed = read(path);
    assert!(
        committed == expected,
        "{} is stale: run KERF_UPDATE_INSTALL=1 cargo test -p kerf --test install",
        path.display()
    );
}

fn kerf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf")).args(args).output().expect("running kerf")
}

/// YAML documents as JSON values (empty documents dropped).
fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap_or_else(|e| panic!("{e}\n{text}")))
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn committed_crd_manifests_are_what_kerf_crds_prints() {
    let out = kerf(&["crds"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    let docs = documents(&printed);
    let names: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "ec2nodeclasses.karpenter.k8s.aws",
            "capacitybuffers.autoscaling.x-k8s.io",
            "nodeoverlays.karpenter.sh",
            "provisioningrequests.autoscaling.x-k8s.io",
            "capacityquotas.autoscaling.x-k8s.io",
        ]
    );

    // `--dir` writes the same documents one per file, named as Karpenter's chart names them.
    let dir = std::env::temp_dir().join(format!("kerf-crds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = kerf(&["crds", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
        "karpenter.sh_nodeoverlays.yaml",
        "autoscaling.x-k8s.io_provisioningrequests.yaml",
        "autoscaling.x-k8s.io_capacityquotas.yaml",
    ];
    let joined: String = files.iter().map(|f| read(&dir.join(f))).collect();
    assert_eq!(joined, printed);
    for f in files {
        generated(&repo("charts/kerf/crds").join(f), &read(&dir.join(f)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    generated(&repo("deploy/kustomize/base/crds.yaml"), &printed);
}

#[test]
fn kerf_crds_into_a_missing_directory_is_bad_input() {
    let out = kerf(&["crds", "--dir", "/nonexistent/kerf-crds"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dir /nonexistent/kerf-crds: not a directory"));
}

/// The chart's templates, parsed.
fn chart() -> template::Chart {
    let dir = repo("charts/kerf/templates");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().to_string(), read(&p)))
        .collect();
    files.sort();
    template::Chart::parse(&files).unwrap_or_else(|e| panic!("{e}"))
}

fn default_values() -> Value {
    serde_yaml_ng::from_str(&read(&repo("charts/kerf/values.yaml"))).unwrap()
}

/// Deep-merges `over` into `base` (as `--set` / `-f` do).
fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// The chart rendered as `helm template kerf charts/kerf --namespace kerf` would, with `over`
/// merged into the default values: the templates' objects, then its crds/.
fn render(over: Value) -> Vec<Value> {
    let chart_yaml: Value = serde_yaml_ng::from_str(&read(&repo("charts/kerf/Chart.yaml"))).unwrap();
    let mut values = default_values();
    merge(&mut values, &over);
    let root = json!({
        "Values": values,
        "Release": {"Name": "kerf", "Namespace": "kerf", "Service": "Helm"},
        "Chart": {"Name": chart_yaml["name"], "Version": chart_yaml["version"], "AppVersion": chart_yaml["appVersion"]},
    });
    let rendered = chart().render(&root).unwrap_or_else(|e| panic!("{e}"));
    rendered.iter().flat_map(|(_, text)| documents(text)).collect()
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in the render"))
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| format!("{}/{}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap()))
        .collect()
}

#[test]
fn chart_renders_the_controller_with_karpenters_layout_and_a_hardened_pod() {
    let objects = render(json!({}));
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole/kerf",
            "ClusterRoleBinding/kerf",
            "Deployment/kerf",
            "PodDisruptionBudget/kerf",
            "Role/kerf",
            "RoleBinding/kerf",
            "Service/kerf",
            "ServiceAccount/kerf",
            "ClusterRole/kerf-snapshot",
        ]
    );
    for o in &objects {
        let namespaced = !matches!(o["kind"].as_str(), Some("ClusterRole" | "ClusterRoleBinding"));
        assert_eq!(o["metadata"].get("namespace").is_some(), namespaced, "{o}");
        assert_eq!(o["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm");
    }
    let deploy = find(&objects, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 2);
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["serviceAccountName"], "kerf");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "kerf:0.1.0");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(
        c["args"],
        json!([
            "controller",
            "--cloud=aws",
            "--metrics-addr=0.0.0.0:8080",
            "--health-addr=0.0.0.0:8081",
            "--leader-elect"
        ])
    );
    let env: BTreeSet<&str> = c["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    for name in [
        "CLUSTER_NAME",
        "CLUSTER_ENDPOINT",
        "INTERRUPTION_QUEUE",
        "BATCH_MAX_DURATION",
        "BATCH_IDLE_DURATION",
        "FEATURE_GATES",
        "PREFERENCE_POLICY",
        "SYSTEM_NAMESPACE",
    ] {
        assert!(env.contains(name), "no {name} in {env:?}");
    }
    let gates = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "FEATURE_GATES").unwrap();
    assert_eq!(
        gates["value"],
        "SpotToSpotConsolidation=false,NodeRepair=false,RebootForRepair=false,PodDeletionCostManagement=false"
    );
    let ports: Vec<(&str, i64)> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["containerPort"].as_i64().unwrap()))
        .collect();
    assert_eq!(ports, [("http-metrics", 8080), ("http", 8081)]);
    // Spread over zones and hosts, each constraint selecting the controller's own pods.
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    assert_eq!(spread.len(), 2);
    for s in spread {
        assert_eq!(s["labelSelector"]["matchLabels"], deploy["spec"]["selector"]["matchLabels"]);
    }
    assert_eq!(find(&objects, "PodDisruptionBudget")["spec"]["maxUnavailable"], 1);
    assert_eq!(find(&objects, "Service")["spec"]["ports"][0]["port"], 8080);
}

#[test]
fn chart_settings_reach_the_controller_and_one_replica_runs_without_leader_election() {
    let objects = render(json!({
        "replicas": 1,
        "settings": {"clusterName": "prod", "interruptionQueue": "prod-interruptions",
            "featureGates": {"spotToSpotConsolidation": true, "nodeRepair": true, "rebootForRepair": true,
                "podDeletionCostManagement": true}},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/Kerf"}},
        "serviceMonitor": {"enabled": true},
        "controller": {"image": {"digest": "sha256:abc"}},
    }));
    let deploy = find(&objects, "Deployment");
    let c = &deploy["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args.contains(&"--cluster-name=prod"), "{args:?}");
    assert!(!args.contains(&"--leader-elect"), "{args:?}");
    let env = |name: &str| c["env"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap()["value"].clone();
    assert_eq!(env("INTERRUPTION_QUEUE"), "prod-interruptions");
    assert_eq!(
        env("FEATURE_GATES"),
        "SpotToSpotConsolidation=true,NodeRepair=true,RebootForRepair=true,PodDeletionCostManagement=true"
    );
    assert_eq!(c["image"], "kerf@sha256:abc");
    let sa = find(&objects, "ServiceAccount");
    assert_eq!(sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"], "arn:aws:iam::111122223333:role/Kerf");
    let monitor = find(&objects, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
}

#[test]
fn chart_without_its_service_account_binds_the_named_one() {
    let objects = render(json!({"serviceAccount": {"create": false, "name": "existing"}}));
    assert!(!kinds(&objects).contains(&"ServiceAccount/kerf".to_string()));
    let deploy = find(&objects, "Deployment");
    assert_eq!(deploy["spec"]["template"]["spec"]["serviceAccountName"], "existing");
    assert_eq!(find(&objects, "ClusterRoleBinding")["subjects"][0]["name"], "existing");
    assert_eq!(find(&objects, "RoleBinding")["subjects"][0]["name"], "existing");
}

/// `(apiGroup, resource, verb)` granted by a role's rules, with resourceNames when narrowed.
fn grants(role: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let names = rule["resourceNames"].as_array().map(|n| format!("{n:?}")).unwrap_or_default();
        for g in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    out.insert(format!(
                        "{}:{}:{}{names}",
                        g.as_str().unwrap(),
                        r.as_str().unwrap(),
                        v.as_str().unwrap()
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn rbac_grants_what_the_controller_uses_and_leases_only_in_its_namespace() {
    let objects = render(json!({}));
    let cluster = grants(find(&objects, "ClusterRole"));
    for needed in [
        "karpenter.sh:nodeclaims:create",
        "karpenter.sh:nodeclaims:delete",
        "karpenter.sh:nodeclaims/status:update",
        "karpenter.sh:nodepools:watch",
        "karpenter.sh:nodepools/status:patch",
        "karpenter.k8s.aws:ec2nodeclasses:list",
        "karpenter.k8s.aws:ec2nodeclasses:patch",
        "karpenter.sh:nodepools:patch",
        "karpenter.sh:nodeoverlays:watch",
        "karpenter.sh:nodeoverlays/status:patch",
        ":pods:watch",
        ":pods/eviction:create",
        ":pods:delete",
        ":pods/status:update",
        ":nodes:delete",
        ":nodes:patch",
        ":events:create",
        "apps:daemonsets:list",
        "policy:poddisruptionbudgets:watch",
        "storage.k8s.io:storageclasses:get",
        "scheduling.k8s.io:priorityclasses:list",
        "node.k8s.io:runtimeclasses:list",
        ":persistentvolumeclaims:list",
        ":namespaces:watch",
    ] {
        assert!(cluster.contains(needed), "ClusterRole lacks {needed}");
    }
    // Least privilege: no wildcards, no secrets, no writes to pods or workloads, no Node
    // creation or Node status writes on AWS, and no Leases cluster-wide.
    for g in &cluster {
        assert!(!g.contains('*'), "{g}");
        assert!(!g.contains("secrets") && !g.contains("leases") && !g.starts_with("apps:daemonsets:c"), "{g}");
        assert!(
            !g.starts_with(":pods:")
                || g.ends_with(":get")
                || g.ends_with(":list")
                || g.ends_with(":watch")
                || g == ":pods:delete",
            "{g}"
        );
    }
    assert!(!cluster.contains(":nodes:create"));
    let kwok = grants(find(&render(json!({"settings": {"cloud": "kwok"}})), "ClusterRole"));
    assert_eq!(kwok.difference(&cluster).collect::<Vec<_>>(), [":nodes/status:patch", ":nodes:create"]);

    let role = find(&objects, "Role");
    assert_eq!(role["metadata"]["namespace"], "kerf");
    let lease = grants(role);
    assert_eq!(
        lease.into_iter().collect::<Vec<_>>(),
        [
            "coordination.k8s.io:leases:create",
            "coordination.k8s.io:leases:get[String(\"kerf-leader-election\")]",
            "coordination.k8s.io:leases:patch[String(\"kerf-leader-election\")]",
            "coordination.k8s.io:leases:update[String(\"kerf-leader-election\")]",
            "coordination.k8s.io:leases:watch[String(\"kerf-leader-election\")]",
        ]
    );
}

#[test]
fn the_snapshot_role_lists_what_kerf_snapshot_reads_and_nothing_else() {
    let objects = render(json!({}));
    let role = objects.iter().find(|o| o["metadata"]["name"] == "kerf-snapshot").expect("kerf-snapshot");
    let listed: Vec<String> = grants(role).into_iter().collect();
    assert_eq!(
        listed,
        [
            ":namespaces:list",
            ":nodes:list",
            ":persistentvolumeclaims:list",
            ":persistentvolumes:list",
            ":pods:list",
            ":podtemplates:list",
            "apps:daemonsets:list",
            "apps:deployments:list",
            "apps:replicasets:list",
            "autoscaling.x-k8s.io:capacitybuffers:list",
            "autoscaling.x-k8s.io:capacityquotas:list",
            "autoscaling.x-k8s.io:provisioningrequests:list",
            "karpenter.k8s.aws:ec2nodeclasses:list",
            "karpenter.sh:nodeclaims:list",
            "karpenter.sh:nodeoverlays:list",
            "karpenter.sh:nodepools:list",
            "node.k8s.io:runtimeclasses:list",
            "policy:poddisruptionbudgets:list",
            "scheduling.k8s.io:priorityclasses:list",
            "storage.k8s.io:storageclasses:list",
        ]
    );
    // Bound to nobody unless asked; to the given subjects when asked; gone when not wanted.
    assert!(!objects.iter().any(|o| o["kind"] == "ClusterRoleBinding" && o["metadata"]["name"] == "kerf-snapshot"));
    let group = json!({"kind": "Group", "name": "platform", "apiGroup": "rbac.authorization.k8s.io"});
    let bound = render(json!({"snapshot": {"subjects": [group.clone()]}}));
    let binding = bound
        .iter()
        .find(|o| o["kind"] == "ClusterRoleBinding" && o["metadata"]["name"] == "kerf-snapshot")
        .expect("binding");
    assert_eq!((binding["roleRef"]["name"].clone(), binding["subjects"][0].clone()), (json!("kerf-snapshot"), group));
    let off = render(json!({"snapshot": {"clusterRole": {"create": false}}}));
    assert!(!off.iter().any(|o| o["metadata"]["name"] == "kerf-snapshot"));
}

#[test]
fn every_values_reference_in_the_chart_exists_in_values_yaml() {
    let values = default_values();
    let dir = repo("charts/kerf/templates");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        for chain in template::values_references(&read(&path)) {
            let found = chain.iter().try_fold(&values, |v, k| v.get(k));
            assert!(found.is_some(), "{}: .Values.{} is not in values.yaml", path.display(), chain.join("."));
        }
    }
}

#[test]
fn template_renderer_refuses_what_it_does_not_implement() {
    let parse = |text: &str| template::Chart::parse(&[("t.yaml".to_string(), text.to_string())]);
    assert!(parse("{{ if .a }}x").unwrap_err().contains("without `end`"));
    assert!(parse("{{ $x := 1 }}").unwrap_err().contains("variables are not supported"));
    assert!(parse("{{ if .a }}x{{ else if .b }}y{{ end }}").unwrap_err().contains("unsupported action"));
    let chart = parse("{{ .a | lower }}").unwrap();
    assert!(chart.render(&json!({"a": "X"})).unwrap_err().contains("unsupported function \"lower\""));
    let chart =
        parse("a:\n  {{- toYaml .m | nindent 2 }}\n{{- if gt (int .n) 1 }}\nmany: {{ .n | quote }}{{ end }}").unwrap();
    let out = chart.render(&json!({"m": {"k": "v"}, "n": 3})).unwrap();
    assert_eq!(out[0].1, "a:\n  k: v\nmany: \"3\"");
}

/// The chart's objects as the kustomize base carries them: without Helm's bookkeeping labels.
fn without_helm_labels(mut o: Value) -> Value {
    if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
        labels.remove("helm.sh/chart");
        labels.remove("app.kubernetes.io/managed-by");
    }
    o
}

#[test]
fn kustomize_base_is_the_chart_rendered_for_namespace_kerf() {
    let objects: Vec<Value> = render(json!({})).into_iter().map(without_helm_labels).collect();
    let mut text = String::from(
        "# Generated from charts/kerf with its default values (release kerf, namespace kerf) by\n\
         # `KERF_UPDATE_INSTALL=1 cargo test -p kerf --test install`: edit the chart, not this file.\n",
    );
    for o in &objects {
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(o).unwrap());
    }
    generated(&repo("deploy/kustomize/base/kerf.yaml"), &text);
}

#[test]
fn kubectl_kustomize_builds_the_base_into_the_charts_objects_and_crds() {
    let out = Command::new("kubectl")
        .args(["kustomize", repo("deploy/kustomize/base").to_str().unwrap()])
        .output()
        .expect("running kubectl (installed on the development machines and in CI)");
    assert!(out.status.success(), "kubectl kustomize: {}", String::from_utf8_lossy(&out.stderr));
    let built = documents(&String::from_utf8(out.stdout).unwrap());
    let mut built_kinds = kinds(&built);
    built_kinds.sort();
    assert_eq!(
        built_kinds,
        [
            "ClusterRole/kerf",
            "ClusterRole/kerf-snapshot",
            "ClusterRoleBinding/kerf",
            "CustomResourceDefinition/capacitybuffers.autoscaling.x-k8s.io",
            "CustomResourceDefinition/capacityquotas.autoscaling.x-k8s.io",
            "CustomResourceDefinition/ec2nodeclasses.karpenter.k8s.aws",
            "CustomResourceDefinition/nodeclaims.karpenter.sh",
            "CustomResourceDefinition/nodeoverlays.karpenter.sh",
            "CustomResourceDefinition/nodepools.karpenter.sh",
            "CustomResourceDefinition/provisioningrequests.autoscaling.x-k8s.io",
            "Deployment/kerf",
            "Namespace/kerf",
            "PodDisruptionBudget/kerf",
            "Role/kerf",
            "RoleBinding/kerf",
            "Service/kerf",
            "ServiceAccount/kerf",
        ]
    );
    // Every object but the Namespace is the chart's (with its CRDs), field for field.
    let mut expected: Vec<Value> = render(json!({})).into_iter().map(without_helm_labels).collect();
    expected.extend(documents(&read(&repo("deploy/kustomize/base/crds.yaml"))));
    for o in built.iter().filter(|o| o["kind"] != "Namespace") {
        let twin = expected
            .iter()
            .find(|e| e["kind"] == o["kind"] && e["metadata"]["name"] == o["metadata"]["name"])
            .unwrap_or_else(|| panic!("{} {} is not in the chart", o["kind"], o["metadata"]["name"]));
        assert_eq!(o, twin, "{} {} differs from the chart's", o["kind"], o["metadata"]["name"]);
    }
}

#[test]
fn dockerfile_builds_the_static_binary_and_runs_it_as_non_root() {
    let dockerfile = read(&repo("Dockerfile"));
    let stages = dockerfile.lines().filter(|l| l.starts_with("FROM ")).count();
    assert!(stages >= 2, "a multi-stage build");
    // The path copied out is the one `cargo build --target T` writes.
    assert!(
        dockerfile.contains(
            "cargo build --release --locked -p kerf --features aws --target \"$(uname -m)-unknown-linux-musl\""
        )
    );
    assert!(dockerfile.contains("cp \"/src/target/$(uname -m)-unknown-linux-musl/release/kerf\" /kerf"));
    assert!(dockerfile.contains("COPY --from=build /kerf /kerf"));
    let last_from = dockerfile.rfind("\nFROM ").unwrap();
    let runtime = &dockerfile[last_from..];
    assert!(runtime.contains("USER 65532:65532"), "the runtime stage runs as a non-root user");
    assert!(runtime.contains("ENTRYPOINT [\"/kerf\"]"));
    // The chart's pod runs as the same user.
    let deploy = find(&render(json!({})), "Deployment").clone();
    assert_eq!(deploy["spec"]["template"]["spec"]["securityContext"]["runAsUser"], 65532);
}

#[test]
fn chart_metadata_is_helm_v2_and_its_app_version_is_this_kerf() {
    let chart: Value = serde_yaml_ng::from_str(&read(&repo("charts/kerf/Chart.yaml"))).unwrap();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "kerf");
    let version = chart["version"].as_str().unwrap();
    assert_eq!(version.split('.').filter(|p| p.parse::<u64>().is_ok()).count(), 3, "{version} is not semver");
    // The image tag defaults to appVersion: the release of kerf the chart was written for.
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}
