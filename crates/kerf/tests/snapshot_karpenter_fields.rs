//! `kerf snapshot` of a cluster whose Karpenter objects carry fields kerf's types do not know
//! (as Karpenter v1.15 writes them): the snapshot leaves those fields out and says which, keeps
//! what kerf reads (a budget for reason `Unhealthy`, `status.nodeClassObservedGeneration`), and
//! the file it writes loads as a scenario.
//!
//! The cluster is a small fake API server on a loopback port that answers every list with what
//! it has of that kind (nothing, for most).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;

const NODE_POOL: &str = r#"{
  "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
  "metadata": {"name": "default", "resourceVersion": "7", "uid": "u1"},
  "spec": {
    "template": {"spec": {
      "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
      "requirements": [],
      "aFieldOfANewerKarpenter": {"x": 1}
    }},
    "disruption": {"budgets": [{"nodes": "10%"}, {"nodes": "1", "reasons": ["Unhealthy"]}]}
  },
  "status": {"nodeClassObservedGeneration": 4, "nodes": 0, "anotherNewStatus": true}
}"#;

const NODE_CLASS: &str = r#"{
  "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
  "metadata": {"name": "default", "resourceVersion": "5", "uid": "u2", "generation": 4},
  "spec": {
    "role": "R",
    "amiSelectorTerms": [{"alias": "al2023@latest"}],
    "subnetSelectorTerms": [{"tags": {"a": "b"}}],
    "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
    "kubelet": {"maxPods": 30, "shutdownGracePeriod": "30s"}
  }
}"#;

/// Answers each request on its own connection: `/version`, and every list (the items it holds
/// for nodepools and ec2nodeclasses, none for the rest).
fn fake_api_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).is_err() || header == "\r\n" || header.is_empty() {
                    break;
                }
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
            let body = if path.starts_with("/version") {
                r#"{"major": "1", "minor": "33", "gitVersion": "v1.33.0"}"#.to_string()
            } else {
                let items = if path.contains("/nodepools") {
                    NODE_POOL
                } else if path.contains("/ec2nodeclasses") {
                    NODE_CLASS
                } else {
                    ""
                };
                format!(
                    r#"{{"apiVersion": "v1", "kind": "List", "metadata": {{"resourceVersion": "9"}}, "items": [{items}]}}"#
                )
            };
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    addr
}

#[test]
fn fields_kerf_does_not_know_are_left_out_of_the_snapshot_and_named() {
    let addr = fake_api_server();
    let dir = std::env::temp_dir().join(format!("kerf-snapshot-fields-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://{addr}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: karpenter-cluster, context: {{cluster: c, user: u}}}}]\n\
             current-context: karpenter-cluster\n"
        ),
    )
    .unwrap();
    let out_file = dir.join("cluster.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("snapshot")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--out")
        .arg(&out_file)
        .output()
        .expect("run kerf snapshot");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kerf snapshot failed: {stderr}");
    for field in [
        "NodePool default: spec.template.spec.aFieldOfANewerKarpenter",
        "NodePool default: status.anotherNewStatus",
        "EC2NodeClass default: spec.kubelet.shutdownGracePeriod",
    ] {
        assert!(stderr.contains(field), "stderr does not name {field:?}: {stderr}");
    }
    assert!(stderr.contains("fields kerf does not read, left out"), "{stderr}");
    let written = std::fs::read_to_string(&out_file).unwrap();
    assert!(!written.contains("aFieldOfANewerKarpenter") && !written.contains("shutdownGracePeriod"), "{written}");
    assert!(written.contains("Unhealthy"), "the budget for node repair is kept: {written}");
    assert!(written.contains("maxPods: 30"), "{written}");
    // The file loads as a scenario (strictly, as any file a user hands to kerf).
    let sim = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", out_file.to_str().unwrap(), "--report", "json"])
        .output()
        .expect("run kerf simulate");
    assert!(sim.status.success(), "kerf simulate of the snapshot failed: {}", String::from_utf8_lossy(&sim.stderr));
    std::fs::remove_dir_all(&dir).ok();
}
