//! EC2NodeClass resolution and status against moto: subnets, security groups, AMIs (aliases
//! through SSM, IDs, names), the instance profile, and Karpenter's conditions.

mod common;

use common::*;
use kerf_api::Operator;
use kerf_aws::nodeclass::{self, CONDITION_READY};

fn condition<'a>(r: &'a nodeclass::ResolvedNodeClass, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = r.condition(type_).unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.as_str(), c.reason.as_deref().unwrap_or(""), c.message.as_deref().unwrap_or(""))
}

#[tokio::test]
async fn clients_reach_the_local_ec2_through_the_configured_endpoint() {
    let clients = clients().await;
    assert_eq!(clients.region(), "us-west-2");
    let zones = clients.ec2.describe_availability_zones().send().await.unwrap_or_else(|e| panic!("{e:?}"));
    assert!(zones.availability_zones().iter().any(|z| z.zone_name() == Some("us-west-2a")));
}

#[tokio::test]
async fn node_class_resolves_by_tags_and_reports_every_part_ready() {
    let clients = clients().await;
    let net = network(&clients, "resolve-tags", 11).await;
    role(&clients, "resolve-tags-node").await;
    let (provider, _clock) = provider(clients.clone(), "resolve-tags");
    let nc = node_class(
        "default",
        "resolve-tags",
        "  role: resolve-tags-node\n  amiSelectorTerms:\n    - alias: al2023@latest\n",
    );

    let r = provider.reconcile_node_class(&nc).await;
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let status = r.status();
    let mut subnet_ids: Vec<&str> = status.subnets.iter().map(|s| s.id.as_str()).collect();
    subnet_ids.sort();
    let mut want: Vec<&str> = net.subnets.iter().map(|(id, _)| id.as_str()).collect();
    want.sort();
    assert_eq!(subnet_ids, want);
    assert!(status.subnets.iter().all(|s| s.zone.starts_with("us-west-2") && s.zone_id.is_some()));
    assert_eq!(status.security_groups.len(), 1);
    assert_eq!(status.security_groups[0].id, net.security_group);
    assert_eq!(status.security_groups[0].name.as_deref(), Some(net.security_group_name.as_str()));
    let profile = status.instance_profile.clone().unwrap_or_default();
    assert!(profile.starts_with("resolve-tags_"), "{profile}");
    for type_ in
        ["SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady", "ValidationSucceeded", "Ready"]
    {
        assert_eq!(condition(&r, type_), ("True", type_, ""), "{type_}");
    }
    assert!(r.is_ready());
    // Conditions are listed by type, each stamped with the node class's generation.
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    let mut sorted = types.clone();
    sorted.sort();
    assert_eq!(types, sorted);
}

#[tokio::test]
async fn al2023_alias_resolves_one_image_per_architecture_from_ssm() {
    let clients = clients().await;
    network(&clients, "alias-al2023", 12).await;
    role(&clients, "alias-al2023-node").await;
    let (provider, _clock) = provider(clients.clone(), "alias-al2023");
    let nc = node_class(
        "default",
        "alias-al2023",
        "  role: alias-al2023-node\n  amiSelectorTerms:\n    - alias: al2023@latest\n",
    );
    let r = provider.reconcile_node_class(&nc).await;
    let m = moto();
    let x86 = m.images["/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"]
        .as_str()
        .unwrap_or_default();
    let arm = m.images["/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id"]
        .as_str()
        .unwrap_or_default();
    let amis = &r.status().amis;
    assert_eq!(amis.len(), 2, "{amis:?}");
    for (id, arch) in [(x86, "amd64"), (arm, "arm64")] {
        let ami = amis.iter().find(|a| a.id == id).unwrap_or_else(|| panic!("{id} not in {amis:?}"));
        let arch_req =
            ami.requirements.iter().find(|q| q.key == "kubernetes.io/arch").unwrap_or_else(|| panic!("{ami:?}"));
        assert_eq!((arch_req.operator, arch_req.values.clone()), (Operator::In, vec![arch.to_string()]));
        // The standard variant is for types without GPUs or accelerators.
        assert!(
            ami.requirements
                .iter()
                .any(|q| q.key == "karpenter.k8s.aws/instance-gpu-count" && q.operator == Operator::DoesNotExist)
        );
    }
}

