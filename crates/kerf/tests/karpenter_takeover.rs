//! Taking over a cluster from Karpenter through `kerf simulate`: the NodePool, the EC2NodeClass
//! and the NodeClaims carry Karpenter's drift hashes (another algorithm than kerf's, versions
//! `v3` and `v4`). kerf replaces nothing for the change of algorithm; once it has stamped the
//! claims with its own hashes, a real change of the template still drifts them.

mod common;

use serde_json::Value;

/// A node Karpenter launched, with its NodeClaim as Karpenter annotated it.
fn karpenter_node(n: u32) -> String {
    format!(
        r#"
  - name: ip-10-9-0-{n}.us-west-2.compute.internal
    providerID: aws:///us-west-2a/i-{n:017x}
    labels: {{karpenter.sh/capacity-type: on-demand, karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: us-west-2a, kubernetes.io/arch: amd64, kubernetes.io/os: linux}}
    capacity: {{cpu: "2", memory: 8Gi, pods: "29"}}
    allocatable: {{cpu: 1930m, memory: 7000Mi, pods: "29"}}
    nodeClaim:
      apiVersion: karpenter.sh/v1
      kind: NodeClaim
      metadata:
        name: default-k{n}
        labels: {{karpenter.sh/nodepool: default}}
        annotations:
          karpenter.sh/nodepool-hash: "1234567890123456789"
          karpenter.sh/nodepool-hash-version: v3
          karpenter.k8s.aws/ec2nodeclass-hash: "9876543210987654321"
          karpenter.k8s.aws/ec2nodeclass-hash-version: v4
      spec:
        nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
        requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [default]}}]
"#
    )
}

/// The NodePool, with Karpenter's annotations; `team` is a template label (changing it is drift).
fn pool(team: &str) -> String {
    format!(
        "{{apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {{name: default, annotations: \
         {{karpenter.sh/nodepool-hash: \"1234567890123456789\", karpenter.sh/nodepool-hash-version: v3}}}}, \
         spec: {{template: {{metadata: {{labels: {{team: {team}}}}}, spec: {{nodeClassRef: {{group: karpenter.k8s.aws, \
         kind: EC2NodeClass, name: default}}, requirements: []}}}}, disruption: {{consolidateAfter: Never}}}}}}"
    )
}

/// The EC2NodeClass with the annotations Karpenter's hash controller wrote.
const CLASS: &str = "{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: default, annotations: \
    {karpenter.k8s.aws/ec2nodeclass-hash: \"9876543210987654321\", karpenter.k8s.aws/ec2nodeclass-hash-version: v4}}, \
    spec: {role: R, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{tags: {a: b}}], \
    securityGroupSelectorTerms: [{tags: {a: b}}]}}";

fn scenario(name: &str, later: &str) -> String {
    format!(
        "name: {name}\nnodes:{}{}\nsteps:\n  - apply: [{CLASS}, {}]\n  - wait: 30m\n{later}",
        karpenter_node(1),
        karpenter_node(2),
        pool("a")
    )
}

fn simulate(name: &str, yaml: &str) -> Value {
    common::simulate_report("takeover", name, yaml)
}

fn disruptions(r: &Value) -> &Vec<Value> {
    r["disruptions"].as_array().unwrap()
}

#[test]
fn karpenters_hashes_drift_nothing_when_kerf_takes_over() {
    let r = simulate("takeover", &scenario("takeover", ""));
    assert!(disruptions(&r).is_empty(), "nothing is replaced for the change of hash algorithm: {:#?}", disruptions(&r));
    assert_eq!(r["summary"]["nodeClaimsLaunched"], 0);
    let managed: Vec<&Value> = r["nodes"].as_array().unwrap().iter().filter(|n| n["nodePool"] == "default").collect();
    assert_eq!(managed.len(), 2);
    for n in managed {
        let blocked = n["disruptionBlocked"].as_str().unwrap_or_default();
        assert!(!blocked.contains("Drifted"), "{}: {blocked}", n["name"]);
    }
}

#[test]
fn a_real_template_change_still_drifts_the_nodes_karpenter_launched() {
    let later = format!("  - apply: [{}]\n  - wait: 30m\n", pool("b"));
    let r = simulate("takeover-then-change", &scenario("takeover-then-change", &later));
    let d = disruptions(&r);
    assert_eq!(d.len(), 2, "{d:#?}");
    for x in d {
        assert_eq!(x["reason"], "Drifted");
        assert!(x["atSeconds"].as_f64().unwrap() >= 1800.0, "only after the change at 30m: {x}");
        assert!(x["detail"].as_str().unwrap().contains("template changed"), "{x}");
    }
    let claims: Vec<&str> = d.iter().map(|x| x["nodeClaim"].as_str().unwrap()).collect();
    assert_eq!(claims.iter().filter(|c| c.starts_with("default-k")).count(), 2, "{claims:?}");
}
