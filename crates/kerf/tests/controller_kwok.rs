//! `kerf controller --cloud kwok` against `kerf serve --controllers none`: kubectl creates an
//! EC2NodeClass, a NodePool and a Deployment, and a separately started controller launches Node
//! objects for them through the API (the server's kubelet stand-in makes them Ready and lifts
//! their startup taints); metrics, probes, events, a restart, scaling to zero, leader election
//! between two controllers, and bad input.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::controller::{Controller, get, words};
use common::*;

const MANIFESTS: &str = concat!(
    demo_node_class!(),
    r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      startupTaints:
        - {key: example.com/agent-not-ready, effect: NoSchedule}
  limits:
    cpu: "1000"
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 2s
    budgets:
      - nodes: "100%"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: inflate
spec:
  replicas: 4
  selector:
    matchLabels: {app: inflate}
  template:
    metadata:
      labels: {app: inflate}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: inflate
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: "1"}
---
apiVersion: v1
kind: Pod
metadata:
  name: needs-eni
spec:
  containers:
    - name: app
      image: registry.k8s.io/pause:3.10
      resources:
        requests: {vpc.amazonaws.com/pod-eni: "1"}
        limits: {vpc.amazonaws.com/pod-eni: "1"}
"#
);

/// User + system CPU time of a process, in clock ticks (Linux `/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<i64>().expect("utime") + fields[12].parse::<i64>().expect("stime")
}

fn running_pods(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"])
}

fn claims(s: &Served) -> BTreeSet<String> {
    words(s, &["get", "nodeclaims", "-o", "jsonpath={.items[*].metadata.name}"])
}

/// The value of the first sample of `metric` whose labels contain every one of `labels`.
fn sample(text: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn create_manifests(s: &Served) {
    let path = write(&s.dir, "manifests.yaml", MANIFESTS);
    let out = kubectl_ok(s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    assert!(out.contains("nodepool.karpenter.sh/default created"), "{out}");
}

fn wait_ready(c: &Controller, role: &str) {
    eventually(30, &format!("readyz {role}"), || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains(role)).then_some(())
    });
}