#[tokio::test]
async fn bottlerocket_and_al2_aliases_read_their_own_parameters() {
    let clients = clients().await;
    network(&clients, "alias-other", 13).await;
    role(&clients, "alias-other-node").await;
    let (provider, _clock) = provider(clients.clone(), "alias-other");
    let m = moto();
    for (alias, x86_param) in [
        ("bottlerocket@latest", "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/latest/image_id"),
        ("al2@latest", "/aws/service/eks/optimized-ami/1.33/amazon-linux-2/recommended/image_id"),
    ] {
        let nc = node_class(
            "default",
            "alias-other",
            &format!("  role: alias-other-node\n  amiSelectorTerms:\n    - alias: {alias}\n"),
        );
        let r = provider.reconcile_node_class(&nc).await;
        let want = m.images[x86_param].as_str().unwrap_or_default();
        assert!(r.status().amis.iter().any(|a| a.id == want), "{alias}: {:?}", r.status().amis);
        assert_eq!(condition(&r, "AMIsReady").0, "True", "{alias}");
    }
}

#[tokio::test]
async fn amis_select_by_id_and_by_name_with_owner() {
    let clients = clients().await;
    network(&clients, "ami-terms", 14).await;
    role(&clients, "ami-terms-node").await;
    let (provider, _clock) = provider(clients.clone(), "ami-terms");
    let by_id = node_class(
        "default",
        "ami-terms",
        "  role: ami-terms-node\n  amiFamily: AL2023\n  amiSelectorTerms:\n    - id: ami-04681a1dbd79675a5\n",
    );
    let r = provider.reconcile_node_class(&by_id).await;
    let ids: Vec<&str> = r.status().amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, vec!["ami-04681a1dbd79675a5"]);
    let by_name = node_class(
        "default",
        "ami-terms",
        "  role: ami-terms-node\n  amiFamily: AL2023\n  amiSelectorTerms:\n    - name: al2022-ami-2022.0.20220728.1-kernel-5.15-arm64\n      owner: \"137112412989\"\n",
    );
    let r = provider.reconcile_node_class(&by_name).await;
    let ids: Vec<&str> = r.status().amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, vec!["ami-0e9271c829888680e"]);
    assert_eq!(r.status().amis[0].requirements[0].values, vec!["arm64".to_string()]);
}

#[tokio::test]
async fn subnets_by_id_and_security_groups_by_name() {
    let clients = clients().await;
    let net = network(&clients, "by-id", 15).await;
    role(&clients, "by-id-node").await;
    let (provider, _clock) = provider(clients.clone(), "by-id");
    let yaml = format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: by-id}}\nspec:\n  role: by-id-node\n  \
         amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{id: {}}}]\n  \
         securityGroupSelectorTerms: [{{name: {}}}]\n",
        net.subnets[1].0, net.security_group_name
    );
    let nc: kerf_api::EC2NodeClass = serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{e}"));
    let r = provider.reconcile_node_class(&nc).await;
    let subnets: Vec<(&str, &str)> = r.status().subnets.iter().map(|s| (s.id.as_str(), s.zone.as_str())).collect();
    assert_eq!(subnets, vec![(net.subnets[1].0.as_str(), "us-west-2b")]);
    let groups: Vec<&str> = r.status().security_groups.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(groups, vec![net.security_group.as_str()]);
    assert!(r.is_ready());
}

