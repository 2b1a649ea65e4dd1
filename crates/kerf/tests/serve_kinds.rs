//! Kinds no simulated controller reads, created against `kerf serve` the way people create them:
//! kubectl's own `create` commands (ConfigMap, Secret, Service, ServiceAccount, Job, CronJob,
//! Role, RoleBinding) and manifests (StatefulSet, HorizontalPodAutoscaler, Service, Endpoints,
//! ClusterRole, ClusterRoleBinding), then read, listed by label, watched and deleted, Services
//! with the cluster IPs and node ports the API server gives them; and
//! `kubectl auth can-i`, which a server without authorization answers yes.

mod common;

use std::io::Read;
use std::process::Stdio;

use common::*;

const MANIFESTS: &str = "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 0
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: postgres
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: db
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: StatefulSet, name: db}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 70}
---
apiVersion: v1
kind: Service
metadata:
  name: dns
spec:
  type: NodePort
  selector: {app: dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
---
apiVersion: v1
kind: Endpoints
metadata:
  name: external
subsets:
- addresses: [{ip: 10.1.2.3}]
  ports: [{port: 5432}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
rules:
- apiGroups: [\"\"]
  resources: [pods]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: reader
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects:
- {kind: ServiceAccount, name: default, namespace: default}
";

#[test]
fn kinds_created_from_manifests_are_stored_and_served_with_their_subresources() {
    let s = Served::start("kinds-manifests", &["--controllers", "none"]);
    let manifests = write(&s.dir, "kinds.yaml", MANIFESTS);
    let created = kubectl_ok(&s, &["create", "-f", manifests.to_str().unwrap()]);
    for line in [
        "statefulset.apps/db created",
        "horizontalpodautoscaler.autoscaling/db created",
        "service/dns created",
        "endpoints/external created",
        "clusterrole.rbac.authorization.k8s.io/reader created",
        "clusterrolebinding.rbac.authorization.k8s.io/reader created",
    ] {
        assert!(created.contains(line), "{line}: {created}");
    }
    // The short names and the `all` category, as discovery publishes them.
    assert_eq!(kubectl_ok(&s, &["get", "hpa", "db", "-o", "jsonpath={.spec.maxReplicas}"]), "3");
    let all = kubectl_ok(&s, &["get", "all", "-o", "name"]);
    assert!(all.contains("statefulset.apps/db") && all.contains("horizontalpodautoscaler.autoscaling/db"), "{all}");
    assert_eq!(kubectl_ok(&s, &["get", "ep", "external", "-o", "jsonpath={.subsets[0].addresses[0].ip}"]), "10.1.2.3");
    // Services get cluster IPs after the `kubernetes` Service's, and node ports, as kubectl shows.
    let services = kubectl_ok(&s, &["get", "services"]);
    let rows: Vec<Vec<&str>> = services.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"], "{services}");
    assert_eq!(rows[1][..5], ["dns", "NodePort", "10.96.0.2", "<none>", "53:30000/UDP"], "{services}");
    assert_eq!(rows[2][..5], ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"], "{services}");
    // The status subresource of an HPA: written there, kept by spec writes.
    kubectl_ok(
        &s,
        &[
            "patch",
            "hpa",
            "db",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"currentReplicas":2,"desiredReplicas":2}}"#,
        ],
    );
    kubectl_ok(&s, &["patch", "hpa", "db", "--type=merge", "-p", r#"{"spec":{"maxReplicas":5}}"#]);
    assert_eq!(
        kubectl_ok(&s, &["get", "hpa", "db", "-o", "jsonpath={.spec.maxReplicas} {.status.currentReplicas}"]),
        "5 2"
    );
    assert_eq!(kubectl_ok(&s, &["scale", "statefulset", "db", "--replicas=2"]).trim(), "statefulset.apps/db scaled");

    // No authorization: every request is allowed (SelfSubjectAccessReview), and who asks is the
    // admin (SelfSubjectReview).
    assert_eq!(kubectl_ok(&s, &["auth", "can-i", "create", "pods"]).trim(), "yes");
    assert_eq!(kubectl_ok(&s, &["auth", "can-i", "delete", "nodes", "--all-namespaces"]).trim(), "yes");
    assert!(kubectl_ok(&s, &["auth", "whoami"]).contains("kerf-admin"));
    let deleted = kubectl_ok(&s, &["delete", "-f", manifests.to_str().unwrap()]);
    assert_eq!(deleted.lines().count(), 6, "{deleted}");
    assert_eq!(
        kubectl_ok(&s, &["get", "clusterroles,clusterrolebindings,statefulsets,hpa,endpoints", "-o", "name"]),
        ""
    );
}

#[test]
fn kubectl_create_commands_make_their_kinds_and_kubectl_reads_watches_and_deletes_them() {
    let s = Served::start("kinds-create", &["--controllers", "none"]);
    let mut watch = kubectl_cmd(&s)
        .args(["get", "configmaps", "-w", "--output-watch-events", "--no-headers"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let commands: [(&[&str], &str); 8] = [
        (
            &["create", "configmap", "settings", "--from-literal=mode=fast", "--from-literal=level=3"],
            "configmap/settings created",
        ),
        (&["create", "secret", "generic", "token", "--from-literal=key=s3cr3t"], "secret/token created"),
        (&["create", "service", "clusterip", "web", "--tcp=80:8080"], "service/web created"),
        (&["create", "serviceaccount", "builder"], "serviceaccount/builder created"),
        (&["create", "job", "once", "--image=busybox", "--", "true"], "job.batch/once created"),
        (
            &["create", "cronjob", "nightly", "--image=busybox", "--schedule=0 3 * * *", "--", "true"],
            "cronjob.batch/nightly created",
        ),
        (
            &["create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods"],
            "role.rbac.authorization.k8s.io/pod-reader created",
        ),
        (
            &["create", "rolebinding", "builder-reads", "--role=pod-reader", "--serviceaccount=default:builder"],
            "rolebinding.rbac.authorization.k8s.io/builder-reads created",
        ),
    ];
    for (args, expected) in commands {
        assert_eq!(kubectl_ok(&s, args).trim(), expected, "kubectl {}", args.join(" "));
    }
    let read = |args: &[&str]| kubectl_ok(&s, args);
    assert_eq!(read(&["get", "cm", "settings", "-o", "jsonpath={.data.mode} {.data.level}"]), "fast 3");
    assert_eq!(read(&["get", "secret", "token", "-o", "jsonpath={.data.key}"]), "czNjcjN0", "base64 of s3cr3t");
    assert_eq!(
        read(&["get", "svc", "web", "-o", "jsonpath={.spec.ports[0].port}:{.spec.ports[0].targetPort}"]),
        "80:8080"
    );
    assert_eq!(read(&["get", "sa", "builder", "-o", "name"]).trim(), "serviceaccount/builder");
    assert_eq!(read(&["get", "job", "once", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]), "busybox");
    assert_eq!(read(&["get", "cronjob", "nightly", "-o", "jsonpath={.spec.schedule}"]), "0 3 * * *");
    assert_eq!(read(&["get", "role", "pod-reader", "-o", "jsonpath={.rules[0].verbs}"]), r#"["get","list","watch"]"#);
    assert_eq!(read(&["get", "rolebinding", "builder-reads", "-o", "jsonpath={.roleRef.name}"]), "pod-reader");
    let table = read(&["get", "configmap", "settings"]);
    assert_eq!(
        table.lines().nth(1).map(|l| l.split_whitespace().take(2).collect::<Vec<_>>()),
        Some(vec!["settings", "2"]),
        "{table}"
    );

    // Label selectors.
    read(&["label", "configmap", "settings", "team=a"]);
    assert_eq!(read(&["get", "cm", "-l", "team=a", "-o", "name"]).trim(), "configmap/settings");
    assert_eq!(read(&["get", "cm", "-l", "team=b", "-o", "name"]).trim(), "");

    for kind in [
        "configmap/settings",
        "secret/token",
        "service/web",
        "serviceaccount/builder",
        "job/once",
        "cronjob/nightly",
        "role/pod-reader",
        "rolebinding/builder-reads",
    ] {
        assert!(read(&["delete", kind]).contains("deleted"), "{kind}");
    }
    assert_eq!(
        read(&["get", "cm,secret,svc,sa,job,cronjob,role,rolebinding", "-o", "name"]).trim(),
        "service/kubernetes"
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let _ = watch.kill();
    let mut seen = String::new();
    watch.stdout.take().expect("watch stdout").read_to_string(&mut seen).expect("watch output");
    let _ = watch.wait();
    let events: Vec<String> =
        seen.lines().map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(events, ["ADDED settings", "MODIFIED settings", "DELETED settings"], "{seen}");
}
