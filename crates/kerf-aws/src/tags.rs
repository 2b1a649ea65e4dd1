//! The tags kerf puts on what it creates, as Karpenter's AWS provider does, and the rule that
//! a node class's own `tags` may not override them.

use std::collections::BTreeMap;

use kerf_api::{EC2NodeClass, labels};

use crate::settings::AwsSettings;

/// `eks:eks-cluster-name`: the cluster, as EKS tags its own resources.
pub const EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
/// `karpenter.k8s.aws/cluster`: the cluster that owns a launch template.
pub const LAUNCH_TEMPLATE_CLUSTER: &str = "karpenter.k8s.aws/cluster";
/// The EC2 `Name` tag.
pub const NAME: &str = "Name";

/// Why a node class's `tags` cannot be used: it sets a key kerf owns.
pub fn restricted_tag_problem(cluster_name: &str, key: &str) -> Option<String> {
    let cluster_key = format!("kubernetes.io/cluster/{cluster_name}");
    let owned = [
        labels::NODE_POOL,
        labels::NODE_CLAIM,
        labels::AWS_EC2_NODE_CLASS,
        EKS_CLUSTER_NAME,
        LAUNCH_TEMPLATE_CLUSTER,
        cluster_key.as_str(),
    ];
    if owned.contains(&key) || key.starts_with("kubernetes.io/cluster/") {
        Some(format!("tag {key:?} is set by kerf and may not be given in spec.tags"))
    } else {
        None
    }
}

/// The tags of an instance (and its volumes and fleet request) launched for `node_claim` of
/// `node_pool`: the node class's `tags` under the ones kerf owns.
pub fn instance_tags(
    settings: &AwsSettings,
    node_class: &EC2NodeClass,
    node_pool: &str,
    node_claim: &str,
) -> BTreeMap<String, String> {
    let mut tags = node_class.spec.tags.clone();
    tags.insert(settings.cluster_tag_key(), "owned".to_string());
    tags.insert(EKS_CLUSTER_NAME.to_string(), settings.cluster_name.clone());
    tags.insert(labels::NODE_POOL.to_string(), node_pool.to_string());
    tags.insert(labels::NODE_CLAIM.to_string(), node_claim.to_string());
    tags.insert(labels::AWS_EC2_NODE_CLASS.to_string(), node_class.name().to_string());
    tags
}

/// The tags of a launch template kerf creates for `node_class`.
pub fn launch_template_tags(settings: &AwsSettings, node_class: &EC2NodeClass) -> BTreeMap<String, String> {
    let mut tags = node_class.spec.tags.clone();
    tags.insert(settings.cluster_tag_key(), "owned".to_string());
    tags.insert(EKS_CLUSTER_NAME.to_string(), settings.cluster_name.clone());
    tags.insert(LAUNCH_TEMPLATE_CLUSTER.to_string(), settings.cluster_name.clone());
    tags.insert(labels::AWS_EC2_NODE_CLASS.to_string(), node_class.name().to_string());
    tags
}

/// The tags of an instance profile kerf creates for `node_class`'s role.
pub fn instance_profile_tags(
    settings: &AwsSettings,
    region: &str,
    node_class: &EC2NodeClass,
) -> BTreeMap<String, String> {
    let mut tags = node_class.spec.tags.clone();
    tags.insert(settings.cluster_tag_key(), "owned".to_string());
    tags.insert(EKS_CLUSTER_NAME.to_string(), settings.cluster_name.clone());
    tags.insert(labels::AWS_EC2_NODE_CLASS.to_string(), node_class.name().to_string());
    tags.insert(labels::REGION.to_string(), region.to_string());
    tags
}

/// EC2 tags from a map, in key order.
pub fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<aws_sdk_ec2::types::Tag> {
    tags.iter().map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build()).collect()
}

/// A map from EC2 tags (tags without a key are skipped).
pub fn tag_map(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_class_tags_may_not_set_the_keys_kerf_owns() {
        assert!(restricted_tag_problem("prod", "kubernetes.io/cluster/prod").is_some());
        assert!(restricted_tag_problem("prod", "kubernetes.io/cluster/other").is_some());
        assert!(restricted_tag_problem("prod", "karpenter.sh/nodepool").is_some());
        assert!(restricted_tag_problem("prod", "eks:eks-cluster-name").is_some());
        assert!(restricted_tag_problem("prod", "team").is_none());
    }
}