#[tokio::test]
async fn selectors_that_match_nothing_make_the_node_class_not_ready_with_karpenters_reasons() {
    let clients = clients().await;
    let (provider, _clock) = provider(clients.clone(), "nothing");
    let nc = node_class(
        "empty",
        "no-such-network",
        "  instanceProfile: no-such-profile\n  amiSelectorTerms:\n    - tags: {no-such: image}\n",
    );
    let r = provider.reconcile_node_class(&nc).await;
    assert_eq!(condition(&r, "SubnetsReady"), ("False", "SubnetsNotFound", "SubnetSelector did not match any Subnets"));
    assert_eq!(
        condition(&r, "SecurityGroupsReady"),
        ("False", "SecurityGroupsNotFound", "SecurityGroupSelector did not match any SecurityGroups")
    );
    assert_eq!(condition(&r, "AMIsReady"), ("False", "AMINotFound", "AMISelector did not match any AMIs"));
    assert_eq!(condition(&r, "InstanceProfileReady").0, "False");
    assert_eq!(condition(&r, "InstanceProfileReady").1, "InstanceProfileNotFound");
    assert_eq!(
        condition(&r, "ValidationSucceeded"),
        ("False", "DependenciesNotReady", "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution")
    );
    // Ready carries the first failing part (by type).
    assert_eq!(condition(&r, CONDITION_READY), ("False", "AMINotFound", "AMISelector did not match any AMIs"));
    assert!(!r.is_ready());
    assert!(r.status().subnets.is_empty() && r.status().amis.is_empty());
}

#[tokio::test]
async fn tags_that_collide_with_kerfs_fail_validation() {
    let clients = clients().await;
    network(&clients, "bad-tags", 16).await;
    role(&clients, "bad-tags-node").await;
    let (provider, _clock) = provider(clients.clone(), "bad-tags");
    let nc = node_class(
        "default",
        "bad-tags",
        "  role: bad-tags-node\n  amiSelectorTerms: [{alias: al2023@latest}]\n  tags: {karpenter.sh/nodepool: mine}\n",
    );
    let r = provider.reconcile_node_class(&nc).await;
    assert_eq!(condition(&r, "ValidationSucceeded").0, "False");
    assert_eq!(condition(&r, "ValidationSucceeded").1, "TagValidationFailed");
    assert_eq!(condition(&r, "SubnetsReady").0, "True");
    assert!(!r.is_ready());
}

#[tokio::test]
async fn the_role_gets_a_tagged_instance_profile_that_goes_with_the_node_class() {
    let clients = clients().await;
    network(&clients, "profile", 17).await;
    role(&clients, "profile-node").await;
    let (provider, _clock) = provider(clients.clone(), "profile");
    let nc = node_class(
        "default",
        "profile",
        "  role: profile-node\n  amiSelectorTerms: [{alias: al2023@latest}]\n  tags: {team: blue}\n",
    );
    let r = provider.reconcile_node_class(&nc).await;
    let name = r.status().instance_profile.clone().unwrap_or_default();
    let got = clients
        .iam
        .get_instance_profile()
        .instance_profile_name(&name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let profile = got.instance_profile().unwrap_or_else(|| panic!("no profile"));
    let roles: Vec<&str> = profile.roles().iter().map(|r| r.role_name()).collect();
    assert_eq!(roles, vec!["profile-node"]);
    let tags: std::collections::BTreeMap<&str, &str> = profile.tags().iter().map(|t| (t.key(), t.value())).collect();
    assert_eq!(tags.get("kubernetes.io/cluster/profile"), Some(&"owned"));
    assert_eq!(tags.get("karpenter.k8s.aws/ec2nodeclass"), Some(&"default"));
    assert_eq!(tags.get("eks:eks-cluster-name"), Some(&"profile"));
    assert_eq!(tags.get("team"), Some(&"blue"));

    // Reconciling again finds the same profile rather than making another.
    let again = provider.reconcile_node_class(&nc).await;
    assert_eq!(again.status().instance_profile.as_deref(), Some(name.as_str()));

    provider.finalize_node_class(&nc).await.unwrap_or_else(|e| panic!("{e}"));
    let gone = clients.iam.get_instance_profile().instance_profile_name(&name).send().await;
    assert!(gone.is_err(), "profile {name} still exists");
}
