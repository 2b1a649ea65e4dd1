//! An EC2NodeClass applied with the status a real cluster recorded (as `kerf snapshot` writes
//! it) launches with that status's subnets and images, not with what the simulated account's
//! own resolution finds (a subnet in every zone, images for every architecture), until the
//! class's spec changes.

mod common;

use common::{deployment, run};

const CLOUD: &str = r#"
cloud:
  region: us-west-2
  zones: [us-west-2a, us-west-2b, us-west-2c]
"#;

const POOL: &str = r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              requirements:
                - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
                - {key: karpenter.k8s.aws/instance-category, operator: In, values: [m]}
                - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: pinned}
"#;

/// A class selecting by tags, as most do, with the status the cluster recorded: its one subnet in
/// us-west-2b and an amd64 image. `role` varies the spec.
fn class(role: &str, with_status: bool) -> String {
    let status = if with_status {
        r#"
        status:
          subnets: [{id: subnet-0a1b2c3d4e5f67890, zone: us-west-2b, zoneID: usw2-az2}]
          securityGroups: [{id: sg-0a1b2c3d4e5f67890, name: nodes}]
          amis:
            - id: ami-0a1b2c3d4e5f67890
              name: golden-al2023-2024-11
              requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
          instanceProfile: prod-nodes"#
    } else {
        ""
    };
    format!(
        r#"
      - apiVersion: karpenter.k8s.aws/v1
        kind: EC2NodeClass
        metadata: {{name: pinned}}
        spec:
          role: {role}
          amiFamily: AL2023
          amiSelectorTerms: [{{tags: {{team: platform}}, owner: self}}]
          subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: prod}}}}]
          securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: prod}}}}]{status}
"#
    )
}

const ARM: &str = "\n              nodeSelector: {kubernetes.io/arch: arm64}";

#[test]
fn a_recorded_status_launches_only_into_its_subnets_zone_and_images_architecture() {
    let yaml = format!(
        "name: t\n{CLOUD}\nsteps:\n  - apply:\n{}{POOL}{}{}\n  - wait: 5m\n",
        class("prod", true),
        deployment("web", 6, "1", ""),
        deployment("arm", 2, "1", ARM)
    );
    let r = run(&yaml);
    assert!(!r.nodes.is_empty());
    for n in &r.nodes {
        assert_eq!(n.zone.as_deref(), Some("us-west-2b"), "only the recorded subnet's zone: {}", n.name);
        assert_eq!(n.labels.get("kubernetes.io/arch").map(String::as_str), Some("amd64"), "{}", n.name);
    }
    let web = r.pods.iter().filter(|p| p.name.starts_with("web"));
    assert!(web.clone().count() == 6 && web.into_iter().all(|p| p.node.is_some()));
    // No recorded image is for arm64.
    let arm: Vec<_> = r.pods.iter().filter(|p| p.name.starts_with("arm")).collect();
    assert!(arm.len() == 2 && arm.iter().all(|p| p.node.is_none()), "{arm:?}");
}

#[test]
fn without_a_recorded_status_the_account_finds_every_zone_and_both_architectures() {
    let yaml = format!(
        "name: t\n{CLOUD}\nsteps:\n  - apply:\n{}{POOL}{}{}\n  - wait: 5m\n",
        class("prod", false),
        deployment("web", 6, "1", ""),
        deployment("arm", 2, "1", ARM)
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods_pending, 0);
    assert!(r.nodes.iter().any(|n| n.labels.get("kubernetes.io/arch").map(String::as_str) == Some("arm64")));
}

#[test]
fn a_changed_spec_is_resolved_anew() {
    let yaml = format!(
        "name: t\n{CLOUD}\nsteps:\n  - apply:\n{}{POOL}{}\n  - wait: 5m\n  - apply:\n{}\n  - wait: 5m\n",
        class("prod", true),
        deployment("arm", 2, "1", ARM),
        class("other", false),
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods_pending, 0, "the arm64 image is found once the class is resolved anew");
}
