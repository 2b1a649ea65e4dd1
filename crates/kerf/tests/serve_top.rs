//! `kubectl top` against `kerf serve`: the metrics API's figures follow the stated usage model
//! (docs/playground.md, "The metrics API (kubectl top)"): a running pod uses 60% of its requests unless its
//! `kerf.sh/usage-percent` annotation says otherwise; a node uses its running pods' sum plus
//! 100m CPU and 128Mi memory.

mod common;

use std::collections::BTreeMap;

use common::*;

const MI: u64 = 1 << 20;

const WORKLOADS: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
        resources:
          requests: {cpu: 500m, memory: 256Mi}
---
apiVersion: v1
kind: Pod
metadata:
  name: busy
  annotations:
    kerf.sh/usage-percent: \"90\"
spec:
  containers:
  - name: main
    image: nginx
    resources:
      requests: {cpu: 500m, memory: 256Mi}
  - name: side
    image: nginx
    resources:
      requests: {cpu: 100m, memory: 64Mi}
";

/// The model's usage of one container with these requests at `percent`: millicores as kubectl
/// prints them (rounded up) and bytes.
fn usage(cpu_milli: u64, memory_mi: u64, percent: f64) -> (u64, u64) {
    let nanos = (cpu_milli as f64 * 1e6 * percent / 100.0).round() as u64;
    let bytes = (memory_mi as f64 * MI as f64 * percent / 100.0).round() as u64;
    (nanos.div_ceil(1_000_000), bytes)
}

/// `kubectl top` rows as name -> (CPU millicores, memory Mi), from the columns at `at` (name,
/// CPU, memory).
fn rows(table: &str, at: [usize; 3]) -> BTreeMap<String, (u64, u64)> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let cpu = cols.get(at[1])?.strip_suffix('m')?.parse().ok()?;
            let mem = cols.get(at[2])?.strip_suffix("Mi")?.parse().ok()?;
            Some((cols.get(at[0])?.to_string(), (cpu, mem)))
        })
        .collect()
}

#[test]
fn kubectl_top_shows_node_and_pod_usage_from_the_usage_model() {
    let s = Served::start("top", &["--speed", "20"]);
    let pool = repo_file("examples/manifests/default-nodepool.yaml");
    kubectl_ok(&s, &["create", "-f", pool.to_str().unwrap()]);
    let workloads = write(&s.dir, "workloads.yaml", WORKLOADS);
    kubectl_ok(&s, &["create", "-f", workloads.to_str().unwrap()]);
    eventually(120, "3 running pods", || {
        let running = kubectl_ok(&s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "name"]);
        (running.lines().count() == 3).then_some(())
    });

    let pods = rows(&kubectl_ok(&s, &["top", "pods", "-A"]), [1, 2, 3]);
    let web = usage(500, 256, 60.0);
    let (main, side) = (usage(500, 256, 90.0), usage(100, 64, 90.0));
    let busy = (main.0 + side.0, main.1 + side.1);
    let shown = |(m, b): (u64, u64)| (m, b / MI);
    assert_eq!(pods.len(), 3, "{pods:?}");
    for (name, figures) in &pods {
        let expected = if name == "busy" { shown(busy) } else { shown(web) };
        assert_eq!(*figures, expected, "{name}: {pods:?}");
    }
    assert_eq!(pods["busy"], (540, 288), "90% of 600m and of 320Mi");
    let containers = kubectl_ok(&s, &["top", "pod", "busy", "--containers"]);
    assert!(
        containers.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["busy", "side", "90m", "57Mi"]),
        "{containers}"
    );

    // Each node: its running pods' sum and the system share.
    let placed = kubectl_ok(
        &s,
        &["get", "pods", "-o", "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{\"\\n\"}{end}"],
    );
    let mut expected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in placed.lines() {
        let Some((pod, node)) = line.split_once(' ') else { continue };
        let (milli, bytes) = if pod == "busy" { busy } else { web };
        let e = expected.entry(node.to_string()).or_insert((100, 128 * MI));
        *e = (e.0 + milli, e.1 + bytes);
    }
    let nodes = rows(&kubectl_ok(&s, &["top", "nodes"]), [0, 1, 3]);
    let expected: BTreeMap<String, (u64, u64)> = expected.into_iter().map(|(n, u)| (n, shown(u))).collect();
    assert_eq!(nodes, expected);
}
