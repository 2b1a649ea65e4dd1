//! Which image a simulated instance boots, and `AMIDrift`: an instance launched from an image
//! its node class no longer resolves to has drifted, as the AWS provider judges it. The image is
//! the one of the class's last resolution whose requirements (architecture; OS and build for
//! Windows) the instance's labels meet; a class not resolved yet launches the placeholder
//! [`UNRESOLVED_IMAGE`], which is never judged.

use std::collections::BTreeMap;

use kerf_api::ec2nodeclass::AmiStatus;
use kerf_api::{EC2NodeClass, NodeClaim, Operator};

/// The image of an instance whose node class had not been resolved when it launched.
pub const UNRESOLVED_IMAGE: &str = "ami-kerf-sim";

/// The first of `amis` whose `In` requirements the instance's labels meet.
pub fn image_for(amis: &[AmiStatus], node_labels: &BTreeMap<String, String>) -> Option<String> {
    amis.iter()
        .find(|a| {
            a.requirements
                .iter()
                .filter(|r| r.operator == Operator::In)
                .all(|r| node_labels.get(&r.key).is_some_and(|v| r.values.contains(v)))
        })
        .map(|a| a.id.clone())
}

/// The providers' `AMIDrift` ([`crate::provider::ami_drift`]) for an instance that booted a
/// simulated image: the placeholder, and ids that are no AMI (kwok's), are not judged.
pub fn ami_drift(claim: &NodeClaim, node_class: &EC2NodeClass) -> Option<String> {
    let image = claim.status.as_ref()?.image_id.as_deref()?;
    let judged = image.starts_with("ami-") && image != UNRESOLVED_IMAGE;
    if !judged {
        return None;
    }
    crate::provider::ami_drift(claim, node_class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(alias: &str) -> EC2NodeClass {
        let yaml = format!(
            "metadata: {{name: c}}\nspec:\n  role: R\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  \
             securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n  amiSelectorTerms: [{{alias: {alias}}}]\n"
        );
        let mut nc: EC2NodeClass = serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{e}"));
        nc.status = Some(crate::sim::nodeclass::resolve(&nc, &["z".to_string()], crate::Timestamp::UNIX_EPOCH));
        nc
    }

    fn claim(image: &str) -> NodeClaim {
        let yaml = format!(
            "metadata: {{name: n}}\nspec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: c}}\n  \
             requirements: []\nstatus: {{imageID: {image}}}\n"
        );
        serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_instance_boots_the_image_of_its_architecture() {
        let nc = class("al2023@latest");
        let amis = &nc.status.as_ref().unwrap().amis;
        let arm = BTreeMap::from([(kerf_api::labels::ARCH.to_string(), "arm64".to_string())]);
        assert_eq!(image_for(amis, &arm).as_deref(), Some("ami-simal2023arm64"));
        assert_eq!(image_for(amis, &BTreeMap::new()), None);
    }

    #[test]
    fn a_changed_ami_selection_drifts_the_instances_of_the_old_image() {
        let before = class("al2023@latest");
        let image = before.status.as_ref().unwrap().amis[0].id.clone();
        assert_eq!(ami_drift(&claim(&image), &before), None);
        let after = class("bottlerocket@latest");
        assert_eq!(ami_drift(&claim(&image), &after).as_deref(), Some("AMIDrift"));
        // The placeholder of an unresolved class, and ids that are no AMI, are not judged.
        assert_eq!(ami_drift(&claim(UNRESOLVED_IMAGE), &after), None);
        assert_eq!(ami_drift(&claim("kwok"), &after), None);
    }
}
