//! Static-drift hashes: a NodePool's template and an EC2NodeClass's launch settings, hashed so
//! that a NodeClaim can carry the value it was launched with (`karpenter.sh/nodepool-hash`,
//! `karpenter.k8s.aws/ec2nodeclass-hash`) and drift shows as a different value.
//!
//! As in Karpenter, fields that are checked dynamically instead (requirements, selector terms,
//! budgets) are left out, and the value is stable across map ordering and serialization.
//!
//! kerf's hash is not Karpenter's (another function over another encoding), so each value goes
//! with a hash version annotation naming kerf's algorithm. Two hashes are compared only when
//! both carry kerf's version; a NodeClaim stamped by Karpenter (or by a kerf whose algorithm
//! differed) is stamped again with the current hash and kerf's version instead of counting as
//! drifted, as Karpenter itself does when its hash version changes.

use serde_json::Value;

use crate::{EC2NodeClass, NodePool};

/// The value of `karpenter.sh/nodepool-hash-version` kerf writes with its template hash. Karpenter
/// writes `v1`, `v2`, `v3`, ... for its own algorithm; kerf's values start with `kerf-` so the two
/// never compare equal. Bump the number when the hashed fields or the encoding change: claims
/// carrying the old value are then stamped again rather than all seen as drifted.
pub const NODEPOOL_HASH_VERSION: &str = "kerf-1";
/// The value of `karpenter.k8s.aws/ec2nodeclass-hash-version` kerf writes with its node class
/// hash; see [`NODEPOOL_HASH_VERSION`].
pub const EC2NODECLASS_HASH_VERSION: &str = "kerf-1";

/// 64-bit FNV-1a: small, deterministic, good enough to tell configurations apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Hash of a JSON value; `serde_json` maps are ordered, so equal values hash equally.
fn hash_value(v: &Value) -> String {
    fnv1a(v.to_string().as_bytes()).to_string()
}

impl NodePool {
    /// The template's static-drift hash: labels, annotations, taints, startup taints, the node
    /// class reference, expireAfter and terminationGracePeriod (not requirements).
    pub fn template_hash(&self) -> String {
        let mut template = serde_json::to_value(&self.spec.template).unwrap_or(Value::Null);
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("requirements");
        }
        hash_value(&template)
    }
}

impl EC2NodeClass {
    /// The static-drift hash of the launch settings: everything in the spec except what is
    /// resolved and compared dynamically (subnet, security group, capacity reservation and AMI
    /// selection, amiFamily, ipPrefixCount).
    pub fn static_hash(&self) -> String {
        let mut spec = serde_json::to_value(&self.spec).unwrap_or(Value::Null);
        if let Some(obj) = spec.as_object_mut() {
            for dynamic in [
                "subnetSelectorTerms",
                "securityGroupSelectorTerms",
                "capacityReservationSelectorTerms",
                "amiSelectorTerms",
                "amiFamily",
                "ipPrefixCount",
            ] {
                obj.remove(dynamic);
            }
        }
        hash_value(&spec)
    }
}

#[cfg(test)]
mod tests {
    use crate::manifest;

    use super::*;

    fn pool(extra: &str) -> NodePool {
        let y = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: p}}\nspec:\n  template:\n    spec:\n      \
             requirements: [{{key: app, operator: In, values: [a]}}]\n      \
             nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}}\n{extra}"
        );
        manifest::decode(&serde_yaml_ng::from_str(&y).unwrap()).unwrap()
    }

    #[test]
    fn template_hash_changes_with_static_fields_only() {
        let base = pool("");
        assert_eq!(base.template_hash(), pool("").template_hash(), "deterministic");
        let mut more_reqs = base.clone();
        more_reqs.spec.template.spec.requirements.clear();
        assert_eq!(more_reqs.template_hash(), base.template_hash(), "requirements are checked dynamically");
        let mut other_budget = base.clone();
        other_budget.spec.disruption.budgets.clear();
        assert_eq!(other_budget.template_hash(), base.template_hash(), "budgets are not part of the template");
        let mut labelled = base.clone();
        labelled.spec.template.metadata.labels.insert("team".into(), "a".into());
        assert_ne!(labelled.template_hash(), base.template_hash());
        let mut renamed = base.clone();
        renamed.spec.template.spec.node_class_ref.name = "other".into();
        assert_ne!(renamed.template_hash(), base.template_hash());
        let never = pool("      expireAfter: Never\n");
        assert_ne!(never.template_hash(), base.template_hash());
    }

    #[test]
    fn ec2nodeclass_hash_ignores_dynamic_selection() {
        let y = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: d}\nspec:\n  role: R\n  \
                 amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{tags: {a: b}}]\n  \
                 securityGroupSelectorTerms: [{tags: {a: b}}]\n";
        let base: EC2NodeClass = manifest::decode(&serde_yaml_ng::from_str(y).unwrap()).unwrap();
        let mut other_amis = base.clone();
        other_amis.spec.ami_selector_terms[0].alias = Some("al2023@v20240807".into());
        assert_eq!(other_amis.static_hash(), base.static_hash());
        let mut tagged = base.clone();
        tagged.spec.tags.insert("team".into(), "a".into());
        assert_ne!(tagged.static_hash(), base.static_hash());
        let mut monitored = base.clone();
        monitored.spec.detailed_monitoring = Some(true);
        assert_ne!(monitored.static_hash(), base.static_hash());
    }
}
