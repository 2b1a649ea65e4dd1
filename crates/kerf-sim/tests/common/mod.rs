//! What the scenario tests share: the node class every pool here uses, Deployment and DaemonSet
//! manifests, and running a scenario given as YAML text.

#![allow(dead_code)]

use std::path::Path;

use kerf_cloud::sim::SimProvider;
use kerf_sim::Report;
use kerf_sim::driver::Simulation;
use kerf_sim::scenario::parse;
use kerf_sim::steps::{run_scenario, simulate};

/// An EC2NodeClass `default`, as an item of an `apply` list.
pub const NODE_CLASS: &str = r#"
      - apiVersion: karpenter.k8s.aws/v1
        kind: EC2NodeClass
        metadata: {name: default}
        spec:
          role: r
          amiSelectorTerms: [{alias: al2023@latest}]
          subnetSelectorTerms: [{tags: {a: b}}]
          securityGroupSelectorTerms: [{tags: {a: b}}]
"#;

pub fn run(yaml: &str) -> Report {
    let scenario = parse(Path::new("test.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    run_scenario(&scenario).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the scenario and keeps the finished simulation (its cluster's events, ...).
pub fn run_keeping(yaml: &str) -> (Report, Simulation<SimProvider>) {
    let scenario = parse(Path::new("test.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    simulate(&scenario).unwrap_or_else(|e| panic!("{e}"))
}

/// A Deployment of `replicas` pods requesting `cpu` each; `extra` is added to the pod spec.
pub fn deployment(name: &str, replicas: u32, cpu: &str, extra: &str) -> String {
    format!(
        r#"
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}}}
        spec:
          replicas: {replicas}
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}}}}}
            spec:{extra}
              containers:
                - name: c
                  image: i
                  resources: {{requests: {{cpu: "{cpu}"}}}}
"#
    )
}

/// A DaemonSet in kube-system whose pods ask for 100m; `extra` is added to the pod spec and
/// `container` to its container (e.g. `, ports: [...]`).
pub fn daemonset(name: &str, extra: &str, container: &str) -> String {
    format!(
        r#"
      - apiVersion: apps/v1
        kind: DaemonSet
        metadata: {{name: {name}, namespace: kube-system}}
        spec:
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}}}}}
            spec:{extra}
              containers: [{{name: c, image: i, resources: {{requests: {{cpu: 100m}}}}{container}}}]
"#
    )
}