#[test]
fn kwok_controller_runs_a_deployment_on_nodes_it_launched_survives_a_restart_and_removes_them_at_zero() {
    let s = Served::start("ctrl-kwok", &["--controllers", "none", "--speed", "10"]);
    let a = Controller::start(&s, "a", &[]);
    wait_ready(&a, "ok: leader");
    assert_eq!(get(&a.health, "/healthz"), (200, "ok".to_string()));
    create_manifests(&s);

    let pods = eventually(60, "4 running inflate pods", || Some(running_pods(&s)).filter(|p| p.len() == 4));
    // Every pod runs on a Node kerf launched as a kwok instance, named after its NodeClaim.
    let claims_before = claims(&s);
    assert!(!claims_before.is_empty());
    let pod_nodes = words(&s, &["get", "pods", "-o", "jsonpath={.items[*].spec.nodeName}"]);
    assert!(pod_nodes.is_subset(&claims_before), "pods on {pod_nodes:?}, claims {claims_before:?}");
    let ids = words(&s, &["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"]);
    assert!(ids.iter().all(|id| id.starts_with("kwok://")) && ids.len() == claims_before.len(), "{ids:?}");
    let labelled = kubectl_ok(
        &s,
        &[
            "get",
            "nodes",
            "-l",
            "karpenter.sh/nodepool=default,karpenter.sh/capacity-type=on-demand,topology.kubernetes.io/zone,karpenter.sh/registered=true",
            "-o",
            "name",
        ],
    );
    assert_eq!(labelled.lines().count(), claims_before.len(), "pool, capacity type, zone, registered: {labelled}");
    let types = kubectl_ok(
        &s,
        &["get", "nodes", "-o", "jsonpath={.items[*].metadata.labels.node\\.kubernetes\\.io/instance-type}"],
    );
    assert!(
        !types.trim().is_empty() && types.split_whitespace().all(|t| t.starts_with('c') || t.starts_with('m')),
        "{types}"
    );
    // Events on the pods, as Karpenter records them.
    let reasons = kubectl_ok(&s, &["get", "events", "-o", "jsonpath={.items[*].reason}"]);
    assert!(reasons.contains("Nominated"), "{reasons}");
    // A pod no instance type can hold is told exactly why, on the pod.
    let described = eventually(20, "FailedScheduling on pod needs-eni", || {
        let d = kubectl_ok(&s, &["describe", "pod", "needs-eni"]);
        d.contains("FailedScheduling").then_some(d)
    });
    assert!(described.contains("NodePool default") && described.contains("vpc.amazonaws.com/pod-eni"), "{described}");

    // The node kerf keeps says why, on the Node.
    let blocked = eventually(30, "a DisruptionBlocked event on a node", || {
        let d = kubectl_ok(
            &s,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=DisruptionBlocked,involvedObject.kind=Node",
                "-o",
                "jsonpath={.items[*].message}",
            ],
        );
        (!d.trim().is_empty()).then_some(d)
    });
    assert!(blocked.contains("Cannot disrupt Node:"), "{blocked}");

    // Metrics with Karpenter's names and labels.
    let m = eventually(20, "pods_state of 4 running pods", || {
        let m = a.metrics();
        let running =
            m.lines().filter(|l| l.starts_with("karpenter_pods_state{") && l.contains(r#"phase="Running""#)).count();
        (running == 4).then_some(m)
    });
    let created =
        sample(&m, "karpenter_nodeclaims_created_total", &[r#"reason="provisioning""#, r#"nodepool="default""#]);
    assert_eq!(created, Some(claims_before.len() as f64), "{m}");
    assert_eq!(
        sample(&m, "karpenter_nodes_created_total", &[r#"nodepool="default""#]),
        Some(claims_before.len() as f64),
        "{m}"
    );
    assert_eq!(
        sample(&m, "karpenter_nodepools_limit", &[r#"nodepool="default""#, r#"resource_type="cpu""#]),
        Some(1000.0),
        "{m}"
    );
    assert!(
        sample(&m, "karpenter_nodepools_usage", &[r#"nodepool="default""#, r#"resource_type="cpu""#])
            .is_some_and(|v| v >= 4.0),
        "{m}"
    );
    assert!(
        sample(
            &m,
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            &[r#"instance_type="m5.large""#, r#"capacity_type="on-demand""#]
        )
        .is_some_and(|p| p > 0.0),
        "{m}"
    );
    assert!(
        sample(&m, "karpenter_scheduler_scheduling_duration_seconds_count", &[r#"controller="provisioner""#])
            .is_some_and(|n| n >= 1.0),
        "{m}"
    );

    // A restart: the new process relists, launches nothing new, and every pod keeps running.
    assert!(a.stop().success());
    let b = Controller::start(&s, "b", &[]);
    wait_ready(&b, "ok: leader");
    let busy_before = cpu_ticks(b.pid());
    std::thread::sleep(Duration::from_secs(4));
    // Idle, it waits for events and timers rather than spinning (it takes a few ticks; spinning took 150 on a loaded 2-core machine).
    let busy = cpu_ticks(b.pid()) - busy_before;
    assert!(busy < 50, "an idle controller used {busy} CPU ticks in 4s");
    assert_eq!(claims(&s), claims_before, "no NodeClaim added or lost across the restart");
    assert_eq!(running_pods(&s), pods, "no pod lost across the restart");
    assert_eq!(
        sample(&b.metrics(), "karpenter_nodeclaims_created_total", &[]),
        None,
        "nothing launched after the restart"
    );

    // Scaled to zero, the empty nodes go (Empty, after consolidateAfter and the validation wait).
    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=0"]);
    eventually(90, "no nodes and no nodeclaims", || {
        let nodes = kubectl_ok(&s, &["get", "nodes", "-o", "name"]);
        (nodes.trim().is_empty() && claims(&s).is_empty()).then_some(())
    });
    let m = b.metrics();
    assert_eq!(
        sample(&m, "karpenter_nodeclaims_terminated_total", &[r#"nodepool="default""#, r#"capacity_type="on-demand""#]),
        Some(claims_before.len() as f64),
        "{m}"
    );
    assert!(
        sample(&m, "karpenter_voluntary_disruption_decisions_total", &[r#"decision="delete""#, r#"reason="empty""#])
            .is_some_and(|n| n >= 1.0),
        "{m}"
    );
    assert!(b.stop().success());
}

fn holder(s: &Served) -> String {
    kubectl_ok(
        s,
        &["get", "lease", "-n", "kube-system", "karpenter-leader-election", "-o", "jsonpath={.spec.holderIdentity}"],
    )
}

#[test]
fn with_leader_election_only_the_lease_holder_acts_and_a_killed_leader_is_replaced_within_the_lease_time() {
    let s = Served::start("ctrl-lease", &["--controllers", "none", "--speed", "10"]);
    let a = Controller::start(&s, "a", &["--leader-elect"]);
    wait_ready(&a, "ok: leader");
    let b = Controller::start(&s, "b", &["--leader-elect"]);
    wait_ready(&b, "ok: standby");
    assert!(holder(&s).ends_with(&format!("_{}", a.pid())), "lease held by a: {}", holder(&s));

    create_manifests(&s);
    eventually(60, "4 running inflate pods", || Some(running_pods(&s)).filter(|p| p.len() == 4));
    let launched = claims(&s).len() as f64;
    assert_eq!(sample(&a.metrics(), "karpenter_nodeclaims_created_total", &[]), Some(launched));
    assert_eq!(sample(&b.metrics(), "karpenter_nodeclaims_created_total", &[]), None, "the standby launched nothing");

    // The leader dies without releasing the lease: the standby takes over once it expires.
    let mut a = a;
    let killed = Instant::now();
    let _ = a.child.kill();
    let _ = a.child.wait();
    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=8"]);
    wait_ready_within(&b, "ok: leader", 25);
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(15 + 2 + 3), "handover took {took:?}");
    assert!(holder(&s).ends_with(&format!("_{}", b.pid())), "lease held by b: {}", holder(&s));
    eventually(60, "8 running inflate pods", || Some(running_pods(&s)).filter(|p| p.len() == 8));
    assert!(sample(&b.metrics(), "karpenter_nodeclaims_created_total", &[]).is_some_and(|n| n >= 1.0));

    // A leader that shuts down releases the lease at once.
    assert!(b.stop().success());
    assert_eq!(holder(&s), "", "released");
}

fn wait_ready_within(c: &Controller, role: &str, secs: u64) {
    eventually(secs, &format!("readyz {role}"), || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains(role)).then_some(())
    });
}

fn kerf_controller(args: &[&str], kubeconfig_env: Option<&Path>) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kerf"));
    c.arg("controller").args(args).env_remove("KUBERNETES_SERVICE_HOST").env_remove("KUBERNETES_SERVICE_PORT");
    match kubeconfig_env {
        Some(p) => c.env("KUBECONFIG", p),
        None => c.env_remove("KUBECONFIG"),
    };
    c.output().expect("run kerf controller")
}

#[test]
fn bad_input_to_kerf_controller_exits_2_saying_what_is_wrong() {
    let dir = std::env::temp_dir().join(format!("kerf-controller-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let unreachable = write(
        &dir,
        "unreachable.kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: x\n  context:\n    cluster: x\n    user: x\ncurrent-context: x\nusers:\n- name: x\n  user: {}\n",
    );
    let garbage = write(&dir, "garbage.kubeconfig", "clusters: [[[\n");
    #[allow(unused_mut)]
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--cloud", "kwok", "--bogus"], "--bogus"),
        (vec!["--cloud", "gce"], "gce"),
        (
            vec!["--cloud", "kwok", "--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig /nonexistent/kubeconfig: no such file",
        ),
        (vec!["--cloud", "kwok", "--kubeconfig", garbage.to_str().expect("path")], "garbage.kubeconfig"),
        (
            vec!["--cloud", "kwok", "--kubeconfig", unreachable.to_str().expect("path")],
            "cannot reach the API server at http://127.0.0.1:1",
        ),
        (vec!["--cloud", "kwok"], "not running in a cluster"),
    ];
    #[cfg(not(feature = "aws"))]
    cases.push((vec!["--cloud", "aws", "--kubeconfig", unreachable.to_str().expect("path")], "--features aws"));
    for (args, expected) in cases {
        let out = kerf_controller(&args, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: expected {expected:?} in {stderr}");
    }
    // An API server that does not serve Karpenter's kinds.
    let bare = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = bare.local_addr().expect("addr");
    std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Write};
        for stream in bare.incoming().take(20).flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let (status, body) = if request_line.starts_with("GET /version") {
                (
                    "200 OK",
                    r#"{"major":"1","minor":"33","gitVersion":"v1.33.0","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#,
                )
            } else {
                (
                    "404 Not Found",
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"the server could not find the requested resource"}"#,
                )
            };
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let no_crds = write(
        &dir,
        "no-crds.kubeconfig",
        &std::fs::read_to_string(&unreachable).expect("read").replace("127.0.0.1:1", &addr.to_string()),
    );
    let out = kerf_controller(&["--cloud", "kwok", "--kubeconfig", no_crds.to_str().expect("path")], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("does not serve karpenter.sh/v1/nodepools") && stderr.contains("install Karpenter's CRDs"),
        "{stderr}"
    );

    // $KUBECONFIG is used when no --kubeconfig is given.
    let out = kerf_controller(&["--cloud", "kwok"], Some(&unreachable));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the API server"));
}
