//! A cluster handed over from Karpenter: its NodePool, EC2NodeClass and NodeClaims carry
//! Karpenter's drift hashes (versions `v3` and `v4`, another algorithm than kerf's). kerf writes
//! its own hashes and hash versions on the pool and the class, stamps the claims again with
//! them, and replaces nothing for the change of algorithm.

mod common;

use std::collections::BTreeMap;

use common::*;
use kerf_api::labels::{NODECLASS_HASH, NODECLASS_HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION};
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};

fn karpenter_node(n: u32) -> String {
    format!(
        r#"
  - name: ip-10-9-0-{n}
    providerID: aws:///us-west-2a/i-{n:017x}
    labels: {{karpenter.sh/capacity-type: on-demand, karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.large, topology.kubernetes.io/zone: us-west-2a, kubernetes.io/arch: amd64, kubernetes.io/os: linux}}
    capacity: {{cpu: "2", memory: 8Gi, pods: "29"}}
    nodeClaim:
      apiVersion: karpenter.sh/v1
      kind: NodeClaim
      metadata:
        name: default-k{n}
        labels: {{karpenter.sh/nodepool: default}}
        annotations: {{karpenter.sh/nodepool-hash: "11", karpenter.sh/nodepool-hash-version: v3, karpenter.k8s.aws/ec2nodeclass-hash: "22", karpenter.k8s.aws/ec2nodeclass-hash-version: v4}}
      spec:
        nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
        requirements: [{{key: karpenter.sh/nodepool, operator: In, values: [default]}}]
"#
    )
}

const APPLY: &str = r#"
      - apiVersion: karpenter.k8s.aws/v1
        kind: EC2NodeClass
        metadata:
          name: default
          annotations: {karpenter.k8s.aws/ec2nodeclass-hash: "33", karpenter.k8s.aws/ec2nodeclass-hash-version: v4}
        spec:
          role: r
          amiSelectorTerms: [{alias: al2023@latest}]
          subnetSelectorTerms: [{tags: {a: b}}]
          securityGroupSelectorTerms: [{tags: {a: b}}]
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata:
          name: default
          annotations: {karpenter.sh/nodepool-hash: "44", karpenter.sh/nodepool-hash-version: v3}
        spec:
          template:
            spec:
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
              requirements: []
          disruption: {consolidateAfter: Never}
"#;

fn annotations(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> BTreeMap<String, String> {
    meta.annotations.clone().unwrap_or_default()
}

#[test]
fn kerf_stamps_its_own_hashes_on_the_pool_the_class_and_karpenters_claims() {
    let yaml = format!(
        "name: karpenter-hashes\nnodes:{}{}\nsteps:\n  - apply:{APPLY}\n  - wait: 20m\n",
        karpenter_node(1),
        karpenter_node(2)
    );
    let (report, sim) = run_keeping(&yaml);
    assert!(report.disruptions.is_empty(), "{:#?}", report.disruptions);

    let cluster = sim.cluster();
    let pool: NodePool = cluster.get_obj(None, "default").expect("pool");
    let class: EC2NodeClass = cluster.get_obj(None, "default").expect("class");
    let pool_annotations = annotations(&pool.metadata);
    let class_annotations = annotations(&class.metadata);
    assert_eq!(pool_annotations[NODEPOOL_HASH], pool.template_hash());
    assert_eq!(pool_annotations[NODEPOOL_HASH_VERSION], kerf_api::hash::NODEPOOL_HASH_VERSION);
    assert_eq!(class_annotations[NODECLASS_HASH], class.static_hash());
    assert_eq!(class_annotations[NODECLASS_HASH_VERSION], kerf_api::hash::EC2NODECLASS_HASH_VERSION);
    assert!(kerf_api::hash::NODEPOOL_HASH_VERSION.starts_with("kerf-"), "never one of Karpenter's v1, v2, ...");

    for name in ["default-k1", "default-k2"] {
        let claim: NodeClaim = cluster.get_obj(None, name).expect("claim");
        let a = annotations(&claim.metadata);
        assert_eq!(a[NODEPOOL_HASH], pool.template_hash(), "{name}");
        assert_eq!(a[NODEPOOL_HASH_VERSION], kerf_api::hash::NODEPOOL_HASH_VERSION, "{name}");
        assert_eq!(a[NODECLASS_HASH], class.static_hash(), "{name}");
        assert_eq!(a[NODECLASS_HASH_VERSION], kerf_api::hash::EC2NODECLASS_HASH_VERSION, "{name}");
    }
}
